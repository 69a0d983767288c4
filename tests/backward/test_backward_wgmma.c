/* test_backward_wgmma.c: the Hopper backward (cl/backward_wgmma.cl: dK/dV and dQ on warpgroup MMA, one sm_90a
 * program) against the double reference. With FLASHCL_WGMMA=1,
 * on an NVIDIA GPU of compute capability 9.0 every backward call of the sweep must run it (call stats: backend
 * "nvidia-wgmma", program backward_wgmma.cl) and be right; everywhere else (POCL, rusticl) the same calls must run
 * another kernel and be right: the fallback; two identical calls give the same bits. The score modifiers
 * (soft-capping, ALiBi, both) run on it with their defines. Calls it does not take (FLASHCL_WGMMA=0, float storage, a
 * head dim it has no tiles for, rows not 16-byte aligned) never run it. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backward_harness.h"

#define BHSD FLASHCL_LAYOUT_BHSD
#define BSHD FLASHCL_LAYOUT_BSHD

/* Lengths around the kernel's 64-key warpgroups, 128-key work-groups and 32/64-query steps (1, 3, 33, 63, 64, 65,
 * 127, 129, 200, 1000, 2048), seqlen_q != seqlen_k both ways (causal with seqlen_q > seqlen_k: fully masked
 * queries; with seqlen_q < seqlen_k: keys no query sees), batches, GQA and MQA, both layouts with an offset;
 * head dims 64 and 128. */
/* name, {batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, causal, scale (0: default), amplitude}, layout,
 * offset */
static const bwd_case sweep[] = {
    {"1x3 d64", {1, 1, 1, 1, 3, 64, 0, 0.0f, 1.0f}, BHSD, 0},
    {"63x63 d128 causal", {1, 2, 2, 63, 63, 128, 1, 0.0f, 1.0f}, BHSD, 0},
    {"65x129 d64 gqa batch 2", {2, 4, 2, 65, 129, 64, 0, 0.0f, 1.0f}, BSHD, 8},
    {"129x65 d128 causal gqa batch 2", {2, 4, 2, 129, 65, 128, 1, 0.0f, 1.0f}, BHSD, 0},
    {"200x200 d64 causal mqa", {1, 3, 1, 200, 200, 64, 1, 0.0f, 1.0f}, BHSD, 0},
    {"127x200 d128 mqa", {1, 3, 1, 127, 200, 128, 0, 0.0f, 1.0f}, BSHD, 8},
    {"33x300 d64 causal", {1, 2, 2, 33, 300, 64, 1, 0.0f, 1.0f}, BHSD, 0},
    {"64x64 d64", {1, 1, 1, 64, 64, 64, 0, 0.0f, 1.0f}, BHSD, 0},
    {"1000x1000 d64 causal gqa", {1, 4, 1, 1000, 1000, 64, 1, 0.0f, 1.0f}, BHSD, 0},
    {"1000x1000 d128", {2, 2, 2, 1000, 1000, 128, 0, 0.0f, 1.0f}, BHSD, 0},
    {"2048x2048 d64", {1, 2, 2, 2048, 2048, 64, 0, 0.0f, 1.0f}, BHSD, 0},
    {"2048x2048 d128 causal", {1, 2, 2, 2048, 2048, 128, 1, 0.0f, 1.0f}, BHSD, 0},
    {"large logits 150x170 d64 causal", {1, 2, 2, 150, 170, 64, 1, 0.0f, 4.0f}, BHSD, 0},
    {"large logits 170x150 d128", {1, 2, 1, 170, 150, 128, 0, 0.0f, 4.0f}, BHSD, 0},
};
#define SWEEP_COUNT ((int)(sizeof sweep / sizeof sweep[0]))
/* As test_backward_mma's 16-bit cases: 4 storage ulps of each gradient's magnitude. */
#define STORAGE_ULPS 4.0
/* Cases of more keys than this run on an sm_90 device only: elsewhere they would time the portable kernel on the
 * CPU, not the wgmma one. */
#define CPU_MAX_KEYS 300
/* Elsewhere the sweep's calls run the portable backward, which test_backward and test_backward_accuracy sweep: there
 * the first CPU_FALLBACK_CASES cases (both head dims, causal or not, GQA, BSHD with an offset; bf16 on the second)
 * check that the calls fall back and are right, the rest run on an sm_90 device only (docs/testing.md, "Test
 * time"). */
#define CPU_FALLBACK_CASES 3

/* Which kernel the last (backward) call ran: the wgmma one exactly when `wgmma`. */
static void expect_backend(flashcl_context *ctx, const char *name, int wgmma) {
    const flashcl_call_stats stats = ts_last_stats(ctx);
    ck_assert_int_eq(stats.pass, FLASHCL_PASS_BACKWARD);
    const int ran = strcmp(stats.backend, "nvidia-wgmma") == 0;
    ck_assert_msg(ran == wgmma, "%s: backend \"%s\" (program %s), expected %sthe wgmma backward (last error: %s)",
                  name, stats.backend, stats.program, wgmma ? "" : "not ", flashcl_last_error(ctx));
    if (wgmma) {
        ck_assert_str_eq(stats.program, "backward_wgmma.cl");
        ck_assert_int_eq(stats.kernel, FLASHCL_KERNEL_TENSOR_CORE);
    }
}

static void run_case(const bwd_case *c, flashcl_dtype dtype) {
    flashcl_context *ctx = ts_context_wgmma("1");
    const int sm90 = ts_device_is_sm90(ctx);
    if (!sm90 && (c->shape.seqlen_k > CPU_MAX_KEYS || c->shape.seqlen_q > CPU_MAX_KEYS ||
                  (int)(c - sweep) >= CPU_FALLBACK_CASES)) {
        flashcl_context_free(ctx);
        return;
    }
    bwd_check_storage(ctx, c, dtype, STORAGE_ULPS);
    expect_backend(ctx, c->name, sm90);
    flashcl_context_free(ctx);
}

/* f16 on every case; bf16 on the odd ones (each type meets both head dims, both masks, GQA and the offsets). */
START_TEST(test_half_sweep) { run_case(&sweep[_i], FLASHCL_DTYPE_F16); }
END_TEST

START_TEST(test_bfloat16_sweep) {
    if (_i % 2 == 1) run_case(&sweep[_i], FLASHCL_DTYPE_BF16);
}
END_TEST

/* The same inputs give the same bits (each gradient row has one owner, no atomics): f16, a causal GQA case with
 * several query blocks and key blocks per work-group, backward twice over poisoned gradients, buffers compared
 * byte for byte. */
START_TEST(test_repeatable) {
    const bwd_case c = {"repeat 300x260 d64 causal gqa", {2, 4, 2, 300, 260, _i ? 128 : 64, 1, 0.0f, 1.0f}, BHSD, 0};
    const ts_case *sh = &c.shape;
    flashcl_context *ctx = ts_context_wgmma("1");
    const int sm90 = ts_device_is_sm90(ctx);
    bwd_host h;
    bwd_host_alloc(&c, 23, &h);
    cl_context context = flashcl_context_cl_context(ctx);
    cl_command_queue queue = flashcl_context_queue(ctx);
    const ts_placement place = {c.layout, c.offset, 0};
    const size_t B = (size_t)sh->batch, Hq = (size_t)sh->heads_q, Hkv = (size_t)sh->heads_kv;
    const size_t Sq = (size_t)sh->seqlen_q, Sk = (size_t)sh->seqlen_k, D = (size_t)sh->head_dim;
    const flashcl_dtype dt = FLASHCL_DTYPE_F16;
    ts_tensor q, k, v, dout, o, lse, grads[2][3];
    ts_tensor_create(&q, context, &place, B, Hq, Sq, D, dt, h.q);
    ts_tensor_create(&k, context, &place, B, Hkv, Sk, D, dt, h.k);
    ts_tensor_create(&v, context, &place, B, Hkv, Sk, D, dt, h.v);
    ts_tensor_create(&dout, context, &place, B, Hq, Sq, D, dt, h.dout);
    ts_tensor_create(&o, context, &place, B, Hq, Sq, D, dt, NULL);
    ts_tensor_create(&lse, context, &place, B, Hq, Sq, 1, FLASHCL_DTYPE_F32, NULL);
    flashcl_attention_desc desc;
    bwd_desc(&c, &desc);
    desc.dtype = dt;
    ck_assert_msg(flashcl_forward(ctx, &desc, &q.view, &k.view, &v.view, &o.view, &lse.view, 0, NULL, NULL) ==
                      FLASHCL_SUCCESS,
                  "%s", flashcl_last_error(ctx));
    for (int r = 0; r < 2; ++r) {
        ts_tensor_create(&grads[r][0], context, &place, B, Hq, Sq, D, dt, NULL);
        ts_tensor_create(&grads[r][1], context, &place, B, Hkv, Sk, D, dt, NULL);
        ts_tensor_create(&grads[r][2], context, &place, B, Hkv, Sk, D, dt, NULL);
        ck_assert_msg(flashcl_backward(ctx, &desc, &q.view, &k.view, &v.view, &o.view, &lse.view, &dout.view,
                                       &grads[r][0].view, &grads[r][1].view, &grads[r][2].view, 0, NULL,
                                       NULL) == FLASHCL_SUCCESS,
                      "%s", flashcl_last_error(ctx));
        expect_backend(ctx, c.name, sm90);
        for (int g = 0; g < 3; ++g) ts_tensor_read(queue, &grads[r][g]);
    }
    static const char *const names[3] = {"dq", "dk", "dv"};
    for (int g = 0; g < 3; ++g) {
        ts_assert_written_exactly(&grads[0][g], names[g]);
        ck_assert_msg(memcmp(grads[0][g].image, grads[1][g].image, grads[0][g].capacity * grads[0][g].elem_size) == 0,
                      "%s d%d: %s differs between two identical calls", c.name, (int)D, names[g]);
    }
    for (int r = 0; r < 2; ++r)
        for (int g = 0; g < 3; ++g) ts_tensor_free(&grads[r][g]);
    ts_tensor_free(&q), ts_tensor_free(&k), ts_tensor_free(&v), ts_tensor_free(&dout), ts_tensor_free(&o);
    ts_tensor_free(&lse);
    bwd_host_free(&h);
    flashcl_context_free(ctx);
}
END_TEST

/* The score modifiers: soft-capping at caps that bend scores of a few units (amplitude 3), ALiBi (slopes 0.5 / 2^h,
 * llama.cpp's shape), both; causal with seqlen_q above and below seqlen_k, GQA and MQA, both storage types and head
 * dims, judged against the double reference with the same modifiers. On an sm_90 device each must run the wgmma
 * program with the modifiers' defines, in the default mode (even cases: measured faster) and with FLASHCL_WGMMA=1;
 * elsewhere the fallback, checked on the first two cases only (one on rusticl, one on POCL: ts_split_takes; each a
 * build of the portable kernels with the modifiers, which test_score_mods covers), the rest on sm_90 only. */
typedef struct mod_case {
    bwd_case c;
    flashcl_dtype dtype;
    float softcap;
    int alibi;
} mod_case;
static const mod_case mod_cases[] = {
    {{"softcap 3 200x200 d64 causal gqa", {1, 4, 2, 200, 200, 64, 1, 0.0f, 3.0f}, BHSD, 0}, FLASHCL_DTYPE_F16, 3.0f, 0},
    {{"alibi 130x257 d128 batch 2", {2, 2, 2, 130, 257, 128, 0, 0.0f, 3.0f}, BSHD, 8}, FLASHCL_DTYPE_BF16, 0.0f, 1},
    {{"softcap 5 + alibi 257x130 d128 causal mqa", {1, 3, 1, 257, 130, 128, 1, 0.0f, 3.0f}, BHSD, 0},
     FLASHCL_DTYPE_F16, 5.0f, 1},
    {{"softcap 2 + alibi 70x90 d64 gqa", {1, 4, 2, 70, 90, 64, 0, 0.0f, 3.0f}, BHSD, 0}, FLASHCL_DTYPE_BF16, 2.0f, 1},
    {{"softcap 2 + alibi 1000x1000 d64 causal gqa", {1, 8, 2, 1000, 1000, 64, 1, 0.0f, 3.0f}, BHSD, 0},
     FLASHCL_DTYPE_BF16, 2.0f, 1},
    {{"softcap 30 + alibi 2048x2048 d128", {1, 4, 4, 2048, 2048, 128, 0, 0.0f, 3.0f}, BHSD, 0}, FLASHCL_DTYPE_F16,
     30.0f, 1},
    {{"softcap 3 700x1100 d128 causal gqa", {2, 4, 1, 700, 1100, 128, 1, 0.0f, 3.0f}, BSHD, 8}, FLASHCL_DTYPE_F16,
     3.0f, 0},
    /* d64 with ALiBi alone: dQ on its own tiles (64 keys per step), over several work-groups of each kernel. */
    {{"alibi 1100x900 d64 gqa", {2, 4, 2, 1100, 900, 64, 0, 0.0f, 3.0f}, BSHD, 8}, FLASHCL_DTYPE_F16, 0.0f, 1},
    {{"alibi 333x1000 d64 batch 2", {2, 2, 2, 333, 1000, 64, 0, 0.0f, 3.0f}, BHSD, 0}, FLASHCL_DTYPE_BF16, 0.0f, 1},
};
#define MOD_CASE_COUNT ((int)(sizeof mod_cases / sizeof mod_cases[0]))

START_TEST(test_modifiers) {
    const mod_case *m = &mod_cases[_i];
    flashcl_context *ctx = ts_context_wgmma(_i % 2 ? "1" : "2");
    const int sm90 = ts_device_is_sm90(ctx);
    if (!sm90 && (_i >= 2 || !ts_split_takes(_i, 0, 2))) {
        flashcl_context_free(ctx);
        return;
    }
    float slopes[8];
    for (int h = 0; h < m->c.shape.heads_q; ++h) slopes[h] = 0.5f / (float)(1 << h);
    flashcl_attention_extras ex;
    flashcl_attention_extras_init(&ex);
    ex.softcap = m->softcap;
    flashcl_reference_extras mods = {.softcap = m->softcap};
    if (m->alibi) ex.alibi_slopes_host = slopes, mods.alibi_slopes = slopes;
    bwd_check_storage_ex(ctx, &m->c, m->dtype, STORAGE_ULPS, &ex, &mods);
    expect_backend(ctx, m->c.name, sm90);
    if (sm90) {
        const char *options = ts_last_stats(ctx).build_options;
        ck_assert_msg((strstr(options, "-DFLASHCL_SOFTCAP=1") != NULL) == (m->softcap > 0.0f), "%s: options \"%s\"",
                      m->c.name, options);
        ck_assert_msg((strstr(options, "-DFLASHCL_ALIBI=1") != NULL) == m->alibi, "%s: options \"%s\"", m->c.name,
                      options);
        if (m->c.shape.head_dim == 64 && m->alibi && !(m->softcap > 0.0f) && !m->c.shape.causal)
            ck_assert_msg(strstr(options, "-DBWQ_BLOCK_K=64") != NULL, "%s: options \"%s\"", m->c.name, options);
    }
    flashcl_context_free(ctx);
}
END_TEST

/* The default mode (FLASHCL_WGMMA unset or neither 0 nor 1) runs it where it applies: measured faster. */
START_TEST(test_default_mode) {
    const bwd_case c = {"default mode 100x130 d128 causal", {1, 2, 2, 100, 130, 128, 1, 0.0f, 1.0f}, BHSD, 0};
    flashcl_context *ctx = ts_context_wgmma("2");
    bwd_check_storage(ctx, &c, FLASHCL_DTYPE_F16, STORAGE_ULPS);
    expect_backend(ctx, c.name, ts_device_is_sm90(ctx));
    flashcl_context_free(ctx);
}
END_TEST

/* Calls the wgmma backward does not take run another kernel, still right: FLASHCL_WGMMA=0, a head dim it has no
 * tiles for (96), rows not 16-byte aligned (offset 4). */
START_TEST(test_not_taken) {
    bwd_case c = {"", {1, 2, 2, 100, 130, 64, 1, 0.0f, 1.0f}, BHSD, 0};
    flashcl_context *ctx = ts_context_wgmma(_i == 0 ? "0" : "1");
    switch (_i) {
    case 0: c.name = "FLASHCL_WGMMA=0"; break;
    case 1: c.name = "head_dim 96", c.shape.head_dim = 96; break;
    default: c.name = "offset 4", c.layout = BSHD, c.offset = 4; break;
    }
    bwd_check_storage(ctx, &c, FLASHCL_DTYPE_F16, STORAGE_ULPS);
    expect_backend(ctx, c.name, 0);
    flashcl_context_free(ctx);
}
END_TEST

static Suite *wgmma_suite(void) {
    Suite *s = suite_create("backward_wgmma");
    TCase *tc = tcase_create("wgmma");
    tcase_set_timeout(tc, TS_CASE_TIMEOUT);
    tcase_add_loop_test(tc, test_half_sweep, 0, SWEEP_COUNT);
    tcase_add_loop_test(tc, test_bfloat16_sweep, 0, SWEEP_COUNT);
    tcase_add_loop_test(tc, test_repeatable, 0, 2);
    tcase_add_loop_test(tc, test_modifiers, 0, MOD_CASE_COUNT);
    tcase_add_test(tc, test_default_mode);
    tcase_add_loop_test(tc, test_not_taken, 0, 3);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    ts_sweep_announce("backward_wgmma");
    flashcl_context *ctx = NULL;
    if (flashcl_context_create(&ctx, NULL) == FLASHCL_SUCCESS) {
        if (!ts_device_is_sm90(ctx))
            printf("backward_wgmma: not an sm_90 device: the sweep's first %d cases and two modifier cases check "
                   "the fallback; the other cases, and those of more than %d keys or queries, run on an sm_90 "
                   "device only\n",
                   CPU_FALLBACK_CASES, CPU_MAX_KEYS);
        flashcl_context_free(ctx);
    }
    SRunner *runner = srunner_create(wgmma_suite());
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
