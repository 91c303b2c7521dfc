/* SPDX-License-Identifier: MIT */
/*
 * Tests of per-key overrides of a named limit (issue 13 item 6): the policy data, its one-line
 * spec and its checks; the config loader's `overrides:`; and the engine on a simulated clock. The
 * property: with random arrivals over a few keys, an engine whose limit overrides key K grants
 * K's tasks exactly when a reference engine whose limit has K's definition for every key grants
 * them, and every other key exactly when a reference engine with the limit's own definition
 * does. Live changes restart the overridden key only; its core's state is saved under its own id.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine_fixture.h"
#include "sluice/config.h"
#include "sluice/policy_spec.h"
#include "testutil.h"

static char msg[1024];

/* ---- policy and spec ---------------------------------------------------------------------- */

static void test_spec(void **unused)
{
    sluice_limit_policy p, q;
    char text[SLUICE_POLICY_SPEC_MAX_LEN];

    (void)unused;
    assert_int_equal(sluice_spec_parse_policy("rate=10/1s,key=input.tenant,"
                                              "override.t42=rate=1000/1s;burst=50,"
                                              "override.a:b=rate=1/1m",
                                              &p, msg, sizeof msg),
                     SLUICE_OK);
    assert_int_equal(p.noverrides, 2);
    assert_string_equal(p.overrides[0].key, "t42");
    assert_int_equal(p.overrides[0].def.limit, 1000);
    assert_int_equal(p.overrides[0].def.burst, 50);
    assert_string_equal(p.overrides[1].key, "a:b");
    /* Canonical: overrides by key, whatever order they came in. */
    assert_int_equal(sluice_spec_format_policy(&p, text, sizeof text), SLUICE_OK);
    assert_string_equal(text, "rate=10/1s,key=input.tenant,override.a:b=rate=1/1m,"
                              "override.t42=rate=1000/1s;burst=50");
    assert_int_equal(sluice_spec_parse_policy(text, &q, msg, sizeof msg), SLUICE_OK);
    assert_int_equal(q.noverrides, 2);
    sluice_limit_policy_clear(&q);
    /* Copies are deep. */
    p.name = strdup("x");
    assert_int_equal(sluice_limit_policy_copy(&q, &p), SLUICE_OK);
    assert_ptr_not_equal(q.overrides, p.overrides);
    assert_string_equal(q.overrides[1].key, "a:b");
    free(p.name);
    p.name = NULL;
    sluice_limit_policy_clear(&q);
    sluice_limit_policy_clear(&p);

    /* Mistakes. */
    assert_int_equal(
        sluice_spec_parse_policy("rate=10/1s,override.k=rate=1/1s", &p, msg, sizeof msg),
        SLUICE_EINVAL);
    assert_non_null(strstr(msg, "keyed limit"));
    assert_int_equal(sluice_spec_parse_policy("rate=10/1s,key=explicit,override.k=window=1/1s", &p,
                                              msg, sizeof msg),
                     SLUICE_EINVAL);
    assert_non_null(strstr(msg, "a rate limit's override is a rate limit too"));
    assert_int_equal(sluice_spec_parse_policy("rate=10/1s,key=explicit,override.k=rate=1/1s,"
                                              "override.k=rate=2/1s",
                                              &p, msg, sizeof msg),
                     SLUICE_EPARSE);
    assert_non_null(strstr(msg, "two overrides"));
    assert_int_equal(sluice_spec_parse_policy("rate=10/1s,key=explicit,override.=rate=1/1s", &p,
                                              msg, sizeof msg),
                     SLUICE_EPARSE);
    assert_int_equal(
        sluice_spec_parse_policy("rate=10/1s,key=explicit,override.k=rate=x", &p, msg, sizeof msg),
        SLUICE_EPARSE);
    assert_non_null(strstr(msg, "override of key \"k\""));
    assert_int_equal(
        sluice_spec_parse_policy("rate=10/1s,key=explicit,units=5,override.k=rate=1/1s", &p, msg,
                                 sizeof msg),
        SLUICE_EINVAL);
    assert_non_null(strstr(msg, "units 5 exceed"));
}

/* ---- config ------------------------------------------------------------------------------- */

static int parse(const char *text, sluice_config *c)
{
    return sluice_config_parse(text, strlen(text), "t.yaml", c, msg, sizeof msg);
}

static void test_config(void **unused)
{
    sluice_config c;
    const sluice_limit_policy *l;

    (void)unused;
    assert_int_equal(parse("limits:\n"
                           "  api:\n"
                           "    rate: 10/1s\n"
                           "    key: input.tenant\n"
                           "    max_keys: 500\n"
                           "    overrides:\n"
                           "      tenant-42: {rate: 1000/1s, burst: 20}\n"
                           "      \"acme:eu\": rate=5/1m\n",
                           &c),
                     SLUICE_OK);
    l = sluice_config_find_limit(&c, "api");
    assert_non_null(l);
    assert_int_equal(l->noverrides, 2);
    assert_string_equal(l->overrides[0].key, "tenant-42");
    assert_int_equal(l->overrides[0].def.limit, 1000);
    assert_int_equal(l->overrides[0].def.burst, 20);
    assert_int_equal(l->overrides[0].def.max_keys, 500);
    assert_string_equal(l->overrides[1].key, "acme:eu");
    assert_int_equal(l->overrides[1].def.period_ns, MIN);
    sluice_config_clear(&c);

    assert_int_equal(parse("limits:\n  api:\n    rate: 10/1s\n    overrides:\n"
                           "      t: {rate: 1/1s}\n",
                           &c),
                     SLUICE_EINVAL);
    assert_string_equal(msg, "t.yaml:4:5: limits.api.overrides: per-key overrides apply to a "
                             "keyed limit without tiers");
    assert_int_equal(parse("limits:\n  api:\n    rate: 10/1s\n    key: explicit\n"
                           "    overrides:\n      t: {window: 1/1s}\n",
                           &c),
                     SLUICE_EINVAL);
    assert_string_equal(msg, "t.yaml:6:10: limits.api.overrides.t: override of key \"t\": a rate "
                             "limit's override is a rate limit too, not a window one");
    assert_int_equal(parse("limits:\n  api:\n    rate: 10/1s\n    key: explicit\n"
                           "    overrides:\n      t: {rate: 1/1s, brust: 2}\n",
                           &c),
                     SLUICE_EINVAL);
    assert_non_null(strstr(msg, "t.yaml:6:23: limits.api.overrides.t: unknown key \"brust\""));
    assert_int_equal(parse("limits:\n  api:\n    rate: 10/1s\n    key: explicit\n"
                           "    overrides:\n      \"a,b\": {rate: 1/1s}\n",
                           &c),
                     SLUICE_EINVAL);
    assert_non_null(strstr(msg, "t.yaml:6:7: limits.api.overrides: an override's key"));
    assert_int_equal(parse("limits:\n  api:\n    rate: 10/1s\n    key: explicit\n"
                           "    overrides: [a]\n",
                           &c),
                     SLUICE_EINVAL);
    assert_non_null(strstr(msg, "t.yaml:5:16: limits.api.overrides: expected"));
}

/* ---- engine ------------------------------------------------------------------------------- */

#define NKEYS 4

/* An engine with one type "t" on limit "l" keyed by input.k: rate permits/period burst. */
static sluice_engine *make(int64_t permits, int64_t period_ns, int64_t burst,
                           const sluice_key_override *ov, size_t nov)
{
    sluice_engine *e = fx_engine(NULL);
    const char *lims[] = {"l", NULL};
    sluice_limit_policy p;

    fx_limit(&p, "l", SLUICE_RATE, permits, period_ns);
    p.def.burst = burst;
    p.key_source = SLUICE_KEY_PATH;
    p.key_path = "k";
    p.overrides = (sluice_key_override *)ov;
    p.noverrides = nov;
    fx_set_limit(e, &p);
    fx_type(e, "t", lims);
    return e;
}

/* Polls everything due at now, acks it at once, and records when each task id started. */
static void drain(sluice_engine *e, int64_t now, int64_t *started, size_t nstarted)
{
    sluice_delivery out[64];
    int n;

    do {
        n = fx_poll(e, now, 64, out);
        for (int i = 0; i < n; i++) {
            assert_true(out[i].id < nstarted);
            started[out[i].id] = now;
            assert_int_equal(sluice_engine_ack(e, out[i].id, -1, now), SLUICE_OK);
        }
    } while (n == 64);
}

static void test_property(void **unused)
{
    enum { N = 400 };
    static int64_t got[N + 1], ref_o[N + 1], ref_b[N + 1];
    uint64_t seed = 12345;

    (void)unused;
    for (int round = 0; round < 6; round++) {
        sluice_key_override ov;
        sluice_engine *a, *ro, *rb;
        int keys[N + 1];
        uint64_t ida[N + 1], ido[N + 1], idb[N + 1];
        int64_t now = T0;

        memset(&ov, 0, sizeof ov);
        ov.key = "k0";
        sluice_limit_def_init(&ov.def, SLUICE_RATE);
        ov.def.limit = 5 + round * 7;
        ov.def.period_ns = SEC;
        ov.def.burst = 1 + round;
        a = make(2, SEC, 3, &ov, 1);
        ro = make(ov.def.limit, SEC, ov.def.burst, NULL, 0);
        rb = make(2, SEC, 3, NULL, 0);
        memset(got, 0xff, sizeof got);
        memset(ref_o, 0xff, sizeof ref_o);
        memset(ref_b, 0xff, sizeof ref_b);
        for (int i = 0; i < N; i++) {
            char payload[32];

            seed = seed * 6364136223846793005u + 1442695040888963407u;
            keys[i] = (int)(seed >> 33) % NKEYS;
            now += (int64_t)((seed >> 40) % 400) * MS;
            snprintf(payload, sizeof payload, "{\"k\":\"k%d\"}", keys[i]);
            ida[i] = fx_submit(a, "t", payload, now);
            if (keys[i] == 0)
                ido[i] = fx_submit(ro, "t", payload, now);
            else
                idb[i] = fx_submit(rb, "t", payload, now);
            drain(a, now, got, N + 1);
            drain(ro, now, ref_o, N + 1);
            drain(rb, now, ref_b, N + 1);
        }
        /* Then let every parked task through, step by step. */
        for (int s = 0; s < 4000; s++) {
            now += 50 * MS;
            drain(a, now, got, N + 1);
            drain(ro, now, ref_o, N + 1);
            drain(rb, now, ref_b, N + 1);
        }
        for (int i = 0; i < N; i++) {
            int64_t want = keys[i] == 0 ? ref_o[ido[i]] : ref_b[idb[i]];

            assert_true(want != -1);
            if (got[ida[i]] != want)
                fail_msg("round %d task %d key k%d: started at %lld, reference %lld", round, i,
                         keys[i], (long long)(got[ida[i]] - T0), (long long)(want - T0));
        }
        sluice_engine_free(a);
        sluice_engine_free(ro);
        sluice_engine_free(rb);
    }
}

/* Live changes: adding, replacing and removing an override restarts that key only. */
static void test_live(void **unused)
{
    sluice_engine *e = make(1, MIN, 1, NULL, 0);
    const sluice_limit_policy *p;
    sluice_limit_def def;
    sluice_delivery out[8];
    uint64_t b2, k2;

    (void)unused;
    /* k0 and k1 each spend their one permit of the minute. */
    fx_submit(e, "t", "{\"k\":\"k0\"}", T0);
    fx_submit(e, "t", "{\"k\":\"k1\"}", T0);
    assert_int_equal(fx_poll(e, T0, 8, out), 2);
    assert_int_equal(sluice_engine_ack(e, out[0].id, -1, T0), SLUICE_OK);
    assert_int_equal(sluice_engine_ack(e, out[1].id, -1, T0), SLUICE_OK);
    k2 = fx_submit(e, "t", "{\"k\":\"k0\"}", T0 + SEC);
    b2 = fx_submit(e, "t", "{\"k\":\"k1\"}", T0 + SEC);
    assert_int_equal(fx_poll(e, T0 + SEC, 8, out), 0);
    /* k0 is a paying tenant now: 10 a second. Its parked task starts at once; k1 still waits. */
    sluice_limit_def_init(&def, SLUICE_RATE);
    def.limit = 10;
    def.period_ns = SEC;
    assert_int_equal(
        sluice_engine_set_key_override(e, "l", "k0", 2, &def, T0 + 2 * SEC, msg, sizeof msg),
        SLUICE_OK);
    p = sluice_engine_get_limit(e, "l", NULL);
    assert_int_equal(p->noverrides, 1);
    assert_string_equal(p->overrides[0].key, "k0");
    assert_int_equal(fx_poll(e, T0 + 2 * SEC, 8, out), 1);
    assert_int_equal(out[0].id, k2);
    assert_int_equal(sluice_engine_ack(e, k2, -1, T0 + 2 * SEC), SLUICE_OK);
    for (int i = 0; i < 10; i++)
        fx_submit(e, "t", "{\"k\":\"k0\"}", T0 + 3 * SEC);
    assert_int_equal(fx_poll(e, T0 + 3 * SEC, 8, out), 8);
    for (int i = 0; i < 8; i++)
        assert_int_equal(sluice_engine_ack(e, out[i].id, -1, T0 + 3 * SEC), SLUICE_OK);
    /* Its state is saved under its own id. */
    assert_non_null(sluice_engine_limit_by_id(e, "l/=k0"));
    assert_null(sluice_engine_limit_by_id(e, "l/=k1"));
    /* Checks: a kind other than the limit's, a bad key, an unknown limit, nothing to remove. */
    def.kind = SLUICE_WINDOW;
    assert_int_equal(
        sluice_engine_set_key_override(e, "l", "k0", 2, &def, T0 + 3 * SEC, msg, sizeof msg),
        SLUICE_EINVAL);
    assert_int_equal(
        sluice_engine_set_key_override(e, "l", "a,b", 3, NULL, T0 + 3 * SEC, msg, sizeof msg),
        SLUICE_EINVAL);
    assert_int_equal(
        sluice_engine_set_key_override(e, "nope", "k", 1, NULL, T0 + 3 * SEC, msg, sizeof msg),
        SLUICE_ENOTFOUND);
    assert_int_equal(
        sluice_engine_set_key_override(e, "l", "k1", 2, NULL, T0 + 3 * SEC, msg, sizeof msg),
        SLUICE_ENOTFOUND);
    /* k1's state never moved: its task waits for the minute. */
    assert_int_equal(fx_state(e, b2), SLUICE_TASK_PARKED);
    /* Removed: k0 is back on 1 a minute, from a fresh start. */
    assert_int_equal(
        sluice_engine_set_key_override(e, "l", "k0", 2, NULL, T0 + 4 * SEC, msg, sizeof msg),
        SLUICE_OK);
    assert_int_equal(sluice_engine_get_limit(e, "l", NULL)->noverrides, 0);
    assert_null(sluice_engine_limit_by_id(e, "l/=k0"));
    assert_int_equal(fx_poll(e, T0 + 4 * SEC, 8, out), 1); /* one of the two k0 left */
    assert_int_equal(sluice_engine_ack(e, out[0].id, -1, T0 + 4 * SEC), SLUICE_OK);
    assert_int_equal(fx_poll(e, T0 + 4 * SEC, 8, out), 0);
    assert_int_equal(fx_poll(e, T0 + MIN, 8, out), 1); /* k1's b2 */
    assert_int_equal(out[0].id, b2);
    sluice_engine_free(e);
}

/* Parsing, copying, formatting and installing a policy with overrides: every allocation may
 * fail, and each failure returns SLUICE_ENOMEM and leaks nothing. */
static int oom_body(void *arg)
{
    sluice_limit_policy p, q;
    sluice_engine *e = NULL;
    sluice_limit_def def;
    char m[256];
    int rc;

    (void)arg;
    rc = sluice_spec_parse_policy("rate=10/1s,key=explicit,override.a=rate=5/1s,"
                                  "override.b=rate=7/1s;burst=2",
                                  &p, m, sizeof m);
    if (rc != SLUICE_OK)
        return rc;
    rc = sluice_limit_policy_copy(&q, &p);
    sluice_limit_policy_clear(&p);
    if (rc != SLUICE_OK)
        return rc;
    rc = sluice_engine_new(NULL, &e);
    if (rc == SLUICE_OK) {
        sluice_limit_policy named = q;

        named.name = "l";
        rc = sluice_engine_set_limit(e, &named, T0, m, sizeof m);
    }
    sluice_limit_policy_clear(&q);
    if (rc == SLUICE_OK) {
        sluice_limit_def_init(&def, SLUICE_RATE);
        def.limit = 3;
        def.period_ns = SEC;
        rc = sluice_engine_set_key_override(e, "l", "c", 1, &def, T0, m, sizeof m);
    }
    if (rc == SLUICE_OK)
        rc = sluice_engine_set_key_override(e, "l", "a", 1, NULL, T0, m, sizeof m);
    sluice_engine_free(e);
    return rc;
}

static void test_oom(void **unused)
{
    (void)unused;
    assert_true(oom_sweep(oom_body, NULL, 2000) > 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec), cmocka_unit_test(test_config), cmocka_unit_test(test_property),
        cmocka_unit_test(test_live), cmocka_unit_test(test_oom),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
