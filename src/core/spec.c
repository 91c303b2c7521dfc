/* SPDX-License-Identifier: MIT */
/*
 * Limit specs: the parser and formatter of the one-line limit text (see include/sluice/spec.h for
 * the grammar).
 *
 * The parser splits the text on commas: the first item names the kind and its value, every other
 * item is an option. It works on a local definition and copies it out only once everything,
 * validation included, succeeded, so a failed parse leaves *def zeroed. Nothing is allocated: the
 * spec is read in place and messages are written straight into the caller's buffer.
 *
 * Messages quote the offending item and the whole spec, escaping control bytes and cutting long
 * quotes short, so that one stays one line and of bounded length whatever the input.
 */
#include "sluice/spec.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/attr.h"
#include "sluice/error.h"
#include "base/quote.h"

/* ---- Durations --------------------------------------------------------------------------- */

typedef struct unit_info {
    const char *name;
    int64_t ns; /* nanoseconds in one of it */
} unit_info;

/* Largest first, so that formatting picks the largest exact unit. */
static const unit_info units[] = {
    {"d", 86400 * SLUICE_NS_PER_SEC},
    {"h", 3600 * SLUICE_NS_PER_SEC},
    {"m", 60 * SLUICE_NS_PER_SEC},
    {"s", SLUICE_NS_PER_SEC},
    {"ms", SLUICE_NS_PER_MS},
    {"us", INT64_C(1000)},
    {"ns", INT64_C(1)},
};

#define N_UNITS (sizeof(units) / sizeof(units[0]))

/* Returns the nanoseconds of the unit named by the n bytes at s, or 0 for no unit. */
static int64_t unit_ns(const char *s, size_t n)
{
    for (size_t i = 0; i < N_UNITS; i++) {
        if (strlen(units[i].name) == n && memcmp(units[i].name, s, n) == 0)
            return units[i].ns;
    }
    return 0;
}

/* Parses n decimal digits (n >= 1, digits only) into *out, failing with SLUICE_ERANGE past max. */
static int parse_u64(const char *s, size_t n, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;

    *out = 0;
    if (n == 0)
        return SLUICE_EPARSE;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return SLUICE_EPARSE;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (max - d) / 10)
            return SLUICE_ERANGE;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* Parses digits followed by a unit; when bare_unit_ok, a unit alone means one of it. */
static int parse_duration(const char *text, size_t len, int bare_unit_ok, int64_t *ns)
{
    size_t digits = 0;
    int64_t mult;
    uint64_t v;
    int rc;

    *ns = 0;
    while (digits < len && text[digits] >= '0' && text[digits] <= '9')
        digits++;
    mult = unit_ns(text + digits, len - digits);
    if (mult == 0)
        return SLUICE_EPARSE;
    if (digits == 0) {
        if (!bare_unit_ok)
            return SLUICE_EPARSE;
        *ns = mult;
        return 0;
    }
    rc = parse_u64(text, digits, (uint64_t)(INT64_MAX / mult), &v);
    if (rc != 0)
        return rc;
    *ns = (int64_t)v * mult;
    return 0;
}

int sluice_spec_parse_duration(const char *text, size_t len, int64_t *ns)
{
    if (!ns)
        return SLUICE_EINVAL;
    *ns = 0;
    if (!text)
        return SLUICE_EINVAL;
    return parse_duration(text, len, 0, ns);
}

int sluice_spec_format_duration(int64_t ns, char *buf, size_t len)
{
    const unit_info *u = &units[N_UNITS - 1];
    int n;

    if (!buf)
        return SLUICE_EINVAL;
    if (len > 0)
        buf[0] = '\0';
    if (ns < 0)
        return SLUICE_EINVAL;
    if (ns == 0) {
        u = &units[3]; /* "0s" reads better than "0d" */
    } else {
        for (size_t i = 0; i < N_UNITS; i++) {
            if (ns % units[i].ns == 0) {
                u = &units[i];
                break;
            }
        }
    }
    n = snprintf(buf, len, "%" PRId64 "%s", ns / u->ns, u->name);
    if (n < 0 || (size_t)n >= len) {
        if (len > 0)
            buf[0] = '\0';
        return SLUICE_ERANGE;
    }
    return 0;
}

/* ---- Messages ---------------------------------------------------------------------------- */

/* Input bytes quote_buf in a message before the quote is cut short with "...". */
#define QUOTE_MAX 80

/* The state of one parse: the spec and where its error message goes. */
typedef struct spec_parser {
    quote_buf spec; /* the whole spec, quote_buf for messages */
    char *msg;      /* the caller's message buffer (may be NULL when msglen is 0) */
    size_t msglen;
} spec_parser;

/* Writes a message and returns rc. */
PRINTF_ATTR(3, 4) static int fail(spec_parser *p, int rc, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vmsgf(p->msg, p->msglen, fmt, ap);
    va_end(ap);
    return rc;
}

/* ---- Parsing ----------------------------------------------------------------------------- */

#define KIND_BIT(k) (1u << (unsigned)(k))
#define ALL_KINDS                                                                                  \
    (KIND_BIT(SLUICE_RATE) | KIND_BIT(SLUICE_WINDOW) | KIND_BIT(SLUICE_SLIDING) |                  \
     KIND_BIT(SLUICE_CONCURRENCY) | KIND_BIT(SLUICE_QUOTA))

enum spec_option {
    OPT_BURST,
    OPT_START_EMPTY,
    OPT_HORIZON,
    OPT_TTL,
    OPT_MAX_KEYS,
    OPT_KEYS_OVERFLOW,
    OPT_MAX_KEY_LEN,
    OPT_DECREASE,
    OPT_RECOVER,
    OPT_FLOOR,
};

typedef struct option_info {
    const char *name;
    int takes_value; /* 1: name=value; 0: a bare flag */
    unsigned kinds;  /* KIND_BITs of the kinds it applies to */
} option_info;

/* In the order the grammar and the canonical form list them. */
static const option_info options[] = {
    [OPT_BURST] = {"burst", 1, KIND_BIT(SLUICE_RATE)},
    [OPT_START_EMPTY] = {"start_empty", 0, KIND_BIT(SLUICE_RATE)},
    [OPT_HORIZON] = {"horizon", 1, KIND_BIT(SLUICE_RATE)},
    [OPT_TTL] = {"ttl", 1, KIND_BIT(SLUICE_CONCURRENCY)},
    [OPT_MAX_KEYS] = {"max_keys", 1, ALL_KINDS},
    [OPT_KEYS_OVERFLOW] = {"keys_overflow", 1, ALL_KINDS},
    [OPT_MAX_KEY_LEN] = {"max_key_len", 1, ALL_KINDS},
    [OPT_DECREASE] = {"decrease", 1, KIND_BIT(SLUICE_RATE)},
    [OPT_RECOVER] = {"recover", 1, KIND_BIT(SLUICE_RATE)},
    [OPT_FLOOR] = {"floor", 1, KIND_BIT(SLUICE_RATE)},
};

#define N_OPTIONS (sizeof(options) / sizeof(options[0]))

typedef struct kind_info {
    const char *name;
    sluice_limit_kind kind;
    const char *form; /* the shape of its value, for messages */
} kind_info;

static const kind_info kinds[] = {
    {"rate", SLUICE_RATE, "rate=N/PERIOD"},
    {"window", SLUICE_WINDOW, "window=N/PERIOD"},
    {"sliding", SLUICE_SLIDING, "sliding=N/PERIOD"},
    {"concurrency", SLUICE_CONCURRENCY, "concurrency=N"},
    {"quota", SLUICE_QUOTA, "quota=N/day|month|total"},
};

#define N_KINDS (sizeof(kinds) / sizeof(kinds[0]))

#define KINDS_EXPECTED                                                                             \
    "expected rate=N/PERIOD, window=N/PERIOD, sliding=N/PERIOD, concurrency=N or "                 \
    "quota=N/day|month|total"
#define PERIOD_EXPECTED   "expected a number with a unit ms, s, m, h or d"
#define DURATION_EXPECTED "expected a number with a unit ns, us, ms, s, m, h or d"

static const kind_info *find_kind(const char *s, size_t n)
{
    for (size_t i = 0; i < N_KINDS; i++) {
        if (strlen(kinds[i].name) == n && memcmp(kinds[i].name, s, n) == 0)
            return &kinds[i];
    }
    return NULL;
}

static int find_option(const char *s, size_t n)
{
    for (size_t i = 0; i < N_OPTIONS; i++) {
        if (strlen(options[i].name) == n && memcmp(options[i].name, s, n) == 0)
            return (int)i;
    }
    return -1;
}

/* Parses a count (the N of a kind, or an option's number) no larger than max; `what` names it in
 * messages. */
static int parse_count(spec_parser *p, const char *what, const char *s, size_t n, uint64_t max,
                       uint64_t *out)
{
    quote_buf q;
    int rc = parse_u64(s, n, max, out);

    if (rc == SLUICE_EPARSE)
        return fail(p, rc, "bad %s %s in %s: expected a whole number", what,
                    quote_bytes(&q, s, n, QUOTE_MAX), p->spec.s);
    if (rc == SLUICE_ERANGE)
        return fail(p, rc, "%s %s in %s is too large", what, quote_bytes(&q, s, n, QUOTE_MAX),
                    p->spec.s);
    return 0;
}

/* Parses the value of a duration option (ttl, horizon). */
static int parse_duration_value(spec_parser *p, const char *what, const char *s, size_t n,
                                int64_t *ns)
{
    quote_buf q;
    int rc = parse_duration(s, n, 0, ns);

    if (rc == SLUICE_EPARSE)
        return fail(p, rc, "bad %s %s in %s: " DURATION_EXPECTED, what,
                    quote_bytes(&q, s, n, QUOTE_MAX), p->spec.s);
    if (rc == SLUICE_ERANGE)
        return fail(p, rc, "%s %s in %s is too long (at most about 292 years)", what,
                    quote_bytes(&q, s, n, QUOTE_MAX), p->spec.s);
    return 0;
}

/* Parses the value of the first item, "N/PERIOD", "N" or "N/CAL" after "kind=". */
static int parse_kind_value(spec_parser *p, const kind_info *k, const char *item, size_t itemlen,
                            const char *v, size_t vlen, sluice_limit_def *def)
{
    const char *slash = memchr(v, '/', vlen);
    size_t nlen = slash ? (size_t)(slash - v) : vlen;
    const char *per = slash ? slash + 1 : NULL;
    size_t perlen = slash ? vlen - nlen - 1 : 0;
    uint64_t n;
    quote_buf q;
    int rc;

    if (k->kind == SLUICE_CONCURRENCY) {
        rc = parse_count(p, "count", v, vlen, INT64_MAX, &n);
        if (rc != 0)
            return rc;
        def->limit = (int64_t)n;
        return 0;
    }
    if (!slash)
        return fail(p, SLUICE_EPARSE, "missing period in %s: expected %s, e.g. %s",
                    quote_bytes(&q, item, itemlen, QUOTE_MAX), k->form,
                    k->kind == SLUICE_QUOTA ? "quota=1000/day" : "rate=10/1s");
    rc = parse_count(p, "count", v, nlen, INT64_MAX, &n);
    if (rc != 0)
        return rc;
    def->limit = (int64_t)n;
    if (k->kind == SLUICE_QUOTA) {
        if (perlen == 3 && memcmp(per, "day", 3) == 0)
            def->calendar = SLUICE_CAL_DAY;
        else if (perlen == 5 && memcmp(per, "month", 5) == 0)
            def->calendar = SLUICE_CAL_MONTH;
        else if (perlen == 5 && memcmp(per, "total", 5) == 0)
            def->calendar = SLUICE_CAL_NONE;
        else
            return fail(p, SLUICE_EPARSE, "bad quota period %s in %s: expected day, month or total",
                        quote_bytes(&q, per, perlen, QUOTE_MAX), p->spec.s);
        return 0;
    }
    rc = parse_duration(per, perlen, 1, &def->period_ns);
    if (rc == SLUICE_EPARSE)
        return fail(p, rc, "bad period %s in %s: " PERIOD_EXPECTED,
                    quote_bytes(&q, per, perlen, QUOTE_MAX), p->spec.s);
    if (rc == SLUICE_ERANGE)
        return fail(p, rc, "period %s in %s is too long (at most about 292 years)",
                    quote_bytes(&q, per, perlen, QUOTE_MAX), p->spec.s);
    return 0;
}

PRINTF_ATTR(3, 4) static void appendf(char *msg, size_t msglen, const char *fmt, ...);

/* Parses one option item into def. `seen` has a bit per option already given. */
static int parse_option(spec_parser *p, const char *item, size_t itemlen, unsigned *seen,
                        sluice_limit_def *def)
{
    const char *eq = memchr(item, '=', itemlen);
    size_t namelen = eq ? (size_t)(eq - item) : itemlen;
    const char *v = eq ? eq + 1 : NULL;
    size_t vlen = eq ? itemlen - namelen - 1 : 0;
    const char *kname = sluice_limit_kind_name(def->kind);
    int opt = find_option(item, namelen);
    const option_info *o;
    uint64_t n;
    quote_buf qi, qn;
    int rc;

    if (itemlen == 0)
        return fail(p, SLUICE_EPARSE, "empty option in %s", p->spec.s);
    if (opt < 0) {
        if (find_kind(item, namelen))
            return fail(p, SLUICE_EPARSE, "second limit kind %s in %s: a spec has exactly one",
                        quote_bytes(&qi, item, itemlen, QUOTE_MAX), p->spec.s);
        return fail(p, SLUICE_EPARSE, "unknown option %s in %s: a %s limit takes %s",
                    quote_bytes(&qi, item, namelen, QUOTE_MAX), p->spec.s, kname,
                    def->kind == SLUICE_RATE ? "burst=N, start_empty, horizon=DURATION, "
                                               "max_keys=N, keys_overflow=refuse|allow, "
                                               "max_key_len=N"
                    : def->kind == SLUICE_CONCURRENCY
                        ? "ttl=DURATION, max_keys=N, keys_overflow=refuse|allow, max_key_len=N"
                        : "max_keys=N, keys_overflow=refuse|allow, max_key_len=N");
    }
    o = &options[opt];
    quote_bytes(&qn, o->name, strlen(o->name), QUOTE_MAX);
    if (!(o->kinds & KIND_BIT(def->kind)))
        return fail(p, SLUICE_EPARSE, "option %s does not apply to a %s limit, in %s", qn.s, kname,
                    p->spec.s);
    if (*seen & (1u << (unsigned)opt))
        return fail(p, SLUICE_EPARSE, "option %s given twice in %s", qn.s, p->spec.s);
    *seen |= 1u << (unsigned)opt;
    if (o->takes_value && !eq)
        return fail(p, SLUICE_EPARSE, "option %s needs a value in %s: write %s=...", qn.s,
                    p->spec.s, o->name);
    if (!o->takes_value && eq)
        return fail(p, SLUICE_EPARSE, "option %s takes no value, in %s", qn.s, p->spec.s);

    switch ((enum spec_option)opt) {
    case OPT_BURST:
        rc = parse_count(p, "burst", v, vlen, INT64_MAX, &n);
        if (rc == 0 && n == 0)
            return fail(p, SLUICE_EINVAL, "bad burst %s in %s: must be at least 1",
                        quote_bytes(&qi, v, vlen, QUOTE_MAX), p->spec.s);
        def->burst = (int64_t)n;
        return rc;
    case OPT_START_EMPTY:
        def->start_empty = 1;
        return 0;
    case OPT_HORIZON:
        return parse_duration_value(p, "horizon", v, vlen, &def->horizon_ns);
    case OPT_TTL:
        return parse_duration_value(p, "ttl", v, vlen, &def->ttl_ns);
    case OPT_MAX_KEYS:
        rc = parse_count(p, "max_keys", v, vlen, SIZE_MAX, &n);
        def->max_keys = (size_t)n;
        return rc;
    case OPT_KEYS_OVERFLOW:
        if (vlen == 6 && memcmp(v, "refuse", 6) == 0)
            def->key_overflow = SLUICE_KEYS_REFUSE;
        else if (vlen == 5 && memcmp(v, "allow", 5) == 0)
            def->key_overflow = SLUICE_KEYS_ALLOW;
        else
            return fail(p, SLUICE_EPARSE, "bad keys_overflow %s in %s: expected refuse or allow",
                        quote_bytes(&qi, v, vlen, QUOTE_MAX), p->spec.s);
        return 0;
    case OPT_MAX_KEY_LEN:
        rc = parse_count(p, "max_key_len", v, vlen, SIZE_MAX, &n);
        def->max_key_len = (size_t)n;
        return rc;
    case OPT_DECREASE:
    case OPT_RECOVER:
    case OPT_FLOOR:
        rc = sluice_spec_parse_adaptive(o->name, v, vlen, def, p->msg, p->msglen);
        if (rc != 0 && p->msg && p->msglen > 0) /* say where */
            appendf(p->msg, p->msglen, " in %s", p->spec.s);
        return rc;
    }
    return fail(p, SLUICE_EPARSE, "unknown option %s in %s", qn.s, p->spec.s);
}

/* Appends to a NUL-terminated message, truncating. */
PRINTF_ATTR(3, 4) static void appendf(char *msg, size_t msglen, const char *fmt, ...)
{
    size_t used = strnlen(msg, msglen);
    va_list ap;

    if (used + 1 >= msglen)
        return;
    va_start(ap, fmt);
    vmsgf(msg + used, msglen - used, fmt, ap);
    va_end(ap);
}

/* Parses "0.5" (a decimal fraction, up to 6 digits after the point) or "50%" into num / den,
 * both > 0 and num < den. */
static int parse_fraction(const char *v, size_t n, int64_t *num, int64_t *den)
{
    uint64_t x;

    if (n >= 2 && v[n - 1] == '%') {
        if (parse_u64(v, n - 1, 99, &x) != 0 || x == 0)
            return SLUICE_EPARSE;
        *num = (int64_t)x;
        *den = 100;
        while (*num % 10 == 0) { /* 50% is 0.5: one canonical form */
            *num /= 10;
            *den /= 10;
        }
        return 0;
    }
    if (n >= 3 && n <= 8 && v[0] == '0' && v[1] == '.') {
        if (parse_u64(v + 2, n - 2, UINT64_MAX, &x) != 0 || x == 0)
            return SLUICE_EPARSE;
        *num = (int64_t)x;
        *den = 1;
        for (size_t i = 2; i < n; i++)
            *den *= 10;
        while (*num % 10 == 0) { /* 0.50 is 0.5: one canonical form */
            *num /= 10;
            *den /= 10;
        }
        return 0;
    }
    return SLUICE_EPARSE;
}

/* Writes a message and returns rc. */
PRINTF_ATTR(4, 5) static int vmsg_rc(char *msg, size_t msglen, int rc, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vmsgf(msg, msglen, fmt, ap);
    va_end(ap);
    return rc;
}

/* Any one of the three settings makes a rate adaptive; the two not given take their defaults
 * (halve, regain 10% a minute, floor 1 per the limit's period). */
static void adaptive_defaults(sluice_limit_def *def)
{
    if (def->decrease_den == 0) {
        def->decrease_num = 5;
        def->decrease_den = 10;
    }
    if (def->recover_pct == 0) {
        def->recover_pct = 10;
        def->recover_ns = 60 * SLUICE_NS_PER_SEC;
    }
    if (def->floor_permits == 0) {
        def->floor_permits = 1;
        def->floor_period_ns = def->period_ns;
    }
}

int sluice_spec_parse_adaptive(const char *name, const char *v, size_t vlen, sluice_limit_def *def,
                               char *msg, size_t msglen)
{
    const char *slash = v ? memchr(v, '/', vlen) : NULL;
    size_t head = slash ? (size_t)(slash - v) : vlen;
    quote_buf q;
    uint64_t n;

    if (msg && msglen > 0)
        msg[0] = '\0';
    if (!name || !def || (!v && vlen > 0))
        return SLUICE_EINVAL;
    quote_bytes(&q, v ? v : "", vlen, QUOTE_MAX);
    if (strcmp(name, "decrease") == 0) {
        if (parse_fraction(v, vlen, &def->decrease_num, &def->decrease_den) != 0)
            return vmsg_rc(msg, msglen, SLUICE_EPARSE,
                           "bad decrease %s: expected a fraction between 0 and 1 such as 0.5 "
                           "or 50%%",
                           q.s);
        adaptive_defaults(def);
        return 0;
    }
    if (strcmp(name, "recover") == 0) {
        if (!slash || head < 2 || v[head - 1] != '%' || parse_u64(v, head - 1, 100, &n) != 0 ||
            n == 0 || parse_duration(slash + 1, vlen - head - 1, 1, &def->recover_ns) != 0)
            return vmsg_rc(msg, msglen, SLUICE_EPARSE,
                           "bad recover %s: expected P%%/DURATION, the share of the rate regained "
                           "per interval, such as 10%%/1m",
                           q.s);
        def->recover_pct = (int64_t)n;
        adaptive_defaults(def);
        return 0;
    }
    if (strcmp(name, "floor") == 0) {
        if (!slash || parse_u64(v, head, SLUICE_MAX_PERMITS, &n) != 0 || n == 0 ||
            parse_duration(slash + 1, vlen - head - 1, 1, &def->floor_period_ns) != 0)
            return vmsg_rc(msg, msglen, SLUICE_EPARSE,
                           "bad floor %s: expected N/PERIOD, the lowest rate, such as 5/1s", q.s);
        def->floor_permits = (int64_t)n;
        adaptive_defaults(def);
        return 0;
    }
    return vmsg_rc(msg, msglen, SLUICE_EINVAL, "unknown adaptive setting \"%s\"", name);
}

int sluice_spec_parse_limit(const char *text, sluice_limit_def *def, char *msg, size_t msglen)
{
    spec_parser p;
    sluice_limit_def d;
    const char *item, *end, *comma, *eq;
    const kind_info *k;
    size_t itemlen, len;
    unsigned seen = 0;
    char vmsg[200];
    quote_buf q;
    int rc;

    if (msg && msglen > 0)
        msg[0] = '\0';
    if (def)
        memset(def, 0, sizeof(*def));
    p.msg = msg;
    p.msglen = msglen;
    if (!text || !def)
        return fail(&p, SLUICE_EINVAL, "no limit spec given");
    len = strlen(text);
    quote_bytes(&p.spec, text, len, QUOTE_MAX);
    if (len == 0)
        return fail(&p, SLUICE_EPARSE, "empty limit spec: " KINDS_EXPECTED);

    /* The kind and its value. */
    end = text + len;
    comma = memchr(text, ',', len);
    item = text;
    itemlen = comma ? (size_t)(comma - text) : len;
    eq = memchr(item, '=', itemlen);
    k = find_kind(item, eq ? (size_t)(eq - item) : itemlen);
    if (!k && find_option(item, eq ? (size_t)(eq - item) : itemlen) >= 0)
        return fail(&p, SLUICE_EPARSE,
                    "option %s comes before the limit kind in %s: a spec starts with the kind, "
                    "e.g. rate=10/1s,burst=5",
                    quote_bytes(&q, item, itemlen, QUOTE_MAX), p.spec.s);
    if (!k)
        return fail(&p, SLUICE_EPARSE, "unknown limit kind %s in %s: " KINDS_EXPECTED,
                    quote_bytes(&q, item, eq ? (size_t)(eq - item) : itemlen, QUOTE_MAX), p.spec.s);
    if (!eq)
        return fail(&p, SLUICE_EPARSE, "missing value in %s: expected %s",
                    quote_bytes(&q, item, itemlen, QUOTE_MAX), k->form);
    sluice_limit_def_init(&d, k->kind);
    rc = parse_kind_value(&p, k, item, itemlen, eq + 1, itemlen - (size_t)(eq + 1 - item), &d);
    if (rc != 0)
        return rc;

    /* The options. */
    while (comma) {
        item = comma + 1;
        comma = memchr(item, ',', (size_t)(end - item));
        itemlen = comma ? (size_t)(comma - item) : (size_t)(end - item);
        rc = parse_option(&p, item, itemlen, &seen, &d);
        if (rc != 0)
            return rc;
    }

    rc = sluice_limit_def_validate(&d, vmsg, sizeof(vmsg));
    if (rc != 0)
        return fail(&p, rc, "invalid limit %s: %s", p.spec.s, vmsg);
    *def = d;
    return 0;
}

/* ---- Formatting -------------------------------------------------------------------------- */

/* An output buffer that remembers whether anything did not fit. */
typedef struct spec_out {
    char *buf;
    size_t len;
    size_t pos;
    int full; /* 1 once something was cut */
} spec_out;

PRINTF_ATTR(2, 3) static void out_printf(spec_out *o, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (o->full)
        return;
    va_start(ap, fmt);
    n = vsnprintf(o->buf + o->pos, o->len - o->pos, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= o->len - o->pos)
        o->full = 1;
    else
        o->pos += (size_t)n;
}

static void out_duration(spec_out *o, const char *prefix, int64_t ns)
{
    char d[SLUICE_SPEC_DURATION_MAX_LEN];

    sluice_spec_format_duration(ns, d, sizeof(d));
    out_printf(o, "%s%s", prefix, d);
}

/* ",decrease=0.5": the denominator is a power of ten (parse_fraction), so a decimal says it
 * exactly (25% is written 0.25). */
static void out_decrease(spec_out *o, int64_t num, int64_t den)
{
    int digits = 0;

    for (int64_t d = den; d > 1; d /= 10)
        digits++;
    out_printf(o, ",decrease=0.%0*" PRId64, digits, num);
}

int sluice_spec_format_limit(const sluice_limit_def *def, char *buf, size_t len)
{
    sluice_limit_def dflt;
    spec_out o = {buf, len, 0, 0};
    char vmsg[200];
    int rc;

    if (!buf)
        return SLUICE_EINVAL;
    if (len > 0)
        buf[0] = '\0';
    if (!def)
        return SLUICE_EINVAL;
    rc = sluice_limit_def_validate(def, vmsg, sizeof(vmsg));
    if (rc != 0)
        return rc;
    if (len == 0)
        return SLUICE_ERANGE;
    sluice_limit_def_init(&dflt, def->kind);

    out_printf(&o, "%s=%" PRId64, sluice_limit_kind_name(def->kind), def->limit);
    switch (def->kind) {
    case SLUICE_RATE:
    case SLUICE_WINDOW:
    case SLUICE_SLIDING:
        out_duration(&o, "/", def->period_ns);
        break;
    case SLUICE_QUOTA:
        out_printf(&o, "/%s",
                   def->calendar == SLUICE_CAL_DAY     ? "day"
                   : def->calendar == SLUICE_CAL_MONTH ? "month"
                                                       : "total");
        break;
    case SLUICE_CONCURRENCY:
        break;
    }
    if (def->kind == SLUICE_RATE) {
        if (def->burst != dflt.burst)
            out_printf(&o, ",burst=%" PRId64, def->burst);
        if (def->start_empty)
            out_printf(&o, ",start_empty");
        if (def->horizon_ns != dflt.horizon_ns)
            out_duration(&o, ",horizon=", def->horizon_ns);
        if (def->decrease_den > 0) {
            out_decrease(&o, def->decrease_num, def->decrease_den);
            out_printf(&o, ",recover=%" PRId64 "%%", def->recover_pct);
            out_duration(&o, "/", def->recover_ns);
            out_printf(&o, ",floor=%" PRId64, def->floor_permits);
            out_duration(&o, "/", def->floor_period_ns);
        }
    }
    if (def->kind == SLUICE_CONCURRENCY && def->ttl_ns != dflt.ttl_ns)
        out_duration(&o, ",ttl=", def->ttl_ns);
    if (def->max_keys != dflt.max_keys)
        out_printf(&o, ",max_keys=%zu", def->max_keys);
    if (def->key_overflow != dflt.key_overflow)
        out_printf(&o, ",keys_overflow=%s",
                   def->key_overflow == SLUICE_KEYS_ALLOW ? "allow" : "refuse");
    if (def->max_key_len != dflt.max_key_len)
        out_printf(&o, ",max_key_len=%zu", def->max_key_len);
    if (o.full) {
        buf[0] = '\0';
        return SLUICE_ERANGE;
    }
    return 0;
}
