/* host_api.c: the convenience forward call on host arrays (copies in, runs, copies out, blocks). */
#include "internal.h"
#include "struct_abi.h"
#include "validate.h"

flashcl_status flashcl_forward_host(flashcl_context *ctx, const flashcl_attention_desc *desc, flashcl_layout layout,
                                    const float *q, const float *k, const float *v, float *o, float *lse) {
    if (!ctx) return flashcl_fail(NULL, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_forward_host: ctx is NULL");
    flashcl_clear_error(ctx);
    flashcl_attention_desc full_desc;
    flashcl_status status = flashcl_import_desc(ctx, &desc, &full_desc);
    if (status == FLASHCL_SUCCESS) status = flashcl_validate_desc(ctx, desc);
    if (status != FLASHCL_SUCCESS) return status;
    if (desc->dtype != FLASHCL_DTYPE_F32)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_forward_host takes float32 arrays only");
    if (layout != FLASHCL_LAYOUT_BHSD && layout != FLASHCL_LAYOUT_BSHD)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "unknown layout %d", (int)layout);
    if (!q || !k || !v || !o) return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "q, k, v and o must not be NULL");

    size_t q_bytes, kv_bytes, lse_bytes;
    status = flashcl_host_array_bytes(ctx, desc, &q_bytes, &kv_bytes, &lse_bytes);
    if (status != FLASHCL_SUCCESS) return status;
    cl_mem bq = NULL, bk = NULL, bv = NULL, bo = NULL, bl = NULL;
    cl_event forward_done = NULL;
    cl_int err = CL_SUCCESS;
    const cl_mem_flags in_flags = CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR;
    bq = clCreateBuffer(ctx->context, in_flags, q_bytes, (void *)q, &err);
    if (err == CL_SUCCESS) bk = clCreateBuffer(ctx->context, in_flags, kv_bytes, (void *)k, &err);
    if (err == CL_SUCCESS) bv = clCreateBuffer(ctx->context, in_flags, kv_bytes, (void *)v, &err);
    if (err == CL_SUCCESS) bo = clCreateBuffer(ctx->context, CL_MEM_WRITE_ONLY, q_bytes, NULL, &err);
    if (err == CL_SUCCESS && lse)
        bl = clCreateBuffer(ctx->context, CL_MEM_WRITE_ONLY, lse_bytes, NULL, &err);
    if (err != CL_SUCCESS) {
        status = flashcl_fail_cl(ctx, err, "clCreateBuffer");
        goto done;
    }
    const flashcl_tensor tq = flashcl_tensor_contiguous(bq, layout, desc->heads_q, desc->seqlen_q, desc->head_dim);
    const flashcl_tensor tk = flashcl_tensor_contiguous(bk, layout, desc->heads_kv, desc->seqlen_k, desc->head_dim);
    const flashcl_tensor tv = flashcl_tensor_contiguous(bv, layout, desc->heads_kv, desc->seqlen_k, desc->head_dim);
    const flashcl_tensor to = flashcl_tensor_contiguous(bo, layout, desc->heads_q, desc->seqlen_q, desc->head_dim);
    const flashcl_tensor tl = flashcl_tensor_lse(bl, desc->heads_q, desc->seqlen_q);
    /* The reads wait for the forward's event: ctx may wrap an out-of-order
     * queue, where enqueue order alone orders nothing. */
    status = flashcl_forward(ctx, desc, &tq, &tk, &tv, &to, lse ? &tl : NULL, 0, NULL, &forward_done);
    if (status != FLASHCL_SUCCESS) goto done;
    err = clEnqueueReadBuffer(ctx->queue, bo, CL_TRUE, 0, q_bytes, o, 1, &forward_done, NULL);
    if (err == CL_SUCCESS && lse)
        err = clEnqueueReadBuffer(ctx->queue, bl, CL_TRUE, 0, lse_bytes, lse, 1, &forward_done,
                                  NULL);
    if (err != CL_SUCCESS) status = flashcl_fail_cl(ctx, err, "clEnqueueReadBuffer");
done:
    if (forward_done) clReleaseEvent(forward_done);
    if (bq) clReleaseMemObject(bq);
    if (bk) clReleaseMemObject(bk);
    if (bv) clReleaseMemObject(bv);
    if (bo) clReleaseMemObject(bo);
    if (bl) clReleaseMemObject(bl);
    return status;
}
