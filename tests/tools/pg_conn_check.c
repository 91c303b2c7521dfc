/* SPDX-License-Identifier: MIT */
/*
 * sluice_pg_conn_check: the PostgreSQL store's connection (src/store/pg_conn.c) against a real
 * PostgreSQL, on a libuv loop of its own. Driven by tests/server/pg_conn.sh, which starts a
 * throwaway cluster and, for some modes, stops, freezes or restarts it while this program runs.
 *
 * Modes:
 *   basic    comes UP with the schema migrated; 1000 calls pipelined without waiting answered in
 *            order; a failing call answers its error and the calls after it succeed; NOTIFY
 *            reaches on_notify; refusals (not UP, unknown statement, bad conninfo); pgconn_free
 *            while connecting, while migrating, with calls in flight, and inside a callback.
 *   timeout  no PostgreSQL needed: a listener that accepts and never answers, and a closed port;
 *            the connection never comes UP, goes DOWN with a reason and keeps trying.
 *   stall    prints READY when UP and waits for SIGUSR1 (the script has SIGSTOPped the server);
 *            calls time out, attempts fail; prints STALLED and waits until the server (SIGCONTed
 *            by the script) serves again.
 *   restart  prints READY when UP with calls in flight (pg_sleep); the script restarts the
 *            server; the calls are all answered, none a success; the connection comes back UP
 *            by itself, LISTENs again and serves calls.
 *   newer    the database's schema is newer than this build's (the script set it): REFUSED with
 *            the message, and nothing more is tried.
 *
 * Prints one line per check ("ok - ..." or "FAIL - ...") and a summary; exits 0 iff all passed.
 * Waits are bounded by loop timers (a guard per wait), never by sleeps.
 *
 * Usage: sluice_pg_conn_check CONNINFO MODE
 */
#include <libpq-fe.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "sluice/error.h"
#include "store/pg_conn.h"
#include "store/pg_schema.h"

#include "../unit/pg_fixture.h"

#define NPIPE   1000
#define CHANNEL "sluice Test" /* upper case and a space: the LISTEN must quote it */

static int passed, failed;

static void check(int ok, const char *name, const char *fmt, ...)
{
    va_list ap;

    if (ok) {
        passed++;
        printf("ok - %s\n", name);
    } else {
        failed++;
        printf("FAIL - %s: ", name);
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        printf("\n");
    }
    fflush(stdout);
}

/* ---- The world of one run ---------------------------------------------------------------- */

typedef struct world {
    uv_loop_t loop;
    uv_timer_t guard; /* ends a wait that took too long */
    uv_signal_t usr1; /* the script's "go on" */
    int expired, go, in_send, freed;
    int nstates[5];     /* on_state calls per state */
    int after_free;     /* callbacks of any kind after pgconn_free */
    int ncalls_state;   /* on_state calls in all */
    char last_why[300]; /* the last non-NULL why of on_state */
    char notified[64];  /* the last payload */
    int nnotify;
    pgconn *pc;
    int free_in_state; /* pgconn_free from a timer once this state is reached (-1: never) */
    uv_timer_t free_soon;
} world;

static const pgconn_stmt stmts[] = {
    {"add1", "SELECT $1::int + 1", 1, 0},
    {"div", "SELECT 10 / $1::int", 1, 0},
    {"sleep", "SELECT pg_sleep($1::float8)", 1, 0},
    {"ver", "SELECT max(version) FROM sluice_schema", 0, 0},
    {"len", "SELECT length($1)", 1, 0},
    /* The same bytea asked in text (hex escaped) and in binary (the bytes themselves). */
    {"bytes", "SELECT $1::bytea", 1, 0},
    {"bytes_bin", "SELECT $1::bytea", 1, 1},
};

static void free_now(uv_timer_t *t)
{
    world *w = t->data;

    w->freed = 1;
    pgconn_free(w->pc);
}

static void on_state(void *arg, pgconn_state s, const char *why)
{
    world *w = arg;

    if (w->freed)
        w->after_free++;
    w->nstates[s]++;
    w->ncalls_state++;
    if (why)
        snprintf(w->last_why, sizeof w->last_why, "%s", why);
    if (getenv("PGCONN_CHECK_VERBOSE"))
        fprintf(stderr, "state %s%s%s\n", pgconn_state_name(s), why ? ": " : "", why ? why : "");
    if ((int)s == w->free_in_state) {
        /* From the loop, so that what the state started (the migration) is under way. */
        w->free_in_state = -1;
        uv_timer_start(&w->free_soon, free_now, 0, 0);
    }
}

static void on_notify(void *arg, const char *payload)
{
    world *w = arg;

    if (w->freed)
        w->after_free++;
    w->nnotify++;
    snprintf(w->notified, sizeof w->notified, "%s", payload);
}

static void on_guard(uv_timer_t *t)
{
    ((world *)t->data)->expired = 1;
}

static void on_usr1(uv_signal_t *s, int signum)
{
    (void)signum;
    ((world *)s->data)->go = 1;
}

static void world_init(world *w)
{
    memset(w, 0, sizeof *w);
    uv_loop_init(&w->loop);
    uv_timer_init(&w->loop, &w->guard);
    w->guard.data = w;
    uv_timer_init(&w->loop, &w->free_soon);
    w->free_soon.data = w;
    uv_signal_init(&w->loop, &w->usr1);
    w->usr1.data = w;
    uv_signal_start(&w->usr1, on_usr1, SIGUSR1);
    uv_unref((uv_handle_t *)&w->usr1);
    w->free_in_state = -1;
}

/* Runs the loop until pred(w) holds or ms pass. Returns whether pred holds. */
static int wait_for(world *w, int (*pred)(world *), uint64_t ms)
{
    w->expired = 0;
    uv_timer_start(&w->guard, on_guard, ms, 0);
    while (!pred(w) && !w->expired)
        uv_run(&w->loop, UV_RUN_ONCE);
    uv_timer_stop(&w->guard);
    return pred(w);
}

static int never(world *w)
{
    (void)w;
    return 0;
}

static int is_up(world *w)
{
    return w->pc && pgconn_get_state(w->pc) == PGCONN_UP;
}

static int got_go(world *w)
{
    return w->go;
}

/* Frees the connection and runs the loop until nothing is left on it: the loop ending proves
 * every handle was closed (and a migration thread waited for). */
static void world_free_conn(world *w)
{
    if (!w->freed) {
        w->freed = 1;
        pgconn_free(w->pc);
    }
    uv_timer_stop(&w->guard);
    uv_run(&w->loop, UV_RUN_DEFAULT);
    w->pc = NULL;
}

static void world_close(world *w)
{
    uv_close((uv_handle_t *)&w->guard, NULL);
    uv_close((uv_handle_t *)&w->free_soon, NULL);
    uv_close((uv_handle_t *)&w->usr1, NULL);
    uv_run(&w->loop, UV_RUN_DEFAULT);
    uv_loop_close(&w->loop);
}

static int open_conn(world *w, const char *conninfo, int64_t timeout_ms, int migrate,
                     const char *listen)
{
    pgconn_options o = {
        .conninfo = conninfo,
        .timeout_ms = timeout_ms,
        .migrate = migrate,
        .stmts = stmts,
        .nstmts = sizeof stmts / sizeof stmts[0],
        .on_state = on_state,
        .arg = w,
        .listen = listen,
        .on_notify = listen ? on_notify : NULL,
    };

    w->freed = 0;
    w->after_free = 0;
    memset(w->nstates, 0, sizeof w->nstates);
    w->ncalls_state = 0;
    w->last_why[0] = '\0';
    return pgconn_new(&w->loop, &o, &w->pc);
}

/* ---- Calls ------------------------------------------------------------------------------- */

typedef struct tcall {
    pgconn_call c;
    world *w;
    int idx;
    int *next_idx; /* the index the next answer must have (order), or NULL */
    int *order_bad;
    char val[32];
    const char *vals[1];
    int answers;    /* times fn ran */
    int in_send;    /* fn ran inside pgconn_send */
    int status;     /* ExecStatusType, -1 for no result */
    char why[300];  /* why, when there was no result */
    char value[64]; /* the first cell of a row, or the error message */
    int free_in_fn; /* fn frees the connection */
} tcall;

static void on_reply(void *arg, const struct pg_result *r, const char *why)
{
    tcall *t = arg;
    const PGresult *res = (const PGresult *)r;

    t->answers++;
    if (t->w->in_send)
        t->in_send = 1;
    if (t->next_idx) {
        if (*t->next_idx != t->idx)
            (*t->order_bad)++;
        *t->next_idx = t->idx + 1;
    }
    t->status = res ? (int)PQresultStatus(res) : -1;
    snprintf(t->why, sizeof t->why, "%s", why ? why : "");
    t->value[0] = '\0';
    if (res && PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) > 0)
        snprintf(t->value, sizeof t->value, "%s", PQgetvalue(res, 0, 0));
    else if (res)
        snprintf(t->value, sizeof t->value, "%s", PQresultErrorMessage(res));
    if (t->free_in_fn) {
        t->w->freed = 1;
        pgconn_free(t->w->pc);
    }
}

/* Fills t for a call of stmt with one value (none when val is NULL). */
static void call_prep(world *w, tcall *t, const char *stmt, const char *val)
{
    memset(t, 0, sizeof *t);
    t->w = w;
    t->status = -2;
    if (val) {
        snprintf(t->val, sizeof t->val, "%s", val);
        t->vals[0] = t->val;
    }
    t->c.stmt = stmt;
    t->c.nparams = val ? 1 : 0;
    t->c.values = t->vals;
    t->c.fn = on_reply;
    t->c.arg = t;
}

static int send_prepped(world *w, tcall *t)
{
    int rc;

    w->in_send = 1;
    rc = pgconn_send(w->pc, &t->c);
    w->in_send = 0;
    return rc;
}

static int call_send(world *w, tcall *t, const char *stmt, const char *val)
{
    call_prep(w, t, stmt, val);
    return send_prepped(w, t);
}

static tcall *pending_calls;
static size_t npending;

static int calls_done(world *w)
{
    (void)w;
    for (size_t i = 0; i < npending; i++)
        if (pending_calls[i].answers == 0)
            return 0;
    return 1;
}

/* Waits for n calls to be answered. */
static int wait_calls(world *w, tcall *calls, size_t n, uint64_t ms)
{
    pending_calls = calls;
    npending = n;
    return wait_for(w, calls_done, ms);
}

/* Sends n add1 calls (values base..base+n-1) and checks every answer. */
static void check_add1(world *w, const char *name, int base, size_t n)
{
    tcall *calls = calloc(n, sizeof *calls);
    int sent = 1, bad = 0;
    char v[32];

    for (size_t i = 0; i < n && sent; i++) {
        snprintf(v, sizeof v, "%d", base + (int)i);
        sent = call_send(w, &calls[i], "add1", v) == 0;
    }
    if (sent)
        wait_calls(w, calls, n, 10000);
    for (size_t i = 0; sent && i < n; i++) {
        snprintf(v, sizeof v, "%d", base + (int)i + 1);
        if (calls[i].answers != 1 || calls[i].status != PGRES_TUPLES_OK ||
            strcmp(calls[i].value, v) != 0)
            bad++;
    }
    check(sent && bad == 0, name, "sent %d, %d calls answered wrong (first: %d answers, %s %s)",
          sent, bad, calls[0].answers, calls[0].value, calls[0].why);
    free(calls);
}

/* ---- basic ------------------------------------------------------------------------------- */

static void check_refusals(world *w, const char *conninfo)
{
    pgconn *pc = (pgconn *)1;
    pgconn_options o = {.conninfo = "host=127.0.0.1 bogus_key=1", .timeout_ms = 1000};
    char err[200];
    int rc;

    rc = pgconn_new(&w->loop, &o, &pc);
    check(rc == SLUICE_EINVAL && pc == NULL, "bad conninfo: pgconn_new is EINVAL", "rc %d", rc);
    rc = pgconn_check_conninfo(o.conninfo, err, sizeof err);
    check(rc == SLUICE_EINVAL && strstr(err, "bogus_key") && !strchr(err, '\n'),
          "bad conninfo: check_conninfo says why, on one line", "rc %d, [%s]", rc, err);
    rc = pgconn_check_conninfo("postgresql://[::1", err, sizeof err);
    check(rc == SLUICE_EINVAL && err[0] && !strchr(err, '\n'), "bad URI: check_conninfo",
          "rc %d, [%s]", rc, err);
    rc = pgconn_check_conninfo(conninfo, err, sizeof err);
    check(rc == 0 && err[0] == '\0', "good conninfo: check_conninfo is 0", "rc %d [%s]", rc, err);
    rc = pgconn_check_conninfo("postgresql://sluice@127.0.0.1:5432/db?connect_timeout=2", err,
                               sizeof err);
    check(rc == 0, "URI: check_conninfo is 0", "rc %d [%s]", rc, err);
    o.conninfo = conninfo;
    o.timeout_ms = 0;
    rc = pgconn_new(&w->loop, &o, &pc);
    check(rc == SLUICE_EINVAL, "timeout 0: pgconn_new is EINVAL", "rc %d", rc);
    pgconn_free(NULL);
}

static int ver_of(world *w, int *ok)
{
    tcall t;

    *ok = call_send(w, &t, "ver", NULL) == 0 && wait_calls(w, &t, 1, 5000) &&
          t.status == PGRES_TUPLES_OK;
    return atoi(t.value);
}

/* A statement prepared with binary set answers in binary; the others in text. */
static void check_binary(world *w)
{
    tcall t[2];
    int ok = call_send(w, &t[0], "bytes", "abc") == 0 &&
             call_send(w, &t[1], "bytes_bin", "abc") == 0 && wait_calls(w, t, 2, 5000);

    check(ok && strcmp(t[0].value, "\\x616263") == 0, "a text statement answers bytea in text",
          "got %s", ok ? t[0].value : "no answer");
    check(ok && strcmp(t[1].value, "abc") == 0, "a binary statement answers the bytes", "got %s",
          ok ? t[1].value : "no answer");
}

static int notified(world *w)
{
    return w->nnotify > 0;
}

static void basic_pipeline(world *w)
{
    tcall *calls = calloc(NPIPE, sizeof *calls);
    int next = 0, order_bad = 0, sent = 0, wrong = 0, inside = 0;
    pgconn_stats st;
    char v[32];

    for (int i = 0; i < NPIPE; i++) {
        snprintf(v, sizeof v, "%d", i);
        if (call_send(w, &calls[i], "add1", v) != 0)
            break;
        calls[i].idx = i;
        calls[i].next_idx = &next;
        calls[i].order_bad = &order_bad;
        sent++;
    }
    pgconn_get_stats(w->pc, &st);
    check(sent == NPIPE && st.in_flight == NPIPE, "1000 calls sent without waiting",
          "sent %d, in flight %llu", sent, (unsigned long long)st.in_flight);
    wait_calls(w, calls, (size_t)sent, 20000);
    for (int i = 0; i < sent; i++) {
        snprintf(v, sizeof v, "%d", i + 1);
        if (calls[i].answers != 1 || calls[i].status != PGRES_TUPLES_OK ||
            strcmp(calls[i].value, v) != 0)
            wrong++;
        inside += calls[i].in_send;
    }
    check(wrong == 0 && order_bad == 0 && next == NPIPE, "1000 pipelined calls answered in order",
          "%d wrong, %d out of order, %d answered", wrong, order_bad, next);
    check(inside == 0, "no answer inside pgconn_send", "%d", inside);
    pgconn_get_stats(w->pc, &st);
    check(st.in_flight == 0, "nothing in flight after", "%llu", (unsigned long long)st.in_flight);
    free(calls);
}

static void basic_errors(world *w)
{
    tcall t[3];
    int rc[3];

    rc[0] = call_send(w, &t[0], "add1", "1");
    rc[1] = call_send(w, &t[1], "div", "0");
    rc[2] = call_send(w, &t[2], "add1", "2");
    wait_calls(w, t, 3, 5000);
    check(rc[1] == 0 && t[1].status == PGRES_FATAL_ERROR && strstr(t[1].value, "division by zero"),
          "a failing call answers its error", "rc %d status %d [%s] [%s]", rc[1], t[1].status,
          t[1].value, t[1].why);
    check(rc[0] == 0 && rc[2] == 0 && strcmp(t[0].value, "2") == 0 &&
              strcmp(t[2].value, "3") == 0 && t[2].status == PGRES_TUPLES_OK,
          "the calls around a failing one succeed", "[%s] [%s] %s", t[0].value, t[2].value,
          t[2].why);
    check(pgconn_get_state(w->pc) == PGCONN_UP, "a failing call keeps the connection UP", "%s",
          pgconn_state_name(pgconn_get_state(w->pc)));
}

/* NOTIFY from a plain blocking connection of the test's own. */
static int notify(const char *conninfo, const char *payload)
{
    PGconn *c = PQconnectdb(conninfo);
    const char *vals[2] = {CHANNEL, payload};
    PGresult *r;
    int ok;

    if (PQstatus(c) != CONNECTION_OK) {
        printf("# notify: %s", PQerrorMessage(c));
        PQfinish(c);
        return 0;
    }
    r = PQexecParams(c, "SELECT pg_notify($1, $2)", 2, NULL, vals, NULL, NULL, 0);
    ok = PQresultStatus(r) == PGRES_TUPLES_OK;
    PQclear(r);
    PQfinish(c);
    return ok;
}

static void basic_frees(world *w, const char *conninfo)
{
    tcall t[3];
    int rc;

    /* While connecting: nothing is called back. */
    rc = open_conn(w, conninfo, 5000, 1, CHANNEL);
    uv_run(&w->loop, UV_RUN_NOWAIT);
    world_free_conn(w);
    check(rc == 0 && w->after_free == 0, "free while connecting: no callback after", "rc %d, %d",
          rc, w->after_free);
    /* While the migration runs on its thread: the loop waits for it, then frees. */
    rc = open_conn(w, conninfo, 5000, 1, CHANNEL);
    w->free_in_state = PGCONN_LOADING;
    uv_run(&w->loop, UV_RUN_DEFAULT); /* ends only when the connection is gone */
    check(rc == 0 && w->freed && w->nstates[PGCONN_LOADING] == 1 && w->after_free == 0 &&
              w->nstates[PGCONN_UP] == 0,
          "free while migrating: the loop ends, no callback after", "rc %d freed %d loading %d %d",
          rc, w->freed, w->nstates[PGCONN_LOADING], w->after_free);
    w->pc = NULL;
    /* With calls in flight: each answered "stopped", at once. */
    rc = open_conn(w, conninfo, 5000, 1, CHANNEL);
    wait_for(w, is_up, 10000);
    for (int i = 0; i < 3; i++)
        call_send(w, &t[i], "sleep", "0.05");
    w->freed = 1;
    pgconn_free(w->pc);
    check(t[0].answers == 1 && t[2].answers == 1 && strcmp(t[1].why, "stopped") == 0 &&
              t[1].status == -1,
          "free with calls in flight answers them \"stopped\"", "%d %d [%s]", t[0].answers,
          t[2].answers, t[1].why);
    world_free_conn(w);
    check(w->after_free == 0, "free with calls in flight: no callback after", "%d", w->after_free);
    /* Inside a call's callback: the calls after it are answered "stopped". */
    rc = open_conn(w, conninfo, 5000, 1, CHANNEL);
    wait_for(w, is_up, 10000);
    call_send(w, &t[0], "add1", "1");
    t[0].free_in_fn = 1;
    call_send(w, &t[1], "add1", "2");
    call_send(w, &t[2], "add1", "3");
    wait_calls(w, t, 3, 5000);
    world_free_conn(w);
    check(t[0].status == PGRES_TUPLES_OK && t[1].answers == 1 && t[2].answers == 1 &&
              strcmp(t[2].why, "stopped") == 0 && w->after_free == 0,
          "free inside a callback", "%d %d %d [%s] %d", t[0].status, t[1].answers, t[2].answers,
          t[2].why, w->after_free);
}

/* A blocking connection of the test's own running sql (NULL on failure, printed). */
static PGconn *exec_on(PGconn *c, const char *conninfo, const char *sql)
{
    PGresult *r;

    if (!c)
        c = PQconnectdb(conninfo);
    if (PQstatus(c) != CONNECTION_OK) {
        printf("# %s", PQerrorMessage(c));
        PQfinish(c);
        return NULL;
    }
    r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
        printf("# %s: %s", sql, PQerrorMessage(c));
    PQclear(r);
    return c;
}

static int failed_at_least(world *w, uint64_t n)
{
    pgconn_stats st;

    pgconn_get_stats(w->pc, &st);
    return st.failed_connects >= n;
}

static int two_failed(world *w)
{
    return failed_at_least(w, 2);
}

static int loading(world *w)
{
    return w->nstates[PGCONN_LOADING] > 0;
}

/* Calls whose parameters (10 MB in all) overflow the socket's buffer: libpq keeps the rest and
 * the connection flushes it when the socket is writable again. */
static void basic_large(world *w)
{
    enum { N = 100, LEN = 100000 };
    tcall *calls = calloc(N, sizeof *calls);
    char *big = malloc(LEN + 1);
    const char *vals[1] = {big};
    int sent = 0, wrong = 0;

    memset(big, 'a', LEN);
    big[LEN] = '\0';
    for (int i = 0; i < N; i++) {
        call_prep(w, &calls[i], "len", "");
        calls[i].c.values = vals; /* the same 100 KB for each */
        sent += send_prepped(w, &calls[i]) == 0;
    }
    wait_calls(w, calls, N, 20000);
    for (int i = 0; i < N; i++)
        wrong += calls[i].answers != 1 || strcmp(calls[i].value, "100000") != 0;
    check(sent == N && wrong == 0, "100 calls of 100 KB each (writes wait for the socket)",
          "sent %d, %d wrong (%s %s)", sent, wrong, calls[0].value, calls[0].why);
    free(big);
    free(calls);
}

static int down_then_up(world *w)
{
    return w->nstates[PGCONN_DOWN] > 0 && is_up(w);
}

/* The server ends the idle connection (an operator's pg_terminate_backend): DOWN with why, then
 * UP again by itself. Finds it by the application_name the connection gives itself. */
static void basic_terminated(world *w, const char *conninfo)
{
    PGconn *c = PQconnectdb(conninfo);
    PGresult *r = PQexec(c, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                            "WHERE application_name = 'sluice'");
    const char *n = PQresultStatus(r) == PGRES_TUPLES_OK ? PQgetvalue(r, 0, 0) : "?";
    pgconn_stats st;

    check(strcmp(n, "1") == 0, "the connection shows as application_name 'sluice'", "%s %s", n,
          PQerrorMessage(c));
    PQclear(r);
    PQfinish(c);
    check(wait_for(w, down_then_up, 10000) && strstr(w->last_why, "connection lost: "),
          "terminated by the server: DOWN, then UP again", "[%s]", w->last_why);
    pgconn_get_stats(w->pc, &st);
    check(st.disconnects == 1 && st.connects == 2, "... one disconnect, two connects", "%llu %llu",
          (unsigned long long)st.disconnects, (unsigned long long)st.connects);
    check_add1(w, "... and serves calls", 7, 3);
}

/* The migration waits for the migrators' advisory lock, held by the test: its thread is blocked
 * inside a statement, which only the shutdown of its socket ends. */
static void basic_held_migration(world *w, const char *conninfo)
{
    PGconn *holder = exec_on(NULL, conninfo, "BEGIN");
    uint64_t t0;
    int rc;

    exec_on(holder, conninfo, "SELECT pg_advisory_xact_lock(125779665104229)");
    rc = open_conn(w, conninfo, 300, 1, NULL);
    check(rc == 0 && wait_for(w, two_failed, 10000) && w->nstates[PGCONN_UP] == 0 &&
              strstr(pgconn_last_error(w->pc), "finish setting up") != NULL,
          "a migration past the deadline: the attempt fails, retried", "[%s]",
          pgconn_last_error(w->pc));
    exec_on(holder, conninfo, "COMMIT");
    check(wait_for(w, is_up, 10000), "... UP once the migration can run", "[%s]",
          pgconn_last_error(w->pc));
    world_free_conn(w);
    exec_on(holder, conninfo, "BEGIN");
    exec_on(holder, conninfo, "SELECT pg_advisory_xact_lock(125779665104229)");
    rc = open_conn(w, conninfo, 30000, 1, NULL);
    wait_for(w, loading, 10000);
    wait_for(w, never, 200); /* the thread connects and waits for the lock */
    uv_update_time(&w->loop);
    t0 = uv_now(&w->loop);
    world_free_conn(w);
    uv_update_time(&w->loop);
    check(rc == 0 && uv_now(&w->loop) - t0 < 2000 && w->after_free == 0,
          "free while the migration waits in a statement: the loop ends at once", "rc %d, %llu ms",
          rc, (unsigned long long)(uv_now(&w->loop) - t0));
    exec_on(holder, conninfo, "COMMIT");
    PQfinish(holder);
}

static void mode_basic(world *w, const char *conninfo)
{
    tcall t;
    pgconn_stats st;
    int rc, ok, v;

    check_refusals(w, conninfo);
    rc = open_conn(w, conninfo, 5000, 1, CHANNEL);
    check(rc == 0 && pgconn_get_state(w->pc) == PGCONN_DOWN && w->ncalls_state == 0,
          "pgconn_new: DOWN, no callback inside it", "rc %d", rc);
    rc = call_send(w, &t, "add1", "1");
    check(rc == SLUICE_ESTATE && t.answers == 0, "send while not UP is ESTATE", "rc %d", rc);
    check(wait_for(w, is_up, 10000), "comes UP", "state %s: %s",
          pgconn_state_name(pgconn_get_state(w->pc)), pgconn_last_error(w->pc));
    check(w->nstates[PGCONN_CONNECTING] == 1 && w->nstates[PGCONN_LOADING] == 1 &&
              w->nstates[PGCONN_UP] == 1 && w->nstates[PGCONN_DOWN] == 0,
          "states: connecting, loading, up", "%d %d %d %d", w->nstates[PGCONN_CONNECTING],
          w->nstates[PGCONN_LOADING], w->nstates[PGCONN_UP], w->nstates[PGCONN_DOWN]);
    v = ver_of(w, &ok);
    check(ok && v == PGS_VERSION, "schema migrated (sluice_schema version = PGS_VERSION)",
          "ok %d version %d", ok, v);
    pgconn_get_stats(w->pc, &st);
    check(st.connects == 1 && st.failed_connects == 0 && st.schema_from <= PGS_VERSION,
          "stats after coming UP", "connects %llu failed %llu from %d",
          (unsigned long long)st.connects, (unsigned long long)st.failed_connects, st.schema_from);
    rc = call_send(w, &t, "nosuch", "1");
    check(rc == SLUICE_EINVAL, "unknown statement is EINVAL", "rc %d", rc);
    rc = call_send(w, &t, "ver", "1");
    check(rc == SLUICE_EINVAL, "wrong parameter count is EINVAL", "rc %d", rc);
    basic_pipeline(w);
    check_binary(w);
    basic_errors(w);
    check(notify(conninfo, "x") && wait_for(w, notified, 5000) && strcmp(w->notified, "x") == 0,
          "NOTIFY reaches on_notify", "%d notifications, [%s]", w->nnotify, w->notified);
    pgconn_get_stats(w->pc, &st);
    check(st.notifies == 1 && st.calls == NPIPE + 6 && st.timeouts == 0 && st.disconnects == 0,
          "stats after the calls", "notifies %llu calls %llu timeouts %llu disconnects %llu",
          (unsigned long long)st.notifies, (unsigned long long)st.calls,
          (unsigned long long)st.timeouts, (unsigned long long)st.disconnects);
    basic_large(w);
    basic_terminated(w, conninfo);
    world_free_conn(w);
    check(w->after_free == 0, "free: no callback after", "%d", w->after_free);
    basic_frees(w, conninfo);
    basic_held_migration(w, conninfo);
}

/* ---- timeout ----------------------------------------------------------------------------- */

/* pg_fixture.h's loopback socket, or the end of the program. */
static int loopback_socket(int do_listen, int *port)
{
    int fd = pgfix_loopback_socket(do_listen, port);

    if (fd < 0) {
        perror("loopback socket");
        exit(2);
    }
    return fd;
}

static int three_failed(world *w)
{
    return failed_at_least(w, 3);
}

static int five_failed(world *w)
{
    return failed_at_least(w, 5);
}

static uint64_t loop_ms(world *w)
{
    uv_update_time(&w->loop);
    return uv_now(&w->loop);
}

/* Opens a connection to loopback port `port` (connect timeout connect_ms) and waits until
 * `until` holds: the open's rc, with the wait's length in *ms and the stats after it in *st. */
static int attempts_on(world *w, int port, int connect_ms, int (*until)(world *), uint64_t *ms,
                       pgconn_stats *st)
{
    char conninfo[200];
    uint64_t t0;
    int rc;

    snprintf(conninfo, sizeof conninfo, "host=127.0.0.1 port=%d user=sluice dbname=postgres", port);
    rc = open_conn(w, conninfo, connect_ms, 1, NULL);
    t0 = loop_ms(w);
    wait_for(w, until, 10000);
    *ms = loop_ms(w) - t0;
    pgconn_get_stats(w->pc, st);
    return rc;
}

static void mode_timeout(world *w)
{
    pgconn_stats st;
    uint64_t ms;
    tcall t;
    int port, fd, rc;

    fd = loopback_socket(1, &port);
    rc = attempts_on(w, port, 200, three_failed, &ms, &st);
    check(rc == 0 && w->nstates[PGCONN_UP] == 0 && pgconn_get_state(w->pc) != PGCONN_UP,
          "silent server: never UP", "rc %d", rc);
    check(w->nstates[PGCONN_DOWN] >= 3 && strstr(w->last_why, "within 200 ms"),
          "silent server: DOWN with a reason", "%d times, [%s]", w->nstates[PGCONN_DOWN],
          w->last_why);
    /* Three attempts of 200 ms each, 20 and 40 ms apart. */
    check(st.failed_connects >= 3 && st.connects == 0 && ms >= 3 * 200 + 20 + 40,
          "silent server: each attempt fails at its deadline", "%llu in %llu ms",
          (unsigned long long)st.failed_connects, (unsigned long long)ms);
    check(strstr(pgconn_last_error(w->pc), "did not accept the connection") != NULL,
          "silent server: last_error", "[%s]", pgconn_last_error(w->pc));
    rc = call_send(w, &t, "add1", "1");
    check(rc == SLUICE_ESTATE, "silent server: send is ESTATE", "rc %d", rc);
    world_free_conn(w);
    close(fd);

    /* Nothing listens: refused at once, retried with the backoff. */
    fd = loopback_socket(0, &port);
    close(fd);
    rc = attempts_on(w, port, 5000, five_failed, &ms, &st);
    /* Five attempts, 20, 40, 80 and 160 ms apart: no sooner than the backoff allows. */
    check(rc == 0 && st.failed_connects == 5 && w->nstates[PGCONN_UP] == 0 &&
              ms >= 20 + 40 + 80 + 160,
          "closed port: retried with a backoff", "%llu attempts failed in %llu ms",
          (unsigned long long)st.failed_connects, (unsigned long long)ms);
    check(strstr(w->last_why, "cannot connect") && strstr(w->last_why, "refused") &&
              !strchr(w->last_why, '\n'),
          "closed port: DOWN with libpq's reason on one line", "[%s]", w->last_why);
    world_free_conn(w);
}

/* ---- stall ------------------------------------------------------------------------------- */

static void mode_stall(world *w, const char *conninfo)
{
    tcall t[3];
    pgconn_stats st;
    int ups, timed_out = 0;

    open_conn(w, conninfo, 500, 1, CHANNEL);
    check(wait_for(w, is_up, 10000), "comes UP", "%s", pgconn_last_error(w->pc));
    check_add1(w, "a call before the stall", 1, 1);
    printf("READY\n");
    fflush(stdout);
    wait_for(w, got_go, 30000);
    check(w->go, "the script froze the server (SIGUSR1)", "no signal");
    ups = w->nstates[PGCONN_UP];
    for (int i = 0; i < 3; i++)
        call_send(w, &t[i], "add1", "1");
    check(wait_calls(w, t, 3, 5000), "calls to a frozen server are answered", "not within 5 s");
    for (int i = 0; i < 3; i++)
        timed_out += t[i].answers == 1 && t[i].status == -1 && strcmp(t[i].why, "timeout") == 0;
    check(timed_out == 3, "... with (NULL, \"timeout\")", "%d of 3, [%s]", timed_out, t[0].why);
    pgconn_get_stats(w->pc, &st);
    check(st.timeouts == 1 && st.disconnects == 1 && st.in_flight == 0,
          "one timeout, one disconnect", "timeouts %llu disconnects %llu in flight %llu",
          (unsigned long long)st.timeouts, (unsigned long long)st.disconnects,
          (unsigned long long)st.in_flight);
    check(strstr(pgconn_last_error(w->pc), "timeout") != NULL, "last_error says timeout", "[%s]",
          pgconn_last_error(w->pc));
    check(wait_for(w, two_failed, 10000) && w->nstates[PGCONN_UP] == ups,
          "attempts to a frozen server fail at their deadline", "state %s [%s]",
          pgconn_state_name(pgconn_get_state(w->pc)), pgconn_last_error(w->pc));
    printf("STALLED\n");
    fflush(stdout);
    check(wait_for(w, is_up, 30000), "UP again by itself once the server runs", "%s",
          pgconn_last_error(w->pc));
    check_add1(w, "calls succeed again", 10, 10);
    world_free_conn(w);
}

/* ---- restart ----------------------------------------------------------------------------- */

static int was_down(world *w)
{
    return w->nstates[PGCONN_DOWN] > 0;
}

static void mode_restart(world *w, const char *conninfo)
{
    tcall t[5];
    pgconn_stats st;
    int answered = 0, succeeded = 0, unexplained = 0, ok, v;

    open_conn(w, conninfo, 30000, 1, CHANNEL);
    check(wait_for(w, is_up, 10000), "comes UP", "%s", pgconn_last_error(w->pc));
    for (int i = 0; i < 5; i++)
        call_send(w, &t[i], "sleep", "20");
    printf("READY\n");
    fflush(stdout);
    check(wait_calls(w, t, 5, 25000), "calls in flight at the restart are answered",
          "not within 25 s");
    for (int i = 0; i < 5; i++) {
        answered += t[i].answers;
        succeeded += t[i].status == PGRES_TUPLES_OK;
        /* An answer is the server's error (it said why before going) or no result with why. */
        unexplained += !(t[i].status == PGRES_FATAL_ERROR ||
                         (t[i].status == -1 && strncmp(t[i].why, "connection lost: ", 17) == 0));
        printf("# call %d: status %d, why [%s] %s\n", i, t[i].status, t[i].why, t[i].value);
    }
    check(answered == 5 && succeeded == 0 && unexplained == 0,
          "... each once, none a success, each with why", "%d answers, %d successes, %d bad",
          answered, succeeded, unexplained);
    check(wait_for(w, was_down, 10000) && strstr(w->last_why, "connection lost") != NULL,
          "DOWN with \"connection lost\"", "[%s]", w->last_why);
    check(wait_for(w, is_up, 60000), "UP again by itself after the restart", "%s",
          pgconn_last_error(w->pc));
    pgconn_get_stats(w->pc, &st);
    check(st.disconnects >= 1 && st.connects >= 2 && st.in_flight == 0,
          "stats: disconnects >= 1, connects >= 2", "disconnects %llu connects %llu",
          (unsigned long long)st.disconnects, (unsigned long long)st.connects);
    check_add1(w, "calls succeed after the restart", 100, 10);
    v = ver_of(w, &ok);
    check(ok && v == PGS_VERSION, "schema still there after the restart", "%d %d", ok, v);
    w->nnotify = 0;
    check(notify(conninfo, "after") && wait_for(w, notified, 5000) &&
              strcmp(w->notified, "after") == 0,
          "LISTENing again after the restart", "%d [%s]", w->nnotify, w->notified);
    world_free_conn(w);
}

/* ---- newer ------------------------------------------------------------------------------- */

static int refused(world *w)
{
    return pgconn_get_state(w->pc) == PGCONN_REFUSED;
}

static void mode_newer(world *w, const char *conninfo)
{
    pgconn_stats st;
    tcall t;
    int n, rc;

    open_conn(w, conninfo, 2000, 1, NULL);
    check(wait_for(w, refused, 10000), "a newer schema: REFUSED", "state %s [%s]",
          pgconn_state_name(pgconn_get_state(w->pc)), pgconn_last_error(w->pc));
    check(strstr(pgconn_last_error(w->pc), "newer than this sluice knows") &&
              strstr(w->last_why, "newer than this sluice knows") && !strchr(w->last_why, '\n'),
          "... with the message", "[%s] [%s]", pgconn_last_error(w->pc), w->last_why);
    n = w->ncalls_state;
    wait_for(w, never, 300);
    pgconn_get_stats(w->pc, &st);
    check(w->ncalls_state == n && refused(w) && st.failed_connects == 1 && st.connects == 0,
          "REFUSED is final: nothing more tried", "%d state changes, failed %llu",
          w->ncalls_state - n, (unsigned long long)st.failed_connects);
    rc = call_send(w, &t, "add1", "1");
    check(rc == SLUICE_ESTATE, "REFUSED: send is ESTATE", "rc %d", rc);
    world_free_conn(w);
}

int main(int argc, char **argv)
{
    world w;
    const char *conninfo, *mode;

    if (argc != 3) {
        fprintf(stderr, "usage: %s CONNINFO basic|timeout|stall|restart|newer\n", argv[0]);
        return 2;
    }
    conninfo = argv[1];
    mode = argv[2];
    alarm(180); /* a hang is a failure, not a stuck test run */
    world_init(&w);
    if (strcmp(mode, "basic") == 0)
        mode_basic(&w, conninfo);
    else if (strcmp(mode, "timeout") == 0)
        mode_timeout(&w);
    else if (strcmp(mode, "stall") == 0)
        mode_stall(&w, conninfo);
    else if (strcmp(mode, "restart") == 0)
        mode_restart(&w, conninfo);
    else if (strcmp(mode, "newer") == 0)
        mode_newer(&w, conninfo);
    else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    world_close(&w);
    printf("%s: %d passed, %d failed\n", mode, passed, failed);
    return failed == 0 && passed > 0 ? 0 : 1;
}
