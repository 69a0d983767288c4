/* program_cache.h: kernel sources and the per-context cache of built programs. */
#ifndef FLASHCL_PROGRAM_CACHE_H
#define FLASHCL_PROGRAM_CACHE_H

#include "internal.h"

/* common.cl, the files of prelude (NULL-terminated; NULL: none), then
 * cl/<file>, as one malloc'd string. */
flashcl_status flashcl_kernel_source(flashcl_context *ctx, const char *const *prelude, const char *file,
                                     char **source);

/* The driver's build log of program on ctx's device, malloc'd; NULL when there is none or out of memory. */
char *flashcl_program_build_log(const flashcl_context *ctx, cl_program program);

/* The kernel `kernel_name` of the sm_90a variant of the program flashcl_get_program_kernel would build (same
 * sources, same options; program_sm90a.h), cached per context beside it, an unavailable variant included. Nothing
 * calls it from the attention kernels yet (issue 22). FLASHCL_ERROR_UNSUPPORTED when the variant is unavailable
 * on this device or for this source, every time it is asked: the reason in flashcl_last_error, with the driver's
 * log in flashcl_last_build_log; the caller then runs the plain program. */
flashcl_status flashcl_get_sm90a_kernel(flashcl_context *ctx, const char *const *prelude, const char *file,
                                        const char *kernel_name, const char *options, cl_kernel *kernel);

#endif
