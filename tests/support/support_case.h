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

/* Whether a sweep of cases x storage types runs case `index` in `dtype` on this device. Every pair, unless
 * FLASHCL_TEST_SWEEP=diagonal (the top-level CMakeLists.txt sets it for rusticl): then case i runs in storage
 * type i % 3 only, so every case and every type still runs there while the full cross product runs on POCL.
 * For sweeps whose every pair is a kernel build of its own (docs/testing.md, "Test time"). */
int ts_sweep_takes(int index, flashcl_dtype dtype);

/* The same rule for a sweep of cases x `variants` variants of another kind (two 16-bit storage types, say):
 * case `index` in `variant` (0 .. variants - 1); under FLASHCL_TEST_SWEEP=diagonal only variant index % variants. */
int ts_sweep_takes_variant(int index, int variant, int variants);

/* For sweeps split between the two CPU implementations: pair (index, variant) of a sweep of cases x `variants`
 * variants runs on exactly one of them. Under FLASHCL_TEST_SWEEP=diagonal (rusticl) the pairs with
 * index % variants == variant, under FLASHCL_TEST_SWEEP=complement (POCL) the others, so the two together run
 * every pair once, and where the variant follows the case (a sweep of cases x types) each implementation still
 * meets every case and every variant; every pair where the variable is unset (a GPU). A list of cases that are
 * each a build of their own splits as variants = 2, variant 0: even cases on rusticl, odd ones on POCL, so there
 * each case runs on one implementation (docs/testing.md, "Test time"). */
int ts_split_takes(int index, int variant, int variants);

/* The line a suite prints once when FLASHCL_TEST_SWEEP=diagonal thins its sweeps, so that the cases it did not
 * run are said, not hidden; nothing otherwise. */
void ts_sweep_announce(const char *suite);

#endif
