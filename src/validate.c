/* validate.c: argument checks run before anything is enqueued, so a bad call writes nothing. */
#include <math.h>
#include <stdint.h>

#include "validate.h"

flashcl_status flashcl_validate_desc(flashcl_context *ctx, const flashcl_attention_desc *desc) {
    if (!desc) return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "desc is NULL");
    if (desc->batch < 1 || desc->heads_q < 1 || desc->heads_kv < 1 || desc->seqlen_q < 1 || desc->seqlen_k < 1)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                            "batch (%d), heads_q (%d), heads_kv (%d), seqlen_q (%d) and seqlen_k (%d) must be >= 1",
                            desc->batch, desc->heads_q, desc->heads_kv, desc->seqlen_q, desc->seqlen_k);
    if (desc->head_dim < 1 || desc->head_dim > FLASHCL_MAX_HEAD_DIM)
        return flashcl_fail(ctx, desc->head_dim < 1 ? FLASHCL_ERROR_INVALID_ARGUMENT : FLASHCL_ERROR_UNSUPPORTED,
                            "head_dim %d is outside 1..%d", desc->head_dim, FLASHCL_MAX_HEAD_DIM);
    if (desc->heads_q % desc->heads_kv != 0)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "heads_q (%d) is not a multiple of heads_kv (%d)",
                            desc->heads_q, desc->heads_kv);
    if (flashcl_dtype_size(desc->dtype) == 0)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "unknown dtype %d", (int)desc->dtype);
    if (!isfinite(desc->scale) || desc->scale < 0.0f)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                            "scale %g must be finite and positive (0 selects 1/sqrt(head_dim))", (double)desc->scale);
    if (desc->sliding_window && (desc->window_left < -1 || desc->window_right < -1))
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                            "window_left (%d) and window_right (%d) must be >= 0, or -1 for unbounded",
                            desc->window_left, desc->window_right);
    if (!(desc->dropout_p >= 0.0f && desc->dropout_p < 1.0f))
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "dropout_p %g must be in [0, 1)",
                            (double)desc->dropout_p);
    /* The kernels widen an unbounded window side to seqlen_q + seqlen_k. */
    if (desc->sliding_window && (desc->window_left >= 0 || desc->window_right >= 0) &&
        (size_t)desc->seqlen_q + (size_t)desc->seqlen_k > INT32_MAX)
        return flashcl_fail(ctx, FLASHCL_ERROR_UNSUPPORTED, "a window needs seqlen_q + seqlen_k below 2^31");
    if ((size_t)desc->batch * (size_t)desc->heads_q > UINT32_MAX)
        return flashcl_fail(ctx, FLASHCL_ERROR_UNSUPPORTED, "batch x heads_q exceeds 2^32");
    return FLASHCL_SUCCESS;
}

/* a*b + c, or 0 (with *overflow set) if it does not fit in size_t. */
static size_t mul_add(size_t a, size_t b, size_t c, int *overflow) {
    if (a != 0 && b > (SIZE_MAX - c) / a) {
        *overflow = 1;
        return 0;
    }
    return a * b + c;
}

/* True if no two index tuples of the view map to one element: with dims
 * sorted by stride, each stride must step past everything the smaller
 * dims span. */
static int view_is_one_to_one(const size_t sizes[4], const size_t strides[4]) {
    size_t order[4] = {0, 1, 2, 3};
    for (int i = 1; i < 4; ++i)
        for (int j = i; j > 0 && strides[order[j]] < strides[order[j - 1]]; --j) {
            size_t tmp = order[j];
            order[j] = order[j - 1];
            order[j - 1] = tmp;
        }
    size_t span = 1; /* elements covered by the dims seen so far */
    for (int i = 0; i < 4; ++i) {
        size_t dim = order[i];
        if (sizes[dim] <= 1) continue;
        if (strides[dim] < span) return 0;
        span = strides[dim] * (sizes[dim] - 1) + span;
    }
    return 1;
}

flashcl_status flashcl_validate_tensor(flashcl_context *ctx, const char *name, const flashcl_tensor *t,
                                       const flashcl_shape *shape, int is_output, flashcl_extent *extent) {
    if (!t) return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "%s is NULL", name);
    if (!t->buffer) return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "%s's buffer is NULL", name);
    cl_context owner = NULL;
    size_t buffer_bytes = 0;
    cl_int err = clGetMemObjectInfo(t->buffer, CL_MEM_CONTEXT, sizeof owner, &owner, NULL);
    if (err == CL_SUCCESS) err = clGetMemObjectInfo(t->buffer, CL_MEM_SIZE, sizeof buffer_bytes, &buffer_bytes, NULL);
    if (err != CL_SUCCESS)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "%s's buffer is not a valid cl_mem (%s)", name,
                            flashcl_cl_error_name(err));
    if (owner != ctx->context)
        return flashcl_fail(ctx, FLASHCL_ERROR_WRONG_CONTEXT, "%s's buffer belongs to another OpenCL context", name);

    /* Last element index = offset + sum((size-1) * stride) + dim - 1. */
    int overflow = 0;
    size_t last = t->offset;
    last = mul_add(shape->batch - 1, t->stride_batch, last, &overflow);
    last = mul_add(shape->heads - 1, t->stride_head, last, &overflow);
    last = mul_add(shape->seqlen - 1, t->stride_seq, last, &overflow);
    last = mul_add(1, shape->dim - 1, last, &overflow);
    size_t needed = mul_add(last + 1, shape->elem_size, 0, &overflow);
    if (overflow || last == SIZE_MAX)
        return flashcl_fail(ctx, FLASHCL_ERROR_BUFFER_TOO_SMALL, "%s: offset and strides overflow the address space",
                            name);
    if (needed > buffer_bytes)
        return flashcl_fail(ctx, FLASHCL_ERROR_BUFFER_TOO_SMALL,
                            "%s needs %zu bytes (offset %zu, strides %zu/%zu/%zu, shape %zux%zux%zux%zu) but its "
                            "buffer has %zu",
                            name, needed, t->offset, t->stride_batch, t->stride_head, t->stride_seq, shape->batch,
                            shape->heads, shape->seqlen, shape->dim, buffer_bytes);
    if (is_output) {
        const size_t sizes[4] = {shape->batch, shape->heads, shape->seqlen, shape->dim};
        const size_t strides[4] = {t->stride_batch, t->stride_head, t->stride_seq, 1};
        if (!view_is_one_to_one(sizes, strides))
            return flashcl_fail(ctx, FLASHCL_ERROR_ALIASING,
                                "output %s's strides (%zu/%zu/%zu) map several elements to one address", name,
                                t->stride_batch, t->stride_head, t->stride_seq);
    }

    /* Resolve sub-buffers so overlap checks see through them. */
    cl_mem parent = NULL;
    size_t origin = 0;
    err = clGetMemObjectInfo(t->buffer, CL_MEM_ASSOCIATED_MEMOBJECT, sizeof parent, &parent, NULL);
    if (err == CL_SUCCESS && parent)
        err = clGetMemObjectInfo(t->buffer, CL_MEM_OFFSET, sizeof origin, &origin, NULL);
    if (err != CL_SUCCESS) parent = NULL, origin = 0;
    extent->root = parent ? parent : t->buffer;
    extent->begin = origin + t->offset * shape->elem_size;
    extent->end = origin + needed;
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_check_no_overlap(flashcl_context *ctx, const char *output_name, const flashcl_extent *output,
                                        const char *other_name, const flashcl_extent *other) {
    if (output->root == other->root && output->begin < other->end && other->begin < output->end)
        return flashcl_fail(ctx, FLASHCL_ERROR_ALIASING,
                            "output %s overlaps %s (bytes %zu..%zu and %zu..%zu of one buffer)", output_name,
                            other_name, output->begin, output->end, other->begin, other->end);
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_validate_wait_list(flashcl_context *ctx, cl_uint count, const cl_event *list) {
    if ((count > 0) != (list != NULL))
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                            "event wait list: count %u does not match the list pointer", (unsigned)count);
    for (cl_uint i = 0; i < count; ++i)
        if (!list[i]) return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "event wait list entry %u is NULL", i);
    return FLASHCL_SUCCESS;
}

void flashcl_attention_shapes(const flashcl_attention_desc *d, flashcl_shape *q, flashcl_shape *kv,
                              flashcl_shape *lse) {
    const size_t elem = flashcl_dtype_size(d->dtype);
    *q = (flashcl_shape){(size_t)d->batch, (size_t)d->heads_q, (size_t)d->seqlen_q, (size_t)d->head_dim, elem};
    *kv = (flashcl_shape){(size_t)d->batch, (size_t)d->heads_kv, (size_t)d->seqlen_k, (size_t)d->head_dim, elem};
    *lse = (flashcl_shape){(size_t)d->batch, (size_t)d->heads_q, (size_t)d->seqlen_q, 1, sizeof(float)};
}

#define MAX_CALL_TENSORS 12

flashcl_status flashcl_validate_call(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                     const flashcl_call_tensor *tensors, int count, cl_uint num_events,
                                     const cl_event *wait_list) {
    flashcl_status status = flashcl_validate_desc(ctx, desc);
    if (status != FLASHCL_SUCCESS) return status;
    if (count > MAX_CALL_TENSORS) return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "too many tensors");
    flashcl_shape shapes[3];
    flashcl_attention_shapes(desc, &shapes[FLASHCL_SHAPE_Q], &shapes[FLASHCL_SHAPE_KV], &shapes[FLASHCL_SHAPE_LSE]);
    flashcl_extent extents[MAX_CALL_TENSORS];
    for (int i = 0; i < count; ++i) {
        const flashcl_call_tensor *t = &tensors[i];
        if (!t->tensor && t->optional) continue;
        status = flashcl_validate_tensor(ctx, t->name, t->tensor, &shapes[t->kind], t->is_output, &extents[i]);
        if (status != FLASHCL_SUCCESS) return status;
    }
    for (int i = 0; i < count; ++i) {
        if (!tensors[i].is_output || !tensors[i].tensor) continue;
        for (int j = 0; j < count; ++j) {
            if (j == i || !tensors[j].tensor || (tensors[j].is_output && j < i)) continue;
            status = flashcl_check_no_overlap(ctx, tensors[i].name, &extents[i], tensors[j].name, &extents[j]);
            if (status != FLASHCL_SUCCESS) return status;
        }
    }
    return flashcl_validate_wait_list(ctx, num_events, wait_list);
}

flashcl_status flashcl_validate_forward_args(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                             const flashcl_tensor *q, const flashcl_tensor *k,
                                             const flashcl_tensor *v, const flashcl_tensor *o,
                                             const flashcl_tensor *lse, cl_uint num_events,
                                             const cl_event *wait_list) {
    const flashcl_call_tensor tensors[] = {
        {"q", q, FLASHCL_SHAPE_Q, 0, 0},        {"k", k, FLASHCL_SHAPE_KV, 0, 0},
        {"v", v, FLASHCL_SHAPE_KV, 0, 0},       {"o", o, FLASHCL_SHAPE_Q, 1, 0},
        {"lse", lse, FLASHCL_SHAPE_LSE, 1, 1},
    };
    return flashcl_validate_call(ctx, desc, tensors, (int)(sizeof tensors / sizeof tensors[0]), num_events,
                                 wait_list);
}
