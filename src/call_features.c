/* call_features.c: the features of a call (window, block mask, dropout, varlen) as one table, their resolution
 * from desc and extras, their -D options, the checks of their buffers and their kernel arguments. The packed
 * batch's checks are in feature_varlen.c, the block mask's tile summaries in feature_tile_mask.c. */
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

static int window_on(const flashcl_features *f) { return f->window; }
static int block_mask_on(const flashcl_features *f) { return f->block_mask; }
static int dropout_on(const flashcl_features *f) { return f->dropout; }
static int varlen_on(const flashcl_features *f) { return f->varlen.on; }

/* Every feature, once: its name in messages, whether a call uses it, the
 * define its kernels are built with. Which kernel families take features is
 * the dispatcher's decision (today: the portable kernels take all of them);
 * the IO model (io_model.c) counts the window's band, and counts a block
 * mask and a packed batch as dense and padded (their contents live on the
 * device): an upper bound. */
static const flashcl_feature_def feature_table[] = {
    {"sliding window", window_on, "FLASHCL_WINDOW"},
    {"block mask", block_mask_on, "FLASHCL_BLOCK_MASK"},
    {"dropout", dropout_on, "FLASHCL_DROPOUT"},
    {"variable-length batch", varlen_on, "FLASHCL_VARLEN"},
};

const flashcl_feature_def *flashcl_feature_defs(int *count) {
    *count = (int)(sizeof feature_table / sizeof feature_table[0]);
    return feature_table;
}

int flashcl_features_any(const flashcl_features *f) { return flashcl_features_first(f) != NULL; }

const char *flashcl_features_first(const flashcl_features *f) {
    for (size_t i = 0; i < sizeof feature_table / sizeof feature_table[0]; ++i)
        if (feature_table[i].on(f)) return feature_table[i].name;
    return NULL;
}

void flashcl_features_options(const flashcl_features *f, char *options, size_t size) {
    size_t used = strlen(options);
    for (size_t i = 0; i < sizeof feature_table / sizeof feature_table[0] && used < size; ++i)
        if (feature_table[i].on(f))
            used += (size_t)snprintf(options + used, size - used, " -D%s=1", feature_table[i].define);
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
