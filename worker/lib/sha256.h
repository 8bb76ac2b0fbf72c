/* sha256.h: SHA-256 (FIPS 180-4), for checking downloaded model files
 * against the checksums the Hugging Face hub lists.
 *
 * Written here because no library redlm already links provides it, and a
 * few dozen lines are cheaper than a new dependency (libcrypto). */
#ifndef RL_SHA256_H
#define RL_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/error.h"

typedef struct rlSha256 {
    uint32_t h[8];
    uint64_t len;          /* bytes hashed so far */
    uint8_t buf[64];
    size_t fill;
} rlSha256;

void sha256_init(rlSha256 *s);
void sha256_update(rlSha256 *s, const void *data, size_t n);
void sha256_final(rlSha256 *s, uint8_t out[32]);

/* The SHA-256 of a whole file as 64 lowercase hex digits (RL_EIO on failure). */
int sha256_file(const char *path, char hex[65], rlError *err);

#endif
