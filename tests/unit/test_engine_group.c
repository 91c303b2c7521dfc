/* SPDX-License-Identifier: MIT */
/*
 * Group slots (issue 13 item 12, seed 002's workflow concurrency), on the simulated clock: a
 * producer takes one lease of a concurrency limit and submits tasks that carry it; they run
 * under that one slot while another producer's task on the same key waits, until the lease is
 * released or expires. After that the group's unstarted tasks ask their own unit like any other
 * task. A stale, foreign or misplaced lease is refused at submit; a replaced limit ends its
 * groups; a restored task (a restart) whose lease did not come back holds no group (the kept
 * lease of a server's LEASE.ACQUIRE comes back: test_lease_persist.c).
 */
#include "engine_fixture.h"
#include "testutil.h"

/* A concurrency limit of `limit` units keyed by input.wf, and type "step" naming it. */
static sluice_limit *setup(sluice_engine *e, int64_t limit)
{
    static const char *const lims[] = {"wf", NULL};
    sluice_limit_policy p;
    sluice_limit *live = NULL;

    fx_limit(&p, "wf", SLUICE_CONCURRENCY, limit, 0);
    p.key_source = SLUICE_KEY_PATH;
    p.key_path = (char *)"wf";
    fx_set_limit(e, &p);
    fx_type(e, "step", lims);
    assert_non_null(sluice_engine_get_limit(e, "wf", &live));
    return live;
}

/* Takes a lease of one unit on key wf=key, valid ttl from now. */
static uint64_t group_lease(sluice_limit *live, const char *key, int64_t ttl, int64_t now)
{
    sluice_decision d;

    assert_int_equal(sluice_lease_acquire(live, key, strlen(key), 1, ttl, now, &d), SLUICE_OK);
    assert_true(d.allowed);
    assert_true(d.lease_id != 0);
    return d.lease_id;
}

/* Submits a "step" task with payload and, when lease_id != 0, under that lease of "wf". */
static int submit(sluice_engine *e, const char *payload, uint64_t lease_id, int64_t now,
                  uint64_t *id, sluice_submit_error *err)
{
    sluice_task_spec s;

    memset(&s, 0, sizeof s);
    s.type = "step";
    s.payload = payload;
    s.payload_len = strlen(payload);
    if (lease_id) {
        s.lease_limit = "wf";
        s.lease_id = lease_id;
    }
    return sluice_engine_submit(e, &s, now, id, err);
}

static uint64_t submit_ok(sluice_engine *e, const char *payload, uint64_t lease_id, int64_t now)
{
    sluice_submit_error err;
    uint64_t id = 0;
    int rc = submit(e, payload, lease_id, now, &id, &err);

    if (rc != SLUICE_OK)
        fail_msg("submit: %s (%s)", sluice_strerror(rc), err.message);
    return id;
}

/* Limit 1: a group of 10 runs under the producer's one slot while another producer's task on
 * the same key waits; the release frees the slot and the waiting task runs at once. */
static void test_group_runs_under_one_slot(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    sluice_limit *live = setup(e, 1);
    sluice_delivery out[32];
    sluice_explanation ex;
    uint64_t lease, group[10], other, elsewhere;
    int n;

    (void)unused;
    lease = group_lease(live, "w1", MIN, T0);
    for (int i = 0; i < 10; i++)
        group[i] = submit_ok(e, "{\"wf\":\"w1\"}", lease, T0);
    other = submit_ok(e, "{\"wf\":\"w1\"}", 0, T0);
    elsewhere = submit_ok(e, "{\"wf\":\"w2\"}", 0, T0);
    assert_int_equal(sluice_engine_explain(e, group[0], T0, &ex), SLUICE_OK);
    assert_non_null(strstr(ex.text, "Group slot"));
    n = fx_poll(e, T0, 32, out);
    assert_int_equal(n, 11); /* the group's 10, and w2's task on its own key */
    for (int i = 0; i < 10; i++)
        assert_int_equal(fx_state(e, group[i]), SLUICE_TASK_RUNNING);
    assert_int_equal(fx_state(e, elsewhere), SLUICE_TASK_RUNNING);
    assert_int_equal(fx_state(e, other), SLUICE_TASK_PARKED);
    /* The group's tasks hold nothing of their own: acking them frees nothing. */
    for (int i = 0; i < 10; i++)
        assert_int_equal(sluice_engine_ack(e, group[i], -1, T0 + SEC), SLUICE_OK);
    assert_int_equal(fx_poll(e, T0 + 2 * SEC, 32, out), 0);
    assert_int_equal(fx_state(e, other), SLUICE_TASK_PARKED);
    /* The group ends: its slot goes to the waiting task at once. */
    assert_int_equal(sluice_lease_release(live, lease, T0 + 3 * SEC), SLUICE_OK);
    assert_int_equal(sluice_engine_limit_released(e, "wf", T0 + 3 * SEC), SLUICE_OK);
    assert_int_equal(fx_poll(e, T0 + 3 * SEC, 32, out), 1);
    assert_int_equal(out[0].id, other);
    /* A handle of a released group is refused at submit: never a task on a slot nobody holds. */
    {
        sluice_submit_error err;
        uint64_t id;

        assert_int_equal(submit(e, "{\"wf\":\"w1\"}", lease, T0 + 4 * SEC, &id, &err),
                         SLUICE_ESTALE);
        assert_non_null(strstr(err.message, "gone"));
    }
    sluice_engine_free(e);
}

/* The lease expires with group tasks still queued: they leave the group and each asks its own
 * unit, so they then run one at a time (never two slots for one group, never none). Renewal
 * keeps a group alive. */
static void test_group_expiry_and_renewal(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    sluice_limit *live = setup(e, 1);
    sluice_delivery out[8];
    sluice_explanation ex;
    uint64_t lease, a[3], b[3];
    int64_t exp = 0;

    (void)unused;
    /* Renewed before its end: all three run under the one slot after the first TTL passed. */
    lease = group_lease(live, "w1", 10 * SEC, T0);
    for (int i = 0; i < 3; i++)
        a[i] = submit_ok(e, "{\"wf\":\"w1\"}", lease, T0);
    assert_int_equal(sluice_lease_renew(live, lease, 10 * SEC, T0 + 8 * SEC, &exp), SLUICE_OK);
    assert_int_equal(exp, T0 + 18 * SEC);
    assert_int_equal(fx_poll(e, T0 + 12 * SEC, 8, out), 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(sluice_engine_ack(e, a[i], -1, T0 + 13 * SEC), SLUICE_OK);

    /* Not renewed: at T0 + 28 s the group (until T0 + 18 s) is over. */
    for (int i = 0; i < 3; i++)
        b[i] = submit_ok(e, "{\"wf\":\"w1\"}", lease, T0 + 14 * SEC);
    assert_int_equal(sluice_engine_explain(e, b[0], T0 + 28 * SEC, &ex), SLUICE_OK);
    assert_non_null(strstr(ex.text, "ended"));
    assert_int_equal(fx_poll(e, T0 + 28 * SEC, 8, out), 1);
    assert_int_equal(out[0].id, b[0]);
    assert_int_equal(fx_state(e, b[1]), SLUICE_TASK_PARKED);
    assert_int_equal(fx_state(e, b[2]), SLUICE_TASK_PARKED);
    /* b[0] holds a unit of its own now: its ack frees it for the next. */
    assert_int_equal(sluice_engine_ack(e, b[0], -1, T0 + 29 * SEC), SLUICE_OK);
    assert_int_equal(fx_poll(e, T0 + 29 * SEC, 8, out), 1);
    assert_int_equal(out[0].id, b[1]);
    assert_int_equal(fx_state(e, b[2]), SLUICE_TASK_PARKED);
    /* The expired handle is refused at submit. */
    {
        sluice_submit_error err;
        uint64_t id;

        assert_int_equal(submit(e, "{\"wf\":\"w1\"}", lease, T0 + 30 * SEC, &id, &err),
                         SLUICE_ESTALE);
    }
    sluice_engine_free(e);
}

/* Leases that cannot carry the task are refused at submit, with a message saying why. */
static void test_group_submit_errors(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    sluice_limit *live = setup(e, 2);
    static const char *const rlims[] = {"r", NULL};
    sluice_submit_error err;
    sluice_task_spec s;
    uint64_t lease, id;

    (void)unused;
    fx_rate(e, "r", 10, SEC, 0, NULL);
    fx_type(e, "rated", rlims);
    lease = group_lease(live, "w1", MIN, T0);
    /* Another key's lease. */
    assert_int_equal(submit(e, "{\"wf\":\"w2\"}", lease, T0, &id, &err), SLUICE_EINVAL);
    assert_non_null(strstr(err.message, "another key"));
    /* A lease id never issued. */
    assert_int_equal(submit(e, "{\"wf\":\"w1\"}", lease + 100, T0, &id, &err), SLUICE_ESTALE);
    /* A type whose chain does not name the lease's limit. */
    memset(&s, 0, sizeof s);
    s.type = "rated";
    s.lease_limit = "wf";
    s.lease_id = lease;
    assert_int_equal(sluice_engine_submit(e, &s, T0, &id, &err), SLUICE_EINVAL);
    assert_non_null(strstr(err.message, "no limit \"wf\""));
    /* A limit that is not a concurrency limit. */
    s.lease_limit = "r";
    assert_int_equal(sluice_engine_submit(e, &s, T0, &id, &err), SLUICE_EINVAL);
    assert_non_null(strstr(err.message, "not a concurrency limit"));
    /* Nothing was created by any of them. */
    assert_int_equal(sluice_engine_task_info(e, 1, &(sluice_task_info){0}), SLUICE_ENOTFOUND);
    sluice_engine_free(e);
}

/* A limit replaced while a group waits: its lease ids restart, so the group is over and its
 * task never rides a new holder's lease that happens to get the same id. */
static void test_group_limit_replaced(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    sluice_limit *live = setup(e, 1);
    sluice_delivery out[8];
    uint64_t lease, fresh, t;

    (void)unused;
    lease = group_lease(live, "w1", MIN, T0);
    t = submit_ok(e, "{\"wf\":\"w1\"}", lease, T0);
    live = setup(e, 1); /* replaced: a new core */
    fresh = group_lease(live, "w1", MIN, T0 + SEC);
    assert_int_equal(fresh, lease); /* the same id, another holder */
    assert_int_equal(fx_poll(e, T0 + SEC, 8, out), 0);
    assert_int_equal(fx_state(e, t), SLUICE_TASK_PARKED);
    sluice_engine_free(e);
}

/* A group task whose task lease is lost is redelivered under the group while it lives; a
 * running task of an ended group keeps running and its ack frees nothing it never held. */
static void test_group_redelivery(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    sluice_limit *live = setup(e, 1);
    sluice_delivery out[8];
    uint64_t lease, a, other;

    (void)unused;
    lease = group_lease(live, "w1", 10 * MIN, T0);
    a = submit_ok(e, "{\"wf\":\"w1\"}", lease, T0);
    other = submit_ok(e, "{\"wf\":\"w1\"}", 0, T0);
    assert_int_equal(fx_poll(e, T0, 8, out), 1);
    assert_int_equal(out[0].id, a);
    /* The worker vanishes: after the type's lease time the task is delivered again. */
    assert_int_equal(fx_poll(e, T0 + 5 * MIN, 8, out), 1);
    assert_int_equal(out[0].id, a);
    assert_int_equal(out[0].attempt, 2);
    assert_int_equal(fx_state(e, other), SLUICE_TASK_PARKED);
    assert_int_equal(sluice_engine_ack(e, a, -1, T0 + 6 * MIN), SLUICE_OK);
    assert_int_equal(fx_state(e, other), SLUICE_TASK_PARKED);
    /* The group's lease runs out: the waiting task gets the slot. */
    assert_int_equal(fx_poll(e, T0 + 10 * MIN, 8, out), 1);
    assert_int_equal(out[0].id, other);
    sluice_engine_free(e);
}

/* A restart: the task record carries no group (the producer's lease is not stored), so a
 * restored group task asks its own unit. Two restored tasks of one group on limit 1 run one
 * after the other: never two units for one group, never a task on a slot no one holds. */
static void test_group_restore(void **unused)
{
    sluice_engine *e = fx_engine(NULL), *e2 = fx_engine(NULL);
    sluice_limit *live = setup(e, 1);
    sluice_delivery out[8];
    sluice_task_record r;
    sluice_submit_error err;
    uint64_t lease, ids[2];

    (void)unused;
    (void)setup(e2, 1);
    lease = group_lease(live, "w1", MIN, T0);
    for (int i = 0; i < 2; i++)
        ids[i] = submit_ok(e, "{\"wf\":\"w1\"}", lease, T0);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(sluice_engine_export_task(e, ids[i], &r), SLUICE_OK);
        assert_int_equal(sluice_engine_restore_task(e2, &r, T0 + SEC, &err), SLUICE_OK);
    }
    assert_int_equal(fx_poll(e2, T0 + SEC, 8, out), 1);
    assert_int_equal(out[0].id, ids[0]);
    assert_int_equal(fx_state(e2, ids[1]), SLUICE_TASK_PARKED);
    assert_int_equal(sluice_engine_ack(e2, ids[0], -1, T0 + 2 * SEC), SLUICE_OK);
    assert_int_equal(fx_poll(e2, T0 + 2 * SEC, 8, out), 1);
    assert_int_equal(out[0].id, ids[1]);
    sluice_engine_free(e);
    sluice_engine_free(e2);
}

/* sluice_lease_check is a read: it answers live / stale / another key and changes nothing. */
static void test_lease_check(void **unused)
{
    sluice_limit_def def;
    sluice_limit *l = NULL;
    sluice_decision d;
    int64_t exp = 0;
    char msg[128];

    (void)unused;
    sluice_limit_def_init(&def, SLUICE_CONCURRENCY);
    def.limit = 1;
    assert_int_equal(sluice_limit_new(&def, &l, msg, sizeof msg), SLUICE_OK);
    assert_int_equal(sluice_lease_acquire(l, "k", 1, 1, 10 * SEC, T0, &d), SLUICE_OK);
    assert_int_equal(sluice_lease_check(l, d.lease_id, "k", 1, T0 + SEC, &exp), SLUICE_OK);
    assert_int_equal(exp, T0 + 10 * SEC);
    assert_int_equal(sluice_lease_check(l, d.lease_id, NULL, 0, T0 + SEC, NULL), SLUICE_OK);
    assert_int_equal(sluice_lease_check(l, d.lease_id, "x", 1, T0 + SEC, &exp), SLUICE_ENOTFOUND);
    assert_int_equal(exp, 0);
    assert_int_equal(sluice_lease_check(l, d.lease_id + 1, "k", 1, T0 + SEC, NULL), SLUICE_ESTALE);
    /* Looking past the expiry reads it as gone, yet forgets nothing: asked at an earlier time
     * again, the lease is still there. */
    assert_int_equal(sluice_lease_check(l, d.lease_id, "k", 1, T0 + 11 * SEC, NULL), SLUICE_ESTALE);
    assert_int_equal(sluice_lease_check(l, d.lease_id, "k", 1, T0 + 2 * SEC, NULL), SLUICE_OK);
    assert_int_equal(sluice_lease_release(l, d.lease_id, T0 + 3 * SEC), SLUICE_OK);
    assert_int_equal(sluice_lease_check(l, d.lease_id, "k", 1, T0 + 3 * SEC, NULL), SLUICE_ESTALE);
    sluice_limit_free(l);
}

/* The whole life of a group with allocation N failing: every failure is SLUICE_ENOMEM and
 * leaks nothing. */
static int group_life(void *unused)
{
    static const char *const lims[] = {"wf", NULL};
    sluice_limit_policy p;
    sluice_type_policy tp;
    sluice_task_spec s;
    sluice_delivery out[4];
    sluice_decision d;
    sluice_limit *live = NULL;
    sluice_engine *e = NULL;
    char msg[128];
    uint64_t id;
    int rc;

    (void)unused;
    rc = sluice_engine_new(NULL, &e);
    if (rc != SLUICE_OK)
        return rc;
    fx_limit(&p, "wf", SLUICE_CONCURRENCY, 1, 0);
    p.key_source = SLUICE_KEY_PATH;
    p.key_path = (char *)"wf";
    rc = sluice_engine_set_limit(e, &p, T0, msg, sizeof msg);
    if (rc != SLUICE_OK)
        goto out;
    sluice_type_policy_init(&tp);
    tp.name = (char *)"step";
    tp.limits = (char **)lims;
    tp.nlimits = 1;
    rc = sluice_engine_set_type(e, &tp, T0, msg, sizeof msg);
    if (rc != SLUICE_OK)
        goto out;
    (void)sluice_engine_get_limit(e, "wf", &live);
    rc = sluice_lease_acquire(live, "w1", 2, 1, MIN, T0, &d);
    if (rc != SLUICE_OK)
        goto out;
    memset(&s, 0, sizeof s);
    s.type = "step";
    s.payload = "{\"wf\":\"w1\"}";
    s.payload_len = strlen(s.payload);
    s.lease_limit = "wf";
    s.lease_id = d.lease_id;
    for (int i = 0; i < 3; i++) {
        rc = sluice_engine_submit(e, &s, T0, &id, NULL);
        if (rc != SLUICE_OK)
            goto out;
    }
    rc = sluice_engine_poll(e, NULL, 0, 4, T0, out);
    if (rc < 0)
        goto out;
    assert_int_equal(rc, 3);
    rc = SLUICE_OK;
out:
    sluice_engine_free(e);
    return rc;
}

static void test_group_oom(void **unused)
{
    (void)unused;
    assert_true(oom_sweep(group_life, NULL, 500) > 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_group_runs_under_one_slot),
        cmocka_unit_test(test_group_expiry_and_renewal),
        cmocka_unit_test(test_group_submit_errors),
        cmocka_unit_test(test_group_limit_replaced),
        cmocka_unit_test(test_group_redelivery),
        cmocka_unit_test(test_group_restore),
        cmocka_unit_test(test_lease_check),
        cmocka_unit_test(test_group_oom),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
