/* SPDX-License-Identifier: MIT */
/*
 * The hash function family (see hash.h).
 */
#include "base/hash.h"

#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* Hash of a key longer than 16 bytes: whole words, then the last word read so that it ends with
 * the key (overlapping the one before). */
static uint64_t hash_long_key(const unsigned char *p, size_t keylen, uint64_t key)
{
    uint64_t h = hash_begin(keylen) ^ key;
    size_t n = keylen;

    while (n > 8) {
        h = hash_absorb(h, hash_load64(p));
        p += 8;
        n -= 8;
    }
    return hash_end(hash_absorb(h, hash_load64(p + n - 8)));
}

uint64_t hash_bytes_keyed(const void *data, size_t len, uint64_t key)
{
    uint64_t w0, w1;

    if (len > 16)
        return hash_long_key((const unsigned char *)data, len, key);
    hash_short_words((const unsigned char *)data, len, &w0, &w1);
    return hash_end(hash_absorb(hash_absorb(hash_begin(len) ^ key, w0), w1));
}

uint64_t hash_bytes(const void *data, size_t len)
{
    return hash_bytes_keyed(data, len, 0);
}

uint64_t hash_process_seed(void)
{
    static uint64_t seed; /* 0 until drawn */
    uint64_t s = __atomic_load_n(&seed, __ATOMIC_ACQUIRE), zero = 0;

    if (s != 0)
        return s;
    if (getrandom(&s, sizeof s, GRND_NONBLOCK) != (ssize_t)sizeof s) {
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        s = hash_mix((uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^
                     ((uint64_t)getpid() << 48) ^ (uint64_t)(uintptr_t)&ts);
    }
    if (s == 0)
        s = 1;
    /* Two threads drawing at once: the first to store wins, and both return its value. */
    if (!__atomic_compare_exchange_n(&seed, &zero, s, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        s = zero;
    return s;
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

uint64_t hash_bytes_secret(const void *data, size_t len, uint64_t salt)
{
    return hash_bytes_keyed(data, len, hash_process_seed() ^ hash_mix(salt));
}

uint64_t hash_bytes_seeded(const void *data, size_t len, uint64_t seed)
{
    return hash_mix(hash_bytes(data, len) ^ hash_mix(seed));
}
