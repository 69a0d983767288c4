/* standard_attention.h: the CLBlast-based standard attention's two passes, run by flashcl_forward /
 * flashcl_backward after validation when the dispatcher's plan says FLASHCL_KERNEL_STANDARD. */
#ifndef FLASHCL_STANDARD_ATTENTION_H
#define FLASHCL_STANDARD_ATTENTION_H

#include "call_plan.h"

flashcl_status flashcl_standard_forward(flashcl_context *ctx, const flashcl_exec_plan *plan,
                                        const flashcl_attention_desc *desc, const flashcl_tensor *q,
                                        const flashcl_tensor *k, const flashcl_tensor *v, const flashcl_tensor *o,
                                        const flashcl_tensor *lse, cl_uint num_events, const cl_event *wait_list,
                                        cl_event *event);
flashcl_status flashcl_standard_backward(flashcl_context *ctx, const flashcl_exec_plan *plan,
                                         const flashcl_attention_desc *desc, const flashcl_tensor *q,
                                         const flashcl_tensor *k, const flashcl_tensor *v, const flashcl_tensor *o,
                                         const flashcl_tensor *lse, const flashcl_tensor *dout,
                                         const flashcl_tensor *dq, const flashcl_tensor *dk, const flashcl_tensor *dv,
                                         cl_uint num_events, const cl_event *wait_list, cl_event *event);

#endif
