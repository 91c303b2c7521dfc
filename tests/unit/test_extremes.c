/* SPDX-License-Identifier: MIT */
/*
 * Extreme values against the limits: the largest corrections and estimates (8 * 10^9 units), the
 * longest and shortest periods, and clocks near the int64 edge. Every product of units and a
 * period that no longer fits in int64 must saturate to "denied for a very long time", never wrap
 * into "free". Meant to run under UBSan, which turns any signed overflow left into an abort.
 *
 * A 128-bit reference model of GCRA checks that saturation changes no decision while the clock
 * is far from the edge: exactness is kept wherever the true value fits.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "sluice/error.h"
#include "sluice/limit.h"
#include "testutil.h"

#define SEC SLUICE_NS_PER_SEC
#define DAY (INT64_C(86400) * SEC)
#define T0  (INT64_C(1763078400) * SEC)
/* The largest correction sluice_limit_settle accepts (limit.c). */
#define MAX_UNITS (INT64_C(8) * SLUICE_MAX_PERMITS)

__extension__ typedef __int128 i128;

static sluice_limit *make(sluice_limit_kind kind, int64_t limit, int64_t period_ns, int64_t burst)
{
    sluice_limit_def def;
    sluice_limit *lim;
    char msg[128];

    sluice_limit_def_init(&def, kind);
    def.limit = limit;
    def.period_ns = period_ns;
    def.burst = burst;
    assert_int_equal(sluice_limit_new(&def, &lim, msg, sizeof msg), SLUICE_OK);
    return lim;
}

static int allowed(sluice_limit *lim, int64_t units, int64_t now)
{
    sluice_decision d;

    assert_int_equal(sluice_limit_decide(lim, "k", 1, units, now, SLUICE_PEEK, &d), SLUICE_OK);
    return d.allowed;
}

/* The case: TASK.ACK COST 860000 on a task of a `rate: 10/1d` limit settles actual
 * 860000 against an estimate of 1. units * T + tat passes INT64_MAX there: the key must be
 * denied afterwards, not keep its budget. Also with a fractional T (7/1d) and the largest cost. */
static void test_settle_huge_cost_denies(void **unused)
{
    static const struct {
        int64_t permits, actual;
    } cases[] = {{10, 860000},
                 {10, 1000000},
                 {10, MAX_UNITS},
                 {7, 860000},
                 {7, MAX_UNITS},
                 {1, MAX_UNITS},
                 {SLUICE_MAX_PERMITS, MAX_UNITS}};

    (void)unused;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sluice_limit *lim = make(SLUICE_RATE, cases[i].permits, DAY, 0);
        int64_t days = cases[i].actual / cases[i].permits - 1; /* debt in whole days */
        int64_t later = T0 + (days < 365 ? days : 365) * DAY;
        sluice_decision d;

        assert_int_equal(sluice_limit_decide(lim, "k", 1, 1, T0, 0, &d), SLUICE_OK);
        assert_true(d.allowed);
        assert_int_equal(sluice_limit_settle(lim, "k", 1, T0, 1, cases[i].actual, T0), SLUICE_OK);
        /* actual * T in days, at least: the key stays denied that long (or for ever). */
        assert_false(allowed(lim, 1, T0));
        assert_false(allowed(lim, 1, later));
        if (cases[i].actual / cases[i].permits > 200 * 365) /* past int64: saturated */
            assert_false(allowed(lim, 1, T0 + 200 * 365 * DAY));
        /* A second huge charge on a saturated key stays saturated, no wrap-around. */
        assert_int_equal(sluice_limit_settle(lim, "k", 1, T0, 1, cases[i].actual, T0), SLUICE_OK);
        assert_false(allowed(lim, 1, later));
        sluice_limit_free(lim);
    }
}

/* Estimates for the largest unit counts: a start time far in the future (or never), never one in
 * the past. */
static void test_estimate_huge_units(void **unused)
{
    static const sluice_limit_kind kinds[] = {SLUICE_RATE, SLUICE_WINDOW, SLUICE_SLIDING};
    static const int64_t periods[] = {1, SEC, DAY, SLUICE_MAX_PERIOD_NS};

    (void)unused;
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
        for (size_t p = 0; p < sizeof periods / sizeof periods[0]; p++) {
            sluice_limit *lim = make(kinds[k], 1, periods[p], 0);
            int64_t start;

            if (kinds[k] == SLUICE_RATE && periods[p] == SLUICE_MAX_PERIOD_NS) {
                sluice_limit_free(lim); /* burst 1 of a year: within bounds, kept below */
                lim = make(kinds[k], 1, periods[p], 1);
            }
            assert_int_equal(sluice_limit_estimate(lim, "k", 1, MAX_UNITS, T0, &start), SLUICE_OK);
            assert_true(start >= T0);
            if (periods[p] >= SEC)
                assert_true(start - T0 >= periods[p] * 100 || start == SLUICE_NEVER);
            sluice_limit_free(lim);
        }
}

/* Fixed windows: corrections pile up in the count, which saturates instead of wrapping. */
static void test_window_count_saturates(void **unused)
{
    sluice_limit *lim = make(SLUICE_WINDOW, 10, DAY, 0);
    sluice_decision d;

    (void)unused;
    assert_int_equal(sluice_limit_decide(lim, "k", 1, 1, T0, 0, &d), SLUICE_OK);
    for (int i = 0; i < 1000; i++) /* saturation itself needs 10^9 settles: see limit.c */
        if (sluice_limit_settle(lim, "k", 1, T0, 0, MAX_UNITS, T0) != SLUICE_OK)
            fail();
    assert_false(allowed(lim, 1, T0));
    assert_int_equal(sluice_limit_settle(lim, "k", 1, T0, MAX_UNITS, 0, T0), SLUICE_OK);
    assert_false(allowed(lim, 1, T0));
    sluice_limit_free(lim);
}

/* Clocks near the int64 edge: granting the whole burst of a long limit puts the TAT past
 * INT64_MAX; it saturates, and the key is denied, not reset. */
static void test_clock_near_edge(void **unused)
{
    static const int64_t nows[] = {INT64_MAX - DAY, INT64_MAX - SEC, INT64_MAX - 1, INT64_MAX};

    (void)unused;
    for (size_t i = 0; i < sizeof nows / sizeof nows[0]; i++) {
        sluice_limit *lims[] = {make(SLUICE_RATE, 10, SLUICE_MAX_PERIOD_NS, 0),
                                make(SLUICE_RATE, 7, SLUICE_MAX_PERIOD_NS, 10),
                                make(SLUICE_WINDOW, 10, SLUICE_MAX_PERIOD_NS, 0),
                                make(SLUICE_SLIDING, 10, SLUICE_MAX_PERIOD_NS, 0)};

        for (size_t j = 0; j < sizeof lims / sizeof lims[0]; j++) {
            sluice_decision d;
            int64_t start;

            assert_int_equal(sluice_limit_decide(lims[j], "k", 1, 10, nows[i], 0, &d), SLUICE_OK);
            assert_true(d.allowed);
            assert_false(allowed(lims[j], 1, nows[i]));
            assert_int_equal(sluice_limit_settle(lims[j], "k", 1, nows[i], 1, MAX_UNITS, nows[i]),
                             SLUICE_OK);
            assert_false(allowed(lims[j], 1, nows[i]));
            assert_int_equal(sluice_limit_estimate(lims[j], "k", 1, MAX_UNITS, nows[i], &start),
                             SLUICE_OK);
            assert_true(start >= nows[i]);
            sluice_limit_free(lims[j]);
        }
    }
}

/* ---- Property: saturation changes no decision far from the edge ----------------------------- */

typedef struct ref_gcra {
    i128 permits, period, burst;
    i128 tat; /* scaled by permits */
} ref_gcra;

static int ref_decide(ref_gcra *r, int64_t units, int64_t now)
{
    i128 now_s = (i128)now * r->permits;
    i128 base = r->tat > now_s ? r->tat : now_s;
    i128 next = base + (i128)units * r->period;

    if (units > r->burst || next - now_s > r->burst * r->period)
        return 0;
    r->tat = next;
    return 1;
}

static void ref_adjust(ref_gcra *r, int64_t diff, int64_t now)
{
    i128 now_s = (i128)now * r->permits;

    if (diff > 0) {
        r->tat = (r->tat > now_s ? r->tat : now_s) + (i128)diff * r->period;
    } else {
        r->tat -= (i128)-diff * r->period;
        if (r->tat < now_s)
            r->tat = now_s;
    }
}

static void property_run(uint64_t seed)
{
    static const int64_t periods[] = {1, 3, SEC, 7 * SEC, DAY, SLUICE_MAX_PERIOD_NS};
    test_rng rs, *s = &rs;
    int64_t period;
    int64_t permits, burst;
    i128 bt;
    sluice_limit *lim;
    ref_gcra r;
    int64_t now = T0;
    char msg[128];
    sluice_limit_def def;

    rng_seed(s, seed);
    period = periods[rng_next(s) % 6];
    permits = 1 + (int64_t)(rng_next(s) % (rng_next(s) % 2 ? 10 : SLUICE_MAX_PERMITS));
    burst = 1 + (int64_t)(rng_next(s) % 20);
    bt = (i128)burst * period / permits;

    if (bt > (i128)100 * 365 * DAY)
        burst = 1;
    sluice_limit_def_init(&def, SLUICE_RATE);
    def.limit = permits;
    def.period_ns = period;
    def.burst = burst;
    if (sluice_limit_new(&def, &lim, msg, sizeof msg) != SLUICE_OK)
        return; /* out of the accepted bounds */
    r.permits = permits;
    r.period = period;
    r.burst = burst;
    r.tat = 0;
    for (int step = 0; step < 300; step++) {
        uint64_t op = rng_next(s) % 10;
        sluice_decision d;

        now += (int64_t)(rng_next(s) % (uint64_t)(period < DAY ? 4 * period : DAY));
        if (op < 6) {
            int64_t units = 1 + (int64_t)(rng_next(s) % (uint64_t)burst);

            assert_int_equal(sluice_limit_decide(lim, "k", 1, units, now, 0, &d), SLUICE_OK);
            if (d.allowed != ref_decide(&r, units, now))
                fail_msg("seed %llu step %d: allowed %d", (unsigned long long)seed, step,
                         d.allowed);
        } else if (op < 8) { /* a huge or a normal extra charge */
            int64_t diff = op == 6 ? (int64_t)(rng_next(s) % (uint64_t)MAX_UNITS) + 1
                                   : (int64_t)(rng_next(s) % (uint64_t)burst) + 1;

            assert_int_equal(sluice_limit_settle(lim, "k", 1, now, 0, diff, now), SLUICE_OK);
            ref_adjust(&r, diff, now);
        } else { /* a refund of at most a burst */
            int64_t diff = (int64_t)(rng_next(s) % (uint64_t)burst) + 1;

            assert_int_equal(sluice_limit_settle(lim, "k", 1, now, diff, 0, now), SLUICE_OK);
            ref_adjust(&r, -diff, now);
        }
    }
    sluice_limit_free(lim);
}

static void test_property_huge_charges(void **unused)
{
    (void)unused;
    for (uint64_t seed = 1; seed <= 400; seed++)
        property_run(seed);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_settle_huge_cost_denies), cmocka_unit_test(test_estimate_huge_units),
        cmocka_unit_test(test_window_count_saturates),  cmocka_unit_test(test_clock_near_edge),
        cmocka_unit_test(test_property_huge_charges),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
