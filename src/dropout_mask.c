/* dropout_mask.c: writes the dropout keep mask the attention kernels apply (cl/dropout.cl), for users and tests. */
#include "call_features.h"
#include "struct_abi.h"

flashcl_status flashcl_dropout_mask(flashcl_context *ctx, const flashcl_attention_desc *desc, cl_mem mask,
                                    size_t offset, cl_uint num_events_in_wait_list, const cl_event *event_wait_list,
                                    cl_event *event) {
    if (!ctx) return flashcl_fail(NULL, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_dropout_mask: ctx is NULL");
    flashcl_clear_error(ctx);
    flashcl_attention_desc full_desc;
    flashcl_status status = flashcl_import_desc(ctx, &desc, &full_desc);
    if (status == FLASHCL_SUCCESS) status = flashcl_validate_desc(ctx, desc);
    if (status != FLASHCL_SUCCESS) return status;
    if (desc->dropout_p <= 0.0f)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_dropout_mask needs dropout_p in (0, 1)");
    /* The mask as a (batch, heads_q, seqlen_q, seqlen_k) view of bytes. */
    const size_t sq = (size_t)desc->seqlen_q, sk = (size_t)desc->seqlen_k;
    const flashcl_tensor view = {mask, offset, (size_t)desc->heads_q * sq * sk, sq * sk, sk};
    const flashcl_shape shape = {(size_t)desc->batch, (size_t)desc->heads_q, sq, sk, 1};
    flashcl_extent extent;
    if ((status = flashcl_validate_tensor(ctx, "mask", &view, &shape, 1, &extent)) ||
        (status = flashcl_validate_wait_list(ctx, num_events_in_wait_list, event_wait_list)))
        return status;
    flashcl_features features;
    if ((status = flashcl_features_resolve(ctx, desc, NULL, &features))) return status;
    cl_kernel kernel;
    if ((status = flashcl_get_kernel(ctx, "dropout.cl", "flashcl_dropout_mask", "-DFLASHCL_DROPOUT=1", &kernel)))
        return status;
    flashcl_kernel_args a = {kernel, 0, CL_SUCCESS};
    const cl_uint words[3] = {features.dropout_threshold, features.seed_lo, features.seed_hi};
    flashcl_arg_mem(&a, mask);
    flashcl_arg_ulong(&a, offset);
    flashcl_arg_int(&a, desc->seqlen_q);
    flashcl_arg_int(&a, desc->seqlen_k);
    for (int i = 0; i < 3; ++i) flashcl_arg(&a, sizeof words[i], &words[i]);
    flashcl_arg_ulong(&a, features.dropout_offset);
    if (a.error != CL_SUCCESS) return flashcl_fail_cl(ctx, a.error, "clSetKernelArg (dropout mask)");
    /* 16 columns per work-group: the local size must divide the global one. */
    size_t local[3] = {16, 1, 1};
    if (local[0] > ctx->caps.limits.max_work_group_size) local[0] = 1;
    const size_t global[3] = {(sk + local[0] - 1) / local[0] * local[0], sq,
                              (size_t)desc->batch * (size_t)desc->heads_q};
    cl_int err = clEnqueueNDRangeKernel(ctx->queue, kernel, 3, NULL, global, local, num_events_in_wait_list,
                                        event_wait_list, event);
    if (err != CL_SUCCESS) return flashcl_fail_cl(ctx, err, "clEnqueueNDRangeKernel (dropout mask)");
    return FLASHCL_SUCCESS;
}
