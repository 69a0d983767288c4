/* cache_fs.h: the file-system calls of the on-disk program cache, kept in one file so that a port (Windows) has
 * one file to change. Every function reports failure by return value and errno-style code; none prints. */
#ifndef FLASHCL_CACHE_FS_H
#define FLASHCL_CACHE_FS_H

#include <stddef.h>

/* What FLASHCL_CACHE_DIR turns the cache off with. */
#define FLASHCL_CACHE_DIR_OFF "off"

/* The cache directory the environment names, malloc'd: $FLASHCL_CACHE_DIR, else $XDG_CACHE_HOME/flashcl, else
 * $HOME/.cache/flashcl. NULL when FLASHCL_CACHE_DIR is "off", when no home is known, on a platform without
 * these calls, or out of memory; *why then says which (a static string). */
char *flashcl_cache_fs_dir_from_env(const char **why);

/* Creates dir and its missing parents (mode 0700: a cache is private). 0, or an errno value. */
int flashcl_cache_fs_make_dirs(const char *dir);

/* dir/name (malloc'd), or NULL out of memory. */
char *flashcl_cache_fs_join(const char *dir, const char *name);

/* The whole file at path, malloc'd, if it is a regular file of at most max_bytes. 0, or an errno value
 * (ENOENT: no such file; EFBIG: larger than max_bytes). */
int flashcl_cache_fs_read(const char *path, size_t max_bytes, unsigned char **data, size_t *size);

/* Writes the concatenation of count parts to dir/name so that no reader ever sees a partial file: a temporary
 * file of a name no other writer uses, in the same directory (same file system), then renamed over name in one
 * step. Concurrent writers of the same entry each leave a whole file; the last rename wins. 0, or an errno
 * value; nothing is left behind on failure. */
int flashcl_cache_fs_write_atomic(const char *dir, const char *name, const void *const *parts, const size_t *sizes,
                                  int count);

#endif
