/* cl_kernel_times.c: per-kernel GPU times of any OpenCL program, without changing it. An LD_PRELOAD shim: every
 * command queue is created with profiling on, every clEnqueueNDRangeKernel gets an event, and when the program
 * calls clFinish or exits, each finished launch is written as one line "kernel global0 global1
 * ns" to $CL_KERNEL_TIMES (default stderr). The library's backward enqueues three kernels and returns one event, so
 * `flashcl bench` times their sum; this splits it (docs/perf.md, "Backward with a bias at d64"). A development
 * probe, not part of the build: on a machine with the OpenCL headers
 *   gcc -O2 -shared -fPIC -o build/cl_kernel_times.so tools/probe/cl_kernel_times.c -ldl
 *   CL_KERNEL_TIMES=times.txt LD_PRELOAD=$PWD/build/cl_kernel_times.so build/tools/flashcl bench ...
 * then the median per kernel and grid: python3 tools/probe/cl_kernel_times.py times.txt. */
#define _GNU_SOURCE
#define CL_TARGET_OPENCL_VERSION 300
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <CL/cl.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    cl_event event;
    char name[64];
    size_t global[2];
} launch;

static launch *pending;
static size_t pending_count, pending_cap;
static FILE *out;

static FILE *output(void) {
    if (!out) {
        const char *path = getenv("CL_KERNEL_TIMES");
        out = path && *path ? fopen(path, "a") : NULL;
        if (!out) out = stderr;
    }
    return out;
}

/* Writes and releases every launch recorded so far (call only when they have all finished). */
static void drain(void) {
    for (size_t i = 0; i < pending_count; ++i) {
        cl_ulong start = 0, end = 0;
        if (clGetEventProfilingInfo(pending[i].event, CL_PROFILING_COMMAND_START, sizeof start, &start, NULL) ==
                CL_SUCCESS &&
            clGetEventProfilingInfo(pending[i].event, CL_PROFILING_COMMAND_END, sizeof end, &end, NULL) == CL_SUCCESS)
            fprintf(output(), "%s %zu %zu %llu\n", pending[i].name, pending[i].global[0], pending[i].global[1],
                    (unsigned long long)(end - start));
        clReleaseEvent(pending[i].event);
    }
    pending_count = 0;
    if (out) fflush(out);
}

static void at_exit(void) { drain(); }

cl_command_queue clCreateCommandQueue(cl_context context, cl_device_id device, cl_command_queue_properties props,
                                      cl_int *err) {
    static cl_command_queue (*real)(cl_context, cl_device_id, cl_command_queue_properties, cl_int *);
    if (!real) {
        *(void **)&real = dlsym(RTLD_NEXT, "clCreateCommandQueue");
        atexit(at_exit);
    }
    return real(context, device, props | CL_QUEUE_PROFILING_ENABLE, err);
}

cl_int clEnqueueNDRangeKernel(cl_command_queue queue, cl_kernel kernel, cl_uint dims, const size_t *offset,
                              const size_t *global, const size_t *local, cl_uint num_events, const cl_event *wait,
                              cl_event *event) {
    static cl_int (*real)(cl_command_queue, cl_kernel, cl_uint, const size_t *, const size_t *, const size_t *,
                          cl_uint, const cl_event *, cl_event *);
    if (!real) *(void **)&real = dlsym(RTLD_NEXT, "clEnqueueNDRangeKernel");
    cl_event mine = NULL;
    const cl_int err = real(queue, kernel, dims, offset, global, local, num_events, wait, &mine);
    if (err != CL_SUCCESS) return err;
    if (event) {
        *event = mine;
        clRetainEvent(mine);
    }
    if (pending_count == pending_cap) {
        /* Out of memory: this launch goes untimed (the list so far is kept), the application's call is unaffected. */
        const size_t cap = pending_cap ? 2 * pending_cap : 256;
        launch *grown = realloc(pending, cap * sizeof *grown);
        if (!grown) return err;
        pending = grown;
        pending_cap = cap;
    }
    launch *l = &pending[pending_count++];
    l->event = mine;
    l->name[0] = 0;
    clGetKernelInfo(kernel, CL_KERNEL_FUNCTION_NAME, sizeof l->name, l->name, NULL);
    l->name[sizeof l->name - 1] = 0;
    l->global[0] = global[0];
    l->global[1] = dims > 1 ? global[1] : 1;
    return err;
}

cl_int clFinish(cl_command_queue queue) {
    static cl_int (*real)(cl_command_queue);
    if (!real) *(void **)&real = dlsym(RTLD_NEXT, "clFinish");
    const cl_int err = real(queue);
    if (err == CL_SUCCESS) drain();
    return err;
}
