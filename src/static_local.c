/* static_local.c: static __local memory per work-group: NVIDIA's OpenCL driver reports 48 KiB (the CUDA default
 * without opt-in) yet builds and runs kernels whose static arrays go far beyond it; the largest size is found by
 * test builds, once per device and process. */
#include "static_local.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

/* Every element written and one read at an index known only at run time, so the compiler keeps the whole array. */
static const char probe_source[] =
    "__kernel void flashcl_static_local_probe(__global float *out, int index) {\n"
    "    __local float s[FLASHCL_PROBE_FLOATS];\n"
    "    for (int i = get_local_id(0); i < FLASHCL_PROBE_FLOATS; i += get_local_size(0)) s[i] = (float)i;\n"
    "    barrier(CLK_LOCAL_MEM_FENCE);\n"
    "    out[get_global_id(0)] = s[index];\n"
    "}\n";

/* The process-wide answers, one slot per device: a slot is claimed by a compare-and-swap of its device, then
 * given its bytes; a reader that finds the device without bytes yet probes on its own (the same answer, a second
 * time) rather than wait. 16 devices is more than a process sees; past them answers are not kept. */
#define MAX_DEVICES 16
static struct {
    _Atomic uintptr_t device;
    _Atomic size_t bytes;
} known[MAX_DEVICES];

static size_t known_bytes(cl_device_id device) {
    for (int i = 0; i < MAX_DEVICES; ++i) {
        const uintptr_t d = atomic_load(&known[i].device);
        if (d == 0) return 0;
        if (d == (uintptr_t)device) return atomic_load(&known[i].bytes);
    }
    return 0;
}

static void remember(cl_device_id device, size_t bytes) {
    for (int i = 0; i < MAX_DEVICES; ++i) {
        uintptr_t expected = 0;
        if (atomic_compare_exchange_strong(&known[i].device, &expected, (uintptr_t)device) ||
            expected == (uintptr_t)device) {
            atomic_store(&known[i].bytes, bytes);
            return;
        }
    }
}

size_t flashcl_static_local_expected(int compute_capability) { return compute_capability == 90 ? 226 * 1024 : 0; }

size_t flashcl_static_local_search(size_t reported, size_t expected, const size_t *candidates, int count,
                                   int (*builds)(size_t bytes, void *arg), void *arg, int *probes) {
    if (expected > reported) {
        ++*probes;
        if (builds(expected, arg)) return expected;
        while (count > 0 && candidates[count - 1] >= expected) --count; /* known not to build */
    }
    int low = -1, high = count; /* low: the largest index known to build (-1: reported); high: known not to */
    while (low + 1 < count && candidates[low + 1] <= reported) ++low;
    const int first = low;
    while (low + 1 < high) {
        const int mid = low + (high - low) / 2;
        ++*probes;
        if (builds(candidates[mid], arg))
            low = mid;
        else
            high = mid;
    }
    return low > first ? candidates[low] : reported;
}

typedef struct probe_target {
    cl_context context;
    cl_device_id device;
} probe_target;

/* 1 if the probe kernel with a bytes-sized static array builds for the device. */
static int probe_builds(size_t bytes, void *arg) {
    const probe_target *t = arg;
    char options[64];
    snprintf(options, sizeof options, "-DFLASHCL_PROBE_FLOATS=%zu", bytes / sizeof(float));
    const char *sources[] = {probe_source};
    cl_int err;
    cl_program program = clCreateProgramWithSource(t->context, 1, sources, NULL, &err);
    if (err != CL_SUCCESS) return 0;
    err = clBuildProgram(program, 1, &t->device, options, NULL, NULL);
    clReleaseProgram(program);
    return err == CL_SUCCESS;
}

size_t flashcl_static_local_bytes(cl_device_id device, cl_context context, const flashcl_device_caps *caps) {
    const size_t reported = caps->limits.local_mem_bytes;
    if (caps->vendor != FLASHCL_VENDOR_NVIDIA || caps->compute_capability <= 0) return reported;
    const size_t remembered = known_bytes(device);
    if (remembered) return remembered;
    cl_context own = NULL;
    if (!context) {
        cl_int err;
        own = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
        if (err != CL_SUCCESS) return reported; /* not remembered: a later context may probe */
        context = own;
    }
    static const size_t candidates[] = {FLASHCL_STATIC_LOCAL_CANDIDATES};
    probe_target target = {context, device};
    int probes = 0;
    const size_t bytes =
        flashcl_static_local_search(reported, flashcl_static_local_expected(caps->compute_capability), candidates,
                                    (int)(sizeof candidates / sizeof *candidates), probe_builds, &target, &probes);
    if (own) clReleaseContext(own);
    remember(device, bytes);
    return bytes;
}
