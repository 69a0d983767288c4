/* test_register_budget.c: the planner within a device's register budget (src/register_budget.c): RDNA (AMD, wave32)
 * keeps the forward's per-work-item state within its 256 VGPRs, every other device plans exactly as the public
 * flashcl_plan_choose does. Made-up devices, no OpenCL device. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "dispatch.h"
#include "register_budget.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define OTHER_DEVICES 9 /* the rows of other_devices_unchanged */

/* tuned_plans.c (the dispatcher's choice before the planner's; internal, declared where it is used). */
int flashcl_tuned_plan(const flashcl_device_caps *caps, flashcl_pass pass, const flashcl_attention_desc *desc,
                       flashcl_plan *plan);

static flashcl_device_caps device(flashcl_vendor vendor, int cc, int subgroup_width, size_t local, size_t group,
                                  const char *name) {
    flashcl_device_caps c;
    memset(&c, 0, sizeof c);
    c.limits = (flashcl_device_limits){sizeof(flashcl_device_limits), local, group, 32, 64, 0};
    snprintf(c.name, sizeof c.name, "%s", name);
    c.vendor = vendor;
    c.compute_capability = cc;
    c.subgroup_width = subgroup_width;
    c.loop_limited = strstr(name, "llvmpipe") != NULL;
    return c;
}

/* The RX 6800/6900 (gfx1030) and RX 7900 XTX (gfx1100) as ROCm reports them: 64 KiB, 1024, wave32. */
static flashcl_device_caps rdna(const char *name) { return device(FLASHCL_VENDOR_AMD, 0, 32, 64 * 1024, 1024, name); }

static int is_default(const flashcl_register_budget *b) {
    return memcmp(b, &flashcl_register_budget_default, sizeof *b) == 0;
}

/* The portable tiles the dispatcher picks for a dense causal call. */
static flashcl_plan dispatched_tiles(const flashcl_device_caps *caps, flashcl_pass pass, int head_dim,
                                     flashcl_dtype dtype) {
    flashcl_attention_desc desc;
    flashcl_attention_desc_init(&desc, 2, 8, 1024, 1024, head_dim);
    desc.dtype = dtype;
    desc.causal = 1;
    flashcl_features f;
    ck_assert_int_eq(flashcl_features_resolve(NULL, &desc, NULL, &f), FLASHCL_SUCCESS);
    flashcl_settings s;
    memset(&s, 0, sizeof s);
    s.impl = FLASHCL_IMPL_FLASH;
    s.tensor_cores = FLASHCL_TENSOR_CORES_OFF; /* the portable kernels on every device */
    const flashcl_problem p = {pass, &desc, &f, 8, 8, 0, 0};
    flashcl_exec_plan plan;
    char reason[512] = "";
    ck_assert_msg(flashcl_dispatch(caps, &s, &p, &plan, reason, sizeof reason) == FLASHCL_SUCCESS, "%s: %s",
                  caps->name, reason);
    ck_assert_int_eq(plan.kind, FLASHCL_KERNEL_PORTABLE);
    return plan.tiles;
}

/* Which devices get the narrower budget: AMD reporting wave32, and nothing else (wave64 CDNA, a device whose
 * wavefront is unknown, NVIDIA's and Apple's 32-wide warps, Intel, CPUs). */
START_TEST(rdna_alone_gets_the_narrow_budget) {
    const flashcl_device_caps narrow = rdna("gfx1030");
    const flashcl_register_budget b = flashcl_register_budget_of(&narrow);
    ck_assert(!is_default(&b));
    ck_assert_int_eq(b.accumulators, flashcl_register_budget_default.accumulators);
    ck_assert_int_eq(b.scores, flashcl_register_budget_default.scores);
    ck_assert_int_eq(b.rows, 8);
    ck_assert_int_eq(b.accumulators_past_rows, 32);
    const flashcl_device_caps others[] = {
        device(FLASHCL_VENDOR_AMD, 0, 64, 64 * 1024, 1024, "gfx90a:sramecc+:xnack-"),
        device(FLASHCL_VENDOR_AMD, 0, 0, 64 * 1024, 1024, "AMD Radeon RX 6800 (radeonsi, navi21)"),
        device(FLASHCL_VENDOR_NVIDIA, 90, 32, 48 * 1024, 1024, "NVIDIA H100 80GB HBM3"),
        device(FLASHCL_VENDOR_INTEL, 0, 16, 64 * 1024, 1024, "Intel(R) Arc(TM) A770 Graphics"),
        device(FLASHCL_VENDOR_OTHER, 0, 32, 32 * 1024, 256, "Apple M1 Pro"),
        device(FLASHCL_VENDOR_OTHER, 0, 0, 1024 * 1024, 4096, "pthread-skylake-avx512"),
    };
    for (int i = 0; i < COUNT(others); ++i) {
        const flashcl_register_budget o = flashcl_register_budget_of(&others[i]);
        ck_assert_msg(is_default(&o), "%s: not the default budget", others[i].name);
    }
}
END_TEST

/* The case that spilled (tests/portability, gfx1030): forward d64 on 64 KiB. The default budget admits 128x16
 * tiles on 8x16 work-items (16 rows per work-item) and the public planner picks them; RDNA's rejects them, saying
 * why, and its dispatcher picks the same 128x16 tiles on 16x8 work-items (8 rows, the same 64 accumulators). */
START_TEST(rdna_forward_d64_keeps_8_rows) {
    const flashcl_device_caps caps = rdna("gfx1030");
    const flashcl_register_budget b = flashcl_register_budget_of(&caps);
    flashcl_plan wide = {128, 16, 8, 16, 0, 0};
    char why[256];
    ck_assert_int_eq(flashcl_plan_check(&caps.limits, FLASHCL_PASS_FORWARD, 64, FLASHCL_DTYPE_F32, &wide, why,
                                        sizeof why),
                     FLASHCL_SUCCESS);
    ck_assert_int_eq(flashcl_plan_check_within(&caps.limits, &b, FLASHCL_PASS_FORWARD, 64, FLASHCL_DTYPE_F32, &wide,
                                               why, sizeof why),
                     FLASHCL_ERROR_PLAN);
    ck_assert_msg(strstr(why, "16 query rows") != NULL, "%s", why);
    flashcl_plan public_choice;
    ck_assert_int_eq(flashcl_plan_choose(&caps.limits, FLASHCL_PASS_FORWARD, 64, FLASHCL_DTYPE_F32, 1, &public_choice),
                     FLASHCL_SUCCESS);
    ck_assert_int_eq(public_choice.threads_q, 8); /* the public planner knows limits only: the default budget */
    for (int dt = 0; dt < 3; ++dt) {
        const flashcl_plan t = dispatched_tiles(&caps, FLASHCL_PASS_FORWARD, 64, (flashcl_dtype)dt);
        ck_assert_msg(t.block_q == 128 && t.block_k == 16 && t.threads_q == 16 && t.threads_k == 8,
                      "dtype %d: %dx%d on %dx%d", dt, t.block_q, t.block_k, t.threads_q, t.threads_k);
    }
    /* A forced plan is the caller's: checked as the public check does, so the wide tiles still run (slower). */
    flashcl_attention_desc desc;
    flashcl_attention_desc_init(&desc, 2, 8, 1024, 1024, 64);
    flashcl_features f;
    ck_assert_int_eq(flashcl_features_resolve(NULL, &desc, NULL, &f), FLASHCL_SUCCESS);
    flashcl_settings s;
    memset(&s, 0, sizeof s);
    s.impl = FLASHCL_IMPL_FLASH;
    s.forced_plan_set = 1;
    s.forced_plan = (flashcl_plan){128, 16, 8, 16, 0, 0};
    const flashcl_problem p = {FLASHCL_PASS_FORWARD, &desc, &f, 8, 8, 0, 0};
    flashcl_exec_plan plan;
    ck_assert_int_eq(flashcl_dispatch(&caps, &s, &p, &plan, why, sizeof why), FLASHCL_SUCCESS);
    ck_assert_int_eq(plan.tiles.threads_q, 8);
}
END_TEST

/* Every forward plan on RDNA, head dims 1-256: past 8 rows per work-item at most 32 accumulators; the backward
 * plans are the public planner's (the budget is the forward kernel's). */
START_TEST(rdna_plans_within_budget) {
    const flashcl_device_caps devices[] = {rdna("gfx1030"), rdna("gfx1100")};
    for (int i = 0; i < COUNT(devices); ++i)
        for (int d = 1; d <= FLASHCL_MAX_HEAD_DIM; ++d)
            for (int dt = 0; dt < 3; ++dt) {
                const flashcl_plan t = dispatched_tiles(&devices[i], FLASHCL_PASS_FORWARD, d, (flashcl_dtype)dt);
                const int rows = t.block_q / t.threads_q;
                const int accumulators = rows * ((d + t.threads_k - 1) / t.threads_k);
                ck_assert_msg(rows <= 8 || accumulators <= 32, "d%d: %d rows, %d accumulators", d, rows, accumulators);
                const flashcl_plan back = dispatched_tiles(&devices[i], FLASHCL_PASS_BACKWARD, d, (flashcl_dtype)dt);
                flashcl_plan expected;
                ck_assert_int_eq(flashcl_plan_choose(&devices[i].limits, FLASHCL_PASS_BACKWARD, d, (flashcl_dtype)dt,
                                                     1, &expected),
                                 FLASHCL_SUCCESS);
                ck_assert_msg(memcmp(&back, &expected, sizeof back) == 0, "backward d%d differs", d);
            }
}
END_TEST

/* What RDNA's budget changes (gfx1030, every storage type): head dims 53-64 alone, from 8x16 to 16x8 work-items
 * on the same 128x16 tiles (the VGPR figures: src/register_budget.c); every other head dim as the public planner
 * (32 rows of one column at head dims up to 32 are within it). */
START_TEST(rdna_changes_only_what_spilled) {
    const flashcl_device_caps caps = rdna("gfx1030");
    for (int dt = 0; dt < 3; ++dt)
        for (int d = 1; d <= FLASHCL_MAX_HEAD_DIM; ++d) {
            const flashcl_plan t = dispatched_tiles(&caps, FLASHCL_PASS_FORWARD, d, (flashcl_dtype)dt);
            flashcl_plan public_choice;
            ck_assert_int_eq(flashcl_plan_choose(&caps.limits, FLASHCL_PASS_FORWARD, d, (flashcl_dtype)dt, 1,
                                                 &public_choice),
                             FLASHCL_SUCCESS);
            if (d < 53 || d > 64) {
                ck_assert_msg(memcmp(&t, &public_choice, sizeof t) == 0, "d%d dtype %d changed", d, dt);
                continue;
            }
            ck_assert_msg(public_choice.block_q == 128 && public_choice.block_k == 16 && public_choice.threads_q == 8 &&
                              public_choice.threads_k == 16,
                          "d%d: the public planner's tiles moved: update this test and the budget's measurements", d);
            ck_assert_msg(t.block_q == 128 && t.block_k == 16 && t.threads_q == 16 && t.threads_k == 8,
                          "d%d dtype %d: %dx%d on %dx%d", d, dt, t.block_q, t.block_k, t.threads_q, t.threads_k);
        }
}
END_TEST

/* Every other device plans as before: the dispatcher's portable tiles are the public planner's (or the device's
 * tuned plan), for both passes, every head dim and storage type. One test per device. */
START_TEST(other_devices_unchanged) {
    const flashcl_device_caps all[] = {
        device(FLASHCL_VENDOR_AMD, 0, 64, 64 * 1024, 256, "gfx90a:sramecc+:xnack-"),
        device(FLASHCL_VENDOR_AMD, 0, 64, 64 * 1024, 1024, "gfx942:sramecc+:xnack-"),
        device(FLASHCL_VENDOR_AMD, 0, 0, 64 * 1024, 1024, "AMD Radeon RX 6800 (radeonsi, navi21)"),
        device(FLASHCL_VENDOR_NVIDIA, 90, 32, 48 * 1024, 1024, "NVIDIA H100 80GB HBM3"),
        device(FLASHCL_VENDOR_NVIDIA, 80, 32, 48 * 1024, 1024, "NVIDIA A100-SXM4-40GB"),
        device(FLASHCL_VENDOR_INTEL, 0, 16, 64 * 1024, 1024, "Intel(R) Arc(TM) A770 Graphics"),
        device(FLASHCL_VENDOR_OTHER, 0, 32, 32 * 1024, 256, "Apple M1 Pro"),
        device(FLASHCL_VENDOR_OTHER, 0, 8, 1024 * 1024, 4096, "pthread-skylake-avx512"),
        device(FLASHCL_VENDOR_OTHER, 0, 32, 32 * 1024, 1024, "llvmpipe (LLVM 15.0.6, 256 bits)"),
    };
    ck_assert_int_eq(COUNT(all), OTHER_DEVICES);
    const flashcl_device_caps *caps = &all[_i];
    for (int pass = 0; pass < 2; ++pass)
        for (int d = 1; d <= FLASHCL_MAX_HEAD_DIM; ++d)
            for (int dt = 0; dt < 3; ++dt) {
                const flashcl_plan t = dispatched_tiles(caps, (flashcl_pass)pass, d, (flashcl_dtype)dt);
                flashcl_attention_desc desc;
                flashcl_attention_desc_init(&desc, 2, 8, 1024, 1024, d);
                desc.dtype = (flashcl_dtype)dt;
                flashcl_plan expected;
                if (!flashcl_tuned_plan(caps, (flashcl_pass)pass, &desc, &expected))
                    ck_assert_int_eq(
                        flashcl_plan_choose(&caps->limits, (flashcl_pass)pass, d, (flashcl_dtype)dt, 1, &expected),
                        FLASHCL_SUCCESS);
                ck_assert_msg(memcmp(&t, &expected, sizeof t) == 0, "%s pass %d d%d dtype %d changed", caps->name,
                              pass, d, dt);
            }
}
END_TEST

int main(void) {
    Suite *s = suite_create("register_budget");
    TCase *tc = tcase_create("planner");
    /* Each test plans every head dim: seconds on the shared 2-core machine under load, past check's 4 s default
     * (CTest's 120 s stays the bound). */
    tcase_set_timeout(tc, 100);
    tcase_add_test(tc, rdna_alone_gets_the_narrow_budget);
    tcase_add_test(tc, rdna_forward_d64_keeps_8_rows);
    tcase_add_test(tc, rdna_plans_within_budget);
    tcase_add_test(tc, rdna_changes_only_what_spilled);
    tcase_add_loop_test(tc, other_devices_unchanged, 0, OTHER_DEVICES);
    suite_add_tcase(s, tc);
    SRunner *runner = srunner_create(s);
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? 0 : 1;
}
