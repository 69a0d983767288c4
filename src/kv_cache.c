/* kv_cache.c: flashcl_forward_kv_cache(_ex): validate the cache and its lengths (nothing is enqueued on an error),
 * dispatch (the decode kernel, kv_cache set), launch (append first, then the attention). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch.h"
#include "struct_abi.h"
#include "validate.h"

flashcl_status flashcl_kv_cache_init_sized(flashcl_kv_cache *cache, size_t struct_size) {
    return flashcl_struct_init(&flashcl_abi_kv_cache, cache, struct_size);
}

/* The most keys a sequence of the cache may hold. */
static long long cache_keys(const flashcl_kv_cache *c) {
    return c->page_size > 0 ? (long long)c->max_pages * c->page_size : (long long)c->capacity;
}

static flashcl_status check_layout(flashcl_context *ctx, const flashcl_kv_cache *c) {
    if (c->page_size < 0)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "kv cache: page_size %d is negative", c->page_size);
    if (c->page_size == 0 && c->capacity < 1)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "kv cache: capacity %d (contiguous cache) must be >= 1",
                            c->capacity);
    if (c->page_size > 0 && (c->num_pages < 1 || c->max_pages < 1 || !c->block_table))
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                            "kv cache: a paged cache needs num_pages >= 1 (%d), max_pages >= 1 (%d) and a block_table",
                            c->num_pages, c->max_pages);
    if (cache_keys(c) > 0x7fffffffLL)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "kv cache: max_pages x page_size exceeds 2^31 - 1");
    if (!c->cache_seqlens)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "kv cache: cache_seqlens is NULL");
    if ((c->k_new == NULL) != (c->v_new == NULL))
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "kv cache: give both k_new and v_new, or neither");
    return FLASHCL_SUCCESS;
}

/* count int32 values of buffer, checked against its size: *view is the host copy if given, else they are read
 * back (blocking, after the wait list) into *copy, which the caller frees. */
static flashcl_status int_view(flashcl_context *ctx, const char *name, cl_mem buffer, const int32_t *host,
                               size_t count, cl_uint num_events, const cl_event *wait_list, int32_t **copy,
                               const int32_t **view) {
    size_t size = 0;
    cl_int err = clGetMemObjectInfo(buffer, CL_MEM_SIZE, sizeof size, &size, NULL);
    if (err != CL_SUCCESS) return flashcl_fail_cl(ctx, err, "clGetMemObjectInfo (kv cache lengths or block table)");
    if (size < count * sizeof(int32_t))
        return flashcl_fail(ctx, FLASHCL_ERROR_BUFFER_TOO_SMALL, "kv cache: %s holds %zu bytes, the call needs %zu",
                            name, size, count * sizeof(int32_t));
    if (host) {
        *view = host;
        return FLASHCL_SUCCESS;
    }
    *copy = malloc(count * sizeof(int32_t));
    if (!*copy) return flashcl_fail(ctx, FLASHCL_ERROR_OUT_OF_HOST_MEMORY, "kv cache: out of host memory");
    err = clEnqueueReadBuffer(ctx->queue, buffer, CL_TRUE, 0, count * sizeof(int32_t), *copy, num_events, wait_list,
                              NULL);
    if (err != CL_SUCCESS) return flashcl_fail_cl(ctx, err, "clEnqueueReadBuffer (kv cache lengths or block table)");
    *view = *copy;
    return FLASHCL_SUCCESS;
}

/* The first of a sequence's used block-table entries (row[0 .. end)) outside [0, num_pages), or -1. One min/max
 * pass first: every decode call checks every page a sequence uses (8192 entries at 128K keys in 16-row pages),
 * and a branch per entry cost about 2 ns each on the host. */
static long long first_page_outside(const int32_t *row, long long end, int num_pages) {
    int32_t lo = 0, hi = 0;
    for (long long j = 0; j < end; ++j) {
        lo = row[j] < lo ? row[j] : lo;
        hi = row[j] > hi ? row[j] : hi;
    }
    if (lo >= 0 && hi < num_pages) return -1;
    for (long long j = 0; j < end; ++j)
        if (row[j] < 0 || row[j] >= num_pages) return j;
    return -1;
}

/* The block-table entries a sequence of `rows` rows uses. */
static long long pages_used(long long rows, int page_size) { return (rows + page_size - 1) / page_size; }

/* Every sequence's length (plus the new rows) within the cache, its pages in range, and no page an append
 * writes seen by another sequence or twice. */
static flashcl_status check_lengths(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                    const flashcl_kv_cache *c, int append, cl_uint num_events,
                                    const cl_event *wait_list) {
    const size_t batch = (size_t)desc->batch, entries = c->page_size > 0 ? batch * (size_t)c->max_pages : 0;
    int32_t *lens_copy = NULL, *table_copy = NULL;
    const int32_t *lens = NULL, *table = NULL;
    long long *writer = NULL;
    flashcl_status status = int_view(ctx, "cache_seqlens", c->cache_seqlens, c->cache_seqlens_host, batch,
                                     num_events, wait_list, &lens_copy, &lens);
    if (status == FLASHCL_SUCCESS && entries)
        status = int_view(ctx, "block_table", c->block_table, c->block_table_host, entries, num_events, wait_list,
                          &table_copy, &table);
    if (status != FLASHCL_SUCCESS) goto done;
    const long long added = append ? desc->seqlen_q : 0, keys = cache_keys(c);
    for (size_t b = 0; b < batch; ++b) {
        if (lens[b] < 0) {
            status = flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "kv cache: cache_seqlens[%zu] = %d is negative",
                                  b, (int)lens[b]);
            goto done;
        }
        if (lens[b] + added > keys) {
            status = flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                                  "kv cache: sequence %zu: %d cached rows + %lld new exceed the cache's %lld rows%s", b,
                                  (int)lens[b], added, keys,
                                  c->page_size > 0 ? " (max_pages x page_size)" : " (capacity)");
            goto done;
        }
    }
    if (!entries) goto done;
    /* Pages: every entry a sequence uses in range. */
    for (size_t b = 0; b < batch; ++b) {
        const int32_t *row = table + b * (size_t)c->max_pages;
        const long long end = pages_used(lens[b] + added, c->page_size);
        const long long j = first_page_outside(row, end, c->num_pages);
        if (j >= 0) {
            status = flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                                  "kv cache: block_table[%zu][%lld] = %d is outside the %d pages", b, j, (int)row[j],
                                  c->num_pages);
            goto done;
        }
    }
    if (!append) goto done;
    /* The pages an append writes owned by one entry alone. */
    writer = malloc((size_t)c->num_pages * sizeof *writer);
    if (!writer) {
        status = flashcl_fail(ctx, FLASHCL_ERROR_OUT_OF_HOST_MEMORY, "kv cache: out of host memory");
        goto done;
    }
    for (int p = 0; p < c->num_pages; ++p) writer[p] = -1;
    for (size_t b = 0; b < batch; ++b) {
        const int32_t *row = table + b * (size_t)c->max_pages;
        const long long end = pages_used(lens[b] + added, c->page_size);
        for (long long j = lens[b] / c->page_size; j < end; ++j) writer[row[j]] = (long long)b * c->max_pages + j;
    }
    for (size_t b = 0; b < batch; ++b) {
        const int32_t *row = table + b * (size_t)c->max_pages;
        const long long end = pages_used(lens[b] + added, c->page_size);
        for (long long j = 0; j < end; ++j) {
            const int32_t page = row[j];
            const long long entry = (long long)b * c->max_pages + j;
            if (writer[page] >= 0 && writer[page] != entry) {
                status = flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                                      "kv cache: page %d receives new rows of sequence %lld and is also used at "
                                      "block_table[%zu][%lld]: pages an append writes must not be shared",
                                      (int)page, writer[page] / c->max_pages, b, j);
                goto done;
            }
        }
    }
done:
    free(lens_copy);
    free(table_copy);
    free(writer);
    return status;
}

/* Shapes, contexts and sizes of every tensor; no output overlapping another tensor, the length buffers, the
 * ALiBi slopes or the bias. */
static flashcl_status check_tensors(flashcl_context *ctx, const flashcl_attention_desc *d, const flashcl_tensor *q,
                                    const flashcl_kv_cache *c, const flashcl_tensor *o, const flashcl_tensor *lse,
                                    const flashcl_features *f) {
    flashcl_shape q_shape, kv_shape, lse_shape;
    flashcl_attention_shapes(d, &q_shape, &kv_shape, &lse_shape);
    const size_t e = flashcl_dtype_size(d->dtype);
    const int paged = c->page_size > 0, append = c->k_new != NULL;
    const flashcl_shape cache_shape = {paged ? (size_t)c->num_pages : (size_t)d->batch, (size_t)d->heads_kv,
                                       paged ? (size_t)c->page_size : (size_t)c->capacity, (size_t)d->head_dim, e};
    const flashcl_shape new_shape = {(size_t)d->batch, (size_t)d->heads_kv, (size_t)d->seqlen_q, (size_t)d->head_dim,
                                     e};
    enum { Q, K, V, KN, VN, O, LSE, SEQLENS, TABLE, SLOPES, BIAS, COUNT };
    const char *names[COUNT] = {"q", "k cache", "v cache", "k_new", "v_new", "o", "lse", "cache_seqlens",
                                "block_table", "alibi_slopes", "bias"};
    flashcl_extent x[COUNT];
    int present[COUNT] = {1, 1, 1, append, append, 1, lse != NULL, 1, paged, f->alibi_buffer != NULL, f->bias};
    int output[COUNT] = {0, append, append, 0, 0, 1, 1, 0, 0, 0, 0};
    flashcl_status status;
    if ((status = flashcl_validate_tensor(ctx, "q", q, &q_shape, 0, &x[Q])) ||
        (status = flashcl_validate_tensor(ctx, "k cache", &c->k, &cache_shape, append, &x[K])) ||
        (status = flashcl_validate_tensor(ctx, "v cache", &c->v, &cache_shape, append, &x[V])) ||
        (append && (status = flashcl_validate_tensor(ctx, "k_new", c->k_new, &new_shape, 0, &x[KN]))) ||
        (append && (status = flashcl_validate_tensor(ctx, "v_new", c->v_new, &new_shape, 0, &x[VN]))) ||
        (status = flashcl_validate_tensor(ctx, "o", o, &q_shape, 1, &x[O])) ||
        (lse && (status = flashcl_validate_tensor(ctx, "lse", lse, &lse_shape, 1, &x[LSE]))))
        return status;
    flashcl_byte_extent(c->cache_seqlens, 0, (size_t)d->batch * sizeof(int32_t), &x[SEQLENS]);
    if (paged) flashcl_byte_extent(c->block_table, 0, (size_t)d->batch * (size_t)c->max_pages * sizeof(int32_t), &x[TABLE]);
    if (f->alibi_buffer) {
        flashcl_tensor view;
        flashcl_shape shape;
        flashcl_alibi_view(d, f, &view, &shape);
        if ((status = flashcl_validate_tensor(ctx, "alibi_slopes", &view, &shape, 0, &x[SLOPES]))) return status;
        x[SLOPES].elem_size = 0; /* compared by byte span */
    }
    if (f->bias) {
        /* (bias_batch, bias_heads, seqlen_q, the cache's key positions): d->seqlen_k is cache_keys() here, so a
         * plane sized by one sequence's length, or by Sq rows too few, reaches past its buffer. The plain
         * validator's message gives the bytes; this one adds what the last dimension means in a cache call. */
        if ((status = flashcl_validate_tensor(ctx, "bias", &f->bias_view, &f->bias_shape, 0, &x[BIAS]))) {
            char detail[FLASHCL_ERROR_CAPACITY];
            snprintf(detail, sizeof detail, "%s", ctx->error);
            return flashcl_fail(ctx, status,
                                "%s (a KV-cache call's bias is (bias_batch, bias_heads, seqlen_q %d, %d key positions: "
                                "the cache's %s), row i of sequence b holding key position j at column j)",
                                detail, d->seqlen_q, d->seqlen_k, paged ? "max_pages x page_size" : "capacity");
        }
        x[BIAS].elem_size = 0; /* compared by byte span: its zero strides are no output's geometry */
    }
    for (int i = 0; i < COUNT; ++i) {
        if (!present[i] || !output[i]) continue;
        for (int j = 0; j < COUNT; ++j) {
            if (j == i || !present[j]) continue;
            if ((status = flashcl_check_no_overlap(ctx, names[i], &x[i], names[j], &x[j]))) return status;
        }
    }
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_forward_kv_cache(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                        const flashcl_tensor *q, const flashcl_kv_cache *cache,
                                        const flashcl_tensor *o, const flashcl_tensor *lse,
                                        cl_uint num_events_in_wait_list, const cl_event *event_wait_list,
                                        cl_event *event) {
    if (!ctx) return flashcl_fail(NULL, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_forward_kv_cache: ctx is NULL");
    return flashcl_forward_kv_cache_ex(ctx, desc, NULL, q, cache, o, lse, num_events_in_wait_list, event_wait_list,
                                       event);
}

flashcl_status flashcl_forward_kv_cache_ex(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                           const flashcl_attention_extras *extras, const flashcl_tensor *q,
                                           const flashcl_kv_cache *cache, const flashcl_tensor *o,
                                           const flashcl_tensor *lse, cl_uint num_events_in_wait_list,
                                           const cl_event *event_wait_list, cl_event *event) {
    if (!ctx) return flashcl_fail(NULL, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_forward_kv_cache_ex: ctx is NULL");
    flashcl_clear_error(ctx);
    if (!desc || !cache)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_forward_kv_cache: desc or cache is NULL");
    /* This library's full-size copies of the caller's structs (their struct_size checked). */
    flashcl_attention_desc full_desc;
    flashcl_kv_cache full_cache;
    flashcl_attention_extras full_extras;
    flashcl_status status = flashcl_import_desc(ctx, &desc, &full_desc);
    if (status != FLASHCL_SUCCESS) return status;
    if ((status = flashcl_struct_import(ctx, &flashcl_abi_kv_cache, cache, &full_cache))) return status;
    if ((status = flashcl_import_extras(ctx, &extras, &full_extras))) return status;
    /* The cache's sequences are the batch: a packed batch or a block mask has no meaning here. */
    if (extras && (extras->block_mask || extras->cu_seqlens_q || extras->cu_seqlens_k || extras->cu_seqlens_q_host ||
                   extras->cu_seqlens_k_host))
        return flashcl_fail(ctx, FLASHCL_ERROR_UNSUPPORTED,
                            "flashcl_forward_kv_cache_ex takes the score modifiers and the bias only: no %s",
                            extras->block_mask ? "block mask" : "packed batch (cu_seqlens)");
    cache = &full_cache;
    status = check_layout(ctx, cache);
    if (status != FLASHCL_SUCCESS) return status;
    /* The call as the kernels see it: seqlen_k the most keys a sequence may have. */
    flashcl_attention_desc d = *desc;
    d.seqlen_k = (int)cache_keys(cache);
    if ((status = flashcl_validate_desc(ctx, &d))) return status;
    if (d.dropout_p > 0.0f)
        return flashcl_fail(ctx, FLASHCL_ERROR_UNSUPPORTED, "flashcl_forward_kv_cache: no dropout (inference only)");
    flashcl_features features;
    /* With d.seqlen_k the cache's key positions, the bias resolves to (bias_batch, bias_heads, Sq, cache_keys):
     * column j of sequence b is its key position j (cache row j, the new rows at cache_seqlens[b]..), and the
     * kernels read no column at or past the sequence's own key count. */
    if ((status = flashcl_features_resolve(ctx, &d, extras, &features))) return status;
    features.dbias_view.buffer = NULL; /* a forward-only call ignores dbias, as flashcl_forward_ex does */
    features.dbias_direct = 0;
    if ((status = check_tensors(ctx, &d, q, cache, o, lse, &features))) return status;
    if ((status = flashcl_validate_wait_list(ctx, num_events_in_wait_list, event_wait_list))) return status;
    const int append = cache->k_new != NULL;
    if ((status = check_lengths(ctx, &d, cache, append, num_events_in_wait_list, event_wait_list))) return status;
    flashcl_exec_plan plan;
    const flashcl_tensor *const views[] = {q, o};
    if ((status = flashcl_plan_kv_cache_call(ctx, &d, &features, views, 2, &cache->k, &cache->v, cache->page_size > 0,
                                             append, &plan)))
        return status;
    return flashcl_launch_forward(ctx, &plan, &d, &features, q, &cache->k, &cache->v, o, lse, cache,
                                  num_events_in_wait_list, event_wait_list, event);
}
