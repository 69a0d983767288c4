/* forward.c: validates a forward call, picks its plan and enqueues the fused kernel of cl/forward.cl (or hands
 * dense half/bfloat16 calls to the tensor-core kernel, forward_mma.c). */
#include <stdio.h>

#include "call_features.h"

int flashcl_format_kernel_options(char *out, size_t size, const flashcl_attention_desc *desc,
                                  const flashcl_plan *plan) {
    /* Never -cl-fast-relaxed-math: the online softmax relies on exact -inf handling. */
    return snprintf(out, size, "-DFLASHCL_DTYPE=%d -DHEAD_DIM=%d -DBLOCK_Q=%d -DBLOCK_K=%d -DTHREADS_Q=%d -DTHREADS_K=%d",
                    (int)desc->dtype, desc->head_dim, plan->block_q, plan->block_k, plan->threads_q,
                    plan->threads_k);
}

/* float4 reads of K and V need every row start 16-byte aligned: float data,
 * rows of a multiple of 4 elements that the plan does not pad, and offsets
 * and strides in multiples of 4 (buffer bases are aligned by OpenCL). */
static int kv_vector_loads(const flashcl_attention_desc *desc, const flashcl_plan *plan, const flashcl_tensor *k,
                           const flashcl_tensor *v) {
    if (desc->dtype != FLASHCL_DTYPE_F32 || desc->head_dim % 4 != 0 || desc->head_dim % plan->threads_k != 0)
        return 0;
    const flashcl_tensor *t[2] = {k, v};
    for (int i = 0; i < 2; ++i)
        if ((t[i]->offset | t[i]->stride_batch | t[i]->stride_head | t[i]->stride_seq) % 4 != 0) return 0;
    return 1;
}

flashcl_status flashcl_forward(flashcl_context *ctx, const flashcl_attention_desc *desc, const flashcl_tensor *q,
                               const flashcl_tensor *k, const flashcl_tensor *v, const flashcl_tensor *o,
                               const flashcl_tensor *lse, cl_uint num_events_in_wait_list,
                               const cl_event *event_wait_list, cl_event *event) {
    if (!ctx) return flashcl_fail(NULL, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_forward: ctx is NULL");
    return flashcl_forward_ex(ctx, desc, NULL, q, k, v, o, lse, num_events_in_wait_list, event_wait_list, event);
}

flashcl_status flashcl_forward_ex(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                  const flashcl_attention_extras *extras, const flashcl_tensor *q,
                                  const flashcl_tensor *k, const flashcl_tensor *v, const flashcl_tensor *o,
                                  const flashcl_tensor *lse, cl_uint num_events_in_wait_list,
                                  const cl_event *event_wait_list, cl_event *event) {
    if (!ctx) return flashcl_fail(NULL, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_forward_ex: ctx is NULL");
    flashcl_clear_error(ctx);
    flashcl_varlen varlen;
    const flashcl_attention_desc *shape_desc;
    flashcl_status status = flashcl_varlen_resolve(ctx, desc, extras, num_events_in_wait_list, event_wait_list,
                                                   &varlen, &shape_desc);
    if (status != FLASHCL_SUCCESS) return status;
    status = flashcl_validate_forward_args(ctx, shape_desc, q, k, v, o, lse, num_events_in_wait_list, event_wait_list);
    if (status != FLASHCL_SUCCESS) return status;
    flashcl_features features;
    const flashcl_call_tensor outputs[] = {{"o", o, FLASHCL_SHAPE_Q, 1, 0}, {"lse", lse, FLASHCL_SHAPE_LSE, 1, 1}};
    if ((status = flashcl_features_resolve(ctx, desc, extras, &features))) return status;
    features.varlen = varlen;
    if ((status = flashcl_features_validate_buffers(ctx, desc, shape_desc, &features, outputs, 2)) ||
        (status = flashcl_features_check_impl(ctx, &features)))
        return status;
    if (ctx->impl == FLASHCL_IMPL_STANDARD)
        return flashcl_standard_forward(ctx, desc, q, k, v, o, lse, num_events_in_wait_list, event_wait_list, event);

    flashcl_plan plan;
    const int mma = flashcl_forward_mma_mode(ctx, desc, flashcl_features_any(&features), q, k, v, o, &plan);
    if (mma)
        return flashcl_forward_mma(ctx, mma, &plan, desc, q, k, v, o, lse, num_events_in_wait_list, event_wait_list,
                                   event);

    if ((status = flashcl_resolve_plan(ctx, FLASHCL_PASS_FORWARD, desc, &plan))) return status;
    const size_t tile_bytes = flashcl_tile_mask_bytes(desc, &features, plan.block_q, plan.block_k);
    if (ctx->memory_budget != 0 && tile_bytes > ctx->memory_budget)
        return flashcl_fail(ctx, FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY,
                            "the block mask's tile summary needs %zu bytes, the memory budget is %zu", tile_bytes,
                            ctx->memory_budget);
    char options[320];
    int used = flashcl_format_kernel_options(options, sizeof options, desc, &plan);
    snprintf(options + used, sizeof options - (size_t)used, " -DKV_VEC4=%d", kv_vector_loads(desc, &plan, k, v));
    flashcl_features_options(&features, options, sizeof options);
    cl_kernel kernel;
    if ((status = flashcl_get_kernel(ctx, "forward.cl", "flashcl_forward", options, &kernel))) return status;
    /* The block mask's tile summary runs first; the attention kernel waits for it. */
    flashcl_tile_mask tiles;
    cl_event tiles_done = NULL;
    if ((status = flashcl_tile_mask_build(ctx, desc, &features, plan.block_q, plan.block_k, num_events_in_wait_list,
                                          event_wait_list, &tiles, &tiles_done)))
        return status;
    if (tiles_done) {
        num_events_in_wait_list = 1;
        event_wait_list = &tiles_done;
    }

    flashcl_kernel_args args = {kernel, 0, CL_SUCCESS};
    flashcl_arg_forward_dense(&args, desc, q, k, v, o, lse, features.causal);
    flashcl_arg_features(&args, &features, &tiles);
    if (args.error != CL_SUCCESS) {
        status = flashcl_fail_cl(ctx, args.error, "clSetKernelArg (forward)");
        goto done;
    }

    const size_t query_blocks = ((size_t)desc->seqlen_q + (size_t)plan.block_q - 1) / (size_t)plan.block_q;
    const size_t global[2] = {query_blocks * plan.work_group_size, (size_t)desc->batch * (size_t)desc->heads_q};
    const size_t local[2] = {plan.work_group_size, 1};
    cl_int err = clEnqueueNDRangeKernel(ctx->queue, kernel, 2, NULL, global, local, num_events_in_wait_list,
                                        event_wait_list, event);
    if (err != CL_SUCCESS) {
        status = flashcl_fail_cl(ctx, err, "clEnqueueNDRangeKernel (forward)");
        goto done;
    }
    flashcl_record_stats(ctx, FLASHCL_IMPL_FLASH, FLASHCL_PASS_FORWARD, desc, &plan, tile_bytes);
done:
    /* Enqueued kernels keep the summary alive until they finish. */
    if (tiles_done) clReleaseEvent(tiles_done);
    flashcl_tile_mask_release(&tiles);
    return status;
}
