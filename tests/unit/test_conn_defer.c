/* SPDX-License-Identifier: MIT */
/*
 * Tests of deferred replies (conn_defer / conn_defer_fill, conn.h): a command answered later (by
 * the shared store) keeps its place among the replies of the commands its client sent after it.
 * A property test against the obvious model: random interleavings of commands answered at once,
 * commands deferred, and fills of the oldest slot (the order the store answers in), with replies
 * short and long (past the stack buffer of the move); at the end the client's buffer must be
 * every reply in command order, and nothing may be flushed while a slot is open (the hold).
 * The client is a bare conn on a bare server: no socket is touched on this path.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "server/conn.h"
#include "server/resp.h"
#include "server/server.h"
#include "testutil.h"

#define MAX_CMDS 400

/* The reply of command n: a bulk string whose length varies with n (some past 256 bytes). */
static void reply_of(int n, int deferred, char *buf, size_t len)
{
    int body = (n * 37) % 7 == 0 ? 300 + n % 50 : 1 + n % 20;
    int at = snprintf(buf, len, "%c%d:", deferred ? 'd' : 'i', n);

    for (int i = 0; i < body && (size_t)at + 1 < len; i++)
        buf[at++] = (char)('a' + (n + i) % 26);
    buf[at] = '\0';
}

static void run_once(uint64_t seed)
{
    server *s = calloc(1, sizeof(*s));
    conn *c = calloc(1, sizeof(*c));
    resp_writer want;
    test_rng r;
    struct {
        int n;
        size_t ticket;
    } queue[MAX_CMDS];
    size_t qhead = 0, qtail = 0;
    char text[512];
    int ncmds = 0, deferred_now = 0;

    assert_non_null(s);
    assert_non_null(c);
    s->opt.max_output = (size_t)1 << 30;
    c->srv = s;
    resp_writer_init(&c->out, 2);
    resp_writer_init(&want, 2);
    rng_seed(&r, seed);
    while (ncmds < MAX_CMDS || qhead < qtail) {
        int64_t op = rng_range(&r, 0, 9);

        if (ncmds < MAX_CMDS && op < 4) { /* a command answered at once */
            reply_of(ncmds, 0, text, sizeof text);
            resp_bulk_str(&c->out, text);
            ncmds++;
        } else if (ncmds < MAX_CMDS && op < 7) { /* a command answered later */
            queue[qtail].n = ncmds;
            queue[qtail].ticket = conn_defer(c);
            qtail++;
            deferred_now++;
            ncmds++;
        } else if (qhead < qtail) { /* the store answers the oldest */
            size_t mark = c->out.len;

            reply_of(queue[qhead].n, 1, text, sizeof text);
            resp_bulk_str(&c->out, text);
            conn_defer_fill(c, queue[qhead].ticket, mark);
            qhead++;
            deferred_now--;
        }
        /* Held while any slot is open: nothing of this client may be written meanwhile. */
        assert_int_equal(c->ndeferred, (unsigned)deferred_now);
        assert_int_equal(c->holds, deferred_now);
    }
    /* The model: every reply in command order. */
    for (int n = 0; n < MAX_CMDS; n++) {
        int was_deferred = 0;

        for (size_t i = 0; i < qtail; i++)
            if (queue[i].n == n)
                was_deferred = 1;
        reply_of(n, was_deferred, text, sizeof text);
        resp_bulk_str(&want, text);
    }
    assert_false(c->out.failed);
    assert_int_equal(c->out.len, want.len);
    assert_memory_equal(c->out.buf, want.buf, want.len);
    assert_true(c->flags & CONN_PENDING); /* released: queued for the turn's flush */
    resp_writer_clear(&c->out);
    resp_writer_clear(&want);
    free(c);
    free(s);
}

static void test_replies_keep_command_order(void **unused)
{
    (void)unused;
    for (uint64_t seed = 1; seed <= 200; seed++)
        run_once(seed);
}

/* Two slots back to back, then immediate replies: filled in order, each lands in its place. */
static void test_adjacent_slots(void **unused)
{
    server *s = calloc(1, sizeof(*s));
    conn *c = calloc(1, sizeof(*c));
    size_t t1, t2, mark;
    static const char want[] = "+a\r\n+b\r\n+c\r\n+d\r\n";

    (void)unused;
    assert_non_null(s);
    assert_non_null(c);
    s->opt.max_output = (size_t)1 << 30;
    c->srv = s;
    resp_writer_init(&c->out, 2);
    resp_simple(&c->out, "a");
    t1 = conn_defer(c);
    t2 = conn_defer(c);
    resp_simple(&c->out, "d");
    mark = c->out.len;
    resp_simple(&c->out, "b");
    conn_defer_fill(c, t1, mark);
    assert_int_equal(c->holds, 1);
    mark = c->out.len;
    resp_simple(&c->out, "c");
    conn_defer_fill(c, t2, mark);
    assert_int_equal(c->holds, 0);
    assert_int_equal(c->out.len, strlen(want));
    assert_memory_equal(c->out.buf, want, strlen(want));
    resp_writer_clear(&c->out);
    free(c);
    free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replies_keep_command_order),
        cmocka_unit_test(test_adjacent_slots),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
