/* backward_plan.c: constraints of the backward kernels' tiles (cl/backward.cl). */
#include <stdio.h>

#include "plan_footprint.h"

/* Head-dim columns of the gradients per work-item: the same cap as the
 * forward's (src/plan.c) for the same reason: Mesa rusticl on llvmpipe
 * computes wrong results past 32 columns in a private array. */
#define MAX_DIMS_PER_ITEM 32
/* Register budget per work-item. The dK/dV kernel keeps two accumulators
 * (dK and dV, rows x columns each) and two score arrays (S and dP, rows x
 * streamed rows each); past these, GPU compilers spill to memory. */
#define MAX_ACCUMULATORS_PER_ITEM 128
#define MAX_SCORES_PER_ITEM 64

static size_t round_up(size_t x, size_t m) { return ((x + m - 1) / m) * m; }
/* A multiple of 4 holding an odd number of float4s (QUAD_ODD_STRIDE). */
static size_t quad_odd(size_t x) {
    const size_t quads = round_up(x, 4);
    return (quads / 4) % 2 == 0 ? quads + 4 : quads;
}

/* Mirrors the __local arrays of flashcl_backward_dkdv, the larger of the two
 * tiled kernels: flashcl_backward_dq runs the plan transposed (block_k query
 * rows resident, block_q key rows streamed) and has the same row tiles but
 * one score tile and no per-row vectors, so it always fits when this does. */
static size_t backward_local_bytes(const flashcl_plan *p, int head_dim) {
    const size_t row_stride = quad_odd(round_up((size_t)head_dim, (size_t)p->threads_q));
    const size_t score_stride = quad_odd((size_t)p->block_q);
    const size_t floats = 2 * (size_t)p->block_k * row_stride     /* k_tile, v_tile */
                          + 2 * (size_t)p->block_q * row_stride   /* q_tile, do_tile */
                          + 2 * (size_t)p->block_k * score_stride /* p_tile, ds_tile */
                          + 2 * (size_t)p->block_q;               /* lse_tile, delta_tile */
    return floats * sizeof(float);
}

flashcl_status flashcl_backward_plan_check(const flashcl_plan *p, int head_dim, size_t *local_bytes, char *reason,
                                           size_t reason_size) {
    /* The work-item grid: threads_k along the resident rows, threads_q along
     * the streamed rows of a score tile and along the head dimension of the
     * gradients (plan.c has checked divisibility and the work-group size). */
    const int rows_per_item = p->block_k / p->threads_k;
    const int streamed_per_item = p->block_q / p->threads_q;
    const int dims_per_item = (head_dim + p->threads_q - 1) / p->threads_q;
    *local_bytes = 0;
    if (dims_per_item > MAX_DIMS_PER_ITEM) {
        snprintf(reason, reason_size, "%d head-dim columns per work-item exceed %d (use more threads_q)",
                 dims_per_item, MAX_DIMS_PER_ITEM);
        return FLASHCL_ERROR_PLAN;
    }
    if (2 * rows_per_item * dims_per_item > MAX_ACCUMULATORS_PER_ITEM ||
        2 * rows_per_item * streamed_per_item > MAX_SCORES_PER_ITEM) {
        snprintf(reason, reason_size,
                 "%d accumulators and %d scores per work-item exceed the register budget (%d, %d)",
                 2 * rows_per_item * dims_per_item, 2 * rows_per_item * streamed_per_item,
                 MAX_ACCUMULATORS_PER_ITEM, MAX_SCORES_PER_ITEM);
        return FLASHCL_ERROR_PLAN;
    }
    *local_bytes = backward_local_bytes(p, head_dim);
    return FLASHCL_SUCCESS;
}
