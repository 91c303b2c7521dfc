/* SPDX-License-Identifier: MIT */
/*
 * The parking lot: wait queues of tasks denied for budget, one per limit, tier and key, and the
 * heap of their wake-up times.
 *
 * A task parks on the wait queue of the link whose slot is latest (the chain's denied_by), or
 * behind a more urgent task already parked on a key its chain touches (strict priority). When a
 * queue's wake time comes (or, for a concurrency limit, a lease of its key is released), the
 * most urgent prefix whose cumulative units fit the limit now goes back to the ready queue,
 * always at least the head when it fits alone; the rest waits for the next slot. Tasks are only
 * charged when a poll gates them again, so waking is a peek and never changes a limit.
 *
 * A task's start is estimated from its place in line (park_eta: the units of every more urgent
 * task on its queue plus its own); dispatch holds it against the limit's horizon when the task
 * parks behind others and when a more urgent task parks ahead of it (docs/configuration.md,
 * "Overflow and horizon"), and EXPLAIN shows the same figure.
 *
 * Invariants:
 * - A wait queue exists exactly while it holds a task; it is in the wake heap exactly while it
 *   is armed (wake_ns != SLUICE_NEVER).
 * - Every wait queue is armed (a queue of a concurrency limit is also woken by each release of
 *   a lease of its key, and every queue of the limit by a release the engine is told of with
 *   sluice_engine_limit_released; an expiry is the earliest lease expiry its wake was armed at).
 * - The wake heap has room for every wait queue, so arming never allocates.
 * - A queue's `last` is its least urgent task; while `units_exact`, `units` is the sum of its
 *   tasks' units on the queue's link.
 */
#ifndef SLUICE_ENGINE_PARK_H
#define SLUICE_ENGINE_PARK_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine_impl.h"

/* A wait queue is re-looked at this long after waking a prefix when the limit cannot say when
 * the next task fits (concurrency), in case the woken tasks never take their units. */
#define PARK_RECHECK_NS SLUICE_NS_PER_SEC

/* Finds the wait queue of a limit, tier and key; NULL when nothing is parked there. */
waitq *park_find(const sluice_engine *e, const elimit *l, uint16_t tier, const char *key,
                 size_t keylen);

/* Parks t (QUEUED, in no heap) on the wait queue of its link `link`, armed to wake by wake_ns
 * at the latest. Returns 0 or SLUICE_ENOMEM (nothing changed). */
int park_task(sluice_engine *e, task *t, uint16_t link, int64_t wake_ns);

/* Takes a PARKED task off its wait queue (freeing the queue when it empties); t is then in no
 * heap, its state unchanged. */
void park_remove(sluice_engine *e, task *t);

/* Wakes one wait queue at now: moves the prefix that fits back to the ready queues and re-arms
 * the queue for the rest. Returns 0 or SLUICE_ENOMEM (the queue stays armed for now). */
int park_wake(sluice_engine *e, waitq *q, int64_t now);

/* Wakes the queue of a limit, tier and key if there is one (after a lease was released). */
void park_wake_key(sluice_engine *e, elimit *l, uint16_t tier, const char *key, size_t keylen,
                   int64_t now);

/* Wakes every queue of l (units of it were freed outside the engine: a lease released). */
void park_wake_limit(sluice_engine *e, elimit *l, int64_t now);

/* Wakes every queue whose time came. Returns 0 or SLUICE_ENOMEM (the rest is left for later). */
int park_tick(sluice_engine *e, int64_t now);

/* The earliest armed wake time, or SLUICE_NEVER. */
int64_t park_next_wake(const sluice_engine *e);

/* Arms every wait queue of l to wake at `when` (its policy changed or it was removed). */
void park_rearm_limit(sluice_engine *e, elimit *l, int64_t when);

/* For explain: the tasks ahead of t on its queue and their units on that link. */
void park_position(const task *t, size_t *ahead, int64_t *units_ahead);

/* When t (parked on q, or about to park there on its link `link`) should start: the slot at
 * which the limit grants the units of every more urgent task on q plus t's own, and not before
 * q wakes (q's wake when the limit cannot estimate); SLUICE_NEVER when it can never grant them.
 * The same
 * figure TASK.EXPLAIN shows. */
int64_t park_eta(const waitq *q, const task *t, uint16_t link, int64_t now);

/* 1 when t's park_eta on q lies further from now than the horizon of q's limit (never for a
 * concurrency limit, nor when the estimate is unknown). */
int park_beyond_horizon(const waitq *q, const task *t, uint16_t link, int64_t now);

/* The slot at which the limit of q could grant `units` more behind every task on q (as if a
 * task of those units joined the end of the line now), not before q wakes; SLUICE_NEVER when it
 * cannot tell (a concurrency limit, a removed limit) or never can. A read: changes nothing. Used
 * to move a recurring series past the points that would only wait behind q. */
int64_t park_next_slot(const waitq *q, int64_t units, int64_t now);

/* The least urgent task on q (the last in line); NULL when q is empty. */
task *park_last(const waitq *q);

/* Bytes held by wait queues. */
size_t park_bytes(const sluice_engine *e);

/* Frees every wait queue (the tasks are freed by the caller). */
void park_free_all(sluice_engine *e);

/* The order of the wake heap. */
int park_wake_less(const void *a, const void *b);

#endif
