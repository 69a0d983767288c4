/* test_dropout.c: fused dropout: the Philox mask (device vs CPU, seeds, kept fraction), forward and backward through the reference. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention_reference.h"
#include "feature_harness.h"

/* Random123's known answers for Philox4x32-10. */
START_TEST(test_philox_known_answers) {
    const uint32_t zero_ctr[4] = {0, 0, 0, 0}, zero_key[2] = {0, 0};
    const uint32_t ones_ctr[4] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                   ones_key[2] = {0xffffffffu, 0xffffffffu};
    uint32_t out[4];
    flashcl_reference_philox(zero_ctr, zero_key, out);
    ck_assert_uint_eq(out[0], 0x6627e8d5u);
    ck_assert_uint_eq(out[1], 0xe169c58du);
    ck_assert_uint_eq(out[2], 0xbc57ac4cu);
    ck_assert_uint_eq(out[3], 0x9b00dbd8u);
    flashcl_reference_philox(ones_ctr, ones_key, out);
    ck_assert_uint_eq(out[0], 0x408f276du);
    ck_assert_uint_eq(out[3], 0x6d5451fdu);
}
END_TEST

static uint8_t *device_mask(flashcl_context *ctx, const flashcl_attention_desc *d) {
    const size_t n = (size_t)d->batch * d->heads_q * d->seqlen_q * d->seqlen_k;
    cl_int err;
    cl_mem m = clCreateBuffer(flashcl_context_cl_context(ctx), CL_MEM_READ_WRITE, n + 64, NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    flashcl_status s = flashcl_dropout_mask(ctx, d, m, 64, 0, NULL, NULL);
    ck_assert_msg(s == FLASHCL_SUCCESS, "flashcl_dropout_mask: %s", flashcl_last_error(ctx));
    uint8_t *keep = malloc(n);
    ck_assert(keep);
    ck_assert_int_eq(clEnqueueReadBuffer(flashcl_context_queue(ctx), m, CL_TRUE, 64, n, keep, 0, NULL, NULL),
                     CL_SUCCESS);
    clReleaseMemObject(m);
    return keep;
}

/* The device's mask is the CPU Philox mask bit for bit (so the same on every
 * device), keeps 1-p of the elements, and changes with the seed and offset. */
START_TEST(test_mask_matches_cpu_and_rate) {
    flashcl_context *ctx = ts_context();
    flashcl_attention_desc d;
    flashcl_attention_desc_init(&d, 2, 2, 181, 257, 16);
    d.dropout_p = 0.3f;
    d.dropout_seed = 0x123456789abcdefull;
    const size_t n = (size_t)2 * 2 * 181 * 257;
    uint8_t *gpu = device_mask(ctx, &d), *cpu = malloc(n);
    ck_assert(cpu);
    flashcl_reference_dropout_mask(&d, cpu);
    ck_assert_msg(memcmp(gpu, cpu, n) == 0, "device and CPU Philox masks differ");
    size_t kept = 0;
    for (size_t x = 0; x < n; ++x) kept += gpu[x];
    const double fraction = (double)kept / (double)n;
    ck_assert_msg(fabs(fraction - 0.7) < 0.01, "kept fraction %g, expected 0.7", fraction);
    uint8_t *again = device_mask(ctx, &d);
    ck_assert(memcmp(gpu, again, n) == 0);
    d.dropout_seed += 1;
    uint8_t *other = device_mask(ctx, &d);
    ck_assert_msg(memcmp(gpu, other, n) != 0, "a different seed gave the same mask");
    free(other);
    d.dropout_seed -= 1;
    d.dropout_offset = 4; /* = batch * heads_q: a fresh stream */
    other = device_mask(ctx, &d);
    ck_assert_msg(memcmp(gpu, other, n) != 0, "a different offset gave the same mask");
    free(other);
    free(again);
    free(gpu);
    free(cpu);
    flashcl_context_free(ctx);
}
END_TEST

static fh_case dropout_case(void) {
    fh_case c;
    memset(&c, 0, sizeof c);
    c.name = "dropout 113x203 d40 gqa causal p 0.2";
    flashcl_attention_desc_init(&c.desc, 1, 4, 113, 203, 40);
    c.desc.heads_kv = 2;
    c.desc.causal = 1;
    c.desc.dropout_p = 0.2f;
    c.desc.dropout_seed = 77;
    return c;
}

/* The mask flashcl_dropout_mask writes reproduces O and the gradients
 * through the reference; and runs repeat bitwise. */
START_TEST(test_written_mask_reproduces_outputs) {
    const fh_case c = dropout_case();
    flashcl_context *ctx = ts_context();
    fh_inputs in;
    fh_inputs_make(&c, 13, &in);
    fh_result r, again;
    fh_run(ctx, &c, &in, 1, &r);
    uint8_t *keep = device_mask(ctx, &c.desc);
    fh_check(&c, &in, &r, 1, NULL, keep);
    fh_run(ctx, &c, &in, 1, &again);
    ck_assert(memcmp(r.o, again.o, in.q_count * sizeof(float)) == 0);
    ck_assert(memcmp(r.dq, again.dq, in.q_count * sizeof(float)) == 0);
    ck_assert(memcmp(r.dk, again.dk, in.kv_count * sizeof(float)) == 0);
    /* LSE does not see dropout: the same as without it. Bit for bit only on
     * the same kernel: a dense call this small may be split-KV (a feature
     * never is), whose LSE differs by rounding, so it is kept unsplit. */
    fh_case plain = c;
    plain.desc.dropout_p = 0.0f;
    fh_result none;
    ck_assert_int_eq(flashcl_context_set_kv_splits(ctx, 1), FLASHCL_SUCCESS);
    fh_run(ctx, &plain, &in, 0, &none);
    ck_assert_int_eq(flashcl_context_set_kv_splits(ctx, 0), FLASHCL_SUCCESS);
    ck_assert(memcmp(r.lse, none.lse, in.lse_count * sizeof(float)) == 0);
    fh_result_free(&none);
    fh_result_free(&again);
    fh_result_free(&r);
    free(keep);
    fh_inputs_free(&in);
    flashcl_context_free(ctx);
}
END_TEST

/* Under forced tile plans the outputs still match the reference run with the
 * CPU Philox mask: the mask does not depend on tiles. */
START_TEST(test_forced_plans_same_mask) {
    fh_case c = dropout_case();
    c.desc.sliding_window = 1;
    c.desc.window_left = 60; /* dropout with window: skipped tiles draw nothing */
    static const flashcl_plan forward_plans[] = {{16, 16, 4, 4, 0, 0}, {8, 32, 2, 16, 0, 0}};
    static const flashcl_plan backward_plans[] = {{16, 32, 4, 8, 0, 0}, {8, 32, 8, 4, 0, 0}};
    fh_inputs in;
    fh_inputs_make(&c, 17, &in);
    for (int p = 0; p < 2; ++p) {
        flashcl_context *ctx = ts_context();
        ck_assert_int_eq(flashcl_context_force_plan(ctx, FLASHCL_PASS_FORWARD, &forward_plans[p]), FLASHCL_SUCCESS);
        ck_assert_int_eq(flashcl_context_force_plan(ctx, FLASHCL_PASS_BACKWARD, &backward_plans[p]), FLASHCL_SUCCESS);
        fh_result r;
        fh_run(ctx, &c, &in, 1, &r);
        fh_check(&c, &in, &r, 1, NULL, NULL);
        fh_result_free(&r);
        flashcl_context_free(ctx);
    }
    fh_inputs_free(&in);
}
END_TEST

START_TEST(test_bad_dropout_rejected) {
    flashcl_context *ctx = ts_context();
    flashcl_attention_desc d;
    flashcl_attention_desc_init(&d, 1, 1, 8, 8, 16);
    cl_int err;
    cl_mem m = clCreateBuffer(flashcl_context_cl_context(ctx), CL_MEM_READ_WRITE, 4096, NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    const flashcl_tensor t = flashcl_tensor_contiguous(m, FLASHCL_LAYOUT_BHSD, 1, 8, 16);
    const flashcl_tensor o = {m, 512, 128, 128, 16};
    const float bad[] = {1.0f, -0.1f, NAN, 2.0f};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        d.dropout_p = bad[i];
        ck_assert_int_eq(flashcl_forward(ctx, &d, &t, &t, &t, &o, NULL, 0, NULL, NULL),
                         FLASHCL_ERROR_INVALID_ARGUMENT);
        ck_assert_ptr_nonnull(strstr(flashcl_last_error(ctx), "dropout_p"));
    }
    d.dropout_p = 0.0f;
    ck_assert_int_eq(flashcl_dropout_mask(ctx, &d, m, 0, 0, NULL, NULL), FLASHCL_ERROR_INVALID_ARGUMENT);
    d.dropout_p = 0.5f;
    ck_assert_int_eq(flashcl_dropout_mask(ctx, &d, m, 4050, 0, NULL, NULL), FLASHCL_ERROR_BUFFER_TOO_SMALL);
    ck_assert_int_eq(flashcl_context_set_impl(ctx, FLASHCL_IMPL_STANDARD), FLASHCL_SUCCESS);
    ck_assert_int_eq(flashcl_forward(ctx, &d, &t, &t, &t, &o, NULL, 0, NULL, NULL), FLASHCL_ERROR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(ctx), "dropout"));
    clReleaseMemObject(m);
    flashcl_context_free(ctx);
}
END_TEST

static Suite *dropout_suite(void) {
    Suite *s = suite_create("dropout");
    TCase *tc = tcase_create("dropout");
    tcase_set_timeout(tc, TS_CASE_TIMEOUT);
    tcase_add_test(tc, test_philox_known_answers);
    tcase_add_test(tc, test_mask_matches_cpu_and_rate);
    tcase_add_test(tc, test_written_mask_reproduces_outputs);
    tcase_add_test(tc, test_forced_plans_same_mask);
    tcase_add_test(tc, test_bad_dropout_rejected);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *runner = srunner_create(dropout_suite());
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
