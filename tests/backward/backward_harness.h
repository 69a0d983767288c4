/* backward_harness.h: what only the backward suites need, built on tests/support: named placed cases, forward + backward on poisoned tensors, the gradients' rule. */
#ifndef FLASHCL_BACKWARD_HARNESS_H
#define FLASHCL_BACKWARD_HARNESS_H

#include <stddef.h>

#include "flashcl.h"
#include "test_support.h" /* the shared library this builds on */

/* The shared case type plus what the backward suites sweep on top of it:
 * a name for messages and where every tensor's view lies in its buffer. */
typedef struct bwd_case {
    const char *name;
    ts_case shape;         /* shape.amplitude: Q and K uniform in [-amplitude, amplitude] */
    flashcl_layout layout; /* of every tensor but LSE */
    size_t offset;         /* elements before every tensor's view in its buffer */
} bwd_case;

/* Host arrays, all contiguous BHSD. */
typedef struct bwd_host {
    float *q, *k, *v, *dout;
    float *o, *lse, *dq, *dk, *dv; /* read back from the device */
} bwd_host;

/* Device tensors of one case, each view `offset` elements in and followed by
 * the shared canary; outputs start poisoned. */
typedef struct bwd_device {
    ts_tensor q, k, v, dout, o, lse, dq, dk, dv;
} bwd_device;

/* c's float descriptor. */
void bwd_desc(const bwd_case *c, flashcl_attention_desc *desc);

/* Random inputs from seed (Q, K scaled by the amplitude; V, dO in [-1, 1])
 * and room for the outputs. */
void bwd_host_alloc(const bwd_case *c, uint64_t seed, bwd_host *h);
void bwd_host_free(bwd_host *h);

/* Tensors with the inputs written in c's layout and poisoned outputs. */
void bwd_device_create(flashcl_context *ctx, const bwd_case *c, const bwd_host *h, bwd_device *d);
void bwd_device_free(bwd_device *d);
/* Refills dq, dk, dv (view, prefix and canary) with the poison. */
void bwd_poison_gradients(flashcl_context *ctx, bwd_device *d);
/* Forward (o, lse) then backward on the device, waiting for the result. */
flashcl_status bwd_run_forward(flashcl_context *ctx, const bwd_case *c, bwd_device *d);
flashcl_status bwd_run_backward(flashcl_context *ctx, const bwd_case *c, bwd_device *d);
/* Reads o, lse, dq, dk, dv into h (BHSD), asserting that every element of
 * each view was written and that nothing outside a view changed. */
void bwd_read_results(flashcl_context *ctx, bwd_device *d, bwd_host *h);
/* Asserts that dq, dk, dv still hold only the poison (nothing written). */
void bwd_assert_gradients_untouched(flashcl_context *ctx, bwd_device *d);

/* The whole check of h's gradients against the double reference: the
 * tolerance rule against the float reference's error (k = 5 for dQ, 4 for
 * dK, 3 for dV; 5 for all with large logits), relative error <= 5e-4, no
 * NaN, exact zeros in dQ's fully masked rows. */
void bwd_check_gradients(const bwd_case *c, const bwd_host *h);

/* c's problem in f16 or bf16 storage on ctx: forward, backward, every
 * output written exactly, and every gradient within `ulps` storage ulps
 * (half: 2^-11, bf16: 2^-8) of its largest magnitude against the double
 * reference on the rounded inputs. */
void bwd_check_storage(flashcl_context *ctx, const bwd_case *c, flashcl_dtype dtype, double ulps);
/* The same through flashcl_forward_ex / flashcl_backward_ex with extras (the score modifiers, say; NULL: none),
 * judged against the reference with mods (NULL: none), which must describe the same modifiers. */
void bwd_check_storage_ex(flashcl_context *ctx, const bwd_case *c, flashcl_dtype dtype, double ulps,
                          const flashcl_attention_extras *extras, const flashcl_reference_extras *mods);

/* Forward, backward, read back and check, on ctx (bwd_run_and_check_on) or
 * on a fresh context. A forced plan may be given (NULL: the planner's). */
void bwd_run_and_check_on(flashcl_context *ctx, const bwd_case *c);
void bwd_run_and_check(const bwd_case *c, const flashcl_plan *forced);

#endif
