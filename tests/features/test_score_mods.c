/* test_score_mods.c: logit soft-capping and ALiBi (flashcl_attention_extras' score modifiers) against the double
 * reference: soft-capping at small caps with large scores, ALiBi from host slopes, a device buffer (shared and per
 * batch, at an offset) and llama.cpp's max_bias, both together with causal and GQA, forward and backward; with a
 * window; with a packed batch, a block mask and dropout at once; the decode kernel (1 and 4 query rows) and a KV
 * cache; what the dispatcher builds (a dense call exactly as before, the modifiers as two defines); and bad input:
 * a clear error and nothing written.
 *
 * Every distinct kernel build costs seconds on POCL, so the cases share builds on purpose: head dims 64 and 40,
 * float data except the decode and KV-cache cases (half), split-KV on the cases that need a combine anyway,
 * thirteen programs per device in all (three of them the small delta, combine and block-mask kernels). */
#include <check.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "feature_harness.h"

/* ---- helpers ------------------------------------------------------------ */

/* llama.cpp's ALiBi slopes (ggml_compute_forward_soft_max's m0, m1), written out here independently of the
 * library's copy of the formula. */
static void llama_slopes(int heads, float max_bias, float *out) {
    const int n_floor = 1 << (int)floor(log2((double)heads));
    const double m0 = exp2(-(double)max_bias / n_floor), m1 = exp2(-(double)max_bias / 2.0 / n_floor);
    for (int h = 0; h < heads; ++h) out[h] = (float)(h < n_floor ? pow(m0, h + 1) : pow(m1, 2 * (h - n_floor) + 1));
}

/* Q and K times a (large scores: soft-capping then matters). */
static void amplify(fh_inputs *in, float a) {
    for (size_t i = 0; i < in->q_count; ++i) in->q[i] *= a;
    for (size_t i = 0; i < in->kv_count; ++i) in->k[i] *= a;
}

/* Runs c with extras and judges it against the reference with the same modifiers (mask: the case's causal flag
 * and window, from the definitions). */
static void run_and_check(flashcl_context *ctx, const fh_case *c, const fh_inputs *in, int backward,
                          const flashcl_attention_extras *extras, const flashcl_reference_extras *mods,
                          fh_result *out) {
    fh_run_ex(ctx, c, in, backward, extras, out);
    uint8_t *mask = fh_dense_mask(c);
    fh_check_ex(c, in, out, backward, mask, NULL, mods);
    free(mask);
}

static void expect_same_bits(const char *name, const char *what, const float *a, const float *b, size_t n) {
    ck_assert_msg(memcmp(a, b, n * sizeof *a) == 0, "%s: %s differs between two sources of the same slopes", name,
                  what);
}

/* ---- forward and backward ------------------------------------------------ */

/* Soft-capping and ALiBi together with causal and GQA, forward and backward; the same slopes from the host array
 * and from a device buffer give the same bits. */
START_TEST(softcap_alibi_causal_gqa) {
    const fh_case c = fh_case_make("70x90 d64 causal gqa 4/2 softcap 2 + alibi", 2, 4, 2, 70, 90, 64, 1);
    static const float slopes[4] = {0.5f, 0.25f, 0.125f, 0.0625f};
    fh_inputs in;
    fh_inputs_make(&c, 21, &in);
    amplify(&in, 3.0f); /* scaled scores of a few units: cap 2 bends most of them */
    flashcl_context *ctx = fh_portable_context();
    flashcl_attention_extras ex;
    flashcl_attention_extras_init(&ex);
    ex.softcap = 2.0f;
    ex.alibi_slopes_host = slopes;
    const flashcl_reference_extras mods = {.softcap = 2.0, .alibi_slopes = slopes};
    fh_result host, device;
    run_and_check(ctx, &c, &in, 1, &ex, &mods, &host);
    ck_assert_int_eq(ts_last_stats(ctx).kernel, FLASHCL_KERNEL_PORTABLE);
    cl_mem buffer = ts_buffer(flashcl_context_cl_context(ctx), sizeof slopes, slopes);
    ex.alibi_slopes_host = NULL;
    ex.alibi_slopes = buffer;
    fh_run_ex(ctx, &c, &in, 1, &ex, &device);
    expect_same_bits(c.name, "O", host.o, device.o, in.q_count);
    expect_same_bits(c.name, "LSE", host.lse, device.lse, in.lse_count);
    expect_same_bits(c.name, "dQ", host.dq, device.dq, in.q_count);
    expect_same_bits(c.name, "dK", host.dk, device.dk, in.kv_count);
    clReleaseMemObject(buffer);
    fh_result_free(&host);
    fh_result_free(&device);
    fh_inputs_free(&in);
    flashcl_context_free(ctx);
}
END_TEST

/* Soft-capping alone at caps 1 and 5 on scores up to ~50: the cap decides the result. The tiled forward's
 * split-KV (forced: 3 key chunks and the combine) takes the modifiers as they are. */
START_TEST(softcap_small_caps) {
    const fh_case c = fh_case_make("77x300 d40 softcap, split-KV", 1, 2, 2, 77, 300, 40, 0);
    fh_inputs in;
    fh_inputs_make(&c, 22, &in);
    amplify(&in, 4.0f);
    flashcl_context *ctx = fh_portable_context();
    ck_assert_int_eq(flashcl_context_set_kv_splits(ctx, 3), FLASHCL_SUCCESS);
    static const float caps[2] = {1.0f, 5.0f};
    float *lse[2];
    for (int i = 0; i < 2; ++i) {
        flashcl_attention_extras ex;
        flashcl_attention_extras_init(&ex);
        ex.softcap = caps[i];
        const flashcl_reference_extras mods = {.softcap = caps[i]};
        fh_result r;
        run_and_check(ctx, &c, &in, 0, &ex, &mods, &r);
        ck_assert_int_gt(ts_last_stats(ctx).kv_splits, 1); /* 3, or one per key block if the tiles make fewer */
        lse[i] = r.lse;
        r.lse = NULL;
        fh_result_free(&r);
    }
    /* A capped row's scores lie in [-cap, cap]: LSE <= cap + log(Sk). */
    for (size_t i = 0; i < in.lse_count; ++i) {
        ck_assert_msg(lse[0][i] <= 1.0f + logf(300.0f) + 1e-4f, "LSE %g past cap 1's bound", (double)lse[0][i]);
        ck_assert_msg(lse[1][i] <= 5.0f + logf(300.0f) + 1e-4f, "LSE %g past cap 5's bound", (double)lse[1][i]);
    }
    free(lse[0]), free(lse[1]);
    fh_inputs_free(&in);
    flashcl_context_free(ctx);
}
END_TEST

/* ALiBi alone with a two-sided window: slopes from max_bias over 6 heads (both of llama.cpp's branches), then per
 * batch from a device buffer at an offset. */
START_TEST(alibi_window_sources) {
    if (!ts_split_takes(0, 0, 2)) return; /* a feature combination of its own: on rusticl (ts_split_takes) */
    fh_case c = fh_case_make("50x120 d40 gqa 6/3 window 30,10 alibi", 2, 6, 3, 50, 120, 40, 0);
    c.desc.sliding_window = 1;
    c.desc.window_left = 30;
    c.desc.window_right = 10;
    fh_inputs in;
    fh_inputs_make(&c, 23, &in);
    amplify(&in, 2.0f);
    flashcl_context *ctx = fh_portable_context();
    float from_bias[6];
    llama_slopes(6, 8.0f, from_bias);
    flashcl_attention_extras ex;
    flashcl_attention_extras_init(&ex);
    ex.alibi_max_bias = 8.0f;
    const flashcl_reference_extras bias_mods = {.alibi_slopes = from_bias};
    fh_result r;
    run_and_check(ctx, &c, &in, 0, &ex, &bias_mods, &r);
    fh_result_free(&r);

    /* (batch, heads) slopes 3 floats into the buffer; the floats around them are NaN: read, they would show. */
    float per_batch[12], stored[3 + 12 + 5];
    ts_rng rng = {77};
    ts_fill_uniform(&rng, per_batch, 12, 0.02f, 0.8f);
    for (int i = 0; i < 20; ++i) stored[i] = NAN;
    memcpy(stored + 3, per_batch, sizeof per_batch);
    cl_mem buffer = ts_buffer(flashcl_context_cl_context(ctx), sizeof stored, stored);
    flashcl_attention_extras_init(&ex);
    ex.alibi_slopes = buffer;
    ex.alibi_slopes_offset = 3;
    ex.alibi_slopes_per_batch = 1;
    const flashcl_reference_extras batch_mods = {.alibi_slopes = per_batch, .alibi_per_batch = 1};
    run_and_check(ctx, &c, &in, 0, &ex, &batch_mods, &r);
    fh_result_free(&r);
    clReleaseMemObject(buffer);
    fh_inputs_free(&in);
    flashcl_context_free(ctx);
}
END_TEST

/* ---- a packed batch with a block mask and dropout ------------------------------ */

static size_t blocks(int len, int block_size) { return ((size_t)len + (size_t)block_size - 1) / (size_t)block_size; }

/* Rows start .. start+len-1 of a packed (total, heads, dim) array as (heads, len, dim). */
static float *unpack(const float *x, int start, int len, int heads, int dim) {
    float *out = malloc(((size_t)len * heads * dim + 1) * sizeof *out);
    ck_assert_ptr_nonnull(out);
    for (int h = 0; h < heads; ++h)
        for (int i = 0; i < len; ++i)
            memcpy(out + ((size_t)h * len + i) * dim, x + ((size_t)(start + i) * heads + h) * dim,
                   (size_t)dim * sizeof *out);
    return out;
}

/* Everything at once on the portable kernels: three packed sequences (one with more queries than keys under
 * causal: rows with no key), a shared block mask, dropout, soft-capping and per-sequence ALiBi slopes from a
 * device buffer; each sequence judged against the reference on its own lengths. */
START_TEST(varlen_block_mask_dropout) {
    if (!ts_split_takes(1, 0, 2)) return; /* a feature combination of its own: on POCL (ts_split_takes) */
    const fh_varlen_case v = {"varlen 3 seqs d40 gqa causal + block mask + dropout + softcap + alibi",
                              3, 4, 2, 40, 1, {37, 5, 60}, {50, 64, 45}, 0, -1, -1, 0.15f};
    const int H = v.heads_q, Hk = v.heads_kv, D = v.head_dim, bs = 16;
    int cu_q[4], cu_k[4];
    const int total_q = fh_cu_offsets(v.len_q, 3, cu_q), total_k = fh_cu_offsets(v.len_k, 3, cu_k);
    const int max_q = fh_max_len(v.len_q, 3), max_k = fh_max_len(v.len_k, 3);
    const size_t nq = (size_t)total_q * H * D, nk = (size_t)total_k * Hk * D, nl = (size_t)total_q * H;
    ts_rng rng = {31};
    float *q = ts_random_floats(&rng, nq, -3.0f, 3.0f), *k = ts_random_floats(&rng, nk, -3.0f, 3.0f);
    float *val = ts_random_floats(&rng, nk, -1.0f, 1.0f), *dout = ts_random_floats(&rng, nq, -1.0f, 1.0f);
    float slopes[12], stored[5 + 12];
    ts_fill_uniform(&rng, slopes, 12, 0.05f, 0.6f);
    for (int i = 0; i < 5; ++i) stored[i] = NAN;
    memcpy(stored + 5, slopes, sizeof slopes);
    const size_t rows = blocks(max_q, bs), cols = blocks(max_k, bs);
    uint8_t *mask = malloc(rows * cols);
    ck_assert_ptr_nonnull(mask);
    for (size_t x = 0; x < rows * cols; ++x) mask[x] = ts_uniform(&rng, 0.0, 1.0) < 0.7;

    flashcl_context *ctx = fh_portable_context();
    cl_context context = flashcl_context_cl_context(ctx);
    cl_command_queue queue = flashcl_context_queue(ctx);
    const size_t f = sizeof(float);
    enum { Q, K, V, DO, O, L, DQ, DK, DV, CQ, CK, MASK, SLOPES, N };
    cl_mem m[N];
    m[Q] = ts_buffer(context, nq * f, q);
    m[K] = ts_buffer(context, nk * f, k);
    m[V] = ts_buffer(context, nk * f, val);
    m[DO] = ts_buffer(context, nq * f, dout);
    m[O] = ts_buffer(context, (nq + TS_CANARY_ELEMS) * f, NULL);
    m[L] = ts_buffer(context, (nl + TS_CANARY_ELEMS) * f, NULL);
    m[DQ] = ts_buffer(context, (nq + TS_CANARY_ELEMS) * f, NULL);
    m[DK] = ts_buffer(context, (nk + TS_CANARY_ELEMS) * f, NULL);
    m[DV] = ts_buffer(context, (nk + TS_CANARY_ELEMS) * f, NULL);
    m[CQ] = ts_buffer(context, sizeof cu_q, cu_q);
    m[CK] = ts_buffer(context, sizeof cu_k, cu_k);
    m[MASK] = ts_buffer(context, rows * cols, mask);
    m[SLOPES] = ts_buffer(context, sizeof stored, stored);
    const size_t hd = (size_t)H * D, hkd = (size_t)Hk * D;
    const flashcl_tensor tq = {m[Q], 0, 0, (size_t)D, hd}, tdo = {m[DO], 0, 0, (size_t)D, hd},
                         to = {m[O], 0, 0, (size_t)D, hd}, tdq = {m[DQ], 0, 0, (size_t)D, hd};
    const flashcl_tensor tk = {m[K], 0, 0, (size_t)D, hkd}, tv = {m[V], 0, 0, (size_t)D, hkd},
                         tdk = {m[DK], 0, 0, (size_t)D, hkd}, tdv = {m[DV], 0, 0, (size_t)D, hkd};
    const flashcl_tensor tl = {m[L], 0, 0, (size_t)total_q, 1};
    flashcl_attention_extras ex;
    flashcl_attention_extras_init(&ex);
    ex.cu_seqlens_q = m[CQ];
    ex.cu_seqlens_k = m[CK];
    ex.block_mask = m[MASK];
    ex.block_size = bs;
    ex.softcap = 3.0f;
    ex.alibi_slopes = m[SLOPES];
    ex.alibi_slopes_offset = 5;
    ex.alibi_slopes_per_batch = 1;
    const flashcl_attention_desc d = fh_varlen_desc(&v, 3, max_q, max_k, 99);
    ck_assert_msg(flashcl_forward_ex(ctx, &d, &ex, &tq, &tk, &tv, &to, &tl, 0, NULL, NULL) == FLASHCL_SUCCESS,
                  "forward: %s", flashcl_last_error(ctx));
    ck_assert_msg(flashcl_backward_ex(ctx, &d, &ex, &tq, &tk, &tv, &to, &tl, &tdo, &tdq, &tdk, &tdv, 0, NULL, NULL) ==
                      FLASHCL_SUCCESS,
                  "backward: %s", flashcl_last_error(ctx));
    float *o = ts_read_floats(queue, m[O], nq + TS_CANARY_ELEMS), *lse = ts_read_floats(queue, m[L], nl + TS_CANARY_ELEMS);
    float *dq = ts_read_floats(queue, m[DQ], nq + TS_CANARY_ELEMS), *dk = ts_read_floats(queue, m[DK], nk + TS_CANARY_ELEMS);
    float *dv = ts_read_floats(queue, m[DV], nk + TS_CANARY_ELEMS);
    ts_assert_canary(v.name, "O", o, nq);
    ts_assert_canary(v.name, "LSE", lse, nl);
    ts_assert_canary(v.name, "dQ", dq, nq);
    ts_assert_canary(v.name, "dK", dk, nk);
    ts_assert_canary(v.name, "dV", dv, nk);

    for (int b = 0; b < 3; ++b) {
        const int lq = v.len_q[b], lk = v.len_k[b];
        /* Sequence b alone: its lengths, the mask's top-left part, the packed call's dropout counters. */
        fh_case c;
        memset(&c, 0, sizeof c);
        c.name = v.name;
        c.desc = fh_varlen_desc(&v, 1, lq, lk, 99);
        c.desc.dropout_offset = (uint64_t)b * (uint64_t)H;
        const size_t r = blocks(lq, bs), cl = blocks(lk, bs);
        uint8_t *cropped = malloc(r * cl);
        for (size_t i = 0; i < r; ++i) memcpy(cropped + i * cl, mask + i * cols, cl);
        c.block_mask = cropped;
        c.block_size = bs;
        c.mask_bytes = r * cl;
        fh_inputs in = {unpack(q, cu_q[b], lq, H, D), unpack(k, cu_k[b], lk, Hk, D), unpack(val, cu_k[b], lk, Hk, D),
                        unpack(dout, cu_q[b], lq, H, D), (size_t)lq * H * D, (size_t)lk * Hk * D, (size_t)lq * H};
        fh_result got = {unpack(o, cu_q[b], lq, H, D), malloc((size_t)lq * H * f), unpack(dq, cu_q[b], lq, H, D),
                         unpack(dk, cu_k[b], lk, Hk, D), unpack(dv, cu_k[b], lk, Hk, D)};
        for (int h = 0; h < H; ++h)
            for (int i = 0; i < lq; ++i) got.lse[(size_t)h * lq + i] = lse[(size_t)h * total_q + cu_q[b] + i];
        const flashcl_reference_extras mods = {.softcap = 3.0, .alibi_slopes = slopes + b * H};
        uint8_t *dense = fh_dense_mask(&c);
        fh_check_ex(&c, &in, &got, 1, dense, NULL, &mods);
        free(dense), free(cropped);
        fh_result_free(&got);
        fh_inputs_free(&in);
    }
    free(o), free(lse), free(dq), free(dk), free(dv);
    for (int i = 0; i < N; ++i) clReleaseMemObject(m[i]);
    free(q), free(k), free(val), free(dout), free(mask);
    flashcl_context_free(ctx);
}
END_TEST

/* ---- decode kernel and KV cache ------------------------------------------------ */

/* 1 and 4 query rows (the latter causal, bottom-right) of 16 query heads over one KV head run the decode kernel
 * (both with 16 packed rows per work-group: one build), half storage, split along the keys in 3 chunks (the
 * unsplit decode kernel: kv_cache_rows). */
START_TEST(decode_rows) {
    if (!ts_split_takes(0, 0, 2)) return; /* a feature combination of its own: on rusticl (ts_split_takes) */
    flashcl_context *ctx = fh_portable_context();
    ck_assert_int_eq(flashcl_context_set_kv_splits(ctx, 3), FLASHCL_SUCCESS);
    float slopes[16];
    llama_slopes(16, 8.0f, slopes);
    for (int sq = 1; sq <= 4; sq += 3) {
        fh_case c = fh_case_make(sq == 1 ? "decode 1x300 d64 16/1 softcap + alibi" : "decode 4x300 d64 16/1 causal",
                              2, 16, 1, sq, 300, 64, sq > 1);
        c.desc.dtype = FLASHCL_DTYPE_F16;
        fh_inputs in;
        fh_inputs_make(&c, 40 + (uint64_t)sq, &in);
        amplify(&in, 3.0f);
        fh_round_inputs(&in, FLASHCL_DTYPE_F16);
        flashcl_attention_extras ex;
        flashcl_attention_extras_init(&ex);
        ex.softcap = 5.0f;
        ex.alibi_max_bias = 8.0f;
        const flashcl_reference_extras mods = {.softcap = 5.0, .alibi_slopes = slopes};
        fh_result r;
        run_and_check(ctx, &c, &in, 0, &ex, &mods, &r);
        const flashcl_call_stats s = ts_last_stats(ctx);
        ck_assert_int_eq(s.kernel, FLASHCL_KERNEL_DECODE);
        ck_assert_int_eq(s.kv_splits, 3);
        ck_assert_ptr_nonnull(strstr(s.build_options, "-DFLASHCL_SOFTCAP=1 -DFLASHCL_ALIBI=1"));
        fh_result_free(&r);
        fh_inputs_free(&in);
    }
    flashcl_context_free(ctx);
}
END_TEST

/* The matrix-unit decode kernel (emulated here) takes them too: 4 causal positions x 4 query heads over one KV
 * head (16 packed rows), half storage at d64, softcap 5 and llama.cpp's slopes, in 3 key chunks. */
START_TEST(decode_matrix_units) {
    flashcl_context *ctx = ts_context();
    ck_assert_int_eq(flashcl_context_set_tensor_cores(ctx, FLASHCL_TENSOR_CORES_EMULATE), FLASHCL_SUCCESS);
    ck_assert_int_eq(flashcl_context_set_kv_splits(ctx, 3), FLASHCL_SUCCESS);
    float slopes[8];
    llama_slopes(8, 8.0f, slopes);
    fh_case c = fh_case_make("decode mma 4x300 d64 8/2 causal softcap 5 + alibi", 1, 8, 2, 4, 300, 64, 1);
    c.desc.dtype = FLASHCL_DTYPE_F16;
    fh_inputs in;
    fh_inputs_make(&c, 47, &in);
    amplify(&in, 3.0f);
    fh_round_inputs(&in, FLASHCL_DTYPE_F16);
    flashcl_attention_extras ex;
    flashcl_attention_extras_init(&ex);
    ex.softcap = 5.0f;
    ex.alibi_max_bias = 8.0f;
    const flashcl_reference_extras mods = {.softcap = 5.0, .alibi_slopes = slopes};
    fh_result r;
    run_and_check(ctx, &c, &in, 0, &ex, &mods, &r);
    const flashcl_call_stats s = ts_last_stats(ctx);
    ck_assert_int_eq(s.kernel, FLASHCL_KERNEL_DECODE);
    ck_assert_str_eq(s.program, "decode_mma.cl");
    ck_assert_int_eq(s.kv_splits, 3);
    ck_assert_ptr_nonnull(strstr(s.build_options, "-DFLASHCL_SOFTCAP=1 -DFLASHCL_ALIBI=1"));
    fh_result_free(&r);
    fh_inputs_free(&in);
    flashcl_context_free(ctx);
}
END_TEST

/* The tensor-core kernels (emulated here; real on NVIDIA) take the modifiers in builds of their own: causal GQA
 * with rows past the diagonal and a partial key block, softcap 5 and llama.cpp's slopes; forward and backward in
 * 3xTF32 f32 (gradients judged in f32), the forward in f16. */
START_TEST(tensor_core_kernels) {
    float slopes[4];
    llama_slopes(4, 8.0f, slopes);
    flashcl_context *ctx = ts_context();
    ck_assert_int_eq(flashcl_context_set_tensor_cores(ctx, FLASHCL_TENSOR_CORES_EMULATE), FLASHCL_SUCCESS);
    ck_assert_int_eq(flashcl_context_set_f32_precision(ctx, FLASHCL_F32_3XTF32), FLASHCL_SUCCESS);
    for (int f32 = 0; f32 <= 1; ++f32) {
        /* Each is a cold build of the emulated kernels (tens of seconds on rusticl), split between the two CPU
         * implementations (ts_split_takes): the f16 forward on rusticl, the 3xTF32 forward and backward on POCL. */
        if (!ts_split_takes(0, f32, 2)) continue;
        fh_case c = fh_case_make(f32 ? "mma f32 3xtf32 45x77 d64 causal gqa 4/2 softcap 5 + alibi"
                                  : "mma f16 45x77 d64 causal gqa 4/2 softcap 5 + alibi",
                              1, 4, 2, 45, 77, 64, 1);
        c.desc.dtype = f32 ? FLASHCL_DTYPE_F32 : FLASHCL_DTYPE_F16;
        fh_inputs in;
        fh_inputs_make(&c, 60 + (uint64_t)f32, &in);
        amplify(&in, 3.0f);
        fh_round_inputs(&in, c.desc.dtype);
        flashcl_attention_extras ex;
        flashcl_attention_extras_init(&ex);
        ex.softcap = 5.0f;
        ex.alibi_max_bias = 8.0f;
        const flashcl_reference_extras mods = {.softcap = 5.0, .alibi_slopes = slopes};
        fh_result r;
        if (f32) { /* gradients judged in f32 (the 16-bit rule is the forward's) */
            run_and_check(ctx, &c, &in, 1, &ex, &mods, &r);
            const flashcl_call_stats backward = ts_last_stats(ctx);
            ck_assert_int_eq(backward.pass, FLASHCL_PASS_BACKWARD);
            ck_assert_int_eq(backward.kernel, FLASHCL_KERNEL_TENSOR_CORE_EMULATED);
            ck_assert_ptr_nonnull(strstr(backward.build_options, "-DFLASHCL_SOFTCAP=1 -DFLASHCL_ALIBI=1"));
            fh_result_free(&r);
        }
        run_and_check(ctx, &c, &in, 0, &ex, &mods, &r);
        const flashcl_call_stats s = ts_last_stats(ctx);
        ck_assert_int_eq(s.kernel, FLASHCL_KERNEL_TENSOR_CORE_EMULATED);
        ck_assert_ptr_nonnull(strstr(s.build_options, "-DFLASHCL_SOFTCAP=1 -DFLASHCL_ALIBI=1"));
        fh_result_free(&r);
        fh_inputs_free(&in);
    }
    flashcl_context_free(ctx);
}
END_TEST

/* A contiguous KV cache (sequences of 40 and 17 cached rows, capacity 48) read by 4 causal query rows with
 * per-sequence slopes: each sequence's positions are its own (i + len - 4). */
START_TEST(kv_cache_rows) {
    if (!ts_split_takes(1, 0, 2)) return; /* a feature combination of its own: on POCL (ts_split_takes) */
    enum { B = 2, HQ = 16, HKV = 1, SQ = 4, D = 64, CAP = 48 };
    static const int32_t lens[B] = {40, 17};
    const flashcl_dtype f16 = FLASHCL_DTYPE_F16;
    ts_rng rng = {50};
    const size_t nq = (size_t)B * HQ * SQ * D, nc = (size_t)B * HKV * CAP * D;
    float *q = ts_random_floats(&rng, nq, -3.0f, 3.0f), *k = ts_random_floats(&rng, nc, -3.0f, 3.0f);
    float *v = ts_random_floats(&rng, nc, -1.0f, 1.0f), slopes[B * HQ];
    ts_fill_uniform(&rng, slopes, B * HQ, 0.01f, 0.5f);
    for (size_t i = 0; i < nq; ++i) q[i] = ts_round_to_dtype(q[i], f16);
    for (size_t i = 0; i < nc; ++i) k[i] = ts_round_to_dtype(k[i], f16), v[i] = ts_round_to_dtype(v[i], f16);

    flashcl_context *ctx = fh_portable_context();
    cl_context context = flashcl_context_cl_context(ctx);
    cl_command_queue queue = flashcl_context_queue(ctx);
    const ts_placement bhsd = {FLASHCL_LAYOUT_BHSD, 0, 0}, rows = {FLASHCL_LAYOUT_BSHD, 0, 0};
    ts_tensor tq, to, tl, tk, tv;
    ts_tensor_create(&tq, context, &bhsd, B, HQ, SQ, D, f16, q);
    ts_tensor_create(&to, context, &bhsd, B, HQ, SQ, D, f16, NULL);
    ts_tensor_create(&tl, context, &bhsd, B, HQ, SQ, 1, FLASHCL_DTYPE_F32, NULL);
    /* (batch, capacity, heads_kv, head_dim): a BSHD view of (B, HKV, CAP, D). */
    ts_tensor_create(&tk, context, &rows, B, HKV, CAP, D, f16, k);
    ts_tensor_create(&tv, context, &rows, B, HKV, CAP, D, f16, v);
    cl_mem seqlens = ts_buffer(context, sizeof lens, lens);
    flashcl_kv_cache cache;
    flashcl_kv_cache_init(&cache);
    cache.k = tk.view;
    cache.v = tv.view;
    cache.capacity = CAP;
    cache.cache_seqlens = seqlens;
    cache.cache_seqlens_host = lens;
    flashcl_attention_desc d;
    flashcl_attention_desc_init(&d, B, HQ, SQ, CAP, D);
    d.heads_kv = HKV;
    d.causal = 1;
    d.dtype = f16;
    flashcl_attention_extras ex;
    flashcl_attention_extras_init(&ex);
    ex.softcap = 4.0f;
    ex.alibi_slopes_host = slopes;
    ex.alibi_slopes_per_batch = 1;
    ck_assert_msg(flashcl_forward_kv_cache_ex(ctx, &d, &ex, &tq.view, &cache, &to.view, &tl.view, 0, NULL, NULL) ==
                      FLASHCL_SUCCESS,
                  "%s", flashcl_last_error(ctx));
    ck_assert_int_eq(ts_last_stats(ctx).kernel, FLASHCL_KERNEL_DECODE);
    float *o = malloc(nq * sizeof *o), *lse = malloc((size_t)B * HQ * SQ * sizeof *lse);
    ts_tensor_read_output(queue, &to, "O", o);
    ts_tensor_read_output(queue, &tl, "LSE", lse);

    for (int b = 0; b < B; ++b) {
        fh_case c = fh_case_make("kv cache 4 rows d64 16/1 causal softcap + alibi per sequence", 1, HQ, HKV, SQ, lens[b],
                              D, 1);
        c.desc.dtype = f16;
        fh_inputs in = {malloc(nq / B * sizeof(float)), malloc((size_t)HKV * lens[b] * D * sizeof(float)),
                        malloc((size_t)HKV * lens[b] * D * sizeof(float)), NULL, nq / B,
                        (size_t)HKV * lens[b] * D, (size_t)HQ * SQ};
        memcpy(in.q, q + (size_t)b * (nq / B), nq / B * sizeof(float));
        for (int h = 0; h < HKV; ++h) {
            const size_t from = ((size_t)b * HKV + h) * CAP * D, to_row = (size_t)h * lens[b] * D;
            memcpy(in.k + to_row, k + from, (size_t)lens[b] * D * sizeof(float));
            memcpy(in.v + to_row, v + from, (size_t)lens[b] * D * sizeof(float));
        }
        fh_result got = {malloc(in.q_count * sizeof(float)), malloc(in.lse_count * sizeof(float)), NULL, NULL, NULL};
        memcpy(got.o, o + (size_t)b * in.q_count, in.q_count * sizeof(float));
        memcpy(got.lse, lse + (size_t)b * in.lse_count, in.lse_count * sizeof(float));
        const flashcl_reference_extras mods = {.softcap = 4.0, .alibi_slopes = slopes + b * HQ};
        uint8_t *dense = fh_dense_mask(&c);
        fh_check_ex(&c, &in, &got, 0, dense, NULL, &mods);
        free(dense);
        fh_result_free(&got);
        fh_inputs_free(&in);
    }
    free(o), free(lse), free(q), free(k), free(v);
    clReleaseMemObject(seqlens);
    ts_tensor_free(&tq), ts_tensor_free(&to), ts_tensor_free(&tl), ts_tensor_free(&tk), ts_tensor_free(&tv);
    flashcl_context_free(ctx);
}
END_TEST

/* ---- what the dispatcher builds --------------------------------------------------- */

/* A dense call builds exactly what it did before the modifiers existed (the same options, so the same program
 * cache key): no extras, extras with every modifier off, and an older caller's smaller extras whose bytes past
 * its size are garbage. The modifiers add their two defines and nothing else, the tensor-core kernels' as the
 * portable ones'; split-KV takes them. */
START_TEST(dispatch_options) {
    flashcl_context *ctx = ts_context();
    ck_assert_int_eq(flashcl_context_set_tensor_cores(ctx, FLASHCL_TENSOR_CORES_EMULATE), FLASHCL_SUCCESS);
    flashcl_attention_desc d;
    flashcl_attention_desc_init(&d, 2, 2, 64, 64, 64);
    d.causal = 1;
    d.dtype = FLASHCL_DTYPE_F16;
    flashcl_attention_extras none, mods;
    flashcl_attention_extras_init(&none);
    flashcl_attention_extras_init(&mods);
    mods.softcap = 30.0f;
    mods.alibi_max_bias = 8.0f;
    for (int pass = FLASHCL_PASS_FORWARD; pass <= FLASHCL_PASS_BACKWARD; ++pass) {
        const flashcl_call_stats dense = fh_explain(ctx, (flashcl_pass)pass, &d, NULL);
        ck_assert_int_eq(dense.kernel, FLASHCL_KERNEL_TENSOR_CORE_EMULATED);
        ck_assert_str_eq(fh_explain(ctx, (flashcl_pass)pass, &d, &none).build_options, dense.build_options);
        /* An older caller's extras end before softcap; what lies past them is not theirs. */
        flashcl_attention_extras old = mods;
        old.struct_size = offsetof(flashcl_attention_extras, softcap);
        old.softcap = -1.0f;
        ck_assert_str_eq(fh_explain(ctx, (flashcl_pass)pass, &d, &old).build_options, dense.build_options);

        ck_assert_int_eq(flashcl_context_set_tensor_cores(ctx, FLASHCL_TENSOR_CORES_OFF), FLASHCL_SUCCESS);
        const flashcl_call_stats portable = fh_explain(ctx, (flashcl_pass)pass, &d, NULL);
        ck_assert_int_eq(flashcl_context_set_tensor_cores(ctx, FLASHCL_TENSOR_CORES_EMULATE), FLASHCL_SUCCESS);
        const flashcl_call_stats modded = fh_explain(ctx, (flashcl_pass)pass, &d, &mods);
        ck_assert_int_eq(modded.kernel, FLASHCL_KERNEL_TENSOR_CORE_EMULATED);
        char expected[FLASHCL_BUILD_OPTIONS_CAPACITY + 64];
        snprintf(expected, sizeof expected, "%s -DFLASHCL_SOFTCAP=1 -DFLASHCL_ALIBI=1", dense.build_options);
        ck_assert_str_eq(modded.build_options, expected);
        ck_assert_int_eq(flashcl_context_set_tensor_cores(ctx, FLASHCL_TENSOR_CORES_OFF), FLASHCL_SUCCESS);
        snprintf(expected, sizeof expected, "%s -DFLASHCL_SOFTCAP=1 -DFLASHCL_ALIBI=1", portable.build_options);
        ck_assert_str_eq(fh_explain(ctx, (flashcl_pass)pass, &d, &mods).build_options, expected);
        ck_assert_int_eq(flashcl_context_set_tensor_cores(ctx, FLASHCL_TENSOR_CORES_EMULATE), FLASHCL_SUCCESS);
        ck_assert(strstr(portable.build_options, "SOFTCAP") == NULL && strstr(portable.build_options, "ALIBI") == NULL);
    }
    /* Split-KV (the portable forward, decode kernel off) takes the modifiers. */
    ck_assert_int_eq(flashcl_context_set_tensor_cores(ctx, FLASHCL_TENSOR_CORES_OFF), FLASHCL_SUCCESS);
    ck_assert_int_eq(flashcl_context_set_decode_kernel(ctx, 0), FLASHCL_SUCCESS);
    ck_assert_int_eq(flashcl_context_set_kv_splits(ctx, 4), FLASHCL_SUCCESS);
    flashcl_attention_desc one = d;
    one.seqlen_q = 1;
    one.seqlen_k = 4096;
    const flashcl_call_stats split = fh_explain(ctx, FLASHCL_PASS_FORWARD, &one, &mods);
    ck_assert_int_eq(split.kernel, FLASHCL_KERNEL_PORTABLE);
    ck_assert_int_eq(split.kv_splits, 4);
    flashcl_context_free(ctx);
}
END_TEST

/* ---- bad input ------------------------------------------------------------------ */

/* Small problem on poisoned outputs: every refused call leaves them as they were. */
typedef struct bad_call {
    flashcl_context *ctx;
    cl_context context;
    flashcl_attention_desc d;
    ts_tensor q, k, v, o, lse, dq, dk, dv;
} bad_call;

static void bad_call_make(bad_call *x) {
    x->ctx = fh_portable_context();
    x->context = flashcl_context_cl_context(x->ctx);
    flashcl_attention_desc_init(&x->d, 2, 4, 8, 8, 16);
    const ts_placement at = {FLASHCL_LAYOUT_BHSD, 0, 0};
    const flashcl_dtype f32 = FLASHCL_DTYPE_F32;
    float ones[2 * 4 * 8 * 16];
    for (size_t i = 0; i < sizeof ones / sizeof ones[0]; ++i) ones[i] = 1.0f;
    ts_tensor_create(&x->q, x->context, &at, 2, 4, 8, 16, f32, ones);
    ts_tensor_create(&x->k, x->context, &at, 2, 4, 8, 16, f32, ones);
    ts_tensor_create(&x->v, x->context, &at, 2, 4, 8, 16, f32, ones);
    ts_tensor_create(&x->o, x->context, &at, 2, 4, 8, 16, f32, NULL);
    ts_tensor_create(&x->lse, x->context, &at, 2, 4, 8, 1, f32, NULL);
    ts_tensor_create(&x->dq, x->context, &at, 2, 4, 8, 16, f32, NULL);
    ts_tensor_create(&x->dk, x->context, &at, 2, 4, 8, 16, f32, NULL);
    ts_tensor_create(&x->dv, x->context, &at, 2, 4, 8, 16, f32, NULL);
}

/* The forward and the backward with ex refuse with status and a message holding needle; nothing is written. */
static void expect_refused(bad_call *x, const flashcl_attention_extras *ex, flashcl_status status, const char *needle) {
    cl_command_queue queue = flashcl_context_queue(x->ctx);
    flashcl_status got = flashcl_forward_ex(x->ctx, &x->d, ex, &x->q.view, &x->k.view, &x->v.view, &x->o.view,
                                            &x->lse.view, 0, NULL, NULL);
    ck_assert_msg(got == status, "forward: %s, expected %s (%s)", flashcl_status_string(got),
                  flashcl_status_string(status), flashcl_last_error(x->ctx));
    ck_assert_msg(strstr(flashcl_last_error(x->ctx), needle), "forward's message \"%s\" lacks \"%s\"",
                  flashcl_last_error(x->ctx), needle);
    got = flashcl_backward_ex(x->ctx, &x->d, ex, &x->q.view, &x->k.view, &x->v.view, &x->q.view, &x->lse.view,
                              &x->q.view, &x->dq.view, &x->dk.view, &x->dv.view, 0, NULL, NULL);
    ck_assert_msg(got == status, "backward: %s, expected %s (%s)", flashcl_status_string(got),
                  flashcl_status_string(status), flashcl_last_error(x->ctx));
    ck_assert_msg(strstr(flashcl_last_error(x->ctx), needle), "backward's message \"%s\" lacks \"%s\"",
                  flashcl_last_error(x->ctx), needle);
    ts_assert_untouched(queue, &x->o, "o");
    ts_assert_untouched(queue, &x->lse, "lse");
    ts_assert_untouched(queue, &x->dq, "dq");
    ts_assert_untouched(queue, &x->dk, "dk");
    ts_assert_untouched(queue, &x->dv, "dv");
}

START_TEST(bad_input) {
    bad_call x;
    bad_call_make(&x);
    const flashcl_status invalid = FLASHCL_ERROR_INVALID_ARGUMENT;
    flashcl_attention_extras ex;
    static const float caps[3] = {-1.0f, NAN, INFINITY};
    for (int i = 0; i < 3; ++i) {
        flashcl_attention_extras_init(&ex);
        ex.softcap = caps[i];
        expect_refused(&x, &ex, invalid, "softcap");
    }
    for (int i = 0; i < 3; ++i) {
        flashcl_attention_extras_init(&ex);
        ex.alibi_max_bias = caps[i];
        expect_refused(&x, &ex, invalid, "alibi_max_bias");
    }
    float slopes[8] = {0.5f, 0.25f, NAN, 0.1f, 0.5f, 0.25f, 0.1f, 0.1f};
    flashcl_attention_extras_init(&ex);
    ex.alibi_slopes_host = slopes;
    expect_refused(&x, &ex, invalid, "alibi_slopes_host[2]");
    slopes[2] = 0.3f;
    slopes[6] = -INFINITY; /* past heads_q: looked at only per batch */
    ex.alibi_slopes_per_batch = 1;
    expect_refused(&x, &ex, invalid, "alibi_slopes_host[6]");
    ex.alibi_max_bias = 8.0f; /* two sources */
    expect_refused(&x, &ex, invalid, "one of");
    flashcl_attention_extras_init(&ex);
    ex.alibi_slopes_offset = 2; /* without the buffer it applies to */
    expect_refused(&x, &ex, invalid, "alibi_slopes_offset");

    /* A buffer of 4 floats holds (heads_q) slopes, not from offset 1, nor (batch, heads_q). */
    cl_mem four = ts_buffer(x.context, 4 * sizeof(float), slopes);
    flashcl_attention_extras_init(&ex);
    ex.alibi_slopes = four;
    ex.alibi_slopes_offset = 1;
    expect_refused(&x, &ex, FLASHCL_ERROR_BUFFER_TOO_SMALL, "alibi_slopes");
    ex.alibi_slopes_offset = 0;
    ex.alibi_slopes_per_batch = 1;
    expect_refused(&x, &ex, FLASHCL_ERROR_BUFFER_TOO_SMALL, "alibi_slopes");
    /* Slopes inside an output's buffer. */
    ex.alibi_slopes = x.o.view.buffer;
    ex.alibi_slopes_per_batch = 0;
    ex.alibi_slopes_offset = 40;
    const flashcl_status got = flashcl_forward_ex(x.ctx, &x.d, &ex, &x.q.view, &x.k.view, &x.v.view, &x.o.view,
                                                  &x.lse.view, 0, NULL, NULL);
    ck_assert_int_eq(got, FLASHCL_ERROR_ALIASING);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(x.ctx), "alibi_slopes"));
    ts_assert_untouched(flashcl_context_queue(x.ctx), &x.o, "o");

    /* The KV-cache call takes the modifiers and the bias only. */
    flashcl_attention_extras_init(&ex);
    ex.block_mask = four;
    ex.block_size = 4;
    flashcl_kv_cache cache;
    flashcl_kv_cache_init(&cache);
    ck_assert_int_eq(flashcl_forward_kv_cache_ex(x.ctx, &x.d, &ex, &x.q.view, &cache, &x.o.view, NULL, 0, NULL, NULL),
                     FLASHCL_ERROR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(flashcl_last_error(x.ctx), "block mask"));
    /* The standard implementation has no modifiers (refused before anything is built or enqueued). */
    flashcl_attention_extras_init(&ex);
    ex.softcap = 10.0f;
    if (flashcl_context_set_impl(x.ctx, FLASHCL_IMPL_STANDARD) == FLASHCL_SUCCESS) {
        flashcl_call_stats s;
        ck_assert_int_eq(flashcl_explain_call(x.ctx, FLASHCL_PASS_FORWARD, &x.d, &ex, &s), FLASHCL_ERROR_UNSUPPORTED);
        ck_assert_ptr_nonnull(strstr(flashcl_last_error(x.ctx), "soft-capping"));
    }
    clReleaseMemObject(four);
    ts_tensor *all[] = {&x.q, &x.k, &x.v, &x.o, &x.lse, &x.dq, &x.dk, &x.dv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) ts_tensor_free(all[i]);
    flashcl_context_free(x.ctx);
}
END_TEST

static Suite *score_mods_suite(void) {
    Suite *s = suite_create("score_mods");
    TCase *tc = tcase_create("score_mods");
    tcase_set_timeout(tc, TS_CASE_TIMEOUT);
    tcase_add_test(tc, bad_input);
    tcase_add_test(tc, dispatch_options);
    tcase_add_test(tc, softcap_alibi_causal_gqa);
    tcase_add_test(tc, softcap_small_caps);
    tcase_add_test(tc, alibi_window_sources);
    tcase_add_test(tc, varlen_block_mask_dropout);
    tcase_add_test(tc, decode_rows);
    tcase_add_test(tc, decode_matrix_units);
    tcase_add_test(tc, tensor_core_kernels);
    tcase_add_test(tc, kv_cache_rows);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    ts_sweep_announce("score_mods");
    SRunner *runner = srunner_create(score_mods_suite());
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
