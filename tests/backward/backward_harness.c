/* backward_harness.c: device buffers with canaries, running forward + backward, and the tolerance rule. */
#include "backward_harness.h"

#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attention_reference.h"
#include "half_float.h"

/* Elements after each view that no call may touch. */
#define CANARY 67
/* A NaN with a payload no kernel produces: an element still holding it was
 * never written. */
#define POISON_BITS 0x7fa5a5a5u

static float poison_value(void) {
    const uint32_t bits = POISON_BITS;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static int is_poison(float x) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    return bits == POISON_BITS;
}

flashcl_context *bwd_context(void) {
    flashcl_context *ctx = NULL;
    flashcl_status s = flashcl_context_create(&ctx, NULL);
    ck_assert_msg(s == FLASHCL_SUCCESS, "context: %s", flashcl_last_error(NULL));
    return ctx;
}

void bwd_desc(const bwd_case *c, flashcl_attention_desc *desc) {
    flashcl_attention_desc_init(desc, c->batch, c->heads_q, c->seqlen_q, c->seqlen_k, c->head_dim);
    desc->heads_kv = c->heads_kv;
    desc->causal = c->causal;
}

size_t bwd_q_count(const bwd_case *c) { return (size_t)c->batch * c->heads_q * c->seqlen_q * c->head_dim; }
size_t bwd_kv_count(const bwd_case *c) { return (size_t)c->batch * c->heads_kv * c->seqlen_k * c->head_dim; }
size_t bwd_lse_count(const bwd_case *c) { return (size_t)c->batch * c->heads_q * c->seqlen_q; }

static float *alloc_floats(size_t n) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    ck_assert_ptr_nonnull(p);
    return p;
}

/* xorshift: the same inputs on every machine and run. */
static float next_uniform(uint32_t *state) {
    uint32_t x = *state;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    *state = x;
    return (float)((x >> 8) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

void bwd_host_alloc(const bwd_case *c, unsigned seed, bwd_host *h) {
    const size_t nq = bwd_q_count(c), nkv = bwd_kv_count(c);
    uint32_t state = 0x9e3779b9u ^ (seed * 2654435761u);
    if (!state) state = 1;
    h->q = alloc_floats(nq);
    h->k = alloc_floats(nkv);
    h->v = alloc_floats(nkv);
    h->dout = alloc_floats(nq);
    for (size_t i = 0; i < nq; ++i) h->q[i] = c->input_scale * next_uniform(&state);
    for (size_t i = 0; i < nkv; ++i) h->k[i] = c->input_scale * next_uniform(&state);
    for (size_t i = 0; i < nkv; ++i) h->v[i] = next_uniform(&state);
    for (size_t i = 0; i < nq; ++i) h->dout[i] = next_uniform(&state);
    h->o = alloc_floats(nq);
    h->lse = alloc_floats(bwd_lse_count(c));
    h->dq = alloc_floats(nq);
    h->dk = alloc_floats(nkv);
    h->dv = alloc_floats(nkv);
}

void bwd_host_free(bwd_host *h) {
    free(h->q), free(h->k), free(h->v), free(h->dout);
    free(h->o), free(h->lse), free(h->dq), free(h->dk), free(h->dv);
    memset(h, 0, sizeof *h);
}

/* Total elements of a buffer holding a view of `count` elements. */
static size_t buffer_elements(const bwd_case *c, size_t count) { return c->offset + count + CANARY; }

static cl_mem make_buffer(flashcl_context *ctx, size_t elements) {
    cl_int err;
    cl_mem m = clCreateBuffer(flashcl_context_cl_context(ctx), CL_MEM_READ_WRITE, elements * sizeof(float), NULL, &err);
    ck_assert_msg(err == CL_SUCCESS, "clCreateBuffer: %d", err);
    return m;
}

static void write_all(flashcl_context *ctx, cl_mem m, const float *data, size_t elements) {
    cl_int err = clEnqueueWriteBuffer(flashcl_context_queue(ctx), m, CL_TRUE, 0, elements * sizeof(float), data, 0,
                                      NULL, NULL);
    ck_assert_msg(err == CL_SUCCESS, "clEnqueueWriteBuffer: %d", err);
}

static void read_all(flashcl_context *ctx, cl_mem m, float *data, size_t elements) {
    cl_int err = clEnqueueReadBuffer(flashcl_context_queue(ctx), m, CL_TRUE, 0, elements * sizeof(float), data, 0, NULL,
                                     NULL);
    ck_assert_msg(err == CL_SUCCESS, "clEnqueueReadBuffer: %d", err);
}

/* A (heads, seqlen) tensor of c's layout, moved `offset` elements in. */
static flashcl_tensor view(const bwd_case *c, cl_mem m, int heads, int seqlen) {
    flashcl_tensor t = flashcl_tensor_contiguous(m, c->layout, heads, seqlen, c->head_dim);
    t.offset = c->offset;
    return t;
}

/* An input buffer: poison around the view, the BHSD data in c's layout inside. */
static cl_mem upload(flashcl_context *ctx, const bwd_case *c, const float *bhsd, int heads, int seqlen) {
    const size_t count = (size_t)c->batch * heads * seqlen * c->head_dim;
    const size_t total = buffer_elements(c, count);
    float *staging = alloc_floats(total);
    for (size_t i = 0; i < total; ++i) staging[i] = poison_value();
    if (c->layout == FLASHCL_LAYOUT_BSHD)
        flashcl_reference_bhsd_to_bshd(bhsd, staging + c->offset, c->batch, heads, seqlen, c->head_dim);
    else
        memcpy(staging + c->offset, bhsd, count * sizeof(float));
    cl_mem m = make_buffer(ctx, total);
    write_all(ctx, m, staging, total);
    free(staging);
    return m;
}

static cl_mem poisoned(flashcl_context *ctx, size_t elements) {
    float *staging = alloc_floats(elements);
    for (size_t i = 0; i < elements; ++i) staging[i] = poison_value();
    cl_mem m = make_buffer(ctx, elements);
    write_all(ctx, m, staging, elements);
    free(staging);
    return m;
}

static void repoison(flashcl_context *ctx, cl_mem m, size_t elements) {
    float *staging = alloc_floats(elements);
    for (size_t i = 0; i < elements; ++i) staging[i] = poison_value();
    write_all(ctx, m, staging, elements);
    free(staging);
}

void bwd_device_create(flashcl_context *ctx, const bwd_case *c, const bwd_host *h, bwd_device *d) {
    d->q = upload(ctx, c, h->q, c->heads_q, c->seqlen_q);
    d->k = upload(ctx, c, h->k, c->heads_kv, c->seqlen_k);
    d->v = upload(ctx, c, h->v, c->heads_kv, c->seqlen_k);
    d->dout = upload(ctx, c, h->dout, c->heads_q, c->seqlen_q);
    d->o = poisoned(ctx, buffer_elements(c, bwd_q_count(c)));
    d->lse = poisoned(ctx, buffer_elements(c, bwd_lse_count(c)));
    d->dq = poisoned(ctx, buffer_elements(c, bwd_q_count(c)));
    d->dk = poisoned(ctx, buffer_elements(c, bwd_kv_count(c)));
    d->dv = poisoned(ctx, buffer_elements(c, bwd_kv_count(c)));
    d->tq = view(c, d->q, c->heads_q, c->seqlen_q);
    d->tk = view(c, d->k, c->heads_kv, c->seqlen_k);
    d->tv = view(c, d->v, c->heads_kv, c->seqlen_k);
    d->tdout = view(c, d->dout, c->heads_q, c->seqlen_q);
    d->to = view(c, d->o, c->heads_q, c->seqlen_q);
    d->tlse = flashcl_tensor_lse(d->lse, c->heads_q, c->seqlen_q);
    d->tlse.offset = c->offset;
    d->tdq = view(c, d->dq, c->heads_q, c->seqlen_q);
    d->tdk = view(c, d->dk, c->heads_kv, c->seqlen_k);
    d->tdv = view(c, d->dv, c->heads_kv, c->seqlen_k);
}

void bwd_device_free(bwd_device *d) {
    cl_mem all[] = {d->q, d->k, d->v, d->dout, d->o, d->lse, d->dq, d->dk, d->dv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
        if (all[i]) clReleaseMemObject(all[i]);
    memset(d, 0, sizeof *d);
}

void bwd_poison_gradients(flashcl_context *ctx, const bwd_case *c, bwd_device *d) {
    repoison(ctx, d->dq, buffer_elements(c, bwd_q_count(c)));
    repoison(ctx, d->dk, buffer_elements(c, bwd_kv_count(c)));
    repoison(ctx, d->dv, buffer_elements(c, bwd_kv_count(c)));
}

flashcl_status bwd_run_forward(flashcl_context *ctx, const bwd_case *c, bwd_device *d) {
    flashcl_attention_desc desc;
    bwd_desc(c, &desc);
    flashcl_status s = flashcl_forward(ctx, &desc, &d->tq, &d->tk, &d->tv, &d->to, &d->tlse, 0, NULL, NULL);
    if (s == FLASHCL_SUCCESS) ck_assert_int_eq(clFinish(flashcl_context_queue(ctx)), CL_SUCCESS);
    return s;
}

flashcl_status bwd_run_backward(flashcl_context *ctx, const bwd_case *c, bwd_device *d) {
    flashcl_attention_desc desc;
    bwd_desc(c, &desc);
    cl_event done = NULL;
    flashcl_status s = flashcl_backward(ctx, &desc, &d->tq, &d->tk, &d->tv, &d->to, &d->tlse, &d->tdout, &d->tdq,
                                        &d->tdk, &d->tdv, 0, NULL, &done);
    if (s == FLASHCL_SUCCESS) {
        ck_assert_ptr_nonnull(done);
        ck_assert_int_eq(clWaitForEvents(1, &done), CL_SUCCESS);
        clReleaseEvent(done);
    }
    return s;
}

/* Reads a whole buffer, checks its prefix and canary, returns the view as BHSD. */
static void read_view(flashcl_context *ctx, const bwd_case *c, cl_mem m, const char *name, int heads, int seqlen,
                      int dim, float *out, int require_written) {
    const size_t count = (size_t)c->batch * heads * seqlen * dim;
    const size_t total = buffer_elements(c, count);
    float *staging = alloc_floats(total);
    read_all(ctx, m, staging, total);
    for (size_t i = 0; i < c->offset; ++i) ck_assert_msg(is_poison(staging[i]), "%s: element %zu before the view was written", name, i);
    for (size_t i = c->offset + count; i < total; ++i)
        ck_assert_msg(is_poison(staging[i]), "%s: canary element %zu after the view was written", name,
                      i - c->offset - count);
    const float *v = staging + c->offset;
    if (require_written)
        for (size_t i = 0; i < count; ++i) ck_assert_msg(!is_poison(v[i]), "%s: element %zu was never written", name, i);
    if (c->layout == FLASHCL_LAYOUT_BSHD && dim > 1)
        flashcl_reference_bshd_to_bhsd(v, out, c->batch, seqlen, heads, dim);
    else
        memcpy(out, v, count * sizeof(float));
    free(staging);
}

void bwd_read_results(flashcl_context *ctx, const bwd_case *c, bwd_device *d, bwd_host *h) {
    read_view(ctx, c, d->o, "o", c->heads_q, c->seqlen_q, c->head_dim, h->o, 1);
    read_view(ctx, c, d->lse, "lse", c->heads_q, c->seqlen_q, 1, h->lse, 1);
    read_view(ctx, c, d->dq, "dq", c->heads_q, c->seqlen_q, c->head_dim, h->dq, 1);
    read_view(ctx, c, d->dk, "dk", c->heads_kv, c->seqlen_k, c->head_dim, h->dk, 1);
    read_view(ctx, c, d->dv, "dv", c->heads_kv, c->seqlen_k, c->head_dim, h->dv, 1);
}

void bwd_assert_gradients_untouched(flashcl_context *ctx, const bwd_case *c, bwd_device *d) {
    const struct {
        cl_mem m;
        size_t count;
        const char *name;
    } grads[] = {{d->dq, bwd_q_count(c), "dq"}, {d->dk, bwd_kv_count(c), "dk"}, {d->dv, bwd_kv_count(c), "dv"}};
    for (size_t g = 0; g < 3; ++g) {
        const size_t total = buffer_elements(c, grads[g].count);
        float *staging = alloc_floats(total);
        read_all(ctx, grads[g].m, staging, total);
        for (size_t i = 0; i < total; ++i)
            ck_assert_msg(is_poison(staging[i]), "%s element %zu was written by a failed call", grads[g].name, i);
        free(staging);
    }
}

/* The tolerance rule on one gradient: max error against the double
 * reference <= k x the float reference's max error + a floor of a few ulps
 * of the gradient's magnitude; and the criterion, max error / max
 * magnitude <= 5e-4. */
static void check_gradient(const bwd_case *c, const char *name, const float *got, const double *gold,
                           const double *lowp, size_t n, double k) {
    double err = 0.0, lowp_err = 0.0, magnitude = 0.0;
    for (size_t i = 0; i < n; ++i) {
        ck_assert_msg(isfinite(gold[i]), "%s: reference %s[%zu] is not finite", c->name, name, i);
        ck_assert_msg(isfinite(got[i]), "%s: %s[%zu] = %g is not finite", c->name, name, i, (double)got[i]);
        err = fmax(err, fabs((double)got[i] - gold[i]));
        lowp_err = fmax(lowp_err, fabs(lowp[i] - gold[i]));
        magnitude = fmax(magnitude, fabs(gold[i]));
    }
    const double floor = 4.0 * FLT_EPSILON * magnitude + 1e-30;
    ck_assert_msg(err <= k * lowp_err + floor,
                  "%s: %s error %.3g exceeds %g x float-reference error %.3g + floor %.3g (max |%s| %.3g)", c->name,
                  name, err, k, lowp_err, floor, name, magnitude);
    ck_assert_msg(err <= 5e-4 * magnitude + 1e-30, "%s: %s relative error %.3g exceeds 5e-4", c->name, name,
                  magnitude > 0 ? err / magnitude : err);
}

void bwd_check_gradients(const bwd_case *c, const bwd_host *h) {
    flashcl_attention_desc desc;
    bwd_desc(c, &desc);
    const size_t nq = bwd_q_count(c), nkv = bwd_kv_count(c);
    double *gold = malloc(sizeof(double) * (nq + 2 * nkv));
    double *lowp = malloc(sizeof(double) * (nq + 2 * nkv));
    ck_assert(gold && lowp);
    ck_assert_int_eq(flashcl_reference_backward(&desc, FLASHCL_REF_DOUBLE, h->q, h->k, h->v, h->dout, gold,
                                                gold + nq, gold + nq + nkv),
                     0);
    ck_assert_int_eq(flashcl_reference_backward(&desc, FLASHCL_REF_FLOAT, h->q, h->k, h->v, h->dout, lowp,
                                                lowp + nq, lowp + nq + nkv),
                     0);
    /* With large logits the forward's LSE, a float near |LSE| ~ 300, carries
     * up to an ulp (2^-15 relative to 1) of absolute error that becomes a
     * relative error of every recomputed P, on top of the score rounding the
     * float reference shares: there every gradient gets the rule's loosest k. */
    const int large = c->input_scale > 1.0f;
    check_gradient(c, "dq", h->dq, gold, lowp, nq, 5.0);
    check_gradient(c, "dk", h->dk, gold + nq, lowp + nq, nkv, large ? 5.0 : 4.0);
    check_gradient(c, "dv", h->dv, gold + nq + nkv, lowp + nq + nkv, nkv, large ? 5.0 : 3.0);
    /* Rows that see no key (causal, seqlen_q > seqlen_k): LSE -inf and a
     * gradient of exactly zero. */
    if (c->causal)
        for (int b = 0; b < c->batch; ++b)
            for (int hh = 0; hh < c->heads_q; ++hh)
                for (int i = 0; i < c->seqlen_q - c->seqlen_k; ++i) {
                    const size_t row = ((size_t)b * c->heads_q + hh) * c->seqlen_q + i;
                    ck_assert_msg(isinf(h->lse[row]) && h->lse[row] < 0, "%s: masked row %d has lse %g", c->name,
                                  i, (double)h->lse[row]);
                    for (int t = 0; t < c->head_dim; ++t)
                        ck_assert_msg(h->dq[row * c->head_dim + t] == 0.0f, "%s: masked row %d has dq %g", c->name,
                                      i, (double)h->dq[row * c->head_dim + t]);
                }
    free(gold);
    free(lowp);
}

void bwd_run_and_check_on(flashcl_context *ctx, const bwd_case *c) {
    bwd_host h;
    bwd_device d;
    bwd_host_alloc(c, 1, &h);
    bwd_device_create(ctx, c, &h, &d);
    flashcl_status s = bwd_run_forward(ctx, c, &d);
    ck_assert_msg(s == FLASHCL_SUCCESS, "%s forward: %s", c->name, flashcl_last_error(ctx));
    s = bwd_run_backward(ctx, c, &d);
    ck_assert_msg(s == FLASHCL_SUCCESS, "%s backward: %s", c->name, flashcl_last_error(ctx));
    bwd_read_results(ctx, c, &d, &h);
    bwd_check_gradients(c, &h);
    bwd_device_free(&d);
    bwd_host_free(&h);
}

void bwd_run_and_check(const bwd_case *c, const flashcl_plan *forced) {
    flashcl_context *ctx = bwd_context();
    if (forced) ck_assert_int_eq(flashcl_context_force_plan(ctx, FLASHCL_PASS_BACKWARD, forced), FLASHCL_SUCCESS);
    bwd_run_and_check_on(ctx, c);
    flashcl_context_free(ctx);
}

/* Storage rounding of the low-precision dtypes (round to nearest even), the
 * one host converter the tests, the CLI and the bench share. */
static uint16_t to_storage(float f, flashcl_dtype dtype) {
    return dtype == FLASHCL_DTYPE_BF16 ? float_to_bf16(f) : float_to_half(f);
}

static float from_storage(uint16_t v, flashcl_dtype dtype) {
    return dtype == FLASHCL_DTYPE_BF16 ? bf16_to_float(v) : half_to_float(v);
}

static cl_mem storage_buffer(flashcl_context *ctx, float *values, size_t n, flashcl_dtype dtype) {
    uint16_t *raw = malloc(n * sizeof *raw);
    ck_assert_ptr_nonnull(raw);
    for (size_t i = 0; i < n; ++i) {
        raw[i] = to_storage(values[i], dtype);
        values[i] = from_storage(raw[i], dtype); /* the reference sees the rounded inputs */
    }
    cl_int err;
    cl_mem m = clCreateBuffer(flashcl_context_cl_context(ctx), CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR,
                              n * sizeof *raw, raw, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    free(raw);
    return m;
}

static void read_storage(flashcl_context *ctx, cl_mem m, float *out, size_t n, flashcl_dtype dtype) {
    uint16_t *raw = malloc(n * sizeof *raw);
    ck_assert_ptr_nonnull(raw);
    ck_assert_int_eq(clEnqueueReadBuffer(flashcl_context_queue(ctx), m, CL_TRUE, 0, n * sizeof *raw, raw, 0, NULL,
                                         NULL),
                     CL_SUCCESS);
    for (size_t i = 0; i < n; ++i) out[i] = from_storage(raw[i], dtype);
    free(raw);
}

void bwd_check_storage(flashcl_context *ctx, const bwd_case *c, flashcl_dtype dtype, double ulps) {
    /* The host arrays go to the device as they are: contiguous BHSD. */
    ck_assert_msg(c->layout == FLASHCL_LAYOUT_BHSD && c->offset == 0, "%s: storage cases are BHSD without offset",
                  c->name);
    const double ulp = dtype == FLASHCL_DTYPE_F16 ? ldexp(1.0, -11) : ldexp(1.0, -8);
    bwd_host h;
    bwd_host_alloc(c, 17, &h);
    const size_t nq = bwd_q_count(c), nkv = bwd_kv_count(c);
    /* Outputs start as NaN (non-finite in either type): an element the
     * kernels do not write fails the finiteness check below. */
    for (size_t i = 0; i < nq; ++i) h.dq[i] = NAN;
    for (size_t i = 0; i < nkv; ++i) h.dk[i] = h.dv[i] = NAN;
    cl_mem q = storage_buffer(ctx, h.q, nq, dtype), k = storage_buffer(ctx, h.k, nkv, dtype);
    cl_mem v = storage_buffer(ctx, h.v, nkv, dtype), dout = storage_buffer(ctx, h.dout, nq, dtype);
    cl_mem o = storage_buffer(ctx, h.dq, nq, dtype), dq = storage_buffer(ctx, h.dq, nq, dtype);
    cl_mem dk = storage_buffer(ctx, h.dk, nkv, dtype), dv = storage_buffer(ctx, h.dv, nkv, dtype);
    cl_int err;
    cl_mem lse = clCreateBuffer(flashcl_context_cl_context(ctx), CL_MEM_READ_WRITE, bwd_lse_count(c) * sizeof(float),
                                NULL, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    flashcl_attention_desc desc;
    bwd_desc(c, &desc);
    desc.dtype = dtype;
    const flashcl_tensor tq = flashcl_tensor_contiguous(q, c->layout, c->heads_q, c->seqlen_q, c->head_dim);
    const flashcl_tensor tkv[4] = {
        flashcl_tensor_contiguous(k, c->layout, c->heads_kv, c->seqlen_k, c->head_dim),
        flashcl_tensor_contiguous(v, c->layout, c->heads_kv, c->seqlen_k, c->head_dim),
        flashcl_tensor_contiguous(dk, c->layout, c->heads_kv, c->seqlen_k, c->head_dim),
        flashcl_tensor_contiguous(dv, c->layout, c->heads_kv, c->seqlen_k, c->head_dim),
    };
    const flashcl_tensor tdo = flashcl_tensor_contiguous(dout, c->layout, c->heads_q, c->seqlen_q, c->head_dim);
    const flashcl_tensor to = flashcl_tensor_contiguous(o, c->layout, c->heads_q, c->seqlen_q, c->head_dim);
    const flashcl_tensor tdq = flashcl_tensor_contiguous(dq, c->layout, c->heads_q, c->seqlen_q, c->head_dim);
    const flashcl_tensor tl = flashcl_tensor_lse(lse, c->heads_q, c->seqlen_q);
    ck_assert_msg(flashcl_forward(ctx, &desc, &tq, &tkv[0], &tkv[1], &to, &tl, 0, NULL, NULL) == FLASHCL_SUCCESS, "%s",
                  flashcl_last_error(ctx));
    ck_assert_msg(flashcl_backward(ctx, &desc, &tq, &tkv[0], &tkv[1], &to, &tl, &tdo, &tdq, &tkv[2], &tkv[3], 0, NULL,
                                   NULL) == FLASHCL_SUCCESS,
                  "%s", flashcl_last_error(ctx));
    read_storage(ctx, dq, h.dq, nq, dtype);
    read_storage(ctx, dk, h.dk, nkv, dtype);
    read_storage(ctx, dv, h.dv, nkv, dtype);
    double *gold = malloc(sizeof(double) * (nq + 2 * nkv));
    ck_assert_ptr_nonnull(gold);
    desc.dtype = FLASHCL_DTYPE_F32;
    ck_assert_int_eq(flashcl_reference_backward(&desc, FLASHCL_REF_DOUBLE, h.q, h.k, h.v, h.dout, gold, gold + nq,
                                                gold + nq + nkv),
                     0);
    const struct {
        const char *name;
        const float *got;
        const double *gold;
        size_t n;
    } grads[] = {{"dq", h.dq, gold, nq}, {"dk", h.dk, gold + nq, nkv}, {"dv", h.dv, gold + nq + nkv, nkv}};
    for (int g = 0; g < 3; ++g) {
        double error = 0.0, magnitude = 0.0;
        for (size_t i = 0; i < grads[g].n; ++i) {
            ck_assert(isfinite(grads[g].got[i]));
            error = fmax(error, fabs(grads[g].got[i] - grads[g].gold[i]));
            magnitude = fmax(magnitude, fabs(grads[g].gold[i]));
        }
        ck_assert_msg(magnitude > 0.01, "%s is degenerate", grads[g].name);
        ck_assert_msg(error <= ulps * ulp * magnitude, "%s dtype %d %s: error %.3g exceeds %g storage ulps of %.3g",
                      c->name, (int)dtype, grads[g].name, error, ulps, magnitude);
    }
    /* Query rows that see no key (causal, seqlen_q > seqlen_k): dQ exactly 0. */
    if (c->causal)
        for (int row = 0; row < c->batch * c->heads_q * c->seqlen_q; ++row)
            if (row % c->seqlen_q < c->seqlen_q - c->seqlen_k)
                for (int t = 0; t < c->head_dim; ++t)
                    ck_assert_msg(h.dq[(size_t)row * c->head_dim + t] == 0.0f, "%s: masked row %d has dq %g",
                                  c->name, row % c->seqlen_q, (double)h.dq[(size_t)row * c->head_dim + t]);
    free(gold);
    cl_mem all[] = {q, k, v, dout, o, dq, dk, dv, lse};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) clReleaseMemObject(all[i]);
    bwd_host_free(&h);
}
