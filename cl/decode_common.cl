// decode_common.cl: what the two decode kernels (cl/decode.cl, portable; cl/decode_mma.cl, matrix units) share:
// their work-group's place in the call (packed rows, batch x KV head, key chunk), the keys it may see, and the
// KV cache's row addressing. The host places it right before either kernel file.
//
// Macros taken (host passes them with -D):
//   FLASHCL_SPLIT_KV  1: work-group z takes keys [z * split_keys, + split_keys) only and writes its
//                   unnormalised partial to part_o and part_stats in the layout cl/split_combine.cl merges
//   FLASHCL_KV_CACHE  1: a KV cache (flashcl_forward_kv_cache): sequence b has cache_seqlens[b] + new_rows
//                   keys (seqlen_k is ignored), its query rows being the last seqlen_q positions. A bias
//                   (FLASHCL_BIAS) is then a plane per (b, head) of seqlen_q rows by the cache's key positions
//                   (bias_stride_s apart); key position j of sequence b is column j, and since DECODE_SEQUENCE_KEYS
//                   sets seqlen_k to the sequence's own count, FLASHCL_BIAS_VALUE reads no column past it
//   FLASHCL_KV_PAGED  1: the cache is paged: row j of sequence b is row j % page_size of page
//                   block_table[b * max_pages + j / page_size], pages stride_b apart in K and V
//
// Packed rows: the group_size query heads that share KV head hk and the seqlen_q positions form
// seqlen_q x group_size rows, row p being position p / group_size of query head hk * group_size + p % group_size.

#ifndef FLASHCL_SPLIT_KV
#define FLASHCL_SPLIT_KV 0
#endif
#ifndef FLASHCL_KV_CACHE
#define FLASHCL_KV_CACHE 0
#endif
#ifndef FLASHCL_KV_PAGED
#define FLASHCL_KV_PAGED 0
#endif
#if FLASHCL_KV_PAGED && !FLASHCL_KV_CACHE
#error "FLASHCL_KV_PAGED needs FLASHCL_KV_CACHE"
#endif
#if FLASHCL_BLOCK_MASK || FLASHCL_DROPOUT || FLASHCL_VARLEN
#error "the decode kernels take dense and windowed calls (and the score modifiers and the bias) only"
#endif

#if FLASHCL_SPLIT_KV
#define DECODE_SPLIT_PARAMS , __global float *part_o, __global float2 *part_stats, int split_keys
#else
#define DECODE_SPLIT_PARAMS
#endif
#if FLASHCL_KV_PAGED
#define DECODE_KV_PARAMS \
    , __global const int *cache_seqlens, int new_rows, __global const int *block_table, int max_pages, int page_size
// Element 0 of row `row` of this work-group's sequence and KV head in K or V.
#define KV_ROW(p, row)                                                                                        \
    (p##_offset + (ulong)block_table[(ulong)b * (ulong)max_pages + (ulong)((row) / page_size)] * p##_stride_b + \
     (ulong)hk * p##_stride_h + (ulong)((row) % page_size) * p##_stride_s)
#elif FLASHCL_KV_CACHE
#define DECODE_KV_PARAMS , __global const int *cache_seqlens, int new_rows
#define KV_ROW(p, row) (p##_base + (ulong)(row) * p##_stride_s)
#else
#define DECODE_KV_PARAMS
#define KV_ROW(p, row) (p##_base + (ulong)(row) * p##_stride_s)
#endif

// Both kernels' arguments, in the order src/launch_forward.c sets them (the dense forward's, the split-KV
// partials, the features the decode kernels take, the KV cache).
#define DECODE_KERNEL_PARAMS                                                                                   \
    __global const storage_t *q, ulong q_offset, ulong q_stride_b, ulong q_stride_h, ulong q_stride_s,       \
        __global const storage_t *k, ulong k_offset, ulong k_stride_b, ulong k_stride_h, ulong k_stride_s,   \
        __global const storage_t *v, ulong v_offset, ulong v_stride_b, ulong v_stride_h, ulong v_stride_s,   \
        __global storage_t *o, ulong o_offset, ulong o_stride_b, ulong o_stride_h, ulong o_stride_s,         \
        __global float *lse, ulong lse_offset, ulong lse_stride_b, ulong lse_stride_h, ulong lse_stride_s,   \
        int write_lse, int heads_q, int group_size, int seqlen_q, int seqlen_k, float scale,                 \
        int causal DECODE_SPLIT_PARAMS FLASHCL_WINDOW_PARAMS FLASHCL_SCORE_MOD_PARAMS FLASHCL_BIAS_PARAMS    \
            DECODE_KV_PARAMS

// Declares, at the top of a decode kernel whose work-groups take ROWS_ packed rows: p0 (the first packed row),
// rows (the real ones), b and hk (batch, KV head), k_base and v_base (element 0 of that K and V head), diagonal
// (bottom-right causal alignment: position i sees keys j <= i + diagonal), first_pos and last_pos (the rows'
// positions), and key_begin .. key_end (the keys any of the rows may see, within the split's chunk); with a KV
// cache, sets seqlen_k to the sequence's key count.
#if FLASHCL_KV_CACHE
#define DECODE_SEQUENCE_KEYS seqlen_k = cache_seqlens[b] + new_rows; // its cache and the rows just appended
#else
#define DECODE_SEQUENCE_KEYS
#endif
#if FLASHCL_WINDOW
#define DECODE_WINDOW_KEYS                                                               \
    key_begin = clamp(first_pos + diagonal - window_left, 0, seqlen_k);                 \
    key_end = min(key_end, clamp(last_pos + diagonal + window_right + 1, 0, seqlen_k));
#else
#define DECODE_WINDOW_KEYS (void)first_pos;
#endif
#if FLASHCL_SPLIT_KV
#define DECODE_SPLIT_KEYS                                      \
    const int split = (int)get_group_id(2);                    \
    key_begin = max(key_begin, split * split_keys);            \
    key_end = min(key_end, split * split_keys + split_keys);
#else
#define DECODE_SPLIT_KEYS
#endif
#define DECODE_WORK_GROUP(ROWS_)                                                                     \
    const int p0 = (int)get_group_id(0) * (ROWS_);                                                   \
    const int heads_kv = heads_q / group_size;                                                       \
    const int b = (int)get_group_id(1) / heads_kv;                                                   \
    const int hk = (int)get_group_id(1) - b * heads_kv;                                              \
    const ulong k_base = k_offset + (ulong)b * k_stride_b + (ulong)hk * k_stride_h;                  \
    const ulong v_base = v_offset + (ulong)b * v_stride_b + (ulong)hk * v_stride_h;                  \
    (void)k_base, (void)v_base; /* unused with a paged cache */                                     \
    const int rows = min((ROWS_), seqlen_q * group_size - p0);                                       \
    DECODE_SEQUENCE_KEYS                                                                             \
    const int diagonal = seqlen_k - seqlen_q;                                                        \
    const int first_pos = p0 / group_size, last_pos = (p0 + rows - 1) / group_size;                 \
    int key_begin = 0, key_end = seqlen_k;                                                           \
    if (causal) key_end = clamp(last_pos + diagonal + 1, 0, seqlen_k);                               \
    DECODE_WINDOW_KEYS                                                                               \
    DECODE_SPLIT_KEYS
