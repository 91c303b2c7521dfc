/* SPDX-License-Identifier: MIT */
/*
 * Tests of recurring series in the engine, on a simulated clock: interval and cron schedules,
 * max_runs counting only occurrences that started, occurrences skipped when their slot falls
 * after the series' end or beyond the horizon (the rhythm kept: the next occurrence comes from
 * the schedule), points missed without a tick, removal cancelling queued occurrences, and the
 * errors of add_recurring.
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
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
