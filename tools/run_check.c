/* run_check.c: error measures and tolerances of `flashcl run --check` against the CPU double reference. */
#include "run_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "attention_reference.h"

void check_compare(const double *ref, const float *got, size_t count, check_error *e) {
    e->max_abs = 0.0;
    e->max_ref = 0.0;
    e->mismatched = 0;
    for (size_t i = 0; i < count; ++i) {
        const double r = ref[i], g = (double)got[i];
        if (isfinite(r) && fabs(r) > e->max_ref) e->max_ref = fabs(r);
        if (isnan(g) || isnan(r) || ((isinf(r) || isinf(g)) && r != g)) {
            ++e->mismatched;
            continue;
        }
        if (isfinite(r) && fabs(g - r) > e->max_abs) e->max_abs = fabs(g - r);
    }
    e->relative = e->max_ref > 0.0 ? e->max_abs / e->max_ref : e->max_abs;
}

double check_default_tolerance(check_quantity quantity, flashcl_dtype dtype) {
    /* float32: a few float roundings of accumulations over ~D and ~Sk terms.
     * float16 / bfloat16 storage: the inputs are exact in float and the
     * arithmetic is float, so the output's final rounding (2^-11 and 2^-8
     * of a value no larger than max |ref|) dominates; twice that. LSE is
     * stored as float whatever the dtype. */
    switch (quantity) {
    case CHECK_LSE:
        return 3e-5;
    case CHECK_OUTPUT:
        return dtype == FLASHCL_DTYPE_F32 ? 3e-5 : dtype == FLASHCL_DTYPE_F16 ? 1e-3 : 8e-3;
    case CHECK_GRADIENT:
        return dtype == FLASHCL_DTYPE_F32 ? 1e-4 : dtype == FLASHCL_DTYPE_F16 ? 2e-3 : 1.6e-2;
    }
    return 0.0;
}

int check_report(const char *name, const check_error *e, double tolerance) {
    const int ok = e->mismatched == 0 && e->relative <= tolerance;
    printf("check %-3s: max abs error %.3e, max rel error %.3e (max |ref| %.3e, tolerance %.1e)", name, e->max_abs,
           e->relative, e->max_ref, tolerance);
    if (e->mismatched) printf(", %zu NaN or infinity mismatches", e->mismatched);
    printf(" %s\n", ok ? "ok" : "FAILED");
    return ok;
}

static int compare_one(const char *name, const double *ref, const float *got, size_t count, double tolerance) {
    check_error e;
    check_compare(ref, got, count, &e);
    return check_report(name, &e, tolerance);
}

static double pick(double tolerance, check_quantity quantity, flashcl_dtype dtype) {
    return tolerance > 0.0 ? tolerance : check_default_tolerance(quantity, dtype);
}

int check_forward(const flashcl_attention_desc *d, const check_inputs *in, const float *got_o, const float *got_lse,
                  double tolerance) {
    const size_t q_count = (size_t)d->batch * d->heads_q * d->seqlen_q * d->head_dim;
    const size_t lse_count = (size_t)d->batch * d->heads_q * d->seqlen_q;
    double *o = malloc(q_count * sizeof *o), *lse = malloc(lse_count * sizeof *lse);
    /* The reference honours desc's window and dropout itself; the block mask comes expanded. */
    const flashcl_reference_extras extras = {in->mask, NULL};
    int result = -1;
    if (o && lse && flashcl_reference_forward_ex(d, FLASHCL_REF_DOUBLE, &extras, in->q, in->k, in->v, o, lse) == 0) {
        result = compare_one("O", o, got_o, q_count, pick(tolerance, CHECK_OUTPUT, d->dtype));
        result &= compare_one("LSE", lse, got_lse, lse_count, pick(tolerance, CHECK_LSE, d->dtype));
    }
    free(o);
    free(lse);
    return result;
}

int check_backward(const flashcl_attention_desc *d, const check_inputs *in, const float *got_dq, const float *got_dk,
                   const float *got_dv, double tolerance) {
    const size_t q_count = (size_t)d->batch * d->heads_q * d->seqlen_q * d->head_dim;
    const size_t kv_count = (size_t)d->batch * d->heads_kv * d->seqlen_k * d->head_dim;
    double *dq = malloc(q_count * sizeof *dq), *dk = malloc(kv_count * sizeof *dk), *dv = malloc(kv_count * sizeof *dv);
    const flashcl_reference_extras extras = {in->mask, NULL};
    int result = -1;
    if (dq && dk && dv &&
        flashcl_reference_backward_ex(d, FLASHCL_REF_DOUBLE, &extras, in->q, in->k, in->v, in->dout, dq, dk, dv) ==
            0) {
        const double t = pick(tolerance, CHECK_GRADIENT, d->dtype);
        result = compare_one("dQ", dq, got_dq, q_count, t);
        result &= compare_one("dK", dk, got_dk, kv_count, t);
        result &= compare_one("dV", dv, got_dv, kv_count, t);
    }
    free(dq);
    free(dk);
    free(dv);
    return result;
}
