/* SPDX-License-Identifier: MIT */
/*
 * Key digests (see keyhash.h), with libcrypto's SHA-256 on a context that lives on our stack.
 *
 * Why not EVP_Digest: it allocates an EVP_MD_CTX and fetches the digest from a provider on
 * every call (3 allocations per digest with OpenSSL 3.0, and thousands on the first call), all
 * through libcrypto's own allocator, which alloc_malloc, the memory budget and the OOM sweeps
 * cannot see. Routing libcrypto through our allocator instead (CRYPTO_set_mem_functions) is
 * process-wide, must happen before libcrypto's first allocation, and would charge its lazily
 * built global tables (never freed before exit) to whatever allocator the first caller ran
 * under. The SHA256_Init/Update/Final functions allocate nothing: a digest needs no memory at
 * all, so it can neither escape the allocator nor fail for want of memory. They are deprecated
 * in OpenSSL 3 (in favour of EVP) but still built by default; this file alone opts out of the
 * deprecation warnings. Invariant: keyhash_digest allocates nothing (tests/unit/test_alloc_hooks.c
 * counts libcrypto's allocations around it). It keeps no state, so it is safe from any thread.
 */
#define OPENSSL_SUPPRESS_DEPRECATED

#include "keyhash.h"

#include <openssl/sha.h>

#include "sluice/error.h"

int keyhash_digest(const char *key, size_t keylen, unsigned char out[KEYHASH_LEN])
{
    SHA256_CTX ctx;

    if (!out || (!key && keylen > 0))
        return SLUICE_EINVAL;
    if (!key)
        key = "";
    /* These return 0 only on a NULL argument, which cannot happen here. */
    if (SHA256_Init(&ctx) != 1 || SHA256_Update(&ctx, key, keylen) != 1 ||
        SHA256_Final(out, &ctx) != 1)
        return SLUICE_EINVAL;
    return SLUICE_OK;
}
