/* sha256.h: SHA-256 (FIPS 180-4), for the disk cache's keys and checksums: a collision there could hand a
 * program the wrong kernel, so the hash has to be a cryptographic one, not a table hash. */
#ifndef FLASHCL_SHA256_H
#define FLASHCL_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define FLASHCL_SHA256_BYTES 32

typedef struct flashcl_sha256 {
    uint32_t state[8];
    uint64_t total_bytes;
    unsigned char block[64];
    size_t block_used;
} flashcl_sha256;

void flashcl_sha256_init(flashcl_sha256 *h);
void flashcl_sha256_update(flashcl_sha256 *h, const void *data, size_t size);
void flashcl_sha256_final(flashcl_sha256 *h, unsigned char digest[FLASHCL_SHA256_BYTES]);

/* The digest of one buffer. */
void flashcl_sha256_of(const void *data, size_t size, unsigned char digest[FLASHCL_SHA256_BYTES]);

/* The first `bytes` bytes of a digest as lower-case hex into text (2 * bytes + 1 chars). */
void flashcl_sha256_hex(const unsigned char *digest, size_t bytes, char *text);

#endif
