/* SPDX-License-Identifier: MIT */
/*
 * One PostgreSQL connection on the loop (pg_conn.h): libpq's non-blocking connect and pipeline
 * mode driven by a uv_poll on its socket, plus what libpq leaves to its user: deadlines,
 * reconnecting, the schema migration off the loop, the statements and the LISTEN of every new
 * connection.
 *
 * The pipeline: every call is one prepared statement and one sync, so libpq hands back, in call
 * order, for each call: its result, a NULL (the end of that statement's results), then a
 * PIPELINE_SYNC. A call is taken off the list of calls in flight (oldest first) when its result
 * arrives, before fn runs (the caller may reuse its memory from then on); the NULL and the sync
 * that follow carry nothing. The set-up of a connection (JIT off, its PREPAREs and its LISTEN) is
 * one more run of the same kind, with one sync at its end, sent before the connection is UP, so no
 * call is ever mixed into it.
 *
 * Who answers a call: the result in the loop's poll callback, or drop() (the connection lost,
 * timed out or freed), which answers every call still on the list. A call is on the list from
 * pgconn_send to its answer, so it is answered once and never forgotten.
 *
 * The poll handle is tied to one socket: libpq may close its socket and open another during
 * PQconnectPoll (the next address of a host, another host of the list), possibly under the same
 * number. So the poll is stopped before each PQconnectPoll and started again after (on the same
 * handle when the number is the same: a stopped handle is registered afresh; on a new handle
 * otherwise), and always closed before PQfinish closes the socket. Handles are allocated per
 * socket because a closed uv_poll_t cannot be reused until its close callback has run.
 *
 * Not on the loop: PQconnectStart resolves a host name with the system's blocking resolver
 * (libpq has no other); give a numeric hostaddr or a Unix socket where that matters.
 */
#include "store/pg_conn.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "base/alloc.h"
#include "sluice/error.h"
#include "store/pg_schema.h"

#define PGCONN_TIMEOUT_CAP_MS (INT64_C(86400) * 1000)
/* The session's settings, first in the set-up run. JIT off: the statements are short, and a
 * plan whose estimated cost passes jit_above_cost (easy with the estimates of small tables
 * never analyzed: sluice_limit_defs_get's poll was one) had tens of milliseconds of LLVM
 * compilation at every execution, which JIT never earns back here (measured: 42 ms of
 * emission for a poll that runs in 0.1 ms, every 100 ms on every node). A failure (a server
 * before PostgreSQL 11, which has no JIT) is ignored. */
#define PGCONN_SESSION_SQL "SET jit = off"

/* One uv_poll on one socket of the connection. */
typedef struct pgconn_poll {
    uv_poll_t h; /* h.data is the pgconn */
    int fd;      /* the socket it watches */
    int events;  /* what it is started for (0: stopped) */
} pgconn_poll;

struct pgconn {
    uv_loop_t *loop;
    uv_timer_t deadline; /* the oldest call's deadline, or the connection attempt's */
    uv_timer_t retry;    /* the next connection attempt */
    pgconn_poll *poll;   /* the socket's poll, NULL when there is none */
    PGconn *conn;        /* NULL when there is no connection */
    pgconn_state state;
    int stopping;    /* pgconn_free was called */
    int handles;     /* handles not yet closed (timers, polls) */
    int broken;      /* pgconn_send found the connection unusable: the deadline timer drops it */
    int writing;     /* libpq holds output the socket did not take yet */
    int expect_null; /* a statement's result arrived: a NULL ends its results */
    size_t setup_n;  /* results of the set-up run seen so far */
    char setup_err[300]; /* the first failure of the set-up run, else "" */
    char *conninfo;
    int64_t timeout_ms;
    int migrate;
    const pgconn_stmt *stmts;
    size_t nstmts;
    void (*on_state)(void *arg, pgconn_state state, const char *why);
    void *arg;
    char *listen; /* the channel (owned), else NULL */
    void (*on_notify)(void *arg, const char *payload);
    uint64_t backoff_ms;       /* the wait before the next attempt */
    uint64_t attempt_deadline; /* uv_now when the attempt in progress gives up */
    uint64_t gen;              /* connection attempts started */
    pgconn_call *head, *tail;  /* calls in flight, oldest first */
    /* The migration: a work thread and its own blocking connection. The loop thread writes these
     * before uv_queue_work and reads them in the after-work callback; only mig_fd and mig_stop
     * are shared while the thread runs, under mig_lock. */
    uv_work_t work;
    uv_mutex_t mig_lock;
    int migrating;    /* work is queued or running (its after-work callback will run) */
    uint64_t mig_gen; /* the attempt it serves */
    int mig_stop;     /* the loop gave it up: the thread stops as soon as it can */
    int mig_fd;       /* the thread's socket once connected, else -1 */
    int mig_rc, mig_from;
    char mig_err[256];
    char last_error[256];
    pgconn_stats st;
};

static void start_attempt(pgconn *pc);
static void arm_deadline(pgconn *pc);
static void on_poll(uv_poll_t *h, int status, int events);

const char *pgconn_state_name(pgconn_state s)
{
    switch (s) {
    case PGCONN_DOWN:
        return "down";
    case PGCONN_CONNECTING:
        return "connecting";
    case PGCONN_LOADING:
        return "loading";
    case PGCONN_UP:
        return "up";
    case PGCONN_REFUSED:
        return "refused";
    }
    return "?";
}

/* prefix followed by the first line of msg: libpq's messages end with a newline and some add a
 * line of hints, while ours go on one log line or one error reply. */
static void one_line(char *dst, size_t len, const char *prefix, const char *msg)
{
    size_t n;

    snprintf(dst, len, "%s%s", prefix, msg && msg[0] ? msg : "unknown error");
    n = strcspn(dst, "\r\n");
    while (n > 0 && (dst[n - 1] == ' ' || dst[n - 1] == '\t'))
        n--;
    dst[n] = '\0';
}

/* Notices (a CREATE ... IF NOT EXISTS that skipped) are not errors: nothing to report. */
static void ignore_notice(void *arg, const char *msg)
{
    (void)arg;
    (void)msg;
}

/* The connection parameters of both connections: the user's conninfo (expand_dbname: the first
 * dbname may be a whole conninfo or URI), and "sluice" as the application_name that
 * pg_stat_activity shows unless the conninfo names one. */
static const char *const conn_keys[] = {"dbname", "fallback_application_name", NULL};

static const char *const *conn_values(const pgconn *pc, const char *vals[3])
{
    vals[0] = pc->conninfo;
    vals[1] = "sluice";
    vals[2] = NULL;
    return vals;
}

/* Sets the state and tells the user. Returns 0 when pgconn_free was called meanwhile (by the
 * callback), and the caller must stop there. */
static int set_state(pgconn *pc, pgconn_state s, const char *why)
{
    pc->state = s;
    if (pc->on_state && !pc->stopping)
        pc->on_state(pc->arg, s, why);
    return !pc->stopping;
}

static void maybe_free(pgconn *pc)
{
    if (!pc->stopping || pc->handles > 0 || pc->migrating)
        return;
    uv_mutex_destroy(&pc->mig_lock);
    alloc_free(pc->conninfo);
    alloc_free(pc->listen);
    alloc_free(pc);
}

static void on_handle_closed(uv_handle_t *h)
{
    pgconn *pc = h->data;

    if (h->type == UV_POLL)
        alloc_free(h); /* the pgconn_poll (its first member) */
    pc->handles--;
    maybe_free(pc);
}

/* ---- The socket's poll ------------------------------------------------------------------- */

static void poll_close(pgconn *pc)
{
    if (!pc->poll)
        return;
    uv_close((uv_handle_t *)&pc->poll->h, on_handle_closed);
    pc->poll = NULL;
}

/* Watches libpq's current socket for events (UV_READABLE, UV_WRITABLE). Returns 0 or a libuv
 * error. */
static int poll_watch(pgconn *pc, int events)
{
    int fd = PQsocket(pc->conn), rv;

    if (fd < 0)
        return UV_EBADF;
    if (pc->poll && pc->poll->fd != fd)
        poll_close(pc);
    if (!pc->poll) {
        pgconn_poll *p = alloc_calloc(1, sizeof(*p));

        if (!p)
            return UV_ENOMEM;
        rv = uv_poll_init_socket(pc->loop, &p->h, fd);
        if (rv != 0) {
            alloc_free(p);
            return rv;
        }
        p->h.data = pc;
        p->fd = fd;
        pc->poll = p;
        pc->handles++;
    }
    if (pc->poll->events == events)
        return 0;
    rv = uv_poll_start(&pc->poll->h, events, on_poll);
    pc->poll->events = rv == 0 ? events : 0;
    return rv;
}

/* ---- The migration, on a work thread ----------------------------------------------------- */

/* Tells the migration's thread to stop: before it connects, by the flag; after, by shutting its
 * socket down, which fails the blocking call it is in (a stopped server would hold it forever). */
static void mig_abort(pgconn *pc)
{
    if (!pc->migrating)
        return;
    uv_mutex_lock(&pc->mig_lock);
    pc->mig_stop = 1;
    if (pc->mig_fd >= 0)
        shutdown(pc->mig_fd, SHUT_RDWR);
    uv_mutex_unlock(&pc->mig_lock);
}

static void mig_work(uv_work_t *w)
{
    pgconn *pc = w->data;
    char timeout[32];
    /* connect_timeout (whole seconds; libpq waits at least 2) after the conninfo: ours wins. */
    const char *keys[] = {conn_keys[0], conn_keys[1], "connect_timeout", NULL};
    const char *vals[4];
    PGconn *c;
    int aborted;

    conn_values(pc, vals);
    snprintf(timeout, sizeof timeout, "%lld", (long long)((pc->timeout_ms + 999) / 1000));
    vals[2] = timeout;
    vals[3] = NULL;
    c = PQconnectdbParams(keys, vals, 1);
    if (!c || PQstatus(c) != CONNECTION_OK) {
        one_line(pc->mig_err, sizeof pc->mig_err,
                 "cannot connect to migrate the schema: ", c ? PQerrorMessage(c) : "out of memory");
        pc->mig_rc = c ? SLUICE_EIO : SLUICE_ENOMEM;
        PQfinish(c);
        return;
    }
    PQsetNoticeProcessor(c, ignore_notice, NULL);
    uv_mutex_lock(&pc->mig_lock);
    aborted = pc->mig_stop;
    if (!aborted)
        pc->mig_fd = PQsocket(c);
    uv_mutex_unlock(&pc->mig_lock);
    if (aborted) {
        pc->mig_rc = SLUICE_EIO;
        snprintf(pc->mig_err, sizeof pc->mig_err, "stopped");
        PQfinish(c);
        return;
    }
    pc->mig_rc = pgs_migrate(c, &pc->mig_from, pc->mig_err, sizeof pc->mig_err);
    /* The socket is closed by PQfinish: the loop must not shut it down after. */
    uv_mutex_lock(&pc->mig_lock);
    pc->mig_fd = -1;
    uv_mutex_unlock(&pc->mig_lock);
    PQfinish(c);
}

static void send_setup(pgconn *pc);
static void drop(pgconn *pc, const char *why, const char *call_why);
static void after_mig(uv_work_t *w, int status);

static void start_migration(pgconn *pc)
{
    int rv;

    pc->mig_gen = pc->gen;
    pc->mig_stop = 0;
    pc->mig_fd = -1;
    pc->mig_rc = SLUICE_EIO;
    pc->mig_from = 0;
    pc->mig_err[0] = '\0';
    pc->work.data = pc;
    rv = uv_queue_work(pc->loop, &pc->work, mig_work, after_mig);
    if (rv != 0) {
        char why[200];

        snprintf(why, sizeof why, "cannot start the schema migration: %s", uv_strerror(rv));
        drop(pc, why, why);
        return;
    }
    pc->migrating = 1;
}

static void after_mig(uv_work_t *w, int status)
{
    pgconn *pc = w->data;
    char why[300];

    (void)status;
    pc->migrating = 0;
    if (pc->stopping) {
        maybe_free(pc);
        return;
    }
    if (pc->state != PGCONN_LOADING)
        return; /* the attempt it served is gone; the next one starts its own */
    if (pc->mig_gen != pc->gen) {
        start_migration(pc); /* a newer attempt waited for this thread to finish */
        return;
    }
    if (pc->mig_rc == SLUICE_ESTATE) {
        /* Final: an older sluice must not write state whose meaning changed under it. */
        one_line(pc->last_error, sizeof pc->last_error, "", pc->mig_err);
        uv_timer_stop(&pc->deadline);
        poll_close(pc);
        PQfinish(pc->conn);
        pc->conn = NULL;
        pc->st.failed_connects++;
        set_state(pc, PGCONN_REFUSED, pc->last_error);
        return;
    }
    if (pc->mig_rc != 0) {
        one_line(why, sizeof why, "", pc->mig_err);
        drop(pc, why, why);
        return;
    }
    pc->st.schema_from = pc->mig_from;
    send_setup(pc);
}

/* ---- Dropping a connection --------------------------------------------------------------- */

static void on_retry(uv_timer_t *t)
{
    start_attempt(t->data);
}

/* Drops the connection (or the attempt) and, unless stopping, schedules the next attempt. Every
 * call in flight is answered (NULL, call_why); why is what on_state and last_error say. */
static void drop(pgconn *pc, const char *why, const char *call_why)
{
    pgconn_state was = pc->state;
    pgconn_call *calls = pc->head;

    snprintf(pc->last_error, sizeof pc->last_error, "%s", why);
    uv_timer_stop(&pc->deadline);
    poll_close(pc); /* before the socket is closed: the poll must not outlive it */
    PQfinish(pc->conn);
    pc->conn = NULL;
    mig_abort(pc);
    pc->broken = pc->writing = pc->expect_null = 0;
    pc->setup_err[0] = '\0';
    if (was == PGCONN_UP)
        pc->st.disconnects++;
    else if (was == PGCONN_CONNECTING || was == PGCONN_LOADING)
        pc->st.failed_connects++;
    if (was != PGCONN_REFUSED)
        pc->state = PGCONN_DOWN;
    /* Detached first: a callback may send (refused: not UP) or free (then drop runs again). */
    pc->head = pc->tail = NULL;
    while (calls) {
        pgconn_call *call = calls;

        calls = call->next;
        call->next = NULL;
        pc->st.in_flight--;
        call->fn(call->arg, NULL, call_why);
    }
    if (pc->stopping || was == PGCONN_DOWN || was == PGCONN_REFUSED)
        return;
    if (!set_state(pc, PGCONN_DOWN, pc->last_error))
        return;
    uv_timer_start(&pc->retry, on_retry, pc->backoff_ms, 0);
    pc->backoff_ms =
        pc->backoff_ms * 2 > PGCONN_BACKOFF_MAX_MS ? PGCONN_BACKOFF_MAX_MS : pc->backoff_ms * 2;
}

static void lost(pgconn *pc)
{
    char why[300];

    one_line(why, sizeof why, "connection lost: ", PQerrorMessage(pc->conn));
    drop(pc, why, why);
}

/* ---- Results ----------------------------------------------------------------------------- */

/* One result of the set-up run: the SET of the session's settings (PGCONN_SESSION_SQL), the
 * PREPAREs in the order of the options, then the LISTEN. */
static void setup_result(pgconn *pc, const PGresult *r)
{
    ExecStatusType st = PQresultStatus(r);
    size_t i = pc->setup_n++;
    char what[200];

    if (pc->setup_err[0] || st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK)
        return;
    if (i == 0)
        return; /* a server without JIT (before PostgreSQL 11) has nothing to turn off */
    i--;
    if (i < pc->nstmts)
        snprintf(what, sizeof what, "preparing %.100s failed: ", pc->stmts[i].name);
    else
        snprintf(what, sizeof what, "LISTEN %.100s failed: ", pc->listen);
    one_line(pc->setup_err, sizeof pc->setup_err, what, PQresultErrorMessage(r));
}

/* The set-up run's sync: UP, or dropped with its first failure. */
static void setup_done(pgconn *pc)
{
    char why[400];

    if (pc->setup_err[0] || pc->setup_n != 1 + pc->nstmts + (pc->listen ? 1 : 0)) {
        snprintf(why, sizeof why, "%s",
                 pc->setup_err[0] ? pc->setup_err : "setting up the connection failed");
        drop(pc, why, why);
        return;
    }
    pc->st.connects++;
    pc->backoff_ms = PGCONN_BACKOFF_MIN_MS;
    uv_timer_stop(&pc->deadline);
    set_state(pc, PGCONN_UP, NULL);
}

static void drain_notifies(pgconn *pc, PGconn *c)
{
    PGnotify *n;

    while (pc->conn == c && !pc->stopping && (n = PQnotifies(c)) != NULL) {
        if (pc->listen && pc->on_notify && strcmp(n->relname, pc->listen) == 0) {
            pc->st.notifies++;
            pc->on_notify(pc->arg, n->extra);
        }
        PQfreemem(n);
    }
}

/* Reads every result libpq has complete and hands each to its call (or to the set-up run).
 * Stops when libpq needs more input, or when a callback dropped or freed the connection. */
static void read_results(pgconn *pc)
{
    PGconn *c = pc->conn;

    while (pc->conn == c && !pc->stopping) {
        PGresult *r;
        ExecStatusType st;

        if (PQstatus(c) == CONNECTION_BAD) {
            lost(pc);
            return;
        }
        if (PQisBusy(c))
            break;
        r = PQgetResult(c);
        if (!r) {
            if (!pc->expect_null)
                break; /* nothing in the pipeline */
            pc->expect_null = 0;
            continue;
        }
        st = PQresultStatus(r);
        if (st == PGRES_PIPELINE_SYNC) {
            PQclear(r);
            if (pc->state == PGCONN_LOADING)
                setup_done(pc);
            continue;
        }
        pc->expect_null = 1;
        if (pc->state == PGCONN_LOADING) {
            setup_result(pc, r);
        } else if (pc->head) {
            pgconn_call *call = pc->head;

            pc->head = call->next;
            if (!pc->head)
                pc->tail = NULL;
            call->next = NULL;
            pc->st.in_flight--;
            if (pc->head)
                arm_deadline(pc);
            else
                uv_timer_stop(&pc->deadline);
            call->fn(call->arg, r, NULL);
        }
        PQclear(r);
    }
    drain_notifies(pc, c);
}

/* poll_watch, dropping the connection when it fails. Returns 0, or -1 after the drop. */
static int watch_or_drop(pgconn *pc, int events)
{
    int rv = poll_watch(pc, events);
    char why[200];

    if (rv == 0)
        return 0;
    snprintf(why, sizeof why, "cannot watch the connection: %s", uv_strerror(rv));
    drop(pc, why, why);
    return -1;
}

/* Connected and authenticated: pipeline mode, then the schema (on a work thread) or the
 * set-up run. */
static void connected(pgconn *pc)
{
    char why[300];

    if (PQsetnonblocking(pc->conn, 1) != 0 || PQenterPipelineMode(pc->conn) != 1) {
        one_line(why, sizeof why, "cannot set up the connection: ", PQerrorMessage(pc->conn));
        drop(pc, why, why);
        return;
    }
    if (watch_or_drop(pc, UV_READABLE) != 0 || !set_state(pc, PGCONN_LOADING, NULL))
        return;
    if (!pc->migrate)
        send_setup(pc);
    else if (!pc->migrating)
        start_migration(pc);
    /* else: the previous attempt's thread is finishing; after_mig starts ours */
}

/* One step of libpq's connection state machine, when the socket is ready for it. */
static void connect_step(pgconn *pc)
{
    PostgresPollingStatusType ps;
    char why[300];

    /* Stopped before PQconnectPoll may close the socket (see the top of the file). */
    uv_poll_stop(&pc->poll->h);
    pc->poll->events = 0;
    ps = PQconnectPoll(pc->conn);
    if (ps == PGRES_POLLING_FAILED) {
        one_line(why, sizeof why, "cannot connect: ", PQerrorMessage(pc->conn));
        drop(pc, why, why);
    } else if (ps == PGRES_POLLING_OK) {
        connected(pc);
    } else {
        watch_or_drop(pc, ps == PGRES_POLLING_READING ? UV_READABLE : UV_WRITABLE);
    }
}

static void on_poll(uv_poll_t *h, int status, int events)
{
    pgconn *pc = h->data;

    if (status < 0) {
        /* libuv stopped the handle; libpq meets the error itself and says it in its words. */
        pc->poll->events = 0;
        events = UV_READABLE | UV_WRITABLE;
    }
    if (pc->state == PGCONN_CONNECTING) {
        connect_step(pc);
        return;
    }
    if (!pc->conn)
        return;
    if (events & UV_WRITABLE) {
        int rv = PQflush(pc->conn);

        if (rv < 0) {
            lost(pc);
            return;
        }
        if (rv == 0)
            pc->writing = 0;
    }
    if (events & UV_READABLE) {
        if (!PQconsumeInput(pc->conn)) {
            lost(pc);
            return;
        }
        read_results(pc);
    }
    if (pc->conn && pc->poll)
        watch_or_drop(pc, UV_READABLE | (pc->writing ? UV_WRITABLE : 0));
}

/* After queueing output: flushes what the socket takes now and watches for writable while
 * libpq holds the rest. Returns 0, or -1 when the connection failed. */
static int flush_out(pgconn *pc)
{
    int rv;

    if (pc->writing)
        return 0; /* the poll flushes when the socket is writable */
    rv = PQflush(pc->conn);
    if (rv < 0)
        return -1;
    if (rv == 1) {
        pc->writing = 1;
        if (poll_watch(pc, UV_READABLE | UV_WRITABLE) != 0)
            return -1;
    }
    return 0;
}

/* The set-up run: the session's settings, PREPARE every statement, LISTEN, one sync; its results
 * go to setup_result. */
static void send_setup(pgconn *pc)
{
    PGconn *c = pc->conn;
    char why[300];
    int ok = 1;

    pc->setup_n = 0;
    ok = PQsendQueryParams(c, PGCONN_SESSION_SQL, 0, NULL, NULL, NULL, NULL, 0);
    for (size_t i = 0; ok && i < pc->nstmts; i++)
        ok = PQsendPrepare(c, pc->stmts[i].name, pc->stmts[i].sql, pc->stmts[i].nparams, NULL);
    if (ok && pc->listen) {
        char *id = PQescapeIdentifier(c, pc->listen, strlen(pc->listen));
        size_t len = id ? strlen(id) + sizeof "LISTEN " : 0;
        char *sql = id ? alloc_malloc(len) : NULL;

        if (sql) {
            snprintf(sql, len, "LISTEN %s", id);
            ok = PQsendQueryParams(c, sql, 0, NULL, NULL, NULL, NULL, 0);
        } else {
            ok = 0;
        }
        alloc_free(sql);
        PQfreemem(id);
    }
    if (ok)
        ok = PQpipelineSync(c);
    if (!ok || flush_out(pc) != 0) {
        one_line(why, sizeof why, "cannot set up the connection: ", PQerrorMessage(c));
        drop(pc, why, why);
    }
}

/* ---- Calls ------------------------------------------------------------------------------- */

static const pgconn_stmt *find_stmt(const pgconn *pc, const char *name)
{
    for (size_t i = 0; i < pc->nstmts; i++)
        if (strcmp(pc->stmts[i].name, name) == 0)
            return &pc->stmts[i];
    return NULL;
}

int pgconn_send(pgconn *pc, pgconn_call *call)
{
    const pgconn_stmt *s;

    if (pc->state != PGCONN_UP || !pc->conn || pc->stopping || pc->broken)
        return SLUICE_ESTATE;
    s = call->stmt ? find_stmt(pc, call->stmt) : NULL;
    if (!s || call->nparams != s->nparams || !call->fn)
        return SLUICE_EINVAL;
    if (!PQsendQueryPrepared(pc->conn, s->name, call->nparams, call->values, NULL, NULL,
                             s->binary ? 1 : 0))
        return SLUICE_EIO; /* nothing was queued */
    if (!PQpipelineSync(pc->conn)) {
        /* Queued without its sync, the statement would take the next call's results: the
         * connection cannot be used any more. Dropped from the loop (never inside a send). */
        pc->broken = 1;
        arm_deadline(pc);
        return SLUICE_EIO;
    }
    call->pc = pc;
    call->next = NULL;
    call->deadline_ms = (int64_t)(uv_now(pc->loop) + (uint64_t)pc->timeout_ms);
    if (pc->tail)
        pc->tail->next = call;
    else
        pc->head = call;
    pc->tail = call;
    pc->st.in_flight++;
    pc->st.calls++;
    if (flush_out(pc) != 0)
        pc->broken = 1; /* answered by the drop, from the loop */
    if (pc->head == call || pc->broken)
        arm_deadline(pc);
    return 0;
}

/* ---- Deadlines --------------------------------------------------------------------------- */

static void on_deadline(uv_timer_t *t)
{
    pgconn *pc = t->data;
    uint64_t now = uv_now(pc->loop);
    char why[300];

    if (pc->broken) {
        lost(pc);
        return;
    }
    if (pc->state == PGCONN_CONNECTING || pc->state == PGCONN_LOADING) {
        if (now < pc->attempt_deadline) {
            arm_deadline(pc);
            return;
        }
        snprintf(why, sizeof why, "PostgreSQL did not %s within %lld ms",
                 pc->state == PGCONN_CONNECTING
                     ? "accept the connection"
                     : "finish setting up the connection (schema, PREPARE, LISTEN)",
                 (long long)pc->timeout_ms);
        drop(pc, why, why);
        return;
    }
    if (pc->state == PGCONN_UP && pc->head && (int64_t)now >= pc->head->deadline_ms) {
        /* A stopped server keeps its connections open and answers nothing: only a deadline
         * tells. */
        pc->st.timeouts++;
        snprintf(why, sizeof why, "timeout: PostgreSQL did not answer within %lld ms",
                 (long long)pc->timeout_ms);
        drop(pc, why, "timeout");
        return;
    }
    arm_deadline(pc);
}

static void arm_deadline(pgconn *pc)
{
    uint64_t now = uv_now(pc->loop), due;

    if (pc->broken)
        due = now;
    else if (pc->state == PGCONN_CONNECTING || pc->state == PGCONN_LOADING)
        due = pc->attempt_deadline;
    else if (pc->state == PGCONN_UP && pc->head)
        due = (uint64_t)pc->head->deadline_ms;
    else {
        uv_timer_stop(&pc->deadline);
        return;
    }
    uv_timer_start(&pc->deadline, on_deadline, due > now ? due - now : 0, 0);
}

/* ---- Connecting -------------------------------------------------------------------------- */

static void start_attempt(pgconn *pc)
{
    const char *vals[3];
    char why[300];

    if (pc->stopping)
        return;
    pc->gen++;
    pc->attempt_deadline = uv_now(pc->loop) + (uint64_t)pc->timeout_ms;
    if (!set_state(pc, PGCONN_CONNECTING, NULL))
        return;
    arm_deadline(pc);
    pc->conn = PQconnectStartParams(conn_keys, conn_values(pc, vals), 1);
    if (!pc->conn) {
        drop(pc, "cannot connect: out of memory", "cannot connect: out of memory");
        return;
    }
    PQsetNoticeProcessor(pc->conn, ignore_notice, NULL);
    if (PQstatus(pc->conn) == CONNECTION_BAD) {
        one_line(why, sizeof why, "cannot connect: ", PQerrorMessage(pc->conn));
        drop(pc, why, why);
        return;
    }
    /* libpq's first step: wait until the socket is writable (the TCP connect is done). */
    watch_or_drop(pc, UV_WRITABLE);
}

/* ---- Life -------------------------------------------------------------------------------- */

int pgconn_check_conninfo(const char *conninfo, char *err, size_t errlen)
{
    char *msg = NULL;
    PQconninfoOption *opts;

    if (err && errlen)
        err[0] = '\0';
    if (!conninfo) {
        if (err && errlen)
            snprintf(err, errlen, "no connection string");
        return SLUICE_EINVAL;
    }
    opts = PQconninfoParse(conninfo, &msg);
    if (opts) {
        PQconninfoFree(opts);
        return 0;
    }
    if (!msg)
        return SLUICE_ENOMEM; /* libpq's parser says nothing only when it ran out of memory */
    if (err && errlen)
        one_line(err, errlen, "", msg);
    PQfreemem(msg);
    return SLUICE_EINVAL;
}

static int options_valid(const pgconn_options *o)
{
    if (!o || !o->conninfo || o->timeout_ms <= 0 || (o->nstmts > 0 && !o->stmts) ||
        (o->listen && (!o->listen[0] || !o->on_notify)))
        return 0;
    for (size_t i = 0; i < o->nstmts; i++)
        if (!o->stmts[i].name || !o->stmts[i].sql || o->stmts[i].nparams < 0)
            return 0;
    return 1;
}

int pgconn_new(uv_loop_t *loop, const pgconn_options *o, pgconn **out)
{
    pgconn *pc;
    int rc;

    *out = NULL;
    if (!options_valid(o))
        return SLUICE_EINVAL;
    rc = pgconn_check_conninfo(o->conninfo, NULL, 0);
    if (rc != 0)
        return rc;
    pc = alloc_calloc(1, sizeof(*pc));
    if (!pc)
        return SLUICE_ENOMEM;
    pc->conninfo = alloc_memdup0(o->conninfo, strlen(o->conninfo));
    if (!pc->conninfo)
        goto fail_pc;
    if (o->listen) {
        pc->listen = alloc_memdup0(o->listen, strlen(o->listen));
        if (!pc->listen)
            goto fail_conninfo;
    }
    if (uv_mutex_init(&pc->mig_lock) != 0)
        goto fail_listen;
    pc->loop = loop;
    /* A day is "never" here, and keeps uv_now() + timeout far from overflowing. */
    pc->timeout_ms = o->timeout_ms > PGCONN_TIMEOUT_CAP_MS ? PGCONN_TIMEOUT_CAP_MS : o->timeout_ms;
    pc->migrate = o->migrate;
    pc->stmts = o->stmts;
    pc->nstmts = o->nstmts;
    pc->on_state = o->on_state;
    pc->arg = o->arg;
    pc->on_notify = o->on_notify;
    pc->backoff_ms = PGCONN_BACKOFF_MIN_MS;
    pc->mig_fd = -1;
    pc->state = PGCONN_DOWN;
    uv_timer_init(loop, &pc->deadline);
    pc->deadline.data = pc;
    uv_timer_init(loop, &pc->retry);
    pc->retry.data = pc;
    pc->handles = 2;
    /* The first attempt from the loop: no callback runs inside pgconn_new. */
    uv_timer_start(&pc->retry, on_retry, 0, 0);
    *out = pc;
    return 0;

fail_listen:
    alloc_free(pc->listen);
fail_conninfo:
    alloc_free(pc->conninfo);
fail_pc:
    alloc_free(pc);
    return SLUICE_ENOMEM;
}

void pgconn_free(pgconn *pc)
{
    if (!pc || pc->stopping)
        return;
    pc->stopping = 1;
    drop(pc, "stopped", "stopped");
    uv_close((uv_handle_t *)&pc->deadline, on_handle_closed);
    uv_close((uv_handle_t *)&pc->retry, on_handle_closed);
}

pgconn_state pgconn_get_state(const pgconn *pc)
{
    return pc->state;
}

const char *pgconn_last_error(const pgconn *pc)
{
    return pc->last_error;
}

void pgconn_get_stats(const pgconn *pc, pgconn_stats *out)
{
    *out = pc->st;
}
