/* SPDX-License-Identifier: MIT */
/*
 * A pointer table: an open-addressing hash set of object pointers, each filed under a 64-bit
 * hash the caller computes from the object's key. The engine indexes tasks by id and by task
 * key, wait queues by limit and key, and types by name with it; the objects own their keys, the
 * table only their pointers.
 *
 * Invariants:
 * - Linear probing with backward-shift deletion (no tombstones); load kept at or below 3/4.
 * - Removing never shrinks the table, so an insert that follows a successful ptab_reserve()
 *   never allocates: callers reserve before they change anything, then commit without a chance
 *   of running out of memory. Only ptab_shrink(), called when nothing is reserved, gives
 *   memory back.
 * - A table made with ptab_init_fixed() lives in the caller's slots: it never allocates, never
 *   grows (an insert past 3/4 of its slots fails) and ptab_free() leaves the slots alone.
 */
#ifndef SLUICE_BASE_PTAB_H
#define SLUICE_BASE_PTAB_H

#include <stddef.h>
#include <stdint.h>

typedef struct ptab_slot {
    uint64_t hash; /* the object's hash */
    void *p;       /* the object; NULL marks an empty slot */
} ptab_slot;

typedef struct ptab {
    ptab_slot *slots; /* cap slots, cap a power of two (or 0) */
    size_t cap;
    size_t n;  /* objects held */
    int fixed; /* the slots are the caller's (ptab_init_fixed): never grown nor freed */
} ptab;

/* Returns non-zero when object p has the key `key` (whatever the caller's key type is). */
typedef int (*ptab_eq_fn)(const void *p, const void *key);

/* An empty table (allocates nothing). */
void ptab_init(ptab *t);

/* An empty table in the caller's `cap` zeroed slots (cap a power of two), for a table whose size
 * is known when it is written, such as an index over a constant array: it holds at most
 * cap / 4 * 3 objects and allocates nothing, so filing and finding cannot run out of memory. */
void ptab_init_fixed(ptab *t, ptab_slot *slots, size_t cap);

/* Frees the slots (not the objects; not the caller's slots of a fixed table) and empties t. */
void ptab_free(ptab *t);

/* Makes room for `more` insertions beyond the objects held. Returns 0 or SLUICE_ENOMEM
 * (unchanged). */
int ptab_reserve(ptab *t, size_t more);

/* Removes every object, keeping the slots (O(slots)). */
void ptab_clear(ptab *t);

/* Finds the object filed under hash for which eq(p, key) holds; NULL when absent. Inline, so
 * that a lookup with a constant eq (every caller's) compiles to a loop with the comparison in it:
 * the lookups of the command path (the command index, CL.THROTTLE's parameter sets) rely on it. */
static inline void *ptab_find(const ptab *t, uint64_t hash, const void *key, ptab_eq_fn eq)
{
    size_t mask, i;

    if (!t->cap)
        return NULL;
    mask = t->cap - 1;
    for (i = (size_t)hash & mask; t->slots[i].p; i = (i + 1) & mask)
        if (t->slots[i].hash == hash && eq(t->slots[i].p, key))
            return t->slots[i].p;
    return NULL;
}

/* Files p under hash (p must not be in the table). Returns 0 or SLUICE_ENOMEM (unchanged). */
int ptab_insert(ptab *t, uint64_t hash, void *p);

/* Removes p (filed under hash). Returns 0 or SLUICE_ENOTFOUND. */
int ptab_remove(ptab *t, uint64_t hash, const void *p);

/* Iteration in slot order: start with *pos = 0; returns the next object, or NULL at the end.
 * The table must not change during an iteration (collect first, then remove). */
void *ptab_next(const ptab *t, size_t *pos);

/* Bytes allocated. */
size_t ptab_bytes(const ptab *t);

/* Gives memory back once the table is under 1/8 full: rebuilds it at the smallest size at most
 * 3/8 full (so alternating inserts and removals cannot make it resize back and forth), or frees
 * the slots when it is empty. Best effort: out of memory leaves the table as it is. Cancels any
 * room ptab_reserve() made. */
void ptab_shrink(ptab *t);

#endif
