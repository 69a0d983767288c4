/* test_varlen_block_mask.c: a packed variable-length batch with a block mask, forward and backward, against each sequence run alone with the mask cropped to its lengths. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "feature_harness.h"
#include "test_support.h"

typedef struct vb_case {
    fh_varlen_case base;
    int block_size, per_head;
    int plan; /* index into forced_plans; 0: the planner's choice */
} vb_case;

/* Forward and backward plans forced on the context (index 0: none). */
static const flashcl_plan forward_plans[] = {{0}, {16, 16, 4, 4, 0, 0}, {32, 64, 8, 8, 0, 0}, {8, 32, 2, 16, 0, 0}};
static const flashcl_plan backward_plans[] = {{0}, {16, 16, 4, 4, 0, 0}, {16, 32, 4, 8, 0, 0}, {8, 32, 8, 4, 0, 0}};

/* Lengths not multiples of the block or tile sizes, empty sequences on
 * either side, a block size equal to the tile (whole tiles skipped) and
 * others that cut tiles, shared and per-head masks, GQA/MQA, Sq != Sk per
 * sequence, a desc maximum above the real one, and causal + window +
 * dropout on top of the mask. */
static const vb_case cases[] = {
    {{"bs 16 = tile, shared, d32", 5, 2, 2, 32, 0, {1, 37, 64, 0, 100}, {1, 37, 64, 0, 100}, 0, -1, -1, 0.0f}, 16, 0, 1},
    {{"bs 7 per head, causal gqa, q!=k, d40", 5, 4, 2, 40, 1, {5, 70, 0, 33, 19}, {50, 20, 9, 0, 19}, 7, -1, -1, 0.0f},
     7, 1, 0},
    {{"bs 24 per head, window 16,4 + dropout 0.2 + causal, d16", 3, 2, 2, 16, 1, {60, 3, 129}, {80, 3, 100}, 0, 16, 4,
     0.2f}, 24, 1, 2},
    {{"bs 64 shared, mqa, d64", 3, 3, 1, 64, 0, {130, 1, 77}, {200, 65, 77}, 0, -1, -1, 0.0f}, 64, 0, 0},
    {{"bs 1 per element, dropout 0.3, d16", 4, 2, 1, 16, 0, {9, 0, 13, 1}, {11, 4, 0, 1}, 3, -1, -1, 0.3f}, 1, 1, 3},
    {{"bs 20 shared, window 30,-1, d32", 2, 2, 2, 32, 0, {90, 41}, {45, 120}, 0, 30, -1, 0.0f}, 20, 0, 1},
};

static size_t blocks(int len, int block_size) { return ((size_t)len + (size_t)block_size - 1) / (size_t)block_size; }

/* A random block mask about 60% on over the desc's maxima, with query
 * block 1 of head 0 entirely off (rows with no visible key). */
static uint8_t *random_block_mask(const vb_case *v, int max_q, int max_k, size_t *rows, size_t *cols,
                                  size_t *bytes) {
    *rows = blocks(max_q, v->block_size);
    *cols = blocks(max_k, v->block_size);
    *bytes = (v->per_head ? (size_t)v->base.heads_q : 1) * *rows * *cols;
    uint8_t *m = malloc(*bytes);
    ck_assert_ptr_nonnull(m);
    ts_rng rng = {1000 + (uint64_t)v->block_size};
    for (size_t x = 0; x < *bytes; ++x) m[x] = ts_uniform(&rng, 0.0, 1.0) < 0.6;
    if (*rows > 1) memset(m + *cols, 0, *cols);
    return m;
}

/* The top-left (ceil(lq/bs), ceil(lk/bs)) part of each head's mask: what a
 * sequence of lengths (lq, lk) sees of the shared mask. */
static uint8_t *crop_mask(const vb_case *v, const uint8_t *mask, size_t rows, size_t cols, int lq, int lk,
                          size_t *bytes) {
    const size_t r = blocks(lq, v->block_size), c = blocks(lk, v->block_size);
    const size_t planes = v->per_head ? (size_t)v->base.heads_q : 1;
    *bytes = planes * r * c;
    uint8_t *out = malloc(*bytes);
    ck_assert_ptr_nonnull(out);
    for (size_t p = 0; p < planes; ++p)
        for (size_t i = 0; i < r; ++i) memcpy(out + (p * r + i) * c, mask + (p * rows + i) * cols, c);
    return out;
}


/* The packed batch: inputs (total, heads, dim), outputs likewise, LSE (Hq, total_q). */
typedef struct packed {
    int cu_q[FH_MAX_SEQS + 1], cu_k[FH_MAX_SEQS + 1];
    int total_q, total_k;
    size_t nq, nk, nl;
    float *q, *k, *v, *dout;
    float *o, *lse, *dq, *dk, *dv; /* results, each followed by TS_CANARY_ELEMS floats */
} packed;

static void packed_make(const vb_case *v, packed *p) {
    memset(p, 0, sizeof *p);
    p->total_q = fh_cu_offsets(v->base.len_q, v->base.batch, p->cu_q);
    p->total_k = fh_cu_offsets(v->base.len_k, v->base.batch, p->cu_k);
    p->nq = (size_t)p->total_q * v->base.heads_q * v->base.head_dim;
    p->nk = (size_t)p->total_k * v->base.heads_kv * v->base.head_dim;
    p->nl = (size_t)p->total_q * v->base.heads_q;
    ts_rng rng = {4242 + (uint64_t)v->base.head_dim};
    p->q = ts_random_floats(&rng, p->nq, -1.0f, 1.0f);
    p->k = ts_random_floats(&rng, p->nk, -1.0f, 1.0f);
    p->v = ts_random_floats(&rng, p->nk, -1.0f, 1.0f);
    p->dout = ts_random_floats(&rng, p->nq, -1.0f, 1.0f);
}

static void packed_free(packed *p) {
    float *all[] = {p->q, p->k, p->v, p->dout, p->o, p->lse, p->dq, p->dk, p->dv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) free(all[i]);
}

/* Forward and backward on the packed batch with the full block mask; results into p. */
static void run_packed(flashcl_context *ctx, const vb_case *v, const flashcl_attention_desc *d, const uint8_t *mask,
                       size_t mask_bytes, packed *p) {
    cl_context context = flashcl_context_cl_context(ctx);
    cl_command_queue queue = flashcl_context_queue(ctx);
    const size_t H = (size_t)v->base.heads_q, Hk = (size_t)v->base.heads_kv, D = (size_t)v->base.head_dim, f = sizeof(float);
    enum { Q, K, V, DO, O, L, DQ, DK, DV, CQ, CK, MASK, N };
    cl_mem m[N];
    m[Q] = ts_buffer(context, p->nq * f, p->q);
    m[K] = ts_buffer(context, p->nk * f, p->k);
    m[V] = ts_buffer(context, p->nk * f, p->v);
    m[DO] = ts_buffer(context, p->nq * f, p->dout);
    m[O] = ts_buffer(context, (p->nq + TS_CANARY_ELEMS) * f, NULL);
    m[L] = ts_buffer(context, (p->nl + TS_CANARY_ELEMS) * f, NULL);
    m[DQ] = ts_buffer(context, (p->nq + TS_CANARY_ELEMS) * f, NULL);
    m[DK] = ts_buffer(context, (p->nk + TS_CANARY_ELEMS) * f, NULL);
    m[DV] = ts_buffer(context, (p->nk + TS_CANARY_ELEMS) * f, NULL);
    m[CQ] = ts_buffer(context, sizeof(int) * (size_t)(v->base.batch + 1), p->cu_q);
    m[CK] = ts_buffer(context, sizeof(int) * (size_t)(v->base.batch + 1), p->cu_k);
    m[MASK] = ts_buffer(context, mask_bytes, mask);
    const flashcl_tensor tq = {m[Q], 0, 0, D, H * D}, tdo = {m[DO], 0, 0, D, H * D}, to = {m[O], 0, 0, D, H * D},
                         tdq = {m[DQ], 0, 0, D, H * D};
    const flashcl_tensor tk = {m[K], 0, 0, D, Hk * D}, tv = {m[V], 0, 0, D, Hk * D}, tdk = {m[DK], 0, 0, D, Hk * D},
                         tdv = {m[DV], 0, 0, D, Hk * D};
    const flashcl_tensor tl = {m[L], 0, 0, (size_t)p->total_q, 1};
    flashcl_attention_extras ex;
    flashcl_attention_extras_init(&ex);
    ex.cu_seqlens_q = m[CQ];
    ex.cu_seqlens_k = m[CK];
    ex.block_mask = m[MASK];
    ex.block_size = v->block_size;
    ex.block_mask_per_head = v->per_head;
    ck_assert_msg(flashcl_forward_ex(ctx, d, &ex, &tq, &tk, &tv, &to, &tl, 0, NULL, NULL) == FLASHCL_SUCCESS,
                  "%s forward: %s", v->base.name, flashcl_last_error(ctx));
    ck_assert_msg(flashcl_backward_ex(ctx, d, &ex, &tq, &tk, &tv, &to, &tl, &tdo, &tdq, &tdk, &tdv, 0, NULL, NULL) ==
                      FLASHCL_SUCCESS,
                  "%s backward: %s", v->base.name, flashcl_last_error(ctx));
    p->o = ts_read_floats(queue, m[O], p->nq + TS_CANARY_ELEMS);
    p->lse = ts_read_floats(queue, m[L], p->nl + TS_CANARY_ELEMS);
    p->dq = ts_read_floats(queue, m[DQ], p->nq + TS_CANARY_ELEMS);
    p->dk = ts_read_floats(queue, m[DK], p->nk + TS_CANARY_ELEMS);
    p->dv = ts_read_floats(queue, m[DV], p->nk + TS_CANARY_ELEMS);
    for (int i = 0; i < N; ++i) clReleaseMemObject(m[i]);
    ts_assert_canary(v->base.name, "O", p->o, p->nq);
    ts_assert_canary(v->base.name, "LSE", p->lse, p->nl);
    ts_assert_canary(v->base.name, "dQ", p->dq, p->nq);
    ts_assert_canary(v->base.name, "dK", p->dk, p->nk);
    ts_assert_canary(v->base.name, "dV", p->dv, p->nk);
}


/* Rows start .. start+len-1 of a packed (total, heads, dim) array as a
 * (heads, len, dim) one: the BHSD layout of the harness. */
static float *unpack(const float *x, int start, int len, int heads, int dim) {
    const size_t count = (size_t)len * (size_t)heads * (size_t)dim;
    float *out = malloc((count ? count : 1) * sizeof *out);
    ck_assert_ptr_nonnull(out);
    for (int h = 0; h < heads; ++h)
        for (int i = 0; i < len; ++i)
            memcpy(out + ((size_t)h * len + i) * dim, x + ((size_t)(start + i) * heads + h) * dim,
                   (size_t)dim * sizeof *out);
    return out;
}

/* A sequence with no queries or no keys has no dense equivalent: the definitions. */
static void check_empty_sequence(const vb_case *v, const packed *p, int b) {
    const int H = v->base.heads_q, Hk = v->base.heads_kv, D = v->base.head_dim, lq = v->base.len_q[b], lk = v->base.len_k[b];
    const size_t q0 = (size_t)p->cu_q[b] * H * D, k0 = (size_t)p->cu_k[b] * Hk * D;
    for (size_t i = 0; i < (size_t)lq * H * D; ++i) {
        fh_expect_close_in_sequence(v->base.name, "O (no keys)", b, i, p->o[q0 + i], 0.0f);
        fh_expect_close_in_sequence(v->base.name, "dQ (no keys)", b, i, p->dq[q0 + i], 0.0f);
    }
    for (int h = 0; h < H; ++h)
        for (int i = 0; i < lq; ++i)
            fh_expect_close_in_sequence(v->base.name, "LSE (no keys)", b, (size_t)i, p->lse[(size_t)h * p->total_q + p->cu_q[b] + i],
                         -INFINITY);
    for (size_t i = 0; i < (size_t)lk * Hk * D; ++i) {
        fh_expect_close_in_sequence(v->base.name, "dK (no queries)", b, i, p->dk[k0 + i], 0.0f);
        fh_expect_close_in_sequence(v->base.name, "dV (no queries)", b, i, p->dv[k0 + i], 0.0f);
    }
}

/* Sequence b run alone (dense API, its own lengths, the mask cropped to
 * them, the packed call's dropout counters): the packed results must match
 * it, and it must pass the reference's tolerance rule (against the element
 * mask built from the definitions). */
static void check_sequence(flashcl_context *ctx, const vb_case *v, const packed *p, int b, const uint8_t *mask,
                           size_t rows, size_t cols) {
    const int H = v->base.heads_q, Hk = v->base.heads_kv, D = v->base.head_dim, lq = v->base.len_q[b], lk = v->base.len_k[b];
    fh_case c;
    memset(&c, 0, sizeof c);
    c.name = v->base.name;
    c.desc = fh_varlen_desc(&v->base, 1, lq, lk, 99);
    c.desc.dropout_offset = (uint64_t)b * (uint64_t)H;
    uint8_t *cropped = crop_mask(v, mask, rows, cols, lq, lk, &c.mask_bytes);
    c.block_mask = cropped;
    c.block_size = v->block_size;
    c.per_head = v->per_head;
    fh_inputs in = {unpack(p->q, p->cu_q[b], lq, H, D), unpack(p->k, p->cu_k[b], lk, Hk, D),
                    unpack(p->v, p->cu_k[b], lk, Hk, D), unpack(p->dout, p->cu_q[b], lq, H, D),
                    (size_t)lq * H * D, (size_t)lk * Hk * D, (size_t)lq * H};
    fh_result alone;
    fh_run(ctx, &c, &in, 1, &alone);
    float *o = unpack(p->o, p->cu_q[b], lq, H, D), *dq = unpack(p->dq, p->cu_q[b], lq, H, D);
    float *dk = unpack(p->dk, p->cu_k[b], lk, Hk, D), *dv = unpack(p->dv, p->cu_k[b], lk, Hk, D);
    for (size_t i = 0; i < in.q_count; ++i) {
        fh_expect_close_in_sequence(v->base.name, "O", b, i, o[i], alone.o[i]);
        fh_expect_close_in_sequence(v->base.name, "dQ", b, i, dq[i], alone.dq[i]);
    }
    for (int h = 0; h < H; ++h)
        for (int i = 0; i < lq; ++i)
            fh_expect_close_in_sequence(v->base.name, "LSE", b, (size_t)i, p->lse[(size_t)h * p->total_q + p->cu_q[b] + i],
                         alone.lse[(size_t)h * lq + i]);
    for (size_t i = 0; i < in.kv_count; ++i) {
        fh_expect_close_in_sequence(v->base.name, "dK", b, i, dk[i], alone.dk[i]);
        fh_expect_close_in_sequence(v->base.name, "dV", b, i, dv[i], alone.dv[i]);
    }
    /* With one key dQ is identically 0: the harness's floor, relative to the
     * largest reference value, is then 0, and float rounding of D =
     * rowsum(dO * O) would fail it. The comparison above still covers it. */
    if (lk > 1) {
        uint8_t *dense = fh_dense_mask(&c);
        fh_check(&c, &in, &alone, 1, dense, NULL);
        free(dense);
    }
    free(o), free(dq), free(dk), free(dv), free(cropped);
    fh_result_free(&alone);
    fh_inputs_free(&in);
}

START_TEST(test_varlen_block_mask_matches_sequences_alone) {
    if (!ts_split_takes(_i, 0, 2)) return; /* even cases on rusticl, odd ones on POCL (ts_split_takes) */
    const vb_case *v = &cases[_i];
    const int max_q = fh_max_len(v->base.len_q, v->base.batch) + v->base.extra_max, max_k = fh_max_len(v->base.len_k, v->base.batch) + v->base.extra_max;
    size_t rows, cols, mask_bytes;
    uint8_t *mask = random_block_mask(v, max_q, max_k, &rows, &cols, &mask_bytes);
    packed p;
    packed_make(v, &p);
    flashcl_context *ctx = ts_context();
    if (v->plan) {
        ck_assert_int_eq(flashcl_context_force_plan(ctx, FLASHCL_PASS_FORWARD, &forward_plans[v->plan]),
                         FLASHCL_SUCCESS);
        ck_assert_int_eq(flashcl_context_force_plan(ctx, FLASHCL_PASS_BACKWARD, &backward_plans[v->plan]),
                         FLASHCL_SUCCESS);
    }
    const flashcl_attention_desc d = fh_varlen_desc(&v->base, v->base.batch, max_q, max_k, 99);
    run_packed(ctx, v, &d, mask, mask_bytes, &p);
    for (int b = 0; b < v->base.batch; ++b) {
        if (v->base.len_q[b] == 0 || v->base.len_k[b] == 0)
            check_empty_sequence(v, &p, b);
        else
            check_sequence(ctx, v, &p, b, mask, rows, cols);
    }
    flashcl_context_free(ctx);
    packed_free(&p);
    free(mask);
}
END_TEST

/* The mask is sized by the desc's maxima, not the packed totals; a smaller
 * buffer is refused; an output that overlaps the mask is caught with the
 * packed extents (which reach past the (batch, longest) ones). */
START_TEST(test_varlen_block_mask_validation) {
    flashcl_context *ctx = ts_context();
    cl_context context = flashcl_context_cl_context(ctx);
    flashcl_attention_desc d;
    flashcl_attention_desc_init(&d, 2, 1, 8, 8, 16);
    static const int cu[3] = {0, 5, 12}; /* lengths 5 and 7, 12 packed rows */
    static const uint8_t on[4] = {1, 1, 1, 1};
    enum { IN, O, L, DQ, DK, DV, CQ, CK, MASK3, MASK4, N };
    cl_mem m[N];
    for (int i = IN; i <= DV; ++i) m[i] = ts_buffer(context, 4096, NULL);
    m[CQ] = ts_buffer(context, sizeof cu, cu);
    m[CK] = ts_buffer(context, sizeof cu, cu);
    m[MASK3] = ts_buffer(context, 3, on);
    m[MASK4] = ts_buffer(context, 4, on);
    const flashcl_tensor t = {m[IN], 0, 0, 16, 16}, o = {m[O], 0, 0, 16, 16}, l = {m[L], 0, 0, 12, 1};
    const flashcl_tensor dq = {m[DQ], 0, 0, 16, 16}, dk = {m[DK], 0, 0, 16, 16}, dv = {m[DV], 0, 0, 16, 16};
    flashcl_attention_extras ex;
    flashcl_attention_extras_init(&ex);
    ex.cu_seqlens_q = m[CQ];
    ex.cu_seqlens_k = m[CK];
    ex.block_size = 4; /* (2, 2) blocks over the maxima 8 x 8; the totals would need (3, 3) */
    ex.block_mask = m[MASK3];
    ck_assert_int_eq(flashcl_forward_ex(ctx, &d, &ex, &t, &t, &t, &o, &l, 0, NULL, NULL),
                     FLASHCL_ERROR_BUFFER_TOO_SMALL);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(ctx), "block_mask"));
    ck_assert_int_eq(flashcl_backward_ex(ctx, &d, &ex, &t, &t, &t, &o, &l, &t, &dq, &dk, &dv, 0, NULL, NULL),
                     FLASHCL_ERROR_BUFFER_TOO_SMALL);
    ex.block_mask = m[MASK4];
    ck_assert_msg(flashcl_forward_ex(ctx, &d, &ex, &t, &t, &t, &o, &l, 0, NULL, NULL) == FLASHCL_SUCCESS, "%s",
                  flashcl_last_error(ctx));
    ck_assert_msg(flashcl_backward_ex(ctx, &d, &ex, &t, &t, &t, &o, &l, &t, &dq, &dk, &dv, 0, NULL, NULL) ==
                      FLASHCL_SUCCESS,
                  "%s", flashcl_last_error(ctx));
    ck_assert_int_eq(clFinish(flashcl_context_queue(ctx)), CL_SUCCESS);
    /* The mask at packed row 8 of O's (and then dQ's) buffer: inside the 12
     * packed rows, past the 8 rows a (batch, longest) shape with batch
     * stride 0 would cover. */
    ex.block_mask = m[O];
    ex.block_mask_offset = 8 * 16 * sizeof(float);
    ck_assert_int_eq(flashcl_forward_ex(ctx, &d, &ex, &t, &t, &t, &o, &l, 0, NULL, NULL), FLASHCL_ERROR_ALIASING);
    ex.block_mask = m[DQ];
    ck_assert_int_eq(flashcl_backward_ex(ctx, &d, &ex, &t, &t, &t, &o, &l, &t, &dq, &dk, &dv, 0, NULL, NULL),
                     FLASHCL_ERROR_ALIASING);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(ctx), "block_mask"));
    /* The standard implementation has neither feature. */
    ex.block_mask = m[MASK4];
    ex.block_mask_offset = 0;
    ck_assert_int_eq(flashcl_context_set_impl(ctx, FLASHCL_IMPL_STANDARD), FLASHCL_SUCCESS);
    ck_assert_int_eq(flashcl_forward_ex(ctx, &d, &ex, &t, &t, &t, &o, &l, 0, NULL, NULL), FLASHCL_ERROR_UNSUPPORTED);
    for (int i = 0; i < N; ++i) clReleaseMemObject(m[i]);
    flashcl_context_free(ctx);
}
END_TEST

static Suite *varlen_block_mask_suite(void) {
    Suite *s = suite_create("varlen_block_mask");
    TCase *tc = tcase_create("varlen_block_mask");
    tcase_set_timeout(tc, TS_CASE_TIMEOUT);
    tcase_add_loop_test(tc, test_varlen_block_mask_matches_sequences_alone, 0, (int)(sizeof cases / sizeof cases[0]));
    tcase_add_test(tc, test_varlen_block_mask_validation);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    ts_sweep_announce("varlen_block_mask");
    SRunner *runner = srunner_create(varlen_block_mask_suite());
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
