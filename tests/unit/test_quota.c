/* SPDX-License-Identifier: MIT */
/*
 * Tests of quotas (src/core/quota.c), on a simulated clock.
 *
 * Calendar periods are checked against the C library's gmtime_r/timegm (an independent civil-date
 * implementation) over random instants up to the end of the int64 range, and by hand at the
 * month ends that trip calendars up: Jan 31, Feb 28/29 in leap, non-leap and century years,
 * Dec 31. The seed 004 budgets (daily 100, monthly 2000, a spawn cap of 5 agents) and a property
 * test of random charges and settlements against a model complete it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "core/quota.h"
#include "sluice/error.h"
#include "testutil.h"

#define SEC  SLUICE_NS_PER_SEC
#define HOUR (INT64_C(3600) * SEC)
#define DAY  (INT64_C(24) * HOUR)

/* The instant y-mo-d h:mi:s UTC, in nanoseconds, as libc computes it. */
static int64_t utc(int y, int mo, int d, int h, int mi, int s)
{
    struct tm tm;

    memset(&tm, 0, sizeof tm);
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = s;
    return (int64_t)timegm(&tm) * SEC;
}

static sluice_decision charge(int64_t budget, sluice_calendar cal, quota_state *s, int64_t units,
                              int64_t now_ns, int peek)
{
    sluice_decision d;

    memset(&d, 0xa5, sizeof d);
    quota_decide(budget, cal, s, units, now_ns, peek, &d);
    assert_int_equal(d.limit, budget);
    assert_true(d.remaining >= 0 && d.remaining <= budget);
    if (d.allowed)
        assert_int_equal(d.retry_after_ns, 0);
    else
        assert_true(d.retry_after_ns > 0);
    assert_true(d.reset_after_ns >= 0);
    return d;
}

/* The period of t by libc: [start, end) of its UTC day or month. */
static int64_t libc_period(sluice_calendar cal, int64_t t_ns, int64_t *end_ns)
{
    time_t secs = (time_t)(t_ns / SEC);
    struct tm tm;
    int64_t end_s;

    assert_non_null(gmtime_r(&secs, &tm));
    tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
    if (cal == SLUICE_CAL_MONTH)
        tm.tm_mday = 1;
    {
        struct tm next = tm;
        int64_t start = (int64_t)timegm(&tm) * SEC;

        if (cal == SLUICE_CAL_MONTH)
            next.tm_mon++;
        else
            next.tm_mday++;
        end_s = (int64_t)timegm(&next);
        *end_ns = end_s > INT64_MAX / SEC ? SLUICE_NEVER : end_s * SEC;
        return start;
    }
}

static void test_period_matches_libc(void **state)
{
    test_rng r;
    int64_t end;

    (void)state;
    rng_seed(&r, 2024);
    for (int i = 0; i < 200000; i++) {
        /* Mostly 1970 to 2100, a quarter anywhere in the int64 range. */
        int64_t t =
            i % 4 == 0 ? rng_range(&r, 0, INT64_MAX) : rng_range(&r, 0, utc(2100, 1, 1, 0, 0, 0));

        for (sluice_calendar cal = SLUICE_CAL_DAY; cal <= SLUICE_CAL_MONTH; cal++) {
            int64_t want_end, want = libc_period(cal, t, &want_end);

            assert_int_equal(quota_period_start(cal, t, &end), want);
            assert_int_equal(end, want_end);
        }
    }
    /* Every month start from 1970 to 2262, and the day before it. */
    for (int y = 1970; y <= 2262; y++) {
        for (int mo = 1; mo <= 12 && (y < 2262 || mo <= 4); mo++) {
            int64_t first = utc(y, mo, 1, 0, 0, 0);

            assert_int_equal(quota_period_start(SLUICE_CAL_MONTH, first, &end), first);
            if (first > 0) {
                int64_t prev_end;

                quota_period_start(SLUICE_CAL_MONTH, first - 1, &prev_end);
                assert_int_equal(prev_end, first);
                assert_int_equal(quota_period_start(SLUICE_CAL_DAY, first - 1, &prev_end),
                                 first - DAY);
            }
        }
    }
    /* Hand-checked instants (date -u -d ... +%s). */
    assert_int_equal(quota_period_start(SLUICE_CAL_MONTH, 1709164800 * SEC + 5, &end),
                     1706745600 * SEC); /* 2024-02-29 is in February 2024 */
    assert_int_equal(end, 1709251200 * SEC);
    assert_int_equal(quota_period_start(SLUICE_CAL_DAY, 4107542400 * SEC - 1, &end),
                     4107456000 * SEC); /* 2100 is not leap: Feb 28 is followed by Mar 1 */
    assert_int_equal(end, 4107542400 * SEC);
    assert_int_equal(quota_period_start(SLUICE_CAL_MONTH, 0, &end), 0);
    assert_int_equal(end, 31 * DAY);
    /* The last representable month ends at SLUICE_NEVER; so does the last day. */
    assert_int_equal(quota_period_start(SLUICE_CAL_MONTH, INT64_MAX, &end), 9222422400 * SEC);
    assert_int_equal(end, SLUICE_NEVER);
    quota_period_start(SLUICE_CAL_DAY, INT64_MAX, &end);
    assert_int_equal(end, SLUICE_NEVER);
    assert_int_equal(quota_period_start(SLUICE_CAL_NONE, 12345, &end), 0);
    assert_int_equal(end, SLUICE_NEVER);
    /* Before the epoch reads as the epoch. */
    assert_int_equal(quota_period_start(SLUICE_CAL_DAY, -1, &end), 0);
    assert_int_equal(end, DAY);
}

/* Spends the whole budget just before `boundary`, then checks the wait and the refill there. */
static void check_rollover(int64_t budget, sluice_calendar cal, int64_t boundary)
{
    quota_state s = {0, 0, 0};
    sluice_decision d;

    d = charge(budget, cal, &s, budget, boundary - HOUR, 0);
    assert_true(d.allowed);
    assert_int_equal(d.remaining, 0);
    assert_int_equal(d.reset_after_ns, HOUR);
    d = charge(budget, cal, &s, 1, boundary - 1, 0);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, 1);
    assert_int_equal(d.reset_after_ns, 1);
    assert_false(quota_idle(&s, boundary - 1));
    assert_true(quota_idle(&s, boundary));
    d = charge(budget, cal, &s, budget, boundary, 0);
    assert_true(d.allowed);
    assert_int_equal(s.period_start_ns, boundary);
}

static void test_day_rollover(void **state)
{
    (void)state;
    check_rollover(100, SLUICE_CAL_DAY, utc(2024, 2, 1, 0, 0, 0));  /* Jan 31 -> Feb 1 */
    check_rollover(100, SLUICE_CAL_DAY, utc(2024, 2, 29, 0, 0, 0)); /* Feb 28 -> 29, leap */
    check_rollover(100, SLUICE_CAL_DAY, utc(2024, 3, 1, 0, 0, 0));  /* Feb 29 -> Mar 1 */
    check_rollover(100, SLUICE_CAL_DAY, utc(2023, 3, 1, 0, 0, 0));  /* Feb 28 -> Mar 1 */
    check_rollover(100, SLUICE_CAL_DAY, utc(2025, 1, 1, 0, 0, 0));  /* Dec 31 -> Jan 1 */

    /* Seed 004's daily budget of 100: spent over a day, refilled at midnight UTC. */
    {
        quota_state s = {0, 0, 0};
        int64_t morning = utc(2024, 7, 4, 9, 0, 0);
        sluice_decision d;

        for (int i = 0; i < 10; i++)
            assert_true(charge(100, SLUICE_CAL_DAY, &s, 10, morning + i * HOUR, 0).allowed);
        d = charge(100, SLUICE_CAL_DAY, &s, 1, morning + 10 * HOUR, 0);
        assert_false(d.allowed);
        assert_int_equal(d.retry_after_ns, 5 * HOUR); /* 19:00 to midnight */
        assert_true(charge(100, SLUICE_CAL_DAY, &s, 100, utc(2024, 7, 5, 0, 0, 0), 0).allowed);
    }
}

static void test_month_rollover(void **state)
{
    (void)state;
    check_rollover(2000, SLUICE_CAL_MONTH, utc(2024, 2, 1, 0, 0, 0)); /* Jan 31 -> Feb */
    check_rollover(2000, SLUICE_CAL_MONTH, utc(2024, 3, 1, 0, 0, 0)); /* Feb 29 -> Mar */
    check_rollover(2000, SLUICE_CAL_MONTH, utc(2023, 3, 1, 0, 0, 0)); /* Feb 28 -> Mar */
    check_rollover(2000, SLUICE_CAL_MONTH, utc(2100, 3, 1, 0, 0, 0)); /* not leap (century) */
    check_rollover(2000, SLUICE_CAL_MONTH, utc(2000, 3, 1, 0, 0, 0)); /* leap (400 years) */
    check_rollover(2000, SLUICE_CAL_MONTH, utc(2025, 1, 1, 0, 0, 0)); /* Dec 31 -> Jan */

    /* Seed 004's monthly budget: Feb 29 2024 still counts for February. */
    {
        quota_state s = {0, 0, 0};
        sluice_decision d;

        assert_true(charge(2000, SLUICE_CAL_MONTH, &s, 1500, utc(2024, 2, 1, 0, 0, 0), 0).allowed);
        d = charge(2000, SLUICE_CAL_MONTH, &s, 501, utc(2024, 2, 29, 12, 0, 0), 0);
        assert_false(d.allowed);
        assert_int_equal(d.remaining, 500);
        assert_int_equal(d.retry_after_ns, 12 * HOUR);
        assert_int_equal(d.reset_after_ns, 12 * HOUR);
        d = charge(2000, SLUICE_CAL_MONTH, &s, 500, utc(2024, 2, 29, 12, 0, 0), 0);
        assert_true(d.allowed);
        assert_int_equal(d.remaining, 0);
        d = charge(2000, SLUICE_CAL_MONTH, &s, 2000, utc(2024, 3, 1, 0, 0, 0), 0);
        assert_true(d.allowed);
        assert_int_equal(d.reset_after_ns, 31 * DAY);
    }
}

static void test_settle(void **state)
{
    quota_state s = {0, 0, 0};
    int64_t t = utc(2024, 5, 10, 8, 0, 0);
    sluice_decision d;

    (void)state;
    /* Refund: estimated 30, cost 10. */
    assert_true(charge(100, SLUICE_CAL_DAY, &s, 30, t, 0).allowed);
    assert_int_equal(quota_settle(SLUICE_CAL_DAY, &s, t, 30, 10, t + HOUR), SLUICE_OK);
    assert_int_equal(s.spent, 10);
    assert_true(charge(100, SLUICE_CAL_DAY, &s, 90, t + HOUR, 1).allowed);
    assert_false(charge(100, SLUICE_CAL_DAY, &s, 91, t + HOUR, 1).allowed);

    /* Extra charge: estimated 50, cost 120; spending passes the budget and denies the rest of
     * the day, until midnight. */
    assert_true(charge(100, SLUICE_CAL_DAY, &s, 50, t + HOUR, 0).allowed);
    assert_int_equal(quota_settle(SLUICE_CAL_DAY, &s, t + HOUR, 50, 120, t + 2 * HOUR), SLUICE_OK);
    assert_int_equal(s.spent, 130);
    d = charge(100, SLUICE_CAL_DAY, &s, 1, t + 2 * HOUR, 0);
    assert_false(d.allowed);
    assert_int_equal(d.remaining, 0);
    assert_int_equal(d.retry_after_ns, 14 * HOUR);
    assert_int_equal(s.spent, 130);

    /* A refund bigger than what is spent stops at 0. */
    assert_int_equal(quota_settle(SLUICE_CAL_DAY, &s, t, 1000, 0, t + 3 * HOUR), SLUICE_OK);
    assert_int_equal(s.spent, 0);
    assert_true(quota_idle(&s, t + 3 * HOUR));

    /* An extra charge saturates instead of overflowing. */
    assert_int_equal(quota_settle(SLUICE_CAL_DAY, &s, t, 0, INT64_MAX, t + 3 * HOUR), SLUICE_OK);
    assert_int_equal(quota_settle(SLUICE_CAL_DAY, &s, t, 0, INT64_MAX, t + 3 * HOUR), SLUICE_OK);
    assert_int_equal(s.spent, INT64_MAX);
    assert_false(charge(100, SLUICE_CAL_DAY, &s, 1, t + 3 * HOUR, 0).allowed);

    /* Negative amounts are not a cost. */
    assert_int_equal(quota_settle(SLUICE_CAL_DAY, &s, t, -1, 5, t), SLUICE_EINVAL);
    assert_int_equal(quota_settle(SLUICE_CAL_DAY, &s, t, 5, -1, t), SLUICE_EINVAL);

    /* A key forgotten while idle settles against a fresh state of the same period. */
    memset(&s, 0, sizeof s);
    assert_int_equal(quota_settle(SLUICE_CAL_DAY, &s, t, 10, 25, t + HOUR), SLUICE_OK);
    assert_int_equal(s.spent, 15);
    assert_int_equal(s.period_start_ns, utc(2024, 5, 10, 0, 0, 0));
}

/* A charge from a period that has ended is not carried into the next one. */
static void test_settle_after_period(void **state)
{
    quota_state s = {0, 0, 0}, before;
    int64_t t = utc(2024, 1, 31, 23, 0, 0);

    (void)state;
    assert_true(charge(100, SLUICE_CAL_DAY, &s, 40, t, 0).allowed);
    before = s;
    assert_int_equal(quota_settle(SLUICE_CAL_DAY, &s, t, 40, 10, utc(2024, 2, 1, 1, 0, 0)),
                     SLUICE_ESTATE);
    assert_memory_equal(&before, &s, sizeof s);
    /* Still inside the period it settles. */
    assert_int_equal(quota_settle(SLUICE_CAL_DAY, &s, t, 40, 10, utc(2024, 1, 31, 23, 59, 59)),
                     SLUICE_OK);
    assert_int_equal(s.spent, 10);

    /* Once the state moved to February, a January charge is out too. */
    assert_true(charge(100, SLUICE_CAL_MONTH, &s, 5, utc(2024, 2, 1, 0, 0, 0), 0).allowed);
    before = s;
    assert_int_equal(quota_settle(SLUICE_CAL_MONTH, &s, t, 5, 1, utc(2024, 2, 1, 0, 0, 0)),
                     SLUICE_ESTATE);
    assert_memory_equal(&before, &s, sizeof s);
}

/* Seed 004's spawn cap: at most 5 agents ever; the 6th waits forever. */
static void test_spawn_cap(void **state)
{
    quota_state s = {0, 0, 0};
    sluice_decision d;

    (void)state;
    for (int i = 0; i < 5; i++) {
        d = charge(5, SLUICE_CAL_NONE, &s, 1, i * SEC, 0);
        assert_true(d.allowed);
        assert_int_equal(d.remaining, 4 - i);
        assert_int_equal(d.reset_after_ns, SLUICE_NEVER);
    }
    d = charge(5, SLUICE_CAL_NONE, &s, 1, 5 * SEC, 0);
    assert_false(d.allowed);
    assert_int_equal(d.remaining, 0);
    assert_int_equal(d.retry_after_ns, SLUICE_NEVER);
    assert_int_equal(d.reset_after_ns, SLUICE_NEVER);
    /* Never refills, not in ten years nor at the end of time. */
    assert_false(charge(5, SLUICE_CAL_NONE, &s, 1, utc(2034, 1, 1, 0, 0, 0), 0).allowed);
    assert_false(charge(5, SLUICE_CAL_NONE, &s, 1, INT64_MAX, 0).allowed);
    assert_false(quota_idle(&s, INT64_MAX));
    assert_int_equal(s.spent, 5);
    /* A settlement applies at any time: an agent that was never spawned gives its slot back. */
    assert_int_equal(quota_settle(SLUICE_CAL_NONE, &s, 0, 1, 0, INT64_MAX), SLUICE_OK);
    assert_true(charge(5, SLUICE_CAL_NONE, &s, 1, INT64_MAX, 0).allowed);
}

static void test_edges(void **state)
{
    quota_state s = {0, 0, 0}, before;
    sluice_decision d;
    int64_t t = utc(2024, 6, 15, 12, 0, 0);

    (void)state;
    /* units > budget: never, nothing charged; a fresh key stays idle. */
    d = charge(100, SLUICE_CAL_DAY, &s, 101, t, 0);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, SLUICE_NEVER);
    assert_int_equal(d.remaining, 100);
    assert_int_equal(d.reset_after_ns, 0);
    assert_true(quota_idle(&s, t));
    d = charge(100, SLUICE_CAL_MONTH, &s, INT64_MAX, t, 0);
    assert_int_equal(d.retry_after_ns, SLUICE_NEVER);

    /* units == budget fits exactly. */
    d = charge(100, SLUICE_CAL_DAY, &s, 100, t, 0);
    assert_true(d.allowed);
    assert_int_equal(d.remaining, 0);
    assert_int_equal(d.reset_after_ns, 12 * HOUR);

    /* A peek changes nothing, granted or not. */
    memset(&s, 0, sizeof s);
    d = charge(100, SLUICE_CAL_DAY, &s, 60, t, 1);
    assert_true(d.allowed);
    assert_int_equal(d.remaining, 40);
    assert_int_equal(s.period_end_ns, 0);
    assert_true(charge(100, SLUICE_CAL_DAY, &s, 60, t, 0).allowed);
    before = s;
    assert_false(charge(100, SLUICE_CAL_DAY, &s, 60, t, 1).allowed);
    assert_true(charge(100, SLUICE_CAL_DAY, &s, 40, t + DAY, 1).allowed);
    assert_memory_equal(&before, &s, sizeof s);

    /* Time never runs backwards inside a key: an older now counts in the key's period. */
    assert_false(charge(100, SLUICE_CAL_DAY, &s, 41, t - DAY, 0).allowed);
    assert_memory_equal(&before, &s, sizeof s);

    /* The epoch and the end of the int64 range. */
    memset(&s, 0, sizeof s);
    d = charge(1, SLUICE_CAL_MONTH, &s, 1, -5, 0);
    assert_true(d.allowed);
    assert_int_equal(d.reset_after_ns, 31 * DAY);
    memset(&s, 0, sizeof s);
    assert_true(charge(1, SLUICE_CAL_MONTH, &s, 1, INT64_MAX - 1, 0).allowed);
    d = charge(1, SLUICE_CAL_MONTH, &s, 1, INT64_MAX, 0);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, SLUICE_NEVER); /* May 2262 is not representable */
    assert_false(quota_idle(&s, INT64_MAX));
}

/* Random charges, peeks and settlements against a model that keys spending by libc's date. */
static void quota_property(uint64_t seed)
{
    typedef struct charge_rec {
        int64_t at_ns;
        int64_t estimate;
    } charge_rec;
    charge_rec charges[64];
    size_t ncharges = 0;
    test_rng r;
    quota_state s = {0, 0, 0};
    sluice_calendar cal;
    int64_t budget, now, model_start = -1, model_end = 0, model_spent = 0;

    rng_seed(&r, seed);
    cal = (sluice_calendar)rng_range(&r, SLUICE_CAL_NONE, SLUICE_CAL_MONTH);
    budget = rng_range(&r, 1, 1000);
    now = rng_range(&r, 0, utc(2200, 1, 1, 0, 0, 0));
    for (int step = 0; step < 400; step++) {
        int64_t end, start = cal == SLUICE_CAL_NONE ? 0 : libc_period(cal, now, &end);

        if (cal == SLUICE_CAL_NONE)
            end = SLUICE_NEVER;
        if (start != model_start) {
            model_start = start;
            model_end = end;
            model_spent = 0;
        }
        if (ncharges > 0 && rng_range(&r, 0, 2) == 0) {
            size_t i = (size_t)rng_range(&r, 0, (int64_t)ncharges - 1);
            int64_t actual = rng_range(&r, 0, 2 * budget);
            int rc = quota_settle(cal, &s, charges[i].at_ns, charges[i].estimate, actual, now);

            if (charges[i].at_ns >= model_start) {
                assert_int_equal(rc, SLUICE_OK);
                model_spent += actual - charges[i].estimate;
                if (model_spent < 0)
                    model_spent = 0;
            } else {
                assert_int_equal(rc, SLUICE_ESTATE);
            }
            charges[i] = charges[--ncharges];
        } else {
            int64_t units =
                rng_range(&r, 1, 8) == 1 ? budget + 1 : rng_range(&r, 1, budget / 3 + 1);
            int peek = rng_range(&r, 0, 4) == 0;
            int expect = model_spent + units <= budget;
            sluice_decision d = charge(budget, cal, &s, units, now, peek);

            assert_int_equal(d.allowed, expect);
            if (expect) {
                assert_int_equal(d.remaining, budget - model_spent - units);
                if (!peek) {
                    model_spent += units;
                    if (ncharges < 64)
                        charges[ncharges++] = (charge_rec){now, units};
                }
            } else {
                int64_t wait =
                    units > budget || model_end == SLUICE_NEVER ? SLUICE_NEVER : model_end - now;

                assert_int_equal(d.remaining, model_spent < budget ? budget - model_spent : 0);
                assert_int_equal(d.retry_after_ns, wait);
                if (wait != SLUICE_NEVER) {
                    quota_state before = s;

                    if (wait > 1)
                        assert_false(charge(budget, cal, &s, units, now + wait - 1, 1).allowed);
                    assert_true(charge(budget, cal, &s, units, now + wait, 1).allowed);
                    assert_memory_equal(&before, &s, sizeof s);
                }
            }
        }
        assert_int_equal(quota_idle(&s, now), model_spent == 0);
        switch (rng_range(&r, 0, 3)) {
        case 0:
            now += rng_range(&r, 0, HOUR);
            break;
        case 1:
            now += rng_range(&r, 0, 3 * DAY);
            break;
        case 2:
            now += rng_range(&r, 0, 40 * DAY);
            break;
        default:
            break;
        }
    }
}

static void test_property(void **state)
{
    (void)state;
    for (uint64_t seed = 1; seed <= 300; seed++)
        quota_property(seed);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_period_matches_libc),
        cmocka_unit_test(test_day_rollover),
        cmocka_unit_test(test_month_rollover),
        cmocka_unit_test(test_settle),
        cmocka_unit_test(test_settle_after_period),
        cmocka_unit_test(test_spawn_cap),
        cmocka_unit_test(test_edges),
        cmocka_unit_test(test_property),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
