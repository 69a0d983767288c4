/* launch_forward.c: enqueues a forward plan (portable or tensor-core kernel, after a block mask's tile summary; with
 * split-KV, the split kernel then the combine). */
#include "kernel_args.h"
#include "launch.h"
#include "program_cache.h"

/* The split-KV scratch: the partial O (HEAD_DIM floats per split and row) and the row's maximum and sum (two).
 * On an in-order queue they are the context's kept buffers (calls run one after another, so one call's
 * partials are dead before the next call's kernels start); on an out-of-order queue two calls may run at once,
 * so each call gets its own. */
typedef struct split_scratch {
    cl_mem part_o, part_stats;
    int kept; /* the context's buffers: not released after the call */
} split_scratch;

static void split_release(split_scratch *p) {
    if (p->kept) return;
    if (p->part_o) clReleaseMemObject(p->part_o);
    if (p->part_stats) clReleaseMemObject(p->part_stats);
}

void flashcl_split_cache_free(flashcl_context *ctx) {
    if (ctx->split_cache_o) clReleaseMemObject(ctx->split_cache_o);
    if (ctx->split_cache_stats) clReleaseMemObject(ctx->split_cache_stats);
    ctx->split_cache_o = ctx->split_cache_stats = NULL;
    ctx->split_cache_o_bytes = ctx->split_cache_stats_bytes = 0;
}

static flashcl_status split_allocate(flashcl_context *ctx, const flashcl_exec_plan *plan, int head_dim,
                                     split_scratch *out) {
    const size_t rows = (size_t)plan->kv_splits * plan->split_rows;
    const size_t o_bytes = rows * (size_t)head_dim * sizeof(float), stats_bytes = rows * 2 * sizeof(float);
    if (ctx->queue_in_order && ctx->split_cache_o_bytes >= o_bytes && ctx->split_cache_stats_bytes >= stats_bytes) {
        *out = (split_scratch){ctx->split_cache_o, ctx->split_cache_stats, 1};
        return FLASHCL_SUCCESS;
    }
    cl_int err;
    out->part_o = clCreateBuffer(ctx->context, CL_MEM_READ_WRITE, o_bytes, NULL, &err);
    if (err == CL_SUCCESS) out->part_stats = clCreateBuffer(ctx->context, CL_MEM_READ_WRITE, stats_bytes, NULL, &err);
    if (err != CL_SUCCESS) return flashcl_fail_cl(ctx, err, "clCreateBuffer (split-KV partials)");
    if (ctx->queue_in_order) {
        /* The older, smaller buffers are released now: the queue's earlier kernels keep what they use alive. */
        flashcl_split_cache_free(ctx);
        ctx->split_cache_o = out->part_o;
        ctx->split_cache_stats = out->part_stats;
        ctx->split_cache_o_bytes = o_bytes;
        ctx->split_cache_stats_bytes = stats_bytes;
        out->kept = 1;
    }
    return FLASHCL_SUCCESS;
}

/* The combine kernel's arguments: the partials, then O and LSE as the forward takes them. */
static cl_int combine_arguments(cl_kernel kernel, const flashcl_exec_plan *plan, const flashcl_attention_desc *desc,
                                const split_scratch *p, const flashcl_tensor *q, const flashcl_tensor *o,
                                const flashcl_tensor *lse) {
    const flashcl_tensor lse_arg = lse ? *lse : (flashcl_tensor){q->buffer, 0, 0, 0, 0};
    flashcl_kernel_args a = {kernel, 0, CL_SUCCESS};
    flashcl_arg_mem(&a, p->part_o);
    flashcl_arg_mem(&a, p->part_stats);
    flashcl_arg_int(&a, plan->kv_splits);
    flashcl_arg_ulong(&a, plan->split_rows);
    flashcl_arg_tensor(&a, o);
    flashcl_arg_tensor(&a, &lse_arg);
    flashcl_arg_int(&a, lse != NULL);
    flashcl_arg_int(&a, desc->heads_q);
    flashcl_arg_int(&a, desc->seqlen_q);
    return a.error;
}

/* The append kernel's arguments (cl/kv_append.cl). */
static cl_int append_arguments(cl_kernel kernel, const flashcl_attention_desc *desc, const flashcl_kv_cache *c) {
    flashcl_kernel_args a = {kernel, 0, CL_SUCCESS};
    flashcl_arg_tensor(&a, c->k_new);
    flashcl_arg_tensor(&a, c->v_new);
    flashcl_arg_tensor(&a, &c->k);
    flashcl_arg_tensor(&a, &c->v);
    flashcl_arg_mem(&a, c->cache_seqlens);
    flashcl_arg_int(&a, desc->batch);
    flashcl_arg_int(&a, desc->seqlen_q);
    flashcl_arg_int(&a, desc->heads_kv);
    flashcl_arg_int(&a, desc->head_dim);
    if (c->page_size > 0) {
        flashcl_arg_mem(&a, c->block_table);
        flashcl_arg_int(&a, c->max_pages);
        flashcl_arg_int(&a, c->page_size);
    }
    return a.error;
}

/* Enqueues the append (one work-item per new element), returning its event in *done. */
static flashcl_status enqueue_append(flashcl_context *ctx, cl_kernel kernel, const flashcl_attention_desc *desc,
                                     const flashcl_kv_cache *cache, cl_uint num_events, const cl_event *wait_list,
                                     cl_event *done) {
    cl_int err = append_arguments(kernel, desc, cache);
    if (err != CL_SUCCESS) return flashcl_fail_cl(ctx, err, "clSetKernelArg (KV-cache append)");
    const size_t local = 64;
    const size_t count = (size_t)desc->batch * (size_t)desc->seqlen_q * (size_t)desc->heads_kv * (size_t)desc->head_dim;
    const size_t global = (count + local - 1) / local * local;
    err = clEnqueueNDRangeKernel(ctx->queue, kernel, 1, NULL, &global, &local, num_events, wait_list, done);
    if (err != CL_SUCCESS) return flashcl_fail_cl(ctx, err, "clEnqueueNDRangeKernel (KV-cache append)");
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_launch_forward(flashcl_context *ctx, const flashcl_exec_plan *plan,
                                      const flashcl_attention_desc *desc, const flashcl_features *features,
                                      const flashcl_tensor *q, const flashcl_tensor *k, const flashcl_tensor *v,
                                      const flashcl_tensor *o, const flashcl_tensor *lse,
                                      const flashcl_kv_cache *cache, cl_uint num_events, const cl_event *wait_list,
                                      cl_event *event) {
    const int split = plan->kv_splits > 1;
    const int append = plan->kernel_programs[FLASHCL_KERNEL_APPEND] != NULL;
    cl_kernel kernel, combine = NULL, appender = NULL;
    flashcl_status status =
        plan->sm90a
            ? flashcl_get_sm90a_kernel(ctx, plan->prelude, plan->program, plan->kernel_names[0], plan->options, &kernel)
            : flashcl_get_program_kernel(ctx, plan->prelude, plan->program, plan->kernel_names[0], plan->options,
                                         &kernel);
    if (status == FLASHCL_SUCCESS && split)
        status = flashcl_get_kernel(ctx, plan->kernel_programs[FLASHCL_KERNEL_COMBINE],
                                    plan->kernel_names[FLASHCL_KERNEL_COMBINE], plan->aux_options, &combine);
    if (status == FLASHCL_SUCCESS && append)
        status = flashcl_get_kernel(ctx, plan->kernel_programs[FLASHCL_KERNEL_APPEND],
                                    plan->kernel_names[FLASHCL_KERNEL_APPEND], plan->append_options, &appender);
    if (status != FLASHCL_SUCCESS) return status;
    split_scratch parts = {NULL, NULL, 0};
    if (split && (status = split_allocate(ctx, plan, desc->head_dim, &parts))) {
        split_release(&parts);
        return status;
    }
    cl_mem slopes = NULL;
    if ((status = flashcl_alibi_acquire(ctx, features, &slopes))) {
        split_release(&parts);
        return status;
    }
    /* The block mask's tile summary runs first; the attention kernel waits for it. */
    flashcl_tile_mask tiles;
    cl_event tiles_done = NULL, main_done = NULL;
    if ((status = flashcl_tile_mask_build(ctx, desc, features, plan->mask_tiles[0][0], plan->mask_tiles[0][1],
                                          num_events, wait_list, &tiles, &tiles_done))) {
        if (slopes) clReleaseMemObject(slopes);
        split_release(&parts);
        return status;
    }
    if (tiles_done) {
        num_events = 1;
        wait_list = &tiles_done;
    }
    /* The new rows land in the cache before the attention reads it. */
    cl_event appended = NULL;
    if (append) {
        if ((status = enqueue_append(ctx, appender, desc, cache, num_events, wait_list, &appended))) {
            if (tiles_done) clReleaseEvent(tiles_done);
            flashcl_tile_mask_release(&tiles);
            if (slopes) clReleaseMemObject(slopes);
            split_release(&parts);
            return status;
        }
        num_events = 1;
        wait_list = &appended;
    }
    flashcl_kernel_args args = {kernel, 0, CL_SUCCESS};
    /* The tensor-core kernel takes no mask feature (the dispatcher gives it
     * none), so its causal flag is the desc's; of the features, only the
     * score modifiers' arguments. */
    flashcl_arg_forward_dense(&args, desc, q, k, v, o, lse, features->causal);
    if (split) {
        flashcl_arg_mem(&args, parts.part_o);
        flashcl_arg_mem(&args, parts.part_stats);
        flashcl_arg_int(&args, plan->split_keys);
    }
    if (plan->portable_args)
        flashcl_arg_features(&args, features, &tiles, slopes);
    else if (plan->kind == FLASHCL_KERNEL_TENSOR_CORE || plan->kind == FLASHCL_KERNEL_TENSOR_CORE_EMULATED)
        flashcl_arg_score_terms(&args, features, slopes);
    if (cache) {
        flashcl_arg_mem(&args, cache->cache_seqlens);
        flashcl_arg_int(&args, append ? desc->seqlen_q : 0);
        if (cache->page_size > 0) {
            flashcl_arg_mem(&args, cache->block_table);
            flashcl_arg_int(&args, cache->max_pages);
            flashcl_arg_int(&args, cache->page_size);
        }
    }
    cl_int err = args.error;
    if (err == CL_SUCCESS && split) err = combine_arguments(combine, plan, desc, &parts, q, o, lse);
    if (err != CL_SUCCESS) {
        status = flashcl_fail_cl(ctx, err, "clSetKernelArg (forward)");
        goto done;
    }
    /* On an in-order queue the order is the dependency; otherwise the
     * combine waits for the split kernel's event. */
    const int in_order = ctx->queue_in_order;
    err = clEnqueueNDRangeKernel(ctx->queue, kernel, plan->work_dims[0], NULL, plan->global[0], plan->local[0],
                                 num_events, wait_list, split ? (in_order ? NULL : &main_done) : event);
    if (err != CL_SUCCESS) {
        status = flashcl_fail_cl(ctx, err, "clEnqueueNDRangeKernel (forward)");
        goto done;
    }
    if (split) {
        enum { C = FLASHCL_KERNEL_COMBINE };
        err = clEnqueueNDRangeKernel(ctx->queue, combine, plan->work_dims[C], NULL, plan->global[C], plan->local[C],
                                     in_order ? 0 : 1, in_order ? NULL : &main_done, event);
        if (err != CL_SUCCESS) {
            status = flashcl_fail_cl(ctx, err, "clEnqueueNDRangeKernel (split-KV combine)");
            goto done;
        }
    }
    flashcl_record_stats(ctx, plan);
done:
    /* Enqueued kernels keep the summary, the slopes and the partials alive until they finish. */
    if (tiles_done) clReleaseEvent(tiles_done);
    if (appended) clReleaseEvent(appended);
    if (main_done) clReleaseEvent(main_done);
    flashcl_tile_mask_release(&tiles);
    if (slopes) clReleaseMemObject(slopes);
    split_release(&parts);
    return status;
}
