/* cache_file.c: writes and checks the header of an on-disk program cache entry (layout in cache_file.h). */
#include <string.h>

#include "cache_file.h"

static const unsigned char magic[8] = {'F', 'L', 'C', 'L', 'P', 'R', 'G', '\0'};

static void put_le(unsigned char *at, uint64_t value, int bytes) {
    for (int i = 0; i < bytes; ++i) at[i] = (unsigned char)(value >> (8 * i));
}

static uint64_t get_le(const unsigned char *at, int bytes) {
    uint64_t value = 0;
    for (int i = bytes - 1; i >= 0; --i) value = value << 8 | at[i];
    return value;
}

void flashcl_cache_file_header(size_t key_length, const unsigned char *binary, size_t binary_length,
                               unsigned char header[FLASHCL_CACHE_FILE_HEADER_BYTES]) {
    memcpy(header, magic, sizeof magic);
    put_le(header + 8, FLASHCL_CACHE_FILE_VERSION, 4);
    put_le(header + 12, key_length, 4);
    put_le(header + 16, binary_length, 8);
    flashcl_sha256_of(binary, binary_length, header + 24);
}

const char *flashcl_cache_file_check(const unsigned char *file, size_t size, const char *key, size_t key_length,
                                     const unsigned char **binary, size_t *binary_length) {
    if (size < FLASHCL_CACHE_FILE_HEADER_BYTES) return "wrong length";
    if (memcmp(file, magic, sizeof magic) != 0) return "bad magic";
    if (get_le(file + 8, 4) != FLASHCL_CACHE_FILE_VERSION) return "other format version";
    const uint64_t stored_key_length = get_le(file + 12, 4), stored_binary_length = get_le(file + 16, 8);
    /* Lengths compared one at a time so that no sum of untrusted values can overflow. */
    const uint64_t room = size - FLASHCL_CACHE_FILE_HEADER_BYTES;
    if (stored_key_length > room || stored_binary_length != room - stored_key_length) return "wrong length";
    if (stored_key_length != key_length ||
        memcmp(file + FLASHCL_CACHE_FILE_HEADER_BYTES, key, key_length) != 0)
        return "other key";
    const unsigned char *stored_binary = file + FLASHCL_CACHE_FILE_HEADER_BYTES + key_length;
    unsigned char digest[FLASHCL_SHA256_BYTES];
    flashcl_sha256_of(stored_binary, (size_t)stored_binary_length, digest);
    if (memcmp(digest, file + 24, sizeof digest) != 0) return "checksum mismatch";
    *binary = stored_binary;
    *binary_length = (size_t)stored_binary_length;
    return NULL;
}
