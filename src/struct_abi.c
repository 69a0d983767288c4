/* struct_abi.c: the struct_size protocol: which sizes are accepted, and reading and writing a caller's struct
 * only as far as its own header declared it. */
#include "struct_abi.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* struct_size is the first member of every versioned struct; read it bytewise, as the caller's struct may
 * be of another version than the library's type. */
static size_t stated_size(const void *user) {
    size_t size;
    memcpy(&size, user, sizeof size);
    return size;
}

static int is_released(const flashcl_struct_abi *abi, size_t size) {
    for (int i = 0; i < abi->version_count; ++i)
        if (abi->versions[i] == size) return 1;
    return 0;
}

/* "80 (version 1), 96 (version 2)": the sizes a message offers instead. */
static void list_versions(const flashcl_struct_abi *abi, char *out, size_t out_size) {
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < abi->version_count && used < out_size; ++i) {
        const int n = snprintf(out + used, out_size - used, "%s%zu (version %d)", i ? ", " : "", abi->versions[i],
                               i + 1);
        if (n < 0) break;
        used += (size_t)n;
    }
}

/* Whether a struct_size can be taken at all: 0, past the limit and unreleased smaller sizes cannot. */
static flashcl_status check_size(flashcl_context *ctx, const flashcl_struct_abi *abi, size_t size) {
    if (size == 0)
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                            "%s.struct_size is 0: start the struct with %s, which sets it (a zero-filled or "
                            "brace-initialized %s has no version)",
                            abi->name, abi->filled_by, abi->name);
    if (size > FLASHCL_STRUCT_SIZE_LIMIT || (size < abi->size && !is_released(abi, size))) {
        char known[128];
        list_versions(abi, known, sizeof known);
        return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                            "%s.struct_size is %zu, which is no size of %s that flashcl %s knows (%s, or a larger "
                            "one from a newer header): was the struct started with %s?",
                            abi->name, size, abi->name, FLASHCL_VERSION_STRING, known, abi->filled_by);
    }
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_struct_import(flashcl_context *ctx, const flashcl_struct_abi *abi, const void *user,
                                     void *full) {
    const size_t size = stated_size(user);
    flashcl_status status = check_size(ctx, abi, size);
    if (status != FLASHCL_SUCCESS) return status;
    /* A newer header's fields this library does not know are taken only while they are zero, which by the
     * growth rule (README, "ABI policy") means "as before": anything else asks for what this library cannot
     * do, and running without it would be silently wrong. */
    const unsigned char *bytes = user;
    for (size_t i = abi->size; i < size; ++i)
        if (bytes[i] != 0)
            return flashcl_fail(ctx, FLASHCL_ERROR_INVALID_ARGUMENT,
                                "%s.struct_size is %zu, from a newer flashcl header: byte %zu, past the %zu this "
                                "library (flashcl %s) knows, is not zero, so the struct sets a field this library "
                                "does not have",
                                abi->name, size, i, abi->size, FLASHCL_VERSION_STRING);
    if (abi->defaults)
        abi->defaults(full);
    else
        memset(full, 0, abi->size);
    memcpy(full, user, size < abi->size ? size : abi->size);
    memcpy(full, &abi->size, sizeof abi->size);
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_struct_export(flashcl_context *ctx, const flashcl_struct_abi *abi, const void *full,
                                     void *user, size_t struct_size) {
    flashcl_status status = check_size(ctx, abi, struct_size);
    if (status != FLASHCL_SUCCESS) return status;
    unsigned char *bytes = user;
    memcpy(bytes, full, struct_size < abi->size ? struct_size : abi->size);
    /* Past what this library knows: zero, each newer field's "as before" (struct_size is the caller's sizeof,
     * so the bytes are the caller's). */
    if (struct_size > abi->size) memset(bytes + abi->size, 0, struct_size - abi->size);
    memcpy(bytes, &struct_size, sizeof struct_size);
    return FLASHCL_SUCCESS;
}

flashcl_status flashcl_struct_init(const flashcl_struct_abi *abi, void *user, size_t struct_size) {
    if (!user) return flashcl_fail(NULL, FLASHCL_ERROR_INVALID_ARGUMENT, "%s: the struct is NULL", abi->filled_by);
    _Alignas(max_align_t) unsigned char full[FLASHCL_STRUCT_SIZE_LIMIT]; /* any versioned struct fits */
    if (abi->defaults)
        abi->defaults(full);
    else
        memset(full, 0, abi->size);
    memcpy(full, &abi->size, sizeof abi->size);
    flashcl_status status = flashcl_struct_export(NULL, abi, full, user, struct_size);
    if (status != FLASHCL_SUCCESS && struct_size >= sizeof(size_t) && struct_size <= FLASHCL_STRUCT_SIZE_LIMIT) {
        memset(user, 0, struct_size);
        memcpy(user, &struct_size, sizeof struct_size);
    }
    return status;
}
