/* support_compare.c: the tolerance rule over a whole tensor, and its assertions. */
#include "support_compare.h"

#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The rule is applied to the whole tensor at once, as the FlashAttention
 * and PyTorch suites do: max |got - ref| <= k * max |low - ref| + floor.
 * Per element would be wrong: the low-precision reference is exact by luck
 * at some elements, which would demand exactness there. The floor, a few
 * float ulps of the largest reference value, covers tensors whose
 * low-precision error is zero or nearly so (one key: O = V exactly). */
#define TS_FLOOR_ULPS 4.0

int ts_compare(const float *got, const double *ref, const double *low, size_t n, double k, ts_error *e) {
    memset(e, 0, sizeof *e);
    for (size_t i = 0; i < n; ++i) {
        if (!isfinite(ref[i])) {
            e->ref_nonfinite++;
            /* Only the LSE of a fully masked row may be non-finite, and then exactly -inf. */
            if (!(ref[i] == -INFINITY && (double)got[i] == -INFINITY)) e->masked_wrong++;
            continue;
        }
        if (!isfinite(got[i])) {
            e->nonfinite++;
            continue;
        }
        const double err = fabs((double)got[i] - ref[i]);
        if (err > e->max_err) e->max_err = err, e->worst = i;
        if (fabs(ref[i]) > e->max_ref) e->max_ref = fabs(ref[i]);
        /* A non-finite low-precision value would only loosen the bound: leave it out. */
        if (isfinite(low[i]) && fabs(low[i] - ref[i]) > e->max_low_err) e->max_low_err = fabs(low[i] - ref[i]);
    }
    e->bound = k * e->max_low_err + TS_FLOOR_ULPS * FLT_EPSILON * e->max_ref;
    return e->nonfinite == 0 && e->masked_wrong == 0 && e->max_err <= e->bound;
}

void ts_assert_rule(const char *label, const char *what, const float *got, const double *ref, const double *low,
                    size_t n, const ts_rule *rule) {
    ts_error e;
    const int ok = ts_compare(got, ref, low, n, rule->k, &e);
    if (getenv("FLASHCL_TEST_VERBOSE")) /* how much room each check leaves, to watch the margins */
        fprintf(stderr, "%s: %s error %.3g bound %.3g (ratio %.2f) relative %.3g\n", label, what, e.max_err, e.bound,
                e.bound > 0 ? e.max_err / e.bound : 0.0, e.max_ref > 0 ? e.max_err / e.max_ref : 0.0);
    if (rule->reference_finite)
        ck_assert_msg(e.ref_nonfinite == 0, "%s: the reference %s has %zu non-finite values", label, what,
                      e.ref_nonfinite);
    ck_assert_msg(e.nonfinite == 0, "%s: %s has %zu NaN/inf values where the reference is finite", label, what,
                  e.nonfinite);
    ck_assert_msg(e.masked_wrong == 0, "%s: %s is not -inf at %zu fully masked rows", label, what, e.masked_wrong);
    ck_assert_msg(ok, "%s: %s max error %.3g at %zu (got %.9g, want %.9g) exceeds %g x low-precision error %.3g + "
                  "floor = %.3g",
                  label, what, e.max_err, e.worst, (double)got[e.worst], ref[e.worst], rule->k, e.max_low_err,
                  e.bound);
    if (rule->target > 0)
        ck_assert_msg(e.max_err <= rule->target * e.max_ref, "%s: %s relative error %.3g exceeds %.1g", label, what,
                      e.max_ref > 0 ? e.max_err / e.max_ref : e.max_err, rule->target);
}
