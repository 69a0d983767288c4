/* backward.c: the backward pass -- not built yet. */
#include "internal.h"

flashcl_status flashcl_backward(flashcl_context *ctx, const flashcl_attention_desc *desc, const flashcl_tensor *q,
                                const flashcl_tensor *k, const flashcl_tensor *v, const flashcl_tensor *o,
                                const flashcl_tensor *lse, const flashcl_tensor *dout, const flashcl_tensor *dq,
                                const flashcl_tensor *dk, const flashcl_tensor *dv, cl_uint num_events_in_wait_list,
                                const cl_event *event_wait_list, cl_event *event) {
    (void)desc, (void)q, (void)k, (void)v, (void)o, (void)lse, (void)dout, (void)dq, (void)dk, (void)dv;
    (void)num_events_in_wait_list, (void)event_wait_list, (void)event;
    if (!ctx) return FLASHCL_ERROR_INVALID_ARGUMENT;
    return flashcl_fail(ctx, FLASHCL_ERROR_UNSUPPORTED, "the backward pass is not built yet");
}

flashcl_status flashcl_backward_host(flashcl_context *ctx, const flashcl_attention_desc *desc, flashcl_layout layout,
                                     const float *q, const float *k, const float *v, const float *dout, float *o,
                                     float *lse, float *dq, float *dk, float *dv) {
    (void)desc, (void)layout, (void)q, (void)k, (void)v, (void)dout, (void)o, (void)lse, (void)dq, (void)dk, (void)dv;
    if (!ctx) return FLASHCL_ERROR_INVALID_ARGUMENT;
    return flashcl_fail(ctx, FLASHCL_ERROR_UNSUPPORTED, "the backward pass is not built yet");
}
