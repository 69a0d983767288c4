/* standard_unavailable.c: the standard-attention baseline of a build without CLBlast (FLASHCL_WITH_CLBLAST=OFF).
 * It replaces standard_*.c, so the library needs neither CLBlast nor, through it, C++. The dispatcher still
 * plans FLASHCL_KERNEL_STANDARD (explain, IO model and memory predictions stay pure arithmetic); running it is
 * refused here, after validation, before anything is enqueued. */
#include "standard_attention.h"

#define UNAVAILABLE                                                                                             \
    "standard attention is unavailable: this flashcl was built without CLBlast (FLASHCL_WITH_CLBLAST=OFF); " \
    "use FLASHCL_IMPL_FLASH"

flashcl_status flashcl_standard_forward(flashcl_context *ctx, const flashcl_exec_plan *plan,
                                        const flashcl_attention_desc *desc, const flashcl_tensor *q,
                                        const flashcl_tensor *k, const flashcl_tensor *v, const flashcl_tensor *o,
                                        const flashcl_tensor *lse, cl_uint num_events, const cl_event *wait_list,
                                        cl_event *event) {
    (void)plan, (void)desc, (void)q, (void)k, (void)v, (void)o, (void)lse;
    (void)num_events, (void)wait_list, (void)event;
    return flashcl_fail(ctx, FLASHCL_ERROR_UNSUPPORTED, "flashcl_forward: %s", UNAVAILABLE);
}

flashcl_status flashcl_standard_backward(flashcl_context *ctx, const flashcl_exec_plan *plan,
                                         const flashcl_attention_desc *desc, const flashcl_tensor *q,
                                         const flashcl_tensor *k, const flashcl_tensor *v, const flashcl_tensor *o,
                                         const flashcl_tensor *lse, const flashcl_tensor *dout,
                                         const flashcl_tensor *dq, const flashcl_tensor *dk, const flashcl_tensor *dv,
                                         cl_uint num_events, const cl_event *wait_list, cl_event *event) {
    (void)plan, (void)desc, (void)q, (void)k, (void)v, (void)o, (void)lse, (void)dout, (void)dq, (void)dk, (void)dv;
    (void)num_events, (void)wait_list, (void)event;
    return flashcl_fail(ctx, FLASHCL_ERROR_UNSUPPORTED, "flashcl_backward: %s", UNAVAILABLE);
}
