/* SPDX-License-Identifier: MIT */
/*
 * Cron schedules: the five-field calendar rule of recurring tasks, evaluated in UTC.
 *
 * A schedule is parsed once into bitmasks (one bit per allowed minute, hour, day of the month,
 * month and day of the week) and then queried for its next occurrence after a given time. Both
 * calls are pure: no allocation, no clock, no locale, no time zone (UTC only, so daylight saving
 * time never adds, drops or repeats an occurrence).
 *
 * Grammar (fields separated by spaces or tabs):
 *
 *     minute hour day-of-month month day-of-week
 *     field := item ("," item)*
 *     item  := ("*" | value ["-" value]) ["/" step]
 *     value := decimal number | name (month JAN-DEC, day-of-week SUN-SAT; case-insensitive)
 *
 * Ranges: minute 0-59, hour 0-23, day-of-month 1-31, month 1-12, day-of-week 0-7 (0 and 7 are
 * both Sunday). `a-b` requires a <= b (no wrap-around). A step repeats from the start of its range:
 * `*` followed by `/n` starts at the field's minimum, `a-b/n` at a, and `a/n` means `a-max/n`
 * (max being 6 for day-of-week). A step is 1 to the size of the field (60, 24, 31, 12, 7).
 * The macros @yearly (= @annually), @monthly, @weekly, @daily (= @midnight) and @hourly stand for
 * `0 0 1 1 *`, `0 0 1 * *`, `0 0 * * 0`, `0 0 * * *` and `0 * * * *`.
 *
 * Day matching follows classic cron: when both day-of-month and day-of-week are restricted (are
 * anything other than a lone `*`), a day matches when EITHER matches; otherwise both must match
 * (which, one of them being `*`, means the other one decides). So `0 0 13 * FRI` runs on every
 * 13th and every Friday, while `0 0 13 * *` runs on the 13th only. Note that `*` followed by a
 * step counts as restricted here.
 *
 * A schedule whose days can never occur (`0 0 30 2 *`) is accepted by cron_parse() and reported
 * by cron_next() as SLUICE_ENOTFOUND.
 */
#ifndef SLUICE_ENGINE_CRON_H
#define SLUICE_ENGINE_CRON_H

#include <stddef.h>
#include <stdint.h>

/* How far ahead cron_next() looks. The longest gap between two occurrences of a schedule that
 * can occur at all is 8 years (February 29 across a century year that is not a leap year, e.g.
 * 2096 to 2104), so finding nothing in 10 years means the schedule never occurs. */
#define CRON_SEARCH_DAYS (INT64_C(10) * 366)

/* A parsed schedule. Plain data: copy it freely; a zeroed one never matches. */
typedef struct cron_schedule {
    uint64_t minutes; /* bit m set: minute m (0-59) matches */
    uint32_t hours;   /* bit h set: hour h (0-23) matches */
    uint32_t mdays;   /* bit d set: day of the month d (1-31) matches */
    uint16_t months;  /* bit m set: month m (1 = January ... 12) matches */
    uint8_t wdays;    /* bit w set: day of the week w (0 = Sunday ... 6) matches */
    uint8_t dom_star; /* 1 when the day-of-month field was a lone `*` (unrestricted) */
    uint8_t dow_star; /* 1 when the day-of-week field was a lone `*` (unrestricted) */
} cron_schedule;

/* Parses the NUL-terminated `text` (five fields or a macro; leading and trailing blanks are
 * ignored) into *out.
 *
 * Returns 0, SLUICE_EPARSE when the text is not a valid schedule (syntax, value out of range,
 * wrong number of fields, unknown name or macro), or SLUICE_EINVAL when text or out is NULL.
 * *out is zeroed first and filled only on success. When msg is not NULL it receives (truncated to
 * msglen bytes, always NUL-terminated when msglen > 0) a one-line reason naming the field, e.g.
 * `cron field 2 (hour) "25": value out of range 0-23`, or "" on success. Allocates nothing. */
int cron_parse(const char *text, cron_schedule *out, char *msg, size_t msglen);

/* Finds the first minute strictly after after_ns (nanoseconds since the Unix epoch, UTC; any
 * int64 value, including times before 1970) that matches s, and stores its start in *next_ns
 * (a whole number of minutes since the epoch, so > after_ns).
 *
 * Returns 0; SLUICE_ENOTFOUND when no minute matches within CRON_SEARCH_DAYS days (the schedule
 * never occurs, e.g. February 30); SLUICE_ERANGE when the next occurrence does not fit in int64
 * nanoseconds (after year 2262); SLUICE_EINVAL when an argument is NULL. *next_ns is set to 0
 * first and filled only on success. */
int cron_next(const cron_schedule *s, int64_t after_ns, int64_t *next_ns);

/* Returns 1 when the minute containing t_ns matches s, 0 otherwise (also when s is NULL). */
int cron_matches(const cron_schedule *s, int64_t t_ns);

#endif
