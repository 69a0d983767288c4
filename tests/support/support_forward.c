/* support_forward.c: a forward problem's inputs and references, its run on poisoned tensors, and its check. */
#include "support_forward.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention_reference.h"
#include "support_compare.h"
#include "support_random.h"

void ts_problem_init(ts_problem *p, const flashcl_attention_desc *desc, uint64_t seed, float amplitude) {
    memset(p, 0, sizeof *p);
    p->desc = *desc;
    p->check_target = 1;
    const size_t D = (size_t)desc->head_dim;
    p->q_count = (size_t)desc->batch * desc->heads_q * desc->seqlen_q * D;
    p->kv_count = (size_t)desc->batch * desc->heads_kv * desc->seqlen_k * D;
    p->lse_count = (size_t)desc->batch * desc->heads_q * desc->seqlen_q;
    p->o_ref = malloc(p->q_count * sizeof(double));
    p->o_low = malloc(p->q_count * sizeof(double));
    p->lse_ref = malloc(p->lse_count * sizeof(double));
    p->lse_low = malloc(p->lse_count * sizeof(double));
    ck_assert_msg(p->o_ref && p->o_low && p->lse_ref && p->lse_low, "out of host memory");
    ts_rng rng = {seed};
    p->q = ts_random_floats(&rng, p->q_count, -amplitude, amplitude);
    p->k = ts_random_floats(&rng, p->kv_count, -amplitude, amplitude);
    p->v = ts_random_floats(&rng, p->kv_count, -1.0f, 1.0f);
    /* The references see exactly the values the device stores. */
    for (size_t i = 0; i < p->q_count; ++i) p->q[i] = ts_round_to_dtype(p->q[i], desc->dtype);
    for (size_t i = 0; i < p->kv_count; ++i) {
        p->k[i] = ts_round_to_dtype(p->k[i], desc->dtype);
        p->v[i] = ts_round_to_dtype(p->v[i], desc->dtype);
    }
    ck_assert(flashcl_reference_forward(desc, FLASHCL_REF_DOUBLE, p->q, p->k, p->v, p->o_ref, p->lse_ref) == 0);
    ck_assert(flashcl_reference_forward(desc, FLASHCL_REF_FLOAT, p->q, p->k, p->v, p->o_low, p->lse_low) == 0);
    /* A 16-bit O can be no closer than the golden O rounded to its storage;
     * LSE is float whatever the storage, so its float reference stands. */
    if (desc->dtype != FLASHCL_DTYPE_F32)
        for (size_t i = 0; i < p->q_count; ++i) p->o_low[i] = ts_round_to_dtype((float)p->o_ref[i], desc->dtype);
}

void ts_problem_free(ts_problem *p) {
    free(p->q);
    free(p->k);
    free(p->v);
    free(p->o_ref);
    free(p->o_low);
    free(p->lse_ref);
    free(p->lse_low);
    memset(p, 0, sizeof *p);
}

ts_placements ts_uniform_placements(flashcl_layout layout, size_t offset, size_t pad) {
    const ts_placement one = {layout, offset, pad};
    return (ts_placements){one, one, one, one, one};
}

void ts_run_forward(flashcl_context *ctx, const ts_problem *p, const ts_placements *place, float *o_out,
                    float *lse_out) {
    const flashcl_attention_desc *d = &p->desc;
    cl_context context = flashcl_context_cl_context(ctx);
    cl_command_queue queue = flashcl_context_queue(ctx);
    const size_t B = (size_t)d->batch, Hq = (size_t)d->heads_q, Hkv = (size_t)d->heads_kv;
    const size_t Sq = (size_t)d->seqlen_q, Sk = (size_t)d->seqlen_k, D = (size_t)d->head_dim;
    ts_tensor q, k, v, o, lse;
    memset(&lse, 0, sizeof lse);
    ts_tensor_create(&q, context, &place->q, B, Hq, Sq, D, d->dtype, p->q);
    ts_tensor_create(&k, context, &place->k, B, Hkv, Sk, D, d->dtype, p->k);
    ts_tensor_create(&v, context, &place->v, B, Hkv, Sk, D, d->dtype, p->v);
    ts_tensor_create(&o, context, &place->o, B, Hq, Sq, D, d->dtype, NULL);
    if (lse_out) ts_tensor_create(&lse, context, &place->lse, B, Hq, Sq, 1, FLASHCL_DTYPE_F32, NULL);

    flashcl_status status =
        flashcl_forward(ctx, d, &q.view, &k.view, &v.view, &o.view, lse_out ? &lse.view : NULL, 0, NULL, NULL);
    ck_assert_msg(status == FLASHCL_SUCCESS, "flashcl_forward: %s: %s", flashcl_status_string(status),
                  flashcl_last_error(ctx));
    ck_assert_int_eq(clFinish(queue), CL_SUCCESS);

    ts_tensor_read_output(queue, &o, "O", o_out);
    if (lse_out) ts_tensor_read_output(queue, &lse, "LSE", lse_out);
    ts_assert_untouched(queue, &q, "Q (an input)");
    ts_assert_untouched(queue, &k, "K (an input)");
    ts_assert_untouched(queue, &v, "V (an input)");
    ts_tensor_free(&q);
    ts_tensor_free(&k);
    ts_tensor_free(&v);
    ts_tensor_free(&o);
    if (lse_out) ts_tensor_free(&lse);
}

/* The "done when" target of the forward pass: max-abs error within 3e-5 of
 * the largest reference magnitude (element-wise relative error is
 * meaningless where the reference crosses zero). */
#define TS_FORWARD_TARGET 3e-5

void ts_check_forward(const ts_problem *p, const float *o, const float *lse, const char *label) {
    const size_t D = (size_t)p->desc.head_dim;
    /* A 16-bit O is judged by the rule alone: its storage rounding (2^-11 or
     * 2^-8) exceeds the float target by itself. */
    const ts_rule o_rule = {2.0, p->check_target && p->desc.dtype == FLASHCL_DTYPE_F32 ? TS_FORWARD_TARGET : 0.0, 0};
    const ts_rule lse_rule = {2.0, p->check_target ? TS_FORWARD_TARGET : 0.0, 0};
    ts_assert_rule(label, "O", o, p->o_ref, p->o_low, p->q_count, &o_rule);
    if (lse) ts_assert_rule(label, "LSE", lse, p->lse_ref, p->lse_low, p->lse_count, &lse_rule);
    for (size_t row = 0; row < p->lse_count; ++row) {
        if (p->lse_ref[row] != -INFINITY) continue;
        for (size_t t = 0; t < D; ++t)
            ck_assert_msg(o[row * D + t] == 0.0f, "%s: fully masked row %zu has O[%zu] = %g, not 0", label, row, t,
                          (double)o[row * D + t]);
    }
}
