/* ptx_buildlog.c: builds cl/common.cl plus one kernel file with the given options on the first device of the first
 * platform and prints the build log; with NVIDIA's -cl-nv-verbose that log holds ptxas's registers, spills and
 * shared memory per kernel, and a fifth argument saves the program binary (PTX on NVIDIA). A development probe,
 * not part of the build: on the GPU machine (after ../shared/gpu/prep.sh; compile it here, run it there)
 *   gcc -O1 -o .gpu/ptx_buildlog tools/probe/ptx_buildlog.c -lOpenCL
 *   source .gpu/env.sh && .gpu/ptx_buildlog cl/common.cl cl/forward_mma.cl \
 *     "-cl-nv-verbose -DFLASHCL_DTYPE=1 -DHEAD_DIM=128 -DBLOCK_Q=64 -DBLOCK_K=64 -DFLASHCL_MMA_PTX=1" out.ptx */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static char *slurp(const char *p, size_t *n) {
    FILE *f = fopen(p, "rb"); if (!f) { perror(p); exit(1); }
    fseek(f, 0, SEEK_END); *n = (size_t)ftell(f); fseek(f, 0, SEEK_SET);
    char *b = malloc(*n + 1); fread(b, 1, *n, f); b[*n] = 0; fclose(f); return b;
}
int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: buildlog common.cl file.cl options\n"); return 2; }
    cl_platform_id pl; cl_device_id dev; cl_int err;
    clGetPlatformIDs(1, &pl, NULL);
    clGetDeviceIDs(pl, CL_DEVICE_TYPE_ALL, 1, &dev, NULL);
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    size_t n1, n2; char *s1 = slurp(argv[1], &n1), *s2 = slurp(argv[2], &n2);
    const char *srcs[2] = {s1, s2}; size_t lens[2] = {n1, n2};
    cl_program p = clCreateProgramWithSource(ctx, 2, srcs, lens, &err);
    err = clBuildProgram(p, 1, &dev, argv[3], NULL, NULL);
    size_t ln; clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &ln);
    char *log = malloc(ln + 1); clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, ln, log, NULL); log[ln] = 0;
    printf("build %d\n%s\n", err, log);
    if (argc > 4 && err == CL_SUCCESS) {
        size_t bs; clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof bs, &bs, NULL);
        unsigned char *bin = malloc(bs); unsigned char *bins[1] = {bin};
        clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL);
        FILE *f = fopen(argv[4], "wb"); fwrite(bin, 1, bs, f); fclose(f);
    }
    return 0;
}
