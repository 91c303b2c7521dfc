/* SPDX-License-Identifier: MIT */
/*
 * Tests of the time rules ("Time" in include/sluice/limit.h and engine.h), on a simulated clock.
 *
 * - The one clamp: a limit reads a `now` older than the newest an acting call gave it as that
 *   newest one, whoever calls (the engine or a direct THROTTLE-style caller), so a clock passed
 *   backwards neither locks a key out nor grants early.
 * - Reads change nothing: a peek, an estimate or an explain at a later `now` leaves a decision at
 *   an earlier `now` exactly as it would have been without the read (checked against a twin that
 *   made no read).
 * - The engine keeps no clock of its own: events are stamped with the `now` of the call that
 *   caused them, never with a time an earlier call left behind.
 */
#include "engine_fixture.h"

#include "testutil.h"

/* One rate limit: 1 per minute, burst 1. */
static sluice_limit *rate_limit(void)
{
    sluice_limit_def def;
    sluice_limit *lim = NULL;
    char msg[128];

    sluice_limit_def_init(&def, SLUICE_RATE);
    def.limit = 1;
    def.period_ns = MIN;
    def.burst = 1;
    assert_int_equal(sluice_limit_new(&def, &lim, msg, sizeof msg), SLUICE_OK);
    return lim;
}

static sluice_decision decide(sluice_limit *lim, int64_t now, unsigned flags)
{
    sluice_decision d;

    assert_int_equal(sluice_limit_decide(lim, "k", 1, 1, now, flags, &d), SLUICE_OK);
    return d;
}

/* ---- The one clamp ----------------------------------------------------------------------- */

/* An acting call at an older now is read at the newest now seen: no early grant, and the wait it
 * is told is measured from that newest time, not from its own. */
static void test_backwards_now_is_clamped(void **unused)
{
    sluice_limit *lim = rate_limit();
    sluice_decision d;

    (void)unused;
    assert_true(decide(lim, T0 + 2 * MIN, 0).allowed); /* the key's next slot: T0 + 3 min */
    d = decide(lim, T0, 0);                            /* two minutes back */
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, MIN); /* from T0 + 2 min, not 3 min from T0 */
    d = decide(lim, T0 + 3 * MIN - 1, 0);
    assert_false(d.allowed);
    assert_true(decide(lim, T0 + 3 * MIN, 0).allowed);
    sluice_limit_free(lim);
}

/* A limit the engine gates on and a direct caller charges has one clock: an engine call at an
 * older now than the direct caller's sees the direct caller's time, and grants nothing early. */
static void test_clamp_shared_by_engine_and_direct_callers(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    const char *lims[] = {"r", NULL};
    sluice_delivery out[2];
    sluice_limit *live = NULL;
    sluice_decision d;
    uint64_t id;

    (void)unused;
    fx_rate(e, "r", 1, MIN, 1, NULL);
    fx_type(e, "t", lims);
    assert_non_null(sluice_engine_get_limit(e, "r", &live));
    assert_int_equal(sluice_limit_decide(live, NULL, 0, 1, T0 + 2 * MIN, 0, &d), SLUICE_OK);
    assert_true(d.allowed); /* a THROTTLE took the budget until T0 + 3 min */
    id = fx_submit(e, "t", NULL, T0);
    assert_int_equal(fx_poll(e, T0, 2, out), 0); /* the engine's clock is behind: clamped */
    assert_int_equal(fx_state(e, id), SLUICE_TASK_PARKED);
    assert_int_equal(fx_poll(e, T0 + 3 * MIN - 1, 2, out), 0);
    assert_int_equal(fx_poll(e, T0 + 3 * MIN, 2, out), 1);
    assert_int_equal(out[0].id, id);
    sluice_engine_free(e);
}

/* ---- Reads change nothing ------------------------------------------------------------------ */

/* A peek or an estimate at a later now does not move the limit's clock: a decision at an earlier
 * now afterwards is denied as it is on a twin that was never read. */
static void test_core_reads_leave_the_clock(void **unused)
{
    sluice_limit *read = rate_limit(), *twin = rate_limit();
    sluice_decision a, b;
    sluice_limit_stats sa, sb;
    int64_t start = 0;

    (void)unused;
    assert_true(decide(read, T0, 0).allowed);
    assert_true(decide(twin, T0, 0).allowed);
    assert_true(decide(read, T0 + 10 * MIN, SLUICE_PEEK).allowed);
    assert_int_equal(sluice_limit_estimate(read, "k", 1, 1, T0 + 10 * MIN, &start), SLUICE_OK);
    assert_int_equal(start, T0 + 10 * MIN);
    /* Half a minute in, the key's budget is still spent on both. */
    a = decide(read, T0 + 30 * SEC, 0);
    b = decide(twin, T0 + 30 * SEC, 0);
    assert_false(a.allowed);
    assert_false(b.allowed);
    assert_int_equal(a.retry_after_ns, 30 * SEC);
    assert_int_equal(a.retry_after_ns, b.retry_after_ns);
    assert_int_equal(a.reset_after_ns, b.reset_after_ns);
    sluice_limit_get_stats(read, &sa);
    sluice_limit_get_stats(twin, &sb);
    assert_memory_equal(&sa, &sb, sizeof sa); /* the reads counted nothing either */
    sluice_limit_free(read);
    sluice_limit_free(twin);
}

/* A peek ahead of a concurrency limit's clock sees the leases expired by then as gone, but does
 * not forget them: at the limit's own time they still hold their units. (Found by the Redis
 * script's differential test: the peek used to drop them.) */
static void test_lease_peek_ahead_forgets_nothing(void **unused)
{
    sluice_limit_def def;
    sluice_limit *lim;
    sluice_decision d;

    (void)unused;
    sluice_limit_def_init(&def, SLUICE_CONCURRENCY);
    def.limit = 1;
    def.ttl_ns = 2 * SEC;
    assert_int_equal(sluice_limit_new(&def, &lim, NULL, 0), SLUICE_OK);
    assert_int_equal(sluice_limit_decide(lim, "k", 1, 1, T0, 0, &d), SLUICE_OK);
    assert_true(d.allowed);
    assert_int_equal(sluice_limit_decide(lim, "k", 1, 1, T0, SLUICE_PEEK, &d), SLUICE_OK);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, 2 * SEC);
    assert_int_equal(sluice_limit_decide(lim, "k", 1, 1, T0 + 5 * SEC, SLUICE_PEEK, &d), SLUICE_OK);
    assert_true(d.allowed);
    assert_int_equal(d.remaining, 1);
    /* Back at the limit's clock the lease is still there. */
    assert_int_equal(sluice_limit_decide(lim, "k", 1, 1, T0, SLUICE_PEEK, &d), SLUICE_OK);
    assert_false(d.allowed);
    assert_int_equal(sluice_limit_decide(lim, "k", 1, 1, T0 + SEC, 0, &d), SLUICE_OK);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, SEC);
    sluice_limit_free(lim);
}

#define HOUR_LEASE (60 * MIN)

/* Builds an engine with a keyed rate limit (1 per minute, burst 1) where tenant a's first task
 * runs at T0 and its second is parked; *parked gets the second's id. */
static sluice_engine *parked_engine(uint64_t *parked)
{
    sluice_engine *e = fx_engine(NULL);
    const char *lims[] = {"r", NULL};
    sluice_delivery out[2];

    fx_rate(e, "r", 1, MIN, 1, "tenant");
    fx_type_ex(e, "t", lims, 0, 1, HOUR_LEASE); /* the running task is not redelivered */
    fx_submit(e, "t", "{\"tenant\":\"a\"}", T0);
    *parked = fx_submit(e, "t", "{\"tenant\":\"a\"}", T0);
    assert_int_equal(fx_poll(e, T0, 2, out), 1);
    assert_int_equal(fx_state(e, *parked), SLUICE_TASK_PARKED);
    return e;
}

/* sluice_engine_explain (which asks the limit for an estimate) and the engine's figures at a
 * later now move nothing: afterwards, the engine and its limits behave at an earlier now as a
 * twin engine that was never read. */
static void test_engine_reads_leave_the_clock(void **unused)
{
    sluice_engine *e, *twin;
    sluice_explanation x;
    sluice_limit_figures fe, ft;
    sluice_parked_key top[2];
    sluice_limit *le = NULL, *lt = NULL;
    sluice_decision de, dt;
    sluice_delivery out[2];
    uint64_t pe, pt;

    (void)unused;
    e = parked_engine(&pe);
    twin = parked_engine(&pt);
    assert_int_equal(sluice_engine_explain(e, pe, T0 + 10 * MIN, &x), SLUICE_OK);
    assert_int_equal(x.estimated_start_ns, T0 + 10 * MIN); /* seen from T0 + 10 min */
    assert_int_equal(sluice_engine_limit_figures(e, "r", T0 + 10 * MIN, SLUICE_FIGURES_QUOTA, &fe),
                     SLUICE_OK);
    assert_int_equal(sluice_engine_top_parked(e, "r", top, 2), 1);

    /* At T0 + 30 s, tenant a's budget is spent on both: a direct peek says so... */
    assert_non_null(sluice_engine_get_limit(e, "r", &le));
    assert_non_null(sluice_engine_get_limit(twin, "r", &lt));
    assert_int_equal(sluice_limit_decide(le, "a", 1, 1, T0 + 30 * SEC, SLUICE_PEEK, &de),
                     SLUICE_OK);
    assert_int_equal(sluice_limit_decide(lt, "a", 1, 1, T0 + 30 * SEC, SLUICE_PEEK, &dt),
                     SLUICE_OK);
    assert_false(de.allowed);
    assert_int_equal(de.retry_after_ns, 30 * SEC);
    assert_int_equal(de.retry_after_ns, dt.retry_after_ns);
    /* ...the parked task stays parked, and both run it at its slot, not before. */
    assert_int_equal(fx_poll(twin, T0 + 30 * SEC, 2, out), 0);
    assert_int_equal(fx_poll(e, T0 + 30 * SEC, 2, out), 0);
    assert_int_equal(sluice_engine_next_wake(e), sluice_engine_next_wake(twin));
    assert_int_equal(sluice_engine_limit_figures(e, "r", T0 + 30 * SEC, 0, &fe), SLUICE_OK);
    assert_int_equal(sluice_engine_limit_figures(twin, "r", T0 + 30 * SEC, 0, &ft), SLUICE_OK);
    assert_memory_equal(&fe, &ft, sizeof fe);
    /* From here on, both deliver the same tasks at the same times. */
    for (int64_t now = T0 + 45 * SEC; now <= T0 + 2 * MIN; now += SEC) {
        sluice_delivery oe[2], ot[2];
        int ne = fx_poll(e, now, 2, oe), nt = fx_poll(twin, now, 2, ot);

        assert_int_equal(ne, nt);
        if (ne > 0) {
            assert_int_equal(oe[0].id, pe);
            assert_int_equal(ot[0].id, pt);
        }
    }
    assert_int_equal(fx_state(e, pe), SLUICE_TASK_RUNNING);
    assert_int_equal(fx_state(twin, pt), SLUICE_TASK_RUNNING);
    sluice_engine_free(e);
    sluice_engine_free(twin);
}

/* ---- Events carry the now they were given --------------------------------------------------- */

static int set_type_naming(sluice_engine *e, const char *type, const char *limit, int64_t now)
{
    const char *lims[] = {limit};
    sluice_type_policy t;
    char msg[128];

    sluice_type_policy_init(&t);
    t.name = (char *)type;
    t.limits = (char **)lims;
    t.nlimits = 1;
    return sluice_engine_set_type(e, &t, now, msg, sizeof msg);
}

/* set_type's UNKNOWN_LIMIT event is stamped with the now set_type was given: later than anything
 * the engine saw before (not a stale time an earlier call left), and earlier too. */
static void test_event_stamped_with_now_given(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    sluice_delivery out[1];
    fx_events ev;

    (void)unused;
    memset(&ev, 0, sizeof ev);
    sluice_engine_on_event(e, fx_on_event, &ev);
    assert_int_equal(fx_poll(e, T0, 1, out), 0); /* the engine has seen T0 */
    assert_int_equal(set_type_naming(e, "t1", "nope1", T0 + 90 * SEC), SLUICE_ENOTFOUND);
    assert_int_equal(ev.n[SLUICE_EVENT_UNKNOWN_LIMIT], 1);
    assert_int_equal(ev.last[SLUICE_EVENT_UNKNOWN_LIMIT].at_ns, T0 + 90 * SEC);
    assert_string_equal(ev.last_limit[SLUICE_EVENT_UNKNOWN_LIMIT], "nope1");
    /* A caller whose clock is behind gets its own time on the event, not the newest seen. */
    assert_int_equal(set_type_naming(e, "t2", "nope2", T0 + 5 * SEC), SLUICE_ENOTFOUND);
    assert_int_equal(ev.n[SLUICE_EVENT_UNKNOWN_LIMIT], 2);
    assert_int_equal(ev.last[SLUICE_EVENT_UNKNOWN_LIMIT].at_ns, T0 + 5 * SEC);
    sluice_engine_free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backwards_now_is_clamped),
        cmocka_unit_test(test_clamp_shared_by_engine_and_direct_callers),
        cmocka_unit_test(test_core_reads_leave_the_clock),
        cmocka_unit_test(test_lease_peek_ahead_forgets_nothing),
        cmocka_unit_test(test_engine_reads_leave_the_clock),
        cmocka_unit_test(test_event_stamped_with_now_given),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
