/* attention_reference.h: plain attention on the CPU, the judge of every kernel (not part of libflashcl). */
#ifndef FLASHCL_ATTENTION_REFERENCE_H
#define FLASHCL_ATTENTION_REFERENCE_H

#include <stddef.h>

#include "flashcl.h"

/* Arithmetic precision of the reference: double is the golden reference;
 * float rounds every intermediate to float, as naive float code would, and
 * gives the error scale of the tolerance rule. */
typedef enum { FLASHCL_REF_DOUBLE = 0, FLASHCL_REF_FLOAT = 1 } flashcl_ref_precision;

/* Forward pass on contiguous BHSD arrays: q, o (B,Hq,Sq,D); k, v (B,Hkv,Sk,D);
 * lse (B,Hq,Sq), -inf for fully masked rows (whose o is 0). lse may be NULL.
 * Returns 0, or -1 if out of memory. */
int flashcl_reference_forward(const flashcl_attention_desc *desc, flashcl_ref_precision precision, const float *q,
                              const float *k, const float *v, double *o, double *lse);

/* Backward pass on contiguous BHSD arrays: given dO, the gradients dq (like
 * q), dk and dv (like k); sums over the query heads sharing a K/V head.
 * Returns 0, or -1 if out of memory. */
int flashcl_reference_backward(const flashcl_attention_desc *desc, flashcl_ref_precision precision, const float *q,
                               const float *k, const float *v, const float *dout, double *dq, double *dk,
                               double *dv);

/* Reorders a contiguous (B,S,H,D) array into (B,H,S,D) or back. */
void flashcl_reference_bshd_to_bhsd(const float *in, float *out, int batch, int seqlen, int heads, int dim);
void flashcl_reference_bhsd_to_bshd(const float *in, float *out, int batch, int heads, int seqlen, int dim);

#endif
