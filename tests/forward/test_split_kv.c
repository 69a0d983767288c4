/* test_split_kv.c: the split-KV forward (decode): the key axis cut into chunks whose partials a combine kernel
 * merges. Forced split counts from 1 to many against the double reference, chunks that see no key, causal rows
 * with Sq > 1 and Sq > Sk (empty rows), GQA, every storage type; the same bits run to run; different counts
 * within a few float ulps of each other; the NaN rule through the combine; the automatic choice; refusals. */
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

/* batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, causal, scale, amplitude */
static const ts_case cases[] = {
    {1, 4, 1, 1, 1000, 64, 0, 0, 1},  /* decode, GQA group 4 */
    {2, 2, 1, 5, 333, 40, 1, 0, 1},   /* chunked prefill: Sq > 1, causal, odd head dim */
    {1, 2, 2, 70, 50, 32, 1, 0, 1},   /* Sq > Sk causal: 20 empty rows, chunks with no visible key */
    {1, 8, 8, 3, 2049, 128, 1, 0, 2}, /* a length one past a block multiple, larger logits */
    {3, 2, 2, 1, 1, 16, 0, 0, 1},     /* one key: one chunk however many are asked */
};
#define CASE_COUNT ((int)(sizeof cases / sizeof cases[0]))
static const int forced_splits[] = {1, 2, 3, 7, 64};
#define SPLIT_COUNT ((int)(sizeof forced_splits / sizeof forced_splits[0]))

/* A context on the portable tiled kernels (on a GPU with tensor cores f16 would go there; calls of up to 8 query
 * positions would run the decode kernel, whose splits test_decode.c tests). */
static flashcl_context *split_context(int splits) {
    flashcl_context *ctx = ts_context();
    ck_assert_int_eq(flashcl_context_set_tensor_cores(ctx, FLASHCL_TENSOR_CORES_OFF), FLASHCL_SUCCESS);
    ck_assert_int_eq(flashcl_context_set_decode_kernel(ctx, 0), FLASHCL_SUCCESS);
    ck_assert_int_eq(flashcl_context_set_kv_splits(ctx, splits), FLASHCL_SUCCESS);
    return ctx;
}

static int last_splits(flashcl_context *ctx) {
    flashcl_call_stats stats;
    ck_assert_int_eq(flashcl_last_call_stats(ctx, &stats), FLASHCL_SUCCESS);
    return stats.kv_splits;
}

/* The count a forced request gives: at most one chunk per key block, chunks of whole blocks. */
static int expected_splits(flashcl_context *ctx, const flashcl_attention_desc *desc, int forced) {
    flashcl_call_stats s;
    ck_assert_int_eq(flashcl_explain_call(ctx, FLASHCL_PASS_FORWARD, desc, NULL, &s), FLASHCL_SUCCESS);
    const int block_k = s.plan.block_k, key_blocks = (desc->seqlen_k + block_k - 1) / block_k;
    int n = forced < key_blocks ? forced : key_blocks;
    if (n < 2) return 1;
    const int chunk = (key_blocks + n - 1) / n * block_k;
    n = (desc->seqlen_k + chunk - 1) / chunk;
    ck_assert_int_eq(s.kv_splits, n < 2 ? 1 : n); /* explain says what will run */
    return n < 2 ? 1 : n;
}

static void run(flashcl_context *ctx, const ts_problem *p, float *o, float *lse) {
    const ts_placements place = ts_uniform_placements(FLASHCL_LAYOUT_BSHD, 0, 0);
    ts_run_forward(ctx, p, &place, o, lse);
}

/* Every case x storage type x forced count against the reference, with the count that ran. */
START_TEST(forced_counts_match_reference) {
    /* Case i in type i % 3 on rusticl, in the other two on POCL (ts_split_takes). */
    if (!ts_split_takes(_i / 3, _i % 3, 3)) return;
    const ts_case *c = &cases[_i / 3];
    const flashcl_dtype dtype = (flashcl_dtype)(_i % 3);
    const flashcl_attention_desc d = ts_case_desc(c, dtype);
    ts_problem p;
    ts_problem_init(&p, &d, 100u + (uint64_t)_i, c->amplitude);
    float *o = malloc(p.q_count * sizeof *o), *lse = malloc(p.lse_count * sizeof *lse);
    for (int s = 0; s < SPLIT_COUNT; ++s) {
        flashcl_context *ctx = split_context(forced_splits[s]);
        const int want = expected_splits(ctx, &d, forced_splits[s]);
        run(ctx, &p, o, lse);
        ck_assert_int_eq(last_splits(ctx), want);
        char label[96];
        snprintf(label, sizeof label, "case %d dtype %d, %d splits", _i / 3, (int)dtype, want);
        ts_check_forward(&p, o, lse, label);
    }
    free(o);
    free(lse);
    ts_problem_free(&p);
}
END_TEST

static float max_abs(const float *x, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; ++i) m = fmaxf(m, fabsf(x[i]));
    return m;
}

/* The same split count twice: the same bits. Counts 1, 2, 5, 16 against each other: grouping the keys' sums by
 * split changes only their rounding, so O moves by a few float epsilons of max |V| (O is a weighted mean of V
 * rows: max |O| can be far smaller than the terms, ~0.03 here against |V| <= 1) and LSE by a few ulps (measured
 * on POCL: 0.34 eps x max |V|, 1 ulp of LSE). Bound: 4 of each. */
START_TEST(bits_repeat_and_counts_agree) {
    const ts_case c = {1, 2, 1, 2, 3001, 64, 0, 0, 1};
    const flashcl_attention_desc d = ts_case_desc(&c, FLASHCL_DTYPE_F32);
    ts_problem p;
    ts_problem_init(&p, &d, 7, 1.0f);
    const size_t n = p.q_count, m = p.lse_count;
    float *o1 = malloc(n * sizeof *o1), *l1 = malloc(m * sizeof *l1);
    float *o2 = malloc(n * sizeof *o2), *l2 = malloc(m * sizeof *l2);
    const int counts[] = {1, 2, 5, 16};
    flashcl_context *ctx = split_context(1);
    run(ctx, &p, o1, l1);
    const float o_scale = max_abs(p.v, p.kv_count), l_scale = max_abs(l1, m);
    for (int k = 1; k < 4; ++k) {
        ck_assert_int_eq(flashcl_context_set_kv_splits(ctx, counts[k]), FLASHCL_SUCCESS);
        run(ctx, &p, o2, l2);
        ck_assert_int_eq(last_splits(ctx), counts[k]);
        float *o3 = malloc(n * sizeof *o3), *l3 = malloc(m * sizeof *l3);
        run(ctx, &p, o3, l3);
        ck_assert_msg(memcmp(o2, o3, n * sizeof *o2) == 0 && memcmp(l2, l3, m * sizeof *l2) == 0,
                      "%d splits: two runs differ", counts[k]);
        free(o3);
        free(l3);
        double worst_o = 0.0, worst_l = 0.0;
        for (size_t i = 0; i < n; ++i) worst_o = fmax(worst_o, fabs((double)o2[i] - o1[i]));
        for (size_t i = 0; i < m; ++i) worst_l = fmax(worst_l, fabs((double)l2[i] - l1[i]));
        ck_assert_msg(worst_o <= 4.0 * FLT_EPSILON * o_scale && worst_l <= 4.0 * FLT_EPSILON * l_scale,
                      "%d splits vs 1: O differs by %g (%.2f eps x max |V|), LSE by %g (%.2f eps x max |LSE|)",
                      counts[k], worst_o, worst_o / (FLT_EPSILON * o_scale), worst_l,
                      worst_l / (FLT_EPSILON * l_scale));
    }
    free(o1);
    free(l1);
    free(o2);
    free(l2);
    ts_problem_free(&p);
}
END_TEST

/* A NaN in one query row makes that row NaN (O and LSE) through the combine; the other rows, including the empty
 * ones of a causal Sq > Sk call, are what the reference says. */
START_TEST(nan_rule_through_combine) {
    const ts_case c = {1, 1, 1, 210, 200, 16, 1, 0, 1}; /* rows 0..9 see no key */
    const flashcl_attention_desc d = ts_case_desc(&c, FLASHCL_DTYPE_F32);
    ts_problem p;
    ts_problem_init(&p, &d, 9, 1.0f);
    const int nan_row = 25;
    p.q[(size_t)nan_row * 16 + 3] = NAN;
    float *o = malloc(p.q_count * sizeof *o), *lse = malloc(p.lse_count * sizeof *lse);
    flashcl_context *ctx = split_context(4);
    run(ctx, &p, o, lse);
    ck_assert_int_gt(last_splits(ctx), 1);
    for (int row = 0; row < 210; ++row) {
        if (row == nan_row) {
            ck_assert(isnan(lse[row]));
            for (int j = 0; j < 16; ++j) ck_assert(isnan(o[row * 16 + j]));
            continue;
        }
        if (row < 10) {
            ck_assert_msg(lse[row] == -INFINITY, "row %d: empty, LSE %g", row, lse[row]);
            for (int j = 0; j < 16; ++j) ck_assert(o[row * 16 + j] == 0.0f);
            continue;
        }
        ck_assert_msg(fabs(lse[row] - p.lse_ref[row]) <= 1e-5 * fmax(1.0, fabs(p.lse_ref[row])), "row %d LSE", row);
        for (int j = 0; j < 16; ++j)
            ck_assert_msg(fabs(o[row * 16 + j] - p.o_ref[row * 16 + j]) <= 1e-5, "row %d dim %d", row, j);
    }
    free(o);
    free(lse);
    ts_problem_free(&p);
}
END_TEST

/* Automatic: a decode call (one work-group) on any device splits; what explain says is what runs. */
START_TEST(automatic_decode_splits) {
    const ts_case c = {1, 1, 1, 1, 4096, 64, 0, 0, 1};
    const flashcl_attention_desc d = ts_case_desc(&c, FLASHCL_DTYPE_F16);
    flashcl_context *ctx = split_context(0);
    flashcl_call_stats before;
    ck_assert_int_eq(flashcl_explain_call(ctx, FLASHCL_PASS_FORWARD, &d, NULL, &before), FLASHCL_SUCCESS);
    ts_problem p;
    ts_problem_init(&p, &d, 3, 1.0f);
    float *o = malloc(p.q_count * sizeof *o), *lse = malloc(p.lse_count * sizeof *lse);
    run(ctx, &p, o, lse);
    ts_check_forward(&p, o, lse, "automatic decode");
    const int ran = last_splits(ctx);
    ck_assert_int_eq(ran, before.kv_splits);
    ck_assert_msg(ran > 1, "a one-work-group decode call ran unsplit");
    ck_assert_ptr_nonnull(strstr(before.build_options, "-DFLASHCL_SPLIT_KV=1"));
    ck_assert_uint_eq(before.extra_device_bytes, (size_t)ran * 1 * (64 + 2) * sizeof(float));
    free(o);
    free(lse);
    ts_problem_free(&p);
}
END_TEST

/* Where split-KV does not apply it does not run, even forced; refusals leave the call undone. */
START_TEST(where_it_applies_and_refusals) {
    flashcl_context *ctx = split_context(4);
    const ts_case c = {1, 2, 2, 4, 512, 32, 0, 0, 1};
    flashcl_attention_desc d = ts_case_desc(&c, FLASHCL_DTYPE_F32);
    flashcl_call_stats s;
    ck_assert_int_eq(flashcl_explain_call(ctx, FLASHCL_PASS_FORWARD, &d, NULL, &s), FLASHCL_SUCCESS);
    ck_assert_int_eq(s.kv_splits, 4);
    ck_assert_int_eq(flashcl_explain_call(ctx, FLASHCL_PASS_BACKWARD, &d, NULL, &s), FLASHCL_SUCCESS);
    ck_assert_int_eq(s.kv_splits, 1); /* the backward has no split */
    flashcl_attention_desc window = d;
    window.sliding_window = 1;
    window.window_left = 16;
    ck_assert_int_eq(flashcl_explain_call(ctx, FLASHCL_PASS_FORWARD, &window, NULL, &s), FLASHCL_SUCCESS);
    ck_assert_int_eq(s.kv_splits, 1); /* features keep the unsplit kernel */
    ck_assert_int_eq(flashcl_context_set_memory_budget(ctx, 64), FLASHCL_SUCCESS);
    ck_assert_int_eq(flashcl_explain_call(ctx, FLASHCL_PASS_FORWARD, &d, NULL, &s), FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(ctx), "split-KV partials"));
    ck_assert_int_eq(flashcl_context_set_kv_splits(ctx, 0), FLASHCL_SUCCESS);
    ck_assert_int_eq(flashcl_explain_call(ctx, FLASHCL_PASS_FORWARD, &d, NULL, &s), FLASHCL_SUCCESS);
    ck_assert_int_eq(s.kv_splits, 1); /* automatic: over the budget, unsplit */
    ck_assert_int_eq(flashcl_context_set_kv_splits(ctx, -1), FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(flashcl_context_set_kv_splits(NULL, 2), FLASHCL_ERROR_INVALID_ARGUMENT);
}
END_TEST

static Suite *split_suite(void) {
    Suite *s = suite_create("split_kv");
    TCase *tc = tcase_create("split");
    tcase_set_timeout(tc, TS_CASE_TIMEOUT);
    tcase_add_loop_test(tc, forced_counts_match_reference, 0, CASE_COUNT * 3);
    tcase_add_test(tc, bits_repeat_and_counts_agree);
    tcase_add_test(tc, nan_rule_through_combine);
    tcase_add_test(tc, automatic_decode_splits);
    tcase_add_test(tc, where_it_applies_and_refusals);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    ts_sweep_announce("split_kv");
    SRunner *runner = srunner_create(split_suite());
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
