/* SPDX-License-Identifier: MIT */
/*
 * Ready queues: one heap per task type of the QUEUED tasks that are due, most urgent first
 * (higher priority, then earlier submission; a woken task keeps its sequence number, so it goes
 * back in front of everything submitted after it). A heap of the types that have ready tasks,
 * ordered by their most urgent task, answers "the most urgent task of any type" in O(1).
 *
 * Invariants:
 * - A type is in the types heap exactly when its ready heap is not empty.
 * - The types heap has room for every type (reserved when a type is created), so filing a type
 *   there never allocates.
 */
#ifndef SLUICE_ENGINE_READY_H
#define SLUICE_ENGINE_READY_H

#include <stddef.h>

#include "engine/engine_impl.h"

/* Makes room for `more` tasks in t's ready heap beyond those in it. 0 or SLUICE_ENOMEM. */
int ready_reserve(etype *t, size_t more);

/* Files task t (QUEUED, in no heap) in its type's ready heap. Returns 0 or SLUICE_ENOMEM
 * (nothing changed); never fails after a successful ready_reserve() for it. */
int ready_push(sluice_engine *e, task *t);

/* Takes task t out of its type's ready heap. */
void ready_remove(sluice_engine *e, task *t);

/* Returns the most urgent ready task among the named types (ntypes == 0: all types), without
 * removing it; NULL when there is none. */
task *ready_pick(const sluice_engine *e, const char *const *types, size_t ntypes);

/* The order of the types heap. */
int ready_type_less(const void *a, const void *b);

#endif
