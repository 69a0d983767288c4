/* test_forward_mma.c: the tensor-core forward kernel (cl/forward_mma.cl) against the double reference, and when
 * calls fall back to the portable kernel. On devices without matrix instructions flashcl can program (every CPU
 * implementation) the kernel runs with its matrix instructions emulated; on an NVIDIA GPU of compute capability
 * >= 8.0 it runs on the tensor cores. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

/* Every head dim the kernel takes, docs/testing.md's odd pairs, lengths around
 * its 16-row warp tiles and 64-row groups, causal with seqlen_q > seqlen_k
 * (fully masked top rows), GQA and MQA. */
static const ts_case sweep[] = {
    {1, 2, 2, 1, 1, 64, 0, 0, 1},       {2, 4, 2, 1, 239, 16, 1, 0, 1},    {1, 2, 2, 3, 799, 32, 0, 0, 1},
    {1, 3, 1, 113, 203, 48, 1, 0, 1},   {1, 2, 1, 127, 512, 80, 0, 0, 1},  {2, 2, 2, 128, 217, 96, 1, 0, 1},
    {1, 2, 2, 255, 256, 112, 0, 0, 1},  {1, 2, 2, 512, 256, 128, 1, 0, 1}, {1, 1, 1, 1023, 1024, 64, 1, 0, 1},
    {1, 1, 1, 1024, 1023, 128, 0, 0, 1}, {1, 2, 2, 200, 100, 64, 1, 0, 1}, {1, 2, 2, 17, 15, 16, 1, 0, 1},
    {1, 1, 1, 65, 63, 64, 1, 0, 1},     {1, 1, 1, 63, 65, 64, 0, 0, 1},    {1, 2, 2, 77, 91, 32, 0, 0.3f, 1},
    {2, 2, 1, 33, 47, 128, 1, 1.7f, 1},
};
#define SWEEP_COUNT ((int)(sizeof sweep / sizeof sweep[0]))

/* A context in the mode that runs the tensor-core kernel here (fp32 in
 * 3xTF32; the sweep's few-row cases would otherwise run the decode kernel),
 * and the tensor_cores value its calls should report. FLASHCL_WGMMA=0: on an
 * H100 the d64 half and bfloat16 cases would otherwise run the wgmma forward
 * (test_forward_wgmma's), which reports the same kernel kind. */
static flashcl_context *mma_context(int *expected) {
    ck_assert_int_eq(setenv("FLASHCL_WGMMA", "0", 1), 0);
    flashcl_context *ctx = ts_context();
    ck_assert_int_eq(flashcl_context_set_decode_kernel(ctx, 0), FLASHCL_SUCCESS);
    const int real = flashcl_context_has_tensor_cores(ctx);
    ck_assert_int_eq(
        flashcl_context_set_tensor_cores(ctx, real ? FLASHCL_TENSOR_CORES_AUTO : FLASHCL_TENSOR_CORES_EMULATE),
        FLASHCL_SUCCESS);
    ck_assert_int_eq(flashcl_context_set_f32_precision(ctx, FLASHCL_F32_3XTF32), FLASHCL_SUCCESS);
    *expected = real ? 1 : 2;
    return ctx;
}

static int on_llvmpipe(flashcl_context *ctx) {
    char name[256] = "";
    ck_assert_int_eq(clGetDeviceInfo(flashcl_context_device(ctx), CL_DEVICE_NAME, sizeof name - 1, name, NULL),
                     CL_SUCCESS);
    return strstr(name, "llvmpipe") != NULL;
}

static int last_tensor_cores(flashcl_context *ctx) {
    flashcl_call_stats stats;
    ck_assert_int_eq(flashcl_last_call_stats(ctx, &stats), FLASHCL_SUCCESS);
    return (int)stats.kernel;
}

/* Runs p in one placement, checks it against the reference and that the
 * kernel that ran is the expected one. */
static void run_checked(flashcl_context *ctx, const ts_problem *p, const ts_placements *place, const char *name,
                        int expected_tensor_cores) {
    float *o = malloc(p->q_count * sizeof *o), *lse = malloc(p->lse_count * sizeof *lse);
    ck_assert(o && lse);
    const flashcl_attention_desc *d = &p->desc;
    char label[256];
    snprintf(label, sizeof label, "B%d Hq%d Hkv%d Sq%d Sk%d D%d %s dtype %d, %s", d->batch, d->heads_q, d->heads_kv,
             d->seqlen_q, d->seqlen_k, d->head_dim, d->causal ? "causal" : "full", (int)d->dtype, name);
    ts_run_forward(ctx, p, place, o, lse);
    /* On llvmpipe, calls over 32 key blocks run the portable kernel instead of
     * the emulation (test_many_key_blocks); only calls over 512 keys can be. */
    if (expected_tensor_cores == 2 && d->seqlen_k > 512 && on_llvmpipe(ctx) && last_tensor_cores(ctx) == 0)
        expected_tensor_cores = 0;
    ck_assert_msg(last_tensor_cores(ctx) == expected_tensor_cores, "%s: tensor_cores %d, expected %d", label,
                  last_tensor_cores(ctx), expected_tensor_cores);
    ts_check_forward(p, o, lse, label);
    free(o);
    free(lse);
}

/* Every sweep case in every storage type is a kernel build of its own (head dim x type); split between the two
 * CPU implementations (ts_split_takes): case i in type i % 3 on rusticl, in the other two on POCL. */
static void run_case(const ts_case *c, flashcl_dtype dtype, uint64_t seed) {
    if (!ts_split_takes((int)(c - sweep), (int)dtype, 3)) return;
    int expected;
    flashcl_context *ctx = mma_context(&expected);
    const flashcl_attention_desc d = ts_case_desc(c, dtype);
    ts_problem p;
    ts_problem_init(&p, &d, seed, c->amplitude);
    const ts_placements bhsd = ts_uniform_placements(FLASHCL_LAYOUT_BHSD, 0, 0);
    run_checked(ctx, &p, &bhsd, "BHSD contiguous", expected);
    /* Offsets and padding that keep rows 16-byte aligned: 8 half values, 4 floats. */
    const ts_placements bshd = ts_uniform_placements(FLASHCL_LAYOUT_BSHD, 8, 8);
    run_checked(ctx, &p, &bshd, "BSHD offset 8 pad 8", expected);
    if (dtype == FLASHCL_DTYPE_F32) {
        const ts_placements bshd4 = ts_uniform_placements(FLASHCL_LAYOUT_BSHD, 4, 4);
        run_checked(ctx, &p, &bshd4, "BSHD offset 4 pad 4", expected);
    }
    ts_problem_free(&p);
    flashcl_context_free(ctx);
}

START_TEST(test_half_sweep) { run_case(&sweep[_i], FLASHCL_DTYPE_F16, 9000u + (uint64_t)_i); }
END_TEST

START_TEST(test_bfloat16_sweep) { run_case(&sweep[_i], FLASHCL_DTYPE_BF16, 9100u + (uint64_t)_i); }
END_TEST

/* Float data in 3xTF32, held to the same rule (k = 2) as the portable kernel. */
START_TEST(test_float_sweep) { run_case(&sweep[_i], FLASHCL_DTYPE_F32, 9600u + (uint64_t)_i); }
END_TEST

/* Scores far beyond 88 (exp overflows in float): the running maximum
 * must be subtracted first. */
START_TEST(test_large_logits) {
    const ts_case c = {1, 2, 2, 150, 170, 64, _i & 1, 2.0f, 3};
    int expected;
    flashcl_context *ctx = mma_context(&expected);
    const flashcl_attention_desc d = ts_case_desc(&c, _i < 2 ? FLASHCL_DTYPE_F16 : FLASHCL_DTYPE_F32);
    ts_problem p;
    ts_problem_init(&p, &d, 9200u + (uint64_t)_i, c.amplitude);
    double max_lse = -INFINITY;
    for (size_t i = 0; i < p.lse_count; ++i) max_lse = fmax(max_lse, p.lse_ref[i]);
    ck_assert_msg(max_lse > 88.0, "the large-logit case reaches only %g", max_lse);
    p.check_target = 0;
    const ts_placements bhsd = ts_uniform_placements(FLASHCL_LAYOUT_BHSD, 0, 0);
    run_checked(ctx, &p, &bhsd, "large logits", expected);
    ts_problem_free(&p);
    flashcl_context_free(ctx);
}
END_TEST

/* Many key blocks, in float at head_dim 128 (the most matrix instructions
 * per block). Mesa's llvmpipe ends a kernel's loops silently after 65535
 * iterations per work-item in all, so there the emulation takes at most 32
 * key blocks (src/forward_mma.c) and longer calls run the portable kernel:
 * 512 keys are at most 32 blocks of any width, 4096 at least 32 blocks of
 * 128. Elsewhere both run the tensor-core kernel. */
START_TEST(test_many_key_blocks) {
    const ts_case c = {1, 1, 1, 16, _i == 0 ? 512 : 4096, 128, 0, 0, 1};
    int expected;
    flashcl_context *ctx = mma_context(&expected);
    if (_i == 1 && expected == 2 && on_llvmpipe(ctx)) expected = 0;
    const flashcl_attention_desc d = ts_case_desc(&c, FLASHCL_DTYPE_F32);
    ts_problem p;
    ts_problem_init(&p, &d, 9700u + (uint64_t)_i, c.amplitude);
    const ts_placements bhsd = ts_uniform_placements(FLASHCL_LAYOUT_BHSD, 0, 0);
    run_checked(ctx, &p, &bhsd, "many key blocks", expected);
    ts_problem_free(&p);
    flashcl_context_free(ctx);
}
END_TEST

/* Twice the same call writes the same bits. */
START_TEST(test_repeatable) {
    const ts_case c = {1, 2, 1, 150, 230, 64, 1, 0, 1};
    int expected;
    flashcl_context *ctx = mma_context(&expected);
    const flashcl_attention_desc d = ts_case_desc(&c, _i == 0 ? FLASHCL_DTYPE_BF16 : FLASHCL_DTYPE_F32);
    ts_problem p;
    ts_problem_init(&p, &d, 9300u + (uint64_t)_i, 1.0f);
    float *first = malloc(p.q_count * sizeof *first), *second = malloc(p.q_count * sizeof *second);
    float *lse = malloc(p.lse_count * sizeof *lse);
    ck_assert(first && second && lse);
    const ts_placements bhsd = ts_uniform_placements(FLASHCL_LAYOUT_BHSD, 0, 0);
    ts_run_forward(ctx, &p, &bhsd, first, lse);
    ts_run_forward(ctx, &p, &bhsd, second, lse);
    ck_assert_int_eq(last_tensor_cores(ctx), expected);
    for (size_t i = 0; i < p.q_count; ++i)
        ck_assert_msg(first[i] == second[i], "O[%zu] differs between runs: %g, %g", i, (double)first[i],
                      (double)second[i]);
    free(first), free(second), free(lse);
    ts_problem_free(&p);
    flashcl_context_free(ctx);
}
END_TEST

/* Calls the kernel does not take run the portable kernel, still correct:
 * a head dim not a multiple of 16 or above 128, a row not 16-byte aligned
 * (half or float), a forced plan, every call with the mode off, and float
 * data at the default full fp32 precision. Each is a portable build of its own: even ones on rusticl, odd ones on
 * POCL (ts_split_takes). */
START_TEST(test_fallbacks) {
    if (!ts_split_takes(_i, 0, 2)) return;
    int expected;
    flashcl_context *ctx = mma_context(&expected);
    ts_case c = {1, 2, 2, 70, 90, 64, 1, 0, 1};
    flashcl_dtype dtype = FLASHCL_DTYPE_F16;
    ts_placements place = ts_uniform_placements(FLASHCL_LAYOUT_BHSD, 0, 0);
    const char *name = "";
    switch (_i) {
    case 0:
        dtype = FLASHCL_DTYPE_F32, name = "float offset 2";
        place = ts_uniform_placements(FLASHCL_LAYOUT_BSHD, 2, 0);
        break;
    case 1: c.head_dim = 40, name = "head_dim 40"; break;
    case 2: c.head_dim = 160, name = "head_dim 160"; break;
    case 3: place = ts_uniform_placements(FLASHCL_LAYOUT_BSHD, 4, 0), name = "offset 4"; break;
    case 4: place = ts_uniform_placements(FLASHCL_LAYOUT_BHSD, 0, 2), name = "pad 2"; break;
    case 5: {
        flashcl_attention_desc d = ts_case_desc(&c, dtype);
        flashcl_plan plan;
        flashcl_device_limits limits;
        ck_assert_int_eq(flashcl_context_limits(ctx, &limits), FLASHCL_SUCCESS);
        ck_assert_int_eq(flashcl_plan_choose(&limits, FLASHCL_PASS_FORWARD, d.head_dim, d.dtype, d.causal, &plan),
                         FLASHCL_SUCCESS);
        ck_assert_int_eq(flashcl_context_force_plan(ctx, FLASHCL_PASS_FORWARD, &plan), FLASHCL_SUCCESS);
        name = "forced plan";
        break;
    }
    case 6:
        ck_assert_int_eq(flashcl_context_set_tensor_cores(ctx, FLASHCL_TENSOR_CORES_OFF), FLASHCL_SUCCESS);
        name = "mode off";
        break;
    case 7:
        ck_assert_int_eq(flashcl_context_set_tensor_cores(ctx, FLASHCL_TENSOR_CORES_OFF), FLASHCL_SUCCESS);
        dtype = FLASHCL_DTYPE_F32, name = "float, mode off";
        break;
    default:
        ck_assert_int_eq(flashcl_context_set_f32_precision(ctx, FLASHCL_F32_FULL), FLASHCL_SUCCESS);
        dtype = FLASHCL_DTYPE_F32, name = "float, full precision";
        break;
    }
    const flashcl_attention_desc d = ts_case_desc(&c, dtype);
    ts_problem p;
    ts_problem_init(&p, &d, 9400u + (uint64_t)_i, 1.0f);
    run_checked(ctx, &p, &place, name, 0);
    ts_problem_free(&p);
    flashcl_context_free(ctx);
}
END_TEST

/* AUTO uses matrix units only where the device has them; bad modes fail. */
START_TEST(test_modes) {
    flashcl_context *ctx = ts_context();
    ck_assert_int_eq(flashcl_context_set_tensor_cores(ctx, (flashcl_tensor_cores)7), FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_ptr_ne(strstr(flashcl_last_error(ctx), "tensor-core mode"), NULL);
    ck_assert_int_eq(flashcl_context_set_tensor_cores(NULL, FLASHCL_TENSOR_CORES_OFF), FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(flashcl_context_has_tensor_cores(NULL), 0);
    ck_assert_int_eq(flashcl_context_set_f32_precision(ctx, (flashcl_f32_precision)5), FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_ptr_ne(strstr(flashcl_last_error(ctx), "fp32 precision"), NULL);
    ck_assert_int_eq(flashcl_context_set_f32_precision(NULL, FLASHCL_F32_FULL), FLASHCL_ERROR_INVALID_ARGUMENT);
    const ts_case c = {1, 1, 1, 40, 50, 32, 0, 0, 1};
    const flashcl_attention_desc d = ts_case_desc(&c, FLASHCL_DTYPE_F16);
    ts_problem p;
    ts_problem_init(&p, &d, 9500u, 1.0f);
    const ts_placements bhsd = ts_uniform_placements(FLASHCL_LAYOUT_BHSD, 0, 0);
    run_checked(ctx, &p, &bhsd, "default mode", flashcl_context_has_tensor_cores(ctx) ? 1 : 0);
    ts_problem_free(&p);
    flashcl_context_free(ctx);
}
END_TEST

static Suite *mma_suite(void) {
    Suite *s = suite_create("forward_mma");
    TCase *tc = tcase_create("tensor_cores");
    tcase_set_timeout(tc, TS_CASE_TIMEOUT);
    tcase_add_loop_test(tc, test_half_sweep, 0, SWEEP_COUNT);
    tcase_add_loop_test(tc, test_bfloat16_sweep, 0, SWEEP_COUNT);
    tcase_add_loop_test(tc, test_float_sweep, 0, SWEEP_COUNT);
    tcase_add_loop_test(tc, test_large_logits, 0, 4);
    tcase_add_loop_test(tc, test_repeatable, 0, 2);
    tcase_add_loop_test(tc, test_many_key_blocks, 0, 2);
    tcase_add_loop_test(tc, test_fallbacks, 0, 9);
    tcase_add_test(tc, test_modes);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    ts_sweep_announce("forward_mma");
    SRunner *runner = srunner_create(mma_suite());
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
