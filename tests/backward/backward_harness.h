/* backward_harness.h: what the backward suites share: cases, device buffers with canaries, the tolerance rule. */
#ifndef FLASHCL_BACKWARD_HARNESS_H
#define FLASHCL_BACKWARD_HARNESS_H

#include <stddef.h>

#include "flashcl.h"

/* A timeout per test well above a cold kernel build on either implementation. */
#define BWD_TCASE_TIMEOUT 240

typedef struct bwd_case {
    const char *name;
    int batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, causal;
    flashcl_layout layout;
    size_t offset;     /* elements before every tensor's view in its buffer */
    float input_scale; /* inputs are uniform in [-input_scale, input_scale] */
} bwd_case;

/* Host arrays, all contiguous BHSD. */
typedef struct bwd_host {
    float *q, *k, *v, *dout;
    float *o, *lse, *dq, *dk, *dv; /* read back from the device */
} bwd_host;

/* Device buffers of one case; every view starts `offset` elements in and is
 * followed by a canary region, outputs are poisoned before each call. */
typedef struct bwd_device {
    cl_mem q, k, v, dout, o, lse, dq, dk, dv;
    flashcl_tensor tq, tk, tv, tdout, to, tlse, tdq, tdk, tdv;
} bwd_device;

flashcl_context *bwd_context(void);
void bwd_desc(const bwd_case *c, flashcl_attention_desc *desc);
size_t bwd_q_count(const bwd_case *c);
size_t bwd_kv_count(const bwd_case *c);
size_t bwd_lse_count(const bwd_case *c);

/* Random inputs (fixed seed) and room for the outputs. */
void bwd_host_alloc(const bwd_case *c, unsigned seed, bwd_host *h);
void bwd_host_free(bwd_host *h);

/* Buffers with the inputs written in c's layout and poisoned outputs. */
void bwd_device_create(flashcl_context *ctx, const bwd_case *c, const bwd_host *h, bwd_device *d);
void bwd_device_free(bwd_device *d);
/* Fills dq, dk, dv (view, prefix and canary) with the poison pattern. */
void bwd_poison_gradients(flashcl_context *ctx, const bwd_case *c, bwd_device *d);
/* Forward (o, lse) then backward on the device, waiting for the result. */
flashcl_status bwd_run_forward(flashcl_context *ctx, const bwd_case *c, bwd_device *d);
flashcl_status bwd_run_backward(flashcl_context *ctx, const bwd_case *c, bwd_device *d);
/* Reads o, lse, dq, dk, dv into h (BHSD), asserting that every element of the
 * gradients was written and that nothing before or after a view changed. */
void bwd_read_results(flashcl_context *ctx, const bwd_case *c, bwd_device *d, bwd_host *h);
/* Asserts that dq, dk, dv still hold only the poison pattern (nothing written). */
void bwd_assert_gradients_untouched(flashcl_context *ctx, const bwd_case *c, bwd_device *d);

/* The whole check of h's gradients against the double reference: the
 * tolerance rule against the float reference's error (k = 5 for dQ, 4 for
 * dK, 3 for dV; 5 for all with large logits), relative error <= 5e-4, no
 * NaN, exact zeros in dQ's fully masked rows. */
void bwd_check_gradients(const bwd_case *c, const bwd_host *h);

/* c's problem in f16 or bf16 storage (c must be BHSD without offset) on ctx:
 * forward, backward, and every gradient within `ulps` storage ulps (half:
 * 2^-11, bf16: 2^-8) of its largest magnitude against the double reference
 * on the rounded inputs. */
void bwd_check_storage(flashcl_context *ctx, const bwd_case *c, flashcl_dtype dtype, double ulps);

/* Forward, backward, read back and check, on ctx (bwd_run_and_check_on) or
 * on a fresh context. A forced plan
 * may be given (NULL: the planner's). */
void bwd_run_and_check_on(flashcl_context *ctx, const bwd_case *c);
void bwd_run_and_check(const bwd_case *c, const flashcl_plan *forced);

#endif
