/* SPDX-License-Identifier: MIT */
/*
 * The PostgreSQL transport of the shared store (rstore.h): a node's several connections to one
 * PostgreSQL ("lanes"), which call goes on which, and the wake-up NOTIFY. rstore.c keeps the
 * batches and the one FIFO in which every answer is applied; this file only decides where a
 * call is sent and keeps the connections.
 *
 * Why several: each call is a transaction, and with synchronous_commit on its commit waits for
 * a WAL flush. One connection runs one call at a time; N connections run N calls at once, and
 * PostgreSQL flushes the commits that wait together once (group commit). Why one by default:
 * measured (docs/postgres-store.md, "Several connections"), at -P 1 every client's request is in
 * some flush already, and N connections cut a node's traffic into N times as many calls, each
 * with PostgreSQL's fixed cost: on a loaded two-core machine four halved the task queue's
 * throughput. They pay where PostgreSQL has CPUs to spare and calls are long.
 *
 * Routing (rpg_lane), so that a client's commands run in the order it sent them:
 * - a client with a reply still outstanding (a deferred slot) stays on the lane of its last
 *   request: one connection runs its calls in order, so a request never overtakes an earlier
 *   one of the same client;
 * - else a decision (THROTTLE, CL.THROTTLE, LEASE.*) goes to lane 0, and anything else (task
 *   requests, series, limit changes) to the client's own lane, its id modulo N. Decisions share
 *   one lane because a hot key's row serializes the calls that touch it, each holding the row
 *   through its flush: split over N lanes, its decisions would commit a few per flush instead of
 *   all that arrived during the previous one (bench/pg_cluster.sh measures it);
 * - a lane that is not UP is skipped for the next one that is (its calls were all answered
 *   when it went down, so nothing of the client's is running there).
 * Replies stay in command order whatever the lanes, because rstore's FIFO applies answers in
 * the order the calls were sent.
 *
 * Deadlocks: the calls of one node on several connections are concurrent transactions exactly as
 * the calls of several nodes are, and every function takes the rows it may wait for in one fixed
 * order (sluice_lock_limit_rows, docs/postgres-store.md "Locking"): nothing new.
 *
 * Lane 0 is created first and LISTENs on the wake channel; the others are created once it has
 * been UP once (it has migrated the schema by then, so the others' migration check is one
 * SELECT, and a database refused for a newer schema never gets more than one connection). Each
 * lane reconnects by itself (pg_conn.h). The store is UP while any lane is UP; a call whose lane
 * went down goes to another (rpg_send).
 *
 * The NOTIFY: a task or series call whose answer carries the wake row (pgbatch_woke) has this
 * file send `SELECT pg_notify(...)` on its own, after the call's commit (007_pgconns.sql says
 * why); at most one is in flight, and those asked for meanwhile are covered by one more.
 */
#ifndef SLUICE_SERVER_RSTORE_PG_H
#define SLUICE_SERVER_RSTORE_PG_H

#include <stddef.h>
#include <stdint.h>

#include "server/conn.h"
#include "server/server.h"
#include "store/pg_conn.h"

struct pg_result;

typedef struct rpg rpg;

/* store.connections / --store-connections: connections per node to PostgreSQL. */
#define RPG_CONNECTIONS_DEFAULT 1
#define RPG_CONNECTIONS_MAX     64

/* PostgreSQL's prepared statement of the limits function. */
#define RPG_LIMITS_STMT "sluice_limits"

typedef struct rpg_options {
    const char *conninfo; /* libpq's; copied by each connection */
    const char *url;      /* the conninfo with its password replaced, for the log; copied */
    int connections;      /* 1..RPG_CONNECTIONS_MAX */
    int64_t timeout_ms;   /* every call's deadline (pg_conn.h) */
    int fail_open;        /* for the log line of an outage: what decisions do meanwhile */
} rpg_options;

/* Creates lane 0 (the others follow once it is UP). Returns 0 with *out, SLUICE_EINVAL (bad
 * options, a conninfo libpq refuses) or SLUICE_ENOMEM. s is the server whose rtasks and rdefs
 * hear the notifications and the connections coming UP. */
int rpg_new(server *s, const rpg_options *o, rpg **out);

/* Frees every connection (each answers its calls in flight, "stopped"); the memory goes with
 * the loop's close callbacks. Accepts NULL. */
void rpg_free(rpg *pg);

/* The number of lanes (the option's, created or not yet). */
int rpg_count(const rpg *pg);

/* 1 when at least one lane is UP; rpg_all_up: every lane. */
int rpg_up(const rpg *pg);
int rpg_all_up(const rpg *pg);

/* 1 when the database was refused for good (a newer schema). */
int rpg_refused(const rpg *pg);

/* Why no lane is UP: lane 0's last error, else its state's name. */
const char *rpg_why(const rpg *pg);

/* "up" while a lane is UP, else lane 0's state's name (pg_conn.h); why lane 0 last went down
 * ("" when it never did). */
const char *rpg_state_name(const rpg *pg);
const char *rpg_last_error(const rpg *pg);

/* 1 when lane 0, the one that LISTENs, is UP. */
int rpg_listening(const rpg *pg);

/* The lane for a request of client c (NULL: the node's own, e.g. a poll: lane 0), decision 1
 * for THROTTLE, CL.THROTTLE and LEASE.*; see the top of the file. Records it as c's lane. */
int rpg_lane(rpg *pg, conn *c, int decision);

/* Sends call on lane *lane, or on the next UP lane when that one is not UP (*lane says which).
 * Returns pgconn_send's code. The lane counts it in flight until rpg_answered. */
int rpg_send(rpg *pg, int *lane, pgconn_call *call);

/* The answer of a call rpg_send sent on lane (result NULL when there is none): it is no longer
 * in flight, and a task or series call whose result carries the wake row has the NOTIFY sent. */
void rpg_answered(rpg *pg, int lane, const pgconn_call *call, const struct pg_result *result);

/* 1 when lane has no call of rstore's in flight: the turn's batch of that lane may leave (one
 * call in flight per lane: what arrives meanwhile leaves together, one commit for all). */
int rpg_may_send(const rpg *pg, int lane);

/* The sums of every lane's counters; *up the lanes UP. */
void rpg_get_stats(const rpg *pg, pgconn_stats *sum, int *up);

/* Appends INFO's lines about the connections (store_connections, store_connections_up, the
 * NOTIFYs sent, and one store_conn_K line per lane) to buf. */
void rpg_info_append(const rpg *pg, char *buf, size_t len);

#endif
