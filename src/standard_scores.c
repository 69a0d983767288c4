/* standard_scores.c: sizing, checking and allocating the N x N score matrices of standard attention. */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

#include "standard.h"

/* FLASHCL_STANDARD_CHUNK_BYTES caps the size of one score buffer, so the
 * multi-buffer path (needed on real devices once S passes
 * CL_DEVICE_MAX_MEM_ALLOC_SIZE or 2^31 elements) can be exercised on small
 * problems. 0 or unset: no cap of our own. */
static size_t chunk_cap_from_environment(void) {
    const char *text = getenv("FLASHCL_STANDARD_CHUNK_BYTES");
    if (!text || !*text) return 0;
    char *end = NULL;
    unsigned long long value = strtoull(text, &end, 10);
    return (end && *end == '\0') ? (size_t)value : 0;
}

flashcl_status flashcl_scores_plan(flashcl_context *ctx, const flashcl_attention_desc *desc, int matrices,
                                   flashcl_scores *scores) {
    *scores = (flashcl_scores){0};
    scores->matrices = matrices;
    scores->heads = (size_t)desc->batch * (size_t)desc->heads_q;
    scores->head_elems = (size_t)desc->seqlen_q * (size_t)desc->seqlen_k;
    const size_t head_bytes = scores->head_elems * sizeof(float);

    /* Overflow of the total is itself "does not fit". */
    const size_t per_matrix_heads_limit = SIZE_MAX / head_bytes / (size_t)matrices;
    if (scores->heads > per_matrix_heads_limit)
        return flashcl_fail(ctx, FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY,
                            "standard attention needs %zu x %zu x %d score bytes, more than the address space",
                            scores->heads, head_bytes, matrices);
    scores->total_bytes = scores->heads * head_bytes * (size_t)matrices;

    if (ctx->memory_budget != 0 && scores->total_bytes > ctx->memory_budget)
        return flashcl_fail(ctx, FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY,
                            "standard attention needs %zu bytes for %d N x N matri%s (%zu heads of %d x %d floats); "
                            "the memory budget is %zu bytes",
                            scores->total_bytes, matrices, matrices == 1 ? "x" : "ces", scores->heads,
                            desc->seqlen_q, desc->seqlen_k, ctx->memory_budget);

    cl_ulong global_mem = 0, max_alloc = 0;
    cl_int err = clGetDeviceInfo(ctx->device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof global_mem, &global_mem, NULL);
    if (err == CL_SUCCESS)
        err = clGetDeviceInfo(ctx->device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof max_alloc, &max_alloc, NULL);
    if (err != CL_SUCCESS) return flashcl_fail_cl(ctx, err, "clGetDeviceInfo (memory sizes)");
    if ((cl_ulong)scores->total_bytes > global_mem)
        return flashcl_fail(ctx, FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY,
                            "standard attention needs %zu bytes for its N x N matrices; the device has %llu bytes "
                            "of global memory",
                            scores->total_bytes, (unsigned long long)global_mem);

    /* The largest buffer: the device's allocation limit, our test cap, and
     * CLBlast's int element indices. */
    size_t chunk_bytes = max_alloc < (cl_ulong)SIZE_MAX ? (size_t)max_alloc : SIZE_MAX;
    const size_t cap = chunk_cap_from_environment();
    if (cap != 0 && cap < chunk_bytes) chunk_bytes = cap;
    if ((size_t)INT_MAX * sizeof(float) < chunk_bytes) chunk_bytes = (size_t)INT_MAX * sizeof(float);
    if (head_bytes > chunk_bytes)
        return flashcl_fail(ctx, FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY,
                            "one head's %d x %d score matrix needs %zu bytes, more than one buffer may hold (%zu: the "
                            "device's CL_DEVICE_MAX_MEM_ALLOC_SIZE is %llu, CLBlast indexes with 32-bit ints)",
                            desc->seqlen_q, desc->seqlen_k, head_bytes, chunk_bytes, (unsigned long long)max_alloc);
    scores->heads_per_chunk = chunk_bytes / head_bytes;
    if (scores->heads_per_chunk > scores->heads) scores->heads_per_chunk = scores->heads;
    scores->chunks = (scores->heads + scores->heads_per_chunk - 1) / scores->heads_per_chunk;
    return FLASHCL_SUCCESS;
}

size_t flashcl_scores_chunk_heads(const flashcl_scores *scores, size_t chunk) {
    const size_t first = chunk * scores->heads_per_chunk;
    const size_t left = scores->heads - first;
    return left < scores->heads_per_chunk ? left : scores->heads_per_chunk;
}

flashcl_status flashcl_scores_allocate(flashcl_context *ctx, flashcl_scores *scores) {
    const size_t count = scores->chunks * (size_t)scores->matrices;
    scores->buffers = calloc(count, sizeof *scores->buffers);
    if (!scores->buffers) return flashcl_fail(ctx, FLASHCL_ERROR_OUT_OF_HOST_MEMORY, "out of host memory");
    for (size_t c = 0; c < scores->chunks; ++c) {
        const size_t bytes = flashcl_scores_chunk_heads(scores, c) * scores->head_elems * sizeof(float);
        for (int m = 0; m < scores->matrices; ++m) {
            cl_int err;
            cl_mem buffer = clCreateBuffer(ctx->context, CL_MEM_READ_WRITE, bytes, NULL, &err);
            if (err != CL_SUCCESS) {
                flashcl_scores_release(scores);
                flashcl_status status = flashcl_fail_cl(ctx, err, "clCreateBuffer (standard attention scores)");
                if (err == CL_INVALID_BUFFER_SIZE) status = FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY;
                return status;
            }
            scores->buffers[c * (size_t)scores->matrices + (size_t)m] = buffer;
        }
    }
    return FLASHCL_SUCCESS;
}

void flashcl_scores_release(flashcl_scores *scores) {
    if (!scores->buffers) return;
    for (size_t i = 0; i < scores->chunks * (size_t)scores->matrices; ++i)
        if (scores->buffers[i]) clReleaseMemObject(scores->buffers[i]);
    free(scores->buffers);
    scores->buffers = NULL;
}
