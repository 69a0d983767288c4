// kv_append.cl: writes a call's new K and V rows into its KV cache (flashcl_forward_kv_cache) before the
// attention reads them: rows cache_seqlens[b] .. cache_seqlens[b] + seqlen_q - 1 of sequence b.
//
// Macros taken (host passes them with -D):
//   FLASHCL_DTYPE     storage type; elements are copied bit for bit
//   FLASHCL_KV_PAGED  1: row j of sequence b is row j % page_size of page block_table[b * max_pages + j / page_size]
//
// One work-item per element of the new rows (batch, seqlen_q, heads_kv, head_dim), K and V alike; consecutive
// work-items take consecutive elements of a row.

#ifndef FLASHCL_KV_PAGED
#define FLASHCL_KV_PAGED 0
#endif

#if FLASHCL_DTYPE == 0
typedef uint bits_t; // float copied as its bits: no rounding, NaN payloads kept
#else
typedef ushort bits_t; // half and bfloat16 alike
#endif

#if FLASHCL_KV_PAGED
#define APPEND_PAGED_PARAMS , __global const int *block_table, int max_pages, int page_size
#else
#define APPEND_PAGED_PARAMS
#endif

__kernel void flashcl_kv_append(__global const bits_t *k_new, ulong kn_offset, ulong kn_stride_b, ulong kn_stride_h,
                                ulong kn_stride_s, __global const bits_t *v_new, ulong vn_offset, ulong vn_stride_b,
                                ulong vn_stride_h, ulong vn_stride_s, __global bits_t *k, ulong k_offset,
                                ulong k_stride_b, ulong k_stride_h, ulong k_stride_s, __global bits_t *v,
                                ulong v_offset, ulong v_stride_b, ulong v_stride_h, ulong v_stride_s,
                                __global const int *cache_seqlens, int batch, int seqlen_q, int heads_kv,
                                int head_dim APPEND_PAGED_PARAMS) {
    const ulong index = get_global_id(0);
    const ulong total = (ulong)batch * (ulong)seqlen_q * (ulong)heads_kv * (ulong)head_dim;
    if (index >= total) return;
    ulong t = index;
    const int d = (int)(t % (ulong)head_dim);
    t /= (ulong)head_dim;
    const int h = (int)(t % (ulong)heads_kv);
    t /= (ulong)heads_kv;
    const int i = (int)(t % (ulong)seqlen_q);
    const int b = (int)(t / (ulong)seqlen_q);
    const int row = cache_seqlens[b] + i;
#if FLASHCL_KV_PAGED
    const ulong page = (ulong)block_table[(ulong)b * (ulong)max_pages + (ulong)(row / page_size)];
    const ulong k_at = k_offset + page * k_stride_b + (ulong)h * k_stride_h + (ulong)(row % page_size) * k_stride_s;
    const ulong v_at = v_offset + page * v_stride_b + (ulong)h * v_stride_h + (ulong)(row % page_size) * v_stride_s;
#else
    const ulong k_at = k_offset + (ulong)b * k_stride_b + (ulong)h * k_stride_h + (ulong)row * k_stride_s;
    const ulong v_at = v_offset + (ulong)b * v_stride_b + (ulong)h * v_stride_h + (ulong)row * v_stride_s;
#endif
    k[k_at + (ulong)d] = k_new[kn_offset + (ulong)b * kn_stride_b + (ulong)h * kn_stride_h + (ulong)i * kn_stride_s + (ulong)d];
    v[v_at + (ulong)d] = v_new[vn_offset + (ulong)b * vn_stride_b + (ulong)h * vn_stride_h + (ulong)i * vn_stride_s + (ulong)d];
}
