/* SPDX-License-Identifier: MIT */
/*
 * Recurring series shared on Redis or PostgreSQL, the node's side (rrecur.h): the client
 * commands' calls and the firing loop.
 *
 * A call (rcall) is one call of the store (Redis's script: rrecur_batch; PostgreSQL's series
 * function: pgr_batch; the same requests and answers) embedded in rstore's FIFO (rstore_call
 * first). A client command's call carries its one request and its client's deferred slot; the
 * store's answer is decoded while valid (on_reply: the result, INFO's counters) and written when
 * the FIFO reaches the call (apply). The firing loop owns one call, reused: FIREs for the series
 * the previous LIST found due, then a LIST; its decode copies the due series out of the answer
 * (they are fired by the next round, which a 0 ms timer starts: nothing is sent from inside the
 * FIFO's apply).
 *
 * Invariants:
 * - the loop's call is in flight (in_flight) or idle; its due list is read and emptied only
 *   when it is idle;
 * - a client call is in `calls` from its send to its apply; c == NULL once its client closed.
 */
#include "server/rrecur.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <uv.h>

#include "base/alloc.h"
#include "base/grow.h"
#include "server/commands.h"
#include "server/counters.h"
#include "server/log.h"
#include "server/rstore.h"
#include "server/rtag.h"
#include "server/rtasks.h"
#include "sluice/error.h"
#include "store/pg_recur.h"
#include "store/redis_recur.h"
#include "store/redis_tasks.h"

/* Links of an occurrence resolved on the stack; longer chains are allocated. */
#define LINKS_STACK 16

typedef struct rrecur rrecur;

/* A due series copied out of a LIST answer. One allocation: the strings follow the struct. */
typedef struct due {
    sluice_recurring_spec spec; /* name, type, payload, key, schedule: pointers behind */
    uint64_t version;
    int64_t next_ns; /* as stored: the FIRE's expected value */
} due;

typedef struct rcall {
    rstore_call base; /* first: rstore's FIFO holds it */
    rrecur *rr;
    rrecur_batch *rb;          /* the encoded requests: Redis */
    pgr_batch *pb;             /* or PostgreSQL */
    int loop;                  /* the firing loop's call (else a client's) */
    conn *c;                   /* a client call's client; NULL once it closed */
    size_t ticket;             /* its deferred slot */
    rrecur_op op;              /* a client call's op */
    rrecur_result res;         /* a client call's answer (res.msg: NULL, see msg) */
    char msg[256];             /* the script's refusal */
    int64_t info_next;         /* INFO: the next occurrence (a point), SLUICE_NEVER when over */
    size_t nfire;              /* the loop: FIRE requests before its LIST */
    int64_t delay_ms;          /* the loop: when to look again, from its LIST (0: at once) */
    struct rcall *prev, *next; /* client calls in flight */
} rcall;

struct rrecur {
    server *s;
    int pg;              /* the store is PostgreSQL: pgr_batch */
    rcall *loopcall;     /* the firing loop's call */
    int in_flight;       /* the loop's call is out */
    due **due;           /* the series the last LIST found due, to fire next round */
    size_t ndue, capdue; /* entries, room */
    int64_t due_now;     /* that LIST's store time */
    uv_timer_t timer;    /* the next round */
    uint64_t timer_due;  /* uv_now when it fires; 0 when not armed */
    rcall *calls;        /* client calls in flight */
    int closed;
    rrecur_stats stats;
};

static rrecur *state_of(const server *s)
{
    return s->rrecur_state;
}

/* ---- Calls ------------------------------------------------------------------------------- */

static void call_free(rcall *k)
{
    if (!k)
        return;
    rrecur_batch_free(k->rb);
    pgr_batch_free(k->pb);
    alloc_free(k);
}

static rcall *call_new(rrecur *rr)
{
    rcall *k = alloc_calloc(1, sizeof(*k));

    if (!k)
        return NULL;
    k->rr = rr;
    if ((rr->pg ? pgr_batch_new(&k->pb) : rrecur_batch_new(NULL, &k->rb)) != SLUICE_OK) {
        alloc_free(k);
        return NULL;
    }
    return k;
}

/* The batch of k, whichever encoder it has: its requests, and the answers from whichever store
 * answered. */
static void batch_reset(rcall *k)
{
    if (k->pb)
        pgr_batch_reset(k->pb);
    else
        rrecur_batch_reset(k->rb);
}

static size_t batch_count(const rcall *k)
{
    return k->pb ? pgr_batch_count(k->pb) : rrecur_batch_count(k->rb);
}

static int batch_add_fire(rcall *k, const rrecur_fire *f)
{
    return k->pb ? pgr_batch_add_fire(k->pb, f) : rrecur_batch_add_fire(k->rb, f);
}

static int batch_result(const rcall *k, const rstore_answer *a, size_t i, rrecur_result *res)
{
    return k->pb ? pgr_batch_result(k->pb, a->pg, i, res)
                 : rrecur_batch_result(k->rb, a->redis, i, res);
}

static int batch_series(const rcall *k, const rstore_answer *a, size_t i, size_t j,
                        rrecur_series *out)
{
    return k->pb ? pgr_batch_series(k->pb, a->pg, i, j, out)
                 : rrecur_batch_series(k->rb, a->redis, i, j, out);
}

static void dues_clear(rrecur *rr)
{
    for (size_t i = 0; i < rr->ndue; i++)
        alloc_free(rr->due[i]);
    rr->ndue = 0;
}

/* Copies a listed series; NULL when out of memory. */
static due *due_copy(const rrecur_series *x)
{
    size_t len =
        sizeof(due) + x->namelen + x->typelen + x->payload_len + x->key_len + x->cronlen + 5;
    due *d = alloc_calloc(1, len);
    char *p;

    if (!d)
        return NULL;
    p = (char *)(d + 1);
#define DUE_STR(field, src, n)                                                                     \
    do {                                                                                           \
        memcpy(p, (src), (n));                                                                     \
        p[n] = '\0';                                                                               \
        field = p;                                                                                 \
        p += (n) + 1;                                                                              \
    } while (0)
    DUE_STR(d->spec.name, x->name, x->namelen);
    DUE_STR(d->spec.type, x->type, x->typelen);
    DUE_STR(d->spec.payload, x->payload, x->payload_len);
    d->spec.payload_len = x->payload_len;
    if (x->key) {
        DUE_STR(d->spec.key, x->key, x->key_len);
        d->spec.key_len = x->key_len;
    }
    if (x->cronlen)
        DUE_STR(d->spec.cron, x->cron, x->cronlen);
#undef DUE_STR
    d->spec.interval_ns = x->interval_ns;
    d->spec.start_ns = x->start_ns;
    d->spec.end_ns = x->end_ns;
    d->spec.max_runs = x->max_runs;
    d->version = x->version;
    d->next_ns = x->next_ns;
    return d;
}

/* ---- The firing loop --------------------------------------------------------------------- */

static void on_timer(uv_timer_t *t);

/* Arms the next round for delay_ms from now, unless it comes sooner already. */
static void arm(rrecur *rr, uint64_t delay_ms)
{
    uint64_t due_at = uv_now(&rr->s->loop) + delay_ms;

    if (rr->closed || (rr->timer_due != 0 && rr->timer_due <= due_at))
        return;
    rr->timer_due = due_at;
    uv_timer_start(&rr->timer, on_timer, delay_ms, 0);
}

/* The occurrence of d as tasks.lua's ADD takes it, resolved as TASK.ADD resolves a task, and
 * encoded into the loop's batch as the FIRE f. Returns the request's index, or < 0: the
 * template does not resolve any more (the caller fires without a task, counting it skipped) or
 * memory ran out. */
static int add_fire_with_task(rrecur *rr, rrecur_fire *f, const due *d)
{
    server *s = rr->s;
    sluice_charge stack[LINKS_STACK], *ch = stack;
    rtask_link lstack[LINKS_STACK], *links = lstack;
    char(*ids)[RTASKS_LIMIT_ID_BUF] = NULL, idstack[LINKS_STACK][RTASKS_LIMIT_ID_BUF];
    sluice_task_spec ts;
    sluice_submit_error err;
    sluice_task_plan plan;
    rtask_add a;
    int n, rc;

    memset(&ts, 0, sizeof(ts));
    ts.type = d->spec.type;
    ts.payload = d->spec.payload;
    ts.payload_len = d->spec.payload_len;
    ts.key = d->spec.key;
    ts.key_len = d->spec.key_len;
    n = sluice_engine_resolve_task(s->engine, &ts, server_now(s), &plan, ch, LINKS_STACK, &err);
    if (n > LINKS_STACK) {
        ch = alloc_calloc((size_t)n, sizeof(*ch));
        links = alloc_calloc((size_t)n, sizeof(*links));
        ids = alloc_calloc((size_t)n, sizeof(*ids));
        if (!ch || !links || !ids) {
            rc = SLUICE_ENOMEM;
            goto done;
        }
        n = sluice_engine_resolve_task(s->engine, &ts, server_now(s), &plan, ch, (size_t)n, &err);
    } else {
        ids = idstack;
    }
    if (n < 0) {
        rc = n;
        goto done;
    }
    rtasks_links_of(s->engine, ch, (size_t)n, ids, rr->pg ? NULL : RTAG_QUEUE, links);
    memset(&a, 0, sizeof(a));
    a.type = ts.type;
    a.typelen = strlen(ts.type);
    a.payload = ts.payload;
    a.payload_len = ts.payload_len;
    a.links = links;
    a.nlinks = (size_t)n;
    a.units = plan.units;
    a.priority = plan.priority;
    a.lease_ns = plan.lease_ns;
    a.charge_redelivery = plan.charge_redelivery;
    a.retry = plan.retry;
    rtasks_fair_of(&plan, ch, &a);
    f->task = &a;
    rc = batch_add_fire(rr->loopcall, f);
    f->task = NULL;
done:
    if (ch != stack) {
        alloc_free(ch);
        alloc_free(links);
        alloc_free(ids);
    }
    return rc;
}

/* Adds the FIRE of due series d at store time now. */
static void add_fire(rrecur *rr, const due *d, int64_t now)
{
    rrecur_fire f;
    int64_t p = sluice_recurring_first(&d->spec, d->next_ns);

    memset(&f, 0, sizeof(f));
    f.name = d->spec.name;
    f.namelen = strlen(d->spec.name);
    f.version = d->version;
    f.expected_ns = d->next_ns;
    if (p == SLUICE_NEVER || p > now) {
        /* No point left, or the first one lies ahead: only next moves (to be fired then). */
        f.next_ns = p;
    } else {
        f.next_ns = sluice_recurring_catch_up(&d->spec, p, now, &f.missed);
        if (add_fire_with_task(rr, &f, d) >= 0)
            return;
        /* The template no longer makes a task (its type went away...): the point is skipped,
         * as the engine's tick skips an occurrence it cannot submit. */
        f.missed++;
    }
    if (batch_add_fire(rr->loopcall, &f) < 0)
        log_warn("recurring series %s: out of memory firing it; retried next round", d->spec.name);
}

static void loop_decode(rstore_call *call, const rstore_answer *a)
{
    rcall *k = (rcall *)(void *)call;
    rrecur *rr = k->rr;
    rrecur_result res;
    rrecur_series x;

    for (size_t i = 0; i < k->nfire; i++) {
        if (batch_result(k, a, i, &res) != SLUICE_OK)
            goto bad;
        if (res.rc == SLUICE_ESTALE)
            rr->stats.stale++;
        else if (res.rc == 0 && res.fired)
            rr->stats.fired++;
    }
    if (batch_result(k, a, k->nfire, &res) != SLUICE_OK || res.rc != 0)
        goto bad;
    dues_clear(rr);
    if (grow_array(&rr->due, &rr->capdue, res.nseries, sizeof(*rr->due), 16) != SLUICE_OK)
        goto nomem;
    for (size_t j = 0; j < res.nseries; j++) {
        if (batch_series(k, a, k->nfire, j, &x) != SLUICE_OK)
            goto bad;
        rr->due[rr->ndue] = due_copy(&x);
        if (!rr->due[rr->ndue])
            goto nomem;
        rr->ndue++;
    }
    rr->due_now = res.now_ns;
    /* When to look again: at once for what was found (or left behind by the bound), else at
     * the earliest next, at most RRECUR_POLL_MS ahead (series added elsewhere). Stored in the
     * call, armed by apply. */
    if (rr->ndue > 0 || res.more)
        k->delay_ms = 0;
    else if (res.earliest_ns > 0 && res.earliest_ns > res.now_ns)
        k->delay_ms = (res.earliest_ns - res.now_ns + SLUICE_NS_PER_MS - 1) / SLUICE_NS_PER_MS;
    else
        k->delay_ms = res.earliest_ns > 0 ? 1 : RRECUR_POLL_MS;
    return;
bad:
    log_error("store: a recurring-series answer the store's script or function does not give");
    rstore_call_fail(call, "a malformed answer from the store");
    return;
nomem:
    dues_clear(rr);
    rstore_call_fail(call, "out of memory");
}

static void loop_apply(rstore_call *call)
{
    rcall *k = (rcall *)(void *)call;
    rrecur *rr = k->rr;

    rr->in_flight = 0;
    batch_reset(k);
    if (k->base.why[0]) {
        rr->stats.failures++;
        dues_clear(rr);
        arm(rr, RRECUR_POLL_MS);
        return;
    }
    arm(rr, k->delay_ms < RRECUR_POLL_MS ? (uint64_t)k->delay_ms : RRECUR_POLL_MS);
}

/* Points k's call at its batch's command when rc (how the requests were added) is not an error;
 * else at no command. Returns rc or the command's error. */
static int call_command(rrecur *rr, rcall *k, int rc)
{
    int argc = 0;
    const char **argv = NULL;
    const size_t *argvlen = NULL;

    if (k->pb) {
        const char *const *values = NULL;

        if (rc >= 0)
            rc = pgr_batch_params(k->pb, &values);
        rstore_call_pg(&k->base, RRECUR_PG_STMT, PGR_CALL_NPARAMS, values);
    } else if (rc >= 0) {
        rc = rrecur_batch_command(k->rb, rstore_sha(rr->s), &argc, &argv, &argvlen);
    }
    k->base.call.argc = argc;
    k->base.call.argv = argv;
    k->base.call.argvlen = argvlen;
    k->base.slot = rstore_queue_slot(rr->s); /* Redis Cluster: the series live with the queue */
    return rc;
}

/* One round: the FIREs of the series found due, then a LIST. */
static void round_send(rrecur *rr)
{
    rcall *k = rr->loopcall;
    int rc;

    if (!rstore_up(rr->s, NULL)) {
        dues_clear(rr);
        arm(rr, RRECUR_POLL_MS);
        return;
    }
    batch_reset(k);
    for (size_t i = 0; i < rr->ndue; i++)
        add_fire(rr, rr->due[i], rr->due_now);
    dues_clear(rr);
    k->nfire = batch_count(k);
    rc = k->pb ? pgr_batch_add_list(k->pb, RRECUR_LIST_MAX)
               : rrecur_batch_add_list(k->rb, RRECUR_LIST_MAX);
    rr->stats.lists++;
    rc = call_command(rr, k, rc);
    k->base.on_reply = loop_decode;
    k->base.apply = loop_apply;
    k->base.wait_replicas = 0;
    rr->in_flight = 1;
    rstore_send(rr->s, &k->base, rc < 0 ? rc : 0); /* may apply at once (a failure) */
}

static void on_timer(uv_timer_t *t)
{
    rrecur *rr = t->data;

    rr->timer_due = 0;
    if (rr->closed || rr->in_flight || rr->s->stopping)
        return; /* the call in flight arms the next round when it is applied */
    round_send(rr);
}

/* ---- Client commands --------------------------------------------------------------------- */

static void client_decode(rstore_call *call, const rstore_answer *a)
{
    rcall *k = (rcall *)(void *)call;
    rrecur_series x;

    if (batch_result(k, a, 0, &k->res) != SLUICE_OK)
        goto bad;
    if (k->res.msg) {
        snprintf(k->msg, sizeof k->msg, "%.*s", (int)k->res.msglen, k->res.msg);
        k->res.msg = NULL;
    }
    if (k->op == RRECUR_INFO && k->res.rc == 0) {
        /* The stored next may be the time from which the first point is to be found. */
        char cron[256];

        if (batch_series(k, a, 0, 0, &x) != SLUICE_OK || x.cronlen >= sizeof cron)
            goto bad;
        k->res.runs = x.runs;
        k->res.skipped = x.skipped;
        k->info_next = SLUICE_NEVER;
        if (x.next_ns != SLUICE_NEVER) {
            sluice_recurring_spec spec;

            memset(&spec, 0, sizeof(spec));
            memcpy(cron, x.cron, x.cronlen);
            cron[x.cronlen] = '\0';
            spec.interval_ns = x.interval_ns;
            spec.cron = x.cronlen ? cron : NULL;
            spec.start_ns = x.start_ns;
            spec.end_ns = x.end_ns;
            k->info_next = sluice_recurring_first(&spec, x.next_ns);
        }
    }
    return;
bad:
    log_error("store: a recurring-series answer the store's script or function does not give");
    rstore_call_fail(call, "a malformed answer from the store");
}

static void client_reply(rcall *k)
{
    conn *c = k->c;
    resp_writer *w = conn_out(c);

    if (k->base.why[0]) {
        resp_error(w, "STOREDOWN",
                   "the shared store is unavailable (%s); it may or may not have been done",
                   k->base.why);
        return;
    }
    if (k->res.rc == SLUICE_EINVAL) {
        reply_engine_error(c, SLUICE_EINVAL, k->msg);
        return;
    }
    if (k->base.wait_replicas > 0 && k->base.acked < k->base.wait_replicas) {
        /* Never a plain success: a failover may lose the change (as rtasks_reply.c's). */
        int64_t ms = 0;
        char seen[64];

        rstore_replicas(k->rr->s, &ms);
        if (k->base.acked < 0)
            snprintf(seen, sizeof seen, "WAIT was not answered");
        else
            snprintf(seen, sizeof seen, "only %" PRId64 " of %d replicas confirmed it",
                     k->base.acked, k->base.wait_replicas);
        resp_error(w, "NOTREPLICATED",
                   "%s reached the primary but %s within %" PRId64
                   " ms: it may or may not survive a failover",
                   k->op == RRECUR_SET ? "RECUR.ADD" : "RECUR.DEL", seen, ms);
        return;
    }
    switch (k->op) {
    case RRECUR_SET:
        resp_simple(w, "OK");
        break;
    case RRECUR_DEL:
        resp_int(w, k->res.deleted);
        break;
    case RRECUR_INFO:
        if (k->res.rc == SLUICE_ENOTFOUND) {
            resp_error(w, "NOTASK", "no recurring series of that name");
            break;
        }
        resp_map(w, 3);
        resp_bulk_str(w, "runs");
        resp_int(w, k->res.runs);
        resp_bulk_str(w, "skipped");
        resp_int(w, k->res.skipped);
        resp_bulk_str(w, "next_ms");
        resp_int(w, command_time_ms(k->info_next));
        break;
    default:
        resp_error(w, "ERR", "unexpected recurring-series request");
        break;
    }
}

static void client_apply(rstore_call *call)
{
    rcall *k = (rcall *)(void *)call;
    rrecur *rr = k->rr;

    if (k->prev)
        k->prev->next = k->next;
    else
        rr->calls = k->next;
    if (k->next)
        k->next->prev = k->prev;
    if (k->c) {
        size_t mark = conn_out(k->c)->len;

        client_reply(k);
        if (!conn_out(k->c)->failed && conn_out(k->c)->len > mark)
            counters_reply(&rr->s->counters, conn_out(k->c)->buf + mark,
                           conn_out(k->c)->len - mark);
        conn_defer_fill(k->c, k->ticket, mark);
    }
    /* A series added here: the loop looks at once (its first point may be now). */
    if (k->op == RRECUR_SET && !k->base.why[0] && k->res.rc == 0)
        arm(rr, 0);
    call_free(k);
}

/* Sends client call k whose request was added with rc (< 0: refused, replied here). */
static void client_send(rrecur *rr, conn *c, rcall *k, int rc)
{
    if (rc < 0) {
        if (rc == SLUICE_ENOMEM)
            resp_error(conn_out(c), "NOMEM", "out of memory");
        else
            reply_engine_error(c, rc, "the shared store cannot take this request");
        call_free(k);
        return;
    }
    /* The turn's limits or task batch (only one of them is open) goes first: the FIFO is the
     * order the client's commands were taken. */
    rstore_flush_limits(rr->s);
    rtasks_flush(rr->s);
    rc = call_command(rr, k, rc);
    k->base.on_reply = client_decode;
    k->base.apply = client_apply;
    /* A change of the series waits for the replicas (--store-replicas) as a task write does. */
    k->base.wait_replicas = k->op == RRECUR_INFO ? 0 : rstore_replicas(rr->s, NULL);
    k->c = c;
    k->base.lane = rstore_lane(rr->s, c, 0); /* before its slot: rstore_pg.h, routing */
    k->ticket = conn_defer(c);
    k->prev = NULL;
    k->next = rr->calls;
    if (rr->calls)
        rr->calls->prev = k;
    rr->calls = k;
    rstore_send(rr->s, &k->base, rc);
}

/* A client call for op, or NULL after replying (store down, out of memory). */
static rcall *client_call(conn *c, rrecur_op op)
{
    rrecur *rr = state_of(c->srv);
    const char *why = NULL;
    rcall *k;

    if (!rr || !rstore_up(c->srv, &why)) {
        resp_error(conn_out(c), "STOREDOWN",
                   "the shared store is unavailable (%s); nothing was done",
                   why ? why : "not connected");
        return NULL;
    }
    k = call_new(rr);
    if (!k) {
        resp_error(conn_out(c), "NOMEM", "out of memory");
        return NULL;
    }
    k->op = op;
    return k;
}

void rrecur_add(conn *c, const sluice_recurring_spec *spec)
{
    server *s = c->srv;
    sluice_charge ch[LINKS_STACK];
    sluice_task_spec ts;
    sluice_submit_error err;
    sluice_task_plan plan;
    char msg[256];
    rcall *k;
    int rc;

    rc = sluice_recurring_check(spec, msg, sizeof msg);
    if (rc != SLUICE_OK) {
        reply_engine_error(c, rc, msg);
        return;
    }
    /* The template must make a valid task: same checks as a submit, nothing created. */
    memset(&ts, 0, sizeof(ts));
    ts.type = spec->type;
    ts.payload = spec->payload;
    ts.payload_len = spec->payload_len;
    ts.key = spec->key;
    ts.key_len = spec->key_len;
    memset(&err, 0, sizeof(err));
    rc = sluice_engine_resolve_task(s->engine, &ts, server_now(s), &plan, ch, LINKS_STACK, &err);
    if (rc < 0) {
        reply_engine_error(c, rc, err.message);
        return;
    }
    k = client_call(c, RRECUR_SET);
    if (!k)
        return;
    /* The warning a single node gives a series faster than its limits, from the node that
     * took it (once, as there). */
    sluice_engine_check_recurring_pace(s->engine, spec, server_now(s));
    client_send(state_of(s), c, k,
                k->pb ? pgr_batch_add_set(k->pb, spec) : rrecur_batch_add_set(k->rb, spec));
}

void rrecur_del(conn *c, const char *name)
{
    rcall *k = client_call(c, RRECUR_DEL);

    if (k)
        client_send(state_of(c->srv), c, k,
                    k->pb ? pgr_batch_add_del(k->pb, name, strlen(name))
                          : rrecur_batch_add_del(k->rb, name, strlen(name)));
}

void rrecur_info(conn *c, const char *name)
{
    rcall *k = client_call(c, RRECUR_INFO);

    if (k)
        client_send(state_of(c->srv), c, k,
                    k->pb ? pgr_batch_add_info(k->pb, name, strlen(name))
                          : rrecur_batch_add_info(k->rb, name, strlen(name)));
}

void rrecur_conn_closed(conn *c)
{
    rrecur *rr = state_of(c->srv);

    if (!rr)
        return;
    for (rcall *k = rr->calls; k; k = k->next)
        if (k->c == c)
            k->c = NULL;
}

/* ---- Life -------------------------------------------------------------------------------- */

int rrecur_open(server *s)
{
    rrecur *rr = alloc_calloc(1, sizeof(*rr));

    if (!rr)
        return SLUICE_ENOMEM;
    rr->s = s;
    rr->pg = rstore_kind(s) == CONFIG_STORE_POSTGRES;
    rr->loopcall = call_new(rr);
    if (!rr->loopcall) {
        alloc_free(rr);
        return SLUICE_ENOMEM;
    }
    rr->loopcall->loop = 1;
    uv_timer_init(&s->loop, &rr->timer);
    rr->timer.data = rr;
    s->rrecur_state = rr;
    arm(rr, 0); /* the first round as soon as the loop runs */
    return SLUICE_OK;
}

void rrecur_close(server *s)
{
    rrecur *rr = state_of(s);

    if (!rr || rr->closed)
        return;
    rr->closed = 1;
    uv_timer_stop(&rr->timer);
    uv_close((uv_handle_t *)&rr->timer, NULL);
}

void rrecur_free(server *s)
{
    rrecur *rr = state_of(s);

    if (!rr)
        return;
    rrecur_close(s);
    /* rstore_close applied every call in flight: no client call is left. */
    dues_clear(rr);
    alloc_free(rr->due);
    call_free(rr->loopcall);
    alloc_free(rr);
    s->rrecur_state = NULL;
}

void rrecur_info_append(const server *s, char *buf, size_t len)
{
    rrecur_stats x;
    size_t at = strlen(buf);

    rrecur_get_stats(s, &x);
    if (at < len)
        snprintf(buf + at, len - at,
                 "store_recur_lists:%" PRIu64 "\r\nstore_recur_fired:%" PRIu64
                 "\r\nstore_recur_stale:%" PRIu64 "\r\nstore_recur_failures:%" PRIu64 "\r\n",
                 x.lists, x.fired, x.stale, x.failures);
}

void rrecur_get_stats(const server *s, rrecur_stats *out)
{
    const rrecur *rr = state_of(s);

    memset(out, 0, sizeof(*out));
    if (rr)
        *out = rr->stats;
}
