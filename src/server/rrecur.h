/* SPDX-License-Identifier: MIT */
/*
 * Recurring series shared on Redis or PostgreSQL, the node's side: with `--store redis://...` or
 * `--store postgresql://...`, RECUR.ADD, RECUR.DEL and RECUR.INFO do not touch this process's
 * engine, and every node fires the series of every node. Both stores take the same requests and
 * give the same answers (store/redis_recur.h, the script's recur ops; store/pg_recur.h, the
 * function sluice_recur_call of src/store/pg/003_pgrecur.sql), so everything below holds for
 * both; on PostgreSQL an occurrence is added in the same transaction as the FIRE that moves its
 * series on.
 *
 * Commands: cmd_recur.c checks the arguments exactly as it always does (same errors, same
 * words), then hands the spec here; RECUR.ADD also checks the schedule (sluice_recurring_check)
 * and the occurrence's template (sluice_engine_resolve_task: its type, key, chain) as the
 * engine's add would. Each command is one call of the store's recur ops through rstore's FIFO
 * (rstore_send, after the turn's limits and task batches, so a client's replies keep its command
 * order) and is answered when the store answers.
 *
 * Firing: a timer per node. It lists the due series (store time; at most RRECUR_LIST_MAX a
 * call), computes for each the first schedule point at or after its stored next with the
 * engine's own arithmetic (sluice_recurring_first, sluice_recurring_catch_up), resolves the
 * occurrence's chain as TASK.ADD does, and sends one FIRE per series with a LIST behind them in
 * one call. A FIRE compares and sets the series' (version, next): of all the nodes that fire one
 * point, exactly one adds its task; the others are told STALE and move on. The timer is armed to
 * the earliest next the store reported, and at most RRECUR_POLL_MS ahead (series added on other
 * nodes are seen within that).
 *
 * Semantics against the single node (docs/cluster.md): an occurrence is an ordinary task of the
 * shared queue; `runs` counts the occurrences added (the single node counts those that started)
 * and MAX bounds them; schedule points that passed while every node was down are skipped and
 * counted in `skipped`, and the latest one fires once when a node comes back (the single node
 * skips them all and resumes at the next point: here the series has a stored next, so the
 * catch-up is the engine's tick's); an occurrence due before END but fired after it is skipped.
 * RECUR.DEL and a replacement cancel the series' occurrences that have not started, as the
 * single node does. The node that takes RECUR.ADD makes the engine's pace check (the
 * RECURRING_TOO_FAST warning); seed 003's skip-ahead of points while an occurrence waits behind
 * its limits is not done on Redis.
 *
 * Invariants:
 * - at most one firing call of this node is in flight;
 * - every client request gets exactly one reply (a closed client's is dropped);
 * - nothing here blocks the loop.
 */
#ifndef SLUICE_SERVER_RRECUR_H
#define SLUICE_SERVER_RRECUR_H

#include <stdint.h>

#include "server/conn.h"
#include "server/server.h"
#include "sluice/engine.h"

/* The name of PostgreSQL's prepared statement of the series function (rstore_pg.c prepares it). */
#define RRECUR_PG_STMT "sluice_recur"

/* Longest the firing loop goes without listing the due series, in ms. */
#define RRECUR_POLL_MS 1000

/* Counters, for tests and INFO. */
typedef struct rrecur_stats {
    uint64_t lists;    /* LIST requests sent */
    uint64_t fired;    /* occurrences this node added */
    uint64_t stale;    /* FIREs another node (or a replacement) got to first */
    uint64_t failures; /* firing calls that failed (store down, timeout) */
} rrecur_stats;

/* Sets up the firing loop (after rstore_open created the connection). Returns 0 or
 * SLUICE_ENOMEM. */
int rrecur_open(server *s);

/* Stops the firing loop (its handle closes with the loop). Idempotent. */
void rrecur_close(server *s);

/* Frees the state. Accepts a server without one. */
void rrecur_free(server *s);

/* A client with deferred replies is closing: its replies are dropped. */
void rrecur_conn_closed(conn *c);

/* RECUR.ADD of spec (arguments checked by the command). Replies now (a bad spec, a store that is
 * down) or when the store answered. */
void rrecur_add(conn *c, const sluice_recurring_spec *spec);

/* RECUR.DEL and RECUR.INFO of name (NUL-terminated, checked by the command). */
void rrecur_del(conn *c, const char *name);
void rrecur_info(conn *c, const char *name);

void rrecur_get_stats(const server *s, rrecur_stats *out);

/* Appends the counters to INFO store's text in buf (NUL-terminated, len bytes in all):
 * store_recur_lists, store_recur_fired, store_recur_stale, store_recur_failures. */
void rrecur_info_append(const server *s, char *buf, size_t len);

#endif
