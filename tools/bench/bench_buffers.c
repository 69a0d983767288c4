/* bench_buffers.c: allocation of a size's device tensors and their random contents, plus reading results back. */
#include "bench_buffers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "half_float.h"

/* splitmix64: tiny, seedable, good enough to make inputs that are not zeros
 * and differ from size to size. */
uint64_t bench_random_next(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float uniform_pm1(uint64_t *state) {
    return (float)((double)(bench_random_next(state) >> 40) * (2.0 / 16777216.0) - 1.0);
}

static flashcl_status status_of_cl(cl_int err) {
    switch (err) {
    case CL_MEM_OBJECT_ALLOCATION_FAILURE:
    case CL_OUT_OF_RESOURCES:
    case CL_INVALID_BUFFER_SIZE: return FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY;
    case CL_OUT_OF_HOST_MEMORY: return FLASHCL_ERROR_OUT_OF_HOST_MEMORY;
    default: return FLASHCL_ERROR_OPENCL;
    }
}

/* Writes `count` floats to out as elements of dtype. */
static void store_as(flashcl_dtype dtype, const float *in, size_t count, void *out) {
    if (dtype == FLASHCL_DTYPE_F32) {
        memcpy(out, in, count * sizeof(float));
        return;
    }
    uint16_t *bits = out;
    for (size_t i = 0; i < count; ++i)
        bits[i] = dtype == FLASHCL_DTYPE_F16 ? float_to_half(in[i]) : float_to_bf16(in[i]);
}

typedef struct upload_state {
    flashcl_context *ctx;
    flashcl_dtype dtype;
    size_t count;
    float *values;  /* count floats */
    void *staging;  /* count elements of dtype */
    cl_int err;
} upload_state;

/* A buffer of `count` elements of dtype (bytes given), filled from the
 * random stream when fill is set. The write forces the allocation, so a
 * lazily allocating driver reports a lack of memory here, not mid-run. */
static cl_mem make_buffer(upload_state *s, size_t bytes, int fill, uint64_t *random_state) {
    if (s->err != CL_SUCCESS) return NULL;
    cl_mem buffer = clCreateBuffer(flashcl_context_cl_context(s->ctx), CL_MEM_READ_WRITE, bytes, NULL, &s->err);
    if (s->err != CL_SUCCESS) return NULL;
    if (fill) {
        for (size_t i = 0; i < s->count; ++i) s->values[i] = uniform_pm1(random_state);
        store_as(s->dtype, s->values, s->count, s->staging);
        s->err = clEnqueueWriteBuffer(flashcl_context_queue(s->ctx), buffer, CL_TRUE, 0, bytes, s->staging, 0, NULL,
                                      NULL);
    } else {
        /* Outputs get a pattern too: touching the memory commits it. */
        const cl_uchar pattern = 0;
        s->err = clEnqueueFillBuffer(flashcl_context_queue(s->ctx), buffer, &pattern, 1, 0, bytes, 0, NULL, NULL);
        if (s->err == CL_SUCCESS) s->err = clFinish(flashcl_context_queue(s->ctx));
    }
    if (s->err != CL_SUCCESS) {
        clReleaseMemObject(buffer);
        return NULL;
    }
    return buffer;
}

static int query_memory(flashcl_context *ctx, cl_ulong *global, cl_ulong *max_alloc) {
    cl_device_id device = flashcl_context_device(ctx);
    return clGetDeviceInfo(device, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof *global, global, NULL) == CL_SUCCESS &&
           clGetDeviceInfo(device, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof *max_alloc, max_alloc, NULL) == CL_SUCCESS;
}

flashcl_status bench_buffers_create(flashcl_context *ctx, const flashcl_attention_desc *desc, int with_gradients,
                                    double scratch_hint, uint64_t seed, bench_buffers *out, char *message,
                                    size_t message_size) {
    memset(out, 0, sizeof *out);
    message[0] = '\0';
    const size_t elements = (size_t)desc->batch * desc->heads_q * desc->seqlen_q * desc->head_dim;
    const size_t tensor_bytes = elements * flashcl_dtype_size(desc->dtype);
    const size_t lse_bytes = (size_t)desc->batch * desc->heads_q * desc->seqlen_q * sizeof(float);
    const int inputs_per_set = with_gradients ? 4 : 3;  /* Q, K, V (, dO) */
    const int outputs = with_gradients ? 4 : 1;         /* O (, dQ, dK, dV) */

    cl_ulong global_bytes = 0, max_alloc = 0;
    if (!query_memory(ctx, &global_bytes, &max_alloc)) {
        snprintf(message, message_size, "clGetDeviceInfo (memory sizes) failed");
        return FLASHCL_ERROR_OPENCL;
    }
    const double one_set = (double)inputs_per_set * (double)tensor_bytes;
    const double fixed = (double)outputs * (double)tensor_bytes + (double)lse_bytes;
    if ((double)tensor_bytes > (double)max_alloc || fixed + one_set > (double)global_bytes) {
        snprintf(message, message_size, "Q, K, V, O need %.0f bytes (tensors of %zu bytes) but the device has %llu "
                 "(largest buffer %llu)", fixed + one_set, tensor_bytes, (unsigned long long)global_bytes,
                 (unsigned long long)max_alloc);
        return FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY;
    }
    /* Half the device for everything keeps room for the driver and other users. */
    out->set_count = fixed + 2.0 * one_set + scratch_hint <= 0.5 * (double)global_bytes ? 2 : 1;
    out->elements = elements;

    upload_state s = {ctx, desc->dtype, elements, malloc(elements * sizeof(float)), malloc(tensor_bytes), CL_SUCCESS};
    if (!s.values || !s.staging) {
        free(s.values);
        free(s.staging);
        snprintf(message, message_size, "no host memory to stage %zu bytes of inputs", tensor_bytes);
        return FLASHCL_ERROR_OUT_OF_HOST_MEMORY;
    }
    uint64_t random_state = seed;
    for (int set = 0; set < out->set_count; ++set) {
        out->q[set] = make_buffer(&s, tensor_bytes, 1, &random_state);
        out->k[set] = make_buffer(&s, tensor_bytes, 1, &random_state);
        out->v[set] = make_buffer(&s, tensor_bytes, 1, &random_state);
        if (with_gradients) out->dout[set] = make_buffer(&s, tensor_bytes, 1, &random_state);
    }
    out->o = make_buffer(&s, tensor_bytes, 0, NULL);
    out->lse = make_buffer(&s, lse_bytes, 0, NULL);
    if (with_gradients) {
        out->dq = make_buffer(&s, tensor_bytes, 0, NULL);
        out->dk = make_buffer(&s, tensor_bytes, 0, NULL);
        out->dv = make_buffer(&s, tensor_bytes, 0, NULL);
    }
    free(s.values);
    free(s.staging);
    if (s.err != CL_SUCCESS) {
        bench_buffers_release(out);
        snprintf(message, message_size, "allocating and filling the tensors failed (OpenCL error %d)", (int)s.err);
        return status_of_cl(s.err);
    }

    const int h = desc->heads_q, n = desc->seqlen_q, d = desc->head_dim;
    for (int set = 0; set < out->set_count; ++set) {
        out->tq[set] = flashcl_tensor_contiguous(out->q[set], FLASHCL_LAYOUT_BHSD, h, n, d);
        out->tk[set] = flashcl_tensor_contiguous(out->k[set], FLASHCL_LAYOUT_BHSD, h, n, d);
        out->tv[set] = flashcl_tensor_contiguous(out->v[set], FLASHCL_LAYOUT_BHSD, h, n, d);
        out->tdout[set] = flashcl_tensor_contiguous(out->dout[set], FLASHCL_LAYOUT_BHSD, h, n, d);
    }
    out->to = flashcl_tensor_contiguous(out->o, FLASHCL_LAYOUT_BHSD, h, n, d);
    out->tlse = flashcl_tensor_lse(out->lse, h, n);
    out->tdq = flashcl_tensor_contiguous(out->dq, FLASHCL_LAYOUT_BHSD, h, n, d);
    out->tdk = flashcl_tensor_contiguous(out->dk, FLASHCL_LAYOUT_BHSD, h, n, d);
    out->tdv = flashcl_tensor_contiguous(out->dv, FLASHCL_LAYOUT_BHSD, h, n, d);
    return FLASHCL_SUCCESS;
}

void bench_buffers_release(bench_buffers *b) {
    cl_mem all[] = {b->q[0], b->q[1], b->k[0], b->k[1], b->v[0], b->v[1], b->dout[0], b->dout[1],
                    b->o,    b->lse,  b->dq,   b->dk,   b->dv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
        if (all[i]) clReleaseMemObject(all[i]);
    memset(b, 0, sizeof *b);
}

flashcl_status bench_read_floats(flashcl_context *ctx, cl_mem buffer, size_t count, flashcl_dtype dtype, float *out,
                                 char *message, size_t message_size) {
    const size_t bytes = count * flashcl_dtype_size(dtype);
    void *raw = dtype == FLASHCL_DTYPE_F32 ? (void *)out : malloc(bytes);
    if (!raw) {
        snprintf(message, message_size, "no host memory to read %zu bytes back", bytes);
        return FLASHCL_ERROR_OUT_OF_HOST_MEMORY;
    }
    cl_int err = clEnqueueReadBuffer(flashcl_context_queue(ctx), buffer, CL_TRUE, 0, bytes, raw, 0, NULL, NULL);
    if (err == CL_SUCCESS && dtype != FLASHCL_DTYPE_F32) {
        const uint16_t *bits = raw;
        for (size_t i = 0; i < count; ++i)
            out[i] = dtype == FLASHCL_DTYPE_F16 ? half_to_float(bits[i]) : bf16_to_float(bits[i]);
    }
    if (raw != out) free(raw);
    if (err != CL_SUCCESS) {
        snprintf(message, message_size, "clEnqueueReadBuffer failed (OpenCL error %d)", (int)err);
        return status_of_cl(err);
    }
    return FLASHCL_SUCCESS;
}

cl_mem bench_zero_bias(cl_context context, cl_command_queue queue, int full, int batch, int heads, size_t rows,
                       size_t cols, flashcl_dtype dtype, flashcl_attention_extras *extras, size_t *bytes) {
    const size_t bb = full ? (size_t)batch : 1, bh = full ? (size_t)heads : 1;
    const size_t size = bb * bh * rows * cols * flashcl_dtype_size(dtype);
    /* The buffer in whole 16-byte patterns, the view its first `size` bytes: NVIDIA's driver (580) did not finish
     * a fill of a 2.1 GB buffer with a 1-byte pattern in a minute (the d64 (B, H, N, N) bias at N = 2048). */
    const size_t padded = (size + 15) / 16 * 16;
    cl_int err = CL_SUCCESS;
    cl_mem buffer = clCreateBuffer(context, CL_MEM_READ_ONLY, padded, NULL, &err);
    if (err != CL_SUCCESS) return NULL;
    const cl_uint zeros[4] = {0u, 0u, 0u, 0u};
    if (clEnqueueFillBuffer(queue, buffer, zeros, sizeof zeros, 0, padded, 0, NULL, NULL) != CL_SUCCESS ||
        clFinish(queue) != CL_SUCCESS) {
        clReleaseMemObject(buffer);
        return NULL;
    }
    extras->bias = (flashcl_tensor){buffer, 0, full ? bh * rows * cols : 0, full ? rows * cols : 0, cols};
    extras->bias_batch = (int)bb;
    extras->bias_heads = (int)bh;
    extras->bias_dtype = dtype;
    *bytes = size;
    return buffer;
}
