/* cache_file.h: the layout of one on-disk program cache entry, and the checks a file must pass to be used.
 *
 *   offset  size  field (integers little-endian)
 *        0     8  magic "FLCLPRG\0"
 *        8     4  format version (FLASHCL_CACHE_FILE_VERSION)
 *       12     4  key length K
 *       16     8  binary length B
 *       24    32  SHA-256 of the binary
 *       56     K  the key text, compared in full with the wanted key (the file name is only its hash)
 *     56+K     B  the program binary, as clGetProgramInfo(CL_PROGRAM_BINARIES) gave it
 *
 * The file must be exactly 56 + K + B bytes. */
#ifndef FLASHCL_CACHE_FILE_H
#define FLASHCL_CACHE_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "sha256.h"

#define FLASHCL_CACHE_FILE_VERSION 1u
#define FLASHCL_CACHE_FILE_HEADER_BYTES 56

/* The header of an entry holding a key of key_length bytes and binary. */
void flashcl_cache_file_header(size_t key_length, const unsigned char *binary, size_t binary_length,
                               unsigned char header[FLASHCL_CACHE_FILE_HEADER_BYTES]);

/* Checks file (size bytes) against the wanted key and points *binary into it. NULL when it is usable, else
 * why not (a static string: "bad magic", "other format version", "other key", "wrong length", "checksum
 * mismatch"). */
const char *flashcl_cache_file_check(const unsigned char *file, size_t size, const char *key, size_t key_length,
                                     const unsigned char **binary, size_t *binary_length);

#endif
