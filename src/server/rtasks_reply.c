/* SPDX-License-Identifier: MIT */
/*
 * The shared task queue's answers (rtasks.h): Redis's answer to a task batch is valid only
 * during its callback, and the batch may not be at the head of rstore's FIFO then, so
 * rtasks_decode copies what the replies need (each request's result, the delivered tasks'
 * bytes, the script's messages) into the batch's arena; rtasks_apply writes the replies, with
 * cmd_task.c's words, when the FIFO reaches the batch, and hands a blocked TASK.GET its tasks,
 * its empty answer, or another wait (the store time of the next wake arms the timer).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "base/alloc.h"
#include "base/grow.h"
#include "server/commands.h"
#include "server/log.h"
#include "server/rcounters.h"
#include "server/rtasks_impl.h"
#include "sluice/error.h"

/* Copies task k of request w (a claim's delivery, or INFO's task) into the batch. Returns 0 or
 * -1 (a malformed reply, or out of memory). */
static int copy_task(tbatch *b, const rstore_answer *a, const twait *w, size_t k)
{
    ttask *t;

    if (grow_array(&b->tasks, &b->tcap, b->ntasks + 1, sizeof(*b->tasks), 16) != SLUICE_OK)
        return -1;
    t = &b->tasks[b->ntasks];
    memset(t, 0, sizeof(*t));
    if (rtasks_task(b, a, (size_t)w->req, k, &t->t) != 0)
        return -1;
    t->type_off = rtasks_arena_put(b, t->t.type, t->t.typelen);
    t->payload_off = rtasks_arena_put(b, t->t.payload, t->t.payload_len);
    t->task_key_off = t->t.task_key ? rtasks_arena_put(b, t->t.task_key, t->t.task_key_len) : 0;
    t->fail_message_off =
        t->t.fail_message ? rtasks_arena_put(b, t->t.fail_message, t->t.fail_message_len) : 0;
    if (t->type_off == SIZE_MAX || t->payload_off == SIZE_MAX || t->task_key_off == SIZE_MAX ||
        t->fail_message_off == SIZE_MAX)
        return -1;
    b->ntasks++;
    return 0;
}

/* Decodes the answer while Redis's reply is valid (rstore_call.on_reply). */
void rtasks_decode(rstore_call *call, const rstore_answer *a)
{
    tbatch *b = (tbatch *)(void *)call;

    for (size_t i = 0; i < b->n; i++) {
        twait *w = &b->w[i];
        size_t ntasks = 0;

        if (rtasks_result(b, a, (size_t)w->req, &w->res) != 0)
            goto bad;
        w->msg_off =
            rtasks_arena_put(b, w->res.msg ? w->res.msg : "", w->res.msg ? w->res.msglen : 0);
        if (w->msg_off == SIZE_MAX)
            goto bad;
        w->res.msg = NULL;
        w->task0 = b->ntasks;
        if (w->res.rc == 0 && w->op == RTASK_CLAIM)
            ntasks = w->res.ndelivered;
        else if (w->res.rc == 0 && w->op == RTASK_INFO)
            ntasks = 1;
        for (size_t k = 0; k < ntasks; k++)
            if (copy_task(b, a, w, k) != 0)
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
    resp_field_int(w, "id", 1, (int64_t)t->id);
    field_bytes(w, "state", sluice_task_state_name(t->state),
                strlen(sluice_task_state_name(t->state)));
    field_bytes(w, "type", t->type, t->typelen);
    field_bytes(w, "payload", t->payload, t->payload_len);
    field_bytes(w, "task_key", t->task_key, t->task_key_len);
    resp_field_int(w, "priority", 1, t->priority);
    resp_field_int(w, "units", 1, t->units ? t->units : 1);
    resp_field_int(w, "attempt", 1, t->attempt);
    resp_field_int(w, "submitted_ms", 1, command_time_ms(t->submitted_ns));
    resp_field_int(w, "not_before_ms", 1,
                   command_time_ms(t->not_before_ns ? t->not_before_ns : t->submitted_ns));
    resp_field_int(w, "lease_until_ms", t->state == SLUICE_TASK_RUNNING,
                   command_time_ms(t->lease_until_ns));
    field_bytes(w, "fail_reason", reason, reason ? strlen(reason) : 0);
    field_bytes(w, "fail_message", failed ? t->fail_message : NULL, t->fail_message_len);
    for (size_t i = 0; i < sizeof(none) / sizeof(none[0]); i++)
        resp_field_int(w, none[i], 0, 0);
}

/* The reply of a write Redis's primary did but fewer replicas than --store-replicas confirmed
 * within the timeout: never a plain success, since a failover may lose it. */
static void reply_not_replicated(rtasks *rt, tbatch *b, const twait *w)
{
    static const char *const names[] = {[RTASK_ADD] = "TASK.ADD",
                                        [RTASK_ACK] = "TASK.ACK",
                                        [RTASK_FAIL] = "TASK.FAIL",
                                        [RTASK_CANCEL] = "TASK.CANCEL"};
    char seen[64];
    int64_t ms = 0;
    uint64_t id = w->op == RTASK_ADD ? w->res.id : w->id;

    rstore_replicas(rt->s, &ms);
    rt->stats.under_replicated++;
    rt->wake = 1; /* the primary has the change: waiters here may find work */
    if (b->base.acked < 0)
        snprintf(seen, sizeof seen, "WAIT was not answered");
    else
        snprintf(seen, sizeof seen, "only %" PRId64 " of %d replicas confirmed it", b->base.acked,
                 b->base.wait_replicas);
    resp_error(conn_out(w->c), "NOTREPLICATED",
               "%s of task %" PRIu64 " reached the primary but %s within %" PRId64
               " ms: it may or may not survive a failover",
               names[w->op], id, seen, ms);
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
    if (r->rc == SLUICE_EBUSY && w->op == RTASK_ADD) {
        /* The single node's words (engine.c's submit). */
        if (r->busy_parked)
            resp_error(conn_out(c), "BUSY",
                       "too many parked tasks (max_parked %" PRIu64
                       "): this task would wait for budget",
                       rt->max_parked);
        else
            resp_error(conn_out(c), "BUSY", "too many tasks (max_tasks %" PRIu64 ")",
                       rt->max_tasks);
        return;
    }
    if (r->rc == SLUICE_ESTALE && w->op == RTASK_ADD) {
        /* gate_group_resolve's words */
        resp_error(conn_out(c), "NOLEASE",
                   "the lease on limit \"%s\" is gone (it expired or was released)",
                   w->has_group ? b->arena + w->group_off : "");
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
    if (rtasks_op_waits(w->op) && b->base.wait_replicas > 0 &&
        b->base.acked < b->base.wait_replicas) {
        reply_not_replicated(rt, b, w);
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

        rtasks_waiter_unlink(rt, wt);
        reply_deliveries(rt, b, c, w->task0, n);
        conn_unblock(c);
        alloc_free(wt);
        return;
    }
    if (!b->base.why[0] && r->rc == 0) {
        if (r->more)
            rt->wake = 1;
        else if (r->next_wake_ns > 0)
            rtasks_arm_timer(rt,
                             r->next_wake_ns <= r->now_ns
                                 ? 0
                                 : (uint64_t)((r->next_wake_ns - r->now_ns + SLUICE_NS_PER_MS - 1) /
                                              SLUICE_NS_PER_MS));
    }
    if (wt->expired) {
        rtasks_waiter_reply_empty(rt, wt);
        return;
    }
    rtasks_arm_timer(rt, RTASKS_POLL_MS);
}

/* Counts what one answered request did in the store, whether or not its client is still there
 * (rcounters.h: counters summed across nodes). A task's type is known here only for deliveries;
 * the other events count in the all-types counters. */
static void count_result(rtasks *rt, const tbatch *b, const twait *w)
{
    const rtask_result *r = &w->res;

    if (b->base.why[0] || r->rc != 0)
        return;
    switch (w->op) {
    case RTASK_ADD:
        if (!r->replaced)
            rcounters_task(rt->s, RCTR_TASK_SUBMITTED, NULL, 0, 1);
        break;
    case RTASK_ACK:
        rcounters_task(rt->s, RCTR_TASK_DONE, NULL, 0, 1);
        break;
    case RTASK_FAIL:
        rcounters_task(rt->s, r->state == SLUICE_TASK_FAILED ? RCTR_TASK_FAILED : RCTR_TASK_RETRIED,
                       NULL, 0, 1);
        break;
    case RTASK_CANCEL:
        if (r->cancelled)
            rcounters_task(rt->s, RCTR_TASK_CANCELLED, NULL, 0, 1);
        break;
    case RTASK_CLAIM:
        rcounters_task(rt->s, RCTR_TASK_FAILED, NULL, 0, r->nfailed);
        for (size_t k = 0; k < r->ndelivered; k++) {
            const ttask *t = &b->tasks[w->task0 + k];

            rcounters_task(rt->s, RCTR_TASK_DELIVERED, b->arena + t->type_off, t->t.typelen, 1);
        }
        break;
    default:
        break;
    }
}

/* Writes a batch's answers to its clients in request order (rstore_call.apply). */
void rtasks_apply(rstore_call *call)
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

        count_result(rt, b, w);
        if (w->fn) {
            rtask_task t;
            int has = !b->base.why[0] && w->res.rc == 0;

            if (has)
                task_view(b, &b->tasks[w->task0], &t);
            w->fn(w->fn_arg, has ? &t : NULL, b->base.why[0] ? NULL : &w->res,
                  b->base.why[0] ? b->base.why : NULL);
            continue;
        }
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
    rtasks_batch_recycle(rt, b);
}
