/* run_check.h: `flashcl run --check`, comparing the device's outputs with the CPU double-precision reference. */
#ifndef FLASHCL_TOOLS_RUN_CHECK_H
#define FLASHCL_TOOLS_RUN_CHECK_H

#include <stddef.h>

#include "flashcl.h"

/* How far one output is from its reference. */
typedef struct check_error {
    double max_abs;  /* largest |got - ref| over elements where both are finite */
    double max_ref;  /* largest finite |ref| */
    double relative; /* max_abs / max_ref (max_abs when max_ref is 0) */
    size_t mismatched; /* NaN got, or an infinity where the other side differs */
} check_error;

void check_compare(const double *ref, const float *got, size_t count, check_error *error);

/* The default relative tolerances, documented in `flashcl run --help`. */
typedef enum check_quantity { CHECK_OUTPUT, CHECK_LSE, CHECK_GRADIENT } check_quantity;
double check_default_tolerance(check_quantity quantity, flashcl_dtype dtype);

/* Prints one line "check NAME: ..." and returns 1 if within tolerance. */
int check_report(const char *name, const check_error *error, double tolerance);

/* Inputs of the reference (float, BHSD), as the device saw them. */
typedef struct check_inputs {
    const float *q, *k, *v, *dout;
    const unsigned char *mask; /* element mask (B, Hq, Sq, Sk) of a block mask; NULL: none */
} check_inputs;

/* Run the reference and compare the device's outputs (float, BHSD), one
 * line each. Return 1 if all pass, 0 if any fails, -1 if out of memory.
 * tolerance 0 selects the defaults. */
int check_forward(const flashcl_attention_desc *desc, const check_inputs *in, const float *o, const float *lse,
                  double tolerance);
int check_backward(const flashcl_attention_desc *desc, const check_inputs *in, const float *dq, const float *dk,
                   const float *dv, double tolerance);

#endif
