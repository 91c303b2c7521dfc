/* SPDX-License-Identifier: MIT */
/*
 * AIMD on one key of an adaptive rate limit: the key's effective rate, lowered multiplicatively
 * each time its upstream answers 429 (a backoff) and recovered additively with time, never
 * below the floor nor above the configured rate.
 *
 * The effective rate is a whole number of permits per the limit's period (`eff`); its state is
 * eff (0 meaning the configured rate, so a zeroed state is a fresh key) and since_ns, the start
 * of the current recovery interval. At time t the rate is
 *     min(permits, eff + step * floor((t - since_ns) / every_ns)),
 * a pure function of time: reading it changes nothing, and writing it back (adapt_refresh)
 * moves since_ns by whole intervals only, so that refreshing at any moments gives the same
 * rates later. A decrease sets eff = max(floor, eff * num / den) and restarts the interval.
 * Integer arithmetic only (the product eff * num is done in 128 bits).
 *
 * The key's TAT stays where it is when its rate changes (rounded up to a whole nanosecond, since
 * its fraction is counted in 1/eff): spent budget is never handed back by a decrease, and a
 * recovery only makes the key refill faster from then on.
 */
#ifndef SLUICE_CORE_ADAPT_H
#define SLUICE_CORE_ADAPT_H

#include <stdint.h>

#include "gcra.h"
#include "sluice/limit.h"

/* The AIMD parameters of a limit, derived from its definition (adapt_init). */
typedef struct adapt {
    int64_t permits;  /* the configured rate, in permits per period: the ceiling */
    int64_t floor;    /* the lowest rate, in permits per period (>= 1) */
    int64_t num, den; /* a decrease multiplies the rate by num / den (0 < num < den) */
    int64_t step;     /* permits per period regained per interval (>= 1) */
    int64_t every_ns; /* the recovery interval (>= 1) */
} adapt;

/* One key of an adaptive rate limit. Its first member is the GCRA state, so the key table's
 * value can be read as a gcra_state by code that needs only the TAT. */
typedef struct adapt_state {
    gcra_state g;
    int64_t eff;      /* the effective rate at since_ns; 0: the configured rate */
    int64_t since_ns; /* the start of the current recovery interval */
} adapt_state;

/* Fills a from an adaptive rate definition (def->decrease_den > 0, validated): the floor in
 * permits per the limit's period, rounded up; the step recover_pct of the rate, rounded up to at
 * least one permit so that every key recovers. The core and the shared stores' encoders
 * (store/redis_limits.c) derive the parameters here, so both decide with the same ones. */
void adapt_init(adapt *a, const sluice_limit_def *def);

/* Returns the key's effective rate at now_ns (permits per period, floor..permits). */
int64_t adapt_rate_at(const adapt *a, const adapt_state *s, int64_t now_ns);

/* Brings s to now_ns: its effective rate and interval as adapt_rate_at says (a key back at the
 * configured rate gets eff 0), its TAT rounded up to a whole ns when the rate changed. */
void adapt_refresh(const adapt *a, adapt_state *s, int64_t now_ns);

/* The 429: refreshes s to now_ns, then multiplies its rate by num / den (never below the floor)
 * and restarts its recovery at now_ns. */
void adapt_decrease(const adapt *a, adapt_state *s, int64_t now_ns);

#endif
