/* SPDX-License-Identifier: MIT */
/*
 * Recurring series: a task template submitted on a schedule (every interval from a start, or a
 * five-field UTC cron expression), between an optional start and end, for at most max_runs
 * real executions.
 *
 * Each occurrence is an ordinary task, throttled like any other. The series' rhythm never
 * depends on the limiter: the next occurrence is computed from the schedule, not from when the
 * previous one could run. An occurrence that cannot start before the series' end (its slot lies
 * after it, or a limit rejects it or refuses it for the horizon) is skipped: FAILED with reason
 * SKIPPED, counted in `skipped`, not in `runs`. Schedule points missed because no tick came
 * (downtime) are skipped too. max_runs counts occurrences that started; the series stops
 * creating occurrences while those pending could complete it.
 *
 * Seed 003's pacing: when a pending occurrence is deferred (parked) or refused by a rate-like
 * limit, the points before that limit's next slot for another occurrence are skipped at once
 * (counted in `skipped`) and the next occurrence is the first point at or after it, so a series
 * far faster than its limit re-checks about once per refill interval. Adding a series whose
 * shortest gap is under a limit's emission interval emits one RECURRING_TOO_FAST event.
 *
 * Persistence: a series is saved as its definition and its runs and skipped counters, reported to
 * the series hook whenever one of them changes. It comes back scheduled from the first point at
 * or after the restore (points that passed while the process was down are neither run nor
 * counted), and its pending count is rebuilt as its occurrences are restored and relinked.
 *
 * Invariants:
 * - A live series (next_ns != SLUICE_NEVER) is in the engine's series_due heap.
 * - pending == occurrences created and neither started nor finished.
 */
#ifndef SLUICE_ENGINE_RECURRING_H
#define SLUICE_ENGINE_RECURRING_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine_impl.h"

/* Sets up the engine's (empty) series table and heap. */
void recurring_init(sluice_engine *e);

/* Adds (or replaces) a series; see sluice_engine_add_recurring(). */
int recurring_add(sluice_engine *e, const sluice_recurring_spec *spec, int64_t now, char *msg,
                  size_t msglen);

/* Brings a series back with its counters; see sluice_engine_restore_recurring(). */
int recurring_restore(sluice_engine *e, const sluice_recurring_spec *spec, int64_t runs,
                      int64_t skipped, int64_t now, char *msg, size_t msglen);

/* A series' definition and counters; see sluice_engine_recurring_state(). */
int recurring_state(const sluice_engine *e, const char *name, sluice_recurring_spec *spec,
                    int64_t *runs, int64_t *skipped);

/* The pace check of add on a series that is not kept here; see
 * sluice_engine_check_recurring_pace(). */
void recurring_check_pace(sluice_engine *e, const sluice_recurring_spec *spec, int64_t now);

/* Removes a series, cancelling (at now_ns) its queued and parked occurrences. 0 or
 * SLUICE_ENOTFOUND. */
int recurring_del(sluice_engine *e, const char *name, int64_t now_ns);

/* Counters of a series. 0 or SLUICE_ENOTFOUND. */
int recurring_info(const sluice_engine *e, const char *name, sluice_recurring_info *out);

/* Creates the occurrences that are due at now. 0 or SLUICE_ENOMEM (retried by the next tick). */
int recurring_tick(sluice_engine *e, int64_t now);

/* The next occurrence of any series, or SLUICE_NEVER. */
int64_t recurring_next_wake(const sluice_engine *e);

/* Pending occurrence t was deferred (parked) or refused by a limit whose next slot for
 * another occurrence is slot_ns: the series' schedule points before slot_ns, which could only
 * wait behind the limiter, are skipped (counted in `skipped`, as downtime) and the next
 * occurrence is the first point at or after slot_ns (seed 003). No-op when t is not a pending
 * occurrence, slot_ns is SLUICE_NEVER or the series' next point is already there. */
void recurring_skip_ahead(sluice_engine *e, const task *t, int64_t slot_ns);

/* Returns 1 when t is an occurrence that has not started yet (the series manages it until its
 * first delivery; after that it is an ordinary task, retries included). */
int recurring_pending(const task *t);

/* Returns 1 when pending occurrence t must be skipped at the gate: its series is complete or
 * over its end. */
int recurring_must_skip(const task *t, int64_t now);

/* Returns 1 when pending occurrence t, whose slot is slot_ns, would start after its series'
 * end. */
int recurring_past_end(const task *t, int64_t slot_ns);

/* An occurrence started (its first delivery): counts a run, ends a series at max_runs. */
void recurring_started(sluice_engine *e, task *t);

/* A pending occurrence finished without starting: skipped (counted) or cancelled (not). */
void recurring_dropped(sluice_engine *e, task *t, int skipped);

/* The name of the series t is an occurrence of, or NULL. Valid while the series is. */
const char *recurring_name(const task *t);

/* Links restored task t to the series `name` when it exists (else t stays alone): a pending
 * occurrence counts as pending again, and the series' next point moves past t's submission so
 * that no schedule point runs twice. */
void recurring_relink(sluice_engine *e, task *t, const char *name);

/* Frees every series. */
void recurring_free_all(sluice_engine *e);

#endif
