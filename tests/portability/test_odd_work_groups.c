/* test_odd_work_groups.c: the portable kernels with forced work-groups that are not multiples of 32 (24, 20, 112,
 * 72, 52 work-items), against the double-precision reference with the forward and backward suites' tolerances.
 * The kernels assume nothing of sub-groups (docs/architecture.md, "Sub-groups and warps"): any size that fits
 * the device must give the same answers; a hidden warp-size assumption would show here as wrong rows. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#include "backward_harness.h"
#include "test_support.h"

/* block_q, block_k, threads_q, threads_k: every plan fits 32 KiB of local memory (rusticl) and the planner's
 * register budgets at head dims up to 64. */
static const flashcl_plan forward_plans[] = {
    {24, 16, 3, 8, 0, 0},   /* 24 work-items */
    {20, 20, 5, 4, 0, 0},   /* 20 */
    {21, 16, 7, 16, 0, 0},  /* 112 = 3.5 warps */
    {36, 16, 9, 8, 0, 0},   /* 72 */
    {13, 8, 13, 4, 0, 0},   /* 52, a prime number of query rows */
};
#define FORWARD_PLANS ((int)(sizeof forward_plans / sizeof forward_plans[0]))

/* Backward tiles: block_q streamed rows, block_k resident rows (cl/backward.cl). */
static const flashcl_plan backward_plans[] = {
    {12, 16, 3, 8, 0, 0},  /* 24 work-items */
    {20, 16, 5, 4, 0, 0},  /* 20 */
    {14, 16, 7, 16, 0, 0}, /* 112 */
};
#define BACKWARD_PLANS ((int)(sizeof backward_plans / sizeof backward_plans[0]))

/* Shapes with ragged last blocks, grouped heads and a causal mask. */
static const ts_case forward_cases[] = {
    {1, 2, 1, 100, 150, 64, 1, 0.0f, 1.0f},
    {2, 1, 1, 77, 77, 40, 0, 0.0f, 1.0f},
};

static void assert_odd(const flashcl_plan *p, const char *label) {
    const size_t wg = (size_t)p->threads_q * (size_t)p->threads_k;
    ck_assert_msg(wg % 32 != 0, "%s: work-group %zu is a multiple of 32: not what this suite tests", label, wg);
}

START_TEST(forward_matches_reference) {
    /* Pairs of plans (both shapes) alternate between rusticl and POCL (ts_split_takes). */
    if (!ts_split_takes(_i / 2, 0, 2)) return;
    /* Each plan once, the shapes alternating: every kernel build costs seconds on a CPU device. */
    const flashcl_plan *plan = &forward_plans[_i];
    const ts_case *c = &forward_cases[_i % 2];
    char label[160];
    snprintf(label, sizeof label, "forward %dx%d threads %dx%d (work-group %d), d%d %dx%d%s", plan->block_q,
             plan->block_k, plan->threads_q, plan->threads_k, plan->threads_q * plan->threads_k, c->head_dim,
             c->seqlen_q, c->seqlen_k, c->causal ? " causal" : "");
    assert_odd(plan, label);
    flashcl_context *ctx = ts_context();
    ck_assert_int_eq(flashcl_context_force_plan(ctx, FLASHCL_PASS_FORWARD, plan), FLASHCL_SUCCESS);
    const flashcl_attention_desc d = ts_case_desc(c, FLASHCL_DTYPE_F32);
    ts_problem p;
    ts_problem_init(&p, &d, 4000u + (uint64_t)_i, c->amplitude);
    float *o = malloc(p.q_count * sizeof *o), *lse = malloc(p.lse_count * sizeof *lse);
    ck_assert(o && lse);
    const ts_placements place = ts_uniform_placements(FLASHCL_LAYOUT_BHSD, 0, 0);
    ts_run_forward(ctx, &p, &place, o, lse);
    ts_check_forward(&p, o, lse, label);
    flashcl_call_stats stats;
    ck_assert_int_eq(flashcl_last_call_stats(ctx, &stats), FLASHCL_SUCCESS);
    ck_assert_msg(stats.kernel == FLASHCL_KERNEL_PORTABLE && stats.plan.work_group_size % 32 != 0,
                  "%s: the call ran work-groups of %zu", label, stats.plan.work_group_size);
    free(o), free(lse);
    ts_problem_free(&p);
    flashcl_context_free(ctx);
}
END_TEST

/* Forward and backward both forced (the forward's LSE feeds the backward). */
START_TEST(backward_matches_reference) {
    if (!ts_split_takes(_i, 0, 2)) return; /* even cases on rusticl, odd ones on POCL (ts_split_takes) */
    static const bwd_case cases[] = {
        {"odd work-groups d64 causal", {1, 2, 1, 70, 90, 64, 1, 0.0f, 1.0f}, FLASHCL_LAYOUT_BHSD, 0},
        {"odd work-groups d48", {1, 1, 1, 45, 60, 48, 0, 0.0f, 1.0f}, FLASHCL_LAYOUT_BSHD, 3},
    };
    const flashcl_plan *plan = &backward_plans[_i];
    const bwd_case *c = &cases[_i % 2];
    char label[96];
    snprintf(label, sizeof label, "backward %dx%d threads %dx%d", plan->block_q, plan->block_k, plan->threads_q,
             plan->threads_k);
    assert_odd(plan, label);
    flashcl_context *ctx = ts_context();
    ck_assert_int_eq(flashcl_context_force_plan(ctx, FLASHCL_PASS_FORWARD, &forward_plans[_i]),
                     FLASHCL_SUCCESS);
    ck_assert_int_eq(flashcl_context_force_plan(ctx, FLASHCL_PASS_BACKWARD, plan), FLASHCL_SUCCESS);
    bwd_run_and_check_on(ctx, c);
    flashcl_call_stats stats;
    ck_assert_int_eq(flashcl_last_call_stats(ctx, &stats), FLASHCL_SUCCESS);
    ck_assert_msg(stats.pass == FLASHCL_PASS_BACKWARD && stats.plan.work_group_size % 32 != 0,
                  "%s (%s): the call ran work-groups of %zu", label, c->name, stats.plan.work_group_size);
    flashcl_context_free(ctx);
}
END_TEST

int main(void) {
    ts_sweep_announce("portability_odd_work_groups");
    Suite *s = suite_create("portability_odd_work_groups");
    TCase *tc = tcase_create("odd work-groups");
    tcase_set_timeout(tc, TS_CASE_TIMEOUT);
    tcase_add_loop_test(tc, forward_matches_reference, 0, FORWARD_PLANS);
    tcase_add_loop_test(tc, backward_matches_reference, 0, BACKWARD_PLANS);
    suite_add_tcase(s, tc);
    SRunner *runner = srunner_create(s);
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? 0 : 1;
}
