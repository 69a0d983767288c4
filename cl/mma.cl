// mma.cl: the interface of the matrix-unit (tensor-core) machinery the
// kernels *_mma.cl share. The host places, between common.cl and the kernel
// file: this file (fragment layouts as PTX's mma.sync defines them, shared
// sizes), then one backend file that implements the instructions, then
// mma_operands.cl (operand preparation, the 3xTF32 split, local tiles).
//
// A backend file (mma_nvidia.cl: inline PTX; mma_emulated.cl: local memory
// and barriers, for testing on any device) defines, for the layouts below:
//   MMA(c, a0, a1, a2, a3, b0, b1)  c += A B, one m16n8k16 (16-bit) or
//                   m16n8k8 (tf32) instruction on fragment registers
//   MMA_CHAINED(c, a, b)  (float storage) the three 3xTF32 products into c
//   QUAD_XOR(x, mask)  x of the lane (lane ^ mask) within its quad
//   pack2(lo, hi)   two floats rounded to the storage type, packed
//   EXP2(x)         2^x as the softmax needs it
//   COPY16_ASYNC(dst, src, valid), COPY_COMMIT(), COPY_WAIT(n)
//                   16-byte copies global -> local (rows past the end: 0)
//   V_FRAGMENTS(b, v_words, key0, j)  B operands of P V from a V tile
//   UNROLL          the pragma for loops around matrix instructions
//   MMA_WARPS_MAY_SKIP  1 if a warp may skip a block's instructions (0 when
//                   they hold work-group barriers, as emulated ones do)
//   MMA_BACKEND_STATE(WARPS), MMA_BACKEND_EXCHANGE  declarations each kernel
//                   places at its top (the emulation's local scratch)
// The kernel files name no backend: everything that differs is here.
//
// Macros taken (host passes them with -D):
//   HEAD_DIM   head dimension, a multiple of 16, at most 128
//   FLASHCL_MMA_PTX  1 with mma_nvidia.cl, 0 with mma_emulated.cl
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
