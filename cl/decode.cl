// decode.cl: attention for few query rows against many keys (decode, speculative decoding): one work-group per
// (block of packed query rows, batch x KV head, key chunk), reading each K and V row once for all the query heads
// that share it (GQA packing).
//
// Macros taken (host passes them with -D):
//   HEAD_DIM        head dimension D (1..256)
//   DECODE_ROWS     packed query rows per work-group (1..16)
//   DECODE_THREADS  work-items per work-group, and keys per step (>= HEAD_DIM, a multiple of 4)
//   KV_VEC          8: K and V rows read 8 (or, for V, DV_VEC) elements at a time through 16-byte (8-byte)
//                   loads (HEAD_DIM a multiple of 8, K's and V's offsets and strides 16-byte aligned);
//                   1: element by element
//   DV_VEC          dims of the output each work-item of the product with V owns: 8 or 4 with KV_VEC 8, else 1
//   FLASHCL_WINDOW  sliding-window mask (the only mask this kernel takes)
//   FLASHCL_SOFTCAP, FLASHCL_ALIBI  the score modifiers (cl/common.cl), applied where the scores are scaled
//   FLASHCL_BIAS (FLASHCL_BIAS_F32)  the additive bias (cl/common.cl), added after the score modifiers and
//                   before the masks; each packed row reads the plane of its own (batch, query head) at its own
//                   position, work-item t key k0 + t of every row (consecutive work-items, consecutive keys;
//                   with a KV cache, k0 + t is the key's position in its sequence: cl/decode_common.cl)
//   FLASHCL_SPLIT_KV, FLASHCL_KV_CACHE, FLASHCL_KV_PAGED  as cl/decode_common.cl (placed before this file) says
//
// Packed rows: the group_size query heads that share KV head hk and the seqlen_q positions form
// seqlen_q x group_size rows, row p being position p / group_size of query head hk * group_size + p % group_size.
// A work-group takes DECODE_ROWS consecutive packed rows, so one pass over the keys serves every query head of
// the group: K and V are read once per KV head instead of once per query head.
//
// Decode is bound by the bytes of K and V. Neither goes through local memory (staging them would cost a store
// and a load per element and limit the work-groups per compute unit); each step of DECODE_THREADS keys:
//   scores: work-item t takes key k0 + t and reads its K row straight from global memory, 16 bytes at a
//           time, against every row of Q (local memory, broadcast reads): R scores in registers;
//   maxima: each row's step maximum from the work-items' candidates in local memory (one work-item per row);
//   P:      work-item t turns its scores into P = exp(S - m), keeps its share of each row's sum, and puts P
//           in local memory;
//   P V:    work-items along the head dimension, DV_VEC dims each, read the step's V rows (consecutive
//           work-items, consecutive elements: coalesced), a group of them every PV_GROUPS-th key, and
//           accumulate every row's output in registers; the groups' sums are added at the end.
// Global loads are issued in batches before the arithmetic that uses them, so several are in flight per
// work-item (a load per loop iteration would wait out the memory latency each time).
// Two barriers per step. The numerics follow cl/forward.cl: scores scaled in float, exp(x - m) as
// exp2((x - m) * log2(e)), a visible key lifts the maximum to at least -FLT_MAX (the row is empty only when no
// key is visible), NaN propagates.

#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif
#ifndef DECODE_ROWS
#define DECODE_ROWS 4
#endif
#ifndef DECODE_THREADS
#define DECODE_THREADS 128
#endif
#ifndef KV_VEC
#define KV_VEC 1
#endif
#ifndef DV_VEC
#define DV_VEC 1
#endif

#if HEAD_DIM < 1 || HEAD_DIM > 256
#error "HEAD_DIM must be in 1..256"
#endif
#if DECODE_ROWS < 1 || DECODE_ROWS > 16
#error "DECODE_ROWS must be in 1..16"
#endif
#if DECODE_THREADS < HEAD_DIM || DECODE_THREADS % 4 != 0 || DECODE_THREADS < DECODE_ROWS
#error "DECODE_THREADS must be a multiple of 4, at least HEAD_DIM and DECODE_ROWS"
#endif
#if KV_VEC != 1 && KV_VEC != 8
#error "KV_VEC must be 1 or 8"
#endif
#if KV_VEC == 8 && HEAD_DIM % 8 != 0
#error "KV_VEC 8 needs HEAD_DIM a multiple of 8"
#endif
#if !(DV_VEC == 1 || (KV_VEC == 8 && (DV_VEC == 4 || DV_VEC == 8)))
#error "DV_VEC must be 1, or 4 or 8 with KV_VEC 8"
#endif

#define WG DECODE_THREADS
#define ROWS DECODE_ROWS
#define ROW_PAD ((ROWS + 3) / 4 * 4)
#define DIM_PAD ((HEAD_DIM + 7) / 8 * 8) // Q rows padded to whole float8s (zero-filled)
// The product with V: DV_ITEMS work-items along the head dimension, PV_GROUPS groups of them taking every
// PV_GROUPS-th key of a step (their sums added once, at the end).
#define DV_ITEMS (HEAD_DIM / DV_VEC)
// At most 16 groups: their sums are added one group at a time at the end.
#define PV_GROUPS_FIT (WG / DV_ITEMS)
#define PV_GROUPS (PV_GROUPS_FIT < 16 ? PV_GROUPS_FIT : 16)
// Loads issued together: chunks of 8 of a K row, V rows of a group.
#define K_CHUNKS (HEAD_DIM / 8)
#define K_BATCH 8
#define V_BATCH 8

#if KV_VEC == 8
// Eight elements of a row from one 16-byte load (the host checked the alignment), kept raw until used so a
// batch of loads costs few registers; four from one 8-byte load.
#if FLASHCL_DTYPE == 0
typedef float8 raw8_t;
inline raw8_t decode_load8(__global const storage_t *p, ulong index) {
    __global const float4 *x = (__global const float4 *)(p + index);
    return (float8)(x[0], x[1]);
}
inline float8 decode_unpack8(raw8_t x) { return x; }
inline float4 decode_load4(__global const storage_t *p, ulong index) { return *(__global const float4 *)(p + index); }
#elif FLASHCL_DTYPE == 1
typedef uint4 raw8_t;
inline raw8_t decode_load8(__global const storage_t *p, ulong index) { return *(__global const uint4 *)(p + index); }
inline float8 decode_unpack8(raw8_t bits) { return vload_half8(0, (__private const half *)&bits); }
inline float4 decode_load4(__global const storage_t *p, ulong index) {
    const uint2 bits = *(__global const uint2 *)(p + index);
    return vload_half4(0, (__private const half *)&bits);
}
#else
typedef uint4 raw8_t;
inline raw8_t decode_load8(__global const storage_t *p, ulong index) { return *(__global const uint4 *)(p + index); }
inline float8 decode_unpack8(raw8_t b) {
    return (float8)(as_float(b.x << 16), as_float(b.x & 0xffff0000u), as_float(b.y << 16),
                    as_float(b.y & 0xffff0000u), as_float(b.z << 16), as_float(b.z & 0xffff0000u),
                    as_float(b.w << 16), as_float(b.w & 0xffff0000u));
}
inline float4 decode_load4(__global const storage_t *p, ulong index) {
    const uint2 b = *(__global const uint2 *)(p + index);
    return (float4)(as_float(b.x << 16), as_float(b.x & 0xffff0000u), as_float(b.y << 16),
                    as_float(b.y & 0xffff0000u));
}
#endif
#endif

__kernel __attribute__((reqd_work_group_size(WG, 1, 1))) void flashcl_decode(DECODE_KERNEL_PARAMS) {
    __local float4 q_tile4[ROWS * DIM_PAD / 4];
    // The step's maximum candidates, [row][key]; at the end the output groups' sums, then the rows' sums. A
    // plain float array read with vload4: Mesa llvmpipe lost rows past the first that were stored and read
    // back through a float view of a small float4 array (head dim 1, two rows).
    __local float cand[ROWS * WG];
    __local float4 p_tile4[WG * ROW_PAD / 4]; // P, [key][row]
    __local float m_run[ROWS], m_use[ROWS], alpha_tile[ROWS];
    __local float *q_tile = (__local float *)q_tile4;
    __local float *p_tile = (__local float *)p_tile4;

    const int lid = (int)get_local_id(0);
    DECODE_WORK_GROUP(ROWS) // cl/decode_common.cl: p0, rows, b, hk, key_begin .. key_end, ...

    // Q rows of the group (zero past the real rows and HEAD_DIM).
    for (int e = lid; e < ROWS * DIM_PAD; e += WG) {
        const int r = e / DIM_PAD, d = e - r * DIM_PAD;
        float x = 0.0f;
        if (r < rows && d < HEAD_DIM) {
            const int p = p0 + r, pos = p / group_size, h = hk * group_size + (p - pos * group_size);
            x = LOAD(q, q_offset + (ulong)b * q_stride_b + (ulong)h * q_stride_h + (ulong)pos * q_stride_s + d);
        }
        q_tile[e] = x;
    }
    if (lid < ROWS) m_run[lid] = -INFINITY;
#if FLASHCL_ALIBI
    // Each packed row's head's slope (rows past the real ones take head hk's: never used).
    float row_slope[ROWS];
    for (int r = 0; r < ROWS; ++r) {
        const int p = p0 + min(r, rows - 1), pos = p / group_size;
        row_slope[r] = FLASHCL_ALIBI_SLOPE(b, hk * group_size + (p - pos * group_size));
    }
#endif
#if FLASHCL_BIAS
    // Packed row r's bias plane (its own batch element and query head; rows past the real ones are never read),
    // found again at every key step, a few integer operations: ROWS 64-bit bases kept across the key loop cost
    // the kernel a third of its speed with a bias on the H100 (docs/perf.md, "Decode with a bias").
#define DECODE_BIAS_ROW(r) (p0 + min((r), rows - 1))
#define DECODE_BIAS_ROW_BASE(r) \
    FLASHCL_BIAS_BASE(b, hk * group_size + (DECODE_BIAS_ROW(r) - (DECODE_BIAS_ROW(r) / group_size) * group_size))
#endif
    barrier(CLK_LOCAL_MEM_FENCE);

    // The P V work-item: dims dv * DV_VEC .. + DV_VEC of every row, keys hv, hv + PV_GROUPS, ... of each step.
    const int dv = lid % DV_ITEMS, hv = lid / DV_ITEMS;
    const bool pv_item = hv < PV_GROUPS;
    float acc[ROWS][DV_VEC], own_sum[ROWS];
    for (int r = 0; r < ROWS; ++r) {
        own_sum[r] = 0.0f;
        for (int j = 0; j < DV_VEC; ++j) acc[r][j] = 0.0f;
    }

    for (int k0 = key_begin; k0 < key_end; k0 += WG) {
        // Scores of key k0 + lid against every row.
        const int col = k0 + lid;
#if FLASHCL_BIAS
        // The bias of key col for every row, loaded before the product so that its latency hides behind the
        // K loads and the multiply-adds; only for the pairs the masks leave visible (the rest is never read).
        float bias_pre[ROWS];
        for (int r = 0; r < ROWS; ++r) {
            const int pos = (p0 + r) / group_size;
            const bool shown = r < rows && col < key_end && (!causal || col <= pos + diagonal) &&
                               FLASHCL_WINDOW_VISIBLE(pos, col);
            bias_pre[r] = shown ? FLASHCL_BIAS_VALUE(DECODE_BIAS_ROW_BASE(r), pos, col) : 0.0f;
        }
#endif
        float s[ROWS];
        for (int r = 0; r < ROWS; ++r) s[r] = 0.0f;
        if (col < key_end) {
            const ulong k_row = KV_ROW(k, col);
#if KV_VEC == 8
            for (int c0 = 0; c0 < K_CHUNKS; c0 += K_BATCH) {
                raw8_t raw[K_BATCH];
                for (int u = 0; u < K_BATCH; ++u)
                    if (c0 + u < K_CHUNKS) raw[u] = decode_load8(k, k_row + (ulong)((c0 + u) * 8));
                for (int u = 0; u < K_BATCH; ++u) {
                    if (c0 + u >= K_CHUNKS) break;
                    const float8 kx = decode_unpack8(raw[u]);
                    const int d8 = c0 + u;
                    for (int r = 0; r < ROWS; ++r) {
                        const float4 qa = q_tile4[(r * DIM_PAD) / 4 + 2 * d8];
                        const float4 qb = q_tile4[(r * DIM_PAD) / 4 + 2 * d8 + 1];
                        float x = s[r];
                        x = fma(qa.x, kx.s0, x);
                        x = fma(qa.y, kx.s1, x);
                        x = fma(qa.z, kx.s2, x);
                        x = fma(qa.w, kx.s3, x);
                        x = fma(qb.x, kx.s4, x);
                        x = fma(qb.y, kx.s5, x);
                        x = fma(qb.z, kx.s6, x);
                        s[r] = fma(qb.w, kx.s7, x);
                    }
                }
            }
#else
            for (int d4 = 0; d4 < DIM_PAD / 4; ++d4) {
                // Q through its float4 tile, as above (see cand).
                float kx[4];
                for (int j = 0; j < 4; ++j) kx[j] = 4 * d4 + j < HEAD_DIM ? LOAD(k, k_row + (ulong)(4 * d4 + j)) : 0.0f;
                for (int r = 0; r < ROWS; ++r) {
                    const float4 qd = q_tile4[(r * DIM_PAD) / 4 + d4];
                    float x = fma(qd.x, kx[0], s[r]);
                    x = fma(qd.y, kx[1], x);
                    x = fma(qd.z, kx[2], x);
                    s[r] = fma(qd.w, kx[3], x);
                }
            }
#endif
        }
        // Scale, modify (soft-capping, ALiBi), add the bias and mask; the maximum's candidates (fmax drops NaN
        // and a -inf score would hide a visible key: see the header).
        for (int r = 0; r < ROWS; ++r) {
            const int pos = (p0 + r) / group_size;
#if FLASHCL_BIAS
            // After soft-capping, beside ALiBi, before the masks (cl/forward.cl's order); a -inf bias hides its
            // pair as a mask does, so a row whose every key it hides is empty.
            const float bias_value = bias_pre[r];
#endif
            const bool visible = r < rows && col < key_end && (!causal || col <= pos + diagonal) &&
                                 FLASHCL_WINDOW_VISIBLE(pos, col) FLASHCL_BIAS_KEEPS;
#if FLASHCL_SCORE_MODS
            float mod_grad;
            s[r] = visible ? FLASHCL_SCORE_MOD(s[r] * scale, mod_grad, row_slope[r], pos + diagonal, col)
                                 FLASHCL_BIAS_TERM
                           : -INFINITY;
            (void)mod_grad;
#else
            s[r] = visible ? s[r] * scale FLASHCL_BIAS_TERM : -INFINITY;
#endif
            cand[r * WG + lid] = visible ? fmax(s[r], -FLT_MAX) : -INFINITY;
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        // Each row's running maximum after this step, the factor alpha that rescales what was accumulated,
        // and the maximum P uses (0 for a row that has seen no visible key yet: P exactly 0, not NaN).
        if (lid < ROWS) {
            float m = m_run[lid];
            for (int j = 0; j < WG / 4; ++j) {
                const float4 c = vload4(j, cand + lid * WG);
                m = fmax(m, fmax(fmax(c.x, c.y), fmax(c.z, c.w)));
            }
            const float m_safe = m == -INFINITY ? 0.0f : m;
            alpha_tile[lid] = exp2((m_run[lid] - m_safe) * M_LOG2E_F);
            m_use[lid] = m_safe;
            m_run[lid] = m;
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        for (int r = 0; r < ROWS; ++r) {
            const float p = exp2((s[r] - m_use[r]) * M_LOG2E_F);
            own_sum[r] = fma(own_sum[r], alpha_tile[r], p);
            p_tile[lid * ROW_PAD + r] = p;
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        if (pv_item) {
            for (int r = 0; r < ROWS; ++r)
                for (int j = 0; j < DV_VEC; ++j) acc[r][j] *= alpha_tile[r];
            const int keys = min(WG, key_end - k0);
            for (int kb = hv; kb < keys; kb += PV_GROUPS * V_BATCH) {
                float vx[V_BATCH][DV_VEC];
                for (int u = 0; u < V_BATCH; ++u) {
                    const int key = kb + u * PV_GROUPS;
                    const ulong at = KV_ROW(v, k0 + min(key, keys - 1)) + (ulong)(dv * DV_VEC);
#if DV_VEC == 8
                    const float8 x = decode_unpack8(decode_load8(v, at));
                    vx[u][0] = x.s0, vx[u][1] = x.s1, vx[u][2] = x.s2, vx[u][3] = x.s3;
                    vx[u][4] = x.s4, vx[u][5] = x.s5, vx[u][6] = x.s6, vx[u][7] = x.s7;
#elif DV_VEC == 4
                    const float4 x = decode_load4(v, at);
                    vx[u][0] = x.x, vx[u][1] = x.y, vx[u][2] = x.z, vx[u][3] = x.w;
#else
                    vx[u][0] = LOAD(v, at);
#endif
                }
                for (int u = 0; u < V_BATCH; ++u) {
                    const int key = kb + u * PV_GROUPS;
                    if (key >= keys) break;
                    for (int r4 = 0; r4 < ROW_PAD / 4; ++r4) {
                        const float4 p = p_tile4[(key * ROW_PAD) / 4 + r4];
                        for (int j = 0; j < DV_VEC; ++j) {
                            acc[4 * r4][j] = fma(p.x, vx[u][j], acc[4 * r4][j]);
                            if (4 * r4 + 1 < ROWS) acc[4 * r4 + 1][j] = fma(p.y, vx[u][j], acc[4 * r4 + 1][j]);
                            if (4 * r4 + 2 < ROWS) acc[4 * r4 + 2][j] = fma(p.z, vx[u][j], acc[4 * r4 + 2][j]);
                            if (4 * r4 + 3 < ROWS) acc[4 * r4 + 3][j] = fma(p.w, vx[u][j], acc[4 * r4 + 3][j]);
                        }
                    }
                }
            }
        }
        // The next step's first barrier orders its writes of cand, m_use, alpha_tile and p_tile after these
        // reads.
    }

    // The output groups' sums, one group at a time through cand (rows x HEAD_DIM fits: WG >= HEAD_DIM); then
    // each row's sum, the work-items' shares, added in a fixed order.
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int g = 1; g < PV_GROUPS; ++g) {
        if (hv == g)
            for (int r = 0; r < ROWS; ++r)
                for (int j = 0; j < DV_VEC; ++j) cand[r * HEAD_DIM + dv * DV_VEC + j] = acc[r][j];
        barrier(CLK_LOCAL_MEM_FENCE);
        if (hv == 0)
            for (int r = 0; r < ROWS; ++r)
                for (int j = 0; j < DV_VEC; ++j) acc[r][j] += cand[r * HEAD_DIM + dv * DV_VEC + j];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int r = 0; r < ROWS; ++r) cand[r * WG + lid] = own_sum[r];
    barrier(CLK_LOCAL_MEM_FENCE);
    if (hv != 0) return; // no barrier follows
    const int heads_total = (int)get_num_groups(1) * group_size; // batch x query heads
    for (int r = 0; r < ROWS; ++r) {
        if (r >= rows) break; // a constant bound keeps acc[] in registers
        float l = 0.0f;
        for (int j = 0; j < WG / 4; ++j) {
            const float4 c = vload4(j, cand + r * WG);
            l += (c.x + c.y) + (c.z + c.w);
        }
        const float m = m_run[r];
        const int p = p0 + r, pos = p / group_size, h = hk * group_size + (p - pos * group_size);
#if FLASHCL_SPLIT_KV
        // The split's partial, not normalised: rows (split, batch x head, position) of HEAD_DIM floats, and
        // the row's maximum and sum (maximum -inf: the split saw no key).
        const ulong part_row = ((ulong)split * (ulong)heads_total + (ulong)b * (ulong)heads_q + (ulong)h) *
                                   (ulong)seqlen_q + (ulong)pos;
        for (int j = 0; j < DV_VEC; ++j) part_o[part_row * HEAD_DIM + dv * DV_VEC + j] = acc[r][j];
        if (dv == 0) part_stats[part_row] = (float2)(m, l);
#else
        (void)heads_total;
        // Empty only when no key was visible; a zero or NaN sum gives NaN (cl/forward.cl).
        const ulong o_row = o_offset + (ulong)b * o_stride_b + (ulong)h * o_stride_h + (ulong)pos * o_stride_s;
        for (int j = 0; j < DV_VEC; ++j)
            STORE(o, o_row + dv * DV_VEC + j, m == -INFINITY ? 0.0f : acc[r][j] / l);
        if (write_lse && dv == 0)
            lse[lse_offset + (ulong)b * lse_stride_b + (ulong)h * lse_stride_h + (ulong)pos * lse_stride_s] =
                flashcl_row_lse(m, l);
#endif
    }
}
