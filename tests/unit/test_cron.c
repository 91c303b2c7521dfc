/* SPDX-License-Identifier: MIT */
/*
 * Tests of the cron schedule module (src/engine/cron.c): every syntax form and every kind of
 * error with its exact message, next occurrences across minute, hour, day, month, year and
 * leap-day boundaries, the day-of-month / day-of-week OR rule, and a property test against a
 * reference model built on the C library's gmtime_r() instead of cron.c's own calendar
 * arithmetic. Expected times are computed with timegm(), also independent of cron.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "engine/cron.h"
#include "sluice/error.h"
#include "testutil.h"

#define NS   INT64_C(1000000000)
#define MIN  (60 * NS)
#define HOUR (60 * MIN)
#define DAY  (24 * HOUR)

/* All minutes 0-59, hours 0-23, days 1-31, months 1-12 and weekdays 0-6. */
#define ALL_MINUTES ((UINT64_C(1) << 60) - 1)
#define ALL_HOURS   ((UINT32_C(1) << 24) - 1)
#define ALL_MDAYS   UINT32_C(0xfffffffe)
#define ALL_MONTHS  UINT16_C(0x1ffe)
#define ALL_WDAYS   UINT8_C(0x7f)

/* Nanoseconds of a UTC civil time, computed by the C library. */
static int64_t utc(int year, int month, int mday, int hour, int minute)
{
    struct tm tm;

    memset(&tm, 0, sizeof tm);
    tm.tm_year = year - 1900;
    tm.tm_mon = month - 1;
    tm.tm_mday = mday;
    tm.tm_hour = hour;
    tm.tm_min = minute;
    return (int64_t)timegm(&tm) * NS;
}

static cron_schedule parse_ok(const char *text)
{
    cron_schedule s;
    char msg[256];
    int rc = cron_parse(text, &s, msg, sizeof msg);

    if (rc != 0)
        fail_msg("cron_parse(\"%s\") = %d: %s", text, rc, msg);
    assert_string_equal(msg, "");
    return s;
}

static void expect_error(const char *text, const char *want)
{
    cron_schedule s;
    char msg[256];
    int rc;

    memset(&s, 0xab, sizeof s);
    rc = cron_parse(text, &s, msg, sizeof msg);
    if (rc != SLUICE_EPARSE)
        fail_msg("cron_parse(\"%s\") = %d, expected SLUICE_EPARSE", text, rc);
    assert_string_equal(msg, want);
    /* The out-parameter is zeroed on failure. */
    assert_int_equal(s.minutes, 0);
    assert_int_equal(s.hours, 0);
    assert_int_equal(s.mdays, 0);
    assert_int_equal(s.months, 0);
    assert_int_equal(s.wdays, 0);
    assert_int_equal(s.dom_star, 0);
    assert_int_equal(s.dow_star, 0);
}

static int64_t next_ok(const char *text, int64_t after_ns)
{
    cron_schedule s = parse_ok(text);
    int64_t next = -1;
    int rc = cron_next(&s, after_ns, &next);

    if (rc != 0)
        fail_msg("cron_next(\"%s\", %lld) = %d", text, (long long)after_ns, rc);
    assert_true(next > after_ns);
    assert_int_equal(next % MIN, 0);
    assert_true(cron_matches(&s, next));
    return next;
}

static void expect_next(const char *text, int64_t after_ns, int64_t want_ns)
{
    int64_t got = next_ok(text, after_ns);

    if (got != want_ns)
        fail_msg("cron_next(\"%s\", %lld) = %lld, expected %lld", text, (long long)after_ns,
                 (long long)got, (long long)want_ns);
}

static uint64_t bits(const int *v, size_t n)
{
    uint64_t m = 0;

    for (size_t i = 0; i < n; i++)
        m |= UINT64_C(1) << v[i];
    return m;
}
#define BITS(...) bits((const int[]){__VA_ARGS__}, sizeof((const int[]){__VA_ARGS__}) / sizeof(int))

/* --- parsing ------------------------------------------------------------------------------- */

static void test_parse_all_stars(void **state)
{
    cron_schedule s = parse_ok("* * * * *");

    (void)state;
    assert_int_equal(s.minutes, ALL_MINUTES);
    assert_int_equal(s.hours, ALL_HOURS);
    assert_int_equal(s.mdays, ALL_MDAYS);
    assert_int_equal(s.months, ALL_MONTHS);
    assert_int_equal(s.wdays, ALL_WDAYS);
    assert_int_equal(s.dom_star, 1);
    assert_int_equal(s.dow_star, 1);
}

static void test_parse_numbers_ranges_lists(void **state)
{
    cron_schedule s = parse_ok("5 0,12 1-3 6 2");

    (void)state;
    assert_int_equal(s.minutes, BITS(5));
    assert_int_equal(s.hours, BITS(0, 12));
    assert_int_equal(s.mdays, BITS(1, 2, 3));
    assert_int_equal(s.months, BITS(6));
    assert_int_equal(s.wdays, BITS(2));
    assert_int_equal(s.dom_star, 0);
    assert_int_equal(s.dow_star, 0);

    s = parse_ok("0-4,10,58-59 22-23 31 1-12 0-6");
    assert_int_equal(s.minutes, BITS(0, 1, 2, 3, 4, 10, 58, 59));
    assert_int_equal(s.hours, BITS(22, 23));
    assert_int_equal(s.mdays, BITS(31));
    assert_int_equal(s.months, ALL_MONTHS);
    assert_int_equal(s.wdays, ALL_WDAYS);

    /* Overlapping and repeated elements are a union. */
    s = parse_ok("1,1,0-2 3,3 4 5 6");
    assert_int_equal(s.minutes, BITS(0, 1, 2));
    assert_int_equal(s.hours, BITS(3));

    /* Leading zeros are plain decimals. */
    s = parse_ok("05 007 09 01 00");
    assert_int_equal(s.minutes, BITS(5));
    assert_int_equal(s.hours, BITS(7));
    assert_int_equal(s.mdays, BITS(9));
    assert_int_equal(s.months, BITS(1));
    assert_int_equal(s.wdays, BITS(0));
}

static void test_parse_steps(void **state)
{
    cron_schedule s = parse_ok("*/15 */6 */10 */4 */2");

    (void)state;
    assert_int_equal(s.minutes, BITS(0, 15, 30, 45));
    assert_int_equal(s.hours, BITS(0, 6, 12, 18));
    assert_int_equal(s.mdays, BITS(1, 11, 21, 31));
    assert_int_equal(s.months, BITS(1, 5, 9));
    assert_int_equal(s.wdays, BITS(0, 2, 4, 6));
    /* A stepped star is restricted (only a lone star is not). */
    assert_int_equal(s.dom_star, 0);
    assert_int_equal(s.dow_star, 0);

    s = parse_ok("10-30/7 9-17/4 2-9/3 3-12/3 1-5/2");
    assert_int_equal(s.minutes, BITS(10, 17, 24));
    assert_int_equal(s.hours, BITS(9, 13, 17));
    assert_int_equal(s.mdays, BITS(2, 5, 8));
    assert_int_equal(s.months, BITS(3, 6, 9, 12));
    assert_int_equal(s.wdays, BITS(1, 3, 5));

    /* `a/n` runs from a to the end of the field. */
    s = parse_ok("5/20 20/2 25/3 11/1 1/2");
    assert_int_equal(s.minutes, BITS(5, 25, 45));
    assert_int_equal(s.hours, BITS(20, 22));
    assert_int_equal(s.mdays, BITS(25, 28, 31));
    assert_int_equal(s.months, BITS(11, 12));
    assert_int_equal(s.wdays, BITS(1, 3, 5));

    /* The largest steps: every field's own size. */
    s = parse_ok("*/60 */24 */31 */12 */7");
    assert_int_equal(s.minutes, BITS(0));
    assert_int_equal(s.hours, BITS(0));
    assert_int_equal(s.mdays, BITS(1));
    assert_int_equal(s.months, BITS(1));
    assert_int_equal(s.wdays, BITS(0));

    /* A step of 1 is every value; steps inside lists. */
    s = parse_ok("*/1 1-3/1,20-23/2 * * *");
    assert_int_equal(s.minutes, ALL_MINUTES);
    assert_int_equal(s.hours, BITS(1, 2, 3, 20, 22));
}

static void test_parse_names(void **state)
{
    cron_schedule s = parse_ok("0 0 * JAN,mar,Dec MON-FRI");

    (void)state;
    assert_int_equal(s.months, BITS(1, 3, 12));
    assert_int_equal(s.wdays, BITS(1, 2, 3, 4, 5));

    s = parse_ok("0 0 * jan-jun/2 sun,SAT");
    assert_int_equal(s.months, BITS(1, 3, 5));
    assert_int_equal(s.wdays, BITS(0, 6));

    s = parse_ok("0 0 * feb-4 tue-5");
    assert_int_equal(s.months, BITS(2, 3, 4));
    assert_int_equal(s.wdays, BITS(2, 3, 4, 5));

    s = parse_ok(
        "0 0 * JAN,FEB,MAR,APR,MAY,JUN,JUL,AUG,SEP,OCT,NOV,DEC SUN,MON,TUE,WED,THU,FRI,SAT");
    assert_int_equal(s.months, ALL_MONTHS);
    assert_int_equal(s.wdays, ALL_WDAYS);
}

static void test_parse_sunday_is_0_and_7(void **state)
{
    cron_schedule s = parse_ok("0 0 * * 7");

    (void)state;
    assert_int_equal(s.wdays, BITS(0));
    s = parse_ok("0 0 * * 0,7");
    assert_int_equal(s.wdays, BITS(0));
    s = parse_ok("0 0 * * 5-7");
    assert_int_equal(s.wdays, BITS(0, 5, 6));
    s = parse_ok("0 0 * * 0-7");
    assert_int_equal(s.wdays, ALL_WDAYS);
    s = parse_ok("0 0 * * FRI-7");
    assert_int_equal(s.wdays, BITS(0, 5, 6));
    s = parse_ok("0 0 * * 7/2");
    assert_int_equal(s.wdays, BITS(0));
}

static void test_parse_blanks(void **state)
{
    cron_schedule a = parse_ok("1 2 3 4 5");
    cron_schedule b = parse_ok("  \t1\t 2   3\t4 5 \n");

    (void)state;
    assert_memory_equal(&a, &b, sizeof a);
}

static void test_parse_macros(void **state)
{
    static const struct {
        const char *macro;
        const char *expansion;
    } cases[] = {
        {"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"},  {"@monthly", "0 0 1 * *"},
        {"@weekly", "0 0 * * 0"}, {"@daily", "0 0 * * *"},     {"@midnight", "0 0 * * *"},
        {"@hourly", "0 * * * *"}, {"  @DAILY\t", "0 0 * * *"}, {"@Hourly", "0 * * * *"},
    };

    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cron_schedule m = parse_ok(cases[i].macro);
        cron_schedule e = parse_ok(cases[i].expansion);

        assert_memory_equal(&m, &e, sizeof m);
    }
}

static void test_parse_errors(void **state)
{
    static const struct {
        const char *text;
        const char *msg;
    } cases[] = {
        {"", "cron \"\": empty schedule"},
        {" \t ", "cron \" \t \": empty schedule"},
        {"* * * *",
         "cron \"* * * *\": expected 5 fields (minute hour day-of-month month day-of-week), got 4"},
        {" * * * * * * ", "cron \"* * * * * *\": expected 5 fields (minute hour day-of-month "
                          "month day-of-week), got 6"},
        {"0", "cron \"0\": expected 5 fields (minute hour day-of-month month day-of-week), got 1"},
        /* Values out of range, per field. */
        {"60 * * * *", "cron field 1 (minute) \"60\": value out of range 0-59"},
        {"0 25 * * *", "cron field 2 (hour) \"25\": value out of range 0-23"},
        {"0 0 0 * *", "cron field 3 (day-of-month) \"0\": value out of range 1-31"},
        {"0 0 32 * *", "cron field 3 (day-of-month) \"32\": value out of range 1-31"},
        {"0 0 * 0 *", "cron field 4 (month) \"0\": value out of range 1-12"},
        {"0 0 * 13 *", "cron field 4 (month) \"13\": value out of range 1-12"},
        {"0 0 * * 8", "cron field 5 (day-of-week) \"8\": value out of range 0-7"},
        {"99999999999999999999 * * * *",
         "cron field 1 (minute) \"99999999999999999999\": value out of range 0-59"},
        /* The message quotes the offending list element. */
        {"1,2,99 * * * *", "cron field 1 (minute) \"99\": value out of range 0-59"},
        {"0 1-24 * * *", "cron field 2 (hour) \"1-24\": value out of range 0-23"},
        /* Lists. */
        {"1,,2 * * * *", "cron field 1 (minute) \"1,,2\": empty list element"},
        {"1, * * * *", "cron field 1 (minute) \"1,\": empty list element"},
        {"0 ,1 * * *", "cron field 2 (hour) \",1\": empty list element"},
        {"0 0 , * *", "cron field 3 (day-of-month) \",\": empty list element"},
        /* Ranges. */
        {"5-1 * * * *",
         "cron field 1 (minute) \"5-1\": range start is after its end (ranges do not wrap)"},
        {"0 0 * * FRI-MON",
         "cron field 5 (day-of-week) \"FRI-MON\": range start is after its end (ranges do not "
         "wrap)"},
        {"5- * * * *", "cron field 1 (minute) \"5-\": expected a number"},
        {"-5 * * * *", "cron field 1 (minute) \"-5\": unexpected character '-', expected a number"},
        {"1-2-3 * * * *",
         "cron field 1 (minute) \"1-2-3\": unexpected character '-', expected ',' or '/'"},
        {"*-5 * * * *",
         "cron field 1 (minute) \"*-5\": unexpected character '-', expected ',' or '/'"},
        /* Steps. */
        {"*/0 * * * *", "cron field 1 (minute) \"*/0\": step out of range 1-60"},
        {"*/61 * * * *", "cron field 1 (minute) \"*/61\": step out of range 1-60"},
        {"0 */25 * * *", "cron field 2 (hour) \"*/25\": step out of range 1-24"},
        {"0 0 1-5/32 * *", "cron field 3 (day-of-month) \"1-5/32\": step out of range 1-31"},
        {"0 0 * */13 *", "cron field 4 (month) \"*/13\": step out of range 1-12"},
        {"0 0 * * */8", "cron field 5 (day-of-week) \"*/8\": step out of range 1-7"},
        {"*/ * * * *", "cron field 1 (minute) \"*/\": expected a step (a number) after '/'"},
        {"*/x * * * *", "cron field 1 (minute) \"*/x\": unexpected character 'x', expected a "
                        "step (a number) after '/'"},
        {"0 0 * * */MON", "cron field 5 (day-of-week) \"*/MON\": unexpected character 'M', "
                          "expected a step (a number) after '/'"},
        {"*/5/2 * * * *",
         "cron field 1 (minute) \"*/5/2\": unexpected character '/', expected ','"},
        {"/5 * * * *", "cron field 1 (minute) \"/5\": unexpected character '/', expected a number"},
        /* Stray characters. */
        {"5x * * * *",
         "cron field 1 (minute) \"5x\": unexpected character 'x', expected ',', '-' or '/'"},
        {"** * * * *",
         "cron field 1 (minute) \"**\": unexpected character '*', expected ',' or '/'"},
        {"0 0 ? * *",
         "cron field 3 (day-of-month) \"?\": unexpected character '?', expected a number"},
        {"0 0 * * ?", "cron field 5 (day-of-week) \"?\": unexpected character '?', expected a "
                      "number or a name"},
        {"0 0 * * L", "cron field 5 (day-of-week) \"L\": unknown name \"L\", expected SUN-SAT"},
        {"\x01 * * * *", "cron field 1 (minute) \"\x01\": unexpected byte 0x01, expected a number"},
        {"\xc3\xa9 * * * *",
         "cron field 1 (minute) \"\xc3\xa9\": unexpected byte 0xc3, expected a number"},
        /* Names. */
        {"JAN * * * *", "cron field 1 (minute) \"JAN\": expected a number, got \"JAN\""},
        {"0 0 1-X * *", "cron field 3 (day-of-month) \"1-X\": expected a number, got \"X\""},
        {"0 0 * FOO *", "cron field 4 (month) \"FOO\": unknown name \"FOO\", expected JAN-DEC"},
        {"0 0 * JANUARY *",
         "cron field 4 (month) \"JANUARY\": unknown name \"JANUARY\", expected JAN-DEC"},
        {"0 0 * * MON-FOO",
         "cron field 5 (day-of-week) \"MON-FOO\": unknown name \"FOO\", expected SUN-SAT"},
        {"0 0 * MON *", "cron field 4 (month) \"MON\": unknown name \"MON\", expected JAN-DEC"},
        {"0 0 * * JAN", "cron field 5 (day-of-week) \"JAN\": unknown name \"JAN\", expected "
                        "SUN-SAT"},
        {"0 0 * * MON1",
         "cron field 5 (day-of-week) \"MON1\": unexpected character '1', expected ',', '-' or "
         "'/'"},
        /* Macros. */
        {"@reboot", "cron \"@reboot\": unknown macro, expected @yearly, @annually, @monthly, "
                    "@weekly, @daily, @midnight or @hourly"},
        {"@", "cron \"@\": unknown macro, expected @yearly, @annually, @monthly, @weekly, "
              "@daily, @midnight or @hourly"},
        {"@daily 5", "cron \"@daily 5\": a macro must stand alone"},
        {"@daily *", "cron \"@daily *\": a macro must stand alone"},
        {"@every 5m", "cron \"@every 5m\": a macro must stand alone"},
    };

    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_error(cases[i].text, cases[i].msg);
}

static void test_parse_error_message_handling(void **state)
{
    cron_schedule s;
    char msg[12];
    char big[512];
    char text[300];
    int rc;

    (void)state;
    /* Truncated to msglen, always NUL-terminated. */
    memset(msg, 'x', sizeof msg);
    rc = cron_parse("0 25 * * *", &s, msg, sizeof msg);
    assert_int_equal(rc, SLUICE_EPARSE);
    assert_string_equal(msg, "cron field ");

    /* No message buffer at all. */
    assert_int_equal(cron_parse("0 25 * * *", &s, NULL, 0), SLUICE_EPARSE);
    msg[0] = 'x';
    assert_int_equal(cron_parse("0 25 * * *", &s, msg, 0), SLUICE_EPARSE);
    assert_int_equal(msg[0], 'x');
    for (size_t len = 1; len < 80; len++) {
        char m[80];

        assert_int_equal(cron_parse("0 25 * * *", &s, m, len), SLUICE_EPARSE);
        assert_true(strlen(m) < len);
    }

    /* Long user text is quoted up to 64 bytes. */
    memset(text, '1', 200);
    memcpy(text + 200, " * * * *", 9);
    rc = cron_parse(text, &s, big, sizeof big);
    assert_int_equal(rc, SLUICE_EPARSE);
    assert_string_equal(big,
                        "cron field 1 (minute) "
                        "\"1111111111111111111111111111111111111111111111111111111111111111\": "
                        "value out of range 0-59");

    /* NULL arguments. */
    assert_int_equal(cron_parse(NULL, &s, big, sizeof big), SLUICE_EINVAL);
    assert_string_equal(big, "cron: no schedule given");
    assert_int_equal(cron_parse("* * * * *", NULL, big, sizeof big), SLUICE_EINVAL);

    /* A success clears the message. */
    strcpy(big, "stale");
    assert_int_equal(cron_parse("* * * * *", &s, big, sizeof big), 0);
    assert_string_equal(big, "");
}

/* --- next occurrence ----------------------------------------------------------------------- */

static void test_next_every_minute(void **state)
{
    int64_t t = utc(2025, 1, 1, 0, 0);

    (void)state;
    /* Strictly after: exactly on a matching minute gives the following one. */
    expect_next("* * * * *", t, t + MIN);
    expect_next("* * * * *", t - 1, t);
    expect_next("* * * * *", t + 1, t + MIN);
    expect_next("* * * * *", t + 30 * NS, t + MIN);
    expect_next("* * * * *", t + MIN - 1, t + MIN);
    /* Year boundary. */
    expect_next("* * * * *", utc(2025, 12, 31, 23, 59) + 59 * NS + 999999999,
                utc(2026, 1, 1, 0, 0));
}

static void test_next_every_15_minutes(void **state)
{
    (void)state;
    expect_next("*/15 * * * *", utc(2025, 5, 6, 10, 7), utc(2025, 5, 6, 10, 15));
    expect_next("*/15 * * * *", utc(2025, 5, 6, 10, 15), utc(2025, 5, 6, 10, 30));
    expect_next("*/15 * * * *", utc(2025, 5, 6, 10, 45), utc(2025, 5, 6, 11, 0));
    expect_next("*/15 * * * *", utc(2025, 5, 6, 23, 50), utc(2025, 5, 7, 0, 0));
    expect_next("*/15 * * * *", utc(2025, 12, 31, 23, 45), utc(2026, 1, 1, 0, 0));

    /* Four a hour, 96 a day, evenly spaced. */
    {
        cron_schedule s = parse_ok("*/15 * * * *");
        int64_t t = utc(2025, 3, 1, 0, 0) - 1;

        for (int i = 0; i < 96 * 3; i++) {
            int64_t next;

            assert_int_equal(cron_next(&s, t, &next), 0);
            assert_int_equal(next, utc(2025, 3, 1, 0, 0) + i * 15 * MIN);
            t = next;
        }
    }
}

static void test_next_hour_day_month_year_boundaries(void **state)
{
    (void)state;
    /* Hour. */
    expect_next("30 * * * *", utc(2025, 5, 6, 10, 30), utc(2025, 5, 6, 11, 30));
    expect_next("30 * * * *", utc(2025, 5, 6, 10, 29), utc(2025, 5, 6, 10, 30));
    expect_next("0,59 * * * *", utc(2025, 5, 6, 10, 0), utc(2025, 5, 6, 10, 59));
    /* Day. */
    expect_next("0 9 * * *", utc(2025, 5, 6, 9, 0), utc(2025, 5, 7, 9, 0));
    expect_next("0 9 * * *", utc(2025, 5, 6, 8, 59), utc(2025, 5, 6, 9, 0));
    expect_next("15 9-17/4 * * *", utc(2025, 5, 6, 17, 15), utc(2025, 5, 7, 9, 15));
    expect_next("15 9-17/4 * * *", utc(2025, 5, 6, 9, 16), utc(2025, 5, 6, 13, 15));
    /* Month: 30- and 31-day months, February in common and leap years. */
    expect_next("0 0 1 * *", utc(2025, 1, 31, 12, 0), utc(2025, 2, 1, 0, 0));
    expect_next("0 0 1 * *", utc(2025, 4, 30, 23, 59), utc(2025, 5, 1, 0, 0));
    expect_next("0 0 31 * *", utc(2025, 4, 1, 0, 0), utc(2025, 5, 31, 0, 0));
    expect_next("0 0 31 * *", utc(2025, 1, 31, 0, 0), utc(2025, 3, 31, 0, 0));
    expect_next("0 0 30 * *", utc(2025, 1, 30, 0, 0), utc(2025, 3, 30, 0, 0));
    expect_next("0 0 30 * *", utc(2024, 1, 30, 0, 0), utc(2024, 3, 30, 0, 0));
    expect_next("0 12 29 * *", utc(2024, 1, 29, 12, 0), utc(2024, 2, 29, 12, 0));
    expect_next("0 12 29 * *", utc(2025, 1, 29, 12, 0), utc(2025, 3, 29, 12, 0));
    expect_next("0 0 * 3 *", utc(2025, 3, 31, 23, 59), utc(2026, 3, 1, 0, 0));
    expect_next("0 0 * FEB,AUG *", utc(2025, 3, 1, 0, 0), utc(2025, 8, 1, 0, 0));
    /* Year. */
    expect_next("0 0 1 1 *", utc(2025, 6, 15, 0, 0), utc(2026, 1, 1, 0, 0));
    expect_next("59 23 31 12 *", utc(2025, 12, 31, 23, 59), utc(2026, 12, 31, 23, 59));
    expect_next("@yearly", utc(2025, 1, 1, 0, 0), utc(2026, 1, 1, 0, 0));
    expect_next("@monthly", utc(2025, 12, 1, 0, 0), utc(2026, 1, 1, 0, 0));
    expect_next("@hourly", utc(2025, 12, 31, 23, 0), utc(2026, 1, 1, 0, 0));
    expect_next("@daily", utc(2025, 2, 28, 0, 0), utc(2025, 3, 1, 0, 0));
    expect_next("@weekly", utc(2025, 6, 1, 0, 0), utc(2025, 6, 8, 0, 0)); /* Sundays */
}

static void test_next_leap_day(void **state)
{
    (void)state;
    expect_next("0 0 29 2 *", utc(2025, 1, 1, 0, 0), utc(2028, 2, 29, 0, 0));
    expect_next("0 0 29 2 *", utc(2028, 2, 29, 0, 0), utc(2032, 2, 29, 0, 0));
    expect_next("0 0 29 2 *", utc(2024, 2, 28, 23, 59), utc(2024, 2, 29, 0, 0));
    /* 2100 is not a leap year (divisible by 100), 2000 is (divisible by 400). */
    expect_next("0 0 29 2 *", utc(2096, 3, 1, 0, 0), utc(2104, 2, 29, 0, 0));
    expect_next("0 0 29 2 *", utc(1997, 1, 1, 0, 0), utc(2000, 2, 29, 0, 0));
    /* Feb 28 and Mar 1 either side of it. */
    expect_next("0 0 28 2 *", utc(2024, 2, 28, 0, 0), utc(2025, 2, 28, 0, 0));
    expect_next("0 0 1 3 *", utc(2024, 2, 29, 0, 0), utc(2024, 3, 1, 0, 0));
}

static void test_next_never(void **state)
{
    static const char *const never[] = {
        "0 0 30 2 *",
        "0 0 31 2 *",
        "0 0 31 4,6,9,11 *",
        "* * 30-31 FEB *",
    };
    cron_schedule s;
    int64_t next = 123;

    (void)state;
    for (size_t i = 0; i < sizeof never / sizeof never[0]; i++) {
        s = parse_ok(never[i]);
        next = 123;
        assert_int_equal(cron_next(&s, utc(2025, 1, 1, 0, 0), &next), SLUICE_ENOTFOUND);
        assert_int_equal(next, 0);
    }
    /* A zeroed schedule never matches. */
    memset(&s, 0, sizeof s);
    assert_int_equal(cron_next(&s, 0, &next), SLUICE_ENOTFOUND);
    assert_false(cron_matches(&s, 0));
    /* But restricting the weekday too makes Feb 30 reachable through the OR rule. */
    expect_next("0 0 30 2 MON", utc(2025, 1, 1, 0, 0), utc(2025, 2, 3, 0, 0));
}

static void test_next_dom_dow_or_rule(void **state)
{
    /* 2025-06-01 is a Sunday; June 13 2025 is a Friday; July 13 2025 is a Sunday. */
    static const int64_t fridays_or_13th[] = {
        6, 13, 20, 27, /* June */
    };
    int64_t t = utc(2025, 6, 1, 0, 0);

    (void)state;
    for (size_t i = 0; i < sizeof fridays_or_13th / sizeof fridays_or_13th[0]; i++) {
        int64_t next = next_ok("0 0 13 * FRI", t);

        assert_int_equal(next, utc(2025, 6, (int)fridays_or_13th[i], 0, 0));
        t = next;
    }
    expect_next("0 0 13 * FRI", utc(2025, 6, 27, 0, 0), utc(2025, 7, 4, 0, 0));
    expect_next("0 0 13 * FRI", utc(2025, 7, 11, 0, 0), utc(2025, 7, 13, 0, 0)); /* a Sunday */
    expect_next("0 0 13 * FRI", utc(2025, 7, 13, 0, 0), utc(2025, 7, 18, 0, 0));

    /* Only one restricted: both must match, i.e. the restricted one decides. */
    expect_next("0 0 13 * *", utc(2025, 6, 1, 0, 0), utc(2025, 6, 13, 0, 0));
    expect_next("0 0 13 * *", utc(2025, 6, 13, 0, 0), utc(2025, 7, 13, 0, 0));
    expect_next("0 0 * * FRI", utc(2025, 6, 13, 0, 0), utc(2025, 6, 20, 0, 0));
    expect_next("0 0 * * 7", utc(2025, 6, 1, 0, 0), utc(2025, 6, 8, 0, 0));
    expect_next("0 0 * * MON-FRI", utc(2025, 6, 6, 0, 0), utc(2025, 6, 9, 0, 0));
    expect_next("0 0 * * SAT,SUN", utc(2025, 6, 2, 0, 0), utc(2025, 6, 7, 0, 0));

    /* A stepped star counts as restricted: every odd day OR every Monday. */
    expect_next("0 0 */2 * MON", utc(2025, 6, 1, 0, 0), utc(2025, 6, 2, 0, 0)); /* Monday */
    expect_next("0 0 */2 * MON", utc(2025, 6, 2, 0, 0), utc(2025, 6, 3, 0, 0)); /* 3rd */
    expect_next("0 0 */2 * MON", utc(2025, 6, 3, 0, 0), utc(2025, 6, 5, 0, 0));

    /* The month still has to match under the OR rule. */
    expect_next("0 0 1 JUL MON", utc(2025, 6, 1, 0, 0), utc(2025, 7, 1, 0, 0));
    expect_next("0 0 1 JUL MON", utc(2025, 7, 1, 0, 0), utc(2025, 7, 7, 0, 0));
}

static void test_next_is_utc(void **state)
{
    /* 02:30 does not exist on 2025-03-30 in Berlin nor on 2025-03-09 in New York, and 01:30
     * happens twice on 2025-11-02 in New York; none of that matters in UTC, whatever TZ says. */
    static const char *const zones[] = {"Europe/Berlin", "America/New_York", "UTC"};
    const char *old = getenv("TZ");
    char *saved = old ? strdup(old) : NULL;

    (void)state;
    for (size_t z = 0; z < sizeof zones / sizeof zones[0]; z++) {
        cron_schedule s = parse_ok("30 2 * * *");
        cron_schedule h = parse_ok("30 1 * * *");
        int64_t t = utc(2025, 3, 1, 0, 0);

        setenv("TZ", zones[z], 1);
        tzset();
        for (int i = 0; i < 40; i++) {
            int64_t next;

            assert_int_equal(cron_next(&s, t, &next), 0);
            assert_int_equal(next, utc(2025, 3, 1, 2, 30) + i * DAY);
            t = next;
        }
        t = utc(2025, 11, 1, 12, 0);
        for (int i = 0; i < 3; i++) {
            int64_t next;

            assert_int_equal(cron_next(&h, t, &next), 0);
            assert_int_equal(next, utc(2025, 11, 2, 1, 30) + i * DAY);
            t = next;
        }
    }
    if (saved) {
        setenv("TZ", saved, 1);
        free(saved);
    } else {
        unsetenv("TZ");
    }
    tzset();
}

static void test_next_extreme_times(void **state)
{
    cron_schedule s = parse_ok("* * * * *");
    int64_t next = 1;

    (void)state;
    /* Before 1970. */
    expect_next("* * * * *", -1, 0);
    expect_next("* * * * *", -MIN, 0);
    expect_next("* * * * *", -MIN - 1, -MIN);
    expect_next("0 0 1 1 *", utc(1969, 6, 1, 0, 0), 0);
    expect_next("0 0 29 2 *", utc(1900, 1, 1, 0, 0), utc(1904, 2, 29, 0, 0));
    expect_next("0 0 * * THU", utc(1969, 12, 31, 0, 0), 0); /* 1970-01-01 was a Thursday */
    expect_next("0 0 * * WED", utc(1969, 12, 31, 0, 0) - 1, utc(1969, 12, 31, 0, 0));

    /* The ends of the int64 range (1677-09-21 to 2262-04-11). */
    assert_int_equal(cron_next(&s, INT64_MIN, &next), 0);
    assert_int_equal(next, (INT64_MIN / MIN) * MIN);
    next = 1;
    assert_int_equal(cron_next(&s, INT64_MAX, &next), SLUICE_ERANGE);
    assert_int_equal(next, 0);
    assert_int_equal(cron_next(&s, (INT64_MAX / MIN) * MIN - 1, &next), 0);
    assert_int_equal(next, (INT64_MAX / MIN) * MIN);
    s = parse_ok("0 0 1 1 *");
    assert_int_equal(cron_next(&s, utc(2262, 1, 1, 0, 0), &next), SLUICE_ERANGE);
}

static void test_next_null_arguments(void **state)
{
    cron_schedule s = parse_ok("* * * * *");
    int64_t next = 5;

    (void)state;
    assert_int_equal(cron_next(NULL, 0, &next), SLUICE_EINVAL);
    assert_int_equal(next, 0);
    assert_int_equal(cron_next(&s, 0, NULL), SLUICE_EINVAL);
    assert_false(cron_matches(NULL, 0));
}

static void test_matches(void **state)
{
    cron_schedule s = parse_ok("*/15 9-17 * * MON-FRI");

    (void)state;
    assert_true(cron_matches(&s, utc(2025, 6, 2, 9, 0)));            /* Monday */
    assert_true(cron_matches(&s, utc(2025, 6, 2, 9, 15) + 59 * NS)); /* any second of it */
    assert_false(cron_matches(&s, utc(2025, 6, 2, 9, 16)));
    assert_false(cron_matches(&s, utc(2025, 6, 2, 18, 0)));
    assert_false(cron_matches(&s, utc(2025, 6, 1, 9, 0))); /* Sunday */
}

static void test_no_allocation(void **state)
{
    cron_schedule s;
    int64_t next;
    char msg[128];

    (void)state;
    oom_install(1);
    assert_int_equal(cron_parse("*/5 1-3 * JAN-MAR MON,FRI", &s, msg, sizeof msg), 0);
    assert_int_equal(cron_parse("0 25 * * *", &s, msg, sizeof msg), SLUICE_EPARSE);
    assert_int_equal(cron_parse("@daily", &s, msg, sizeof msg), 0);
    assert_int_equal(cron_next(&s, 0, &next), 0);
    assert_int_equal(oom_allocations(), 0);
    oom_uninstall();
}

/* --- property test against a reference model --------------------------------------------- */

/* The expected result of parsing generated text, and a matcher built on gmtime_r(). */
struct ref {
    uint64_t mask[5]; /* minute, hour, mday, month, wday (bit 7 folded into 0) */
    int dom_star;
    int dow_star;
};

static const int field_min[5] = {0, 0, 1, 1, 0};
static const int field_imax[5] = {59, 23, 31, 12, 6};
static const char *const ref_months[] = {"jan", "FEB", "Mar", "apr", "MAY", "jun",
                                         "JUL", "aug", "Sep", "OCT", "nov", "DEC"};
static const char *const ref_days[] = {"SUN", "mon", "Tue", "WED", "thu", "Fri", "sat"};

/* Appends one value of field f as text (sometimes a name; when allow7, sometimes 7 for Sunday). */
static void gen_value(test_rng *r, int f, int v, int allow7, char *out, size_t outlen)
{
    size_t n = strlen(out);

    if (f == 3 && rng_range(r, 0, 2) == 0)
        snprintf(out + n, outlen - n, "%s", ref_months[v - 1]);
    else if (f == 4 && rng_range(r, 0, 2) == 0)
        snprintf(out + n, outlen - n, "%s", ref_days[v]);
    else if (f == 4 && v == 0 && allow7 && rng_range(r, 0, 1) == 0)
        snprintf(out + n, outlen - n, "7");
    else
        snprintf(out + n, outlen - n, "%d", v);
}

static void gen_field(test_rng *r, int f, char *out, size_t outlen, struct ref *ref)
{
    int lo = field_min[f], hi = field_imax[f], span = hi - lo + 1;
    int kind = (int)rng_range(r, 0, 9);
    int items = kind < 3 ? 1 : (int)rng_range(r, 1, 3);

    out[0] = '\0';
    if (kind < 3) { /* a lone star, often: the dense case */
        strcat(out, "*");
        ref->mask[f] = 0;
        for (int v = lo; v <= hi; v++)
            ref->mask[f] |= UINT64_C(1) << v;
        if (f == 2)
            ref->dom_star = 1;
        if (f == 4)
            ref->dow_star = 1;
        return;
    }
    for (int i = 0; i < items; i++) {
        int a = (int)rng_range(r, lo, hi), b = (int)rng_range(r, a, hi);
        int step = (int)rng_range(r, 1, span);
        int form = (int)rng_range(r, 0, 4);
        size_t n;

        if (i > 0)
            strcat(out, ",");
        n = strlen(out);
        switch (form) {
        case 0: /* a */
            gen_value(r, f, a, 1, out, outlen);
            b = a;
            step = 1;
            break;
        case 1: /* a-b */
            gen_value(r, f, a, 0, out, outlen);
            strcat(out, "-");
            gen_value(r, f, b, 0, out, outlen);
            step = 1;
            break;
        case 2: /* a-b/n */
            gen_value(r, f, a, 0, out, outlen);
            strcat(out, "-");
            gen_value(r, f, b, 0, out, outlen);
            n = strlen(out);
            snprintf(out + n, outlen - n, "/%d", step);
            break;
        case 3: /* *\/n */
            a = lo;
            b = hi;
            snprintf(out + n, outlen - n, "*/%d", step);
            break;
        default: /* a/n */
            gen_value(r, f, a, 0, out, outlen);
            n = strlen(out);
            snprintf(out + n, outlen - n, "/%d", step);
            b = hi;
            break;
        }
        for (int v = a; v <= b; v += step)
            ref->mask[f] |= UINT64_C(1) << v;
    }
}

static int ref_day(const struct ref *ref, const struct tm *tm)
{
    int dom = (int)((ref->mask[2] >> tm->tm_mday) & 1);
    int dow = (int)((ref->mask[4] >> tm->tm_wday) & 1);

    if (!((ref->mask[3] >> (tm->tm_mon + 1)) & 1))
        return 0;
    return (ref->dom_star || ref->dow_star) ? dom && dow : dom || dow;
}

/* The first matching minute after after_ns, scanning with gmtime_r(); 0 when none in
 * CRON_SEARCH_DAYS days. */
static int ref_next(const struct ref *ref, int64_t after_ns, int64_t *out)
{
    int64_t m = after_ns / MIN - (after_ns % MIN < 0 ? 1 : 0) + 1;
    time_t t = (time_t)(m * 60);
    time_t first_day = t - (((t % 86400) + 86400) % 86400);
    time_t limit = first_day + (time_t)(CRON_SEARCH_DAYS + 1) * 86400;

    while (t < limit) {
        struct tm tm;

        assert_non_null(gmtime_r(&t, &tm));
        if (!ref_day(ref, &tm))
            t += 86400 - tm.tm_hour * 3600 - tm.tm_min * 60;
        else if (!((ref->mask[1] >> tm.tm_hour) & 1))
            t += 3600 - tm.tm_min * 60;
        else if (!((ref->mask[0] >> tm.tm_min) & 1))
            t += 60;
        else {
            *out = (int64_t)t * NS;
            return 1;
        }
    }
    return 0;
}

static void test_property_against_reference(void **state)
{
    test_rng r;

    (void)state;
    rng_seed(&r, 20250601);
    for (int iter = 0; iter < 1500; iter++) {
        struct ref ref;
        char text[512] = "", field[160];
        cron_schedule s;
        char msg[256];
        int64_t after, want = 0, got = 0;
        int found, rc;

        memset(&ref, 0, sizeof ref);
        for (int f = 0; f < 5; f++) {
            gen_field(&r, f, field, sizeof field, &ref);
            if (f > 0)
                strcat(text, rng_range(&r, 0, 3) ? " " : " \t ");
            strcat(text, field);
        }
        rc = cron_parse(text, &s, msg, sizeof msg);
        if (rc != 0)
            fail_msg("iteration %d: cron_parse(\"%s\") = %d: %s", iter, text, rc, msg);
        assert_int_equal(s.minutes, ref.mask[0]);
        assert_int_equal(s.hours, ref.mask[1]);
        assert_int_equal(s.mdays, ref.mask[2]);
        assert_int_equal(s.months, ref.mask[3]);
        assert_int_equal(s.wdays, ref.mask[4]);
        assert_int_equal(s.dom_star, ref.dom_star);
        assert_int_equal(s.dow_star, ref.dow_star);

        /* Any time between 1900 and 2200, to the nanosecond. */
        after = rng_range(&r, INT64_C(-2208988800), INT64_C(7258118400)) * NS +
                rng_range(&r, 0, NS - 1);
        if (rng_range(&r, 0, 3) == 0)
            after -= after % MIN; /* exactly on a minute */
        found = ref_next(&ref, after, &want);
        rc = cron_next(&s, after, &got);
        if (!found) {
            if (rc != SLUICE_ENOTFOUND)
                fail_msg("iteration %d: \"%s\" after %lld: got rc %d next %lld, expected none",
                         iter, text, (long long)after, rc, (long long)got);
            continue;
        }
        if (rc != 0 || got != want)
            fail_msg("iteration %d: \"%s\" after %lld: got rc %d next %lld, expected %lld", iter,
                     text, (long long)after, rc, (long long)got, (long long)want);

        /* cron_matches agrees with the reference on random minutes. */
        for (int k = 0; k < 20; k++) {
            int64_t t = after + rng_range(&r, 0, 400) * DAY + rng_range(&r, 0, DAY);
            time_t sec = (time_t)((t - ((t % MIN) + MIN) % MIN) / NS);
            struct tm tm;
            int expect;

            assert_non_null(gmtime_r(&sec, &tm));
            expect = ref_day(&ref, &tm) && ((ref.mask[1] >> tm.tm_hour) & 1) &&
                     ((ref.mask[0] >> tm.tm_min) & 1);
            assert_int_equal(cron_matches(&s, t), expect);
        }
    }
}

/* Random text from cron's alphabet: cron_parse either accepts it or rejects it with a message,
 * never anything else, and an accepted schedule has a bit in every mask. */
static void test_property_garbage(void **state)
{
    static const char alphabet[] = "0123456789*/-,  \tJANMONsunDECxX@?L#\x01\xff";
    test_rng r;

    (void)state;
    rng_seed(&r, 42);
    for (int iter = 0; iter < 20000; iter++) {
        char text[40], msg[96];
        size_t n = (size_t)rng_range(&r, 0, (int64_t)sizeof text - 1);
        size_t msglen = (size_t)rng_range(&r, 0, (int64_t)sizeof msg);
        cron_schedule s;
        int rc;

        for (size_t i = 0; i < n; i++)
            text[i] = alphabet[rng_range(&r, 0, (int64_t)sizeof alphabet - 2)];
        text[n] = '\0';
        memset(msg, 'z', sizeof msg);
        rc = cron_parse(text, &s, msg, msglen);
        if (msglen > 0)
            assert_true(strlen(msg) < msglen);
        if (rc == 0) {
            assert_true(s.minutes && s.hours && s.mdays && s.months && s.wdays);
            assert_true(msglen == 0 || msg[0] == '\0');
        } else {
            assert_int_equal(rc, SLUICE_EPARSE);
            if (msglen > 4)
                assert_memory_equal(msg, "cron", 4);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_all_stars),
        cmocka_unit_test(test_parse_numbers_ranges_lists),
        cmocka_unit_test(test_parse_steps),
        cmocka_unit_test(test_parse_names),
        cmocka_unit_test(test_parse_sunday_is_0_and_7),
        cmocka_unit_test(test_parse_blanks),
        cmocka_unit_test(test_parse_macros),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_parse_error_message_handling),
        cmocka_unit_test(test_next_every_minute),
        cmocka_unit_test(test_next_every_15_minutes),
        cmocka_unit_test(test_next_hour_day_month_year_boundaries),
        cmocka_unit_test(test_next_leap_day),
        cmocka_unit_test(test_next_never),
        cmocka_unit_test(test_next_dom_dow_or_rule),
        cmocka_unit_test(test_next_is_utc),
        cmocka_unit_test(test_next_extreme_times),
        cmocka_unit_test(test_next_null_arguments),
        cmocka_unit_test(test_matches),
        cmocka_unit_test(test_no_allocation),
        cmocka_unit_test(test_property_against_reference),
        cmocka_unit_test(test_property_garbage),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
