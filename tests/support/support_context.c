/* support_context.c: the one way a device suite gets a flashcl context. */
#include "support_context.h"

#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Every context a suite asks for wraps one queue (and so one cl_context) that the process keeps until exit.
 * Each flashcl context is still a context of its own (its programs, settings, statistics and errors), made by
 * flashcl_context_create_from_queue, the call an embedding application makes. Why one cl_context: POCL gives each
 * cl_context an LLVM context of its own and loads its kernel library into it again (about 0.4 s), so a suite that
 * made a fresh cl_context per case paid that per case, 5-12 s of a cold POCL suite (docs/perf.md, "Test time").
 * The anchor is made by flashcl_context_create on the device FLASHCL_DEVICE names; a suite that changes
 * FLASHCL_DEVICE between calls gets a fresh anchor for the new name, and a child forked after the anchor was made
 * (Check's CK_FORK=yes) makes its own: an OpenCL context does not survive fork (the driver's threads stay in the
 * parent), so the child leaves the inherited one alone. That helps only a child whose parent had not started the
 * driver at all beyond this anchor; no suite forks after using OpenCL in its parent (the forking suites call
 * ts_context only inside their cases). */
static pthread_mutex_t anchor_lock = PTHREAD_MUTEX_INITIALIZER;
static flashcl_context *anchor;
static char *anchor_device; /* FLASHCL_DEVICE when the anchor was made; NULL: unset */
static int release_registered;
static pid_t anchor_pid; /* the process that made the anchor */
static flashcl_context *inherited; /* a forked child's copy of the parent's anchor: kept reachable, never used */

static void release_anchor(void) {
    if (anchor && anchor_pid != getpid()) return; /* a forked child's exit: the anchor is the parent's */
    flashcl_context_free(anchor);
    anchor = NULL;
    free(anchor_device);
    anchor_device = NULL;
}

static int same_device_name(const char *a, const char *b) { return (!a && !b) || (a && b && strcmp(a, b) == 0); }

/* The process's shared queue for the device FLASHCL_DEVICE names now, retained for the caller (who releases it
 * once a context holds it); NULL with *status set on failure. */
static cl_command_queue shared_queue(flashcl_status *status) {
    const char *device = getenv("FLASHCL_DEVICE");
    pthread_mutex_lock(&anchor_lock);
    if (anchor && anchor_pid != getpid()) {
        inherited = anchor; /* the parent's: neither used nor released here */
        anchor = NULL;
        free(anchor_device);
        anchor_device = NULL;
    }
    if (anchor && !same_device_name(device, anchor_device)) release_anchor();
    *status = FLASHCL_SUCCESS;
    if (!anchor) {
        *status = flashcl_context_create(&anchor, NULL);
        anchor_pid = getpid();
        if (*status == FLASHCL_SUCCESS && device) anchor_device = strdup(device);
        if (*status == FLASHCL_SUCCESS && !release_registered) release_registered = atexit(release_anchor) == 0;
    }
    /* Retained under the lock: another thread that changes FLASHCL_DEVICE may release the anchor as soon as the
     * lock is free. The caller releases it. */
    cl_command_queue queue = anchor ? flashcl_context_queue(anchor) : NULL;
    if (queue && clRetainCommandQueue(queue) != CL_SUCCESS) queue = NULL;
    pthread_mutex_unlock(&anchor_lock);
    return queue;
}

flashcl_context *ts_context(void) {
    flashcl_status status;
    cl_command_queue queue = shared_queue(&status);
    ck_assert_msg(status == FLASHCL_SUCCESS && queue, "flashcl_context_create: %s: %s",
                  flashcl_status_string(status), flashcl_last_error(NULL));
    flashcl_context *ctx = NULL;
    status = flashcl_context_create_from_queue(&ctx, queue, NULL); /* retains the queue itself */
    clReleaseCommandQueue(queue);
    ck_assert_msg(status == FLASHCL_SUCCESS && ctx, "flashcl_context_create_from_queue: %s: %s",
                  flashcl_status_string(status), flashcl_last_error(NULL));
    return ctx;
}

/* cl_nv_device_attribute_query: NVIDIA's compute capability. */
#define COMPUTE_CAPABILITY_MAJOR_NV 0x4000
#define COMPUTE_CAPABILITY_MINOR_NV 0x4001

int ts_device_is_sm90(flashcl_context *ctx) {
    cl_device_id device = flashcl_context_device(ctx);
    char vendor[256] = "";
    if (clGetDeviceInfo(device, CL_DEVICE_VENDOR, sizeof vendor - 1, vendor, NULL) != CL_SUCCESS) return 0;
    if (!strstr(vendor, "NVIDIA")) return 0;
    cl_uint major = 0, minor = 0;
    if (clGetDeviceInfo(device, COMPUTE_CAPABILITY_MAJOR_NV, sizeof major, &major, NULL) != CL_SUCCESS ||
        clGetDeviceInfo(device, COMPUTE_CAPABILITY_MINOR_NV, sizeof minor, &minor, NULL) != CL_SUCCESS)
        return 0;
    return major == 9 && minor == 0;
}

flashcl_context *ts_context_wgmma(const char *wgmma) {
    ck_assert_int_eq(setenv("FLASHCL_WGMMA", wgmma, 1), 0);
    flashcl_context *ctx = ts_context();
    ck_assert_int_eq(flashcl_context_set_decode_kernel(ctx, 0), FLASHCL_SUCCESS);
    return ctx;
}

flashcl_context *ts_context_own(void) {
    flashcl_context *ctx = NULL;
    flashcl_status status = flashcl_context_create(&ctx, NULL);
    ck_assert_msg(status == FLASHCL_SUCCESS && ctx, "flashcl_context_create: %s: %s", flashcl_status_string(status),
                  flashcl_last_error(NULL));
    return ctx;
}

flashcl_call_stats ts_explain(flashcl_context *ctx, flashcl_pass pass, const flashcl_attention_desc *desc) {
    flashcl_call_stats s;
    ck_assert_msg(flashcl_explain_call(ctx, pass, desc, NULL, &s) == FLASHCL_SUCCESS, "flashcl_explain_call: %s",
                  flashcl_last_error(ctx));
    return s;
}

flashcl_call_stats ts_last_stats(flashcl_context *ctx) {
    flashcl_call_stats s;
    ck_assert_int_eq(flashcl_last_call_stats(ctx, &s), FLASHCL_SUCCESS);
    return s;
}
