/* SPDX-License-Identifier: MIT */
/*
 * The keys of a simulation: for every limit, tier and key a task is limited on, the units granted
 * over time (a simrun_series), and the figures the report compares with the limit.
 *
 * The engine does not tell which key a grant was charged to, so simkeys_resolve() decides a
 * task's keys, tiers and units the way the engine does (engine/resolve.c: the same dot paths,
 * the same tier choice), once at submit, and stores them as the task's links. Internal to the
 * simulation (run.c); the series and links live in the simrun_result.
 */
#ifndef SLUICE_CLI_SIMKEYS_H
#define SLUICE_CLI_SIMKEYS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "cli/sim/run.h"

/* The index of a result's series by (limit, tier, key), and the capacities of its arrays. */
typedef struct simkeys {
    uint32_t *slot; /* open addressing: series index + 1, 0 = empty */
    size_t cap;     /* slots, a power of two (0 before the first series) */
    size_t series_cap, link_cap;
} simkeys;

/* The index of result r (run.c owns it). */
simkeys *simrun_keys(simrun_result *r);

/* Makes room for `need` elements of `size` bytes in *p, whose capacity is *cap (doubling).
 * Returns 0, or -1 when out of memory (*p is then unchanged). */
int sim_grow(void **p, size_t *cap, size_t need, size_t size);

/* Resolves the links of task t (of type tp, which may be NULL for an undeclared type): for each
 * limit of the chain its tier, its key (xkey for an explicit key, may be NULL; a dot path into
 * input, may be NULL) and its units (the task's own `units` unless the limit fixes them or reads
 * them from the input), appended to r->links; creates the series of new keys. Sets t->links,
 * t->nlinks and t->key (the keys, comma-separated; owned by t). Returns 0 or -1 when out of
 * memory. A key the engine would refuse resolves to the global key: the submit fails anyway. */
int simkeys_resolve(simrun_result *r, sluice_engine *e, const sluice_type_policy *tp,
                    simrun_task *t, const char *xkey, const json_t *input, int64_t units);

/* Records a grant of task t at now on every series of its chain (concurrency series also count
 * the units as held). Returns 0 or -1 when out of memory. */
int simkeys_grant(simrun_result *r, const simrun_task *t, int64_t now);

/* Takes (hold) or gives back (release) the concurrency units of task t at now, as the engine
 * does when a task is delivered again or its lease ends. */
void simkeys_hold(simrun_result *r, const simrun_task *t, int64_t now);
void simkeys_release(simrun_result *r, const simrun_task *t, int64_t now);

/* Computes every series' max_period and max_minute once the run is over. */
void simkeys_figures(simrun_result *r);

/* Returns the series indexes in report order: limits in configuration order, tiers in their
 * limit's order, then the busiest keys first (ties by key). The caller frees the array with
 * sluice_free; NULL when out of memory. */
size_t *simkeys_order(const simrun_result *r);

/* The position of a tier in its limit's list (0 when absent): its row order and chart colour. */
int simkeys_tier_rank(const sluice_limit_policy *pol, const char *tier);

/* Frees the index (not the series, which the result owns). */
void simkeys_free(simkeys *k);

#endif
