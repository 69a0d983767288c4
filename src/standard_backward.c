/* standard_backward.c: standard attention's backward pass -- not built yet. */
#include "internal.h"

flashcl_status flashcl_standard_backward(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                         const flashcl_tensor *q, const flashcl_tensor *k, const flashcl_tensor *v,
                                         const flashcl_tensor *o, const flashcl_tensor *lse,
                                         const flashcl_tensor *dout, const flashcl_tensor *dq,
                                         const flashcl_tensor *dk, const flashcl_tensor *dv, cl_uint num_events,
                                         const cl_event *wait_list, cl_event *event) {
    (void)desc, (void)q, (void)k, (void)v, (void)o, (void)lse, (void)dout, (void)dq, (void)dk, (void)dv;
    (void)num_events, (void)wait_list, (void)event;
    return flashcl_fail(ctx, FLASHCL_ERROR_UNSUPPORTED, "the standard backward pass is not built yet");
}
