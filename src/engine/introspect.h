/* SPDX-License-Identifier: MIT */
/*
 * Introspection counters: what each task type and each named limit has done, for monitoring
 * (the admin port's /metrics and /api). The counters live inside the engine's own objects
 * (etype.counts, elimit.counts) and are bumped by one call at each place a task changes state;
 * everything that can be derived from the objects themselves (tasks by state, parked keys) is
 * computed when asked instead (introspect.c), so the hot paths pay a few increments at most.
 *
 * Included by engine_impl.h, so it names the engine's objects by their struct tags only.
 */
#ifndef SLUICE_ENGINE_INTROSPECT_H
#define SLUICE_ENGINE_INTROSPECT_H

#include <stdint.h>

#include "sluice/engine.h"

struct task;

/* Counters of one task type (etype.counts). Zeroed when the type is created. */
typedef struct type_counts {
    uint64_t submitted;                     /* tasks submitted */
    uint64_t delivered;                     /* deliveries, redeliveries included */
    uint64_t done;                          /* acked */
    uint64_t failed;                        /* failed for good (attempts, dead, a limit) */
    uint64_t cancelled;                     /* cancelled */
    uint64_t retried;                       /* failures that were retried */
    uint64_t wait[SLUICE_WAIT_BUCKETS + 1]; /* first deliveries by wait (sluice_wait_bounds_ns) */
    uint64_t wait_count;                    /* first deliveries */
    uint64_t wait_sum_ns;                   /* their waits added up (saturating) */
} type_counts;

/* Counters of one named limit (elimit.counts). Zeroed when the limit is created; kept when it
 * is replaced. */
typedef struct limit_counts {
    uint64_t rejected[SLUICE_FAIL_SKIPPED + 1]; /* tasks it failed, by sluice_fail_reason */
} limit_counts;

/* A task was submitted (QUEUED). */
void introspect_submitted(struct task *t);

/* A task was delivered at now (RUNNING, its attempt already counted): counts the delivery and,
 * for its first one, its wait since it was due. */
void introspect_delivered(struct task *t, int64_t now);

/* A running task's failure will be retried. */
void introspect_retried(struct task *t);

/* A task finished in `state`; fail_link is the link whose limit failed it, or LINK_NONE. */
void introspect_finished(struct task *t, sluice_task_state state, sluice_fail_reason reason,
                         uint16_t fail_link);

/* Fills c with what a link of limit lim (tier, key, units) names: the limit and tier names, the
 * key, the definition of the core that decides it, its kind and units; the rest zeroed, for the
 * caller to add what it knows (charged, settles, held). */
struct elimit;
void introspect_charge(sluice_charge *c, struct elimit *lim, uint16_t tier, const char *key,
                       size_t keylen, int64_t units);

#endif
