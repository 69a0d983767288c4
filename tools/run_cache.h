/* run_cache.h: the KV-cache mode of `flashcl run` (--k-cache ...): one flashcl_forward_kv_cache call on .npy files. */
#ifndef FLASHCL_TOOLS_RUN_CACHE_H
#define FLASHCL_TOOLS_RUN_CACHE_H

#include "run_files.h"
#include "run_options.h"

/* Runs it after run_files_check has passed: reads the files, runs the
 * call, checks it if asked, and writes the outputs all or none (the cache
 * outputs, possibly the input caches' own files, included). Returns the
 * exit status (FLASHCL_EXIT_OK or FLASHCL_EXIT_FAILURE). */
int run_cache_command(const run_options *options, run_files *files);

#endif
