/* standard_backward.c: standard attention's backward pass: CLBlast GEMMs around a softmax-gradient kernel over stored P. */
#include "kernel_args.h"
#include "standard.h"
#include "standard_attention.h"

/* Score matrices of the backward scratch. */
enum { SCORES_P = 0, SCORES_DS = 1 };

/* The GEMMs, in order of use:
 *   S  = scale Q K^T      dP = dO V^T        (all heads)
 *   dV = P^T dO           dK = scale dS^T Q   (summed over a K/V head's query heads)
 *   dQ = scale dS K                           (all heads) */
typedef struct backward_gemms {
    flashcl_gemm s, dp, dv, dk, dq;
} backward_gemms;

static backward_gemms make_gemms(const flashcl_attention_desc *desc, const flashcl_tensor *q, const flashcl_tensor *k,
                                 const flashcl_tensor *v, const flashcl_tensor *dout, const flashcl_tensor *dq,
                                 const flashcl_tensor *dk, const flashcl_tensor *dv) {
    const size_t sq = (size_t)desc->seqlen_q, sk = (size_t)desc->seqlen_k, d = (size_t)desc->head_dim;
    const float scale = flashcl_effective_scale(desc);
    const flashcl_gemm_operand p = {FLASHCL_OPERAND_SCORES, NULL, SCORES_P};
    const flashcl_gemm_operand ds = {FLASHCL_OPERAND_SCORES, NULL, SCORES_DS};
    backward_gemms g;
    g.s = (flashcl_gemm){"S = scale Q K^T", 0, 1, sq, sk, d, scale, 0.0f,
                         {FLASHCL_OPERAND_QUERY, q, 0}, {FLASHCL_OPERAND_KV, k, 0}, p};
    g.dp = (flashcl_gemm){"dP = dO V^T", 0, 1, sq, sk, d, 1.0f, 0.0f,
                          {FLASHCL_OPERAND_QUERY, dout, 0}, {FLASHCL_OPERAND_KV, v, 0}, ds};
    g.dv = (flashcl_gemm){"dV = P^T dO", 1, 0, sk, d, sq, 1.0f, 0.0f, p,
                          {FLASHCL_OPERAND_QUERY, dout, 0}, {FLASHCL_OPERAND_KV, dv, 0}};
    g.dk = (flashcl_gemm){"dK = scale dS^T Q", 1, 0, sk, d, sq, scale, 0.0f, ds,
                          {FLASHCL_OPERAND_QUERY, q, 0}, {FLASHCL_OPERAND_KV, dk, 0}};
    g.dq = (flashcl_gemm){"dQ = scale dS K", 0, 0, sq, d, sk, scale, 0.0f, ds,
                          {FLASHCL_OPERAND_KV, k, 0}, {FLASHCL_OPERAND_QUERY, dq, 0}};
    return g;
}

/* dK and dV sum over the query heads of a group. Query head j of every group
 * forms one pass (no two heads of a pass share a K/V head, so a batched call
 * never writes one matrix twice); pass 0 overwrites, later passes add
 * (beta = 1) in a fixed order, so the result is deterministic. */
static flashcl_status grouped_gemm(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                   const flashcl_scores *scores, flashcl_gemm gemm, int dry_run) {
    const size_t group = (size_t)(desc->heads_q / desc->heads_kv);
    flashcl_status status = FLASHCL_SUCCESS;
    for (size_t j = 0; j < group && status == FLASHCL_SUCCESS; ++j) {
        gemm.beta = j == 0 ? 0.0f : 1.0f;
        const flashcl_head_range pass = {j, group, scores->heads / group};
        status = flashcl_standard_gemm(ctx, desc, scores, &gemm, pass, dry_run);
        if (status == FLASHCL_SUCCESS && !dry_run && j + 1 < group) status = flashcl_standard_step(ctx);
    }
    return status;
}

static flashcl_status enqueue_softmax_grad(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                           const flashcl_scores *scores, cl_kernel kernel, size_t work_group,
                                           const flashcl_tensor *lse, const flashcl_tensor *o,
                                           const flashcl_tensor *dout) {
    for (size_t c = 0; c < scores->chunks; ++c) {
        flashcl_kernel_args a = {kernel, 0, CL_SUCCESS};
        flashcl_arg_mem(&a, scores->buffers[c * (size_t)scores->matrices + SCORES_P]);
        flashcl_arg_mem(&a, scores->buffers[c * (size_t)scores->matrices + SCORES_DS]);
        flashcl_arg_ulong(&a, c * scores->heads_per_chunk);
        flashcl_arg_int(&a, desc->heads_q);
        flashcl_arg_int(&a, desc->seqlen_q);
        flashcl_arg_int(&a, desc->seqlen_k);
        flashcl_arg_int(&a, desc->causal != 0);
        flashcl_arg_int(&a, desc->head_dim);
        flashcl_arg_tensor(&a, lse);
        flashcl_arg_tensor(&a, o);
        flashcl_arg_tensor(&a, dout);
        if (a.error != CL_SUCCESS) return flashcl_fail_cl(ctx, a.error, "clSetKernelArg (standard softmax gradient)");
        const size_t global = flashcl_scores_chunk_heads(scores, c) * (size_t)desc->seqlen_q * work_group;
        cl_int err = clEnqueueNDRangeKernel(ctx->queue, kernel, 1, NULL, &global, &work_group, 0, NULL, NULL);
        if (err != CL_SUCCESS) return flashcl_fail_cl(ctx, err, "clEnqueueNDRangeKernel (standard softmax gradient)");
    }
    return FLASHCL_SUCCESS;
}

/* Every GEMM, as a dry run (dry_run = 1) or enqueued around the kernel. */
static flashcl_status run_all(flashcl_context *ctx, const flashcl_attention_desc *desc, const flashcl_scores *scores,
                              const backward_gemms *g, cl_kernel grad, size_t work_group, const flashcl_tensor *lse,
                              const flashcl_tensor *o, const flashcl_tensor *dout, int dry_run) {
    const flashcl_head_range all_heads = {0, 1, scores->heads};
    flashcl_status status;
    if ((status = flashcl_standard_gemm(ctx, desc, scores, &g->s, all_heads, dry_run)) ||
        (status = flashcl_standard_gemm(ctx, desc, scores, &g->dp, all_heads, dry_run)))
        return status;
    if (!dry_run && ((status = flashcl_standard_step(ctx)) ||
                     (status = enqueue_softmax_grad(ctx, desc, scores, grad, work_group, lse, o, dout)) ||
                     (status = flashcl_standard_step(ctx))))
        return status;
    if ((status = grouped_gemm(ctx, desc, scores, g->dv, dry_run)) ||
        (status = grouped_gemm(ctx, desc, scores, g->dk, dry_run)))
        return status;
    return flashcl_standard_gemm(ctx, desc, scores, &g->dq, all_heads, dry_run);
}

flashcl_status flashcl_standard_backward(flashcl_context *ctx, const flashcl_exec_plan *plan,
                                         const flashcl_attention_desc *desc, const flashcl_tensor *q,
                                         const flashcl_tensor *k, const flashcl_tensor *v, const flashcl_tensor *o,
                                         const flashcl_tensor *lse, const flashcl_tensor *dout,
                                         const flashcl_tensor *dq, const flashcl_tensor *dk, const flashcl_tensor *dv,
                                         cl_uint num_events, const cl_event *wait_list, cl_event *event) {
    /* The dispatcher has checked the dtype and the features. */
    if (!lse)
        return flashcl_fail(ctx, FLASHCL_ERROR_MISSING_LSE,
                            "the backward pass needs the log-sum-exp its forward wrote (lse is NULL)");
    /* Two N x N matrices per head: S becomes P, dP becomes dS. D = rowsum(dO O)
     * is reduced inside the gradient kernel, so it needs no buffer. */
    flashcl_scores scores;
    flashcl_status status = flashcl_scores_plan(ctx, desc, 2, &scores);
    if (status != FLASHCL_SUCCESS) return status;
    const backward_gemms gemms = make_gemms(desc, q, k, v, dout, dq, dk, dv);
    if ((status = run_all(ctx, desc, &scores, &gemms, NULL, 0, lse, o, dout, 1))) return status;
    cl_kernel grad;
    size_t work_group;
    if ((status = flashcl_standard_row_kernel(ctx, desc, "flashcl_standard_softmax_grad", &grad, &work_group)))
        return status;

    /* As in the forward: released after enqueueing, alive until used. */
    if ((status = flashcl_scores_allocate(ctx, &scores))) return status;
    if (!(status = flashcl_standard_gate(ctx, num_events, wait_list)) &&
        !(status = run_all(ctx, desc, &scores, &gemms, grad, work_group, lse, o, dout, 0)))
        status = flashcl_standard_finish(ctx, event);
    flashcl_scores_release(&scores);
    if (status == FLASHCL_SUCCESS)
        flashcl_record_stats(ctx, plan);
    return status;
}
