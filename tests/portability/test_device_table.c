/* test_device_table.c: the dispatcher against the limits real devices report (clinfo, rocminfo, deviceQuery; the
 * source of each row beside it): for every pass, head dim 1..FLASHCL_MAX_HEAD_DIM and storage type a plan exists,
 * fits the device, is self-consistent, and is the documented choice. No OpenCL device. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "dispatch.h"
#include "register_budget.h"

/* tuned_plans.c (the dispatcher's second choice; internal, declared where it is used). */
int flashcl_tuned_plan(const flashcl_device_caps *caps, flashcl_pass pass, const flashcl_attention_desc *desc,
                       flashcl_plan *plan);

typedef struct real_device {
    const char *name; /* CL_DEVICE_NAME (tuned plans match on it) */
    flashcl_vendor vendor;
    int compute_capability;
    size_t local_mem_bytes, max_work_group_size;
    unsigned compute_units;
    int subgroup_width, loop_limited;
    /* The documented choice, stated: whether f16 at head dim 64 runs on matrix units, and the tiles
     * (block_q x block_k, threads_q x threads_k) of a forward f32 d64, a forward f16 d128 and a backward f32 d64
     * call. */
    int matrix_units;
    const char *forward_f32_d64, *forward_f16_d128, *backward_f32_d64;
} real_device;

static const real_device devices[] = {
    /* AMD Instinct MI250 (gfx90a), one GCD. ROCm OpenCL clinfo: max work-group 256 (ROCm's OpenCL default; rocminfo
     * says 1024) in openmm/openmm#3940; 104 CUs, wave64 in rocminfo (ROCm/rocm_smi_lib#160); 64 KiB LDS. */
    {"gfx90a:sramecc+:xnack-", FLASHCL_VENDOR_AMD, 0, 65536, 256, 104, 64, 0, 0, "128x16 8x16", "64x16 8x16",
     "16x64 4x32"},
    /* AMD Instinct MI300X (gfx942): 304 CUs, 64 KiB LDS, work-groups of 1024, wave64 (AMD's MI300X data sheet and
     * CDNA3 ISA guide; no public clinfo found: the row takes rocminfo's work-group limit, the larger one). */
    {"gfx942:sramecc+:xnack-", FLASHCL_VENDOR_AMD, 0, 65536, 1024, 304, 64, 0, 0, "128x16 8x16", "64x16 8x16",
     "16x64 4x32"},
    /* AMD Radeon RX 7900 XTX (gfx1100), rocminfo: 96 CUs, wave32, work-group 1024 (ollama/ollama#3158,
     * ROCm/Tensile#1935); 64 KiB local memory. Wave32 is RDNA's register budget (src/register_budget.c): the
     * forward d64 keeps 8 rows per work-item (16x8 work-items) where the CDNA rows above hold 16 (8x16). */
    {"gfx1100", FLASHCL_VENDOR_AMD, 0, 65536, 1024, 96, 32, 0, 0, "128x16 16x8", "64x16 8x16", "16x64 4x32"},
    /* Intel Arc A770 (acm-g10), compute-runtime clinfo: 512 compute units (EUs), local 64 KiB, work-group 1024,
     * sub-groups 8/16/32 (intel/compute-runtime#618; the A750's in openvinotoolkit/openvino#20012). */
    {"Intel(R) Arc(TM) A770 Graphics", FLASHCL_VENDOR_INTEL, 0, 65536, 1024, 512, 16, 0, 0, "128x16 8x16",
     "64x16 8x16", "16x64 4x32"},
    /* Intel Data Center GPU Max 1550 (pvc), one stack: local 128 KiB, 512 compute units, work-group 1024,
     * sub-groups 16/32 (intel/torch-xpu-ops#3585, _XpuDeviceProperties). */
    {"Intel(R) Data Center GPU Max 1550", FLASHCL_VENDOR_INTEL, 0, 131072, 1024, 512, 16, 0, 0, "128x32 4x32",
     "64x64 4x32", "32x128 4x32"},
    /* NVIDIA A100-SXM4-40GB, deviceQuery: 108 SMs, 49152 bytes of shared memory per block, 1024 threads, sm_80
     * (bottlerocket-os/bottlerocket#3873); NVIDIA's OpenCL reports the same 48 KiB and 1024. */
    {"NVIDIA A100-SXM4-40GB", FLASHCL_VENDOR_NVIDIA, 80, 49152, 1024, 108, 32, 0, 1, "64x32 8x16", "64x64 4x32",
     "32x32 4x32"},
    /* NVIDIA H100 80GB HBM3, `flashcl devices` on the H100 this project measured on
     * (docs/results/h100/dispatcher/devices.txt): 132 units, local 49152, work-group 1024, sm_90. */
    {"NVIDIA H100 80GB HBM3", FLASHCL_VENDOR_NVIDIA, 90, 49152, 1024, 132, 32, 0, 1, "64x32 8x8", "64x64 4x32",
     "32x32 16x8"},
    /* NVIDIA H200, `flashcl devices` on the H200 this project measured on
     * (docs/results/h200/final_check_2026-11-28-s11/device.txt): the H100's limits, and its measured plans. */
    {"NVIDIA H200", FLASHCL_VENDOR_NVIDIA, 90, 49152, 1024, 132, 32, 0, 1, "64x32 8x8", "64x64 4x32", "32x32 16x8"},
    /* NVIDIA GeForce RTX 4090: 128 compute units (OpenCL, krrishnarraj/clpeak#106), 49152 bytes per block and 1024
     * threads (deviceQuery, aikitoria/open-gpu-kernel-modules#1), sm_89. */
    {"NVIDIA GeForce RTX 4090", FLASHCL_VENDOR_NVIDIA, 89, 49152, 1024, 128, 32, 0, 1, "64x32 8x16", "64x64 4x32",
     "32x32 4x32"},
    /* Apple M1 Pro (the Apple-like 32 KiB device): local 32 KB, work-group 256, 14 compute units
     * (GPGPUCourse/GPGPUTasks2025#43, enumDevices on macOS). */
    {"Apple M1 Pro", FLASHCL_VENDOR_OTHER, 0, 32768, 256, 14, 32, 0, 0, "32x32 8x16", "16x16 8x16", "16x32 4x32"},
    /* POCL 3.1 (Debian 12, pthread), clinfo on this project's CI machine: local 1 MiB, work-group 4096. */
    {"pthread-skylake-avx512-AMD EPYC", FLASHCL_VENDOR_OTHER, 0, 1048576, 4096, 2, 8, 0, 0, "128x32 4x32",
     "64x64 4x32", "32x128 4x32"},
    /* Mesa rusticl 23 on llvmpipe (Debian 12), clinfo on the same machine: local 32 KiB, work-group 1024, 8 units;
     * llvmpipe's loop limit (device_caps.h). */
    {"llvmpipe (LLVM 15.0.6, 256 bits)", FLASHCL_VENDOR_OTHER, 0, 32768, 1024, 8, 32, 1, 0, "32x32 8x16",
     "16x16 8x16", "16x32 4x32"},
};

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static flashcl_device_caps caps_of(const real_device *d) {
    flashcl_device_caps c;
    memset(&c, 0, sizeof c);
    c.limits = (flashcl_device_limits){sizeof(flashcl_device_limits), d->local_mem_bytes, d->max_work_group_size, (size_t)d->subgroup_width,
                                       d->compute_units, 0};
    snprintf(c.name, sizeof c.name, "%s", d->name);
    c.vendor = d->vendor;
    c.compute_capability = d->compute_capability;
    c.subgroup_width = d->subgroup_width;
    c.loop_limited = d->loop_limited;
    return c;
}

/* A dense prefill call with the library's default settings. */
static flashcl_status plan_for(const flashcl_device_caps *caps, flashcl_pass pass, int head_dim, flashcl_dtype dtype,
                               flashcl_exec_plan *plan, char *reason, size_t size) {
    flashcl_attention_desc desc;
    flashcl_attention_desc_init(&desc, 4, 16, 2048, 2048, head_dim);
    desc.heads_kv = 4;
    desc.dtype = dtype;
    desc.causal = 1;
    flashcl_features f;
    ck_assert_int_eq(flashcl_features_resolve(NULL, &desc, NULL, &f), FLASHCL_SUCCESS);
    flashcl_settings s;
    memset(&s, 0, sizeof s);
    s.impl = FLASHCL_IMPL_FLASH;
    s.tensor_cores = FLASHCL_TENSOR_CORES_AUTO;
    s.f32_precision = FLASHCL_F32_FULL;
    const flashcl_problem p = {pass, &desc, &f, 8, 8, 0, 0};
    return flashcl_dispatch(caps, &s, &p, plan, reason, size);
}

static void tiles_text(const flashcl_plan *t, char *out, size_t size) {
    snprintf(out, size, "%dx%d %dx%d", t->block_q, t->block_k, t->threads_q, t->threads_k);
}

/* The documented choice (src/dispatch.c, docs/architecture.md "The path of one call"): the matrix-unit kernels
 * when a backend AUTO takes exists for the device (NVIDIA sm_80+), the storage is 16-bit (float needs 3xTF32,
 * off by default), head_dim is a multiple of 16 up to 128 and their tiles fit; else the portable kernels with the
 * device's measured plan (tuned_plans.c) if it has one, else the planner's within the device's register budget
 * (flashcl_plan_choose with the default budget everywhere but RDNA: src/register_budget.c). */
static void check_choice(const real_device *d, const flashcl_device_caps *caps, flashcl_pass pass, int head_dim,
                         flashcl_dtype dtype, const flashcl_exec_plan *plan) {
    const flashcl_plan *t = &plan->tiles;
    const char *what = pass == FLASHCL_PASS_FORWARD ? "forward" : "backward";
    flashcl_plan mma;
    const int matrix = d->matrix_units && dtype != FLASHCL_DTYPE_F32 && head_dim % 16 == 0 && head_dim <= 128 &&
                       flashcl_mma_choose_tiles(caps, flashcl_mma_backend_select(caps, FLASHCL_TENSOR_CORES_AUTO),
                                                pass, head_dim, dtype, 0, &mma);
    if (matrix) {
        ck_assert_msg(plan->kind == FLASHCL_KERNEL_TENSOR_CORE, "%s %s d%d dtype %d: kind %d, matrix units expected",
                      d->name, what, head_dim, (int)dtype, (int)plan->kind);
        ck_assert_msg(memcmp(&mma, t, sizeof mma) == 0, "%s %s d%d: tiles are not the backend's", d->name, what,
                      head_dim);
        return;
    }
    ck_assert_msg(plan->kind == FLASHCL_KERNEL_PORTABLE, "%s %s d%d dtype %d: kind %d, portable expected", d->name,
                  what, head_dim, (int)dtype, (int)plan->kind);
    flashcl_attention_desc desc;
    flashcl_attention_desc_init(&desc, 4, 16, 2048, 2048, head_dim);
    desc.dtype = dtype;
    flashcl_plan expected;
    const flashcl_register_budget budget = flashcl_register_budget_of(caps);
    if (!flashcl_tuned_plan(caps, pass, &desc, &expected)) {
        /* Every device but RDNA: the public planner's own choice. */
        const flashcl_status status =
            memcmp(&budget, &flashcl_register_budget_default, sizeof budget) == 0
                ? flashcl_plan_choose(&caps->limits, pass, head_dim, dtype, 1, &expected)
                : flashcl_plan_choose_within(&caps->limits, &budget, pass, head_dim, dtype, 1, &expected);
        ck_assert_int_eq(status, FLASHCL_SUCCESS);
    }
    ck_assert_msg(memcmp(&expected, t, sizeof expected) == 0, "%s %s d%d dtype %d: tiles are not the documented ones",
                  d->name, what, head_dim, (int)dtype);
}

/* Every plan fits the device and agrees with itself. */
static void check_constraints(const real_device *d, const flashcl_device_caps *caps, flashcl_pass pass, int head_dim,
                              flashcl_dtype dtype, const flashcl_exec_plan *plan) {
    const flashcl_plan *t = &plan->tiles;
    ck_assert_msg(t->work_group_size == (size_t)t->threads_q * (size_t)t->threads_k, "%s d%d", d->name, head_dim);
    ck_assert_msg(t->work_group_size <= d->max_work_group_size, "%s d%d: work-group %zu > %zu", d->name, head_dim,
                  t->work_group_size, d->max_work_group_size);
    ck_assert_msg(t->local_mem_bytes > 0 && t->local_mem_bytes <= d->local_mem_bytes, "%s d%d: local %zu > %zu",
                  d->name, head_dim, t->local_mem_bytes, d->local_mem_bytes);
    ck_assert_int_eq(t->block_q % t->threads_q, 0);
    ck_assert_int_eq(t->block_k % t->threads_k, 0);
    if (plan->kind == FLASHCL_KERNEL_PORTABLE) { /* the planner's own check agrees, local memory included */
        const flashcl_device_limits limits = {sizeof(flashcl_device_limits), d->local_mem_bytes,
                                              d->max_work_group_size, 0, 0, 0};
        flashcl_plan again = *t;
        char why[256];
        ck_assert_msg(flashcl_plan_check(&limits, pass, head_dim, dtype, &again, why, sizeof why) == FLASHCL_SUCCESS,
                      "%s d%d: %s", d->name, head_dim, why);
        ck_assert_uint_eq(again.local_mem_bytes, t->local_mem_bytes);
        /* and so does the device's register budget (RDNA's is narrower than the public check's) */
        const flashcl_register_budget budget = flashcl_register_budget_of(caps);
        ck_assert_msg(flashcl_plan_check_within(&limits, &budget, pass, head_dim, dtype, &again, why, sizeof why) ==
                          FLASHCL_SUCCESS,
                      "%s d%d: %s", d->name, head_dim, why);
    }
    for (int k = 0; k < plan->kernel_count; ++k) {
        ck_assert_ptr_nonnull(plan->kernel_names[k]);
        size_t group = 1;
        for (cl_uint x = 0; x < plan->work_dims[k]; ++x) {
            ck_assert_uint_eq(plan->global[k][x] % plan->local[k][x], 0);
            group *= plan->local[k][x];
        }
        ck_assert_msg(group <= d->max_work_group_size, "%s d%d kernel %d: work-group %zu", d->name, head_dim, k,
                      group);
    }
}

START_TEST(every_device_every_shape) {
    const real_device *d = &devices[_i];
    const flashcl_device_caps caps = caps_of(d);
    for (int pass = 0; pass < 2; ++pass)
        for (int head_dim = 1; head_dim <= FLASHCL_MAX_HEAD_DIM; ++head_dim)
            for (int dt = 0; dt < 3; ++dt) {
                flashcl_exec_plan plan;
                char reason[512] = "";
                const flashcl_status status =
                    plan_for(&caps, (flashcl_pass)pass, head_dim, (flashcl_dtype)dt, &plan, reason, sizeof reason);
                ck_assert_msg(status == FLASHCL_SUCCESS, "%s pass %d d%d dtype %d: no plan: %s", d->name, pass,
                              head_dim, dt, reason);
                check_constraints(d, &caps, (flashcl_pass)pass, head_dim, (flashcl_dtype)dt, &plan);
                check_choice(d, &caps, (flashcl_pass)pass, head_dim, (flashcl_dtype)dt, &plan);
            }
}
END_TEST

/* The stated expectations of each row: matrix units or not, and two plans' tiles, as a reader would look them up. */
START_TEST(stated_choices) {
    const real_device *d = &devices[_i];
    const flashcl_device_caps caps = caps_of(d);
    flashcl_exec_plan plan;
    char reason[512] = "", tiles[64];
    ck_assert_int_eq(plan_for(&caps, FLASHCL_PASS_FORWARD, 64, FLASHCL_DTYPE_F16, &plan, reason, sizeof reason),
                     FLASHCL_SUCCESS);
    ck_assert_msg((plan.kind == FLASHCL_KERNEL_TENSOR_CORE) == d->matrix_units, "%s: f16 d64 kind %d", d->name,
                  (int)plan.kind);
    ck_assert_int_eq(plan_for(&caps, FLASHCL_PASS_FORWARD, 64, FLASHCL_DTYPE_F32, &plan, reason, sizeof reason),
                     FLASHCL_SUCCESS);
    tiles_text(&plan.tiles, tiles, sizeof tiles);
    ck_assert_msg(strcmp(tiles, d->forward_f32_d64) == 0, "%s forward f32 d64: %s, stated %s", d->name, tiles,
                  d->forward_f32_d64);
    ck_assert_int_eq(plan_for(&caps, FLASHCL_PASS_FORWARD, 128, FLASHCL_DTYPE_F16, &plan, reason, sizeof reason),
                     FLASHCL_SUCCESS);
    tiles_text(&plan.tiles, tiles, sizeof tiles);
    ck_assert_msg(strcmp(tiles, d->forward_f16_d128) == 0, "%s forward f16 d128: %s, stated %s", d->name, tiles,
                  d->forward_f16_d128);
    ck_assert_int_eq(plan_for(&caps, FLASHCL_PASS_BACKWARD, 64, FLASHCL_DTYPE_F32, &plan, reason, sizeof reason),
                     FLASHCL_SUCCESS);
    tiles_text(&plan.tiles, tiles, sizeof tiles);
    ck_assert_msg(strcmp(tiles, d->backward_f32_d64) == 0, "%s backward f32 d64: %s, stated %s", d->name, tiles,
                  d->backward_f32_d64);
}
END_TEST

int main(void) {
    Suite *s = suite_create("portability_device_table");
    TCase *tc = tcase_create("real devices");
    /* A row plans both passes at every head dim and storage type: 0.1 s of CPU, yet past check's 4 s default
     * on the shared 2-core machine under load (CTest's 120 s stays the bound). */
    tcase_set_timeout(tc, 100);
    tcase_add_loop_test(tc, every_device_every_shape, 0, COUNT(devices));
    tcase_add_loop_test(tc, stated_choices, 0, COUNT(devices));
    suite_add_tcase(s, tc);
    SRunner *runner = srunner_create(s);
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? 0 : 1;
}
