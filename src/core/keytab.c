/* SPDX-License-Identifier: MIT */
/*
 * The key table (see keytab.h): open addressing with linear probing and backward-shift deletion
 * over one array of slots, each holding a key and its value inline.
 *
 * Slot layout, `slot_len` bytes each (16 + the value rounded up to 8, so every value is 8-byte
 * aligned; 32 bytes for a 16-byte value, two slots a cache line):
 *
 *     0  16 bytes   the key area. Byte 15 says what the rest is: 0 an empty slot; 1 to 16 a key
 *                   of (byte 15) - 1 <= 15 bytes, held in bytes 0-14 and zero-padded; LONG_KEY a
 *                   longer key, held in its own allocation: bytes 0-7 the pointer, 8-11 its
 *                   length (uint32), 12-14 24 bits of its hash (a tag that spares most
 *                   comparisons the pointer chase)
 *    16  value      value_size bytes rounded up to 8
 *
 * Read as two little-endian words, the key area of a short key is exactly what probe_key_init
 * builds from the caller's bytes, so telling a short key from another is two word compares, and
 * a probe reads nothing but the slots it passes.
 *
 * Memory: the capacity is not a power of two (a key's home is its hash, multiplied by a seed
 * that changes with every slot array, scaled to the capacity), so the array can grow by 3/16
 * at a load of 13/16 instead of doubling at 3/4: its load stays
 * between 0.68 and 0.81, and a key with a 16-byte value costs 39 to 47 bytes (the former
 * 40-byte slots and doubling cost 53 to 107). Linear probing at that load still finds a present
 * key within two or three slots (one or two adjacent cache lines) on average.
 *
 * Invariants:
 * - cap is 0 (no slot array yet, or every entry gone) or at least MIN_CAP, below 2^32, and
 *   count <= cap * 13/16;
 * - an entry's home slot is home_of(hash, seed, cap), and every slot from its home to its
 *   own (cyclically) is occupied (the linear probing invariant that backward-shift deletion
 *   keeps, so no tombstones are needed);
 * - key_len is the sum of the out-of-line key allocations.
 *
 * The table shrinks when deletions or sweeps leave it under 1/4 full, so memory follows the keys
 * actually tracked. A failed shrink is harmless: the table just stays larger.
 */
#include "keytab.h"

#include <string.h>

#include "base/alloc.h"
#include "base/hash.h"
#include "sluice/error.h"

#define INLINE_KEY_LEN 15                   /* keys up to this length live in the slot */
#define KEY_AREA       16                   /* bytes of a slot before its value */
#define LONG_KEY       0xffu                /* byte 15 of an out-of-line key's slot */
#define MIN_CAP        16                   /* smallest slot array */
#define MAX_CAP        ((size_t)UINT32_MAX) /* home() scales a 32-bit hash */
#define LINE           64                   /* the slot array starts on a cache line */

struct keytab {
    unsigned char *slots; /* cap * slot_len bytes, 64-byte aligned, inside `raw` */
    void *raw;            /* the allocation holding slots (owned); NULL while cap == 0 */
    size_t cap;           /* slots */
    size_t count;         /* occupied slots */
    size_t slot_len;      /* bytes per slot */
    size_t value_size;    /* bytes of a value as the caller sees it */
    size_t key_len;       /* bytes allocated for out-of-line keys */
    size_t cursor;        /* next slot keytab_sweep visits */
    uint64_t seed;        /* odd multiplier of home_of() for this slot array */
    uint64_t hkey;        /* the hash's secret (hash_process_seed): clients choose the keys */
};

/* ---- Slots ------------------------------------------------------------------------------------
 */

/* Most entries a table of cap slots holds: 13/16 of it. */
static inline size_t max_count(size_t cap)
{
    return cap / 16 * 13 + cap % 16 * 13 / 16;
}

/* The home slot of a hash: its high half, after a multiply by the array's odd `seed`, scaled to
 * [0, cap), so any capacity works. The multiply matters: scaling alone keeps the hash order, so
 * the keys a sweep leaves behind (a run of slots, hence of hashes) would all map into one region
 * of the next, smaller array; a new seed for every array scatters them. */
static inline size_t home_of(uint64_t hash, uint64_t seed, size_t cap)
{
    return (size_t)((((hash * seed) >> 32) * (uint64_t)cap) >> 32);
}

/* The first cache-line boundary in an allocation of at least LINE - 1 spare bytes. malloc
 * aligns large blocks to 16 bytes only, which would leave every other 32-byte slot across two
 * lines: its key in one and its value in the next, two cache misses for one key. */
static unsigned char *line_align(void *raw)
{
    return (unsigned char *)raw + ((LINE - (uintptr_t)raw % LINE) % LINE);
}

static inline unsigned char *slot_at(const keytab *t, size_t i)
{
    return t->slots + i * t->slot_len;
}

static inline size_t next_slot(const keytab *t, size_t i)
{
    return i + 1 == t->cap ? 0 : i + 1;
}

static inline unsigned slot_kind(const unsigned char *slot)
{
    return slot[KEY_AREA - 1];
}

static inline size_t slot_keylen(const unsigned char *slot)
{
    uint32_t len;

    if (slot_kind(slot) != LONG_KEY)
        return (size_t)slot_kind(slot) - 1;
    memcpy(&len, slot + 8, sizeof len);
    return len;
}

static inline const char *slot_key(const unsigned char *slot)
{
    const char *ext;

    if (slot_kind(slot) != LONG_KEY)
        return (const char *)slot;
    memcpy(&ext, slot, sizeof ext);
    return ext;
}

/* 24 bits of a long key's hash, kept in bytes 12-14 of its slot. */
static inline uint32_t long_tag(uint64_t hash)
{
    return (uint32_t)hash & 0xffffffu;
}

static inline uint32_t slot_tag(const unsigned char *slot)
{
    return (uint32_t)slot[12] | (uint32_t)slot[13] << 8 | (uint32_t)slot[14] << 16;
}

/* The hash of a short key: two hash_absorb steps over its key area as the slot holds it (the
 * length is in the top byte of w1, so zero padding is unambiguous). No final avalanche: home_of
 * reads the high half of hash * seed, which every bit of the hash reaches, and the two
 * multiplies it saves are on the path of every decision, before its cache miss can start. */
static inline uint64_t short_hash(uint64_t hkey, uint64_t w0, uint64_t w1)
{
    return hash_absorb(hash_absorb(HASH_MUL_C ^ hkey, w0), w1);
}

/* A key made ready for probing: hashed once, and for a short key read as the two words of its
 * key area, so that a comparison is two word compares and no call. */
typedef struct probe_key {
    uint64_t hash;   /* the key's hash */
    uint64_t w0, w1; /* short keys: the key area as two little-endian words */
    const char *key; /* the caller's bytes */
    size_t len;      /* their length */
} probe_key;

static inline void probe_key_init(const keytab *t, probe_key *pk, const char *key, size_t keylen)
{
    pk->key = key;
    pk->len = keylen;
    if (keylen > INLINE_KEY_LEN) {
        pk->hash = hash_bytes_keyed(key, keylen, t->hkey);
        pk->w0 = pk->w1 = 0;
    } else {
        hash_short_words((const unsigned char *)key, keylen, &pk->w0, &pk->w1);
        pk->w1 |= (uint64_t)(keylen + 1) << 56;
        pk->hash = short_hash(t->hkey, pk->w0, pk->w1);
    }
}

/* The hash of the key in an occupied slot, as probe_key_init computes it. */
static uint64_t slot_hash(const keytab *t, const unsigned char *slot)
{
    if (slot_kind(slot) == LONG_KEY)
        return hash_bytes_keyed(slot_key(slot), slot_keylen(slot), t->hkey);
    return short_hash(t->hkey, hash_load64(slot), hash_load64(slot + 8));
}

/* Returns the index of the key's slot, or of the empty slot that ends its probe (cap > 0). */
static inline size_t probe(const keytab *t, const probe_key *pk)
{
    size_t i = home_of(pk->hash, t->seed, t->cap);

    if (pk->len <= INLINE_KEY_LEN) {
        for (;;) {
            const unsigned char *slot = slot_at(t, i);
            uint64_t w1 = hash_load64(slot + 8);

            if ((w1 == pk->w1 && hash_load64(slot) == pk->w0) || (w1 >> 56) == 0)
                return i;
            i = next_slot(t, i);
        }
    }
    for (;;) {
        const unsigned char *slot = slot_at(t, i);
        unsigned kind = slot_kind(slot);

        if (kind == 0 ||
            (kind == LONG_KEY && slot_tag(slot) == long_tag(pk->hash) &&
             slot_keylen(slot) == pk->len && memcmp(slot_key(slot), pk->key, pk->len) == 0))
            return i;
        i = next_slot(t, i);
    }
}

/* Frees an entry's out-of-line key and calls destroy on its value; the slot stays occupied. */
static void slot_release(keytab *t, unsigned char *slot, keytab_destroy_fn destroy, void *arg)
{
    if (destroy)
        destroy(slot + KEY_AREA, arg);
    if (slot_kind(slot) == LONG_KEY) {
        t->key_len -= slot_keylen(slot);
        alloc_free((void *)slot_key(slot));
    }
}

/* Steps from a to b going forward around the table. */
static inline size_t cyclic_dist(const keytab *t, size_t a, size_t b)
{
    return b >= a ? b - a : b + t->cap - a;
}

/* Empties slot i and shifts the entries of its cluster back so no probe sequence is broken. */
static void slot_remove(keytab *t, size_t i)
{
    size_t j = i;

    for (;;) {
        unsigned char *next;
        size_t home;

        j = next_slot(t, j);
        next = slot_at(t, j);
        if (slot_kind(next) == 0)
            break;
        home = home_of(slot_hash(t, next), t->seed, t->cap);
        /* The entry at j may fill the hole at i when i lies on its probe path: from its home
         * to j, cyclically. */
        if (cyclic_dist(t, home, j) >= cyclic_dist(t, i, j)) {
            memcpy(slot_at(t, i), next, t->slot_len);
            i = j;
        }
    }
    memset(slot_at(t, i), 0, t->slot_len);
    t->count--;
}

/* Moves every entry into a fresh array of new_cap slots (0 frees the array; otherwise at least
 * MIN_CAP, holding count within the load bound). Returns 0 or SLUICE_ENOMEM with t unchanged. */
static int rehash(keytab *t, size_t new_cap)
{
    unsigned char *slots = NULL;
    void *raw = NULL;
    uint64_t seed = hash_mix(t->seed + new_cap) | 1u;

    if (new_cap) {
        if (new_cap > MAX_CAP || new_cap > (SIZE_MAX - LINE) / t->slot_len)
            return SLUICE_ENOMEM;
        raw = alloc_calloc(new_cap * t->slot_len + LINE - 1, 1);
        if (!raw)
            return SLUICE_ENOMEM;
        slots = line_align(raw);
    }
    for (size_t i = 0; i < t->cap; i++) {
        const unsigned char *src = slot_at(t, i);
        size_t j;

        if (slot_kind(src) == 0)
            continue;
        j = home_of(slot_hash(t, src), seed, new_cap);
        while (slot_kind(slots + j * t->slot_len) != 0)
            j = j + 1 == new_cap ? 0 : j + 1;
        memcpy(slots + j * t->slot_len, src, t->slot_len);
    }
    alloc_free(t->raw);
    /* Keep the sweep cursor at the same relative position of the table (both below 2^32). */
    t->cursor = t->cap && new_cap ? (size_t)((uint64_t)t->cursor * new_cap / t->cap) : 0;
    t->slots = slots;
    t->raw = raw;
    t->cap = new_cap;
    t->seed = seed;
    return SLUICE_OK;
}

/* The capacity to grow to from cap: 3/16 more, so the load falls from 13/16 to about 0.68. */
static size_t grown_cap(size_t cap)
{
    return cap ? cap + cap / 16 * 3 + 1 : MIN_CAP;
}

/* Shrinks the array once it is under 1/4 full, to half full (far from both bounds, so
 * alternating inserts and deletes cannot make it resize back and forth). */
static void maybe_shrink(keytab *t)
{
    size_t new_cap;

    if (t->cap == 0 || t->count >= t->cap / 4)
        return;
    if (t->count == 0) {
        (void)rehash(t, 0);
        return;
    }
    new_cap = t->count * 2 < MIN_CAP ? MIN_CAP : t->count * 2;
    if (new_cap < t->cap)
        (void)rehash(t, new_cap);
}

/* ---- Public functions -------------------------------------------------------------------------
 */

int keytab_new(size_t value_size, keytab **out)
{
    keytab *t;

    *out = NULL;
    if (value_size > 64)
        return SLUICE_EINVAL;
    t = alloc_calloc(1, sizeof *t);
    if (!t)
        return SLUICE_ENOMEM;
    t->value_size = value_size;
    t->seed = 1;
    t->hkey = hash_process_seed();
    t->slot_len = KEY_AREA + ((value_size + 7) & ~(size_t)7);
    *out = t;
    return SLUICE_OK;
}

void keytab_free(keytab *t, keytab_destroy_fn destroy, void *arg)
{
    if (!t)
        return;
    keytab_clear(t, destroy, arg);
    alloc_free(t);
}

void keytab_prefetch(const keytab *t, const char *key, size_t keylen)
{
    probe_key pk;

    if (t->count == 0 || keylen > UINT32_MAX)
        return;
    probe_key_init(t, &pk, key, keylen);
    /* The home line and the next: a present key is two or three slots from its home on
     * average, often across a line boundary. */
    __builtin_prefetch(slot_at(t, home_of(pk.hash, t->seed, t->cap)), 1, 3);
    __builtin_prefetch(slot_at(t, home_of(pk.hash, t->seed, t->cap)) + 64, 1, 3);
}

/* keytab_find for a key longer than INLINE_KEY_LEN: kept out of line, so that the short keys'
 * path, the one of nearly every decision, needs no saved registers and no stack frame. */
static __attribute__((noinline)) void *find_long(const keytab *t, const char *key, size_t keylen)
{
    probe_key pk;
    unsigned char *slot;

    if (t->count == 0 || keylen > UINT32_MAX)
        return NULL;
    probe_key_init(t, &pk, key, keylen);
    slot = slot_at(t, probe(t, &pk));
    return slot_kind(slot) != 0 ? slot + KEY_AREA : NULL;
}

void *keytab_find(const keytab *t, const char *key, size_t keylen)
{
    uint64_t w0, w1;
    size_t i;

    if (keylen > INLINE_KEY_LEN)
        return find_long(t, key, keylen);
    if (t->count == 0)
        return NULL;
    /* probe() for a short key, by hand: the same words, hash and comparisons. */
    hash_short_words((const unsigned char *)key, keylen, &w0, &w1);
    w1 |= (uint64_t)(keylen + 1) << 56;
    i = home_of(short_hash(t->hkey, w0, w1), t->seed, t->cap);
    /* The line after the home slot's: a key is two or three slots past its home on average, so
     * its probe often goes on into that line; asking for it now overlaps the two misses. */
    __builtin_prefetch(slot_at(t, i) + LINE, 0, 3);
    for (;;) {
        unsigned char *slot = slot_at(t, i);
        uint64_t s1 = hash_load64(slot + 8);

        if (s1 == w1 && hash_load64(slot) == w0)
            return slot + KEY_AREA;
        if ((s1 >> 56) == 0)
            return NULL;
        i = next_slot(t, i);
    }
}

int keytab_upsert(keytab *t, const char *key, size_t keylen, void **value, int *created)
{
    probe_key pk;
    char *ext = NULL;
    unsigned char *slot;
    size_t i = 0;

    *value = NULL;
    if (created)
        *created = 0;
    /* Such a key could not be stored; treat it as the allocation it would need failing. */
    if (keylen > UINT32_MAX)
        return SLUICE_ENOMEM;
    probe_key_init(t, &pk, key, keylen);
    if (t->cap) {
        i = probe(t, &pk);
        slot = slot_at(t, i);
        if (slot_kind(slot) != 0) {
            *value = slot + KEY_AREA;
            return SLUICE_OK;
        }
    }
    /* A new key. Acquire everything that can fail before touching the table. */
    if (keylen > INLINE_KEY_LEN) {
        ext = alloc_malloc(keylen);
        if (!ext)
            return SLUICE_ENOMEM;
        memcpy(ext, key, keylen);
    }
    if (t->count + 1 > max_count(t->cap)) {
        if (rehash(t, grown_cap(t->cap)) != SLUICE_OK) {
            alloc_free(ext);
            return SLUICE_ENOMEM;
        }
        i = probe(t, &pk);
    }
    slot = slot_at(t, i);
    memset(slot, 0, t->slot_len);
    if (ext) {
        uint32_t len32 = (uint32_t)keylen, tag = long_tag(pk.hash);

        memcpy(slot, &ext, sizeof ext);
        memcpy(slot + 8, &len32, sizeof len32);
        slot[12] = (unsigned char)tag;
        slot[13] = (unsigned char)(tag >> 8);
        slot[14] = (unsigned char)(tag >> 16);
        slot[KEY_AREA - 1] = LONG_KEY;
        t->key_len += keylen;
    } else {
        if (keylen)
            memcpy(slot, key, keylen);
        slot[KEY_AREA - 1] = (unsigned char)(keylen + 1);
    }
    t->count++;
    *value = slot + KEY_AREA;
    if (created)
        *created = 1;
    return SLUICE_OK;
}

int keytab_delete(keytab *t, const char *key, size_t keylen, keytab_destroy_fn destroy, void *arg)
{
    probe_key pk;
    size_t i;

    if (t->count == 0 || keylen > UINT32_MAX)
        return SLUICE_ENOTFOUND;
    probe_key_init(t, &pk, key, keylen);
    i = probe(t, &pk);
    if (slot_kind(slot_at(t, i)) == 0)
        return SLUICE_ENOTFOUND;
    slot_release(t, slot_at(t, i), destroy, arg);
    slot_remove(t, i);
    maybe_shrink(t);
    return SLUICE_OK;
}

void keytab_clear(keytab *t, keytab_destroy_fn destroy, void *arg)
{
    for (size_t i = 0; i < t->cap; i++) {
        unsigned char *slot = slot_at(t, i);

        if (slot_kind(slot) != 0)
            slot_release(t, slot, destroy, arg);
    }
    alloc_free(t->raw);
    t->raw = NULL;
    t->slots = NULL;
    t->cap = 0;
    t->count = 0;
    t->cursor = 0;
}

size_t keytab_sweep(keytab *t, size_t budget, int (*idle)(void *value, void *arg),
                    keytab_destroy_fn destroy, void *arg)
{
    size_t removed = 0;

    /* One call makes at most one pass, so a budget >= the capacity visits every entry once. */
    if (budget > t->cap)
        budget = t->cap;
    while (budget > 0) {
        size_t i = t->cursor;
        unsigned char *slot = slot_at(t, i);

        if (slot_kind(slot) != 0 && idle(slot + KEY_AREA, arg)) {
            /* The backward shift may pull an unvisited entry into slot i: look at it again
             * without advancing. Every removal empties a slot, so this terminates. */
            slot_release(t, slot, destroy, arg);
            slot_remove(t, i);
            removed++;
            continue;
        }
        t->cursor = next_slot(t, i);
        budget--;
    }
    maybe_shrink(t);
    return removed;
}

int keytab_next(const keytab *t, size_t *pos, const char **key, size_t *keylen, void **value)
{
    for (size_t i = *pos; i < t->cap; i++) {
        unsigned char *slot = slot_at(t, i);

        if (slot_kind(slot) == 0)
            continue;
        *pos = i + 1;
        *key = slot_key(slot);
        *keylen = slot_keylen(slot);
        *value = slot + KEY_AREA;
        return 1;
    }
    *pos = t->cap;
    return 0;
}

size_t keytab_growth_bytes(const keytab *t)
{
    size_t cap = grown_cap(t->cap);

    if (t->count + 1 <= max_count(t->cap) || cap > (SIZE_MAX - LINE) / t->slot_len)
        return 0;
    return cap * t->slot_len;
}

size_t keytab_count(const keytab *t)
{
    return t->count;
}

size_t keytab_bytes(const keytab *t)
{
    /* The slots and the long keys; like malloc's own headers, the at most LINE - 1 bytes that
     * align the array are not counted (at most 63 bytes a table). */
    return t->cap * t->slot_len + t->key_len;
}

size_t keytab_capacity(const keytab *t)
{
    return t->cap;
}

size_t keytab_longest_probe(const keytab *t)
{
    size_t longest = 0;

    for (size_t i = 0; i < t->cap; i++) {
        const unsigned char *slot = slot_at(t, i);
        size_t home, d;

        if (slot_kind(slot) == 0)
            continue;
        home = home_of(slot_hash(t, slot), t->seed, t->cap);
        d = i >= home ? i - home : i + t->cap - home;
        if (d > longest)
            longest = d;
    }
    return longest;
}
