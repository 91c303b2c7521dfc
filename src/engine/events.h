/* SPDX-License-Identifier: MIT */
/*
 * Event aggregation: the engine's events (throttled, deferred, rejected, unknown limit, budget,
 * key cap) pass through here on their way to the sink, so that sustained throttling of a key
 * becomes one immediate event plus one summary per interval instead of an event storm.
 *
 * Events are grouped by their identity: (kind, limit, key, type), plus the percent (`wanted`) for
 * BUDGET events so that crossing 80% and crossing 100% are never merged. Any of the strings may
 * be NULL, and NULL is a different identity from "".
 *
 * Invariants:
 * - The first event of a group opens an interval [now, now + interval) and is delivered at once
 *   (summary 0). Later events of the group inside the interval are only accumulated.
 * - When the interval ends, the group is delivered as ONE summary (summary 1) if anything was
 *   accumulated, and forgotten either way: memory is bounded by the groups that saw an event in
 *   the last interval, whatever the rate of events.
 * - No event is lost silently: when memory runs out, the event is delivered at once,
 *   unaggregated, and the call reports SLUICE_ENOMEM.
 * - Pure: time comes only from the callers' now_ns; nothing reads a clock.
 *
 * Not thread-safe: the engine's one thread owns the object. The sink must not call back into the
 * same events object.
 */
#ifndef SLUICE_ENGINE_EVENTS_H
#define SLUICE_ENGINE_EVENTS_H

#include <stdint.h>

#include "sluice/engine.h"

typedef struct events events;

/* Creates an aggregator whose intervals last interval_ns, with no sink (events are aggregated
 * and dropped until events_set_sink()). Returns 0 and *out (free it with events_free()), or
 * SLUICE_EINVAL (out NULL, interval_ns < 1) / SLUICE_ENOMEM with *out NULL. */
int events_new(int64_t interval_ns, events **out);

/* Frees the aggregator. Summaries still pending are dropped, not delivered: call
 * events_flush(ev, SLUICE_NEVER) first to deliver them. Accepts NULL. */
void events_free(events *ev);

/* Sets the sink that receives every delivered event (fn NULL: events are dropped), with arg
 * passed through. Summaries pending from before go to the new sink. The sink gets borrowed
 * pointers, valid during the callback only. */
void events_set_sink(events *ev, sluice_event_fn fn, void *arg);

/* Takes one event that happened at now_ns. First delivers the summaries of every group whose
 * interval ended at or before now_ns (as events_flush()). Then, if e's group has an open
 * interval, accumulates e into it: count summed (a count of 0 counts as 1), wanted and granted
 * summed (saturating; BUDGET keeps its percent), next_slot_ns the latest, at_ns the first of the
 * accumulated events. Otherwise opens an interval and delivers e at once with summary 0 and a
 * count of at least 1.
 *
 * e and its strings are borrowed for the call; what is kept is copied. e->summary is ignored.
 * Returns 0; SLUICE_EINVAL when ev or e is NULL; SLUICE_ENOMEM when the group could not be
 * recorded, in which case e was delivered at once, unaggregated (nothing else changed). */
int events_emit(events *ev, const sluice_event *e, int64_t now_ns);

/* Delivers one summary for every group whose interval ended at or before now_ns and had events
 * after its first, in order of interval end, and forgets all those groups (also the ones without
 * a summary). Allocates nothing. Returns 0, or SLUICE_EINVAL when ev is NULL.
 * Ensures: events_next_flush(ev) > now_ns, or is SLUICE_NEVER. */
int events_flush(events *ev, int64_t now_ns);

/* Returns the earliest interval end at which events_flush() has work, or SLUICE_NEVER when no
 * group is open (also for ev NULL). A group whose interval ends after the largest representable
 * time reports SLUICE_NEVER too; events_flush(ev, SLUICE_NEVER) still delivers it. */
int64_t events_next_flush(const events *ev);

#endif
