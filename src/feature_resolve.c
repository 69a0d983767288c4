/* feature_resolve.c: a call's features read from desc and extras into flashcl_features (the window's sides as the
 * kernels take them, dropout's threshold and seed words, the block mask's view; the score modifiers in
 * feature_score_mods.c, the bias in feature_bias.c), with the checks of the extras' scalar fields. */
#include "call_features.h"

#include <math.h>
#include <stdint.h>
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
    flashcl_status status = flashcl_score_mods_resolve(ctx, desc, extras, f);
    if (status == FLASHCL_SUCCESS) status = flashcl_bias_resolve(ctx, desc, extras, f);
    if (status != FLASHCL_SUCCESS) return status;
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
