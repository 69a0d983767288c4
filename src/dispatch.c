/* dispatch.c: from (device caps, settings, problem) to the execution plan; no OpenCL calls, no context. */
#include "dispatch.h"

#include "decode_plan.h"
#include "register_budget.h"
#include "wgmma_plan.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* tuned_plans.c */
int flashcl_tuned_plan(const flashcl_device_caps *caps, flashcl_pass pass, const flashcl_attention_desc *desc,
                       flashcl_plan *plan);

static flashcl_status refuse(char *reason, size_t size, flashcl_status status, const char *format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static flashcl_status refuse(char *reason, size_t size, flashcl_status status, const char *format, ...) {
    va_list args;
    va_start(args, format);
    if (reason && size) vsnprintf(reason, size, format, args);
    va_end(args);
    return status;
}

static size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

int flashcl_views_alignment(const flashcl_tensor *const *views, int count) {
    size_t bits = 0;
    for (int i = 0; i < count; ++i)
        if (views[i]) bits |= views[i]->offset | views[i]->stride_batch | views[i]->stride_head | views[i]->stride_seq;
    for (int a = 8; a > 1; a /= 2)
        if (bits % (size_t)a == 0) return a;
    return 1;
}

/* Appends to the plan's options. */
static void add_options(flashcl_exec_plan *plan, const char *format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void add_options(flashcl_exec_plan *plan, const char *format, ...) {
    const size_t used = strlen(plan->options);
    if (used >= sizeof plan->options) return;
    va_list args;
    va_start(args, format);
    vsnprintf(plan->options + used, sizeof plan->options - used, format, args);
    va_end(args);
}

/* The tensor-core backend a call may use, or NULL: the context's mode and
 * implementation, a forced plan (it names portable tiles: the caller asked
 * for that kernel), features (they take the score modifiers and the bias, no mask), fp32 without 3xTF32 (slightly short of float's
 * precision: only on request), head_dim, the views' alignment, tiles that
 * fit and the backend's own limits. */
/* Bytes of one bias element when the tensor-core kernels stage the bias
 * tile in local memory (cl/mma_operands.cl, FLASHCL_BIAS_STAGED), else 0. */
static size_t staged_bias_bytes(const flashcl_problem *p) { return flashcl_bias_staged_bytes(p->features); }

static const flashcl_mma_backend *tensor_core_backend(const flashcl_device_caps *caps, const flashcl_settings *s,
                                                      const flashcl_problem *p, flashcl_plan *tiles) {
    const flashcl_attention_desc *desc = p->desc;
    const flashcl_mma_backend *b = flashcl_mma_backend_select(caps, s->tensor_cores);
    if (!b || s->impl != FLASHCL_IMPL_FLASH || s->forced_plan_set) return NULL;
    /* They take the score modifiers and the bias (applied to each score where it is computed; the backward's
     * dQ kernel writes dBias), no mask feature. */
    if (!flashcl_features_tensor_core(p->features, p->pass)) return NULL;
    if (desc->dtype == FLASHCL_DTYPE_F32 && s->f32_precision != FLASHCL_F32_3XTF32) return NULL;
    if (!flashcl_mma_problem_supported(desc->head_dim)) return NULL;
    if (p->views_alignment % flashcl_mma_row_alignment(desc->dtype) != 0) return NULL;
    if (!flashcl_mma_choose_tiles(caps, b, p->pass, desc->head_dim, desc->dtype, staged_bias_bytes(p), tiles))
        return NULL;
    if (b->fits && !b->fits(caps, p->pass, desc, tiles)) return NULL;
    return b;
}

/* The portable kernels' tiles: the forced plan (checked), a tuned one for
 * the device, or the planner's. */
static flashcl_status portable_tiles(const flashcl_device_caps *caps, const flashcl_settings *s,
                                     const flashcl_problem *p, flashcl_plan *tiles, char *reason, size_t size) {
    const flashcl_attention_desc *desc = p->desc;
    const char *pass_name = p->pass == FLASHCL_PASS_FORWARD ? "forward" : "backward";
    if (s->forced_plan_set) {
        char why[256];
        *tiles = s->forced_plan;
        flashcl_status status =
            flashcl_plan_check(&caps->limits, p->pass, desc->head_dim, desc->dtype, tiles, why, sizeof why);
        if (status != FLASHCL_SUCCESS)
            return refuse(reason, size, status, "forced %s plan %dx%d (threads %dx%d) does not fit %s: %s", pass_name,
                          tiles->block_q, tiles->block_k, tiles->threads_q, tiles->threads_k, caps->name, why);
        return FLASHCL_SUCCESS;
    }
    if (flashcl_tuned_plan(caps, p->pass, desc, tiles)) return FLASHCL_SUCCESS;
    /* Within the device's register budget: RDNA's is narrower than the public planner's (register_budget.c). */
    const flashcl_register_budget budget = flashcl_register_budget_of(caps);
    flashcl_status status = flashcl_plan_choose_within(&caps->limits, &budget, p->pass, desc->head_dim, desc->dtype,
                                                       desc->causal, tiles);
    if (status != FLASHCL_SUCCESS)
        return refuse(reason, size, status,
                      "no %s tile plan fits %s (local memory %zu bytes, work-group %zu) for head_dim %d", pass_name,
                      caps->name, caps->limits.local_mem_bytes, caps->limits.max_work_group_size, desc->head_dim);
    return FLASHCL_SUCCESS;
}

/* Program, kernels and build options of a flash plan. Never
 * -cl-fast-relaxed-math: the online softmax relies on exact -inf handling. */
static void flash_program(const flashcl_device_caps *caps, const flashcl_problem *p, int kv_alignment,
                          flashcl_exec_plan *plan) {
    const flashcl_attention_desc *desc = p->desc;
    const flashcl_plan *t = &plan->tiles;
    const int forward = p->pass == FLASHCL_PASS_FORWARD;
    plan->kernel_count = forward ? 1 : 3;
    if (!forward) {
        /* D = rowsum(dO * O): one kernel for both families (cl/backward_delta.cl). */
        plan->kernel_names[FLASHCL_KERNEL_DELTA] = "flashcl_backward_delta";
        plan->kernel_programs[FLASHCL_KERNEL_DELTA] = "backward_delta.cl";
        snprintf(plan->aux_options, sizeof plan->aux_options, "-DFLASHCL_DTYPE=%d -DHEAD_DIM=%d", (int)desc->dtype,
                 desc->head_dim);
    }
    if (plan->sm90a && !forward) {
        /* dK/dV on wgmma, dQ on wgmma too (or, where its tiles say so, on backward_mma.cl's mma.sync kernel with
         * the mma.sync backend's tiles, which dq_tiles holds here), one sm_90a program (wgmma_backward_plan.c). */
        plan->program = "backward_wgmma.cl";
        for (int i = 0; flashcl_wgmma_backward_prelude[i]; ++i) plan->prelude[i] = flashcl_wgmma_backward_prelude[i];
        plan->kernel_names[FLASHCL_KERNEL_DKDV] = "flashcl_backward_wgmma_dkdv";
        plan->kernel_names[FLASHCL_KERNEL_DQ] = "flashcl_backward_mma_dq";
        flashcl_plan wgmma_dq;
        const int dq_wgmma = flashcl_wgmma_backward_dq_tiles(caps, desc, p->features, &wgmma_dq);
        flashcl_wgmma_backward_options(desc, p->features, t, &plan->dq_tiles, dq_wgmma ? &wgmma_dq : NULL, 1,
                                       plan->options, sizeof plan->options);
        if (dq_wgmma) {
            plan->kernel_names[FLASHCL_KERNEL_DQ] = "flashcl_backward_wgmma_dq";
            plan->dq_tiles = wgmma_dq;
        }
        return;
    }
    if (plan->sm90a) {
        plan->program = "forward_wgmma.cl";
        for (int i = 0; flashcl_wgmma_prelude[i]; ++i) plan->prelude[i] = flashcl_wgmma_prelude[i];
        plan->kernel_names[0] = "flashcl_forward_wgmma";
        flashcl_wgmma_options(desc, p->features, t, plan->options, sizeof plan->options);
        return;
    }
    if (plan->backend) {
        plan->program = forward ? "forward_mma.cl" : "backward_mma.cl";
        plan->prelude[0] = "mma.cl";
        plan->prelude[1] = plan->backend->source;
        plan->prelude[2] = "mma_operands.cl";
        if (forward) {
            plan->kernel_names[0] = "flashcl_forward_mma";
            /* TF32_SMALL_ROUNDED=0: the 3xTF32 small parts go to the matrix
             * unit unrounded (it truncates them): fewer ALU operations (cl/mma_operands.cl). */
            add_options(plan,
                        "-DFLASHCL_DTYPE=%d -DHEAD_DIM=%d -DBLOCK_Q=%d -DBLOCK_K=%d -DM_TILES=%d "
                        "-DFLASHCL_MMA_PTX=%d -DTF32_SMALL_ROUNDED=0",
                        (int)desc->dtype, desc->head_dim, t->block_q, t->block_k,
                        t->block_q / (16 * t->threads_q), plan->backend->ptx);
            flashcl_features_tensor_core_options(p->features, plan->options, sizeof plan->options);
        } else {
            plan->kernel_names[1] = "flashcl_backward_mma_dkdv";
            plan->kernel_names[2] = "flashcl_backward_mma_dq";
            /* BLOCK_Q and BLOCK_K are both the streamed step (the resident
             * rows are 16 per warp). */
            add_options(plan,
                        "-DFLASHCL_DTYPE=%d -DHEAD_DIM=%d -DWARPS=%d -DBLOCK_Q=%d -DBLOCK_K=%d -DFLASHCL_MMA_PTX=%d",
                        (int)desc->dtype, desc->head_dim, t->threads_q, t->block_q, t->block_q, plan->backend->ptx);
            flashcl_features_tensor_core_options(p->features, plan->options, sizeof plan->options);
        }
        return;
    }
    plan->program = forward ? "forward.cl" : "backward.cl";
    plan->portable_args = 1;
    add_options(plan, "-DFLASHCL_DTYPE=%d -DHEAD_DIM=%d -DBLOCK_Q=%d -DBLOCK_K=%d -DTHREADS_Q=%d -DTHREADS_K=%d",
                (int)desc->dtype, desc->head_dim, t->block_q, t->block_k, t->threads_q, t->threads_k);
    if (forward) {
        plan->kernel_names[0] = "flashcl_forward";
        /* float4 reads of K and V need every row start 16-byte aligned: float
         * data, rows of a multiple of 4 elements the plan does not pad, and
         * offsets and strides in multiples of 4. */
        const int kv_vec4 = desc->dtype == FLASHCL_DTYPE_F32 && desc->head_dim % 4 == 0 &&
                            desc->head_dim % t->threads_k == 0 && kv_alignment % 4 == 0;
        add_options(plan, " -DKV_VEC4=%d", kv_vec4);
    } else {
        plan->kernel_names[1] = "flashcl_backward_dkdv";
        plan->kernel_names[2] = "flashcl_backward_dq";
    }
    flashcl_features_options(p->features, plan->options, sizeof plan->options);
}

/* Grids, scratch and block-mask summaries of a flash plan. */
static void flash_launch(const flashcl_device_caps *caps, const flashcl_problem *p, flashcl_exec_plan *plan) {
    const flashcl_attention_desc *desc = p->desc;
    const flashcl_features *f = p->features;
    const flashcl_plan *t = &plan->tiles;
    const size_t wg = t->work_group_size, bh_q = (size_t)desc->batch * (size_t)desc->heads_q;
    if (p->pass == FLASHCL_PASS_FORWARD) {
        plan->work_dims[0] = 2;
        plan->global[0][0] = ceil_div((size_t)desc->seqlen_q, (size_t)t->block_q) * wg;
        plan->global[0][1] = bh_q;
        plan->local[0][0] = wg;
        plan->local[0][1] = 1;
        if (f->block_mask) {
            plan->mask_tiles[0][0] = t->block_q;
            plan->mask_tiles[0][1] = t->block_k;
        }
        plan->extra_device_bytes = flashcl_tile_mask_bytes(desc, f, t->block_q, t->block_k);
        return;
    }
    /* D: one float per query row; with a packed batch (heads_q, total_q),
     * the delta kernel seeing one sequence of total_q rows. */
    plan->delta_seqlen = f->varlen.on ? f->varlen.total_q : desc->seqlen_q;
    plan->delta_rows = (size_t)(f->varlen.on ? 1 : desc->batch) * (size_t)desc->heads_q * (size_t)plan->delta_seqlen;
    /* The delta kernel is a plain row loop: any work-group size divides a
     * global size rounded up to it. */
    size_t delta_local = 64;
    if (delta_local > caps->limits.max_work_group_size) delta_local = caps->limits.max_work_group_size;
    plan->work_dims[FLASHCL_KERNEL_DELTA] = 1;
    plan->global[FLASHCL_KERNEL_DELTA][0] = ceil_div(plan->delta_rows, delta_local) * delta_local;
    plan->local[FLASHCL_KERNEL_DELTA][0] = delta_local;
    /* Both tiled kernels own block_k rows per work-group: keys in dK/dV,
     * queries in dQ; the wgmma backward's dQ kernel has tiles of its own. */
    const flashcl_plan *dq = plan->sm90a ? &plan->dq_tiles : t;
    plan->work_dims[FLASHCL_KERNEL_DKDV] = plan->work_dims[FLASHCL_KERNEL_DQ] = 2;
    plan->global[FLASHCL_KERNEL_DKDV][0] = ceil_div((size_t)desc->seqlen_k, (size_t)t->block_k) * wg;
    plan->global[FLASHCL_KERNEL_DKDV][1] = (size_t)desc->batch * (size_t)desc->heads_kv;
    plan->global[FLASHCL_KERNEL_DQ][0] = ceil_div((size_t)desc->seqlen_q, (size_t)dq->block_k) * dq->work_group_size;
    plan->global[FLASHCL_KERNEL_DQ][1] = bh_q;
    plan->local[FLASHCL_KERNEL_DKDV][0] = wg;
    plan->local[FLASHCL_KERNEL_DQ][0] = dq->work_group_size;
    plan->local[FLASHCL_KERNEL_DKDV][1] = plan->local[FLASHCL_KERNEL_DQ][1] = 1;
    size_t tile_bytes = 0;
    if (f->block_mask) {
        /* dK/dV walks block_q query rows against block_k keys, dQ the plan transposed. */
        plan->mask_tiles[0][0] = plan->mask_tiles[1][1] = t->block_q;
        plan->mask_tiles[0][1] = plan->mask_tiles[1][0] = t->block_k;
        tile_bytes = flashcl_tile_mask_bytes(desc, f, t->block_q, t->block_k) +
                     flashcl_tile_mask_bytes(desc, f, t->block_k, t->block_q);
    }
    /* dBias of a broadcast or 16-bit bias goes through a full-size dS scratch (feature_bias.c). */
    const size_t dbias_bytes = flashcl_dbias_scratch_bytes(desc, f);
    plan->extra_device_bytes = plan->delta_rows * sizeof(float) + tile_bytes;
    plan->extra_device_bytes = dbias_bytes > SIZE_MAX - plan->extra_device_bytes
                                   ? SIZE_MAX
                                   : plan->extra_device_bytes + dbias_bytes;
}

/* Key blocks each split streams at least: fewer, and the partials' writes
 * and the combine start to cost more than the parallelism gains (a split
 * reads 2 x block_k x head_dim elements per block and writes head_dim + 2
 * floats per row in all). */
#define MIN_KEY_BLOCKS_PER_SPLIT 4
/* Work-groups per compute unit the automatic split aims for. On the H100
 * (132 units, f16 d128 decode, 32 query heads; docs/perf.md, split-KV) the
 * portable kernel holds about 4 work-groups per unit at once: 16 splits
 * (512 work-groups, one wave) read K and V at 151 GB/s, 17 (544: a second,
 * nearly empty wave) at 98, 32 and 33 (two waves) at 150 and 154, 48 at
 * 150. Aiming at 8 per unit keeps several waves, so one work-group more or
 * less costs little. */
#define SPLIT_TARGET_GROUPS_PER_UNIT 8
#define MAX_KV_SPLITS 256
/* The decode kernel's aim: one wave of work-groups. On the H100 (f16 d128,
 * 32 query heads over 8, 128K keys: 8 work-groups unsplit; docs/perf.md,
 * decode) 64 splits (about 4 work-groups per unit) read K and V at 1.73
 * TB/s, 32 at 1.27, 128 at 1.24-1.29 and 256 at 1.10: each work-group has
 * a fixed cost (Q, the final sums) that more and shorter chunks repeat. A
 * chunk of two steps (256 keys) is the shortest worth a work-group. */
#define DECODE_SPLIT_GROUPS_PER_UNIT 4
#define DECODE_SPLIT_MIN_STEPS 2
/* The matrix-unit decode kernel (255 registers a work-item at d128: two
 * work-groups of 4 warps per unit on the H100) reads K and V fastest in
 * one wave, 2 work-groups per unit, and not one more (a second wave):
 * f16 d128, 32 query heads over 8, 128K keys: 32 splits 2.55 TB/s, 24
 * 2.51, 48 2.19 (docs/perf.md). A chunk takes at least 4 rounds of 64 keys. */
#define DECODE_MMA_SPLIT_GROUPS_PER_UNIT 2
#define DECODE_MMA_SPLIT_MIN_ROUNDS 4

/* What a family's split-KV needs: its unsplit work-groups, the keys per
 * step of its loop (chunks are whole steps), and the fewest splits it may
 * run with (a device's loop budget bounds the keys per work-group). */
typedef struct split_shape {
    size_t groups, block_k, min_splits;
    size_t groups_per_unit, min_blocks; /* the automatic count's aim and each chunk's fewest key blocks */
    int within_aim; /* 1: the automatic count stays at or below the aim (a kernel whose aim is exactly what the
                     * device holds at once, where one work-group past it starts a second wave) */
} split_shape;

/* Split-KV (decode): when the call's work-groups would not fill the device,
 * the forward's key axis is cut into chunks taken by separate work-groups;
 * a combine kernel merges their partials. The count: forced by the
 * settings, else enough work-groups for the family's aim per compute unit
 * (shape->groups_per_unit), each chunk at least shape->min_blocks steps;
 * never fewer than shape->min_splits. */
static flashcl_status choose_splits(const flashcl_device_caps *caps, const flashcl_settings *s,
                                    const flashcl_problem *p, const split_shape *shape, flashcl_exec_plan *plan,
                                    char *reason, size_t size) {
    const flashcl_attention_desc *desc = p->desc;
    plan->kv_splits = 1;
    if (s->kv_splits == 1) return FLASHCL_SUCCESS;
    const size_t block_k = shape->block_k;
    const size_t key_blocks = ceil_div((size_t)desc->seqlen_k, block_k);
    size_t splits;
    if (s->kv_splits > 1) {
        splits = (size_t)s->kv_splits;
    } else {
        const size_t target = (size_t)caps->limits.compute_units * shape->groups_per_unit;
        splits = shape->groups >= target ? 1
                 : shape->within_aim ? target / shape->groups
                                     : ceil_div(target, shape->groups);
        const size_t longest = key_blocks / shape->min_blocks;
        if (splits > longest) splits = longest;
        if (splits < shape->min_splits) splits = shape->min_splits;
    }
    if (splits > MAX_KV_SPLITS) splits = MAX_KV_SPLITS;
    if (splits > key_blocks) splits = key_blocks;
    if (splits < 2) return FLASHCL_SUCCESS;
    /* Whole key blocks per chunk, so the chunks' blocks are the unsplit
     * kernel's; the last chunk may be shorter, none is empty. */
    const size_t split_keys = ceil_div(key_blocks, splits) * block_k;
    splits = ceil_div((size_t)desc->seqlen_k, split_keys);
    if (splits < 2) return FLASHCL_SUCCESS;
    plan->split_rows = (size_t)desc->batch * (size_t)desc->heads_q * (size_t)desc->seqlen_q;
    const size_t scratch = splits * plan->split_rows * ((size_t)desc->head_dim + 2) * sizeof(float);
    if (s->memory_budget != 0 && scratch > s->memory_budget) {
        if (s->kv_splits > 1 || shape->min_splits > 1)
            return refuse(reason, size, FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY,
                          "%zu split-KV partials need %zu bytes of scratch, the memory budget is %zu", splits,
                          scratch, s->memory_budget);
        return FLASHCL_SUCCESS; /* automatic: the unsplit kernel needs no scratch */
    }
    plan->kv_splits = (int)splits;
    plan->split_keys = (int)split_keys;
    plan->extra_device_bytes += scratch;
    plan->kernel_count = 2;
    plan->kernel_names[FLASHCL_KERNEL_COMBINE] = "flashcl_split_combine";
    plan->kernel_programs[FLASHCL_KERNEL_COMBINE] = "split_combine.cl";
    /* The combine: a work-group per row, a work-item per dim up to 128 (a
     * power of two for its reductions, at least 64, halved to the device's
     * limit): its loads wait out the memory latency once per batch of
     * splits, so fewer dims per work-item mean fewer waits. */
    size_t local = 64;
    while (local < (size_t)desc->head_dim && local < 128) local *= 2;
    while (local > caps->limits.max_work_group_size) local /= 2;
    snprintf(plan->aux_options, sizeof plan->aux_options, "-DFLASHCL_DTYPE=%d -DHEAD_DIM=%d -DCOMBINE_THREADS=%zu",
             (int)desc->dtype, desc->head_dim, local);
    add_options(plan, " -DFLASHCL_SPLIT_KV=1");
    plan->work_dims[0] = 3;
    plan->global[0][2] = splits;
    plan->local[0][2] = 1;
    plan->work_dims[FLASHCL_KERNEL_COMBINE] = 1;
    plan->global[FLASHCL_KERNEL_COMBINE][0] = plan->split_rows * local;
    plan->local[FLASHCL_KERNEL_COMBINE][0] = local;
    return FLASHCL_SUCCESS;
}

/* The portable forward's split-KV: dense calls (causal allowed) and those
 * whose features it takes (the score modifiers). */
static flashcl_status portable_splits(const flashcl_device_caps *caps, const flashcl_settings *s,
                                      const flashcl_problem *p, flashcl_exec_plan *plan, char *reason,
                                      size_t size) {
    plan->kv_splits = 1;
    if (p->pass != FLASHCL_PASS_FORWARD || plan->kind != FLASHCL_KERNEL_PORTABLE ||
        flashcl_features_block_split(p->features))
        return FLASHCL_SUCCESS;
    const flashcl_attention_desc *desc = p->desc;
    const split_shape shape = {ceil_div((size_t)desc->seqlen_q, (size_t)plan->tiles.block_q) * (size_t)desc->batch *
                                   (size_t)desc->heads_q,
                               (size_t)plan->tiles.block_k, 1, SPLIT_TARGET_GROUPS_PER_UNIT,
                               MIN_KEY_BLOCKS_PER_SPLIT, 0};
    return choose_splits(caps, s, p, &shape, plan, reason, size);
}

/* The plan of one decode kernel (the matrix-unit one with backend mma,
 * else cl/decode.cl), split where the device needs it; 0 if it cannot run
 * the call. */
static int decode_plan_with(const flashcl_device_caps *caps, const flashcl_settings *s, const flashcl_problem *p,
                            const flashcl_mma_backend *mma, flashcl_exec_plan *plan) {
    if (mma ? !flashcl_decode_mma_tiles(caps, mma, p, &plan->tiles) : !flashcl_decode_tiles(caps, p, &plan->tiles))
        return 0;
    const flashcl_attention_desc *desc = p->desc;
    split_shape shape = {flashcl_decode_groups(desc, &plan->tiles), (size_t)plan->tiles.block_k, 1,
                         mma ? DECODE_MMA_SPLIT_GROUPS_PER_UNIT : DECODE_SPLIT_GROUPS_PER_UNIT,
                         mma ? DECODE_MMA_SPLIT_MIN_ROUNDS : DECODE_SPLIT_MIN_STEPS, mma != NULL};
    const size_t max_chunk = flashcl_decode_max_chunk(caps, desc, &plan->tiles, mma);
    if (max_chunk != 0) {
        if (max_chunk < shape.block_k) return 0;
        shape.min_splits = ceil_div((size_t)desc->seqlen_k, max_chunk);
        /* A forced count too small for the budget: another kernel keeps it. */
        if (shape.min_splits > MAX_KV_SPLITS || (s->kv_splits != 0 && (size_t)s->kv_splits < shape.min_splits))
            return 0;
    }
    plan->kind = FLASHCL_KERNEL_DECODE;
    plan->backend = mma;
    flashcl_decode_program(p, plan);
    if (choose_splits(caps, s, p, &shape, plan, NULL, 0) != FLASHCL_SUCCESS ||
        (size_t)plan->kv_splits < shape.min_splits)
        return 0;
    return 1;
}

/* The decode kernels' plan, or 0 when neither applies or can run the call
 * (then the tiled kernels do): on matrix units where the context's mode
 * and the call allow (cl/decode_mma.cl), else cl/decode.cl. */
static int decode_plan(const flashcl_device_caps *caps, const flashcl_settings *s, const flashcl_problem *p,
                       flashcl_exec_plan *plan) {
    if (!flashcl_decode_applies(s, p)) return 0;
    const flashcl_exec_plan blank = *plan;
    const flashcl_mma_backend *mma = flashcl_decode_mma_backend(caps, s, p);
    if (mma && decode_plan_with(caps, s, p, mma, plan)) return 1;
    *plan = blank;
    return decode_plan_with(caps, s, p, NULL, plan);
}

/* Bytes the split-KV partials add to the IO model: written once by the
 * split kernel and read once by the combine. */
static double split_bytes(const flashcl_exec_plan *plan, int head_dim) {
    if (plan->kv_splits < 2) return 0.0;
    return 2.0 * (double)plan->kv_splits * (double)plan->split_rows * ((double)head_dim + 2.0) * sizeof(float);
}

/* The standard implementation's N x N matrices (S and P; S, dP, then P and
 * dS in the backward, two live at a time), SIZE_MAX past the address space. */
static size_t standard_bytes(const flashcl_attention_desc *desc, flashcl_pass pass) {
    const double bytes = (double)desc->batch * desc->heads_q * (double)desc->seqlen_q * (double)desc->seqlen_k *
                         sizeof(float) * (pass == FLASHCL_PASS_FORWARD ? 1 : 2);
    return bytes >= (double)SIZE_MAX ? SIZE_MAX : (size_t)bytes;
}

flashcl_status flashcl_dispatch(const flashcl_device_caps *caps, const flashcl_settings *settings,
                                const flashcl_problem *problem, flashcl_exec_plan *plan, char *reason,
                                size_t reason_size) {
    const flashcl_attention_desc *desc = problem->desc;
    memset(plan, 0, sizeof *plan);
    plan->impl = settings->impl;
    plan->pass = problem->pass;
    if (settings->impl == FLASHCL_IMPL_STANDARD && !problem->kv_cache) {
        if (flashcl_features_any(problem->features))
            return refuse(reason, reason_size, FLASHCL_ERROR_UNSUPPORTED,
                          "the standard implementation has no %s; select FLASHCL_IMPL_FLASH",
                          flashcl_features_first(problem->features));
        if (desc->dtype != FLASHCL_DTYPE_F32)
            return refuse(reason, reason_size, FLASHCL_ERROR_UNSUPPORTED,
                          "the standard implementation supports float32 only (dtype %d); use the flash "
                          "implementation for half and bfloat16",
                          (int)desc->dtype);
        /* Its own sizing (standard_scores.c) checks the budget and the
         * device's memory: it splits the matrices by allocation limits. */
        plan->kind = FLASHCL_KERNEL_STANDARD;
        plan->extra_device_bytes = standard_bytes(desc, problem->pass);
        plan->predicted_global_bytes = flashcl_io_model_bytes(desc, settings->impl, problem->pass, NULL);
        return FLASHCL_SUCCESS;
    }
    if (decode_plan(caps, settings, problem, plan)) {
        plan->predicted_global_bytes = flashcl_decode_io_bytes(problem, &plan->tiles) +
                                       split_bytes(plan, desc->head_dim) +
                                       flashcl_io_model_bias_bytes(desc, problem->features, problem->pass);
        return FLASHCL_SUCCESS;
    }
    /* A KV cache has no other kernel (its paging and lengths live in cl/decode.cl alone). */
    if (problem->kv_cache)
        return refuse(reason, reason_size, FLASHCL_ERROR_UNSUPPORTED,
                      "the KV-cache call needs the decode kernel, which cannot run it on %s (head_dim %d, local "
                      "memory %zu bytes, work-group %zu; on a device with a loop budget, too few key chunks: "
                      "capacity %d, kv_splits %d)",
                      caps->name, desc->head_dim, caps->limits.local_mem_bytes, caps->limits.max_work_group_size,
                      desc->seqlen_k, settings->kv_splits);
    memset(plan, 0, sizeof *plan);
    plan->impl = settings->impl;
    plan->pass = problem->pass;
    /* The Hopper forward where it applies (and the context lets it), ahead of the mma.sync kernels, which
     * remain the fallback when its sm_90a program turns out unavailable (call_plan.c). */
    const int hopper_mode = settings->impl == FLASHCL_IMPL_FLASH && !settings->forced_plan_set &&
                            settings->tensor_cores == FLASHCL_TENSOR_CORES_AUTO;
    if (hopper_mode && flashcl_wgmma_applies(caps, settings->wgmma, problem->pass, desc, problem->features,
                                             problem->views_alignment, &plan->tiles)) {
        plan->backend = flashcl_wgmma_backend();
        plan->sm90a = 1;
    } else {
        plan->backend = tensor_core_backend(caps, settings, problem, &plan->tiles);
        /* The Hopper backward (dense calls the mma.sync backward takes, wgmma_backward_plan.c): the mma.sync
         * tiles are kept for its program's options (flash_program), the mma.sync backward stays the fallback. */
        flashcl_plan dkdv;
        if (hopper_mode && problem->pass == FLASHCL_PASS_BACKWARD && plan->backend && plan->backend->ptx == 1 &&
            flashcl_wgmma_backward_applies(caps, settings->wgmma, desc, problem->features, problem->views_alignment,
                                           &dkdv)) {
            plan->dq_tiles = plan->tiles;
            plan->tiles = dkdv;
            plan->backend = flashcl_wgmma_backend();
            plan->sm90a = 1;
        }
    }
    if (plan->backend) {
        plan->kind = plan->backend->kind;
    } else {
        plan->kind = FLASHCL_KERNEL_PORTABLE;
        flashcl_status status = portable_tiles(caps, settings, problem, &plan->tiles, reason, reason_size);
        if (status != FLASHCL_SUCCESS) return status;
    }
    flash_program(caps, problem, problem->kv_alignment, plan);
    flash_launch(caps, problem, plan);
    flashcl_status status = portable_splits(caps, settings, problem, plan, reason, reason_size);
    if (status != FLASHCL_SUCCESS) return status;
    if (settings->memory_budget != 0 && plan->extra_device_bytes > settings->memory_budget) {
        if (problem->pass == FLASHCL_PASS_FORWARD)
            return refuse(reason, reason_size, FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY,
                          "the block mask's tile summary needs %zu bytes, the memory budget is %zu",
                          plan->extra_device_bytes, settings->memory_budget);
        return refuse(reason, reason_size, FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY,
                      "the backward pass needs %zu bytes of scratch, the memory budget is %zu",
                      plan->extra_device_bytes, settings->memory_budget);
    }
    plan->predicted_global_bytes = flashcl_io_model_bytes(desc, settings->impl, problem->pass, &plan->tiles) +
                                   split_bytes(plan, desc->head_dim) +
                                   flashcl_io_model_bias_bytes(desc, problem->features, problem->pass);
    return FLASHCL_SUCCESS;
}

void flashcl_exec_plan_report(const flashcl_exec_plan *plan, flashcl_call_stats *stats) {
    memset(stats, 0, sizeof *stats);
    stats->impl = plan->impl;
    stats->pass = plan->pass;
    stats->extra_device_bytes = plan->extra_device_bytes;
    stats->predicted_global_bytes = plan->predicted_global_bytes;
    stats->plan = plan->tiles;
    stats->kernel = plan->kind;
    if (plan->backend) snprintf(stats->backend, sizeof stats->backend, "%s", plan->backend->name);
    if (plan->program) snprintf(stats->program, sizeof stats->program, "%s", plan->program);
    snprintf(stats->build_options, sizeof stats->build_options, "%s", plan->options);
    stats->kv_splits = plan->impl == FLASHCL_IMPL_FLASH ? (plan->kv_splits > 0 ? plan->kv_splits : 1) : 1;
}

const char *flashcl_kernel_kind_name(flashcl_kernel_kind kind) {
    switch (kind) {
    case FLASHCL_KERNEL_PORTABLE: return "portable";
    case FLASHCL_KERNEL_TENSOR_CORE: return "tensor-core";
    case FLASHCL_KERNEL_TENSOR_CORE_EMULATED: return "tensor-core-emulated";
    case FLASHCL_KERNEL_STANDARD: return "standard";
    case FLASHCL_KERNEL_DECODE: return "decode";
    }
    return "unknown";
}
