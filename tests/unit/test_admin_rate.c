/* SPDX-License-Identifier: MIT */
/*
 * Tests of a key's "rate" in /api/limits/{name}'s top_keys (admin_key_rate_json, read through
 * cmd_limit_key_rate and sluice_limit_key_rate), on a simulated clock: a key never backed off
 * shows its configured rate; a backoff on an adaptive limit (LIMIT.BACKOFF, TASK.FAIL ...
 * RETRY_AFTER) shows the lowered rate, since when, until when the key is held and why, with
 * the same words as LIMIT.RATE; the rate climbs back interval by interval and the key is shown
 * at its configured rate again once it has recovered. A limit that is not adaptive keeps its
 * rate through a backoff and shows only the hold; every other kind of limit, and no limit, give
 * null. Reading changes nothing. An out-of-memory sweep covers the document.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "engine_fixture.h"
#include "server/admin/admin_impl.h"
#include "server/commands.h"
#include "sluice/error.h"
#include "sluice/limit.h"
#include "testutil.h"

/* engine_fixture.h's MIN is taken by sys/param.h's MIN(a, b), which the admin headers bring. */
#define MINUTE (60 * SEC)

/* 20/1s, halved on each 429 down to 5/1s, regaining 10% (2 permits) a minute. */
static sluice_limit *adaptive_20(void)
{
    sluice_limit_def def;
    sluice_limit *lim;
    char msg[160];

    sluice_limit_def_init(&def, SLUICE_RATE);
    def.limit = 20;
    def.period_ns = SEC;
    def.decrease_num = 5;
    def.decrease_den = 10;
    def.recover_pct = 10;
    def.recover_ns = MINUTE;
    def.floor_permits = 5;
    def.floor_period_ns = SEC;
    assert_int_equal(sluice_limit_new(&def, &lim, msg, sizeof msg), SLUICE_OK);
    return lim;
}

static sluice_limit *plain(sluice_limit_kind kind)
{
    sluice_limit_def def;
    sluice_limit *lim;
    char msg[160];

    sluice_limit_def_init(&def, kind);
    def.limit = 10;
    def.period_ns = kind == SLUICE_CONCURRENCY ? 0 : SEC;
    assert_int_equal(sluice_limit_new(&def, &lim, msg, sizeof msg), SLUICE_OK);
    return lim;
}

static const char *str(const json_t *o, const char *name)
{
    const char *s = json_string_value(json_object_get(o, name));

    assert_non_null(s);
    return s;
}

static json_int_t num(const json_t *o, const char *name)
{
    const json_t *v = json_object_get(o, name);

    assert_true(json_is_integer(v));
    return json_integer_value(v);
}

static void assert_null_field(const json_t *o, const char *name)
{
    assert_true(json_is_null(json_object_get(o, name)));
}

static json_t *rate_of(sluice_limit *lim, const char *key, int64_t now)
{
    json_t *o = admin_key_rate_json(lim, key, strlen(key), now);

    assert_non_null(o);
    return o;
}

/* Backed off by a 429, then recovering on the simulated clock. */
static void test_rate_backoff_and_recovery(void **unused)
{
    sluice_limit *lim = adaptive_20();
    cmd_key_rate kr;
    json_t *o;

    (void)unused;
    /* A key never backed off: its configured rate, nothing lowered, nothing held. */
    o = rate_of(lim, "acme", T0);
    assert_string_equal(str(o, "rate"), "20/1s");
    assert_string_equal(str(o, "configured"), "20/1s");
    assert_int_equal(num(o, "permits"), 20);
    assert_int_equal(num(o, "configured_permits"), 20);
    assert_int_equal(num(o, "period_ms"), 1000);
    assert_true(json_is_true(json_object_get(o, "adaptive")));
    assert_true(json_is_false(json_object_get(o, "slowed")));
    assert_null_field(o, "since_ms");
    assert_null_field(o, "held_until_ms");
    assert_string_equal(str(o, "why"), "configured (adaptive, at its configured rate)");
    json_decref(o);

    /* The upstream answered 429 with Retry-After: 2 s. */
    assert_int_equal(sluice_limit_backoff(lim, "acme", 4, 2 * SEC, T0, NULL), SLUICE_OK);
    o = rate_of(lim, "acme", T0 + 500 * MS);
    assert_string_equal(str(o, "rate"), "10/1s");
    assert_string_equal(str(o, "configured"), "20/1s");
    assert_int_equal(num(o, "permits"), 10);
    assert_true(json_is_true(json_object_get(o, "slowed")));
    assert_int_equal(num(o, "since_ms"), T0 / MS);
    assert_int_equal(num(o, "held_until_ms"), (T0 + 2 * SEC) / MS);
    assert_string_equal(str(o, "why"), "lowered from 20/1s by its upstream's 429s, the last 500 ms "
                                       "ago; regains 10% every 1m");
    /* The same words as LIMIT.RATE (cmd_limit_key_rate is what both read). */
    assert_int_equal(cmd_limit_key_rate(lim, "acme", 4, T0 + 500 * MS, &kr), SLUICE_OK);
    assert_string_equal(kr.why, str(o, "why"));
    json_decref(o);
    /* Another key is untouched. */
    o = rate_of(lim, "other", T0 + 500 * MS);
    assert_string_equal(str(o, "rate"), "20/1s");
    json_decref(o);

    /* Past the hold: it may take a unit now, still at the lowered rate. */
    o = rate_of(lim, "acme", T0 + 3 * SEC);
    assert_null_field(o, "held_until_ms");
    assert_string_equal(str(o, "rate"), "10/1s");
    json_decref(o);
    /* A minute on: one interval regained (2 permits); the next interval starts then. */
    o = rate_of(lim, "acme", T0 + MINUTE);
    assert_string_equal(str(o, "rate"), "12/1s");
    assert_true(json_is_true(json_object_get(o, "slowed")));
    assert_int_equal(num(o, "since_ms"), (T0 + MINUTE) / MS);
    json_decref(o);
    /* Five minutes on: back at the configured rate, and shown so. */
    o = rate_of(lim, "acme", T0 + 5 * MINUTE);
    assert_string_equal(str(o, "rate"), "20/1s");
    assert_true(json_is_false(json_object_get(o, "slowed")));
    assert_null_field(o, "since_ms");
    assert_string_equal(str(o, "why"), "configured (adaptive, at its configured rate)");
    json_decref(o);
    /* Reading moved nothing: the key is still lowered at T0 + 1 s, and held until T0 + 2 s. */
    o = rate_of(lim, "acme", T0 + SEC);
    assert_string_equal(str(o, "rate"), "10/1s");
    assert_int_equal(num(o, "held_until_ms"), (T0 + 2 * SEC) / MS);
    json_decref(o);
    sluice_limit_free(lim);
}

/* A rate limit that is not adaptive: a backoff holds the key, its rate stays. */
static void test_rate_not_adaptive(void **unused)
{
    sluice_limit *lim = plain(SLUICE_RATE);
    json_t *o;

    (void)unused;
    assert_int_equal(sluice_limit_backoff(lim, "k", 1, 10 * SEC, T0, NULL), SLUICE_OK);
    o = rate_of(lim, "k", T0);
    assert_string_equal(str(o, "rate"), "10/1s");
    assert_string_equal(str(o, "configured"), "10/1s");
    assert_true(json_is_false(json_object_get(o, "adaptive")));
    assert_true(json_is_false(json_object_get(o, "slowed")));
    assert_null_field(o, "since_ms");
    assert_int_equal(num(o, "held_until_ms"), (T0 + 10 * SEC) / MS);
    assert_string_equal(str(o, "why"), "configured (not adaptive)");
    json_decref(o);
    sluice_limit_free(lim);
}

/* Only rate limits have a rate: every other kind, and no limit, give null. */
static void test_rate_other_kinds(void **unused)
{
    static const sluice_limit_kind kinds[] = {SLUICE_WINDOW, SLUICE_SLIDING, SLUICE_CONCURRENCY};
    cmd_key_rate kr;
    json_t *o;

    (void)unused;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        sluice_limit *lim = plain(kinds[i]);

        o = admin_key_rate_json(lim, "k", 1, T0);
        assert_true(json_is_null(o));
        json_decref(o);
        assert_int_equal(cmd_limit_key_rate(lim, "k", 1, T0, &kr), SLUICE_EINVAL);
        assert_int_equal(kr.permits, 0);
        sluice_limit_free(lim);
    }
    o = admin_key_rate_json(NULL, "k", 1, T0);
    assert_true(json_is_null(o));
    json_decref(o);
}

static int rate_doc(void *arg)
{
    json_t *o = admin_key_rate_json(arg, "acme", 4, T0 + SEC);

    if (!o)
        return SLUICE_ENOMEM;
    json_decref(o);
    return 0;
}

static void test_rate_oom(void **unused)
{
    sluice_limit *lim = adaptive_20();

    (void)unused;
    assert_int_equal(sluice_limit_backoff(lim, "acme", 4, 2 * SEC, T0, NULL), SLUICE_OK);
    assert_true(oom_sweep(rate_doc, lim, 200) > 1);
    sluice_limit_free(lim);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rate_backoff_and_recovery),
        cmocka_unit_test(test_rate_not_adaptive),
        cmocka_unit_test(test_rate_other_kinds),
        cmocka_unit_test(test_rate_oom),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
