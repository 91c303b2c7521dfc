/* SPDX-License-Identifier: MIT */
/*
 * Client connections: accepting (with the max-clients and protected-mode checks), reading into
 * the RESP reader, running commands, batching replies until the end of the loop turn, writing,
 * blocking and closing. See conn.h for the invariants.
 *
 * Memory per client is bounded by the reader limits (one partial command, plus what one read
 * brought) and by max_output for replies. Nothing is allocated from a length the client
 * declares: the reader only grows with bytes received.
 */
#include "server/conn.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <netinet/in.h>
#include <sys/socket.h>

#include "base/alloc.h"
#include "server/commands.h"
#include "server/durable.h"
#include "server/log.h"
#include "server/rstore.h"
#include "server/memory.h"
#include "sluice/error.h"

/* A written buffer up to this size is kept for the next replies instead of being freed. */
#define KEEP_WBUF (64u << 10)
/* How long a lingering close drains what the client still sends. */
#define LINGER_MS 1000

static const char denied_msg[] =
    "sluice is running in protected mode because no password is set: only loopback clients "
    "are accepted. Set a password (--requirepass), or listen on loopback only, or, if every "
    "client that can reach this port is trusted, start with --protected-mode no.";

static void on_close(uv_handle_t *h);
static void on_write(uv_write_t *req, int status);

/* ---- Lists ------------------------------------------------------------------------------- */

static void pending_unlink(conn *c)
{
    server *s = c->srv;
    conn **p = &s->pending;

    if (!(c->flags & CONN_PENDING))
        return;
    while (*p && *p != c)
        p = &(*p)->pnext;
    if (*p)
        *p = c->pnext;
    c->pnext = NULL;
    c->flags &= ~CONN_PENDING;
}

static void blocked_unlink(conn *c)
{
    server *s = c->srv;

    if (c->bprev)
        c->bprev->bnext = c->bnext;
    else
        s->blocked_head = c->bnext;
    if (c->bnext)
        c->bnext->bprev = c->bprev;
    else
        s->blocked_tail = c->bprev;
    c->bprev = c->bnext = NULL;
    s->nblocked--;
}

static void unauth_link(conn *c)
{
    server *s = c->srv;

    c->flags |= CONN_UNAUTH;
    c->unext = NULL;
    c->uprev = s->unauth_tail;
    if (s->unauth_tail)
        s->unauth_tail->unext = c;
    else
        s->unauth_head = c;
    s->unauth_tail = c;
    s->nunauth++;
}

static void unauth_unlink(conn *c)
{
    server *s = c->srv;

    if (!(c->flags & CONN_UNAUTH))
        return;
    if (c->uprev)
        c->uprev->unext = c->unext;
    else
        s->unauth_head = c->unext;
    if (c->unext)
        c->unext->uprev = c->uprev;
    else
        s->unauth_tail = c->uprev;
    c->uprev = c->unext = NULL;
    c->flags &= ~CONN_UNAUTH;
    s->nunauth--;
}

/* ---- Closing ----------------------------------------------------------------------------- */

/* Forgets a closing client wherever it waits: its block (cancelled), the pending list, the
 * replies held for a commit and its deferred slots. */
static void forget(conn *c)
{
    unauth_unlink(c);
    if (c->flags & CONN_BLOCKED) {
        const conn_block_ops *ops = c->block_ops;
        void *arg = c->block_arg;

        blocked_unlink(c);
        c->flags &= ~CONN_BLOCKED;
        c->block_ops = NULL;
        c->block_arg = NULL;
        if (ops && ops->cancel)
            ops->cancel(c, arg);
    }
    pending_unlink(c);
    durable_conn_closed(c); /* its held replies go with it */
    if (c->ndeferred)
        rstore_conn_closed(c); /* and its deferred ones */
}

void conn_close(conn *c)
{
    if (c->flags & CONN_CLOSING)
        return;
    c->flags |= CONN_CLOSING;
    forget(c);
    if (c->flags & CONN_DETACHED) {
        /* No handle to close: its owner hears of it at the end of the turn (conn_flush). */
        c->flags |= CONN_PENDING;
        c->pnext = c->srv->pending;
        c->srv->pending = c;
        return;
    }
    c->srv->nclosing++;
    log_debug("client %" PRIu64 " %s closed after %" PRIu64 " commands", c->id, c->addr,
              c->ncommands);
    uv_close((uv_handle_t *)&c->tcp, on_close);
    uv_close((uv_handle_t *)&c->block_timer, on_close);
}

static void conn_free(conn *c)
{
    server *s = c->srv;

    if (c->prev)
        c->prev->next = c->next;
    else
        s->clients = c->next;
    if (c->next)
        c->next->prev = c->prev;
    s->nclients--;
    s->nclosing--;
    resp_reader_free(c->reader);
    resp_writer_clear(&c->out);
    alloc_free(c->wbuf);
    alloc_free(c);
    server_client_gone(s);
}

static void on_close(uv_handle_t *h)
{
    conn *c = h->data;

    if (--c->handles == 0)
        conn_free(c);
}

/* True when nothing is left to write or to run for a client that is to close (a deferred reply
 * is still to be written). */
static int drained(const conn *c)
{
    return !c->wbuf && c->out.len == 0 && !(c->flags & CONN_BLOCKED) && c->holds == 0;
}

static void on_linger_timeout(uv_timer_t *t)
{
    conn_close(t->data);
}

static void on_shutdown(uv_shutdown_t *req, int status)
{
    conn *c = req->data;

    if (status < 0)
        conn_close(c);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf);

/* Everything was written to a client that is to close: shut the write side down (the client
 * sees EOF after the last reply) and drop what it still sends until it closes too, or for
 * LINGER_MS. A stopping server closes at once. */
static void conn_finish(conn *c)
{
    uv_stream_t *st = (uv_stream_t *)&c->tcp;

    if (c->flags & CONN_CLOSING)
        return;
    if (c->srv->stopping || c->flags & CONN_EOF) {
        conn_close(c);
        return;
    }
    if (c->flags & CONN_LINGER)
        return;
    c->flags |= CONN_LINGER;
    c->sreq.data = c;
    if (uv_shutdown(&c->sreq, st, on_shutdown) != 0) {
        conn_close(c);
        return;
    }
    if (!(c->flags & CONN_READING)) {
        if (uv_read_start(st, on_alloc, on_read) != 0) {
            conn_close(c);
            return;
        }
        c->flags |= CONN_READING;
    }
    uv_timer_start(&c->block_timer, on_linger_timeout, LINGER_MS, 0);
}

void conn_close_after_reply(conn *c)
{
    if (c->flags & CONN_CLOSING)
        return;
    c->flags |= CONN_CLOSE_AFTER_REPLY;
    if (drained(c) && !(c->flags & CONN_PENDING))
        conn_finish(c);
    else if (c->out.len > 0)
        conn_reply_ready(c);
}

/* ---- Writing ----------------------------------------------------------------------------- */

void conn_reply_ready(conn *c)
{
    server *s = c->srv;

    if (c->flags & (CONN_PENDING | CONN_CLOSING))
        return;
    c->flags |= CONN_PENDING;
    c->pnext = s->pending;
    s->pending = c;
}

/* Closes the client when its queued replies pass max_output, or are large while the process is
 * over its memory budget (memory.h). Returns 1 when it did. */
static int over_output_limit(conn *c)
{
    server *s = c->srv;

    if (c->out.len + c->wlen <= s->opt.max_output)
        return mem_output_over(c);
    s->stats.output_overflows++;
    log_warn("client %" PRIu64 " %s closed: %zu bytes of replies queued, over the limit of %zu",
             c->id, c->addr, c->out.len + c->wlen, s->opt.max_output);
    conn_close(c);
    return 1;
}

void conn_flush(conn *c)
{
    uv_buf_t b;
    int n;

    if (c->flags & CONN_DETACHED) {
        /* No socket: the owner takes the reply once it is whole (and may free c). */
        void (*done)(conn *, void *) = c->done;

        if (done && conn_detached_done(c)) {
            c->done = NULL;
            done(c, c->done_arg);
        }
        return;
    }
    if ((c->flags & CONN_CLOSING) || c->holds > 0 || c->wbuf)
        return;
    if (c->out.len == 0) {
        if ((c->flags & CONN_CLOSE_AFTER_REPLY) && drained(c))
            conn_finish(c);
        return;
    }
    b = uv_buf_init(c->out.buf, (unsigned int)c->out.len);
    n = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
    if (n == UV_EAGAIN || n == UV_ENOSYS)
        n = 0;
    if (n < 0) {
        log_debug("client %" PRIu64 " %s: write: %s", c->id, c->addr, uv_strerror(n));
        conn_close(c);
        return;
    }
    resp_writer_consume(&c->out, (size_t)n);
    if (c->out.len == 0) {
        if ((c->flags & CONN_CLOSE_AFTER_REPLY) && drained(c))
            conn_finish(c);
        return;
    }
    /* The socket is full: hand the rest to one uv_write; new replies go to a fresh buffer. */
    c->wbuf = c->out.buf;
    c->wlen = c->out.len;
    c->out.buf = NULL;
    c->out.len = c->out.cap = 0;
    b = uv_buf_init(c->wbuf, (unsigned int)c->wlen);
    c->wreq.data = c;
    n = uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, on_write);
    if (n != 0) {
        alloc_free(c->wbuf);
        c->wbuf = NULL;
        c->wlen = 0;
        conn_close(c);
    }
}

static void on_write(uv_write_t *req, int status)
{
    conn *c = req->data;

    if (!c->out.buf && c->wlen <= KEEP_WBUF) {
        /* Give the buffer back to the writer instead of allocating another. */
        c->out.buf = c->wbuf;
        c->out.cap = c->wlen;
        c->out.len = 0;
    } else {
        alloc_free(c->wbuf);
    }
    c->wbuf = NULL;
    c->wlen = 0;
    if (c->flags & CONN_CLOSING)
        return;
    if (status < 0) {
        log_debug("client %" PRIu64 " %s: write: %s", c->id, c->addr, uv_strerror(status));
        conn_close(c);
        return;
    }
    conn_flush(c);
}

void conn_hold(conn *c)
{
    c->holds++;
}

void conn_release(conn *c)
{
    if (c->holds > 0)
        c->holds--;
    if (c->holds == 0)
        conn_reply_ready(c);
}

size_t conn_defer(conn *c)
{
    size_t ticket;

    if (c->ndeferred == 0) {
        c->defer_next = 0;
        ticket = c->out.len;
    } else {
        ticket = c->out.len - c->defer_last;
    }
    c->defer_last = c->out.len;
    c->ndeferred++;
    conn_hold(c);
    return ticket;
}

/* Moves the n bytes at buf[from..from+n) to buf[to..), shifting buf[to..from) up by n. */
static int rotate_into(char *buf, size_t to, size_t from, size_t n)
{
    char stack[256], *tmp = n <= sizeof stack ? stack : alloc_malloc(n);

    if (!tmp)
        return -1;
    memcpy(tmp, buf + from, n);
    memmove(buf + to + n, buf + to, from - to);
    memcpy(buf + to, tmp, n);
    if (tmp != stack)
        alloc_free(tmp);
    return 0;
}

void conn_defer_fill(conn *c, size_t ticket, size_t mark)
{
    resp_writer *w = &c->out;
    size_t n, pos;

    if (c->ndeferred == 0 || (c->flags & CONN_CLOSING))
        return;
    /* Nothing was flushed since the slot was taken (the hold), so positions are still valid. */
    n = w->len - mark;
    pos = c->defer_next + ticket;
    if (w->failed || pos > mark || (pos < mark && rotate_into(w->buf, pos, mark, n) != 0)) {
        log_error("client %" PRIu64 " %s: out of memory for replies", c->id, c->addr);
        conn_close(c);
        return;
    }
    c->defer_next = pos + n;
    c->defer_last += n;
    c->ndeferred--;
    conn_release(c);
    if (!(c->flags & CONN_CLOSING))
        over_output_limit(c);
}

/* ---- Running commands -------------------------------------------------------------------- */

void conn_apply_limits(conn *c)
{
    server *s = c->srv;

    resp_reader_set_limits(c->reader, (c->flags & CONN_AUTHED) ? &s->opt.limits : &s->opt.preauth);
}

void conn_auth_ok(conn *c)
{
    c->flags |= CONN_AUTHED;
    c->auth_failures = 0;
    unauth_unlink(c);
    conn_apply_limits(c);
}

static void on_auth_delay(uv_timer_t *t)
{
    conn *c = t->data;

    if (!(c->flags & CONN_AUTH_WAIT) || (c->flags & CONN_CLOSING))
        return;
    c->flags &= ~CONN_AUTH_WAIT;
    c->active_ns = server_now(c->srv);
    if (!(c->flags & CONN_READING)) {
        if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) != 0) {
            conn_close(c);
            return;
        }
        c->flags |= CONN_READING;
    }
    /* Its buffered commands run at the end of this turn, as after an unblock. */
    c->flags |= CONN_RESUME;
    conn_reply_ready(c);
}

void conn_auth_failed(conn *c)
{
    uint64_t delay_ms = SERVER_AUTH_DELAY_MAX_MS;

    if (c->auth_failures < 32)
        c->auth_failures++;
    if (c->auth_failures <= 16 &&
        ((uint64_t)SERVER_AUTH_DELAY_MS << (c->auth_failures - 1)) < SERVER_AUTH_DELAY_MAX_MS)
        delay_ms = (uint64_t)SERVER_AUTH_DELAY_MS << (c->auth_failures - 1);
    if (c->flags & (CONN_CLOSING | CONN_CLOSE_AFTER_REPLY | CONN_BLOCKED))
        return;
    /* Nothing more is read either: what the client pipelines behind a wrong password waits in
     * the kernel, not in our buffers. The failed AUTH's reply still leaves this turn. */
    if (c->flags & CONN_READING) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->flags &= ~CONN_READING;
    }
    c->flags |= CONN_AUTH_WAIT;
    uv_timer_start(&c->block_timer, on_auth_delay, delay_ms, 0);
}

void conn_process(conn *c)
{
    server *s = c->srv;
    resp_command cmd;
    int rc;

    if (c->flags & (CONN_CLOSING | CONN_CLOSE_AFTER_REPLY | CONN_BLOCKED | CONN_IN_COMMAND |
                    CONN_AUTH_WAIT | CONN_DETACHED))
        return;
    c->flags |= CONN_IN_COMMAND;
    while (!(c->flags & (CONN_BLOCKED | CONN_CLOSE_AFTER_REPLY | CONN_CLOSING | CONN_AUTH_WAIT))) {
        rc = resp_reader_next(c->reader, &cmd);
        if (rc == 0)
            break;
        if (rc < 0) {
            if (rc == SLUICE_EPARSE) {
                const char *why = resp_reader_error(c->reader);

                s->stats.protocol_errors++;
                log_debug("client %" PRIu64 " %s: %s", c->id, c->addr, why ? why : "?");
                resp_error(&c->out, "ERR", "%s", why ? why : "Protocol error");
                conn_close_after_reply(c);
            } else {
                log_error("client %" PRIu64 " %s: %s", c->id, c->addr, sluice_strerror(rc));
                conn_close(c);
            }
            break;
        }
        commands_dispatch(c, &cmd);
        c->ncommands++;
        if (c->out.failed) {
            log_error("client %" PRIu64 " %s: out of memory for replies", c->id, c->addr);
            conn_close(c);
            break;
        }
        if (over_output_limit(c))
            break;
    }
    c->flags &= ~CONN_IN_COMMAND;
    if (c->flags & CONN_CLOSING)
        return;
    if (c->out.len > 0)
        conn_reply_ready(c);
    else if ((c->flags & CONN_CLOSE_AFTER_REPLY) && drained(c))
        conn_finish(c);
}

/* ---- Reading ----------------------------------------------------------------------------- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    conn *c = h->data;

    (void)suggested;
    /* Every read is fed to the reader (which copies it) before the next one, so one buffer
     * serves every client. */
    *buf = uv_buf_init(c->srv->read_buf, sizeof(c->srv->read_buf));
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    conn *c = stream->data;
    server *s = c->srv;
    int rc;

    if (c->flags & CONN_CLOSING)
        return;
    if (c->flags & (CONN_LINGER | CONN_CLOSE_AFTER_REPLY)) {
        /* Input after the last command (or while lingering) is dropped; EOF ends the linger. */
        if (nread < 0) {
            c->flags |= CONN_EOF;
            if (c->flags & CONN_LINGER)
                conn_close(c);
        }
        return;
    }
    if (nread < 0) {
        if (nread != UV_EOF)
            log_debug("client %" PRIu64 " %s: read: %s", c->id, c->addr, uv_strerror((int)nread));
        c->flags |= CONN_EOF;
        /* A half-closed client still gets the replies to what it sent; a blocked one is gone
         * for good (as in Redis): cancel it rather than hand it work nobody will read, unless
         * its answer is already on its way (answer_on_eof). */
        if (nread == UV_EOF && (!(c->flags & CONN_BLOCKED) || c->block_ops->answer_on_eof))
            conn_close_after_reply(c);
        else
            conn_close(c);
        return;
    }
    if (nread == 0)
        return;
    c->active_ns = server_now(s);
    rc = resp_reader_feed(c->reader, buf->base, (size_t)nread);
    if (rc != 0) {
        log_error("client %" PRIu64 " %s: %s", c->id, c->addr, sluice_strerror(rc));
        conn_close(c);
        return;
    }
    conn_process(c);
    if (c->flags & (CONN_CLOSING | CONN_CLOSE_AFTER_REPLY))
        return;
    /* Replies that wait for nothing leave now rather than at the end of the turn: the client
     * (often a request/response one) gets to work while the other clients' requests of this
     * turn run, instead of every reply of the turn leaving at once at its end. A reply held
     * for a commit or a shared-store call stays held (conn_flush writes nothing then), so this
     * changes when a reply leaves, never what leaves before its commit. The flush at the end
     * of the turn finds nothing more to write and costs no syscall. */
    if (c->holds == 0 && !c->wbuf && c->out.len > 0)
        conn_flush(c);
    if (c->flags & CONN_CLOSING)
        return;
    /* What stays buffered is one partial command, or the commands a blocked client sent
     * meanwhile: both are bounded by the query limit. */
    if (resp_reader_buffered(c->reader) >
        ((c->flags & CONN_AUTHED) ? s->opt.limits.max_query_len : s->opt.preauth.max_query_len)) {
        s->stats.protocol_errors++;
        log_warn("client %" PRIu64 " %s closed: query buffer over the limit", c->id, c->addr);
        resp_error(&c->out, "ERR", "Protocol error: query buffer over the limit of %zu bytes",
                   (c->flags & CONN_AUTHED) ? s->opt.limits.max_query_len
                                            : s->opt.preauth.max_query_len);
        conn_close_after_reply(c);
    }
}

/* ---- Blocking ---------------------------------------------------------------------------- */

static void on_block_timeout(uv_timer_t *t)
{
    conn *c = t->data;

    if ((c->flags & CONN_BLOCKED) && c->block_ops)
        c->block_ops->timeout(c, c->block_arg);
}

int conn_block(conn *c, int64_t timeout_ms, const conn_block_ops *ops, void *arg)
{
    server *s = c->srv;

    if (c->flags & (CONN_BLOCKED | CONN_CLOSING) || !ops || !ops->timeout)
        return SLUICE_ESTATE;
    if ((c->flags & CONN_DETACHED) && timeout_ms > 0)
        return SLUICE_ESTATE; /* it has no timer */
    c->flags |= CONN_BLOCKED;
    c->block_ops = ops;
    c->block_arg = arg;
    c->blocked_ns = server_now(s);
    c->bnext = NULL;
    c->bprev = s->blocked_tail;
    if (s->blocked_tail)
        s->blocked_tail->bnext = c;
    else
        s->blocked_head = c;
    s->blocked_tail = c;
    s->nblocked++;
    if (timeout_ms > 0)
        uv_timer_start(&c->block_timer, on_block_timeout, (uint64_t)timeout_ms, 0);
    return 0;
}

void conn_unblock(conn *c)
{
    if (!(c->flags & CONN_BLOCKED))
        return;
    blocked_unlink(c);
    c->flags &= ~CONN_BLOCKED;
    c->block_ops = NULL;
    c->block_arg = NULL;
    if (!(c->flags & CONN_DETACHED))
        uv_timer_stop(&c->block_timer);
    c->active_ns = server_now(c->srv); /* waiting was not idling */
    if (c->flags & CONN_CLOSING)
        return;
    if (over_output_limit(c))
        return;
    /* Its buffered commands run at the end of this turn, never inside whatever unblocked it
     * (possibly another client's command). */
    c->flags |= CONN_RESUME;
    conn_reply_ready(c);
}

/* ---- Accepting --------------------------------------------------------------------------- */

static void format_peer(conn *c)
{
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    char ip[INET6_ADDRSTRLEN > 46 ? INET6_ADDRSTRLEN : 46];

    snprintf(c->addr, sizeof(c->addr), "?");
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) != 0)
        return;
    if (ss.ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)&ss;

        uv_ip4_name(in, ip, sizeof(ip));
        snprintf(c->addr, sizeof(c->addr), "%s:%d", ip, ntohs(in->sin_port));
    } else if (ss.ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&ss;

        uv_ip6_name(in6, ip, sizeof(ip));
        snprintf(c->addr, sizeof(c->addr), "[%s]:%d", ip, ntohs(in6->sin6_port));
    }
}

/* With a password, before a new connection joins the unauth list: when it would take one of
 * the last auth_reserve slots of max_clients, or a slot beyond max_clients, the oldest client
 * still unauthenticated is closed to make room (it had its chance to AUTH; the new one gets
 * its own). Authenticated clients are never closed for room. Returns 1 when there is room for
 * one more unauthenticated client (after evicting, if need be), 0 when every other slot is
 * held by authenticated clients. */
static int make_room(server *s)
{
    size_t reserve =
        s->opt.auth_reserve < s->opt.max_clients ? s->opt.auth_reserve : s->opt.max_clients - 1;
    size_t cap = s->opt.max_clients - reserve; /* unauthenticated clients at once, >= 1 */

    /* nclients - nclosing counts the new client; nunauth does not yet. */
    while (s->unauth_head &&
           (s->nunauth + 1 > cap || s->nclients - s->nclosing > s->opt.max_clients)) {
        conn *old = s->unauth_head;

        s->stats.auth_evictions++;
        log_warn("client %" PRIu64 " %s closed: not authenticated, its slot is needed", old->id,
                 old->addr);
        conn_close(old);
    }
    return s->nunauth + 1 <= cap;
}

int conn_accept(server *s)
{
    struct sockaddr_storage ss;
    int sslen = sizeof(ss), have_peer;
    conn *c;
    int rc;

    c = alloc_calloc(1, sizeof(*c));
    if (!c)
        return SLUICE_ENOMEM;
    c->srv = s;
    uv_tcp_init(&s->loop, &c->tcp);
    c->tcp.data = c;
    c->handles = 1;
    rc = uv_accept((uv_stream_t *)&s->listener, (uv_stream_t *)&c->tcp);
    if (rc != 0) {
        /* Not yet a client: free it through the close callback without the lists. */
        c->flags |= CONN_CLOSING;
        s->nclosing++;
        c->prev = NULL;
        c->next = s->clients;
        if (s->clients)
            s->clients->prev = c;
        s->clients = c;
        s->nclients++;
        uv_close((uv_handle_t *)&c->tcp, on_close);
        return rc;
    }
    uv_timer_init(&s->loop, &c->block_timer);
    c->block_timer.data = c;
    c->handles = 2;
    c->id = s->next_client_id++;
    c->created_ns = c->active_ns = server_now(s);
    c->next = s->clients;
    if (s->clients)
        s->clients->prev = c;
    s->clients = c;
    s->nclients++;
    s->stats.connections++;
    resp_writer_init(&c->out, 2);
    uv_tcp_nodelay(&c->tcp, 1);
    format_peer(c);
    if (!s->has_password)
        c->flags |= CONN_AUTHED;
    rc = resp_reader_new((c->flags & CONN_AUTHED) ? &s->opt.limits : &s->opt.preauth, &c->reader);
    if (rc != 0) {
        conn_close(c);
        return rc;
    }

    have_peer = uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &sslen) == 0;
    if (s->has_password && make_room(s))
        unauth_link(c);
    if (s->nclients - s->nclosing > s->opt.max_clients) {
        s->stats.rejected++;
        log_warn("client %s refused: max number of clients (%zu) reached", c->addr,
                 s->opt.max_clients);
        resp_error(&c->out, "ERR", "max number of clients reached");
        conn_close_after_reply(c);
        return 0;
    }
    if (s->has_password && !(c->flags & CONN_UNAUTH)) {
        s->stats.rejected++;
        log_warn("client %s refused: every slot left is reserved for authenticated clients",
                 c->addr);
        resp_error(&c->out, "ERR", "max number of clients reached");
        conn_close_after_reply(c);
        return 0;
    }
    if (!server_peer_allowed(have_peer ? (const struct sockaddr *)&ss : NULL, s->has_password,
                             s->opt.protected_mode)) {
        s->stats.rejected++;
        log_warn("client %s refused: protected mode (no password set)", c->addr);
        resp_error(&c->out, "DENIED", "%s", denied_msg);
        conn_close_after_reply(c);
        return 0;
    }
    log_debug("client %" PRIu64 " %s connected", c->id, c->addr);
    rc = uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
    if (rc != 0) {
        conn_close(c);
        return rc;
    }
    c->flags |= CONN_READING;
    return 0;
}

/* ---- Detached clients -------------------------------------------------------------------- */

int conn_detached_new(server *s, void (*done)(conn *c, void *arg), void *arg, conn **out)
{
    conn *c = alloc_calloc(1, sizeof(*c));

    *out = NULL;
    if (!c)
        return SLUICE_ENOMEM;
    c->srv = s;
    c->flags = CONN_AUTHED | CONN_DETACHED;
    c->done = done;
    c->done_arg = arg;
    c->created_ns = c->active_ns = server_now(s);
    resp_writer_init(&c->out, 2);
    snprintf(c->addr, sizeof(c->addr), "http");
    *out = c;
    return 0;
}

int conn_detached_done(const conn *c)
{
    return (c->flags & CONN_CLOSING) ||
           (c->holds == 0 && c->ndeferred == 0 && !(c->flags & CONN_BLOCKED));
}

void conn_detached_free(conn *c)
{
    if (!c)
        return;
    if (!(c->flags & CONN_CLOSING)) {
        c->flags |= CONN_CLOSING;
        forget(c);
    }
    pending_unlink(c);
    resp_writer_clear(&c->out);
    alloc_free(c);
}

/* ---- Timeouts ---------------------------------------------------------------------------- */

void conn_sweep_timeouts(server *s, int64_t now_ns)
{
    if (s->opt.auth_timeout_ms > 0) {
        int64_t limit_ns = s->opt.auth_timeout_ms * (int64_t)1000000;

        /* Oldest first: the first one still in time ends the walk. */
        while (s->unauth_head && now_ns - s->unauth_head->created_ns >= limit_ns) {
            conn *c = s->unauth_head;

            s->stats.auth_timeouts++;
            log_info("client %" PRIu64 " %s closed: not authenticated within %" PRId64 " ms", c->id,
                     c->addr, s->opt.auth_timeout_ms);
            conn_close(c);
        }
    }
    if (s->opt.idle_timeout_ms > 0) {
        int64_t limit_ns = s->opt.idle_timeout_ms * (int64_t)1000000;

        for (conn *c = s->clients, *next; c; c = next) {
            next = c->next;
            if (c->flags & (CONN_CLOSING | CONN_BLOCKED | CONN_AUTH_WAIT | CONN_IN_COMMAND))
                continue;
            if (now_ns - c->active_ns < limit_ns)
                continue;
            s->stats.idle_timeouts++;
            log_debug("client %" PRIu64 " %s closed: idle for %" PRId64 " ms", c->id, c->addr,
                      (now_ns - c->active_ns) / 1000000);
            conn_close(c);
        }
    }
}
