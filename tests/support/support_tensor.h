/* support_tensor.h: device buffers surrounded by poison and canaries, so a test sees every element a call wrote or skipped. */
#ifndef FLASHCL_SUPPORT_TENSOR_H
#define FLASHCL_SUPPORT_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "flashcl.h"
#include "half_float.h" /* float <-> half / bfloat16, shared with the CLI and the bench */

/* NaN patterns no arithmetic produces (quiet NaNs from arithmetic carry no
 * payload), for float and for both 16-bit types (a NaN as half and as bf16).
 * An element still holding one was never written. */
#define TS_POISON_F32 0x7fc0deadu
#define TS_POISON_16 0x7fd7u

/* Elements after a view's last one that must stay untouched. */
#define TS_CANARY_ELEMS 67

/* x rounded to dtype's storage and back (identity for F32). */
float ts_round_to_dtype(float x, flashcl_dtype dtype);

/* ---- plain buffers (packed, varlen and hand-made views) --------------- */

/* A read-write buffer of `bytes` holding a copy of host, or TS_POISON_F32
 * words when host is NULL, so an unwritten float output cannot pass. */
cl_mem ts_buffer(cl_context context, size_t bytes, const void *host);
/* n floats of m, read back (blocking); malloc'ed. */
float *ts_read_floats(cl_command_queue queue, cl_mem m, size_t n);
/* 1 if x holds TS_POISON_F32 bit for bit. */
int ts_is_poison(float x);
/* Fails the test unless x[n .. n + TS_CANARY_ELEMS) still hold the poison:
 * nothing was written past an output's n elements. */
void ts_assert_canary(const char *label, const char *what, const float *x, size_t n);

/* ---- strided device tensors surrounded by poison --------------------- */

/* Where a view lies in its buffer: layout, a leading element offset, and
 * `pad` unused elements after each row, head and batch (0: contiguous). */
typedef struct ts_placement {
    flashcl_layout layout;
    size_t offset;
    size_t pad;
} ts_placement;

/* A device buffer holding one (batch, heads, seqlen, dim) view; every byte
 * outside the view, and the whole view of an output, starts as the poison.
 * `image` mirrors the buffer on the host. */
typedef struct ts_tensor {
    flashcl_tensor view;
    size_t batch, heads, seqlen, dim;
    size_t elem_size;
    flashcl_dtype dtype;    /* storage of the elements (LSE: F32) */
    size_t capacity;        /* elements in the buffer */
    unsigned char *image;   /* the buffer as last read back */
    unsigned char *initial; /* the buffer as created */
} ts_tensor;

/* The view's strides for a placement (no buffer). */
flashcl_tensor ts_strided_view(const ts_placement *place, size_t batch, size_t heads, size_t seqlen, size_t dim);

/* Creates the buffer; values (contiguous BHSD floats, rounded to dtype on
 * the way) fill the view, or NULL leaves the view poisoned (outputs). */
void ts_tensor_create(ts_tensor *t, cl_context context, const ts_placement *place, size_t batch, size_t heads,
                      size_t seqlen, size_t dim, flashcl_dtype dtype, const float *values);
/* The same with the view's offset and strides given (its buffer ignored):
 * layouts no placement describes, such as padded rows, heads and batches
 * whose strides are all multiples of 8 elements. */
void ts_tensor_create_strided(ts_tensor *t, cl_context context, const flashcl_tensor *view, size_t batch,
                              size_t heads, size_t seqlen, size_t dim, flashcl_dtype dtype, const float *values);
void ts_tensor_free(ts_tensor *t);

/* Writes the buffer as created back (blocking): an output must then be
 * written again by the next call, element by element. */
void ts_tensor_reset(cl_command_queue queue, ts_tensor *t);

/* Reads the buffer back into t->image (blocking). */
void ts_tensor_read(cl_command_queue queue, ts_tensor *t);

/* Fails the test unless every element of the view was written (no poison
 * left) and every element outside it still holds the poison (gaps, the
 * region before the offset and the canary after the end). */
void ts_assert_written_exactly(const ts_tensor *t, const char *name);

/* Fails the test unless the buffer still holds its initial contents
 * everywhere (a rejected call wrote nothing). Reads the buffer first. */
void ts_assert_untouched(cl_command_queue queue, ts_tensor *t, const char *name);

/* The view's elements as contiguous BHSD floats. */
void ts_tensor_gather(const ts_tensor *t, float *bhsd);

/* Reads t back, asserts it was written exactly and gathers it into bhsd. */
void ts_tensor_read_output(cl_command_queue queue, ts_tensor *t, const char *name, float *bhsd);

#endif
