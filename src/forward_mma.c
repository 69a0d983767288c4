/* forward_mma.c: when a forward call runs on the tensor-core kernel (cl/forward_mma.cl), its tiles and its launch. */
#include <stdio.h>
#include <stdlib.h>

#include "kernel_args.h"

/* Query rows per warp and the work-group size the kernel aims for (4 warps,
 * FlashAttention-2's forward layout). */
#define ROWS_PER_WARP 16
#define TARGET_WARPS 4
#define MAX_MMA_HEAD_DIM 128

/* The kernel's 16-byte K/V loads and 32-bit Q/O accesses need every row
 * start at a multiple of 8 elements. */
static int aligned_for_mma(const flashcl_tensor *t) {
    return (t->offset | t->stride_batch | t->stride_head | t->stride_seq) % 8 == 0;
}

/* Local memory of cl/forward_mma.cl: a K and a V block in rows of
 * head_dim/2 + 4 words, and the emulation's scratch. */
static size_t mma_local_bytes(int head_dim, int warps, int block_k, int emulated) {
    size_t words = 2 * (size_t)block_k * (size_t)(head_dim / 2 + 4);
    if (emulated) words += (size_t)warps * (192 + 32);
    return words * 4;
}

/* 16-row tiles per warp of the kernel behind a plan. */
static int plan_row_tiles(const flashcl_plan *plan) { return plan->block_q / (ROWS_PER_WARP * plan->threads_q); }

/* The tiles for head_dim on ctx's device: 0 if none fits. The plan's
 * threads_q is the warp count, threads_k the warp width. */
static int choose_mma_tiles(const flashcl_context *ctx, int head_dim, int emulated, flashcl_plan *plan) {
#ifdef FLASHCL_MMA_EXPERIMENT
    const char *forced = getenv("FLASHCL_MMA_TILES");
    int bq, bk, m;
    if (forced && sscanf(forced, "%d,%d,%d", &bq, &bk, &m) == 3) {
        const int w = bq / (16 * m);
        *plan = (flashcl_plan){bq, bk, w, 32, (size_t)w * 32, mma_local_bytes(head_dim, w, bk, emulated)};
        return 1;
    }
#endif
    int warps = TARGET_WARPS;
    while (warps > 0 && (size_t)warps * 32 > ctx->limits.max_work_group_size) warps /= 2;
    if (warps == 0) return 0;
    /* The widest key block whose scores (block_k / 2 floats per work-item)
     * leave registers for the head_dim / 2 accumulators and the head_dim / 4
     * Q fragments: block_k x head_dim <= 8192 kept ptxas from spilling on
     * the H100 (sm_90, 255 registers), where these widths also timed best
     * (docs/perf.md); smaller local memories get narrower blocks. */
    static const int key_blocks[] = {128, 64, 32, 16};
    for (size_t i = 0; i < sizeof key_blocks / sizeof key_blocks[0]; ++i) {
        if (key_blocks[i] * head_dim > 8192 && key_blocks[i] > 16) continue;
        const size_t local = mma_local_bytes(head_dim, warps, key_blocks[i], emulated);
        if (local <= ctx->limits.local_mem_bytes) {
            *plan = (flashcl_plan){warps * ROWS_PER_WARP, key_blocks[i], warps, 32, (size_t)warps * 32, local};
            return 1;
        }
    }
    return 0;
}

int flashcl_forward_mma_mode(const flashcl_context *ctx, const flashcl_attention_desc *desc, int any_feature,
                             const flashcl_tensor *q, const flashcl_tensor *k, const flashcl_tensor *v,
                             const flashcl_tensor *o, flashcl_plan *plan) {
    int mode;
    if (ctx->tensor_cores == FLASHCL_TENSOR_CORES_EMULATE)
        mode = 2;
    else if (ctx->tensor_cores == FLASHCL_TENSOR_CORES_AUTO && ctx->has_ptx_mma)
        mode = 1;
    else
        return 0;
    /* A forced forward plan names portable tiles: the caller asked for that kernel. */
    if (ctx->impl != FLASHCL_IMPL_FLASH || ctx->forced_plan_set[FLASHCL_PASS_FORWARD] || any_feature) return 0;
    if (desc->dtype != FLASHCL_DTYPE_F16 && desc->dtype != FLASHCL_DTYPE_BF16) return 0;
    if (desc->head_dim % 16 != 0 || desc->head_dim > MAX_MMA_HEAD_DIM) return 0;
    if (!aligned_for_mma(q) || !aligned_for_mma(k) || !aligned_for_mma(v) || !aligned_for_mma(o)) return 0;
    if (!choose_mma_tiles(ctx, desc->head_dim, mode == 2, plan)) return 0;
    return mode;
}

flashcl_status flashcl_forward_mma(flashcl_context *ctx, int mode, const flashcl_plan *tiles,
                                   const flashcl_attention_desc *desc,
                                   const flashcl_tensor *q, const flashcl_tensor *k, const flashcl_tensor *v,
                                   const flashcl_tensor *o, const flashcl_tensor *lse, cl_uint num_events,
                                   const cl_event *wait_list, cl_event *event) {
    const flashcl_plan plan = *tiles;
    char options[192];
    snprintf(options, sizeof options, "-DFLASHCL_DTYPE=%d -DHEAD_DIM=%d -DBLOCK_Q=%d -DBLOCK_K=%d -DM_TILES=%d -DFLASHCL_MMA_PTX=%d",
             (int)desc->dtype, desc->head_dim, plan.block_q, plan.block_k, plan_row_tiles(&plan), mode == 1);
    cl_kernel kernel;
    flashcl_status status = flashcl_get_kernel(ctx, "forward_mma.cl", "flashcl_forward_mma", options, &kernel);
    if (status != FLASHCL_SUCCESS) return status;

    flashcl_kernel_args args = {kernel, 0, CL_SUCCESS};
    flashcl_arg_forward_dense(&args, desc, q, k, v, o, lse, desc->causal);
    if (args.error != CL_SUCCESS) return flashcl_fail_cl(ctx, args.error, "clSetKernelArg (tensor-core forward)");

    const size_t query_blocks = ((size_t)desc->seqlen_q + (size_t)plan.block_q - 1) / (size_t)plan.block_q;
    const size_t global[2] = {query_blocks * plan.work_group_size, (size_t)desc->batch * (size_t)desc->heads_q};
    const size_t local[2] = {plan.work_group_size, 1};
    cl_int err = clEnqueueNDRangeKernel(ctx->queue, kernel, 2, NULL, global, local, num_events, wait_list, event);
    if (err != CL_SUCCESS) return flashcl_fail_cl(ctx, err, "clEnqueueNDRangeKernel (tensor-core forward)");
    flashcl_record_stats(ctx, FLASHCL_IMPL_FLASH, FLASHCL_PASS_FORWARD, desc, &plan, 0);
    ctx->last_stats.tensor_cores = mode;
    return FLASHCL_SUCCESS;
}
