/* SPDX-License-Identifier: MIT */
/*
 * The reservation horizon counts a task's place in its key's queue (issue 13, item 2), on the
 * simulated clock: a task that would park behind others fails with reason `horizon` when the
 * units ahead of it put its start beyond the horizon, as the first in line does; those within
 * it run in order at the start EXPLAIN gave; a more urgent task inserted ahead pushes the tail
 * past the horizon and fails it then; and, over random loads of one priority polled at each
 * submit and wake, no task starts later than its submit time plus the horizon.
 */
#include <string.h>

#include "engine_fixture.h"

#define NTASKS 10

static void assert_horizon(const sluice_engine *e, uint64_t id)
{
    sluice_task_info info;
    sluice_explanation ex;

    assert_int_equal(sluice_engine_task_info(e, id, &info), SLUICE_OK);
    assert_int_equal(info.state, SLUICE_TASK_FAILED);
    assert_int_equal(info.failure.reason, SLUICE_FAIL_HORIZON);
    assert_string_equal(sluice_fail_reason_name(info.failure.reason), "horizon");
    assert_int_equal(sluice_engine_explain(e, id, T0, &ex), SLUICE_OK);
    assert_non_null(strstr(ex.text, "horizon"));
}

/* The scenario: 15 s horizon, one task per 4 s, ten tasks at once: the tenth would
 * start at 36 s. Those at 0, 4, 8, 12 s run, in order; the six past 15 s fail at once. */
static void test_queue_place_counts(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    const char *lims[] = {"api", NULL};
    sluice_delivery out[NTASKS];
    sluice_explanation ex;
    uint64_t id[NTASKS];

    (void)unused;
    fx_rate_horizon(e, "api", 15, MIN, 1, "user", 15 * SEC);
    fx_type(e, "t", lims);
    for (int i = 0; i < NTASKS; i++)
        id[i] = fx_submit(e, "t", "{\"user\":\"ann\"}", T0);
    assert_int_equal(fx_poll(e, T0, NTASKS, out), 1);
    assert_int_equal(out[0].id, id[0]);
    for (int i = 1; i < 4; i++) {
        assert_int_equal(fx_state(e, id[i]), SLUICE_TASK_PARKED);
        assert_int_equal(sluice_engine_explain(e, id[i], T0, &ex), SLUICE_OK);
        assert_int_equal(ex.estimated_start_ns, T0 + 4 * i * SEC);
    }
    for (int i = 4; i < NTASKS; i++)
        assert_horizon(e, id[i]);
    /* Each parked task starts when EXPLAIN said, in submit order. */
    for (int i = 1; i < 4; i++) {
        assert_int_equal(fx_poll(e, T0 + 4 * i * SEC - 1, NTASKS, out), 0);
        assert_int_equal(fx_poll(e, T0 + 4 * i * SEC, NTASKS, out), 1);
        assert_int_equal(out[0].id, id[i]);
    }
    sluice_engine_free(e);
}

/* The first in line is checked as before: its own slot against the horizon. */
static void test_first_in_line_unchanged(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    const char *lims[] = {"api", NULL};
    sluice_delivery out[4];
    sluice_task_info info;
    uint64_t a, b, c;

    (void)unused;
    fx_rate_horizon(e, "api", 1, 20 * SEC, 1, "user", 15 * SEC);
    fx_type(e, "t", lims);
    a = fx_submit(e, "t", "{\"user\":\"ann\"}", T0);
    b = fx_submit(e, "t", "{\"user\":\"ann\"}", T0);
    assert_int_equal(fx_poll(e, T0, 4, out), 1);
    assert_int_equal(out[0].id, a);
    assert_horizon(e, b);
    assert_int_equal(sluice_engine_task_info(e, b, &info), SLUICE_OK);
    assert_int_equal(info.failure.retry_after_ns, 20 * SEC);
    /* Within the horizon it parks and runs at its slot. */
    c = fx_submit(e, "t", "{\"user\":\"ann\"}", T0 + 10 * SEC);
    assert_int_equal(fx_poll(e, T0 + 10 * SEC, 4, out), 0);
    assert_int_equal(fx_state(e, c), SLUICE_TASK_PARKED);
    assert_int_equal(fx_poll(e, T0 + 20 * SEC, 4, out), 1);
    assert_int_equal(out[0].id, c);
    sluice_engine_free(e);
}

/* A more urgent task parks ahead of a queue: the tasks it pushes past the horizon fail then,
 * the others keep their place. */
static void test_urgent_insert_pushes_tail_out(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    const char *lims[] = {"api", NULL};
    sluice_delivery out[8];
    sluice_task_spec s;
    uint64_t id[4], high;

    (void)unused;
    fx_rate_horizon(e, "api", 15, MIN, 1, "user", 15 * SEC);
    fx_type(e, "t", lims);
    for (int i = 0; i < 4; i++)
        id[i] = fx_submit(e, "t", "{\"user\":\"ann\"}", T0);
    assert_int_equal(fx_poll(e, T0, 8, out), 1);
    /* id[3] would start at 12 s; one more ahead of it makes that 16 s. */
    memset(&s, 0, sizeof s);
    s.type = "t";
    s.payload = "{\"user\":\"ann\"}";
    s.payload_len = strlen(s.payload);
    s.has_priority = 1;
    s.priority = 5;
    high = fx_submit_spec(e, &s, T0);
    assert_int_equal(fx_poll(e, T0, 8, out), 0);
    assert_int_equal(fx_state(e, high), SLUICE_TASK_PARKED);
    assert_int_equal(fx_state(e, id[1]), SLUICE_TASK_PARKED);
    assert_int_equal(fx_state(e, id[2]), SLUICE_TASK_PARKED);
    assert_horizon(e, id[3]);
    assert_int_equal(fx_poll(e, T0 + 4 * SEC, 8, out), 1);
    assert_int_equal(out[0].id, high);
    assert_int_equal(fx_poll(e, T0 + 8 * SEC, 8, out), 1);
    assert_int_equal(out[0].id, id[1]);
    assert_int_equal(fx_poll(e, T0 + 12 * SEC, 8, out), 1);
    assert_int_equal(out[0].id, id[2]);
    sluice_engine_free(e);
}

/* ---- Property: no task starts later than submit + horizon ------------------------------------ */

#define PROP_TASKS 600
#define PROP_KEYS  3

static uint64_t rng_next(uint64_t *s)
{
    *s = *s * 6364136223846793005u + 1442695040888963407u;
    return *s >> 33;
}

/* Checks and acks what a poll at `at` delivered (acked at once, keeping the charge,
 * so no lease expiry redelivers it); returns how many. */
static int take(sluice_engine *e, const sluice_delivery *out, int n, int64_t at,
                const int64_t *submitted, int64_t horizon)
{
    for (int k = 0; k < n; k++) {
        assert_true(out[k].id >= 1 && out[k].id <= PROP_TASKS);
        assert_true(at <= submitted[out[k].id] + horizon);
        assert_int_equal(sluice_engine_ack(e, out[k].id, -1, at), SLUICE_OK);
    }
    return n;
}

/* Polls at every wake the engine asks for up to `until`; returns how many started. */
static int64_t poll_wakes(sluice_engine *e, int64_t until, const int64_t *submitted,
                          int64_t horizon)
{
    sluice_delivery out[16];
    int64_t started = 0, w;

    while ((w = sluice_engine_next_wake(e)) <= until && w != SLUICE_NEVER) {
        int n = fx_poll(e, w, 16, out);

        started += take(e, out, n, w, submitted, horizon);
        if (n == 0 && sluice_engine_next_wake(e) <= w)
            fail_msg("the engine asks to be woken at %lld again and delivers nothing",
                     (long long)w);
    }
    return started;
}

static void test_prop_start_within_horizon(void **unused)
{
    static int64_t submitted[PROP_TASKS + 1];
    static uint64_t ids[PROP_TASKS];
    int64_t all_failed = 0, all_started = 0;

    (void)unused;
    for (uint64_t seed = 1; seed <= 20; seed++) {
        sluice_engine_policy pol;
        sluice_engine *e;
        const char *lims[] = {"api", NULL};
        sluice_delivery out[16];
        uint64_t rng = seed;
        int64_t horizon = (int64_t)(5 + rng_next(&rng) % 30) * SEC;
        int64_t now = T0, started = 0, failed = 0;

        sluice_engine_policy_init(&pol);
        pol.max_finished = 2 * PROP_TASKS;
        e = fx_engine(&pol);
        fx_rate_horizon(e, "api", (int64_t)(1 + rng_next(&rng) % 5), 10 * SEC,
                        /* a burst of 2 or more: every task's 1 or 2 units fit */
                        (int64_t)(2 + rng_next(&rng) % 3), "user", horizon);
        fx_type(e, "t", lims);
        for (int i = 0; i < PROP_TASKS; i++) {
            char payload[32];
            sluice_task_spec s;

            memset(&s, 0, sizeof s);
            snprintf(payload, sizeof payload, "{\"user\":\"u%d\"}",
                     (int)(rng_next(&rng) % PROP_KEYS));
            s.type = "t";
            s.payload = payload;
            s.payload_len = strlen(payload);
            s.units = (int64_t)(1 + rng_next(&rng) % 2);
            /* Odd seeds overrun the rate (most fail), even ones mostly keep up with it. */
            now += (int64_t)(rng_next(&rng) % (seed % 2 ? 600 : 4000)) * MS;
            started += poll_wakes(e, now, submitted, horizon);
            ids[i] = fx_submit_spec(e, &s, now);
            assert_true(ids[i] >= 1 && ids[i] <= PROP_TASKS);
            submitted[ids[i]] = now;
            started += take(e, out, fx_poll(e, now, 16, out), now, submitted, horizon);
        }
        started += poll_wakes(e, INT64_MAX - 1, submitted, horizon);
        for (int i = 0; i < PROP_TASKS; i++) {
            sluice_task_info info;

            assert_int_equal(sluice_engine_task_info(e, ids[i], &info), SLUICE_OK);
            if (info.state == SLUICE_TASK_FAILED) {
                assert_int_equal(info.failure.reason, SLUICE_FAIL_HORIZON);
                failed++;
            } else {
                assert_int_equal(info.state, SLUICE_TASK_DONE);
            }
        }
        assert_int_equal(started + failed, PROP_TASKS);
        all_failed += failed;
        all_started += started;
        sluice_engine_free(e);
    }
    /* The loads overrun the rate: both outcomes were exercised. */
    assert_true(all_failed > 0);
    assert_true(all_started > 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_queue_place_counts),
        cmocka_unit_test(test_first_in_line_unchanged),
        cmocka_unit_test(test_urgent_insert_pushes_tail_out),
        cmocka_unit_test(test_prop_start_within_horizon),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
