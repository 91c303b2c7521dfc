/* SPDX-License-Identifier: MIT */
/*
 * Tests of recurring series in the engine, on a simulated clock: interval and cron schedules,
 * max_runs counting only occurrences that started, occurrences skipped when their slot falls
 * after the series' end or beyond the horizon (the rhythm kept: the next occurrence comes from
 * the schedule), points missed without a tick, removal cancelling queued occurrences, the
 * errors of add_recurring, the skip ahead to the limiter's next slot after a deferral or a
 * horizon refusal (seed 003), and the one RECURRING_TOO_FAST event at creation.
 */
#include "engine_fixture.h"

#include "testutil.h"

static void add(sluice_engine *e, const char *name, const char *type, int64_t interval_ns,
                const char *cron, int64_t end_ns, int64_t max_runs, int64_t now)
{
    sluice_recurring_spec r;
    char msg[256];
    int rc;

    memset(&r, 0, sizeof r);
    r.name = name;
    r.type = type;
    r.interval_ns = interval_ns;
    r.cron = cron;
    r.end_ns = end_ns;
    r.max_runs = max_runs;
    rc = sluice_engine_add_recurring(e, &r, now, msg, sizeof msg);
    if (rc != SLUICE_OK)
        fail_msg("add_recurring: %s (%s)", sluice_strerror(rc), msg);
}

static sluice_recurring_info info_of(const sluice_engine *e, const char *name)
{
    sluice_recurring_info ri;

    assert_int_equal(sluice_engine_recurring_info(e, name, &ri), SLUICE_OK);
    return ri;
}

/* Ticks and polls at now, acks what came; returns how many ran. */
static int run_at(sluice_engine *e, int64_t now)
{
    sluice_delivery out[8];
    int n = fx_poll(e, now, 8, out);

    for (int i = 0; i < n; i++)
        assert_int_equal(sluice_engine_ack(e, out[i].id, -1, now), SLUICE_OK);
    return n;
}

static void test_interval_max_runs(void **unused)
{
    sluice_engine *e = fx_engine(NULL);

    (void)unused;
    add(e, "s", "job", 10 * SEC, NULL, 0, 3, T0);
    assert_int_equal(info_of(e, "s").next_ns, T0);
    assert_int_equal(sluice_engine_next_wake(e), T0);
    assert_int_equal(run_at(e, T0), 1);
    assert_int_equal(info_of(e, "s").next_ns, T0 + 10 * SEC);
    assert_int_equal(run_at(e, T0 + 5 * SEC), 0);
    assert_int_equal(run_at(e, T0 + 10 * SEC), 1);
    assert_int_equal(run_at(e, T0 + 20 * SEC), 1);
    assert_int_equal(run_at(e, T0 + 30 * SEC), 0);
    assert_int_equal(info_of(e, "s").runs, 3);
    assert_int_equal(info_of(e, "s").skipped, 0);
    assert_int_equal(info_of(e, "s").next_ns, SLUICE_NEVER);
    sluice_engine_free(e);
}

static void test_cron_schedule(void **unused)
{
    sluice_engine *e = fx_engine(NULL);

    (void)unused;
    add(e, "c", "job", 0, "*/5 * * * *", 0, 0, T0 - 30 * SEC);
    assert_int_equal(info_of(e, "c").next_ns, T0);
    assert_int_equal(run_at(e, T0), 1);
    assert_int_equal(info_of(e, "c").next_ns, T0 + 5 * MIN);
    assert_int_equal(run_at(e, T0 + 4 * MIN), 0);
    assert_int_equal(run_at(e, T0 + 5 * MIN), 1);
    assert_int_equal(info_of(e, "c").next_ns, T0 + 10 * MIN);
    assert_int_equal(info_of(e, "c").runs, 2);
    sluice_engine_free(e);
}

/* Occurrences whose slot would fall after the end are skipped; the rhythm is the schedule's. */
static void test_skipped_past_end(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    const char *lims[] = {"r", NULL};
    sluice_delivery out[4];
    sluice_recurring_info ri;

    (void)unused;
    fx_rate(e, "r", 1, MIN, 1, NULL);
    fx_type(e, "job", lims);
    add(e, "s", "job", 10 * SEC, NULL, T0 + 25 * SEC, 0, T0);
    assert_int_equal(run_at(e, T0), 1);
    /* T0+10: the slot is T0+60, after the end: skipped, not parked. */
    assert_int_equal(fx_poll(e, T0 + 10 * SEC, 4, out), 0);
    {
        sluice_engine_stats st;

        sluice_engine_get_stats(e, &st);
        assert_int_equal(st.parked, 0);
        assert_int_equal(st.failed, 1);
    }
    assert_int_equal(info_of(e, "s").next_ns, T0 + 20 * SEC);
    assert_int_equal(run_at(e, T0 + 20 * SEC), 0);
    ri = info_of(e, "s");
    assert_int_equal(ri.runs, 1);
    assert_int_equal(ri.skipped, 2);
    assert_int_equal(ri.next_ns, SLUICE_NEVER);
    /* The skipped occurrence says why. */
    {
        sluice_task_info info;

        assert_int_equal(sluice_engine_task_info(e, 2, &info), SLUICE_OK);
        assert_int_equal(info.state, SLUICE_TASK_FAILED);
        assert_int_equal(info.failure.reason, SLUICE_FAIL_SKIPPED);
        assert_string_equal(info.failure.limit, "r");
    }
    sluice_engine_free(e);
}

/* max_runs counts occurrences that started: one skipped for the horizon does not count. */
static void test_max_runs_counts_started_only(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    const char *lims[] = {"r", NULL};
    sluice_limit_policy p;
    sluice_recurring_info ri;

    (void)unused;
    fx_limit(&p, "r", SLUICE_RATE, 1, 15 * SEC);
    p.def.horizon_ns = SEC;
    fx_set_limit(e, &p);
    fx_type(e, "job", lims);
    add(e, "s", "job", 10 * SEC, NULL, 0, 2, T0);
    assert_int_equal(run_at(e, T0), 1);
    assert_int_equal(run_at(e, T0 + 10 * SEC), 0); /* slot T0+15: beyond the 1 s horizon */
    assert_int_equal(run_at(e, T0 + 20 * SEC), 1);
    ri = info_of(e, "s");
    assert_int_equal(ri.runs, 2);
    assert_int_equal(ri.skipped, 1);
    assert_int_equal(ri.next_ns, SLUICE_NEVER);
    assert_int_equal(run_at(e, T0 + 60 * SEC), 0);
    sluice_engine_free(e);
}

/* A started occurrence is an ordinary task: its retry runs even though max_runs is reached. */
static void test_started_occurrence_retries(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    sluice_type_policy t;
    sluice_delivery out[4];
    sluice_recurring_info ri;
    char msg[128];

    (void)unused;
    sluice_type_policy_init(&t);
    t.name = "job";
    t.retry.backoff = SLUICE_BACKOFF_FIXED;
    t.retry.base_ns = SEC;
    assert_int_equal(sluice_engine_set_type(e, &t, T0, msg, sizeof msg), SLUICE_OK);
    add(e, "s", "job", 100 * SEC, NULL, T0 + 50 * SEC, 1, T0);
    assert_int_equal(fx_poll(e, T0, 4, out), 1);
    assert_int_equal(sluice_engine_fail(e, out[0].id, SLUICE_FAIL_MODE_RETRY, NULL, T0), SLUICE_OK);
    assert_int_equal(fx_poll(e, T0 + SEC, 4, out), 1);
    assert_int_equal(out[0].attempt, 2);
    assert_int_equal(sluice_engine_fail(e, out[0].id, SLUICE_FAIL_MODE_RETRY, NULL, T0 + 60 * SEC),
                     SLUICE_OK);
    /* After the series' end too. */
    assert_int_equal(fx_poll(e, T0 + 61 * SEC, 4, out), 1);
    assert_int_equal(out[0].attempt, 3);
    ri = info_of(e, "s");
    assert_int_equal(ri.runs, 1);
    assert_int_equal(ri.skipped, 0);
    assert_int_equal(ri.next_ns, SLUICE_NEVER);
    sluice_engine_free(e);
}

/* Schedule points that pass without a tick are skipped; only the latest runs. */
static void test_missed_points_skipped(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    sluice_recurring_info ri;

    (void)unused;
    add(e, "s", "job", 10 * SEC, NULL, 0, 0, T0);
    assert_int_equal(run_at(e, T0), 1);
    assert_int_equal(run_at(e, T0 + 55 * SEC), 1);
    ri = info_of(e, "s");
    assert_int_equal(ri.runs, 2);
    assert_int_equal(ri.skipped, 4);
    assert_int_equal(ri.next_ns, T0 + 60 * SEC);
    sluice_engine_free(e);
}

static uint64_t submitted(sluice_engine *e)
{
    sluice_engine_stats st;

    sluice_engine_get_stats(e, &st);
    return st.submitted;
}

/* Seed 003: a deferred occurrence moves the series to the limiter's next slot behind it, so a
 * series ten times faster than its limit re-checks about once per refill interval, still on its
 * own grid, and still runs at the limiter's full rate. */
static void test_deferred_skips_ahead(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    const char *lims[] = {"r", NULL};
    sluice_recurring_info ri;
    int ran = 0;

    (void)unused;
    fx_rate(e, "r", 1, 10 * SEC, 1, NULL);
    fx_type(e, "job", lims);
    add(e, "s", "job", SEC, NULL, 0, 0, T0);
    assert_int_equal(run_at(e, T0), 1);
    /* T0+1: parked until T0+10; another occurrence could start at T0+20 at the earliest. */
    assert_int_equal(run_at(e, T0 + SEC), 0);
    ri = info_of(e, "s");
    assert_int_equal(ri.next_ns, T0 + 20 * SEC);
    assert_int_equal(ri.skipped, 18); /* T0+2 .. T0+19 */
    assert_int_equal(submitted(e), 2);
    for (int64_t t = 2; t < 20; t++)
        ran += run_at(e, T0 + t * SEC);
    assert_int_equal(ran, 1); /* the deferred one, at its slot */
    assert_int_equal(submitted(e), 2);
    /* The grid is the series' own: T0+20 runs, T0+21 defers, the next point is T0+40. */
    assert_int_equal(run_at(e, T0 + 20 * SEC), 1);
    assert_int_equal(run_at(e, T0 + 21 * SEC), 0);
    assert_int_equal(info_of(e, "s").next_ns, T0 + 40 * SEC);
    ran = 0;
    for (int64_t t = 22; t <= 59; t++)
        ran += run_at(e, T0 + t * SEC);
    assert_int_equal(ran, 3); /* T0+30, T0+40, T0+50: the limiter's full rate */
    ri = info_of(e, "s");
    assert_int_equal(ri.runs, 6);
    assert_int_equal(submitted(e), 6); /* one check per refill interval, not 60 */
    sluice_engine_free(e);
}

/* An occurrence refused for the horizon also moves the series to the limiter's slot: the points
 * before it would be refused the same way. */
static void test_horizon_skips_ahead(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    const char *lims[] = {"r", NULL};
    sluice_recurring_info ri;

    (void)unused;
    fx_rate_horizon(e, "r", 1, 10 * SEC, 1, NULL, 5 * SEC);
    fx_type(e, "job", lims);
    add(e, "s", "job", SEC, NULL, 0, 0, T0);
    assert_int_equal(run_at(e, T0), 1);
    assert_int_equal(run_at(e, T0 + SEC), 0); /* slot T0+10 is 9 s away: refused */
    ri = info_of(e, "s");
    assert_int_equal(ri.next_ns, T0 + 10 * SEC);
    assert_int_equal(ri.skipped, 9); /* the refused one and T0+2 .. T0+9 */
    assert_int_equal(ri.runs, 1);
    assert_int_equal(run_at(e, T0 + 10 * SEC), 1);
    assert_int_equal(submitted(e), 3);
    sluice_engine_free(e);
}

/* A concurrency limit says nothing of when a slot frees (a release may come any time): the
 * series keeps its cadence. */
static void test_concurrency_no_skip(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    const char *lims[] = {"c", NULL};
    sluice_limit_policy p;
    sluice_delivery out[4];

    (void)unused;
    fx_limit(&p, "c", SLUICE_CONCURRENCY, 1, 0);
    fx_set_limit(e, &p);
    fx_type(e, "job", lims);
    add(e, "s", "job", SEC, NULL, 0, 0, T0);
    assert_int_equal(fx_poll(e, T0, 4, out), 1); /* holds the one slot, never acked */
    assert_int_equal(fx_poll(e, T0 + SEC, 4, out), 0);
    assert_int_equal(info_of(e, "s").next_ns, T0 + 2 * SEC);
    assert_int_equal(info_of(e, "s").skipped, 0);
    sluice_engine_free(e);
}

/* A series faster than its limit's emission interval is reported once, when it is added, as an
 * event (the engine does no I/O; the server logs it as a warning). */
static void test_too_fast_event(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    const char *lims[] = {"r", NULL};
    fx_events ev;
    sluice_recurring_spec r;
    char msg[128];

    (void)unused;
    memset(&ev, 0, sizeof ev);
    sluice_engine_on_event(e, fx_on_event, &ev);
    fx_rate(e, "r", 6, MIN, 0, NULL); /* one per 10 s */
    fx_type(e, "job", lims);
    add(e, "slow", "job", 10 * SEC, NULL, 0, 0, T0); /* as fast as the limit: fine */
    add(e, "cron", "job", 0, "* * * * *", 0, 0, T0);
    assert_int_equal(ev.n[SLUICE_EVENT_RECURRING_TOO_FAST], 0);
    add(e, "fast", "job", 2 * SEC, NULL, 0, 0, T0 + 1);
    assert_int_equal(ev.n[SLUICE_EVENT_RECURRING_TOO_FAST], 1);
    assert_string_equal(ev.last_limit[SLUICE_EVENT_RECURRING_TOO_FAST], "r");
    assert_string_equal(ev.last_key[SLUICE_EVENT_RECURRING_TOO_FAST], "fast");
    assert_int_equal(ev.last[SLUICE_EVENT_RECURRING_TOO_FAST].wanted, 2 * SEC);
    assert_int_equal(ev.last[SLUICE_EVENT_RECURRING_TOO_FAST].granted, 10 * SEC);
    assert_int_equal(ev.last[SLUICE_EVENT_RECURRING_TOO_FAST].at_ns, T0 + 1);
    /* Running it says nothing more; a restore (not a creation) says nothing. */
    for (int64_t t = 0; t < 30; t++)
        run_at(e, T0 + t * SEC);
    memset(&r, 0, sizeof r);
    r.name = "again";
    r.type = "job";
    r.interval_ns = SEC;
    assert_int_equal(sluice_engine_restore_recurring(e, &r, 0, 0, T0 + 30 * SEC, msg, sizeof msg),
                     SLUICE_OK);
    assert_int_equal(ev.n[SLUICE_EVENT_RECURRING_TOO_FAST], 1);
    /* A cron series counts its shortest gap. */
    fx_rate(e, "r", 1, 2 * MIN, 0, NULL);
    add(e, "cron2", "job", 0, "* * * * *", 0, 0, T0 + 60 * MIN);
    assert_int_equal(ev.n[SLUICE_EVENT_RECURRING_TOO_FAST], 2);
    assert_int_equal(ev.last[SLUICE_EVENT_RECURRING_TOO_FAST].wanted, MIN);
    assert_int_equal(ev.last[SLUICE_EVENT_RECURRING_TOO_FAST].granted, 2 * MIN);
    sluice_engine_free(e);
}

/* Adding a series too fast for a chain longer than the pace check's stack, then deferring its
 * occurrences: every allocation failure is SLUICE_ENOMEM and leaks nothing; the pace check and
 * the skip ahead allocate nothing they could leave behind. */
static int pace_oom_body(void *arg)
{
    static const char *const names[] = {"l0", "l1", "l2", "l3", "l4", "l5", "l6", "l7", "l8", NULL};
    sluice_engine *e = NULL;
    sluice_limit_policy p;
    sluice_type_policy t;
    sluice_recurring_spec r;
    sluice_delivery out[4];
    fx_events *ev = arg;
    char msg[128];
    int rc;

    rc = sluice_engine_new(NULL, &e);
    if (rc != SLUICE_OK)
        return rc;
    sluice_engine_on_event(e, fx_on_event, ev);
    for (int i = 0; names[i] && rc == SLUICE_OK; i++) {
        fx_limit(&p, names[i], SLUICE_RATE, 1, 10 * SEC);
        p.def.burst = 1;
        p.key_source = SLUICE_KEY_PATH;
        p.key_path = "u";
        rc = sluice_engine_set_limit(e, &p, T0, msg, sizeof msg);
    }
    if (rc == SLUICE_OK) {
        sluice_type_policy_init(&t);
        t.name = "job";
        t.limits = (char **)names;
        t.nlimits = 9;
        rc = sluice_engine_set_type(e, &t, T0, msg, sizeof msg);
    }
    if (rc == SLUICE_OK) {
        memset(&r, 0, sizeof r);
        r.name = "s";
        r.type = "job";
        r.payload = "{\"u\":\"a\"}";
        r.payload_len = strlen(r.payload);
        r.interval_ns = SEC;
        rc = sluice_engine_add_recurring(e, &r, T0, msg, sizeof msg);
    }
    for (int64_t i = 0; i < 3 && rc == SLUICE_OK; i++) {
        rc = sluice_engine_tick(e, T0 + i * SEC);
        if (rc == SLUICE_OK) {
            int n = sluice_engine_poll(e, NULL, 0, 4, T0 + i * SEC, out);

            rc = n < 0 ? n : SLUICE_OK;
        }
    }
    sluice_engine_free(e);
    return rc;
}

static void test_pace_oom(void **unused)
{
    fx_events ev;

    (void)unused;
    memset(&ev, 0, sizeof ev);
    assert_true(oom_sweep(pace_oom_body, &ev, 100000) > 1);
    assert_true(ev.n[SLUICE_EVENT_RECURRING_TOO_FAST] >= 1); /* the run that succeeded */
}

static void test_delete_cancels_queued(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    sluice_recurring_info ri;
    sluice_engine_stats st;

    (void)unused;
    add(e, "s", "job", 10 * SEC, NULL, 0, 0, T0);
    assert_int_equal(sluice_engine_tick(e, T0), SLUICE_OK);
    sluice_engine_get_stats(e, &st);
    assert_int_equal(st.queued, 1);
    assert_int_equal(sluice_engine_del_recurring(e, "s", T0), SLUICE_OK);
    sluice_engine_get_stats(e, &st);
    assert_int_equal(st.queued, 0);
    assert_int_equal(st.cancelled, 1);
    assert_int_equal(sluice_engine_recurring_info(e, "s", &ri), SLUICE_ENOTFOUND);
    assert_int_equal(sluice_engine_del_recurring(e, "s", T0), SLUICE_ENOTFOUND);
    /* Re-adding a name replaces the series. */
    add(e, "s", "job", 10 * SEC, NULL, 0, 0, T0);
    add(e, "s", "job", 20 * SEC, NULL, 0, 0, T0 + SEC);
    assert_int_equal(info_of(e, "s").next_ns, T0 + SEC);
    sluice_engine_free(e);
}

static void test_add_errors(void **unused)
{
    sluice_engine_policy pol;
    sluice_engine *e;
    sluice_recurring_spec r;
    char msg[256];

    (void)unused;
    sluice_engine_policy_init(&pol);
    pol.strict_types = 1;
    e = fx_engine(&pol);
    fx_type(e, "job", NULL);
    memset(&r, 0, sizeof r);
    r.name = "s";
    r.type = "job";
    assert_int_equal(sluice_engine_add_recurring(e, &r, T0, msg, sizeof msg), SLUICE_EINVAL);
    r.interval_ns = SEC;
    r.cron = "* * * * *";
    assert_int_equal(sluice_engine_add_recurring(e, &r, T0, msg, sizeof msg), SLUICE_EINVAL);
    r.interval_ns = 0;
    r.cron = "61 * * * *";
    assert_int_equal(sluice_engine_add_recurring(e, &r, T0, msg, sizeof msg), SLUICE_EINVAL);
    assert_non_null(strstr(msg, "minute"));
    r.cron = "* * * * *";
    r.type = "unknown";
    assert_int_equal(sluice_engine_add_recurring(e, &r, T0, msg, sizeof msg), SLUICE_ENOTFOUND);
    assert_non_null(strstr(msg, "unknown"));
    r.type = "job";
    r.payload = "{";
    r.payload_len = 1;
    assert_int_equal(sluice_engine_add_recurring(e, &r, T0, msg, sizeof msg), SLUICE_EINVAL);
    r.payload = NULL;
    r.payload_len = 0;
    r.start_ns = T0 + MIN;
    r.end_ns = T0;
    assert_int_equal(sluice_engine_add_recurring(e, &r, T0, msg, sizeof msg), SLUICE_EINVAL);
    r.end_ns = 0;
    assert_int_equal(sluice_engine_add_recurring(e, &r, T0, msg, sizeof msg), SLUICE_OK);
    assert_int_equal(info_of(e, "s").next_ns, T0 + MIN);
    sluice_engine_free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_interval_max_runs),
        cmocka_unit_test(test_cron_schedule),
        cmocka_unit_test(test_skipped_past_end),
        cmocka_unit_test(test_max_runs_counts_started_only),
        cmocka_unit_test(test_started_occurrence_retries),
        cmocka_unit_test(test_missed_points_skipped),
        cmocka_unit_test(test_delete_cancels_queued),
        cmocka_unit_test(test_add_errors),
        cmocka_unit_test(test_deferred_skips_ahead),
        cmocka_unit_test(test_horizon_skips_ahead),
        cmocka_unit_test(test_concurrency_no_skip),
        cmocka_unit_test(test_too_fast_event),
        cmocka_unit_test(test_pace_oom),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
