/* kernel_source.c: assembles a program's source (common.cl, the files the dispatcher places before the kernel
 * file, the kernel file), embedded or from disk. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kernel_source.h"
#include "program_cache.h"

static char *read_file(const char *dir, const char *name, size_t *length) {
    size_t path_len = strlen(dir) + 1 + strlen(name) + 1;
    char *path = malloc(path_len);
    if (!path) return NULL;
    snprintf(path, path_len, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    free(path);
    if (!f) return NULL;
    char *text = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long size = ftell(f);
        if (size >= 0 && fseek(f, 0, SEEK_SET) == 0) {
            text = malloc((size_t)size + 1);
            if (text && fread(text, 1, (size_t)size, f) != (size_t)size) {
                free(text);
                text = NULL;
            }
            if (text) {
                text[size] = '\0';
                *length = (size_t)size;
            }
        }
    }
    fclose(f);
    return text;
}

static const char *find_embedded(const char *name) {
    for (const flashcl_embedded_kernel *k = flashcl_embedded_kernels; k->name; ++k)
        if (strcmp(k->name, name) == 0) return k->text;
    return NULL;
}

/* One source file as a malloc'd string, from ctx's kernel directory if set. */
static flashcl_status load_one(flashcl_context *ctx, const char *name, char **text, size_t *length) {
    if (ctx->kernel_dir) {
        *text = read_file(ctx->kernel_dir, name, length);
        if (!*text)
            return flashcl_fail(ctx, FLASHCL_ERROR_KERNEL_SOURCE, "cannot read kernel source %s/%s",
                                ctx->kernel_dir, name);
        return FLASHCL_SUCCESS;
    }
    const char *embedded = find_embedded(name);
    if (!embedded)
        return flashcl_fail(ctx, FLASHCL_ERROR_KERNEL_SOURCE, "kernel source %s is not embedded", name);
    *length = strlen(embedded);
    *text = malloc(*length + 1);
    if (!*text) return flashcl_fail(ctx, FLASHCL_ERROR_OUT_OF_HOST_MEMORY, "out of host memory");
    memcpy(*text, embedded, *length + 1);
    return FLASHCL_SUCCESS;
}

#define MAX_SOURCE_FILES 7 /* common.cl, at most four prelude files, the kernel file */

/* A program is common.cl, the prelude's files (for the tensor-core kernels:
 * mma.cl, the backend's file and mma_operands.cl, as the dispatcher lists
 * them), then the kernel file itself, joined by newlines. */
flashcl_status flashcl_kernel_source(flashcl_context *ctx, const char *const *prelude, const char *file,
                                     char **source) {
    const char *names[MAX_SOURCE_FILES] = {"common.cl"};
    int count = 1;
    for (int i = 0; prelude && prelude[i]; ++i) {
        if (count == MAX_SOURCE_FILES - 1)
            return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT, "too many source files for %s", file);
        names[count++] = prelude[i];
    }
    names[count++] = file;
    char *parts[MAX_SOURCE_FILES] = {NULL};
    size_t lengths[MAX_SOURCE_FILES] = {0}, total = 0;
    flashcl_status status = FLASHCL_SUCCESS;
    *source = NULL;
    for (int i = 0; i < count && status == FLASHCL_SUCCESS; ++i) {
        status = load_one(ctx, names[i], &parts[i], &lengths[i]);
        total += lengths[i] + 1;
    }
    if (status == FLASHCL_SUCCESS) {
        *source = malloc(total + 1);
        if (!*source) {
            status = flashcl_fail(ctx, FLASHCL_ERROR_OUT_OF_HOST_MEMORY, "out of host memory");
        } else {
            size_t at = 0;
            for (int i = 0; i < count; ++i) {
                memcpy(*source + at, parts[i], lengths[i]);
                at += lengths[i];
                (*source)[at++] = '\n';
            }
            (*source)[at] = '\0';
        }
    }
    for (int i = 0; i < count; ++i) free(parts[i]);
    return status;
}
