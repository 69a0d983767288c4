// mma_operands.cl: what the tensor-core kernels build on a backend's
// instructions (after mma.cl and the backend file): operands as the matrix
// instruction takes them for each storage type, the 3xTF32 split of float
// operands, and local tiles of rows read as B operands.


// ---- operands as the matrix instruction takes them --------------------
#if FLASHCL_DTYPE == 0
// Float storage (m16n8k8, one float per register): Q holds rows g and g + 8,
// dims t and t + 4 of every 8-dim step; K's B operand keys g, dims t and
// t + 4; the accumulators are laid out as m16n8k16's. The S accumulators hold keys 2t, 2t+1 of an 8-key tile,
// while m16n8k8's A operand holds k = t and t + 4: P V takes the tile's keys
// in the order (0, 2, 4, 6, 1, 3, 5, 7) along k, and V's B operand is read
// in that same order (rows 2t and 2t + 1), so P never leaves its registers.
#define P_TO_A(a, n, p)                                                  \
    do {                                                                 \
        a[n][0] = as_uint((p).x);                                        \
        a[n][1] = as_uint((p).z);                                        \
        a[n][2] = as_uint((p).y);                                        \
        a[n][3] = as_uint((p).w);                                        \
    } while (0)
// B operands of P V for dim tiles j and j+1, keys key0 + (2t, 2t + 1):
// row strides of 4 (mod 32) words put the 32 lanes on 32 banks.
#define V_FRAGMENTS(b, v_words, key0, j)                                                 \
    do {                                                                                 \
        __local const uint *row_ = (v_words) + ((key0) + 2 * t) * ROW_WORDS + (j) * 8 + g; \
        b[0] = row_[0];                                                                  \
        b[1] = row_[ROW_WORDS];                                                        \
        b[2] = row_[8];                                                                  \
        b[3] = row_[ROW_WORDS + 8];                                                    \
    } while (0)
// TF32 rounding, half away from zero at bit 13 (as PTX's cvt.rna.tf32.f32),
// with integer operations that leave the low 13 bits zero. NVIDIA's and
// llvmpipe's canonical NaN is 0x7fffffff, which the + 0x1000 carries into
// the sign bit: rounded, such a NaN (made inside a kernel, e.g. dS of a
// NaN row) becomes -0. The split keeps NaN in the small part instead: x -
// big is NaN whenever x is NaN or infinite, and the small part is either
// rounded with a NaN guard or not rounded at all.
inline uint tf32_round(float x) { return (as_uint(x) + 0x1000u) & 0xffffe000u; }
// TF32_SMALL_ROUNDED 0 leaves the small part as x - big: the matrix unit
// reads only its top 19 bits (the emulation's unpack_value likewise), so it
// is truncated there (error up to 2^-21 |x| instead of 2^-22), with no
// rounding and no guard. The forward takes it (src/forward_mma.c); the
// backward keeps the rounding (docs/perf.md).
#ifndef TF32_SMALL_ROUNDED
#define TF32_SMALL_ROUNDED 1
#endif
inline void tf32_split(uint x, uint *big, uint *small) {
    *big = tf32_round(as_float(x));
    const float rest = as_float(x) - as_float(*big);
#if TF32_SMALL_ROUNDED
    *small = isnan(rest) ? as_uint(rest) : tf32_round(rest);
#else
    *small = as_uint(rest);
#endif
}
#define PREPARE_A(dst, a)                                                  \
    do {                                                                   \
        UNROLL_ALWAYS                                                             \
        for (int i_ = 0; i_ < 4; ++i_) tf32_split((a)[i_], &dst[i_], &dst[4 + i_]); \
    } while (0)
#define PREPARE_B(dst, b0, b1)                                             \
    do {                                                                   \
        tf32_split((b0), &dst[0], &dst[2]);                                \
        tf32_split((b1), &dst[1], &dst[3]);                                \
    } while (0)
// c += a b in 3xTF32, the small terms first. The matrix unit's own
// accumulation aligns and truncates: chained along a whole row of dims or
// keys it cost several times float's error on the H100 (docs/perf.md).
// MMA_FRESH sends the three products to a fresh accumulator added to c
// with an ordinary (rounded) float add; TF32_FRESH selects where: bit 0
// for S = Q K^T, bit 1 for O += P V.
#ifndef TF32_FRESH
#define TF32_FRESH 3
#endif
#define MMA_FRESH(c, a, b)                                                 \
    {                                                                      \
        float4 step_ = (float4)(0.0f);                                     \
        MMA_CHAINED(step_, a, b)                                           \
        (c) += step_;                                                      \
    }
#if TF32_FRESH & 1
#define MMA_S(c, a, b) MMA_FRESH(c, a, b)
#else
#define MMA_S(c, a, b) MMA_CHAINED(c, a, b)
#endif
#if TF32_FRESH & 2
#define MMA_PV(c, a, b) MMA_FRESH(c, a, b)
#else
#define MMA_PV(c, a, b) MMA_CHAINED(c, a, b)
#endif
#define STORE_PAIR(ptr, index, lo, hi) (*(__global float2 *)((ptr) + (index)) = (float2)((lo), (hi)))
#else
// Accumulator tiles 2kk and 2kk+1 of S are the A operand of key step kk of
// P V, rounded to the storage type.
#define P_TO_A(a, n, p)                                                  \
    do {                                                                 \
        a[(n) / 2][((n) % 2) * 2] = pack2((p).x, (p).y);                 \
        a[(n) / 2][((n) % 2) * 2 + 1] = pack2((p).z, (p).w);             \
    } while (0)
#define PREPARE_A(dst, a)                                                  \
    do {                                                                   \
        UNROLL_ALWAYS                                                             \
        for (int i_ = 0; i_ < 4; ++i_) dst[i_] = (a)[i_];                  \
    } while (0)
#define PREPARE_B(dst, b0, b1)                                             \
    do {                                                                   \
        dst[0] = (b0);                                                     \
        dst[1] = (b1);                                                     \
    } while (0)
#define MMA_S(c, a, b) MMA(c, a[0], a[1], a[2], a[3], b[0], b[1])
#define MMA_PV(c, a, b) MMA_S(c, a, b)
#define STORE_PAIR(ptr, index, lo, hi) (*(__global uint *)((ptr) + (index)) = pack2((lo), (hi)))
#endif

// One 32-bit fragment word of a tensor: one float, or two adjacent 16-bit
// values (index even).
#define LOAD_WORD(ptr, index) (*(__global const uint *)((ptr) + (index)))

// ---- local tiles of rows x HEAD_DIM, read as B operands --------------------
// FETCH_TILE copies rows [row0, row0 + ROWS) of one head into a tile of
// ROW_WORDS-word rows as 16-byte chunks, consecutive work-items along a row
// (asynchronously on NVIDIA: wait with COPY_WAIT, then a barrier); rows past
// `rows` are zeros. Needs `lid` and WG_SIZE.
#define FETCH_TILE(tile4, src, base, stride_s, row0, rows, ROWS)                                           \
    for (int e = lid; e < (ROWS) * CHUNKS_PER_ROW; e += WG_SIZE) {                                        \
        const int r = e / CHUNKS_PER_ROW, c = e - r * CHUNKS_PER_ROW;                                     \
        const bool valid = (row0) + r < (rows);                                                          \
        __global const uint4 *from =                                                                     \
            (__global const uint4 *)((src) + (base) + (valid ? (ulong)((row0) + r) * (stride_s) + c * CHUNK_VALUES : 0)); \
        COPY16_ASYNC(&(tile4)[(r * ROW_WORDS) / 4 + c], from, valid);                                    \
    }
// The B operand of words p[0] and p[gap] of a tile (k = t and t + 4 of a
// fragment: gap 4 along a row), prepared. Pointers with constant offsets,
// not int indices: with an index ptxas did not fold the offsets into the
// loads, which cost the f16 forward 17% on the H100 (docs/perf.md).
#define TILE_B(dst, p, gap) PREPARE_B(dst, (p)[0], (p)[gap])
// The B operands of the transposed product (tile rows along k, from row0)
// for dim tiles j and j + 1 (V_FRAGMENTS), prepared.
#define TILE_B_TRANSPOSED(left, right, tile, row0, j)                                                     \
    do {                                                                                                  \
        uint b_[4];                                                                                       \
        V_FRAGMENTS(b_, tile, row0, j);                                                                   \
        PREPARE_B(left, b_[0], b_[1]);                                                                    \
        PREPARE_B(right, b_[2], b_[3]);                                                                   \
    } while (0)

// ---- a bias tile staged in local memory (FLASHCL_BIAS_STAGED) ---------------
// With an additive bias whose rows start 16-byte aligned (the host checked), the tensor-core kernels copy the
// bias of each block to local memory as 16-byte chunks beside their K/V or Q/dO blocks (cp.async on NVIDIA) and
// read each score's bias there: the per-pair global loads they replace waited out their latency and issued 8-16
// times more load instructions (docs/perf.md). Tiles are rows of `cols` elements padded by one chunk (with 16-bit
// elements, rows 4 (mod 32) words apart: the lanes' reads of rows g or 2t hit distinct banks). Keys from the last
// whole chunk before seqlen_k on are read from global memory, as without staging (the backward kernels: every key
// of the warp or key block that holds one, so that the choice is uniform).
#ifndef FLASHCL_BIAS_STAGED
#define FLASHCL_BIAS_STAGED 0
#endif
#if FLASHCL_BIAS_STAGED
#if !FLASHCL_BIAS
#error "FLASHCL_BIAS_STAGED needs FLASHCL_BIAS"
#endif
#if FLASHCL_BIAS_F32 || FLASHCL_DTYPE == 0
#define BIAS_CHUNK 4 // elements per 16-byte chunk
#else
#define BIAS_CHUNK 8
#endif
#define BIAS_TILE_ROW(cols) ((cols) / BIAS_CHUNK + 1) // 16-byte chunks per staged row
// Elements col and col + 1 (col even), and element col, of a staged row.
inline float2 bias_pair_local(__local const uint4 *row, int col) {
#if FLASHCL_BIAS_F32 || FLASHCL_DTYPE == 0
    return vload2(0, (__local const float *)row + col);
#elif FLASHCL_DTYPE == 1
    return vload_half2(col / 2, (__local const half *)row);
#else
    const uint w = ((__local const uint *)row)[col / 2];
    return (float2)(as_float(w << 16), as_float(w & 0xffff0000u));
#endif
}
inline float bias_value_local(__local const uint4 *row, int col) {
#if FLASHCL_BIAS_F32 || FLASHCL_DTYPE == 0
    return ((__local const float *)row)[col];
#elif FLASHCL_DTYPE == 1
    return vload_half(col, (__local const half *)row);
#else
    return as_float((uint)((__local const ushort *)row)[col] << 16);
#endif
}
// Copies the bias of rows row0 .. row0 + ROWS_ and keys col0 .. col0 + COLS_ (bias_base's plane) into tile4; a
// chunk of a row at or past row_end, or not wholly before col_end, is zeros. Needs `lid` and WG_SIZE, and the
// kernel's bias arguments (cl/common.cl FLASHCL_BIAS_PARAMS).
#define FETCH_BIAS_TILE(tile4, row0, ROWS_, row_end, col0, COLS_, col_end)                                      \
    for (int e_ = lid; e_ < (ROWS_) * ((COLS_) / BIAS_CHUNK); e_ += WG_SIZE) {                                  \
        const int r_ = e_ / ((COLS_) / BIAS_CHUNK), c_ = e_ - r_ * ((COLS_) / BIAS_CHUNK);                      \
        const int col_ = (col0) + c_ * BIAS_CHUNK;                                                             \
        const bool valid_ = (row0) + r_ < (row_end) && col_ + BIAS_CHUNK <= (col_end);                         \
        __global const uint4 *from_ = (__global const uint4 *)(bias + (valid_ ? bias_base +                     \
            (ulong)((row0) + r_) * bias_stride_s + (ulong)col_ : 0));                                          \
        COPY16_ASYNC(&(tile4)[r_ * BIAS_TILE_ROW(COLS_) + c_], from_, valid_);                                 \
    }
// The first key whose bias is read from global memory: past the last whole chunk.
#define BIAS_STAGED_END(seqlen_k) ((seqlen_k) - (seqlen_k) % BIAS_CHUNK)
#endif

// ---- the online softmax's maxima, as the forward kernels keep them ---------
// Row maxima are kept in log2 units (scale x log2(e) folded into scale2).
// A block's maximum raw score in the log2 units of the row maxima: -inf (no
// visible key) stays -inf, and the -FLT_MAX floor of a row that sees keys
// (see the block maxima) is floored again, since scaling may take it to -inf.
inline float block_max_log2(float raw, float scale2) {
    return raw == -INFINITY ? -INFINITY : fmax(raw * scale2, -FLT_MAX);
}

// The exponents are fma(x, scale2, -max) of the exact products against the
// rounded maximum: for the largest score of a row they are not 0 but the
// maximum's rounding error, up to half its ulp. That offset cancels in O and
// LSE as long as exp2 of it neither overflows nor underflows, which holds for
// |max| < 2^30 (offsets within +-32). Past that (scaled scores beyond ~7e8,
// far outside what attention meets) the row is written as NaN, never as a
// silently wrong number; the portable kernels take any finite score.
#define SCORE_RANGE_LOG2 0x1.0p30f
inline bool row_in_range(float m) { return m == -INFINITY || fabs(m) < SCORE_RANGE_LOG2; }
