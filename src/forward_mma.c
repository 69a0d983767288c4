/* forward_mma.c: when a forward call runs on the tensor-core kernel (cl/forward_mma.cl), its tiles and its launch. */
#include <stdio.h>
#include <stdlib.h>

#include "kernel_args.h"

/* Query rows per warp and the work-group size the kernel aims for (4 warps,
 * FlashAttention-2's forward layout). */
#define ROWS_PER_WARP 16
#define TARGET_WARPS 4
#define MAX_MMA_HEAD_DIM 128
/* Mesa's llvmpipe (rusticl) ends every loop of a kernel, silently, once a
 * work-item's loops have iterated 65535 times in all (gallivm's
 * LP_MAX_TGSI_LOOP_ITERATIONS). The emulated kernel's loops around its
 * emulated instructions stay rolled (cl/forward_mma.cl, UNROLL), and its
 * tiles on llvmpipe's 32 KiB give every block about 64 of them: the sum
 * came out truncated after 62 key blocks (f32, head_dim 128, 16-key
 * blocks). Past this many blocks, with room to spare, an emulated call on
 * llvmpipe runs the portable kernel instead. */
#define LLVMPIPE_EMULATED_MAX_KEY_BLOCKS 32

/* Values of dtype per 32-bit fragment register of the kernel: two 16-bit
 * values, or one float (3xTF32). */
static int values_per_word(flashcl_dtype dtype) { return dtype == FLASHCL_DTYPE_F32 ? 1 : 2; }

/* The kernels' 16-byte K/V loads and 32/64-bit Q/O accesses need every row
 * start at a multiple of 16 bytes (8 half values, 4 floats). */
int flashcl_mma_aligned(const flashcl_tensor *t, flashcl_dtype dtype) {
    const size_t values = 4 * (size_t)values_per_word(dtype);
    return (t->offset | t->stride_batch | t->stride_head | t->stride_seq) % values == 0;
}

/* Local memory of cl/forward_mma.cl: a K and a V block in rows of
 * head_dim / values_per_word + 4 words, and the emulation's scratch
 * (SCRATCH_WORDS per warp, and the quad exchange). */
static size_t mma_local_bytes(int head_dim, flashcl_dtype dtype, int warps, int block_k, int emulated) {
    size_t words = 2 * (size_t)block_k * (size_t)(head_dim / values_per_word(dtype) + 4);
    /* Per warp: the emulated operands (twice the words for 3xTF32's two parts) and 32 exchange floats. */
    if (emulated) words += (size_t)warps * ((dtype == FLASHCL_DTYPE_F32 ? 384 : 192) + 32);
    return words * 4;
}

/* 16-row tiles per warp of the kernel behind a plan. */
static int plan_row_tiles(const flashcl_plan *plan) { return plan->block_q / (ROWS_PER_WARP * plan->threads_q); }

/* The tiles for head_dim on ctx's device: 0 if none fits. The plan's
 * threads_q is the warp count, threads_k the warp width. */
static int choose_mma_tiles(const flashcl_context *ctx, int head_dim, flashcl_dtype dtype, int emulated,
                            flashcl_plan *plan) {
#ifdef FLASHCL_MMA_EXPERIMENT
    const char *forced = getenv("FLASHCL_MMA_TILES");
    int bq, bk, m;
    if (forced && sscanf(forced, "%d,%d,%d", &bq, &bk, &m) == 3) {
        const int w = bq / (16 * m);
        *plan = (flashcl_plan){bq, bk, w, 32, (size_t)w * 32, mma_local_bytes(head_dim, dtype, w, bk, emulated)};
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
     * (docs/perf.md); smaller local memories get narrower blocks. Float
     * (3xTF32) holds its Q fragments as floats and splits each operand in
     * registers: block_k x head_dim <= 2048 there (d64: 32, d128: 16) timed
     * 7-10% faster than the widest blocks that fit, which spilled. */
    const int max_block_area = dtype == FLASHCL_DTYPE_F32 ? 2048 : 8192;
    static const int key_blocks[] = {128, 64, 32, 16};
    for (size_t i = 0; i < sizeof key_blocks / sizeof key_blocks[0]; ++i) {
        if (key_blocks[i] * head_dim > max_block_area && key_blocks[i] > 16) continue;
        const size_t local = mma_local_bytes(head_dim, dtype, warps, key_blocks[i], emulated);
        if (local <= ctx->limits.local_mem_bytes) {
            *plan = (flashcl_plan){warps * ROWS_PER_WARP, key_blocks[i], warps, 32, (size_t)warps * 32, local};
            return 1;
        }
    }
    return 0;
}

int flashcl_mma_call_mode(const flashcl_context *ctx, const flashcl_attention_desc *desc, int any_feature,
                          flashcl_pass pass) {
    int mode;
    if (ctx->tensor_cores == FLASHCL_TENSOR_CORES_EMULATE)
        mode = 2;
    else if (ctx->tensor_cores == FLASHCL_TENSOR_CORES_AUTO && ctx->has_ptx_mma)
        mode = 1;
    else
        return 0;
    /* A forced plan for the pass names portable tiles: the caller asked for that kernel. */
    if (ctx->impl != FLASHCL_IMPL_FLASH || ctx->forced_plan_set[pass] || any_feature) return 0;
    /* fp32 runs in 3xTF32, slightly short of float's precision: only on request. */
    if (desc->dtype == FLASHCL_DTYPE_F32 && ctx->f32_precision != FLASHCL_F32_3XTF32) return 0;
    if (desc->head_dim % 16 != 0 || desc->head_dim > MAX_MMA_HEAD_DIM) return 0;
    return mode;
}

int flashcl_forward_mma_mode(const flashcl_context *ctx, const flashcl_attention_desc *desc, int any_feature,
                             const flashcl_tensor *q, const flashcl_tensor *k, const flashcl_tensor *v,
                             const flashcl_tensor *o, flashcl_plan *plan) {
    const int mode = flashcl_mma_call_mode(ctx, desc, any_feature, FLASHCL_PASS_FORWARD);
    if (!mode) return 0;
    const flashcl_dtype dtype = desc->dtype;
    if (!flashcl_mma_aligned(q, dtype) || !flashcl_mma_aligned(k, dtype) || !flashcl_mma_aligned(v, dtype) ||
        !flashcl_mma_aligned(o, dtype))
        return 0;
    if (!choose_mma_tiles(ctx, desc->head_dim, dtype, mode == 2, plan)) return 0;
    const size_t key_blocks = ((size_t)desc->seqlen_k + (size_t)plan->block_k - 1) / (size_t)plan->block_k;
    if (mode == 2 && ctx->loop_limited && key_blocks > LLVMPIPE_EMULATED_MAX_KEY_BLOCKS) return 0;
    return mode;
}

flashcl_status flashcl_forward_mma(flashcl_context *ctx, int mode, const flashcl_plan *tiles,
                                   const flashcl_attention_desc *desc,
                                   const flashcl_tensor *q, const flashcl_tensor *k, const flashcl_tensor *v,
                                   const flashcl_tensor *o, const flashcl_tensor *lse, cl_uint num_events,
                                   const cl_event *wait_list, cl_event *event) {
    const flashcl_plan plan = *tiles;
    char options[224];
    /* TF32_SMALL_ROUNDED=0: the 3xTF32 small parts go to the matrix unit
     * unrounded (it truncates them): fewer ALU operations (cl/mma.cl). */
    snprintf(options, sizeof options,
             "-DFLASHCL_DTYPE=%d -DHEAD_DIM=%d -DBLOCK_Q=%d -DBLOCK_K=%d -DM_TILES=%d -DFLASHCL_MMA_PTX=%d "
             "-DTF32_SMALL_ROUNDED=0",
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
