// wgmma.cl: Hopper's warpgroup matrix instructions (wgmma, sm_90a) as the
// kernels *_wgmma.cl use them, after mma.cl, mma_nvidia.cl and
// mma_operands.cl (pack2, QUAD_XOR, cp.async, LOAD_WORD, STORE_PAIR). Only
// NVIDIA's compiler for compute capability 9.0 builds it, and only through
// the second compile step (src/program_sm90a.c, docs/nvidia.md section 4):
// every sm_90a instruction is written as the marker comment
// "// FLASHCL_SM90A <instruction>;" inside its asm statement, with its
// operands bound, so the sm_90 build allocates their registers and the
// rewrite turns the comment into the instruction.
//
// Tiles in local memory are 16-bit values in "core matrices" of 8 rows x 16
// bytes (8 values), each 128 contiguous bytes, the layout wgmma reads
// without swizzling (PTX ISA, "matrix descriptor"; CUTLASS calls it
// INTERLEAVE). A tile of R rows x C values (R a multiple of 8, C of 8)
// stores core matrix (row group r / 8, column chunk c / 8) at byte
//     ((r / 8) * (C / 8) + c / 8) * 128
// and row r % 8 of it 16 bytes apart, so each 8-row group is one run of
// C * 16 bytes: column chunks are 128 bytes apart, row groups C * 16.
// The same tile serves both operand orders:
//   K-major (rows = M or N, columns = the k axis; Q and K of S = Q K^T):
//     leading byte offset (between core matrices along k) 128, stride byte
//     offset (between 8-row groups along M/N) C * 16;
//   MN-major (rows = the k axis, columns = N; V of O += P V, which wgmma
//     reads with its transpose bit): leading byte offset (between 8-row
//     groups along k) C * 16, stride byte offset (between 8-column groups
//     along N) 128.
// A 16-byte chunk i of the tile in this order (i = ((r / 8) * (C / 8) + c / 8)
// * 8 + r % 8) lies at byte 16 i: work-items that copy consecutive chunks
// write 512 contiguous bytes per warp (no bank conflict) and read 4 chunks
// of 8 rows each from global memory (whole 32-byte sectors).

#if FLASHCL_DTYPE == 1
#define WG_TYPE "f16"
#elif FLASHCL_DTYPE == 2
#define WG_TYPE "bf16"
#else
#error "the wgmma kernels take 16-bit storage (FLASHCL_DTYPE 1 or 2)"
#endif

// Byte offset of chunk (r, chunk c) (c counts 8-value chunks) in a tile
// whose rows hold COLS values.
#define WG_CHUNK_OFFSET(r, c, COLS) ((((r) >> 3) * ((COLS) / 8) + (c)) * 128 + ((r) & 7) * 16)

// A shared-memory matrix descriptor: start address, leading and stride
// byte offsets (all in 16-byte units, 14 bits each), no swizzle (bits 62-63
// zero), base offset 0.
inline ulong wg_descriptor(uint address, uint leading, uint stride) {
    return (ulong)((address & 0x3FFFFu) >> 4) | ((ulong)((leading >> 4) & 0x3FFFu) << 16) |
           ((ulong)((stride >> 4) & 0x3FFFu) << 32);
}

// Copies rows [row0, row0 + ROWS) x COLS values of a row-major tensor
// (row stride stride_s elements from base) into a tile laid out as above,
// with cp.async (wait with COPY_WAIT, then fence.proxy.async and a
// barrier); rows at or past `rows` are zeros. Shared by `count` work-items
// numbered `id`; WG_FETCH_TILE by the work-group (lid, WG_SIZE).
#define WG_FETCH_TILE_BY(tile, src, base, stride_s, row0, rows, ROWS, COLS, id, count)                         \
    for (int e_ = (id); e_ < (ROWS) * ((COLS) / 8); e_ += (count)) {                                          \
        const int low_ = e_ & 7, rest_ = e_ >> 3;                                                             \
        const int group_ = rest_ / ((COLS) / 8), c_ = rest_ - group_ * ((COLS) / 8);                          \
        const int r_ = group_ * 8 + low_;                                                                     \
        const bool valid_ = (row0) + r_ < (rows);                                                             \
        __global const uint4 *from_ = (__global const uint4 *)((src) + (base) +                               \
                                                               (valid_ ? (ulong)((row0) + r_) * (stride_s) + c_ * 8 : 0)); \
        COPY16_ASYNC((__local uchar *)(tile) + 16 * e_, from_, valid_);                                       \
    }
#define WG_FETCH_TILE(tile, src, base, stride_s, row0, rows, ROWS, COLS)                                      \
    WG_FETCH_TILE_BY(tile, src, base, stride_s, row0, rows, ROWS, COLS, lid, WG_SIZE)

// Local-memory stores (cp.async's included) become visible to wgmma, which
// reads through the async proxy, only after this fence by the storing
// work-item (then a barrier for the others' stores).
#define WG_FENCE_PROXY() asm volatile("fence.proxy.async.shared::cta;" ::: "memory")

// Before the first wgmma that reads registers written since the last one.
#define WGMMA_FENCE() asm volatile("// FLASHCL_SM90A wgmma.fence.sync.aligned;" ::: "memory")
#define WGMMA_COMMIT() asm volatile("// FLASHCL_SM90A wgmma.commit_group.sync.aligned;" ::: "memory")

// Accumulator operand lists: n / 2 floats (16 at n = 32, 32 at 64, 48 at 96, 64 at 128).
#define WG_ACC8(x, i)                                                                                          \
    "+f"(x[(i)]), "+f"(x[(i) + 1]), "+f"(x[(i) + 2]), "+f"(x[(i) + 3]), "+f"(x[(i) + 4]), "+f"(x[(i) + 5]),    \
        "+f"(x[(i) + 6]), "+f"(x[(i) + 7])
#define WG_ACC_32(x) WG_ACC8(x, 0), WG_ACC8(x, 8)
#define WG_ACC_64(x) WG_ACC_32(x), WG_ACC8(x, 16), WG_ACC8(x, 24)
#define WG_ACC_96(x) WG_ACC_64(x), WG_ACC8(x, 32), WG_ACC8(x, 40)
#define WG_ACC_128(x) WG_ACC_96(x), WG_ACC8(x, 48), WG_ACC8(x, 56)
#define WG_D16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define WG_D48 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}"
#define WG_D32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define WG_D64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

// Waits until every committed wgmma of this work-item's warpgroup is done;
// the accumulators are operands so that nothing reads them earlier.
#define WGMMA_WAIT_32(x) asm volatile("// FLASHCL_SM90A wgmma.wait_group.sync.aligned 0;" : WG_ACC_32(x)::"memory")
#define WGMMA_WAIT_64(x) asm volatile("// FLASHCL_SM90A wgmma.wait_group.sync.aligned 0;" : WG_ACC_64(x)::"memory")
#define WGMMA_WAIT_96(x) asm volatile("// FLASHCL_SM90A wgmma.wait_group.sync.aligned 0;" : WG_ACC_96(x)::"memory")
#define WGMMA_WAIT_128(x) asm volatile("// FLASHCL_SM90A wgmma.wait_group.sync.aligned 0;" : WG_ACC_128(x)::"memory")
#define WGMMA_WAIT(N, x) WGMMA_WAIT_(N, x)
#define WGMMA_WAIT_(N, x) WGMMA_WAIT_##N(x)
// Waits until at most the last committed group is still running (S is done
// while O += P V goes on): S's accumulators are its operands.
#define WGMMA_WAIT1_32(x) asm volatile("// FLASHCL_SM90A wgmma.wait_group.sync.aligned 1;" : WG_ACC_32(x)::"memory")
#define WGMMA_WAIT1_64(x) asm volatile("// FLASHCL_SM90A wgmma.wait_group.sync.aligned 1;" : WG_ACC_64(x)::"memory")
#define WGMMA_WAIT1_96(x) asm volatile("// FLASHCL_SM90A wgmma.wait_group.sync.aligned 1;" : WG_ACC_96(x)::"memory")
#define WGMMA_WAIT1_128(x) asm volatile("// FLASHCL_SM90A wgmma.wait_group.sync.aligned 1;" : WG_ACC_128(x)::"memory")
#define WGMMA_WAIT1(N, x) WGMMA_WAIT1_(N, x)
#define WGMMA_WAIT1_(N, x) WGMMA_WAIT1_##N(x)
// The A registers (P, uint[N / 16][4]) of an O += P V in flight are read
// by the matrix unit until its wait: they are operands of that wait too, so
// that the compiler keeps them (and puts the next block's P elsewhere).
#define WG_P4(p, i) "+r"(p[(i)][0]), "+r"(p[(i)][1]), "+r"(p[(i)][2]), "+r"(p[(i)][3])
#define WG_P_32(p) WG_P4(p, 0), WG_P4(p, 1)
#define WG_P_64(p) WG_P_32(p), WG_P4(p, 2), WG_P4(p, 3)
#define WG_P_96(p) WG_P_64(p), WG_P4(p, 4), WG_P4(p, 5)
#define WG_P_128(p) WG_P_96(p), WG_P4(p, 6), WG_P4(p, 7)
#define WGMMA_WAIT_PV(ND, x, NP, p) WGMMA_WAIT_PV_(ND, x, NP, p)
#define WGMMA_WAIT_PV_(ND, x, NP, p)                                                                           \
    asm volatile("// FLASHCL_SM90A wgmma.wait_group.sync.aligned 0;" : WG_ACC_##ND(x), WG_P_##NP(p)::"memory")

// d (64 x N, float) = A B + (scale_d ? d : 0), k = 16: A (64 x 16) and B
// (16 x N, N = 32, 64, 96 or 128) from local memory by descriptor, both K-major.
#define WGMMA_SS_32(d, a_desc, b_desc, scale_d)                                                                \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"                                                \
                 "// FLASHCL_SM90A wgmma.mma_async.sync.aligned.m64n32k16.f32." WG_TYPE "." WG_TYPE " " WG_D16  \
                 ", %16, %17, p, 1, 1, 0, 0;\n}"                                                                \
                 : WG_ACC_32(d)                                                                                \
                 : "l"(a_desc), "l"(b_desc), "r"(scale_d))
#define WGMMA_SS_64(d, a_desc, b_desc, scale_d)                                                                \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                \
                 "// FLASHCL_SM90A wgmma.mma_async.sync.aligned.m64n64k16.f32." WG_TYPE "." WG_TYPE " " WG_D32  \
                 ", %32, %33, p, 1, 1, 0, 0;\n}"                                                                \
                 : WG_ACC_64(d)                                                                                \
                 : "l"(a_desc), "l"(b_desc), "r"(scale_d))
#define WGMMA_SS_96(d, a_desc, b_desc, scale_d)                                                                \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %50, 0;\n"                                                \
                 "// FLASHCL_SM90A wgmma.mma_async.sync.aligned.m64n96k16.f32." WG_TYPE "." WG_TYPE " " WG_D48  \
                 ", %48, %49, p, 1, 1, 0, 0;\n}"                                                                \
                 : WG_ACC_96(d)                                                                                \
                 : "l"(a_desc), "l"(b_desc), "r"(scale_d))
#define WGMMA_SS_128(d, a_desc, b_desc, scale_d)                                                               \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"                                                \
                 "// FLASHCL_SM90A wgmma.mma_async.sync.aligned.m64n128k16.f32." WG_TYPE "." WG_TYPE " " WG_D64 \
                 ", %64, %65, p, 1, 1, 0, 0;\n}"                                                                \
                 : WG_ACC_128(d)                                                                               \
                 : "l"(a_desc), "l"(b_desc), "r"(scale_d))
#define WGMMA_SS(N, d, a_desc, b_desc, scale_d) WGMMA_SS_(N, d, a_desc, b_desc, scale_d)
#define WGMMA_SS_(N, d, a_desc, b_desc, scale_d) WGMMA_SS_##N(d, a_desc, b_desc, scale_d)

// d (64 x N, float) += A B, k = 16 (the scale-d predicate set: accumulate): A from registers (a[0..3], mma.sync's
// m16n8k16 A fragment of this warp's 16 rows), B (16 x N) from local memory
// by descriptor, MN-major (the transpose bit).
#define WGMMA_RS_64(d, a, b_desc)                                                                              \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"                                                \
                 "// FLASHCL_SM90A wgmma.mma_async.sync.aligned.m64n64k16.f32." WG_TYPE "." WG_TYPE " " WG_D32  \
                 ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}"                                                   \
                 : WG_ACC_64(d)                                                                                \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1))
#define WGMMA_RS_128(d, a, b_desc)                                                                             \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                                \
                 "// FLASHCL_SM90A wgmma.mma_async.sync.aligned.m64n128k16.f32." WG_TYPE "." WG_TYPE " " WG_D64 \
                 ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}"                                                   \
                 : WG_ACC_128(d)                                                                               \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(1))
#define WGMMA_RS(N, d, a, b_desc) WGMMA_RS_(N, d, a, b_desc)
#define WGMMA_RS_(N, d, a, b_desc) WGMMA_RS_##N(d, a, b_desc)
