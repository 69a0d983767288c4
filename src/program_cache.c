/* program_cache.c: builds kernel programs with their -D options, once per context, option set and variant (plain,
 * or sm_90a through program_sm90a.c), from the disk cache's binary when it has one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "disk_cache.h"
#include "program_cache.h"
#include "program_sm90a.h"

#define MAX_KERNELS_PER_PROGRAM 8

struct flashcl_program_entry {
    char *file;    /* the cache key: every file after common.cl, space-separated */
    char *options;
    int sm90a;          /* 1: the program's sm_90a variant */
    char *unavailable;  /* a variant found unavailable: the build log saying why (program NULL), kept so a later
                           request answers at once, with the same log */
    cl_program program;
    int num_kernels;
    char kernel_names[MAX_KERNELS_PER_PROGRAM][64];
    cl_kernel kernels[MAX_KERNELS_PER_PROGRAM];
    flashcl_program_entry *next;
};

static void free_entry(flashcl_program_entry *e) {
    for (int i = 0; i < e->num_kernels; ++i) clReleaseKernel(e->kernels[i]);
    if (e->program) clReleaseProgram(e->program);
    free(e->file);
    free(e->options);
    free(e->unavailable);
    free(e);
}

void flashcl_program_cache_free(flashcl_context *ctx) {
    flashcl_program_entry *e = ctx->programs;
    while (e) {
        flashcl_program_entry *next = e->next;
        free_entry(e);
        e = next;
    }
    ctx->programs = NULL;
}

static char *copy_string(const char *s) {
    char *c = malloc(strlen(s) + 1);
    if (c) strcpy(c, s);
    return c;
}

char *flashcl_program_build_log(const flashcl_context *ctx, cl_program program) {
    size_t size = 0;
    if (clGetProgramBuildInfo(program, ctx->device, CL_PROGRAM_BUILD_LOG, 0, NULL, &size) != CL_SUCCESS) return NULL;
    char *log = malloc(size + 1);
    if (!log) return NULL;
    if (clGetProgramBuildInfo(program, ctx->device, CL_PROGRAM_BUILD_LOG, size, log, NULL) != CL_SUCCESS) size = 0;
    log[size] = '\0';
    return log;
}

static void keep_build_log(flashcl_context *ctx, cl_program program) {
    free(ctx->build_log);
    ctx->build_log = flashcl_program_build_log(ctx, program);
}

/* The options a program is built with: the kernel's own, then FLASHCL_BUILD_OPTIONS, which appends compiler
 * flags (tuning experiments such as -D switches) without a rebuild of the library. NVIDIA's driver 580 accepts
 * -cl-nv-maxrregcount=N without changing ptxas's register counts, and refuses -cl-nv-maxrregcount N (docs/perf.md,
 * "-cl-nv-maxrregcount 128 for the d64 wgmma forward"). The in-memory key stays the kernel's own options (the
 * variable is read once per build); the disk key is these. */
static char *full_build_options(const char *options) {
    const char *extra = getenv("FLASHCL_BUILD_OPTIONS");
    const int has_extra = extra && *extra;
    char *full = malloc(strlen(options) + (has_extra ? strlen(extra) + 1 : 0) + 1);
    if (full) sprintf(full, "%s%s%s", options, has_extra ? " " : "", has_extra ? extra : "");
    return full;
}

static flashcl_status build_from_source(flashcl_context *ctx, const char *source, const char *file,
                                        const char *options, const char *full_options, cl_program *program) {
    cl_int err;
    const char *sources[] = {source};
    *program = clCreateProgramWithSource(ctx->context, 1, sources, NULL, &err);
    if (err != CL_SUCCESS) return flashcl_fail_cl(ctx, err, "clCreateProgramWithSource");
    err = clBuildProgram(*program, 1, &ctx->device, full_options, NULL, NULL);
    if (err != CL_SUCCESS) {
        keep_build_log(ctx, *program);
        clReleaseProgram(*program);
        *program = NULL;
        return flashcl_fail(ctx, FLASHCL_ERROR_BUILD_FAILED,
                            "building %s with \"%s\" failed (%s); flashcl_last_build_log() has the log", file,
                            options, flashcl_cl_error_name(err));
    }
    ctx->cache_stats.source_builds++;
    return FLASHCL_SUCCESS;
}

/* A new entry's program: from the disk cache when it holds a usable binary, else built from source (and then
 * stored there). An sm_90a variant found unavailable is an entry too, without a program. */
static flashcl_status build_entry(flashcl_context *ctx, const char *const *prelude, const char *file,
                                  const char *key, const char *options, int sm90a, flashcl_program_entry **out) {
    char *source = NULL;
    flashcl_status status = flashcl_kernel_source(ctx, prelude, file, &source);
    if (status != FLASHCL_SUCCESS) return status;
    flashcl_program_entry *e = calloc(1, sizeof *e);
    char *full_options = full_build_options(options);
    if (!e || !full_options || !(e->file = copy_string(key)) || !(e->options = copy_string(options))) {
        free(source);
        free(full_options);
        if (e) free_entry(e);
        return flashcl_fail(ctx, FLASHCL_ERROR_OUT_OF_HOST_MEMORY, "out of host memory");
    }
    e->sm90a = sm90a;
    if (sm90a) {
        status = flashcl_sm90a_program(ctx, source, key, full_options, &e->program);
        if (status == FLASHCL_ERROR_UNSUPPORTED) {
            e->unavailable = copy_string(flashcl_last_build_log(ctx));
            if (e->unavailable) status = FLASHCL_SUCCESS; /* the caller answers UNSUPPORTED from the entry */
        }
    } else {
        char *disk_key = flashcl_disk_cache_key(ctx, source, full_options, NULL); /* NULL: cache off */
        if (!disk_key || !flashcl_disk_cache_load(ctx, disk_key, full_options, &e->program)) {
            status = build_from_source(ctx, source, file, options, full_options, &e->program);
            if (status == FLASHCL_SUCCESS && disk_key) flashcl_disk_cache_store(ctx, disk_key, e->program);
        }
        free(disk_key);
    }
    free(full_options);
    free(source);
    if (status != FLASHCL_SUCCESS) {
        free_entry(e);
        return status;
    }
    *out = e;
    return FLASHCL_SUCCESS;
}

/* Appends text to key (size bytes) at *used, counting what does not fit. */
static void key_append(char *key, size_t size, size_t *used, const char *text, const char *separator) {
    const int n = snprintf(*used < size ? key + *used : NULL, *used < size ? size - *used : 0, "%s%s", text, separator);
    if (n > 0) *used += (size_t)n;
}

/* A program's cache key: the files after common.cl, space-separated. */
static flashcl_status program_key(flashcl_context *ctx, const char *const *prelude, const char *file, char *key,
                                  size_t size) {
    size_t used = 0;
    for (int i = 0; prelude && prelude[i]; ++i) key_append(key, size, &used, prelude[i], " ");
    key_append(key, size, &used, file, "");
    if (used >= size)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "program source list too long (%s)", file);
    return FLASHCL_SUCCESS;
}

/* The kernel of the plain program or of its sm_90a variant (sm90a 1). */
static flashcl_status get_kernel(flashcl_context *ctx, const char *const *prelude, const char *file,
                                 const char *kernel_name, const char *options, int sm90a, cl_kernel *kernel) {
    char key[256];
    flashcl_status status = program_key(ctx, prelude, file, key, sizeof key);
    if (status != FLASHCL_SUCCESS) return status;
    flashcl_program_entry *e = ctx->programs;
    while (e && (strcmp(e->file, key) != 0 || strcmp(e->options, options) != 0 || e->sm90a != sm90a)) e = e->next;
    if (!e) {
        status = build_entry(ctx, prelude, file, key, options, sm90a, &e);
        if (status != FLASHCL_SUCCESS) return status;
        e->next = ctx->programs;
        ctx->programs = e;
    }
    if (e->unavailable) {
        char *log = copy_string(e->unavailable);
        if (log) {
            free(ctx->build_log);
            ctx->build_log = log;
        }
        /* The log's first line is the reason ("sm_90a variant of <key> unavailable: ..."). */
        const char *end = strchr(e->unavailable, '\n');
        return flashcl_fail(ctx, FLASHCL_ERROR_UNSUPPORTED, "%.*s (flashcl_last_build_log() has the detail)",
                            end ? (int)(end - e->unavailable) : (int)strlen(e->unavailable), e->unavailable);
    }
    for (int i = 0; i < e->num_kernels; ++i) {
        if (strcmp(e->kernel_names[i], kernel_name) == 0) {
            *kernel = e->kernels[i];
            return FLASHCL_SUCCESS;
        }
    }
    if (e->num_kernels == MAX_KERNELS_PER_PROGRAM || strlen(kernel_name) >= sizeof e->kernel_names[0])
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "kernel table full for %s", file);
    cl_int err;
    cl_kernel k = clCreateKernel(e->program, kernel_name, &err);
    if (err != CL_SUCCESS) return flashcl_fail_cl(ctx, err, "clCreateKernel");
    strcpy(e->kernel_names[e->num_kernels], kernel_name);
    e->kernels[e->num_kernels++] = k;
    *kernel = k;
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_get_kernel(flashcl_context *ctx, const char *file, const char *kernel_name,
                                  const char *options, cl_kernel *kernel) {
    return get_kernel(ctx, NULL, file, kernel_name, options, 0, kernel);
}

flashcl_status flashcl_get_program_kernel(flashcl_context *ctx, const char *const *prelude, const char *file,
                                          const char *kernel_name, const char *options, cl_kernel *kernel) {
    return get_kernel(ctx, prelude, file, kernel_name, options, 0, kernel);
}

flashcl_status flashcl_get_sm90a_kernel(flashcl_context *ctx, const char *const *prelude, const char *file,
                                        const char *kernel_name, const char *options, cl_kernel *kernel) {
    return get_kernel(ctx, prelude, file, kernel_name, options, 1, kernel);
}
