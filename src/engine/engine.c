/* SPDX-License-Identifier: MIT */
/*
 * The engine's object: creation, configuration, submission, finished tasks, and the read-only
 * views (task_info, explain, stats). The dispatch loop itself (poll, ack, fail, cancel, touch,
 * tick) is in dispatch.c; the objects it works on are described in engine_impl.h.
 *
 * Invariants kept here:
 * - nunfinished == nqueued + ndelayed + nparked + nrunning, and each task counted is in exactly
 *   the one place its state says (see engine_impl.h).
 * - A submit either creates exactly one task (or replaces one payload) or changes nothing: every
 *   table and heap it needs is reserved before the first change.
 * - Finished tasks are kept, oldest freed first, up to max_finished.
 */
#include "sluice/engine.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "base/alloc.h"
#include "base/sat.h"
#include "engine/engine_impl.h"
#include "engine/gate.h"
#include "engine/introspect.h"
#include "engine/park.h"
#include "engine/ready.h"
#include "engine/recurring.h"
#include "engine/registry.h"
#include "engine/resolve.h"
#include "engine/task.h"
#include "sluice/error.h"
#include "sluice/spec.h"
#include "base/quote.h"

/* Links resolved without allocating. */
#define STACK_LINKS 8

/* ---- Shared helpers -------------------------------------------------------------------------- */

void engine_emit(sluice_engine *e, const sluice_event *ev, int64_t now_ns)
{
    events_emit(e->ev, ev, now_ns);
}

void engine_finish(sluice_engine *e, task *t, sluice_task_state state, sluice_fail_reason reason,
                   uint16_t fail_link, int64_t retry_after_ns, int64_t now_ns)
{
    (void)now_ns;
    if (t->task_key)
        ptab_remove(&e->task_keys, task_key_hash(t->task_key, t->task_key_len), t);
    t->state = (uint8_t)state;
    t->fail_reason = (uint8_t)reason;
    t->fail_link = fail_link;
    t->retry_after_ns = retry_after_ns;
    t->flags = 0;
    e->nunfinished--;
    e->task_bytes -= task_size(t);
    switch (state) {
    case SLUICE_TASK_DONE:
        e->st.done++;
        break;
    case SLUICE_TASK_CANCELLED:
        e->st.cancelled++;
        break;
    default:
        e->st.failed++;
        if (fail_link != LINK_NONE)
            e->st.rejected++;
        break;
    }
    introspect_finished(t, state, reason, fail_link);
    engine_file_finished(e, t);
    engine_changed(e, t->id);
}

void engine_file_finished(sluice_engine *e, task *t)
{
    t->fnext = NULL;
    if (e->fin_tail)
        e->fin_tail->fnext = t;
    else
        e->fin_head = t;
    e->fin_tail = t;
    e->nfinished++;
}

/* Frees a task that is in no queue, dropping its references, and reports it forgotten. */
static void task_destroy(sluice_engine *e, task *t)
{
    etype *type = t->type;
    uint64_t id = t->id;

    ptab_remove(&e->ids, task_id_hash(t->id), t);
    for (uint16_t i = 0; i < t->nlinks; i++)
        registry_limit_unref(t->links[i].lim);
    type->refs--;
    task_free(t);
    registry_type_release(e, type);
    engine_changed(e, id);
}

void engine_trim_finished(sluice_engine *e)
{
    while (e->nfinished > e->pol.max_finished) {
        task *t = e->fin_head;

        e->fin_head = t->fnext;
        if (!e->fin_head)
            e->fin_tail = NULL;
        e->nfinished--;
        task_destroy(e, t);
    }
}

/* ---- Life cycle ------------------------------------------------------------------------------ */

int sluice_engine_new(const sluice_engine_policy *policy, sluice_engine **out)
{
    sluice_engine *e;
    int rc;

    *out = NULL;
    e = alloc_calloc(1, sizeof *e);
    if (!e)
        return SLUICE_ENOMEM;
    if (policy)
        e->pol = *policy;
    else
        sluice_engine_policy_init(&e->pol);
    if (e->pol.event_interval_ns < 1 || e->pol.default_lease_ns < 1) {
        alloc_free(e);
        return SLUICE_EINVAL;
    }
    rc = events_new(e->pol.event_interval_ns, &e->ev);
    if (rc != SLUICE_OK) {
        alloc_free(e);
        return rc;
    }
    ptab_init(&e->types);
    ptab_init(&e->limit_index);
    ptab_init(&e->ids);
    ptab_init(&e->task_keys);
    ptab_init(&e->waitqs);
    ptab_init(&e->acct_index);
    recurring_init(e);
    heap_init(&e->types_ready, ready_type_less, offsetof(etype, tidx));
    heap_init(&e->timers, task_less_due, offsetof(task, hidx));
    heap_init(&e->wakes, park_wake_less, offsetof(waitq, widx));
    *out = e;
    return SLUICE_OK;
}

void sluice_engine_free(sluice_engine *e)
{
    size_t pos = 0;
    task *t;

    if (!e)
        return;
    while ((t = ptab_next(&e->ids, &pos)) != NULL) {
        for (uint16_t i = 0; i < t->nlinks; i++)
            registry_limit_unref(t->links[i].lim);
        task_free(t);
    }
    ptab_free(&e->ids);
    ptab_free(&e->task_keys);
    heap_free(&e->timers);
    heap_free(&e->types_ready);
    park_free_all(e);
    recurring_free_all(e);
    registry_free(e);
    gate_free(e);
    events_free(e->ev);
    feed_free(e->feed);
    alloc_free(e->kbuf);
    alloc_free(e);
}

void sluice_engine_on_event(sluice_engine *e, sluice_event_fn fn, void *arg)
{
    events_set_sink(e->ev, fn, arg);
}

/* ---- Configuration --------------------------------------------------------------------------- */

int sluice_engine_set_limit(sluice_engine *e, const sluice_limit_policy *p, int64_t now_ns,
                            char *msg, size_t msglen)
{
    int rc = registry_set_limit(e, p, now_ns, msg, msglen);

    if (rc == SLUICE_OK)
        feed_limit_replaced(e, p->name, 0);
    return rc;
}

int sluice_engine_set_limit_mode(sluice_engine *e, const char *name, sluice_limit_mode mode,
                                 int64_t now_ns)
{
    elimit *l = registry_find_limit(e, name);

    if (!l)
        return SLUICE_ENOTFOUND;
    if (mode != SLUICE_MODE_ENFORCE && mode != SLUICE_MODE_SHADOW)
        return SLUICE_EINVAL;
    l->pol.mode = mode;
    e->limits_version++;
    /* Tasks parked on a limit that stopped holding them back are gated again now. */
    if (registry_apply_mode(e, l))
        park_rearm_limit(e, l, now_ns);
    feed_limit_mode(e, name);
    return SLUICE_OK;
}

void sluice_engine_set_enabled(sluice_engine *e, int on, int64_t now_ns)
{
    int off = on == 0;

    if (off == e->limits_off)
        return;
    e->limits_off = off;
    for (size_t i = 0; i < e->nlimits; i++)
        if (registry_apply_mode(e, e->limits[i]))
            park_rearm_limit(e, e->limits[i], now_ns);
}

int sluice_engine_enabled(const sluice_engine *e)
{
    return !e->limits_off;
}

int sluice_engine_set_key_override(sluice_engine *e, const char *name, const char *key,
                                   size_t keylen, const sluice_limit_def *def, int64_t now_ns,
                                   char *msg, size_t msglen)
{
    int rc;

    if (!e || !name || !key)
        return SLUICE_EINVAL;
    rc = registry_set_override(e, name, key, keylen, def, now_ns, msg, msglen);
    if (rc == SLUICE_OK)
        feed_override_changed(e, name, key, keylen);
    return rc;
}

int sluice_engine_del_limit(sluice_engine *e, const char *name, int64_t now_ns)
{
    int rc = registry_del_limit(e, name, now_ns);

    if (rc == SLUICE_OK)
        feed_limit_replaced(e, name, 1);
    return rc;
}

int sluice_engine_limit_released(sluice_engine *e, const char *name, int64_t now_ns)
{
    elimit *l = registry_find_limit(e, name);

    if (!l)
        return SLUICE_ENOTFOUND;
    /* A lease's key is not known by its id: every queue of the limit looks again (each look is
     * a peek and a re-arm, and only keys with parked tasks have a queue). */
    park_wake_limit(e, l, now_ns);
    return SLUICE_OK;
}

const sluice_limit_policy *sluice_engine_get_limit(const sluice_engine *e, const char *name,
                                                   sluice_limit **live)
{
    elimit *l = registry_find_limit(e, name);

    if (live)
        *live = l ? l->lims[0] : NULL;
    return l ? &l->pol : NULL;
}

size_t sluice_engine_list_limits(const sluice_engine *e,
                                 void (*fn)(const sluice_limit_policy *p, void *arg), void *arg)
{
    return registry_list_limits(e, fn, arg);
}

int sluice_engine_set_type(sluice_engine *e, const sluice_type_policy *t, int64_t now_ns, char *msg,
                           size_t msglen)
{
    return registry_set_type(e, t, now_ns, msg, msglen);
}

const sluice_type_policy *sluice_engine_get_type(const sluice_engine *e, const char *name)
{
    const etype *t = name ? registry_find_type(e, name, strlen(name)) : NULL;

    return t && t->declared ? &t->pol : NULL;
}

/* ---- Submit ---------------------------------------------------------------------------------- */

/* Same task key as a queued or parked task: its payload is replaced, its place and links kept. */
static int replace_payload(sluice_engine *e, task *t, const sluice_task_spec *spec, char *msg,
                           size_t msglen)
{
    json_t *input;
    char *payload;
    int rc = resolve_input(NULL, spec, &input, msg, msglen);

    if (rc != SLUICE_OK)
        return rc;
    json_decref(input);
    rc = task_copy_payload(spec->payload, spec->payload_len, &payload);
    if (rc != SLUICE_OK)
        return rc;
    e->task_bytes -= task_size(t);
    alloc_free(t->payload);
    t->payload = payload;
    t->payload_len = payload ? spec->payload_len : 0;
    e->task_bytes += task_size(t);
    engine_changed(e, t->id);
    return SLUICE_OK;
}

/* Reserves every table and heap slot the new task will take. */
static int reserve_for(sluice_engine *e, etype *type, const link_spec *links, size_t nlinks,
                       int has_task_key, int delayed)
{
    int rc = gate_reserve(e, nlinks);

    if (rc == SLUICE_OK)
        rc = ptab_reserve(&e->ids, 1);
    if (rc == SLUICE_OK && has_task_key)
        rc = ptab_reserve(&e->task_keys, 1);
    if (rc == SLUICE_OK)
        rc = delayed ? heap_reserve(&e->timers, e->timers.n + 1)
                     : ready_reserve_links(e, type, links, nlinks);
    return rc;
}

/* Whether a task with these links would park if gated now: a key of its chain has tasks
 * parked already (it would queue behind them), or a limit has no budget for it. A peek: nothing
 * is charged. Tasks that pass may still park at poll (budget taken meanwhile); the poll then
 * refuses them when the parking lot is full. */
static int would_park(sluice_engine *e, const link_spec *links, size_t n, uint16_t group_link,
                      int64_t now)
{
    sluice_decision d;

    for (size_t i = 0; i < n; i++) {
        const link_spec *l = &links[i];

        if (l->lim->dead || i == group_link) /* the group's lease stands in for that link */
            continue;
        if (park_find(e, l->lim, l->tier, l->key, l->keylen))
            return 1;
        memset(&d, 0, sizeof d);
        if (sluice_limit_decide(registry_core(l->lim, l->tier, l->key, l->keylen), l->key,
                                l->keylen, l->units, now, SLUICE_PEEK, &d) == SLUICE_OK &&
            !d.allowed)
            return 1;
    }
    return 0;
}

static int submit_checked(sluice_engine *e, const sluice_task_spec *spec, etype *type,
                          int64_t units, series *s, int dry_run, int64_t now, uint64_t *id,
                          sluice_submit_error *err)
{
    link_spec stack[STACK_LINKS], *links = stack;
    size_t nlinks = type->pol.nlimits;
    int delayed = spec->not_before_ns > now;
    uint16_t group_link = LINK_NONE;
    task *t = NULL;
    char *payload = NULL;
    int rc;

    if (nlinks > STACK_LINKS) {
        links = alloc_calloc(nlinks, sizeof *links);
        if (!links)
            return SLUICE_ENOMEM;
    }
    rc = resolve_spec(e, type, spec, units, now, links, &nlinks, err->message, sizeof err->message);
    if (rc == SLUICE_OK)
        rc =
            gate_group_resolve(e, links, nlinks, spec->lease_limit, spec->lease_id, spec->lease_tag,
                               now, &group_link, err->message, sizeof err->message);
    if (rc != SLUICE_OK || dry_run)
        goto done;
    if (e->nparked >= e->pol.max_parked && !delayed &&
        would_park(e, links, nlinks, group_link, now)) {
        msgf(err->message, sizeof err->message,
             "too many parked tasks (max_parked %zu): this task would wait for budget",
             e->pol.max_parked);
        rc = SLUICE_EBUSY;
        goto done;
    }
    rc = reserve_for(e, type, links, nlinks, spec->task_key != NULL, delayed);
    if (rc == SLUICE_OK)
        rc = task_new(links, nlinks, spec->task_key, spec->task_key_len, spec->key, spec->key_len,
                      &t);
    if (rc == SLUICE_OK)
        rc = task_copy_payload(spec->payload, spec->payload_len, &payload);
    if (rc != SLUICE_OK) {
        task_free(t);
        if (rc == SLUICE_EINVAL)
            msgf(err->message, sizeof err->message, "%s", "a key or the task key is too long");
        goto done;
    }
    /* Commit: nothing below can fail. */
    for (size_t i = 0; i < nlinks; i++)
        registry_limit_ref(links[i].lim);
    type->refs++;
    t->payload = payload;
    t->payload_len = payload ? spec->payload_len : 0;
    t->id = ++e->next_id;
    t->seq = ++e->next_seq;
    t->type = type;
    t->series = s;
    t->units = units;
    t->priority = spec->has_priority ? spec->priority : type->pol.priority;
    t->submitted_ns = now;
    t->not_before_ns = spec->not_before_ns ? spec->not_before_ns : now;
    t->state = SLUICE_TASK_QUEUED;
    t->group_link = group_link;
    t->group_lease = group_link == LINK_NONE ? 0 : spec->lease_id;
    t->group_tag = group_link == LINK_NONE ? 0 : spec->lease_tag;
    ptab_insert(&e->ids, task_id_hash(t->id), t);
    if (t->task_key)
        ptab_insert(&e->task_keys, task_key_hash(t->task_key, t->task_key_len), t);
    if (delayed) {
        t->flags |= TASK_DELAYED;
        t->due_ns = spec->not_before_ns;
        heap_push(&e->timers, t);
        e->ndelayed++;
    } else {
        ready_push(e, t);
        e->nqueued++;
    }
    e->nunfinished++;
    e->task_bytes += task_size(t);
    e->st.submitted++;
    introspect_submitted(t);
    *id = t->id;
    engine_changed(e, t->id);
done:
    if (links != stack)
        alloc_free(links);
    return rc;
}

/* The checks every submit and resolution makes of a spec before looking its type up: its
 * pointers agree with their lengths, and its units (0: 1) are at least 1. */
static int spec_check(const sluice_task_spec *spec, int64_t *units, sluice_submit_error *err)
{
    if (!spec || (!spec->payload && spec->payload_len) || (!spec->key && spec->key_len) ||
        (!spec->task_key && spec->task_key_len)) {
        msgf(err->message, sizeof err->message, "%s", "invalid task spec");
        return SLUICE_EINVAL;
    }
    *units = spec->units ? spec->units : 1;
    if (*units < 1) {
        msgf(err->message, sizeof err->message, "units must be at least 1, got %" PRId64,
             spec->units);
        return SLUICE_EINVAL;
    }
    return SLUICE_OK;
}

int engine_submit_internal(sluice_engine *e, const sluice_task_spec *spec, series *s, int dry_run,
                           int64_t now_ns, uint64_t *id, sluice_submit_error *err)
{
    sluice_submit_error scratch;
    int64_t now = now_ns;
    int64_t units;
    etype *type;
    int rc;

    *id = 0;
    if (!err)
        err = &scratch;
    memset(err, 0, sizeof *err);
    rc = spec_check(spec, &units, err);
    if (rc != SLUICE_OK)
        return rc;
    rc = registry_type_for_submit(e, spec->type, &type, err->message, sizeof err->message);
    if (rc != SLUICE_OK)
        return rc;
    if (!dry_run && spec->task_key) {
        task *holder = task_by_key(e, spec->task_key, spec->task_key_len);

        if (holder && holder->state == SLUICE_TASK_RUNNING) {
            err->existing_id = holder->id;
            msgf(err->message, sizeof err->message, "task key is held by running task %" PRIu64,
                 holder->id);
            return SLUICE_EEXIST;
        }
        if (holder) {
            rc = replace_payload(e, holder, spec, err->message, sizeof err->message);
            if (rc == SLUICE_OK)
                *id = holder->id;
            return rc;
        }
    }
    if (!dry_run && e->nunfinished >= e->pol.max_tasks) {
        msgf(err->message, sizeof err->message, "too many tasks (max_tasks %zu)", e->pol.max_tasks);
        rc = SLUICE_EBUSY;
    } else {
        rc = submit_checked(e, spec, type, units, s, dry_run, now, id, err);
    }
    if (rc == SLUICE_ENOMEM)
        msgf(err->message, sizeof err->message, "%s", "out of memory");
    registry_type_release(e, type);
    return rc;
}

int sluice_engine_submit(sluice_engine *e, const sluice_task_spec *spec, int64_t now_ns,
                         uint64_t *id, sluice_submit_error *err)
{
    return engine_submit_internal(e, spec, NULL, 0, now_ns, id, err);
}

/* Fills plan and out from a dry run's resolution (engine_resolve_task). */
static int plan_fill(sluice_engine *e, const sluice_task_spec *spec, const etype *type,
                     int64_t units, int64_t now, sluice_task_plan *plan, sluice_charge *out,
                     size_t max, sluice_submit_error *err)
{
    link_spec stack[STACK_LINKS], *links = stack;
    size_t nlinks = type->pol.nlimits;
    int rc;

    if (nlinks > STACK_LINKS) {
        links = alloc_calloc(nlinks, sizeof *links);
        if (!links)
            return SLUICE_ENOMEM;
    }
    rc = resolve_spec(e, type, spec, units, now, links, &nlinks, err->message, sizeof err->message);
    if (rc == SLUICE_OK) {
        plan->priority = spec->has_priority ? spec->priority : type->pol.priority;
        plan->units = units;
        plan->lease_ns = type->pol.lease_ns;
        plan->retry = type->pol.retry;
        plan->charge_redelivery = type->pol.charge_redelivery;
        plan->fair = ready_fair_limit(type) != NULL;
        plan->fair_link = -1;
        for (size_t i = 0; i < nlinks && plan->fair; i++)
            if (links[i].lim == ready_fair_limit(type)) { /* ready.c's tenant_of */
                plan->fair_link = (int)i;
                break;
            }
        for (size_t i = 0; i < nlinks && i < max; i++) {
            const link_spec *l = &links[i];
            sluice_charge *c = &out[i];

            introspect_charge(c, l->lim, l->tier, l->key, l->keylen, l->units);
            /* As gate_settle decides for a charged link (a concurrency link holds, never
             * charges). */
            c->settles = c->kind != SLUICE_CONCURRENCY &&
                         ((l->flags & LINK_SETTLE) != 0 || c->kind == SLUICE_QUOTA);
        }
        rc = (int)nlinks;
    }
    if (links != stack)
        alloc_free(links);
    return rc;
}

int sluice_engine_resolve_task(sluice_engine *e, const sluice_task_spec *spec, int64_t now_ns,
                               sluice_task_plan *plan, sluice_charge *out, size_t max,
                               sluice_submit_error *err)
{
    sluice_submit_error scratch;
    int64_t units;
    etype *type;
    int rc;

    if (!err)
        err = &scratch;
    memset(err, 0, sizeof *err);
    memset(plan, 0, sizeof *plan);
    if (spec && (spec->lease_limit || spec->lease_id)) {
        msgf(err->message, sizeof err->message, "%s", "a group slot (LEASE) is not resolved here");
        return SLUICE_EINVAL;
    }
    rc = spec_check(spec, &units, err);
    if (rc != SLUICE_OK)
        return rc;
    rc = registry_type_for_submit(e, spec->type, &type, err->message, sizeof err->message);
    if (rc != SLUICE_OK)
        return rc;
    rc = plan_fill(e, spec, type, units, now_ns, plan, out, max, err);
    if (rc == SLUICE_ENOMEM)
        msgf(err->message, sizeof err->message, "%s", "out of memory");
    /* An undeclared type made for this call goes again (its lease and retries are copied). */
    registry_type_release(e, type);
    return rc;
}

/* ---- Views ----------------------------------------------------------------------------------- */

int sluice_engine_task_info(const sluice_engine *e, uint64_t id, sluice_task_info *out)
{
    const task *t = task_by_id(e, id);

    memset(out, 0, sizeof *out);
    if (!t)
        return SLUICE_ENOTFOUND;
    out->id = t->id;
    out->state = (sluice_task_state)t->state;
    out->type = t->type->pol.name;
    out->payload = t->payload ? t->payload : "{}";
    out->payload_len = t->payload ? t->payload_len : 2;
    out->task_key = t->task_key;
    out->units = t->units;
    out->priority = t->priority;
    out->attempt = t->attempt;
    out->submitted_ns = t->submitted_ns;
    out->not_before_ns = t->not_before_ns;
    if (t->state == SLUICE_TASK_RUNNING)
        out->lease_until_ns = t->due_ns;
    if (t->state == SLUICE_TASK_FAILED) {
        gate_denial(t, &out->failure);
        if (t->fail_message)
            snprintf(out->fail_message, sizeof out->fail_message, "%s", t->fail_message);
        else if (out->failure.limit && out->failure.attempted)
            snprintf(out->fail_message, sizeof out->fail_message,
                     "%s by limit \"%s\" (key \"%s\"): %" PRId64 " of %" PRId64 " spent, %" PRId64
                     " more asked",
                     sluice_fail_reason_name(out->failure.reason), out->failure.limit,
                     out->failure.key, out->failure.current, out->failure.limit_value,
                     out->failure.attempted);
        else if (out->failure.limit)
            snprintf(out->fail_message, sizeof out->fail_message, "%s by limit \"%s\" (key \"%s\")",
                     sluice_fail_reason_name(out->failure.reason), out->failure.limit,
                     out->failure.key);
        else
            snprintf(out->fail_message, sizeof out->fail_message, "%s",
                     sluice_fail_reason_name(out->failure.reason));
    }
    return SLUICE_OK;
}

/* The seconds from now to at, for sentences. Saturating: the times a caller passes may lie
 * anywhere in the int64 range (engine.h, "Time"), so their difference may not fit it. */
static double secs(int64_t at, int64_t now)
{
    return (double)sat_sub_i64(at, now) / 1e9;
}

/* Appends why the key waited on paces slower than its limit says: its adaptive rate was
 * lowered by its upstream's 429s (sluice_limit_backoff) and has not recovered yet. */
static void explain_adapted(const waitq *q, int64_t now, sluice_explanation *out)
{
    const sluice_limit *core = registry_core(q->lim, q->tier, q->key, q->keylen);
    const sluice_limit_def *def = sluice_limit_get_def(core);
    char per[SLUICE_SPEC_DURATION_MAX_LEN], every[SLUICE_SPEC_DURATION_MAX_LEN];
    int64_t permits, since;
    size_t len = strlen(out->text);

    if (def->kind != SLUICE_RATE || def->decrease_den == 0 ||
        sluice_limit_key_rate(core, q->key, q->keylen, now, &permits, &since) != SLUICE_OK ||
        permits >= def->limit)
        return;
    sluice_spec_format_duration(def->period_ns, per, sizeof per);
    sluice_spec_format_duration(def->recover_ns, every, sizeof every);
    snprintf(out->text + len, sizeof out->text - len,
             " Its adaptive rate is %" PRId64 "/%s (configured %" PRId64 "/%s), lowered by its "
             "upstream's 429s, the last %.3f s ago; it regains %" PRId64 "%% every %s.",
             permits, per, def->limit, per, secs(now, since), def->recover_pct, every);
}

static void explain_parked(const task *t, int64_t now, sluice_explanation *out)
{
    const waitq *q = t->wq;
    int64_t units_ahead;

    park_position(t, &out->position, &units_ahead);
    out->limit = q->lim->pol.name;
    out->key = q->key;
    out->queue_length = q->tasks.n;
    out->wake_ns = q->wake_ns;
    /* The same estimate the horizon check of a task parking behind others uses (dispatch.c). */
    out->estimated_start_ns = park_eta(q, t, t->park_link, now);
    if (out->estimated_start_ns == SLUICE_NEVER)
        snprintf(out->text, sizeof out->text,
                 "Parked on limit \"%s\" key \"%s\" with %zu task(s) ahead; the limit cannot "
                 "grant it as things stand.",
                 out->limit, out->key, out->position);
    else
        snprintf(out->text, sizeof out->text,
                 "Parked on limit \"%s\" key \"%s\" with %zu task(s) ahead of %zu; the key wakes "
                 "in %.3f s and this task should start in about %.3f s.",
                 out->limit, out->key, out->position, out->queue_length, secs(q->wake_ns, now),
                 secs(out->estimated_start_ns > now ? out->estimated_start_ns : now, now));
    explain_adapted(q, now, out);
}

/* Appends to the text which shadow limit would have denied the task's last grant: its
 * would-be denial was counted, not enforced. */
static void explain_shadow(const task *t, sluice_explanation *out)
{
    for (uint16_t i = 0; i < t->nlinks; i++) {
        const task_link *l = &t->links[i];
        size_t len = strlen(out->text);

        if (!(l->flags & LINK_SHADOW))
            continue;
        snprintf(out->text + len, sizeof out->text - len,
                 " Shadow limit \"%s\" (key \"%s\") would have denied its start; it was let "
                 "through and counted as shadow_denied.",
                 l->lim->pol.name, l->key);
        return;
    }
}

/* Appends to the text the group slot an unfinished task runs under, or that its group ended
 * (read with sluice_lease_check: the task leaves the group for good at its next gate). */
static void explain_group(const task *t, int64_t now, sluice_explanation *out)
{
    const task_link *l;
    size_t len = strlen(out->text);
    int live;

    if (t->group_link == LINK_NONE)
        return;
    l = &t->links[t->group_link];
    live = !l->lim->dead &&
           sluice_lease_check(registry_core(l->lim, l->tier, l->key, l->keylen), t->group_lease,
                              l->key, l->keylen, now, NULL) == SLUICE_OK;
    if (live)
        snprintf(out->text + len, sizeof out->text - len,
                 " Group slot: it runs under its producer's lease of \"%s\".", l->lim->pol.name);
    else
        snprintf(out->text + len, sizeof out->text - len,
                 " Its group's lease of \"%s\" ended: it takes its own unit.", l->lim->pol.name);
}

int sluice_engine_explain(const sluice_engine *e, uint64_t id, int64_t now_ns,
                          sluice_explanation *out)
{
    const task *t = task_by_id(e, id);
    int64_t now = now_ns; /* a read: the limits' estimates view their clamp and move nothing */
    size_t fkeylen = 0, fready = 0, fflows = 0;
    const char *fkey = NULL, *flim = NULL;

    memset(out, 0, sizeof *out);
    if (!t)
        return SLUICE_ENOTFOUND;
    out->state = (sluice_task_state)t->state;
    switch ((sluice_task_state)t->state) {
    case SLUICE_TASK_PARKED:
        explain_parked(t, now, out);
        explain_group(t, now, out);
        break;
    case SLUICE_TASK_QUEUED:
        if (t->flags & TASK_DELAYED) {
            out->estimated_start_ns = t->due_ns;
            snprintf(out->text, sizeof out->text,
                     "Queued, held back until %.3f s from now (not_before or retry backoff); it is "
                     "gated when a worker polls after that.",
                     secs(t->due_ns, now));
        } else if (ready_flow_info(t, &flim, &fkey, &fkeylen, &fready, &fflows)) {
            /* Fair dispatch: its turn depends on its key's share, not on the whole backlog. */
            out->estimated_start_ns = now;
            snprintf(out->text, sizeof out->text,
                     "Queued and due; type \"%s\" shares workers fairly between the keys of "
                     "limit \"%s\": key \"%.*s\" has %zu task(s) ready, and %zu key(s) take "
                     "turns (%zu task(s) of its type are ready).",
                     t->type->pol.name, flim, (int)(fkeylen > 64 ? 64 : fkeylen), fkey, fready,
                     fflows, t->type->nready);
        } else {
            out->estimated_start_ns = now;
            snprintf(out->text, sizeof out->text,
                     "Queued and due: the next worker polling type \"%s\" takes it through the "
                     "gate (%zu task(s) of its type are ready).",
                     t->type->pol.name, t->type->nready);
        }
        explain_group(t, now, out);
        break;
    case SLUICE_TASK_RUNNING:
        snprintf(out->text, sizeof out->text,
                 "Running (attempt %d); its lease ends in %.3f s unless the worker acks, fails or "
                 "touches it.",
                 t->attempt, secs(t->due_ns, now));
        explain_shadow(t, out);
        explain_group(t, now, out);
        break;
    case SLUICE_TASK_DONE:
        snprintf(out->text, sizeof out->text, "Done after %d attempt(s).", t->attempt);
        explain_shadow(t, out);
        break;
    case SLUICE_TASK_CANCELLED:
        snprintf(out->text, sizeof out->text, "Cancelled before it ran.");
        break;
    case SLUICE_TASK_FAILED: {
        sluice_denial d;

        gate_denial(t, &d);
        if (d.limit)
            snprintf(out->text, sizeof out->text,
                     "Failed (%s): limit \"%s\" (%s) refused key \"%s\".",
                     sluice_fail_reason_name(d.reason), d.limit, d.kind, d.key);
        else
            snprintf(out->text, sizeof out->text, "Failed (%s) after %d attempt(s).",
                     sluice_fail_reason_name(d.reason), t->attempt);
        break;
    }
    }
    return SLUICE_OK;
}

void sluice_engine_get_stats(const sluice_engine *e, sluice_engine_stats *out)
{
    size_t pos = 0;
    const etype *t;

    *out = e->st;
    out->queued = e->nqueued;
    out->parked = e->nparked;
    out->running = e->nrunning;
    out->delayed = e->ndelayed;
    /* Tasks and payloads, plus the index slots that hold them. */
    out->tasks_bytes = e->task_bytes + ptab_bytes(&e->ids) + ptab_bytes(&e->task_keys) +
                       heap_bytes(&e->timers) + park_bytes(e);
    while ((t = ptab_next(&e->types, &pos)) != NULL)
        out->tasks_bytes += ready_bytes(t);
}

const char *sluice_task_state_name(sluice_task_state s)
{
    switch (s) {
    case SLUICE_TASK_QUEUED:
        return "queued";
    case SLUICE_TASK_PARKED:
        return "parked";
    case SLUICE_TASK_RUNNING:
        return "running";
    case SLUICE_TASK_DONE:
        return "done";
    case SLUICE_TASK_FAILED:
        return "failed";
    case SLUICE_TASK_CANCELLED:
        return "cancelled";
    }
    return "?";
}

const char *sluice_fail_reason_name(sluice_fail_reason r)
{
    switch (r) {
    case SLUICE_FAIL_RATELIMITED:
        return "ratelimited";
    case SLUICE_FAIL_HORIZON:
        return "horizon";
    case SLUICE_FAIL_NEVER:
        return "never";
    case SLUICE_FAIL_ATTEMPTS:
        return "attempts";
    case SLUICE_FAIL_DEAD:
        return "dead";
    case SLUICE_FAIL_SKIPPED:
        return "skipped";
    case SLUICE_FAIL_NONE:
        break;
    }
    return "none";
}

/* ---- Recurring ------------------------------------------------------------------------------- */

int sluice_engine_add_recurring(sluice_engine *e, const sluice_recurring_spec *spec, int64_t now_ns,
                                char *msg, size_t msglen)
{
    return recurring_add(e, spec, now_ns, msg, msglen);
}

int sluice_engine_del_recurring(sluice_engine *e, const char *name, int64_t now_ns)
{
    return recurring_del(e, name, now_ns);
}

int sluice_engine_recurring_info(const sluice_engine *e, const char *name,
                                 sluice_recurring_info *out)
{
    return recurring_info(e, name, out);
}

void sluice_engine_check_recurring_pace(sluice_engine *e, const sluice_recurring_spec *spec,
                                        int64_t now_ns)
{
    recurring_check_pace(e, spec, now_ns);
}
