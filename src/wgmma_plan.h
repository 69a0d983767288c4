/* wgmma_plan.h: the Hopper forward (cl/forward_wgmma.cl, warpgroup MMA through the sm_90a compile step; wgmma_plan.c)
 * and backward (cl/backward_wgmma.cl; wgmma_backward_plan.c) in the dispatcher: when a call may run them, their
 * tiles and their build options. Pure: no OpenCL call. */
#ifndef FLASHCL_WGMMA_PLAN_H
#define FLASHCL_WGMMA_PLAN_H

#include "call_features.h"
#include "device_caps.h"
#include "mma_backends.h"

/* When a context runs the Hopper forward and backward (flashcl_settings.wgmma; context.c reads FLASHCL_WGMMA):
 * never (0, also what a zeroed settings struct says), wherever they apply (1, FLASHCL_WGMMA=1: tests and A/B
 * timing), or where they apply and were measured faster than the mma.sync kernels (2, the default). The forward's
 * default: head_dim 64, causal or not, on the one-block-at-a-time kernel, 128 keys a step on 4 warpgroups (dense
 * without causal) or 2 (causal, or with a modifier: a staged bias needs the room); head_dim 128,
 * causal or not, on the pipelined one (WG_PIPELINE), 3 warpgroups x 64 keys; the score modifiers and the bias at
 * head_dim 128 only, a bias only staged (docs/perf.md "wgmma forward (issue 22)" and "Score modifiers on the wgmma
 * forward"). The backward's: every dense call it takes (docs/perf.md "wgmma backward (issue 22, item 3)"). */
enum { FLASHCL_WGMMA_OFF = 0, FLASHCL_WGMMA_ON = 1, FLASHCL_WGMMA_AUTO = 2 };

/* The backend row the wgmma forward reports (flashcl_call_stats.backend "nvidia-wgmma"); its kind is
 * FLASHCL_KERNEL_TENSOR_CORE. Not in the mma.sync table: its kernel is a file of its own, not an
 * implementation of cl/mma.cl's interface. */
const flashcl_mma_backend *flashcl_wgmma_backend(void);

/* 1 if the wgmma forward runs this call on caps' device under mode (FLASHCL_WGMMA_*): an sm_90a device
 * (flashcl_sm90a_device_refusal), the forward pass, half or bfloat16 storage, head_dim 64 or 128, no feature but
 * causal and those the kernel takes (soft-capping, ALiBi, the additive bias: flashcl_features_wgmma; in the
 * default mode only where measured faster, see wgmma_plan.c), every row
 * start 16-byte aligned (views_alignment a multiple of 8), and its tiles (with the staged bias tiles, when the bias
 * is staged) within the device's static local memory; then *tiles holds them (block_q the work-group's query rows, block_k the keys
 * per step, threads_q the warps (4 per warpgroup, 16 query rows each), threads_k 32). */
int flashcl_wgmma_applies(const flashcl_device_caps *caps, int mode, flashcl_pass pass,
                          const flashcl_attention_desc *desc, const flashcl_features *features, int views_alignment,
                          flashcl_plan *tiles);

/* The wgmma forward's -D options for tiles and the call's features (theirs as every kernel's, and
 * FLASHCL_BIAS_STAGED where flashcl_bias_staged_bytes says the bias rows are aligned): at head_dim 128 the pipelined kernel (-DWG_PIPELINE=1, S of block j
 * and O += P V of block j - 1 in flight together), measured faster there; at 64 the kernel's default, one block at
 * a time (the pipelined one was 7-12% slower with 128-key blocks, 0.97-1.03x with 64;
 * FLASHCL_BUILD_OPTIONS=-DWG_PIPELINE=1 still selects it). */
void flashcl_wgmma_options(const flashcl_attention_desc *desc, const flashcl_features *features,
                           const flashcl_plan *tiles, char *options, size_t size);

/* The cl/ files placed before forward_wgmma.cl (NULL-terminated, 4 at most). */
extern const char *const flashcl_wgmma_prelude[5];

/* The Hopper backward (wgmma_backward_plan.c): cl/backward_wgmma.cl's dK/dV kernel on wgmma and
 * cl/backward_mma.cl's dQ kernel on mma.sync, one sm_90a program. 1 if it runs this backward call on caps' device
 * under mode: an sm_90a device, half or bfloat16 storage, head_dim 64 or 128, no feature but causal and the score
 * modifiers (soft-capping, ALiBi: flashcl_features_wgmma), every row start 16-byte aligned, its tiles within the static local memory; in the default mode only where the H100
 * measured it faster than the mma.sync backward. Then *tiles holds the dK/dV kernel's (block_q the queries per
 * step, block_k the keys a work-group owns, threads_q its warps, threads_k 32). */
int flashcl_wgmma_backward_applies(const flashcl_device_caps *caps, int mode, const flashcl_attention_desc *desc,
                                   const flashcl_features *features, int views_alignment, flashcl_plan *tiles);

/* 1 if the Hopper backward's dQ runs on wgmma too (cl/backward_wgmma.cl flashcl_backward_wgmma_dq), with its
 * tiles in *tiles (block_q the keys per step, block_k the query rows a work-group owns, threads_q its warps);
 * 0: on backward_mma.cl's mma.sync dQ kernel. */
int flashcl_wgmma_backward_dq_tiles(const flashcl_device_caps *caps, const flashcl_attention_desc *desc,
                                    const flashcl_features *features, flashcl_plan *tiles);

/* The program's -D options: backward_mma.cl's (mma_dq, the mma.sync backward's tiles; mma_ptx its backend's
 * FLASHCL_MMA_PTX), the dK/dV kernel's (dkdv), where dQ runs on wgmma (wgmma_dq not NULL) its kernel's, and the
 * features' defines (none for a dense call). */
void flashcl_wgmma_backward_options(const flashcl_attention_desc *desc, const flashcl_features *features,
                                    const flashcl_plan *dkdv, const flashcl_plan *mma_dq,
                                    const flashcl_plan *wgmma_dq, int mma_ptx, char *options, size_t size);

/* The cl/ files placed before backward_wgmma.cl (NULL-terminated, 5). */
extern const char *const flashcl_wgmma_backward_prelude[6];

#endif
