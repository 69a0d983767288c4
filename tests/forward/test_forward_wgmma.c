/* test_forward_wgmma.c: the Hopper forward (cl/forward_wgmma.cl, warpgroup MMA through the sm_90a compile step)
 * against the double reference. On an NVIDIA GPU of compute capability 9.0 every call of the sweep must run it
 * (call stats: backend "nvidia-wgmma", program forward_wgmma.cl) and be right; with FLASHCL_WGMMA=0 the same calls
 * run the mma.sync kernel. Everywhere else (POCL, rusticl) the same calls must run another kernel (never the wgmma
 * one) and be right: the fallback. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test_support.h"

/* cl_nv_device_attribute_query: NVIDIA's compute capability. */
#define COMPUTE_CAPABILITY_MAJOR_NV 0x4000
#define COMPUTE_CAPABILITY_MINOR_NV 0x4001

/* Lengths around the kernel's 64-row warpgroups, 128-row work-groups and 64/128-key steps (1, 63, 64, 65, 200,
 * 1000, 4096), seqlen_q != seqlen_k both ways (causal with seqlen_q > seqlen_k: fully masked top rows), batches,
 * heads, GQA and MQA; head dims 64 and 128. */
static const ts_case sweep[] = {
    {1, 1, 1, 1, 1, 64, 0, 0, 1},          {1, 2, 2, 63, 63, 128, 1, 0, 1},     {1, 1, 1, 64, 64, 64, 1, 0, 1},
    {2, 2, 2, 65, 65, 128, 0, 0, 1},       {1, 2, 1, 200, 200, 64, 1, 0, 1},    {1, 2, 2, 1000, 1000, 128, 1, 0, 1},
    {1, 1, 1, 4096, 4096, 64, 1, 0, 1},    {1, 1, 1, 4096, 4096, 128, 0, 0, 1}, {1, 2, 2, 200, 63, 64, 1, 0, 1},
    {2, 4, 1, 65, 1000, 128, 1, 0, 1},     {1, 2, 2, 1, 200, 128, 1, 0, 1},     {1, 3, 1, 129, 77, 64, 0, 0.3f, 1},
    {1, 1, 1, 1000, 65, 128, 1, 0, 1},     {1, 2, 2, 128, 129, 64, 0, 0, 1},
};
#define SWEEP_COUNT ((int)(sizeof sweep / sizeof sweep[0]))

/* 1 on an NVIDIA GPU of compute capability 9.0 (where sm_90a code runs). No Check assertion: main() asks too. */
static int is_sm90(flashcl_context *ctx) {
    cl_device_id device = flashcl_context_device(ctx);
    char vendor[256] = "";
    if (clGetDeviceInfo(device, CL_DEVICE_VENDOR, sizeof vendor - 1, vendor, NULL) != CL_SUCCESS) return 0;
    if (!strstr(vendor, "NVIDIA")) return 0;
    cl_uint major = 0, minor = 0;
    if (clGetDeviceInfo(device, COMPUTE_CAPABILITY_MAJOR_NV, sizeof major, &major, NULL) != CL_SUCCESS ||
        clGetDeviceInfo(device, COMPUTE_CAPABILITY_MINOR_NV, sizeof minor, &minor, NULL) != CL_SUCCESS)
        return 0;
    return major == 9 && minor == 0;
}

/* A context whose forwards may run the wgmma kernel (wgmma "1") or not ("0"); the decode kernel off, so that
 * few-row calls reach the tiled kernels. */
static flashcl_context *wgmma_context(const char *wgmma) {
    ck_assert_int_eq(setenv("FLASHCL_WGMMA", wgmma, 1), 0);
    flashcl_context *ctx = ts_context();
    ck_assert_int_eq(flashcl_context_set_decode_kernel(ctx, 0), FLASHCL_SUCCESS);
    return ctx;
}

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

/* Each case in both 16-bit types, unless FLASHCL_TEST_SWEEP=diagonal (rusticl) thins it to one. */
static void run_case(const ts_case *c, flashcl_dtype dtype, uint64_t seed) {
    if (!ts_sweep_takes_variant((int)(c - sweep), dtype == FLASHCL_DTYPE_BF16, 2)) return;
    flashcl_context *ctx = wgmma_context("1");
    const int expected = is_sm90(ctx);
    if (!expected && c->seqlen_k > CPU_MAX_KEYS) {
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
    flashcl_context *ctx = wgmma_context("1");
    const int expected = is_sm90(ctx);
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
    flashcl_context *ctx = wgmma_context(_i == 0 ? "0" : "1");
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
    if (_i == 0 && is_sm90(ctx)) ck_assert_str_eq(ts_last_stats(ctx).backend, "nvidia-mma-sync");
    ts_problem_free(&p);
    flashcl_context_free(ctx);
}
END_TEST

/* Twice the same call writes the same bits. */
START_TEST(test_repeatable) {
    const ts_case c = {1, 2, 1, 300, 330, 128, 1, 0, 1};
    flashcl_context *ctx = wgmma_context("1");
    const int expected = is_sm90(ctx);
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
    flashcl_context *ctx = wgmma_context("0");
    const int sm90 = is_sm90(ctx);
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
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    ts_sweep_announce("forward_wgmma");
    flashcl_context *ctx = NULL;
    if (flashcl_context_create(&ctx, NULL) == FLASHCL_SUCCESS) {
        if (!is_sm90(ctx))
            printf("forward_wgmma: not an sm_90 device: the sweep's cases of more than %d keys (the N = 4096 ones) "
                   "run on the H100 only\n",
                   CPU_MAX_KEYS);
        flashcl_context_free(ctx);
    }
    SRunner *runner = srunner_create(wgmma_suite());
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
