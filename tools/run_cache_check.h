/* run_cache_check.h: `flashcl run --check` of a KV-cache run: O and LSE against the CPU double reference over
 * exactly the rows each sequence attends to, and the caches after the call, bit-exact. */
#ifndef FLASHCL_TOOLS_RUN_CACHE_CHECK_H
#define FLASHCL_TOOLS_RUN_CACHE_CHECK_H

#include "run_bias.h"
#include "run_cache_inputs.h"
#include "run_options.h"
#include "run_score_mods.h"

/* What the device produced, as read back. */
typedef struct run_cache_results {
    const void *o;                 /* shaped and typed like Q */
    const float *lse;              /* (B, Hq, Sq) */
    const void *k_cache, *v_cache; /* after the call, shaped and typed like the cache files; NULL without new rows */
} run_cache_results;

/* Each sequence b through the reference alone: Q's rows of b against its
 * cache rows 0 .. cache_seqlens[b]-1 followed by the new rows (from the
 * input files, not the device's cache), causal and window aligned on
 * that length; a sequence with no rows is checked against the definition
 * (O 0, LSE -inf). With new rows, each cache after the call must equal
 * the input cache with the new rows written at cache_seqlens[b].. , every
 * other element unchanged, bit for bit. One line per comparison. 0 if
 * everything passed, -1 (after a message) if anything failed or memory
 * ran out. mods: the score modifiers (per-batch slopes are per sequence);
 * bias: --bias over the cache's key positions, of which sequence b's
 * reference takes its own plane's columns 0 .. its row count - 1 (none
 * without --bias). */
int run_cache_check(const run_options *options, const run_cache_inputs *inputs, const run_score_mods *mods,
                    const run_bias *bias, const run_cache_results *results);

#endif
