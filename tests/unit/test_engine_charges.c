/* SPDX-License-Identifier: MIT */
/*
 * Tests of sluice_engine_task_charges and sluice_delivery.charged, on a simulated clock: the
 * engine's own account of what a grant charged, which the simulator (and anything else that
 * shows a charge) reads instead of resolving keys, tiers and units itself.
 *
 * Covered: the links as resolved at submit (tier chosen by a field, key from a path, the global
 * key of missing_key: global, units fixed, from the input or the task's own), before a grant
 * (nothing charged or held), at the grant (charged, settles, held), at an ack (leases given
 * back, the charge stays), across a lost lease (the redelivery redeems the grant: charged 0 on
 * the delivery, the links still charged, the lease taken again), across a fail and its retry
 * (throttle_retries 1 charges again, 0 takes the concurrency units only), a short out array, an
 * unknown id, a removed limit, and the submits the engine refuses (a bad units value, a missing
 * key without missing_key: global), which therefore have no charges at all.
 */
#include "engine_fixture.h"

/* Seed 004's tier limit, a token limit keyed by user with units from the input, a per-org limit
 * whose tasks without an org share the global key, and one concurrent run per user. */
static void setup_chain(sluice_engine *e, int throttle_retries)
{
    static const char *lims[] = {"tier", "tokens", "org", "one", NULL};
    static sluice_tier tiers[2];
    sluice_limit_policy p;

    memset(tiers, 0, sizeof tiers);
    tiers[0].name = "small";
    tiers[0].min = 0;
    tiers[0].max = 2;
    sluice_limit_def_init(&tiers[0].def, SLUICE_SLIDING);
    tiers[0].def.limit = 20;
    tiers[0].def.period_ns = MIN;
    tiers[1] = tiers[0];
    tiers[1].name = "big";
    tiers[1].min = 3;
    tiers[1].max = INT64_MAX;
    tiers[1].def.limit = 5;
    fx_limit(&p, "tier", SLUICE_SLIDING, 1, MIN);
    p.tier_path = "agents";
    p.tiers = tiers;
    p.ntiers = 2;
    p.units_source = SLUICE_UNITS_FIXED;
    p.units_fixed = 1;
    fx_set_limit(e, &p);

    fx_limit(&p, "tokens", SLUICE_RATE, 1000, MIN);
    p.key_source = SLUICE_KEY_PATH;
    p.key_path = "user";
    p.units_source = SLUICE_UNITS_PATH;
    p.units_path = "tokens";
    fx_set_limit(e, &p);

    fx_limit(&p, "org", SLUICE_RATE, 100, MIN);
    p.key_source = SLUICE_KEY_PATH;
    p.key_path = "org";
    p.missing_key_global = 1;
    fx_set_limit(e, &p);

    fx_limit(&p, "one", SLUICE_CONCURRENCY, 1, 0);
    p.key_source = SLUICE_KEY_PATH;
    p.key_path = "user";
    fx_set_limit(e, &p);

    fx_type_ex(e, "job", lims, 3, throttle_retries, 10 * SEC);
}

/* Checks link c against the expected limit, tier (NULL: none), key, kind and units. */
static void check_link(const sluice_charge *c, const char *limit, const char *tier, const char *key,
                       sluice_limit_kind kind, int64_t units)
{
    assert_string_equal(c->limit, limit);
    if (tier)
        assert_string_equal(c->tier, tier);
    else
        assert_null(c->tier);
    assert_int_equal(c->keylen, strlen(key));
    assert_memory_equal(c->key, key, c->keylen);
    assert_int_equal(c->key[c->keylen], '\0');
    assert_int_equal(c->kind, kind);
    assert_int_equal(c->units, units);
}

/* Checks the charged, settles and held flags of the four links of setup_chain's type. */
static void check_flags(const sluice_engine *e, uint64_t id, int charged, int held)
{
    sluice_charge c[4];

    assert_int_equal(sluice_engine_task_charges(e, id, c, 4), 4);
    for (int i = 0; i < 3; i++)
        assert_int_equal(c[i].charged, charged);
    /* Fixed units are not settled by a cost; units from the input are; a concurrency link is
     * held, never charged. */
    assert_int_equal(c[0].settles, 0);
    assert_int_equal(c[1].settles, charged);
    assert_int_equal(c[2].settles, charged);
    assert_int_equal(c[3].charged, 0);
    assert_int_equal(c[3].settles, 0);
    assert_int_equal(c[3].held, held);
    for (int i = 0; i < 3; i++)
        assert_int_equal(c[i].held, 0);
}

static void test_resolved_at_submit(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    sluice_charge c[4];
    uint64_t a, b;

    (void)unused;
    setup_chain(e, 1);
    a = fx_submit(e, "job", "{\"agents\":4,\"user\":\"ann\",\"org\":\"acme\",\"tokens\":7}", T0);
    b = fx_submit(e, "job", "{\"agents\":1,\"user\":\"bob\",\"tokens\":3}", T0);

    memset(c, 0, sizeof c);
    assert_int_equal(sluice_engine_task_charges(e, a, c, 4), 4);
    check_link(&c[0], "tier", "big", "", SLUICE_SLIDING, 1);
    check_link(&c[1], "tokens", NULL, "ann", SLUICE_RATE, 7);
    check_link(&c[2], "org", NULL, "acme", SLUICE_RATE, 1);
    check_link(&c[3], "one", NULL, "ann", SLUICE_CONCURRENCY, 1);
    check_flags(e, a, 0, 0);

    /* No org: the global key of missing_key: global. */
    assert_int_equal(sluice_engine_task_charges(e, b, c, 4), 4);
    check_link(&c[0], "tier", "small", "", SLUICE_SLIDING, 1);
    check_link(&c[1], "tokens", NULL, "bob", SLUICE_RATE, 3);
    check_link(&c[2], "org", NULL, "", SLUICE_RATE, 1);

    /* A short array gets the first links and the full count; max 0 writes nothing. */
    memset(c, 0, sizeof c);
    assert_int_equal(sluice_engine_task_charges(e, a, c, 2), 4);
    assert_string_equal(c[1].limit, "tokens");
    assert_null(c[2].limit);
    assert_int_equal(sluice_engine_task_charges(e, a, NULL, 0), 4);
    assert_int_equal(sluice_engine_task_charges(e, 999, c, 4), SLUICE_ENOTFOUND);
    sluice_engine_free(e);
}

/* What the engine refuses has no charges: the caller must not invent any. */
static void test_refused_submits(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    sluice_submit_error err;
    uint64_t id = 0;

    (void)unused;
    setup_chain(e, 1);
    /* Units below 1, units not a number, no user (its limits have no missing_key: global), no
     * tier field. */
    assert_int_equal(fx_try(e, "job", "{\"agents\":0,\"user\":\"u\",\"tokens\":0}", T0, &id, &err),
                     SLUICE_EINVAL);
    assert_non_null(strstr(err.message, "units"));
    assert_int_equal(
        fx_try(e, "job", "{\"agents\":0,\"user\":\"u\",\"tokens\":\"many\"}", T0, &id, &err),
        SLUICE_EINVAL);
    assert_int_equal(fx_try(e, "job", "{\"agents\":0,\"tokens\":1}", T0, &id, &err), SLUICE_EINVAL);
    assert_int_equal(fx_try(e, "job", "{\"user\":\"u\",\"tokens\":1}", T0, &id, &err),
                     SLUICE_EINVAL);
    assert_int_equal(sluice_engine_last_id(e), 0);
    sluice_engine_free(e);
}

static void test_grant_ack_and_lost_lease(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    sluice_delivery d[4];
    sluice_charge c[4];
    uint64_t a, b;

    (void)unused;
    setup_chain(e, 1);
    a = fx_submit(e, "job", "{\"agents\":0,\"user\":\"ann\",\"tokens\":5}", T0);
    b = fx_submit(e, "job", "{\"agents\":0,\"user\":\"ann\",\"tokens\":5}", T0);

    /* The grant: every link charged, the concurrency lease held; b waits for that lease. */
    assert_int_equal(fx_poll(e, T0, 4, d), 1);
    assert_int_equal(d[0].id, a);
    assert_int_equal(d[0].charged, 1);
    check_flags(e, a, 1, 1);
    check_flags(e, b, 0, 0);

    /* The lease expires: the lease goes back, the grant stays with the task... */
    assert_int_equal(sluice_engine_tick(e, T0 + 10 * SEC), SLUICE_OK);
    assert_int_equal(fx_state(e, a), SLUICE_TASK_QUEUED);
    check_flags(e, a, 1, 0);
    /* ...and the redelivery redeems it: nothing charged again, the lease taken again. */
    assert_int_equal(sluice_engine_poll(e, NULL, 0, 4, T0 + 10 * SEC, d), 1);
    assert_int_equal(d[0].id, a);
    assert_int_equal(d[0].charged, 0);
    assert_int_equal(d[0].attempt, 2);
    check_flags(e, a, 1, 1);

    /* An ack with a cost gives the lease back and keeps the (settled) charge on record. */
    assert_int_equal(sluice_engine_ack(e, a, 9, T0 + 11 * SEC), SLUICE_OK);
    check_flags(e, a, 1, 0);
    assert_int_equal(sluice_engine_task_charges(e, a, c, 4), 4);
    assert_int_equal(c[1].units, 5); /* the units asked; the cost is the ledger's business */

    assert_int_equal(sluice_engine_poll(e, NULL, 0, 4, T0 + 11 * SEC, d), 1);
    assert_int_equal(d[0].id, b);
    assert_int_equal(d[0].charged, 1);
    check_flags(e, b, 1, 1);
    sluice_engine_free(e);
}

/* A fail clears the charges; the retry charges again under throttle_retries 1, and takes only
 * its concurrency units under 0. */
static void retry_case(int throttle)
{
    sluice_engine *e = fx_engine(NULL);
    sluice_delivery d[4];
    uint64_t a;

    setup_chain(e, throttle);
    a = fx_submit(e, "job", "{\"agents\":0,\"user\":\"ann\",\"tokens\":5}", T0);
    assert_int_equal(fx_poll(e, T0, 4, d), 1);
    assert_int_equal(sluice_engine_fail(e, a, SLUICE_FAIL_MODE_RETRY, "boom", T0 + SEC), SLUICE_OK);
    check_flags(e, a, 0, 0);
    assert_int_equal(fx_poll(e, T0 + 10 * SEC, 4, d), 1); /* after the 1 s backoff */
    assert_int_equal(d[0].id, a);
    assert_int_equal(d[0].charged, throttle);
    check_flags(e, a, throttle, 1);
    /* A dead fail gives the lease back; a finished task still lists its links. */
    assert_int_equal(sluice_engine_fail(e, a, SLUICE_FAIL_MODE_DEAD, NULL, T0 + 11 * SEC),
                     SLUICE_OK);
    assert_int_equal(fx_state(e, a), SLUICE_TASK_FAILED);
    check_flags(e, a, 0, 0);
    sluice_engine_free(e);
}

static void test_retry_throttled(void **unused)
{
    (void)unused;
    retry_case(1);
}

static void test_retry_free(void **unused)
{
    (void)unused;
    retry_case(0);
}

/* A quota settles whatever its units' source; a limit removed while a task names it stays
 * listed, and no longer settles. */
static void test_quota_and_removed_limit(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    const char *lims[] = {"daily", "gone", NULL};
    sluice_limit_policy p;
    sluice_delivery d[2];
    sluice_charge c[2];
    uint64_t a;

    (void)unused;
    fx_limit(&p, "daily", SLUICE_QUOTA, 100, 0);
    p.def.calendar = SLUICE_CAL_DAY;
    p.units_source = SLUICE_UNITS_FIXED;
    p.units_fixed = 2;
    fx_set_limit(e, &p);
    fx_rate(e, "gone", 10, MIN, 10, NULL);
    fx_type(e, "t", lims);
    a = fx_submit(e, "t", NULL, T0);
    assert_int_equal(fx_poll(e, T0, 2, d), 1);
    assert_int_equal(sluice_engine_task_charges(e, a, c, 2), 2);
    check_link(&c[0], "daily", NULL, "", SLUICE_QUOTA, 2);
    assert_int_equal(c[0].charged, 1);
    assert_int_equal(c[0].settles, 1);
    assert_int_equal(c[1].settles, 1);

    fx_type(e, "t", NULL);
    assert_int_equal(sluice_engine_del_limit(e, "gone", T0 + 2 * SEC), SLUICE_OK);
    assert_int_equal(sluice_engine_task_charges(e, a, c, 2), 2);
    check_link(&c[1], "gone", NULL, "", SLUICE_RATE, 1);
    assert_int_equal(c[1].charged, 1);
    assert_int_equal(c[1].settles, 0);
    assert_int_equal(sluice_engine_ack(e, a, 1, T0 + SEC), SLUICE_OK);
    sluice_engine_free(e);
}

/* A resolution without a submit (sluice_engine_resolve_task, for a shared store) gives the
 * links a submit would, creates nothing, and refuses what a submit refuses with its words. */
static void resolve_spec_of(const char *payload, sluice_task_spec *s)
{
    memset(s, 0, sizeof *s);
    s->type = "job";
    s->payload = payload;
    s->payload_len = strlen(payload);
}

static void test_resolve_without_submit(void **unused)
{
    static const char *const payloads[] = {
        "{\"agents\":4,\"user\":\"ann\",\"org\":\"acme\",\"tokens\":7}",
        "{\"agents\":1,\"user\":\"bob\",\"tokens\":3}",
    };
    sluice_engine *e = fx_engine(NULL);
    sluice_submit_error err, err2;
    sluice_task_plan plan;
    sluice_charge c[4], d[4];
    sluice_task_spec s;
    uint64_t id = 0;

    (void)unused;
    setup_chain(e, 1);
    for (size_t k = 0; k < 2; k++) {
        resolve_spec_of(payloads[k], &s);
        s.has_priority = 1;
        s.priority = 9;
        s.units = 2;
        memset(c, 0, sizeof c);
        assert_int_equal(sluice_engine_resolve_task(e, &s, T0, &plan, c, 4, &err), 4);
        assert_int_equal(sluice_engine_last_id(e), k);
        assert_int_equal(plan.priority, 9);
        assert_int_equal(plan.units, 2);
        assert_int_equal(plan.lease_ns, 10 * SEC);
        assert_int_equal(plan.retry.max_attempts, 3);
        /* The same links, and the same definitions, as the submit's. */
        id = fx_submit_spec(e, &s, T0);
        assert_int_equal(sluice_engine_task_charges(e, id, d, 4), 4);
        for (int i = 0; i < 4; i++) {
            assert_string_equal(c[i].limit, d[i].limit);
            assert_true(c[i].tier == d[i].tier ||
                        (c[i].tier && d[i].tier && strcmp(c[i].tier, d[i].tier) == 0));
            assert_int_equal(c[i].keylen, d[i].keylen);
            assert_memory_equal(c[i].key, d[i].key, c[i].keylen);
            assert_int_equal(c[i].units, d[i].units);
            assert_int_equal(c[i].kind, d[i].kind);
            assert_ptr_equal(c[i].def, d[i].def);
            assert_int_equal(c[i].charged, 0);
            assert_int_equal(c[i].held, 0);
        }
        /* Units from the task or the input settle; fixed units and concurrency do not. */
        assert_int_equal(c[0].settles, 0);
        assert_int_equal(c[1].settles, 1);
        assert_int_equal(c[2].settles, 1);
        assert_int_equal(c[3].settles, 0);
    }
    assert_int_equal(c[1].units, 3); /* from the input, not the task's 2 */
    assert_string_equal(c[0].tier, "small");

    /* A short array: the count, and only the first links written. */
    memset(c, 0, sizeof c);
    assert_int_equal(sluice_engine_resolve_task(e, &s, T0, &plan, c, 1, NULL), 4);
    assert_null(c[1].limit);

    /* Refused as a submit refuses, with the same message. */
    resolve_spec_of("{\"agents\":0,\"tokens\":1}", &s);
    assert_int_equal(sluice_engine_resolve_task(e, &s, T0, &plan, c, 4, &err), SLUICE_EINVAL);
    assert_int_equal(sluice_engine_submit(e, &s, T0, &id, &err2), SLUICE_EINVAL);
    assert_string_equal(err.message, err2.message);
    resolve_spec_of("not json", &s);
    assert_int_equal(sluice_engine_resolve_task(e, &s, T0, &plan, c, 4, &err), SLUICE_EINVAL);
    assert_non_null(strstr(err.message, "JSON"));
    s.lease_limit = "one";
    s.lease_id = 1;
    assert_int_equal(sluice_engine_resolve_task(e, &s, T0, &plan, c, 4, &err), SLUICE_EINVAL);

    /* An undeclared type: no chain, the engine's default lease, nothing kept. */
    resolve_spec_of("{}", &s);
    s.type = "adhoc";
    assert_int_equal(sluice_engine_resolve_task(e, &s, T0, &plan, c, 4, &err), 0);
    assert_true(plan.lease_ns > 0);
    assert_null(sluice_engine_get_type(e, "adhoc"));
    assert_int_equal(sluice_engine_last_id(e), 2);
    sluice_engine_free(e);
}

/* A key with an override resolves to the override's definition. */
static void test_resolve_override(void **unused)
{
    static const char *const lims[] = {"per", NULL};
    sluice_engine *e = fx_engine(NULL);
    sluice_key_override o;
    sluice_limit_policy p;
    sluice_task_plan plan;
    sluice_charge c[1];
    sluice_task_spec s;

    (void)unused;
    fx_limit(&p, "per", SLUICE_RATE, 10, MIN);
    p.key_source = SLUICE_KEY_PATH;
    p.key_path = "user";
    memset(&o, 0, sizeof o);
    o.key = "vip";
    o.def = p.def;
    o.def.limit = 99;
    p.overrides = &o;
    p.noverrides = 1;
    fx_set_limit(e, &p);
    fx_type(e, "job", lims);
    resolve_spec_of("{\"user\":\"vip\"}", &s);
    assert_int_equal(sluice_engine_resolve_task(e, &s, T0, &plan, c, 1, NULL), 1);
    assert_int_equal(c[0].def->limit, 99);
    resolve_spec_of("{\"user\":\"other\"}", &s);
    assert_int_equal(sluice_engine_resolve_task(e, &s, T0, &plan, c, 1, NULL), 1);
    assert_int_equal(c[0].def->limit, 10);
    sluice_engine_free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resolved_at_submit),
        cmocka_unit_test(test_refused_submits),
        cmocka_unit_test(test_grant_ack_and_lost_lease),
        cmocka_unit_test(test_retry_throttled),
        cmocka_unit_test(test_retry_free),
        cmocka_unit_test(test_quota_and_removed_limit),
        cmocka_unit_test(test_resolve_without_submit),
        cmocka_unit_test(test_resolve_override),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
