/* SPDX-License-Identifier: MIT */
/*
 * Dispatch: the calls that move tasks between states, i.e. poll (the gate runs here, so charges
 * happen when a task actually starts), ack, fail, cancel, touch and tick.
 *
 * poll takes the most urgent ready task among the requested types and gates it: granted tasks
 * are delivered, denied ones parked or failed on the spot, and poll goes on with the next task
 * until `max` were delivered or nothing is ready. No worker waits and no key blocks another.
 *
 * Every step reserves what it may need before it changes anything, so SLUICE_ENOMEM leaves the
 * task where it was and nothing charged (a task just removed from a heap goes back into the slot
 * it left, which never allocates).
 *
 * Every change of a task's durable record (state, attempt, lease, backoff, grant) is reported
 * with engine_changed() once it is made; moves between QUEUED and PARKED are not (see persist.c).
 */
#include <limits.h>
#include <string.h>

#include "base/alloc.h"
#include "base/sat.h"
#include "engine/engine_impl.h"
#include "engine/gate.h"
#include "engine/park.h"
#include "engine/ready.h"
#include "engine/recurring.h"
#include "engine/registry.h"
#include "engine/task.h"
#include "sluice/engine.h"
#include "sluice/error.h"

/* Idle keys forgotten per limit per tick. */
#define SWEEP_BUDGET 64
/* Limits a tick sweeps, round-robin: a tick costs the same with 200,000 limits as with 256. */
#define SWEEP_LIMITS 256

/* What became of a task a poll looked at. */
typedef enum poll_outcome {
    POLL_DELIVERED = 1,
    POLL_PARKED,
    POLL_FINISHED,
} poll_outcome;

static void emit_for(sluice_engine *e, sluice_event_kind kind, const task *t, uint16_t link,
                     int64_t next_slot_ns, int64_t now)
{
    sluice_event ev;

    memset(&ev, 0, sizeof ev);
    ev.kind = kind;
    ev.at_ns = now;
    ev.type = t->type->pol.name;
    ev.count = 1;
    ev.next_slot_ns = next_slot_ns;
    if (link != LINK_NONE) {
        ev.limit = t->links[link].lim->pol.name;
        ev.key = t->links[link].key;
    }
    engine_emit(e, &ev, now);
}

/* Fails t (QUEUED, in no heap) for a limit; an occurrence that never started is skipped. */
static void fail_by_limit(sluice_engine *e, task *t, sluice_fail_reason reason, uint16_t link,
                          int64_t retry_after_ns, int64_t now)
{
    if (recurring_pending(t)) {
        /* The next occurrence would meet the same refusal before the limiter's slot. */
        if (retry_after_ns > 0 && reason != SLUICE_FAIL_SKIPPED)
            recurring_skip_ahead(e, t, sat_add_i64(now, retry_after_ns));
        reason = SLUICE_FAIL_SKIPPED;
        recurring_dropped(e, t, 1);
    }
    engine_finish(e, t, SLUICE_TASK_FAILED, reason, link, retry_after_ns, now);
    emit_for(e, SLUICE_EVENT_REJECTED, t, link, 0, now);
}

/* t was just parked: the tasks behind it on its queue now start later by its units. Fails,
 * last in line first, those whose start this pushed past the horizon (as if they were placed in
 * line now, which they are). The estimate grows with the units ahead, so the failed ones are the
 * tail of the queue and the walk stops at the first that still fits: the common case (t is last)
 * costs one pass over the queue. */
static void fail_pushed_back(sluice_engine *e, const task *t, int64_t now)
{
    waitq *q = t->wq;

    for (;;) {
        task *o = park_last(q);
        uint16_t link;
        int64_t eta;

        if (!o || o == t || !park_beyond_horizon(q, o, o->park_link, now))
            return;
        link = o->park_link;
        eta = park_eta(q, o, link, now);
        park_remove(e, o); /* never empties q: t stays */
        fail_by_limit(e, o, SLUICE_FAIL_HORIZON, link, sat_sub_i64(eta, now), now);
    }
}

/* t, a pending occurrence of a series, was just parked: the series' next occurrence moves to
 * the limiter's next slot behind every task on t's queue (t included) instead of being made at
 * each point only to park in turn (seed 003). */
static void skip_series_ahead(sluice_engine *e, const task *t, int64_t now)
{
    if (recurring_pending(t))
        recurring_skip_ahead(e, t, park_next_slot(t->wq, t->links[t->park_link].units, now));
}

/* Hands t out at now; charged says whether its grant charged the whole chain (see
 * sluice_delivery.charged). */
static void deliver(sluice_engine *e, task *t, int64_t now, int charged, sluice_delivery *out)
{
    if (recurring_pending(t))
        recurring_started(e, t);
    t->attempt++;
    t->state = SLUICE_TASK_RUNNING;
    t->due_ns = sat_add_i64(now, t->type->pol.lease_ns);
    heap_push(&e->timers, t); /* reserved by the caller */
    gate_renew(e, t, t->type->pol.lease_ns, now);
    e->nrunning++;
    e->st.delivered++;
    introspect_delivered(t, now);
    out->id = t->id;
    out->type = t->type->pol.name;
    out->payload = t->payload ? t->payload : "{}";
    out->payload_len = t->payload ? t->payload_len : 2;
    out->attempt = t->attempt;
    out->lease_until_ns = t->due_ns;
    out->charged = charged;
    engine_changed(e, t->id);
}

/* Gates one task taken off its ready queue (QUEUED, in no heap). Returns a poll_outcome, or
 * SLUICE_ENOMEM with t still QUEUED and in no heap. */
static int poll_one(sluice_engine *e, task *t, int64_t now, sluice_delivery *out)
{
    /* A task holding a grant, or on a free retry, asks its concurrency links only. */
    int charged = (t->flags & (TASK_HOLDS_GRANT | TASK_FREE_RETRY)) == 0;
    gate_result r;
    uint16_t link;
    waitq *q;
    int rc;

    if (recurring_must_skip(t, now)) {
        recurring_dropped(e, t, 1);
        engine_finish(e, t, SLUICE_TASK_FAILED, SLUICE_FAIL_SKIPPED, LINK_NONE, 0, now);
        return POLL_FINISHED;
    }
    gate_group_check(e, t, now);
    /* Strict priority: never overtake a more urgent task parked on a key this chain touches. */
    q = gate_blocked(e, t, &link);
    if (q && e->nparked >= e->pol.max_parked) {
        fail_by_limit(e, t, SLUICE_FAIL_RATELIMITED, link, 0, now);
        return POLL_FINISHED;
    }
    /* Behind others the gate alone would only see the key's next slot: the horizon is checked
     * against when t really starts, after the units of every task ahead of it (park_eta, the
     * figure EXPLAIN shows). */
    if (q && park_beyond_horizon(q, t, link, now)) {
        fail_by_limit(e, t, SLUICE_FAIL_HORIZON, link, sat_sub_i64(park_eta(q, t, link, now), now),
                      now);
        return POLL_FINISHED;
    }
    if (q) {
        rc = park_task(e, t, link, SLUICE_NEVER);
        if (rc != SLUICE_OK)
            return rc;
        fail_pushed_back(e, t, now);
        skip_series_ahead(e, t, now);
        gate_acct_add(e, t, link, 0);
        emit_for(e, SLUICE_EVENT_DEFERRED, t, link, q->wake_ns, now);
        return POLL_PARKED;
    }
    rc = heap_reserve(&e->timers, e->timers.n + 1);
    if (rc != SLUICE_OK)
        return rc;
    rc = gate_eval(e, t, now, &r);
    if (rc == SLUICE_ENOMEM)
        return rc;
    if (rc != SLUICE_OK) { /* a chain the core cannot evaluate: fail rather than loop */
        engine_finish(e, t, SLUICE_TASK_FAILED, SLUICE_FAIL_NONE, LINK_NONE, 0, now);
        return POLL_FINISHED;
    }
    switch (r.verdict) {
    case GATE_GRANTED:
        deliver(e, t, now, charged, out);
        return POLL_DELIVERED;
    case GATE_PARK: {
        int64_t wake = sat_add_i64(now, r.retry_after_ns);

        if (recurring_past_end(t, wake)) {
            fail_by_limit(e, t, SLUICE_FAIL_SKIPPED, r.link, r.retry_after_ns, now);
            return POLL_FINISHED;
        }
        /* The parking lot is full (max_parked): refused as a limit with overflow reject. */
        if (e->nparked >= e->pol.max_parked) {
            fail_by_limit(e, t, SLUICE_FAIL_RATELIMITED, r.link, r.retry_after_ns, now);
            return POLL_FINISHED;
        }
        rc = park_task(e, t, r.link, wake);
        if (rc != SLUICE_OK)
            return rc;
        fail_pushed_back(e, t, now);
        skip_series_ahead(e, t, now);
        emit_for(e, SLUICE_EVENT_DEFERRED, t, r.link, t->wq->wake_ns, now);
        return POLL_PARKED;
    }
    case GATE_FAIL:
    default:
        fail_by_limit(e, t, r.reason, r.link, r.retry_after_ns, now);
        return POLL_FINISHED;
    }
}

int sluice_engine_poll(sluice_engine *e, const char *const *types, size_t ntypes, size_t max,
                       int64_t now_ns, sluice_delivery *out)
{
    int64_t now = now_ns;
    size_t n = 0;
    int rc = SLUICE_OK;

    if (max > INT_MAX)
        max = INT_MAX;
    while (n < max) {
        task *t = ready_pick(e, types, ntypes);
        int outcome;

        if (!t)
            break;
        ready_remove(e, t);
        e->nqueued--;
        outcome = poll_one(e, t, now, &out[n]);
        if (outcome == POLL_DELIVERED) {
            ready_served(e, t);
            n++;
        } else if (outcome < 0) {
            ready_push(e, t); /* back into the slot it left */
            e->nqueued++;
            rc = outcome;
            break;
        }
    }
    gate_acct_flush(e, now);
    ready_trim(e);
    engine_trim_finished(e);
    return n > 0 ? (int)n : rc;
}

/* Looks up a RUNNING task. */
static int running_task(sluice_engine *e, uint64_t id, task **out)
{
    task *t = task_by_id(e, id);

    *out = t;
    if (!t)
        return SLUICE_ENOTFOUND;
    return t->state == SLUICE_TASK_RUNNING ? SLUICE_OK : SLUICE_ESTATE;
}

int sluice_engine_ack(sluice_engine *e, uint64_t id, int64_t cost, int64_t now_ns)
{
    int64_t now = now_ns;
    task *t;
    int rc = running_task(e, id, &t);

    if (rc != SLUICE_OK)
        return rc;
    heap_remove(&e->timers, t);
    e->nrunning--;
    if (cost >= 0)
        gate_settle(e, t, cost, now);
    gate_release(e, t, now);
    engine_finish(e, t, SLUICE_TASK_DONE, SLUICE_FAIL_NONE, LINK_NONE, 0, now);
    engine_trim_finished(e);
    return SLUICE_OK;
}

/* The backoff before retry number `attempt` (1 = the first retry). */
static int64_t backoff(const sluice_retry_policy *r, int attempt)
{
    int64_t d = r->base_ns > 0 ? r->base_ns : 0;

    if (r->backoff == SLUICE_BACKOFF_EXPONENTIAL) {
        for (int i = 1; i < attempt && d < r->max_ns; i++)
            d = d > INT64_MAX / 2 ? INT64_MAX : 2 * d;
        if (r->max_ns > 0 && d > r->max_ns)
            d = r->max_ns;
    }
    return d;
}

/* The upstream answered the task 429 with Retry-After: every rate link's key is held back as
 * long (sluice_limit_backoff), so that no task and no direct caller of those keys is granted
 * before then; the task is not alone in being refused by that upstream. Other kinds cannot be
 * held back to a time and are left alone, and so is a new key a full table refuses (EBUSY).
 * Done before the failure changes anything: on SLUICE_ENOMEM the failure is refused whole, and
 * repeating it holds the keys back again harmlessly (a backoff never moves a key earlier). */
static int backoff_links(task *t, int64_t retry_after_ns, int64_t now)
{
    for (uint16_t i = 0; i < t->nlinks; i++) {
        const task_link *l = &t->links[i];
        sluice_limit *core;
        int rc;

        if (l->lim->dead)
            continue;
        core = registry_core(l->lim, l->tier, l->key, l->keylen);
        if (sluice_limit_get_def(core)->kind != SLUICE_RATE)
            continue;
        rc = sluice_limit_backoff(core, l->key, l->keylen, retry_after_ns, now, NULL);
        if (rc != SLUICE_OK && rc != SLUICE_EBUSY && rc != SLUICE_ERANGE)
            return rc;
    }
    return SLUICE_OK;
}

/* Fails running task id. retry_after_ns < 0: an ordinary failure, as mode says; >= 0: the
 * upstream asked for that much time, so the task retries no earlier, whatever its attempts. */
static int fail_task(sluice_engine *e, uint64_t id, sluice_fail_mode mode, int64_t retry_after_ns,
                     const char *message, int64_t now_ns)
{
    int64_t now = now_ns;
    const sluice_retry_policy *retry;
    char *msg = NULL;
    task *t;
    int rc;

    if (mode != SLUICE_FAIL_MODE_RETRY && mode != SLUICE_FAIL_MODE_DEAD)
        return SLUICE_EINVAL;
    rc = running_task(e, id, &t);
    if (rc != SLUICE_OK)
        return rc;
    if (retry_after_ns >= 0) {
        rc = backoff_links(t, retry_after_ns, now);
        if (rc != SLUICE_OK)
            return rc;
    }
    if (message) {
        msg = alloc_memdup0(message, strlen(message));
        if (!msg)
            return SLUICE_ENOMEM;
    }
    alloc_free(t->fail_message);
    t->fail_message = msg;
    heap_remove(&e->timers, t);
    e->nrunning--;
    gate_release(e, t, now);
    gate_clear_charges(t);
    t->flags &= (uint8_t)~TASK_HOLDS_GRANT;
    retry = &t->type->pol.retry;
    if (mode == SLUICE_FAIL_MODE_DEAD) {
        engine_finish(e, t, SLUICE_TASK_FAILED, SLUICE_FAIL_DEAD, LINK_NONE, 0, now);
    } else if (retry_after_ns < 0 && t->attempt >= retry->max_attempts) {
        engine_finish(e, t, SLUICE_TASK_FAILED, SLUICE_FAIL_ATTEMPTS, LINK_NONE, 0, now);
    } else {
        t->state = SLUICE_TASK_QUEUED;
        t->flags |= TASK_DELAYED;
        if (!retry->throttle_retries)
            t->flags |= TASK_FREE_RETRY;
        t->due_ns = sat_add_i64(now, backoff(retry, t->attempt));
        if (retry_after_ns >= 0 && sat_add_i64(now, retry_after_ns) > t->due_ns)
            t->due_ns = sat_add_i64(now, retry_after_ns);
        /* Not delivered before its backoff ends: its record (and task_info) say so. */
        if (t->due_ns > t->not_before_ns)
            t->not_before_ns = t->due_ns;
        heap_push(&e->timers, t); /* back into the slot it left */
        e->ndelayed++;
        e->st.retried++;
        introspect_retried(t);
        engine_changed(e, t->id);
    }
    engine_trim_finished(e);
    return SLUICE_OK;
}

int sluice_engine_fail(sluice_engine *e, uint64_t id, sluice_fail_mode mode, const char *message,
                       int64_t now_ns)
{
    return fail_task(e, id, mode, -1, message, now_ns);
}

int sluice_engine_fail_retry_after(sluice_engine *e, uint64_t id, int64_t retry_after_ns,
                                   const char *message, int64_t now_ns)
{
    if (retry_after_ns < 0)
        return SLUICE_EINVAL;
    return fail_task(e, id, SLUICE_FAIL_MODE_RETRY, retry_after_ns, message, now_ns);
}

void engine_cancel_task(sluice_engine *e, task *t, int64_t now_ns)
{
    if (t->state == SLUICE_TASK_PARKED) {
        park_remove(e, t);
    } else if (t->flags & TASK_DELAYED) {
        heap_remove(&e->timers, t);
        e->ndelayed--;
    } else {
        ready_remove(e, t);
        e->nqueued--;
    }
    if (recurring_pending(t))
        recurring_dropped(e, t, 0);
    engine_finish(e, t, SLUICE_TASK_CANCELLED, SLUICE_FAIL_NONE, LINK_NONE, 0, now_ns);
}

int sluice_engine_cancel(sluice_engine *e, uint64_t id, int64_t now_ns)
{
    int64_t now = now_ns;
    task *t = task_by_id(e, id);

    if (!t)
        return SLUICE_ENOTFOUND;
    if (t->state != SLUICE_TASK_QUEUED && t->state != SLUICE_TASK_PARKED)
        return SLUICE_ESTATE;
    engine_cancel_task(e, t, now);
    ready_trim(e);
    engine_trim_finished(e);
    return SLUICE_OK;
}

int sluice_engine_touch(sluice_engine *e, uint64_t id, int64_t now_ns, int64_t *until)
{
    int64_t now = now_ns;
    task *t;
    int rc = running_task(e, id, &t);

    if (until)
        *until = 0;
    if (rc != SLUICE_OK)
        return rc;
    t->due_ns = sat_add_i64(now, t->type->pol.lease_ns);
    heap_update(&e->timers, t);
    gate_renew(e, t, t->type->pol.lease_ns, now);
    if (until)
        *until = t->due_ns;
    engine_changed(e, t->id);
    return SLUICE_OK;
}

/* Releases delayed tasks that are due and takes back the tasks whose lease expired. */
static int tick_timers(sluice_engine *e, int64_t now)
{
    task *t;

    while ((t = heap_top(&e->timers)) != NULL && t->due_ns <= now) {
        int rc = ready_reserve(e, t), lost = t->state == SLUICE_TASK_RUNNING;

        if (rc != SLUICE_OK)
            return rc;
        heap_remove(&e->timers, t);
        if (lost) {
            /* The worker is lost: its leases go. Its grant stays with the task (exactly-once),
             * unless the type charges every execution (charge_redelivery, seed 001): then the
             * redelivery pays its limits again, and the first charge is not given back. */
            e->nrunning--;
            gate_release(e, t, now);
            if (t->type->pol.charge_redelivery) {
                gate_clear_charges(t);
                t->flags &= (uint8_t) ~(TASK_HOLDS_GRANT | TASK_FREE_RETRY);
            } else {
                t->flags |= TASK_HOLDS_GRANT;
            }
            t->state = SLUICE_TASK_QUEUED;
            e->st.redelivered++;
        } else {
            t->flags &= (uint8_t)~TASK_DELAYED;
            e->ndelayed--;
        }
        ready_push(e, t); /* reserved */
        e->nqueued++;
        /* A delayed task coming due keeps its record (QUEUED, its not_before now passed). */
        if (lost)
            engine_changed(e, t->id);
    }
    return SLUICE_OK;
}

int sluice_engine_tick(sluice_engine *e, int64_t now_ns)
{
    int64_t now = now_ns;
    int rc, rc2;

    rc = tick_timers(e, now);
    rc2 = park_tick(e, now);
    if (rc == SLUICE_OK)
        rc = rc2;
    rc2 = recurring_tick(e, now);
    if (rc == SLUICE_OK)
        rc = rc2;
    events_flush(e->ev, now);
    registry_sweep(e, now, SWEEP_BUDGET, SWEEP_LIMITS);
    ready_trim(e);
    engine_trim_finished(e);
    return rc;
}

int64_t sluice_engine_next_wake(const sluice_engine *e)
{
    int64_t next = park_next_wake(e), t;
    const task *timer = heap_top(&e->timers);

    if (timer && timer->due_ns < next)
        next = timer->due_ns;
    t = recurring_next_wake(e);
    if (t < next)
        next = t;
    t = events_next_flush(e->ev);
    if (t < next)
        next = t;
    return next;
}
