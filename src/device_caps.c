/* device_caps.c: reads a device's capabilities once, when a context is made. */
#include <stdlib.h>
#include <string.h>

#include "device_caps.h"
#include "internal.h"
#include "static_local.h"

/* cl_nv_device_attribute_query's compute capability (not in every CL header). */
#define FLASHCL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV 0x4000
#define FLASHCL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV 0x4001
/* cl_amd_device_attribute_query's wavefront width (a cl_uint). */
#define FLASHCL_DEVICE_WAVEFRONT_WIDTH_AMD 0x4043
/* PCI vendor ids, as CL_DEVICE_VENDOR_ID reports them on GPUs. */
#define PCI_VENDOR_NVIDIA 0x10de
#define PCI_VENDOR_AMD 0x1002
#define PCI_VENDOR_INTEL 0x8086

static int has_extension(cl_device_id device, const char *name) {
    size_t size = 0;
    if (clGetDeviceInfo(device, CL_DEVICE_EXTENSIONS, 0, NULL, &size) != CL_SUCCESS || size == 0) return 0;
    char *extensions = calloc(size + 1, 1);
    if (!extensions) return 0; /* then the portable kernels run: still correct */
    const int listed = clGetDeviceInfo(device, CL_DEVICE_EXTENSIONS, size, extensions, NULL) == CL_SUCCESS &&
                       strstr(extensions, name) != NULL;
    free(extensions);
    return listed;
}

static flashcl_vendor vendor_of(cl_device_id device) {
    cl_uint id = 0;
    if (clGetDeviceInfo(device, CL_DEVICE_VENDOR_ID, sizeof id, &id, NULL) != CL_SUCCESS) return FLASHCL_VENDOR_OTHER;
    switch (id) {
    case PCI_VENDOR_NVIDIA: return FLASHCL_VENDOR_NVIDIA;
    case PCI_VENDOR_AMD: return FLASHCL_VENDOR_AMD;
    case PCI_VENDOR_INTEL: return FLASHCL_VENDOR_INTEL;
    default: return FLASHCL_VENDOR_OTHER;
    }
}

/* major * 10 + minor from cl_nv_device_attribute_query, 0 without it. */
static int nvidia_compute_capability(cl_device_id device) {
    if (!has_extension(device, "cl_nv_device_attribute_query")) return 0;
    cl_uint major = 0, minor = 0;
    if (clGetDeviceInfo(device, FLASHCL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV, sizeof major, &major, NULL) !=
        CL_SUCCESS)
        return 0;
    if (clGetDeviceInfo(device, FLASHCL_DEVICE_COMPUTE_CAPABILITY_MINOR_NV, sizeof minor, &minor, NULL) !=
        CL_SUCCESS)
        minor = 0;
    return (int)(major * 10 + minor);
}

/* The wavefront width AMD's driver reports (ROCm: the HSA agent's, 32 on
 * RDNA, 64 on GCN and CDNA), 0 without cl_amd_device_attribute_query. */
static int amd_wavefront_width(cl_device_id device) {
    if (!has_extension(device, "cl_amd_device_attribute_query")) return 0;
    cl_uint width = 0;
    if (clGetDeviceInfo(device, FLASHCL_DEVICE_WAVEFRONT_WIDTH_AMD, sizeof width, &width, NULL) != CL_SUCCESS) return 0;
    return (int)width;
}

flashcl_status flashcl_device_caps_query(cl_device_id device, cl_context context, flashcl_device_caps *caps) {
    memset(caps, 0, sizeof *caps);
    flashcl_status status = flashcl_device_limits_reported(device, &caps->limits);
    if (status != FLASHCL_SUCCESS) return status; /* its message names the failed query */
    clGetDeviceInfo(device, CL_DEVICE_NAME, sizeof caps->name - 1, caps->name, NULL);
    caps->vendor = vendor_of(device);
    caps->compute_capability = nvidia_compute_capability(device);
    /* A compute capability is the proof of an NVIDIA device and its warps;
     * AMD's driver reports its wavefront (the register budget of RDNA's
     * wave32 depends on it: register_budget.c); elsewhere the width stays
     * unknown (no kernel needs it). */
    if (caps->compute_capability > 0) {
        caps->vendor = FLASHCL_VENDOR_NVIDIA;
        caps->subgroup_width = 32;
    } else if (caps->vendor == FLASHCL_VENDOR_AMD) {
        caps->subgroup_width = amd_wavefront_width(device);
    }
    caps->loop_limited = strstr(caps->name, "llvmpipe") != NULL;
    caps->limits.static_local_mem_bytes = flashcl_static_local_bytes(device, context, caps);
    return FLASHCL_SUCCESS;
}
