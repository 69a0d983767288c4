// backward_mma.cl: FlashAttention's backward pass on matrix units (tensor
// cores): dQ, dK and dV by recomputing P tile by tile from Q, K and the LSE,
// as cl/backward.cl does, with every product on the matrix instruction of
// cl/mma.cl (placed by the host before this file, with HEAD_DIM and
// FLASHCL_MMA_PTX): half and bfloat16 storage on the stored values (P and dS
// rounded to the storage type as operands), float storage in 3xTF32.
//
// Macros taken (host passes them with -D):
//   WARPS      warps of 32 work-items per work-group; each owns 16 rows
//              (keys in dkdv, queries in dq) for the whole kernel
//   BLOCK_Q    queries per step of flashcl_backward_mma_dkdv
//   BLOCK_K    keys per step of flashcl_backward_mma_dq
//
// After cl/backward_delta.cl's D_i = rowsum(dO_i * O_i) (one float per row),
// two kernels on one queue:
//   flashcl_backward_mma_dkdv   a work-group owns 16 * WARPS keys of one K/V
//                               head and walks every query of every query
//                               head of its group: dV += P^T dO and
//                               dK += dS^T Q, with P^T = exp(K Q^T - LSE)
//                               and dS^T = P^T * (V dO^T - D);
//   flashcl_backward_mma_dq     a work-group owns 16 * WARPS queries of one
//                               head and walks the keys: dQ += dS K.
// dK and dQ are scaled once at the end. With a bias (FLASHCL_BIAS) both
// kernels add it to each recomputed score as the forward did, and the dQ
// kernel, which owns each (b, h, i, j) once, writes dS before soft-capping's
// derivative to its dbias argument (FLASHCL_DBIAS_PARAMS), exactly as
// cl/backward.cl's dQ kernel does. With FLASHCL_BIAS_STAGED (bias rows
// 16-byte aligned) each block's bias tile is copied to local memory
// (cl/mma_operands.cl) and read there: by the dK/dV kernel with the block's
// Q and dO rows, by the dQ kernel one key block ahead, during the previous
// block's products. As in cl/backward.cl each gradient
// element has one owner, so there are no atomics and every sum runs in a
// fixed order: the same inputs give the same bits. (They are not the bits
// of cl/backward.cl: the matrix unit sums in its own order.)
//
// Fragments (cl/mma.cl's layout). dkdv: the warp's K and V rows are A
// operands, loaded once; a block of Q and dO rows sits in local memory as
// queries x dims, read as B operands for K Q^T and V dO^T (rows g, words t
// and t + 4, as the forward reads K) and, through the transposing load, for
// P^T dO and dS^T Q (as the forward reads V). The accumulators of P^T and
// dS^T become A operands in registers, as P does in the forward. dq: the
// warp's Q and dO rows are A operands; K and V blocks sit in local memory as
// keys x dims, read as B operands for Q K^T and dO V^T and, transposed, for
// dS K.

#ifndef WARPS
#define WARPS 4
#endif
#ifndef BLOCK_Q
#define BLOCK_Q 64
#endif
#ifndef BLOCK_K
#define BLOCK_K 64
#endif
#if BLOCK_Q % 16 != 0 || BLOCK_K % 16 != 0
#error "BLOCK_Q and BLOCK_K must be multiples of 16"
#endif
#define WG_SIZE (WARPS * 32)
#define OWN_ROWS (16 * WARPS) // keys per dkdv work-group, queries per dq work-group


// A operands of one warp's 16 rows from global memory (rows past `rows` as
// zeros): rows g and g + 8, words t and t + 4 of every step.
#define LOAD_A_ROWS(a, src, base, stride_s, row_top, rows)                                                    \
    do {                                                                                                     \
        const int row_bottom_ = (row_top) + 8;                                                               \
        UNROLL_ALWAYS                                                                                        \
        for (int s_ = 0; s_ < DIM_STEPS; ++s_) {                                                             \
            const int col_ = s_ * MMA_K + VALUES_PER_WORD * t, second_ = MMA_K / 2;                          \
            const ulong top_ = (base) + (ulong)(row_top) * (stride_s) + col_;                                \
            const ulong bottom_ = (base) + (ulong)row_bottom_ * (stride_s) + col_;                           \
            a[s_][0] = (row_top) < (rows) ? LOAD_WORD(src, top_) : 0u;                                       \
            a[s_][1] = row_bottom_ < (rows) ? LOAD_WORD(src, bottom_) : 0u;                                  \
            a[s_][2] = (row_top) < (rows) ? LOAD_WORD(src, top_ + second_) : 0u;                             \
            a[s_][3] = row_bottom_ < (rows) ? LOAD_WORD(src, bottom_ + second_) : 0u;                        \
        }                                                                                                    \
    } while (0)

// The LSE of a query row in log2 units, as the exponent subtracts it: +inf
// for rows past the end and rows that saw no key (LSE -inf), so their P is
// exactly 0.
// With score modifiers or a bias (cl/common.cl) the scores are scaled and
// modified where they are recomputed, as the forward did (softcap, then the
// bias and ALiBi, then the masks), so the exponents take log2(e) alone; dS
// is then multiplied by soft-capping's derivative, and dK and dQ are scaled
// once at the end as without modifiers (d(scale q.k)/dq = scale k).
#if FLASHCL_SCORE_MODS || FLASHCL_BIAS
#define SCORE_SCALE2(scale) M_LOG2E_F
#else
#define SCORE_SCALE2(scale) ((scale) * M_LOG2E_F)
#endif

inline float lse_log2(__global const float *lse, ulong index, bool valid) {
    const float x = valid ? lse[index] : -INFINITY;
    return x == -INFINITY ? INFINITY : x * M_LOG2E_F;
}

#if FLASHCL_BIAS
// The bias is added to the scaled scores after soft-capping, beside ALiBi,
// before the masks (the forward's order). A -inf bias hides its pair as a
// mask does: P is set to exactly 0 (even where q.k overflowed), so its dS
// and dBias are 0 and a row it hides whole has zero gradients.
#define BIAS_HIDE(p, bias4)                                                                                  \
    do {                                                                                                     \
        if ((bias4).x == -INFINITY) (p).x = 0.0f;                                                            \
        if ((bias4).y == -INFINITY) (p).y = 0.0f;                                                            \
        if ((bias4).z == -INFINITY) (p).z = 0.0f;                                                            \
        if ((bias4).w == -INFINITY) (p).w = 0.0f;                                                            \
    } while (0)
#endif

// Stores one warp's 16 x HEAD_DIM accumulators times `factor` (rows past
// `rows` skipped).
#define STORE_ROWS(dst, base, stride_s, acc, row_top, rows, factor)                                          \
    do {                                                                                                     \
        const int row_bottom_ = (row_top) + 8;                                                               \
        UNROLL_ALWAYS                                                                                        \
        for (int j_ = 0; j_ < DIM_TILES; ++j_) {                                                             \
            const int col_ = j_ * 8 + 2 * t;                                                                 \
            if ((row_top) < (rows))                                                                          \
                STORE_PAIR(dst, (base) + (ulong)(row_top) * (stride_s) + col_, acc[j_].x * (factor),         \
                           acc[j_].y * (factor));                                                            \
            if (row_bottom_ < (rows))                                                                        \
                STORE_PAIR(dst, (base) + (ulong)row_bottom_ * (stride_s) + col_, acc[j_].z * (factor),       \
                           acc[j_].w * (factor));                                                            \
        }                                                                                                    \
    } while (0)

// ---- dK and dV ----------------------------------------------------------------
#define Q_TILES (BLOCK_Q / 8)     // 8-query accumulator tiles of P^T and dS^T
#define Q_STEPS (BLOCK_Q / MMA_K) // k-steps of P^T dO and dS^T Q

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void flashcl_backward_mma_dkdv(
    __global const storage_t *q, ulong q_offset, ulong q_stride_b, ulong q_stride_h, ulong q_stride_s,
    __global const storage_t *k, ulong k_offset, ulong k_stride_b, ulong k_stride_h, ulong k_stride_s,
    __global const storage_t *v, ulong v_offset, ulong v_stride_b, ulong v_stride_h, ulong v_stride_s,
    __global const storage_t *dout, ulong do_offset, ulong do_stride_b, ulong do_stride_h, ulong do_stride_s,
    __global const float *lse, ulong lse_offset, ulong lse_stride_b, ulong lse_stride_h, ulong lse_stride_s,
    __global const float *delta, __global storage_t *dk, ulong dk_offset, ulong dk_stride_b, ulong dk_stride_h,
    ulong dk_stride_s, __global storage_t *dv, ulong dv_offset, ulong dv_stride_b, ulong dv_stride_h,
    ulong dv_stride_s, int heads_q, int group_size, int seqlen_q, int seqlen_k, float scale,
    int causal FLASHCL_SCORE_MOD_PARAMS FLASHCL_BIAS_PARAMS) {
    // A block of Q rows and of dO rows, queries x dims, with their LSE (log2
    // units) and D.
    __local uint4 q_tile4[BLOCK_Q * ROW_WORDS / 4];
    __local uint4 do_tile4[BLOCK_Q * ROW_WORDS / 4];
    __local float lse_tile[BLOCK_Q], delta_tile[BLOCK_Q];
#if FLASHCL_BIAS_STAGED
    __local uint4 bias_tile4[BLOCK_Q * BIAS_TILE_ROW(OWN_ROWS)]; // queries x the work-group's keys
#endif
    __local const uint *q_tile = (__local const uint *)q_tile4;
    __local const uint *do_tile = (__local const uint *)do_tile4;

    const int lid = (int)get_local_id(0);
    const int warp = lid / 32, lane = lid % 32;
    const int g = lane >> 2, t = lane & 3;
    MMA_BACKEND_STATE(WARPS)
    const int key0 = (int)get_group_id(0) * OWN_ROWS;
    const int heads_kv = heads_q / group_size;
    const int bh = (int)get_group_id(1);
    const int b = bh / heads_kv;
    const int hk = bh - b * heads_kv;
    const ulong k_base = k_offset + (ulong)b * k_stride_b + (ulong)hk * k_stride_h;
    const ulong v_base = v_offset + (ulong)b * v_stride_b + (ulong)hk * v_stride_h;
    // This warp's keys: lane (g, t) holds rows key_top and key_top + 8.
    const int warp_key0 = key0 + warp * 16;
    const int key_top = warp_key0 + g, key_bottom = key_top + 8;

    uint ka[DIM_STEPS][4], va[DIM_STEPS][4];
    LOAD_A_ROWS(ka, k, k_base, k_stride_s, key_top, seqlen_k);
    LOAD_A_ROWS(va, v, v_base, v_stride_s, key_top, seqlen_k);
    float4 dk_acc[DIM_TILES], dv_acc[DIM_TILES];
    UNROLL_ALWAYS
    for (int j = 0; j < DIM_TILES; ++j) dk_acc[j] = dv_acc[j] = (float4)(0.0f);
    const float scale2 = SCORE_SCALE2(scale);

    // Bottom-right causal alignment: query i sees keys j <= i + diagonal, so
    // queries before key0 - diagonal see none of this group's keys.
    const int diagonal = seqlen_k - seqlen_q;
    const int q_start = causal ? (max(0, key0 - diagonal) / BLOCK_Q) * BLOCK_Q : 0;
    // P^T's keys past seqlen_k (zero K rows) would not be zero: they are
    // masked like the causal ones, though their rows are never stored.
    const bool keys_past_end = warp_key0 + 16 > seqlen_k;
#if FLASHCL_BIAS_STAGED
    // Whether all 16 of the warp's keys lie before the last whole chunk, so its bias comes from the staged
    // tile alone; else (the warp holding the last keys) from global memory, value by value (warp-uniform).
    const bool warp_bias_staged = warp_key0 + 16 <= BIAS_STAGED_END(seqlen_k);
#endif

    for (int hq = hk * group_size; hq < (hk + 1) * group_size; ++hq) {
        const ulong q_base = q_offset + (ulong)b * q_stride_b + (ulong)hq * q_stride_h;
        const ulong do_base = do_offset + (ulong)b * do_stride_b + (ulong)hq * do_stride_h;
        const ulong lse_base = lse_offset + (ulong)b * lse_stride_b + (ulong)hq * lse_stride_h;
        const ulong delta_base = ((ulong)b * (ulong)heads_q + (ulong)hq) * (ulong)seqlen_q;
#if FLASHCL_ALIBI
        const float alibi_slope = FLASHCL_ALIBI_SLOPE(b, hq);
#endif
#if FLASHCL_BIAS
        const ulong bias_base = FLASHCL_BIAS_BASE(b, hq);
#endif
        for (int q0 = q_start; q0 < seqlen_q; q0 += BLOCK_Q) {
            FETCH_TILE(q_tile4, q, q_base, q_stride_s, q0, seqlen_q, BLOCK_Q);
            FETCH_TILE(do_tile4, dout, do_base, do_stride_s, q0, seqlen_q, BLOCK_Q);
#if FLASHCL_BIAS_STAGED
            FETCH_BIAS_TILE(bias_tile4, q0, BLOCK_Q, seqlen_q, key0, OWN_ROWS, seqlen_k);
#endif
            COPY_COMMIT();
#if FLASHCL_BIAS && !FLASHCL_BIAS_STAGED
            // The block's bias in P^T's layout (queries q0 + n * 8 + 2t and
            // + 1 of keys key_top: x, y; key_bottom: z, w), loaded now,
            // before the products, so that its latency hides behind them, as
            // in the forward. Staged, it is read where it is added (below).
            float4 bias_pre[Q_TILES];
            UNROLL_ALWAYS
            for (int n = 0; n < Q_TILES; ++n) {
                const int query = q0 + n * 8 + 2 * t;
                bias_pre[n] = (float4)(FLASHCL_BIAS_VALUE(bias_base, query, key_top),
                                       FLASHCL_BIAS_VALUE(bias_base, query + 1, key_top),
                                       FLASHCL_BIAS_VALUE(bias_base, query, key_bottom),
                                       FLASHCL_BIAS_VALUE(bias_base, query + 1, key_bottom));
            }
#endif
            for (int r = lid; r < BLOCK_Q; r += WG_SIZE) {
                const bool valid = q0 + r < seqlen_q;
                lse_tile[r] = lse_log2(lse, lse_base + (ulong)(q0 + r) * lse_stride_s, valid);
                delta_tile[r] = valid ? delta[delta_base + (ulong)(q0 + r)] : 0.0f;
            }
            COPY_WAIT(0);
            barrier(CLK_LOCAL_MEM_FENCE);
#if MMA_WARPS_MAY_SKIP
            // A warp whose keys no query of the block sees skips its
            // arithmetic (P^T = 0); warp-uniform.
            const bool warp_active = !causal || warp_key0 <= q0 + BLOCK_Q - 1 + diagonal;
#else
            const bool warp_active = true;
#endif
            if (warp_active) {
                // S^T = K Q^T and dP^T = V dO^T over the head dimension.
                float4 st[Q_TILES], dpt[Q_TILES];
                UNROLL_ALWAYS
                for (int n = 0; n < Q_TILES; ++n) st[n] = dpt[n] = (float4)(0.0f);
                UNROLL
                for (int d = 0; d < DIM_STEPS; ++d) {
                    uint kp[A_WORDS], vp[A_WORDS];
                    PREPARE_A(kp, ka[d]);
                    PREPARE_A(vp, va[d]);
                    UNROLL
                    for (int n = 0; n < Q_TILES; ++n) {
                        const int row_word = (n * 8 + g) * ROW_WORDS + t;
                        uint qb[B_WORDS], dob[B_WORDS];
                        TILE_B(qb, q_tile + row_word + d * 8, 4);
                        TILE_B(dob, do_tile + row_word + d * 8, 4);
                        MMA_S(st[n], kp, qb);
                        MMA_S(dpt[n], vp, dob);
                    }
                }
                // P^T and dS^T: lane (g, t) holds keys key_top, key_bottom of
                // queries q0 + n * 8 + 2t and + 1 (x, y: top; z, w: bottom).
                const bool masked = keys_past_end || (causal && warp_key0 + 15 > q0 + diagonal);
                uint pa[Q_STEPS][4], dsa[Q_STEPS][4];
                UNROLL_ALWAYS
                for (int n = 0; n < Q_TILES; ++n) {
                    const int col = n * 8 + 2 * t;
                    const float l0 = lse_tile[col], l1 = lse_tile[col + 1];
                    const float d0 = delta_tile[col], d1 = delta_tile[col + 1];
#if FLASHCL_SCORE_MODS
                    float g0 = 1.0f, g1 = 1.0f, g2 = 1.0f, g3 = 1.0f; // soft-capping's derivatives
                    {
                        // ALiBi's distances in float steps from the lane's first query of the block (common.cl).
                        const int pos0 = q0 + 2 * t + diagonal;
                        st[n].x = FLASHCL_SCORE_MOD_STEP(st[n].x * scale, g0, alibi_slope, pos0, key_top, -(n * 8));
                        st[n].y = FLASHCL_SCORE_MOD_STEP(st[n].y * scale, g1, alibi_slope, pos0, key_top, -(n * 8 + 1));
                        st[n].z = FLASHCL_SCORE_MOD_STEP(st[n].z * scale, g2, alibi_slope, pos0, key_bottom, -(n * 8));
                        st[n].w =
                            FLASHCL_SCORE_MOD_STEP(st[n].w * scale, g3, alibi_slope, pos0, key_bottom, -(n * 8 + 1));
                        (void)pos0;
                    }
#elif FLASHCL_BIAS
                    st[n] *= scale;
#endif
#if FLASHCL_BIAS_STAGED
                    // Read here, not before the products: 16 fewer registers live across them, and one
                    // warp-uniform choice instead of a staged-or-global select per value.
                    float4 bias4;
                    if (warp_bias_staged) {
                        // The tile's rows col and col + 1 are queries q0 + col and + 1.
                        __local const uint4 *row = bias_tile4 + col * BIAS_TILE_ROW(OWN_ROWS);
                        __local const uint4 *next = row + BIAS_TILE_ROW(OWN_ROWS);
                        bias4 = (float4)(bias_value_local(row, key_top - key0), bias_value_local(next, key_top - key0),
                                         bias_value_local(row, key_bottom - key0),
                                         bias_value_local(next, key_bottom - key0));
                    } else {
                        const int query = q0 + col;
                        bias4 = (float4)(FLASHCL_BIAS_VALUE(bias_base, query, key_top),
                                         FLASHCL_BIAS_VALUE(bias_base, query + 1, key_top),
                                         FLASHCL_BIAS_VALUE(bias_base, query, key_bottom),
                                         FLASHCL_BIAS_VALUE(bias_base, query + 1, key_bottom));
                    }
#elif FLASHCL_BIAS
                    const float4 bias4 = bias_pre[n];
#endif
#if FLASHCL_BIAS
                    st[n] += bias4;
#endif
                    float4 p = (float4)(EXP2(fma(st[n].x, scale2, -l0)), EXP2(fma(st[n].y, scale2, -l1)),
                                        EXP2(fma(st[n].z, scale2, -l0)), EXP2(fma(st[n].w, scale2, -l1)));
                    if (masked) {
                        const int query = q0 + col;
                        const bool top_out = key_top >= seqlen_k, bottom_out = key_bottom >= seqlen_k;
                        if (top_out || (causal && key_top > query + diagonal)) p.x = 0.0f;
                        if (top_out || (causal && key_top > query + 1 + diagonal)) p.y = 0.0f;
                        if (bottom_out || (causal && key_bottom > query + diagonal)) p.z = 0.0f;
                        if (bottom_out || (causal && key_bottom > query + 1 + diagonal)) p.w = 0.0f;
                    }
#if FLASHCL_BIAS
                    BIAS_HIDE(p, bias4);
#endif
#if FLASHCL_SOFTCAP
                    const float4 ds = p * (dpt[n] - (float4)(d0, d1, d0, d1)) * (float4)(g0, g1, g2, g3);
#else
                    const float4 ds = p * (dpt[n] - (float4)(d0, d1, d0, d1));
#endif
                    P_TO_A(pa, n, p);
                    P_TO_A(dsa, n, ds);
                }
                // dV += P^T dO and dK += dS^T Q: dO and Q as keys are in the
                // forward's P V.
                UNROLL
                for (int kk = 0; kk < Q_STEPS; ++kk) {
                    uint pp[A_WORDS], dsp[A_WORDS];
                    PREPARE_A(pp, pa[kk]);
                    PREPARE_A(dsp, dsa[kk]);
                    UNROLL
                    for (int j = 0; j < DIM_TILES; j += 2) {
                        uint left[B_WORDS], right[B_WORDS];
                        TILE_B_TRANSPOSED(left, right, do_tile, kk * MMA_K, j);
                        MMA_PV(dv_acc[j], pp, left);
                        MMA_PV(dv_acc[j + 1], pp, right);
                        TILE_B_TRANSPOSED(left, right, q_tile, kk * MMA_K, j);
                        MMA_PV(dk_acc[j], dsp, left);
                        MMA_PV(dk_acc[j + 1], dsp, right);
                    }
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE); // every warp is done with the block
        }
    }

    const ulong dk_base = dk_offset + (ulong)b * dk_stride_b + (ulong)hk * dk_stride_h;
    const ulong dv_base = dv_offset + (ulong)b * dv_stride_b + (ulong)hk * dv_stride_h;
    STORE_ROWS(dk, dk_base, dk_stride_s, dk_acc, key_top, seqlen_k, scale);
    STORE_ROWS(dv, dv_base, dv_stride_s, dv_acc, key_top, seqlen_k, 1.0f);
}

// ---- dQ ----------------------------------------------------------------------
#define KEY_TILES (BLOCK_K / 8)     // 8-key accumulator tiles of S and dS
#define KEY_STEPS (BLOCK_K / MMA_K) // k-steps of dS K
#if FLASHCL_BIAS_STAGED
#define DQ_BIAS_TILE (OWN_ROWS * BIAS_TILE_ROW(BLOCK_K)) // chunks of one staged bias tile
#endif

#if FLASHCL_BIAS
// One lane's four dBias elements of a tile in S's layout (rows row_top: x, y;
// row_bottom: z, w; keys col and col + 1), pairs past the ends not written; a
// hidden pair's -0 as +0 (cl/common.cl), as the portable kernel writes it.
#define STORE_DBIAS(ds4, col)                                                                                \
    do {                                                                                                     \
        const int col_ = (col);                                                                              \
        const ulong top_ = dbias_base + (ulong)row_top * dbias_stride_s + (ulong)col_;                       \
        const ulong bottom_ = dbias_base + (ulong)row_bottom * dbias_stride_s + (ulong)col_;                 \
        if (row_top < seqlen_q && col_ < seqlen_k) dbias[top_] = FLASHCL_DBIAS_PLUS_ZERO((ds4).x);           \
        if (row_top < seqlen_q && col_ + 1 < seqlen_k) dbias[top_ + 1] = FLASHCL_DBIAS_PLUS_ZERO((ds4).y);   \
        if (row_bottom < seqlen_q && col_ < seqlen_k) dbias[bottom_] = FLASHCL_DBIAS_PLUS_ZERO((ds4).z);     \
        if (row_bottom < seqlen_q && col_ + 1 < seqlen_k) dbias[bottom_ + 1] = FLASHCL_DBIAS_PLUS_ZERO((ds4).w); \
    } while (0)
// dBias of keys reached .. seqlen_k - 1 of rows row0 .. row0 + rows - 1, which a dQ kernel's loop never reached
// (past the causal diagonal of every row of its work-group), set to 0 by the work-group's WG_SIZE work-items, so
// that every element is written once (needs lid, dbias_base).
#define DBIAS_ZERO_UNREACHED(row0, rows, reached)                                                            \
    for (int r_ = (row0); r_ < min((row0) + (rows), seqlen_q) && (reached) < seqlen_k; ++r_)                 \
        for (int key_ = (reached) + lid; key_ < seqlen_k; key_ += WG_SIZE)                                   \
            dbias[dbias_base + (ulong)r_ * dbias_stride_s + (ulong)key_] = 0.0f
#endif

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void flashcl_backward_mma_dq(
    __global const storage_t *q, ulong q_offset, ulong q_stride_b, ulong q_stride_h, ulong q_stride_s,
    __global const storage_t *k, ulong k_offset, ulong k_stride_b, ulong k_stride_h, ulong k_stride_s,
    __global const storage_t *v, ulong v_offset, ulong v_stride_b, ulong v_stride_h, ulong v_stride_s,
    __global const storage_t *dout, ulong do_offset, ulong do_stride_b, ulong do_stride_h, ulong do_stride_s,
    __global const float *lse, ulong lse_offset, ulong lse_stride_b, ulong lse_stride_h, ulong lse_stride_s,
    __global const float *delta, __global storage_t *dq, ulong dq_offset, ulong dq_stride_b, ulong dq_stride_h,
    ulong dq_stride_s, int heads_q, int group_size, int seqlen_q, int seqlen_k, float scale,
    int causal FLASHCL_SCORE_MOD_PARAMS FLASHCL_BIAS_PARAMS FLASHCL_DBIAS_PARAMS) {
    __local uint4 k_tile4[BLOCK_K * ROW_WORDS / 4];
    __local uint4 v_tile4[BLOCK_K * ROW_WORDS / 4];
    __local const uint *k_tile = (__local const uint *)k_tile4;
    __local const uint *v_tile = (__local const uint *)v_tile4;
#if FLASHCL_BIAS_STAGED
    // Two tiles of the work-group's queries x a key block: the block's bias, and the next block's, copied during
    // this block's products (below).
    __local uint4 bias_tile4[2 * DQ_BIAS_TILE];
#endif

    const int lid = (int)get_local_id(0);
    const int warp = lid / 32, lane = lid % 32;
    const int g = lane >> 2, t = lane & 3;
    MMA_BACKEND_STATE(WARPS)
    // Causal groups near the end of the sequence have the most keys: they
    // start first so the short ones fill the tail.
    const int q0 = ((int)get_num_groups(0) - 1 - (int)get_group_id(0)) * OWN_ROWS;
    const int bh = (int)get_group_id(1);
    const int b = bh / heads_q;
    const int h = bh - b * heads_q;
    const int hk = h / group_size;
    const ulong q_base = q_offset + (ulong)b * q_stride_b + (ulong)h * q_stride_h;
    const ulong do_base = do_offset + (ulong)b * do_stride_b + (ulong)h * do_stride_h;
    const ulong k_base = k_offset + (ulong)b * k_stride_b + (ulong)hk * k_stride_h;
    const ulong v_base = v_offset + (ulong)b * v_stride_b + (ulong)hk * v_stride_h;
    const ulong lse_base = lse_offset + (ulong)b * lse_stride_b + (ulong)h * lse_stride_h;
    const ulong delta_base = ((ulong)b * (ulong)heads_q + (ulong)h) * (ulong)seqlen_q;
    const int warp_row0 = q0 + warp * 16;
    const int row_top = warp_row0 + g, row_bottom = row_top + 8;

    uint qa[DIM_STEPS][4], doa[DIM_STEPS][4];
    LOAD_A_ROWS(qa, q, q_base, q_stride_s, row_top, seqlen_q);
    LOAD_A_ROWS(doa, dout, do_base, do_stride_s, row_top, seqlen_q);
    const float lse_top = lse_log2(lse, lse_base + (ulong)row_top * lse_stride_s, row_top < seqlen_q);
    const float lse_bottom = lse_log2(lse, lse_base + (ulong)row_bottom * lse_stride_s, row_bottom < seqlen_q);
    const float delta_top = row_top < seqlen_q ? delta[delta_base + (ulong)row_top] : 0.0f;
    const float delta_bottom = row_bottom < seqlen_q ? delta[delta_base + (ulong)row_bottom] : 0.0f;
    float4 dq_acc[DIM_TILES];
    UNROLL_ALWAYS
    for (int j = 0; j < DIM_TILES; ++j) dq_acc[j] = (float4)(0.0f);
    const float scale2 = SCORE_SCALE2(scale);
#if FLASHCL_ALIBI
    const float alibi_slope = FLASHCL_ALIBI_SLOPE(b, h);
#endif
#if FLASHCL_BIAS
    const ulong bias_base = FLASHCL_BIAS_BASE(b, h);
    const ulong dbias_base = dbias_offset + (ulong)b * dbias_stride_b + (ulong)h * dbias_stride_h;
#endif

    const int diagonal = seqlen_k - seqlen_q;
    int key_end = seqlen_k;
    if (causal) key_end = clamp(q0 + OWN_ROWS + diagonal, 0, seqlen_k);

#if FLASHCL_BIAS_STAGED
    const int bias_staged_end = BIAS_STAGED_END(seqlen_k);
    // The bias tile is copied one key block ahead: a full bias is read once, from DRAM (K and V, read by every
    // work-group of the head, mostly come from L2), and waiting for it with the block's K and V cost the H100's
    // d64 dQ kernel 1.6 ms of 4.0 at N 2048; one block ahead it took 0.5 ms off (docs/perf.md, "Backward with a
    // bias at d64"; the dK/dV kernel timed 3% (d64) and 9% (d128, more spills) slower with the same change, so it
    // keeps its copy with Q and dO). Copy groups: the first block's bias here, then per block K and V, then the
    // next block's bias; a block waits for all but the last group.
    if (key_end > 0) FETCH_BIAS_TILE(bias_tile4, q0, OWN_ROWS, seqlen_q, 0, BLOCK_K, seqlen_k);
    COPY_COMMIT();
    int bias_stage = 0; // which tile holds this block's bias
#endif
    for (int k0 = 0; k0 < key_end; k0 += BLOCK_K) {
        FETCH_TILE(k_tile4, k, k_base, k_stride_s, k0, seqlen_k, BLOCK_K);
        FETCH_TILE(v_tile4, v, v_base, v_stride_s, k0, seqlen_k, BLOCK_K);
        COPY_COMMIT();
#if FLASHCL_BIAS_STAGED
        // Into the other tile, which the previous block's products read before its closing barrier.
        if (k0 + BLOCK_K < key_end)
            FETCH_BIAS_TILE(bias_tile4 + (bias_stage ^ 1) * DQ_BIAS_TILE, q0, OWN_ROWS, seqlen_q, k0 + BLOCK_K,
                            BLOCK_K, seqlen_k);
        COPY_COMMIT();
        __local const uint4 *bias_block = bias_tile4 + bias_stage * DQ_BIAS_TILE;
        bias_stage ^= 1;
#endif
#if FLASHCL_BIAS
#define BIAS_DQ_GLOBAL(col)                                                                                  \
    (float4)(FLASHCL_BIAS_VALUE(bias_base, row_top, col), FLASHCL_BIAS_VALUE(bias_base, row_top, (col) + 1), \
             FLASHCL_BIAS_VALUE(bias_base, row_bottom, col), FLASHCL_BIAS_VALUE(bias_base, row_bottom, (col) + 1))
#endif
#if FLASHCL_BIAS && !FLASHCL_BIAS_STAGED
        // The block's bias in S's layout (rows row_top: x, y; row_bottom: z,
        // w; keys k0 + n * 8 + 2t and + 1), loaded now, before the products,
        // so that its latency hides behind them, as in the forward. Staged,
        // it is read where it is added (below).
        float4 bias_pre[KEY_TILES];
        UNROLL_ALWAYS
        for (int n = 0; n < KEY_TILES; ++n) bias_pre[n] = BIAS_DQ_GLOBAL(k0 + n * 8 + 2 * t);
#endif
#if FLASHCL_BIAS_STAGED
        COPY_WAIT(1); // K, V and this block's bias have landed; the next block's bias may not have
#else
        COPY_WAIT(0);
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
#if FLASHCL_BIAS_STAGED
        // Whether every key of the block lies before the last whole chunk (work-group-uniform): its bias then
        // comes from the staged tile alone, else from global memory, pair by pair.
        const bool block_bias_staged = k0 + BLOCK_K <= bias_staged_end;
#endif
#if MMA_WARPS_MAY_SKIP
        const bool warp_active = !causal || k0 <= warp_row0 + 15 + diagonal;
#else
        const bool warp_active = true;
#endif
        if (warp_active) {
            // S = Q K^T and dP = dO V^T over the head dimension.
            float4 s[KEY_TILES], dp[KEY_TILES];
            UNROLL_ALWAYS
            for (int n = 0; n < KEY_TILES; ++n) s[n] = dp[n] = (float4)(0.0f);
            UNROLL
            for (int d = 0; d < DIM_STEPS; ++d) {
                uint qp[A_WORDS], dop[A_WORDS];
                PREPARE_A(qp, qa[d]);
                PREPARE_A(dop, doa[d]);
                UNROLL
                for (int n = 0; n < KEY_TILES; ++n) {
                    const int row_word = (n * 8 + g) * ROW_WORDS + t;
                    uint kb[B_WORDS], vb[B_WORDS];
                    TILE_B(kb, k_tile + row_word + d * 8, 4);
                    TILE_B(vb, v_tile + row_word + d * 8, 4);
                    MMA_S(s[n], qp, kb);
                    MMA_S(dp[n], dop, vb);
                }
            }
            // dS = P * (dP - D), masked keys and rows past the end as zeros
            // (P of a row past the end is already exactly 0).
            const bool masked = k0 + BLOCK_K > seqlen_k || (causal && k0 + BLOCK_K - 1 > warp_row0 + diagonal);
            uint dsa[KEY_STEPS][4];
            UNROLL_ALWAYS
            for (int n = 0; n < KEY_TILES; ++n) {
#if FLASHCL_SCORE_MODS
                float g0 = 1.0f, g1 = 1.0f, g2 = 1.0f, g3 = 1.0f; // soft-capping's derivatives
                {
                    // ALiBi's distances in float steps from the lane's first key of the block (common.cl).
                    const int col0 = k0 + 2 * t;
                    s[n].x = FLASHCL_SCORE_MOD_STEP(s[n].x * scale, g0, alibi_slope, row_top + diagonal, col0, n * 8);
                    s[n].y =
                        FLASHCL_SCORE_MOD_STEP(s[n].y * scale, g1, alibi_slope, row_top + diagonal, col0, n * 8 + 1);
                    s[n].z = FLASHCL_SCORE_MOD_STEP(s[n].z * scale, g2, alibi_slope, row_bottom + diagonal, col0, n * 8);
                    s[n].w =
                        FLASHCL_SCORE_MOD_STEP(s[n].w * scale, g3, alibi_slope, row_bottom + diagonal, col0, n * 8 + 1);
                    (void)col0;
                }
#elif FLASHCL_BIAS
                s[n] *= scale;
#endif
#if FLASHCL_BIAS_STAGED
                // Read here, not before the products: 16 fewer registers live across them.
                const float4 bias4 = block_bias_staged
                                         ? (float4)(bias_pair_local(bias_block + (row_top - q0) * BIAS_TILE_ROW(BLOCK_K),
                                                                    n * 8 + 2 * t),
                                                    bias_pair_local(bias_block + (row_bottom - q0) * BIAS_TILE_ROW(BLOCK_K),
                                                                    n * 8 + 2 * t))
                                         : BIAS_DQ_GLOBAL(k0 + n * 8 + 2 * t);
#elif FLASHCL_BIAS
                const float4 bias4 = bias_pre[n];
#endif
#if FLASHCL_BIAS
                s[n] += bias4;
#endif
                float4 p = (float4)(EXP2(fma(s[n].x, scale2, -lse_top)), EXP2(fma(s[n].y, scale2, -lse_top)),
                                    EXP2(fma(s[n].z, scale2, -lse_bottom)), EXP2(fma(s[n].w, scale2, -lse_bottom)));
                if (masked) {
                    const int col = k0 + n * 8 + 2 * t;
                    const bool left_out = col >= seqlen_k, right_out = col + 1 >= seqlen_k;
                    if (left_out || (causal && col > row_top + diagonal)) p.x = 0.0f;
                    if (right_out || (causal && col + 1 > row_top + diagonal)) p.y = 0.0f;
                    if (left_out || (causal && col > row_bottom + diagonal)) p.z = 0.0f;
                    if (right_out || (causal && col + 1 > row_bottom + diagonal)) p.w = 0.0f;
                }
#if FLASHCL_BIAS
                BIAS_HIDE(p, bias4);
                // dS before soft-capping's derivative is dBias (cl/backward.cl's DQ_DS).
                const float4 ds_score = p * (dp[n] - (float4)(delta_top, delta_top, delta_bottom, delta_bottom));
                if (write_dbias) STORE_DBIAS(ds_score, k0 + n * 8 + 2 * t);
#if FLASHCL_SOFTCAP
                const float4 ds = ds_score * (float4)(g0, g1, g2, g3);
#else
                const float4 ds = ds_score;
#endif
#elif FLASHCL_SOFTCAP
                const float4 ds = p * (dp[n] - (float4)(delta_top, delta_top, delta_bottom, delta_bottom)) *
                                  (float4)(g0, g1, g2, g3);
#else
                const float4 ds = p * (dp[n] - (float4)(delta_top, delta_top, delta_bottom, delta_bottom));
#endif
                P_TO_A(dsa, n, ds);
            }
            // dQ += dS K: K as V is in the forward's P V.
            UNROLL
            for (int kk = 0; kk < KEY_STEPS; ++kk) {
                uint dsp[A_WORDS];
                PREPARE_A(dsp, dsa[kk]);
                UNROLL
                for (int j = 0; j < DIM_TILES; j += 2) {
                    uint left[B_WORDS], right[B_WORDS];
                    TILE_B_TRANSPOSED(left, right, k_tile, kk * MMA_K, j);
                    MMA_PV(dq_acc[j], dsp, left);
                    MMA_PV(dq_acc[j + 1], dsp, right);
                }
            }
        }
#if FLASHCL_BIAS && MMA_WARPS_MAY_SKIP
        else if (write_dbias) {
            // A warp that skips the block (its rows see none of its keys) still owns their dBias: 0.
            UNROLL_ALWAYS
            for (int n = 0; n < KEY_TILES; ++n) STORE_DBIAS((float4)(0.0f), k0 + n * 8 + 2 * t);
        }
#endif
        barrier(CLK_LOCAL_MEM_FENCE); // every warp is done with the blocks
    }

#if FLASHCL_BIAS
    // dBias of the keys the loop never reached (past the causal diagonal of
    // every row of the work-group; all of them for rows that see no key) is
    // 0: written here, so every element is written once, with no fill.
    if (write_dbias) {
        const int reached = min(seqlen_k, (key_end + BLOCK_K - 1) / BLOCK_K * BLOCK_K);
        DBIAS_ZERO_UNREACHED(q0, OWN_ROWS, reached);
    }
#endif

#if FLASHCL_BIAS
#undef BIAS_DQ_GLOBAL
#endif
    const ulong dq_base = dq_offset + (ulong)b * dq_stride_b + (ulong)h * dq_stride_h;
    STORE_ROWS(dq, dq_base, dq_stride_s, dq_acc, row_top, seqlen_q, scale);
}
