/* SPDX-License-Identifier: MIT */
/*
 * Tests of the GCRA rate limit: the seeds' worked examples on a simulated clock, exact pacing
 * when the emission interval is not a whole number of nanoseconds, extreme parameters, the clock
 * clamp, and property tests against a reference model written in 128-bit "scaled time".
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/gcra.h"
#include "sluice/error.h"
#include "sluice/limit.h"
#include "testutil.h"

#define SEC SLUICE_NS_PER_SEC
#define MIN (60 * SEC)
/* A realistic epoch (2025-11-14 UTC), so nothing depends on time starting at zero. */
#define T0 (INT64_C(1763078400) * SEC)

static sluice_limit *rate_limit(int64_t permits, int64_t period_ns, int64_t burst, int start_empty)
{
    sluice_limit_def def;
    sluice_limit *lim;
    char msg[128];

    sluice_limit_def_init(&def, SLUICE_RATE);
    def.limit = permits;
    def.period_ns = period_ns;
    def.burst = burst;
    def.start_empty = start_empty;
    assert_int_equal(sluice_limit_new(&def, &lim, msg, sizeof msg), SLUICE_OK);
    return lim;
}

/* Runs n requests arriving together at `at` through reservations, as a queue of tasks would
 * wait for their slots, and stores each slot relative to `at` in seconds*1000 (ms). */
static void reserve_all(sluice_limit *lim, const char *key, int n, int64_t at, uint64_t first_id,
                        int64_t *slots_ms)
{
    for (int i = 0; i < n; i++) {
        int64_t slot;

        assert_int_equal(
            sluice_limit_reserve(lim, key, strlen(key), first_id + (uint64_t)i, 1, at, &slot),
            SLUICE_OK);
        slots_ms[i] = (slot - at) / SLUICE_NS_PER_MS;
    }
}

/* Seed 003: 20 tasks on 15/min with burst 15: 15 at once, then one every 4 s. */
static void test_seed003_burst15(void **unused)
{
    sluice_limit *lim = rate_limit(15, MIN, 15, 0);
    int64_t slots[20];

    (void)unused;
    reserve_all(lim, "tenant-a", 20, T0, 1, slots);
    for (int i = 0; i < 15; i++)
        assert_int_equal(slots[i], 0);
    for (int i = 15; i < 20; i++)
        assert_int_equal(slots[i], (i - 14) * 4000);
    sluice_limit_free(lim);
}

/* Seed 003: burst 1 spaces every execution 4 s apart, however long the key was idle. */
static void test_seed003_burst1(void **unused)
{
    sluice_limit *lim = rate_limit(15, MIN, 1, 0);
    int64_t slots[20];

    (void)unused;
    reserve_all(lim, "tenant-a", 20, T0, 1, slots);
    for (int i = 0; i < 20; i++)
        assert_int_equal(slots[i], i * 4000);
    /* An hour of idleness saves nothing up: two arrivals are still 4 s apart. */
    reserve_all(lim, "tenant-a", 2, T0 + 3600 * SEC, 100, slots);
    assert_int_equal(slots[0], 0);
    assert_int_equal(slots[1], 4000);
    sluice_limit_free(lim);
}

/* Seed 003: start_empty runs the first task at once and paces the rest from the start. */
static void test_seed003_start_empty(void **unused)
{
    sluice_limit *lim = rate_limit(15, MIN, 15, 1);
    int64_t slots[20];
    sluice_decision d;

    (void)unused;
    reserve_all(lim, "tenant-a", 20, T0, 1, slots);
    for (int i = 0; i < 20; i++)
        assert_int_equal(slots[i], i * 4000);
    /* A key first seen through decide behaves the same: one now, the next 4 s later. */
    assert_int_equal(sluice_limit_decide(lim, "b", 1, 1, T0, 0, &d), SLUICE_OK);
    assert_true(d.allowed);
    assert_int_equal(sluice_limit_decide(lim, "b", 1, 1, T0, 0, &d), SLUICE_OK);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, 4 * SEC);
    sluice_limit_free(lim);
}

/* A new start_empty key lets its first request through whatever its units, and is empty
 * after it: the next unit waits one emission interval. Both for a whole and a fractional T. */
static void test_start_empty_multi_unit(void **unused)
{
    int64_t periods[] = {MIN, SEC}; /* T = 4 s, and T = 66666666 2/3 ns */

    (void)unused;
    for (int i = 0; i < 2; i++) {
        sluice_limit *lim = rate_limit(15, periods[i], 15, 1);
        int64_t t = (periods[i] + 14) / 15; /* T rounded up */
        sluice_decision d;

        assert_int_equal(sluice_limit_decide(lim, "k", 1, 3, T0, SLUICE_PEEK, &d), SLUICE_OK);
        assert_true(d.allowed);
        assert_int_equal(sluice_limit_decide(lim, "k", 1, 3, T0, 0, &d), SLUICE_OK);
        assert_true(d.allowed);
        assert_int_equal(d.remaining, 0);
        assert_int_equal(sluice_limit_decide(lim, "k", 1, 1, T0, 0, &d), SLUICE_OK);
        assert_false(d.allowed);
        assert_int_equal(d.retry_after_ns, t);
        assert_int_equal(sluice_limit_decide(lim, "k", 1, 1, T0 + t, 0, &d), SLUICE_OK);
        assert_true(d.allowed);
        /* More units than the burst can never pass, new key or not. */
        assert_int_equal(sluice_limit_decide(lim, "new", 3, 16, T0, 0, &d), SLUICE_OK);
        assert_false(d.allowed);
        assert_int_equal(d.retry_after_ns, SLUICE_NEVER);
        sluice_limit_free(lim);
    }
}

/* Seed 003's restart timelines: a limiter that forgets its state (a new process) hands a fresh
 * burst to a key that just spent one (2 x burst at the API); start_empty caps that to one. */
static void test_seed003_restart(void **unused)
{
    int64_t before[15], after[15];
    sluice_limit *lim;

    (void)unused;
    lim = rate_limit(15, MIN, 15, 0);
    reserve_all(lim, "k", 15, T0, 1, before);
    sluice_limit_free(lim); /* the restart */
    lim = rate_limit(15, MIN, 15, 0);
    reserve_all(lim, "k", 15, T0 + SEC, 1, after);
    for (int i = 0; i < 15; i++)
        assert_int_equal(after[i], 0); /* 30 calls within one second */
    sluice_limit_free(lim);

    lim = rate_limit(15, MIN, 15, 1);
    reserve_all(lim, "k", 15, T0, 1, before);
    sluice_limit_free(lim);
    lim = rate_limit(15, MIN, 15, 1);
    reserve_all(lim, "k", 15, T0 + SEC, 1, after);
    for (int i = 0; i < 15; i++)
        assert_int_equal(after[i], i * 4000); /* first now, then the steady pace */
    sluice_limit_free(lim);
}

/* Seed 000: a global 10/min limit and a keyed 100/min limit with independent buckets. */
static void test_seed000_global_and_keyed(void **unused)
{
    sluice_limit *global = rate_limit(10, MIN, 0, 0);
    sluice_limit *keyed = rate_limit(100, MIN, 0, 0);
    sluice_decision d;

    (void)unused;
    for (int i = 0; i < 10; i++) {
        assert_int_equal(sluice_limit_decide(global, NULL, 0, 1, T0, 0, &d), SLUICE_OK);
        assert_true(d.allowed);
        assert_int_equal(d.remaining, 9 - i);
    }
    assert_int_equal(sluice_limit_decide(global, NULL, 0, 1, T0, 0, &d), SLUICE_OK);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, 6 * SEC);
    assert_int_equal(d.reset_after_ns, MIN);

    for (int i = 0; i < 100; i++) {
        assert_int_equal(sluice_limit_decide(keyed, "openai", 6, 1, T0, 0, &d), SLUICE_OK);
        assert_true(d.allowed);
    }
    assert_int_equal(sluice_limit_decide(keyed, "openai", 6, 1, T0, 0, &d), SLUICE_OK);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, 600 * SLUICE_NS_PER_MS);
    assert_int_equal(sluice_limit_decide(keyed, "anthropic", 9, 1, T0, 0, &d), SLUICE_OK);
    assert_true(d.allowed);
    assert_int_equal(d.remaining, 99);
    sluice_limit_free(global);
    sluice_limit_free(keyed);
}

/* Seed 001: weights. 100/min: two steps of weight 50 pass at once, the third waits for 50
 * tokens (30 s); a weight above the burst can never pass, and says so instead of freezing. */
static void test_seed001_weights(void **unused)
{
    sluice_limit *stripe = rate_limit(100, MIN, 0, 0);
    sluice_limit *emails = rate_limit(5, MIN, 10, 0);
    sluice_decision d;
    int64_t slot;

    (void)unused;
    assert_int_equal(sluice_limit_decide(stripe, NULL, 0, 50, T0, 0, &d), SLUICE_OK);
    assert_true(d.allowed);
    assert_int_equal(d.remaining, 50);
    assert_int_equal(sluice_limit_decide(stripe, NULL, 0, 50, T0, 0, &d), SLUICE_OK);
    assert_true(d.allowed);
    assert_int_equal(sluice_limit_decide(stripe, NULL, 0, 50, T0, 0, &d), SLUICE_OK);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, 30 * SEC);
    /* Meanwhile single tokens drip in every 600 ms. */
    assert_int_equal(sluice_limit_decide(stripe, NULL, 0, 1, T0 + 600 * SLUICE_NS_PER_MS, 0, &d),
                     SLUICE_OK);
    assert_true(d.allowed);

    assert_int_equal(sluice_limit_decide(stripe, NULL, 0, 101, T0, 0, &d), SLUICE_OK);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, SLUICE_NEVER);
    assert_int_equal(sluice_limit_reserve(stripe, NULL, 0, 7, 101, T0, &slot), SLUICE_EINVAL);

    /* emails: allowed 5/60 s, burst 10: ten back-to-back, then one per 12 s. */
    for (int i = 0; i < 10; i++) {
        assert_int_equal(sluice_limit_decide(emails, "u1", 2, 1, T0, 0, &d), SLUICE_OK);
        assert_true(d.allowed);
    }
    assert_int_equal(sluice_limit_decide(emails, "u1", 2, 1, T0, 0, &d), SLUICE_OK);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, 12 * SEC);
    sluice_limit_free(stripe);
    sluice_limit_free(emails);
}

/* 3 per second: T = 333333333 1/3 ns. Slots are exact to the nanosecond, with no drift even
 * after thousands of grants (10,000 slots fill most of the one-hour horizon). */
static void test_fractional_interval_is_exact(void **unused)
{
    sluice_limit *lim = rate_limit(3, SEC, 1, 0);
    int64_t slot;

    (void)unused;
    for (int64_t k = 0; k < 10000; k++) {
        assert_int_equal(sluice_limit_reserve(lim, "k", 1, (uint64_t)k + 1, 1, T0, &slot),
                         SLUICE_OK);
        assert_int_equal(slot - T0, (k * SEC + 2) / 3); /* ceil(k * 10^9 / 3) */
        assert_int_equal(sluice_limit_redeem(lim, (uint64_t)k + 1), SLUICE_OK);
    }
    sluice_limit_free(lim);
}

/* A caller that comes back exactly retry_after later is admitted; one nanosecond earlier not. */
static void test_retry_after_is_exact(void **unused)
{
    gcra g;
    gcra_state s = {0, 0};
    sluice_decision d;

    (void)unused;
    assert_int_equal(gcra_init(&g, 7, SEC, 2, 0), SLUICE_OK);
    gcra_decide(&g, &s, 1, 2, T0, 0, &d);
    assert_true(d.allowed);
    gcra_decide(&g, &s, 0, 1, T0, 0, &d);
    assert_false(d.allowed);
    {
        gcra_state copy = s;
        sluice_decision again;

        gcra_decide(&g, &copy, 0, 1, T0 + d.retry_after_ns - 1, 1, &again);
        assert_false(again.allowed);
        gcra_decide(&g, &copy, 0, 1, T0 + d.retry_after_ns, 1, &again);
        assert_true(again.allowed);
    }
}

static void test_peek_charges_nothing(void **unused)
{
    sluice_limit *lim = rate_limit(1, SEC, 1, 0);
    sluice_decision d;
    sluice_limit_stats st;

    (void)unused;
    for (int i = 0; i < 5; i++) {
        assert_int_equal(sluice_limit_decide(lim, "k", 1, 1, T0, SLUICE_PEEK, &d), SLUICE_OK);
        assert_true(d.allowed);
        assert_int_equal(d.remaining, 0);
    }
    sluice_limit_get_stats(lim, &st);
    assert_int_equal(st.keys, 0); /* a peek creates nothing */
    assert_int_equal(sluice_limit_decide(lim, "k", 1, 1, T0, 0, &d), SLUICE_OK);
    assert_true(d.allowed);
    assert_int_equal(sluice_limit_decide(lim, "k", 1, 1, T0, SLUICE_PEEK, &d), SLUICE_OK);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, SEC);
    sluice_limit_free(lim);
}

/* Extreme parameters: 10^9 per nanosecond, one per year, and products that would overflow. */
static void test_extremes(void **unused)
{
    sluice_limit_def def;
    sluice_limit *lim;
    sluice_decision d;
    char msg[128];

    (void)unused;
    lim = rate_limit(SLUICE_MAX_PERMITS, 1, 0, 0); /* T = 10^-9 ns, burst*T = 1 ns */
    assert_int_equal(sluice_limit_decide(lim, NULL, 0, SLUICE_MAX_PERMITS, T0, 0, &d), SLUICE_OK);
    assert_true(d.allowed);
    assert_int_equal(sluice_limit_decide(lim, NULL, 0, 1, T0, 0, &d), SLUICE_OK);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, 1);
    assert_int_equal(sluice_limit_decide(lim, NULL, 0, SLUICE_MAX_PERMITS, T0 + 1, 0, &d),
                     SLUICE_OK);
    assert_true(d.allowed);
    sluice_limit_free(lim);

    lim = rate_limit(1, SLUICE_MAX_PERIOD_NS, 1, 0);
    assert_int_equal(sluice_limit_decide(lim, NULL, 0, 1, T0, 0, &d), SLUICE_OK);
    assert_true(d.allowed);
    assert_int_equal(sluice_limit_decide(lim, NULL, 0, 1, T0, 0, &d), SLUICE_OK);
    assert_int_equal(d.retry_after_ns, SLUICE_MAX_PERIOD_NS);
    sluice_limit_free(lim);

    sluice_limit_def_init(&def, SLUICE_RATE);
    def.limit = 1;
    def.period_ns = SLUICE_MAX_PERIOD_NS;
    def.burst = SLUICE_MAX_PERMITS; /* 10^9 years of saved-up budget */
    assert_int_equal(sluice_limit_new(&def, &lim, msg, sizeof msg), SLUICE_ERANGE);
    assert_null(lim);
    assert_non_null(strstr(msg, "100 years"));
    def.burst = 0;
    def.period_ns = SLUICE_MAX_PERIOD_NS + 1;
    assert_int_equal(sluice_limit_new(&def, &lim, msg, sizeof msg), SLUICE_ERANGE);
    def.period_ns = SEC;
    def.limit = SLUICE_MAX_PERMITS + 1;
    assert_int_equal(sluice_limit_new(&def, &lim, msg, sizeof msg), SLUICE_ERANGE);
}

/* The clock clamp: a step back neither locks the key out nor releases budget early. */
static void test_clock_backwards(void **unused)
{
    sluice_limit *lim = rate_limit(15, MIN, 15, 0);
    sluice_decision d;

    (void)unused;
    for (int i = 0; i < 15; i++)
        assert_int_equal(sluice_limit_decide(lim, "k", 1, 1, T0 + 100 * SEC, 0, &d), SLUICE_OK);
    /* The clock jumps an hour back: the wait is still 4 s, not an hour and 4 s. */
    assert_int_equal(sluice_limit_decide(lim, "k", 1, 1, T0 + 100 * SEC - 3600 * SEC, 0, &d),
                     SLUICE_OK);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, 4 * SEC);
    /* And going back to a time before the burst was spent frees nothing. */
    assert_int_equal(sluice_limit_decide(lim, "k", 1, 1, T0, 0, &d), SLUICE_OK);
    assert_false(d.allowed);
    assert_int_equal(sluice_limit_decide(lim, "k", 1, 1, T0 + 104 * SEC, 0, &d), SLUICE_OK);
    assert_true(d.allowed);
    sluice_limit_free(lim);
}

/* ---- Property tests ------------------------------------------------------------------------ */

__extension__ typedef __int128 i128;

/* The reference model: GCRA in "scaled time" (ns * permits), where T is the whole number
 * `period` and nothing needs a remainder. Obviously right, too slow to serve. */
typedef struct ref_gcra {
    i128 tat; /* scaled */
    int64_t permits, period, burst;
} ref_gcra;

static int ref_decide(ref_gcra *r, int64_t units, int64_t now, int64_t *retry_after)
{
    i128 now_s = (i128)now * r->permits;
    i128 base = r->tat > now_s ? r->tat : now_s;
    i128 next = base + (i128)units * r->period;
    i128 over = next - now_s - (i128)r->burst * r->period;

    if (units > r->burst) {
        *retry_after = SLUICE_NEVER;
        return 0;
    }
    if (over <= 0) {
        r->tat = next;
        *retry_after = 0;
        return 1;
    }
    *retry_after = (int64_t)((over + r->permits - 1) / r->permits);
    return 0;
}

typedef struct grant {
    int64_t at;
    int64_t units;
} grant;

static void property_run(uint64_t seed)
{
    test_rng rng;
    gcra g;
    gcra_state s = {0, 0};
    ref_gcra ref;
    int64_t permits, period, burst, now = T0;
    static grant grants[4000];
    int ng = 0;

    rng_seed(&rng, seed);
    permits = rng_range(&rng, 1, 50);
    period = rng_range(&rng, 1, 2000) * (rng_range(&rng, 0, 1) ? SLUICE_NS_PER_MS : 7);
    burst = rng_range(&rng, 1, 3 * permits);
    assert_int_equal(gcra_init(&g, permits, period, burst, 0), SLUICE_OK);
    ref.tat = 0;
    ref.permits = permits;
    ref.period = period;
    ref.burst = burst;

    for (int i = 0; i < 4000; i++) {
        int64_t units = rng_range(&rng, 1, burst + (i % 97 == 0));
        int64_t ref_retry;
        int ref_ok = ref_decide(&ref, units, now, &ref_retry);
        sluice_decision d;

        gcra_decide(&g, &s, i == 0, units, now, 0, &d);
        assert_int_equal(d.allowed, ref_ok);
        assert_int_equal(d.retry_after_ns, ref_retry);
        if (d.allowed) {
            grants[ng].at = now;
            grants[ng].units = units;
            ng++;
        } else if (d.retry_after_ns != SLUICE_NEVER) {
            /* Waiting exactly retry_after succeeds, on a copy of the state. */
            gcra_state copy = s;
            sluice_decision later;

            gcra_decide(&g, &copy, 0, units, now + d.retry_after_ns, 1, &later);
            assert_true(later.allowed);
        }
        /* Arrivals: bursts at the same instant, short gaps, occasional long idle spells. */
        switch (rng_range(&rng, 0, 3)) {
        case 0:
            break;
        case 1:
        case 2:
            now += rng_range(&rng, 1, 2 * period / permits + 1);
            break;
        default:
            now += rng_range(&rng, 0, 3 * period);
        }
    }
    /* In every window [t, t + W], granted units never exceed burst + W / T, i.e.
     * units * period <= burst * period + W * permits. Windows start at each grant. */
    for (int a = 0; a < ng; a++) {
        i128 units = 0;

        for (int b = a; b < ng; b++) {
            i128 w = grants[b].at - grants[a].at;

            units += grants[b].units;
            assert_true(units * period <= (i128)burst * period + w * permits);
        }
    }
}

static void test_property_against_reference(void **unused)
{
    (void)unused;
    for (uint64_t seed = 1; seed <= 60; seed++)
        property_run(seed * 7919);
}

/* Reservations hand out non-decreasing slots, refuse past the horizon without charging, and
 * answer a repeated id with the same slot without charging twice. */
static void test_reservations(void **unused)
{
    sluice_limit_def def;
    sluice_limit *lim;
    int64_t slot, prev = 0;
    char msg[128];

    (void)unused;
    sluice_limit_def_init(&def, SLUICE_RATE);
    def.limit = 1;
    def.period_ns = MIN;
    def.horizon_ns = 10 * MIN;
    assert_int_equal(sluice_limit_new(&def, &lim, msg, sizeof msg), SLUICE_OK);
    for (uint64_t id = 1; id <= 11; id++) {
        assert_int_equal(sluice_limit_reserve(lim, "k", 1, id, 1, T0, &slot), SLUICE_OK);
        assert_true(slot >= prev);
        prev = slot;
    }
    assert_int_equal(prev - T0, 10 * MIN);
    /* The 12th would be 11 minutes out: refused, and nothing charged. */
    assert_int_equal(sluice_limit_reserve(lim, "k", 1, 12, 1, T0, &slot), SLUICE_EHORIZON);
    assert_int_equal(slot - T0, 11 * MIN);
    assert_int_equal(sluice_limit_reserve(lim, "k", 1, 13, 1, T0 + MIN, &slot), SLUICE_OK);
    assert_int_equal(slot - T0, 11 * MIN);
    /* Asking again for id 3 returns its slot and charges nothing. */
    assert_int_equal(sluice_limit_reserve(lim, "k", 1, 3, 1, T0 + MIN, &slot), SLUICE_OK);
    assert_int_equal(slot - T0, 2 * MIN);
    assert_int_equal(sluice_limit_reserve(lim, "k", 1, 14, 1, T0 + 2 * MIN, &slot), SLUICE_OK);
    assert_int_equal(slot - T0, 12 * MIN);
    /* Redeemed ids are forgotten; an unknown id is not found. */
    assert_int_equal(sluice_limit_redeem(lim, 3), SLUICE_OK);
    assert_int_equal(sluice_limit_redeem(lim, 3), SLUICE_ENOTFOUND);
    sluice_limit_free(lim);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seed003_burst15),
        cmocka_unit_test(test_seed003_burst1),
        cmocka_unit_test(test_seed003_start_empty),
        cmocka_unit_test(test_start_empty_multi_unit),
        cmocka_unit_test(test_seed003_restart),
        cmocka_unit_test(test_seed000_global_and_keyed),
        cmocka_unit_test(test_seed001_weights),
        cmocka_unit_test(test_fractional_interval_is_exact),
        cmocka_unit_test(test_retry_after_is_exact),
        cmocka_unit_test(test_peek_charges_nothing),
        cmocka_unit_test(test_extremes),
        cmocka_unit_test(test_clock_backwards),
        cmocka_unit_test(test_property_against_reference),
        cmocka_unit_test(test_reservations),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
