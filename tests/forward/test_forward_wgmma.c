/* test_forward_wgmma.c: the Hopper forward (cl/forward_wgmma.cl, warpgroup MMA through the sm_90a compile step)
 * against the double reference. On an NVIDIA GPU of compute capability 9.0 every call of the sweep must run it
 * (call stats: backend "nvidia-wgmma", program forward_wgmma.cl) and be right; with FLASHCL_WGMMA=0 the same calls
 * run the mma.sync kernel. Everywhere else (POCL, rusticl) the same calls must run another kernel (never the wgmma
 * one) and be right: the fallback. The score modifiers (soft-capping, ALiBi) and the additive bias (float32 or the
 * storage type, broadcast or full, staged or read from global memory, -inf and +-1e4 values) are judged the same
 * way, with their defines in the build options of the wgmma program that ran. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "feature_harness.h"

/* Lengths around the kernel's 64-row warpgroups, 128-, 192- and 256-row work-groups and 64/128-key steps (1, 63,
 * 64, 65, 200, 700, 1000, 1100, 4096), seqlen_q != seqlen_k both ways (causal with seqlen_q > seqlen_k: fully masked top rows), batches,
 * heads, GQA and MQA; head dims 64 and 128. */
static const ts_case sweep[] = {
    {1, 1, 1, 1, 1, 64, 0, 0, 1},          {1, 2, 2, 63, 63, 128, 1, 0, 1},     {1, 1, 1, 64, 64, 64, 1, 0, 1},
    {2, 2, 2, 65, 65, 128, 0, 0, 1},       {1, 2, 1, 200, 200, 64, 1, 0, 1},    {1, 2, 2, 1000, 1000, 128, 1, 0, 1},
    {1, 1, 1, 4096, 4096, 64, 1, 0, 1},    {1, 1, 1, 4096, 4096, 128, 0, 0, 1}, {1, 2, 2, 200, 63, 64, 1, 0, 1},
    {2, 4, 1, 65, 1000, 128, 1, 0, 1},     {1, 2, 2, 1, 200, 128, 1, 0, 1},     {1, 3, 1, 129, 77, 64, 0, 0.3f, 1},
    {1, 1, 1, 1000, 65, 128, 1, 0, 1},     {1, 2, 2, 128, 129, 64, 0, 0, 1},
    /* d64 without causal runs on work-groups of four warpgroups (256 query rows): more than one of them, the
     * last partial. Keys past CPU_MAX_KEYS: the H100 runs these, the CPU implementations skip them. */
    {2, 2, 1, 700, 1100, 64, 0, 0, 1},     {1, 1, 1, 1100, 1100, 64, 0, 0, 1},
};
#define SWEEP_COUNT ((int)(sizeof sweep / sizeof sweep[0]))

/* Runs p in one placement, checks it against the reference and which kernel ran: the wgmma one exactly when
 * `wgmma` (else never). */
static void run_checked(flashcl_context *ctx, const ts_problem *p, const ts_placements *place, const char *name,
                        int wgmma) {
    float *o = malloc(p->q_count * sizeof *o), *lse = malloc(p->lse_count * sizeof *lse);
    ck_assert(o && lse);
    const flashcl_attention_desc *d = &p->desc;
    char label[256];
    snprintf(label, sizeof label, "B%d Hq%d Hkv%d Sq%d Sk%d D%d %s dtype %d, %s", d->batch, d->heads_q, d->heads_kv,
             d->seqlen_q, d->seqlen_k, d->head_dim, d->causal ? "causal" : "full", (int)d->dtype, name);
    ts_run_forward(ctx, p, place, o, lse);
    const flashcl_call_stats stats = ts_last_stats(ctx);
    const int ran_wgmma = strcmp(stats.backend, "nvidia-wgmma") == 0;
    ck_assert_msg(ran_wgmma == wgmma, "%s: backend \"%s\" (program %s), expected %s the wgmma kernel", label,
                  stats.backend, stats.program, wgmma ? "" : "not");
    if (wgmma) {
        ck_assert_str_eq(stats.program, "forward_wgmma.cl");
        ck_assert_int_eq(stats.kernel, FLASHCL_KERNEL_TENSOR_CORE);
    }
    ts_check_forward(p, o, lse, label);
    free(o);
    free(lse);
}

/* Cases of more keys than this run on an sm_90 device only: elsewhere they would time the portable kernel on the
 * CPU (minutes; test_forward covers its long rows), not the wgmma one. main() says so where it applies. */
#define CPU_MAX_KEYS 1000
/* Elsewhere the sweep's calls run the portable kernel, whose own sweep is test_forward's: there the first
 * CPU_FALLBACK_CASES cases (both head dims, causal or not, a batch of 2) check that the calls fall back and are
 * right, and the rest run on an sm_90 device only (they were a third of this suite's CPU time, repeating
 * test_forward; docs/testing.md, "Test time"). */
#define CPU_FALLBACK_CASES 4

/* Each case in both 16-bit types, unless FLASHCL_TEST_SWEEP=diagonal (rusticl) thins it to one. */
static void run_case(const ts_case *c, flashcl_dtype dtype, uint64_t seed) {
    if (!ts_sweep_takes_variant((int)(c - sweep), dtype == FLASHCL_DTYPE_BF16, 2)) return;
    flashcl_context *ctx = ts_context_wgmma("1");
    const int expected = ts_device_is_sm90(ctx);
    if (!expected && (c->seqlen_k > CPU_MAX_KEYS || (int)(c - sweep) >= CPU_FALLBACK_CASES)) {
        flashcl_context_free(ctx);
        return;
    }
    const flashcl_attention_desc d = ts_case_desc(c, dtype);
    ts_problem p;
    ts_problem_init(&p, &d, seed, c->amplitude);
    const ts_placements bhsd = ts_uniform_placements(FLASHCL_LAYOUT_BHSD, 0, 0);
    run_checked(ctx, &p, &bhsd, "BHSD contiguous", expected);
    /* Offsets and padding that keep rows 16-byte aligned (8 16-bit values). */
    const ts_placements bshd = ts_uniform_placements(FLASHCL_LAYOUT_BSHD, 8, 8);
    run_checked(ctx, &p, &bshd, "BSHD offset 8 pad 8", expected);
    ts_problem_free(&p);
    flashcl_context_free(ctx);
}

START_TEST(test_half_sweep) { run_case(&sweep[_i], FLASHCL_DTYPE_F16, 22000u + (uint64_t)_i); }
END_TEST

START_TEST(test_bfloat16_sweep) { run_case(&sweep[_i], FLASHCL_DTYPE_BF16, 22100u + (uint64_t)_i); }
END_TEST

/* Scores far beyond 88 (exp overflows in float): the running maximum must be subtracted first. */
START_TEST(test_large_logits) {
    const ts_case c = {1, 2, 2, 150, 170, _i & 1 ? 128 : 64, _i & 1, 2.0f, 3};
    flashcl_context *ctx = ts_context_wgmma("1");
    const int expected = ts_device_is_sm90(ctx);
    const flashcl_attention_desc d = ts_case_desc(&c, FLASHCL_DTYPE_F16);
    ts_problem p;
    ts_problem_init(&p, &d, 22200u + (uint64_t)_i, c.amplitude);
    p.check_target = 0;
    const ts_placements bhsd = ts_uniform_placements(FLASHCL_LAYOUT_BHSD, 0, 0);
    run_checked(ctx, &p, &bhsd, "large logits", expected);
    ts_problem_free(&p);
    flashcl_context_free(ctx);
}
END_TEST

/* Calls the wgmma kernel does not take run another kernel, still right, on every device: FLASHCL_WGMMA=0, a
 * head dim it has no tiles for (96), float storage, a row start not 16-byte aligned, the tensor-core mode off. */
START_TEST(test_not_taken) {
    ts_case c = {1, 2, 2, 100, 130, 64, 1, 0, 1};
    flashcl_dtype dtype = FLASHCL_DTYPE_F16;
    ts_placements place = ts_uniform_placements(FLASHCL_LAYOUT_BHSD, 0, 0);
    flashcl_context *ctx = ts_context_wgmma(_i == 0 ? "0" : "1");
    const char *name = "";
    switch (_i) {
    case 0: name = "FLASHCL_WGMMA=0"; break;
    case 1: c.head_dim = 96, name = "head_dim 96"; break;
    case 2: dtype = FLASHCL_DTYPE_F32, name = "float"; break;
    case 3: place = ts_uniform_placements(FLASHCL_LAYOUT_BSHD, 4, 0), name = "offset 4"; break;
    default:
        ck_assert_int_eq(flashcl_context_set_tensor_cores(ctx, FLASHCL_TENSOR_CORES_OFF), FLASHCL_SUCCESS);
        name = "tensor cores off";
        break;
    }
    const flashcl_attention_desc d = ts_case_desc(&c, dtype);
    ts_problem p;
    ts_problem_init(&p, &d, 22300u + (uint64_t)_i, 1.0f);
    run_checked(ctx, &p, &place, name, 0);
    /* With FLASHCL_WGMMA=0 an H100 runs the mma.sync kernel. */
    if (_i == 0 && ts_device_is_sm90(ctx)) ck_assert_str_eq(ts_last_stats(ctx).backend, "nvidia-mma-sync");
    ts_problem_free(&p);
    flashcl_context_free(ctx);
}
END_TEST

/* Twice the same call writes the same bits. */
START_TEST(test_repeatable) {
    const ts_case c = {1, 2, 1, 300, 330, 128, 1, 0, 1};
    flashcl_context *ctx = ts_context_wgmma("1");
    const int expected = ts_device_is_sm90(ctx);
    const flashcl_attention_desc d = ts_case_desc(&c, FLASHCL_DTYPE_BF16);
    ts_problem p;
    ts_problem_init(&p, &d, 22400u, 1.0f);
    float *first = malloc(p.q_count * sizeof *first), *second = malloc(p.q_count * sizeof *second);
    float *lse = malloc(p.lse_count * sizeof *lse);
    ck_assert(first && second && lse);
    const ts_placements bhsd = ts_uniform_placements(FLASHCL_LAYOUT_BHSD, 0, 0);
    ts_run_forward(ctx, &p, &bhsd, first, lse);
    ts_run_forward(ctx, &p, &bhsd, second, lse);
    ck_assert_int_eq(strcmp(ts_last_stats(ctx).backend, "nvidia-wgmma") == 0, expected);
    for (size_t i = 0; i < p.q_count; ++i)
        ck_assert_msg(first[i] == second[i], "O[%zu] differs between runs: %g, %g", i, (double)first[i],
                      (double)second[i]);
    free(first), free(second), free(lse);
    ts_problem_free(&p);
    flashcl_context_free(ctx);
}
END_TEST

/* flashcl_context_set_wgmma: AUTO and ON run the wgmma kernel at head_dim 64 and 128, causal or not, OFF never
 * (on an sm_90 device; elsewhere never, and every call right); an unknown mode or a NULL context
 * is refused and leaves the mode as it was. */
START_TEST(test_mode_setter) {
    ck_assert_int_eq(flashcl_context_set_wgmma(NULL, FLASHCL_WGMMA_MODE_ON), FLASHCL_ERROR_INVALID_ARGUMENT);
    flashcl_context *ctx = ts_context_wgmma("0");
    const int sm90 = ts_device_is_sm90(ctx);
    const ts_case cases[] = {{1, 2, 2, 70, 90, 64, 0, 0, 1}, {1, 2, 2, 70, 90, 128, 1, 0, 1}};
    const flashcl_wgmma_mode modes[] = {FLASHCL_WGMMA_MODE_AUTO, FLASHCL_WGMMA_MODE_OFF, FLASHCL_WGMMA_MODE_ON};
    const ts_placements bhsd = ts_uniform_placements(FLASHCL_LAYOUT_BHSD, 0, 0);
    for (int m = 0; m < 3; ++m) {
        ck_assert_int_eq(flashcl_context_set_wgmma(ctx, modes[m]), FLASHCL_SUCCESS);
        /* Refused, and the mode just set stays. */
        ck_assert_int_eq(flashcl_context_set_wgmma(ctx, (flashcl_wgmma_mode)7), FLASHCL_ERROR_INVALID_ARGUMENT);
        ck_assert_ptr_nonnull(strstr(flashcl_last_error(ctx), "wgmma mode"));
        for (int i = 0; i < 2; ++i) {
            const int expected = sm90 && modes[m] != FLASHCL_WGMMA_MODE_OFF;
            const flashcl_attention_desc d = ts_case_desc(&cases[i], FLASHCL_DTYPE_F16);
            ts_problem p;
            ts_problem_init(&p, &d, 22500u + (uint64_t)(2 * m + i), 1.0f);
            char name[64];
            snprintf(name, sizeof name, "mode %d", (int)modes[m]);
            run_checked(ctx, &p, &bhsd, name, expected);
            if (sm90 && !expected) ck_assert_str_eq(ts_last_stats(ctx).backend, "nvidia-mma-sync");
            ts_problem_free(&p);
        }
    }
    flashcl_context_free(ctx);
}
END_TEST

/* ---- score modifiers and the bias ------------------------------------------------------------------------ */

/* The bias of a modifier case: none; (1, 1) float32 rows 16-byte aligned (offset 8, rows padded by 3: staged on
 * the H100) holding -inf (a whole row, scattered pairs), +-1e4 and a dominant last key (read from global memory:
 * seqlen_k is no whole chunk); (B, 1) in the storage type, rows not aligned (read pair by pair from global
 * memory); (B, Hq) in the storage type, contiguous and aligned (staged 16-bit); one (Sq, Sk) float32 plane seen
 * as (B, Hq) through zero batch and head strides (staged). */
enum { BIAS_NONE, BIAS_SHARED_F32, BIAS_BATCH_UNALIGNED, BIAS_FULL_STORAGE, BIAS_ZERO_STRIDES };

typedef struct mod_case {
    const char *name;
    int batch, hq, hkv, sq, sk, d, causal;
    flashcl_dtype dtype;
    float softcap;
    int alibi, bias;
} mod_case;

/* Around the kernel's 64/128-key blocks and 64-row warpgroups, causal with seqlen_q > seqlen_k (rows that see no
 * key) and < seqlen_k, GQA and MQA, both head dims and both 16-bit types; each modifier alone and together. */
static const mod_case mod_cases[] = {
    {"softcap 3, d64 f16 causal gqa 4/2 200x333", 1, 4, 2, 200, 333, 64, 1, FLASHCL_DTYPE_F16, 3.0f, 0, BIAS_NONE},
    {"alibi, d128 bf16 mqa 4/1 130x130", 1, 4, 1, 130, 130, 128, 0, FLASHCL_DTYPE_BF16, 0.0f, 1, BIAS_NONE},
    {"softcap 3 + alibi, d128 f16 causal 2/2 300x200", 2, 2, 2, 300, 200, 128, 1, FLASHCL_DTYPE_F16, 3.0f, 1,
     BIAS_NONE},
    {"f32 (1,1) bias staged, -inf, 1e4 + softcap + alibi, d64 f16 causal gqa 4/2 150x333", 1, 4, 2, 150, 333, 64, 1,
     FLASHCL_DTYPE_F16, 3.0f, 1, BIAS_SHARED_F32},
    {"f16 (2,1) bias unaligned rows, d128 f16 2/2 100x77", 2, 2, 2, 100, 77, 128, 0, FLASHCL_DTYPE_F16, 0.0f, 0,
     BIAS_BATCH_UNALIGNED},
    {"bf16 (2,4) bias staged, d128 bf16 causal gqa 4/2 190x264", 2, 4, 2, 190, 264, 128, 1, FLASHCL_DTYPE_BF16, 0.0f,
     0, BIAS_FULL_STORAGE},
    {"f32 bias (1,1) expanded to (2,4) by zero strides + alibi, d64 bf16 70x96", 2, 4, 4, 70, 96, 64, 0,
     FLASHCL_DTYPE_BF16, 0.0f, 1, BIAS_ZERO_STRIDES},
    {"f32 (1,1) bias staged, -inf, 1e4, d128 f16 gqa 4/2 129x333", 1, 4, 2, 129, 333, 128, 0, FLASHCL_DTYPE_F16,
     0.0f, 0, BIAS_SHARED_F32},
    /* The d64 modifier tiles (2 x 64 pipelined) over several work-groups and key blocks: sm_90 only (CPU_MAX_KEYS). */
    {"softcap 2 + alibi, d64 bf16 gqa 8/2 1100x1100", 1, 8, 2, 1100, 1100, 64, 0, FLASHCL_DTYPE_BF16, 2.0f, 1,
     BIAS_NONE},
};
#define MOD_COUNT ((int)(sizeof mod_cases / sizeof mod_cases[0]))

/* (bb, bh, Sq, Sk) values uniform in [lo, hi), rounded to dtype (the reference sees what is stored). */
static float *random_plane(size_t n, uint64_t seed, float lo, float hi, flashcl_dtype dtype) {
    ts_rng rng = {seed};
    float *x = ts_random_floats(&rng, n, lo, hi);
    for (size_t i = 0; i < n; ++i) x[i] = ts_round_to_dtype(x[i], dtype);
    return x;
}

/* -inf over row 1 whole (an empty row unless causal hides it anyway) and on every 7th pair; -1e4 on every 97th
 * pair (they vanish) and +1e4 on one key (key r, visible under the bottom-right mask) of every 5th row, which
 * dominates it. One such key per row: two scores of 1e4 would be judged on sub-ulp roundings of float at that
 * magnitude, which the float reference and the kernel round differently (on the H100, two such keys in a row
 * put O one f16 ulp past the rule's bound). Row sq - 1 sees every key and its last key, past the last whole
 * chunk, dominates it (its +-1e4 cleared), so a wrong global read there fails. */
static void shared_bias_specials(float *bias, int sq, int sk) {
    const size_t n = (size_t)sq * (size_t)sk;
    for (int j = 0; j < sk; ++j) bias[(size_t)sk + (size_t)j] = -INFINITY;
    for (size_t i = 3; i < n; i += 7) bias[i] = -INFINITY;
    for (size_t i = 5; i < n; i += 97) bias[i] = -1e4f;
    for (int r = 2; r < sq && r < sk; r += 5) bias[(size_t)r * (size_t)sk + (size_t)r] = 1e4f;
    float *last = bias + (size_t)(sq - 1) * (size_t)sk;
    for (int j = 0; j < sk; ++j)
        if (fabsf(last[j]) >= 1e4f) last[j] = 0.0f;
    last[sk - 1] = 9.0f;
}

/* One modifier case on the wgmma kernel where the device runs it (else the fallback), judged against the double
 * reference (O, LSE, empty rows) with the same modifiers; on the H100 the wgmma program must have run with the
 * features' defines, the bias staged exactly when its rows are aligned. Each case is a kernel build of its own:
 * on the CPU implementations split between them (ts_split_takes: even cases on rusticl, odd on POCL). */
START_TEST(test_modifiers) {
    if (!ts_split_takes(_i, 0, 2)) return;
    const mod_case *m = &mod_cases[_i];
    flashcl_context *ctx = ts_context_wgmma("1");
    const int sm90 = ts_device_is_sm90(ctx);
    if (!sm90 && m->sk > CPU_MAX_KEYS) {
        flashcl_context_free(ctx);
        return;
    }
    fh_case c = fh_case_make(m->name, m->batch, m->hq, m->hkv, m->sq, m->sk, m->d, m->causal);
    c.desc.dtype = m->dtype;
    fh_inputs in;
    fh_inputs_make(&c, 22600u + (uint64_t)_i, &in);
    /* Scores of a few units (inputs in [-3, 3]), so that a cap of 3 bends them. */
    for (size_t i = 0; i < in.q_count; ++i) in.q[i] *= 3.0f;
    for (size_t i = 0; i < in.kv_count; ++i) in.k[i] *= 3.0f;
    fh_round_inputs(&in, m->dtype);
    cl_context context = flashcl_context_cl_context(ctx);
    flashcl_attention_extras ex;
    flashcl_attention_extras_init(&ex);
    flashcl_reference_extras mods = {.softcap = m->softcap};
    ex.softcap = m->softcap;
    float slopes[8];
    for (int h = 0; h < m->hq; ++h) slopes[h] = 0.5f / (float)(1 << h); /* 0.5, 0.25, ... as llama.cpp's shape */
    if (m->alibi) {
        ex.alibi_slopes_host = slopes;
        mods.alibi_slopes = slopes;
    }
    const size_t plane = (size_t)m->sq * (size_t)m->sk;
    float *bias = NULL, *expanded = NULL;
    ts_tensor tb;
    memset(&tb, 0, sizeof tb);
    cl_mem zero_stride = NULL;
    int staged = 0;
    if (m->bias == BIAS_SHARED_F32) {
        bias = random_plane(plane, 700u + (uint64_t)_i, -2.0f, 2.0f, FLASHCL_DTYPE_F32);
        shared_bias_specials(bias, m->sq, m->sk);
        const ts_placement aligned = {FLASHCL_LAYOUT_BHSD, 8, 3};
        ck_assert_int_eq((m->sk + 3) % 4, 0);
        ts_tensor_create(&tb, context, &aligned, 1, 1, (size_t)m->sq, (size_t)m->sk, FLASHCL_DTYPE_F32, bias);
        ex.bias = tb.view, ex.bias_batch = 1, ex.bias_heads = 1, ex.bias_dtype = FLASHCL_DTYPE_F32;
        mods.bias = bias, mods.bias_batch = 1, mods.bias_heads = 1;
        staged = 1;
    } else if (m->bias == BIAS_BATCH_UNALIGNED || m->bias == BIAS_FULL_STORAGE) {
        const int bb = m->batch, bh = m->bias == BIAS_FULL_STORAGE ? m->hq : 1;
        bias = random_plane((size_t)bb * (size_t)bh * plane, 710u + (uint64_t)_i, -3.0f, 3.0f, m->dtype);
        const ts_placement contiguous = {FLASHCL_LAYOUT_BHSD, 0, 0};
        ts_tensor_create(&tb, context, &contiguous, (size_t)bb, (size_t)bh, (size_t)m->sq, (size_t)m->sk, m->dtype,
                         bias);
        ex.bias = tb.view, ex.bias_batch = bb, ex.bias_heads = bh, ex.bias_dtype = m->dtype;
        mods.bias = bias, mods.bias_batch = bb, mods.bias_heads = bh;
        staged = m->sk % 8 == 0;
        ck_assert_int_eq(staged, m->bias == BIAS_FULL_STORAGE);
    } else if (m->bias == BIAS_ZERO_STRIDES) {
        bias = random_plane(plane, 720u + (uint64_t)_i, -2.0f, 2.0f, FLASHCL_DTYPE_F32);
        const size_t heads = (size_t)m->batch * (size_t)m->hq;
        expanded = malloc(heads * plane * sizeof *expanded);
        ck_assert_ptr_nonnull(expanded);
        for (size_t bh = 0; bh < heads; ++bh) memcpy(expanded + bh * plane, bias, plane * sizeof *bias);
        zero_stride = ts_buffer(context, plane * sizeof *bias, bias);
        ex.bias = (flashcl_tensor){zero_stride, 0, 0, 0, (size_t)m->sk};
        ex.bias_batch = m->batch, ex.bias_heads = m->hq, ex.bias_dtype = FLASHCL_DTYPE_F32;
        mods.bias = expanded, mods.bias_batch = m->batch, mods.bias_heads = m->hq;
        staged = m->sk % 4 == 0;
    }
    fh_result r;
    fh_run_ex(ctx, &c, &in, 0, &ex, &r);
    const flashcl_call_stats s = ts_last_stats(ctx);
    ck_assert_msg((strcmp(s.backend, "nvidia-wgmma") == 0) == sm90, "%s: backend \"%s\" (program %s), expected %s the "
                  "wgmma kernel", m->name, s.backend, s.program, sm90 ? "" : "not");
    if (sm90) {
        ck_assert_str_eq(s.program, "forward_wgmma.cl");
        const int defines[4] = {m->softcap > 0.0f, m->alibi, m->bias != BIAS_NONE, staged};
        static const char *const names[4] = {"-DFLASHCL_SOFTCAP=1", "-DFLASHCL_ALIBI=1", "-DFLASHCL_BIAS=1",
                                             "-DFLASHCL_BIAS_STAGED=1"};
        for (int i = 0; i < 4; ++i)
            ck_assert_msg((strstr(s.build_options, names[i]) != NULL) == defines[i], "%s: options \"%s\" %s %s",
                          m->name, s.build_options, defines[i] ? "lack" : "have", names[i]);
    }
    uint8_t *mask = fh_dense_mask(&c);
    fh_check_ex(&c, &in, &r, 0, mask, NULL, &mods);
    free(mask);
    fh_result_free(&r);
    if (tb.view.buffer) ts_tensor_free(&tb);
    if (zero_stride) clReleaseMemObject(zero_stride);
    free(bias), free(expanded);
    fh_inputs_free(&in);
    flashcl_context_free(ctx);
}
END_TEST

static Suite *wgmma_suite(void) {
    Suite *s = suite_create("forward_wgmma");
    TCase *tc = tcase_create("wgmma");
    tcase_set_timeout(tc, TS_CASE_TIMEOUT);
    tcase_add_loop_test(tc, test_half_sweep, 0, SWEEP_COUNT);
    tcase_add_loop_test(tc, test_bfloat16_sweep, 0, SWEEP_COUNT);
    tcase_add_loop_test(tc, test_large_logits, 0, 2);
    tcase_add_loop_test(tc, test_not_taken, 0, 5);
    tcase_add_test(tc, test_repeatable);
    tcase_add_test(tc, test_mode_setter);
    tcase_add_loop_test(tc, test_modifiers, 0, MOD_COUNT);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    ts_sweep_announce("forward_wgmma");
    flashcl_context *ctx = NULL;
    if (flashcl_context_create(&ctx, NULL) == FLASHCL_SUCCESS) {
        if (!ts_device_is_sm90(ctx))
            printf("forward_wgmma: not an sm_90 device: the sweep's first %d cases check the fallback; the other "
                   "cases and those of more than %d keys (a modifier case) run on an sm_90 device only\n",
                   CPU_FALLBACK_CASES, CPU_MAX_KEYS);
        flashcl_context_free(ctx);
    }
    SRunner *runner = srunner_create(wgmma_suite());
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
