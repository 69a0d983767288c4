/* test_support.c: shared helpers of the forward suites: random data, poisoned strided device tensors, the tolerance rule. */
#include "test_support.h"

#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- contexts -------------------------------------------------------- */

flashcl_context *ts_context(void) {
    flashcl_context *ctx = NULL;
    flashcl_status status = flashcl_context_create(&ctx, NULL);
    ck_assert_msg(status == FLASHCL_SUCCESS && ctx, "flashcl_context_create: %s: %s", flashcl_status_string(status),
                  flashcl_last_error(NULL));
    return ctx;
}

/* ---- random data and storage types ---------------------------------- */

static uint64_t next_u64(ts_rng *rng) {
    uint64_t z = (rng->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double ts_uniform(ts_rng *rng, double lo, double hi) {
    return lo + (hi - lo) * ((double)(next_u64(rng) >> 11) * 0x1.0p-53);
}

void ts_fill_uniform(ts_rng *rng, float *x, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; ++i) x[i] = (float)ts_uniform(rng, lo, hi);
}

float ts_round_to_dtype(float x, flashcl_dtype dtype) {
    switch (dtype) {
    case FLASHCL_DTYPE_F16:
        return half_to_float(float_to_half(x));
    case FLASHCL_DTYPE_BF16:
        return bf16_to_float(float_to_bf16(x));
    default:
        return x;
    }
}

/* ---- strided device tensors surrounded by poison --------------------- */

/* NaN patterns no arithmetic produces (quiet NaNs from arithmetic carry no
 * payload), for float and for both 16-bit types (a NaN as half and as bf16). */
#define POISON_F32 0x7fc0deadu
#define POISON_16 0x7fd7u

static void store_element(unsigned char *at, flashcl_dtype dtype, float x) {
    if (dtype == FLASHCL_DTYPE_F32) {
        memcpy(at, &x, sizeof x);
    } else {
        uint16_t h = dtype == FLASHCL_DTYPE_F16 ? float_to_half(x) : float_to_bf16(x);
        memcpy(at, &h, sizeof h);
    }
}

static float load_element(const unsigned char *at, flashcl_dtype dtype) {
    if (dtype == FLASHCL_DTYPE_F32) {
        float x;
        memcpy(&x, at, sizeof x);
        return x;
    }
    uint16_t h;
    memcpy(&h, at, sizeof h);
    return dtype == FLASHCL_DTYPE_F16 ? half_to_float(h) : bf16_to_float(h);
}

static int is_poison(const unsigned char *at, size_t elem_size) {
    if (elem_size == 4) {
        uint32_t u;
        memcpy(&u, at, sizeof u);
        return u == POISON_F32;
    }
    uint16_t h;
    memcpy(&h, at, sizeof h);
    return h == POISON_16;
}

flashcl_tensor ts_strided_view(const ts_placement *place, size_t batch, size_t heads, size_t seqlen, size_t dim) {
    (void)batch;
    flashcl_tensor t = {NULL, place->offset, 0, 0, 0};
    const size_t pad = place->pad;
    if (place->layout == FLASHCL_LAYOUT_BSHD) {
        t.stride_head = dim + pad;
        t.stride_seq = heads * t.stride_head + pad;
        t.stride_batch = seqlen * t.stride_seq + pad;
    } else {
        t.stride_seq = dim + pad;
        t.stride_head = seqlen * t.stride_seq + pad;
        t.stride_batch = heads * t.stride_head + pad;
    }
    return t;
}

static size_t element_index(const ts_tensor *t, size_t b, size_t h, size_t s, size_t d) {
    return t->view.offset + b * t->view.stride_batch + h * t->view.stride_head + s * t->view.stride_seq + d;
}

void ts_tensor_create(ts_tensor *t, cl_context context, const ts_placement *place, size_t batch, size_t heads,
                      size_t seqlen, size_t dim, flashcl_dtype dtype, const float *values) {
    memset(t, 0, sizeof *t);
    t->view = ts_strided_view(place, batch, heads, seqlen, dim);
    t->batch = batch, t->heads = heads, t->seqlen = seqlen, t->dim = dim;
    t->dtype = dtype;
    t->elem_size = flashcl_dtype_size(dtype);
    t->capacity = element_index(t, batch - 1, heads - 1, seqlen - 1, dim - 1) + 1 + TS_CANARY_ELEMS;
    const size_t bytes = t->capacity * t->elem_size;
    t->image = malloc(bytes);
    t->initial = malloc(bytes);
    ck_assert_msg(t->image && t->initial, "out of host memory");
    for (size_t i = 0; i < t->capacity; ++i) {
        if (t->elem_size == 4) {
            const uint32_t p = POISON_F32;
            memcpy(t->initial + 4 * i, &p, 4);
        } else {
            const uint16_t p = POISON_16;
            memcpy(t->initial + 2 * i, &p, 2);
        }
    }
    if (values) {
        size_t n = 0;
        for (size_t b = 0; b < batch; ++b)
            for (size_t h = 0; h < heads; ++h)
                for (size_t s = 0; s < seqlen; ++s)
                    for (size_t d = 0; d < dim; ++d)
                        store_element(t->initial + element_index(t, b, h, s, d) * t->elem_size, dtype, values[n++]);
    }
    memcpy(t->image, t->initial, bytes);
    cl_int err;
    t->view.buffer = clCreateBuffer(context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, bytes, t->initial, &err);
    ck_assert_msg(err == CL_SUCCESS, "clCreateBuffer(%zu bytes) failed: %d", bytes, (int)err);
}

void ts_tensor_free(ts_tensor *t) {
    if (t->view.buffer) clReleaseMemObject(t->view.buffer);
    free(t->image);
    free(t->initial);
    memset(t, 0, sizeof *t);
}

void ts_tensor_read(cl_command_queue queue, ts_tensor *t) {
    cl_int err = clEnqueueReadBuffer(queue, t->view.buffer, CL_TRUE, 0, t->capacity * t->elem_size, t->image, 0,
                                     NULL, NULL);
    ck_assert_msg(err == CL_SUCCESS, "clEnqueueReadBuffer failed: %d", (int)err);
}

void ts_assert_written_exactly(const ts_tensor *t, const char *name) {
    unsigned char *in_view = calloc(t->capacity, 1);
    ck_assert_msg(in_view != NULL, "out of host memory");
    size_t unwritten = 0, first_unwritten = 0;
    for (size_t b = 0; b < t->batch; ++b)
        for (size_t h = 0; h < t->heads; ++h)
            for (size_t s = 0; s < t->seqlen; ++s)
                for (size_t d = 0; d < t->dim; ++d) {
                    const size_t i = element_index(t, b, h, s, d);
                    in_view[i] = 1;
                    if (is_poison(t->image + i * t->elem_size, t->elem_size) && unwritten++ == 0)
                        first_unwritten = i;
                }
    size_t stray = 0, first_stray = 0;
    for (size_t i = 0; i < t->capacity; ++i)
        if (!in_view[i] && memcmp(t->image + i * t->elem_size, t->initial + i * t->elem_size, t->elem_size) != 0 &&
            stray++ == 0)
            first_stray = i;
    free(in_view);
    ck_assert_msg(unwritten == 0, "%s: %zu view elements never written (first at element %zu)", name, unwritten,
                  first_unwritten);
    ck_assert_msg(stray == 0, "%s: %zu elements outside the view were written (first at element %zu of %zu)", name,
                  stray, first_stray, t->capacity);
}

void ts_assert_untouched(cl_command_queue queue, ts_tensor *t, const char *name) {
    ts_tensor_read(queue, t);
    size_t changed = 0, first = 0;
    for (size_t i = 0; i < t->capacity; ++i)
        if (memcmp(t->image + i * t->elem_size, t->initial + i * t->elem_size, t->elem_size) != 0 && changed++ == 0)
            first = i;
    ck_assert_msg(changed == 0, "%s: %zu elements changed (first at element %zu)", name, changed, first);
}

void ts_tensor_gather(const ts_tensor *t, float *bhsd) {
    size_t n = 0;
    for (size_t b = 0; b < t->batch; ++b)
        for (size_t h = 0; h < t->heads; ++h)
            for (size_t s = 0; s < t->seqlen; ++s)
                for (size_t d = 0; d < t->dim; ++d)
                    bhsd[n++] = load_element(t->image + element_index(t, b, h, s, d) * t->elem_size, t->dtype);
}

flashcl_attention_desc ts_case_desc(const ts_case *c, flashcl_dtype dtype) {
    flashcl_attention_desc d;
    flashcl_attention_desc_init(&d, c->batch, c->heads_q, c->seqlen_q, c->seqlen_k, c->head_dim);
    d.heads_kv = c->heads_kv;
    d.causal = c->causal;
    d.scale = c->scale;
    d.dtype = dtype;
    return d;
}

/* ---- the reference and the tolerance rule --------------------------- */

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

void ts_problem_init(ts_problem *p, const flashcl_attention_desc *desc, uint64_t seed, float amplitude) {
    memset(p, 0, sizeof *p);
    p->desc = *desc;
    p->check_target = 1;
    const size_t D = (size_t)desc->head_dim;
    p->q_count = (size_t)desc->batch * desc->heads_q * desc->seqlen_q * D;
    p->kv_count = (size_t)desc->batch * desc->heads_kv * desc->seqlen_k * D;
    p->lse_count = (size_t)desc->batch * desc->heads_q * desc->seqlen_q;
    p->q = malloc(p->q_count * sizeof(float));
    p->k = malloc(p->kv_count * sizeof(float));
    p->v = malloc(p->kv_count * sizeof(float));
    p->o_ref = malloc(p->q_count * sizeof(double));
    p->o_low = malloc(p->q_count * sizeof(double));
    p->lse_ref = malloc(p->lse_count * sizeof(double));
    p->lse_low = malloc(p->lse_count * sizeof(double));
    ck_assert_msg(p->q && p->k && p->v && p->o_ref && p->o_low && p->lse_ref && p->lse_low, "out of host memory");
    ts_rng rng = {seed};
    ts_fill_uniform(&rng, p->q, p->q_count, -amplitude, amplitude);
    ts_fill_uniform(&rng, p->k, p->kv_count, -amplitude, amplitude);
    ts_fill_uniform(&rng, p->v, p->kv_count, -1.0f, 1.0f);
    /* The references see exactly the values the device stores. */
    for (size_t i = 0; i < p->q_count; ++i) p->q[i] = ts_round_to_dtype(p->q[i], desc->dtype);
    for (size_t i = 0; i < p->kv_count; ++i) {
        p->k[i] = ts_round_to_dtype(p->k[i], desc->dtype);
        p->v[i] = ts_round_to_dtype(p->v[i], desc->dtype);
    }
    ck_assert(flashcl_reference_forward(desc, FLASHCL_REF_DOUBLE, p->q, p->k, p->v, p->o_ref, p->lse_ref) == 0);
    ck_assert(flashcl_reference_forward(desc, FLASHCL_REF_FLOAT, p->q, p->k, p->v, p->o_low, p->lse_low) == 0);
    /* A 16-bit O can be no closer than the golden O rounded to its storage;
     * LSE is float whatever the storage, so its float reference stands. */
    if (desc->dtype != FLASHCL_DTYPE_F32)
        for (size_t i = 0; i < p->q_count; ++i) p->o_low[i] = ts_round_to_dtype((float)p->o_ref[i], desc->dtype);
}

void ts_problem_free(ts_problem *p) {
    free(p->q);
    free(p->k);
    free(p->v);
    free(p->o_ref);
    free(p->o_low);
    free(p->lse_ref);
    free(p->lse_low);
    memset(p, 0, sizeof *p);
}

ts_placements ts_uniform_placements(flashcl_layout layout, size_t offset, size_t pad) {
    const ts_placement one = {layout, offset, pad};
    return (ts_placements){one, one, one, one, one};
}

void ts_run_forward(flashcl_context *ctx, const ts_problem *p, const ts_placements *place, float *o_out,
                    float *lse_out) {
    const flashcl_attention_desc *d = &p->desc;
    cl_context context = flashcl_context_cl_context(ctx);
    cl_command_queue queue = flashcl_context_queue(ctx);
    const size_t B = (size_t)d->batch, Hq = (size_t)d->heads_q, Hkv = (size_t)d->heads_kv;
    const size_t Sq = (size_t)d->seqlen_q, Sk = (size_t)d->seqlen_k, D = (size_t)d->head_dim;
    ts_tensor q, k, v, o, lse;
    memset(&lse, 0, sizeof lse);
    ts_tensor_create(&q, context, &place->q, B, Hq, Sq, D, d->dtype, p->q);
    ts_tensor_create(&k, context, &place->k, B, Hkv, Sk, D, d->dtype, p->k);
    ts_tensor_create(&v, context, &place->v, B, Hkv, Sk, D, d->dtype, p->v);
    ts_tensor_create(&o, context, &place->o, B, Hq, Sq, D, d->dtype, NULL);
    if (lse_out) ts_tensor_create(&lse, context, &place->lse, B, Hq, Sq, 1, FLASHCL_DTYPE_F32, NULL);

    flashcl_status status =
        flashcl_forward(ctx, d, &q.view, &k.view, &v.view, &o.view, lse_out ? &lse.view : NULL, 0, NULL, NULL);
    ck_assert_msg(status == FLASHCL_SUCCESS, "flashcl_forward: %s: %s", flashcl_status_string(status),
                  flashcl_last_error(ctx));
    ck_assert_int_eq(clFinish(queue), CL_SUCCESS);

    ts_tensor_read(queue, &o);
    ts_assert_written_exactly(&o, "O");
    ts_tensor_gather(&o, o_out);
    if (lse_out) {
        ts_tensor_read(queue, &lse);
        ts_assert_written_exactly(&lse, "LSE");
        ts_tensor_gather(&lse, lse_out);
    }
    ts_assert_untouched(queue, &q, "Q (an input)");
    ts_assert_untouched(queue, &k, "K (an input)");
    ts_assert_untouched(queue, &v, "V (an input)");
    ts_tensor_free(&q);
    ts_tensor_free(&k);
    ts_tensor_free(&v);
    ts_tensor_free(&o);
    if (lse_out) ts_tensor_free(&lse);
}

/* The "done when" target of the forward pass: max-abs error within 3e-5 of
 * the largest reference magnitude (element-wise relative error is
 * meaningless where the reference crosses zero). */
#define TS_TARGET_RELATIVE 3e-5

static void assert_close(const char *label, const char *what, const float *got, const double *ref,
                         const double *low, size_t n, int check_target) {
    ts_error e;
    int ok = ts_compare(got, ref, low, n, 2.0, &e);
    if (getenv("FLASHCL_TEST_VERBOSE")) /* how much room each check leaves, to watch the margins */
        fprintf(stderr, "%s: %s error %.3g bound %.3g (ratio %.2f) relative %.3g\n", label, what, e.max_err, e.bound,
                e.bound > 0 ? e.max_err / e.bound : 0.0, e.max_ref > 0 ? e.max_err / e.max_ref : 0.0);
    ck_assert_msg(e.nonfinite == 0, "%s: %s has %zu NaN/inf values where the reference is finite", label, what,
                  e.nonfinite);
    ck_assert_msg(e.masked_wrong == 0, "%s: %s is not -inf at %zu fully masked rows", label, what, e.masked_wrong);
    ck_assert_msg(ok,
                  "%s: %s max error %.3g at %zu (got %.9g, want %.9g) exceeds 2 x low-precision error %.3g + "
                  "floor = %.3g",
                  label, what, e.max_err, e.worst, (double)got[e.worst], ref[e.worst], e.max_low_err, e.bound);
    if (check_target)
        ck_assert_msg(e.max_err <= TS_TARGET_RELATIVE * e.max_ref, "%s: %s relative error %.3g exceeds %.1g", label,
                      what, e.max_ref > 0 ? e.max_err / e.max_ref : e.max_err, TS_TARGET_RELATIVE);
}

void ts_check_forward(const ts_problem *p, const float *o, const float *lse, const char *label) {
    const size_t D = (size_t)p->desc.head_dim;
    assert_close(label, "O", o, p->o_ref, p->o_low, p->q_count, p->check_target && p->desc.dtype == FLASHCL_DTYPE_F32);
    if (lse) assert_close(label, "LSE", lse, p->lse_ref, p->lse_low, p->lse_count, p->check_target);
    for (size_t row = 0; row < p->lse_count; ++row) {
        if (p->lse_ref[row] != -INFINITY) continue;
        for (size_t t = 0; t < D; ++t)
            ck_assert_msg(o[row * D + t] == 0.0f, "%s: fully masked row %zu has O[%zu] = %g, not 0", label, row, t,
                          (double)o[row * D + t]);
    }
}
