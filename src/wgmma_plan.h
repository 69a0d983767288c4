/* wgmma_plan.h: the Hopper forward (cl/forward_wgmma.cl, warpgroup MMA through the sm_90a compile step) in the
 * dispatcher: when a call may run it, its tiles and its build options. Pure: no OpenCL call. */
#ifndef FLASHCL_WGMMA_PLAN_H
#define FLASHCL_WGMMA_PLAN_H

#include "call_features.h"
#include "device_caps.h"
#include "mma_backends.h"

/* Whether a context runs the Hopper forward where it applies, unless FLASHCL_WGMMA says (context.c). */
#ifndef FLASHCL_WGMMA_DEFAULT
#define FLASHCL_WGMMA_DEFAULT 1
#endif

/* The backend row the wgmma forward reports (flashcl_call_stats.backend "nvidia-wgmma"); its kind is
 * FLASHCL_KERNEL_TENSOR_CORE. Not in the mma.sync table: its kernel is a file of its own, not an
 * implementation of cl/mma.cl's interface. */
const flashcl_mma_backend *flashcl_wgmma_backend(void);

/* 1 if the wgmma forward can run this call on caps' device: an sm_90a device (flashcl_sm90a_device_refusal), the
 * forward pass, half or bfloat16 storage, head_dim 64 or 128, no feature but causal, every row start 16-byte
 * aligned (views_alignment a multiple of 8), and its tiles within the device's static local memory; then
 * *tiles holds them (block_q the work-group's query rows, block_k the keys per step, threads_q the
 * warpgroups). */
int flashcl_wgmma_applies(const flashcl_device_caps *caps, flashcl_pass pass, const flashcl_attention_desc *desc,
                          const flashcl_features *features, int views_alignment, flashcl_plan *tiles);

/* The wgmma forward's -D options for tiles. */
void flashcl_wgmma_options(const flashcl_attention_desc *desc, const flashcl_plan *tiles, char *options,
                           size_t size);

/* The cl/ files placed before forward_wgmma.cl (NULL-terminated, 4 at most). */
extern const char *const flashcl_wgmma_prelude[5];

#endif
