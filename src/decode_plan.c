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
 * work-group: each work-item keeps a running maximum, sum and accumulator
 * per row (cl/decode.cl), so more rows cost registers; a call with more
 * packed rows takes several work-groups, each reading K and V once. */
#define DECODE_MAX_ROWS 32
/* Local memory a decode work-group aims to stay under, so several fit on a
 * compute unit (latency is hidden by work-groups in flight, not by a large
 * tile: the kernel is bound by the bytes of K and V). */
#define DECODE_LOCAL_TARGET (40u * 1024u)
#define DECODE_MAX_KEYS 64
#define DECODE_MIN_KEYS 4
/* llvmpipe's budget: 65535 loop iterations per work-item in all (src/device_caps.h), kept at half. */
#define LLVMPIPE_LOOP_BUDGET 32768

static size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }
static size_t round4(size_t n) { return (n + 3) / 4 * 4; }

/* Work-items: one per head dim up to 256 (the product with V), at least 64. */
static size_t decode_threads(const flashcl_device_caps *caps, int head_dim) {
    size_t threads = round4((size_t)head_dim);
    threads = (threads + 31) / 32 * 32;
    if (threads < 64) threads = 64;
    while (threads > caps->limits.max_work_group_size && threads > 1) threads /= 2;
    return threads;
}

/* The local memory of cl/decode.cl's tiles, in bytes. */
size_t flashcl_decode_local_bytes(int head_dim, int rows, int keys) {
    const size_t d = (size_t)head_dim, r = (size_t)rows, k = (size_t)keys;
    const size_t q = r * round4(d), kt = d * (k | 1), vs = k * d, p = k * round4(r), red = k * round4(r);
    return (q + kt + vs + p + red + r) * sizeof(float);
}

/* Loop iterations a work-item runs per key step, counted as if no loop
 * were unrolled (an upper bound for llvmpipe's budget). */
static size_t iterations_per_step(size_t d, size_t rows, size_t keys, size_t threads) {
    const size_t pairs = ceil_div(rows * keys, threads);
    const size_t pv_dims = threads < d ? threads : d, pv_groups = threads / pv_dims;
    const size_t dims = ceil_div(d, pv_dims), own_rows = ceil_div(rows, pv_groups);
    size_t tree = 0;
    for (size_t half = keys / 2; half > 0; half /= 2) tree += 1 + ceil_div(half * rows, threads);
    return 1 + ceil_div(keys * d, threads) + pairs * (1 + round4(d) / 4) + tree + pairs +
           own_rows * (1 + dims) + keys * (1 + dims + own_rows * (1 + dims));
}

int flashcl_decode_applies(const flashcl_settings *s, const flashcl_problem *p) {
    const flashcl_attention_desc *desc = p->desc;
    const flashcl_features *f = p->features;
    if (s->impl != FLASHCL_IMPL_FLASH || p->pass != FLASHCL_PASS_FORWARD || s->decode_off || s->forced_plan_set)
        return 0;
    if (f->block_mask || f->dropout || f->varlen.on) return 0;
    return desc->seqlen_q <= DECODE_MAX_QUERIES && desc->head_dim <= 256;
}

int flashcl_decode_tiles(const flashcl_device_caps *caps, const flashcl_problem *p, flashcl_plan *tiles) {
    const flashcl_attention_desc *desc = p->desc;
    const int group = desc->heads_q / desc->heads_kv;
    const long packed = (long)desc->seqlen_q * group;
    const int rows = packed < DECODE_MAX_ROWS ? (int)packed : DECODE_MAX_ROWS;
    const size_t threads = decode_threads(caps, desc->head_dim);
    if (threads < 1) return 0;
    size_t limit = caps->limits.local_mem_bytes;
    if (limit > DECODE_LOCAL_TARGET) limit = DECODE_LOCAL_TARGET;
    for (int keys = DECODE_MAX_KEYS; keys >= DECODE_MIN_KEYS; keys /= 2) {
        const size_t bytes = flashcl_decode_local_bytes(desc->head_dim, rows, keys);
        if (bytes > limit && !(keys == DECODE_MIN_KEYS && bytes <= caps->limits.local_mem_bytes)) continue;
        memset(tiles, 0, sizeof *tiles);
        tiles->block_q = rows;
        tiles->block_k = keys;
        tiles->threads_q = 1;
        tiles->threads_k = (int)threads;
        tiles->work_group_size = threads;
        tiles->local_mem_bytes = bytes;
        return 1;
    }
    return 0;
}

size_t flashcl_decode_max_chunk(const flashcl_device_caps *caps, const flashcl_attention_desc *desc,
                                const flashcl_plan *tiles) {
    if (!caps->loop_limited) return 0;
    const size_t per_step = iterations_per_step((size_t)desc->head_dim, (size_t)tiles->block_q,
                                                (size_t)tiles->block_k, tiles->work_group_size);
    return LLVMPIPE_LOOP_BUDGET / per_step * (size_t)tiles->block_k;
}

void flashcl_decode_program(const flashcl_problem *p, flashcl_exec_plan *plan) {
    const flashcl_attention_desc *desc = p->desc;
    const flashcl_plan *t = &plan->tiles;
    /* Four-element reads need HEAD_DIM % 4; float4 reads also 16-byte rows
     * (offsets and strides multiples of 4); half and bfloat16 vector loads
     * need element alignment only. */
    const int vec = desc->head_dim % 4 == 0 && (desc->dtype != FLASHCL_DTYPE_F32 || p->kv_alignment % 4 == 0) ? 4 : 1;
    plan->program = "decode.cl";
    plan->kernel_count = 1;
    plan->kernel_names[0] = "flashcl_decode";
    plan->portable_args = 1;
    snprintf(plan->options, sizeof plan->options,
             "-DFLASHCL_DTYPE=%d -DHEAD_DIM=%d -DDECODE_ROWS=%d -DDECODE_KEYS=%d -DDECODE_THREADS=%zu -DKV_VEC=%d",
             (int)desc->dtype, desc->head_dim, t->block_q, t->block_k, t->work_group_size, vec);
    flashcl_features_options(p->features, plan->options, sizeof plan->options);
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
