/* SPDX-License-Identifier: MIT */
/*
 * GCRA on one key, in exact integer arithmetic (see gcra.h for the model).
 *
 * Times and durations that are multiples of T are "rationals" ns + rem / permits with
 * 0 <= rem < permits. When permits divides the period (the common case: 15/min, 100/s) every rem
 * stays 0 and the code runs on plain int64; otherwise the remainders carry the exact fraction so
 * that 3 per second really is 333333333 1/3 ns apart, with no drift after millions of grants.
 * The one division that needs 128 bits (units remaining = X / T) uses the compiler's __int128.
 *
 * Saturation: a correction or an estimate may name up to 8 * 10^9 units (a TASK.ACK COST on a
 * 10/1d limit), whose units * T, added to a TAT, passes INT64_MAX. Such a time saturates at
 * INT64_MAX ns (rem 0): the key is denied for as long as int64 can say, never reset by a
 * wrap-around. Within the validated bounds (units <= burst, burst * T <= ~100 years) nothing
 * saturates while now is before ~2162, so decisions stay exact.
 */
#include "gcra.h"

#include "base/sat.h"
#include "sluice/error.h"

__extension__ typedef __int128 i128;

/* The largest burst * T accepted: a key may be scheduled at most ~100 years ahead, which keeps
 * tat = now + burst * T far inside int64 for any now before the year 2116. */
#define GCRA_MAX_BT_NS (INT64_C(100) * 365 * 86400 * SLUICE_NS_PER_SEC)

typedef struct rat {
    int64_t ns;
    int64_t rem; /* 0 <= rem < permits */
} rat;

static rat rat_ns(int64_t ns)
{
    rat r = {ns, 0};
    return r;
}

/* The saturated time: INT64_MAX ns and no fraction. */
static const rat rat_sat = {INT64_MAX, 0};

/* a + b for a, b >= their smallest valid value; saturates at rat_sat. */
static rat rat_add(rat a, rat b, int64_t permits)
{
    rat r = {sat_add_i64(a.ns, b.ns), a.rem + b.rem};

    if (r.rem >= permits) {
        r.rem -= permits;
        r.ns = sat_add_i64(r.ns, 1);
    }
    if (r.ns == INT64_MAX)
        r = rat_sat;
    return r;
}

/* a - b; every caller has a >= b up to a saturated a, whose difference saturates too. */
static rat rat_sub(rat a, rat b, int64_t permits)
{
    rat r = {sat_sub_i64(a.ns, b.ns), a.rem - b.rem};

    if (r.rem < 0) {
        r.rem += permits;
        r.ns = sat_sub_i64(r.ns, 1);
    }
    return r;
}

static int rat_cmp(rat a, rat b)
{
    if (a.ns != b.ns)
        return a.ns < b.ns ? -1 : 1;
    if (a.rem != b.rem)
        return a.rem < b.rem ? -1 : 1;
    return 0;
}

static rat rat_max(rat a, rat b)
{
    return rat_cmp(a, b) >= 0 ? a : b;
}

/* Smallest whole nanosecond count >= r. */
static int64_t rat_ceil(rat r)
{
    return sat_add_i64(r.ns, r.rem > 0);
}

/* units * T for 0 <= units, saturated at rat_sat: exact for units <= burst, and for corrections
 * (up to 8 * 10^9 units) until the product passes INT64_MAX ns. */
static rat times_t(const gcra *g, int64_t units)
{
    rat r;
    int64_t frac, whole;

    if (__builtin_mul_overflow(units, g->t_r, &frac) ||
        __builtin_mul_overflow(units, g->t_q, &whole))
        return rat_sat;
    r.ns = sat_add_i64(whole, frac / g->permits);
    r.rem = frac % g->permits;
    if (r.ns == INT64_MAX)
        r = rat_sat;
    return r;
}

/* floor(x / T) for 0 <= x. */
static int64_t div_t_floor(const gcra *g, rat x)
{
    i128 q;

    if (g->t_r == 0)
        return x.ns / g->t_q;
    /* x < 0 on a key charged past its burst by a correction: callers show that as 0 left, so
     * the quotient (up to 10^9 times x) only needs to stay negative. */
    q = ((i128)x.ns * g->permits + x.rem) / g->period_ns;
    return q < INT64_MIN ? INT64_MIN : (int64_t)q;
}

int gcra_init(gcra *g, int64_t permits, int64_t period_ns, int64_t burst, int start_empty)
{
    if (permits < 1 || period_ns < 1 || burst < 1)
        return SLUICE_EINVAL;
    if (permits > SLUICE_MAX_PERMITS || burst > SLUICE_MAX_PERMITS ||
        period_ns > SLUICE_MAX_PERIOD_NS)
        return SLUICE_ERANGE;
    g->permits = permits;
    g->period_ns = period_ns;
    g->burst = burst;
    g->t_q = period_ns / permits;
    g->t_r = period_ns % permits;
    g->start_empty = start_empty != 0;
    /* burst * T, checked before it is formed: t_q <= 3.2e16 and burst <= 1e9 could overflow. */
    if (g->t_q > 0 && burst > GCRA_MAX_BT_NS / g->t_q)
        return SLUICE_ERANGE;
    {
        rat bt = times_t(g, burst);

        if (bt.ns > GCRA_MAX_BT_NS)
            return SLUICE_ERANGE;
        g->bt_q = bt.ns;
        g->bt_r = bt.rem;
    }
    return SLUICE_OK;
}

/* The key's theoretical arrival time seen from now, for a request of `units`.
 *
 * A new start_empty key (fresh, or a zeroed state: never granted) lets its first request through
 * whatever its size up to the burst, and is left empty after it: it behaves as if all of its
 * burst but those units had just been spent. Judging it as "empty but one unit" instead would
 * deny a multi-unit first request, and since a denial records nothing (and a forgotten key is
 * new again), such a request would be judged the same way at every retry and never pass. */
static rat base_tat(const gcra *g, const gcra_state *s, int fresh, int64_t units, int64_t now_ns)
{
    rat tat = {s->tat_ns, s->tat_rem};

    if (g->start_empty && (fresh || (s->tat_ns == 0 && s->tat_rem == 0))) {
        int64_t first = units < g->burst ? units : g->burst;

        return rat_add(rat_ns(now_ns), times_t(g, g->burst - first), g->permits);
    }
    return rat_max(tat, rat_ns(now_ns));
}

/* gcra_decide with a fractional T: every time is a rational ns + rem / permits. */
static void decide_exact(const gcra *g, gcra_state *s, int fresh, int64_t units, int64_t now_ns,
                         int peek, sluice_decision *d)
{
    rat now = rat_ns(now_ns);
    rat bt = {g->bt_q, g->bt_r};
    rat base = base_tat(g, s, fresh, units, now_ns);
    rat ahead = rat_sub(base, now, g->permits); /* budget already spoken for, 0..bt */
    rat next, need;

    d->limit = g->burst;
    d->lease_id = 0;
    d->untracked = 0;
    d->shadow_denied = 0;
    if (units > g->burst) {
        d->allowed = 0;
        d->remaining = div_t_floor(g, rat_sub(bt, ahead, g->permits));
        d->retry_after_ns = SLUICE_NEVER;
        d->reset_after_ns = rat_ceil(ahead);
        return;
    }
    next = rat_add(base, times_t(g, units), g->permits);
    need = rat_sub(next, now, g->permits); /* what granting would put ahead of now */
    if (rat_cmp(need, bt) <= 0) {
        d->allowed = 1;
        d->remaining = div_t_floor(g, rat_sub(bt, need, g->permits));
        d->retry_after_ns = 0;
        d->reset_after_ns = rat_ceil(need);
        if (!peek) {
            s->tat_ns = next.ns;
            s->tat_rem = next.rem;
        }
        return;
    }
    d->allowed = 0;
    d->remaining = div_t_floor(g, rat_sub(bt, ahead, g->permits));
    d->retry_after_ns = rat_ceil(rat_sub(need, bt, g->permits));
    d->reset_after_ns = rat_ceil(ahead);
}

void gcra_decide(const gcra *g, gcra_state *s, int fresh, int64_t units, int64_t now_ns, int peek,
                 sluice_decision *d)
{
    if (g->t_r == 0)
        gcra_decide_whole(g, s, fresh, units, now_ns, peek, d);
    else
        decide_exact(g, s, fresh, units, now_ns, peek, d);
}

int64_t gcra_slot(const gcra *g, const gcra_state *s, int fresh, int64_t units, int64_t now_ns)
{
    rat bt = {g->bt_q, g->bt_r};
    rat next = rat_add(base_tat(g, s, fresh, units, now_ns), times_t(g, units), g->permits);
    int64_t slot = next.ns == INT64_MAX ? SLUICE_NEVER : rat_ceil(rat_sub(next, bt, g->permits));

    return slot > now_ns ? slot : now_ns;
}

void gcra_charge(const gcra *g, gcra_state *s, int fresh, int64_t units, int64_t now_ns)
{
    /* The exact slot is base + units*T - burst*T <= base, so the key's new TAT is base + units*T
     * whatever the slot; using the rounded-up slot instead would drift by a nanosecond a grant. */
    rat next = rat_add(base_tat(g, s, fresh, units, now_ns), times_t(g, units), g->permits);

    s->tat_ns = next.ns;
    s->tat_rem = next.rem;
}

void gcra_adjust(const gcra *g, gcra_state *s, int64_t diff, int64_t now_ns)
{
    rat now = rat_ns(now_ns);
    rat tat = {s->tat_ns, s->tat_rem};

    if (diff > 0) {
        tat = rat_add(rat_max(tat, now), times_t(g, diff), g->permits);
    } else if (diff < 0) {
        tat = rat_sub(tat, times_t(g, -diff), g->permits);
        if (rat_cmp(tat, now) < 0)
            tat = now;
    }
    s->tat_ns = tat.ns;
    s->tat_rem = tat.rem;
}

void gcra_backoff(const gcra *g, gcra_state *s, int64_t until_ns)
{
    rat tat = {s->tat_ns, s->tat_rem};
    rat held = rat_add(rat_ns(until_ns), times_t(g, g->burst - 1), g->permits);

    tat = rat_max(tat, held);
    s->tat_ns = tat.ns;
    s->tat_rem = tat.rem;
}

int gcra_idle(const gcra_state *s, int64_t now_ns)
{
    return s->tat_ns < now_ns || (s->tat_ns == now_ns && s->tat_rem == 0);
}
