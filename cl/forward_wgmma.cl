// forward_wgmma.cl: the FlashAttention forward pass on Hopper's warpgroup
// matrix instructions (wgmma, sm_90a; issue 22), for 16-bit storage (half,
// bfloat16) and head dims 64 and 128, dense, causal or not. After mma.cl,
// mma_nvidia.cl, mma_operands.cl and wgmma.cl; built only through the
// second compile step (src/program_sm90a.c), so only on an H100-class GPU.
//
// Macros taken (host passes them with -D):
//   HEAD_DIM    64 or 128
//   BLOCK_N     keys per step of the inner loop: 32, 64, 96 or 128 (wgmma's
//               n of S)
//   WARPGROUPS  warpgroups (128 work-items each) per work-group; each owns
//               64 query rows, so BLOCK_M = 64 * WARPGROUPS
//   WG_PIPELINE 1: block j's S and block j - 1's O += P V in flight together
//               (see there); 0: one block at a time
//   WG_WS       1: warp-specialized (an experiment, FLASHCL_WGMMA_WS in
//               -DFLASHCL_MMA_EXPERIMENT builds; docs/warp_specialization_plan.md):
//               one more warpgroup, the producer, copies the K and V blocks
//               into their stages and signals them on mbarriers; the
//               WARPGROUPS consumers wait there instead of at work-group
//               barriers, and free each stage on another mbarrier once
//               their wgmma reading it is done. Not with a staged bias.
//
// Layout: a warpgroup's 64 rows are wgmma's m. Its warp w holds rows
// 16 w .. 16 w + 15 and lane (g = lane / 4, t = lane % 4) rows g ("top")
// and g + 8 ("bottom"), as in mma.sync's m16n8 accumulators: element
// 4 i + {0, 1} of an accumulator array is the top row's columns 8 i + 2t,
// 8 i + 2t + 1, elements 4 i + {2, 3} the bottom row's. So S (BLOCK_N / 2
// floats) and O (HEAD_DIM / 2 floats) are held as forward_mma.cl holds them,
// and S's 16-key steps, rounded to 16 bits, are exactly the A operand
// (registers) of O += P V: P never goes through local memory.
// Q (the work-group's BLOCK_M rows) is copied once to local memory and read
// by descriptor; K and V blocks go to two stages of local memory with
// cp.async: block j + 1 is in flight while block j is computed. wgmma reads
// Q and K K-major (rows of dims) and V with its transpose bit (keys x dims
// as stored), all three in wgmma.cl's core-matrix layout.
// The online softmax, the masks (bottom-right causal) and the NaN/inf rules
// are forward_mma.cl's: row maxima in log2 units, a row with no visible key
// written as 0 with LSE -inf.
// The score modifiers (FLASHCL_SOFTCAP, FLASHCL_ALIBI) and the additive bias
// (FLASHCL_BIAS) are compiled in only when the host asks (cl/common.cl's
// defaults leave the dense kernel as it was) and act where forward_mma.cl
// applies them: on each scaled score in the softmax, soft-capping first, then
// the bias and ALiBi added, then the masks (a -inf bias hides its pair). With
// FLASHCL_BIAS_STAGED (the host checked that the bias rows start 16-byte
// aligned) the block's bias tile (BLOCK_M x BLOCK_N) travels with the K block
// in its cp.async group into two stages of local memory, so the softmax reads
// it there instead of waiting on global loads; keys from the last whole
// 16-byte chunk before seqlen_k on are read from global memory. WG_BIAS_DIRECT=1
// (a build option for timing) reads every pair from global memory instead.

#ifndef BLOCK_N
#define BLOCK_N 64
#endif
#ifndef WARPGROUPS
#define WARPGROUPS 1
#endif
#ifndef WG_PIPELINE
#define WG_PIPELINE 0
#endif
#if (BLOCK_N != 32 && BLOCK_N != 64 && BLOCK_N != 96 && BLOCK_N != 128) || (HEAD_DIM != 64 && HEAD_DIM != 128)
#error "BLOCK_N must be 32, 64, 96 or 128 and HEAD_DIM 64 or 128"
#endif
#ifndef WG_BIAS_DIRECT
#define WG_BIAS_DIRECT 0
#endif
#define WG_BIAS_STAGED (FLASHCL_BIAS_STAGED && !WG_BIAS_DIRECT)
#define WG_SCORE_TERMS (FLASHCL_SCORE_MODS || FLASHCL_BIAS)
#define BLOCK_M (64 * WARPGROUPS)
#define WG_SIZE (128 * WARPGROUPS)
#ifndef WG_WS
#define WG_WS 0
#endif
#if WG_WS
#if WG_BIAS_STAGED
#error "WG_WS does not stage a bias"
#endif
// The consumers and the producer warpgroup.
#define WG_ITEMS (WG_SIZE + 128)
// mbarriers (sm_90 PTX; 8-byte objects in local memory, addressed as SHARED_ADDRESS gives them).
#define MBAR_INIT(a, n) asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(a), "r"(n) : "memory")
#define MBAR_INIT_FENCE() asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory")
#define MBAR_ARRIVE(a) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(a) : "memory")
// Arrives once this work-item's earlier cp.async copies have landed (count set for it at init: .noinc).
#define CPASYNC_ARRIVE_NOINC(a) asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(a) : "memory")
#define COPY_WAIT_ALL() asm volatile("cp.async.wait_all;" ::: "memory")
// Waits until the phase of the given parity has completed (try_wait may give up after a time: loop).
inline void mbar_wait(uint address, uint parity) {
    uint done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3;\n"
                     "selp.b32 %0, 1, 0, p;\n}"
                     : "=r"(done)
                     : "r"(address), "r"(parity), "r"(0x989680u)
                     : "memory");
    } while (!done);
}
// A value the compiler can see is the same across the warp (lane 0's), so the role branch is not divergent.
inline uint warp_uniform(uint x) {
    uint y;
    asm volatile("shfl.sync.idx.b32 %0, %1, 0, 0x1f, 0xffffffff;" : "=r"(y) : "r"(x));
    return y;
}
// WG_WS_REGS: the producer gives registers back (setmaxnreg, sm_90a) and the
// consumers take them: FLASHCL_ENTRY_MAXNREG per work-item at entry (the
// host adds that cap to the PTX, src/ptx_entry.h), the producer 40 (it only
// copies), the consumers an equal share of the rest in steps of 8, at most
// 240 (FlashAttention-3's split for cp.async producers: 40 / 232 at 168).
#ifndef WG_WS_REGS
#define WG_WS_REGS 0
#endif
#if WG_WS_REGS
#ifndef FLASHCL_ENTRY_MAXNREG
#error "WG_WS_REGS needs FLASHCL_ENTRY_MAXNREG"
#endif
#define WG_PRODUCER_REGS 40
#define WG_CONSUMER_SHARE (((FLASHCL_ENTRY_MAXNREG * (WARPGROUPS + 1) - WG_PRODUCER_REGS) / WARPGROUPS) / 8 * 8)
#define WG_CONSUMER_REGS (WG_CONSUMER_SHARE > 240 ? 240 : WG_CONSUMER_SHARE)
#if WG_CONSUMER_REGS < FLASHCL_ENTRY_MAXNREG
#error "WG_WS_REGS: the consumers' share would not exceed the entry's registers"
#endif
#define WG_REGS_PRODUCER()                                                                                      \
    asm volatile("// FLASHCL_SM90A setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(WG_PRODUCER_REGS) : "memory")
#define WG_REGS_CONSUMER()                                                                                      \
    asm volatile("// FLASHCL_SM90A setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(WG_CONSUMER_REGS) : "memory")
#else
#define WG_REGS_PRODUCER()
#define WG_REGS_CONSUMER()
#endif
// WG_WS_PINGPONG: FlashAttention-3's schedule of two consumer warpgroups
// (one block at a time each): a warpgroup issues O += P V(j) and S(j + 1)
// while it holds a token, then hands it over and does its softmax while the
// other issues its products. Named barriers 1 and 2 (0 is the work-group's)
// are the tokens, 256 work-items each (128 waiting, 128 arriving).
#ifndef WG_WS_PINGPONG
#define WG_WS_PINGPONG 0
#endif
#if WG_WS_PINGPONG && (WARPGROUPS != 2 || WG_PIPELINE)
#error "WG_WS_PINGPONG takes two consumer warpgroups, one block at a time"
#endif
#define NAMED_SYNC(id) asm volatile("bar.sync %0, 256;" ::"r"(id) : "memory")
#define NAMED_ARRIVE(id) asm volatile("bar.arrive %0, 256;" ::"r"(id) : "memory")
#else
#define WG_ITEMS WG_SIZE
#endif
#define S_REGS (BLOCK_N / 2)
#define O_REGS (HEAD_DIM / 2)
#define TILE_BYTES(rows) ((rows) * HEAD_DIM * 2)
// One 8-row group of a tile (wgmma.cl): the K-major stride byte offset and
// the MN-major leading one.
#define GROUP_BYTES (HEAD_DIM * 16)

__kernel __attribute__((reqd_work_group_size(WG_ITEMS, 1, 1))) void flashcl_forward_wgmma(
    __global const storage_t *q, ulong q_offset, ulong q_stride_b, ulong q_stride_h, ulong q_stride_s,
    __global const storage_t *k, ulong k_offset, ulong k_stride_b, ulong k_stride_h, ulong k_stride_s,
    __global const storage_t *v, ulong v_offset, ulong v_stride_b, ulong v_stride_h, ulong v_stride_s,
    __global storage_t *o, ulong o_offset, ulong o_stride_b, ulong o_stride_h, ulong o_stride_s,
    __global float *lse, ulong lse_offset, ulong lse_stride_b, ulong lse_stride_h, ulong lse_stride_s,
    int write_lse, int heads_q, int group_size, int seqlen_q, int seqlen_k, float scale,
    int causal FLASHCL_SCORE_MOD_PARAMS FLASHCL_BIAS_PARAMS) {
    // Descriptors address 16-byte units and read whole core matrices: the
    // tiles are aligned (at 2-byte alignment wgmma read wrong values).
    __local uchar q_tile[TILE_BYTES(BLOCK_M)] __attribute__((aligned(128)));
    __local uchar k_tiles[2][TILE_BYTES(BLOCK_N)] __attribute__((aligned(128)));
    __local uchar v_tiles[2][TILE_BYTES(BLOCK_N)] __attribute__((aligned(128)));
#if WG_BIAS_STAGED
    // Rows padded by one chunk: the lanes' reads (rows g, words t) hit distinct banks with 16-bit elements.
    __local uint4 bias_tiles[2][BLOCK_M * BIAS_TILE_ROW(BLOCK_N)];
#endif

    const int lid = (int)get_local_id(0);
    const int warpgroup = lid / 128, warp = (lid % 128) / 32, lane = lid % 32;
    const int g = lane >> 2, t = lane & 3;
    // Causal groups near the end of the sequence have the most keys: they
    // start first so the short ones fill the tail.
    const int q0 = ((int)get_num_groups(0) - 1 - (int)get_group_id(0)) * BLOCK_M;
    const int bh = (int)get_group_id(1);
    const int b = bh / heads_q;
    const int h = bh - b * heads_q;
    const int hk = h / group_size;
    const ulong q_base = q_offset + (ulong)b * q_stride_b + (ulong)h * q_stride_h;
    const ulong k_base = k_offset + (ulong)b * k_stride_b + (ulong)hk * k_stride_h;
    const ulong v_base = v_offset + (ulong)b * v_stride_b + (ulong)hk * v_stride_h;
    const ulong o_base = o_offset + (ulong)b * o_stride_b + (ulong)h * o_stride_h;
    const int row_top = q0 + warpgroup * 64 + warp * 16 + g, row_bottom = row_top + 8;

    float s[S_REGS], acc[O_REGS];
    UNROLL_ALWAYS
    for (int i = 0; i < S_REGS; ++i) s[i] = 0.0f;
    UNROLL_ALWAYS
    for (int i = 0; i < O_REGS; ++i) acc[i] = 0.0f;
    // Running maxima (log2 units) and this lane's part of the row sums.
    float max_top = -INFINITY, max_bottom = -INFINITY, sum_top = 0.0f, sum_bottom = 0.0f;
#if WG_SCORE_TERMS
    // The modifiers and the bias act on scaled scores: each score is scaled
    // where it is modified, and the exponents take log2(e) alone.
    const float scale2 = M_LOG2E_F;
#if FLASHCL_ALIBI
    const float alibi_slope = FLASHCL_ALIBI_SLOPE(b, h);
#endif
#if FLASHCL_BIAS
    const ulong bias_base = FLASHCL_BIAS_BASE(b, h);
#endif
#if WG_BIAS_STAGED
    const int bias_staged_end = BIAS_STAGED_END(seqlen_k);
#endif
#else
    const float scale2 = scale * M_LOG2E_F;
#endif

    // Bottom-right causal alignment: row i sees keys j <= i + diagonal.
    const int diagonal = seqlen_k - seqlen_q;
    int key_end = seqlen_k;
    if (causal) key_end = clamp(q0 + BLOCK_M + diagonal, 0, seqlen_k);
    const int blocks = (key_end + BLOCK_N - 1) / BLOCK_N;

    // Descriptors: this warpgroup's 64 rows of Q, and the stages' K and V.
    const ulong q_desc = wg_descriptor(SHARED_ADDRESS(q_tile + warpgroup * TILE_BYTES(64)), 128, GROUP_BYTES);
    const ulong k_desc0 = wg_descriptor(SHARED_ADDRESS(k_tiles[0]), 128, GROUP_BYTES);
    const ulong v_desc0 = wg_descriptor(SHARED_ADDRESS(v_tiles[0]), GROUP_BYTES, 128);
    // The second stage's descriptors differ by its distance in 16-byte units.
    const ulong stage_units = (ulong)(SHARED_ADDRESS(k_tiles[1]) - SHARED_ADDRESS(k_tiles[0])) >> 4;
    const ulong v_stage_units = (ulong)(SHARED_ADDRESS(v_tiles[1]) - SHARED_ADDRESS(v_tiles[0])) >> 4;

    // Mask (only blocks reaching past seqlen_k or the diagonal: a uniform
    // test), then the online softmax of the two rows of S (block at k0):
    // the new maxima, P as the A operand of O += P V in p_out, the sums,
    // and alpha_top/alpha_bottom, by which O is to be rescaled.
    // A visible key lifts the block maximum (raw scores) to at least
    // -FLT_MAX even when its score is -inf or NaN (fmax drops NaN), so the
    // maximum stays -inf only for a row that sees no key: the one case
    // written as empty. Every key of an unmasked block is visible.
    // A row with no visible key yet keeps -inf, and its "safe" maximum 0
    // makes alpha and P exactly 0 instead of NaN. P is rounded to the
    // storage type as the A operand of each 16-key step: words (top, keys
    // 2t..), (bottom, 2t..), (top, 8 + 2t..), (bottom, 8 + 2t..) are S's
    // elements 8 kk + 0..7 in pairs. One rounding, of the difference
    // (forward_mma.cl says why).
    // The modifiers and the bias of S's 8-key step n of the block at k0_
    // (lane (g, t): keys col, col + 1 of rows row_top and row_bottom), in
    // cl/common.cl's order; declares the pair's bias values, which the masks
    // then test for -inf.
#if FLASHCL_BIAS && WG_BIAS_STAGED
#define WG_BIAS_READ(k0_, n, col_)                                                                               \
    float2 bias_top_, bias_bottom_;                                                                              \
    if ((col_) < bias_staged_end) {                                                                              \
        __local const uint4 *tile_ = bias_tiles[((k0_) / BLOCK_N) & 1];                                          \
        bias_top_ = bias_pair_local(tile_ + (row_top - q0) * BIAS_TILE_ROW(BLOCK_N), (n) * 8 + 2 * t);           \
        bias_bottom_ = bias_pair_local(tile_ + (row_bottom - q0) * BIAS_TILE_ROW(BLOCK_N), (n) * 8 + 2 * t);     \
    } else {                                                                                                     \
        bias_top_ = (float2)(FLASHCL_BIAS_VALUE(bias_base, row_top, (col_)),                                     \
                             FLASHCL_BIAS_VALUE(bias_base, row_top, (col_) + 1));                                \
        bias_bottom_ = (float2)(FLASHCL_BIAS_VALUE(bias_base, row_bottom, (col_)),                               \
                                FLASHCL_BIAS_VALUE(bias_base, row_bottom, (col_) + 1));                          \
    }
#elif FLASHCL_BIAS
#define WG_BIAS_READ(k0_, n, col_)                                                                               \
    const float2 bias_top_ = (float2)(FLASHCL_BIAS_VALUE(bias_base, row_top, (col_)),                            \
                                      FLASHCL_BIAS_VALUE(bias_base, row_top, (col_) + 1));                       \
    const float2 bias_bottom_ = (float2)(FLASHCL_BIAS_VALUE(bias_base, row_bottom, (col_)),                      \
                                         FLASHCL_BIAS_VALUE(bias_base, row_bottom, (col_) + 1));
#endif
#if FLASHCL_BIAS
#define WG_BIAS_TERM(value) +(value)
#define WG_BIAS_HIDES(value) || (value) == -INFINITY
#else
#define WG_BIAS_READ(k0_, n, col_)
#define WG_BIAS_TERM(value)
#define WG_BIAS_HIDES(value)
#endif
#if WG_SCORE_TERMS
#define WG_MODIFY(k0_, n)                                                                                        \
    const int mod_col_ = (k0_) + (n) * 8 + 2 * t;                                                                \
    WG_BIAS_READ(k0_, n, mod_col_)                                                                               \
    {                                                                                                            \
        float grad_;                                                                                             \
        const int col0_ = (k0_) + 2 * t; /* the lane's first key of the block: ALiBi's steps from it */         \
        s[4 * (n)] = FLASHCL_SCORE_MOD_STEP(s[4 * (n)] * scale, grad_, alibi_slope, row_top + diagonal, col0_,  \
                                            (n) * 8) WG_BIAS_TERM(bias_top_.x);                                  \
        s[4 * (n) + 1] = FLASHCL_SCORE_MOD_STEP(s[4 * (n) + 1] * scale, grad_, alibi_slope, row_top + diagonal,  \
                                                col0_, (n) * 8 + 1) WG_BIAS_TERM(bias_top_.y);                   \
        s[4 * (n) + 2] = FLASHCL_SCORE_MOD_STEP(s[4 * (n) + 2] * scale, grad_, alibi_slope,                      \
                                                row_bottom + diagonal, col0_, (n) * 8) WG_BIAS_TERM(bias_bottom_.x); \
        s[4 * (n) + 3] = FLASHCL_SCORE_MOD_STEP(s[4 * (n) + 3] * scale, grad_, alibi_slope,                      \
                                                row_bottom + diagonal, col0_, (n) * 8 + 1)                       \
            WG_BIAS_TERM(bias_bottom_.y);                                                                        \
        (void)col0_;                                                                                             \
        (void)grad_;                                                                                             \
    }
#else
#define WG_MODIFY(k0_, n)
#endif
    // The hidden pairs of S's 8-key step n of the block at k0_ set to -inf,
    // each row's block maximum floored at -FLT_MAX where the step shows it a
    // key. geometric_ 1: the masks (seqlen_k, causal) and a -inf bias; 0:
    // a -inf bias only (a block wholly inside both masks).
#define WG_HIDE_STEP(k0_, n, geometric_)                                                                         \
    do {                                                                                                         \
        const int col = (k0_) + (n) * 8 + 2 * t;                                                                 \
        const bool left_out = (geometric_) && col >= seqlen_k, right_out = (geometric_) && col + 1 >= seqlen_k; \
        const bool hide_tl =                                                                                     \
            left_out || ((geometric_) && causal && col > row_top + diagonal) WG_BIAS_HIDES(bias_top_.x);        \
        const bool hide_tr =                                                                                     \
            right_out || ((geometric_) && causal && col + 1 > row_top + diagonal) WG_BIAS_HIDES(bias_top_.y);   \
        const bool hide_bl =                                                                                     \
            left_out || ((geometric_) && causal && col > row_bottom + diagonal) WG_BIAS_HIDES(bias_bottom_.x);  \
        const bool hide_br =                                                                                     \
            right_out || ((geometric_) && causal && col + 1 > row_bottom + diagonal)                             \
                             WG_BIAS_HIDES(bias_bottom_.y);                                                      \
        if (hide_tl) s[4 * (n)] = -INFINITY;                                                                     \
        if (hide_tr) s[4 * (n) + 1] = -INFINITY;                                                                 \
        if (hide_bl) s[4 * (n) + 2] = -INFINITY;                                                                 \
        if (hide_br) s[4 * (n) + 3] = -INFINITY;                                                                 \
        if (!(hide_tl && hide_tr)) block_top = fmax(block_top, -FLT_MAX);                                        \
        if (!(hide_bl && hide_br)) block_bottom = fmax(block_bottom, -FLT_MAX);                                  \
    } while (0)
#define WG_STEP_MAX(n)                                                                                           \
    do {                                                                                                         \
        block_top = fmax(block_top, fmax(s[4 * (n)], s[4 * (n) + 1]));                                           \
        block_bottom = fmax(block_bottom, fmax(s[4 * (n) + 2], s[4 * (n) + 3]));                                 \
    } while (0)
    // Block maxima of S (block at k0_), hidden pairs set to -inf. A -inf bias
    // may hide any pair, so with a bias every block tests its pairs; but only
    // blocks reaching past seqlen_k or the diagonal (a uniform test) test the
    // masks too: the others take a loop of their own that reads the bias
    // alone (its hides, its floor), a few instructions per score less on the
    // softmax, which bounds these kernels.
#if FLASHCL_BIAS
#define WG_BLOCK_MAX(k0_)                                                                                        \
    float block_top = -INFINITY, block_bottom = -INFINITY;                                                       \
    if (masked_block) {                                                                                          \
        UNROLL_ALWAYS                                                                                            \
        for (int n = 0; n < BLOCK_N / 8; ++n) {                                                                  \
            WG_MODIFY(k0_, n)                                                                                    \
            WG_HIDE_STEP(k0_, n, 1);                                                                             \
            WG_STEP_MAX(n);                                                                                      \
        }                                                                                                        \
    } else {                                                                                                     \
        UNROLL_ALWAYS                                                                                            \
        for (int n = 0; n < BLOCK_N / 8; ++n) {                                                                  \
            WG_MODIFY(k0_, n)                                                                                    \
            WG_HIDE_STEP(k0_, n, 0);                                                                             \
            WG_STEP_MAX(n);                                                                                      \
        }                                                                                                        \
    }
#else
#define WG_BLOCK_MAX(k0_)                                                                                        \
    float block_top = masked_block ? -INFINITY : -FLT_MAX, block_bottom = block_top;                            \
    UNROLL_ALWAYS                                                                                                \
    for (int n = 0; n < BLOCK_N / 8; ++n) {                                                                      \
        WG_MODIFY(k0_, n)                                                                                        \
        if (masked_block) WG_HIDE_STEP(k0_, n, 1);                                                               \
        WG_STEP_MAX(n);                                                                                          \
    }
#endif
#define SOFTMAX(k0_, p_out)                                                                                      \
    do {                                                                                                         \
        const bool masked_block = (k0_) + BLOCK_N > seqlen_k || (causal && (k0_) + BLOCK_N - 1 > q0 + diagonal); \
        WG_BLOCK_MAX(k0_)                                                                                        \
        block_top = fmax(block_top, QUAD_XOR(block_top, 1));                                                     \
        block_top = fmax(block_top, QUAD_XOR(block_top, 2));                                                     \
        block_bottom = fmax(block_bottom, QUAD_XOR(block_bottom, 1));                                            \
        block_bottom = fmax(block_bottom, QUAD_XOR(block_bottom, 2));                                            \
        const float new_top = fmax(max_top, block_max_log2(block_top, scale2));                                  \
        const float new_bottom = fmax(max_bottom, block_max_log2(block_bottom, scale2));                         \
        const float safe_top = new_top == -INFINITY ? 0.0f : new_top;                                            \
        const float safe_bottom = new_bottom == -INFINITY ? 0.0f : new_bottom;                                   \
        alpha_top = EXP2(max_top - safe_top);                                                                    \
        alpha_bottom = EXP2(max_bottom - safe_bottom);                                                           \
        max_top = new_top;                                                                                       \
        max_bottom = new_bottom;                                                                                 \
        float own_top = 0.0f, own_bottom = 0.0f;                                                                 \
        UNROLL_ALWAYS                                                                                            \
        for (int n = 0; n < BLOCK_N / 8; ++n) {                                                                  \
            const float p0 = EXP2(fma(s[4 * n], scale2, -safe_top));                                             \
            const float p1 = EXP2(fma(s[4 * n + 1], scale2, -safe_top));                                         \
            const float p2 = EXP2(fma(s[4 * n + 2], scale2, -safe_bottom));                                      \
            const float p3 = EXP2(fma(s[4 * n + 3], scale2, -safe_bottom));                                      \
            own_top += p0 + p1;                                                                                  \
            own_bottom += p2 + p3;                                                                               \
            p_out[n / 2][(n % 2) * 2] = pack2(p0, p1);                                                           \
            p_out[n / 2][(n % 2) * 2 + 1] = pack2(p2, p3);                                                       \
        }                                                                                                        \
        sum_top = sum_top * alpha_top + own_top;                                                                 \
        sum_bottom = sum_bottom * alpha_bottom + own_bottom;                                                     \
    } while (0)
#define RESCALE_O()                                                                                              \
    do {                                                                                                         \
        UNROLL_ALWAYS                                                                                            \
        for (int i = 0; i < O_REGS; i += 4) {                                                                    \
            acc[i] *= alpha_top;                                                                                 \
            acc[i + 1] *= alpha_top;                                                                             \
            acc[i + 2] *= alpha_bottom;                                                                          \
            acc[i + 3] *= alpha_bottom;                                                                          \
        }                                                                                                        \
    } while (0)
    // P of a block kept for its O += P V, issued beside the next block's S
    // (the pipelined variants).
#define KEEP_P(dst_, src_)                                                                                       \
    do {                                                                                                         \
        UNROLL_ALWAYS                                                                                            \
        for (int i = 0; i < BLOCK_N / 16; ++i) {                                                                 \
            UNROLL_ALWAYS                                                                                        \
            for (int w = 0; w < 4; ++w) (dst_)[i][w] = (src_)[i][w];                                             \
        }                                                                                                        \
    } while (0)
    // S = Q K^T of the K block at descriptor k_desc_ over HEAD_DIM / 16
    // k-steps of 16 dims (two 128-byte core matrices along k: 256 bytes,
    // 16 units); the first overwrites S. Then O += P V over BLOCK_N / 16
    // k-steps of 16 keys (two 8-key groups of V, GROUP_BYTES each).
#define ISSUE_S(k_desc_)                                                                                         \
    do {                                                                                                         \
        UNROLL_ALWAYS                                                                                            \
        for (int d = 0; d < HEAD_DIM / 16; ++d) WGMMA_SS(BLOCK_N, s, q_desc + 16 * d, (k_desc_) + 16 * d, d > 0); \
        WGMMA_COMMIT();                                                                                          \
    } while (0)
#define ISSUE_PV(p_, v_desc_)                                                                                    \
    do {                                                                                                         \
        UNROLL_ALWAYS                                                                                            \
        for (int kk = 0; kk < BLOCK_N / 16; ++kk)                                                                \
            WGMMA_RS(HEAD_DIM, acc, p_[kk], (v_desc_) + kk * (2 * GROUP_BYTES / 16));                            \
        WGMMA_COMMIT();                                                                                          \
    } while (0)
#define K_DESC(block) (k_desc0 + (((block) & 1) ? stage_units : 0))
#define V_DESC(block) (v_desc0 + (((block) & 1) ? v_stage_units : 0))
#define FETCH_K(block)                                                                                           \
    WG_FETCH_TILE(k_tiles[(block) & 1], k, k_base, k_stride_s, (block) * BLOCK_N, seqlen_k, BLOCK_N, HEAD_DIM)
#define FETCH_V(block)                                                                                           \
    WG_FETCH_TILE(v_tiles[(block) & 1], v, v_base, v_stride_s, (block) * BLOCK_N, seqlen_k, BLOCK_N, HEAD_DIM)
    // The staged bias of a block goes with its K block, into the stage of
    // the same parity: the softmax that reads it follows S, which waits for
    // K, and the stage's last reader (the softmax of block - 2) finished
    // before the barrier that precedes the copy. A chunk past seqlen_q, or not
    // wholly before seqlen_k, is zeros (those pairs are read from global
    // memory where they exist).
#if WG_BIAS_STAGED
#define FETCH_BIAS(block)                                                                                        \
    FETCH_BIAS_TILE(bias_tiles[(block) & 1], q0, BLOCK_M, seqlen_q, (block) * BLOCK_N, BLOCK_N, seqlen_k)
#else
#define FETCH_BIAS(block)
#endif
    float alpha_top = 1.0f, alpha_bottom = 1.0f;
    uint pa[BLOCK_N / 16][4];

#if WG_WS
    // Stage st's mbarriers: full_k, full_v (the producer's 128 work-items
    // arrive as their copies land), empty_k, empty_v (every consumer
    // work-item arrives once its wgmma reading the stage is done). Round r
    // of a stage (block j = 2 r + st) is the barrier's phase r: consumers
    // wait for parity r & 1, the producer for the previous round's release,
    // parity (r & 1) ^ 1, which a fresh barrier passes at once.
    __local ulong wg_bars[8] __attribute__((aligned(8)));
#define FULL_K(block) SHARED_ADDRESS(&wg_bars[(block) & 1])
#define FULL_V(block) SHARED_ADDRESS(&wg_bars[2 + ((block) & 1)])
#define EMPTY_K(block) SHARED_ADDRESS(&wg_bars[4 + ((block) & 1)])
#define EMPTY_V(block) SHARED_ADDRESS(&wg_bars[6 + ((block) & 1)])
#define ROUND_PARITY(block) ((uint)((block) >> 1) & 1u)
    // A consumer's wait for a filled stage, then its own proxy fence: the
    // acquire makes the producer's cp.async bytes visible to this work-item,
    // the fence orders them before its wgmma's (async proxy) reads.
#define WAIT_FULL(address, block)                                                                                \
    do {                                                                                                         \
        mbar_wait((address), ROUND_PARITY(block));                                                               \
        WG_FENCE_PROXY();                                                                                        \
    } while (0)
    const uint role = warp_uniform((uint)warpgroup);
    if (lid == 0) {
        for (int i = 0; i < 4; ++i) MBAR_INIT(SHARED_ADDRESS(&wg_bars[i]), 128u);
        for (int i = 4; i < 8; ++i) MBAR_INIT(SHARED_ADDRESS(&wg_bars[i]), (uint)WG_SIZE);
        MBAR_INIT_FENCE();
    }
    if (blocks > 0) {
        WG_FETCH_TILE_BY(q_tile, q, q_base, q_stride_s, q0, seqlen_q, BLOCK_M, HEAD_DIM, lid, WG_ITEMS);
        COPY_COMMIT();
        COPY_WAIT(0);
        WG_FENCE_PROXY();
    }
    // The last work-group barrier: the mbarriers initialised, Q in place.
    barrier(CLK_LOCAL_MEM_FENCE);
    if (role == WARPGROUPS) {
        // The producer: K(j) then V(j), each into its stage once the
        // consumers freed it (block j - 2's), then signalled.
        WG_REGS_PRODUCER();
        const int pid = lid - WG_SIZE;
        for (int j = 0; j < blocks; ++j) {
            mbar_wait(EMPTY_K(j), ROUND_PARITY(j) ^ 1u);
            WG_FETCH_TILE_BY(k_tiles[j & 1], k, k_base, k_stride_s, j * BLOCK_N, seqlen_k, BLOCK_N, HEAD_DIM, pid,
                             128);
            CPASYNC_ARRIVE_NOINC(FULL_K(j));
            mbar_wait(EMPTY_V(j), ROUND_PARITY(j) ^ 1u);
            WG_FETCH_TILE_BY(v_tiles[j & 1], v, v_base, v_stride_s, j * BLOCK_N, seqlen_k, BLOCK_N, HEAD_DIM, pid,
                             128);
            CPASYNC_ARRIVE_NOINC(FULL_V(j));
        }
        // No copy may be outstanding when the work-item ends.
        COPY_WAIT_ALL();
        return;
    }
    WG_REGS_CONSUMER();
#if WG_PIPELINE
    // The consumers, block j's S beside block j - 1's O += P V (as below).
    uint p_prev[BLOCK_N / 16][4];
    if (blocks > 0) {
        WAIT_FULL(FULL_K(0), 0);
        WGMMA_FENCE();
        ISSUE_S(K_DESC(0));
        WGMMA_WAIT(BLOCK_N, s);
        MBAR_ARRIVE(EMPTY_K(0));
        SOFTMAX(0, pa);
        RESCALE_O();
        KEEP_P(p_prev, pa);
    }
    for (int j = 1; j < blocks; ++j) {
        const int k0 = j * BLOCK_N;
        WAIT_FULL(FULL_K(j), j);
        WAIT_FULL(FULL_V(j - 1), j - 1);
        WGMMA_FENCE();
        ISSUE_S(K_DESC(j));
        ISSUE_PV(p_prev, V_DESC(j - 1));
        WGMMA_WAIT1(BLOCK_N, s);
        MBAR_ARRIVE(EMPTY_K(j));
        SOFTMAX(k0, pa);
        WGMMA_WAIT_PV(HEAD_DIM, acc, BLOCK_N, p_prev);
        MBAR_ARRIVE(EMPTY_V(j - 1));
        RESCALE_O();
        KEEP_P(p_prev, pa);
    }
    if (blocks > 0) {
        WAIT_FULL(FULL_V(blocks - 1), blocks - 1);
        WGMMA_FENCE();
        ISSUE_PV(p_prev, V_DESC(blocks - 1));
        WGMMA_WAIT(HEAD_DIM, acc);
        MBAR_ARRIVE(EMPTY_V(blocks - 1));
    }
#elif WG_WS_PINGPONG
    // The consumers, one block at a time, taking turns at the matrix units:
    // warpgroup 0 first (warpgroup 1 primes its token), then each issues
    // S(j) holding its token and hands it over, does its softmax, and takes
    // its token back for O += P V(j) and, at the loop's top, S(j + 1).
    const uint own = 1u + role, other = 2u - role;
    if (role == 1u) NAMED_ARRIVE(1u);
    NAMED_SYNC(own);
    for (int j = 0; j < blocks; ++j) {
        const int k0 = j * BLOCK_N;
        WAIT_FULL(FULL_K(j), j);
        WGMMA_FENCE();
        ISSUE_S(K_DESC(j));
        NAMED_ARRIVE(other);
        WGMMA_WAIT(BLOCK_N, s);
        MBAR_ARRIVE(EMPTY_K(j));
        SOFTMAX(k0, pa);
        RESCALE_O();
        WAIT_FULL(FULL_V(j), j);
        NAMED_SYNC(own);
        WGMMA_FENCE();
        ISSUE_PV(pa, V_DESC(j));
        WGMMA_WAIT(HEAD_DIM, acc);
        MBAR_ARRIVE(EMPTY_V(j));
    }
    // The other warpgroup's last wait for its token.
    NAMED_ARRIVE(other);
#else
    // The consumers, one block at a time.
    for (int j = 0; j < blocks; ++j) {
        const int k0 = j * BLOCK_N;
        WAIT_FULL(FULL_K(j), j);
        WGMMA_FENCE();
        ISSUE_S(K_DESC(j));
        WGMMA_WAIT(BLOCK_N, s);
        MBAR_ARRIVE(EMPTY_K(j));
        SOFTMAX(k0, pa);
        RESCALE_O();
        WAIT_FULL(FULL_V(j), j);
        WGMMA_FENCE();
        ISSUE_PV(pa, V_DESC(j));
        WGMMA_WAIT(HEAD_DIM, acc);
        MBAR_ARRIVE(EMPTY_V(j));
    }
#endif
#undef FULL_K
#undef FULL_V
#undef EMPTY_K
#undef EMPTY_V
#undef ROUND_PARITY
#undef WAIT_FULL
#elif WG_PIPELINE
    // FlashAttention-3's overlap within a warpgroup: block j's S = Q K^T and
    // block j - 1's O += P V are in flight together, and the softmax of
    // block j runs while the latter is (O's rescaling waits for it). P of
    // block j - 1 (p_prev) stays in its registers until that product is
    // done. K blocks and V blocks have stages of their own: one copy group
    // per block brings K(j + 1) and V(j), each needed one block later, into
    // stages whose last readers (S(j - 1), P V(j - 2)) every warpgroup has
    // finished at the block's barrier. Every wgmma is issued outside any
    // branch but the loop's: under a condition ptxas serialised them all
    // ("program dependence on compiler-inserted WG.AR in divergent path",
    // seen offline with ptxas on this file's PTX), so a causal warpgroup
    // computes the blocks its rows cannot see (their P is 0).
    uint p_prev[BLOCK_N / 16][4];
    if (blocks > 0) {
        WG_FETCH_TILE(q_tile, q, q_base, q_stride_s, q0, seqlen_q, BLOCK_M, HEAD_DIM);
        FETCH_K(0);
        FETCH_BIAS(0);
        COPY_COMMIT();
        COPY_WAIT(0);
        WG_FENCE_PROXY();
        barrier(CLK_LOCAL_MEM_FENCE);
        FETCH_V(0);
        if (blocks > 1) {
            FETCH_K(1);
            FETCH_BIAS(1);
        }
        COPY_COMMIT();
        WGMMA_FENCE();
        ISSUE_S(K_DESC(0));
        WGMMA_WAIT(BLOCK_N, s);
        SOFTMAX(0, pa);
        RESCALE_O();
        KEEP_P(p_prev, pa);
    }
    for (int j = 1; j < blocks; ++j) {
        const int k0 = j * BLOCK_N;
        // K(j) and V(j - 1) have landed; every warpgroup is done with S(j - 1) and P V(j - 2).
        COPY_WAIT(0);
        WG_FENCE_PROXY();
        barrier(CLK_LOCAL_MEM_FENCE);
        FETCH_V(j);
        if (j + 1 < blocks) {
            FETCH_K(j + 1);
            FETCH_BIAS(j + 1);
        }
        COPY_COMMIT();
        WGMMA_FENCE();
        ISSUE_S(K_DESC(j));
        ISSUE_PV(p_prev, V_DESC(j - 1));
        WGMMA_WAIT1(BLOCK_N, s);
        SOFTMAX(k0, pa);
        WGMMA_WAIT_PV(HEAD_DIM, acc, BLOCK_N, p_prev);
        RESCALE_O();
        KEEP_P(p_prev, pa);
    }
    if (blocks > 0) {
        // The last block's O += P V, once its V has landed.
        COPY_WAIT(0);
        WG_FENCE_PROXY();
        barrier(CLK_LOCAL_MEM_FENCE);
        WGMMA_FENCE();
        ISSUE_PV(p_prev, V_DESC(blocks - 1));
        WGMMA_WAIT(HEAD_DIM, acc);
    }
#else
    // One block at a time: S, softmax, O += P V, each product waited for.
    // K and V of block j + 1 are copied while block j is computed.
    if (blocks > 0) {
        WG_FETCH_TILE(q_tile, q, q_base, q_stride_s, q0, seqlen_q, BLOCK_M, HEAD_DIM);
        FETCH_K(0);
        FETCH_V(0);
        FETCH_BIAS(0);
        COPY_COMMIT();
    }
    for (int j = 0; j < blocks; ++j) {
        const int k0 = j * BLOCK_N;
        // Block j + 1 goes to the other stage, which every warpgroup left at
        // the end of block j - 1; then block j (and Q) must have landed.
        if (j + 1 < blocks) {
            FETCH_K(j + 1);
            FETCH_V(j + 1);
            FETCH_BIAS(j + 1);
            COPY_COMMIT();
            COPY_WAIT(1);
        } else {
            COPY_WAIT(0);
        }
        WG_FENCE_PROXY();
        barrier(CLK_LOCAL_MEM_FENCE);
        WGMMA_FENCE();
        ISSUE_S(K_DESC(j));
        WGMMA_WAIT(BLOCK_N, s);
        SOFTMAX(k0, pa);
        RESCALE_O();
        WGMMA_FENCE();
        ISSUE_PV(pa, V_DESC(j));
        WGMMA_WAIT(HEAD_DIM, acc);
        // Every warpgroup is done with this stage before block j + 2 is
        // copied into it.
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#endif
#undef SOFTMAX
#undef RESCALE_O
#undef KEEP_P
#undef ISSUE_S
#undef ISSUE_PV
#undef K_DESC
#undef V_DESC
#undef FETCH_K
#undef FETCH_V
#undef FETCH_BIAS
#undef WG_MODIFY
#undef WG_BIAS_READ
#undef WG_BIAS_TERM
#undef WG_BIAS_HIDES
#undef WG_HIDE_STEP
#undef WG_STEP_MAX
#undef WG_BLOCK_MAX

    // Each row's sum is spread over the 4 lanes of its quad.
    sum_top += QUAD_XOR(sum_top, 1);
    sum_top += QUAD_XOR(sum_top, 2);
    sum_bottom += QUAD_XOR(sum_bottom, 1);
    sum_bottom += QUAD_XOR(sum_bottom, 2);
    // Empty only when no key was visible; a zero or NaN sum of a row that
    // saw keys gives NaN (0 * inf, x * NaN), as IEEE arithmetic does.
    const float inv_top = max_top == -INFINITY ? 0.0f : row_in_range(max_top) ? 1.0f / sum_top : NAN;
    const float inv_bottom = max_bottom == -INFINITY ? 0.0f : row_in_range(max_bottom) ? 1.0f / sum_bottom : NAN;
    UNROLL_ALWAYS
    for (int i = 0; i < O_REGS / 4; ++i) {
        const int col = i * 8 + 2 * t;
        if (row_top < seqlen_q)
            STORE_PAIR(o, o_base + (ulong)row_top * o_stride_s + col, acc[4 * i] * inv_top, acc[4 * i + 1] * inv_top);
        if (row_bottom < seqlen_q)
            STORE_PAIR(o, o_base + (ulong)row_bottom * o_stride_s + col, acc[4 * i + 2] * inv_bottom,
                       acc[4 * i + 3] * inv_bottom);
    }
    if (write_lse && t == 0) {
        const ulong lse_base = lse_offset + (ulong)b * lse_stride_b + (ulong)h * lse_stride_h;
        // Natural units: LSE = ln(2) * (max + log2(sum)).
        if (row_top < seqlen_q)
            lse[lse_base + (ulong)row_top * lse_stride_s] =
                row_in_range(max_top) ? flashcl_row_lse2(max_top, sum_top) : NAN;
        if (row_bottom < seqlen_q)
            lse[lse_base + (ulong)row_bottom * lse_stride_s] =
                row_in_range(max_bottom) ? flashcl_row_lse2(max_bottom, sum_bottom) : NAN;
    }
}
