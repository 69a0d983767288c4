/* standard.h: the pieces standard attention is built from: score scratch, per-head CLBlast GEMMs, row kernels, queue order. */
#ifndef FLASHCL_STANDARD_H
#define FLASHCL_STANDARD_H

#include "internal.h"

/* ---- Score scratch (standard_scores.c) --------------------------------- */

/* The N x N matrices of every (batch, query head), float, each head's
 * seqlen_q x seqlen_k block contiguous (ld = seqlen_k). They are split into
 * chunks of whole heads, one cl_mem per chunk and matrix, because one buffer
 * must fit CL_DEVICE_MAX_MEM_ALLOC_SIZE and CLBlast addresses elements with
 * 32-bit ints. */
typedef struct flashcl_scores {
    int matrices;           /* per head: 1 forward (S, then P), 2 backward (S/P and dP/dS) */
    size_t heads;           /* batch * heads_q */
    size_t head_elems;      /* seqlen_q * seqlen_k */
    size_t heads_per_chunk;
    size_t chunks;
    size_t total_bytes;     /* every matrix of every chunk: the call's extra device bytes */
    cl_mem *buffers;        /* [chunk * matrices + matrix]; NULL until allocated */
} flashcl_scores;

/* Sizes the scratch and checks it against ctx's memory budget and the
 * device's limits; FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY with the bytes needed
 * if it does not fit. Allocates nothing. */
flashcl_status flashcl_scores_plan(flashcl_context *ctx, const flashcl_attention_desc *desc, int matrices,
                                   flashcl_scores *scores);
flashcl_status flashcl_scores_allocate(flashcl_context *ctx, flashcl_scores *scores);
/* Releases the buffers (commands already enqueued keep them alive); idempotent. */
void flashcl_scores_release(flashcl_scores *scores);

/* Heads of chunk c: [c * heads_per_chunk, first + flashcl_scores_chunk_heads). */
size_t flashcl_scores_chunk_heads(const flashcl_scores *scores, size_t chunk);

/* ---- Per-head GEMMs through CLBlast (standard_gemm.c) ------------------ */

typedef enum {
    FLASHCL_OPERAND_QUERY, /* a (batch, heads_q, seqlen_q, head_dim) tensor */
    FLASHCL_OPERAND_KV,    /* a (batch, heads_kv, seqlen_k, head_dim) tensor, head = query head / group */
    FLASHCL_OPERAND_SCORES /* score matrix `matrix` of the scratch (seqlen_q x seqlen_k) */
} flashcl_operand_kind;

typedef struct flashcl_gemm_operand {
    flashcl_operand_kind kind;
    const flashcl_tensor *tensor; /* QUERY and KV */
    int matrix;                   /* SCORES */
} flashcl_gemm_operand;

/* C = alpha * op(A) op(B) + beta * C for each head, row-major, where op
 * transposes the stored matrix when asked; m, n, k as in BLAS. */
typedef struct flashcl_gemm {
    const char *name; /* for messages: "S = Q K^T" */
    int transpose_a, transpose_b;
    size_t m, n, k;
    float alpha, beta;
    flashcl_gemm_operand a, b, c;
} flashcl_gemm;

/* The (flattened batch * heads_q + h) heads a GEMM runs for: first,
 * first + step, ... (count of them). */
typedef struct flashcl_head_range {
    size_t first, step, count;
} flashcl_head_range;

/* Runs the GEMM for every head of the range as few CLBlast strided-batched
 * calls as the strides allow (one per run of heads whose operands advance by
 * constant strides). dry_run: only the checks (CLBlast's 32-bit element
 * indices, leading dimensions), so a call can refuse before enqueueing. */
flashcl_status flashcl_standard_gemm(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                     const flashcl_scores *scores, const flashcl_gemm *gemm,
                                     flashcl_head_range heads, int dry_run);

/* ---- Row kernels of cl/standard_softmax.cl (standard_rows.c) ----------- */

/* The kernel and the work-group size (a power of two) it was built for. */
flashcl_status flashcl_standard_row_kernel(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                           const char *name, cl_kernel *kernel, size_t *work_group);

/* ---- Queue order (standard_rows.c) ------------------------------------ */

/* The caller's wait list gates everything after it (CLBlast's C API takes no
 * wait list, so a barrier carries it). */
flashcl_status flashcl_standard_gate(flashcl_context *ctx, cl_uint num_events, const cl_event *wait_list);
/* Between dependent steps: nothing on an in-order queue, a barrier otherwise. */
flashcl_status flashcl_standard_step(flashcl_context *ctx);
/* The caller's event: a marker that completes when every command before it has. */
flashcl_status flashcl_standard_finish(flashcl_context *ctx, cl_event *event);

#endif
