/* call_features.c: the features of a call as one table (name, whether a call uses it, the define its kernels are
 * built with) and what is derived from it: "any feature", the first one's name, the -D options. Reading the
 * features from a call is feature_resolve.c, checking their buffers feature_checks.c, their kernel arguments
 * feature_args.c, the packed batch's offsets feature_varlen.c, a block mask's tile summaries feature_tile_mask.c. */
#include "call_features.h"

#include <stdio.h>
#include <string.h>

static int window_on(const flashcl_features *f) { return f->window; }
static int block_mask_on(const flashcl_features *f) { return f->block_mask; }
static int dropout_on(const flashcl_features *f) { return f->dropout; }
static int varlen_on(const flashcl_features *f) { return f->varlen.on; }
static int softcap_on(const flashcl_features *f) { return f->softcap > 0.0f; }
static int alibi_on(const flashcl_features *f) { return f->alibi; }
static int bias_on(const flashcl_features *f) { return f->bias; }

/* Every feature, once: its name in messages, whether a call uses it, the
 * define its kernels are built with, whether the portable forward's split-KV
 * and the tensor-core kernels take it. Which kernel families take features is
 * the dispatcher's decision (today: the portable kernels take all of them, the
 * decode kernels the window, the score modifiers and the bias (forward only),
 * the tensor-core kernels, the Hopper forward among them, the score modifiers and the bias);
 * the IO model (io_model.c) counts the window's band, and counts a block
 * mask and a packed batch as dense and padded (their contents live on the
 * device): an upper bound. */
static const flashcl_feature_def feature_table[] = {
    {"sliding window", window_on, "FLASHCL_WINDOW", 0, 0},
    {"block mask", block_mask_on, "FLASHCL_BLOCK_MASK", 0, 0},
    {"dropout", dropout_on, "FLASHCL_DROPOUT", 0, 0},
    {"variable-length batch", varlen_on, "FLASHCL_VARLEN", 0, 0},
    /* The score modifiers change each score where it is computed, whatever
     * the tiles or the key chunk: split-KV and the tensor-core kernels, the Hopper backward among them, take them. */
    {"logit soft-capping", softcap_on, "FLASHCL_SOFTCAP", 1,
     FLASHCL_TC_FORWARD | FLASHCL_TC_BACKWARD | FLASHCL_TC_WGMMA | FLASHCL_TC_WGMMA_BACKWARD},
    {"ALiBi", alibi_on, "FLASHCL_ALIBI", 1,
     FLASHCL_TC_FORWARD | FLASHCL_TC_BACKWARD | FLASHCL_TC_WGMMA | FLASHCL_TC_WGMMA_BACKWARD},
    /* The bias is read where each score is: split-KV, the decode kernels and the tensor-core kernels take it; both
     * backward families' dQ kernels write its gradient (dBias). */
    {"attention bias", bias_on, "FLASHCL_BIAS", 1,
     FLASHCL_TC_FORWARD | FLASHCL_TC_BACKWARD | FLASHCL_TC_WGMMA | FLASHCL_TC_WGMMA_BACKWARD},
};

const flashcl_feature_def *flashcl_feature_defs(int *count) {
    *count = (int)(sizeof feature_table / sizeof feature_table[0]);
    return feature_table;
}

int flashcl_features_any(const flashcl_features *f) { return flashcl_features_first(f) != NULL; }

const char *flashcl_features_first(const flashcl_features *f) {
    for (size_t i = 0; i < sizeof feature_table / sizeof feature_table[0]; ++i)
        if (feature_table[i].on(f)) return feature_table[i].name;
    return NULL;
}

/* 1 if every feature f uses names `kernel` (a FLASHCL_TC_* bit) among the tensor-core kernels that take it. */
static int features_taken_by(const flashcl_features *f, int kernel) {
    for (size_t i = 0; i < sizeof feature_table / sizeof feature_table[0]; ++i)
        if (feature_table[i].on(f) && !(feature_table[i].tensor_core & kernel)) return 0;
    return 1;
}

int flashcl_features_tensor_core(const flashcl_features *f, flashcl_pass pass) {
    return features_taken_by(f, pass == FLASHCL_PASS_FORWARD ? FLASHCL_TC_FORWARD : FLASHCL_TC_BACKWARD);
}

int flashcl_features_wgmma(const flashcl_features *f, flashcl_pass pass) {
    return features_taken_by(f, pass == FLASHCL_PASS_FORWARD ? FLASHCL_TC_WGMMA : FLASHCL_TC_WGMMA_BACKWARD);
}

int flashcl_features_block_split(const flashcl_features *f) {
    for (size_t i = 0; i < sizeof feature_table / sizeof feature_table[0]; ++i)
        if (feature_table[i].on(f) && !feature_table[i].split_kv) return 1;
    return 0;
}

void flashcl_features_options(const flashcl_features *f, char *options, size_t size) {
    size_t used = strlen(options);
    for (size_t i = 0; i < sizeof feature_table / sizeof feature_table[0] && used < size; ++i)
        if (feature_table[i].on(f))
            used += (size_t)snprintf(options + used, size - used, " -D%s=1", feature_table[i].define);
    /* The bias's element type where it is not the storage type: float32 beside half or bfloat16 data. */
    if (f->bias_f32 && used < size) snprintf(options + used, size - used, " -DFLASHCL_BIAS_F32=1");
}
