/* SPDX-License-Identifier: MIT */
/*
 * The key table: an open-addressing hash table from byte-string keys to a fixed-size value
 * stored inline (the per-key state of one limit), built to cost under 48 bytes per tracked key
 * with a 16-byte value: one array of 32-byte slots (key and value side by side) whose capacity
 * grows by 3/16 at a load of 13/16 rather than doubling.
 *
 * Invariants:
 * - Linear probing with backward-shift deletion: no tombstones, so lookups stay short after
 *   millions of deletions; the load is kept between about 2/3 and 13/16 while the table grows.
 * - A key is stored once, as given (the caller hashes long keys before they get here); keys of
 *   up to 15 bytes live inside the slot, longer ones in one allocation of their own.
 * - Value pointers returned by find/upsert stay valid until the next upsert, delete, sweep or
 *   clear on the same table (each may move entries; deletions shrink the table once it is under
 *   1/4 full, so memory follows the keys tracked).
 * - Running out of memory never aborts: an upsert that cannot allocate returns SLUICE_ENOMEM
 *   with the table unchanged, and a shrink that cannot allocate leaves the table larger.
 *
 * Workload: one lookup per decision, so the hot path is one hash, one or two adjacent cache
 * lines, no call and no allocation for a key already present.
 */
#ifndef SLUICE_CORE_KEYTAB_H
#define SLUICE_CORE_KEYTAB_H

#include <stddef.h>
#include <stdint.h>

typedef struct keytab keytab;

/* Called on a value before its entry is removed or the table freed; may be NULL. */
typedef void (*keytab_destroy_fn)(void *value, void *arg);

/* Creates a table of values of value_size bytes (<= 64, stored 8-byte aligned and zeroed on
 * insertion). Returns 0 and *out, or SLUICE_EINVAL / SLUICE_ENOMEM with *out NULL. */
int keytab_new(size_t value_size, keytab **out);

/* Frees the table, calling destroy on every value first. Accepts NULL. */
void keytab_free(keytab *t, keytab_destroy_fn destroy, void *arg);

/* Returns the value of key, or NULL when absent. */
void *keytab_find(const keytab *t, const char *key, size_t keylen);

/* Asks the CPU to fetch key's home slot into cache, without waiting. A caller that knows the
 * next keys it will look up (a batch, a pipeline) prefetches a few ahead so their cache misses
 * overlap. No effect on the table's contents. */
void keytab_prefetch(const keytab *t, const char *key, size_t keylen);

/* Finds key, or inserts it with a zeroed value. Sets *value, and *created to 1 when inserted
 * (may be NULL). Returns 0, or SLUICE_ENOMEM with the table unchanged. */
int keytab_upsert(keytab *t, const char *key, size_t keylen, void **value, int *created);

/* Removes key, calling destroy on its value first. Returns 0 or SLUICE_ENOTFOUND. */
int keytab_delete(keytab *t, const char *key, size_t keylen, keytab_destroy_fn destroy, void *arg);

/* Removes every entry (destroy called on each), keeping the table usable. */
void keytab_clear(keytab *t, keytab_destroy_fn destroy, void *arg);

/* Visits up to `budget` slots, continuing from where the previous call stopped and wrapping
 * around; removes each entry for which idle(value, arg) returns non-zero (destroy called first).
 * Returns how many entries were removed.
 * Ensures: one call makes at most one pass (a budget above keytab_capacity() is reduced to it),
 * and a pass of keytab_capacity() slots over a table that is not otherwise changed calls idle on
 * every entry at least once (an entry pulled back by a removal may be asked twice). */
size_t keytab_sweep(keytab *t, size_t budget, int (*idle)(void *value, void *arg),
                    keytab_destroy_fn destroy, void *arg);

/* Iteration in slot order. Start with *pos = 0; returns 1 and fills key, keylen, value for the
 * next entry, or 0 at the end. The table must not change during an iteration. */
int keytab_next(const keytab *t, size_t *pos, const char **key, size_t *keylen, void **value);

/* Number of entries. */
size_t keytab_count(const keytab *t);

/* Bytes the slot array the next new key would make the table grow to takes (0 when the key fits
 * in the array as it is). Lets a caller weigh an insert against the memory budget first. */
size_t keytab_growth_bytes(const keytab *t);

/* Bytes allocated by the table: slots plus out-of-line keys. */
size_t keytab_bytes(const keytab *t);

/* Number of slots (0 before the first insertion and once the table is empty again): the
 * budget of a full keytab_sweep() pass. */
size_t keytab_capacity(const keytab *t);

/* The longest distance, in slots, from any entry's home slot to its own (0 for an empty table):
 * what the slowest lookup of a present key walks. For tests (keys crafted to collide) and
 * benchmarks; it reads the whole slot array. */
size_t keytab_longest_probe(const keytab *t);

#endif
