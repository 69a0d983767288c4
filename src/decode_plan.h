/* decode_plan.h: the decode kernel family (cl/decode.cl) as the dispatcher sees it. */
#ifndef FLASHCL_DECODE_PLAN_H
#define FLASHCL_DECODE_PLAN_H

#include "dispatch.h"

/* Whether a call may run the decode kernel: a flash forward of at most a
 * few query positions, dense or windowed (no block mask, dropout or packed
 * batch; the score modifiers and the bias are fine), no forced tiles, the
 * kernel not turned off. */
int flashcl_decode_applies(const flashcl_settings *settings, const flashcl_problem *problem);

/* The kernel's tiles: block_q the packed rows per work-group, block_k the
 * keys per step (= threads_k = work_group_size, its work-items). 0 if none
 * fits the device. */
int flashcl_decode_tiles(const flashcl_device_caps *caps, const flashcl_problem *problem, flashcl_plan *tiles);

/* The matrix-unit backend the decode kernel may run on (cl/decode_mma.cl),
 * or NULL (then cl/decode.cl): the context's tensor-core mode, half or
 * bfloat16 storage, head_dim 64 or 128, K and V rows 16-byte aligned, no
 * forced plan. */
const flashcl_mma_backend *flashcl_decode_mma_backend(const flashcl_device_caps *caps, const flashcl_settings *settings,
                                                      const flashcl_problem *problem);

/* The matrix-unit kernel's tiles: block_q 16 packed rows, block_k the keys
 * of one round (16 per warp), threads_q the warps. 0 if they do not fit. */
int flashcl_decode_mma_tiles(const flashcl_device_caps *caps, const flashcl_mma_backend *backend,
                             const flashcl_problem *problem, flashcl_plan *tiles);

/* Local memory of those tiles, in bytes. */
size_t flashcl_decode_local_bytes(int head_dim, int rows, int threads);

/* On a device with a loop budget (llvmpipe), the most keys one work-group
 * may stream (a multiple of block_k); 0: no bound. */
size_t flashcl_decode_max_chunk(const flashcl_device_caps *caps, const flashcl_attention_desc *desc,
                                const flashcl_plan *tiles, const flashcl_mma_backend *backend);

/* Fills the plan's program, kernel, build options and grid (unsplit), for
 * plan->backend's kernel (cl/decode_mma.cl) or, without one, cl/decode.cl. */
void flashcl_decode_program(const flashcl_problem *problem, flashcl_exec_plan *plan);

/* Work-groups of the unsplit grid: row blocks x batch x KV heads. */
size_t flashcl_decode_groups(const flashcl_attention_desc *desc, const flashcl_plan *tiles);

/* Bytes the unsplit kernel moves through global memory: Q, O and LSE once,
 * K and V once per row block for the keys its rows may see. */
double flashcl_decode_io_bytes(const flashcl_problem *problem, const flashcl_plan *tiles);

#endif
