/* feature_tile_mask.c: a block mask summarised over one kernel's tiles (cl/block_mask.cl): its scratch bytes, the
 * summary kernel's launch, its release. */
#include "call_features.h"

#include <string.h>

static size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

static void tile_counts(const flashcl_attention_desc *desc, int tile_q, int tile_k, size_t *rows, size_t *cols) {
    *rows = ceil_div((size_t)desc->seqlen_q, (size_t)tile_q);
    *cols = ceil_div((size_t)desc->seqlen_k, (size_t)tile_k);
}

size_t flashcl_tile_mask_bytes(const flashcl_attention_desc *desc, const flashcl_features *f, int tile_q, int tile_k) {
    if (!f->block_mask) return 0;
    size_t rows, cols;
    tile_counts(desc, tile_q, tile_k, &rows, &cols);
    return (size_t)f->mask_heads * rows * cols;
}

flashcl_status flashcl_tile_mask_build(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                       const flashcl_features *f, int tile_q, int tile_k, cl_uint num_events,
                                       const cl_event *wait_list, flashcl_tile_mask *out, cl_event *done) {
    memset(out, 0, sizeof *out);
    *done = NULL;
    if (!f->block_mask) return FLASHCL_SUCCESS;
    cl_kernel kernel;
    flashcl_status status = flashcl_get_kernel(ctx, "block_mask.cl", "flashcl_tile_mask", "", &kernel);
    if (status != FLASHCL_SUCCESS) return status;
    size_t rows, cols;
    tile_counts(desc, tile_q, tile_k, &rows, &cols);
    const size_t bytes = flashcl_tile_mask_bytes(desc, f, tile_q, tile_k);
    cl_int err;
    out->tiles = clCreateBuffer(ctx->context, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (err != CL_SUCCESS) {
        out->tiles = NULL;
        return flashcl_fail_cl(ctx, err, "clCreateBuffer (block mask tiles)");
    }
    out->cols = (int)cols;
    out->stride_head = f->mask_heads > 1 ? rows * cols : 0;
    flashcl_kernel_args a = {kernel, 0, CL_SUCCESS};
    flashcl_arg_mem(&a, f->mask_view.buffer);
    flashcl_arg_ulong(&a, f->mask_view.offset);
    flashcl_arg_ulong(&a, f->mask_view.stride_head);
    flashcl_arg_int(&a, f->mask_block);
    flashcl_arg_int(&a, f->mask_cols);
    flashcl_arg_int(&a, desc->seqlen_q);
    flashcl_arg_int(&a, desc->seqlen_k);
    flashcl_arg_int(&a, tile_q);
    flashcl_arg_int(&a, tile_k);
    flashcl_arg_int(&a, (int)rows);
    flashcl_arg_int(&a, (int)cols);
    flashcl_arg_mem(&a, out->tiles);
    if (a.error != CL_SUCCESS) {
        flashcl_tile_mask_release(out);
        return flashcl_fail_cl(ctx, a.error, "clSetKernelArg (block mask tiles)");
    }
    const size_t local = 64 <= ctx->caps.limits.max_work_group_size ? 64 : 1;
    const size_t global[2] = {ceil_div(rows * cols, local) * local, (size_t)f->mask_heads};
    const size_t local_size[2] = {local, 1};
    err = clEnqueueNDRangeKernel(ctx->queue, kernel, 2, NULL, global, local_size, num_events, wait_list, done);
    if (err != CL_SUCCESS) {
        flashcl_tile_mask_release(out);
        return flashcl_fail_cl(ctx, err, "clEnqueueNDRangeKernel (block mask tiles)");
    }
    return FLASHCL_SUCCESS;
}

void flashcl_tile_mask_release(flashcl_tile_mask *t) {
    if (t->tiles) clReleaseMemObject(t->tiles);
    t->tiles = NULL;
}

