/* call_plan.c: feeds the dispatcher from a context, and the public questions about plans (what a call would run). */
#include "call_plan.h"
#include "program_cache.h"
#include "struct_abi.h"
#include "wgmma_plan.h"

#include <string.h>

static flashcl_settings settings_of(const flashcl_context *ctx, flashcl_pass pass) {
    flashcl_settings s;
    memset(&s, 0, sizeof s);
    s.impl = ctx->impl;
    s.tensor_cores = ctx->tensor_cores;
    s.f32_precision = ctx->f32_precision;
    s.forced_plan_set = ctx->forced_plan_set[pass];
    s.forced_plan = ctx->forced_plan[pass];
    s.memory_budget = ctx->memory_budget;
    s.kv_splits = ctx->kv_splits;
    s.decode_off = ctx->decode_off;
    s.wgmma = ctx->wgmma;
    return s;
}

static flashcl_status dispatch_on(flashcl_context *ctx, const flashcl_settings *settings,
                                  const flashcl_problem *problem, flashcl_exec_plan *plan) {
    char reason[512];
    flashcl_status status = flashcl_dispatch(&ctx->caps, settings, problem, plan, reason, sizeof reason);
    if (status != FLASHCL_SUCCESS) return flashcl_fail(ctx, status, "%s", reason);
    if (!plan->sm90a) return FLASHCL_SUCCESS;
    /* An sm_90a program exists only once it has been built (the rewrite and the rebuild can fail on a driver
     * they do not know): build it now (the context keeps it, or keeps it unavailable, for every later call),
     * and where it is unavailable plan again without it. The reason stays in flashcl_last_error and
     * flashcl_last_build_log; the call goes on with the mma.sync kernels. */
    cl_kernel kernel;
    /* The program's wgmma kernel: the forward's, or the backward's dK/dV kernel. */
    const int main_kernel = problem->pass == FLASHCL_PASS_FORWARD ? FLASHCL_KERNEL_MAIN : FLASHCL_KERNEL_DKDV;
    status = flashcl_get_sm90a_kernel(ctx, plan->prelude, plan->program, plan->kernel_names[main_kernel],
                                      plan->options, &kernel);
    if (status != FLASHCL_ERROR_UNSUPPORTED) return status;
    flashcl_settings without = *settings;
    without.wgmma = FLASHCL_WGMMA_OFF;
    status = flashcl_dispatch(&ctx->caps, &without, problem, plan, reason, sizeof reason);
    if (status != FLASHCL_SUCCESS) return flashcl_fail(ctx, status, "%s", reason);
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_plan_call(flashcl_context *ctx, flashcl_pass pass, const flashcl_attention_desc *desc,
                                 const flashcl_features *features, const flashcl_tensor *const *views,
                                 int view_count, const flashcl_tensor *k, const flashcl_tensor *v,
                                 flashcl_exec_plan *plan) {
    const flashcl_settings settings = settings_of(ctx, pass);
    const flashcl_tensor *const kv[2] = {k, v};
    const flashcl_problem problem = {pass, desc, features, flashcl_views_alignment(views, view_count),
                                     flashcl_views_alignment(kv, 2), 0, 0};
    return dispatch_on(ctx, &settings, &problem, plan);
}

flashcl_status flashcl_plan_kv_cache_call(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                          const flashcl_features *features, const flashcl_tensor *const *views,
                                          int view_count, const flashcl_tensor *k, const flashcl_tensor *v,
                                          int paged, int append, flashcl_exec_plan *plan) {
    const flashcl_settings settings = settings_of(ctx, FLASHCL_PASS_FORWARD);
    const flashcl_tensor *const kv[2] = {k, v};
    const flashcl_problem problem = {FLASHCL_PASS_FORWARD,
                                     desc,
                                     features,
                                     flashcl_views_alignment(views, view_count),
                                     flashcl_views_alignment(kv, 2),
                                     paged ? 2 : 1,
                                     append};
    return dispatch_on(ctx, &settings, &problem, plan);
}

void flashcl_record_stats(flashcl_context *ctx, const flashcl_exec_plan *plan) {
    flashcl_exec_plan_report(plan, &ctx->last_stats);
    ctx->last_stats_valid = 1;
}

/* The plan of a call on contiguous tensors: offsets 0 and strides of whole
 * rows of head_dim elements (either layout), so the views' alignment is
 * head_dim's. */
static flashcl_status plan_contiguous(flashcl_context *ctx, const flashcl_settings *settings, flashcl_pass pass,
                                      const flashcl_attention_desc *desc, const flashcl_attention_extras *extras,
                                      flashcl_exec_plan *plan) {
    flashcl_varlen varlen;
    const flashcl_attention_desc *shape_desc;
    flashcl_status status = flashcl_validate_desc(ctx, desc);
    if (status == FLASHCL_SUCCESS) status = flashcl_varlen_resolve(ctx, desc, extras, 0, NULL, &varlen, &shape_desc);
    if (status != FLASHCL_SUCCESS) return status;
    flashcl_features features;
    if ((status = flashcl_features_resolve(ctx, desc, extras, &features))) return status;
    features.varlen = varlen;
    const flashcl_tensor row = {NULL, 0, 0, 0, (size_t)desc->head_dim};
    const flashcl_tensor *const views[1] = {&row};
    const int alignment = flashcl_views_alignment(views, 1);
    const flashcl_problem problem = {pass, desc, &features, alignment, alignment, 0, 0};
    return dispatch_on(ctx, settings, &problem, plan);
}

static flashcl_status check_query(flashcl_context *ctx, flashcl_pass pass, const void *out) {
    if (!out) return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "the output argument is NULL");
    if (pass != FLASHCL_PASS_FORWARD && pass != FLASHCL_PASS_BACKWARD)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "unknown pass %d", (int)pass);
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_explain_call_sized(flashcl_context *ctx, flashcl_pass pass, const flashcl_attention_desc *desc,
                                          const flashcl_attention_extras *extras, flashcl_call_stats *stats,
                                          size_t struct_size) {
    if (!ctx) return flashcl_fail(NULL, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_explain_call: ctx is NULL");
    flashcl_clear_error(ctx);
    flashcl_status status = check_query(ctx, pass, stats);
    if (status != FLASHCL_SUCCESS) return status;
    flashcl_attention_desc full_desc;
    flashcl_attention_extras full_extras;
    if ((status = flashcl_import_desc(ctx, &desc, &full_desc)) ||
        (status = flashcl_import_extras(ctx, &extras, &full_extras)))
        return status;
    const flashcl_settings settings = settings_of(ctx, pass);
    flashcl_exec_plan plan;
    if ((status = plan_contiguous(ctx, &settings, pass, desc, extras, &plan))) return status;
    flashcl_call_stats full;
    flashcl_exec_plan_report(&plan, &full);
    full.struct_size = sizeof full;
    return flashcl_struct_export(ctx, &flashcl_abi_call_stats, &full, stats, struct_size);
}

flashcl_status flashcl_context_plan(flashcl_context *ctx, flashcl_pass pass, const flashcl_attention_desc *desc,
                                    flashcl_plan *plan) {
    if (!ctx) return flashcl_fail(NULL, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_context_plan: ctx is NULL");
    flashcl_clear_error(ctx);
    if (!desc || !plan) return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "desc or plan is NULL");
    flashcl_status status = check_query(ctx, pass, plan);
    if (status != FLASHCL_SUCCESS) return status;
    flashcl_attention_desc full_desc;
    if ((status = flashcl_import_desc(ctx, &desc, &full_desc))) return status;
    /* The flash implementation's tiles, whichever implementation is selected. */
    flashcl_settings settings = settings_of(ctx, pass);
    settings.impl = FLASHCL_IMPL_FLASH;
    settings.memory_budget = 0;
    flashcl_exec_plan chosen;
    if ((status = plan_contiguous(ctx, &settings, pass, desc, NULL, &chosen))) return status;
    *plan = chosen.tiles;
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_predict_global_bytes(flashcl_context *ctx, flashcl_impl impl, flashcl_pass pass,
                                            const flashcl_attention_desc *desc, double *bytes) {
    if (!ctx) return flashcl_fail(NULL, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_predict_global_bytes: ctx is NULL");
    flashcl_clear_error(ctx);
    flashcl_status status = check_query(ctx, pass, bytes);
    if (status != FLASHCL_SUCCESS) return status;
    if (impl != FLASHCL_IMPL_FLASH && impl != FLASHCL_IMPL_STANDARD)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "unknown implementation %d", (int)impl);
    flashcl_attention_desc full_desc;
    if ((status = flashcl_import_desc(ctx, &desc, &full_desc)) || (status = flashcl_validate_desc(ctx, desc)))
        return status;
    if (impl == FLASHCL_IMPL_STANDARD) {
        /* A model figure, whatever the standard impl could run (it takes float32 only). */
        *bytes = flashcl_io_model_bytes(desc, impl, pass, NULL);
        return FLASHCL_SUCCESS;
    }
    flashcl_settings settings = settings_of(ctx, pass);
    settings.impl = impl;
    settings.memory_budget = 0; /* a prediction, not a call */
    flashcl_exec_plan plan;
    if ((status = plan_contiguous(ctx, &settings, pass, desc, NULL, &plan))) return status;
    *bytes = plan.predicted_global_bytes;
    return FLASHCL_SUCCESS;
}
