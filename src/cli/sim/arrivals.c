/* SPDX-License-Identifier: MIT */
/*
 * Arrival specs: the parser of `--arrivals` (grammar in arrivals.h).
 *
 * Two passes over the text: the first checks every group and adds up the requests, so that the
 * result is allocated once at its exact size and a bad spec allocates nothing; the second writes
 * the offsets. Groups may overlap or come out of order, so the offsets are sorted at the end
 * (requests carry no identity besides their time, so equal times need no tie-break).
 */
#include "cli/sim/arrivals.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "sluice/error.h"
#include "sluice/spec.h"
#include "base/quote.h"

#if defined(__GNUC__)
#define ARRIVALS_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define ARRIVALS_PRINTF(f, a)
#endif

#define EXPECTED      "expected N, N@T or N@T1..T2, e.g. 20@0,5@90s,300@0..60s"
#define TIME_EXPECTED "expected 0 or a number with a unit ns, us, ms, s, m, h or d"

/* Input bytes quote_buf in a message before the quote is cut short with "...". */
#define QUOTE_MAX 60

ARRIVALS_PRINTF(4, 5) static int report(char *msg, size_t msglen, int rc, const char *fmt, ...)
{
    va_list ap;

    if (msg && msglen > 0) {
        va_start(ap, fmt);
        vsnprintf(msg, msglen, fmt, ap);
        va_end(ap);
    }
    return rc;
}

/* One group: n requests over [from_ns, to_ns) (from_ns == to_ns: all at once). */
typedef struct group {
    int64_t n;
    int64_t from_ns;
    int64_t to_ns;
} group;

static size_t count_digits(const char *s, size_t n)
{
    size_t i = 0;

    while (i < n && s[i] >= '0' && s[i] <= '9')
        i++;
    return i;
}

/* Parses a time T. A run of digits alone is "0", or, when unit_of/unit_len name another time
 * ("60s"), a number in that time's unit. */
static int parse_time(const char *s, size_t n, const char *unit_of, size_t unit_len, int64_t *ns)
{
    size_t digits = count_digits(s, n);
    size_t ud;
    char tmp[SLUICE_SPEC_DURATION_MAX_LEN + 4];

    *ns = 0;
    if (n > 0 && digits == n) {
        if (strspn(s, "0") >= n)
            return 0;
        if (!unit_of)
            return SLUICE_EPARSE;
        /* Borrow the unit of the other time: "10" with "60s" is read as "10s". */
        ud = count_digits(unit_of, unit_len);
        if (ud == unit_len || n + (unit_len - ud) >= sizeof(tmp))
            return SLUICE_EPARSE;
        memcpy(tmp, s, n);
        memcpy(tmp + n, unit_of + ud, unit_len - ud);
        return sluice_spec_parse_duration(tmp, n + unit_len - ud, ns);
    }
    return sluice_spec_parse_duration(s, n, ns);
}

/* Checks one time of the item and reports it. */
static int check_time(int rc, int64_t ns, const char *t, size_t tlen, const char *item,
                      size_t itemlen, char *msg, size_t msglen)
{
    quote_buf qt, qi;

    if (rc == SLUICE_EPARSE)
        return report(msg, msglen, rc, "bad time %s in %s: " TIME_EXPECTED,
                      quote_bytes(&qt, t, tlen, QUOTE_MAX),
                      quote_bytes(&qi, item, itemlen, QUOTE_MAX));
    if (rc != 0 || ns > ARRIVALS_MAX_OFFSET_NS)
        return report(msg, msglen, SLUICE_ERANGE, "time %s in %s is past the limit of 3650d",
                      quote_bytes(&qt, t, tlen, QUOTE_MAX),
                      quote_bytes(&qi, item, itemlen, QUOTE_MAX));
    return 0;
}

/* Parses one group "N", "N@T" or "N@T1..T2". */
static int parse_group(const char *text, const char *item, size_t itemlen, group *g, char *msg,
                       size_t msglen)
{
    const char *at = memchr(item, '@', itemlen);
    size_t nlen = at ? (size_t)(at - item) : itemlen;
    const char *t = at ? at + 1 : NULL;
    size_t tlen = at ? itemlen - nlen - 1 : 0;
    const char *dots = NULL;
    quote_buf qn, qi;
    int64_t v = 0;
    int rc;

    memset(g, 0, sizeof(*g));
    if (itemlen == 0)
        return report(msg, msglen, SLUICE_EPARSE, "empty item in %s: " EXPECTED,
                      quote_bytes(&qi, text, strlen(text), QUOTE_MAX));
    if (nlen == 0 || count_digits(item, nlen) != nlen)
        return report(msg, msglen, SLUICE_EPARSE, "bad count %s in %s: expected a whole number",
                      quote_bytes(&qn, item, nlen, QUOTE_MAX),
                      quote_bytes(&qi, item, itemlen, QUOTE_MAX));
    for (size_t i = 0; i < nlen; i++) {
        if (v > ((int64_t)ARRIVALS_MAX + 1) / 10) {
            v = (int64_t)ARRIVALS_MAX + 1;
            break;
        }
        v = v * 10 + (item[i] - '0');
    }
    if (v == 0)
        return report(msg, msglen, SLUICE_EINVAL, "bad count %s in %s: must be at least 1",
                      quote_bytes(&qn, item, nlen, QUOTE_MAX),
                      quote_bytes(&qi, item, itemlen, QUOTE_MAX));
    if (v > (int64_t)ARRIVALS_MAX)
        return report(msg, msglen, SLUICE_ERANGE, "count %s in %s is more than %zu requests",
                      quote_bytes(&qn, item, nlen, QUOTE_MAX),
                      quote_bytes(&qi, item, itemlen, QUOTE_MAX), ARRIVALS_MAX);
    g->n = v;
    if (!at)
        return 0;

    for (size_t i = 0; i + 1 < tlen; i++) {
        if (t[i] == '.' && t[i + 1] == '.') {
            dots = t + i;
            break;
        }
    }
    if (!dots) {
        rc = parse_time(t, tlen, NULL, 0, &g->from_ns);
        rc = check_time(rc, g->from_ns, t, tlen, item, itemlen, msg, msglen);
        g->to_ns = g->from_ns;
        return rc;
    }
    {
        size_t alen = (size_t)(dots - t);
        const char *b = dots + 2;
        size_t blen = tlen - alen - 2;

        rc = parse_time(b, blen, NULL, 0, &g->to_ns);
        rc = check_time(rc, g->to_ns, b, blen, item, itemlen, msg, msglen);
        if (rc != 0)
            return rc;
        rc = parse_time(t, alen, b, blen, &g->from_ns);
        rc = check_time(rc, g->from_ns, t, alen, item, itemlen, msg, msglen);
        if (rc != 0)
            return rc;
        if (g->from_ns > g->to_ns)
            return report(msg, msglen, SLUICE_EINVAL, "time range %s in %s runs backwards",
                          quote_bytes(&qn, t, tlen, QUOTE_MAX),
                          quote_bytes(&qi, item, itemlen, QUOTE_MAX));
    }
    return 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

/* Writes the n offsets of g at out: request i at from + i * span / n, computed as
 * i * (span / n) + i * (span % n) / n so that no product overflows (i, n <= ARRIVALS_MAX). */
static void spread(const group *g, int64_t *out)
{
    int64_t span = g->to_ns - g->from_ns;
    int64_t q = span / g->n, r = span % g->n;

    for (int64_t i = 0; i < g->n; i++)
        out[i] = g->from_ns + i * q + i * r / g->n;
}

int arrivals_parse(const char *text, arrivals **out, char *msg, size_t msglen)
{
    const char *item, *comma, *end;
    arrivals *a;
    size_t total = 0, pos = 0, len;
    int sorted = 1;
    group g;
    int rc;

    if (msg && msglen > 0)
        msg[0] = '\0';
    if (!out)
        return report(msg, msglen, SLUICE_EINVAL, "no arrivals given");
    *out = NULL;
    if (!text)
        return report(msg, msglen, SLUICE_EINVAL, "no arrivals given");
    len = strlen(text);
    if (len == 0)
        return report(msg, msglen, SLUICE_EPARSE, "empty arrivals: " EXPECTED);
    end = text + len;

    /* Pass 1: check every group and count. */
    for (item = text;; item = comma + 1) {
        comma = memchr(item, ',', (size_t)(end - item));
        rc = parse_group(text, item, comma ? (size_t)(comma - item) : (size_t)(end - item), &g, msg,
                         msglen);
        if (rc != 0)
            return rc;
        total += (size_t)g.n;
        if (total > ARRIVALS_MAX)
            return report(msg, msglen, SLUICE_ERANGE,
                          "too many arrivals: more than %zu requests in total", ARRIVALS_MAX);
        if (!comma)
            break;
    }

    a = alloc_malloc(sizeof(*a) + total * sizeof(a->at_ns[0]));
    if (!a)
        return report(msg, msglen, SLUICE_ENOMEM, "out of memory");
    a->n = total;

    /* Pass 2: write the offsets. */
    for (item = text;; item = comma + 1) {
        comma = memchr(item, ',', (size_t)(end - item));
        parse_group(text, item, comma ? (size_t)(comma - item) : (size_t)(end - item), &g, NULL, 0);
        if (pos > 0 && g.from_ns < a->at_ns[pos - 1])
            sorted = 0;
        spread(&g, a->at_ns + pos);
        pos += (size_t)g.n;
        if (!comma)
            break;
    }
    if (!sorted)
        qsort(a->at_ns, a->n, sizeof(a->at_ns[0]), cmp_i64);
    *out = a;
    return 0;
}

void arrivals_free(arrivals *a)
{
    alloc_free(a);
}
