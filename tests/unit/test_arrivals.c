/* SPDX-License-Identifier: MIT */
/*
 * Tests of the arrivals grammar of `sluice simulate --arrivals`: each group form, spreading,
 * sorting of overlapping groups, the bounds, every malformed spec with its message, random specs
 * against the spacing invariant, and an out-of-memory sweep.
 *
 * arrivals.c belongs to the sluice binary, not to libsluice, so it is compiled into this test
 * directly.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "cli/sim/arrivals.c"
#include "sluice/error.h"
#include "testutil.h"

#define MS  SLUICE_NS_PER_MS
#define SEC SLUICE_NS_PER_SEC
#define MIN (60 * SEC)
#define DAY (86400 * SEC)

static arrivals *parse_ok(const char *text)
{
    arrivals *a = NULL;
    char msg[256] = "junk";
    int rc = arrivals_parse(text, &a, msg, sizeof(msg));

    if (rc != 0)
        fail_msg("\"%s\": %s", text, msg);
    assert_string_equal(msg, "");
    assert_non_null(a);
    return a;
}

/* Checks that text gives exactly the n offsets in want. */
static void expect(const char *text, const int64_t *want, size_t n)
{
    arrivals *a = parse_ok(text);

    assert_int_equal(a->n, n);
    for (size_t i = 0; i < n; i++) {
        if (a->at_ns[i] != want[i])
            fail_msg("\"%s\": arrival %zu at %lld, wanted %lld", text, i, (long long)a->at_ns[i],
                     (long long)want[i]);
    }
    arrivals_free(a);
}

static void test_forms(void **unused)
{
    (void)unused;
    expect("1", (const int64_t[]){0}, 1);
    expect("3", (const int64_t[]){0, 0, 0}, 3);
    expect("2@0", (const int64_t[]){0, 0}, 2);
    expect("2@000", (const int64_t[]){0, 0}, 2);
    expect("2@90s", (const int64_t[]){90 * SEC, 90 * SEC}, 2);
    expect("1@250ms", (const int64_t[]){250 * MS}, 1);
    expect("1@2h", (const int64_t[]){2 * 60 * MIN}, 1);
    expect("4@0..1s", (const int64_t[]){0, 250 * MS, 500 * MS, 750 * MS}, 4);
    expect("4@1s..2s", (const int64_t[]){SEC, 1250 * MS, 1500 * MS, 1750 * MS}, 4);
    expect("3@0..1s", (const int64_t[]){0, 333333333, 666666666}, 3);
    expect("1@5s..10s", (const int64_t[]){5 * SEC}, 1);
    expect("3@5s..5s", (const int64_t[]){5 * SEC, 5 * SEC, 5 * SEC}, 3);
    expect("3@0..3ns", (const int64_t[]){0, 1, 2}, 3);
    expect("4@0..2ns", (const int64_t[]){0, 0, 1, 1}, 4);
    /* A start without a unit borrows the end's. */
    expect("2@10..20s", (const int64_t[]){10 * SEC, 15 * SEC}, 2);
    expect("2@1..3m", (const int64_t[]){MIN, 2 * MIN}, 2);
    /* Several groups, overlapping and out of order: sorted. */
    expect("1@5s,2,1@1s", (const int64_t[]){0, 0, SEC, 5 * SEC}, 4);
    expect("2@0..2s,2@500ms", (const int64_t[]){0, 500 * MS, 500 * MS, SEC}, 4);
}

static void test_issue_example(void **unused)
{
    arrivals *a;
    size_t at0 = 0, at90 = 0;

    (void)unused;
    a = parse_ok("20@0,5@90s,300@0..60s");
    assert_int_equal(a->n, 325);
    for (size_t i = 0; i < a->n; i++) {
        if (i > 0)
            assert_true(a->at_ns[i - 1] <= a->at_ns[i]);
        at0 += a->at_ns[i] == 0;
        at90 += a->at_ns[i] == 90 * SEC;
        assert_true(a->at_ns[i] < 60 * SEC || a->at_ns[i] == 90 * SEC);
    }
    assert_int_equal(at0, 21); /* the 20 at once and the first of the spread */
    assert_int_equal(at90, 5);
    /* The spread: one every 200 ms. */
    assert_int_equal(a->at_ns[20], 0);
    assert_int_equal(a->at_ns[21], 200 * MS);
    assert_int_equal(a->at_ns[319], 59800 * MS);
    arrivals_free(a);
}

static void test_bounds(void **unused)
{
    arrivals *a;
    char msg[256];

    (void)unused;
    a = parse_ok("1000000");
    assert_int_equal(a->n, ARRIVALS_MAX);
    arrivals_free(a);
    a = parse_ok("500000,500000@1s..2s");
    assert_int_equal(a->n, ARRIVALS_MAX);
    assert_int_equal(a->at_ns[ARRIVALS_MAX - 1], 2 * SEC - 2000);
    arrivals_free(a);
    a = parse_ok("1@3650d");
    assert_int_equal(a->at_ns[0], 3650 * DAY);
    arrivals_free(a);

    assert_int_equal(arrivals_parse("500000,500001", &a, msg, sizeof(msg)), SLUICE_ERANGE);
    assert_string_equal(msg, "too many arrivals: more than 1000000 requests in total");
    assert_null(a);
    assert_int_equal(arrivals_parse("1@3651d", &a, msg, sizeof(msg)), SLUICE_ERANGE);
    assert_int_equal(arrivals_parse("1@0..3651d", &a, msg, sizeof(msg)), SLUICE_ERANGE);
    assert_int_equal(arrivals_parse("1@9999999999999999999999d", &a, msg, sizeof(msg)),
                     SLUICE_ERANGE);
    assert_int_equal(arrivals_parse("99999999999999999999999", &a, msg, sizeof(msg)),
                     SLUICE_ERANGE);
    assert_null(a);
}

static void test_malformed(void **unused)
{
    static const struct {
        const char *text;
        int rc;
        const char *msg;
    } cases[] = {
        {"", SLUICE_EPARSE,
         "empty arrivals: expected N, N@T or N@T1..T2, e.g. 20@0,5@90s,300@0..60s"},
        {"x", SLUICE_EPARSE, "bad count \"x\" in \"x\": expected a whole number"},
        {"-5", SLUICE_EPARSE, "bad count \"-5\" in \"-5\": expected a whole number"},
        {"@5s", SLUICE_EPARSE, "bad count \"\" in \"@5s\": expected a whole number"},
        {"5s", SLUICE_EPARSE, "bad count \"5s\" in \"5s\": expected a whole number"},
        {"0", SLUICE_EINVAL, "bad count \"0\" in \"0\": must be at least 1"},
        {"3,0@1s", SLUICE_EINVAL, "bad count \"0\" in \"0@1s\": must be at least 1"},
        {"2000000", SLUICE_ERANGE,
         "count \"2000000\" in \"2000000\" is more than 1000000 requests"},
        {"5,,3", SLUICE_EPARSE,
         "empty item in \"5,,3\": expected N, N@T or N@T1..T2, e.g. 20@0,5@90s,300@0..60s"},
        {"5,", SLUICE_EPARSE,
         "empty item in \"5,\": expected N, N@T or N@T1..T2, e.g. 20@0,5@90s,300@0..60s"},
        {"5@", SLUICE_EPARSE,
         "bad time \"\" in \"5@\": expected 0 or a number with a unit ns, us, ms, s, m, h or d"},
        {"5@5", SLUICE_EPARSE,
         "bad time \"5\" in \"5@5\": expected 0 or a number with a unit ns, us, ms, s, m, h or d"},
        {"5@5x", SLUICE_EPARSE,
         "bad time \"5x\" in \"5@5x\": expected 0 or a number with a unit ns, us, ms, s, m, h or "
         "d"},
        {"5@-1s", SLUICE_EPARSE,
         "bad time \"-1s\" in \"5@-1s\": expected 0 or a number with a unit ns, us, ms, s, m, h "
         "or d"},
        {"5@1s@2s", SLUICE_EPARSE,
         "bad time \"1s@2s\" in \"5@1s@2s\": expected 0 or a number with a unit ns, us, ms, s, m, "
         "h or d"},
        {"5@1s..", SLUICE_EPARSE,
         "bad time \"\" in \"5@1s..\": expected 0 or a number with a unit ns, us, ms, s, m, h or "
         "d"},
        {"5@..1s", SLUICE_EPARSE,
         "bad time \"\" in \"5@..1s\": expected 0 or a number with a unit ns, us, ms, s, m, h or "
         "d"},
        {"5@1s...2s", SLUICE_EPARSE,
         "bad time \".2s\" in \"5@1s...2s\": expected 0 or a number with a unit ns, us, ms, s, m, "
         "h or d"},
        {"5@10..0", SLUICE_EPARSE,
         "bad time \"10\" in \"5@10..0\": expected 0 or a number with a unit ns, us, ms, s, m, h "
         "or d"},
        {"5@60s..0", SLUICE_EINVAL, "time range \"60s..0\" in \"5@60s..0\" runs backwards"},
        {"5@2m..1m", SLUICE_EINVAL, "time range \"2m..1m\" in \"5@2m..1m\" runs backwards"},
        {"1@3651d", SLUICE_ERANGE, "time \"3651d\" in \"1@3651d\" is past the limit of 3650d"},
        {"5@1s\n", SLUICE_EPARSE,
         "bad time \"1s\\x0a\" in \"5@1s\\x0a\": expected 0 or a number with a unit ns, us, ms, "
         "s, m, h or d"},
    };
    arrivals *a;
    char msg[256];

    (void)unused;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        a = (arrivals *)msg; /* must be reset to NULL */
        int rc = arrivals_parse(cases[i].text, &a, msg, sizeof(msg));
        if (rc != cases[i].rc || strcmp(msg, cases[i].msg) != 0)
            fail_msg("case %zu \"%s\": rc %d, message\n  %s\nwanted %d,\n  %s", i, cases[i].text,
                     rc, msg, cases[i].rc, cases[i].msg);
        assert_null(a);
    }
    assert_int_equal(arrivals_parse(NULL, &a, msg, sizeof(msg)), SLUICE_EINVAL);
    assert_int_equal(arrivals_parse("1", NULL, msg, sizeof(msg)), SLUICE_EINVAL);
    assert_int_equal(arrivals_parse("x", &a, NULL, 0), SLUICE_EPARSE);
    arrivals_free(NULL);
}

/* Property: random groups laid out one after another come out in that order, each starting at its
 * start, staying before its end, with gaps of floor or ceil of span / N. */
static void test_spread_property(void **unused)
{
    test_rng r;

    (void)unused;
    rng_seed(&r, 0xa771);
    for (int iter = 0; iter < 2000; iter++) {
        char text[1024];
        int64_t from[8], to[8], cnt[8];
        int groups = (int)rng_range(&r, 1, 8);
        size_t len = 0, total = 0, k = 0;
        int64_t t = 0;
        arrivals *a;

        for (int g = 0; g < groups; g++) {
            from[g] = t + rng_range(&r, 0, 5) * SEC;
            to[g] = from[g] + (rng_range(&r, 0, 3) ? rng_range(&r, 0, 100000) * MS : 0);
            cnt[g] = rng_range(&r, 1, 500);
            t = to[g] + MS;
            len += (size_t)snprintf(text + len, sizeof(text) - len, "%s%lld@%lldms..%lldms",
                                    g ? "," : "", (long long)cnt[g], (long long)(from[g] / MS),
                                    (long long)(to[g] / MS));
            total += (size_t)cnt[g];
        }
        a = parse_ok(text);
        assert_int_equal(a->n, total);
        for (int g = 0; g < groups; g++) {
            int64_t span = to[g] - from[g];
            int64_t lo = span / cnt[g], hi = lo + (span % cnt[g] != 0);

            assert_int_equal(a->at_ns[k], from[g]);
            for (int64_t i = 1; i < cnt[g]; i++) {
                int64_t gap = a->at_ns[k + (size_t)i] - a->at_ns[k + (size_t)i - 1];
                assert_true(gap >= lo && gap <= hi);
            }
            if (span > 0)
                assert_true(a->at_ns[k + (size_t)cnt[g] - 1] < to[g]);
            k += (size_t)cnt[g];
        }
        arrivals_free(a);
    }
}

static int oom_body(void *arg)
{
    arrivals *a = NULL;
    char msg[128];
    int rc = arrivals_parse((const char *)arg, &a, msg, sizeof(msg));

    if (rc == 0) {
        assert_int_equal(a->n, 12);
        arrivals_free(a);
    } else {
        assert_null(a);
        assert_string_equal(msg, "out of memory");
    }
    return rc;
}

static void test_oom(void **unused)
{
    (void)unused;
    assert_int_equal(oom_sweep(oom_body, (void *)"5@1s,3,4@0..1m", 100), 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forms),           cmocka_unit_test(test_issue_example),
        cmocka_unit_test(test_bounds),          cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_spread_property), cmocka_unit_test(test_oom),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
