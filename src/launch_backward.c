/* launch_backward.c: enqueues a backward plan: D = rowsum(dO * O), then the dK/dV and dQ kernels (both read D), and
 * with a dBias to reduce, the reduction after dQ. */
#include "kernel_args.h"
#include "launch.h"
#include "program_cache.h"

/* On an in-order queue the order itself is the dependency and the last
 * kernel's event (dq's, or the dBias reduction's after it) stands for the
 * whole call; an out-of-order queue gets explicit events and a final marker. */
static flashcl_status enqueue_kernels(flashcl_context *ctx, const flashcl_exec_plan *plan, const cl_kernel kernels[3],
                                      const flashcl_dbias_target *dbias, cl_uint num_events, const cl_event *wait_list,
                                      cl_event *event) {
    const int in_order = ctx->queue_in_order;
    cl_event delta_done = NULL, tiled_done[2] = {NULL, NULL}, dq_done = NULL;
    flashcl_status status = FLASHCL_SUCCESS;
    enum { D = FLASHCL_KERNEL_DELTA, KV = FLASHCL_KERNEL_DKDV, Q = FLASHCL_KERNEL_DQ };
    cl_int err = clEnqueueNDRangeKernel(ctx->queue, kernels[D], plan->work_dims[D], NULL, plan->global[D],
                                        plan->local[D], num_events, wait_list, in_order ? NULL : &delta_done);
    if (err != CL_SUCCESS) return flashcl_fail_cl(ctx, err, "clEnqueueNDRangeKernel (backward delta)");
    const cl_uint deps = in_order ? 0 : 1;
    const cl_event *dep_list = in_order ? NULL : &delta_done;
    err = clEnqueueNDRangeKernel(ctx->queue, kernels[KV], plan->work_dims[KV], NULL, plan->global[KV],
                                 plan->local[KV], deps, dep_list, in_order ? NULL : &tiled_done[0]);
    if (err != CL_SUCCESS) {
        status = flashcl_fail_cl(ctx, err, "clEnqueueNDRangeKernel (backward dK/dV)");
        goto done;
    }
    cl_event *dq_event = dbias->reduce ? (in_order ? NULL : &dq_done) : (in_order ? event : &tiled_done[1]);
    err = clEnqueueNDRangeKernel(ctx->queue, kernels[Q], plan->work_dims[Q], NULL, plan->global[Q], plan->local[Q],
                                 deps, dep_list, dq_event);
    if (err != CL_SUCCESS) {
        status = flashcl_fail_cl(ctx, err, "clEnqueueNDRangeKernel (backward dQ)");
        goto done;
    }
    if (dbias->reduce) {
        /* dBias summed from dQ's dS scratch, after dQ (and only dQ) has written it. */
        err = clEnqueueNDRangeKernel(ctx->queue, dbias->reduce, 1, NULL, &dbias->reduce_global, &dbias->reduce_local,
                                     in_order ? 0 : 1, in_order ? NULL : &dq_done, in_order ? event : &tiled_done[1]);
        if (err != CL_SUCCESS) {
            status = flashcl_fail_cl(ctx, err, "clEnqueueNDRangeKernel (dBias reduction)");
            goto done;
        }
    }
    if (!in_order && event) {
        err = clEnqueueMarkerWithWaitList(ctx->queue, 2, tiled_done, event);
        if (err != CL_SUCCESS) status = flashcl_fail_cl(ctx, err, "clEnqueueMarkerWithWaitList (backward)");
    }
done:
    if (delta_done) clReleaseEvent(delta_done);
    if (dq_done) clReleaseEvent(dq_done);
    for (int i = 0; i < 2; ++i)
        if (tiled_done[i]) clReleaseEvent(tiled_done[i]);
    return status;
}

/* The tile summaries of a block mask for both tiled kernels (the plan's
 * mask_tiles). The second waits for the first, so its event stands for
 * both. */
static flashcl_status build_tiles(flashcl_context *ctx, const flashcl_exec_plan *plan,
                                  const flashcl_attention_desc *desc, const flashcl_features *f, cl_uint num_events,
                                  const cl_event *wait_list, flashcl_tile_mask tiles[2], cl_event *done) {
    cl_event first = NULL;
    flashcl_status status = flashcl_tile_mask_build(ctx, desc, f, plan->mask_tiles[0][0], plan->mask_tiles[0][1],
                                                    num_events, wait_list, &tiles[0], &first);
    if (status != FLASHCL_SUCCESS) return status;
    if (!first) {
        tiles[1] = tiles[0];
        *done = NULL;
        return FLASHCL_SUCCESS;
    }
    status = flashcl_tile_mask_build(ctx, desc, f, plan->mask_tiles[1][0], plan->mask_tiles[1][1], 1, &first,
                                     &tiles[1], done);
    clReleaseEvent(first);
    if (status != FLASHCL_SUCCESS) flashcl_tile_mask_release(&tiles[0]);
    return status;
}

/* Q, K, V, dO, LSE and D: the inputs both tiled kernels start with. */
static void arg_inputs(flashcl_kernel_args *a, const flashcl_backward_tensors *t, cl_mem delta) {
    flashcl_arg_tensor(a, t->q);
    flashcl_arg_tensor(a, t->k);
    flashcl_arg_tensor(a, t->v);
    flashcl_arg_tensor(a, t->dout);
    flashcl_arg_tensor(a, t->lse);
    flashcl_arg_mem(a, delta);
}

static cl_int set_arguments(const flashcl_exec_plan *plan, const flashcl_attention_desc *desc,
                            const flashcl_features *f, const flashcl_backward_tensors *t, cl_mem delta,
                            const flashcl_tile_mask tiles[2], cl_mem slopes, const flashcl_dbias_target *dbias,
                            const cl_kernel kernels[3]) {
    const int group_size = desc->heads_q / desc->heads_kv;
    const float scale = flashcl_effective_scale(desc);
    flashcl_kernel_args a = {kernels[FLASHCL_KERNEL_DELTA], 0, CL_SUCCESS};
    flashcl_arg_tensor(&a, t->o);
    flashcl_arg_tensor(&a, t->dout);
    flashcl_arg_mem(&a, delta);
    flashcl_arg_int(&a, desc->heads_q);
    flashcl_arg_int(&a, plan->delta_seqlen);
    flashcl_arg_ulong(&a, plan->delta_rows);
    cl_int error = a.error;
    for (int k = FLASHCL_KERNEL_DKDV; k <= FLASHCL_KERNEL_DQ; ++k) {
        a = (flashcl_kernel_args){kernels[k], 0, CL_SUCCESS};
        arg_inputs(&a, t, delta);
        if (k == FLASHCL_KERNEL_DKDV) {
            flashcl_arg_tensor(&a, t->dk);
            flashcl_arg_tensor(&a, t->dv);
        } else {
            flashcl_arg_tensor(&a, t->dq);
        }
        flashcl_arg_int(&a, desc->heads_q);
        if (k == FLASHCL_KERNEL_DKDV && plan->portable_args) flashcl_arg_int(&a, desc->heads_kv);
        flashcl_arg_int(&a, group_size);
        flashcl_arg_int(&a, desc->seqlen_q);
        flashcl_arg_int(&a, desc->seqlen_k);
        flashcl_arg_float(&a, scale);
        flashcl_arg_int(&a, f->causal);
        if (plan->portable_args)
            flashcl_arg_features(&a, f, &tiles[k - FLASHCL_KERNEL_DKDV], slopes);
        else
            flashcl_arg_score_terms(&a, f, slopes); /* the modifiers and the bias: all the tensor-core kernels take */
        /* Both families' dQ kernels write dBias (FLASHCL_DBIAS_PARAMS, last). */
        if (k == FLASHCL_KERNEL_DQ) flashcl_arg_dbias(&a, f, dbias);
        if (error == CL_SUCCESS) error = a.error;
    }
    return error;
}

flashcl_status flashcl_launch_backward(flashcl_context *ctx, const flashcl_exec_plan *plan,
                                       const flashcl_attention_desc *desc, const flashcl_features *features,
                                       const flashcl_backward_tensors *t, cl_uint num_events,
                                       const cl_event *wait_list, cl_event *event) {
    cl_kernel kernels[3];
    flashcl_status status = FLASHCL_SUCCESS;
    for (int i = 0; i < 3 && status == FLASHCL_SUCCESS; ++i)
        status = plan->kernel_programs[i]
                     ? flashcl_get_kernel(ctx, plan->kernel_programs[i], plan->kernel_names[i], plan->aux_options,
                                          &kernels[i])
                 : plan->sm90a /* the wgmma backward: both tiled kernels are in its sm_90a program */
                     ? flashcl_get_sm90a_kernel(ctx, plan->prelude, plan->program, plan->kernel_names[i],
                                                plan->options, &kernels[i])
                     : flashcl_get_program_kernel(ctx, plan->prelude, plan->program, plan->kernel_names[i],
                                                  plan->options, &kernels[i]);
    /* No check of CL_KERNEL_WORK_GROUP_SIZE here: rusticl 22.3 on llvmpipe
     * reports 32 for the portable kernels yet runs their work-groups of 128
     * correctly, as it does the forward's; a device that really cannot run
     * the plan fails the enqueue with CL_INVALID_WORK_GROUP_SIZE. */
    if (status != FLASHCL_SUCCESS) return status;

    cl_int err;
    cl_mem delta = clCreateBuffer(ctx->context, CL_MEM_READ_WRITE, plan->delta_rows * sizeof(float), NULL, &err);
    if (err != CL_SUCCESS) return flashcl_fail_cl(ctx, err, "clCreateBuffer (backward scratch)");
    cl_mem slopes = NULL;
    if ((status = flashcl_alibi_acquire(ctx, features, &slopes))) {
        clReleaseMemObject(delta);
        return status;
    }
    flashcl_dbias_target dbias;
    if ((status = flashcl_dbias_prepare(ctx, desc, features, &dbias))) {
        if (slopes) clReleaseMemObject(slopes);
        clReleaseMemObject(delta);
        return status;
    }
    flashcl_tile_mask tiles[2];
    cl_event tiles_done = NULL;
    status = build_tiles(ctx, plan, desc, features, num_events, wait_list, tiles, &tiles_done);
    if (status != FLASHCL_SUCCESS) {
        flashcl_dbias_release(&dbias);
        if (slopes) clReleaseMemObject(slopes);
        clReleaseMemObject(delta);
        return status;
    }
    if (tiles_done) {
        num_events = 1;
        wait_list = &tiles_done;
    }
    err = set_arguments(plan, desc, features, t, delta, tiles, slopes, &dbias, kernels);
    if (err != CL_SUCCESS)
        status = flashcl_fail_cl(ctx, err, "clSetKernelArg (backward)");
    else
        status = enqueue_kernels(ctx, plan, kernels, &dbias, num_events, wait_list, event);
    if (status == FLASHCL_SUCCESS) flashcl_record_stats(ctx, plan);
    /* The kernels keep the buffers alive until they finish. */
    clReleaseMemObject(delta);
    flashcl_dbias_release(&dbias);
    if (slopes) clReleaseMemObject(slopes);
    if (tiles_done) clReleaseEvent(tiles_done);
    if (tiles[1].tiles != tiles[0].tiles) flashcl_tile_mask_release(&tiles[1]);
    flashcl_tile_mask_release(&tiles[0]);
    return status;
}
