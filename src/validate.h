/* validate.h: argument checks run before anything is enqueued, so a bad call writes nothing. */
#ifndef FLASHCL_VALIDATE_H
#define FLASHCL_VALIDATE_H

#include "internal.h"

/* The bytes a tensor view may touch, on the root buffer (sub-buffers resolved),
 * and, for a tensor view, its geometry: two views with the same strides can
 * interleave without sharing a byte (q, k, v of one packed (B, S, 3, H, D)
 * buffer), which the byte span alone cannot tell. */
typedef struct flashcl_extent {
    cl_mem root;
    size_t begin; /* byte of element 0 on root */
    size_t end;   /* one past the last byte */
    size_t elem_size;  /* 0: a plain byte range, no geometry */
    size_t sizes[4];   /* (batch, heads, seqlen, dim) */
    size_t strides[4]; /* in elements; dim's is 1 */
} flashcl_extent;

/* Shape of a view: (batch, heads, seqlen, dim) with elements of elem_size bytes. */
typedef struct flashcl_shape {
    size_t batch, heads, seqlen, dim, elem_size;
} flashcl_shape;

flashcl_status flashcl_validate_desc(flashcl_context *ctx, const flashcl_attention_desc *desc);

/* Checks a view: non-NULL, buffer of ctx's context, large enough for the shape
 * (overflow-checked). is_output additionally requires that no two elements
 * of the view share an address (they would be written concurrently). */
flashcl_status flashcl_validate_tensor(flashcl_context *ctx, const char *name, const flashcl_tensor *t,
                                       const flashcl_shape *shape, int is_output, flashcl_extent *extent);

/* The extent of bytes [begin, end) of buffer (a plain byte range; sub-buffers
 * resolved to their root). The buffer must be valid. */
void flashcl_byte_extent(cl_mem buffer, size_t begin, size_t end, flashcl_extent *extent);

/* FLASHCL_ERROR_ALIASING if the output's bytes overlap the other's: decided
 * exactly for two views with the same element size and strides, by byte
 * spans otherwise. */
flashcl_status flashcl_check_no_overlap(flashcl_context *ctx, const char *output_name, const flashcl_extent *output,
                                        const char *other_name, const flashcl_extent *other);

/* One tensor argument of a call, for flashcl_validate_call. */
typedef enum { FLASHCL_SHAPE_Q, FLASHCL_SHAPE_KV, FLASHCL_SHAPE_LSE } flashcl_shape_kind;
typedef struct flashcl_call_tensor {
    const char *name;
    const flashcl_tensor *tensor; /* NULL allowed only if optional */
    flashcl_shape_kind kind;
    int is_output;
    int optional;
} flashcl_call_tensor;

/* Every check of a call: desc, each tensor (shape, context, size), that no
 * output overlaps any other tensor, and the wait list. */
flashcl_status flashcl_validate_call(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                     const flashcl_call_tensor *tensors, int count, cl_uint num_events,
                                     const cl_event *wait_list);

/* The forward call's checks (q, k, v in; o, optional lse out). */
flashcl_status flashcl_validate_forward_args(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                             const flashcl_tensor *q, const flashcl_tensor *k,
                                             const flashcl_tensor *v, const flashcl_tensor *o,
                                             const flashcl_tensor *lse, cl_uint num_events,
                                             const cl_event *wait_list);

/* Shapes of Q (and O, dO, dQ), K and V (and dK, dV), and LSE for desc. */
void flashcl_attention_shapes(const flashcl_attention_desc *desc, flashcl_shape *q, flashcl_shape *kv,
                              flashcl_shape *lse);

flashcl_status flashcl_validate_wait_list(flashcl_context *ctx, cl_uint count, const cl_event *list);

/* Bytes of the contiguous float32 host arrays of desc (the _host calls):
 * Q/O/dO/dQ, K/V/dK/dV and LSE; fails (nothing allocated) when a size
 * overflows size_t. */
flashcl_status flashcl_host_array_bytes(flashcl_context *ctx, const flashcl_attention_desc *desc, size_t *q_bytes,
                                        size_t *kv_bytes, size_t *lse_bytes);

#endif
