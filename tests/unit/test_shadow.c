/* SPDX-License-Identifier: MIT */
/*
 * Shadow (dry-run) limits, on a simulated clock: a limit in shadow mode is decided and charged
 * exactly as its enforced twin would be under the same requests, counts as shadow_denied what
 * the twin counts as denied, and never denies, parks or rejects anything itself.
 *
 * - the core: a shadow limit against an enforced twin request by request (same grants, same
 *   waits named, same counts), peeks and estimates, a live switch keeping the state;
 * - chains: a shadow link never makes the chain deny and is charged only with a granted chain
 *   and its own room, all-or-nothing still holding for the enforced links;
 * - the engine: under ten times the limit's rate every task starts the moment it is polled,
 *   and shadow_denied equals the rejections of an enforced twin engine; events, charges and
 *   EXPLAIN say so; switching the mode live, and the global switch (seed 004's `enabled`);
 * - the policy spec and the configuration file: mode and enabled are read, written and checked.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "engine_fixture.h"
#include "sluice/config.h"
#include "sluice/policy_spec.h"

/* ---- Core --------------------------------------------------------------------------------- */

static sluice_limit *rate_limit(int64_t permits, int64_t period_ns, int64_t burst)
{
    sluice_limit_def def;
    sluice_limit *lim = NULL;

    sluice_limit_def_init(&def, SLUICE_RATE);
    def.limit = permits;
    def.period_ns = period_ns;
    def.burst = burst;
    assert_int_equal(sluice_limit_new(&def, &lim, NULL, 0), SLUICE_OK);
    return lim;
}

/* Ten requests a second for ten seconds against 1/s: the shadow limit allows each one and names
 * for each exactly the decision its enforced twin makes. */
static void test_core_twin(void **unused)
{
    sluice_limit *sh = rate_limit(1, SEC, 1), *en = rate_limit(1, SEC, 1);
    sluice_limit_stats ss, es;
    uint64_t would_deny = 0;

    (void)unused;
    sluice_limit_set_shadow(sh, 1);
    assert_int_equal(sluice_limit_shadow(sh), 1);
    assert_int_equal(sluice_limit_shadow(en), 0);
    for (int i = 0; i < 100; i++) {
        int64_t now = T0 + i * 100 * MS;
        sluice_decision ds, de;

        assert_int_equal(sluice_limit_decide(sh, "k", 1, 1, now, 0, &ds), SLUICE_OK);
        assert_int_equal(sluice_limit_decide(en, "k", 1, 1, now, 0, &de), SLUICE_OK);
        assert_int_equal(ds.allowed, 1);
        assert_int_equal(ds.shadow_denied, !de.allowed);
        assert_int_equal(de.shadow_denied, 0);
        assert_true(ds.retry_after_ns == de.retry_after_ns);
        assert_true(ds.remaining == de.remaining);
        assert_true(ds.reset_after_ns == de.reset_after_ns);
        would_deny += !de.allowed;
    }
    sluice_limit_get_stats(sh, &ss);
    sluice_limit_get_stats(en, &es);
    assert_true(would_deny == 90);
    assert_true(ss.shadow_denied == es.denied);
    assert_true(ss.denied == 0 && es.shadow_denied == 0);
    assert_true(ss.allowed == es.allowed && ss.allowed == 10);
    assert_true(ss.units == es.units);

    /* Enforced again, live: the state counted in shadow is the twin's, so both deny now. */
    sluice_limit_set_shadow(sh, 0);
    {
        sluice_decision ds, de;
        int64_t now = T0 + 9950 * MS;

        assert_int_equal(sluice_limit_decide(sh, "k", 1, 1, now, 0, &ds), SLUICE_OK);
        assert_int_equal(sluice_limit_decide(en, "k", 1, 1, now, 0, &de), SLUICE_OK);
        assert_int_equal(ds.allowed, 0);
        assert_int_equal(de.allowed, 0);
        assert_int_equal(ds.shadow_denied, 0);
        assert_true(ds.retry_after_ns == de.retry_after_ns);
    }
    sluice_limit_free(sh);
    sluice_limit_free(en);
}

/* Peeks answer as the decision would (allowed, shadow_denied) and count nothing; estimates
 * start now; a concurrency limit's pass takes no lease. */
static void test_core_reads_and_leases(void **unused)
{
    sluice_limit *sh = rate_limit(1, SEC, 1);
    sluice_limit_def def;
    sluice_limit *slots = NULL;
    sluice_limit_stats st;
    sluice_decision d;
    int64_t start = 0;

    (void)unused;
    sluice_limit_set_shadow(sh, 1);
    assert_int_equal(sluice_limit_decide(sh, "k", 1, 1, T0, 0, &d), SLUICE_OK);
    assert_int_equal(d.shadow_denied, 0);
    assert_int_equal(sluice_limit_decide(sh, "k", 1, 1, T0, SLUICE_PEEK, &d), SLUICE_OK);
    assert_int_equal(d.allowed, 1);
    assert_int_equal(d.shadow_denied, 1);
    assert_true(d.retry_after_ns == SEC);
    assert_int_equal(sluice_limit_estimate(sh, "k", 1, 5, T0, &start), SLUICE_OK);
    assert_true(start == T0);
    sluice_limit_get_stats(sh, &st);
    assert_true(st.allowed == 1 && st.shadow_denied == 0 && st.denied == 0);
    sluice_limit_set_shadow(sh, 0);
    assert_int_equal(sluice_limit_estimate(sh, "k", 1, 1, T0, &start), SLUICE_OK);
    assert_true(start == T0 + SEC);

    sluice_limit_def_init(&def, SLUICE_CONCURRENCY);
    def.limit = 1;
    assert_int_equal(sluice_limit_new(&def, &slots, NULL, 0), SLUICE_OK);
    sluice_limit_set_shadow(slots, 1);
    assert_int_equal(sluice_lease_acquire(slots, "k", 1, 1, SEC, T0, &d), SLUICE_OK);
    assert_true(d.allowed && !d.shadow_denied && d.lease_id != 0);
    assert_int_equal(sluice_lease_acquire(slots, "k", 1, 1, SEC, T0, &d), SLUICE_OK);
    assert_true(d.allowed && d.shadow_denied && d.lease_id == 0);
    sluice_limit_get_stats(slots, &st);
    assert_true(st.allowed == 1 && st.shadow_denied == 1 && st.denied == 0);
    sluice_limit_free(slots);
    sluice_limit_free(sh);
}

/* A full key table that refuses new keys refuses nothing in shadow: the new key goes untracked
 * and the refusal is counted as a would-be denial, alone and in a chain. */
static void test_core_key_cap(void **unused)
{
    sluice_limit_def def;
    sluice_limit *lim = NULL, *other = rate_limit(10, SEC, 10);
    sluice_chain_link links[2];
    sluice_chain_result res;
    sluice_decision d, dec[2];
    sluice_limit_stats st;

    (void)unused;
    sluice_limit_def_init(&def, SLUICE_RATE);
    def.limit = 1;
    def.period_ns = SEC;
    def.max_keys = 1;
    assert_int_equal(sluice_limit_new(&def, &lim, NULL, 0), SLUICE_OK);
    assert_int_equal(sluice_limit_decide(lim, "a", 1, 1, T0, 0, &d), SLUICE_OK);
    assert_int_equal(sluice_limit_decide(lim, "b", 1, 1, T0, 0, &d), SLUICE_EBUSY);
    sluice_limit_set_shadow(lim, 1);
    assert_int_equal(sluice_limit_decide(lim, "b", 1, 1, T0, 0, &d), SLUICE_OK);
    assert_true(d.allowed && d.untracked && d.shadow_denied);
    links[0] = (sluice_chain_link){other, "k", 1, 1};
    links[1] = (sluice_chain_link){lim, "c", 1, 1};
    assert_int_equal(sluice_chain_decide(links, 2, T0, 0, dec, &res), SLUICE_OK);
    assert_true(res.allowed && dec[1].shadow_denied && dec[1].untracked);
    sluice_limit_get_stats(lim, &st);
    assert_true(st.refused == 1 && st.shadow_denied == 2 && st.untracked == 0);
    assert_true(st.allowed == 1 && st.keys == 1);
    sluice_limit_free(lim);
    sluice_limit_free(other);
}

/* A chain of an enforced limit A and a shadow limit B. */
static void test_chain(void **unused)
{
    sluice_limit *a = rate_limit(1, SEC, 2), *b = rate_limit(1, SEC, 1);
    sluice_chain_link links[2] = {{a, "k", 1, 1}, {b, "k", 1, 1}};
    sluice_decision dec[2];
    sluice_chain_result res;
    sluice_limit_stats sa, sb;
    sluice_decision peek;

    (void)unused;
    sluice_limit_set_shadow(b, 1);
    /* Both have room: both charged. */
    assert_int_equal(sluice_chain_decide(links, 2, T0, 0, dec, &res), SLUICE_OK);
    assert_int_equal(res.allowed, 1);
    assert_true(dec[0].allowed && dec[1].allowed && !dec[1].shadow_denied);
    /* B would deny: the chain is granted, A charged, B not (its would-be no is counted). */
    assert_int_equal(sluice_chain_decide(links, 2, T0, 0, dec, &res), SLUICE_OK);
    assert_int_equal(res.allowed, 1);
    assert_true(dec[1].allowed && dec[1].shadow_denied && dec[1].retry_after_ns == SEC);
    sluice_limit_get_stats(a, &sa);
    sluice_limit_get_stats(b, &sb);
    assert_true(sa.allowed == 2 && sa.denied == 0);
    assert_true(sb.allowed == 1 && sb.shadow_denied == 1 && sb.denied == 0);
    /* B was not charged: its key frees exactly one interval after the first grant. */
    assert_int_equal(sluice_limit_decide(b, "k", 1, 1, T0 + SEC, SLUICE_PEEK, &peek), SLUICE_OK);
    assert_true(peek.allowed && !peek.shadow_denied);
    /* A denies and B would: nothing charged; A is named, both counted. */
    assert_int_equal(sluice_chain_decide(links, 2, T0, 0, dec, &res), SLUICE_OK);
    assert_int_equal(res.allowed, 0);
    assert_true(res.denied_by == 0 && res.retry_after_ns == SEC);
    sluice_limit_get_stats(a, &sa);
    sluice_limit_get_stats(b, &sb);
    assert_true(sa.denied == 1 && sb.shadow_denied == 2 && sb.allowed == 1);
    /* A denies and B has room: B is not charged (all or nothing), nor counted. */
    assert_int_equal(sluice_limit_decide(a, "k", 1, 1, T0 + SEC, 0, &peek), SLUICE_OK);
    assert_true(peek.allowed);
    assert_int_equal(sluice_chain_decide(links, 2, T0 + SEC, 0, dec, &res), SLUICE_OK);
    assert_int_equal(res.allowed, 0);
    assert_true(dec[1].allowed && !dec[1].shadow_denied);
    sluice_limit_get_stats(b, &sb);
    assert_true(sb.allowed == 1 && sb.shadow_denied == 2);
    assert_int_equal(sluice_limit_decide(b, "k", 1, 1, T0 + SEC, SLUICE_PEEK, &peek), SLUICE_OK);
    assert_true(peek.allowed && !peek.shadow_denied);
    /* A shadow link alone never denies, and a peek of the chain counts nothing. */
    assert_int_equal(sluice_chain_decide(&links[1], 1, T0 + SEC, 0, dec, &res), SLUICE_OK);
    assert_int_equal(sluice_chain_decide(&links[1], 1, T0 + SEC, SLUICE_PEEK, dec, &res),
                     SLUICE_OK);
    assert_true(res.allowed && dec[0].shadow_denied);
    sluice_limit_get_stats(b, &sb);
    assert_true(sb.allowed == 2 && sb.shadow_denied == 2);
    sluice_limit_free(a);
    sluice_limit_free(b);
}

/* A shadow concurrency link at its cap: the chain is granted, no lease is taken for it, and the
 * enforced links are charged; a release of what it did not take changes nothing. */
static void test_chain_lease(void **unused)
{
    sluice_limit *a = rate_limit(100, SEC, 100), *slots = NULL;
    sluice_limit_def def;
    sluice_chain_link links[2];
    sluice_decision dec[2];
    sluice_chain_result res;
    sluice_limit_stats st;

    (void)unused;
    sluice_limit_def_init(&def, SLUICE_CONCURRENCY);
    def.limit = 1;
    assert_int_equal(sluice_limit_new(&def, &slots, NULL, 0), SLUICE_OK);
    sluice_limit_set_shadow(slots, 1);
    links[0] = (sluice_chain_link){slots, "k", 1, 1};
    links[1] = (sluice_chain_link){a, "k", 1, 1};
    assert_int_equal(sluice_chain_decide(links, 2, T0, 0, dec, &res), SLUICE_OK);
    assert_true(res.allowed && dec[0].lease_id != 0 && !dec[0].shadow_denied);
    assert_int_equal(sluice_chain_decide(links, 2, T0, 0, dec, &res), SLUICE_OK);
    assert_true(res.allowed && dec[0].lease_id == 0 && dec[0].shadow_denied);
    sluice_limit_get_stats(slots, &st);
    assert_true(st.allowed == 1 && st.shadow_denied == 1 && st.denied == 0);
    sluice_limit_get_stats(a, &st);
    assert_true(st.allowed == 2 && st.units == 2);
    sluice_limit_free(slots);
    sluice_limit_free(a);
}

/* ---- Engine ------------------------------------------------------------------------------- */

static const char *const only_sh[] = {"sh", NULL};
static const char *const only_en[] = {"en", NULL};

/* 1/s, burst 1, in the given mode and overflow. */
static void one_per_sec(sluice_engine *e, const char *name, sluice_limit_mode mode,
                        sluice_overflow overflow)
{
    sluice_limit_policy p;

    fx_limit(&p, name, SLUICE_RATE, 1, SEC);
    p.def.burst = 1;
    p.mode = mode;
    p.overflow = overflow;
    fx_set_limit(e, &p);
}

static void figures(sluice_engine *e, const char *name, int64_t now, sluice_limit_figures *f)
{
    assert_int_equal(sluice_engine_limit_figures(e, name, now, 0, f), SLUICE_OK);
}

/* The acceptance test of the issue: a shadow limit at 1/s under 10/s of load. Every task runs
 * the moment it is polled, and shadow_denied counts exactly the denials of the enforced twin
 * (overflow reject, so each of its denials is one task refused and nothing is retried). */
static void test_engine_twin(void **unused)
{
    sluice_engine *sh = fx_engine(NULL), *en = fx_engine(NULL);
    fx_events ev;
    sluice_limit_figures fs, fe;
    sluice_engine_stats ss, es;
    uint64_t last = 0, rejected = 0;

    (void)unused;
    memset(&ev, 0, sizeof ev);
    sluice_engine_on_event(sh, fx_on_event, &ev);
    one_per_sec(sh, "sh", SLUICE_MODE_SHADOW, SLUICE_OVERFLOW_WAIT);
    one_per_sec(en, "en", SLUICE_MODE_ENFORCE, SLUICE_OVERFLOW_REJECT);
    fx_type(sh, "job", only_sh);
    fx_type(en, "job", only_en);
    for (int i = 0; i < 100; i++) {
        int64_t now = T0 + i * 100 * MS;
        sluice_delivery d, de;
        uint64_t ide;

        last = fx_submit(sh, "job", NULL, now);
        ide = fx_submit(en, "job", NULL, now);
        assert_int_equal(fx_poll(sh, now, 1, &d), 1);
        assert_true(d.id == last && d.charged == 1);
        assert_int_equal(sluice_engine_ack(sh, d.id, -1, now), SLUICE_OK);
        if (fx_poll(en, now, 1, &de) == 1)
            assert_int_equal(sluice_engine_ack(en, de.id, -1, now), SLUICE_OK);
        else
            rejected += fx_state(en, ide) == SLUICE_TASK_FAILED;
    }
    figures(sh, "sh", T0 + 10 * SEC, &fs);
    figures(en, "en", T0 + 10 * SEC, &fe);
    assert_true(rejected == 90);
    assert_true(fs.core.shadow_denied == fe.core.denied);
    assert_true(fs.core.shadow_denied == rejected);
    assert_true(fs.core.allowed == fe.core.allowed && fs.core.allowed == 10);
    assert_true(fs.core.denied == 0);
    assert_int_equal(fs.shadow, 1);
    assert_int_equal(fe.shadow, 0);
    assert_true(fs.parked == 0);
    sluice_engine_get_stats(sh, &ss);
    sluice_engine_get_stats(en, &es);
    assert_true(ss.done == 100 && ss.rejected == 0 && ss.parked_peak == 0);
    assert_true(es.rejected == rejected);
    /* Events: the would-be denials, aggregated per interval, add up to the count. */
    assert_int_equal(sluice_engine_tick(sh, T0 + 60 * SEC), SLUICE_OK);
    assert_true(ev.count[SLUICE_EVENT_SHADOW_DENIED] == 90);
    assert_string_equal(ev.last_limit[SLUICE_EVENT_SHADOW_DENIED], "sh");
    assert_int_equal(ev.n[SLUICE_EVENT_DEFERRED], 0);
    assert_int_equal(ev.n[SLUICE_EVENT_REJECTED], 0);
    /* The last task (at 9.9 s) was one the twin refused: its charge says so, and so does
     * EXPLAIN. */
    {
        sluice_charge c;
        sluice_explanation x;

        assert_int_equal(sluice_engine_task_charges(sh, last, &c, 1), 1);
        assert_int_equal(c.shadow_denied, 1);
        assert_int_equal(c.charged, 0);
        assert_int_equal(sluice_engine_explain(sh, last, T0 + 10 * SEC, &x), SLUICE_OK);
        assert_int_equal(x.state, SLUICE_TASK_DONE);
        assert_non_null(strstr(x.text, "Shadow limit \"sh\""));
    }
    sluice_engine_free(sh);
    sluice_engine_free(en);
}

static void wait_collect(const sluice_type_stats *st, void *arg)
{
    *(sluice_type_stats *)arg = *st;
}

/* Waits: every first delivery of the shadow engine falls in the first bucket (no wait). */
static void test_engine_no_wait(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    sluice_type_stats st;
    sluice_delivery d[16];

    (void)unused;
    one_per_sec(e, "sh", SLUICE_MODE_SHADOW, SLUICE_OVERFLOW_WAIT);
    fx_type(e, "job", only_sh);
    for (int i = 0; i < 50; i++)
        fx_submit(e, "job", NULL, T0);
    for (int got = 0; got < 50;) {
        int n = fx_poll(e, T0, 16, d);

        assert_true(n > 0);
        got += n;
    }
    memset(&st, 0, sizeof st);
    assert_int_equal(sluice_engine_type_stats(e, wait_collect, &st), 1);
    assert_true(st.wait_count == 50 && st.wait[0] == 50 && st.wait_sum_ns == 0);
    sluice_engine_free(e);
}

/* Enforced -> shadow -> enforced, live: parked tasks are woken by the switch to shadow, the
 * budget counted in shadow is enforced at once afterwards, nothing is lost or charged twice. */
static void test_engine_mode_switch(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    sluice_delivery d[8];
    sluice_limit_figures f;
    uint64_t ids[4];
    int n;

    (void)unused;
    one_per_sec(e, "sh", SLUICE_MODE_ENFORCE, SLUICE_OVERFLOW_WAIT);
    fx_type(e, "job", only_sh);
    for (int i = 0; i < 4; i++)
        ids[i] = fx_submit(e, "job", NULL, T0);
    assert_int_equal(fx_poll(e, T0, 8, d), 1);
    assert_int_equal(fx_state(e, ids[1]), SLUICE_TASK_PARKED);
    assert_int_equal(sluice_engine_set_limit_mode(e, "sh", SLUICE_MODE_SHADOW, T0 + 100 * MS),
                     SLUICE_OK);
    assert_int_equal(sluice_engine_get_limit(e, "sh", NULL)->mode, SLUICE_MODE_SHADOW);
    n = fx_poll(e, T0 + 100 * MS, 8, d);
    assert_int_equal(n, 3);
    figures(e, "sh", T0 + 100 * MS, &f);
    assert_true(f.core.allowed == 1 && f.core.denied == 1 && f.core.shadow_denied == 3);
    assert_true(f.shadow == 1 && f.parked == 0);
    /* Enforced again: the key was charged at T0 only, so it has room at T0 + 1 s, not before. */
    assert_int_equal(sluice_engine_set_limit_mode(e, "sh", SLUICE_MODE_ENFORCE, T0 + 200 * MS),
                     SLUICE_OK);
    fx_submit(e, "job", NULL, T0 + 200 * MS);
    assert_int_equal(fx_poll(e, T0 + 200 * MS, 8, d), 0);
    assert_int_equal(fx_poll(e, T0 + SEC, 8, d), 1);
    assert_int_equal(sluice_engine_set_limit_mode(e, "nope", SLUICE_MODE_SHADOW, T0),
                     SLUICE_ENOTFOUND);
    assert_int_equal(sluice_engine_set_limit_mode(e, "sh", (sluice_limit_mode)7, T0),
                     SLUICE_EINVAL);
    sluice_engine_free(e);
}

/* A type whose chain holds an enforced concurrency cap and a shadow rate: the rate never holds
 * a task back; the cap still does, and a task it parks charges the shadow rate nothing. */
static void test_engine_chain(void **unused)
{
    static const char *const chain[] = {"slots", "sh", NULL};
    sluice_engine *e = fx_engine(NULL);
    sluice_limit_policy p;
    sluice_delivery d[8];
    sluice_limit_figures f;
    uint64_t a, b;

    (void)unused;
    fx_limit(&p, "slots", SLUICE_CONCURRENCY, 1, 0);
    fx_set_limit(e, &p);
    one_per_sec(e, "sh", SLUICE_MODE_SHADOW, SLUICE_OVERFLOW_WAIT);
    fx_type(e, "job", chain);
    a = fx_submit(e, "job", NULL, T0);
    b = fx_submit(e, "job", NULL, T0);
    assert_int_equal(fx_poll(e, T0, 8, d), 1);
    assert_true(d[0].id == a);
    assert_int_equal(fx_state(e, b), SLUICE_TASK_PARKED);
    figures(e, "sh", T0, &f);
    assert_true(f.core.allowed == 1 && f.core.shadow_denied == 1 && f.parked == 0);
    /* The slot frees at 10 ms: b starts then, though the rate would say 1 s. */
    assert_int_equal(sluice_engine_ack(e, a, -1, T0 + 10 * MS), SLUICE_OK);
    assert_int_equal(fx_poll(e, T0 + 10 * MS, 8, d), 1);
    assert_true(d[0].id == b);
    figures(e, "sh", T0 + 10 * MS, &f);
    assert_true(f.core.allowed == 1 && f.core.shadow_denied == 2);
    sluice_engine_free(e);
}

/* Seed 004's `enabled: false`: every limit lets everything through, still counting; back on,
 * every limit has its own mode and the state it counted. */
static void test_engine_global_switch(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    sluice_delivery d[8];
    sluice_limit_figures f;
    uint64_t parked;

    (void)unused;
    one_per_sec(e, "en", SLUICE_MODE_ENFORCE, SLUICE_OVERFLOW_WAIT);
    fx_type(e, "job", only_en);
    assert_int_equal(sluice_engine_enabled(e), 1);
    fx_submit(e, "job", NULL, T0);
    parked = fx_submit(e, "job", NULL, T0);
    assert_int_equal(fx_poll(e, T0, 8, d), 1);
    assert_int_equal(fx_state(e, parked), SLUICE_TASK_PARKED);
    sluice_engine_set_enabled(e, 0, T0 + MS);
    assert_int_equal(sluice_engine_enabled(e), 0);
    figures(e, "en", T0 + MS, &f);
    assert_int_equal(f.shadow, 1);
    assert_int_equal(fx_poll(e, T0 + MS, 8, d), 1);
    assert_true(d[0].id == parked);
    for (int i = 0; i < 5; i++)
        fx_submit(e, "job", NULL, T0 + 2 * MS);
    assert_int_equal(fx_poll(e, T0 + 2 * MS, 8, d), 5);
    /* A limit added while off is off too, whatever its own mode. */
    one_per_sec(e, "late", SLUICE_MODE_ENFORCE, SLUICE_OVERFLOW_WAIT);
    figures(e, "late", T0, &f);
    assert_int_equal(f.shadow, 1);
    figures(e, "en", T0 + 2 * MS, &f);
    assert_true(f.core.allowed == 1 && f.core.denied == 1 && f.core.shadow_denied == 6);
    /* On again: enforced at once. */
    sluice_engine_set_enabled(e, 1, T0 + 3 * MS);
    figures(e, "en", T0 + 3 * MS, &f);
    assert_int_equal(f.shadow, 0);
    fx_submit(e, "job", NULL, T0 + 3 * MS);
    assert_int_equal(fx_poll(e, T0 + 3 * MS, 8, d), 0);
    /* A limit whose own mode is shadow stays shadow with limits on. */
    one_per_sec(e, "sh", SLUICE_MODE_SHADOW, SLUICE_OVERFLOW_WAIT);
    figures(e, "sh", T0, &f);
    assert_int_equal(f.shadow, 1);
    sluice_engine_free(e);
}

/* ---- Policy specs and the configuration file --------------------------------------------- */

static void test_spec(void **unused)
{
    sluice_limit_policy p;
    sluice_limit_mode mode = SLUICE_MODE_ENFORCE;
    char msg[256], buf[SLUICE_POLICY_SPEC_MAX_LEN];

    (void)unused;
    assert_int_equal(
        sluice_spec_parse_policy("rate=1/1s,mode=shadow,key=explicit", &p, msg, sizeof msg),
        SLUICE_OK);
    assert_int_equal(p.mode, SLUICE_MODE_SHADOW);
    assert_int_equal(sluice_spec_format_policy(&p, buf, sizeof buf), SLUICE_OK);
    assert_string_equal(buf, "rate=1/1s,key=explicit,mode=shadow");
    sluice_limit_policy_clear(&p);
    assert_int_equal(sluice_spec_parse_policy("rate=1/1s,mode=enforce", &p, msg, sizeof msg),
                     SLUICE_OK);
    assert_int_equal(p.mode, SLUICE_MODE_ENFORCE);
    assert_int_equal(sluice_spec_format_policy(&p, buf, sizeof buf), SLUICE_OK);
    assert_string_equal(buf, "rate=1/1s");
    sluice_limit_policy_clear(&p);
    assert_int_equal(sluice_spec_parse_policy("rate=1/1s,mode=dry", &p, msg, sizeof msg),
                     SLUICE_EPARSE);
    assert_string_equal(msg, "bad value \"dry\" in \"rate=1/1s,mode=dry\": expected mode=enforce "
                             "or mode=shadow");
    assert_int_equal(
        sluice_spec_parse_policy("rate=1/1s,mode=shadow,mode=shadow", &p, msg, sizeof msg),
        SLUICE_EPARSE);
    assert_int_equal(sluice_spec_parse_mode("mode=shadow", &mode), 1);
    assert_int_equal(mode, SLUICE_MODE_SHADOW);
    assert_int_equal(sluice_spec_parse_mode("mode=enforce", &mode), 1);
    assert_int_equal(mode, SLUICE_MODE_ENFORCE);
    assert_int_equal(sluice_spec_parse_mode("rate=1/1s,mode=shadow", &mode), 0);
    assert_int_equal(sluice_spec_parse_mode("mode=Shadow", &mode), 0);
    assert_string_equal(sluice_limit_mode_name(SLUICE_MODE_SHADOW), "shadow");
    assert_string_equal(sluice_limit_mode_name(SLUICE_MODE_ENFORCE), "enforce");
    /* Validation refuses a mode out of range. */
    sluice_limit_policy_init(&p);
    p.name = (char *)"x";
    p.def.limit = 1;
    p.def.period_ns = SEC;
    p.mode = (sluice_limit_mode)3;
    assert_int_equal(sluice_limit_policy_validate(&p, msg, sizeof msg), SLUICE_EINVAL);
    assert_non_null(strstr(msg, "unknown mode 3"));
}

static int parse(const char *text, sluice_config *c, char *msg, size_t msglen)
{
    return sluice_config_parse(text, strlen(text), "t.yaml", c, msg, msglen);
}

static void test_config(void **unused)
{
    sluice_config c;
    sluice_engine *e;
    sluice_limit_figures f;
    char msg[512];

    (void)unused;
    assert_int_equal(parse("limits:\n"
                           "  a: {rate: 1/s, mode: shadow}\n"
                           "  b: {rate: 1/s, mode: enforce}\n"
                           "  c: {rate: 1/s}\n"
                           "  t:\n"
                           "    mode: shadow\n"
                           "    tier:\n"
                           "      field: input.n\n"
                           "      tiers: [{name: x, rate: 1/s}]\n",
                           &c, msg, sizeof msg),
                     SLUICE_OK);
    assert_int_equal(c.disabled, 0);
    assert_int_equal(c.limits[0].mode, SLUICE_MODE_SHADOW);
    assert_int_equal(c.limits[1].mode, SLUICE_MODE_ENFORCE);
    assert_int_equal(c.limits[2].mode, SLUICE_MODE_ENFORCE);
    assert_int_equal(c.limits[3].mode, SLUICE_MODE_SHADOW);
    e = fx_engine(&c.engine);
    assert_int_equal(sluice_config_apply(&c, e, T0, msg, sizeof msg), SLUICE_OK);
    assert_int_equal(sluice_engine_enabled(e), 1);
    figures(e, "a", T0, &f);
    assert_int_equal(f.shadow, 1);
    figures(e, "c", T0, &f);
    assert_int_equal(f.shadow, 0);
    figures(e, "t", T0, &f);
    assert_int_equal(f.shadow, 1);
    sluice_config_clear(&c);

    /* The global switch, at the top of the file. */
    assert_int_equal(parse("enabled: false\nlimits:\n  c: {rate: 1/s}\n", &c, msg, sizeof msg),
                     SLUICE_OK);
    assert_int_equal(c.disabled, 1);
    assert_int_equal(sluice_config_apply(&c, e, T0, msg, sizeof msg), SLUICE_OK);
    assert_int_equal(sluice_engine_enabled(e), 0);
    figures(e, "c", T0, &f);
    assert_int_equal(f.shadow, 1);
    sluice_config_clear(&c);
    assert_int_equal(parse("enabled: true\n", &c, msg, sizeof msg), SLUICE_OK);
    assert_int_equal(c.disabled, 0);
    assert_int_equal(sluice_config_apply(&c, e, T0, msg, sizeof msg), SLUICE_OK);
    assert_int_equal(sluice_engine_enabled(e), 1);
    figures(e, "c", T0, &f);
    assert_int_equal(f.shadow, 0);
    sluice_config_clear(&c);
    sluice_engine_free(e);

    /* Refused, with the line and column of the value at fault. */
    assert_int_equal(parse("limits:\n  a: {rate: 1/s, mode: dry}\n", &c, msg, sizeof msg),
                     SLUICE_EINVAL);
    assert_non_null(strstr(msg, "t.yaml:2:"));
    assert_non_null(strstr(msg, "limits.a.mode"));
    assert_non_null(strstr(msg, "enforce"));
    assert_int_equal(parse("limits:\n  a: {rate: 1/s, mode: shadw}\n", &c, msg, sizeof msg),
                     SLUICE_EINVAL);
    assert_non_null(strstr(msg, "did you mean \"shadow\""));
    assert_int_equal(parse("enabled: no\n", &c, msg, sizeof msg), SLUICE_EINVAL);
    assert_non_null(strstr(msg, "t.yaml:1:10: enabled:"));
    assert_int_equal(parse("enabled: 0\n", &c, msg, sizeof msg), SLUICE_EINVAL);
    /* mode goes on the limit, not in a tier. */
    assert_int_equal(parse("limits:\n"
                           "  t:\n"
                           "    tier:\n"
                           "      field: input.n\n"
                           "      tiers: [{name: x, rate: 1/s, mode: shadow}]\n",
                           &c, msg, sizeof msg),
                     SLUICE_EINVAL);
    assert_non_null(strstr(msg, "unknown key \"mode\""));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_core_twin),      cmocka_unit_test(test_core_reads_and_leases),
        cmocka_unit_test(test_core_key_cap),   cmocka_unit_test(test_chain),
        cmocka_unit_test(test_chain_lease),    cmocka_unit_test(test_engine_twin),
        cmocka_unit_test(test_engine_no_wait), cmocka_unit_test(test_engine_mode_switch),
        cmocka_unit_test(test_engine_chain),   cmocka_unit_test(test_engine_global_switch),
        cmocka_unit_test(test_spec),           cmocka_unit_test(test_config),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
