/* plan_footprint.h: per-pass local-memory footprints and constraints used by the planner. */
#ifndef FLASHCL_PLAN_FOOTPRINT_H
#define FLASHCL_PLAN_FOOTPRINT_H

#include "flashcl.h"

/* Bytes of __local memory cl/forward.cl declares for plan p. */
size_t flashcl_forward_local_bytes(const flashcl_plan *p, int head_dim);

/* Backward-pass constraints of cl/backward.cl: fills *local_bytes or explains
 * in reason why p does not fit. */
flashcl_status flashcl_backward_plan_check(const flashcl_plan *p, int head_dim, size_t *local_bytes, char *reason,
                                           size_t reason_size);

#endif
