/* forward.c: the forward pass's public calls: validate, dispatch (dispatch.c), launch (launch_forward.c or the
 * standard implementation). */
#include "launch.h"
#include "standard_attention.h"
#include "struct_abi.h"

flashcl_status flashcl_forward(flashcl_context *ctx, const flashcl_attention_desc *desc, const flashcl_tensor *q,
                               const flashcl_tensor *k, const flashcl_tensor *v, const flashcl_tensor *o,
                               const flashcl_tensor *lse, cl_uint num_events_in_wait_list,
                               const cl_event *event_wait_list, cl_event *event) {
    if (!ctx) return flashcl_fail(NULL, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_forward: ctx is NULL");
    return flashcl_forward_ex(ctx, desc, NULL, q, k, v, o, lse, num_events_in_wait_list, event_wait_list, event);
}

flashcl_status flashcl_forward_ex(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                  const flashcl_attention_extras *extras, const flashcl_tensor *q,
                                  const flashcl_tensor *k, const flashcl_tensor *v, const flashcl_tensor *o,
                                  const flashcl_tensor *lse, cl_uint num_events_in_wait_list,
                                  const cl_event *event_wait_list, cl_event *event) {
    if (!ctx) return flashcl_fail(NULL, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_forward_ex: ctx is NULL");
    flashcl_clear_error(ctx);
    flashcl_attention_desc full_desc; /* this library's full-size copies of the caller's structs */
    flashcl_attention_extras full_extras;
    flashcl_status status;
    if ((status = flashcl_import_desc(ctx, &desc, &full_desc)) ||
        (status = flashcl_import_extras(ctx, &extras, &full_extras)))
        return status;
    flashcl_varlen varlen;
    const flashcl_attention_desc *shape_desc;
    status = flashcl_varlen_resolve(ctx, desc, extras, num_events_in_wait_list, event_wait_list,
                                                   &varlen, &shape_desc);
    if (status != FLASHCL_SUCCESS) return status;
    status = flashcl_validate_forward_args(ctx, shape_desc, q, k, v, o, lse, num_events_in_wait_list, event_wait_list);
    if (status != FLASHCL_SUCCESS) return status;
    flashcl_features features;
    const flashcl_call_tensor outputs[] = {{"o", o, FLASHCL_SHAPE_Q, 1, 0}, {"lse", lse, FLASHCL_SHAPE_LSE, 1, 1}};
    if ((status = flashcl_features_resolve(ctx, desc, extras, &features))) return status;
    features.varlen = varlen;
    features.dbias_view.buffer = NULL; /* the backward's output: the forward ignores it (flashcl.h) */
    features.dbias_direct = 0;
    if ((status = flashcl_features_validate_buffers(ctx, desc, shape_desc, &features, outputs, 2))) return status;
    flashcl_exec_plan plan;
    const flashcl_tensor *const views[] = {q, k, v, o};
    if ((status = flashcl_plan_call(ctx, FLASHCL_PASS_FORWARD, desc, &features, views, 4, k, v, &plan))) return status;
    if (plan.kind == FLASHCL_KERNEL_STANDARD)
        return flashcl_standard_forward(ctx, &plan, desc, q, k, v, o, lse, num_events_in_wait_list, event_wait_list,
                                        event);
    return flashcl_launch_forward(ctx, &plan, desc, &features, q, k, v, o, lse, NULL, num_events_in_wait_list,
                                  event_wait_list, event);
}
