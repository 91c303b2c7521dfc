/* SPDX-License-Identifier: MIT */
/*
 * Key digests (see keyhash.h): a thin wrapper over libcrypto's one-shot EVP_Digest. It keeps no
 * state, so it is safe from any thread. libcrypto allocates through its own allocator, not
 * sluice_malloc, so the out-of-memory tests cannot reach it; any failure it reports is mapped to
 * SLUICE_ENOMEM.
 */
#include "keyhash.h"

#include <openssl/evp.h>

#include "sluice/error.h"

int keyhash_digest(const char *key, size_t keylen, unsigned char out[KEYHASH_LEN])
{
    unsigned int len = 0;

    if (!out || (!key && keylen > 0))
        return SLUICE_EINVAL;
    if (!key)
        key = "";
    if (EVP_Digest(key, keylen, out, &len, EVP_sha256(), NULL) != 1 || len != KEYHASH_LEN)
        return SLUICE_ENOMEM;
    return SLUICE_OK;
}
