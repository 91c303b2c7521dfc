/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the RESP reader and writer (src/server/resp_read.c, resp_write.c).
 *
 * The reader is checked on every request form (multibulk, inline with its quoting rules, empty
 * lines, `*0`/`*-1`), on pipelines, binary arguments, and on the protocol abuses Redis's own
 * protocol tests send (wrong headers, negative, huge and non-numeric lengths, NUL bytes, unbalanced
 * arrays, desync garbage), each with Redis's error wording and the error staying put. A property
 * test generates random command streams and checks that the same commands come out whatever the
 * split of the bytes into reads, one byte at a time included. Huge declared lengths are checked to
 * cost no memory with an allocator that records the largest request. The writer is checked byte
 * for byte for every type in RESP2 and RESP3. Both get an out-of-memory sweep.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "server/resp.h"
#include "sluice/alloc.h"
#include "sluice/error.h"
#include "testutil.h"

/* ---- Helpers ------------------------------------------------------------------------------- */

/* A growable byte string (test side, plain malloc). */
typedef struct bytes {
    char *p;
    size_t len, cap;
} bytes;

static void bytes_put(bytes *b, const void *s, size_t n)
{
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;

        while (cap < b->len + n)
            cap *= 2;
        b->p = realloc(b->p, cap);
        assert_non_null(b->p);
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void bytes_str(bytes *b, const char *s)
{
    bytes_put(b, s, strlen(s));
}

static void bytes_free(bytes *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* Appends a command to a log as `argc|len:bytes|len:bytes...\n` (unambiguous). */
static void log_cmd(bytes *log, size_t argc, const char *const *argv, const size_t *argvlen)
{
    char tmp[48];

    snprintf(tmp, sizeof tmp, "%zu", argc);
    bytes_str(log, tmp);
    for (size_t i = 0; i < argc; i++) {
        snprintf(tmp, sizeof tmp, "|%zu:", argvlen[i]);
        bytes_str(log, tmp);
        bytes_put(log, argv[i], argvlen[i]);
    }
    bytes_str(log, "\n");
}

/* Reads every complete command into log; returns the last code of resp_reader_next (0 or < 0).
 * Checks that each argument is NUL-terminated. */
static int drain(resp_reader *r, bytes *log)
{
    resp_command cmd;
    int rc;

    while ((rc = resp_reader_next(r, &cmd)) == 1) {
        assert_true(cmd.argc >= 1);
        for (size_t i = 0; i < cmd.argc; i++)
            assert_int_equal(cmd.argv[i][cmd.argvlen[i]], '\0');
        log_cmd(log, cmd.argc, cmd.argv, cmd.argvlen);
    }
    if (rc != 0)
        assert_null(cmd.argv);
    return rc;
}

static resp_reader *reader_new(const resp_limits *lim)
{
    resp_reader *r = NULL;

    assert_int_equal(resp_reader_new(lim, &r), SLUICE_OK);
    assert_non_null(r);
    return r;
}

/* Feeds a NUL-terminated string (no NUL inside). */
static void feed_str(resp_reader *r, const char *s)
{
    assert_int_equal(resp_reader_feed(r, s, strlen(s)), SLUICE_OK);
}

/* Feeds n bytes whole and reads them into log; returns the last code of resp_reader_next. */
static int read_whole(resp_reader *r, const char *s, size_t n, bytes *log)
{
    assert_int_equal(resp_reader_feed(r, s, n), SLUICE_OK);
    return drain(r, log);
}

/* Expects exactly the commands described by expect[0..expect_len) (the log format) from s[0..n)
 * fed whole, then one byte at a time, and no error. */
static void expect_log(const char *s, size_t n, const char *expect, size_t expect_len)
{
    for (int bytewise = 0; bytewise < 2; bytewise++) {
        resp_reader *r = reader_new(NULL);
        bytes log = {0};
        int rc = 0;

        if (bytewise) {
            for (size_t i = 0; i < n && rc == 0; i++) {
                assert_int_equal(resp_reader_feed(r, s + i, 1), SLUICE_OK);
                rc = drain(r, &log);
            }
        } else {
            rc = read_whole(r, s, n, &log);
        }
        assert_int_equal(rc, 0);
        assert_int_equal(log.len, expect_len);
        if (expect_len)
            assert_memory_equal(log.p, expect, expect_len);
        bytes_free(&log);
        resp_reader_free(r);
    }
}

#define EXPECT(lit, expect) expect_log(lit, sizeof(lit) - 1, expect, sizeof(expect) - 1)

/* Expects the input (fed whole, then one byte at a time) to fail with msg, after the commands
 * in `expect`; and the error to stay. */
static void expect_error_n(const char *s, size_t n, const resp_limits *lim, const char *expect,
                           const char *msg)
{
    for (int bytewise = 0; bytewise < 2; bytewise++) {
        resp_reader *r = reader_new(lim);
        bytes log = {0};
        resp_command cmd;
        int rc = 0;

        if (bytewise) {
            for (size_t i = 0; i < n && rc == 0; i++) {
                assert_int_equal(resp_reader_feed(r, s + i, 1), SLUICE_OK);
                rc = drain(r, &log);
            }
        } else {
            rc = read_whole(r, s, n, &log);
        }
        assert_int_equal(rc, SLUICE_EPARSE);
        assert_non_null(resp_reader_error(r));
        assert_string_equal(resp_reader_error(r), msg);
        bytes_put(&log, "", 1);
        assert_string_equal(log.p, expect);
        /* Sticky: more calls, more bytes, valid or not, change nothing. */
        assert_int_equal(resp_reader_next(r, &cmd), SLUICE_EPARSE);
        feed_str(r, "PING\r\n");
        assert_int_equal(resp_reader_next(r, &cmd), SLUICE_EPARSE);
        assert_int_equal(cmd.argc, 0);
        assert_string_equal(resp_reader_error(r), msg);
        assert_int_equal(resp_reader_buffered(r), 0);
        bytes_free(&log);
        resp_reader_free(r);
    }
}

#define EXPECT_ERROR(lit, msg)               expect_error_n(lit, sizeof(lit) - 1, NULL, "", msg)
#define EXPECT_ERROR_AFTER(lit, expect, msg) expect_error_n(lit, sizeof(lit) - 1, NULL, expect, msg)

/* ---- Request forms ------------------------------------------------------------------------- */

static void test_multibulk(void **state)
{
    (void)state;
    EXPECT("*2\r\n$4\r\nPING\r\n$2\r\nhi\r\n", "2|4:PING|2:hi\n");
    EXPECT("*1\r\n$0\r\n\r\n", "1|0:\n");
    EXPECT("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\n0123456789\r\n", "3|3:SET|1:k|10:0123456789\n");
    /* Arguments that look like protocol are just bytes. */
    EXPECT("*2\r\n$4\r\n*1\r\n\r\n$4\r\n$-1\n\r\n", "2|4:*1\r\n|4:$-1\n\n");
    /* Incomplete: nothing yet, and nothing is lost. */
    EXPECT("*2\r\n$4\r\nPING\r\n$2\r\nh", "");
}

static void test_multibulk_binary(void **state)
{
    static const char in[] = "*2\r\n$5\r\na\0b\r\n\r\n$3\r\n\0\0\0\r\n";
    resp_reader *r = reader_new(NULL);
    resp_command cmd;

    (void)state;
    assert_int_equal(resp_reader_feed(r, in, sizeof in - 1), SLUICE_OK);
    assert_int_equal(resp_reader_next(r, &cmd), 1);
    assert_int_equal(cmd.argc, 2);
    assert_int_equal(cmd.argvlen[0], 5);
    assert_memory_equal(cmd.argv[0], "a\0b\r\n", 5);
    assert_int_equal(cmd.argvlen[1], 3);
    assert_memory_equal(cmd.argv[1], "\0\0\0", 3);
    assert_int_equal(cmd.argv[0][5], '\0');
    assert_int_equal(resp_reader_next(r, &cmd), 0);
    assert_int_equal(resp_reader_buffered(r), 0);
    resp_reader_free(r);
}

static void test_inline(void **state)
{
    (void)state;
    EXPECT("PING\r\n", "1|4:PING\n");
    EXPECT("PING\n", "1|4:PING\n");
    EXPECT("  SET\tk   v \t\r\n", "3|3:SET|1:k|1:v\n");
    EXPECT("ECHO a\rb\r\n", "3|4:ECHO|1:a|1:b\n");
    /* Bytes other than blanks and quotes, NUL included, are word bytes. */
    EXPECT("ECHO a\0b\n", "2|4:ECHO|3:a\0b\n");
    EXPECT("$3\r\nfoo\r\n", "1|2:$3\n1|3:foo\n");
    /* No end of line yet. */
    EXPECT("PING", "");
}

static void test_inline_quotes(void **state)
{
    (void)state;
    EXPECT("SET \"a b\" 'c d'\r\n", "3|3:SET|3:a b|3:c d\n");
    EXPECT("ECHO \"\"\r\n", "2|4:ECHO|0:\n");
    EXPECT("ECHO ''\r\n", "2|4:ECHO|0:\n");
    EXPECT("ECHO \"\\x41\\x6a\\n\\r\\t\\b\\a\\\"\\\\\\q\"\r\n", "2|4:ECHO|10:Aj\n\r\t\b\a\"\\q\n");
    EXPECT("ECHO \"\\x00\\xFF\"\n", "2|4:ECHO|2:\0\xff\n");
    /* Not an \xHH escape: the x stands for itself. */
    EXPECT("ECHO \"\\xZZ\" \"\\x4\"\n", "3|4:ECHO|3:xZZ|2:x4\n");
    EXPECT("ECHO 'it\\'s' 'a\\nb' 'x\"y'\r\n", "4|4:ECHO|4:it's|4:a\\nb|3:x\"y\n");
    EXPECT("ECHO \"it's\"\r\n", "2|4:ECHO|4:it's\n");
    /* A quote inside a word starts a quoted part of the same word. */
    EXPECT("ECHO ab\"c d\"\r\n", "2|4:ECHO|5:abc d\n");
    EXPECT("ECHO \"a\"\t'b'\n", "3|4:ECHO|1:a|1:b\n");
}

static void test_inline_unbalanced(void **state)
{
    (void)state;
    EXPECT_ERROR("ECHO \"abc\r\n", "Protocol error: unbalanced quotes in request");
    EXPECT_ERROR("ECHO 'abc\r\n", "Protocol error: unbalanced quotes in request");
    EXPECT_ERROR("ECHO \"abc\\\"\r\n", "Protocol error: unbalanced quotes in request");
    EXPECT_ERROR("ECHO \"a\"b\r\n", "Protocol error: unbalanced quotes in request");
    EXPECT_ERROR("ECHO 'a'b\r\n", "Protocol error: unbalanced quotes in request");
    EXPECT_ERROR("ECHO \"abc\\\r\n", "Protocol error: unbalanced quotes in request");
    /* The commands before the bad line come out first. */
    EXPECT_ERROR_AFTER("PING\r\nECHO \"x\n", "1|4:PING\n",
                       "Protocol error: unbalanced quotes in request");
}

static void test_empty_skipped(void **state)
{
    (void)state;
    EXPECT("\r\n\n  \r\n\t\nPING\r\n", "1|4:PING\n");
    EXPECT("*0\r\n*-1\r\n*0\r\nPING\r\n", "1|4:PING\n");
    /* Any negative count is a null array, as in Redis: skipped, the connection stays. */
    EXPECT("*-10\r\n*-12\r\nPING\r\n*-9223372036854775808\r\n", "1|4:PING\n");
    EXPECT("*0\r\n", "");
    EXPECT("\r\n", "");
}

static void test_pipeline(void **state)
{
    static const char in[] = "*1\r\n$4\r\nPING\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$1\r\nx\r\n"
                             "\r\nECHO \"y z\"\n*0\r\n*1\r\n$4\r\nQUIT\r\n";
    resp_reader *r = reader_new(NULL);
    bytes log = {0};

    (void)state;
    EXPECT(in, "1|4:PING\n1|4:PING\n2|4:ECHO|1:x\n2|4:ECHO|3:y z\n1|4:QUIT\n");
    /* Commands are handed out one per call, and each stays valid until the next call. */
    assert_int_equal(resp_reader_feed(r, in, sizeof in - 1), SLUICE_OK);
    assert_int_equal(resp_reader_buffered(r), sizeof in - 1);
    for (int i = 0; i < 5; i++) {
        resp_command cmd;

        assert_int_equal(resp_reader_next(r, &cmd), 1);
        assert_true(cmd.argc >= 1);
    }
    assert_int_equal(drain(r, &log), 0);
    assert_int_equal(log.len, 0);
    assert_int_equal(resp_reader_buffered(r), 0);
    bytes_free(&log);
    resp_reader_free(r);
}

static void test_buffered_counts_unconsumed(void **state)
{
    resp_reader *r = reader_new(NULL);
    resp_command cmd;

    (void)state;
    assert_int_equal(resp_reader_buffered(r), 0);
    feed_str(r, "PING\r\n*1\r\n$4\r\nPI");
    assert_int_equal(resp_reader_buffered(r), 16);
    assert_int_equal(resp_reader_next(r, &cmd), 1);
    assert_int_equal(resp_reader_buffered(r), 10);
    assert_int_equal(resp_reader_next(r, &cmd), 0);
    assert_int_equal(resp_reader_buffered(r), 10);
    feed_str(r, "NG\r\n");
    assert_int_equal(resp_reader_next(r, &cmd), 1);
    assert_int_equal(cmd.argc, 1);
    assert_memory_equal(cmd.argv[0], "PING", 4);
    assert_int_equal(resp_reader_buffered(r), 0);
    resp_reader_free(r);
}

/* A 1 MiB argument arriving in 4 KiB reads, and a command of 3000 arguments. */
static void test_large(void **state)
{
    const size_t n = (size_t)1 << 20;
    char *big = malloc(n);
    bytes in = {0};
    resp_reader *r = reader_new(NULL);
    resp_command cmd;
    int rc = 0;

    (void)state;
    assert_non_null(big);
    for (size_t i = 0; i < n; i++)
        big[i] = (char)(i * 7 + 3);
    bytes_str(&in, "*2\r\n$3\r\nSET\r\n$1048576\r\n");
    bytes_put(&in, big, n);
    bytes_str(&in, "\r\n*3000\r\n");
    for (int i = 0; i < 3000; i++)
        bytes_str(&in, i % 2 ? "$0\r\n\r\n" : "$1\r\nx\r\n");
    bytes_str(&in, "PING\r\n");
    for (size_t at = 0; at < in.len; at += 4096) {
        size_t chunk = in.len - at < 4096 ? in.len - at : 4096;

        assert_int_equal(resp_reader_feed(r, in.p + at, chunk), SLUICE_OK);
        while ((rc = resp_reader_next(r, &cmd)) == 1) {
            if (cmd.argc == 2) {
                assert_int_equal(cmd.argvlen[1], n);
                assert_memory_equal(cmd.argv[1], big, n);
            } else if (cmd.argc == 3000) {
                assert_int_equal(cmd.argvlen[2999], 0);
                assert_int_equal(cmd.argvlen[2998], 1);
            } else {
                assert_int_equal(cmd.argc, 1);
                assert_memory_equal(cmd.argv[0], "PING", 4);
            }
        }
        assert_int_equal(rc, 0);
    }
    assert_int_equal(resp_reader_buffered(r), 0);
    bytes_free(&in);
    free(big);
    resp_reader_free(r);
}

/* ---- Property: any split gives the same commands -------------------------------------------- */

/* Appends a random command to `in` in a random form and its log line to `expect`. */
static void gen_command(test_rng *g, bytes *in, bytes *expect)
{
    size_t argc = (size_t)rng_range(g, 1, 6);
    char *argv[6];
    size_t argvlen[6];
    int form = (int)rng_range(g, 0, 9); /* 0-5 multibulk, 6-7 plain inline, 8-9 quoted inline */
    char tmp[32];

    for (size_t i = 0; i < argc; i++) {
        size_t len =
            (size_t)(rng_range(g, 0, 9) == 0 ? rng_range(g, 0, 3000) : rng_range(g, 0, 12));

        if (form >= 6 && len > 500)
            len = 500; /* keep inline lines under max_inline_len */
        if (form >= 6 && form <= 7 && len == 0)
            len = 1; /* a plain inline word is never empty */
        argv[i] = malloc(len + 1);
        assert_non_null(argv[i]);
        for (size_t j = 0; j < len; j++) {
            if (form >= 6 && form <= 7)
                argv[i][j] = (char)('a' + rng_range(g, 0, 25));
            else
                argv[i][j] = (char)rng_range(g, 0, 255);
        }
        argvlen[i] = len;
    }
    if (form <= 5) {
        snprintf(tmp, sizeof tmp, "*%zu\r\n", argc);
        bytes_str(in, tmp);
        for (size_t i = 0; i < argc; i++) {
            snprintf(tmp, sizeof tmp, "$%zu\r\n", argvlen[i]);
            bytes_str(in, tmp);
            bytes_put(in, argv[i], argvlen[i]);
            bytes_str(in, "\r\n");
        }
    } else {
        for (size_t i = 0; i < argc; i++) {
            bytes_str(in, i ? " " : "");
            if (form <= 7) {
                bytes_put(in, argv[i], argvlen[i]);
                continue;
            }
            bytes_str(in, "\"");
            for (size_t j = 0; j < argvlen[i]; j++) {
                unsigned char c = (unsigned char)argv[i][j];

                if ((c >= 'a' && c <= 'z') || c == ' ' || c == '\'') {
                    bytes_put(in, &argv[i][j], 1);
                } else if (c == '\n') {
                    bytes_str(in, "\\n");
                } else {
                    snprintf(tmp, sizeof tmp, "\\x%02x", c);
                    bytes_str(in, tmp);
                }
            }
            bytes_str(in, "\"");
        }
        bytes_str(in, rng_range(g, 0, 1) ? "\r\n" : "\n");
    }
    log_cmd(expect, argc, (const char *const *)argv, argvlen);
    for (size_t i = 0; i < argc; i++)
        free(argv[i]);
    /* Sometimes something that must be skipped. */
    switch (rng_range(g, 0, 15)) {
    case 0:
        bytes_str(in, "\r\n");
        break;
    case 1:
        bytes_str(in, "*0\r\n");
        break;
    case 2:
        bytes_str(in, "*-1\r\n");
        break;
    case 3:
        bytes_str(in, " \t \n");
        break;
    default:
        break;
    }
}

static void test_random_splits(void **state)
{
    (void)state;
    for (uint64_t seed = 1; seed <= 300; seed++) {
        test_rng g;
        bytes in = {0}, expect = {0}, got = {0};
        resp_reader *r = reader_new(NULL);
        int style, ncommands;
        size_t at = 0;

        rng_seed(&g, seed);
        ncommands = (int)rng_range(&g, 1, 40);
        for (int i = 0; i < ncommands; i++)
            gen_command(&g, &in, &expect);
        style = (int)(seed % 4); /* 0 bytewise, 1 small chunks, 2 large chunks, 3 lazy drain */
        while (at < in.len) {
            size_t chunk = style == 0   ? 1
                           : style == 2 ? (size_t)rng_range(&g, 1, 5000)
                                        : (size_t)rng_range(&g, 1, 40);

            if (chunk > in.len - at)
                chunk = in.len - at;
            assert_int_equal(resp_reader_feed(r, in.p + at, chunk), SLUICE_OK);
            at += chunk;
            if (style == 3 && rng_range(&g, 0, 2) != 0 && at < in.len)
                continue; /* let bytes pile up across reads */
            assert_int_equal(drain(r, &got), 0);
        }
        assert_int_equal(resp_reader_buffered(r), 0);
        assert_int_equal(got.len, expect.len);
        assert_memory_equal(got.p, expect.p, expect.len);
        bytes_free(&in);
        bytes_free(&expect);
        bytes_free(&got);
        resp_reader_free(r);
    }
}

/* ---- Abuse --------------------------------------------------------------------------------- */

static void test_bad_multibulk_length(void **state)
{
    static const char *const bad[] = {
        "*-0\r\n",
        "*-\r\n",
        "*--1\r\n",
        "*-1-\r\n",
        "*-012\r\n",
        "*-12345678901234567890\r\n",
        "*+1\r\n",
        "* 1\r\n",
        "*1 \r\n",
        "*01\r\n",
        "*00\r\n",
        "*\r\n",
        "*abc\r\n",
        "*1x\r\n",
        "*1\rX",
        "*1\n",
        "*1048577\r\n",
        "*99999999999999999999999999\r\n",
        "*18446744073709551617\r\n",
    };

    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_error_n(bad[i], strlen(bad[i]), NULL, "",
                       "Protocol error: invalid multibulk length");
    /* NUL bytes in a length (Redis's desync regression). */
    expect_error_n("*\0\r\n", 4, NULL, "", "Protocol error: invalid multibulk length");
    expect_error_n("*1\0\r\n", 5, NULL, "", "Protocol error: invalid multibulk length");
    /* Exactly max_args is fine. */
    EXPECT("*1048576\r\n", "");
}

static void test_bad_bulk_length(void **state)
{
    static const char *const bad[] = {
        "*1\r\n$-1\r\n",
        "*1\r\n$-10\r\n",
        "*1\r\n$+1\r\n",
        "*1\r\n$\r\n",
        "*1\r\n$blabla\r\n",
        "*1\r\n$01\r\n",
        "*1\r\n$1 \r\n",
        "*1\r\n$1\rx",
        "*1\r\n$2147483648\r\n",
        "*1\r\n$8388609\r\n",
        "*1\r\n$99999999999999999999999\r\n",
        "*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$2000000000\r\n",
        "*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$-10\r\n",
    };

    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        expect_error_n(bad[i], strlen(bad[i]), NULL, "", "Protocol error: invalid bulk length");
    expect_error_n("*1\r\n$1\0\r\n", 9, NULL, "", "Protocol error: invalid bulk length");
    expect_error_n("*1\r\n$\0", 6, NULL, "", "Protocol error: invalid bulk length");
}

/* A length over the limit is refused as soon as its digits show it, before any CRLF. */
static void test_refused_at_once(void **state)
{
    resp_reader *r = reader_new(NULL);
    resp_command cmd;

    (void)state;
    feed_str(r, "*1048577");
    assert_int_equal(resp_reader_next(r, &cmd), SLUICE_EPARSE);
    assert_string_equal(resp_reader_error(r), "Protocol error: invalid multibulk length");
    resp_reader_free(r);

    r = reader_new(NULL);
    feed_str(r, "*1\r\n$2147483648");
    assert_int_equal(resp_reader_next(r, &cmd), SLUICE_EPARSE);
    assert_string_equal(resp_reader_error(r), "Protocol error: invalid bulk length");
    resp_reader_free(r);

    /* A valid prefix waits. */
    r = reader_new(NULL);
    feed_str(r, "*1\r\n$838860");
    assert_int_equal(resp_reader_next(r, &cmd), 0);
    resp_reader_free(r);
}

static void test_expected_dollar(void **state)
{
    (void)state;
    EXPECT_ERROR("*1\r\nfoo\r\n", "Protocol error: expected '$', got 'f'");
    EXPECT_ERROR("*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n", "Protocol error: expected '$', got 'f'");
    /* An array that says 3 but holds 2: the next command's '*' is not an argument. */
    EXPECT_ERROR("*3\r\n$1\r\na\r\n$1\r\nb\r\n*1\r\n$1\r\nc\r\n",
                 "Protocol error: expected '$', got '*'");
    /* Unprintable bytes are shown escaped so the message stays one line. */
    expect_error_n("*1\r\n\0", 5, NULL, "", "Protocol error: expected '$', got '\\x00'");
    EXPECT_ERROR("*1\r\n\r\n", "Protocol error: expected '$', got '\\x0d'");
    EXPECT_ERROR_AFTER("PING\r\n*2\r\n$1\r\na\r\n:1\r\n", "1|4:PING\n",
                       "Protocol error: expected '$', got ':'");
}

static void test_bulk_crlf(void **state)
{
    (void)state;
    EXPECT_ERROR("*1\r\n$1\r\nab\r\n", "Protocol error: bulk data not followed by CRLF");
    EXPECT_ERROR("*1\r\n$1\r\na\rX", "Protocol error: bulk data not followed by CRLF");
    EXPECT_ERROR("*1\r\n$1\r\na\n\r", "Protocol error: bulk data not followed by CRLF");
    EXPECT_ERROR("*1\r\n$0\r\nx", "Protocol error: bulk data not followed by CRLF");
}

static void test_too_big_inline(void **state)
{
    const size_t max = (size_t)64 << 10;
    char *line = malloc(max + 2);

    (void)state;
    assert_non_null(line);
    /* A line of exactly max bytes (before its '\n') is fine; one more byte is not. */
    memset(line, 'a', max);
    line[max] = '\n';
    {
        resp_reader *r = reader_new(NULL);
        resp_command cmd;

        assert_int_equal(resp_reader_feed(r, line, max + 1), SLUICE_OK);
        assert_int_equal(resp_reader_next(r, &cmd), 1);
        assert_int_equal(cmd.argc, 1);
        assert_int_equal(cmd.argvlen[0], max);
        resp_reader_free(r);
    }
    memset(line, 'a', max + 1);
    line[max + 1] = '\n';
    expect_error_n(line, max + 2, NULL, "", "Protocol error: too big inline request");
    /* Without any '\n' at all, as soon as there are more than max bytes. */
    expect_error_n(line, max + 1, NULL, "", "Protocol error: too big inline request");
    free(line);
}

/* Redis's "protocol desync" regression: garbage without a newline must end in an error, not in
 * a buffer growing for ever. */
static void test_desync(void **state)
{
    static const char *const starts[] = {"\0", "*\0", "$\0"};
    static const size_t start_len[] = {1, 2, 2};
    static const char *const msgs[] = {"Protocol error: too big inline request",
                                       "Protocol error: invalid multibulk length",
                                       "Protocol error: too big inline request"};

    (void)state;
    for (size_t k = 0; k < 3; k++) {
        resp_reader *r = reader_new(NULL);
        resp_command cmd;
        int rc = 0;

        assert_int_equal(resp_reader_feed(r, starts[k], start_len[k]), SLUICE_OK);
        for (int i = 0; i < 200 && rc == 0; i++) {
            char payload[1025];

            memset(payload, 'A', 1024);
            payload[1024] = 'x';
            assert_int_equal(resp_reader_feed(r, payload, sizeof payload), SLUICE_OK);
            assert_true(resp_reader_buffered(r) <= ((size_t)64 << 10) + sizeof payload + 2);
            rc = resp_reader_next(r, &cmd);
        }
        assert_int_equal(rc, SLUICE_EPARSE);
        assert_string_equal(resp_reader_error(r), msgs[k]);
        resp_reader_free(r);
    }
}

static void test_limits(void **state)
{
    resp_limits tight;

    (void)state;
    resp_limits_init(&tight);
    tight.max_args = 3;
    tight.max_bulk_len = 5;
    tight.max_inline_len = 12;
    tight.max_query_len = 8;

    expect_error_n("*4\r\n", 4, &tight, "", "Protocol error: invalid multibulk length");
    expect_error_n("*1\r\n$6\r\n", 8, &tight, "", "Protocol error: invalid bulk length");
    expect_error_n("*2\r\n$5\r\nabcde\r\n$4\r\n", 19, &tight, "",
                   "Protocol error: too big request");
    expect_error_n("a b c d\r\n", 9, &tight, "",
                   "Protocol error: too many arguments in inline request");
    expect_error_n("abcdef\r\n", 8, &tight, "", "Protocol error: too big inline request");
    expect_error_n("abc de fghi\r\n", 13, &tight, "", "Protocol error: too big inline request");
    expect_error_n("abcdefghijklm", 13, &tight, "", "Protocol error: too big inline request");
    /* Length lines are bounded by max_inline_len too, with Redis's messages. */
    tight.max_inline_len = 2;
    tight.max_args = 1000;
    tight.max_bulk_len = 1000;
    tight.max_query_len = 1000;
    expect_error_n("*100\r\n", 6, &tight, "", "Protocol error: too big mbulk count string");
    expect_error_n("*1\r\n$100\r\n", 10, &tight, "", "Protocol error: too big bulk count string");
    {
        resp_reader *r = reader_new(&tight);
        resp_command cmd;

        feed_str(r, "*10\r\n$10\r\n"); /* two characters each: fine */
        assert_int_equal(resp_reader_next(r, &cmd), 0);
        resp_reader_free(r);
    }
}

/* Limits changed on a live reader apply from the next byte parsed on, even mid-command. */
static void test_limits_live(void **state)
{
    resp_limits tight, wide;
    resp_reader *r;
    resp_command cmd;

    (void)state;
    resp_limits_init(&wide);
    resp_limits_init(&tight);
    tight.max_args = 2;
    tight.max_bulk_len = 4;

    r = reader_new(&tight);
    feed_str(r, "*2\r\n$4\r\nAUTH\r\n$4\r\npass\r\n");
    assert_int_equal(resp_reader_next(r, &cmd), 1);
    assert_int_equal(cmd.argc, 2);
    resp_reader_set_limits(r, &wide);
    feed_str(r, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$6\r\nvalue!\r\n");
    assert_int_equal(resp_reader_next(r, &cmd), 1);
    assert_int_equal(cmd.argc, 3);
    assert_int_equal(cmd.argvlen[2], 6);
    /* Tightened between a header and its data: the data is refused. */
    feed_str(r, "*1\r\n$6\r\nab");
    assert_int_equal(resp_reader_next(r, &cmd), 0);
    resp_reader_set_limits(r, &tight);
    feed_str(r, "cdef\r\n");
    assert_int_equal(resp_reader_next(r, &cmd), SLUICE_EPARSE);
    assert_string_equal(resp_reader_error(r), "Protocol error: invalid bulk length");
    resp_reader_free(r);

    /* Tightened after a count was accepted: the next argument is refused. */
    r = reader_new(&wide);
    feed_str(r, "*3\r\n$1\r\na\r\n");
    assert_int_equal(resp_reader_next(r, &cmd), 0);
    resp_reader_set_limits(r, &tight);
    feed_str(r, "$1\r\n");
    assert_int_equal(resp_reader_next(r, &cmd), SLUICE_EPARSE);
    assert_string_equal(resp_reader_error(r), "Protocol error: invalid multibulk length");
    resp_reader_free(r);

    /* NULL restores the defaults. */
    r = reader_new(&tight);
    resp_reader_set_limits(r, NULL);
    feed_str(r, "a b c d e\r\n");
    assert_int_equal(resp_reader_next(r, &cmd), 1);
    assert_int_equal(cmd.argc, 5);
    resp_reader_free(r);
}

static void test_error_sticky(void **state)
{
    resp_reader *r = reader_new(NULL);
    resp_command cmd;
    const char *msg;

    (void)state;
    assert_null(resp_reader_error(r));
    feed_str(r, "PING\r\n*x\r\nPING\r\n");
    assert_int_equal(resp_reader_next(r, &cmd), 1);
    assert_int_equal(resp_reader_next(r, &cmd), SLUICE_EPARSE);
    msg = resp_reader_error(r);
    assert_string_equal(msg, "Protocol error: invalid multibulk length");
    for (int i = 0; i < 3; i++) {
        feed_str(r, "*1\r\n$4\r\nPING\r\n");
        assert_int_equal(resp_reader_next(r, &cmd), SLUICE_EPARSE);
        assert_int_equal(cmd.argc, 0);
        assert_null(cmd.argv);
        assert_string_equal(resp_reader_error(r), "Protocol error: invalid multibulk length");
    }
    resp_reader_free(r);
    resp_reader_free(NULL);
}

/* ---- Memory -------------------------------------------------------------------------------- */

/* An allocator that records the largest single request and the bytes requested in all. */
static size_t biggest_request, bytes_requested;

static void *rec_malloc(size_t n)
{
    biggest_request = n > biggest_request ? n : biggest_request;
    bytes_requested += n;
    return malloc(n);
}

static void *rec_realloc(void *p, size_t n)
{
    biggest_request = n > biggest_request ? n : biggest_request;
    bytes_requested += n;
    return realloc(p, n);
}

static void *rec_calloc(size_t count, size_t n)
{
    biggest_request = count * n > biggest_request ? count * n : biggest_request;
    bytes_requested += count * n;
    return calloc(count, n);
}

static void rec_install(void)
{
    biggest_request = bytes_requested = 0;
    assert_int_equal(sluice_replace_allocator(rec_malloc, rec_realloc, rec_calloc, free),
                     SLUICE_OK);
}

/* Huge declared lengths and counts cost nothing until their bytes arrive. */
static void test_no_allocation_from_lengths(void **state)
{
    resp_limits huge;
    resp_reader *r;
    resp_command cmd;
    char chunk[1000];

    (void)state;
    /* Refused at once, with the default limits. */
    rec_install();
    r = reader_new(NULL);
    feed_str(r, "*1\r\n$2147483648\r\n");
    assert_int_equal(resp_reader_next(r, &cmd), SLUICE_EPARSE);
    resp_reader_free(r);
    assert_true(biggest_request <= 4096);
    assert_true(bytes_requested <= 8192);

    /* Accepted (limits raised as far as they go), and still nothing is allocated from them. */
    resp_limits_init(&huge);
    huge.max_args = SIZE_MAX;
    huge.max_bulk_len = SIZE_MAX;
    huge.max_query_len = SIZE_MAX;
    rec_install();
    r = reader_new(&huge);
    feed_str(r, "*2147483647\r\n$2147483648\r\n");
    assert_int_equal(resp_reader_next(r, &cmd), 0);
    memset(chunk, 'x', sizeof chunk);
    for (int i = 0; i < 10; i++) {
        assert_int_equal(resp_reader_feed(r, chunk, sizeof chunk), SLUICE_OK);
        assert_int_equal(resp_reader_next(r, &cmd), 0);
    }
    assert_true(biggest_request <= 32768);
    assert_true(bytes_requested <= 65536);
    resp_reader_free(r);

    /* Even the hard cap is refused without allocating. */
    rec_install();
    r = reader_new(&huge);
    feed_str(r, "*1\r\n$18446744073709551615\r\n");
    assert_int_equal(resp_reader_next(r, &cmd), SLUICE_EPARSE);
    assert_string_equal(resp_reader_error(r), "Protocol error: invalid bulk length");
    resp_reader_free(r);
    assert_true(biggest_request <= 4096);
    sluice_reset_allocator();

    /* The same with the test suite's counting allocator: a handful of allocations. */
    oom_install(0);
    r = reader_new(&huge);
    feed_str(r, "*1048576\r\n$1073741824\r\n");
    assert_int_equal(resp_reader_next(r, &cmd), 0);
    resp_reader_free(r);
    assert_true(oom_allocations() <= 2);
    assert_int_equal(oom_live_blocks(), 0);
    oom_uninstall();
}

/* The argument arrays and the buffer are reused from one command to the next. */
static void test_storage_reused(void **state)
{
    static const char cmd3[] = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n";
    resp_reader *r = reader_new(NULL);
    resp_command cmd;

    (void)state;
    assert_int_equal(resp_reader_feed(r, cmd3, sizeof cmd3 - 1), SLUICE_OK);
    assert_int_equal(resp_reader_next(r, &cmd), 1);
    oom_install(0);
    for (int i = 0; i < 100; i++) {
        assert_int_equal(resp_reader_feed(r, cmd3, sizeof cmd3 - 1), SLUICE_OK);
        assert_int_equal(resp_reader_next(r, &cmd), 1);
        assert_int_equal(cmd.argc, 3);
        feed_str(r, "GET k\r\n");
        assert_int_equal(resp_reader_next(r, &cmd), 1);
        assert_int_equal(cmd.argc, 2);
    }
    assert_int_equal(oom_allocations(), 0);
    oom_uninstall();
    resp_reader_free(r);
}

static const char oom_input[] = "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nvalue\r\n"
                                "MSET a 1 b 2 c 3 d 4 e 5\r\n"
                                "*12\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n$1\r\nd\r\n$1\r\ne\r\n"
                                "$1\r\nf\r\n$1\r\ng\r\n$1\r\nh\r\n$1\r\ni\r\n$1\r\nj\r\n$1\r\nk\r\n"
                                "$1\r\nl\r\n";

/* Reads oom_input in reads of 7 bytes; returns 0, or SLUICE_ENOMEM after checking that the
 * failure is sticky. */
static int oom_reader_body(void *arg)
{
    resp_reader *r = NULL;
    resp_command cmd;
    int rc, ncommands = 0;

    (void)arg;
    rc = resp_reader_new(NULL, &r);
    if (rc != SLUICE_OK) {
        assert_null(r);
        return rc;
    }
    for (size_t at = 0; at < sizeof oom_input - 1; at += 7) {
        size_t n = sizeof oom_input - 1 - at < 7 ? sizeof oom_input - 1 - at : 7;

        rc = resp_reader_feed(r, oom_input + at, n);
        if (rc != SLUICE_OK)
            break;
        while ((rc = resp_reader_next(r, &cmd)) == 1)
            ncommands++;
        if (rc != 0)
            break;
    }
    if (rc == SLUICE_ENOMEM) {
        assert_int_equal(resp_reader_next(r, &cmd), SLUICE_ENOMEM);
        assert_int_equal(resp_reader_feed(r, "x", 1), SLUICE_ENOMEM);
        assert_non_null(resp_reader_error(r));
        assert_int_equal(resp_reader_buffered(r), 0);
    } else {
        assert_int_equal(rc, 0);
        assert_int_equal(ncommands, 3);
    }
    resp_reader_free(r);
    return rc;
}

static void test_oom_reader(void **state)
{
    (void)state;
    assert_true(oom_sweep(oom_reader_body, NULL, 100) > 3);
}

/* Writes one of everything; returns 0 with the exact bytes checked, or SLUICE_ENOMEM. */
static int oom_writer_body(void *arg)
{
    resp_writer w;
    char big[3000];

    (void)arg;
    memset(big, 'b', sizeof big);
    resp_writer_init(&w, 3);
    resp_array(&w, 4);
    resp_bulk(&w, big, sizeof big);
    resp_error(&w, "ERR", "%s", "bad");
    resp_bulk_fmt(&w, "%0500d", 7);
    resp_double(&w, 0.5);
    if (w.failed) {
        resp_writer_clear(&w);
        return SLUICE_ENOMEM;
    }
    assert_int_equal(w.len, 4 + 7 + 3000 + 2 + 10 + 6 + 500 + 2 + 6);
    resp_writer_clear(&w);
    return SLUICE_OK;
}

static void test_oom_writer(void **state)
{
    resp_writer w;

    (void)state;
    assert_true(oom_sweep(oom_writer_body, NULL, 100) > 1);
    /* After a failure nothing more is appended, so no reply is silently cut in two. */
    resp_writer_init(&w, 2);
    oom_install(1);
    resp_simple(&w, "OK");
    oom_uninstall();
    assert_true(w.failed);
    resp_simple(&w, "OK");
    resp_int(&w, 1);
    assert_int_equal(w.len, 0);
    resp_writer_clear(&w);
    assert_false(w.failed);
    resp_simple(&w, "OK");
    assert_int_equal(w.len, 5);
    resp_writer_clear(&w);
}

/* ---- Writer -------------------------------------------------------------------------------- */

static void expect_out(resp_writer *w, const char *s, size_t n)
{
    assert_false(w->failed);
    assert_int_equal(w->len, n);
    assert_memory_equal(w->buf, s, n);
    resp_writer_consume(w, w->len);
    assert_int_equal(w->len, 0);
}

#define OUT(w, lit) expect_out(w, lit, sizeof(lit) - 1)

static void test_writer_common(void **state)
{
    (void)state;
    for (int proto = 2; proto <= 3; proto++) {
        resp_writer w;

        resp_writer_init(&w, proto);
        assert_int_equal(w.proto, proto);
        resp_simple(&w, "OK");
        OUT(&w, "+OK\r\n");
        resp_simple(&w, "a\r\nb\nc\r");
        OUT(&w, "+a  b c \r\n");
        resp_simple(&w, "");
        OUT(&w, "+\r\n");
        resp_error(&w, "ERR", "unknown command '%s'", "FOO");
        OUT(&w, "-ERR unknown command 'FOO'\r\n");
        resp_error(&w, "WRONGTYPE", "%s", "line1\r\nline2");
        OUT(&w, "-WRONGTYPE line1  line2\r\n");
        resp_error(&w, "ERR", "%d%%", 5);
        OUT(&w, "-ERR 5%\r\n");
        resp_error(&w, NULL, "%s", "bare message");
        OUT(&w, "-bare message\r\n");
        resp_error(&w, "", "%s", "x\ny");
        OUT(&w, "-x y\r\n");
        resp_error(&w, "BUSY", "%s", "");
        OUT(&w, "-BUSY\r\n");
        resp_int(&w, 0);
        OUT(&w, ":0\r\n");
        resp_int(&w, 42);
        OUT(&w, ":42\r\n");
        resp_int(&w, -1);
        OUT(&w, ":-1\r\n");
        resp_int(&w, INT64_MAX);
        OUT(&w, ":9223372036854775807\r\n");
        resp_int(&w, INT64_MIN);
        OUT(&w, ":-9223372036854775808\r\n");
        resp_bulk(&w, "abc", 3);
        OUT(&w, "$3\r\nabc\r\n");
        resp_bulk(&w, NULL, 0);
        OUT(&w, "$0\r\n\r\n");
        resp_bulk(&w, "a\0\r\n", 4);
        OUT(&w, "$4\r\na\0\r\n\r\n");
        resp_bulk_str(&w, "hello");
        OUT(&w, "$5\r\nhello\r\n");
        resp_bulk_fmt(&w, "%s-%d", "id", 12);
        OUT(&w, "$5\r\nid-12\r\n");
        resp_bulk_fmt(&w, "%s", "");
        OUT(&w, "$0\r\n\r\n");
        resp_array(&w, 0);
        OUT(&w, "*0\r\n");
        resp_array(&w, 3);
        OUT(&w, "*3\r\n");
        resp_writer_clear(&w);
        assert_null(w.buf);
    }
}

static void test_writer_resp2(void **state)
{
    resp_writer w;

    (void)state;
    resp_writer_init(&w, 2);
    resp_null(&w);
    OUT(&w, "$-1\r\n");
    resp_bulk_str(&w, NULL);
    OUT(&w, "$-1\r\n");
    resp_map(&w, 2);
    OUT(&w, "*4\r\n");
    resp_map(&w, 0);
    OUT(&w, "*0\r\n");
    resp_bool(&w, 1);
    OUT(&w, ":1\r\n");
    resp_bool(&w, 0);
    OUT(&w, ":0\r\n");
    resp_bool(&w, 7);
    OUT(&w, ":1\r\n");
    resp_double(&w, 1.5);
    OUT(&w, "$3\r\n1.5\r\n");
    resp_double(&w, 0.1);
    OUT(&w, "$19\r\n0.10000000000000001\r\n");
    resp_double(&w, 3.0);
    OUT(&w, "$1\r\n3\r\n");
    resp_double(&w, -0.0);
    OUT(&w, "$2\r\n-0\r\n");
    resp_double(&w, 1e300);
    OUT(&w, "$23\r\n1.0000000000000001e+300\r\n");
    resp_double(&w, INFINITY);
    OUT(&w, "$3\r\ninf\r\n");
    resp_double(&w, -INFINITY);
    OUT(&w, "$4\r\n-inf\r\n");
    resp_double(&w, NAN);
    OUT(&w, "$3\r\nnan\r\n");
    resp_writer_clear(&w);
}

static void test_writer_resp3(void **state)
{
    resp_writer w;

    (void)state;
    resp_writer_init(&w, 3);
    resp_null(&w);
    OUT(&w, "_\r\n");
    resp_bulk_str(&w, NULL);
    OUT(&w, "_\r\n");
    resp_map(&w, 2);
    OUT(&w, "%2\r\n");
    resp_map(&w, 0);
    OUT(&w, "%0\r\n");
    resp_bool(&w, 1);
    OUT(&w, "#t\r\n");
    resp_bool(&w, 0);
    OUT(&w, "#f\r\n");
    resp_double(&w, 1.5);
    OUT(&w, ",1.5\r\n");
    resp_double(&w, 0.1);
    OUT(&w, ",0.10000000000000001\r\n");
    resp_double(&w, -2.25e-10);
    OUT(&w, ",-2.25e-10\r\n");
    resp_double(&w, 10.0);
    OUT(&w, ",10\r\n");
    resp_double(&w, INFINITY);
    OUT(&w, ",inf\r\n");
    resp_double(&w, -INFINITY);
    OUT(&w, ",-inf\r\n");
    resp_double(&w, NAN);
    OUT(&w, ",nan\r\n");
    resp_writer_clear(&w);
}

/* A whole reply in one buffer, consumed in pieces as a socket would take it. */
static void test_writer_sequence_and_consume(void **state)
{
    static const char expect[] = "%2\r\n$4\r\nname\r\n$6\r\nsluice\r\n$5\r\nlimit\r\n,2.5\r\n";
    resp_writer w;
    bytes sent = {0};

    (void)state;
    resp_writer_init(&w, 3);
    resp_map(&w, 2);
    resp_bulk_str(&w, "name");
    resp_bulk_str(&w, "sluice");
    resp_bulk_str(&w, "limit");
    resp_double(&w, 2.5);
    assert_int_equal(w.len, sizeof expect - 1);
    while (w.len > 0) {
        size_t n = w.len < 5 ? w.len : 5;

        bytes_put(&sent, w.buf, n);
        resp_writer_consume(&w, n);
    }
    assert_int_equal(sent.len, sizeof expect - 1);
    assert_memory_equal(sent.p, expect, sizeof expect - 1);
    resp_writer_consume(&w, 10); /* more than there is: empties */
    assert_int_equal(w.len, 0);
    bytes_free(&sent);
    resp_writer_clear(&w);
}

/* Commands written with the writer read back unchanged, big buffers included. */
static void test_writer_reader_roundtrip(void **state)
{
    test_rng g;
    resp_writer w;
    resp_reader *r = reader_new(NULL);
    bytes expect = {0}, got = {0};

    (void)state;
    rng_seed(&g, 77);
    resp_writer_init(&w, 2);
    for (int c = 0; c < 200; c++) {
        size_t argc = (size_t)rng_range(&g, 1, 5);
        char arg[5][300];
        size_t len[5];
        const char *argv[5];

        resp_array(&w, argc);
        for (size_t i = 0; i < argc; i++) {
            len[i] = (size_t)rng_range(&g, 0, 300);
            for (size_t j = 0; j < len[i]; j++)
                arg[i][j] = (char)rng_range(&g, 0, 255);
            argv[i] = arg[i];
            resp_bulk(&w, arg[i], len[i]);
        }
        log_cmd(&expect, argc, argv, len);
    }
    assert_false(w.failed);
    assert_int_equal(read_whole(r, w.buf, w.len, &got), 0);
    assert_int_equal(got.len, expect.len);
    assert_memory_equal(got.p, expect.p, expect.len);
    bytes_free(&expect);
    bytes_free(&got);
    resp_writer_clear(&w);
    resp_reader_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_multibulk),
        cmocka_unit_test(test_multibulk_binary),
        cmocka_unit_test(test_inline),
        cmocka_unit_test(test_inline_quotes),
        cmocka_unit_test(test_inline_unbalanced),
        cmocka_unit_test(test_empty_skipped),
        cmocka_unit_test(test_pipeline),
        cmocka_unit_test(test_buffered_counts_unconsumed),
        cmocka_unit_test(test_large),
        cmocka_unit_test(test_random_splits),
        cmocka_unit_test(test_bad_multibulk_length),
        cmocka_unit_test(test_bad_bulk_length),
        cmocka_unit_test(test_refused_at_once),
        cmocka_unit_test(test_expected_dollar),
        cmocka_unit_test(test_bulk_crlf),
        cmocka_unit_test(test_too_big_inline),
        cmocka_unit_test(test_desync),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_limits_live),
        cmocka_unit_test(test_error_sticky),
        cmocka_unit_test(test_no_allocation_from_lengths),
        cmocka_unit_test(test_storage_reused),
        cmocka_unit_test(test_oom_reader),
        cmocka_unit_test(test_oom_writer),
        cmocka_unit_test(test_writer_common),
        cmocka_unit_test(test_writer_resp2),
        cmocka_unit_test(test_writer_resp3),
        cmocka_unit_test(test_writer_sequence_and_consume),
        cmocka_unit_test(test_writer_reader_roundtrip),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
