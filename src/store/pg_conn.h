/* SPDX-License-Identifier: MIT */
/*
 * One connection to PostgreSQL on the server's libuv loop (libpq's non-blocking API in pipeline
 * mode), the PostgreSQL store's counterpart of redis_conn.h. It connects without blocking
 * (PQconnectStart / PQconnectPoll driven by a uv_poll on the socket), brings the database's
 * schema up to date off the loop (pgs_migrate on a blocking connection of its own, in a libuv
 * work thread, on every (re)connect: one SELECT when nothing is to do), turns JIT off for the
 * session (PGCONN_SESSION_SQL in pg_conn.c), prepares the statements
 * it was given, LISTENs on a channel when asked, and reconnects by itself with a backoff (20 ms
 * doubling to 1 s) whenever the server goes away or stops answering.
 *
 * States: DOWN (no connection; a reconnect is scheduled) -> CONNECTING (TCP/Unix connect,
 * authentication) -> LOADING (schema check, PREPAREs, LISTEN) -> UP (calls accepted).
 * REFUSED is final: the database holds a schema newer than this build knows (pgs_migrate's
 * SLUICE_ESTATE); no reconnect is tried, and last_error says why. Calls are accepted only when
 * UP; any other state refuses them at once (the caller applies its failure mode).
 *
 * Calls pipeline: pgconn_send does not wait for the answer of the call before it. Each call is
 * one prepared statement followed by a pipeline sync, so each is its own transaction, and a
 * failing call (an error result) never aborts the calls after it.
 *
 * Deadlines, not hopes: every call and every connection attempt has a deadline of timeout_ms
 * (a SIGSTOPped postmaster's backend still holds its TCP connection and answers nothing). When
 * the oldest call in flight passes it, the connection is dropped: every call in flight is
 * answered (result NULL, why "timeout"), and a new connection is made. A call dropped that way
 * may still have been committed by the server: whoever calls must treat "no answer" as
 * "unknown", never as "not done".
 *
 * Invariants:
 * - every call accepted by pgconn_send gets exactly one answer through its callback, in the
 *   order the calls were made;
 * - the loop never waits on the network: every libpq call on the loop thread is non-blocking
 *   (the only blocking libpq use is the migration, on a work thread, on its own connection);
 * - callbacks run on the loop thread, never inside pgconn_send.
 */
#ifndef SLUICE_STORE_PG_CONN_H
#define SLUICE_STORE_PG_CONN_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

struct pg_result; /* libpq's PGresult */

typedef struct pgconn pgconn;

typedef enum pgconn_state {
    PGCONN_DOWN = 0,   /* no connection; one is scheduled */
    PGCONN_CONNECTING, /* connecting, authenticating */
    PGCONN_LOADING,    /* connected; schema, PREPAREs and LISTEN not yet done */
    PGCONN_UP,         /* calls accepted */
    PGCONN_REFUSED     /* final: the database's schema is newer than this build's */
} pgconn_state;

/* Backoff between connection attempts. */
#define PGCONN_BACKOFF_MIN_MS 20
#define PGCONN_BACKOFF_MAX_MS 1000

/* One statement prepared on every connection. */
typedef struct pgconn_stmt {
    const char *name; /* borrowed: must outlive the connection */
    const char *sql;  /* borrowed */
    int nparams;      /* text parameters, types inferred by the server */
    int binary;       /* 1: results in binary format (PQsendQueryPrepared's resultFormat) */
} pgconn_stmt;

typedef struct pgconn_options {
    const char *conninfo;     /* a libpq URI or key=value string; copied */
    int64_t timeout_ms;       /* deadline of a call and of a connection attempt, > 0 */
    int migrate;              /* 1: run pgs_migrate on every (re)connect before LOADING ends */
    const pgconn_stmt *stmts; /* prepared on every connection; the array is borrowed */
    size_t nstmts;
    /* Called on every change of state (may be NULL), with why the connection went down or was
     * refused (NULL when it came up). Runs on the loop thread. */
    void (*on_state)(void *arg, pgconn_state state, const char *why);
    void *arg;
    /* When set (copied), the connection LISTENs on this channel on every (re)connect, and
     * each NOTIFY on it is handed to on_notify (payload valid during the call only).
     * Notifications sent while it was not UP are lost: whoever listens treats coming UP as
     * "something may have been missed". */
    const char *listen;
    void (*on_notify)(void *arg, const char *payload);
} pgconn_options;

/* The answer to one call: `result` is libpq's (valid during the callback only; an error is a
 * result whose status is PGRES_FATAL_ERROR, with PQresultErrorMessage), or NULL when there is
 * none, with `why` saying so ("timeout", "connection lost: ...", "stopped"). */
typedef void (*pgconn_reply_fn)(void *arg, const struct pg_result *result, const char *why);

/* One call, in memory the caller owns (embedded in its batch): the caller sets the first five
 * fields; the rest is pgconn's. The call and the values must stay valid and unchanged until fn
 * has run. The statement is one of the options' stmts, by name; values are its nparams text
 * parameters (a NULL entry is SQL NULL). */
typedef struct pgconn_call {
    const char *stmt;
    int nparams;
    const char *const *values;
    pgconn_reply_fn fn;
    void *arg;
    /* private */
    struct pgconn *pc;
    int64_t deadline_ms;      /* uv_now of the loop when it times out */
    struct pgconn_call *next; /* the calls in flight, oldest first */
} pgconn_call;

/* Counters, for INFO and /metrics. */
typedef struct pgconn_stats {
    uint64_t connects;        /* connections that reached UP */
    uint64_t disconnects;     /* UP connections lost (or dropped) */
    uint64_t failed_connects; /* attempts that did not reach UP */
    uint64_t calls;           /* calls sent */
    uint64_t timeouts;        /* connections dropped because the server did not answer in time */
    uint64_t notifies;        /* notifications handed to on_notify */
    uint64_t in_flight;       /* calls not answered yet */
    int schema_from;          /* the schema version found by the last migration (0: none) */
} pgconn_stats;

/* Creates the connection and starts connecting. Returns 0 with *out, SLUICE_ENOMEM, or
 * SLUICE_EINVAL (bad options; a conninfo libpq cannot parse). */
int pgconn_new(uv_loop_t *loop, const pgconn_options *o, pgconn **out);

/* Answers every call in flight (result NULL, why "stopped"), closes the connection and the
 * handles; the memory is freed once the loop has run their close callbacks (the caller runs
 * the loop; a migration still running on a work thread is waited for by the loop too). Accepts
 * NULL. No callback of on_state or on_notify runs after it. */
void pgconn_free(pgconn *pc);

pgconn_state pgconn_get_state(const pgconn *pc);

/* Why the connection last went down or was refused ("" when it never did). */
const char *pgconn_last_error(const pgconn *pc);

/* Sends call (see pgconn_call). Returns 0, after which call->fn runs exactly once, later; or
 * SLUICE_ESTATE when the connection is not UP, SLUICE_EINVAL for an unknown statement,
 * SLUICE_ENOMEM / SLUICE_EIO when libpq could not queue it: then fn never runs. */
int pgconn_send(pgconn *pc, pgconn_call *call);

void pgconn_get_stats(const pgconn *pc, pgconn_stats *out);

/* The name of a state: "down", "connecting", "loading", "up", "refused". */
const char *pgconn_state_name(pgconn_state s);

/* Checks a conninfo (URI or key=value) with libpq's own parser without connecting. Returns 0,
 * or SLUICE_EINVAL with libpq's message in err (errlen bytes). Pure: used by config
 * validation. */
int pgconn_check_conninfo(const char *conninfo, char *err, size_t errlen);

#endif
