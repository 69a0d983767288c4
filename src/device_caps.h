/* device_caps.h: what the dispatcher knows about a device, as plain data (tests make these up without OpenCL). */
#ifndef FLASHCL_DEVICE_CAPS_H
#define FLASHCL_DEVICE_CAPS_H

#include "flashcl.h"

typedef enum flashcl_vendor {
    FLASHCL_VENDOR_OTHER = 0,
    FLASHCL_VENDOR_NVIDIA,
    FLASHCL_VENDOR_AMD,
    FLASHCL_VENDOR_INTEL
} flashcl_vendor;

typedef struct flashcl_device_caps {
    flashcl_device_limits limits;
    char name[256];          /* CL_DEVICE_NAME: tuned plans match on it */
    flashcl_vendor vendor;
    int compute_capability;  /* NVIDIA: major * 10 + minor (90 for an H100); 0 elsewhere or unknown */
    int subgroup_width;      /* lanes that run in lockstep (warp, wavefront); 0 unknown */
    /* Mesa llvmpipe: every loop of a kernel ends, silently, once a
     * work-item's loops have iterated 65535 times in all (gallivm's
     * LP_MAX_TGSI_LOOP_ITERATIONS); the backends bound emulated calls by it. */
    int loop_limited;
} flashcl_device_caps;

/* Reads device's caps (limits, name, vendor, compute capability, AMD wavefront width, static local memory). On
 * NVIDIA the static local memory takes test builds the first time a process asks (static_local.h): in context,
 * or, when it is NULL, in a context of their own. */
flashcl_status flashcl_device_caps_query(cl_device_id device, cl_context context, flashcl_device_caps *caps);

/* The limits device reports (static_local_mem_bytes = local_mem_bytes), without any build (context.c). */
flashcl_status flashcl_device_limits_reported(cl_device_id device, flashcl_device_limits *limits);

#endif
