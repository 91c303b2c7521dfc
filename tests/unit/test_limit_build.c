/* SPDX-License-Identifier: MIT */
/*
 * Tests of limits built off the engine and installed later (sluice_limit_build_new,
 * sluice_engine_reserve_limits, sluice_engine_install_limit: what CONFIG RELOAD does, building on
 * a worker thread and installing on the loop) and of the limits version, on a simulated clock.
 *
 * An installed build behaves as sluice_engine_set_limit would: a new name is added, an existing
 * limit is replaced in place (its budget restarts, parked tasks are gated again, a running task's
 * grant is forgotten) and the old policy comes back in the build; after a reserve, installing
 * cannot fail; a bad policy is refused when built; out of memory anywhere leaks nothing and
 * leaves the engine as it was; the version moves with every change of a limit and only then.
 * The sweep of many limits (sluice_engine_sweep_limits) goes a bounded number of limits at a
 * time, round-robin, and reaches every one.
 */
#include "engine_fixture.h"

#include "testutil.h"

static sluice_limit_build *build(const sluice_limit_policy *p)
{
    sluice_limit_build *b = NULL;
    char msg[256];
    int rc = sluice_limit_build_new(p, &b, msg, sizeof msg);

    if (rc != SLUICE_OK)
        fail_msg("build %s: %s (%s)", p->name, sluice_strerror(rc), msg);
    assert_non_null(b);
    return b;
}

/* A new name: the build is the limit; the same name again: replaced in place, old one back. */
static void test_install_new_then_replace(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    const char *lims[] = {"r", NULL};
    sluice_limit_policy p;
    sluice_delivery out[4];
    sluice_limit_build *b;
    uint64_t t1, t2, t3;

    (void)unused;
    fx_limit(&p, "r", SLUICE_RATE, 1, MIN);
    p.def.burst = 1;
    b = build(&p);
    assert_null(sluice_engine_get_limit(e, "r", NULL)); /* built, not installed */
    assert_int_equal(sluice_engine_reserve_limits(e, 1), SLUICE_OK);
    assert_int_equal(sluice_engine_install_limit(e, &b, T0), SLUICE_OK);
    assert_null(b); /* the engine took it */
    assert_non_null(sluice_engine_get_limit(e, "r", NULL));
    fx_type(e, "t", lims);
    t1 = fx_submit(e, "t", NULL, T0);
    t2 = fx_submit(e, "t", NULL, T0);
    assert_int_equal(fx_poll(e, T0, 4, out), 1);
    assert_int_equal(out[0].id, t1);
    assert_int_equal(fx_state(e, t2), SLUICE_TASK_PARKED);

    /* Replaced by a build of 10 a minute: the parked task runs at once, as after set_limit. */
    fx_limit(&p, "r", SLUICE_RATE, 10, MIN);
    b = build(&p);
    assert_int_equal(sluice_engine_install_limit(e, &b, T0 + SEC), SLUICE_OK);
    assert_non_null(b); /* it holds the old definition now */
    assert_int_equal(sluice_engine_get_limit(e, "r", NULL)->def.limit, 10);
    sluice_limit_build_free(b);
    assert_int_equal(fx_poll(e, T0 + SEC, 4, out), 1);
    assert_int_equal(out[0].id, t2);
    /* The new budget is whole: t1 and t2's grants were in the old one. */
    t3 = fx_submit(e, "t", NULL, T0 + SEC);
    assert_int_equal(fx_poll(e, T0 + SEC, 4, out), 1);
    assert_int_equal(out[0].id, t3);
    assert_int_equal(sluice_engine_ack(e, t1, -1, T0 + 2 * SEC), SLUICE_OK);
    assert_int_equal(sluice_engine_ack(e, t2, -1, T0 + 2 * SEC), SLUICE_OK);
    sluice_engine_free(e);
}

/* A running task's concurrency slot is in the replaced core: after the install the new core has
 * its slots free, and acking the task releases nothing there (as after set_limit). */
static void test_install_forgets_grants(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    const char *lims[] = {"c", NULL};
    sluice_limit_policy p;
    sluice_delivery out[4];
    sluice_limit_build *b;
    uint64_t t1, t2, t3;

    (void)unused;
    fx_limit(&p, "c", SLUICE_CONCURRENCY, 1, 0);
    fx_set_limit(e, &p);
    fx_type(e, "t", lims);
    t1 = fx_submit(e, "t", NULL, T0);
    assert_int_equal(fx_poll(e, T0, 4, out), 1);
    t2 = fx_submit(e, "t", NULL, T0);
    assert_int_equal(fx_poll(e, T0, 4, out), 0);
    assert_int_equal(fx_state(e, t2), SLUICE_TASK_PARKED);
    b = build(&p); /* the same definition: still a new core */
    assert_int_equal(sluice_engine_install_limit(e, &b, T0 + SEC), SLUICE_OK);
    sluice_limit_build_free(b);
    assert_int_equal(fx_poll(e, T0 + SEC, 4, out), 1);
    assert_int_equal(out[0].id, t2);
    /* t1's ack frees no slot of the new core: t2 holds its only one. */
    assert_int_equal(sluice_engine_ack(e, t1, -1, T0 + 2 * SEC), SLUICE_OK);
    t3 = fx_submit(e, "t", NULL, T0 + 2 * SEC);
    assert_int_equal(fx_poll(e, T0 + 2 * SEC, 4, out), 0);
    assert_int_equal(sluice_engine_ack(e, t2, -1, T0 + 3 * SEC), SLUICE_OK);
    assert_int_equal(fx_poll(e, T0 + 3 * SEC, 4, out), 1);
    assert_int_equal(out[0].id, t3);
    sluice_engine_free(e);
}

static void test_build_refuses_bad_policy(void **unused)
{
    sluice_limit_build *b = (sluice_limit_build *)&b; /* set to NULL on failure */
    sluice_limit_policy p;
    char msg[256];

    (void)unused;
    fx_limit(&p, "r", SLUICE_RATE, 0, MIN);
    assert_int_equal(sluice_limit_build_new(&p, &b, msg, sizeof msg), SLUICE_EINVAL);
    assert_null(b);
    assert_true(msg[0] != '\0');
    assert_int_equal(sluice_limit_build_new(NULL, &b, msg, sizeof msg), SLUICE_EINVAL);
    sluice_limit_build_free(NULL);
}

/* The version moves with each change of a limit, and with nothing else. */
static void test_limits_version(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    const char *lims[] = {"r", NULL};
    sluice_limit_def def;
    sluice_limit_policy p;
    sluice_limit_build *b;
    uint64_t v = sluice_engine_limits_version(e), w;
    char msg[256];

    (void)unused;
#define MOVED()                                                                                    \
    do {                                                                                           \
        w = sluice_engine_limits_version(e);                                                       \
        assert_true(w != v);                                                                       \
        v = w;                                                                                     \
    } while (0)
#define STILL() assert_true(sluice_engine_limits_version(e) == v)
    fx_rate(e, "r", 5, MIN, 0, NULL);
    MOVED();
    fx_limit(&p, "k", SLUICE_RATE, 5, MIN);
    p.key_source = SLUICE_KEY_EXPLICIT;
    fx_set_limit(e, &p);
    MOVED();
    fx_type(e, "t", lims);
    fx_submit(e, "t", NULL, T0);
    sluice_engine_set_enabled(e, 0, T0);
    sluice_engine_set_enabled(e, 1, T0);
    assert_non_null(sluice_engine_get_limit(e, "r", NULL));
    assert_int_equal(sluice_engine_list_limits(e, NULL, NULL), 2);
    assert_int_equal(sluice_engine_reserve_limits(e, 3), SLUICE_OK);
    STILL();
    assert_int_equal(sluice_engine_set_limit_mode(e, "r", SLUICE_MODE_SHADOW, T0), SLUICE_OK);
    MOVED();
    sluice_limit_def_init(&def, SLUICE_RATE);
    def.limit = 50;
    def.period_ns = MIN;
    assert_int_equal(sluice_engine_set_key_override(e, "k", "x", 1, &def, T0, msg, sizeof msg),
                     SLUICE_OK);
    MOVED();
    fx_limit(&p, "n", SLUICE_RATE, 1, MIN);
    b = build(&p);
    STILL(); /* building touches no engine */
    assert_int_equal(sluice_engine_install_limit(e, &b, T0), SLUICE_OK);
    MOVED();
    assert_int_equal(sluice_engine_del_limit(e, "n", T0), SLUICE_OK);
    MOVED();
    assert_int_equal(sluice_engine_del_limit(e, "n", T0), SLUICE_ENOTFOUND);
    STILL();
#undef MOVED
#undef STILL
    sluice_engine_free(e);
}

/* 600 limits with an idle key each: a sweep of 256 limits forgets 256 keys, the rest stay until
 * the next sweeps come round to them. */
static void test_sweep_round_robin(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    sluice_limit_policy p;
    sluice_decision d;
    sluice_limit *live;
    size_t left = 0;
    char name[16];

    (void)unused;
    for (int i = 0; i < 600; i++) {
        snprintf(name, sizeof name, "l%03d", i);
        fx_limit(&p, name, SLUICE_RATE, 1, SEC);
        p.key_source = SLUICE_KEY_EXPLICIT;
        fx_set_limit(e, &p);
        live = NULL;
        assert_non_null(sluice_engine_get_limit(e, name, &live));
        assert_int_equal(sluice_limit_decide(live, "k", 1, 1, T0, 0, &d), SLUICE_OK);
    }
    assert_int_equal(sluice_engine_sweep_limits(e, T0 + 10 * SEC, 100, 256), 256);
    for (int i = 0; i < 600; i++) {
        snprintf(name, sizeof name, "l%03d", i);
        live = NULL;
        assert_non_null(sluice_engine_get_limit(e, name, &live));
        left += sluice_limit_sweep(live, T0 + 10 * SEC, 100);
    }
    assert_int_equal(left, 600 - 256);
    /* Round and round: three sweeps of 256 reach all 600 again. */
    for (int i = 0; i < 600; i++) {
        snprintf(name, sizeof name, "l%03d", i);
        assert_non_null(sluice_engine_get_limit(e, name, &live));
        assert_int_equal(sluice_limit_decide(live, "k", 1, 1, T0 + 20 * SEC, 0, &d), SLUICE_OK);
    }
    for (int r = 0; r < 3; r++)
        sluice_engine_sweep_limits(e, T0 + 30 * SEC, 100, 256);
    left = 0;
    for (int i = 0; i < 600; i++) {
        snprintf(name, sizeof name, "l%03d", i);
        assert_non_null(sluice_engine_get_limit(e, name, &live));
        left += sluice_limit_sweep(live, T0 + 30 * SEC, 100);
    }
    assert_int_equal(left, 0);
    assert_int_equal(sluice_engine_sweep_limits(e, T0 + 30 * SEC, 100, 100000), 600);
    sluice_engine_free(e);
}

/* Build, reserve, install new and replace, free: every allocation failed in turn leaks nothing
 * and fails with ENOMEM; once the reserve succeeded, the installs cannot fail. */
static int oom_body(void *arg)
{
    sluice_limit_build *b[4] = {NULL, NULL, NULL, NULL};
    sluice_engine *e = NULL;
    sluice_limit_policy p;
    char msg[128], name[8];
    int rc;

    (void)arg;
    rc = sluice_engine_new(NULL, &e);
    if (rc != SLUICE_OK)
        return rc;
    for (int i = 0; i < 4 && rc == SLUICE_OK; i++) {
        snprintf(name, sizeof name, "l%d", i % 3); /* l0 twice: the fourth replaces */
        fx_limit(&p, name, SLUICE_RATE, 5 + i, MIN);
        p.key_source = SLUICE_KEY_EXPLICIT;
        rc = sluice_limit_build_new(&p, &b[i], msg, sizeof msg);
    }
    if (rc == SLUICE_OK)
        rc = sluice_engine_reserve_limits(e, 3);
    if (rc == SLUICE_OK) {
        for (int i = 0; i < 4; i++)
            assert_int_equal(sluice_engine_install_limit(e, &b[i], T0), SLUICE_OK);
        assert_int_equal(sluice_engine_list_limits(e, NULL, NULL), 3);
        assert_int_equal(sluice_engine_get_limit(e, "l0", NULL)->def.limit, 8);
        assert_non_null(b[3]); /* l0's first definition came back */
    } else {
        assert_int_equal(sluice_engine_list_limits(e, NULL, NULL), 0);
    }
    for (int i = 0; i < 4; i++)
        sluice_limit_build_free(b[i]);
    sluice_engine_free(e);
    return rc;
}

static void test_build_oom(void **unused)
{
    (void)unused;
    assert_true(oom_sweep(oom_body, NULL, 100000) > 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_install_new_then_replace),
        cmocka_unit_test(test_install_forgets_grants),
        cmocka_unit_test(test_build_refuses_bad_policy),
        cmocka_unit_test(test_limits_version),
        cmocka_unit_test(test_build_oom),
        cmocka_unit_test(test_sweep_round_robin),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
