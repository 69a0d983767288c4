/* support_case.c: descriptors and element counts of a dense case. */
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
