/* sm90a_buildlog.c: ptxas's log of a program's sm_90a build, which the library does not keep for a build that
 * succeeds: the given OpenCL C files joined in order (as the library joins cl/common.cl, the prelude and a kernel
 * file) are built for sm_90 with the given options on the first device of the first platform, their PTX is read
 * back and rewritten by src/ptx_rewrite.c (as src/program_sm90a.c does), and the rewrite is built again with the
 * same options; each build's log is printed. With -cl-nv-verbose the second log holds ptxas's registers, spills and
 * advisories per kernel (for wgmma kernels: whether it serialised the wgmma pipeline, and why). With PTX_OUT=path
 * the rewritten PTX is saved there. A development probe, not part of the build; on the GPU machine (docs/nvidia.md)
 *   gcc -O1 -std=c11 -Isrc -o build/sm90a_buildlog tools/probe/sm90a_buildlog.c src/ptx_rewrite.c -lOpenCL
 *   build/sm90a_buildlog \
 *     "-cl-nv-verbose -DFLASHCL_DTYPE=1 -DHEAD_DIM=128 -DBLOCK_N=64 -DWARPGROUPS=2 -DFLASHCL_MMA_PTX=1" \
 *     cl/common.cl cl/mma.cl cl/mma_nvidia.cl cl/mma_operands.cl cl/wgmma.cl cl/forward_wgmma.cl
 * Written for issue 22's next step and, when this comment was written, run only on POCL (where the sm_90 build
 * fails at the inline PTX, as it must). */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ptx_rewrite.h"

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc(*n + 1);
    if (!text || fread(text, 1, *n, f) != *n) {
        perror(path);
        exit(1);
    }
    text[*n] = 0;
    fclose(f);
    return text;
}

/* Prints the program's build log under a title; returns the build's status. */
static cl_int build(cl_program program, cl_device_id device, const char *options, const char *title) {
    const cl_int err = clBuildProgram(program, 1, &device, options, NULL, NULL);
    size_t length = 0;
    clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, NULL, &length);
    char *log = malloc(length + 1);
    if (!log) exit(1);
    clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, length, log, NULL);
    log[length] = 0;
    printf("== %s: %d\n%s\n", title, err, log);
    free(log);
    return err;
}

int main(int argc, char **argv) {
    if (argc < 3 || argc > 18) {
        fprintf(stderr, "usage: sm90a_buildlog OPTIONS FILE.cl...\n");
        return 2;
    }
    cl_platform_id platform;
    cl_device_id device;
    cl_int err;
    if (clGetPlatformIDs(1, &platform, NULL) != CL_SUCCESS ||
        clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &device, NULL) != CL_SUCCESS) {
        fprintf(stderr, "no OpenCL device\n");
        return 1;
    }
    cl_context context = clCreateContext(NULL, 1, &device, NULL, NULL, &err);
    if (err != CL_SUCCESS) return 1;
    const char *sources[16];
    size_t lengths[16];
    const cl_uint count = (cl_uint)(argc - 2);
    for (cl_uint i = 0; i < count; ++i) sources[i] = slurp(argv[i + 2], &lengths[i]);
    cl_program sm90 = clCreateProgramWithSource(context, count, sources, lengths, &err);
    if (err != CL_SUCCESS || build(sm90, device, argv[1], "sm_90 build") != CL_SUCCESS) return 1;
    size_t size = 0;
    clGetProgramInfo(sm90, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL);
    unsigned char *binary = malloc(size + 1);
    if (!binary) return 1;
    unsigned char *binaries[1] = {binary};
    clGetProgramInfo(sm90, CL_PROGRAM_BINARIES, sizeof binaries, binaries, NULL);
    binary[size] = 0;
    flashcl_ptx_rewrite rewrite;
    memset(&rewrite, 0, sizeof rewrite);
    const flashcl_ptx_result result = flashcl_ptx_rewrite_sm90a(
        (const char *)binary, strnlen((const char *)binary, size), FLASHCL_PTX_MARKERS_REQUIRED, &rewrite);
    if (result != FLASHCL_PTX_OK) {
        printf("== rewrite refused: %s: %s\n", flashcl_ptx_result_name(result), rewrite.reason);
        return 1;
    }
    printf("== rewrite: %d markers\n", rewrite.markers);
    const char *out = getenv("PTX_OUT");
    if (out) {
        FILE *f = fopen(out, "wb");
        if (f) {
            fwrite(rewrite.text, 1, rewrite.length, f);
            fclose(f);
        }
    }
    const size_t length = rewrite.length + 1;
    const unsigned char *text = (const unsigned char *)rewrite.text;
    cl_int binary_status = CL_SUCCESS;
    cl_program sm90a = clCreateProgramWithBinary(context, 1, &device, &length, &text, &binary_status, &err);
    if (err != CL_SUCCESS) {
        printf("== clCreateProgramWithBinary: %d\n", err);
        return 1;
    }
    return build(sm90a, device, argv[1], "sm_90a build of the rewritten PTX") == CL_SUCCESS ? 0 : 1;
}
