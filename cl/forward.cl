// forward.cl: the fused FlashAttention forward pass (tiled QK^T, online softmax, PV) for one head block.
//
// Macros taken (host passes them with -D):
//   HEAD_DIM   head dimension D (1..256)
//   BLOCK_Q    query rows per work-group
//   BLOCK_K    key/value rows per step of the inner loop
//   THREADS_Q  work-items along query rows (BLOCK_Q % THREADS_Q == 0)
//   THREADS_K  work-items along keys and the head dimension (BLOCK_K % THREADS_K == 0)
//   FLASHCL_SPLIT_KV  1: split-KV (decode) mode: work-group (query block,
//              batch x head, split) takes keys [split * split_keys, + split_keys)
//              only and writes its unnormalised partial O (float) to part_o
//              and its row maximum and sum to part_stats; cl/split_combine.cl
//              merges the splits. Dense calls (causal allowed), the score
//              modifiers and the bias only.
//
// Work-item (tq, tk) owns query rows tq + i*THREADS_Q and, of each row, the
// scores of keys tk + j*THREADS_K and the outputs of dims OUT_DIM(j) (groups
// of four adjacent dims when DIMS_PER_ITEM allows, read as one float4 of V).
// Neighbouring work-items (consecutive tk) share their rows, so their Q and P
// reads from local memory are broadcasts; each work-item's register block of
// ROWS_PER_ITEM rows is what makes the kernel FMA-bound rather than bound by
// local-memory reads. Q and P are read four floats at a time.
// Per key block: load K, V; scores in registers; row maxima through a small
// local reduction; P = exp(S - m) to local; O = alpha*O + P V in registers.
// The score matrix never leaves local memory.

#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif
#ifndef BLOCK_Q
#define BLOCK_Q 32
#endif
#ifndef BLOCK_K
#define BLOCK_K 32
#endif
#ifndef THREADS_Q
#define THREADS_Q 8
#endif
#ifndef THREADS_K
#define THREADS_K 8
#endif

#if HEAD_DIM < 1 || HEAD_DIM > 256
#error "HEAD_DIM must be in 1..256"
#endif
#if BLOCK_Q % THREADS_Q != 0 || BLOCK_K % THREADS_K != 0
#error "BLOCK_Q and BLOCK_K must be multiples of THREADS_Q and THREADS_K"
#endif

#define WG_SIZE (THREADS_Q * THREADS_K)
#define ROWS_PER_ITEM (BLOCK_Q / THREADS_Q)
#define KEYS_PER_ITEM (BLOCK_K / THREADS_K)
#define DIM_PADDED (((HEAD_DIM + THREADS_K - 1) / THREADS_K) * THREADS_K)
#define DIMS_PER_ITEM (DIM_PADDED / THREADS_K)
#define ROUND4(n) ((((n) + 3) / 4) * 4)
// Row strides: multiples of 4 so rows start 16-byte aligned for float4
// reads, plus 4 so consecutive rows start on different banks.
#define Q_STRIDE (ROUND4(DIM_PADDED) + 4)
#define K_STRIDE (ROUND4(DIM_PADDED) + 4)
#define V_STRIDE DIM_PADDED
#define P_STRIDE (ROUND4(BLOCK_K) + 4)
#define R_STRIDE (ROUND4(THREADS_K) + 4)
#define DIM_QUADS (DIM_PADDED / 4)   // full float4 steps over the head dim
// The product with V runs over whole float4s of keys: a key block that is
// not a multiple of 4 is padded with zero P columns and zero V rows (set once;
// nothing writes them later), so there is no scalar remainder loop. Mesa
// rusticl 22.3 miscompiled that loop when one work-item spans the keys
// (threads_k 1): O came back 0.
#define KEY_ALLOC ROUND4(BLOCK_K)
#define KEY_QUADS (KEY_ALLOC / 4)
#define PART_QUADS (THREADS_K / 4)
// Output dims of a work-item: four adjacent dims per float4 group, groups
// THREADS_K*4 apart, so a float4 read of V by consecutive work-items is
// consecutive in local memory; otherwise one dim every THREADS_K.
#define DIM_GROUPS (DIMS_PER_ITEM % 4 == 0)
#if DIM_GROUPS
#define OUT_DIM(j) (((j) / 4) * (4 * THREADS_K) + tk * 4 + ((j) % 4))
#else
#define OUT_DIM(j) (tk + (j) * THREADS_K)
#endif

// Loads rows [row0, row0 + ROWS) of one head into local memory, zero-filling
// rows past `rows` and dims past HEAD_DIM so padded lanes contribute nothing.
#define LOAD_TILE(dst, dst_stride, src, base, stride_seq, row0, rows, ROWS)                      \
    for (int e = lid; e < (ROWS) * DIM_PADDED; e += WG_SIZE) {                                 \
        int r = e / DIM_PADDED, d = e - r * DIM_PADDED;                                        \
        int row = (row0) + r;                                                                  \
        float x = 0.0f;                                                                        \
        if (row < (rows) && d < HEAD_DIM) x = LOAD(src, (base) + (ulong)row * (stride_seq) + d); \
        (dst)[r * (dst_stride) + d] = x;                                                       \
    }

// K and V blocks go through registers: the next block's global loads are
// issued before the current block is computed, so their latency overlaps
// the arithmetic. Loads are branch-free (an out-of-range element reads the
// head's first element and is replaced by 0) so they issue back to back.
// KV_VEC4 (set by the host only for float data whose K/V offsets and
// strides are multiples of 4 and HEAD_DIM % 4 == 0) reads float4s.
#ifndef KV_VEC4
#define KV_VEC4 0
#endif
#if KV_VEC4 && (FLASHCL_DTYPE != 0 || HEAD_DIM % 4 != 0 || DIM_PADDED != HEAD_DIM)
#error "KV_VEC4 needs float data and HEAD_DIM a multiple of 4 and of THREADS_K"
#endif
#define KV_WIDTH (KV_VEC4 ? 4 : 1)
#define KV_ELEMS (BLOCK_K * DIM_PADDED / KV_WIDTH)
#define KV_LOADS_PER_ITEM ((KV_ELEMS + WG_SIZE - 1) / WG_SIZE)
#if KV_VEC4
typedef float4 kv_t;
#define KV_LOAD(src, index) (*(__global const float4 *)((src) + (index)))
#define KV_STORE(dst, index, x) (*(__local float4 *)((dst) + (index)) = (x))
#define KV_ZERO ((float4)(0.0f))
#else
typedef float kv_t;
#define KV_LOAD(src, index) LOAD(src, index)
#define KV_STORE(dst, index, x) ((dst)[index] = (x))
#define KV_ZERO 0.0f
#endif
#define FETCH_KV(buf, src, base, stride_seq, row0)                                          \
    for (int t = 0; t < KV_LOADS_PER_ITEM; ++t) {                                          \
        const int e = lid + t * WG_SIZE;                                                   \
        const int r = e / (DIM_PADDED / KV_WIDTH), d = (e - r * (DIM_PADDED / KV_WIDTH)) * KV_WIDTH; \
        const int row = (row0) + r;                                                        \
        const bool ok = e < KV_ELEMS && row < seqlen_k && d < HEAD_DIM;                    \
        const kv_t x = KV_LOAD(src, (base) + (ok ? (ulong)row * (stride_seq) + d : 0));    \
        (buf)[t] = ok ? x : KV_ZERO;                                                       \
    }
#define STORE_KV(dst, dst_stride, buf)                                                      \
    for (int t = 0; t < KV_LOADS_PER_ITEM; ++t) {                                          \
        const int e = lid + t * WG_SIZE;                                                   \
        const int r = e / (DIM_PADDED / KV_WIDTH), d = (e - r * (DIM_PADDED / KV_WIDTH)) * KV_WIDTH; \
        if (KV_ELEMS % WG_SIZE == 0 || e < KV_ELEMS) KV_STORE(dst, r * (dst_stride) + d, (buf)[t]); \
    }

#if FLASHCL_SPLIT_KV
#if FLASHCL_SPARSE || FLASHCL_DROPOUT || FLASHCL_VARLEN
#error "FLASHCL_SPLIT_KV takes dense calls only (causal allowed)"
#endif
#define FLASHCL_SPLIT_PARAMS , __global float *part_o, __global float2 *part_stats, int split_keys
#else
#define FLASHCL_SPLIT_PARAMS
#endif

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void flashcl_forward(
    __global const storage_t *q, ulong q_offset, ulong q_stride_b, ulong q_stride_h, ulong q_stride_s,
    __global const storage_t *k, ulong k_offset, ulong k_stride_b, ulong k_stride_h, ulong k_stride_s,
    __global const storage_t *v, ulong v_offset, ulong v_stride_b, ulong v_stride_h, ulong v_stride_s,
    __global storage_t *o, ulong o_offset, ulong o_stride_b, ulong o_stride_h, ulong o_stride_s,
    __global float *lse, ulong lse_offset, ulong lse_stride_b, ulong lse_stride_h, ulong lse_stride_s,
    int write_lse, int heads_q, int group_size, int seqlen_q, int seqlen_k, float scale, int causal
    FLASHCL_SPLIT_PARAMS FLASHCL_FEATURE_PARAMS) {
    // Declared as float4 so float4 reads are aligned; used through float views.
    __local float4 q_tile4[BLOCK_Q * Q_STRIDE / 4];
    __local float4 k_tile4[BLOCK_K * K_STRIDE / 4];
    __local float4 v_tile4[(KEY_ALLOC * V_STRIDE + 3) / 4];
    __local float4 p_tile4[BLOCK_Q * P_STRIDE / 4];
    __local float4 parts4[BLOCK_Q * R_STRIDE / 4];
    __local float *q_tile = (__local float *)q_tile4;
    __local float *k_tile = (__local float *)k_tile4;
    __local float *v_tile = (__local float *)v_tile4;
    __local float *p_tile = (__local float *)p_tile4;
    __local float *parts = (__local float *)parts4;

    const int lid = (int)get_local_id(0);
    const int tk = lid % THREADS_K;
    const int tq = lid / THREADS_K;
    const int q0 = (int)get_group_id(0) * BLOCK_Q;
    const int bh = (int)get_group_id(1);
    const int b = bh / heads_q;
    const int h = bh - b * heads_q;
    const int hk = h / group_size;
#if FLASHCL_VARLEN
    FLASHCL_VARLEN_SEQUENCE(b);
    if (q0 >= seqlen_q) return; // uniform: this query block is past the sequence
    FLASHCL_VARLEN_VIEW(q, varlen_q_start);
    FLASHCL_VARLEN_VIEW(o, varlen_q_start);
    FLASHCL_VARLEN_VIEW(lse, varlen_q_start);
    FLASHCL_VARLEN_VIEW(k, varlen_k_start);
    FLASHCL_VARLEN_VIEW(v, varlen_k_start);
#endif

    const ulong q_base = q_offset + (ulong)b * q_stride_b + (ulong)h * q_stride_h;
    const ulong k_base = k_offset + (ulong)b * k_stride_b + (ulong)hk * k_stride_h;
    const ulong v_base = v_offset + (ulong)b * v_stride_b + (ulong)hk * v_stride_h;
    const ulong o_base = o_offset + (ulong)b * o_stride_b + (ulong)h * o_stride_h;

    // Bottom-right causal alignment: row i sees keys j <= i + diagonal.
    const int diagonal = seqlen_k - seqlen_q;
#if FLASHCL_ALIBI
    const float alibi_slope = FLASHCL_ALIBI_SLOPE(b, h);
#endif
#if FLASHCL_BIAS
    const ulong bias_base = FLASHCL_BIAS_BASE(b, h);
#endif
    int key_end = seqlen_k;
    if (causal) key_end = clamp(q0 + BLOCK_Q + diagonal, 0, seqlen_k); // later blocks are fully masked
    int key_first = 0; // the first key block of this work-group (a multiple of BLOCK_K)
#if FLASHCL_SPLIT_KV
    // This split's chunk of the keys: split_keys is a multiple of BLOCK_K,
    // so its blocks are the unsplit kernel's blocks. A chunk past key_end
    // sees no key and writes an empty partial (O = 0, LSE = -inf).
    const int split = (int)get_group_id(2);
    key_first = split * split_keys;
    key_end = min(key_end, key_first + split_keys);
#endif
#if FLASHCL_SPARSE
    // Key blocks outside the band of this group's rows are never loaded;
    // blocks start at multiples of BLOCK_K so they match the tile mask.
    const int q_last = min(q0 + BLOCK_Q, seqlen_q) - 1;
    int key_begin = 0;
#if FLASHCL_WINDOW
    key_begin = clamp(q0 + diagonal - window_left, 0, seqlen_k) / BLOCK_K * BLOCK_K;
    key_end = min(key_end, clamp(q_last + diagonal + window_right + 1, 0, seqlen_k));
#endif
#if FLASHCL_BLOCK_MASK
    const ulong mask_head = mask_offset + (ulong)h * mask_stride_h;
    __global const uchar *tile_row = tile_mask + (ulong)h * tile_stride_h + (ulong)(q0 / BLOCK_Q) * (ulong)tile_cols;
    // Every work-item reads the same entries: the skip is uniform.
#define FLASHCL_NEXT_TILE(k) \
    for (; (k) < key_end && tile_row[(k) / BLOCK_K] == 0; (k) += BLOCK_K) {}
#else
#define FLASHCL_NEXT_TILE(k)
#endif
    FLASHCL_NEXT_TILE(key_begin);
#endif

    LOAD_TILE(q_tile, Q_STRIDE, q, q_base, q_stride_s, q0, seqlen_q, BLOCK_Q);
#if KEY_ALLOC != BLOCK_K
    // The padding keys of the product with V (see KEY_ALLOC); the first key
    // block's barrier orders these writes before any read.
    for (int e = lid; e < (KEY_ALLOC - BLOCK_K) * V_STRIDE; e += WG_SIZE) v_tile[BLOCK_K * V_STRIDE + e] = 0.0f;
    for (int e = lid; e < BLOCK_Q * (KEY_ALLOC - BLOCK_K); e += WG_SIZE) {
        const int r = e / (KEY_ALLOC - BLOCK_K);
        p_tile[r * P_STRIDE + BLOCK_K + (e - r * (KEY_ALLOC - BLOCK_K))] = 0.0f;
    }
#endif

    float acc[ROWS_PER_ITEM][DIMS_PER_ITEM];
    // row_sum holds the sum of this work-item's own P entries of each row;
    // the THREADS_K partial sums are added once, after the last key block.
    float row_max[ROWS_PER_ITEM], row_sum[ROWS_PER_ITEM];
    for (int i = 0; i < ROWS_PER_ITEM; ++i) {
        row_max[i] = -INFINITY;
        row_sum[i] = 0.0f;
        for (int j = 0; j < DIMS_PER_ITEM; ++j) acc[i][j] = 0.0f;
    }

    kv_t k_next[KV_LOADS_PER_ITEM], v_next[KV_LOADS_PER_ITEM];
#if FLASHCL_SPARSE
    if (key_begin < key_end) {
        FETCH_KV(k_next, k, k_base, k_stride_s, key_begin);
        FETCH_KV(v_next, v, v_base, v_stride_s, key_begin);
    }
    int next_k0 = key_begin;
    for (int k0 = key_begin; k0 < key_end; k0 = next_k0) {
        next_k0 = k0 + BLOCK_K;
        FLASHCL_NEXT_TILE(next_k0);
#define NEXT_K0 next_k0
#else
    if (key_first < key_end) {
        FETCH_KV(k_next, k, k_base, k_stride_s, key_first);
        FETCH_KV(v_next, v, v_base, v_stride_s, key_first);
    }
    for (int k0 = key_first; k0 < key_end; k0 += BLOCK_K) {
#define NEXT_K0 (k0 + BLOCK_K)
#endif
        barrier(CLK_LOCAL_MEM_FENCE); // the previous block's readers are done with the tiles
        STORE_KV(k_tile, K_STRIDE, k_next);
        STORE_KV(v_tile, V_STRIDE, v_next);
        barrier(CLK_LOCAL_MEM_FENCE);
        if (NEXT_K0 < key_end) { // uniform: prefetch the next block
            FETCH_KV(k_next, k, k_base, k_stride_s, NEXT_K0);
            FETCH_KV(v_next, v, v_base, v_stride_s, NEXT_K0);
        }

        float s[ROWS_PER_ITEM][KEYS_PER_ITEM];
        for (int i = 0; i < ROWS_PER_ITEM; ++i)
            for (int j = 0; j < KEYS_PER_ITEM; ++j) s[i][j] = 0.0f;
        for (int d4 = 0; d4 < DIM_QUADS; ++d4) {
            float4 kd[KEYS_PER_ITEM];
            for (int j = 0; j < KEYS_PER_ITEM; ++j) kd[j] = k_tile4[((tk + j * THREADS_K) * K_STRIDE) / 4 + d4];
            for (int i = 0; i < ROWS_PER_ITEM; ++i) {
                const float4 qd = q_tile4[((tq + i * THREADS_Q) * Q_STRIDE) / 4 + d4];
                for (int j = 0; j < KEYS_PER_ITEM; ++j) { // one fused multiply-add per product
                    s[i][j] += qd.x * kd[j].x;
                    s[i][j] += qd.y * kd[j].y;
                    s[i][j] += qd.z * kd[j].z;
                    s[i][j] += qd.w * kd[j].w;
                }
            }
        }
        for (int d = DIM_QUADS * 4; d < DIM_PADDED; ++d) { // head dims that are not a multiple of 4
            for (int i = 0; i < ROWS_PER_ITEM; ++i) {
                const float qd = q_tile[(tq + i * THREADS_Q) * Q_STRIDE + d];
                for (int j = 0; j < KEYS_PER_ITEM; ++j) s[i][j] += qd * k_tile[(tk + j * THREADS_K) * K_STRIDE + d];
            }
        }

        // Scale, modify (soft-capping, ALiBi), mask (only blocks that reach
        // past seqlen_k or the causal diagonal need it: a uniform test), and
        // partial row maxima.
        const bool masked_block = k0 + BLOCK_K > seqlen_k || (causal && k0 + BLOCK_K - 1 > q0 + diagonal)
#if FLASHCL_WINDOW
                                  || k0 < q_last + diagonal - window_left ||
                                  k0 + BLOCK_K - 1 > q0 + diagonal + window_right
#endif
#if FLASHCL_BLOCK_MASK
                                  || tile_row[k0 / BLOCK_K] == 2
#endif
#if FLASHCL_BIAS
                                  || true // a -inf bias may hide any pair: every block is tested pair by pair
#endif
            ;
        for (int i = 0; i < ROWS_PER_ITEM; ++i) {
            const int row = q0 + tq + i * THREADS_Q;
            // A visible key lifts the partial maximum to at least -FLT_MAX
            // even when its score is -inf (an overflow) or NaN (which fmax
            // drops): the row maximum stays -inf only for a row that sees no
            // key, the one case written as empty (O = 0, LSE = -inf). Every
            // key of an unmasked block is visible.
            float part = masked_block ? -INFINITY : -FLT_MAX;
            for (int j = 0; j < KEYS_PER_ITEM; ++j) {
                const int col = k0 + tk + j * THREADS_K;
                float x = s[i][j] * scale;
#if FLASHCL_SCORE_MODS
                // Modified before the masks, which then hide what they hide (a hidden pair's value never counts).
                float mod_grad;
                x = FLASHCL_SCORE_MOD(x, mod_grad, alibi_slope, row + diagonal, col);
                (void)mod_grad;
#endif
#if FLASHCL_BIAS
                // After soft-capping, beside ALiBi, before the masks (flash-attn's order).
                const float bias_value = FLASHCL_BIAS_VALUE(bias_base, row, col);
                x += bias_value;
#endif
                if (masked_block) {
#if FLASHCL_SPARSE
                    const bool hidden = col >= seqlen_k || row >= seqlen_q || (causal && col > row + diagonal) ||
                                        !FLASHCL_WINDOW_VISIBLE(row, col) ||
                                        !FLASHCL_BLOCK_VISIBLE(mask_head, row, col);
#else
                    const bool hidden = col >= seqlen_k || (causal && col > row + diagonal);
#endif
                    if (hidden FLASHCL_BIAS_HIDES)
                        x = -INFINITY;
                    else
                        part = fmax(part, -FLT_MAX);
                }
                s[i][j] = x;
                part = fmax(part, x);
            }
            parts[(tq + i * THREADS_Q) * R_STRIDE + tk] = part;
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        // New running maximum; alpha rescales what was accumulated so far. A
        // row with no visible key yet keeps m = -inf, and its "safe" maximum
        // 0 makes both alpha and P exactly 0 instead of NaN.
        float alpha[ROWS_PER_ITEM];
        for (int i = 0; i < ROWS_PER_ITEM; ++i) {
            const int r = tq + i * THREADS_Q;
            float m = row_max[i];
            for (int t4 = 0; t4 < PART_QUADS; ++t4) {
                const float4 x = parts4[(r * R_STRIDE) / 4 + t4];
                m = fmax(m, fmax(fmax(x.x, x.y), fmax(x.z, x.w)));
            }
            for (int t = PART_QUADS * 4; t < THREADS_K; ++t) m = fmax(m, parts[r * R_STRIDE + t]);
            const float m_safe = (m == -INFINITY) ? 0.0f : m;
            // exp(x) as exp2(x * log2(e)), applied to the difference x - m:
            // small for the terms that matter, so the conversion adds almost
            // no error, and m and LSE stay in natural units (the backward
            // recomputes P from this LSE).
            alpha[i] = exp2((row_max[i] - m_safe) * M_LOG2E_F);
            row_max[i] = m;
            float own_sum = 0.0f;
            for (int j = 0; j < KEYS_PER_ITEM; ++j) {
                const float p = exp2((s[i][j] - m_safe) * M_LOG2E_F);
#if FLASHCL_DROPOUT
                // The row sum (and so LSE) counts every probability; only
                // the product with V sees the dropped ones as 0.
                const int keep = flashcl_dropout_keep((ulong)bh, q0 + r, k0 + tk + j * THREADS_K, dropout_threshold,
                                                      seed_lo, seed_hi, dropout_offset);
                p_tile[r * P_STRIDE + tk + j * THREADS_K] = keep ? p : 0.0f;
#else
                p_tile[r * P_STRIDE + tk + j * THREADS_K] = p;
#endif
                own_sum += p;
            }
            row_sum[i] = row_sum[i] * alpha[i] + own_sum;
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        for (int i = 0; i < ROWS_PER_ITEM; ++i)
            for (int j = 0; j < DIMS_PER_ITEM; ++j) acc[i][j] *= alpha[i];
        for (int c4 = 0; c4 < KEY_QUADS; ++c4) {
            float4 vc[DIMS_PER_ITEM];
#if DIM_GROUPS
            // vc[j].x..w = V[4*c4 + 0..3][OUT_DIM(j)]: four float4 row reads
            // per group of four dims, transposed in registers.
            for (int g = 0; g < DIMS_PER_ITEM / 4; ++g) {
                const int col = g * (4 * THREADS_K) + tk * 4;
                const float4 r0 = *(__local const float4 *)&v_tile[(4 * c4) * V_STRIDE + col];
                const float4 r1 = *(__local const float4 *)&v_tile[(4 * c4 + 1) * V_STRIDE + col];
                const float4 r2 = *(__local const float4 *)&v_tile[(4 * c4 + 2) * V_STRIDE + col];
                const float4 r3 = *(__local const float4 *)&v_tile[(4 * c4 + 3) * V_STRIDE + col];
                vc[4 * g + 0] = (float4)(r0.x, r1.x, r2.x, r3.x);
                vc[4 * g + 1] = (float4)(r0.y, r1.y, r2.y, r3.y);
                vc[4 * g + 2] = (float4)(r0.z, r1.z, r2.z, r3.z);
                vc[4 * g + 3] = (float4)(r0.w, r1.w, r2.w, r3.w);
            }
#else
            for (int j = 0; j < DIMS_PER_ITEM; ++j) {
                const int col = OUT_DIM(j);
                vc[j] = (float4)(v_tile[(4 * c4) * V_STRIDE + col], v_tile[(4 * c4 + 1) * V_STRIDE + col],
                                 v_tile[(4 * c4 + 2) * V_STRIDE + col], v_tile[(4 * c4 + 3) * V_STRIDE + col]);
            }
#endif
            for (int i = 0; i < ROWS_PER_ITEM; ++i) {
                const float4 pc = p_tile4[((tq + i * THREADS_Q) * P_STRIDE) / 4 + c4];
                for (int j = 0; j < DIMS_PER_ITEM; ++j) {
                    acc[i][j] += pc.x * vc[j].x;
                    acc[i][j] += pc.y * vc[j].y;
                    acc[i][j] += pc.z * vc[j].z;
                    acc[i][j] += pc.w * vc[j].w;
                }
            }
        }
    }

    // Each row's sum is spread over its THREADS_K work-items: add the parts.
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = 0; i < ROWS_PER_ITEM; ++i) parts[(tq + i * THREADS_Q) * R_STRIDE + tk] = row_sum[i];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = 0; i < ROWS_PER_ITEM; ++i) {
        float l = 0.0f;
        for (int t = 0; t < THREADS_K; ++t) l += parts[(tq + i * THREADS_Q) * R_STRIDE + t];
        row_sum[i] = l;
    }

#if FLASHCL_SPLIT_KV
    // The partial of this split, in float and not normalised (the combine
    // rescales it by exp(m_s - M), as the online softmax rescales a block):
    // rows of (split, batch x head, row), HEAD_DIM floats each, with the
    // row's maximum m_s (-inf: the split saw no key) and sum l_s.
    const ulong part_row0 = ((ulong)split * (ulong)get_num_groups(1) + (ulong)bh) * (ulong)seqlen_q;
    for (int i = 0; i < ROWS_PER_ITEM; ++i) {
        const int row = q0 + tq + i * THREADS_Q;
        if (row >= seqlen_q) continue;
        for (int j = 0; j < DIMS_PER_ITEM; ++j) {
            const int d = OUT_DIM(j);
            if (d < HEAD_DIM) part_o[(part_row0 + (ulong)row) * HEAD_DIM + d] = acc[i][j];
        }
        if (tk == 0) part_stats[part_row0 + (ulong)row] = (float2)(row_max[i], row_sum[i]);
    }
    return;
#endif
    for (int i = 0; i < ROWS_PER_ITEM; ++i) {
        const int row = q0 + tq + i * THREADS_Q;
        if (row >= seqlen_q) continue;
        const float l = row_sum[i];
        // Empty only when no key was visible (see the partial maxima). A
        // NaN sum, or a zero sum (every visible score -inf), is no empty
        // row: 0/0 and acc/NaN give NaN, as IEEE arithmetic does.
        const bool empty = row_max[i] == -INFINITY;
        for (int j = 0; j < DIMS_PER_ITEM; ++j) {
            const int d = OUT_DIM(j);
#if FLASHCL_DROPOUT
            if (d < HEAD_DIM)
                STORE(o, o_base + (ulong)row * o_stride_s + d, empty ? 0.0f : acc[i][j] / l * dropout_scale);
#else
            if (d < HEAD_DIM) STORE(o, o_base + (ulong)row * o_stride_s + d, empty ? 0.0f : acc[i][j] / l);
#endif
        }
        if (write_lse && tk == 0)
            lse[lse_offset + (ulong)b * lse_stride_b + (ulong)h * lse_stride_h + (ulong)row * lse_stride_s] =
                flashcl_row_lse(row_max[i], l);
    }
}
