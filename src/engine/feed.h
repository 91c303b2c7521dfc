/* SPDX-License-Identifier: MIT */
/*
 * The change feed (see "The change feed" in include/sluice/engine.h): the engine's record of
 * what changed since its consumer last confirmed a write, kept in two change sets (changeset.h):
 * `pending`, what was recorded since the last pull, and `batch`, what the last pull handed out
 * and the consumer has not confirmed. A pull merges pending into batch and drains the limiters'
 * changed keys into it; a confirmation clears batch. So a change recorded while a batch is out
 * waits in pending, and a batch that fails to be written is yielded again with what followed.
 *
 * The engine's modules record through the feed_* calls below, which cost one test when the feed
 * is off (e->feed NULL, the default).
 */
#ifndef SLUICE_ENGINE_FEED_H
#define SLUICE_ENGINE_FEED_H

#include <stdint.h>

#include "engine/changeset.h"
#include "sluice/engine.h"

typedef struct elimit elimit;

typedef struct feed {
    changeset *pending; /* recorded since the last pull */
    changeset *batch;   /* handed out by the last pull and not confirmed (empty when none) */
    int out;            /* 1 while a batch is out (pulled, not confirmed) */
    uint64_t seq;       /* changes a client may wait for, recorded since the start */
    uint64_t lost;      /* changes lost to out-of-memory while recording */
    elimit **dirty;     /* registered limits whose cores recorded key changes since their last
                         * drain (each with elimit.dirty set), in no order */
    size_t ndirty, dirty_cap;
    int dirty_all;   /* the list ran out of memory: the next pull visits every limit */
    uint64_t visits; /* limits a pull visited, since the start (feed_visits) */
} feed;

/* Forgets limit l from the feed's list of limits to drain, before l is freed (a no-op when it
 * is not on it). */
void feed_forget_limit(elimit *l);

/* Returns how many limits the pulls visited since the feed started (a pull visits only limits
 * with key changes to drain, unless the list of them ran out of memory): for tests. */
uint64_t feed_visits(const sluice_engine *e);

/* The durable record of task `id` changed, or the task was forgotten. Called after the change. */
void feed_task(feed *f, uint64_t id);

/* Series `name` was added, replaced, removed or recounted. */
void feed_series(feed *f, const char *name);

/* Limit `name` was replaced (or removed: gone 1): its stored key states are purged and its
 * runtime definition dropped (unless the caller records one over it), and the new limit's key
 * changes are tracked. */
void feed_limit_replaced(sluice_engine *e, const char *name, int gone);

/* Limit `name` changed its mode only: its stored runtime definition is dropped (unless the
 * caller records one over it); its key states stay. */
void feed_limit_mode(sluice_engine *e, const char *name);
/* The override of `key` on limit `name` was set or removed: the stored key state of its core
 * ("name/=key") is purged, the runtime definition dropped (unless the caller records one over
 * it), and the limit's key changes are tracked (its new core's included). */
void feed_override_changed(sluice_engine *e, const char *name, const char *key, size_t keylen);

/* Frees the feed. Accepts NULL. */
void feed_free(feed *f);

#endif
