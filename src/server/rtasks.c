/* SPDX-License-Identifier: MIT */
/*
 * The task queue shared on Redis, the node's side (rtasks.h): the turn's task batch, the
 * blocked TASK.GETs (waiters), the timer of the next wake and the subscriber of the wake
 * channel.
 *
 * A batch (tbatch) is one script call, embedded in rstore's FIFO (rstore_call first). Redis's
 * answer is valid only during its callback, and the batch may not be at the head of the FIFO
 * then: the callback copies what the replies need (results, delivered tasks' bytes, messages)
 * into the batch's arena, and the replies are written when the FIFO reaches the batch. Applied
 * batches are kept for reuse, at most SPARE_MAX.
 *
 * Invariants:
 * - a wait (one request) has exactly one of: a deferred slot of its client (ticket), or a
 *   waiter (a blocked TASK.GET's claim); c == NULL once its client closed;
 * - a waiter has at most one claim in flight (in_flight), is in the waiter list until it is
 *   answered or its client closes, and is freed by whoever sees it last: its claim's apply
 *   when in flight, else the one that unlinks it;
 * - the batches this module sent are in `sent`, oldest first, and leave it in that order (the
 *   FIFO applies in send order).
 */
#include "server/rtasks.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "base/alloc.h"
#include "base/grow.h"
#include "server/commands.h"
#include "server/log.h"
#include "server/rstore.h"
#include "sluice/error.h"
#include "store/redis_conn.h"

/* Applied batches kept for reuse. */
#define SPARE_MAX 8
/* Links of a task resolved on the stack; longer chains are allocated. */
#define LINKS_STACK 16
/* Room for "name/tier", a tiered limit's id (as THROTTLE names its state: cmd_limit.c). */
#define LIMIT_ID_BUF 260
/* The hash tag of every task link: the same as THROTTLE's (rstore.c), so tasks and direct
 * callers charge one budget. */
#define RTASKS_TAG     "all"
#define RTASKS_TAG_LEN 3

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
    int req;          /* the request's index in the batch */
    uint64_t id;      /* the id asked (ACK, FAIL, TOUCH, CANCEL, INFO) */
    int64_t attempt;  /* the ATTEMPT asked */
    rtask_result res; /* the decoded answer (res.msg NULL: see msg_off) */
    size_t msg_off;   /* the script's message in the arena */
    size_t task0;     /* its first task in the batch's task array */
} twait;

struct tbatch {
    rstore_call base; /* first: rstore's FIFO holds it */
    rtasks *rt;
    rtask_batch *tb; /* the encoded requests */
    twait *w;        /* one per request, in order */
    size_t n, cap;
    ttask *tasks; /* the delivered tasks of every claim, and INFO's */
    size_t ntasks, tcap;
    char *arena; /* the bytes of the tasks and messages */
    size_t alen, acap;
    tbatch *next; /* in `sent`, or spare */
};

struct rtasks {
    server *s;
    rconn *sub; /* the subscriber of the wake channel */
    char channel[128];
    tbatch *cur;         /* the turn's batch, NULL until its first request */
    tbatch *sent, *last; /* sent, oldest first */
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
};

static rtasks *state_of(const server *s)
{
    return s->rtasks_state;
}

/* ---- Batches ----------------------------------------------------------------------------- */

static void batch_free(tbatch *b)
{
    if (!b)
        return;
    rtask_batch_free(b->tb);
    alloc_free(b->w);
    alloc_free(b->tasks);
    alloc_free(b->arena);
    alloc_free(b);
}

static tbatch *batch_get(rtasks *rt)
{
    tbatch *b = rt->spare;

    if (b) {
        rt->spare = b->next;
        rt->nspare--;
        b->next = NULL;
        return b;
    }
    b = alloc_calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    b->rt = rt;
    if (rtask_batch_new(NULL, &b->tb) != 0) {
        alloc_free(b);
        return NULL;
    }
    return b;
}

static void batch_recycle(rtasks *rt, tbatch *b)
{
    rtask_batch_reset(b->tb);
    b->n = b->ntasks = b->alen = 0;
    if (rt->nspare >= SPARE_MAX || rt->closed) {
        batch_free(b);
        return;
    }
    b->next = rt->spare;
    rt->spare = b;
    rt->nspare++;
}

/* Copies len bytes into the arena; returns their offset, or SIZE_MAX when out of memory. */
static size_t arena_put(tbatch *b, const char *p, size_t len)
{
    size_t off = b->alen;

    if (grow_array(&b->arena, &b->acap, b->alen + len + 1, 1, 1024) != SLUICE_OK)
        return SIZE_MAX;
    if (len)
        memcpy(b->arena + off, p, len);
    b->arena[off + len] = '\0';
    b->alen += len + 1;
    return off;
}

/* ---- Waiters ----------------------------------------------------------------------------- */

static void waiter_unlink(rtasks *rt, waiter *w)
{
    if (w->prev)
        w->prev->next = w->next;
    else
        rt->whead = w->next;
    if (w->next)
        w->next->prev = w->prev;
    else
        rt->wtail = w->prev;
    w->prev = w->next = NULL;
    rt->nwaiters--;
}

static void on_timer(uv_timer_t *t)
{
    rtasks *rt = t->data;

    rt->timer_due = 0;
    rt->wake = 1;
}

/* Arms the timer for delay_ms from now unless it fires sooner already. */
static void arm_timer(rtasks *rt, uint64_t delay_ms)
{
    uint64_t due = uv_now(&rt->s->loop) + delay_ms;

    if (rt->closed || (rt->timer_due != 0 && rt->timer_due <= due))
        return;
    rt->timer_due = due;
    uv_timer_start(&rt->timer, on_timer, delay_ms, 0);
}

/* The reply of a waiter whose wait is over with nothing: the empty array. Unblocks it. */
static void waiter_reply_empty(rtasks *rt, waiter *w)
{
    conn *c = w->c;

    waiter_unlink(rt, w);
    resp_array(conn_out(c), 0);
    conn_unblock(c);
    alloc_free(w);
}

static int get_retry(conn *c, void *arg)
{
    (void)c;
    (void)arg;
    /* Local signals mean nothing to the shared queue: wakes come from Redis (rtasks.h). */
    return 0;
}

static void get_timeout(conn *c, void *arg)
{
    waiter *w = arg;
    rtasks *rt = state_of(c->srv);

    if (w->in_flight && !c->srv->stopping) {
        /* Its claim may be taking tasks for it: answered with the claim's result. */
        w->expired = 1;
        return;
    }
    /* Stopping: a claim in flight is answered "stopped" (rstore_close), nothing taken. */
    if (w->in_flight)
        w->c = NULL; /* its apply frees it */
    waiter_unlink(rt, w);
    resp_array(conn_out(c), 0);
    conn_unblock(c);
    if (!w->in_flight)
        alloc_free(w);
}

static void get_cancel(conn *c, void *arg)
{
    waiter *w = arg;
    rtasks *rt = state_of(c->srv);

    waiter_unlink(rt, w);
    if (w->in_flight)
        w->c = NULL; /* its apply frees it */
    else
        alloc_free(w);
}

static const conn_block_ops get_ops = {get_retry, get_timeout, get_cancel};

/* ---- Requests ---------------------------------------------------------------------------- */

/* The turn's batch with room for one more wait, or NULL after replying NOMEM (when c). */
static tbatch *cur_batch(rtasks *rt, conn *c)
{
    tbatch *b;

    /* A limits request of this turn goes first: the FIFO is the order requests were taken. */
    rstore_flush_limits(rt->s);
    b = rt->cur;
    if (!b) {
        b = batch_get(rt);
        if (!b)
            goto nomem;
        rt->cur = b;
    }
    if (grow_array(&b->w, &b->cap, b->n + 1, sizeof(*b->w), 64) != SLUICE_OK)
        goto nomem;
    return b;
nomem:
    if (c)
        resp_error(conn_out(c), "NOMEM", "out of memory");
    return NULL;
}

/* Takes the wait of request idx (the value an rtask_batch_add_* returned) for client c: a
 * deferred slot, or the waiter wt. Returns the wait, or NULL after replying to a refused add. */
static twait *take_wait(tbatch *b, conn *c, waiter *wt, rtask_op op, int idx)
{
    twait *w;

    if (idx < 0) {
        if (wt)
            return NULL;
        if (idx == SLUICE_ENOMEM)
            resp_error(conn_out(c), "NOMEM", "out of memory");
        else
            reply_engine_error(c, idx, "the shared store cannot take this request");
        return NULL;
    }
    w = &b->w[b->n++];
    memset(w, 0, sizeof(*w));
    w->c = c;
    w->wt = wt;
    w->op = op;
    w->req = idx;
    if (!wt)
        w->ticket = conn_defer(c);
    return w;
}

/* Sends the batch at once when it is full (the rest of the turn starts another). */
static void maybe_send_full(rtasks *rt)
{
    if (rt->cur && rt->cur->n >= RSTORE_BATCH_MAX)
        rtasks_flush(rt->s);
}

/* The store is down: the reply of a request that cannot be made (whatever store_failure says:
 * a task queue cannot invent tasks or acknowledge what Redis did not take). */
static void reply_down(conn *c, const char *why)
{
    resp_error(conn_out(c), "STOREDOWN", "the shared store is unavailable (%s); nothing was done",
               why ? why : "not connected");
}

/* Adds one claim for waiter w. Returns 0, or -1 (out of memory: it stays without a claim). */
static int waiter_claim(rtasks *rt, waiter *w)
{
    rtask_claim cl;
    tbatch *b = cur_batch(rt, NULL);
    twait *tw;

    if (!b)
        return -1;
    memset(&cl, 0, sizeof(cl));
    cl.types = w->types;
    cl.typelens = w->typelens;
    cl.ntypes = w->ntypes;
    cl.count = w->count;
    tw = take_wait(b, w->c, w, RTASK_CLAIM, rtask_batch_add_claim(b->tb, &cl));
    if (!tw)
        return -1;
    w->in_flight = 1;
    rt->stats.claims++;
    maybe_send_full(rt);
    return 0;
}

void rtasks_add(conn *c, const sluice_task_spec *spec, int64_t delay_ns)
{
    server *s = c->srv;
    rtasks *rt = state_of(s);
    sluice_charge stack[LINKS_STACK], *ch = stack;
    rtask_link lstack[LINKS_STACK], *links = lstack;
    char(*ids)[LIMIT_ID_BUF] = NULL, idstack[LINKS_STACK][LIMIT_ID_BUF];
    sluice_submit_error err;
    sluice_task_plan plan;
    const char *why = NULL;
    rtask_add a;
    tbatch *b;
    int n;

    if (!rstore_up(s, &why)) {
        reply_down(c, why);
        return;
    }
    n = sluice_engine_resolve_task(s->engine, spec, server_now(s), &plan, ch, LINKS_STACK, &err);
    if (n > LINKS_STACK) {
        ch = alloc_calloc((size_t)n, sizeof(*ch));
        links = alloc_calloc((size_t)n, sizeof(*links));
        ids = alloc_calloc((size_t)n, sizeof(*ids));
        if (!ch || !links || !ids) {
            resp_error(conn_out(c), "NOMEM", "out of memory");
            goto done;
        }
        n = sluice_engine_resolve_task(s->engine, spec, server_now(s), &plan, ch, (size_t)n, &err);
    } else {
        ids = idstack;
    }
    if (n < 0) {
        reply_engine_error(c, n, err.message);
        goto done;
    }
    for (int i = 0; i < n; i++) {
        const sluice_limit_policy *p = sluice_engine_get_limit(s->engine, ch[i].limit, NULL);
        rtask_link *l = &links[i];

        memset(l, 0, sizeof(*l));
        if (ch[i].tier)
            snprintf(ids[i], LIMIT_ID_BUF, "%s/%s", ch[i].limit, ch[i].tier);
        else
            snprintf(ids[i], LIMIT_ID_BUF, "%s", ch[i].limit);
        l->lim.def = ch[i].def;
        l->lim.limit_id = ids[i];
        l->lim.key = ch[i].key;
        l->lim.keylen = ch[i].keylen;
        l->lim.units = ch[i].units;
        l->lim.tag = RTASKS_TAG;
        l->lim.taglen = RTASKS_TAG_LEN;
        l->horizon_ns = ch[i].def->kind == SLUICE_CONCURRENCY ? 0 : ch[i].def->horizon_ns;
        if (p && p->overflow == SLUICE_OVERFLOW_REJECT)
            l->flags |= RTASK_LINK_REJECT;
        if (ch[i].settles)
            l->flags |= RTASK_LINK_SETTLE;
    }
    memset(&a, 0, sizeof(a));
    a.type = spec->type;
    a.typelen = strlen(spec->type);
    a.payload = spec->payload;
    a.payload_len = spec->payload_len;
    a.task_key = spec->task_key;
    a.task_key_len = spec->task_key_len;
    a.links = links;
    a.nlinks = (size_t)n;
    a.priority = plan.priority;
    a.delay_ns = delay_ns;
    a.lease_ns = plan.lease_ns;
    a.charge_redelivery = plan.charge_redelivery;
    a.retry = plan.retry;
    b = cur_batch(rt, c);
    if (b && take_wait(b, c, NULL, RTASK_ADD, rtask_batch_add_add(b->tb, &a)))
        maybe_send_full(rt);
done:
    if (ch != stack) {
        alloc_free(ch);
        alloc_free(links);
        alloc_free(ids);
    }
}

void rtasks_get(conn *c, const char *const *types, size_t ntypes, size_t count, int64_t timeout_ms)
{
    server *s = c->srv;
    rtasks *rt = state_of(s);
    size_t len = sizeof(waiter) + ntypes * (sizeof(char *) + sizeof(size_t));
    const char *why = NULL;
    waiter *w;
    char *p;

    if (timeout_ms == 0 && !rstore_up(s, &why)) {
        reply_down(c, why);
        return;
    }
    for (size_t i = 0; i < ntypes; i++)
        len += strlen(types[i]) + 1;
    w = alloc_calloc(1, len);
    if (!w) {
        resp_error(conn_out(c), "NOMEM", "out of memory");
        return;
    }
    w->c = c;
    w->count = count;
    w->ntypes = ntypes;
    w->types = (const char **)(void *)(w + 1);
    w->typelens = (size_t *)(void *)(w->types + ntypes);
    p = (char *)(w->typelens + ntypes);
    for (size_t i = 0; i < ntypes; i++) {
        size_t tl = strlen(types[i]);

        memcpy(p, types[i], tl + 1);
        w->types[i] = p;
        w->typelens[i] = tl;
        p += tl + 1;
    }
    /* Blocked even for TIMEOUT 0 (no timer then): the client runs nothing more until the claim
     * is answered, as a poll would have answered before its next command ran. */
    if (conn_block(c, timeout_ms, &get_ops, w) != 0) {
        alloc_free(w);
        resp_array(conn_out(c), 0);
        return;
    }
    w->prev = rt->wtail;
    if (rt->wtail)
        rt->wtail->next = w;
    else
        rt->whead = w;
    rt->wtail = w;
    rt->nwaiters++;
    if (timeout_ms == 0)
        w->expired = 1; /* answered by its first claim, whatever it finds */
    if (waiter_claim(rt, w) != 0 && timeout_ms == 0) {
        waiter_reply_empty(rt, w);
        return;
    }
    arm_timer(rt, RTASKS_POLL_MS);
}

void rtasks_done(conn *c, rtask_op op, const rtask_done *d)
{
    rtasks *rt = state_of(c->srv);
    const char *why = NULL;
    tbatch *b;
    twait *w;
    int idx;

    if (!rstore_up(c->srv, &why)) {
        reply_down(c, why);
        return;
    }
    b = cur_batch(rt, c);
    if (!b)
        return;
    switch (op) {
    case RTASK_ACK:
        idx = rtask_batch_add_ack(b->tb, d);
        break;
    case RTASK_FAIL:
        idx = rtask_batch_add_fail(b->tb, d);
        break;
    case RTASK_TOUCH:
        idx = rtask_batch_add_touch(b->tb, d);
        break;
    case RTASK_CANCEL:
        idx = rtask_batch_add_cancel(b->tb, d);
        break;
    case RTASK_INFO:
        idx = rtask_batch_add_info(b->tb, d);
        break;
    default:
        idx = SLUICE_EINVAL;
        break;
    }
    w = take_wait(b, c, NULL, op, idx);
    if (!w)
        return;
    w->id = d->id;
    w->attempt = d->attempt;
    maybe_send_full(rt);
}

/* ---- Answers ----------------------------------------------------------------------------- */

/* Copies task k of request w (a claim's delivery, or INFO's task) into the batch. Returns 0 or
 * -1 (a malformed reply, or out of memory). */
static int copy_task(tbatch *b, const redisReply *reply, const twait *w, size_t k)
{
    ttask *t;

    if (grow_array(&b->tasks, &b->tcap, b->ntasks + 1, sizeof(*b->tasks), 16) != SLUICE_OK)
        return -1;
    t = &b->tasks[b->ntasks];
    memset(t, 0, sizeof(*t));
    if (rtask_batch_task(b->tb, reply, (size_t)w->req, k, &t->t) != 0)
        return -1;
    t->type_off = arena_put(b, t->t.type, t->t.typelen);
    t->payload_off = arena_put(b, t->t.payload, t->t.payload_len);
    t->task_key_off = t->t.task_key ? arena_put(b, t->t.task_key, t->t.task_key_len) : 0;
    t->fail_message_off =
        t->t.fail_message ? arena_put(b, t->t.fail_message, t->t.fail_message_len) : 0;
    if (t->type_off == SIZE_MAX || t->payload_off == SIZE_MAX || t->task_key_off == SIZE_MAX ||
        t->fail_message_off == SIZE_MAX)
        return -1;
    b->ntasks++;
    return 0;
}

/* Decodes the answer while Redis's reply is valid (rstore_call.on_reply). */
static void decode(rstore_call *call, const redisReply *reply)
{
    tbatch *b = (tbatch *)(void *)call;

    for (size_t i = 0; i < b->n; i++) {
        twait *w = &b->w[i];
        size_t ntasks = 0;

        if (rtask_batch_result(b->tb, reply, (size_t)w->req, &w->res) != 0)
            goto bad;
        w->msg_off = arena_put(b, w->res.msg ? w->res.msg : "", w->res.msg ? w->res.msglen : 0);
        if (w->msg_off == SIZE_MAX)
            goto bad;
        w->res.msg = NULL;
        w->task0 = b->ntasks;
        if (w->res.rc == 0 && w->op == RTASK_CLAIM)
            ntasks = w->res.ndelivered;
        else if (w->res.rc == 0 && w->op == RTASK_INFO)
            ntasks = 1;
        for (size_t k = 0; k < ntasks; k++)
            if (copy_task(b, reply, w, k) != 0)
                goto bad;
    }
    return;
bad:
    log_error("store: a task reply the script does not give");
    rstore_call_fail(call, "a malformed reply from the script");
}

/* A ttask as the reply helpers take it. */
static void task_view(const tbatch *b, const ttask *t, rtask_task *out)
{
    *out = t->t;
    out->type = b->arena + t->type_off;
    out->payload = b->arena + t->payload_off;
    out->task_key = t->t.task_key ? b->arena + t->task_key_off : NULL;
    out->fail_message = t->t.fail_message ? b->arena + t->fail_message_off : NULL;
}

/* Writes the n tasks of a claim from tasks[first] as TASK.GET's array. */
static void reply_deliveries(rtasks *rt, tbatch *b, conn *c, size_t first, size_t n)
{
    resp_array(conn_out(c), n);
    for (size_t k = 0; k < n; k++) {
        rtask_task t;
        sluice_delivery d;

        task_view(b, &b->tasks[first + k], &t);
        memset(&d, 0, sizeof(d));
        d.id = t.id;
        d.type = t.type;
        d.payload = t.payload;
        d.payload_len = t.payload_len;
        d.attempt = t.attempt;
        d.lease_until_ns = t.lease_until_ns;
        write_delivery(conn_out(c), &d, t.typelen);
    }
    rt->stats.delivered += n;
}

/* Writes a field name and an integer, or null when has is 0 (TASK.INFO's map). */
static void field_int(resp_writer *w, const char *name, int has, int64_t v)
{
    resp_bulk_str(w, name);
    if (has)
        resp_int(w, v);
    else
        resp_null(w);
}

static void field_bytes(resp_writer *w, const char *name, const char *s, size_t len)
{
    resp_bulk_str(w, name);
    if (s)
        resp_bulk(w, s, len);
    else
        resp_null(w);
}

/* TASK.INFO's map, with the fields of cmd_task.c in its order. The denial's fields (which limit
 * failed the task, and its figures) are not kept by the shared queue: null. */
static void reply_info(conn *c, const rtask_task *t)
{
    static const char *const none[] = {"limit",       "kind",      "tier",           "key",
                                       "limit_value", "window_ms", "retry_after_ms", "current",
                                       "attempted"};
    resp_writer *w = conn_out(c);
    int failed = t->state == SLUICE_TASK_FAILED;
    const char *reason = failed ? sluice_fail_reason_name(t->fail_reason) : NULL;

    resp_map(w, 22);
    field_int(w, "id", 1, (int64_t)t->id);
    field_bytes(w, "state", sluice_task_state_name(t->state),
                strlen(sluice_task_state_name(t->state)));
    field_bytes(w, "type", t->type, t->typelen);
    field_bytes(w, "payload", t->payload, t->payload_len);
    field_bytes(w, "task_key", t->task_key, t->task_key_len);
    field_int(w, "priority", 1, t->priority);
    field_int(w, "units", 0, 0);
    field_int(w, "attempt", 1, t->attempt);
    field_int(w, "submitted_ms", 1, command_time_ms(t->submitted_ns));
    field_int(w, "not_before_ms", 1,
              command_time_ms(t->not_before_ns ? t->not_before_ns : t->submitted_ns));
    field_int(w, "lease_until_ms", t->state == SLUICE_TASK_RUNNING,
              command_time_ms(t->lease_until_ns));
    field_bytes(w, "fail_reason", reason, reason ? strlen(reason) : 0);
    field_bytes(w, "fail_message", failed ? t->fail_message : NULL, t->fail_message_len);
    for (size_t i = 0; i < sizeof(none) / sizeof(none[0]); i++)
        field_int(w, none[i], 0, 0);
}

/* The reply of one answered request with a deferred slot. */
static void reply_wait(rtasks *rt, tbatch *b, twait *w)
{
    conn *c = w->c;
    const rtask_result *r = &w->res;
    const char *msg = b->arena + w->msg_off;

    if (b->base.why[0]) {
        resp_error(conn_out(c), "STOREDOWN", "the shared store is unavailable (%s); %s",
                   b->base.why,
                   w->op == RTASK_ADD ? "the task may or may not have been added"
                                      : "it may or may not have been done");
        return;
    }
    if (r->rc == SLUICE_ENOTFOUND) {
        reply_notask(c, w->id);
        return;
    }
    if (r->rc == SLUICE_EEXIST) {
        resp_error(conn_out(c), "EXISTS",
                   "running_id=%" PRIu64 " the task key is held by running task %" PRIu64
                   "; it can be submitted again once that task finishes",
                   r->id, r->id);
        return;
    }
    if (r->rc == SLUICE_ESTATE && w->op != RTASK_CANCEL) {
        reply_task_refused(c, w->id, w->attempt, r->state, r->attempt);
        return;
    }
    if (r->rc == SLUICE_EBUSY || (r->rc == SLUICE_ESTATE && r->state == SLUICE_TASK_RUNNING)) {
        resp_error(conn_out(c), "INUSE",
                   "task %" PRIu64 " is running: a worker holds it; it can be cancelled only "
                   "while queued or parked",
                   w->id);
        return;
    }
    if (r->rc != 0 && r->rc != SLUICE_ESTATE) {
        reply_engine_error(c, r->rc, msg[0] ? msg : NULL);
        return;
    }
    switch (w->op) {
    case RTASK_ADD:
        rt->wake = 1; /* work for a waiter here, even with the subscriber down */
        resp_int(conn_out(c), (int64_t)r->id);
        return;
    case RTASK_ACK:
        rt->wake = 1;
        resp_simple(conn_out(c), "OK");
        return;
    case RTASK_FAIL:
        rt->wake = 1;
        resp_bulk_str(conn_out(c), sluice_task_state_name(r->state));
        return;
    case RTASK_TOUCH:
        resp_int(conn_out(c), command_time_ms(r->lease_until_ns));
        return;
    case RTASK_CANCEL:
        /* ESTATE of a task that is not running: already finished, nothing to cancel. */
        rt->wake = 1;
        resp_int(conn_out(c), r->rc == 0 && r->cancelled);
        return;
    case RTASK_INFO: {
        rtask_task t;

        task_view(b, &b->tasks[w->task0], &t);
        reply_info(c, &t);
        return;
    }
    case RTASK_CLAIM:
        reply_deliveries(rt, b, c, w->task0, r->rc == 0 ? r->ndelivered : 0);
        return;
    }
}

/* A waiter's claim was answered (or failed): deliver, answer empty, or keep waiting. */
static void apply_waiter(rtasks *rt, tbatch *b, twait *w)
{
    waiter *wt = w->wt;
    const rtask_result *r = &w->res;
    size_t n = !b->base.why[0] && r->rc == 0 ? r->ndelivered : 0;

    wt->in_flight = 0;
    if (!wt->c) { /* its client closed (or the server stopped) meanwhile */
        alloc_free(wt);
        return;
    }
    if (n > 0) {
        conn *c = wt->c;

        waiter_unlink(rt, wt);
        reply_deliveries(rt, b, c, w->task0, n);
        conn_unblock(c);
        alloc_free(wt);
        return;
    }
    if (!b->base.why[0] && r->rc == 0) {
        if (r->more)
            rt->wake = 1;
        else if (r->next_wake_ns > 0)
            arm_timer(rt, r->next_wake_ns <= r->now_ns
                              ? 0
                              : (uint64_t)((r->next_wake_ns - r->now_ns + SLUICE_NS_PER_MS - 1) /
                                           SLUICE_NS_PER_MS));
    }
    if (wt->expired) {
        waiter_reply_empty(rt, wt);
        return;
    }
    arm_timer(rt, RTASKS_POLL_MS);
}

/* Writes a batch's answers to its clients in request order (rstore_call.apply). */
static void apply(rstore_call *call)
{
    tbatch *b = (tbatch *)(void *)call;
    rtasks *rt = b->rt;

    /* The FIFO applies in send order: this batch is the oldest this module sent. */
    if (rt->sent == b) {
        rt->sent = b->next;
        if (!rt->sent)
            rt->last = NULL;
    }
    b->next = NULL;
    for (size_t i = 0; i < b->n; i++) {
        twait *w = &b->w[i];
        size_t mark;

        if (w->wt) {
            apply_waiter(rt, b, w);
            continue;
        }
        if (!w->c)
            continue;
        mark = conn_out(w->c)->len;
        reply_wait(rt, b, w);
        if (!conn_out(w->c)->failed && conn_out(w->c)->len > mark)
            counters_reply(&rt->s->counters, conn_out(w->c)->buf + mark,
                           conn_out(w->c)->len - mark);
        conn_defer_fill(w->c, w->ticket, mark);
    }
    batch_recycle(rt, b);
}

void rtasks_flush(server *s)
{
    rtasks *rt = state_of(s);
    tbatch *b;
    int argc = 0, rc;
    const char **argv = NULL;
    const size_t *argvlen = NULL;

    if (!rt || !rt->cur)
        return;
    b = rt->cur;
    rt->cur = NULL;
    rc = rtask_batch_command(b->tb, rstore_sha(s), &argc, &argv, &argvlen);
    b->base.call.argc = argc;
    b->base.call.argv = argv;
    b->base.call.argvlen = argvlen;
    b->base.on_reply = decode;
    b->base.apply = apply;
    b->next = NULL;
    if (rt->last)
        rt->last->next = b;
    else
        rt->sent = b;
    rt->last = b;
    rt->stats.requests += b->n;
    rstore_send(s, &b->base, rc);
}

void rtasks_turn(server *s)
{
    rtasks *rt = state_of(s);

    if (!rt)
        return;
    if (rt->wake && !rt->closed) {
        rt->wake = 0;
        for (waiter *w = rt->whead; w; w = w->next)
            if (!w->in_flight && w->c)
                waiter_claim(rt, w);
    }
    rtasks_flush(s);
}

void rtasks_store_up(server *s)
{
    rtasks *rt = state_of(s);

    if (rt)
        rt->wake = 1;
}

void rtasks_conn_closed(conn *c)
{
    rtasks *rt = state_of(c->srv);

    if (!rt)
        return;
    for (tbatch *b = rt->cur; b; b = NULL)
        for (size_t i = 0; i < b->n; i++)
            if (b->w[i].c == c && !b->w[i].wt)
                b->w[i].c = NULL;
    for (tbatch *b = rt->sent; b; b = b->next)
        for (size_t i = 0; i < b->n; i++)
            if (b->w[i].c == c && !b->w[i].wt)
                b->w[i].c = NULL;
}

/* ---- The subscriber ---------------------------------------------------------------------- */

static void on_message(void *arg, const char *msg, size_t len)
{
    rtasks *rt = arg;

    (void)msg;
    (void)len;
    rt->stats.wakes++;
    rt->wake = 1;
}

static void on_sub_state(void *arg, rconn_state state, const char *why)
{
    rtasks *rt = arg;

    rt->stats.subscriber_up = state == RCONN_UP;
    if (state == RCONN_UP) {
        /* Wakes published while it was away are lost: look again. */
        rt->wake = 1;
        rt->logged_why[0] = '\0';
        log_info("store: subscribed to %s", rt->channel);
    } else if (why && strcmp(why, rt->logged_why) != 0) {
        snprintf(rt->logged_why, sizeof rt->logged_why, "%s", why);
        log_warn("store: the wake subscription is down (%s); blocked TASK.GETs look every %d ms",
                 why, RTASKS_POLL_MS);
    }
}

int rtasks_open(server *s, const char *host, int port, int64_t timeout_ms, char *msg, size_t msglen)
{
    rtasks *rt = alloc_calloc(1, sizeof(*rt));
    rtask_batch *probe = NULL;
    rconn_options o;
    int rc;

    if (!rt || rtask_batch_new(NULL, &probe) != 0) {
        alloc_free(rt);
        snprintf(msg, msglen, "out of memory");
        return SLUICE_ENOMEM;
    }
    snprintf(rt->channel, sizeof rt->channel, "%s", rtask_wake_channel(probe));
    rtask_batch_free(probe);
    rt->s = s;
    memset(&o, 0, sizeof(o));
    o.host = host;
    o.port = port;
    o.timeout_ms = timeout_ms;
    o.channel = rt->channel;
    o.on_message = on_message;
    o.on_state = on_sub_state;
    o.arg = rt;
    rc = rconn_new(&s->loop, &o, &rt->sub);
    if (rc != 0) {
        snprintf(msg, msglen, "the wake subscriber: %s", sluice_strerror(rc));
        alloc_free(rt);
        return rc;
    }
    uv_timer_init(&s->loop, &rt->timer);
    rt->timer.data = rt;
    s->rtasks_state = rt;
    return 0;
}

void rtasks_close(server *s)
{
    rtasks *rt = state_of(s);

    if (!rt || rt->closed)
        return;
    /* Blocked clients got their timeout reply when the server began to stop. */
    rtasks_flush(s); /* failed at once if the store is closing: answered in order */
    rt->closed = 1;
    uv_timer_stop(&rt->timer);
    uv_close((uv_handle_t *)&rt->timer, NULL);
    rconn_free(rt->sub);
    rt->sub = NULL;
}

void rtasks_free(server *s)
{
    rtasks *rt = state_of(s);
    tbatch *b;
    waiter *w;

    if (!rt)
        return;
    rtasks_close(s);
    batch_free(rt->cur);
    while ((b = rt->spare) != NULL) {
        rt->spare = b->next;
        batch_free(b);
    }
    while ((w = rt->whead) != NULL) {
        waiter_unlink(rt, w);
        alloc_free(w);
    }
    alloc_free(rt);
    s->rtasks_state = NULL;
}

void rtasks_get_stats(const server *s, rtasks_stats *out)
{
    const rtasks *rt = state_of(s);

    memset(out, 0, sizeof(*out));
    if (!rt)
        return;
    *out = rt->stats;
    out->waiters = rt->nwaiters;
}
