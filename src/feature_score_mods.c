/* feature_score_mods.c: the score modifiers of a call (logit soft-capping, ALiBi): their checks, llama.cpp's
 * slopes from max_bias, and the slopes' device buffer (the caller's, or host slopes uploaded once and kept by the
 * context while they stay the same). */
#include "call_features.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The sources of the slopes a call names (0, 1, or more: refused). */
static int alibi_sources(const flashcl_attention_extras *x) {
    return (x->alibi_slopes != NULL) + (x->alibi_slopes_host != NULL) + (x->alibi_max_bias != 0.0f);
}

flashcl_status flashcl_score_mods_resolve(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                          const flashcl_attention_extras *x, flashcl_features *f) {
    if (!x) return FLASHCL_SUCCESS;
    /* Negated comparison so NaN is refused too; infinity would give inf * tanh(s / inf) = inf * 0 = NaN. */
    if (!(x->softcap >= 0.0f) || isinf(x->softcap))
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                            "extras->softcap %g must be finite and >= 0 (0: no soft-capping)", (double)x->softcap);
    f->softcap = x->softcap;
    if (!(x->alibi_max_bias >= 0.0f) || isinf(x->alibi_max_bias))
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                            "extras->alibi_max_bias %g must be finite and >= 0 (0: slopes not from max_bias)",
                            (double)x->alibi_max_bias);
    const int sources = alibi_sources(x);
    if (sources > 1)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                            "ALiBi: give one of extras->alibi_slopes, alibi_slopes_host and alibi_max_bias, not %d",
                            sources);
    if (x->alibi_slopes_per_batch != 0 && x->alibi_slopes_per_batch != 1)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "extras->alibi_slopes_per_batch must be 0 or 1, not %d",
                            x->alibi_slopes_per_batch);
    if (sources == 0) {
        if (x->alibi_slopes_offset != 0 || x->alibi_slopes_per_batch != 0)
            return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                                "extras->alibi_slopes_offset or alibi_slopes_per_batch is set without ALiBi slopes");
        return FLASHCL_SUCCESS;
    }
    if (x->alibi_slopes_offset != 0 && !x->alibi_slopes)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                            "extras->alibi_slopes_offset applies to the device buffer alibi_slopes only");
    if (x->alibi_max_bias != 0.0f && x->alibi_slopes_per_batch)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                            "extras->alibi_slopes_per_batch does not apply to slopes from alibi_max_bias");
    const size_t count = (x->alibi_slopes_per_batch ? (size_t)desc->batch : 1) * (size_t)desc->heads_q;
    if (x->alibi_slopes_host)
        for (size_t i = 0; i < count; ++i)
            if (!isfinite(x->alibi_slopes_host[i]))
                return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                                    "extras->alibi_slopes_host[%zu] is %g: ALiBi slopes must be finite", i,
                                    (double)x->alibi_slopes_host[i]);
    f->alibi = 1;
    f->alibi_buffer = x->alibi_slopes;
    f->alibi_host = x->alibi_slopes_host;
    f->alibi_max_bias = x->alibi_max_bias;
    f->alibi_offset = x->alibi_slopes_offset;
    f->alibi_count = count;
    f->alibi_stride_b = x->alibi_slopes_per_batch ? (size_t)desc->heads_q : 0;
    return FLASHCL_SUCCESS;
}

void flashcl_alibi_slopes_from_max_bias(int heads, float max_bias, float *slopes) {
    int n_floor = 1;
    while (n_floor * 2 <= heads) n_floor *= 2;
    const double m0 = pow(2.0, -(double)max_bias / n_floor), m1 = pow(2.0, -(double)max_bias / 2.0 / n_floor);
    for (int h = 0; h < heads; ++h)
        slopes[h] = (float)(h < n_floor ? pow(m0, h + 1) : pow(m1, 2 * (h - n_floor) + 1));
}

/* The view the checks take the slopes as: (batch or 1, 1, 1, heads_q) floats. */
void flashcl_alibi_view(const flashcl_attention_desc *desc, const flashcl_features *f, flashcl_tensor *view,
                        flashcl_shape *shape) {
    *view = (flashcl_tensor){f->alibi_buffer, f->alibi_offset, f->alibi_stride_b, 0, 0};
    *shape = (flashcl_shape){f->alibi_stride_b ? (size_t)desc->batch : 1, 1, 1, (size_t)desc->heads_q, sizeof(float)};
}

flashcl_status flashcl_alibi_acquire(flashcl_context *ctx, const flashcl_features *f, cl_mem *out) {
    *out = NULL;
    if (!f->alibi) return FLASHCL_SUCCESS;
    if (f->alibi_buffer) {
        cl_int err = clRetainMemObject(f->alibi_buffer);
        if (err != CL_SUCCESS) return flashcl_fail_cl(ctx, err, "clRetainMemObject (ALiBi slopes)");
        *out = f->alibi_buffer;
        return FLASHCL_SUCCESS;
    }
    float *values = malloc(f->alibi_count * sizeof *values);
    if (!values) return flashcl_fail(ctx, FLASHCL_ERROR_OUT_OF_HOST_MEMORY, "out of host memory (ALiBi slopes)");
    if (f->alibi_host)
        memcpy(values, f->alibi_host, f->alibi_count * sizeof *values);
    else
        flashcl_alibi_slopes_from_max_bias((int)f->alibi_count, f->alibi_max_bias, values);
    /* Decode loops pass the same slopes call after call: the buffer made for the last ones is reused. It is
     * never written after its creation, so calls still running on it are unaffected by a replacement (a
     * released buffer lives until the kernels using it finish). */
    if (!ctx->alibi_cache || ctx->alibi_cache_count != f->alibi_count ||
        memcmp(ctx->alibi_cache_values, values, f->alibi_count * sizeof *values) != 0) {
        cl_int err;
        cl_mem made = clCreateBuffer(ctx->context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                     f->alibi_count * sizeof *values, values, &err);
        if (err != CL_SUCCESS) {
            free(values);
            return flashcl_fail_cl(ctx, err, "clCreateBuffer (ALiBi slopes)");
        }
        flashcl_alibi_cache_free(ctx);
        ctx->alibi_cache = made;
        ctx->alibi_cache_values = values;
        ctx->alibi_cache_count = f->alibi_count;
        values = NULL;
    }
    free(values);
    cl_int err = clRetainMemObject(ctx->alibi_cache);
    if (err != CL_SUCCESS) return flashcl_fail_cl(ctx, err, "clRetainMemObject (ALiBi slopes)");
    *out = ctx->alibi_cache;
    return FLASHCL_SUCCESS;
}

void flashcl_alibi_cache_free(flashcl_context *ctx) {
    if (ctx->alibi_cache) clReleaseMemObject(ctx->alibi_cache);
    free(ctx->alibi_cache_values);
    ctx->alibi_cache = NULL;
    ctx->alibi_cache_values = NULL;
    ctx->alibi_cache_count = 0;
}
