/* SPDX-License-Identifier: MIT */
/*
 * Tests of the configuration loader: the example file read field by field; every form the
 * format allows; one test per kind of mistake with its exact message (file, line, column, the
 * setting's path, what was expected); every prefix and random corruptions of the example, which
 * must load or fail with one line and leak nothing; and an out-of-memory sweep of parse + clear.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/alloc.h"
#include "sluice/config.h"
#include "sluice/engine.h"
#include "sluice/error.h"
#include "sluice/limit.h"
#include "sluice/policy.h"
#include "testutil.h"

#define MS   SLUICE_NS_PER_MS
#define SEC  SLUICE_NS_PER_SEC
#define MIN  (60 * SEC)
#define HOUR (60 * MIN)

static char msg[1024];

/* The example file's path in the source tree (see test_source_path). */
static const char *example_path(void)
{
    return test_source_path("examples/sluice.yaml");
}

/* Reads the example file into a malloc'd buffer. */
static char *read_example(size_t *len)
{
    FILE *f = fopen(example_path(), "rb");
    char *buf;
    long n;

    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    n = ftell(f);
    assert_true(n > 0);
    rewind(f);
    buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    buf[n] = '\0';
    *len = (size_t)n;
    return buf;
}

static int parse(const char *text, sluice_config *c)
{
    return sluice_config_parse(text, strlen(text), "t.yaml", c, msg, sizeof(msg));
}

/* Parses text, which must fail with rc and exactly the message expected. */
static void expect_error(const char *text, int rc, const char *expected)
{
    sluice_config c;

    assert_int_equal(parse(text, &c), rc);
    assert_string_equal(msg, expected);
    assert_null(c.limits);
    assert_null(c.types);
    assert_int_equal(c.nlimits, 0);
}

/* Parses text, which must succeed. */
static void expect_ok(const char *text, sluice_config *c)
{
    int rc = parse(text, c);

    if (rc != 0)
        fail_msg("unexpected error: %s", msg);
    assert_string_equal(msg, "");
}

/* ---- The example file -------------------------------------------------------------------- */

static void test_example_file(void **unused)
{
    const sluice_limit_policy *l;
    const sluice_type_policy *t;
    sluice_config c;

    (void)unused;
    if (sluice_config_load(example_path(), &c, msg, sizeof(msg)) != 0)
        fail_msg("%s", msg);
    assert_string_equal(c.path, example_path());

    assert_int_equal(c.engine.max_tasks, 1000000);
    assert_int_equal(c.engine.max_parked, 50000);
    assert_int_equal(c.engine.max_finished, 10000);
    assert_int_equal(c.engine.strict_types, 1);
    assert_int_equal(c.engine.event_interval_ns, 10 * SEC);
    assert_int_equal(c.engine.default_lease_ns, 30 * SEC);

    assert_int_equal(c.nlimits, 9);
    l = &c.limits[0];
    assert_string_equal(l->name, "llm_provider");
    assert_int_equal(l->def.kind, SLUICE_RATE);
    assert_int_equal(l->def.limit, 10);
    assert_int_equal(l->def.period_ns, MIN);
    assert_int_equal(l->def.burst, 100);
    assert_int_equal(l->def.start_empty, 1);
    assert_int_equal(l->def.horizon_ns, 30 * MIN);
    assert_int_equal(l->def.max_keys, SLUICE_DEFAULT_MAX_KEYS);
    assert_int_equal(l->def.key_overflow, SLUICE_KEYS_REFUSE);
    assert_int_equal(l->def.max_key_len, SLUICE_DEFAULT_MAX_KEY_LEN);
    assert_int_equal(l->key_source, SLUICE_KEY_NONE);
    assert_null(l->key_path);
    assert_int_equal(l->overflow, SLUICE_OVERFLOW_WAIT);
    assert_int_equal(l->units_source, SLUICE_UNITS_TASK);
    assert_int_equal(l->ntiers, 0);
    assert_int_equal(l->line, 25);

    l = &c.limits[1];
    assert_string_equal(l->name, "tenant_api");
    assert_int_equal(l->def.kind, SLUICE_RATE);
    assert_int_equal(l->def.limit, 15);
    assert_int_equal(l->def.period_ns, MIN);
    assert_int_equal(l->def.burst, 0); /* = the limit */
    assert_int_equal(l->def.start_empty, 0);
    assert_int_equal(l->def.horizon_ns, SLUICE_DEFAULT_HORIZON_NS);
    assert_int_equal(l->def.max_keys, 100000);
    assert_int_equal(l->key_source, SLUICE_KEY_PATH);
    assert_string_equal(l->key_path, "input.tenant_id");
    assert_int_equal(l->missing_key_global, 0);

    l = sluice_config_find_limit(&c, "workflow_tier");
    assert_ptr_equal(l, &c.limits[2]);
    assert_int_equal(l->key_source, SLUICE_KEY_PATH);
    assert_string_equal(l->key_path, "input.user");
    assert_string_equal(l->tier_path, "input.agent_count");
    assert_int_equal(l->ntiers, 3);
    assert_string_equal(l->tiers[0].name, "simple");
    assert_int_equal(l->tiers[0].min, INT64_MIN);
    assert_int_equal(l->tiers[0].max, 0);
    assert_null(l->tiers[0].equals);
    assert_int_equal(l->tiers[0].def.kind, SLUICE_RATE);
    assert_int_equal(l->tiers[0].def.limit, 100);
    assert_int_equal(l->tiers[0].def.period_ns, MIN);
    assert_string_equal(l->tiers[1].name, "standard");
    assert_int_equal(l->tiers[1].min, 1);
    assert_int_equal(l->tiers[1].max, 2);
    assert_int_equal(l->tiers[1].def.limit, 20);
    assert_string_equal(l->tiers[2].name, "heavy");
    assert_int_equal(l->tiers[2].min, 3);
    assert_int_equal(l->tiers[2].max, INT64_MAX);
    assert_int_equal(l->tiers[2].def.limit, 5);
    assert_int_equal(l->tiers[2].def.max_keys, SLUICE_DEFAULT_MAX_KEYS);

    l = &c.limits[3];
    assert_string_equal(l->name, "per_user");
    assert_int_equal(l->def.kind, SLUICE_SLIDING);
    assert_int_equal(l->def.limit, 20);
    assert_int_equal(l->def.period_ns, MIN);
    assert_string_equal(l->key_path, "input.user");

    l = &c.limits[4];
    assert_string_equal(l->name, "runaway_breaker");
    assert_int_equal(l->def.kind, SLUICE_WINDOW);
    assert_int_equal(l->def.limit, 50);
    assert_int_equal(l->def.period_ns, HOUR);
    assert_string_equal(l->key_path, "input.workflow_id");
    assert_int_equal(l->overflow, SLUICE_OVERFLOW_REJECT);

    l = &c.limits[5];
    assert_string_equal(l->name, "daily_budget");
    assert_int_equal(l->def.kind, SLUICE_QUOTA);
    assert_int_equal(l->def.limit, 10000);
    assert_int_equal(l->def.calendar, SLUICE_CAL_DAY);
    assert_string_equal(l->key_path, "input.user");
    assert_int_equal(l->units_source, SLUICE_UNITS_PATH);
    assert_string_equal(l->units_path, "input.estimated_cost_cents");
    assert_int_equal(l->overflow, SLUICE_OVERFLOW_REJECT);

    l = &c.limits[6];
    assert_string_equal(l->name, "agent_spawns");
    assert_int_equal(l->def.kind, SLUICE_QUOTA);
    assert_int_equal(l->def.limit, 5);
    assert_int_equal(l->def.calendar, SLUICE_CAL_NONE);
    assert_string_equal(l->key_path, "input.workflow_id");
    assert_int_equal(l->overflow, SLUICE_OVERFLOW_REJECT);

    l = &c.limits[7];
    assert_string_equal(l->name, "agent_slots");
    assert_int_equal(l->def.kind, SLUICE_CONCURRENCY);
    assert_int_equal(l->def.limit, 10);
    assert_int_equal(l->def.ttl_ns, 2 * MIN);
    assert_int_equal(l->key_source, SLUICE_KEY_NONE);

    l = &c.limits[8];
    assert_string_equal(l->name, "emails");
    assert_int_equal(l->def.kind, SLUICE_RATE);
    assert_int_equal(l->def.limit, 5);
    assert_int_equal(l->def.period_ns, MIN);
    assert_int_equal(l->def.burst, 10);
    assert_int_equal(l->key_source, SLUICE_KEY_EXPLICIT);
    assert_int_equal(l->missing_key_global, 1);

    assert_int_equal(c.ntypes, 4);
    t = &c.types[0];
    assert_string_equal(t->name, "llm.chat");
    assert_int_equal(t->nlimits, 5);
    assert_string_equal(t->limits[0], "llm_provider");
    assert_string_equal(t->limits[1], "per_user");
    assert_string_equal(t->limits[2], "workflow_tier");
    assert_string_equal(t->limits[3], "daily_budget");
    assert_string_equal(t->limits[4], "agent_slots");
    assert_int_equal(t->lease_ns, 2 * MIN);
    assert_int_equal(t->priority, 0);
    assert_int_equal(t->retry.max_attempts, 5);
    assert_int_equal(t->retry.backoff, SLUICE_BACKOFF_EXPONENTIAL);
    assert_int_equal(t->retry.base_ns, 2 * SEC);
    assert_int_equal(t->retry.max_ns, 5 * MIN);
    assert_int_equal(t->retry.throttle_retries, 1);

    t = sluice_config_find_type(&c, "agent.spawn");
    assert_ptr_equal(t, &c.types[1]);
    assert_int_equal(t->nlimits, 2);
    assert_string_equal(t->limits[0], "runaway_breaker");
    assert_string_equal(t->limits[1], "agent_spawns");
    assert_int_equal(t->priority, 10);
    assert_int_equal(t->retry.max_attempts, 1);
    assert_int_equal(t->lease_ns, 30 * SEC);

    t = &c.types[2];
    assert_string_equal(t->name, "tenant.sync");
    assert_int_equal(t->nlimits, 1);
    assert_int_equal(t->retry.max_attempts, 3);
    assert_int_equal(t->retry.backoff, SLUICE_BACKOFF_FIXED);
    assert_int_equal(t->retry.base_ns, 30 * SEC);
    assert_int_equal(t->retry.throttle_retries, 1);

    t = &c.types[3];
    assert_string_equal(t->name, "email.send");
    assert_int_equal(t->priority, -5);
    assert_int_equal(t->lease_ns, 10 * SEC);
    assert_int_equal(t->retry.max_attempts, 3);

    for (size_t i = 0; i < c.nlimits; i++)
        assert_int_equal(sluice_limit_policy_validate(&c.limits[i], msg, sizeof(msg)), 0);
    for (size_t i = 0; i < c.ntypes; i++)
        assert_int_equal(sluice_type_policy_validate(&c.types[i], msg, sizeof(msg)), 0);
    assert_null(sluice_config_find_limit(&c, "nope"));
    assert_null(sluice_config_find_type(&c, "nope"));

    sluice_config_clear(&c);
    assert_null(c.limits);
    sluice_config_clear(&c);
    sluice_config_clear(NULL);
}

/* ---- Forms the format allows ------------------------------------------------------------- */

static void test_defaults_and_empty_sections(void **unused)
{
    sluice_config c;

    (void)unused;
    expect_ok("engine:\nlimits:\ntypes:\n", &c);
    assert_int_equal(c.nlimits, 0);
    assert_int_equal(c.ntypes, 0);
    assert_int_equal(c.engine.max_tasks, 10000000);
    assert_int_equal(c.engine.default_lease_ns, 30 * SEC);
    assert_string_equal(c.path, "t.yaml");
    sluice_config_clear(&c);

    expect_ok("limits: {}\ntypes: {plain: }\n", &c);
    assert_int_equal(c.ntypes, 1);
    assert_string_equal(c.types[0].name, "plain");
    assert_int_equal(c.types[0].nlimits, 0);
    assert_int_equal(c.types[0].retry.max_attempts, 3);
    assert_int_equal(c.types[0].line, 2);
    sluice_config_clear(&c);

    /* Without a name: "<config>" in messages, no path. */
    assert_int_equal(
        sluice_config_parse("limits: {a: {rate: 1/s}}", 24, NULL, &c, msg, sizeof(msg)), 0);
    assert_null(c.path);
    assert_int_equal(c.limits[0].def.period_ns, SEC);
    sluice_config_clear(&c);
    assert_int_equal(sluice_config_parse("limits: 5", 9, NULL, &c, msg, sizeof(msg)),
                     SLUICE_EINVAL);
    assert_string_equal(msg, "<config>:1:9: limits: expected a mapping of limit names to their "
                             "settings, got \"5\"");
}

static void test_limit_forms(void **unused)
{
    sluice_config c;
    const sluice_limit_policy *l;

    (void)unused;
    expect_ok("limits:\n"
              "  a: rate=100/1m,burst=10,start_empty\n"
              "  b: {permits: 5, period: 1m, burst: 10}\n"
              "  c: {quota: 1_000/month, horizon: 31d}\n"
              "  d: {quota: {budget: 7, period: total}, units: 7}\n"
              "  e: {window: 12/5s, key: explicit, missing_key: global, max_keys: 10,\n"
              "      keys_overflow: allow, max_key_len: 64}\n"
              "  f: {concurrency: 3, units: task, ttl: 500ms}\n"
              "  g:\n"
              "    key: input.tenant\n"
              "    tier:\n"
              "      field: input.plan\n"
              "      tiers:\n"
              "        - {name: free, equals: free, rate: 10/1h, burst: 1, horizon: 1d}\n"
              "        - {name: pro, equals: pro, concurrency: 5}\n"
              "  h: {rate: 1/1ms, units: input.cost}\n"
              "  i: {sliding: 3/s, overflow: wait, key: none}\n",
              &c);
    assert_int_equal(c.nlimits, 9);
    l = sluice_config_find_limit(&c, "a");
    assert_int_equal(l->def.kind, SLUICE_RATE);
    assert_int_equal(l->def.limit, 100);
    assert_int_equal(l->def.burst, 10);
    assert_int_equal(l->def.start_empty, 1);
    assert_int_equal(l->line, 2);
    l = sluice_config_find_limit(&c, "b");
    assert_int_equal(l->def.kind, SLUICE_RATE);
    assert_int_equal(l->def.limit, 5);
    assert_int_equal(l->def.period_ns, MIN);
    assert_int_equal(l->def.burst, 10);
    l = sluice_config_find_limit(&c, "c");
    assert_int_equal(l->def.kind, SLUICE_QUOTA);
    assert_int_equal(l->def.limit, 1000);
    assert_int_equal(l->def.calendar, SLUICE_CAL_MONTH);
    assert_int_equal(l->def.horizon_ns, 31 * 24 * HOUR);
    l = sluice_config_find_limit(&c, "d");
    assert_int_equal(l->def.calendar, SLUICE_CAL_NONE);
    assert_int_equal(l->units_source, SLUICE_UNITS_FIXED);
    assert_int_equal(l->units_fixed, 7);
    l = sluice_config_find_limit(&c, "e");
    assert_int_equal(l->def.kind, SLUICE_WINDOW);
    assert_int_equal(l->def.limit, 12);
    assert_int_equal(l->def.period_ns, 5 * SEC);
    assert_int_equal(l->key_source, SLUICE_KEY_EXPLICIT);
    assert_int_equal(l->missing_key_global, 1);
    assert_int_equal(l->def.max_keys, 10);
    assert_int_equal(l->def.key_overflow, SLUICE_KEYS_ALLOW);
    assert_int_equal(l->def.max_key_len, 64);
    l = sluice_config_find_limit(&c, "f");
    assert_int_equal(l->def.kind, SLUICE_CONCURRENCY);
    assert_int_equal(l->def.ttl_ns, 500 * MS);
    assert_int_equal(l->units_source, SLUICE_UNITS_TASK);
    l = sluice_config_find_limit(&c, "g");
    assert_int_equal(l->ntiers, 2);
    assert_string_equal(l->tier_path, "input.plan");
    assert_string_equal(l->tiers[0].equals, "free");
    assert_int_equal(l->tiers[0].def.burst, 1);
    assert_int_equal(l->tiers[0].def.horizon_ns, 24 * HOUR);
    assert_string_equal(l->tiers[1].equals, "pro");
    assert_int_equal(l->tiers[1].def.kind, SLUICE_CONCURRENCY);
    l = sluice_config_find_limit(&c, "h");
    assert_int_equal(l->def.period_ns, MS);
    assert_string_equal(l->units_path, "input.cost");
    l = sluice_config_find_limit(&c, "i");
    assert_int_equal(l->def.period_ns, SEC);
    assert_int_equal(l->key_source, SLUICE_KEY_NONE);
    sluice_config_clear(&c);
}

static void test_type_forms(void **unused)
{
    sluice_config c;

    (void)unused;
    /* sections in any order; one limit name without a list; retries off the limits */
    expect_ok("types:\n"
              "  t: {limits: a, priority: -3, retry: {throttle_retries: false, max: 0s, "
              "base: 0s, backoff: fixed}}\n"
              "limits:\n"
              "  a: {rate: 1/1s}\n",
              &c);
    assert_int_equal(c.types[0].nlimits, 1);
    assert_string_equal(c.types[0].limits[0], "a");
    assert_int_equal(c.types[0].priority, -3);
    assert_int_equal(c.types[0].retry.throttle_retries, 0);
    assert_int_equal(c.types[0].retry.base_ns, 0);
    assert_int_equal(c.types[0].retry.backoff, SLUICE_BACKOFF_FIXED);
    sluice_config_clear(&c);

    /* aliases are followed */
    expect_ok("limits:\n  a: &r {rate: 1/1s}\n  b: *r\ntypes:\n  t: {limits: [a, b]}\n", &c);
    assert_int_equal(c.limits[1].def.limit, 1);
    assert_int_equal(c.types[0].nlimits, 2);
    sluice_config_clear(&c);
}

static void test_ignored_sections(void **unused)
{
    static const char *const ignored[] = {"scenario", NULL};
    static const char text[] = "scenario: {streams: [1, 2], anything: goes}\n"
                               "limits: {a: {rate: 1/s}}\n";
    sluice_config c;

    (void)unused;
    assert_int_equal(
        sluice_config_parse_ignoring(text, strlen(text), "t.yaml", ignored, &c, msg, sizeof(msg)),
        0);
    assert_int_equal(c.nlimits, 1);
    sluice_config_clear(&c);
    expect_error(text, SLUICE_EINVAL,
                 "t.yaml:1:1: unknown key \"scenario\"; expected enabled, engine, store, limits, "
                 "maxmemory or types");
    assert_int_equal(
        sluice_config_parse_ignoring(text, strlen(text), "t.yaml", NULL, &c, msg, sizeof(msg)),
        SLUICE_EINVAL);
}

/* ---- Mistakes, one test per kind ---------------------------------------------------------- */

static void test_wrong_type(void **unused)
{
    (void)unused;
    expect_error("limits:\n  stripe:\n    rate: 100/1m\n    burst: ten\n", SLUICE_EINVAL,
                 "t.yaml:4:12: limits.stripe.burst: expected a positive integer, got \"ten\"");
    expect_error("limits:\n  s:\n    rate: 1/1s\n    burst: \"10\"\n", SLUICE_EINVAL,
                 "t.yaml:4:12: limits.s.burst: expected a positive integer, got \"10\" (a quoted "
                 "string)");
    expect_error("engine:\n  strict_types: yes\n", SLUICE_EINVAL,
                 "t.yaml:2:17: engine.strict_types: expected true or false, got \"yes\"");
    expect_error("engine:\n  max_finished: -1\n", SLUICE_EINVAL,
                 "t.yaml:2:17: engine.max_finished: expected a non-negative integer, got \"-1\"");
    expect_error("limits:\n  s: {rate: [1, 2]}\n", SLUICE_EINVAL,
                 "t.yaml:2:13: limits.s.rate: expected COUNT/PERIOD such as 100/1m or 10/1s, got "
                 "a list");
    expect_error(
        "types:\n  t: {priority: }\n", SLUICE_EINVAL,
        "t.yaml:2:17: types.t.priority: expected an integer from -2147483648 to 2147483647, "
        "got nothing");
    expect_error("types:\n  t: {limits: {a: 1}}\n", SLUICE_EINVAL,
                 "t.yaml:2:15: types.t.limits: expected a list of limit names, got a mapping");
    expect_error("- a\n- b\n", SLUICE_EINVAL,
                 "t.yaml:1:1: expected a mapping with the sections engine, limits and types, got "
                 "a list");
    expect_error("limits:\n  s: {concurrency: 2000000000}\n", SLUICE_EINVAL,
                 "t.yaml:2:20: limits.s.concurrency: expected at most 1000000000, got "
                 "\"2000000000\"");
    expect_error("limits:\n  s: {rate: 1/s, max_key_len: 8}\n", SLUICE_EINVAL,
                 "t.yaml:2:31: limits.s.max_key_len: expected at least 32, got \"8\"");
}

static void test_unknown_key(void **unused)
{
    (void)unused;
    expect_error("limits:\n  stripe:\n    rate: 100/1m\n    brust: 5\n", SLUICE_EINVAL,
                 "t.yaml:4:5: limits.stripe: unknown key \"brust\"; did you mean \"burst\"?");
    expect_error("limtis: {}\n", SLUICE_EINVAL,
                 "t.yaml:1:1: unknown key \"limtis\"; did you mean \"limits\"?");
    expect_error("types:\n  t:\n    retry: {attempts: 3}\n", SLUICE_EINVAL,
                 "t.yaml:3:13: types.t.retry: unknown key \"attempts\"; expected max_attempts, "
                 "backoff, base, max or throttle_retries");
    expect_error("engine: {max_tasks: 1, max_tasks: 2}\n", SLUICE_EINVAL,
                 "t.yaml:1:24: engine: key \"max_tasks\" is given twice (first at line 1)");
}

static void test_bad_duration(void **unused)
{
    (void)unused;
    expect_error("types:\n  t:\n    lease: 30\n", SLUICE_EINVAL,
                 "t.yaml:3:12: types.t.lease: expected a duration such as 500ms, 30s, 5m, 1h or "
                 "1d, got \"30\"");
    expect_error("types:\n  t:\n    lease: 0s\n", SLUICE_EINVAL,
                 "t.yaml:3:12: types.t.lease: expected a duration above zero, got \"0s\"");
    expect_error("engine:\n  event_interval: 99999999999d\n", SLUICE_EINVAL,
                 "t.yaml:2:19: engine.event_interval: the duration \"99999999999d\" is too long");
    expect_error("limits:\n  s: {rate: 1/1s, horizon: 1 hour}\n", SLUICE_EINVAL,
                 "t.yaml:2:28: limits.s.horizon: expected a duration such as 500ms, 30s, 5m, 1h "
                 "or 1d, got \"1 hour\"");
}

static void test_bad_rate_spec(void **unused)
{
    (void)unused;
    expect_error("limits:\n  stripe:\n    rate: 100/1x\n", SLUICE_EINVAL,
                 "t.yaml:3:11: limits.stripe.rate: expected COUNT/PERIOD such as 100/1m or 10/1s, "
                 "got \"100/1x\"");
    expect_error("limits:\n  stripe:\n    rate: 100 per minute\n", SLUICE_EINVAL,
                 "t.yaml:3:11: limits.stripe.rate: expected COUNT/PERIOD such as 100/1m or 10/1s, "
                 "got \"100 per minute\"");
    expect_error("limits:\n  s:\n    window: 0/1s\n", SLUICE_EINVAL,
                 "t.yaml:3:13: limits.s.window: the count must be from 1 to 1000000000, got "
                 "\"0/1s\"");
    expect_error("limits:\n  s:\n    sliding: 10/0s\n", SLUICE_EINVAL,
                 "t.yaml:3:14: limits.s.sliding: the period must be above zero, got \"10/0s\"");
    expect_error("limits:\n  s:\n    rate: 10/400d\n", SLUICE_EINVAL,
                 "t.yaml:3:11: limits.s.rate: the period must be at most 366 days, got "
                 "\"10/400d\"");
    expect_error("limits:\n  s:\n    sliding: 200000/1s\n", SLUICE_EINVAL,
                 "t.yaml:3:14: limits.s.sliding: a sliding window holds at most 100000 units, got "
                 "200000");
    expect_error("limits:\n  s:\n    quota: 5/week\n", SLUICE_EINVAL,
                 "t.yaml:3:12: limits.s.quota: expected BUDGET/day, BUDGET/month or BUDGET/total "
                 "such as 1000/day, or {budget: 1000, period: day}, got \"5/week\"");
    expect_error("limits:\n  s:\n    quota: {budget: 5, period: weekly}\n", SLUICE_EINVAL,
                 "t.yaml:3:32: limits.s.quota.period: expected day, month or total, got "
                 "\"weekly\"");
    expect_error("limits:\n  stripe: rate=10/1s,burst=0\n", SLUICE_EINVAL,
                 "t.yaml:2:11: limits.stripe: bad burst \"0\" in \"rate=10/1s,burst=0\": must be "
                 "at least 1");
    expect_error("limits:\n  s: {permits: 5}\n", SLUICE_EINVAL,
                 "t.yaml:2:7: limits.s.permits: permits needs a period, such as period: 1m (or "
                 "write rate: N/1m)");
    expect_error("limits:\n  s: {rate: 5/1s, period: 1m}\n", SLUICE_EINVAL,
                 "t.yaml:2:19: limits.s.period: period goes with permits (permits: 15, period: "
                 "1m); or write rate: 15/1m");
    expect_error("limits:\n  s:\n    rate: 1/1s\n    window: 1/1s\n", SLUICE_EINVAL,
                 "t.yaml:4:5: limits.s.window: a limit has exactly one of rate, window, sliding, "
                 "concurrency, quota or tier, and rate is already given at line 3");
    expect_error("limits:\n  s:\n    key: input.x\n", SLUICE_EINVAL,
                 "t.yaml:2:3: limits.s: no limit given: expected one of rate, window, sliding, "
                 "concurrency, quota or tier");
    expect_error("limits:\n  s:\n    window: 1/1s\n    burst: 3\n", SLUICE_EINVAL,
                 "t.yaml:4:5: limits.s.burst: burst applies to rate limits only, and this is a "
                 "window limit");
    expect_error("limits:\n  s:\n    concurrency: 1\n    horizon: 3s\n", SLUICE_EINVAL,
                 "t.yaml:4:5: limits.s.horizon: horizon applies to rate, window, sliding and "
                 "quota limits, not to a concurrency limit (its slots free up when tasks "
                 "finish)");
    expect_error("limits:\n  s:\n    rate: 1/1s\n    ttl: 3s\n", SLUICE_EINVAL,
                 "t.yaml:4:5: limits.s.ttl: ttl applies to concurrency limits only, and this is a "
                 "rate limit");
}

static void test_negative_burst(void **unused)
{
    (void)unused;
    expect_error("limits:\n  stripe:\n    rate: 100/1m\n    burst: -5\n", SLUICE_EINVAL,
                 "t.yaml:4:12: limits.stripe.burst: expected a positive integer, got \"-5\"");
    expect_error("limits:\n  stripe:\n    rate: 100/1m\n    burst: 0\n", SLUICE_EINVAL,
                 "t.yaml:4:12: limits.stripe.burst: expected a positive integer, got \"0\"");
}

static void test_units_above_burst(void **unused)
{
    (void)unused;
    expect_error("limits:\n  stripe:\n    rate: 100/1m\n    burst: 10\n    units: 20\n",
                 SLUICE_EINVAL,
                 "t.yaml:5:12: limits.stripe.units: units 20 exceed the burst of 10: such a task "
                 "could never start; split it into tasks of at most 10 units");
    expect_error("limits:\n  s:\n    concurrency: 3\n    units: 4\n", SLUICE_EINVAL,
                 "t.yaml:4:12: limits.s.units: units 4 exceed the concurrency of 3: such a task "
                 "could never start; split it into tasks of at most 3 units");
    expect_error("limits:\n  s:\n    rate: 1/1s\n    units: 0\n", SLUICE_EINVAL,
                 "t.yaml:4:12: limits.s.units: expected a positive integer, got \"0\"");
    expect_error("limits:\n  s:\n    rate: 1/1s\n    units: tokens\n", SLUICE_EINVAL,
                 "t.yaml:4:12: limits.s.units: expected task, a positive integer or a path into "
                 "the task's input such as input.tokens, got \"tokens\"; did you mean "
                 "\"input.tokens\"?");
    expect_error("limits:\n"
                 "  t:\n"
                 "    units: 10\n"
                 "    tier:\n"
                 "      field: input.n\n"
                 "      tiers:\n"
                 "        - {name: a, max: 2, rate: 100/1s}\n"
                 "        - {name: b, min: 3, rate: 5/1s}\n",
                 SLUICE_EINVAL,
                 "t.yaml:3:12: limits.t.units: units 10 exceed the burst of 5 in tier \"b\": such "
                 "a task could never start; split it into tasks of at most 5 units");
}

static void test_overlapping_tiers(void **unused)
{
    (void)unused;
    expect_error("limits:\n"
                 "  t:\n"
                 "    tier:\n"
                 "      field: input.agent_count\n"
                 "      tiers:\n"
                 "        - {name: simple, max: 0, rate: 100/1m}\n"
                 "        - {name: standard, min: 0, max: 2, rate: 20/1m}\n",
                 SLUICE_EINVAL,
                 "t.yaml:7:33: limits.t.tier.tiers[1].min: tier \"standard\" (0 to 2) overlaps "
                 "tier \"simple\" (at most 0): a value must choose one tier");
    expect_error("limits:\n"
                 "  t:\n"
                 "    tier:\n"
                 "      field: input.n\n"
                 "      tiers:\n"
                 "        - {name: a, min: 5, max: 2, rate: 1/1s}\n",
                 SLUICE_EINVAL,
                 "t.yaml:6:26: limits.t.tier.tiers[0].min: tier \"a\" has min 5 above max 2");
    expect_error("limits:\n"
                 "  t:\n"
                 "    tier:\n"
                 "      field: input.n\n"
                 "      tiers:\n"
                 "        - {name: a, max: 1, rate: 1/1s}\n"
                 "        - {name: a, min: 2, rate: 1/1s}\n",
                 SLUICE_EINVAL,
                 "t.yaml:7:18: limits.t.tier.tiers[1].name: two tiers are named \"a\"");
    expect_error("limits:\n"
                 "  t:\n"
                 "    tier:\n"
                 "      field: input.n\n"
                 "      tiers:\n"
                 "        - {name: a, equals: x, min: 1, rate: 1/1s}\n",
                 SLUICE_EINVAL,
                 "t.yaml:6:21: limits.t.tier.tiers[0].equals: a tier matches numbers (min, max) "
                 "or a string (equals), not both");
    expect_error("limits:\n  t:\n    tier: {field: n, tiers: []}\n", SLUICE_EINVAL,
                 "t.yaml:3:19: limits.t.tier.field: expected a path into the task's input such as "
                 "input.agent_count, got \"n\"; did you mean \"input.n\"?");
    expect_error("limits:\n  t:\n    tier: {field: input.n, tiers: []}\n", SLUICE_EINVAL,
                 "t.yaml:3:35: limits.t.tier.tiers: expected a list of at least one tier, got an "
                 "empty list");
    expect_error("limits:\n  t:\n    tier: {field: input.n, tiers: [{name: a}]}\n", SLUICE_EINVAL,
                 "t.yaml:3:36: limits.t.tier.tiers[0]: no limit given: expected one of rate, "
                 "window, sliding, concurrency or quota");
    expect_error("limits:\n  t:\n    burst: 5\n    tier: {field: input.n, tiers: [{name: a, "
                 "rate: 1/s}]}\n",
                 SLUICE_EINVAL,
                 "t.yaml:3:5: limits.t.burst: burst goes in each tier of a tiered limit");
}

static void test_unknown_limit_in_type(void **unused)
{
    (void)unused;
    expect_error("limits:\n  stripe: {rate: 1/1s}\ntypes:\n  charge:\n    limits: [strpe]\n",
                 SLUICE_EINVAL,
                 "t.yaml:5:14: types.charge.limits[0]: unknown limit \"strpe\"; did you mean "
                 "\"stripe\"?");
    expect_error("limits:\n  a: {rate: 1/1s}\n  b: {rate: 1/1s}\ntypes:\n  t: {limits: [a, "
                 "zzzzz]}\n",
                 SLUICE_EINVAL,
                 "t.yaml:5:19: types.t.limits[1]: unknown limit \"zzzzz\"; the limits declared "
                 "are a, b");
    expect_error("types:\n  x:\n    limits: [a]\n", SLUICE_EINVAL,
                 "t.yaml:3:14: types.x.limits[0]: unknown limit \"a\": the limits section "
                 "declares none");
    expect_error("limits:\n  s: {rate: 1/1s}\ntypes:\n  x:\n    limits: [s, s]\n", SLUICE_EINVAL,
                 "t.yaml:5:17: types.x.limits[1]: limit \"s\" is listed twice");
}

static void test_duplicate_name(void **unused)
{
    (void)unused;
    expect_error("limits:\n  stripe: {rate: 1/1s}\n  stripe: {rate: 2/1s}\n", SLUICE_EINVAL,
                 "t.yaml:3:3: limits: the limit \"stripe\" is declared twice (first at line 2)");
    expect_error("types:\n  t: {}\n  u: {}\n  t: {}\n", SLUICE_EINVAL,
                 "t.yaml:4:3: types: the type \"t\" is declared twice (first at line 2)");
    expect_error("limits:\n  \"a b\": {rate: 1/1s}\n", SLUICE_EINVAL,
                 "t.yaml:2:3: limits: bad limit name: the name \"a b\" has a character outside "
                 "A-Z a-z 0-9 _ . : - (\" \" at offset 1)");
}

static void test_other_mistakes(void **unused)
{
    (void)unused;
    expect_error("limits:\n  s:\n    rate: 1/1s\n    key: explict\n", SLUICE_EINVAL,
                 "t.yaml:4:10: limits.s.key: expected none, explicit or a path into the task's "
                 "input such as input.tenant_id, got \"explict\"; did you mean \"explicit\"?");
    expect_error("limits:\n  s:\n    rate: 1/1s\n    key: tenant_id\n", SLUICE_EINVAL,
                 "t.yaml:4:10: limits.s.key: expected none, explicit or a path into the task's "
                 "input such as input.tenant_id, got \"tenant_id\"; did you mean "
                 "\"input.tenant_id\"?");
    expect_error("limits:\n  s:\n    rate: 1/1s\n    key: input..x\n", SLUICE_EINVAL,
                 "t.yaml:4:10: limits.s.key: key path \"input..x\": empty segment at offset 6 "
                 "(two dots in a row)");
    expect_error("limits:\n  s:\n    rate: 1/1s\n    overflow: rejct\n", SLUICE_EINVAL,
                 "t.yaml:4:15: limits.s.overflow: expected wait or reject, got \"rejct\"; did you "
                 "mean \"reject\"?");
    expect_error("limits:\n  s:\n    rate: 1/1s\n    missing_key: global\n", SLUICE_EINVAL,
                 "t.yaml:4:5: limits.s.missing_key: missing_key applies to a limit with a key, and "
                 "this one has none");
    expect_error("types:\n  x:\n    retry: {base: 10m}\n", SLUICE_EINVAL,
                 "t.yaml:3:19: types.x.retry.base: the retry max (5m) is below the base (10m)");
    expect_error("types:\n  x:\n    retry: {max_attempts: 0}\n", SLUICE_EINVAL,
                 "t.yaml:3:27: types.x.retry.max_attempts: expected a positive integer, got "
                 "\"0\"");
    expect_error("limits:\n  s: {rate: \"a\\0b\"}\n", SLUICE_EINVAL,
                 "t.yaml:2:13: limits.s.rate: expected COUNT/PERIOD such as 100/1m or 10/1s, got "
                 "\"a\\x00b\"");
    expect_error("---\na: 1\n---\nb: 2\n", SLUICE_EINVAL,
                 "t.yaml:3:1: a second YAML document: a configuration file holds exactly one");
}

static void test_yaml_syntax_error(void **unused)
{
    (void)unused;
    expect_error("limits:\n  stripe:\n    rate: 1/1s\n   burst: 3\n", SLUICE_EPARSE,
                 "t.yaml:4:4: YAML syntax error: did not find expected key (while parsing a block "
                 "mapping at line 2, column 3)");
    expect_error("limits:\n\ts: 1\n", SLUICE_EPARSE,
                 "t.yaml:2:1: YAML syntax error: found character that cannot start any token "
                 "(while scanning for the next token at line 2, column 1)");
    expect_error("limits: {a: [1, 2}\n", SLUICE_EPARSE,
                 "t.yaml:1:18: YAML syntax error: did not find expected ',' or ']' (while parsing "
                 "a flow sequence at line 1, column 13)");
    expect_error("limits:\n  s: {rate: \xff}\n", SLUICE_EPARSE,
                 "t.yaml:2:13: invalid text: invalid leading UTF-8 octet (byte 0xff)");
    expect_error("limits: *nope\n", SLUICE_EPARSE,
                 "t.yaml:1:9: YAML syntax error: found undefined alias");
}

static void test_missing_file(void **unused)
{
    sluice_config c;

    (void)unused;
    assert_int_equal(sluice_config_load("/nonexistent/sluice.yaml", &c, msg, sizeof(msg)),
                     SLUICE_ENOTFOUND);
    assert_string_equal(msg, "/nonexistent/sluice.yaml: cannot open: No such file or directory");
    assert_null(c.limits);
    assert_int_equal(sluice_config_load("/", &c, msg, sizeof(msg)), SLUICE_EINVAL);
    assert_string_equal(msg, "/: cannot read: Is a directory");
}

static void test_empty_file(void **unused)
{
    sluice_config c;

    (void)unused;
    expect_error("", SLUICE_EINVAL,
                 "t.yaml:1:1: the file is empty: expected a mapping with the sections engine, "
                 "limits and types");
    expect_error("# only a comment\n\n", SLUICE_EINVAL,
                 "t.yaml:1:1: the file is empty: expected a mapping with the sections engine, "
                 "limits and types");
    assert_int_equal(sluice_config_load("/dev/null", &c, msg, sizeof(msg)), SLUICE_EINVAL);
    assert_string_equal(msg, "/dev/null:1:1: the file is empty: expected a mapping with the "
                             "sections engine, limits and types");
}

/* ---- Installing into an engine ---------------------------------------------------------- */

static void test_apply_to_engine(void **unused)
{
    static const char input[] = "{\"user\": \"ann\", \"agent_count\": 1, \"workflow_id\": \"w1\", "
                                "\"estimated_cost_cents\": 5}";
    const int64_t now = INT64_C(1704067200) * SEC;
    const sluice_limit_policy *lp;
    const sluice_type_policy *tp;
    sluice_config c, partial;
    sluice_engine *e;
    sluice_limit *live = NULL;
    sluice_task_spec spec;
    sluice_submit_error err;
    sluice_delivery d;
    uint64_t id;

    (void)unused;
    if (sluice_config_load(example_path(), &c, msg, sizeof(msg)) != 0)
        fail_msg("%s", msg);
    assert_int_equal(sluice_engine_new(&c.engine, &e), 0);
    assert_int_equal(sluice_config_apply(&c, e, now, msg, sizeof(msg)), 0);
    assert_string_equal(msg, "");
    lp = sluice_engine_get_limit(e, "workflow_tier", &live);
    assert_non_null(lp);
    assert_non_null(live);
    assert_int_equal(lp->ntiers, 3);
    assert_string_equal(lp->tier_path, "input.agent_count");
    tp = sluice_engine_get_type(e, "llm.chat");
    assert_non_null(tp);
    assert_int_equal(tp->nlimits, 5);
    assert_int_equal(tp->lease_ns, 2 * MIN);
    /* Applying again replaces everything in place. */
    assert_int_equal(sluice_config_apply(&c, e, now, msg, sizeof(msg)), 0);

    /* A task of a configured type runs through the configured chain. */
    memset(&spec, 0, sizeof(spec));
    spec.type = "llm.chat";
    spec.payload = input;
    spec.payload_len = strlen(input);
    assert_int_equal(sluice_engine_submit(e, &spec, now, &id, &err), 0);
    assert_int_equal(sluice_engine_poll(e, NULL, 0, 1, now, &d), 1);
    assert_int_equal(d.id, id);
    assert_int_equal(sluice_engine_ack(e, id, 3, now), 0);
    /* The tier path is required by workflow_tier: a task without it is refused at submit. */
    spec.payload = "{\"user\": \"ann\"}";
    spec.payload_len = strlen(spec.payload);
    assert_int_not_equal(sluice_engine_submit(e, &spec, now, &id, &err), 0);
    sluice_engine_free(e);

    /* An engine error names the file, the line and the type: here a type whose limits were
     * never installed. */
    memset(&partial, 0, sizeof(partial));
    partial.types = c.types;
    partial.ntypes = 1;
    partial.path = c.path;
    assert_int_equal(sluice_engine_new(NULL, &e), 0);
    assert_int_not_equal(sluice_config_apply(&partial, e, now, msg, sizeof(msg)), 0);
    assert_non_null(strstr(msg, "sluice.yaml:95: type \"llm.chat\": "));
    assert_int_equal(sluice_config_apply(NULL, e, now, msg, sizeof(msg)), SLUICE_EINVAL);
    sluice_engine_free(e);
    sluice_config_clear(&c);
}

/* ---- Robustness -------------------------------------------------------------------------- */

/* Parses text under the counting allocator: it must succeed, or fail with a one-line message
 * naming the file; nothing may be left allocated after clear. */
static void parse_cleanly(const char *text, size_t len)
{
    sluice_config c;
    int rc;

    oom_install(0);
    rc = sluice_config_parse(text, len, "t.yaml", &c, msg, sizeof(msg));
    if (rc == 0) {
        assert_string_equal(msg, "");
        sluice_config_clear(&c);
    } else {
        assert_true(rc == SLUICE_EINVAL || rc == SLUICE_EPARSE);
        assert_int_equal(strncmp(msg, "t.yaml:", 7), 0);
        assert_null(strchr(msg, '\n'));
        assert_null(c.limits);
    }
    assert_int_equal(oom_live_blocks(), 0);
    oom_uninstall();
}

static void test_every_prefix_of_the_example(void **unused)
{
    size_t len;
    char *text = read_example(&len);

    (void)unused;
    for (size_t n = 0; n <= len; n++)
        parse_cleanly(text, n);
    free(text);
}

static void test_random_corruptions(void **unused)
{
    static const char junk[] = ":-[]{},#&*!|>'\"%@` \t\n\r\x01\xff"
                               "0123456789aZ_./";
    size_t len;
    char *text = read_example(&len), *copy = malloc(len);
    test_rng r;

    (void)unused;
    assert_non_null(copy);
    rng_seed(&r, 0xc0ffee);
    for (int round = 0; round < 2000; round++) {
        int edits = (int)rng_range(&r, 1, 4);

        memcpy(copy, text, len);
        for (int i = 0; i < edits; i++)
            copy[rng_range(&r, 0, (int64_t)len - 1)] =
                junk[rng_range(&r, 0, (int64_t)sizeof(junk) - 2)];
        parse_cleanly(copy, len);
    }
    free(copy);
    free(text);
}

/* A document of `depth` nested lists under types.t.limits (3 levels of mappings above them). */
static char *nested_lists(size_t depth, size_t *len)
{
    size_t n = 0;
    char *text = malloc(2 * depth + 64);

    assert_non_null(text);
    n += (size_t)sprintf(text, "types: {t: {limits: ");
    memset(text + n, '[', depth);
    n += depth;
    memset(text + n, ']', depth);
    n += depth;
    n += (size_t)sprintf(text + n, "}}\n");
    *len = n;
    return text;
}

static void test_deep_nesting(void **unused)
{
    /* Within the depth cap (3 mappings + 61 lists = 64 levels): walked, and refused as usual. */
    static const size_t ok_depths[] = {3, 61};
    /* Past it: refused before libyaml loads it (100k deep took 35 s to load, quadratic). */
    static const size_t deep[] = {62, 5000, 100000};
    size_t n;
    char *text;

    (void)unused;
    for (size_t i = 0; i < sizeof ok_depths / sizeof ok_depths[0]; i++) {
        text = nested_lists(ok_depths[i], &n);
        parse_cleanly(text, n);
        assert_string_equal(msg,
                            "t.yaml:1:22: types.t.limits[0]: expected a limit name, got a list");
        free(text);
    }
    for (size_t i = 0; i < sizeof deep / sizeof deep[0]; i++) {
        text = nested_lists(deep[i], &n);
        parse_cleanly(text, n);
        /* the 62nd list opens at column 21 + 62 */
        assert_string_equal(msg,
                            "t.yaml:1:82: nested more than 64 levels deep (mappings and lists)");
        free(text);
    }
}

/* A generated file of `nlimits` limits (lim0 .. lim<n-1>, two lines each from line 2) and one
 * type using the first and the last, followed by `tail`. */
static char *many_limits(size_t nlimits, const char *tail, size_t *len)
{
    size_t cap = nlimits * 40 + strlen(tail) + 200, n = 0;
    char *text = malloc(cap);

    assert_non_null(text);
    n += (size_t)sprintf(text, "limits:\n");
    for (size_t i = 0; i < nlimits; i++)
        n += (size_t)sprintf(text + n, "  lim%zu:\n    rate: 10/s\n", i);
    n += (size_t)sprintf(text + n, "types:\n  t:\n    limits: [lim0, lim%zu]\n%s", nlimits - 1,
                         tail);
    *len = n;
    return text;
}

/* 200k limits: the duplicate checks and the lookups of a type's limits are by hash, so such a
 * file loads (it took over three minutes with pairwise checks); duplicates at its very end are
 * still found. The time is measured in the report, not here. */
static void test_many_limits(void **unused)
{
    const size_t nl = 200000;
    sluice_config c;
    char want[200];
    size_t len;
    char *text;

    (void)unused;
    text = many_limits(nl, "", &len);
    assert_int_equal(sluice_config_parse(text, len, "t.yaml", &c, msg, sizeof(msg)), 0);
    assert_int_equal(c.nlimits, nl);
    for (size_t i = 0; i < nl; i += 9973) {
        char name[32];

        snprintf(name, sizeof(name), "lim%zu", i);
        assert_non_null(sluice_config_find_limit(&c, name));
        assert_string_equal(sluice_config_find_limit(&c, name)->name, name);
    }
    assert_non_null(sluice_config_find_limit(&c, "lim199999"));
    assert_null(sluice_config_find_limit(&c, "lim200000"));
    assert_non_null(sluice_config_find_type(&c, "t"));
    assert_null(sluice_config_find_type(&c, "u"));
    sluice_config_clear(&c);
    free(text);

    /* The last limit repeats the second one. */
    text = many_limits(nl, "", &len);
    memcpy(strstr(text, "  lim199999:"), "  lim1:     ", 12);
    assert_int_equal(sluice_config_parse(text, len, "t.yaml", &c, msg, sizeof(msg)), SLUICE_EINVAL);
    snprintf(want, sizeof(want),
             "t.yaml:%zu:3: limits: the limit \"lim1\" is declared twice (first at line 4)",
             2 + 2 * (nl - 1));
    assert_string_equal(msg, want);
    free(text);

    text = many_limits(nl, "  u: {}\n  t: {}\n", &len);
    assert_int_equal(sluice_config_parse(text, len, "t.yaml", &c, msg, sizeof(msg)), SLUICE_EINVAL);
    assert_non_null(strstr(msg, "the type \"t\" is declared twice"));
    free(text);
}

/* The file size cap: SLUICE_CONFIG_MAX_BYTES is read, one byte more is refused with a message
 * that says why (and the file is not read further). */
static void test_file_size_cap(void **unused)
{
    char path[] = "/tmp/sluice-test-config-XXXXXX";
    sluice_config c;
    char want[300];
    FILE *f;
    int fd;

    (void)unused;
    fd = mkstemp(path);
    assert_true(fd >= 0);
    f = fdopen(fd, "w");
    assert_non_null(f);
    /* A file of exactly the cap (a section and a long comment), then one byte more. */
    fputs("types:\n#", f);
    for (size_t i = 8; i < SLUICE_CONFIG_MAX_BYTES - 1; i++)
        fputc('x', f);
    fputc('\n', f);
    assert_int_equal(fflush(f), 0);
    if (sluice_config_load(path, &c, msg, sizeof(msg)) != 0)
        fail_msg("%s", msg);
    sluice_config_clear(&c);
    fputc('\n', f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(sluice_config_load(path, &c, msg, sizeof(msg)), SLUICE_EINVAL);
    snprintf(want, sizeof(want),
             "%s: the file is larger than %zu bytes, the most a configuration may have", path,
             (size_t)SLUICE_CONFIG_MAX_BYTES);
    assert_string_equal(msg, want);
    assert_null(c.limits);
    unlink(path);
}

static const char *oom_text;
static size_t oom_len;

static int parse_and_clear(void *arg)
{
    sluice_config c;
    int rc;

    (void)arg;
    rc = sluice_config_parse(oom_text, oom_len, "t.yaml", &c, msg, sizeof(msg));
    if (rc == 0) {
        assert_int_equal(c.nlimits, 9);
        sluice_config_clear(&c);
    } else {
        assert_null(c.limits);
        assert_string_equal(msg + strlen(msg) - strlen("out of memory"), "out of memory");
    }
    return rc;
}

static void test_oom_sweep(void **unused)
{
    char *text = read_example(&oom_len);
    long n;

    (void)unused;
    oom_text = text;
    n = oom_sweep(parse_and_clear, NULL, 1000);
    assert_true(n > 30);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_example_file),
        cmocka_unit_test(test_defaults_and_empty_sections),
        cmocka_unit_test(test_limit_forms),
        cmocka_unit_test(test_type_forms),
        cmocka_unit_test(test_ignored_sections),
        cmocka_unit_test(test_wrong_type),
        cmocka_unit_test(test_unknown_key),
        cmocka_unit_test(test_bad_duration),
        cmocka_unit_test(test_bad_rate_spec),
        cmocka_unit_test(test_negative_burst),
        cmocka_unit_test(test_units_above_burst),
        cmocka_unit_test(test_overlapping_tiers),
        cmocka_unit_test(test_unknown_limit_in_type),
        cmocka_unit_test(test_duplicate_name),
        cmocka_unit_test(test_other_mistakes),
        cmocka_unit_test(test_yaml_syntax_error),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_empty_file),
        cmocka_unit_test(test_apply_to_engine),
        cmocka_unit_test(test_every_prefix_of_the_example),
        cmocka_unit_test(test_random_corruptions),
        cmocka_unit_test(test_deep_nesting),
        cmocka_unit_test(test_many_limits),
        cmocka_unit_test(test_file_size_cap),
        cmocka_unit_test(test_oom_sweep),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
