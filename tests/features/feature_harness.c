/* feature_harness.c: runs forward and backward with a window, block mask or dropout and judges them against the reference. */
#include "feature_harness.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention_reference.h"
#include "test_support.h"

void fh_inputs_make(const fh_case *c, uint64_t seed, fh_inputs *in) {
    const flashcl_attention_desc *d = &c->desc;
    in->q_count = (size_t)d->batch * d->heads_q * d->seqlen_q * d->head_dim;
    in->kv_count = (size_t)d->batch * d->heads_kv * d->seqlen_k * d->head_dim;
    in->lse_count = (size_t)d->batch * d->heads_q * d->seqlen_q;
    /* Every input in [-1, 1], Q and K included: the feature suites judge
     * masks and dropout, not large logits (the forward and backward suites'
     * amplitude sweeps cover those). */
    ts_rng rng = {seed};
    in->q = ts_random_floats(&rng, in->q_count, -1.0f, 1.0f);
    in->k = ts_random_floats(&rng, in->kv_count, -1.0f, 1.0f);
    in->v = ts_random_floats(&rng, in->kv_count, -1.0f, 1.0f);
    in->dout = ts_random_floats(&rng, in->q_count, -1.0f, 1.0f);
}

void fh_inputs_free(fh_inputs *in) {
    free(in->q), free(in->k), free(in->v), free(in->dout);
    memset(in, 0, sizeof *in);
}

void fh_run(flashcl_context *ctx, const fh_case *c, const fh_inputs *in, int backward, fh_result *out) {
    fh_run_ex(ctx, c, in, backward, NULL, out);
}

void fh_run_ex(flashcl_context *ctx, const fh_case *c, const fh_inputs *in, int backward,
               const flashcl_attention_extras *base, fh_result *out) {
    const flashcl_attention_desc *d = &c->desc;
    cl_context context = flashcl_context_cl_context(ctx);
    cl_command_queue queue = flashcl_context_queue(ctx);
    /* Contiguous BHSD views followed by canaries; outputs start poisoned. */
    const ts_placement at = {FLASHCL_LAYOUT_BHSD, 0, 0};
    const size_t B = (size_t)d->batch, hq = (size_t)d->heads_q, hkv = (size_t)d->heads_kv;
    const size_t sq = (size_t)d->seqlen_q, sk = (size_t)d->seqlen_k, hd = (size_t)d->head_dim;
    const flashcl_dtype f32 = FLASHCL_DTYPE_F32, dt = d->dtype;
    enum { Q, K, V, O, L, DO, DQ, DK, DV, N };
    ts_tensor t[N];
    memset(t, 0, sizeof t);
    ts_tensor_create(&t[Q], context, &at, B, hq, sq, hd, dt, in->q);
    ts_tensor_create(&t[K], context, &at, B, hkv, sk, hd, dt, in->k);
    ts_tensor_create(&t[V], context, &at, B, hkv, sk, hd, dt, in->v);
    ts_tensor_create(&t[O], context, &at, B, hq, sq, hd, dt, NULL);
    ts_tensor_create(&t[L], context, &at, B, hq, sq, 1, f32, NULL);
    cl_mem mask = NULL;
    flashcl_attention_extras extras;
    if (base)
        extras = *base;
    else
        flashcl_attention_extras_init(&extras);
    if (c->block_mask) {
        mask = ts_buffer(context, c->mask_bytes, c->block_mask);
        extras.block_mask = mask;
        extras.block_size = c->block_size;
        extras.block_mask_per_head = c->per_head;
    }
    flashcl_status s =
        flashcl_forward_ex(ctx, d, &extras, &t[Q].view, &t[K].view, &t[V].view, &t[O].view, &t[L].view, 0, NULL, NULL);
    ck_assert_msg(s == FLASHCL_SUCCESS, "%s forward: %s", c->name, flashcl_last_error(ctx));
    memset(out, 0, sizeof *out);
    if (backward) {
        ts_tensor_create(&t[DO], context, &at, B, hq, sq, hd, dt, in->dout);
        ts_tensor_create(&t[DQ], context, &at, B, hq, sq, hd, dt, NULL);
        ts_tensor_create(&t[DK], context, &at, B, hkv, sk, hd, dt, NULL);
        ts_tensor_create(&t[DV], context, &at, B, hkv, sk, hd, dt, NULL);
        s = flashcl_backward_ex(ctx, d, &extras, &t[Q].view, &t[K].view, &t[V].view, &t[O].view, &t[L].view,
                                &t[DO].view, &t[DQ].view, &t[DK].view, &t[DV].view, 0, NULL, NULL);
        ck_assert_msg(s == FLASHCL_SUCCESS, "%s backward: %s", c->name, flashcl_last_error(ctx));
        out->dq = malloc(in->q_count * sizeof(float));
        out->dk = malloc(in->kv_count * sizeof(float));
        out->dv = malloc(in->kv_count * sizeof(float));
        ck_assert(out->dq && out->dk && out->dv);
        ts_tensor_read_output(queue, &t[DQ], "dQ", out->dq);
        ts_tensor_read_output(queue, &t[DK], "dK", out->dk);
        ts_tensor_read_output(queue, &t[DV], "dV", out->dv);
    }
    out->o = malloc(in->q_count * sizeof(float));
    out->lse = malloc(in->lse_count * sizeof(float));
    ck_assert(out->o && out->lse);
    ts_tensor_read_output(queue, &t[O], "O", out->o);
    ts_tensor_read_output(queue, &t[L], "LSE", out->lse);
    for (int i = 0; i < N; ++i)
        if (t[i].view.buffer) ts_tensor_free(&t[i]);
    if (mask) clReleaseMemObject(mask);
}

void fh_result_free(fh_result *r) {
    free(r->o), free(r->lse), free(r->dq), free(r->dk), free(r->dv);
    memset(r, 0, sizeof *r);
}

uint8_t *fh_dense_mask(const fh_case *c) {
    const flashcl_attention_desc *d = &c->desc;
    const size_t rows = ((size_t)d->seqlen_q + (size_t)c->block_size - 1) / (size_t)(c->block_size ? c->block_size : 1);
    const size_t cols = ((size_t)d->seqlen_k + (size_t)c->block_size - 1) / (size_t)(c->block_size ? c->block_size : 1);
    uint8_t *mask = malloc((size_t)d->batch * d->heads_q * d->seqlen_q * d->seqlen_k);
    ck_assert(mask);
    size_t x = 0;
    for (int b = 0; b < d->batch; ++b)
        for (int h = 0; h < d->heads_q; ++h)
            for (int i = 0; i < d->seqlen_q; ++i)
                for (int j = 0; j < d->seqlen_k; ++j) {
                    const long pos = (long)i + d->seqlen_k - d->seqlen_q;
                    int on = 1;
                    if (d->causal && j > pos) on = 0;
                    if (d->window_left >= 0 && j < pos - d->window_left) on = 0;
                    if (d->window_right >= 0 && j > pos + d->window_right) on = 0;
                    if (c->block_mask) {
                        const uint8_t *plane = c->block_mask + (c->per_head ? (size_t)h * rows * cols : 0);
                        if (!plane[(size_t)(i / c->block_size) * cols + (size_t)(j / c->block_size)]) on = 0;
                    }
                    mask[x++] = (uint8_t)on;
                }
    return mask;
}

/* The feature suites hold O and LSE to k = 2 and every gradient to k = 5
 * (no relative target: dropout's 1/(1-p) and masks change the magnitudes). */
static void check_one(const char *label, const char *what, const float *got, const double *ref, const double *low,
                      size_t n, double k) {
    const ts_rule rule = {k, 0.0, 0};
    ts_assert_rule(label, what, got, ref, low, n, &rule);
}

void fh_check(const fh_case *c, const fh_inputs *in, const fh_result *r, int backward, const uint8_t *mask,
              const uint8_t *keep) {
    fh_check_ex(c, in, r, backward, mask, keep, NULL);
}

void fh_check_ex(const fh_case *c, const fh_inputs *in, const fh_result *r, int backward, const uint8_t *mask,
                 const uint8_t *keep, const flashcl_reference_extras *mods) {
    flashcl_attention_desc plain = c->desc; /* the mask stands for causal and window */
    if (mask) {
        plain.causal = 0;
        plain.sliding_window = 0;
    }
    flashcl_reference_extras extras = {.mask = mask, .keep = keep};
    if (mods) {
        extras.softcap = mods->softcap;
        extras.alibi_slopes = mods->alibi_slopes;
        extras.alibi_per_batch = mods->alibi_per_batch;
        extras.bias = mods->bias;
        extras.bias_batch = mods->bias_batch;
        extras.bias_heads = mods->bias_heads;
    }
    const size_t nq = in->q_count, nkv = in->kv_count, nl = in->lse_count;
    double *gold = malloc(sizeof(double) * (nq + nl + nq + 2 * nkv));
    double *low = malloc(sizeof(double) * (nq + nl + nq + 2 * nkv));
    ck_assert(gold && low);
    ck_assert_int_eq(flashcl_reference_forward_ex(&plain, FLASHCL_REF_DOUBLE, &extras, in->q, in->k, in->v, gold,
                                                  gold + nq),
                     0);
    ck_assert_int_eq(flashcl_reference_forward_ex(&plain, FLASHCL_REF_FLOAT, &extras, in->q, in->k, in->v, low,
                                                  low + nq),
                     0);
    /* A 16-bit O can be no closer than the golden O rounded to its storage. */
    if (c->desc.dtype != FLASHCL_DTYPE_F32)
        for (size_t i = 0; i < nq; ++i) low[i] = ts_round_to_dtype((float)gold[i], c->desc.dtype);
    check_one(c->name, "O", r->o, gold, low, nq, 2.0);
    check_one(c->name, "LSE", r->lse, gold + nq, low + nq, nl, 2.0);
    /* Rows with no visible key: O exactly 0 (and LSE -inf, checked above). */
    const int hd = c->desc.head_dim;
    for (size_t row = 0; row < nl; ++row)
        if (gold[nq + row] == -INFINITY)
            for (int t = 0; t < hd; ++t)
                ck_assert_msg(r->o[row * hd + t] == 0.0f, "%s: fully masked row %zu has O %g", c->name, row,
                              (double)r->o[row * hd + t]);
    if (backward) {
        double *g = gold + nq + nl, *l = low + nq + nl;
        ck_assert_int_eq(flashcl_reference_backward_ex(&plain, FLASHCL_REF_DOUBLE, &extras, in->q, in->k, in->v,
                                                       in->dout, g, g + nq, g + nq + nkv),
                         0);
        ck_assert_int_eq(flashcl_reference_backward_ex(&plain, FLASHCL_REF_FLOAT, &extras, in->q, in->k, in->v,
                                                       in->dout, l, l + nq, l + nq + nkv),
                         0);
        check_one(c->name, "dQ", r->dq, g, l, nq, 5.0);
        check_one(c->name, "dK", r->dk, g + nq, l + nq, nkv, 5.0);
        check_one(c->name, "dV", r->dv, g + nq + nkv, l + nq + nkv, nkv, 5.0);
        for (size_t row = 0; row < nl; ++row)
            if (gold[nq + row] == -INFINITY)
                for (int t = 0; t < hd; ++t)
                    ck_assert_msg(r->dq[row * hd + t] == 0.0f, "%s: fully masked row %zu has dQ %g", c->name, row,
                                  (double)r->dq[row * hd + t]);
    }
    free(gold);
    free(low);
}

void fh_check_forced_plans(const fh_case *c, uint64_t seed) {
    static const flashcl_plan forward_plans[] = {{16, 16, 4, 4, 0, 0}, {32, 64, 8, 8, 0, 0}, {8, 32, 2, 16, 0, 0}};
    static const flashcl_plan backward_plans[] = {{16, 16, 4, 4, 0, 0}, {16, 32, 4, 8, 0, 0}, {8, 32, 8, 4, 0, 0}};
    fh_inputs in;
    fh_inputs_make(c, seed, &in);
    uint8_t *mask = fh_dense_mask(c);
    for (int p = 0; p < 3; ++p) {
        flashcl_context *ctx = ts_context();
        ck_assert_int_eq(flashcl_context_force_plan(ctx, FLASHCL_PASS_FORWARD, &forward_plans[p]), FLASHCL_SUCCESS);
        ck_assert_int_eq(flashcl_context_force_plan(ctx, FLASHCL_PASS_BACKWARD, &backward_plans[p]), FLASHCL_SUCCESS);
        fh_result r;
        fh_run(ctx, c, &in, 1, &r);
        fh_check(c, &in, &r, 1, mask, NULL);
        fh_result_free(&r);
        flashcl_context_free(ctx);
    }
    free(mask);
    fh_inputs_free(&in);
}

int fh_max_len(const int *len, int n) {
    int m = 0;
    for (int b = 0; b < n; ++b) m = len[b] > m ? len[b] : m;
    return m;
}

int fh_cu_offsets(const int *len, int n, int *cu) {
    cu[0] = 0;
    for (int b = 0; b < n; ++b) cu[b + 1] = cu[b] + len[b];
    return cu[n];
}

flashcl_attention_desc fh_varlen_desc(const fh_varlen_case *v, int batch, int sq, int sk, uint64_t seed) {
    flashcl_attention_desc d;
    flashcl_attention_desc_init(&d, batch, v->heads_q, sq, sk, v->head_dim);
    d.heads_kv = v->heads_kv;
    d.causal = v->causal;
    if (v->window_left >= 0 || v->window_right >= 0) {
        d.sliding_window = 1;
        d.window_left = v->window_left;
        d.window_right = v->window_right;
    }
    d.dropout_p = v->dropout_p;
    d.dropout_seed = seed;
    return d;
}

void fh_expect_close_in_sequence(const char *c, const char *what, int b, size_t i, float got, float want) {
    if (isinf(want) || isinf(got)) {
        ck_assert_msg(got == want, "%s: %s of sequence %d [%zu]: %g, expected %g", c, what, b, i, (double)got,
                      (double)want);
        return;
    }
    ck_assert_msg(fabsf(got - want) <= 2e-4f + 2e-4f * fabsf(want), "%s: %s of sequence %d [%zu]: %.7g, expected %.7g",
                  c, what, b, i, (double)got, (double)want);
}

fh_case fh_case_make(const char *name, int batch, int hq, int hkv, int sq, int sk, int d, int causal) {
    fh_case c;
    memset(&c, 0, sizeof c);
    c.name = name;
    flashcl_attention_desc_init(&c.desc, batch, hq, sq, sk, d);
    c.desc.heads_kv = hkv;
    c.desc.causal = causal;
    return c;
}

flashcl_context *fh_portable_context(void) {
    flashcl_context *ctx = ts_context();
    ck_assert_int_eq(flashcl_context_set_tensor_cores(ctx, FLASHCL_TENSOR_CORES_OFF), FLASHCL_SUCCESS);
    return ctx;
}

flashcl_call_stats fh_explain(flashcl_context *ctx, flashcl_pass pass, const flashcl_attention_desc *d,
                              const flashcl_attention_extras *ex) {
    flashcl_call_stats s;
    ck_assert_msg(flashcl_explain_call(ctx, pass, d, ex, &s) == FLASHCL_SUCCESS, "%s", flashcl_last_error(ctx));
    return s;
}

void fh_round_inputs(fh_inputs *in, flashcl_dtype dtype) {
    for (size_t i = 0; i < in->q_count; ++i) in->q[i] = ts_round_to_dtype(in->q[i], dtype);
    for (size_t i = 0; i < in->kv_count; ++i) {
        in->k[i] = ts_round_to_dtype(in->k[i], dtype);
        in->v[i] = ts_round_to_dtype(in->v[i], dtype);
    }
}
