/* support_compare.h: the project's tolerance rule, device results against the double-precision CPU reference. */
#ifndef FLASHCL_SUPPORT_COMPARE_H
#define FLASHCL_SUPPORT_COMPARE_H

#include <stddef.h>

/* Error of one output against the golden (double) reference, with the
 * scale the rule compares it to. */
typedef struct ts_error {
    double max_err;       /* max |got - ref| over finite ref */
    double max_low_err;   /* max |low - ref|: the low-precision reference's error */
    double max_ref;       /* max |ref| over finite ref */
    double bound;         /* k * max_low_err + floor */
    size_t worst;         /* index of max_err */
    size_t nonfinite;     /* got NaN/inf where ref is finite */
    size_t masked_wrong;  /* ref is -inf (LSE of a fully masked row) but got is not */
    size_t ref_nonfinite; /* elements where the reference itself is not finite */
} ts_error;

/* The rule of docs/testing.md, taken over the whole tensor (max-abs error vs
 * max-abs error of the low-precision reference; see support_compare.c).
 * Returns 1 if within k * low-precision error + floor. */
int ts_compare(const float *got, const double *ref, const double *low, size_t n, double k, ts_error *e);

/* How one output is judged. Each pass sets its own k (the forward 2, the
 * backward 3-5, by how far its float reference drifts) and target. */
typedef struct ts_rule {
    double k;             /* max error <= k x the low-precision reference's + floor */
    double target;        /* > 0: also max error <= target x max |ref| (the relative goal) */
    int reference_finite; /* 1: the reference must be finite everywhere (gradients have no -inf) */
} ts_rule;

/* Asserts the rule on got (n elements) with `label: what` in every message;
 * FLASHCL_TEST_VERBOSE prints the margin each check leaves. */
void ts_assert_rule(const char *label, const char *what, const float *got, const double *ref, const double *low,
                    size_t n, const ts_rule *rule);

#endif
