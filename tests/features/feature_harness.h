/* feature_harness.h: runs forward and backward with a window, block mask or dropout and judges them against the reference. */
#ifndef FLASHCL_FEATURE_HARNESS_H
#define FLASHCL_FEATURE_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "flashcl.h"

#define FH_CASE_TIMEOUT 240

/* One problem: desc (window, causal and dropout in it) plus an optional
 * block mask given on the host. */
typedef struct fh_case {
    const char *name;
    flashcl_attention_desc desc;
    const uint8_t *block_mask; /* NULL: none */
    int block_size, per_head;
    size_t mask_bytes; /* of block_mask */
} fh_case;

/* Device outputs of one run, contiguous BHSD floats. */
typedef struct fh_result {
    float *o, *lse, *dq, *dk, *dv;
} fh_result;

/* Random inputs of a case (fixed seed), contiguous BHSD. */
typedef struct fh_inputs {
    float *q, *k, *v, *dout;
    size_t q_count, kv_count, lse_count;
} fh_inputs;

flashcl_context *fh_context(void);

/* A read-write buffer of `bytes` holding a copy of host, or NaN bytes
 * (0xff) when host is NULL so an unwritten output cannot pass. */
cl_mem fh_buffer(cl_context context, size_t bytes, const void *host);
/* n floats of m, read back (blocking); malloc'ed. */
float *fh_read_floats(cl_command_queue queue, cl_mem m, size_t n);
void fh_inputs_make(const fh_case *c, uint64_t seed, fh_inputs *in);
void fh_inputs_free(fh_inputs *in);

/* Forward (and, if backward, the backward) through flashcl_forward_ex /
 * flashcl_backward_ex on contiguous buffers whose outputs start as NaN.
 * Fails the test on any error. */
void fh_run(flashcl_context *ctx, const fh_case *c, const fh_inputs *in, int backward, fh_result *out);
void fh_result_free(fh_result *r);

/* The (B, Hq, Sq, Sk) element mask equivalent to the case's causal flag,
 * window and block mask, computed here from the definitions (independently
 * of the library and of the reference's own window code). */
uint8_t *fh_dense_mask(const fh_case *c);

/* Judges r against the double reference run with desc stripped of causal
 * and window, `mask` as a general element mask (NULL: none) and `keep` as
 * the dropout mask (NULL: the reference's Philox): the tolerance rule (k = 2
 * for O and LSE, 5 for gradients) against the float reference, no NaN,
 * LSE -inf / O 0 / dQ 0 exactly on rows with no visible key. */
void fh_check(const fh_case *c, const fh_inputs *in, const fh_result *r, int backward, const uint8_t *mask,
              const uint8_t *keep);

#endif
