/* SPDX-License-Identifier: MIT */
/*
 * A change set: the container behind the engine's change feed (feed.c, sluice_engine_changes):
 * what changed in memory and is not yet confirmed written by the feed's consumer (the server's
 * durable.c, or a shared store). The feed keeps two: the changes recorded since the last pull,
 * and the batch handed out and not yet confirmed, into which the first is merged at each pull.
 * Pure bookkeeping: no I/O, no clock.
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
#ifndef SLUICE_ENGINE_CHANGESET_H
#define SLUICE_ENGINE_CHANGESET_H

#include <stddef.h>
#include <stdint.h>

#include "sluice/engine.h"

typedef struct sluice_changes changeset; /* the public batch type is a change set */

/* Creates an empty set. Returns 0 and *out, or SLUICE_ENOMEM. */
int changeset_new(changeset **out);

/* Frees the set. Accepts NULL. */
void changeset_free(changeset *d);

/* Records a change. Each returns 0 or SLUICE_ENOMEM (the set unchanged). Recording the same
 * task or series twice keeps one entry; a limit's later operation replaces its earlier one; a
 * key's later state replaces its earlier one (state NULL, len 0: delete the key). */
int changeset_add_task(changeset *d, uint64_t id);
int changeset_add_series(changeset *d, const char *name);
int changeset_set_limit(changeset *d, const char *name, sluice_limit_def_op op, const char *spec);
int changeset_put_key(changeset *d, const char *id, const char *key, size_t keylen,
                      const void *state, size_t len);

/* Records that the store may hold key rows for limit id `id` (read back at start, or written
 * by changeset_put_key, which notes its id itself). Returns 0 or SLUICE_ENOMEM. */
int changeset_note_stored(changeset *d, const char *id);

/* The key state of limit `name` is to be deleted: every known id of it ("name" and each
 * "name/...") is queued for deletion and forgotten, and the key states recorded for them are
 * dropped. Returns 0, or SLUICE_ENOMEM with nothing dropped or forgotten (some deletions may be
 * queued already: harmless, they delete what is to be deleted anyway). */
int changeset_purge_limit(changeset *d, const char *name);

/* Walks one part; *pos starts at 0. Each returns 1 and fills the out-parameters with the next
 * entry, or 0 at the end. */
int changeset_next_task(const changeset *d, size_t *pos, uint64_t *id);
int changeset_next_series(const changeset *d, size_t *pos, const char **name);
int changeset_next_limit(const changeset *d, size_t *pos, const char **name,
                         sluice_limit_def_op *op, const char **spec);
int changeset_next_purge(const changeset *d, size_t *pos, const char **id);
int changeset_next_key(const changeset *d, size_t *pos, const char **id, const char **key,
                       size_t *keylen, const void **state, size_t *len);

/* Counts each part. */
void changeset_get_counts(const changeset *d, sluice_changes_counts *out);

/* Returns 1 when nothing is recorded (known ids aside). */
int changeset_is_empty(const changeset *d);

/* Returns 1 when tasks, series, limits or purges are recorded: a change a client may be waiting
 * on, as opposed to key states only (which a timer writes). */
int changeset_has_changes(const changeset *d);

/* Records every change of src into dst, as if each had been recorded into dst after what dst
 * holds: src's purges first (dropping dst's key states of those limits), then its key states,
 * limit definitions, series and tasks. Into a dst that records nothing (known ids aside), src's
 * changes are moved rather than copied: src is left with some or none of them, to be cleared.
 * Returns 0, or SLUICE_ENOMEM with part of src recorded and src still holding all of it (merging
 * it again later is harmless: each part dedups and the latest value wins). */
int changeset_merge(changeset *dst, changeset *src);

/* Forgets every recorded change after a commit wrote them all (known ids stay). */
void changeset_clear(changeset *d);

#endif
