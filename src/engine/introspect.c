/* SPDX-License-Identifier: MIT */
/*
 * Introspection for monitoring: per-type counters and tasks by state, per-limit figures, the
 * keys of a limit with the most parked tasks, and what a task's grant charged on each link of
 * its chain (read straight from its links). See introspect.h for the counters and engine.h
 * ("Introspection", sluice_engine_task_charges) for the calls.
 *
 * Figures that the engine does not keep as it goes are computed by a walk when asked: tasks by
 * state per type walk every task kept (O(tasks)), a limit's parked figures walk its wait queues
 * (O(parked keys)). A monitoring scrape every second or so pays that; the decision path pays
 * nothing for it.
 */
#include "engine/introspect.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/sat.h"
#include "engine/engine_impl.h"
#include "engine/registry.h"
#include "engine/task.h"
#include "sluice/error.h"

#define NS_MS  SLUICE_NS_PER_MS
#define NS_SEC SLUICE_NS_PER_SEC

/* From 1 ms (a task granted at once) to an hour (the default reservation horizon). */
const int64_t sluice_wait_bounds_ns[SLUICE_WAIT_BUCKETS] = {
    1 * NS_MS,    5 * NS_MS,    25 * NS_MS,    100 * NS_MS,   250 * NS_MS,  1 * NS_SEC,
    5 * NS_SEC,   15 * NS_SEC,  30 * NS_SEC,   60 * NS_SEC,   120 * NS_SEC, 300 * NS_SEC,
    600 * NS_SEC, 900 * NS_SEC, 1800 * NS_SEC, 3600 * NS_SEC,
};

/* ---- Hooks ------------------------------------------------------------------------------- */

void introspect_submitted(task *t)
{
    t->type->counts.submitted++;
}

void introspect_delivered(task *t, int64_t now)
{
    type_counts *c = &t->type->counts;
    int64_t due, wait;
    size_t b = 0;

    c->delivered++;
    if (t->attempt != 1)
        return;
    /* The wait starts when the task became due: a DELAY is asked for, not waited. */
    due = t->not_before_ns > t->submitted_ns ? t->not_before_ns : t->submitted_ns;
    /* Saturating: a caller may pass times far apart (engine.h, "Time"), and a wait past the
     * int64 range is the longest wait, not a negative one. */
    wait = now > due ? sat_sub_i64(now, due) : 0;
    while (b < SLUICE_WAIT_BUCKETS && wait > sluice_wait_bounds_ns[b])
        b++;
    c->wait[b]++;
    c->wait_count++;
    c->wait_sum_ns = sat_add_u64(c->wait_sum_ns, (uint64_t)wait);
}

void introspect_retried(task *t)
{
    t->type->counts.retried++;
}

void introspect_finished(task *t, sluice_task_state state, sluice_fail_reason reason,
                         uint16_t fail_link)
{
    type_counts *c = &t->type->counts;

    switch (state) {
    case SLUICE_TASK_DONE:
        c->done++;
        break;
    case SLUICE_TASK_CANCELLED:
        c->cancelled++;
        break;
    case SLUICE_TASK_FAILED:
        c->failed++;
        if (fail_link != LINK_NONE && fail_link < t->nlinks &&
            (size_t)reason <= (size_t)SLUICE_FAIL_SKIPPED)
            t->links[fail_link].lim->counts.rejected[reason]++;
        break;
    default:
        break;
    }
}

/* ---- Types ------------------------------------------------------------------------------- */

typedef struct type_entry {
    const etype *t;
    sluice_type_stats st;
} type_entry;

static int by_pointer(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)((const type_entry *)a)->t;
    uintptr_t y = (uintptr_t)((const type_entry *)b)->t;

    return x < y ? -1 : x > y;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const type_entry *)a)->st.name, ((const type_entry *)b)->st.name);
}

static void fill_counts(type_entry *en, const etype *t)
{
    const type_counts *c = &t->counts;

    memset(&en->st, 0, sizeof(en->st));
    en->t = t;
    en->st.name = t->pol.name;
    en->st.declared = t->declared;
    en->st.submitted = c->submitted;
    en->st.delivered = c->delivered;
    en->st.done = c->done;
    en->st.failed = c->failed;
    en->st.cancelled = c->cancelled;
    en->st.retried = c->retried;
    memcpy(en->st.wait, c->wait, sizeof(en->st.wait));
    en->st.wait_count = c->wait_count;
    en->st.wait_sum_ns = c->wait_sum_ns;
}

/* Counts one unfinished task in its type's entry. */
static void count_task(type_entry *v, size_t n, const task *tk)
{
    type_entry key;
    type_entry *en;

    key.t = tk->type;
    en = bsearch(&key, v, n, sizeof(*v), by_pointer);
    if (!en)
        return;
    switch ((sluice_task_state)tk->state) {
    case SLUICE_TASK_QUEUED:
        if (tk->flags & TASK_DELAYED)
            en->st.delayed++;
        else
            en->st.queued++;
        break;
    case SLUICE_TASK_PARKED:
        en->st.parked++;
        break;
    case SLUICE_TASK_RUNNING:
        en->st.running++;
        break;
    default:
        break;
    }
}

int sluice_engine_type_stats(const sluice_engine *e,
                             void (*fn)(const sluice_type_stats *st, void *arg), void *arg)
{
    type_entry *v;
    const etype *t;
    const task *tk;
    size_t n = 0, pos = 0;

    if (e->types.n == 0)
        return 0;
    v = alloc_calloc(e->types.n, sizeof(*v));
    if (!v)
        return SLUICE_ENOMEM;
    while (n < e->types.n && (t = ptab_next(&e->types, &pos)) != NULL)
        fill_counts(&v[n++], t);
    qsort(v, n, sizeof(*v), by_pointer);
    if (e->nunfinished > 0) {
        pos = 0;
        while ((tk = ptab_next(&e->ids, &pos)) != NULL)
            count_task(v, n, tk);
    }
    qsort(v, n, sizeof(*v), by_name);
    if (fn) {
        for (size_t i = 0; i < n; i++)
            fn(&v[i].st, arg);
    }
    alloc_free(v);
    return (int)(n > INT32_MAX ? INT32_MAX : n);
}

/* ---- Limits ------------------------------------------------------------------------------ */

static void add_core_stats(sluice_limit_stats *sum, const sluice_limit_stats *s)
{
    sum->keys += s->keys;
    sum->bytes += s->bytes;
    sum->untracked = sat_add_u64(sum->untracked, s->untracked);
    sum->refused = sat_add_u64(sum->refused, s->refused);
    sum->forgotten = sat_add_u64(sum->forgotten, s->forgotten);
    sum->hashed = sat_add_u64(sum->hashed, s->hashed);
    sum->allowed = sat_add_u64(sum->allowed, s->allowed);
    sum->denied = sat_add_u64(sum->denied, s->denied);
    sum->shadow_denied = sat_add_u64(sum->shadow_denied, s->shadow_denied);
    sum->backoffs = sat_add_u64(sum->backoffs, s->backoffs);
    sum->slowed += s->slowed;
    sum->units = sat_add_u64(sum->units, s->units);
}

int sluice_engine_limit_figures(const sluice_engine *e, const char *name, int64_t now_ns,
                                unsigned flags, sluice_limit_figures *out)
{
    const elimit *l;

    memset(out, 0, sizeof(*out));
    out->next_wake_ns = SLUICE_NEVER;
    l = registry_find_limit(e, name);
    if (!l)
        return SLUICE_ENOTFOUND;
    for (size_t i = 0; i < l->nlims; i++) {
        sluice_limit_stats st;

        sluice_limit_get_stats(l->lims[i], &st);
        add_core_stats(&out->core, &st);
        if ((flags & SLUICE_FIGURES_QUOTA) &&
            sluice_limit_get_def(l->lims[i])->kind == SLUICE_QUOTA) {
            int64_t spent = 0;

            if (sluice_limit_quota_spent(l->lims[i], now_ns, &spent, NULL) == SLUICE_OK)
                out->quota_spent = sat_add_i64(out->quota_spent, spent);
        }
    }
    for (const waitq *q = l->wqs; q; q = q->next) {
        out->parked += q->tasks.n;
        out->parked_keys++;
        if (q->wake_ns < out->next_wake_ns)
            out->next_wake_ns = q->wake_ns;
    }
    memcpy(out->rejected, l->counts.rejected, sizeof(out->rejected));
    out->shadow = l->nlims > 0 && sluice_limit_shadow(l->lims[0]);
    return SLUICE_OK;
}

int sluice_engine_quota_usage(const sluice_engine *e, const char *name, const char *tier,
                              const char *key, size_t keylen, int64_t now_ns,
                              sluice_quota_usage *out)
{
    const elimit *l;
    uint16_t ti = 0;

    memset(out, 0, sizeof *out);
    l = registry_find_limit(e, name);
    if (!l)
        return SLUICE_ENOTFOUND;
    if (l->pol.ntiers) {
        if (!tier)
            return SLUICE_EINVAL;
        while (ti < l->pol.ntiers && strcmp(l->pol.tiers[ti].name, tier) != 0)
            ti++;
        if (ti == l->pol.ntiers)
            return SLUICE_ENOTFOUND;
    } else if (tier) {
        return SLUICE_ENOTFOUND;
    }
    /* The key's own core when it has an override, as a decision would use. */
    return sluice_limit_quota_usage(registry_core(l, ti, key, keylen), key, keylen, now_ns, out);
}

/* Returns 1 when a ranks before b: more parked tasks, then the earlier wake. */
static int ranks_before(const sluice_parked_key *a, const sluice_parked_key *b)
{
    if (a->parked != b->parked)
        return a->parked > b->parked;
    return a->wake_ns < b->wake_ns;
}

int sluice_engine_top_parked(const sluice_engine *e, const char *name, sluice_parked_key *out,
                             size_t max)
{
    const elimit *l = registry_find_limit(e, name);
    size_t n = 0;

    if (!l)
        return SLUICE_ENOTFOUND;
    if (max == 0)
        return 0;
    for (const waitq *q = l->wqs; q; q = q->next) {
        sluice_parked_key k;
        size_t at;

        k.key = q->key;
        k.keylen = q->keylen;
        k.tier = l->pol.ntiers > 0 && q->tier < l->pol.ntiers ? l->pol.tiers[q->tier].name : NULL;
        k.parked = q->tasks.n;
        k.wake_ns = q->wake_ns;
        /* A bounded insertion sort: most queues lose to the last of a full list at once. */
        if (n == max && !ranks_before(&k, &out[n - 1]))
            continue;
        at = n < max ? n++ : max - 1;
        while (at > 0 && ranks_before(&k, &out[at - 1])) {
            out[at] = out[at - 1];
            at--;
        }
        out[at] = k;
    }
    return (int)n;
}

/* ---- A task's charges -------------------------------------------------------------------- */

void introspect_charge(sluice_charge *c, elimit *lim, uint16_t tier, const char *key, size_t keylen,
                       int64_t units)
{
    const sluice_limit_policy *p = &lim->pol;

    memset(c, 0, sizeof *c);
    c->limit = p->name;
    c->tier = p->ntiers > 0 && tier < p->ntiers ? p->tiers[tier].name : NULL;
    c->key = key;
    c->keylen = keylen;
    c->def = sluice_limit_get_def(registry_core(lim, tier, key, keylen));
    c->kind = c->def->kind;
    c->units = units;
}

int sluice_engine_task_charges(const sluice_engine *e, uint64_t id, sluice_charge *out, size_t max)
{
    const task *t = task_by_id(e, id);

    if (!t)
        return SLUICE_ENOTFOUND;
    for (uint16_t i = 0; i < t->nlinks && i < max; i++) {
        const task_link *l = &t->links[i];
        sluice_charge *c = &out[i];

        introspect_charge(c, l->lim, l->tier, l->key, l->keylen, l->units);
        c->charged = (l->flags & LINK_CHARGED) != 0;
        /* As gate_settle decides: task-unit links and quotas, while the limit lives. */
        c->settles = c->charged && !l->lim->dead &&
                     ((l->flags & LINK_SETTLE) != 0 || c->kind == SLUICE_QUOTA);
        c->held = l->lease_id != 0;
        c->shadow_denied = (l->flags & LINK_SHADOW) != 0;
    }
    return (int)t->nlinks;
}
