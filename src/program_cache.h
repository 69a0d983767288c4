/* program_cache.h: kernel sources and the per-context cache of built programs. */
#ifndef FLASHCL_PROGRAM_CACHE_H
#define FLASHCL_PROGRAM_CACHE_H

#include "internal.h"

/* common.cl, the files of prelude (NULL-terminated; NULL: none), then
 * cl/<file>, as one malloc'd string. */
flashcl_status flashcl_kernel_source(flashcl_context *ctx, const char *const *prelude, const char *file,
                                     char **source);

#endif
