/* support_case.c: descriptors and element counts of a dense case. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support_case.h"

flashcl_attention_desc ts_case_desc(const ts_case *c, flashcl_dtype dtype) {
    flashcl_attention_desc d;
    flashcl_attention_desc_init(&d, c->batch, c->heads_q, c->seqlen_q, c->seqlen_k, c->head_dim);
    d.heads_kv = c->heads_kv;
    d.causal = c->causal;
    d.scale = c->scale;
    d.dtype = dtype;
    return d;
}

size_t ts_case_q_count(const ts_case *c) { return (size_t)c->batch * c->heads_q * c->seqlen_q * c->head_dim; }
size_t ts_case_kv_count(const ts_case *c) { return (size_t)c->batch * c->heads_kv * c->seqlen_k * c->head_dim; }
size_t ts_case_lse_count(const ts_case *c) { return (size_t)c->batch * c->heads_q * c->seqlen_q; }

/* FLASHCL_TEST_SWEEP: unset (every pair everywhere: a GPU, a single run), "diagonal" (rusticl) or "complement"
 * (POCL, in the suites that run on both; the top-level CMakeLists.txt sets both). */
enum { SWEEP_ALL, SWEEP_DIAGONAL, SWEEP_COMPLEMENT };

static int sweep_mode(void) {
    const char *sweep = getenv("FLASHCL_TEST_SWEEP");
    if (!sweep) return SWEEP_ALL;
    if (strcmp(sweep, "diagonal") == 0) return SWEEP_DIAGONAL;
    if (strcmp(sweep, "complement") == 0) return SWEEP_COMPLEMENT;
    return SWEEP_ALL;
}

int ts_sweep_takes_variant(int index, int variant, int variants) {
    return sweep_mode() != SWEEP_DIAGONAL || index % variants == variant;
}

int ts_sweep_takes(int index, flashcl_dtype dtype) { return ts_sweep_takes_variant(index, (int)dtype, 3); }

int ts_split_takes(int index, int variant, int variants) {
    switch (sweep_mode()) {
    case SWEEP_DIAGONAL: return index % variants == variant;
    case SWEEP_COMPLEMENT: return index % variants != variant;
    default: return 1;
    }
}

void ts_sweep_announce(const char *suite) {
    if (sweep_mode() == SWEEP_DIAGONAL)
        printf("%s: FLASHCL_TEST_SWEEP=diagonal: each sweep case runs in one of its variants "
               "(case i in storage type i %% 3, or variant i %% n of n), not in all; the other pairs run on the "
               "other implementation (docs/testing.md, \"Test time\")\n",
               suite);
    else if (sweep_mode() == SWEEP_COMPLEMENT)
        printf("%s: FLASHCL_TEST_SWEEP=complement: the split sweeps run here the pairs that the diagonal "
               "implementation does not (each pair once across the two); the other sweeps run whole "
               "(docs/testing.md, \"Test time\")\n",
               suite);
}
