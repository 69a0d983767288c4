/* test_dispatch.c: the dispatcher as a pure function: made-up devices (vendor, compute capability, local memory,
 * work-group limits), context settings and problems in, execution plans out; no OpenCL device. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "dispatch.h"
#include "wgmma_plan.h"

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* An H100 as its OpenCL driver reports it: 48 KiB local memory, 1024-wide work-groups, sm_90. */
static flashcl_device_caps h100(void) {
    flashcl_device_caps c;
    memset(&c, 0, sizeof c);
    c.limits = (flashcl_device_limits){sizeof(flashcl_device_limits), 48 * 1024, 1024, 32, 132, 0};
    snprintf(c.name, sizeof c.name, "NVIDIA H100 80GB HBM3");
    c.vendor = FLASHCL_VENDOR_NVIDIA;
    c.compute_capability = 90;
    c.subgroup_width = 32;
    return c;
}

static flashcl_device_caps device(flashcl_vendor vendor, int cc, size_t local, size_t group, const char *name) {
    flashcl_device_caps c;
    memset(&c, 0, sizeof c);
    c.limits = (flashcl_device_limits){sizeof(flashcl_device_limits), local, group, 32, 64, 0};
    snprintf(c.name, sizeof c.name, "%s", name);
    c.vendor = vendor;
    c.compute_capability = cc;
    c.loop_limited = strstr(name, "llvmpipe") != NULL;
    return c;
}

static flashcl_settings defaults(void) {
    flashcl_settings s;
    memset(&s, 0, sizeof s);
    s.impl = FLASHCL_IMPL_FLASH;
    s.tensor_cores = FLASHCL_TENSOR_CORES_AUTO;
    s.f32_precision = FLASHCL_F32_FULL;
    return s;
}

static flashcl_attention_desc problem_desc(int n, int d, flashcl_dtype dtype, int causal) {
    flashcl_attention_desc desc;
    flashcl_attention_desc_init(&desc, 2, 8, n, n, d);
    desc.dtype = dtype;
    desc.heads_kv = 2;
    desc.causal = causal;
    return desc;
}

static flashcl_features dense(const flashcl_attention_desc *desc) {
    flashcl_features f;
    ck_assert_int_eq(flashcl_features_resolve(NULL, desc, NULL, &f), FLASHCL_SUCCESS);
    return f;
}

static flashcl_exec_plan dispatch_ok(const flashcl_device_caps *caps, const flashcl_settings *s, flashcl_pass pass,
                                     const flashcl_attention_desc *desc, const flashcl_features *f, int alignment) {
    const flashcl_problem p = {pass, desc, f, alignment, alignment, 0, 0};
    flashcl_exec_plan plan;
    char reason[512] = "";
    const flashcl_status status = flashcl_dispatch(caps, s, &p, &plan, reason, sizeof reason);
    ck_assert_msg(status == FLASHCL_SUCCESS, "dispatch failed: %s", reason);
    return plan;
}

/* f16 on an H100: the tensor-core kernels on mma.sync, with the tiles, options and grid that were timed
 * (docs/perf.md), and the same plan reported. */
START_TEST(h100_f16_runs_tensor_cores) {
    const flashcl_device_caps caps = h100();
    const flashcl_settings s = defaults();
    const flashcl_attention_desc desc = problem_desc(1000, 64, FLASHCL_DTYPE_F16, 1);
    const flashcl_features f = dense(&desc);
    flashcl_exec_plan fwd = dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &desc, &f, 8);
    ck_assert_int_eq(fwd.kind, FLASHCL_KERNEL_TENSOR_CORE);
    ck_assert_str_eq(fwd.backend->name, "nvidia-mma-sync");
    ck_assert_str_eq(fwd.program, "forward_mma.cl");
    ck_assert_str_eq(fwd.kernel_names[0], "flashcl_forward_mma");
    ck_assert_str_eq(fwd.options, "-DFLASHCL_DTYPE=1 -DHEAD_DIM=64 -DBLOCK_Q=64 -DBLOCK_K=128 -DM_TILES=1 "
                                  "-DFLASHCL_MMA_PTX=1 -DTF32_SMALL_ROUNDED=0");
    ck_assert_int_eq(fwd.tiles.block_q, 64);
    ck_assert_int_eq(fwd.tiles.threads_q, 4);
    ck_assert_int_eq(fwd.tiles.threads_k, 32);
    ck_assert_uint_eq(fwd.global[0][0], 16 * 128); /* ceil(1000 / 64) work-groups of 128 */
    ck_assert_uint_eq(fwd.global[0][1], 16);
    ck_assert_uint_eq(fwd.extra_device_bytes, 0);
    ck_assert(fwd.predicted_global_bytes > 0);

    flashcl_exec_plan bwd = dispatch_ok(&caps, &s, FLASHCL_PASS_BACKWARD, &desc, &f, 8);
    ck_assert_int_eq(bwd.kind, FLASHCL_KERNEL_TENSOR_CORE);
    ck_assert_str_eq(bwd.options, "-DFLASHCL_DTYPE=1 -DHEAD_DIM=64 -DWARPS=4 -DBLOCK_Q=32 -DBLOCK_K=32 "
                                  "-DFLASHCL_MMA_PTX=1");
    ck_assert_str_eq(bwd.kernel_names[FLASHCL_KERNEL_DKDV], "flashcl_backward_mma_dkdv");
    ck_assert_str_eq(bwd.kernel_names[FLASHCL_KERNEL_DELTA], "flashcl_backward_delta");
    ck_assert_str_eq(bwd.kernel_programs[FLASHCL_KERNEL_DELTA], "backward_delta.cl");
    ck_assert_uint_eq(bwd.delta_rows, 2 * 8 * 1000);
    ck_assert_uint_eq(bwd.extra_device_bytes, 2 * 8 * 1000 * sizeof(float));
    ck_assert_uint_eq(bwd.global[FLASHCL_KERNEL_DKDV][0], 16 * 128); /* 64 keys per work-group */
    ck_assert_uint_eq(bwd.global[FLASHCL_KERNEL_DKDV][1], 2 * 2);
    ck_assert_uint_eq(bwd.global[FLASHCL_KERNEL_DQ][1], 2 * 8);
    ck_assert_uint_eq(bwd.global[FLASHCL_KERNEL_DELTA][0] % bwd.local[FLASHCL_KERNEL_DELTA][0], 0);

    flashcl_call_stats stats;
    flashcl_exec_plan_report(&fwd, &stats);
    ck_assert_int_eq(stats.kernel, FLASHCL_KERNEL_TENSOR_CORE);
    ck_assert_str_eq(stats.backend, "nvidia-mma-sync");
    ck_assert_str_eq(stats.program, "forward_mma.cl");
    ck_assert_str_eq(stats.build_options, fwd.options);
    ck_assert_int_eq(stats.plan.block_k, fwd.tiles.block_k);
    ck_assert(stats.predicted_global_bytes == fwd.predicted_global_bytes);
}
END_TEST

/* fp32 on the H100: float throughout (the portable kernel, with the tuned plan) unless 3xTF32 is asked for. */
START_TEST(h100_f32_needs_3xtf32) {
    const flashcl_device_caps caps = h100();
    flashcl_settings s = defaults();
    s.kv_splits = 1; /* 512 work-groups would not fill the H100's 132 x 4: this is about the kernel, not the split */
    const flashcl_attention_desc desc = problem_desc(2048, 64, FLASHCL_DTYPE_F32, 0);
    const flashcl_features f = dense(&desc);
    flashcl_exec_plan plan = dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &desc, &f, 8);
    ck_assert_int_eq(plan.kind, FLASHCL_KERNEL_PORTABLE);
    ck_assert_ptr_null(plan.backend);
    ck_assert_str_eq(plan.program, "forward.cl");
    /* The H100's tuned forward plan for f32 d64 (tuned_plans.c). */
    ck_assert_int_eq(plan.tiles.block_q, 64);
    ck_assert_int_eq(plan.tiles.block_k, 32);
    ck_assert_str_eq(plan.options,
                     "-DFLASHCL_DTYPE=0 -DHEAD_DIM=64 -DBLOCK_Q=64 -DBLOCK_K=32 -DTHREADS_Q=8 -DTHREADS_K=8 -DKV_VEC4=1");
    s.f32_precision = FLASHCL_F32_3XTF32;
    plan = dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &desc, &f, 8);
    ck_assert_int_eq(plan.kind, FLASHCL_KERNEL_TENSOR_CORE);
    ck_assert_int_eq(plan.tiles.block_k, 32); /* block_k x head_dim <= 2048 for float */
    /* d128: the tuned plan needs the static local memory past 48 KiB (81 KB): taken where the device has it,
     * the planner's 48 KiB plan otherwise. */
    s.f32_precision = FLASHCL_F32_FULL;
    const flashcl_attention_desc d128 = problem_desc(2048, 128, FLASHCL_DTYPE_F32, 0);
    const flashcl_features f128 = dense(&d128);
    plan = dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &d128, &f128, 8);
    ck_assert_int_eq(plan.kind, FLASHCL_KERNEL_PORTABLE);
    ck_assert_uint_le(plan.tiles.local_mem_bytes, 48 * 1024);
    flashcl_device_caps with_static = caps;
    with_static.limits.static_local_mem_bytes = 226 * 1024;
    plan = dispatch_ok(&with_static, &s, FLASHCL_PASS_FORWARD, &d128, &f128, 8);
    ck_assert_int_eq(plan.tiles.block_q, 64);
    ck_assert_int_eq(plan.tiles.block_k, 32);
    ck_assert_int_eq(plan.tiles.threads_q, 8);
    ck_assert_int_eq(plan.tiles.threads_k, 16);
    ck_assert_uint_gt(plan.tiles.local_mem_bytes, 48 * 1024);
    /* The backward the same way: d128 16x64 blocks (95 KB) with the static local memory, the 48 KiB entry
     * 8,32,8,16 without it. */
    plan = dispatch_ok(&with_static, &s, FLASHCL_PASS_BACKWARD, &d128, &f128, 8);
    ck_assert_int_eq(plan.kind, FLASHCL_KERNEL_PORTABLE);
    ck_assert_int_eq(plan.tiles.block_q, 16);
    ck_assert_int_eq(plan.tiles.block_k, 64);
    ck_assert_uint_gt(plan.tiles.local_mem_bytes, 48 * 1024);
    plan = dispatch_ok(&caps, &s, FLASHCL_PASS_BACKWARD, &d128, &f128, 8);
    ck_assert_int_eq(plan.tiles.block_q, 8);
    ck_assert_int_eq(plan.tiles.block_k, 32);
    ck_assert_uint_le(plan.tiles.local_mem_bytes, 48 * 1024);
}
END_TEST

/* The H200 (same chip as the H100) takes the H100's measured portable plans, and its own f16 d64 forward plan where
 * the static local memory is found (tuned_plans.c; docs/perf.md, "The H100's portable plans on the H200"). */
START_TEST(h200_takes_measured_portable_plans) {
    flashcl_device_caps caps = h100();
    snprintf(caps.name, sizeof caps.name, "NVIDIA H200");
    flashcl_settings s = defaults();
    s.kv_splits = 1;
    s.tensor_cores = FLASHCL_TENSOR_CORES_OFF; /* 16-bit storage on the portable kernel */
    const flashcl_attention_desc f32_d64 = problem_desc(2048, 64, FLASHCL_DTYPE_F32, 0);
    const flashcl_features f = dense(&f32_d64);
    flashcl_exec_plan plan = dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &f32_d64, &f, 8);
    ck_assert_int_eq(plan.kind, FLASHCL_KERNEL_PORTABLE);
    ck_assert_int_eq(plan.tiles.block_q, 64); /* the H100's entry 64,32,8,8 */
    ck_assert_int_eq(plan.tiles.block_k, 32);
    ck_assert_int_eq(plan.tiles.threads_q, 8);
    ck_assert_int_eq(plan.tiles.threads_k, 8);
    /* f16 storage d64: the H100's 64,32,16,8 within 48 KiB, the H200's 128,32,16,8 (76 KB) with the static size. */
    const flashcl_attention_desc f16_d64 = problem_desc(2048, 64, FLASHCL_DTYPE_F16, 0);
    const flashcl_features f16 = dense(&f16_d64);
    plan = dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &f16_d64, &f16, 8);
    ck_assert_int_eq(plan.kind, FLASHCL_KERNEL_PORTABLE);
    ck_assert_int_eq(plan.tiles.block_q, 64);
    ck_assert_int_eq(plan.tiles.threads_q, 16);
    ck_assert_uint_le(plan.tiles.local_mem_bytes, 48 * 1024);
    caps.limits.static_local_mem_bytes = 231424;
    plan = dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &f16_d64, &f16, 8);
    ck_assert_int_eq(plan.tiles.block_q, 128);
    ck_assert_int_eq(plan.tiles.block_k, 32);
    ck_assert_int_eq(plan.tiles.threads_q, 16);
    ck_assert_int_eq(plan.tiles.threads_k, 8);
    ck_assert_uint_gt(plan.tiles.local_mem_bytes, 48 * 1024);
    /* The backward's static-size entry carries over too: d64 64x64 blocks. */
    plan = dispatch_ok(&caps, &s, FLASHCL_PASS_BACKWARD, &f32_d64, &f, 8);
    ck_assert_int_eq(plan.tiles.block_q, 64);
    ck_assert_int_eq(plan.tiles.block_k, 64);
    /* The H100 does not take the H200's entry. */
    flashcl_device_caps h = h100();
    h.limits.static_local_mem_bytes = 231424;
    plan = dispatch_ok(&h, &s, FLASHCL_PASS_FORWARD, &f16_d64, &f16, 8);
    ck_assert_int_eq(plan.tiles.block_q, 64);
    ck_assert_int_eq(plan.tiles.threads_q, 16);
}
END_TEST

/* Devices without a backend AUTO can use: the portable kernels. */
START_TEST(other_devices_run_portable) {
    const flashcl_device_caps devices[] = {
        device(FLASHCL_VENDOR_AMD, 0, 64 * 1024, 1024, "gfx90a"),
        device(FLASHCL_VENDOR_INTEL, 0, 128 * 1024, 1024, "Intel(R) Data Center GPU Max 1550"),
        device(FLASHCL_VENDOR_NVIDIA, 75, 48 * 1024, 1024, "Tesla T4"), /* sm_75: no m16n8k16 bf16 */
        device(FLASHCL_VENDOR_OTHER, 0, 1024 * 1024, 4096, "pthread-Intel(R) Xeon(R) Processor"),
    };
    const flashcl_settings s = defaults();
    const flashcl_attention_desc desc = problem_desc(512, 64, FLASHCL_DTYPE_F16, 0);
    const flashcl_features f = dense(&desc);
    for (int i = 0; i < COUNT(devices); ++i)
        for (int pass = 0; pass < 2; ++pass) {
            const flashcl_exec_plan plan = dispatch_ok(&devices[i], &s, (flashcl_pass)pass, &desc, &f, 8);
            ck_assert_msg(plan.kind == FLASHCL_KERNEL_PORTABLE, "%s pass %d: kind %d", devices[i].name, pass,
                          plan.kind);
        }
}
END_TEST

/* What keeps a call off the tensor-core kernels on an H100: the mode, a forced plan, a feature, head_dim, views
 * that are not 16-byte aligned. */
START_TEST(tensor_core_conditions) {
    const flashcl_device_caps caps = h100();
    const flashcl_attention_desc desc = problem_desc(300, 64, FLASHCL_DTYPE_BF16, 0);
    const flashcl_features f = dense(&desc);
    flashcl_settings s = defaults();
    ck_assert_int_eq(dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &desc, &f, 8).kind, FLASHCL_KERNEL_TENSOR_CORE);
    ck_assert_int_eq(dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &desc, &f, 4).kind, FLASHCL_KERNEL_PORTABLE);
    s.tensor_cores = FLASHCL_TENSOR_CORES_OFF;
    ck_assert_int_eq(dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &desc, &f, 8).kind, FLASHCL_KERNEL_PORTABLE);
    s.tensor_cores = FLASHCL_TENSOR_CORES_EMULATE;
    const flashcl_exec_plan emulated = dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &desc, &f, 8);
    ck_assert_int_eq(emulated.kind, FLASHCL_KERNEL_TENSOR_CORE_EMULATED);
    ck_assert_ptr_nonnull(strstr(emulated.options, "-DFLASHCL_MMA_PTX=0"));

    s = defaults();
    s.forced_plan_set = 1;
    s.forced_plan = (flashcl_plan){32, 32, 8, 8, 0, 0};
    flashcl_exec_plan plan = dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &desc, &f, 8);
    ck_assert_int_eq(plan.kind, FLASHCL_KERNEL_PORTABLE);
    ck_assert_int_eq(plan.tiles.block_q, 32);
    ck_assert_uint_eq(plan.tiles.work_group_size, 64);

    s = defaults();
    flashcl_attention_desc window = desc;
    window.sliding_window = 1;
    window.window_left = 16;
    window.window_right = 0;
    const flashcl_features wf = dense(&window);
    plan = dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &window, &wf, 8);
    ck_assert_int_eq(plan.kind, FLASHCL_KERNEL_PORTABLE);
    ck_assert_ptr_nonnull(strstr(plan.options, " -DFLASHCL_WINDOW=1"));

    const flashcl_attention_desc odd = problem_desc(300, 72, FLASHCL_DTYPE_F16, 0);
    const flashcl_features of = dense(&odd);
    ck_assert_int_eq(dispatch_ok(&caps, &s, FLASHCL_PASS_BACKWARD, &odd, &of, 8).kind, FLASHCL_KERNEL_PORTABLE);
}
END_TEST

/* The emulation on llvmpipe stops where llvmpipe's loop budget would cut it short (mma_backends.c). */
START_TEST(emulation_within_llvmpipe_budget) {
    const flashcl_device_caps caps = device(FLASHCL_VENDOR_OTHER, 0, 32 * 1024, 1024, "llvmpipe (LLVM 15.0.6, 256 bits)");
    flashcl_settings s = defaults();
    s.tensor_cores = FLASHCL_TENSOR_CORES_EMULATE;
    flashcl_attention_desc desc = problem_desc(256, 64, FLASHCL_DTYPE_F16, 0);
    flashcl_features f = dense(&desc);
    const flashcl_exec_plan short_call = dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &desc, &f, 8);
    ck_assert_int_eq(short_call.kind, FLASHCL_KERNEL_TENSOR_CORE_EMULATED);
    desc.seqlen_k = 33 * short_call.tiles.block_k;
    f = dense(&desc);
    ck_assert_int_eq(dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &desc, &f, 8).kind, FLASHCL_KERNEL_PORTABLE);
    desc.seqlen_k = 32 * short_call.tiles.block_k;
    f = dense(&desc);
    ck_assert_int_eq(dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &desc, &f, 8).kind,
                     FLASHCL_KERNEL_TENSOR_CORE_EMULATED);
}
END_TEST

/* Refusals carry a status and a reason: a forced plan that does not fit, the memory budget, what the standard
 * implementation lacks. */
START_TEST(refusals_say_why) {
    const flashcl_device_caps caps = device(FLASHCL_VENDOR_OTHER, 0, 32 * 1024, 256, "small device");
    const flashcl_attention_desc desc = problem_desc(4096, 64, FLASHCL_DTYPE_F32, 0);
    const flashcl_features f = dense(&desc);
    const flashcl_problem p = {FLASHCL_PASS_BACKWARD, &desc, &f, 8, 8, 0, 0};
    flashcl_exec_plan plan;
    char reason[512];
    flashcl_settings s = defaults();
    s.forced_plan_set = 1;
    s.forced_plan = (flashcl_plan){128, 128, 32, 32, 0, 0};
    ck_assert_int_eq(flashcl_dispatch(&caps, &s, &p, &plan, reason, sizeof reason), FLASHCL_ERROR_PLAN);
    ck_assert_msg(strstr(reason, "forced backward plan 128x128") && strstr(reason, "small device"), "%s", reason);

    s = defaults();
    s.memory_budget = 1000;
    ck_assert_int_eq(flashcl_dispatch(&caps, &s, &p, &plan, reason, sizeof reason), FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY);
    ck_assert_msg(strstr(reason, "needs 262144 bytes of scratch"), "%s", reason); /* D: 2 x 8 x 4096 floats */

    s = defaults();
    s.impl = FLASHCL_IMPL_STANDARD;
    ck_assert_int_eq(flashcl_dispatch(&caps, &s, &p, &plan, reason, sizeof reason), FLASHCL_SUCCESS);
    ck_assert_int_eq(plan.kind, FLASHCL_KERNEL_STANDARD);
    ck_assert_ptr_null(plan.program);
    ck_assert_uint_eq(plan.extra_device_bytes, (size_t)2 * 8 * 4096 * 4096 * 4 * 2);
    const flashcl_attention_desc half = problem_desc(64, 64, FLASHCL_DTYPE_F16, 0);
    const flashcl_features hf = dense(&half);
    const flashcl_problem hp = {FLASHCL_PASS_FORWARD, &half, &hf, 8, 8, 0, 0};
    ck_assert_int_eq(flashcl_dispatch(&caps, &s, &hp, &plan, reason, sizeof reason), FLASHCL_ERROR_UNSUPPORTED);
    flashcl_attention_desc dropout = desc;
    dropout.dropout_p = 0.1f;
    const flashcl_features df = dense(&dropout);
    const flashcl_problem dp = {FLASHCL_PASS_FORWARD, &dropout, &df, 8, 8, 0, 0};
    ck_assert_int_eq(flashcl_dispatch(&caps, &s, &dp, &plan, reason, sizeof reason), FLASHCL_ERROR_UNSUPPORTED);
    ck_assert_msg(strstr(reason, "no dropout"), "%s", reason);
}
END_TEST

/* Over a grid of made-up devices, settings and problems: every plan is one the device can run and the fields
 * agree with each other; where the dispatcher refuses, it is for lack of a plan. */
START_TEST(every_plan_is_consistent) {
    const size_t locals[] = {16 * 1024, 32 * 1024, 48 * 1024, 96 * 1024, 1024 * 1024};
    const size_t groups[] = {64, 256, 1024};
    const int ccs[] = {0, 80, 90};
    const int dims[] = {16, 32, 59, 64, 96, 128, 256};
    const flashcl_tensor_cores modes[] = {FLASHCL_TENSOR_CORES_AUTO, FLASHCL_TENSOR_CORES_OFF,
                                          FLASHCL_TENSOR_CORES_EMULATE};
    int plans = 0, tensor_core = 0;
    for (int l = 0; l < COUNT(locals); ++l)
        for (int g = 0; g < COUNT(groups); ++g)
            for (int c = 0; c < COUNT(ccs); ++c) {
                const flashcl_device_caps caps = device(ccs[c] ? FLASHCL_VENDOR_NVIDIA : FLASHCL_VENDOR_AMD, ccs[c],
                                                        locals[l], groups[g], "made up");
                for (int d = 0; d < COUNT(dims); ++d)
                    for (int dt = 0; dt < 3; ++dt)
                        for (int m = 0; m < COUNT(modes); ++m)
                            for (int pass = 0; pass < 2; ++pass) {
                                flashcl_settings s = defaults();
                                s.tensor_cores = modes[m];
                                s.f32_precision = FLASHCL_F32_3XTF32;
                                const flashcl_attention_desc desc = problem_desc(777, dims[d], (flashcl_dtype)dt, 1);
                                const flashcl_features f = dense(&desc);
                                const flashcl_problem p = {(flashcl_pass)pass, &desc, &f, 8, 8, 0, 0};
                                flashcl_exec_plan plan;
                                char reason[512];
                                const flashcl_status status = flashcl_dispatch(&caps, &s, &p, &plan, reason, sizeof reason);
                                if (status != FLASHCL_SUCCESS) {
                                    ck_assert_msg(status == FLASHCL_ERROR_PLAN, "%s", reason);
                                    continue;
                                }
                                ++plans;
                                const flashcl_plan *t = &plan.tiles;
                                ck_assert_uint_eq(t->work_group_size, (size_t)t->threads_q * (size_t)t->threads_k);
                                ck_assert_uint_le(t->work_group_size, groups[g]);
                                ck_assert_uint_le(t->local_mem_bytes, locals[l]);
                                ck_assert_int_eq(plan.kernel_count, pass == 0 ? (plan.kv_splits > 1 ? 2 : 1) : 3);
                                for (int k = 0; k < plan.kernel_count; ++k) {
                                    ck_assert_ptr_nonnull(plan.kernel_names[k]);
                                    for (cl_uint x = 0; x < plan.work_dims[k]; ++x)
                                        ck_assert_uint_eq(plan.global[k][x] % plan.local[k][x], 0);
                                }
                                char head[32];
                                snprintf(head, sizeof head, "-DHEAD_DIM=%d ", dims[d]);
                                ck_assert_ptr_nonnull(strstr(plan.options, head));
                                const int on_matrix_units = plan.kind == FLASHCL_KERNEL_TENSOR_CORE;
                                tensor_core += on_matrix_units;
                                ck_assert_int_eq(plan.backend != NULL, plan.kind != FLASHCL_KERNEL_PORTABLE);
                                ck_assert(!on_matrix_units || (ccs[c] >= 80 && modes[m] == FLASHCL_TENSOR_CORES_AUTO));
                                ck_assert(plan.kind != FLASHCL_KERNEL_TENSOR_CORE_EMULATED ||
                                          modes[m] == FLASHCL_TENSOR_CORES_EMULATE);
                                ck_assert(plan.predicted_global_bytes > 0);
                            }
            }
    ck_assert_int_gt(plans, 1000);
    ck_assert_int_gt(tensor_core, 50);
}
END_TEST


/* Each row of the feature table: a call with that feature alone builds the portable kernels with its define
 * (never the tensor-core ones), and the standard implementation refuses it by name. */
START_TEST(features_as_data) {
    const flashcl_device_caps caps = h100();
    const flashcl_attention_desc desc = problem_desc(256, 64, FLASHCL_DTYPE_F16, 0);
    int count = 0;
    const flashcl_feature_def *defs = flashcl_feature_defs(&count);
    ck_assert_int_eq(count, 7);
    for (int i = 0; i < count; ++i) {
        flashcl_features f = dense(&desc);
        ck_assert(!flashcl_features_any(&f));
        /* Switch on the feature the row describes, as flashcl_features_resolve would. */
        if (strcmp(defs[i].define, "FLASHCL_WINDOW") == 0) f.window = 1, f.window_left = 8;
        else if (strcmp(defs[i].define, "FLASHCL_BLOCK_MASK") == 0) f.block_mask = 1, f.mask_heads = 1;
        else if (strcmp(defs[i].define, "FLASHCL_DROPOUT") == 0) f.dropout = 1;
        else if (strcmp(defs[i].define, "FLASHCL_VARLEN") == 0) f.varlen.on = 1, f.varlen.total_q = 300;
        else if (strcmp(defs[i].define, "FLASHCL_SOFTCAP") == 0) f.softcap = 30.0f;
        else if (strcmp(defs[i].define, "FLASHCL_ALIBI") == 0) f.alibi = 1, f.alibi_count = 8;
        else if (strcmp(defs[i].define, "FLASHCL_BIAS") == 0) f.bias = 1;
        else ck_abort_msg("feature %s has no case here: add one", defs[i].name);
        ck_assert(defs[i].on(&f));
        ck_assert_str_eq(flashcl_features_first(&f), defs[i].name);
        flashcl_settings s = defaults();
        for (int pass = 0; pass < 2; ++pass) {
            const flashcl_exec_plan plan = dispatch_ok(&caps, &s, (flashcl_pass)pass, &desc, &f, 8);
            /* The tensor-core kernels take the score modifiers and the bias (the table's tensor_core bits); every
             * other feature runs the portable kernels. */
            const int tensor_core =
                (defs[i].tensor_core & (pass == FLASHCL_PASS_FORWARD ? FLASHCL_TC_FORWARD : FLASHCL_TC_BACKWARD)) != 0;
            ck_assert_int_eq(plan.kind, tensor_core ? FLASHCL_KERNEL_TENSOR_CORE : FLASHCL_KERNEL_PORTABLE);
            char define[64];
            snprintf(define, sizeof define, " -D%s=1", defs[i].define);
            ck_assert_msg(strstr(plan.options, define), "%s: %s", defs[i].name, plan.options);
        }
        s.impl = FLASHCL_IMPL_STANDARD;
        const flashcl_problem p = {FLASHCL_PASS_FORWARD, &desc, &f, 8, 8, 0, 0};
        flashcl_exec_plan plan;
        char reason[512];
        ck_assert_int_eq(flashcl_dispatch(&caps, &s, &p, &plan, reason, sizeof reason), FLASHCL_ERROR_UNSUPPORTED);
        ck_assert_msg(strstr(reason, defs[i].name), "%s", reason);
    }
}
END_TEST

/* Split-KV in the dispatcher: a decode call on the H100's portable kernel is cut into enough chunks for eight
 * work-groups per compute unit; prefill, the tensor-core kernel, features and the backward are not; a forced
 * count is clamped to the key blocks; the scratch and the IO model count the partials. */
START_TEST(split_kv_decisions) {
    const flashcl_device_caps caps = h100();
    flashcl_settings s = defaults();
    s.tensor_cores = FLASHCL_TENSOR_CORES_OFF;
    s.decode_off = 1; /* the tiled kernel's split (decode_decisions: the decode kernel's) */
    flashcl_attention_desc desc = problem_desc(1, 128, FLASHCL_DTYPE_F16, 0);
    desc.batch = 1;
    desc.heads_q = 32;
    desc.heads_kv = 8;
    desc.seqlen_k = 131072;
    flashcl_features f = dense(&desc);
    flashcl_exec_plan plan = dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &desc, &f, 8);
    ck_assert_int_eq(plan.kind, FLASHCL_KERNEL_PORTABLE);
    ck_assert_int_eq(plan.kv_splits, 33); /* ceil(132 x 8 / 32 work-groups) */
    ck_assert_int_eq(plan.kernel_count, 2);
    ck_assert_str_eq(plan.kernel_programs[FLASHCL_KERNEL_COMBINE], "split_combine.cl");
    ck_assert_ptr_nonnull(strstr(plan.options, " -DFLASHCL_SPLIT_KV=1"));
    ck_assert_int_eq(plan.split_keys % plan.tiles.block_k, 0);
    ck_assert_int_ge(plan.kv_splits * plan.split_keys, 131072);
    ck_assert_int_lt((plan.kv_splits - 1) * plan.split_keys, 131072);
    ck_assert_uint_eq(plan.work_dims[0], 3);
    ck_assert_uint_eq(plan.global[0][2], 33);
    ck_assert_uint_eq(plan.extra_device_bytes, (size_t)33 * 32 * (128 + 2) * sizeof(float));
    flashcl_exec_plan unsplit;
    s.kv_splits = 1;
    unsplit = dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &desc, &f, 8);
    ck_assert_int_eq(unsplit.kv_splits, 1);
    ck_assert_int_eq(unsplit.kernel_count, 1);
    ck_assert(plan.predicted_global_bytes > unsplit.predicted_global_bytes); /* the partials' traffic */
    s.kv_splits = 100000; /* clamped: at most 256, at most one per key block */
    ck_assert_int_eq(dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &desc, &f, 8).kv_splits, 256);
    desc.seqlen_k = 100;
    f = dense(&desc);
    const int blocks = (100 + plan.tiles.block_k - 1) / plan.tiles.block_k;
    ck_assert_int_le(dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &desc, &f, 8).kv_splits, blocks);
    /* Not split: the backward, the tensor-core kernel, a window, a call that fills the device. */
    s.kv_splits = 0;
    desc.seqlen_k = 131072;
    f = dense(&desc);
    ck_assert_int_eq(dispatch_ok(&caps, &s, FLASHCL_PASS_BACKWARD, &desc, &f, 8).kv_splits, 1);
    flashcl_settings tc = defaults();
    tc.decode_off = 1;
    ck_assert_int_eq(dispatch_ok(&caps, &tc, FLASHCL_PASS_FORWARD, &desc, &f, 8).kind, FLASHCL_KERNEL_TENSOR_CORE);
    ck_assert_int_eq(dispatch_ok(&caps, &tc, FLASHCL_PASS_FORWARD, &desc, &f, 8).kv_splits, 1);
    flashcl_attention_desc window = desc;
    window.sliding_window = 1;
    window.window_left = 1000;
    const flashcl_features wf = dense(&window);
    ck_assert_int_eq(dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &window, &wf, 8).kv_splits, 1);
    /* The score modifiers are computed where each score is: split as a dense call would be, and taken by the
     * tensor-core forward as a dense call would be. */
    flashcl_features mods = dense(&desc);
    mods.softcap = 30.0f;
    mods.alibi = 1;
    ck_assert_int_eq(dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &desc, &mods, 8).kv_splits, 33);
    ck_assert_int_eq(dispatch_ok(&caps, &tc, FLASHCL_PASS_FORWARD, &desc, &mods, 8).kind, FLASHCL_KERNEL_TENSOR_CORE);
    flashcl_attention_desc prefill = problem_desc(4096, 128, FLASHCL_DTYPE_F16, 1);
    const flashcl_features pf = dense(&prefill);
    ck_assert_int_eq(dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &prefill, &pf, 8).kv_splits, 1);
}
END_TEST

/* The portable decode kernel: forwards of up to 8 positions on every device, its tiles, options, grid and
 * splits, with a bias too (tensor cores off: with them, 16-bit d64/d128 calls take the matrix-unit one,
 * decode_mma_decisions). */
START_TEST(decode_decisions) {
    const flashcl_device_caps caps = h100();
    flashcl_settings s = defaults();
    s.tensor_cores = FLASHCL_TENSOR_CORES_OFF;
    flashcl_attention_desc desc = problem_desc(1, 128, FLASHCL_DTYPE_F16, 0);
    desc.batch = 1;
    desc.heads_q = 32;
    desc.heads_kv = 8;
    desc.seqlen_k = 131072;
    flashcl_features f = dense(&desc);
    flashcl_exec_plan plan = dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &desc, &f, 8);
    ck_assert_int_eq(plan.kind, FLASHCL_KERNEL_DECODE);
    ck_assert_str_eq(plan.program, "decode.cl");
    ck_assert_ptr_null(plan.backend);
    ck_assert_str_eq(plan.options, "-DFLASHCL_DTYPE=1 -DHEAD_DIM=128 -DDECODE_ROWS=4 -DDECODE_THREADS=128 -DKV_VEC=8 "
                                   "-DDV_VEC=8 -DFLASHCL_SPLIT_KV=1");
    ck_assert_int_eq(plan.tiles.block_q, 4); /* 1 position x 4 query heads per KV head */
    ck_assert_int_eq(plan.tiles.block_k, 128);
    ck_assert_uint_eq(plan.global[0][0], 128);
    ck_assert_uint_eq(plan.global[0][1], 8); /* batch x KV heads */
    /* 8 work-groups unsplit; the aim is 4 per compute unit: ceil(528 / 8) = 66 splits of 16 steps -> 64. */
    ck_assert_int_eq(plan.kv_splits, 64);
    ck_assert_int_eq(plan.split_keys, 2048);
    ck_assert_uint_eq(plan.global[0][2], 64);
    /* The combine: a work-group per row (32 heads), a work-item per dim. */
    ck_assert_uint_eq(plan.global[FLASHCL_KERNEL_COMBINE][0], (size_t)32 * 128);
    ck_assert_uint_eq(plan.local[FLASHCL_KERNEL_COMBINE][0], 128);
    ck_assert_uint_le(plan.tiles.local_mem_bytes, caps.limits.local_mem_bytes);
    /* A bias keeps the kernel, its tiles and its splits: only the bias's defines are added. */
    flashcl_features biased = f;
    biased.bias = 1;
    const flashcl_exec_plan with_bias = dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &desc, &biased, 8);
    ck_assert_int_eq(with_bias.kind, FLASHCL_KERNEL_DECODE);
    ck_assert_str_eq(with_bias.program, "decode.cl");
    ck_assert_str_eq(with_bias.options, "-DFLASHCL_DTYPE=1 -DHEAD_DIM=128 -DDECODE_ROWS=4 -DDECODE_THREADS=128 "
                                        "-DKV_VEC=8 -DDV_VEC=8 -DFLASHCL_BIAS=1 -DFLASHCL_SPLIT_KV=1");
    ck_assert_int_eq(with_bias.kv_splits, plan.kv_splits);
    ck_assert_int_eq(with_bias.portable_args, 1);
    /* K and V once per KV head: far fewer bytes than the tiled kernel's model, which reads them per query head. */
    flashcl_settings off = s;
    off.decode_off = 1;
    const flashcl_exec_plan tiled = dispatch_ok(&caps, &off, FLASHCL_PASS_FORWARD, &desc, &f, 8);
    ck_assert_int_ne(tiled.kind, FLASHCL_KERNEL_DECODE);
    const double kv = 2.0 * 131072 * 8 * 128 * 2;
    ck_assert(plan.predicted_global_bytes >= kv && plan.predicted_global_bytes < 1.01 * kv);
    /* Four positions x 4 heads: 16 rows, 4 output dims per work-item; 8 x 8: four blocks of 16 rows. */
    desc.seqlen_q = 4;
    f = dense(&desc);
    plan = dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &desc, &f, 8);
    ck_assert_int_eq(plan.tiles.block_q, 16);
    ck_assert_ptr_nonnull(strstr(plan.options, "-DDV_VEC=4"));
    desc.seqlen_q = 8;
    desc.heads_kv = 4;
    f = dense(&desc);
    plan = dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &desc, &f, 8);
    ck_assert_uint_eq(plan.global[0][0], 4 * 128);
    /* Unaligned K/V (half data, offsets a multiple of 4 elements): element loads. Odd head dim likewise. */
    plan = dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &desc, &f, 4);
    ck_assert_ptr_nonnull(strstr(plan.options, "-DKV_VEC=1 -DDV_VEC=1"));
    /* Not decode: 9 positions, the backward, dropout, a forced plan. */
    desc.seqlen_q = 9;
    f = dense(&desc);
    ck_assert_int_ne(dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &desc, &f, 8).kind, FLASHCL_KERNEL_DECODE);
    desc.seqlen_q = 1;
    f = dense(&desc);
    ck_assert_int_ne(dispatch_ok(&caps, &s, FLASHCL_PASS_BACKWARD, &desc, &f, 8).kind, FLASHCL_KERNEL_DECODE);
    flashcl_features dropped = f;
    dropped.dropout = 1;
    ck_assert_int_ne(dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &desc, &dropped, 8).kind, FLASHCL_KERNEL_DECODE);
    flashcl_settings forced = s;
    forced.forced_plan_set = 1;
    forced.forced_plan = (flashcl_plan){16, 16, 4, 16, 0, 0};
    forced.tensor_cores = FLASHCL_TENSOR_CORES_OFF;
    ck_assert_int_eq(dispatch_ok(&caps, &forced, FLASHCL_PASS_FORWARD, &desc, &f, 8).kind, FLASHCL_KERNEL_PORTABLE);
    /* llvmpipe: a long cache is split so no work-group outruns the loop budget; forcing one split there gives
     * the tiled kernel. */
    const flashcl_device_caps pipe = device(FLASHCL_VENDOR_OTHER, 0, 32 * 1024, 1024, "llvmpipe (LLVM 15.0.6, 256 bits)");
    desc.seqlen_k = 100000;
    desc.dtype = FLASHCL_DTYPE_F32;
    f = dense(&desc);
    flashcl_settings cpu = s;
    cpu.tensor_cores = FLASHCL_TENSOR_CORES_OFF;
    plan = dispatch_ok(&pipe, &cpu, FLASHCL_PASS_FORWARD, &desc, &f, 8);
    ck_assert_int_eq(plan.kind, FLASHCL_KERNEL_DECODE);
    ck_assert_int_ge(plan.kv_splits, 2);
    ck_assert_int_le(plan.split_keys, 16384);
    cpu.kv_splits = 1;
    ck_assert_int_eq(dispatch_ok(&pipe, &cpu, FLASHCL_PASS_FORWARD, &desc, &f, 8).kind, FLASHCL_KERNEL_PORTABLE);
}
END_TEST

/* The matrix-unit decode kernel (cl/decode_mma.cl): 16-bit storage at d64/d128 with tensor cores on, 16
 * packed rows per work-group, 64 keys a round, split to one wave of 2 work-groups per compute unit; the portable
 * decode kernel for float, other head dims, rows not 16-byte aligned, or tensor cores off. */
START_TEST(decode_mma_decisions) {
    const flashcl_device_caps caps = h100();
    const flashcl_settings s = defaults();
    flashcl_attention_desc desc = problem_desc(1, 128, FLASHCL_DTYPE_F16, 0);
    desc.batch = 1;
    desc.heads_q = 32;
    desc.heads_kv = 8;
    desc.seqlen_k = 131072;
    flashcl_features f = dense(&desc);
    flashcl_exec_plan plan = dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &desc, &f, 8);
    ck_assert_int_eq(plan.kind, FLASHCL_KERNEL_DECODE);
    ck_assert_str_eq(plan.program, "decode_mma.cl");
    ck_assert_ptr_nonnull(plan.backend);
    ck_assert_str_eq(plan.backend->name, "nvidia-mma-sync");
    ck_assert_str_eq(plan.prelude[0], "mma.cl");
    ck_assert_str_eq(plan.options,
                     "-DFLASHCL_DTYPE=1 -DHEAD_DIM=128 -DDECODE_WARPS=4 -DFLASHCL_MMA_PTX=1 -DFLASHCL_SPLIT_KV=1");
    ck_assert_int_eq(plan.tiles.block_q, 16);
    ck_assert_int_eq(plan.tiles.block_k, 64);
    ck_assert_uint_eq(plan.global[0][0], 128);
    ck_assert_uint_eq(plan.global[0][1], 8);
    /* 8 work-groups unsplit, aim 2 per unit and no more: 264 / 8 = 33 splits of ceil(2048 / 33) = 63 rounds. */
    ck_assert_int_eq(plan.kv_splits, 33);
    ck_assert_int_eq(plan.split_keys, 63 * 64);
    const double kv = 2.0 * 131072 * 8 * 128 * 2;
    ck_assert(plan.predicted_global_bytes >= kv && plan.predicted_global_bytes < 1.01 * kv);
    /* A float32 bias beside half data keeps the kernel and its splits, adding the bias's defines; rows that start
     * 16-byte aligned are read two keys per load (DECODE_BIAS_PAIRS), others key by key. */
    flashcl_features biased = f;
    biased.bias = 1;
    biased.bias_f32 = 1;
    biased.bias_dtype = FLASHCL_DTYPE_F32;
    const flashcl_exec_plan with_bias = dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &desc, &biased, 8);
    ck_assert_str_eq(with_bias.program, "decode_mma.cl");
    ck_assert_str_eq(with_bias.options, "-DFLASHCL_DTYPE=1 -DHEAD_DIM=128 -DDECODE_WARPS=4 -DFLASHCL_MMA_PTX=1 "
                                        "-DFLASHCL_BIAS=1 -DFLASHCL_BIAS_F32=1 -DDECODE_BIAS_PAIRS=1 -DFLASHCL_SPLIT_KV=1");
    ck_assert_int_eq(with_bias.kv_splits, 33);
    flashcl_features unaligned = biased;
    unaligned.bias_view.stride_seq = 131074;
    ck_assert_str_eq(dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &desc, &unaligned, 8).options,
                     "-DFLASHCL_DTYPE=1 -DHEAD_DIM=128 -DDECODE_WARPS=4 -DFLASHCL_MMA_PTX=1 -DFLASHCL_BIAS=1 "
                     "-DFLASHCL_BIAS_F32=1 -DFLASHCL_SPLIT_KV=1");
    /* 8 positions x 8 heads per KV head: four blocks of 16 rows. */
    desc.seqlen_q = 8;
    desc.heads_kv = 4;
    f = dense(&desc);
    plan = dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &desc, &f, 8);
    ck_assert_str_eq(plan.program, "decode_mma.cl");
    ck_assert_uint_eq(plan.global[0][0], 4 * 128);
    /* The portable decode kernel: rows 8-byte aligned only, float, head dim 96, tensor cores off. */
    ck_assert_str_eq(dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &desc, &f, 4).program, "decode.cl");
    flashcl_attention_desc other = desc;
    other.dtype = FLASHCL_DTYPE_F32;
    f = dense(&other);
    ck_assert_str_eq(dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &other, &f, 8).program, "decode.cl");
    other = desc;
    other.head_dim = 96;
    f = dense(&other);
    ck_assert_str_eq(dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &other, &f, 8).program, "decode.cl");
    flashcl_settings off = s;
    off.tensor_cores = FLASHCL_TENSOR_CORES_OFF;
    f = dense(&desc);
    ck_assert_str_eq(dispatch_ok(&caps, &off, FLASHCL_PASS_FORWARD, &desc, &f, 8).program, "decode.cl");
}
END_TEST

/* The Hopper forward (src/wgmma_plan.c): on an sm_90 device with its static local memory, in the default mode
 * for f16/bf16 forwards at head_dim 64 and 128, causal or not, with the tiles measured fastest there, and with the
 * score modifiers and the bias where they were measured faster (forced, FLASHCL_WGMMA_ON, wherever the kernel takes
 * them; the bias staged when aligned), never for what it does not take; its program, kernel, options and grid; off, and on
 * other devices, the mma.sync plan. */
START_TEST(wgmma_decisions) {
    flashcl_device_caps caps = h100();
    caps.limits.static_local_mem_bytes = 231424;
    flashcl_settings s = defaults();
    s.wgmma = FLASHCL_WGMMA_AUTO;
    /* Expected by head dim (64, 128) and mask (not causal, causal): warpgroups, keys per step, the pipelined
     * kernel (-DWG_PIPELINE=1). */
    static const struct {
        int warpgroups, block_n, pipelined;
    } expected[2][2] = {
        {{4, 128, 0}, {2, 128, 0}},
        {{3, 64, 1}, {3, 64, 1}},
    };
    for (int d = 0; d < 2; ++d)
        for (int causal = 0; causal < 2; ++causal) {
            const int head_dim = d ? 128 : 64, wg = expected[d][causal].warpgroups;
            const flashcl_dtype dtype = causal ? FLASHCL_DTYPE_BF16 : FLASHCL_DTYPE_F16;
            const flashcl_attention_desc desc = problem_desc(1000, head_dim, dtype, causal);
            const flashcl_features f = dense(&desc);
            const flashcl_exec_plan plan = dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &desc, &f, 8);
            ck_assert_int_eq(plan.kind, FLASHCL_KERNEL_TENSOR_CORE);
            ck_assert_int_eq(plan.sm90a, 1);
            ck_assert_str_eq(plan.backend->name, "nvidia-wgmma");
            ck_assert_str_eq(plan.program, "forward_wgmma.cl");
            ck_assert_str_eq(plan.kernel_names[0], "flashcl_forward_wgmma");
            ck_assert_str_eq(plan.prelude[3], "wgmma.cl");
            ck_assert_ptr_null(plan.prelude[4]);
            char options[160];
            snprintf(options, sizeof options,
                     "-DFLASHCL_DTYPE=%d -DHEAD_DIM=%d -DBLOCK_N=%d -DWARPGROUPS=%d -DFLASHCL_MMA_PTX=1%s", (int)dtype,
                     head_dim, expected[d][causal].block_n, wg,
                     expected[d][causal].pipelined ? " -DWG_PIPELINE=1" : "");
            ck_assert_str_eq(plan.options, options);
            /* 64 query rows per warpgroup of 128 work-items: ceil(1000 / (64 wg)) groups, B x Hq = 16. */
            ck_assert_uint_eq(plan.global[0][0], (size_t)((1000 + 64 * wg - 1) / (64 * wg)) * 128 * wg);
            ck_assert_uint_eq(plan.local[0][0], 128 * wg);
            ck_assert_int_eq(plan.tiles.block_q, 64 * wg);
            ck_assert_int_eq(plan.tiles.block_k, expected[d][causal].block_n);
            ck_assert_int_eq(plan.tiles.threads_q, 4 * wg);
            ck_assert_int_eq(plan.tiles.threads_k, 32);
            ck_assert_uint_eq(plan.tiles.work_group_size, 128 * wg);
            ck_assert_uint_eq(plan.global[0][1], 16);
            ck_assert_int_eq(plan.kv_splits, 1);
            flashcl_call_stats stats;
            flashcl_exec_plan_report(&plan, &stats);
            ck_assert_str_eq(stats.backend, "nvidia-wgmma");
        }
    /* d64, causal or not: soft-capping and ALiBi run on 2 x 64 pipelined tiles in the default mode (measured faster
     * than mma.sync), a staged bias on 3 x 64 pipelined ones (faster still with a bias). */
    for (int causal = 0; causal < 2; ++causal) {
        flashcl_settings on = s;
        on.wgmma = FLASHCL_WGMMA_ON;
        const flashcl_attention_desc m = problem_desc(1000, 64, FLASHCL_DTYPE_F16, causal);
        flashcl_features capped = dense(&m);
        capped.softcap = 30.0f;
        capped.alibi = causal;
        const flashcl_exec_plan plan = dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &m, &capped, 8);
        ck_assert_int_eq(plan.sm90a, 1);
        ck_assert_int_eq(plan.tiles.block_q, 128);
        ck_assert_int_eq(plan.tiles.block_k, 64);
        ck_assert_ptr_nonnull(strstr(plan.options, "-DBLOCK_N=64 -DWARPGROUPS=2 -DFLASHCL_MMA_PTX=1 -DWG_PIPELINE=1 "
                                                   "-DFLASHCL_SOFTCAP=1"));
        ck_assert_str_eq(dispatch_ok(&caps, &on, FLASHCL_PASS_FORWARD, &m, &capped, 8).options, plan.options);
        flashcl_features biased = capped;
        biased.bias = 1;
        biased.bias_dtype = FLASHCL_DTYPE_F32;
        const flashcl_exec_plan biased_on = dispatch_ok(&caps, &on, FLASHCL_PASS_FORWARD, &m, &biased, 8);
        ck_assert_int_eq(biased_on.tiles.block_q, 192);
        ck_assert_int_eq(biased_on.tiles.block_k, 64);
        ck_assert_uint_eq(biased_on.tiles.work_group_size, 384);
        ck_assert_ptr_nonnull(strstr(biased_on.options, "-DBLOCK_N=64 -DWARPGROUPS=3 -DFLASHCL_MMA_PTX=1 -DWG_PIPELINE=1 "
                                                        "-DFLASHCL_SOFTCAP=1"));
        ck_assert_str_eq(dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &m, &biased, 8).options, biased_on.options);
    }
    /* The score modifiers and the bias run on it with their defines after the options of their tiles (at d128 the
     * dense tiles: a dense call's options, and so its program, are unchanged; at d64 the 2 x 64 pipelined tiles of
     * the score modifiers, 3 x 64 with a bias, above); an aligned bias is staged (its two tiles in the local memory counted), an
     * unaligned one read from global memory. The default mode takes a bias where it was measured faster than
     * mma.sync: staged, at either head dim; an unaligned one only FLASHCL_WGMMA_ON takes. */
    {
        flashcl_settings on = s;
        on.wgmma = FLASHCL_WGMMA_ON;
        char options[sizeof((flashcl_exec_plan *)0)->options + 96];
        for (int d = 0; d < 2; ++d) {
            const int head_dim = d ? 128 : 64, rows = 192, keys = 64;
            const flashcl_attention_desc m = problem_desc(1000, head_dim, FLASHCL_DTYPE_F16, 1);
            const flashcl_features plain = dense(&m);
            flashcl_exec_plan base = dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &m, &plain, 8);
            flashcl_features capped = plain;
            capped.softcap = 30.0f;
            const flashcl_exec_plan auto_softcap = dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &m, &capped, 8);
            ck_assert_str_eq(auto_softcap.backend->name, "nvidia-wgmma");
            if (!d) {
                /* d64: the base is the feature tiles' plan, its options without the soft-cap's define. */
                char *suffix = strstr(auto_softcap.options, " -DFLASHCL_SOFTCAP=1");
                ck_assert_ptr_nonnull(suffix);
                ck_assert_str_eq(suffix, " -DFLASHCL_SOFTCAP=1");
                base = auto_softcap;
                base.options[suffix - auto_softcap.options] = '\0';
                ck_assert_int_eq(base.tiles.block_k, 64);
                /* A bias takes three warpgroups there: the same options with WARPGROUPS=3, and local memory for a Q
                 * tile of 192 rows beside two stages of K and V (64 keys) and three arrays' alignment. */
                char *warpgroups = strstr(base.options, "-DWARPGROUPS=2");
                ck_assert_ptr_nonnull(warpgroups);
                warpgroups[strlen("-DWARPGROUPS=")] = '3';
                base.tiles.local_mem_bytes = (size_t)64 * 2 * (192 + 4 * 64) + 3 * 128;
            }
            if (d) {
                const flashcl_exec_plan softcap = dispatch_ok(&caps, &on, FLASHCL_PASS_FORWARD, &m, &capped, 8);
                ck_assert_int_eq(softcap.sm90a, 1);
                snprintf(options, sizeof options, "%s -DFLASHCL_SOFTCAP=1", base.options);
                ck_assert_str_eq(softcap.options, options);
                ck_assert_uint_eq(softcap.tiles.local_mem_bytes, base.tiles.local_mem_bytes);
                ck_assert_str_eq(auto_softcap.options, options);
            }
            flashcl_features biased = plain;
            biased.alibi = 1;
            biased.bias = 1;
            biased.bias_f32 = 1;
            biased.bias_dtype = FLASHCL_DTYPE_F32;
            biased.bias_view = (flashcl_tensor){NULL, 8, 0, 0, 1000};
            ck_assert_int_eq(dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &m, &biased, 8).sm90a, 1);
            const flashcl_exec_plan staged = dispatch_ok(&caps, &on, FLASHCL_PASS_FORWARD, &m, &biased, 8);
            ck_assert_int_eq(staged.sm90a, 1);
            snprintf(options, sizeof options,
                     "%s -DFLASHCL_ALIBI=1 -DFLASHCL_BIAS=1 -DFLASHCL_BIAS_F32=1 -DFLASHCL_BIAS_STAGED=1",
                     base.options);
            ck_assert_str_eq(staged.options, options);
            /* Two stages of the work-group's rows x (the block's keys in floats + a 16-byte chunk), and 16 bytes of
             * alignment. */
            ck_assert_uint_eq(staged.tiles.local_mem_bytes,
                              base.tiles.local_mem_bytes + 2 * (size_t)rows * ((size_t)keys * 4 + 16) + 16);
            biased.bias_view.stride_seq = 1001;
            const flashcl_exec_plan unaligned = dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &m, &biased, 8);
            ck_assert_int_eq(unaligned.sm90a, 0);
            ck_assert_str_eq(unaligned.backend->name, "nvidia-mma-sync");
            const flashcl_exec_plan unstaged = dispatch_ok(&caps, &on, FLASHCL_PASS_FORWARD, &m, &biased, 8);
            ck_assert_int_eq(unstaged.sm90a, 1);
            snprintf(options, sizeof options, "%s -DFLASHCL_ALIBI=1 -DFLASHCL_BIAS=1 -DFLASHCL_BIAS_F32=1",
                     base.options);
            ck_assert_str_eq(unstaged.options, options);
            ck_assert_uint_eq(unstaged.tiles.local_mem_bytes, base.tiles.local_mem_bytes);
        }
    }
    const flashcl_attention_desc c128 = problem_desc(1000, 128, FLASHCL_DTYPE_BF16, 1);
    const flashcl_features fc128 = dense(&c128);
    const flashcl_exec_plan causal128 = dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &c128, &fc128, 8);
    s.wgmma = FLASHCL_WGMMA_ON;
    flashcl_exec_plan forced = dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &c128, &fc128, 8);
    ck_assert_str_eq(forced.backend->name, "nvidia-wgmma");
    ck_assert_str_eq(forced.options, causal128.options);
    /* What it does not take, even forced: float, head_dim 96, rows not 16-byte aligned, a mask feature, a forced
     * plan, the tensor-core mode off or emulated, the standard implementation. (The backward has a wgmma program
     * of its own: wgmma_backward_decisions.) */
    const flashcl_attention_desc d64 = problem_desc(1000, 64, FLASHCL_DTYPE_F16, 1);
    const flashcl_features f64 = dense(&d64);
    ck_assert_str_eq(dispatch_ok(&caps, &s, FLASHCL_PASS_BACKWARD, &d64, &f64, 8).program, "backward_wgmma.cl");
    const flashcl_attention_desc d32 = problem_desc(1000, 64, FLASHCL_DTYPE_F32, 0);
    const flashcl_features f32 = dense(&d32);
    ck_assert_int_eq(dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &d32, &f32, 8).sm90a, 0);
    const flashcl_attention_desc d96 = problem_desc(1000, 96, FLASHCL_DTYPE_F16, 0);
    const flashcl_features f96 = dense(&d96);
    ck_assert_int_eq(dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &d96, &f96, 8).sm90a, 0);
    ck_assert_int_eq(dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &d64, &f64, 4).sm90a, 0);
    /* A mask feature (the window) is not the Hopper forward's: it falls back as before. */
    flashcl_features windowed = f64;
    windowed.window = 1;
    ck_assert_int_eq(dispatch_ok(&caps, &s, FLASHCL_PASS_FORWARD, &d64, &windowed, 8).sm90a, 0);
    flashcl_settings other = s;
    other.tensor_cores = FLASHCL_TENSOR_CORES_OFF;
    ck_assert_int_eq(dispatch_ok(&caps, &other, FLASHCL_PASS_FORWARD, &d64, &f64, 8).sm90a, 0);
    other.tensor_cores = FLASHCL_TENSOR_CORES_EMULATE;
    ck_assert_int_eq(dispatch_ok(&caps, &other, FLASHCL_PASS_FORWARD, &d64, &f64, 8).sm90a, 0);
    other = s;
    other.forced_plan_set = 1;
    other.forced_plan = (flashcl_plan){32, 32, 8, 8, 0, 0};
    ck_assert_int_eq(dispatch_ok(&caps, &other, FLASHCL_PASS_FORWARD, &d64, &f64, 8).sm90a, 0);
    /* Off, and on an sm_80 or sm_100 device: the mma.sync plan. */
    other = s;
    other.wgmma = FLASHCL_WGMMA_OFF;
    ck_assert_str_eq(dispatch_ok(&caps, &other, FLASHCL_PASS_FORWARD, &d64, &f64, 8).backend->name,
                     "nvidia-mma-sync");
    const int others[] = {80, 89, 100};
    for (int i = 0; i < COUNT(others); ++i) {
        flashcl_device_caps c = caps;
        c.compute_capability = others[i];
        ck_assert_str_eq(dispatch_ok(&c, &s, FLASHCL_PASS_FORWARD, &d64, &f64, 8).backend->name, "nvidia-mma-sync");
    }
    /* Without the static local memory (a device reporting only 48 KiB), its tiles do not fit. */
    flashcl_device_caps small = caps;
    small.limits.static_local_mem_bytes = 0;
    ck_assert_int_eq(dispatch_ok(&small, &s, FLASHCL_PASS_FORWARD, &d64, &f64, 8).sm90a, 0);
}
END_TEST

/* The Hopper backward (src/wgmma_backward_plan.c): on an sm_90 device with its static local memory, in the
 * default mode for dense f16/bf16 backwards at head_dim 64 and 128, causal or not: dK/dV and dQ on wgmma in one
 * sm_90a program (backward_wgmma.cl after the mma.sync backward's files), with the tiles measured fastest, its
 * options after the mma.sync backward's, its grids; the delta kernel as before; the score modifiers too.
 * Calls with a bias, float, head_dim 96, unaligned rows, the mode off, other devices, no static local memory: the
 * mma.sync plan. */
START_TEST(wgmma_backward_decisions) {
    flashcl_device_caps caps = h100();
    caps.limits.static_local_mem_bytes = 231424;
    flashcl_settings s = defaults();
    s.wgmma = FLASHCL_WGMMA_AUTO;
    flashcl_settings off = s;
    off.wgmma = FLASHCL_WGMMA_OFF;
    /* By head dim (64, 128) and mask: dK/dV warpgroups and queries per step, dQ warpgroups and keys per step. */
    static const struct {
        int kv_wg, block_q, q_wg, block_k;
    } expected[2][2] = {
        {{2, 128, 2, 128}, {2, 128, 2, 64}},
        {{2, 64, 3, 64}, {2, 64, 3, 64}},
    };
    for (int d = 0; d < 2; ++d)
        for (int causal = 0; causal < 2; ++causal) {
            const int head_dim = d ? 128 : 64;
            const flashcl_dtype dtype = causal ? FLASHCL_DTYPE_BF16 : FLASHCL_DTYPE_F16;
            const flashcl_attention_desc desc = problem_desc(1000, head_dim, dtype, causal);
            const flashcl_features f = dense(&desc);
            const flashcl_exec_plan plan = dispatch_ok(&caps, &s, FLASHCL_PASS_BACKWARD, &desc, &f, 8);
            const flashcl_exec_plan mma = dispatch_ok(&caps, &off, FLASHCL_PASS_BACKWARD, &desc, &f, 8);
            const int kv_wg = expected[d][causal].kv_wg, q_wg = expected[d][causal].q_wg;
            ck_assert_int_eq(plan.sm90a, 1);
            ck_assert_int_eq(plan.kind, FLASHCL_KERNEL_TENSOR_CORE);
            ck_assert_str_eq(plan.backend->name, "nvidia-wgmma");
            ck_assert_str_eq(mma.backend->name, "nvidia-mma-sync");
            ck_assert_str_eq(plan.program, "backward_wgmma.cl");
            ck_assert_str_eq(plan.prelude[3], "wgmma.cl");
            ck_assert_str_eq(plan.prelude[4], "backward_mma.cl");
            ck_assert_ptr_null(plan.prelude[5]);
            ck_assert_str_eq(plan.kernel_names[FLASHCL_KERNEL_DELTA], "flashcl_backward_delta");
            ck_assert_str_eq(plan.kernel_programs[FLASHCL_KERNEL_DELTA], "backward_delta.cl");
            ck_assert_str_eq(plan.kernel_names[FLASHCL_KERNEL_DKDV], "flashcl_backward_wgmma_dkdv");
            ck_assert_str_eq(plan.kernel_names[FLASHCL_KERNEL_DQ], "flashcl_backward_wgmma_dq");
            char options[sizeof mma.options + 96];
            snprintf(options, sizeof options,
                     "%s -DBW_WARPGROUPS=%d -DBW_BLOCK_Q=%d -DBWQ_WARPGROUPS=%d -DBWQ_BLOCK_K=%d", mma.options, kv_wg, expected[d][causal].block_q, q_wg, expected[d][causal].block_k);
            ck_assert_str_eq(plan.options, options);
            /* dK/dV: 64 keys per warpgroup, B x Hkv = 4; dQ: 64 query rows per warpgroup, B x Hq = 16. */
            ck_assert_uint_eq(plan.global[FLASHCL_KERNEL_DKDV][0],
                              (size_t)((1000 + 64 * kv_wg - 1) / (64 * kv_wg)) * 128 * kv_wg);
            ck_assert_uint_eq(plan.global[FLASHCL_KERNEL_DKDV][1], 4);
            ck_assert_uint_eq(plan.local[FLASHCL_KERNEL_DKDV][0], 128 * kv_wg);
            ck_assert_uint_eq(plan.global[FLASHCL_KERNEL_DQ][0],
                              (size_t)((1000 + 64 * q_wg - 1) / (64 * q_wg)) * 128 * q_wg);
            ck_assert_uint_eq(plan.global[FLASHCL_KERNEL_DQ][1], 16);
            ck_assert_uint_eq(plan.local[FLASHCL_KERNEL_DQ][0], 128 * q_wg);
            ck_assert_uint_eq(plan.global[FLASHCL_KERNEL_DELTA][0], mma.global[FLASHCL_KERNEL_DELTA][0]);
            ck_assert_int_eq(plan.tiles.block_q, expected[d][causal].block_q);
            ck_assert_int_eq(plan.tiles.block_k, 64 * kv_wg);
            ck_assert_uint_eq(plan.tiles.work_group_size, 128 * kv_wg);
            flashcl_call_stats stats;
            flashcl_exec_plan_report(&plan, &stats);
            ck_assert_str_eq(stats.backend, "nvidia-wgmma");
            ck_assert_str_eq(stats.program, "backward_wgmma.cl");
        }
    const flashcl_attention_desc d64 = problem_desc(1000, 64, FLASHCL_DTYPE_F16, 0);
    const flashcl_features f64 = dense(&d64);
    flashcl_features capped = f64;
    capped.softcap = 30.0f;
    flashcl_settings on = s;
    on.wgmma = FLASHCL_WGMMA_ON;
    /* The score modifiers: on wgmma with their defines in the ON and the default mode (measured faster); a bias:
     * on mma.sync in every mode. */
    const flashcl_exec_plan capped_on = dispatch_ok(&caps, &on, FLASHCL_PASS_BACKWARD, &d64, &capped, 8);
    ck_assert_str_eq(capped_on.backend->name, "nvidia-wgmma");
    ck_assert_ptr_nonnull(strstr(capped_on.options, "-DBWQ_BLOCK_K=128 -DFLASHCL_SOFTCAP=1"));
    ck_assert_str_eq(dispatch_ok(&caps, &s, FLASHCL_PASS_BACKWARD, &d64, &capped, 8).options, capped_on.options);
    flashcl_features alibi = f64;
    alibi.alibi = 1;
    /* d64 with ALiBi alone takes dQ steps of 64 keys (measured faster); with soft-capping beside it, 128. */
    const flashcl_exec_plan alibi_plan = dispatch_ok(&caps, &on, FLASHCL_PASS_BACKWARD, &d64, &alibi, 8);
    ck_assert_ptr_nonnull(strstr(alibi_plan.options, "-DBWQ_WARPGROUPS=2 -DBWQ_BLOCK_K=64 -DFLASHCL_ALIBI=1"));
    ck_assert_int_eq(alibi_plan.dq_tiles.block_q, 64);
    ck_assert_str_eq(dispatch_ok(&caps, &s, FLASHCL_PASS_BACKWARD, &d64, &alibi, 8).options, alibi_plan.options);
    flashcl_features both = alibi;
    both.softcap = 30.0f;
    ck_assert_ptr_nonnull(strstr(dispatch_ok(&caps, &on, FLASHCL_PASS_BACKWARD, &d64, &both, 8).options,
                                 "-DBWQ_BLOCK_K=128"));
    /* A bias: on wgmma, dK/dV and dQ (which writes dBias), its bias staged where aligned; the default mode takes the staged one (measured faster), the ON mode an unaligned one
     * too. */
    flashcl_features biased = f64;
    biased.bias = 1;
    biased.bias_f32 = 1;
    biased.bias_dtype = FLASHCL_DTYPE_F32;
    const flashcl_exec_plan biased_on = dispatch_ok(&caps, &on, FLASHCL_PASS_BACKWARD, &d64, &biased, 8);
    ck_assert_str_eq(biased_on.backend->name, "nvidia-wgmma");
    ck_assert_str_eq(biased_on.program, "backward_wgmma.cl");
    ck_assert_str_eq(biased_on.kernel_names[FLASHCL_KERNEL_DKDV], "flashcl_backward_wgmma_dkdv");
    /* dQ's staged float32 bias fits beside K and V at d64 in 64-key blocks with two warpgroups: 2 x 64. */
    ck_assert_str_eq(biased_on.kernel_names[FLASHCL_KERNEL_DQ], "flashcl_backward_wgmma_dq");
    ck_assert_ptr_nonnull(strstr(biased_on.options, "-DBWQ_WARPGROUPS=2 -DBWQ_BLOCK_K=64"));
    ck_assert_uint_eq(biased_on.dq_tiles.local_mem_bytes, 66048 + 2 * 128 * 17 * 16);
    ck_assert_ptr_nonnull(strstr(biased_on.options, "-DFLASHCL_BIAS=1 -DFLASHCL_BIAS_F32=1 -DFLASHCL_BIAS_STAGED=1"));
    /* The dK/dV kernel stages it too: two tiles of its step's queries x 128 keys beside d64's tiles; a float32 one
     * fits with 64-query steps only, a half one with the usual 128. */
    ck_assert_int_eq(biased_on.tiles.block_q, 64);
    ck_assert_ptr_nonnull(strstr(biased_on.options, "-DBW_BLOCK_Q=64"));
    ck_assert_uint_eq(biased_on.tiles.local_mem_bytes, 67072 + 2 * 64 * 33 * 16);
    flashcl_features half_bias = biased;
    half_bias.bias_f32 = 0;
    half_bias.bias_dtype = FLASHCL_DTYPE_F16;
    const flashcl_exec_plan half_on = dispatch_ok(&caps, &on, FLASHCL_PASS_BACKWARD, &d64, &half_bias, 8);
    ck_assert_int_eq(half_on.tiles.block_q, 128);
    ck_assert_uint_eq(half_on.tiles.local_mem_bytes, 100864 + 2 * 128 * 17 * 16);
    ck_assert_str_eq(dispatch_ok(&caps, &s, FLASHCL_PASS_BACKWARD, &d64, &biased, 8).options, biased_on.options);
    /* The dQ kernel's staged bias (two stages of its rows x the step's keys, rows padded by 16 bytes) where its
     * default tiles leave room, else 64-key steps, then two warpgroups (231424 bytes here): not causal, d64 keeps
     * 2 x 128 with a half bias (98816 + 69632) and a float32 one takes 64-key steps (98816 + 135168 does not fit;
     * 66048 + 69632); d128 keeps 3 x 64 with a half bias (164352 + 55296) and a float32 one takes two warpgroups
     * (164352 + 104448 does not fit; 131584 + 69632). */
    {
        static const struct {
            int head_dim, f32, warpgroups, block_k;
            size_t bytes;
        } dq_fits[4] = {{64, 0, 2, 128, 98816 + 69632},
                        {64, 1, 2, 64, 66048 + 69632},
                        {128, 0, 3, 64, 164352 + 55296},
                        {128, 1, 2, 64, 131584 + 69632}};
        for (int i = 0; i < 4; ++i) {
            const flashcl_attention_desc wide = problem_desc(1000, dq_fits[i].head_dim, FLASHCL_DTYPE_F16, 0);
            flashcl_features wide_bias = dense(&wide);
            wide_bias.bias = 1;
            wide_bias.bias_f32 = dq_fits[i].f32;
            wide_bias.bias_dtype = dq_fits[i].f32 ? FLASHCL_DTYPE_F32 : FLASHCL_DTYPE_F16;
            wide_bias.bias_view = biased.bias_view;
            const flashcl_exec_plan p = dispatch_ok(&caps, &s, FLASHCL_PASS_BACKWARD, &wide, &wide_bias, 8);
            ck_assert_str_eq(p.kernel_names[FLASHCL_KERNEL_DQ], "flashcl_backward_wgmma_dq");
            char want[64];
            snprintf(want, sizeof want, "-DBWQ_WARPGROUPS=%d -DBWQ_BLOCK_K=%d", dq_fits[i].warpgroups,
                     dq_fits[i].block_k);
            ck_assert_msg(strstr(p.options, want) != NULL, "d%d %s bias: %s", dq_fits[i].head_dim,
                          dq_fits[i].f32 ? "float32" : "half", p.options);
            ck_assert_uint_eq(p.dq_tiles.local_mem_bytes, dq_fits[i].bytes);
        }
    }
    flashcl_features unaligned = biased;
    unaligned.bias_view.offset = 1;
    const flashcl_exec_plan unaligned_on = dispatch_ok(&caps, &on, FLASHCL_PASS_BACKWARD, &d64, &unaligned, 8);
    ck_assert_str_eq(unaligned_on.backend->name, "nvidia-wgmma");
    ck_assert_ptr_null(strstr(unaligned_on.options, "-DFLASHCL_BIAS_STAGED"));
    ck_assert_str_eq(dispatch_ok(&caps, &s, FLASHCL_PASS_BACKWARD, &d64, &unaligned, 8).backend->name,
                     "nvidia-mma-sync");
    ck_assert_int_eq(dispatch_ok(&caps, &on, FLASHCL_PASS_BACKWARD, &d64, &f64, 4).sm90a, 0);
    const flashcl_attention_desc d32 = problem_desc(1000, 64, FLASHCL_DTYPE_F32, 0);
    const flashcl_features f32 = dense(&d32);
    ck_assert_int_eq(dispatch_ok(&caps, &on, FLASHCL_PASS_BACKWARD, &d32, &f32, 8).sm90a, 0);
    const flashcl_attention_desc d96 = problem_desc(1000, 96, FLASHCL_DTYPE_F16, 0);
    const flashcl_features f96 = dense(&d96);
    ck_assert_int_eq(dispatch_ok(&caps, &on, FLASHCL_PASS_BACKWARD, &d96, &f96, 8).sm90a, 0);
    ck_assert_str_eq(dispatch_ok(&caps, &off, FLASHCL_PASS_BACKWARD, &d64, &f64, 8).program, "backward_mma.cl");
    flashcl_device_caps sm80 = caps;
    sm80.compute_capability = 80;
    ck_assert_str_eq(dispatch_ok(&sm80, &on, FLASHCL_PASS_BACKWARD, &d64, &f64, 8).program, "backward_mma.cl");
    flashcl_device_caps small = caps;
    small.limits.static_local_mem_bytes = 0;
    ck_assert_int_eq(dispatch_ok(&small, &on, FLASHCL_PASS_BACKWARD, &d64, &f64, 8).sm90a, 0);
}
END_TEST

static Suite *dispatch_suite(void) {
    Suite *s = suite_create("dispatch");
    TCase *tc = tcase_create("pure");
    tcase_add_test(tc, h100_f16_runs_tensor_cores);
    tcase_add_test(tc, h100_f32_needs_3xtf32);
    tcase_add_test(tc, h200_takes_measured_portable_plans);
    tcase_add_test(tc, other_devices_run_portable);
    tcase_add_test(tc, tensor_core_conditions);
    tcase_add_test(tc, emulation_within_llvmpipe_budget);
    tcase_add_test(tc, refusals_say_why);
    tcase_add_test(tc, every_plan_is_consistent);
    tcase_add_test(tc, features_as_data);
    tcase_add_test(tc, split_kv_decisions);
    tcase_add_test(tc, decode_decisions);
    tcase_add_test(tc, decode_mma_decisions);
    tcase_add_test(tc, wgmma_decisions);
    tcase_add_test(tc, wgmma_backward_decisions);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *runner = srunner_create(dispatch_suite());
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? 0 : 1;
}
