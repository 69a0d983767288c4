/* run_check.c: error measures and tolerances of `flashcl run --check` against the CPU double reference. */
#include "run_check.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_reference.h"

/* 1 if the pair is a NaN/infinity agreement, -1 a mismatch, 0 both finite. */
static int nonfinite_pair(double r, double g) {
    if (isfinite(r) && isfinite(g)) return 0;
    if (isnan(r) && isnan(g)) return 1;
    return isinf(r) && r == g ? 1 : -1; /* same infinity; else one side finite, or they differ */
}

void check_compare(const double *ref, const float *got, size_t count, double scale_floor, check_error *e) {
    memset(e, 0, sizeof *e);
    e->floor = scale_floor;
    for (size_t i = 0; i < count; ++i) {
        const double r = ref[i], g = (double)got[i];
        if (isfinite(r) && fabs(r) > e->max_ref) e->max_ref = fabs(r);
        const int pair = nonfinite_pair(r, g);
        if (pair > 0) ++e->nonfinite_agreed;
        else if (pair < 0) ++e->mismatched;
        else if (fabs(g - r) > e->max_abs) e->max_abs = fabs(g - r);
    }
    const double scale = fmax(e->max_ref, scale_floor);
    e->relative = scale > 0.0 ? e->max_abs / scale : e->max_abs;
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
    printf("check %-3s: max abs error %.3e, max rel error %.3e (max |ref| %.3e, floor %.3e, tolerance %.1e)", name,
           e->max_abs, e->relative, e->max_ref, e->floor, tolerance);
    if (e->nonfinite_agreed) printf(", %zu NaN or infinity agree", e->nonfinite_agreed);
    if (e->mismatched) printf(", %zu NaN or infinity mismatches", e->mismatched);
    printf(" %s\n", ok ? "ok" : "FAILED");
    return ok;
}

/* The class of one stored value: 0 finite, 1 NaN, 2 infinity. Half and
 * bfloat16 are tested on their bits: all-ones exponent, zero mantissa or not. */
static int value_class(const void *data, flashcl_dtype dtype, size_t i) {
    if (dtype == FLASHCL_DTYPE_F32) {
        const float x = ((const float *)data)[i];
        return isnan(x) ? 1 : isinf(x) ? 2 : 0;
    }
    const uint16_t bits = ((const uint16_t *)data)[i];
    const uint16_t exponent = dtype == FLASHCL_DTYPE_F16 ? 0x7c00 : 0x7f80;
    const uint16_t mantissa = dtype == FLASHCL_DTYPE_F16 ? 0x03ff : 0x007f;
    if ((bits & exponent) != exponent) return 0;
    return (bits & mantissa) ? 1 : 2;
}

void check_count_nonfinite(const void *data, flashcl_dtype dtype, size_t count, size_t *nan, size_t *inf) {
    *nan = *inf = 0;
    for (size_t i = 0; i < count; ++i) {
        const int c = value_class(data, dtype, i);
        *nan += c == 1;
        *inf += c == 2;
    }
}

size_t check_note_nonfinite(const char *name, const void *data, flashcl_dtype dtype, size_t count) {
    size_t nan, inf;
    check_count_nonfinite(data, dtype, count, &nan, &inf);
    if (nan || inf) fprintf(stderr, "flashcl run: note: %s holds %zu NaN / %zu Inf values\n", name, nan, inf);
    return nan + inf;
}

static int compare_one(const char *name, const double *ref, const float *got, size_t count, double scale_floor,
                       double tolerance) {
    check_error e;
    check_compare(ref, got, count, scale_floor, &e);
    return check_report(name, &e, tolerance);
}

/* Root mean square of the finite elements (0 if none). */
static double rms(const float *x, size_t count) {
    double sum = 0.0;
    size_t finite = 0;
    for (size_t i = 0; i < count; ++i)
        if (isfinite(x[i])) {
            sum += (double)x[i] * (double)x[i];
            ++finite;
        }
    return finite ? sqrt(sum / (double)finite) : 0.0;
}

void check_floors_of(const flashcl_attention_desc *d, const check_inputs *in, check_floors *f) {
    const size_t q_count = (size_t)d->batch * d->heads_q * d->seqlen_q * d->head_dim;
    const size_t kv_count = (size_t)d->batch * d->heads_kv * d->seqlen_k * d->head_dim;
    const double scale = d->scale != 0.0f ? (double)d->scale : 1.0 / sqrt((double)d->head_dim);
    const double v = rms(in->v, kv_count), dout = in->dout ? rms(in->dout, q_count) : 0.0;
    /* dP = dO V^T: dot products of D terms, typically sqrt(D) times the product of rms values. */
    const double dp = sqrt((double)d->head_dim) * dout * v;
    f->o = v;
    f->lse = 1.0;
    f->dv = dout;
    f->dq = scale * dp * rms(in->k, kv_count);
    f->dk = scale * dp * rms(in->q, q_count);
    f->dbias = dp; /* dS = P (dP - D), P <= 1 */
}

static double pick(double tolerance, check_quantity quantity, flashcl_dtype dtype) {
    return tolerance > 0.0 ? tolerance : check_default_tolerance(quantity, dtype);
}

/* The block mask and the score modifiers of the inputs, as the reference takes them. */
static flashcl_reference_extras reference_extras(const check_inputs *in) {
    flashcl_reference_extras x = {.mask = in->mask};
    if (in->mods) {
        x.softcap = in->mods->softcap;
        x.alibi_slopes = in->mods->alibi_slopes;
        x.alibi_per_batch = in->mods->alibi_per_batch;
        x.bias = in->mods->bias;
        x.bias_batch = in->mods->bias_batch;
        x.bias_heads = in->mods->bias_heads;
    }
    return x;
}

int check_forward(const flashcl_attention_desc *d, const check_inputs *in, const float *got_o, const float *got_lse,
                  double tolerance) {
    const size_t q_count = (size_t)d->batch * d->heads_q * d->seqlen_q * d->head_dim;
    const size_t lse_count = (size_t)d->batch * d->heads_q * d->seqlen_q;
    double *o = malloc(q_count * sizeof *o), *lse = malloc(lse_count * sizeof *lse);
    /* The reference honours desc's window and dropout itself; the block mask comes expanded. */
    const flashcl_reference_extras extras = reference_extras(in);
    int result = -1;
    check_floors floors;
    check_floors_of(d, in, &floors);
    if (o && lse && flashcl_reference_forward_ex(d, FLASHCL_REF_DOUBLE, &extras, in->q, in->k, in->v, o, lse) == 0) {
        result = compare_one("O", o, got_o, q_count, floors.o, pick(tolerance, CHECK_OUTPUT, d->dtype));
        result &= compare_one("LSE", lse, got_lse, lse_count, floors.lse, pick(tolerance, CHECK_LSE, d->dtype));
    }
    free(o);
    free(lse);
    return result;
}

int check_backward(const flashcl_attention_desc *d, const check_inputs *in, const float *got_dq, const float *got_dk,
                   const float *got_dv, double tolerance) {
    return check_backward_dbias(d, in, got_dq, got_dk, got_dv, NULL, tolerance);
}

int check_backward_dbias(const flashcl_attention_desc *d, const check_inputs *in, const float *got_dq,
                         const float *got_dk, const float *got_dv, const float *got_dbias, double tolerance) {
    const size_t q_count = (size_t)d->batch * d->heads_q * d->seqlen_q * d->head_dim;
    const size_t kv_count = (size_t)d->batch * d->heads_kv * d->seqlen_k * d->head_dim;
    double *dq = malloc(q_count * sizeof *dq), *dk = malloc(kv_count * sizeof *dk), *dv = malloc(kv_count * sizeof *dv);
    flashcl_reference_extras extras = reference_extras(in);
    /* dBias has the bias's shape, its broadcast dimensions summed. */
    const size_t dbias_count = got_dbias ? (size_t)extras.bias_batch * (size_t)extras.bias_heads *
                                               (size_t)d->seqlen_q * (size_t)d->seqlen_k
                                         : 0;
    double *dbias = got_dbias ? malloc((dbias_count ? dbias_count : 1) * sizeof *dbias) : NULL;
    extras.dbias = dbias;
    int result = -1;
    if (dq && dk && dv && (dbias || !got_dbias) &&
        flashcl_reference_backward_ex(d, FLASHCL_REF_DOUBLE, &extras, in->q, in->k, in->v, in->dout, dq, dk, dv) ==
            0) {
        const double t = pick(tolerance, CHECK_GRADIENT, d->dtype);
        check_floors floors;
        check_floors_of(d, in, &floors);
        result = compare_one("dQ", dq, got_dq, q_count, floors.dq, t);
        result &= compare_one("dK", dk, got_dk, kv_count, floors.dk, t);
        result &= compare_one("dV", dv, got_dv, kv_count, floors.dv, t);
        if (got_dbias) result &= compare_one("dBias", dbias, got_dbias, dbias_count, floors.dbias, t);
    }
    free(dbias);
    free(dq);
    free(dk);
    free(dv);
    return result;
}
