/* SPDX-License-Identifier: MIT */
/*
 * Counters summed across the nodes of a shared store (`--store redis://`, `redis-cluster://`,
 * `postgresql://`): what INFO, /metrics, /api and the dashboard show as decisions per limit,
 * THROTTLE grants and denials, and tasks submitted, delivered, completed, failed, retried and
 * cancelled, over every node that shares the store.
 *
 * The decision path never waits for them: a node counts in its own memory (ctrset.h) and, once
 * every RCOUNTERS_FLUSH_MS (from the housekeeping timer) and once more at shutdown, sends what
 * it counted since its last flush as one call through rstore's FIFO of calls (Redis: EVAL of
 * src/store/redis/counters.lua, HINCRBY on one hash under the {all} tag; PostgreSQL:
 * sluice_counters_call of src/store/pg/004_counters.sql), which answers the totals of every
 * node in the same round trip.
 *
 * Guarantees (docs/cluster.md, "Counters"):
 * - staleness: a node's figures include its own counts at once and every other node's as of
 *   their last flush and its own last flush: at most about two flush intervals old while the
 *   store is up (INFO counters_age_ms says how old the last read is);
 * - nothing lost, nothing counted twice: a flush carries the node's sequence number and the
 *   store applies a number once; a flush that got no answer (store down, timeout) is kept and
 *   sent again, unchanged, with the same number, until the store answers. A node killed with
 *   SIGKILL loses what it counted since its last confirmed flush (at most one interval); a node
 *   stopped while the store is unreachable loses what it could not flush;
 * - monotonic: a cluster figure a node shows never decreases, even when the store loses its
 *   totals (a Redis restarted without persistence): the loss is added back on that node.
 *
 * Without a shared store none of this exists: every figure is the node's own (rcounters_get
 * answers 0).
 */
#ifndef SLUICE_SERVER_RCOUNTERS_H
#define SLUICE_SERVER_RCOUNTERS_H

#include <stddef.h>
#include <stdint.h>

#include "server/server.h"

/* How often a node flushes its counts (and reads the totals). */
#define RCOUNTERS_FLUSH_MS 1000
/* How long the store remembers a node's last flush number after its last flush: a flush
 * resent after that (its answer lost, then the store unreachable from the node for this long)
 * would be added twice. */
#define RCOUNTERS_NODE_TTL_MS ((int64_t)7 * 24 * 3600 * 1000)

/* Counter codes: a counter is "CODE:NAME" in the store. */
#define RCTR_LIMIT_ALLOWED    "la" /* NAME: a limit; charging decisions granted */
#define RCTR_LIMIT_DENIED     "ld" /* a limit's decisions denied */
#define RCTR_LIMIT_UNITS      "lu" /* units a limit granted */
#define RCTR_LIMIT_SHADOW     "ls" /* a shadow limit's would-be denials (passed) */
#define RCTR_THROTTLE_ALLOWED "ga" /* NAME empty: THROTTLE, CL.THROTTLE, LEASE.ACQUIRE granted */
#define RCTR_THROTTLE_DENIED  "gd" /* and denied (INFO's throttle_allowed, throttle_denied) */
#define RCTR_TASK_SUBMITTED   "ts" /* NAME empty: every type; else a task type */
#define RCTR_TASK_DELIVERED   "tv"
#define RCTR_TASK_DONE        "td"
#define RCTR_TASK_FAILED      "tf"
#define RCTR_TASK_RETRIED     "tr"
#define RCTR_TASK_CANCELLED   "tx"

/* Starts the counters when a shared store is attached (after rstore_open). Returns 0, or
 * SLUICE_ENOMEM. */
int rcounters_open(server *s);

/* Frees them (after the loop ran the closes). Accepts a server without them. */
void rcounters_free(server *s);

/* The housekeeping timer: flushes when RCOUNTERS_FLUSH_MS passed since the last flush, none is
 * in flight and the store is up. Cheap otherwise. */
void rcounters_tick(server *s);

/* The server is stopping and its clients are gone: sends the last flush. Returns 1 while the
 * server must wait for its answer (server_client_gone is called when it comes, or fails), 0 when
 * there is nothing to wait for (no counters, nothing counted, the store down). */
int rcounters_stop(server *s);

/* Counts one charging decision of limit `name` on the shared store (not a peek): allowed or
 * denied, and the units granted. No-op without a shared store. */
void rcounters_limit(server *s, const char *name, int allowed, int64_t units);

/* Counts one would-be denial of limit `name` in shadow mode (or with limits off) on the shared
 * store, which it let through: its shadow_denied. No-op without a shared store. */
void rcounters_limit_shadow(server *s, const char *name);

/* Counts n tasks of event `code` (RCTR_TASK_*), of type (typelen bytes) when known, always in
 * the all-types counter too. No-op without a shared store. */
void rcounters_task(server *s, const char *code, const char *type, size_t typelen, uint64_t n);

/* 1 when counters are summed across nodes: *cluster then holds the figure of "code:name" over
 * every node and *node this node's own (0 and 0 when never counted); 0 without a shared store
 * (*cluster and *node 0). */
int rcounters_get(const server *s, const char *code, const char *name, uint64_t *cluster,
                  uint64_t *node);

/* For INFO and /metrics. */
typedef struct rcounters_stats {
    int active;             /* 1 with a shared store */
    int64_t interval_ms;    /* RCOUNTERS_FLUSH_MS */
    int64_t age_ms;         /* since the totals were last read (-1: never) */
    uint64_t flushes;       /* flushes the store confirmed */
    uint64_t failures;      /* flushes without an answer (sent again) */
    uint64_t unconfirmed;   /* counts of this node the store has not confirmed yet */
    uint64_t dropped;       /* counts lost for want of memory */
    const char *last_error; /* why the last failed flush failed ("" when none) */
} rcounters_stats;
void rcounters_get_stats(const server *s, rcounters_stats *out);

/* Writes INFO's "# Counters" section (lines ending in \r\n) into buf, NUL-terminated: whether
 * figures are cluster-wide, the flush's state, and the cluster and node figures of THROTTLE,
 * tasks, every limit and every declared task type. */
void rcounters_info(server *s, char *buf, size_t len);

/* PostgreSQL's statement of a flush (rstore_pg.c prepares it on every connection). */
#define RCOUNTERS_PG_STMT "sluice_counters"
#define RCOUNTERS_PG_SQL                                                                           \
    "SELECT c_name, c_n FROM sluice_counters_call($1, $2::bigint, $3::text[], $4::bigint[])"
#define RCOUNTERS_PG_NPARAMS 4

#endif
