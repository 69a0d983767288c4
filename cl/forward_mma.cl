// forward_mma.cl: the FlashAttention forward pass on matrix units (tensor
// cores), FlashAttention-2's warp layout. Half and bfloat16 storage use the
// 16x8x16 instruction on the stored values; float storage uses the 16x8x8
// TF32 instruction three times per product ("3xTF32"). The fragments, the
// instruction, its emulation and the 3xTF32 split are in cl/mma.cl, which
// the host places before this file (with HEAD_DIM and FLASHCL_MMA_PTX).
//
// Macros taken (host passes them with -D):
//   BLOCK_Q    query rows per work-group: 16 * M_TILES per warp of 32 work-items
//   M_TILES    16-row tiles per warp (each K and V fragment read from local
//              memory serves all of them)
//   BLOCK_K    keys per step of the inner loop, a multiple of 16
//
// Each warp owns 16 * M_TILES query rows for the whole kernel. Lane
// (g = lane / 4, t = lane % 4) holds, as PTX's m16n8k16 fragments define them
// (for float storage, m16n8k8: see cl/mma.cl):
//   Q (A operand): rows g and g + 8, dims 2t, 2t+1, 2t+8, 2t+9 of every
//     16-dim step, packed two 16-bit values per register, loaded once;
//   S and P (accumulators): rows g and g + 8, keys 2t, 2t+1 of every 8-key
//     tile. Two neighbouring 8-key accumulator tiles are exactly the A
//     operand of the product with V, so P never goes through local memory;
//   O (accumulators): rows g and g + 8, dims 2t, 2t+1 of every 8-dim tile.
// A row is spread over the 4 lanes of a quad: its maximum is exchanged
// within the quad (two butterfly shuffles); its sum stays per lane until the
// end. K and V blocks sit in local memory as keys x dims with row strides of
// 4 (mod 8) words, so the 32 lanes' fragment reads (8 rows g x 4 words t,
// or ldmatrix's 8 rows of 16 bytes) hit 32 different banks; V's fragments
// come through ldmatrix's transposing load.
// On NVIDIA the blocks are copied with cp.async, which needs no registers:
// K(j+1) is fetched while P V(j) is computed and V(j+1) while S(j+1) is.
// Row maxima are kept in log2 units (scale * log2(e) folded into the
// scale), so each probability is one fma and one exp2.
// With an additive bias (FLASHCL_BIAS) and FLASHCL_BIAS_STAGED (the host
// checked that the bias rows are 16-byte aligned), the block's bias tile
// (BLOCK_Q x BLOCK_K) is copied to local memory with the V block, as
// cp.async chunks, and each lane reads its pairs there: the per-pair global
// loads it replaces waited out their latency in the softmax's critical path
// (docs/perf.md). Keys from the last whole 16-byte chunk before seqlen_k on
// are read from global memory, as without staging.

#ifndef BLOCK_Q
#define BLOCK_Q 64
#endif
#ifndef BLOCK_K
#define BLOCK_K 64
#endif
#ifndef M_TILES
#define M_TILES 1
#endif
#if BLOCK_Q % 16 != 0 || BLOCK_K % 16 != 0
#error "BLOCK_Q and BLOCK_K must be multiples of 16"
#endif
#if BLOCK_Q % (16 * M_TILES) != 0
#error "BLOCK_Q must be a multiple of 16 * M_TILES"
#endif
#define WARPS (BLOCK_Q / (16 * M_TILES))
#define WG_SIZE (WARPS * 32)
#define KEY_TILES (BLOCK_K / 8)      // 8-key accumulator tiles of S
#define KEY_STEPS (BLOCK_K / MMA_K)  // k-steps of P V
__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void flashcl_forward_mma(
    __global const storage_t *q, ulong q_offset, ulong q_stride_b, ulong q_stride_h, ulong q_stride_s,
    __global const storage_t *k, ulong k_offset, ulong k_stride_b, ulong k_stride_h, ulong k_stride_s,
    __global const storage_t *v, ulong v_offset, ulong v_stride_b, ulong v_stride_h, ulong v_stride_s,
    __global storage_t *o, ulong o_offset, ulong o_stride_b, ulong o_stride_h, ulong o_stride_s,
    __global float *lse, ulong lse_offset, ulong lse_stride_b, ulong lse_stride_h, ulong lse_stride_s,
    int write_lse, int heads_q, int group_size, int seqlen_q, int seqlen_k, float scale,
    int causal FLASHCL_SCORE_MOD_PARAMS FLASHCL_BIAS_PARAMS) {
    // K and V blocks, both keys x dims; each is refilled (asynchronously on
    // NVIDIA) while the other one is in use.
    __local uint4 k_tile4[BLOCK_K * ROW_WORDS / 4];
    __local uint4 v_tile4[BLOCK_K * ROW_WORDS / 4];
    __local const uint *k_tile = (__local const uint *)k_tile4;
    __local const uint *v_tile = (__local const uint *)v_tile4;
#if FLASHCL_BIAS_STAGED
    __local uint4 bias_tile4[BLOCK_Q * BIAS_TILE_ROW(BLOCK_K)]; // with V's block: see the header
#endif

    const int lid = (int)get_local_id(0);
    const int warp = lid / 32, lane = lid % 32;
    const int g = lane >> 2, t = lane & 3;
    MMA_BACKEND_STATE(WARPS)
    MMA_BACKEND_EXCHANGE
    // Causal groups near the end of the sequence have the most keys: they
    // start first so the short ones fill the tail.
    const int q0 = ((int)get_num_groups(0) - 1 - (int)get_group_id(0)) * BLOCK_Q;
    const int bh = (int)get_group_id(1);
    const int b = bh / heads_q;
    const int h = bh - b * heads_q;
    const int hk = h / group_size;
    const ulong q_base = q_offset + (ulong)b * q_stride_b + (ulong)h * q_stride_h;
    const ulong k_base = k_offset + (ulong)b * k_stride_b + (ulong)hk * k_stride_h;
    const ulong v_base = v_offset + (ulong)b * v_stride_b + (ulong)hk * v_stride_h;
    const ulong o_base = o_offset + (ulong)b * o_stride_b + (ulong)h * o_stride_h;
    // This warp's query rows: M_TILES tiles of 16 from warp_row0; lane
    // (g, t) holds rows m * 16 + g ("top") and m * 16 + g + 8 ("bottom").
    const int warp_row0 = q0 + warp * 16 * M_TILES;

    // Q fragments, rows past the sequence as zeros.
    uint qa[M_TILES][DIM_STEPS][4];
    UNROLL_ALWAYS
    for (int m = 0; m < M_TILES; ++m) {
        const int row_top = warp_row0 + m * 16 + g, row_bottom = row_top + 8;
        UNROLL_ALWAYS
        for (int s = 0; s < DIM_STEPS; ++s) {
            // Words t and t + 4 of the step's 8 (VALUES_PER_WORD values each).
            const int col = s * MMA_K + VALUES_PER_WORD * t, second = MMA_K / 2;
            const ulong top = q_base + (ulong)row_top * q_stride_s + col;
            const ulong bottom = q_base + (ulong)row_bottom * q_stride_s + col;
            qa[m][s][0] = row_top < seqlen_q ? LOAD_WORD(q, top) : 0u;
            qa[m][s][1] = row_bottom < seqlen_q ? LOAD_WORD(q, bottom) : 0u;
            qa[m][s][2] = row_top < seqlen_q ? LOAD_WORD(q, top + second) : 0u;
            qa[m][s][3] = row_bottom < seqlen_q ? LOAD_WORD(q, bottom + second) : 0u;
        }
    }

    float4 acc[M_TILES][DIM_TILES];
    // Running maxima (log2 units) and this lane's part of the row sums:
    // [m][0] for the top row of tile m, [m][1] for the bottom one.
    float row_max[M_TILES][2], row_sum[M_TILES][2];
    UNROLL_ALWAYS
    for (int m = 0; m < M_TILES; ++m) {
        row_max[m][0] = row_max[m][1] = -INFINITY;
        row_sum[m][0] = row_sum[m][1] = 0.0f;
        UNROLL_ALWAYS
        for (int j = 0; j < DIM_TILES; ++j) acc[m][j] = (float4)(0.0f);
    }
#if FLASHCL_SCORE_MODS || FLASHCL_BIAS
    // The score modifiers and the bias act on scaled scores (softcap, then
    // the bias and ALiBi, then the masks: cl/common.cl), so each score is
    // scaled and modified where it is computed and the exponents take
    // log2(e) alone.
    const float scale2 = M_LOG2E_F;
#if FLASHCL_ALIBI
    const float alibi_slope = FLASHCL_ALIBI_SLOPE(b, h);
#endif
#if FLASHCL_BIAS
    const ulong bias_base = FLASHCL_BIAS_BASE(b, h);
#endif
#else
    const float scale2 = scale * M_LOG2E_F;
#endif

    // Bottom-right causal alignment: row i sees keys j <= i + diagonal.
    const int diagonal = seqlen_k - seqlen_q;
    int key_end = seqlen_k;
    if (causal) key_end = clamp(q0 + BLOCK_Q + diagonal, 0, seqlen_k);

    // One block of K or V rows (cl/mma.cl's FETCH_TILE); rows past seqlen_k
    // are zeros.
#define FETCH_BLOCK(tile4, src, base, stride_s, key0) FETCH_TILE(tile4, src, base, stride_s, key0, seqlen_k, BLOCK_K)
    // The copies run in order K(0), V(0), then K(j+1) while P V(j) is
    // computed and V(j+1) while S(j+1) is: at every wait, the block needed
    // is the older of the two groups in flight.
#if FLASHCL_BIAS_STAGED
    // The bias of rows q0.. and keys key0.. as 16-byte chunks; a chunk past seqlen_q, or not wholly before
    // seqlen_k, is zeros (its pairs are read from global memory where they exist: bias_staged_end).
#define FETCH_BIAS(key0) FETCH_BIAS_TILE(bias_tile4, q0, BLOCK_Q, seqlen_q, key0, BLOCK_K, seqlen_k)
    const int bias_staged_end = BIAS_STAGED_END(seqlen_k);
#else
#define FETCH_BIAS(key0)
#endif
    if (key_end > 0) {
        FETCH_BLOCK(k_tile4, k, k_base, k_stride_s, 0);
        COPY_COMMIT();
        FETCH_BLOCK(v_tile4, v, v_base, v_stride_s, 0);
        FETCH_BIAS(0);
        COPY_COMMIT();
    }
    for (int k0 = 0; k0 < key_end; k0 += BLOCK_K) {
        const bool has_next = k0 + BLOCK_K < key_end; // uniform
        COPY_WAIT(1); // K(j) has landed
#if FLASHCL_BIAS && !FLASHCL_BIAS_STAGED
        // This block's bias, loaded before the product so that its latency hides behind it.
        float4 bias_pre[M_TILES][KEY_TILES];
        UNROLL_ALWAYS
        for (int m = 0; m < M_TILES; ++m) {
            const int row_top = warp_row0 + m * 16 + g, row_bottom = row_top + 8;
            UNROLL_ALWAYS
            for (int n = 0; n < KEY_TILES; ++n) {
                const int bias_col = k0 + n * 8 + 2 * t;
                bias_pre[m][n] = (float4)(FLASHCL_BIAS_VALUE(bias_base, row_top, bias_col),
                                          FLASHCL_BIAS_VALUE(bias_base, row_top, bias_col + 1),
                                          FLASHCL_BIAS_VALUE(bias_base, row_bottom, bias_col),
                                          FLASHCL_BIAS_VALUE(bias_base, row_bottom, bias_col + 1));
            }
        }
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
#if MMA_WARPS_MAY_SKIP
        // A warp whose rows see no key of this block skips its arithmetic
        // (it would give P = 0 and no change); warp-uniform.
        const bool warp_active = !causal || k0 <= warp_row0 + 16 * M_TILES - 1 + diagonal;
#else
        const bool warp_active = true;
#endif

        // S = Q K^T: each Q fragment is prepared once per dim step and each
        // K fragment serves every row tile of the warp. K's fragment words
        // are t and t + 4 of the step's 8 words in key row n * 8 + g.
        float4 s[M_TILES][KEY_TILES];
        if (warp_active) {
        UNROLL_ALWAYS
        for (int m = 0; m < M_TILES; ++m) {
            UNROLL_ALWAYS
            for (int n = 0; n < KEY_TILES; ++n) s[m][n] = (float4)(0.0f);
        }
        UNROLL
        for (int d = 0; d < DIM_STEPS; ++d) {
            uint qp[M_TILES][A_WORDS];
            UNROLL_ALWAYS
            for (int m = 0; m < M_TILES; ++m) PREPARE_A(qp[m], qa[m][d]);
            UNROLL
            for (int n = 0; n < KEY_TILES; ++n) {
                __local const uint *key_row = k_tile + (n * 8 + g) * ROW_WORDS + t;
                uint kb[B_WORDS];
                TILE_B(kb, key_row + d * 8, 4);
                UNROLL
                for (int m = 0; m < M_TILES; ++m) MMA_S(s[m][n], qp[m], kb);
            }
        }
        }
        barrier(CLK_LOCAL_MEM_FENCE); // every warp is done with K(j)
        if (has_next) {
            FETCH_BLOCK(k_tile4, k, k_base, k_stride_s, k0 + BLOCK_K);
            COPY_COMMIT();
        }

        // Scale, mask (only blocks reaching past seqlen_k or the diagonal:
        // a uniform test), then the online softmax row by row.
        // A -inf bias may hide any pair, so with a bias every block tests its
        // pairs, but only the masked ones test the masks as well (below).
        const bool masked_block = k0 + BLOCK_K > seqlen_k || (causal && k0 + BLOCK_K - 1 > q0 + diagonal);
        // V(j) (with the bias tile, when staged) has landed; K(j+1) may be in flight.
#define WAIT_V_BLOCK()                       \
    do {                                     \
        if (has_next)                        \
            COPY_WAIT(1);                    \
        else                                 \
            COPY_WAIT(0);                    \
        barrier(CLK_LOCAL_MEM_FENCE);        \
    } while (0)
#if FLASHCL_BIAS_STAGED
        WAIT_V_BLOCK(); // the softmax reads the bias tile
#endif
        uint pa[M_TILES][KEY_STEPS][4];
        if (warp_active) {
        UNROLL
        for (int m = 0; m < M_TILES; ++m) {
            const int row_top = warp_row0 + m * 16 + g, row_bottom = row_top + 8;
            // A visible key lifts the block maximum (raw scores) to at least
            // -FLT_MAX even when its score is -inf or NaN (fmax drops NaN),
            // so the maximum stays -inf only for a row that sees no key: the
            // one case written as empty. Every key of an unmasked block is
            // visible.
            float block_top = masked_block || FLASHCL_BIAS ? -INFINITY : -FLT_MAX;
            float block_bottom = block_top;
            // With a bias the key loop has two copies once unrolled, `geometric`
            // a constant in each: the masked blocks' (masks and bias) and the
            // others' (the bias alone: a few instructions per score less on the
            // softmax). Without one, a single copy.
#if FLASHCL_BIAS
#define MMA_MASK_COPIES 2
#else
#define MMA_MASK_COPIES 1
#endif
            UNROLL_ALWAYS
            for (int copy = 0; copy < MMA_MASK_COPIES; ++copy) {
            const bool geometric = copy == 0;
            if (MMA_MASK_COPIES == 2 && geometric != masked_block) continue;
            UNROLL_ALWAYS
            for (int n = 0; n < KEY_TILES; ++n) {
                float4 x = s[m][n];
#if FLASHCL_SCORE_MODS
                {
                    // Lane (g, t) holds keys k0 + n * 8 + 2t and + 1 of rows row_top (x, y) and row_bottom (z, w).
                    float mod_grad;
                    // ALiBi's distances in float steps from the lane's first key of the block (common.cl).
                    const int col0 = k0 + 2 * t;
                    x.x = FLASHCL_SCORE_MOD_STEP(x.x * scale, mod_grad, alibi_slope, row_top + diagonal, col0, n * 8);
                    x.y = FLASHCL_SCORE_MOD_STEP(x.y * scale, mod_grad, alibi_slope, row_top + diagonal, col0, n * 8 + 1);
                    x.z = FLASHCL_SCORE_MOD_STEP(x.z * scale, mod_grad, alibi_slope, row_bottom + diagonal, col0, n * 8);
                    x.w = FLASHCL_SCORE_MOD_STEP(x.w * scale, mod_grad, alibi_slope, row_bottom + diagonal, col0,
                                                 n * 8 + 1);
                    (void)mod_grad;
                    (void)col0;
                }
#elif FLASHCL_BIAS
                x *= scale;
#endif
#if FLASHCL_BIAS
                // After soft-capping, beside ALiBi, before the masks; pairs past the ends read nothing (0).
#if FLASHCL_BIAS_STAGED
                float4 bias4;
                {
                    const int bias_col = k0 + n * 8 + 2 * t;
                    if (bias_col < bias_staged_end) {
                        const float2 top = bias_pair_local(bias_tile4 + (row_top - q0) * BIAS_TILE_ROW(BLOCK_K), n * 8 + 2 * t);
                        const float2 bottom =
                            bias_pair_local(bias_tile4 + (row_bottom - q0) * BIAS_TILE_ROW(BLOCK_K), n * 8 + 2 * t);
                        bias4 = (float4)(top, bottom);
                    } else {
                        bias4 = (float4)(FLASHCL_BIAS_VALUE(bias_base, row_top, bias_col),
                                         FLASHCL_BIAS_VALUE(bias_base, row_top, bias_col + 1),
                                         FLASHCL_BIAS_VALUE(bias_base, row_bottom, bias_col),
                                         FLASHCL_BIAS_VALUE(bias_base, row_bottom, bias_col + 1));
                    }
                }
#else
                const float4 bias4 = bias_pre[m][n];
#endif
                x += bias4;
#define BIAS_HIDES(component) || bias4.component == -INFINITY
#else
#define BIAS_HIDES(component)
#endif
                if (masked_block || FLASHCL_BIAS) {
                    const int col = k0 + n * 8 + 2 * t;
                    const bool left_out = geometric && col >= seqlen_k, right_out = geometric && col + 1 >= seqlen_k;
                    const bool hide_tl = left_out || (geometric && causal && col > row_top + diagonal) BIAS_HIDES(x);
                    const bool hide_tr =
                        right_out || (geometric && causal && col + 1 > row_top + diagonal) BIAS_HIDES(y);
                    const bool hide_bl =
                        left_out || (geometric && causal && col > row_bottom + diagonal) BIAS_HIDES(z);
                    const bool hide_br =
                        right_out || (geometric && causal && col + 1 > row_bottom + diagonal) BIAS_HIDES(w);
#undef BIAS_HIDES
                    if (hide_tl) x.x = -INFINITY;
                    if (hide_tr) x.y = -INFINITY;
                    if (hide_bl) x.z = -INFINITY;
                    if (hide_br) x.w = -INFINITY;
                    if (!(hide_tl && hide_tr)) block_top = fmax(block_top, -FLT_MAX);
                    if (!(hide_bl && hide_br)) block_bottom = fmax(block_bottom, -FLT_MAX);
                }
                s[m][n] = x;
                block_top = fmax(block_top, fmax(x.x, x.y));
                block_bottom = fmax(block_bottom, fmax(x.z, x.w));
            }
            }
#undef MMA_MASK_COPIES
            block_top = fmax(block_top, QUAD_XOR(block_top, 1));
            block_top = fmax(block_top, QUAD_XOR(block_top, 2));
            block_bottom = fmax(block_bottom, QUAD_XOR(block_bottom, 1));
            block_bottom = fmax(block_bottom, QUAD_XOR(block_bottom, 2));

            // New maxima; alpha rescales what was accumulated. A row with no
            // visible key yet keeps -inf, and its "safe" maximum 0 makes
            // alpha and P exactly 0 instead of NaN.
            // The maxima are kept in log2 units, rounded once (scale2 > 0
            // keeps the order of the raw scores).
            const float new_top = fmax(row_max[m][0], block_max_log2(block_top, scale2));
            const float new_bottom = fmax(row_max[m][1], block_max_log2(block_bottom, scale2));
            const float safe_top = new_top == -INFINITY ? 0.0f : new_top;
            const float safe_bottom = new_bottom == -INFINITY ? 0.0f : new_bottom;
            const float alpha_top = EXP2(row_max[m][0] - safe_top);
            const float alpha_bottom = EXP2(row_max[m][1] - safe_bottom);
            row_max[m][0] = new_top;
            row_max[m][1] = new_bottom;
            float own_top = 0.0f, own_bottom = 0.0f;
            UNROLL_ALWAYS
            for (int n = 0; n < KEY_TILES; ++n) {
                // One rounding, of the difference: a score near its row's
                // maximum keeps its accuracy (scaling first would round it
                // at the magnitude of the score). Every P of a row is
                // relative to the same rounded maximum, so that rounding
                // cancels in O.
                const float4 p = (float4)(EXP2(fma(s[m][n].x, scale2, -safe_top)),
                                          EXP2(fma(s[m][n].y, scale2, -safe_top)),
                                          EXP2(fma(s[m][n].z, scale2, -safe_bottom)),
                                          EXP2(fma(s[m][n].w, scale2, -safe_bottom)));
                own_top += p.x + p.y;
                own_bottom += p.z + p.w;
                P_TO_A(pa[m], n, p);
            }
            row_sum[m][0] = row_sum[m][0] * alpha_top + own_top;
            row_sum[m][1] = row_sum[m][1] * alpha_bottom + own_bottom;
            UNROLL_ALWAYS
            for (int j = 0; j < DIM_TILES; ++j)
                acc[m][j] *= (float4)(alpha_top, alpha_top, alpha_bottom, alpha_bottom);
        }
        }

#if !FLASHCL_BIAS_STAGED
        WAIT_V_BLOCK();
#endif
#undef WAIT_V_BLOCK
        // O += P V: each V fragment serves every row tile of the warp.
        if (warp_active) {
            UNROLL
            for (int kk = 0; kk < KEY_STEPS; ++kk) {
                uint pp[M_TILES][A_WORDS];
                UNROLL_ALWAYS
                for (int m = 0; m < M_TILES; ++m) PREPARE_A(pp[m], pa[m][kk]);
                UNROLL
                for (int j = 0; j < DIM_TILES; j += 2) {
                    uint left[B_WORDS], right[B_WORDS];
                    TILE_B_TRANSPOSED(left, right, v_tile, kk * MMA_K, j);
                    UNROLL
                    for (int m = 0; m < M_TILES; ++m) {
                        MMA_PV(acc[m][j], pp[m], left);
                        MMA_PV(acc[m][j + 1], pp[m], right);
                    }
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE); // every warp is done with V(j)
        if (has_next) {
            FETCH_BLOCK(v_tile4, v, v_base, v_stride_s, k0 + BLOCK_K);
            FETCH_BIAS(k0 + BLOCK_K);
            COPY_COMMIT();
        }
    }
#undef FETCH_BIAS

    UNROLL
    for (int m = 0; m < M_TILES; ++m) {
        const int row_top = warp_row0 + m * 16 + g, row_bottom = row_top + 8;
        // Each row's sum is spread over the 4 lanes of its quad.
        float sum_top = row_sum[m][0], sum_bottom = row_sum[m][1];
        sum_top += QUAD_XOR(sum_top, 1);
        sum_top += QUAD_XOR(sum_top, 2);
        sum_bottom += QUAD_XOR(sum_bottom, 1);
        sum_bottom += QUAD_XOR(sum_bottom, 2);
        // Empty only when no key was visible; a zero or NaN sum of a row
        // that saw keys gives NaN (0 * inf, x * NaN), as IEEE arithmetic does.
        const float inv_top = row_max[m][0] == -INFINITY ? 0.0f : row_in_range(row_max[m][0]) ? 1.0f / sum_top : NAN;
        const float inv_bottom =
            row_max[m][1] == -INFINITY ? 0.0f : row_in_range(row_max[m][1]) ? 1.0f / sum_bottom : NAN;
        UNROLL_ALWAYS
        for (int j = 0; j < DIM_TILES; ++j) {
            const int col = j * 8 + 2 * t;
            if (row_top < seqlen_q)
                STORE_PAIR(o, o_base + (ulong)row_top * o_stride_s + col, acc[m][j].x * inv_top,
                           acc[m][j].y * inv_top);
            if (row_bottom < seqlen_q)
                STORE_PAIR(o, o_base + (ulong)row_bottom * o_stride_s + col, acc[m][j].z * inv_bottom,
                           acc[m][j].w * inv_bottom);
        }
        if (write_lse && t == 0) {
            const ulong lse_base = lse_offset + (ulong)b * lse_stride_b + (ulong)h * lse_stride_h;
            // Natural units: LSE = ln(2) * (max + log2(sum)).
            if (row_top < seqlen_q)
                lse[lse_base + (ulong)row_top * lse_stride_s] =
                    row_in_range(row_max[m][0]) ? flashcl_row_lse2(row_max[m][0], sum_top) : NAN;
            if (row_bottom < seqlen_q)
                lse[lse_base + (ulong)row_bottom * lse_stride_s] =
                    row_in_range(row_max[m][1]) ? flashcl_row_lse2(row_max[m][1], sum_bottom) : NAN;
        }
    }
}
