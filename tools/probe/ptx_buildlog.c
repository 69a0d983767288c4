/* ptx_buildlog.c: builds the given OpenCL C files, joined in order (as the library joins cl/common.cl, cl/mma.cl
 * and a kernel file), with the given options on the first device of the first platform and prints the build log;
 * with NVIDIA's -cl-nv-verbose that log holds ptxas's registers, spills and shared memory per kernel. With
 * PTX_OUT=path in the environment the program binary (PTX on NVIDIA) is saved there. A development probe, not part
 * of the build: on the GPU machine (docs/nvidia.md; eval "$(bash tools/nvidia_icd.sh)" where no ICD file exists)
 *   gcc -O1 -o build/ptx_buildlog tools/probe/ptx_buildlog.c -lOpenCL
 *   build/ptx_buildlog \
 *     "-cl-nv-verbose -DFLASHCL_DTYPE=1 -DHEAD_DIM=128 -DBLOCK_Q=64 -DBLOCK_K=64 -DFLASHCL_MMA_PTX=1" \
 *     cl/common.cl cl/mma.cl cl/forward_mma.cl */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static char *slurp(const char *p, size_t *n) {
    FILE *f = fopen(p, "rb"); if (!f) { perror(p); exit(1); }
    fseek(f, 0, SEEK_END); *n = (size_t)ftell(f); fseek(f, 0, SEEK_SET);
    char *b = malloc(*n + 1); if (fread(b, 1, *n, f) != *n) { perror(p); exit(1); } b[*n] = 0; fclose(f); return b;
}
int main(int argc, char **argv) {
    if (argc < 3 || argc > 18) { fprintf(stderr, "usage: ptx_buildlog OPTIONS FILE.cl...\n"); return 2; }
    cl_platform_id pl; cl_device_id dev; cl_int err;
    clGetPlatformIDs(1, &pl, NULL);
    clGetDeviceIDs(pl, CL_DEVICE_TYPE_ALL, 1, &dev, NULL);
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    const char *srcs[16]; size_t lens[16]; const cl_uint count = (cl_uint)(argc - 2);
    for (cl_uint i = 0; i < count; ++i) srcs[i] = slurp(argv[i + 2], &lens[i]);
    cl_program p = clCreateProgramWithSource(ctx, count, srcs, lens, &err);
    err = clBuildProgram(p, 1, &dev, argv[1], NULL, NULL);
    size_t ln; clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &ln);
    char *log = malloc(ln + 1); clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_LOG, ln, log, NULL); log[ln] = 0;
    printf("build %d\n%s\n", err, log);
    const char *out = getenv("PTX_OUT");
    if (out && err == CL_SUCCESS) {
        size_t bs; clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof bs, &bs, NULL);
        unsigned char *bin = malloc(bs); unsigned char *bins[1] = {bin};
        clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof bins, bins, NULL);
        FILE *f = fopen(out, "wb"); fwrite(bin, 1, bs, f); fclose(f);
    }
    return 0;
}
