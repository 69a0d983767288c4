/* impl_settings.c: per-context choice of implementation, memory budget, and the last call's stats. */
#include <string.h>

#include "internal.h"

flashcl_status flashcl_context_set_impl(flashcl_context *ctx, flashcl_impl impl) {
    if (!ctx) return FLASHCL_ERROR_INVALID_ARGUMENT;
    flashcl_clear_error(ctx);
    if (impl != FLASHCL_IMPL_FLASH && impl != FLASHCL_IMPL_STANDARD)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "unknown implementation %d", (int)impl);
    ctx->impl = impl;
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_context_set_memory_budget(flashcl_context *ctx, size_t bytes) {
    if (!ctx) return FLASHCL_ERROR_INVALID_ARGUMENT;
    flashcl_clear_error(ctx);
    ctx->memory_budget = bytes;
    return FLASHCL_SUCCESS;
}

void flashcl_record_stats(flashcl_context *ctx, flashcl_impl impl, flashcl_pass pass,
                          const flashcl_attention_desc *desc, const flashcl_plan *plan, size_t extra_device_bytes) {
    memset(&ctx->last_stats, 0, sizeof ctx->last_stats);
    ctx->last_stats.impl = impl;
    ctx->last_stats.pass = pass;
    ctx->last_stats.extra_device_bytes = extra_device_bytes;
    ctx->last_stats.predicted_global_bytes = flashcl_io_model_bytes(desc, impl, pass, plan);
    if (plan) ctx->last_stats.plan = *plan;
    ctx->last_stats_valid = 1;
}

flashcl_status flashcl_last_call_stats(const flashcl_context *ctx, flashcl_call_stats *stats) {
    if (!ctx || !stats) return FLASHCL_ERROR_INVALID_ARGUMENT;
    if (!ctx->last_stats_valid) return FLASHCL_ERROR_INVALID_ARGUMENT;
    *stats = ctx->last_stats;
    return FLASHCL_SUCCESS;
}
