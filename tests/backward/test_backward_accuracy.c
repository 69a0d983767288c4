/* test_backward_accuracy.c: gradients against the double reference over odd shapes, head dims, layouts, GQA, large logits. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attention_reference.h"
#include "backward_harness.h"

#define BHSD FLASHCL_LAYOUT_BHSD
#define BSHD FLASHCL_LAYOUT_BSHD

/* name, batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, causal, layout, offset, input scale */
static const bwd_case shape_cases[] = {
    {"1x1 d16", 1, 1, 1, 1, 1, 16, 0, BHSD, 0, 1.0f},
    {"1x1 d1 causal offset", 1, 1, 1, 1, 1, 1, 1, BSHD, 3, 1.0f},
    {"3x799 d40", 1, 2, 2, 3, 799, 40, 0, BSHD, 5, 1.0f},
    {"3x799 d40 causal", 1, 1, 1, 3, 799, 40, 1, BHSD, 0, 1.0f},
    {"113x203 d59 causal", 2, 2, 2, 113, 203, 59, 1, BHSD, 7, 1.0f},
    {"127x64 d111 causal gqa masked rows", 1, 2, 1, 127, 64, 111, 1, BSHD, 0, 1.0f},
    {"203x113 d256", 1, 2, 2, 203, 113, 256, 0, BHSD, 11, 1.0f},
    {"90x40 d256 causal masked rows", 1, 1, 1, 90, 40, 256, 1, BSHD, 1, 1.0f},
    {"65x129 d96 causal gqa", 1, 4, 2, 65, 129, 96, 1, BSHD, 1, 1.0f},
    {"33x31 d128 causal", 1, 1, 1, 33, 31, 128, 1, BHSD, 0, 1.0f},
    {"48x80 d160", 1, 2, 2, 48, 80, 160, 0, BSHD, 2, 1.0f},
    {"70x70 d16 causal mqa", 2, 3, 1, 70, 70, 16, 1, BHSD, 0, 1.0f},
    {"100x60 d1 causal masked rows", 1, 1, 1, 100, 60, 1, 1, BSHD, 0, 1.0f},
    {"129x128 d64 causal", 1, 2, 2, 129, 128, 64, 1, BHSD, 9, 1.0f},
};

/* Scores well past 88, where exp overflows in float: the recomputation must
 * subtract the LSE first. q and k in [-6, 6] give |scale q.k| up to ~280. */
static const bwd_case large_logit_cases[] = {
    {"large logits 77x90 d64", 1, 2, 2, 77, 90, 64, 0, BHSD, 0, 6.0f},
    {"large logits 91x50 d59 causal", 1, 2, 1, 91, 50, 59, 1, BSHD, 4, 6.0f},
};

START_TEST(test_shapes) { bwd_run_and_check(&shape_cases[_i], NULL); }
END_TEST

START_TEST(test_large_logits) { bwd_run_and_check(&large_logit_cases[_i], NULL); }
END_TEST

/* Storage rounding of the low-precision dtypes, round to nearest even. */
static uint16_t to_storage(float f, flashcl_dtype dtype) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if (dtype == FLASHCL_DTYPE_BF16) return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
    const uint32_t sign = (x >> 16) & 0x8000u, mant = x & 0x7fffffu;
    const int exp = (int)((x >> 23) & 0xffu) - 127 + 15;
    if (exp >= 31) return (uint16_t)(sign | 0x7c00u); /* the tests' inputs never get here */
    uint32_t h, rem, halfway;
    if (exp <= 0) { /* half subnormal: units of 2^-24 */
        if (exp < -10) return (uint16_t)sign;
        const int shift = 14 - exp;
        const uint32_t m = mant | 0x800000u;
        h = m >> shift, rem = m & ((1u << shift) - 1u), halfway = 1u << (shift - 1);
    } else {
        h = ((uint32_t)exp << 10) | (mant >> 13), rem = mant & 0x1fffu, halfway = 0x1000u;
    }
    if (rem > halfway || (rem == halfway && (h & 1u))) ++h;
    return (uint16_t)(sign | h);
}

static float from_storage(uint16_t v, flashcl_dtype dtype) {
    if (dtype == FLASHCL_DTYPE_BF16) {
        const uint32_t x = (uint32_t)v << 16;
        float f;
        memcpy(&f, &x, sizeof f);
        return f;
    }
    const int exp = (v >> 10) & 0x1f, mant = v & 0x3ff;
    const float magnitude = exp == 0 ? ldexpf((float)mant, -24)
                            : exp == 31 ? INFINITY
                                        : ldexpf((float)(mant | 0x400), exp - 25);
    return (v & 0x8000u) ? -magnitude : magnitude;
}

static cl_mem storage_buffer(flashcl_context *ctx, float *values, size_t n, flashcl_dtype dtype) {
    uint16_t *raw = malloc(n * sizeof *raw);
    ck_assert_ptr_nonnull(raw);
    for (size_t i = 0; i < n; ++i) {
        raw[i] = to_storage(values[i], dtype);
        values[i] = from_storage(raw[i], dtype); /* the reference sees the rounded inputs */
    }
    cl_int err;
    cl_mem m = clCreateBuffer(flashcl_context_cl_context(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                              n * sizeof *raw, raw, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    free(raw);
    return m;
}

static void read_storage(flashcl_context *ctx, cl_mem m, float *out, size_t n, flashcl_dtype dtype) {
    uint16_t *raw = malloc(n * sizeof *raw);
    ck_assert_ptr_nonnull(raw);
    ck_assert_int_eq(clEnqueueReadBuffer(flashcl_context_queue(ctx), m, CL_TRUE, 0, n * sizeof *raw, raw, 0, NULL,
                                         NULL),
                     CL_SUCCESS);
    for (size_t i = 0; i < n; ++i) out[i] = from_storage(raw[i], dtype);
    free(raw);
}

/* f16 and bf16 storage (float arithmetic): O is rounded to the storage type
 * before D = rowsum(dO * O) and every gradient is rounded on the way out, so
 * the bound is a few storage ulps of the gradient's magnitude (half: 2^-11,
 * bf16: 2^-8) rather than the float tolerance rule; reading or writing the
 * storage wrongly misses it by orders of magnitude. */
START_TEST(test_low_precision_storage) {
    const flashcl_dtype dtype = _i == 0 ? FLASHCL_DTYPE_F16 : FLASHCL_DTYPE_BF16;
    const double ulp = dtype == FLASHCL_DTYPE_F16 ? ldexp(1.0, -11) : ldexp(1.0, -8);
    const bwd_case c = {"storage 45x70 d40 causal gqa", 1, 2, 1, 45, 70, 40, 1, FLASHCL_LAYOUT_BHSD, 0, 1.0f};
    flashcl_context *ctx = bwd_context();
    bwd_host h;
    bwd_host_alloc(&c, 17, &h);
    const size_t nq = bwd_q_count(&c), nkv = bwd_kv_count(&c);
    cl_mem q = storage_buffer(ctx, h.q, nq, dtype), k = storage_buffer(ctx, h.k, nkv, dtype);
    cl_mem v = storage_buffer(ctx, h.v, nkv, dtype), dout = storage_buffer(ctx, h.dout, nq, dtype);
    cl_mem o = storage_buffer(ctx, h.dq, nq, dtype), dq = storage_buffer(ctx, h.dq, nq, dtype);
    cl_mem dk = storage_buffer(ctx, h.dk, nkv, dtype), dv = storage_buffer(ctx, h.dv, nkv, dtype);
    cl_int err;
    cl_mem lse = clCreateBuffer(flashcl_context_cl_context(ctx), CL_MEM_READ_WRITE, bwd_lse_count(&c) * sizeof(float),
                                NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    flashcl_attention_desc desc;
    bwd_desc(&c, &desc);
    desc.dtype = dtype;
    const flashcl_tensor tq = flashcl_tensor_contiguous(q, c.layout, c.heads_q, c.seqlen_q, c.head_dim);
    const flashcl_tensor tkv[4] = {
        flashcl_tensor_contiguous(k, c.layout, c.heads_kv, c.seqlen_k, c.head_dim),
        flashcl_tensor_contiguous(v, c.layout, c.heads_kv, c.seqlen_k, c.head_dim),
        flashcl_tensor_contiguous(dk, c.layout, c.heads_kv, c.seqlen_k, c.head_dim),
        flashcl_tensor_contiguous(dv, c.layout, c.heads_kv, c.seqlen_k, c.head_dim),
    };
    const flashcl_tensor tdo = flashcl_tensor_contiguous(dout, c.layout, c.heads_q, c.seqlen_q, c.head_dim);
    const flashcl_tensor to = flashcl_tensor_contiguous(o, c.layout, c.heads_q, c.seqlen_q, c.head_dim);
    const flashcl_tensor tdq = flashcl_tensor_contiguous(dq, c.layout, c.heads_q, c.seqlen_q, c.head_dim);
    const flashcl_tensor tl = flashcl_tensor_lse(lse, c.heads_q, c.seqlen_q);
    ck_assert_msg(flashcl_forward(ctx, &desc, &tq, &tkv[0], &tkv[1], &to, &tl, 0, NULL, NULL) == FLASHCL_SUCCESS, "%s",
                  flashcl_last_error(ctx));
    ck_assert_msg(flashcl_backward(ctx, &desc, &tq, &tkv[0], &tkv[1], &to, &tl, &tdo, &tdq, &tkv[2], &tkv[3], 0, NULL,
                                   NULL) == FLASHCL_SUCCESS,
                  "%s", flashcl_last_error(ctx));
    read_storage(ctx, dq, h.dq, nq, dtype);
    read_storage(ctx, dk, h.dk, nkv, dtype);
    read_storage(ctx, dv, h.dv, nkv, dtype);
    double *gold = malloc(sizeof(double) * (nq + 2 * nkv));
    ck_assert_ptr_nonnull(gold);
    desc.dtype = FLASHCL_DTYPE_F32;
    ck_assert_int_eq(flashcl_reference_backward(&desc, FLASHCL_REF_DOUBLE, h.q, h.k, h.v, h.dout, gold, gold + nq,
                                                gold + nq + nkv),
                     0);
    const struct {
        const char *name;
        const float *got;
        const double *gold;
        size_t n;
    } grads[] = {{"dq", h.dq, gold, nq}, {"dk", h.dk, gold + nq, nkv}, {"dv", h.dv, gold + nq + nkv, nkv}};
    for (int g = 0; g < 3; ++g) {
        double error = 0.0, magnitude = 0.0;
        for (size_t i = 0; i < grads[g].n; ++i) {
            ck_assert(isfinite(grads[g].got[i]));
            error = fmax(error, fabs(grads[g].got[i] - grads[g].gold[i]));
            magnitude = fmax(magnitude, fabs(grads[g].gold[i]));
        }
        ck_assert_msg(magnitude > 0.01, "%s is degenerate", grads[g].name);
        ck_assert_msg(error <= 4.0 * ulp * magnitude, "dtype %d %s: error %.3g exceeds 4 storage ulps of %.3g",
                      (int)dtype, grads[g].name, error, magnitude);
    }
    free(gold);
    cl_mem all[] = {q, k, v, dout, o, dq, dk, dv, lse};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) clReleaseMemObject(all[i]);
    bwd_host_free(&h);
    flashcl_context_free(ctx);
}
END_TEST

static Suite *backward_accuracy_suite(void) {
    Suite *s = suite_create("backward_accuracy");
    TCase *tc = tcase_create("shapes");
    tcase_set_timeout(tc, BWD_TCASE_TIMEOUT);
    tcase_add_loop_test(tc, test_shapes, 0, (int)(sizeof shape_cases / sizeof shape_cases[0]));
    suite_add_tcase(s, tc);
    tc = tcase_create("large_logits");
    tcase_set_timeout(tc, BWD_TCASE_TIMEOUT);
    tcase_add_loop_test(tc, test_large_logits, 0, (int)(sizeof large_logit_cases / sizeof large_logit_cases[0]));
    suite_add_tcase(s, tc);
    tc = tcase_create("storage");
    tcase_set_timeout(tc, BWD_TCASE_TIMEOUT);
    tcase_add_loop_test(tc, test_low_precision_storage, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *runner = srunner_create(backward_accuracy_suite());
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
