/* feature_varlen.c: a packed variable-length batch: checks of the cu_seqlens arrays (buffers and contents, from
 * the host copies or read back) and the packed shape the call's tensors are validated against. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "call_features.h"

/* Checks a cu_seqlens buffer's context and size: no device access, so it
 * never waits (the host-copy path relies on that). */
static flashcl_status check_cu_buffer(flashcl_context *ctx, const char *name, cl_mem buffer, int batch) {
    cl_context owner = NULL;
    size_t bytes = 0;
    cl_int err = clGetMemObjectInfo(buffer, CL_MEM_CONTEXT, sizeof owner, &owner, NULL);
    if (err == CL_SUCCESS) err = clGetMemObjectInfo(buffer, CL_MEM_SIZE, sizeof bytes, &bytes, NULL);
    if (err != CL_SUCCESS)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "%s is not a valid cl_mem (%s)", name,
                            flashcl_cl_error_name(err));
    if (owner != ctx->context)
        return flashcl_fail(ctx, FLASHCL_ERROR_WRONG_CONTEXT, "%s belongs to another OpenCL context", name);
    const size_t count = (size_t)batch + 1;
    if (bytes < count * sizeof(cl_int))
        return flashcl_fail(ctx, FLASHCL_ERROR_BUFFER_TOO_SMALL, "%s needs %zu bytes (batch + 1 int32) but has %zu",
                            name, count * sizeof(cl_int), bytes);
    return FLASHCL_SUCCESS;
}

/* Checks the contents of one cu_seqlens array (batch + 1 entries, wherever
 * they came from: the device read-back or the caller's host copy, so both
 * paths give the same messages); *total receives its last entry. */
static flashcl_status check_cu_values(flashcl_context *ctx, const char *name, const int32_t *cu, int batch,
                                      int max_len, int *total) {
    if (cu[0] != 0) return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "%s[0] is %d, not 0", name, (int)cu[0]);
    for (int b = 0; b < batch; ++b) {
        const int64_t len = (int64_t)cu[b + 1] - (int64_t)cu[b];
        if (len < 0 || len > max_len)
            return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                                "%s: sequence %d has length %lld (must be 0 .. %d: non-decreasing offsets, "
                                "lengths at most the desc's maximum)",
                                name, b, (long long)len, max_len);
    }
    *total = (int)cu[batch];
    if (*total < 1)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "%s: the packed batch has no rows", name);
    return FLASHCL_SUCCESS;
}

/* Checks one cu_seqlens array: the buffer, then the contents of host (the
 * caller's copy) or, without one, of the buffer read back (blocking, after
 * the wait list). *total receives its last entry. */
static flashcl_status check_cu_seqlens(flashcl_context *ctx, const char *name, cl_mem buffer, const int32_t *host,
                                       int batch, int max_len, cl_uint num_events, const cl_event *wait_list,
                                       int *total) {
    flashcl_status status = check_cu_buffer(ctx, name, buffer, batch);
    if (status != FLASHCL_SUCCESS) return status;
    if (host) return check_cu_values(ctx, name, host, batch, max_len, total);
    const size_t count = (size_t)batch + 1;
    int32_t *cu = malloc(count * sizeof *cu);
    if (!cu) return flashcl_fail(ctx, FLASHCL_ERROR_OUT_OF_HOST_MEMORY, "reading %s", name);
    const cl_int err =
        clEnqueueReadBuffer(ctx->queue, buffer, CL_TRUE, 0, count * sizeof *cu, cu, num_events, wait_list, NULL);
    if (err != CL_SUCCESS)
        status = flashcl_fail_cl(ctx, err, "clEnqueueReadBuffer (cu_seqlens)");
    else
        status = check_cu_values(ctx, name, cu, batch, max_len, total);
    free(cu);
    return status;
}

flashcl_status flashcl_varlen_resolve(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                      const flashcl_attention_extras *extras, cl_uint num_events,
                                      const cl_event *wait_list, flashcl_varlen *out,
                                      const flashcl_attention_desc **shape_desc) {
    memset(out, 0, sizeof *out);
    *shape_desc = desc;
    if (!extras) return FLASHCL_SUCCESS;
    if (!extras->cu_seqlens_q && !extras->cu_seqlens_k) {
        /* Host copies alone describe no batch the kernels could read: refused
         * rather than silently running the call as a padded one. */
        if (extras->cu_seqlens_q_host || extras->cu_seqlens_k_host)
            return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                                "cu_seqlens_q_host / cu_seqlens_k_host are given without the device arrays "
                                "cu_seqlens_q / cu_seqlens_k (the kernels read the device ones)");
        return FLASHCL_SUCCESS;
    }
    if (!extras->cu_seqlens_q || !extras->cu_seqlens_k)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                            "a variable-length batch needs both cu_seqlens_q and cu_seqlens_k (%s is NULL)",
                            extras->cu_seqlens_q ? "cu_seqlens_k" : "cu_seqlens_q");
    /* Host copies replace the read-back only as a pair: with one, the other
     * array would still be read back and the call would block anyway. */
    if ((extras->cu_seqlens_q_host != NULL) != (extras->cu_seqlens_k_host != NULL))
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                            "host copies of the offsets come in pairs: %s is given but %s is NULL",
                            extras->cu_seqlens_q_host ? "cu_seqlens_q_host" : "cu_seqlens_k_host",
                            extras->cu_seqlens_q_host ? "cu_seqlens_k_host" : "cu_seqlens_q_host");
    flashcl_status status = flashcl_validate_desc(ctx, desc);
    if (status == FLASHCL_SUCCESS) status = flashcl_validate_wait_list(ctx, num_events, wait_list);
    if (status == FLASHCL_SUCCESS)
        status = check_cu_seqlens(ctx, "cu_seqlens_q", extras->cu_seqlens_q, extras->cu_seqlens_q_host, desc->batch,
                                  desc->seqlen_q, num_events, wait_list, &out->total_q);
    if (status == FLASHCL_SUCCESS)
        status = check_cu_seqlens(ctx, "cu_seqlens_k", extras->cu_seqlens_k, extras->cu_seqlens_k_host, desc->batch,
                                  desc->seqlen_k, num_events, wait_list, &out->total_k);
    if (status != FLASHCL_SUCCESS) return status;
    out->on = 1;
    out->cu_q = extras->cu_seqlens_q;
    out->cu_k = extras->cu_seqlens_k;
    out->packed = *desc;
    out->packed.batch = 1;
    out->packed.seqlen_q = out->total_q;
    out->packed.seqlen_k = out->total_k;
    *shape_desc = &out->packed;
    return FLASHCL_SUCCESS;
}

