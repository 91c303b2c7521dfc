/* SPDX-License-Identifier: MIT */
/*
 * Tests of the limit object and chains: validation messages, the key table cap and its two
 * overflow policies, SHA-256 replacement of long keys, forgetting idle keys (1M keys), atomic
 * chains (nothing charged on a denial, the latest slot named), and out-of-memory sweeps.
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
#define T0  (INT64_C(1763078400) * SEC)

static sluice_limit *make(sluice_limit_kind kind, int64_t limit, int64_t period_ns)
{
    sluice_limit_def def;
    sluice_limit *lim;
    char msg[128];

    sluice_limit_def_init(&def, kind);
    def.limit = limit;
    def.period_ns = period_ns;
    if (kind == SLUICE_QUOTA)
        def.calendar = SLUICE_CAL_DAY;
    assert_int_equal(sluice_limit_new(&def, &lim, msg, sizeof msg), SLUICE_OK);
    return lim;
}

/* One mistake per case, each with the words its message must contain. */
static void test_validation_messages(void **unused)
{
    static const struct {
        sluice_limit_kind kind;
        int64_t limit, period_ns, burst;
        int start_empty;
        sluice_calendar cal;
        size_t max_keys, max_key_len;
        int rc;
        const char *words;
    } cases[] = {
        {SLUICE_RATE, 0, SEC, 0, 0, SLUICE_CAL_NONE, 10, 256, SLUICE_EINVAL, "limit must be"},
        {SLUICE_RATE, -5, SEC, 0, 0, SLUICE_CAL_NONE, 10, 256, SLUICE_EINVAL, "got -5"},
        {SLUICE_RATE, 10, 0, 0, 0, SLUICE_CAL_NONE, 10, 256, SLUICE_EINVAL, "period must be"},
        {SLUICE_RATE, 10, -1, 0, 0, SLUICE_CAL_NONE, 10, 256, SLUICE_EINVAL, "period"},
        {SLUICE_RATE, 10, SEC, -1, 0, SLUICE_CAL_NONE, 10, 256, SLUICE_EINVAL, "burst must be"},
        {SLUICE_WINDOW, 10, SEC, 3, 0, SLUICE_CAL_NONE, 10, 256, SLUICE_EINVAL, "rate limits only"},
        {SLUICE_SLIDING, 10, SEC, 0, 1, SLUICE_CAL_NONE, 10, 256, SLUICE_EINVAL, "start_empty"},
        {SLUICE_SLIDING, 200000, SEC, 0, 0, SLUICE_CAL_NONE, 10, 256, SLUICE_ERANGE, "sliding"},
        {SLUICE_RATE, 10, SEC, 0, 0, SLUICE_CAL_DAY, 10, 256, SLUICE_EINVAL, "quotas only"},
        {SLUICE_RATE, 10, SEC, 0, 0, SLUICE_CAL_NONE, 0, 256, SLUICE_EINVAL, "max_keys"},
        {SLUICE_RATE, 10, SEC, 0, 0, SLUICE_CAL_NONE, 10, 8, SLUICE_EINVAL, "max_key_len"},
        {(sluice_limit_kind)99, 10, SEC, 0, 0, SLUICE_CAL_NONE, 10, 256, SLUICE_EINVAL, "kind"},
    };

    (void)unused;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sluice_limit_def def;
        sluice_limit *lim = (sluice_limit *)&def; /* must be reset to NULL */
        char msg[128];

        sluice_limit_def_init(&def, cases[i].kind);
        def.limit = cases[i].limit;
        def.period_ns = cases[i].period_ns;
        def.burst = cases[i].burst;
        def.start_empty = cases[i].start_empty;
        def.calendar = cases[i].cal;
        def.max_keys = cases[i].max_keys;
        def.max_key_len = cases[i].max_key_len;
        assert_int_equal(sluice_limit_new(&def, &lim, msg, sizeof msg), cases[i].rc);
        assert_null(lim);
        if (!strstr(msg, cases[i].words))
            fail_msg("case %zu: \"%s\" lacks \"%s\"", i, msg, cases[i].words);
    }
}

/* Past max_keys, REFUSE answers EBUSY and ALLOW grants untracked; both are counted. Idle keys
 * are reclaimed first, so a full table of finished keys refuses nothing. */
static void test_key_cap(void **unused)
{
    sluice_limit_def def;
    sluice_limit *lim;
    sluice_limit_stats st;
    sluice_decision d;
    char key[32], msg[128];

    (void)unused;
    sluice_limit_def_init(&def, SLUICE_RATE);
    def.limit = 1;
    def.period_ns = MIN;
    def.max_keys = 100;
    assert_int_equal(sluice_limit_new(&def, &lim, msg, sizeof msg), SLUICE_OK);
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof key, "k%d", i);
        assert_int_equal(sluice_limit_decide(lim, key, strlen(key), 1, T0, 0, &d), SLUICE_OK);
    }
    assert_int_equal(sluice_limit_decide(lim, "new", 3, 1, T0, 0, &d), SLUICE_EBUSY);
    assert_false(d.allowed);
    assert_int_equal(sluice_limit_decide(lim, "k5", 2, 1, T0, 0, &d), SLUICE_OK); /* known key */
    sluice_limit_get_stats(lim, &st);
    assert_int_equal(st.refused, 1);
    assert_int_equal(st.keys, 100);
    assert_int_equal(st.allowed, 100); /* k5's second request was denied, the refusal not counted */
    assert_int_equal(st.denied, 1);
    assert_int_equal(st.units, 100);
    /* A minute later every key is idle: the new key is admitted after reclaiming. */
    assert_int_equal(sluice_limit_decide(lim, "new", 3, 1, T0 + MIN, 0, &d), SLUICE_OK);
    assert_true(d.allowed);
    sluice_limit_get_stats(lim, &st);
    assert_true(st.forgotten > 0);
    sluice_limit_free(lim);

    def.key_overflow = SLUICE_KEYS_ALLOW;
    assert_int_equal(sluice_limit_new(&def, &lim, msg, sizeof msg), SLUICE_OK);
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof key, "k%d", i);
        assert_int_equal(sluice_limit_decide(lim, key, strlen(key), 1, T0, 0, &d), SLUICE_OK);
    }
    for (int i = 0; i < 3; i++) {
        assert_int_equal(sluice_limit_decide(lim, "new", 3, 1, T0, 0, &d), SLUICE_OK);
        assert_true(d.allowed);
        assert_true(d.untracked);
    }
    sluice_limit_get_stats(lim, &st);
    assert_int_equal(st.untracked, 3);
    sluice_limit_free(lim);
}

/* Keys longer than max_key_len are replaced by their SHA-256: two long keys that differ only
 * at the end keep separate budgets, and the table stores 32 bytes, not the long key. */
static void test_long_keys_hashed(void **unused)
{
    sluice_limit *lim = make(SLUICE_RATE, 1, MIN);
    char a[1000], b[1000];
    sluice_decision d;
    sluice_limit_stats st;

    (void)unused;
    memset(a, 'x', sizeof a);
    memcpy(b, a, sizeof b);
    b[sizeof b - 1] = 'y';
    assert_int_equal(sluice_limit_decide(lim, a, sizeof a, 1, T0, 0, &d), SLUICE_OK);
    assert_true(d.allowed);
    assert_int_equal(sluice_limit_decide(lim, b, sizeof b, 1, T0, 0, &d), SLUICE_OK);
    assert_true(d.allowed);
    assert_int_equal(sluice_limit_decide(lim, a, sizeof a, 1, T0, 0, &d), SLUICE_OK);
    assert_false(d.allowed);
    sluice_limit_get_stats(lim, &st);
    assert_int_equal(st.keys, 2);
    assert_int_equal(st.hashed, 3);
    assert_true(st.bytes < 2 * sizeof a);
    assert_int_equal(sluice_limit_reset(lim, a, sizeof a), SLUICE_OK);
    assert_int_equal(sluice_limit_decide(lim, a, sizeof a, 1, T0, 0, &d), SLUICE_OK);
    assert_true(d.allowed);
    sluice_limit_free(lim);
}

/* A million keys, each used once: once idle they are all forgotten and memory is returned to
 * what an empty limit holds (the table may keep its slots). Bytes per key are reported. */
static void test_million_keys_forgotten(void **unused)
{
    sluice_limit *lim = make(SLUICE_RATE, 10, SEC);
    sluice_limit_stats st;
    sluice_decision d;
    char key[32];
    size_t forgotten = 0;

    (void)unused;
    for (int i = 0; i < 1000000; i++) {
        int len = snprintf(key, sizeof key, "tenant:%07d", i);

        assert_int_equal(sluice_limit_decide(lim, key, (size_t)len, 1, T0, 0, &d), SLUICE_OK);
    }
    sluice_limit_get_stats(lim, &st);
    assert_int_equal(st.keys, 1000000);
    print_message("bytes per tracked key (14-byte keys, rate): %zu\n", st.bytes / st.keys);
    /* A 40-byte slot holds the 16-byte state and a key of up to 16 bytes inline; right after
     * a doubling the table is half full, which is the worst case: 2 slots per key. */
    assert_true(st.bytes / st.keys <= 2 * 40 + 8);
    /* Not yet idle: a sweep 50 ms later forgets nothing (tat = T0 + 100 ms). */
    assert_int_equal(sluice_limit_sweep(lim, T0 + 50 * SLUICE_NS_PER_MS, 5000000), 0);
    for (int pass = 0; pass < 100 && forgotten < 1000000; pass++)
        forgotten += sluice_limit_sweep(lim, T0 + SEC, 1u << 20);
    assert_int_equal(forgotten, 1000000);
    sluice_limit_get_stats(lim, &st);
    assert_int_equal(st.keys, 0);
    assert_int_equal(st.forgotten, 1000000);
    sluice_limit_free(lim);
}

/* A chain grants only when every link has budget, and a denial charges nothing. */
static void test_chain_atomic(void **unused)
{
    sluice_limit *global = make(SLUICE_RATE, 100, MIN);
    sluice_limit *user = make(SLUICE_SLIDING, 2, MIN);
    sluice_limit *heavy = make(SLUICE_RATE, 5, MIN);
    sluice_chain_link links[3] = {
        {global, NULL, 0, 1},
        {user, "alice", 5, 1},
        {heavy, "wf-1", 4, 1},
    };
    sluice_decision ds[3];
    sluice_chain_result r;

    (void)unused;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(sluice_chain_decide(links, 3, T0, 0, ds, &r), SLUICE_OK);
        assert_true(r.allowed);
        assert_int_equal(r.retry_after_ns, 0);
    }
    /* alice's sliding window is spent: denied, named, and the others keep their budget. */
    assert_int_equal(sluice_chain_decide(links, 3, T0 + SEC, 0, ds, &r), SLUICE_OK);
    assert_false(r.allowed);
    assert_int_equal(r.denied_by, 1);
    assert_int_equal(r.retry_after_ns, MIN - SEC);
    assert_true(ds[0].allowed);
    assert_int_equal(ds[0].remaining, 98); /* 1 s refilled 1.67 of the 2 spent, minus 1 asked */
    assert_int_equal(ds[2].remaining, 2);  /* 5 - 2 charged - 1 asked: unchanged by the denial */
    /* bob is not held back by alice. */
    links[1].key = "bob";
    links[1].keylen = 3;
    assert_int_equal(sluice_chain_decide(links, 3, T0 + SEC, 0, ds, &r), SLUICE_OK);
    assert_true(r.allowed);
    assert_int_equal(ds[2].remaining, 2);
    sluice_limit_free(global);
    sluice_limit_free(user);
    sluice_limit_free(heavy);
}

/* When several links deny, the chain waits for the latest of their slots. */
static void test_chain_latest_slot(void **unused)
{
    sluice_limit *fast = make(SLUICE_RATE, 1, SEC);
    sluice_limit *slow = make(SLUICE_RATE, 1, MIN);
    sluice_chain_link links[2] = {{fast, "k", 1, 1}, {slow, "k", 1, 1}};
    sluice_chain_result r;

    (void)unused;
    assert_int_equal(sluice_chain_decide(links, 2, T0, 0, NULL, &r), SLUICE_OK);
    assert_true(r.allowed);
    assert_int_equal(sluice_chain_decide(links, 2, T0, 0, NULL, &r), SLUICE_OK);
    assert_false(r.allowed);
    assert_int_equal(r.denied_by, 1);
    assert_int_equal(r.retry_after_ns, MIN);
    assert_int_equal(sluice_chain_decide(links, 2, T0 + MIN, 0, NULL, &r), SLUICE_OK);
    assert_true(r.allowed);
    sluice_limit_free(fast);
    sluice_limit_free(slow);
}

/* The same limit and key twice in one chain is charged for both. */
static void test_chain_repeated_link(void **unused)
{
    sluice_limit *lim = make(SLUICE_RATE, 3, MIN);
    sluice_chain_link links[2] = {{lim, "k", 1, 2}, {lim, "k", 1, 2}};
    sluice_chain_result r;
    sluice_decision d;

    (void)unused;
    assert_int_equal(sluice_chain_decide(links, 2, T0, 0, NULL, &r), SLUICE_OK);
    assert_false(r.allowed); /* 4 units > burst 3 */
    links[1].units = 1;
    assert_int_equal(sluice_chain_decide(links, 2, T0, 0, NULL, &r), SLUICE_OK);
    assert_true(r.allowed);
    assert_int_equal(sluice_limit_decide(lim, "k", 1, 1, T0, SLUICE_PEEK, &d), SLUICE_OK);
    assert_false(d.allowed);
    sluice_limit_free(lim);
}

/* Concurrency and quota links: a lease is taken with the grant, and a denial elsewhere in the
 * chain takes none and charges no quota. */
static void test_chain_with_lease_and_quota(void **unused)
{
    sluice_limit *conc = make(SLUICE_CONCURRENCY, 1, 0);
    sluice_limit *budget = make(SLUICE_QUOTA, 100, 0);
    sluice_limit *rate = make(SLUICE_RATE, 1, MIN);
    sluice_chain_link links[3] = {{conc, "t", 1, 1}, {budget, "t", 1, 40}, {rate, "t", 1, 1}};
    sluice_decision ds[3];
    sluice_chain_result r;

    (void)unused;
    assert_int_equal(sluice_chain_decide(links, 3, T0, 0, ds, &r), SLUICE_OK);
    assert_true(r.allowed);
    assert_true(ds[0].lease_id > 0);
    assert_int_equal(ds[1].remaining, 60);
    assert_int_equal(sluice_lease_release(conc, ds[0].lease_id, T0), SLUICE_OK);
    /* The rate says no: no lease is held, no budget spent. */
    assert_int_equal(sluice_chain_decide(links, 3, T0, 0, ds, &r), SLUICE_OK);
    assert_false(r.allowed);
    assert_int_equal(r.denied_by, 2);
    assert_int_equal(ds[1].remaining, 20); /* as if granted: 100 - 40 spent - 40 asked */
    {
        sluice_decision d;

        assert_int_equal(sluice_limit_decide(conc, "t", 1, 1, T0, SLUICE_PEEK, &d), SLUICE_OK);
        assert_true(d.allowed);
        assert_int_equal(sluice_limit_decide(budget, "t", 1, 60, T0, SLUICE_PEEK, &d), SLUICE_OK);
        assert_true(d.allowed);
    }
    sluice_limit_free(conc);
    sluice_limit_free(budget);
    sluice_limit_free(rate);
}

/* Property: random chains over shared limits never let any limit exceed what it allows alone,
 * and each chain's outcome equals "every link would allow" evaluated beforehand. */
static void test_chain_property(void **unused)
{
    test_rng rng;
    sluice_limit *lims[3];
    const char *keys[] = {"a", "b", "c"};
    int64_t now = T0;

    (void)unused;
    rng_seed(&rng, 42);
    lims[0] = make(SLUICE_RATE, 20, SEC);
    lims[1] = make(SLUICE_WINDOW, 5, SEC);
    lims[2] = make(SLUICE_SLIDING, 7, SEC);
    for (int i = 0; i < 20000; i++) {
        sluice_chain_link links[3];
        sluice_decision before[3];
        sluice_chain_result r;
        int expect = 1;

        for (int j = 0; j < 3; j++) {
            const char *k = keys[rng_range(&rng, 0, 2)];

            links[j].limit = lims[j];
            links[j].key = k;
            links[j].keylen = 1;
            links[j].units = rng_range(&rng, 1, 3);
            assert_int_equal(
                sluice_limit_decide(lims[j], k, 1, links[j].units, now, SLUICE_PEEK, &before[j]),
                SLUICE_OK);
            expect &= before[j].allowed;
        }
        assert_int_equal(sluice_chain_decide(links, 3, now, 0, NULL, &r), SLUICE_OK);
        assert_int_equal(r.allowed, expect);
        if (!expect)
            assert_true(r.retry_after_ns > 0);
        now += rng_range(&rng, 0, 50 * SLUICE_NS_PER_MS);
    }
    for (int j = 0; j < 3; j++)
        sluice_limit_free(lims[j]);
}

/* A chain of kinds the one-pass path decides (a whole-T rate, a fractional-T rate asked for two
 * keys, a fixed window, a quota) against a twin set of limits driven link by link: peek every
 * link, then charge every link only when all allowed. Every decision, the chain's answer, its
 * retry_after and denied_by must be the same, on keys seen before and new ones. */
static void test_chain_one_pass_twin(void **unused)
{
    enum { NL = 5 };
    test_rng rng;
    sluice_limit *a[4], *b[4];
    const int lim_of[NL] = {0, 1, 1, 2, 3};
    const char *keys[] = {"a", "b", "c", "d", "tenant:000042"};
    int64_t now = T0;

    (void)unused;
    rng_seed(&rng, 7);
    for (int t = 0; t < 2; t++) {
        sluice_limit **l = t ? b : a;

        l[0] = make(SLUICE_RATE, 20, SEC);
        l[1] = make(SLUICE_RATE, 3, SEC); /* T = 333333333 1/3 ns */
        l[2] = make(SLUICE_WINDOW, 9, SEC);
        l[3] = make(SLUICE_QUOTA, 400, SEC);
    }
    for (int i = 0; i < 20000; i++) {
        sluice_chain_link links[NL];
        sluice_decision got[NL], want[NL];
        sluice_chain_result r;
        int all = 1;
        int64_t retry = 0;
        size_t denied_by = 0;

        for (int j = 0, k1 = 0; j < NL; j++) {
            int k = (int)rng_range(&rng, 0, 4);

            if (j == 1)
                k1 = k;
            if (j == 2 && k == k1) /* never one key twice: the chain would group them */
                k = (k + 1) % 5;
            links[j].limit = a[lim_of[j]];
            links[j].key = keys[k];
            links[j].keylen = strlen(keys[k]);
            links[j].units = rng_range(&rng, 1, 3);
        }
        for (int j = 0; j < NL; j++) {
            assert_int_equal(sluice_limit_decide(b[lim_of[j]], links[j].key, links[j].keylen,
                                                 links[j].units, now, SLUICE_PEEK, &want[j]),
                             SLUICE_OK);
            all &= want[j].allowed;
            if (!want[j].allowed && want[j].retry_after_ns > retry) {
                retry = want[j].retry_after_ns;
                denied_by = (size_t)j;
            }
        }
        for (int j = 0; j < NL && all; j++)
            assert_int_equal(sluice_limit_decide(b[lim_of[j]], links[j].key, links[j].keylen,
                                                 links[j].units, now, 0, &want[j]),
                             SLUICE_OK);
        assert_int_equal(sluice_chain_decide(links, NL, now, 0, got, &r), SLUICE_OK);
        assert_int_equal(r.allowed, all);
        assert_int_equal(r.retry_after_ns, all ? 0 : retry);
        assert_int_equal(r.denied_by, all ? 0 : denied_by);
        for (int j = 0; j < NL; j++) {
            assert_int_equal(got[j].allowed, want[j].allowed);
            assert_int_equal(got[j].limit, want[j].limit);
            assert_int_equal(got[j].remaining, want[j].remaining);
            assert_int_equal(got[j].retry_after_ns, want[j].retry_after_ns);
            assert_int_equal(got[j].reset_after_ns, want[j].reset_after_ns);
        }
        now += rng_range(&rng, 0, 80 * SLUICE_NS_PER_MS);
    }
    for (int j = 0; j < 4; j++) {
        sluice_limit_free(a[j]);
        sluice_limit_free(b[j]);
    }
}

/* Settling with the actual cost: an LLM call estimated at 100 tokens that used 40 gives 60 back;
 * one that used 250 charges 150 more. */
static void test_settle(void **unused)
{
    sluice_limit *rate = make(SLUICE_RATE, 1000, MIN); /* 1000 tokens/min */
    sluice_limit *win = make(SLUICE_WINDOW, 1000, MIN);
    sluice_limit *sl = make(SLUICE_SLIDING, 1000, MIN);
    sluice_limit *quota = make(SLUICE_QUOTA, 1000, 0);
    sluice_limit *conc = make(SLUICE_CONCURRENCY, 3, 0);
    sluice_limit *all[] = {rate, win, sl, quota};
    sluice_decision d;

    (void)unused;
    for (int i = 0; i < 4; i++) {
        assert_int_equal(sluice_limit_decide(all[i], "t", 1, 100, T0, 0, &d), SLUICE_OK);
        assert_int_equal(d.remaining, 900);
        assert_int_equal(sluice_limit_settle(all[i], "t", 1, T0, 100, 40, T0), SLUICE_OK);
        assert_int_equal(sluice_limit_decide(all[i], "t", 1, 960, T0, SLUICE_PEEK, &d), SLUICE_OK);
        assert_true(d.allowed);
        assert_int_equal(sluice_limit_decide(all[i], "t", 1, 961, T0, SLUICE_PEEK, &d), SLUICE_OK);
        assert_false(d.allowed);
        assert_int_equal(sluice_limit_settle(all[i], "t", 1, T0, 40, 250, T0), SLUICE_OK);
        assert_int_equal(sluice_limit_decide(all[i], "t", 1, 750, T0, SLUICE_PEEK, &d), SLUICE_OK);
        assert_true(d.allowed);
        assert_int_equal(sluice_limit_decide(all[i], "t", 1, 751, T0, SLUICE_PEEK, &d), SLUICE_OK);
        assert_false(d.allowed);
    }
    /* A refund never makes a rate key richer than a full bucket. */
    assert_int_equal(sluice_limit_settle(rate, "t", 1, T0, 100000, 0, T0), SLUICE_OK);
    assert_int_equal(sluice_limit_decide(rate, "t", 1, 1000, T0, SLUICE_PEEK, &d), SLUICE_OK);
    assert_true(d.allowed);
    assert_int_equal(sluice_limit_decide(rate, "t", 1, 1001, T0, SLUICE_PEEK, &d), SLUICE_OK);
    assert_false(d.allowed);
    /* A window that is over has nothing left to correct. */
    assert_int_equal(sluice_limit_settle(win, "t", 1, T0, 10, 20, T0 + 2 * MIN), SLUICE_ESTATE);
    assert_int_equal(sluice_limit_settle(sl, "t", 1, T0, 10, 20, T0 + 2 * MIN), SLUICE_ESTATE);
    assert_int_equal(sluice_limit_settle(conc, "t", 1, T0, 1, 2, T0), SLUICE_EINVAL);
    for (int i = 0; i < 4; i++)
        sluice_limit_free(all[i]);
    sluice_limit_free(conc);
}

/* Estimates for a queue: the k-th unit of a backlog starts where the limit would place it. */
static void test_estimate(void **unused)
{
    sluice_limit *rate = make(SLUICE_RATE, 15, MIN);
    sluice_limit *win = make(SLUICE_WINDOW, 12, 5 * SEC);
    sluice_limit *quota = make(SLUICE_QUOTA, 10, 0);
    sluice_decision d;
    int64_t start;

    (void)unused;
    /* 15 per minute, burst 15: unit 15 starts now, unit 20 at 20 s, unit 100 at 340 s. */
    assert_int_equal(sluice_limit_estimate(rate, "k", 1, 15, T0, &start), SLUICE_OK);
    assert_int_equal(start, T0);
    assert_int_equal(sluice_limit_estimate(rate, "k", 1, 20, T0, &start), SLUICE_OK);
    assert_int_equal(start - T0, 20 * SEC);
    assert_int_equal(sluice_limit_estimate(rate, "k", 1, 100, T0, &start), SLUICE_OK);
    assert_int_equal(start - T0, 340 * SEC);
    /* 12 per 5 s window, 5 spent: 7 more fit now; the 8th to 19th next window; 20th the one after.
     */
    assert_int_equal(sluice_limit_decide(win, "k", 1, 5, T0, 0, &d), SLUICE_OK);
    assert_int_equal(sluice_limit_estimate(win, "k", 1, 7, T0, &start), SLUICE_OK);
    assert_int_equal(start, T0);
    assert_int_equal(sluice_limit_estimate(win, "k", 1, 19, T0, &start), SLUICE_OK);
    assert_int_equal(start, T0 - T0 % (5 * SEC) + 5 * SEC);
    assert_int_equal(sluice_limit_estimate(win, "k", 1, 20, T0, &start), SLUICE_OK);
    assert_int_equal(start, T0 - T0 % (5 * SEC) + 10 * SEC);
    /* A daily quota of 10: more than 10 never fits; once spent, the next unit waits a day. */
    assert_int_equal(sluice_limit_estimate(quota, "k", 1, 11, T0, &start), SLUICE_OK);
    assert_int_equal(start, SLUICE_NEVER);
    assert_int_equal(sluice_limit_decide(quota, "k", 1, 10, T0, 0, &d), SLUICE_OK);
    assert_int_equal(sluice_limit_estimate(quota, "k", 1, 1, T0 + SEC, &start), SLUICE_OK);
    assert_int_equal(start, T0 + 86400 * SEC); /* T0 is midnight UTC */
    sluice_limit_free(rate);
    sluice_limit_free(win);
    sluice_limit_free(quota);
}

/* ---- Out-of-memory sweeps ------------------------------------------------------------------ */

static int oom_limit_lifecycle(void *arg)
{
    sluice_limit_kind kind = *(sluice_limit_kind *)arg;
    sluice_limit_def def;
    sluice_limit *lim;
    sluice_decision d;
    char msg[64], key[16];
    int rc;

    sluice_limit_def_init(&def, kind);
    def.limit = 3;
    def.period_ns = kind == SLUICE_CONCURRENCY || kind == SLUICE_QUOTA ? 0 : SEC;
    rc = sluice_limit_new(&def, &lim, msg, sizeof msg);
    if (rc != SLUICE_OK)
        return rc;
    for (int i = 0; i < 50 && rc == SLUICE_OK; i++) {
        int len = snprintf(key, sizeof key, "key-%d", i % 40);

        rc = sluice_limit_decide(lim, key, (size_t)len, 1, T0 + i, 0, &d);
    }
    if (rc == SLUICE_OK && kind == SLUICE_RATE) {
        int64_t slot;

        for (uint64_t id = 1; id <= 20 && rc == SLUICE_OK; id++)
            rc = sluice_limit_reserve(lim, "r", 1, id, 1, T0, &slot);
    }
    sluice_limit_free(lim);
    return rc;
}

static void test_oom_every_kind(void **unused)
{
    sluice_limit_kind kinds[] = {SLUICE_RATE, SLUICE_WINDOW, SLUICE_SLIDING, SLUICE_CONCURRENCY,
                                 SLUICE_QUOTA};

    (void)unused;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        assert_true(oom_sweep(oom_limit_lifecycle, &kinds[i], 10000) > 1);
}

static int oom_chain(void *arg)
{
    sluice_limit *lims[3] = {NULL, NULL, NULL};
    sluice_limit_kind kinds[3] = {SLUICE_RATE, SLUICE_CONCURRENCY, SLUICE_SLIDING};
    sluice_chain_result r;
    int rc = SLUICE_OK;

    (void)arg;
    for (int j = 0; j < 3 && rc == SLUICE_OK; j++) {
        sluice_limit_def def;
        char msg[64];

        sluice_limit_def_init(&def, kinds[j]);
        def.limit = 100;
        def.period_ns = kinds[j] == SLUICE_CONCURRENCY ? 0 : SEC;
        rc = sluice_limit_new(&def, &lims[j], msg, sizeof msg);
    }
    for (int i = 0; i < 30 && rc == SLUICE_OK; i++) {
        char key[16];
        int len = snprintf(key, sizeof key, "k%d", i);
        sluice_chain_link links[3] = {{lims[0], key, (size_t)len, 1},
                                      {lims[1], key, (size_t)len, 1},
                                      {lims[2], key, (size_t)len, 1}};

        rc = sluice_chain_decide(links, 3, T0, 0, NULL, &r);
        if (rc == SLUICE_OK)
            assert_true(r.allowed);
    }
    for (int j = 0; j < 3; j++)
        sluice_limit_free(lims[j]);
    return rc;
}

static void test_oom_chain(void **unused)
{
    (void)unused;
    assert_true(oom_sweep(oom_chain, NULL, 10000) > 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validation_messages),
        cmocka_unit_test(test_key_cap),
        cmocka_unit_test(test_long_keys_hashed),
        cmocka_unit_test(test_million_keys_forgotten),
        cmocka_unit_test(test_chain_atomic),
        cmocka_unit_test(test_chain_latest_slot),
        cmocka_unit_test(test_chain_repeated_link),
        cmocka_unit_test(test_chain_with_lease_and_quota),
        cmocka_unit_test(test_chain_property),
        cmocka_unit_test(test_chain_one_pass_twin),
        cmocka_unit_test(test_settle),
        cmocka_unit_test(test_estimate),
        cmocka_unit_test(test_oom_every_kind),
        cmocka_unit_test(test_oom_chain),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
