/* standard_rows.c: the row kernels of standard attention (cl/standard_softmax.cl) and the queue ordering around CLBlast. */
#include <stdio.h>

#include "standard.h"

/* Work-items per row: enough to stream a long row, few enough that short
 * rows do not leave most of the group idle. */
#define ROW_WORK_GROUP_TARGET 128

flashcl_status flashcl_standard_row_kernel(flashcl_context *ctx, const flashcl_attention_desc *desc,
                                           const char *name, cl_kernel *kernel, size_t *work_group) {
    size_t wg = ROW_WORK_GROUP_TARGET;
    while (wg > ctx->caps.limits.max_work_group_size && wg > 1) wg /= 2;
    /* The compiled kernel may allow less than the device: halve until it fits. */
    for (;; wg /= 2) {
        char options[96];
        snprintf(options, sizeof options, "-DFLASHCL_DTYPE=%d -DROW_WG=%zu", (int)desc->dtype, wg);
        flashcl_status status = flashcl_get_kernel(ctx, "standard_softmax.cl", name, options, kernel);
        if (status != FLASHCL_SUCCESS) return status;
        size_t allowed = 0;
        cl_int err = clGetKernelWorkGroupInfo(*kernel, ctx->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof allowed,
                                              &allowed, NULL);
        if (err != CL_SUCCESS) return flashcl_fail_cl(ctx, err, "clGetKernelWorkGroupInfo (standard softmax)");
        if (wg <= allowed || wg == 1) {
            *work_group = wg;
            return FLASHCL_SUCCESS;
        }
    }
}

flashcl_status flashcl_standard_gate(flashcl_context *ctx, cl_uint num_events, const cl_event *wait_list) {
    if (num_events == 0) return FLASHCL_SUCCESS;
    cl_int err = clEnqueueBarrierWithWaitList(ctx->queue, num_events, wait_list, NULL);
    return err == CL_SUCCESS ? FLASHCL_SUCCESS : flashcl_fail_cl(ctx, err, "clEnqueueBarrierWithWaitList (wait list)");
}

flashcl_status flashcl_standard_step(flashcl_context *ctx) {
    if (ctx->queue_in_order) return FLASHCL_SUCCESS;
    cl_int err = clEnqueueBarrierWithWaitList(ctx->queue, 0, NULL, NULL);
    return err == CL_SUCCESS ? FLASHCL_SUCCESS : flashcl_fail_cl(ctx, err, "clEnqueueBarrierWithWaitList (step)");
}

flashcl_status flashcl_standard_finish(flashcl_context *ctx, cl_event *event) {
    if (!event) return FLASHCL_SUCCESS;
    /* With an empty wait list a marker waits for every earlier command of the
     * queue, in-order or not: one event for CLBlast's kernels and ours. */
    cl_int err = clEnqueueMarkerWithWaitList(ctx->queue, 0, NULL, event);
    return err == CL_SUCCESS ? FLASHCL_SUCCESS : flashcl_fail_cl(ctx, err, "clEnqueueMarkerWithWaitList (event)");
}
