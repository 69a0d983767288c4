/* support_context.h: the one way a device suite gets a flashcl context, and how long one Check test may run. */
#ifndef FLASHCL_SUPPORT_CONTEXT_H
#define FLASHCL_SUPPORT_CONTEXT_H

#include "flashcl.h"

/* Seconds a Check test may run: a cold kernel build is ~1-3 s, a large case
 * plus its CPU reference a few more; CTest's TIMEOUT (900 s or more in every
 * area) sits above a suite's sum. Check enforces it only on a case that runs
 * in a child of its own (CK_FORK); under CTest the cases run unforked
 * (CK_FORK=no, top-level CMakeLists.txt) and CTest's TIMEOUT is the bound. */
#define TS_CASE_TIMEOUT 240

/* A context on the device FLASHCL_DEVICE names (CTest sets it per
 * implementation); fails the test with the library's message if none can be
 * created. Every context of a process wraps one shared queue (created once by
 * flashcl_context_create, released at exit): free each with
 * flashcl_context_free as usual; the queue is not the test's to release. */
flashcl_context *ts_context(void);

/* A context on a cl_context and queue of its own (flashcl_context_create), for a test that needs a second OpenCL
 * context beside ts_context's. */
flashcl_context *ts_context_own(void);

/* 1 when ctx's device is an NVIDIA GPU of compute capability 9.0 (where sm_90a code, the wgmma kernels, runs).
 * No Check assertion: a suite's main() may ask too. */
int ts_device_is_sm90(flashcl_context *ctx);

/* ts_context() with FLASHCL_WGMMA set to wgmma ("1": the wgmma kernels wherever they apply, "0": never) before the
 * context reads it, and the decode kernel off, so that few-row calls reach the tiled kernels. */
flashcl_context *ts_context_wgmma(const char *wgmma);

/* What ctx would run for a forward or backward of desc without extras (flashcl_explain_call), and what its
 * last call ran (flashcl_last_call_stats); either fails the test on an error. */
flashcl_call_stats ts_explain(flashcl_context *ctx, flashcl_pass pass, const flashcl_attention_desc *desc);
flashcl_call_stats ts_last_stats(flashcl_context *ctx);

#endif
