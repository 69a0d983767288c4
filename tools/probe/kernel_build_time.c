/* kernel_build_time.c: how long one OpenCL implementation takes to build one kernel of cl/, cold: the time of
 * clBuildProgram and of the kernel's first launch (where rusticl's llvmpipe and POCL compile the work-group
 * function), for the record of docs/perf.md ("Test time"). Most of the test command's time is such builds; this
 * times one variant alone, without the test harness. A development probe, not part of the build:
 *   gcc -O2 -std=c11 tools/probe/kernel_build_time.c -o build/tools/kernel_build_time -lOpenCL
 *   kernel_build_time PLATFORM KERNEL "OPTIONS" FILE...
 * PLATFORM: a substring of the platform name (rusticl, Portable); FILE...: the sources in the order the library
 * joins them (cl/common.cl first, then the prelude files, then the kernel's file; src/kernel_source.c); OPTIONS:
 * the -D options the dispatcher passes (the test suites' SHIM or build logs show them). Turn the drivers' caches
 * off or point them at an empty directory, or the second run measures a cache hit:
 *   RUSTICL_ENABLE=llvmpipe MESA_SHADER_CACHE_DISABLE=1 kernel_build_time rusticl flashcl_decode \
 *       "-DFLASHCL_DTYPE=0 -DHEAD_DIM=64 -DDECODE_ROWS=4 -DDECODE_THREADS=128 -DKV_VEC=8 -DDV_VEC=8" \
 *       cl/common.cl cl/decode_common.cl cl/decode.cl
 *   POCL_KERNEL_CACHE=0 kernel_build_time Portable ...
 * The launch is one work-group with every buffer argument a zeroed 4 MiB buffer and every scalar 1: the kernel
 * runs, briefly, on meaningless input; only the times mean anything. The machine's noise is 10-20% from run to
 * run on the 2-core VM: take the minimum of several. */
#define CL_TARGET_OPENCL_VERSION 120
#define _POSIX_C_SOURCE 199309L
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ARGUMENT_BUFFER_BYTES (4u << 20)

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The whole file, NUL-terminated, or NULL. */
static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *text = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        const long n = ftell(f);
        if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (text = malloc((size_t)n + 1)) != NULL) {
            if (fread(text, 1, (size_t)n, f) != (size_t)n) {
                free(text);
                text = NULL;
            } else {
                text[n] = '\0';
            }
        }
    }
    fclose(f);
    return text;
}

static int fail(const char *what, cl_int status) {
    fprintf(stderr, "kernel_build_time: %s failed (%d)\n", what, (int)status);
    return 1;
}

/* Sets every argument: buffers (global or constant) to buffer, local ones to 1 KiB, scalars to 1 of their
 * size. Needs the program built with -cl-kernel-arg-info. */
static cl_int set_arguments(cl_kernel kernel, cl_mem buffer) {
    cl_uint count = 0;
    cl_int status = clGetKernelInfo(kernel, CL_KERNEL_NUM_ARGS, sizeof count, &count, NULL);
    for (cl_uint a = 0; status == CL_SUCCESS && a < count; ++a) {
        cl_kernel_arg_address_qualifier space = CL_KERNEL_ARG_ADDRESS_PRIVATE;
        status = clGetKernelArgInfo(kernel, a, CL_KERNEL_ARG_ADDRESS_QUALIFIER, sizeof space, &space, NULL);
        if (status != CL_SUCCESS) break;
        if (space == CL_KERNEL_ARG_ADDRESS_GLOBAL || space == CL_KERNEL_ARG_ADDRESS_CONSTANT) {
            status = clSetKernelArg(kernel, a, sizeof buffer, &buffer);
        } else if (space == CL_KERNEL_ARG_ADDRESS_LOCAL) {
            status = clSetKernelArg(kernel, a, 1024, NULL);
        } else {
            /* A scalar: the first size the implementation accepts (ulong, int, then a 16-byte vector). */
            const unsigned long long one8 = 1;
            const int one4 = 1;
            const float zero16[4] = {0};
            status = clSetKernelArg(kernel, a, 8, &one8);
            if (status != CL_SUCCESS) status = clSetKernelArg(kernel, a, 4, &one4);
            if (status != CL_SUCCESS) status = clSetKernelArg(kernel, a, 16, zero16);
        }
    }
    return status;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: kernel_build_time PLATFORM KERNEL \"OPTIONS\" FILE...\n");
        return 2;
    }
    cl_platform_id platforms[16], platform = NULL;
    cl_uint platform_count = 0;
    cl_int status = clGetPlatformIDs(16, platforms, &platform_count);
    if (status != CL_SUCCESS) return fail("clGetPlatformIDs", status);
    for (cl_uint i = 0; i < platform_count && i < 16 && !platform; ++i) {
        char name[256] = "";
        clGetPlatformInfo(platforms[i], CL_PLATFORM_NAME, sizeof name - 1, name, NULL);
        if (strstr(name, argv[1])) platform = platforms[i];
    }
    if (!platform) {
        fprintf(stderr, "kernel_build_time: no platform whose name contains '%s'\n", argv[1]);
        return 1;
    }
    cl_device_id device;
    status = clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &device, NULL);
    if (status != CL_SUCCESS) return fail("clGetDeviceIDs", status);
    cl_context context = clCreateContext(NULL, 1, &device, NULL, NULL, &status);
    if (status != CL_SUCCESS) return fail("clCreateContext", status);
    cl_command_queue queue = clCreateCommandQueue(context, device, 0, &status);
    if (status != CL_SUCCESS) return fail("clCreateCommandQueue", status);

    /* The sources joined with a newline after each, as the library joins them. */
    size_t total = 1;
    const int file_count = argc - 4;
    char **texts = calloc((size_t)file_count, sizeof *texts);
    for (int i = 0; texts && i < file_count; ++i) {
        if (!(texts[i] = read_file(argv[4 + i]))) {
            fprintf(stderr, "kernel_build_time: cannot read %s\n", argv[4 + i]);
            return 1;
        }
        total += strlen(texts[i]) + 1;
    }
    char *source = texts ? calloc(total, 1) : NULL;
    if (!source) return fail("allocation", 0);
    for (int i = 0; i < file_count; ++i) {
        strcat(source, texts[i]);
        strcat(source, "\n");
    }
    const size_t options_size = strlen(argv[3]) + sizeof " -cl-kernel-arg-info";
    char *options = malloc(options_size);
    if (!options) return fail("allocation", 0);
    snprintf(options, options_size, "%s -cl-kernel-arg-info", argv[3]);

    const char *sources[1] = {source};
    const double build_start = now_s();
    cl_program program = clCreateProgramWithSource(context, 1, sources, NULL, &status);
    if (status != CL_SUCCESS) return fail("clCreateProgramWithSource", status);
    status = clBuildProgram(program, 1, &device, options, NULL, NULL);
    const double build_end = now_s();
    if (status != CL_SUCCESS) {
        static char log[1 << 16];
        clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, NULL);
        fprintf(stderr, "%s\n", log);
        return fail("clBuildProgram", status);
    }
    cl_kernel kernel = clCreateKernel(program, argv[2], &status);
    if (status != CL_SUCCESS) return fail("clCreateKernel", status);
    cl_mem buffer = clCreateBuffer(context, CL_MEM_READ_WRITE, ARGUMENT_BUFFER_BYTES, NULL, &status);
    if (status != CL_SUCCESS) return fail("clCreateBuffer", status);
    const cl_uint zero = 0;
    status = clEnqueueFillBuffer(queue, buffer, &zero, sizeof zero, 0, ARGUMENT_BUFFER_BYTES, 0, NULL, NULL);
    if (status == CL_SUCCESS) status = clFinish(queue);
    if (status != CL_SUCCESS) return fail("clEnqueueFillBuffer", status);
    status = set_arguments(kernel, buffer);
    if (status != CL_SUCCESS) return fail("setting the arguments", status);

    /* One work-group of the size the kernel requires (reqd_work_group_size), else 64. */
    size_t required[3] = {0, 0, 0};
    clGetKernelWorkGroupInfo(kernel, device, CL_KERNEL_COMPILE_WORK_GROUP_SIZE, sizeof required, required, NULL);
    const size_t size[3] = {required[0] ? required[0] : 64, required[1] ? required[1] : 1,
                            required[2] ? required[2] : 1};
    const double launch_start = now_s();
    status = clEnqueueNDRangeKernel(queue, kernel, 3, NULL, size, size, 0, NULL, NULL);
    if (status == CL_SUCCESS) status = clFinish(queue);
    const double launch_end = now_s();
    if (status != CL_SUCCESS) return fail("the launch", status);
    printf("build %.2f s, first launch %.2f s\n", build_end - build_start, launch_end - launch_start);

    clReleaseMemObject(buffer);
    clReleaseKernel(kernel);
    clReleaseProgram(program);
    clReleaseCommandQueue(queue);
    clReleaseContext(context);
    for (int i = 0; i < file_count; ++i) free(texts[i]);
    free(texts);
    free(source);
    free(options);
    return 0;
}
