/* cmd_run.c: `flashcl run` -- attention on .npy files through the device-buffer API, with an optional CPU check. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attention_reference.h"
#include "cli_util.h"
#include "commands.h"
#include "npy.h"
#include "run_cache.h"
#include "run_check.h"
#include "run_files.h"
#include "run_inputs.h"
#include "run_options.h"
#include "run_bias.h"
#include "run_score_mods.h"

/* The host and device side of one tensor of the run. */
typedef struct run_tensor {
    const char *name;
    size_t bytes;
    void *host; /* outputs: where results are read back (inputs point into the npy arrays) */
    cl_mem buffer;
} run_tensor;

enum { T_Q, T_K, T_V, T_O, T_LSE, T_DOUT, T_DQ, T_DK, T_DV, T_MASK, T_KEEP, T_COUNT };

typedef struct run_state {
    run_options options;
    run_files files; /* every path of the command line, resolved; the outputs' contents */
    run_inputs inputs;
    flashcl_context *ctx;
    run_tensor t[T_COUNT];
    int backward;
    flashcl_attention_extras extras; /* the block mask, the cu_seqlens, the score modifiers, if any */
    run_score_mods mods;             /* --softcap, --alibi-slopes, --alibi-max-bias */
    run_bias bias;                   /* --bias, --dbias */
    cl_mem cu_q, cu_k;               /* --cu-seqlens-q/-k on the device */
} run_state;

/* The desc of the library calls: the packed batch's (B sequences) with
 * --cu-seqlens-q/-k, else the one the tensors are shaped by. */
static const flashcl_attention_desc *call_desc(const run_state *s) {
    return s->inputs.varlen ? &s->inputs.call_desc : &s->inputs.desc;
}

static void free_state(run_state *s) {
    for (int i = 0; i < T_COUNT; ++i) {
        if (s->t[i].buffer) clReleaseMemObject(s->t[i].buffer);
        if (i >= T_O && i != T_DOUT && i != T_MASK) free(s->t[i].host);
    }
    if (s->cu_q) clReleaseMemObject(s->cu_q);
    if (s->cu_k) clReleaseMemObject(s->cu_k);
    flashcl_context_free(s->ctx);
    run_score_mods_free(&s->mods);
    run_bias_free(&s->bias);
    run_free_inputs(&s->inputs);
    run_files_free(&s->files);
}

/* Inputs are copied in; outputs are filled with 0xff bytes (NaN in every
 * dtype) so an element the kernel never writes cannot pass --check. */
static int create_buffers(run_state *s) {
    const flashcl_attention_desc *d = &s->inputs.desc;
    const size_t elem = flashcl_dtype_size(d->dtype);
    const size_t q_bytes = run_tensor_count(d, d->heads_q, d->seqlen_q) * elem;
    const size_t kv_bytes = run_tensor_count(d, d->heads_kv, d->seqlen_k) * elem;
    const size_t lse_bytes = (size_t)d->batch * d->heads_q * d->seqlen_q * sizeof(float);
    const size_t keep_bytes = (size_t)d->batch * d->heads_q * d->seqlen_q * d->seqlen_k;
    const struct {
        const char *name;
        size_t bytes;
        void *input;
        int wanted;
    } specs[T_COUNT] = {
        [T_Q] = {"Q", q_bytes, s->inputs.q.data, 1},
        [T_K] = {"K", kv_bytes, s->inputs.k.data, 1},
        [T_V] = {"V", kv_bytes, s->inputs.v.data, 1},
        [T_O] = {"O", q_bytes, NULL, 1},
        [T_LSE] = {"LSE", lse_bytes, NULL, 1}, /* always: backward needs it and --check compares it */
        [T_DOUT] = {"dO", q_bytes, s->inputs.dout.data, s->backward},
        [T_DQ] = {"dQ", q_bytes, NULL, s->backward},
        [T_DK] = {"dK", kv_bytes, NULL, s->backward},
        [T_DV] = {"dV", kv_bytes, NULL, s->backward},
        [T_MASK] = {"block mask", s->inputs.block_mask.count, s->inputs.block_mask.data, s->options.block_mask_path != NULL},
        [T_KEEP] = {"dropout mask", keep_bytes, NULL, s->options.dropout_mask_path != NULL},
    };
    cl_context cl_ctx = flashcl_context_cl_context(s->ctx);
    for (int i = 0; i < T_COUNT; ++i) {
        if (!specs[i].wanted) continue;
        run_tensor *t = &s->t[i];
        t->name = specs[i].name;
        t->bytes = specs[i].bytes;
        t->host = specs[i].input;
        if (!t->host) {
            t->host = malloc(t->bytes);
            if (!t->host) {
                fprintf(stderr, "flashcl run: out of host memory (%zu bytes for %s)\n", t->bytes, t->name);
                return -1;
            }
            memset(t->host, 0xff, t->bytes);
        }
        const cl_mem_flags flags = (specs[i].input ? CL_MEM_READ_ONLY : CL_MEM_READ_WRITE) | CL_MEM_COPY_HOST_PTR;
        cl_int err = CL_SUCCESS;
        t->buffer = clCreateBuffer(cl_ctx, flags, t->bytes, t->host, &err);
        if (err != CL_SUCCESS) {
            t->buffer = NULL;
            fprintf(stderr, "flashcl run: clCreateBuffer for %s (%zu bytes) failed with OpenCL error %d\n", t->name,
                    t->bytes, (int)err);
            return -1;
        }
    }
    flashcl_attention_extras_init(&s->extras);
    run_score_mods_extras(&s->mods, &s->extras);
    if (run_bias_buffers(&s->bias, cl_ctx, &s->inputs.desc, s->options.dbias_path != NULL, &s->extras) != 0) return -1;
    if (s->t[T_MASK].buffer) {
        s->extras.block_mask = s->t[T_MASK].buffer;
        s->extras.block_size = s->options.block_size;
        s->extras.block_mask_per_head = s->inputs.block_mask_per_head;
    }
    if (s->inputs.varlen) {
        const npy_array *cu[2] = {&s->inputs.cu_q, &s->inputs.cu_k};
        cl_mem *out[2] = {&s->cu_q, &s->cu_k};
        for (int i = 0; i < 2; ++i) {
            cl_int err = CL_SUCCESS;
            *out[i] = clCreateBuffer(cl_ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, cu[i]->count * sizeof(int32_t),
                                     cu[i]->data, &err);
            if (err != CL_SUCCESS) {
                *out[i] = NULL;
                fprintf(stderr, "flashcl run: clCreateBuffer for cu_seqlens failed with OpenCL error %d\n", (int)err);
                return -1;
            }
        }
        s->extras.cu_seqlens_q = s->cu_q;
        s->extras.cu_seqlens_k = s->cu_k;
        /* The buffers were just made from these arrays, so the host copies
         * match them: the calls check these instead of a blocking read-back. */
        s->extras.cu_seqlens_q_host = s->inputs.cu_q.data;
        s->extras.cu_seqlens_k_host = s->inputs.cu_k.data;
    }
    return 0;
}

static int read_back(run_state *s, int first, int last) {
    cl_command_queue queue = flashcl_context_queue(s->ctx);
    for (int i = first; i <= last; ++i) {
        cl_int err = clEnqueueReadBuffer(queue, s->t[i].buffer, CL_TRUE, 0, s->t[i].bytes, s->t[i].host, 0, NULL, NULL);
        if (err != CL_SUCCESS) {
            fprintf(stderr, "flashcl run: reading %s back failed with OpenCL error %d\n", s->t[i].name, (int)err);
            return -1;
        }
    }
    return 0;
}

static flashcl_tensor view(const run_state *s, int which, int heads, int seqlen) {
    return flashcl_tensor_contiguous(s->t[which].buffer, s->options.layout, heads, seqlen, s->inputs.desc.head_dim);
}

static void print_call(const char *pass, const run_state *s) {
    flashcl_call_stats stats;
    if (flashcl_last_call_stats(s->ctx, &stats) != FLASHCL_SUCCESS) return;
    if (stats.impl == FLASHCL_IMPL_STANDARD) {
        printf("%s: standard attention (CLBlast), %zu extra device bytes\n", pass, stats.extra_device_bytes);
        return;
    }
    /* The kernel that ran, from the call's stats rather than --tensor-cores:
     * the library runs the portable kernel for calls the tensor-core one does
     * not take. */
    char plan[160];
    cli_format_plan(&stats.plan, plan, sizeof plan);
    if (stats.backend[0])
        printf("%s: flash, kernel %s (backend %s), %s\n", pass, flashcl_kernel_kind_name(stats.kernel), stats.backend,
               plan);
    else
        printf("%s: flash, kernel %s, %s\n", pass, flashcl_kernel_kind_name(stats.kernel), plan);
}

static void print_problem(const run_state *s) {
    const flashcl_attention_desc *d = &s->inputs.desc;
    char device[600];
    cli_describe_device(flashcl_context_device(s->ctx), device, sizeof device);
    const double scale = d->scale != 0.0f ? d->scale : 1.0 / sqrt((double)d->head_dim);
    printf("device: %s\n", device);
    printf("problem: batch %d, heads %d/%d (q/kv), seqlen %d/%d (q/k), head_dim %d, %s, %s, %s, scale %g\n",
           d->batch, d->heads_q, d->heads_kv, d->seqlen_q, d->seqlen_k, d->head_dim,
           d->dtype == FLASHCL_DTYPE_F32 ? "float32" : d->dtype == FLASHCL_DTYPE_F16 ? "float16" : "bfloat16",
           s->options.layout == FLASHCL_LAYOUT_BSHD ? "bshd" : "bhsd", d->causal ? "causal" : "not causal", scale);
    if (d->sliding_window) printf("window: %d,%d\n", d->window_left, d->window_right);
    if (s->options.block_mask_path)
        printf("block mask: %s, block size %d, %s\n", s->options.block_mask_path, s->options.block_size,
               s->inputs.block_mask_per_head ? "per head" : "shared by all heads");
    if (d->dropout_p > 0.0f) printf("dropout: p %g, seed %llu\n", (double)d->dropout_p, s->options.seed);
    char mods[512];
    run_score_mods_describe(&s->options, &s->mods, mods, sizeof mods);
    if (mods[0]) printf("score modifiers: %s\n", mods);
    if (s->options.bias_path)
        printf("bias: %s, %s (%d, %d, %d, %d)\n", s->options.bias_path, run_dtype_name(s->bias.dtype), s->bias.batch,
               s->bias.heads, d->seqlen_q, d->seqlen_k);
    if (s->inputs.varlen)
        printf("varlen: %d packed sequences, longest %d/%d (q/k) (seqlen above: the packed totals)\n",
               s->inputs.call_desc.batch, s->inputs.call_desc.seqlen_q, s->inputs.call_desc.seqlen_k);
}

static int setup_context(run_state *s) {
    flashcl_context_options options;
    flashcl_context_options_init(&options);
    options.device = s->options.device;
    options.kernel_dir = s->options.kernel_dir;
    flashcl_status status = flashcl_context_create(&s->ctx, &options);
    if (status != FLASHCL_SUCCESS) {
        cli_report_library_error("run", "creating the context", NULL, status);
        return -1;
    }
    if ((status = flashcl_context_set_impl(s->ctx, s->options.impl)) != FLASHCL_SUCCESS ||
        (status = flashcl_context_set_tensor_cores(s->ctx, s->options.tensor_cores)) != FLASHCL_SUCCESS ||
        (status = flashcl_context_set_f32_precision(s->ctx, s->options.f32_precision)) != FLASHCL_SUCCESS ||
        (s->options.forward_plan_given &&
         (status = flashcl_context_force_plan(s->ctx, FLASHCL_PASS_FORWARD, &s->options.forward_plan))) ||
        (s->options.backward_plan_given &&
         (status = flashcl_context_force_plan(s->ctx, FLASHCL_PASS_BACKWARD, &s->options.backward_plan)))) {
        cli_report_library_error("run", "configuring the context", s->ctx, status);
        return -1;
    }
    return 0;
}

static int run_forward(run_state *s) {
    const flashcl_attention_desc *d = &s->inputs.desc;
    const flashcl_tensor q = view(s, T_Q, d->heads_q, d->seqlen_q), k = view(s, T_K, d->heads_kv, d->seqlen_k),
                         v = view(s, T_V, d->heads_kv, d->seqlen_k), o = view(s, T_O, d->heads_q, d->seqlen_q),
                         lse = flashcl_tensor_lse(s->t[T_LSE].buffer, d->heads_q, d->seqlen_q);
    flashcl_status status = flashcl_forward_ex(s->ctx, call_desc(s), &s->extras, &q, &k, &v, &o, &lse, 0, NULL, NULL);
    if (status != FLASHCL_SUCCESS) {
        cli_report_library_error("run", "forward", s->ctx, status);
        return -1;
    }
    if (read_back(s, T_O, T_LSE) != 0) return -1;
    check_note_nonfinite("O", s->t[T_O].host, d->dtype, run_tensor_count(d, d->heads_q, d->seqlen_q));
    check_note_nonfinite("LSE", s->t[T_LSE].host, FLASHCL_DTYPE_F32, (size_t)d->batch * d->heads_q * d->seqlen_q);
    if (s->options.dropout_mask_path) {
        status = flashcl_dropout_mask(s->ctx, d, s->t[T_KEEP].buffer, 0, 0, NULL, NULL);
        if (status != FLASHCL_SUCCESS) {
            cli_report_library_error("run", "dropout mask", s->ctx, status);
            return -1;
        }
        if (read_back(s, T_KEEP, T_KEEP) != 0) return -1;
    }
    print_call("forward", s);
    return 0;
}

static int run_backward(run_state *s) {
    const flashcl_attention_desc *d = &s->inputs.desc;
    const flashcl_tensor q = view(s, T_Q, d->heads_q, d->seqlen_q), k = view(s, T_K, d->heads_kv, d->seqlen_k),
                         v = view(s, T_V, d->heads_kv, d->seqlen_k), o = view(s, T_O, d->heads_q, d->seqlen_q),
                         lse = flashcl_tensor_lse(s->t[T_LSE].buffer, d->heads_q, d->seqlen_q),
                         dout = view(s, T_DOUT, d->heads_q, d->seqlen_q), dq = view(s, T_DQ, d->heads_q, d->seqlen_q),
                         dk = view(s, T_DK, d->heads_kv, d->seqlen_k), dv = view(s, T_DV, d->heads_kv, d->seqlen_k);
    flashcl_status status =
        flashcl_backward_ex(s->ctx, call_desc(s), &s->extras, &q, &k, &v, &o, &lse, &dout, &dq, &dk, &dv, 0, NULL, NULL);
    if (status != FLASHCL_SUCCESS) {
        cli_report_library_error("run", "backward", s->ctx, status);
        return -1;
    }
    if (read_back(s, T_DQ, T_DV) != 0 || run_bias_read_dbias(&s->bias, flashcl_context_queue(s->ctx)) != 0) return -1;
    const size_t q_count = run_tensor_count(d, d->heads_q, d->seqlen_q);
    const size_t kv_count = run_tensor_count(d, d->heads_kv, d->seqlen_k);
    check_note_nonfinite("dQ", s->t[T_DQ].host, d->dtype, q_count);
    check_note_nonfinite("dK", s->t[T_DK].host, d->dtype, kv_count);
    check_note_nonfinite("dV", s->t[T_DV].host, d->dtype, kv_count);
    print_call("backward", s);
    return 0;
}

/* Writes every output the command line names, all or none (run_files_write). */
static int write_outputs(run_state *s) {
    const flashcl_attention_desc *d = &s->inputs.desc;
    size_t q_shape[4], kv_shape[4];
    run_tensor_shape(d, s->options.layout, d->heads_q, d->seqlen_q, q_shape);
    run_tensor_shape(d, s->options.layout, d->heads_kv, d->seqlen_k, kv_shape);
    const size_t lse_shape[3] = {(size_t)d->batch, (size_t)d->heads_q, (size_t)d->seqlen_q};
    const size_t keep_shape[4] = {(size_t)d->batch, (size_t)d->heads_q, (size_t)d->seqlen_q, (size_t)d->seqlen_k};
    /* Packed: O, dQ (total_q, Hq, D), dK, dV (total_k, Hkv, D) and LSE (Hq, total_q), the leading 1 dropped. */
    const int packed = s->inputs.varlen;
    const npy_dtype dtype = s->inputs.q.dtype;
    run_files *f = &s->files;
    run_files_set(f, "--out", dtype, 4 - packed, q_shape + packed, s->t[T_O].host);
    run_files_set(f, "--lse", NPY_DTYPE_F32, 3 - packed, lse_shape + packed, s->t[T_LSE].host);
    run_files_set(f, "--dropout-mask", NPY_DTYPE_U8, 4, keep_shape, s->t[T_KEEP].host);
    if (s->backward) {
        run_files_set(f, "--dq", dtype, 4 - packed, q_shape + packed, s->t[T_DQ].host);
        run_files_set(f, "--dk", dtype, 4 - packed, kv_shape + packed, s->t[T_DK].host);
        run_files_set(f, "--dv", dtype, 4 - packed, kv_shape + packed, s->t[T_DV].host);
        const size_t dbias_shape[4] = {(size_t)s->bias.batch, (size_t)s->bias.heads, (size_t)d->seqlen_q,
                                       (size_t)d->seqlen_k};
        run_files_set(f, "--dbias", run_npy_dtype(s->bias.dtype), 4, dbias_shape, s->bias.dbias_host);
    }
    return run_files_write(f);
}

/* The reference's float BHSD view of a tensor of the run; NULL if out of memory. */
static float *as_float_bhsd(const run_state *s, int which, int heads, int seqlen) {
    const flashcl_attention_desc *d = &s->inputs.desc;
    return run_to_float_bhsd(s->t[which].host, d->dtype, s->options.layout, d, heads, seqlen);
}

/* Prints the outcome of a check_* call; 0 if it passed, -1 otherwise. */
static int check_outcome(int result, const char *what) {
    if (result < 0) {
        fprintf(stderr, "flashcl run: out of host memory for --check\n");
        return -1;
    }
    if (result == 0) {
        fprintf(stderr, "flashcl run: --check failed: the %s error exceeds the tolerance\n", what);
        return -1;
    }
    printf("check: %s passed\n", what);
    return 0;
}

/* Rows start .. start+len-1 of every head of a float (heads, total, dim)
 * array, as a new (heads, len, dim) array; NULL if out of memory. */
static float *slice_rows(const float *full, int heads, int total, int dim, int start, int len) {
    const size_t row = (size_t)dim, count = (size_t)heads * (size_t)len * row;
    float *out = malloc((count ? count : 1) * sizeof *out);
    if (!out || !full) {
        free(out);
        return NULL;
    }
    for (int h = 0; h < heads; ++h)
        memcpy(out + (size_t)h * (size_t)len * row, full + ((size_t)h * (size_t)total + (size_t)start) * row,
               (size_t)len * row * sizeof *out);
    return out;
}

/* Elements of rows start .. start+len-1 of every head that are not exactly value. */
static size_t count_not(const float *full, int heads, int total, int dim, int start, int len, float value) {
    size_t bad = 0;
    for (int h = 0; h < heads; ++h)
        for (size_t i = 0; i < (size_t)len * (size_t)dim; ++i)
            bad += full[((size_t)h * (size_t)total + (size_t)start) * (size_t)dim + i] != value;
    return bad;
}

/* The element mask (1, Hq, lq, lk) of one sequence of a packed batch: the
 * block mask is in each sequence's own coordinates, its columns sized by
 * the longest key length. NULL if out of memory. */
static unsigned char *sequence_mask(const run_state *s, const flashcl_attention_desc *one) {
    const size_t n = (size_t)s->options.block_size, hq = (size_t)one->heads_q;
    const size_t lq = (size_t)one->seqlen_q, lk = (size_t)one->seqlen_k;
    const size_t rows = ((size_t)s->inputs.call_desc.seqlen_q + n - 1) / n;
    const size_t cols = ((size_t)s->inputs.call_desc.seqlen_k + n - 1) / n;
    unsigned char *mask = malloc(hq * lq * lk);
    if (!mask) return NULL;
    const uint8_t *blocks = s->inputs.block_mask.data;
    size_t x = 0;
    for (size_t h = 0; h < hq; ++h) {
        const uint8_t *plane = blocks + (s->inputs.block_mask_per_head ? h * rows * cols : 0);
        for (size_t i = 0; i < lq; ++i)
            for (size_t j = 0; j < lk; ++j) mask[x++] = plane[(i / n) * cols + j / n] != 0;
    }
    return mask;
}

/* --check of a packed variable-length batch: each sequence through the
 * reference alone (its own lengths, causal/window aligned on them, the
 * dropout counters of batch element b, the block mask's top-left part);
 * an empty side is checked against the definition (O, dQ 0 and LSE -inf
 * without keys; dK, dV 0 without queries). */
static int run_check_varlen(run_state *s, int backward) {
    const flashcl_attention_desc *d = &s->inputs.desc, *call = &s->inputs.call_desc;
    const int hq = d->heads_q, hkv = d->heads_kv, tq = d->seqlen_q, tk = d->seqlen_k, dim = d->head_dim;
    const int32_t *cu_q = s->inputs.cu_q.data, *cu_k = s->inputs.cu_k.data;
    float *q = as_float_bhsd(s, T_Q, hq, tq), *k = as_float_bhsd(s, T_K, hkv, tk), *v = as_float_bhsd(s, T_V, hkv, tk);
    float *a = as_float_bhsd(s, backward ? T_DQ : T_O, hq, tq), *dout = NULL, *b = NULL, *c = NULL;
    if (backward) {
        dout = as_float_bhsd(s, T_DOUT, hq, tq);
        b = as_float_bhsd(s, T_DK, hkv, tk);
        c = as_float_bhsd(s, T_DV, hkv, tk);
    }
    int result = (q && k && v && a && (!backward || (dout && b && c))) ? 1 : -1;
    size_t empty_bad = 0;
    int empty = 0;
    for (int bi = 0; bi < call->batch && result >= 0; ++bi) {
        const int q0 = cu_q[bi], lq = cu_q[bi + 1] - q0, k0 = cu_k[bi], lk = cu_k[bi + 1] - k0;
        if (lq == 0 || lk == 0) {
            ++empty;
            if (lq > 0) {
                empty_bad += count_not(a, hq, tq, dim, q0, lq, 0.0f);
                if (!backward) empty_bad += count_not(s->t[T_LSE].host, hq, tq, 1, q0, lq, -INFINITY);
            }
            if (backward && lk > 0)
                empty_bad += count_not(b, hkv, tk, dim, k0, lk, 0.0f) + count_not(c, hkv, tk, dim, k0, lk, 0.0f);
            continue;
        }
        flashcl_attention_desc one = *call;
        one.batch = 1;
        one.seqlen_q = lq;
        one.seqlen_k = lk;
        one.dropout_offset = call->dropout_offset + (uint64_t)bi * (uint64_t)hq;
        float *sq = slice_rows(q, hq, tq, dim, q0, lq), *sk = slice_rows(k, hkv, tk, dim, k0, lk),
              *sv = slice_rows(v, hkv, tk, dim, k0, lk), *sa = slice_rows(a, hq, tq, dim, q0, lq);
        float *sdo = NULL, *sb = NULL, *sc = NULL, *slse = NULL;
        if (backward) {
            sdo = slice_rows(dout, hq, tq, dim, q0, lq);
            sb = slice_rows(b, hkv, tk, dim, k0, lk);
            sc = slice_rows(c, hkv, tk, dim, k0, lk);
        } else {
            slse = slice_rows(s->t[T_LSE].host, hq, tq, 1, q0, lq);
        }
        int r = -1;
        printf("sequence %d (%d/%d rows q/k):\n", bi, lq, lk);
        unsigned char *mask = s->options.block_mask_path ? sequence_mask(s, &one) : NULL;
        flashcl_reference_extras mods = {.mask = NULL}; /* every field empty: the helpers set theirs only */
        run_score_mods_reference(&s->mods, bi, hq, &mods);
        const check_inputs in = {.q = sq, .k = sk, .v = sv, .dout = sdo, .mask = mask, .mods = &mods};
        if (sq && sk && sv && sa && (backward ? sdo && sb && sc : slse != NULL) &&
            (mask || !s->options.block_mask_path))
            r = backward ? check_backward(&one, &in, sa, sb, sc, s->options.tolerance)
                         : check_forward(&one, &in, sa, slse, s->options.tolerance);
        free(sq), free(sk), free(sv), free(sa), free(sdo), free(sb), free(sc), free(slse), free(mask);
        if (r < 0) result = -1;
        else if (r == 0) result = 0;
    }
    if (result >= 0 && empty) {
        printf("check %d empty sequence(s): %zu element(s) differ from the definition\n", empty, empty_bad);
        if (empty_bad) result = 0;
    }
    free(q), free(k), free(v), free(a), free(dout), free(b), free(c);
    return check_outcome(result, backward ? "backward" : "forward");
}

/* --check of the forward (pass backward = 0) or backward outputs against the CPU reference. */
static int run_check(run_state *s, int backward) {
    if (s->inputs.varlen) return run_check_varlen(s, backward);
    const flashcl_attention_desc *d = &s->inputs.desc;
    const int hq = d->heads_q, hkv = d->heads_kv, sq = d->seqlen_q, sk = d->seqlen_k;
    float *q = as_float_bhsd(s, T_Q, hq, sq), *k = as_float_bhsd(s, T_K, hkv, sk), *v = as_float_bhsd(s, T_V, hkv, sk);
    float *a = NULL, *b = NULL, *c = NULL, *dout = NULL;
    if (backward) {
        dout = as_float_bhsd(s, T_DOUT, hq, sq);
        a = as_float_bhsd(s, T_DQ, hq, sq);
        b = as_float_bhsd(s, T_DK, hkv, sk);
        c = as_float_bhsd(s, T_DV, hkv, sk);
    } else {
        a = as_float_bhsd(s, T_O, hq, sq);
    }
    int result = -1;
    unsigned char *mask = NULL;
    if (s->options.block_mask_path) {
        mask = malloc((size_t)d->batch * hq * sq * sk);
        if (mask)
            flashcl_reference_expand_block_mask(d, s->inputs.block_mask.data, s->options.block_size,
                                                s->inputs.block_mask_per_head, mask);
    }
    flashcl_reference_extras mods = {.mask = NULL}; /* every field empty: the helpers set theirs only */
    run_score_mods_reference_all(&s->mods, &mods);
    run_bias_reference(&s->bias, &mods);
    const check_inputs in = {.q = q, .k = k, .v = v, .dout = dout, .mask = mask, .mods = &mods};
    float *dbias = backward && s->bias.dbias ? run_bias_dbias_floats(&s->bias) : NULL;
    if (q && k && v && a && (!backward || (dout && b && c)) && (mask || !s->options.block_mask_path) &&
        (dbias || !(backward && s->bias.dbias)))
        result = backward ? check_backward_dbias(d, &in, a, b, c, dbias, s->options.tolerance)
                          : check_forward(d, &in, a, s->t[T_LSE].host, s->options.tolerance);
    free(q), free(k), free(v), free(dout), free(a), free(b), free(c), free(mask), free(dbias);
    return check_outcome(result, backward ? "backward" : "forward");
}

int flashcl_cmd_run(int argc, char **argv) {
    run_state s;
    memset(&s, 0, sizeof s);
    switch (run_parse_options(argc, argv, &s.options)) {
    case RUN_PARSE_HELP:
        return FLASHCL_EXIT_OK;
    case RUN_PARSE_ERROR:
        return FLASHCL_EXIT_USAGE;
    case RUN_PARSE_OK:
        break;
    }
    s.backward = run_wants_backward(&s.options);
    /* Paths before anything else: an output that would replace an input or
     * another output, or that cannot be written, is refused before any
     * file is read or OpenCL is touched. */
    const int paths = run_files_check(&s.options, &s.files);
    if (paths != FLASHCL_EXIT_OK) {
        run_files_free(&s.files);
        return paths;
    }
    if (run_is_cache(&s.options)) {
        const int status = run_cache_command(&s.options, &s.files);
        run_files_free(&s.files);
        return status;
    }
    /* Files next: a bad file is reported before any OpenCL start-up cost. */
    if (run_load_inputs(&s.options, &s.inputs) != 0 ||
        run_score_mods_load(&s.options, call_desc(&s)->batch, s.inputs.desc.heads_q, &s.mods) != 0 ||
        run_bias_load(&s.options, &s.inputs.desc, NULL, &s.bias) != 0) {
        run_score_mods_free(&s.mods);
        run_bias_free(&s.bias);
        run_free_inputs(&s.inputs);
        run_files_free(&s.files);
        return FLASHCL_EXIT_FAILURE;
    }
    int failed = setup_context(&s) != 0;
    if (!failed) print_problem(&s);
    failed = failed || create_buffers(&s) != 0 || run_forward(&s) != 0;
    /* A failed forward check still lets the backward run and be checked: each
     * check is run on its own and the outcomes OR'ed, never short-circuited. */
    const int forward_check_failed = !failed && s.options.check && run_check(&s, 0) != 0;
    failed = failed || (s.backward && run_backward(&s) != 0);
    const int backward_check_failed = !failed && s.backward && s.options.check && run_check(&s, 1) != 0;
    const int check_failed = forward_check_failed || backward_check_failed;
    /* Outputs only after everything succeeded, --check included: exit
     * status 0 means every output was written, any other status that none
     * was (existing files keep their contents). A failed check keeps its
     * report on the terminal but writes no results that failed it. */
    failed = failed || (!check_failed && write_outputs(&s) != 0);
    fflush(stdout);
    free_state(&s);
    return failed || check_failed ? FLASHCL_EXIT_FAILURE : FLASHCL_EXIT_OK;
}
