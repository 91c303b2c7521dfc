/* SPDX-License-Identifier: MIT */
/*
 * RESP writer: see resp.h (the reader is resp_read.c).
 *
 * The writer appends to a doubling buffer; after an allocation failure it appends nothing more, so
 * a reply is never half-written silently (the caller sees `failed` and closes the client).
 */
#include "server/resp.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/dec.h"
#include "base/grow.h"
#include "sluice/error.h"

#define WR_MIN_BUF  256         /* first writer allocation */
#define WR_KEEP_BUF (64u << 10) /* an emptied writer buffer larger than this is released */

void resp_writer_init(resp_writer *w, int proto)
{
    w->buf = NULL;
    w->len = w->cap = 0;
    w->proto = proto;
    w->failed = 0;
}

void resp_writer_clear(resp_writer *w)
{
    alloc_free(w->buf);
    w->buf = NULL;
    w->len = w->cap = 0;
    w->failed = 0;
}

void resp_writer_consume(resp_writer *w, size_t n)
{
    if (n >= w->len) {
        w->len = 0;
        if (w->cap > WR_KEEP_BUF) {
            alloc_free(w->buf);
            w->buf = NULL;
            w->cap = 0;
        }
        return;
    }
    memmove(w->buf, w->buf + n, w->len - n);
    w->len -= n;
}

/* Makes room for extra more bytes (plus a NUL for vsnprintf). Returns 0, or -1 with failed set. */
static int wr_reserve(resp_writer *w, size_t extra)
{
    if (w->failed)
        return -1;
    if (extra < w->cap - w->len)
        return 0;
    if (extra > SIZE_MAX - w->len - 1 ||
        grow_array(&w->buf, &w->cap, w->len + extra + 1, 1, WR_MIN_BUF) != SLUICE_OK) {
        w->failed = 1;
        return -1;
    }
    return 0;
}

static void wr_raw(resp_writer *w, const char *s, size_t n)
{
    if (wr_reserve(w, n) != 0)
        return;
    if (n > 0)
        memcpy(w->buf + w->len, s, n);
    w->len += n;
}

/* Appends `<type><number>\r\n`. */
static void wr_header(resp_writer *w, char type, int neg, uint64_t magnitude)
{
    char tmp[DEC_MAX + 4];
    size_t n = 0;

    tmp[n++] = type;
    if (neg)
        tmp[n++] = '-';
    n += dec_u64(tmp + n, magnitude);
    tmp[n++] = '\r';
    tmp[n++] = '\n';
    wr_raw(w, tmp, n);
}

/* Appends a line of type `type` with s, CR and LF in it turned into spaces. */
static void wr_line(resp_writer *w, char type, const char *s, size_t n)
{
    size_t at = w->len;

    if (wr_reserve(w, n + 3) != 0)
        return;
    w->buf[at] = type;
    if (n > 0)
        memcpy(w->buf + at + 1, s, n);
    for (size_t i = at + 1; i < at + 1 + n; i++)
        if (w->buf[i] == '\r' || w->buf[i] == '\n')
            w->buf[i] = ' ';
    w->buf[at + 1 + n] = '\r';
    w->buf[at + 2 + n] = '\n';
    w->len = at + n + 3;
}

void resp_simple(resp_writer *w, const char *s)
{
    wr_line(w, '+', s, strlen(s));
}

void resp_error(resp_writer *w, const char *code, const char *fmt, ...)
{
    va_list ap, ap2;
    size_t at = w->len, codelen = code ? strlen(code) : 0;
    int n;

    va_start(ap, fmt);
    va_copy(ap2, ap);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        va_end(ap2);
        w->failed = 1;
        return;
    }
    /* '-' CODE ' ' message CRLF, and the NUL vsnprintf writes. */
    if (wr_reserve(w, 1 + codelen + 1 + (size_t)n + 2) != 0) {
        va_end(ap2);
        return;
    }
    w->buf[at++] = '-';
    if (codelen > 0) {
        memcpy(w->buf + at, code, codelen);
        at += codelen;
        if (n > 0)
            w->buf[at++] = ' ';
    }
    vsnprintf(w->buf + at, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    at += (size_t)n;
    for (size_t i = w->len + 1; i < at; i++)
        if (w->buf[i] == '\r' || w->buf[i] == '\n')
            w->buf[i] = ' ';
    w->buf[at++] = '\r';
    w->buf[at++] = '\n';
    w->len = at;
}

void resp_int(resp_writer *w, int64_t v)
{
    uint64_t m = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;

    wr_header(w, ':', v < 0, m);
}

void resp_bulk(resp_writer *w, const char *s, size_t len)
{
    if (w->failed)
        return;
    wr_header(w, '$', 0, len);
    wr_raw(w, s, len);
    wr_raw(w, "\r\n", 2);
}

void resp_bulk_str(resp_writer *w, const char *s)
{
    if (!s)
        resp_null(w);
    else
        resp_bulk(w, s, strlen(s));
}

void resp_bulk_fmt(resp_writer *w, const char *fmt, ...)
{
    va_list ap, ap2;
    int n;

    if (w->failed)
        return;
    va_start(ap, fmt);
    va_copy(ap2, ap);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        va_end(ap2);
        w->failed = 1;
        return;
    }
    wr_header(w, '$', 0, (uint64_t)n);
    if (wr_reserve(w, (size_t)n + 2) != 0) {
        va_end(ap2);
        return;
    }
    vsnprintf(w->buf + w->len, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    w->len += (size_t)n;
    w->buf[w->len++] = '\r';
    w->buf[w->len++] = '\n';
}

void resp_null(resp_writer *w)
{
    if (w->proto >= 3)
        wr_raw(w, "_\r\n", 3);
    else
        wr_raw(w, "$-1\r\n", 5);
}

void resp_field_int(resp_writer *w, const char *name, int has, int64_t v)
{
    resp_bulk_str(w, name);
    if (has)
        resp_int(w, v);
    else
        resp_null(w);
}

void resp_field_str(resp_writer *w, const char *name, const char *s)
{
    resp_bulk_str(w, name);
    if (s)
        resp_bulk_str(w, s);
    else
        resp_null(w);
}

void resp_array(resp_writer *w, size_t n)
{
    wr_header(w, '*', 0, n);
}

void resp_map(resp_writer *w, size_t n)
{
    if (w->proto >= 3) {
        wr_header(w, '%', 0, n);
    } else if (n > SIZE_MAX / 2) {
        w->failed = 1;
    } else {
        wr_header(w, '*', 0, (uint64_t)n * 2);
    }
}

void resp_bool(resp_writer *w, int v)
{
    if (w->proto >= 3)
        wr_raw(w, v ? "#t\r\n" : "#f\r\n", 4);
    else
        wr_raw(w, v ? ":1\r\n" : ":0\r\n", 4);
}

void resp_double(resp_writer *w, double v)
{
    char tmp[64];
    int n;

    if (isnan(v))
        n = snprintf(tmp, sizeof tmp, "nan");
    else if (isinf(v))
        n = snprintf(tmp, sizeof tmp, "%s", v > 0 ? "inf" : "-inf");
    else
        n = snprintf(tmp, sizeof tmp, "%.17g", v);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        w->failed = 1;
        return;
    }
    if (w->proto >= 3)
        wr_line(w, ',', tmp, (size_t)n);
    else
        resp_bulk(w, tmp, (size_t)n);
}
