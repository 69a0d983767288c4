// mma.cl: the matrix-unit (tensor-core) machinery the kernels *_mma.cl
// share, placed by the host between common.cl and the kernel file: operand
// and accumulator fragments as PTX's mma.sync defines them, the instruction
// itself (NVIDIA inline PTX) or its emulation through local memory, the
// 3xTF32 split for float storage, and asynchronous copies to local memory.
//
// Macros taken (host passes them with -D):
//   HEAD_DIM   head dimension, a multiple of 16, at most 128
//   FLASHCL_MMA_PTX  1: NVIDIA inline PTX (mma.sync, shfl.sync, cp.async,
//              ldmatrix; compute capability >= 8.0). 0: the same
//              instructions emulated with local memory and barriers, for
//              testing on any device.
// A kernel using the emulation declares, per work-item, `lane` (0..31 in
// its warp), `g = lane / 4`, `t = lane % 4`, `lid`, `warp_scratch`
// (SCRATCH_WORDS words of local memory per warp) and `exchange` (one float
// per work-item) before its first instruction.

#ifndef HEAD_DIM
#define HEAD_DIM 64
#endif
#ifndef FLASHCL_MMA_PTX
#define FLASHCL_MMA_PTX 0
#endif
#if HEAD_DIM % 16 != 0 || HEAD_DIM < 16 || HEAD_DIM > 128
#error "HEAD_DIM must be a multiple of 16 in 16..128"
#endif
// Float storage: 3xTF32. A TF32 operand keeps 11 significant bits of a
// float, so each float x is split into big = x rounded to TF32 and
// small = (x - big) rounded to TF32 (x - big is exact in float), and a product
// is a b ~ a_small b_big + a_big b_small + a_big b_big, the three
// accumulated in float, smallest first; the dropped a_small b_small and the
// rounding of the small parts are each about 2^-22 of |a b|, near float's
// own rounding (2^-24), far below TF32's (2^-11) (the forward leaves the
// small part unrounded: see TF32_SMALL_ROUNDED). PyTorch's efficient
// backend computes float attention the same way. The rounding is done with
// integer operations (round half away from zero at bit 13, as PTX's
// cvt.rna.tf32), identical in the emulation, and leaves the low 13 bits zero
// so the matrix unit reads exactly the rounded values.
#if FLASHCL_DTYPE == 0
#define MMA_K 8           // k of one matrix instruction (m16n8k8)
#define VALUES_PER_WORD 1 // values per 32-bit fragment register
#define A_WORDS 8         // a prepared A operand: 4 big words, then 4 small
#define B_WORDS 4         // a prepared B operand: 2 big words, then 2 small
#else
#define MMA_K 16 // m16n8k16
#define VALUES_PER_WORD 2
#define A_WORDS 4 // used as stored
#define B_WORDS 2
#endif
#define DIM_STEPS (HEAD_DIM / MMA_K) // k-steps of a product over the head dimension
#define DIM_TILES (HEAD_DIM / 8)     // 8-dim accumulator tiles of an output row block
// Local tiles hold rows of HEAD_DIM values in 32-bit words, with strides of
// 4 (mod 8) words so fragment reads spread over the banks.
#define ROW_WORDS (HEAD_DIM / VALUES_PER_WORD + 4)
#define CHUNK_VALUES (4 * VALUES_PER_WORD)       // values per 16-byte chunk
#define CHUNKS_PER_ROW (HEAD_DIM / CHUNK_VALUES) // per tile row

// The fragment loops are unrolled on the GPU so the fragment arrays live in
// registers. The emulation leaves the loops around emulated instructions
// rolled (UNROLL): each holds barriers, and POCL's compile time grows with
// every unrolled copy (minutes per kernel otherwise). Loops without
// barriers are always unrolled (UNROLL_ALWAYS): Mesa's llvmpipe (rusticl)
// ends every loop of a kernel once the loops of a work-item have iterated
// 65535 times in all (gallivm's LP_MAX_TGSI_LOOP_ITERATIONS, shared by
// every loop), silently, so the emulation keeps its iteration count low.
#define UNROLL_ALWAYS _Pragma("unroll")
#if FLASHCL_MMA_PTX
#define UNROLL _Pragma("unroll")
#else
#define UNROLL _Pragma("unroll 1")
#endif

// ---- the matrix instruction, the quad shuffle, packing two floats ----
#if FLASHCL_MMA_PTX
#if FLASHCL_DTYPE == 0
#define MMA_SHAPE "m16n8k8"
#define MMA_TYPE "tf32"
#elif FLASHCL_DTYPE == 1
#define MMA_SHAPE "m16n8k16"
#define MMA_TYPE "f16"
#define PACK_CVT "cvt.rn.f16x2.f32"
#else
#define MMA_SHAPE "m16n8k16"
#define MMA_TYPE "bf16"
#define PACK_CVT "cvt.rn.bf16x2.f32"
#endif
// c += A (16 x MMA_K, row) * B (MMA_K x 8, col), float accumulators.
#define MMA(c, a0, a1, a2, a3, b0, b1)                                                                       \
    do {                                                                                                     \
        float d0_, d1_, d2_, d3_;                                                                            \
        asm("mma.sync.aligned." MMA_SHAPE ".row.col.f32." MMA_TYPE "." MMA_TYPE                              \
                     ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"                        \
                     : "=f"(d0_), "=f"(d1_), "=f"(d2_), "=f"(d3_)                                            \
                     : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"((c).x), "f"((c).y),         \
                       "f"((c).z), "f"((c).w));                                                              \
        (c) = (float4)(d0_, d1_, d2_, d3_);                                                                  \
    } while (0)
#if FLASHCL_DTYPE != 0
// lo goes to the low 16 bits (the lower-indexed element of a fragment pair);
// cvt puts its first source in the high half.
inline uint pack2(float lo, float hi) {
    uint r;
    asm(PACK_CVT " %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
#endif
inline float quad_xor(float x, int mask) {
    uint r;
    asm volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(r) : "r"(as_uint(x)), "r"(mask));
    return as_float(r);
}
#define QUAD_XOR(x, mask) quad_xor((x), (mask))
#if FLASHCL_DTYPE == 0
#define EXP2(x) exp2(x) // float storage: float's accuracy throughout
#else
#define EXP2(x) native_exp2(x) // ex2.approx: P is rounded to 16 bits next anyway
#endif
// A __local pointer's value is its address in PTX's shared state space.
#define SHARED_ADDRESS(p) ((uint)(ulong)(p))
// 16 bytes from global to local memory without passing through registers;
// a copy with `valid` 0 reads nothing and writes zeros.
#define COPY16_ASYNC(dst, src, valid)                                                                  \
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(SHARED_ADDRESS(dst)), "l"((ulong)(src)), \
                 "r"((valid) ? 16 : 0)                                                                 \
                 : "memory")
#define COPY_COMMIT() asm volatile("cp.async.commit_group;" ::: "memory")
// Waits until at most n of this work-item's copy groups are still in flight.
#define COPY_WAIT(n) asm volatile("cp.async.wait_group %0;" ::"n"(n) : "memory")
#if FLASHCL_DTYPE != 0
// B operands of P V for dim tiles j and j+1 from V stored keys x dims:
// ldmatrix's transposing load, lanes 0-15 naming the 16 key rows of dim
// tile j, lanes 16-31 those of tile j+1.
#define V_FRAGMENTS(b, v_words, key0, j)                                                                 \
    do {                                                                                                 \
        __local const uint *row_ = (v_words) + ((key0) + (lane & 15)) * ROW_WORDS + ((j) + (lane >> 4)) * 4; \
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"                \
                     : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])                                    \
                     : "r"(SHARED_ADDRESS(row_))                                                          \
                     : "memory");                                                                        \
    } while (0)
#endif
#else
#if FLASHCL_DTYPE == 0
// What the matrix unit reads of a TF32 operand: the top 19 bits.
inline float unpack_value(__local const uint *words, int index) { return as_float(words[index] & 0xffffe000u); }
#elif FLASHCL_DTYPE == 1
inline float unpack_value(__local const uint *words, int index) { return vload_half(index, (__local const half *)words); }
inline uint round16(float x) {
    ushort bits;
    vstore_half_rte(x, 0, (__private half *)&bits);
    return bits;
}
#else
inline float unpack_value(__local const uint *words, int index) {
    const uint w = words[index >> 1];
    return as_float((index & 1) ? (w & 0xffff0000u) : (w << 16));
}
inline uint round16(float x) { return flashcl_float_to_bf16(x); }
#endif
#if FLASHCL_DTYPE != 0
inline uint pack2(float lo, float hi) { return round16(lo) | (round16(hi) << 16); }
#endif
// One warp's matrix instruction through local memory: every lane stores its
// fragment words where the PTX layout puts them (A: 16 rows of 8 words; B:
// 8 columns of 8 words along k), then computes its own four accumulators.
// Called by every work-item of the group at the same point (it has barriers).
inline void store_a(__local uint *region, int g, int t, uint a0, uint a1, uint a2, uint a3) {
    region[g * 8 + t] = a0;
    region[(g + 8) * 8 + t] = a1;
    region[g * 8 + t + 4] = a2;
    region[(g + 8) * 8 + t + 4] = a3;
}
inline void store_b(__local uint *region, int g, int t, uint b0, uint b1) {
    region[g * 8 + t] = b0;
    region[g * 8 + t + 4] = b1;
}
// acc + A B for A (16 x MMA_K) and B stored by store_a / store_b, one fma
// per product in k order. The k loop takes 4 steps per iteration: every
// loop iteration counts against llvmpipe's limit (see UNROLL_ALWAYS), while
// unrolling it whole made rusticl's compile of a kernel 2-3 times slower.
float4 emulated_product(float4 acc, __local const uint *a, __local const uint *b, int g, int t) {
#define EMULATED_STEP(kk)                                                                        \
    {                                                                                            \
        const float a_top = unpack_value(a, g * MMA_K + (kk));                                   \
        const float a_bottom = unpack_value(a, (g + 8) * MMA_K + (kk));                          \
        const float b_left = unpack_value(b, (2 * t) * MMA_K + (kk));                            \
        const float b_right = unpack_value(b, (2 * t + 1) * MMA_K + (kk));                       \
        acc.x = fma(a_top, b_left, acc.x);                                                       \
        acc.y = fma(a_top, b_right, acc.y);                                                      \
        acc.z = fma(a_bottom, b_left, acc.z);                                                    \
        acc.w = fma(a_bottom, b_right, acc.w);                                                   \
    }
    for (int kk = 0; kk < MMA_K; kk += 4) {
        EMULATED_STEP(kk) EMULATED_STEP(kk + 1) EMULATED_STEP(kk + 2) EMULATED_STEP(kk + 3)
    }
#undef EMULATED_STEP
    return acc;
}
// Scratch words per warp: A (128) and B (64); for 3xTF32 both parts of each.
#if FLASHCL_DTYPE == 0
#define SCRATCH_WORDS 384
#else
#define SCRATCH_WORDS 192
#endif
void mma_emulated(float4 *c, uint a0, uint a1, uint a2, uint a3, uint b0, uint b1, __local uint *scratch,
                  int lane) {
    const int g = lane >> 2, t = lane & 3;
    store_a(scratch, g, t, a0, a1, a2, a3);
    store_b(scratch + 128, g, t, b0, b1);
    barrier(CLK_LOCAL_MEM_FENCE);
    *c = emulated_product(*c, scratch, scratch + 128, g, t);
    barrier(CLK_LOCAL_MEM_FENCE);
}
#if FLASHCL_DTYPE == 0
// The three instructions of a 3xTF32 product (MMA_CHAINED below) in one
// exchange through local memory: a third of the barriers and code of three
// emulated instructions, the same products in the same order.
void mma3_emulated(float4 *c, const uint *a, const uint *b, __local uint *scratch, int lane) {
    const int g = lane >> 2, t = lane & 3;
    __local uint *a_big = scratch, *a_small = scratch + 128, *b_big = scratch + 256, *b_small = scratch + 320;
    store_a(a_big, g, t, a[0], a[1], a[2], a[3]);
    store_a(a_small, g, t, a[4], a[5], a[6], a[7]);
    store_b(b_big, g, t, b[0], b[1]);
    store_b(b_small, g, t, b[2], b[3]);
    barrier(CLK_LOCAL_MEM_FENCE);
    float4 acc = *c;
    acc = emulated_product(acc, a_small, b_big, g, t);
    acc = emulated_product(acc, a_big, b_small, g, t);
    *c = emulated_product(acc, a_big, b_big, g, t);
    barrier(CLK_LOCAL_MEM_FENCE);
}
#endif
float quad_xor_emulated(float x, int mask, __local float *exchange, int lid) {
    exchange[lid] = x;
    barrier(CLK_LOCAL_MEM_FENCE);
    const float y = exchange[lid ^ mask];
    barrier(CLK_LOCAL_MEM_FENCE);
    return y;
}
#define MMA(c, a0, a1, a2, a3, b0, b1) mma_emulated(&(c), a0, a1, a2, a3, b0, b1, warp_scratch, lane)
#define QUAD_XOR(x, mask) quad_xor_emulated((x), (mask), exchange, lid)
#define EXP2(x) exp2(x)
// The copies are plain and finish at once; the barriers that follow them
// order them as they order the asynchronous ones.
#define COPY16_ASYNC(dst, src, valid) (*(dst) = (valid) ? *(src) : (uint4)(0u))
#define COPY_COMMIT()
#define COPY_WAIT(n)
#if FLASHCL_DTYPE != 0
// What ldmatrix .trans delivers: lane (g, t) gets keys 2t, 2t+1 (and
// 2t+8, 2t+9) of dim g of each tile, packed low to high.
inline uint v_pair(__local const uint *v_words, int key, int dim) {
    __local const ushort *halves = (__local const ushort *)v_words;
    return (uint)halves[key * (2 * ROW_WORDS) + dim] | ((uint)halves[(key + 1) * (2 * ROW_WORDS) + dim] << 16);
}
#define V_FRAGMENTS(b, v_words, key0, j)                                     \
    do {                                                                     \
        b[0] = v_pair(v_words, (key0) + 2 * t, (j) * 8 + g);                 \
        b[1] = v_pair(v_words, (key0) + 2 * t + 8, (j) * 8 + g);             \
        b[2] = v_pair(v_words, (key0) + 2 * t, (j) * 8 + 8 + g);             \
        b[3] = v_pair(v_words, (key0) + 2 * t + 8, (j) * 8 + 8 + g);         \
    } while (0)
#endif
#endif

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
#if FLASHCL_MMA_PTX
#define MMA_CHAINED(c, a, b)                                               \
    {                                                                      \
        MMA(c, a[4], a[5], a[6], a[7], b[0], b[1]);                        \
        MMA(c, a[0], a[1], a[2], a[3], b[2], b[3]);                        \
        MMA(c, a[0], a[1], a[2], a[3], b[0], b[1]);                        \
    }
#else
#define MMA_CHAINED(c, a, b) mma3_emulated(&(c), a, b, warp_scratch, lane);
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
