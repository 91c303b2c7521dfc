/* SPDX-License-Identifier: MIT */
/*
 * The key table (see keytab.h): open addressing with linear probing and backward-shift deletion.
 *
 * Slot layout, `slot_len` bytes each (a multiple of 8, so every value is 8-byte aligned):
 *
 *     0  uint64 head     tag | keylen << 32, the tag being 32 bits of the key's hash, never 0;
 *                        a head of 0 marks an empty slot
 *     8  16 bytes        the key itself, zero-padded, when keylen <= 16; else a pointer to the
 *                        key's own allocation
 *    24  value           value_size bytes rounded up to 8
 *
 * One 64-bit compare of the head and two of the key words decide whether a slot holds a short
 * key, so the hot path is one hash, one cache line (sometimes two) and no call.
 *
 * A 16-byte value thus costs a 40-byte slot; at the maximum load of 3/4 that is 53 bytes per key,
 * and between 53 and 107 on the way from one doubling to the next.
 *
 * Invariants:
 * - cap is 0 (no slot array yet, or every entry gone) or a power of two, and count <= cap * 3/4;
 * - an entry's home slot is tag & mask, and every slot from its home to its own is occupied (the
 *   linear probing invariant that backward-shift deletion keeps, so no tombstones are needed);
 * - key_len is the sum of the out-of-line key allocations.
 *
 * The table shrinks when deletions or sweeps leave it under 1/8 full, so memory follows the keys
 * actually tracked. A failed shrink is harmless: the table just stays larger.
 */
#include "keytab.h"

#include <string.h>

#include "base/alloc.h"
#include "base/hash.h"
#include "sluice/error.h"

#define INLINE_KEY_LEN 16                /* keys up to this length live in the slot */
#define KEY_OFF        8                 /* offset of the key (or key pointer) in a slot */
#define VALUE_OFF      24                /* offset of the value in a slot */
#define MIN_CAP        16                /* smallest slot array */
#define MAX_CAP        ((size_t)1 << 31) /* the 32-bit tags hold every bit a mask can use */

struct keytab {
    unsigned char *slots; /* cap * slot_len bytes, owned; NULL while cap == 0 */
    size_t cap;           /* slots: 0 or a power of two */
    size_t mask;          /* cap - 1 (0 while cap == 0) */
    size_t count;         /* occupied slots */
    size_t slot_len;      /* bytes per slot */
    size_t value_size;    /* bytes of a value as the caller sees it */
    size_t key_len;       /* bytes allocated for out-of-line keys */
    size_t cursor;        /* next slot keytab_sweep visits */
};

/* ---- Slots ------------------------------------------------------------------------------------
 */

/*
 * A slot's first 8 bytes, read and written as one native uint64: the tag in the low half, the key
 * length in the high half. An empty slot's head is 0; an entry's never is (its tag is not 0).
 */
static inline uint64_t make_head(uint32_t tag, size_t keylen)
{
    return (uint64_t)tag | ((uint64_t)keylen << 32);
}

static inline uint64_t head_of(const unsigned char *slot)
{
    uint64_t head;

    memcpy(&head, slot, sizeof head);
    return head;
}

static inline size_t head_keylen(uint64_t head)
{
    return (size_t)(head >> 32);
}

static inline size_t head_home(const keytab *t, uint64_t head)
{
    return (size_t)(uint32_t)head & t->mask;
}

static inline unsigned char *slot_at(const keytab *t, size_t i)
{
    return t->slots + i * t->slot_len;
}

static inline const char *slot_key(const unsigned char *slot, size_t keylen)
{
    const char *ext;

    if (keylen <= INLINE_KEY_LEN)
        return (const char *)slot + KEY_OFF;
    memcpy(&ext, slot + KEY_OFF, sizeof ext);
    return ext;
}

/* A key made ready for probing: hashed once, and for an inline key read as the two words its
 * slot holds, so that a comparison is three word compares and no call. */
typedef struct probe_key {
    uint64_t head;   /* the head of this key's slot */
    uint64_t w0, w1; /* inline keys: the key area of the slot */
    const char *key; /* the caller's bytes */
    size_t len;      /* their length */
} probe_key;

static inline void probe_key_init(probe_key *pk, const char *key, size_t keylen)
{
    uint64_t h;
    uint32_t tag;

    pk->key = key;
    pk->len = keylen;
    if (keylen > INLINE_KEY_LEN) {
        h = hash_bytes(key, keylen);
        pk->w0 = pk->w1 = 0;
    } else {
        hash_short_words((const unsigned char *)key, keylen, &pk->w0, &pk->w1);
        h = hash_end(hash_absorb(hash_absorb(hash_begin(keylen), pk->w0), pk->w1));
    }
    tag = (uint32_t)h ^ (uint32_t)(h >> 32);
    pk->head = make_head(tag ? tag : 1u, keylen);
}

/* Returns the index of the key's slot, or of the empty slot that ends its probe (cap > 0). */
static inline size_t probe(const keytab *t, const probe_key *pk)
{
    size_t i = head_home(t, pk->head);

    if (pk->len <= INLINE_KEY_LEN) {
        for (;;) {
            const unsigned char *slot = slot_at(t, i);
            uint64_t head = head_of(slot);

            if (head == 0 || (head == pk->head && hash_load64(slot + KEY_OFF) == pk->w0 &&
                              hash_load64(slot + KEY_OFF + 8) == pk->w1))
                return i;
            i = (i + 1) & t->mask;
        }
    }
    for (;;) {
        const unsigned char *slot = slot_at(t, i);
        uint64_t head = head_of(slot);

        if (head == 0 ||
            (head == pk->head && memcmp(slot_key(slot, pk->len), pk->key, pk->len) == 0))
            return i;
        i = (i + 1) & t->mask;
    }
}

/* Frees an entry's out-of-line key and calls destroy on its value; the slot stays occupied. */
static void slot_release(keytab *t, unsigned char *slot, keytab_destroy_fn destroy, void *arg)
{
    size_t keylen = head_keylen(head_of(slot));

    if (destroy)
        destroy(slot + VALUE_OFF, arg);
    if (keylen > INLINE_KEY_LEN) {
        sluice_free((void *)slot_key(slot, keylen));
        t->key_len -= keylen;
    }
}

/* Empties slot i and shifts the entries of its cluster back so no probe sequence is broken. */
static void slot_remove(keytab *t, size_t i)
{
    size_t j = i;

    for (;;) {
        unsigned char *next;
        uint64_t head;
        size_t home;

        j = (j + 1) & t->mask;
        next = slot_at(t, j);
        head = head_of(next);
        if (head == 0)
            break;
        home = head_home(t, head);
        /* The entry at j may fill the hole at i when i lies on its probe path: from its home
         * to j, cyclically. */
        if (((j - home) & t->mask) >= ((j - i) & t->mask)) {
            memcpy(slot_at(t, i), next, t->slot_len);
            i = j;
        }
    }
    memset(slot_at(t, i), 0, t->slot_len);
    t->count--;
}

/* Moves every entry into a fresh array of new_cap slots (0 frees the array; otherwise a power of
 * two that holds count at the load bound). Returns 0 or SLUICE_ENOMEM with t unchanged. */
static int rehash(keytab *t, size_t new_cap)
{
    unsigned char *slots = NULL;
    size_t new_mask = new_cap ? new_cap - 1 : 0;

    if (new_cap) {
        if (new_cap > MAX_CAP || new_cap > SIZE_MAX / t->slot_len)
            return SLUICE_ENOMEM;
        slots = sluice_calloc(new_cap, t->slot_len);
        if (!slots)
            return SLUICE_ENOMEM;
    }
    for (size_t i = 0; i < t->cap; i++) {
        const unsigned char *src = slot_at(t, i);
        uint64_t head = head_of(src);
        size_t j;

        if (head == 0)
            continue;
        j = (size_t)(uint32_t)head & new_mask;
        while (head_of(slots + j * t->slot_len) != 0)
            j = (j + 1) & new_mask;
        memcpy(slots + j * t->slot_len, src, t->slot_len);
    }
    sluice_free(t->slots);
    /* Keep the sweep cursor at the same relative position of the table. */
    if (t->cap && new_cap)
        t->cursor =
            new_cap >= t->cap ? t->cursor * (new_cap / t->cap) : t->cursor / (t->cap / new_cap);
    else
        t->cursor = 0;
    t->slots = slots;
    t->cap = new_cap;
    t->mask = new_mask;
    return SLUICE_OK;
}

/* Shrinks the array once it is under 1/8 full, to the smallest size at most 3/8 full (far from
 * both bounds, so alternating inserts and deletes cannot make it resize back and forth). */
static void maybe_shrink(keytab *t)
{
    size_t new_cap;

    if (t->cap == 0 || t->count >= t->cap / 8)
        return;
    if (t->count == 0) {
        (void)rehash(t, 0);
        return;
    }
    new_cap = MIN_CAP;
    while (new_cap * 3 / 8 < t->count)
        new_cap *= 2;
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
    t = sluice_calloc(1, sizeof *t);
    if (!t)
        return SLUICE_ENOMEM;
    t->value_size = value_size;
    t->slot_len = VALUE_OFF + ((value_size + 7) & ~(size_t)7);
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
    __builtin_prefetch(slot_at(t, head_home(t, pk.head)), 1, 3);
}

void *keytab_find(const keytab *t, const char *key, size_t keylen)
{
    probe_key pk;
    unsigned char *slot;

    if (t->count == 0 || keylen > UINT32_MAX)
        return NULL;
    probe_key_init(&pk, key, keylen);
    slot = slot_at(t, probe(t, &pk));
    return head_of(slot) != 0 ? slot + VALUE_OFF : NULL;
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
    probe_key_init(&pk, key, keylen);
    if (t->cap) {
        i = probe(t, &pk);
        slot = slot_at(t, i);
        if (head_of(slot) != 0) {
            *value = slot + VALUE_OFF;
            return SLUICE_OK;
        }
    }
    /* A new key. Acquire everything that can fail before touching the table. */
    if (keylen > INLINE_KEY_LEN) {
        ext = sluice_malloc(keylen);
        if (!ext)
            return SLUICE_ENOMEM;
        memcpy(ext, key, keylen);
    }
    if (t->cap == 0 || (t->count + 1) > t->cap / 4 * 3) {
        if (rehash(t, t->cap ? t->cap * 2 : MIN_CAP) != SLUICE_OK) {
            sluice_free(ext);
            return SLUICE_ENOMEM;
        }
        i = probe(t, &pk);
    }
    slot = slot_at(t, i);
    memset(slot, 0, t->slot_len);
    memcpy(slot, &pk.head, sizeof pk.head);
    if (ext) {
        memcpy(slot + KEY_OFF, &ext, sizeof ext);
        t->key_len += keylen;
    } else if (keylen) {
        memcpy(slot + KEY_OFF, key, keylen);
    }
    t->count++;
    *value = slot + VALUE_OFF;
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
    probe_key_init(&pk, key, keylen);
    i = probe(t, &pk);
    if (head_of(slot_at(t, i)) == 0)
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

        if (head_of(slot) != 0)
            slot_release(t, slot, destroy, arg);
    }
    sluice_free(t->slots);
    t->slots = NULL;
    t->cap = 0;
    t->mask = 0;
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

        if (head_of(slot) != 0 && idle(slot + VALUE_OFF, arg)) {
            /* The backward shift may pull an unvisited entry into slot i: look at it again
             * without advancing. Every removal empties a slot, so this terminates. */
            slot_release(t, slot, destroy, arg);
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
    for (size_t i = *pos; i < t->cap; i++) {
        unsigned char *slot = slot_at(t, i);
        uint64_t head = head_of(slot);
        size_t len = head_keylen(head);

        if (head == 0)
            continue;
        *pos = i + 1;
        *key = slot_key(slot, len);
        *keylen = len;
        *value = slot + VALUE_OFF;
        return 1;
    }
    *pos = t->cap;
    return 0;
}

size_t keytab_count(const keytab *t)
{
    return t->count;
}

size_t keytab_bytes(const keytab *t)
{
    return t->cap * t->slot_len + t->key_len;
}

size_t keytab_capacity(const keytab *t)
{
    return t->cap;
}
