/* SPDX-License-Identifier: MIT */
/*
 * Tests of deferred replies (conn_defer / conn_defer_fill, conn.h): a command answered later (by
 * the shared store) keeps its place among the replies of the commands its client sent after it.
 * A property test against the obvious model: random interleavings of commands answered at once,
 * commands deferred, and fills of the oldest slot (the order the store answers in), with replies
 * short and long (past the stack buffer of the move); at the end the client's buffer must be
 * every reply in command order, and nothing may be flushed while a slot is open (the hold).
 * The client is a bare conn on a bare server: no socket is touched on this path.
 *
 * Detached clients (conn_detached_new, the HTTP API's): a deferred reply or a block holds the
 * reply back, and the owner's done callback runs exactly once, from the turn's flush, once the
 * reply is whole (or the client closed); conn_detached_free at any time forgets the client's
 * wait without calling done; a blocking wait with a timeout is refused; allocation failures.
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
#include "sluice/error.h"
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

/* ---- Detached clients ---------------------------------------------------------------------- */

/* What the done callback saw. */
typedef struct done_log {
    int calls;
    int closed;   /* CONN_CLOSING was set */
    char got[64]; /* the reply then */
    int free_it;  /* the callback frees the client, as the HTTP API does */
} done_log;

static void on_done(conn *c, void *arg)
{
    done_log *d = arg;

    d->calls++;
    d->closed = (c->flags & CONN_CLOSING) != 0;
    snprintf(d->got, sizeof d->got, "%.*s", (int)c->out.len, c->out.buf ? c->out.buf : "");
    if (d->free_it)
        conn_detached_free(c);
}

/* The turn's flush of the server's pending list (server.c's before_sleep, without the sockets). */
static void flush_pending(server *s)
{
    conn *c;

    while ((c = s->pending) != NULL) {
        s->pending = c->pnext;
        c->pnext = NULL;
        c->flags &= ~(CONN_PENDING | CONN_RESUME);
        conn_flush(c);
    }
}

static server *bare_server(void)
{
    server *s = calloc(1, sizeof(*s));

    assert_non_null(s);
    s->opt.max_output = (size_t)1 << 30;
    return s;
}

static void test_detached_deferred(void **unused)
{
    server *s = bare_server();
    done_log d = {0};
    conn *c;
    size_t t, mark;

    (void)unused;
    assert_int_equal(conn_detached_new(s, on_done, &d, &c), 0);
    assert_true(c->flags & CONN_AUTHED);
    assert_int_equal(s->nclients, 0); /* on no client list */
    assert_true(conn_detached_done(c));
    t = conn_defer(c);
    assert_false(conn_detached_done(c));
    flush_pending(s);
    assert_int_equal(d.calls, 0); /* nothing before the store answered */
    mark = c->out.len;
    resp_simple(&c->out, "OK");
    conn_defer_fill(c, t, mark);
    assert_true(conn_detached_done(c));
    assert_int_equal(d.calls, 0); /* not from inside the store's answer: at the turn's flush */
    d.free_it = 1;
    flush_pending(s);
    assert_int_equal(d.calls, 1);
    assert_false(d.closed);
    assert_string_equal(d.got, "+OK\r\n");
    assert_null(s->pending);
    free(s);
}

static int cancels;
static void block_timeout(conn *c, void *arg)
{
    (void)c;
    (void)arg;
}
static void block_cancel(conn *c, void *arg)
{
    (void)c;
    (void)arg;
    cancels++;
}
static const conn_block_ops ops = {NULL, block_timeout, block_cancel, 1};

static void test_detached_blocked(void **unused)
{
    server *s = bare_server();
    done_log d = {0};
    conn *c;

    (void)unused;
    assert_int_equal(conn_detached_new(s, on_done, &d, &c), 0);
    /* No timer: a wait with a timeout is refused, one without is taken. */
    assert_int_equal(conn_block(c, 1000, &ops, NULL), SLUICE_ESTATE);
    assert_int_equal(conn_block(c, 0, &ops, NULL), 0);
    assert_int_equal(s->nblocked, 1);
    assert_false(conn_detached_done(c));
    resp_int(&c->out, 7);
    conn_unblock(c);
    assert_int_equal(s->nblocked, 0);
    flush_pending(s);
    assert_int_equal(d.calls, 1);
    assert_string_equal(d.got, ":7\r\n");
    /* done ran once: a later flush does not call it again. */
    conn_reply_ready(c);
    flush_pending(s);
    assert_int_equal(d.calls, 1);
    conn_detached_free(c);

    /* Freed while blocked (the request went away): the wait is cancelled, done not called. */
    memset(&d, 0, sizeof d);
    cancels = 0;
    assert_int_equal(conn_detached_new(s, on_done, &d, &c), 0);
    assert_int_equal(conn_block(c, 0, &ops, NULL), 0);
    conn_detached_free(c);
    assert_int_equal(cancels, 1);
    assert_int_equal(s->nblocked, 0);
    assert_null(s->blocked_head);
    flush_pending(s);
    assert_int_equal(d.calls, 0);
    free(s);
}

static void test_detached_closed(void **unused)
{
    server *s = bare_server();
    done_log d = {0};
    conn *c;
    size_t t;

    (void)unused;
    /* Closed while its reply is deferred (out of memory for it): the owner hears of it at the
     * turn's flush, with CONN_CLOSING set. */
    assert_int_equal(conn_detached_new(s, on_done, &d, &c), 0);
    t = conn_defer(c);
    (void)t;
    conn_close(c);
    conn_close(c); /* idempotent */
    assert_true(conn_detached_done(c));
    assert_int_equal(s->nclosing, 0); /* no handle to wait for */
    d.free_it = 1;
    flush_pending(s);
    assert_int_equal(d.calls, 1);
    assert_true(d.closed);

    /* Queued for the flush, then freed by its owner before it: unlinked, done not called. */
    memset(&d, 0, sizeof d);
    assert_int_equal(conn_detached_new(s, on_done, &d, &c), 0);
    conn_reply_ready(c);
    assert_ptr_equal(s->pending, c);
    conn_detached_free(c);
    assert_null(s->pending);
    conn_detached_free(NULL);
    free(s);
}

static int new_and_free(void *arg)
{
    conn *c;
    int rc = conn_detached_new(arg, on_done, NULL, &c);

    if (rc != 0) {
        assert_null(c);
        return rc;
    }
    resp_simple(&c->out, "OK");
    conn_detached_free(c);
    return 0;
}

static void test_detached_oom(void **unused)
{
    server *s = bare_server();

    (void)unused;
    assert_true(oom_sweep(new_and_free, s, 10) > 1);
    free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replies_keep_command_order),
        cmocka_unit_test(test_adjacent_slots),
        cmocka_unit_test(test_detached_deferred),
        cmocka_unit_test(test_detached_blocked),
        cmocka_unit_test(test_detached_closed),
        cmocka_unit_test(test_detached_oom),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
