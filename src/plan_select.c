/* plan_select.c: which plan a context uses for a call: a forced one (checked) or the planner's. */
#include <stdio.h>

#include "internal.h"

flashcl_status flashcl_context_force_plan(flashcl_context *ctx, flashcl_pass pass, const flashcl_plan *plan) {
    if (!ctx) return flashcl_fail(NULL, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_context_force_plan: ctx is NULL");
    flashcl_clear_error(ctx);
    if (pass != FLASHCL_PASS_FORWARD && pass != FLASHCL_PASS_BACKWARD)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "unknown pass %d", (int)pass);
    ctx->forced_plan_set[pass] = plan != NULL;
    if (plan) ctx->forced_plan[pass] = *plan;
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_resolve_plan(flashcl_context *ctx, flashcl_pass pass, const flashcl_attention_desc *desc,
                                    flashcl_plan *plan) {
    const char *pass_name = pass == FLASHCL_PASS_FORWARD ? "forward" : "backward";
    if (ctx->forced_plan_set[pass]) {
        char reason[256];
        *plan = ctx->forced_plan[pass];
        flashcl_status status =
            flashcl_plan_check(&ctx->limits, pass, desc->head_dim, desc->dtype, plan, reason, sizeof reason);
        if (status != FLASHCL_SUCCESS)
            return flashcl_fail(ctx, status, "forced %s plan %dx%d (threads %dx%d) does not fit %s: %s", pass_name,
                                plan->block_q, plan->block_k, plan->threads_q, plan->threads_k, ctx->device_name,
                                reason);
        return FLASHCL_SUCCESS;
    }
    if (flashcl_tuned_plan(ctx, pass, desc, plan)) return FLASHCL_SUCCESS;
    flashcl_status status = flashcl_plan_choose(&ctx->limits, pass, desc->head_dim, desc->dtype, desc->causal, plan);
    if (status != FLASHCL_SUCCESS)
        return flashcl_fail(ctx, status,
                            "no %s tile plan fits %s (local memory %zu bytes, work-group %zu) for head_dim %d",
                            pass_name, ctx->device_name, ctx->limits.local_mem_bytes,
                            ctx->limits.max_work_group_size, desc->head_dim);
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_context_plan(flashcl_context *ctx, flashcl_pass pass, const flashcl_attention_desc *desc,
                                    flashcl_plan *plan) {
    if (!ctx) return flashcl_fail(NULL, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_context_plan: ctx is NULL");
    flashcl_clear_error(ctx);
    if (!desc || !plan) return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "desc or plan is NULL");
    if (pass != FLASHCL_PASS_FORWARD && pass != FLASHCL_PASS_BACKWARD)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "unknown pass %d", (int)pass);
    return flashcl_resolve_plan(ctx, pass, desc, plan);
}
