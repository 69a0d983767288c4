/* tuned_plans.c: plans measured to be fastest on specific devices; they override the planner's default. */
#include <string.h>

#include "device_caps.h"

typedef struct tuned_plan {
    /* Matched against CL_DEVICE_NAME: the entry applies where either appears (the second may be NULL). The H100 and
     * the H200 are one chip (GH100, 132 units, 226 KiB of static local memory found on both) with different memory;
     * the substrings also match the chip's other boards ("H100 PCIe", "GH200"), which were not measured. */
    const char *device_substrings[2];
    flashcl_pass pass;
    flashcl_dtype dtype;
    int head_dim;
    flashcl_plan plan;
} tuned_plan;

/* Each entry was measured with `flashcl bench` or the plan sweep recorded in
 * docs/perf.md; the planner's choice remains the fallback for every shape
 * not listed, and an entry is used only if it passes flashcl_plan_check on
 * the device at hand. */
static const tuned_plan tuned_plans[] = {
    /* H200 (driver 580): `flashcl tune --plans ...` at N 2048 (docs/perf.md, "The H100's portable plans on the
     * H200"; docs/results/h200/s12_tune/) put the H100's entries below first in seven of eight (pass, storage, d)
     * and this one second: forward f16 storage d64 128x32 blocks, threads 16x8 (76 KB of static local memory),
     * 2.53 ms against 2.73 for the H100's 64,32,16,8. Listed first, it takes the H200's calls. */
    {{"H200", NULL}, FLASHCL_PASS_FORWARD, FLASHCL_DTYPE_F16, 64, {128, 32, 16, 8, 0, 0}},
    /* H100, OpenCL 3.0 (driver 580): `flashcl tune` on forward v4, N=2048
     * (docs/perf.md, docs/tune/): d64 f32 1.19x over the planner's default,
     * d128 f32 the default itself (within 48 KiB); f16 storage 1.05x / 1.06x. */
    {{"H100", "H200"}, FLASHCL_PASS_FORWARD, FLASHCL_DTYPE_F32, 64, {64, 32, 8, 8, 0, 0}},
    {{"H100", "H200"}, FLASHCL_PASS_FORWARD, FLASHCL_DTYPE_F16, 64, {64, 32, 16, 8, 0, 0}},
    /* d128 past the reported 48 KiB, in the static local memory (plan.c; 226 KiB found on the H100):
     * `flashcl tune --plans ...` at the protocol shape N 2048 (docs/perf.md, "Portable forward in static
     * local memory"): f32 64x32 blocks 29.3 TFLOP/s against 25.4 for the 48 KiB plan 32,16,8,8 (1.15x);
     * f16 storage 128x32 26.6 against 20.3 (1.31x). Where the static size is not found (another
     * driver), the check fails and the planner's plan runs. */
    {{"H100", "H200"}, FLASHCL_PASS_FORWARD, FLASHCL_DTYPE_F32, 128, {64, 32, 8, 16, 0, 0}},
    {{"H100", "H200"}, FLASHCL_PASS_FORWARD, FLASHCL_DTYPE_F16, 128, {128, 32, 32, 8, 0, 0}},
    /* Backward past the reported 48 KiB, in the static local memory (the backward kernels' arrays are static
     * too): `flashcl tune --pass backward --plans ...` at N 2048, timed as forward+backward (docs/perf.md,
     * "Portable backward in static local memory"; docs/results/h100/static_local_backward/). 64 resident rows
     * instead of 32 halve the re-reads of the streamed operands: d64 64x64 blocks (105 KB) 1.13x over the
     * 48 KiB plan 32,32,16,8 in f32 and f16 storage; d128 16x64 (95 KB) 1.22x / 1.21x over 8,32,8,16. Where
     * the static size is not found, these fail the check and the 48 KiB entries below run. */
    {{"H100", "H200"}, FLASHCL_PASS_BACKWARD, FLASHCL_DTYPE_F32, 64, {64, 64, 16, 16, 0, 0}},
    {{"H100", "H200"}, FLASHCL_PASS_BACKWARD, FLASHCL_DTYPE_F32, 128, {16, 64, 16, 16, 0, 0}},
    {{"H100", "H200"}, FLASHCL_PASS_BACKWARD, FLASHCL_DTYPE_F16, 64, {64, 64, 16, 16, 0, 0}},
    {{"H100", "H200"}, FLASHCL_PASS_BACKWARD, FLASHCL_DTYPE_F16, 128, {16, 64, 16, 16, 0, 0}},
    /* H100: `flashcl tune --pass backward` at N=2048 (docs/perf.md, backward plans):
     * 1.33x (d64) and 1.19x (d128) over the planner's default, forward+backward. */
    {{"H100", "H200"}, FLASHCL_PASS_BACKWARD, FLASHCL_DTYPE_F32, 64, {32, 32, 16, 8, 0, 0}},
    {{"H100", "H200"}, FLASHCL_PASS_BACKWARD, FLASHCL_DTYPE_F32, 128, {8, 32, 8, 16, 0, 0}},
    /* H100, backward v2 with f16 storage: `flashcl tune --pass backward --dtype f16 --plans ...`
     * (docs/tune/h100_backward_v2_f16_d*.json): the f32 winners win again, 1.45x (d64)
     * and 1.26x (d128) over the planner's default. */
    {{"H100", "H200"}, FLASHCL_PASS_BACKWARD, FLASHCL_DTYPE_F16, 64, {32, 32, 16, 8, 0, 0}},
    {{"H100", "H200"}, FLASHCL_PASS_BACKWARD, FLASHCL_DTYPE_F16, 128, {8, 32, 8, 16, 0, 0}},
};

/* 1 and *plan set if a measured plan exists for caps' device and this
 * problem, else 0 (dispatch.c). */
int flashcl_tuned_plan(const flashcl_device_caps *caps, flashcl_pass pass, const flashcl_attention_desc *desc,
                       flashcl_plan *plan);
int flashcl_tuned_plan(const flashcl_device_caps *caps, flashcl_pass pass, const flashcl_attention_desc *desc,
                       flashcl_plan *plan) {
    for (size_t i = 0; i < sizeof tuned_plans / sizeof tuned_plans[0]; ++i) {
        const tuned_plan *t = &tuned_plans[i];
        if (t->pass != pass || t->dtype != desc->dtype || t->head_dim != desc->head_dim) continue;
        if (!strstr(caps->name, t->device_substrings[0]) &&
            !(t->device_substrings[1] && strstr(caps->name, t->device_substrings[1])))
            continue;
        flashcl_plan candidate = t->plan;
        if (flashcl_plan_check(&caps->limits, pass, desc->head_dim, desc->dtype, &candidate, NULL, 0) != FLASHCL_SUCCESS)
            continue;
        *plan = candidate;
        return 1;
    }
    return 0;
}
