/* dispatch.h: the one place that decides what a call runs. A pure function from (device caps, context settings,
 * problem) to an execution plan: kernel family, tiles, program, build options, grid, scratch and IO-model bytes.
 * The enqueue paths launch what it says and every query reports it. */
#ifndef FLASHCL_DISPATCH_H
#define FLASHCL_DISPATCH_H

#include "call_features.h"
#include "device_caps.h"
#include "mma_backends.h"

/* A context's choices that bear on what runs. */
typedef struct flashcl_settings {
    flashcl_impl impl;
    flashcl_tensor_cores tensor_cores;
    flashcl_f32_precision f32_precision;
    int forced_plan_set;       /* for the problem's pass */
    flashcl_plan forced_plan;
    size_t memory_budget;      /* 0: none */
    int kv_splits;             /* split-KV forward: 0 automatic, 1 never, n: n splits where it applies */
    int decode_off;            /* 1: few-row forwards run the tiled kernels, not cl/decode.cl */
    /* When forwards run the Hopper kernel (wgmma_plan.h, FLASHCL_WGMMA_*): 0 never (the mma.sync kernels). */
    int wgmma;
} flashcl_settings;

/* One call as the dispatcher sees it. */
typedef struct flashcl_problem {
    flashcl_pass pass;
    const flashcl_attention_desc *desc; /* the caller's (a packed batch's longest lengths) */
    const flashcl_features *features;   /* resolved (call_features.h) */
    /* The largest of 8, 4, 2, 1 elements dividing the offset and strides of
     * every tensor view of the call, and of K and V alone (flashcl_views_alignment). */
    int views_alignment, kv_alignment;
    /* flashcl_forward_kv_cache: 0 none, 1 a contiguous cache, 2 a paged one
     * (the decode kernel, whatever seqlen_q; desc->seqlen_k the most keys a
     * sequence may have); kv_append: new rows are written first. */
    int kv_cache, kv_append;
} flashcl_problem;

/* Kernels of one plan: the forward has one, the backward three (D =
 * rowsum(dO * O), then dK/dV and dQ, which both read D). */
enum { FLASHCL_KERNEL_MAIN = 0, FLASHCL_KERNEL_DELTA = 0, FLASHCL_KERNEL_DKDV = 1, FLASHCL_KERNEL_DQ = 2 };
/* A split-KV forward's second kernel: the combine (cl/split_combine.cl); a
 * KV-cache call's append (cl/kv_append.cl), enqueued before the main one. */
enum { FLASHCL_KERNEL_COMBINE = 1, FLASHCL_KERNEL_APPEND = 2 };

typedef struct flashcl_exec_plan {
    flashcl_impl impl;
    flashcl_pass pass;
    flashcl_kernel_kind kind;
    const flashcl_mma_backend *backend; /* NULL for the portable and standard kernels */
    /* 1: the main program is an sm_90a one (flashcl_get_sm90a_kernel; the wgmma forward, or the backward whose
     * dK/dV kernel runs on wgmma), which may turn out unavailable at build time: the caller then plans again
     * without it (call_plan.c). */
    int sm90a;
    flashcl_plan tiles;
    /* The wgmma backward's dQ kernel (cl/backward_wgmma.cl, or cl/backward_mma.cl's mma.sync one): its tiles,
     * which set its grid; tiles are the dK/dV kernel's. Unused elsewhere. */
    flashcl_plan dq_tiles;
    const char *program;                /* cl/ file of the kernels; NULL for the standard impl */
    /* A kernel built from a program of its own (the backward's delta, the
     * split-KV combine): its cl/ file, built with aux_options after
     * common.cl alone; NULL: the main program. */
    const char *kernel_programs[3];
    char aux_options[96];
    char append_options[64]; /* the append kernel's (its program's own) */
    /* The cl/ files placed between common.cl and the program (the
     * tensor-core kernels' mma.cl, backend file, mma_operands.cl; the
     * decode kernels' decode_common.cl); NULL-terminated. */
    const char *prelude[6];
    int kernel_count;
    const char *kernel_names[3];
    char options[FLASHCL_BUILD_OPTIONS_CAPACITY];
    cl_uint work_dims[3];
    size_t global[3][3], local[3][3];
    /* The portable kernels take the features' arguments (cl/common.cl
     * FLASHCL_FEATURE_PARAMS) and the portable dK/dV kernel heads_kv. */
    int portable_args;
    /* Split-KV forward: the key axis in kv_splits chunks of split_keys keys
     * (1: not split); the partials (float O, row maximum and sum per split
     * and row) in scratch, then the combine kernel. */
    int kv_splits, split_keys;
    size_t split_rows; /* batch x heads x seqlen_q */
    size_t delta_rows; /* backward: floats of D */
    int delta_seqlen;  /* backward: the rows per head the delta kernel sees (a packed batch's total) */
    /* Block-mask tile summaries (tile_q x tile_k) the tiled kernels read:
     * the forward's [0], the backward's dK/dV [0] and dQ [1]; 0 x 0 none. */
    int mask_tiles[2][2];
    size_t extra_device_bytes;
    double predicted_global_bytes;
} flashcl_exec_plan;

/* The plan for problem on caps' device under settings. On failure the
 * status (FLASHCL_ERROR_PLAN, _OUT_OF_DEVICE_MEMORY, _UNSUPPORTED) and a
 * message in reason. */
flashcl_status flashcl_dispatch(const flashcl_device_caps *caps, const flashcl_settings *settings,
                                const flashcl_problem *problem, flashcl_exec_plan *plan, char *reason,
                                size_t reason_size);

/* The largest of 8, 4, 2, 1 dividing every view's offset and strides (NULL views skipped). */
int flashcl_views_alignment(const flashcl_tensor *const *views, int count);

/* The public record of a plan. */
void flashcl_exec_plan_report(const flashcl_exec_plan *plan, flashcl_call_stats *stats);

#endif
