/* SPDX-License-Identifier: MIT */
/*
 * GCRA (generic cell rate algorithm) on one key: the rate limit of sluice.
 *
 * The emission interval T = period / permits is kept exact as a rational number: T = t_q + t_r /
 * permits nanoseconds. A key's state is its theoretical arrival time (TAT) in the same form,
 * tat_ns + tat_rem / permits with 0 <= tat_rem < permits. A request of w units at `now` is allowed
 * when max(tat, now) + w*T - now <= burst*T; it then moves tat to max(tat, now) + w*T.
 * Everything is int64 arithmetic; the products that could overflow are bounded by validation
 * (burst*T <= ~100 years, permits and burst <= 10^9).
 *
 * Ensures:
 * - retry_after is rounded up, so a caller returning exactly then is admitted;
 * - a state whose tat <= now is the same as a fresh key, so it can be forgotten (with
 *   start_empty a forgotten key is new again: its next request passes and empties it, the
 *   cautious direction).
 */
#ifndef SLUICE_CORE_GCRA_H
#define SLUICE_CORE_GCRA_H

#include <stdint.h>

#include "base/sat.h"
#include "sluice/limit.h"

/* The parameters of one rate limit, precomputed by gcra_init(). */
typedef struct gcra {
    int64_t permits;   /* units per period */
    int64_t period_ns; /* the period */
    int64_t burst;     /* units spendable back-to-back */
    int64_t t_q;       /* T = t_q + t_r / permits ns */
    int64_t t_r;
    int64_t bt_q; /* burst * T = bt_q + bt_r / permits ns */
    int64_t bt_r;
    int start_empty; /* a new key's first request passes and leaves the key empty */
} gcra;

/* A key's state: its theoretical arrival time tat_ns + tat_rem / permits. A zeroed state is a
 * fresh key. */
typedef struct gcra_state {
    int64_t tat_ns;
    int64_t tat_rem;
} gcra_state;

/* Precomputes g. Returns 0, or SLUICE_EINVAL / SLUICE_ERANGE for parameters outside the bounds
 * of include/sluice/limit.h. */
int gcra_init(gcra *g, int64_t permits, int64_t period_ns, int64_t burst, int start_empty);

/* Decides a request of `units` (1 <= units) at now_ns on state s. Charges s when allowed and not
 * peek. units > burst is denied with retry_after SLUICE_NEVER. Fills every field of *d but
 * lease_id and untracked. `fresh` tells that s is a key seen for the first time (start_empty
 * applies). */
void gcra_decide(const gcra *g, gcra_state *s, int fresh, int64_t units, int64_t now_ns, int peek,
                 sluice_decision *d);

/* gcra_decide when T is a whole number of nanoseconds (g->t_r == 0, the common case): the same
 * arithmetic on plain int64 with one division. Inline, because a short path matters: the fewer
 * instructions a decision takes, the further ahead the CPU runs into the next decisions and
 * their key table cache misses, which then overlap. */
static inline void gcra_decide_whole(const gcra *g, gcra_state *s, int fresh, int64_t units,
                                     int64_t now_ns, int peek, sluice_decision *d)
{
    int64_t t = g->t_q, bt = g->bt_q, base, ahead, need;

    if (g->start_empty && (fresh || (s->tat_ns == 0 && s->tat_rem == 0)))
        base = sat_add_i64(now_ns, (g->burst - (units < g->burst ? units : g->burst)) * t);
    else
        base = s->tat_ns > now_ns ? s->tat_ns : now_ns;
    ahead = sat_sub_i64(base, now_ns); /* a saturated TAT stays "very far ahead" */
    d->limit = g->burst;
    d->lease_id = 0;
    d->untracked = 0;
    d->shadow_denied = 0;
    if (units > g->burst) {
        d->allowed = 0;
        d->remaining = (bt - ahead) / t;
        d->retry_after_ns = SLUICE_NEVER;
        d->reset_after_ns = ahead;
        return;
    }
    need = sat_add_i64(ahead, units * t); /* units * t <= bt: only the sum can overflow */
    if (need <= bt) {
        d->allowed = 1;
        d->remaining = (bt - need) / t;
        d->retry_after_ns = 0;
        d->reset_after_ns = need;
        if (!peek)
            s->tat_ns = sat_add_i64(base, units * t); /* past INT64_MAX only for now near it */
        return;
    }
    d->allowed = 0;
    d->remaining = (bt - ahead) / t;
    d->retry_after_ns = need - bt;
    d->reset_after_ns = ahead;
}

/* Returns the earliest time >= now_ns at which `units` (<= burst) would be allowed on s. */
int64_t gcra_slot(const gcra *g, const gcra_state *s, int fresh, int64_t units, int64_t now_ns);

/* Charges s for `units` reserved at now_ns for the slot gcra_slot() returned: later slots queue
 * behind it. */
void gcra_charge(const gcra *g, gcra_state *s, int fresh, int64_t units, int64_t now_ns);

/* Corrects a grant by diff units (actual minus charged): an extra charge moves the TAT forward
 * from max(tat, now); a refund moves it back, but never before now_ns. |diff| <= 8 * 10^9. */
void gcra_adjust(const gcra *g, gcra_state *s, int64_t diff, int64_t now_ns);

/* Holds key s back until until_ns (an upstream's 429 with Retry-After): afterwards nothing is
 * granted before until_ns, exactly one unit is at until_ns, and the key refills at its steady
 * pace from there (it is not handed its whole burst at once, which would likely be refused
 * again). That is tat = max(tat, until_ns + (burst - 1) * T): a request of w units at t is
 * granted when max(tat, t) + w*T - t <= burst*T, false for every t < until_ns and true for one
 * unit at until_ns. A later TAT is kept, so a backoff never gives budget back. Saturates at
 * INT64_MAX like every time here. */
void gcra_backoff(const gcra *g, gcra_state *s, int64_t until_ns);

/* Returns 1 when s carries no information at now_ns (tat <= now), 0 otherwise. */
int gcra_idle(const gcra_state *s, int64_t now_ns);

#endif
