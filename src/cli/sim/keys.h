/* SPDX-License-Identifier: MIT */
/*
 * The keys of a simulation: for every limit, tier and key a task is limited on, the units granted
 * over time (a simrun_series), and the figures the report compares with the limit.
 *
 * The simulator resolves nothing itself: which limits, tiers, keys and units a task has, what a
 * grant charged and which concurrency units a task holds are all read from the engine
 * (sluice_engine_task_charges, sluice_delivery.charged), so the series count exactly what the
 * engine charged. A task the engine refused at submit has no links and adds no series.
 * Internal to the simulation (run.c); the series and links live in the simrun_result.
 */
#ifndef SLUICE_CLI_SIMKEYS_H
#define SLUICE_CLI_SIMKEYS_H

#include <stddef.h>
#include <stdint.h>

#include "base/ptab.h"
#include "cli/sim/run.h"

/* The index of a result's series by (limit, tier, key), the capacities of its arrays, and a
 * scratch array for the engine's charges. */
typedef struct simkeys {
    ptab index;        /* series index + 1 (as a pointer: the array moves as it grows, the
                        * indexes do not), filed under the hash of (limit, tier, key) */
    size_t series_cap; /* slots of r->series */
    size_t link_cap;   /* slots of r->links */
    sluice_charge *ch; /* the last task's charges, as the engine reported them */
    size_t ch_cap;     /* slots of ch */
} simkeys;

/* The index of result r (run.c owns it). */
simkeys *simrun_keys(simrun_result *r);

/* Makes room for `need` elements of `size` bytes in *p, whose capacity is *cap (doubling).
 * Returns 0, or -1 when out of memory (*p is then unchanged). The simulator's one grow helper. */
int sim_grow(void **p, size_t *cap, size_t need, size_t size);

/* Takes the links of task t (accepted by engine e under t->id) from the engine: for each limit
 * of its chain the series of its limit, tier and key (created when new) and the units asked,
 * appended to r->links. Sets t->links, t->nlinks and t->key (the keys, comma-separated, or xkey
 * (may be NULL) when no limit is keyed; owned by t). Returns 0 or -1 when out of memory. */
int simkeys_links(simrun_result *r, const sluice_engine *e, simrun_task *t, const char *xkey);

/* Records the delivery of task t at now, as the engine reports it: when the grant charged the
 * chain (charged, from sluice_delivery), the units of every link it charged or holds are granted
 * on its series; otherwise (a redeemed grant, a free retry) only the concurrency units it holds
 * again are. Returns 0 or -1 when out of memory. */
int simkeys_delivered(simrun_result *r, const sluice_engine *e, const simrun_task *t, int charged,
                      int64_t now);

/* Gives back, on their series, the concurrency units the engine holds for running task t: call
 * it just before the ack or fail that releases them, or at the lease's expiry. Returns 0 or -1
 * when out of memory. */
int simkeys_release(simrun_result *r, const sluice_engine *e, const simrun_task *t, int64_t now);

/* Computes every series' max_period and max_minute once the run is over. */
void simkeys_figures(simrun_result *r);

/* Returns the series indexes in report order: limits in configuration order, tiers in their
 * limit's order, then the busiest keys first (ties by key). The caller frees the array with
 * alloc_free; NULL when out of memory. */
size_t *simkeys_order(const simrun_result *r);

/* The position of a tier in its limit's list (0 when absent): its row order and chart colour. */
int simkeys_tier_rank(const sluice_limit_policy *pol, const char *tier);

/* Frees the index and the scratch (not the series, which the result owns). */
void simkeys_free(simkeys *k);

#endif
