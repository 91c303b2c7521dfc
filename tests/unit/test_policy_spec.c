/* SPDX-License-Identifier: MIT */
/*
 * Tests of policy specs (sluice_spec_parse_policy / sluice_spec_format_policy): every policy
 * option and its default, options mixed among the limit's, the canonical form and its round
 * trip, malformed specs with the code and a word of their message, random junk (fails cleanly
 * or round-trips), and an out-of-memory sweep.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "sluice/error.h"
#include "sluice/policy.h"
#include "sluice/policy_spec.h"
#include "testutil.h"

/* Parses text, which must succeed, into *p. */
static void parse_ok(const char *text, sluice_limit_policy *p)
{
    char msg[256];
    int rc = sluice_spec_parse_policy(text, p, msg, sizeof(msg));

    if (rc != 0)
        fail_msg("%s: %d %s", text, rc, msg);
    assert_string_equal(msg, "");
}

/* Parses, formats and compares with the canonical text `want`. */
static void round_trip(const char *text, const char *want)
{
    sluice_limit_policy p, q;
    char buf[SLUICE_POLICY_SPEC_MAX_LEN], buf2[SLUICE_POLICY_SPEC_MAX_LEN];

    parse_ok(text, &p);
    assert_int_equal(sluice_spec_format_policy(&p, buf, sizeof(buf)), 0);
    assert_string_equal(buf, want);
    parse_ok(buf, &q);
    assert_int_equal(sluice_spec_format_policy(&q, buf2, sizeof(buf2)), 0);
    assert_string_equal(buf2, buf);
    assert_int_equal(p.key_source, q.key_source);
    assert_int_equal(p.units_source, q.units_source);
    assert_int_equal(p.units_fixed, q.units_fixed);
    assert_int_equal(p.overflow, q.overflow);
    assert_int_equal(p.missing_key_global, q.missing_key_global);
    sluice_limit_policy_clear(&p);
    sluice_limit_policy_clear(&q);
}

static void test_defaults(void **unused)
{
    sluice_limit_policy p;

    (void)unused;
    parse_ok("rate=10/1s", &p);
    assert_null(p.name);
    assert_int_equal(p.def.kind, SLUICE_RATE);
    assert_int_equal(p.def.limit, 10);
    assert_int_equal(p.key_source, SLUICE_KEY_NONE);
    assert_null(p.key_path);
    assert_int_equal(p.missing_key_global, 0);
    assert_int_equal(p.overflow, SLUICE_OVERFLOW_WAIT);
    assert_int_equal(p.units_source, SLUICE_UNITS_TASK);
    assert_int_equal(p.ntiers, 0);
    sluice_limit_policy_clear(&p);
}

static void test_options(void **unused)
{
    sluice_limit_policy p;

    (void)unused;
    parse_ok("rate=100/1s,key=input.tenant_id,burst=20,missing_key=global,overflow=reject,"
             "units=input.tokens",
             &p);
    assert_int_equal(p.def.burst, 20);
    assert_int_equal(p.key_source, SLUICE_KEY_PATH);
    assert_string_equal(p.key_path, "input.tenant_id");
    assert_int_equal(p.missing_key_global, 1);
    assert_int_equal(p.overflow, SLUICE_OVERFLOW_REJECT);
    assert_int_equal(p.units_source, SLUICE_UNITS_PATH);
    assert_string_equal(p.units_path, "input.tokens");
    sluice_limit_policy_clear(&p);

    parse_ok("concurrency=4,key=explicit,units=2,ttl=10s,missing_key=error", &p);
    assert_int_equal(p.def.kind, SLUICE_CONCURRENCY);
    assert_int_equal(p.key_source, SLUICE_KEY_EXPLICIT);
    assert_int_equal(p.missing_key_global, 0);
    assert_int_equal(p.units_source, SLUICE_UNITS_FIXED);
    assert_int_equal(p.units_fixed, 2);
    sluice_limit_policy_clear(&p);

    parse_ok("quota=1000/day,key=none,units=task,overflow=wait", &p);
    assert_int_equal(p.key_source, SLUICE_KEY_NONE);
    assert_int_equal(p.units_source, SLUICE_UNITS_TASK);
    sluice_limit_policy_clear(&p);
}

static void test_canonical(void **unused)
{
    (void)unused;
    round_trip("rate=10/1s", "rate=10/1s");
    round_trip("rate=10/s,key=none,units=task,overflow=wait", "rate=10/1s");
    round_trip("rate=10/1s,key=explicit,missing_key=error", "rate=10/1s,key=explicit");
    round_trip("rate=10/1s,units=1", "rate=10/1s,units=1");
}

static void test_canonical_order(void **unused)
{
    (void)unused;
    round_trip("window=5/1m,overflow=reject,key=explicit",
               "window=5/1m,key=explicit,overflow=reject");
    round_trip("sliding=20/1m,units=2,missing_key=global,key=user",
               "sliding=20/1m,key=user,missing_key=global,units=2");
    round_trip("concurrency=3,ttl=5s,key=explicit", "concurrency=3,ttl=5s,key=explicit");
    round_trip("rate=100/1s,burst=200,key=input.a.b,units=input.cost",
               "rate=100/1s,burst=200,key=input.a.b,units=input.cost");
}

static void expect_error(const char *text, int want_rc, const char *word)
{
    sluice_limit_policy p;
    char msg[256];
    int rc;

    memset(&p, 0x5a, sizeof(p));
    rc = sluice_spec_parse_policy(text, &p, msg, sizeof(msg));
    if (rc != want_rc)
        fail_msg("%s: wanted %d, got %d (%s)", text, want_rc, rc, msg);
    if (!strstr(msg, word))
        fail_msg("%s: message [%s] lacks [%s]", text, msg, word);
    assert_null(strchr(msg, '\n'));
    assert_null(p.key_path);
    assert_null(p.units_path);
    assert_null(p.name);
}

static void test_errors(void **unused)
{
    (void)unused;
    expect_error("", SLUICE_EPARSE, "empty");
    expect_error("key=explicit,rate=1/1s", SLUICE_EPARSE, "before the limit kind");
    expect_error("rate=1/1s,key=explicit,key=none", SLUICE_EPARSE, "given twice");
    expect_error("rate=1/1s,key=", SLUICE_EPARSE, "missing value");
    expect_error("rate=1/1s,key=a..b", SLUICE_EINVAL, "key path");
    expect_error("rate=1/1s,units=a.", SLUICE_EINVAL, "units path");
    expect_error("rate=1/1s,overflow=drop", SLUICE_EPARSE, "overflow=reject");
    expect_error("rate=1/1s,missing_key=maybe", SLUICE_EPARSE, "missing_key=global");
    expect_error("rate=1/1s,missing_key=global", SLUICE_EPARSE, "key=none");
    expect_error("rate=1/1s,units=0", SLUICE_EINVAL, "at least 1");
    expect_error("rate=1/1s,units=5x", SLUICE_EPARSE, "bad units");
    expect_error("rate=1/1s,units=99999999999999", SLUICE_ERANGE, "units");
    expect_error("rate=10/1s,units=11", SLUICE_EINVAL, "exceed");
    expect_error("rate=10/1s,bogus=1", SLUICE_EPARSE, "bogus");
    expect_error("rate=0/1s,key=explicit", SLUICE_EINVAL, "rate=0/1s");
    expect_error("rate=1/1s,key=a\nb", SLUICE_EINVAL, "\\x0a");
    assert_int_equal(sluice_spec_parse_policy(NULL, NULL, NULL, 0), SLUICE_EINVAL);
}

static void test_format_errors(void **unused)
{
    sluice_limit_policy p;
    sluice_tier tier;
    char buf[8];
    char big[SLUICE_POLICY_SPEC_MAX_LEN];
    char path[] = "tier";

    (void)unused;
    parse_ok("rate=100/1s,key=explicit", &p);
    assert_int_equal(sluice_spec_format_policy(&p, buf, sizeof(buf)), SLUICE_ERANGE);
    assert_string_equal(buf, "");
    assert_int_equal(sluice_spec_format_policy(NULL, big, sizeof(big)), SLUICE_EINVAL);
    memset(&tier, 0, sizeof(tier));
    p.tiers = &tier;
    p.ntiers = 1;
    p.tier_path = path;
    assert_int_equal(sluice_spec_format_policy(&p, big, sizeof(big)), SLUICE_EINVAL);
    p.tiers = NULL;
    p.ntiers = 0;
    p.tier_path = NULL;
    sluice_limit_policy_clear(&p);
}

/* Random junk made of the grammar's pieces: every outcome is a clean failure with a one-line
 * message, or a policy that round-trips. */
static void test_junk(void **unused)
{
    static const char *const pieces[] = {
        "rate=10/1s",
        "window=5/1m",
        "concurrency=2",
        "key=explicit",
        "key=a.b",
        "key=",
        "units=2",
        "units=x",
        "units=task",
        "overflow=reject",
        "missing_key=global",
        "burst=5",
        "ttl=1s",
        ",",
        "=",
        "key=none",
    };
    test_rng rng;
    char text[256], msg[256], buf[SLUICE_POLICY_SPEC_MAX_LEN], buf2[SLUICE_POLICY_SPEC_MAX_LEN];

    (void)unused;
    rng_seed(&rng, 42);
    for (int i = 0; i < 20000; i++) {
        sluice_limit_policy p, q;
        size_t pos = 0;
        int n = (int)rng_range(&rng, 1, 5);

        for (int j = 0; j < n; j++) {
            const char *s =
                pieces[rng_range(&rng, 0, (int64_t)(sizeof(pieces) / sizeof(*pieces)) - 1)];
            pos += (size_t)snprintf(text + pos, sizeof(text) - pos, "%s%s", j ? "," : "", s);
        }
        if (sluice_spec_parse_policy(text, &p, msg, sizeof(msg)) != 0) {
            assert_true(msg[0] != '\0');
            assert_null(strchr(msg, '\n'));
            continue;
        }
        assert_int_equal(sluice_spec_format_policy(&p, buf, sizeof(buf)), 0);
        parse_ok(buf, &q);
        assert_int_equal(sluice_spec_format_policy(&q, buf2, sizeof(buf2)), 0);
        assert_string_equal(buf, buf2);
        sluice_limit_policy_clear(&p);
        sluice_limit_policy_clear(&q);
    }
}

static int oom_body(void *arg)
{
    sluice_limit_policy p;
    int rc = sluice_spec_parse_policy(arg, &p, NULL, 0);

    if (rc == 0)
        sluice_limit_policy_clear(&p);
    return rc;
}

static void test_oom(void **unused)
{
    (void)unused;
    assert_true(oom_sweep(oom_body, (void *)"rate=5/1s,key=input.t,units=input.c", 100) > 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),  cmocka_unit_test(test_options),
        cmocka_unit_test(test_canonical), cmocka_unit_test(test_canonical_order),
        cmocka_unit_test(test_errors),    cmocka_unit_test(test_format_errors),
        cmocka_unit_test(test_junk),      cmocka_unit_test(test_oom),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
