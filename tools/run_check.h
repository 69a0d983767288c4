/* run_check.h: `flashcl run --check`, comparing the device's outputs with the CPU double-precision reference. */
#ifndef FLASHCL_TOOLS_RUN_CHECK_H
#define FLASHCL_TOOLS_RUN_CHECK_H

#include <stddef.h>

#include "attention_reference.h"
#include "flashcl.h"

/* How far one output is from its reference.
 *
 * The tolerance rule: an output passes when every element pair agrees
 * (below) and max |got - ref| <= tolerance * max(max |ref|, floor). A purely
 * relative error explodes for an output that is ~0 by cancellation (dQ
 * and dK when all V rows are equal, or with one key: the double reference
 * gives 1e-16, float arithmetic 1e-7 of rounding), so the scale never goes
 * below `floor`, the typical size of the terms the output is made of: the
 * float rounding of a sum is relative to its terms, not to the result. See
 * check_floors for each output's floor.
 *
 * Non-finite elements: ref and got agree when both are NaN or both are the
 * same infinity; exactly one non-finite, or opposite infinities, is a
 * mismatch. Only elements finite on both sides enter max_abs. */
typedef struct check_error {
    double max_abs;    /* largest |got - ref| over elements where both are finite */
    double max_ref;    /* largest finite |ref| */
    double floor;      /* the lower bound of the scale (see above) */
    double relative;   /* max_abs / max(max_ref, floor); max_abs when both are 0 */
    size_t mismatched; /* element pairs that disagree on NaN or infinity */
    size_t nonfinite_agreed; /* NaN or infinity on both sides, agreeing */
} check_error;

void check_compare(const double *ref, const float *got, size_t count, double scale_floor, check_error *error);

/* The default relative tolerances, documented in `flashcl run --help`. */
typedef enum check_quantity { CHECK_OUTPUT, CHECK_LSE, CHECK_GRADIENT } check_quantity;
double check_default_tolerance(check_quantity quantity, flashcl_dtype dtype);

/* Prints one line "check NAME: ..." and returns 1 if within tolerance. */
int check_report(const char *name, const check_error *error, double tolerance);

/* NaN and infinity counts of raw output data (dtype as stored; LSE is F32). */
void check_count_nonfinite(const void *data, flashcl_dtype dtype, size_t count, size_t *nan, size_t *inf);

/* Prints "flashcl run: note: NAME holds N NaN / M Inf values" to stderr
 * when the data holds any; returns the number of non-finite values. */
size_t check_note_nonfinite(const char *name, const void *data, flashcl_dtype dtype, size_t count);

/* Inputs of the reference (float, BHSD), as the device saw them. */
typedef struct check_inputs {
    const float *q, *k, *v, *dout;
    const unsigned char *mask; /* element mask (B, Hq, Sq, Sk) of a block mask; NULL: none */
    /* The score modifiers (--softcap, the ALiBi slopes) and --bias, as flashcl_reference_extras takes them; NULL:
     * none. */
    const flashcl_reference_extras *mods;
} check_inputs;

/* The floor of each output (see check_error), from the root mean squares
 * of the inputs' finite elements: O rms(V); LSE 1 (an absolute error e of
 * LSE is a relative error e of the softmax's sum); dV rms(dO); dQ
 * scale * sqrt(D) * rms(dO) * rms(V) * rms(K), the size of dS = P (dP - Di)
 * (dP = dO V^T, dot products of D terms) times K; dK the same with rms(Q). */
typedef struct check_floors {
    double o, lse, dq, dk, dv, dbias; /* dBias: rms(dO) rms(V) sqrt(D), the size of dP */
} check_floors;
void check_floors_of(const flashcl_attention_desc *desc, const check_inputs *in, check_floors *floors);

/* Run the reference and compare the device's outputs (float, BHSD), one
 * line each. Return 1 if all pass, 0 if any fails, -1 if out of memory.
 * tolerance 0 selects the defaults. */
int check_forward(const flashcl_attention_desc *desc, const check_inputs *in, const float *o, const float *lse,
                  double tolerance);
int check_backward(const flashcl_attention_desc *desc, const check_inputs *in, const float *dq, const float *dk,
                   const float *dv, double tolerance);
/* The same with dBias (float, the shape of in->mods' bias; NULL: not compared). */
int check_backward_dbias(const flashcl_attention_desc *desc, const check_inputs *in, const float *dq, const float *dk,
                         const float *dv, const float *dbias, double tolerance);

#endif
