/* SPDX-License-Identifier: MIT */
/*
 * The hash function family (see hash.h).
 */
#include "base/hash.h"

/* Hash of a key longer than 16 bytes: whole words, then the last word read so that it ends with
 * the key (overlapping the one before). */
static uint64_t hash_long_key(const unsigned char *p, size_t keylen)
{
    uint64_t h = hash_begin(keylen);
    size_t n = keylen;

    while (n > 8) {
        h = hash_absorb(h, hash_load64(p));
        p += 8;
        n -= 8;
    }
    return hash_end(hash_absorb(h, hash_load64(p + n - 8)));
}

uint64_t hash_bytes(const void *data, size_t len)
{
    uint64_t w0, w1;

    if (len > 16)
        return hash_long_key((const unsigned char *)data, len);
    hash_short_words((const unsigned char *)data, len, &w0, &w1);
    return hash_end(hash_absorb(hash_absorb(hash_begin(len), w0), w1));
}

uint64_t hash_mix(uint64_t x)
{
    x ^= x >> 30;
    x *= UINT64_C(0xbf58476d1ce4e5b9);
    x ^= x >> 27;
    x *= UINT64_C(0x94d049bb133111eb);
    x ^= x >> 31;
    return x;
}

uint64_t hash_bytes_seeded(const void *data, size_t len, uint64_t seed)
{
    return hash_mix(hash_bytes(data, len) ^ hash_mix(seed));
}
