/* SPDX-License-Identifier: MIT */
/*
 * Tests of the dispatch engine's core path (submit -> poll -> gate -> park/deliver/fail), on a
 * simulated clock: every test sets now and never sleeps.
 *
 * Seed 003's timeline (15 at once, then one every 4 s; Burst 1; StartEmpty), seed 001's weights
 * (a heavy task is not overtaken by light ones behind it), no head-of-line blocking with 100,000
 * tasks parked on one key, a lost worker (redelivery redeems the grant), retries with backoff and
 * throttle_retries both ways, cancel and replace while parked, task keys, reject / horizon /
 * never with the denial's fields, explain, and event aggregation.
 */
#include "engine_fixture.h"

#include "testutil.h"

/* ---- Seed 003: the GCRA timeline through the engine ------------------------------------------ */

/* 20 tasks for one idle key, 15/min: 15 run at once, then one every 4 s; nothing in between. */
static void test_seed003_timeline(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    const char *lims[] = {"tenant", NULL};
    sluice_delivery out[32];
    int total = 0;

    (void)unused;
    fx_rate(e, "tenant", 15, MIN, 0, "input.tenant_id");
    fx_type(e, "sync", lims);
    for (int i = 0; i < 20; i++)
        fx_submit(e, "sync", "{\"tenant_id\":\"acme\"}", T0);
    assert_int_equal(fx_poll(e, T0, 32, out), 15);
    for (int i = 0; i < 15; i++)
        assert_int_equal(sluice_engine_ack(e, out[i].id, -1, T0), SLUICE_OK);
    total = 15;
    for (int k = 1; k <= 5; k++) {
        int64_t at = T0 + k * 4 * SEC;

        /* Nothing between the slots... */
        assert_int_equal(fx_poll(e, at - 2 * SEC, 32, out), 0);
        assert_int_equal(fx_poll(e, at - 1, 32, out), 0);
        /* ...and exactly one at each. */
        assert_int_equal(fx_poll(e, at, 32, out), 1);
        assert_int_equal(sluice_engine_ack(e, out[0].id, -1, at), SLUICE_OK);
        total++;
    }
    assert_int_equal(total, 20);
    assert_int_equal(fx_poll(e, T0 + 30 * SEC, 32, out), 0);
    sluice_engine_free(e);
}

/* Run a 20-task backlog with the given burst / start_empty; record delivery times. */
static void run_backlog(int64_t burst, int start_empty, int64_t *times, int n)
{
    sluice_engine *e = fx_engine(NULL);
    const char *lims[] = {"tenant", NULL};
    sluice_limit_policy p;
    sluice_delivery out[32];
    int got = 0;

    fx_limit(&p, "tenant", SLUICE_RATE, 15, MIN);
    p.def.burst = burst;
    p.def.start_empty = start_empty;
    p.key_source = SLUICE_KEY_PATH;
    p.key_path = "tenant_id";
    fx_set_limit(e, &p);
    fx_type(e, "sync", lims);
    for (int i = 0; i < n; i++)
        fx_submit(e, "sync", "{\"tenant_id\":\"acme\"}", T0);
    /* Poll every 500 ms for two minutes. */
    for (int64_t t = T0; t <= T0 + 2 * MIN && got < n; t += 500 * MS) {
        int k = fx_poll(e, t, 32, out);

        for (int i = 0; i < k; i++) {
            times[got++] = t;
            sluice_engine_ack(e, out[i].id, -1, t);
        }
    }
    assert_int_equal(got, n);
    sluice_engine_free(e);
}

static void test_seed003_burst_one(void **unused)
{
    int64_t times[20];

    (void)unused;
    run_backlog(1, 0, times, 20);
    for (int i = 0; i < 20; i++)
        assert_int_equal(times[i], T0 + i * 4 * SEC);
}

static void test_seed003_start_empty(void **unused)
{
    int64_t times[20];

    (void)unused;
    run_backlog(15, 1, times, 20);
    /* The first task runs at once, every following one at the steady pace. */
    for (int i = 0; i < 20; i++)
        assert_int_equal(times[i], T0 + i * 4 * SEC);
}

/* ---- Seed 001: weights and strict priority --------------------------------------------------- */

static void test_seed001_heavy_not_starved(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    const char *lims[] = {"stripe", NULL};
    sluice_task_spec s;
    sluice_delivery out[64];
    uint64_t heavy, light[10];
    int n;

    (void)unused;
    fx_rate(e, "stripe", 100, MIN, 0, NULL); /* T = 0.6 s, burst 100 */
    fx_type(e, "charge", lims);
    memset(&s, 0, sizeof s);
    s.type = "charge";
    s.units = 50;
    fx_submit_spec(e, &s, T0);
    fx_submit_spec(e, &s, T0);
    heavy = fx_submit_spec(e, &s, T0);
    s.units = 1;
    for (int i = 0; i < 10; i++)
        light[i] = fx_submit_spec(e, &s, T0);
    /* The two first heavy tasks take the whole burst. */
    assert_int_equal(fx_poll(e, T0, 64, out), 2);
    assert_int_equal(sluice_engine_ack(e, out[0].id, -1, T0), SLUICE_OK);
    assert_int_equal(sluice_engine_ack(e, out[1].id, -1, T0), SLUICE_OK);
    assert_int_equal(fx_state(e, heavy), SLUICE_TASK_PARKED);
    /* The light tasks behind it do not overtake it, though each alone would fit long before. */
    for (int64_t t = T0 + SEC; t < T0 + 30 * SEC; t += SEC) {
        assert_int_equal(fx_poll(e, t, 64, out), 0);
        for (int i = 0; i < 10; i++)
            assert_int_equal(fx_state(e, light[i]), SLUICE_TASK_PARKED);
    }
    /* 50 units refill in 30 s: the heavy task goes first. */
    n = fx_poll(e, T0 + 30 * SEC, 64, out);
    assert_int_equal(n, 1);
    assert_int_equal(out[0].id, heavy);
    assert_int_equal(sluice_engine_ack(e, heavy, -1, T0 + 30 * SEC), SLUICE_OK);
    /* Then the light ones, one per 0.6 s, in order. */
    for (int i = 0; i < 10; i++) {
        int64_t at = T0 + 30 * SEC + (i + 1) * 600 * MS;

        assert_int_equal(fx_poll(e, at - 1, 64, out), 0);
        assert_int_equal(fx_poll(e, at, 64, out), 1);
        assert_int_equal(out[0].id, light[i]);
        assert_int_equal(sluice_engine_ack(e, light[i], -1, at), SLUICE_OK);
    }
    sluice_engine_free(e);
}

/* A more urgent task submitted later is not blocked by less urgent parked ones. */
static void test_priority_overtakes_parked(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    const char *lims[] = {"r", NULL};
    sluice_task_spec s;
    sluice_delivery out[8];
    uint64_t low, high;

    (void)unused;
    fx_rate(e, "r", 1, 10 * SEC, 1, NULL);
    fx_type(e, "t", lims);
    memset(&s, 0, sizeof s);
    s.type = "t";
    fx_submit_spec(e, &s, T0);
    low = fx_submit_spec(e, &s, T0);
    assert_int_equal(fx_poll(e, T0, 8, out), 1);
    assert_int_equal(fx_state(e, low), SLUICE_TASK_PARKED);
    s.has_priority = 1;
    s.priority = 5;
    high = fx_submit_spec(e, &s, T0 + SEC);
    assert_int_equal(fx_poll(e, T0 + SEC, 8, out), 0);
    assert_int_equal(fx_state(e, high), SLUICE_TASK_PARKED);
    assert_int_equal(fx_poll(e, T0 + 10 * SEC, 8, out), 1);
    assert_int_equal(out[0].id, high);
    assert_int_equal(fx_poll(e, T0 + 20 * SEC, 8, out), 1);
    assert_int_equal(out[0].id, low);
    sluice_engine_free(e);
}

/* ---- No head-of-line blocking ---------------------------------------------------------------- */

static void test_no_head_of_line_blocking(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    const char *lims[] = {"tenant", NULL};
    sluice_delivery out[8];
    sluice_engine_stats st;
    uint64_t other_key, other_type;
    int n;

    (void)unused;
    /* 99,999 minutes of queue: all must wait, none be refused for the horizon. */
    fx_rate_horizon(e, "tenant", 1, MIN, 1, "tenant", 100000 * MIN);
    fx_type(e, "sync", lims);
    for (int i = 0; i < 100000; i++)
        fx_submit(e, "sync", "{\"tenant\":\"a\"}", T0);
    assert_int_equal(fx_poll(e, T0, 8, out), 1);
    sluice_engine_get_stats(e, &st);
    assert_int_equal(st.parked, 99999);
    assert_int_equal(st.queued, 0);
    other_key = fx_submit(e, "sync", "{\"tenant\":\"b\"}", T0 + 1);
    other_type = fx_submit(e, "mail", NULL, T0 + 1);
    n = sluice_engine_poll(e, NULL, 0, 8, T0 + 1, out);
    assert_int_equal(n, 2);
    assert_true((out[0].id == other_key && out[1].id == other_type) ||
                (out[1].id == other_key && out[0].id == other_type));
    /* A poll restricted to one type sees only it. */
    fx_submit(e, "mail", NULL, T0 + 2);
    {
        const char *types[] = {"sync"};

        assert_int_equal(sluice_engine_poll(e, types, 1, 8, T0 + 2, out), 0);
    }
    sluice_engine_free(e);
}

/* ---- Lost workers: exactly-once grant -------------------------------------------------------- */

static void test_lease_expiry_redelivers_without_charge(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    const char *lims[] = {"r", NULL};
    sluice_delivery out[8];
    sluice_engine_stats st;
    uint64_t a, b, c;

    (void)unused;
    fx_rate(e, "r", 2, MIN, 2, NULL);
    fx_type_ex(e, "t", lims, 3, 1, 10 * SEC);
    a = fx_submit(e, "t", NULL, T0);
    assert_int_equal(fx_poll(e, T0, 8, out), 1);
    assert_int_equal(out[0].id, a);
    assert_int_equal(out[0].lease_until_ns, T0 + 10 * SEC);
    assert_int_equal(sluice_engine_next_wake(e) <= T0 + 10 * SEC, 1);
    /* The worker disappears: no ack. */
    assert_int_equal(fx_poll(e, T0 + 10 * SEC, 8, out), 1);
    assert_int_equal(out[0].id, a);
    assert_int_equal(out[0].attempt, 2);
    sluice_engine_get_stats(e, &st);
    assert_int_equal(st.redelivered, 1);
    /* One unit left: a second charge for a would have left none. */
    b = fx_submit(e, "t", NULL, T0 + 10 * SEC);
    c = fx_submit(e, "t", NULL, T0 + 10 * SEC);
    assert_int_equal(fx_poll(e, T0 + 10 * SEC, 8, out), 1);
    assert_int_equal(out[0].id, b);
    assert_int_equal(fx_state(e, c), SLUICE_TASK_PARKED);
    /* The old delivery can no longer be acked twice. */
    assert_int_equal(sluice_engine_ack(e, a, -1, T0 + 11 * SEC), SLUICE_OK);
    assert_int_equal(sluice_engine_ack(e, a, -1, T0 + 11 * SEC), SLUICE_ESTATE);
    assert_int_equal(sluice_engine_ack(e, 999, -1, T0 + 11 * SEC), SLUICE_ENOTFOUND);
    sluice_engine_free(e);
}

static void test_touch_extends_lease(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    sluice_delivery out[2];
    int64_t until;
    uint64_t id;

    (void)unused;
    fx_type_ex(e, "t", NULL, 3, 1, 10 * SEC);
    id = fx_submit(e, "t", NULL, T0);
    assert_int_equal(fx_poll(e, T0, 2, out), 1);
    assert_int_equal(sluice_engine_touch(e, id, T0 + 8 * SEC, &until), SLUICE_OK);
    assert_int_equal(until, T0 + 18 * SEC);
    assert_int_equal(fx_poll(e, T0 + 12 * SEC, 2, out), 0);
    assert_int_equal(fx_state(e, id), SLUICE_TASK_RUNNING);
    assert_int_equal(fx_poll(e, T0 + 18 * SEC, 2, out), 1);
    sluice_engine_free(e);
}

/* ---- Retries --------------------------------------------------------------------------------- */

static void test_retry_fixed_backoff_and_attempts(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    sluice_type_policy t;
    sluice_delivery out[2];
    sluice_task_info info;
    char msg[128];
    uint64_t id;

    (void)unused;
    sluice_type_policy_init(&t);
    t.name = "t";
    t.retry.max_attempts = 3;
    t.retry.backoff = SLUICE_BACKOFF_FIXED;
    t.retry.base_ns = 5 * SEC;
    assert_int_equal(sluice_engine_set_type(e, &t, T0, msg, sizeof msg), SLUICE_OK);
    id = fx_submit(e, "t", NULL, T0);
    assert_int_equal(fx_poll(e, T0, 2, out), 1);
    assert_int_equal(sluice_engine_fail(e, id, SLUICE_FAIL_MODE_RETRY, "boom", T0), SLUICE_OK);
    assert_int_equal(fx_state(e, id), SLUICE_TASK_QUEUED);
    assert_int_equal(fx_poll(e, T0 + 5 * SEC - 1, 2, out), 0);
    assert_int_equal(fx_poll(e, T0 + 5 * SEC, 2, out), 1);
    assert_int_equal(out[0].attempt, 2);
    assert_int_equal(sluice_engine_fail(e, id, SLUICE_FAIL_MODE_RETRY, NULL, T0 + 5 * SEC),
                     SLUICE_OK);
    assert_int_equal(fx_poll(e, T0 + 10 * SEC, 2, out), 1);
    assert_int_equal(out[0].attempt, 3);
    assert_int_equal(sluice_engine_fail(e, id, SLUICE_FAIL_MODE_RETRY, "third", T0 + 10 * SEC),
                     SLUICE_OK);
    assert_int_equal(sluice_engine_task_info(e, id, &info), SLUICE_OK);
    assert_int_equal(info.state, SLUICE_TASK_FAILED);
    assert_int_equal(info.failure.reason, SLUICE_FAIL_ATTEMPTS);
    assert_string_equal(info.fail_message, "third");
    assert_int_equal(sluice_engine_fail(e, id, SLUICE_FAIL_MODE_RETRY, NULL, T0 + 10 * SEC),
                     SLUICE_ESTATE);
    sluice_engine_free(e);
}

/* A worker told by its upstream to come back later: the retry waits at least that long (or the
 * backoff, when longer), and such failures never use up the task's attempts. */
static void test_retry_after_upstream(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    sluice_type_policy t;
    sluice_delivery out[2];
    char msg[128];
    uint64_t id;
    int64_t now = T0;

    (void)unused;
    sluice_type_policy_init(&t);
    t.name = "t";
    t.retry.max_attempts = 2;
    t.retry.backoff = SLUICE_BACKOFF_FIXED;
    t.retry.base_ns = 5 * SEC;
    assert_int_equal(sluice_engine_set_type(e, &t, T0, msg, sizeof msg), SLUICE_OK);
    id = fx_submit(e, "t", NULL, T0);
    /* Four 429s in a row, past max_attempts: the task keeps coming back. */
    for (int i = 0; i < 4; i++) {
        assert_int_equal(fx_poll(e, now, 2, out), 1);
        assert_int_equal(out[0].attempt, i + 1);
        assert_int_equal(sluice_engine_fail_retry_after(e, id, 30 * SEC, "429", now), SLUICE_OK);
        assert_int_equal(fx_state(e, id), SLUICE_TASK_QUEUED);
        assert_int_equal(fx_poll(e, now + 30 * SEC - 1, 2, out), 0);
        now += 30 * SEC;
    }
    /* A Retry-After shorter than the backoff: the backoff wins. */
    assert_int_equal(fx_poll(e, now, 2, out), 1);
    assert_int_equal(sluice_engine_fail_retry_after(e, id, SEC, NULL, now), SLUICE_OK);
    assert_int_equal(fx_poll(e, now + 5 * SEC - 1, 2, out), 0);
    assert_int_equal(fx_poll(e, now + 5 * SEC, 2, out), 1);
    now += 5 * SEC;
    assert_int_equal(sluice_engine_fail_retry_after(e, id, -1, NULL, now), SLUICE_EINVAL);
    assert_int_equal(fx_state(e, id), SLUICE_TASK_RUNNING);
    /* An ordinary failure still ends it: its deliveries are past max_attempts. */
    assert_int_equal(sluice_engine_fail(e, id, SLUICE_FAIL_MODE_RETRY, NULL, now), SLUICE_OK);
    assert_int_equal(fx_state(e, id), SLUICE_TASK_FAILED);
    assert_int_equal(sluice_engine_fail_retry_after(e, id, SEC, NULL, now), SLUICE_ESTATE);
    sluice_engine_free(e);
}

static void test_retry_exponential_and_dead(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    sluice_type_policy t;
    sluice_delivery out[2];
    sluice_task_info info;
    char msg[128];
    uint64_t id;
    int64_t now = T0;

    (void)unused;
    sluice_type_policy_init(&t);
    t.name = "t";
    t.retry.max_attempts = 6;
    t.retry.backoff = SLUICE_BACKOFF_EXPONENTIAL;
    t.retry.base_ns = SEC;
    t.retry.max_ns = 5 * SEC;
    assert_int_equal(sluice_engine_set_type(e, &t, T0, msg, sizeof msg), SLUICE_OK);
    id = fx_submit(e, "t", NULL, now);
    assert_int_equal(fx_poll(e, now, 2, out), 1);
    /* Backoffs 1, 2, 4, then capped at 5 s. */
    {
        static const int64_t waits[] = {1, 2, 4, 5};

        for (size_t i = 0; i < 4; i++) {
            assert_int_equal(sluice_engine_fail(e, id, SLUICE_FAIL_MODE_RETRY, NULL, now),
                             SLUICE_OK);
            assert_int_equal(fx_poll(e, now + waits[i] * SEC - 1, 2, out), 0);
            now += waits[i] * SEC;
            assert_int_equal(fx_poll(e, now, 2, out), 1);
        }
    }
    assert_int_equal(sluice_engine_fail(e, id, SLUICE_FAIL_MODE_DEAD, "gone", now), SLUICE_OK);
    assert_int_equal(sluice_engine_task_info(e, id, &info), SLUICE_OK);
    assert_int_equal(info.failure.reason, SLUICE_FAIL_DEAD);
    assert_int_equal(info.attempt, 5);
    sluice_engine_free(e);
}

/* With throttle_retries on, a retry pays again (and waits for the slot); off, it does not. */
static void run_retry_throttle(int throttle, int64_t expect_retry_at)
{
    sluice_engine *e = fx_engine(NULL);
    const char *lims[] = {"r", NULL};
    sluice_type_policy t;
    sluice_delivery out[2];
    char msg[128];
    uint64_t id;
    int64_t at = 0;

    fx_rate(e, "r", 1, MIN, 1, NULL);
    sluice_type_policy_init(&t);
    t.name = "t";
    t.limits = (char **)lims;
    t.nlimits = 1;
    t.retry.backoff = SLUICE_BACKOFF_FIXED;
    t.retry.base_ns = SEC;
    t.retry.throttle_retries = throttle;
    assert_int_equal(sluice_engine_set_type(e, &t, T0, msg, sizeof msg), SLUICE_OK);
    id = fx_submit(e, "t", NULL, T0);
    assert_int_equal(fx_poll(e, T0, 2, out), 1);
    assert_int_equal(sluice_engine_fail(e, id, SLUICE_FAIL_MODE_RETRY, NULL, T0), SLUICE_OK);
    for (int64_t now = T0 + SEC; now <= T0 + 2 * MIN; now += SEC)
        if (fx_poll(e, now, 2, out) == 1) {
            at = now;
            break;
        }
    assert_int_equal(at, expect_retry_at);
    sluice_engine_free(e);
}

static void test_retry_throttle_on(void **unused)
{
    (void)unused;
    run_retry_throttle(1, T0 + MIN);
}

static void test_retry_throttle_off(void **unused)
{
    (void)unused;
    run_retry_throttle(0, T0 + SEC);
}

/* ---- Cancel, replace, task keys -------------------------------------------------------------- */

static void test_cancel_while_parked(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    const char *lims[] = {"r", NULL};
    sluice_delivery out[4];
    sluice_engine_stats st;
    uint64_t a, b, c;

    (void)unused;
    fx_rate(e, "r", 1, 10 * SEC, 1, NULL);
    fx_type(e, "t", lims);
    a = fx_submit(e, "t", NULL, T0);
    b = fx_submit(e, "t", NULL, T0);
    c = fx_submit(e, "t", NULL, T0);
    assert_int_equal(fx_poll(e, T0, 4, out), 1);
    assert_int_equal(out[0].id, a);
    assert_int_equal(sluice_engine_ack(e, a, -1, T0), SLUICE_OK);
    assert_int_equal(fx_state(e, b), SLUICE_TASK_PARKED);
    assert_int_equal(sluice_engine_cancel(e, b, T0 + SEC), SLUICE_OK);
    assert_int_equal(fx_state(e, b), SLUICE_TASK_CANCELLED);
    sluice_engine_get_stats(e, &st);
    assert_int_equal(st.parked, 1);
    assert_int_equal(st.cancelled, 1);
    /* c takes b's turn; b never runs. */
    assert_int_equal(fx_poll(e, T0 + 10 * SEC, 4, out), 1);
    assert_int_equal(out[0].id, c);
    assert_int_equal(fx_poll(e, T0 + 20 * SEC, 4, out), 0);
    assert_int_equal(sluice_engine_cancel(e, c, T0 + 20 * SEC), SLUICE_ESTATE); /* running */
    assert_int_equal(sluice_engine_cancel(e, b, T0 + 60 * SEC), SLUICE_ESTATE);
    assert_int_equal(sluice_engine_cancel(e, 12345, T0), SLUICE_ENOTFOUND);
    sluice_engine_free(e);
}

static void test_cancel_queued_and_delayed(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    sluice_task_spec s;
    sluice_delivery out[4];
    uint64_t a, b;

    (void)unused;
    memset(&s, 0, sizeof s);
    s.type = "t";
    a = fx_submit_spec(e, &s, T0);
    s.not_before_ns = T0 + 5 * SEC;
    b = fx_submit_spec(e, &s, T0);
    assert_int_equal(sluice_engine_cancel(e, a, T0), SLUICE_OK);
    assert_int_equal(sluice_engine_cancel(e, b, T0), SLUICE_OK);
    assert_int_equal(fx_poll(e, T0 + 10 * SEC, 4, out), 0);
    sluice_engine_free(e);
}

static void test_not_before_delays(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    sluice_task_spec s;
    sluice_delivery out[4];
    sluice_engine_stats st;

    (void)unused;
    memset(&s, 0, sizeof s);
    s.type = "t";
    s.not_before_ns = T0 + 5 * SEC;
    fx_submit_spec(e, &s, T0);
    sluice_engine_get_stats(e, &st);
    assert_int_equal(st.delayed, 1);
    assert_int_equal(sluice_engine_next_wake(e), T0 + 5 * SEC);
    assert_int_equal(fx_poll(e, T0 + 5 * SEC - 1, 4, out), 0);
    assert_int_equal(fx_poll(e, T0 + 5 * SEC, 4, out), 1);
    sluice_engine_free(e);
}

static void test_replace_payload_while_parked(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    const char *lims[] = {"r", NULL};
    sluice_task_spec s;
    sluice_delivery out[4];
    sluice_submit_error err;
    uint64_t first, parked, again, id;

    (void)unused;
    fx_rate(e, "r", 1, 10 * SEC, 1, NULL);
    fx_type(e, "t", lims);
    first = fx_submit(e, "t", NULL, T0);
    memset(&s, 0, sizeof s);
    s.type = "t";
    s.task_key = "report-42";
    s.task_key_len = strlen(s.task_key);
    s.payload = "{\"v\":1}";
    s.payload_len = strlen(s.payload);
    parked = fx_submit_spec(e, &s, T0);
    assert_int_equal(fx_poll(e, T0, 4, out), 1);
    assert_int_equal(out[0].id, first);
    assert_int_equal(fx_state(e, parked), SLUICE_TASK_PARKED);
    s.payload = "{\"v\":2}";
    again = fx_submit_spec(e, &s, T0 + SEC);
    assert_int_equal(again, parked);
    /* An invalid replacement changes nothing. */
    s.payload = "{\"v\":";
    s.payload_len = strlen(s.payload);
    assert_int_equal(sluice_engine_submit(e, &s, T0 + SEC, &id, &err), SLUICE_EINVAL);
    assert_int_equal(fx_poll(e, T0 + 10 * SEC, 4, out), 1);
    assert_int_equal(out[0].id, parked);
    assert_int_equal(out[0].payload_len, 7);
    assert_memory_equal(out[0].payload, "{\"v\":2}", 7);
    /* Running: the task key is taken. */
    s.payload = "{\"v\":3}";
    s.payload_len = strlen(s.payload);
    assert_int_equal(sluice_engine_submit(e, &s, T0 + 10 * SEC, &id, &err), SLUICE_EEXIST);
    assert_int_equal(err.existing_id, parked);
    assert_int_equal(id, 0);
    /* Finished: a new task. */
    assert_int_equal(sluice_engine_ack(e, parked, -1, T0 + 11 * SEC), SLUICE_OK);
    id = fx_submit_spec(e, &s, T0 + 11 * SEC);
    assert_true(id != parked);
    /* It ran exactly once: one delivery of it so far. */
    {
        sluice_engine_stats st;

        sluice_engine_get_stats(e, &st);
        assert_int_equal(st.delivered, 2);
    }
    sluice_engine_free(e);
}

/* ---- Terminal refusals ----------------------------------------------------------------------- */

static void test_reject_overflow_denial(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    const char *lims[] = {"breaker", NULL};
    sluice_limit_policy p;
    sluice_delivery out[4];
    sluice_task_info info;
    uint64_t ok, bad;

    (void)unused;
    fx_limit(&p, "breaker", SLUICE_RATE, 2, MIN);
    p.overflow = SLUICE_OVERFLOW_REJECT;
    p.key_source = SLUICE_KEY_EXPLICIT;
    fx_set_limit(e, &p);
    fx_type(e, "t", lims);
    {
        sluice_task_spec s;

        memset(&s, 0, sizeof s);
        s.type = "t";
        s.key = "wf-7";
        s.key_len = 4;
        ok = fx_submit_spec(e, &s, T0);
        fx_submit_spec(e, &s, T0);
        bad = fx_submit_spec(e, &s, T0);
    }
    assert_int_equal(fx_poll(e, T0, 4, out), 2);
    assert_int_equal(out[0].id, ok);
    assert_int_equal(sluice_engine_task_info(e, bad, &info), SLUICE_OK);
    assert_int_equal(info.state, SLUICE_TASK_FAILED);
    assert_int_equal(info.failure.reason, SLUICE_FAIL_RATELIMITED);
    assert_string_equal(info.failure.limit, "breaker");
    assert_string_equal(info.failure.kind, "rate");
    assert_string_equal(info.failure.key, "wf-7");
    assert_null(info.failure.tier);
    assert_int_equal(info.failure.limit_value, 2);
    assert_int_equal(info.failure.window_ns, MIN);
    assert_int_equal(info.failure.retry_after_ns, 30 * SEC);
    assert_non_null(strstr(info.fail_message, "breaker"));
    {
        sluice_engine_stats st;

        sluice_engine_get_stats(e, &st);
        assert_int_equal(st.rejected, 1);
        assert_int_equal(st.failed, 1);
    }
    sluice_engine_free(e);
}

static void test_horizon(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    const char *lims[] = {"slow", NULL};
    sluice_limit_policy p;
    sluice_delivery out[4];
    sluice_task_info info;
    uint64_t a, b;

    (void)unused;
    fx_limit(&p, "slow", SLUICE_RATE, 1, 3600 * SEC);
    p.def.horizon_ns = 30 * MIN;
    fx_set_limit(e, &p);
    fx_type(e, "t", lims);
    a = fx_submit(e, "t", NULL, T0);
    b = fx_submit(e, "t", NULL, T0);
    assert_int_equal(fx_poll(e, T0, 4, out), 1);
    assert_int_equal(out[0].id, a);
    assert_int_equal(sluice_engine_task_info(e, b, &info), SLUICE_OK);
    assert_int_equal(info.state, SLUICE_TASK_FAILED);
    assert_int_equal(info.failure.reason, SLUICE_FAIL_HORIZON);
    assert_int_equal(info.failure.retry_after_ns, 3600 * SEC);
    assert_string_equal(sluice_fail_reason_name(info.failure.reason), "horizon");
    sluice_engine_free(e);
}

static void test_units_above_burst_never(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    const char *lims[] = {"r", NULL};
    sluice_task_spec s;
    sluice_delivery out[4];
    sluice_task_info info;
    uint64_t fat, thin;

    (void)unused;
    fx_rate(e, "r", 10, MIN, 10, NULL);
    fx_type(e, "t", lims);
    memset(&s, 0, sizeof s);
    s.type = "t";
    s.units = 11;
    fat = fx_submit_spec(e, &s, T0);
    s.units = 1;
    thin = fx_submit_spec(e, &s, T0);
    /* The fat task fails at once and freezes nothing behind it. */
    assert_int_equal(fx_poll(e, T0, 4, out), 1);
    assert_int_equal(out[0].id, thin);
    assert_int_equal(sluice_engine_task_info(e, fat, &info), SLUICE_OK);
    assert_int_equal(info.failure.reason, SLUICE_FAIL_NEVER);
    assert_int_equal(info.failure.retry_after_ns, SLUICE_NEVER);
    sluice_engine_free(e);
}

/* ---- Explain --------------------------------------------------------------------------------- */

/* Explain's "in N s" of a task whose time lies across the int64 range from now (the engine takes
 * the times it is given) saturates instead of wrapping to a negative number. Found by the engine
 * fuzz target (corpus/engine/regress-explain-overflow). */
static void test_explain_far_times(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    sluice_task_spec spec;
    sluice_explanation x;
    uint64_t id;

    (void)unused;
    memset(&spec, 0, sizeof spec);
    spec.type = "far";
    spec.not_before_ns = INT64_MAX / 2;
    id = fx_submit_spec(e, &spec, T0);
    assert_int_equal(sluice_engine_explain(e, id, INT64_MIN, &x), SLUICE_OK);
    assert_int_equal(x.state, SLUICE_TASK_QUEUED);
    assert_null(strchr(x.text, '-'));
    sluice_engine_free(e);
}

static void test_explain_position_and_estimate(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    const char *lims[] = {"tenant", NULL};
    sluice_delivery out[4];
    sluice_explanation x;
    uint64_t ids[4];

    (void)unused;
    fx_rate(e, "tenant", 15, MIN, 1, "tenant");
    fx_type(e, "sync", lims);
    for (int i = 0; i < 4; i++)
        ids[i] = fx_submit(e, "sync", "{\"tenant\":\"acme\"}", T0);
    assert_int_equal(sluice_engine_explain(e, ids[0], T0, &x), SLUICE_OK);
    assert_int_equal(x.state, SLUICE_TASK_QUEUED);
    assert_true(strlen(x.text) > 10);
    assert_int_equal(fx_poll(e, T0, 4, out), 1);
    assert_int_equal(sluice_engine_explain(e, ids[2], T0 + SEC, &x), SLUICE_OK);
    assert_int_equal(x.state, SLUICE_TASK_PARKED);
    assert_string_equal(x.limit, "tenant");
    assert_string_equal(x.key, "acme");
    assert_int_equal(x.position, 1);
    assert_int_equal(x.queue_length, 3);
    assert_int_equal(x.wake_ns, T0 + 4 * SEC);
    /* One task ahead at 4 s, then this one at 8 s. */
    assert_int_equal(x.estimated_start_ns, T0 + 8 * SEC);
    assert_non_null(strstr(x.text, "acme"));
    assert_int_equal(sluice_engine_explain(e, ids[3], T0 + SEC, &x), SLUICE_OK);
    assert_int_equal(x.position, 2);
    assert_int_equal(x.estimated_start_ns, T0 + 12 * SEC);
    assert_int_equal(sluice_engine_explain(e, ids[0], T0 + SEC, &x), SLUICE_OK);
    assert_int_equal(x.state, SLUICE_TASK_RUNNING);
    assert_int_equal(sluice_engine_explain(e, 777, T0, &x), SLUICE_ENOTFOUND);
    sluice_engine_free(e);
}

/* ---- Events ---------------------------------------------------------------------------------- */

static void test_deferrals_aggregated(void **unused)
{
    sluice_engine_policy pol;
    sluice_engine *e;
    const char *lims[] = {"tenant", NULL};
    sluice_delivery out[4];
    fx_events ev;

    (void)unused;
    sluice_engine_policy_init(&pol);
    pol.event_interval_ns = 10 * SEC;
    e = fx_engine(&pol);
    memset(&ev, 0, sizeof ev);
    sluice_engine_on_event(e, fx_on_event, &ev);
    /* 1000 minutes of queue: all must wait, none be refused for the horizon. */
    fx_rate_horizon(e, "tenant", 1, MIN, 1, "tenant", 2000 * MIN);
    fx_type(e, "sync", lims);
    for (int i = 0; i < 1001; i++)
        fx_submit(e, "sync", "{\"tenant\":\"acme\"}", T0);
    assert_int_equal(fx_poll(e, T0, 4, out), 1);
    /* 1000 deferrals: one event at once... */
    assert_int_equal(ev.n[SLUICE_EVENT_DEFERRED], 1);
    assert_int_equal(ev.last[SLUICE_EVENT_DEFERRED].count, 1);
    assert_string_equal(ev.last_key[SLUICE_EVENT_DEFERRED], "acme");
    assert_int_equal(ev.last[SLUICE_EVENT_DEFERRED].next_slot_ns, T0 + MIN);
    /* ...and one THROTTLED for the poll: 1001 wanted, 1 granted. */
    assert_int_equal(ev.n[SLUICE_EVENT_THROTTLED], 1);
    assert_int_equal(ev.last[SLUICE_EVENT_THROTTLED].wanted, 1001);
    assert_int_equal(ev.last[SLUICE_EVENT_THROTTLED].granted, 1);
    /* ...then one summary at the end of the interval. */
    assert_int_equal(sluice_engine_tick(e, T0 + 10 * SEC), SLUICE_OK);
    assert_int_equal(ev.n[SLUICE_EVENT_DEFERRED], 2);
    assert_int_equal(ev.summaries[SLUICE_EVENT_DEFERRED], 1);
    assert_int_equal(ev.count[SLUICE_EVENT_DEFERRED], 1000);
    sluice_engine_free(e);
}

static void test_rejected_event(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    const char *lims[] = {"r", NULL};
    sluice_delivery out[4];
    fx_events ev;
    sluice_task_spec s;

    (void)unused;
    memset(&ev, 0, sizeof ev);
    sluice_engine_on_event(e, fx_on_event, &ev);
    fx_rate(e, "r", 1, MIN, 1, NULL);
    fx_type(e, "t", lims);
    memset(&s, 0, sizeof s);
    s.type = "t";
    s.units = 2;
    fx_submit_spec(e, &s, T0);
    assert_int_equal(fx_poll(e, T0, 4, out), 0);
    assert_int_equal(ev.n[SLUICE_EVENT_REJECTED], 1);
    assert_string_equal(ev.last_limit[SLUICE_EVENT_REJECTED], "r");
    sluice_engine_free(e);
}

/* ---- Misc ------------------------------------------------------------------------------------ */

static void test_names_and_info(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    sluice_task_info info;
    sluice_task_spec s;
    uint64_t id;

    (void)unused;
    assert_string_equal(sluice_task_state_name(SLUICE_TASK_PARKED), "parked");
    assert_string_equal(sluice_task_state_name(SLUICE_TASK_CANCELLED), "cancelled");
    assert_string_equal(sluice_fail_reason_name(SLUICE_FAIL_SKIPPED), "skipped");
    assert_string_equal(sluice_fail_reason_name(SLUICE_FAIL_NONE), "none");
    memset(&s, 0, sizeof s);
    s.type = "t";
    s.units = 3;
    s.has_priority = 1;
    s.priority = -2;
    id = fx_submit_spec(e, &s, T0);
    assert_int_equal(sluice_engine_task_info(e, id, &info), SLUICE_OK);
    assert_string_equal(info.type, "t");
    assert_int_equal(info.payload_len, 2);
    assert_memory_equal(info.payload, "{}", 2);
    assert_int_equal(info.units, 3);
    assert_int_equal(info.priority, -2);
    assert_null(info.task_key);
    assert_int_equal(info.submitted_ns, T0);
    assert_int_equal(sluice_engine_task_info(e, id + 1, &info), SLUICE_ENOTFOUND);
    s.units = -1;
    assert_int_equal(sluice_engine_submit(e, &s, T0, &id, NULL), SLUICE_EINVAL);
    s.units = 1;
    s.payload = "[1,";
    s.payload_len = 3;
    assert_int_equal(sluice_engine_submit(e, &s, T0, &id, NULL), SLUICE_EINVAL);
    s.payload = NULL;
    s.payload_len = 0;
    s.type = NULL;
    assert_int_equal(sluice_engine_submit(e, &s, T0, &id, NULL), SLUICE_EINVAL);
    sluice_engine_free(NULL);
    sluice_engine_free(e);
}

/* Finished tasks are kept up to max_finished, oldest freed first. */
static void test_max_finished(void **unused)
{
    sluice_engine_policy pol;
    sluice_engine *e;
    sluice_delivery out[8];
    uint64_t ids[5];

    (void)unused;
    sluice_engine_policy_init(&pol);
    pol.max_finished = 3;
    e = fx_engine(&pol);
    for (int i = 0; i < 5; i++)
        ids[i] = fx_submit(e, "t", NULL, T0);
    assert_int_equal(fx_poll(e, T0, 8, out), 5);
    for (int i = 0; i < 5; i++)
        assert_int_equal(sluice_engine_ack(e, ids[i], -1, T0), SLUICE_OK);
    for (int i = 0; i < 5; i++) {
        sluice_task_info info;

        assert_int_equal(sluice_engine_task_info(e, ids[i], &info),
                         i < 2 ? SLUICE_ENOTFOUND : SLUICE_OK);
    }
    sluice_engine_free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seed003_timeline),
        cmocka_unit_test(test_seed003_burst_one),
        cmocka_unit_test(test_seed003_start_empty),
        cmocka_unit_test(test_seed001_heavy_not_starved),
        cmocka_unit_test(test_priority_overtakes_parked),
        cmocka_unit_test(test_no_head_of_line_blocking),
        cmocka_unit_test(test_lease_expiry_redelivers_without_charge),
        cmocka_unit_test(test_touch_extends_lease),
        cmocka_unit_test(test_retry_fixed_backoff_and_attempts),
        cmocka_unit_test(test_retry_exponential_and_dead),
        cmocka_unit_test(test_retry_after_upstream),
        cmocka_unit_test(test_retry_throttle_on),
        cmocka_unit_test(test_retry_throttle_off),
        cmocka_unit_test(test_cancel_while_parked),
        cmocka_unit_test(test_cancel_queued_and_delayed),
        cmocka_unit_test(test_not_before_delays),
        cmocka_unit_test(test_replace_payload_while_parked),
        cmocka_unit_test(test_reject_overflow_denial),
        cmocka_unit_test(test_horizon),
        cmocka_unit_test(test_units_above_burst_never),
        cmocka_unit_test(test_explain_position_and_estimate),
        cmocka_unit_test(test_explain_far_times),
        cmocka_unit_test(test_deferrals_aggregated),
        cmocka_unit_test(test_rejected_event),
        cmocka_unit_test(test_names_and_info),
        cmocka_unit_test(test_max_finished),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
