/* enqueue_probe.c: where a decode call's fixed cost goes: the host's time inside flashcl_forward (validation,
 * dispatch, arguments, two enqueues), against the wall time of a call with clFinish after it and of calls
 * enqueued back to back, for the record of docs/perf.md ("Decode on the matrix units"). A development probe,
 * not part of the build:
 *   gcc -O2 -std=c11 -DCL_TARGET_OPENCL_VERSION=120 -Iinclude -Ibuild/include tools/probe/enqueue_probe.c \
 *       -o build/tools/enqueue_probe -Lbuild/src -lflashcl -lOpenCL -lm -Wl,-rpath,'$ORIGIN/../src'
 *   enqueue_probe [N ...]    (default 256 4096 32768; f16, d 128, Hq 32, Hkv 8, B 1, Sq 1, default kernels)
 * Each row: medians over 200 calls after 20 warm-ups, in microseconds. */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "flashcl.h"

#define CALLS 200
#define WARMUP 20

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return 1e6 * (double)t.tv_sec + 1e-3 * (double)t.tv_nsec;
}

static int compare(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *x, int n) {
    qsort(x, (size_t)n, sizeof *x, compare);
    return x[n / 2];
}

static cl_mem zeros(cl_context context, cl_command_queue queue, size_t bytes) {
    cl_int err;
    cl_mem m = clCreateBuffer(context, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (err != CL_SUCCESS) {
        fprintf(stderr, "clCreateBuffer(%zu): %d\n", bytes, err);
        exit(1);
    }
    const cl_uint pattern[4] = {0u, 0u, 0u, 0u};
    clEnqueueFillBuffer(queue, m, pattern, sizeof pattern, 0, bytes, 0, NULL, NULL);
    return m;
}

int main(int argc, char **argv) {
    flashcl_context *ctx;
    if (flashcl_context_create(&ctx, NULL) != FLASHCL_SUCCESS) {
        fprintf(stderr, "context: %s\n", flashcl_last_error(NULL));
        return 1;
    }
    cl_context context = flashcl_context_cl_context(ctx);
    cl_command_queue queue = flashcl_context_queue(ctx);
    const int batch = 1, hq = 32, hkv = 8, sq = 1, d = 128;
    printf("B %d, Hq %d, Hkv %d, Sq %d, d %d, f16; microseconds, medians of %d calls\n", batch, hq, hkv, sq, d, CALLS);
    /* The driver's own cost: one argument and one enqueue of an empty kernel; and flashcl's dispatch alone. */
    {
        const char *text = "__kernel void empty(__global int *x) { if (x[0] == 12345) x[1] = 0; }";
        cl_int err;
        cl_program program = clCreateProgramWithSource(context, 1, &text, NULL, &err);
        cl_device_id device = flashcl_context_device(ctx);
        clBuildProgram(program, 1, &device, "", NULL, NULL);
        cl_kernel kernel = clCreateKernel(program, "empty", &err);
        cl_mem x = zeros(context, queue, 64);
        static double args[CALLS], enqueue[CALLS], explain[CALLS], info[CALLS];
        const size_t global = 128, local = 128;
        for (int i = 0; i < WARMUP + CALLS && err == CL_SUCCESS; ++i) {
            clFinish(queue);
            const double t0 = now_us();
            for (int a = 0; a < 40; ++a) err |= clSetKernelArg(kernel, 0, sizeof x, &x);
            const double t1 = now_us();
            err |= clEnqueueNDRangeKernel(queue, kernel, 1, NULL, &global, &local, 0, NULL, NULL);
            const double t2 = now_us();
            if (i >= WARMUP) args[i - WARMUP] = (t1 - t0) / 40, enqueue[i - WARMUP] = t2 - t1;
        }
        flashcl_attention_desc desc;
        flashcl_attention_desc_init(&desc, batch, hq, sq, 32768, d);
        desc.heads_kv = hkv;
        desc.dtype = FLASHCL_DTYPE_F16;
        for (int i = 0; i < WARMUP + CALLS; ++i) {
            cl_context owner;
            size_t size;
            const double t0 = now_us();
            for (int a = 0; a < 10; ++a) {
                clGetMemObjectInfo(x, CL_MEM_CONTEXT, sizeof owner, &owner, NULL);
                clGetMemObjectInfo(x, CL_MEM_SIZE, sizeof size, &size, NULL);
            }
            if (i >= WARMUP) info[i - WARMUP] = (now_us() - t0) / 20;
        }
        flashcl_call_stats stats;
        for (int i = 0; i < WARMUP + CALLS; ++i) {
            const double t0 = now_us();
            flashcl_explain_call(ctx, FLASHCL_PASS_FORWARD, &desc, NULL, &stats);
            if (i >= WARMUP) explain[i - WARMUP] = now_us() - t0;
        }
        clFinish(queue);
        printf("driver: clSetKernelArg %.2f us each, clGetMemObjectInfo %.2f us each, clEnqueueNDRangeKernel (empty "
               "kernel) %.1f us%s; flashcl_explain_call (validation + dispatch, no enqueue) %.1f us\n",
               median(args, CALLS), median(info, CALLS), median(enqueue, CALLS),
               err == CL_SUCCESS ? "" : " (an OpenCL call failed)", median(explain, CALLS));
        clReleaseMemObject(x);
        clReleaseKernel(kernel);
        clReleaseProgram(program);
    }
    printf("%8s %-16s %6s %12s %12s %14s\n", "N", "program", "splits", "host (enq.)", "each+finish", "back to back");
    static const int defaults[] = {256, 4096, 32768};
    const int count = argc > 1 ? argc - 1 : 3;
    for (int c = 0; c < count; ++c) {
        const int n = argc > 1 ? atoi(argv[c + 1]) : defaults[c];
        flashcl_attention_desc desc;
        flashcl_attention_desc_init(&desc, batch, hq, sq, n, d);
        desc.heads_kv = hkv;
        desc.dtype = FLASHCL_DTYPE_F16;
        const size_t kv_bytes = (size_t)batch * n * hkv * d * 2, q_bytes = (size_t)batch * sq * hq * d * 2;
        cl_mem q = zeros(context, queue, q_bytes), k = zeros(context, queue, kv_bytes), v = zeros(context, queue, kv_bytes),
               o = zeros(context, queue, q_bytes), lse = zeros(context, queue, (size_t)batch * sq * hq * 4);
        const flashcl_tensor tq = flashcl_tensor_contiguous(q, FLASHCL_LAYOUT_BSHD, hq, sq, d),
                             tk = flashcl_tensor_contiguous(k, FLASHCL_LAYOUT_BSHD, hkv, n, d),
                             tv = flashcl_tensor_contiguous(v, FLASHCL_LAYOUT_BSHD, hkv, n, d),
                             to = flashcl_tensor_contiguous(o, FLASHCL_LAYOUT_BSHD, hq, sq, d),
                             tl = flashcl_tensor_lse(lse, hq, sq);
        static double host[CALLS], each[CALLS], b2b[CALLS / 10];
        int ok = 1;
        /* Each call alone: its host time, and its wall time to the end of clFinish. */
        for (int i = 0; i < WARMUP + CALLS && ok; ++i) {
            clFinish(queue);
            const double t0 = now_us();
            ok = flashcl_forward(ctx, &desc, &tq, &tk, &tv, &to, &tl, 0, NULL, NULL) == FLASHCL_SUCCESS;
            const double t1 = now_us();
            clFinish(queue);
            if (i >= WARMUP) host[i - WARMUP] = t1 - t0, each[i - WARMUP] = now_us() - t0;
        }
        /* Ten calls enqueued together, one clFinish. */
        for (int i = 0; i < CALLS / 10 && ok; ++i) {
            clFinish(queue);
            const double t0 = now_us();
            for (int j = 0; j < 10 && ok; ++j)
                ok = flashcl_forward(ctx, &desc, &tq, &tk, &tv, &to, &tl, 0, NULL, NULL) == FLASHCL_SUCCESS;
            clFinish(queue);
            b2b[i] = (now_us() - t0) / 10;
        }
        flashcl_call_stats stats;
        flashcl_last_call_stats(ctx, &stats);
        if (!ok)
            printf("%8d failed: %s\n", n, flashcl_last_error(ctx));
        else
            printf("%8d %-16s %6d %12.1f %12.1f %14.1f\n", n, stats.program, stats.kv_splits, median(host, CALLS),
                   median(each, CALLS), median(b2b, CALLS / 10));
        cl_mem all[] = {q, k, v, o, lse};
        for (int i = 0; i < 5; ++i) clReleaseMemObject(all[i]);
    }
    flashcl_context_free(ctx);
    return 0;
}
