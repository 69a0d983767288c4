/* feature_bias.c: the additive attention bias of a call (extras->bias) and the backward's dBias: their checks, the
 * dQ kernel's dBias target (the caller's buffer, or a dS scratch) and the reduction of the scratch over the bias's
 * broadcast dimensions (cl/bias_reduce.cl). */
#include "call_features.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

static size_t dtype_bytes(flashcl_dtype dtype) { return dtype == FLASHCL_DTYPE_F32 ? 4 : 2; }

static int view_is_zero(const flashcl_tensor *t) {
    return !t->buffer && t->offset == 0 && t->stride_batch == 0 && t->stride_head == 0 && t->stride_seq == 0;
}

flashcl_status flashcl_bias_resolve(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                    const flashcl_attention_extras *x, flashcl_features *f) {
    if (!x) return FLASHCL_SUCCESS;
    if (!x->bias.buffer) {
        /* Fields set without the buffer they describe are a caller's mistake, not "no bias". */
        if (!view_is_zero(&x->bias) || x->bias_batch != 0 || x->bias_heads != 0 || x->bias_dtype != FLASHCL_DTYPE_F32)
            return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                                "extras->bias.buffer is NULL but its offset, strides, bias_batch, bias_heads or "
                                "bias_dtype is set");
        if (!view_is_zero(&x->dbias))
            return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "extras->dbias is set without a bias");
        return FLASHCL_SUCCESS;
    }
    if (!x->dbias.buffer && !view_is_zero(&x->dbias))
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                            "extras->dbias.buffer is NULL but its offset or strides are set");
    if (x->cu_seqlens_q || x->cu_seqlens_k)
        return flashcl_fail(ctx, FLASHCL_ERROR_UNSUPPORTED,
                            "an attention bias with a packed batch (cu_seqlens) is not supported");
    if (x->bias_batch != 1 && x->bias_batch != desc->batch)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                            "extras->bias_batch %d must be 1 (broadcast) or the batch %d", x->bias_batch,
                            desc->batch);
    if (x->bias_heads != 1 && x->bias_heads != desc->heads_q)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                            "extras->bias_heads %d must be 1 (broadcast) or heads_q %d", x->bias_heads,
                            desc->heads_q);
    if (x->bias_dtype != FLASHCL_DTYPE_F32 && x->bias_dtype != desc->dtype)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                            "extras->bias_dtype %d must be float32 (%d) or the storage type (%d)", (int)x->bias_dtype,
                            (int)FLASHCL_DTYPE_F32, (int)desc->dtype);
    f->bias = 1;
    f->bias_dtype = x->bias_dtype;
    f->bias_f32 = x->bias_dtype == FLASHCL_DTYPE_F32 && desc->dtype != FLASHCL_DTYPE_F32;
    /* A broadcast dimension's stride is the caller's to leave at anything: the kernels step by 0 there. */
    f->bias_view = x->bias;
    if (x->bias_batch == 1) f->bias_view.stride_batch = 0;
    if (x->bias_heads == 1) f->bias_view.stride_head = 0;
    f->bias_shape = (flashcl_shape){(size_t)x->bias_batch, (size_t)x->bias_heads, (size_t)desc->seqlen_q,
                                    (size_t)desc->seqlen_k, dtype_bytes(x->bias_dtype)};
    f->dbias_view = x->dbias;
    f->dbias_direct = x->dbias.buffer && x->bias_batch == desc->batch && x->bias_heads == desc->heads_q &&
                      x->bias_dtype == FLASHCL_DTYPE_F32;
    return FLASHCL_SUCCESS;
}

size_t flashcl_dbias_scratch_bytes(const flashcl_attention_desc *desc, const flashcl_features *f) {
    if (!f->bias || !f->dbias_view.buffer || f->dbias_direct) return 0;
    /* In double: a product past size_t is reported as SIZE_MAX (no budget or device has that much). */
    const double bytes =
        (double)desc->batch * desc->heads_q * (double)desc->seqlen_q * (double)desc->seqlen_k * sizeof(float);
    return bytes >= (double)SIZE_MAX ? SIZE_MAX : (size_t)bytes;
}

size_t flashcl_bias_staged_bytes(const flashcl_features *f) {
    if (!f->bias) return 0;
    const size_t element = f->bias_dtype == FLASHCL_DTYPE_F32 ? 4 : 2, chunk = 16 / element;
    const flashcl_tensor *v = &f->bias_view;
    if (v->offset % chunk || v->stride_batch % chunk || v->stride_head % chunk || v->stride_seq % chunk) return 0;
    return element;
}

void flashcl_features_tensor_core_options(const flashcl_features *f, char *options, size_t size) {
    flashcl_features_options(f, options, size);
    const size_t used = strlen(options);
    if (flashcl_bias_staged_bytes(f) && used < size) snprintf(options + used, size - used, " -DFLASHCL_BIAS_STAGED=1");
}

static size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

flashcl_status flashcl_dbias_prepare(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                     const flashcl_features *f, flashcl_dbias_target *t) {
    memset(t, 0, sizeof *t);
    if (!f->bias || !f->dbias_view.buffer) return FLASHCL_SUCCESS;
    if (f->dbias_direct) {
        t->buffer = f->dbias_view.buffer;
        t->view = f->dbias_view;
        return FLASHCL_SUCCESS;
    }
    char options[32];
    snprintf(options, sizeof options, "-DFLASHCL_DTYPE=%d", (int)f->bias_dtype);
    flashcl_status status = flashcl_get_kernel(ctx, "bias_reduce.cl", "flashcl_dbias_reduce", options, &t->reduce);
    if (status != FLASHCL_SUCCESS) return status;
    const size_t plane = (size_t)desc->seqlen_q * (size_t)desc->seqlen_k;
    const size_t bytes = flashcl_dbias_scratch_bytes(desc, f);
    if (bytes == SIZE_MAX)
        return flashcl_fail(ctx, FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY, "the dBias scratch's size overflows size_t");
    cl_int err;
    t->scratch = clCreateBuffer(ctx->context, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (err != CL_SUCCESS) {
        t->scratch = NULL;
        return flashcl_fail_cl(ctx, err, "clCreateBuffer (dBias scratch)");
    }
    t->buffer = t->scratch;
    t->view = (flashcl_tensor){t->scratch, 0, (size_t)desc->heads_q * plane, plane, (size_t)desc->seqlen_k};
    flashcl_kernel_args a = {t->reduce, 0, CL_SUCCESS};
    flashcl_arg_mem(&a, t->scratch);
    flashcl_arg_int(&a, desc->batch);
    flashcl_arg_int(&a, desc->heads_q);
    flashcl_arg_int(&a, desc->seqlen_q);
    flashcl_arg_int(&a, desc->seqlen_k);
    flashcl_arg_int(&a, (int)f->bias_shape.batch);
    flashcl_arg_int(&a, (int)f->bias_shape.heads);
    flashcl_arg_tensor(&a, &f->dbias_view);
    if (a.error != CL_SUCCESS) {
        flashcl_dbias_release(t);
        return flashcl_fail_cl(ctx, a.error, "clSetKernelArg (dBias reduction)");
    }
    /* One work-item per dBias element: a plain loop, any work-group size divides the rounded-up grid. */
    t->reduce_local = 64 <= ctx->caps.limits.max_work_group_size ? 64 : 1;
    t->reduce_global = ceil_div(f->bias_shape.batch * f->bias_shape.heads * plane, t->reduce_local) * t->reduce_local;
    return FLASHCL_SUCCESS;
}

void flashcl_dbias_release(flashcl_dbias_target *t) {
    if (t->scratch) clReleaseMemObject(t->scratch);
    t->scratch = NULL;
    t->buffer = NULL;
}

void flashcl_arg_dbias(flashcl_kernel_args *a, const flashcl_features *f, const flashcl_dbias_target *t) {
    if (!f->bias) return;
    /* Without dBias the kernel still needs a valid buffer argument: the bias's, never written (the flag is 0). */
    flashcl_arg_mem(a, t->buffer ? t->buffer : f->bias_view.buffer);
    flashcl_arg_ulong(a, t->view.offset);
    flashcl_arg_ulong(a, t->view.stride_batch);
    flashcl_arg_ulong(a, t->view.stride_head);
    flashcl_arg_ulong(a, t->view.stride_seq);
    flashcl_arg_int(a, t->buffer != NULL);
}
