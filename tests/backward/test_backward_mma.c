/* test_backward_mma.c: the tensor-core backward kernels (cl/backward_mma.cl) against the double reference, and when
 * calls fall back to the portable kernels. On devices without matrix instructions flashcl can program (every CPU
 * implementation) the kernels run with their matrix instructions emulated; on an NVIDIA GPU of compute capability
 * >= 8.0 they run on the tensor cores. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backward_harness.h"

#define BHSD FLASHCL_LAYOUT_BHSD
#define BSHD FLASHCL_LAYOUT_BSHD

/* fp32 in 3xTF32 under the float tolerance rule: odd lengths around the
 * 16-row warp tiles and the 64-row work-groups, causal with fully masked
 * rows, GQA and MQA, both layouts, offsets (multiples of 4 floats). Two head
 * dims, 64 and 128: every head dim is one more cold build of each kernel,
 * about 20 s on rusticl; the kernels take HEAD_DIM only through the step
 * counts DIM_STEPS and DIM_TILES, which these two exercise. */
/* name, {batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, causal, scale (0: default), amplitude}, layout, offset */
static const bwd_case f32_cases[] = {
    {"3x199 d64", {1, 2, 2, 3, 199, 64, 0, 0.0f, 1.0f}, BSHD, 4},
    {"113x203 d64 causal", {2, 2, 2, 113, 203, 64, 1, 0.0f, 1.0f}, BHSD, 8},
    {"127x64 d64 causal gqa masked rows", {1, 2, 1, 127, 64, 64, 1, 0.0f, 1.0f}, BSHD, 0},
    {"70x70 d64 causal mqa", {2, 3, 1, 70, 70, 64, 1, 0.0f, 1.0f}, BHSD, 0},
    {"65x129 d128 causal gqa", {1, 4, 2, 65, 129, 128, 1, 0.0f, 1.0f}, BSHD, 4},
    {"200x130 d128", {1, 1, 1, 200, 130, 128, 0, 0.0f, 1.0f}, BHSD, 0},
    {"large logits 77x90 d64", {1, 2, 2, 77, 90, 64, 0, 0.0f, 6.0f}, BHSD, 0},
    {"large logits 91x50 d128 causal", {1, 2, 1, 91, 50, 128, 1, 0.0f, 6.0f}, BSHD, 4},
};

/* f16 and bf16 storage: the matrix unit takes P and dS rounded to the
 * storage type; the bound is still the portable kernels' (4 storage ulps of
 * each gradient's magnitude, test_backward_accuracy). */
static const struct {
    bwd_case c;
    flashcl_dtype dtype;
} storage_cases[] = {
    {{"f16 45x70 d64 causal gqa", {1, 2, 1, 45, 70, 64, 1, 0.0f, 1.0f}, BHSD, 0}, FLASHCL_DTYPE_F16},
    {{"f16 130x97 d64 batch 2", {2, 2, 2, 130, 97, 64, 0, 0.0f, 1.0f}, BHSD, 0}, FLASHCL_DTYPE_F16},
    {{"bf16 130x97 d128", {1, 2, 2, 130, 97, 128, 0, 0.0f, 1.0f}, BHSD, 0}, FLASHCL_DTYPE_BF16},
    {{"bf16 66x33 d128 causal masked rows", {1, 1, 1, 66, 33, 128, 1, 0.0f, 1.0f}, BHSD, 0}, FLASHCL_DTYPE_BF16},
};
#define STORAGE_ULPS 4.0

/* A context in the mode that runs the tensor-core kernels here (fp32 in
 * 3xTF32), and the tensor_cores value its calls should report. */
static flashcl_context *mma_context(int *expected) {
    flashcl_context *ctx = ts_context();
    const int real = flashcl_context_has_tensor_cores(ctx);
    ck_assert_int_eq(
        flashcl_context_set_tensor_cores(ctx, real ? FLASHCL_TENSOR_CORES_AUTO : FLASHCL_TENSOR_CORES_EMULATE),
        FLASHCL_SUCCESS);
    ck_assert_int_eq(flashcl_context_set_f32_precision(ctx, FLASHCL_F32_3XTF32), FLASHCL_SUCCESS);
    *expected = real ? 1 : 2;
    return ctx;
}

static int last_tensor_cores(flashcl_context *ctx) {
    flashcl_call_stats stats;
    ck_assert_int_eq(flashcl_last_call_stats(ctx, &stats), FLASHCL_SUCCESS);
    ck_assert_int_eq(stats.pass, FLASHCL_PASS_BACKWARD);
    return (int)stats.kernel;
}

static int on_llvmpipe(flashcl_context *ctx) {
    char name[256] = "";
    ck_assert_int_eq(clGetDeviceInfo(flashcl_context_device(ctx), CL_DEVICE_NAME, sizeof name - 1, name, NULL),
                     CL_SUCCESS);
    return strstr(name, "llvmpipe") != NULL;
}

/* Split between the two CPU implementations (ts_split_takes) by the program each case builds, which follows the
 * storage type and the head dim only (an emulated backward is 7-25 s of llvmpipe's time): the float32 cases at
 * d128 on rusticl, whose llvmpipe case needs that program anyway, those at d64 on POCL; the 16-bit cases by type,
 * f16 (d64) on rusticl and bf16 (d128) on POCL. Each implementation still meets both masks, both head dims and
 * every storage type. */
static int runs_here(const bwd_case *c) { return ts_split_takes(c->shape.head_dim == 128 ? 0 : 1, 0, 2); }

START_TEST(test_f32) {
    if (!runs_here(&f32_cases[_i])) return;
    int expected;
    flashcl_context *ctx = mma_context(&expected);
    bwd_run_and_check_on(ctx, &f32_cases[_i]);
    ck_assert_msg(last_tensor_cores(ctx) == expected, "%s: the tensor-core backward did not run",
                  f32_cases[_i].name);
    flashcl_context_free(ctx);
}
END_TEST

START_TEST(test_storage) {
    if (!ts_split_takes(0, storage_cases[_i].dtype == FLASHCL_DTYPE_BF16, 2)) return;
    int expected;
    flashcl_context *ctx = mma_context(&expected);
    bwd_check_storage(ctx, &storage_cases[_i].c, storage_cases[_i].dtype, STORAGE_ULPS);
    ck_assert_msg(last_tensor_cores(ctx) == expected, "%s: the tensor-core backward did not run",
                  storage_cases[_i].c.name);
    flashcl_context_free(ctx);
}
END_TEST

/* One query, one key: P = 1 and dS = dP - D, exactly 0 in exact arithmetic
 * (O is that V row), as the portable kernels compute it. Here dP comes from
 * the matrix unit and D from float fmas, so dS is a float rounding of
 * sum |dO V|, not 0: dQ = scale dS K must stay within a few of those
 * roundings (dK and dV follow the usual rule). */
START_TEST(test_single_key) {
    /* d128: the float32 program the llvmpipe case builds (one emulated build less there). */
    const bwd_case c = {"1x1 d128", {1, 1, 1, 1, 1, 128, 0, 0.0f, 1.0f}, BHSD, 0};
    int expected;
    flashcl_context *ctx = mma_context(&expected);
    bwd_host h;
    bwd_device d;
    bwd_host_alloc(&c, 1, &h);
    bwd_device_create(ctx, &c, &h, &d);
    ck_assert_int_eq(bwd_run_forward(ctx, &c, &d), FLASHCL_SUCCESS);
    ck_assert_int_eq(bwd_run_backward(ctx, &c, &d), FLASHCL_SUCCESS);
    ck_assert_int_eq(last_tensor_cores(ctx), expected);
    bwd_read_results(ctx, &d, &h);
    double products = 0.0, key_max = 0.0;
    for (int i = 0; i < c.shape.head_dim; ++i) {
        products += fabs((double)h.dout[i] * h.v[i]);
        key_max = fmax(key_max, fabs(h.k[i]));
    }
    const double bound = 4.0 * FLT_EPSILON * products * key_max / sqrt((double)c.shape.head_dim);
    for (int i = 0; i < c.shape.head_dim; ++i)
        ck_assert_msg(fabs(h.dq[i]) <= bound, "dq[%d] = %g exceeds %g", i, (double)h.dq[i], bound);
    ck_assert_msg(bound < 1e-5, "the bound %g is not small", bound);
    bwd_device_free(&d);
    bwd_host_free(&h);
    flashcl_context_free(ctx);
}
END_TEST

/* Same inputs, same bits: no atomics, every sum in a fixed order. */
START_TEST(test_repeatable) {
    const bwd_case c = {"repeat 96x80 d128 causal gqa", {1, 4, 2, 96, 80, 128, 1, 0.0f, 1.0f}, BHSD, 0};
    int expected;
    flashcl_context *ctx = mma_context(&expected);
    bwd_host first, second;
    bwd_host_alloc(&c, 5, &first);
    bwd_host_alloc(&c, 5, &second);
    bwd_device d;
    bwd_device_create(ctx, &c, &first, &d);
    ck_assert_int_eq(bwd_run_forward(ctx, &c, &d), FLASHCL_SUCCESS);
    ck_assert_int_eq(bwd_run_backward(ctx, &c, &d), FLASHCL_SUCCESS);
    ck_assert_int_eq(last_tensor_cores(ctx), expected);
    bwd_read_results(ctx, &d, &first);
    bwd_poison_gradients(ctx, &d);
    ck_assert_int_eq(bwd_run_backward(ctx, &c, &d), FLASHCL_SUCCESS);
    bwd_read_results(ctx, &d, &second);
    const size_t nq = ts_case_q_count(&c.shape), nkv = ts_case_kv_count(&c.shape);
    ck_assert(memcmp(first.dq, second.dq, nq * sizeof(float)) == 0);
    ck_assert(memcmp(first.dk, second.dk, nkv * sizeof(float)) == 0);
    ck_assert(memcmp(first.dv, second.dv, nkv * sizeof(float)) == 0);
    bwd_device_free(&d);
    bwd_host_free(&first);
    bwd_host_free(&second);
    flashcl_context_free(ctx);
}
END_TEST

/* Calls the tensor-core kernels do not take run the portable ones, and say
 * so (tensor_cores 0), still correct. */
static void expect_portable(flashcl_context *ctx, const bwd_case *c, const char *why) {
    bwd_run_and_check_on(ctx, c);
    ck_assert_msg(last_tensor_cores(ctx) == 0, "%s: %s should run the portable backward", c->name, why);
}

START_TEST(test_fallbacks) {
    int expected;
    flashcl_context *ctx = mma_context(&expected);
    const bwd_case odd_dim = {"fallback d40", {1, 1, 1, 33, 47, 40, 1, 0.0f, 1.0f}, BHSD, 0};
    expect_portable(ctx, &odd_dim, "a head dim not a multiple of 16");
    const bwd_case misaligned = {"fallback offset 3", {1, 1, 1, 33, 47, 64, 0, 0.0f, 1.0f}, BHSD, 3};
    expect_portable(ctx, &misaligned, "an offset not a multiple of 4 floats");
    ck_assert_int_eq(flashcl_context_set_f32_precision(ctx, FLASHCL_F32_FULL), FLASHCL_SUCCESS);
    const bwd_case full = {"fallback f32 full precision", {1, 1, 1, 33, 47, 64, 0, 0.0f, 1.0f}, BHSD, 0};
    expect_portable(ctx, &full, "fp32 at full precision");
    flashcl_context_free(ctx);
}
END_TEST

/* On llvmpipe, whose loops stop silently after 65535 iterations in all, an
 * emulated call whose work-groups would run more than 2048 emulated products
 * runs the portable kernels (src/backward_mma.c). fp32 d128 there streams 16
 * rows per block: 128 products per dK/dV block (limit 16 query blocks, 256
 * queries) and 96 per dQ block (limit 21 key blocks, 336 keys). Both sides
 * of both limits give the right gradients, and the long calls report the
 * portable kernels. */
START_TEST(test_llvmpipe_long_sequences) {
    int expected;
    flashcl_context *ctx = mma_context(&expected);
    if (expected != 2 || !on_llvmpipe(ctx)) {
        flashcl_context_free(ctx);
        return; /* the guard concerns llvmpipe's emulation only; other devices run the other cases */
    }
    const bwd_case keys_at_limit = {"llvmpipe 336 keys", {1, 1, 1, 48, 336, 128, 0, 0.0f, 1.0f}, BHSD, 0};
    bwd_run_and_check_on(ctx, &keys_at_limit);
    ck_assert_int_eq(last_tensor_cores(ctx), 2);
    const bwd_case queries_at_limit = {"llvmpipe 256 queries", {1, 1, 1, 256, 48, 128, 0, 0.0f, 1.0f}, BHSD, 0};
    bwd_run_and_check_on(ctx, &queries_at_limit);
    ck_assert_int_eq(last_tensor_cores(ctx), 2);
    const bwd_case more_keys = {"llvmpipe 337 keys", {1, 1, 1, 48, 337, 128, 0, 0.0f, 1.0f}, BHSD, 0};
    expect_portable(ctx, &more_keys, "a long emulated dQ call on llvmpipe");
    const bwd_case more_queries = {"llvmpipe 2 x 129 queries gqa", {1, 2, 1, 129, 48, 128, 0, 0.0f, 1.0f}, BHSD, 0};
    expect_portable(ctx, &more_queries, "a long emulated dK/dV call on llvmpipe (GQA counts every query head)");
    flashcl_context_free(ctx);
}
END_TEST

static Suite *backward_mma_suite(void) {
    Suite *s = suite_create("backward_mma");
    TCase *tc = tcase_create("f32_3xtf32");
    tcase_set_timeout(tc, TS_CASE_TIMEOUT);
    tcase_add_loop_test(tc, test_f32, 0, (int)(sizeof f32_cases / sizeof f32_cases[0]));
    suite_add_tcase(s, tc);
    tc = tcase_create("storage");
    tcase_set_timeout(tc, TS_CASE_TIMEOUT);
    tcase_add_loop_test(tc, test_storage, 0, (int)(sizeof storage_cases / sizeof storage_cases[0]));
    suite_add_tcase(s, tc);
    tc = tcase_create("behaviour");
    tcase_set_timeout(tc, TS_CASE_TIMEOUT);
    tcase_add_test(tc, test_single_key);
    tcase_add_test(tc, test_repeatable);
    tcase_add_test(tc, test_fallbacks);
    tcase_add_test(tc, test_llvmpipe_long_sequences);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    ts_sweep_announce("backward_mma");
    SRunner *runner = srunner_create(backward_mma_suite());
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
