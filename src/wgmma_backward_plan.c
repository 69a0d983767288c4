/* wgmma_backward_plan.c: when the Hopper backward (cl/backward_wgmma.cl: dK/dV and dQ on wgmma, one sm_90a program)
 * applies, and its tiles and options. */
#include "wgmma_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "program_sm90a.h"

/* backward_mma.cl comes before backward_wgmma.cl: its lse_log2 is the program's too, and its dQ kernel runs where
 * dQ is put back on mma.sync (FLASHCL_WGMMA_BWD_DQ=0,64 in experiment builds). Its kernels are compiled into the
 * program either way (a longer first build, cached like any program's). */
const char *const flashcl_wgmma_backward_prelude[6] = {"mma.cl",   "mma_nvidia.cl",   "mma_operands.cl",
                                                       "wgmma.cl", "backward_mma.cl", NULL};

/* The dK/dV kernel's tiles by head dim (64, 128): warpgroups of 64 keys per work-group (each Q and dO step is
 * shared by them) and queries per step (S^T's and dP^T's registers, block_q / 2 floats each per work-item, beside
 * dK's and dV's head_dim / 2 each). On the H200 (docs/perf.md, "wgmma backward (issue 22, item 3)", run 2: f16
 * fwd+bwd, N 2048 / 8192, dQ on mma.sync) d64 2 x 128 gave 182.9 / 205.6 TFLOP/s (3 x 64 178.7 / 209.4, 2 x 64 170.4 /
 * 191.8, 1 x 64 161.3 / 174.3, 2 x 32 148.2 / 165.7; mma.sync 159.6 / 176.3), d128 2 x 64 197.6 / 225.6 (2 x 32
 * 180.6 / 206.6, 1 x 64 183.5 / 201.2, 2 x 128 171.5 / 191.7, 3 x 64 160.2 / 178.1; mma.sync 163.2 / 179.0). */
typedef struct wgmma_bwd_tiles {
    int warpgroups, block_q;
} wgmma_bwd_tiles;
static const wgmma_bwd_tiles bwd_defaults[2] = {{2, 128}, {2, 64}};
/* The dQ kernel's (cl/backward_wgmma.cl flashcl_backward_wgmma_dq) by head dim and mask (not causal, causal):
 * warpgroups of 64 query rows and keys per step; 0 warpgroups would put dQ on backward_mma.cl's mma.sync kernel
 * (FLASHCL_WGMMA_BWD_DQ=0,64 in experiment builds). Run 3 on the H200 (f16 fwd+bwd, N 2048 / 8192, with the dK/dV
 * tiles above): d64 2 x 128 192.4 / 214.4 (2 x 64 187.5 / 212.4; dQ on mma.sync 183.8 / 207.4), causal 2 x 64
 * 160.6 / 202.0 (2 x 128 157.0 / 205.0; mma.sync 154.8 / 191.9); d128 3 x 64 237.5 / 273.9 (2 x 64 224.3 / 253.8;
 * mma.sync 198.0 / 224.9), causal 187.5 / 251.8 (2 x 64 177.2 / 235.7; mma.sync 164.5 / 207.1). */
static const wgmma_bwd_tiles dq_defaults[2][2] = {{{2, 128}, {2, 64}}, {{3, 64}, {3, 64}}};
/* d64 with ALiBi alone, not causal: 2 x 64, as causal calls take. On the H100 (docs/perf.md, "Tiles of the wgmma
 * backward for soft-capped and ALiBi calls") it was 1.07 / 1.05x faster fwd+bwd at N 2048 / 8192 than 2 x 128, on
 * an H200 1.03-1.07x in four rounds ("dQ tiles for d64 ALiBi-only backwards"); with soft-capping 2 x 64 lost 5%,
 * and at d128 3 x 64 stays ahead with either modifier. */
static const wgmma_bwd_tiles dq_d64_alibi = {2, 64};

/* Static local memory: K and V of the work-group's keys, two stages of Q and dO, 16-bit values; two stages of LSE
 * and D floats; 128 bytes of alignment for each of the four tile arrays. */
static size_t bwd_local_bytes(int head_dim, int warpgroups, int block_q) {
    return (size_t)head_dim * 2 * (2 * 64 * (size_t)warpgroups + 4 * (size_t)block_q) + 4 * 2 * 2 * (size_t)block_q +
           4 * 128;
}

/* The dK/dV kernel's staged bias (cl/backward_wgmma.cl, FLASHCL_BIAS_STAGED): two stages of its step's queries x
 * the work-group's keys, rows of 16-byte chunks padded by one (mma_operands.cl BIAS_TILE_ROW); 0 without. */
static size_t bwd_bias_bytes(size_t bias_element, int warpgroups, int block_q) {
    if (!bias_element) return 0;
    const size_t chunks_per_row = 64 * (size_t)warpgroups * bias_element / 16 + 1;
    return 2 * (size_t)block_q * chunks_per_row * 16;
}

/* Everything the dK/dV kernel holds, its staged bias included (bias_element 0: none). */
static size_t dkdv_local_bytes(int head_dim, wgmma_bwd_tiles t, size_t bias_element) {
    return bwd_local_bytes(head_dim, t.warpgroups, t.block_q) + bwd_bias_bytes(bias_element, t.warpgroups, t.block_q);
}

/* The dQ kernel's static local memory: Q and dO of the work-group's rows, two stages of K and V blocks. */
static size_t dq_local_bytes(int head_dim, int warpgroups, int block_k) {
    return (size_t)head_dim * 2 * (2 * 64 * (size_t)warpgroups + 4 * (size_t)block_k) + 4 * 128;
}

/* Everything the dQ kernel holds, its staged bias included (bias_element 0: none): the bias tiles have
 * 64 x warpgroups rows of block_k elements, padded by one 16-byte chunk (mma_operands.cl BIAS_TILE_ROW). */
static size_t dq_all_local_bytes(int head_dim, wgmma_bwd_tiles t, size_t bias_element) {
    const size_t bias = bias_element ? 2 * 64 * (size_t)t.warpgroups * ((size_t)t.block_q * bias_element / 16 + 1) * 16
                                     : 0;
    return dq_local_bytes(head_dim, t.warpgroups, t.block_q) + bias;
}

static size_t static_capacity(const flashcl_device_caps *caps) {
    return caps->limits.static_local_mem_bytes > caps->limits.local_mem_bytes ? caps->limits.static_local_mem_bytes
                                                                               : caps->limits.local_mem_bytes;
}

int flashcl_wgmma_backward_dq_tiles(const flashcl_device_caps *caps, const flashcl_attention_desc *desc,
                                    const flashcl_features *features, flashcl_plan *tiles) {
    wgmma_bwd_tiles chosen = dq_defaults[desc->head_dim == 128][desc->causal != 0];
    if (desc->head_dim == 64 && features->alibi && !(features->softcap > 0.0f)) chosen = dq_d64_alibi;
#ifdef FLASHCL_MMA_EXPERIMENT
    const char *forced = getenv("FLASHCL_WGMMA_BWD_DQ");
    int fw, fk;
    if (forced && sscanf(forced, "%d,%d", &fw, &fk) == 2 && fw >= 0 && fw <= 3 && fk >= 32 && fk <= 128 &&
        fk % 32 == 0)
        chosen = (wgmma_bwd_tiles){fw, fk};
#endif
    if (chosen.warpgroups == 0) return 0;
    /* A staged bias (its two tiles of the work-group's rows x a key block) beside them: where it does not fit,
     * 64-key blocks, then two warpgroups. */
    const size_t bias_element = flashcl_bias_staged_bytes(features);
    size_t local = dq_all_local_bytes(desc->head_dim, chosen, bias_element);
    if (local > static_capacity(caps) && bias_element && chosen.block_q > 64) {
        chosen.block_q = 64;
        local = dq_all_local_bytes(desc->head_dim, chosen, bias_element);
    }
    if (local > static_capacity(caps) && bias_element && chosen.warpgroups > 2) {
        chosen.warpgroups = 2;
        local = dq_all_local_bytes(desc->head_dim, chosen, bias_element);
    }
    const size_t wg_size = (size_t)chosen.warpgroups * 128;
    if (wg_size > caps->limits.max_work_group_size || local > static_capacity(caps)) return 0;
    /* block_q the keys per step, block_k the query rows a work-group owns. */
    *tiles = (flashcl_plan){chosen.block_q, chosen.warpgroups * 64, chosen.warpgroups * 4, 32, wg_size, local};
    return 1;
}

int flashcl_wgmma_backward_applies(const flashcl_device_caps *caps, int mode, const flashcl_attention_desc *desc,
                                   const flashcl_features *features, int views_alignment, flashcl_plan *tiles) {
    if (mode == FLASHCL_WGMMA_OFF || flashcl_sm90a_device_refusal(caps) != NULL) return 0;
    if (desc->dtype != FLASHCL_DTYPE_F16 && desc->dtype != FLASHCL_DTYPE_BF16) return 0;
    if (desc->head_dim != 64 && desc->head_dim != 128) return 0;
    /* Causal is not a feature; the score modifiers and the bias are the only features the kernels take (no mask). The
     * default mode runs every call it applies to: all measured faster than the mma.sync backward with the same
     * forward (docs/perf.md, "wgmma backward (issue 22, item 3)" and "Score modifiers on the wgmma backward"): dense
     * fwd+bwd at N 2048 / 8192 1.11-1.54x on the H100 (the backward alone 1.15-1.71x), 1.13-1.54x on an H200, the
     * least at d64 causal N 2048; with soft-capping 1.11-1.47x, with ALiBi 1.18-1.57x (H100). */
    if (!flashcl_features_wgmma(features, FLASHCL_PASS_BACKWARD)) return 0;
    /* A bias: dK/dV and dQ (which writes dBias) on wgmma. Staged (rows 16-byte aligned), with dQ still on mma.sync,
     * it was 1.17-1.22x the mma.sync backward fwd+bwd on an H200 (f16, d64 and d128, shared and full, N 2048 / 8192;
     * docs/perf.md, "The bias on the wgmma backward"), and dQ on wgmma took that another 1.11-1.20x ("The bias on the
     * wgmma dQ kernel too"); read from global memory (unaligned rows, dQ on mma.sync) 0.69-0.92x: FLASHCL_WGMMA_ON
     * only. */
    if (features->bias && mode != FLASHCL_WGMMA_ON && !flashcl_bias_staged_bytes(features)) return 0;
    /* cp.async copies 16-byte chunks of every row. */
    if (views_alignment % 8 != 0) return 0;
    wgmma_bwd_tiles chosen = bwd_defaults[desc->head_dim == 128];
#ifdef FLASHCL_MMA_EXPERIMENT
    /* A/B timing: the backward alone back on mma.sync, the forward unchanged. */
    const char *backward = getenv("FLASHCL_WGMMA_BACKWARD");
    if (backward && strcmp(backward, "0") == 0) return 0;
    const char *forced = getenv("FLASHCL_WGMMA_BWD_TILES");
    int fw, fq;
    if (forced && sscanf(forced, "%d,%d", &fw, &fq) == 2 && fw >= 1 && fw <= 3 && fq >= 32 && fq <= 128 &&
        fq % 32 == 0)
        chosen = (wgmma_bwd_tiles){fw, fq};
#endif
    const size_t wg_size = (size_t)chosen.warpgroups * 128;
    const size_t bias_element = flashcl_bias_staged_bytes(features);
    size_t local = dkdv_local_bytes(desc->head_dim, chosen, bias_element);
    /* A staged float32 bias of 128-query steps does not fit beside d64's tiles: 64-query steps. */
    if (local > static_capacity(caps) && bias_element && chosen.block_q > 64) {
        chosen.block_q = 64;
        local = dkdv_local_bytes(desc->head_dim, chosen, bias_element);
    }
    if (wg_size > caps->limits.max_work_group_size || local > static_capacity(caps)) return 0;
    /* As the mma.sync kernels report theirs: block_q the streamed step, block_k the rows a work-group owns
     * (keys), threads_q the warps (16 keys each), threads_k their width. */
    *tiles = (flashcl_plan){chosen.block_q, chosen.warpgroups * 64, chosen.warpgroups * 4, 32, wg_size, local};
    return 1;
}

void flashcl_wgmma_backward_options(const flashcl_attention_desc *desc, const flashcl_features *features,
                                    const flashcl_plan *dkdv, const flashcl_plan *mma_dq,
                                    const flashcl_plan *wgmma_dq, int mma_ptx, char *options, size_t size) {
    /* backward_mma.cl's macros for its dQ kernel (as dispatch.c builds them for the mma.sync backward), then the
     * dK/dV kernel's, then the wgmma dQ kernel's where it runs (its kernel is compiled only then). */
    snprintf(options, size,
             "-DFLASHCL_DTYPE=%d -DHEAD_DIM=%d -DWARPS=%d -DBLOCK_Q=%d -DBLOCK_K=%d -DFLASHCL_MMA_PTX=%d "
             "-DBW_WARPGROUPS=%d -DBW_BLOCK_Q=%d",
             (int)desc->dtype, desc->head_dim, mma_dq->threads_q, mma_dq->block_q, mma_dq->block_q, mma_ptx,
             dkdv->threads_q / 4, dkdv->block_q);
    const size_t used = strlen(options);
    if (wgmma_dq && used < size)
        snprintf(options + used, size - used, " -DBWQ_WARPGROUPS=%d -DBWQ_BLOCK_K=%d", wgmma_dq->threads_q / 4,
                 wgmma_dq->block_q);
    /* Dense calls add nothing: their options, and so their programs, stay as they were. An aligned bias is staged
     * by both kernels (the mma.sync dQ kernel's tiles were chosen for that: dispatch.c). */
    flashcl_features_tensor_core_options(features, options, size);
}
