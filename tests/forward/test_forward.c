/* test_forward.c: flashcl_forward against the double reference over odd shapes, layouts, strides, masks and dtypes. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "test_support.h"

/* The odd pairs of docs/testing.md, its head dims (and 1), causal and not,
 * seqlen_q > seqlen_k under causal (fully masked top rows), GQA and MQA. */
static const ts_case sweep[] = {
    {2, 2, 2, 1, 1, 64, 0, 0, 1},      {1, 2, 1, 1, 1, 1, 1, 0, 1},       {2, 4, 2, 1, 239, 16, 1, 0, 1},
    {1, 2, 2, 3, 799, 40, 0, 0, 1},    {1, 3, 1, 113, 203, 59, 1, 0, 1},  {1, 2, 1, 127, 512, 80, 0, 0, 1},
    {2, 2, 2, 128, 217, 96, 1, 0, 1},  {1, 2, 2, 255, 256, 111, 0, 0, 1}, {1, 2, 2, 512, 256, 128, 1, 0, 1},
    {1, 1, 1, 1023, 1024, 64, 1, 0, 1}, {1, 1, 1, 1024, 1023, 32, 0, 0, 1}, {1, 2, 2, 200, 100, 48, 1, 0, 1},
    {1, 2, 1, 129, 65, 160, 0, 0, 1},  {1, 1, 1, 64, 333, 192, 1, 0, 1},  {1, 2, 2, 65, 257, 256, 0, 0, 1},
    {1, 1, 1, 300, 129, 256, 1, 0, 1}, {1, 2, 2, 77, 91, 32, 0, 0.3f, 1}, {2, 2, 1, 33, 47, 40, 1, 1.7f, 1},
};
#define SWEEP_COUNT ((int)(sizeof sweep / sizeof sweep[0]))

/* Scores far beyond 88, where exp() overflows in float: the online softmax
 * must subtract the running maximum first. */
static const ts_case large_logits[] = {
    {1, 2, 2, 150, 170, 64, 0, 2.0f, 3},
    {1, 2, 1, 90, 60, 40, 1, 2.5f, 3},
};
#define LARGE_COUNT ((int)(sizeof large_logits / sizeof large_logits[0]))

static void describe(char *out, size_t size, const flashcl_attention_desc *d, const char *placement) {
    snprintf(out, size, "B%d Hq%d Hkv%d Sq%d Sk%d D%d %s scale %g dtype %d, %s", d->batch, d->heads_q, d->heads_kv,
             d->seqlen_q, d->seqlen_k, d->head_dim, d->causal ? "causal" : "full", (double)d->scale, (int)d->dtype,
             placement);
}

/* Three placements of the same problem: contiguous BHSD (float4 K/V reads
 * where the kernel can use them), BSHD with a 4-aligned offset and padding
 * (float4 reads through strides), and a mix of layouts with odd offsets and
 * padding on every tensor (the scalar path). */
static ts_placements placement_variant(int variant, const char **name) {
    if (variant == 0) {
        *name = "BHSD contiguous";
        return ts_uniform_placements(FLASHCL_LAYOUT_BHSD, 0, 0);
    }
    if (variant == 1) {
        *name = "BSHD offset 8 pad 4";
        return ts_uniform_placements(FLASHCL_LAYOUT_BSHD, 8, 4);
    }
    *name = "mixed layouts, odd offsets and pads";
    return (ts_placements){{FLASHCL_LAYOUT_BSHD, 5, 3},
                           {FLASHCL_LAYOUT_BHSD, 1, 0},
                           {FLASHCL_LAYOUT_BSHD, 2, 1},
                           {FLASHCL_LAYOUT_BHSD, 7, 2},
                           {FLASHCL_LAYOUT_BSHD, 3, 1}};
}

/* Runs one problem in every placement on one context and checks each. */
static void run_all_placements(flashcl_context *ctx, const ts_problem *p) {
    float *o = malloc(p->q_count * sizeof *o), *lse = malloc(p->lse_count * sizeof *lse);
    ck_assert(o && lse);
    for (int variant = 0; variant < 3; ++variant) {
        const char *name;
        const ts_placements place = placement_variant(variant, &name);
        char label[256];
        describe(label, sizeof label, &p->desc, name);
        ts_run_forward(ctx, p, &place, o, lse);
        ts_check_forward(p, o, lse, label);
    }
    free(o);
    free(lse);
}

static void run_case(const ts_case *c, flashcl_dtype dtype, uint64_t seed) {
    flashcl_context *ctx = ts_context();
    const flashcl_attention_desc d = ts_case_desc(c, dtype);
    ts_problem p;
    ts_problem_init(&p, &d, seed, c->amplitude);
    run_all_placements(ctx, &p);
    ts_problem_free(&p);
    flashcl_context_free(ctx);
}

/* Even cases on rusticl, odd ones on POCL (ts_split_takes). */
START_TEST(test_sweep) {
    if (ts_split_takes(_i, 0, 2)) run_case(&sweep[_i], FLASHCL_DTYPE_F32, 1000u + (uint64_t)_i);
}
END_TEST

START_TEST(test_large_logits) {
    const ts_case *c = &large_logits[_i];
    flashcl_context *ctx = ts_context();
    const flashcl_attention_desc d = ts_case_desc(c, FLASHCL_DTYPE_F32);
    ts_problem p;
    ts_problem_init(&p, &d, 2000u + (uint64_t)_i, c->amplitude);
    /* The case must really produce such scores: LSE >= the row's largest score. */
    double max_lse = -INFINITY;
    for (size_t i = 0; i < p.lse_count; ++i) max_lse = fmax(max_lse, p.lse_ref[i]);
    ck_assert_msg(max_lse > 88.0, "the large-logit case reaches only %g", max_lse);
    p.check_target = 0;
    run_all_placements(ctx, &p);
    ts_problem_free(&p);
    flashcl_context_free(ctx);
}
END_TEST

/* Sequence lengths one below, at and one above the tiles the context's own
 * plan uses, and twice the query tile plus one. */
START_TEST(test_tile_edges) {
    if (!ts_split_takes(_i, 0, 2)) return; /* even cases on rusticl, odd ones on POCL (ts_split_takes) */
    flashcl_context *ctx = ts_context();
    flashcl_attention_desc d;
    flashcl_attention_desc_init(&d, 1, 2, 64, 64, 64);
    flashcl_plan plan;
    ck_assert_int_eq(flashcl_context_plan(ctx, FLASHCL_PASS_FORWARD, &d, &plan), FLASHCL_SUCCESS);
    const int dq = _i / 4 - 1, dk = _i % 4 - 1; /* -1, 0, +1, and 2T+1 for the fourth */
    d.seqlen_q = dq == 2 ? 2 * plan.block_q + 1 : plan.block_q + dq;
    d.seqlen_k = dk == 2 ? 2 * plan.block_k + 1 : plan.block_k + dk;
    d.causal = (_i + _i / 4) % 2; /* both masks at every pair of edges */
    if (d.seqlen_q < 1) d.seqlen_q = 1;
    if (d.seqlen_k < 1) d.seqlen_k = 1;
    ts_problem p;
    ts_problem_init(&p, &d, 3000u + (uint64_t)_i, 1.0f);
    run_all_placements(ctx, &p);
    ts_problem_free(&p);
    flashcl_context_free(ctx);
}
END_TEST

/* Without an LSE tensor the kernel writes O only (and nothing else). */
START_TEST(test_without_lse) {
    flashcl_context *ctx = ts_context();
    const ts_case c = {2, 2, 1, 70, 90, 48, _i, 0, 1};
    const flashcl_attention_desc d = ts_case_desc(&c, FLASHCL_DTYPE_F32);
    ts_problem p;
    ts_problem_init(&p, &d, 4000u + (uint64_t)_i, 1.0f);
    float *o = malloc(p.q_count * sizeof *o);
    ck_assert(o != NULL);
    const ts_placements place = ts_uniform_placements(FLASHCL_LAYOUT_BSHD, 3, 1);
    ts_run_forward(ctx, &p, &place, o, NULL);
    ts_check_forward(&p, o, NULL, "no LSE tensor");
    free(o);
    ts_problem_free(&p);
    flashcl_context_free(ctx);
}
END_TEST

/* The host-array convenience call in both layouts. */
START_TEST(test_forward_host) {
    const flashcl_layout layout = _i == 0 ? FLASHCL_LAYOUT_BHSD : FLASHCL_LAYOUT_BSHD;
    flashcl_context *ctx = ts_context();
    const ts_case c = {2, 4, 2, 61, 130, 72, _i, 0, 1};
    const flashcl_attention_desc d = ts_case_desc(&c, FLASHCL_DTYPE_F32);
    ts_problem p;
    ts_problem_init(&p, &d, 5000u + (uint64_t)_i, 1.0f);
    float *q = malloc(p.q_count * sizeof(float)), *k = malloc(p.kv_count * sizeof(float));
    float *v = malloc(p.kv_count * sizeof(float)), *o = malloc(p.q_count * sizeof(float));
    float *o_bhsd = malloc(p.q_count * sizeof(float)), *lse = malloc(p.lse_count * sizeof(float));
    ck_assert(q && k && v && o && o_bhsd && lse);
    if (layout == FLASHCL_LAYOUT_BSHD) {
        flashcl_reference_bhsd_to_bshd(p.q, q, d.batch, d.heads_q, d.seqlen_q, d.head_dim);
        flashcl_reference_bhsd_to_bshd(p.k, k, d.batch, d.heads_kv, d.seqlen_k, d.head_dim);
        flashcl_reference_bhsd_to_bshd(p.v, v, d.batch, d.heads_kv, d.seqlen_k, d.head_dim);
    } else {
        for (size_t i = 0; i < p.q_count; ++i) q[i] = p.q[i];
        for (size_t i = 0; i < p.kv_count; ++i) k[i] = p.k[i], v[i] = p.v[i];
    }
    for (size_t i = 0; i < p.q_count; ++i) o[i] = NAN;
    for (size_t i = 0; i < p.lse_count; ++i) lse[i] = NAN;
    flashcl_status s = flashcl_forward_host(ctx, &d, layout, q, k, v, o, lse);
    ck_assert_msg(s == FLASHCL_SUCCESS, "flashcl_forward_host: %s", flashcl_last_error(ctx));
    if (layout == FLASHCL_LAYOUT_BSHD)
        flashcl_reference_bshd_to_bhsd(o, o_bhsd, d.batch, d.seqlen_q, d.heads_q, d.head_dim);
    else
        for (size_t i = 0; i < p.q_count; ++i) o_bhsd[i] = o[i];
    ts_check_forward(&p, o_bhsd, lse, layout == FLASHCL_LAYOUT_BSHD ? "host BSHD" : "host BHSD");
    free(q), free(k), free(v), free(o), free(o_bhsd), free(lse);
    ts_problem_free(&p);
    flashcl_context_free(ctx);
}
END_TEST

/* 16-bit storage: inputs rounded on the host, the golden reference on the
 * rounded values, O judged against the golden O rounded to the storage. */
static const ts_case storage_cases[] = {
    {1, 2, 1, 113, 203, 64, 1, 0, 1},
    {1, 2, 2, 3, 799, 40, 0, 0, 1},
    {1, 1, 1, 130, 77, 59, 1, 0, 1},
    {1, 2, 2, 96, 160, 128, 0, 0, 1},
};
#define STORAGE_COUNT ((int)(sizeof storage_cases / sizeof storage_cases[0]))

/* Each shape is a kernel build of its own per 16-bit type, split between the two CPU implementations
 * (ts_split_takes): even cases in f16 and odd ones in bf16 on rusticl, the other way round on POCL. */
START_TEST(test_half) {
    if (ts_split_takes(_i, 0, 2)) run_case(&storage_cases[_i], FLASHCL_DTYPE_F16, 6000u + (uint64_t)_i);
}
END_TEST

START_TEST(test_bfloat16) {
    if (ts_split_takes(_i, 1, 2)) run_case(&storage_cases[_i], FLASHCL_DTYPE_BF16, 7000u + (uint64_t)_i);
}
END_TEST

/* The host converters the 16-bit tests rely on, at their edge values. */
START_TEST(test_storage_conversions) {
    ck_assert_uint_eq(float_to_half(1.0f), 0x3c00u);
    ck_assert_uint_eq(float_to_half(-2.0f), 0xc000u);
    ck_assert_uint_eq(float_to_half(65504.0f), 0x7bffu);
    ck_assert_uint_eq(float_to_half(65520.0f), 0x7c00u);         /* ties to even: overflow */
    ck_assert_uint_eq(float_to_half(ldexpf(1.0f, -24)), 0x0001u); /* smallest subnormal */
    ck_assert_uint_eq(float_to_half(1.0f + ldexpf(1.0f, -11)), 0x3c00u); /* tie to even, down */
    ck_assert_uint_eq(float_to_half(1.0f + 3 * ldexpf(1.0f, -11)), 0x3c02u); /* tie to even, up */
    ck_assert(half_to_float(0x3555u) == 0x1.554p-2f);
    ck_assert(half_to_float(0x0200u) == ldexpf(1.0f, -15));
    ck_assert_uint_eq(float_to_bf16(1.0f), 0x3f80u);
    ck_assert_uint_eq(float_to_bf16(1.0f + ldexpf(1.0f, -8)), 0x3f80u); /* tie to even */
    ck_assert(bf16_to_float(0x4049u) == 3.140625f);
    for (uint32_t h = 0; h < 0x7c00u; ++h) /* every finite half round-trips */
        ck_assert_uint_eq(float_to_half(half_to_float((uint16_t)h)), h);
}
END_TEST

static Suite *forward_suite(void) {
    Suite *s = suite_create("forward");
    TCase *tc = tcase_create("sweep");
    tcase_set_timeout(tc, TS_CASE_TIMEOUT);
    tcase_add_loop_test(tc, test_sweep, 0, SWEEP_COUNT);
    tcase_add_loop_test(tc, test_large_logits, 0, LARGE_COUNT);
    tcase_add_loop_test(tc, test_tile_edges, 0, 16);
    tcase_add_loop_test(tc, test_without_lse, 0, 2);
    tcase_add_loop_test(tc, test_forward_host, 0, 2);
    suite_add_tcase(s, tc);
    TCase *storage = tcase_create("storage");
    tcase_set_timeout(storage, TS_CASE_TIMEOUT);
    tcase_add_test(storage, test_storage_conversions);
    tcase_add_loop_test(storage, test_half, 0, STORAGE_COUNT);
    tcase_add_loop_test(storage, test_bfloat16, 0, STORAGE_COUNT);
    suite_add_tcase(s, storage);
    return s;
}

int main(void) {
    ts_sweep_announce("forward");
    SRunner *runner = srunner_create(forward_suite());
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
