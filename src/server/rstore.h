/* SPDX-License-Identifier: MIT */
/*
 * Limits shared on Redis or PostgreSQL, the node's side: with `--store redis://...` or
 * `--store postgresql://...` (server_options.store_url), THROTTLE, CL.THROTTLE and LEASE.* do
 * not decide in this process. The command resolves its chain and checks its arguments as it
 * always does (same errors, same words), then adds one request to the loop turn's batch
 * (store/redis_limits.h, or store/pg_limits.h: the same requests, the same answers) and takes a
 * deferred-reply slot for its client (conn_defer): the client goes on with the commands it
 * pipelined, whose replies queue behind the slot. At the end of the turn (rstore_turn, in the
 * server's "before sleep", next to the embedded store's group commit) the batch leaves as one
 * EVALSHA on the Redis connection (store/redis_conn.h), or as one call of the limits function
 * on the PostgreSQL connection (store/pg_conn.h: one transaction per call); when the store
 * answers, every slot is filled with the reply the command would have written, in each
 * client's command order, and the clients' replies leave.
 *
 * So one loop turn costs one round trip to the store however many clients and pipelined
 * commands it served, and a client's pipeline of 16 THROTTLEs shares it too. Calls pipeline: a
 * turn does not wait for the previous turn's answer. Answers are applied in the order calls were
 * sent (a Redis call retried after NOSCRIPT may be answered late: the calls after it wait).
 *
 * When the store is not up, or does not answer within the timeout, the failure mode decides:
 * closed (the default) answers `-STOREDOWN <why>`; open grants, and counts the grant
 * (fail_open_grants, logged as a summarised event). A request whose call timed out may still
 * have been applied by the store: closed mode then denied something the store charged (safe);
 * open mode granted something the store did not see (the documented exception of fail-open).
 *
 * Decisions use the store's clock (Redis's TIME in the script, PostgreSQL's clock_timestamp()),
 * never the node's; the counters (throttle_allowed, throttle_denied) count as for local
 * decisions.
 *
 * The task queue (rtasks.h) and the recurring series (rrecur.h) on the same store send their own
 * calls through the FIFO of calls kept here (rstore_call, rstore_send): one connection, one
 * order of answers.
 */
#ifndef SLUICE_SERVER_RSTORE_H
#define SLUICE_SERVER_RSTORE_H

#include <stddef.h>
#include <stdint.h>

#include "server/conn.h"
#include "server/server.h"
#include "sluice/limit.h"
#include "config/config_store.h"
#include "store/pg_conn.h"
#include "store/redis_cluster.h"
#include "store/redis_conn.h"
#include "store/redis_limits.h"

struct redisReply;
struct pg_result;
struct rstore;

/* One script call in the node's FIFO of calls to Redis. Every call of the node, the limits'
 * batches (here) and the task queue's (rtasks.c), goes through one FIFO, and answers are applied
 * to the clients strictly in the order the calls were sent: a client's deferred slots are filled
 * in the order it took them, whatever kinds of command it pipelined, even when a NOSCRIPT retry
 * makes Redis answer out of order. Embedded first in its owner's batch. */
typedef struct rstore_call rstore_call;

/* The store's answer to one call: Redis's reply or PostgreSQL's result, by the store's kind. */
typedef struct rstore_answer {
    const struct redisReply *redis;
    const struct pg_result *pg;
} rstore_answer;

struct rstore_call {
    rconn_call call;    /* Redis: argc, argv, argvlen, set by the owner before rstore_send */
    pgconn_call pgcall; /* PostgreSQL: stmt, nparams, values, set by the owner */
    int slot;           /* Redis Cluster: the one slot of every key of the call, set by the owner */
    /* PostgreSQL: the connection it goes on (rstore_lane), set by the owner; 0 (the node's
     * first) for a call of the node's own. rstore_send may move it to another that is UP. */
    int lane;
    /* Decodes the store's answer while it is valid (during this call only); an answer it
     * cannot read is refused with rstore_call_fail. Runs in answer order, maybe before earlier
     * calls are applied: it must not write to clients. */
    void (*on_reply)(rstore_call *c, const rstore_answer *a);
    /* Writes the answers (or, when why is set, the failure) to the clients, in FIFO order; the
     * call is out of the FIFO and may be reused or freed. */
    void (*apply)(rstore_call *c);
    int answered;  /* decoded or failed */
    char why[256]; /* the failure, "" when Redis answered */
    /* Replicas: set by the owner before rstore_send. Non-zero asks for the store's `WAIT
     * replicas timeout` (--store-replicas) behind the call, on the same connection, so that it
     * covers the call's writes; the call is then applied only once that WAIT has answered too,
     * with `acked` the replicas it counted (-1: no answer). 0: no WAIT, acked stays 0. At most
     * one WAIT is in flight: calls sent meanwhile share the next one, sent when it answers
     * (so a WAIT queues behind at most one other, and nothing waits more than twice its
     * timeout behind them). */
    int wait_replicas;
    int64_t acked;
    /* Redis Cluster: when set by the owner, rstore_send calls it instead of sending one script
     * call: it sends the call's requests as one script call per master (rstore.c, send_groups),
     * sets answered once every one of them is answered, and returns 0, or an error (nothing
     * sent: the call then fails). */
    int (*send)(rstore_call *c);
    /* private */
    rcl_call ccall;    /* Redis Cluster: the call routed to its slot's master */
    int waiting;       /* a WAIT that covers it has not answered yet */
    uint64_t wait_gen; /* which WAIT covers it (rstore's generation) */
    struct rstore *st;
    rstore_call *next; /* in the FIFO */
};

/* Sets c's PostgreSQL statement and its parameters (a batch's params, valid until it is reset). */
static inline void rstore_call_pg(rstore_call *c, const char *stmt, int nparams,
                                  const char *const *values)
{
    c->pgcall.stmt = stmt;
    c->pgcall.nparams = nparams;
    c->pgcall.values = values;
}

/* Appends c (call.argc/argv/argvlen on Redis, pgcall.stmt/nparams/values on PostgreSQL, on_reply
 * and apply set) to the FIFO and sends it; rc != 0
 * (the owner could not build its command) or a store that is not up fails it at once. Either
 * way apply runs exactly once, in FIFO order (perhaps before this returns). With
 * c->wait_replicas > 0 (rstore_replicas) a WAIT follows the call (see rstore_call). */
void rstore_send(server *s, rstore_call *c, int rc);

/* The replicas a write of the task queue waits for (--store-replicas, 0: none) and WAIT's
 * timeout in ms. */
int rstore_replicas(const server *s, int64_t *timeout_ms);

/* Marks c answered with the failure why (from on_reply: a reply it cannot read). */
void rstore_call_fail(rstore_call *c, const char *why);

/* 1 when a batch of lane may leave at the end of the turn: always on Redis; on PostgreSQL only
 * while that connection has no call in flight (rstore_pg.h: group commit). A batch held back
 * leaves when its lane's call is answered. */
int rstore_may_send(const server *s, int lane);

/* The lane (PostgreSQL connection, rstore_pg.h) a request of client c goes to (c NULL: the
 * node's own call); decision 1 for THROTTLE, CL.THROTTLE and LEASE.*. 0 on Redis. Call it when
 * the request is taken, before its slot is deferred. */
int rstore_lane(server *s, conn *c, int decision);

/* The number of lanes (1 on Redis, at most RSTORE_LANES_MAX). */
int rstore_lanes(const server *s);
#define RSTORE_LANES_MAX 64

/* Sends the turn's limits batches now (of every lane; of one lane), so that a request of
 * another kind added next is sent behind them (the FIFO is send order). */
void rstore_flush_limits(server *s);
void rstore_flush_limits_lane(server *s, int lane);

/* 1 when the connection that receives the task queue's wake-ups is up (PostgreSQL: the one that
 * LISTENs; Redis: rstore_up). */
int rstore_listening(const server *s);

/* The loaded script's SHA ("" before the first load). One script serves limits and tasks. */
const char *rstore_sha(const server *s);

/* 1 when the store's connection is up; else *why (when not NULL) says why not. */
int rstore_up(const server *s, const char **why);

/* Requests in one script call at most: a turn with more sends several calls. */
#define RSTORE_BATCH_MAX 512

/* Counters, for INFO and /metrics. */
typedef struct rstore_stats {
    int up;                    /* 1 when the connection is UP */
    const char *state;         /* "up", "down", "connecting", "loading" */
    const char *last_error;    /* why it last went down ("" when never) */
    uint64_t batches;          /* script calls sent */
    uint64_t requests;         /* requests sent in them */
    uint64_t answered;         /* requests answered by Redis */
    uint64_t unavailable;      /* requests answered -STOREDOWN (closed mode) */
    uint64_t fail_open_grants; /* requests granted without Redis (open mode) */
    uint64_t connects, disconnects, failed_connects, timeouts, script_loads, in_flight;
    uint64_t replica_waits; /* WAITs sent (--store-replicas) */
} rstore_stats;

/* Attaches the shared store when s->opt.store_url is set (else does nothing and returns 0):
 * parses the URL, creates the connection, and runs the loop until it is up or the timeout
 * passed (a Redis down at start is logged, not fatal: the node starts and keeps trying).
 * Before listening. Returns 0, or an error with a one-line msg (bad URL, out of memory). */
int rstore_open(server *s, char *msg, size_t msglen);

/* Answers everything in flight by the failure mode and closes the connection (its handles close
 * with the loop). Idempotent; accepts a server without a shared store. */
void rstore_close(server *s);

/* Frees the state (after the loop ran the closes). Accepts a server without one. */
void rstore_free(server *s);

/* 1 when decisions go to the shared store. */
static inline int rstore_active(const server *s)
{
    return s->rstore_state != NULL;
}

/* Which engine the shared store is (meaningful when rstore_active). */
config_store_kind rstore_kind(const server *s);

/* "redis", "redis-cluster" or "postgresql". */
const char *rstore_kind_name(const server *s);

/* Sets l's hash tag to the one every command uses for its limit on this store (rtag.h): the
 * queue's on a standalone Redis, none on PostgreSQL, on Redis Cluster the queue's for a limit a
 * task type names and none (the key's own) for the others. */
void rstore_link_tag(const server *s, rlim_link *l);

/* 1 when the states of limit_id live under the queue's tag (rtag.h): on a standalone Redis
 * every limit's, on Redis Cluster those a task type names; 0 on PostgreSQL. */
int rstore_in_queue_slot(const server *s, const char *limit_id);

/* Redis Cluster: the slot of the task queue's keys, where task and series calls go (0 on
 * other stores). */
int rstore_queue_slot(const server *s);

/* One THROTTLE on the shared store: the n links (n >= 1) as the command resolved them, each
 * with its definition, the limit id Redis keys it under (the limit's name, or "name/tier"), the
 * name a denial reports, and its mode (shadow: its limit in shadow mode, or limits off; the store
 * passes its would-be denials, rlim_link). PEEK in flags peeks. Replies now (store down) or later
 * (deferred); either way exactly one reply, as the local chain's (reply_throttle). */
typedef struct rstore_link {
    const sluice_limit_def *def;
    const char *limit_id;
    const char *name;
    const char *key;
    size_t keylen;
    int64_t units;
    int shadow;
} rstore_link;
void rstore_throttle(conn *c, const rstore_link *links, size_t n, unsigned flags);

/* The answer of rstore_peek_then: the request's result and its links' decisions (NULL when why
 * is set: the store failed the call, or is down and nothing was sent). Valid during the call. */
typedef void (*rstore_peek_fn)(void *arg, const rlim_result *r, const sluice_decision *dec,
                               const char *why);

/* A peek of the n links (n >= 1) as one chain, judged in the store's clock with nothing charged
 * or written (RLIM_PEEK), for a caller that reads the answer itself (TASK.EXPLAIN) rather than a
 * reply: no deferred slot is taken, the failure mode is not applied (a peek grants nothing), and
 * fn(arg, ...) runs exactly once, in the FIFO's order (at once, with why, when the store is
 * down). Returns 0, or -1 after writing an error reply to c (out of memory, a chain the store
 * cannot take), fn not called. */
int rstore_peek_then(conn *c, const rstore_link *links, size_t n, rstore_peek_fn fn, void *arg);

/* One CL.THROTTLE on the shared store: def is the triple's rate limit, id its "!cell:B:C:P",
 * quantity 0 a peek of one unit; t_ns the emission interval (cell_map_decision); shadow 1 while
 * limits are off (`enabled: false`: every would-be denial passes, still counted). */
void rstore_cell(conn *c, const sluice_limit_def *def, const char *id, const char *key,
                 size_t keylen, int64_t quantity, int64_t t_ns, int shadow);

/* One LIMIT.BACKOFF on the shared store: def is the rate limit that holds key (its override's, or
 * its tier's), limit_id the id THROTTLE keys that state under; nothing is granted on the key
 * before the store's now + wait_ns (RLIM_BACKOFF). Replies the key's wait for one unit in ms, now
 * or later, or -STOREDOWN (whatever the failure mode: a backoff grants nothing). */
void rstore_backoff(conn *c, const sluice_limit_def *def, const char *limit_id, const char *key,
                    size_t keylen, int64_t wait_ns);

/* One LIMIT.RATE of an adaptive rate on the shared store (def, limit_id as rstore_backoff): the
 * key's rate now in the store's clock (RLIM_RATE; a read), replied as LIMIT.RATE's map now or
 * later, or -STOREDOWN (whatever the failure mode: a read grants nothing). */
void rstore_rate(conn *c, const sluice_limit_def *def, const char *limit_id, const char *key,
                 size_t keylen);

/* LEASE.ACQUIRE (op RLIM_DECIDE: units, ttl_ns, 0 for the def's), LEASE.RENEW (RLIM_LEASE_RENEW:
 * lease_id, ttl_ns) and LEASE.RELEASE (RLIM_LEASE_RELEASE: lease_id) of a concurrency limit on the
 * shared store. The handle ACQUIRE answers is "NAME/ID/KEYHEX" (rstore_parse_handle). shadow
 * (ACQUIRE only): the limit is in shadow mode; past its cap the caller is let through holding
 * nothing, with lease id 0 in its handle, whose RENEW and RELEASE the caller answers itself. */
void rstore_lease(conn *c, rlim_op op, const sluice_limit_def *def, const char *name,
                  const char *key, size_t keylen, int64_t units, uint64_t lease_id, int64_t ttl_ns,
                  int shadow);

/* Parses a handle of rstore_lease: name (COMMAND_NAME_BUF bytes), the lease id, and the key
 * decoded into key (at most keymax bytes; *keylen its length). Returns 0 or -1. Pure. */
int rstore_parse_handle(const char *s, size_t len, char *name, size_t namemax, uint64_t *id,
                        char *key, size_t keymax, size_t *keylen);

/* The end of a loop turn: sends the turn's batch. Cheap when it is empty. */
void rstore_turn(server *s);

/* A client with deferred replies is closing: its slots are forgotten. */
void rstore_conn_closed(conn *c);

/* Replies `-ERR <command> is not available with a redis (postgresql, redis-cluster) store yet
 * ...` for a command the shared store does not serve in this version (runtime limit changes; on
 * Redis Cluster the task queue and recurring series, whose keys share one hash tag). The one
 * place that says so. */
void rstore_reply_unavailable(conn *c, const char *command);

void rstore_get_stats(const server *s, rstore_stats *out);

/* Writes INFO's "# Store" section (lines ending in \r\n) into buf, NUL-terminated. */
void rstore_info(const server *s, char *buf, size_t len);

#endif
