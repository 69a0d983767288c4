/* feature_harness.h: runs forward and backward with a window, block mask or dropout and judges them against the reference. */
#ifndef FLASHCL_FEATURE_HARNESS_H
#define FLASHCL_FEATURE_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "flashcl.h"
#include "test_support.h" /* the shared library this builds on */

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

/* Random inputs of a case (fixed seed, all in [-1, 1]), contiguous BHSD. */
typedef struct fh_inputs {
    float *q, *k, *v, *dout;
    size_t q_count, kv_count, lse_count;
} fh_inputs;

/* A dense case named name: (batch, hq query heads, hkv KV heads, sq x sk, head dim d), causal or not, f32. */
fh_case fh_case_make(const char *name, int batch, int hq, int hkv, int sq, int sk, int d, int causal);

/* A test context whose calls run the portable kernels (tensor cores off). */
flashcl_context *fh_portable_context(void);

/* flashcl_explain_call of pass with extras ex (NULL: none); fails the test on an error. */
flashcl_call_stats fh_explain(flashcl_context *ctx, flashcl_pass pass, const flashcl_attention_desc *d,
                              const flashcl_attention_extras *ex);

void fh_inputs_make(const fh_case *c, uint64_t seed, fh_inputs *in);
void fh_inputs_free(fh_inputs *in);
/* Q, K and V as the device stores them in dtype (the reference must see the same values). */
void fh_round_inputs(fh_inputs *in, flashcl_dtype dtype);

/* Forward (and, if backward, the backward) through flashcl_forward_ex /
 * flashcl_backward_ex on contiguous views with canaries; outputs start
 * poisoned and must be written exactly (every element, nothing else).
 * Fails the test on any error. */
void fh_run(flashcl_context *ctx, const fh_case *c, const fh_inputs *in, int backward, fh_result *out);
/* The same with extras beyond the case's block mask (NULL: none; the
 * score modifiers, say), and tensors of the desc's storage type (LSE
 * float): 16-bit inputs are rounded on the way, outputs read back as
 * floats. */
void fh_run_ex(flashcl_context *ctx, const fh_case *c, const fh_inputs *in, int backward,
               const flashcl_attention_extras *extras, fh_result *out);
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
/* The same with the reference's score modifiers (mods: softcap, ALiBi
 * slopes and the bias; its mask, keep and dbias are ignored, the arguments
 * stand; NULL: none).
 * A 16-bit O is held to the golden O rounded to its storage (as
 * support_forward.c does); the gradients are judged for float data only. */
void fh_check_ex(const fh_case *c, const fh_inputs *in, const fh_result *r, int backward, const uint8_t *mask,
                 const uint8_t *keep, const flashcl_reference_extras *mods);

/* Forward and backward of c under three forced tile plans (small tiles
 * with many boundary and skipped tiles, wide ones, narrow ones), each judged
 * by fh_check against the case's dense mask; inputs from `seed`. */
void fh_check_forced_plans(const fh_case *c, uint64_t seed);

/* Packed variable-length batches (the varlen suites). */
#define FH_MAX_SEQS 8

/* One packed problem: per-sequence lengths and the desc's features. */
typedef struct fh_varlen_case {
    const char *name;
    int batch, heads_q, heads_kv, head_dim, causal;
    int len_q[FH_MAX_SEQS], len_k[FH_MAX_SEQS];
    int extra_max;                 /* added to the longest lengths for desc->seqlen_q / seqlen_k */
    int window_left, window_right; /* both -1: no window */
    float dropout_p;
} fh_varlen_case;

/* The longest of n lengths. */
int fh_max_len(const int *len, int n);
/* Cumulative offsets of n lengths into cu (n + 1 entries); returns the total. */
int fh_cu_offsets(const int *len, int n, int *cu);
/* v's desc for `batch` sequences of at most sq x sk rows; dropout keyed by seed. */
flashcl_attention_desc fh_varlen_desc(const fh_varlen_case *v, int batch, int sq, int sk, uint64_t seed);
/* Element i of sequence b of case c: got within 2e-4 absolute + 2e-4
 * relative of want (infinities exactly equal). */
void fh_expect_close_in_sequence(const char *c, const char *what, int b, size_t i, float got, float want);

#endif
