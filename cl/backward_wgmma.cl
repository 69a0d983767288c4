// backward_wgmma.cl: the backward pass's dK/dV and dQ kernels on Hopper's
// warpgroup matrix instructions (wgmma, sm_90a; issue 22, item 3), for 16-bit
// storage (half, bfloat16) and head dims 64 and 128, causal or not, with the
// score modifiers (FLASHCL_SOFTCAP, FLASHCL_ALIBI; common.cl) or without, and
// with an additive bias (FLASHCL_BIAS: staged in local memory beside each
// step's streamed rows where its rows are 16-byte aligned, FLASHCL_BIAS_STAGED,
// else read from global memory where each score is; the dQ kernel writes
// dBias as backward_mma.cl's does).
// Placed after mma.cl, mma_nvidia.cl, mma_operands.cl, wgmma.cl and
// backward_mma.cl (whose lse_log2 and STORE_DBIAS this file uses, and whose
// flashcl_backward_mma_dq computes dQ on mma.sync where the host leaves out
// BWQ_WARPGROUPS: where the wgmma dQ kernel's tiles do not fit); built only through the second compile step
// (src/program_sm90a.c), so only on an H100-class GPU. D = rowsum(dO * O)
// comes from cl/backward_delta.cl, as for the mma.sync kernels.
//
// Macros taken (host passes them with -D):
//   HEAD_DIM        64 or 128
//   BW_WARPGROUPS   warpgroups (128 work-items each) per work-group; each
//                   owns 64 keys (wgmma's m), so a work-group owns
//                   64 * BW_WARPGROUPS keys of one K/V head
//   BW_BLOCK_Q      queries per step (wgmma's n of S^T and dP^T, the k of
//                   dV += P^T dO and dK += dS^T Q): 32, 64, 96 or 128
//
// A work-group walks every query of every query head of its K/V head's
// group (GQA), BW_BLOCK_Q at a time, and owns its keys' dK and dV rows for
// the whole kernel: each gradient element has one owner, no atomics, every
// sum in a fixed order (the same inputs give the same bits). Per step, each
// warpgroup computes
//   S^T  = K Q^T     (64 keys x BW_BLOCK_Q queries; K and Q by descriptor)
//   dP^T = V dO^T    (V and dO by descriptor)
//   P^T  = exp2(S^T scale log2(e) - LSE_log2[query]), causal keys hidden
//   dS^T = P^T * (dP^T - D[query])
//   dV  += P^T dO    (P^T from registers: S^T's accumulators rounded to the
//                     storage type are wgmma's A fragment, as P is in
//                     forward_wgmma.cl; dO by descriptor, MN-major)
//   dK  += dS^T Q    (likewise, Q MN-major)
// and dK is scaled once at the end. With a score modifier, each score is
// scaled and modified (common.cl's FLASHCL_SCORE_MOD) before its exponential,
// and soft-capping's derivative multiplies dS^T: dP^T is then waited for
// with S^T and dS^T computed in the same pass as P^T (the derivative is
// known only there), instead of P^T overlapping dP^T's product. K and V (the
// work-group's rows) are
// copied to local memory once; Q, dO and their LSE and D go to two stages,
// step j + 1 copied (cp.async) while step j is computed. All tiles use
// wgmma.cl's core-matrix layout, which serves both operand orders: Q and
// dO are read K-major (rows of dims) for S^T and dP^T and MN-major (the
// transpose bit) for dK and dV, with no second copy.
// Accumulator layout (wgmma's m64nN f32, as mma.sync's m16n8): warp w of a
// warpgroup holds keys 16 w .. 16 w + 15 of its 64, lane (g, t) keys g
// ("top") and g + 8 ("bottom"); element 4 i + {0, 1} of S^T / dP^T is the
// top key's queries 8 i + 2t, + 1, elements 4 i + {2, 3} the bottom key's;
// element 4 i + {0, 1} of dK / dV the top key's dims 8 i + 2t, + 1.
// Keys past seqlen_k are zero rows of K and V: their P^T is not zero, but
// each key's row of dK and dV depends on its own row of P^T and dS^T alone,
// and those rows are never stored. Queries past seqlen_q are zero rows of Q
// and dO with LSE +inf (lse_log2): their P^T, and so their dS^T, is 0.
// Every wgmma is issued outside any branch but the loop's (forward_wgmma.cl
// says why): a causal warpgroup computes the blocks its keys cannot see
// (their P^T is 0).

// WG_BWD_ALIBI_STEPS (default 0): ALiBi's distances in common.cl's float
// steps in both kernels (the dQ kernel's d64 64-key tiles excepted), as the
// forwards take them; 0 keeps an integer subtract, abs and conversion per
// score. An experiment for FLASHCL_BUILD_OPTIONS: its pieces were measured on
// an H200 (docs/perf.md, "ALiBi's distance in float steps") but this
// combination has not been run there yet.
#ifndef WG_BWD_ALIBI_STEPS
#define WG_BWD_ALIBI_STEPS 0
#endif
#ifndef BW_WARPGROUPS
#define BW_WARPGROUPS 2
#endif
#ifndef BW_BLOCK_Q
#define BW_BLOCK_Q 64
#endif
#if (BW_BLOCK_Q != 32 && BW_BLOCK_Q != 64 && BW_BLOCK_Q != 96 && BW_BLOCK_Q != 128) || \
    (HEAD_DIM != 64 && HEAD_DIM != 128)
#error "BW_BLOCK_Q must be 32, 64, 96 or 128 and HEAD_DIM 64 or 128"
#endif
// backward_mma.cl's work-group size is its own kernels'; WG_FETCH_TILE (wgmma.cl) strides by this one.
#undef WG_SIZE
#define WG_SIZE (128 * BW_WARPGROUPS)
#define BW_KEYS (64 * BW_WARPGROUPS)
#define BW_ST_REGS (BW_BLOCK_Q / 2)
#define BW_ACC_REGS (HEAD_DIM / 2)
#define BW_TILE_BYTES(rows) ((rows) * HEAD_DIM * 2)
// One 8-row group of a tile (wgmma.cl): the K-major stride byte offset and the MN-major leading one.
#define BW_GROUP_BYTES (HEAD_DIM * 16)

// The exponent's factor: with a score modifier or a bias the scores are
// scaled where they are modified (biased), and the exponent takes log2(e) alone.
#if FLASHCL_SCORE_MODS || FLASHCL_BIAS
#define BW_SCALE2(scale) M_LOG2E_F
#else
#define BW_SCALE2(scale) ((scale) * M_LOG2E_F)
#endif
// Where dS (dS^T) comes from in the packing loops: computed with P (and
// soft-capping's derivative g) into dp's registers, or there from P and dP.
#if FLASHCL_SOFTCAP
#define BW_DS(p, dp, d) (dp)
#else
#define BW_DS(p, dp, d) ((p) * ((dp) - (d)))
#endif

// Waits until at most the last committed group runs (the dV group done, the
// dK group may run on), with dV's accumulators and P^T's A registers as
// operands: those registers are read by the matrix unit until then.
#define BW_WAIT1_PV(ND, x, NP, p) BW_WAIT1_PV_(ND, x, NP, p)
#define BW_WAIT1_PV_(ND, x, NP, p)                                                                             \
    asm volatile("// FLASHCL_SM90A wgmma.wait_group.sync.aligned 1;" : WG_ACC_##ND(x), WG_P_##NP(p)::"memory")

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void flashcl_backward_wgmma_dkdv(
    __global const storage_t *q, ulong q_offset, ulong q_stride_b, ulong q_stride_h, ulong q_stride_s,
    __global const storage_t *k, ulong k_offset, ulong k_stride_b, ulong k_stride_h, ulong k_stride_s,
    __global const storage_t *v, ulong v_offset, ulong v_stride_b, ulong v_stride_h, ulong v_stride_s,
    __global const storage_t *dout, ulong do_offset, ulong do_stride_b, ulong do_stride_h, ulong do_stride_s,
    __global const float *lse, ulong lse_offset, ulong lse_stride_b, ulong lse_stride_h, ulong lse_stride_s,
    __global const float *delta, __global storage_t *dk, ulong dk_offset, ulong dk_stride_b, ulong dk_stride_h,
    ulong dk_stride_s, __global storage_t *dv, ulong dv_offset, ulong dv_stride_b, ulong dv_stride_h,
    ulong dv_stride_s, int heads_q, int group_size, int seqlen_q, int seqlen_k, float scale,
    int causal FLASHCL_SCORE_MOD_PARAMS FLASHCL_BIAS_PARAMS) {
    // Descriptors address 16-byte units and read whole core matrices: the
    // tiles are aligned (wgmma read wrong values at 2-byte alignment).
    __local uchar k_tile[BW_TILE_BYTES(BW_KEYS)] __attribute__((aligned(128)));
    __local uchar v_tile[BW_TILE_BYTES(BW_KEYS)] __attribute__((aligned(128)));
    __local uchar q_tiles[2][BW_TILE_BYTES(BW_BLOCK_Q)] __attribute__((aligned(128)));
    __local uchar do_tiles[2][BW_TILE_BYTES(BW_BLOCK_Q)] __attribute__((aligned(128)));
    // Each stage's LSE (log2 units, +inf past the end) and D per query.
    __local float lse_tiles[2][BW_BLOCK_Q], delta_tiles[2][BW_BLOCK_Q];
#if FLASHCL_BIAS_STAGED
    // Each stage's bias: its queries x the work-group's keys (mma_operands.cl's padded rows), copied with Q and dO.
    __local uint4 bias_tiles[2][BW_BLOCK_Q * BIAS_TILE_ROW(BW_KEYS)];
#endif

    const int lid = (int)get_local_id(0);
    const int warpgroup = lid / 128, warp = (lid % 128) / 32, lane = lid % 32;
    const int g = lane >> 2, t = lane & 3;
    const int key0 = (int)get_group_id(0) * BW_KEYS;
    const int heads_kv = heads_q / group_size;
    const int bh = (int)get_group_id(1);
    const int b = bh / heads_kv;
    const int hk = bh - b * heads_kv;
    const ulong k_base = k_offset + (ulong)b * k_stride_b + (ulong)hk * k_stride_h;
    const ulong v_base = v_offset + (ulong)b * v_stride_b + (ulong)hk * v_stride_h;
    const int wg_key0 = key0 + warpgroup * 64;
    const int key_top = wg_key0 + warp * 16 + g, key_bottom = key_top + 8;
    const float scale2 = BW_SCALE2(scale);

    // Bottom-right causal alignment: query i sees keys j <= i + diagonal, so
    // queries before key0 - diagonal see none of this group's keys.
    const int diagonal = seqlen_k - seqlen_q;
    const int q_start = causal ? min(seqlen_q, (max(0, key0 - diagonal) / BW_BLOCK_Q) * BW_BLOCK_Q) : 0;
    const int q_blocks = (seqlen_q - q_start + BW_BLOCK_Q - 1) / BW_BLOCK_Q;
    // One step per (query head of the group, query block), in that order.
    const int steps = group_size * q_blocks;

    float dk_acc[BW_ACC_REGS], dv_acc[BW_ACC_REGS];
    UNROLL_ALWAYS
    for (int i = 0; i < BW_ACC_REGS; ++i) dk_acc[i] = dv_acc[i] = 0.0f;
    float st[BW_ST_REGS], dpt[BW_ST_REGS];
    UNROLL_ALWAYS
    for (int i = 0; i < BW_ST_REGS; ++i) st[i] = dpt[i] = 0.0f;

    // Descriptors: this warpgroup's 64 keys of K and V (A, K-major), each
    // stage's Q and dO K-major (B of S^T, dP^T) and MN-major (B of dK, dV).
    const ulong k_desc = wg_descriptor(SHARED_ADDRESS(k_tile + warpgroup * BW_TILE_BYTES(64)), 128, BW_GROUP_BYTES);
    const ulong v_desc = wg_descriptor(SHARED_ADDRESS(v_tile + warpgroup * BW_TILE_BYTES(64)), 128, BW_GROUP_BYTES);
    const ulong q_desc0 = wg_descriptor(SHARED_ADDRESS(q_tiles[0]), 128, BW_GROUP_BYTES);
    const ulong do_desc0 = wg_descriptor(SHARED_ADDRESS(do_tiles[0]), 128, BW_GROUP_BYTES);
    const ulong q_mn0 = wg_descriptor(SHARED_ADDRESS(q_tiles[0]), BW_GROUP_BYTES, 128);
    const ulong do_mn0 = wg_descriptor(SHARED_ADDRESS(do_tiles[0]), BW_GROUP_BYTES, 128);
    // The second stage's descriptors differ by its distance in 16-byte units.
    const ulong q_stage_units = (ulong)(SHARED_ADDRESS(q_tiles[1]) - SHARED_ADDRESS(q_tiles[0])) >> 4;
    const ulong do_stage_units = (ulong)(SHARED_ADDRESS(do_tiles[1]) - SHARED_ADDRESS(do_tiles[0])) >> 4;

    // Copies step s's Q and dO rows (cp.async, not committed) and its LSE
    // and D (plain stores: visible after the next barrier) into stage s & 1.
#define BW_FETCH_STEP(s_)                                                                                      \
    do {                                                                                                       \
        const int hq_ = hk * group_size + (s_) / q_blocks;                                                     \
        const int q0_ = q_start + ((s_) % q_blocks) * BW_BLOCK_Q;                                              \
        const ulong q_base_ = q_offset + (ulong)b * q_stride_b + (ulong)hq_ * q_stride_h;                      \
        const ulong do_base_ = do_offset + (ulong)b * do_stride_b + (ulong)hq_ * do_stride_h;                  \
        WG_FETCH_TILE(q_tiles[(s_) & 1], q, q_base_, q_stride_s, q0_, seqlen_q, BW_BLOCK_Q, HEAD_DIM);        \
        WG_FETCH_TILE(do_tiles[(s_) & 1], dout, do_base_, do_stride_s, q0_, seqlen_q, BW_BLOCK_Q, HEAD_DIM);  \
        const ulong lse_base_ = lse_offset + (ulong)b * lse_stride_b + (ulong)hq_ * lse_stride_h;              \
        const ulong delta_base_ = ((ulong)b * (ulong)heads_q + (ulong)hq_) * (ulong)seqlen_q;                  \
        for (int r_ = lid; r_ < BW_BLOCK_Q; r_ += WG_SIZE) {                                                   \
            const bool valid_ = q0_ + r_ < seqlen_q;                                                           \
            lse_tiles[(s_) & 1][r_] = lse_log2(lse, lse_base_ + (ulong)(q0_ + r_) * lse_stride_s, valid_);    \
            delta_tiles[(s_) & 1][r_] = valid_ ? delta[delta_base_ + (ulong)(q0_ + r_)] : 0.0f;                \
        }                                                                                                      \
        BW_FETCH_BIAS(s_, hq_, q0_);                                                                           \
    } while (0)
#if FLASHCL_BIAS_STAGED
    // Keys from the last whole chunk before seqlen_k on are read from global memory (FETCH_BIAS_TILE leaves them).
    const int bias_staged_end = BIAS_STAGED_END(seqlen_k);
#define BW_FETCH_BIAS(s_, hq_, q0_)                                                                            \
    do {                                                                                                       \
        const ulong bias_base = FLASHCL_BIAS_BASE(b, hq_);                                                     \
        FETCH_BIAS_TILE(bias_tiles[(s_) & 1], q0_, BW_BLOCK_Q, seqlen_q, key0, BW_KEYS, seqlen_k);             \
    } while (0)
#else
#define BW_FETCH_BIAS(s_, hq_, q0_)
#endif

    if (steps > 0) {
        WG_FETCH_TILE(k_tile, k, k_base, k_stride_s, key0, seqlen_k, BW_KEYS, HEAD_DIM);
        WG_FETCH_TILE(v_tile, v, v_base, v_stride_s, key0, seqlen_k, BW_KEYS, HEAD_DIM);
        BW_FETCH_STEP(0);
        COPY_COMMIT();
    }
    for (int s = 0; s < steps; ++s) {
        const int q0 = q_start + (s % q_blocks) * BW_BLOCK_Q;
        const int stage = s & 1;
#if FLASHCL_ALIBI
        const float alibi_slope = FLASHCL_ALIBI_SLOPE(b, hk * group_size + s / q_blocks);
#endif
#if FLASHCL_BIAS
        const ulong bias_base = FLASHCL_BIAS_BASE(b, hk * group_size + s / q_blocks);
#endif
        // Step s (and K, V) has landed; every warpgroup is done with step
        // s - 1, whose stage step s + 1 now fills.
        COPY_WAIT(0);
        WG_FENCE_PROXY();
        barrier(CLK_LOCAL_MEM_FENCE);
        if (s + 1 < steps) {
            BW_FETCH_STEP(s + 1);
            COPY_COMMIT();
        }
        const ulong q_desc = q_desc0 + (stage ? q_stage_units : 0);
        const ulong do_desc = do_desc0 + (stage ? do_stage_units : 0);
        const ulong q_mn = q_mn0 + (stage ? q_stage_units : 0);
        const ulong do_mn = do_mn0 + (stage ? do_stage_units : 0);

        // S^T and dP^T over HEAD_DIM / 16 k-steps of 16 dims (two 128-byte
        // core matrices along k: 16 units), each its own group; the first
        // step of each overwrites.
        WGMMA_FENCE();
        UNROLL_ALWAYS
        for (int d = 0; d < HEAD_DIM / 16; ++d) WGMMA_SS(BW_BLOCK_Q, st, k_desc + 16 * d, q_desc + 16 * d, d > 0);
        WGMMA_COMMIT();
        UNROLL_ALWAYS
        for (int d = 0; d < HEAD_DIM / 16; ++d) WGMMA_SS(BW_BLOCK_Q, dpt, v_desc + 16 * d, do_desc + 16 * d, d > 0);
        WGMMA_COMMIT();

        // P^T while dP^T is still in flight, then dS^T (soft-capped: both
        // waited for, dS^T with P^T).
        WGMMA_WAIT1(BW_BLOCK_Q, st);
#if FLASHCL_SOFTCAP
        WGMMA_WAIT(BW_BLOCK_Q, dpt);
#endif
        __local const float *lse_s = lse_tiles[stage];
        __local const float *delta_s = delta_tiles[stage];
        const bool masked = causal && wg_key0 + 63 > q0 + diagonal; // uniform per warpgroup
        UNROLL_ALWAYS
        for (int n = 0; n < BW_BLOCK_Q / 8; ++n) {
            const int col = n * 8 + 2 * t;
            const float2 l = vload2(0, lse_s + col);
#if FLASHCL_SCORE_MODS
            float g0 = 1.0f, g1 = 1.0f, g2 = 1.0f, g3 = 1.0f; // soft-capping's derivatives
            {
#if WG_BWD_ALIBI_STEPS
                // ALiBi's distances in float steps from the lane's first query of the block (common.cl).
                const int pos0 = q0 + 2 * t + diagonal;
                st[4 * n] = FLASHCL_SCORE_MOD_STEP(st[4 * n] * scale, g0, alibi_slope, pos0, key_top, -(n * 8));
                st[4 * n + 1] =
                    FLASHCL_SCORE_MOD_STEP(st[4 * n + 1] * scale, g1, alibi_slope, pos0, key_top, -(n * 8 + 1));
                st[4 * n + 2] = FLASHCL_SCORE_MOD_STEP(st[4 * n + 2] * scale, g2, alibi_slope, pos0, key_bottom, -(n * 8));
                st[4 * n + 3] =
                    FLASHCL_SCORE_MOD_STEP(st[4 * n + 3] * scale, g3, alibi_slope, pos0, key_bottom, -(n * 8 + 1));
                (void)pos0;
#else
                const int pos = q0 + col + diagonal; // the query's key position
                st[4 * n] = FLASHCL_SCORE_MOD(st[4 * n] * scale, g0, alibi_slope, pos, key_top);
                st[4 * n + 1] = FLASHCL_SCORE_MOD(st[4 * n + 1] * scale, g1, alibi_slope, pos + 1, key_top);
                st[4 * n + 2] = FLASHCL_SCORE_MOD(st[4 * n + 2] * scale, g2, alibi_slope, pos, key_bottom);
                st[4 * n + 3] = FLASHCL_SCORE_MOD(st[4 * n + 3] * scale, g3, alibi_slope, pos + 1, key_bottom);
#endif
            }
#elif FLASHCL_BIAS
            st[4 * n] *= scale;
            st[4 * n + 1] *= scale;
            st[4 * n + 2] *= scale;
            st[4 * n + 3] *= scale;
#endif
#if FLASHCL_BIAS
            // After soft-capping and ALiBi, before the masks (the forward's order); pairs past the ends read 0.
#if FLASHCL_BIAS_STAGED
            float4 bias4;
            if (key_bottom < bias_staged_end) { // both keys staged (key_top = key_bottom - 8); rows past seqlen_q are 0
                __local const uint4 *row = bias_tiles[stage] + col * BIAS_TILE_ROW(BW_KEYS);
                __local const uint4 *next = row + BIAS_TILE_ROW(BW_KEYS);
                bias4 = (float4)(bias_value_local(row, key_top - key0), bias_value_local(next, key_top - key0),
                                 bias_value_local(row, key_bottom - key0), bias_value_local(next, key_bottom - key0));
            } else
#else
            const float4
#endif
            bias4 = (float4)(FLASHCL_BIAS_VALUE(bias_base, q0 + col, key_top),
                             FLASHCL_BIAS_VALUE(bias_base, q0 + col + 1, key_top),
                             FLASHCL_BIAS_VALUE(bias_base, q0 + col, key_bottom),
                             FLASHCL_BIAS_VALUE(bias_base, q0 + col + 1, key_bottom));
            st[4 * n] += bias4.x;
            st[4 * n + 1] += bias4.y;
            st[4 * n + 2] += bias4.z;
            st[4 * n + 3] += bias4.w;
#endif
            float p0 = EXP2(fma(st[4 * n], scale2, -l.x));
            float p1 = EXP2(fma(st[4 * n + 1], scale2, -l.y));
            float p2 = EXP2(fma(st[4 * n + 2], scale2, -l.x));
            float p3 = EXP2(fma(st[4 * n + 3], scale2, -l.y));
            if (masked) {
                const int query = q0 + col + diagonal;
                if (key_top > query) p0 = 0.0f;
                if (key_top > query + 1) p1 = 0.0f;
                if (key_bottom > query) p2 = 0.0f;
                if (key_bottom > query + 1) p3 = 0.0f;
            }
#if FLASHCL_BIAS
            // A -inf bias hides its pair as a mask does (P exactly 0; backward_mma.cl's BIAS_HIDE).
            if (bias4.x == -INFINITY) p0 = 0.0f;
            if (bias4.y == -INFINITY) p1 = 0.0f;
            if (bias4.z == -INFINITY) p2 = 0.0f;
            if (bias4.w == -INFINITY) p3 = 0.0f;
#endif
#if FLASHCL_SOFTCAP
            {
                const float2 dl = vload2(0, delta_s + col);
                dpt[4 * n] = p0 * (dpt[4 * n] - dl.x) * g0;
                dpt[4 * n + 1] = p1 * (dpt[4 * n + 1] - dl.y) * g1;
                dpt[4 * n + 2] = p2 * (dpt[4 * n + 2] - dl.x) * g2;
                dpt[4 * n + 3] = p3 * (dpt[4 * n + 3] - dl.y) * g3;
            }
#endif
            st[4 * n] = p0;
            st[4 * n + 1] = p1;
            st[4 * n + 2] = p2;
            st[4 * n + 3] = p3;
        }
#if !FLASHCL_SOFTCAP
        WGMMA_WAIT(BW_BLOCK_Q, dpt);
#endif
        uint pa[BW_BLOCK_Q / 16][4], dsa[BW_BLOCK_Q / 16][4];
        UNROLL_ALWAYS
        for (int n = 0; n < BW_BLOCK_Q / 8; ++n) {
            const int col = n * 8 + 2 * t;
            const float2 dl = vload2(0, delta_s + col);
            const float ds0 = BW_DS(st[4 * n], dpt[4 * n], dl.x);
            const float ds1 = BW_DS(st[4 * n + 1], dpt[4 * n + 1], dl.y);
            const float ds2 = BW_DS(st[4 * n + 2], dpt[4 * n + 2], dl.x);
            const float ds3 = BW_DS(st[4 * n + 3], dpt[4 * n + 3], dl.y);
            // The A fragment of 16-query step n / 2: words (top, queries 2t..), (bottom, 2t..), (top, 8 + 2t..),
            // (bottom, 8 + 2t..), as forward_wgmma.cl packs P.
            pa[n / 2][(n % 2) * 2] = pack2(st[4 * n], st[4 * n + 1]);
            pa[n / 2][(n % 2) * 2 + 1] = pack2(st[4 * n + 2], st[4 * n + 3]);
            dsa[n / 2][(n % 2) * 2] = pack2(ds0, ds1);
            dsa[n / 2][(n % 2) * 2 + 1] = pack2(ds2, ds3);
        }

        // dV += P^T dO and dK += dS^T Q over BW_BLOCK_Q / 16 k-steps of 16
        // queries (two 8-row groups of the stage's tile: 2 * BW_GROUP_BYTES).
        WGMMA_FENCE();
        UNROLL_ALWAYS
        for (int kk = 0; kk < BW_BLOCK_Q / 16; ++kk)
            WGMMA_RS(HEAD_DIM, dv_acc, pa[kk], do_mn + kk * (2 * BW_GROUP_BYTES / 16));
        WGMMA_COMMIT();
        UNROLL_ALWAYS
        for (int kk = 0; kk < BW_BLOCK_Q / 16; ++kk)
            WGMMA_RS(HEAD_DIM, dk_acc, dsa[kk], q_mn + kk * (2 * BW_GROUP_BYTES / 16));
        WGMMA_COMMIT();
        BW_WAIT1_PV(HEAD_DIM, dv_acc, BW_BLOCK_Q, pa);
        WGMMA_WAIT_PV(HEAD_DIM, dk_acc, BW_BLOCK_Q, dsa);
    }
#undef BW_FETCH_STEP
#undef BW_FETCH_BIAS

    // Keys past seqlen_k are not stored; dK takes the softmax scale once.
    const ulong dk_base = dk_offset + (ulong)b * dk_stride_b + (ulong)hk * dk_stride_h;
    const ulong dv_base = dv_offset + (ulong)b * dv_stride_b + (ulong)hk * dv_stride_h;
    UNROLL_ALWAYS
    for (int i = 0; i < BW_ACC_REGS / 4; ++i) {
        const int col = i * 8 + 2 * t;
        if (key_top < seqlen_k) {
            STORE_PAIR(dk, dk_base + (ulong)key_top * dk_stride_s + col, dk_acc[4 * i] * scale,
                       dk_acc[4 * i + 1] * scale);
            STORE_PAIR(dv, dv_base + (ulong)key_top * dv_stride_s + col, dv_acc[4 * i], dv_acc[4 * i + 1]);
        }
        if (key_bottom < seqlen_k) {
            STORE_PAIR(dk, dk_base + (ulong)key_bottom * dk_stride_s + col, dk_acc[4 * i + 2] * scale,
                       dk_acc[4 * i + 3] * scale);
            STORE_PAIR(dv, dv_base + (ulong)key_bottom * dv_stride_s + col, dv_acc[4 * i + 2], dv_acc[4 * i + 3]);
        }
    }
}

// ---- dQ ------------------------------------------------------------------------
// flashcl_backward_wgmma_dq: the forward's shape (forward_wgmma.cl): each
// warpgroup owns 64 query rows (wgmma's m) of one head and walks the keys,
// BWQ_BLOCK_K at a time:
//   S  = Q K^T    (Q and K by descriptor, K-major)
//   dP = dO V^T   (dO and V likewise)
//   dS = P * (dP - D), P = exp2(S scale log2(e) - LSE_log2[row]), masked
//   dQ += dS K    (dS from registers as the forward's P; K by descriptor,
//                  MN-major, as the forward's V)
// and dQ is scaled once at the end. Q and dO (the work-group's rows) are
// copied once; K and V blocks go to two stages, block j + 1 copied while j is
// computed. Each dQ row has one owner: no atomics, fixed order.
// Macros taken (host -D): BWQ_WARPGROUPS (64 * BWQ_WARPGROUPS query rows per
// work-group), BWQ_BLOCK_K (keys per step: 32, 64, 96 or 128).
#ifdef BWQ_WARPGROUPS
#ifndef BWQ_BLOCK_K
#define BWQ_BLOCK_K 64
#endif
#if BWQ_BLOCK_K != 32 && BWQ_BLOCK_K != 64 && BWQ_BLOCK_K != 96 && BWQ_BLOCK_K != 128
#error "BWQ_BLOCK_K must be 32, 64, 96 or 128"
#endif
#undef WG_SIZE
#define WG_SIZE (128 * BWQ_WARPGROUPS)
#define BWQ_ROWS (64 * BWQ_WARPGROUPS)
#define BWQ_S_REGS (BWQ_BLOCK_K / 2)

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void flashcl_backward_wgmma_dq(
    __global const storage_t *q, ulong q_offset, ulong q_stride_b, ulong q_stride_h, ulong q_stride_s,
    __global const storage_t *k, ulong k_offset, ulong k_stride_b, ulong k_stride_h, ulong k_stride_s,
    __global const storage_t *v, ulong v_offset, ulong v_stride_b, ulong v_stride_h, ulong v_stride_s,
    __global const storage_t *dout, ulong do_offset, ulong do_stride_b, ulong do_stride_h, ulong do_stride_s,
    __global const float *lse, ulong lse_offset, ulong lse_stride_b, ulong lse_stride_h, ulong lse_stride_s,
    __global const float *delta, __global storage_t *dq, ulong dq_offset, ulong dq_stride_b, ulong dq_stride_h,
    ulong dq_stride_s, int heads_q, int group_size, int seqlen_q, int seqlen_k, float scale,
    int causal FLASHCL_SCORE_MOD_PARAMS FLASHCL_BIAS_PARAMS FLASHCL_DBIAS_PARAMS) {
    __local uchar q_tile[BW_TILE_BYTES(BWQ_ROWS)] __attribute__((aligned(128)));
    __local uchar do_tile[BW_TILE_BYTES(BWQ_ROWS)] __attribute__((aligned(128)));
    __local uchar k_tiles[2][BW_TILE_BYTES(BWQ_BLOCK_K)] __attribute__((aligned(128)));
    __local uchar v_tiles[2][BW_TILE_BYTES(BWQ_BLOCK_K)] __attribute__((aligned(128)));
#if FLASHCL_BIAS_STAGED
    // Each stage's bias: the work-group's rows x the block's keys (mma_operands.cl's padded rows), copied with K, V.
    __local uint4 bias_tiles[2][BWQ_ROWS * BIAS_TILE_ROW(BWQ_BLOCK_K)];
#endif

    const int lid = (int)get_local_id(0);
    const int warpgroup = lid / 128, warp = (lid % 128) / 32, lane = lid % 32;
    const int g = lane >> 2, t = lane & 3;
    // Causal groups near the end of the sequence have the most keys: they
    // start first so the short ones fill the tail.
    const int q0 = ((int)get_num_groups(0) - 1 - (int)get_group_id(0)) * BWQ_ROWS;
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
    const int wg_row0 = q0 + warpgroup * 64;
    const int row_top = wg_row0 + warp * 16 + g, row_bottom = row_top + 8;
    const float scale2 = BW_SCALE2(scale);
#if FLASHCL_ALIBI
    const float alibi_slope = FLASHCL_ALIBI_SLOPE(b, h);
#endif
#if FLASHCL_BIAS
    const ulong bias_base = FLASHCL_BIAS_BASE(b, h);
    const ulong dbias_base = dbias_offset + (ulong)b * dbias_stride_b + (ulong)h * dbias_stride_h;
#endif
#if FLASHCL_BIAS_STAGED
    // Keys from the last whole chunk before seqlen_k on are read from global memory (FETCH_BIAS_TILE leaves them).
    const int bias_staged_end = BIAS_STAGED_END(seqlen_k);
#define BWQ_FETCH_BIAS(stage_, k0_) FETCH_BIAS_TILE(bias_tiles[stage_], q0, BWQ_ROWS, seqlen_q, k0_, BWQ_BLOCK_K, seqlen_k)
#else
#define BWQ_FETCH_BIAS(stage_, k0_)
#endif
    const float lse_top = lse_log2(lse, lse_base + (ulong)row_top * lse_stride_s, row_top < seqlen_q);
    const float lse_bottom = lse_log2(lse, lse_base + (ulong)row_bottom * lse_stride_s, row_bottom < seqlen_q);
    const float delta_top = row_top < seqlen_q ? delta[delta_base + (ulong)row_top] : 0.0f;
    const float delta_bottom = row_bottom < seqlen_q ? delta[delta_base + (ulong)row_bottom] : 0.0f;

    const int diagonal = seqlen_k - seqlen_q;
    int key_end = seqlen_k;
    if (causal) key_end = clamp(q0 + BWQ_ROWS + diagonal, 0, seqlen_k);
    const int blocks = (key_end + BWQ_BLOCK_K - 1) / BWQ_BLOCK_K;

    float dq_acc[BW_ACC_REGS], s[BWQ_S_REGS], dp[BWQ_S_REGS];
    UNROLL_ALWAYS
    for (int i = 0; i < BW_ACC_REGS; ++i) dq_acc[i] = 0.0f;
    UNROLL_ALWAYS
    for (int i = 0; i < BWQ_S_REGS; ++i) s[i] = dp[i] = 0.0f;

    // This warpgroup's 64 rows of Q and dO (A, K-major); each stage's K and V
    // K-major (B of S, dP) and K MN-major (B of dQ += dS K).
    const ulong q_desc = wg_descriptor(SHARED_ADDRESS(q_tile + warpgroup * BW_TILE_BYTES(64)), 128, BW_GROUP_BYTES);
    const ulong do_desc = wg_descriptor(SHARED_ADDRESS(do_tile + warpgroup * BW_TILE_BYTES(64)), 128, BW_GROUP_BYTES);
    const ulong k_desc0 = wg_descriptor(SHARED_ADDRESS(k_tiles[0]), 128, BW_GROUP_BYTES);
    const ulong v_desc0 = wg_descriptor(SHARED_ADDRESS(v_tiles[0]), 128, BW_GROUP_BYTES);
    const ulong k_mn0 = wg_descriptor(SHARED_ADDRESS(k_tiles[0]), BW_GROUP_BYTES, 128);
    const ulong k_stage_units = (ulong)(SHARED_ADDRESS(k_tiles[1]) - SHARED_ADDRESS(k_tiles[0])) >> 4;
    const ulong v_stage_units = (ulong)(SHARED_ADDRESS(v_tiles[1]) - SHARED_ADDRESS(v_tiles[0])) >> 4;

    if (blocks > 0) {
        WG_FETCH_TILE(q_tile, q, q_base, q_stride_s, q0, seqlen_q, BWQ_ROWS, HEAD_DIM);
        WG_FETCH_TILE(do_tile, dout, do_base, do_stride_s, q0, seqlen_q, BWQ_ROWS, HEAD_DIM);
        WG_FETCH_TILE(k_tiles[0], k, k_base, k_stride_s, 0, seqlen_k, BWQ_BLOCK_K, HEAD_DIM);
        WG_FETCH_TILE(v_tiles[0], v, v_base, v_stride_s, 0, seqlen_k, BWQ_BLOCK_K, HEAD_DIM);
        BWQ_FETCH_BIAS(0, 0);
        COPY_COMMIT();
    }
    for (int j = 0; j < blocks; ++j) {
        const int k0 = j * BWQ_BLOCK_K;
        const int stage = j & 1;
        // Block j (and Q, dO) has landed; every warpgroup is done with block
        // j - 1, whose stage block j + 1 now fills.
        COPY_WAIT(0);
        WG_FENCE_PROXY();
        barrier(CLK_LOCAL_MEM_FENCE);
        if (j + 1 < blocks) {
            WG_FETCH_TILE(k_tiles[stage ^ 1], k, k_base, k_stride_s, k0 + BWQ_BLOCK_K, seqlen_k, BWQ_BLOCK_K,
                          HEAD_DIM);
            WG_FETCH_TILE(v_tiles[stage ^ 1], v, v_base, v_stride_s, k0 + BWQ_BLOCK_K, seqlen_k, BWQ_BLOCK_K,
                          HEAD_DIM);
            BWQ_FETCH_BIAS(stage ^ 1, k0 + BWQ_BLOCK_K);
            COPY_COMMIT();
        }
        const ulong k_desc = k_desc0 + (stage ? k_stage_units : 0);
        const ulong v_desc = v_desc0 + (stage ? v_stage_units : 0);
        const ulong k_mn = k_mn0 + (stage ? k_stage_units : 0);

        WGMMA_FENCE();
        UNROLL_ALWAYS
        for (int d = 0; d < HEAD_DIM / 16; ++d) WGMMA_SS(BWQ_BLOCK_K, s, q_desc + 16 * d, k_desc + 16 * d, d > 0);
        WGMMA_COMMIT();
        UNROLL_ALWAYS
        for (int d = 0; d < HEAD_DIM / 16; ++d) WGMMA_SS(BWQ_BLOCK_K, dp, do_desc + 16 * d, v_desc + 16 * d, d > 0);
        WGMMA_COMMIT();

        // P while dP is in flight (soft-capped: both waited for, dS with P):
        // keys past seqlen_k (zero K rows) and past the causal diagonal
        // hidden (a uniform test per warpgroup).
        WGMMA_WAIT1(BWQ_BLOCK_K, s);
#if FLASHCL_SOFTCAP
        WGMMA_WAIT(BWQ_BLOCK_K, dp);
#endif
        const bool masked = k0 + BWQ_BLOCK_K > seqlen_k || (causal && k0 + BWQ_BLOCK_K - 1 > wg_row0 + diagonal);
        UNROLL_ALWAYS
        for (int n = 0; n < BWQ_BLOCK_K / 8; ++n) {
#if FLASHCL_SCORE_MODS
            float g0 = 1.0f, g1 = 1.0f, g2 = 1.0f, g3 = 1.0f; // soft-capping's derivatives
            {
#if !WG_BWD_ALIBI_STEPS || (HEAD_DIM == 64 && BWQ_BLOCK_K == 64)
                // ALiBi per score in integers (WG_BWD_ALIBI_STEPS, above), and on d64's 64-key tiles (ALiBi-only
                // calls) in any case: with common.cl's float steps this kernel took 1.22-1.25x the time there.
                const int key = k0 + n * 8 + 2 * t;
                s[4 * n] = FLASHCL_SCORE_MOD(s[4 * n] * scale, g0, alibi_slope, row_top + diagonal, key);
                s[4 * n + 1] = FLASHCL_SCORE_MOD(s[4 * n + 1] * scale, g1, alibi_slope, row_top + diagonal, key + 1);
                s[4 * n + 2] = FLASHCL_SCORE_MOD(s[4 * n + 2] * scale, g2, alibi_slope, row_bottom + diagonal, key);
                s[4 * n + 3] =
                    FLASHCL_SCORE_MOD(s[4 * n + 3] * scale, g3, alibi_slope, row_bottom + diagonal, key + 1);
#else
                // ALiBi's distances in float steps from the lane's first key of the block (common.cl).
                const int key0 = k0 + 2 * t;
                s[4 * n] = FLASHCL_SCORE_MOD_STEP(s[4 * n] * scale, g0, alibi_slope, row_top + diagonal, key0, n * 8);
                s[4 * n + 1] =
                    FLASHCL_SCORE_MOD_STEP(s[4 * n + 1] * scale, g1, alibi_slope, row_top + diagonal, key0, n * 8 + 1);
                s[4 * n + 2] =
                    FLASHCL_SCORE_MOD_STEP(s[4 * n + 2] * scale, g2, alibi_slope, row_bottom + diagonal, key0, n * 8);
                s[4 * n + 3] = FLASHCL_SCORE_MOD_STEP(s[4 * n + 3] * scale, g3, alibi_slope, row_bottom + diagonal,
                                                      key0, n * 8 + 1);
                (void)key0;
#endif
            }
#elif FLASHCL_BIAS
            s[4 * n] *= scale;
            s[4 * n + 1] *= scale;
            s[4 * n + 2] *= scale;
            s[4 * n + 3] *= scale;
#endif
#if FLASHCL_BIAS
            // After soft-capping and ALiBi, before the masks; pairs past the ends read 0.
            const int bias_col = k0 + n * 8 + 2 * t;
#if FLASHCL_BIAS_STAGED
            float4 bias4;
            if (bias_col + 1 < bias_staged_end) {
                __local const uint4 *tile = bias_tiles[stage];
                bias4 = (float4)(bias_pair_local(tile + (row_top - q0) * BIAS_TILE_ROW(BWQ_BLOCK_K), n * 8 + 2 * t),
                                 bias_pair_local(tile + (row_bottom - q0) * BIAS_TILE_ROW(BWQ_BLOCK_K), n * 8 + 2 * t));
            } else
#else
            const float4
#endif
            bias4 = (float4)(FLASHCL_BIAS_VALUE(bias_base, row_top, bias_col),
                             FLASHCL_BIAS_VALUE(bias_base, row_top, bias_col + 1),
                             FLASHCL_BIAS_VALUE(bias_base, row_bottom, bias_col),
                             FLASHCL_BIAS_VALUE(bias_base, row_bottom, bias_col + 1));
            s[4 * n] += bias4.x;
            s[4 * n + 1] += bias4.y;
            s[4 * n + 2] += bias4.z;
            s[4 * n + 3] += bias4.w;
#endif
            float p0 = EXP2(fma(s[4 * n], scale2, -lse_top));
            float p1 = EXP2(fma(s[4 * n + 1], scale2, -lse_top));
            float p2 = EXP2(fma(s[4 * n + 2], scale2, -lse_bottom));
            float p3 = EXP2(fma(s[4 * n + 3], scale2, -lse_bottom));
            if (masked) {
                const int col = k0 + n * 8 + 2 * t;
                const bool left_out = col >= seqlen_k, right_out = col + 1 >= seqlen_k;
                if (left_out || (causal && col > row_top + diagonal)) p0 = 0.0f;
                if (right_out || (causal && col + 1 > row_top + diagonal)) p1 = 0.0f;
                if (left_out || (causal && col > row_bottom + diagonal)) p2 = 0.0f;
                if (right_out || (causal && col + 1 > row_bottom + diagonal)) p3 = 0.0f;
            }
#if FLASHCL_BIAS
            if (bias4.x == -INFINITY) p0 = 0.0f;
            if (bias4.y == -INFINITY) p1 = 0.0f;
            if (bias4.z == -INFINITY) p2 = 0.0f;
            if (bias4.w == -INFINITY) p3 = 0.0f;
#endif
#if FLASHCL_SOFTCAP
            {
                // dS before soft-capping's derivative is dBias.
                const float4 ds_score = (float4)(p0 * (dp[4 * n] - delta_top), p1 * (dp[4 * n + 1] - delta_top),
                                                 p2 * (dp[4 * n + 2] - delta_bottom),
                                                 p3 * (dp[4 * n + 3] - delta_bottom));
#if FLASHCL_BIAS
                if (write_dbias) STORE_DBIAS(ds_score, k0 + n * 8 + 2 * t);
#endif
                dp[4 * n] = ds_score.x * g0;
                dp[4 * n + 1] = ds_score.y * g1;
                dp[4 * n + 2] = ds_score.z * g2;
                dp[4 * n + 3] = ds_score.w * g3;
            }
#endif
            s[4 * n] = p0;
            s[4 * n + 1] = p1;
            s[4 * n + 2] = p2;
            s[4 * n + 3] = p3;
        }
#if !FLASHCL_SOFTCAP
        WGMMA_WAIT(BWQ_BLOCK_K, dp);
#endif
        uint dsa[BWQ_BLOCK_K / 16][4];
        UNROLL_ALWAYS
        for (int n = 0; n < BWQ_BLOCK_K / 8; ++n) {
            const float4 ds = (float4)(BW_DS(s[4 * n], dp[4 * n], delta_top), BW_DS(s[4 * n + 1], dp[4 * n + 1], delta_top),
                                       BW_DS(s[4 * n + 2], dp[4 * n + 2], delta_bottom),
                                       BW_DS(s[4 * n + 3], dp[4 * n + 3], delta_bottom));
#if FLASHCL_BIAS && !FLASHCL_SOFTCAP
            if (write_dbias) STORE_DBIAS(ds, k0 + n * 8 + 2 * t); // dS is dBias
#endif
            dsa[n / 2][(n % 2) * 2] = pack2(ds.x, ds.y);
            dsa[n / 2][(n % 2) * 2 + 1] = pack2(ds.z, ds.w);
        }
        // dQ += dS K over BWQ_BLOCK_K / 16 k-steps of 16 keys.
        WGMMA_FENCE();
        UNROLL_ALWAYS
        for (int kk = 0; kk < BWQ_BLOCK_K / 16; ++kk)
            WGMMA_RS(HEAD_DIM, dq_acc, dsa[kk], k_mn + kk * (2 * BW_GROUP_BYTES / 16));
        WGMMA_COMMIT();
        WGMMA_WAIT_PV(HEAD_DIM, dq_acc, BWQ_BLOCK_K, dsa);
    }

#if FLASHCL_BIAS
    // dBias of the keys the loop never reached is 0 (backward_mma.cl's DBIAS_ZERO_UNREACHED).
    if (write_dbias) {
        const int reached = min(seqlen_k, blocks * BWQ_BLOCK_K);
        DBIAS_ZERO_UNREACHED(q0, BWQ_ROWS, reached);
    }
#endif
#undef BWQ_FETCH_BIAS
    const ulong dq_base = dq_offset + (ulong)b * dq_stride_b + (ulong)h * dq_stride_h;
    UNROLL_ALWAYS
    for (int i = 0; i < BW_ACC_REGS / 4; ++i) {
        const int col = i * 8 + 2 * t;
        if (row_top < seqlen_q)
            STORE_PAIR(dq, dq_base + (ulong)row_top * dq_stride_s + col, dq_acc[4 * i] * scale,
                       dq_acc[4 * i + 1] * scale);
        if (row_bottom < seqlen_q)
            STORE_PAIR(dq, dq_base + (ulong)row_bottom * dq_stride_s + col, dq_acc[4 * i + 2] * scale,
                       dq_acc[4 * i + 3] * scale);
    }
}
#endif
