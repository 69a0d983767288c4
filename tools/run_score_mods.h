/* run_score_mods.h: `flashcl run`'s score modifiers (--softcap, --alibi-slopes, --alibi-max-bias): the slopes
 * file, what the library call and the --check reference take. */
#ifndef FLASHCL_TOOLS_RUN_SCORE_MODS_H
#define FLASHCL_TOOLS_RUN_SCORE_MODS_H

#include "attention_reference.h"
#include "flashcl.h"
#include "npy.h"
#include "run_options.h"

typedef struct run_score_mods {
    float softcap;     /* 0: none */
    float max_bias;    /* 0: slopes not from --alibi-max-bias */
    npy_array slopes;  /* --alibi-slopes: float32 (Hq,) or (B, Hq); empty otherwise */
    int per_batch;     /* the file is (B, Hq) */
    float *reference;  /* the slopes the reference uses: the file's, or llama.cpp's from max_bias; NULL: no ALiBi */
} run_score_mods;

/* Reads and checks --alibi-slopes against the call's batch (sequences with a packed batch) and query heads, and
 * prepares the reference's slopes. 0, or -1 after a message naming the file. */
int run_score_mods_load(const run_options *options, int batch, int heads_q, run_score_mods *mods);
void run_score_mods_free(run_score_mods *mods);

/* Sets extras' modifier fields (the slopes as a host array, valid while mods lives). */
void run_score_mods_extras(const run_score_mods *mods, flashcl_attention_extras *extras);

/* The reference's modifiers for batch element (or sequence) b run alone (batch 1): its row of per-batch slopes. */
void run_score_mods_reference(const run_score_mods *mods, int b, int heads_q, flashcl_reference_extras *extras);

/* The same for the whole batch at once. */
void run_score_mods_reference_all(const run_score_mods *mods, flashcl_reference_extras *extras);

/* One line describing the modifiers ("" when there are none) into out. */
void run_score_mods_describe(const run_options *options, const run_score_mods *mods, char *out, size_t size);

#endif
