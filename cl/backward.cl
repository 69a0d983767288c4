// backward.cl: FlashAttention's backward pass (dQ, dK, dV by recomputing P tile by tile from Q, K and the LSE).
//
// Macros taken (host passes them with -D; the defaults let the file compile alone):
//   HEAD_DIM   head dimension D (1..256)
//   BLOCK_K    resident rows per work-group: K/V rows in flashcl_backward_dkdv,
//              query rows in flashcl_backward_dq (the plan transposed)
//   BLOCK_Q    streamed rows per step: query rows in dkdv, key rows in dq
//   THREADS_K  work-items along the resident rows (BLOCK_K % THREADS_K == 0)
//   THREADS_Q  work-items along the streamed rows and along the head dimension
//              (BLOCK_Q % THREADS_Q == 0)
//
// Three kernels, run in this order on one queue:
//   (D_i = rowsum(dO_i * O_i), the only scratch (O(N)), comes first from
//   cl/backward_delta.cl, shared with the tensor-core backward)
//   flashcl_backward_dkdv  a work-group owns BLOCK_K keys of one K/V head and
//                          walks every query of every query head of its group:
//                          dV += P^T dO, dK += scale * dS^T Q
//   flashcl_backward_dq    a work-group owns BLOCK_K queries of one head and
//                          walks the keys: dQ += scale * dS K
// with P = exp(scale * Q K^T - LSE) and dS = P * (dO V^T - D) (with score
// modifiers, P of the modified scores and dS times soft-capping's
// derivative: the gradient of the raw score; with a bias, the dQ kernel
// also writes dS before that derivative, dBias, to its dbias argument:
// the caller's dBias, or a full-size scratch that cl/bias_reduce.cl sums
// over the bias's broadcast dimensions). Each gradient
// element is owned by exactly one work-item, so no atomics are needed, and
// every sum runs in a fixed order (head dims, then query heads and queries,
// or keys, ascending) whatever the tile sizes: the result is bitwise the same
// for every plan. Rows past the end or masked contribute exact zeros, which
// leave a sum's bits unchanged.
//
// Work-item (tk, tq) owns resident rows tk + a*THREADS_K, streamed rows
// tq + b*THREADS_Q of each score tile, and head-dim columns OWN_DIM(j) of its
// resident rows' gradients (groups of four adjacent columns when
// DIMS_PER_ITEM allows, so they are read as one float4).
//
// Local reads are float4s: the score tiles read four head dims of a row at a
// time, the gradient sums four streamed rows of P and dS at a time. Every
// product is an explicit MAD: with contraction left to the compiler (the
// FP_CONTRACT pragma), code for one plan could round a*b+c in two steps and
// for another in one; mad() is one call the compiler lowers the same way
// wherever it appears (one fused instruction on GPUs). Not mad(): Mesa
// rusticl 22.3 returns NaN from mad() in these kernels (d59 with 16x16
// tiles, tests/features/test_varlen.c) and mad() is right there. The
// bitwise-equal-across-plans tests run on POCL and rusticl.
// Strict contraction rules for what is left (the dS and D expressions).
#pragma OPENCL FP_CONTRACT OFF

#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif
#ifndef BLOCK_Q
#define BLOCK_Q 16
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
#define RES_PER_ITEM (BLOCK_K / THREADS_K)
#define STR_PER_ITEM (BLOCK_Q / THREADS_Q)
#define DIM_PADDED (((HEAD_DIM + THREADS_Q - 1) / THREADS_Q) * THREADS_Q)
#define DIMS_PER_ITEM (DIM_PADDED / THREADS_Q)
#define ROUND4(n) ((((n) + 3) / 4) * 4)
// Row strides: multiples of 4 (rows start 16-byte aligned for float4 reads)
// holding an odd number of float4s, so the float4s of eight consecutive rows
// (one quarter-warp's 128-bit read) fall on distinct banks.
#define QUAD_ODD_STRIDE(n) ((((n) / 4) % 2 == 0) ? (n) + 4 : (n))
#define DIM_ALLOC ROUND4(DIM_PADDED) // columns held per row, zero past HEAD_DIM
#define ROW_STRIDE QUAD_ODD_STRIDE(DIM_ALLOC)
#define S_STRIDE QUAD_ODD_STRIDE(ROUND4(BLOCK_Q))
#define DIM_QUADS (DIM_ALLOC / 4)
#define STR_QUADS (BLOCK_Q / 4) // full float4 steps over a block of streamed rows
#define DIM_GROUPS (DIMS_PER_ITEM % 4 == 0)
#if DIM_GROUPS
#define OWN_DIM(j) (((j) / 4) * (4 * THREADS_Q) + tq * 4 + ((j) % 4))
#else
#define OWN_DIM(j) (tq + (j) * THREADS_Q)
#endif

#if DIMS_PER_ITEM > 32
#error "more than 32 head-dim columns per work-item (rusticl miscomputes them): raise THREADS_Q"
#endif

// Rows [row0, row0 + ROWS) of one head into a local tile, zero past `rows`
// and past HEAD_DIM so padded lanes add exact zeros.
#define LOAD_TILE(dst, src, base, stride_seq, row0, rows, ROWS)                                    \
    for (int e = lid; e < (ROWS) * DIM_ALLOC; e += WG_SIZE) {                                      \
        int r = e / DIM_ALLOC, d = e - r * DIM_ALLOC;                                              \
        int row = (row0) + r;                                                                      \
        float x = 0.0f;                                                                            \
        if (row < (rows) && d < HEAD_DIM) x = LOAD(src, (base) + (ulong)row * (stride_seq) + d);   \
        (dst)[r * ROW_STRIDE + d] = x;                                                             \
    }

// One mad per product, head dims in ascending order.
#define DOT4(acc, lhs, rhs)                \
    acc = mad((lhs).x, (rhs).x, acc);      \
    acc = mad((lhs).y, (rhs).y, acc);      \
    acc = mad((lhs).z, (rhs).z, acc);      \
    acc = mad((lhs).w, (rhs).w, acc)

// s[a][b] = res1[a] . str1[b] and dp[a][b] = res2[a] . str2[b] over the head
// dimension, in ascending order (both kernels compute the same bits). The
// tiles are float4 views.
#define SCORE_TILES(s, dp, res1, str1, res2, str2)                                                 \
    for (int ra = 0; ra < RES_PER_ITEM; ++ra)                                                      \
        for (int sb = 0; sb < STR_PER_ITEM; ++sb) s[ra][sb] = dp[ra][sb] = 0.0f;                   \
    for (int d4 = 0; d4 < DIM_QUADS; ++d4) {                                                       \
        float4 r1[RES_PER_ITEM], r2[RES_PER_ITEM], c1[STR_PER_ITEM], c2[STR_PER_ITEM];             \
        for (int ra = 0; ra < RES_PER_ITEM; ++ra) {                                                \
            r1[ra] = res1[(tk + ra * THREADS_K) * (ROW_STRIDE / 4) + d4];                          \
            r2[ra] = res2[(tk + ra * THREADS_K) * (ROW_STRIDE / 4) + d4];                          \
        }                                                                                          \
        for (int sb = 0; sb < STR_PER_ITEM; ++sb) {                                                \
            c1[sb] = str1[(tq + sb * THREADS_Q) * (ROW_STRIDE / 4) + d4];                          \
            c2[sb] = str2[(tq + sb * THREADS_Q) * (ROW_STRIDE / 4) + d4];                          \
        }                                                                                          \
        for (int ra = 0; ra < RES_PER_ITEM; ++ra)                                                  \
            for (int sb = 0; sb < STR_PER_ITEM; ++sb) {                                            \
                DOT4(s[ra][sb], r1[ra], c1[sb]);                                                   \
                DOT4(dp[ra][sb], r2[ra], c2[sb]);                                                  \
            }                                                                                      \
    }

// The work-item's head-dim columns of row `row` of a float tile, as an array.
#if DIM_GROUPS
#define READ_OWN_DIMS(out, tile, row)                                                              \
    for (int g = 0; g < DIMS_PER_ITEM / 4; ++g) {                                                  \
        const float4 x = *(__local const float4 *)&(tile)[(row) * ROW_STRIDE + g * (4 * THREADS_Q) + tq * 4]; \
        out[4 * g] = x.x;                                                                          \
        out[4 * g + 1] = x.y;                                                                      \
        out[4 * g + 2] = x.z;                                                                      \
        out[4 * g + 3] = x.w;                                                                      \
    }
#else
#define READ_OWN_DIMS(out, tile, row) \
    for (int j = 0; j < DIMS_PER_ITEM; ++j) out[j] = (tile)[(row) * ROW_STRIDE + OWN_DIM(j)];
#endif

// The recomputed probability. A masked pair, a row past the end, or a fully
// masked row (LSE = -inf) gives exactly 0, never exp(+inf) or NaN.
inline float flashcl_probability(float score, float scale, float lse, int visible) {
    return (visible && lse != -INFINITY) ? exp(score * scale - lse) : 0.0f;
}

// The probability of a pair from its raw score (q . k): scaled, modified
// (soft-capping, ALiBi: cl/common.cl) as the forward did, against the row's
// LSE; mod_grad (declared by the caller) receives soft-capping's derivative,
// which SOFTCAP_CHAIN applies to dS: the gradient of the raw score.
// With a bias, the pair's bias_value (declared by the caller) is added after the modifiers, and a -inf bias
// hides the pair as the forward did.
#if FLASHCL_BIAS
#define PAIR_PROBABILITY(raw, row_lse, visible, slope, pos, key)                                           \
    flashcl_probability(FLASHCL_SCORE_MOD((raw) * scale, mod_grad, slope, pos, key) FLASHCL_BIAS_TERM, 1.0f, \
                        row_lse, (visible) FLASHCL_BIAS_KEEPS)
#elif FLASHCL_SCORE_MODS
#define PAIR_PROBABILITY(raw, row_lse, visible, slope, pos, key) \
    flashcl_probability(FLASHCL_SCORE_MOD((raw) * scale, mod_grad, slope, pos, key), 1.0f, row_lse, visible)
#else
#define PAIR_PROBABILITY(raw, row_lse, visible, slope, pos, key) flashcl_probability(raw, scale, row_lse, visible)
#endif
#if FLASHCL_SOFTCAP
#define SOFTCAP_CHAIN(ds) ((ds) * mod_grad)
#else
#define SOFTCAP_CHAIN(ds) ds // no parentheses: the dense kernels' code stays token for token what it was
#endif

// Index in D of row 0 of (sequence b, head h): D is (batch, heads_q,
// seqlen_q), or with FLASHCL_VARLEN (heads_q, total_q) over the packed rows
// (the delta kernel then runs as one sequence of total_q rows).
#if FLASHCL_VARLEN
#define DELTA_ROW0(b, h) ((ulong)(h) * (ulong)total_q + (ulong)varlen_q_start)
#else
#define DELTA_ROW0(b, h) (((ulong)(b) * (ulong)heads_q + (ulong)(h)) * (ulong)seqlen_q)
#endif


// One streamed query row c of the dK/dV sums; pc/dsc hold P and dS of the
// work-item's keys, component `lane` being row c.
#define DKDV_STEP(c, lane)                                                                         \
    {                                                                                              \
        float qv[DIMS_PER_ITEM], dov[DIMS_PER_ITEM];                                               \
        READ_OWN_DIMS(qv, q_tile, c);                                                              \
        READ_OWN_DIMS(dov, do_tile, c);                                                            \
        for (int j = 0; j < DIMS_PER_ITEM; ++j)                                                    \
            for (int a = 0; a < RES_PER_ITEM; ++a) {                                               \
                dv_acc[a][j] = mad(pc[a].lane, dov[j], dv_acc[a][j]);                              \
                dk_acc[a][j] = mad(dsc[a].lane, qv[j], dk_acc[a][j]);                              \
            }                                                                                      \
    }

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void flashcl_backward_dkdv(
    __global const storage_t *q, ulong q_offset, ulong q_stride_b, ulong q_stride_h, ulong q_stride_s,
    __global const storage_t *k, ulong k_offset, ulong k_stride_b, ulong k_stride_h, ulong k_stride_s,
    __global const storage_t *v, ulong v_offset, ulong v_stride_b, ulong v_stride_h, ulong v_stride_s,
    __global const storage_t *dout, ulong do_offset, ulong do_stride_b, ulong do_stride_h, ulong do_stride_s,
    __global const float *lse, ulong lse_offset, ulong lse_stride_b, ulong lse_stride_h, ulong lse_stride_s,
    __global const float *delta,
    __global storage_t *dk, ulong dk_offset, ulong dk_stride_b, ulong dk_stride_h, ulong dk_stride_s,
    __global storage_t *dv, ulong dv_offset, ulong dv_stride_b, ulong dv_stride_h, ulong dv_stride_s,
    int heads_q, int heads_kv, int group_size, int seqlen_q, int seqlen_k, float scale, int causal
    FLASHCL_FEATURE_PARAMS) {
    // Declared as float4 so float4 reads are aligned; written through float views.
    __local float4 k_tile4[BLOCK_K * ROW_STRIDE / 4];
    __local float4 v_tile4[BLOCK_K * ROW_STRIDE / 4];
    __local float4 q_tile4[BLOCK_Q * ROW_STRIDE / 4];
    __local float4 do_tile4[BLOCK_Q * ROW_STRIDE / 4];
    __local float4 p_tile4[BLOCK_K * S_STRIDE / 4];
    __local float4 ds_tile4[BLOCK_K * S_STRIDE / 4];
    __local float lse_tile[BLOCK_Q];
    __local float delta_tile[BLOCK_Q];
    __local float *k_tile = (__local float *)k_tile4;
    __local float *v_tile = (__local float *)v_tile4;
    __local float *q_tile = (__local float *)q_tile4;
    __local float *do_tile = (__local float *)do_tile4;
    __local float *p_tile = (__local float *)p_tile4;
    __local float *ds_tile = (__local float *)ds_tile4;

    const int lid = (int)get_local_id(0);
    const int tq = lid % THREADS_Q;
    const int tk = lid / THREADS_Q;
    const int k0 = (int)get_group_id(0) * BLOCK_K;
    const int bh = (int)get_group_id(1);
    const int b = bh / heads_kv;
    const int hk = bh - b * heads_kv;
#if FLASHCL_VARLEN
    FLASHCL_VARLEN_SEQUENCE(b);
    if (k0 >= seqlen_k) return; // uniform: this key block is past the sequence
    FLASHCL_VARLEN_VIEW(q, varlen_q_start);
    FLASHCL_VARLEN_VIEW(do, varlen_q_start);
    FLASHCL_VARLEN_VIEW(lse, varlen_q_start);
    FLASHCL_VARLEN_VIEW(k, varlen_k_start);
    FLASHCL_VARLEN_VIEW(v, varlen_k_start);
    FLASHCL_VARLEN_VIEW(dk, varlen_k_start);
    FLASHCL_VARLEN_VIEW(dv, varlen_k_start);
#endif

    const ulong k_base = k_offset + (ulong)b * k_stride_b + (ulong)hk * k_stride_h;
    const ulong v_base = v_offset + (ulong)b * v_stride_b + (ulong)hk * v_stride_h;
    LOAD_TILE(k_tile, k, k_base, k_stride_s, k0, seqlen_k, BLOCK_K);
    LOAD_TILE(v_tile, v, v_base, v_stride_s, k0, seqlen_k, BLOCK_K);

    // Bottom-right causal alignment: key j is seen by queries i >= j - diagonal,
    // so earlier query rows are skipped (the bound is uniform over the group).
    const int diagonal = seqlen_k - seqlen_q;
#if FLASHCL_SPARSE
    // Query blocks outside the band of this group's keys are skipped; blocks
    // start at multiples of BLOCK_Q so they match the tile mask.
    const int k_last = min(k0 + BLOCK_K, seqlen_k) - 1;
    int q_first = causal ? clamp(k0 - diagonal, 0, seqlen_q) : 0;
    int q_end = seqlen_q;
#if FLASHCL_WINDOW
    q_first = max(q_first, clamp(k0 - diagonal - window_right, 0, seqlen_q));
    q_end = clamp(k_last - diagonal + window_left + 1, 0, seqlen_q);
#endif
    const int q_begin = q_first / BLOCK_Q * BLOCK_Q;
#else
    const int q_begin = causal ? clamp(k0 - diagonal, 0, seqlen_q) : 0;
    const int q_end = seqlen_q;
#endif

    float dk_acc[RES_PER_ITEM][DIMS_PER_ITEM], dv_acc[RES_PER_ITEM][DIMS_PER_ITEM];
    for (int a = 0; a < RES_PER_ITEM; ++a)
        for (int j = 0; j < DIMS_PER_ITEM; ++j) dk_acc[a][j] = dv_acc[a][j] = 0.0f;

    // GQA: this K/V head's gradient sums over its group of query heads here,
    // in a fixed order, instead of through atomics or a second buffer.
    for (int g = 0; g < group_size; ++g) {
        const int h = hk * group_size + g;
        const ulong q_base = q_offset + (ulong)b * q_stride_b + (ulong)h * q_stride_h;
        const ulong do_base = do_offset + (ulong)b * do_stride_b + (ulong)h * do_stride_h;
        const ulong lse_base = lse_offset + (ulong)b * lse_stride_b + (ulong)h * lse_stride_h;
        const ulong delta_base = DELTA_ROW0(b, h);
#if FLASHCL_ALIBI
        const float alibi_slope = FLASHCL_ALIBI_SLOPE(b, h);
#endif
#if FLASHCL_BIAS
        const ulong bias_base = FLASHCL_BIAS_BASE(b, h);
#endif
#if FLASHCL_BLOCK_MASK
        const ulong mask_head = mask_offset + (ulong)h * mask_stride_h;
        __global const uchar *tile_col = tile_mask + (ulong)h * tile_stride_h + (ulong)(k0 / BLOCK_K);
#endif
        for (int s0 = q_begin; s0 < q_end; s0 += BLOCK_Q) {
#if FLASHCL_BLOCK_MASK
            // Uniform over the group: a tile whose pairs are all off is skipped.
            const uchar tile_state = tile_col[(ulong)(s0 / BLOCK_Q) * (ulong)tile_cols];
            if (tile_state == 0) continue;
#endif
            barrier(CLK_LOCAL_MEM_FENCE); // the previous step's readers are done with the tiles
            LOAD_TILE(q_tile, q, q_base, q_stride_s, s0, seqlen_q, BLOCK_Q);
            LOAD_TILE(do_tile, dout, do_base, do_stride_s, s0, seqlen_q, BLOCK_Q);
            for (int r = lid; r < BLOCK_Q; r += WG_SIZE) {
                const int row = s0 + r;
                lse_tile[r] = row < seqlen_q ? lse[lse_base + (ulong)row * lse_stride_s] : -INFINITY;
                delta_tile[r] = row < seqlen_q ? delta[delta_base + (ulong)row] : 0.0f;
            }
            barrier(CLK_LOCAL_MEM_FENCE);

            float s[RES_PER_ITEM][STR_PER_ITEM], dp[RES_PER_ITEM][STR_PER_ITEM];
            SCORE_TILES(s, dp, k_tile4, q_tile4, v_tile4, do_tile4);
            for (int a = 0; a < RES_PER_ITEM; ++a) {
                const int key = k0 + tk + a * THREADS_K;
                for (int b2 = 0; b2 < STR_PER_ITEM; ++b2) {
                    const int r = tq + b2 * THREADS_Q;
                    const int row = s0 + r;
                    const int visible = key < seqlen_k && row < seqlen_q && (!causal || key <= row + diagonal)
#if FLASHCL_SPARSE
                                        && FLASHCL_WINDOW_VISIBLE(row, key) && FLASHCL_BLOCK_VISIBLE(mask_head, row, key)
#endif
                        ;
#if FLASHCL_SCORE_MODS
                    float mod_grad = 1.0f;
#endif
#if FLASHCL_BIAS
                    const float bias_value = FLASHCL_BIAS_VALUE(bias_base, row, key);
#endif
                    const float p = PAIR_PROBABILITY(s[a][b2], lse_tile[r], visible, alibi_slope, row + diagonal, key);
#if FLASHCL_DROPOUT
                    // Forward's O used P * Z / (1 - p): dV sees the same
                    // product, dP is scaled alike before dS = P (dP' - D).
                    const float z = flashcl_dropout_keep((ulong)b * (ulong)heads_q + (ulong)h, row, key,
                                                         dropout_threshold, seed_lo, seed_hi, dropout_offset)
                                        ? dropout_scale
                                        : 0.0f;
                    p_tile[(tk + a * THREADS_K) * S_STRIDE + r] = p * z;
                    ds_tile[(tk + a * THREADS_K) * S_STRIDE + r] = SOFTCAP_CHAIN(p * (dp[a][b2] * z - delta_tile[r]));
#else
                    p_tile[(tk + a * THREADS_K) * S_STRIDE + r] = p;
                    ds_tile[(tk + a * THREADS_K) * S_STRIDE + r] = SOFTCAP_CHAIN(p * (dp[a][b2] - delta_tile[r]));
#endif
                }
            }
            barrier(CLK_LOCAL_MEM_FENCE);

            // Queries in ascending order, so the sum's order is the plan's no matter.
            for (int c4 = 0; c4 < STR_QUADS; ++c4) {
                float4 pc[RES_PER_ITEM], dsc[RES_PER_ITEM];
                for (int a = 0; a < RES_PER_ITEM; ++a) {
                    pc[a] = p_tile4[(tk + a * THREADS_K) * (S_STRIDE / 4) + c4];
                    dsc[a] = ds_tile4[(tk + a * THREADS_K) * (S_STRIDE / 4) + c4];
                }
                DKDV_STEP(4 * c4, x);
                DKDV_STEP(4 * c4 + 1, y);
                DKDV_STEP(4 * c4 + 2, z);
                DKDV_STEP(4 * c4 + 3, w);
            }
            for (int c = STR_QUADS * 4; c < BLOCK_Q; ++c) { // blocks that are not a multiple of 4
                float4 pc[RES_PER_ITEM], dsc[RES_PER_ITEM];
                for (int a = 0; a < RES_PER_ITEM; ++a) {
                    pc[a].x = p_tile[(tk + a * THREADS_K) * S_STRIDE + c];
                    dsc[a].x = ds_tile[(tk + a * THREADS_K) * S_STRIDE + c];
                }
                DKDV_STEP(c, x);
            }
        }
    }

    const ulong dk_base = dk_offset + (ulong)b * dk_stride_b + (ulong)hk * dk_stride_h;
    const ulong dv_base = dv_offset + (ulong)b * dv_stride_b + (ulong)hk * dv_stride_h;
    for (int a = 0; a < RES_PER_ITEM; ++a) {
        const int key = k0 + tk + a * THREADS_K;
        if (key >= seqlen_k) continue;
        for (int j = 0; j < DIMS_PER_ITEM; ++j) {
            const int d = OWN_DIM(j);
            if (d >= HEAD_DIM) continue;
            STORE(dk, dk_base + (ulong)key * dk_stride_s + d, dk_acc[a][j] * scale);
            STORE(dv, dv_base + (ulong)key * dv_stride_s + d, dv_acc[a][j]);
        }
    }
}

// One streamed key row c of the dQ sums; dsc holds dS of the work-item's
// queries, component `lane` being key c.
#define DQ_STEP(c, lane)                                                                           \
    {                                                                                              \
        float kv[DIMS_PER_ITEM];                                                                   \
        READ_OWN_DIMS(kv, k_tile, c);                                                              \
        for (int j = 0; j < DIMS_PER_ITEM; ++j)                                                    \
            for (int a = 0; a < RES_PER_ITEM; ++a) dq_acc[a][j] = mad(dsc[a].lane, kv[j], dq_acc[a][j]); \
    }

#if FLASHCL_BIAS
// dS of the pair into the tile (soft-capping's chain applied) and, unchained, into dBias (FLASHCL_DBIAS_PARAMS;
// a hidden pair's -0 as +0: FLASHCL_DBIAS_PLUS_ZERO).
#define DQ_DS(value)                                                                                     \
    {                                                                                                    \
        const float ds_score = (value);                                                                  \
        if (write_dbias && row < seqlen_q && key < seqlen_k)                                             \
            dbias[dbias_base + (ulong)row * dbias_stride_s + (ulong)key] = FLASHCL_DBIAS_PLUS_ZERO(ds_score); \
        ds_tile[(tk + a * THREADS_K) * S_STRIDE + c] = SOFTCAP_CHAIN(ds_score);                          \
    }
// dBias of the work-group's rows at keys [first, end) is 0 (keys its loop does not compute: every pair is off).
#define DBIAS_ZERO_KEYS(first, end)                                                                      \
    if (write_dbias)                                                                                     \
        for (int r = 0; r < BLOCK_K && q0 + r < seqlen_q; ++r) {                                         \
            const ulong row_base = dbias_base + (ulong)(q0 + r) * dbias_stride_s;                        \
            for (int key = (first) + lid; key < min((end), seqlen_k); key += WG_SIZE)                    \
                dbias[row_base + (ulong)key] = 0.0f;                                                     \
        }
#endif

__kernel __attribute__((reqd_work_group_size(WG_SIZE, 1, 1))) void flashcl_backward_dq(
    __global const storage_t *q, ulong q_offset, ulong q_stride_b, ulong q_stride_h, ulong q_stride_s,
    __global const storage_t *k, ulong k_offset, ulong k_stride_b, ulong k_stride_h, ulong k_stride_s,
    __global const storage_t *v, ulong v_offset, ulong v_stride_b, ulong v_stride_h, ulong v_stride_s,
    __global const storage_t *dout, ulong do_offset, ulong do_stride_b, ulong do_stride_h, ulong do_stride_s,
    __global const float *lse, ulong lse_offset, ulong lse_stride_b, ulong lse_stride_h, ulong lse_stride_s,
    __global const float *delta,
    __global storage_t *dq, ulong dq_offset, ulong dq_stride_b, ulong dq_stride_h, ulong dq_stride_s,
    int heads_q, int group_size, int seqlen_q, int seqlen_k, float scale, int causal FLASHCL_FEATURE_PARAMS
    FLASHCL_DBIAS_PARAMS) {
    // The plan transposed: BLOCK_K query rows stay, BLOCK_Q key rows stream,
    // so the local footprint is the dkdv kernel's less one score tile.
    __local float4 q_tile4[BLOCK_K * ROW_STRIDE / 4];
    __local float4 do_tile4[BLOCK_K * ROW_STRIDE / 4];
    __local float4 k_tile4[BLOCK_Q * ROW_STRIDE / 4];
    __local float4 v_tile4[BLOCK_Q * ROW_STRIDE / 4];
    __local float4 ds_tile4[BLOCK_K * S_STRIDE / 4];
    __local float *q_tile = (__local float *)q_tile4;
    __local float *do_tile = (__local float *)do_tile4;
    __local float *k_tile = (__local float *)k_tile4;
    __local float *v_tile = (__local float *)v_tile4;
    __local float *ds_tile = (__local float *)ds_tile4;

    const int lid = (int)get_local_id(0);
    const int tq = lid % THREADS_Q;
    const int tk = lid / THREADS_Q;
    const int q0 = (int)get_group_id(0) * BLOCK_K;
    const int bh = (int)get_group_id(1);
    const int b = bh / heads_q;
    const int h = bh - b * heads_q;
    const int hk = h / group_size;
#if FLASHCL_VARLEN
    FLASHCL_VARLEN_SEQUENCE(b);
    if (q0 >= seqlen_q) return; // uniform: this query block is past the sequence
    FLASHCL_VARLEN_VIEW(q, varlen_q_start);
    FLASHCL_VARLEN_VIEW(do, varlen_q_start);
    FLASHCL_VARLEN_VIEW(lse, varlen_q_start);
    FLASHCL_VARLEN_VIEW(dq, varlen_q_start);
    FLASHCL_VARLEN_VIEW(k, varlen_k_start);
    FLASHCL_VARLEN_VIEW(v, varlen_k_start);
#endif

    const ulong q_base = q_offset + (ulong)b * q_stride_b + (ulong)h * q_stride_h;
    const ulong do_base = do_offset + (ulong)b * do_stride_b + (ulong)h * do_stride_h;
    const ulong k_base = k_offset + (ulong)b * k_stride_b + (ulong)hk * k_stride_h;
    const ulong v_base = v_offset + (ulong)b * v_stride_b + (ulong)hk * v_stride_h;
    LOAD_TILE(q_tile, q, q_base, q_stride_s, q0, seqlen_q, BLOCK_K);
    LOAD_TILE(do_tile, dout, do_base, do_stride_s, q0, seqlen_q, BLOCK_K);

    // Each work-item's own rows' LSE and D, straight into registers.
    float row_lse[RES_PER_ITEM], row_delta[RES_PER_ITEM];
    for (int a = 0; a < RES_PER_ITEM; ++a) {
        const int row = q0 + tk + a * THREADS_K;
        row_lse[a] = -INFINITY;
        row_delta[a] = 0.0f;
        if (row < seqlen_q) {
            row_lse[a] = lse[lse_offset + (ulong)b * lse_stride_b + (ulong)h * lse_stride_h +
                             (ulong)row * lse_stride_s];
            row_delta[a] = delta[DELTA_ROW0(b, h) + (ulong)row];
        }
    }

    const int diagonal = seqlen_k - seqlen_q;
#if FLASHCL_ALIBI
    const float alibi_slope = FLASHCL_ALIBI_SLOPE(b, h);
#endif
#if FLASHCL_BIAS
    const ulong bias_base = FLASHCL_BIAS_BASE(b, h);
    const ulong dbias_base = dbias_offset + (ulong)b * dbias_stride_b + (ulong)h * dbias_stride_h;
#endif
#if FLASHCL_SPARSE
    // Key blocks outside the band of this group's queries are skipped; they
    // start at multiples of BLOCK_Q so they match the tile mask.
    int key_end = causal ? clamp(q0 + BLOCK_K + diagonal, 0, seqlen_k) : seqlen_k;
    int key_first = 0;
#if FLASHCL_WINDOW
    const int q_last = min(q0 + BLOCK_K, seqlen_q) - 1;
    key_first = clamp(q0 + diagonal - window_left, 0, seqlen_k);
    key_end = min(key_end, clamp(q_last + diagonal + window_right + 1, 0, seqlen_k));
#endif
    const int key_begin = key_first / BLOCK_Q * BLOCK_Q;
#if FLASHCL_BLOCK_MASK
    const ulong mask_head = mask_offset + (ulong)h * mask_stride_h;
    __global const uchar *tile_row = tile_mask + (ulong)h * tile_stride_h + (ulong)(q0 / BLOCK_K) * (ulong)tile_cols;
#endif
#else
    const int key_begin = 0;
    const int key_end = causal ? clamp(q0 + BLOCK_K + diagonal, 0, seqlen_k) : seqlen_k; // later keys are masked
#endif

    float dq_acc[RES_PER_ITEM][DIMS_PER_ITEM];
    for (int a = 0; a < RES_PER_ITEM; ++a)
        for (int j = 0; j < DIMS_PER_ITEM; ++j) dq_acc[a][j] = 0.0f;

    for (int s0 = key_begin; s0 < key_end; s0 += BLOCK_Q) {
#if FLASHCL_BLOCK_MASK && FLASHCL_BIAS
        if (tile_row[s0 / BLOCK_Q] == 0) { // uniform: every pair of the tile is off, its dBias 0
            DBIAS_ZERO_KEYS(s0, s0 + BLOCK_Q);
            continue;
        }
#elif FLASHCL_BLOCK_MASK
        if (tile_row[s0 / BLOCK_Q] == 0) continue; // uniform: every pair of the tile is off
#endif
        barrier(CLK_LOCAL_MEM_FENCE);
        LOAD_TILE(k_tile, k, k_base, k_stride_s, s0, seqlen_k, BLOCK_Q);
        LOAD_TILE(v_tile, v, v_base, v_stride_s, s0, seqlen_k, BLOCK_Q);
        barrier(CLK_LOCAL_MEM_FENCE);

        float s[RES_PER_ITEM][STR_PER_ITEM], dp[RES_PER_ITEM][STR_PER_ITEM];
        SCORE_TILES(s, dp, q_tile4, k_tile4, do_tile4, v_tile4);
        for (int a = 0; a < RES_PER_ITEM; ++a) {
            const int row = q0 + tk + a * THREADS_K;
            for (int b2 = 0; b2 < STR_PER_ITEM; ++b2) {
                const int c = tq + b2 * THREADS_Q;
                const int key = s0 + c;
                const int visible = key < seqlen_k && row < seqlen_q && (!causal || key <= row + diagonal)
#if FLASHCL_SPARSE
                                    && FLASHCL_WINDOW_VISIBLE(row, key) && FLASHCL_BLOCK_VISIBLE(mask_head, row, key)
#endif
                    ;
#if FLASHCL_SCORE_MODS
                float mod_grad = 1.0f;
#endif
#if FLASHCL_BIAS
                const float bias_value = FLASHCL_BIAS_VALUE(bias_base, row, key);
#endif
                const float p = PAIR_PROBABILITY(s[a][b2], row_lse[a], visible, alibi_slope, row + diagonal, key);
#if FLASHCL_DROPOUT
                const float z = flashcl_dropout_keep((ulong)bh, row, key, dropout_threshold, seed_lo, seed_hi,
                                                     dropout_offset)
                                    ? dropout_scale
                                    : 0.0f;
#if FLASHCL_BIAS
                DQ_DS(p * (dp[a][b2] * z - row_delta[a]));
#else
                ds_tile[(tk + a * THREADS_K) * S_STRIDE + c] = SOFTCAP_CHAIN(p * (dp[a][b2] * z - row_delta[a]));
#endif
#elif FLASHCL_BIAS
                DQ_DS(p * (dp[a][b2] - row_delta[a]));
#else
                ds_tile[(tk + a * THREADS_K) * S_STRIDE + c] = SOFTCAP_CHAIN(p * (dp[a][b2] - row_delta[a]));
#endif
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);

        // Keys in ascending order, whatever the plan.
        for (int c4 = 0; c4 < STR_QUADS; ++c4) {
            float4 dsc[RES_PER_ITEM];
            for (int a = 0; a < RES_PER_ITEM; ++a) dsc[a] = ds_tile4[(tk + a * THREADS_K) * (S_STRIDE / 4) + c4];
            DQ_STEP(4 * c4, x);
            DQ_STEP(4 * c4 + 1, y);
            DQ_STEP(4 * c4 + 2, z);
            DQ_STEP(4 * c4 + 3, w);
        }
        for (int c = STR_QUADS * 4; c < BLOCK_Q; ++c) { // blocks that are not a multiple of 4
            float4 dsc[RES_PER_ITEM];
            for (int a = 0; a < RES_PER_ITEM; ++a) dsc[a].x = ds_tile[(tk + a * THREADS_K) * S_STRIDE + c];
            DQ_STEP(c, x);
        }
    }

#if FLASHCL_BIAS
    // dBias of the pairs the loop never reached (past the causal diagonal, outside the window) is 0: written
    // here so every element of dBias is, with no fill beforehand. The loop covered whole steps from key_begin.
    {
        const int reached = key_begin < key_end ? key_begin + (key_end - key_begin + BLOCK_Q - 1) / BLOCK_Q * BLOCK_Q
                                                : key_begin;
        DBIAS_ZERO_KEYS(0, key_begin);
        DBIAS_ZERO_KEYS(reached, seqlen_k);
    }
#endif

    const ulong dq_base = dq_offset + (ulong)b * dq_stride_b + (ulong)h * dq_stride_h;
    for (int a = 0; a < RES_PER_ITEM; ++a) {
        const int row = q0 + tk + a * THREADS_K;
        if (row >= seqlen_q) continue;
        for (int j = 0; j < DIMS_PER_ITEM; ++j) {
            const int d = OWN_DIM(j);
            if (d < HEAD_DIM) STORE(dq, dq_base + (ulong)row * dq_stride_s + d, dq_acc[a][j] * scale);
        }
    }
}
