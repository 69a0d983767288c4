// decode_mma.cl: the decode kernel (cl/decode.cl's job: few query rows against many keys) on the matrix units,
// for half and bfloat16 storage. The host places mma.cl, a backend file, mma_operands.cl and decode_common.cl
// before it.
//
// Why: the portable decode kernel spends 16 fp32 multiply-adds per K or V element once 16 packed rows share a
// KV head (4 query positions x 4 heads, speculative decoding), more than the fp32 units give at the memory's
// rate; one m16n8k16 instruction does those 16 rows for 8 keys x 16 dims at once.
//
// Layout: one work-group per (block of 16 packed rows, batch x KV head, key chunk), as in cl/decode.cl (the
// same arguments, the same packed rows: row p is position p / group_size of query head
// hk * group_size + p % group_size). DECODE_WARPS warps; each takes its own 16-key steps of the chunk (warp w
// the steps w, w + DECODE_WARPS, ...) with its own running maxima and sums, and no barrier in the key loop;
// the warps' results are merged once at the end through local memory, in a fixed order.
//
// K and V never pass through local memory: each lane reads its fragments straight from global memory in
// 16-byte loads, and the order of the dims within a product is chosen to match what a 16-byte load delivers
// (a product's sum is over the dims, so any order works as long as Q's fragment uses the same one):
//   S = Q K^T: lane (g, t) loads dims [32 s + 8 t, + 8) of key row g of each 8-key tile: words 0-1 are its B
//     operand of k-step 2 s, words 2-3 of k-step 2 s + 1; Q's A fragment takes the same dims.
//   O += P V: P comes from the S accumulators (keys 2t, 2t+1, 2t+8, 2t+9 of the step for rows g, g + 8, the
//     A operand as in cl/forward_mma.cl); V's B operand needs, for output column g, those four keys' values
//     of one dim. Lane (g, t) loads dims [64 c + 8 g, + 8) of those four key rows and pairs the halves of
//     two keys' words (key 2t with 2t+1, 2t+8 with 2t+9): eight B operands, one per dim tile e, whose
//     column g is dim 64 c + 8 g + e. So accumulator tile (c, e) holds dims 64 c + 8 n + e for n = 2t, 2t+1.
// Keys past the chunk read as zeros. Each step's loads are issued before the previous step's arithmetic, so a
// warp always has a step of K and V (8 KB at d128) in flight; Q's fragments sit in local memory, read once per
// k-step, to leave the registers to those loads (255 a work-item on the H100 at d128, no spill). Numerics as in cl/forward_mma.cl (maxima in log2 units, exponents as
// fma(s, scale2, -max), the -FLT_MAX floor of a visible key, the range guard); the split-KV partials in
// cl/split_combine.cl's natural units.
//
// Macros taken (host passes them with -D): HEAD_DIM (64 or 128), DECODE_WARPS, FLASHCL_SPLIT_KV,
// FLASHCL_WINDOW, FLASHCL_SOFTCAP, FLASHCL_ALIBI, FLASHCL_BIAS (FLASHCL_BIAS_F32), FLASHCL_KV_CACHE,
// FLASHCL_KV_PAGED as for cl/decode.cl (cl/decode_common.cl). The bias: lane (g, t) reads keys 2t, 2t+1 of each 8-key tile for its rows
// g and g + 8 (each row its own (batch, query head) plane at its own position), issued before the step's S
// product so that their latency hides behind it (cl/forward_mma.cl's bias_pre). DECODE_BIAS_PAIRS=1 (the host
// sets it where every bias row starts 16-byte aligned, flashcl_bias_staged_bytes): keys 2t and 2t+1 of a row come
// in one 4-byte load (8 bytes for a float bias) where both lie in the chunk, instead of two.

#ifndef DECODE_WARPS
#define DECODE_WARPS 4
#endif
#if FLASHCL_DTYPE == 0
#error "decode_mma.cl takes half and bfloat16 storage (float decode runs cl/decode.cl)"
#endif
#if HEAD_DIM % 64 != 0
#error "decode_mma.cl needs HEAD_DIM a multiple of 64"
#endif

#define WARPS DECODE_WARPS
#define WG_SIZE (WARPS * 32)
#define ROWS 16                      // packed rows per work-group: the instruction's m
#define STEP_KEYS 16                 // keys per warp step: one k-step of P V
#define ROUND_KEYS (STEP_KEYS * WARPS) // keys the work-group takes per round
#define K_CHUNKS (HEAD_DIM / 32)     // 16-byte loads per K row and lane
#define V_BLOCKS (HEAD_DIM / 64)     // 64-dim blocks of the product with V

// 16 bytes of a K or V row (8 elements, 16-byte aligned: the host checked), zeros for a key outside the chunk.
inline uint4 load16(__global const storage_t *p, ulong index, bool valid) {
    return valid ? *(__global const uint4 *)(p + index) : (uint4)(0u);
}
inline uint word_of(uint4 x, int i) { return i == 0 ? x.x : i == 1 ? x.y : i == 2 ? x.z : x.w; }
// The B operand word of output column g from two keys' words a (key k) and b (key k + 1) of dims
// (2i, 2i + 1): the low halves (dim 2i: odd 0) or the high ones (dim 2i + 1), key k in the low half.
inline uint pair_keys(uint a, uint b, int odd) {
    return odd ? (a >> 16) | (b & 0xffff0000u) : (a & 0xffffu) | (b << 16);
}
#if FLASHCL_BIAS && DECODE_BIAS_PAIRS
// Bias elements index and index + 1 (index even, the row aligned: so is the pair) in one load.
inline float2 bias_pair_global(__global const bias_t *bias, ulong index) {
#if FLASHCL_BIAS_F32
    return *(__global const float2 *)(bias + index);
#else
    const uint w = *(__global const uint *)(bias + index);
#if FLASHCL_DTYPE == 1
    return vload_half2(0, (const half *)&w);
#else
    return (float2)(as_float(w << 16), as_float(w & 0xffff0000u));
#endif
#endif
}
#endif
// One 16-bit element of Q as stored.
inline uint q_bits(__global const storage_t *q, ulong index) { return ((__global const ushort *)q)[index]; }

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void flashcl_decode_mma(DECODE_KERNEL_PARAMS) {
    // The merge of the warps: their maxima and sums per row, then the output rows summed warp by warp.
    __local float warp_max[WARPS * ROWS], warp_sum[WARPS * ROWS];
    __local float row_m[ROWS], row_l[ROWS];
    __local float o_sum[ROWS * HEAD_DIM];
    __local uint4 q_frag[DIM_STEPS * 32];

    const int lid = (int)get_local_id(0);
    const int warp = lid / 32, lane = lid % 32;
    const int g = lane >> 2, t = lane & 3;
    MMA_BACKEND_STATE(WARPS)
    MMA_BACKEND_EXCHANGE

    DECODE_WORK_GROUP(ROWS) // cl/decode_common.cl: p0, rows, b, hk, key_begin .. key_end, ...

    // This lane's two rows: g ("top") and g + 8 ("bottom"); their positions and query heads.
    const int row_top = g, row_bottom = g + 8;
    const bool real_top = row_top < rows, real_bottom = row_bottom < rows;
    const int pack_top = p0 + min(row_top, rows - 1), pack_bottom = p0 + min(row_bottom, rows - 1);
    const int pos_top = pack_top / group_size, pos_bottom = pack_bottom / group_size;
    const int head_top = hk * group_size + (pack_top - pos_top * group_size);
    const int head_bottom = hk * group_size + (pack_bottom - pos_bottom * group_size);
#if FLASHCL_ALIBI
    const float slope_top = FLASHCL_ALIBI_SLOPE(b, head_top), slope_bottom = FLASHCL_ALIBI_SLOPE(b, head_bottom);
#endif
#if FLASHCL_BIAS
    const ulong bias_top = FLASHCL_BIAS_BASE(b, head_top), bias_bottom = FLASHCL_BIAS_BASE(b, head_bottom);
#endif

    // A step's loads: lane (g, t)'s K words of keys key0 + 8 j + g and V words of keys key0 + 2t (+1, +8, +9).
    // A key outside the chunk loads nothing; its address is row 0's, whose page (a paged cache) every sequence
    // has: key_begin may lie past the sequence's pages (a split beyond its length).
#define LOAD_STEP(kraw, vraw, key0)                                                                               \
    do {                                                                                                         \
        UNROLL_ALWAYS                                                                                            \
        for (int j = 0; j < 2; ++j) {                                                                            \
            const int key_ = (key0) + 8 * j + g;                                                                 \
            const bool valid_ = key_ < key_end;                                                                  \
            const ulong row_ = KV_ROW(k, valid_ ? key_ : 0);                                             \
            UNROLL_ALWAYS                                                                                        \
            for (int s_ = 0; s_ < K_CHUNKS; ++s_) kraw[j][s_] = load16(k, row_ + (ulong)(32 * s_ + 8 * t), valid_); \
        }                                                                                                        \
        UNROLL_ALWAYS                                                                                            \
        for (int u = 0; u < 4; ++u) {                                                                            \
            const int key_ = (key0) + 2 * t + (u & 1) + 8 * (u >> 1);                                            \
            const bool valid_ = key_ < key_end;                                                                  \
            const ulong row_ = KV_ROW(v, valid_ ? key_ : 0);                                             \
            UNROLL_ALWAYS                                                                                        \
            for (int c_ = 0; c_ < V_BLOCKS; ++c_) vraw[c_][u] = load16(v, row_ + (ulong)(64 * c_ + 8 * g), valid_); \
        }                                                                                                        \
    } while (0)
    // Each step's math runs while the next step's loads are in flight; the first step's loads go out before Q is
    // staged, so Q's latency hides behind them.
    uint4 kraw[2][K_CHUNKS], vraw[V_BLOCKS][4];
    LOAD_STEP(kraw, vraw, key_begin + warp * STEP_KEYS);

    // Q's A fragments in the dim order of the K loads (see the header), rows past the real ones as zeros, in
    // local memory as each lane reads them (one 16-byte read per k-step): every warp has the same rows, and the
    // registers they would take hold the next step's K and V instead.
    if (warp == 0) {
        const ulong q_top = q_offset + (ulong)b * q_stride_b + (ulong)head_top * q_stride_h + (ulong)pos_top * q_stride_s;
        const ulong q_bottom =
            q_offset + (ulong)b * q_stride_b + (ulong)head_bottom * q_stride_h + (ulong)pos_bottom * q_stride_s;
        for (int ks = 0; ks < DIM_STEPS; ++ks) {
            const int d0 = 32 * (ks / 2) + 8 * t + 4 * (ks % 2);
            q_frag[ks * 32 + lane] =
                (uint4)(real_top ? q_bits(q, q_top + d0) | (q_bits(q, q_top + d0 + 1) << 16) : 0u,
                        real_bottom ? q_bits(q, q_bottom + d0) | (q_bits(q, q_bottom + d0 + 1) << 16) : 0u,
                        real_top ? q_bits(q, q_top + d0 + 2) | (q_bits(q, q_top + d0 + 3) << 16) : 0u,
                        real_bottom ? q_bits(q, q_bottom + d0 + 2) | (q_bits(q, q_bottom + d0 + 3) << 16) : 0u);
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);

#if FLASHCL_SCORE_MODS || FLASHCL_BIAS
    const float scale2 = M_LOG2E_F; // each score scaled and modified (and biased) where it is computed
#else
    const float scale2 = scale * M_LOG2E_F;
#endif
    float4 acc[V_BLOCKS * 8];
    UNROLL_ALWAYS
    for (int j = 0; j < V_BLOCKS * 8; ++j) acc[j] = (float4)(0.0f);
    float max_top = -INFINITY, max_bottom = -INFINITY, sum_top = 0.0f, sum_bottom = 0.0f;

    for (int round0 = key_begin; round0 < key_end; round0 += ROUND_KEYS) { // uniform over the work-group
        const int key0 = round0 + warp * STEP_KEYS;
        uint4 knext[2][K_CHUNKS], vnext[V_BLOCKS][4];
        LOAD_STEP(knext, vnext, key0 + ROUND_KEYS);
#if MMA_WARPS_MAY_SKIP
        if (key0 < key_end) { // something of this warp's step is in the chunk (warp-uniform)
#endif

#if FLASHCL_BIAS
        // The step's bias, rows g and g + 8, keys 2t and 2t + 1 of each 8-key tile, loaded before the product so
        // that its latency hides behind it; pairs past the chunk or of rows past the real ones read nothing.
        float4 bias_pre[2];
        UNROLL_ALWAYS
        for (int j = 0; j < 2; ++j) {
            const int col = key0 + 8 * j + 2 * t;
            const bool in_left = col < key_end, in_right = col + 1 < key_end;
#if DECODE_BIAS_PAIRS
            // An even col gives an aligned pair (a window's first key may make the steps' starts odd).
            if (in_right && (col & 1) == 0) { // in_right: col + 1 < key_end <= seqlen_k
                const float2 top = real_top ? bias_pair_global(bias, bias_top + (ulong)pos_top * bias_stride_s + (ulong)col)
                                            : (float2)(0.0f);
                const float2 bottom =
                    real_bottom ? bias_pair_global(bias, bias_bottom + (ulong)pos_bottom * bias_stride_s + (ulong)col)
                                : (float2)(0.0f);
                bias_pre[j] = (float4)(top, bottom);
                continue;
            }
#endif
            bias_pre[j] = (float4)(real_top && in_left ? FLASHCL_BIAS_VALUE(bias_top, pos_top, col) : 0.0f,
                                   real_top && in_right ? FLASHCL_BIAS_VALUE(bias_top, pos_top, col + 1) : 0.0f,
                                   real_bottom && in_left ? FLASHCL_BIAS_VALUE(bias_bottom, pos_bottom, col) : 0.0f,
                                   real_bottom && in_right ? FLASHCL_BIAS_VALUE(bias_bottom, pos_bottom, col + 1)
                                                           : 0.0f);
        }
#endif
        // S = Q K^T for the step's two 8-key tiles.
        float4 s[2] = {(float4)(0.0f), (float4)(0.0f)};
        UNROLL
        for (int ks = 0; ks < DIM_STEPS; ++ks) {
            UNROLL
            for (int j = 0; j < 2; ++j) {
                const uint4 kw = kraw[j][ks / 2], qw = q_frag[ks * 32 + lane];
                const uint b0 = ks % 2 ? kw.z : kw.x, b1 = ks % 2 ? kw.w : kw.y;
                MMA(s[j], qw.x, qw.y, qw.z, qw.w, b0, b1);
            }
        }

        // Scale, modify, mask; the step's maxima (a visible key lifts them to at least -FLT_MAX).
        float step_top = -INFINITY, step_bottom = -INFINITY;
        UNROLL_ALWAYS
        for (int j = 0; j < 2; ++j) {
            float4 x = s[j];
            const int col = key0 + 8 * j + 2 * t;
#if FLASHCL_SCORE_MODS
            {
                float mod_grad;
                x.x = FLASHCL_SCORE_MOD(x.x * scale, mod_grad, slope_top, pos_top + diagonal, col);
                x.y = FLASHCL_SCORE_MOD(x.y * scale, mod_grad, slope_top, pos_top + diagonal, col + 1);
                x.z = FLASHCL_SCORE_MOD(x.z * scale, mod_grad, slope_bottom, pos_bottom + diagonal, col);
                x.w = FLASHCL_SCORE_MOD(x.w * scale, mod_grad, slope_bottom, pos_bottom + diagonal, col + 1);
                (void)mod_grad;
            }
#elif FLASHCL_BIAS
            x *= scale;
#endif
#if FLASHCL_BIAS
            // After soft-capping, beside ALiBi, before the masks (cl/forward.cl's order); a -inf bias hides its
            // pair as a mask does, so a row whose every key it hides is empty.
            const float4 bias4 = bias_pre[j];
            x += bias4;
#define BIAS_KEEPS(component) && bias4.component != -INFINITY
#else
#define BIAS_KEEPS(component)
#endif
            const bool in_left = col < key_end, in_right = col + 1 < key_end;
            const bool see_tl = real_top && in_left && (!causal || col <= pos_top + diagonal) &&
                                FLASHCL_WINDOW_VISIBLE(pos_top, col) BIAS_KEEPS(x);
            const bool see_tr = real_top && in_right && (!causal || col + 1 <= pos_top + diagonal) &&
                                FLASHCL_WINDOW_VISIBLE(pos_top, col + 1) BIAS_KEEPS(y);
            const bool see_bl = real_bottom && in_left && (!causal || col <= pos_bottom + diagonal) &&
                                FLASHCL_WINDOW_VISIBLE(pos_bottom, col) BIAS_KEEPS(z);
            const bool see_br = real_bottom && in_right && (!causal || col + 1 <= pos_bottom + diagonal) &&
                                FLASHCL_WINDOW_VISIBLE(pos_bottom, col + 1) BIAS_KEEPS(w);
#undef BIAS_KEEPS
            if (!see_tl) x.x = -INFINITY;
            if (!see_tr) x.y = -INFINITY;
            if (!see_bl) x.z = -INFINITY;
            if (!see_br) x.w = -INFINITY;
            if (see_tl || see_tr) step_top = fmax(step_top, -FLT_MAX);
            if (see_bl || see_br) step_bottom = fmax(step_bottom, -FLT_MAX);
            s[j] = x;
            step_top = fmax(step_top, fmax(x.x, x.y));
            step_bottom = fmax(step_bottom, fmax(x.z, x.w));
        }
        step_top = fmax(step_top, QUAD_XOR(step_top, 1));
        step_top = fmax(step_top, QUAD_XOR(step_top, 2));
        step_bottom = fmax(step_bottom, QUAD_XOR(step_bottom, 1));
        step_bottom = fmax(step_bottom, QUAD_XOR(step_bottom, 2));
        const float new_top = fmax(max_top, block_max_log2(step_top, scale2));
        const float new_bottom = fmax(max_bottom, block_max_log2(step_bottom, scale2));
        const float safe_top = new_top == -INFINITY ? 0.0f : new_top;
        const float safe_bottom = new_bottom == -INFINITY ? 0.0f : new_bottom;
        const float alpha_top = EXP2(max_top - safe_top), alpha_bottom = EXP2(max_bottom - safe_bottom);
        max_top = new_top;
        max_bottom = new_bottom;
        uint pa[1][4];
        float own_top = 0.0f, own_bottom = 0.0f;
        UNROLL_ALWAYS
        for (int j = 0; j < 2; ++j) {
            const float4 p = (float4)(EXP2(fma(s[j].x, scale2, -safe_top)), EXP2(fma(s[j].y, scale2, -safe_top)),
                                      EXP2(fma(s[j].z, scale2, -safe_bottom)), EXP2(fma(s[j].w, scale2, -safe_bottom)));
            own_top += p.x + p.y;
            own_bottom += p.z + p.w;
            P_TO_A(pa, j, p);
        }
        sum_top = sum_top * alpha_top + own_top;
        sum_bottom = sum_bottom * alpha_bottom + own_bottom;

        // O += P V, dim tile e of block c from the halves of the four keys' words (see the header).
        UNROLL
        for (int c = 0; c < V_BLOCKS; ++c) {
            UNROLL
            for (int e = 0; e < 8; ++e) {
                const int i = e / 2, odd = e % 2;
                const uint b0 = pair_keys(word_of(vraw[c][0], i), word_of(vraw[c][1], i), odd);
                const uint b1 = pair_keys(word_of(vraw[c][2], i), word_of(vraw[c][3], i), odd);
                float4 a = acc[c * 8 + e] * (float4)(alpha_top, alpha_top, alpha_bottom, alpha_bottom);
                MMA(a, pa[0][0], pa[0][1], pa[0][2], pa[0][3], b0, b1);
                acc[c * 8 + e] = a;
            }
        }
#if MMA_WARPS_MAY_SKIP
        }
#endif
        UNROLL_ALWAYS
        for (int j = 0; j < 2; ++j) {
            UNROLL_ALWAYS
            for (int c = 0; c < K_CHUNKS; ++c) kraw[j][c] = knext[j][c];
        }
        UNROLL_ALWAYS
        for (int c = 0; c < V_BLOCKS; ++c) {
            UNROLL_ALWAYS
            for (int u = 0; u < 4; ++u) vraw[c][u] = vnext[c][u];
        }
    }
#undef LOAD_STEP

    // Merge the warps: each row's maximum over the warps, every warp's sum and output rescaled to it, summed
    // in warp order.
    sum_top += QUAD_XOR(sum_top, 1);
    sum_top += QUAD_XOR(sum_top, 2);
    sum_bottom += QUAD_XOR(sum_bottom, 1);
    sum_bottom += QUAD_XOR(sum_bottom, 2);
    if (t == 0) {
        warp_max[warp * ROWS + row_top] = max_top;
        warp_max[warp * ROWS + row_bottom] = max_bottom;
        warp_sum[warp * ROWS + row_top] = sum_top;
        warp_sum[warp * ROWS + row_bottom] = sum_bottom;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    float all_top = -INFINITY, all_bottom = -INFINITY;
    for (int w = 0; w < WARPS; ++w) {
        all_top = fmax(all_top, warp_max[w * ROWS + row_top]);
        all_bottom = fmax(all_bottom, warp_max[w * ROWS + row_bottom]);
    }
    const float base_top = all_top == -INFINITY ? 0.0f : all_top;
    const float base_bottom = all_bottom == -INFINITY ? 0.0f : all_bottom;
    if (warp == 0 && t == 0) {
        float l_top = 0.0f, l_bottom = 0.0f;
        for (int w = 0; w < WARPS; ++w) {
            l_top += warp_sum[w * ROWS + row_top] * EXP2(warp_max[w * ROWS + row_top] - base_top);
            l_bottom += warp_sum[w * ROWS + row_bottom] * EXP2(warp_max[w * ROWS + row_bottom] - base_bottom);
        }
        row_m[row_top] = all_top;
        row_m[row_bottom] = all_bottom;
        row_l[row_top] = l_top;
        row_l[row_bottom] = l_bottom;
    }
    const float f_top = EXP2(max_top - base_top), f_bottom = EXP2(max_bottom - base_bottom);
    for (int w = 0; w < WARPS; ++w) {
        if (warp == w) {
            UNROLL_ALWAYS
            for (int c = 0; c < V_BLOCKS; ++c) {
                UNROLL_ALWAYS
                for (int e = 0; e < 8; ++e) {
                    const float4 a = acc[c * 8 + e] * (float4)(f_top, f_top, f_bottom, f_bottom);
                    const int dim0 = 64 * c + 16 * t + e, dim1 = dim0 + 8; // columns n = 2t, 2t + 1
                    __local float *top = o_sum + row_top * HEAD_DIM, *bottom = o_sum + row_bottom * HEAD_DIM;
                    if (w == 0) {
                        top[dim0] = a.x, top[dim1] = a.y, bottom[dim0] = a.z, bottom[dim1] = a.w;
                    } else {
                        top[dim0] += a.x, top[dim1] += a.y, bottom[dim0] += a.z, bottom[dim1] += a.w;
                    }
                }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    // The rows out: the split's partial, or O and LSE.
#if FLASHCL_SPLIT_KV
    const int heads_total = (int)get_num_groups(1) * group_size; // batch x query heads
#endif
    for (int e = lid; e < rows * HEAD_DIM; e += WG_SIZE) {
        const int r = e / HEAD_DIM, d = e - r * HEAD_DIM;
        const int p = p0 + r, pos = p / group_size, h = hk * group_size + (p - pos * group_size);
        const float m = row_m[r], l = row_l[r];
#if FLASHCL_SPLIT_KV
        // Natural units for the combine: the partial is relative to exp2(m) = exp(m ln 2).
        const ulong part_row = ((ulong)split * (ulong)heads_total + (ulong)b * (ulong)heads_q + (ulong)h) *
                                   (ulong)seqlen_q + (ulong)pos;
        part_o[part_row * HEAD_DIM + d] = o_sum[e];
        if (d == 0) part_stats[part_row] = (float2)(row_in_range(m) ? m * M_LN2_F : NAN, l);
#else
        const float inv = m == -INFINITY ? 0.0f : row_in_range(m) ? 1.0f / l : NAN;
        STORE(o, o_offset + (ulong)b * o_stride_b + (ulong)h * o_stride_h + (ulong)pos * o_stride_s + d,
              o_sum[e] * inv);
        if (write_lse && d == 0)
            lse[lse_offset + (ulong)b * lse_stride_b + (ulong)h * lse_stride_h + (ulong)pos * lse_stride_s] =
                row_in_range(m) ? flashcl_row_lse2(m, l) : NAN;
#endif
    }
}
