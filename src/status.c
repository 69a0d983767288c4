/* status.c: status names, version queries and the last-error bookkeeping. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

/* The last error of a failed context creation, per thread (no context exists
 * to hold it). */
static _Thread_local char thread_error[FLASHCL_ERROR_CAPACITY];

unsigned flashcl_version_number(void) { return FLASHCL_VERSION_NUMBER; }

const char *flashcl_version_string(void) { return FLASHCL_VERSION_STRING; }

const char *flashcl_status_string(flashcl_status status) {
    switch (status) {
#define FLASHCL_STATUS_CASE(name, value, text) \
    case name:                                 \
        return text;
        FLASHCL_STATUS_LIST(FLASHCL_STATUS_CASE)
#undef FLASHCL_STATUS_CASE
    }
    return "unknown status";
}

flashcl_status flashcl_fail(flashcl_context *ctx, flashcl_status status, const char *format, ...) {
    char *target = ctx ? ctx->error : thread_error;
    va_list args;
    va_start(args, format);
    vsnprintf(target, FLASHCL_ERROR_CAPACITY, format, args);
    va_end(args);
    return status;
}

void flashcl_clear_error(flashcl_context *ctx) {
    if (ctx) ctx->error[0] = '\0';
}

const char *flashcl_last_error(const flashcl_context *ctx) { return ctx ? ctx->error : thread_error; }

const char *flashcl_last_build_log(const flashcl_context *ctx) {
    return (ctx && ctx->build_log) ? ctx->build_log : "";
}

const char *flashcl_cl_error_name(cl_int code) {
    switch (code) {
#define NAME(c) \
    case c:     \
        return #c;
        NAME(CL_SUCCESS) NAME(CL_DEVICE_NOT_FOUND) NAME(CL_DEVICE_NOT_AVAILABLE)
        NAME(CL_COMPILER_NOT_AVAILABLE) NAME(CL_MEM_OBJECT_ALLOCATION_FAILURE)
        NAME(CL_OUT_OF_RESOURCES) NAME(CL_OUT_OF_HOST_MEMORY) NAME(CL_PROFILING_INFO_NOT_AVAILABLE)
        NAME(CL_MEM_COPY_OVERLAP) NAME(CL_BUILD_PROGRAM_FAILURE) NAME(CL_MISALIGNED_SUB_BUFFER_OFFSET)
        NAME(CL_INVALID_VALUE) NAME(CL_INVALID_DEVICE_TYPE) NAME(CL_INVALID_PLATFORM)
        NAME(CL_INVALID_DEVICE) NAME(CL_INVALID_CONTEXT) NAME(CL_INVALID_QUEUE_PROPERTIES)
        NAME(CL_INVALID_COMMAND_QUEUE) NAME(CL_INVALID_HOST_PTR) NAME(CL_INVALID_MEM_OBJECT)
        NAME(CL_INVALID_BINARY) NAME(CL_INVALID_BUILD_OPTIONS) NAME(CL_INVALID_PROGRAM)
        NAME(CL_INVALID_PROGRAM_EXECUTABLE) NAME(CL_INVALID_KERNEL_NAME) NAME(CL_INVALID_KERNEL_DEFINITION)
        NAME(CL_INVALID_KERNEL) NAME(CL_INVALID_ARG_INDEX) NAME(CL_INVALID_ARG_VALUE)
        NAME(CL_INVALID_ARG_SIZE) NAME(CL_INVALID_KERNEL_ARGS) NAME(CL_INVALID_WORK_DIMENSION)
        NAME(CL_INVALID_WORK_GROUP_SIZE) NAME(CL_INVALID_WORK_ITEM_SIZE) NAME(CL_INVALID_GLOBAL_OFFSET)
        NAME(CL_INVALID_EVENT_WAIT_LIST) NAME(CL_INVALID_EVENT) NAME(CL_INVALID_OPERATION)
        NAME(CL_INVALID_BUFFER_SIZE) NAME(CL_INVALID_GLOBAL_WORK_SIZE)
#undef NAME
    default:
        return "unknown OpenCL error";
    }
}

flashcl_status flashcl_fail_cl(flashcl_context *ctx, cl_int code, const char *what) {
    flashcl_status status = FLASHCL_ERROR_OPENCL;
    if (code == CL_MEM_OBJECT_ALLOCATION_FAILURE || code == CL_OUT_OF_RESOURCES)
        status = FLASHCL_ERROR_OUT_OF_DEVICE_MEMORY;
    else if (code == CL_OUT_OF_HOST_MEMORY)
        status = FLASHCL_ERROR_OUT_OF_HOST_MEMORY;
    return flashcl_fail(ctx, status, "%s failed: %s (%d)", what, flashcl_cl_error_name(code), (int)code);
}

size_t flashcl_dtype_size(flashcl_dtype dtype) {
    switch (dtype) {
    case FLASHCL_DTYPE_F32:
        return 4;
    case FLASHCL_DTYPE_F16:
    case FLASHCL_DTYPE_BF16:
        return 2;
    }
    return 0;
}
