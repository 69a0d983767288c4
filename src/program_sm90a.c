/* program_sm90a.c: the second compile step that gives a program sm_90a instructions on an H100 (NVIDIA's OpenCL
 * compiler targets sm_90 only): sm_90 build, PTX read back and rewritten, rebuilt from the PTX. Every failure is
 * "unavailable" with its reason, never an error of the caller's call: the mma.sync kernels remain. */
#include "program_sm90a.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "disk_cache.h"
#include "program_cache.h"
#include "ptx_entry.h"
#include "ptx_rewrite.h"

const char *flashcl_sm90a_device_refusal(const flashcl_device_caps *caps) {
    if (caps->vendor != FLASHCL_VENDOR_NVIDIA) return "the device is not an NVIDIA GPU";
    if (caps->compute_capability != 90) return "the device is not of compute capability 9.0 (sm_90a runs there only)";
    return NULL;
}

/* Refuses with FLASHCL_ERROR_UNSUPPORTED: the reason in the last error and, followed by the driver's log when
 * there is one, in the build log. */
static flashcl_status unavailable(flashcl_context *ctx, const char *label, const char *reason, char *driver_log) {
    static const char format[] = "sm_90a variant of %s unavailable: %s\n";
    const size_t log_length = driver_log ? strlen(driver_log) : 0;
    const int head = snprintf(NULL, 0, format, label, reason);
    char *log = head > 0 ? malloc((size_t)head + log_length + 1) : NULL;
    if (log) {
        snprintf(log, (size_t)head + 1, format, label, reason);
        if (driver_log) memcpy(log + head, driver_log, log_length + 1);
        free(ctx->build_log);
        ctx->build_log = log;
    }
    free(driver_log);
    return flashcl_fail(ctx, FLASHCL_ERROR_UNSUPPORTED,
                        "sm_90a variant of %s unavailable: %s (flashcl_last_build_log() has the detail)", label,
                        reason);
}

/* The sm_90 build of source. */
static flashcl_status build_sm90(flashcl_context *ctx, const char *source, const char *label,
                                 const char *full_options, cl_program *program) {
    cl_int err;
    const char *sources[] = {source};
    *program = clCreateProgramWithSource(ctx->context, 1, sources, NULL, &err);
    if (err != CL_SUCCESS) return unavailable(ctx, label, "clCreateProgramWithSource failed", NULL);
    err = clBuildProgram(*program, 1, &ctx->device, full_options, NULL, NULL);
    if (err != CL_SUCCESS) {
        char *log = flashcl_program_build_log(ctx, *program);
        clReleaseProgram(*program);
        *program = NULL;
        return unavailable(ctx, label, "its sm_90 build from source failed; the compiler's log follows", log);
    }
    ctx->cache_stats.source_builds++;
    return FLASHCL_SUCCESS;
}

/* The sm_90 program's PTX, rewritten. */
static flashcl_status rewritten_ptx(flashcl_context *ctx, cl_program sm90, const char *label,
                                    flashcl_ptx_rewrite *rewrite) {
    size_t size = 0;
    unsigned char *ptx = flashcl_program_binary(sm90, &size);
    if (!ptx) return unavailable(ctx, label, "the driver gives no PTX (CL_PROGRAM_BINARIES) of its sm_90 build", NULL);
    /* The driver's binary is the PTX text and NUL padding (H100, driver 580: 3186 bytes for a 3184-byte text);
     * the text alone is what the rebuild takes, so anything after its NUL, padding or not, stays out. */
    const flashcl_ptx_result result = flashcl_ptx_rewrite_sm90a((const char *)ptx, strnlen((const char *)ptx, size),
                                                                FLASHCL_PTX_MARKERS_REQUIRED, rewrite);
    free(ptx);
    if (result == FLASHCL_PTX_OUT_OF_MEMORY)
        return flashcl_fail(ctx, FLASHCL_ERROR_OUT_OF_HOST_MEMORY, "out of host memory (rewriting PTX)");
    if (result != FLASHCL_PTX_OK) {
        char reason[sizeof rewrite->reason + 96];
        snprintf(reason, sizeof reason, "the PTX rewrite refused the driver's PTX (%s: %s)",
                 flashcl_ptx_result_name(result), rewrite->reason);
        return unavailable(ctx, label, reason, NULL);
    }
    return FLASHCL_SUCCESS;
}

/* Where the options ask for it (-DFLASHCL_ENTRY_MAXNREG=N: kernels that use setmaxnreg), the rewritten PTX with a
 * .maxnreg N line in every entry header (ptx_entry.h), replacing rewrite's text. */
static flashcl_status capped_ptx(flashcl_context *ctx, const char *full_options, const char *label,
                                 flashcl_ptx_rewrite *rewrite) {
    const int maxnreg = flashcl_ptx_options_maxnreg(full_options);
    if (maxnreg == 0) return FLASHCL_SUCCESS;
    if (maxnreg < 0)
        return unavailable(ctx, label, "-DFLASHCL_ENTRY_MAXNREG= wants a register count from 24 to 255", NULL);
    flashcl_ptx_rewrite capped;
    const flashcl_ptx_result result = flashcl_ptx_cap_registers(rewrite->text, rewrite->length, maxnreg, &capped);
    if (result == FLASHCL_PTX_OUT_OF_MEMORY) {
        flashcl_ptx_rewrite_free(&capped);
        return flashcl_fail(ctx, FLASHCL_ERROR_OUT_OF_HOST_MEMORY, "out of host memory (capping PTX registers)");
    }
    if (result != FLASHCL_PTX_OK) {
        char reason[sizeof capped.reason + 96];
        snprintf(reason, sizeof reason, "the register cap could not be added to the PTX (%s: %s)",
                 flashcl_ptx_result_name(result), capped.reason);
        flashcl_ptx_rewrite_free(&capped);
        return unavailable(ctx, label, reason, NULL);
    }
    flashcl_ptx_rewrite_free(rewrite);
    *rewrite = capped;
    return FLASHCL_SUCCESS;
}

/* The program built from the rewritten PTX (with its NUL, as the driver's own binaries are passed back). */
static flashcl_status build_sm90a(flashcl_context *ctx, const flashcl_ptx_rewrite *rewrite, const char *label,
                                  const char *full_options, cl_program *program) {
    const size_t length = rewrite->length + 1;
    const unsigned char *binary = (const unsigned char *)rewrite->text;
    cl_int err, binary_status = CL_SUCCESS;
    *program = clCreateProgramWithBinary(ctx->context, 1, &ctx->device, &length, &binary, &binary_status, &err);
    if (err != CL_SUCCESS) {
        char reason[128];
        snprintf(reason, sizeof reason, "the driver refused the rewritten PTX (clCreateProgramWithBinary: %s)",
                 flashcl_cl_error_name(err));
        *program = NULL;
        return unavailable(ctx, label, reason, NULL);
    }
    err = clBuildProgram(*program, 1, &ctx->device, full_options, NULL, NULL);
    if (err != CL_SUCCESS) {
        char *log = flashcl_program_build_log(ctx, *program);
        clReleaseProgram(*program);
        *program = NULL;
        char reason[128];
        snprintf(reason, sizeof reason, "the build of the rewritten PTX failed (%s); the driver's log follows",
                 flashcl_cl_error_name(err));
        return unavailable(ctx, label, reason, log);
    }
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_sm90a_program(flashcl_context *ctx, const char *source, const char *label,
                                     const char *full_options, cl_program *program) {
    *program = NULL;
    if (!flashcl_ptx_source_has_marker(source))
        return unavailable(ctx, label, "its source has no \"" FLASHCL_PTX_MARKER_PREFIX "\" marker", NULL);
    const char *refusal = flashcl_sm90a_device_refusal(&ctx->caps);
    if (refusal) {
        char reason[sizeof ctx->caps.name + 160];
        if (ctx->caps.vendor == FLASHCL_VENDOR_NVIDIA)
            snprintf(reason, sizeof reason, "%s (%s, compute capability %d.%d)", refusal, ctx->caps.name,
                     ctx->caps.compute_capability / 10, ctx->caps.compute_capability % 10);
        else
            snprintf(reason, sizeof reason, "%s (%s)", refusal, ctx->caps.name);
        return unavailable(ctx, label, reason, NULL);
    }
    /* The stored entry is the rewritten program's binary, under a key of its own (the variant field). */
    char *disk_key = flashcl_disk_cache_key(ctx, source, full_options, FLASHCL_SM90A_VARIANT);
    if (disk_key && flashcl_disk_cache_load(ctx, disk_key, full_options, program)) {
        free(disk_key);
        return FLASHCL_SUCCESS;
    }
    cl_program sm90 = NULL;
    flashcl_ptx_rewrite rewrite;
    memset(&rewrite, 0, sizeof rewrite);
    flashcl_status status = build_sm90(ctx, source, label, full_options, &sm90);
    if (status == FLASHCL_SUCCESS) status = rewritten_ptx(ctx, sm90, label, &rewrite);
    if (status == FLASHCL_SUCCESS) status = capped_ptx(ctx, full_options, label, &rewrite);
    if (sm90) clReleaseProgram(sm90);
    if (status == FLASHCL_SUCCESS) status = build_sm90a(ctx, &rewrite, label, full_options, program);
    if (status == FLASHCL_SUCCESS && disk_key) flashcl_disk_cache_store(ctx, disk_key, *program);
    flashcl_ptx_rewrite_free(&rewrite);
    free(disk_key);
    return status;
}
