/* test_decode.c: the decode kernel (cl/decode.cl): which calls run it, and its results against the double
 * reference: GQA groups 1 to 8 (packed rows in one and in several work-groups), 1 to 8 query positions, causal
 * (bottom-right, with empty rows when Sq > Sk), sliding windows, odd and large head dims, every storage type,
 * forced split counts; the NaN rule; the same bits run to run; llvmpipe's loop budget. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

static flashcl_context *decode_context(int splits) {
    flashcl_context *ctx = ts_context();
    ck_assert_int_eq(flashcl_context_set_tensor_cores(ctx, FLASHCL_TENSOR_CORES_OFF), FLASHCL_SUCCESS);
    ck_assert_int_eq(flashcl_context_set_kv_splits(ctx, splits), FLASHCL_SUCCESS);
    return ctx;
}

static flashcl_call_stats explain(flashcl_context *ctx, const flashcl_attention_desc *d, flashcl_pass pass) {
    return ts_explain(ctx, pass, d);
}

/* Mesa llvmpipe: loops stop after 65535 iterations per work-item, and the dispatcher bounds the decode kernel's
 * chunks by that (src/device_caps.h). */
static int is_llvmpipe(flashcl_context *ctx) {
    char name[256] = "";
    ck_assert_int_eq(clGetDeviceInfo(flashcl_context_device(ctx), CL_DEVICE_NAME, sizeof name - 1, name, NULL),
                     CL_SUCCESS);
    return strstr(name, "llvmpipe") != NULL;
}

static void run(flashcl_context *ctx, const ts_problem *p, float *o, float *lse) {
    const ts_placements place = ts_uniform_placements(FLASHCL_LAYOUT_BSHD, 0, 0);
    ts_run_forward(ctx, p, &place, o, lse);
}

/* Forwards of 1..8 query positions run it; 9, the backward, a forced plan, dropout or turning it off do not. */
START_TEST(which_calls_run_it) {
    flashcl_context *ctx = decode_context(0);
    const ts_case c = {2, 8, 2, 1, 300, 64, 1, 0, 1};
    flashcl_attention_desc d = ts_case_desc(&c, FLASHCL_DTYPE_F16);
    for (int sq = 1; sq <= 8; ++sq) {
        d.seqlen_q = sq;
        const flashcl_call_stats s = explain(ctx, &d, FLASHCL_PASS_FORWARD);
        ck_assert_int_eq(s.kernel, FLASHCL_KERNEL_DECODE);
        ck_assert_str_eq(s.program, "decode.cl");
        ck_assert_str_eq(flashcl_kernel_kind_name(s.kernel), "decode");
        /* Packed rows: Sq x 4 query heads per KV head, at most 16 per work-group. */
        ck_assert_int_eq(s.plan.block_q, sq * 4 < 16 ? sq * 4 : 16);
    }
    d.seqlen_q = 9;
    ck_assert_int_eq(explain(ctx, &d, FLASHCL_PASS_FORWARD).kernel, FLASHCL_KERNEL_PORTABLE);
    d.seqlen_q = 1;
    ck_assert_int_eq(explain(ctx, &d, FLASHCL_PASS_BACKWARD).kernel, FLASHCL_KERNEL_PORTABLE);
    flashcl_attention_desc drop = d;
    drop.dropout_p = 0.1f;
    ck_assert_int_eq(explain(ctx, &drop, FLASHCL_PASS_FORWARD).kernel, FLASHCL_KERNEL_PORTABLE);
    ck_assert_int_eq(flashcl_context_set_decode_kernel(ctx, 0), FLASHCL_SUCCESS);
    ck_assert_int_eq(explain(ctx, &d, FLASHCL_PASS_FORWARD).kernel, FLASHCL_KERNEL_PORTABLE);
    ck_assert_int_eq(flashcl_context_set_decode_kernel(ctx, 1), FLASHCL_SUCCESS);
    ck_assert_int_eq(explain(ctx, &d, FLASHCL_PASS_FORWARD).kernel, FLASHCL_KERNEL_DECODE);
    const flashcl_plan forced = {16, 16, 4, 4, 0, 0};
    ck_assert_int_eq(flashcl_context_force_plan(ctx, FLASHCL_PASS_FORWARD, &forced), FLASHCL_SUCCESS);
    ck_assert_int_eq(explain(ctx, &d, FLASHCL_PASS_FORWARD).kernel, FLASHCL_KERNEL_PORTABLE);
    ck_assert_int_eq(flashcl_context_set_decode_kernel(ctx, 2), FLASHCL_ERROR_INVALID_ARGUMENT);
    ck_assert_int_eq(flashcl_context_set_decode_kernel(NULL, 1), FLASHCL_ERROR_INVALID_ARGUMENT);
    flashcl_context_free(ctx);
}
END_TEST

/* batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, causal, scale, amplitude */
static const ts_case cases[] = {
    {1, 4, 1, 1, 1000, 64, 0, 0, 1},  /* decode, group 4 */
    {2, 8, 1, 3, 517, 128, 1, 0, 1},  /* group 8, three positions, causal: 24 packed rows */
    {1, 8, 1, 5, 300, 64, 1, 0, 2},   /* 40 packed rows: two work-groups of rows, larger logits */
    {2, 3, 3, 1, 77, 40, 0, 0, 1},    /* group 1, head dim 40 */
    {1, 2, 2, 4, 129, 33, 1, 0, 1},   /* odd head dim: element loads */
    {1, 2, 1, 8, 3, 16, 1, 0, 1},     /* Sq > Sk causal: positions 0..4 see no key */
    {1, 4, 2, 2, 2049, 256, 0, 0, 1}, /* head dim 256, a length one past a multiple of 2048 */
    {3, 2, 1, 1, 1, 16, 0, 0, 1},     /* one key */
    {1, 2, 1, 1, 1, 1, 1, 0, 1},      /* head dim 1: 128 output groups of one work-item */
    {1, 2, 1, 2, 5, 2, 1, 0, 1},      /* head dim 2 */
    {1, 4, 2, 3, 40, 4, 0, 0, 1},     /* head dim 4 */
};
#define CASE_COUNT ((int)(sizeof cases / sizeof cases[0]))
static const int forced_splits[] = {0, 1, 3, 64};
#define SPLIT_COUNT ((int)(sizeof forced_splits / sizeof forced_splits[0]))

/* Every case x split count (0: automatic) against the reference, the storage type rotating with the count so
 * that every case meets all three; the decode kernel ran (on llvmpipe a forced count too small for its loop
 * budget runs the tiled kernel: explain says so first). Each case x type is a build of its own, and so is each
 * case's unsplit and split program (plus the combine's). The pairs are split between the two CPU implementations
 * (ts_split_takes; a decode program is about 3 s of llvmpipe's time): rusticl runs cases 0, 4, 8, ... with the
 * automatic count and 1, cases 2, 6, 10, ... with the forced splits 3 and 64, case i in type i % 3
 * (ts_sweep_takes), so both paths still meet cases of every type there; POCL runs every other pair, the type
 * rotating with the count. */
START_TEST(cases_match_reference) {
    const ts_case *c = &cases[_i];
    for (int s = 0; s < SPLIT_COUNT; ++s) {
        if (!ts_split_takes(_i, 2 * (forced_splits[s] > 1), 4)) continue;
        flashcl_dtype dtype = (flashcl_dtype)((s + _i) % 3);
        if (!ts_sweep_takes(_i, dtype)) dtype = (flashcl_dtype)(_i % 3);
        const flashcl_attention_desc d = ts_case_desc(c, dtype);
        ts_problem p;
        ts_problem_init(&p, &d, 300u + (uint64_t)(_i * SPLIT_COUNT + s), c->amplitude);
        float *o = malloc(p.q_count * sizeof *o), *lse = malloc(p.lse_count * sizeof *lse);
        flashcl_context *ctx = decode_context(forced_splits[s]);
        const flashcl_call_stats before = explain(ctx, &d, FLASHCL_PASS_FORWARD);
        run(ctx, &p, o, lse);
        const flashcl_call_stats after = ts_last_stats(ctx);
        ck_assert_int_eq(after.kernel, before.kernel);
        ck_assert_int_eq(after.kv_splits, before.kv_splits);
        if (!(is_llvmpipe(ctx) && forced_splits[s] != 0 && after.kernel == FLASHCL_KERNEL_PORTABLE))
            ck_assert_int_eq(after.kernel, FLASHCL_KERNEL_DECODE);
        char label[96];
        snprintf(label, sizeof label, "case %d dtype %d, %d splits", _i, (int)dtype, after.kv_splits);
        ts_check_forward(&p, o, lse, label);
        flashcl_context_free(ctx);
        free(o);
        free(lse);
        ts_problem_free(&p);
    }
}
END_TEST

/* Sliding windows (left only, both sides, with causal) over GQA rows, split and not. */
START_TEST(windows_match_reference) {
    const int sides[][3] = {{100, 0, 0}, {37, 5, 0}, {64, -1, 1}};
    const ts_case c = {1, 4, 1, 4, 700, 64, 0, 0, 1};
    flashcl_attention_desc d = ts_case_desc(&c, FLASHCL_DTYPE_F32);
    d.sliding_window = 1;
    d.window_left = sides[_i][0];
    d.window_right = sides[_i][1];
    d.causal = sides[_i][2];
    ts_problem p;
    ts_problem_init(&p, &d, 40u + (uint64_t)_i, 1.0f);
    float *o = malloc(p.q_count * sizeof *o), *lse = malloc(p.lse_count * sizeof *lse);
    for (int s = 0; s < SPLIT_COUNT; ++s) {
        flashcl_context *ctx = decode_context(forced_splits[s]);
        run(ctx, &p, o, lse);
        ck_assert_int_eq(ts_last_stats(ctx).kernel, FLASHCL_KERNEL_DECODE);
        char label[64];
        snprintf(label, sizeof label, "window %d, %d splits", _i, forced_splits[s]);
        ts_check_forward(&p, o, lse, label);
        flashcl_context_free(ctx);
    }
    free(o);
    free(lse);
    ts_problem_free(&p);
}
END_TEST

/* A NaN in one query head's row makes that row NaN, and only it (its group's other heads share the work-group);
 * rows that see no key stay empty (O = 0, LSE = -inf). Unsplit and split. */
START_TEST(nan_rule) {
    const ts_case c = {1, 4, 1, 8, 6, 16, 1, 0, 1}; /* diagonal -2: positions 0, 1 see no key */
    const flashcl_attention_desc d = ts_case_desc(&c, FLASHCL_DTYPE_F32);
    ts_problem p;
    ts_problem_init(&p, &d, 11, 1.0f);
    const int nan_head = 2, nan_pos = 5;
    p.q[((size_t)nan_head * 8 + nan_pos) * 16 + 7] = NAN;
    float *o = malloc(p.q_count * sizeof *o), *lse = malloc(p.lse_count * sizeof *lse);
    const int splits[] = {1, 3};
    for (int s = 0; s < 2; ++s) {
        flashcl_context *ctx = decode_context(splits[s]);
        run(ctx, &p, o, lse);
        ck_assert_int_eq(ts_last_stats(ctx).kernel, FLASHCL_KERNEL_DECODE);
        for (int h = 0; h < 4; ++h)
            for (int i = 0; i < 8; ++i) {
                const size_t row = (size_t)h * 8 + (size_t)i;
                if (h == nan_head && i == nan_pos) {
                    ck_assert_msg(isnan(lse[row]), "%d splits: the NaN row's LSE is %g", splits[s], lse[row]);
                    for (int j = 0; j < 16; ++j) ck_assert(isnan(o[row * 16 + j]));
                } else if (i < 2) {
                    ck_assert_msg(lse[row] == -INFINITY, "head %d pos %d: empty, LSE %g", h, i, lse[row]);
                    for (int j = 0; j < 16; ++j) ck_assert(o[row * 16 + j] == 0.0f);
                } else {
                    ck_assert_msg(fabs(lse[row] - p.lse_ref[row]) <= 1e-5 * fmax(1.0, fabs(p.lse_ref[row])),
                                  "head %d pos %d LSE %g, reference %g", h, i, lse[row], p.lse_ref[row]);
                    for (int j = 0; j < 16; ++j)
                        ck_assert_msg(fabs(o[row * 16 + j] - p.o_ref[row * 16 + j]) <= 1e-5, "head %d pos %d", h, i);
                }
            }
        flashcl_context_free(ctx);
    }
    free(o);
    free(lse);
    ts_problem_free(&p);
}
END_TEST

/* The same call twice gives the same bits; the decode kernel and the portable one agree to rounding. */
START_TEST(repeatable_and_agrees_with_portable) {
    const ts_case c = {2, 8, 2, 2, 1500, 64, 1, 0, 1};
    const flashcl_attention_desc d = ts_case_desc(&c, FLASHCL_DTYPE_F32);
    ts_problem p;
    ts_problem_init(&p, &d, 5, 1.0f);
    const size_t n = p.q_count, m = p.lse_count;
    float *o1 = malloc(n * sizeof *o1), *l1 = malloc(m * sizeof *l1);
    float *o2 = malloc(n * sizeof *o2), *l2 = malloc(m * sizeof *l2);
    flashcl_context *ctx = decode_context(0);
    run(ctx, &p, o1, l1);
    run(ctx, &p, o2, l2);
    ck_assert_int_eq(ts_last_stats(ctx).kernel, FLASHCL_KERNEL_DECODE);
    ck_assert_msg(memcmp(o1, o2, n * sizeof *o1) == 0 && memcmp(l1, l2, m * sizeof *l1) == 0,
                  "two runs of the same call differ");
    ck_assert_int_eq(flashcl_context_set_decode_kernel(ctx, 0), FLASHCL_SUCCESS);
    run(ctx, &p, o2, l2);
    ck_assert_int_eq(ts_last_stats(ctx).kernel, FLASHCL_KERNEL_PORTABLE);
    ts_check_forward(&p, o1, l1, "decode");
    ts_check_forward(&p, o2, l2, "portable");
    double worst = 0.0;
    for (size_t i = 0; i < n; ++i) worst = fmax(worst, fabs((double)o1[i] - o2[i]));
    ck_assert_msg(worst <= 1e-5, "decode and portable differ by %g", worst);
    flashcl_context_free(ctx);
    free(o1);
    free(l1);
    free(o2);
    free(l2);
    ts_problem_free(&p);
}
END_TEST

/* A long cache: on llvmpipe, whose loops stop silently after 65535 iterations per work-item, the dispatcher
 * splits the keys so each work-group stays within the budget (forcing one split there gives the tiled kernel);
 * elsewhere the automatic choice. Either way the reference agrees. */
START_TEST(long_cache_within_loop_budget) {
    const ts_case c = {1, 2, 1, 1, 20000, 64, 0, 0, 1};
    const flashcl_attention_desc d = ts_case_desc(&c, FLASHCL_DTYPE_F16);
    ts_problem p;
    ts_problem_init(&p, &d, 21, 1.0f);
    float *o = malloc(p.q_count * sizeof *o), *lse = malloc(p.lse_count * sizeof *lse);
    flashcl_context *ctx = decode_context(0);
    run(ctx, &p, o, lse);
    const flashcl_call_stats s = ts_last_stats(ctx);
    ck_assert_int_eq(s.kernel, FLASHCL_KERNEL_DECODE);
    ts_check_forward(&p, o, lse, "long cache");
    ck_assert_int_eq(flashcl_context_set_kv_splits(ctx, 1), FLASHCL_SUCCESS);
    const flashcl_call_stats unsplit = explain(ctx, &d, FLASHCL_PASS_FORWARD);
    if (is_llvmpipe(ctx))
        ck_assert_int_eq(unsplit.kernel, FLASHCL_KERNEL_PORTABLE);
    else
        ck_assert_int_eq(unsplit.kernel, FLASHCL_KERNEL_DECODE);
    flashcl_context_free(ctx);
    free(o);
    free(lse);
    ts_problem_free(&p);
}
END_TEST

static Suite *decode_suite(void) {
    Suite *s = suite_create("decode");
    TCase *tc = tcase_create("decode");
    tcase_set_timeout(tc, TS_CASE_TIMEOUT);
    tcase_add_test(tc, which_calls_run_it);
    tcase_add_loop_test(tc, cases_match_reference, 0, CASE_COUNT);
    tcase_add_loop_test(tc, windows_match_reference, 0, 3);
    tcase_add_test(tc, nan_rule);
    tcase_add_test(tc, repeatable_and_agrees_with_portable);
    tcase_add_test(tc, long_cache_within_loop_budget);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    ts_sweep_announce("decode");
    SRunner *runner = srunner_create(decode_suite());
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
