/* SPDX-License-Identifier: MIT */
/*
 * Key digests: the SHA-256 of a key, which the limit layer stores in place of keys longer than a
 * limit's max_key_len, so a client cannot make one tracked key cost unbounded memory. SHA-256
 * (rather than the table's fast hash) keeps two distinct long keys from sharing state by
 * accident or by design. The digest is computed by OpenSSL's libcrypto without allocating
 * (keyhash.c says why), so it cannot run out of memory.
 */
#ifndef SLUICE_CORE_KEYHASH_H
#define SLUICE_CORE_KEYHASH_H

#include <stddef.h>

/* Bytes of a digest. */
#define KEYHASH_LEN 32

/* Writes the SHA-256 of the keylen bytes at key to out. key may be NULL when keylen is 0.
 * Allocates nothing. Returns 0, or SLUICE_EINVAL when out is NULL or key is NULL with
 * keylen > 0. */
int keyhash_digest(const char *key, size_t keylen, unsigned char out[KEYHASH_LEN]);

#endif
