/* test_forward_plans.c: forced tile plans (tiny, odd, non-square) each matching the reference, and run-to-run determinism. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

typedef struct plan_problem {
    int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, causal;
    flashcl_layout layout;
} plan_problem;

static const plan_problem problems[] = {
    {1, 2, 1, 113, 203, 32, 1, FLASHCL_LAYOUT_BHSD},
    {2, 1, 1, 127, 300, 80, 0, FLASHCL_LAYOUT_BSHD},
    {1, 2, 2, 65, 129, 256, 1, FLASHCL_LAYOUT_BSHD},
    {1, 1, 1, 200, 90, 48, 1, FLASHCL_LAYOUT_BHSD}, /* seqlen_q > seqlen_k: masked top rows */
};

typedef struct forced {
    int problem;
    flashcl_plan plan; /* block_q, block_k, threads_q, threads_k */
} forced;

/* Every plan fits both project devices (32 KiB and 1 MiB of local memory):
 * blocks of 1, 2 and 4, non-square tiles, blocks that are not powers of two
 * or not multiples of 4 (the kernel's remainder loops and zero-padded key
 * quads), and larger ones. threads_k 1 with block_k % 4 != 0 (3x6, 2x5, 4x7,
 * 1x3 on problem 0) gave O = 0 on rusticl before the key padding of
 * cl/forward.cl replaced the scalar remainder of the product with V. */
static const forced plans[] = {
    {0, {1, 4, 1, 1, 0, 0}},    {0, {2, 2, 1, 2, 0, 0}},    {0, {1, 2, 1, 2, 0, 0}},   {0, {4, 4, 2, 2, 0, 0}},
    {0, {2, 4, 1, 4, 0, 0}},    {0, {4, 2, 4, 2, 0, 0}},    {0, {1, 8, 1, 8, 0, 0}},   {0, {8, 2, 4, 2, 0, 0}},
    {0, {3, 4, 3, 1, 0, 0}},    {0, {6, 6, 3, 2, 0, 0}},    {0, {16, 64, 4, 16, 0, 0}}, {0, {64, 16, 16, 8, 0, 0}},
    {1, {4, 4, 4, 4, 0, 0}},    {1, {2, 8, 2, 4, 0, 0}},    {1, {8, 16, 2, 8, 0, 0}},  {1, {16, 32, 4, 8, 0, 0}},
    {1, {32, 8, 16, 4, 0, 0}},  {1, {12, 20, 6, 4, 0, 0}},  {1, {16, 16, 16, 16, 0, 0}},
    {2, {1, 8, 1, 8, 0, 0}},    {2, {2, 8, 2, 8, 0, 0}},    {2, {3, 8, 3, 8, 0, 0}},   {2, {8, 8, 8, 8, 0, 0}},
    {0, {3, 6, 3, 1, 0, 0}},    {0, {2, 5, 2, 1, 0, 0}},    {0, {4, 7, 4, 1, 0, 0}},    {0, {1, 3, 1, 1, 0, 0}},
    {3, {1, 4, 1, 2, 0, 0}},    {3, {5, 6, 5, 2, 0, 0}},    {3, {32, 4, 8, 4, 0, 0}},
};
#define PLAN_COUNT ((int)(sizeof plans / sizeof plans[0]))
#define PROBLEM_COUNT ((int)(sizeof problems / sizeof problems[0]))

static flashcl_attention_desc desc_of(const plan_problem *pp) {
    flashcl_attention_desc d;
    flashcl_attention_desc_init(&d, pp->batch, pp->heads_q, pp->seqlen_q, pp->seqlen_k, pp->head_dim);
    d.heads_kv = pp->heads_kv;
    d.causal = pp->causal;
    return d;
}

static int same_tiles(const flashcl_plan *a, const flashcl_plan *b) {
    return a->block_q == b->block_q && a->block_k == b->block_k && a->threads_q == b->threads_q &&
           a->threads_k == b->threads_k;
}

START_TEST(test_forced_plan_matches_reference) {
    if (!ts_split_takes(_i, 0, 2)) return; /* even cases on rusticl, odd ones on POCL (ts_split_takes) */
    const forced *f = &plans[_i];
    const plan_problem *pp = &problems[f->problem];
    flashcl_context *ctx = ts_context();
    const flashcl_attention_desc d = desc_of(pp);
    ck_assert_int_eq(flashcl_context_force_plan(ctx, FLASHCL_PASS_FORWARD, &f->plan), FLASHCL_SUCCESS);
    flashcl_plan used;
    flashcl_status s = flashcl_context_plan(ctx, FLASHCL_PASS_FORWARD, &d, &used);
    ck_assert_msg(s == FLASHCL_SUCCESS, "plan %d (%dx%d, %dx%d) rejected: %s", _i, f->plan.block_q, f->plan.block_k,
                  f->plan.threads_q, f->plan.threads_k, flashcl_last_error(ctx));
    ck_assert(same_tiles(&used, &f->plan));
    ck_assert_uint_eq(used.work_group_size, (size_t)f->plan.threads_q * (size_t)f->plan.threads_k);

    ts_problem p;
    ts_problem_init(&p, &d, 100u + (uint64_t)f->problem, 1.0f);
    float *o = malloc(p.q_count * sizeof *o), *lse = malloc(p.lse_count * sizeof *lse);
    ck_assert(o && lse);
    /* Odd offsets and padding on every other plan: the scalar load path. */
    const ts_placements place = ts_uniform_placements(pp->layout, (_i % 2) ? 3 : 0, (_i % 2) ? 1 : 0);
    ts_run_forward(ctx, &p, &place, o, lse);
    char label[128];
    snprintf(label, sizeof label, "plan %dx%d threads %dx%d, D %d, %dx%d%s", f->plan.block_q, f->plan.block_k,
             f->plan.threads_q, f->plan.threads_k, d.head_dim, d.seqlen_q, d.seqlen_k, d.causal ? " causal" : "");
    ts_check_forward(&p, o, lse, label);

    /* The call really ran the forced plan. */
    flashcl_call_stats stats;
    ck_assert_int_eq(flashcl_last_call_stats(ctx, &stats), FLASHCL_SUCCESS);
    ck_assert_msg(same_tiles(&stats.plan, &f->plan), "%s: the call used %dx%d threads %dx%d", label,
                  stats.plan.block_q, stats.plan.block_k, stats.plan.threads_q, stats.plan.threads_k);

    /* The same plan again: bitwise the same answer. */
    float *o2 = malloc(p.q_count * sizeof *o2), *lse2 = malloc(p.lse_count * sizeof *lse2);
    ck_assert(o2 && lse2);
    ts_run_forward(ctx, &p, &place, o2, lse2);
    ck_assert_msg(memcmp(o, o2, p.q_count * sizeof *o) == 0, "%s: O differs between two runs", label);
    ck_assert_msg(memcmp(lse, lse2, p.lse_count * sizeof *lse) == 0, "%s: LSE differs between two runs", label);
    free(o), free(lse), free(o2), free(lse2);
    ts_problem_free(&p);
    flashcl_context_free(ctx);
}
END_TEST

/* Automatic plans are deterministic too: twice on one context and once on
 * a fresh context (a rebuilt program) give identical bits. */
START_TEST(test_automatic_plan_is_deterministic) {
    const plan_problem *pp = &problems[_i];
    const flashcl_attention_desc d = desc_of(pp);
    ts_problem p;
    ts_problem_init(&p, &d, 200u + (uint64_t)_i, 1.0f);
    float *o[3], *lse[3];
    const ts_placements place = ts_uniform_placements(pp->layout, 0, 0);
    flashcl_context *ctx = ts_context();
    for (int run = 0; run < 3; ++run) {
        o[run] = malloc(p.q_count * sizeof(float));
        lse[run] = malloc(p.lse_count * sizeof(float));
        ck_assert(o[run] && lse[run]);
        if (run == 2) {
            flashcl_context_free(ctx);
            ctx = ts_context();
        }
        ts_run_forward(ctx, &p, &place, o[run], lse[run]);
    }
    ts_check_forward(&p, o[0], lse[0], "automatic plan");
    for (int run = 1; run < 3; ++run) {
        ck_assert_msg(memcmp(o[0], o[run], p.q_count * sizeof(float)) == 0, "O of run %d differs", run);
        ck_assert_msg(memcmp(lse[0], lse[run], p.lse_count * sizeof(float)) == 0, "LSE of run %d differs", run);
    }
    for (int run = 0; run < 3; ++run) free(o[run]), free(lse[run]);
    ts_problem_free(&p);
    flashcl_context_free(ctx);
}
END_TEST

/* Forcing NULL returns to the planner's choice for the device. */
START_TEST(test_unforcing_returns_to_planner) {
    flashcl_context *ctx = ts_context();
    flashcl_attention_desc d;
    flashcl_attention_desc_init(&d, 1, 1, 100, 100, 64);
    flashcl_device_limits limits;
    ck_assert_int_eq(flashcl_context_limits(ctx, &limits), FLASHCL_SUCCESS);
    flashcl_plan automatic, expected, now;
    ck_assert_int_eq(flashcl_context_plan(ctx, FLASHCL_PASS_FORWARD, &d, &automatic), FLASHCL_SUCCESS);
    ck_assert_int_eq(flashcl_plan_choose(&limits, FLASHCL_PASS_FORWARD, 64, FLASHCL_DTYPE_F32, 0, &expected),
                     FLASHCL_SUCCESS);
    /* No tuned entry exists for CPU devices, so the planner decides there;
     * a GPU with an entry in src/tuned_plans.c (the H100) gets that one. */
    cl_device_type type = 0;
    ck_assert_int_eq(clGetDeviceInfo(flashcl_context_device(ctx), CL_DEVICE_TYPE, sizeof type, &type, NULL),
                     CL_SUCCESS);
    if (type & CL_DEVICE_TYPE_CPU) ck_assert(same_tiles(&automatic, &expected));
    const flashcl_plan tiny = {2, 2, 1, 2, 0, 0};
    ck_assert_int_eq(flashcl_context_force_plan(ctx, FLASHCL_PASS_FORWARD, &tiny), FLASHCL_SUCCESS);
    ck_assert_int_eq(flashcl_context_plan(ctx, FLASHCL_PASS_FORWARD, &d, &now), FLASHCL_SUCCESS);
    ck_assert(same_tiles(&now, &tiny));
    ck_assert_int_eq(flashcl_context_force_plan(ctx, FLASHCL_PASS_FORWARD, NULL), FLASHCL_SUCCESS);
    ck_assert_int_eq(flashcl_context_plan(ctx, FLASHCL_PASS_FORWARD, &d, &now), FLASHCL_SUCCESS);
    ck_assert(same_tiles(&now, &automatic));
    ck_assert_int_eq(flashcl_context_force_plan(ctx, (flashcl_pass)9, &tiny), FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert(flashcl_last_error(ctx)[0] != '\0');
    flashcl_context_free(ctx);
}
END_TEST

static Suite *plans_suite(void) {
    Suite *s = suite_create("forward_plans");
    TCase *tc = tcase_create("plans");
    tcase_set_timeout(tc, TS_CASE_TIMEOUT);
    tcase_add_loop_test(tc, test_forced_plan_matches_reference, 0, PLAN_COUNT);
    tcase_add_loop_test(tc, test_automatic_plan_is_deterministic, 0, PROBLEM_COUNT);
    tcase_add_test(tc, test_unforcing_returns_to_planner);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    ts_sweep_announce("forward_plans");
    SRunner *runner = srunner_create(plans_suite());
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
