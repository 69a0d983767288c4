/* compile_targets.h: the GPU targets the kernels are compiled for offline (no device), each with the limits its
 * OpenCL driver reports, so the dispatcher plans for it exactly as it would on the real device. */
#ifndef PORTABILITY_COMPILE_TARGETS_H
#define PORTABILITY_COMPILE_TARGETS_H

#include "kernel_families.h"

typedef struct compile_target {
    const char *name;     /* the compiler's name for it: clang's -mcpu, ocloc's -device */
    const char *compiler; /* "amdgcn" (clang -target amdgcn-amd-amdhsa) or "ocloc" */
    const char *product;  /* the card it stands for, in messages */
    size_t local_mem_bytes, max_work_group_size;
    unsigned compute_units;
    int subgroup_width;   /* wavefront / preferred SIMD width */
    flashcl_vendor vendor;
    const char *device_name; /* CL_DEVICE_NAME as the vendor's driver reports it (tuned plans match on it) */
    kernel_coverage coverage; /* what the check compiles for it within its time budget */
} compile_target;

/* The target named name, or NULL. */
const compile_target *compile_target_find(const char *name);

/* The dispatcher's view of t. */
flashcl_device_caps compile_target_caps(const compile_target *t);

#endif
