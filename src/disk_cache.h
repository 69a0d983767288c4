/* disk_cache.h: the on-disk program cache: a context's directory and device key, and programs loaded from or
 * stored to it. Every failure here degrades to "not cached" with a note in the context's cache stats; none
 * becomes an error of the call that asked for the program. */
#ifndef FLASHCL_DISK_CACHE_H
#define FLASHCL_DISK_CACHE_H

#include "internal.h"

/* Sets ctx->disk_cache from the environment and ctx's device, or leaves it NULL (cache off: the reason is in
 * ctx->cache_stats.note). Called once the context has its platform and device. */
void flashcl_disk_cache_open(flashcl_context *ctx);
void flashcl_disk_cache_close(flashcl_context *ctx);

/* The full key of a program (the device's key, the SHA-256 and length of source, options, and the variant when
 * not NULL: a program built from the same source another way, such as the sm_90a rewrite), malloc'd; NULL when
 * the cache is off or out of memory. */
char *flashcl_disk_cache_key(const flashcl_context *ctx, const char *source, const char *options,
                             const char *variant);

/* A program built from the binary stored under key, with options: 1 and *program, or 0 (no usable entry; the
 * caller builds from source and stores the result). */
int flashcl_disk_cache_load(flashcl_context *ctx, const char *key, const char *options, cl_program *program);

/* The device's binary of program (CL_PROGRAM_BINARIES: PTX text on NVIDIA), malloc'd, *size bytes; NULL when the
 * driver gives none. */
unsigned char *flashcl_program_binary(cl_program program, size_t *size);

/* Stores program's binary under key; a failure is counted and noted, nothing more. */
void flashcl_disk_cache_store(flashcl_context *ctx, const char *key, cl_program program);

#endif
