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

static int sweep_is_diagonal(void) {
    const char *sweep = getenv("FLASHCL_TEST_SWEEP");
    return sweep && strcmp(sweep, "diagonal") == 0;
}

int ts_sweep_takes_variant(int index, int variant, int variants) {
    return !sweep_is_diagonal() || index % variants == variant;
}

int ts_sweep_takes(int index, flashcl_dtype dtype) { return ts_sweep_takes_variant(index, (int)dtype, 3); }

void ts_sweep_announce(const char *suite) {
    if (sweep_is_diagonal())
        printf("%s: FLASHCL_TEST_SWEEP=diagonal: each sweep case runs in one of its variants "
               "(case i in storage type i %% 3, or variant i %% n of n), not in all; the full cross product runs on "
               "the other devices\n",
               suite);
}
