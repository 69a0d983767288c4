/* test_bias.c: the additive attention bias (flashcl_attention_extras' bias) and its gradient dBias against the double
 * reference: every broadcast shape ((1,1), (B,1), (1,Hq), full at an offset with padded rows, and a zero-stride
 * broadcast through strides) forward and backward with dBias; -inf rows, a whole -inf bias and biases of 1e4;
 * ALiBi against the explicit bias tensor it stands for; bias + soft-capping + ALiBi + causal + GQA at once (the
 * forward split along the keys); a window with dropout; a per-head block mask; half storage with a half and a
 * float32 bias; the tensor-core forward and backward (emulated), dBias from the tensor-core dQ kernel included; both
 * decode kernels (cl/decode.cl, and cl/decode_mma.cl emulated) with full and broadcast biases, -inf and NaN,
 * soft-capping and ALiBi, split along the keys and not; dBias bit for bit the same under three backward plans and
 * on an out-of-order queue; what the dispatcher builds; and bad input: a clear error and nothing written. The bias
 * through the KV-cache call (over the cache's key positions) is tests/forward/test_kv_cache.c's.
 *
 * Every distinct kernel build costs seconds, so the cases share builds: head dim 32, float data and no causal flag
 * wherever the case allows (one forward and one backward program serve the broadcast, -inf, ALiBi-equivalence and
 * out-of-order cases), about twenty programs per device in all. */
#include <check.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "feature_harness.h"

/* ---- helpers ------------------------------------------------------------ */

static size_t plane(const fh_case *c) { return (size_t)c->desc.seqlen_q * (size_t)c->desc.seqlen_k; }

/* A bias of (bb, bh, Sq, Sk) floats uniform in [lo, hi), rounded to dtype (the reference sees what is stored). */
static float *random_bias(const fh_case *c, int bb, int bh, uint64_t seed, float lo, float hi, flashcl_dtype dtype) {
    ts_rng rng = {seed};
    const size_t n = (size_t)bb * (size_t)bh * plane(c);
    float *x = ts_random_floats(&rng, n, lo, hi);
    for (size_t i = 0; i < n; ++i) x[i] = ts_round_to_dtype(x[i], dtype);
    return x;
}

/* The reference's dBias of c (the case's mask as fh_check_ex builds it), double and float (low NULL: not run),
 * (bb, bh, Sq, Sk); grads (NULL: not kept) receives the double run's dQ, dK and dV one after the other. */
static void reference_dbias(const fh_case *c, const fh_inputs *in, const flashcl_reference_extras *mods, double *gold,
                            double *low, double *grads) {
    flashcl_attention_desc plain = c->desc;
    plain.causal = 0;
    plain.sliding_window = 0;
    uint8_t *mask = fh_dense_mask(c);
    double *dq = malloc(in->q_count * sizeof *dq), *dk = malloc(in->kv_count * sizeof *dk);
    double *dv = malloc(in->kv_count * sizeof *dv);
    ck_assert(mask && dq && dk && dv);
    flashcl_reference_extras x = *mods;
    x.mask = mask;
    x.dbias = gold;
    ck_assert_int_eq(flashcl_reference_backward_ex(&plain, FLASHCL_REF_DOUBLE, &x, in->q, in->k, in->v, in->dout, dq,
                                                   dk, dv),
                     0);
    if (grads) {
        memcpy(grads, dq, in->q_count * sizeof *dq);
        memcpy(grads + in->q_count, dk, in->kv_count * sizeof *dk);
        memcpy(grads + in->q_count + in->kv_count, dv, in->kv_count * sizeof *dv);
    }
    x.dbias = low;
    if (low)
        ck_assert_int_eq(flashcl_reference_backward_ex(&plain, FLASHCL_REF_FLOAT, &x, in->q, in->k, in->v, in->dout, dq,
                                                       dk, dv),
                         0);
    free(mask), free(dq), free(dk), free(dv);
}

/* One run of c with the bias `values` ((bb, bh, Sq, Sk), already rounded to bias_dtype) placed as `place` says,
 * on top of the modifiers already in ex and mods; forward (and backward with dBias of the same placement), every
 * output judged against the reference: O, LSE, dQ, dK, dV by fh_check_ex, dBias by the tolerance rule (k = 5, a
 * 16-bit dBias against the golden one rounded to its storage), every dBias element written and nothing else. */
static void run_bias(flashcl_context *ctx, const fh_case *c, const fh_inputs *in, int backward,
                     flashcl_attention_extras ex, flashcl_reference_extras mods, const float *values, int bb, int bh,
                     flashcl_dtype bias_dtype, const ts_placement *place) {
    cl_context context = flashcl_context_cl_context(ctx);
    const size_t sq = (size_t)c->desc.seqlen_q, sk = (size_t)c->desc.seqlen_k, n = (size_t)bb * bh * plane(c);
    ts_tensor tb, tdb;
    memset(&tdb, 0, sizeof tdb);
    ts_tensor_create(&tb, context, place, (size_t)bb, (size_t)bh, sq, sk, bias_dtype, values);
    ex.bias = tb.view;
    ex.bias_batch = bb;
    ex.bias_heads = bh;
    ex.bias_dtype = bias_dtype;
    if (backward) {
        ts_tensor_create(&tdb, context, place, (size_t)bb, (size_t)bh, sq, sk, bias_dtype, NULL);
        ex.dbias = tdb.view;
    }
    fh_result r;
    fh_run_ex(ctx, c, in, backward, &ex, &r);
    mods.bias = values;
    mods.bias_batch = bb;
    mods.bias_heads = bh;
    uint8_t *mask = fh_dense_mask(c);
    fh_check_ex(c, in, &r, backward && c->desc.dtype == FLASHCL_DTYPE_F32, mask, NULL, &mods);
    free(mask);
    if (backward) {
        float *got = malloc(n * sizeof *got);
        double *gold = malloc(n * sizeof *gold), *low = malloc(n * sizeof *low);
        ck_assert(got && gold && low);
        ts_tensor_read_output(flashcl_context_queue(ctx), &tdb, "dBias", got);
        reference_dbias(c, in, &mods, gold, low, NULL);
        if (bias_dtype != FLASHCL_DTYPE_F32)
            for (size_t i = 0; i < n; ++i) low[i] = ts_round_to_dtype((float)gold[i], bias_dtype);
        /* 16-bit inputs reach dS through more roundings than the float reference models: judged with
         * k = 5 against the storage-rounded golden value plus the float reference's own error. */
        const ts_rule rule = {5.0, 0.0, 1};
        ts_assert_rule(c->name, "dBias", got, gold, low, n, &rule);
        free(got), free(gold), free(low);
        ts_tensor_free(&tdb);
    }
    fh_result_free(&r);
    ts_tensor_free(&tb);
}

static flashcl_attention_extras no_extras(void) {
    flashcl_attention_extras ex;
    flashcl_attention_extras_init(&ex);
    return ex;
}

static const ts_placement contiguous = {FLASHCL_LAYOUT_BHSD, 0, 0};

/* ---- broadcast shapes ------------------------------------------------------ */

/* The four shapes a bias may have over a GQA problem, forward and backward with dBias; the full one 5 elements
 * into its buffer with 3 unused elements after each row, head and batch (the dQ kernel writes it directly), the
 * broadcast ones contiguous (through the reduction). */
START_TEST(broadcast_shapes) {
    const fh_case c = fh_case_make("37x53 d32 gqa 4/2 bias", 2, 4, 2, 37, 53, 32, 0);
    fh_inputs in;
    fh_inputs_make(&c, 61, &in);
    flashcl_context *ctx = fh_portable_context();
    static const int shapes[4][2] = {{1, 1}, {2, 1}, {1, 4}, {2, 4}};
    const ts_placement padded = {FLASHCL_LAYOUT_BHSD, 5, 3};
    for (int s = 0; s < 4; ++s) {
        const int bb = shapes[s][0], bh = shapes[s][1];
        float *bias = random_bias(&c, bb, bh, 100 + (uint64_t)s, -2.0f, 2.0f, FLASHCL_DTYPE_F32);
        const flashcl_reference_extras mods = {.softcap = 0.0};
        run_bias(ctx, &c, &in, 1, no_extras(), mods, bias, bb, bh, FLASHCL_DTYPE_F32, s == 3 ? &padded : &contiguous);
        free(bias);
    }
    fh_inputs_free(&in);
    flashcl_context_free(ctx);
}
END_TEST

/* A (1, 1, Sq, Sk) buffer seen as a full (B, Hq, Sq, Sk) bias through zero batch and head strides (PyTorch's
 * expand): the scores are those of the broadcast bias, dBias is of the full shape (one gradient per (b, h)). */
START_TEST(zero_stride_broadcast) {
    const fh_case c = fh_case_make("37x53 d32 gqa 4/2 bias expanded by strides", 2, 4, 2, 37, 53, 32, 0);
    fh_inputs in;
    fh_inputs_make(&c, 62, &in);
    flashcl_context *ctx = fh_portable_context();
    cl_context context = flashcl_context_cl_context(ctx);
    const size_t p = plane(&c), full = 8 * p;
    float *one = random_bias(&c, 1, 1, 200, -2.0f, 2.0f, FLASHCL_DTYPE_F32);
    float *expanded = malloc(full * sizeof *expanded);
    ck_assert_ptr_nonnull(expanded);
    for (size_t bh = 0; bh < 8; ++bh) memcpy(expanded + bh * p, one, p * sizeof *one);
    cl_mem buffer = ts_buffer(context, p * sizeof(float), one);
    ts_tensor tdb;
    ts_tensor_create(&tdb, context, &contiguous, 2, 4, 37, 53, FLASHCL_DTYPE_F32, NULL);
    flashcl_attention_extras ex = no_extras();
    ex.bias = (flashcl_tensor){buffer, 0, 0, 0, 53};
    ex.bias_batch = 2;
    ex.bias_heads = 4;
    ex.dbias = tdb.view;
    fh_result r;
    fh_run_ex(ctx, &c, &in, 1, &ex, &r);
    const flashcl_reference_extras mods = {.bias = expanded, .bias_batch = 2, .bias_heads = 4};
    uint8_t *mask = fh_dense_mask(&c);
    fh_check_ex(&c, &in, &r, 1, mask, NULL, &mods);
    float *got = malloc(full * sizeof *got);
    double *gold = malloc(full * sizeof *gold), *low = malloc(full * sizeof *low);
    ck_assert(got && gold && low);
    ts_tensor_read_output(flashcl_context_queue(ctx), &tdb, "dBias", got);
    reference_dbias(&c, &in, &mods, gold, low, NULL);
    const ts_rule rule = {5.0, 0.0, 1};
    ts_assert_rule(c.name, "dBias", got, gold, low, full, &rule);
    free(got), free(gold), free(low), free(mask), free(one), free(expanded);
    fh_result_free(&r);
    ts_tensor_free(&tdb);
    clReleaseMemObject(buffer);
    fh_inputs_free(&in);
    flashcl_context_free(ctx);
}
END_TEST

/* ---- -inf and large biases ------------------------------------------------------ */

/* A shared bias with -inf: row 0 entirely (an empty row: O 0, LSE -inf, zero gradients and dBias), row 1 but one
 * key, scattered pairs elsewhere; keys biased by +-1e4 (they dominate or vanish); then a bias of -inf everywhere
 * (every row empty); then one NaN (its row NaN, not empty). */
START_TEST(infinite_and_large) {
    const fh_case c = fh_case_make("37x53 d32 gqa 4/2 bias -inf rows, 1e4", 2, 4, 2, 37, 53, 32, 0);
    fh_inputs in;
    fh_inputs_make(&c, 63, &in);
    flashcl_context *ctx = fh_portable_context();
    const int sk = 53;
    float *bias = random_bias(&c, 1, 1, 300, -1.0f, 1.0f, FLASHCL_DTYPE_F32);
    for (int j = 0; j < sk; ++j) bias[j] = -INFINITY;
    for (int j = 0; j < sk; ++j)
        if (j != 17) bias[sk + j] = -INFINITY;
    for (size_t i = 2 * (size_t)sk; i < plane(&c); i += 7) bias[i] = -INFINITY;
    for (int i = 3; i < 37; i += 5) bias[(size_t)i * sk + (size_t)(i % sk)] = 1e4f;
    for (int i = 4; i < 37; i += 6) bias[(size_t)i * sk + 50] = -1e4f;
    const flashcl_reference_extras mods = {.softcap = 0.0};
    run_bias(ctx, &c, &in, 1, no_extras(), mods, bias, 1, 1, FLASHCL_DTYPE_F32, &contiguous);
    for (size_t i = 0; i < plane(&c); ++i) bias[i] = -INFINITY;
    run_bias(ctx, &c, &in, 1, no_extras(), mods, bias, 1, 1, FLASHCL_DTYPE_F32, &contiguous);

    /* A NaN bias is no mask: the row it is in becomes NaN (O and LSE) by IEEE arithmetic, the others do not. */
    for (size_t i = 0; i < plane(&c); ++i) bias[i] = 0.0f;
    bias[5 * (size_t)sk + 3] = NAN;
    cl_mem buffer = ts_buffer(flashcl_context_cl_context(ctx), plane(&c) * sizeof(float), bias);
    flashcl_attention_extras ex = no_extras();
    ex.bias = (flashcl_tensor){buffer, 0, 0, 0, (size_t)sk};
    ex.bias_batch = ex.bias_heads = 1;
    fh_result r;
    fh_run_ex(ctx, &c, &in, 0, &ex, &r);
    for (size_t bh = 0; bh < 8; ++bh)
        for (int i = 4; i <= 6; ++i) {
            const size_t row = bh * 37 + (size_t)i;
            ck_assert_msg(isnan(r.lse[row]) == (i == 5), "%s: NaN bias: LSE of row %zu is %g", c.name, row,
                          (double)r.lse[row]);
            for (int t = 0; t < 32; ++t)
                ck_assert_msg(isnan(r.o[row * 32 + (size_t)t]) == (i == 5), "%s: NaN bias: O[%zu][%d] is %g", c.name,
                              row, t, (double)r.o[row * 32 + (size_t)t]);
        }
    fh_result_free(&r);
    clReleaseMemObject(buffer);
    free(bias);
    fh_inputs_free(&in);
    flashcl_context_free(ctx);
}
END_TEST

/* ---- ALiBi as a bias ------------------------------------------------------------------ */

/* ALiBi's slopes and the explicit bias -slope * |i + Sk - Sq - j| they stand for (per head, rounded to float)
 * give the same O, LSE, dQ, dK and dV within rounding (the two add the same term to the same score). */
START_TEST(alibi_equals_bias) {
    if (!ts_split_takes(0, 0, 2)) return; /* a feature combination of its own: on rusticl (ts_split_takes) */
    const fh_case c = fh_case_make("37x53 d32 gqa 4/2 alibi vs bias", 2, 4, 2, 37, 53, 32, 0);
    static const float slopes[4] = {0.5f, 0.25f, 0.125f, 0.0625f};
    fh_inputs in;
    fh_inputs_make(&c, 64, &in);
    flashcl_context *ctx = fh_portable_context();
    const int sq = 37, sk = 53;
    float *bias = malloc(4 * plane(&c) * sizeof *bias);
    ck_assert_ptr_nonnull(bias);
    for (int h = 0; h < 4; ++h)
        for (int i = 0; i < sq; ++i)
            for (int j = 0; j < sk; ++j)
                bias[((size_t)h * sq + i) * sk + j] = (float)(-(double)slopes[h] * fabs((double)(i + sk - sq - j)));
    flashcl_attention_extras ex = no_extras();
    ex.alibi_slopes_host = slopes;
    fh_result with_alibi, with_bias;
    fh_run_ex(ctx, &c, &in, 1, &ex, &with_alibi);
    const flashcl_reference_extras alibi_mods = {.alibi_slopes = slopes};
    uint8_t *mask = fh_dense_mask(&c);
    fh_check_ex(&c, &in, &with_alibi, 1, mask, NULL, &alibi_mods);
    cl_mem buffer = ts_buffer(flashcl_context_cl_context(ctx), 4 * plane(&c) * sizeof(float), bias);
    ex = no_extras();
    ex.bias = (flashcl_tensor){buffer, 0, 0, plane(&c), (size_t)sk};
    ex.bias_batch = 1;
    ex.bias_heads = 4;
    fh_run_ex(ctx, &c, &in, 1, &ex, &with_bias);
    const struct {
        const char *what;
        const float *a, *b;
        size_t n;
    } pairs[] = {{"O", with_alibi.o, with_bias.o, in.q_count},     {"LSE", with_alibi.lse, with_bias.lse, in.lse_count},
                 {"dQ", with_alibi.dq, with_bias.dq, in.q_count}, {"dK", with_alibi.dk, with_bias.dk, in.kv_count},
                 {"dV", with_alibi.dv, with_bias.dv, in.kv_count}};
    for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; ++p)
        for (size_t i = 0; i < pairs[p].n; ++i) {
            const double a = pairs[p].a[i], b = pairs[p].b[i];
            ck_assert_msg(fabs(a - b) <= 1e-5 * (1.0 + fabs(a)), "%s: %s[%zu] is %.9g with ALiBi, %.9g with the bias",
                          c.name, pairs[p].what, i, a, b);
        }
    free(mask), free(bias);
    clReleaseMemObject(buffer);
    fh_result_free(&with_alibi);
    fh_result_free(&with_bias);
    fh_inputs_free(&in);
    flashcl_context_free(ctx);
}
END_TEST

/* ---- everything at once -------------------------------------------------------------- */

/* A per-head bias with soft-capping and ALiBi (max_bias) on a causal GQA problem with more queries than keys (the
 * top rows see no key: empty), forward split along the keys (3 chunks and the combine), backward with dBias. */
START_TEST(softcap_alibi_causal_gqa) {
    if (!ts_split_takes(0, 0, 2)) return; /* a feature combination of its own: on rusticl (ts_split_takes) */
    const fh_case c = fh_case_make("61x45 d32 causal gqa 6/2 bias + softcap 3 + alibi, split-KV", 2, 6, 2, 61, 45, 32, 1);
    fh_inputs in;
    fh_inputs_make(&c, 65, &in);
    for (size_t i = 0; i < in.q_count; ++i) in.q[i] *= 3.0f; /* scores of a few units: the cap bends them */
    flashcl_context *ctx = fh_portable_context();
    ck_assert_int_eq(flashcl_context_set_kv_splits(ctx, 3), FLASHCL_SUCCESS);
    float slopes[6];
    flashcl_reference_alibi_slopes(6, 8.0, slopes);
    flashcl_attention_extras ex = no_extras();
    ex.softcap = 3.0f;
    ex.alibi_max_bias = 8.0f;
    const flashcl_reference_extras mods = {.softcap = 3.0, .alibi_slopes = slopes};
    float *bias = random_bias(&c, 1, 6, 400, -3.0f, 3.0f, FLASHCL_DTYPE_F32);
    run_bias(ctx, &c, &in, 1, ex, mods, bias, 1, 6, FLASHCL_DTYPE_F32, &contiguous);
    flashcl_call_stats s;
    ck_assert_int_eq(flashcl_last_call_stats(ctx, &s), FLASHCL_SUCCESS);
    ck_assert_int_eq(s.kernel, FLASHCL_KERNEL_PORTABLE);
    /* The forward that ran was split along the keys (what the dispatcher says of the same call). */
    cl_mem buffer = ts_buffer(flashcl_context_cl_context(ctx), 6 * plane(&c) * sizeof(float), bias);
    ex.bias = (flashcl_tensor){buffer, 0, 0, plane(&c), 45};
    ex.bias_batch = 1;
    ex.bias_heads = 6;
    ck_assert_int_eq(flashcl_explain_call(ctx, FLASHCL_PASS_FORWARD, &c.desc, &ex, &s), FLASHCL_SUCCESS);
    ck_assert_int_gt(s.kv_splits, 1);
    ck_assert_ptr_nonnull(strstr(s.build_options, "-DFLASHCL_SPLIT_KV=1"));
    clReleaseMemObject(buffer);
    free(bias);
    fh_inputs_free(&in);
    flashcl_context_free(ctx);
}
END_TEST

/* A (B, 1) bias under a two-sided window (the dQ kernel skips key blocks on both sides: their dBias is written as
 * 0) and dropout, forward and backward. */
START_TEST(window_dropout) {
    if (!ts_split_takes(1, 0, 2)) return; /* a feature combination of its own: on POCL (ts_split_takes) */
    fh_case c = fh_case_make("50x90 d32 window 20,8 dropout 0.2 bias", 2, 2, 2, 50, 90, 32, 0);
    c.desc.sliding_window = 1;
    c.desc.window_left = 20;
    c.desc.window_right = 8;
    c.desc.dropout_p = 0.2f;
    c.desc.dropout_seed = 1234;
    fh_inputs in;
    fh_inputs_make(&c, 66, &in);
    flashcl_context *ctx = fh_portable_context();
    float *bias = random_bias(&c, 2, 1, 500, -2.0f, 2.0f, FLASHCL_DTYPE_F32);
    const flashcl_reference_extras mods = {.softcap = 0.0};
    run_bias(ctx, &c, &in, 1, no_extras(), mods, bias, 2, 1, FLASHCL_DTYPE_F32, &contiguous);
    free(bias);
    fh_inputs_free(&in);
    flashcl_context_free(ctx);
}
END_TEST

/* A per-head block mask (blocks of 16, two heads with 32 keys off in every row: the kernels skip their all-off
 * tiles, whose dBias is written as 0) with a full bias and causal, forward and backward. */
START_TEST(block_mask) {
    if (!ts_split_takes(0, 0, 2)) return; /* a feature combination of its own: on rusticl (ts_split_takes) */
    fh_case c = fh_case_make("64x96 d32 causal gqa 4/2 block mask 16 per head + bias", 2, 4, 2, 64, 96, 32, 1);
    enum { ROWS = 4, COLS = 6 };
    uint8_t blocks[4 * ROWS * COLS];
    ts_rng rng = {69};
    for (size_t i = 0; i < sizeof blocks; ++i) blocks[i] = ts_uniform(&rng, 0.0, 1.0) < 0.6;
    for (int h = 0; h < 4; ++h) blocks[h * ROWS * COLS] = 0; /* rows 0-15 lose keys 0-15: some see none */
    /* Heads 0 and 1 lose keys 32-63 in every row: tiles of 16 or 32 keys there are all off, so the dQ kernel
     * skips them and writes their dBias as 0. */
    for (int h = 0; h < 2; ++h)
        for (int r = 0; r < ROWS; ++r) blocks[(h * ROWS + r) * COLS + 2] = blocks[(h * ROWS + r) * COLS + 3] = 0;
    c.block_mask = blocks;
    c.block_size = 16;
    c.per_head = 1;
    c.mask_bytes = sizeof blocks;
    fh_inputs in;
    fh_inputs_make(&c, 69, &in);
    flashcl_context *ctx = fh_portable_context();
    float *bias = random_bias(&c, 2, 4, 800, -2.0f, 2.0f, FLASHCL_DTYPE_F32);
    const flashcl_reference_extras mods = {.softcap = 0.0};
    run_bias(ctx, &c, &in, 1, no_extras(), mods, bias, 2, 4, FLASHCL_DTYPE_F32, &contiguous);
    free(bias);
    fh_inputs_free(&in);
    flashcl_context_free(ctx);
}
END_TEST

/* Half storage: a half bias (1, Hq) forward and backward (dBias in half through the reduction), and a float32
 * bias beside half data (FLASHCL_BIAS_F32), forward. */
START_TEST(half_storage) {
    if (!ts_split_takes(1, 0, 2)) return; /* a feature combination of its own: on POCL (ts_split_takes) */
    fh_case c = fh_case_make("33x70 d32 f16 gqa 4/2 bias", 1, 4, 2, 33, 70, 32, 0);
    c.desc.dtype = FLASHCL_DTYPE_F16;
    fh_inputs in;
    fh_inputs_make(&c, 67, &in);
    fh_round_inputs(&in, FLASHCL_DTYPE_F16);
    for (size_t i = 0; i < in.q_count; ++i) in.dout[i] = ts_round_to_dtype(in.dout[i], FLASHCL_DTYPE_F16);
    flashcl_context *ctx = fh_portable_context();
    const flashcl_reference_extras mods = {.softcap = 0.0};
    float *half_bias = random_bias(&c, 1, 4, 600, -2.0f, 2.0f, FLASHCL_DTYPE_F16);
    run_bias(ctx, &c, &in, 1, no_extras(), mods, half_bias, 1, 4, FLASHCL_DTYPE_F16, &contiguous);
    float *float_bias = random_bias(&c, 1, 1, 601, -2.0f, 2.0f, FLASHCL_DTYPE_F32);
    run_bias(ctx, &c, &in, 0, no_extras(), mods, float_bias, 1, 1, FLASHCL_DTYPE_F32, &contiguous);
    flashcl_call_stats s;
    ck_assert_int_eq(flashcl_last_call_stats(ctx, &s), FLASHCL_SUCCESS);
    ck_assert_ptr_nonnull(strstr(s.build_options, "-DFLASHCL_BIAS=1 -DFLASHCL_BIAS_F32=1"));
    free(half_bias), free(float_bias);
    fh_inputs_free(&in);
    flashcl_context_free(ctx);
}
END_TEST

/* ---- the tensor-core forward ---------------------------------------------------------------- */

/* The tensor-core forward (emulated here, real on NVIDIA) reads the bias where the matrix unit leaves each score:
 * f16 data, causal GQA with softcap and ALiBi, a float (1, 1) bias with -inf pairs, a query row hidden whole and
 * +-1e4 values, its rows 16-byte aligned (offset 8, rows padded to 80) so the tile is staged in local memory, the
 * last key (77 is not a whole chunk) read from global memory; and a (B, 1) f16 bias alone in unaligned rows (77),
 * read pair by pair. (A per-head bias's rows cannot all be aligned with this test's placements; the bias's base
 * per (batch, head) is the unstaged path's.) Each is an emulated build of its own (slow on
 * rusticl), split between the two CPU implementations (ts_split_takes): the first on rusticl, the second on POCL. */
START_TEST(tensor_core_forward) {
    fh_case c = fh_case_make("45x77 d64 f16 causal gqa 4/2 bias, tensor cores", 2, 4, 2, 45, 77, 64, 1);
    c.desc.dtype = FLASHCL_DTYPE_F16;
    fh_inputs in;
    fh_inputs_make(&c, 71, &in);
    fh_round_inputs(&in, FLASHCL_DTYPE_F16);
    flashcl_context *ctx = ts_context();
    ck_assert_int_eq(flashcl_context_set_tensor_cores(ctx, FLASHCL_TENSOR_CORES_EMULATE), FLASHCL_SUCCESS);
    const int sk = 77;
    for (int variant = 0; variant < 2; ++variant) {
        if (!ts_split_takes(0, variant, 2)) continue;
        static const float slopes[4] = {0.5f, 0.25f, 0.125f, 0.0625f};
        flashcl_attention_extras ex = no_extras();
        flashcl_reference_extras mods = {.softcap = 0.0};
        float *bias;
        if (variant == 0) {
            ex.softcap = 5.0f;
            ex.alibi_slopes_host = slopes;
            mods.softcap = 5.0;
            mods.alibi_slopes = slopes;
            bias = random_bias(&c, 1, 1, 700, -2.0f, 2.0f, FLASHCL_DTYPE_F32);
            for (int j = 0; j < sk; ++j) bias[(size_t)40 * sk + (size_t)j] = -INFINITY; /* row 40 */
            for (size_t i = 3; i < plane(&c); i += 7) bias[i] = -INFINITY;
            for (size_t i = 5; i < plane(&c); i += 97) bias[i] = (i / 97) % 2 ? 1e4f : -1e4f;
            /* The last key, read from global memory past the staged chunks, dominates the one row that sees it
             * (row 44: its +-1e4 entries cleared, or one of them would dominate instead). */
            for (int j = 0; j < sk; ++j)
                if (fabsf(bias[(size_t)44 * sk + (size_t)j]) >= 1e4f) bias[(size_t)44 * sk + (size_t)j] = 0.0f;
            bias[(size_t)44 * sk + (size_t)(sk - 1)] = 9.0f;
            const ts_placement aligned = {FLASHCL_LAYOUT_BHSD, 8, 3};
            run_bias(ctx, &c, &in, 0, ex, mods, bias, 1, 1, FLASHCL_DTYPE_F32, &aligned);
        } else {
            bias = random_bias(&c, 2, 1, 701, -3.0f, 3.0f, FLASHCL_DTYPE_F16);
            run_bias(ctx, &c, &in, 0, ex, mods, bias, 2, 1, FLASHCL_DTYPE_F16, &contiguous);
        }
        flashcl_call_stats s;
        ck_assert_int_eq(flashcl_last_call_stats(ctx, &s), FLASHCL_SUCCESS);
        ck_assert_int_eq(s.kernel, FLASHCL_KERNEL_TENSOR_CORE_EMULATED);
        ck_assert_ptr_nonnull(strstr(s.build_options, variant == 0 ? "-DFLASHCL_BIAS=1 -DFLASHCL_BIAS_F32=1 "
                                                                     "-DFLASHCL_BIAS_STAGED=1"
                                                                   : "-DFLASHCL_BIAS=1"));
        ck_assert((strstr(s.build_options, "STAGED") != NULL) == (variant == 0));
        free(bias);
    }
    fh_inputs_free(&in);
    flashcl_context_free(ctx);
}
END_TEST

/* A padding mask over garbage keys: keys 150-199 and key 20 hold NaN in K and a -inf bias on every row (key 20
 * inside the first blocks, which reach neither seqlen_k nor a diagonal: the tensor-core kernels' open blocks, which
 * test the bias alone), row 7 is -inf whole (an empty row: O = 0, LSE = -inf), the rest a random bias. A hidden
 * pair's NaN score must not reach O or LSE (the reference never computes it), so every output is finite and
 * judged against the reference, on the portable kernels, the emulated tensor-core ones, and on an sm_90 device the
 * wgmma forward. */
START_TEST(hidden_nan_keys) {
    fh_case c = fh_case_make("70x200 d64 f16 gqa 4/2 bias hides NaN keys", 1, 4, 2, 70, 200, 64, 0);
    c.desc.dtype = FLASHCL_DTYPE_F16;
    fh_inputs in;
    fh_inputs_make(&c, 91, &in);
    fh_round_inputs(&in, FLASHCL_DTYPE_F16);
    const int sk = 200, d = 64;
    float *bias = random_bias(&c, 1, 1, 702, -2.0f, 2.0f, FLASHCL_DTYPE_F32);
    for (int j = 0; j < sk; ++j) {
        const int garbage = j == 20 || j >= 150;
        for (int i = 0; i < 70; ++i)
            if (garbage || i == 7) bias[(size_t)i * sk + (size_t)j] = -INFINITY;
        for (size_t kv = 0; garbage && kv < 2; ++kv)
            for (int t = 0; t < d; ++t) in.k[(kv * (size_t)sk + (size_t)j) * (size_t)d + (size_t)t] = NAN;
    }
    const ts_placement aligned = {FLASHCL_LAYOUT_BHSD, 8, 0};
    const flashcl_reference_extras mods = {.softcap = 0.0};
    for (int variant = 0; variant < 3; ++variant) {
        if (!ts_split_takes(1, variant, 3)) continue;
        flashcl_context *ctx = variant == 0 ? fh_portable_context() : variant == 1 ? ts_context() : ts_context_wgmma("1");
        if (variant == 1)
            ck_assert_int_eq(flashcl_context_set_tensor_cores(ctx, FLASHCL_TENSOR_CORES_EMULATE), FLASHCL_SUCCESS);
        if (variant == 2 && !ts_device_is_sm90(ctx)) {
            flashcl_context_free(ctx);
            continue;
        }
        run_bias(ctx, &c, &in, 0, no_extras(), mods, bias, 1, 1, FLASHCL_DTYPE_F32, &aligned);
        flashcl_call_stats st;
        ck_assert_int_eq(flashcl_last_call_stats(ctx, &st), FLASHCL_SUCCESS);
        if (variant == 1) ck_assert_int_eq(st.kernel, FLASHCL_KERNEL_TENSOR_CORE_EMULATED);
        if (variant == 2) ck_assert_str_eq(st.backend, "nvidia-wgmma");
        flashcl_context_free(ctx);
    }
    free(bias);
    fh_inputs_free(&in);
}
END_TEST

/* ---- the decode kernels ------------------------------------------------------------------- */

/* Whether ctx's last call ran the decode kernel `program` with `splits` key chunks and a bias build. */
static void assert_ran_decode(flashcl_context *ctx, const char *label, const char *program, int splits) {
    flashcl_call_stats s;
    ck_assert_int_eq(flashcl_last_call_stats(ctx, &s), FLASHCL_SUCCESS);
    ck_assert_msg(s.kernel == FLASHCL_KERNEL_DECODE && strcmp(s.program, program) == 0,
                  "%s: ran kernel %d, program %s (expected the decode kernel, %s)", label, (int)s.kernel, s.program,
                  program);
    ck_assert_msg(s.kv_splits == splits, "%s: %d key chunks, expected %d", label, s.kv_splits, splits);
    ck_assert_msg(strstr(s.build_options, "-DFLASHCL_BIAS=1") != NULL, "%s: built with %s", label, s.build_options);
}

/* Whether the last call's build reads the bias two keys at a time (cl/decode_mma.cl, DECODE_BIAS_PAIRS). */
static void assert_bias_pairs(flashcl_context *ctx, const char *label, int pairs) {
    flashcl_call_stats s;
    ck_assert_int_eq(flashcl_last_call_stats(ctx, &s), FLASHCL_SUCCESS);
    ck_assert_msg((strstr(s.build_options, "-DDECODE_BIAS_PAIRS=1") != NULL) == pairs, "%s: built with %s", label,
                  s.build_options);
}

/* Forward-only decode calls (f16 data, d64, GQA 8 query heads over 2, 300 keys) on one decode kernel: cl/decode.cl
 * (tensor cores off) or cl/decode_mma.cl (emulated). Two builds each:
 *   A: 4 causal positions (16 packed rows: every row of a work-group a different (head, position)), soft-capping,
 *      ALiBi and a full (B, Hq) float32 bias with a row hidden whole, a row hidden over the whole first key chunk,
 *      scattered -inf pairs and +-1e4, split into 3 key chunks; then a NaN pair (its row NaN, no other) and a bias
 *      of -inf everywhere (every row empty) through the same build;
 *   B: 1 position, a (1, 1) half bias (every row reads the one plane), unsplit.
 * Split between the two CPU implementations (ts_split_takes): rusticl runs A on the matrix-unit kernel, whose lanes
 * hold two rows each (the trickier row mapping), and B on the portable one; POCL the other two pairs. */
static void decode_cases(int mma) {
    const char *program = mma ? "decode_mma.cl" : "decode.cl";
    flashcl_context *ctx = ts_context();
    ck_assert_int_eq(
        flashcl_context_set_tensor_cores(ctx, mma ? FLASHCL_TENSOR_CORES_EMULATE : FLASHCL_TENSOR_CORES_OFF),
        FLASHCL_SUCCESS);
    enum { SK = 300 };
    if (ts_split_takes(mma + 1, 0, 2)) {
        fh_case c = fh_case_make(mma ? "4x300 d64 f16 causal gqa 8/2 bias + softcap + alibi, decode_mma.cl, 3 chunks"
                                     : "4x300 d64 f16 causal gqa 8/2 bias + softcap + alibi, decode.cl, 3 chunks",
                                 2, 8, 2, 4, SK, 64, 1);
        c.desc.dtype = FLASHCL_DTYPE_F16;
        fh_inputs in;
        fh_inputs_make(&c, 72, &in);
        for (size_t i = 0; i < in.q_count; ++i) in.q[i] *= 3.0f; /* scores of a few units: the cap bends them */
        fh_round_inputs(&in, FLASHCL_DTYPE_F16);
        ck_assert_int_eq(flashcl_context_set_kv_splits(ctx, 3), FLASHCL_SUCCESS);
        float slopes[8];
        flashcl_reference_alibi_slopes(8, 8.0, slopes);
        flashcl_attention_extras ex = no_extras();
        ex.softcap = 3.0f;
        ex.alibi_max_bias = 8.0f;
        const flashcl_reference_extras mods = {.softcap = 3.0, .alibi_slopes = slopes};
        float *bias = random_bias(&c, 2, 8, 1000, -3.0f, 3.0f, FLASHCL_DTYPE_F32);
        const size_t p = plane(&c);
        /* (b, h, position) -> its row of the bias. */
#define BIAS_ROW(b, h, i) (bias + (((size_t)(b) * 8 + (size_t)(h)) * 4 + (size_t)(i)) * SK)
        for (size_t i = 11; i < 16 * p; i += 7) bias[i] = -INFINITY; /* scattered pairs */
        /* Keys biased by -1e4 vanish; +1e4 ones dominate their rows on the portable kernel only: the matrix-unit
         * kernels (cl/decode_mma.cl as cl/forward_mma.cl) round P to 16 bits for P V but sum it in float, so a row
         * with a single dominant key is off by up to one storage ulp of O, past the tolerance rule where the
         * golden O is representable (the rule holds for rows whose weight spreads over several keys). */
        for (size_t i = 5; i < 16 * p; i += 97) bias[i] = (i / 97) % 2 && !mma ? 1e4f : -1e4f;
        for (int j = 0; j < SK; ++j) BIAS_ROW(1, 5, 3)[j] = -INFINITY;  /* an empty row */
        for (int j = 0; j < 150; ++j) BIAS_ROW(0, 1, 2)[j] = -INFINITY; /* no key of the first chunk */
        run_bias(ctx, &c, &in, 0, ex, mods, bias, 2, 8, FLASHCL_DTYPE_F32, &contiguous);
        assert_ran_decode(ctx, c.name, program, 3);
        assert_bias_pairs(ctx, c.name, mma); /* 300 floats a row: 16-byte aligned */

        /* A NaN bias is no mask: its row NaN (O and LSE), every other row finite. */
        for (size_t i = 0; i < 16 * p; ++i) bias[i] = 0.0f;
        BIAS_ROW(0, 3, 1)[10] = NAN;
#undef BIAS_ROW
        cl_mem buffer = ts_buffer(flashcl_context_cl_context(ctx), 16 * p * sizeof(float), bias);
        flashcl_attention_extras nan_ex = ex;
        nan_ex.bias = (flashcl_tensor){buffer, 0, 8 * p, p, SK};
        nan_ex.bias_batch = 2;
        nan_ex.bias_heads = 8;
        fh_result r;
        fh_run_ex(ctx, &c, &in, 0, &nan_ex, &r);
        assert_ran_decode(ctx, c.name, program, 3);
        for (size_t row = 0; row < 2 * 8 * 4; ++row) {
            const int nan_row = row == (0 * 8 + 3) * 4 + 1;
            ck_assert_msg(isnan(r.lse[row]) == nan_row, "%s: NaN bias: LSE of row %zu is %g", c.name, row,
                          (double)r.lse[row]);
            for (int t = 0; t < 64; ++t)
                ck_assert_msg(isnan(r.o[row * 64 + (size_t)t]) == nan_row, "%s: NaN bias: O[%zu][%d] is %g", c.name,
                              row, t, (double)r.o[row * 64 + (size_t)t]);
        }
        fh_result_free(&r);
        clReleaseMemObject(buffer);

        /* Every pair hidden: every chunk's partial is empty, every row written empty. */
        for (size_t i = 0; i < 16 * p; ++i) bias[i] = -INFINITY;
        run_bias(ctx, &c, &in, 0, ex, mods, bias, 2, 8, FLASHCL_DTYPE_F32, &contiguous);
        assert_ran_decode(ctx, c.name, program, 3);
        free(bias);
        fh_inputs_free(&in);
    }
    if (ts_split_takes(mma + 1, 1, 2)) {
        fh_case c = fh_case_make(mma ? "1x300 d64 f16 gqa 8/2 half bias (1, 1), decode_mma.cl, unsplit"
                                     : "1x300 d64 f16 gqa 8/2 half bias (1, 1), decode.cl, unsplit",
                                 2, 8, 2, 1, SK, 64, 0);
        c.desc.dtype = FLASHCL_DTYPE_F16;
        fh_inputs in;
        fh_inputs_make(&c, 73, &in);
        fh_round_inputs(&in, FLASHCL_DTYPE_F16);
        ck_assert_int_eq(flashcl_context_set_kv_splits(ctx, 1), FLASHCL_SUCCESS);
        float *bias = random_bias(&c, 1, 1, 1001, -3.0f, 3.0f, FLASHCL_DTYPE_F16);
        for (int j = 3; j < SK; j += 5) bias[j] = -INFINITY;
        const flashcl_reference_extras mods = {.softcap = 0.0};
        run_bias(ctx, &c, &in, 0, no_extras(), mods, bias, 1, 1, FLASHCL_DTYPE_F16, &contiguous);
        assert_ran_decode(ctx, c.name, program, 1);
        /* 300-element half rows are not 16-byte aligned: the matrix-unit kernel reads the bias key by key. */
        assert_bias_pairs(ctx, c.name, 0);
        free(bias);
        fh_inputs_free(&in);
    }
    /* C (matrix units): half bias rows of 264 keys, 16-byte aligned, so the kernel reads keys 2t, 2t+1 in one
     * 4-byte load (-DDECODE_BIAS_PAIRS=1); a causal window of 151 keys to the left makes the first chunk start at
     * the odd key 111 (its steps read key by key), the second chunk at an even one (pairs); -inf pairs, an empty
     * row. */
    if (mma && ts_split_takes(mma + 1, 1, 2)) {
        enum { SK_ALIGNED = 264 };
        fh_case c = fh_case_make("2x264 d64 f16 causal window 151 gqa 8/2 aligned half bias, decode_mma.cl, 2 chunks",
                                 2, 8, 2, 2, SK_ALIGNED, 64, 1);
        c.desc.dtype = FLASHCL_DTYPE_F16;
        c.desc.sliding_window = 1;
        c.desc.window_left = 151;
        c.desc.window_right = 0;
        fh_inputs in;
        fh_inputs_make(&c, 74, &in);
        fh_round_inputs(&in, FLASHCL_DTYPE_F16);
        ck_assert_int_eq(flashcl_context_set_kv_splits(ctx, 2), FLASHCL_SUCCESS);
        float *bias = random_bias(&c, 2, 8, 1002, -3.0f, 3.0f, FLASHCL_DTYPE_F16);
        const size_t p = plane(&c);
        for (size_t i = 3; i < 16 * p; i += 11) bias[i] = -INFINITY;
        for (int j = 0; j < SK_ALIGNED; ++j) bias[((size_t)(1 * 8 + 6) * 2 + 1) * SK_ALIGNED + (size_t)j] = -INFINITY;
        const flashcl_reference_extras mods = {.softcap = 0.0};
        run_bias(ctx, &c, &in, 0, no_extras(), mods, bias, 2, 8, FLASHCL_DTYPE_F16, &contiguous);
        assert_ran_decode(ctx, c.name, program, 2);
        assert_bias_pairs(ctx, c.name, 1);
        free(bias);
        fh_inputs_free(&in);
    }
    flashcl_context_free(ctx);
}

START_TEST(decode_portable) { decode_cases(0); }
END_TEST

START_TEST(decode_matrix_units) { decode_cases(1); }
END_TEST

/* ---- the tensor-core backward --------------------------------------------------------------- */

/* docs/testing.md's rule for 16-bit storage in the backward: the whole tensor within `ulps` storage ulps of its
 * largest |reference|, every element finite. */
static void assert_storage_ulps(const char *label, const char *what, const float *got, const double *gold, size_t n,
                                flashcl_dtype dtype, double ulps) {
    const double ulp = dtype == FLASHCL_DTYPE_F16 ? ldexp(1.0, -11) : ldexp(1.0, -8);
    double error = 0.0, magnitude = 0.0;
    size_t worst = 0;
    for (size_t i = 0; i < n; ++i) {
        ck_assert_msg(isfinite(got[i]), "%s: %s[%zu] is %g", label, what, i, (double)got[i]);
        const double e = fabs((double)got[i] - gold[i]);
        if (e > error) error = e, worst = i;
        magnitude = fmax(magnitude, fabs(gold[i]));
    }
    ck_assert_msg(magnitude > 0.01, "%s: %s is degenerate", label, what);
    ck_assert_msg(error <= ulps * ulp * magnitude, "%s: %s error %.3g at %zu (%.7g, reference %.7g) exceeds %g storage ulps of %.3g",
                  label, what, error, worst, (double)got[worst], gold[worst], ulps, magnitude);
    if (getenv("FLASHCL_TEST_VERBOSE"))
        printf("%s: %s uses %.2f of %g storage ulps\n", label, what, error / (ulp * magnitude), ulps);
}

/* One forward and backward of c on ctx with the bias `values` (bb, bh, Sq, Sk) of bias_dtype placed as `place`
 * says and its dBias of the same placement: the gradients into r, dBias (read back exactly: every element written,
 * nothing around it) into dbias. */
static void biased_backward(flashcl_context *ctx, const fh_case *c, const fh_inputs *in, flashcl_attention_extras ex,
                            const float *values, int bb, int bh, flashcl_dtype bias_dtype, const flashcl_tensor *place,
                            fh_result *r, float *dbias) {
    cl_context context = flashcl_context_cl_context(ctx);
    const size_t sq = (size_t)c->desc.seqlen_q, sk = (size_t)c->desc.seqlen_k;
    ts_tensor tb, tdb;
    ts_tensor_create_strided(&tb, context, place, (size_t)bb, (size_t)bh, sq, sk, bias_dtype, values);
    ts_tensor_create_strided(&tdb, context, place, (size_t)bb, (size_t)bh, sq, sk, bias_dtype, NULL);
    ex.bias = tb.view;
    ex.bias_batch = bb;
    ex.bias_heads = bh;
    ex.bias_dtype = bias_dtype;
    ex.dbias = tdb.view;
    fh_run_ex(ctx, c, in, 1, &ex, r);
    ts_tensor_read_output(flashcl_context_queue(ctx), &tdb, "dBias", dbias);
    ts_tensor_free(&tdb);
    ts_tensor_free(&tb);
}

/* Which tensor-core backward a biased_backward_case must have run. */
typedef enum { RAN_EMULATED, RAN_WGMMA } tc_backward_kind;

/* One variant v (below) of a causal GQA backward with soft-capping, ALiBi and a bias at once on f16 data with more
 * queries than keys (rows 0 .. sq - sk - 1 see no key), on ctx, which must run the `kind` kernels: O and LSE under
 * the forward's rule, dQ, dK, dV and dBias under the 16-bit backward rule against the double reference, dQ and
 * dBias exactly 0 on empty rows and dBias on every hidden pair, and a second run bit for bit the same. Variants: 0 a
 * float32 bias of full shape at an odd offset with padded rows (dBias written by the dQ kernel directly, the bias
 * read pair by pair from global memory), 1 a float32 (1, 1) one (dBias through the scratch and the reduction), 2 a
 * half (1, 1) one, 3 a half one of full shape; 1-3 in 16-byte aligned rows (offset 8, rows padded to a multiple of
 * 8; the full-shape one's heads and batches each padded by 8), so the kernels that stage their bias do; each with a
 * row hidden whole by -inf (in the last (b, h) plane) and scattered -inf pairs. */
static void biased_backward_case(flashcl_context *ctx, const fh_case *c, const fh_inputs *in, int hidden_row, int v,
                                 tc_backward_kind kind) {
    static const float slopes[8] = {0.5f, 0.25f, 0.125f, 0.0625f, 0.03125f, 0.015625f, 0.0078125f, 0.00390625f};
    static const struct {
        int full;
        flashcl_dtype dtype;
    } variants[4] = {{1, FLASHCL_DTYPE_F32}, {0, FLASHCL_DTYPE_F32}, {0, FLASHCL_DTYPE_F16}, {1, FLASHCL_DTYPE_F16}};
    const int sq = c->desc.seqlen_q, sk = c->desc.seqlen_k, d = c->desc.head_dim, empty_rows = sq - sk;
    const int heads = c->desc.heads_q;
    const int bb = variants[v].full ? c->desc.batch : 1, bh = variants[v].full ? heads : 1;
    const flashcl_dtype bias_dtype = variants[v].dtype;
    flashcl_attention_extras ex = no_extras();
    ex.softcap = 2.0f;
    ex.alibi_slopes_host = slopes;
    const size_t n = (size_t)bb * (size_t)bh * plane(c), grads_n = in->q_count + 2 * in->kv_count;
    char label[200];
    snprintf(label, sizeof label, "%s, %s bias (%d, %d)", c->name, bias_dtype == FLASHCL_DTYPE_F32 ? "float32" : "half",
             bb, bh);
    float *bias = random_bias(c, bb, bh, 1000 + (uint64_t)v, -2.0f, 2.0f, bias_dtype);
    for (size_t i = 3; i < n; i += 13) bias[i] = -INFINITY;
    /* A row hidden whole (in the last (b, h) plane of the bias). */
    for (int j = 0; j < sk; ++j) bias[n - plane(c) + (size_t)hidden_row * (size_t)sk + (size_t)j] = -INFINITY;

    fh_result r, again;
    float *dbias = malloc(n * sizeof *dbias), *dbias_again = malloc(n * sizeof *dbias_again);
    double *gold = malloc(n * sizeof *gold), *grads = malloc(grads_n * sizeof *grads);
    ck_assert(dbias && dbias_again && gold && grads);
    const ts_placement padded = {FLASHCL_LAYOUT_BHSD, 5, 3},
                       aligned = {FLASHCL_LAYOUT_BHSD, 8, (size_t)((8 - sk % 8) % 8)};
    const size_t row = (size_t)sk + aligned.pad, head_stride = (size_t)sq * row + 8;
    const flashcl_tensor place = v == 0 ? ts_strided_view(&padded, (size_t)bb, (size_t)bh, (size_t)sq, (size_t)sk)
                                 : v == 3 ? (flashcl_tensor){NULL, 8, (size_t)bh * head_stride + 8, head_stride, row}
                                          : ts_strided_view(&aligned, (size_t)bb, (size_t)bh, (size_t)sq, (size_t)sk);
    biased_backward(ctx, c, in, ex, bias, bb, bh, bias_dtype, &place, &r, dbias);
    flashcl_call_stats s;
    ck_assert_int_eq(flashcl_last_call_stats(ctx, &s), FLASHCL_SUCCESS);
    ck_assert_int_eq(s.pass, FLASHCL_PASS_BACKWARD);
    if (kind == RAN_EMULATED) {
        ck_assert_int_eq(s.kernel, FLASHCL_KERNEL_TENSOR_CORE_EMULATED);
        ck_assert_str_eq(s.backend, "emulated");
    } else {
        ck_assert_msg(strcmp(s.backend, "nvidia-wgmma") == 0 && strcmp(s.program, "backward_wgmma.cl") == 0,
                      "%s: ran %s (%s), not the wgmma backward", label, s.backend, s.program);
        /* dQ on wgmma too (the mma.sync dQ kernel of the same program is built without BWQ_WARPGROUPS). */
        ck_assert_msg(strstr(s.build_options, "-DBWQ_WARPGROUPS=") != NULL, "%s: dQ did not run on wgmma (%s)", label,
                      s.build_options);
    }
    ck_assert_ptr_nonnull(strstr(s.build_options, bias_dtype == FLASHCL_DTYPE_F32
                                                      ? "-DFLASHCL_SOFTCAP=1 -DFLASHCL_ALIBI=1 -DFLASHCL_BIAS=1 "
                                                        "-DFLASHCL_BIAS_F32=1"
                                                      : "-DFLASHCL_SOFTCAP=1 -DFLASHCL_ALIBI=1 -DFLASHCL_BIAS=1"));
    ck_assert_msg((strstr(s.build_options, "-DFLASHCL_BIAS_STAGED=1") != NULL) == (v > 0), "%s: built with %s", label,
                  s.build_options);

    const flashcl_reference_extras mods = {
        .softcap = 2.0, .alibi_slopes = slopes, .bias = bias, .bias_batch = bb, .bias_heads = bh};
    uint8_t *mask = fh_dense_mask(c);
    fh_check_ex(c, in, &r, 0, mask, NULL, &mods); /* O and LSE */
    reference_dbias(c, in, &mods, gold, NULL, grads);
    assert_storage_ulps(label, "dQ", r.dq, grads, in->q_count, FLASHCL_DTYPE_F16, 4.0);
    assert_storage_ulps(label, "dK", r.dk, grads + in->q_count, in->kv_count, FLASHCL_DTYPE_F16, 4.0);
    assert_storage_ulps(label, "dV", r.dv, grads + in->q_count + in->kv_count, in->kv_count, FLASHCL_DTYPE_F16, 4.0);
    assert_storage_ulps(label, "dBias", dbias, gold, n, FLASHCL_DTYPE_F16, 4.0);

    /* Exact zeros: dQ of the rows that see no key (causal, or the -inf row in every (b, h) the bias plane serves),
     * dBias of every pair no query sees (+0, as the portable kernel writes it). */
    const size_t last_plane = (size_t)c->desc.batch * (size_t)heads - 1;
    for (size_t bhq = 0; bhq <= last_plane; ++bhq)
        for (int i = 0; i < sq; ++i) {
            const int hidden = i < empty_rows || (i == hidden_row && (bb * bh == 1 || bhq == last_plane));
            for (int t = 0; hidden && t < d; ++t)
                ck_assert_msg(r.dq[(bhq * (size_t)sq + (size_t)i) * (size_t)d + (size_t)t] == 0.0f,
                              "%s: dQ[%zu][%d][%d] of an empty row is %g", label, bhq, i, t,
                              (double)r.dq[(bhq * (size_t)sq + (size_t)i) * (size_t)d + (size_t)t]);
        }
    for (size_t e = 0; e < n; ++e) {
        const int i = (int)(e / (size_t)sk % (size_t)sq), j = (int)(e % (size_t)sk);
        if (bias[e] == -INFINITY || j > i - empty_rows)
            ck_assert_msg(dbias[e] == 0.0f && !signbit(dbias[e]), "%s: dBias[%zu] of a hidden pair is %g", label, e,
                          (double)dbias[e]);
    }
    free(mask);

    /* Deterministic: the same call again gives the same bits. */
    biased_backward(ctx, c, in, ex, bias, bb, bh, bias_dtype, &place, &again, dbias_again);
    ck_assert_msg(memcmp(dbias, dbias_again, n * sizeof *dbias) == 0, "%s: dBias differs between two runs", label);
    ck_assert_msg(memcmp(r.dq, again.dq, in->q_count * sizeof(float)) == 0, "%s: dQ differs between two runs", label);
    ck_assert_msg(memcmp(r.dk, again.dk, in->kv_count * sizeof(float)) == 0, "%s: dK differs between two runs",
                  label);
    ck_assert_msg(memcmp(r.dv, again.dv, in->kv_count * sizeof(float)) == 0, "%s: dV differs between two runs",
                  label);
    fh_result_free(&r);
    fh_result_free(&again);
    free(dbias), free(dbias_again), free(gold), free(grads), free(bias);
}

/* The inputs of a biased backward case: f16-rounded, queries scaled so that the scores are a few units (the cap
 * bends them). */
static void biased_backward_inputs(const fh_case *c, uint64_t seed, fh_inputs *in) {
    fh_inputs_make(c, seed, in);
    for (size_t i = 0; i < in->q_count; ++i) in->q[i] *= 4.0f;
    fh_round_inputs(in, FLASHCL_DTYPE_F16);
    for (size_t i = 0; i < in->q_count; ++i) in->dout[i] = ts_round_to_dtype(in->dout[i], FLASHCL_DTYPE_F16);
}

/* The tensor-core backward emulated (real on NVIDIA in the wgmma test below) at d32, 100 queries x 78 keys, 4 query
 * heads over 2, batch 2 (rows 0-21 see no key; row 60 would see keys 0-38): the four variants of
 * biased_backward_case. The staged ones stage their bias tiles in local memory, one block ahead (the full-shape one:
 * the dK/dV kernel's copy for the next block crosses from one query head of the group to the next, each with its own
 * plane), and the warp (dK/dV) or key block (dQ) that holds a key past the last whole chunk (76-77, 72-77) reads all
 * of its bias from global memory (keys 64-77: a wrong row or column in the staged read, or a staged range running
 * past the last whole chunk, each fail this test). Three emulated builds (unstaged, staged float32, staged half),
 * split between the two CPU implementations (ts_split_takes): the two float32 cases on rusticl, the two half ones on
 * POCL. */
START_TEST(tensor_core_backward) {
    fh_case c = fh_case_make("100x78 d32 f16 causal gqa 4/2 softcap 2 + alibi + bias, tensor-core backward", 2, 4, 2,
                             100, 78, 32, 1);
    c.desc.dtype = FLASHCL_DTYPE_F16;
    fh_inputs in;
    biased_backward_inputs(&c, 72, &in);
    flashcl_context *ctx = ts_context();
    ck_assert_int_eq(flashcl_context_set_tensor_cores(ctx, FLASHCL_TENSOR_CORES_EMULATE), FLASHCL_SUCCESS);
    for (int v = 0; v < 4; ++v)
        if (ts_split_takes(0, v < 2 ? 0 : 1, 2)) biased_backward_case(ctx, &c, &in, 60, v, RAN_EMULATED);
    fh_inputs_free(&in);
    flashcl_context_free(ctx);
}
END_TEST

/* The Hopper backward with a bias (FLASHCL_WGMMA=1: dK/dV and dQ, which writes dBias, on wgmma, the bias staged
 * where its rows are aligned and read from global memory where not), on an sm_90 device only (elsewhere these calls run the portable kernels, which the cases above
 * cover): the four variants of biased_backward_case at d64 (300 queries x 278 keys over three 128-key work-groups of
 * the dK/dV kernel, 8 query heads over 2: its 128-query steps cross from one query head to the next) and d128 (130
 * x 100, 64-query steps). */
START_TEST(wgmma_backward) {
    flashcl_context *ctx = ts_context_wgmma("1");
    if (!ts_device_is_sm90(ctx)) {
        printf("bias: wgmma_backward runs on an sm_90 device only (not this one)\n");
        flashcl_context_free(ctx);
        return;
    }
    fh_case c = _i == 0 ? fh_case_make("300x278 d64 f16 causal gqa 8/2 softcap 2 + alibi + bias, wgmma backward", 1, 8,
                                       2, 300, 278, 64, 1)
                        : fh_case_make("130x100 d128 f16 causal gqa 4/2 softcap 2 + alibi + bias, wgmma backward", 2,
                                       4, 2, 130, 100, 128, 1);
    c.desc.dtype = FLASHCL_DTYPE_F16;
    fh_inputs in;
    biased_backward_inputs(&c, 75 + (uint64_t)_i, &in);
    for (int v = 0; v < 4; ++v) biased_backward_case(ctx, &c, &in, _i == 0 ? 250 : 90, v, RAN_WGMMA);
    fh_inputs_free(&in);
    flashcl_context_free(ctx);
}
END_TEST

/* ---- determinism across plans ------------------------------------------------------------- */

/* dBias (bb, bh, Sq, Sk) and dQ, dK, dV of one backward on ctx with the bias `values`, read back as floats; dBias
 * starts poisoned and must be written exactly. */
static void backward_bits(flashcl_context *ctx, const fh_case *c, const fh_inputs *in, const float *values, int bb,
                          int bh, float *dbias, fh_result *r) {
    cl_context context = flashcl_context_cl_context(ctx);
    const size_t sq = (size_t)c->desc.seqlen_q, sk = (size_t)c->desc.seqlen_k;
    ts_tensor tb, tdb;
    ts_tensor_create(&tb, context, &contiguous, (size_t)bb, (size_t)bh, sq, sk, FLASHCL_DTYPE_F32, values);
    ts_tensor_create(&tdb, context, &contiguous, (size_t)bb, (size_t)bh, sq, sk, FLASHCL_DTYPE_F32, NULL);
    flashcl_attention_extras ex = no_extras();
    ex.bias = tb.view;
    ex.bias_batch = bb;
    ex.bias_heads = bh;
    ex.dbias = tdb.view;
    fh_run_ex(ctx, c, in, 1, &ex, r);
    ts_tensor_read_output(flashcl_context_queue(ctx), &tdb, "dBias", dbias);
    ts_tensor_free(&tdb);
    ts_tensor_free(&tb);
}

/* The backward's sums run in a fixed order whatever the tiles, so two forced backward plans (small tiles: many
 * work-groups whose loops skip keys on both sides of a causal window, and narrow ones) give the default plan's
 * dBias, dQ and dK bit for bit, and a second run on one context its first run's; for a full bias (dBias written
 * by the dQ kernel, the skipped keys' zeros included) and a (B, 1) one (through the reduction). The default
 * plan's dBias is judged against the reference. */
START_TEST(plans_agree) {
    if (!ts_split_takes(1, 0, 2)) return; /* a feature combination of its own: on POCL (ts_split_takes) */
    fh_case c = fh_case_make("45x70 d32 causal gqa 4/2 window 16,-1 bias, three backward plans", 2, 4, 2, 45, 70, 32, 1);
    c.desc.sliding_window = 1;
    c.desc.window_left = 16;
    fh_inputs in;
    fh_inputs_make(&c, 68, &in);
    static const flashcl_plan plans[2] = {{16, 16, 4, 4, 0, 0}, {8, 32, 8, 4, 0, 0}};
    static const int shapes[2][2] = {{2, 4}, {2, 1}};
    for (int s = 0; s < 2; ++s) {
        const int bb = shapes[s][0], bh = shapes[s][1];
        const size_t n = (size_t)bb * (size_t)bh * plane(&c);
        float *values = random_bias(&c, bb, bh, 700 + (uint64_t)s, -2.0f, 2.0f, FLASHCL_DTYPE_F32);
        float *first = malloc(n * sizeof *first), *other = malloc(n * sizeof *other);
        double *gold = malloc(n * sizeof *gold), *low = malloc(n * sizeof *low);
        ck_assert(first && other && gold && low);
        fh_result base;
        flashcl_context *ctx = fh_portable_context();
        backward_bits(ctx, &c, &in, values, bb, bh, first, &base);
        const flashcl_reference_extras mods = {.bias = values, .bias_batch = bb, .bias_heads = bh};
        reference_dbias(&c, &in, &mods, gold, low, NULL);
        const ts_rule rule = {5.0, 0.0, 1};
        ts_assert_rule(c.name, "dBias", first, gold, low, n, &rule);
        for (int p = -1; p < 2; ++p) {
            flashcl_context *run_ctx = ctx;
            if (p >= 0) {
                run_ctx = fh_portable_context();
                ck_assert_int_eq(flashcl_context_force_plan(run_ctx, FLASHCL_PASS_BACKWARD, &plans[p]),
                                 FLASHCL_SUCCESS);
            }
            fh_result r;
            backward_bits(run_ctx, &c, &in, values, bb, bh, other, &r);
            ck_assert_msg(memcmp(first, other, n * sizeof *first) == 0, "%s: dBias (%d, %d) differs under plan %d",
                          c.name, bb, bh, p);
            ck_assert_msg(memcmp(base.dq, r.dq, in.q_count * sizeof(float)) == 0, "%s: dQ differs under plan %d",
                          c.name, p);
            ck_assert_msg(memcmp(base.dk, r.dk, in.kv_count * sizeof(float)) == 0, "%s: dK differs under plan %d",
                          c.name, p);
            fh_result_free(&r);
            if (p >= 0) flashcl_context_free(run_ctx);
        }
        fh_result_free(&base);
        flashcl_context_free(ctx);
        free(first), free(other), free(gold), free(low), free(values);
    }
    fh_inputs_free(&in);
}
END_TEST

/* ---- an out-of-order queue ------------------------------------------------------------------ */

/* Forward then backward with a (1, 1) bias and its dBias on ctx, chained by events only (on an out-of-order queue
 * nothing else orders them): the backward's event must stand for the dBias reduction too. dBias into dbias. */
static void chained_run(flashcl_context *ctx, const fh_case *c, const fh_inputs *in, const float *bias_values,
                        float *dbias) {
    cl_context context = flashcl_context_cl_context(ctx);
    const flashcl_attention_desc *d = &c->desc;
    const size_t B = (size_t)d->batch, hq = (size_t)d->heads_q, hkv = (size_t)d->heads_kv;
    const size_t sq = (size_t)d->seqlen_q, sk = (size_t)d->seqlen_k, hd = (size_t)d->head_dim;
    const flashcl_dtype f32 = FLASHCL_DTYPE_F32;
    enum { Q, K, V, O, L, DO, DQ, DK, DV, BIAS, DBIAS, N };
    ts_tensor t[N];
    ts_tensor_create(&t[Q], context, &contiguous, B, hq, sq, hd, f32, in->q);
    ts_tensor_create(&t[K], context, &contiguous, B, hkv, sk, hd, f32, in->k);
    ts_tensor_create(&t[V], context, &contiguous, B, hkv, sk, hd, f32, in->v);
    ts_tensor_create(&t[O], context, &contiguous, B, hq, sq, hd, f32, NULL);
    ts_tensor_create(&t[L], context, &contiguous, B, hq, sq, 1, f32, NULL);
    ts_tensor_create(&t[DO], context, &contiguous, B, hq, sq, hd, f32, in->dout);
    ts_tensor_create(&t[DQ], context, &contiguous, B, hq, sq, hd, f32, NULL);
    ts_tensor_create(&t[DK], context, &contiguous, B, hkv, sk, hd, f32, NULL);
    ts_tensor_create(&t[DV], context, &contiguous, B, hkv, sk, hd, f32, NULL);
    ts_tensor_create(&t[BIAS], context, &contiguous, 1, 1, sq, sk, f32, bias_values);
    ts_tensor_create(&t[DBIAS], context, &contiguous, 1, 1, sq, sk, f32, NULL);
    flashcl_attention_extras ex = no_extras();
    ex.bias = t[BIAS].view;
    ex.bias_batch = ex.bias_heads = 1;
    ex.dbias = t[DBIAS].view;
    cl_event forward_done = NULL, backward_done = NULL;
    ck_assert_msg(flashcl_forward_ex(ctx, d, &ex, &t[Q].view, &t[K].view, &t[V].view, &t[O].view, &t[L].view, 0, NULL,
                                     &forward_done) == FLASHCL_SUCCESS,
                  "%s", flashcl_last_error(ctx));
    ck_assert_msg(flashcl_backward_ex(ctx, d, &ex, &t[Q].view, &t[K].view, &t[V].view, &t[O].view, &t[L].view,
                                      &t[DO].view, &t[DQ].view, &t[DK].view, &t[DV].view, 1, &forward_done,
                                      &backward_done) == FLASHCL_SUCCESS,
                  "%s", flashcl_last_error(ctx));
    ck_assert_int_eq(clWaitForEvents(1, &backward_done), CL_SUCCESS);
    clReleaseEvent(forward_done);
    clReleaseEvent(backward_done);
    ts_tensor_read_output(flashcl_context_queue(ctx), &t[DBIAS], "dBias", dbias);
    for (int i = 0; i < N; ++i) ts_tensor_free(&t[i]);
}

/* The same call on an in-order and an out-of-order queue (where the device offers one) gives the same dBias,
 * bit for bit. */
START_TEST(out_of_order_queue) {
    const fh_case c = fh_case_make("37x53 d32 gqa 4/2 bias (1, 1), out-of-order queue", 2, 4, 2, 37, 53, 32, 0);
    fh_inputs in;
    fh_inputs_make(&c, 70, &in);
    float *bias = random_bias(&c, 1, 1, 900, -2.0f, 2.0f, FLASHCL_DTYPE_F32);
    const size_t n = plane(&c);
    float *in_order = malloc(n * sizeof *in_order), *out_of_order = malloc(n * sizeof *out_of_order);
    ck_assert(in_order && out_of_order);
    flashcl_context *ctx = fh_portable_context();
    chained_run(ctx, &c, &in, bias, in_order);
    cl_command_queue_properties props = 0;
    ck_assert_int_eq(clGetDeviceInfo(flashcl_context_device(ctx), CL_DEVICE_QUEUE_PROPERTIES, sizeof props, &props,
                                     NULL),
                     CL_SUCCESS);
    if (props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE) {
        cl_int err;
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
        cl_command_queue queue = clCreateCommandQueue(flashcl_context_cl_context(ctx), flashcl_context_device(ctx),
                                                      CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, &err);
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
        ck_assert_int_eq(err, CL_SUCCESS);
        flashcl_context *ooo = NULL;
        ck_assert_int_eq(flashcl_context_create_from_queue(&ooo, queue, NULL), FLASHCL_SUCCESS);
        clReleaseCommandQueue(queue);
        ck_assert_int_eq(flashcl_context_set_tensor_cores(ooo, FLASHCL_TENSOR_CORES_OFF), FLASHCL_SUCCESS);
        chained_run(ooo, &c, &in, bias, out_of_order);
        ck_assert_msg(memcmp(in_order, out_of_order, n * sizeof *in_order) == 0,
                      "%s: dBias differs between the in-order and the out-of-order queue", c.name);
        flashcl_context_free(ooo);
    }
    flashcl_context_free(ctx);
    free(in_order), free(out_of_order), free(bias);
    fh_inputs_free(&in);
}
END_TEST

/* ---- what the dispatcher builds ----------------------------------------------------------- */

/* A call without a bias builds what it did before (no extras, and an older caller's version-2 extras whose bytes
 * past its size are garbage), on the tensor-core kernels and the portable ones; a bias adds its defines and the
 * tensor-core forward and backward take it, and so do both decode kernels; a broadcast dBias counts its scratch.
 * Nothing here runs a kernel. */
START_TEST(dispatch_options) {
    flashcl_context *ctx = ts_context();
    ck_assert_int_eq(flashcl_context_set_tensor_cores(ctx, FLASHCL_TENSOR_CORES_EMULATE), FLASHCL_SUCCESS);
    flashcl_attention_desc d;
    flashcl_attention_desc_init(&d, 2, 4, 64, 64, 64);
    d.dtype = FLASHCL_DTYPE_F16;
    cl_mem buffer = ts_buffer(flashcl_context_cl_context(ctx), 4 * 64 * 64 * sizeof(float), NULL);
    flashcl_attention_extras biased = no_extras();
    biased.bias = (flashcl_tensor){buffer, 0, 0, 64 * 64, 64};
    biased.bias_batch = 1;
    biased.bias_heads = 4;
    for (int pass = FLASHCL_PASS_FORWARD; pass <= FLASHCL_PASS_BACKWARD; ++pass) {
        const flashcl_call_stats dense = fh_explain(ctx, (flashcl_pass)pass, &d, NULL);
        ck_assert_int_eq(dense.kernel, FLASHCL_KERNEL_TENSOR_CORE_EMULATED);
        flashcl_attention_extras old = biased;
        old.struct_size = offsetof(flashcl_attention_extras, bias);
        old.bias_batch = 77; /* not the older caller's: never looked at */
        ck_assert_str_eq(fh_explain(ctx, (flashcl_pass)pass, &d, &old).build_options, dense.build_options);
        ck_assert_int_eq(flashcl_context_set_tensor_cores(ctx, FLASHCL_TENSOR_CORES_OFF), FLASHCL_SUCCESS);
        const flashcl_call_stats portable = fh_explain(ctx, (flashcl_pass)pass, &d, NULL);
        ck_assert_int_eq(flashcl_context_set_tensor_cores(ctx, FLASHCL_TENSOR_CORES_EMULATE), FLASHCL_SUCCESS);
        const flashcl_call_stats with_bias = fh_explain(ctx, (flashcl_pass)pass, &d, &biased);
        ck_assert_int_eq(with_bias.kernel, FLASHCL_KERNEL_TENSOR_CORE_EMULATED);
        char expected[FLASHCL_BUILD_OPTIONS_CAPACITY + 64];
        /* Both passes stage the bias tile in local memory (its rows start 16-byte aligned), which may take
         * narrower blocks where local memory is small (rusticl's 32 KiB): the defines are the dense call's plus
         * the bias's. */
        const char *staged = " -DFLASHCL_BIAS=1 -DFLASHCL_BIAS_F32=1 -DFLASHCL_BIAS_STAGED=1";
        const size_t n = strlen(with_bias.build_options), m = strlen(staged);
        ck_assert_msg(n > m && strcmp(with_bias.build_options + n - m, staged) == 0, "%s", with_bias.build_options);
        /* An offset of one float: read pair by pair from global memory, not staged: the dense tiles. */
        flashcl_attention_extras shifted = biased;
        shifted.bias.offset = 1;
        snprintf(expected, sizeof expected, "%s -DFLASHCL_BIAS=1 -DFLASHCL_BIAS_F32=1", dense.build_options);
        const flashcl_call_stats unstaged = fh_explain(ctx, (flashcl_pass)pass, &d, &shifted);
        ck_assert_str_eq(unstaged.build_options, expected);
        /* The IO model counts the bias (same tiles as dense): B x Hq x Sq x Sk floats per kernel that reads it,
         * one forward, two backward. */
        const double plane_bytes = 2.0 * 4 * 64 * 64 * sizeof(float);
        ck_assert_double_eq_tol(unstaged.predicted_global_bytes - dense.predicted_global_bytes,
                                (pass == FLASHCL_PASS_FORWARD ? 1.0 : 2.0) * plane_bytes, 0.5);
        ck_assert(strstr(dense.build_options, "BIAS") == NULL && strstr(portable.build_options, "BIAS") == NULL);
        if (pass == FLASHCL_PASS_BACKWARD) {
            /* A (1, Hq) bias's dBias: a (B, Hq, Sq, Sk) float scratch beyond what the call needs without it. */
            flashcl_attention_extras with_dbias = biased;
            with_dbias.dbias = (flashcl_tensor){buffer, 0, 0, 64 * 64, 64};
            const flashcl_call_stats s = fh_explain(ctx, FLASHCL_PASS_BACKWARD, &d, &with_dbias);
            ck_assert_uint_eq(s.extra_device_bytes, with_bias.extra_device_bytes + 2 * 4 * 64 * 64 * sizeof(float));
            /* and its traffic: the scratch written and read back, then the (1, Hq) dBias written. */
            ck_assert_double_eq_tol(s.predicted_global_bytes - with_bias.predicted_global_bytes,
                                    2.0 * plane_bytes + 4.0 * 64 * 64 * sizeof(float), 0.5);
        }
    }
    /* One query row takes a decode kernel with a bias too (here the matrix-unit one; with tensor cores off the
     * portable one): the same options as without it, the bias's defines added. */
    flashcl_attention_desc one = d;
    one.seqlen_q = 1;
    biased.bias.stride_seq = 0;
    for (int mma = 1; mma >= 0; --mma) {
        ck_assert_int_eq(flashcl_context_set_tensor_cores(ctx, mma ? FLASHCL_TENSOR_CORES_EMULATE
                                                                   : FLASHCL_TENSOR_CORES_OFF),
                         FLASHCL_SUCCESS);
        const flashcl_call_stats dense_decode = fh_explain(ctx, FLASHCL_PASS_FORWARD, &one, NULL);
        const flashcl_call_stats biased_decode = fh_explain(ctx, FLASHCL_PASS_FORWARD, &one, &biased);
        ck_assert_int_eq(dense_decode.kernel, FLASHCL_KERNEL_DECODE);
        ck_assert_int_eq(biased_decode.kernel, FLASHCL_KERNEL_DECODE);
        ck_assert_str_eq(biased_decode.program, mma ? "decode_mma.cl" : "decode.cl");
        ck_assert_str_eq(dense_decode.program, biased_decode.program);
        ck_assert(strstr(dense_decode.build_options, "BIAS") == NULL);
        ck_assert_ptr_nonnull(strstr(biased_decode.build_options, "-DFLASHCL_BIAS=1 -DFLASHCL_BIAS_F32=1"));
    }
    clReleaseMemObject(buffer);
    flashcl_context_free(ctx);
}
END_TEST

/* ---- bad input ------------------------------------------------------------------------- */

/* A small problem (B 2, Hq 4, 8 x 8, d 16) on poisoned outputs: every refused call leaves them as they were. */
typedef struct bad_call {
    flashcl_context *ctx;
    cl_context context;
    flashcl_attention_desc d;
    ts_tensor q, k, v, o, lse, dq, dk, dv, bias, dbias;
} bad_call;

static void bad_call_make(bad_call *x) {
    x->ctx = fh_portable_context();
    x->context = flashcl_context_cl_context(x->ctx);
    flashcl_attention_desc_init(&x->d, 2, 4, 8, 8, 16);
    const flashcl_dtype f32 = FLASHCL_DTYPE_F32;
    float ones[2 * 4 * 8 * 16];
    for (size_t i = 0; i < sizeof ones / sizeof ones[0]; ++i) ones[i] = 1.0f;
    ts_tensor_create(&x->q, x->context, &contiguous, 2, 4, 8, 16, f32, ones);
    ts_tensor_create(&x->k, x->context, &contiguous, 2, 4, 8, 16, f32, ones);
    ts_tensor_create(&x->v, x->context, &contiguous, 2, 4, 8, 16, f32, ones);
    ts_tensor_create(&x->o, x->context, &contiguous, 2, 4, 8, 16, f32, NULL);
    ts_tensor_create(&x->lse, x->context, &contiguous, 2, 4, 8, 1, f32, NULL);
    ts_tensor_create(&x->dq, x->context, &contiguous, 2, 4, 8, 16, f32, NULL);
    ts_tensor_create(&x->dk, x->context, &contiguous, 2, 4, 8, 16, f32, NULL);
    ts_tensor_create(&x->dv, x->context, &contiguous, 2, 4, 8, 16, f32, NULL);
    ts_tensor_create(&x->bias, x->context, &contiguous, 2, 4, 8, 8, f32, ones);
    ts_tensor_create(&x->dbias, x->context, &contiguous, 2, 4, 8, 8, f32, NULL);
}

/* A full (B, Hq) float bias with its dBias: the extras every bad case starts from. */
static flashcl_attention_extras good_extras(const bad_call *x) {
    flashcl_attention_extras ex = no_extras();
    ex.bias = x->bias.view;
    ex.bias_batch = 2;
    ex.bias_heads = 4;
    ex.dbias = x->dbias.view;
    return ex;
}

static void expect_status(bad_call *x, const char *pass, flashcl_status got, flashcl_status status,
                          const char *needle) {
    ck_assert_msg(got == status, "%s: %s, expected %s (%s)", pass, flashcl_status_string(got),
                  flashcl_status_string(status), flashcl_last_error(x->ctx));
    ck_assert_msg(strstr(flashcl_last_error(x->ctx), needle), "%s's message \"%s\" lacks \"%s\"", pass,
                  flashcl_last_error(x->ctx), needle);
}

/* Which calls a bad case goes to. */
enum { BOTH, BACKWARD_ONLY, FORWARD_ONLY };

/* The forward and the backward (or the one `which` names) with ex refuse with status and a message holding needle;
 * nothing is written. */
static void expect_refused(bad_call *x, const flashcl_attention_extras *ex, int which, flashcl_status status,
                           const char *needle) {
    cl_command_queue queue = flashcl_context_queue(x->ctx);
    if (which != BACKWARD_ONLY)
        expect_status(x, "forward",
                      flashcl_forward_ex(x->ctx, &x->d, ex, &x->q.view, &x->k.view, &x->v.view, &x->o.view,
                                         &x->lse.view, 0, NULL, NULL),
                      status, needle);
    if (which != FORWARD_ONLY)
        expect_status(x, "backward",
                  flashcl_backward_ex(x->ctx, &x->d, ex, &x->q.view, &x->k.view, &x->v.view, &x->q.view, &x->lse.view,
                                      &x->q.view, &x->dq.view, &x->dk.view, &x->dv.view, 0, NULL, NULL),
                  status, needle);
    ts_tensor *outputs[] = {&x->o, &x->lse, &x->dq, &x->dk, &x->dv, &x->dbias};
    const char *names[] = {"o", "lse", "dq", "dk", "dv", "dbias"};
    for (int i = 0; i < 6; ++i) ts_assert_untouched(queue, outputs[i], names[i]);
}

START_TEST(bad_input) {
    bad_call x;
    bad_call_make(&x);
    const flashcl_status invalid = FLASHCL_ERROR_INVALID_ARGUMENT, small = FLASHCL_ERROR_BUFFER_TOO_SMALL;
    flashcl_attention_extras ex = good_extras(&x);
    ex.bias_batch = 3; /* neither 1 nor the batch */
    expect_refused(&x, &ex, BOTH, invalid, "bias_batch 3");
    ex = good_extras(&x);
    ex.bias_heads = 2; /* neither 1 nor heads_q */
    expect_refused(&x, &ex, BOTH, invalid, "bias_heads 2");
    ex = good_extras(&x);
    ex.bias_dtype = FLASHCL_DTYPE_BF16; /* neither float32 nor the storage (float32 here) */
    expect_refused(&x, &ex, BOTH, invalid, "bias_dtype");
    ex = good_extras(&x);
    ex.bias.offset = TS_CANARY_ELEMS + 1; /* the view reaches one element past the buffer (and its canary) */
    expect_refused(&x, &ex, BOTH, small, "bias");
    ex = good_extras(&x);
    ex.bias.stride_seq = 20; /* rows of 20: strides past the buffer */
    expect_refused(&x, &ex, BOTH, small, "bias");
    ex = good_extras(&x);
    ex.dbias.offset = TS_CANARY_ELEMS + 1; /* dBias too small */
    expect_refused(&x, &ex, BACKWARD_ONLY, small, "dbias");
    ex = good_extras(&x);
    ex.dbias.stride_head = 0; /* two heads' dBias at one address */
    expect_refused(&x, &ex, BACKWARD_ONLY, FLASHCL_ERROR_ALIASING, "dbias");
    ex = good_extras(&x);
    ex.dbias = x.dq.view; /* dBias over dQ */
    ex.dbias.stride_seq = 8;
    ex.dbias.stride_head = 64;
    ex.dbias.stride_batch = 256;
    expect_refused(&x, &ex, BACKWARD_ONLY, FLASHCL_ERROR_ALIASING, "dbias");
    ex = good_extras(&x);
    ex.dbias = ex.bias; /* dBias over the bias it is the gradient of */
    expect_refused(&x, &ex, BACKWARD_ONLY, FLASHCL_ERROR_ALIASING, "dbias");
    ex = good_extras(&x);
    ex.bias = x.o.view; /* the bias inside the forward's output */
    ex.bias.stride_seq = 8;
    ex.bias.stride_head = 64;
    ex.bias.stride_batch = 256;
    expect_refused(&x, &ex, FORWARD_ONLY, FLASHCL_ERROR_ALIASING, "bias");
    ex = no_extras();
    ex.dbias = x.dbias.view; /* dBias without a bias */
    expect_refused(&x, &ex, BOTH, invalid, "without a bias");
    ex = no_extras();
    ex.bias_batch = 2; /* bias fields without the buffer */
    expect_refused(&x, &ex, BOTH, invalid, "bias.buffer is NULL");

    /* A buffer of another OpenCL context. */
    flashcl_context *other = ts_context_own();
    ts_tensor foreign;
    ts_tensor_create(&foreign, flashcl_context_cl_context(other), &contiguous, 2, 4, 8, 8, FLASHCL_DTYPE_F32, NULL);
    ex = good_extras(&x);
    ex.bias = foreign.view;
    expect_refused(&x, &ex, BOTH, FLASHCL_ERROR_WRONG_CONTEXT, "bias");
    ex = good_extras(&x);
    ex.dbias = foreign.view;
    expect_refused(&x, &ex, BACKWARD_ONLY, FLASHCL_ERROR_WRONG_CONTEXT, "dbias");
    ts_tensor_free(&foreign);
    flashcl_context_free(other);

    /* What the bias does not combine with yet: a packed batch, the standard implementation. (The KV-cache call takes
     * it over the cache's key positions: tests/forward/test_kv_cache.c, its bad input included.) */
    static const int32_t cu[3] = {0, 4, 8}; /* total 8 rows: the (B, H, 8, D) views hold them packed */
    cl_mem offsets = ts_buffer(x.context, sizeof cu, cu);
    ex = good_extras(&x);
    ex.cu_seqlens_q = ex.cu_seqlens_k = offsets;
    expect_refused(&x, &ex, BOTH, FLASHCL_ERROR_UNSUPPORTED, "packed batch");
    ex = good_extras(&x);
    if (flashcl_context_set_impl(x.ctx, FLASHCL_IMPL_STANDARD) == FLASHCL_SUCCESS)
        expect_refused(&x, &ex, BOTH, FLASHCL_ERROR_UNSUPPORTED, "attention bias");
    clReleaseMemObject(offsets);
    ts_tensor *all[] = {&x.q, &x.k, &x.v, &x.o, &x.lse, &x.dq, &x.dk, &x.dv, &x.bias, &x.dbias};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) ts_tensor_free(all[i]);
    flashcl_context_free(x.ctx);
}
END_TEST

static Suite *bias_suite(void) {
    Suite *s = suite_create("bias");
    TCase *tc = tcase_create("bias");
    tcase_set_timeout(tc, TS_CASE_TIMEOUT);
    tcase_add_test(tc, bad_input);
    tcase_add_test(tc, dispatch_options);
    tcase_add_test(tc, broadcast_shapes);
    tcase_add_test(tc, zero_stride_broadcast);
    tcase_add_test(tc, infinite_and_large);
    tcase_add_test(tc, alibi_equals_bias);
    tcase_add_test(tc, softcap_alibi_causal_gqa);
    tcase_add_test(tc, window_dropout);
    tcase_add_test(tc, block_mask);
    tcase_add_test(tc, half_storage);
    tcase_add_test(tc, tensor_core_forward);
    tcase_add_test(tc, hidden_nan_keys);
    tcase_add_test(tc, decode_portable);
    tcase_add_test(tc, decode_matrix_units);
    tcase_add_test(tc, tensor_core_backward);
    tcase_add_loop_test(tc, wgmma_backward, 0, 2);
    tcase_add_test(tc, plans_agree);
    tcase_add_test(tc, out_of_order_queue);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    ts_sweep_announce("bias");
    SRunner *runner = srunner_create(bias_suite());
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
