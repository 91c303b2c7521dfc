/* SPDX-License-Identifier: MIT */
/*
 * Tests of policies: the defaults, deep copies (with an out-of-memory sweep), clearing, and every
 * rule of validation with its exact one-line message, for limits (names, key and units sources,
 * units above the capacity, tiers) and task types (limit lists, retries, leases).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/alloc.h"
#include "policy/policy_check.h"
#include "sluice/error.h"
#include "sluice/limit.h"
#include "sluice/policy.h"
#include "testutil.h"

#define SEC SLUICE_NS_PER_SEC
#define MIN (60 * SEC)

static char msg[512];

/* A valid rate limit named `name`: 100 per minute. The name is owned by the policy. */
static void rate_policy(sluice_limit_policy *p, const char *name)
{
    sluice_limit_policy_init(p);
    p->name = alloc_memdup0(name, strlen(name));
    assert_non_null(p->name);
    sluice_limit_def_init(&p->def, SLUICE_RATE);
    p->def.limit = 100;
    p->def.period_ns = MIN;
}

/* Adds a numeric tier [min, max] with a rate of `per_min` per minute. */
static void add_tier(sluice_limit_policy *p, const char *name, int64_t min, int64_t max,
                     int64_t per_min)
{
    sluice_tier *t;
    sluice_tier *tiers = alloc_realloc(p->tiers, (p->ntiers + 1) * sizeof(*tiers));

    assert_non_null(tiers);
    p->tiers = tiers;
    t = &p->tiers[p->ntiers++];
    memset(t, 0, sizeof(*t));
    t->name = alloc_memdup0(name, strlen(name));
    t->min = min;
    t->max = max;
    sluice_limit_def_init(&t->def, SLUICE_RATE);
    t->def.limit = per_min;
    t->def.period_ns = MIN;
}

static void set_str(char **field, const char *s)
{
    alloc_free(*field);
    *field = s ? alloc_memdup0(s, strlen(s)) : NULL;
}

static void expect_limit_error(const sluice_limit_policy *p, int rc, const char *expected)
{
    assert_int_equal(sluice_limit_policy_validate(p, msg, sizeof(msg)), rc);
    assert_string_equal(msg, expected);
}

static void expect_type_error(const sluice_type_policy *t, int rc, const char *expected)
{
    assert_int_equal(sluice_type_policy_validate(t, msg, sizeof(msg)), rc);
    assert_string_equal(msg, expected);
}

/* ---- Defaults ---------------------------------------------------------------------------- */

static void test_defaults(void **unused)
{
    sluice_limit_policy p;
    sluice_type_policy t;
    sluice_engine_policy e;

    (void)unused;
    sluice_limit_policy_init(&p);
    assert_null(p.name);
    assert_int_equal(p.def.kind, SLUICE_RATE);
    assert_int_equal(p.def.horizon_ns, SLUICE_DEFAULT_HORIZON_NS);
    assert_int_equal(p.def.max_keys, SLUICE_DEFAULT_MAX_KEYS);
    assert_int_equal(p.key_source, SLUICE_KEY_NONE);
    assert_null(p.key_path);
    assert_int_equal(p.missing_key_global, 0);
    assert_int_equal(p.overflow, SLUICE_OVERFLOW_WAIT);
    assert_int_equal(p.units_source, SLUICE_UNITS_TASK);
    assert_int_equal(p.units_fixed, 1);
    assert_null(p.units_path);
    assert_null(p.tier_path);
    assert_null(p.tiers);
    assert_int_equal(p.ntiers, 0);
    assert_int_equal(p.line, 0);

    sluice_type_policy_init(&t);
    assert_null(t.name);
    assert_null(t.limits);
    assert_int_equal(t.nlimits, 0);
    assert_int_equal(t.retry.max_attempts, 3);
    assert_int_equal(t.retry.backoff, SLUICE_BACKOFF_EXPONENTIAL);
    assert_int_equal(t.retry.base_ns, SEC);
    assert_int_equal(t.retry.max_ns, 5 * MIN);
    assert_int_equal(t.retry.throttle_retries, 1);
    assert_int_equal(t.lease_ns, 30 * SEC);
    assert_int_equal(t.priority, 0);

    sluice_engine_policy_init(&e);
    assert_int_equal(e.max_tasks, 10000000);
    assert_int_equal(e.max_parked, 1000000);
    assert_int_equal(e.max_finished, 10000);
    assert_int_equal(e.strict_types, 0);
    assert_int_equal(e.event_interval_ns, 10 * SEC);
    assert_int_equal(e.default_lease_ns, 30 * SEC);
    assert_int_equal(policy_check_engine(&e, NULL, msg, sizeof(msg)), 0);
}

static void test_clear_accepts_null_and_twice(void **unused)
{
    sluice_limit_policy p;
    sluice_type_policy t;

    (void)unused;
    sluice_limit_policy_clear(NULL);
    sluice_type_policy_clear(NULL);
    rate_policy(&p, "stripe");
    add_tier(&p, "a", 0, 5, 10);
    set_str(&p.tier_path, "input.n");
    sluice_limit_policy_clear(&p);
    assert_null(p.name);
    assert_null(p.tiers);
    sluice_limit_policy_clear(&p);

    sluice_type_policy_init(&t);
    set_str(&t.name, "charge");
    t.limits = alloc_calloc(1, sizeof(char *));
    t.limits[0] = alloc_memdup0("stripe", 6);
    t.nlimits = 1;
    sluice_type_policy_clear(&t);
    assert_null(t.name);
    assert_int_equal(t.nlimits, 0);
    sluice_type_policy_clear(&t);
}

/* ---- Limits ------------------------------------------------------------------------------ */

static void test_limit_valid(void **unused)
{
    sluice_limit_policy p;

    (void)unused;
    rate_policy(&p, "stripe");
    assert_int_equal(sluice_limit_policy_validate(&p, msg, sizeof(msg)), 0);
    assert_string_equal(msg, "");

    p.key_source = SLUICE_KEY_PATH;
    set_str(&p.key_path, "input.tenant_id");
    p.overflow = SLUICE_OVERFLOW_REJECT;
    p.missing_key_global = 1;
    p.units_source = SLUICE_UNITS_FIXED;
    p.units_fixed = 100; /* exactly the burst: allowed */
    assert_int_equal(sluice_limit_policy_validate(&p, msg, sizeof(msg)), 0);

    p.units_source = SLUICE_UNITS_PATH;
    set_str(&p.units_path, "input.tokens");
    assert_int_equal(sluice_limit_policy_validate(&p, msg, sizeof(msg)), 0);
    sluice_limit_policy_clear(&p);
}

static void test_limit_names(void **unused)
{
    sluice_limit_policy p;
    char long_name[POLICY_NAME_MAX + 2];

    (void)unused;
    rate_policy(&p, "a-b_c.d:e9");
    assert_int_equal(sluice_limit_policy_validate(&p, msg, sizeof(msg)), 0);

    set_str(&p.name, NULL);
    expect_limit_error(&p, SLUICE_EINVAL, "limit: the name is empty");
    set_str(&p.name, "");
    expect_limit_error(&p, SLUICE_EINVAL, "limit: the name is empty");
    set_str(&p.name, "a b");
    expect_limit_error(&p, SLUICE_EINVAL,
                       "limit: the name \"a b\" has a character outside A-Z a-z 0-9 _ . : - "
                       "(\" \" at offset 1)");
    set_str(&p.name, "tab\there");
    expect_limit_error(&p, SLUICE_EINVAL,
                       "limit: the name \"tab\\x09here\" has a character outside A-Z a-z 0-9 _ . "
                       ": - (\"\\x09\" at offset 3)");
    memset(long_name, 'x', sizeof(long_name) - 1);
    long_name[sizeof(long_name) - 1] = '\0';
    set_str(&p.name, long_name);
    expect_limit_error(&p, SLUICE_EINVAL,
                       "limit: the name \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...\" is 129 "
                       "bytes long, more than 128");
    long_name[POLICY_NAME_MAX] = '\0';
    set_str(&p.name, long_name);
    assert_int_equal(sluice_limit_policy_validate(&p, msg, sizeof(msg)), 0);
    sluice_limit_policy_clear(&p);
}

static void test_limit_def_errors(void **unused)
{
    sluice_limit_policy p;

    (void)unused;
    rate_policy(&p, "stripe");
    p.def.limit = 0;
    expect_limit_error(&p, SLUICE_EINVAL, "limit \"stripe\": limit must be at least 1, got 0");
    p.def.limit = 100;
    p.def.burst = -5;
    expect_limit_error(&p, SLUICE_EINVAL, "limit \"stripe\": burst must be at least 1, got -5");
    p.def.burst = 0;
    p.def.period_ns = 400LL * 86400 * SEC;
    expect_limit_error(&p, SLUICE_ERANGE,
                       "limit \"stripe\": period must be at most 366 days, got 34560000000000000 "
                       "ns");
    sluice_limit_policy_clear(&p);
}

static void test_limit_key_and_units_sources(void **unused)
{
    sluice_limit_policy p;
    policy_fault f;

    (void)unused;
    rate_policy(&p, "stripe");
    p.key_source = SLUICE_KEY_PATH;
    expect_limit_error(&p, SLUICE_EINVAL, "limit \"stripe\": key path: none given");
    set_str(&p.key_path, "input..x");
    expect_limit_error(&p, SLUICE_EINVAL,
                       "limit \"stripe\": key path \"input..x\": empty segment at offset 6 (two "
                       "dots in a row)");
    assert_int_equal(policy_check_limit(&p, &f, msg, sizeof(msg)), SLUICE_EINVAL);
    assert_int_equal(f.field, POLICY_FIELD_KEY);
    p.key_source = SLUICE_KEY_EXPLICIT;
    expect_limit_error(&p, SLUICE_EINVAL,
                       "limit \"stripe\": a key path is set but the key is not taken from a path");
    set_str(&p.key_path, NULL);
    p.key_source = (sluice_key_source)7;
    expect_limit_error(&p, SLUICE_EINVAL, "limit \"stripe\": unknown key source 7");
    p.key_source = SLUICE_KEY_NONE;
    p.missing_key_global = 2;
    expect_limit_error(&p, SLUICE_EINVAL,
                       "limit \"stripe\": missing_key_global must be 0 or 1, got 2");
    p.missing_key_global = 0;
    p.overflow = (sluice_overflow)5;
    expect_limit_error(&p, SLUICE_EINVAL, "limit \"stripe\": unknown overflow action 5");
    p.overflow = SLUICE_OVERFLOW_WAIT;

    p.units_source = SLUICE_UNITS_FIXED;
    p.units_fixed = 0;
    expect_limit_error(&p, SLUICE_EINVAL, "limit \"stripe\": units must be at least 1, got 0");
    p.units_source = SLUICE_UNITS_PATH;
    expect_limit_error(&p, SLUICE_EINVAL, "limit \"stripe\": key path: none given");
    p.units_source = SLUICE_UNITS_TASK;
    set_str(&p.units_path, "input.tokens");
    expect_limit_error(&p, SLUICE_EINVAL,
                       "limit \"stripe\": a units path is set but the units are not taken from a "
                       "path");
    assert_int_equal(policy_check_limit(&p, &f, msg, sizeof(msg)), SLUICE_EINVAL);
    assert_int_equal(f.field, POLICY_FIELD_UNITS);
    sluice_limit_policy_clear(&p);
}

/* Seed 001: "a step whose weight exceeds the bucket capacity can never run and freezes the whole
 * bucket behind it". Refused up front, for every kind. */
static void test_units_above_capacity(void **unused)
{
    sluice_limit_policy p;
    policy_fault f;

    (void)unused;
    rate_policy(&p, "stripe");
    p.units_source = SLUICE_UNITS_FIXED;
    p.units_fixed = 101;
    expect_limit_error(&p, SLUICE_EINVAL,
                       "limit \"stripe\": units 101 exceed the burst of 100: such a task could "
                       "never start; split it into tasks of at most 100 units");
    p.def.burst = 10;
    p.units_fixed = 11;
    expect_limit_error(&p, SLUICE_EINVAL,
                       "limit \"stripe\": units 11 exceed the burst of 10: such a task could "
                       "never start; split it into tasks of at most 10 units");
    assert_int_equal(policy_check_limit(&p, &f, msg, sizeof(msg)), SLUICE_EINVAL);
    assert_int_equal(f.field, POLICY_FIELD_UNITS);
    p.units_fixed = 10;
    assert_int_equal(sluice_limit_policy_validate(&p, msg, sizeof(msg)), 0);

    sluice_limit_def_init(&p.def, SLUICE_CONCURRENCY);
    p.def.limit = 1;
    p.units_fixed = 2;
    expect_limit_error(&p, SLUICE_EINVAL,
                       "limit \"stripe\": units 2 exceed the concurrency of 1: such a task could "
                       "never start; split it into tasks of at most 1 unit");
    sluice_limit_def_init(&p.def, SLUICE_QUOTA);
    p.def.limit = 1;
    p.def.calendar = SLUICE_CAL_DAY;
    expect_limit_error(&p, SLUICE_EINVAL,
                       "limit \"stripe\": units 2 exceed the budget of 1: such a task could never "
                       "start; split it into tasks of at most 1 unit");
    sluice_limit_def_init(&p.def, SLUICE_SLIDING);
    p.def.limit = 1;
    p.def.period_ns = SEC;
    expect_limit_error(&p, SLUICE_EINVAL,
                       "limit \"stripe\": units 2 exceed the window's limit of 1: such a task "
                       "could never start; split it into tasks of at most 1 unit");
    /* Units taken from the task or its input are checked per task, not here. */
    p.units_source = SLUICE_UNITS_TASK;
    assert_int_equal(sluice_limit_policy_validate(&p, msg, sizeof(msg)), 0);
    sluice_limit_policy_clear(&p);
}

/* Seed 004's tiers by agent count. */
static void seed004_tiers(sluice_limit_policy *p)
{
    rate_policy(p, "workflow");
    set_str(&p->tier_path, "input.agent_count");
    add_tier(p, "simple", INT64_MIN, 0, 100);
    add_tier(p, "standard", 1, 2, 20);
    add_tier(p, "heavy", 3, INT64_MAX, 5);
}

static void test_tiers(void **unused)
{
    sluice_limit_policy p;
    policy_fault f;

    (void)unused;
    seed004_tiers(&p);
    p.def.limit = 0; /* the untiered definition is not used, so not checked */
    assert_int_equal(sluice_limit_policy_validate(&p, msg, sizeof(msg)), 0);

    p.tiers[1].min = 0;
    expect_limit_error(&p, SLUICE_EINVAL,
                       "limit \"workflow\": tier \"standard\" (0 to 2) overlaps tier \"simple\" "
                       "(at most 0): a value must choose one tier");
    assert_int_equal(policy_check_limit(&p, &f, msg, sizeof(msg)), SLUICE_EINVAL);
    assert_int_equal(f.field, POLICY_FIELD_TIER_MATCH);
    assert_int_equal(f.index, 1);
    p.tiers[1].min = 1;
    p.tiers[2].min = 2;
    expect_limit_error(&p, SLUICE_EINVAL,
                       "limit \"workflow\": tier \"heavy\" (at least 2) overlaps tier "
                       "\"standard\" (1 to 2): a value must choose one tier");
    p.tiers[2].min = 3;
    p.tiers[1].min = 3;
    expect_limit_error(&p, SLUICE_EINVAL,
                       "limit \"workflow\": tier \"standard\" has min 3 above max 2");
    p.tiers[1].min = 1;
    set_str(&p.tiers[2].name, "simple");
    expect_limit_error(&p, SLUICE_EINVAL, "limit \"workflow\": two tiers are named \"simple\"");
    assert_int_equal(policy_check_limit(&p, &f, msg, sizeof(msg)), SLUICE_EINVAL);
    assert_int_equal(f.field, POLICY_FIELD_TIER_NAME);
    assert_int_equal(f.index, 2);
    set_str(&p.tiers[2].name, "bad name");
    expect_limit_error(&p, SLUICE_EINVAL,
                       "limit \"workflow\": tier 3: the name \"bad name\" has a character outside "
                       "A-Z a-z 0-9 _ . : - (\" \" at offset 3)");
    set_str(&p.tiers[2].name, "heavy");
    p.tiers[2].def.limit = 0;
    expect_limit_error(&p, SLUICE_EINVAL,
                       "limit \"workflow\": tier \"heavy\": limit must be at least 1, got 0");
    assert_int_equal(policy_check_limit(&p, &f, msg, sizeof(msg)), SLUICE_EINVAL);
    assert_int_equal(f.field, POLICY_FIELD_TIER_DEF);
    assert_int_equal(f.index, 2);
    p.tiers[2].def.limit = 5;

    /* units fit the burst of every tier, or the policy is refused */
    p.units_source = SLUICE_UNITS_FIXED;
    p.units_fixed = 6;
    expect_limit_error(&p, SLUICE_EINVAL,
                       "limit \"workflow\": units 6 exceed the burst of 5 in tier \"heavy\": such "
                       "a task could never start; split it into tasks of at most 5 units");
    p.units_fixed = 5;
    assert_int_equal(sluice_limit_policy_validate(&p, msg, sizeof(msg)), 0);

    set_str(&p.tier_path, NULL);
    expect_limit_error(&p, SLUICE_EINVAL,
                       "limit \"workflow\": the limit has tiers but no field to choose them by");
    set_str(&p.tier_path, "input.");
    expect_limit_error(&p, SLUICE_EINVAL,
                       "limit \"workflow\": key path \"input.\": nothing after \"input.\"");
    set_str(&p.tier_path, "input.agent_count");
    for (size_t i = 0; i < p.ntiers; i++) {
        alloc_free(p.tiers[i].name);
        alloc_free(p.tiers[i].equals);
    }
    alloc_free(p.tiers);
    p.tiers = NULL;
    p.ntiers = 0;
    expect_limit_error(&p, SLUICE_EINVAL,
                       "limit \"workflow\": a tiered limit needs at least one tier");
    sluice_limit_policy_clear(&p);
}

static void test_string_tiers(void **unused)
{
    sluice_limit_policy p;

    (void)unused;
    rate_policy(&p, "plans");
    set_str(&p.tier_path, "input.plan");
    add_tier(&p, "free", 0, 0, 10);
    add_tier(&p, "pro", 0, 0, 100);
    set_str(&p.tiers[0].equals, "free");
    set_str(&p.tiers[1].equals, "pro");
    assert_int_equal(sluice_limit_policy_validate(&p, msg, sizeof(msg)), 0);
    set_str(&p.tiers[1].equals, "free");
    expect_limit_error(&p, SLUICE_EINVAL,
                       "limit \"plans\": tier \"pro\" (equal to \"free\") overlaps tier \"free\" "
                       "(equal to \"free\"): a value must choose one tier");
    set_str(&p.tiers[1].equals, NULL);
    p.tiers[1].min = INT64_MIN;
    p.tiers[1].max = INT64_MAX;
    expect_limit_error(&p, SLUICE_EINVAL,
                       "limit \"plans\": tier \"pro\" matches numbers but tier \"free\" matches a "
                       "string: the tiers of one limit match either numbers (min, max) or strings "
                       "(equals), not both");
    sluice_limit_policy_clear(&p);
}

/* ---- Types ------------------------------------------------------------------------------- */

static void type_with(sluice_type_policy *t, const char *name, size_t n, const char *const *limits)
{
    sluice_type_policy_init(t);
    set_str(&t->name, name);
    if (n > 0) {
        t->limits = alloc_calloc(n, sizeof(char *));
        assert_non_null(t->limits);
        for (size_t i = 0; i < n; i++)
            t->limits[i] = alloc_memdup0(limits[i], strlen(limits[i]));
        t->nlimits = n;
    }
}

static void test_type_validation(void **unused)
{
    static const char *const two[] = {"stripe", "budget"};
    static const char *const dup[] = {"stripe", "budget", "stripe"};
    static const char *const bad[] = {"stripe", ""};
    sluice_type_policy t;
    policy_fault f;

    (void)unused;
    type_with(&t, "charge", 2, two);
    assert_int_equal(sluice_type_policy_validate(&t, msg, sizeof(msg)), 0);
    assert_string_equal(msg, "");

    t.retry.max_attempts = 0;
    expect_type_error(&t, SLUICE_EINVAL,
                      "type \"charge\": max_attempts must be at least 1 (1 = no retry), got 0");
    t.retry.max_attempts = 1;
    t.retry.base_ns = 10 * MIN;
    expect_type_error(&t, SLUICE_EINVAL,
                      "type \"charge\": the retry max (5m) is below the base "
                      "(10m)");
    assert_int_equal(policy_check_type(&t, &f, msg, sizeof(msg)), SLUICE_EINVAL);
    assert_int_equal(f.field, POLICY_FIELD_RETRY_MAX);
    t.retry.base_ns = -1;
    expect_type_error(&t, SLUICE_EINVAL,
                      "type \"charge\": the retry base must not be negative, got -1ns");
    t.retry.base_ns = 0; /* immediate retries are allowed */
    assert_int_equal(sluice_type_policy_validate(&t, msg, sizeof(msg)), 0);
    t.retry.backoff = (sluice_backoff)9;
    expect_type_error(&t, SLUICE_EINVAL, "type \"charge\": unknown backoff 9");
    t.retry.backoff = SLUICE_BACKOFF_FIXED;
    t.retry.throttle_retries = 3;
    expect_type_error(&t, SLUICE_EINVAL, "type \"charge\": throttle_retries must be 0 or 1, got 3");
    t.retry.throttle_retries = 0;
    t.lease_ns = 0;
    expect_type_error(&t, SLUICE_EINVAL, "type \"charge\": the lease must be above zero, got 0s");
    assert_int_equal(policy_check_type(&t, &f, msg, sizeof(msg)), SLUICE_EINVAL);
    assert_int_equal(f.field, POLICY_FIELD_LEASE);
    sluice_type_policy_clear(&t);

    type_with(&t, "charge", 3, dup);
    expect_type_error(&t, SLUICE_EINVAL, "type \"charge\": limit \"stripe\" is listed twice");
    assert_int_equal(policy_check_type(&t, &f, msg, sizeof(msg)), SLUICE_EINVAL);
    assert_int_equal(f.field, POLICY_FIELD_LIMITS);
    assert_int_equal(f.index, 2);
    sluice_type_policy_clear(&t);

    type_with(&t, "charge", 2, bad);
    expect_type_error(&t, SLUICE_EINVAL, "type \"charge\": limit 2: the name is empty");
    sluice_type_policy_clear(&t);

    type_with(&t, "", 0, NULL);
    expect_type_error(&t, SLUICE_EINVAL, "type: the name is empty");
    sluice_type_policy_clear(&t);

    assert_int_equal(sluice_type_policy_validate(NULL, msg, sizeof(msg)), SLUICE_EINVAL);
    assert_string_equal(msg, "type: no policy given");
    assert_int_equal(sluice_limit_policy_validate(NULL, msg, sizeof(msg)), SLUICE_EINVAL);
    assert_string_equal(msg, "limit: no policy given");
}

static void test_engine_check(void **unused)
{
    sluice_engine_policy e;
    policy_fault f;

    (void)unused;
    sluice_engine_policy_init(&e);
    e.max_parked = 0;
    assert_int_equal(policy_check_engine(&e, &f, msg, sizeof(msg)), SLUICE_EINVAL);
    assert_string_equal(msg, "max_parked must be at least 1");
    assert_int_equal(f.field, POLICY_FIELD_MAX_PARKED);
    e.max_parked = 1;
    e.event_interval_ns = 0;
    assert_int_equal(policy_check_engine(&e, &f, msg, sizeof(msg)), SLUICE_EINVAL);
    assert_string_equal(msg, "event_interval must be above zero, got 0s");
}

/* ---- Copies ------------------------------------------------------------------------------ */

static void test_copy_is_deep(void **unused)
{
    sluice_limit_policy p, c;
    sluice_type_policy t, tc;
    static const char *const two[] = {"stripe", "workflow"};

    (void)unused;
    seed004_tiers(&p);
    p.key_source = SLUICE_KEY_PATH;
    set_str(&p.key_path, "input.user");
    p.units_source = SLUICE_UNITS_PATH;
    set_str(&p.units_path, "input.tokens");
    set_str(&p.tiers[0].equals, NULL);
    p.line = 12;
    assert_int_equal(sluice_limit_policy_copy(&c, &p), 0);
    assert_string_equal(c.name, "workflow");
    assert_ptr_not_equal(c.name, p.name);
    assert_string_equal(c.key_path, "input.user");
    assert_ptr_not_equal(c.key_path, p.key_path);
    assert_string_equal(c.units_path, "input.tokens");
    assert_string_equal(c.tier_path, "input.agent_count");
    assert_int_equal(c.ntiers, 3);
    assert_ptr_not_equal(c.tiers, p.tiers);
    assert_string_equal(c.tiers[1].name, "standard");
    assert_ptr_not_equal(c.tiers[1].name, p.tiers[1].name);
    assert_int_equal(c.tiers[1].min, 1);
    assert_int_equal(c.tiers[1].max, 2);
    assert_int_equal(c.tiers[1].def.limit, 20);
    assert_null(c.tiers[1].equals);
    assert_int_equal(c.line, 12);
    sluice_limit_policy_clear(&p);
    assert_int_equal(sluice_limit_policy_validate(&c, msg, sizeof(msg)), 0);
    sluice_limit_policy_clear(&c);

    type_with(&t, "llm.chat", 2, two);
    t.priority = 7;
    assert_int_equal(sluice_type_policy_copy(&tc, &t), 0);
    sluice_type_policy_clear(&t);
    assert_string_equal(tc.name, "llm.chat");
    assert_int_equal(tc.nlimits, 2);
    assert_string_equal(tc.limits[1], "workflow");
    assert_int_equal(tc.priority, 7);
    sluice_type_policy_clear(&tc);
}

static sluice_limit_policy oom_limit;
static sluice_type_policy oom_type;

static int copy_limit_body(void *arg)
{
    sluice_limit_policy c;
    int rc;

    (void)arg;
    rc = sluice_limit_policy_copy(&c, &oom_limit);
    if (rc == 0) {
        assert_string_equal(c.tiers[2].name, "heavy");
        sluice_limit_policy_clear(&c);
    } else {
        assert_null(c.name);
        assert_null(c.tiers);
    }
    return rc;
}

static int copy_type_body(void *arg)
{
    sluice_type_policy c;
    int rc;

    (void)arg;
    rc = sluice_type_policy_copy(&c, &oom_type);
    if (rc == 0)
        sluice_type_policy_clear(&c);
    else
        assert_null(c.limits);
    return rc;
}

static void test_copy_oom(void **unused)
{
    static const char *const three[] = {"a", "b", "c"};

    (void)unused;
    seed004_tiers(&oom_limit);
    set_str(&oom_limit.key_path, "input.user");
    oom_limit.key_source = SLUICE_KEY_PATH;
    set_str(&oom_limit.tiers[1].equals, NULL);
    /* name, key path, tier path, tier array, 3 tier names */
    assert_int_equal(oom_sweep(copy_limit_body, NULL, 100), 8);
    sluice_limit_policy_clear(&oom_limit);

    type_with(&oom_type, "t", 3, three);
    /* name, array, 3 names */
    assert_int_equal(oom_sweep(copy_type_body, NULL, 100), 6);
    sluice_type_policy_clear(&oom_type);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_clear_accepts_null_and_twice),
        cmocka_unit_test(test_limit_valid),
        cmocka_unit_test(test_limit_names),
        cmocka_unit_test(test_limit_def_errors),
        cmocka_unit_test(test_limit_key_and_units_sources),
        cmocka_unit_test(test_units_above_capacity),
        cmocka_unit_test(test_tiers),
        cmocka_unit_test(test_string_tiers),
        cmocka_unit_test(test_type_validation),
        cmocka_unit_test(test_engine_check),
        cmocka_unit_test(test_copy_is_deep),
        cmocka_unit_test(test_copy_oom),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
