// mma_nvidia.cl: the matrix-unit backend for NVIDIA GPUs of compute
// capability 8.0 or later (host table: "nvidia-mma-sync", built with
// FLASHCL_MMA_PTX=1): mma.sync, shfl.sync, cp.async and ldmatrix as inline
// PTX. Implements the interface of mma.cl.
#define UNROLL _Pragma("unroll")
// The instructions are per warp: a warp whose rows have nothing to do in a
// block may skip it.
#define MMA_WARPS_MAY_SKIP 1
// No per-kernel state: the instructions work on registers.
#define MMA_BACKEND_STATE(WARPS_)
#define MMA_BACKEND_EXCHANGE

// ---- the matrix instruction, the quad shuffle, packing two floats ----
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

// The three 3xTF32 products of c += a b (float storage; mma_operands.cl
// chooses where they go).
#if FLASHCL_DTYPE == 0
#define MMA_CHAINED(c, a, b)                                               \
    {                                                                      \
        MMA(c, a[4], a[5], a[6], a[7], b[0], b[1]);                        \
        MMA(c, a[0], a[1], a[2], a[3], b[2], b[3]);                        \
        MMA(c, a[0], a[1], a[2], a[3], b[0], b[1]);                        \
    }
#endif
