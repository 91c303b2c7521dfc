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
 *   restart puts the tasks back in the same fair order;
 * - the configuration keys (fairness, fair_key, charge_redelivery) and their errors.
 */
#include "engine_fixture.h"
#include "sluice/config.h"
#include "testutil.h"

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

/* ---- fairness: keys ------------------------------------------------------------------------- */

/* A per-user limit that never binds (workers are what is scarce) and a type of tasks polled one
 * at a time. */
static void setup_fair(sluice_engine *e, sluice_fairness fairness)
{
    static const char *const lims[] = {"per_user", NULL};

    fx_rate(e, "per_user", 1000000, SEC, 1000000, "input.user");
    type_opts(e, "job", lims, 0, fairness, NULL, 30 * SEC);
}

static uint64_t submit_user(sluice_engine *e, const char *user, int64_t units, int priority,
                            int64_t now)
{
    char payload[64];
    sluice_task_spec s;

    snprintf(payload, sizeof payload, "{\"user\":\"%s\"}", user);
    memset(&s, 0, sizeof s);
    s.type = "job";
    s.payload = payload;
    s.payload_len = strlen(payload);
    s.units = units;
    s.has_priority = priority != 0;
    s.priority = priority;
    return fx_submit_spec(e, &s, now);
}

/* The user of a delivery (its payload). */
static const char *user_of(const sluice_delivery *d, char *buf, size_t len)
{
    const char *p = strstr(d->payload, "\"user\":\"");
    size_t n = 0;

    assert_non_null(p);
    p += 8;
    while (p[n] && p[n] != '"' && n + 1 < len) {
        buf[n] = p[n];
        n++;
    }
    buf[n] = '\0';
    return buf;
}

/* One worker takes a task every 10 ms. "big" has 10000 tasks queued; "small" submits one task
 * every second. Under fair dispatch each of small's tasks starts within two deliveries (20 ms);
 * under FIFO the first waits behind all 10000 (100 s). */
static void small_tenant_case(sluice_fairness fairness)
{
    sluice_engine *e = fx_engine(NULL);
    sluice_delivery d[1];
    sluice_explanation ex;
    uint64_t small = 0, first_big;
    int64_t small_at = 0, worst = 0, now = T0;
    size_t small_done = 0;
    char user[32];

    setup_fair(e, fairness);
    first_big = submit_user(e, "big", 1, 0, T0);
    for (int i = 1; i < 10000; i++)
        submit_user(e, "big", 1, 0, T0);
    for (int step = 0; step < 3000; step++) {
        now = T0 + step * 10 * MS;
        if (step % 100 == 50) {
            assert_int_equal(small, 0); /* the previous one started */
            small = submit_user(e, "small", 1, 0, now);
            small_at = now;
            if (fairness == SLUICE_FAIR_FIFO)
                break;
        }
        assert_int_equal(fx_poll(e, now, 1, d), 1);
        if (strcmp(user_of(d, user, sizeof user), "small") == 0) {
            assert_int_equal(d[0].id, small);
            if (now - small_at > worst)
                worst = now - small_at;
            small = 0;
            small_done++;
        }
        assert_int_equal(sluice_engine_ack(e, d[0].id, -1, now), SLUICE_OK);
    }
    if (fairness == SLUICE_FAIR_KEYS) {
        assert_int_equal(small_done, 30);
        assert_true(worst <= 10 * MS); /* its own step or the next one */
        /* EXPLAIN tells a queued task why its turn does not depend on the whole backlog. */
        assert_int_equal(sluice_engine_explain(e, first_big + 9000, now, &ex), SLUICE_OK);
        assert_int_equal(ex.state, SLUICE_TASK_QUEUED);
        assert_non_null(strstr(ex.text, "shares workers fairly between the keys of limit "
                                        "\"per_user\": key \"big\""));
    } else {
        /* FIFO: the small task is behind every big one. */
        for (int i = 0; i < 100; i++) {
            assert_int_equal(fx_poll(e, now, 1, d), 1);
            assert_true(d[0].id != small);
            assert_int_equal(sluice_engine_ack(e, d[0].id, -1, now), SLUICE_OK);
        }
        assert_int_equal(sluice_engine_explain(e, small, now, &ex), SLUICE_OK);
        assert_null(strstr(ex.text, "fairly"));
    }
    sluice_engine_free(e);
}

static void test_fair_small_tenant_bounded(void **unused)
{
    (void)unused;
    small_tenant_case(SLUICE_FAIR_KEYS);
}

static void test_fifo_small_tenant_waits(void **unused)
{
    (void)unused;
    small_tenant_case(SLUICE_FAIR_FIFO);
}

/* Shares are in units: a tenant of 4-unit tasks and one of 1-unit tasks, both backlogged, get
 * the same units within one task's worth; three tenants take turns. */
static void test_fair_by_units(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    sluice_delivery d[1];
    int64_t ua = 0, ub = 0;
    char user[32];

    (void)unused;
    setup_fair(e, SLUICE_FAIR_KEYS);
    for (int i = 0; i < 100; i++)
        submit_user(e, "a", 4, 0, T0);
    for (int i = 0; i < 300; i++)
        submit_user(e, "b", 1, 0, T0);
    for (int i = 0; i < 250; i++) {
        assert_int_equal(fx_poll(e, T0 + i * MS, 1, d), 1);
        if (strcmp(user_of(d, user, sizeof user), "a") == 0)
            ua += 4;
        else
            ub += 1;
        assert_true(ua - ub <= 4 && ub - ua <= 4);
        assert_int_equal(sluice_engine_ack(e, d[0].id, -1, T0 + i * MS), SLUICE_OK);
    }
    sluice_engine_free(e);

    /* Three tenants of one unit each: strict turns, in the order they first came. */
    e = fx_engine(NULL);
    setup_fair(e, SLUICE_FAIR_KEYS);
    for (int i = 0; i < 10; i++) {
        submit_user(e, "x", 1, 0, T0);
        submit_user(e, "y", 1, 0, T0);
    }
    for (int i = 0; i < 10; i++)
        submit_user(e, "z", 1, 0, T0);
    for (int i = 0; i < 30; i++) {
        static const char *const order[] = {"x", "y", "z"};

        assert_int_equal(fx_poll(e, T0, 1, d), 1);
        assert_string_equal(user_of(d, user, sizeof user), order[i % 3]);
    }
    sluice_engine_free(e);
}

/* Priority comes first: fairness only orders the keys within a priority. */
static void test_fair_priority_first(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    sluice_delivery d[4];
    uint64_t urgent, small;

    (void)unused;
    setup_fair(e, SLUICE_FAIR_KEYS);
    for (int i = 0; i < 100; i++)
        submit_user(e, "big", 1, 0, T0);
    small = submit_user(e, "small", 1, 0, T0);
    urgent = submit_user(e, "big", 1, 5, T0);
    assert_int_equal(fx_poll(e, T0, 1, d), 1);
    assert_int_equal(d[0].id, urgent);
    /* big was just served: small's turn. */
    assert_int_equal(fx_poll(e, T0, 1, d), 1);
    assert_int_equal(d[0].id, small);
    sluice_engine_free(e);
}

/* Fair dispatch skips no limit: a tenant's own limit still paces it (its tasks park and come
 * back in order), and while it waits the others are served. */
static void test_fair_keeps_limits(void **unused)
{
    static const char *const lims[] = {"per_user", NULL};
    sluice_engine *e = fx_engine(NULL);
    sluice_delivery d[8];
    char user[32];
    int nbig = 0;

    (void)unused;
    fx_rate(e, "per_user", 1, SEC, 1, "input.user");
    type_opts(e, "job", lims, 0, SLUICE_FAIR_KEYS, "per_user", 30 * SEC);
    for (int i = 0; i < 5; i++)
        submit_user(e, "big", 1, 0, T0);
    submit_user(e, "small", 1, 0, T0);
    /* One each at T0: the rest of big parks on its key. */
    assert_int_equal(fx_poll(e, T0, 8, d), 2);
    for (int64_t t = T0 + SEC / 2; t <= T0 + 10 * SEC; t += SEC / 2) {
        int n = fx_poll(e, t, 8, d);

        assert_true(n <= 1);
        for (int i = 0; i < n; i++) {
            assert_string_equal(user_of(&d[i], user, sizeof user), "big");
            nbig++;
        }
    }
    assert_int_equal(nbig, 4); /* one a second, none early */
    sluice_engine_free(e);
}

/* A restart puts the tasks back into their flows: restored in id order into a fresh engine,
 * small's task is still served within two deliveries. */
static void test_fair_restore(void **unused)
{
    sluice_engine *e1 = fx_engine(NULL), *e2 = fx_engine(NULL);
    sluice_task_record r;
    sluice_submit_error err;
    sluice_delivery d[2];
    uint64_t small, last = 0;
    char user[32];
    int seen = 0;

    (void)unused;
    setup_fair(e1, SLUICE_FAIR_KEYS);
    setup_fair(e2, SLUICE_FAIR_KEYS);
    for (int i = 0; i < 200; i++)
        last = submit_user(e1, "big", 1, 0, T0);
    small = submit_user(e1, "small", 1, 0, T0 + SEC);
    for (uint64_t id = 1; id <= small; id++) {
        assert_int_equal(sluice_engine_export_task(e1, id, &r), SLUICE_OK);
        assert_int_equal(sluice_engine_restore_task(e2, &r, T0 + 2 * SEC, &err), SLUICE_OK);
    }
    assert_int_equal(fx_poll(e2, T0 + 2 * SEC, 2, d), 2);
    for (int i = 0; i < 2; i++)
        if (strcmp(user_of(&d[i], user, sizeof user), "small") == 0)
            seen = 1;
    assert_true(seen);
    assert_true(last < small);
    sluice_engine_free(e1);
    sluice_engine_free(e2);
}

/* Changing a type's fairness re-files the tasks ready now, both ways. */
static void test_fair_reconfigure(void **unused)
{
    static const char *const lims[] = {"per_user", NULL};
    sluice_engine *e = fx_engine(NULL);
    sluice_delivery d[2];
    uint64_t small;

    (void)unused;
    setup_fair(e, SLUICE_FAIR_FIFO);
    for (int i = 0; i < 50; i++)
        submit_user(e, "big", 1, 0, T0);
    small = submit_user(e, "small", 1, 0, T0);
    type_opts(e, "job", lims, 0, SLUICE_FAIR_KEYS, "per_user", 30 * SEC);
    assert_int_equal(fx_poll(e, T0, 2, d), 2);
    assert_true(d[0].id == small || d[1].id == small);
    /* Back to FIFO: submission order again. */
    submit_user(e, "small", 1, 0, T0);
    type_opts(e, "job", lims, 0, SLUICE_FAIR_FIFO, NULL, 30 * SEC);
    assert_int_equal(fx_poll(e, T0, 2, d), 2);
    assert_true(d[0].id < d[1].id && d[1].id < small);
    sluice_engine_free(e);
}

/* Running out of memory while re-filing changes nothing: allocation n fails for n = 1, 2, ...
 * until the change goes through; each failure leaves the type FIFO with every task ready. */
static void test_fair_reconfigure_oom(void **unused)
{
    static const char *const lims[] = {"per_user", NULL};
    sluice_engine *e = fx_engine(NULL);
    sluice_delivery d[2];
    sluice_type_policy t;
    sluice_engine_stats st;
    uint64_t small;
    char msg[256];
    int rc = SLUICE_ENOMEM;
    long n;

    (void)unused;
    setup_fair(e, SLUICE_FAIR_FIFO);
    for (int i = 0; i < 40; i++)
        submit_user(e, i % 3 ? "big" : "other", 1, 0, T0);
    small = submit_user(e, "small", 1, 0, T0);
    sluice_type_policy_init(&t);
    t.name = (char *)"job";
    t.limits = (char **)lims;
    t.nlimits = 1;
    t.fairness = SLUICE_FAIR_KEYS;
    for (n = 1; n < 1000 && rc == SLUICE_ENOMEM; n++) {
        oom_install(n);
        rc = sluice_engine_set_type(e, &t, T0, msg, sizeof msg);
        oom_uninstall();
        sluice_engine_get_stats(e, &st);
        assert_int_equal(st.queued, 41);
        if (rc == SLUICE_ENOMEM)
            assert_int_equal(sluice_engine_get_type(e, "job")->fairness, SLUICE_FAIR_FIFO);
    }
    assert_int_equal(rc, SLUICE_OK);
    assert_true(n > 3); /* some allocations were failed */
    assert_int_equal(sluice_engine_get_type(e, "job")->fairness, SLUICE_FAIR_KEYS);
    /* "big" (1), "other" (2)... small's turn comes within three. */
    assert_int_equal(fx_poll(e, T0, 2, d), 2);
    assert_int_equal(fx_poll(e, T0, 1, d), 1);
    assert_int_equal(d[0].id, small);
    sluice_engine_free(e);
}

/* ---- The configuration file ------------------------------------------------------------------ */

#define CFG_LIMITS                                                                                 \
    "limits:\n  per_user: {rate: 10/1s, key: input.user}\n  global: {concurrency: 4}\n"            \
    "types:\n  job:\n"

static void expect_cfg_error(const char *text, const char *expected)
{
    sluice_config c;
    char msg[512];

    assert_int_equal(sluice_config_parse(text, strlen(text), "t.yaml", &c, msg, sizeof msg),
                     SLUICE_EINVAL);
    assert_string_equal(msg, expected);
    assert_null(c.types);
}

/* The keys load, default to the first keyed limit, install into an engine, and every mistake
 * is refused with the file, line and column of the value at fault. */
static void test_config_keys(void **unused)
{
    static const char ok[] = CFG_LIMITS "    limits: [global, per_user]\n"
                                        "    fairness: keys\n"
                                        "    charge_redelivery: true\n"
                                        "  plain:\n    limits: [per_user]\n";
    const sluice_type_policy *tp;
    sluice_engine *e = fx_engine(NULL);
    sluice_config c;
    char msg[512];

    (void)unused;
    assert_int_equal(sluice_config_parse(ok, strlen(ok), "t.yaml", &c, msg, sizeof msg), SLUICE_OK);
    assert_int_equal(sluice_config_apply(&c, e, T0, msg, sizeof msg), SLUICE_OK);
    tp = sluice_engine_get_type(e, "job");
    assert_int_equal(tp->fairness, SLUICE_FAIR_KEYS);
    assert_string_equal(tp->fair_key, "per_user");
    assert_int_equal(tp->charge_redelivery, 1);
    tp = sluice_engine_get_type(e, "plain"); /* the defaults: today's behaviour */
    assert_int_equal(tp->fairness, SLUICE_FAIR_FIFO);
    assert_null(tp->fair_key);
    assert_int_equal(tp->charge_redelivery, 0);
    sluice_config_clear(&c);
    sluice_engine_free(e);

    expect_cfg_error(CFG_LIMITS "    limits: [global, per_user]\n    fairness: key\n",
                     "t.yaml:7:15: types.job.fairness: expected fifo or keys, got \"key\"; did "
                     "you mean \"keys\"?");
    expect_cfg_error(CFG_LIMITS "    limits: [global, per_user]\n    fairness: keys\n"
                                "    fair_key: global\n",
                     "t.yaml:8:15: types.job.fair_key: limit \"global\" has no key, so it cannot "
                     "tell tenants apart");
    expect_cfg_error(CFG_LIMITS "    limits: [global]\n    fairness: keys\n",
                     "t.yaml:7:15: types.job.fairness: keys shares workers between the keys of a "
                     "keyed limit, and none of the type's limits has a key");
    expect_cfg_error(CFG_LIMITS "    limits: [global]\n    fairness: keys\n"
                                "    fair_key: per_user\n",
                     "t.yaml:8:15: types.job.fair_key: \"per_user\" is not one of the type's "
                     "limits (fair_key names the limit whose key is a task's tenant)");
    expect_cfg_error(CFG_LIMITS "    limits: [global, per_user]\n    fair_key: per_user\n",
                     "t.yaml:7:15: types.job.fair_key: fair_key needs fairness: keys");
    expect_cfg_error(CFG_LIMITS "    limits: [per_user]\n    charge_redelivery: yes\n",
                     "t.yaml:7:24: types.job.charge_redelivery: expected true or false, got "
                     "\"yes\"");
}

/* A policy built by hand is checked by the engine the same way. */
static void test_engine_checks_fairness(void **unused)
{
    static const char *const global[] = {"global", NULL}, *const both[] = {"global", "per_user",
                                                                           NULL};
    sluice_engine *e = fx_engine(NULL);
    sluice_limit_policy p;
    sluice_type_policy t;
    char msg[256];

    (void)unused;
    fx_limit(&p, "global", SLUICE_CONCURRENCY, 4, 0);
    fx_set_limit(e, &p);
    fx_rate(e, "per_user", 10, SEC, 10, "input.user");
    sluice_type_policy_init(&t);
    t.name = (char *)"job";
    t.limits = (char **)global;
    t.nlimits = 1;
    t.fairness = SLUICE_FAIR_KEYS;
    assert_int_equal(sluice_engine_set_type(e, &t, T0, msg, sizeof msg), SLUICE_EINVAL);
    assert_non_null(strstr(msg, "none of its limits has a key"));
    assert_null(sluice_engine_get_type(e, "job"));
    t.fair_key = (char *)"per_user";
    assert_int_equal(sluice_engine_set_type(e, &t, T0, msg, sizeof msg), SLUICE_EINVAL);
    assert_non_null(strstr(msg, "not one of the type's limits"));
    t.limits = (char **)both;
    t.nlimits = 2;
    assert_int_equal(sluice_engine_set_type(e, &t, T0, msg, sizeof msg), SLUICE_OK);
    t.fairness = SLUICE_FAIR_FIFO;
    assert_int_equal(sluice_engine_set_type(e, &t, T0, msg, sizeof msg), SLUICE_EINVAL);
    assert_non_null(strstr(msg, "fair_key is set but fairness is not keys"));
    t.fair_key = NULL;
    t.charge_redelivery = 2;
    assert_int_equal(sluice_engine_set_type(e, &t, T0, msg, sizeof msg), SLUICE_EINVAL);
    assert_non_null(strstr(msg, "charge_redelivery must be 0 or 1"));
    sluice_engine_free(e);
}

/* The plan a shared store files a task by (sluice_engine_resolve_task): under fair dispatch the
 * link whose key is its tenant; -1 under FIFO or for a task without a key there. */
static void test_fair_plan(void **unused)
{
    static const char *const lims[] = {"flat", "per_user", NULL};
    sluice_engine *e = fx_engine(NULL);
    sluice_charge c[2];
    sluice_task_plan plan;
    sluice_task_spec s;
    const char *payload = "{\"user\":\"acme\"}";

    (void)unused;
    fx_rate(e, "flat", 1000, SEC, 1000, NULL);
    fx_rate(e, "per_user", 1000, SEC, 1000, "input.user");
    type_opts(e, "job", lims, 0, SLUICE_FAIR_KEYS, NULL, 30 * SEC);
    memset(&s, 0, sizeof s);
    s.type = "job";
    s.payload = payload;
    s.payload_len = strlen(payload);
    s.units = 3;
    assert_int_equal(sluice_engine_resolve_task(e, &s, T0, &plan, c, 2, NULL), 2);
    assert_int_equal(plan.fair, 1);
    assert_int_equal(plan.fair_link, 1);
    assert_string_equal(c[plan.fair_link].key, "acme");
    assert_int_equal(c[plan.fair_link].units, 3);
    type_opts(e, "job", lims, 0, SLUICE_FAIR_FIFO, NULL, 30 * SEC);
    assert_int_equal(sluice_engine_resolve_task(e, &s, T0, &plan, c, 2, NULL), 2);
    assert_int_equal(plan.fair, 0);
    assert_int_equal(plan.fair_link, -1);
    sluice_engine_free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_redelivery_pays_again),
        cmocka_unit_test(test_redelivery_redeems_by_default),
        cmocka_unit_test(test_redelivery_counts_every_execution),
        cmocka_unit_test(test_redelivery_after_restart),
        cmocka_unit_test(test_fair_small_tenant_bounded),
        cmocka_unit_test(test_fifo_small_tenant_waits),
        cmocka_unit_test(test_fair_by_units),
        cmocka_unit_test(test_fair_priority_first),
        cmocka_unit_test(test_fair_keeps_limits),
        cmocka_unit_test(test_fair_restore),
        cmocka_unit_test(test_fair_reconfigure),
        cmocka_unit_test(test_fair_reconfigure_oom),
        cmocka_unit_test(test_config_keys),
        cmocka_unit_test(test_engine_checks_fairness),
        cmocka_unit_test(test_fair_plan),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
