/* SPDX-License-Identifier: MIT */
/*
 * Tests of the fixed and sliding window limits (src/core/window.c), on a simulated clock.
 *
 * Besides the examples of the seeds (Conductor's 12 per 5 s, the Redis INCR + EXPIRE script, a
 * per-user sliding window of 20 per minute), property tests run random arrivals against tiny
 * reference models: every grant decision, remaining and retry_after must match the model, no
 * interval of one window may hold more than the limit, a denial charges nothing, and a request
 * retried exactly retry_after later is granted while one nanosecond earlier it is not.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/window.h"
#include "sluice/error.h"
#include "testutil.h"

#define SEC SLUICE_NS_PER_SEC
#define DAY (INT64_C(86400) * SEC)

/* ---- Fixed window ------------------------------------------------------------------------- */

static sluice_decision fixed(int64_t limit, int64_t window_ns, fixed_state *s, int64_t units,
                             int64_t now_ns, int peek)
{
    sluice_decision d;

    memset(&d, 0xa5, sizeof d);
    fixed_decide(limit, window_ns, s, units, now_ns, peek, &d);
    assert_int_equal(d.limit, limit);
    assert_true(d.allowed == 0 || d.allowed == 1);
    assert_true(d.remaining >= 0 && d.remaining <= limit);
    if (d.allowed)
        assert_int_equal(d.retry_after_ns, 0);
    else
        assert_true(d.retry_after_ns > 0);
    assert_true(d.reset_after_ns >= 0 && d.reset_after_ns <= window_ns);
    return d;
}

/* Seed 002: 12 per 5 s window gives exactly 12 * 60 / 5 = 144 grants in a minute, however many
 * workers poll, and never more than 12 in one aligned window. */
static void test_fixed_conductor_144_per_minute(void **state)
{
    const int64_t window = 5 * SEC;
    fixed_state s = {0, 0};
    int per_window[12] = {0};
    int granted = 0;

    (void)state;
    /* Continuous demand: ten workers polling every millisecond. */
    for (int64_t t = 0; t < 60 * SEC; t += SLUICE_NS_PER_MS) {
        for (int w = 0; w < 10; w++) {
            if (fixed(12, window, &s, 1, t, 0).allowed) {
                granted++;
                per_window[t / window]++;
            }
        }
    }
    assert_int_equal(granted, 144);
    for (int i = 0; i < 12; i++)
        assert_int_equal(per_window[i], 12);

    /* A client that sleeps exactly retry_after between denials gets the same 144. */
    memset(&s, 0, sizeof s);
    granted = 0;
    for (int64_t t = 0; t < 60 * SEC;) {
        sluice_decision d = fixed(12, window, &s, 1, t, 0);

        if (d.allowed)
            granted++;
        else
            t += d.retry_after_ns;
    }
    assert_int_equal(granted, 144);
}

/* The script of seed 004, as Redis runs it: INCR, EXPIRE on the first, DECR when over. */
typedef struct redis_counter {
    int64_t value;
    int64_t expire_at_ns; /* the key exists while now < expire_at_ns */
} redis_counter;

static int redis_script(redis_counter *k, int64_t limit, int64_t window_ns, int64_t now_ns,
                        int64_t *ttl_ns)
{
    if (now_ns >= k->expire_at_ns)
        k->value = 0; /* expired: INCR recreates it */
    k->value++;
    if (k->value == 1)
        k->expire_at_ns = now_ns + window_ns;
    *ttl_ns = k->expire_at_ns - now_ns;
    if (k->value > limit) {
        k->value--;
        return 0;
    }
    return 1;
}

static void test_fixed_redis_incr_expire(void **state)
{
    const int64_t window = 60 * SEC;
    const int64_t t0 = 10 * window; /* a window start, where the script's key is created */
    fixed_state s = {0, 0};
    sluice_decision d;

    (void)state;
    for (int i = 0; i < 5; i++) {
        d = fixed(5, window, &s, 1, t0 + i * SEC, 0);
        assert_true(d.allowed);
        assert_int_equal(d.remaining, 4 - i);
        assert_int_equal(d.reset_after_ns, window - i * SEC);
    }
    d = fixed(5, window, &s, 1, t0 + 5 * SEC, 0);
    assert_false(d.allowed);
    assert_int_equal(d.remaining, 0);
    assert_int_equal(d.retry_after_ns, 55 * SEC); /* the rest of the window */
    /* Denials count nothing (the script's DECR): hammering changes neither count nor wait. */
    for (int i = 0; i < 100; i++) {
        d = fixed(5, window, &s, 1, t0 + 30 * SEC, 0);
        assert_false(d.allowed);
        assert_int_equal(d.retry_after_ns, 30 * SEC);
    }
    assert_int_equal(s.count, 5);
    d = fixed(5, window, &s, 1, t0 + window - 1, 0);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, 1);
    for (int i = 0; i < 5; i++)
        assert_true(fixed(5, window, &s, 1, t0 + window, 0).allowed);
    assert_false(fixed(5, window, &s, 1, t0 + window, 0).allowed);

    /* Against the script itself: random requests on every second, one at least on each window
     * start so that the script's key windows line up with the aligned ones. */
    {
        redis_counter k = {0, 0};
        fixed_state f = {0, 0};
        test_rng r;

        rng_seed(&r, 4);
        for (int64_t t = 0; t < 3600 * SEC; t += SEC) {
            int64_t n = rng_range(&r, t % window == 0 ? 1 : 0, 8);

            for (int64_t i = 0; i < n; i++) {
                int64_t ttl;
                int ok = redis_script(&k, 5, window, t, &ttl);

                d = fixed(5, window, &f, 1, t, 0);
                assert_int_equal(d.allowed, ok);
                if (!ok)
                    assert_int_equal(d.retry_after_ns, ttl);
            }
        }
    }
}

/* Random arrivals against a model that counts the units of the current aligned window. */
static void fixed_property(uint64_t seed)
{
    test_rng r;
    int64_t limit, window, now, ref_start = -1, ref_count = 0;
    fixed_state s = {0, 0};

    rng_seed(&r, seed);
    limit = rng_range(&r, 1, 20);
    window = rng_range(&r, 1, 3) == 1 ? rng_range(&r, 1, 5) : rng_range(&r, 1, 5000);
    now = rng_range(&r, 0, 10 * window);
    for (int step = 0; step < 3000; step++) {
        int64_t units =
            rng_range(&r, 1, 10) == 1 ? limit + rng_range(&r, 1, 3) : rng_range(&r, 1, limit);
        int peek = rng_range(&r, 1, 5) == 1;
        int64_t start = now - now % window;
        int64_t used = start == ref_start ? ref_count : 0;
        int expect = used + units <= limit;
        fixed_state before = s;
        sluice_decision d = fixed(limit, window, &s, units, now, peek);

        assert_int_equal(d.allowed, expect);
        if (expect) {
            assert_int_equal(d.remaining, limit - used - units);
            assert_int_equal(d.reset_after_ns, start + window - now);
            if (!peek) {
                ref_start = start;
                ref_count = used + units;
                assert_true(ref_count <= limit); /* no aligned window over the limit */
            }
        } else {
            assert_int_equal(d.remaining, limit - used);
            assert_int_equal(d.retry_after_ns, units > limit ? SLUICE_NEVER : start + window - now);
        }
        if (peek || !expect)
            assert_memory_equal(&before, &s, sizeof s);
        if (!expect && units <= limit) {
            /* Exact: one nanosecond early is still denied, on time is granted. */
            if (d.retry_after_ns > 1)
                assert_false(
                    fixed(limit, window, &s, units, now + d.retry_after_ns - 1, 1).allowed);
            assert_true(fixed(limit, window, &s, units, now + d.retry_after_ns, 1).allowed);
            if (rng_range(&r, 0, 1)) {
                now += d.retry_after_ns;
                d = fixed(limit, window, &s, units, now, 0);
                assert_true(d.allowed);
                ref_start = now - now % window;
                ref_count = units;
                continue;
            }
        }
        assert_int_equal(fixed_idle(&s, window, now), ref_start != now - now % window);
        switch (rng_range(&r, 0, 3)) {
        case 0:
            break; /* same nanosecond */
        case 1:
            now += rng_range(&r, 1, window);
            break;
        default:
            now += rng_range(&r, 0, window / 4 + 1);
            break;
        }
    }
}

static void test_fixed_property(void **state)
{
    (void)state;
    for (uint64_t seed = 1; seed <= 200; seed++)
        fixed_property(seed);
}

static void test_fixed_edges(void **state)
{
    fixed_state s = {0, 0};
    sluice_decision d;
    const int64_t year = SLUICE_MAX_PERIOD_NS;

    (void)state;
    /* window_ns = 1: every nanosecond is a window of its own. */
    assert_true(fixed(1, 1, &s, 1, 7, 0).allowed);
    d = fixed(1, 1, &s, 1, 7, 0);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, 1);
    assert_int_equal(d.reset_after_ns, 1);
    assert_true(fixed(1, 1, &s, 1, 8, 0).allowed);
    assert_false(fixed_idle(&s, 1, 8));
    assert_true(fixed_idle(&s, 1, 9));

    /* units == limit fits an empty window exactly; units > limit never does. */
    memset(&s, 0, sizeof s);
    d = fixed(10, SEC, &s, 10, 0, 0);
    assert_true(d.allowed);
    assert_int_equal(d.remaining, 0);
    d = fixed(10, SEC, &s, 11, 5 * SEC, 0);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, SLUICE_NEVER);
    assert_int_equal(d.remaining, 10);
    assert_int_equal(d.reset_after_ns, 0);
    d = fixed(10, SEC, &s, INT64_MAX, 5 * SEC, 0);
    assert_int_equal(d.retry_after_ns, SLUICE_NEVER);
    assert_int_equal(s.count, 10);

    /* A window of a (leap) year, late in the int64 range. */
    memset(&s, 0, sizeof s);
    {
        int64_t now = INT64_MAX - 5;
        int64_t start = now - now % year;

        assert_true(fixed(3, year, &s, 3, now, 0).allowed);
        d = fixed(3, year, &s, 1, now, 0);
        assert_false(d.allowed);
        assert_int_equal(d.retry_after_ns, year - (now - start));
    }

    /* Time never runs backwards inside a key: an older now is read as the window's start. */
    memset(&s, 0, sizeof s);
    assert_true(fixed(1, 10, &s, 1, 25, 0).allowed);
    d = fixed(1, 10, &s, 1, 5, 0);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, 10);
    assert_false(fixed_idle(&s, 10, 5));

    /* Before the epoch reads as the epoch. */
    memset(&s, 0, sizeof s);
    d = fixed(2, 10, &s, 1, -3, 0);
    assert_true(d.allowed);
    assert_int_equal(d.reset_after_ns, 10);
    assert_true(fixed_idle(&s, 10, 10));
}

/* ---- Sliding window ----------------------------------------------------------------------- */

/* Decides, checking the fields every decision must satisfy. */
static sluice_decision sliding_checked(int64_t limit, int64_t window_ns, sliding_state *s,
                                       int64_t units, int64_t now_ns, int peek)
{
    sluice_decision d;

    memset(&d, 0xa5, sizeof d);
    assert_int_equal(sliding_decide(limit, window_ns, s, units, now_ns, peek, &d), SLUICE_OK);
    assert_int_equal(d.limit, limit);
    assert_true(d.remaining >= 0 && d.remaining <= limit);
    if (d.allowed)
        assert_int_equal(d.retry_after_ns, 0);
    else
        assert_true(d.retry_after_ns > 0);
    assert_true(d.reset_after_ns >= 0 && d.reset_after_ns <= window_ns);
    assert_true(s->n <= s->cap && (int64_t)s->n <= s->total);
    return d;
}

/* As the limit layer does: makes room (unless peeking), then decides. */
static sluice_decision sliding(int64_t limit, int64_t window_ns, sliding_state *s, int64_t units,
                               int64_t now_ns, int peek)
{
    if (!peek)
        assert_int_equal(sliding_prepare(s, limit), SLUICE_OK);
    return sliding_checked(limit, window_ns, s, units, now_ns, peek);
}

/* A copy of s, ring included, to check a call left it as it was. */
typedef struct sliding_snapshot {
    sliding_state s;
    sliding_event ring[256];
} sliding_snapshot;

static void snap(sliding_snapshot *p, const sliding_state *s)
{
    assert_true(s->cap <= 256);
    p->s = *s;
    if (s->cap > 0)
        memcpy(p->ring, s->ring, s->cap * sizeof *s->ring);
}

static void assert_unchanged(const sliding_snapshot *p, const sliding_state *s)
{
    assert_memory_equal(&p->s, s, sizeof *s);
    if (s->cap > 0)
        assert_memory_equal(p->ring, s->ring, s->cap * sizeof *s->ring);
}

/* Seed 004's per-user limiter: 20 requests per minute per user, in any minute. */
static void test_sliding_per_user_20_per_min(void **state)
{
    const int64_t minute = 60 * SEC;
    sliding_state alice = {0}, bob = {0};
    sluice_decision d;

    (void)state;
    for (int64_t i = 0; i < 20; i++) {
        d = sliding(20, minute, &alice, 1, i * SEC, 0);
        assert_true(d.allowed);
        assert_int_equal(d.remaining, 19 - i);
        assert_int_equal(d.reset_after_ns, minute);
    }
    d = sliding(20, minute, &alice, 1, 20 * SEC, 0);
    assert_false(d.allowed);
    assert_int_equal(d.remaining, 0);
    assert_int_equal(d.retry_after_ns, 40 * SEC); /* the grant at 0 s leaves at 60 s */
    assert_int_equal(d.reset_after_ns, 59 * SEC); /* the one at 19 s leaves at 79 s */
    /* Another user is not affected. */
    assert_true(sliding(20, minute, &bob, 1, 20 * SEC, 0).allowed);

    d = sliding(20, minute, &alice, 1, minute - 1, 0);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, 1);
    assert_true(sliding(20, minute, &alice, 1, minute, 0).allowed);
    d = sliding(20, minute, &alice, 1, minute, 0);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, SEC);
    /* Asking for 3 waits for the grants at 1 s, 2 s and 3 s to leave. */
    d = sliding(20, minute, &alice, 3, minute, 1);
    assert_int_equal(d.retry_after_ns, 3 * SEC);

    /* A burst of 20 at one instant: one merged record, and the 21st waits the whole minute. */
    sliding_clear(&bob);
    for (int i = 0; i < 20; i++)
        assert_true(sliding(20, minute, &bob, 1, 5 * SEC, 0).allowed);
    assert_int_equal(bob.n, 1);
    assert_int_equal(bob.total, 20);
    d = sliding(20, minute, &bob, 1, 5 * SEC, 0);
    assert_int_equal(d.retry_after_ns, minute);
    sliding_clear(&alice);
    sliding_clear(&bob);
}

typedef struct grant {
    int64_t at_ns;
    int64_t units;
} grant;

/* Units of the grants in (t - window, t]. */
static int64_t model_used(const grant *log, size_t n, int64_t window, int64_t t)
{
    int64_t sum = 0;

    for (size_t i = n; i-- > 0 && t - log[i].at_ns < window;)
        if (log[i].at_ns <= t)
            sum += log[i].units;
    return sum;
}

/* The model's wait for `units` at now when nothing else happens: the earliest t >= now at which
 * they fit, which is now or the moment some grant leaves the window. */
static int64_t model_wait(const grant *log, size_t n, int64_t limit, int64_t window, int64_t now,
                          int64_t units)
{
    int64_t best = SLUICE_NEVER;

    if (units > limit)
        return SLUICE_NEVER;
    if (model_used(log, n, window, now) + units <= limit)
        return 0;
    for (size_t i = n; i-- > 0 && log[i].at_ns + window > now;) {
        int64_t t = log[i].at_ns + window;

        if (t - now < best && model_used(log, n, window, t) + units <= limit)
            best = t - now;
    }
    return best;
}

static void sliding_property(uint64_t seed)
{
    test_rng r;
    int64_t limit, window, now;
    sliding_state s = {0};
    grant *log = malloc(4000 * sizeof *log);
    size_t n = 0;

    assert_non_null(log);
    rng_seed(&r, seed);
    limit = rng_range(&r, 1, 40);
    window = rng_range(&r, 1, 4) == 1 ? rng_range(&r, 1, 4) : rng_range(&r, 1, 3000);
    now = rng_range(&r, 0, 10 * window);
    for (int step = 0; step < 1500; step++) {
        int64_t units = rng_range(&r, 1, 12) == 1  ? limit + rng_range(&r, 1, 3)
                        : rng_range(&r, 1, 3) == 1 ? rng_range(&r, 1, limit)
                                                   : rng_range(&r, 1, (limit + 3) / 4);
        int peek = rng_range(&r, 1, 6) == 1;
        int64_t used = model_used(log, n, window, now);
        int expect = used + units <= limit;
        sliding_snapshot before;
        sluice_decision d;

        if (!peek)
            assert_int_equal(sliding_prepare(&s, limit), SLUICE_OK);
        snap(&before, &s);
        d = sliding_checked(limit, window, &s, units, now, peek);
        assert_true(s.total <= limit && (int64_t)s.cap <= (limit > 4 ? limit : 4));
        assert_int_equal(d.allowed, expect);
        if (expect) {
            assert_int_equal(d.remaining, limit - used - units);
            assert_int_equal(d.reset_after_ns, window);
        } else {
            assert_int_equal(d.remaining, used < limit ? limit - used : 0);
            assert_int_equal(d.retry_after_ns, model_wait(log, n, limit, window, now, units));
        }
        if (peek)
            assert_unchanged(&before, &s);
        if (expect && !peek) {
            log[n].at_ns = now;
            log[n].units = units;
            n++;
        }
        /* A decision forgets the records that left the window, and a denial charges nothing. */
        if (!peek)
            assert_int_equal(s.total, model_used(log, n, window, now));
        else
            assert_true(s.total >= model_used(log, n, window, now));
        if (!expect && units <= limit) {
            int64_t wait = d.retry_after_ns;

            /* Exact: one nanosecond early is still denied, on time is granted. */
            snap(&before, &s);
            if (wait > 1)
                assert_false(sliding(limit, window, &s, units, now + wait - 1, 1).allowed);
            assert_true(sliding(limit, window, &s, units, now + wait, 1).allowed);
            assert_unchanged(&before, &s);
            if (rng_range(&r, 0, 1)) {
                now += wait;
                assert_true(sliding(limit, window, &s, units, now, 0).allowed);
                log[n].at_ns = now;
                log[n].units = units;
                n++;
            }
        }
        assert_int_equal(sliding_idle(&s, window, now), model_used(log, n, window, now) == 0);
        switch (rng_range(&r, 0, 3)) {
        case 0:
            break; /* same nanosecond: merged records */
        case 1:
            now += rng_range(&r, 1, 2 * window);
            break;
        default:
            now += rng_range(&r, 0, window / 8 + 1);
            break;
        }
    }
    /* No interval of one window holds more than the limit. The busiest ones end on a grant. */
    for (size_t j = 0; j < n; j++)
        assert_true(model_used(log, j + 1, window, log[j].at_ns) <= limit);
    sliding_clear(&s);
    free(log);
}

static void test_sliding_property(void **state)
{
    (void)state;
    for (uint64_t seed = 1; seed <= 200; seed++)
        sliding_property(seed);
}

static void test_sliding_edges(void **state)
{
    const int64_t year = SLUICE_MAX_PERIOD_NS;
    sliding_state s = {0};
    sluice_decision d;

    (void)state;
    /* window_ns = 1: a grant counts for its own nanosecond only. */
    assert_true(sliding(2, 1, &s, 2, 100, 0).allowed);
    d = sliding(2, 1, &s, 1, 100, 0);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, 1);
    assert_int_equal(d.reset_after_ns, 1);
    assert_false(sliding_idle(&s, 1, 100));
    assert_true(sliding_idle(&s, 1, 101));
    d = sliding(2, 1, &s, 2, 101, 0);
    assert_true(d.allowed);
    assert_int_equal(d.remaining, 0);
    assert_int_equal(s.n, 1);
    sliding_clear(&s);

    /* units > limit is never granted, even on a fresh key, and allocates nothing. */
    d = sliding(3, SEC, &s, 4, 0, 1);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, SLUICE_NEVER);
    assert_int_equal(d.remaining, 3);
    assert_int_equal(d.reset_after_ns, 0);
    assert_int_equal(sliding_decide(3, SEC, &s, INT64_MAX, 0, 0, &d), SLUICE_OK);
    assert_int_equal(d.retry_after_ns, SLUICE_NEVER);
    assert_int_equal(sliding_bytes(&s), 0);

    /* A window of a (leap) year: grants 100 days apart, the fourth waits for the first. */
    for (int64_t i = 0; i < 3; i++)
        assert_true(sliding(3, year, &s, 1, i * 100 * DAY, 0).allowed);
    d = sliding(3, year, &s, 1, 300 * DAY, 0);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, year - 300 * DAY);
    assert_int_equal(d.reset_after_ns, year - 100 * DAY);
    assert_true(sliding(3, year, &s, 1, year, 0).allowed);
    sliding_clear(&s);

    /* The same, late in the int64 range. */
    {
        int64_t t0 = INT64_MAX - year;

        assert_true(sliding(2, year, &s, 2, t0, 0).allowed);
        d = sliding(2, year, &s, 1, INT64_MAX, 0);
        assert_true(d.allowed);
        sliding_clear(&s);
    }

    /* Time never runs backwards inside a key: an older now is read as the newest grant's. */
    assert_true(sliding(1, 10, &s, 1, 50, 0).allowed);
    d = sliding(1, 10, &s, 1, 20, 0);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, 10);
    sliding_clear(&s);

    /* Before the epoch reads as the epoch. */
    assert_true(sliding(1, 10, &s, 1, -5, 0).allowed);
    assert_int_equal(s.ring[s.head].at_ns, 0);
    assert_true(sliding_idle(&s, 10, 10));
    sliding_clear(&s);
    assert_null(s.ring);
    assert_int_equal(s.cap, 0);
    sliding_clear(&s); /* a fresh state too */
}

/* A key whose limit was lowered holds more records than the new limit allows: it is denied
 * until enough of them leave, and may still grow when it is granted. */
static void test_sliding_lowered_limit(void **state)
{
    sliding_state s = {0};
    sluice_decision d;

    (void)state;
    for (int64_t i = 0; i < 10; i++)
        assert_true(sliding(10, 100, &s, 1, i, 0).allowed);
    d = sliding(3, 100, &s, 1, 10, 0);
    assert_false(d.allowed);
    assert_int_equal(d.remaining, 0);
    assert_int_equal(d.retry_after_ns, 97); /* the grants at 0..7 must leave: 7 + 100 - 10 */
    assert_true(sliding(3, 100, &s, 1, 107, 0).allowed);
    assert_int_equal(s.total, 3);
    sliding_clear(&s);
}

/* Grants 64 units one at a time, at distinct times, under the allocator of the sweep. */
static int sliding_growth_body(void *arg)
{
    sliding_state s = {0};
    sluice_decision d;
    int rc = SLUICE_OK;

    (void)arg;
    for (int64_t i = 0; i < 64; i++) {
        uint32_t n = s.n, cap = s.cap;

        rc = sliding_prepare(&s, 64);
        if (rc != SLUICE_OK) {
            assert_int_equal(s.n, n); /* s unchanged */
            assert_int_equal(s.cap, cap);
            break;
        }
        assert_true(s.n < s.cap);
        assert_int_equal(sliding_decide(64, 1000, &s, 1, i, 0, &d), SLUICE_OK);
        assert_true(d.allowed);
    }
    if (rc == SLUICE_OK) {
        assert_int_equal(s.n, 64);
        assert_int_equal(s.cap, 64); /* 4, 8, 16, 32, 64: never more than the limit */
        assert_false(sliding(64, 1000, &s, 1, 64, 0).allowed);
    }
    sliding_clear(&s);
    return rc;
}

static void test_sliding_oom_sweep(void **state)
{
    (void)state;
    /* Five rings are allocated on the way to 64 records. */
    assert_int_equal(oom_sweep(sliding_growth_body, NULL, 100), 6);
}

/* A grant without room made first tries to grow itself, and on failure charges nothing. */
static void test_sliding_decide_enomem(void **state)
{
    sliding_state s = {0};
    sliding_snapshot before;
    sluice_decision d;

    (void)state;
    oom_install(2); /* the first ring is allowed, growing it is not */
    for (int64_t i = 0; i < 4; i++) {
        assert_int_equal(sliding_decide(100, 1000, &s, 1, i, 0, &d), SLUICE_OK);
        assert_true(d.allowed);
    }
    assert_int_equal(s.cap, 4);
    snap(&before, &s);
    assert_int_equal(sliding_prepare(&s, 100), SLUICE_ENOMEM);
    assert_unchanged(&before, &s);
    assert_int_equal(sliding_decide(100, 1000, &s, 1, 10, 0, &d), SLUICE_ENOMEM);
    assert_false(d.allowed);
    assert_int_equal(d.remaining, 96);
    assert_unchanged(&before, &s);
    /* A grant that merges into the newest record needs no room, nor does a peek. */
    assert_int_equal(sliding_decide(100, 1000, &s, 1, 3, 0, &d), SLUICE_OK);
    assert_true(d.allowed);
    assert_int_equal(sliding_decide(100, 1000, &s, 1, 10, 1, &d), SLUICE_OK);
    assert_true(d.allowed);
    assert_int_equal(s.total, 5);
    sliding_clear(&s);
    assert_int_equal(oom_live_blocks(), 0);
    oom_uninstall();
}

/* Memory follows the active grants: once most records left, sliding_prepare gives it back. */
static void test_sliding_shrinks(void **state)
{
    sliding_state s = {0};
    size_t full;

    (void)state;
    for (int64_t i = 0; i < 200; i++)
        assert_true(sliding(200, 1000, &s, 1, i, 0).allowed);
    full = sliding_bytes(&s);
    assert_int_equal(full, 200 * sizeof(sliding_event));
    for (int64_t t = 2000; t < 2020; t++)
        assert_true(sliding(200, 1000, &s, 1, t, 0).allowed);
    assert_int_equal(s.n, 20);
    assert_true(sliding_bytes(&s) < full);
    assert_true(s.cap >= s.n);
    /* Records in order after shrinking: the oldest leaves first. */
    {
        sluice_decision d;

        for (int64_t t = 2020; t < 2200; t++)
            assert_true(sliding(200, 1000, &s, 1, t, 0).allowed);
        d = sliding(200, 1000, &s, 1, 2200, 0);
        assert_false(d.allowed);
        assert_int_equal(d.retry_after_ns, 800); /* the grant at 2000 leaves at 3000 */
    }
    sliding_clear(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixed_conductor_144_per_minute),
        cmocka_unit_test(test_fixed_redis_incr_expire),
        cmocka_unit_test(test_fixed_property),
        cmocka_unit_test(test_fixed_edges),
        cmocka_unit_test(test_sliding_per_user_20_per_min),
        cmocka_unit_test(test_sliding_property),
        cmocka_unit_test(test_sliding_edges),
        cmocka_unit_test(test_sliding_lowered_limit),
        cmocka_unit_test(test_sliding_oom_sweep),
        cmocka_unit_test(test_sliding_decide_enomem),
        cmocka_unit_test(test_sliding_shrinks),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
