/* struct_abi.h: the struct_size protocol of the versioned public structs (flashcl.h, "Struct versions").
 *
 * The library works on its own full-size copies. A struct the caller gives is imported (its size checked,
 * copied over this library's defaults); a struct the library fills is exported (written up to the caller's
 * size). One table per struct lists every size a released header had, so an older caller's struct is told
 * apart from garbage. */
#ifndef FLASHCL_STRUCT_ABI_H
#define FLASHCL_STRUCT_ABI_H

#include "internal.h"

/* The largest struct_size read at all: a bound on how far past a struct from a newer header the
 * library looks for non-zero bytes, which also stops an uninitialized struct_size from sending it
 * through arbitrary memory. Every struct is far smaller. */
#define FLASHCL_STRUCT_SIZE_LIMIT 4096

typedef struct flashcl_struct_abi {
    const char *name;        /* "flashcl_attention_desc", for messages */
    const char *filled_by;   /* the function that sets struct_size, for messages */
    size_t size;             /* sizeof in this library */
    const size_t *versions;  /* every released size, ascending; the last is size */
    int version_count;
    /* Writes this library's defaults into a full-size struct (struct_size included); NULL: all zero. The
     * fields past an older caller's size keep them. */
    void (*defaults)(void *full);
} flashcl_struct_abi;

extern const flashcl_struct_abi flashcl_abi_context_options;
extern const flashcl_struct_abi flashcl_abi_attention_desc;
extern const flashcl_struct_abi flashcl_abi_attention_extras;
extern const flashcl_struct_abi flashcl_abi_device_limits;
extern const flashcl_struct_abi flashcl_abi_call_stats;
extern const flashcl_struct_abi flashcl_abi_kv_cache;
extern const flashcl_struct_abi flashcl_abi_cache_stats;

/* Reads the caller's struct at user (non-NULL) into full (abi->size bytes): full gets abi's defaults,
 * then the caller's fields up to its struct_size, then struct_size = abi->size. Refuses, with a message
 * in ctx's last error (the thread's when ctx is NULL) and full untouched, a struct_size of 0, one above
 * FLASHCL_STRUCT_SIZE_LIMIT, a smaller one that is no released version, and a larger one with a
 * non-zero byte past abi->size. */
flashcl_status flashcl_struct_import(flashcl_context *ctx, const flashcl_struct_abi *abi, const void *user,
                                     void *full);

/* Writes full (abi->size bytes) to the caller's struct at user (non-NULL) whose size, struct_size, the
 * caller states (its sizeof): the fields up to min(struct_size, abi->size), zeros past abi->size, and
 * struct_size itself. The same sizes as import are refused, and then nothing is written. */
flashcl_status flashcl_struct_export(flashcl_context *ctx, const flashcl_struct_abi *abi, const void *full,
                                     void *user, size_t struct_size);

/* An _init_sized function: exports abi's defaults. A NULL user is refused; so is an unknown size, after
 * the struct (struct_size bytes, the caller's sizeof, when it is plausible) is zeroed with struct_size
 * recorded, so that a later call refuses it with a message instead of reading garbage. */
flashcl_status flashcl_struct_init(const flashcl_struct_abi *abi, void *user, size_t struct_size);

/* Typed imports for the public calls: *value is replaced by full (or left NULL when it is NULL), so a
 * call body reads the caller's struct through the same pointer. */
flashcl_status flashcl_import_desc(flashcl_context *ctx, const flashcl_attention_desc **desc,
                                   flashcl_attention_desc *full);
flashcl_status flashcl_import_extras(flashcl_context *ctx, const flashcl_attention_extras **extras,
                                     flashcl_attention_extras *full);
flashcl_status flashcl_import_options(const flashcl_context_options **options, flashcl_context_options *full);

#endif /* FLASHCL_STRUCT_ABI_H */
