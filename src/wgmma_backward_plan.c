/* wgmma_backward_plan.c: when the Hopper backward (cl/backward_wgmma.cl's dK/dV kernel on wgmma, beside
 * cl/backward_mma.cl's dQ kernel on mma.sync in one sm_90a program) applies, and its tiles and options. */
#include "wgmma_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "program_sm90a.h"

/* backward_mma.cl comes before backward_wgmma.cl: its dQ kernel and its lse_log2 are the program's too. */
const char *const flashcl_wgmma_backward_prelude[6] = {"mma.cl",   "mma_nvidia.cl",   "mma_operands.cl",
                                                       "wgmma.cl", "backward_mma.cl", NULL};

/* The dK/dV kernel's tiles by head dim (64, 128): warpgroups of 64 keys per work-group (each Q and dO step is
 * shared by them) and queries per step (S^T's and dP^T's registers, block_q / 2 floats each per work-item, beside
 * dK's and dV's head_dim / 2 each). */
typedef struct wgmma_bwd_tiles {
    int warpgroups, block_q;
} wgmma_bwd_tiles;
static const wgmma_bwd_tiles bwd_defaults[2] = {{2, 64}, {2, 32}};

/* Static local memory: K and V of the work-group's keys, two stages of Q and dO, 16-bit values; two stages of LSE
 * and D floats; 128 bytes of alignment for each of the four tile arrays. */
static size_t bwd_local_bytes(int head_dim, int warpgroups, int block_q) {
    return (size_t)head_dim * 2 * (2 * 64 * (size_t)warpgroups + 4 * (size_t)block_q) + 4 * 2 * 2 * (size_t)block_q +
           4 * 128;
}

/* Where the default mode runs it: nowhere until the H100 has measured it faster than the mma.sync backward
 * (docs/perf.md, "wgmma backward (issue 22)"); FLASHCL_WGMMA_ON runs it wherever it applies. */
static int bwd_measured_faster(const flashcl_attention_desc *desc) {
    (void)desc;
    return 0;
}

int flashcl_wgmma_backward_applies(const flashcl_device_caps *caps, int mode, const flashcl_attention_desc *desc,
                                   const flashcl_features *features, int views_alignment, flashcl_plan *tiles) {
    if (mode == FLASHCL_WGMMA_OFF || flashcl_sm90a_device_refusal(caps) != NULL) return 0;
    if (desc->dtype != FLASHCL_DTYPE_F16 && desc->dtype != FLASHCL_DTYPE_BF16) return 0;
    if (desc->head_dim != 64 && desc->head_dim != 128) return 0;
    /* Dense calls only (causal is not a feature): the kernel has no score modifier, bias or mask. */
    if (flashcl_features_any(features)) return 0;
    if (mode == FLASHCL_WGMMA_AUTO && !bwd_measured_faster(desc)) return 0;
    /* cp.async copies 16-byte chunks of every row. */
    if (views_alignment % 8 != 0) return 0;
    wgmma_bwd_tiles chosen = bwd_defaults[desc->head_dim == 128];
#ifdef FLASHCL_MMA_EXPERIMENT
    const char *forced = getenv("FLASHCL_WGMMA_BWD_TILES");
    int fw, fq;
    if (forced && sscanf(forced, "%d,%d", &fw, &fq) == 2 && fw >= 1 && fw <= 3 && fq >= 32 && fq <= 128 &&
        fq % 32 == 0)
        chosen = (wgmma_bwd_tiles){fw, fq};
#endif
    const size_t wg_size = (size_t)chosen.warpgroups * 128;
    const size_t local = bwd_local_bytes(desc->head_dim, chosen.warpgroups, chosen.block_q);
    const size_t capacity = caps->limits.static_local_mem_bytes > caps->limits.local_mem_bytes
                                ? caps->limits.static_local_mem_bytes
                                : caps->limits.local_mem_bytes;
    if (wg_size > caps->limits.max_work_group_size || local > capacity) return 0;
    /* As the mma.sync kernels report theirs: block_q the streamed step, block_k the rows a work-group owns
     * (keys), threads_q the warps (16 keys each), threads_k their width. */
    *tiles = (flashcl_plan){chosen.block_q, chosen.warpgroups * 64, chosen.warpgroups * 4, 32, wg_size, local};
    return 1;
}

void flashcl_wgmma_backward_options(const flashcl_attention_desc *desc, const flashcl_plan *dkdv,
                                    const flashcl_plan *dq, int mma_ptx, char *options, size_t size) {
    /* backward_mma.cl's macros for its dQ kernel (as dispatch.c builds them for the mma.sync backward), then the
     * dK/dV kernel's. */
    snprintf(options, size,
             "-DFLASHCL_DTYPE=%d -DHEAD_DIM=%d -DWARPS=%d -DBLOCK_Q=%d -DBLOCK_K=%d -DFLASHCL_MMA_PTX=%d "
             "-DBW_WARPGROUPS=%d -DBW_BLOCK_Q=%d",
             (int)desc->dtype, desc->head_dim, dq->threads_q, dq->block_q, dq->block_q, mma_ptx, dkdv->threads_q / 4,
             dkdv->block_q);
}
