/* SPDX-License-Identifier: MIT */
/*
 * The one hash function family of sluice: a 64-bit hash of byte strings (keys, names) and a
 * 64-bit mix of integers (ids, pointers, seeds). Every hash table uses these, so a key hashes
 * the same wherever it is filed.
 *
 * Not cryptographic. Unkeyed (hash_bytes), every step is a bijection that a client can run
 * backwards, so it can make any number of keys with one hash. The table whose keys clients
 * choose (the key table, core/keytab.h: every limiter's keys) therefore hashes with a secret of
 * the process (hash_process_seed, folded into the state before the first word): without it a
 * client cannot tell where its keys land, and the one difference whose effect no secret changes
 * (a word's top bit, which the multiply carries out of the word) pairs keys at most two to a
 * hash. Keys longer than the limit's max_key_len are replaced by their SHA-256 (core/keyhash.h).
 *
 * The word helpers are inline so that the key table's hot path, which compares the same two
 * words it hashed, needs no call.
 */
#ifndef SLUICE_BASE_HASH_H
#define SLUICE_BASE_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Odd 64-bit multipliers with well-spread bits (chosen from digits of e, pi and sqrt 3). */
#define HASH_MUL_A UINT64_C(0xb7e151628aed2a6b)
#define HASH_MUL_B UINT64_C(0x243f6a8885a308d3)
#define HASH_MUL_C UINT64_C(0xbb67ae8584caa73b)

/* Loads 8 bytes as a little-endian word, so hashes agree across platforms. */
static inline uint64_t hash_load64(const unsigned char *p)
{
    uint64_t v;

    memcpy(&v, p, sizeof v);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static inline uint64_t hash_load32(const unsigned char *p)
{
    uint32_t v;

    memcpy(&v, p, sizeof v);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap32(v);
#endif
    return v;
}

/* Reads a key of at most 16 bytes as two little-endian words padded with zero bytes, exactly as
 * the slot holds it, without reading past its end. */
static inline void hash_short_words(const unsigned char *p, size_t len, uint64_t *w0, uint64_t *w1)
{
    *w1 = 0;
    if (len >= 8) {
        *w0 = hash_load64(p);
        if (len > 8)
            *w1 = hash_load64(p + len - 8) >> (8 * (16 - len));
    } else if (len >= 4) {
        *w0 = hash_load32(p) | ((hash_load32(p + len - 4) >> (8 * (8 - len))) << 32);
    } else if (len > 0) {
        /* Bytes 0, len/2 and len-1 cover lengths 1 to 3; a byte named twice lands on itself. */
        *w0 = (uint64_t)p[0] | ((uint64_t)p[len / 2] << (8 * (len / 2))) |
              ((uint64_t)p[len - 1] << (8 * (len - 1)));
    } else {
        *w0 = 0;
    }
}

/* Folds one word into the state: xor it in, multiply (spreads low bits up) and shift the high
 * half back down (so the next multiply sees it). Each step is a bijection of the state. */
static inline uint64_t hash_absorb(uint64_t h, uint64_t w)
{
    h = (h ^ w) * HASH_MUL_A;
    return h ^ (h >> 32);
}

/* The state before the first word: the length goes in first, so zero padding is unambiguous. */
static inline uint64_t hash_begin(size_t keylen)
{
    return HASH_MUL_C ^ ((uint64_t)keylen * HASH_MUL_B);
}

/* Final avalanche: every input bit reaches the low bits the table indexes with. */
static inline uint64_t hash_end(uint64_t h)
{
    h ^= h >> 29;
    h *= HASH_MUL_B;
    h ^= h >> 32;
    h *= HASH_MUL_C;
    return h ^ (h >> 31);
}

/* Returns a 64-bit hash of three words, inline, for a key made of three integers on a hot path
 * (CL.THROTTLE's parameter sets). The words are rotated apart before one hash_end, so three
 * integers below 2^21 never collide before the avalanche; it is not hash_bytes of the words. */
static inline uint64_t hash_words3(uint64_t a, uint64_t b, uint64_t c)
{
    return hash_end(a ^ ((b << 21) | (b >> 43)) ^ ((c << 42) | (c >> 22)));
}

/* Returns the 64-bit hash of the len bytes at data. Keys of at most 16 bytes hash exactly as
 * hash_end(hash_absorb(hash_absorb(hash_begin(len), w0), w1)) of their hash_short_words. (The
 * key table hashes its short keys more cheaply itself, from the same words: core/keytab.c.) */
uint64_t hash_bytes(const void *data, size_t len);

/* Returns the hash of the len bytes at data under a secret key: hash_bytes with key folded into
 * the state before the first word (hash_bytes is hash_bytes_keyed with key 0), so that, unlike
 * hash_bytes_seeded, two strings that collide under one key do not under another. */
uint64_t hash_bytes_keyed(const void *data, size_t len, uint64_t key);

/* A random 64-bit value drawn once per process (getrandom; the clock, pid and an address if it
 * fails), never 0: the key of the tables that hash what clients choose. Safe from any thread. */
uint64_t hash_process_seed(void);

/* hash_bytes_keyed under the process's secret, made different for each salt (so one string filed
 * in two tables, or under two owners, lands in unrelated places): for every table whose string
 * keys clients choose (task keys, tenants, series names, parked keys). */
uint64_t hash_bytes_secret(const void *data, size_t len, uint64_t salt);

/* Returns hash_bytes of the len bytes at data, made different for each seed (so one string
 * filed in two tables, or under two owners, lands in unrelated places). Unkeyed: for names a
 * client does not choose. */
uint64_t hash_bytes_seeded(const void *data, size_t len, uint64_t seed);

/* Returns a 64-bit bijective mix of x: every input bit reaches every output bit. */
uint64_t hash_mix(uint64_t x);

#endif
