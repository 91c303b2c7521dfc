/* SPDX-License-Identifier: MIT */
/*
 * Engine behaviours a user trips over (issue 13), on the simulated clock: a lease released
 * outside the engine wakes the tasks parked on its limit at once and EXPLAIN agrees with the
 * engine's wake; max_parked refuses only tasks that would park and is never exceeded; the
 * ack of a task never delivered; missing_key: skip.
 */
#include "engine_fixture.h"
#include "sluice/policy_spec.h"

/* ---- 1. LEASE.RELEASE wakes parked tasks ------------------------------------------------- */

static void test_release_wakes_parked(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    const char *lims[] = {"conc", NULL};
    sluice_limit_policy p;
    sluice_limit *live = NULL;
    sluice_delivery out[4];
    sluice_decision d;
    sluice_explanation ex;
    uint64_t a, b;

    (void)unused;
    fx_limit(&p, "conc", SLUICE_CONCURRENCY, 1, 0);
    fx_set_limit(e, &p);
    fx_type(e, "t", lims);
    assert_non_null(sluice_engine_get_limit(e, "conc", &live));
    /* A caller (LEASE.ACQUIRE) holds the only slot for a minute. */
    assert_int_equal(sluice_lease_acquire(live, "", 0, 1, MIN, T0, &d), SLUICE_OK);
    assert_true(d.allowed);
    a = fx_submit(e, "t", NULL, T0);
    assert_int_equal(fx_poll(e, T0, 4, out), 0);
    assert_int_equal(fx_state(e, a), SLUICE_TASK_PARKED);
    /* Released without telling the engine: EXPLAIN says what the engine will do (the key's
     * wake at the lease's expiry), not "now". */
    assert_int_equal(sluice_lease_release(live, d.lease_id, T0 + SEC), SLUICE_OK);
    assert_int_equal(sluice_engine_explain(e, a, T0 + SEC, &ex), SLUICE_OK);
    assert_int_equal(ex.estimated_start_ns, ex.wake_ns);
    assert_true(ex.wake_ns >= T0 + MIN);
    /* Told (the server's LEASE.RELEASE does): the task is queued at once and runs. */
    assert_int_equal(sluice_engine_limit_released(e, "conc", T0 + SEC), SLUICE_OK);
    assert_int_equal(fx_state(e, a), SLUICE_TASK_QUEUED);
    assert_int_equal(sluice_engine_poll(e, NULL, 0, 4, T0 + SEC, out), 1);
    assert_int_equal(out[0].id, a);
    assert_int_equal(sluice_engine_limit_released(e, "nope", T0 + SEC), SLUICE_ENOTFOUND);
    /* Expiry: an outside lease that is never released wakes the parked task when it expires. */
    assert_int_equal(sluice_engine_ack(e, a, -1, T0 + 2 * SEC), SLUICE_OK);
    assert_int_equal(sluice_lease_acquire(live, "", 0, 1, 10 * SEC, T0 + 2 * SEC, &d), SLUICE_OK);
    assert_true(d.allowed);
    b = fx_submit(e, "t", NULL, T0 + 2 * SEC);
    assert_int_equal(fx_poll(e, T0 + 2 * SEC, 4, out), 0);
    assert_int_equal(sluice_engine_explain(e, b, T0 + 3 * SEC, &ex), SLUICE_OK);
    assert_true(ex.estimated_start_ns <= T0 + 12 * SEC);
    assert_true(sluice_engine_next_wake(e) <= T0 + 12 * SEC);
    assert_int_equal(fx_poll(e, T0 + 12 * SEC, 4, out), 1);
    assert_int_equal(out[0].id, b);
    sluice_engine_free(e);
}

/* ---- 3. max_parked refuses only what would park, and is never exceeded ------------------- */

static void test_max_parked(void **unused)
{
    sluice_engine_policy pol;
    sluice_engine *e;
    const char *lims[] = {"r", NULL};
    sluice_submit_error err;
    sluice_delivery out[8];
    sluice_engine_stats st;
    sluice_task_info info;
    uint64_t id, late;

    (void)unused;
    sluice_engine_policy_init(&pol);
    pol.max_parked = 1;
    e = fx_engine(&pol);
    fx_rate(e, "r", 1, MIN, 1, "u");
    fx_type(e, "t", lims);
    fx_submit(e, "t", "{\"u\":\"a\"}", T0);
    fx_submit(e, "t", "{\"u\":\"a\"}", T0);
    late = fx_submit(e, "t", "{\"u\":\"a\"}", T0); /* accepted: nothing parked yet */
    assert_int_equal(fx_poll(e, T0, 8, out), 1);
    sluice_engine_get_stats(e, &st);
    assert_int_equal(st.parked, 1); /* never past the cap */
    assert_int_equal(fx_state(e, late), SLUICE_TASK_FAILED);
    assert_int_equal(sluice_engine_task_info(e, late, &info), SLUICE_OK);
    assert_int_equal(info.failure.reason, SLUICE_FAIL_RATELIMITED);
    /* Full: a task for key a would park (a is parked, and out of budget): refused at submit. */
    assert_int_equal(fx_try(e, "t", "{\"u\":\"a\"}", T0, &id, &err), SLUICE_EBUSY);
    assert_non_null(strstr(err.message, "max_parked"));
    /* A task for key b starts at once: accepted and delivered. */
    id = fx_submit(e, "t", "{\"u\":\"b\"}", T0);
    assert_int_equal(fx_poll(e, T0, 8, out), 1);
    assert_int_equal(out[0].id, id);
    /* b is now out of budget too: refused at submit while the lot is full. */
    assert_int_equal(fx_try(e, "t", "{\"u\":\"b\"}", T0, &id, &err), SLUICE_EBUSY);
    /* Once the parked task runs the lot has room again (the poll also redelivers the two
     * tasks whose 30 s leases ran out). */
    assert_int_equal(fx_poll(e, T0 + MIN, 8, out), 3);
    fx_submit(e, "t", "{\"u\":\"b\"}", T0 + MIN);
    assert_int_equal(fx_poll(e, T0 + MIN, 8, out), 1);
    sluice_engine_get_stats(e, &st);
    assert_int_equal(st.parked, 0);
    sluice_engine_free(e);
}

/* ---- 8. missing_key: skip ---------------------------------------------------------------- */

static void test_missing_key_skip(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    const char *lims[] = {"per_user", NULL};
    sluice_limit_policy p;
    sluice_delivery out[8];
    sluice_submit_error err;
    sluice_task_spec spec;
    uint64_t id;

    (void)unused;
    fx_limit(&p, "per_user", SLUICE_RATE, 1, MIN);
    p.key_source = SLUICE_KEY_PATH;
    p.key_path = "user";
    p.missing_key_skip = 1;
    fx_set_limit(e, &p);
    fx_type(e, "t", lims);
    /* Keyed tasks are gated: one per minute for u1. */
    fx_submit(e, "t", "{\"user\":\"u1\"}", T0);
    id = fx_submit(e, "t", "{\"user\":\"u1\"}", T0);
    /* Without the field, or with an empty one, the limit does not apply: all run at once. */
    for (int i = 0; i < 3; i++)
        fx_submit(e, "t", "{}", T0);
    fx_submit(e, "t", "{\"user\":\"\"}", T0);
    assert_int_equal(fx_poll(e, T0, 8, out), 5);
    assert_int_equal(fx_state(e, id), SLUICE_TASK_PARKED);
    /* The same with an explicit key: none, or an empty one, skips. */
    p.key_source = SLUICE_KEY_EXPLICIT;
    p.key_path = NULL;
    fx_set_limit(e, &p);
    memset(&spec, 0, sizeof spec);
    spec.type = "t";
    assert_int_equal(sluice_engine_submit(e, &spec, T0, &id, &err), SLUICE_OK);
    spec.key = "";
    assert_int_equal(sluice_engine_submit(e, &spec, T0, &id, &err), SLUICE_OK);
    spec.key = "k";
    spec.key_len = 1;
    fx_submit_spec(e, &spec, T0);
    id = fx_submit_spec(e, &spec, T0);
    /* 2 skipped + k's first + the u1 task (the replaced limit restarted its keys); k's second
     * parks. */
    assert_int_equal(fx_poll(e, T0 + SEC, 8, out), 4);
    assert_int_equal(fx_state(e, id), SLUICE_TASK_PARKED);
    /* error and global are unchanged: error refuses a task without the key. */
    p.missing_key_skip = 0;
    fx_set_limit(e, &p);
    spec.key = NULL;
    spec.key_len = 0;
    assert_int_equal(sluice_engine_submit(e, &spec, T0 + SEC, &id, &err), SLUICE_EINVAL);
    /* Both at once is not a policy. */
    p.missing_key_skip = 1;
    p.missing_key_global = 1;
    assert_int_equal(sluice_engine_set_limit(e, &p, T0, err.message, sizeof err.message),
                     SLUICE_EINVAL);
    sluice_engine_free(e);
}

/* missing_key=skip in the spec grammar (LIMIT.SET): parsed, written back, and refused where
 * there is no key. */
static void test_missing_key_skip_spec(void **unused)
{
    sluice_limit_policy p;
    char msg[256], buf[512];

    (void)unused;
    assert_int_equal(
        sluice_spec_parse_policy("rate=1/1m,key=input.user,missing_key=skip", &p, msg, sizeof msg),
        SLUICE_OK);
    assert_true(p.missing_key_skip);
    assert_false(p.missing_key_global);
    assert_int_equal(sluice_spec_format_policy(&p, buf, sizeof buf), SLUICE_OK);
    assert_non_null(strstr(buf, "missing_key=skip"));
    sluice_limit_policy_clear(&p);
    assert_int_not_equal(
        sluice_spec_parse_policy("rate=1/1m,missing_key=skip", &p, msg, sizeof msg), SLUICE_OK);
    assert_int_not_equal(
        sluice_spec_parse_policy("rate=1/1m,key=explicit,missing_key=drop", &p, msg, sizeof msg),
        SLUICE_OK);
    assert_non_null(strstr(msg, "missing_key=skip"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_release_wakes_parked),
        cmocka_unit_test(test_max_parked),
        cmocka_unit_test(test_missing_key_skip),
        cmocka_unit_test(test_missing_key_skip_spec),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
