/* SPDX-License-Identifier: MIT */
/*
 * Tests of limit specs: durations, every kind and option, the canonical form and its round trip
 * (hand-picked and random definitions), every kind of malformed spec with its exact message, and
 * random junk, which must fail cleanly with a one-line message or round-trip.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "sluice/error.h"
#include "sluice/limit.h"
#include "sluice/spec.h"
#include "testutil.h"

#define MS   SLUICE_NS_PER_MS
#define SEC  SLUICE_NS_PER_SEC
#define MIN  (60 * SEC)
#define HOUR (60 * MIN)
#define DAY  (24 * HOUR)

static int64_t dur(const char *s)
{
    int64_t ns = -1;

    assert_int_equal(sluice_spec_parse_duration(s, strlen(s), &ns), 0);
    return ns;
}

static void test_duration_valid(void **unused)
{
    (void)unused;
    assert_int_equal(dur("0s"), 0);
    assert_int_equal(dur("0ns"), 0);
    assert_int_equal(dur("1ns"), 1);
    assert_int_equal(dur("7us"), 7000);
    assert_int_equal(dur("250ms"), 250 * MS);
    assert_int_equal(dur("5s"), 5 * SEC);
    assert_int_equal(dur("1m"), MIN);
    assert_int_equal(dur("90m"), 90 * MIN);
    assert_int_equal(dur("2h"), 2 * HOUR);
    assert_int_equal(dur("7d"), 7 * DAY);
    assert_int_equal(dur("007s"), 7 * SEC);
    assert_int_equal(dur("9223372036854775807ns"), INT64_MAX);
    assert_int_equal(dur("106751d"), 106751 * DAY);
}

static void test_duration_invalid(void **unused)
{
    static const struct {
        const char *text;
        int rc;
    } cases[] = {
        {"", SLUICE_EPARSE},
        {"5", SLUICE_EPARSE},
        {"s", SLUICE_EPARSE},
        {"5x", SLUICE_EPARSE},
        {"-5s", SLUICE_EPARSE},
        {"+5s", SLUICE_EPARSE},
        {" 5s", SLUICE_EPARSE},
        {"5s ", SLUICE_EPARSE},
        {"5 s", SLUICE_EPARSE},
        {"1.5s", SLUICE_EPARSE},
        {"5S", SLUICE_EPARSE},
        {"5sec", SLUICE_EPARSE},
        {"5ss", SLUICE_EPARSE},
        {"5s5", SLUICE_EPARSE},
        {"5min", SLUICE_EPARSE},
        {"106752d", SLUICE_ERANGE},
        {"9223372036854775808ns", SLUICE_ERANGE},
        {"99999999999999999999999s", SLUICE_ERANGE},
    };
    int64_t ns;

    (void)unused;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ns = 12345;
        assert_int_equal(sluice_spec_parse_duration(cases[i].text, strlen(cases[i].text), &ns),
                         cases[i].rc);
        assert_int_equal(ns, 0);
    }
    assert_int_equal(sluice_spec_parse_duration(NULL, 0, &ns), SLUICE_EINVAL);
    assert_int_equal(sluice_spec_parse_duration("5s", 2, NULL), SLUICE_EINVAL);
}

/* Only len bytes are read: the text needs no NUL and what follows does not matter. */
static void test_duration_reads_len_bytes(void **unused)
{
    int64_t ns;

    (void)unused;
    assert_int_equal(sluice_spec_parse_duration("5sXYZ", 2, &ns), 0);
    assert_int_equal(ns, 5 * SEC);
    assert_int_equal(sluice_spec_parse_duration("250ms,burst", 5, &ns), 0);
    assert_int_equal(ns, 250 * MS);
    assert_int_equal(sluice_spec_parse_duration("5ms", 2, &ns), 0);
    assert_int_equal(ns, 5 * MIN);
    assert_int_equal(sluice_spec_parse_duration("5ms", 1, &ns), SLUICE_EPARSE);
}

static void test_duration_format(void **unused)
{
    static const struct {
        int64_t ns;
        const char *text;
    } cases[] = {
        {0, "0s"},
        {1, "1ns"},
        {1500, "1500ns"},
        {2000, "2us"},
        {250 * MS, "250ms"},
        {SEC, "1s"},
        {90 * SEC, "90s"},
        {MIN, "1m"},
        {HOUR, "1h"},
        {36 * HOUR, "36h"},
        {DAY, "1d"},
        {366 * DAY, "366d"},
        {INT64_MAX, "9223372036854775807ns"},
    };
    char buf[SLUICE_SPEC_DURATION_MAX_LEN];

    (void)unused;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(sluice_spec_format_duration(cases[i].ns, buf, sizeof(buf)), 0);
        assert_string_equal(buf, cases[i].text);
        assert_int_equal(dur(buf), cases[i].ns);
    }
    assert_int_equal(sluice_spec_format_duration(-1, buf, sizeof(buf)), SLUICE_EINVAL);
    assert_int_equal(sluice_spec_format_duration(250 * MS, buf, 5), SLUICE_ERANGE);
    assert_string_equal(buf, "");
    assert_int_equal(sluice_spec_format_duration(250 * MS, buf, 6), 0);
    assert_string_equal(buf, "250ms");
}

/* Parses a spec that must be valid. */
static sluice_limit_def parse_ok(const char *text)
{
    sluice_limit_def def;
    char msg[256] = "junk";
    int rc = sluice_spec_parse_limit(text, &def, msg, sizeof(msg));

    if (rc != 0)
        fail_msg("\"%s\": %s", text, msg);
    assert_string_equal(msg, "");
    return def;
}

static void test_every_kind(void **unused)
{
    sluice_limit_def d, dflt;

    (void)unused;
    d = parse_ok("rate=15/1m");
    sluice_limit_def_init(&dflt, SLUICE_RATE);
    assert_int_equal(d.kind, SLUICE_RATE);
    assert_int_equal(d.limit, 15);
    assert_int_equal(d.period_ns, MIN);
    assert_int_equal(d.burst, 0);
    assert_int_equal(d.start_empty, 0);
    assert_int_equal(d.horizon_ns, dflt.horizon_ns);
    assert_int_equal(d.max_keys, dflt.max_keys);
    assert_int_equal(d.key_overflow, dflt.key_overflow);
    assert_int_equal(d.max_key_len, dflt.max_key_len);

    d = parse_ok("rate=100/s");
    assert_int_equal(d.period_ns, SEC);
    d = parse_ok("rate=3/250ms");
    assert_int_equal(d.period_ns, 250 * MS);

    d = parse_ok("window=12/5s");
    assert_int_equal(d.kind, SLUICE_WINDOW);
    assert_int_equal(d.limit, 12);
    assert_int_equal(d.period_ns, 5 * SEC);

    d = parse_ok("sliding=100/1h");
    assert_int_equal(d.kind, SLUICE_SLIDING);
    assert_int_equal(d.limit, 100);
    assert_int_equal(d.period_ns, HOUR);

    d = parse_ok("concurrency=10");
    assert_int_equal(d.kind, SLUICE_CONCURRENCY);
    assert_int_equal(d.limit, 10);
    assert_int_equal(d.ttl_ns, SLUICE_DEFAULT_TTL_NS);

    d = parse_ok("quota=1000/day");
    assert_int_equal(d.kind, SLUICE_QUOTA);
    assert_int_equal(d.limit, 1000);
    assert_int_equal(d.calendar, SLUICE_CAL_DAY);
    d = parse_ok("quota=50000/month");
    assert_int_equal(d.calendar, SLUICE_CAL_MONTH);
    d = parse_ok("quota=7/total");
    assert_int_equal(d.calendar, SLUICE_CAL_NONE);
}

static void test_every_option(void **unused)
{
    sluice_limit_def d;

    (void)unused;
    d = parse_ok("rate=15/1m,burst=1");
    assert_int_equal(d.burst, 1);
    d = parse_ok("rate=15/1m,start_empty");
    assert_int_equal(d.start_empty, 1);
    d = parse_ok("rate=15/1m,horizon=10m");
    assert_int_equal(d.horizon_ns, 10 * MIN);
    d = parse_ok("concurrency=3,ttl=90s");
    assert_int_equal(d.ttl_ns, 90 * SEC);
    d = parse_ok("window=1/1s,max_keys=42");
    assert_int_equal(d.max_keys, 42);
    d = parse_ok("sliding=1/1s,keys_overflow=allow");
    assert_int_equal(d.key_overflow, SLUICE_KEYS_ALLOW);
    d = parse_ok("quota=1/day,keys_overflow=refuse");
    assert_int_equal(d.key_overflow, SLUICE_KEYS_REFUSE);
    d = parse_ok("concurrency=1,max_key_len=64");
    assert_int_equal(d.max_key_len, 64);

    /* All at once, in any order. */
    d = parse_ok("rate=20/1s,max_key_len=100,keys_overflow=allow,max_keys=7,horizon=5s,"
                 "start_empty,burst=5");
    assert_int_equal(d.limit, 20);
    assert_int_equal(d.period_ns, SEC);
    assert_int_equal(d.burst, 5);
    assert_int_equal(d.start_empty, 1);
    assert_int_equal(d.horizon_ns, 5 * SEC);
    assert_int_equal(d.max_keys, 7);
    assert_int_equal(d.key_overflow, SLUICE_KEYS_ALLOW);
    assert_int_equal(d.max_key_len, 100);
    d = parse_ok("concurrency=4,ttl=1m,max_keys=9,keys_overflow=allow,max_key_len=32");
    assert_int_equal(d.ttl_ns, MIN);
    assert_int_equal(d.max_keys, 9);
}

static void format_is(const sluice_limit_def *def, const char *want)
{
    char buf[SLUICE_SPEC_MAX_LEN];

    assert_int_equal(sluice_spec_format_limit(def, buf, sizeof(buf)), 0);
    assert_string_equal(buf, want);
}

/* Specs already canonical come back unchanged; others come back in canonical form. */
static void test_canonical_form(void **unused)
{
    static const char *canonical[] = {
        "rate=15/1m",
        "rate=15/1m,burst=15",
        "rate=15/1m,burst=1",
        "rate=15/1m,start_empty",
        "rate=10/1s,burst=3,start_empty,horizon=10m,max_keys=5,keys_overflow=allow,"
        "max_key_len=64",
        "rate=1000000000/366d",
        "rate=7/1500ms",
        "rate=1/1ns",
        "window=12/5s",
        "window=12/5s,max_keys=10",
        "sliding=100/1h",
        "sliding=100/1h,keys_overflow=allow",
        "concurrency=10",
        "concurrency=10,ttl=5m",
        "concurrency=10,ttl=1ns,max_key_len=1000",
        "quota=1000/day",
        "quota=50000/month",
        "quota=7/total",
        "quota=7/total,max_keys=1",
    };
    static const struct {
        const char *in, *out;
    } rewritten[] = {
        {"rate=15/60s", "rate=15/1m"},
        {"rate=15/m", "rate=15/1m"},
        {"rate=100/s", "rate=100/1s"},
        {"rate=5/1000ms", "rate=5/1s"},
        {"rate=5/24h", "rate=5/1d"},
        {"rate=5/1s,horizon=1h", "rate=5/1s"},
        {"rate=5/1s,horizon=3600s", "rate=5/1s"},
        {"rate=5/1s,keys_overflow=refuse", "rate=5/1s"},
        {"rate=5/1s,max_keys=1000000", "rate=5/1s"},
        {"rate=5/1s,max_key_len=256", "rate=5/1s"},
        {"rate=0010/1s", "rate=10/1s"},
        {"rate=1/1s,max_keys=2,start_empty,burst=3", "rate=1/1s,burst=3,start_empty,max_keys=2"},
        {"concurrency=2,ttl=30s", "concurrency=2"},
        {"concurrency=2,ttl=30000ms", "concurrency=2"},
        {"window=1/60000ms", "window=1/1m"},
    };
    char msg[256];
    sluice_limit_def d;

    (void)unused;
    for (size_t i = 0; i < sizeof(canonical) / sizeof(canonical[0]); i++) {
        d = parse_ok(canonical[i]);
        format_is(&d, canonical[i]);
    }
    for (size_t i = 0; i < sizeof(rewritten) / sizeof(rewritten[0]); i++) {
        d = parse_ok(rewritten[i].in);
        format_is(&d, rewritten[i].out);
    }
    /* A definition built by hand, fields of other kinds ignored. */
    sluice_limit_def_init(&d, SLUICE_WINDOW);
    d.limit = 12;
    d.period_ns = 5 * SEC;
    d.ttl_ns = 5; /* not a window's field */
    format_is(&d, "window=12/5s");
    assert_int_equal(sluice_spec_parse_limit("window=12/5s", &d, msg, sizeof(msg)), 0);
}

static void test_format_errors(void **unused)
{
    sluice_limit_def d;
    char buf[SLUICE_SPEC_MAX_LEN];
    char small[11];

    (void)unused;
    sluice_limit_def_init(&d, SLUICE_RATE); /* limit 0 does not validate */
    strcpy(buf, "junk");
    assert_int_equal(sluice_spec_format_limit(&d, buf, sizeof(buf)), SLUICE_EINVAL);
    assert_string_equal(buf, "");
    assert_int_equal(sluice_spec_format_limit(NULL, buf, sizeof(buf)), SLUICE_EINVAL);
    assert_int_equal(sluice_spec_format_limit(&d, NULL, 10), SLUICE_EINVAL);

    d = parse_ok("rate=10/1s");
    assert_int_equal(sluice_spec_format_limit(&d, small, sizeof(small)), 0);
    assert_string_equal(small, "rate=10/1s"); /* exactly fits */
    assert_int_equal(sluice_spec_format_limit(&d, small, 10), SLUICE_ERANGE);
    assert_string_equal(small, "");
    assert_int_equal(sluice_spec_format_limit(&d, small, 0), SLUICE_ERANGE);

    /* The longest definition fits in SLUICE_SPEC_MAX_LEN. */
    sluice_limit_def_init(&d, SLUICE_RATE);
    d.limit = SLUICE_MAX_PERMITS;
    d.period_ns = SLUICE_MAX_PERIOD_NS - 1;
    d.burst = 1;
    d.start_empty = 1;
    d.horizon_ns = INT64_MAX;
    d.max_keys = SIZE_MAX;
    d.key_overflow = SLUICE_KEYS_ALLOW;
    d.max_key_len = SIZE_MAX;
    assert_int_equal(sluice_spec_format_limit(&d, buf, sizeof(buf)), 0);
    assert_true(strlen(buf) < 200);
}

/* Every malformed spec, with its code and its exact message. */
static void test_malformed(void **unused)
{
    static const struct {
        const char *text;
        int rc;
        const char *msg;
    } cases[] = {
        {"", SLUICE_EPARSE,
         "empty limit spec: expected rate=N/PERIOD, window=N/PERIOD, sliding=N/PERIOD, "
         "concurrency=N or quota=N/day|month|total"},
        {"rate=10/5x", SLUICE_EPARSE,
         "bad period \"5x\" in \"rate=10/5x\": expected a number with a unit ms, s, m, h or d"},
        {"rate=10/", SLUICE_EPARSE,
         "bad period \"\" in \"rate=10/\": expected a number with a unit ms, s, m, h or d"},
        {"rate=10/-1s", SLUICE_EPARSE,
         "bad period \"-1s\" in \"rate=10/-1s\": expected a number with a unit ms, s, m, h or d"},
        {"rate=10/5", SLUICE_EPARSE,
         "bad period \"5\" in \"rate=10/5\": expected a number with a unit ms, s, m, h or d"},
        {"rate=10/9999999999d", SLUICE_ERANGE,
         "period \"9999999999d\" in \"rate=10/9999999999d\" is too long (at most about 292 "
         "years)"},
        {"rate=10", SLUICE_EPARSE,
         "missing period in \"rate=10\": expected rate=N/PERIOD, e.g. rate=10/1s"},
        {"rate", SLUICE_EPARSE, "missing value in \"rate\": expected rate=N/PERIOD"},
        {"rate=x/1s", SLUICE_EPARSE, "bad count \"x\" in \"rate=x/1s\": expected a whole number"},
        {"rate=-1/1s", SLUICE_EPARSE,
         "bad count \"-1\" in \"rate=-1/1s\": expected a whole number"},
        {"rate=/1s", SLUICE_EPARSE, "bad count \"\" in \"rate=/1s\": expected a whole number"},
        {"rate=1.5/1s", SLUICE_EPARSE,
         "bad count \"1.5\" in \"rate=1.5/1s\": expected a whole number"},
        {"rate=99999999999999999999/1s", SLUICE_ERANGE,
         "count \"99999999999999999999\" in \"rate=99999999999999999999/1s\" is too large"},
        {"foo=1/1s", SLUICE_EPARSE,
         "unknown limit kind \"foo\" in \"foo=1/1s\": expected rate=N/PERIOD, window=N/PERIOD, "
         "sliding=N/PERIOD, concurrency=N or quota=N/day|month|total"},
        {"RATE=1/1s", SLUICE_EPARSE,
         "unknown limit kind \"RATE\" in \"RATE=1/1s\": expected rate=N/PERIOD, "
         "window=N/PERIOD, sliding=N/PERIOD, concurrency=N or quota=N/day|month|total"},
        {"burst=5,rate=1/1s", SLUICE_EPARSE,
         "option \"burst=5\" comes before the limit kind in \"burst=5,rate=1/1s\": a spec starts "
         "with the kind, e.g. rate=10/1s,burst=5"},
        {"concurrency=5/1s", SLUICE_EPARSE,
         "bad count \"5/1s\" in \"concurrency=5/1s\": expected a whole number"},
        {"quota=5", SLUICE_EPARSE,
         "missing period in \"quota=5\": expected quota=N/day|month|total, e.g. quota=1000/day"},
        {"quota=5/week", SLUICE_EPARSE,
         "bad quota period \"week\" in \"quota=5/week\": expected day, month or total"},
        {"quota=5/1d", SLUICE_EPARSE,
         "bad quota period \"1d\" in \"quota=5/1d\": expected day, month or total"},
        {"rate=1/1s,", SLUICE_EPARSE, "empty option in \"rate=1/1s,\""},
        {"rate=1/1s,,burst=2", SLUICE_EPARSE, "empty option in \"rate=1/1s,,burst=2\""},
        {"rate=1/1s,zzz=1", SLUICE_EPARSE,
         "unknown option \"zzz\" in \"rate=1/1s,zzz=1\": a rate limit takes burst=N, "
         "start_empty, horizon=DURATION, max_keys=N, keys_overflow=refuse|allow, max_key_len=N"},
        {"concurrency=1,zzz", SLUICE_EPARSE,
         "unknown option \"zzz\" in \"concurrency=1,zzz\": a concurrency limit takes "
         "ttl=DURATION, max_keys=N, keys_overflow=refuse|allow, max_key_len=N"},
        {"window=1/1s,Burst=2", SLUICE_EPARSE,
         "unknown option \"Burst\" in \"window=1/1s,Burst=2\": a window limit takes "
         "max_keys=N, keys_overflow=refuse|allow, max_key_len=N"},
        {"rate=1/1s, burst=2", SLUICE_EPARSE,
         "unknown option \" burst\" in \"rate=1/1s, burst=2\": a rate limit takes burst=N, "
         "start_empty, horizon=DURATION, max_keys=N, keys_overflow=refuse|allow, max_key_len=N"},
        {"rate=1/1s,window=1/1s", SLUICE_EPARSE,
         "second limit kind \"window=1/1s\" in \"rate=1/1s,window=1/1s\": a spec has exactly "
         "one"},
        {"window=10/1s,burst=2", SLUICE_EPARSE,
         "option \"burst\" does not apply to a window limit, in \"window=10/1s,burst=2\""},
        {"sliding=10/1s,start_empty", SLUICE_EPARSE,
         "option \"start_empty\" does not apply to a sliding limit, in "
         "\"sliding=10/1s,start_empty\""},
        {"quota=1/day,horizon=1s", SLUICE_EPARSE,
         "option \"horizon\" does not apply to a quota limit, in \"quota=1/day,horizon=1s\""},
        {"rate=1/1s,ttl=5s", SLUICE_EPARSE,
         "option \"ttl\" does not apply to a rate limit, in \"rate=1/1s,ttl=5s\""},
        {"concurrency=1,burst=2", SLUICE_EPARSE,
         "option \"burst\" does not apply to a concurrency limit, in \"concurrency=1,burst=2\""},
        {"rate=1/1s,burst=2,burst=3", SLUICE_EPARSE,
         "option \"burst\" given twice in \"rate=1/1s,burst=2,burst=3\""},
        {"rate=1/1s,start_empty,start_empty", SLUICE_EPARSE,
         "option \"start_empty\" given twice in \"rate=1/1s,start_empty,start_empty\""},
        {"rate=1/1s,burst", SLUICE_EPARSE,
         "option \"burst\" needs a value in \"rate=1/1s,burst\": write burst=..."},
        {"rate=1/1s,start_empty=1", SLUICE_EPARSE,
         "option \"start_empty\" takes no value, in \"rate=1/1s,start_empty=1\""},
        {"rate=1/1s,burst=x", SLUICE_EPARSE,
         "bad burst \"x\" in \"rate=1/1s,burst=x\": expected a whole number"},
        {"rate=1/1s,burst=", SLUICE_EPARSE,
         "bad burst \"\" in \"rate=1/1s,burst=\": expected a whole number"},
        {"rate=1/1s,burst=0", SLUICE_EINVAL,
         "bad burst \"0\" in \"rate=1/1s,burst=0\": must be at least 1"},
        {"rate=1/1s,horizon=5", SLUICE_EPARSE,
         "bad horizon \"5\" in \"rate=1/1s,horizon=5\": expected a number with a unit ns, us, "
         "ms, s, m, h or d"},
        {"rate=1/1s,horizon=999999999999d", SLUICE_ERANGE,
         "horizon \"999999999999d\" in \"rate=1/1s,horizon=999999999999d\" is too long (at most "
         "about 292 years)"},
        {"concurrency=1,ttl=1x", SLUICE_EPARSE,
         "bad ttl \"1x\" in \"concurrency=1,ttl=1x\": expected a number with a unit ns, us, ms, "
         "s, m, h or d"},
        {"rate=1/1s,max_keys=-1", SLUICE_EPARSE,
         "bad max_keys \"-1\" in \"rate=1/1s,max_keys=-1\": expected a whole number"},
        {"rate=1/1s,keys_overflow=drop", SLUICE_EPARSE,
         "bad keys_overflow \"drop\" in \"rate=1/1s,keys_overflow=drop\": expected refuse or "
         "allow"},
        {"rate=1/1s,max_key_len=1k", SLUICE_EPARSE,
         "bad max_key_len \"1k\" in \"rate=1/1s,max_key_len=1k\": expected a whole number"},
        /* Well-formed, out of bounds: the validation's code and message. */
        {"rate=0/1s", SLUICE_EINVAL,
         "invalid limit \"rate=0/1s\": limit must be at least 1, got 0"},
        {"rate=1/0s", SLUICE_EINVAL,
         "invalid limit \"rate=1/0s\": period must be at least 1 ns, got 0 ns"},
        {"rate=2000000000/1s", SLUICE_ERANGE,
         "invalid limit \"rate=2000000000/1s\": limit must be at most 1000000000, got "
         "2000000000"},
        {"window=1/367d", SLUICE_ERANGE,
         "invalid limit \"window=1/367d\": period must be at most 366 days, got "
         "31708800000000000 ns"},
        {"concurrency=1,ttl=0s", SLUICE_EINVAL,
         "invalid limit \"concurrency=1,ttl=0s\": lease ttl must be at least 1 ns, got 0"},
        {"rate=1/1s,max_keys=0", SLUICE_EINVAL,
         "invalid limit \"rate=1/1s,max_keys=0\": max_keys must be at least 1, got 0"},
        /* Control bytes are escaped, so the message stays on one line. */
        {"rate=1/1s\nx", SLUICE_EPARSE,
         "bad period \"1s\\x0ax\" in \"rate=1/1s\\x0ax\": expected a number with a unit ms, s, "
         "m, h or d"},
        {"rate=1/1s,\"q\"", SLUICE_EPARSE,
         "unknown option \"\\\"q\\\"\" in \"rate=1/1s,\\\"q\\\"\": a rate limit takes burst=N, "
         "start_empty, horizon=DURATION, max_keys=N, keys_overflow=refuse|allow, max_key_len=N"},
    };
    sluice_limit_def def, zero;
    char msg[512];

    (void)unused;
    memset(&zero, 0, sizeof(zero));
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        memset(&def, 0x5a, sizeof(def));
        int rc = sluice_spec_parse_limit(cases[i].text, &def, msg, sizeof(msg));
        if (rc != cases[i].rc || strcmp(msg, cases[i].msg) != 0)
            fail_msg("case %zu \"%s\": rc %d, message\n  %s\nwanted %d,\n  %s", i, cases[i].text,
                     rc, msg, cases[i].rc, cases[i].msg);
        assert_memory_equal(&def, &zero, sizeof(def));
    }
}

static void test_bad_arguments(void **unused)
{
    sluice_limit_def def;
    char msg[64];

    (void)unused;
    assert_int_equal(sluice_spec_parse_limit(NULL, &def, msg, sizeof(msg)), SLUICE_EINVAL);
    assert_string_equal(msg, "no limit spec given");
    assert_int_equal(sluice_spec_parse_limit("rate=1/1s", NULL, msg, sizeof(msg)), SLUICE_EINVAL);
    /* No message buffer at all, or a tiny one. */
    assert_int_equal(sluice_spec_parse_limit("rate=1/1s", &def, NULL, 0), 0);
    assert_int_equal(sluice_spec_parse_limit("rate=1/5x", &def, NULL, 0), SLUICE_EPARSE);
    msg[1] = 'x';
    assert_int_equal(sluice_spec_parse_limit("rate=1/5x", &def, msg, 1), SLUICE_EPARSE);
    assert_int_equal(msg[0], '\0');
    assert_int_equal(msg[1], 'x');
    assert_int_equal(sluice_spec_parse_limit("rate=1/5x", &def, msg, 8), SLUICE_EPARSE);
    assert_string_equal(msg, "bad per");
}

/* A very long spec is quoted cut short, and the message still ends with the explanation. */
static void test_long_spec_quoted_short(void **unused)
{
    char text[2000], msg[512];
    sluice_limit_def def;
    size_t n;

    (void)unused;
    strcpy(text, "rate=1/1s");
    n = strlen(text);
    while (n + 10 < sizeof(text)) {
        memcpy(text + n, ",burst=1", 8);
        n += 8;
    }
    text[n] = '\0';
    assert_int_equal(sluice_spec_parse_limit(text, &def, msg, sizeof(msg)), SLUICE_EPARSE);
    assert_non_null(strstr(msg, "given twice in \"rate=1/1s,burst=1,burst=1"));
    assert_non_null(strstr(msg, "...\""));
    assert_true(strlen(msg) < 200);
}

/* The same fields as def where they apply to its kind; others hold the kind's defaults. */
static void assert_same_def(const sluice_limit_def *a, const sluice_limit_def *b)
{
    sluice_limit_def dflt;

    sluice_limit_def_init(&dflt, a->kind);
    assert_int_equal(a->kind, b->kind);
    assert_int_equal(a->limit, b->limit);
    assert_int_equal(a->max_keys, b->max_keys);
    assert_int_equal(a->key_overflow, b->key_overflow);
    assert_int_equal(a->max_key_len, b->max_key_len);
    assert_int_equal(a->calendar, b->calendar);
    if (a->kind == SLUICE_RATE || a->kind == SLUICE_WINDOW || a->kind == SLUICE_SLIDING)
        assert_int_equal(a->period_ns, b->period_ns);
    else
        assert_int_equal(b->period_ns, 0);
    if (a->kind == SLUICE_RATE) {
        assert_int_equal(a->burst, b->burst);
        assert_int_equal(a->start_empty != 0, b->start_empty);
        assert_int_equal(a->horizon_ns, b->horizon_ns);
    } else {
        assert_int_equal(b->horizon_ns, dflt.horizon_ns);
    }
    if (a->kind == SLUICE_CONCURRENCY)
        assert_int_equal(a->ttl_ns, b->ttl_ns);
    else
        assert_int_equal(b->ttl_ns, dflt.ttl_ns);
}

static int64_t random_duration(test_rng *r, int64_t max)
{
    static const int64_t scale[] = {1, 1000, MS, SEC, MIN, HOUR, DAY};
    int64_t u = scale[rng_range(r, 0, 6)];

    return rng_range(r, 1, max / u > 1000 ? 1000 : max / u) * u + (rng_range(r, 0, 3) == 0);
}

/* Property: every random definition that validates formats to a spec that parses back to it, and
 * formats again to the same text. */
static void test_round_trip_property(void **unused)
{
    test_rng r;
    int checked = 0;

    (void)unused;
    rng_seed(&r, 0x5eed5bec);
    for (int i = 0; i < 20000; i++) {
        sluice_limit_def d, back;
        sluice_limit_kind kind = (sluice_limit_kind)rng_range(&r, SLUICE_RATE, SLUICE_QUOTA);
        char text[SLUICE_SPEC_MAX_LEN], again[SLUICE_SPEC_MAX_LEN], msg[256];

        sluice_limit_def_init(&d, kind);
        d.limit = rng_range(&r, 1, rng_range(&r, 0, 1) ? 100 : SLUICE_MAX_PERMITS);
        if (kind == SLUICE_RATE || kind == SLUICE_WINDOW || kind == SLUICE_SLIDING)
            d.period_ns = random_duration(&r, SLUICE_MAX_PERIOD_NS);
        if (kind == SLUICE_RATE) {
            if (rng_range(&r, 0, 1))
                d.burst = rng_range(&r, 1, d.limit);
            d.start_empty = (int)rng_range(&r, 0, 1);
            if (rng_range(&r, 0, 1))
                d.horizon_ns = random_duration(&r, 30 * DAY);
        }
        if (kind == SLUICE_CONCURRENCY && rng_range(&r, 0, 1))
            d.ttl_ns = random_duration(&r, DAY);
        if (kind == SLUICE_QUOTA)
            d.calendar = (sluice_calendar)rng_range(&r, SLUICE_CAL_NONE, SLUICE_CAL_MONTH);
        if (rng_range(&r, 0, 1))
            d.max_keys = (size_t)rng_range(&r, 1, INT64_C(1) << 40);
        if (rng_range(&r, 0, 1))
            d.key_overflow = (sluice_key_overflow)rng_range(&r, 0, 1);
        if (rng_range(&r, 0, 1))
            d.max_key_len = (size_t)rng_range(&r, 32, 100000);
        if (sluice_limit_def_validate(&d, msg, sizeof(msg)) != 0)
            continue;
        assert_int_equal(sluice_spec_format_limit(&d, text, sizeof(text)), 0);
        if (sluice_spec_parse_limit(text, &back, msg, sizeof(msg)) != 0)
            fail_msg("\"%s\" does not parse back: %s", text, msg);
        assert_same_def(&d, &back);
        assert_int_equal(sluice_spec_format_limit(&back, again, sizeof(again)), 0);
        assert_string_equal(text, again);
        checked++;
    }
    assert_true(checked > 10000);
}

/* Random junk made of the grammar's own pieces: every spec either fails with a one-line message
 * that fits the buffer, leaving the definition zeroed, or parses and round-trips. */
static void test_junk(void **unused)
{
    static const char *pieces[] = {
        "rate=",
        "window=",
        "sliding=",
        "concurrency=",
        "quota=",
        "burst=",
        "start_empty",
        "horizon=",
        "ttl=",
        "max_keys=",
        "keys_overflow=",
        "max_key_len=",
        "refuse",
        "allow",
        "day",
        "month",
        "total",
        ",",
        ",",
        "/",
        "=",
        "1",
        "10",
        "0",
        "999999999999999999999",
        "s",
        "ms",
        "m",
        "h",
        "d",
        "us",
        "ns",
        "x",
        "-",
        " ",
        "\n",
        "\xff",
        "..",
    };
    size_t npieces = sizeof(pieces) / sizeof(pieces[0]);
    test_rng r;
    int parsed = 0;

    (void)unused;
    rng_seed(&r, 42);
    for (int i = 0; i < 100000; i++) {
        char text[256], msg[160], out[SLUICE_SPEC_MAX_LEN], again[SLUICE_SPEC_MAX_LEN];
        sluice_limit_def d, back, zero;
        size_t n = 0;
        int k = (int)rng_range(&r, 1, 10);

        /* Mostly start with a kind, so that options get exercised too. */
        if (rng_range(&r, 0, 3) != 0) {
            const char *kinds[] = {"rate=10/1s", "window=5/1m", "sliding=3/1h", "concurrency=4",
                                   "quota=9/day"};
            const char *kp = kinds[rng_range(&r, 0, 4)];
            memcpy(text, kp, strlen(kp));
            n = strlen(kp);
        }
        for (int j = 0; j < k; j++) {
            const char *p = pieces[rng_range(&r, 0, (int64_t)npieces - 1)];
            size_t plen = strlen(p);
            if (n + plen >= sizeof(text))
                break;
            memcpy(text + n, p, plen);
            n += plen;
        }
        text[n] = '\0';
        memset(&zero, 0, sizeof(zero));
        if (sluice_spec_parse_limit(text, &d, msg, sizeof(msg)) != 0) {
            assert_true(strlen(msg) > 0);
            assert_true(strlen(msg) < sizeof(msg));
            assert_null(strchr(msg, '\n'));
            assert_memory_equal(&d, &zero, sizeof(d));
            continue;
        }
        parsed++;
        assert_int_equal(sluice_spec_format_limit(&d, out, sizeof(out)), 0);
        assert_int_equal(sluice_spec_parse_limit(out, &back, msg, sizeof(msg)), 0);
        assert_same_def(&d, &back);
        assert_int_equal(sluice_spec_format_limit(&back, again, sizeof(again)), 0);
        assert_string_equal(out, again);
    }
    assert_true(parsed > 100);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_duration_valid),
        cmocka_unit_test(test_duration_invalid),
        cmocka_unit_test(test_duration_reads_len_bytes),
        cmocka_unit_test(test_duration_format),
        cmocka_unit_test(test_every_kind),
        cmocka_unit_test(test_every_option),
        cmocka_unit_test(test_canonical_form),
        cmocka_unit_test(test_format_errors),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_long_spec_quoted_short),
        cmocka_unit_test(test_round_trip_property),
        cmocka_unit_test(test_junk),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
