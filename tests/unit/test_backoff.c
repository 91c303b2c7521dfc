/* SPDX-License-Identifier: MIT */
/*
 * Tests of backoff, a rate limit's key held back because its upstream answered 429 with
 * Retry-After (sluice_limit_backoff, and TASK.FAIL ... RETRY_AFTER through the engine), on a
 * simulated clock: nothing is granted on the key before now + wait, exactly one unit is at that
 * time, a backoff never gives budget back, the held key travels through drain and import with
 * its whole lead, and a failed task's rate keys hold back the other tasks on them. A property
 * test checks the first two claims over random limits (fractional intervals too), histories
 * and waits against the decision itself.
 *
 * Adaptive (AIMD) rates: each backoff multiplies the key's effective rate by the decrease,
 * never below the floor, and it recovers additively per interval, never above the configured
 * rate; a property test follows random decisions, backoffs, reads and save/restore cycles on
 * the simulated clock against a reference model that computes the rate from the last decrease
 * alone. The count of keys below their rate (stats.slowed, INFO's keys_slowed) is checked against
 * the keys' rates read one by one: never below, and exact after a sweep over the table.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "engine_fixture.h"
#include "sluice/error.h"
#include "sluice/limit.h"
#include "sluice/spec.h"
#include "testutil.h"

static sluice_limit *rate_limit(int64_t permits, int64_t period_ns, int64_t burst)
{
    sluice_limit_def def;
    sluice_limit *lim;
    char msg[128];

    sluice_limit_def_init(&def, SLUICE_RATE);
    def.limit = permits;
    def.period_ns = period_ns;
    def.burst = burst;
    assert_int_equal(sluice_limit_new(&def, &lim, msg, sizeof msg), SLUICE_OK);
    return lim;
}

/* Whether `units` on key "k" would be granted at `at` (a peek: charges nothing). */
static int would_grant(sluice_limit *lim, int64_t units, int64_t at)
{
    sluice_decision d;

    assert_int_equal(sluice_limit_decide(lim, "k", 1, units, at, SLUICE_PEEK, &d), SLUICE_OK);
    return d.allowed;
}

static void test_backoff_holds_key(void **unused)
{
    sluice_limit *lim = rate_limit(10, SEC, 10);
    sluice_limit_stats st;
    sluice_decision d;
    int64_t slot;

    (void)unused;
    assert_int_equal(sluice_limit_decide(lim, "k", 1, 3, T0, 0, &d), SLUICE_OK);
    assert_true(d.allowed);
    assert_int_equal(sluice_limit_backoff(lim, "k", 1, 500 * MS, T0, &slot), SLUICE_OK);
    assert_int_equal(slot, T0 + 500 * MS);
    /* Nothing before the time asked, one unit then, the steady pace after it. */
    assert_int_equal(sluice_limit_decide(lim, "k", 1, 1, T0 + 500 * MS - 1, 0, &d), SLUICE_OK);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, 1);
    assert_int_equal(sluice_limit_decide(lim, "k", 1, 1, T0 + 500 * MS, 0, &d), SLUICE_OK);
    assert_true(d.allowed);
    assert_int_equal(d.remaining, 0);
    assert_int_equal(sluice_limit_decide(lim, "k", 1, 1, T0 + 500 * MS, 0, &d), SLUICE_OK);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, 100 * MS);
    /* Another key is not touched. */
    assert_int_equal(sluice_limit_decide(lim, "j", 1, 10, T0 + 500 * MS, 0, &d), SLUICE_OK);
    assert_true(d.allowed);
    /* A shorter backoff than the key already waits changes nothing; a longer one does. */
    assert_int_equal(sluice_limit_backoff(lim, "k", 1, 10 * MS, T0 + 500 * MS, &slot), SLUICE_OK);
    assert_int_equal(slot, T0 + 600 * MS);
    assert_int_equal(sluice_limit_backoff(lim, "k", 1, 2 * SEC, T0 + 500 * MS, &slot), SLUICE_OK);
    assert_int_equal(slot, T0 + 2500 * MS);
    assert_false(would_grant(lim, 1, T0 + 2500 * MS - 1));
    assert_true(would_grant(lim, 1, T0 + 2500 * MS));
    assert_false(would_grant(lim, 2, T0 + 2500 * MS));
    assert_true(would_grant(lim, 2, T0 + 2600 * MS));
    sluice_limit_get_stats(lim, &st);
    assert_int_equal(st.backoffs, 3);
    /* A key never seen is held too (NULL slot is fine). */
    assert_int_equal(sluice_limit_backoff(lim, "new", 3, SEC, T0 + 3 * SEC, NULL), SLUICE_OK);
    assert_int_equal(sluice_limit_decide(lim, "new", 3, 1, T0 + 4 * SEC - 1, 0, &d), SLUICE_OK);
    assert_false(d.allowed);
    /* Bounds. */
    assert_int_equal(sluice_limit_backoff(lim, "k", 1, -1, T0, &slot), SLUICE_EINVAL);
    assert_int_equal(sluice_limit_backoff(lim, "k", 1, 31 * 86400 * SEC, T0, &slot), SLUICE_ERANGE);
    sluice_limit_free(lim);
}

/* Out of memory at every allocation of a backoff on a tracked adaptive limit (the key's table
 * entry, its change record): each failure says so and holds nothing back; the success does. */
static int oom_backoff(void *arg)
{
    sluice_limit_def def;
    sluice_limit *lim;
    char msg[128];
    int64_t slot = 0;
    int rc;

    (void)arg;
    sluice_limit_def_init(&def, SLUICE_RATE);
    def.limit = 10;
    def.period_ns = SEC;
    def.decrease_num = 5;
    def.decrease_den = 10;
    def.recover_pct = 10;
    def.recover_ns = MIN;
    def.floor_permits = 1;
    def.floor_period_ns = SEC;
    rc = sluice_limit_new(&def, &lim, msg, sizeof msg);
    if (rc != SLUICE_OK)
        return rc;
    sluice_limit_track_changes(lim, 1);
    rc = sluice_limit_backoff(lim, "k", 1, SEC, T0, &slot);
    if (rc == SLUICE_OK) {
        int64_t permits, since;

        assert_int_equal(slot, T0 + SEC);
        assert_int_equal(sluice_limit_key_rate(lim, "k", 1, T0, &permits, &since), SLUICE_OK);
        assert_int_equal(permits, 5);
    } else {
        assert_true(would_grant(lim, 1, T0)); /* nothing held back */
    }
    sluice_limit_free(lim);
    return rc;
}

static void test_backoff_oom(void **unused)
{
    (void)unused;
    assert_true(oom_sweep(oom_backoff, NULL, 1000) > 1);
}

/* Only a rate limit has a slot to move. */
static void test_backoff_other_kinds(void **unused)
{
    static const sluice_limit_kind kinds[] = {SLUICE_WINDOW, SLUICE_SLIDING, SLUICE_CONCURRENCY,
                                              SLUICE_QUOTA};

    (void)unused;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        sluice_limit_def def;
        sluice_limit *lim;
        char msg[128];
        int64_t slot = 7;

        sluice_limit_def_init(&def, kinds[i]);
        def.limit = 5;
        def.period_ns = SEC;
        if (kinds[i] == SLUICE_QUOTA) {
            def.period_ns = 0;
            def.calendar = SLUICE_CAL_DAY;
        }
        if (kinds[i] == SLUICE_CONCURRENCY)
            def.period_ns = 0;
        assert_int_equal(sluice_limit_new(&def, &lim, msg, sizeof msg), SLUICE_OK);
        assert_int_equal(sluice_limit_backoff(lim, "k", 1, SEC, T0, &slot), SLUICE_EINVAL);
        assert_int_equal(slot, 0);
        sluice_limit_free(lim);
    }
}

/* Random limits (fractional intervals included), random histories, random waits: after a
 * backoff of w at now, one unit is denied at every probed time before max(now + w, the key's
 * own slot) and granted exactly at it, and the slot returned is that time. */
static void test_backoff_property(void **unused)
{
    (void)unused;
    for (uint64_t seed = 1; seed <= 400; seed++) {
        test_rng rng;
        sluice_limit *lim;
        int64_t permits, period, burst, now = T0, wait, slot, before;

        rng_seed(&rng, seed);
        permits = rng_range(&rng, 1, 50);
        period = rng_range(&rng, 1, 2000) * (rng_range(&rng, 0, 1) ? MS : 7);
        burst = rng_range(&rng, 1, 3 * permits);
        lim = rate_limit(permits, period, burst);
        for (int64_t i = rng_range(&rng, 0, 20); i > 0; i--) {
            sluice_decision d;

            assert_int_equal(
                sluice_limit_decide(lim, "k", 1, rng_range(&rng, 1, burst), now, 0, &d), SLUICE_OK);
            now += rng_range(&rng, 0, period);
        }
        /* The key's own earliest slot for one unit before the backoff. */
        assert_int_equal(sluice_limit_estimate(lim, "k", 1, 1, now, &before), SLUICE_OK);
        wait = rng_range(&rng, 0, 3) == 0 ? 0 : rng_range(&rng, 1, 5 * period);
        assert_int_equal(sluice_limit_backoff(lim, "k", 1, wait, now, &slot), SLUICE_OK);
        assert_int_equal(slot, before > now + wait ? before : now + wait);
        assert_true(would_grant(lim, 1, slot));
        if (slot > now) {
            assert_false(would_grant(lim, 1, slot - 1));
            for (int i = 0; i < 8; i++)
                assert_false(would_grant(lim, 1, rng_range(&rng, now, slot - 1)));
        }
        sluice_limit_free(lim);
    }
}

typedef struct saved {
    unsigned char blob[SLUICE_KEY_STATE_MAX];
    size_t len, n;
} saved;

static int save_one(const char *key, size_t keylen, const void *state, size_t len, void *arg)
{
    saved *s = arg;

    assert_int_equal(keylen, 1);
    assert_memory_equal(key, "k", 1);
    assert_non_null(state);
    assert_true(len <= sizeof s->blob);
    memcpy(s->blob, state, len);
    s->len = len;
    s->n++;
    return 0;
}

/* A backoff is key state: the change feed reports it, and a restart brings it back whole even
 * when it holds the key further ahead than a burst (which an ordinary key never is). */
static void test_backoff_persists(void **unused)
{
    sluice_limit *lim = rate_limit(10, SEC, 10), *again;
    saved s = {.n = 0};

    (void)unused;
    sluice_limit_track_changes(lim, 1);
    assert_int_equal(sluice_limit_backoff(lim, "k", 1, MIN, T0, NULL), SLUICE_OK);
    assert_int_equal(sluice_limit_drain(lim, save_one, &s), SLUICE_OK);
    assert_int_equal(s.n, 1);
    assert_int_equal(s.len, 33);
    again = rate_limit(10, SEC, 10);
    assert_int_equal(sluice_limit_import(again, "k", 1, s.blob, s.len, T0 + SEC), SLUICE_OK);
    assert_false(would_grant(again, 1, T0 + MIN - 1));
    assert_true(would_grant(again, 1, T0 + MIN));
    sluice_limit_free(again);
    /* A clock that went back while down: the key waits no longer than it did when saved. */
    again = rate_limit(10, SEC, 10);
    assert_int_equal(sluice_limit_import(again, "k", 1, s.blob, s.len, T0 - 3600 * SEC), SLUICE_OK);
    assert_false(would_grant(again, 1, T0 - 3600 * SEC + MIN - 1));
    assert_true(would_grant(again, 1, T0 - 3600 * SEC + MIN));
    sluice_limit_free(again);
    /* A key within its burst keeps the short blob. */
    s.n = 0;
    assert_int_equal(sluice_limit_backoff(lim, "k", 1, 0, T0 + 2 * MIN, NULL), SLUICE_OK);
    assert_int_equal(sluice_limit_drain(lim, save_one, &s), SLUICE_OK);
    assert_int_equal(s.len, 25);
    sluice_limit_free(lim);
}

/* TASK.FAIL ... RETRY_AFTER: the upstream refuses the key, not only the task, so the other task
 * on the same key waits as long; a task on another key does not. */
static void test_fail_retry_after_backs_off_links(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    const char *lims[] = {"api", NULL};
    sluice_delivery out[4];
    uint64_t a, b, c;

    (void)unused;
    fx_rate(e, "api", 10, SEC, 10, "input.user");
    fx_type(e, "call", lims);
    a = fx_submit(e, "call", "{\"user\":\"ann\"}", T0);
    assert_int_equal(fx_poll(e, T0, 1, out), 1);
    assert_int_equal(out[0].id, a);
    b = fx_submit(e, "call", "{\"user\":\"ann\"}", T0);
    c = fx_submit(e, "call", "{\"user\":\"bob\"}", T0);
    assert_int_equal(sluice_engine_fail_retry_after(e, a, 2 * SEC, "429", T0), SLUICE_OK);
    assert_int_equal(fx_poll(e, T0, 4, out), 1);
    assert_int_equal(out[0].id, c);
    assert_int_equal(fx_poll(e, T0 + 2 * SEC - 1, 4, out), 0);
    /* At the time asked, one unit of the key: the first of the two in line; the other a T
     * later. */
    assert_int_equal(fx_poll(e, T0 + 2 * SEC, 4, out), 1);
    assert_int_equal(fx_poll(e, T0 + 2 * SEC + 100 * MS - 1, 4, out), 0);
    assert_int_equal(fx_poll(e, T0 + 2 * SEC + 100 * MS, 4, out), 1);
    (void)b;
    sluice_engine_free(e);
}

static sluice_limit *adaptive_limit(int64_t permits, int64_t period_ns, int64_t burst, int64_t num,
                                    int64_t den, int64_t pct, int64_t every_ns, int64_t floor,
                                    int64_t floor_period_ns)
{
    sluice_limit_def def;
    sluice_limit *lim;
    char msg[160];

    sluice_limit_def_init(&def, SLUICE_RATE);
    def.limit = permits;
    def.period_ns = period_ns;
    def.burst = burst;
    def.decrease_num = num;
    def.decrease_den = den;
    def.recover_pct = pct;
    def.recover_ns = every_ns;
    def.floor_permits = floor;
    def.floor_period_ns = floor_period_ns;
    if (sluice_limit_new(&def, &lim, msg, sizeof msg) != SLUICE_OK)
        fail_msg("adaptive limit: %s", msg);
    return lim;
}

static int64_t key_rate(const sluice_limit *lim, int64_t now)
{
    int64_t permits, since;

    assert_int_equal(sluice_limit_key_rate(lim, "k", 1, now, &permits, &since), SLUICE_OK);
    return permits;
}

/* 20/1s, halved on each 429 down to 5/1s, regaining 10% (2/s) a minute. */
static void test_adaptive_worked_example(void **unused)
{
    sluice_limit *lim = adaptive_limit(20, SEC, 1, 5, 10, 10, MIN, 5, SEC);
    sluice_decision d;
    int64_t since;

    (void)unused;
    assert_int_equal(key_rate(lim, T0), 20);
    assert_int_equal(sluice_limit_backoff(lim, "k", 1, 0, T0, NULL), SLUICE_OK);
    assert_int_equal(key_rate(lim, T0), 10);
    /* Paced at the effective rate: 100 ms apart, not 50. */
    assert_int_equal(sluice_limit_decide(lim, "k", 1, 1, T0, 0, &d), SLUICE_OK);
    assert_true(d.allowed);
    assert_int_equal(sluice_limit_decide(lim, "k", 1, 1, T0 + 50 * MS, 0, &d), SLUICE_OK);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, 50 * MS);
    assert_int_equal(sluice_limit_backoff(lim, "k", 1, 0, T0 + SEC, NULL), SLUICE_OK);
    assert_int_equal(key_rate(lim, T0 + SEC), 5);
    assert_int_equal(sluice_limit_backoff(lim, "k", 1, 0, T0 + 2 * SEC, NULL), SLUICE_OK);
    assert_int_equal(key_rate(lim, T0 + 2 * SEC), 5); /* the floor */
    assert_int_equal(sluice_limit_key_rate(lim, "k", 1, T0 + 2 * SEC, &d.limit, &since), SLUICE_OK);
    assert_int_equal(since, T0 + 2 * SEC);
    assert_int_equal(key_rate(lim, T0 + 2 * SEC + MIN - 1), 5);
    assert_int_equal(key_rate(lim, T0 + 2 * SEC + MIN), 7);
    assert_int_equal(key_rate(lim, T0 + 2 * SEC + 7 * MIN), 19);
    assert_int_equal(key_rate(lim, T0 + 2 * SEC + 8 * MIN), 20); /* never above */
    assert_int_equal(key_rate(lim, T0 + 2 * SEC + 80 * MIN), 20);
    /* Another key, and a limit that is not adaptive, answer the configured rate. */
    {
        int64_t permits;
        sluice_limit *plain = rate_limit(20, SEC, 1);

        assert_int_equal(sluice_limit_key_rate(lim, "j", 1, T0, &permits, &since), SLUICE_OK);
        assert_int_equal(permits, 20);
        assert_int_equal(sluice_limit_backoff(plain, "k", 1, 0, T0, NULL), SLUICE_OK);
        assert_int_equal(key_rate(plain, T0), 20);
        sluice_limit_free(plain);
    }
    /* A key back at its rate and idle is forgotten; one below it is not. */
    assert_int_equal(sluice_limit_backoff(lim, "k", 1, 0, T0 + 100 * MIN, NULL), SLUICE_OK);
    assert_int_equal(sluice_limit_sweep(lim, T0 + 101 * MIN, 100), 0);
    assert_int_equal(sluice_limit_sweep(lim, T0 + 200 * MIN, 100), 1);
    sluice_limit_free(lim);
}

static void test_adaptive_validation(void **unused)
{
    sluice_limit_def def;
    char msg[160];

    (void)unused;
    sluice_limit_def_init(&def, SLUICE_RATE);
    def.limit = 10;
    def.period_ns = SEC;
    def.decrease_num = 5;
    def.decrease_den = 10;
    def.recover_pct = 10;
    def.recover_ns = MIN;
    def.floor_permits = 1;
    def.floor_period_ns = SEC;
    assert_int_equal(sluice_limit_def_validate(&def, msg, sizeof msg), SLUICE_OK);
    def.floor_permits = 11;
    assert_int_equal(sluice_limit_def_validate(&def, msg, sizeof msg), SLUICE_EINVAL);
    assert_non_null(strstr(msg, "above the limit's rate"));
    def.floor_permits = 1;
    def.decrease_num = 10;
    assert_int_equal(sluice_limit_def_validate(&def, msg, sizeof msg), SLUICE_EINVAL);
    def.decrease_num = 1;
    def.decrease_den = 3; /* not a decimal: the spec could not write it back */
    assert_int_equal(sluice_limit_def_validate(&def, msg, sizeof msg), SLUICE_EINVAL);
    def.decrease_den = 10;
    def.recover_pct = 0;
    assert_int_equal(sluice_limit_def_validate(&def, msg, sizeof msg), SLUICE_EINVAL);
    def.recover_pct = 10;
    def.recover_ns = 0;
    assert_int_equal(sluice_limit_def_validate(&def, msg, sizeof msg), SLUICE_EINVAL);
    def.recover_ns = MIN;
    def.kind = SLUICE_WINDOW;
    assert_int_equal(sluice_limit_def_validate(&def, msg, sizeof msg), SLUICE_EINVAL);
    assert_non_null(strstr(msg, "rate limits only"));
}

/* The spec grammar: each setting, defaults for those left out, the canonical form written back
 * and parsed again to the same definition. */
static void test_adaptive_spec(void **unused)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"rate=20/1s,decrease=0.5,recover=10%/1m,floor=5/1s",
         "rate=20/1s,decrease=0.5,recover=10%/1m,floor=5/1s"},
        {"rate=20/1s,decrease=25%", "rate=20/1s,decrease=0.25,recover=10%/1m,floor=1/1s"},
        {"rate=20/1s,floor=2/s", "rate=20/1s,decrease=0.5,recover=10%/1m,floor=2/1s"},
        {"rate=600/1m,recover=5%/30s,decrease=0.125",
         "rate=600/1m,decrease=0.125,recover=5%/30s,floor=1/1m"},
    };
    static const char *const bad[] = {
        "rate=20/1s,decrease=1.5",
        "rate=20/1s,decrease=0",
        "rate=20/1s,decrease=0.1234567",
        "rate=20/1s,recover=10/1m",
        "rate=20/1s,recover=0%/1m",
        "rate=20/1s,recover=10%",
        "rate=20/1s,floor=0/1s",
        "rate=20/1s,floor=21/1s",
        "window=20/1s,decrease=0.5",
        "rate=20/1s,recover=101%/1m",
        "rate=20/1s,decrease=0.5,decrease=0.5",
    };
    sluice_limit_def def, again;
    char msg[256], text[SLUICE_SPEC_MAX_LEN];

    (void)unused;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (sluice_spec_parse_limit(cases[i].in, &def, msg, sizeof msg) != 0)
            fail_msg("%s: %s", cases[i].in, msg);
        assert_int_equal(sluice_spec_format_limit(&def, text, sizeof text), 0);
        assert_string_equal(text, cases[i].out);
        assert_int_equal(sluice_spec_parse_limit(text, &again, msg, sizeof msg), 0);
        assert_memory_equal(&def, &again, sizeof def);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (sluice_spec_parse_limit(bad[i], &def, msg, sizeof msg) == 0)
            fail_msg("%s was accepted", bad[i]);
        assert_true(strlen(msg) > 0);
    }
}

/* The reference: the rate computed from the last decrease alone. */
typedef struct aimd_model {
    int64_t permits, floor, num, den, step, every;
    int64_t eff, since; /* eff 0: never decreased */
} aimd_model;

static int64_t model_rate(const aimd_model *m, int64_t t)
{
    int64_t r;

    if (m->eff == 0)
        return m->permits;
    r = m->eff + m->step * ((t - m->since) / m->every);
    return r > m->permits ? m->permits : r;
}

static void model_decrease(aimd_model *m, int64_t t)
{
    int64_t r = model_rate(m, t) * m->num / m->den;

    m->eff = r < m->floor ? m->floor : r;
    m->since = t;
}

typedef struct restore {
    sluice_limit *to;
    int64_t now;
} restore;

static int restore_one(const char *key, size_t keylen, const void *state, size_t len, void *arg)
{
    restore *r = arg;

    if (!state)
        return 0;
    return sluice_limit_import(r->to, key, keylen, state, len, r->now) == SLUICE_OK ? 0 : -1;
}

static void test_adaptive_property(void **unused)
{
    (void)unused;
    for (uint64_t seed = 1; seed <= 300; seed++) {
        test_rng rng;
        aimd_model m;
        sluice_limit *lim;
        int64_t period, burst, now = T0, floor_permits;

        rng_seed(&rng, seed);
        memset(&m, 0, sizeof m);
        m.permits = rng_range(&rng, 2, 200);
        period = rng_range(&rng, 1, 3) * SEC;
        burst = rng_range(&rng, 1, m.permits);
        m.den = rng_range(&rng, 0, 1) ? 10 : 100;
        m.num = rng_range(&rng, 1, m.den - 1);
        floor_permits = rng_range(&rng, 1, m.permits);
        m.floor = floor_permits; /* floor given per the same period */
        m.every = rng_range(&rng, 1, 60) * SEC;
        m.step = (m.permits * rng_range(&rng, 1, 50) + 99) / 100;
        lim = adaptive_limit(m.permits, period, burst, m.num, m.den, (m.step * 100) / m.permits,
                             m.every, floor_permits, period);
        /* the step the limit derives from that percentage may be smaller than asked: use it */
        m.step = (m.permits * ((m.step * 100) / m.permits) + 99) / 100;
        sluice_limit_track_changes(lim, 1);
        for (int i = 0; i < 300; i++) {
            sluice_decision d;
            int64_t r;

            switch (rng_range(&rng, 0, 9)) {
            case 0:
            case 1:
                assert_int_equal(
                    sluice_limit_backoff(lim, "k", 1, rng_range(&rng, 0, SEC), now, NULL),
                    SLUICE_OK);
                model_decrease(&m, now);
                break;
            case 2: { /* a restart: the key travels through drain and import */
                sluice_limit *again =
                    adaptive_limit(m.permits, period, burst, m.num, m.den,
                                   (m.step * 100) / m.permits, m.every, floor_permits, period);

                assert_int_equal(sluice_limit_decide(again, "z", 1, 1, now, 0, &d), SLUICE_OK);
                restore rs = {again, now};

                /* Tracking first, so that the restored key is reported by the next drain as a
                 * store that keeps it would still hold it. */
                sluice_limit_track_changes(again, 1);
                assert_int_equal(sluice_limit_drain(lim, restore_one, &rs), SLUICE_OK);
                sluice_limit_free(lim);
                lim = again;
                break;
            }
            case 3:
                sluice_limit_sweep(lim, now, 16);
                break;
            default:
                assert_int_equal(sluice_limit_decide(lim, "k", 1, 1, now,
                                                     rng_range(&rng, 0, 1) ? SLUICE_PEEK : 0, &d),
                                 SLUICE_OK);
            }
            r = key_rate(lim, now);
            if (r != model_rate(&m, now))
                fail_msg("seed %llu step %d: rate %lld, model %lld", (unsigned long long)seed, i,
                         (long long)r, (long long)model_rate(&m, now));
            assert_true(r >= m.floor && r <= m.permits);
            now += rng_range(&rng, 0, 3) == 0 ? rng_range(&rng, 0, 10 * m.every)
                                              : rng_range(&rng, 0, SEC);
        }
        sluice_limit_free(lim);
    }
}

/* The keys whose rate is below the configured one at `now`, read one by one. */
static size_t true_slowed(const sluice_limit *lim, int nkeys, int64_t now)
{
    size_t n = 0;

    for (int k = 0; k < nkeys; k++) {
        char key[2] = {(char)('a' + k), 0};
        int64_t permits, since;

        assert_int_equal(sluice_limit_key_rate(lim, key, 1, now, &permits, &since), SLUICE_OK);
        n += permits < sluice_limit_get_def(lim)->limit;
    }
    return n;
}

static size_t stats_slowed(const sluice_limit *lim)
{
    sluice_limit_stats st;

    sluice_limit_get_stats(lim, &st);
    return st.slowed;
}

/* stats.slowed, the counter INFO's keys_slowed reads: random backoffs, decisions, peeks,
 * settlements, reservations, resets, partial sweeps and restarts on a few keys. It never
 * under-states the keys below their rate, never counts more keys than are tracked, and a sweep
 * over the whole table makes it exact. */
static void test_adaptive_slowed_count(void **unused)
{
    enum { NKEYS = 6 };

    (void)unused;
    for (uint64_t seed = 1; seed <= 200; seed++) {
        sluice_limit *lim = adaptive_limit(20, SEC, 5, 5, 10, 25, 10 * SEC, 2, SEC);
        test_rng rng;
        int64_t now = T0;
        uint64_t id = 0;

        rng_seed(&rng, seed);
        /* Every key is recorded from the start, so each restart's drain carries all of them. */
        sluice_limit_track_changes(lim, 1);
        for (int i = 0; i < 200; i++) {
            char key[2] = {(char)('a' + rng_range(&rng, 0, NKEYS - 1)), 0};
            sluice_limit_stats st;
            sluice_decision d;
            int64_t slot;
            size_t exact;

            switch (rng_range(&rng, 0, 9)) {
            case 0:
            case 1:
                assert_int_equal(
                    sluice_limit_backoff(lim, key, 1, rng_range(&rng, 0, SEC), now, NULL),
                    SLUICE_OK);
                break;
            case 2:
                sluice_limit_sweep(lim, now, (size_t)rng_range(&rng, 1, 3));
                break;
            case 3:
                (void)sluice_limit_reset(lim, rng_range(&rng, 0, 4) ? key : NULL, 1);
                break;
            case 4: { /* a restart: every key travels through drain and import */
                sluice_limit *again = adaptive_limit(20, SEC, 5, 5, 10, 25, 10 * SEC, 2, SEC);
                restore rs = {again, now};

                sluice_limit_track_changes(again, 1);
                assert_int_equal(sluice_limit_drain(lim, restore_one, &rs), SLUICE_OK);
                sluice_limit_free(lim);
                lim = again;
                break;
            }
            case 5:
                (void)sluice_limit_settle(lim, key, 1, now, 2, rng_range(&rng, 0, 4), now);
                break;
            case 6:
                (void)sluice_limit_reserve(lim, key, 1, ++id, 1, now, &slot);
                break;
            default:
                assert_int_equal(sluice_limit_decide(lim, key, 1, 1, now,
                                                     rng_range(&rng, 0, 1) ? SLUICE_PEEK : 0, &d),
                                 SLUICE_OK);
            }
            exact = true_slowed(lim, NKEYS, now);
            sluice_limit_get_stats(lim, &st);
            if (st.slowed < exact || st.slowed > st.keys)
                fail_msg("seed %llu step %d: slowed %zu, exact %zu, keys %zu",
                         (unsigned long long)seed, i, st.slowed, exact, st.keys);
            now +=
                rng_range(&rng, 0, 3) == 0 ? rng_range(&rng, 0, 60 * SEC) : rng_range(&rng, 0, SEC);
        }
        sluice_limit_sweep(lim, now, 1000);
        assert_int_equal(stats_slowed(lim), true_slowed(lim, NKEYS, now));
        sluice_limit_free(lim);
    }
    {
        /* A key that recovered while nothing touched it, held far beyond that by its backoff:
         * counted until the sweep visits it, which keeps it (its TAT is ahead) but counts it
         * no more. */
        sluice_limit *lim = adaptive_limit(20, SEC, 5, 5, 10, 25, 10 * SEC, 2, SEC);

        assert_int_equal(sluice_limit_backoff(lim, "a", 1, 10 * MIN, T0, NULL), SLUICE_OK);
        assert_int_equal(stats_slowed(lim), 1);
        assert_int_equal(true_slowed(lim, 1, T0 + MIN), 0);
        assert_int_equal(sluice_limit_sweep(lim, T0 + MIN, 1000), 0);
        assert_int_equal(stats_slowed(lim), 0);
        assert_int_equal(sluice_limit_reset(lim, NULL, 0), SLUICE_OK);
        assert_int_equal(sluice_limit_backoff(lim, "a", 1, 0, T0 + MIN, NULL), SLUICE_OK);
        assert_int_equal(sluice_limit_backoff(lim, "b", 1, 0, T0 + MIN, NULL), SLUICE_OK);
        assert_int_equal(stats_slowed(lim), 2);
        assert_int_equal(sluice_limit_reset(lim, NULL, 0), SLUICE_OK);
        assert_int_equal(stats_slowed(lim), 0);
        sluice_limit_free(lim);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backoff_holds_key),
        cmocka_unit_test(test_backoff_other_kinds),
        cmocka_unit_test(test_backoff_oom),
        cmocka_unit_test(test_backoff_property),
        cmocka_unit_test(test_backoff_persists),
        cmocka_unit_test(test_fail_retry_after_backs_off_links),
        cmocka_unit_test(test_adaptive_worked_example),
        cmocka_unit_test(test_adaptive_validation),
        cmocka_unit_test(test_adaptive_spec),
        cmocka_unit_test(test_adaptive_property),
        cmocka_unit_test(test_adaptive_slowed_count),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
