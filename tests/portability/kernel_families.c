/* kernel_families.c: the table of kernel families and the builds the library would make of each on one device. */
#include "kernel_families.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

/* What a family varies over: storage types, head dims 64 and 128, and the feature defines (dense, then each row
 * of the library's feature table alone). */
enum { VARY_DTYPE = 1, VARY_HEAD_DIM = 2, VARY_FEATURES = 4, VARY_ALL = 7 };

/* The problem a family is asked about: a prefill (2 x 8 query heads over 2 K/V heads, 1024 x 1024, causal) or a
 * decode step (one query row, 32 query heads over 8, 8192 keys: split-KV's shape), the same through a paged KV
 * cache with new rows appended (flashcl_forward_kv_cache). */
typedef enum problem_shape { PREFILL, DECODE, DECODE_KV_PAGED } problem_shape;

typedef struct family {
    const char *name;
    const char *program; /* what the row expects to be built: the walk fails if the dispatcher chooses another */
    int vary;
    /* Families the dispatcher plans: the settings and problem to ask it about, and which kernel of its plan
     * (FLASHCL_KERNEL_*: the main program, or a kernel's program of its own) is the build. */
    flashcl_pass pass;
    problem_shape shape;
    flashcl_tensor_cores tensor_cores;
    int kv_splits;
    int kernel;
    /* Families built outside the dispatcher: their options, as the library's code that builds them makes them. */
    void (*fixed_options)(const flashcl_device_caps *caps, flashcl_dtype dtype, char *options, size_t size);
} family;

/* src/standard_rows.c: 128 work-items per row, halved to the device's work-group limit (the library halves
 * further only if the built kernel allows less, which an offline compile cannot tell). */
static void standard_softmax_options(const flashcl_device_caps *caps, flashcl_dtype dtype, char *options,
                                     size_t size) {
    size_t wg = 128;
    while (wg > caps->limits.max_work_group_size && wg > 1) wg /= 2;
    snprintf(options, size, "-DFLASHCL_DTYPE=%d -DROW_WG=%zu", (int)dtype, wg);
}

/* src/dropout_mask.c. */
static void dropout_mask_options(const flashcl_device_caps *caps, flashcl_dtype dtype, char *options, size_t size) {
    (void)caps, (void)dtype;
    snprintf(options, size, "-DFLASHCL_DROPOUT=1");
}

/* src/feature_tile_mask.c: no options (tile sizes are arguments). */
static void block_mask_options(const flashcl_device_caps *caps, flashcl_dtype dtype, char *options, size_t size) {
    (void)caps, (void)dtype;
    snprintf(options, size, "%s", "");
}

/* src/feature_bias.c: dBias's element type (the bias's: float32 or the storage type). */
static void bias_reduce_options(const flashcl_device_caps *caps, flashcl_dtype dtype, char *options, size_t size) {
    (void)caps;
    snprintf(options, size, "-DFLASHCL_DTYPE=%d", (int)dtype);
}

/* The table: a new kernel family is one line here. The standard softmax is built in every storage type although
 * the dispatcher sends only float32 to the standard implementation today: cheap, and ready if that changes. */
static const family families[] = {
    /* name                   program                vary                        pass                  shape    tensor cores                  splits kernel */
    {"forward",               "forward.cl",          VARY_ALL,                   FLASHCL_PASS_FORWARD, PREFILL, FLASHCL_TENSOR_CORES_OFF,     1, FLASHCL_KERNEL_MAIN, NULL},
    {"forward_split_kv",      "forward.cl",          VARY_DTYPE | VARY_HEAD_DIM, FLASHCL_PASS_FORWARD, DECODE,  FLASHCL_TENSOR_CORES_OFF,     4, FLASHCL_KERNEL_MAIN, NULL},
    {"decode",                "decode.cl",           VARY_DTYPE | VARY_HEAD_DIM, FLASHCL_PASS_FORWARD, DECODE,  FLASHCL_TENSOR_CORES_OFF,     1, FLASHCL_KERNEL_MAIN, NULL},
    {"decode_split_kv",       "decode.cl",           VARY_DTYPE | VARY_HEAD_DIM, FLASHCL_PASS_FORWARD, DECODE,  FLASHCL_TENSOR_CORES_OFF,     4, FLASHCL_KERNEL_MAIN, NULL},
    {"decode_kv_paged",       "decode.cl",           VARY_DTYPE | VARY_HEAD_DIM, FLASHCL_PASS_FORWARD, DECODE_KV_PAGED, FLASHCL_TENSOR_CORES_OFF, 4, FLASHCL_KERNEL_MAIN, NULL},
    {"kv_append",             "kv_append.cl",        VARY_DTYPE,                 FLASHCL_PASS_FORWARD, DECODE_KV_PAGED, FLASHCL_TENSOR_CORES_OFF, 1, FLASHCL_KERNEL_APPEND, NULL},
    {"split_combine",         "split_combine.cl",    VARY_DTYPE | VARY_HEAD_DIM, FLASHCL_PASS_FORWARD, DECODE,  FLASHCL_TENSOR_CORES_OFF,     4, FLASHCL_KERNEL_COMBINE, NULL},
    {"backward",              "backward.cl",         VARY_ALL,                   FLASHCL_PASS_BACKWARD, PREFILL, FLASHCL_TENSOR_CORES_OFF,    0, FLASHCL_KERNEL_DKDV, NULL},
    {"backward_delta",        "backward_delta.cl",   VARY_DTYPE | VARY_HEAD_DIM, FLASHCL_PASS_BACKWARD, PREFILL, FLASHCL_TENSOR_CORES_OFF,    0, FLASHCL_KERNEL_DELTA, NULL},
    {"forward_mma_emulated",  "forward_mma.cl",      VARY_DTYPE | VARY_HEAD_DIM, FLASHCL_PASS_FORWARD, PREFILL, FLASHCL_TENSOR_CORES_EMULATE, 1, FLASHCL_KERNEL_MAIN, NULL},
    {"backward_mma_emulated", "backward_mma.cl",     VARY_DTYPE | VARY_HEAD_DIM, FLASHCL_PASS_BACKWARD, PREFILL, FLASHCL_TENSOR_CORES_EMULATE, 0, FLASHCL_KERNEL_DKDV, NULL},
    {"standard_softmax",      "standard_softmax.cl", VARY_DTYPE,                 FLASHCL_PASS_FORWARD, PREFILL, FLASHCL_TENSOR_CORES_OFF,     0, 0, standard_softmax_options},
    {"dropout_mask",          "dropout.cl",          0,                          FLASHCL_PASS_FORWARD, PREFILL, FLASHCL_TENSOR_CORES_OFF,     0, 0, dropout_mask_options},
    {"block_mask",            "block_mask.cl",       0,                          FLASHCL_PASS_FORWARD, PREFILL, FLASHCL_TENSOR_CORES_OFF,     0, 0, block_mask_options},
    {"bias_reduce",           "bias_reduce.cl",      VARY_DTYPE,                 FLASHCL_PASS_BACKWARD, PREFILL, FLASHCL_TENSOR_CORES_OFF,    0, 0, bias_reduce_options},
};

static const char *const dtype_names[] = {"f32", "f16", "bf16"};
static const int head_dims[] = {64, 128};

static flashcl_attention_desc problem_desc(problem_shape shape, flashcl_dtype dtype, int head_dim) {
    flashcl_attention_desc desc;
    if (shape == DECODE || shape == DECODE_KV_PAGED) {
        flashcl_attention_desc_init(&desc, 1, 32, 1, 8192, head_dim);
        desc.heads_kv = 8;
    } else {
        flashcl_attention_desc_init(&desc, 2, 8, 1024, 1024, head_dim);
        desc.heads_kv = 2;
        desc.causal = 1;
    }
    desc.dtype = dtype;
    return desc;
}

/* Switches on the feature whose define is given, as flashcl_features_resolve would for a call using it; 0 for a
 * define this file has no case for (a new row of the feature table: add its case). */
static int switch_on(flashcl_features *f, const char *define) {
    if (strcmp(define, "FLASHCL_WINDOW") == 0) {
        f->window = 1, f->window_left = 128, f->window_right = 0, f->causal = 0;
    } else if (strcmp(define, "FLASHCL_BLOCK_MASK") == 0) {
        f->block_mask = 1, f->mask_block = 64, f->mask_rows = f->mask_cols = 16, f->mask_heads = 1;
    } else if (strcmp(define, "FLASHCL_DROPOUT") == 0) {
        f->dropout = 1, f->dropout_threshold = flashcl_dropout_threshold(0.1f), f->dropout_scale = 1.0f / 0.9f;
    } else if (strcmp(define, "FLASHCL_VARLEN") == 0) {
        f->varlen.on = 1, f->varlen.total_q = f->varlen.total_k = 2048;
    } else if (strcmp(define, "FLASHCL_SOFTCAP") == 0) {
        f->softcap = 30.0f;
    } else if (strcmp(define, "FLASHCL_ALIBI") == 0) {
        f->alibi = 1, f->alibi_count = 8;
    } else if (strcmp(define, "FLASHCL_BIAS") == 0) {
        f->bias = 1;
    } else {
        return 0;
    }
    return 1;
}

/* "FLASHCL_BLOCK_MASK" -> "block_mask". */
static void variant_name(const char *define, char *out, size_t size) {
    if (strncmp(define, "FLASHCL_", 8) == 0) define += 8;
    size_t i = 0;
    for (; define[i] && i + 1 < size; ++i) out[i] = (char)tolower((unsigned char)define[i]);
    out[i] = '\0';
}

/* Builds already handed out (the same program and options reached from two rows or variants). */
typedef struct seen_builds {
    char keys[512][FLASHCL_BUILD_OPTIONS_CAPACITY + 64];
    int count;
} seen_builds;

static int first_time(seen_builds *seen, const kernel_build *b) {
    char key[sizeof seen->keys[0]];
    int used = 0;
    for (int i = 0; b->prelude[i] && used < (int)sizeof key; ++i)
        used += snprintf(key + used, sizeof key - (size_t)used, "%s ", b->prelude[i]);
    if (used < (int)sizeof key) snprintf(key + used, sizeof key - (size_t)used, "%s|%s", b->program, b->options);
    for (int i = 0; i < seen->count; ++i)
        if (strcmp(seen->keys[i], key) == 0) return 0;
    if (seen->count < (int)(sizeof seen->keys / sizeof seen->keys[0])) strcpy(seen->keys[seen->count++], key);
    return 1;
}

/* The build of row fam for one storage type, head dim and feature (define NULL: dense). */
static int plan_build(const flashcl_device_caps *caps, const family *fam, flashcl_dtype dtype, int head_dim,
                      const char *define, kernel_build *b, char *error, size_t error_size) {
    memset(b, 0, sizeof *b);
    char variant[32] = "dense";
    if (define) variant_name(define, variant, sizeof variant);
    if (fam->fixed_options) {
        b->program = fam->program;
        fam->fixed_options(caps, dtype, b->options, sizeof b->options);
        if (fam->vary & VARY_DTYPE)
            snprintf(b->id, sizeof b->id, "%s.%s", fam->name, dtype_names[dtype]);
        else
            snprintf(b->id, sizeof b->id, "%s", fam->name);
        return 0;
    }
    snprintf(b->id, sizeof b->id, "%s.%s.d%d.%s", fam->name, dtype_names[dtype], head_dim, variant);
    const flashcl_attention_desc desc = problem_desc(fam->shape, dtype, head_dim);
    flashcl_features f;
    if (flashcl_features_resolve(NULL, &desc, NULL, &f) != FLASHCL_SUCCESS) {
        snprintf(error, error_size, "%s: flashcl_features_resolve failed", b->id);
        return -1;
    }
    if (define && !switch_on(&f, define)) {
        snprintf(error, error_size, "feature %s has no case in kernel_families.c: add one", define);
        return -1;
    }
    flashcl_settings s;
    memset(&s, 0, sizeof s);
    s.impl = FLASHCL_IMPL_FLASH;
    s.tensor_cores = fam->tensor_cores;
    s.f32_precision = FLASHCL_F32_3XTF32; /* float on the matrix-unit kernels where the row asks for them */
    s.kv_splits = fam->kv_splits;
    /* Few-row calls go to the decode kernel unless the row is about another family. */
    s.decode_off = strcmp(fam->program, "decode.cl") != 0;
    const int paged = fam->shape == DECODE_KV_PAGED;
    const flashcl_problem problem = {fam->pass, &desc, &f, 8, 8, paged ? 2 : 0, paged};
    flashcl_exec_plan plan;
    char reason[512] = "";
    if (flashcl_dispatch(caps, &s, &problem, &plan, reason, sizeof reason) != FLASHCL_SUCCESS) {
        snprintf(error, error_size, "%s on %s: the dispatcher refused: %s", b->id, caps->name, reason);
        return -1;
    }
    if (!plan.kernel_names[fam->kernel]) {
        snprintf(error, error_size, "%s on %s: the plan has %d kernels, the row asks for kernel %d", b->id,
                 caps->name, plan.kernel_count, fam->kernel);
        return -1;
    }
    /* A kernel with a program of its own is built after common.cl alone, with aux_options (dispatch.h). */
    if (plan.kernel_programs[fam->kernel]) {
        b->program = plan.kernel_programs[fam->kernel];
        snprintf(b->options, sizeof b->options, "%s",
                 fam->kernel == FLASHCL_KERNEL_APPEND ? plan.append_options : plan.aux_options);
    } else {
        b->program = plan.program;
        for (int i = 0; i < 4 && plan.prelude[i]; ++i) b->prelude[i] = plan.prelude[i];
        snprintf(b->options, sizeof b->options, "%s", plan.options);
        b->planned_local_bytes = plan.tiles.local_mem_bytes;
    }
    if (!b->program || strcmp(b->program, fam->program) != 0) {
        snprintf(error, error_size, "%s on %s: the dispatcher chose %s, the row expects %s", b->id, caps->name,
                 b->program ? b->program : "no program", fam->program);
        return -1;
    }
    return 0;
}

/* Hands the build of (fam, dtype, head_dim, define) to sink once; the walk's return convention. */
static int visit(const flashcl_device_caps *caps, const family *fam, seen_builds *seen, int dtype, int head_dim,
                 const char *define, kernel_build_sink sink, void *user, char *error, size_t error_size) {
    kernel_build b;
    if (plan_build(caps, fam, (flashcl_dtype)dtype, head_dim, define, &b, error, error_size)) return -1;
    return first_time(seen, &b) ? sink(&b, user) : 0;
}

int kernel_families_walk(const flashcl_device_caps *caps, kernel_coverage coverage, kernel_build_sink sink,
                         void *user, char *error, size_t error_size) {
    static seen_builds seen;
    seen.count = 0;
    int feature_count = 0;
    const flashcl_feature_def *defs = flashcl_feature_defs(&feature_count);
    for (size_t r = 0; r < sizeof families / sizeof families[0]; ++r) {
        const family *fam = &families[r];
        int stop = 0;
        if (coverage == COVER_FAMILIES) {
            const int dtype = fam->vary & VARY_DTYPE ? FLASHCL_DTYPE_F16 : FLASHCL_DTYPE_F32;
            stop = visit(caps, fam, &seen, dtype, 128, NULL, sink, user, error, error_size);
            if (stop) return stop;
            continue;
        }
        const int dtypes = fam->vary & VARY_DTYPE ? 3 : 1;
        const int dims = fam->vary & VARY_HEAD_DIM ? 2 : 1;
        for (int dt = 0; dt < dtypes && !stop; ++dt)
            for (int d = 0; d < dims && !stop; ++d) {
                /* head_dims[1] is 128: the first target's pairs are (f16, 128) and (bf16, 64). */
                const int parity = coverage == COVER_VARIANTS_16BIT_SECOND;
                if (coverage != COVER_VARIANTS && dt != FLASHCL_DTYPE_F32 && dims == 2 && (dt + d + parity) % 2 != 0)
                    continue;
                stop = visit(caps, fam, &seen, dt, head_dims[d], NULL, sink, user, error, error_size);
            }
        /* Feature i alone at dtype i mod 3 and head dim 128, 64, 128, ...: each define's code compiled once per
         * family; the dense builds above cover the storage types and head dims. */
        for (int i = 0; (fam->vary & VARY_FEATURES) && i < feature_count && !stop; ++i)
            stop = visit(caps, fam, &seen, i % 3, head_dims[(i + 1) % 2], defs[i].define, sink, user, error,
                         error_size);
        if (stop) return stop;
    }
    return 0;
}
