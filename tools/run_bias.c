/* run_bias.c: `flashcl run --bias` and `--dbias`: the bias file checked against the problem, handed to the library
 * as a contiguous (B|1, Hq|1, Sq, Sk) tensor and to the --check reference as floats. */
#include "run_bias.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "half_float.h"
#include "run_inputs.h"

static float to_float(const void *data, flashcl_dtype dtype, size_t i) {
    if (dtype == FLASHCL_DTYPE_F32) return ((const float *)data)[i];
    const uint16_t bits = ((const uint16_t *)data)[i];
    return dtype == FLASHCL_DTYPE_F16 ? half_to_float(bits) : bf16_to_float(bits);
}

int run_bias_load(const run_options *o, const flashcl_attention_desc *d, const char *keys_note, run_bias *b) {
    memset(b, 0, sizeof *b);
    if (!o->bias_path) return 0;
    if (run_load_npy(o->bias_path, &b->file) != 0) return -1;
    const npy_array *a = &b->file;
    char shape[96];
    npy_format_shape(a->rank, a->shape, shape, sizeof shape);
    /* float32, or exactly the storage type of Q, K and V. */
    if (a->dtype == NPY_DTYPE_F32)
        b->dtype = FLASHCL_DTYPE_F32;
    else if (a->dtype == NPY_DTYPE_F16 && d->dtype == FLASHCL_DTYPE_F16)
        b->dtype = FLASHCL_DTYPE_F16;
    else if (a->dtype == NPY_DTYPE_U16 && d->dtype == FLASHCL_DTYPE_BF16)
        b->dtype = FLASHCL_DTYPE_BF16;
    else
        return run_file_error(o->bias_path, "holds %s; a bias is float32 ('<f4') or the inputs' type (%s)",
                              npy_dtype_name(a->dtype), run_dtype_name(d->dtype));
    if (a->rank != 4 || (a->shape[0] != 1 && a->shape[0] != (size_t)d->batch) ||
        (a->shape[1] != 1 && a->shape[1] != (size_t)d->heads_q) || a->shape[2] != (size_t)d->seqlen_q ||
        a->shape[3] != (size_t)d->seqlen_k)
        return run_file_error(o->bias_path, "shape %s is not (B|1, Hq|1, Sq, Sk) = (%d|1, %d|1, %d, %d)%s", shape,
                              d->batch, d->heads_q, d->seqlen_q, d->seqlen_k, keys_note ? keys_note : "");
    b->batch = (int)a->shape[0];
    b->heads = (int)a->shape[1];
    b->bytes = a->count * npy_dtype_size(a->dtype);
    b->reference = malloc(a->count * sizeof *b->reference);
    if (!b->reference) return run_file_error(o->bias_path, "out of host memory");
    for (size_t i = 0; i < a->count; ++i) b->reference[i] = to_float(a->data, b->dtype, i);
    return 0;
}

void run_bias_free(run_bias *b) {
    if (b->buffer) clReleaseMemObject(b->buffer);
    if (b->dbias) clReleaseMemObject(b->dbias);
    npy_free(&b->file);
    free(b->reference);
    free(b->dbias_host);
    memset(b, 0, sizeof *b);
}

int run_bias_buffers(run_bias *b, cl_context context, const flashcl_attention_desc *d, int want_dbias,
                     flashcl_attention_extras *x) {
    if (!b->reference) return 0;
    cl_int err = CL_SUCCESS;
    b->buffer = clCreateBuffer(context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, b->bytes, b->file.data, &err);
    if (err == CL_SUCCESS && want_dbias) {
        /* 0xff bytes, NaN in every dtype: an element the backward never writes cannot pass --check. */
        b->dbias_host = malloc(b->bytes);
        if (!b->dbias_host) {
            fprintf(stderr, "flashcl run: out of host memory (%zu bytes for dBias)\n", b->bytes);
            return -1;
        }
        memset(b->dbias_host, 0xff, b->bytes);
        b->dbias = clCreateBuffer(context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, b->bytes, b->dbias_host, &err);
    }
    if (err != CL_SUCCESS) {
        fprintf(stderr, "flashcl run: clCreateBuffer for the bias failed with OpenCL error %d\n", (int)err);
        return -1;
    }
    const size_t plane = (size_t)d->seqlen_q * (size_t)d->seqlen_k;
    const flashcl_tensor view = {b->buffer, 0, (size_t)b->heads * plane, plane, (size_t)d->seqlen_k};
    x->bias = view;
    x->bias_batch = b->batch;
    x->bias_heads = b->heads;
    x->bias_dtype = b->dtype;
    if (b->dbias) {
        x->dbias = view;
        x->dbias.buffer = b->dbias;
    }
    return 0;
}

int run_bias_read_dbias(run_bias *b, cl_command_queue queue) {
    if (!b->dbias) return 0;
    const cl_int err = clEnqueueReadBuffer(queue, b->dbias, CL_TRUE, 0, b->bytes, b->dbias_host, 0, NULL, NULL);
    if (err != CL_SUCCESS) {
        fprintf(stderr, "flashcl run: reading dBias back failed with OpenCL error %d\n", (int)err);
        return -1;
    }
    return 0;
}

float *run_bias_dbias_floats(const run_bias *b) {
    float *out = malloc((b->file.count ? b->file.count : 1) * sizeof *out);
    if (!out) return NULL;
    for (size_t i = 0; i < b->file.count; ++i) out[i] = to_float(b->dbias_host, b->dtype, i);
    return out;
}

float *run_bias_columns(const run_bias *b, const flashcl_attention_desc *d, int batch, int keys) {
    const size_t rows = (size_t)b->heads * (size_t)d->seqlen_q, sk = (size_t)d->seqlen_k, k = (size_t)keys;
    float *out = malloc(rows * k * sizeof *out + 1);
    if (!out) return NULL;
    /* A plane broadcast over the batch serves every sequence. */
    const float *plane = b->reference + (b->batch == 1 ? 0 : (size_t)batch) * rows * sk;
    for (size_t r = 0; r < rows; ++r) memcpy(out + r * k, plane + r * sk, k * sizeof *out);
    return out;
}

void run_bias_reference(const run_bias *b, flashcl_reference_extras *x) {
    x->bias = b->reference;
    x->bias_batch = b->batch;
    x->bias_heads = b->heads;
}
