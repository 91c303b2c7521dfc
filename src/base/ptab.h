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
    size_t n; /* objects held */
} ptab;

/* Returns non-zero when object p has the key `key` (whatever the caller's key type is). */
typedef int (*ptab_eq_fn)(const void *p, const void *key);

/* An empty table (allocates nothing). */
void ptab_init(ptab *t);

/* Frees the slots (not the objects). */
void ptab_free(ptab *t);

/* Makes room for `more` insertions beyond the objects held. Returns 0 or SLUICE_ENOMEM
 * (unchanged). */
int ptab_reserve(ptab *t, size_t more);

/* Finds the object filed under hash for which eq(p, key) holds; NULL when absent. */
void *ptab_find(const ptab *t, uint64_t hash, const void *key, ptab_eq_fn eq);

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
