/* static_local_scan.c: how much static __local memory a work-group can have on the first GPU, to 16 bytes, and what
 * finding it costs: the library's answer (flashcl_context_limits) and the time of the flashcl contexts that found
 * and reused it, then a scan by plain OpenCL (each size built, timed, and where it builds run and checked, with
 * CL_KERNEL_LOCAL_MEM_SIZE). A development probe, not part of the build: on the GPU machine (docs/nvidia.md)
 *   gcc -O1 -std=c11 -Iinclude -Ibuild/include -o build/static_local_scan tools/probe/static_local_scan.c \
 *       -Lbuild/src -lflashcl -lOpenCL
 *   CUDA_CACHE_DISABLE=1 build/static_local_scan      (cold: NVIDIA's cache off)
 * Results of the H100: docs/results/h100/ptx/. */
#define _POSIX_C_SOURCE 200809L
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "flashcl.h"

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static const char source[] =
    "__kernel void k(__global float *out, int index) {\n"
    "    __local float s[FLOATS];\n"
    "    for (int i = get_local_id(0); i < FLOATS; i += get_local_size(0)) s[i] = (float)i;\n"
    "    barrier(CLK_LOCAL_MEM_FENCE);\n"
    "    out[get_global_id(0)] = s[index - get_local_id(0)];\n"
    "}\n";

static cl_context cl_ctx;
static cl_device_id device;
static cl_command_queue queue;

/* Builds the kernel with a bytes-sized array; if it builds, runs 4 work-groups of 256 and checks them. Prints one
 * line; returns 1 if it built. */
static int try_size(size_t bytes) {
    char options[64];
    const size_t floats = bytes / 4;
    snprintf(options, sizeof options, "-DFLOATS=%zu", floats);
    const char *sources[] = {source};
    cl_int err;
    cl_program program = clCreateProgramWithSource(cl_ctx, 1, sources, NULL, &err);
    const double t0 = now_ms();
    err = clBuildProgram(program, 1, &device, options, NULL, NULL);
    const double built_ms = now_ms() - t0;
    if (err != CL_SUCCESS) {
        printf("%7zu B (%6.2f KiB): build FAILED %d in %.1f ms\n", bytes, bytes / 1024.0, (int)err, built_ms);
        clReleaseProgram(program);
        return 0;
    }
    cl_kernel kernel = clCreateKernel(program, "k", &err);
    cl_ulong kernel_local = 0;
    clGetKernelWorkGroupInfo(kernel, device, CL_KERNEL_LOCAL_MEM_SIZE, sizeof kernel_local, &kernel_local, NULL);
    cl_mem out = clCreateBuffer(cl_ctx, CL_MEM_READ_WRITE, 1024 * sizeof(float), NULL, &err);
    const int index = (int)floats - 1;
    clSetKernelArg(kernel, 0, sizeof out, &out);
    clSetKernelArg(kernel, 1, sizeof index, &index);
    size_t global = 1024, local = 256;
    cl_int run = clEnqueueNDRangeKernel(queue, kernel, 1, NULL, &global, &local, 0, NULL, NULL);
    if (run == CL_SUCCESS) run = clFinish(queue);
    float host[1024];
    int right = 0;
    if (run == CL_SUCCESS && clEnqueueReadBuffer(queue, out, CL_TRUE, 0, sizeof host, host, 0, NULL, NULL) == CL_SUCCESS)
        for (int i = 0; i < 1024; ++i) right += host[i] == (float)(index - i % 256);
    printf("%7zu B (%6.2f KiB): built in %.1f ms, CL_KERNEL_LOCAL_MEM_SIZE %lu, run %d, %d of 1024 right\n", bytes,
           bytes / 1024.0, built_ms, (unsigned long)kernel_local, (int)run, right);
    clReleaseMemObject(out);
    clReleaseKernel(kernel);
    clReleaseProgram(program);
    return 1;
}

/* A flashcl context on the existing queue, timed; prints its static local memory. */
static void time_context(const char *what) {
    const double t0 = now_ms();
    flashcl_context *ctx = NULL;
    if (flashcl_context_create_from_queue(&ctx, queue, NULL) != FLASHCL_SUCCESS) {
        printf("%s: %s\n", what, flashcl_last_error(NULL));
        return;
    }
    const double ms = now_ms() - t0;
    flashcl_device_limits limits;
    flashcl_context_limits(ctx, &limits);
    printf("flashcl, %s: %.1f ms; static local memory %zu bytes (%.2f KiB), reported %zu\n", what, ms,
           limits.static_local_mem_bytes, limits.static_local_mem_bytes / 1024.0, limits.local_mem_bytes);
    flashcl_context_free(ctx);
}

int main(void) {
    /* The OpenCL context first (the driver's start-up is paid here), then two flashcl contexts on its queue: the
     * first finds the static local memory by test builds, the second has the process's answer. Their difference
     * is the probe's cost. */
    cl_platform_id platforms[8];
    cl_uint count = 0;
    clGetPlatformIDs(8, platforms, &count);
    device = NULL;
    for (cl_uint p = 0; p < count && !device; ++p)
        if (clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_GPU, 1, &device, NULL) != CL_SUCCESS) device = NULL;
    if (!device) {
        fprintf(stderr, "no GPU\n");
        return 1;
    }
    double t0 = now_ms();
    cl_int err;
    cl_ctx = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
    queue = clCreateCommandQueue(cl_ctx, device, 0, &err);
    printf("OpenCL context and queue: %.1f ms\n", now_ms() - t0);
    time_context("first context (probes)");
    time_context("second context (answer known)");
    /* The candidates, then a bisection to 1 KiB between the largest that builds and the next. */
    static const size_t table[] = {48, 64, 96, 128, 160, 196, 227, 228};
    size_t good = 0, bad = 0;
    for (size_t i = 0; i < sizeof table / sizeof table[0]; ++i) {
        if (try_size(table[i] * 1024))
            good = table[i] * 1024;
        else if (!bad)
            bad = table[i] * 1024;
    }
    while (bad && bad - good > 1024) {
        const size_t mid = (good + (bad - good) / 2) / 1024 * 1024;
        if (try_size(mid))
            good = mid;
        else
            bad = mid;
    }
    /* And to 16 bytes above the last KiB that built. */
    while (bad && bad - good > 16) {
        const size_t mid = (good + (bad - good) / 2) / 16 * 16;
        if (try_size(mid))
            good = mid;
        else
            bad = mid;
    }
    printf("largest static array that builds: %zu bytes (%.2f KiB); smallest that fails: %zu\n", good, good / 1024.0,
           bad);
    clReleaseCommandQueue(queue);
    clReleaseContext(cl_ctx);
    return 0;
}
