/* decode_probe.c: times decode-shaped forward calls (Sq query rows against a KV cache of N rows) and the device's
 * copy bandwidth in the same run, for the split-KV record of docs/perf.md. A development probe, not part of the
 * build (the decode bench of issue 19 will replace it):
 *   gcc -O2 -std=c11 -DCL_TARGET_OPENCL_VERSION=120 -Iinclude -Ibuild/include tools/probe/decode_probe.c \
 *       -o build/tools/decode_probe -Lbuild/src -lflashcl -lOpenCL -lm -Wl,-rpath,'$ORIGIN/../src'
 *   decode_probe [N ...]     (default 4096 32768 131072; f16, d 128, Hq 32, Hkv 8, B 1, Sq 1)
 *   DECODE_SHAPE=B,Hq,Hkv,Sq  the shape (default 1,32,8,1)
 *   DECODE_SPLITS=16,64,...  also time the decode kernel with these forced split counts
 *   DECODE_PLANS="1,64,1,64;4,32,4,8"  also time these forced forward plans (block_q,block_k,threads_q,threads_k),
 *                            split automatically
 * Each row: the kernel that ran, kv_splits, the median of 20 timed calls after 3 warm-ups (wall time around
 * clFinish), GB/s of K+V read once, and that as a share of the copy bandwidth (clEnqueueCopyBuffer of 1 GiB:
 * bytes read + written over time). */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "flashcl.h"

#define REPEAT 20
#define WARMUP 3

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int compare(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static cl_mem buffer(cl_context context, cl_command_queue queue, size_t bytes, unsigned seed) {
    cl_int err;
    cl_mem m = clCreateBuffer(context, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (err != CL_SUCCESS) {
        fprintf(stderr, "clCreateBuffer(%zu): %d\n", bytes, err);
        exit(1);
    }
    /* Half values in [-1, 1): a 64-byte random pattern repeated. */
    unsigned short pattern[32];
    for (int i = 0; i < 32; ++i) {
        seed = seed * 1103515245u + 12345u;
        pattern[i] = (unsigned short)(0x3800u + ((seed >> 16) & 0x3ffu)) | (unsigned short)((seed & 0x100u) << 7);
    }
    clEnqueueFillBuffer(queue, m, pattern, sizeof pattern, 0, bytes, 0, NULL, NULL);
    return m;
}

static double copy_gbps(cl_context context, cl_command_queue queue) {
    const size_t bytes = (size_t)1 << 30;
    cl_mem a = buffer(context, queue, bytes, 1), b = buffer(context, queue, bytes, 2);
    double times[10];
    for (int i = 0; i < 12; ++i) {
        clFinish(queue);
        const double t0 = now();
        clEnqueueCopyBuffer(queue, a, b, 0, 0, bytes, 0, NULL, NULL);
        clFinish(queue);
        if (i >= 2) times[i - 2] = now() - t0;
    }
    qsort(times, 10, sizeof times[0], compare);
    clReleaseMemObject(a);
    clReleaseMemObject(b);
    return 2.0 * (double)bytes / times[5] / 1e9;
}

int main(int argc, char **argv) {
    flashcl_context *ctx;
    if (flashcl_context_create(&ctx, NULL) != FLASHCL_SUCCESS) {
        fprintf(stderr, "context: %s\n", flashcl_last_error(NULL));
        return 1;
    }
    cl_context context = flashcl_context_cl_context(ctx);
    cl_command_queue queue = flashcl_context_queue(ctx);
    const double copy = copy_gbps(context, queue);
    printf("copy bandwidth: %.0f GB/s (clEnqueueCopyBuffer, 1 GiB, read + write)\n", copy);
    printf("%8s %-22s %6s %9s %8s %7s\n", "N", "kernel", "splits", "ms", "GB/s", "% copy");
    int batch = 1, hq = 32, hkv = 8, sq = 1;
    const int d = 128;
    if (getenv("DECODE_SHAPE")) sscanf(getenv("DECODE_SHAPE"), "%d,%d,%d,%d", &batch, &hq, &hkv, &sq);
    printf("B %d, Hq %d, Hkv %d, Sq %d, d %d, f16\n", batch, hq, hkv, sq, d);
    static const int defaults[] = {4096, 32768, 131072};
    const int count = argc > 1 ? argc - 1 : 3;
    for (int c = 0; c < count; ++c) {
        const int n = argc > 1 ? atoi(argv[c + 1]) : defaults[c];
        flashcl_attention_desc desc;
        flashcl_attention_desc_init(&desc, batch, hq, sq, n, d);
        desc.heads_kv = hkv;
        desc.dtype = FLASHCL_DTYPE_F16;
        const size_t kv_bytes = (size_t)batch * n * hkv * d * 2, q_bytes = (size_t)batch * sq * hq * d * 2;
        cl_mem q = buffer(context, queue, q_bytes, 3), k = buffer(context, queue, kv_bytes, 4),
               v = buffer(context, queue, kv_bytes, 5), o = buffer(context, queue, q_bytes, 6),
               lse = buffer(context, queue, (size_t)batch * sq * hq * 4, 7);
        const flashcl_tensor tq = flashcl_tensor_contiguous(q, FLASHCL_LAYOUT_BSHD, hq, sq, d),
                             tk = flashcl_tensor_contiguous(k, FLASHCL_LAYOUT_BSHD, hkv, n, d),
                             tv = flashcl_tensor_contiguous(v, FLASHCL_LAYOUT_BSHD, hkv, n, d),
                             to = flashcl_tensor_contiguous(o, FLASHCL_LAYOUT_BSHD, hq, sq, d),
                             tl = flashcl_tensor_lse(lse, hq, sq);
        static const struct {
            flashcl_tensor_cores mode;
            int splits, decode;
        } configs[] = {{FLASHCL_TENSOR_CORES_AUTO, 0, 1}, {FLASHCL_TENSOR_CORES_AUTO, 0, 0}, {FLASHCL_TENSOR_CORES_OFF, 0, 0}};
        int forced[16], forced_count = 0;
        const char *list = getenv("DECODE_SPLITS");
        for (const char *p = list; p && *p && forced_count < 16;) {
            forced[forced_count++] = atoi(p);
            p = strchr(p, ',');
            if (p) ++p;
        }
        flashcl_plan plans[16];
        int plan_count = 0;
        const char *plan_list = getenv("DECODE_PLANS");
        for (const char *p = plan_list; p && *p && plan_count < 16;) {
            flashcl_plan *x = &plans[plan_count];
            memset(x, 0, sizeof *x);
            if (sscanf(p, "%d,%d,%d,%d", &x->block_q, &x->block_k, &x->threads_q, &x->threads_k) == 4) ++plan_count;
            p = strchr(p, ';');
            if (p) ++p;
        }
        for (int g = 0; g < 3 + forced_count + plan_count; ++g) {
            flashcl_context_force_plan(ctx, FLASHCL_PASS_FORWARD, g >= 3 + forced_count ? &plans[g - 3 - forced_count]
                                                                                        : NULL);
            flashcl_context_set_decode_kernel(ctx, g < 3 ? configs[g].decode : 1);
            if (g >= 3 + forced_count) {
                flashcl_context_set_tensor_cores(ctx, FLASHCL_TENSOR_CORES_OFF);
                flashcl_context_set_kv_splits(ctx, 0);
            } else {
                flashcl_context_set_tensor_cores(ctx, g < 3 ? configs[g].mode : FLASHCL_TENSOR_CORES_OFF);
                flashcl_context_set_kv_splits(ctx, g < 3 ? configs[g].splits : forced[g - 3]);
            }
            double times[REPEAT];
            int ok = 1;
            for (int i = 0; i < WARMUP + REPEAT && ok; ++i) {
                clFinish(queue);
                const double t0 = now();
                ok = flashcl_forward(ctx, &desc, &tq, &tk, &tv, &to, &tl, 0, NULL, NULL) == FLASHCL_SUCCESS;
                clFinish(queue);
                if (i >= WARMUP) times[i - WARMUP] = now() - t0;
            }
            if (!ok) {
                printf("%8d failed: %s\n", n, flashcl_last_error(ctx));
                continue;
            }
            qsort(times, REPEAT, sizeof times[0], compare);
            const double ms = 1e3 * times[REPEAT / 2], gbps = 2.0 * (double)kv_bytes / times[REPEAT / 2] / 1e9;
            flashcl_call_stats stats;
            flashcl_last_call_stats(ctx, &stats);
            printf("%8d %-22s %6d %9.3f %8.1f %6.1f%%  plan %dx%d threads %dx%d\n", n,
                   flashcl_kernel_kind_name(stats.kernel), stats.kv_splits, ms, gbps, 100.0 * gbps / copy,
                   stats.plan.block_q, stats.plan.block_k, stats.plan.threads_q, stats.plan.threads_k);
        }
        cl_mem all[] = {q, k, v, o, lse};
        for (int i = 0; i < 5; ++i) clReleaseMemObject(all[i]);
    }
    flashcl_context_free(ctx);
    return 0;
}
