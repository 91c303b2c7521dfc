/* SPDX-License-Identifier: MIT */
/*
 * RESP reader: see resp.h (the writer is resp_write.c).
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
 * returns SLUICE_ENOMEM. A negative multibulk count (`*-1`, `*-10`) is a null array: nothing to
 * run, the connection stays (as in Redis). Stricter than Redis: lengths are digits only (no '+',
 * no leading zero, no negative bulk length), a bulk must be followed by CRLF
 * (Redis skips two bytes unchecked), and a too long inline line is refused whether or not its
 * '\n' has arrived.
 */
#include "server/resp.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/grow.h"
#include "base/hex.h"
#include "sluice/error.h"

#define RESP_DEFAULT_MAX_BULK   ((size_t)8 << 20)
#define RESP_DEFAULT_MAX_ARGS   ((size_t)1 << 20)
#define RESP_DEFAULT_MAX_INLINE ((size_t)64 << 10)
#define RESP_DEFAULT_MAX_QUERY  ((size_t)64 << 20)

#define RD_MIN_BUF      1024        /* first buffer allocation */
#define RD_KEEP_BUF     (64u << 10) /* an empty buffer larger than this is released */
#define RD_MIN_ARGV     8           /* first argument-array allocation */
#define RD_KEEP_ARGV    1024        /* argument arrays larger than this are released */
#define RD_ERR_CAPACITY 80

void resp_limits_init(resp_limits *l)
{
    l->max_bulk_len = RESP_DEFAULT_MAX_BULK;
    l->max_args = RESP_DEFAULT_MAX_ARGS;
    l->max_inline_len = RESP_DEFAULT_MAX_INLINE;
    l->max_query_len = RESP_DEFAULT_MAX_QUERY;
}

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
    alloc_free(r->buf);
    alloc_free(r->off);
    alloc_free((void *)r->argv);
    alloc_free(r->argvlen);
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
    r = alloc_malloc(sizeof *r);
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
    alloc_free(r);
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
        alloc_free(r->buf);
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
    if (len > r->cap - r->len &&
        (len > SIZE_MAX - r->len ||
         grow_array(&r->buf, &r->cap, r->len + len, 1, RD_MIN_BUF) != SLUICE_OK))
        return rd_fail(r, SLUICE_ENOMEM, "out of memory");
    memcpy(r->buf + r->len, buf, len);
    r->len += len;
    return SLUICE_OK;
}

/* Outcome of reading a length line. */
enum { LEN_MORE, LEN_OK, LEN_BAD, LEN_BIG };

/* Reads the length line whose type byte ('*' or '$') is at pos: digits only, no leading zero, no
 * sign except, when allow_nil, a '-' before a negative count (any of them is a nil, as Redis skips
 * any negative multibulk count; at most 19 digits so it cannot overflow), at most max, at most
 * max_inline_len characters, then CRLF. On LEN_OK sets *out (-1 for nil) and *end (the offset after
 * the CRLF). The line is re-read from its start on each call; it is refused within about 20 bytes,
 * so that is cheap. */
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
        if (ndigits > 0 && v == 0) /* a leading zero */
            return LEN_BAD;
        if (nil && (ndigits >= 19 || (ndigits == 0 && c == '0'))) /* and no "-0" */
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
    size_t cap_off = r->argv_cap, cap_len = r->argv_cap, cap_argv = r->argv_cap;

    if (r->argc < r->argv_cap)
        return SLUICE_OK;
    /* argv_cap grows only once all three arrays did, so a failure midway leaves a consistent
     * (if partly larger) set. */
    if (grow_array(&r->off, &cap_off, r->argc + 1, sizeof(size_t), RD_MIN_ARGV) != SLUICE_OK ||
        grow_array(&r->argvlen, &cap_len, r->argc + 1, sizeof(size_t), RD_MIN_ARGV) != SLUICE_OK ||
        grow_array(&r->argv, &cap_argv, r->argc + 1, sizeof(char *), RD_MIN_ARGV) != SLUICE_OK)
        return SLUICE_ENOMEM;
    r->argv_cap = cap_argv;
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
                    hex_digit_value((unsigned char)b[i + 2]) >= 0 &&
                    hex_digit_value((unsigned char)b[i + 3]) >= 0) {
                    b[w++] = (char)(hex_digit_value((unsigned char)b[i + 2]) * 16 +
                                    hex_digit_value((unsigned char)b[i + 3]));
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
        alloc_free(r->off);
        alloc_free((void *)r->argv);
        alloc_free(r->argvlen);
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
