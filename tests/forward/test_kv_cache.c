/* test_kv_cache.c: flashcl_forward_kv_cache against the double reference, one sequence at a time: contiguous and
 * paged caches (pages out of order, pages shared between sequences for reading), per-sequence lengths (0 and at
 * capacity), appending new rows (they land where they should, nothing else in the cache changes), Sq > 1 causal
 * (bottom-right per sequence), GQA groups 1, 4 and 8, every storage type, forced split counts; an additive bias over
 * the cache's key positions (full at an offset with padded rows, and broadcast (1, 1)), each sequence checked with
 * its own columns 0..len-1 and every other column NaN (never read), -inf rows, with soft-capping and ALiBi, on both
 * decode kernels; and bad input: a clear error and nothing written. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "half_float.h"
#include "test_support.h"

typedef struct kv_case {
    const char *name;
    int batch, heads_q, heads_kv, seqlen_q, head_dim, causal;
    flashcl_dtype dtype;
    int page_size;      /* 0: contiguous */
    int capacity;       /* contiguous rows per sequence, or pages per sequence (max_pages) */
    int num_pages;      /* paged */
    int lens[4];        /* cache_seqlens */
    int append;         /* new rows (seqlen_q of them) */
    int shared_prefix;  /* paged: sequences 0 and 1 share their first this many pages (read only) */
    int window_left;    /* >= 0: a sliding window of this many keys to the left */
} kv_case;

/* The host model of one call: every array as floats rounded to the storage type, caches in their own layout. */
typedef struct kv_host {
    size_t q_count, cache_count, new_count;
    float *q, *k_cache, *v_cache, *k_new, *v_new;
    int32_t *table, *lens;
    size_t cache_rows; /* rows of one head's view: B x capacity or num_pages x page_size */
} kv_host;

/* An additive bias for a case (flashcl_attention_extras' bias over the cache's key positions), with the score
 * modifiers beside it. */
typedef struct kv_bias {
    int batch, heads;     /* 1 (broadcast) or the case's batch / heads_q */
    flashcl_dtype dtype;  /* float32 or the case's storage type */
    int padded;           /* 1: 5 elements into its buffer, 3 unused elements after each row, 2 after each head and
                           * 1 after each batch element (NaN there: never read); 0: contiguous */
    float softcap, alibi_max_bias;
    int dbias;            /* 1: extras.dbias set too, to a poisoned buffer this forward-only call must leave alone */
} kv_bias;

/* What check_outputs needs of a bias run: the plane as the device holds it, as floats (bias_batch, bias_heads, Sq,
 * keys), and the modifiers; NULL: none. */
typedef struct kv_bias_host {
    const float *values;
    int batch, heads, keys;
    double softcap;
    const float *slopes; /* heads_q, or NULL */
} kv_bias_host;

static size_t elem_size(flashcl_dtype dtype) { return dtype == FLASHCL_DTYPE_F32 ? 4 : 2; }

/* The bits of x as dtype's storage, written at out (elem_size bytes). */
static void store_element(float x, flashcl_dtype dtype, unsigned char *out) {
    if (dtype == FLASHCL_DTYPE_F32) {
        memcpy(out, &x, 4);
    } else {
        const uint16_t bits = dtype == FLASHCL_DTYPE_F16 ? float_to_half(x) : float_to_bf16(x);
        memcpy(out, &bits, 2);
    }
}

static float load_element(const unsigned char *in, flashcl_dtype dtype) {
    if (dtype == FLASHCL_DTYPE_F32) {
        float x;
        memcpy(&x, in, 4);
        return x;
    }
    uint16_t bits;
    memcpy(&bits, in, 2);
    return dtype == FLASHCL_DTYPE_F16 ? half_to_float(bits) : bf16_to_float(bits);
}

static cl_mem upload(cl_context context, cl_command_queue queue, const float *x, size_t n, flashcl_dtype dtype) {
    const size_t e = elem_size(dtype);
    unsigned char *bytes = malloc(n * e);
    for (size_t i = 0; i < n; ++i) store_element(x[i], dtype, bytes + i * e);
    cl_int err;
    cl_mem m = clCreateBuffer(context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, n * e, bytes, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    (void)queue;
    free(bytes);
    return m;
}

static void download(cl_command_queue queue, cl_mem m, float *x, size_t n, flashcl_dtype dtype) {
    const size_t e = elem_size(dtype);
    unsigned char *bytes = malloc(n * e);
    ck_assert_int_eq(clEnqueueReadBuffer(queue, m, CL_TRUE, 0, n * e, bytes, 0, NULL, NULL), CL_SUCCESS);
    for (size_t i = 0; i < n; ++i) x[i] = load_element(bytes + i * e, dtype);
    free(bytes);
}

static cl_mem int_buffer(cl_context context, const int32_t *x, size_t n) {
    cl_int err;
    cl_mem m = clCreateBuffer(context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, n * sizeof *x, (void *)x, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    return m;
}

/* Row `row` of sequence b in a cache of c's layout: its index among cache_rows. */
static size_t cache_row(const kv_case *c, const kv_host *h, int b, int row) {
    if (c->page_size == 0) return (size_t)b * (size_t)c->capacity + (size_t)row;
    const int page = h->table[b * c->capacity + row / c->page_size];
    return (size_t)page * (size_t)c->page_size + (size_t)(row % c->page_size);
}

static void host_create(const kv_case *c, uint64_t seed, kv_host *h) {
    memset(h, 0, sizeof *h);
    ts_rng rng = {seed};
    const size_t d = (size_t)c->head_dim, hkv = (size_t)c->heads_kv;
    h->cache_rows = c->page_size ? (size_t)c->num_pages * (size_t)c->page_size : (size_t)c->batch * (size_t)c->capacity;
    h->q_count = (size_t)c->batch * (size_t)c->seqlen_q * (size_t)c->heads_q * d;
    h->cache_count = h->cache_rows * hkv * d;
    h->new_count = (size_t)c->batch * (size_t)c->seqlen_q * hkv * d;
    float *arrays[5];
    const size_t counts[5] = {h->q_count, h->cache_count, h->cache_count, h->new_count, h->new_count};
    for (int i = 0; i < 5; ++i) {
        arrays[i] = malloc(counts[i] * sizeof(float));
        ts_fill_uniform(&rng, arrays[i], counts[i], -1.0f, 1.0f);
        for (size_t j = 0; j < counts[i]; ++j) arrays[i][j] = ts_round_to_dtype(arrays[i][j], c->dtype);
    }
    h->q = arrays[0], h->k_cache = arrays[1], h->v_cache = arrays[2], h->k_new = arrays[3], h->v_new = arrays[4];
    h->lens = malloc((size_t)c->batch * sizeof *h->lens);
    for (int b = 0; b < c->batch; ++b) h->lens[b] = c->lens[b];
    if (c->page_size) {
        /* Pages handed out in a shuffled order; sequence 1 starts with sequence 0's first shared_prefix pages. */
        const size_t entries = (size_t)c->batch * (size_t)c->capacity;
        h->table = malloc(entries * sizeof *h->table);
        int *order = malloc((size_t)c->num_pages * sizeof *order);
        for (int p = 0; p < c->num_pages; ++p) order[p] = p;
        for (int p = c->num_pages - 1; p > 0; --p) {
            const int j = (int)ts_uniform(&rng, 0, p + 1) % (p + 1), t = order[p];
            order[p] = order[j], order[j] = t;
        }
        int next = 0;
        for (int b = 0; b < c->batch; ++b)
            for (int j = 0; j < c->capacity; ++j) {
                if (b == 1 && j < c->shared_prefix) h->table[b * c->capacity + j] = h->table[j];
                else h->table[b * c->capacity + j] = order[next++ % c->num_pages];
            }
        free(order);
    }
}

static void host_free(kv_host *h) {
    free(h->q), free(h->k_cache), free(h->v_cache), free(h->k_new), free(h->v_new), free(h->table), free(h->lens);
}

/* The caches after the call as the model says: new rows of sequence b at rows lens[b] .. + seqlen_q - 1. */
static void model_append(const kv_case *c, kv_host *h) {
    const size_t d = (size_t)c->head_dim, hkv = (size_t)c->heads_kv;
    for (int b = 0; b < c->batch; ++b)
        for (int i = 0; i < c->seqlen_q; ++i) {
            const size_t row = cache_row(c, h, b, h->lens[b] + i);
            for (size_t hh = 0; hh < hkv; ++hh)
                for (size_t x = 0; x < d; ++x) {
                    const size_t src = (((size_t)b * (size_t)c->seqlen_q + (size_t)i) * hkv + hh) * d + x;
                    h->k_cache[(row * hkv + hh) * d + x] = h->k_new[src];
                    h->v_cache[(row * hkv + hh) * d + x] = h->v_new[src];
                }
        }
}

/* Checks O and LSE of every sequence against the reference on its own keys (and with a bias, its own columns
 * 0..keys-1 of the plane of its batch element). */
static void check_outputs(const kv_case *c, const kv_host *h, const float *o, const float *lse, const char *label,
                          const kv_bias_host *bias) {
    const size_t d = (size_t)c->head_dim, hq = (size_t)c->heads_q, hkv = (size_t)c->heads_kv, sq = (size_t)c->seqlen_q;
    for (int b = 0; b < c->batch; ++b) {
        const int keys = h->lens[b] + (c->append ? c->seqlen_q : 0);
        float *qb = malloc(hq * sq * d * sizeof(float)), *ob = malloc(hq * sq * d * sizeof(float));
        float *lb = malloc(hq * sq * sizeof(float));
        for (size_t hh = 0; hh < hq; ++hh)
            for (size_t i = 0; i < sq; ++i)
                for (size_t x = 0; x < d; ++x) {
                    const size_t bshd = (((size_t)b * sq + i) * hq + hh) * d + x;
                    qb[(hh * sq + i) * d + x] = h->q[bshd];
                    ob[(hh * sq + i) * d + x] = o[bshd];
                }
        for (size_t hh = 0; hh < hq; ++hh)
            for (size_t i = 0; i < sq; ++i) lb[hh * sq + i] = lse[((size_t)b * hq + hh) * sq + i];
        if (keys == 0) { /* nothing to attend to: every row empty */
            for (size_t i = 0; i < hq * sq; ++i) ck_assert_msg(lb[i] == -INFINITY, "%s: b %d empty LSE %g", label, b, lb[i]);
            for (size_t i = 0; i < hq * sq * d; ++i) ck_assert_msg(ob[i] == 0.0f, "%s: b %d empty O", label, b);
            free(qb), free(ob), free(lb);
            continue;
        }
        float *kb = malloc(hkv * (size_t)keys * d * sizeof(float)), *vb = malloc(hkv * (size_t)keys * d * sizeof(float));
        for (size_t hh = 0; hh < hkv; ++hh)
            for (int j = 0; j < keys; ++j) {
                const size_t row = cache_row(c, h, b, j);
                for (size_t x = 0; x < d; ++x) {
                    kb[(hh * (size_t)keys + (size_t)j) * d + x] = h->k_cache[(row * hkv + hh) * d + x];
                    vb[(hh * (size_t)keys + (size_t)j) * d + x] = h->v_cache[(row * hkv + hh) * d + x];
                }
            }
        flashcl_attention_desc desc;
        flashcl_attention_desc_init(&desc, 1, c->heads_q, c->seqlen_q, keys, c->head_dim);
        desc.heads_kv = c->heads_kv;
        desc.causal = c->causal;
        desc.dtype = c->dtype;
        if (c->window_left >= 0) {
            desc.sliding_window = 1;
            desc.window_left = c->window_left;
            desc.window_right = -1;
        }
        const size_t n = hq * sq * d;
        double *o_ref = malloc(n * sizeof(double)), *o_low = malloc(n * sizeof(double));
        double *l_ref = malloc(hq * sq * sizeof(double)), *l_low = malloc(hq * sq * sizeof(double));
        flashcl_reference_extras mods = {.mask = NULL};
        float *slice = NULL;
        if (bias) {
            /* The sequence's own plane, columns 0..keys-1: key position j of the sequence is column j. */
            const size_t bh = (size_t)bias->heads, from_b = bias->batch == 1 ? 0 : (size_t)b;
            slice = malloc(bh * sq * (size_t)keys * sizeof *slice);
            ck_assert_ptr_nonnull(slice);
            for (size_t hh = 0; hh < bh; ++hh)
                for (size_t i = 0; i < sq; ++i)
                    memcpy(slice + (hh * sq + i) * (size_t)keys,
                           bias->values + ((from_b * bh + hh) * sq + i) * (size_t)bias->keys,
                           (size_t)keys * sizeof *slice);
            mods.bias = slice;
            mods.bias_batch = 1;
            mods.bias_heads = bias->heads;
            mods.softcap = bias->softcap;
            mods.alibi_slopes = bias->slopes;
        }
        ck_assert(flashcl_reference_forward_ex(&desc, FLASHCL_REF_DOUBLE, &mods, qb, kb, vb, o_ref, l_ref) == 0);
        ck_assert(flashcl_reference_forward_ex(&desc, FLASHCL_REF_FLOAT, &mods, qb, kb, vb, o_low, l_low) == 0);
        free(slice);
        if (c->dtype != FLASHCL_DTYPE_F32)
            for (size_t i = 0; i < n; ++i) o_low[i] = ts_round_to_dtype((float)o_ref[i], c->dtype);
        ts_error e;
        ck_assert_msg(ts_compare(ob, o_ref, o_low, n, 2.0, &e), "%s: sequence %d: O error %g at %zu (bound %g)", label,
                      b, e.max_err, e.worst, e.bound);
        ck_assert_msg(ts_compare(lb, l_ref, l_low, hq * sq, 2.0, &e), "%s: sequence %d: LSE error %g (bound %g)",
                      label, b, e.max_err, e.bound);
        free(kb), free(vb), free(qb), free(ob), free(lb), free(o_ref), free(o_low), free(l_ref), free(l_low);
    }
}

/* The keys sequence b attends to: its cached rows, plus the new ones. */
static int attended(const kv_case *c, const kv_host *h, int b) { return h->lens[b] + (c->append ? c->seqlen_q : 0); }

/* x's bias values, (batch, heads, Sq, keys) floats over the cache's `keys` key positions: uniform in [-3, 3)
 * rounded to its dtype, every 13th pair -inf, one row hidden whole (the last position of the last head of the last
 * sequence; broadcast over the batch, position 0: every sequence's), one hidden over the first half of its keys (a
 * whole key chunk when split), and NaN in every column at or past the keys the row's sequence has (broadcast over
 * the batch: the longest's), which no kernel may read. */
static float *make_bias(const kv_case *c, const kv_host *h, const kv_bias *x, uint64_t seed, int keys) {
    const size_t sq = (size_t)c->seqlen_q, bh = (size_t)x->heads, row_count = (size_t)x->batch * bh * sq;
    const size_t n = row_count * (size_t)keys;
    ts_rng rng = {seed};
    float *v = malloc(n * sizeof *v);
    ck_assert_ptr_nonnull(v);
    ts_fill_uniform(&rng, v, n, -3.0f, 3.0f);
    for (size_t i = 0; i < n; ++i) v[i] = ts_round_to_dtype(v[i], x->dtype);
    for (size_t i = 7; i < n; i += 13) v[i] = -INFINITY;
    int longest = 0;
    for (int b = 0; b < c->batch; ++b) longest = attended(c, h, b) > longest ? attended(c, h, b) : longest;
    /* (b, head, i) -> its row */
#define BIAS_ROW(b, hh, i) (v + (((size_t)(b) * bh + (size_t)(hh)) * sq + (size_t)(i)) * (size_t)keys)
    const int last = x->batch - 1, own_last = x->batch == 1 ? longest : attended(c, h, last);
    const int own_first = x->batch == 1 ? longest : attended(c, h, 0);
    for (int j = 0; j < own_last; ++j) BIAS_ROW(last, bh - 1, x->batch == 1 ? 0 : sq - 1)[j] = -INFINITY;
    for (int j = 0; j < own_first / 2; ++j) BIAS_ROW(0, 0, sq - 1)[j] = -INFINITY;
    for (int b = 0; b < x->batch; ++b) {
        const int own = x->batch == 1 ? longest : attended(c, h, b);
        for (size_t hh = 0; hh < bh; ++hh)
            for (size_t i = 0; i < sq; ++i)
                for (int j = own; j < keys; ++j) BIAS_ROW(b, hh, i)[j] = NAN;
    }
#undef BIAS_ROW
    return v;
}

/* The bias on the device as x places it (contiguous or padded, NaN in the padding), its view in *view. */
static cl_mem upload_bias(cl_context context, const kv_case *c, const kv_bias *x, const float *values, int keys,
                          flashcl_tensor *view) {
    const size_t pad = x->padded ? 1 : 0, sq = (size_t)c->seqlen_q, bh = (size_t)x->heads;
    const size_t stride_s = (size_t)keys + 3 * pad, stride_h = sq * stride_s + 2 * pad, stride_b = bh * stride_h + pad;
    const size_t offset = 5 * pad, total = offset + (size_t)x->batch * stride_b, e = elem_size(x->dtype);
    unsigned char *bytes = malloc(total * e);
    ck_assert_ptr_nonnull(bytes);
    for (size_t i = 0; i < total; ++i) store_element(NAN, x->dtype, bytes + i * e);
    for (size_t b = 0; b < (size_t)x->batch; ++b)
        for (size_t hh = 0; hh < bh; ++hh)
            for (size_t i = 0; i < sq; ++i)
                for (size_t j = 0; j < (size_t)keys; ++j)
                    store_element(values[((b * bh + hh) * sq + i) * (size_t)keys + j], x->dtype,
                                  bytes + (offset + b * stride_b + hh * stride_h + i * stride_s + j) * e);
    cl_int err;
    cl_mem m = clCreateBuffer(context, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, total * e, bytes, &err);
    ck_assert_int_eq(err, CL_SUCCESS);
    free(bytes);
    *view = (flashcl_tensor){m, offset, x->batch == 1 ? 0 : stride_b, x->heads == 1 ? 0 : stride_h, stride_s};
    return m;
}

/* Runs c with the given split count and tensor-core mode (and bias: NULL for none); checks outputs and, with an
 * append, the whole caches. With tensor cores emulated, 16-bit d64/d128 caches must run the matrix-unit decode
 * kernel. */
static void run_case_with(const kv_case *c, int splits, uint64_t seed, flashcl_tensor_cores mode,
                          const kv_bias *bias) {
    kv_host h;
    host_create(c, seed, &h);
    flashcl_context *ctx = ts_context();
    ck_assert_int_eq(flashcl_context_set_kv_splits(ctx, splits), FLASHCL_SUCCESS);
    ck_assert_int_eq(flashcl_context_set_tensor_cores(ctx, mode), FLASHCL_SUCCESS);
    cl_context context = flashcl_context_cl_context(ctx);
    cl_command_queue queue = flashcl_context_queue(ctx);
    const int hq = c->heads_q, hkv = c->heads_kv, d = c->head_dim, sq = c->seqlen_q;
    cl_mem q = upload(context, queue, h.q, h.q_count, c->dtype);
    cl_mem kc = upload(context, queue, h.k_cache, h.cache_count, c->dtype);
    cl_mem vc = upload(context, queue, h.v_cache, h.cache_count, c->dtype);
    cl_mem kn = upload(context, queue, h.k_new, h.new_count, c->dtype);
    cl_mem vn = upload(context, queue, h.v_new, h.new_count, c->dtype);
    cl_int err;
    cl_mem o = clCreateBuffer(context, CL_MEM_READ_WRITE, h.q_count * elem_size(c->dtype), NULL, &err);
    cl_mem lse = clCreateBuffer(context, CL_MEM_READ_WRITE, (size_t)c->batch * (size_t)hq * (size_t)sq * 4, NULL, &err);
    cl_mem lens = int_buffer(context, h.lens, (size_t)c->batch);
    cl_mem table = c->page_size ? int_buffer(context, h.table, (size_t)c->batch * (size_t)c->capacity) : NULL;

    flashcl_attention_desc desc;
    flashcl_attention_desc_init(&desc, c->batch, hq, sq, 1, d);
    desc.heads_kv = hkv;
    desc.causal = c->causal;
    desc.dtype = c->dtype;
    if (c->window_left >= 0) {
        desc.sliding_window = 1;
        desc.window_left = c->window_left;
        desc.window_right = -1;
    }
    const flashcl_tensor tq = flashcl_tensor_contiguous(q, FLASHCL_LAYOUT_BSHD, hq, sq, d);
    const flashcl_tensor to = flashcl_tensor_contiguous(o, FLASHCL_LAYOUT_BSHD, hq, sq, d);
    const flashcl_tensor tl = flashcl_tensor_lse(lse, hq, sq);
    const flashcl_tensor tkn = flashcl_tensor_contiguous(kn, FLASHCL_LAYOUT_BSHD, hkv, sq, d);
    const flashcl_tensor tvn = flashcl_tensor_contiguous(vn, FLASHCL_LAYOUT_BSHD, hkv, sq, d);
    flashcl_kv_cache cache;
    flashcl_kv_cache_init(&cache);
    const int rows = c->page_size ? c->page_size : c->capacity;
    cache.k = flashcl_tensor_contiguous(kc, FLASHCL_LAYOUT_BSHD, hkv, rows, d);
    cache.v = flashcl_tensor_contiguous(vc, FLASHCL_LAYOUT_BSHD, hkv, rows, d);
    cache.capacity = c->page_size ? 0 : c->capacity;
    cache.page_size = c->page_size;
    cache.num_pages = c->num_pages;
    cache.block_table = table;
    cache.max_pages = c->page_size ? c->capacity : 0;
    cache.cache_seqlens = lens;
    if (c->append) {
        cache.k_new = &tkn;
        cache.v_new = &tvn;
    }
    /* The bias, over the cache's key positions (max_pages x page_size when paged), and the modifiers beside it. */
    const int cache_keys = c->page_size ? c->capacity * c->page_size : c->capacity;
    flashcl_attention_extras ex;
    flashcl_attention_extras_init(&ex);
    float *bias_values = NULL, slopes[16];
    cl_mem bias_buffer = NULL, dbias_buffer = NULL;
    kv_bias_host bias_host = {NULL, 0, 0, 0, 0.0, NULL};
    if (bias) {
        bias_values = make_bias(c, &h, bias, seed ^ 0xb1a5u, cache_keys);
        bias_buffer = upload_bias(context, c, bias, bias_values, cache_keys, &ex.bias);
        ex.bias_batch = bias->batch;
        ex.bias_heads = bias->heads;
        ex.bias_dtype = bias->dtype;
        ex.softcap = bias->softcap;
        ex.alibi_max_bias = bias->alibi_max_bias;
        ck_assert_int_le(hq, 16);
        if (bias->alibi_max_bias > 0.0f) flashcl_reference_alibi_slopes(hq, bias->alibi_max_bias, slopes);
        bias_host = (kv_bias_host){bias_values, bias->batch, bias->heads, cache_keys, bias->softcap,
                                   bias->alibi_max_bias > 0.0f ? slopes : NULL};
        if (bias->dbias) {
            /* The bias's own layout, 7.0 everywhere: the KV-cache call is a forward pass and writes no dBias. */
            size_t bytes = 0;
            ck_assert_int_eq(clGetMemObjectInfo(bias_buffer, CL_MEM_SIZE, sizeof bytes, &bytes, NULL), CL_SUCCESS);
            float *sevens = malloc(bytes);
            for (size_t i = 0; i < bytes / sizeof(float); ++i) sevens[i] = 7.0f;
            dbias_buffer = upload(context, queue, sevens, bytes / sizeof(float), FLASHCL_DTYPE_F32);
            free(sevens);
            ex.dbias = ex.bias;
            ex.dbias.buffer = dbias_buffer;
        }
    }
    const flashcl_status status =
        bias ? flashcl_forward_kv_cache_ex(ctx, &desc, &ex, &tq, &cache, &to, &tl, 0, NULL, NULL)
             : flashcl_forward_kv_cache(ctx, &desc, &tq, &cache, &to, &tl, 0, NULL, NULL);
    ck_assert_msg(status == FLASHCL_SUCCESS, "%s: %s", c->name, flashcl_last_error(ctx));
    flashcl_call_stats stats;
    ck_assert_int_eq(flashcl_last_call_stats(ctx, &stats), FLASHCL_SUCCESS);
    ck_assert_int_eq(stats.kernel, FLASHCL_KERNEL_DECODE);
    if (bias) {
        ck_assert_msg(strstr(stats.build_options, "-DFLASHCL_BIAS=1") && strstr(stats.build_options, "-DFLASHCL_KV_CACHE=1"),
                      "%s: built with %s", c->name, stats.build_options);
        /* A forced count is cut to whole key blocks (2 of 128 keys for 256 keys): split or not as asked. */
        ck_assert_msg(splits == 0 || (stats.kv_splits > 1) == (splits > 1), "%s: %d key chunks ran, %d asked for",
                      c->name, stats.kv_splits, splits);
    }
    if (mode == FLASHCL_TENSOR_CORES_EMULATE && c->dtype != FLASHCL_DTYPE_F32 && (c->head_dim == 64 || c->head_dim == 128))
        ck_assert_str_eq(stats.program, "decode_mma.cl");
    float *o_host = malloc(h.q_count * sizeof(float)), *l_host = malloc((size_t)c->batch * (size_t)hq * (size_t)sq * 4);
    download(queue, o, o_host, h.q_count, c->dtype);
    ck_assert_int_eq(clEnqueueReadBuffer(queue, lse, CL_TRUE, 0, (size_t)c->batch * (size_t)hq * (size_t)sq * 4, l_host,
                                         0, NULL, NULL),
                     CL_SUCCESS);
    if (c->append) {
        model_append(c, &h);
        /* The whole caches: the new rows where the model put them, every other row as it was. */
        float *kd = malloc(h.cache_count * sizeof(float)), *vd = malloc(h.cache_count * sizeof(float));
        download(queue, kc, kd, h.cache_count, c->dtype);
        download(queue, vc, vd, h.cache_count, c->dtype);
        ck_assert_msg(memcmp(kd, h.k_cache, h.cache_count * sizeof(float)) == 0, "%s: K cache differs from the model",
                      c->name);
        ck_assert_msg(memcmp(vd, h.v_cache, h.cache_count * sizeof(float)) == 0, "%s: V cache differs from the model",
                      c->name);
        free(kd), free(vd);
    }
    char label[128];
    snprintf(label, sizeof label, "%s, %d splits (%d ran)", c->name, splits, stats.kv_splits);
    check_outputs(c, &h, o_host, l_host, label, bias ? &bias_host : NULL);
    free(o_host), free(l_host), free(bias_values);
    if (dbias_buffer) {
        size_t bytes = 0;
        ck_assert_int_eq(clGetMemObjectInfo(dbias_buffer, CL_MEM_SIZE, sizeof bytes, &bytes, NULL), CL_SUCCESS);
        float *back = malloc(bytes);
        download(queue, dbias_buffer, back, bytes / sizeof(float), FLASHCL_DTYPE_F32);
        for (size_t i = 0; i < bytes / sizeof(float); ++i)
            ck_assert_msg(back[i] == 7.0f, "%s: dBias element %zu written (%g)", c->name, i, (double)back[i]);
        free(back);
        clReleaseMemObject(dbias_buffer);
    }
    if (bias_buffer) clReleaseMemObject(bias_buffer);
    cl_mem all[] = {q, kc, vc, kn, vn, o, lse, lens, table};
    for (int i = 0; i < 9; ++i)
        if (all[i]) clReleaseMemObject(all[i]);
    flashcl_context_free(ctx);
    host_free(&h);
}

static void run_case(const kv_case *c, int splits, uint64_t seed, flashcl_tensor_cores mode) {
    run_case_with(c, splits, seed, mode, NULL);
}

/* name, batch, Hq, Hkv, Sq, d, causal, dtype, page_size, capacity (or max_pages), num_pages, lens, append,
 * shared_prefix, window_left */
static const kv_case cases[] = {
    {"contiguous decode, lengths 5/0/300 + 1 new (the last at capacity)", 3, 8, 2, 1, 64, 0, FLASHCL_DTYPE_F32, 0, 301,
     0, {5, 0, 300}, 1, 0, -1},
    {"contiguous, no append, a sequence of length 0", 2, 4, 4, 1, 32, 0, FLASHCL_DTYPE_F16, 0, 100, 0, {0, 77}, 0, 0,
     -1},
    {"paged 16, out of order, Sq 4 causal append, group 8", 2, 8, 1, 4, 64, 1, FLASHCL_DTYPE_BF16, 16, 4, 8, {40, 17},
     1, 0, -1},
    {"paged 32, prefix pages shared, Sq 2 causal, no append", 2, 4, 2, 2, 128, 1, FLASHCL_DTYPE_F16, 32, 3, 5, {70, 45},
     0, 2, -1},
    {"paged 8, shared prefix, append into own pages, group 4", 2, 4, 1, 3, 16, 1, FLASHCL_DTYPE_F32, 8, 6, 12, {20, 17},
     1, 2, -1},
    {"contiguous, window 10, Sq 2 causal append", 2, 2, 1, 2, 40, 1, FLASHCL_DTYPE_F32, 0, 64, 0, {30, 50}, 1, 0, 10},
};
#define CASE_COUNT ((int)(sizeof cases / sizeof cases[0]))

START_TEST(cases_match_reference) {
    const int splits[] = {0, 1, 3};
    /* Case i with split count i % 3 on rusticl, with the other two on POCL (ts_split_takes). */
    if (!ts_split_takes(_i / 3, _i % 3, 3)) return;
    run_case(&cases[_i / 3], splits[_i % 3], 1000u + (uint64_t)_i, FLASHCL_TENSOR_CORES_AUTO);
}
END_TEST

/* The paged 16-bit cases on the matrix-unit decode kernel (emulated here), unsplit and in 3 chunks: pages out of
 * order and shared, Sq > 1 causal, the append. Each pair is a build of its own, split between the two CPU
 * implementations (ts_split_takes): case 2 unsplit and case 3 split on rusticl, the other two pairs on POCL. */
START_TEST(matrix_unit_kernel) {
    const int splits[] = {1, 3};
    if (!ts_split_takes(_i / 2, _i % 2, 2)) return;
    run_case(&cases[2 + _i / 2], splits[_i % 2], 2000u + (uint64_t)_i, FLASHCL_TENSOR_CORES_EMULATE);
}
END_TEST

/* Bad input: a clear error, nothing enqueued: O and the caches keep their bytes. */
START_TEST(bad_input_writes_nothing) {
    flashcl_context *ctx = ts_context();
    cl_context context = flashcl_context_cl_context(ctx);
    cl_command_queue queue = flashcl_context_queue(ctx);
    const int hq = 2, hkv = 1, d = 16, sq = 1, page = 4, max_pages = 2, pages = 3;
    float zeros[512];
    for (int i = 0; i < 512; ++i) zeros[i] = 0.25f;
    cl_mem q = upload(context, queue, zeros, 2 * hq * sq * d, FLASHCL_DTYPE_F32);
    cl_mem kc = upload(context, queue, zeros, (size_t)pages * page * hkv * d, FLASHCL_DTYPE_F32);
    cl_mem vc = upload(context, queue, zeros, (size_t)pages * page * hkv * d, FLASHCL_DTYPE_F32);
    cl_mem kn = upload(context, queue, zeros, 2 * sq * hkv * d, FLASHCL_DTYPE_F32);
    cl_mem vn = upload(context, queue, zeros, 2 * sq * hkv * d, FLASHCL_DTYPE_F32);
    float poison[64];
    for (int i = 0; i < 64; ++i) poison[i] = 7.0f;
    cl_mem o = upload(context, queue, poison, 2 * hq * sq * d, FLASHCL_DTYPE_F32);
    flashcl_attention_desc desc;
    flashcl_attention_desc_init(&desc, 2, hq, sq, 1, d);
    desc.heads_kv = hkv;
    const flashcl_tensor tq = flashcl_tensor_contiguous(q, FLASHCL_LAYOUT_BSHD, hq, sq, d);
    const flashcl_tensor to = flashcl_tensor_contiguous(o, FLASHCL_LAYOUT_BSHD, hq, sq, d);
    const flashcl_tensor tkn = flashcl_tensor_contiguous(kn, FLASHCL_LAYOUT_BSHD, hkv, sq, d);
    const flashcl_tensor tvn = flashcl_tensor_contiguous(vn, FLASHCL_LAYOUT_BSHD, hkv, sq, d);
    struct bad {
        const char *why;
        int32_t lens[2];
        int32_t table[4];
        int max_pages;
        flashcl_status expected;
        const char *message;
    } bad[] = {
        {"page index out of range", {5, 2}, {0, 3, 1, 2}, max_pages, FLASHCL_ERROR_INVALID_ARGUMENT, "outside"},
        {"length + new rows past max_pages x page_size", {8, 2}, {0, 1, 2, 2}, max_pages,
         FLASHCL_ERROR_INVALID_ARGUMENT, "exceed"},
        {"negative length", {-1, 2}, {0, 1, 2, 2}, max_pages, FLASHCL_ERROR_INVALID_ARGUMENT, "negative"},
        {"block table too short for max_pages", {1, 2}, {0, 1, 2, 2}, 3, FLASHCL_ERROR_BUFFER_TOO_SMALL, "block_table"},
        {"a written page shared", {4, 1}, {0, 1, 1, 2}, max_pages, FLASHCL_ERROR_INVALID_ARGUMENT, "shared"},
    };
    for (size_t t = 0; t < sizeof bad / sizeof bad[0]; ++t) {
        cl_mem lens = int_buffer(context, bad[t].lens, 2), table = int_buffer(context, bad[t].table, 4);
        flashcl_kv_cache cache;
        flashcl_kv_cache_init(&cache);
        cache.k = flashcl_tensor_contiguous(kc, FLASHCL_LAYOUT_BSHD, hkv, page, d);
        cache.v = flashcl_tensor_contiguous(vc, FLASHCL_LAYOUT_BSHD, hkv, page, d);
        cache.page_size = page;
        cache.num_pages = pages;
        cache.block_table = table;
        cache.max_pages = bad[t].max_pages;
        cache.cache_seqlens = lens;
        cache.k_new = &tkn;
        cache.v_new = &tvn;
        const flashcl_status status = flashcl_forward_kv_cache(ctx, &desc, &tq, &cache, &to, NULL, 0, NULL, NULL);
        ck_assert_msg(status == bad[t].expected, "%s: status %d (%s)", bad[t].why, (int)status, flashcl_last_error(ctx));
        ck_assert_msg(strstr(flashcl_last_error(ctx), bad[t].message) != NULL, "%s: message '%s'", bad[t].why,
                      flashcl_last_error(ctx));
        clReleaseMemObject(lens);
        clReleaseMemObject(table);
    }
    float back[512];
    download(queue, o, back, 2 * hq * sq * d, FLASHCL_DTYPE_F32);
    for (int i = 0; i < 2 * hq * sq * d; ++i) ck_assert(back[i] == 7.0f);
    download(queue, kc, back, (size_t)pages * page * hkv * d, FLASHCL_DTYPE_F32);
    for (int i = 0; i < pages * page * hkv * d; ++i) ck_assert(back[i] == 0.25f);
    /* Dropout: refused. */
    flashcl_attention_desc drop = desc;
    drop.dropout_p = 0.1f;
    int32_t lens_ok[2] = {1, 1}, table_ok[4] = {0, 1, 2, 2};
    cl_mem lens = int_buffer(context, lens_ok, 2), table = int_buffer(context, table_ok, 4);
    flashcl_kv_cache cache;
    flashcl_kv_cache_init(&cache);
    cache.k = flashcl_tensor_contiguous(kc, FLASHCL_LAYOUT_BSHD, hkv, page, d);
    cache.v = flashcl_tensor_contiguous(vc, FLASHCL_LAYOUT_BSHD, hkv, page, d);
    cache.page_size = page;
    cache.num_pages = pages;
    cache.block_table = table;
    cache.max_pages = max_pages;
    cache.cache_seqlens = lens;
    ck_assert_int_eq(flashcl_forward_kv_cache(ctx, &drop, &tq, &cache, &to, NULL, 0, NULL, NULL),
                     FLASHCL_ERROR_UNSUPPORTED);
    cache.k_new = &tkn; /* without v_new */
    ck_assert_int_eq(flashcl_forward_kv_cache(ctx, &desc, &tq, &cache, &to, NULL, 0, NULL, NULL),
                     FLASHCL_ERROR_INVALID_ARGUMENT);
    /* O overlapping the K cache. */
    cache.k_new = NULL;
    const flashcl_tensor overlap = flashcl_tensor_contiguous(kc, FLASHCL_LAYOUT_BSHD, hq, sq, d);
    ck_assert_int_eq(flashcl_forward_kv_cache(ctx, &desc, &tq, &cache, &overlap, NULL, 0, NULL, NULL),
                     FLASHCL_ERROR_ALIASING);
    cl_mem all[] = {q, kc, vc, kn, vn, o, lens, table};
    for (int i = 0; i < 8; ++i) clReleaseMemObject(all[i]);
    flashcl_context_free(ctx);
}
END_TEST

/* ---- the additive bias over the cache's key positions ------------------------------------------------------- */

/* Each a build of its own per kernel (the bias and the KV cache are both -D options); the first two are the
 * problems of flashcl run's KV-cache bias tests (tests/cli: cli_kv_cache_bias, cli_kv_cache_bias_paged), which
 * therefore build nothing more. */
static const kv_case bias_cases[] = {
    {"bias, contiguous 256, lengths 200/0/37, Sq 2 causal, group 2", 3, 4, 2, 2, 64, 1, FLASHCL_DTYPE_F32, 0, 256, 0,
     {200, 0, 37}, 0, 0, -1},
    {"bias + softcap + alibi, paged 16 out of order, lengths 45/130 + 3 new, Sq 3 causal, group 4", 2, 4, 1, 3, 64, 1,
     FLASHCL_DTYPE_F16, 16, 10, 22, {45, 130}, 1, 0, -1},
    {"bias, paged 16 out of order, 192 keys, lengths 100/17 + 4 new, Sq 4 causal, group 8", 2, 8, 1, 4, 64, 1,
     FLASHCL_DTYPE_BF16, 16, 12, 16, {100, 17}, 1, 0, -1},
};

/* The portable decode kernel (cl/decode.cl):
 *   0: contiguous, float32 data, a full (B, Hq) float32 bias at an offset with padded rows, then a (1, 1) one, unsplit;
 *   1: the same split along the keys (3 asked, 2 run: whole 128-key blocks; a build of its own: POCL only where
 *      sweeps are split, ts_split_takes), a chunk empty for the short sequences;
 *   2: paged with the append, half data, a full half bias (padded) and a (1, 1) one, soft-capping and ALiBi (a
 *      feature combination of its own: on rusticl where sweeps are split; the matrix-unit one below on POCL). */
START_TEST(bias_portable_kernel) {
    if (_i < 2) {
        if (!ts_split_takes(0, _i, 2)) return;
        const kv_bias full = {3, 4, FLASHCL_DTYPE_F32, 1, 0.0f, 0.0f, 1}, shared = {1, 1, FLASHCL_DTYPE_F32, 0, 0.0f, 0.0f, 0};
        const int splits = _i == 0 ? 1 : 3;
        run_case_with(&bias_cases[0], splits, 3000u + (uint64_t)_i, FLASHCL_TENSOR_CORES_OFF, &full);
        run_case_with(&bias_cases[0], splits, 3010u + (uint64_t)_i, FLASHCL_TENSOR_CORES_OFF, &shared);
    } else if (ts_split_takes(0, 0, 2)) {
        const kv_bias full = {2, 4, FLASHCL_DTYPE_F16, 1, 3.0f, 8.0f, 0}, shared = {1, 1, FLASHCL_DTYPE_F16, 0, 3.0f, 8.0f, 0};
        run_case_with(&bias_cases[1], 1, 3002u, FLASHCL_TENSOR_CORES_OFF, &full);
        run_case_with(&bias_cases[1], 1, 3012u, FLASHCL_TENSOR_CORES_OFF, &shared);
    }
}
END_TEST

/* The matrix-unit decode kernel (cl/decode_mma.cl, emulated): paged with the append, bfloat16 data, a full float32
 * bias (padded) and a (B, 1) one, 3 key chunks of 64 (the short sequence's last two empty, the long one's last).
 * An emulated build of its own: on POCL where sweeps are split (ts_split_takes). */
START_TEST(bias_matrix_unit_kernel) {
    if (!ts_split_takes(1, 0, 2)) return;
    const kv_bias full = {2, 8, FLASHCL_DTYPE_F32, 1, 0.0f, 0.0f, 0}, per_batch = {2, 1, FLASHCL_DTYPE_F32, 0, 0.0f, 0.0f, 0};
    run_case_with(&bias_cases[2], 3, 3100u, FLASHCL_TENSOR_CORES_EMULATE, &full);
    run_case_with(&bias_cases[2], 3, 3101u, FLASHCL_TENSOR_CORES_EMULATE, &per_batch);
}
END_TEST

/* A bias the call cannot take: the status and message of each, nothing enqueued (O and the caches keep their
 * bytes). Validation fails before any kernel is built. */
START_TEST(bias_bad_input) {
    flashcl_context *ctx = ts_context();
    cl_context context = flashcl_context_cl_context(ctx);
    cl_command_queue queue = flashcl_context_queue(ctx);
    /* B 2, Hq 2 over 1 KV head, Sq 2, d 16, a contiguous cache of 8 rows, lengths 3 and 5 plus 2 new rows. */
    enum { B = 2, HQ = 2, SQ = 2, D = 16, CAP = 8, PLANE = SQ * CAP };
    float fill[B * CAP * D];
    for (int i = 0; i < B * CAP * D; ++i) fill[i] = 0.25f;
    cl_mem q = upload(context, queue, fill, B * SQ * HQ * D, FLASHCL_DTYPE_F32);
    cl_mem kc = upload(context, queue, fill, B * CAP * D, FLASHCL_DTYPE_F32);
    cl_mem vc = upload(context, queue, fill, B * CAP * D, FLASHCL_DTYPE_F32);
    cl_mem kn = upload(context, queue, fill, B * SQ * D, FLASHCL_DTYPE_F32);
    cl_mem vn = upload(context, queue, fill, B * SQ * D, FLASHCL_DTYPE_F32);
    float poison[B * SQ * HQ * D];
    for (int i = 0; i < B * SQ * HQ * D; ++i) poison[i] = 7.0f;
    cl_mem o = upload(context, queue, poison, B * SQ * HQ * D, FLASHCL_DTYPE_F32);
    const int32_t lens_host[B] = {3, 5};
    cl_mem lens = int_buffer(context, lens_host, B);
    /* Bias buffers of exactly (B, HQ, SQ, CAP), of one key column too few, and of one query row too few. */
    float values[B * HQ * PLANE];
    for (int i = 0; i < B * HQ * PLANE; ++i) values[i] = 0.5f;
    cl_mem good = upload(context, queue, values, B * HQ * PLANE, FLASHCL_DTYPE_F32);
    cl_mem short_keys = upload(context, queue, values, B * HQ * SQ * (CAP - 1), FLASHCL_DTYPE_F32);
    cl_mem short_rows = upload(context, queue, values, B * HQ * (SQ - 1) * CAP, FLASHCL_DTYPE_F32);
    flashcl_attention_desc desc;
    flashcl_attention_desc_init(&desc, B, HQ, SQ, 1, D);
    desc.heads_kv = 1;
    desc.causal = 1;
    const flashcl_tensor tq = flashcl_tensor_contiguous(q, FLASHCL_LAYOUT_BSHD, HQ, SQ, D);
    const flashcl_tensor to = flashcl_tensor_contiguous(o, FLASHCL_LAYOUT_BSHD, HQ, SQ, D);
    const flashcl_tensor tkn = flashcl_tensor_contiguous(kn, FLASHCL_LAYOUT_BSHD, 1, SQ, D);
    const flashcl_tensor tvn = flashcl_tensor_contiguous(vn, FLASHCL_LAYOUT_BSHD, 1, SQ, D);
    flashcl_kv_cache cache;
    flashcl_kv_cache_init(&cache);
    cache.k = flashcl_tensor_contiguous(kc, FLASHCL_LAYOUT_BSHD, 1, CAP, D);
    cache.v = flashcl_tensor_contiguous(vc, FLASHCL_LAYOUT_BSHD, 1, CAP, D);
    cache.capacity = CAP;
    cache.cache_seqlens = lens;
    cache.cache_seqlens_host = lens_host;
    cache.k_new = &tkn;
    cache.v_new = &tvn;
    enum { GOOD, SHORT_KEYS, SHORT_ROWS, PAST_END, BATCH, HEADS, DTYPE, OVER_O, OVER_CACHE, FIELDS, COUNT };
    const struct {
        const char *why;
        flashcl_status expected;
        const char *message;
    } bad[COUNT] = {
        [SHORT_KEYS] = {"a bias of one sequence's keys (Sk 7, not the capacity 8)", FLASHCL_ERROR_BUFFER_TOO_SMALL,
                        "8 key positions: the cache's capacity"},
        [SHORT_ROWS] = {"a bias of Sq - 1 rows", FLASHCL_ERROR_BUFFER_TOO_SMALL, "seqlen_q 2"},
        [PAST_END] = {"strides past the buffer", FLASHCL_ERROR_BUFFER_TOO_SMALL, "bias needs"},
        [BATCH] = {"bias_batch 3", FLASHCL_ERROR_INVALID_ARGUMENT, "bias_batch 3"},
        [HEADS] = {"bias_heads 3", FLASHCL_ERROR_INVALID_ARGUMENT, "bias_heads 3"},
        [DTYPE] = {"a bfloat16 bias over float32 data", FLASHCL_ERROR_INVALID_ARGUMENT, "bias_dtype"},
        [OVER_O] = {"the bias over O", FLASHCL_ERROR_ALIASING, "bias"},
        [OVER_CACHE] = {"the bias over the K cache the append writes", FLASHCL_ERROR_ALIASING, "bias"},
        [FIELDS] = {"bias fields without its buffer", FLASHCL_ERROR_INVALID_ARGUMENT, "bias.buffer is NULL"},
    };
    for (int t = SHORT_KEYS; t < COUNT; ++t) {
        flashcl_attention_extras ex;
        flashcl_attention_extras_init(&ex);
        ex.bias = (flashcl_tensor){good, 0, HQ * PLANE, PLANE, CAP};
        ex.bias_batch = B;
        ex.bias_heads = HQ;
        switch (t) {
        case SHORT_KEYS: ex.bias = (flashcl_tensor){short_keys, 0, HQ * SQ * (CAP - 1), SQ * (CAP - 1), CAP - 1}; break;
        case SHORT_ROWS: ex.bias = (flashcl_tensor){short_rows, 0, HQ * (SQ - 1) * CAP, (SQ - 1) * CAP, CAP}; break;
        case PAST_END: ex.bias.offset = 1; break;
        case BATCH: ex.bias_batch = 3; break;
        case HEADS: ex.bias_heads = 3; break;
        case DTYPE: ex.bias_dtype = FLASHCL_DTYPE_BF16; break;
        case OVER_O: ex.bias = (flashcl_tensor){o, 0, 0, 0, CAP}; break;
        case OVER_CACHE: ex.bias = (flashcl_tensor){kc, 0, 0, 0, CAP}; break;
        case FIELDS: ex.bias.buffer = NULL; break;
        default: break;
        }
        const flashcl_status status = flashcl_forward_kv_cache_ex(ctx, &desc, &ex, &tq, &cache, &to, NULL, 0, NULL, NULL);
        ck_assert_msg(status == bad[t].expected, "%s: %s (%s)", bad[t].why, flashcl_status_string(status),
                      flashcl_last_error(ctx));
        ck_assert_msg(strstr(flashcl_last_error(ctx), bad[t].message) != NULL, "%s: message '%s' lacks '%s'",
                      bad[t].why, flashcl_last_error(ctx), bad[t].message);
    }
    float back[B * CAP * D];
    download(queue, o, back, B * SQ * HQ * D, FLASHCL_DTYPE_F32);
    for (int i = 0; i < B * SQ * HQ * D; ++i) ck_assert(back[i] == 7.0f);
    cl_mem caches[] = {kc, vc};
    for (int m = 0; m < 2; ++m) {
        download(queue, caches[m], back, B * CAP * D, FLASHCL_DTYPE_F32);
        for (int i = 0; i < B * CAP * D; ++i) ck_assert(back[i] == 0.25f);
    }
    cl_mem all[] = {q, kc, vc, kn, vn, o, lens, good, short_keys, short_rows};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i) clReleaseMemObject(all[i]);
    flashcl_context_free(ctx);
}
END_TEST

int main(void) {
    ts_sweep_announce("kv_cache");
    Suite *s = suite_create("kv_cache");
    TCase *tc = tcase_create("kv_cache");
    tcase_set_timeout(tc, TS_CASE_TIMEOUT);
    tcase_add_loop_test(tc, cases_match_reference, 0, CASE_COUNT * 3);
    tcase_add_loop_test(tc, matrix_unit_kernel, 0, 4);
    tcase_add_test(tc, bad_input_writes_nothing);
    suite_add_tcase(s, tc);
    /* A case of its own, so that CK_RUN_CASE=kv_cache_bias runs (and times) the bias alone. */
    TCase *bias = tcase_create("kv_cache_bias");
    tcase_set_timeout(bias, TS_CASE_TIMEOUT);
    tcase_add_test(bias, bias_bad_input);
    tcase_add_loop_test(bias, bias_portable_kernel, 0, 3);
    tcase_add_test(bias, bias_matrix_unit_kernel);
    suite_add_tcase(s, bias);
    SRunner *runner = srunner_create(s);
    srunner_run_all(runner, CK_NORMAL);
    const int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
