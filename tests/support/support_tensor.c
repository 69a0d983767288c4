/* support_tensor.c: poisoned device buffers, canaries and strided views with their checks. */
#include "support_tensor.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

float ts_round_to_dtype(float x, flashcl_dtype dtype) {
    switch (dtype) {
    case FLASHCL_DTYPE_F16:
        return half_to_float(float_to_half(x));
    case FLASHCL_DTYPE_BF16:
        return bf16_to_float(float_to_bf16(x));
    default:
        return x;
    }
}

/* ---- plain buffers ---------------------------------------------------- */

cl_mem ts_buffer(cl_context context, size_t bytes, const void *host) {
    unsigned char *poison = NULL;
    if (!host) {
        poison = malloc(bytes ? bytes : 1);
        ck_assert_msg(poison != NULL, "out of host memory");
        const uint32_t word = TS_POISON_F32;
        unsigned char pattern[sizeof word];
        memcpy(pattern, &word, sizeof word);
        for (size_t i = 0; i < bytes; ++i) poison[i] = pattern[i % sizeof word];
    }
    cl_int err;
    cl_mem m = clCreateBuffer(context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, host ? (void *)host : poison,
                              &err);
    free(poison);
    ck_assert_msg(err == CL_SUCCESS, "clCreateBuffer(%zu bytes): %d", bytes, (int)err);
    return m;
}

float *ts_read_floats(cl_command_queue queue, cl_mem m, size_t n) {
    float *x = malloc((n ? n : 1) * sizeof *x);
    ck_assert_msg(x != NULL, "out of host memory");
    ck_assert_int_eq(clEnqueueReadBuffer(queue, m, CL_TRUE, 0, n * sizeof *x, x, 0, NULL, NULL), CL_SUCCESS);
    return x;
}

int ts_is_poison(float x) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    return bits == TS_POISON_F32;
}

void ts_assert_canary(const char *label, const char *what, const float *x, size_t n) {
    for (size_t i = n; i < n + TS_CANARY_ELEMS; ++i)
        ck_assert_msg(ts_is_poison(x[i]), "%s: %s written %zu elements past its end", label, what, i - n);
}

/* ---- strided device tensors surrounded by poison --------------------- */

static void store_element(unsigned char *at, flashcl_dtype dtype, float x) {
    if (dtype == FLASHCL_DTYPE_F32) {
        memcpy(at, &x, sizeof x);
    } else {
        uint16_t h = dtype == FLASHCL_DTYPE_F16 ? float_to_half(x) : float_to_bf16(x);
        memcpy(at, &h, sizeof h);
    }
}

static float load_element(const unsigned char *at, flashcl_dtype dtype) {
    if (dtype == FLASHCL_DTYPE_F32) {
        float x;
        memcpy(&x, at, sizeof x);
        return x;
    }
    uint16_t h;
    memcpy(&h, at, sizeof h);
    return dtype == FLASHCL_DTYPE_F16 ? half_to_float(h) : bf16_to_float(h);
}

static int is_poison_element(const unsigned char *at, size_t elem_size) {
    if (elem_size == 4) {
        uint32_t u;
        memcpy(&u, at, sizeof u);
        return u == TS_POISON_F32;
    }
    uint16_t h;
    memcpy(&h, at, sizeof h);
    return h == TS_POISON_16;
}

flashcl_tensor ts_strided_view(const ts_placement *place, size_t batch, size_t heads, size_t seqlen, size_t dim) {
    (void)batch;
    flashcl_tensor t = {NULL, place->offset, 0, 0, 0};
    const size_t pad = place->pad;
    if (place->layout == FLASHCL_LAYOUT_BSHD) {
        t.stride_head = dim + pad;
        t.stride_seq = heads * t.stride_head + pad;
        t.stride_batch = seqlen * t.stride_seq + pad;
    } else {
        t.stride_seq = dim + pad;
        t.stride_head = seqlen * t.stride_seq + pad;
        t.stride_batch = heads * t.stride_head + pad;
    }
    return t;
}

static size_t element_index(const ts_tensor *t, size_t b, size_t h, size_t s, size_t d) {
    return t->view.offset + b * t->view.stride_batch + h * t->view.stride_head + s * t->view.stride_seq + d;
}

void ts_tensor_create(ts_tensor *t, cl_context context, const ts_placement *place, size_t batch, size_t heads,
                      size_t seqlen, size_t dim, flashcl_dtype dtype, const float *values) {
    const flashcl_tensor view = ts_strided_view(place, batch, heads, seqlen, dim);
    ts_tensor_create_strided(t, context, &view, batch, heads, seqlen, dim, dtype, values);
}

void ts_tensor_create_strided(ts_tensor *t, cl_context context, const flashcl_tensor *view, size_t batch,
                              size_t heads, size_t seqlen, size_t dim, flashcl_dtype dtype, const float *values) {
    memset(t, 0, sizeof *t);
    t->view = *view;
    t->view.buffer = NULL;
    t->batch = batch, t->heads = heads, t->seqlen = seqlen, t->dim = dim;
    t->dtype = dtype;
    t->elem_size = flashcl_dtype_size(dtype);
    t->capacity = element_index(t, batch - 1, heads - 1, seqlen - 1, dim - 1) + 1 + TS_CANARY_ELEMS;
    const size_t bytes = t->capacity * t->elem_size;
    t->image = malloc(bytes);
    t->initial = malloc(bytes);
    ck_assert_msg(t->image && t->initial, "out of host memory");
    for (size_t i = 0; i < t->capacity; ++i) {
        if (t->elem_size == 4) {
            const uint32_t p = TS_POISON_F32;
            memcpy(t->initial + 4 * i, &p, 4);
        } else {
            const uint16_t p = TS_POISON_16;
            memcpy(t->initial + 2 * i, &p, 2);
        }
    }
    if (values) {
        size_t n = 0;
        for (size_t b = 0; b < batch; ++b)
            for (size_t h = 0; h < heads; ++h)
                for (size_t s = 0; s < seqlen; ++s)
                    for (size_t d = 0; d < dim; ++d)
                        store_element(t->initial + element_index(t, b, h, s, d) * t->elem_size, dtype, values[n++]);
    }
    memcpy(t->image, t->initial, bytes);
    cl_int err;
    t->view.buffer = clCreateBuffer(context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, t->initial, &err);
    ck_assert_msg(err == CL_SUCCESS, "clCreateBuffer(%zu bytes) failed: %d", bytes, (int)err);
}

void ts_tensor_free(ts_tensor *t) {
    if (t->view.buffer) clReleaseMemObject(t->view.buffer);
    free(t->image);
    free(t->initial);
    memset(t, 0, sizeof *t);
}

void ts_tensor_reset(cl_command_queue queue, ts_tensor *t) {
    const size_t bytes = t->capacity * t->elem_size;
    cl_int err = clEnqueueWriteBuffer(queue, t->view.buffer, CL_TRUE, 0, bytes, t->initial, 0, NULL, NULL);
    ck_assert_msg(err == CL_SUCCESS, "clEnqueueWriteBuffer failed: %d", (int)err);
    memcpy(t->image, t->initial, bytes);
}

void ts_tensor_read(cl_command_queue queue, ts_tensor *t) {
    cl_int err = clEnqueueReadBuffer(queue, t->view.buffer, CL_TRUE, 0, t->capacity * t->elem_size, t->image, 0,
                                     NULL, NULL);
    ck_assert_msg(err == CL_SUCCESS, "clEnqueueReadBuffer failed: %d", (int)err);
}

void ts_assert_written_exactly(const ts_tensor *t, const char *name) {
    unsigned char *in_view = calloc(t->capacity, 1);
    ck_assert_msg(in_view != NULL, "out of host memory");
    size_t unwritten = 0, first_unwritten = 0;
    for (size_t b = 0; b < t->batch; ++b)
        for (size_t h = 0; h < t->heads; ++h)
            for (size_t s = 0; s < t->seqlen; ++s)
                for (size_t d = 0; d < t->dim; ++d) {
                    const size_t i = element_index(t, b, h, s, d);
                    in_view[i] = 1;
                    if (is_poison_element(t->image + i * t->elem_size, t->elem_size) && unwritten++ == 0)
                        first_unwritten = i;
                }
    size_t stray = 0, first_stray = 0;
    for (size_t i = 0; i < t->capacity; ++i)
        if (!in_view[i] && memcmp(t->image + i * t->elem_size, t->initial + i * t->elem_size, t->elem_size) != 0 &&
            stray++ == 0)
            first_stray = i;
    free(in_view);
    ck_assert_msg(unwritten == 0, "%s: %zu view elements never written (first at element %zu)", name, unwritten,
                  first_unwritten);
    ck_assert_msg(stray == 0, "%s: %zu elements outside the view were written (first at element %zu of %zu)", name,
                  stray, first_stray, t->capacity);
}

void ts_assert_untouched(cl_command_queue queue, ts_tensor *t, const char *name) {
    ts_tensor_read(queue, t);
    size_t changed = 0, first = 0;
    for (size_t i = 0; i < t->capacity; ++i)
        if (memcmp(t->image + i * t->elem_size, t->initial + i * t->elem_size, t->elem_size) != 0 && changed++ == 0)
            first = i;
    ck_assert_msg(changed == 0, "%s: %zu elements changed (first at element %zu)", name, changed, first);
}

void ts_tensor_gather(const ts_tensor *t, float *bhsd) {
    size_t n = 0;
    for (size_t b = 0; b < t->batch; ++b)
        for (size_t h = 0; h < t->heads; ++h)
            for (size_t s = 0; s < t->seqlen; ++s)
                for (size_t d = 0; d < t->dim; ++d)
                    bhsd[n++] = load_element(t->image + element_index(t, b, h, s, d) * t->elem_size, t->dtype);
}

void ts_tensor_read_output(cl_command_queue queue, ts_tensor *t, const char *name, float *bhsd) {
    ts_tensor_read(queue, t);
    ts_assert_written_exactly(t, name);
    ts_tensor_gather(t, bhsd);
}
