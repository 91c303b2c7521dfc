/* SPDX-License-Identifier: MIT */
/*
 * RESP reader and writer: see resp.h.
 *
 * The reader keeps the bytes received in one buffer. A command is parsed where it lies: its
 * arguments are recorded as offsets from the command's first byte, turned into pointers only when
 * the command is complete, and NUL-terminated in place (the '\r' after a bulk, the separator after
 * an inline word). Inline commands are unescaped in place, which is possible because an unescaped
 * argument is never longer than its quoted form. Consumed bytes are dropped (the buffer compacted)
 * at the start of the next resp_reader_feed, which is why a returned command stays valid until
 * then.
 *
 * Invariants:
 * - start <= pos <= len <= cap; bytes before start are consumed, bytes in [start, pos) are the
 *   part of the current command parsed so far (its arguments are off[0..argc));
 * - the parse is resumable: bytes are examined once (a length line, at most ~22 bytes, is
 *   re-read until its CRLF arrives; an inline line is scanned for '\n' from where the last scan
 *   stopped), so feeding a command one byte at a time costs no more than feeding it whole;
 * - every decision depends only on the bytes, never on how they were split: a length is refused
 *   as soon as its digits exceed the limit, a wrong byte as soon as it arrives;
 * - nothing is allocated from a declared length: the buffer grows with the bytes received and the
 *   argument arrays with the arguments received;
 * - once rc != 0 the reader is failed for good and holds no memory but itself.
 *
 * Beyond resp.h: every argument is followed by a NUL byte (not counted in argvlen);
 * resp_reader_next can also return SLUICE_ENOMEM (growing the argument arrays), which fails the
 * reader like a protocol error; resp_reader_feed on a reader failed by a protocol error drops the
 * bytes and returns 0 (the caller is busy sending the error), on one failed by SLUICE_ENOMEM it
 * returns SLUICE_ENOMEM. Stricter than Redis: lengths are digits only (no '+', no leading zero,
 * no negative but `*-1`, where Redis skips any negative count), a bulk must be followed by CRLF
 * (Redis skips two bytes unchecked), and a too long inline line is refused whether or not its
 * '\n' has arrived.
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
#include "sluice/error.h"

#define RESP_DEFAULT_MAX_BULK   ((size_t)8 << 20)
#define RESP_DEFAULT_MAX_ARGS   ((size_t)1 << 20)
#define RESP_DEFAULT_MAX_INLINE ((size_t)64 << 10)
#define RESP_DEFAULT_MAX_QUERY  ((size_t)64 << 20)

#define RD_MIN_BUF      1024        /* first buffer allocation */
#define RD_KEEP_BUF     (64u << 10) /* an empty buffer larger than this is released */
#define RD_MIN_ARGV     8           /* first argument-array allocation */
#define RD_KEEP_ARGV    1024        /* argument arrays larger than this are released */
#define WR_MIN_BUF      256         /* first writer allocation */
#define WR_KEEP_BUF     (64u << 10) /* an emptied writer buffer larger than this is released */
#define RD_ERR_CAPACITY 80

void resp_limits_init(resp_limits *l)
{
    l->max_bulk_len = RESP_DEFAULT_MAX_BULK;
    l->max_args = RESP_DEFAULT_MAX_ARGS;
    l->max_inline_len = RESP_DEFAULT_MAX_INLINE;
    l->max_query_len = RESP_DEFAULT_MAX_QUERY;
}

/* ---- Reader -------------------------------------------------------------------------------- */

/* What the reader expects next. */
typedef enum rd_state {
    RD_START,     /* the first byte of a command */
    RD_COUNT,     /* the rest of a `*<count>\r\n` line (the '*' is at pos) */
    RD_BULK_HDR,  /* a `$<len>\r\n` line */
    RD_BULK_DATA, /* bulk_len bytes and CRLF */
    RD_INLINE,    /* the rest of an inline line */
} rd_state;

struct resp_reader {
    resp_limits lim;           /* current limits (resp_reader_set_limits) */
    char *buf;                 /* received bytes */
    size_t len;                /* bytes in buf */
    size_t cap;                /* bytes allocated for buf */
    size_t start;              /* first byte of the current command; earlier bytes are consumed */
    size_t pos;                /* parse cursor */
    size_t scan;               /* RD_INLINE: [start, scan) holds no '\n' */
    rd_state state;            /* what comes at pos */
    size_t mb_count;           /* declared argument count of the current multibulk */
    size_t mb_left;            /* arguments of it not yet read */
    size_t bulk_len;           /* RD_BULK_DATA: declared length of the argument */
    size_t query_len;          /* argument bytes of the current command so far */
    size_t argc;               /* arguments of the current command so far */
    size_t argv_cap;           /* entries allocated in off, argv and argvlen */
    size_t *off;               /* offset of each argument from start */
    const char **argv;         /* filled from off when a command is complete */
    size_t *argvlen;           /* length of each argument */
    int rc;                    /* 0, or the error that failed the reader */
    char err[RD_ERR_CAPACITY]; /* message of rc */
};

/* The largest length accepted whatever the limits say: small enough that pos + len + 2 cannot
 * overflow and that accumulating one more decimal digit cannot overflow a uint64_t. */
static size_t rd_hard_max(void)
{
    uint64_t m = (uint64_t)1 << 60;

    return (uint64_t)(SIZE_MAX / 4) < m ? SIZE_MAX / 4 : (size_t)m;
}

static size_t min_size(size_t a, size_t b)
{
    return a < b ? a : b;
}

static void rd_release(resp_reader *r)
{
    sluice_free(r->buf);
    sluice_free(r->off);
    sluice_free((void *)r->argv);
    sluice_free(r->argvlen);
    r->buf = NULL;
    r->off = NULL;
    r->argv = NULL;
    r->argvlen = NULL;
    r->len = r->cap = r->start = r->pos = r->scan = 0;
    r->argc = r->argv_cap = 0;
}

/* Fails the reader for good with rc and msg; returns rc. */
static int rd_fail(resp_reader *r, int rc, const char *msg)
{
    r->rc = rc;
    snprintf(r->err, sizeof r->err, "%s", msg);
    rd_release(r);
    return rc;
}

static int rd_fail_expected(resp_reader *r, unsigned char got)
{
    char msg[RD_ERR_CAPACITY];

    /* Redis prints the byte as is; a control byte is shown escaped to keep the message one
     * printable line. */
    if (got >= 0x20 && got < 0x7f)
        snprintf(msg, sizeof msg, "Protocol error: expected '$', got '%c'", got);
    else
        snprintf(msg, sizeof msg, "Protocol error: expected '$', got '\\x%02x'", (unsigned)got);
    return rd_fail(r, SLUICE_EPARSE, msg);
}

int resp_reader_new(const resp_limits *limits, resp_reader **out)
{
    resp_reader *r;

    *out = NULL;
    r = sluice_malloc(sizeof *r);
    if (!r)
        return SLUICE_ENOMEM;
    memset(r, 0, sizeof *r);
    r->state = RD_START;
    resp_reader_set_limits(r, limits);
    *out = r;
    return SLUICE_OK;
}

void resp_reader_free(resp_reader *r)
{
    if (!r)
        return;
    rd_release(r);
    sluice_free(r);
}

void resp_reader_set_limits(resp_reader *r, const resp_limits *limits)
{
    if (limits)
        r->lim = *limits;
    else
        resp_limits_init(&r->lim);
}

const char *resp_reader_error(const resp_reader *r)
{
    return r->rc ? r->err : NULL;
}

size_t resp_reader_buffered(const resp_reader *r)
{
    return r->len - r->start;
}

/* Drops the consumed bytes, and the buffer itself when it is empty and large. */
static void rd_compact(resp_reader *r)
{
    if (r->start > 0) {
        memmove(r->buf, r->buf + r->start, r->len - r->start);
        r->len -= r->start;
        r->pos -= r->start;
        r->scan = r->scan > r->start ? r->scan - r->start : 0;
        r->start = 0;
    }
    if (r->len == 0 && r->cap > RD_KEEP_BUF) {
        sluice_free(r->buf);
        r->buf = NULL;
        r->cap = 0;
    }
}

int resp_reader_feed(resp_reader *r, const char *buf, size_t len)
{
    if (r->rc)
        return r->rc == SLUICE_ENOMEM ? SLUICE_ENOMEM
                                      : SLUICE_OK; /* bytes after an error: dropped */
    if (len == 0)
        return SLUICE_OK;
    rd_compact(r);
    if (len > r->cap - r->len) {
        size_t need, cap;
        char *p;

        if (len > SIZE_MAX - r->len)
            return rd_fail(r, SLUICE_ENOMEM, "out of memory");
        need = r->len + len;
        cap = r->cap < RD_MIN_BUF ? RD_MIN_BUF : r->cap;
        while (cap < need)
            cap = cap > SIZE_MAX / 2 ? need : cap * 2;
        p = sluice_realloc(r->buf, cap);
        if (!p)
            return rd_fail(r, SLUICE_ENOMEM, "out of memory");
        r->buf = p;
        r->cap = cap;
    }
    memcpy(r->buf + r->len, buf, len);
    r->len += len;
    return SLUICE_OK;
}

/* Outcome of reading a length line. */
enum { LEN_MORE, LEN_OK, LEN_BAD, LEN_BIG };

/* Reads the length line whose type byte ('*' or '$') is at pos: digits only, no leading zero, no
 * sign except the `-1` of a nil when allow_nil, at most max, at most max_inline_len characters,
 * then CRLF. On LEN_OK sets *out (-1 for nil) and *end (the offset after the CRLF). The line is
 * re-read from its start on each call; it is refused within about 20 bytes, so that is cheap. */
static int rd_length(const resp_reader *r, int allow_nil, size_t max, int64_t *out, size_t *end)
{
    const unsigned char *p = (const unsigned char *)r->buf + r->pos + 1;
    size_t avail = r->len - r->pos - 1;
    uint64_t v = 0;
    size_t ndigits = 0;
    int nil = 0;

    for (size_t i = 0;; i++) {
        unsigned char c;

        if (i == avail)
            return LEN_MORE;
        c = p[i];
        if (c == '\r') {
            if (ndigits == 0)
                return LEN_BAD;
            if (i + 1 == avail)
                return LEN_MORE;
            if (p[i + 1] != '\n')
                return LEN_BAD;
            *out = nil ? -1 : (int64_t)v;
            *end = r->pos + 1 + i + 2;
            return LEN_OK;
        }
        if (i >= r->lim.max_inline_len)
            return LEN_BIG;
        if (c == '-' && i == 0 && allow_nil) {
            nil = 1;
            continue;
        }
        if (c < '0' || c > '9')
            return LEN_BAD;
        if (nil ? (ndigits > 0 || c != '1') : (ndigits > 0 && v == 0))
            return LEN_BAD;
        v = v * 10 + (uint64_t)(c - '0');
        ndigits++;
        if (!nil && v > max)
            return LEN_BAD;
    }
}

/* Checks the current multibulk, with one more argument of arg_len bytes, against the limits (they
 * may have changed since its header was read). Returns the error message, or NULL. */
static const char *rd_check_multibulk(const resp_reader *r, size_t arg_len)
{
    if (r->mb_count > r->lim.max_args)
        return "Protocol error: invalid multibulk length";
    if (arg_len > r->lim.max_bulk_len)
        return "Protocol error: invalid bulk length";
    if (arg_len > r->lim.max_query_len || r->query_len > r->lim.max_query_len - arg_len)
        return "Protocol error: too big request";
    return NULL;
}

/* Makes room for one more argument. Returns 0 or SLUICE_ENOMEM. */
static int rd_grow_argv(resp_reader *r)
{
    size_t n;
    void *p;

    if (r->argc < r->argv_cap)
        return SLUICE_OK;
    n = r->argv_cap ? r->argv_cap * 2 : RD_MIN_ARGV;
    if (n > SIZE_MAX / sizeof(size_t) || n > SIZE_MAX / sizeof(char *))
        return SLUICE_ENOMEM;
    /* argv_cap grows only once all three arrays did, so a failure midway leaves a consistent
     * (if partly larger) set. */
    p = sluice_realloc(r->off, n * sizeof(size_t));
    if (!p)
        return SLUICE_ENOMEM;
    r->off = p;
    p = sluice_realloc(r->argvlen, n * sizeof(size_t));
    if (!p)
        return SLUICE_ENOMEM;
    r->argvlen = p;
    p = sluice_realloc((void *)r->argv, n * sizeof(char *));
    if (!p)
        return SLUICE_ENOMEM;
    r->argv = p;
    r->argv_cap = n;
    return SLUICE_OK;
}

/* Records an argument of len bytes at absolute offset at. The caller grew the arrays. */
static void rd_push(resp_reader *r, size_t at, size_t len)
{
    r->off[r->argc] = at - r->start;
    r->argvlen[r->argc] = len;
    r->argc++;
    r->query_len += len;
}

/* Hands out the current command and consumes it. Returns 1. */
static int rd_complete(resp_reader *r, resp_command *cmd)
{
    for (size_t i = 0; i < r->argc; i++)
        r->argv[i] = r->buf + r->start + r->off[i];
    cmd->argc = r->argc;
    cmd->argv = r->argv;
    cmd->argvlen = r->argvlen;
    r->start = r->pos;
    r->state = RD_START;
    return 1;
}

static int is_blank(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

static int hex_value(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The byte a backslash escape inside double quotes stands for: \n \r \t \b \a, else itself. */
static char dq_escape(char c)
{
    static const char from[] = "nrtba", to[] = "\n\r\t\b\a";
    const char *p = c ? strchr(from, c) : NULL;

    return p ? to[p - from] : c;
}

/* Splits the inline line [s, e) into arguments, unescaping them in place, as redis-cli quotes
 * them: words separated by blanks; "double quotes" with \n \r \t \b \a \xHH and \<any> escapes;
 * 'single quotes' with \' only; a closing quote must be followed by a blank or the end of line.
 * Each argument is written at w <= i and followed by a NUL that lands on an already-read byte.
 * Returns 0, or a failure of the reader. */
static int rd_split_inline(resp_reader *r, size_t s, size_t e)
{
    char *b = r->buf;
    size_t i = s, w = s;

    for (;;) {
        size_t arg;
        int dq = 0, sq = 0, done = 0;

        while (i < e && is_blank((unsigned char)b[i]))
            i++;
        if (i == e)
            return SLUICE_OK;
        arg = w;
        while (!done) {
            unsigned char c;

            if ((dq || sq) && i == e)
                return rd_fail(r, SLUICE_EPARSE, "Protocol error: unbalanced quotes in request");
            c = i < e ? (unsigned char)b[i] : 0;
            if (dq) {
                if (c == '\\' && i + 3 < e && b[i + 1] == 'x' &&
                    hex_value((unsigned char)b[i + 2]) >= 0 &&
                    hex_value((unsigned char)b[i + 3]) >= 0) {
                    b[w++] = (char)(hex_value((unsigned char)b[i + 2]) * 16 +
                                    hex_value((unsigned char)b[i + 3]));
                    i += 4;
                } else if (c == '\\' && i + 1 < e) {
                    b[w++] = dq_escape(b[i + 1]);
                    i += 2;
                } else if (c == '"') {
                    if (i + 1 < e && !is_blank((unsigned char)b[i + 1]))
                        return rd_fail(r, SLUICE_EPARSE,
                                       "Protocol error: unbalanced quotes in request");
                    done = 1;
                    i++;
                } else {
                    b[w++] = (char)c;
                    i++;
                }
            } else if (sq) {
                if (c == '\\' && i + 1 < e && b[i + 1] == '\'') {
                    b[w++] = '\'';
                    i += 2;
                } else if (c == '\'') {
                    if (i + 1 < e && !is_blank((unsigned char)b[i + 1]))
                        return rd_fail(r, SLUICE_EPARSE,
                                       "Protocol error: unbalanced quotes in request");
                    done = 1;
                    i++;
                } else {
                    b[w++] = (char)c;
                    i++;
                }
            } else if (i == e || is_blank(c)) {
                done = 1;
            } else if (c == '"') {
                dq = 1;
                i++;
            } else if (c == '\'') {
                sq = 1;
                i++;
            } else {
                b[w++] = (char)c;
                i++;
            }
        }
        /* Here i == e or b[i] is a blank; step over it so the NUL below never hides a byte
         * still to be read. */
        if (i < e)
            i++;
        if (r->argc + 1 > r->lim.max_args)
            return rd_fail(r, SLUICE_EPARSE,
                           "Protocol error: too many arguments in inline request");
        if (w - arg > r->lim.max_bulk_len || w - arg > r->lim.max_query_len ||
            r->query_len > r->lim.max_query_len - (w - arg))
            return rd_fail(r, SLUICE_EPARSE, "Protocol error: too big inline request");
        if (rd_grow_argv(r) != SLUICE_OK)
            return rd_fail(r, SLUICE_ENOMEM, "out of memory");
        rd_push(r, arg, w - arg);
        b[w++] = '\0';
    }
}

/* Parses the inline line at start. Returns 1 when it was consumed (argc may be 0: a blank line),
 * 0 when its end has not arrived, or a failure. */
static int rd_inline(resp_reader *r)
{
    const char *nl = memchr(r->buf + r->scan, '\n', r->len - r->scan);
    size_t at, e;
    int rc;

    if (!nl) {
        r->scan = r->len;
        if (r->len - r->start > r->lim.max_inline_len)
            return rd_fail(r, SLUICE_EPARSE, "Protocol error: too big inline request");
        return 0;
    }
    at = (size_t)(nl - r->buf);
    if (at - r->start > r->lim.max_inline_len)
        return rd_fail(r, SLUICE_EPARSE, "Protocol error: too big inline request");
    e = at > r->start && r->buf[at - 1] == '\r' ? at - 1 : at;
    rc = rd_split_inline(r, r->start, e);
    if (rc != SLUICE_OK)
        return rc;
    r->pos = at + 1;
    return 1;
}

/* Starts a new command at pos (there is at least one byte). */
static void rd_begin(resp_reader *r)
{
    r->start = r->pos;
    r->argc = 0;
    r->query_len = 0;
    if (r->argv_cap > RD_KEEP_ARGV) {
        /* A huge command is rare; do not keep its arrays for the life of the connection. */
        sluice_free(r->off);
        sluice_free((void *)r->argv);
        sluice_free(r->argvlen);
        r->off = NULL;
        r->argv = NULL;
        r->argvlen = NULL;
        r->argv_cap = 0;
    }
    if (r->buf[r->pos] == '*') {
        r->state = RD_COUNT;
    } else {
        r->state = RD_INLINE;
        r->scan = r->pos;
    }
}

int resp_reader_next(resp_reader *r, resp_command *cmd)
{
    int64_t n;
    size_t end;
    const char *msg;
    int rc;

    cmd->argc = 0;
    cmd->argv = NULL;
    cmd->argvlen = NULL;
    if (r->rc)
        return r->rc;
    for (;;) {
        switch (r->state) {
        case RD_START:
            if (r->pos == r->len)
                return 0;
            rd_begin(r);
            break;
        case RD_COUNT:
            rc = rd_length(r, 1, min_size(r->lim.max_args, rd_hard_max()), &n, &end);
            if (rc == LEN_MORE)
                return 0;
            if (rc == LEN_BIG)
                return rd_fail(r, SLUICE_EPARSE, "Protocol error: too big mbulk count string");
            if (rc == LEN_BAD)
                return rd_fail(r, SLUICE_EPARSE, "Protocol error: invalid multibulk length");
            r->pos = end;
            if (n <= 0) { /* *0 and *-1: nothing to run, as in Redis */
                r->start = r->pos;
                r->state = RD_START;
                break;
            }
            r->mb_count = r->mb_left = (size_t)n;
            r->state = RD_BULK_HDR;
            break;
        case RD_BULK_HDR:
            if (r->pos == r->len)
                return 0;
            if (r->buf[r->pos] != '$')
                return rd_fail_expected(r, (unsigned char)r->buf[r->pos]);
            rc = rd_length(r, 0, min_size(r->lim.max_bulk_len, rd_hard_max()), &n, &end);
            if (rc == LEN_MORE)
                return 0;
            if (rc == LEN_BIG)
                return rd_fail(r, SLUICE_EPARSE, "Protocol error: too big bulk count string");
            if (rc == LEN_BAD)
                return rd_fail(r, SLUICE_EPARSE, "Protocol error: invalid bulk length");
            msg = rd_check_multibulk(r, (size_t)n);
            if (msg)
                return rd_fail(r, SLUICE_EPARSE, msg);
            r->bulk_len = (size_t)n;
            r->pos = end;
            r->state = RD_BULK_DATA;
            break;
        case RD_BULK_DATA: {
            size_t avail = r->len - r->pos;

            /* The CRLF is checked byte by byte as it arrives, like everything else. */
            if (avail <= r->bulk_len)
                return 0;
            if (r->buf[r->pos + r->bulk_len] != '\r')
                return rd_fail(r, SLUICE_EPARSE, "Protocol error: bulk data not followed by CRLF");
            if (avail == r->bulk_len + 1)
                return 0;
            if (r->buf[r->pos + r->bulk_len + 1] != '\n')
                return rd_fail(r, SLUICE_EPARSE, "Protocol error: bulk data not followed by CRLF");
            msg = rd_check_multibulk(r, r->bulk_len);
            if (msg)
                return rd_fail(r, SLUICE_EPARSE, msg);
            if (rd_grow_argv(r) != SLUICE_OK)
                return rd_fail(r, SLUICE_ENOMEM, "out of memory");
            rd_push(r, r->pos, r->bulk_len);
            r->buf[r->pos + r->bulk_len] = '\0';
            r->pos += r->bulk_len + 2;
            if (--r->mb_left == 0)
                return rd_complete(r, cmd);
            r->state = RD_BULK_HDR;
            break;
        }
        case RD_INLINE:
            rc = rd_inline(r);
            if (rc <= 0)
                return rc;
            if (r->argc > 0)
                return rd_complete(r, cmd);
            r->start = r->pos; /* an empty line */
            r->state = RD_START;
            break;
        }
    }
}

/* ---- Writer -------------------------------------------------------------------------------- */

void resp_writer_init(resp_writer *w, int proto)
{
    w->buf = NULL;
    w->len = w->cap = 0;
    w->proto = proto;
    w->failed = 0;
}

void resp_writer_clear(resp_writer *w)
{
    sluice_free(w->buf);
    w->buf = NULL;
    w->len = w->cap = 0;
    w->failed = 0;
}

void resp_writer_consume(resp_writer *w, size_t n)
{
    if (n >= w->len) {
        w->len = 0;
        if (w->cap > WR_KEEP_BUF) {
            sluice_free(w->buf);
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
    size_t need, cap;
    char *p;

    if (w->failed)
        return -1;
    if (extra < w->cap - w->len)
        return 0;
    if (extra > SIZE_MAX - w->len - 1) {
        w->failed = 1;
        return -1;
    }
    need = w->len + extra + 1;
    cap = w->cap < WR_MIN_BUF ? WR_MIN_BUF : w->cap;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    p = sluice_realloc(w->buf, cap);
    if (!p) {
        w->failed = 1;
        return -1;
    }
    w->buf = p;
    w->cap = cap;
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

/* Writes the decimal digits of v at the end of tmp[22]; returns where they start. */
static char *fmt_u64(char *end, uint64_t v)
{
    char *p = end;

    do {
        *--p = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0);
    return p;
}

/* Appends `<type><number>\r\n`. */
static void wr_header(resp_writer *w, char type, int neg, uint64_t magnitude)
{
    char tmp[32];
    char *end = tmp + sizeof tmp - 2;
    char *p = fmt_u64(end, magnitude);

    end[0] = '\r';
    end[1] = '\n';
    if (neg)
        *--p = '-';
    *--p = type;
    wr_raw(w, p, (size_t)(tmp + sizeof tmp - p));
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
