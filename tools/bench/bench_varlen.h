/* bench_varlen.h: `flashcl bench --varlen`: a packed batch of random sequence lengths, timed beside the padded one. */
#ifndef FLASHCL_TOOLS_BENCH_VARLEN_H
#define FLASHCL_TOOLS_BENCH_VARLEN_H

#include <stddef.h>
#include <stdint.h>

#include "bench_buffers.h"
#include "bench_options.h"
#include "bench_record.h"

/* The B sequences of one size at their random lengths (queries and keys
 * alike: self-attention, as the padded batch). */
typedef struct bench_varlen_batch {
    int batch, longest, total;
    cl_mem cu_seqlens; /* batch + 1 int32 offsets, for cu_seqlens_q and cu_seqlens_k */
    int32_t *cu_host;  /* the same offsets on the host (malloc'ed): the calls' host copies, so they never block */
    double flops[2];   /* indexed by bench_direction: bench_flops summed over the sequences */
    double padded_flops[2]; /* bench_flops of the padded batch (B sequences of N) */
} bench_varlen_batch;

/* The length of each of the `batch` sequences of size `seqlen`: uniform
 * integers in [max(1, ceil(lo x N)), max(that, floor(hi x N))] from a
 * generator seeded by (seed, N) only, so a size gets the same lengths
 * whatever else is on the command line. */
void bench_varlen_lengths(const bench_options *o, int seqlen, int batch, int *lengths);

/* Draws the lengths for the padded problem (B sequences of N) and uploads
 * their offsets, keeping a host copy. On failure *out is zeroed and message says why. */
flashcl_status bench_varlen_create(flashcl_context *ctx, const bench_options *o, const flashcl_attention_desc *padded,
                                   bench_varlen_batch *out, char *message, size_t message_size);
void bench_varlen_release(bench_varlen_batch *b);

/* The packed call's desc: padded's, with the longest drawn length as the maxima. */
flashcl_attention_desc bench_varlen_desc(const flashcl_attention_desc *padded, const bench_varlen_batch *b);

/* padded's buffers re-viewed as the packed batch, head-major (H, total, d)
 * like the padded BHSD tensors so that only the lengths differ between the
 * two calls, LSE (H, total). The packed batch needs no more elements than
 * the padded one, so the buffers are shared, not copied (nothing to release). */
void bench_varlen_views(const bench_buffers *padded, const bench_varlen_batch *b, int heads, int head_dim,
                        bench_buffers *packed);

/* Fills the varlen fields of the padded flash row from the packed call's
 * timing (used when timed->ok) and the batch. */
void bench_varlen_fill(bench_record *flash_row, const bench_record *timed, const bench_varlen_batch *b);

#endif
