/* bench_varlen.c: the random lengths, offsets, packed views and FLOP counts of `flashcl bench --varlen`. */
#include "bench_varlen.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_run.h"

void bench_varlen_lengths(const bench_options *o, int seqlen, int batch, int *lengths) {
    /* The small slack keeps 0.3 x 100 = 30.000000000000004 from rounding up to 31. */
    int lo = (int)ceil(o->varlen_lo * seqlen - 1e-9), hi = (int)floor(o->varlen_hi * seqlen + 1e-9);
    if (lo < 1) lo = 1;
    if (hi > seqlen) hi = seqlen;
    if (hi < lo) hi = lo;
    uint64_t state = o->varlen_seed * 0x9e3779b97f4a7c15ull + (uint64_t)seqlen;
    const uint64_t span = (uint64_t)(hi - lo) + 1;
    for (int b = 0; b < batch; ++b) lengths[b] = lo + (int)(bench_random_next(&state) % span);
}

flashcl_status bench_varlen_create(flashcl_context *ctx, const bench_options *o, const flashcl_attention_desc *padded,
                                   bench_varlen_batch *out, char *message, size_t message_size) {
    memset(out, 0, sizeof *out);
    const int batch = padded->batch;
    int *lengths = malloc((size_t)batch * sizeof *lengths);
    int32_t *cu = malloc(((size_t)batch + 1) * sizeof *cu);
    if (!lengths || !cu) {
        free(lengths);
        free(cu);
        snprintf(message, message_size, "no host memory for %d sequence lengths", batch);
        return FLASHCL_ERROR_OUT_OF_HOST_MEMORY;
    }
    bench_varlen_lengths(o, padded->seqlen_q, batch, lengths);
    out->batch = batch;
    cu[0] = 0;
    for (int b = 0; b < batch; ++b) {
        cu[b + 1] = cu[b] + lengths[b];
        if (lengths[b] > out->longest) out->longest = lengths[b];
        /* The same formula as the padded row, for one sequence at its length. */
        flashcl_attention_desc one = *padded;
        one.batch = 1;
        one.seqlen_q = one.seqlen_k = lengths[b];
        out->flops[BENCH_DIR_FORWARD] += bench_flops(&one, BENCH_DIR_FORWARD);
        out->flops[BENCH_DIR_FORWARD_BACKWARD] += bench_flops(&one, BENCH_DIR_FORWARD_BACKWARD);
    }
    out->total = cu[batch];
    out->padded_flops[BENCH_DIR_FORWARD] = bench_flops(padded, BENCH_DIR_FORWARD);
    out->padded_flops[BENCH_DIR_FORWARD_BACKWARD] = bench_flops(padded, BENCH_DIR_FORWARD_BACKWARD);
    cl_int err = CL_SUCCESS;
    out->cu_seqlens = clCreateBuffer(flashcl_context_cl_context(ctx), CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                     ((size_t)batch + 1) * sizeof *cu, cu, &err);
    free(lengths);
    if (err != CL_SUCCESS) {
        free(cu);
        memset(out, 0, sizeof *out);
        snprintf(message, message_size, "clCreateBuffer for the sequence offsets failed (OpenCL error %d)", (int)err);
        return FLASHCL_ERROR_OPENCL;
    }
    out->cu_host = cu;
    return FLASHCL_SUCCESS;
}

void bench_varlen_release(bench_varlen_batch *b) {
    if (b->cu_seqlens) clReleaseMemObject(b->cu_seqlens);
    free(b->cu_host);
    memset(b, 0, sizeof *b);
}

flashcl_attention_desc bench_varlen_desc(const flashcl_attention_desc *padded, const bench_varlen_batch *b) {
    flashcl_attention_desc d = *padded;
    d.seqlen_q = d.seqlen_k = b->longest;
    return d;
}

void bench_varlen_views(const bench_buffers *padded, const bench_varlen_batch *b, int heads, int head_dim,
                        bench_buffers *packed) {
    *packed = *padded;
    const size_t d = (size_t)head_dim, rows = (size_t)b->total;
    const flashcl_tensor shape = {NULL, 0, 0, rows * d, d};
    flashcl_tensor *views[] = {&packed->tq[0], &packed->tq[1], &packed->tk[0], &packed->tk[1],
                               &packed->tv[0], &packed->tv[1], &packed->tdout[0], &packed->tdout[1],
                               &packed->to, &packed->tdq, &packed->tdk, &packed->tdv};
    for (size_t i = 0; i < sizeof views / sizeof views[0]; ++i) {
        cl_mem buffer = views[i]->buffer;
        *views[i] = shape;
        views[i]->buffer = buffer;
    }
    packed->tlse = (flashcl_tensor){padded->lse, 0, 0, rows, 1};
    packed->elements = (size_t)heads * rows * d;
}

void bench_varlen_fill(bench_record *flash_row, const bench_record *timed, const bench_varlen_batch *b) {
    const bench_direction direction = flash_row->direction;
    flash_row->varlen_tokens = (double)b->total;
    flash_row->varlen_flops = b->flops[direction];
    flash_row->padded_flops = b->padded_flops[direction];
    if (!timed->ok) return;
    flash_row->varlen_ms = timed->median_ms;
    flash_row->varlen_tflops = b->flops[direction] / (timed->median_ms * 1e-3) / 1e12;
    if (flash_row->ok) flash_row->varlen_speedup = flash_row->median_ms / timed->median_ms;
}
