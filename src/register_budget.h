/* register_budget.h: how much per-work-item state the portable forward's tiles may keep in registers on a device,
 * and the planner within such a budget (plan.c). */
#ifndef FLASHCL_REGISTER_BUDGET_H
#define FLASHCL_REGISTER_BUDGET_H

#include "device_caps.h"

/* Per work-item of cl/forward.cl: floats (and rows) that stay live across a whole key block. Past them a GPU
 * compiler spills registers to scratch memory. */
typedef struct flashcl_register_budget {
    int accumulators; /* ROWS_PER_ITEM x DIMS_PER_ITEM: the output block */
    int scores;       /* ROWS_PER_ITEM x KEYS_PER_ITEM: the score block */
    /* Each query row adds more than its accumulators: its running maximum, sum and rescale factor, and its Q and
     * P reads in the two inner loops. Past `rows` rows per work-item the output block may hold only
     * accumulators_past_rows floats. */
    int rows, accumulators_past_rows;
} flashcl_register_budget;

/* The budget of every device that reports nothing narrower: what the public flashcl_plan_choose and
 * flashcl_plan_check apply. */
extern const flashcl_register_budget flashcl_register_budget_default;

/* The budget for caps' device (register_budget.c). */
flashcl_register_budget flashcl_register_budget_of(const flashcl_device_caps *caps);

/* flashcl_plan_check and flashcl_plan_choose within budget (plan.c); the public functions pass the default. */
flashcl_status flashcl_plan_check_within(const flashcl_device_limits *limits, const flashcl_register_budget *budget,
                                         flashcl_pass pass, int head_dim, flashcl_dtype dtype, flashcl_plan *plan,
                                         char *reason, size_t reason_size);
flashcl_status flashcl_plan_choose_within(const flashcl_device_limits *limits, const flashcl_register_budget *budget,
                                          flashcl_pass pass, int head_dim, flashcl_dtype dtype, int causal,
                                          flashcl_plan *plan);

#endif
