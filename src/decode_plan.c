/* decode_plan.c: the decode kernel family (cl/decode.cl) in the dispatcher: when it applies, its tiles and build
 * options, its grid, and the key-chunk bound llvmpipe's loop budget sets. */
#include "decode_plan.h"

#include <stdio.h>
#include <string.h>

/* Query positions up to which a forward runs the decode kernel: at most 8
 * (speculative decoding's few rows), the tiled kernels for longer queries,
 * whose query blocks already give the device enough work-groups. */
#define DECODE_MAX_QUERIES 8
/* Packed rows (query positions x the query heads of a KV head) per
 * work-group: each work-item keeps a score, a share of the sum and an
 * output element per row (cl/decode.cl), so more rows cost registers and
 * local memory; a call with more packed rows takes several work-groups,
 * each reading K and V once. */
#define DECODE_MAX_ROWS 16
/* llvmpipe's budget: 65535 loop iterations per work-item in all (src/device_caps.h), kept at half. */
#define LLVMPIPE_LOOP_BUDGET 32768
/* The matrix-unit kernel (cl/decode_mma.cl): 16 packed rows (the
 * instruction's m) and 4 warps per work-group, each warp taking 16 keys per
 * step. */
#define DECODE_MMA_ROWS 16
#define DECODE_MMA_WARPS 4
#define DECODE_MMA_STEP_KEYS 16

static size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }
static size_t round_up(size_t n, size_t m) { return (n + m - 1) / m * m; }

/* Work-items (and keys per step): 128, or 256 for head dims past 128 (one
 * work-item per dim in the product with V); 0 if the device allows fewer. */
static size_t decode_threads(const flashcl_device_caps *caps, int head_dim) {
    const size_t threads = head_dim > 128 ? 256 : 128;
    return threads <= caps->limits.max_work_group_size ? threads : 0;
}

/* The local memory of cl/decode.cl, in bytes: Q rows (padded to 8), the
 * maximum's candidates (rows x keys), P (keys x rows padded to 4), three
 * floats per row. */
size_t flashcl_decode_local_bytes(int head_dim, int rows, int threads) {
    const size_t d = round_up((size_t)head_dim, 8), r = (size_t)rows, t = (size_t)threads;
    return (r * d + r * t + t * round_up(r, 4) + 3 * r) * sizeof(float);
}

/* Loop iterations a work-item runs per key step, counted as if no loop
 * were unrolled and with one output dim per work-item (its most keys in
 * the product with V): an upper bound for llvmpipe's budget. */
static size_t iterations_per_step(size_t d, size_t rows, size_t threads) {
    const size_t d_steps = d % 8 == 0 ? d / 8 : d, groups = threads / d;
    const size_t scores = 1 + 2 * d_steps * (1 + rows) + rows, maxima = threads / 4, p = rows;
    const size_t pv = rows + ceil_div(threads, groups) * (2 + round_up(rows, 4) / 4 * 2);
    return scores + maxima + p + pv;
}

int flashcl_decode_applies(const flashcl_settings *s, const flashcl_problem *p) {
    const flashcl_attention_desc *desc = p->desc;
    const flashcl_features *f = p->features;
    /* The bias is read pair by pair where each score is (both decode kernels, the KV-cache call's included): it
     * needs no kernel of its own. */
    if (p->pass != FLASHCL_PASS_FORWARD || f->block_mask || f->dropout || f->varlen.on || desc->head_dim > 256)
        return 0;
    /* A KV cache has no other kernel. */
    if (p->kv_cache) return 1;
    if (s->impl != FLASHCL_IMPL_FLASH || s->decode_off || s->forced_plan_set) return 0;
    return desc->seqlen_q <= DECODE_MAX_QUERIES;
}

int flashcl_decode_tiles(const flashcl_device_caps *caps, const flashcl_problem *p, flashcl_plan *tiles) {
    const flashcl_attention_desc *desc = p->desc;
    const int group = desc->heads_q / desc->heads_kv;
    const long packed = (long)desc->seqlen_q * group;
    const int rows = packed < DECODE_MAX_ROWS ? (int)packed : DECODE_MAX_ROWS;
    const size_t threads = decode_threads(caps, desc->head_dim);
    if (threads == 0) return 0;
    const size_t bytes = flashcl_decode_local_bytes(desc->head_dim, rows, (int)threads);
    if (bytes > caps->limits.local_mem_bytes) return 0;
    memset(tiles, 0, sizeof *tiles);
    tiles->block_q = rows;
    tiles->block_k = (int)threads;
    tiles->threads_q = 1;
    tiles->threads_k = (int)threads;
    tiles->work_group_size = threads;
    tiles->local_mem_bytes = bytes;
    return 1;
}

/* Loop iterations of cl/decode_mma.cl's emulation per round: every
 * emulated instruction's k loop (MMA_K / 2 iterations of two steps for its
 * 16-bit operands, cl/mma_emulated.cl) and the rolled loops around the
 * instructions, with room for the rest. */
#define EMULATED_K_ITERATIONS (16 / 2)
static size_t mma_iterations_per_round(const flashcl_attention_desc *desc) {
    const size_t d = (size_t)desc->head_dim, dim_steps = d / 16, dim_tiles = d / 8;
    return (2 * dim_steps + dim_tiles) * (EMULATED_K_ITERATIONS + 2) + 2 * dim_steps + 64;
}

const flashcl_mma_backend *flashcl_decode_mma_backend(const flashcl_device_caps *caps, const flashcl_settings *s,
                                                      const flashcl_problem *p) {
    const flashcl_attention_desc *desc = p->desc;
    if (s->forced_plan_set || desc->dtype == FLASHCL_DTYPE_F32) return NULL;
    if (desc->head_dim != 64 && desc->head_dim != 128) return NULL;
    /* 16-byte loads of 8 elements of each K and V row. */
    if (p->kv_alignment % 8 != 0) return NULL;
    return flashcl_mma_backend_select(caps, s->tensor_cores);
}

/* Local memory of cl/decode_mma.cl: the warps' maxima and sums, the rows'
 * statistics, the output rows, and the backend's scratch (the emulation's
 * operands and quad exchange). */
static size_t mma_local_bytes(const flashcl_mma_backend *b, int head_dim, int warps) {
    size_t words = 2 * (size_t)warps * DECODE_MMA_ROWS + 2 * DECODE_MMA_ROWS + DECODE_MMA_ROWS * (size_t)head_dim;
    if (b->scratch_words_16bit)
        words += (size_t)warps * (size_t)(b->scratch_words_16bit + b->forward_exchange_words);
    return words * sizeof(float);
}

int flashcl_decode_mma_tiles(const flashcl_device_caps *caps, const flashcl_mma_backend *b,
                             const flashcl_problem *p, flashcl_plan *tiles) {
    const size_t threads = (size_t)DECODE_MMA_WARPS * (size_t)b->subgroup_width;
    const size_t bytes = mma_local_bytes(b, p->desc->head_dim, DECODE_MMA_WARPS);
    if (threads > caps->limits.max_work_group_size || bytes > caps->limits.local_mem_bytes) return 0;
    memset(tiles, 0, sizeof *tiles);
    tiles->block_q = DECODE_MMA_ROWS;
    tiles->block_k = DECODE_MMA_WARPS * DECODE_MMA_STEP_KEYS;
    tiles->threads_q = DECODE_MMA_WARPS;
    tiles->threads_k = b->subgroup_width;
    tiles->work_group_size = threads;
    tiles->local_mem_bytes = bytes;
    return 1;
}

size_t flashcl_decode_max_chunk(const flashcl_device_caps *caps, const flashcl_attention_desc *desc,
                                const flashcl_plan *tiles, const flashcl_mma_backend *backend) {
    if (!caps->loop_limited) return 0;
    if (backend) return LLVMPIPE_LOOP_BUDGET / mma_iterations_per_round(desc) * (size_t)tiles->block_k;
    const size_t per_step =
        iterations_per_step((size_t)desc->head_dim, (size_t)tiles->block_q, tiles->work_group_size);
    return LLVMPIPE_LOOP_BUDGET / per_step * (size_t)tiles->block_k;
}

/* cl/decode.cl's options: its rows, work-items and vector widths. */
static void portable_options(const flashcl_problem *p, flashcl_exec_plan *plan) {
    const flashcl_attention_desc *desc = p->desc;
    const flashcl_plan *t = &plan->tiles;
    /* K rows in 16-byte loads of 8 elements need HEAD_DIM % 8 and every K
     * row 16-byte aligned: offsets and strides multiples of 4 floats or 8
     * half / bfloat16 elements. */
    const int vec_align = desc->dtype == FLASHCL_DTYPE_F32 ? 4 : 8;
    const int vec = desc->head_dim % 8 == 0 && p->kv_alignment % vec_align == 0 ? 8 : 1;
    /* Output dims per work-item of the product with V: 8 (one 16-byte load
     * of V per key), 4 past 8 rows (the accumulators are rows x dims
     * registers), 1 without vector loads. */
    const int dv = vec == 8 ? (t->block_q <= 8 ? 8 : 4) : 1;
    plan->program = "decode.cl";
    plan->kernel_names[0] = "flashcl_decode";
    snprintf(plan->options, sizeof plan->options,
             "-DFLASHCL_DTYPE=%d -DHEAD_DIM=%d -DDECODE_ROWS=%d -DDECODE_THREADS=%zu -DKV_VEC=%d -DDV_VEC=%d",
             (int)desc->dtype, desc->head_dim, t->block_q, t->work_group_size, vec, dv);
}

void flashcl_decode_program(const flashcl_problem *p, flashcl_exec_plan *plan) {
    const flashcl_attention_desc *desc = p->desc;
    const flashcl_plan *t = &plan->tiles;
    plan->kernel_count = 1;
    /* Both kernels take the window, the score modifiers and the bias as cl/common.cl lists them. */
    plan->portable_args = 1;
    if (plan->backend) {
        plan->program = "decode_mma.cl";
        plan->prelude[0] = "mma.cl";
        plan->prelude[1] = plan->backend->source;
        plan->prelude[2] = "mma_operands.cl";
        plan->prelude[3] = "decode_common.cl";
        plan->kernel_names[0] = "flashcl_decode_mma";
        snprintf(plan->options, sizeof plan->options,
                 "-DFLASHCL_DTYPE=%d -DHEAD_DIM=%d -DDECODE_WARPS=%d -DFLASHCL_MMA_PTX=%d", (int)desc->dtype,
                 desc->head_dim, t->threads_q, plan->backend->ptx);
    } else {
        plan->prelude[0] = "decode_common.cl";
        portable_options(p, plan);
    }
    flashcl_features_options(p->features, plan->options, sizeof plan->options);
    /* Bias rows that start 16-byte aligned: the matrix-unit kernel reads two keys' bias in one load. */
    if (plan->backend && flashcl_bias_staged_bytes(p->features)) {
        const size_t used = strlen(plan->options);
        snprintf(plan->options + used, sizeof plan->options - used, " -DDECODE_BIAS_PAIRS=1");
    }
    if (p->kv_cache) {
        const size_t used = strlen(plan->options);
        snprintf(plan->options + used, sizeof plan->options - used, " -DFLASHCL_KV_CACHE=1%s",
                 p->kv_cache == 2 ? " -DFLASHCL_KV_PAGED=1" : "");
    }
    if (p->kv_append) {
        plan->kernel_names[FLASHCL_KERNEL_APPEND] = "flashcl_kv_append";
        plan->kernel_programs[FLASHCL_KERNEL_APPEND] = "kv_append.cl";
        snprintf(plan->append_options, sizeof plan->append_options, "-DFLASHCL_DTYPE=%d -DFLASHCL_KV_PAGED=%d",
                 (int)desc->dtype, p->kv_cache == 2);
    }
    const size_t packed = (size_t)desc->seqlen_q * (size_t)(desc->heads_q / desc->heads_kv);
    plan->work_dims[0] = 2;
    plan->global[0][0] = ceil_div(packed, (size_t)t->block_q) * t->work_group_size;
    plan->global[0][1] = (size_t)desc->batch * (size_t)desc->heads_kv;
    plan->local[0][0] = t->work_group_size;
    plan->local[0][1] = 1;
}

size_t flashcl_decode_groups(const flashcl_attention_desc *desc, const flashcl_plan *tiles) {
    const size_t packed = (size_t)desc->seqlen_q * (size_t)(desc->heads_q / desc->heads_kv);
    return ceil_div(packed, (size_t)tiles->block_q) * (size_t)desc->batch * (size_t)desc->heads_kv;
}

double flashcl_decode_io_bytes(const flashcl_problem *p, const flashcl_plan *tiles) {
    const flashcl_attention_desc *desc = p->desc;
    const flashcl_features *f = p->features;
    const double e = (double)flashcl_dtype_size(desc->dtype), d = desc->head_dim;
    const long long group = desc->heads_q / desc->heads_kv, packed = (long long)desc->seqlen_q * group;
    const long long diagonal = (long long)desc->seqlen_k - desc->seqlen_q;
    /* Keys each row block streams, as cl/decode.cl bounds them. */
    double keys = 0.0;
    for (long long p0 = 0; p0 < packed; p0 += tiles->block_q) {
        const long long last = (p0 + tiles->block_q < packed ? p0 + tiles->block_q : packed) - 1;
        const long long first_pos = p0 / group, last_pos = last / group;
        long long begin = 0, end = desc->seqlen_k;
        if (f->causal && last_pos + diagonal + 1 < end) end = last_pos + diagonal + 1;
        if (f->window) {
            const long long b = first_pos + diagonal - f->window_left, w = last_pos + diagonal + f->window_right + 1;
            if (b > begin) begin = b;
            if (w < end) end = w;
        }
        if (end > begin) keys += (double)(end - begin);
    }
    const double rows = (double)desc->seqlen_q * desc->heads_q;
    const double per_batch = rows * (2.0 * d * e + 4.0) /* Q, O, LSE */ + keys * 2.0 * d * e * desc->heads_kv;
    return per_batch * desc->batch;
}
