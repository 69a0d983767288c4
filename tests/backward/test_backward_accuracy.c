/* test_backward_accuracy.c: gradients against the double reference over odd shapes, head dims, layouts, GQA, large logits. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention_reference.h"
#include "backward_harness.h"

#define BHSD FLASHCL_LAYOUT_BHSD
#define BSHD FLASHCL_LAYOUT_BSHD

/* name, {batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, causal, scale (0: default), amplitude}, layout, offset */
static const bwd_case shape_cases[] = {
    {"1x1 d16", {1, 1, 1, 1, 1, 16, 0, 0.0f, 1.0f}, BHSD, 0},
    {"1x1 d1 causal offset", {1, 1, 1, 1, 1, 1, 1, 0.0f, 1.0f}, BSHD, 3},
    {"3x799 d40", {1, 2, 2, 3, 799, 40, 0, 0.0f, 1.0f}, BSHD, 5},
    {"3x799 d40 causal", {1, 1, 1, 3, 799, 40, 1, 0.0f, 1.0f}, BHSD, 0},
    {"113x203 d59 causal", {2, 2, 2, 113, 203, 59, 1, 0.0f, 1.0f}, BHSD, 7},
    {"127x64 d111 causal gqa masked rows", {1, 2, 1, 127, 64, 111, 1, 0.0f, 1.0f}, BSHD, 0},
    {"203x113 d256", {1, 2, 2, 203, 113, 256, 0, 0.0f, 1.0f}, BHSD, 11},
    {"90x40 d256 causal masked rows", {1, 1, 1, 90, 40, 256, 1, 0.0f, 1.0f}, BSHD, 1},
    {"65x129 d96 causal gqa", {1, 4, 2, 65, 129, 96, 1, 0.0f, 1.0f}, BSHD, 1},
    {"33x31 d128 causal", {1, 1, 1, 33, 31, 128, 1, 0.0f, 1.0f}, BHSD, 0},
    {"48x80 d160", {1, 2, 2, 48, 80, 160, 0, 0.0f, 1.0f}, BSHD, 2},
    {"70x70 d16 causal mqa", {2, 3, 1, 70, 70, 16, 1, 0.0f, 1.0f}, BHSD, 0},
    {"100x60 d1 causal masked rows", {1, 1, 1, 100, 60, 1, 1, 0.0f, 1.0f}, BSHD, 0},
    {"129x128 d64 causal", {1, 2, 2, 129, 128, 64, 1, 0.0f, 1.0f}, BHSD, 9},
};

/* Scores well past 88, where exp overflows in float: the recomputation must
 * subtract the LSE first. q and k in [-6, 6] give |scale q.k| up to ~280. */
static const bwd_case large_logit_cases[] = {
    {"large logits 77x90 d64", {1, 2, 2, 77, 90, 64, 0, 0.0f, 6.0f}, BHSD, 0},
    {"large logits 91x50 d59 causal", {1, 2, 1, 91, 50, 59, 1, 0.0f, 6.0f}, BSHD, 4},
};

/* Even cases on rusticl, odd ones on POCL (ts_split_takes). */
START_TEST(test_shapes) {
    if (ts_split_takes(_i, 0, 2)) bwd_run_and_check(&shape_cases[_i], NULL);
}
END_TEST

/* Numbers at their limits depend on each compiler's arithmetic: these run whole on both. */
START_TEST(test_large_logits) { bwd_run_and_check(&large_logit_cases[_i], NULL); }
END_TEST

/* f16 and bf16 storage (float arithmetic): O is rounded to the storage type
 * before D = rowsum(dO * O) and every gradient is rounded on the way out, so
 * the bound is a few storage ulps of the gradient's magnitude (half: 2^-11,
 * bf16: 2^-8) rather than the float tolerance rule; reading or writing the
 * storage wrongly misses it by orders of magnitude. */
START_TEST(test_low_precision_storage) {
    if (!ts_split_takes(_i, 0, 2)) return; /* f16 on rusticl, bf16 on POCL (ts_split_takes) */
    const flashcl_dtype dtype = _i == 0 ? FLASHCL_DTYPE_F16 : FLASHCL_DTYPE_BF16;
    const bwd_case c = {"storage 45x70 d40 causal gqa", {1, 2, 1, 45, 70, 40, 1, 0.0f, 1.0f}, FLASHCL_LAYOUT_BHSD, 0};
    flashcl_context *ctx = ts_context();
    bwd_check_storage(ctx, &c, dtype, 4.0);
    flashcl_context_free(ctx);
}
END_TEST

static Suite *backward_accuracy_suite(void) {
    Suite *s = suite_create("backward_accuracy");
    TCase *tc = tcase_create("shapes");
    tcase_set_timeout(tc, TS_CASE_TIMEOUT);
    tcase_add_loop_test(tc, test_shapes, 0, (int)(sizeof shape_cases / sizeof shape_cases[0]));
    suite_add_tcase(s, tc);
    tc = tcase_create("large_logits");
    tcase_set_timeout(tc, TS_CASE_TIMEOUT);
    tcase_add_loop_test(tc, test_large_logits, 0, (int)(sizeof large_logit_cases / sizeof large_logit_cases[0]));
    suite_add_tcase(s, tc);
    tc = tcase_create("storage");
    tcase_set_timeout(tc, TS_CASE_TIMEOUT);
    tcase_add_loop_test(tc, test_low_precision_storage, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    ts_sweep_announce("backward_accuracy");
    SRunner *runner = srunner_create(backward_accuracy_suite());
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
