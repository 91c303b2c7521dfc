/* SPDX-License-Identifier: MIT */
/*
 * Persistence hooks: what a store needs to keep an engine across restarts, without the engine
 * doing any I/O. The change feed (feed.c) records the id of every task whose durable record
 * changed (see engine_changed() and its callers) and the name of every series added, removed or
 * recounted; the store exports those records when it writes, and restores them into a fresh
 * engine at start.
 *
 * What is durable is sluice_task_record: nothing of the gate's transient bookkeeping (which
 * wait queue a task is parked on, its lease ids, which links the current grant charged) is kept.
 * A task's group slot is (its limit, the producer's lease id and tag): the producer's lease is a
 * kept one, restored with the limit's key state before the tasks, so a restored task rejoins
 * its group while that lease lives, and takes its own unit once it is gone, as a running task
 * would. A group that ended while the process ran leaves a stale slot in the record, which the
 * restore finds gone (the lease is not restored, or its id is another holder's: another tag).
 * So parking and waking are not reported (PARKED comes back QUEUED anyway), and a task restored
 * while holding a grant redeems it without settling: an ack's actual cost is not applied to a
 * grant taken before the restart (the estimate stands).
 *
 * Restoring does what a submit does (resolve the links again under the current policies) and
 * then files the task where its record says, all or nothing: every table, heap slot and lease is
 * reserved before the first change, so a failure leaves the engine as it was. Caps (max_tasks,
 * max_parked) are not applied: the tasks existed already. A restore reports nothing for the task
 * restored (the store holds it); it may report older finished tasks forgotten by the trim of the
 * finished FIFO, which the store then deletes.
 */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "engine/engine_impl.h"
#include "engine/gate.h"
#include "engine/ready.h"
#include "engine/recurring.h"
#include "engine/registry.h"
#include "engine/resolve.h"
#include "engine/task.h"
#include "sluice/engine.h"
#include "sluice/error.h"

/* Links resolved without allocating. */
#define STACK_LINKS 8

/* ---- Export ---------------------------------------------------------------------------------- */

int sluice_engine_export_task(const sluice_engine *e, uint64_t id, sluice_task_record *out)
{
    const task *t = task_by_id(e, id);

    memset(out, 0, sizeof *out);
    if (!t)
        return SLUICE_ENOTFOUND;
    out->id = t->id;
    out->state = (sluice_task_state)t->state;
    out->type = t->type->pol.name;
    out->payload = t->payload;
    out->payload_len = t->payload ? t->payload_len : 0;
    out->key = t->key;
    out->key_len = t->key_len;
    out->task_key = t->task_key;
    out->task_key_len = t->task_key_len;
    out->units = t->units;
    out->priority = t->priority;
    out->attempt = t->attempt;
    out->submitted_ns = t->submitted_ns;
    out->not_before_ns = t->not_before_ns;
    switch ((sluice_task_state)t->state) {
    case SLUICE_TASK_QUEUED: /* not_before_ns includes a retry's backoff (see fail) */
    case SLUICE_TASK_PARKED:
        /* A lost lease keeps the grant; a free retry (throttle_retries off) asks nothing of
         * its rate limits either: both redeem without a charge. */
        out->granted = (t->flags & (TASK_HOLDS_GRANT | TASK_FREE_RETRY)) != 0;
        break;
    case SLUICE_TASK_RUNNING:
        out->lease_until_ns = t->due_ns;
        out->granted = 1; /* it was granted: a lost lease redeems it */
        break;
    case SLUICE_TASK_FAILED:
        out->fail_reason = (sluice_fail_reason)t->fail_reason;
        if (t->fail_link != LINK_NONE)
            out->fail_limit = t->links[t->fail_link].lim->pol.name;
        break;
    case SLUICE_TASK_DONE:
    case SLUICE_TASK_CANCELLED:
        break;
    }
    out->series = recurring_name(t);
    out->fail_message = t->fail_message;
    if (t->group_link != LINK_NONE && t->state != SLUICE_TASK_DONE &&
        t->state != SLUICE_TASK_FAILED && t->state != SLUICE_TASK_CANCELLED) {
        out->lease_limit = t->links[t->group_link].lim->pol.name;
        out->lease_id = t->group_lease;
        out->lease_tag = t->group_tag;
    }
    return SLUICE_OK;
}

/* ---- Restore --------------------------------------------------------------------------------- */

static int valid_record(const sluice_task_record *r)
{
    if (!r || r->id == 0 || r->units < 1 || r->attempt < 0)
        return 0;
    if ((!r->payload && r->payload_len) || (!r->key && r->key_len) ||
        (!r->task_key && r->task_key_len))
        return 0;
    return r->state >= SLUICE_TASK_QUEUED && r->state <= SLUICE_TASK_CANCELLED;
}

/* Where a restored task goes. */
typedef enum restore_place {
    PLACE_READY = 1, /* QUEUED, due */
    PLACE_DELAYED,   /* QUEUED, in the timer heap until not_before */
    PLACE_RUNNING,   /* RUNNING, in the timer heap until its lease ends */
    PLACE_FINISHED,  /* the finished FIFO */
} restore_place;

static restore_place place_of(const sluice_task_record *r, int64_t now)
{
    switch (r->state) {
    case SLUICE_TASK_QUEUED:
    case SLUICE_TASK_PARKED:
        return r->not_before_ns > now ? PLACE_DELAYED : PLACE_READY;
    case SLUICE_TASK_RUNNING:
        /* Lease passed while the process was down: redelivered, redeeming its grant. */
        return r->lease_until_ns > now ? PLACE_RUNNING : PLACE_READY;
    default:
        return PLACE_FINISHED;
    }
}

/* Reserves every table and heap slot the task will take. */
static int reserve_for(sluice_engine *e, etype *type, const link_spec *links, size_t nlinks,
                       int in_task_keys, restore_place place)
{
    int rc = gate_reserve(e, nlinks);

    if (rc == SLUICE_OK)
        rc = ptab_reserve(&e->ids, 1);
    if (rc == SLUICE_OK && in_task_keys)
        rc = ptab_reserve(&e->task_keys, 1);
    if (rc == SLUICE_OK && (place == PLACE_DELAYED || place == PLACE_RUNNING))
        rc = heap_reserve(&e->timers, e->timers.n + 1);
    if (rc == SLUICE_OK && place == PLACE_READY)
        rc = ready_reserve_links(e, type, links, nlinks);
    return rc;
}

/* Releases the concurrency leases a restore took before it failed. */
static void drop_leases(task *t, int64_t now)
{
    for (uint16_t i = 0; i < t->nlinks; i++) {
        task_link *l = &t->links[i];

        if (l->lease_id)
            sluice_lease_release(registry_core(l->lim, l->tier, l->key, l->keylen), l->lease_id,
                                 now);
        l->lease_id = 0;
    }
}

/* A task restored RUNNING takes its concurrency leases again, to expire with its lease. A limit
 * that is full now (its units were given away meanwhile, or its definition shrank) grants no
 * lease: the task still runs, since it was granted before the restart, and its key is then
 * over-subscribed by its units until it finishes or its lease ends, which bounds the excess.
 * Returns 0 or SLUICE_ENOMEM (no lease kept). */
static int take_leases(task *t, int64_t lease_until, int64_t now)
{
    for (uint16_t i = 0; i < t->nlinks; i++) {
        task_link *l = &t->links[i];
        sluice_limit *core = registry_core(l->lim, l->tier, l->key, l->keylen);
        sluice_decision d;
        int rc;

        if (l->lim->dead || sluice_limit_get_def(core)->kind != SLUICE_CONCURRENCY ||
            i == t->group_link) /* its group's lease, restored, holds that unit */
            continue;
        rc = sluice_lease_acquire(core, l->key, l->keylen, l->units, lease_until - now, now, &d);
        if (rc == SLUICE_ENOMEM) {
            drop_leases(t, now);
            return rc;
        }
        if (rc == SLUICE_OK && d.allowed)
            l->lease_id = d.lease_id; /* else over-subscribed, see above */
    }
    return SLUICE_OK;
}

/* The link whose limit is named, or LINK_NONE. */
static uint16_t link_named(const task *t, const char *name)
{
    if (name)
        for (uint16_t i = 0; i < t->nlinks; i++)
            if (strcmp(t->links[i].lim->pol.name, name) == 0)
                return i;
    return LINK_NONE;
}

/* Files a built task (t->state already the restored state) where `place` says. Cannot fail:
 * everything was reserved. */
static void file_task(sluice_engine *e, task *t, restore_place place, const sluice_task_record *r)
{
    ptab_insert(&e->ids, task_id_hash(t->id), t);
    if (place == PLACE_FINISHED) {
        t->fail_reason = (uint8_t)(r->state == SLUICE_TASK_FAILED ? r->fail_reason : 0);
        t->fail_link = r->state == SLUICE_TASK_FAILED ? link_named(t, r->fail_limit) : LINK_NONE;
        t->retry_after_ns = 0; /* not kept: the denial reads "retry after 0" */
        engine_file_finished(e, t);
        return;
    }
    if (t->task_key)
        ptab_insert(&e->task_keys, task_key_hash(t->task_key, t->task_key_len), t);
    switch (place) {
    case PLACE_READY:
        ready_push(e, t); /* reserved */
        e->nqueued++;
        break;
    case PLACE_DELAYED:
        t->flags |= TASK_DELAYED;
        t->due_ns = r->not_before_ns;
        heap_push(&e->timers, t); /* reserved */
        e->ndelayed++;
        break;
    case PLACE_RUNNING:
        t->due_ns = r->lease_until_ns;
        heap_push(&e->timers, t); /* reserved */
        e->nrunning++;
        break;
    case PLACE_FINISHED:
        break;
    }
    e->nunfinished++;
    e->task_bytes += task_size(t);
    /* Counted as submitted here, so that unfinished == submitted - done - failed - cancelled
     * holds in this process's figures, globally and per type. */
    e->st.submitted++;
    introspect_submitted(t);
}

/* Builds and files the task of a checked record whose type is found. */
static int restore_checked(sluice_engine *e, const sluice_task_record *r, etype *type,
                           restore_place place, int64_t now, sluice_submit_error *err)
{
    link_spec stack[STACK_LINKS], *links = stack;
    size_t nlinks = type->pol.nlimits;
    int unfinished = place != PLACE_FINISHED;
    sluice_task_spec spec;
    char *payload = NULL, *message = NULL;
    uint16_t group_link = LINK_NONE;
    task *t = NULL;
    int rc;

    memset(&spec, 0, sizeof spec);
    spec.type = r->type;
    spec.payload = r->payload;
    spec.payload_len = r->payload_len;
    spec.key = r->key;
    spec.key_len = r->key_len;
    if (nlinks > STACK_LINKS) {
        links = alloc_calloc(nlinks, sizeof *links);
        if (!links)
            return SLUICE_ENOMEM;
    }
    rc = resolve_spec(e, type, &spec, r->units, now, links, &nlinks, err->message,
                      sizeof err->message);
    if (rc != SLUICE_OK)
        goto done;
    if (unfinished && r->lease_limit && r->lease_tag != 0) {
        char why[128];

        /* The group slot comes back only while its lease lives: else the task asks its own
         * unit, as it would have once the lease ended (a restore never fails for it). A lease
         * without a tag was not kept, so it is not back: the id may be a task's now. */
        if (gate_group_resolve(e, links, nlinks, r->lease_limit, r->lease_id, r->lease_tag, now,
                               &group_link, why, sizeof why) != SLUICE_OK)
            group_link = LINK_NONE;
    }
    rc = reserve_for(e, type, links, nlinks, unfinished && r->task_key != NULL, place);
    if (rc == SLUICE_OK)
        rc = task_new(links, nlinks, r->task_key, r->task_key_len, r->key, r->key_len, &t);
    if (rc == SLUICE_OK && group_link != LINK_NONE) {
        t->group_link = group_link;
        t->group_lease = r->lease_id;
        t->group_tag = r->lease_tag;
    }
    if (rc == SLUICE_OK)
        rc = task_copy_payload(r->payload, r->payload_len, &payload);
    if (rc == SLUICE_OK && r->fail_message) {
        message = alloc_memdup0(r->fail_message, strlen(r->fail_message));
        if (!message)
            rc = SLUICE_ENOMEM;
    }
    if (rc == SLUICE_OK && place == PLACE_RUNNING)
        rc = take_leases(t, r->lease_until_ns, now);
    if (rc != SLUICE_OK) {
        alloc_free(payload);
        alloc_free(message);
        task_free(t);
        if (rc == SLUICE_EINVAL)
            snprintf(err->message, sizeof err->message, "%s", "a key or the task key is too long");
        goto done;
    }
    /* Commit: nothing below can fail. */
    for (size_t i = 0; i < nlinks; i++)
        registry_limit_ref(links[i].lim);
    type->refs++;
    t->payload = payload;
    t->payload_len = payload ? r->payload_len : 0;
    t->fail_message = message;
    t->id = r->id;
    t->seq = r->id; /* ids and sequence numbers are issued together: the original order */
    t->type = type;
    t->units = r->units;
    t->priority = r->priority;
    t->attempt = r->attempt;
    t->submitted_ns = r->submitted_ns;
    t->not_before_ns = r->not_before_ns;
    if (place == PLACE_FINISHED)
        t->state = (uint8_t)r->state;
    else
        t->state = place == PLACE_RUNNING ? SLUICE_TASK_RUNNING : SLUICE_TASK_QUEUED;
    /* A running task's lease that passed is lost as tick would have found it: the grant stays.
     * The charges behind a grant are not known any more, so a restored grant is never settled. */
    if (unfinished && (r->granted || r->state == SLUICE_TASK_RUNNING))
        t->flags |= TASK_HOLDS_GRANT;
    /* Under charge_redelivery a running task's grant covers that execution only: one whose
     * lease passed while the process was down is delivered again and pays again. */
    if (r->state == SLUICE_TASK_RUNNING && type->pol.charge_redelivery)
        t->flags &= (uint8_t)~TASK_HOLDS_GRANT;
    if (r->series)
        recurring_relink(e, t, r->series);
    file_task(e, t, place, r);
    if (r->id > e->next_id)
        e->next_id = r->id;
    if (r->id > e->next_seq)
        e->next_seq = r->id;
done:
    if (links != stack)
        alloc_free(links);
    return rc;
}

int sluice_engine_restore_task(sluice_engine *e, const sluice_task_record *r, int64_t now_ns,
                               sluice_submit_error *err)
{
    sluice_submit_error scratch;
    int64_t now = now_ns;
    restore_place place;
    etype *type;
    int rc;

    if (!err)
        err = &scratch;
    memset(err, 0, sizeof *err);
    if (!valid_record(r)) {
        snprintf(err->message, sizeof err->message, "%s", "invalid task record");
        return SLUICE_EINVAL;
    }
    if (task_by_id(e, r->id)) {
        err->existing_id = r->id;
        snprintf(err->message, sizeof err->message, "%s", "a task with this id exists");
        return SLUICE_EEXIST;
    }
    place = place_of(r, now);
    if (place != PLACE_FINISHED && r->task_key) {
        const task *holder = task_by_key(e, r->task_key, r->task_key_len);

        if (holder) {
            err->existing_id = holder->id;
            snprintf(err->message, sizeof err->message, "%s",
                     "the task key is held by another unfinished task");
            return SLUICE_EEXIST;
        }
    }
    rc = registry_type_for_submit(e, r->type, &type, err->message, sizeof err->message);
    if (rc != SLUICE_OK)
        return rc;
    rc = restore_checked(e, r, type, place, now, err);
    if (rc == SLUICE_ENOMEM)
        snprintf(err->message, sizeof err->message, "%s", "out of memory");
    registry_type_release(e, type);
    if (rc == SLUICE_OK)
        engine_trim_finished(e);
    return rc;
}

/* ---- Recurring series ------------------------------------------------------------------------ */

int sluice_engine_recurring_state(const sluice_engine *e, const char *name,
                                  sluice_recurring_spec *spec_out, int64_t *runs, int64_t *skipped)
{
    return recurring_state(e, name, spec_out, runs, skipped);
}

int sluice_engine_restore_recurring(sluice_engine *e, const sluice_recurring_spec *spec,
                                    int64_t runs, int64_t skipped, int64_t now_ns, char *msg,
                                    size_t msglen)
{
    return recurring_restore(e, spec, runs, skipped, now_ns, msg, msglen);
}
