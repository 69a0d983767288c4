/* standard_forward.c: standard attention's forward pass: CLBlast S = scale Q K^T, a softmax kernel, CLBlast O = P V. */
#include "kernel_args.h"
#include "standard.h"
#include "standard_attention.h"

/* S = scale * Q K^T and O = P V, per (batch, query head). */
static void forward_gemms(const flashcl_attention_desc *desc, const flashcl_tensor *q, const flashcl_tensor *k,
                          const flashcl_tensor *v, const flashcl_tensor *o, flashcl_gemm gemms[2]) {
    const size_t sq = (size_t)desc->seqlen_q, sk = (size_t)desc->seqlen_k, d = (size_t)desc->head_dim;
    gemms[0] = (flashcl_gemm){"S = scale Q K^T", 0, 1, sq, sk, d, flashcl_effective_scale(desc), 0.0f,
                              {FLASHCL_OPERAND_QUERY, q, 0}, {FLASHCL_OPERAND_KV, k, 0},
                              {FLASHCL_OPERAND_SCORES, NULL, 0}};
    gemms[1] = (flashcl_gemm){"O = P V", 0, 0, sq, d, sk, 1.0f, 0.0f, {FLASHCL_OPERAND_SCORES, NULL, 0},
                              {FLASHCL_OPERAND_KV, v, 0}, {FLASHCL_OPERAND_QUERY, o, 0}};
}

static flashcl_status enqueue_softmax(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                      const flashcl_scores *scores, cl_kernel kernel, size_t work_group,
                                      const flashcl_tensor *lse) {
    for (size_t c = 0; c < scores->chunks; ++c) {
        cl_mem chunk = scores->buffers[c * (size_t)scores->matrices];
        /* Without an LSE output the kernel still needs a valid buffer; it
         * never writes it because write_lse is 0. */
        const flashcl_tensor lse_arg = lse ? *lse : (flashcl_tensor){chunk, 0, 0, 0, 0};
        flashcl_kernel_args a = {kernel, 0, CL_SUCCESS};
        flashcl_arg_mem(&a, chunk);
        flashcl_arg_ulong(&a, c * scores->heads_per_chunk);
        flashcl_arg_int(&a, desc->heads_q);
        flashcl_arg_int(&a, desc->seqlen_q);
        flashcl_arg_int(&a, desc->seqlen_k);
        flashcl_arg_int(&a, desc->causal != 0);
        flashcl_arg_tensor(&a, &lse_arg);
        flashcl_arg_int(&a, lse != NULL);
        if (a.error != CL_SUCCESS) return flashcl_fail_cl(ctx, a.error, "clSetKernelArg (standard softmax)");
        const size_t rows = flashcl_scores_chunk_heads(scores, c) * (size_t)desc->seqlen_q;
        const size_t global = rows * work_group;
        cl_int err = clEnqueueNDRangeKernel(ctx->queue, kernel, 1, NULL, &global, &work_group, 0, NULL, NULL);
        if (err != CL_SUCCESS) return flashcl_fail_cl(ctx, err, "clEnqueueNDRangeKernel (standard softmax)");
    }
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_standard_forward(flashcl_context *ctx, const flashcl_exec_plan *plan,
                                        const flashcl_attention_desc *desc, const flashcl_tensor *q,
                                        const flashcl_tensor *k, const flashcl_tensor *v, const flashcl_tensor *o,
                                        const flashcl_tensor *lse, cl_uint num_events, const cl_event *wait_list,
                                        cl_event *event) {
    /* The dispatcher has checked the dtype and the features. */
    flashcl_scores scores;
    flashcl_status status = flashcl_scores_plan(ctx, desc, 1, &scores);
    if (status != FLASHCL_SUCCESS) return status;

    flashcl_gemm gemms[2];
    forward_gemms(desc, q, k, v, o, gemms);
    const flashcl_head_range all_heads = {0, 1, scores.heads};
    for (int g = 0; g < 2; ++g)
        if ((status = flashcl_standard_gemm(ctx, desc, &scores, &gemms[g], all_heads, 1))) return status;
    cl_kernel softmax;
    size_t work_group;
    if ((status = flashcl_standard_row_kernel(ctx, desc, "flashcl_standard_softmax", &softmax, &work_group)))
        return status;

    /* Everything that can refuse has; from here on commands are enqueued.
     * The scratch is released right after enqueueing: OpenCL keeps a buffer
     * alive until the commands using it complete, so no clFinish is needed. */
    if ((status = flashcl_scores_allocate(ctx, &scores))) return status;
    if (!(status = flashcl_standard_gate(ctx, num_events, wait_list)) &&
        !(status = flashcl_standard_gemm(ctx, desc, &scores, &gemms[0], all_heads, 0)) &&
        !(status = flashcl_standard_step(ctx)) &&
        !(status = enqueue_softmax(ctx, desc, &scores, softmax, work_group, lse)) &&
        !(status = flashcl_standard_step(ctx)) &&
        !(status = flashcl_standard_gemm(ctx, desc, &scores, &gemms[1], all_heads, 0)))
        status = flashcl_standard_finish(ctx, event);
    flashcl_scores_release(&scores);
    if (status == FLASHCL_SUCCESS)
        flashcl_record_stats(ctx, plan);
    return status;
}
