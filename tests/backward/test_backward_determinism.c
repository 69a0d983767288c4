/* test_backward_determinism.c: bitwise-identical gradients run to run and under every forced tile plan. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backward_harness.h"

#define RUNS 10

static const bwd_case repeat_case = {"repeat 97x75 d64 causal gqa", {2, 4, 2, 97, 75, 64, 1, 0.0f, 1.0f},
                                     FLASHCL_LAYOUT_BSHD, 3};

/* Runs the backward on d (forward already done), reads and checks it, and
 * copies the gradients into one array (dq, dk, dv back to back). */
static void run_once(flashcl_context *ctx, const bwd_case *c, bwd_device *d, bwd_host *h, float *out) {
    bwd_poison_gradients(ctx, d); /* every run must write every element itself */
    flashcl_status s = bwd_run_backward(ctx, c, d);
    ck_assert_msg(s == FLASHCL_SUCCESS, "%s: %s", c->name, flashcl_last_error(ctx));
    bwd_read_results(ctx, d, h);
    const size_t nq = ts_case_q_count(&c->shape), nkv = ts_case_kv_count(&c->shape);
    memcpy(out, h->dq, nq * sizeof(float));
    memcpy(out + nq, h->dk, nkv * sizeof(float));
    memcpy(out + nq + nkv, h->dv, nkv * sizeof(float));
}

START_TEST(test_repeated_runs_bitwise_equal) {
    const bwd_case *c = &repeat_case;
    const size_t n = ts_case_q_count(&c->shape) + 2 * ts_case_kv_count(&c->shape);
    flashcl_context *ctx = ts_context();
    bwd_host h;
    bwd_device d;
    bwd_host_alloc(c, 7, &h);
    bwd_device_create(ctx, c, &h, &d);
    ck_assert_int_eq(bwd_run_forward(ctx, c, &d), FLASHCL_SUCCESS);
    float *first = malloc(n * sizeof(float)), *again = malloc(n * sizeof(float));
    ck_assert(first && again);
    run_once(ctx, c, &d, &h, first);
    bwd_check_gradients(c, &h);
    for (int run = 1; run < RUNS; ++run) {
        run_once(ctx, c, &d, &h, again);
        ck_assert_msg(memcmp(first, again, n * sizeof(float)) == 0, "run %d differs from run 0", run);
    }
    free(first);
    free(again);
    bwd_device_free(&d);
    bwd_host_free(&h);
    flashcl_context_free(ctx);
}
END_TEST

/* Plans that fit the register rules, each summing in the same order, so all must agree bit for bit with the
 * planner's choice and pass the tolerance rule. {block_q, block_k, threads_q, threads_k}. The first two sets fit
 * 32 KiB of local memory (rusticl); the last two are the H100's tuned backward plans in its static local memory
 * (src/tuned_plans.c: 95 and 105 KB), run where the device's local memory holds them (POCL's 1 MiB) and
 * reported as not run elsewhere. */
typedef struct forced_set {
    bwd_case c;
    flashcl_plan plans[5];
    int count;
} forced_set;

static const forced_set forced_sets[] = {
    {{"forced plans 75x97 d59 causal gqa", {1, 2, 1, 75, 97, 59, 1, 0.0f, 1.0f}, FLASHCL_LAYOUT_BSHD, 5},
     {{16, 16, 4, 4, 0, 0}, {8, 32, 8, 4, 0, 0}, {32, 8, 2, 8, 0, 0}, {16, 32, 4, 16, 0, 0}, {2, 1, 2, 1, 0, 0}},
     5},
    {{"forced plans 40x33 d256", {1, 2, 2, 40, 33, 256, 0, 0.0f, 1.0f}, FLASHCL_LAYOUT_BHSD, 0},
     {{8, 4, 8, 4, 0, 0}, {8, 2, 8, 1, 0, 0}, {8, 1, 8, 1, 0, 0}},
     3},
    {{"forced plan 150x131 d128 causal", {1, 2, 2, 150, 131, 128, 1, 0.0f, 1.0f}, FLASHCL_LAYOUT_BSHD, 0},
     {{16, 64, 16, 16, 0, 0}},
     1},
    {{"forced plan 131x150 d64 gqa", {2, 4, 2, 131, 150, 64, 0, 0.0f, 1.0f}, FLASHCL_LAYOUT_BHSD, 0},
     {{64, 64, 16, 16, 0, 0}},
     1},
};

START_TEST(test_forced_plans_agree_bitwise) {
    /* The two sets that fit everywhere alternate between rusticl and POCL (ts_split_takes); the static-local ones
     * run wherever they fit (POCL). */
    if (_i < 2 && !ts_split_takes(_i, 0, 2)) return;
    const forced_set *set = &forced_sets[_i];
    const bwd_case *c = &set->c;
    const size_t n = ts_case_q_count(&c->shape) + 2 * ts_case_kv_count(&c->shape);
    flashcl_context *ctx = ts_context();
    flashcl_device_limits limits;
    ck_assert_int_eq(flashcl_context_limits(ctx, &limits), FLASHCL_SUCCESS);
    for (int p = 0; p < set->count; ++p) {
        flashcl_plan plan = set->plans[p];
        if (flashcl_plan_check(&limits, FLASHCL_PASS_BACKWARD, c->shape.head_dim, FLASHCL_DTYPE_F32, &plan, NULL, 0) !=
            FLASHCL_SUCCESS) {
            /* Only the static-local sets may not fit (32 KiB on rusticl); the others must fit everywhere. */
            ck_assert_msg(_i >= 2, "%s: plan %d does not fit this device", c->name, p);
            printf("%s: not run on this device (plan %dx%d/%dx%d needs more local memory than its %zu bytes)\n",
                   c->name, plan.block_q, plan.block_k, plan.threads_q, plan.threads_k,
                   limits.static_local_mem_bytes);
            flashcl_context_free(ctx);
            return;
        }
    }
    bwd_host h;
    bwd_device d;
    bwd_host_alloc(c, 11, &h);
    bwd_device_create(ctx, c, &h, &d);
    ck_assert_int_eq(bwd_run_forward(ctx, c, &d), FLASHCL_SUCCESS);
    float *planned = malloc(n * sizeof(float)), *forced = malloc(n * sizeof(float));
    ck_assert(planned && forced);
    flashcl_attention_desc desc;
    bwd_desc(c, &desc);
    flashcl_plan automatic;
    ck_assert_int_eq(flashcl_context_plan(ctx, FLASHCL_PASS_BACKWARD, &desc, &automatic), FLASHCL_SUCCESS);
    run_once(ctx, c, &d, &h, planned);
    bwd_check_gradients(c, &h);
    for (int p = 0; p < set->count; ++p) {
        const flashcl_plan *plan = &set->plans[p];
        ck_assert_int_eq(flashcl_context_force_plan(ctx, FLASHCL_PASS_BACKWARD, plan), FLASHCL_SUCCESS);
        run_once(ctx, c, &d, &h, forced);
        flashcl_call_stats stats;
        ck_assert_int_eq(flashcl_last_call_stats(ctx, &stats), FLASHCL_SUCCESS);
        ck_assert_int_eq(stats.plan.block_q, plan->block_q);
        ck_assert_int_eq(stats.plan.block_k, plan->block_k);
        ck_assert_int_eq(stats.plan.threads_q, plan->threads_q);
        ck_assert_int_eq(stats.plan.threads_k, plan->threads_k);
        bwd_check_gradients(c, &h);
        ck_assert_msg(memcmp(planned, forced, n * sizeof(float)) == 0,
                      "%s: plan %dx%d/%dx%d differs bitwise from the planner's %dx%d/%dx%d", c->name, plan->block_q,
                      plan->block_k, plan->threads_q, plan->threads_k, automatic.block_q, automatic.block_k,
                      automatic.threads_q, automatic.threads_k);
    }
    free(planned);
    free(forced);
    bwd_device_free(&d);
    bwd_host_free(&h);
    flashcl_context_free(ctx);
}
END_TEST

static Suite *backward_determinism_suite(void) {
    Suite *s = suite_create("backward_determinism");
    TCase *tc = tcase_create("repeat");
    tcase_set_timeout(tc, TS_CASE_TIMEOUT);
    tcase_add_test(tc, test_repeated_runs_bitwise_equal);
    suite_add_tcase(s, tc);
    tc = tcase_create("forced_plans");
    tcase_set_timeout(tc, TS_CASE_TIMEOUT);
    tcase_add_loop_test(tc, test_forced_plans_agree_bitwise, 0, (int)(sizeof forced_sets / sizeof forced_sets[0]));
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    ts_sweep_announce("backward_determinism");
    SRunner *runner = srunner_create(backward_determinism_suite());
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
