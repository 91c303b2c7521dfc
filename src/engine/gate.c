/* SPDX-License-Identifier: MIT */
/*
 * The gate: see gate.h.
 */
#include "engine/gate.h"

#include <string.h>

#include "base/alloc.h"
#include "base/grow.h"
#include "base/hash.h"
#include "base/ptab.h"
#include "base/quote.h"
#include "base/sat.h"
#include "engine/park.h"
#include "engine/registry.h"
#include "engine/task.h"
#include "sluice/error.h"

/* ---- Scratch and link selection -------------------------------------------------------------- */

int gate_reserve(sluice_engine *e, size_t nlinks)
{
    sluice_chain_link *chain;
    sluice_decision *dec;
    uint16_t *map;

    if (nlinks <= e->chain_cap)
        return SLUICE_OK;
    chain = alloc_realloc(e->chain, nlinks * sizeof *chain);
    if (!chain)
        return SLUICE_ENOMEM;
    e->chain = chain;
    dec = alloc_realloc(e->decisions, nlinks * sizeof *dec);
    if (!dec)
        return SLUICE_ENOMEM;
    e->decisions = dec;
    map = alloc_realloc(e->chain_map, nlinks * sizeof *map);
    if (!map)
        return SLUICE_ENOMEM;
    e->chain_map = map;
    e->chain_cap = nlinks;
    return SLUICE_OK;
}

static int pays_in_full(const task *t)
{
    return (t->flags & (TASK_HOLDS_GRANT | TASK_FREE_RETRY)) == 0;
}

static sluice_limit_kind link_kind(const task_link *l)
{
    return sluice_limit_get_def(registry_core(l->lim, l->tier, l->key, l->keylen))->kind;
}

int gate_link_active(const task *t, uint16_t i)
{
    const task_link *l = &t->links[i];

    if (l->lim->dead || i == t->group_link)
        return 0;
    return pays_in_full(t) || link_kind(l) == SLUICE_CONCURRENCY;
}

waitq *gate_blocked(const sluice_engine *e, const task *t, uint16_t *link)
{
    if (e->waitqs.n == 0)
        return NULL;
    for (uint16_t i = 0; i < t->nlinks; i++) {
        const task_link *l = &t->links[i];
        waitq *q;

        if (!gate_link_active(t, i))
            continue;
        q = park_find(e, l->lim, l->tier, l->key, l->keylen);
        if (q && task_more_urgent(heap_top(&q->tasks), t)) {
            *link = i;
            return q;
        }
    }
    return NULL;
}

/* ---- Group slots ----------------------------------------------------------------------------- */

int gate_group_resolve(sluice_engine *e, const link_spec *links, size_t n, const char *limit,
                       uint64_t lease_id, uint64_t tag, int64_t now, uint16_t *link, char *msg,
                       size_t msglen)
{
    *link = LINK_NONE;
    if (!limit)
        return SLUICE_OK;
    for (size_t i = 0; i < n; i++) {
        const link_spec *l = &links[i];
        sluice_limit *core;
        int rc;

        if (strcmp(l->lim->pol.name, limit) != 0 || l->lim->dead)
            continue;
        core = registry_core(l->lim, l->tier, l->key, l->keylen);
        /* A tiered limit's tiers are cores of their own, each issuing the same lease ids: a
         * lease could not say which tier it is of (LEASE.ACQUIRE refuses them too). */
        if (l->lim->pol.ntiers) {
            msgf(msg, msglen, "limit \"%s\" is tiered: a lease cannot stand in for it", limit);
            return SLUICE_EINVAL;
        }
        if (sluice_limit_get_def(core)->kind != SLUICE_CONCURRENCY) {
            msgf(msg, msglen,
                 "limit \"%s\" is not a concurrency limit: a lease cannot stand in for it", limit);
            return SLUICE_EINVAL;
        }
        rc = sluice_lease_check(core, lease_id, l->key, l->keylen, now, NULL);
        if (rc == SLUICE_OK) {
            uint64_t have;

            /* Ids are unique within one life of the core only: after a restart a task's record
             * may name an id issued again, to someone else, under another tag. */
            if (sluice_lease_tag(core, lease_id, now, &have) != SLUICE_OK || have != tag)
                rc = SLUICE_ESTALE;
        }
        if (rc == SLUICE_ENOTFOUND) {
            msgf(msg, msglen, "the lease is on another key of limit \"%s\" than this task's",
                 limit);
            return SLUICE_EINVAL;
        }
        if (rc != SLUICE_OK) {
            msgf(msg, msglen, "the lease on limit \"%s\" is gone (it expired or was released)",
                 limit);
            return SLUICE_ESTALE;
        }
        *link = (uint16_t)i;
        return SLUICE_OK;
    }
    (void)e;
    msgf(msg, msglen, "the task's type has no limit \"%s\" for its lease to stand in for", limit);
    return SLUICE_EINVAL;
}

void gate_group_check(sluice_engine *e, task *t, int64_t now)
{
    const task_link *l;

    (void)e;
    if (t->group_link == LINK_NONE)
        return;
    l = &t->links[t->group_link];
    if (!l->lim->dead &&
        sluice_lease_check(registry_core(l->lim, l->tier, l->key, l->keylen), t->group_lease,
                           l->key, l->keylen, now, NULL) == SLUICE_OK)
        return;
    /* The group ended (released, expired, or its limit replaced): from now on the task asks its
     * own unit, like any other task. A lease never comes back, so this is for good. */
    t->group_link = LINK_NONE;
    t->group_lease = 0;
    t->group_tag = 0;
}

/* ---- Events ---------------------------------------------------------------------------------- */

static void emit(sluice_engine *e, sluice_event_kind kind, const task *t, const task_link *l,
                 int64_t wanted, int64_t now)
{
    sluice_event ev;

    memset(&ev, 0, sizeof ev);
    ev.kind = kind;
    ev.at_ns = now;
    ev.limit = l->lim->pol.name;
    ev.key = l->key;
    ev.type = t->type->pol.name;
    ev.count = 1;
    ev.wanted = wanted;
    engine_emit(e, &ev, now);
}

/* A shadow limit would have denied link `link` of t: emit SHADOW_DENIED with the time the
 * enforced limit would have let it through. Counted by the core limit itself. */
static void shadow_denied(sluice_engine *e, const task *t, uint16_t link, const sluice_decision *d,
                          int64_t now)
{
    const task_link *l = &t->links[link];
    sluice_event ev;

    memset(&ev, 0, sizeof ev);
    ev.kind = SLUICE_EVENT_SHADOW_DENIED;
    ev.at_ns = now;
    ev.limit = l->lim->pol.name;
    ev.key = l->key;
    ev.type = t->type->pol.name;
    ev.count = 1;
    ev.next_slot_ns =
        d->retry_after_ns == SLUICE_NEVER ? SLUICE_NEVER : sat_add_i64(now, d->retry_after_ns);
    engine_emit(e, &ev, now);
}

/* ceil(budget * pct / 100) without overflow, for budget >= 0. */
static int64_t threshold(int64_t budget, int64_t pct)
{
    return budget / 100 * pct + (budget % 100 * pct + 99) / 100;
}

/* Emits BUDGET for the 80% and 100% marks crossed between two spending levels. */
static void budget_marks(sluice_engine *e, const task *t, const task_link *l, int64_t budget,
                         int64_t before, int64_t after, int64_t now)
{
    static const int64_t marks[] = {80, 100};

    for (size_t i = 0; i < sizeof marks / sizeof marks[0]; i++) {
        int64_t th = threshold(budget, marks[i]);

        if (before < th && after >= th)
            emit(e, SLUICE_EVENT_BUDGET, t, l, marks[i], now);
    }
}

/* A quota key's spending now, read with a peek. */
static int64_t quota_spent(sluice_limit *core, const task_link *l, int64_t now)
{
    sluice_decision d;

    if (sluice_limit_decide(core, l->key, l->keylen, 1, now, SLUICE_PEEK, &d) != SLUICE_OK)
        return 0;
    /* A shadow quota answers a full key allowed: only a real grant took the unit peeked. */
    return d.limit - d.remaining - (d.allowed && !d.shadow_denied ? 1 : 0);
}

/* ---- Evaluation ------------------------------------------------------------------------------ */

/* The first active link whose limit refuses new keys and is at its cap. */
static uint16_t full_link(const sluice_engine *e, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        const sluice_limit_def *def = sluice_limit_get_def(e->chain[k].limit);
        sluice_limit_stats st;

        if (def->key_overflow != SLUICE_KEYS_REFUSE)
            continue;
        sluice_limit_get_stats(e->chain[k].limit, &st);
        if (st.keys >= def->max_keys)
            return e->chain_map[k];
    }
    return e->chain_map[0];
}

static void classify(sluice_engine *e, const task *t, size_t n, const sluice_chain_result *res,
                     gate_result *r)
{
    size_t reject = n, never = n, horizon = n;

    for (size_t k = 0; k < n; k++) {
        const sluice_decision *d = &e->decisions[k];
        const task_link *l = &t->links[e->chain_map[k]];
        const sluice_limit_def *def = sluice_limit_get_def(e->chain[k].limit);

        if (d->allowed)
            continue;
        if (reject == n && l->lim->pol.overflow == SLUICE_OVERFLOW_REJECT)
            reject = k;
        if (never == n && d->retry_after_ns == SLUICE_NEVER)
            never = k;
        if (horizon == n && def->kind != SLUICE_CONCURRENCY && d->retry_after_ns > def->horizon_ns)
            horizon = k;
    }
    r->verdict = GATE_FAIL;
    if (reject < n) {
        r->reason = SLUICE_FAIL_RATELIMITED;
    } else if (never < n) {
        r->reason = SLUICE_FAIL_NEVER;
        reject = never;
    } else if (horizon < n) {
        r->reason = SLUICE_FAIL_HORIZON;
        reject = horizon;
    } else {
        r->verdict = GATE_PARK;
        r->link = e->chain_map[res->denied_by];
        r->retry_after_ns = res->retry_after_ns;
        return;
    }
    r->link = e->chain_map[reject];
    r->retry_after_ns = e->decisions[reject].retry_after_ns;
}

int gate_eval(sluice_engine *e, task *t, int64_t now, gate_result *r)
{
    int full = pays_in_full(t);
    sluice_chain_result res;
    size_t n = 0;
    int rc;

    memset(r, 0, sizeof *r);
    r->link = LINK_NONE;
    for (uint16_t i = 0; i < t->nlinks; i++) {
        task_link *l = &t->links[i];

        if (!gate_link_active(t, i))
            continue;
        e->chain[n].limit = registry_core(l->lim, l->tier, l->key, l->keylen);
        e->chain[n].key = l->key;
        e->chain[n].keylen = l->keylen;
        e->chain[n].units = l->units;
        e->chain_map[n] = i;
        n++;
    }
    if (n == 0) {
        r->verdict = GATE_GRANTED;
        if (full)
            t->granted_ns = now;
        t->flags &= (uint8_t)~TASK_FREE_RETRY;
        return SLUICE_OK;
    }
    rc = sluice_chain_decide(e->chain, n, now, 0, e->decisions, &res);
    if (rc == SLUICE_EBUSY) {
        r->verdict = GATE_PARK;
        r->key_cap = 1;
        r->link = full_link(e, n);
        r->retry_after_ns = GATE_KEY_CAP_WAIT_NS;
        emit(e, SLUICE_EVENT_KEY_CAP, t, &t->links[r->link], 0, now);
        for (size_t k = 0; k < n; k++)
            gate_acct_add(e, t, e->chain_map[k], 0);
        return SLUICE_OK;
    }
    if (rc != SLUICE_OK)
        return rc;
    for (size_t k = 0; k < n; k++) {
        gate_acct_add(e, t, e->chain_map[k], res.allowed);
        if (e->decisions[k].shadow_denied)
            shadow_denied(e, t, e->chain_map[k], &e->decisions[k], now);
    }
    if (!res.allowed) {
        classify(e, t, n, &res, r);
        return SLUICE_OK;
    }
    r->verdict = GATE_GRANTED;
    for (size_t k = 0; k < n; k++) {
        task_link *l = &t->links[e->chain_map[k]];
        const sluice_decision *d = &e->decisions[k];
        sluice_limit_kind kind = sluice_limit_get_def(e->chain[k].limit)->kind;

        l->flags &= (uint8_t)~LINK_SHADOW;
        if (d->shadow_denied) { /* let through uncharged: no lease, nothing to settle */
            l->flags |= LINK_SHADOW;
            continue;
        }
        if (kind == SLUICE_CONCURRENCY) {
            l->lease_id = d->lease_id;
            continue;
        }
        l->flags |= LINK_CHARGED;
        if (kind == SLUICE_QUOTA && !d->untracked)
            budget_marks(e, t, l, d->limit, d->limit - d->remaining - l->units,
                         d->limit - d->remaining, now);
    }
    if (full)
        t->granted_ns = now;
    t->flags &= (uint8_t)~TASK_FREE_RETRY;
    return SLUICE_OK;
}

/* ---- After the grant ------------------------------------------------------------------------- */

void gate_release(sluice_engine *e, task *t, int64_t now)
{
    for (uint16_t i = 0; i < t->nlinks; i++) {
        task_link *l = &t->links[i];

        if (!l->lease_id)
            continue;
        if (!l->lim->dead)
            sluice_lease_release(registry_core(l->lim, l->tier, l->key, l->keylen), l->lease_id,
                                 now);
        l->lease_id = 0;
        park_wake_key(e, l->lim, l->tier, l->key, l->keylen, now);
    }
}

void gate_renew(sluice_engine *e, task *t, int64_t ttl_ns, int64_t now)
{
    (void)e;
    for (uint16_t i = 0; i < t->nlinks; i++) {
        task_link *l = &t->links[i];

        if (l->lease_id && !l->lim->dead)
            sluice_lease_renew(registry_core(l->lim, l->tier, l->key, l->keylen), l->lease_id,
                               ttl_ns, now, NULL);
    }
}

void gate_settle(sluice_engine *e, task *t, int64_t cost, int64_t now)
{
    for (uint16_t i = 0; i < t->nlinks; i++) {
        task_link *l = &t->links[i];
        sluice_limit *core;
        sluice_limit_kind kind;
        int64_t before = 0;

        if (!(l->flags & LINK_CHARGED) || l->lim->dead)
            continue;
        core = registry_core(l->lim, l->tier, l->key, l->keylen);
        kind = sluice_limit_get_def(core)->kind;
        if (!(l->flags & LINK_SETTLE) && kind != SLUICE_QUOTA)
            continue;
        if (kind == SLUICE_QUOTA)
            before = quota_spent(core, l, now);
        if (sluice_limit_settle(core, l->key, l->keylen, t->granted_ns, l->units, cost, now) !=
            SLUICE_OK)
            continue;
        if (kind == SLUICE_QUOTA)
            budget_marks(e, t, l, sluice_limit_get_def(core)->limit, before,
                         quota_spent(core, l, now), now);
    }
}

void gate_clear_charges(task *t)
{
    for (uint16_t i = 0; i < t->nlinks; i++)
        t->links[i].flags &= (uint8_t)~LINK_CHARGED;
}

void gate_denial(const task *t, sluice_denial *out)
{
    const task_link *l;
    const sluice_limit_def *def;

    memset(out, 0, sizeof *out);
    out->reason = (sluice_fail_reason)t->fail_reason;
    out->retry_after_ns = t->retry_after_ns;
    if (t->fail_link == LINK_NONE)
        return;
    l = &t->links[t->fail_link];
    def = sluice_limit_get_def(registry_core(l->lim, l->tier, l->key, l->keylen));
    out->limit = l->lim->pol.name;
    out->kind = sluice_limit_kind_name(def->kind);
    if (l->lim->pol.ntiers && l->tier < l->lim->pol.ntiers)
        out->tier = l->lim->pol.tiers[l->tier].name;
    out->key = l->key;
    out->limit_value = def->limit;
    if (def->kind == SLUICE_RATE || def->kind == SLUICE_WINDOW || def->kind == SLUICE_SLIDING)
        out->window_ns = def->period_ns;
    if (def->kind == SLUICE_QUOTA) {
        sluice_quota_usage u;

        /* Read at the limit's own newest time (now 0 is clamped up to it): a read, no change. */
        if (sluice_limit_quota_usage(registry_core(l->lim, l->tier, l->key, l->keylen), l->key,
                                     l->keylen, 0, &u) == SLUICE_OK)
            out->current = u.spent;
        out->attempted = l->units;
    }
}

/* ---- THROTTLED accounting -------------------------------------------------------------------- */

static uint64_t acct_hash(const task_link *l)
{
    return hash_bytes_secret(l->key, l->keylen, (uint64_t)(uintptr_t)l->lim ^ l->tier);
}

/* The lookup key of an accounting entry. */
typedef struct acct_key {
    const elimit *lim;
    uint16_t tier;
    const char *key;
    size_t keylen;
} acct_key;

static int acct_eq(const void *p, const void *key)
{
    const acct_entry *a = p;
    const acct_key *k = key;

    return a->lim == k->lim && a->tier == k->tier && a->keylen == k->keylen &&
           (k->keylen == 0 || memcmp(a->key, k->key, k->keylen) == 0);
}

/* Makes room for one more entry. When the array moves, its index is refiled (reserved first,
 * so that cannot fail). Returns 0 or SLUICE_ENOMEM (nothing changed that matters). */
static int acct_reserve(sluice_engine *e)
{
    size_t cap = e->acct_cap;
    int rc;

    rc = ptab_reserve(&e->acct_index, 1);
    if (rc != SLUICE_OK)
        return rc;
    rc = grow_array(&e->acct, &e->acct_cap, e->acct_n + 1, sizeof *e->acct, 64);
    if (rc != SLUICE_OK || cap == e->acct_cap)
        return rc;
    ptab_clear(&e->acct_index);
    for (size_t k = 0; k < e->acct_n; k++)
        (void)ptab_insert(&e->acct_index, e->acct[k].hash, &e->acct[k]);
    return SLUICE_OK;
}

void gate_acct_add(sluice_engine *e, const task *t, uint16_t link, int granted)
{
    const task_link *l = &t->links[link];
    acct_key k = {l->lim, l->tier, l->key, l->keylen};
    uint64_t hash = acct_hash(l);
    acct_entry *a = ptab_find(&e->acct_index, hash, &k, acct_eq);

    if (!a) {
        if (acct_reserve(e) != SLUICE_OK)
            return; /* accounting is best effort */
        a = &e->acct[e->acct_n++];
        a->lim = l->lim;
        a->tier = l->tier;
        a->key = l->key;
        a->keylen = l->keylen;
        a->hash = hash;
        a->type = t->type->pol.name;
        a->wanted = a->granted = 0;
        (void)ptab_insert(&e->acct_index, hash, a); /* reserved */
    }
    a->wanted++;
    if (granted)
        a->granted++;
}

void gate_acct_flush(sluice_engine *e, int64_t now)
{
    for (size_t k = 0; k < e->acct_n; k++) {
        acct_entry *a = &e->acct[k];

        if (a->granted < a->wanted) {
            sluice_event ev;

            memset(&ev, 0, sizeof ev);
            ev.kind = SLUICE_EVENT_THROTTLED;
            ev.at_ns = now;
            ev.limit = a->lim->pol.name;
            ev.key = a->key;
            ev.type = a->type;
            ev.count = 1;
            ev.wanted = a->wanted;
            ev.granted = a->granted;
            engine_emit(e, &ev, now);
        }
        /* One removal per entry, not a clear of the whole index: a poll costs what it saw,
         * whatever the largest poll before it saw. */
        (void)ptab_remove(&e->acct_index, a->hash, a);
    }
    e->acct_n = 0;
}

void gate_free(sluice_engine *e)
{
    alloc_free(e->chain);
    alloc_free(e->decisions);
    alloc_free(e->chain_map);
    alloc_free(e->acct);
    ptab_free(&e->acct_index);
    e->chain = NULL;
    e->decisions = NULL;
    e->chain_map = NULL;
    e->acct = NULL;
    e->chain_cap = e->acct_cap = e->acct_n = 0;
}
