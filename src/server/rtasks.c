/* SPDX-License-Identifier: MIT */
/*
 * The task queue shared on Redis or PostgreSQL, the node's side (rtasks.h): the turn's task
 * batch, the blocked TASK.GETs (waiters), the timer of the next wake and, on Redis, the
 * subscriber of the wake channel (on PostgreSQL the store's own connection LISTENs, and rstore
 * hands each notification to rtasks_notify).
 *
 * A batch (tbatch) is one call of the store (Redis's script: rtask_batch; PostgreSQL's task
 * function: pgt_batch; the same requests and answers), embedded in rstore's FIFO (rstore_call
 * first). The store's answer is valid only during its callback, and the batch may not be at the
 * head of the FIFO then: the callback copies what the replies need (results, delivered tasks'
 * bytes, messages) into the batch's arena, and the replies are written when the FIFO reaches the
 * batch (both in rtasks_reply.c; the objects are in rtasks_impl.h). Applied batches are kept for
 * reuse, at most SPARE_MAX.
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

#include "base/alloc.h"
#include "base/grow.h"
#include "server/commands.h"
#include "server/log.h"
#include "server/rstore.h"
#include "server/rtag.h"
#include "server/rtasks_impl.h"
#include "sluice/error.h"
#include "store/redis_conn.h"

/* Applied batches kept for reuse. */
#define SPARE_MAX 8
/* Links of a task resolved on the stack; longer chains are allocated. */
#define LINKS_STACK 16

void rtasks_links_of(const sluice_engine *e, const sluice_charge *ch, size_t n,
                     char (*ids)[RTASKS_LIMIT_ID_BUF], const char *tag, rtask_link *links)
{
    int off = !sluice_engine_enabled(e);

    for (size_t i = 0; i < n; i++) {
        const sluice_limit_policy *p = sluice_engine_get_limit(e, ch[i].limit, NULL);
        rtask_link *l = &links[i];

        memset(l, 0, sizeof(*l));
        if (ch[i].tier)
            snprintf(ids[i], RTASKS_LIMIT_ID_BUF, "%s/%s", ch[i].limit, ch[i].tier);
        else
            snprintf(ids[i], RTASKS_LIMIT_ID_BUF, "%s", ch[i].limit);
        l->lim.def = ch[i].def;
        l->lim.limit_id = ids[i];
        l->lim.key = ch[i].key;
        l->lim.keylen = ch[i].keylen;
        l->lim.units = ch[i].units;
        l->lim.tag = tag;
        l->lim.taglen = tag ? strlen(tag) : 0;
        l->horizon_ns = ch[i].def->kind == SLUICE_CONCURRENCY ? 0 : ch[i].def->horizon_ns;
        if (p && p->overflow == SLUICE_OVERFLOW_REJECT)
            l->flags |= RTASK_LINK_REJECT;
        if (ch[i].settles)
            l->flags |= RTASK_LINK_SETTLE;
        l->lim.shadow = off || (p && p->mode == SLUICE_MODE_SHADOW);
    }
}

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
    pgt_batch_free(b->pb);
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
    if ((rt->pg ? pgt_batch_new(&b->pb) : rtask_batch_new(NULL, &b->tb)) != 0) {
        alloc_free(b);
        return NULL;
    }
    if (b->pb)
        pgt_batch_set_caps(b->pb, rt->max_tasks, rt->max_parked);
    else
        rtask_batch_set_caps(b->tb, rt->max_tasks, rt->max_parked);
    return b;
}

void rtasks_batch_recycle(rtasks *rt, tbatch *b)
{
    if (b->pb)
        pgt_batch_reset(b->pb);
    else
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
size_t rtasks_arena_put(tbatch *b, const char *p, size_t len)
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

/* Appends one request of op (its struct: rtask_add, rtask_claim or rtask_done) to whichever
 * encoder the batch has. Returns its index, or an error (the batch unchanged). */
static int batch_add(tbatch *b, rtask_op op, const void *r)
{
    switch (op) {
    case RTASK_ADD:
        return b->pb ? pgt_batch_add_add(b->pb, r) : rtask_batch_add_add(b->tb, r);
    case RTASK_CLAIM:
        return b->pb ? pgt_batch_add_claim(b->pb, r) : rtask_batch_add_claim(b->tb, r);
    case RTASK_ACK:
        return b->pb ? pgt_batch_add_ack(b->pb, r) : rtask_batch_add_ack(b->tb, r);
    case RTASK_FAIL:
        return b->pb ? pgt_batch_add_fail(b->pb, r) : rtask_batch_add_fail(b->tb, r);
    case RTASK_TOUCH:
        return b->pb ? pgt_batch_add_touch(b->pb, r) : rtask_batch_add_touch(b->tb, r);
    case RTASK_CANCEL:
        return b->pb ? pgt_batch_add_cancel(b->pb, r) : rtask_batch_add_cancel(b->tb, r);
    case RTASK_INFO:
        return b->pb ? pgt_batch_add_info(b->pb, r) : rtask_batch_add_info(b->tb, r);
    }
    return SLUICE_EINVAL;
}

int rtasks_result(const tbatch *b, const rstore_answer *a, size_t idx, rtask_result *res)
{
    return b->pb ? pgt_batch_result(b->pb, a->pg, idx, res)
                 : rtask_batch_result(b->tb, a->redis, idx, res);
}

int rtasks_task(const tbatch *b, const rstore_answer *a, size_t idx, size_t k, rtask_task *out)
{
    return b->pb ? pgt_batch_task(b->pb, a->pg, idx, k, out)
                 : rtask_batch_task(b->tb, a->redis, idx, k, out);
}

/* ---- Waiters ----------------------------------------------------------------------------- */

void rtasks_waiter_unlink(rtasks *rt, waiter *w)
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
void rtasks_arm_timer(rtasks *rt, uint64_t delay_ms)
{
    uint64_t due = uv_now(&rt->s->loop) + delay_ms;

    if (rt->closed || (rt->timer_due != 0 && rt->timer_due <= due))
        return;
    rt->timer_due = due;
    uv_timer_start(&rt->timer, on_timer, delay_ms, 0);
}

/* The reply of a waiter whose wait is over with nothing: the empty array. Unblocks it. */
void rtasks_waiter_reply_empty(rtasks *rt, waiter *w)
{
    conn *c = w->c;

    rtasks_waiter_unlink(rt, w);
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
    rtasks_waiter_unlink(rt, w);
    resp_array(conn_out(c), 0);
    conn_unblock(c);
    if (!w->in_flight)
        alloc_free(w);
}

static void get_cancel(conn *c, void *arg)
{
    waiter *w = arg;
    rtasks *rt = state_of(c->srv);

    rtasks_waiter_unlink(rt, w);
    if (w->in_flight)
        w->c = NULL; /* its apply frees it */
    else
        alloc_free(w);
}

static const conn_block_ops get_ops = {get_retry, get_timeout, get_cancel, 0};

/* ---- Requests ---------------------------------------------------------------------------- */

/* The turn's batch of lane with room for one more wait, or NULL after replying NOMEM (when
 * c). */
static tbatch *cur_batch(rtasks *rt, conn *c, int lane)
{
    tbatch *b;

    /* A limits request of this turn (of this lane) goes first: the FIFO is the order requests
     * were taken. */
    rstore_flush_limits_lane(rt->s, lane);
    b = rt->cur[lane];
    if (!b) {
        b = batch_get(rt);
        if (!b)
            goto nomem;
        b->lane = lane;
        rt->cur[lane] = b;
        rt->ncur++;
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

/* Sends lane's batch at once when it is full (the rest of the turn starts another). */
static void maybe_send_full(rtasks *rt, int lane)
{
    if (rt->cur[lane] && rt->cur[lane]->n >= RSTORE_BATCH_MAX)
        rtasks_flush_lane(rt->s, lane);
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
    int lane = rstore_lane(rt->s, w->c, 0);
    tbatch *b = cur_batch(rt, NULL, lane);
    twait *tw;

    if (!b)
        return -1;
    memset(&cl, 0, sizeof(cl));
    cl.types = w->types;
    cl.typelens = w->typelens;
    cl.ntypes = w->ntypes;
    cl.count = w->count;
    tw = take_wait(b, w->c, w, RTASK_CLAIM, batch_add(b, RTASK_CLAIM, &cl));
    if (!tw)
        return -1;
    w->in_flight = 1;
    rt->stats.claims++;
    maybe_send_full(rt, lane);
    return 0;
}

void rtasks_fair_of(const sluice_task_plan *plan, const sluice_charge *ch, rtask_add *a)
{
    a->fair = plan->fair;
    if (!plan->fair)
        return;
    a->tenant = plan->fair_link >= 0 ? ch[plan->fair_link].key : NULL;
    a->tenant_len = plan->fair_link >= 0 ? ch[plan->fair_link].keylen : 0;
    a->fair_units = plan->fair_link >= 0 ? ch[plan->fair_link].units : plan->units;
    if (a->fair_units < 1)
        a->fair_units = 1; /* ready.c's ready_served: a turn costs at least one unit */
}

void rtasks_add(conn *c, const sluice_task_spec *spec, int64_t delay_ns)
{
    rtasks_add_group(c, spec, delay_ns, NULL);
}

/* The link of the resolved chain ch (n links) that group g's lease stands in for (1-based), or 0
 * after replying WRONGARGS with gate_group_resolve's words. */
static size_t group_link_of(conn *c, const sluice_charge *ch, size_t n, const rtasks_group *g)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(ch[i].limit, g->limit) != 0)
            continue;
        if (ch[i].tier) {
            resp_error(conn_out(c), "WRONGARGS",
                       "limit \"%s\" is tiered: a lease cannot stand in for it", g->limit);
            return 0;
        }
        if (ch[i].def->kind != SLUICE_CONCURRENCY) {
            resp_error(conn_out(c), "WRONGARGS",
                       "limit \"%s\" is not a concurrency limit: a lease cannot stand in for it",
                       g->limit);
            return 0;
        }
        if (ch[i].keylen != g->keylen || (g->keylen && memcmp(ch[i].key, g->key, g->keylen))) {
            resp_error(conn_out(c), "WRONGARGS",
                       "the lease is on another key of limit \"%s\" than this task's", g->limit);
            return 0;
        }
        return i + 1;
    }
    resp_error(conn_out(c), "WRONGARGS",
               "the task's type has no limit \"%s\" for its lease to stand in for", g->limit);
    return 0;
}

void rtasks_add_group(conn *c, const sluice_task_spec *spec, int64_t delay_ns,
                      const rtasks_group *g)
{
    server *s = c->srv;
    rtasks *rt = state_of(s);
    sluice_charge stack[LINKS_STACK], *ch = stack;
    rtask_link lstack[LINKS_STACK], *links = lstack;
    char(*ids)[RTASKS_LIMIT_ID_BUF] = NULL, idstack[LINKS_STACK][RTASKS_LIMIT_ID_BUF];
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
    memset(&a, 0, sizeof(a));
    if (g) {
        a.group_link = group_link_of(c, ch, (size_t)n, g);
        if (a.group_link == 0)
            goto done;
        a.group_lease = g->id;
    }
    rtasks_links_of(s->engine, ch, (size_t)n, ids, rt->pg ? NULL : RTAG_QUEUE, links);
    a.type = spec->type;
    a.typelen = strlen(spec->type);
    a.payload = spec->payload;
    a.payload_len = spec->payload_len;
    a.task_key = spec->task_key;
    a.task_key_len = spec->task_key_len;
    a.links = links;
    a.nlinks = (size_t)n;
    a.units = plan.units;
    a.priority = plan.priority;
    a.delay_ns = delay_ns;
    a.lease_ns = plan.lease_ns;
    a.charge_redelivery = plan.charge_redelivery;
    a.retry = plan.retry;
    rtasks_fair_of(&plan, ch, &a);
    b = cur_batch(rt, c, rstore_lane(s, c, 0));
    if (b) {
        twait *w = take_wait(b, c, NULL, RTASK_ADD, batch_add(b, RTASK_ADD, &a));

        if (w && g) {
            /* For NOLEASE's words, should the store find the lease gone. */
            w->group_off = rtasks_arena_put(b, g->limit, strlen(g->limit));
            w->has_group = w->group_off != SIZE_MAX;
        }
        if (w)
            maybe_send_full(rt, b->lane);
    }
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
        rtasks_waiter_reply_empty(rt, w);
        return;
    }
    rtasks_arm_timer(rt, RTASKS_POLL_MS);
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
    b = cur_batch(rt, c, rstore_lane(c->srv, c, 0));
    if (!b)
        return;
    idx = op == RTASK_ADD || op == RTASK_CLAIM ? SLUICE_EINVAL : batch_add(b, op, d);
    w = take_wait(b, c, NULL, op, idx);
    if (!w)
        return;
    w->id = d->id;
    w->attempt = d->attempt;
    maybe_send_full(rt, b->lane);
}

int rtasks_info_then(conn *c, uint64_t id, rtasks_info_fn fn, void *arg)
{
    rtasks *rt = state_of(c->srv);
    rtask_done d = {.id = id, .cost = -1, .retry_after_ns = -1};
    const char *why = NULL;
    tbatch *b;
    twait *w;
    int idx;

    if (!rstore_up(c->srv, &why)) {
        reply_down(c, why);
        return -1;
    }
    b = cur_batch(rt, c, rstore_lane(c->srv, c, 0));
    if (!b)
        return -1;
    idx = batch_add(b, RTASK_INFO, &d);
    if (idx < 0) {
        take_wait(b, c, NULL, RTASK_INFO, idx); /* replies the refusal */
        return -1;
    }
    /* As take_wait, without a slot: fn writes whatever reply comes of the answer. */
    w = &b->w[b->n++];
    memset(w, 0, sizeof(*w));
    w->op = RTASK_INFO;
    w->req = idx;
    w->id = id;
    w->fn = fn;
    w->fn_arg = arg;
    maybe_send_full(rt, b->lane);
    return 0;
}

void rtasks_flush(server *s)
{
    rtasks *rt = state_of(s);

    for (int lane = 0; rt && rt->ncur > 0 && lane < RSTORE_LANES_MAX; lane++)
        if (rt->cur[lane])
            rtasks_flush_lane(s, lane);
}

void rtasks_flush_lane(server *s, int lane)
{
    rtasks *rt = state_of(s);
    tbatch *b;
    int argc = 0, rc;
    const char **argv = NULL;
    const size_t *argvlen = NULL;

    if (!rt || lane < 0 || lane >= RSTORE_LANES_MAX || !rt->cur[lane])
        return;
    b = rt->cur[lane];
    rt->cur[lane] = NULL;
    rt->ncur--;
    if (b->pb) {
        const char *const *values = NULL;

        rc = pgt_batch_params(b->pb, &values);
        rstore_call_pg(&b->base, RTASKS_PG_STMT, PGT_CALL_NPARAMS, values);
    } else {
        rc = rtask_batch_command(b->tb, rstore_sha(s), &argc, &argv, &argvlen);
    }
    b->base.call.argc = argc;
    b->base.call.argv = argv;
    b->base.call.argvlen = argvlen;
    b->base.on_reply = rtasks_decode;
    b->base.apply = rtasks_apply;
    b->base.lane = b->lane;
    b->base.slot = rstore_queue_slot(s); /* Redis Cluster: the queue's master */
    b->next = NULL;
    if (rt->last)
        rt->last->next = b;
    else
        rt->sent = b;
    rt->last = b;
    rt->stats.requests += b->n;
    b->base.wait_replicas = 0;
    for (size_t i = 0; i < b->n; i++)
        if (rtasks_op_waits(b->w[i].op)) {
            b->base.wait_replicas = rstore_replicas(s, NULL);
            break;
        }
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
    /* PostgreSQL: a lane's batch is held while that lane has a call in flight; its answer
     * sends it (rstore_may_send). */
    for (int lane = 0; rt->ncur > 0 && lane < RSTORE_LANES_MAX; lane++)
        if (rt->cur[lane] && rstore_may_send(s, lane))
            rtasks_flush_lane(s, lane);
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
    for (int lane = 0; lane < RSTORE_LANES_MAX; lane++)
        for (tbatch *b = rt->cur[lane]; b; b = NULL)
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

void rtasks_notify(server *s)
{
    rtasks *rt = state_of(s);

    if (rt)
        on_message(rt, "", 0);
}

static void on_sub_state(void *arg, rconn_state state, const char *why);

/* Connects the subscriber to subs[sub_at]. Returns 0 or SLUICE_ENOMEM. */
static int sub_connect(rtasks *rt)
{
    rconn_options o;

    memset(&o, 0, sizeof(o));
    o.host = rt->subs[rt->sub_at].host;
    o.port = rt->subs[rt->sub_at].port;
    o.timeout_ms = rt->sub_timeout_ms;
    o.user = rt->sub_user;
    o.password = rt->sub_password;
    o.channel = rt->channel;
    o.on_message = on_message;
    o.on_state = on_sub_state;
    o.arg = rt;
    return rconn_new(&rt->s->loop, &o, &rt->sub);
}

static void on_rotate(uv_timer_t *t)
{
    rtasks *rt = t->data;
    rconn *old = rt->sub;

    if (rt->closed)
        return;
    rt->sub = NULL; /* its last callbacks (none: rconn_free is silent) find no subscriber */
    rconn_free(old);
    rt->sub_at = (rt->sub_at + 1) % rt->nsubs;
    rt->sub_fails = 0;
    log_info("store: the wake subscriber moves to %s:%d", rt->subs[rt->sub_at].host,
             rt->subs[rt->sub_at].port);
    if (sub_connect(rt) != 0) {
        rt->sub = NULL;
        log_warn("store: out of memory for the wake subscriber; blocked TASK.GETs look every %d "
                 "ms",
                 RTASKS_POLL_MS);
    }
}

static void on_sub_state(void *arg, rconn_state state, const char *why)
{
    rtasks *rt = arg;

    rt->stats.subscriber_up = state == RCONN_UP;
    if (state == RCONN_UP) {
        /* Wakes published while it was away are lost: look again. */
        rt->wake = 1;
        rt->sub_fails = 0;
        rt->logged_why[0] = '\0';
        log_info("store: subscribed to %s", rt->channel);
        return;
    }
    if (why && strcmp(why, rt->logged_why) != 0) {
        snprintf(rt->logged_why, sizeof rt->logged_why, "%s", why);
        log_warn("store: the wake subscription is down (%s); blocked TASK.GETs look every %d ms",
                 why, RTASKS_POLL_MS);
    }
    /* A Cluster: another seed hears the same messages. */
    if (++rt->sub_fails >= RTASKS_SUB_TRIES && rt->nsubs > 1 && rt->has_rotate && !rt->closed)
        uv_timer_start(&rt->rotate, on_rotate, 0, 0);
}

int rtasks_open(server *s, const config_store_url *u, int64_t timeout_ms, char *msg, size_t msglen)
{
    rtasks *rt = alloc_calloc(1, sizeof(*rt));
    rtask_batch *probe = NULL;
    sluice_engine_policy ep;
    int rc;

    /* The engine's caps, as the engine has them: they never change while the node runs. */
    sluice_engine_policy_init(&ep);
    if (s->has_config)
        ep = s->config.engine;
    if (rt) {
        rt->max_tasks = ep.max_tasks;
        rt->max_parked = ep.max_parked;
    }
    if (rt && !u) {
        /* PostgreSQL: the store's connection LISTENs (rtasks_notify). */
        rt->s = s;
        rt->pg = 1;
        snprintf(rt->channel, sizeof rt->channel, "%s", PGT_WAKE_CHANNEL);
        uv_timer_init(&s->loop, &rt->timer);
        rt->timer.data = rt;
        s->rtasks_state = rt;
        return 0;
    }
    if (!rt || rtask_batch_new(NULL, &probe) != 0) {
        alloc_free(rt);
        snprintf(msg, msglen, "out of memory");
        return SLUICE_ENOMEM;
    }
    snprintf(rt->channel, sizeof rt->channel, "%s", rtask_wake_channel(probe));
    rtask_batch_free(probe);
    rt->s = s;
    if (u->kind == CONFIG_STORE_REDIS_CLUSTER && u->nseeds > 0) {
        memcpy(rt->subs, u->seeds, u->nseeds * sizeof(u->seeds[0]));
        rt->nsubs = u->nseeds;
    } else {
        snprintf(rt->subs[0].host, sizeof rt->subs[0].host, "%s", u->host);
        rt->subs[0].port = u->port;
        rt->nsubs = 1;
    }
    rt->sub_timeout_ms = timeout_ms;
    rt->sub_user = u->user;
    rt->sub_password = u->password;
    rc = sub_connect(rt);
    if (rc != 0) {
        snprintf(msg, msglen, "the wake subscriber: %s", sluice_strerror(rc));
        alloc_free(rt);
        return rc;
    }
    uv_timer_init(&s->loop, &rt->timer);
    rt->timer.data = rt;
    uv_timer_init(&s->loop, &rt->rotate);
    rt->rotate.data = rt;
    rt->has_rotate = 1;
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
    if (rt->has_rotate) {
        uv_timer_stop(&rt->rotate);
        uv_close((uv_handle_t *)&rt->rotate, NULL);
    }
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
    for (int lane = 0; lane < RSTORE_LANES_MAX; lane++)
        batch_free(rt->cur[lane]);
    while ((b = rt->spare) != NULL) {
        rt->spare = b->next;
        batch_free(b);
    }
    while ((w = rt->whead) != NULL) {
        rtasks_waiter_unlink(rt, w);
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
    if (rt->pg) /* the store's connection that LISTENs is the subscriber */
        out->subscriber_up = rstore_listening(s);
}
