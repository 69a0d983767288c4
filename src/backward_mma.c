/* backward_mma.c: when a backward call runs on the tensor-core kernels (cl/backward_mma.cl), their tiles and launch. */
#include <stdio.h>
#include <stdlib.h>

#include "kernel_args.h"

/* Warps per work-group (each owns 16 keys in dK/dV, 16 queries in dQ). */
#define TARGET_WARPS 4
/* Mesa's llvmpipe ends a kernel's loops silently after 65535 iterations in
 * all per work-item (forward_mma.c). The forward's emulation was measured
 * to truncate after about 62 blocks of 64 emulated 3xTF32 products (~4000
 * products, its own loops included), and it stops at 32 blocks (2048). The
 * backward kernels get the same budget of emulated products per work-item:
 * calls whose dK/dV or dQ work-groups would exceed it run the portable
 * kernels there. */
#define LLVMPIPE_EMULATED_MAX_PRODUCTS 2048

static int values_per_word(flashcl_dtype dtype) { return dtype == FLASHCL_DTYPE_F32 ? 1 : 2; }

/* Local memory of either tiled kernel: two blocks of `step` rows (Q and dO,
 * or K and V) in rows of head_dim / values_per_word + 4 words, the dK/dV
 * kernel's LSE and D of its query block, and the emulation's scratch. */
static size_t mma_backward_local_bytes(int head_dim, flashcl_dtype dtype, int warps, int step, int emulated) {
    size_t words = 2 * (size_t)step * (size_t)(head_dim / values_per_word(dtype) + 4) + 2 * (size_t)step;
    if (emulated) words += (size_t)warps * (dtype == FLASHCL_DTYPE_F32 ? 384 : 192);
    return words * 4;
}

/* The plan of the tensor-core backward: block_k = 16 * warps resident rows
 * (keys in dK/dV, queries in dQ), block_q = rows streamed per step (queries
 * in dK/dV, keys in dQ), threads_q = warps, threads_k = 32. 0 if none fits. */
static int choose_tiles(const flashcl_context *ctx, int head_dim, flashcl_dtype dtype, int emulated,
                        flashcl_plan *plan) {
    int warps = TARGET_WARPS;
#ifdef FLASHCL_MMA_EXPERIMENT
    const char *forced = getenv("FLASHCL_MMA_BACKWARD_TILES");
    int forced_warps, forced_step;
    if (forced && sscanf(forced, "%d,%d", &forced_warps, &forced_step) == 2) {
        *plan = (flashcl_plan){forced_step, 16 * forced_warps, forced_warps, 32, (size_t)forced_warps * 32,
                               mma_backward_local_bytes(head_dim, dtype, forced_warps, forced_step, emulated)};
        return 1;
    }
#endif
    while (warps > 0 && (size_t)warps * 32 > ctx->limits.max_work_group_size) warps /= 2;
    if (warps == 0) return 0;
    /* Streamed rows per step: each warp holds its K and V (or Q and dO)
     * fragments, two head_dim-wide accumulators (dK and dV, or dQ) and two
     * score tiles of step / 2 floats per work-item. On the H100 (4 warps,
     * fwd+bwd at N=4096, docs/perf.md) 32 timed best for 16-bit storage at
     * d64 and d128 (64 and 16 were up to 4% and 10% slower; 2 and 8 warps
     * also slower); float, whose fragments take twice the registers, timed
     * best at step x head_dim = 2048 (d64: 32, d128: 16). Smaller local
     * memories get shorter steps. */
    const int max_step = dtype == FLASHCL_DTYPE_F32 ? 2048 / head_dim : 32;
    static const int steps[] = {64, 32, 16};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; ++i) {
        if (steps[i] > max_step && steps[i] > 16) continue;
        const size_t local = mma_backward_local_bytes(head_dim, dtype, warps, steps[i], emulated);
        if (local <= ctx->limits.local_mem_bytes) {
            *plan = (flashcl_plan){steps[i], 16 * warps, warps, 32, (size_t)warps * 32, local};
            return 1;
        }
    }
    return 0;
}

int flashcl_backward_mma_mode(const flashcl_context *ctx, const flashcl_attention_desc *desc, int any_feature,
                              const flashcl_tensor *const tensors[7], flashcl_plan *plan) {
    const int mode = flashcl_mma_call_mode(ctx, desc, any_feature, FLASHCL_PASS_BACKWARD);
    if (!mode) return 0;
    const flashcl_dtype dtype = desc->dtype;
    for (int i = 0; i < 7; ++i)
        if (!flashcl_mma_aligned(tensors[i], dtype)) return 0;
    if (!choose_tiles(ctx, desc->head_dim, dtype, mode == 2, plan)) return 0;
    if (mode == 2 && ctx->loop_limited) {
        /* Emulated products per streamed block: dK/dV's S^T, dP^T (head_dim /
         * mma_k steps over step / 8 tiles each) and dV, dK (step / mma_k
         * steps over head_dim / 8 tiles each); dQ has one product of the
         * second kind. */
        const size_t mma_k = dtype == FLASHCL_DTYPE_F32 ? 8 : 16, step = (size_t)plan->block_q;
        const size_t d = (size_t)desc->head_dim;
        const size_t scores = 2 * (d / mma_k) * (step / 8), sums = (step / mma_k) * (d / 8);
        const size_t group = (size_t)(desc->heads_q / desc->heads_kv);
        const size_t q_steps = group * (((size_t)desc->seqlen_q + step - 1) / step);
        const size_t k_steps = ((size_t)desc->seqlen_k + step - 1) / step;
        if (q_steps * (scores + 2 * sums) > LLVMPIPE_EMULATED_MAX_PRODUCTS ||
            k_steps * (scores + sums) > LLVMPIPE_EMULATED_MAX_PRODUCTS)
            return 0;
    }
    return mode;
}

flashcl_status flashcl_backward_mma(flashcl_context *ctx, int mode, const flashcl_plan *tiles,
                                    const flashcl_attention_desc *desc, const flashcl_tensor *q,
                                    const flashcl_tensor *k, const flashcl_tensor *v, const flashcl_tensor *o,
                                    const flashcl_tensor *lse, const flashcl_tensor *dout, const flashcl_tensor *dq,
                                    const flashcl_tensor *dk, const flashcl_tensor *dv, cl_uint num_events,
                                    const cl_event *wait_list, cl_event *event) {
    const flashcl_plan plan = *tiles;
    /* The only scratch: D = rowsum(dO * O), one float per query row. */
    const size_t rows = (size_t)desc->batch * (size_t)desc->heads_q * (size_t)desc->seqlen_q;
    const size_t scratch_bytes = rows * sizeof(float);
    if (ctx->memory_budget != 0 && scratch_bytes > ctx->memory_budget)
        return flashcl_fail(ctx, FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY,
                            "the backward pass needs %zu bytes of scratch, the memory budget is %zu", scratch_bytes,
                            ctx->memory_budget);
    char options[192];
    snprintf(options, sizeof options,
             "-DFLASHCL_DTYPE=%d -DHEAD_DIM=%d -DWARPS=%d -DBLOCK_Q=%d -DBLOCK_K=%d -DFLASHCL_MMA_PTX=%d",
             (int)desc->dtype, desc->head_dim, plan.threads_q, plan.block_q, plan.block_q, mode == 1);
    flashcl_backward_kernels kernels;
    flashcl_status status;
    if ((status = flashcl_get_kernel(ctx, "backward_mma.cl", "flashcl_backward_mma_delta", options, &kernels.delta)) ||
        (status = flashcl_get_kernel(ctx, "backward_mma.cl", "flashcl_backward_mma_dkdv", options, &kernels.dkdv)) ||
        (status = flashcl_get_kernel(ctx, "backward_mma.cl", "flashcl_backward_mma_dq", options, &kernels.dq)))
        return status;

    cl_int err;
    cl_mem delta = clCreateBuffer(ctx->context, CL_MEM_READ_WRITE, rows * sizeof(float), NULL, &err);
    if (err != CL_SUCCESS) return flashcl_fail_cl(ctx, err, "clCreateBuffer (backward scratch)");
    const int group_size = desc->heads_q / desc->heads_kv;
    const float scale = flashcl_effective_scale(desc);

    flashcl_kernel_args a = {kernels.delta, 0, CL_SUCCESS};
    flashcl_arg_tensor(&a, o);
    flashcl_arg_tensor(&a, dout);
    flashcl_arg_mem(&a, delta);
    flashcl_arg_int(&a, desc->heads_q);
    flashcl_arg_int(&a, desc->seqlen_q);
    flashcl_arg_ulong(&a, rows);
    cl_int args_error = a.error;
    const cl_kernel tiled[2] = {kernels.dkdv, kernels.dq};
    for (int i = 0; i < 2; ++i) {
        a = (flashcl_kernel_args){tiled[i], 0, CL_SUCCESS};
        flashcl_arg_tensor(&a, q);
        flashcl_arg_tensor(&a, k);
        flashcl_arg_tensor(&a, v);
        flashcl_arg_tensor(&a, dout);
        flashcl_arg_tensor(&a, lse);
        flashcl_arg_mem(&a, delta);
        if (i == 0) {
            flashcl_arg_tensor(&a, dk);
            flashcl_arg_tensor(&a, dv);
        } else {
            flashcl_arg_tensor(&a, dq);
        }
        flashcl_arg_int(&a, desc->heads_q);
        flashcl_arg_int(&a, group_size);
        flashcl_arg_int(&a, desc->seqlen_q);
        flashcl_arg_int(&a, desc->seqlen_k);
        flashcl_arg_float(&a, scale);
        flashcl_arg_int(&a, desc->causal);
        if (args_error == CL_SUCCESS) args_error = a.error;
    }
    if (args_error != CL_SUCCESS) {
        status = flashcl_fail_cl(ctx, args_error, "clSetKernelArg (tensor-core backward)");
    } else {
        size_t delta_local[1] = {64};
        if (delta_local[0] > ctx->limits.max_work_group_size) delta_local[0] = ctx->limits.max_work_group_size;
        const size_t delta_global[1] = {(rows + delta_local[0] - 1) / delta_local[0] * delta_local[0]};
        const size_t own = (size_t)plan.block_k, wg = plan.work_group_size;
        const size_t dkdv_global[2] = {((size_t)desc->seqlen_k + own - 1) / own * wg,
                                       (size_t)desc->batch * (size_t)desc->heads_kv};
        const size_t dq_global[2] = {((size_t)desc->seqlen_q + own - 1) / own * wg,
                                     (size_t)desc->batch * (size_t)desc->heads_q};
        status = flashcl_backward_enqueue(ctx, &kernels, delta_global, delta_local, dkdv_global, dq_global, wg,
                                          num_events, wait_list, event);
    }
    if (status == FLASHCL_SUCCESS) {
        flashcl_record_stats(ctx, FLASHCL_IMPL_FLASH, FLASHCL_PASS_BACKWARD, desc, &plan, scratch_bytes);
        ctx->last_stats.tensor_cores = mode;
    }
    /* The kernels keep the buffer alive until they finish. */
    clReleaseMemObject(delta);
    return status;
}
