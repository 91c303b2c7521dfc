/* SPDX-License-Identifier: MIT */
/*
 * AIMD on one key of an adaptive rate limit (see adapt.h for the model). Pure: every function
 * takes the time as an argument.
 */
#include "adapt.h"

#include "base/sat.h"

__extension__ typedef __int128 i128;

void adapt_init(adapt *a, const sluice_limit_def *def)
{
    /* floor_permits per floor_period_ns is floor_permits * period / floor_period per period */
    i128 f = ((i128)def->floor_permits * def->period_ns + def->floor_period_ns - 1) /
             def->floor_period_ns;

    a->permits = def->limit;
    a->floor = f > INT64_MAX ? INT64_MAX : (int64_t)f;
    a->num = def->decrease_num;
    a->den = def->decrease_den;
    a->step = (def->limit * def->recover_pct + 99) / 100;
    a->every_ns = def->recover_ns;
}

static int64_t current(const adapt *a, const adapt_state *s)
{
    return s->eff > 0 && s->eff < a->permits ? s->eff : a->permits;
}

int64_t adapt_rate_at(const adapt *a, const adapt_state *s, int64_t now_ns)
{
    int64_t eff = current(a, s), k;

    if (eff == a->permits || now_ns <= s->since_ns)
        return eff;
    k = (now_ns - s->since_ns) / a->every_ns;
    /* eff + step * k, capped; k may be huge after a long idle time */
    if (k >= (a->permits - eff + a->step - 1) / a->step)
        return a->permits;
    return eff + a->step * k;
}

/* Sets the key's rate to eff, keeping its TAT where it is: its fraction, counted in 1/old rate,
 * is rounded up to the next whole ns. */
static void set_rate(const adapt *a, adapt_state *s, int64_t eff)
{
    if (eff == current(a, s))
        return;
    if (s->g.tat_rem > 0) {
        s->g.tat_ns = sat_add_i64(s->g.tat_ns, 1);
        s->g.tat_rem = 0;
    }
    s->eff = eff == a->permits ? 0 : eff;
}

void adapt_refresh(const adapt *a, adapt_state *s, int64_t now_ns)
{
    int64_t eff = adapt_rate_at(a, s, now_ns);

    if (eff == a->permits) {
        set_rate(a, s, eff);
        s->since_ns = 0;
        return;
    }
    if (eff != current(a, s)) /* whole intervals only: later rates do not depend on when */
        s->since_ns += (eff - current(a, s)) / a->step * a->every_ns;
    set_rate(a, s, eff);
}

void adapt_decrease(const adapt *a, adapt_state *s, int64_t now_ns)
{
    int64_t eff;

    adapt_refresh(a, s, now_ns);
    eff = (int64_t)((i128)current(a, s) * a->num / a->den);
    if (eff < a->floor)
        eff = a->floor;
    if (eff > current(a, s)) /* a floor above the rate cannot be: validated, but be safe */
        eff = current(a, s);
    set_rate(a, s, eff);
    s->since_ns = now_ns;
}
