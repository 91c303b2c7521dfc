/* SPDX-License-Identifier: MIT */
/*
 * The dirty set: everything that changed in memory and is not yet in the store, waiting for the
 * next commit (durable.c writes it in one transaction per loop turn, and clears it only when that
 * transaction committed). Pure bookkeeping: no I/O, no clock.
 *
 * What it holds:
 * - task ids whose durable record changed (the store exports each at commit time; a task that is
 *   gone by then is deleted);
 * - recurring series names, likewise;
 * - runtime limit definitions: put the spec (LIMIT.SET), put a tombstone (LIMIT.DEL of a limit
 *   the configuration file declares) or drop the row; the latest operation on a name wins;
 * - limit ids whose stored key state must be deleted (a limit replaced or removed), expanded at
 *   once to every id known to have rows: the name itself and each "name/tier";
 * - limiter key states drained from the core limits, the latest blob per (limit id, key) (NULL:
 *   delete the key).
 *
 * Invariants:
 * - a purge of a limit drops the key states recorded for it before the purge, so a commit (which
 *   writes purges before keys) never writes an old limit's state back after deleting it;
 * - a failed commit changes nothing here: the same changes are written again by the next one;
 * - every returned pointer is borrowed, valid until the next call that changes the set.
 *
 * Workload: one turn's changes (up to some thousands of tasks and keys), cleared after every
 * commit. Memory goes through the replaceable allocator; an allocation failure returns
 * SLUICE_ENOMEM and leaves the set as it was.
 */
#ifndef SLUICE_SERVER_DIRTY_H
#define SLUICE_SERVER_DIRTY_H

#include <stddef.h>
#include <stdint.h>

/* What a commit does with a runtime limit definition. */
typedef enum dirty_limit_op {
    DIRTY_LIMIT_SET = 1, /* store the spec text: re-applied at start over the file's version */
    DIRTY_LIMIT_GONE,    /* store a tombstone: the limit is removed again at start */
    DIRTY_LIMIT_DROP,    /* delete the stored row: the configuration file's version applies */
} dirty_limit_op;

typedef struct dirty dirty;

/* Sizes of the parts of a dirty set. */
typedef struct dirty_counts {
    size_t tasks, series, limits, purges, keys;
} dirty_counts;

/* Creates an empty set. Returns 0 and *out, or SLUICE_ENOMEM. */
int dirty_new(dirty **out);

/* Frees the set. Accepts NULL. */
void dirty_free(dirty *d);

/* Records a change. Each returns 0 or SLUICE_ENOMEM (the set unchanged). Recording the same
 * task or series twice keeps one entry; a limit's later operation replaces its earlier one; a
 * key's later state replaces its earlier one (state NULL, len 0: delete the key). */
int dirty_add_task(dirty *d, uint64_t id);
int dirty_add_series(dirty *d, const char *name);
int dirty_set_limit(dirty *d, const char *name, dirty_limit_op op, const char *spec);
int dirty_put_key(dirty *d, const char *id, const char *key, size_t keylen, const void *state,
                  size_t len);

/* Records that the store may hold key rows for limit id `id` (read back at start, or written
 * by dirty_put_key, which notes its id itself). Returns 0 or SLUICE_ENOMEM. */
int dirty_note_stored(dirty *d, const char *id);

/* The key state of limit `name` is to be deleted: every known id of it ("name" and each
 * "name/...") is queued for deletion and forgotten, and the key states recorded for them are
 * dropped. Returns 0, or SLUICE_ENOMEM with nothing dropped or forgotten (some deletions may be
 * queued already: harmless, they delete what is to be deleted anyway). */
int dirty_purge_limit(dirty *d, const char *name);

/* Walks one part; *pos starts at 0. Each returns 1 and fills the out-parameters with the next
 * entry, or 0 at the end. */
int dirty_next_task(const dirty *d, size_t *pos, uint64_t *id);
int dirty_next_series(const dirty *d, size_t *pos, const char **name);
int dirty_next_limit(const dirty *d, size_t *pos, const char **name, dirty_limit_op *op,
                     const char **spec);
int dirty_next_purge(const dirty *d, size_t *pos, const char **id);
int dirty_next_key(const dirty *d, size_t *pos, const char **id, const char **key, size_t *keylen,
                   const void **state, size_t *len);

/* Counts each part. */
void dirty_get_counts(const dirty *d, dirty_counts *out);

/* Returns 1 when nothing is recorded (known ids aside). */
int dirty_is_empty(const dirty *d);

/* Returns 1 when tasks, series, limits or purges are recorded: a change a client may be waiting
 * on, as opposed to key states only (which a timer writes). */
int dirty_has_changes(const dirty *d);

/* Forgets every recorded change after a commit wrote them all (known ids stay). */
void dirty_clear(dirty *d);

#endif
