/* context.c: creating and releasing contexts, on a chosen device or the caller's queue. */
#include <stdlib.h>
#include <string.h>

#include "call_features.h"
#include "disk_cache.h"
#include "internal.h"
#include "struct_abi.h"
#include "wgmma_plan.h"

flashcl_status flashcl_context_options_init_sized(flashcl_context_options *options, size_t struct_size) {
    return flashcl_struct_init(&flashcl_abi_context_options, options, struct_size);
}

flashcl_status flashcl_device_limits_init_sized(flashcl_device_limits *limits, size_t struct_size) {
    return flashcl_struct_init(&flashcl_abi_device_limits, limits, struct_size);
}

flashcl_status flashcl_device_limits_reported(cl_device_id device, flashcl_device_limits *limits) {
    memset(limits, 0, sizeof *limits);
    limits->struct_size = sizeof *limits;
    cl_ulong local_mem = 0;
    size_t max_wg = 0;
    cl_uint units = 0;
    cl_int err = clGetDeviceInfo(device, CL_DEVICE_LOCAL_MEM_SIZE, sizeof local_mem, &local_mem, NULL);
    if (err == CL_SUCCESS) err = clGetDeviceInfo(device, CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof max_wg, &max_wg, NULL);
    if (err == CL_SUCCESS) err = clGetDeviceInfo(device, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof units, &units, NULL);
    if (err != CL_SUCCESS) return flashcl_fail_cl(NULL, err, "flashcl_query_device_limits: clGetDeviceInfo");
    limits->local_mem_bytes = (size_t)local_mem;
    limits->max_work_group_size = max_wg;
    limits->compute_units = units;
    /* The preferred multiple is a kernel property in OpenCL; the warp or
     * wavefront width is what it reports on GPUs. Vendors' extensions tell it
     * without building a kernel; otherwise assume 1 (CPUs) and let the
     * program cache refine nothing: the planner treats it as a hint only. */
    limits->preferred_work_group_multiple = 1;
    cl_device_type type = 0;
    clGetDeviceInfo(device, CL_DEVICE_TYPE, sizeof type, &type, NULL);
    if (type & CL_DEVICE_TYPE_GPU) limits->preferred_work_group_multiple = 32;
    limits->static_local_mem_bytes = limits->local_mem_bytes; /* device_caps.c finds NVIDIA's larger one */
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_query_device_limits_sized(cl_device_id device, flashcl_device_limits *limits,
                                                 size_t struct_size) {
    /* No context holds the detail: it goes where flashcl_last_error(NULL) reads. */
    if (!device || !limits)
        return flashcl_fail(NULL, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_query_device_limits: %s is NULL",
                            device ? "limits" : "device");
    /* The caps hold the limits with NVIDIA's static local memory, probed in a context of their own unless this
     * process already knows the device. */
    flashcl_device_caps caps;
    flashcl_status status = flashcl_device_caps_query(device, NULL, &caps);
    if (status != FLASHCL_SUCCESS) return status;
    return flashcl_struct_export(NULL, &flashcl_abi_device_limits, &caps.limits, limits, struct_size);
}

/* Everything after the queue is known: limits, name, kernel directory, disk cache. */
static flashcl_status finish_context(flashcl_context *ctx, const flashcl_context_options *options) {
    flashcl_status status = flashcl_device_caps_query(ctx->device, ctx->context, &ctx->caps);
    if (status != FLASHCL_SUCCESS) return status; /* its message names the failed query */
    /* Calls chain their kernels by queue order when it is in order, else by
     * events; an unanswered query takes the safe side (events). */
    cl_command_queue_properties props = 0;
    ctx->queue_in_order =
        clGetCommandQueueInfo(ctx->queue, CL_QUEUE_PROPERTIES, sizeof props, &props, NULL) == CL_SUCCESS &&
        (props & CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE) == 0;
    const char *dir = options ? options->kernel_dir : NULL;
    if (!dir || !*dir) dir = getenv("FLASHCL_KERNEL_DIR");
    if (dir && *dir) {
        ctx->kernel_dir = malloc(strlen(dir) + 1);
        if (!ctx->kernel_dir) return flashcl_fail(NULL, FLASHCL_ERROR_OUT_OF_HOST_MEMORY, "out of host memory");
        strcpy(ctx->kernel_dir, dir);
    }
    /* FLASHCL_WGMMA=0 or 1 turns the Hopper forward and backward off, or on wherever they apply, for the
     * context's calls (tests, A/B timing); anything else: where they were measured faster (wgmma_plan.h). */
    const char *wgmma = getenv("FLASHCL_WGMMA");
    ctx->wgmma = wgmma && (wgmma[0] == '0' || wgmma[0] == '1') && !wgmma[1]
                     ? (wgmma[0] == '1' ? FLASHCL_WGMMA_ON : FLASHCL_WGMMA_OFF)
                     : FLASHCL_WGMMA_AUTO;
    flashcl_disk_cache_open(ctx); /* cannot fail: without it programs are built from source */
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_context_create(flashcl_context **out, const flashcl_context_options *options) {
    if (!out) return flashcl_fail(NULL, FLASHCL_ERROR_INVALID_ARGUMENT, "out is NULL");
    *out = NULL;
    flashcl_context_options full_options;
    flashcl_status imported = flashcl_import_options(&options, &full_options);
    if (imported != FLASHCL_SUCCESS) return imported;
    flashcl_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return flashcl_fail(NULL, FLASHCL_ERROR_OUT_OF_HOST_MEMORY, "out of host memory");
    char error[FLASHCL_ERROR_CAPACITY] = "";
    flashcl_status status =
        flashcl_select_device(options ? options->device : NULL, &ctx->platform, &ctx->device, error, sizeof error);
    if (status != FLASHCL_SUCCESS) {
        flashcl_fail(NULL, status, "%s", error);
        goto fail;
    }
    cl_int err;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)ctx->platform, 0};
    ctx->context = clCreateContext(props, 1, &ctx->device, NULL, NULL, &err);
    if (err != CL_SUCCESS) {
        status = flashcl_fail_cl(NULL, err, "clCreateContext");
        goto fail;
    }
    cl_command_queue_properties qprops = (options && options->enable_profiling) ? CL_QUEUE_PROFILING_ENABLE : 0;
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif
    /* clCreateCommandQueue is the OpenCL 1.2 call that every ICD still accepts. */
    ctx->queue = clCreateCommandQueue(ctx->context, ctx->device, qprops, &err);
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
    if (err != CL_SUCCESS) {
        status = flashcl_fail_cl(NULL, err, "clCreateCommandQueue");
        goto fail;
    }
    status = finish_context(ctx, options);
    if (status != FLASHCL_SUCCESS) goto fail;
    *out = ctx;
    return FLASHCL_SUCCESS;
fail:
    flashcl_context_free(ctx);
    return status;
}

flashcl_status flashcl_context_create_from_queue(flashcl_context **out, cl_command_queue queue,
                                                 const flashcl_context_options *options) {
    if (!out) return flashcl_fail(NULL, FLASHCL_ERROR_INVALID_ARGUMENT, "out is NULL");
    *out = NULL;
    if (!queue) return flashcl_fail(NULL, FLASHCL_ERROR_INVALID_ARGUMENT, "queue is NULL");
    flashcl_context_options full_options;
    flashcl_status imported = flashcl_import_options(&options, &full_options);
    if (imported != FLASHCL_SUCCESS) return imported;
    flashcl_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return flashcl_fail(NULL, FLASHCL_ERROR_OUT_OF_HOST_MEMORY, "out of host memory");
    flashcl_status status;
    cl_int err = clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof ctx->context, &ctx->context, NULL);
    if (err == CL_SUCCESS) err = clGetCommandQueueInfo(queue, CL_QUEUE_DEVICE, sizeof ctx->device, &ctx->device, NULL);
    if (err == CL_SUCCESS)
        err = clGetDeviceInfo(ctx->device, CL_DEVICE_PLATFORM, sizeof ctx->platform, &ctx->platform, NULL);
    if (err != CL_SUCCESS) {
        ctx->context = NULL; /* not retained yet */
        status = flashcl_fail_cl(NULL, err, "querying the queue");
        goto fail;
    }
    clRetainContext(ctx->context);
    clRetainCommandQueue(queue);
    ctx->queue = queue;
    status = finish_context(ctx, options);
    if (status != FLASHCL_SUCCESS) goto fail;
    *out = ctx;
    return FLASHCL_SUCCESS;
fail:
    flashcl_context_free(ctx);
    return status;
}

void flashcl_context_free(flashcl_context *ctx) {
    if (!ctx) return;
    flashcl_program_cache_free(ctx);
    flashcl_alibi_cache_free(ctx);
    flashcl_split_cache_free(ctx);
    flashcl_disk_cache_close(ctx);
    /* CLBlast is left alone: its program cache is process-wide and its only
     * release call (CLBlastClearCache) empties it for every user in the
     * process. A cl_context that ran the standard baseline therefore stays
     * referenced by that cache until exit or until the application, which owns
     * the process, calls CLBlastClearCache itself (README, "CLBlast"). */
    if (ctx->queue) clReleaseCommandQueue(ctx->queue);
    if (ctx->context) clReleaseContext(ctx->context);
    free(ctx->kernel_dir);
    free(ctx->build_log);
    free(ctx);
}

cl_context flashcl_context_cl_context(const flashcl_context *ctx) { return ctx ? ctx->context : NULL; }
cl_command_queue flashcl_context_queue(const flashcl_context *ctx) { return ctx ? ctx->queue : NULL; }
cl_device_id flashcl_context_device(const flashcl_context *ctx) { return ctx ? ctx->device : NULL; }

flashcl_status flashcl_context_limits_sized(flashcl_context *ctx, flashcl_device_limits *limits, size_t struct_size) {
    if (!ctx) return flashcl_fail(NULL, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_context_limits: ctx is NULL");
    flashcl_clear_error(ctx);
    if (!limits) return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "limits is NULL");
    return flashcl_struct_export(ctx, &flashcl_abi_device_limits, &ctx->caps.limits, limits, struct_size);
}
