/* disk_cache.c: the on-disk program cache: keys, loading a program from its stored binary, storing a built one,
 * and the counters flashcl_context_cache_stats reports. The file layout is cache_file.c's, the file-system calls
 * cache_fs.c's. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache_file.h"
#include "cache_fs.h"
#include "disk_cache.h"
#include "struct_abi.h"

/* No program binary of ours comes near this; a larger file is not one of ours. */
#define MAX_ENTRY_BYTES ((size_t)1 << 30)

struct flashcl_disk_cache {
    char *dir;
    char *device_key; /* the device half of every key */
};

static void note(flashcl_context *ctx, const char *format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void note(flashcl_context *ctx, const char *format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(ctx->cache_stats.note, sizeof ctx->cache_stats.note, format, args);
    va_end(args);
}

/* Appends "name=<length>:<value>\n" to *text (malloc'd, grown): the lengths make the key unambiguous whatever
 * the values contain. 0 out of memory (*text is then freed). */
static int append_field(char **text, const char *name, const char *value, size_t value_length) {
    const size_t old = *text ? strlen(*text) : 0;
    char prefix[96];
    const int prefix_length = snprintf(prefix, sizeof prefix, "%s=%zu:", name, value_length);
    char *grown = realloc(*text, old + (size_t)prefix_length + value_length + 2);
    if (!grown) {
        free(*text);
        *text = NULL;
        return 0;
    }
    memcpy(grown + old, prefix, (size_t)prefix_length);
    memcpy(grown + old + prefix_length, value, value_length);
    grown[old + (size_t)prefix_length + value_length] = '\n';
    grown[old + (size_t)prefix_length + value_length + 1] = '\0';
    *text = grown;
    return 1;
}

/* A device or platform string query appended as a key field; 0 if the query or memory fails. */
static int append_info(char **text, const char *name, cl_platform_id platform, cl_device_id device,
                       cl_uint param) {
    size_t size = 0;
    cl_int err = platform ? clGetPlatformInfo(platform, param, 0, NULL, &size)
                          : clGetDeviceInfo(device, param, 0, NULL, &size);
    char *value = err == CL_SUCCESS ? calloc(size + 1, 1) : NULL;
    if (!value) return 0;
    err = platform ? clGetPlatformInfo(platform, param, size, value, NULL)
                   : clGetDeviceInfo(device, param, size, value, NULL);
    const int ok = err == CL_SUCCESS && append_field(text, name, value, strlen(value));
    free(value);
    return ok;
}

static char *device_key(const flashcl_context *ctx) {
    static const char header[] = "flashcl program cache key";
    char *key = NULL;
    const int ok = append_field(&key, "format", header, sizeof header - 1) &&
                   append_info(&key, "platform", ctx->platform, NULL, CL_PLATFORM_NAME) &&
                   append_info(&key, "device", NULL, ctx->device, CL_DEVICE_NAME) &&
                   append_info(&key, "vendor", NULL, ctx->device, CL_DEVICE_VENDOR) &&
                   append_info(&key, "driver", NULL, ctx->device, CL_DRIVER_VERSION) &&
                   append_info(&key, "device-version", NULL, ctx->device, CL_DEVICE_VERSION);
    if (!ok) free(key);
    return ok ? key : NULL;
}

/* 1 when ctx runs on POCL with POCL's own kernel cache on (its default; POCL_KERNEL_CACHE=0 turns it off).
 * There the disk cache only costs: POCL keeps every build on disk itself, and reading a program's binary
 * back from POCL (which storing it needs) makes POCL compile every kernel of the program a second time,
 * for any work-group size, whether or not it is ever run: +60% on a cold test suite (docs/perf.md). */
static int driver_caches_itself(const flashcl_context *ctx) {
    char platform[64] = "";
    if (clGetPlatformInfo(ctx->platform, CL_PLATFORM_NAME, sizeof platform - 1, platform, NULL) != CL_SUCCESS)
        return 0;
    if (strcmp(platform, "Portable Computing Language") != 0) return 0;
    const char *pocl_cache = getenv("POCL_KERNEL_CACHE");
    return !pocl_cache || strcmp(pocl_cache, "0") != 0;
}

void flashcl_disk_cache_open(flashcl_context *ctx) {
    ctx->disk_cache = NULL;
    if (driver_caches_itself(ctx)) {
        note(ctx, "disk cache off: POCL caches its own builds (POCL_KERNEL_CACHE=0 turns that off and this on)");
        return;
    }
    const char *why = "";
    char *dir = flashcl_cache_fs_dir_from_env(&why);
    if (!dir) {
        note(ctx, "disk cache off: %s", why);
        return;
    }
    flashcl_disk_cache *cache = calloc(1, sizeof *cache);
    char *key = cache ? device_key(ctx) : NULL;
    if (!key) {
        note(ctx, "disk cache off: the device's name or versions could not be read");
        free(cache);
        free(dir);
        return;
    }
    cache->dir = dir;
    cache->device_key = key;
    ctx->disk_cache = cache;
    ctx->cache_stats.disk_enabled = 1;
}

void flashcl_disk_cache_close(flashcl_context *ctx) {
    if (!ctx->disk_cache) return;
    free(ctx->disk_cache->dir);
    free(ctx->disk_cache->device_key);
    free(ctx->disk_cache);
    ctx->disk_cache = NULL;
}

char *flashcl_disk_cache_key(const flashcl_context *ctx, const char *source, const char *options,
                             const char *variant) {
    if (!ctx->disk_cache) return NULL;
    const size_t source_length = strlen(source);
    unsigned char digest[FLASHCL_SHA256_BYTES];
    flashcl_sha256_of(source, source_length, digest);
    char source_field[2 * FLASHCL_SHA256_BYTES + 32];
    flashcl_sha256_hex(digest, FLASHCL_SHA256_BYTES, source_field);
    snprintf(source_field + 2 * FLASHCL_SHA256_BYTES, 32, " %zu bytes", source_length);
    const size_t device_length = strlen(ctx->disk_cache->device_key);
    char *key = malloc(device_length + 1);
    if (!key) return NULL;
    memcpy(key, ctx->disk_cache->device_key, device_length + 1);
    if (!append_field(&key, "source-sha256", source_field, strlen(source_field)) ||
        !append_field(&key, "options", options, strlen(options)))
        return NULL;
    /* Only a variant adds the field: the plain programs' keys, and so the entries already stored, stay as they
     * were. */
    if (variant && !append_field(&key, "variant", variant, strlen(variant))) return NULL;
    return key;
}

/* The entry's file name: the first 128 bits of the key's SHA-256. Two keys sharing a name only evict each
 * other (the full key is compared on load). */
static void entry_name(const char *key, char name[48]) {
    unsigned char digest[FLASHCL_SHA256_BYTES];
    flashcl_sha256_of(key, strlen(key), digest);
    flashcl_sha256_hex(digest, 16, name);
    strcat(name, ".clbin");
}

int flashcl_disk_cache_load(flashcl_context *ctx, const char *key, const char *options, cl_program *program) {
    char name[48];
    entry_name(key, name);
    char *path = flashcl_cache_fs_join(ctx->disk_cache->dir, name);
    if (!path) return 0;
    unsigned char *file = NULL;
    size_t size = 0;
    const int read_error = flashcl_cache_fs_read(path, MAX_ENTRY_BYTES, &file, &size);
    int loaded = 0;
    if (read_error == ENOENT || read_error == ENOTDIR) {
        /* a plain miss: no such file, or no such directory yet */
    } else if (read_error != 0) {
        ctx->cache_stats.disk_rejects++;
        note(ctx, "ignored %s: %s", path, strerror(read_error));
    } else {
        const unsigned char *binary = NULL;
        size_t binary_length = 0;
        const char *why = flashcl_cache_file_check(file, size, key, strlen(key), &binary, &binary_length);
        cl_int err = CL_SUCCESS, binary_status = CL_SUCCESS;
        cl_program built = NULL;
        if (!why) {
            built = clCreateProgramWithBinary(ctx->context, 1, &ctx->device, &binary_length, &binary,
                                              &binary_status, &err);
            if (err == CL_SUCCESS) err = clBuildProgram(built, 1, &ctx->device, options, NULL, NULL);
            if (err != CL_SUCCESS) why = "the driver refused the binary";
        }
        if (why) {
            if (built) clReleaseProgram(built);
            ctx->cache_stats.disk_rejects++;
            note(ctx, "ignored %s: %s%s%s; built from source", path, why, err != CL_SUCCESS ? " with " : "",
                 err != CL_SUCCESS ? flashcl_cl_error_name(err) : "");
        } else {
            ctx->cache_stats.disk_hits++;
            *program = built;
            loaded = 1;
        }
    }
    free(file);
    free(path);
    return loaded;
}

unsigned char *flashcl_program_binary(cl_program program, size_t *size) {
    cl_uint devices = 0;
    if (clGetProgramInfo(program, CL_PROGRAM_NUM_DEVICES, sizeof devices, &devices, NULL) != CL_SUCCESS ||
        devices != 1)
        return NULL;
    if (clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof *size, size, NULL) != CL_SUCCESS || *size == 0)
        return NULL;
    unsigned char *binary = malloc(*size);
    if (binary && clGetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof binary, &binary, NULL) != CL_SUCCESS) {
        free(binary);
        binary = NULL;
    }
    return binary;
}

void flashcl_disk_cache_store(flashcl_context *ctx, const char *key, cl_program program) {
    size_t binary_length = 0;
    unsigned char *binary = flashcl_program_binary(program, &binary_length);
    if (!binary) {
        note(ctx, "not stored: the driver gives no program binary");
        return;
    }
    const size_t key_length = strlen(key);
    unsigned char header[FLASHCL_CACHE_FILE_HEADER_BYTES];
    flashcl_cache_file_header(key_length, binary, binary_length, header);
    char name[48];
    entry_name(key, name);
    const void *parts[] = {header, key, binary};
    const size_t sizes[] = {sizeof header, key_length, binary_length};
    int error = flashcl_cache_fs_make_dirs(ctx->disk_cache->dir);
    if (error == 0) error = flashcl_cache_fs_write_atomic(ctx->disk_cache->dir, name, parts, sizes, 3);
    if (error == 0) {
        ctx->cache_stats.disk_writes++;
    } else {
        ctx->cache_stats.disk_write_failures++;
        note(ctx, "not stored in %s: %s", ctx->disk_cache->dir, strerror(error));
    }
    free(binary);
}

flashcl_status flashcl_context_cache_stats_sized(const flashcl_context *ctx, flashcl_cache_stats *stats,
                                                 size_t struct_size) {
    if (!ctx || !stats)
        return flashcl_fail(NULL, FLASHCL_ERROR_INVALID_ARGUMENT, "flashcl_context_cache_stats: %s is NULL",
                            ctx ? "stats" : "ctx");
    flashcl_cache_stats full = ctx->cache_stats;
    full.struct_size = sizeof full;
    /* Written up to the caller's size (struct_abi.h); a refusal's message goes where flashcl_last_error(NULL)
     * reads, as the context is const here. */
    return flashcl_struct_export(NULL, &flashcl_abi_cache_stats, &full, stats, struct_size);
}
