/* launch.h: enqueueing what an execution plan says: builds (or takes from the cache) its kernels, sets their
 * arguments, runs the block-mask summaries and the kernels in order, and records the plan as the call's stats. */
#ifndef FLASHCL_LAUNCH_H
#define FLASHCL_LAUNCH_H

#include "call_plan.h"

/* cache: a KV-cache call's cache (k and v are then its k and v; the
 * append kernel runs first when the plan has one); NULL otherwise. */
flashcl_status flashcl_launch_forward(flashcl_context *ctx, const flashcl_exec_plan *plan,
                                      const flashcl_attention_desc *desc, const flashcl_features *features,
                                      const flashcl_tensor *q, const flashcl_tensor *k, const flashcl_tensor *v,
                                      const flashcl_tensor *o, const flashcl_tensor *lse,
                                      const flashcl_kv_cache *cache, cl_uint num_events, const cl_event *wait_list,
                                      cl_event *event);

/* The tensors of a backward call, in the kernels' order. */
typedef struct flashcl_backward_tensors {
    const flashcl_tensor *q, *k, *v, *o, *lse, *dout, *dq, *dk, *dv;
} flashcl_backward_tensors;

flashcl_status flashcl_launch_backward(flashcl_context *ctx, const flashcl_exec_plan *plan,
                                       const flashcl_attention_desc *desc, const flashcl_features *features,
                                       const flashcl_backward_tensors *t, cl_uint num_events,
                                       const cl_event *wait_list, cl_event *event);

#endif
