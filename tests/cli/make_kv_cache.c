/* make_kv_cache.c: writes the .npy files of a KV-cache run of `flashcl run` (--k-cache ...) for the end-to-end
 * tests: random Q, caches (every row random, those past a sequence's length too, so attending to one shows) and
 * new rows; the lengths; for a paged cache a block table over a shuffled pool with spare pages; the caches as
 * they must be after the append (bit copies of the new rows at rows cache_seqlens[b]..); and files that break
 * one rule each. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli_rng.h"
#include "half_float.h"
#include "npy.h"

static void usage(void) {
    fprintf(stderr,
            "usage: cli_make_kv_cache DIR DTYPE B,Hq,Hkv,Sq,D L0,L1,... ROWS SEED [PAGE_SIZE]\n"
            "  DTYPE f32|f16|bf16 (bf16 as '<u2'); ROWS rows per sequence (contiguous cache (B,ROWS,Hkv,D)),\n"
            "  or with PAGE_SIZE a paged cache: max_pages = ceil(ROWS/PAGE_SIZE), B*max_pages+2 pages\n"
            "  (PAGES,PAGE_SIZE,Hkv,D) and block_table.npy (B,max_pages), pages shuffled.\n"
            "  Writes q.npy (B,Sq,Hq,D), k_cache.npy, v_cache.npy, k_new.npy, v_new.npy (B,Sq,Hkv,D),\n"
            "  seqlens.npy, k_cache_appended.npy, v_cache_appended.npy (when the new rows fit), and\n"
            "  the broken files seqlens_long.npy (sequence B-1 one row past the cache), seqlens_short.npy\n"
            "  (B-1 entries), q_heads_bad.npy (Hkv+1 query heads), k_new_long.npy (Sq+1 rows),\n"
            "  block_table_bad.npy (paged: sequence B-1's first page outside the pool); and biases over\n"
            "  the cache's key positions (ROWS, or max_pages*PAGE_SIZE): bias.npy (B,Hq,Sq,ROWS) '<f4'\n"
            "  with sequence B-1's last head's last row -inf, bias_shared.npy (1,1,Sq,ROWS) in DTYPE,\n"
            "  both NaN from column L_b+Sq on (never read), and bias_short.npy (B,Hq,Sq,ROWS-1)\n");
}


typedef struct problem {
    const char *dir;
    npy_dtype type;
    size_t elem;
    int batch, heads_q, heads_kv, seqlen_q, dim, rows, page_size;
    int max_pages, num_pages; /* paged */
    int32_t lens[64];
} problem;

/* count random values in [-2, 2) stored as p's type; NULL if out of memory. */
static void *random_raw(const problem *p, size_t count) {
    unsigned char *raw = malloc(count * p->elem + 1);
    for (size_t i = 0; raw && i < count; ++i) {
        const float x = (float)(uniform() * 4.0 - 2.0);
        if (p->type == NPY_DTYPE_F32) {
            memcpy(raw + i * 4, &x, 4);
        } else {
            const uint16_t bits = p->type == NPY_DTYPE_F16 ? float_to_half(x) : float_to_bf16(x);
            memcpy(raw + i * 2, &bits, 2);
        }
    }
    return raw;
}

static int save(const problem *p, const char *name, npy_dtype type, int rank, const size_t *shape, const void *data) {
    char path[4096], error[512];
    if (!data) {
        fprintf(stderr, "cli_make_kv_cache: out of memory\n");
        return -1;
    }
    snprintf(path, sizeof path, "%s/%s", p->dir, name);
    if (npy_write(path, type, rank, shape, data, error, sizeof error) != 0) {
        fprintf(stderr, "cli_make_kv_cache: %s: %s\n", path, error);
        return -1;
    }
    return 0;
}

/* Random data of the given shape written as name. */
static int save_random(const problem *p, const char *name, const size_t shape[4]) {
    void *raw = random_raw(p, shape[0] * shape[1] * shape[2] * shape[3]);
    const int result = save(p, name, p->type, 4, shape, raw);
    free(raw);
    return result;
}

/* The cache after the append: the new rows of sequence b at rows lens[b].., through the block table. */
static void *appended(const problem *p, const void *cache, size_t cache_bytes, const void *new_rows,
                      const int32_t *table) {
    unsigned char *out = malloc(cache_bytes);
    if (!out) return NULL;
    memcpy(out, cache, cache_bytes);
    const size_t row_bytes = (size_t)p->heads_kv * (size_t)p->dim * p->elem;
    for (int b = 0; b < p->batch; ++b)
        for (int i = 0; i < p->seqlen_q; ++i) {
            const int row = p->lens[b] + i;
            const size_t at = p->page_size ? (size_t)table[b * p->max_pages + row / p->page_size] * p->page_size +
                                                 (size_t)(row % p->page_size)
                                           : (size_t)b * (size_t)p->rows + (size_t)row;
            memcpy(out + at * row_bytes, (const unsigned char *)new_rows + ((size_t)b * p->seqlen_q + i) * row_bytes,
                   row_bytes);
        }
    return out;
}

/* The bias of (batch, heads, Sq, rows) over the cache's key positions (written after every other file, so that
 * those stay what they were before it came): uniform in [-2, 2), NaN in every column at or past the keys the
 * row's sequence(s) may attend to (lens[b] + Sq, with new rows or not; the longest one's where the batch is
 * broadcast), which no kernel may read; with batch > 1 the last head's last row of the last sequence -inf (an
 * empty row). Stored as `type` (float32, or the inputs' type). */
static void *bias_raw(const problem *p, int batch, int heads, npy_dtype type) {
    const size_t sq = (size_t)p->seqlen_q, keys = (size_t)p->rows, n = (size_t)batch * (size_t)heads * sq * keys;
    const size_t elem = type == NPY_DTYPE_F32 ? 4 : 2;
    unsigned char *raw = malloc(n * elem + 1);
    int longest = 0;
    for (int b = 0; b < p->batch; ++b) longest = p->lens[b] > longest ? p->lens[b] : longest;
    for (size_t i = 0; raw && i < n; ++i) {
        const size_t row = i / keys, col = i % keys, b = row / ((size_t)heads * sq);
        const int own = (batch == 1 ? longest : p->lens[b]) + p->seqlen_q;
        float x = (float)(uniform() * 4.0 - 2.0);
        if (col >= (size_t)own) x = NAN;
        else if (batch > 1 && row == (size_t)batch * (size_t)heads * sq - 1) x = -INFINITY;
        if (type == NPY_DTYPE_F32) {
            memcpy(raw + i * 4, &x, 4);
        } else {
            const uint16_t bits = type == NPY_DTYPE_F16 ? float_to_half(x) : float_to_bf16(x);
            memcpy(raw + i * 2, &bits, 2);
        }
    }
    return raw;
}

/* A shuffled pool: sequence b's j-th page at table[b * max_pages + j]; two pages stay spare. */
static int32_t *shuffled_table(const problem *p) {
    int32_t *order = malloc((size_t)p->num_pages * sizeof *order);
    if (!order) return NULL;
    for (int i = 0; i < p->num_pages; ++i) order[i] = i;
    for (int i = p->num_pages - 1; i > 0; --i) {
        const int j = (int)(uniform() * (i + 1)), t = order[i];
        order[i] = order[j], order[j] = t;
    }
    return order; /* its first batch * max_pages entries are the table */
}

static int write_all(const problem *p) {
    const size_t b = (size_t)p->batch, hq = (size_t)p->heads_q, hkv = (size_t)p->heads_kv, sq = (size_t)p->seqlen_q;
    const size_t d = (size_t)p->dim;
    const size_t q_shape[4] = {b, sq, hq, d}, new_shape[4] = {b, sq, hkv, d};
    const size_t cache_shape[4] = {p->page_size ? (size_t)p->num_pages : b,
                                   (size_t)(p->page_size ? p->page_size : p->rows), hkv, d};
    const size_t cache_count = cache_shape[0] * cache_shape[1] * hkv * d, new_count = b * sq * hkv * d;
    void *k = random_raw(p, cache_count), *v = random_raw(p, cache_count);
    void *kn = random_raw(p, new_count), *vn = random_raw(p, new_count);
    int32_t *table = p->page_size ? shuffled_table(p) : NULL;
    int failed = !k || !v || !kn || !vn || (p->page_size && !table);
    failed = failed || save_random(p, "q.npy", q_shape) || save(p, "k_cache.npy", p->type, 4, cache_shape, k) ||
             save(p, "v_cache.npy", p->type, 4, cache_shape, v) || save(p, "k_new.npy", p->type, 4, new_shape, kn) ||
             save(p, "v_new.npy", p->type, 4, new_shape, vn);
    const size_t lens_shape[1] = {b}, short_shape[1] = {b - 1}, table_shape[2] = {b, (size_t)p->max_pages};
    failed = failed || save(p, "seqlens.npy", NPY_DTYPE_I32, 1, lens_shape, p->lens) ||
             (b > 1 && save(p, "seqlens_short.npy", NPY_DTYPE_I32, 1, short_shape, p->lens)) ||
             (table && save(p, "block_table.npy", NPY_DTYPE_I32, 2, table_shape, table));
    int fits = 1;
    for (int i = 0; i < p->batch; ++i) fits = fits && p->lens[i] + p->seqlen_q <= p->rows;
    if (!failed && fits) {
        void *ka = appended(p, k, cache_count * p->elem, kn, table);
        void *va = appended(p, v, cache_count * p->elem, vn, table);
        failed = save(p, "k_cache_appended.npy", p->type, 4, cache_shape, ka) ||
                 save(p, "v_cache_appended.npy", p->type, 4, cache_shape, va);
        free(ka), free(va);
    }
    /* The broken files. */
    int32_t long_lens[64];
    memcpy(long_lens, p->lens, sizeof long_lens);
    long_lens[b - 1] = p->page_size ? p->max_pages * p->page_size + 1 : p->rows + 1;
    const size_t q_bad[4] = {b, sq, hkv + 1, d}, new_long[4] = {b, sq + 1, hkv, d};
    failed = failed || save(p, "seqlens_long.npy", NPY_DTYPE_I32, 1, lens_shape, long_lens) ||
             (hkv > 1 && save_random(p, "q_heads_bad.npy", q_bad)) || save_random(p, "k_new_long.npy", new_long);
    if (!failed && table) {
        table[(b - 1) * (size_t)p->max_pages] = p->num_pages;
        failed = save(p, "block_table_bad.npy", NPY_DTYPE_I32, 2, table_shape, table);
    }
    /* The biases, last: their random values come after every other file's. */
    const size_t bias_shape[4] = {b, hq, sq, (size_t)p->rows}, shared_shape[4] = {1, 1, sq, (size_t)p->rows};
    const size_t short_shape4[4] = {b, hq, sq, (size_t)p->rows - 1};
    void *bias = failed ? NULL : bias_raw(p, p->batch, p->heads_q, NPY_DTYPE_F32);
    void *shared = failed ? NULL : bias_raw(p, 1, 1, p->type);
    failed = failed || save(p, "bias.npy", NPY_DTYPE_F32, 4, bias_shape, bias) ||
             save(p, "bias_shared.npy", p->type, 4, shared_shape, shared) ||
             (p->rows > 1 && save(p, "bias_short.npy", NPY_DTYPE_F32, 4, short_shape4, bias));
    free(bias), free(shared);
    free(k), free(v), free(kn), free(vn), free(table);
    return failed ? 1 : 0;
}

int main(int argc, char **argv) {
    problem p;
    memset(&p, 0, sizeof p);
    if (argc != 7 && argc != 8) return usage(), 2;
    p.dir = argv[1];
    const char *dtype = argv[2];
    p.type = strcmp(dtype, "f32") == 0 ? NPY_DTYPE_F32 : strcmp(dtype, "f16") == 0 ? NPY_DTYPE_F16 : NPY_DTYPE_U16;
    p.elem = p.type == NPY_DTYPE_F32 ? 4 : 2;
    p.rows = atoi(argv[5]);
    p.page_size = argc == 8 ? atoi(argv[7]) : 0;
    int n = 0;
    for (const char *s = argv[4]; n >= 0 && *s;) {
        char *end;
        const long len = strtol(s, &end, 10);
        if (end == s || n == 64 || (*end && *end != ',')) n = -1; /* not a list of integers */
        else p.lens[n++] = (int32_t)len;
        s = *end == ',' ? end + 1 : end;
    }
    if ((strcmp(dtype, "f32") != 0 && strcmp(dtype, "f16") != 0 && strcmp(dtype, "bf16") != 0) ||
        sscanf(argv[3], "%d,%d,%d,%d,%d", &p.batch, &p.heads_q, &p.heads_kv, &p.seqlen_q, &p.dim) != 5 ||
        p.batch != n || p.heads_kv < 1 || p.heads_q % p.heads_kv != 0 || p.seqlen_q < 1 || p.dim < 1 ||
        p.rows < 1 || p.page_size < 0) {
        usage();
        return 2;
    }
    if (p.page_size) {
        p.max_pages = (p.rows + p.page_size - 1) / p.page_size;
        p.num_pages = p.batch * p.max_pages + 2;
        p.rows = p.max_pages * p.page_size;
    }
    rng_state = strtoull(argv[6], NULL, 10) * 0x9E3779B97F4A7C15ull + 1;
    if (mkdir(p.dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "cli_make_kv_cache: cannot create directory %s: %s\n", p.dir, strerror(errno));
        return 1;
    }
    return write_all(&p);
}
