/* test_support.h: shared helpers of the forward suites: random data, poisoned strided device tensors, the tolerance rule. */
#ifndef FLASHCL_TEST_SUPPORT_H
#define FLASHCL_TEST_SUPPORT_H

#include <stddef.h>
#include <stdint.h>

#include "attention_reference.h"
#include "flashcl.h"
#include "half_float.h" /* float <-> half / bfloat16, shared with the CLI and the bench */

/* Seconds a Check test may run: a cold kernel build is ~1-3 s, a large case
 * plus its CPU reference a few more; CTest's TIMEOUT sits above the sum. */
#define TS_CASE_TIMEOUT 240

/* ---- contexts -------------------------------------------------------- */

/* A context on the device FLASHCL_DEVICE names; fails the test with the
 * library's message if none can be created. */
flashcl_context *ts_context(void);

/* ---- random data and storage types ---------------------------------- */

/* A small deterministic generator (splitmix64), so failures reproduce. */
typedef struct ts_rng {
    uint64_t state;
} ts_rng;
double ts_uniform(ts_rng *rng, double lo, double hi);
void ts_fill_uniform(ts_rng *rng, float *x, size_t n, float lo, float hi);

/* x rounded to dtype's storage and back (identity for F32). */
float ts_round_to_dtype(float x, flashcl_dtype dtype);

/* ---- strided device tensors surrounded by poison --------------------- */

/* Where a view lies in its buffer: layout, a leading element offset, and
 * `pad` unused elements after each row, head and batch (0: contiguous). */
typedef struct ts_placement {
    flashcl_layout layout;
    size_t offset;
    size_t pad;
} ts_placement;

/* Elements after the view's last one that must stay untouched. */
#define TS_CANARY_ELEMS 67

/* A device buffer holding one (batch, heads, seqlen, dim) view; every byte
 * outside the view, and the whole view of an output, starts as a NaN
 * pattern nothing computes. `image` mirrors the buffer on the host. */
typedef struct ts_tensor {
    flashcl_tensor view;
    size_t batch, heads, seqlen, dim;
    size_t elem_size;
    flashcl_dtype dtype; /* storage of the elements (LSE: F32) */
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
void ts_tensor_free(ts_tensor *t);

/* Reads the buffer back into t->image (blocking). */
void ts_tensor_read(cl_command_queue queue, ts_tensor *t);

/* Fails the test unless every element of the view was written (no poison
 * left) and every element outside it still holds the poison (gaps, the
 * region before the offset and the canary after the end). */
void ts_assert_written_exactly(const ts_tensor *t, const char *name);

/* Fails the test unless the buffer still holds its initial poison
 * everywhere (a rejected call wrote nothing). Reads the buffer first. */
void ts_assert_untouched(cl_command_queue queue, ts_tensor *t, const char *name);

/* The view's elements as contiguous BHSD floats. */
void ts_tensor_gather(const ts_tensor *t, float *bhsd);

/* One dense attention problem's shape, as the forward suites list them. */
typedef struct ts_case {
    int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, causal;
    float scale;     /* 0: the default 1/sqrt(head_dim) */
    float amplitude; /* Q and K are uniform in [-amplitude, amplitude] */
} ts_case;

/* The descriptor of c with storage type dtype. */
flashcl_attention_desc ts_case_desc(const ts_case *c, flashcl_dtype dtype);

/* ---- the reference and the tolerance rule --------------------------- */

/* Error of one output against the golden reference, with the scale the
 * rule compares it to. */
typedef struct ts_error {
    double max_err;      /* max |got - ref| over finite ref */
    double max_low_err;  /* max |low - ref|: the low-precision reference's error */
    double max_ref;      /* max |ref| over finite ref */
    double bound;        /* k * max_low_err + floor */
    size_t worst;        /* index of max_err */
    size_t nonfinite;    /* got NaN/inf where ref is finite */
    size_t masked_wrong; /* ref is -inf (LSE of a fully masked row) but got is not */
} ts_error;

/* The rule of docs/testing.md, taken over the whole tensor (max-abs error vs
 * max-abs error of the low-precision reference; see test_support.c).
 * Returns 1 if within k * low-precision error + floor. */
int ts_compare(const float *got, const double *ref, const double *low, size_t n, double k, ts_error *e);

/* One forward problem: inputs (contiguous BHSD, already rounded to the
 * storage type) and its references. */
typedef struct ts_problem {
    flashcl_attention_desc desc;
    float *q, *k, *v;
    double *o_ref, *lse_ref; /* golden: double */
    double *o_low, *lse_low; /* low precision: float arithmetic (F32), or the golden O rounded to storage */
    size_t q_count, kv_count, lse_count;
    /* 1 (the default): also hold O and LSE to the 3e-5 relative target. Off
     * for large logits, where float rounding of scores ~100 alone costs
     * ~2e-5 (the float reference errs as much); the k=2 rule still applies. */
    int check_target;
} ts_problem;

/* Random inputs in [-amplitude, amplitude] from seed, and both references. */
void ts_problem_init(ts_problem *p, const flashcl_attention_desc *desc, uint64_t seed, float amplitude);
void ts_problem_free(ts_problem *p);

/* Placements of one run: q, k, v, o, lse. */
typedef struct ts_placements {
    ts_placement q, k, v, o, lse;
} ts_placements;

/* The same placement for every tensor. */
ts_placements ts_uniform_placements(flashcl_layout layout, size_t offset, size_t pad);

/* Runs flashcl_forward on ctx with freshly poisoned outputs placed as given,
 * asserts every output element was written and nothing else, and returns O
 * (contiguous BHSD floats) and LSE in o_out / lse_out (lse_out may be NULL:
 * the call then passes no LSE tensor). */
void ts_run_forward(flashcl_context *ctx, const ts_problem *p, const ts_placements *place, float *o_out,
                    float *lse_out);

/* Applies the tolerance rule (k = 2) and the 3e-5 relative target to O and
 * LSE, and that fully masked rows give O = 0 and LSE = -inf exactly. */
void ts_check_forward(const ts_problem *p, const float *o, const float *lse, const char *label);

#endif
