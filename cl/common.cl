// common.cl: storage types and helpers shared by every flashcl kernel (prepended to each program).
//
// Macros taken (the host passes them with -D; defaults let the file compile alone):
//   FLASHCL_DTYPE  0 = float, 1 = half (storage only), 2 = bfloat16 (storage only)
// All arithmetic is float whatever the storage type: no device the project
// targets is required to report cl_khr_fp16.

#ifndef FLASHCL_DTYPE
#define FLASHCL_DTYPE 0
#endif

#if FLASHCL_DTYPE == 0
typedef float storage_t;
#define LOAD(ptr, index) ((ptr)[index])
#define STORE(ptr, index, value) ((ptr)[index] = (value))
#elif FLASHCL_DTYPE == 1
typedef half storage_t;
#define LOAD(ptr, index) vload_half((index), (ptr))
#define STORE(ptr, index, value) vstore_half_rte((value), (index), (ptr))
#elif FLASHCL_DTYPE == 2
typedef ushort storage_t;
#define LOAD(ptr, index) as_float((uint)(ptr)[index] << 16)
#define STORE(ptr, index, value) ((ptr)[index] = flashcl_float_to_bf16(value))
// Round to nearest even; NaN stays a (quiet) NaN.
inline ushort flashcl_float_to_bf16(float x) {
    uint bits = as_uint(x);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (ushort)((bits >> 16) | 0x0040u);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (ushort)(bits >> 16);
}
#else
#error "FLASHCL_DTYPE must be 0 (float), 1 (half) or 2 (bfloat16)"
#endif

// The log-sum-exp of a finished row from its maximum m and its sum l of
// exp(x - m) (natural units): -inf for a row that saw no key (m = -inf);
// NaN for a row whose sum is 0 or NaN although it saw keys (all visible
// scores -inf, or a NaN among them), where log(0) would say "empty".
inline float flashcl_row_lse(float m, float l) {
    return m == -INFINITY ? -INFINITY : l == 0.0f ? NAN : m + log(l);
}

// The same from a maximum in log2 units, as the tensor-core kernel keeps it:
// LSE = ln(2) * (m + log2(l)).
inline float flashcl_row_lse2(float m, float l) {
    return m == -INFINITY ? -INFINITY : l == 0.0f ? NAN : (m + log2(l)) * M_LN2_F;
}

// Odd local-memory row strides keep work-items that read the same column of
// consecutive rows on different banks.
#define FLASHCL_ODD_STRIDE(n) ((n) | 1)

// Optional features, each compiled in only when the host asks for it so the
// dense kernels stay exactly as they are (the defaults add no code):
//   FLASHCL_WINDOW      sliding-window mask (window_left/window_right arguments)
//   FLASHCL_BLOCK_MASK  block-sparse mask (a uint8 block mask and a per-tile summary)
//   FLASHCL_DROPOUT     dropout on the normalised probabilities (Philox4x32-10)
//   FLASHCL_VARLEN      packed variable-length batch (cumulative sequence offsets)
//   FLASHCL_SOFTCAP     logit soft-capping of the scaled scores (softcap argument)
//   FLASHCL_ALIBI       ALiBi: minus a per-(batch, head) slope times the distance of the key from the query's
//                       position (alibi_slopes arguments)
//   FLASHCL_BIAS        an additive bias tensor (batch or 1, heads_q or 1, seqlen_q, seqlen_k) read per pair
//                       (bias arguments); FLASHCL_BIAS_F32=1: its elements are float, else storage_t
#ifndef FLASHCL_WINDOW
#define FLASHCL_WINDOW 0
#endif
#ifndef FLASHCL_BLOCK_MASK
#define FLASHCL_BLOCK_MASK 0
#endif
#ifndef FLASHCL_DROPOUT
#define FLASHCL_DROPOUT 0
#endif
#ifndef FLASHCL_VARLEN
#define FLASHCL_VARLEN 0
#endif
#ifndef FLASHCL_SOFTCAP
#define FLASHCL_SOFTCAP 0
#endif
#ifndef FLASHCL_ALIBI
#define FLASHCL_ALIBI 0
#endif
#ifndef FLASHCL_BIAS
#define FLASHCL_BIAS 0
#endif
#ifndef FLASHCL_BIAS_F32
#define FLASHCL_BIAS_F32 0
#endif
#define FLASHCL_SPARSE (FLASHCL_WINDOW || FLASHCL_BLOCK_MASK)
#define FLASHCL_SCORE_MODS (FLASHCL_SOFTCAP || FLASHCL_ALIBI)

// The extra kernel arguments of the features, appended after the dense ones
// in this order (src/features.c sets them in the same order).
#if FLASHCL_WINDOW
#define FLASHCL_WINDOW_PARAMS , int window_left, int window_right
#else
#define FLASHCL_WINDOW_PARAMS
#endif
#if FLASHCL_BLOCK_MASK
// block_mask: (heads, ceil(Sq/mask_block), mask_cols) uint8 from byte
// mask_offset, head stride mask_stride_h (0: shared by all heads). tile_mask: per (head, query tile,
// key tile) of this kernel's tiles, 0 = every pair off (skipped), 1 = every
// pair on, 2 = mixed (masked element by element).
#define FLASHCL_BLOCK_MASK_PARAMS                                                                        \
    , __global const uchar *block_mask, ulong mask_offset, ulong mask_stride_h, int mask_block, int mask_cols,             \
        __global const uchar *tile_mask, ulong tile_stride_h, int tile_cols
#else
#define FLASHCL_BLOCK_MASK_PARAMS
#endif
#if FLASHCL_DROPOUT
#define FLASHCL_DROPOUT_PARAMS , uint dropout_threshold, float dropout_scale, uint seed_lo, uint seed_hi, ulong dropout_offset
#else
#define FLASHCL_DROPOUT_PARAMS
#endif
#if FLASHCL_VARLEN
// cu_seqlens_q/k: batch + 1 cumulative row offsets of the packed sequences;
// total_q = cu_seqlens_q[batch], the packed query rows (the backward's D is
// laid out (heads_q, total_q)).
#define FLASHCL_VARLEN_PARAMS , __global const int *cu_seqlens_q, __global const int *cu_seqlens_k, int total_q
// Turns the kernel's seqlen_q / seqlen_k (the maxima) into sequence b's own
// lengths and names its first packed rows varlen_q_start / varlen_k_start.
#define FLASHCL_VARLEN_SEQUENCE(b)                                              \
    const int varlen_q_start = cu_seqlens_q[b], varlen_k_start = cu_seqlens_k[b]; \
    seqlen_q = cu_seqlens_q[(b) + 1] - varlen_q_start;                          \
    seqlen_k = cu_seqlens_k[(b) + 1] - varlen_k_start
// Moves view p (p_offset, p_stride_b, p_stride_s) to row `start` of the
// packed tensor; the batch stride is ignored.
#define FLASHCL_VARLEN_VIEW(p, start) \
    p##_offset += (ulong)(start) * p##_stride_s; \
    p##_stride_b = 0
#else
#define FLASHCL_VARLEN_PARAMS
#endif
#if FLASHCL_SOFTCAP
#define FLASHCL_SOFTCAP_PARAMS , float softcap
#else
#define FLASHCL_SOFTCAP_PARAMS
#endif
#if FLASHCL_ALIBI
// alibi_slopes: float slopes, (batch, heads_q) with batch stride alibi_stride_b (0: one row shared by the
// batch), from element alibi_offset.
#define FLASHCL_ALIBI_PARAMS , __global const float *alibi_slopes, ulong alibi_offset, ulong alibi_stride_b
#define FLASHCL_ALIBI_SLOPE(b, h) alibi_slopes[alibi_offset + (ulong)(b) * alibi_stride_b + (ulong)(h)]
#else
#define FLASHCL_ALIBI_PARAMS
#endif
// The score modifiers' arguments come last: the decode kernel, which takes the window and these only, lists
// them right after the window's.
#define FLASHCL_SCORE_MOD_PARAMS FLASHCL_SOFTCAP_PARAMS FLASHCL_ALIBI_PARAMS
#if FLASHCL_BIAS
// bias: (batch, heads_q, seqlen_q, seqlen_k) with the key stride 1, from element bias_offset; the host passes
// stride 0 for a broadcast dimension. Pairs past the sequences' ends read nothing (their bias is 0).
#if FLASHCL_BIAS_F32
typedef float bias_t;
#define FLASHCL_BIAS_LOAD(index) (bias[index])
#else
typedef storage_t bias_t;
#define FLASHCL_BIAS_LOAD(index) LOAD(bias, index)
#endif
#define FLASHCL_BIAS_PARAMS \
    , __global const bias_t *bias, ulong bias_offset, ulong bias_stride_b, ulong bias_stride_h, ulong bias_stride_s
#define FLASHCL_BIAS_BASE(b, h) (bias_offset + (ulong)(b) * bias_stride_b + (ulong)(h) * bias_stride_h)
#define FLASHCL_BIAS_VALUE(base, row, col) \
    (((row) < seqlen_q && (col) < seqlen_k) ? FLASHCL_BIAS_LOAD((base) + (ulong)(row) * bias_stride_s + (ulong)(col)) \
                                            : 0.0f)
// A -inf bias hides its pair as a mask does (flashcl.h): `|| hidden-by-bias` after a mask test, and the
// probability's visibility in the backward (bias_value is the pair's, declared by the caller).
#define FLASHCL_BIAS_HIDES || bias_value == -INFINITY
#define FLASHCL_BIAS_KEEPS && bias_value != -INFINITY
#define FLASHCL_BIAS_TERM +bias_value
// The dQ kernels' dBias output (cl/backward.cl, cl/backward_mma.cl; after their feature arguments): dS of pair
// (row, key) of (b, h) goes to dbias[dbias_offset + b * dbias_stride_b + h * dbias_stride_h + row * dbias_stride_s
// + key] when write_dbias (src/feature_bias.c: the caller's float dBias, or a full-size scratch).
#define FLASHCL_DBIAS_PARAMS \
    , __global float *dbias, ulong dbias_offset, ulong dbias_stride_b, ulong dbias_stride_h, ulong dbias_stride_s, \
        int write_dbias
// A hidden pair's dS is 0 * (dP - D), -0 where dP < D: dBias takes it as +0, the zero written for the pairs a
// loop skips, so it has the same bits whichever tiles computed it. On the bits, not `x + 0.0f`: Mesa's compiler
// folds that to x.
#define FLASHCL_DBIAS_PLUS_ZERO(x) as_float(as_uint(x) == 0x80000000u ? 0u : as_uint(x))
#else
#define FLASHCL_BIAS_PARAMS
#define FLASHCL_BIAS_HIDES
#define FLASHCL_BIAS_KEEPS
#define FLASHCL_BIAS_TERM
#define FLASHCL_DBIAS_PARAMS
#endif
#define FLASHCL_FEATURE_PARAMS                                                                  \
    FLASHCL_WINDOW_PARAMS FLASHCL_BLOCK_MASK_PARAMS FLASHCL_DROPOUT_PARAMS FLASHCL_VARLEN_PARAMS \
        FLASHCL_SCORE_MOD_PARAMS FLASHCL_BIAS_PARAMS

// The score modifiers (include/flashcl.h, flashcl_attention_extras), applied to a scaled score x of the query
// at key position pos (row + diagonal) and key col, in the library's order: soft-capping, then ALiBi; the masks
// come after, where the kernels apply them. slope is the row's head's. src/reference/ implements the same.
#if FLASHCL_SOFTCAP
#ifdef FLASHCL_MMA_PTX
// The matrix-unit kernels (FLASHCL_MMA_PTX set, 0 or 1): tanh|y| = 1 - 2r with r = 1 / (exp(2|y|) + 1), one
// exponential and one reciprocal and no branch, and the derivative 1 - tanh^2 = 4 r (1 - r), which keeps its
// relative accuracy where |tanh| nears 1. On NVIDIA the pair is ex2.approx and rcp.approx (native_*): the
// special-function unit is what soft-capping costs there, and OpenCL's precise tanh added a branchy sequence
// beside them (the f16 forward 1.45-1.48x dense at d64 instead of 1.91-1.96x, 1.25-1.28x at d128 instead of
// 1.56x on the H100: docs/perf.md). The absolute error of t is a few float ulps of 1, so cap * t is the score within
// cap x 2^-22, far inside the tolerance rules; the emulation computes the same formula in float accuracy.
#if FLASHCL_MMA_PTX
#define SOFTCAP_EXP2(x) native_exp2(x)
#define SOFTCAP_RECIP(x) native_recip(x)
#else
#define SOFTCAP_EXP2(x) exp2(x)
#define SOFTCAP_RECIP(x) (1.0f / (x))
#endif
inline float flashcl_softcap(float x, float cap, float *grad) {
    const float y = x / cap;
    const float r = SOFTCAP_RECIP(SOFTCAP_EXP2(fabs(y) * 2.8853900817779268f) + 1.0f); /* 2 log2(e) |y| */
    *grad = 4.0f * r * (1.0f - r);
    return cap * copysign(1.0f - 2.0f * r, y);
}
#else
// cap * tanh(x / cap), and its derivative 1 - tanh^2 in *grad (the backward's chain rule).
inline float flashcl_softcap(float x, float cap, float *grad) {
    const float t = tanh(x / cap);
    *grad = 1.0f - t * t;
    return cap * t;
}
#endif
#define FLASHCL_SOFTCAP_APPLY(x, grad) flashcl_softcap((x), softcap, &(grad))
#else
#define FLASHCL_SOFTCAP_APPLY(x, grad) (x)
#endif
#if FLASHCL_ALIBI
// pos - col stays inside int: flashcl_validate_desc keeps seqlen_q + seqlen_k + 1024 below 2^31.
#define FLASHCL_ALIBI_APPLY(x, slope, pos, col) ((x) - (slope) * (float)abs((pos) - (col)))
// The same term with the distance reached in float steps, for the tensor-core kernels' unrolled steps: pos - col
// = (pos0 - col0) - step, where pos0 - col0 is shared by a row's (or a key's) steps through a block, so it is
// converted once, and step = (col - col0) - (pos - pos0) is a small constant of the unrolled step. An integer
// subtract, abs and conversion per score (the conversion runs at a quarter of the float rate on NVIDIA) become
// one float subtract. Exact: integers below 2^24 are floats, so while |pos0 - col0| and |pos - col| stay below
// 2^24 the distance has the same bits as FLASHCL_ALIBI_APPLY's; past that both round (sequences of 16M keys).
#define FLASHCL_ALIBI_APPLY_STEP(x, slope, pos0, col0, step) \
    ((x) - (slope) * fabs((float)((pos0) - (col0)) - (float)(step)))
#else
#define FLASHCL_ALIBI_APPLY(x, slope, pos, col) (x)
#define FLASHCL_ALIBI_APPLY_STEP(x, slope, pos0, col0, step) (x)
#endif
// The modified score; grad (a float lvalue) receives d(modified)/dx where soft-capping is on.
#define FLASHCL_SCORE_MOD(x, grad, slope, pos, col) FLASHCL_ALIBI_APPLY(FLASHCL_SOFTCAP_APPLY(x, grad), slope, pos, col)
// The same for the pair at pos = pos0 + dp, col = col0 + dc, step = dc - dp (FLASHCL_ALIBI_APPLY_STEP).
#define FLASHCL_SCORE_MOD_STEP(x, grad, slope, pos0, col0, step) \
    FLASHCL_ALIBI_APPLY_STEP(FLASHCL_SOFTCAP_APPLY(x, grad), slope, pos0, col0, step)

// Window test of query `row` (key position row + diagonal) against key col.
#if FLASHCL_WINDOW
#define FLASHCL_WINDOW_VISIBLE(row, col) \
    ((col) >= (row) + diagonal - window_left && (col) <= (row) + diagonal + window_right)
#else
#define FLASHCL_WINDOW_VISIBLE(row, col) 1
#endif
// Block-mask test; row and col must be inside the sequences.
#if FLASHCL_BLOCK_MASK
#define FLASHCL_BLOCK_VISIBLE(mask_head, row, col) \
    (block_mask[(mask_head) + (ulong)((row) / mask_block) * (ulong)mask_cols + (ulong)((col) / mask_block)] != 0)
#else
#define FLASHCL_BLOCK_VISIBLE(mask_head, row, col) 1
#endif

#if FLASHCL_DROPOUT
// Philox4x32-10 (Salmon et al., SC'11): a counter-based generator, so the
// keep decision of an element depends only on (seed, offset, batch*heads +
// head, row, column), never on tiles, work-group size or device. Returns the
// first of the four output words; src/reference/ implements the same.
inline uint flashcl_philox(uint c0, uint c1, uint c2, uint c3, uint k0, uint k1) {
    for (int round = 0; round < 10; ++round) {
        const uint hi0 = mul_hi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
        const uint hi1 = mul_hi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    return c0;
}
// 1 if element (row, col) of head `bh` (= batch * heads_q + head) is kept:
// the counter's upper 64 bits are bh + offset, the lower ones (col, row).
inline int flashcl_dropout_keep(ulong bh, int row, int col, uint threshold, uint seed_lo, uint seed_hi,
                                ulong offset) {
    const ulong upper = bh + offset;
    return flashcl_philox((uint)col, (uint)row, (uint)upper, (uint)(upper >> 32), seed_lo, seed_hi) >= threshold;
}
#endif
