/* plan.c: the tile planner, a pure function from device limits and problem shape to a tile configuration. */
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "plan_footprint.h"
#include "register_budget.h"
#include "struct_abi.h"

/* Head-dim columns per work-item. Mesa rusticl 22.3 on llvmpipe computes wrong
 * results with 64 (POCL is exact with the same plan; tests found it at
 * head_dim 192-256 with long key sequences), and 32 already keeps a GPU's
 * accumulators in registers. */
#define MAX_DIMS_PER_ITEM 32
/* The work-group size the planner aims for: enough work-items to hide
 * latency, small enough that several groups share a compute unit. */
#define TARGET_WORK_GROUP 128

static int round_up(int x, int m) { return ((x + m - 1) / m) * m; }

size_t flashcl_forward_local_bytes(const flashcl_plan *p, int head_dim) {
    /* Mirrors the __local arrays of cl/forward.cl: rows padded to a multiple
     * of 4 floats (aligned float4 reads) plus 4 (bank spread). */
    const int dim_padded = round_up(head_dim, p->threads_k);
    const int row = round_up(dim_padded, 4) + 4;
    size_t floats = (size_t)p->block_q * row                              /* q_tile */
                    + (size_t)p->block_k * row                            /* k_tile */
                    + (size_t)round_up(p->block_k, 4) * dim_padded        /* v_tile, keys padded to 4 */
                    + (size_t)p->block_q * (round_up(p->block_k, 4) + 4)  /* p_tile */
                    + (size_t)p->block_q * (round_up(p->threads_k, 4) + 4); /* parts */
    return floats * sizeof(float);
}

static int is_positive_power_of_two(int x) { return x > 0 && (x & (x - 1)) == 0; }

/* The forward's per-work-item state against budget: 1 if it fits, else 0 with the reason. */
static int forward_fits_registers(const flashcl_plan *p, int head_dim, const flashcl_register_budget *budget,
                                  char *reason, size_t reason_size) {
    const int rows_per_item = p->block_q / p->threads_q;
    const int dims_per_item = round_up(head_dim, p->threads_k) / p->threads_k;
    const int keys_per_item = p->block_k / p->threads_k;
    const int accumulators = rows_per_item * dims_per_item;
    if (accumulators > budget->accumulators || rows_per_item * keys_per_item > budget->scores) {
        snprintf(reason, reason_size,
                 "%d accumulators and %d scores per work-item exceed the register budget (%d, %d)", accumulators,
                 rows_per_item * keys_per_item, budget->accumulators, budget->scores);
        return 0;
    }
    if (rows_per_item > budget->rows && accumulators > budget->accumulators_past_rows) {
        snprintf(reason, reason_size,
                 "%d query rows per work-item leave room for %d accumulators on this device, not %d", rows_per_item,
                 budget->accumulators_past_rows, accumulators);
        return 0;
    }
    return 1;
}

flashcl_status flashcl_plan_check(const flashcl_device_limits *limits, flashcl_pass pass, int head_dim,
                                  flashcl_dtype dtype, flashcl_plan *p, char *reason, size_t reason_size) {
    return flashcl_plan_check_within(limits, &flashcl_register_budget_default, pass, head_dim, dtype, p, reason,
                                     reason_size);
}

flashcl_status flashcl_plan_check_within(const flashcl_device_limits *limits, const flashcl_register_budget *budget,
                                         flashcl_pass pass, int head_dim, flashcl_dtype dtype, flashcl_plan *p,
                                         char *reason, size_t reason_size) {
    char scratch[192]; /* reasons are formatted even when the caller wants none: room for the longest */
    if (!reason) {
        reason = scratch;
        reason_size = sizeof scratch;
    }
    reason[0] = '\0';
    if (!limits || !p) {
        snprintf(reason, reason_size, "limits or plan is NULL");
        return FLASHCL_ERROR_INVALID_ARGUMENT;
    }
    flashcl_device_limits full; /* this library's full-size copy of the caller's limits */
    if (flashcl_struct_import(NULL, &flashcl_abi_device_limits, limits, &full) != FLASHCL_SUCCESS) {
        snprintf(reason, reason_size, "%s", flashcl_last_error(NULL));
        return FLASHCL_ERROR_INVALID_ARGUMENT;
    }
    limits = &full;
    if (head_dim < 1 || head_dim > FLASHCL_MAX_HEAD_DIM) {
        snprintf(reason, reason_size, "head_dim %d outside 1..%d", head_dim, FLASHCL_MAX_HEAD_DIM);
        return FLASHCL_ERROR_UNSUPPORTED;
    }
    if (flashcl_dtype_size(dtype) == 0) {
        snprintf(reason, reason_size, "unknown dtype %d", (int)dtype);
        return FLASHCL_ERROR_INVALID_ARGUMENT;
    }
    if (pass != FLASHCL_PASS_FORWARD && pass != FLASHCL_PASS_BACKWARD) {
        snprintf(reason, reason_size, "unknown pass %d", (int)pass);
        return FLASHCL_ERROR_INVALID_ARGUMENT;
    }
    if (p->block_q < 1 || p->block_k < 1 || p->threads_q < 1 || p->threads_k < 1 || p->block_q > 1024 ||
        p->block_k > 1024 || p->threads_q > 1024 || p->threads_k > 1024) {
        snprintf(reason, reason_size, "every tile size must be in 1..1024");
        return FLASHCL_ERROR_PLAN;
    }
    if (!is_positive_power_of_two(p->threads_k)) {
        snprintf(reason, reason_size, "threads_k %d is not a power of two", p->threads_k);
        return FLASHCL_ERROR_PLAN;
    }
    if (p->block_q % p->threads_q != 0 || p->block_k % p->threads_k != 0) {
        snprintf(reason, reason_size, "block_q %% threads_q and block_k %% threads_k must be 0 (%d/%d, %d/%d)",
                 p->block_q, p->threads_q, p->block_k, p->threads_k);
        return FLASHCL_ERROR_PLAN;
    }
    const size_t wg = (size_t)p->threads_q * (size_t)p->threads_k;
    if (wg > limits->max_work_group_size) {
        snprintf(reason, reason_size, "work-group size %zu exceeds the device's %zu", wg,
                 limits->max_work_group_size);
        return FLASHCL_ERROR_PLAN;
    }
    size_t local;
    if (pass == FLASHCL_PASS_FORWARD) {
        const int dims_per_item = round_up(head_dim, p->threads_k) / p->threads_k;
        if (dims_per_item > MAX_DIMS_PER_ITEM) {
            snprintf(reason, reason_size, "%d head-dim columns per work-item exceed %d (use more threads_k)",
                     dims_per_item, MAX_DIMS_PER_ITEM);
            return FLASHCL_ERROR_PLAN;
        }
        if (!forward_fits_registers(p, head_dim, budget, reason, reason_size)) return FLASHCL_ERROR_PLAN;
        local = flashcl_forward_local_bytes(p, head_dim);
    } else {
        flashcl_status status = flashcl_backward_plan_check(p, head_dim, &local, reason, reason_size);
        if (status != FLASHCL_SUCCESS) return status;
    }
    /* The portable kernels' local arrays are all static (sized by -D), forward and backward alike, so their plans
     * may use the device's static local memory where that is larger (NVIDIA). */
    const size_t capacity = limits->static_local_mem_bytes > limits->local_mem_bytes ? limits->static_local_mem_bytes
                                                                                      : limits->local_mem_bytes;
    if (local > capacity) {
        snprintf(reason, reason_size, "needs %zu bytes of local memory, the device has %zu", local, capacity);
        return FLASHCL_ERROR_PLAN;
    }
    p->work_group_size = wg;
    p->local_mem_bytes = local;
    return FLASHCL_SUCCESS;
}

/* Tries work-group shapes for one (block_q, block_k) from the target size
 * down; the first that passes every check wins. */
static int try_blocks(const flashcl_device_limits *limits, const flashcl_register_budget *budget, flashcl_pass pass,
                      int head_dim, flashcl_dtype dtype, int block_q, int block_k, flashcl_plan *out) {
    /* The largest power of two within both the target and the device limit. */
    size_t target = 1;
    while (target * 2 <= TARGET_WORK_GROUP && target * 2 <= limits->max_work_group_size) target *= 2;
    for (size_t wg = target; wg >= 1; wg /= 2) {
        /* Prefer the widest threads_k that divides block_k (coalesced loads). */
        for (int threads_k = 32; threads_k >= 1; threads_k /= 2) {
            if ((size_t)threads_k > wg || block_k % threads_k != 0) continue;
            int threads_q = (int)(wg / (size_t)threads_k);
            if (block_q % threads_q != 0) continue;
            flashcl_plan p = {block_q, block_k, threads_q, threads_k, 0, 0};
            if (flashcl_plan_check_within(limits, budget, pass, head_dim, dtype, &p, NULL, 0) == FLASHCL_SUCCESS) {
                *out = p;
                return 1;
            }
        }
        if (wg == 1) break;
    }
    return 0;
}

flashcl_status flashcl_plan_choose(const flashcl_device_limits *limits, flashcl_pass pass, int head_dim,
                                   flashcl_dtype dtype, int causal, flashcl_plan *plan) {
    return flashcl_plan_choose_within(limits, &flashcl_register_budget_default, pass, head_dim, dtype, causal, plan);
}

flashcl_status flashcl_plan_choose_within(const flashcl_device_limits *limits, const flashcl_register_budget *budget,
                                          flashcl_pass pass, int head_dim, flashcl_dtype dtype, int causal,
                                          flashcl_plan *plan) {
    (void)causal; /* the same tiles serve causal problems; skipped blocks need no other shape */
    /* No context to hold a failure's detail: it goes where flashcl_last_error(NULL) reads. */
    if (!limits || !plan)
        return flashcl_fail(NULL, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_plan_choose: %s is NULL",
                            limits ? "plan" : "limits");
    flashcl_device_limits full; /* this library's full-size copy of the caller's limits */
    flashcl_status status = flashcl_struct_import(NULL, &flashcl_abi_device_limits, limits, &full);
    if (status != FLASHCL_SUCCESS) return status;
    /* The planner keeps to the reported local memory: blocks that need NVIDIA's larger static local memory are
     * taken only where measured faster (tuned_plans.c), since they also hold fewer work-groups per unit. */
    full.static_local_mem_bytes = full.local_mem_bytes;
    limits = &full;
    if (head_dim < 1 || head_dim > FLASHCL_MAX_HEAD_DIM)
        return flashcl_fail(NULL, FLASHCL_ERROR_UNSUPPORTED, "flashcl_plan_choose: head_dim %d is outside 1..%d",
                            head_dim, FLASHCL_MAX_HEAD_DIM);
    if (flashcl_dtype_size(dtype) == 0)
        return flashcl_fail(NULL, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_plan_choose: unknown dtype %d", (int)dtype);
    if (pass != FLASHCL_PASS_FORWARD && pass != FLASHCL_PASS_BACKWARD)
        return flashcl_fail(NULL, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_plan_choose: unknown pass %d", (int)pass);
    if (limits->max_work_group_size < 1)
        return flashcl_fail(NULL, FLASHCL_ERROR_PLAN, "flashcl_plan_choose: the device's work-group limit is 0");
    /* The block that stays in local memory (block_q forward, block_k
     * backward) sets how often the other operands are re-read from global
     * memory: make it as large as fits. The streamed block first needs to be
     * wide enough (>= 16) to amortise the barriers of each step; only if
     * nothing fits is it allowed to shrink further. */
    static const int resident_sizes[] = {128, 64, 32, 16, 8, 4, 2, 1};
    static const int streamed_sizes[] = {64, 32, 16, 8, 4, 2, 1};
    for (int phase = 0; phase < 2; ++phase) {
        for (size_t r = 0; r < sizeof resident_sizes / sizeof resident_sizes[0]; ++r) {
            for (size_t s = 0; s < sizeof streamed_sizes / sizeof streamed_sizes[0]; ++s) {
                int streamed = streamed_sizes[s];
                if (phase == 0 && streamed < 16) continue;
                int block_q = pass == FLASHCL_PASS_FORWARD ? resident_sizes[r] : streamed;
                int block_k = pass == FLASHCL_PASS_FORWARD ? streamed : resident_sizes[r];
                if (try_blocks(limits, budget, pass, head_dim, dtype, block_q, block_k, plan)) return FLASHCL_SUCCESS;
            }
        }
    }
    return flashcl_fail(NULL, FLASHCL_ERROR_PLAN,
                        "flashcl_plan_choose: no %s tile plan fits local memory %zu bytes and work-groups of %zu "
                        "for head_dim %d",
                        pass == FLASHCL_PASS_FORWARD ? "forward" : "backward", limits->local_mem_bytes,
                        limits->max_work_group_size, head_dim);
}
