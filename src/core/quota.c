/* SPDX-License-Identifier: MIT */
/*
 * Quotas on one key: a budget per UTC calendar day or month, or a total cap (see quota.h).
 *
 * Calendar periods are computed with our own proleptic Gregorian arithmetic on whole days since
 * the epoch (no time zone, no libc state), counted from 1601-01-01, the start of a 400-year
 * cycle, so that every division is of a non-negative number.
 *
 * Ensures:
 * - a state counts the units charged in the period [period_start_ns, period_end_ns); once now
 *   reaches the end it is the same as a fresh key (spent 0 in the period holding now);
 * - spent never drops below 0 and saturates at INT64_MAX instead of overflowing;
 * - a denial and a peek charge nothing; a granted charge always keeps spent <= budget;
 * - times before the epoch are read as the epoch, and a now older than the state's period start
 *   is read as that start (time never runs backwards inside a key);
 * - the period holding the last representable instants (April 2262) ends at SLUICE_NEVER.
 */
#include "quota.h"

#include "sluice/error.h"

#define NS_PER_DAY (INT64_C(86400) * SLUICE_NS_PER_SEC)

/* Days from 1601-01-01 to 1970-01-01. */
#define DAYS_1601_TO_1970 INT64_C(134774)

#define DAYS_PER_400Y INT64_C(146097)
#define DAYS_PER_100Y INT64_C(36524) /* a century whose last year is not leap */
#define DAYS_PER_4Y   INT64_C(1461)

static int is_leap(int64_t year)
{
    return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
}

/* Days before the first of `month` (1..12) in a year. */
static int64_t days_before_month(int64_t year, int month)
{
    static const int64_t before[12] = {0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334};

    return before[month - 1] + (month > 2 && is_leap(year));
}

/* The year and month (1..12) of day `days` since 1970-01-01 (days >= 0). */
static void civil_from_days(int64_t days, int64_t *year, int *month)
{
    int64_t d = days + DAYS_1601_TO_1970; /* days since 1601-01-01 */
    int64_t c400 = d / DAYS_PER_400Y;
    int64_t c100, c4, y1;
    int m;

    d %= DAYS_PER_400Y;
    /* The last day of a 400-year cycle is the 366th day of its fourth century's last year. */
    c100 = d / DAYS_PER_100Y;
    if (c100 == 4)
        c100 = 3;
    d -= c100 * DAYS_PER_100Y;
    c4 = d / DAYS_PER_4Y;
    d -= c4 * DAYS_PER_4Y;
    y1 = d / 365;
    if (y1 == 4) /* December 31 of a leap year */
        y1 = 3;
    d -= y1 * 365;
    *year = 1601 + 400 * c400 + 100 * c100 + 4 * c4 + y1;
    /* d is now the day of the year, 0-based. */
    for (m = 12; m > 1 && days_before_month(*year, m) > d; m--)
        ;
    *month = m;
}

/* Days from 1970-01-01 to the first of `month` (1..12) in `year` (>= 1970). */
static int64_t days_from_civil(int64_t year, int month)
{
    int64_t y = year - 1601;

    return y * 365 + y / 4 - y / 100 + y / 400 + days_before_month(year, month) - DAYS_1601_TO_1970;
}

/* days * NS_PER_DAY, or SLUICE_NEVER when that lies past the int64 range. */
static int64_t day_to_ns(int64_t days)
{
    if (days > INT64_MAX / NS_PER_DAY)
        return SLUICE_NEVER;
    return days * NS_PER_DAY;
}

int64_t quota_period_start(sluice_calendar cal, int64_t t_ns, int64_t *end_ns)
{
    int64_t t = t_ns < 0 ? 0 : t_ns;
    int64_t day = t / NS_PER_DAY;

    switch (cal) {
    case SLUICE_CAL_DAY:
        *end_ns = day_to_ns(day + 1);
        return day * NS_PER_DAY;
    case SLUICE_CAL_MONTH: {
        int64_t year;
        int month;

        civil_from_days(day, &year, &month);
        *end_ns = day_to_ns(month == 12 ? days_from_civil(year + 1, 1)
                                        : days_from_civil(year, month + 1));
        return days_from_civil(year, month) * NS_PER_DAY;
    }
    case SLUICE_CAL_NONE:
    default:
        *end_ns = SLUICE_NEVER;
        return 0;
    }
}

/* The period a key counts at now and what it spent in it: its own period while now lies inside,
 * else the period holding now, with nothing spent. */
static quota_state quota_current(sluice_calendar cal, const quota_state *s, int64_t now)
{
    quota_state cur = *s;

    if (s->period_end_ns == 0 || (s->period_end_ns != SLUICE_NEVER && now >= s->period_end_ns)) {
        cur.period_start_ns = quota_period_start(cal, now, &cur.period_end_ns);
        cur.spent = 0;
    }
    return cur;
}

/* The time from now to the end of the period (SLUICE_NEVER when it never ends). */
static int64_t quota_left(const quota_state *cur, int64_t now)
{
    if (cur->period_end_ns == SLUICE_NEVER)
        return SLUICE_NEVER;
    return cur->period_end_ns - now;
}

void quota_decide(int64_t budget, sluice_calendar cal, quota_state *s, int64_t units,
                  int64_t now_ns, int peek, sluice_decision *d)
{
    int64_t now = now_ns < 0 ? 0 : now_ns;
    quota_state cur;

    if (s->period_end_ns != 0 && now < s->period_start_ns)
        now = s->period_start_ns;
    cur = quota_current(cal, s, now);

    d->limit = budget;
    d->lease_id = 0;
    d->untracked = 0;
    d->shadow_denied = 0;
    if (units <= budget && cur.spent <= budget - units) {
        cur.spent += units;
        d->allowed = 1;
        d->remaining = budget - cur.spent;
        d->retry_after_ns = 0;
        d->reset_after_ns = quota_left(&cur, now);
        if (!peek)
            *s = cur;
        return;
    }
    d->allowed = 0;
    d->remaining = cur.spent < budget ? budget - cur.spent : 0;
    d->retry_after_ns = units > budget ? SLUICE_NEVER : quota_left(&cur, now);
    d->reset_after_ns = cur.spent > 0 ? quota_left(&cur, now) : 0;
}

int quota_settle(sluice_calendar cal, quota_state *s, int64_t charged_ns, int64_t estimate,
                 int64_t actual, int64_t now_ns)
{
    int64_t now = now_ns < 0 ? 0 : now_ns;
    int64_t charged = charged_ns < 0 ? 0 : charged_ns;
    int64_t delta;
    quota_state cur;

    if (estimate < 0 || actual < 0)
        return SLUICE_EINVAL;
    if (s->period_end_ns != 0 && now < s->period_start_ns)
        now = s->period_start_ns;
    cur = quota_current(cal, s, now);
    if (charged < cur.period_start_ns ||
        (cur.period_end_ns != SLUICE_NEVER && charged >= cur.period_end_ns))
        return SLUICE_ESTATE;

    delta = actual - estimate; /* both >= 0: cannot overflow */
    if (delta > 0 && cur.spent > INT64_MAX - delta)
        cur.spent = INT64_MAX;
    else if (cur.spent + delta < 0)
        cur.spent = 0;
    else
        cur.spent += delta;
    *s = cur;
    return SLUICE_OK;
}

int quota_idle(const quota_state *s, int64_t now_ns)
{
    return s->spent == 0 || (s->period_end_ns != SLUICE_NEVER && s->period_end_ns != 0 &&
                             now_ns >= s->period_end_ns);
}
