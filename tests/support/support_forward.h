/* support_forward.h: one forward problem with its references, run on strided poisoned tensors and judged by the rule. */
#ifndef FLASHCL_SUPPORT_FORWARD_H
#define FLASHCL_SUPPORT_FORWARD_H

#include <stddef.h>
#include <stdint.h>

#include "flashcl.h"
#include "support_tensor.h"

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

/* Random inputs from seed (Q, K in [-amplitude, amplitude], V in [-1, 1])
 * and both references. */
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
