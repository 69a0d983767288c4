// mma_emulated.cl: the matrix instructions emulated with local memory and
// barriers (host table: "emulated", FLASHCL_MMA_PTX=0), with the same
// operand layouts and rounding, so CPU OpenCL tests the kernels' logic.
// Implements the interface of mma.cl. A kernel using it declares, per
// work-item, `lane` (0..31 in its warp), `g = lane / 4`, `t = lane % 4`,
// `lid`, `warp_scratch` (SCRATCH_WORDS words of local memory per warp) and
// `exchange` (one float per work-item) before its first instruction. Loops
// around emulated instructions stay rolled (UNROLL): each holds barriers,
// and POCL's compile time grows with every unrolled copy.
#define UNROLL _Pragma("unroll 1")
// Every emulated instruction holds work-group barriers: all warps take part
// in every one, none may skip a block.
#define MMA_WARPS_MAY_SKIP 0
// Per-kernel state, declared at the top of each kernel: SCRATCH_WORDS words
// of local memory per warp for the operands, and (the forward's quad
// shuffle) one float per work-item.
#define MMA_BACKEND_STATE(WARPS_)                                                   \
    __local uint scratch[(WARPS_) * SCRATCH_WORDS];                                 \
    __local uint *warp_scratch = scratch + warp * SCRATCH_WORDS;
#define MMA_BACKEND_EXCHANGE __local float exchange[WG_SIZE];

// ---- the matrix instruction, the quad shuffle, packing two floats ----
#if FLASHCL_DTYPE == 0
// What the matrix unit reads of a TF32 operand: the top 19 bits.
inline float unpack_value(__local const uint *words, int index) { return as_float(words[index] & 0xffffe000u); }
#elif FLASHCL_DTYPE == 1
// Half conversions in integer operations, bit for bit those of vload_half and vstore_half_rte (checked over
// every float input): POCL expands each vstore_half_rte into a long branchy sequence, and with one per packed
// operand the emulated f16 kernels took 2-3x the build time of their bf16 twins (docs/perf.md, "Test time").
inline float half_bits_to_float(uint h) {
    const uint sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1fu) return as_float(sign | 0x7f800000u | (m << 13));
    if (e == 0u) return as_float(sign | as_uint((float)m * 0x1p-24f));
    return as_float(sign | ((e + 112u) << 23) | (m << 13));
}
inline float unpack_value(__local const uint *words, int index) {
    const uint w = words[index >> 1];
    return half_bits_to_float((index & 1) ? (w >> 16) : (w & 0xffffu));
}
inline uint round16(float x) {
    const uint b = as_uint(x), sign = (b >> 16) & 0x8000u, a = b & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00u | ((a >> 13) & 0x3ffu);
    if (a >= 0x477ff000u) return sign | 0x7c00u;
    if (a >= 0x38800000u) return sign | ((a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13);
    if (a <= 0x33000000u) return sign;
    const uint s = 126u - (a >> 23), mant = (a & 0x7fffffu) | 0x800000u, half_point = 1u << (s - 1u);
    const uint rem = mant & ((1u << s) - 1u);
    uint q = mant >> s;
    if (rem > half_point || (rem == half_point && (q & 1u))) q += 1u;
    return sign | q;
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
// per product in k order, a few k steps per loop iteration: every loop
// iteration counts against llvmpipe's limit (see UNROLL_ALWAYS), while every
// step in the loop's body costs rusticl build time (unrolled whole, a kernel
// built 2-3 times slower; 4 steps instead of 2 in the 16-bit kernels, 2x
// slower: docs/perf.md, "Test time"). 16-bit products take 8 iterations of 2
// steps, TF32 ones 2 of 4: no more than the 9 iterations of an emulated
// 3xTF32 instruction below, on which the llvmpipe budget
// (src/mma_backends.c) is measured.
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
#if FLASHCL_DTYPE == 0
    for (int kk = 0; kk < MMA_K; kk += 4) {
        EMULATED_STEP(kk) EMULATED_STEP(kk + 1) EMULATED_STEP(kk + 2) EMULATED_STEP(kk + 3)
    }
#else
    for (int kk = 0; kk < MMA_K; kk += 2) {
        EMULATED_STEP(kk) EMULATED_STEP(kk + 1)
    }
#endif
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
// exchange through local memory: a third of the barriers of three emulated
// instructions, the same products in the same order. The three products are
// one rolled loop, not three inlined copies: llvmpipe's build time grows
// much faster than the code, and the copies made the emulated 3xTF32 kernels
// build 3x slower on rusticl (docs/perf.md, "Test time").
void mma3_emulated(float4 *c, const uint *a, const uint *b, __local uint *scratch, int lane) {
    const int g = lane >> 2, t = lane & 3;
    __local uint *a_big = scratch, *a_small = scratch + 128, *b_big = scratch + 256, *b_small = scratch + 320;
    store_a(a_big, g, t, a[0], a[1], a[2], a[3]);
    store_a(a_small, g, t, a[4], a[5], a[6], a[7]);
    store_b(b_big, g, t, b[0], b[1]);
    store_b(b_small, g, t, b[2], b[3]);
    barrier(CLK_LOCAL_MEM_FENCE);
    float4 acc = *c;
    UNROLL
    for (int part = 0; part < 3; ++part) {
        __local const uint *pa = part == 0 ? a_small : a_big, *pb = part == 1 ? b_small : b_big;
        acc = emulated_product(acc, pa, pb, g, t);
    }
    *c = acc;
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

// The three 3xTF32 products of c += a b (float storage; mma_operands.cl
// chooses where they go).
#if FLASHCL_DTYPE == 0
#define MMA_CHAINED(c, a, b) mma3_emulated(&(c), a, b, warp_scratch, lane);
#endif
