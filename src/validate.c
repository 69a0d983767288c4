/* validate.c: argument checks run before anything is enqueued, so a bad call writes nothing. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "struct_abi.h"
#include "validate.h"

flashcl_status flashcl_validate_desc(flashcl_context *ctx, const flashcl_attention_desc *desc) {
    if (!desc) return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "desc is NULL");
    /* The public calls import the caller's desc first (struct_abi.h), which leaves this library's size in
     * struct_size. A call that reaches here without importing still gets the size checked; a larger struct
     * is then safe to read in place, an older (smaller) one is not. */
    if (desc->struct_size != sizeof *desc) {
        flashcl_attention_desc checked;
        flashcl_status status = flashcl_struct_import(ctx, &flashcl_abi_attention_desc, desc, &checked);
        if (status != FLASHCL_SUCCESS) return status;
        if (desc->struct_size < sizeof *desc)
            return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                                "flashcl_attention_desc.struct_size is %zu, an older version this call cannot read",
                                desc->struct_size);
    }
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
    /* The kernels compute their band bounds in 32-bit int. With each side
     * clamped to W = seqlen_q + seqlen_k (flashcl_features_resolve: no row
     * reaches that far), the largest is q_last + diagonal + window_right + 1
     * <= seqlen_q + 2 * seqlen_k (forward, dQ) and k_last - diagonal +
     * window_left + 1 <= 2 * seqlen_q + seqlen_k (dK/dV); the most negative,
     * k0 - diagonal - window_right >= -2 * seqlen_k and q0 + diagonal -
     * window_left >= -2 * seqlen_q, are smaller in magnitude. */
    if (desc->sliding_window && (desc->window_left >= 0 || desc->window_right >= 0)) {
        const size_t sq = (size_t)desc->seqlen_q, sk = (size_t)desc->seqlen_k;
        if (sq + 2 * sk > INT32_MAX || 2 * sq + sk > INT32_MAX)
            return flashcl_fail(ctx, FLASHCL_ERROR_UNSUPPORTED,
                                "a window needs seqlen_q + 2 * seqlen_k and 2 * seqlen_q + seqlen_k below 2^31 "
                                "(seqlen_q %d, seqlen_k %d): the kernels' band bounds are 32-bit",
                                desc->seqlen_q, desc->seqlen_k);
    }
    /* Without a window the kernels' bounds still step in 32-bit int past a
     * sequence by up to one block (at most 1024 rows, plan_check's limit):
     * causal ends such as q0 + block_q + seqlen_k - seqlen_q and starts such
     * as k0 - (seqlen_k - seqlen_q) stay below seqlen_q + seqlen_k + 1024. */
    if ((size_t)desc->seqlen_q + (size_t)desc->seqlen_k + 1024 > INT32_MAX)
        return flashcl_fail(ctx, FLASHCL_ERROR_UNSUPPORTED,
                            "seqlen_q + seqlen_k (%d + %d) must stay below 2^31 - 1024: the kernels' row and key "
                            "bounds are 32-bit",
                            desc->seqlen_q, desc->seqlen_k);
    /* The kernels take (batch, head) from get_group_id as a 32-bit int. */
    if ((size_t)desc->batch * (size_t)desc->heads_q > INT32_MAX)
        return flashcl_fail(ctx, FLASHCL_ERROR_UNSUPPORTED,
                            "batch x heads_q (%d x %d) exceeds 2^31 - 1: the kernels index (batch, head) pairs "
                            "with 32-bit ints",
                            desc->batch, desc->heads_q);
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

    flashcl_byte_extent(t->buffer, t->offset * shape->elem_size, needed, extent);
    extent->elem_size = shape->elem_size;
    const size_t sizes[4] = {shape->batch, shape->heads, shape->seqlen, shape->dim};
    const size_t strides[4] = {t->stride_batch, t->stride_head, t->stride_seq, 1};
    memcpy(extent->sizes, sizes, sizeof sizes);
    memcpy(extent->strides, strides, sizeof strides);
    return FLASHCL_SUCCESS;
}

void flashcl_byte_extent(cl_mem buffer, size_t begin, size_t end, flashcl_extent *extent) {
    /* Resolve sub-buffers so overlap checks see through them. */
    cl_mem parent = NULL;
    size_t origin = 0;
    cl_int err = clGetMemObjectInfo(buffer, CL_MEM_ASSOCIATED_MEMOBJECT, sizeof parent, &parent, NULL);
    if (err == CL_SUCCESS && parent) err = clGetMemObjectInfo(buffer, CL_MEM_OFFSET, sizeof origin, &origin, NULL);
    if (err != CL_SUCCESS) parent = NULL, origin = 0;
    memset(extent, 0, sizeof *extent);
    extent->root = parent ? parent : buffer;
    extent->begin = origin + begin;
    extent->end = origin + end;
}

/* One axis of the difference of two views' index vectors: i - j ranges over
 * [lo, hi] and moves the address by stride elements per step. */
typedef struct diff_axis {
    long long lo, hi, stride;
} diff_axis;

/* 1 if some d with axes[k].lo <= d[k] <= axes[k].hi gives sum(d[k] *
 * stride[k]) = target, 0 if none does, -1 if the search ran out of budget.
 * A complete search: at each axis it tries every d[k] that leaves a
 * remainder the later axes can still reach (rest_lo[k] .. rest_hi[k]). With
 * strides sorted largest first and one-to-one views that is at most two
 * values per axis; the budget only guards strange strides. */
static int reachable(const diff_axis *axes, const long long *rest_lo, const long long *rest_hi, int k, int count,
                     long long target, long *budget) {
    if (k == count) return target == 0;
    if (--*budget < 0) return -1;
    const diff_axis *a = &axes[k];
    /* d * stride must lie in [target - rest_hi, target - rest_lo]. */
    const long long low = target - rest_hi[k], high = target - rest_lo[k];
    long long d_min = low >= 0 ? (low + a->stride - 1) / a->stride : -((-low) / a->stride);
    long long d_max = high >= 0 ? high / a->stride : -((-high + a->stride - 1) / a->stride);
    if (d_min < a->lo) d_min = a->lo;
    if (d_max > a->hi) d_max = a->hi;
    int undecided = 0;
    for (long long d = d_min; d <= d_max; ++d) {
        const int r = reachable(axes, rest_lo, rest_hi, k + 1, count, target - d * a->stride, budget);
        if (r == 1) return 1;
        if (r < 0) undecided = 1;
        if (*budget < 0) return -1;
    }
    return undecided ? -1 : 0;
}

/* Whether views a and b, on one root with the same element size and
 * strides (where they apply), share a byte: 1 yes, 0 no, -1 not decided
 * (other geometry, or numbers too large to search safely; the caller then
 * falls back to comparing byte spans). Element i of a starts at byte
 * a->begin + e * sum(i * stride), element j of b at b->begin + e * sum(j *
 * stride); the two e-byte elements share a byte iff their starts differ by
 * less than e, i.e. e * sum((i - j) * stride) lies strictly between
 * delta - e and delta + e, delta = b->begin - a->begin. */
static int views_overlap_exactly(const flashcl_extent *a, const flashcl_extent *b) {
    const size_t e = a->elem_size;
    if (e == 0 || b->elem_size != e) return -1;
    /* The stride of an axis where both views have one index never applies. */
    for (int k = 0; k < 4; ++k)
        if ((a->sizes[k] > 1 || b->sizes[k] > 1) && a->strides[k] != b->strides[k]) return -1;
    /* Every quantity below is bounded by the buffer's size in bytes (the
     * views were checked to fit): below 2^62 nothing overflows. */
    const size_t limit = (size_t)1 << 62;
    if (a->end > limit || b->end > limit) return -1;
    diff_axis axes[4];
    int count = 0;
    for (int k = 0; k < 4; ++k) {
        if (a->strides[k] == 0 || (a->sizes[k] == 1 && b->sizes[k] == 1)) continue; /* moves nothing */
        const diff_axis axis = {-(long long)(b->sizes[k] - 1), (long long)(a->sizes[k] - 1),
                                (long long)a->strides[k]};
        int at = count++;
        for (; at > 0 && axes[at - 1].stride < axis.stride; --at) axes[at] = axes[at - 1];
        axes[at] = axis;
    }
    long long rest_lo[5] = {0}, rest_hi[5] = {0};
    for (int k = count - 1; k >= 0; --k) {
        rest_lo[k] = rest_lo[k + 1] + axes[k].lo * axes[k].stride;
        rest_hi[k] = rest_hi[k + 1] + axes[k].hi * axes[k].stride;
    }
    const long long delta = (long long)b->begin - (long long)a->begin, size = (long long)e;
    /* The element-count differences whose byte distance is within (delta - e, delta + e). */
    const long long below = delta >= 0 ? delta / size : -((-delta + size - 1) / size);
    const long long targets[2] = {below, below + 1};
    const int target_count = below * size == delta ? 1 : 2;
    long budget = 1L << 16;
    int undecided = 0;
    for (int t = 0; t < target_count; ++t) {
        const int r = reachable(axes, rest_lo, rest_hi, 0, count, targets[t], &budget);
        if (r == 1) return 1;
        if (r < 0) undecided = 1;
    }
    return undecided ? -1 : 0;
}

flashcl_status flashcl_check_no_overlap(flashcl_context *ctx, const char *output_name, const flashcl_extent *output,
                                        const char *other_name, const flashcl_extent *other) {
    if (output->root == other->root && output->begin < other->end && other->begin < output->end &&
        views_overlap_exactly(output, other) != 0)
        return flashcl_fail(ctx, FLASHCL_ERROR_ALIASING,
                            "output %s overlaps %s (bytes %zu..%zu and %zu..%zu of one buffer)", output_name,
                            other_name, output->begin, output->end, other->begin, other->end);
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_validate_wait_list(flashcl_context *ctx, cl_uint count, const cl_event *list) {
    if ((count > 0) != (list != NULL))
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                            "event wait list: count %u does not match the list pointer", (unsigned)count);
    for (cl_uint i = 0; i < count; ++i) {
        if (!list[i]) return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "event wait list entry %u is NULL", i);
        /* OpenCL leaves waiting on another context's event undefined (POCL
         * runs the call anyway): refuse it here, where it is clear. */
        cl_context owner = NULL;
        const cl_int err = clGetEventInfo(list[i], CL_EVENT_CONTEXT, sizeof owner, &owner, NULL);
        if (err != CL_SUCCESS)
            return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "event wait list entry %u is not a valid event (%s)",
                                i, flashcl_cl_error_name(err));
        if (owner != ctx->context)
            return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                                "event wait list entry %u belongs to another cl_context than the flashcl context's", i);
    }
    return FLASHCL_SUCCESS;
}

/* a * b into *out unless it overflows size_t. */
static int mul_size(size_t a, size_t b, size_t *out) {
    if (b != 0 && a > SIZE_MAX / b) return 0;
    *out = a * b;
    return 1;
}

flashcl_status flashcl_host_array_bytes(flashcl_context *ctx, const flashcl_attention_desc *d, size_t *q_bytes,
                                        size_t *kv_bytes, size_t *lse_bytes) {
    size_t bh_q, bh_kv, rows_q, rows_kv;
    if (mul_size((size_t)d->batch, (size_t)d->heads_q, &bh_q) && mul_size((size_t)d->batch, (size_t)d->heads_kv, &bh_kv) &&
        mul_size(bh_q, (size_t)d->seqlen_q, &rows_q) && mul_size(bh_kv, (size_t)d->seqlen_k, &rows_kv) &&
        mul_size(rows_q, sizeof(float), lse_bytes) && mul_size(rows_q, (size_t)d->head_dim * sizeof(float), q_bytes) &&
        mul_size(rows_kv, (size_t)d->head_dim * sizeof(float), kv_bytes))
        return FLASHCL_SUCCESS;
    return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                        "the host arrays of batch %d, heads %d/%d, seqlen %d/%d, head_dim %d exceed the address space",
                        d->batch, d->heads_q, d->heads_kv, d->seqlen_q, d->seqlen_k, d->head_dim);
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
