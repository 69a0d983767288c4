/* standard_gemm.c: one GEMM per attention head, grouped into CLBlast strided-batched calls. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>

#include <clblast_c.h>

#include "standard.h"

/* Where one head's matrix of an operand lives. */
typedef struct operand_location {
    cl_mem buffer; /* NULL for a score chunk not allocated yet (dry run) */
    size_t chunk;  /* score chunk, SIZE_MAX for a caller tensor */
    size_t offset; /* elements */
    size_t ld;
    size_t rows, cols; /* of the stored matrix */
} operand_location;

static operand_location locate(const flashcl_attention_desc *desc, const flashcl_scores *scores,
                               const flashcl_gemm_operand *operand, size_t head) {
    operand_location at = {0};
    if (operand->kind == FLASHCL_OPERAND_SCORES) {
        at.chunk = head / scores->heads_per_chunk;
        at.buffer = scores->buffers ? scores->buffers[at.chunk * (size_t)scores->matrices + (size_t)operand->matrix]
                                    : NULL;
        at.offset = (head % scores->heads_per_chunk) * scores->head_elems;
        at.rows = (size_t)desc->seqlen_q;
        at.cols = (size_t)desc->seqlen_k;
        at.ld = at.cols;
        return at;
    }
    const flashcl_tensor *t = operand->tensor;
    const size_t b = head / (size_t)desc->heads_q;
    size_t h = head % (size_t)desc->heads_q;
    if (operand->kind == FLASHCL_OPERAND_KV) h /= (size_t)(desc->heads_q / desc->heads_kv);
    at.buffer = t->buffer;
    at.chunk = SIZE_MAX;
    at.offset = t->offset + b * t->stride_batch + h * t->stride_head;
    at.rows = (size_t)(operand->kind == FLASHCL_OPERAND_KV ? desc->seqlen_k : desc->seqlen_q);
    at.cols = (size_t)desc->head_dim;
    /* A single row's stride is never used; CLBlast still wants ld >= cols. */
    at.ld = (at.rows == 1 && t->stride_seq < at.cols) ? at.cols : t->stride_seq;
    return at;
}

static int same_storage(const operand_location *x, const operand_location *y) {
    return x->buffer == y->buffer && x->chunk == y->chunk;
}

/* CLBlast's kernels index with int: every element a run touches, and its
 * ld and stride, must stay below 2^31. */
static int fits_int(const operand_location *first, size_t stride, size_t count) {
    if (first->ld > INT_MAX || stride > INT_MAX || first->rows > INT_MAX || first->cols > INT_MAX) return 0;
    const size_t last_start = first->offset + stride * (count - 1);
    const size_t span = first->ld * (first->rows - 1) + first->cols;
    return first->offset <= INT_MAX && last_start <= INT_MAX && span <= (size_t)INT_MAX - last_start;
}

static const char *clblast_status_name(CLBlastStatusCode status) {
    switch (status) {
    case CLBlastNotImplemented: return "CLBlastNotImplemented";
    case CLBlastInvalidDimension: return "CLBlastInvalidDimension";
    case CLBlastInvalidLeadDimA: return "CLBlastInvalidLeadDimA";
    case CLBlastInvalidLeadDimB: return "CLBlastInvalidLeadDimB";
    case CLBlastInvalidLeadDimC: return "CLBlastInvalidLeadDimC";
    case CLBlastInsufficientMemoryA: return "CLBlastInsufficientMemoryA";
    case CLBlastInsufficientMemoryB: return "CLBlastInsufficientMemoryB";
    case CLBlastInsufficientMemoryC: return "CLBlastInsufficientMemoryC";
    case CLBlastInvalidBatchCount: return "CLBlastInvalidBatchCount";
    case CLBlastInvalidLocalMemUsage: return "CLBlastInvalidLocalMemUsage";
    case CLBlastDatabaseError: return "CLBlastDatabaseError";
    case CLBlastUnknownError: return "CLBlastUnknownError";
    case CLBlastUnexpectedError: return "CLBlastUnexpectedError";
    default: return "CLBlast error";
    }
}

static flashcl_status fail_clblast(flashcl_context *ctx, CLBlastStatusCode status, const char *gemm) {
    /* Codes above -1000 are OpenCL's own (allocation failures included). */
    if ((int)status > -1000) {
        char what[160];
        snprintf(what, sizeof what, "CLBlastSgemmStridedBatched (%s)", gemm);
        return flashcl_fail_cl(ctx, (cl_int)status, what);
    }
    return flashcl_fail(ctx, FLASHCL_ERROR_OPENCL, "CLBlastSgemmStridedBatched (%s) failed: %s (%d)", gemm,
                        clblast_status_name(status), (int)status);
}

/* CLBlast 1.5.3's strided-batched GEMM drops the operand offsets on its
 * indirect path (large problems) whenever an operand needs no padding copy:
 * its no-copy test, unlike plain GEMM's, does not ask for a zero offset, and
 * its kernel takes no offset. Measured on the H100: the second score chunk's
 * O landed on head 0. So no offset ever reaches it: an operand whose offset
 * is aligned for a sub-buffer is rebased onto one, and a run with an offset
 * that cannot be rebased goes head by head through plain GEMM, which handles
 * offsets on both paths. */
typedef struct rebased_operand {
    cl_mem buffer; /* what CLBlast gets */
    size_t offset;
    cl_mem owned; /* a sub-buffer made here, released after enqueueing */
} rebased_operand;

static int rebase(flashcl_context *ctx, const operand_location *at, rebased_operand *out) {
    *out = (rebased_operand){at->buffer, at->offset, NULL};
    if (at->offset == 0) return 1;
    cl_uint align_bits = 0;
    cl_mem parent = NULL;
    size_t size = 0;
    if (clGetDeviceInfo(ctx->device, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof align_bits, &align_bits, NULL) !=
            CL_SUCCESS ||
        clGetMemObjectInfo(at->buffer, CL_MEM_ASSOCIATED_MEMOBJECT, sizeof parent, &parent, NULL) != CL_SUCCESS ||
        clGetMemObjectInfo(at->buffer, CL_MEM_SIZE, sizeof size, &size, NULL) != CL_SUCCESS)
        return 0;
    const size_t origin = at->offset * sizeof(float), align = align_bits / 8;
    /* A sub-buffer of a sub-buffer is not allowed. */
    if (parent != NULL || align == 0 || origin % align != 0 || origin >= size) return 0;
    const cl_buffer_region region = {origin, size - origin};
    cl_int err = CL_SUCCESS;
    cl_mem sub = clCreateSubBuffer(at->buffer, 0, CL_BUFFER_CREATE_TYPE_REGION, &region, &err);
    if (err != CL_SUCCESS) return 0;
    *out = (rebased_operand){sub, 0, sub};
    return 1;
}

static CLBlastStatusCode strided_batched(const flashcl_gemm *gemm, const rebased_operand r[3],
                                         const operand_location first[3], const size_t stride[3], size_t run,
                                         cl_command_queue *queue) {
    return CLBlastSgemmStridedBatched(
        CLBlastLayoutRowMajor, gemm->transpose_a ? CLBlastTransposeYes : CLBlastTransposeNo,
        gemm->transpose_b ? CLBlastTransposeYes : CLBlastTransposeNo, gemm->m, gemm->n, gemm->k, gemm->alpha,
        r[0].buffer, r[0].offset, first[0].ld, stride[0], r[1].buffer, r[1].offset, first[1].ld, stride[1],
        gemm->beta, r[2].buffer, r[2].offset, first[2].ld, stride[2], run, queue, NULL);
}

static CLBlastStatusCode head_by_head(const flashcl_gemm *gemm, const operand_location first[3],
                                      const size_t stride[3], size_t run, cl_command_queue *queue) {
    for (size_t h = 0; h < run; ++h) {
        CLBlastStatusCode status = CLBlastSgemm(
            CLBlastLayoutRowMajor, gemm->transpose_a ? CLBlastTransposeYes : CLBlastTransposeNo,
            gemm->transpose_b ? CLBlastTransposeYes : CLBlastTransposeNo, gemm->m, gemm->n, gemm->k, gemm->alpha,
            first[0].buffer, first[0].offset + h * stride[0], first[0].ld, first[1].buffer,
            first[1].offset + h * stride[1], first[1].ld, gemm->beta, first[2].buffer,
            first[2].offset + h * stride[2], first[2].ld, queue, NULL);
        if (status != CLBlastSuccess) return status;
    }
    return CLBlastSuccess;
}

static flashcl_status enqueue_run(flashcl_context *ctx, const flashcl_gemm *gemm, const operand_location first[3],
                                  const size_t stride[3], size_t run) {
    rebased_operand r[3] = {{0}};
    int all_rebased = 1;
    for (int x = 0; x < 3; ++x) all_rebased &= rebase(ctx, &first[x], &r[x]);
    CLBlastStatusCode status = all_rebased ? strided_batched(gemm, r, first, stride, run, &ctx->queue)
                                           : head_by_head(gemm, first, stride, run, &ctx->queue);
    /* OpenCL keeps a released sub-buffer alive for the commands using it. */
    for (int x = 0; x < 3; ++x)
        if (r[x].owned) clReleaseMemObject(r[x].owned);
    return status == CLBlastSuccess ? FLASHCL_SUCCESS : fail_clblast(ctx, status, gemm->name);
}

flashcl_status flashcl_standard_gemm(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                     const flashcl_scores *scores, const flashcl_gemm *gemm,
                                     flashcl_head_range heads, int dry_run) {
    const flashcl_gemm_operand *operands[3] = {&gemm->a, &gemm->b, &gemm->c};
    size_t i = 0;
    while (i < heads.count) {
        operand_location first[3], previous[3];
        size_t stride[3] = {0, 0, 1}; /* C's stride must be non-zero even for a single head */
        size_t run = 1;
        for (int x = 0; x < 3; ++x) first[x] = previous[x] = locate(desc, scores, operands[x], heads.first + i * heads.step);
        /* Extend the run while every operand advances by the same stride as
         * its first step (C strictly forward, so no two heads share a C). */
        for (; i + run < heads.count; ++run) {
            int extends = 1;
            operand_location next[3];
            for (int x = 0; x < 3 && extends; ++x) {
                next[x] = locate(desc, scores, operands[x], heads.first + (i + run) * heads.step);
                if (!same_storage(&next[x], &first[x]) || next[x].offset < previous[x].offset) extends = 0;
                else if (run == 1) stride[x] = next[x].offset - previous[x].offset;
                else if (next[x].offset - previous[x].offset != stride[x]) extends = 0;
            }
            if (extends && stride[2] == 0) extends = 0;
            if (!extends) break;
            for (int x = 0; x < 3; ++x) previous[x] = next[x];
        }
        if (run == 1) stride[0] = stride[1] = 0, stride[2] = 1;

        static const char *const operand_names[3] = {"A", "B", "C"};
        for (int x = 0; x < 3; ++x) {
            if (first[x].ld < first[x].cols)
                return flashcl_fail(ctx, FLASHCL_ERROR_UNSUPPORTED,
                                    "standard attention (%s): operand %s has a row stride of %zu elements, less than "
                                    "its %zu columns; CLBlast needs rows that do not overlap",
                                    gemm->name, operand_names[x], first[x].ld, first[x].cols);
            if (!fits_int(&first[x], stride[x], run))
                return flashcl_fail(ctx, FLASHCL_ERROR_UNSUPPORTED,
                                    "standard attention (%s): operand %s reaches past element 2^31 of its buffer; "
                                    "CLBlast indexes with 32-bit ints",
                                    gemm->name, operand_names[x]);
        }
        if (!dry_run) {
            flashcl_status status = enqueue_run(ctx, gemm, first, stride, run);
            if (status != FLASHCL_SUCCESS) return status;
        }
        i += run;
    }
    return FLASHCL_SUCCESS;
}
