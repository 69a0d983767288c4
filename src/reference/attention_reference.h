/* attention_reference.h: plain attention on the CPU, the judge of every kernel (not part of libflashcl). */
#ifndef FLASHCL_ATTENTION_REFERENCE_H
#define FLASHCL_ATTENTION_REFERENCE_H

#include <stddef.h>
#include <stdint.h>

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

/* What the reference takes beyond desc (whose causal flag, window and
 * dropout fields it honours by themselves). Initialize it with designated
 * members: fields are added at the end. */
typedef struct flashcl_reference_extras {
    /* A general element mask (B, Hq, Sq, Sk), 0 = masked, intersected with
     * desc's causal flag and window; NULL: none. */
    const uint8_t *mask;
    /* The dropout keep mask (B, Hq, Sq, Sk), 1 = kept, used instead of the
     * Philox mask desc describes (desc->dropout_p still gives the scale);
     * NULL: the Philox mask. */
    const uint8_t *keep;
    /* The score modifiers, in the library's order (flashcl_attention_extras):
     * softcap > 0 turns each scaled score s into softcap * tanh(s /
     * softcap); then, with alibi_slopes (heads_q floats, or batch x heads_q
     * with alibi_per_batch; NULL: none), s - slope * |i + Sk - Sq - j|; the
     * masks after. The backward applies soft-capping's derivative. */
    double softcap;
    const float *alibi_slopes;
    int alibi_per_batch;
    /* An additive bias, contiguous (bias_batch, bias_heads, Sq, Sk) with
     * bias_batch 1 or B and bias_heads 1 or Hq (1: broadcast); NULL: none.
     * Added after the modifiers, before the masks; a -inf bias hides its pair
     * as a mask does. */
    const float *bias;
    int bias_batch, bias_heads;
    /* The backward's dBias (the bias's shape, summed over its broadcast
     * dimensions): dS = P * (dP - D) before soft-capping's derivative;
     * NULL: not computed. */
    double *dbias;
} flashcl_reference_extras;

/* The forward and backward passes with extras (NULL: none). */
int flashcl_reference_forward_ex(const flashcl_attention_desc *desc, flashcl_ref_precision precision,
                                 const flashcl_reference_extras *extras, const float *q, const float *k,
                                 const float *v, double *o, double *lse);
int flashcl_reference_backward_ex(const flashcl_attention_desc *desc, flashcl_ref_precision precision,
                                  const flashcl_reference_extras *extras, const float *q, const float *k,
                                  const float *v, const float *dout, double *dq, double *dk, double *dv);

/* llama.cpp's ALiBi slopes for `heads` heads from max_bias (flashcl.h,
 * alibi_max_bias), computed in double, rounded to float. */
void flashcl_reference_alibi_slopes(int heads, double max_bias, float *slopes);

/* Philox4x32-10 of counter ctr under key, all four output words into out. */
void flashcl_reference_philox(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* 1 if dropout keeps element (b, h, i, j) of desc (see flashcl_attention_desc). */
int flashcl_reference_dropout_keep(const flashcl_attention_desc *desc, int b, int h, int i, int j);

/* The whole keep mask of desc, (B, Hq, Sq, Sk), 1 = kept. */
void flashcl_reference_dropout_mask(const flashcl_attention_desc *desc, uint8_t *keep);

/* Expands a block mask (see flashcl_attention_extras) into the element mask
 * (B, Hq, Sq, Sk) that flashcl_reference_extras.mask takes. */
void flashcl_reference_expand_block_mask(const flashcl_attention_desc *desc, const uint8_t *block_mask,
                                         int block_size, int per_head, uint8_t *mask);

/* Reorders a contiguous (B,S,H,D) array into (B,H,S,D) or back. */
void flashcl_reference_bshd_to_bhsd(const float *in, float *out, int batch, int seqlen, int heads, int dim);
void flashcl_reference_bhsd_to_bshd(const float *in, float *out, int batch, int heads, int seqlen, int dim);

#endif
