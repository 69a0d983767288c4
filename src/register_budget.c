/* register_budget.c: the per-work-item register budget of the portable forward, by what the device reports. */
#include <limits.h>

#include "register_budget.h"

/* Every device: the output and score blocks bounded (past 64 and 32
 * floats GPU compilers spill), rows only through them. The plans measured
 * on the H100, POCL and rusticl, and compiled without spills for CDNA
 * (gfx90a: 512 VGPRs per lane with the AGPRs). */
const flashcl_register_budget flashcl_register_budget_default = {
    .accumulators = 64, .scores = 32, .rows = INT_MAX, .accumulators_past_rows = 64};

/* AMD wave32 (RDNA: gfx10xx, gfx11xx): 256 VGPRs per lane, half of CDNA's.
 * clang 15 for gfx1030 (tests/portability/compile_check.sh, and the sweep
 * in docs/architecture.md, "The portable planner and register budgets"):
 * the default budget's forward at head dims 53-64 is 128x16 tiles on 8x16
 * work-items, 16 rows of 4 columns (64 accumulators, 16 scores): 256 VGPRs
 * and 116-198 more spilled, every storage type and feature. The same 64
 * accumulators as 8 rows of 8 (16x8 work-items) take 205-253, none
 * spilled. Past 8 rows at most 32 accumulators, not none: the 32 rows of
 * one column of head dims up to 32 (128x32 tiles on 4x32) spill nothing,
 * and the 8-row plans that would replace them do (46-195 VGPRs at head
 * dims 9-24: clang's register use is not monotone in the tile there). */
static const flashcl_register_budget rdna_budget = {
    .accumulators = 64, .scores = 32, .rows = 8, .accumulators_past_rows = 32};

flashcl_register_budget flashcl_register_budget_of(const flashcl_device_caps *caps) {
    /* The wavefront width AMD's driver reports (CL_DEVICE_WAVEFRONT_WIDTH_AMD,
     * device_caps.c): 32 on RDNA, 64 on GCN and CDNA. A device that reports
     * none keeps the default. */
    if (caps->vendor == FLASHCL_VENDOR_AMD && caps->subgroup_width == 32) return rdna_budget;
    return flashcl_register_budget_default;
}
