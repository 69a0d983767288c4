/* backward_plan.c: constraints of the backward kernels' tiles (cl/backward.cl). */
#include <stdio.h>

#include "plan_footprint.h"

flashcl_status flashcl_backward_plan_check(const flashcl_plan *p, int head_dim, size_t *local_bytes, char *reason,
                                           size_t reason_size) {
    (void)p;
    (void)head_dim;
    *local_bytes = 0;
    snprintf(reason, reason_size, "the backward pass is not implemented yet");
    return FLASHCL_ERROR_UNSUPPORTED;
}
