/* SPDX-License-Identifier: MIT */
/*
 * The key table (see keytab.h): a dense array of entries and an open-addressing index of 32-bit
 * entry numbers over it.
 *
 * Entry layout, `entry_len` bytes each (16 + the value rounded up to 8, so every value is 8-byte
 * aligned), entries 0 .. count-1 in use with no holes:
 *
 *     0  16 bytes   the key area: a key of at most 15 bytes itself, zero-padded, its length in
 *                   byte 15; a longer key as a pointer to its own allocation (bytes 0-7), its
 *                   length as a uint32 (bytes 8-11) and LONG_KEY in byte 15
 *    16  value      value_size bytes rounded up to 8
 *
 * Read as two little-endian words, the key area of a short key is exactly what probe_key_init
 * builds from the caller's bytes, so telling a short key from another is two word compares.
 *
 * Index slot (uint32): 0 when empty; else the entry number + 1 in the low `ebits` bits (ebits =
 * log2 of the index size, so every entry number fits) and, in the bits above, the same bits of
 * the high half of the key's hash: a fingerprint that rejects almost every other key without
 * reading its entry (1 in 2048 pass at 2^21 slots).
 *
 * Memory: a 16-byte value costs a 32-byte entry; the entry array grows by an eighth, the index
 * (4 bytes a slot) doubles at 3/4 load, so a key costs between 32 + 5.3 and 36 + 10.7 bytes
 * (37 to 47), against 53 to 107 for the former single array of 40-byte slots. A lookup reads
 * one index line (8 MB of index at a million keys, which mostly stays in the last-level cache)
 * and one entry.
 *
 * Invariants:
 * - icap is 0 (no index yet, or every entry gone) or a power of two, and count <= icap * 3/4;
 * - every entry is named by exactly one index slot and every occupied slot names an entry below
 *   count;
 * - an entry's home slot is hash & mask, and every slot from its home to its own is occupied
 *   (linear probing, kept by backward-shift deletion: no tombstones);
 * - a removed entry's place is filled by the last entry (whose index slot is renumbered), so
 *   entries stay dense;
 * - count <= ecap; key_len is the sum of the out-of-line key allocations.
 *
 * The index and the entry array shrink when deletions or sweeps leave them mostly empty, so
 * memory follows the keys actually tracked. A failed shrink is harmless: they just stay larger.
 */
#include "keytab.h"

#include <string.h>

#include "base/alloc.h"
#include "base/hash.h"
#include "sluice/error.h"

#define INLINE_KEY_LEN 15                /* keys up to this length live in the entry */
#define KEY_AREA       16                /* bytes of an entry before its value */
#define LONG_KEY       0xffu             /* byte 15 of an out-of-line key's area */
#define MIN_ICAP       16                /* smallest index */
#define MAX_ICAP       ((size_t)1 << 31) /* a slot keeps at least one fingerprint bit */
#define MIN_ECAP       16                /* smallest entry array */

struct keytab {
    uint32_t *index;        /* icap slots, owned; NULL while icap == 0 */
    size_t icap;            /* index slots: 0 or a power of two */
    size_t mask;            /* icap - 1 (0 while icap == 0) */
    uint32_t emask;         /* low bits of a slot holding entry number + 1 */
    unsigned char *entries; /* ecap * entry_len bytes, owned; NULL while ecap == 0 */
    size_t ecap;            /* entries allocated */
    size_t count;           /* entries in use */
    size_t entry_len;       /* bytes per entry */
    size_t value_size;      /* bytes of a value as the caller sees it */
    size_t key_len;         /* bytes allocated for out-of-line keys */
    size_t cursor;          /* next index slot keytab_sweep visits */
};

/* ---- Entries ----------------------------------------------------------------------------------
 */

static inline unsigned char *entry_at(const keytab *t, size_t e)
{
    return t->entries + e * t->entry_len;
}

/* The length of the key in an entry's key area. */
static inline size_t entry_keylen(const unsigned char *ent)
{
    uint32_t len;

    if (ent[KEY_AREA - 1] != LONG_KEY)
        return ent[KEY_AREA - 1];
    memcpy(&len, ent + 8, sizeof len);
    return len;
}

static inline const char *entry_key(const unsigned char *ent)
{
    const char *ext;

    if (ent[KEY_AREA - 1] != LONG_KEY)
        return (const char *)ent;
    memcpy(&ext, ent, sizeof ext);
    return ext;
}

/* A key made ready for probing: hashed once, and for a short key read as the two words of its
 * key area, so that a comparison is two word compares and no call. */
typedef struct probe_key {
    uint64_t hash;   /* the key's hash */
    uint64_t w0, w1; /* short keys: the key area as two little-endian words */
    const char *key; /* the caller's bytes */
    size_t len;      /* their length */
} probe_key;

static inline void probe_key_init(probe_key *pk, const char *key, size_t keylen)
{
    pk->key = key;
    pk->len = keylen;
    if (keylen > INLINE_KEY_LEN) {
        pk->hash = hash_bytes(key, keylen);
        pk->w0 = pk->w1 = 0;
    } else {
        hash_short_words((const unsigned char *)key, keylen, &pk->w0, &pk->w1);
        pk->hash = hash_end(hash_absorb(hash_absorb(hash_begin(keylen), pk->w0), pk->w1));
        pk->w1 |= (uint64_t)keylen << 56;
    }
}

/* The hash of the key stored in entry e, as probe_key_init computes it. */
static uint64_t entry_hash(const keytab *t, size_t e)
{
    const unsigned char *ent = entry_at(t, e);
    uint64_t w0, w1;
    size_t len;

    if (ent[KEY_AREA - 1] == LONG_KEY)
        return hash_bytes(entry_key(ent), entry_keylen(ent));
    len = ent[KEY_AREA - 1];
    w0 = hash_load64(ent);
    w1 = hash_load64(ent + 8) & ~((uint64_t)0xff << 56);
    return hash_end(hash_absorb(hash_absorb(hash_begin(len), w0), w1));
}

static inline int entry_matches(const unsigned char *ent, const probe_key *pk)
{
    if (pk->len <= INLINE_KEY_LEN)
        return hash_load64(ent) == pk->w0 && hash_load64(ent + 8) == pk->w1;
    return ent[KEY_AREA - 1] == LONG_KEY && entry_keylen(ent) == pk->len &&
           memcmp(entry_key(ent), pk->key, pk->len) == 0;
}

/* ---- Index ------------------------------------------------------------------------------------
 */

/* The fingerprint bits of a hash for an index whose entry numbers take `emask`. */
static inline uint32_t fingerprint(uint64_t hash, uint32_t emask)
{
    return (uint32_t)(hash >> 32) & ~emask;
}

/* Returns the index slot naming the key's entry, or the empty slot that ends its probe
 * (icap > 0). */
static inline size_t probe(const keytab *t, const probe_key *pk)
{
    uint32_t fp = fingerprint(pk->hash, t->emask);
    size_t i = (size_t)pk->hash & t->mask;

    for (;;) {
        uint32_t s = t->index[i];

        if (s == 0)
            return i;
        if ((s ^ fp) <= t->emask && entry_matches(entry_at(t, (s & t->emask) - 1), pk))
            return i;
        i = (i + 1) & t->mask;
    }
}

/* The home slot of the entry an occupied slot names. */
static size_t slot_home(const keytab *t, uint32_t s)
{
    return (size_t)entry_hash(t, (s & t->emask) - 1) & t->mask;
}

/* Empties index slot i and shifts the slots of its cluster back so no probe sequence breaks. */
static void index_remove(keytab *t, size_t i)
{
    size_t j = i;

    for (;;) {
        uint32_t s;
        size_t home;

        j = (j + 1) & t->mask;
        s = t->index[j];
        if (s == 0)
            break;
        home = slot_home(t, s);
        /* The slot at j may fill the hole at i when i lies on its probe path: from its home to
         * j, cyclically. */
        if (((j - home) & t->mask) >= ((j - i) & t->mask)) {
            t->index[i] = s;
            i = j;
        }
    }
    t->index[i] = 0;
}

/* Frees an entry's out-of-line key and calls destroy on its value; the entry stays in use. */
static void entry_release(keytab *t, size_t e, keytab_destroy_fn destroy, void *arg)
{
    unsigned char *ent = entry_at(t, e);

    if (destroy)
        destroy(ent + KEY_AREA, arg);
    if (ent[KEY_AREA - 1] == LONG_KEY) {
        t->key_len -= entry_keylen(ent);
        sluice_free((void *)entry_key(ent));
    }
}

/* Removes the (released) entry named by index slot i: empties the slot, then moves the last
 * entry into the freed place and renumbers its slot. */
static void slot_remove(keytab *t, size_t i)
{
    size_t e = (t->index[i] & t->emask) - 1, last = t->count - 1;

    index_remove(t, i);
    if (e != last) {
        size_t j = (size_t)entry_hash(t, last) & t->mask;

        while ((t->index[j] & t->emask) != last + 1)
            j = (j + 1) & t->mask;
        t->index[j] = (t->index[j] & ~t->emask) | (uint32_t)(e + 1);
        memcpy(entry_at(t, e), entry_at(t, last), t->entry_len);
    }
    t->count--;
}

/* Allocates and fills an index of new_icap slots over the entries (a power of two that holds
 * count at the load bound). Returns it, or NULL when out of memory. */
static uint32_t *index_build(const keytab *t, size_t new_icap)
{
    uint32_t *index;
    size_t new_mask = new_icap - 1;
    uint32_t new_emask = (uint32_t)new_mask;

    if (new_icap > MAX_ICAP)
        return NULL;
    index = sluice_calloc(new_icap, sizeof *index);
    if (!index)
        return NULL;
    for (size_t e = 0; e < t->count; e++) {
        uint64_t h = entry_hash(t, e);
        size_t j = (size_t)h & new_mask;

        while (index[j] != 0)
            j = (j + 1) & new_mask;
        index[j] = fingerprint(h, new_emask) | (uint32_t)(e + 1);
    }
    return index;
}

/* Replaces the index by one of new_icap slots built by index_build (NULL and 0: no index). */
static void index_install(keytab *t, uint32_t *index, size_t new_icap)
{
    sluice_free(t->index);
    /* Keep the sweep cursor at the same relative position of the index. */
    if (t->icap && new_icap)
        t->cursor = new_icap >= t->icap ? t->cursor * (new_icap / t->icap)
                                        : t->cursor / (t->icap / new_icap);
    else
        t->cursor = 0;
    t->index = index;
    t->icap = new_icap;
    t->mask = new_icap ? new_icap - 1 : 0;
    t->emask = (uint32_t)t->mask;
}

/* Gives back memory once the table is mostly empty: the index when under 1/8 full, to the
 * smallest size at most 3/8 full (far from both bounds, so alternating inserts and deletes
 * cannot make it resize back and forth); the entry array when under half used. */
static void maybe_shrink(keytab *t)
{
    if (t->icap == 0)
        return;
    if (t->count == 0) {
        index_install(t, NULL, 0);
        sluice_free(t->entries);
        t->entries = NULL;
        t->ecap = 0;
        return;
    }
    if (t->count < t->icap / 8) {
        size_t new_icap = MIN_ICAP;

        while (new_icap * 3 / 8 < t->count)
            new_icap *= 2;
        if (new_icap < t->icap) {
            uint32_t *index = index_build(t, new_icap);

            if (index)
                index_install(t, index, new_icap);
        }
    }
    if (t->ecap > MIN_ECAP && t->count < t->ecap / 2) {
        size_t new_ecap = t->count + t->count / 8 + MIN_ECAP;
        unsigned char *entries = sluice_realloc(t->entries, new_ecap * t->entry_len);

        if (entries) {
            t->entries = entries;
            t->ecap = new_ecap;
        }
    }
}

/* ---- Public functions -------------------------------------------------------------------------
 */

int keytab_new(size_t value_size, keytab **out)
{
    keytab *t;

    *out = NULL;
    if (value_size > 64)
        return SLUICE_EINVAL;
    t = sluice_calloc(1, sizeof *t);
    if (!t)
        return SLUICE_ENOMEM;
    t->value_size = value_size;
    t->entry_len = KEY_AREA + ((value_size + 7) & ~(size_t)7);
    *out = t;
    return SLUICE_OK;
}

void keytab_free(keytab *t, keytab_destroy_fn destroy, void *arg)
{
    if (!t)
        return;
    keytab_clear(t, destroy, arg);
    sluice_free(t);
}

void keytab_prefetch(const keytab *t, const char *key, size_t keylen)
{
    probe_key pk;

    if (t->count == 0 || keylen > UINT32_MAX)
        return;
    probe_key_init(&pk, key, keylen);
    __builtin_prefetch(&t->index[(size_t)pk.hash & t->mask], 0, 3);
}

void *keytab_find(const keytab *t, const char *key, size_t keylen)
{
    probe_key pk;
    uint32_t s;

    if (t->count == 0 || keylen > UINT32_MAX)
        return NULL;
    probe_key_init(&pk, key, keylen);
    s = t->index[probe(t, &pk)];
    return s != 0 ? entry_at(t, (s & t->emask) - 1) + KEY_AREA : NULL;
}

int keytab_upsert(keytab *t, const char *key, size_t keylen, void **value, int *created)
{
    probe_key pk;
    char *ext = NULL;
    uint32_t *new_index = NULL;
    unsigned char *ent;
    size_t i = 0, new_icap = 0;

    *value = NULL;
    if (created)
        *created = 0;
    /* Such a key could not be stored; treat it as the allocation it would need failing. */
    if (keylen > UINT32_MAX)
        return SLUICE_ENOMEM;
    probe_key_init(&pk, key, keylen);
    if (t->icap) {
        uint32_t s;

        i = probe(t, &pk);
        s = t->index[i];
        if (s != 0) {
            *value = entry_at(t, (s & t->emask) - 1) + KEY_AREA;
            return SLUICE_OK;
        }
    }
    /* A new key. Acquire everything that can fail before touching the table: the key copy, the
     * larger index, and last the larger entry array (a successful realloc cannot be undone). */
    if (keylen > INLINE_KEY_LEN) {
        ext = sluice_malloc(keylen);
        if (!ext)
            return SLUICE_ENOMEM;
        memcpy(ext, key, keylen);
    }
    if (t->icap == 0 || t->count + 1 > t->icap / 4 * 3) {
        new_icap = t->icap ? t->icap * 2 : MIN_ICAP;
        new_index = index_build(t, new_icap);
        if (!new_index)
            goto fail_index;
    }
    if (t->count == t->ecap) {
        size_t new_ecap = t->ecap + t->ecap / 8 + MIN_ECAP;
        unsigned char *entries;

        if (new_ecap > SIZE_MAX / t->entry_len)
            goto fail_entries;
        entries = sluice_realloc(t->entries, new_ecap * t->entry_len);
        if (!entries)
            goto fail_entries;
        t->entries = entries;
        t->ecap = new_ecap;
    }
    if (new_index) {
        index_install(t, new_index, new_icap);
        i = probe(t, &pk);
    }
    ent = entry_at(t, t->count);
    memset(ent, 0, t->entry_len);
    if (ext) {
        uint32_t len32 = (uint32_t)keylen;

        memcpy(ent, &ext, sizeof ext);
        memcpy(ent + 8, &len32, sizeof len32);
        ent[KEY_AREA - 1] = LONG_KEY;
        t->key_len += keylen;
    } else {
        if (keylen)
            memcpy(ent, key, keylen);
        ent[KEY_AREA - 1] = (unsigned char)keylen;
    }
    t->index[i] = fingerprint(pk.hash, t->emask) | (uint32_t)(t->count + 1);
    t->count++;
    *value = ent + KEY_AREA;
    if (created)
        *created = 1;
    return SLUICE_OK;

fail_entries:
    sluice_free(new_index);
fail_index:
    sluice_free(ext);
    return SLUICE_ENOMEM;
}

int keytab_delete(keytab *t, const char *key, size_t keylen, keytab_destroy_fn destroy, void *arg)
{
    probe_key pk;
    size_t i;

    if (t->count == 0 || keylen > UINT32_MAX)
        return SLUICE_ENOTFOUND;
    probe_key_init(&pk, key, keylen);
    i = probe(t, &pk);
    if (t->index[i] == 0)
        return SLUICE_ENOTFOUND;
    entry_release(t, (t->index[i] & t->emask) - 1, destroy, arg);
    slot_remove(t, i);
    maybe_shrink(t);
    return SLUICE_OK;
}

void keytab_clear(keytab *t, keytab_destroy_fn destroy, void *arg)
{
    for (size_t e = 0; e < t->count; e++)
        entry_release(t, e, destroy, arg);
    sluice_free(t->index);
    sluice_free(t->entries);
    t->index = NULL;
    t->entries = NULL;
    t->icap = 0;
    t->mask = 0;
    t->emask = 0;
    t->ecap = 0;
    t->count = 0;
    t->cursor = 0;
}

size_t keytab_sweep(keytab *t, size_t budget, int (*idle)(void *value, void *arg),
                    keytab_destroy_fn destroy, void *arg)
{
    size_t removed = 0;

    /* One call makes at most one pass, so a budget >= the capacity visits every entry once. */
    if (budget > t->icap)
        budget = t->icap;
    while (budget > 0) {
        size_t i = t->cursor;
        uint32_t s = t->index[i];

        if (s != 0 && idle(entry_at(t, (s & t->emask) - 1) + KEY_AREA, arg)) {
            /* The backward shift may pull an unvisited slot into slot i: look at it again
             * without advancing. Every removal empties a slot, so this terminates. */
            entry_release(t, (s & t->emask) - 1, destroy, arg);
            slot_remove(t, i);
            removed++;
            continue;
        }
        t->cursor = (i + 1) & t->mask;
        budget--;
    }
    maybe_shrink(t);
    return removed;
}

int keytab_next(const keytab *t, size_t *pos, const char **key, size_t *keylen, void **value)
{
    const unsigned char *ent;

    if (*pos >= t->count) {
        *pos = t->count;
        return 0;
    }
    ent = entry_at(t, (*pos)++);
    *key = entry_key(ent);
    *keylen = entry_keylen(ent);
    *value = (void *)(ent + KEY_AREA);
    return 1;
}

size_t keytab_count(const keytab *t)
{
    return t->count;
}

size_t keytab_bytes(const keytab *t)
{
    return t->icap * sizeof *t->index + t->ecap * t->entry_len + t->key_len;
}

size_t keytab_capacity(const keytab *t)
{
    return t->icap;
}
