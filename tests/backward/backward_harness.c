/* backward_harness.c: forward + backward on poisoned placed tensors, and the gradients' checks. */
#include "backward_harness.h"

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void bwd_desc(const bwd_case *c, flashcl_attention_desc *desc) { *desc = ts_case_desc(&c->shape, FLASHCL_DTYPE_F32); }

/* Host room for n outputs, read back later. */
static float *room_for(size_t n) {
    float *x = calloc(n ? n : 1, sizeof *x);
    ck_assert_msg(x != NULL, "out of host memory");
    return x;
}

void bwd_host_alloc(const bwd_case *c, uint64_t seed, bwd_host *h) {
    const size_t nq = ts_case_q_count(&c->shape), nkv = ts_case_kv_count(&c->shape);
    const float amplitude = c->shape.amplitude;
    ts_rng rng = {seed};
    h->q = ts_random_floats(&rng, nq, -amplitude, amplitude);
    h->k = ts_random_floats(&rng, nkv, -amplitude, amplitude);
    h->v = ts_random_floats(&rng, nkv, -1.0f, 1.0f);
    h->dout = ts_random_floats(&rng, nq, -1.0f, 1.0f);
    h->o = room_for(nq);
    h->lse = room_for(ts_case_lse_count(&c->shape));
    h->dq = room_for(nq);
    h->dk = room_for(nkv);
    h->dv = room_for(nkv);
}

void bwd_host_free(bwd_host *h) {
    free(h->q), free(h->k), free(h->v), free(h->dout);
    free(h->o), free(h->lse), free(h->dq), free(h->dk), free(h->dv);
    memset(h, 0, sizeof *h);
}

/* One tensor of c: `heads` x `seqlen` rows of head_dim (or 1 for LSE). */
static void make_tensor(flashcl_context *ctx, const bwd_case *c, ts_tensor *t, int heads, int seqlen, int dim,
                        const float *values) {
    /* LSE is one float per row, always (heads, seqlen) like flashcl_tensor_lse. */
    const ts_placement place = {dim == 1 ? FLASHCL_LAYOUT_BHSD : c->layout, c->offset, 0};
    ts_tensor_create(t, flashcl_context_cl_context(ctx), &place, (size_t)c->shape.batch, (size_t)heads,
                     (size_t)seqlen, (size_t)dim, FLASHCL_DTYPE_F32, values);
}

void bwd_device_create(flashcl_context *ctx, const bwd_case *c, const bwd_host *h, bwd_device *d) {
    const ts_case *s = &c->shape;
    make_tensor(ctx, c, &d->q, s->heads_q, s->seqlen_q, s->head_dim, h->q);
    make_tensor(ctx, c, &d->k, s->heads_kv, s->seqlen_k, s->head_dim, h->k);
    make_tensor(ctx, c, &d->v, s->heads_kv, s->seqlen_k, s->head_dim, h->v);
    make_tensor(ctx, c, &d->dout, s->heads_q, s->seqlen_q, s->head_dim, h->dout);
    make_tensor(ctx, c, &d->o, s->heads_q, s->seqlen_q, s->head_dim, NULL);
    make_tensor(ctx, c, &d->lse, s->heads_q, s->seqlen_q, 1, NULL);
    make_tensor(ctx, c, &d->dq, s->heads_q, s->seqlen_q, s->head_dim, NULL);
    make_tensor(ctx, c, &d->dk, s->heads_kv, s->seqlen_k, s->head_dim, NULL);
    make_tensor(ctx, c, &d->dv, s->heads_kv, s->seqlen_k, s->head_dim, NULL);
}

void bwd_device_free(bwd_device *d) {
    ts_tensor *all[] = {&d->q, &d->k, &d->v, &d->dout, &d->o, &d->lse, &d->dq, &d->dk, &d->dv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) ts_tensor_free(all[i]);
}

void bwd_poison_gradients(flashcl_context *ctx, bwd_device *d) {
    cl_command_queue queue = flashcl_context_queue(ctx);
    ts_tensor_reset(queue, &d->dq);
    ts_tensor_reset(queue, &d->dk);
    ts_tensor_reset(queue, &d->dv);
}

flashcl_status bwd_run_forward(flashcl_context *ctx, const bwd_case *c, bwd_device *d) {
    flashcl_attention_desc desc;
    bwd_desc(c, &desc);
    flashcl_status s =
        flashcl_forward(ctx, &desc, &d->q.view, &d->k.view, &d->v.view, &d->o.view, &d->lse.view, 0, NULL, NULL);
    if (s == FLASHCL_SUCCESS) ck_assert_int_eq(clFinish(flashcl_context_queue(ctx)), CL_SUCCESS);
    return s;
}

flashcl_status bwd_run_backward(flashcl_context *ctx, const bwd_case *c, bwd_device *d) {
    flashcl_attention_desc desc;
    bwd_desc(c, &desc);
    cl_event done = NULL;
    flashcl_status s = flashcl_backward(ctx, &desc, &d->q.view, &d->k.view, &d->v.view, &d->o.view, &d->lse.view,
                                        &d->dout.view, &d->dq.view, &d->dk.view, &d->dv.view, 0, NULL, &done);
    if (s == FLASHCL_SUCCESS) {
        ck_assert_ptr_nonnull(done);
        ck_assert_int_eq(clWaitForEvents(1, &done), CL_SUCCESS);
        clReleaseEvent(done);
    }
    return s;
}

void bwd_read_results(flashcl_context *ctx, bwd_device *d, bwd_host *h) {
    cl_command_queue queue = flashcl_context_queue(ctx);
    ts_tensor_read_output(queue, &d->o, "o", h->o);
    ts_tensor_read_output(queue, &d->lse, "lse", h->lse);
    ts_tensor_read_output(queue, &d->dq, "dq", h->dq);
    ts_tensor_read_output(queue, &d->dk, "dk", h->dk);
    ts_tensor_read_output(queue, &d->dv, "dv", h->dv);
}

void bwd_assert_gradients_untouched(flashcl_context *ctx, bwd_device *d) {
    cl_command_queue queue = flashcl_context_queue(ctx);
    ts_assert_untouched(queue, &d->dq, "dq (after a failed call)");
    ts_assert_untouched(queue, &d->dk, "dk (after a failed call)");
    ts_assert_untouched(queue, &d->dv, "dv (after a failed call)");
}

/* The criterion for gradients: max error / max magnitude <= 5e-4,
 * on top of the tolerance rule (the float reference's error x k + floor). */
#define BWD_TARGET 5e-4

void bwd_check_gradients(const bwd_case *c, const bwd_host *h) {
    flashcl_attention_desc desc;
    bwd_desc(c, &desc);
    const ts_case *s = &c->shape;
    const size_t nq = ts_case_q_count(s), nkv = ts_case_kv_count(s);
    double *gold = malloc(sizeof(double) * (nq + 2 * nkv));
    double *lowp = malloc(sizeof(double) * (nq + 2 * nkv));
    ck_assert(gold && lowp);
    ck_assert_int_eq(flashcl_reference_backward(&desc, FLASHCL_REF_DOUBLE, h->q, h->k, h->v, h->dout, gold,
                                                gold + nq, gold + nq + nkv),
                     0);
    ck_assert_int_eq(flashcl_reference_backward(&desc, FLASHCL_REF_FLOAT, h->q, h->k, h->v, h->dout, lowp,
                                                lowp + nq, lowp + nq + nkv),
                     0);
    /* With large logits the forward's LSE, a float near |LSE| ~ 300, carries
     * up to an ulp (2^-15 relative to 1) of absolute error that becomes a
     * relative error of every recomputed P, on top of the score rounding the
     * float reference shares: there every gradient gets the rule's loosest k. */
    const int large = s->amplitude > 1.0f;
    const ts_rule dq_rule = {5.0, BWD_TARGET, 1}, dk_rule = {large ? 5.0 : 4.0, BWD_TARGET, 1},
                  dv_rule = {large ? 5.0 : 3.0, BWD_TARGET, 1};
    ts_assert_rule(c->name, "dq", h->dq, gold, lowp, nq, &dq_rule);
    ts_assert_rule(c->name, "dk", h->dk, gold + nq, lowp + nq, nkv, &dk_rule);
    ts_assert_rule(c->name, "dv", h->dv, gold + nq + nkv, lowp + nq + nkv, nkv, &dv_rule);
    /* Rows that see no key (causal, seqlen_q > seqlen_k): LSE -inf and a
     * gradient of exactly zero. */
    if (s->causal)
        for (int b = 0; b < s->batch; ++b)
            for (int hh = 0; hh < s->heads_q; ++hh)
                for (int i = 0; i < s->seqlen_q - s->seqlen_k; ++i) {
                    const size_t row = ((size_t)b * s->heads_q + hh) * s->seqlen_q + i;
                    ck_assert_msg(isinf(h->lse[row]) && h->lse[row] < 0, "%s: masked row %d has lse %g", c->name,
                                  i, (double)h->lse[row]);
                    for (int t = 0; t < s->head_dim; ++t)
                        ck_assert_msg(h->dq[row * s->head_dim + t] == 0.0f, "%s: masked row %d has dq %g", c->name,
                                      i, (double)h->dq[row * s->head_dim + t]);
                }
    free(gold);
    free(lowp);
}

void bwd_run_and_check_on(flashcl_context *ctx, const bwd_case *c) {
    bwd_host h;
    bwd_device d;
    bwd_host_alloc(c, 1, &h);
    bwd_device_create(ctx, c, &h, &d);
    flashcl_status s = bwd_run_forward(ctx, c, &d);
    ck_assert_msg(s == FLASHCL_SUCCESS, "%s forward: %s", c->name, flashcl_last_error(ctx));
    s = bwd_run_backward(ctx, c, &d);
    ck_assert_msg(s == FLASHCL_SUCCESS, "%s backward: %s", c->name, flashcl_last_error(ctx));
    bwd_read_results(ctx, &d, &h);
    bwd_check_gradients(c, &h);
    bwd_device_free(&d);
    bwd_host_free(&h);
}

void bwd_run_and_check(const bwd_case *c, const flashcl_plan *forced) {
    flashcl_context *ctx = ts_context();
    if (forced) ck_assert_int_eq(flashcl_context_force_plan(ctx, FLASHCL_PASS_BACKWARD, forced), FLASHCL_SUCCESS);
    bwd_run_and_check_on(ctx, c);
    flashcl_context_free(ctx);
}

void bwd_check_storage(flashcl_context *ctx, const bwd_case *c, flashcl_dtype dtype, double ulps) {
    bwd_check_storage_ex(ctx, c, dtype, ulps, NULL, NULL);
}

void bwd_check_storage_ex(flashcl_context *ctx, const bwd_case *c, flashcl_dtype dtype, double ulps,
                          const flashcl_attention_extras *extras, const flashcl_reference_extras *mods) {
    const ts_case *s = &c->shape;
    const double ulp = dtype == FLASHCL_DTYPE_F16 ? ldexp(1.0, -11) : ldexp(1.0, -8);
    bwd_host h;
    bwd_host_alloc(c, 17, &h);
    const size_t nq = ts_case_q_count(s), nkv = ts_case_kv_count(s);
    /* The reference sees the inputs as the device stores them. */
    for (size_t i = 0; i < nq; ++i) {
        h.q[i] = ts_round_to_dtype(h.q[i], dtype);
        h.dout[i] = ts_round_to_dtype(h.dout[i], dtype);
    }
    for (size_t i = 0; i < nkv; ++i) {
        h.k[i] = ts_round_to_dtype(h.k[i], dtype);
        h.v[i] = ts_round_to_dtype(h.v[i], dtype);
    }
    cl_context context = flashcl_context_cl_context(ctx);
    cl_command_queue queue = flashcl_context_queue(ctx);
    const ts_placement place = {c->layout, c->offset, 0}, lse_place = {FLASHCL_LAYOUT_BHSD, c->offset, 0};
    const size_t B = (size_t)s->batch, Hq = (size_t)s->heads_q, Hkv = (size_t)s->heads_kv;
    const size_t Sq = (size_t)s->seqlen_q, Sk = (size_t)s->seqlen_k, D = (size_t)s->head_dim;
    ts_tensor q, k, v, dout, o, lse, dq, dk, dv;
    ts_tensor_create(&q, context, &place, B, Hq, Sq, D, dtype, h.q);
    ts_tensor_create(&k, context, &place, B, Hkv, Sk, D, dtype, h.k);
    ts_tensor_create(&v, context, &place, B, Hkv, Sk, D, dtype, h.v);
    ts_tensor_create(&dout, context, &place, B, Hq, Sq, D, dtype, h.dout);
    ts_tensor_create(&o, context, &place, B, Hq, Sq, D, dtype, NULL);
    ts_tensor_create(&lse, context, &lse_place, B, Hq, Sq, 1, FLASHCL_DTYPE_F32, NULL);
    ts_tensor_create(&dq, context, &place, B, Hq, Sq, D, dtype, NULL);
    ts_tensor_create(&dk, context, &place, B, Hkv, Sk, D, dtype, NULL);
    ts_tensor_create(&dv, context, &place, B, Hkv, Sk, D, dtype, NULL);
    flashcl_attention_desc desc;
    bwd_desc(c, &desc);
    desc.dtype = dtype;
    flashcl_attention_extras none;
    flashcl_attention_extras_init(&none);
    if (!extras) extras = &none;
    ck_assert_msg(flashcl_forward_ex(ctx, &desc, extras, &q.view, &k.view, &v.view, &o.view, &lse.view, 0, NULL,
                                     NULL) == FLASHCL_SUCCESS,
                  "%s", flashcl_last_error(ctx));
    ck_assert_msg(flashcl_backward_ex(ctx, &desc, extras, &q.view, &k.view, &v.view, &o.view, &lse.view, &dout.view,
                                      &dq.view, &dk.view, &dv.view, 0, NULL, NULL) == FLASHCL_SUCCESS,
                  "%s", flashcl_last_error(ctx));
    ck_assert_int_eq(clFinish(queue), CL_SUCCESS);
    ts_tensor_read_output(queue, &o, "o", h.o);
    ts_tensor_read_output(queue, &dq, "dq", h.dq);
    ts_tensor_read_output(queue, &dk, "dk", h.dk);
    ts_tensor_read_output(queue, &dv, "dv", h.dv);
    double *gold = malloc(sizeof(double) * (nq + 2 * nkv));
    ck_assert_ptr_nonnull(gold);
    desc.dtype = FLASHCL_DTYPE_F32;
    ck_assert_int_eq(flashcl_reference_backward_ex(&desc, FLASHCL_REF_DOUBLE, mods, h.q, h.k, h.v, h.dout, gold,
                                                   gold + nq, gold + nq + nkv),
                     0);
    /* Not the float rule: O is rounded to storage before D = rowsum(dO * O)
     * and every gradient on the way out, so the bound is storage ulps of the
     * gradient's magnitude. */
    const struct {
        const char *name;
        const float *got;
        const double *gold;
        size_t n;
    } grads[] = {{"dq", h.dq, gold, nq}, {"dk", h.dk, gold + nq, nkv}, {"dv", h.dv, gold + nq + nkv, nkv}};
    for (int g = 0; g < 3; ++g) {
        double error = 0.0, magnitude = 0.0;
        for (size_t i = 0; i < grads[g].n; ++i) {
            ck_assert(isfinite(grads[g].got[i]));
            error = fmax(error, fabs(grads[g].got[i] - grads[g].gold[i]));
            magnitude = fmax(magnitude, fabs(grads[g].gold[i]));
        }
        ck_assert_msg(magnitude > 0.01, "%s is degenerate", grads[g].name);
        ck_assert_msg(error <= ulps * ulp * magnitude, "%s dtype %d %s: error %.3g exceeds %g storage ulps of %.3g",
                      c->name, (int)dtype, grads[g].name, error, ulps, magnitude);
    }
    /* Query rows that see no key (causal, seqlen_q > seqlen_k): dQ exactly 0. */
    if (s->causal)
        for (int row = 0; row < s->batch * s->heads_q * s->seqlen_q; ++row)
            if (row % s->seqlen_q < s->seqlen_q - s->seqlen_k)
                for (int t = 0; t < s->head_dim; ++t)
                    ck_assert_msg(h.dq[(size_t)row * s->head_dim + t] == 0.0f, "%s: masked row %d has dq %g",
                                  c->name, row % s->seqlen_q, (double)h.dq[(size_t)row * s->head_dim + t]);
    free(gold);
    ts_tensor *all[] = {&q, &k, &v, &dout, &o, &lse, &dq, &dk, &dv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) ts_tensor_free(all[i]);
    bwd_host_free(&h);
}
