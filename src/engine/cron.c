/* SPDX-License-Identifier: MIT */
/*
 * Cron schedules: parsing the five-field text into bitmasks and finding the next matching minute,
 * in UTC (see cron.h for the grammar and the day-matching rule).
 *
 * The parser is a small hand-written reader, one field at a time; it allocates nothing
 * and reports the first error with the field's number, name and the offending list element.
 * The search walks forward one day at a time (skipping whole months that do not match) using
 * proleptic Gregorian civil-date arithmetic on days since 1970-01-01, so it needs neither the C
 * library's time zone machinery nor time_t: any int64 nanosecond time works, including times
 * before 1970. A search costs at most CRON_SEARCH_DAYS cheap iterations, typically one or two.
 */
#include "engine/cron.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/attr.h"
#include "base/quote.h"
#include "sluice/error.h"

#define NS_PER_MIN  INT64_C(60000000000)
#define MIN_PER_DAY 1440
#define QUOTE_MAX   64     /* bytes of user text quoted in a message */
#define NUMBER_CAP  100000 /* digits beyond this only make a number "too large" */
#define FIELD_COUNT 5
#define DOW_FIELD   4
#define DOM_FIELD   2

static const char *const month_names[] = {"JAN", "FEB", "MAR", "APR", "MAY", "JUN",
                                          "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"};
static const char *const day_names[] = {"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"};

/* One of the five fields. */
struct field_def {
    const char *name;         /* as shown in messages */
    int min;                  /* smallest value accepted */
    int max;                  /* largest value accepted (7 for day-of-week) */
    int imax;                 /* end of the implicit range of `*` and `a/n` (6 for day-of-week) */
    const char *const *names; /* three-letter names, or NULL when the field takes numbers only */
    int nnames;               /* entries in names */
    int name_base;            /* the value of names[0] */
    const char *name_span;    /* "JAN-DEC", for messages */
};

static const struct field_def fields[FIELD_COUNT] = {
    {"minute", 0, 59, 59, NULL, 0, 0, NULL},
    {"hour", 0, 23, 23, NULL, 0, 0, NULL},
    {"day-of-month", 1, 31, 31, NULL, 0, 0, NULL},
    {"month", 1, 12, 12, month_names, 12, 1, "JAN-DEC"},
    {"day-of-week", 0, 7, 6, day_names, 7, 0, "SUN-SAT"},
};

/* Where messages go and which field is being read. */
struct parse_ctx {
    char *msg;
    size_t msglen;
    int field; /* 0-based index into fields */
};

/* Macros and what they stand for. */
static const struct {
    const char *name;
    const char *expansion;
} macros[] = {
    {"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"}, {"@monthly", "0 0 1 * *"},
    {"@weekly", "0 0 * * 0"}, {"@daily", "0 0 * * *"},    {"@midnight", "0 0 * * *"},
    {"@hourly", "0 * * * *"},
};

static int is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static int is_alpha(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* ASCII upper-casing, independent of the locale. */
static char upper(char c)
{
    return (c >= 'a' && c <= 'z') ? (char)(c - 'a' + 'A') : c;
}

static size_t quote_len(size_t n)
{
    return n > QUOTE_MAX ? QUOTE_MAX : n;
}

/* Writes `cron field N (name) "tok": ` and the formatted reason into ctx->msg, when there is
 * one. Returns SLUICE_EPARSE, so callers can `return fail(...)`. */
PRINTF_ATTR(4, 5)
static int fail(const struct parse_ctx *ctx, const char *tok, size_t toklen, const char *fmt, ...)
{
    va_list ap;

    msgf(ctx->msg, ctx->msglen, "cron field %d (%s) \"%.*s\": ", ctx->field + 1,
         fields[ctx->field].name, (int)quote_len(toklen), tok);
    va_start(ap, fmt);
    vmsgf_append(ctx->msg, ctx->msglen, fmt, ap);
    va_end(ap);
    return SLUICE_EPARSE;
}

/* Reports the character at item[pos] (or the end of the element) as unexpected. */
static int fail_char(const struct parse_ctx *ctx, const char *item, size_t n, size_t pos,
                     const char *expected)
{
    unsigned char c;

    if (pos >= n)
        return fail(ctx, item, n, "expected %s", expected);
    c = (unsigned char)item[pos];
    if (c > 0x20 && c < 0x7f)
        return fail(ctx, item, n, "unexpected character '%c', expected %s", c, expected);
    return fail(ctx, item, n, "unexpected byte 0x%02x, expected %s", c, expected);
}

/* Reads a decimal number at item[*pos]; saturates at NUMBER_CAP. Returns 1 when digits were
 * read, 0 otherwise. */
static int read_number(const char *item, size_t n, size_t *pos, int *out)
{
    size_t i = *pos;
    int v = 0;

    while (i < n && is_digit(item[i])) {
        if (v < NUMBER_CAP)
            v = v * 10 + (item[i] - '0');
        i++;
    }
    if (i == *pos)
        return 0;
    *pos = i;
    *out = v;
    return 1;
}

/* Reads one value (number or name) of field f at item[*pos] into *out, checking its range. */
static int read_value(const struct parse_ctx *ctx, const struct field_def *f, const char *item,
                      size_t n, size_t *pos, int *out)
{
    size_t start = *pos;

    if (read_number(item, n, pos, out)) {
        if (*out < f->min || *out > f->max)
            return fail(ctx, item, n, "value out of range %d-%d", f->min, f->max);
        return 0;
    }
    if (start < n && is_alpha(item[start])) {
        size_t end = start;

        while (end < n && is_alpha(item[end]))
            end++;
        if (!f->names)
            return fail(ctx, item, n, "expected a number, got \"%.*s\"",
                        (int)quote_len(end - start), item + start);
        if (end - start == 3) {
            for (int k = 0; k < f->nnames; k++) {
                const char *nm = f->names[k];

                if (upper(item[start]) == nm[0] && upper(item[start + 1]) == nm[1] &&
                    upper(item[start + 2]) == nm[2]) {
                    *out = f->name_base + k;
                    *pos = end;
                    return 0;
                }
            }
        }
        return fail(ctx, item, n, "unknown name \"%.*s\", expected %s", (int)quote_len(end - start),
                    item + start, f->name_span);
    }
    return fail_char(ctx, item, n, start, f->names ? "a number or a name" : "a number");
}

/* Parses one list element of field f and adds its values to *mask. */
static int parse_item(const struct parse_ctx *ctx, const struct field_def *f, const char *item,
                      size_t n, uint64_t *mask)
{
    size_t pos = 0;
    int lo, hi, step = 1, single = 0, stepped = 0;
    int rc;

    if (item[0] == '*') {
        lo = f->min;
        hi = f->imax;
        pos = 1;
    } else {
        rc = read_value(ctx, f, item, n, &pos, &lo);
        if (rc)
            return rc;
        if (pos < n && item[pos] == '-') {
            pos++;
            rc = read_value(ctx, f, item, n, &pos, &hi);
            if (rc)
                return rc;
            if (lo > hi)
                return fail(ctx, item, n, "range start is after its end (ranges do not wrap)");
        } else {
            hi = lo;
            single = 1;
        }
    }
    if (pos < n && item[pos] == '/') {
        int span = f->imax - f->min + 1;

        pos++;
        if (!read_number(item, n, &pos, &step))
            return fail_char(ctx, item, n, pos, "a step (a number) after '/'");
        if (step < 1 || step > span)
            return fail(ctx, item, n, "step out of range 1-%d", span);
        if (single && lo < f->imax)
            hi = f->imax; /* `a/n` means `a-max/n` */
        stepped = 1;
    }
    if (pos != n)
        return fail_char(ctx, item, n, pos,
                         stepped  ? "','"
                         : single ? "',', '-' or '/'"
                                  : "',' or '/'");
    for (int v = lo; v <= hi; v += step)
        *mask |= UINT64_C(1) << v;
    return 0;
}

/* Parses the comma-separated list of field number ctx->field into *mask. */
static int parse_field(const struct parse_ctx *ctx, const char *s, size_t n, uint64_t *mask)
{
    const struct field_def *f = &fields[ctx->field];
    size_t i = 0;

    for (;;) {
        size_t j = i;
        int rc;

        while (j < n && s[j] != ',')
            j++;
        if (j == i)
            return fail(ctx, s, n, "empty list element");
        rc = parse_item(ctx, f, s + i, j - i, mask);
        if (rc)
            return rc;
        if (j >= n)
            return 0;
        i = j + 1;
    }
}

static int set_msg(char *msg, size_t msglen, const char *text, size_t n, const char *reason)
{
    msgf(msg, msglen, "cron \"%.*s\": %s", (int)quote_len(n), text, reason);
    return SLUICE_EPARSE;
}

/* Parses the macro of n bytes at start; end is the end of the trimmed text. */
static int parse_macro(const char *start, size_t n, const char *end, cron_schedule *out, char *msg,
                       size_t msglen)
{
    if (start + n != end)
        return set_msg(msg, msglen, start, (size_t)(end - start), "a macro must stand alone");
    for (size_t k = 0; k < sizeof macros / sizeof macros[0]; k++) {
        const char *name = macros[k].name;
        size_t i;

        if (strlen(name) != n)
            continue;
        for (i = 0; i < n && upper(start[i]) == upper(name[i]); i++)
            ;
        if (i == n)
            return cron_parse(macros[k].expansion, out, msg, msglen);
    }
    return set_msg(msg, msglen, start, n,
                   "unknown macro, expected @yearly, @annually, @monthly, @weekly, @daily, "
                   "@midnight or @hourly");
}

int cron_parse(const char *text, cron_schedule *out, char *msg, size_t msglen)
{
    const char *tok[FIELD_COUNT];
    size_t toklen[FIELD_COUNT];
    uint64_t mask[FIELD_COUNT] = {0};
    struct parse_ctx ctx = {msg, msglen, 0};
    const char *p, *start, *end;
    int nfields = 0;

    if (msg && msglen > 0)
        msg[0] = '\0';
    if (out)
        memset(out, 0, sizeof *out);
    if (!text || !out) {
        msgf(msg, msglen, "cron: no schedule given");
        return SLUICE_EINVAL;
    }

    p = text;
    while (is_blank(*p))
        p++;
    start = p;
    end = start + strlen(start);
    while (end > start && is_blank(end[-1]))
        end--;
    if (start == end)
        return set_msg(msg, msglen, text, strlen(text), "empty schedule");
    if (*start == '@') {
        size_t n = 0;

        while (start[n] && !is_blank(start[n]))
            n++;
        return parse_macro(start, n, end, out, msg, msglen);
    }

    while (p < end) {
        const char *q = p;

        while (q < end && !is_blank(*q))
            q++;
        if (nfields < FIELD_COUNT) {
            tok[nfields] = p;
            toklen[nfields] = (size_t)(q - p);
        }
        nfields++;
        p = q;
        while (p < end && is_blank(*p))
            p++;
    }
    if (nfields != FIELD_COUNT) {
        char reason[128];

        snprintf(reason, sizeof reason,
                 "expected 5 fields (minute hour day-of-month month day-of-week), got %d", nfields);
        return set_msg(msg, msglen, start, (size_t)(end - start), reason);
    }

    for (ctx.field = 0; ctx.field < FIELD_COUNT; ctx.field++) {
        int rc = parse_field(&ctx, tok[ctx.field], toklen[ctx.field], &mask[ctx.field]);

        if (rc)
            return rc;
    }

    /* 7 is another name for Sunday. */
    if (mask[DOW_FIELD] & (UINT64_C(1) << 7))
        mask[DOW_FIELD] = (mask[DOW_FIELD] | 1u) & ~(UINT64_C(1) << 7);

    out->minutes = mask[0];
    out->hours = (uint32_t)mask[1];
    out->mdays = (uint32_t)mask[DOM_FIELD];
    out->months = (uint16_t)mask[3];
    out->wdays = (uint8_t)mask[DOW_FIELD];
    out->dom_star = (uint8_t)(toklen[DOM_FIELD] == 1 && tok[DOM_FIELD][0] == '*');
    out->dow_star = (uint8_t)(toklen[DOW_FIELD] == 1 && tok[DOW_FIELD][0] == '*');
    return 0;
}

/* Floor division for b > 0. */
static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;

    if (a % b < 0)
        q--;
    return q;
}

/* Proleptic Gregorian calendar, computed on 400-year eras (146097 days each) of years that start
 * on March 1, so the leap day is the last day of its year and month lengths follow a linear
 * pattern: a month starting m months after March 1 (0 <= m < 12) begins (153 m + 2) / 5 days
 * after it. */
#define DAYS_PER_ERA     INT64_C(146097)
#define EPOCH_FROM_MARCH INT64_C(719468) /* days from 0000-03-01 to 1970-01-01 */

/* Converts days since 1970-01-01 into a civil date (month 1-12, day 1-31). */
static void civil_from_days(int64_t days, int64_t *year, int *month, int *mday)
{
    int64_t z = days + EPOCH_FROM_MARCH;
    int64_t era = floor_div(z, DAYS_PER_ERA);
    int64_t doe = z - era * DAYS_PER_ERA;                                /* 0 .. 146096 */
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365; /* 0 .. 399 */
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);               /* 0 .. 365 */
    int64_t mp = (5 * doy + 2) / 153;                                    /* 0 = March */

    *mday = (int)(doy - (153 * mp + 2) / 5 + 1);
    *month = (int)(mp < 10 ? mp + 3 : mp - 9);
    *year = era * 400 + yoe + (*month <= 2 ? 1 : 0);
}

/* Converts a civil date into days since 1970-01-01. month is 1-12. */
static int64_t days_from_civil(int64_t year, int month, int mday)
{
    int64_t y = year - (month <= 2 ? 1 : 0);
    int64_t era = floor_div(y, 400);
    int64_t yoe = y - era * 400;
    int64_t mp = month > 2 ? month - 3 : month + 9;
    int64_t doy = (153 * mp + 2) / 5 + mday - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;

    return era * DAYS_PER_ERA + doe - EPOCH_FROM_MARCH;
}

/* Day of the week (0 = Sunday) of days since 1970-01-01, a Thursday. */
static int weekday(int64_t days)
{
    int64_t w = (days + 4) % 7;

    return (int)(w < 0 ? w + 7 : w);
}

static int day_matches(const cron_schedule *s, int mday, int wday)
{
    int dom = ((s->mdays >> mday) & 1u) != 0;
    int dow = ((s->wdays >> wday) & 1u) != 0;

    if (s->dom_star || s->dow_star)
        return dom && dow;
    return dom || dow;
}

/* Returns the first matching minute of the day at or after minute `from` (0-1439), or -1. */
static int first_time_of_day(const cron_schedule *s, int from)
{
    for (int h = from / 60; h < 24; h++) {
        if (!((s->hours >> h) & 1u))
            continue;
        for (int m = (h == from / 60) ? from % 60 : 0; m < 60; m++)
            if ((s->minutes >> m) & 1u)
                return h * 60 + m;
    }
    return -1;
}

int cron_next(const cron_schedule *s, int64_t after_ns, int64_t *next_ns)
{
    int64_t minute, day, last;
    int from;

    if (next_ns)
        *next_ns = 0;
    if (!s || !next_ns)
        return SLUICE_EINVAL;

    minute = floor_div(after_ns, NS_PER_MIN) + 1;
    day = floor_div(minute, MIN_PER_DAY);
    from = (int)(minute - day * MIN_PER_DAY);
    last = day + CRON_SEARCH_DAYS;

    while (day <= last) {
        int64_t year;
        int month, mday, t;

        civil_from_days(day, &year, &month, &mday);
        if (!((s->months >> month) & 1u)) {
            day =
                month == 12 ? days_from_civil(year + 1, 1, 1) : days_from_civil(year, month + 1, 1);
            from = 0;
            continue;
        }
        if (day_matches(s, mday, weekday(day))) {
            t = first_time_of_day(s, from);
            if (t >= 0) {
                int64_t idx = day * MIN_PER_DAY + t;

                if (idx > INT64_MAX / NS_PER_MIN)
                    return SLUICE_ERANGE;
                *next_ns = idx * NS_PER_MIN;
                return 0;
            }
        }
        day++;
        from = 0;
    }
    return SLUICE_ENOTFOUND;
}

int cron_matches(const cron_schedule *s, int64_t t_ns)
{
    int64_t minute, day, year;
    int month, mday, mod;

    if (!s)
        return 0;
    minute = floor_div(t_ns, NS_PER_MIN);
    day = floor_div(minute, MIN_PER_DAY);
    mod = (int)(minute - day * MIN_PER_DAY);
    civil_from_days(day, &year, &month, &mday);
    return ((s->months >> month) & 1u) && day_matches(s, mday, weekday(day)) &&
           ((s->hours >> (mod / 60)) & 1u) && ((s->minutes >> (mod % 60)) & 1u);
}
