/* kernel_families.h: every kernel program flashcl builds, as a table of families, and the builds (program files,
 * -D options) the library would compile for a given device: the dispatcher's own plans where it decides. */
#ifndef PORTABILITY_KERNEL_FAMILIES_H
#define PORTABILITY_KERNEL_FAMILIES_H

#include "dispatch.h"

/* One program the library would build on the device. */
typedef struct kernel_build {
    char id[128];            /* family.dtype.dN.variant: names the compile in messages and files */
    const char *prelude[5];  /* files between common.cl and program, NULL-terminated (as flashcl_exec_plan's) */
    const char *program;     /* the cl/ file of the kernels */
    char options[FLASHCL_BUILD_OPTIONS_CAPACITY];
    size_t planned_local_bytes; /* the planner's local memory for these tiles; 0: not planned (fixed kernels) */
} kernel_build;

/* How much of each family a walk covers. */
typedef enum kernel_coverage {
    /* Dense builds in every storage type at head dims 64 and 128, and each feature define once, at a storage
     * type and head dim that rotate with the feature's row (so every define meets every dtype over the table). */
    COVER_VARIANTS,
    /* As COVER_VARIANTS, but the dense 16-bit builds split between two targets of one compiler: the first takes f16
     * at head dim 128 and bf16 at 64, the second f16 at 64 and bf16 at 128; float at both head dims on both. Each
     * target still compiles both 16-bit types and both head dims, and each (type, head dim) pair is compiled on one
     * of the two (the types differ in their loads and stores, not in the tiles the target's limits give). */
    COVER_VARIANTS_16BIT_FIRST,
    COVER_VARIANTS_16BIT_SECOND,
    /* One build per family: f16 (a family without storage types: its one build) at head dim 128, dense. For a
     * compiler too slow for more within the test's time budget (ocloc: 2-7 s for each large kernel). */
    COVER_FAMILIES
} kernel_coverage;

/* Called once per distinct build; a nonzero return stops the walk with it. */
typedef int (*kernel_build_sink)(const kernel_build *build, void *user);

/* Walks every family and variant for caps, handing each distinct build to sink. Returns 0, sink's nonzero value,
 * or -1 with a message in error (the dispatcher refused, or chose another program than the family's row says). */
int kernel_families_walk(const flashcl_device_caps *caps, kernel_coverage coverage, kernel_build_sink sink, void *user, char *error,
                         size_t error_size);

#endif
