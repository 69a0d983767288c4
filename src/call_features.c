/* call_features.c: sliding window, block mask, dropout and varlen of a call: checks, -D options, tile summaries, kernel arguments. */
#include "call_features.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cl_uint flashcl_dropout_threshold(float p) {
    /* p < 1, so p * 2^32 < 2^32; the product is exact in double. */
    return (cl_uint)floor((double)p * 4294967296.0);
}

static size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

/* Checks a cu_seqlens buffer's context and size: no device access, so it
 * never waits (the host-copy path relies on that). */
static flashcl_status check_cu_buffer(flashcl_context *ctx, const char *name, cl_mem buffer, int batch) {
    cl_context owner = NULL;
    size_t bytes = 0;
    cl_int err = clGetMemObjectInfo(buffer, CL_MEM_CONTEXT, sizeof owner, &owner, NULL);
    if (err == CL_SUCCESS) err = clGetMemObjectInfo(buffer, CL_MEM_SIZE, sizeof bytes, &bytes, NULL);
    if (err != CL_SUCCESS)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "%s is not a valid cl_mem (%s)", name,
                            flashcl_cl_error_name(err));
    if (owner != ctx->context)
        return flashcl_fail(ctx, FLASHCL_ERROR_WRONG_CONTEXT, "%s belongs to another OpenCL context", name);
    const size_t count = (size_t)batch + 1;
    if (bytes < count * sizeof(cl_int))
        return flashcl_fail(ctx, FLASHCL_ERROR_BUFFER_TOO_SMALL, "%s needs %zu bytes (batch + 1 int32) but has %zu",
                            name, count * sizeof(cl_int), bytes);
    return FLASHCL_SUCCESS;
}

/* Checks the contents of one cu_seqlens array (batch + 1 entries, wherever
 * they came from: the device read-back or the caller's host copy, so both
 * paths give the same messages); *total receives its last entry. */
static flashcl_status check_cu_values(flashcl_context *ctx, const char *name, const int32_t *cu, int batch,
                                      int max_len, int *total) {
    if (cu[0] != 0) return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "%s[0] is %d, not 0", name, (int)cu[0]);
    for (int b = 0; b < batch; ++b) {
        const int64_t len = (int64_t)cu[b + 1] - (int64_t)cu[b];
        if (len < 0 || len > max_len)
            return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                                "%s: sequence %d has length %lld (must be 0 .. %d: non-decreasing offsets, "
                                "lengths at most the desc's maximum)",
                                name, b, (long long)len, max_len);
    }
    *total = (int)cu[batch];
    if (*total < 1)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "%s: the packed batch has no rows", name);
    return FLASHCL_SUCCESS;
}

/* Checks one cu_seqlens array: the buffer, then the contents of host (the
 * caller's copy) or, without one, of the buffer read back (blocking, after
 * the wait list). *total receives its last entry. */
static flashcl_status check_cu_seqlens(flashcl_context *ctx, const char *name, cl_mem buffer, const int32_t *host,
                                       int batch, int max_len, cl_uint num_events, const cl_event *wait_list,
                                       int *total) {
    flashcl_status status = check_cu_buffer(ctx, name, buffer, batch);
    if (status != FLASHCL_SUCCESS) return status;
    if (host) return check_cu_values(ctx, name, host, batch, max_len, total);
    const size_t count = (size_t)batch + 1;
    int32_t *cu = malloc(count * sizeof *cu);
    if (!cu) return flashcl_fail(ctx, FLASHCL_ERROR_OUT_OF_HOST_MEMORY, "reading %s", name);
    const cl_int err =
        clEnqueueReadBuffer(ctx->queue, buffer, CL_TRUE, 0, count * sizeof *cu, cu, num_events, wait_list, NULL);
    if (err != CL_SUCCESS)
        status = flashcl_fail_cl(ctx, err, "clEnqueueReadBuffer (cu_seqlens)");
    else
        status = check_cu_values(ctx, name, cu, batch, max_len, total);
    free(cu);
    return status;
}

flashcl_status flashcl_varlen_resolve(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                      const flashcl_attention_extras *extras, cl_uint num_events,
                                      const cl_event *wait_list, flashcl_varlen *out,
                                      const flashcl_attention_desc **shape_desc) {
    memset(out, 0, sizeof *out);
    *shape_desc = desc;
    if (!extras) return FLASHCL_SUCCESS;
    if (!extras->cu_seqlens_q && !extras->cu_seqlens_k) {
        /* Host copies alone describe no batch the kernels could read: refused
         * rather than silently running the call as a padded one. */
        if (extras->cu_seqlens_q_host || extras->cu_seqlens_k_host)
            return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                                "cu_seqlens_q_host / cu_seqlens_k_host are given without the device arrays "
                                "cu_seqlens_q / cu_seqlens_k (the kernels read the device ones)");
        return FLASHCL_SUCCESS;
    }
    if (!extras->cu_seqlens_q || !extras->cu_seqlens_k)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                            "a variable-length batch needs both cu_seqlens_q and cu_seqlens_k (%s is NULL)",
                            extras->cu_seqlens_q ? "cu_seqlens_k" : "cu_seqlens_q");
    /* Host copies replace the read-back only as a pair: with one, the other
     * array would still be read back and the call would block anyway. */
    if ((extras->cu_seqlens_q_host != NULL) != (extras->cu_seqlens_k_host != NULL))
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                            "host copies of the offsets come in pairs: %s is given but %s is NULL",
                            extras->cu_seqlens_q_host ? "cu_seqlens_q_host" : "cu_seqlens_k_host",
                            extras->cu_seqlens_q_host ? "cu_seqlens_k_host" : "cu_seqlens_q_host");
    flashcl_status status = flashcl_validate_desc(ctx, desc);
    if (status == FLASHCL_SUCCESS) status = flashcl_validate_wait_list(ctx, num_events, wait_list);
    if (status == FLASHCL_SUCCESS)
        status = check_cu_seqlens(ctx, "cu_seqlens_q", extras->cu_seqlens_q, extras->cu_seqlens_q_host, desc->batch,
                                  desc->seqlen_q, num_events, wait_list, &out->total_q);
    if (status == FLASHCL_SUCCESS)
        status = check_cu_seqlens(ctx, "cu_seqlens_k", extras->cu_seqlens_k, extras->cu_seqlens_k_host, desc->batch,
                                  desc->seqlen_k, num_events, wait_list, &out->total_k);
    if (status != FLASHCL_SUCCESS) return status;
    out->on = 1;
    out->cu_q = extras->cu_seqlens_q;
    out->cu_k = extras->cu_seqlens_k;
    out->packed = *desc;
    out->packed.batch = 1;
    out->packed.seqlen_q = out->total_q;
    out->packed.seqlen_k = out->total_k;
    *shape_desc = &out->packed;
    return FLASHCL_SUCCESS;
}

/* A window side as the kernels take it: unbounded (-1) and every width of
 * at least seqlen_q + seqlen_k mean the same, since no key is that far from
 * a row's position (|j - pos| < max(seqlen_q, seqlen_k)); clamping to that
 * keeps the kernels' 32-bit band arithmetic in range (flashcl_validate_desc
 * bounds the sequence lengths so that it is). */
static int window_side(const flashcl_attention_desc *desc, int side) {
    long long width = (long long)desc->seqlen_q + (long long)desc->seqlen_k;
    if (side >= 0 && side < width) width = side;
    return width > INT32_MAX ? INT32_MAX : (int)width;
}

flashcl_status flashcl_features_resolve(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                        const flashcl_attention_extras *extras, flashcl_features *f) {
    memset(f, 0, sizeof *f);
    f->causal = desc->causal != 0;
    f->window = desc->sliding_window && (desc->window_left >= 0 || desc->window_right >= 0);
    if (f->window) {
        f->window_left = window_side(desc, desc->window_left);
        f->window_right = window_side(desc, desc->window_right);
        if (f->causal && f->window_right > 0) f->window_right = 0; /* causal is the window's right edge at 0 */
        f->causal = 0;
    }
    if (desc->dropout_p > 0.0f) {
        f->dropout = 1;
        f->dropout_threshold = flashcl_dropout_threshold(desc->dropout_p);
        f->dropout_scale = (float)(1.0 / (1.0 - (double)desc->dropout_p));
        f->seed_lo = (cl_uint)desc->dropout_seed;
        f->seed_hi = (cl_uint)(desc->dropout_seed >> 32);
        f->dropout_offset = desc->dropout_offset;
    }
    if (!extras || !extras->block_mask) {
        if (extras && (extras->block_mask_offset != 0 || extras->block_size != 0 || extras->block_mask_per_head != 0))
            return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                                "extras->block_mask is NULL but its offset, block_size or per_head flag is set");
        return FLASHCL_SUCCESS;
    }
    if (extras->block_size < 1)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "block_size %d must be >= 1 with a block mask",
                            extras->block_size);
    if (extras->block_mask_per_head != 0 && extras->block_mask_per_head != 1)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "block_mask_per_head must be 0 or 1, not %d",
                            extras->block_mask_per_head);
    f->block_mask = 1;
    /* desc's lengths, the longest with a packed batch: the mask is in each
     * sequence's own coordinates and shared by all sequences. */
    f->mask_block = extras->block_size;
    f->mask_rows = (int)ceil_div((size_t)desc->seqlen_q, (size_t)extras->block_size);
    f->mask_cols = (int)ceil_div((size_t)desc->seqlen_k, (size_t)extras->block_size);
    f->mask_heads = extras->block_mask_per_head ? desc->heads_q : 1;
    const size_t plane = (size_t)f->mask_rows * (size_t)f->mask_cols;
    f->mask_view = (flashcl_tensor){extras->block_mask, extras->block_mask_offset, 0,
                                    extras->block_mask_per_head ? plane : 0, (size_t)f->mask_cols};
    f->mask_shape = (flashcl_shape){1, (size_t)f->mask_heads, (size_t)f->mask_rows, (size_t)f->mask_cols, 1};
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_features_validate_buffers(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                                 const flashcl_attention_desc *shape_desc, const flashcl_features *f,
                                                 const flashcl_call_tensor *tensors, int count) {
    if (!f->block_mask && !f->varlen.on) return FLASHCL_SUCCESS;
    /* The feature buffers the kernels read while the outputs are written. */
    flashcl_extent inputs[3];
    const char *names[3];
    int input_count = 0;
    if (f->block_mask) {
        flashcl_status status =
            flashcl_validate_tensor(ctx, "block_mask", &f->mask_view, &f->mask_shape, 0, &inputs[input_count]);
        if (status != FLASHCL_SUCCESS) return status;
        inputs[input_count].elem_size = 0; /* compared by byte span: uint8, never strided like an output */
        names[input_count++] = "block_mask";
    }
    if (f->varlen.on) {
        /* batch + 1 int32 from the buffer's start (checked by flashcl_varlen_resolve). */
        const size_t bytes = ((size_t)desc->batch + 1) * sizeof(cl_int);
        flashcl_byte_extent(f->varlen.cu_q, 0, bytes, &inputs[input_count]);
        names[input_count++] = "cu_seqlens_q";
        flashcl_byte_extent(f->varlen.cu_k, 0, bytes, &inputs[input_count]);
        names[input_count++] = "cu_seqlens_k";
    }
    /* The outputs' extents as the call validated them: with a packed batch
     * that is (1, heads, total rows), not (batch, heads, longest). */
    flashcl_shape shapes[3];
    flashcl_attention_shapes(shape_desc, &shapes[FLASHCL_SHAPE_Q], &shapes[FLASHCL_SHAPE_KV],
                             &shapes[FLASHCL_SHAPE_LSE]);
    for (int i = 0; i < count; ++i) {
        if (!tensors[i].is_output || !tensors[i].tensor) continue;
        flashcl_extent output;
        /* Already validated by flashcl_validate_call: this only recomputes the extent. */
        flashcl_status status =
            flashcl_validate_tensor(ctx, tensors[i].name, tensors[i].tensor, &shapes[tensors[i].kind], 1, &output);
        for (int j = 0; j < input_count && status == FLASHCL_SUCCESS; ++j)
            status = flashcl_check_no_overlap(ctx, tensors[i].name, &output, names[j], &inputs[j]);
        if (status != FLASHCL_SUCCESS) return status;
    }
    return FLASHCL_SUCCESS;
}

void flashcl_features_options(const flashcl_features *f, char *options, size_t size) {
    size_t used = strlen(options);
    if (f->window && used < size) used += (size_t)snprintf(options + used, size - used, " -DFLASHCL_WINDOW=1");
    if (f->block_mask && used < size) used += (size_t)snprintf(options + used, size - used, " -DFLASHCL_BLOCK_MASK=1");
    if (f->dropout && used < size) used += (size_t)snprintf(options + used, size - used, " -DFLASHCL_DROPOUT=1");
    if (f->varlen.on && used < size) snprintf(options + used, size - used, " -DFLASHCL_VARLEN=1");
}

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

void flashcl_arg_features(flashcl_kernel_args *a, const flashcl_features *f, const flashcl_tile_mask *tiles) {
    if (f->window) {
        flashcl_arg_int(a, f->window_left);
        flashcl_arg_int(a, f->window_right);
    }
    if (f->block_mask) {
        flashcl_arg_mem(a, f->mask_view.buffer);
        flashcl_arg_ulong(a, f->mask_view.offset);
        flashcl_arg_ulong(a, f->mask_view.stride_head);
        flashcl_arg_int(a, f->mask_block);
        flashcl_arg_int(a, f->mask_cols);
        flashcl_arg_mem(a, tiles->tiles);
        flashcl_arg_ulong(a, tiles->stride_head);
        flashcl_arg_int(a, tiles->cols);
    }
    if (f->dropout) {
        cl_uint words[3] = {f->dropout_threshold, 0, 0};
        flashcl_arg(a, sizeof words[0], &words[0]);
        flashcl_arg_float(a, f->dropout_scale);
        words[1] = f->seed_lo;
        words[2] = f->seed_hi;
        flashcl_arg(a, sizeof words[1], &words[1]);
        flashcl_arg(a, sizeof words[2], &words[2]);
        flashcl_arg_ulong(a, f->dropout_offset);
    }
    if (f->varlen.on) {
        flashcl_arg_mem(a, f->varlen.cu_q);
        flashcl_arg_mem(a, f->varlen.cu_k);
        flashcl_arg_int(a, f->varlen.total_q);
    }
}
