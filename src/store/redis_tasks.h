/* SPDX-License-Identifier: MIT */
/*
 * The shared task queue on Redis: the encoder and decoder of one batched call of the task ops of
 * the store script (src/store/redis/limits.lua with src/store/redis/tasks.lua appended: ONE
 * script, loaded once, so that a task's chain is decided by the very functions that decide
 * THROTTLE). Pure, like redis_limits.h: it builds the arguments of one EVALSHA and reads its
 * reply; no I/O, no hiredis connection, no clock. The caller (the server) owns the connection.
 *
 * One batch is one script call carrying many requests (every task op of a loop turn), evaluated
 * by Redis in order; each request is atomic, and one request's error never aborts the others.
 * Every time is the store's (Redis TIME, ratcheted by the clock key of the tag {all} and by the
 * clocks of the tags a chain touches), never the caller's. Task ids come from a Redis counter
 * (`<prefix>:{all}:seq`) and are never reused.
 *
 * Keys (docs/redis-store.md, "Tasks"): every task key is `<prefix>:{all}:...`, one hash tag, so
 * on a standalone Redis (the only store this slice supports; Cluster is a later slice) one call
 * touches one slot for the queue. A task's limit links keep their state where THROTTLE keeps it
 * (redis_limits.h's key layout), so tasks and direct callers share one budget.
 *
 * Semantics: those of the single-node engine (src/engine/dispatch.c, park.c, ready.c):
 * - CLAIM takes the most urgent ready task of the given types (higher priority first, then the
 *   earlier id), decides its chain all-or-nothing (a task that holds a grant, or retries under
 *   throttle_retries 0, asks its concurrency links only), and delivers it with attempt+1 and a
 *   lease until now + the type's lease; a denied task is parked on the link whose slot is latest
 *   (or fails: NEVER, an overflow-reject link, a slot beyond the link's horizon) and the claim
 *   goes on with the next. A task never overtakes a more urgent task parked on a key its chain
 *   touches. Parked tasks are woken in priority order when their slot comes (a rate's retry, a
 *   concurrency lease released or expired), by the first claim that looks, never by several.
 * - A lapsed lease puts the task back (its concurrency links released, its grant kept unless
 *   charge_redelivery); the next claim delivers it with attempt+1.
 * - ACK, FAIL and TOUCH name the delivery (attempt; 0: whichever runs) and are refused with the
 *   task's state and attempt (the node words NOTASK / NOLEASE as cmd_task.c does).
 * - Every request that makes work ready (ADD, a release, a retry) PUBLISHes "1" on
 *   rtask_wake_channel(); a claim that delivers nothing returns when the next work comes due.
 *
 * Bounds: one CLAIM request gates at most RTASK_CLAIM_SCAN ready entries (so it delivers at most
 * that many, whatever its count), wakes at most RTASK_CLAIM_WAKES wait queues (each at most
 * RTASK_CLAIM_SCAN tasks), takes back at most RTASK_CLAIM_LAPSES lapsed leases and promotes at
 * most RTASK_CLAIM_SCAN delayed tasks per type; when a bound stopped it, its result says `more`
 * and its next_wake_ns is its now: the node claims again at once (a claim may then deliver
 * nothing although work is due, e.g. behind RTASK_CLAIM_WAKES queues of other types).
 *
 * Recurring series add their occurrences through the same ADD op (redis_recur.h).
 *
 * Caps (rtask_batch_set_caps): the engine's max_tasks and max_parked, with the single node's
 * rules (engine.c, dispatch.c), across every node: the store keeps the count of unfinished tasks
 * (queued, delayed, parked, running) and of parked ones exactly, in the same script call as each
 * change (`<prefix>:{all}:count`). An ADD of a new task (not a replacement by task key) is
 * refused (SLUICE_EBUSY) when the unfinished tasks reach max_tasks, or when the parked ones reach
 * max_parked and the task would wait now (not delayed, and a key of its chain has tasks parked or
 * a link's peek denies it); a CLAIM fails a task that must park while parked tasks are at
 * max_parked (SLUICE_FAIL_RATELIMITED), as dispatch.c does. The caps travel with every call, so
 * they are the calling node's configuration; 0 is none. A series' occurrence (redis_recur.h) is
 * counted but not refused by them.
 *
 * Group slots (docs/limits.md): an ADD with group_link names the concurrency link its producer's
 * lease stands in for. The ADD is refused (SLUICE_ESTALE) unless that lease lives on the link's
 * key now; while it lives, the gate does not ask that link (the other links as usual); once it
 * is released or expired, the task leaves the group for good and asks its own unit, as gate.c's
 * gate_group_check. The node checks the rest (the lease's limit in the task's chain, its key,
 * its kind) as gate_group_resolve does, before it sends the ADD.
 *
 * Fair dispatch (fairness: keys): an ADD with fair set files the task in its tenant's flow
 * instead of its type's FIFO queue; a claim serves the flows in ready.c's order (tasks.lua, "fair
 * flows"), and INFO of such a task, queued and due, adds its flow's ready tasks and the flows
 * taking turns. The task keeps the dispatch it was added with. Redis only: pg_tasks.c refuses
 * a fair ADD.
 *
 * Not in this slice (the node keeps them refused or documents them): the horizon check of a
 * task parked behind others (a task's own denial is checked), and INFO's refusal fields.
 *
 * Invariants:
 * - Requests come back in the order they were added; rtask_batch_result(i) reads the i-th.
 * - The batch copies the bytes of its arguments; nothing it is given is kept.
 * - A malformed or unexpected reply is refused with SLUICE_EPARSE, never half-read.
 */
#ifndef SLUICE_STORE_REDIS_TASKS_H
#define SLUICE_STORE_REDIS_TASKS_H

#include <stddef.h>
#include <stdint.h>

#include "sluice/engine.h"
#include "sluice/policy.h"
#include "store/redis_limits.h"

struct redisReply; /* hiredis */

/* The per-call bounds of CLAIM (see above). */
#define RTASK_CLAIM_SCAN   64
#define RTASK_CLAIM_WAKES  16
#define RTASK_CLAIM_LAPSES 64
/* Most tasks one CLAIM request delivers (TASK.GET's COUNT cap). */
#define RTASK_CLAIM_MAX 1000
/* Finished tasks kept for TASK.INFO (then forgotten: NOTASK). */
#define RTASK_KEEP_FINISHED 10000

/* Link flags. */
#define RTASK_LINK_REJECT 1u /* overflow reject: a denial fails the task (RATELIMITED) */
#define RTASK_LINK_SETTLE 2u /* settled with ACK's COST (units: task or a path, and quotas) */

/* One resolved link of a task (the node resolves types, templates, tiers and overrides at ADD
 * exactly as the engine does). lim.units is what the link asks; lim.def is stored with the
 * task, so a claim decides it with the definition the task was added with. */
typedef struct rtask_link {
    rlim_link lim;
    int64_t horizon_ns; /* a denial (not of a concurrency link) whose retry lies further fails
                         * the task (HORIZON); 0: lim.def->horizon_ns */
    unsigned flags;     /* RTASK_LINK_* */
} rtask_link;

/* TASK.ADD. Zero what is not given. */
typedef struct rtask_add {
    const char *type; /* 1..; no NUL bytes needed (typelen counts) */
    size_t typelen;
    const char *payload; /* NULL: "{}" */
    size_t payload_len;
    const char *task_key; /* ID taskkey; NULL: none */
    size_t task_key_len;
    const rtask_link *links;
    size_t nlinks;
    int64_t priority;
    int64_t delay_ns; /* >= 0 */
    int64_t lease_ns; /* the type's lease (> 0) */
    int charge_redelivery;
    sluice_retry_policy retry; /* max_attempts >= 1 */
    int64_t units;             /* UNITS, as TASK.INFO shows it (0: 1); each link has its own */
    size_t group_link;    /* a group slot (TASK.ADD ... LEASE): the link (1-based, a concurrency
                           * link) the lease stands in for; 0: none */
    uint64_t group_lease; /* that lease's id (> 0) */
    int fair;             /* 1: the type shares its workers between tenants (fairness: keys):
                           * the task waits in its tenant's flow (tasks.lua's fair queue) */
    const char *tenant;   /* under fair: the tenant, tenant_len bytes (NULL: "") */
    size_t tenant_len;
    int64_t fair_units; /* under fair: what a delivery costs its tenant's turn (>= 1) */
} rtask_add;

/* TASK.GET (one claim, non-blocking; the node blocks by retrying on wake). */
typedef struct rtask_claim {
    const char *const *types; /* ntypes names, each typelens[i] bytes */
    const size_t *typelens;
    size_t ntypes; /* 1.. */
    size_t count;  /* 1..RTASK_CLAIM_MAX */
} rtask_claim;

/* TASK.ACK, TASK.FAIL, TASK.TOUCH, TASK.CANCEL, TASK.INFO. Zero what is not given. */
typedef struct rtask_done {
    uint64_t id;
    int64_t attempt;        /* ATTEMPT n; 0: whichever delivery runs */
    int64_t cost;           /* ACK: COST n; -1: none (0 is a cost) */
    sluice_fail_mode mode;  /* FAIL: RETRY or DEAD */
    int64_t retry_after_ns; /* FAIL: RETRY_AFTER; -1: none */
    const char *message;    /* FAIL: REASON (NULL: none) */
    size_t message_len;
} rtask_done;

typedef enum rtask_op {
    RTASK_ADD = 1,
    RTASK_CLAIM,
    RTASK_ACK,
    RTASK_FAIL,
    RTASK_TOUCH,
    RTASK_CANCEL,
    RTASK_INFO,
} rtask_op;

typedef struct rtask_batch rtask_batch;

/* Creates an empty batch whose keys start with `prefix` (NULL: "sluice"; the same prefix as the
 * node's rlim_batch). Returns 0 and *out, or SLUICE_EINVAL (a prefix with '{' or '}') /
 * SLUICE_ENOMEM with *out NULL. */
int rtask_batch_new(const char *prefix, rtask_batch **out);

/* Empties the batch for the next loop turn, keeping its memory and its injected time. */
void rtask_batch_reset(rtask_batch *b);

/* Frees the batch. Accepts NULL. */
void rtask_batch_free(rtask_batch *b);

/* Tests only: decide at now_ns (still ratcheted) instead of Redis TIME; 0 goes back to TIME. */
void rtask_batch_set_now(rtask_batch *b, int64_t now_ns);

/* The caps every call of the batch carries (kept across resets): max_tasks and max_parked as
 * the engine's policy has them; 0 is no cap. */
void rtask_batch_set_caps(rtask_batch *b, uint64_t max_tasks, uint64_t max_parked);

/* Append one request each. Return its index in the batch (>= 0), or SLUICE_EINVAL (a bad
 * argument: the batch is unchanged) / SLUICE_ENOMEM (unchanged). */
int rtask_batch_add_add(rtask_batch *b, const rtask_add *a);
int rtask_batch_add_claim(rtask_batch *b, const rtask_claim *c);
int rtask_batch_add_ack(rtask_batch *b, const rtask_done *d);
int rtask_batch_add_fail(rtask_batch *b, const rtask_done *d);
int rtask_batch_add_touch(rtask_batch *b, const rtask_done *d);
int rtask_batch_add_cancel(rtask_batch *b, const rtask_done *d);
int rtask_batch_add_info(rtask_batch *b, const rtask_done *d);

/* Requests in the batch. */
size_t rtask_batch_count(const rtask_batch *b);

/* The op of request i (0 when out of range). */
rtask_op rtask_batch_op(const rtask_batch *b, size_t i);

/* The command "EVALSHA <sha> numkeys keys... args..." (EVAL with the script when sha is NULL)
 * as argc/argv/argvlen for redisAsyncCommandArgv / redisCommandArgv; the sha is rlim_script()'s
 * (one script). The arrays belong to the batch and stay valid until its next add, reset or free.
 * Returns 0, SLUICE_EINVAL for an empty batch, or SLUICE_ENOMEM. */
int rtask_batch_command(rtask_batch *b, const char *sha, int *argc, const char ***argv,
                        const size_t **argvlen);

/* A task as a reply shows it. Strings point into the hiredis reply (valid while it is). */
typedef struct rtask_task {
    uint64_t id;
    const char *type;
    size_t typelen;
    const char *payload;
    size_t payload_len;
    int attempt;            /* deliveries so far (the delivery's own number for a claim) */
    int64_t lease_until_ns; /* RUNNING: the lease's end (store time); else 0 */
    /* INFO only (zero for a claim): */
    sluice_task_state state;
    sluice_fail_reason fail_reason;
    int64_t priority;
    int64_t submitted_ns;
    int64_t not_before_ns; /* 0: none */
    const char *task_key;  /* NULL: none */
    size_t task_key_len;
    const char *fail_message; /* NULL: none */
    size_t fail_message_len;
    int64_t units; /* the task's UNITS */
    /* INFO of a PARKED task (else 0, and wake_ms -1): where it waits. */
    int park_link;        /* its link it parked on, 1-based */
    int64_t position;     /* tasks ahead of it in that link key's wait queue */
    int64_t queue_length; /* tasks in that queue */
    int64_t wake_ms;      /* when the queue is armed to wake (store time, ms); -1: never */
    /* INFO of a QUEUED task in a fair flow (else 0): its tenant's ready tasks, and how many
     * tenants of its type take turns (have tasks ready). */
    int64_t flow_ready;
    int64_t flows;
} rtask_task;

/* One request's answer. */
typedef struct rtask_result {
    int rc;          /* 0, or this request's refusal:
                      *  SLUICE_ENOTFOUND  no task of that id (NOTASK);
                      *  SLUICE_ESTATE     ACK/FAIL/TOUCH: not running, or running at another attempt
                      *                    (NOLEASE: state and attempt below say which);
                      *  SLUICE_EBUSY      CANCEL of a running task (INUSE);
                      *  SLUICE_EEXIST     ADD: the task key is held by running task `id` (EXISTS);
                      *  SLUICE_EBUSY      ADD: refused by a cap (busy_parked says which);
                      *  SLUICE_ESTALE     ADD: the group's lease is not live (NOLEASE);
                      *  SLUICE_EINVAL     a request the script refused (msg says why) */
    int64_t now_ns;  /* the store time the request was decided at */
    uint64_t id;     /* ADD: the task's id (the existing one after a replacement); EEXIST: the
                      * running holder's */
    int replaced;    /* ADD: 1 when a queued/parked task of that key had its payload replaced */
    int busy_parked; /* ADD refused with SLUICE_EBUSY: 1 by max_parked, 0 by max_tasks */
    sluice_task_state state; /* ACK/FAIL/TOUCH/CANCEL (also on refusal): the task's state now;
                              * FAIL: QUEUED (a retry comes) or FAILED */
    int attempt;             /* ACK/FAIL/TOUCH/CANCEL: the task's attempt (deliveries so far) */
    int64_t lease_until_ns;  /* TOUCH: the new end of the lease */
    int cancelled;           /* CANCEL: 1 cancelled, 0 already finished */
    size_t ndelivered;       /* CLAIM: tasks delivered (read with rtask_batch_task) */
    size_t nfailed;          /* CLAIM: tasks failed by their limits on the way */
    int64_t next_wake_ns;    /* CLAIM: store time at which work may come due for these types
                              * (earliest delayed, parked wake or lease expiry); 0: none known */
    int more;                /* CLAIM: a bound stopped it; claim again at once */
    const char *msg;         /* EINVAL: the script's message (into the reply) */
    size_t msglen;
} rtask_result;

/* Reads request i of the reply to this batch's command. Returns 0 with *res filled (the
 * request's own refusal in res->rc), SLUICE_EINVAL for i out of range, or SLUICE_EPARSE for a
 * reply that is not the script's, with *res zeroed. */
int rtask_batch_result(const rtask_batch *b, const struct redisReply *reply, size_t i,
                       rtask_result *res);

/* Task k (0..ndelivered-1) of CLAIM request i, or (k 0) the task of INFO request i. Returns 0,
 * SLUICE_EINVAL (i not a CLAIM/INFO, k out of range) or SLUICE_EPARSE. */
int rtask_batch_task(const rtask_batch *b, const struct redisReply *reply, size_t i, size_t k,
                     rtask_task *out);

/* Whether a request is well formed (1) or refused with SLUICE_EINVAL (0): the checks every
 * encoder of the task ops makes (this file's and pg_tasks.c's), so that both stores refuse the
 * same requests. rtask_done_ok checks an ACK/FAIL/TOUCH/CANCEL/INFO of op. */
int rtask_add_ok(const rtask_add *a);

/* How many arguments tasks.lua's ADD of a takes after its head (redis_recur.c copies them). */
size_t rtask_add_nargs(const rtask_add *a);
int rtask_claim_ok(const rtask_claim *c);
int rtask_done_ok(rtask_op op, const rtask_done *d);

/* The answers' text, shared with the PostgreSQL store (pg_tasks.c), whose function answers each
 * request with the same elements as the script. rtask_parse_answer reads a request's first
 * element s (len bytes) for a request of op whose answer has nelems elements: 0 with *res filled
 * (strings point into s), or SLUICE_EPARSE with *res zeroed. rtask_parse_delivery reads a
 * CLAIM's "id attempt lease_until_ns" and rtask_parse_info an INFO's first element (with
 * whether a task key and a message follow): 0 with *out's fields filled, or SLUICE_EPARSE with
 * *out zeroed. */
int rtask_parse_answer(rtask_op op, const char *s, size_t len, size_t nelems, rtask_result *res);
int rtask_parse_delivery(const char *s, size_t len, rtask_task *out);
int rtask_parse_info(const char *s, size_t len, rtask_task *out, int *has_key, int *has_msg);

/* The pub/sub channel every op that makes work ready publishes on: "<prefix>:{all}:wake". */
const char *rtask_wake_channel(const rtask_batch *b);

#endif
