/* bench_decode.c: `flashcl bench --decode`. Each cache length: Q (B, Sq, Hq, d), K and V caches (B, N, Hkv, d),
 * all contiguous BSHD, one forward call timed; the copy rate of the same device measured first, on the same
 * clock (wall time around clFinish), so pct_of_copy compares like with like. */
#include "bench_decode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_buffers.h"
#include "bench_options.h"
#include "cli_util.h"
#include "dtype_option.h"

#define DECODE_MAX_LENS 32

typedef struct decode_options {
    int batch, heads, heads_kv, head_dim, query_len;
    int lens[DECODE_MAX_LENS];
    int len_count;
    flashcl_dtype dtype;
    flashcl_tensor_cores tensor_cores;
    int decode_kernel; /* 0: the tiled kernels (--no-decode-kernel), for comparison */
    int splits;        /* 0: automatic */
    int page_size;     /* 0: contiguous caches through flashcl_forward; else paged through flashcl_forward_kv_cache */
    int back_to_back;  /* 1: each sample is BACK_TO_BACK_CALLS calls enqueued together, then one clFinish */
    int bias;          /* BENCH_BIAS_NONE, _SHARED (1, 1, Sq, S) or _FULL (B, Hq, Sq, S), S the cache's key positions */
    int repeat, warmup;
    const char *device, *json_path, *csv_path;
} decode_options;

/* Calls per sample with --back-to-back: a decode loop enqueues its layers' calls without waiting for each, so
 * the device sees them one after another and the host's enqueue and the clFinish round trip overlap the work. */
#define BACK_TO_BACK_CALLS 10

typedef struct decode_record {
    int cache_len;
    const char *kernel;
    char backend[32]; /* the matrix-unit backend that ran it, "-" for none */
    int kv_splits;
    double ms, kv_gbps, pct_of_copy;
    size_t bias_bytes; /* the --bias view's bytes, read once per call besides K and V (0: no bias) */
    int ok;
} decode_record;

static void usage(FILE *out) {
    fprintf(out,
            "usage: flashcl bench --decode [options]\n"
            "Times decode-shaped forward calls: Sq query rows per sequence against KV caches of N\n"
            "rows, in GB/s of K and V read once, beside the device's copy rate (clEnqueueCopyBuffer,\n"
            "bytes read + written) measured first in the same run on the same clock.\n\n"
            "  --batch B             sequences (default 1)\n"
            "  --heads H             query heads (default 32)\n"
            "  --heads-kv H          K/V heads, dividing --heads (default 8)\n"
            "  --head-dim D          head dimension (default 128)\n"
            "  --cache-lens LIST     cache lengths N (default 4096,32768,131072)\n"
            "  --query-len S         query rows per sequence, the last S positions (default 1); causal\n"
            "  --dtype f32|f16|bf16  storage type (default f16)\n"
            "  --tensor-cores auto|off|emulate   as in flashcl bench (default auto)\n"
            "  --no-decode-kernel    run the tiled kernels instead of the decode kernel\n"
            "  --back-to-back        time 10 calls enqueued together, then one clFinish, per call (as a\n"
            "                        decode loop runs them); default: each call alone, clFinish after it\n"
            "  --splits N            force N split-KV chunks (default 0: automatic; 1: none)\n"
            "  --page-size P         a paged cache of P-row pages in a shuffled order, through\n"
            "                        flashcl_forward_kv_cache (default 0: contiguous caches, flashcl_forward)\n"
            "  --bias shared|full    an additive bias of zeros in the storage type, (1, 1, Sq, S) or\n"
            "                        (B, Hq, Sq, S) with S the cache's key positions (N, or pages x P when\n"
            "                        paged), through the _ex calls; read once per call: its bytes are a\n"
            "                        column (records: bias_bytes), K+V GB/s leaves them out (default: none)\n"
            "  --repeat R            timed calls; the median is reported (default 20)\n"
            "  --warmup W            untimed calls first (default 3)\n"
            "  --device SPEC         device index or name substring\n"
            "  --json FILE, --csv FILE   the records (fields: device, batch, heads_q, heads_kv,\n"
            "                        head_dim, query_len, cache_len, page_size, dtype, kernel, backend, timing,\n"
            "                        kv_splits, ms, kv_gbps, copy_gbps, pct_of_copy, ok, bias_bytes)\n"
            "Inputs: a 64-byte random pattern repeated (attention's speed does not depend on values).\n");
}

int bench_decode_requested(int argc, char **argv) {
    for (int i = 1; i < argc; ++i)
        if (strcmp(argv[i], "--decode") == 0) return 1;
    return 0;
}

/* "4096,32768" into o->lens; 0 or -1. */
static int parse_lens(const char *text, decode_options *o) {
    o->len_count = 0;
    char copy[512];
    if (strlen(text) >= sizeof copy) return -1;
    strcpy(copy, text);
    for (char *save = NULL, *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        if (o->len_count == DECODE_MAX_LENS || cli_parse_int(item, 1, 1 << 28, &o->lens[o->len_count])) return -1;
        ++o->len_count;
    }
    return o->len_count > 0 ? 0 : -1;
}

static int parse(int argc, char **argv, decode_options *o) {
    memset(o, 0, sizeof *o);
    *o = (decode_options){1, 32, 8, 128, 1, {4096, 32768, 131072}, 3, FLASHCL_DTYPE_F16, FLASHCL_TENSOR_CORES_AUTO,
                          1, 0, 0, 0, BENCH_BIAS_NONE, 20, 3, NULL, NULL, NULL};
    for (int i = 1; i < argc; ++i) {
        const char *v = NULL, *option = argv[i]; /* kept: reading a value moves i onto it */
        int bad = 0;
        if (strcmp(argv[i], "--decode") == 0) continue;
        if (strcmp(argv[i], "--no-decode-kernel") == 0) {
            o->decode_kernel = 0;
            continue;
        }
        if (strcmp(argv[i], "--back-to-back") == 0) {
            o->back_to_back = 1;
            continue;
        }
        if (strcmp(argv[i], "--help") == 0) return 1;
        int m;
        if ((m = cli_option_value(argc, argv, &i, "--batch", &v))) bad = m < 0 || cli_parse_int(v, 1, 1 << 20, &o->batch);
        else if ((m = cli_option_value(argc, argv, &i, "--heads", &v))) bad = m < 0 || cli_parse_int(v, 1, 4096, &o->heads);
        else if ((m = cli_option_value(argc, argv, &i, "--heads-kv", &v)))
            bad = m < 0 || cli_parse_int(v, 1, 4096, &o->heads_kv);
        else if ((m = cli_option_value(argc, argv, &i, "--head-dim", &v)))
            bad = m < 0 || cli_parse_int(v, 1, 256, &o->head_dim);
        else if ((m = cli_option_value(argc, argv, &i, "--cache-lens", &v))) bad = m < 0 || parse_lens(v, o);
        else if ((m = cli_option_value(argc, argv, &i, "--query-len", &v)))
            bad = m < 0 || cli_parse_int(v, 1, 1 << 20, &o->query_len);
        else if ((m = cli_option_value(argc, argv, &i, "--dtype", &v))) bad = m < 0 || cli_dtype_parse(v, &o->dtype);
        else if ((m = cli_option_value(argc, argv, &i, "--tensor-cores", &v))) {
            if (m < 0) bad = 1;
            else if (strcmp(v, "auto") == 0) o->tensor_cores = FLASHCL_TENSOR_CORES_AUTO;
            else if (strcmp(v, "off") == 0) o->tensor_cores = FLASHCL_TENSOR_CORES_OFF;
            else if (strcmp(v, "emulate") == 0) o->tensor_cores = FLASHCL_TENSOR_CORES_EMULATE;
            else bad = 1;
        } else if ((m = cli_option_value(argc, argv, &i, "--splits", &v))) bad = m < 0 || cli_parse_int(v, 0, 256, &o->splits);
        else if ((m = cli_option_value(argc, argv, &i, "--page-size", &v)))
            bad = m < 0 || cli_parse_int(v, 0, 1 << 20, &o->page_size);
        else if ((m = cli_option_value(argc, argv, &i, "--bias", &v))) {
            if (m < 0) bad = 1;
            else if (strcmp(v, "shared") == 0) o->bias = BENCH_BIAS_SHARED;
            else if (strcmp(v, "full") == 0) o->bias = BENCH_BIAS_FULL;
            else bad = 1;
        } else if ((m = cli_option_value(argc, argv, &i, "--repeat", &v))) bad = m < 0 || cli_parse_int(v, 1, 100000, &o->repeat);
        else if ((m = cli_option_value(argc, argv, &i, "--warmup", &v))) bad = m < 0 || cli_parse_int(v, 0, 100000, &o->warmup);
        else if ((m = cli_option_value(argc, argv, &i, "--device", &v))) bad = m < 0 || !(o->device = v);
        else if ((m = cli_option_value(argc, argv, &i, "--json", &v))) bad = m < 0 || !(o->json_path = v);
        else if ((m = cli_option_value(argc, argv, &i, "--csv", &v))) bad = m < 0 || !(o->csv_path = v);
        else {
            fprintf(stderr, "flashcl bench --decode: unknown option %s\n", argv[i]);
            return -1;
        }
        if (bad) {
            fprintf(stderr, "flashcl bench --decode: bad value for %s\n", option);
            return -1;
        }
    }
    if (o->heads % o->heads_kv != 0) {
        fprintf(stderr, "flashcl bench --decode: --heads %d is not a multiple of --heads-kv %d\n", o->heads,
                o->heads_kv);
        return -1;
    }
    return 0;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int compare_doubles(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* A buffer of `bytes` holding a 64-byte random pattern (values in [-1, 1) in every storage type's terms: the
 * pattern's 16-bit words are halves in [0.5, 1) with random signs, and as float32 pairs they are finite). */
static cl_mem pattern_buffer(cl_context context, cl_command_queue queue, size_t bytes, unsigned seed) {
    bytes = (bytes + 63) / 64 * 64; /* whole patterns: clEnqueueFillBuffer fills multiples of its pattern */
    cl_int err;
    cl_mem m = clCreateBuffer(context, CL_MEM_READ_WRITE, bytes, NULL, &err);
    if (err != CL_SUCCESS) return NULL;
    unsigned short pattern[32];
    for (int i = 0; i < 32; ++i) {
        seed = seed * 1103515245u + 12345u;
        pattern[i] = (unsigned short)(0x3800u + ((seed >> 16) & 0x3ffu)) | (unsigned short)((seed & 0x100u) << 7);
    }
    if (clEnqueueFillBuffer(queue, m, pattern, sizeof pattern, 0, bytes, 0, NULL, NULL) != CL_SUCCESS) {
        clReleaseMemObject(m);
        return NULL;
    }
    return m;
}

/* The device's copy rate in GB/s (bytes read + written), median of 9 copies of `bytes`; 0 if it failed. */
static double copy_gbps(cl_context context, cl_command_queue queue, size_t bytes) {
    cl_mem a = pattern_buffer(context, queue, bytes, 1), b = pattern_buffer(context, queue, bytes, 2);
    double times[9], rate = 0.0;
    int ok = a && b;
    for (int i = 0; ok && i < 11; ++i) {
        clFinish(queue);
        const double t0 = now();
        ok = clEnqueueCopyBuffer(queue, a, b, 0, 0, bytes, 0, NULL, NULL) == CL_SUCCESS && clFinish(queue) == CL_SUCCESS;
        if (i >= 2) times[i - 2] = now() - t0;
    }
    if (ok) {
        qsort(times, 9, sizeof times[0], compare_doubles);
        rate = 2.0 * (double)bytes / times[4] / 1e9;
    }
    if (a) clReleaseMemObject(a);
    if (b) clReleaseMemObject(b);
    return rate;
}

/* Times one cache length; r->ok 0 (with a message printed) if a call failed. */
static void measure(flashcl_context *ctx, const decode_options *o, int n, decode_record *r) {
    memset(r, 0, sizeof *r);
    r->cache_len = n;
    r->kernel = "-";
    snprintf(r->backend, sizeof r->backend, "-");
    cl_context context = flashcl_context_cl_context(ctx);
    cl_command_queue queue = flashcl_context_queue(ctx);
    const size_t e = flashcl_dtype_size(o->dtype), d = (size_t)o->head_dim;
    const size_t q_bytes = (size_t)o->batch * (size_t)o->query_len * (size_t)o->heads * d * e;
    const size_t kv_bytes = (size_t)o->batch * (size_t)n * (size_t)o->heads_kv * d * e;
    /* A paged cache: each sequence's ceil(N / P) pages, in a shuffled order over the pool. */
    const int pages_per_seq = o->page_size ? (n + o->page_size - 1) / o->page_size : 0;
    const size_t pages = (size_t)o->batch * (size_t)pages_per_seq;
    const size_t cache_bytes = o->page_size ? pages * (size_t)o->page_size * (size_t)o->heads_kv * d * e : kv_bytes;
    cl_mem q = pattern_buffer(context, queue, q_bytes, 3), k = pattern_buffer(context, queue, cache_bytes, 4),
           v = pattern_buffer(context, queue, cache_bytes, 5), out = pattern_buffer(context, queue, q_bytes, 6),
           lse = pattern_buffer(context, queue, (size_t)o->batch * (size_t)o->query_len * (size_t)o->heads * 4, 7);
    int32_t *table = o->page_size ? malloc(pages * sizeof *table) : NULL, *lens = malloc((size_t)o->batch * 4);
    cl_mem table_buffer = NULL, lens_buffer = NULL;
    if (lens) {
        for (int b = 0; b < o->batch; ++b) lens[b] = n;
        lens_buffer = clCreateBuffer(context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, (size_t)o->batch * 4, lens, NULL);
    }
    if (table) {
        for (size_t i = 0; i < pages; ++i) table[i] = (int32_t)i;
        unsigned seed = 12345u;
        for (size_t i = pages; i > 1; --i) {
            seed = seed * 1103515245u + 12345u;
            const size_t j = (seed >> 8) % i;
            const int32_t t = table[i - 1];
            table[i - 1] = table[j], table[j] = t;
        }
        table_buffer = clCreateBuffer(context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, pages * 4, table, NULL);
    }
    /* The bias's columns are the call's key positions: N for a contiguous cache (flashcl_forward_ex's Sk), every
     * page of the block table's row for a paged one (flashcl_forward_kv_cache_ex: max_pages x page_size). */
    flashcl_attention_extras extras;
    flashcl_attention_extras_init(&extras);
    size_t bias_bytes = 0;
    cl_mem bias = o->bias ? bench_zero_bias(context, queue, o->bias == BENCH_BIAS_FULL, o->batch, o->heads,
                                            (size_t)o->query_len,
                                            (size_t)(o->page_size ? pages_per_seq * o->page_size : n), o->dtype,
                                            &extras, &bias_bytes)
                          : NULL;
    if (!q || !k || !v || !out || !lse || !lens_buffer || (o->page_size && !table_buffer) || (o->bias && !bias)) {
        fprintf(stderr, "flashcl bench --decode: N=%d: cannot allocate the tensors (%zu bytes of K and V%s)\n", n,
                2 * kv_bytes, o->bias ? ", the bias" : "");
    } else {
        flashcl_attention_desc desc;
        flashcl_attention_desc_init(&desc, o->batch, o->heads, o->query_len, n, o->head_dim);
        desc.heads_kv = o->heads_kv;
        desc.dtype = o->dtype;
        desc.causal = o->query_len > 1; /* the new rows are the cache's last positions */
        const flashcl_tensor tq = flashcl_tensor_contiguous(q, FLASHCL_LAYOUT_BSHD, o->heads, o->query_len, o->head_dim),
                             tk = flashcl_tensor_contiguous(k, FLASHCL_LAYOUT_BSHD, o->heads_kv, n, o->head_dim),
                             tv = flashcl_tensor_contiguous(v, FLASHCL_LAYOUT_BSHD, o->heads_kv, n, o->head_dim),
                             to = flashcl_tensor_contiguous(out, FLASHCL_LAYOUT_BSHD, o->heads, o->query_len,
                                                            o->head_dim),
                             tl = flashcl_tensor_lse(lse, o->heads, o->query_len);
        double *times = malloc((size_t)o->repeat * sizeof *times);
        flashcl_status status = times ? FLASHCL_SUCCESS : FLASHCL_ERROR_OUT_OF_HOST_MEMORY;
        flashcl_kv_cache cache;
        flashcl_kv_cache_init(&cache);
        if (o->page_size) {
            cache.k = flashcl_tensor_contiguous(k, FLASHCL_LAYOUT_BSHD, o->heads_kv, o->page_size, o->head_dim);
            cache.v = flashcl_tensor_contiguous(v, FLASHCL_LAYOUT_BSHD, o->heads_kv, o->page_size, o->head_dim);
            cache.page_size = o->page_size;
            cache.num_pages = (int)pages;
            cache.block_table = table_buffer;
            cache.block_table_host = table;
            cache.max_pages = pages_per_seq;
            cache.cache_seqlens = lens_buffer;
            cache.cache_seqlens_host = lens;
        }
        const flashcl_attention_extras *call_extras = o->bias ? &extras : NULL; /* NULL: the plain calls */
        const int calls = o->back_to_back ? BACK_TO_BACK_CALLS : 1;
        for (int i = 0; status == FLASHCL_SUCCESS && i < o->warmup + o->repeat; ++i) {
            clFinish(queue);
            const double t0 = now();
            for (int c = 0; c < calls && status == FLASHCL_SUCCESS; ++c)
                status = o->page_size
                             ? flashcl_forward_kv_cache_ex(ctx, &desc, call_extras, &tq, &cache, &to, &tl, 0, NULL, NULL)
                             : flashcl_forward_ex(ctx, &desc, call_extras, &tq, &tk, &tv, &to, &tl, 0, NULL, NULL);
            if (status == FLASHCL_SUCCESS && clFinish(queue) != CL_SUCCESS) status = FLASHCL_ERROR_OPENCL;
            if (i >= o->warmup) times[i - o->warmup] = (now() - t0) / calls;
        }
        if (status != FLASHCL_SUCCESS) {
            cli_report_library_error("bench --decode", "forward", ctx, status);
        } else {
            qsort(times, (size_t)o->repeat, sizeof times[0], compare_doubles);
            const double t = times[o->repeat / 2];
            flashcl_call_stats stats;
            flashcl_last_call_stats(ctx, &stats);
            r->kernel = flashcl_kernel_kind_name(stats.kernel);
            snprintf(r->backend, sizeof r->backend, "%s", stats.backend[0] ? stats.backend : "-");
            r->kv_splits = stats.kv_splits;
            r->ms = 1e3 * t;
            r->kv_gbps = 2.0 * (double)kv_bytes / t / 1e9;
            r->bias_bytes = bias_bytes;
            r->ok = 1;
        }
        free(times);
    }
    cl_mem all[] = {q, k, v, out, lse, table_buffer, lens_buffer, bias};
    for (int i = 0; i < 8; ++i)
        if (all[i]) clReleaseMemObject(all[i]);
    free(table);
    free(lens);
}

static void write_json(FILE *f, const char *device, const decode_options *o, const decode_record *r, int count,
                       double copy) {
    fprintf(f, "[\n");
    for (int i = 0; i < count; ++i)
        fprintf(f,
                "  {\"device\": \"%s\", \"batch\": %d, \"heads_q\": %d, \"heads_kv\": %d, \"head_dim\": %d, "
                "\"query_len\": %d, \"cache_len\": %d, \"page_size\": %d, \"dtype\": \"%s\", \"kernel\": \"%s\", \"backend\": \"%s\", \"timing\": \"%s\", \"kv_splits\": %d, "
                "\"ms\": %.6g, \"kv_gbps\": %.6g, \"copy_gbps\": %.6g, \"pct_of_copy\": %.6g, \"ok\": %s, \"bias_bytes\": %zu}%s\n",
                device, o->batch, o->heads, o->heads_kv, o->head_dim, o->query_len, r[i].cache_len, o->page_size,
                cli_dtype_word(o->dtype), r[i].kernel, r[i].backend, o->back_to_back ? "back_to_back" : "per_call",
                r[i].kv_splits, r[i].ms, r[i].kv_gbps, copy,
                r[i].pct_of_copy, r[i].ok ? "true" : "false", r[i].bias_bytes, i + 1 < count ? "," : "");
    fprintf(f, "]\n");
}

static void write_csv(FILE *f, const char *device, const decode_options *o, const decode_record *r, int count,
                      double copy) {
    fprintf(f, "device,batch,heads_q,heads_kv,head_dim,query_len,cache_len,page_size,dtype,kernel,backend,timing,kv_splits,ms,"
               "kv_gbps,copy_gbps,pct_of_copy,ok,bias_bytes\n"); /* new fields at the end: readers index columns */
    for (int i = 0; i < count; ++i)
        fprintf(f, "\"%s\",%d,%d,%d,%d,%d,%d,%d,%s,%s,%s,%s,%d,%.6g,%.6g,%.6g,%.6g,%d,%zu\n", device, o->batch, o->heads,
                o->heads_kv, o->head_dim, o->query_len, r[i].cache_len, o->page_size, cli_dtype_word(o->dtype),
                r[i].kernel, r[i].backend, o->back_to_back ? "back_to_back" : "per_call", r[i].kv_splits, r[i].ms, r[i].kv_gbps, copy, r[i].pct_of_copy, r[i].ok,
                r[i].bias_bytes);
}

/* Writes path with writer; 0 or -1 (a message printed). */
static int write_file(const char *path, void (*writer)(FILE *, const char *, const decode_options *,
                                                       const decode_record *, int, double),
                      const char *device, const decode_options *o, const decode_record *r, int count, double copy) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "flashcl bench --decode: cannot write %s\n", path);
        return -1;
    }
    writer(f, device, o, r, count, copy);
    return fclose(f) == 0 ? 0 : -1;
}

int bench_decode_main(int argc, char **argv) {
    decode_options o;
    const int parsed = parse(argc, argv, &o);
    if (parsed > 0) {
        usage(stdout);
        return BENCH_EXIT_OK;
    }
    if (parsed < 0) {
        usage(stderr);
        return BENCH_EXIT_USAGE;
    }
    flashcl_context_options options;
    flashcl_context_options_init(&options);
    options.device = o.device;
    flashcl_context *ctx;
    flashcl_status status = flashcl_context_create(&ctx, &options);
    if (status != FLASHCL_SUCCESS) {
        cli_report_library_error("bench --decode", "context", NULL, status);
        return BENCH_EXIT_FAILURE;
    }
    status = flashcl_context_set_tensor_cores(ctx, o.tensor_cores);
    if (status == FLASHCL_SUCCESS) status = flashcl_context_set_decode_kernel(ctx, o.decode_kernel);
    if (status == FLASHCL_SUCCESS) status = flashcl_context_set_kv_splits(ctx, o.splits);
    if (status != FLASHCL_SUCCESS) {
        cli_report_library_error("bench --decode", "settings", ctx, status);
        flashcl_context_free(ctx);
        return BENCH_EXIT_FAILURE;
    }
    char device[256] = "unknown device";
    clGetDeviceInfo(flashcl_context_device(ctx), CL_DEVICE_NAME, sizeof device - 1, device, NULL);
    for (char *c = device; *c; ++c)
        if (*c == '"' || *c == '\\') *c = ' '; /* safe inside JSON and CSV strings */

    /* The copy: twice the largest cache's K+V bytes, at least 16 MiB and at most 1 GiB. */
    int longest = 0;
    for (int i = 0; i < o.len_count; ++i)
        if (o.lens[i] > longest) longest = o.lens[i];
    size_t copy_bytes = 2 * (size_t)o.batch * (size_t)longest * (size_t)o.heads_kv * (size_t)o.head_dim *
                        flashcl_dtype_size(o.dtype);
    if (copy_bytes < ((size_t)16 << 20)) copy_bytes = (size_t)16 << 20;
    if (copy_bytes > ((size_t)1 << 30)) copy_bytes = (size_t)1 << 30;
    const double copy = copy_gbps(flashcl_context_cl_context(ctx), flashcl_context_queue(ctx), copy_bytes);

    decode_record records[DECODE_MAX_LENS];
    int failed = copy <= 0.0;
    if (failed) fprintf(stderr, "flashcl bench --decode: the copy-rate measurement failed\n");
    printf("device: %s\ncopy rate: %.1f GB/s (clEnqueueCopyBuffer of %zu MiB, read + write)\n", device, copy,
           copy_bytes >> 20);
    printf("B %d, heads %d / %d KV, d %d, %d query row%s, %s, %s cache; %s\n", o.batch, o.heads, o.heads_kv,
           o.head_dim, o.query_len, o.query_len == 1 ? "" : "s (causal)", cli_dtype_word(o.dtype),
           o.page_size ? "paged" : "contiguous",
           o.back_to_back ? "per call of 10 enqueued back to back" : "each call alone (clFinish after it)");
    if (o.bias)
        printf("additive bias: %s, zeros in %s, S = %s; read once per call, its bytes not in K+V GB/s\n",
               o.bias == BENCH_BIAS_FULL ? "(B, Hq, Sq, S)" : "(1, 1, Sq, S)", cli_dtype_word(o.dtype),
               o.page_size ? "pages x page size" : "N");
    printf("%10s  %-8s %-16s %6s %10s %10s %8s", "cache N", "kernel", "backend", "splits", "ms", "K+V GB/s", "% copy");
    if (o.bias) printf(" %12s", "bias bytes"); /* only with --bias: the table without it stays as it was */
    putchar('\n');
    for (int i = 0; i < o.len_count; ++i) {
        measure(ctx, &o, o.lens[i], &records[i]);
        decode_record *r = &records[i];
        if (!r->ok) {
            failed = 1;
            printf("%10d  failed\n", r->cache_len);
            continue;
        }
        r->pct_of_copy = copy > 0.0 ? 100.0 * r->kv_gbps / copy : 0.0;
        printf("%10d  %-8s %-16s %6d %10.3f %10.1f %7.1f%%", r->cache_len, r->kernel, r->backend, r->kv_splits,
               r->ms, r->kv_gbps, r->pct_of_copy);
        if (o.bias) printf(" %12zu", r->bias_bytes);
        putchar('\n');
    }
    fflush(stdout);
    if (o.json_path && write_file(o.json_path, write_json, device, &o, records, o.len_count, copy)) failed = 1;
    if (o.csv_path && write_file(o.csv_path, write_csv, device, &o, records, o.len_count, copy)) failed = 1;
    flashcl_context_free(ctx);
    return failed ? BENCH_EXIT_FAILURE : BENCH_EXIT_OK;
}
