/* call_features.h: the optional features of a call (window, block mask, dropout, packed batch, score modifiers): checks,
 * kernel options and arguments. */
#ifndef FLASHCL_CALL_FEATURES_H
#define FLASHCL_CALL_FEATURES_H

#include "kernel_args.h"
#include "validate.h"

/* A packed variable-length batch (extras->cu_seqlens_q/k). */
typedef struct flashcl_varlen {
    int on;
    cl_mem cu_q, cu_k;
    int total_q, total_k;           /* cu_q[batch], cu_k[batch] */
    flashcl_attention_desc packed;  /* desc as one sequence of total rows: the shapes to validate views with */
} flashcl_varlen;

/* Checks extras' cu_seqlens (both or neither, context, size) and their
 * contents: those of the host copies when both are given (nothing waits), else
 * the buffers read back (blocking, after the wait list); run before the
 * tensors are validated. *shape_desc is the desc to validate the
 * tensors against: desc itself, or the packed one. */
flashcl_status flashcl_varlen_resolve(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                      const flashcl_attention_extras *extras, cl_uint num_events,
                                      const cl_event *wait_list, flashcl_varlen *out,
                                      const flashcl_attention_desc **shape_desc);

/* What the kernels of one call need to know about its features. */
typedef struct flashcl_features {
    int window;                    /* compile FLASHCL_WINDOW */
    int window_left, window_right; /* 0 .. seqlen_q + seqlen_k: wider (or unbounded) sides are clamped */
    int causal;                    /* the kernels' causal flag (0 once folded into the window) */
    int block_mask;                /* compile FLASHCL_BLOCK_MASK */
    flashcl_tensor mask_view;      /* the mask as a (1, heads, rows, cols) view of bytes */
    flashcl_shape mask_shape;
    int mask_block, mask_rows, mask_cols, mask_heads;
    int dropout; /* compile FLASHCL_DROPOUT */
    cl_uint dropout_threshold;
    float dropout_scale;
    cl_uint seed_lo, seed_hi;
    cl_ulong dropout_offset;
    flashcl_varlen varlen; /* compile FLASHCL_VARLEN when varlen.on */
    float softcap;         /* > 0: compile FLASHCL_SOFTCAP */
    int alibi;             /* compile FLASHCL_ALIBI; the slopes come from one of: */
    cl_mem alibi_buffer;   /* the caller's device buffer (its offset and stride below), */
    const float *alibi_host; /* the caller's host array (valid during the call), */
    float alibi_max_bias;  /* or llama.cpp's formula */
    size_t alibi_offset;   /* floats; 0 but for the caller's buffer */
    size_t alibi_stride_b; /* floats between batch elements: 0 (shared) or heads_q */
    size_t alibi_count;    /* floats the slopes hold: heads_q, or batch x heads_q */
    int bias;              /* compile FLASHCL_BIAS (extras->bias) */
    int bias_f32;          /* compile FLASHCL_BIAS_F32: a float32 bias beside 16-bit storage */
    flashcl_dtype bias_dtype;
    flashcl_tensor bias_view; /* the caller's, the strides of broadcast (size 1) dimensions 0 */
    flashcl_shape bias_shape; /* (bias_batch, bias_heads, seqlen_q, seqlen_k) elements of bias_dtype */
    flashcl_tensor dbias_view; /* backward: the dBias output; buffer NULL: none (the forward clears it) */
    int dbias_direct;          /* 1: the dQ kernel writes dbias_view itself; 0: scratch, then the reduction */
} flashcl_features;

/* Reads desc (already validated) and extras into f; checks the extras'
 * scalar fields (the mask buffer itself is checked with the call's tensors,
 * see flashcl_features_validate_buffers). desc is the caller's, with a packed
 * batch its longest lengths. */
flashcl_status flashcl_features_resolve(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                        const flashcl_attention_extras *extras, flashcl_features *f);

/* Reads and checks extras' score modifiers (softcap, ALiBi) into f; part of flashcl_features_resolve. */
flashcl_status flashcl_score_mods_resolve(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                          const flashcl_attention_extras *extras, flashcl_features *f);

/* Reads and checks extras' bias and dBias fields into f (feature_bias.c); part of flashcl_features_resolve. */
flashcl_status flashcl_bias_resolve(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                    const flashcl_attention_extras *extras, flashcl_features *f);

/* Bytes of the backward's dS scratch (batch x heads_q x seqlen_q x seqlen_k floats) when dBias is reduced from
 * it; 0 when there is no dBias or the dQ kernel writes it directly. */
size_t flashcl_dbias_scratch_bytes(const flashcl_attention_desc *desc, const flashcl_features *f);

/* The backward's dBias steps around the dQ kernel (feature_bias.c): the buffer the dQ kernel writes dS to
 * (the caller's dBias, or scratch made here) and, after the dQ kernel, the reduction into the caller's dBias. */
typedef struct flashcl_dbias_target {
    cl_mem buffer;                 /* NULL: no dBias (the kernel's write flag 0) */
    flashcl_tensor view;           /* where dS of (b, h, i, j) goes: float elements, key stride 1 */
    cl_mem scratch;                /* owned: released by flashcl_dbias_release */
    cl_kernel reduce;              /* the reduction (cl/bias_reduce.cl), NULL when writing directly */
    size_t reduce_global, reduce_local;
} flashcl_dbias_target;
flashcl_status flashcl_dbias_prepare(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                     const flashcl_features *f, flashcl_dbias_target *t);
void flashcl_dbias_release(flashcl_dbias_target *t);

/* llama.cpp's ALiBi slopes of `heads` heads from max_bias (flashcl.h, alibi_max_bias). */
void flashcl_alibi_slopes_from_max_bias(int heads, float max_bias, float *slopes);

/* The caller's slopes buffer as the checks take it: (batch or 1, 1, 1, heads_q) floats. */
void flashcl_alibi_view(const flashcl_attention_desc *desc, const flashcl_features *f, flashcl_tensor *view,
                        flashcl_shape *shape);

/* The slopes buffer the kernels read, retained (the caller releases it): the caller's buffer, or one holding
 * the host slopes (the context keeps the last one and reuses it while the slopes are the same). NULL without
 * ALiBi. */
flashcl_status flashcl_alibi_acquire(flashcl_context *ctx, const flashcl_features *f, cl_mem *out);

/* Releases the context's buffer of host slopes (context teardown). */
void flashcl_alibi_cache_free(flashcl_context *ctx);

/* One feature as data (the table is in call_features.c). Adding a feature:
 * its fields in flashcl_features and their resolution in
 * flashcl_features_resolve, a row here, its arguments in
 * flashcl_arg_features, and its code in the kernels under its define. */
typedef struct flashcl_feature_def {
    const char *name;                         /* in messages: "sliding window" */
    int (*on)(const flashcl_features *f);     /* whether a call uses it */
    const char *define;                       /* -D<define>=1 for its kernels */
    int split_kv;                             /* 1: the portable forward's split-KV takes it (cl/forward.cl) */
    int tensor_core; /* the tensor-core kernels that take it: FLASHCL_TC_FORWARD (cl/forward_mma.cl) | FLASHCL_TC_BACKWARD
                      * | FLASHCL_TC_WGMMA (cl/forward_wgmma.cl) | FLASHCL_TC_WGMMA_BACKWARD (cl/backward_wgmma.cl) */
} flashcl_feature_def;

/* The table, in the order options and messages use. */
const flashcl_feature_def *flashcl_feature_defs(int *count);

/* 1 if the call uses any feature. */
int flashcl_features_any(const flashcl_features *f);

/* The name of the call's first feature in the table, NULL for a dense call. */
const char *flashcl_features_first(const flashcl_features *f);

/* The tensor-core kernels a feature's flashcl_feature_def.tensor_core names. */
enum { FLASHCL_TC_FORWARD = 1, FLASHCL_TC_BACKWARD = 2, FLASHCL_TC_WGMMA = 4, FLASHCL_TC_WGMMA_BACKWARD = 8 };

/* 1 if the tensor-core kernels of pass take every feature the call uses (a dense call included). */
int flashcl_features_tensor_core(const flashcl_features *f, flashcl_pass pass);
/* 1 if the Hopper kernels of pass take every feature f uses: the forward (cl/forward_wgmma.cl, FLASHCL_TC_WGMMA)
 * or the backward (cl/backward_wgmma.cl, FLASHCL_TC_WGMMA_BACKWARD); a dense call included. */
int flashcl_features_wgmma(const flashcl_features *f, flashcl_pass pass);
/* Bytes of one bias element when the tensor-core forwards stage the bias tile in local memory
 * (FLASHCL_BIAS_STAGED): a bias whose rows start 16-byte aligned (offset and strides multiples of a 16-byte
 * chunk's elements; broadcast strides are 0); else (no bias, or unaligned rows) 0. */
size_t flashcl_bias_staged_bytes(const flashcl_features *f);
/* The tensor-core kernels' feature options: flashcl_features_options, then FLASHCL_BIAS_STAGED where
 * flashcl_bias_staged_bytes says the bias is staged. */
void flashcl_features_tensor_core_options(const flashcl_features *f, char *options, size_t size);

/* 1 if the call uses a feature the portable forward's split-KV does not take. */
int flashcl_features_block_split(const flashcl_features *f);

/* Checks the block mask and ALiBi slopes buffers (context, size) and that none of the call's
 * outputs overlaps them or a variable-length batch's cu_seqlens arrays (which
 * the kernels read while the outputs are written); run after
 * flashcl_validate_call, with desc the caller's and shape_desc the one the
 * tensors were validated against (the packed one of a variable-length
 * batch). No-op without a mask, device slopes or a packed batch. */
flashcl_status flashcl_features_validate_buffers(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                                 const flashcl_attention_desc *shape_desc, const flashcl_features *f,
                                                 const flashcl_call_tensor *tensors, int count);

/* Appends the features' -D options (nothing for a dense call, so the dense
 * kernels build exactly as before). */
void flashcl_features_options(const flashcl_features *f, char *options, size_t size);

/* A block mask summarised over one kernel's tiles (see cl/block_mask.cl). */
typedef struct flashcl_tile_mask {
    cl_mem tiles; /* NULL when the call has no block mask */
    size_t stride_head;
    int cols;
} flashcl_tile_mask;

/* Bytes of scratch the tile summaries of tiles (tile_q x tile_k) take. */
size_t flashcl_tile_mask_bytes(const flashcl_attention_desc *desc, const flashcl_features *f, int tile_q, int tile_k);

/* Enqueues the summary of f's block mask over tiles of tile_q query rows x
 * tile_k key columns, after the wait list; *done is its event. Does nothing
 * (out zeroed, *done NULL) without a block mask. */
flashcl_status flashcl_tile_mask_build(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                       const flashcl_features *f, int tile_q, int tile_k, cl_uint num_events,
                                       const cl_event *wait_list, flashcl_tile_mask *out, cl_event *done);
void flashcl_tile_mask_release(flashcl_tile_mask *t);

/* Sets the features' kernel arguments (FLASHCL_FEATURE_PARAMS of cl/common.cl); alibi_slopes is
 * flashcl_alibi_acquire's buffer. */
void flashcl_arg_features(flashcl_kernel_args *a, const flashcl_features *f, const flashcl_tile_mask *tiles,
                          cl_mem alibi_slopes);

/* The score modifiers' arguments alone (FLASHCL_SCORE_MOD_PARAMS): the head of flashcl_arg_score_terms. */
void flashcl_arg_score_mods(flashcl_kernel_args *a, const flashcl_features *f, cl_mem alibi_slopes);

/* The score modifiers' and the bias's arguments (FLASHCL_SCORE_MOD_PARAMS FLASHCL_BIAS_PARAMS): the tail of
 * flashcl_arg_features, and all the tensor-core kernels (forward, dK/dV, dQ) take. */
void flashcl_arg_score_terms(flashcl_kernel_args *a, const flashcl_features *f, cl_mem alibi_slopes);

/* The dQ kernels' dBias arguments (FLASHCL_DBIAS_PARAMS, after the feature arguments of the portable dQ kernel
 * and the score terms of the tensor-core one; with a bias only): where dS goes and whether. */
void flashcl_arg_dbias(flashcl_kernel_args *a, const flashcl_features *f, const flashcl_dbias_target *t);

/* floor(p * 2^32): an element is kept when its Philox word is at least this. */
cl_uint flashcl_dropout_threshold(float p);

#endif
