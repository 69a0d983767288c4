/* register_budget.c: the per-work-item register budget of the portable forward, by what the device reports. */
#include <limits.h>

#include "register_budget.h"

/* Every device: the output and score blocks bounded (past 64 and 32
 * floats GPU compilers spill), rows only through them. The plans measured
 * on the H100, POCL and rusticl, and compiled without spills for CDNA
 * (gfx90a: 512 VGPRs per lane with the AGPRs). */
const flashcl_register_budget flashcl_register_budget_default = {
    .accumulators = 64, .scores = 32, .rows = INT_MAX, .accumulators_past_rows = 64};

flashcl_register_budget flashcl_register_budget_of(const flashcl_device_caps *caps) {
    (void)caps; /* one budget for every device so far */
    return flashcl_register_budget_default;
}
