/* wgmma_plan.c: when the Hopper forward (cl/forward_wgmma.cl) applies, and its tiles. */
#include "wgmma_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "program_sm90a.h"

static int has_sm90a(const flashcl_device_caps *caps) { return flashcl_sm90a_device_refusal(caps) == NULL; }

/* subgroup_width 32 (warps inside the warpgroups), one instruction m64 x n64 x k16 as the smallest the kernel
 * issues (n is the key block or the head dim), no TF32; no scratch; FLASHCL_MMA_PTX 1 (the prelude's
 * mma_nvidia.cl). */
static const flashcl_mma_backend wgmma = {"nvidia-wgmma", FLASHCL_KERNEL_TENSOR_CORE, has_sm90a, 32, 64, 64, 16, 0,
                                          0, 0, 0, 1, "mma_nvidia.cl", NULL};

const flashcl_mma_backend *flashcl_wgmma_backend(void) { return &wgmma; }

const char *const flashcl_wgmma_prelude[5] = {"mma.cl", "mma_nvidia.cl", "mma_operands.cl", "wgmma.cl", NULL};

/* The default tiles by head dim (64, 128) and mask (not causal, causal): warpgroups of 64 query rows sharing each
 * K/V block, keys per step (S's registers, block_n / 2 floats per work-item, beside O's head_dim / 2 and P's
 * block_n / 4), and whether the pipelined kernel runs (WG_PIPELINE: S of block j and O += P V of block j - 1 in
 * flight together). docs/perf.md ("wgmma forward (issue 22)" and after) has the H100's times, f16, N 2048 / 8192:
 * at d64 2 x 128 keys one block at a time 237-240 / 244-245 TFLOP/s (two work-groups, four warpgroups per SM);
 * 2 x 64 one at a time 0.95 / 0.98x, pipelined 0.97-1.03x, 2 x 96 0.70-0.73x, 3 x 64 0.80 / 0.87x, 3 x 128 0.84-0.96x,
 * 4 x 128 1.02-1.11x without causal (rounds 1-4; the dense default since, tiles_for) but 0.96x causal at N 2048, one warpgroup 128-140 TFLOP/s. At d128 3 x 64
 * pipelined 297 / 326 (causal 226 / 299): 1.32-1.35x (causal 1.21-1.31x) the 2 x 64 tiles, which hold one
 * work-group of two warpgroups per SM (149 registers), where 3 x 64 fits three under the 168-register cap of 384
 * work-items; 2 x 128 1.01-1.03x, 2 x 96 0.98-1.00x, and one block at a time 8-14% slower than pipelined. */
typedef struct wgmma_tiles {
    int warpgroups, block_n, pipelined;
} wgmma_tiles;
static const wgmma_tiles defaults[2][2] = {
    {{4, 128, 0}, {2, 128, 0}}, /* head_dim 64 */
    {{3, 64, 1}, {3, 64, 1}},   /* head_dim 128 */
};

/* d64 without causal, dense: 4 x 128 keys (one work-group of four warpgroups, each K/V block shared by 256 rows)
 * won rounds 3 and 4 on the H100 (2026-11-28, f16 and bf16: 1.04-1.06x at N 2048, 1.09-1.11x at 8192; rounds 1-2
 * 1.02-1.11x). d64 with soft-capping or ALiBi (no bias), causal or not: 2 x 64 pipelined, the softmax's extra work
 * of block j - 1 beside block j's S (H100, 2026-11-28, f16, N 2048 / 8192: 1.24-1.36x mma.sync; 4 x 128 one block
 * at a time 1.21-1.30x, 3 x 64 pipelined 1.11-1.34x, 2 x 128 pipelined 1.06-1.11x, 2 x 128 one at a time
 * 0.75-0.95x; docs/perf.md, "d64 forwards with a modifier on the wgmma tile variants"). d64 with a bias too:
 * 2 x 64 pipelined, 1.02-1.05x mma.sync on the H200 with a staged bias (2026-11-28, f16, N 2048 / 8192, shared or
 * full, causal or not; docs/perf.md, "The d64 bias forward on wgmma"), where 2 x 128 one block at a time had tied
 * (0.96-1.00x on the H100) and a staged float32 tile of 256 rows does not fit beside 4 x 128. Once only the blocks
 * that reach an end test the masks, 3 x 64 pipelined beat that 2 x 64 by 1.10-1.24x with a bias (H200, f16, shared
 * and full, causal or not; docs/perf.md, "The d64 forward with a bias after the open blocks"): a third warpgroup
 * shares each K/V block and bias tile (113 KB of local memory with a half bias, 162 KB with a float32 one). */
static wgmma_tiles tiles_for(const flashcl_attention_desc *desc, const flashcl_features *features) {
    if (desc->head_dim == 64 && features->bias) return (wgmma_tiles){3, 64, 1};
    if (desc->head_dim == 64 && flashcl_features_any(features)) return (wgmma_tiles){2, 64, 1};
    return defaults[desc->head_dim == 128][desc->causal != 0];
}

/* Local memory of the kernel's static arrays: the Q tile (64 rows per warpgroup) and two stages of K and V
 * blocks, 16-bit values, plus up to 128 bytes for each of its three arrays' alignment; with a staged bias
 * (bias_element its element's bytes, 0: not staged) two stages of the bias tile, rows of block_n elements padded
 * by one 16-byte chunk (cl/mma_operands.cl BIAS_TILE_ROW), and 16 bytes for that array's alignment. */
static size_t local_bytes(int head_dim, int warpgroups, int block_n, size_t bias_element) {
    const size_t base = (size_t)head_dim * 2 * ((size_t)warpgroups * 64 + 4 * (size_t)block_n) + 3 * 128;
    if (!bias_element) return base;
    const size_t row = ((size_t)block_n * bias_element / 16 + 1) * 16;
    return base + 2 * (size_t)warpgroups * 64 * row + 16;
}

/* Whether the default mode runs a call with features here: where the H100 measured the wgmma forward faster than
 * mma.sync (docs/perf.md, "Score modifiers on the wgmma forward"; f16, N 2048 / 8192, causal or not, main and this
 * kernel in one run). At head_dim 128 every modifier gained with the bias staged: soft-capping 1.19-1.42x, ALiBi
 * 1.21-1.47x, a full bias 1.17-1.33x, a shared one 1.31-1.33x. A bias read pair by pair from global memory (rows
 * not 16-byte aligned) took 2.70 / 10.43 ms at d128 there, where mma.sync's unstaged path took 2.46 / 10.2 in an
 * earlier run: not faster, so it stays on mma.sync. At head_dim 64 soft-capping and ALiBi gained on the pipelined
 * 2 x 64 tiles (tiles_for: 1.24-1.34x and 1.24-1.36x, causal or not), where the 2 x 128 tiles had lost (0.75-0.76x,
 * 0.93-0.95x); a staged bias there gained a little on the same tiles (1.01-1.03x on the H100 in one round,
 * 1.02-1.05x in eight rows on the H200), and more on 3 x 64 once the open blocks skipped the mask tests (tiles_for);
 * an unaligned one (not measured at d64) stays on mma.sync, as at d128.
 * FLASHCL_WGMMA_ON still runs them all here (tests, comparisons). */
static int measured_faster(const flashcl_features *features) {
    return !features->bias || flashcl_bias_staged_bytes(features) != 0;
}

int flashcl_wgmma_applies(const flashcl_device_caps *caps, int mode, flashcl_pass pass,
                          const flashcl_attention_desc *desc, const flashcl_features *features, int views_alignment,
                          flashcl_plan *tiles) {
    if (mode == FLASHCL_WGMMA_OFF || !has_sm90a(caps) || pass != FLASHCL_PASS_FORWARD) return 0;
    if (desc->dtype != FLASHCL_DTYPE_F16 && desc->dtype != FLASHCL_DTYPE_BF16) return 0;
    if (desc->head_dim != 64 && desc->head_dim != 128) return 0;
    if (!flashcl_features_wgmma(features, FLASHCL_PASS_FORWARD)) return 0;
    if (mode == FLASHCL_WGMMA_AUTO && !measured_faster(features)) return 0;
    if (views_alignment % 8 != 0) return 0;
    const wgmma_tiles chosen = tiles_for(desc, features);
    int warpgroups = chosen.warpgroups;
    int block_n = chosen.block_n;
#ifdef FLASHCL_MMA_EXPERIMENT
    const char *forced = getenv("FLASHCL_WGMMA_TILES");
    int fw, fn;
    if (forced && sscanf(forced, "%d,%d", &fw, &fn) == 2 && fw >= 1 && fw <= 4 && fn >= 32 && fn <= 128 &&
        fn % 32 == 0) {
        warpgroups = fw;
        block_n = fn;
    }
#endif
    size_t wg_size = (size_t)warpgroups * 128;
    size_t local = local_bytes(desc->head_dim, warpgroups, block_n, flashcl_bias_staged_bytes(features));
#ifdef FLASHCL_MMA_EXPERIMENT
    /* The warp-specialized first cut (WG_WS in cl/forward_wgmma.cl, not yet run on a GPU): a producer warpgroup
     * beside the consumers and eight mbarriers; not with a staged bias. */
    const char *ws = getenv("FLASHCL_WGMMA_WS");
    if (ws && strcmp(ws, "1") == 0 && flashcl_bias_staged_bytes(features) == 0) {
        wg_size += 128;
        local += 8 * 8;
    }
#endif
    /* The arrays are static: the device's static local memory (0 there: the reported size) bounds them. */
    const size_t capacity = caps->limits.static_local_mem_bytes > caps->limits.local_mem_bytes
                                ? caps->limits.static_local_mem_bytes
                                : caps->limits.local_mem_bytes;
    if (wg_size > caps->limits.max_work_group_size || local > capacity) return 0;
    /* As the mma.sync kernels report theirs: threads_q the warps (16 query rows each), threads_k their width. */
    *tiles = (flashcl_plan){warpgroups * 64, block_n, warpgroups * 4, 32, wg_size, local};
    return 1;
}

void flashcl_wgmma_options(const flashcl_attention_desc *desc, const flashcl_features *features,
                           const flashcl_plan *tiles, char *options, size_t size) {
    /* Only the experiment adds a producer warpgroup beyond the consumers' warps (WG_WS). */
    const int ws = tiles->work_group_size > (size_t)tiles->threads_q * 32;
    int pipelined = tiles_for(desc, features).pipelined, pingpong = 0;
    size_t maxnreg = 0;
#ifdef FLASHCL_MMA_EXPERIMENT
    /* The warp-specialized kernel's register split (WG_WS_REGS: setmaxnreg, which needs the entry's register count
     * in the PTX: -DFLASHCL_ENTRY_MAXNREG, src/ptx_entry.h): the per-thread share of the register file at this
     * work-group size, in steps of 8. FlashAttention-3's pingpong of two consumer warpgroups (WG_WS_PINGPONG) runs
     * them one block at a time each, so it drops the pipelined variant. */
    const char *regs = getenv("FLASHCL_WGMMA_WS_REGS"), *turns = getenv("FLASHCL_WGMMA_WS_PINGPONG");
    if (ws && regs && strcmp(regs, "1") == 0) {
        maxnreg = 65536 / tiles->work_group_size / 8 * 8;
        if (maxnreg > 248) maxnreg = 248;
    }
    if (ws && tiles->threads_q == 8 && turns && strcmp(turns, "1") == 0) {
        pingpong = 1;
        pipelined = 0;
    }
#endif
    snprintf(options, size, "-DFLASHCL_DTYPE=%d -DHEAD_DIM=%d -DBLOCK_N=%d -DWARPGROUPS=%d -DFLASHCL_MMA_PTX=1%s%s%s",
             (int)desc->dtype, desc->head_dim, tiles->block_k, tiles->threads_q / 4,
             pipelined ? " -DWG_PIPELINE=1" : "", ws ? " -DWG_WS=1" : "", pingpong ? " -DWG_WS_PINGPONG=1" : "");
    if (maxnreg) {
        const size_t used = strlen(options);
        snprintf(options + used, size - used, " -DWG_WS_REGS=1 -DFLASHCL_ENTRY_MAXNREG=%zu", maxnreg);
    }
    /* Dense calls add nothing: their options, and so their programs, stay as they were. */
    flashcl_features_tensor_core_options(features, options, size);
}
