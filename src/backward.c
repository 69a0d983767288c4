/* backward.c: validates a backward call, plans it and enqueues the kernels of cl/backward.cl; the host-array form. */
#include <stdio.h>

#include "call_features.h"

static flashcl_status get_backward_kernels(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                           const flashcl_plan *plan, const flashcl_features *features,
                                           flashcl_backward_kernels *out) {
    char options[320];
    flashcl_format_kernel_options(options, sizeof options, desc, plan);
    flashcl_features_options(features, options, sizeof options);
    flashcl_status status;
    if ((status = flashcl_get_kernel(ctx, "backward.cl", "flashcl_backward_delta", options, &out->delta)) ||
        (status = flashcl_get_kernel(ctx, "backward.cl", "flashcl_backward_dkdv", options, &out->dkdv)) ||
        (status = flashcl_get_kernel(ctx, "backward.cl", "flashcl_backward_dq", options, &out->dq)))
        return status;
    /* No check of CL_KERNEL_WORK_GROUP_SIZE here: rusticl 22.3 on llvmpipe
     * reports 32 for these kernels yet runs their work-groups of 128
     * correctly, as it does the forward's; a device that really cannot run
     * the plan fails the enqueue with CL_INVALID_WORK_GROUP_SIZE. */
    return FLASHCL_SUCCESS;
}

static void arg_inputs(flashcl_kernel_args *a, const flashcl_tensor *q, const flashcl_tensor *k,
                       const flashcl_tensor *v, const flashcl_tensor *dout, const flashcl_tensor *lse, cl_mem delta) {
    flashcl_arg_tensor(a, q);
    flashcl_arg_tensor(a, k);
    flashcl_arg_tensor(a, v);
    flashcl_arg_tensor(a, dout);
    flashcl_arg_tensor(a, lse);
    flashcl_arg_mem(a, delta);
}

static int queue_is_in_order(cl_command_queue queue) {
    cl_command_queue_properties props = 0;
    if (clGetCommandQueueInfo(queue, CL_QUEUE_PROPERTIES, sizeof props, &props, NULL) != CL_SUCCESS) return 0;
    return (props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE) == 0;
}

/* On an in-order queue the order itself is the dependency and dq's event
 * stands for the whole call; an out-of-order queue gets explicit events and
 * a final marker. */
flashcl_status flashcl_backward_enqueue(flashcl_context *ctx, const flashcl_backward_kernels *kernels, const size_t delta_global[1],
                                  const size_t delta_local[1], const size_t dkdv_global[2], const size_t dq_global[2],
                                  size_t work_group, cl_uint num_events, const cl_event *wait_list, cl_event *event) {
    const int in_order = queue_is_in_order(ctx->queue);
    const size_t local[2] = {work_group, 1};
    cl_event delta_done = NULL, tiled_done[2] = {NULL, NULL};
    flashcl_status status = FLASHCL_SUCCESS;
    cl_int err = clEnqueueNDRangeKernel(ctx->queue, kernels->delta, 1, NULL, delta_global, delta_local, num_events,
                                        wait_list, in_order ? NULL : &delta_done);
    if (err != CL_SUCCESS) return flashcl_fail_cl(ctx, err, "clEnqueueNDRangeKernel (backward delta)");
    const cl_uint deps = in_order ? 0 : 1;
    const cl_event *dep_list = in_order ? NULL : &delta_done;
    err = clEnqueueNDRangeKernel(ctx->queue, kernels->dkdv, 2, NULL, dkdv_global, local, deps, dep_list,
                                 in_order ? NULL : &tiled_done[0]);
    if (err != CL_SUCCESS) {
        status = flashcl_fail_cl(ctx, err, "clEnqueueNDRangeKernel (backward dK/dV)");
        goto done;
    }
    err = clEnqueueNDRangeKernel(ctx->queue, kernels->dq, 2, NULL, dq_global, local, deps, dep_list,
                                 in_order ? event : &tiled_done[1]);
    if (err != CL_SUCCESS) {
        status = flashcl_fail_cl(ctx, err, "clEnqueueNDRangeKernel (backward dQ)");
        goto done;
    }
    if (!in_order && event) {
        err = clEnqueueMarkerWithWaitList(ctx->queue, 2, tiled_done, event);
        if (err != CL_SUCCESS) status = flashcl_fail_cl(ctx, err, "clEnqueueMarkerWithWaitList (backward)");
    }
done:
    if (delta_done) clReleaseEvent(delta_done);
    for (int i = 0; i < 2; ++i)
        if (tiled_done[i]) clReleaseEvent(tiled_done[i]);
    return status;
}

flashcl_status flashcl_backward(flashcl_context *ctx, const flashcl_attention_desc *desc, const flashcl_tensor *q,
                                const flashcl_tensor *k, const flashcl_tensor *v, const flashcl_tensor *o,
                                const flashcl_tensor *lse, const flashcl_tensor *dout, const flashcl_tensor *dq,
                                const flashcl_tensor *dk, const flashcl_tensor *dv, cl_uint num_events_in_wait_list,
                                const cl_event *event_wait_list, cl_event *event) {
    if (!ctx) return flashcl_fail(NULL, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_backward: ctx is NULL");
    return flashcl_backward_ex(ctx, desc, NULL, q, k, v, o, lse, dout, dq, dk, dv, num_events_in_wait_list,
                               event_wait_list, event);
}

/* The tile summaries of a block mask for both tiled kernels: dK/dV walks
 * block_q query rows against block_k keys, dQ the plan transposed. The
 * second waits for the first, so its event stands for both. */
static flashcl_status build_backward_tiles(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                           const flashcl_features *f, const flashcl_plan *plan, cl_uint num_events,
                                           const cl_event *wait_list, flashcl_tile_mask tiles[2], cl_event *done) {
    cl_event first = NULL;
    flashcl_status status =
        flashcl_tile_mask_build(ctx, desc, f, plan->block_q, plan->block_k, num_events, wait_list, &tiles[0], &first);
    if (status != FLASHCL_SUCCESS) return status;
    if (!first) {
        tiles[1] = tiles[0];
        *done = NULL;
        return FLASHCL_SUCCESS;
    }
    status = flashcl_tile_mask_build(ctx, desc, f, plan->block_k, plan->block_q, 1, &first, &tiles[1], done);
    clReleaseEvent(first);
    if (status != FLASHCL_SUCCESS) flashcl_tile_mask_release(&tiles[0]);
    return status;
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
    const flashcl_call_tensor tensors[] = {
        {"q", q, FLASHCL_SHAPE_Q, 0, 0},     {"k", k, FLASHCL_SHAPE_KV, 0, 0},     {"v", v, FLASHCL_SHAPE_KV, 0, 0},
        {"o", o, FLASHCL_SHAPE_Q, 0, 0},     {"lse", lse, FLASHCL_SHAPE_LSE, 0, 0}, {"dout", dout, FLASHCL_SHAPE_Q, 0, 0},
        {"dq", dq, FLASHCL_SHAPE_Q, 1, 0},   {"dk", dk, FLASHCL_SHAPE_KV, 1, 0},   {"dv", dv, FLASHCL_SHAPE_KV, 1, 0},
    };
    const int tensor_count = (int)(sizeof tensors / sizeof tensors[0]);
    flashcl_varlen varlen;
    const flashcl_attention_desc *shape_desc;
    flashcl_status status = flashcl_varlen_resolve(ctx, desc, extras, num_events_in_wait_list, event_wait_list,
                                                   &varlen, &shape_desc);
    if (status != FLASHCL_SUCCESS) return status;
    status = flashcl_validate_call(ctx, shape_desc, tensors, tensor_count, num_events_in_wait_list, event_wait_list);
    if (status != FLASHCL_SUCCESS) return status;
    flashcl_features features;
    if ((status = flashcl_features_resolve(ctx, desc, extras, &features))) return status;
    features.varlen = varlen;
    if ((status = flashcl_features_validate_buffers(ctx, desc, shape_desc, &features, tensors, tensor_count)) ||
        (status = flashcl_features_check_impl(ctx, &features)))
        return status;
    if (ctx->impl == FLASHCL_IMPL_STANDARD)
        return flashcl_standard_backward(ctx, desc, q, k, v, o, lse, dout, dq, dk, dv, num_events_in_wait_list,
                                         event_wait_list, event);

    flashcl_plan plan;
    const flashcl_tensor *const mma_tensors[7] = {q, k, v, dout, dq, dk, dv};
    const int mma = flashcl_backward_mma_mode(ctx, desc, flashcl_features_any(&features), mma_tensors, &plan);
    if (mma)
        return flashcl_backward_mma(ctx, mma, &plan, desc, q, k, v, o, lse, dout, dq, dk, dv, num_events_in_wait_list,
                                    event_wait_list, event);
    if ((status = flashcl_resolve_plan(ctx, FLASHCL_PASS_BACKWARD, desc, &plan))) return status;
    /* The only scratch: D = rowsum(dO * O), one float per query row (O(N)). */
    /* With a packed batch D is (heads_q, total_q), the delta kernel seeing one sequence of total_q rows. */
    const int delta_seqlen = varlen.on ? varlen.total_q : desc->seqlen_q;
    const size_t rows = (size_t)(varlen.on ? 1 : desc->batch) * (size_t)desc->heads_q * (size_t)delta_seqlen;
    const size_t tile_bytes = flashcl_tile_mask_bytes(desc, &features, plan.block_q, plan.block_k) +
                              flashcl_tile_mask_bytes(desc, &features, plan.block_k, plan.block_q);
    const size_t scratch_bytes = rows * sizeof(float) + tile_bytes;
    if (ctx->memory_budget != 0 && scratch_bytes > ctx->memory_budget)
        return flashcl_fail(ctx, FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY,
                            "the backward pass needs %zu bytes of scratch, the memory budget is %zu", scratch_bytes,
                            ctx->memory_budget);
    flashcl_backward_kernels kernels;
    if ((status = get_backward_kernels(ctx, desc, &plan, &features, &kernels))) return status;

    cl_int err;
    cl_mem delta = clCreateBuffer(ctx->context, CL_MEM_READ_WRITE, rows * sizeof(float), NULL, &err);
    if (err != CL_SUCCESS) return flashcl_fail_cl(ctx, err, "clCreateBuffer (backward scratch)");
    flashcl_tile_mask tiles[2];
    cl_event tiles_done = NULL;
    status = build_backward_tiles(ctx, desc, &features, &plan, num_events_in_wait_list, event_wait_list, tiles,
                                  &tiles_done);
    if (status != FLASHCL_SUCCESS) {
        clReleaseMemObject(delta);
        return status;
    }
    if (tiles_done) {
        num_events_in_wait_list = 1;
        event_wait_list = &tiles_done;
    }

    const int group_size = desc->heads_q / desc->heads_kv;
    const float scale = flashcl_effective_scale(desc);
    flashcl_kernel_args a = {kernels.delta, 0, CL_SUCCESS};
    flashcl_arg_tensor(&a, o);
    flashcl_arg_tensor(&a, dout);
    flashcl_arg_mem(&a, delta);
    flashcl_arg_int(&a, desc->heads_q);
    flashcl_arg_int(&a, delta_seqlen);
    flashcl_arg_ulong(&a, rows);
    cl_int args_error = a.error;

    a = (flashcl_kernel_args){kernels.dkdv, 0, CL_SUCCESS};
    arg_inputs(&a, q, k, v, dout, lse, delta);
    flashcl_arg_tensor(&a, dk);
    flashcl_arg_tensor(&a, dv);
    flashcl_arg_int(&a, desc->heads_q);
    flashcl_arg_int(&a, desc->heads_kv);
    flashcl_arg_int(&a, group_size);
    flashcl_arg_int(&a, desc->seqlen_q);
    flashcl_arg_int(&a, desc->seqlen_k);
    flashcl_arg_float(&a, scale);
    flashcl_arg_int(&a, features.causal);
    flashcl_arg_features(&a, &features, &tiles[0]);
    if (args_error == CL_SUCCESS) args_error = a.error;

    a = (flashcl_kernel_args){kernels.dq, 0, CL_SUCCESS};
    arg_inputs(&a, q, k, v, dout, lse, delta);
    flashcl_arg_tensor(&a, dq);
    flashcl_arg_int(&a, desc->heads_q);
    flashcl_arg_int(&a, group_size);
    flashcl_arg_int(&a, desc->seqlen_q);
    flashcl_arg_int(&a, desc->seqlen_k);
    flashcl_arg_float(&a, scale);
    flashcl_arg_int(&a, features.causal);
    flashcl_arg_features(&a, &features, &tiles[1]);
    if (args_error == CL_SUCCESS) args_error = a.error;
    if (args_error != CL_SUCCESS) {
        status = flashcl_fail_cl(ctx, args_error, "clSetKernelArg (backward)");
        goto done;
    }

    /* The delta kernel is a plain row loop: any work-group size divides a
     * global size rounded up to it. */
    size_t delta_local[1] = {64};
    if (delta_local[0] > ctx->limits.max_work_group_size) delta_local[0] = ctx->limits.max_work_group_size;
    const size_t delta_global[1] = {(rows + delta_local[0] - 1) / delta_local[0] * delta_local[0]};
    const size_t block = (size_t)plan.block_k, wg = plan.work_group_size;
    const size_t key_blocks = ((size_t)desc->seqlen_k + block - 1) / block;
    const size_t query_blocks = ((size_t)desc->seqlen_q + block - 1) / block;
    const size_t dkdv_global[2] = {key_blocks * wg, (size_t)desc->batch * (size_t)desc->heads_kv};
    const size_t dq_global[2] = {query_blocks * wg, (size_t)desc->batch * (size_t)desc->heads_q};
    status = flashcl_backward_enqueue(ctx, &kernels, delta_global, delta_local, dkdv_global, dq_global, wg,
                         num_events_in_wait_list, event_wait_list, event);
    if (status == FLASHCL_SUCCESS)
        flashcl_record_stats(ctx, FLASHCL_IMPL_FLASH, FLASHCL_PASS_BACKWARD, desc, &plan, scratch_bytes);
done:
    /* The kernels keep the buffers alive until they finish. */
    clReleaseMemObject(delta);
    if (tiles_done) clReleaseEvent(tiles_done);
    if (tiles[1].tiles != tiles[0].tiles) flashcl_tile_mask_release(&tiles[1]);
    flashcl_tile_mask_release(&tiles[0]);
    return status;
}

flashcl_status flashcl_backward_host(flashcl_context *ctx, const flashcl_attention_desc *desc, flashcl_layout layout,
                                     const float *q, const float *k, const float *v, const float *dout, float *o,
                                     float *lse, float *dq, float *dk, float *dv) {
    if (!ctx) return flashcl_fail(NULL, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_backward_host: ctx is NULL");
    flashcl_clear_error(ctx);
    flashcl_status status = flashcl_validate_desc(ctx, desc);
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
