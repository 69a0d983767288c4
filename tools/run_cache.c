/* run_cache.c: `flashcl run --k-cache ...`: device buffers for the cache files, the flashcl_forward_kv_cache_ex call,
 * the read-back, the check and the outputs (O, LSE and the appended caches, written all or none). */
#include "run_cache.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_util.h"
#include "commands.h"
#include "run_bias.h"
#include "run_cache_check.h"
#include "run_cache_inputs.h"
#include "run_check.h"
#include "run_inputs.h"
#include "run_score_mods.h"

enum { B_Q, B_K, B_V, B_K_NEW, B_V_NEW, B_O, B_LSE, B_LENS, B_TABLE, B_COUNT };

typedef struct cache_run {
    const run_options *o;
    run_cache_inputs in;
    flashcl_context *ctx;
    cl_mem buffers[B_COUNT];
    size_t bytes[B_COUNT];
    void *o_host, *k_after, *v_after; /* read back; the caches only with new rows to check or save */
    float *lse_host;
    run_score_mods mods; /* --softcap, --alibi-slopes ((B, Hq): per sequence), --alibi-max-bias */
    run_bias bias;       /* --bias over the cache's key positions: (B|1, Hq|1, Sq, desc.seqlen_k) */
} cache_run;

static void free_run(cache_run *r) {
    for (int i = 0; i < B_COUNT; ++i)
        if (r->buffers[i]) clReleaseMemObject(r->buffers[i]);
    free(r->o_host), free(r->lse_host), free(r->k_after), free(r->v_after);
    run_bias_free(&r->bias); /* its buffer before the context that made it */
    flashcl_context_free(r->ctx);
    run_score_mods_free(&r->mods);
    run_cache_free(&r->in);
}

static int create_context(cache_run *r) {
    flashcl_context_options options;
    flashcl_context_options_init(&options);
    options.device = r->o->device;
    options.kernel_dir = r->o->kernel_dir;
    const flashcl_status status = flashcl_context_create(&r->ctx, &options);
    if (status != FLASHCL_SUCCESS) cli_report_library_error("run", "creating the context", NULL, status);
    return status == FLASHCL_SUCCESS ? 0 : -1;
}

static void print_problem(const cache_run *r) {
    const run_cache_inputs *in = &r->in;
    const flashcl_attention_desc *d = &in->desc;
    char device[600];
    cli_describe_device(flashcl_context_device(r->ctx), device, sizeof device);
    printf("device: %s\n", device);
    printf("problem: batch %d, heads %d/%d (q/kv), %d query rows per sequence, head_dim %d, %s, %s, %s, scale %g\n",
           d->batch, d->heads_q, d->heads_kv, d->seqlen_q, d->head_dim, run_dtype_name(d->dtype),
           in->layout == FLASHCL_LAYOUT_BSHD ? "bshd" : "bhsd", d->causal ? "causal" : "not causal",
           d->scale != 0.0f ? (double)d->scale : 1.0 / sqrt((double)d->head_dim));
    if (d->sliding_window) printf("window: %d,%d\n", d->window_left, d->window_right);
    char mods[512];
    run_score_mods_describe(r->o, &r->mods, mods, sizeof mods);
    if (mods[0]) printf("score modifiers: %s\n", mods);
    if (r->o->bias_path)
        printf("bias: %s, %s (%d, %d, %d, %d): column j is key position j of the cache\n", r->o->bias_path,
               run_dtype_name(r->bias.dtype), r->bias.batch, r->bias.heads, d->seqlen_q, d->seqlen_k);
    if (in->paged)
        printf("kv cache: paged, %d pages of %d rows, %d pages per sequence\n", in->num_pages, in->page_size,
               in->max_pages);
    else
        printf("kv cache: contiguous, %d rows per sequence\n", in->capacity);
    printf("cache_seqlens:");
    for (int b = 0; b < d->batch && b < 16; ++b) printf(" %d", (int)in->lens[b]);
    printf("%s", d->batch > 16 ? " ..." : "");
    if (in->append)
        printf(" (+%d new rows each, appended first%s)\n", d->seqlen_q,
               r->o->k_cache_out_path ? "" : "; not saved: no --k-cache-out/--v-cache-out");
    else
        printf(" (no new rows)\n");
}

/* One buffer: a copy of data, or with data NULL filled with 0xff bytes
 * (NaN in every dtype) so an element the kernel never writes cannot pass
 * --check. */
static int create_buffer(cache_run *r, int which, const char *name, size_t bytes, const void *data, void **host) {
    void *fill = NULL;
    if (!data) {
        fill = malloc(bytes);
        if (!fill) {
            fprintf(stderr, "flashcl run: out of host memory (%zu bytes for %s)\n", bytes, name);
            return -1;
        }
        memset(fill, 0xff, bytes);
        *host = fill;
    }
    cl_int err = CL_SUCCESS;
    /* The caches are read and, with new rows, written by the call; the other inputs only read. */
    const int written = !data || which == B_K || which == B_V;
    const cl_mem_flags flags = (written ? CL_MEM_READ_WRITE : CL_MEM_READ_ONLY) | CL_MEM_COPY_HOST_PTR;
    r->buffers[which] =
        clCreateBuffer(flashcl_context_cl_context(r->ctx), flags, bytes, (void *)(data ? data : fill), &err);
    r->bytes[which] = bytes;
    if (err != CL_SUCCESS) {
        r->buffers[which] = NULL;
        fprintf(stderr, "flashcl run: clCreateBuffer for %s (%zu bytes) failed with OpenCL error %d\n", name, bytes,
                (int)err);
        return -1;
    }
    return 0;
}

static int create_buffers(cache_run *r) {
    const run_cache_inputs *in = &r->in;
    const flashcl_attention_desc *d = &in->desc;
    const size_t e = flashcl_dtype_size(d->dtype);
    const size_t q_bytes = in->q.count * e, cache_bytes = in->k_cache.count * e, new_bytes = in->k_new.count * e;
    const size_t lse_bytes = (size_t)d->batch * (size_t)d->heads_q * (size_t)d->seqlen_q * sizeof(float);
    void *unused = NULL;
    return create_buffer(r, B_Q, "Q", q_bytes, in->q.data, &unused) ||
                   create_buffer(r, B_K, "the K cache", cache_bytes, in->k_cache.data, &unused) ||
                   create_buffer(r, B_V, "the V cache", cache_bytes, in->v_cache.data, &unused) ||
                   (in->append && create_buffer(r, B_K_NEW, "K new", new_bytes, in->k_new.data, &unused)) ||
                   (in->append && create_buffer(r, B_V_NEW, "V new", new_bytes, in->v_new.data, &unused)) ||
                   create_buffer(r, B_O, "O", q_bytes, NULL, &r->o_host) ||
                   create_buffer(r, B_LSE, "LSE", lse_bytes, NULL, (void **)&r->lse_host) ||
                   create_buffer(r, B_LENS, "cache_seqlens", in->seqlens.count * sizeof(int32_t), in->lens, &unused) ||
                   (in->paged &&
                    create_buffer(r, B_TABLE, "the block table", in->table.count * sizeof(int32_t), in->block_table,
                                  &unused))
               ? -1
               : 0;
}

static int read_back(cache_run *r, int which, const char *name, void *host) {
    const cl_int err = clEnqueueReadBuffer(flashcl_context_queue(r->ctx), r->buffers[which], CL_TRUE, 0,
                                           r->bytes[which], host, 0, NULL, NULL);
    if (err != CL_SUCCESS)
        fprintf(stderr, "flashcl run: reading %s back failed with OpenCL error %d\n", name, (int)err);
    return err == CL_SUCCESS ? 0 : -1;
}

static void print_call(const cache_run *r) {
    flashcl_call_stats stats;
    if (flashcl_last_call_stats(r->ctx, &stats) != FLASHCL_SUCCESS) return;
    char plan[160];
    cli_format_plan(&stats.plan, plan, sizeof plan);
    printf("forward: kv cache, kernel %s, %s, kv splits %d\n", flashcl_kernel_kind_name(stats.kernel), plan,
           stats.kv_splits);
}

static int run_call(cache_run *r) {
    const run_cache_inputs *in = &r->in;
    const flashcl_attention_desc *d = &in->desc;
    const int hq = d->heads_q, hkv = d->heads_kv, sq = d->seqlen_q, dim = d->head_dim;
    const flashcl_tensor q = flashcl_tensor_contiguous(r->buffers[B_Q], in->layout, hq, sq, dim);
    const flashcl_tensor o = flashcl_tensor_contiguous(r->buffers[B_O], in->layout, hq, sq, dim);
    const flashcl_tensor lse = flashcl_tensor_lse(r->buffers[B_LSE], hq, sq);
    const flashcl_tensor k_new = flashcl_tensor_contiguous(r->buffers[B_K_NEW], in->layout, hkv, sq, dim);
    const flashcl_tensor v_new = flashcl_tensor_contiguous(r->buffers[B_V_NEW], in->layout, hkv, sq, dim);
    /* A cache file is (sequences or pages, rows of each, Hkv, D): the bshd view of its rows. */
    const int rows = in->paged ? in->page_size : in->capacity;
    flashcl_kv_cache cache;
    flashcl_kv_cache_init(&cache);
    cache.k = flashcl_tensor_contiguous(r->buffers[B_K], FLASHCL_LAYOUT_BSHD, hkv, rows, dim);
    cache.v = flashcl_tensor_contiguous(r->buffers[B_V], FLASHCL_LAYOUT_BSHD, hkv, rows, dim);
    cache.capacity = in->capacity;
    cache.page_size = in->paged ? in->page_size : 0;
    cache.num_pages = in->num_pages;
    cache.max_pages = in->max_pages;
    cache.block_table = r->buffers[B_TABLE];
    /* The buffers were made from these arrays: the call validates them without a blocking read-back. */
    cache.block_table_host = in->block_table;
    cache.cache_seqlens = r->buffers[B_LENS];
    cache.cache_seqlens_host = in->lens;
    cache.k_new = in->append ? &k_new : NULL;
    cache.v_new = in->append ? &v_new : NULL;
    flashcl_attention_extras extras;
    flashcl_attention_extras_init(&extras);
    run_score_mods_extras(&r->mods, &extras);
    if (run_bias_buffers(&r->bias, flashcl_context_cl_context(r->ctx), d, 0, &extras) != 0) return -1;
    const flashcl_status status =
        flashcl_forward_kv_cache_ex(r->ctx, d, &extras, &q, &cache, &o, &lse, 0, NULL, NULL);
    if (status != FLASHCL_SUCCESS) {
        cli_report_library_error("run", "forward (kv cache)", r->ctx, status);
        return -1;
    }
    if (read_back(r, B_O, "O", r->o_host) || read_back(r, B_LSE, "LSE", r->lse_host)) return -1;
    /* The appended caches, when they are checked or saved. */
    if (in->append && (r->o->check || r->o->k_cache_out_path)) {
        r->k_after = malloc(r->bytes[B_K]);
        r->v_after = malloc(r->bytes[B_V]);
        if (!r->k_after || !r->v_after) {
            fprintf(stderr, "flashcl run: out of host memory (%zu bytes for the caches)\n", 2 * r->bytes[B_K]);
            return -1;
        }
        if (read_back(r, B_K, "the K cache", r->k_after) || read_back(r, B_V, "the V cache", r->v_after)) return -1;
    }
    check_note_nonfinite("O", r->o_host, d->dtype, in->q.count);
    check_note_nonfinite("LSE", r->lse_host, FLASHCL_DTYPE_F32, (size_t)d->batch * (size_t)hq * (size_t)sq);
    print_call(r);
    return 0;
}

/* O, LSE and the appended caches, all or none (run_files_write). */
static int write_outputs(cache_run *r, run_files *files) {
    const run_cache_inputs *in = &r->in;
    const flashcl_attention_desc *d = &in->desc;
    const size_t lse_shape[3] = {(size_t)d->batch, (size_t)d->heads_q, (size_t)d->seqlen_q};
    run_files_set(files, "--out", in->q.dtype, in->q.rank, in->q.shape, r->o_host);
    run_files_set(files, "--lse", NPY_DTYPE_F32, 3, lse_shape, r->lse_host);
    if (r->k_after) {
        run_files_set(files, "--k-cache-out", in->k_cache.dtype, in->k_cache.rank, in->k_cache.shape, r->k_after);
        run_files_set(files, "--v-cache-out", in->v_cache.dtype, in->v_cache.rank, in->v_cache.shape, r->v_after);
    }
    return run_files_write(files);
}

int run_cache_command(const run_options *options, run_files *files) {
    cache_run r;
    memset(&r, 0, sizeof r);
    r.o = options;
    /* Files first: a bad file is reported before any OpenCL start-up cost. */
    if (run_cache_load(options, &r.in) != 0) return FLASHCL_EXIT_FAILURE;
    /* desc.seqlen_k is the cache's key positions (S_max, or max_pages x page_size): the bias's last dimension. */
    if (run_score_mods_load(options, r.in.desc.batch, r.in.desc.heads_q, &r.mods) != 0 ||
        run_bias_load(options, &r.in.desc,
                      r.in.paged ? ": a KV-cache run's bias covers the cache's key positions, max_pages x page_size"
                                 : ": a KV-cache run's bias covers the cache's key positions, S_max of the cache files",
                      &r.bias) != 0) {
        free_run(&r);
        return FLASHCL_EXIT_FAILURE;
    }
    int failed = create_context(&r) != 0;
    if (!failed) print_problem(&r);
    failed = failed || create_buffers(&r) != 0 || run_call(&r) != 0;
    if (!failed && options->check) {
        const run_cache_results results = {r.o_host, r.lse_host, r.k_after, r.v_after};
        failed = run_cache_check(options, &r.in, &r.mods, &r.bias, &results) != 0;
    }
    /* Outputs only after everything succeeded, --check included, so that a
     * failure leaves every file, an in-place cache included, as it was. */
    failed = failed || write_outputs(&r, files) != 0;
    fflush(stdout);
    free_run(&r);
    return failed ? FLASHCL_EXIT_FAILURE : FLASHCL_EXIT_OK;
}
