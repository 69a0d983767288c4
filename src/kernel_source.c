/* kernel_source.c: assembles a program's source (common.cl + one kernel file), embedded or from disk. */
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

flashcl_status flashcl_kernel_source(flashcl_context *ctx, const char *file, char **source) {
    char *common = NULL, *body = NULL;
    size_t common_len = 0, body_len = 0;
    *source = NULL;
    flashcl_status status = load_one(ctx, "common.cl", &common, &common_len);
    if (status == FLASHCL_SUCCESS) status = load_one(ctx, file, &body, &body_len);
    if (status == FLASHCL_SUCCESS) {
        *source = malloc(common_len + 1 + body_len + 1);
        if (!*source) {
            status = flashcl_fail(ctx, FLASHCL_ERROR_OUT_OF_HOST_MEMORY, "out of host memory");
        } else {
            memcpy(*source, common, common_len);
            (*source)[common_len] = '\n';
            memcpy(*source + common_len + 1, body, body_len + 1);
        }
    }
    free(common);
    free(body);
    return status;
}
