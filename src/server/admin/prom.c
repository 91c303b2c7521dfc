/* SPDX-License-Identifier: MIT */
/*
 * The Prometheus text format writer and fixed-bucket histograms (see prom.h).
 *
 * Doubles are written in the shortest form that reads back to the same value ("0.005", not
 * "0.0050000000000000001"), so bucket bounds look as they were declared.
 */
#include "server/admin/prom.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/grow.h"
#include "sluice/error.h"

#define MIN_CAP 4096

void prom_buf_init(prom_buf *b)
{
    memset(b, 0, sizeof(*b));
}

void prom_buf_clear(prom_buf *b)
{
    alloc_free(b->buf);
    prom_buf_init(b);
}

char *prom_buf_take(prom_buf *b, size_t *len)
{
    char *p = b->buf;

    *len = 0;
    if (b->failed || !p) {
        prom_buf_clear(b);
        return NULL;
    }
    *len = b->len;
    prom_buf_init(b);
    return p;
}

/* Makes room for `more` bytes plus a NUL. Returns 0 or -1 (the buffer is then failed). */
static int reserve(prom_buf *b, size_t more)
{
    if (b->failed)
        return -1;
    if (more < b->cap - b->len && b->buf)
        return 0;
    if (more > SIZE_MAX / 2 - b->len) {
        b->failed = 1;
        return -1;
    }
    if (grow_array(&b->buf, &b->cap, b->len + more + 1, 1, MIN_CAP) != SLUICE_OK) {
        b->failed = 1;
        return -1;
    }
    return 0;
}

void prom_buf_append(prom_buf *b, const char *s, size_t len)
{
    if (reserve(b, len) != 0)
        return;
    memcpy(b->buf + b->len, s, len);
    b->len += len;
    b->buf[b->len] = '\0';
}

void prom_buf_printf(prom_buf *b, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (b->failed)
        return;
    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || reserve(b, (size_t)n) != 0) {
        b->failed = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(b->buf + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

static void put(prom_buf *b, const char *s)
{
    prom_buf_append(b, s, strlen(s));
}

/* ---- Names and escaping ------------------------------------------------------------------ */

static int name_char(char c, int first, int colon)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':'))
        return 1;
    return !first && c >= '0' && c <= '9';
}

int prom_name_ok(const char *name)
{
    if (!name || !*name)
        return 0;
    for (size_t i = 0; name[i]; i++) {
        if (!name_char(name[i], i == 0, 1))
            return 0;
    }
    return 1;
}

int prom_label_name_ok(const char *name)
{
    if (!name || !*name || (name[0] == '_' && name[1] == '_'))
        return 0;
    for (size_t i = 0; name[i]; i++) {
        if (!name_char(name[i], i == 0, 0))
            return 0;
    }
    return 1;
}

/* Appends s escaped: backslash and newline always, the double quote when quote is set. */
static void put_escaped(prom_buf *b, const char *s, int quote)
{
    const char *run = s;

    for (; *s; s++) {
        const char *esc = NULL;

        if (*s == '\\')
            esc = "\\\\";
        else if (*s == '\n')
            esc = "\\n";
        else if (quote && *s == '"')
            esc = "\\\"";
        if (esc) {
            prom_buf_append(b, run, (size_t)(s - run));
            put(b, esc);
            run = s + 1;
        }
    }
    prom_buf_append(b, run, (size_t)(s - run));
}

/* Writes a double in the shortest %g form that reads back exactly. */
static void format_double(char *out, size_t len, double v)
{
    if (isnan(v)) {
        snprintf(out, len, "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(out, len, v > 0 ? "+Inf" : "-Inf");
        return;
    }
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(out, len, "%.*g", prec, v);
        if (strtod(out, NULL) == v)
            return;
    }
}

/* ---- Families and samples ---------------------------------------------------------------- */

void prom_family(prom_buf *b, const char *name, prom_type type, const char *help)
{
    static const char *const types[] = {"counter", "gauge", "histogram"};

    if (!prom_name_ok(name) || (size_t)type >= sizeof(types) / sizeof(types[0])) {
        b->failed = 1;
        return;
    }
    put(b, "# HELP ");
    put(b, name);
    put(b, " ");
    put_escaped(b, help ? help : "", 0);
    put(b, "\n# TYPE ");
    put(b, name);
    put(b, " ");
    put(b, types[type]);
    put(b, "\n");
}

/* Writes `name{labels}` (with an extra `le` label when le is given) and the space before the
 * value. */
static void series(prom_buf *b, const char *name, const char *suffix, const prom_label *labels,
                   size_t nlabels, const char *le)
{
    if (!prom_name_ok(name)) {
        b->failed = 1;
        return;
    }
    put(b, name);
    if (suffix)
        put(b, suffix);
    if (nlabels > 0 || le) {
        put(b, "{");
        for (size_t i = 0; i < nlabels; i++) {
            if (!prom_label_name_ok(labels[i].name)) {
                b->failed = 1;
                return;
            }
            if (i > 0)
                put(b, ",");
            put(b, labels[i].name);
            put(b, "=\"");
            put_escaped(b, labels[i].value ? labels[i].value : "", 1);
            put(b, "\"");
        }
        if (le) {
            put(b, nlabels > 0 ? ",le=\"" : "le=\"");
            put(b, le);
            put(b, "\"");
        }
        put(b, "}");
    }
    put(b, " ");
}

void prom_sample_u64(prom_buf *b, const char *name, const prom_label *labels, size_t nlabels,
                     uint64_t value)
{
    series(b, name, NULL, labels, nlabels, NULL);
    prom_buf_printf(b, "%" PRIu64 "\n", value);
}

void prom_sample_i64(prom_buf *b, const char *name, const prom_label *labels, size_t nlabels,
                     int64_t value)
{
    series(b, name, NULL, labels, nlabels, NULL);
    prom_buf_printf(b, "%" PRId64 "\n", value);
}

void prom_sample_f64(prom_buf *b, const char *name, const prom_label *labels, size_t nlabels,
                     double value)
{
    char num[40];

    format_double(num, sizeof(num), value);
    series(b, name, NULL, labels, nlabels, NULL);
    put(b, num);
    put(b, "\n");
}

/* ---- Histograms -------------------------------------------------------------------------- */

int prom_hist_init(prom_hist *h, const double *bounds, size_t n)
{
    memset(h, 0, sizeof(*h));
    if (n == 0 || n > METRICS_HIST_MAX_BOUNDS)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(bounds[i]) || (i > 0 && !(bounds[i] > bounds[i - 1])))
            return -1;
    }
    memcpy(h->bounds, bounds, n * sizeof(*bounds));
    h->nbounds = n;
    return 0;
}

void prom_hist_observe(prom_hist *h, double v)
{
    size_t i = 0;

    if (isnan(v))
        return;
    while (i < h->nbounds && v > h->bounds[i])
        i++;
    h->counts[i]++;
    h->count++;
    h->sum += v;
}

void prom_hist_write(prom_buf *b, const char *name, const prom_label *labels, size_t nlabels,
                     const prom_hist *h)
{
    char le[40], sum[40];
    uint64_t cum = 0;

    for (size_t i = 0; i <= h->nbounds; i++) {
        cum += h->counts[i];
        if (i < h->nbounds)
            format_double(le, sizeof(le), h->bounds[i]);
        else
            snprintf(le, sizeof(le), "+Inf");
        series(b, name, "_bucket", labels, nlabels, le);
        prom_buf_printf(b, "%" PRIu64 "\n", cum);
    }
    format_double(sum, sizeof(sum), h->sum);
    series(b, name, "_sum", labels, nlabels, NULL);
    put(b, sum);
    put(b, "\n");
    series(b, name, "_count", labels, nlabels, NULL);
    prom_buf_printf(b, "%" PRIu64 "\n", h->count);
}
