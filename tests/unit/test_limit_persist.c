/* SPDX-License-Identifier: MIT */
/*
 * Tests of saving and restoring key state (sluice_limit_track_changes, _has_changes, _drain,
 * _import): a key that spent its budget before a restart has not got it back after, for every
 * kind; states that carry no information are dropped; a clock that went back while down locks
 * nothing out; blobs from another definition are converted or refused; restored limits decide
 * exactly as the originals would have; has_changes tells whether a drain has anything to say.
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
#define MIN (60 * SEC)
#define MS  SLUICE_NS_PER_MS
#define T0  (INT64_C(1763078400) * SEC) /* midnight UTC */

/* What a store would hold: the last blob reported for each key. */
#define SAVED_MAX 256
typedef struct saved {
    char key[64];
    size_t keylen;
    unsigned char blob[4096];
    size_t len; /* 0: deleted */
} saved;

typedef struct store_mem {
    saved rows[SAVED_MAX];
    size_t n;
    int fail_after; /* > 0: the fail_after-th put fails */
    int puts;
} store_mem;

static int mem_put(const char *key, size_t keylen, const void *state, size_t len, void *arg)
{
    store_mem *m = arg;
    saved *row = NULL;

    if (m->fail_after > 0 && ++m->puts >= m->fail_after)
        return SLUICE_EBUSY;
    assert_true(keylen < sizeof row->key && len <= sizeof row->blob);
    for (size_t i = 0; i < m->n; i++)
        if (m->rows[i].keylen == keylen && memcmp(m->rows[i].key, key, keylen) == 0)
            row = &m->rows[i];
    if (!row) {
        assert_true(m->n < SAVED_MAX);
        row = &m->rows[m->n++];
        memcpy(row->key, key, keylen);
        row->keylen = keylen;
    }
    row->len = len;
    if (len)
        memcpy(row->blob, state, len);
    return 0;
}

static size_t live_rows(const store_mem *m)
{
    size_t n = 0;

    for (size_t i = 0; i < m->n; i++)
        n += m->rows[i].len > 0;
    return n;
}

static sluice_limit *make(sluice_limit_kind kind, int64_t limit, int64_t period_ns, int64_t burst)
{
    sluice_limit_def def;
    sluice_limit *lim;
    char msg[128];

    sluice_limit_def_init(&def, kind);
    def.limit = limit;
    def.period_ns = period_ns;
    def.burst = burst;
    if (kind == SLUICE_QUOTA)
        def.calendar = SLUICE_CAL_DAY;
    assert_int_equal(sluice_limit_new(&def, &lim, msg, sizeof msg), SLUICE_OK);
    return lim;
}

/* Restores every saved row into lim at now. */
static void restore(sluice_limit *lim, const store_mem *m, int64_t now)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->rows[i].len)
            assert_int_equal(sluice_limit_import(lim, m->rows[i].key, m->rows[i].keylen,
                                                 m->rows[i].blob, m->rows[i].len, now),
                             SLUICE_OK);
}

/* The restart-burst test, for every kind that keeps state: spend the budget, "restart" (a new
 * limit restored from the drained blobs), and the next grant still waits for its slot. */
static void test_restart_keeps_spent_budget(void **unused)
{
    static const struct {
        sluice_limit_kind kind;
        int64_t limit, period, burst, spend, wait_ns;
    } cases[] = {
        /* The restart takes a millisecond: every wait is its slot minus that. */
        {SLUICE_RATE, 15, MIN, 15, 15, 4 * SEC - MS},      /* seed 003: next at +4 s */
        {SLUICE_RATE, 3, SEC, 1, 1, 333333334 - MS},       /* fractional T, rounded up */
        {SLUICE_WINDOW, 12, 5 * SEC, 0, 12, 5 * SEC - MS}, /* the rest of the window */
        {SLUICE_SLIDING, 20, MIN, 0, 20, MIN - MS},
        {SLUICE_QUOTA, 100, 0, 0, 100, 86400 * SEC - MS}, /* the next day */
    };

    (void)unused;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sluice_limit *before = make(cases[c].kind, cases[c].limit, cases[c].period, cases[c].burst);
        sluice_limit *after = make(cases[c].kind, cases[c].limit, cases[c].period, cases[c].burst);
        static store_mem m;
        sluice_decision d;

        memset(&m, 0, sizeof m);
        sluice_limit_track_changes(before, 1);
        for (int64_t i = 0; i < cases[c].spend; i++)
            assert_int_equal(sluice_limit_decide(before, "tenant", 6, 1, T0, 0, &d), SLUICE_OK);
        assert_int_equal(sluice_limit_drain(before, mem_put, &m), SLUICE_OK);
        assert_int_equal(live_rows(&m), 1);
        restore(after, &m, T0 + MS);
        assert_int_equal(sluice_limit_decide(after, "tenant", 6, 1, T0 + MS, 0, &d), SLUICE_OK);
        if (d.allowed || d.retry_after_ns != cases[c].wait_ns)
            fail_msg("case %zu: allowed %d, retry_after %lld", c, d.allowed,
                     (long long)d.retry_after_ns);
        /* A key never charged before the restart is as new. */
        assert_int_equal(sluice_limit_decide(after, "other", 5, 1, T0 + MS, 0, &d), SLUICE_OK);
        assert_true(d.allowed);
        sluice_limit_free(before);
        sluice_limit_free(after);
    }
}

/* Restored limits answer exactly as the originals: random traffic on both after the restore. */
static void test_restored_decides_the_same(void **unused)
{
    sluice_limit_kind kinds[] = {SLUICE_RATE, SLUICE_WINDOW, SLUICE_SLIDING, SLUICE_QUOTA};
    test_rng rng;

    (void)unused;
    rng_seed(&rng, 99);
    for (size_t k = 0; k < 4; k++) {
        for (int round = 0; round < 20; round++) {
            int64_t limit = rng_range(&rng, 1, 20), period = rng_range(&rng, 1, 30) * SEC;
            sluice_limit *a = make(kinds[k], limit, period, 0);
            sluice_limit *b = make(kinds[k], limit, period, 0);
            static store_mem m;
            int64_t now = T0;
            char key[8];

            memset(&m, 0, sizeof m);
            sluice_limit_track_changes(a, 1);
            for (int i = 0; i < 200; i++) {
                sluice_decision d;

                snprintf(key, sizeof key, "k%d", (int)rng_range(&rng, 0, 5));
                sluice_limit_decide(a, key, strlen(key), rng_range(&rng, 1, 3), now, 0, &d);
                now += rng_range(&rng, 0, period / 4);
            }
            assert_int_equal(sluice_limit_drain(a, mem_put, &m), SLUICE_OK);
            restore(b, &m, now);
            for (int i = 0; i < 200; i++) {
                sluice_decision da, db;
                int64_t units = rng_range(&rng, 1, 3);

                snprintf(key, sizeof key, "k%d", (int)rng_range(&rng, 0, 5));
                assert_int_equal(sluice_limit_decide(a, key, strlen(key), units, now, 0, &da),
                                 SLUICE_OK);
                assert_int_equal(sluice_limit_decide(b, key, strlen(key), units, now, 0, &db),
                                 SLUICE_OK);
                assert_int_equal(da.allowed, db.allowed);
                assert_int_equal(da.retry_after_ns, db.retry_after_ns);
                assert_int_equal(da.remaining, db.remaining);
                now += rng_range(&rng, 0, period / 4);
            }
            sluice_limit_free(a);
            sluice_limit_free(b);
        }
    }
}

/* States that carry no information are not restored, and a rate key restored after the clock
 * went back while the process was down waits at most one full burst. */
static void test_stale_and_clock_back(void **unused)
{
    sluice_limit *rate = make(SLUICE_RATE, 15, MIN, 15);
    sluice_limit *win = make(SLUICE_WINDOW, 12, 5 * SEC, 0);
    sluice_limit *quota = make(SLUICE_QUOTA, 100, 0, 0);
    static store_mem mr, mw, mq;
    sluice_limit *fresh;
    sluice_limit_stats st;
    sluice_decision d;

    (void)unused;
    memset(&mr, 0, sizeof mr);
    memset(&mw, 0, sizeof mw);
    memset(&mq, 0, sizeof mq);
    sluice_limit_track_changes(rate, 1);
    sluice_limit_track_changes(win, 1);
    sluice_limit_track_changes(quota, 1);
    for (int i = 0; i < 15; i++)
        sluice_limit_decide(rate, "k", 1, 1, T0, 0, &d);
    sluice_limit_decide(win, "k", 1, 5, T0, 0, &d);
    sluice_limit_decide(quota, "k", 1, 50, T0, 0, &d);
    assert_int_equal(sluice_limit_drain(rate, mem_put, &mr), SLUICE_OK);
    assert_int_equal(sluice_limit_drain(win, mem_put, &mw), SLUICE_OK);
    assert_int_equal(sluice_limit_drain(quota, mem_put, &mq), SLUICE_OK);

    /* Much later: nothing left to restore. */
    fresh = make(SLUICE_RATE, 15, MIN, 15);
    restore(fresh, &mr, T0 + 2 * MIN);
    sluice_limit_get_stats(fresh, &st);
    assert_int_equal(st.keys, 0);
    sluice_limit_free(fresh);
    fresh = make(SLUICE_WINDOW, 12, 5 * SEC, 0);
    restore(fresh, &mw, T0 + 5 * SEC);
    sluice_limit_get_stats(fresh, &st);
    assert_int_equal(st.keys, 0);
    sluice_limit_free(fresh);
    fresh = make(SLUICE_QUOTA, 100, 0, 0);
    restore(fresh, &mq, T0 + 86400 * SEC);
    sluice_limit_get_stats(fresh, &st);
    assert_int_equal(st.keys, 0);
    sluice_limit_free(fresh);

    /* The clock went back a day while down: the TAT is a day and a minute ahead; restored, the
     * key waits no more than a full burst would take to refill from empty (4 s for one). */
    fresh = make(SLUICE_RATE, 15, MIN, 15);
    restore(fresh, &mr, T0 - 86400 * SEC);
    assert_int_equal(sluice_limit_decide(fresh, "k", 1, 1, T0 - 86400 * SEC, 0, &d), SLUICE_OK);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, 4 * SEC);
    sluice_limit_free(fresh);

    sluice_limit_free(rate);
    sluice_limit_free(win);
    sluice_limit_free(quota);
}

/* Blobs of another kind, malformed ones, and a rate blob from a definition with other permits. */
static void test_foreign_blobs(void **unused)
{
    sluice_limit *rate3 = make(SLUICE_RATE, 3, SEC, 3);
    sluice_limit *rate4 = make(SLUICE_RATE, 4, SEC, 4);
    sluice_limit *win = make(SLUICE_WINDOW, 3, SEC, 0);
    static store_mem m;
    sluice_decision d;
    unsigned char junk[25] = {'R'};

    (void)unused;
    memset(&m, 0, sizeof m);
    sluice_limit_track_changes(rate3, 1);
    sluice_limit_decide(rate3, "k", 1, 2, T0, 0, &d); /* tat = T0 + 666666666 2/3 */
    assert_int_equal(sluice_limit_drain(rate3, mem_put, &m), SLUICE_OK);
    assert_int_equal(sluice_limit_import(win, "k", 1, m.rows[0].blob, m.rows[0].len, T0),
                     SLUICE_EINVAL);
    assert_int_equal(sluice_limit_import(rate4, "k", 1, m.rows[0].blob, m.rows[0].len - 1, T0),
                     SLUICE_EINVAL);
    assert_int_equal(sluice_limit_import(rate4, "k", 1, junk, sizeof junk, T0), SLUICE_EINVAL);
    /* 4/s: T = 250 ms, burst*T = 1 s. The old TAT (rounded up to T0 + 666666667) leaves 1 unit:
     * 1 s - 666666667 ns = 333333333 ns, one T fits. */
    assert_int_equal(sluice_limit_import(rate4, "k", 1, m.rows[0].blob, m.rows[0].len, T0),
                     SLUICE_OK);
    assert_int_equal(sluice_limit_decide(rate4, "k", 1, 1, T0, 0, &d), SLUICE_OK);
    assert_true(d.allowed);
    assert_int_equal(sluice_limit_decide(rate4, "k", 1, 1, T0, 0, &d), SLUICE_OK);
    assert_false(d.allowed);
    sluice_limit_free(rate3);
    sluice_limit_free(rate4);
    sluice_limit_free(win);
}

/* A reset reports the keys it forgot as deletions; a failing store keeps every key recorded. */
static void test_reset_and_failing_store(void **unused)
{
    sluice_limit *lim = make(SLUICE_RATE, 10, SEC, 0);
    static store_mem m;
    sluice_decision d;

    (void)unused;
    memset(&m, 0, sizeof m);
    sluice_limit_track_changes(lim, 1);
    sluice_limit_decide(lim, "a", 1, 5, T0, 0, &d);
    sluice_limit_decide(lim, "b", 1, 5, T0, 0, &d);
    m.fail_after = 2;
    assert_int_equal(sluice_limit_drain(lim, mem_put, &m), SLUICE_EBUSY);
    m.fail_after = 0;
    assert_int_equal(sluice_limit_drain(lim, mem_put, &m), SLUICE_OK);
    assert_int_equal(live_rows(&m), 2);
    assert_int_equal(sluice_limit_drain(lim, mem_put, &m), SLUICE_OK); /* nothing new */
    assert_int_equal(sluice_limit_reset(lim, NULL, 0), SLUICE_OK);
    assert_int_equal(sluice_limit_drain(lim, mem_put, &m), SLUICE_OK);
    assert_int_equal(live_rows(&m), 0);
    sluice_limit_free(lim);
}

/* sluice_limit_has_changes says whether a drain would report anything: after a charge and after
 * a reset, not after a drain, and never while changes are not tracked. */
static void test_has_changes(void **unused)
{
    sluice_limit *lim = make(SLUICE_RATE, 10, SEC, 0);
    static store_mem m;
    sluice_decision d;

    (void)unused;
    memset(&m, 0, sizeof m);
    sluice_limit_decide(lim, "a", 1, 5, T0, 0, &d);
    assert_int_equal(sluice_limit_has_changes(lim), 0); /* not tracked */
    sluice_limit_track_changes(lim, 1);
    assert_int_equal(sluice_limit_has_changes(lim), 0);
    sluice_limit_decide(lim, "a", 1, 1, T0, 0, &d);
    assert_int_equal(sluice_limit_has_changes(lim), 1);
    assert_int_equal(sluice_limit_drain(lim, mem_put, &m), SLUICE_OK);
    assert_int_equal(sluice_limit_has_changes(lim), 0);
    assert_int_equal(sluice_limit_reset(lim, NULL, 0), SLUICE_OK);
    assert_int_equal(sluice_limit_has_changes(lim), 1);
    assert_int_equal(sluice_limit_drain(lim, mem_put, &m), SLUICE_OK);
    assert_int_equal(sluice_limit_has_changes(lim), 0);
    sluice_limit_free(lim);
}

static int oom_drain_import(void *arg)
{
    sluice_limit *a = NULL, *b = NULL;
    static store_mem m;
    sluice_limit_def def;
    sluice_decision d;
    char msg[64];
    int rc;

    (void)arg;
    memset(&m, 0, sizeof m);
    sluice_limit_def_init(&def, SLUICE_SLIDING);
    def.limit = 50;
    def.period_ns = MIN;
    rc = sluice_limit_new(&def, &a, msg, sizeof msg);
    if (rc == SLUICE_OK)
        rc = sluice_limit_new(&def, &b, msg, sizeof msg);
    if (rc == SLUICE_OK) {
        sluice_limit_track_changes(a, 1);
        for (int i = 0; i < 10 && rc == SLUICE_OK; i++)
            rc = sluice_limit_decide(a, i % 2 ? "x" : "y", 1, 1, T0 + i, 0, &d);
    }
    if (rc == SLUICE_OK)
        rc = sluice_limit_drain(a, mem_put, &m);
    for (size_t i = 0; i < m.n && rc == SLUICE_OK; i++)
        rc = sluice_limit_import(b, m.rows[i].key, m.rows[i].keylen, m.rows[i].blob, m.rows[i].len,
                                 T0 + 20);
    sluice_limit_free(a);
    sluice_limit_free(b);
    return rc;
}

static void test_oom(void **unused)
{
    (void)unused;
    assert_true(oom_sweep(oom_drain_import, NULL, 10000) > 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_restart_keeps_spent_budget),
        cmocka_unit_test(test_restored_decides_the_same),
        cmocka_unit_test(test_stale_and_clock_back),
        cmocka_unit_test(test_foreign_blobs),
        cmocka_unit_test(test_reset_and_failing_store),
        cmocka_unit_test(test_has_changes),
        cmocka_unit_test(test_oom),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
