/* test_decode_mma.c: the decode kernel on matrix units (cl/decode_mma.cl; on the device's own backend where it
 * has one (NVIDIA), else on the emulated one, which uses the same fragment layouts and rounding): which calls run it, and its results against
 * the double reference: GQA groups 1 to 8 (packed rows in one and in several work-groups), 1 to 8 query
 * positions, causal (bottom-right, empty rows when Sq > Sk), a sliding window, both 16-bit storage types, head
 * dims 64 and 128, keys not a multiple of the warps' steps, forced split counts; the NaN rule; the same bits run
 * to run. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

/* The backend the suite expects: the hardware one where the device has it. */
static char expected_backend[32];

static flashcl_context *mma_context(int splits) {
    flashcl_context *ctx = ts_context();
    const int hardware = flashcl_context_has_tensor_cores(ctx);
    snprintf(expected_backend, sizeof expected_backend, "%s", hardware ? "nvidia-mma-sync" : "emulated");
    ck_assert_int_eq(flashcl_context_set_tensor_cores(ctx, hardware ? FLASHCL_TENSOR_CORES_AUTO
                                                                     : FLASHCL_TENSOR_CORES_EMULATE),
                     FLASHCL_SUCCESS);
    ck_assert_int_eq(flashcl_context_set_kv_splits(ctx, splits), FLASHCL_SUCCESS);
    return ctx;
}

static flashcl_call_stats explain(flashcl_context *ctx, const flashcl_attention_desc *d) {
    return ts_explain(ctx, FLASHCL_PASS_FORWARD, d);
}

static void run(flashcl_context *ctx, const ts_problem *p, size_t offset, float *o, float *lse) {
    const ts_placements place = ts_uniform_placements(FLASHCL_LAYOUT_BSHD, offset, 0);
    ts_run_forward(ctx, p, &place, o, lse);
}

static int ran_mma(const flashcl_call_stats *s) {
    return s->kernel == FLASHCL_KERNEL_DECODE && strcmp(s->program, "decode_mma.cl") == 0 &&
           strcmp(s->backend, expected_backend) == 0;
}

/* Whether ctx's last call ran it. */
static int last_ran_mma(flashcl_context *ctx) {
    const flashcl_call_stats s = ts_last_stats(ctx);
    return ran_mma(&s);
}

/* 16-bit storage at head dims 64 and 128 with 16-byte aligned K and V rows runs it; float, other head dims and
 * tensor cores off run cl/decode.cl. (Misaligned rows: cases_match_reference's offset case.) */
START_TEST(which_calls_run_it) {
    flashcl_context *ctx = mma_context(0);
    const ts_case c = {2, 8, 2, 1, 300, 64, 1, 0, 1};
    flashcl_attention_desc d = ts_case_desc(&c, FLASHCL_DTYPE_F16);
    for (int sq = 1; sq <= 8; ++sq) {
        d.seqlen_q = sq;
        const flashcl_call_stats s = explain(ctx, &d);
        ck_assert_msg(ran_mma(&s), "Sq %d: kernel %d program %s backend %s", sq, (int)s.kernel, s.program, s.backend);
        ck_assert_int_eq(s.plan.block_q, 16);
    }
    d.seqlen_q = 1;
    d.dtype = FLASHCL_DTYPE_BF16;
    d.head_dim = 128;
    const flashcl_call_stats bf16 = explain(ctx, &d);
    ck_assert(ran_mma(&bf16));
    d.dtype = FLASHCL_DTYPE_F32;
    ck_assert_str_eq(explain(ctx, &d).program, "decode.cl");
    d.dtype = FLASHCL_DTYPE_F16;
    d.head_dim = 96;
    ck_assert_str_eq(explain(ctx, &d).program, "decode.cl");
    d.head_dim = 64;
    ck_assert_int_eq(flashcl_context_set_tensor_cores(ctx, FLASHCL_TENSOR_CORES_OFF), FLASHCL_SUCCESS);
    ck_assert_str_eq(explain(ctx, &d).program, "decode.cl");
    flashcl_context_free(ctx);
}
END_TEST

/* batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, causal, scale, amplitude */
static const ts_case cases[] = {
    {1, 4, 1, 1, 1000, 64, 0, 0, 1},  /* decode, group 4: 4 of 16 rows real */
    {2, 8, 2, 4, 517, 128, 1, 0, 1},  /* Sq 4 x group 4: 16 rows, causal */
    {1, 8, 1, 5, 300, 64, 1, 0, 2},   /* 40 packed rows: three row blocks, larger logits */
    {2, 3, 3, 1, 77, 128, 0, 0, 1},   /* group 1 */
    {1, 2, 1, 8, 3, 64, 1, 0, 1},     /* Sq > Sk causal: positions 0..4 see no key */
    {3, 2, 1, 1, 1, 64, 0, 0, 1},     /* one key */
};
#define CASE_COUNT ((int)(sizeof cases / sizeof cases[0]))
static const int forced_splits[] = {1, 0, 3};
#define SPLIT_COUNT ((int)(sizeof forced_splits / sizeof forced_splits[0]))

/* Every case x split count (0: automatic) against the reference; f16 at head dim 64, bf16 at 128, so the suite
 * builds two programs per split mode. Split between the two CPU implementations (ts_split_takes): case i with split
 * count i % 3 on rusticl, with the other two on POCL; the cases still cover every split count on each. */
START_TEST(cases_match_reference) {
    const ts_case *c = &cases[_i];
    const flashcl_dtype dtype = c->head_dim == 128 ? FLASHCL_DTYPE_BF16 : FLASHCL_DTYPE_F16;
    const flashcl_attention_desc d = ts_case_desc(c, dtype);
    ts_problem p;
    ts_problem_init(&p, &d, 500u + (uint64_t)_i, c->amplitude);
    float *o = malloc(p.q_count * sizeof *o), *lse = malloc(p.lse_count * sizeof *lse);
    for (int s = 0; s < SPLIT_COUNT; ++s) {
        if (!ts_split_takes(_i, s, SPLIT_COUNT)) continue;
        flashcl_context *ctx = mma_context(forced_splits[s]);
        run(ctx, &p, 0, o, lse);
        const flashcl_call_stats after = ts_last_stats(ctx);
        ck_assert_msg(ran_mma(&after), "case %d: program %s", _i, after.program);
        char label[96];
        snprintf(label, sizeof label, "case %d dtype %d, %d splits", _i, (int)dtype, after.kv_splits);
        ts_check_forward(&p, o, lse, label);
        flashcl_context_free(ctx);
    }
    free(o);
    free(lse);
    ts_problem_free(&p);
}
END_TEST

/* K and V rows 8-byte aligned only (an offset of 4 elements): cl/decode.cl runs the call, correctly. */
START_TEST(misaligned_rows_run_portable) {
    const ts_case c = {1, 4, 1, 2, 100, 64, 1, 0, 1};
    const flashcl_attention_desc d = ts_case_desc(&c, FLASHCL_DTYPE_F16);
    ts_problem p;
    ts_problem_init(&p, &d, 77, 1.0f);
    float *o = malloc(p.q_count * sizeof *o), *lse = malloc(p.lse_count * sizeof *lse);
    flashcl_context *ctx = mma_context(1);
    run(ctx, &p, 4, o, lse);
    const flashcl_call_stats s = ts_last_stats(ctx);
    ck_assert_int_eq(s.kernel, FLASHCL_KERNEL_DECODE);
    ck_assert_str_eq(s.program, "decode.cl");
    ts_check_forward(&p, o, lse, "misaligned");
    flashcl_context_free(ctx);
    free(o);
    free(lse);
    ts_problem_free(&p);
}
END_TEST

/* A sliding window with causal over GQA rows of 4 positions. */
START_TEST(window_matches_reference) {
    const ts_case c = {1, 4, 1, 4, 700, 64, 1, 0, 1};
    flashcl_attention_desc d = ts_case_desc(&c, FLASHCL_DTYPE_F16);
    d.sliding_window = 1;
    d.window_left = 37;
    d.window_right = 0;
    ts_problem p;
    ts_problem_init(&p, &d, 41, 1.0f);
    float *o = malloc(p.q_count * sizeof *o), *lse = malloc(p.lse_count * sizeof *lse);
    flashcl_context *ctx = mma_context(1);
    run(ctx, &p, 0, o, lse);
    ck_assert(last_ran_mma(ctx));
    ts_check_forward(&p, o, lse, "window");
    flashcl_context_free(ctx);
    free(o);
    free(lse);
    ts_problem_free(&p);
}
END_TEST

/* A NaN in one query head's row makes that row NaN, and only it (its group's other heads share the work-group
 * and the matrix instructions); rows that see no key stay empty (O = 0, LSE = -inf). Unsplit and split. */
START_TEST(nan_rule) {
    const ts_case c = {1, 4, 1, 8, 6, 64, 1, 0, 1}; /* diagonal -2: positions 0, 1 see no key */
    const flashcl_attention_desc d = ts_case_desc(&c, FLASHCL_DTYPE_F16);
    ts_problem p;
    ts_problem_init(&p, &d, 11, 1.0f);
    const int nan_head = 2, nan_pos = 5, dim = 64;
    p.q[((size_t)nan_head * 8 + nan_pos) * dim + 7] = NAN;
    float *o = malloc(p.q_count * sizeof *o), *lse = malloc(p.lse_count * sizeof *lse);
    const int splits[] = {1, 3};
    for (int s = 0; s < 2; ++s) {
        flashcl_context *ctx = mma_context(splits[s]);
        run(ctx, &p, 0, o, lse);
        ck_assert(last_ran_mma(ctx));
        for (int h = 0; h < 4; ++h)
            for (int i = 0; i < 8; ++i) {
                const size_t row = (size_t)h * 8 + (size_t)i;
                if (h == nan_head && i == nan_pos) {
                    ck_assert_msg(isnan(lse[row]), "%d splits: the NaN row's LSE is %g", splits[s], lse[row]);
                    for (int j = 0; j < dim; ++j) ck_assert(isnan(o[row * dim + j]));
                } else if (i < 2) {
                    ck_assert_msg(lse[row] == -INFINITY, "head %d pos %d: empty, LSE %g", h, i, lse[row]);
                    for (int j = 0; j < dim; ++j) ck_assert(o[row * dim + j] == 0.0f);
                } else {
                    ck_assert_msg(isfinite(lse[row]), "head %d pos %d: LSE %g", h, i, lse[row]);
                    for (int j = 0; j < dim; ++j) ck_assert_msg(isfinite(o[row * dim + j]), "head %d pos %d", h, i);
                }
            }
        flashcl_context_free(ctx);
    }
    free(o);
    free(lse);
    ts_problem_free(&p);
}
END_TEST

/* The same call twice gives the same bits, split and not; split and unsplit agree to rounding. */
START_TEST(repeatable) {
    const ts_case c = {2, 8, 2, 2, 1500, 64, 1, 0, 1};
    const flashcl_attention_desc d = ts_case_desc(&c, FLASHCL_DTYPE_F16);
    ts_problem p;
    ts_problem_init(&p, &d, 5, 1.0f);
    const size_t n = p.q_count, m = p.lse_count;
    float *o[3], *l[3];
    for (int i = 0; i < 3; ++i) o[i] = malloc(n * sizeof *o[i]), l[i] = malloc(m * sizeof *l[i]);
    flashcl_context *ctx = mma_context(4);
    run(ctx, &p, 0, o[0], l[0]);
    run(ctx, &p, 0, o[1], l[1]);
    ck_assert_int_eq(ts_last_stats(ctx).kv_splits, 4);
    ck_assert_msg(memcmp(o[0], o[1], n * sizeof *o[0]) == 0 && memcmp(l[0], l[1], m * sizeof *l[0]) == 0,
                  "two runs of the same call differ");
    ck_assert_int_eq(flashcl_context_set_kv_splits(ctx, 1), FLASHCL_SUCCESS);
    run(ctx, &p, 0, o[2], l[2]);
    ts_check_forward(&p, o[0], l[0], "4 splits");
    ts_check_forward(&p, o[2], l[2], "unsplit");
    flashcl_context_free(ctx);
    for (int i = 0; i < 3; ++i) free(o[i]), free(l[i]);
    ts_problem_free(&p);
}
END_TEST

static Suite *decode_mma_suite(void) {
    Suite *s = suite_create("decode_mma");
    TCase *tc = tcase_create("decode_mma");
    tcase_set_timeout(tc, TS_CASE_TIMEOUT);
    tcase_add_test(tc, which_calls_run_it);
    tcase_add_loop_test(tc, cases_match_reference, 0, CASE_COUNT);
    tcase_add_test(tc, misaligned_rows_run_portable);
    tcase_add_test(tc, window_matches_reference);
    tcase_add_test(tc, nan_rule);
    tcase_add_test(tc, repeatable);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    ts_sweep_announce("decode_mma");
    SRunner *runner = srunner_create(decode_mma_suite());
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
