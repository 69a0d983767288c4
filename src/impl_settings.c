/* impl_settings.c: a context's settings (implementation, tensor cores, fp32 precision, forced plans, memory
 * budget) and the last call's stats. */
#include <string.h>

#include "internal.h"
#include "mma_backends.h"
#include "struct_abi.h"
#include "wgmma_plan.h"

flashcl_status flashcl_context_set_impl(flashcl_context *ctx, flashcl_impl impl) {
    if (!ctx) return flashcl_fail(NULL, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_context_set_impl: ctx is NULL");
    flashcl_clear_error(ctx);
    if (impl != FLASHCL_IMPL_FLASH && impl != FLASHCL_IMPL_STANDARD)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "unknown implementation %d", (int)impl);
    ctx->impl = impl;
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_context_set_tensor_cores(flashcl_context *ctx, flashcl_tensor_cores mode) {
    if (!ctx)
        return flashcl_fail(NULL, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_context_set_tensor_cores: ctx is NULL");
    flashcl_clear_error(ctx);
    if (mode != FLASHCL_TENSOR_CORES_AUTO && mode != FLASHCL_TENSOR_CORES_OFF && mode != FLASHCL_TENSOR_CORES_EMULATE)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "unknown tensor-core mode %d", (int)mode);
    ctx->tensor_cores = mode;
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_context_set_wgmma(flashcl_context *ctx, flashcl_wgmma_mode mode) {
    if (!ctx) return flashcl_fail(NULL, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_context_set_wgmma: ctx is NULL");
    flashcl_clear_error(ctx);
    switch (mode) {
    case FLASHCL_WGMMA_MODE_AUTO: ctx->wgmma = FLASHCL_WGMMA_AUTO; return FLASHCL_SUCCESS;
    case FLASHCL_WGMMA_MODE_OFF: ctx->wgmma = FLASHCL_WGMMA_OFF; return FLASHCL_SUCCESS;
    case FLASHCL_WGMMA_MODE_ON: ctx->wgmma = FLASHCL_WGMMA_ON; return FLASHCL_SUCCESS;
    }
    return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "unknown wgmma mode %d", (int)mode);
}

int flashcl_context_has_tensor_cores(const flashcl_context *ctx) {
    return ctx && flashcl_mma_backend_select(&ctx->caps, FLASHCL_TENSOR_CORES_AUTO) != NULL;
}

flashcl_status flashcl_context_set_f32_precision(flashcl_context *ctx, flashcl_f32_precision precision) {
    if (!ctx)
        return flashcl_fail(NULL, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_context_set_f32_precision: ctx is NULL");
    flashcl_clear_error(ctx);
    if (precision != FLASHCL_F32_FULL && precision != FLASHCL_F32_3XTF32)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "unknown fp32 precision %d", (int)precision);
    ctx->f32_precision = precision;
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_context_set_memory_budget(flashcl_context *ctx, size_t bytes) {
    if (!ctx)
        return flashcl_fail(NULL, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_context_set_memory_budget: ctx is NULL");
    flashcl_clear_error(ctx);
    ctx->memory_budget = bytes;
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_last_call_stats_sized(const flashcl_context *ctx, flashcl_call_stats *stats,
                                             size_t struct_size) {
    if (!ctx) return flashcl_fail(NULL, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_last_call_stats: ctx is NULL");
    /* The query takes a const context, yet its failure needs a message where
     * flashcl_last_error(ctx) finds it; every context is allocated by
     * flashcl_context_create*, never defined const, so writing its error
     * text is defined. A successful query leaves the last error alone, so
     * it can be read after a failed call. */
    flashcl_context *writable = (flashcl_context *)ctx;
    if (!stats) return flashcl_fail(writable, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_last_call_stats: stats is NULL");
    if (!ctx->last_stats_valid)
        return flashcl_fail(writable, FLASHCL_ERROR_INVALID_ARGUMENT,
                            "flashcl_last_call_stats: no flashcl_forward or flashcl_backward has succeeded on this "
                            "context yet");
    return flashcl_struct_export(writable, &flashcl_abi_call_stats, &ctx->last_stats, stats, struct_size);
}

flashcl_status flashcl_context_force_plan(flashcl_context *ctx, flashcl_pass pass, const flashcl_plan *plan) {
    if (!ctx) return flashcl_fail(NULL, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_context_force_plan: ctx is NULL");
    flashcl_clear_error(ctx);
    if (pass != FLASHCL_PASS_FORWARD && pass != FLASHCL_PASS_BACKWARD)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "unknown pass %d", (int)pass);
    ctx->forced_plan_set[pass] = plan != NULL;
    if (plan) ctx->forced_plan[pass] = *plan;
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_context_set_kv_splits(flashcl_context *ctx, int splits) {
    if (!ctx) return flashcl_fail(NULL, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_context_set_kv_splits: ctx is NULL");
    flashcl_clear_error(ctx);
    if (splits < 0)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                            "kv splits must be 0 (automatic), 1 (never) or a count, not %d", splits);
    ctx->kv_splits = splits;
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_context_set_decode_kernel(flashcl_context *ctx, int enabled) {
    if (!ctx)
        return flashcl_fail(NULL, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_context_set_decode_kernel: ctx is NULL");
    flashcl_clear_error(ctx);
    if (enabled != 0 && enabled != 1)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "decode kernel must be 0 (off) or 1 (on), not %d",
                            enabled);
    ctx->decode_off = !enabled;
    return FLASHCL_SUCCESS;
}
