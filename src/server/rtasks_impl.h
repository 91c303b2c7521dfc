/* SPDX-License-Identifier: MIT */
/*
 * The objects of the shared task queue's node side (rtasks.h), shared by its two files: rtasks.c
 * (the requests, the blocked TASK.GETs, the timer, the subscriber, the life) and rtasks_reply.c
 * (Redis's answers: decoded while valid, then written to the clients in FIFO order). Nothing
 * here is used outside them.
 *
 * Invariants (see rtasks.c for the whole list):
 * - a wait has exactly one of a deferred slot of its client (ticket), a waiter (a blocked
 *   TASK.GET's claim) or a function its answer goes to (rtasks_info_then: c is NULL); c == NULL
 *   once its client closed;
 * - a waiter has at most one claim in flight and is freed by whoever sees it last.
 */
#ifndef SLUICE_SERVER_RTASKS_IMPL_H
#define SLUICE_SERVER_RTASKS_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "server/rstore.h"
#include "server/rtasks.h"
#include "store/pg_tasks.h"
#include "store/redis_conn.h"
#include "store/redis_tasks.h"

typedef struct rtasks rtasks;
typedef struct tbatch tbatch;

/* A blocked TASK.GET. One allocation: the type names are copied behind the struct. */
typedef struct waiter {
    conn *c;            /* NULL once its client closed (then freed by its claim's apply) */
    size_t count;       /* tasks wanted */
    size_t ntypes;      /* types wanted */
    const char **types; /* ntypes names, behind the struct */
    size_t *typelens;   /* their lengths */
    int in_flight;      /* a claim for it is in a batch */
    int expired;        /* its timeout passed while the claim was in flight */
    struct waiter *prev, *next;
} waiter;

/* A delivered task, or INFO's task, copied out of Redis's answer (offsets into the arena). */
typedef struct ttask {
    rtask_task t; /* its string pointers are NULL here: the offsets below hold them */
    size_t type_off, payload_off, task_key_off, fail_message_off;
} ttask;

/* One request's client and what its reply needs. */
typedef struct twait {
    conn *c;       /* NULL once the client closed */
    size_t ticket; /* conn_defer's (not with a waiter) */
    waiter *wt;    /* a blocked TASK.GET's claim, else NULL */
    rtask_op op;
    int req;           /* the request's index in the batch */
    uint64_t id;       /* the id asked (ACK, FAIL, TOUCH, CANCEL, INFO) */
    int64_t attempt;   /* the ATTEMPT asked */
    rtask_result res;  /* the decoded answer (res.msg NULL: see msg_off) */
    size_t msg_off;    /* the script's message in the arena */
    size_t task0;      /* its first task in the batch's task array */
    int has_group;     /* ADD with LEASE: ... */
    size_t group_off;  /* its limit's name in the arena */
    rtasks_info_fn fn; /* an INFO whose answer goes to fn instead of a slot (c is NULL) */
    void *fn_arg;
} twait;

struct tbatch {
    rstore_call base; /* first: rstore's FIFO holds it */
    rtasks *rt;
    rtask_batch *tb; /* the encoded requests: Redis */
    pgt_batch *pb;   /* or PostgreSQL */
    twait *w;        /* one per request, in order */
    size_t n, cap;
    ttask *tasks; /* the delivered tasks of every claim, and INFO's */
    size_t ntasks, tcap;
    char *arena; /* the bytes of the tasks and messages */
    size_t alen, acap;
    tbatch *next; /* in `sent`, or spare */
    int lane;     /* PostgreSQL: the connection it goes on (rstore_lane); 0 on Redis */
};

struct rtasks {
    server *s;
    int pg;     /* the store is PostgreSQL: pgt_batch, wakes by rtasks_notify */
    rconn *sub; /* Redis: the subscriber of the wake channel */
    char channel[128];
    /* Redis: where the subscriber may connect (a Cluster's seeds, in the URL's order; one
     * Redis's address), sub_at the one it uses; after RTASKS_SUB_TRIES failures in a row it
     * moves to the next (rotate, a zero timer: not from inside rconn's own callback). */
    config_store_seed subs[CONFIG_STORE_SEEDS_MAX];
    size_t nsubs, sub_at;
    int sub_fails;
    int64_t sub_timeout_ms;
    const char *sub_user, *sub_password; /* AUTH (the store's URL, which outlives us) */
    uv_timer_t rotate;
    int has_rotate;
    tbatch *cur[RSTORE_LANES_MAX]; /* the turn's batch of each lane, NULL until its first
                                    * request (one lane on Redis) */
    size_t ncur;                   /* lanes whose cur is not NULL: most turns have none, and
                                    * every limits request asks (rtasks_flush) */
    tbatch *sent, *last;           /* sent, oldest first */
    tbatch *spare;
    size_t nspare;
    waiter *whead, *wtail; /* blocked TASK.GETs, oldest first */
    size_t nwaiters;
    int wake;           /* the waiters look again at the end of this turn */
    uv_timer_t timer;   /* the next wake */
    uint64_t timer_due; /* uv_now when it fires; 0 when not armed */
    int closed;
    char logged_why[256]; /* the subscriber's last failure logged: an outage logs once a reason */
    rtasks_stats stats;
    uint64_t max_tasks, max_parked; /* the engine's caps (engine: in the config), sent with
                                     * every call: the store enforces them across nodes */
};

/* 1 when a request of op changes what the queue holds (ADD, ACK, FAIL, CANCEL): with
 * --store-replicas its batch WAITs for the replicas and its success is checked. */
static inline int rtasks_op_waits(rtask_op op)
{
    return op == RTASK_ADD || op == RTASK_ACK || op == RTASK_FAIL || op == RTASK_CANCEL;
}

/* Recycles an applied batch (kept for reuse, or freed). */
void rtasks_batch_recycle(rtasks *rt, tbatch *b);

/* Copies len bytes (and a NUL) into b's arena; returns their offset, or SIZE_MAX when out of
 * memory. */
size_t rtasks_arena_put(tbatch *b, const char *p, size_t len);

/* Takes waiter w out of the list of blocked TASK.GETs (it is not freed). */
void rtasks_waiter_unlink(rtasks *rt, waiter *w);

/* Arms the next-wake timer for delay_ms from now, unless it fires sooner already. */
void rtasks_arm_timer(rtasks *rt, uint64_t delay_ms);

/* Answers waiter w with the empty array, unblocks its client and frees it. */
void rtasks_waiter_reply_empty(rtasks *rt, waiter *w);

/* rstore_call.on_reply and .apply of a task batch (rtasks_reply.c). */
void rtasks_decode(rstore_call *call, const rstore_answer *a);

/* Request idx's answer and task k of a batch's answer, from whichever store answered. */
int rtasks_result(const tbatch *b, const rstore_answer *a, size_t idx, rtask_result *res);
int rtasks_task(const tbatch *b, const rstore_answer *a, size_t idx, size_t k, rtask_task *out);
void rtasks_apply(rstore_call *call);

#endif
