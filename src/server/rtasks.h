/* SPDX-License-Identifier: MIT */
/*
 * The task queue shared on Redis, the node's side: with `--store redis://...`, TASK.ADD, GET,
 * ACK, FAIL, TOUCH, CANCEL and INFO do not touch this process's engine (nor does TASK.EXPLAIN,
 * which reads the task with INFO and peeks its chain: rtasks_explain.c). The command checks its
 * arguments as it always does (cmd_task.c: same errors, same words); TASK.ADD then resolves the
 * task's chain with the engine's own resolution (sluice_engine_resolve_task: type, key templates,
 * tiers, units, per-key overrides) and every command adds one request to the loop turn's task
 * batch (store/redis_tasks.h), which leaves at the end of the turn as one EVALSHA of the store's
 * one script, through rstore's FIFO of calls (rstore.h: answers are applied in send order, so a
 * client's deferred replies keep its command order whatever it pipelined).
 *
 * TASK.ADD is answered only once Redis has the task (its reply is deferred until the script's
 * answer); a store that is down or does not answer in time answers -STOREDOWN whatever
 * store_failure says: no task is acknowledged that Redis did not take (a timed-out ADD may still
 * have been taken: the producer may add it twice, which is at-least-once).
 *
 * With --store-replicas N, a batch holding a write of the queue's contents (ADD, ACK, FAIL,
 * CANCEL) is followed by a `WAIT N timeout` on the same connection (rstore_call: one in flight,
 * shared by the batches sent while it waits), and those
 * requests are answered only after it: their success becomes -NOTREPLICATED when fewer than N
 * replicas confirmed. Claims and TOUCH do not make a batch wait (a claim or a lease extension
 * lost in a failover is a redelivery, which at-least-once allows), and ride along unchecked
 * when they share a waiting batch.
 *
 * Blocked TASK.GET ... TIMEOUT: the client is blocked (conn_block) and its wish kept (a waiter);
 * one claim per waiter is sent whenever work may have come: a message on the wake channel (every
 * op that makes work ready publishes on it, on any node; a second connection of this node is
 * SUBSCRIBEd to it), the store time of the next wake a claim that found nothing returned (a
 * timer), the subscriber or the store coming back up, and at most RTASKS_POLL_MS after the last
 * look (a published wake can be lost while the subscriber reconnects). A claim is atomic in
 * Redis, so of many nodes woken together exactly one gets each task. A waiter whose timeout
 * passes while its claim is in flight is answered when the claim is (within the store timeout),
 * so a task is never claimed for a client that was already told "nothing".
 *
 * Invariants:
 * - every request added gets exactly one reply (a waiter: exactly one, at its claim or timeout);
 * - a client that closes has its requests' replies dropped; tasks a claim in flight took for it
 *   are not lost: their lease lapses in store time and they are delivered again (ATTEMPT n+1);
 * - nothing here blocks the loop.
 */
#ifndef SLUICE_SERVER_RTASKS_H
#define SLUICE_SERVER_RTASKS_H

#include <stddef.h>
#include <stdint.h>

#include "config/config_store.h"
#include "server/conn.h"
#include "server/server.h"
#include "sluice/engine.h"
#include "store/redis_tasks.h"

/* Longest a blocked TASK.GET goes without a claim, in ms (a lost wake message costs at most
 * this much delay). */
#define RTASKS_POLL_MS 1000
/* Redis Cluster: failed connections of the subscriber in a row after which it tries the next
 * seed (the first is the connection lost; the next, a reconnection that failed). */
#define RTASKS_SUB_TRIES 2

/* Counters, for INFO store. */
typedef struct rtasks_stats {
    uint64_t requests;         /* task requests sent */
    uint64_t claims;           /* claims sent for blocked TASK.GETs */
    uint64_t delivered;        /* tasks handed to clients */
    uint64_t wakes;            /* wake messages received */
    uint64_t waiters;          /* TASK.GETs blocked now */
    uint64_t under_replicated; /* writes answered -NOTREPLICATED (--store-replicas) */
    int subscriber_up;         /* the wake subscription is live */
} rtasks_stats;

/* The name of PostgreSQL's prepared statement of the task function (rstore_pg.c prepares it). */
#define RTASKS_PG_STMT "sluice_tasks"

/* Sets up the task side of the shared store (after rstore_open parsed the URL u): the batch and,
 * on Redis, the subscriber connection, which connects in the background: to u's Redis, or on a
 * Cluster to its first seed, moving on to the next seed when that one cannot be reached (a
 * PUBLISH on any master reaches every node of a Cluster). u NULL: the store is PostgreSQL,
 * whose connection LISTENs for the wakes (rtasks_notify). Returns 0 or SLUICE_ENOMEM with msg. */
int rtasks_open(server *s, const config_store_url *u, int64_t timeout_ms, char *msg, size_t msglen);

/* Answers what waits (blocked clients: their timeout reply) and closes the subscriber. */
void rtasks_close(server *s);

/* Frees the state. Accepts a server without one. */
void rtasks_free(server *s);

/* The end of a loop turn (from rstore_turn): claims for the waiters when a wake came, then
 * sends the turn's task batch. */
void rtasks_turn(server *s);

/* Sends the turn's task batches now (a limits request is about to be taken behind them): of
 * every lane, or of one (PostgreSQL's connections, rstore_lane). */
void rtasks_flush(server *s);
void rtasks_flush_lane(server *s, int lane);

/* A wake notification arrived (PostgreSQL's NOTIFY, through rstore): the waiters look again at
 * the end of the turn. */
void rtasks_notify(server *s);

/* The store's connection came up: the waiters look again (a wake may have been missed). */
void rtasks_store_up(server *s);

/* A client with deferred replies is closing: its replies are dropped. */
void rtasks_conn_closed(conn *c);

/* TASK.ADD of spec (checked by the command), DELAY delay_ns. Replies now (an error, a store
 * that is down) or when Redis has the task. */
void rtasks_add(conn *c, const sluice_task_spec *spec, int64_t delay_ns);

/* A shared lease handle (rstore_parse_handle's "NAME/ID/KEYHEX") a TASK.ADD names with LEASE:
 * its group slot. The pointers are borrowed for the call. */
typedef struct rtasks_group {
    const char *limit; /* the lease's limit (a concurrency limit of this node) */
    uint64_t id;       /* the lease id (> 0) */
    const char *key;   /* the lease's key, keylen bytes */
    size_t keylen;
} rtasks_group;

/* rtasks_add, with a group slot when g is not NULL: the task runs under that lease instead of
 * taking a unit of its limit (docs/limits.md, "Group slots"). The node checks what
 * gate_group_resolve checks (the type names the limit; its key is the task's) and replies
 * WRONGARGS with the single node's words; the store refuses a lease that is not live
 * (NOLEASE). */
void rtasks_add_group(conn *c, const sluice_task_spec *spec, int64_t delay_ns,
                      const rtasks_group *g);

/* TASK.GET: up to count tasks of the ntypes types (NUL-terminated names); timeout_ms 0 answers
 * at once, else the client blocks until a task comes or the timeout passes. */
void rtasks_get(conn *c, const char *const *types, size_t ntypes, size_t count, int64_t timeout_ms);

/* TASK.ACK (RTASK_ACK), FAIL, TOUCH, CANCEL and INFO of d->id. */
void rtasks_done(conn *c, rtask_op op, const rtask_done *d);

/* The answer of rtasks_info_then: the task (NULL unless r->rc is 0 and why is NULL) and the
 * request's result (NULL when why is set: the store failed the call, why says how). Pointers
 * are valid during the call only. */
typedef void (*rtasks_info_fn)(void *arg, const rtask_task *t, const rtask_result *r,
                               const char *why);

/* TASK.INFO of id for a caller that reads the answer itself (TASK.EXPLAIN: rtasks_explain.c)
 * rather than a reply: no deferred slot is taken, and fn(arg, ...) runs exactly once, in the
 * FIFO's order, when the store answers or fails the call. Returns 0, or -1 after writing an
 * error reply to c (the store is down, out of memory), fn not called. */
int rtasks_info_then(conn *c, uint64_t id, rtasks_info_fn fn, void *arg);

/* TASK.EXPLAIN of id on the shared store (rtasks_explain.c): the client is blocked while the
 * task is read and its chain peeked, and answered in the single node's format. */
void rtasks_explain(conn *c, uint64_t id);

/* Room for "name/tier", a tiered limit's id (as THROTTLE names its state: cmd_limit.c). */
#define RTASKS_LIMIT_ID_BUF 260

/* Fills links[0..n) from the n charges ch that sluice_engine_resolve_task gave for one task, as
 * TASK.ADD and a recurring occurrence both store them: link i's limit id ("name" or "name/tier")
 * is written to ids[i], which the link borrows (keep ids as long as links); its state carries
 * the hash tag `tag` (NULL: none, as on PostgreSQL); an overflow-reject limit fails the task
 * when denied, a settling charge is settled at ACK; a limit in shadow mode (or every limit,
 * under `enabled: false`) is a shadow link: its would-be denial lets the task through
 * uncharged, as the single node's gate does. The store keeps the links as TASK.ADD resolved
 * them: a task added before its limit left shadow mode is gated with the mode it was added
 * with. */
void rtasks_links_of(const sluice_engine *e, const sluice_charge *ch, size_t n,
                     char (*ids)[RTASKS_LIMIT_ID_BUF], const char *tag, rtask_link *links);

/* Copies a resolved task's fair dispatch into a (fairness: keys): its tenant is its key on the
 * type's fair limit (ch[plan->fair_link], borrowed; "" without such a link) and a delivery
 * costs its tenant's turn that link's units (the task's own without it). Under FIFO it clears
 * a->fair. */
void rtasks_fair_of(const sluice_task_plan *plan, const sluice_charge *ch, rtask_add *a);

void rtasks_get_stats(const server *s, rtasks_stats *out);

#endif
