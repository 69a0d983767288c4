// decode.cl: attention for few query rows against many keys (decode, speculative decoding): one work-group per
// (block of packed query rows, batch x KV head, key chunk), reading each K and V row once for all the query heads
// that share it (GQA packing).
//
// Macros taken (host passes them with -D):
//   HEAD_DIM        head dimension D (1..256)
//   DECODE_ROWS     packed query rows per work-group (1..64)
//   DECODE_KEYS     keys per step of the inner loop (a power of two, 2..128)
//   DECODE_THREADS  work-items per work-group
//   KV_VEC          4: K and V rows read as four-element vectors (offsets,
//                   strides and HEAD_DIM multiples of 4); 1: element by element
//   FLASHCL_SPLIT_KV  1: work-group z takes keys [z * split_keys, + split_keys)
//                   only and writes its unnormalised partial to part_o and
//                   part_stats in the layout cl/split_combine.cl merges
//                   (cl/forward.cl's split-KV layout)
//   FLASHCL_WINDOW  sliding-window mask (the only feature this kernel takes)
//
// Packed rows: the group_size query heads that share KV head hk and the
// seqlen_q query positions form seqlen_q x group_size rows, row p being
// position p / group_size of query head hk * group_size + p % group_size.
// A work-group takes DECODE_ROWS consecutive packed rows, so one pass over
// the keys serves every query head of the group: K and V are read once per
// KV head instead of once per query head.
//
// Decode is bound by the bytes of K and V, so the kernel aims at streaming
// them, not at arithmetic: each step loads DECODE_KEYS rows of K and V with
// all work-items (coalesced), then
//   scores:  work-item pairs (row, key), consecutive work-items on
//            consecutive keys of one row: Q reads are broadcasts, K is kept
//            transposed in local memory so their K reads are consecutive;
//   maxima:  a tree over the step's keys in local memory;
//   P:       exp(S - m) in place;
//   P V:     work-items along the head dimension (consecutive work-items on
//            consecutive dims of one V row), each with the rows r = h, h + H, ...
//            The running maxima, sums and accumulators live in registers;
//            every work-item of a row sums the same P in the same order, so
//            they hold the same sum.
// The numerics follow cl/forward.cl: scores scaled in float, exp(x - m) as
// exp2((x - m) * log2(e)), a visible key lifts the maximum to at least
// -FLT_MAX (the row is empty only when no key is visible), NaN propagates.

#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif
#ifndef DECODE_ROWS
#define DECODE_ROWS 4
#endif
#ifndef DECODE_KEYS
#define DECODE_KEYS 32
#endif
#ifndef DECODE_THREADS
#define DECODE_THREADS 64
#endif
#ifndef KV_VEC
#define KV_VEC 1
#endif
#ifndef FLASHCL_SPLIT_KV
#define FLASHCL_SPLIT_KV 0
#endif

#if HEAD_DIM < 1 || HEAD_DIM > 256
#error "HEAD_DIM must be in 1..256"
#endif
#if DECODE_ROWS < 1 || DECODE_ROWS > 64
#error "DECODE_ROWS must be in 1..64"
#endif
#if DECODE_KEYS < 2 || DECODE_KEYS > 128 || (DECODE_KEYS & (DECODE_KEYS - 1)) != 0
#error "DECODE_KEYS must be a power of two in 2..128"
#endif
#if KV_VEC != 1 && KV_VEC != 4
#error "KV_VEC must be 1 or 4"
#endif
#if KV_VEC == 4 && HEAD_DIM % 4 != 0
#error "KV_VEC 4 needs HEAD_DIM a multiple of 4"
#endif
#if FLASHCL_BLOCK_MASK || FLASHCL_DROPOUT || FLASHCL_VARLEN
#error "the decode kernel takes dense and windowed calls only"
#endif

#define WG DECODE_THREADS
#define ROUND4(n) ((((n) + 3) / 4) * 4)
#define DIM_PAD ROUND4(HEAD_DIM) // Q rows padded to whole float4s (zero-filled)
#define ROW_PAD ROUND4(DECODE_ROWS)
// K transposed: kt[d * KT_STRIDE + key]. An odd stride spreads the
// vector-load stores of one key over banks.
#define KT_STRIDE FLASHCL_ODD_STRIDE(DECODE_KEYS)
// The product with V: PV_DIMS work-items along the head dimension, PV_GROUPS
// groups of them along the rows.
#define PV_DIMS (WG < HEAD_DIM ? WG : HEAD_DIM)
#define PV_GROUPS (WG / PV_DIMS)
#define DIMS_PER_ITEM ((HEAD_DIM + PV_DIMS - 1) / PV_DIMS)
#define ROWS_PER_ITEM ((DECODE_ROWS + PV_GROUPS - 1) / PV_GROUPS)
#define VEC_PER_ROW (HEAD_DIM / KV_VEC)
#define KV_VECS (DECODE_KEYS * VEC_PER_ROW)

#if KV_VEC == 4
#if FLASHCL_DTYPE == 0
#define KV_LOAD4(src, index) (*(__global const float4 *)((src) + (index)))
#elif FLASHCL_DTYPE == 1
#define KV_LOAD4(src, index) vload_half4(0, (src) + (index))
#else
#define KV_LOAD4(src, index) as_float4(convert_uint4(vload4(0, (src) + (index))) << 16)
#endif
#endif

#if FLASHCL_SPLIT_KV
#define DECODE_SPLIT_PARAMS , __global float *part_o, __global float2 *part_stats, int split_keys
#else
#define DECODE_SPLIT_PARAMS
#endif

// Loads keys [k0, k0 + DECODE_KEYS) of K (transposed) and V into local
// memory, zeros past key_end; consecutive work-items read consecutive
// elements of a row.
inline void decode_load_step(__global const storage_t *k, ulong k_base, ulong k_stride_s,
                             __global const storage_t *v, ulong v_base, ulong v_stride_s, int k0, int key_end,
                             __local float *kt, __local float *vs, int lid) {
    for (int e = lid; e < KV_VECS; e += WG) {
        const int key = e / VEC_PER_ROW, d = (e - key * VEC_PER_ROW) * KV_VEC;
        const int row = k0 + key;
        const bool ok = row < key_end;
#if KV_VEC == 4
        float4 kx = (float4)(0.0f), vx = (float4)(0.0f);
        if (ok) {
            kx = KV_LOAD4(k, k_base + (ulong)row * k_stride_s + d);
            vx = KV_LOAD4(v, v_base + (ulong)row * v_stride_s + d);
        }
        kt[(d + 0) * KT_STRIDE + key] = kx.x;
        kt[(d + 1) * KT_STRIDE + key] = kx.y;
        kt[(d + 2) * KT_STRIDE + key] = kx.z;
        kt[(d + 3) * KT_STRIDE + key] = kx.w;
        vstore4(vx, 0, vs + key * HEAD_DIM + d);
#else
        float kx = 0.0f, vx = 0.0f;
        if (ok) {
            kx = LOAD(k, k_base + (ulong)row * k_stride_s + d);
            vx = LOAD(v, v_base + (ulong)row * v_stride_s + d);
        }
        kt[d * KT_STRIDE + key] = kx;
        vs[key * HEAD_DIM + d] = vx;
#endif
    }
}

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void flashcl_decode(
    __global const storage_t *q, ulong q_offset, ulong q_stride_b, ulong q_stride_h, ulong q_stride_s,
    __global const storage_t *k, ulong k_offset, ulong k_stride_b, ulong k_stride_h, ulong k_stride_s,
    __global const storage_t *v, ulong v_offset, ulong v_stride_b, ulong v_stride_h, ulong v_stride_s,
    __global storage_t *o, ulong o_offset, ulong o_stride_b, ulong o_stride_h, ulong o_stride_s,
    __global float *lse, ulong lse_offset, ulong lse_stride_b, ulong lse_stride_h, ulong lse_stride_s,
    int write_lse, int heads_q, int group_size, int seqlen_q, int seqlen_k, float scale, int causal
    DECODE_SPLIT_PARAMS FLASHCL_WINDOW_PARAMS) {
    __local float4 q_tile4[DECODE_ROWS * DIM_PAD / 4];
    __local float kt[HEAD_DIM * KT_STRIDE];
    __local float vs[DECODE_KEYS * HEAD_DIM];
    __local float4 p_tile4[DECODE_KEYS * ROW_PAD / 4]; // S, then P: p_tile[key * ROW_PAD + row]
    __local float red[DECODE_KEYS * ROW_PAD];          // the maxima's tree
    __local float m_run[DECODE_ROWS];                  // each row's running maximum
    __local float *q_tile = (__local float *)q_tile4;
    __local float *p_tile = (__local float *)p_tile4;

    const int lid = (int)get_local_id(0);
    const int packed_rows = seqlen_q * group_size;
    const int p0 = (int)get_group_id(0) * DECODE_ROWS;
    const int bhk = (int)get_group_id(1);
    const int heads_kv = heads_q / group_size;
    const int b = bhk / heads_kv;
    const int hk = bhk - b * heads_kv;
    const ulong k_base = k_offset + (ulong)b * k_stride_b + (ulong)hk * k_stride_h;
    const ulong v_base = v_offset + (ulong)b * v_stride_b + (ulong)hk * v_stride_h;
    const int rows = min(DECODE_ROWS, packed_rows - p0); // the real rows of this group
    // Bottom-right causal alignment: position i sees keys j <= i + diagonal.
    const int diagonal = seqlen_k - seqlen_q;
    const int first_pos = p0 / group_size, last_pos = (p0 + rows - 1) / group_size;

    // The keys any row of the group may see.
    int key_begin = 0, key_end = seqlen_k;
    if (causal) key_end = clamp(last_pos + diagonal + 1, 0, seqlen_k);
#if FLASHCL_WINDOW
    key_begin = clamp(first_pos + diagonal - window_left, 0, seqlen_k);
    key_end = min(key_end, clamp(last_pos + diagonal + window_right + 1, 0, seqlen_k));
#endif
#if FLASHCL_SPLIT_KV
    const int split = (int)get_group_id(2);
    key_begin = max(key_begin, split * split_keys);
    key_end = min(key_end, split * split_keys + split_keys);
#endif

    // Q rows of the group (zero past the real rows and HEAD_DIM).
    for (int e = lid; e < DECODE_ROWS * DIM_PAD; e += WG) {
        const int r = e / DIM_PAD, d = e - r * DIM_PAD;
        float x = 0.0f;
        if (r < rows && d < HEAD_DIM) {
            const int p = p0 + r, pos = p / group_size, h = hk * group_size + (p - pos * group_size);
            x = LOAD(q, q_offset + (ulong)b * q_stride_b + (ulong)h * q_stride_h + (ulong)pos * q_stride_s + d);
        }
        q_tile[e] = x;
    }
    if (lid < DECODE_ROWS) m_run[lid] = -INFINITY; // ordered by the first step's barriers

    // The P V work-item: dims dv + j * PV_DIMS of rows rg + i * PV_GROUPS.
    const int dv = lid % PV_DIMS, rg = lid / PV_DIMS;
    float acc[ROWS_PER_ITEM][DIMS_PER_ITEM], row_max[ROWS_PER_ITEM], row_sum[ROWS_PER_ITEM];
    for (int i = 0; i < ROWS_PER_ITEM; ++i) {
        row_max[i] = -INFINITY;
        row_sum[i] = 0.0f;
        for (int j = 0; j < DIMS_PER_ITEM; ++j) acc[i][j] = 0.0f;
    }

    for (int k0 = key_begin; k0 < key_end; k0 += DECODE_KEYS) {
        barrier(CLK_LOCAL_MEM_FENCE); // the previous step's readers are done with the tiles
        decode_load_step(k, k_base, k_stride_s, v, v_base, v_stride_s, k0, key_end, kt, vs, lid);
        barrier(CLK_LOCAL_MEM_FENCE);

        // Scores of (row, key) pairs, masked.
        for (int e = lid; e < DECODE_ROWS * DECODE_KEYS; e += WG) {
            const int r = e / DECODE_KEYS, key = e - r * DECODE_KEYS;
            float s = 0.0f;
            for (int d4 = 0; d4 < DIM_PAD / 4; ++d4) {
                const float4 qd = q_tile4[r * (DIM_PAD / 4) + d4];
                const int d = d4 * 4;
                s += qd.x * kt[d * KT_STRIDE + key];
                if (d + 1 < HEAD_DIM) s += qd.y * kt[(d + 1) * KT_STRIDE + key];
                if (d + 2 < HEAD_DIM) s += qd.z * kt[(d + 2) * KT_STRIDE + key];
                if (d + 3 < HEAD_DIM) s += qd.w * kt[(d + 3) * KT_STRIDE + key];
            }
            const int col = k0 + key, pos = (p0 + r) / group_size;
            const bool visible = r < rows && col < key_end &&
                                 (!causal || col <= pos + diagonal) && FLASHCL_WINDOW_VISIBLE(pos, col);
            const float x = visible ? s * scale : -INFINITY;
            p_tile[key * ROW_PAD + r] = x;
            // fmax drops NaN and a -inf score would hide a visible key: see
            // the header.
            red[key * ROW_PAD + r] = visible ? fmax(x, -FLT_MAX) : -INFINITY;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int half_keys = DECODE_KEYS / 2; half_keys > 0; half_keys /= 2) {
            for (int e = lid; e < half_keys * DECODE_ROWS; e += WG) {
                const int key = e / DECODE_ROWS, r = e - key * DECODE_ROWS;
                red[key * ROW_PAD + r] = fmax(red[key * ROW_PAD + r], red[(key + half_keys) * ROW_PAD + r]);
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }

        // P = exp(S - m), m the running maximum after this step (m_run:
        // before it); a row that has seen no visible key yet keeps m = -inf
        // and uses 0, so its P is exactly 0, not NaN. red[r] (key 0) now
        // holds the step's maximum of row r.
        for (int e = lid; e < DECODE_ROWS * DECODE_KEYS; e += WG) {
            const int r = e / DECODE_KEYS, key = e - r * DECODE_KEYS;
            const float m = fmax(m_run[r], red[r]);
            const float m_safe = m == -INFINITY ? 0.0f : m;
            p_tile[key * ROW_PAD + r] = exp2((p_tile[key * ROW_PAD + r] - m_safe) * M_LOG2E_F);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        // m_run is next read after the next step's barriers.
        if (lid < DECODE_ROWS) m_run[lid] = fmax(m_run[lid], red[lid]);

        for (int i = 0; i < ROWS_PER_ITEM; ++i) {
            const int r = min(rg + i * PV_GROUPS, DECODE_ROWS - 1); // a padding item repeats the last row
            const float m = fmax(row_max[i], red[r]);
            const float alpha = exp2((row_max[i] - (m == -INFINITY ? 0.0f : m)) * M_LOG2E_F);
            row_max[i] = m;
            row_sum[i] *= alpha;
            for (int j = 0; j < DIMS_PER_ITEM; ++j) acc[i][j] *= alpha;
        }
        for (int key = 0; key < DECODE_KEYS; ++key) {
            float vd[DIMS_PER_ITEM];
            for (int j = 0; j < DIMS_PER_ITEM; ++j) {
                const int d = dv + j * PV_DIMS;
                vd[j] = d < HEAD_DIM ? vs[key * HEAD_DIM + d] : 0.0f;
            }
            for (int i = 0; i < ROWS_PER_ITEM; ++i) {
                const int r = min(rg + i * PV_GROUPS, DECODE_ROWS - 1);
                const float p = p_tile[key * ROW_PAD + r];
                row_sum[i] += p;
                for (int j = 0; j < DIMS_PER_ITEM; ++j) acc[i][j] += p * vd[j];
            }
        }
    }

    const int heads_total = (int)get_num_groups(1) * group_size; // batch x query heads
    for (int i = 0; i < ROWS_PER_ITEM; ++i) {
        const int r = rg + i * PV_GROUPS;
        if (r >= rows) continue;
        const int p = p0 + r, pos = p / group_size, h = hk * group_size + (p - pos * group_size);
#if FLASHCL_SPLIT_KV
        // The split's partial, not normalised: rows (split, batch x head,
        // position) of HEAD_DIM floats, and the row's maximum and sum
        // (maximum -inf: the split saw no key).
        const ulong part_row = ((ulong)split * (ulong)heads_total + (ulong)b * (ulong)heads_q + (ulong)h) *
                                   (ulong)seqlen_q + (ulong)pos;
        for (int j = 0; j < DIMS_PER_ITEM; ++j) {
            const int d = dv + j * PV_DIMS;
            if (d < HEAD_DIM) part_o[part_row * HEAD_DIM + d] = acc[i][j];
        }
        if (dv == 0) part_stats[part_row] = (float2)(row_max[i], row_sum[i]);
#else
        (void)heads_total;
        // Empty only when no key was visible; a zero or NaN sum gives NaN (cl/forward.cl).
        const bool empty = row_max[i] == -INFINITY;
        const ulong o_row = o_offset + (ulong)b * o_stride_b + (ulong)h * o_stride_h + (ulong)pos * o_stride_s;
        for (int j = 0; j < DIMS_PER_ITEM; ++j) {
            const int d = dv + j * PV_DIMS;
            if (d < HEAD_DIM) STORE(o, o_row + d, empty ? 0.0f : acc[i][j] / row_sum[i]);
        }
        if (write_lse && dv == 0)
            lse[lse_offset + (ulong)b * lse_stride_b + (ulong)h * lse_stride_h + (ulong)pos * lse_stride_s] =
                flashcl_row_lse(row_max[i], row_sum[i]);
#endif
    }
}
