/* SPDX-License-Identifier: MIT */
/*
 * Ready queues: the QUEUED tasks of each task type that are due, in the order workers get them,
 * and a heap of the types that have ready tasks, ordered by the task each would hand out next,
 * which answers "the most urgent task of any type" in O(1).
 *
 * A type orders its ready tasks in one of two ways (sluice_type_policy.fairness):
 *
 * - FIFO (the default): one heap, higher priority first, then earlier submission (a woken task
 *   keeps its sequence number, so it goes back in front of everything submitted after it).
 *
 * - Fair between keys: the tasks are split into flows, one per tenant, the tenant being a
 *   task's key on the type's fair limit (fairq.lim; "" for a task that has no link to it). Each
 *   flow is a heap in FIFO order. The flows with tasks sit in a heap ordered by their head's
 *   priority, then by a virtual start tag, then by their head's sequence number; the type hands
 *   out the head of the first flow. Tags implement self-clocked fair queuing weighted by units:
 *   delivering a flow's head of u units (its units on the fair limit) moves that flow's tag on
 *   by u, and the type's virtual time is the largest tag so moved; a flow that gets a task while
 *   empty starts at the virtual time, i.e. behind the flows already served in this round. So
 *   within a priority every flow with tasks gets its share of units in turn, whatever the
 *   backlog of the others: a tenant with one task waits for at most one turn of each other busy
 *   tenant (each turn one task; a turn of u units lets the others catch up by u first), not for
 *   10000 tasks. Priority still comes first; within a flow, submission order; a tag is only
 *   moved by a delivery, so a task taken and parked costs its flow nothing. Tags saturate at
 *   INT64_MAX (2^63 units delivered), after which ties fall back to submission order.
 *
 * Every operation is O(log n): a flow is found by its key in a hash table, then one or two heap
 * updates. An empty flow is not freed at once (so a task taken out and put back, as poll does
 * when it runs out of memory, never allocates); it goes on the engine's idle list, which
 * ready_trim() frees. Emptied flows keep no state worth keeping: the virtual time is at or past
 * every tag, so a returning flow starts at the virtual time either way.
 *
 * Invariants:
 * - A type is in the types heap exactly when it has a ready task (nready > 0).
 * - The types heap has room for every type (reserved when a type is created), so filing a type
 *   there never allocates; a fair type's flow heap has room for every flow.
 * - A flow is in its type's flow heap exactly when it holds a task; an empty flow is on the
 *   engine's idle list.
 * - nready is the number of tasks in the type's heap (FIFO) or in its flows (fair).
 */
#ifndef SLUICE_ENGINE_READY_H
#define SLUICE_ENGINE_READY_H

#include <stddef.h>

#include "engine/engine_impl.h"
#include "engine/task.h"

/* Makes room for one more ready task of type t whose links are links[0..nlinks) (as resolved
 * for a submit or a restore), so that ready_push() of it cannot fail. 0 or SLUICE_ENOMEM. */
int ready_reserve_links(sluice_engine *e, etype *t, const link_spec *links, size_t nlinks);

/* Makes room for task t (QUEUED, in no heap) in its type's ready queue. 0 or SLUICE_ENOMEM. */
int ready_reserve(sluice_engine *e, const task *t);

/* Files task t (QUEUED, in no heap) in its type's ready queue. Returns 0 or SLUICE_ENOMEM
 * (nothing changed); never fails after a successful reservation for it, nor for a task just
 * taken out with ready_remove(). */
int ready_push(sluice_engine *e, task *t);

/* Takes task t out of its type's ready queue. Allocates nothing. */
void ready_remove(sluice_engine *e, task *t);

/* Task t, just taken out of its type's ready queue by a poll, was delivered: under fair
 * dispatch its flow has now been served its units. Allocates nothing. */
void ready_served(sluice_engine *e, const task *t);

/* The task type t hands out next, or NULL when it has none ready. */
task *ready_head(const etype *t);

/* Returns the next ready task among the named types (ntypes == 0: all types), the most urgent
 * of their heads, without removing it; NULL when there is none. */
task *ready_pick(const sluice_engine *e, const char *const *types, size_t ntypes);

/* Sets how type t orders its ready tasks: fair between the keys of limit `lim`, or FIFO when lim
 * is NULL, re-filing the tasks ready now (O(n log n), a configuration change). Returns 0 or
 * SLUICE_ENOMEM (nothing changed). */
int ready_set_fairness(sluice_engine *e, etype *t, elimit *lim);

/* The limit whose key is a task's tenant under fair dispatch; NULL when t is FIFO. */
elimit *ready_fair_limit(const etype *t);

/* For explain: under fair dispatch, the fair limit's name, the tenant key of t (borrowed from
 * its links; "" when none), how many of its flow's tasks are ready and how many flows have
 * ready tasks. Returns 0 when the type is FIFO (nothing filled), else 1. */
int ready_flow_info(const task *t, const char **limit, const char **key, size_t *keylen,
                    size_t *flow_ready, size_t *flows);

/* Frees the flows that are still empty. Allocates nothing; call after a step that may have
 * emptied flows (poll, tick, cancel). */
void ready_trim(sluice_engine *e);

/* Frees a type's fair queue and its flows (the type is being freed). */
void ready_free_type(sluice_engine *e, etype *t);

/* Bytes held by a type's ready queue. */
size_t ready_bytes(const etype *t);

/* The order of the types heap. */
int ready_type_less(const void *a, const void *b);

#endif
