/* run_cache_inputs.c: reads the files of a KV-cache run and checks they describe one flashcl_forward_kv_cache call.
 * The library checks the same things again; here each problem names the file that has it, and a bad file is
 * reported before OpenCL starts. */
#include "run_cache_inputs.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "run_inputs.h"

static int load_all(const run_options *o, run_cache_inputs *in) {
    return run_load_npy(o->q_path, &in->q) || run_load_npy(o->k_cache_path, &in->k_cache) ||
                   run_load_npy(o->v_cache_path, &in->v_cache) ||
                   run_load_npy(o->cache_seqlens_path, &in->seqlens) ||
                   (o->block_table_path && run_load_npy(o->block_table_path, &in->table)) ||
                   (o->k_new_path && run_load_npy(o->k_new_path, &in->k_new)) ||
                   (o->v_new_path && run_load_npy(o->v_new_path, &in->v_new))
               ? -1
               : 0;
}

/* Every tensor file holds Q's element type. */
static int check_dtypes(const run_options *o, run_cache_inputs *in) {
    const char *paths[4] = {o->k_cache_path, o->v_cache_path, o->k_new_path, o->v_new_path};
    const npy_array *arrays[4] = {&in->k_cache, &in->v_cache, &in->k_new, &in->v_new};
    flashcl_dtype q_dtype = FLASHCL_DTYPE_F32, dtype = FLASHCL_DTYPE_F32;
    if (run_file_dtype(o, o->q_path, &in->q, &q_dtype)) return -1;
    for (int i = 0; i < 4; ++i) {
        if (!paths[i]) continue;
        if (run_file_dtype(o, paths[i], arrays[i], &dtype)) return -1;
        if (dtype != q_dtype)
            return run_file_error(paths[i], "holds %s but %s holds %s", run_dtype_name(dtype), o->q_path,
                                  run_dtype_name(q_dtype));
    }
    in->desc.dtype = q_dtype;
    return 0;
}

/* The cache files: 4-D, K and V alike, (B, S_max, Hkv, D) or (pages, page_size, Hkv, D). */
static int check_cache_shapes(const run_options *o, const run_dims4 *q, run_cache_inputs *in) {
    const npy_array *k = &in->k_cache, *v = &in->v_cache;
    const char *form = in->paged ? "(pages, page_size, Hkv, D)" : "(B, S_max, Hkv, D)";
    char shape[256], other[256];
    npy_format_shape(k->rank, k->shape, shape, sizeof shape);
    npy_format_shape(v->rank, v->shape, other, sizeof other);
    if (k->rank != 4)
        return run_file_error(o->k_cache_path, "a cache must be a 4-D array %s, not shape %s", form, shape);
    for (int i = 0; i < 4; ++i)
        if (k->shape[i] < 1 || k->shape[i] > INT_MAX)
            return run_file_error(o->k_cache_path, "dimension %d of shape %s is outside 1..%d", i, shape, INT_MAX);
    if (v->rank != 4 || memcmp(k->shape, v->shape, 4 * sizeof k->shape[0]) != 0)
        return run_file_error(o->v_cache_path, "shape %s differs from %s's %s (the K and V caches must match)", other,
                              o->k_cache_path, shape);
    const int heads_kv = (int)k->shape[2], dim = (int)k->shape[3];
    if (dim != q->dim)
        return run_file_error(o->k_cache_path, "head dim %d differs from %s's head dim %d", dim, o->q_path, q->dim);
    if (q->heads % heads_kv != 0)
        return run_file_error(o->q_path, "%d query heads are not a multiple of %s's %d key/value heads", q->heads,
                              o->k_cache_path, heads_kv);
    if (in->paged) {
        in->num_pages = (int)k->shape[0];
        in->page_size = (int)k->shape[1];
        if (o->page_size && o->page_size != in->page_size)
            return run_file_error(o->k_cache_path, "holds pages of %d rows (shape %s read as %s), not --page-size %d",
                                  in->page_size, shape, form, o->page_size);
    } else {
        if ((int)k->shape[0] != q->batch)
            return run_file_error(o->k_cache_path,
                                  "holds %d sequences (shape %s read as %s) but %s has batch %d (a paged cache "
                                  "needs --block-table)",
                                  (int)k->shape[0], shape, form, o->q_path, q->batch);
        in->capacity = (int)k->shape[1];
    }
    in->desc.heads_kv = heads_kv;
    in->cache_rows = k->shape[0] * k->shape[1];
    return 0;
}

/* cache_seqlens (B) and the block table (B, max_pages), int32. */
static int check_index_files(const run_options *o, int batch, run_cache_inputs *in) {
    char shape[256];
    const npy_array *l = &in->seqlens, *t = &in->table;
    npy_format_shape(l->rank, l->shape, shape, sizeof shape);
    if (l->dtype != NPY_DTYPE_I32 || l->rank != 1 || l->shape[0] != (size_t)batch)
        return run_file_error(o->cache_seqlens_path,
                              "cache_seqlens must be a 1-D int32 ('<i4') array of %d entries (Q's batch), not %s "
                              "shape %s",
                              batch, npy_dtype_name(l->dtype), shape);
    in->lens = l->data;
    if (!in->paged) return 0;
    npy_format_shape(t->rank, t->shape, shape, sizeof shape);
    if (t->dtype != NPY_DTYPE_I32 || t->rank != 2 || t->shape[0] != (size_t)batch || t->shape[1] < 1 ||
        t->shape[1] > INT_MAX)
        return run_file_error(o->block_table_path,
                              "a block table must be a 2-D int32 ('<i4') array (%d, max_pages) (Q's batch), not %s "
                              "shape %s",
                              batch, npy_dtype_name(t->dtype), shape);
    in->max_pages = (int)t->shape[1];
    in->block_table = t->data;
    if ((long long)in->max_pages * in->page_size > INT_MAX)
        return run_file_error(o->block_table_path, "max_pages %d x page_size %d exceeds 2^31 - 1 rows",
                              in->max_pages, in->page_size);
    return 0;
}

/* The new rows: (B, Sq, Hkv, D) in Q's layout, K and V alike. */
static int check_new_rows(const run_options *o, const run_dims4 *q, run_cache_inputs *in) {
    if (!o->k_new_path) return 0;
    const int bshd = in->layout == FLASHCL_LAYOUT_BSHD;
    const char *paths[2] = {o->k_new_path, o->v_new_path};
    const npy_array *arrays[2] = {&in->k_new, &in->v_new};
    for (int i = 0; i < 2; ++i) {
        run_dims4 n;
        if (run_tensor_dims(paths[i], arrays[i], in->layout, i ? "V new" : "K new", "Hkv", "Sq", &n)) return -1;
        if (n.batch != q->batch || n.heads != in->desc.heads_kv || n.seqlen != q->seqlen || n.dim != q->dim) {
            char shape[256];
            npy_format_shape(arrays[i]->rank, arrays[i]->shape, shape, sizeof shape);
            const int a = bshd ? q->seqlen : in->desc.heads_kv, b = bshd ? in->desc.heads_kv : q->seqlen;
            return run_file_error(paths[i],
                                  "shape %s is not (%d, %d, %d, %d): new rows are (B,%s,D) with Q's B and Sq and "
                                  "the cache's Hkv",
                                  shape, q->batch, a, b, q->dim, bshd ? "Sq,Hkv" : "Hkv,Sq");
        }
    }
    in->append = 1;
    return 0;
}

/* Every length (plus the new rows) within the cache, and the pages it spans inside the pool. */
static int check_lengths(const run_options *o, run_cache_inputs *in) {
    const long long keys = in->paged ? (long long)in->max_pages * in->page_size : in->capacity;
    const int added = in->append ? in->desc.seqlen_q : 0;
    for (int b = 0; b < in->desc.batch; ++b) {
        const long long len = in->lens[b];
        if (len < 0) return run_file_error(o->cache_seqlens_path, "sequence %d has a negative length %lld", b, len);
        if (len + added > keys)
            return run_file_error(o->cache_seqlens_path,
                                  "sequence %d: %lld cached rows + %d new exceed the cache's %lld rows per sequence%s",
                                  b, len, added, keys,
                                  in->paged ? " (max_pages x page_size)" : " (S_max of the cache files)");
        if (!in->paged) continue;
        const long long pages = (len + added + in->page_size - 1) / in->page_size;
        for (long long j = 0; j < pages; ++j) {
            const int32_t page = in->block_table[(size_t)b * (size_t)in->max_pages + (size_t)j];
            if (page < 0 || page >= in->num_pages)
                return run_file_error(o->block_table_path,
                                      "block_table[%d][%lld] = %d (sequence %d's rows %lld..%lld) is outside the %d "
                                      "pages of %s",
                                      b, j, (int)page, b, j * in->page_size, (j + 1) * in->page_size - 1,
                                      in->num_pages, o->k_cache_path);
        }
    }
    return 0;
}

int run_cache_load(const run_options *o, run_cache_inputs *in) {
    memset(in, 0, sizeof *in);
    in->layout = o->layout;
    in->paged = o->block_table_path != NULL;
    run_dims4 q;
    int failed = load_all(o, in) || check_dtypes(o, in) ||
                 run_tensor_dims(o->q_path, &in->q, in->layout, "Q", "Hq", "Sq", &q) ||
                 check_cache_shapes(o, &q, in) || check_index_files(o, q.batch, in);
    if (!failed) {
        flashcl_attention_desc *d = &in->desc;
        const int heads_kv = d->heads_kv;
        const flashcl_dtype dtype = d->dtype;
        const int keys = in->paged ? in->max_pages * in->page_size : in->capacity;
        flashcl_attention_desc_init(d, q.batch, q.heads, q.seqlen, keys, q.dim);
        d->heads_kv = heads_kv;
        d->dtype = dtype;
        d->scale = (float)o->scale;
        d->causal = o->causal;
        d->sliding_window = o->window_left >= 0 || o->window_right >= 0;
        d->window_left = o->window_left;
        d->window_right = o->window_right;
        failed = check_new_rows(o, &q, in) || check_lengths(o, in);
    }
    if (failed) run_cache_free(in);
    return failed ? -1 : 0;
}

void run_cache_free(run_cache_inputs *in) {
    npy_array *arrays[7] = {&in->q, &in->k_cache, &in->v_cache, &in->seqlens, &in->table, &in->k_new, &in->v_new};
    for (int i = 0; i < 7; ++i) npy_free(arrays[i]);
    in->lens = in->block_table = NULL;
}

size_t run_cache_row(const run_cache_inputs *in, int b, int row) {
    if (!in->paged) return (size_t)b * (size_t)in->capacity + (size_t)row;
    const int32_t page = in->block_table[(size_t)b * (size_t)in->max_pages + (size_t)(row / in->page_size)];
    return (size_t)page * (size_t)in->page_size + (size_t)(row % in->page_size);
}
