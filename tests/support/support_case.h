/* support_case.h: the one dense attention case type; the backward suites extend it with a name and a placement. */
#ifndef FLASHCL_SUPPORT_CASE_H
#define FLASHCL_SUPPORT_CASE_H

#include <stddef.h>

#include "flashcl.h"

/* One dense attention problem's shape and input range. */
typedef struct ts_case {
    int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, causal;
    float scale;     /* 0: the default 1/sqrt(head_dim) */
    float amplitude; /* Q and K are uniform in [-amplitude, amplitude]; V (and dO) in [-1, 1] */
} ts_case;

/* The descriptor of c with storage type dtype. */
flashcl_attention_desc ts_case_desc(const ts_case *c, flashcl_dtype dtype);

/* Elements of Q (and O, dO, dQ), of K (V, dK, dV) and of LSE. */
size_t ts_case_q_count(const ts_case *c);
size_t ts_case_kv_count(const ts_case *c);
size_t ts_case_lse_count(const ts_case *c);

#endif
