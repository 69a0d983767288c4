/* feature_args.c: the features' kernel arguments, in the order of FLASHCL_FEATURE_PARAMS (cl/common.cl). */
#include "call_features.h"

void flashcl_arg_features(flashcl_kernel_args *a, const flashcl_features *f, const flashcl_tile_mask *tiles,
                          cl_mem alibi_slopes) {
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
    flashcl_arg_score_terms(a, f, alibi_slopes);
}

void flashcl_arg_score_terms(flashcl_kernel_args *a, const flashcl_features *f, cl_mem alibi_slopes) {
    flashcl_arg_score_mods(a, f, alibi_slopes);
    if (f->bias) flashcl_arg_tensor(a, &f->bias_view);
}

void flashcl_arg_score_mods(flashcl_kernel_args *a, const flashcl_features *f, cl_mem alibi_slopes) {
    if (f->softcap > 0.0f) flashcl_arg_float(a, f->softcap);
    if (f->alibi) {
        flashcl_arg_mem(a, alibi_slopes);
        flashcl_arg_ulong(a, f->alibi_offset);
        flashcl_arg_ulong(a, f->alibi_stride_b);
    }
}
