/* mma_backends.c: the backend table (NVIDIA mma.sync, the local-memory emulation) and the tensor-core kernels' tiles. */
#include <stdio.h>
#include <stdlib.h>

#include "mma_backends.h"

/* Query rows per warp and the work-group size the kernels aim for (4 warps,
 * FlashAttention-2's forward layout; the backward's warps each own 16 keys
 * in dK/dV and 16 queries in dQ). */
#define ROWS_PER_WARP 16
#define TARGET_WARPS 4
#define MAX_MMA_HEAD_DIM 128
/* The forward's emulation on llvmpipe: every emulated instruction's loops
 * stay rolled (cl/forward_mma.cl, UNROLL), and with llvmpipe's 32 KiB tiles
 * every key block takes about 64 of them: the sum came out truncated after
 * 62 key blocks (f32, head_dim 128, 16-key blocks) when an emulated 3xTF32
 * instruction ran 6 loop iterations; it runs 9 since its three products
 * became one loop (cl/mma_emulated.cl), which brings the truncation nearer
 * (about 41 blocks if the emulation's loops are all that counts). Past this
 * many blocks such a call runs the portable kernel; test_forward_mma and
 * test_backward_mma run calls at the limit on llvmpipe. */
#define LLVMPIPE_EMULATED_MAX_KEY_BLOCKS 32
/* The backward's: the forward's emulation truncated after about 62 blocks of
 * 64 emulated 3xTF32 products (~4000, its own loops included) and stops at
 * 32 blocks (2048): the backward gets the same budget of emulated products
 * per work-item. */
#define LLVMPIPE_EMULATED_MAX_PRODUCTS 2048

/* Values of dtype per 32-bit fragment register: two 16-bit values or one float (3xTF32). */
static int values_per_word(flashcl_dtype dtype) { return dtype == FLASHCL_DTYPE_F32 ? 1 : 2; }

int flashcl_mma_row_alignment(flashcl_dtype dtype) { return 4 * values_per_word(dtype); }

int flashcl_mma_problem_supported(int head_dim) { return head_dim % 16 == 0 && head_dim <= MAX_MMA_HEAD_DIM; }

/* mma.sync m16n8k16 with f16 and bf16 operands needs sm_80 or later; the
 * OpenCL compiler of NVIDIA's driver takes it as inline PTX. */
static int has_nvidia_mma_sync(const flashcl_device_caps *caps) {
    return caps->vendor == FLASHCL_VENDOR_NVIDIA && caps->compute_capability >= 80;
}

static int always(const flashcl_device_caps *caps) {
    (void)caps;
    return 1;
}

static size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

/* llvmpipe's loop budget (see above) for the emulated kernels. */
static int emulation_fits(const flashcl_device_caps *caps, flashcl_pass pass, const flashcl_attention_desc *desc,
                          const flashcl_plan *tiles) {
    if (!caps->loop_limited) return 1;
    if (pass == FLASHCL_PASS_FORWARD)
        return ceil_div((size_t)desc->seqlen_k, (size_t)tiles->block_k) <= LLVMPIPE_EMULATED_MAX_KEY_BLOCKS;
    /* Emulated products per streamed block: dK/dV's S^T, dP^T (head_dim /
     * mma_k steps over step / 8 tiles each) and dV, dK (step / mma_k steps
     * over head_dim / 8 tiles each); dQ has one product of the second kind. */
    const size_t mma_k = desc->dtype == FLASHCL_DTYPE_F32 ? 8 : 16, step = (size_t)tiles->block_q;
    const size_t d = (size_t)desc->head_dim;
    const size_t scores = 2 * (d / mma_k) * (step / 8), sums = (step / mma_k) * (d / 8);
    const size_t group = (size_t)(desc->heads_q / desc->heads_kv);
    const size_t q_steps = group * ceil_div((size_t)desc->seqlen_q, step);
    const size_t k_steps = ceil_div((size_t)desc->seqlen_k, step);
    return q_steps * (scores + 2 * sums) <= LLVMPIPE_EMULATED_MAX_PRODUCTS &&
           k_steps * (scores + sums) <= LLVMPIPE_EMULATED_MAX_PRODUCTS;
}

/* The table. AUTO takes the first available row that is not emulated. */
static const flashcl_mma_backend backends[] = {
    {"nvidia-mma-sync", FLASHCL_KERNEL_TENSOR_CORE, has_nvidia_mma_sync, 32, 16, 8, 16, 8, 0, 0, 0, 1,
     "mma_nvidia.cl", NULL},
    /* Each warp's operands pass through local memory (twice the words for
     * 3xTF32's two parts), plus the forward's 32-float quad exchange. */
    {"emulated", FLASHCL_KERNEL_TENSOR_CORE_EMULATED, always, 32, 16, 8, 16, 8, 192, 384, 32, 0,
     "mma_emulated.cl", emulation_fits},
};

const flashcl_mma_backend *flashcl_mma_backend_select(const flashcl_device_caps *caps, flashcl_tensor_cores mode) {
    for (size_t i = 0; i < sizeof backends / sizeof backends[0]; ++i) {
        const flashcl_mma_backend *b = &backends[i];
        const int emulated = b->kind == FLASHCL_KERNEL_TENSOR_CORE_EMULATED;
        if (mode == FLASHCL_TENSOR_CORES_EMULATE && emulated) return b;
        if (mode == FLASHCL_TENSOR_CORES_AUTO && !emulated && b->available(caps)) return b;
    }
    return NULL;
}

static size_t scratch_words(const flashcl_mma_backend *b, flashcl_dtype dtype) {
    return (size_t)(dtype == FLASHCL_DTYPE_F32 ? b->scratch_words_f32 : b->scratch_words_16bit);
}

/* Local memory of cl/forward_mma.cl: a K and a V block in rows of
 * head_dim / values_per_word + 4 words, the staged bias tile (block_q rows
 * of block_k elements and one 16-byte chunk of padding) and the backend's
 * scratch. */
static size_t forward_local_bytes(const flashcl_mma_backend *b, int head_dim, flashcl_dtype dtype, int warps,
                                  int block_k, size_t bias_bytes) {
    size_t words = 2 * (size_t)block_k * (size_t)(head_dim / values_per_word(dtype) + 4);
    if (b->scratch_words_16bit)
        words += (size_t)warps * (scratch_words(b, dtype) + (size_t)b->forward_exchange_words);
    size_t bias_tile = 0;
    if (bias_bytes) bias_tile = (size_t)warps * ROWS_PER_WARP * ((size_t)block_k * bias_bytes + 16);
    return words * 4 + bias_tile;
}

/* Local memory of either tiled backward kernel: two blocks of `step` rows
 * (Q and dO, or K and V) in rows of head_dim / values_per_word + 4 words,
 * the dK/dV kernel's LSE and D of its query block, the backend's scratch and
 * a staged bias tile (step x the work-group's rows, as either kernel holds
 * it, each row padded by one 16-byte chunk; the dQ kernel holds two: the
 * block's and the next one's, copied one block ahead, cl/backward_mma.cl). */
static size_t backward_local_bytes(const flashcl_mma_backend *b, int head_dim, flashcl_dtype dtype, int warps,
                                   int step, size_t bias_bytes) {
    size_t words = 2 * (size_t)step * (size_t)(head_dim / values_per_word(dtype) + 4) + 2 * (size_t)step;
    words += (size_t)warps * scratch_words(b, dtype);
    const size_t own = (size_t)warps * ROWS_PER_WARP;
    size_t bias_tile = 0;
    if (bias_bytes) {
        const size_t dkdv = (size_t)step * (own * bias_bytes + 16), dq = own * ((size_t)step * bias_bytes + 16);
        bias_tile = dkdv > 2 * dq ? dkdv : 2 * dq;
    }
    return words * 4 + bias_tile;
}

static int target_warps(const flashcl_device_caps *caps, const flashcl_mma_backend *b) {
    int warps = TARGET_WARPS;
    while (warps > 0 && (size_t)warps * (size_t)b->subgroup_width > caps->limits.max_work_group_size) warps /= 2;
    return warps;
}

static int forward_tiles(const flashcl_device_caps *caps, const flashcl_mma_backend *b, int head_dim,
                         flashcl_dtype dtype, size_t bias_bytes, flashcl_plan *plan) {
    const int lanes = b->subgroup_width;
#ifdef FLASHCL_MMA_EXPERIMENT
    const char *forced = getenv("FLASHCL_MMA_TILES");
    int bq, bk, m;
    if (forced && sscanf(forced, "%d,%d,%d", &bq, &bk, &m) == 3) {
        const int w = bq / (ROWS_PER_WARP * m);
        *plan = (flashcl_plan){bq, bk, w, lanes, (size_t)w * lanes,
                               forward_local_bytes(b, head_dim, dtype, w, bk, bias_bytes)};
        return 1;
    }
#endif
    const int warps = target_warps(caps, b);
    if (warps == 0) return 0;
    /* The widest key block whose scores (block_k / 2 floats per work-item)
     * leave registers for the head_dim / 2 accumulators and the head_dim / 4
     * Q fragments: block_k x head_dim <= 8192 kept ptxas from spilling on
     * the H100 (sm_90, 255 registers), where these widths also timed best
     * (docs/perf.md); smaller local memories get narrower blocks. Float
     * (3xTF32) holds its Q fragments as floats and splits each operand in
     * registers: block_k x head_dim <= 2048 there (d64: 32, d128: 16) timed
     * 7-10% faster than the widest blocks that fit, which spilled. Every
     * local array of the kernel is static (sized by -D), so it may use the
     * device's static local memory, past the reported size on NVIDIA
     * (static_local.c): the dense tiles fit the reported 48 KiB anyway; a
     * staged bias tile may not. */
    const size_t capacity = caps->limits.static_local_mem_bytes > caps->limits.local_mem_bytes
                                ? caps->limits.static_local_mem_bytes
                                : caps->limits.local_mem_bytes;
    const int max_block_area = dtype == FLASHCL_DTYPE_F32 ? 2048 : 8192;
    static const int key_blocks[] = {128, 64, 32, 16};
    for (size_t i = 0; i < sizeof key_blocks / sizeof key_blocks[0]; ++i) {
        if (key_blocks[i] * head_dim > max_block_area && key_blocks[i] > 16) continue;
        const size_t local = forward_local_bytes(b, head_dim, dtype, warps, key_blocks[i], bias_bytes);
        if (local <= capacity) {
            *plan = (flashcl_plan){warps * ROWS_PER_WARP, key_blocks[i], warps, lanes, (size_t)warps * lanes, local};
            return 1;
        }
    }
    return 0;
}

static int backward_tiles(const flashcl_device_caps *caps, const flashcl_mma_backend *b, int head_dim,
                          flashcl_dtype dtype, size_t bias_bytes, flashcl_plan *plan) {
    const int lanes = b->subgroup_width;
#ifdef FLASHCL_MMA_EXPERIMENT
    const char *forced = getenv("FLASHCL_MMA_BACKWARD_TILES");
    int forced_warps, forced_step;
    if (forced && sscanf(forced, "%d,%d", &forced_warps, &forced_step) == 2) {
        *plan = (flashcl_plan){forced_step, ROWS_PER_WARP * forced_warps, forced_warps, lanes,
                               (size_t)forced_warps * lanes,
                               backward_local_bytes(b, head_dim, dtype, forced_warps, forced_step, bias_bytes)};
        return 1;
    }
#endif
    const int warps = target_warps(caps, b);
    if (warps == 0) return 0;
    /* Streamed rows per step: each warp holds its K and V (or Q and dO)
     * fragments, two head_dim-wide accumulators (dK and dV, or dQ) and two
     * score tiles of step / 2 floats per work-item. On the H100 (4 warps,
     * fwd+bwd at N=4096, docs/perf.md) 32 timed best for 16-bit storage at
     * d64 and d128 (64 and 16 were up to 4% and 10% slower; 2 and 8 warps
     * also slower); float, whose fragments take twice the registers, timed
     * best at step x head_dim = 2048 (d64: 32, d128: 16). Smaller local
     * memories get shorter steps. */
    const int max_step = dtype == FLASHCL_DTYPE_F32 ? 2048 / head_dim : 32;
    static const int steps[] = {64, 32, 16};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; ++i) {
        if (steps[i] > max_step && steps[i] > 16) continue;
        const size_t local = backward_local_bytes(b, head_dim, dtype, warps, steps[i], bias_bytes);
        if (local <= caps->limits.local_mem_bytes) {
            *plan = (flashcl_plan){steps[i], ROWS_PER_WARP * warps, warps, lanes, (size_t)warps * lanes, local};
            return 1;
        }
    }
    return 0;
}

int flashcl_mma_choose_tiles(const flashcl_device_caps *caps, const flashcl_mma_backend *b, flashcl_pass pass,
                             int head_dim, flashcl_dtype dtype, size_t staged_bias_bytes, flashcl_plan *plan) {
    return pass == FLASHCL_PASS_FORWARD ? forward_tiles(caps, b, head_dim, dtype, staged_bias_bytes, plan)
                                        : backward_tiles(caps, b, head_dim, dtype, staged_bias_bytes, plan);
}
