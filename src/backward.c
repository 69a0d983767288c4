/* backward.c: the backward pass's public calls: validate, dispatch (dispatch.c), launch (launch_backward.c or the
 * standard implementation); the host-array form. */
#include "launch.h"
#include "standard_attention.h"
#include "struct_abi.h"

flashcl_status flashcl_backward(flashcl_context *ctx, const flashcl_attention_desc *desc, const flashcl_tensor *q,
                                const flashcl_tensor *k, const flashcl_tensor *v, const flashcl_tensor *o,
                                const flashcl_tensor *lse, const flashcl_tensor *dout, const flashcl_tensor *dq,
                                const flashcl_tensor *dk, const flashcl_tensor *dv, cl_uint num_events_in_wait_list,
                                const cl_event *event_wait_list, cl_event *event) {
    if (!ctx) return flashcl_fail(NULL, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_backward: ctx is NULL");
    return flashcl_backward_ex(ctx, desc, NULL, q, k, v, o, lse, dout, dq, dk, dv, num_events_in_wait_list,
                               event_wait_list, event);
}

flashcl_status flashcl_backward_ex(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                   const flashcl_attention_extras *extras, const flashcl_tensor *q,
                                   const flashcl_tensor *k, const flashcl_tensor *v, const flashcl_tensor *o,
                                   const flashcl_tensor *lse, const flashcl_tensor *dout, const flashcl_tensor *dq,
                                   const flashcl_tensor *dk, const flashcl_tensor *dv, cl_uint num_events_in_wait_list,
                                   const cl_event *event_wait_list, cl_event *event) {
    if (!ctx) return flashcl_fail(NULL, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_backward_ex: ctx is NULL");
    flashcl_clear_error(ctx);
    if (!lse)
        return flashcl_fail(ctx, FLASHCL_ERROR_MISSING_LSE,
                            "the backward pass needs the log-sum-exp its forward wrote (lse is NULL)");
    flashcl_attention_desc full_desc; /* this library's full-size copies of the caller's structs */
    flashcl_attention_extras full_extras;
    flashcl_status status;
    if ((status = flashcl_import_desc(ctx, &desc, &full_desc)) ||
        (status = flashcl_import_extras(ctx, &extras, &full_extras)))
        return status;
    const flashcl_call_tensor tensors[] = {
        {"q", q, FLASHCL_SHAPE_Q, 0, 0},     {"k", k, FLASHCL_SHAPE_KV, 0, 0},     {"v", v, FLASHCL_SHAPE_KV, 0, 0},
        {"o", o, FLASHCL_SHAPE_Q, 0, 0},     {"lse", lse, FLASHCL_SHAPE_LSE, 0, 0}, {"dout", dout, FLASHCL_SHAPE_Q, 0, 0},
        {"dq", dq, FLASHCL_SHAPE_Q, 1, 0},   {"dk", dk, FLASHCL_SHAPE_KV, 1, 0},   {"dv", dv, FLASHCL_SHAPE_KV, 1, 0},
    };
    const int tensor_count = (int)(sizeof tensors / sizeof tensors[0]);
    flashcl_varlen varlen;
    const flashcl_attention_desc *shape_desc;
    status = flashcl_varlen_resolve(ctx, desc, extras, num_events_in_wait_list, event_wait_list,
                                                   &varlen, &shape_desc);
    if (status != FLASHCL_SUCCESS) return status;
    status = flashcl_validate_call(ctx, shape_desc, tensors, tensor_count, num_events_in_wait_list, event_wait_list);
    if (status != FLASHCL_SUCCESS) return status;
    flashcl_features features;
    if ((status = flashcl_features_resolve(ctx, desc, extras, &features))) return status;
    features.varlen = varlen;
    if ((status = flashcl_features_validate_buffers(ctx, desc, shape_desc, &features, tensors, tensor_count)))
        return status;
    flashcl_exec_plan plan;
    /* The tensor-core kernels' 16-byte loads touch these; O and LSE are read by element. */
    const flashcl_tensor *const views[] = {q, k, v, dout, dq, dk, dv};
    if ((status = flashcl_plan_call(ctx, FLASHCL_PASS_BACKWARD, desc, &features, views, 7, k, v, &plan)))
        return status;
    if (plan.kind == FLASHCL_KERNEL_STANDARD)
        return flashcl_standard_backward(ctx, &plan, desc, q, k, v, o, lse, dout, dq, dk, dv, num_events_in_wait_list,
                                         event_wait_list, event);
    const flashcl_backward_tensors all = {q, k, v, o, lse, dout, dq, dk, dv};
    return flashcl_launch_backward(ctx, &plan, desc, &features, &all, num_events_in_wait_list, event_wait_list,
                                   event);
}

flashcl_status flashcl_backward_host(flashcl_context *ctx, const flashcl_attention_desc *desc, flashcl_layout layout,
                                     const float *q, const float *k, const float *v, const float *dout, float *o,
                                     float *lse, float *dq, float *dk, float *dv) {
    if (!ctx) return flashcl_fail(NULL, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_backward_host: ctx is NULL");
    flashcl_clear_error(ctx);
    flashcl_attention_desc full_desc;
    flashcl_status status = flashcl_import_desc(ctx, &desc, &full_desc);
    if (status == FLASHCL_SUCCESS) status = flashcl_validate_desc(ctx, desc);
    if (status != FLASHCL_SUCCESS) return status;
    if (desc->dtype != FLASHCL_DTYPE_F32)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_backward_host takes float32 arrays only");
    if (layout != FLASHCL_LAYOUT_BHSD && layout != FLASHCL_LAYOUT_BSHD)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "unknown layout %d", (int)layout);
    if (!q || !k || !v || !dout || !dq || !dk || !dv)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                            "q, k, v, dout, dq, dk and dv must not be NULL (only o and lse may be)");

    size_t q_bytes, kv_bytes, lse_bytes;
    status = flashcl_host_array_bytes(ctx, desc, &q_bytes, &kv_bytes, &lse_bytes);
    if (status != FLASHCL_SUCCESS) return status;
    enum { BQ, BK, BV, BDO, BO, BL, BDQ, BDK, BDV, NUM_BUFFERS };
    cl_mem buf[NUM_BUFFERS] = {NULL};
    cl_event forward_done = NULL, backward_done = NULL;
    const cl_mem_flags in = CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR;
    const struct {
        cl_mem_flags flags;
        size_t bytes;
        const void *host;
    } spec[NUM_BUFFERS] = {
        [BQ] = {in, q_bytes, q},
        [BK] = {in, kv_bytes, k},
        [BV] = {in, kv_bytes, v},
        [BDO] = {in, q_bytes, dout},
        [BO] = {CL_MEM_READ_WRITE, q_bytes, NULL},
        [BL] = {CL_MEM_READ_WRITE, lse_bytes, NULL},
        [BDQ] = {CL_MEM_WRITE_ONLY, q_bytes, NULL},
        [BDK] = {CL_MEM_WRITE_ONLY, kv_bytes, NULL},
        [BDV] = {CL_MEM_WRITE_ONLY, kv_bytes, NULL},
    };
    cl_int err = CL_SUCCESS;
    for (int i = 0; i < NUM_BUFFERS && err == CL_SUCCESS; ++i)
        buf[i] = clCreateBuffer(ctx->context, spec[i].flags, spec[i].bytes, (void *)spec[i].host, &err);
    if (err != CL_SUCCESS) {
        status = flashcl_fail_cl(ctx, err, "clCreateBuffer");
        goto done;
    }
    const int hq = desc->heads_q, hkv = desc->heads_kv, sq = desc->seqlen_q, sk = desc->seqlen_k, d = desc->head_dim;
    const flashcl_tensor tq = flashcl_tensor_contiguous(buf[BQ], layout, hq, sq, d);
    const flashcl_tensor tk = flashcl_tensor_contiguous(buf[BK], layout, hkv, sk, d);
    const flashcl_tensor tv = flashcl_tensor_contiguous(buf[BV], layout, hkv, sk, d);
    const flashcl_tensor tdo = flashcl_tensor_contiguous(buf[BDO], layout, hq, sq, d);
    const flashcl_tensor to = flashcl_tensor_contiguous(buf[BO], layout, hq, sq, d);
    const flashcl_tensor tl = flashcl_tensor_lse(buf[BL], hq, sq);
    const flashcl_tensor tdq = flashcl_tensor_contiguous(buf[BDQ], layout, hq, sq, d);
    const flashcl_tensor tdk = flashcl_tensor_contiguous(buf[BDK], layout, hkv, sk, d);
    const flashcl_tensor tdv = flashcl_tensor_contiguous(buf[BDV], layout, hkv, sk, d);
    /* Events chain the calls even if ctx wraps an out-of-order queue. */
    status = flashcl_forward(ctx, desc, &tq, &tk, &tv, &to, &tl, 0, NULL, &forward_done);
    if (status != FLASHCL_SUCCESS) goto done;
    status = flashcl_backward(ctx, desc, &tq, &tk, &tv, &to, &tl, &tdo, &tdq, &tdk, &tdv, 1, &forward_done,
                              &backward_done);
    if (status != FLASHCL_SUCCESS) goto done;
    struct {
        cl_mem buffer;
        size_t bytes;
        void *host;
    } reads[] = {{buf[BO], q_bytes, o},   {buf[BL], lse_bytes, lse}, {buf[BDQ], q_bytes, dq},
                 {buf[BDK], kv_bytes, dk}, {buf[BDV], kv_bytes, dv}};
    for (size_t i = 0; i < sizeof reads / sizeof reads[0] && err == CL_SUCCESS; ++i)
        if (reads[i].host)
            err = clEnqueueReadBuffer(ctx->queue, reads[i].buffer, CL_TRUE, 0, reads[i].bytes, reads[i].host, 1,
                                      &backward_done, NULL);
    if (err != CL_SUCCESS) status = flashcl_fail_cl(ctx, err, "clEnqueueReadBuffer");
done:
    if (forward_done) clReleaseEvent(forward_done);
    if (backward_done) clReleaseEvent(backward_done);
    for (int i = 0; i < NUM_BUFFERS; ++i)
        if (buf[i]) clReleaseMemObject(buf[i]);
    return status;
}
