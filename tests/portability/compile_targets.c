/* compile_targets.c: the offline compile targets and the limits their drivers report. */
#include "compile_targets.h"

#include <stdio.h>
#include <string.h>

/* Limits: AMD's ROCm OpenCL reports 64 KiB of local memory and work-groups of up to 1024 for gfx90a (MI210/MI250,
 * wavefront 64) and gfx1030 (RX 6800/6900, wave32 by default in OpenCL); CL_DEVICE_NAME is the gfx name with its
 * target features. Intel's compute runtime reports 64 KiB of SLM and 1024-wide work-groups for the Arc A770
 * (acm-g10) and 128 KiB for the Data Center GPU Max 1550 (pvc). The same figures and their sources are in
 * test_device_table.c. */
static const compile_target targets[] = {
    {"gfx90a", "amdgcn", "AMD Instinct MI210/MI250", 64 * 1024, 1024, 104, 64, FLASHCL_VENDOR_AMD,
     "gfx90a:sramecc+:xnack-", COVER_VARIANTS_16BIT_FIRST},
    {"gfx1030", "amdgcn", "AMD Radeon RX 6800/6900", 64 * 1024, 1024, 36, 32, FLASHCL_VENDOR_AMD, "gfx1030",
     COVER_VARIANTS_16BIT_SECOND},
    {"acm-g10", "ocloc", "Intel Arc A770", 64 * 1024, 1024, 512, 16, FLASHCL_VENDOR_INTEL,
     "Intel(R) Arc(TM) A770 Graphics", COVER_FAMILIES},
    {"pvc", "ocloc", "Intel Data Center GPU Max 1550", 128 * 1024, 1024, 448, 16, FLASHCL_VENDOR_INTEL,
     "Intel(R) Data Center GPU Max 1550", COVER_FAMILIES},
};

const compile_target *compile_target_find(const char *name) {
    for (size_t i = 0; i < sizeof targets / sizeof targets[0]; ++i)
        if (strcmp(targets[i].name, name) == 0) return &targets[i];
    return NULL;
}

flashcl_device_caps compile_target_caps(const compile_target *t) {
    flashcl_device_caps c;
    memset(&c, 0, sizeof c);
    c.limits = (flashcl_device_limits){sizeof(flashcl_device_limits), t->local_mem_bytes, t->max_work_group_size, (size_t)t->subgroup_width,
                                       t->compute_units, 0};
    snprintf(c.name, sizeof c.name, "%s", t->device_name);
    c.vendor = t->vendor;
    c.subgroup_width = t->subgroup_width;
    return c;
}
