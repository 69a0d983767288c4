/* run_cache_inputs.h: the .npy files of a KV-cache run of `flashcl run` (--k-cache ...), read and checked
 * against each other before any OpenCL start-up, each problem reported naming its file. */
#ifndef FLASHCL_TOOLS_RUN_CACHE_INPUTS_H
#define FLASHCL_TOOLS_RUN_CACHE_INPUTS_H

#include <stddef.h>
#include <stdint.h>

#include "flashcl.h"
#include "npy.h"
#include "run_options.h"

typedef struct run_cache_inputs {
    npy_array q, k_cache, v_cache, seqlens, table, k_new, v_new; /* table, k_new, v_new may be empty */
    /* batch, heads_q/kv, seqlen_q (query rows per sequence), head_dim, dtype,
     * scale, causal, window; seqlen_k = the most rows a sequence may hold. */
    flashcl_attention_desc desc;
    flashcl_layout layout; /* of Q, O, k_new and v_new; the caches are (.., rows, Hkv, D) */
    int paged;
    int capacity;                          /* contiguous: rows per sequence */
    int page_size, num_pages, max_pages;   /* paged */
    int append;                            /* --k-new/--v-new: seqlen_q rows per sequence */
    size_t cache_rows;                     /* rows of a cache file: B x capacity or pages x page_size */
    const int32_t *lens, *block_table;     /* into seqlens, table */
} run_cache_inputs;

/* Reads and cross-checks every file of a cache run: dtypes, shapes (Hq a
 * multiple of Hkv, one length per sequence, the new rows shaped like
 * (B, Sq, Hkv, D) in Q's layout), lengths (plus the new rows) within the
 * cache and the pages they use inside the pool. 0, or -1 after a one-line
 * message naming the file and the problem. */
int run_cache_load(const run_options *options, run_cache_inputs *inputs);
void run_cache_free(run_cache_inputs *inputs);

/* The keys sequence b attends to: its cached rows plus the new ones. */
static inline int run_cache_attended(const run_cache_inputs *in, int b) {
    return in->lens[b] + (in->append ? in->desc.seqlen_q : 0);
}

/* Row `row` of sequence b: its index among the cache file's cache_rows
 * rows of Hkv x D elements (through the block table when paged). */
size_t run_cache_row(const run_cache_inputs *inputs, int b, int row);

#endif
