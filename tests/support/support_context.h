/* support_context.h: the one way a device suite gets a flashcl context, and how long one Check test may run. */
#ifndef FLASHCL_SUPPORT_CONTEXT_H
#define FLASHCL_SUPPORT_CONTEXT_H

#include "flashcl.h"

/* Seconds a Check test may run: a cold kernel build is ~1-3 s, a large case
 * plus its CPU reference a few more; CTest's TIMEOUT (900 s or more in every
 * area) sits above a suite's sum. */
#define TS_CASE_TIMEOUT 240

/* A context on the device FLASHCL_DEVICE names (CTest sets it per
 * implementation); fails the test with the library's message if none can be
 * created. */
flashcl_context *ts_context(void);

#endif
