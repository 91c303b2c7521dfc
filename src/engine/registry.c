/* SPDX-License-Identifier: MIT */
/*
 * The registry of limits and types: see registry.h.
 */
#include "engine/registry.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/hash.h"
#include "engine/feed.h"
#include "engine/park.h"
#include "engine/ready.h"
#include "engine/task.h"
#include "policy/policy_check.h"
#include "sluice/error.h"
#include "base/quote.h"

/* ---- Limits ---------------------------------------------------------------------------------- */

static void free_cores(sluice_limit **lims, size_t n)
{
    if (!lims)
        return;
    for (size_t i = 0; i < n; i++)
        sluice_limit_free(lims[i]);
    alloc_free(lims);
}

static void elimit_free(elimit *l)
{
    feed_forget_limit(l);
    free_cores(l->lims, l->nlims);
    sluice_limit_policy_clear(&l->pol);
    alloc_free(l);
}

sluice_limit *registry_core(const elimit *l, uint16_t tier, const char *key, size_t keylen)
{
    if (l->pol.noverrides) {
        long i = policy_find_override(&l->pol, key, keylen);

        if (i >= 0 && (size_t)i + 1 < l->nlims)
            return l->lims[i + 1];
        return l->lims[0];
    }
    return l->lims[tier < l->nlims ? tier : l->nlims - 1];
}

void registry_limit_ref(elimit *l)
{
    l->refs++;
}

void registry_limit_unref(elimit *l)
{
    if (--l->refs == 0)
        elimit_free(l);
}

typedef struct name_ref {
    const char *name;
    size_t len;
} name_ref;

static uint64_t name_hash(const char *name, size_t len)
{
    return hash_bytes_seeded(name, len, 0x7e9e);
}

static int limit_eq(const void *p, const void *key)
{
    const elimit *l = p;
    const name_ref *k = key;

    return strlen(l->pol.name) == k->len && memcmp(l->pol.name, k->name, k->len) == 0;
}

elimit *registry_find_limit(const sluice_engine *e, const char *name)
{
    name_ref k;

    if (!name)
        return NULL;
    k.name = name;
    k.len = strlen(name);
    return ptab_find(&e->limit_index, name_hash(name, k.len), &k, limit_eq);
}

static int limit_cmp(const void *a, const void *b)
{
    return strcmp((*(elimit *const *)a)->pol.name, (*(elimit *const *)b)->pol.name);
}

void registry_order(const sluice_engine *ce)
{
    /* The order is a cache of the set, which a listing does not change: sorting it here keeps
     * the listing functions const for their callers. */
    sluice_engine *e = (sluice_engine *)ce;

    if (!e->limits_dirty)
        return;
    qsort(e->limits, e->nlimits, sizeof *e->limits, limit_cmp);
    for (size_t i = 0; i < e->nlimits; i++)
        e->limits[i]->pos = i;
    e->limits_dirty = 0;
}

/* Adds (n > 0) or drops (n < 0) one declared type's claim on each limit of its chain. */
static void chain_claim(elimit **chain, size_t nlimits, int n)
{
    for (size_t i = 0; chain && i < nlimits; i++)
        chain[i]->typerefs = n > 0 ? chain[i]->typerefs + 1 : chain[i]->typerefs - 1;
}

/* Builds the core limits of a policy. */
static int make_cores(const sluice_limit_policy *p, sluice_limit ***out, size_t *n, char *msg,
                      size_t msglen)
{
    size_t count = p->ntiers ? p->ntiers : 1 + p->noverrides;
    sluice_limit **lims = alloc_calloc(count, sizeof *lims);

    *out = NULL;
    *n = 0;
    if (!lims)
        return SLUICE_ENOMEM;
    for (size_t i = 0; i < count; i++) {
        const sluice_limit_def *def = p->ntiers ? &p->tiers[i].def
                                      : i == 0  ? &p->def
                                                : &p->overrides[i - 1].def;
        int rc = sluice_limit_new(def, &lims[i], msg, msglen);

        if (rc != SLUICE_OK) {
            free_cores(lims, i);
            return rc;
        }
    }
    *out = lims;
    *n = count;
    return SLUICE_OK;
}

/* A group lease on link i named the core being replaced, whose lease ids restart: the group
 * is over (the task asks its own unit from now on), so that a new lease that happens to get the
 * same id never carries it. */
static void group_forget(task *t, uint16_t i)
{
    if (t->group_link == i) {
        t->group_link = LINK_NONE;
        t->group_lease = 0;
        t->group_tag = 0;
    }
}

/* After a replacement: the old core state is gone, so running tasks hold no lease or charge in
 * it any more. */
static void forget_grants(sluice_engine *e, const elimit *l)
{
    size_t pos = 0;
    task *t;

    while ((t = ptab_next(&e->ids, &pos)) != NULL)
        for (uint16_t i = 0; i < t->nlinks; i++)
            if (t->links[i].lim == l) {
                t->links[i].lease_id = 0;
                t->links[i].flags &= (uint8_t)~LINK_CHARGED;
                group_forget(t, i);
            }
}

int registry_apply_mode(const sluice_engine *e, elimit *l)
{
    int shadow = l->pol.mode == SLUICE_MODE_SHADOW || e->limits_off;

    for (size_t i = 0; i < l->nlims; i++)
        sluice_limit_set_shadow(l->lims[i], shadow);
    return shadow;
}

/* After l's policy and cores were replaced in place: the grants of the old cores are gone, and
 * its parked tasks are gated again now. */
static void replaced(sluice_engine *e, elimit *l, int64_t now_ns)
{
    registry_apply_mode(e, l);
    /* Only a task link adds a reference beyond the registry's: without one there is no grant to
     * forget, and a reload replacing many limits does not walk every task for each. */
    if (l->refs > 1)
        forget_grants(e, l);
    park_rearm_limit(e, l, now_ns);
    e->limits_version++;
}

/* Registers l (its policy and cores set) under its name, in room sluice_engine_reserve_limits
 * made. */
static void registered(sluice_engine *e, elimit *l)
{
    l->refs = 1;
    registry_apply_mode(e, l);
    l->hash = name_hash(l->pol.name, strlen(l->pol.name));
    l->pos = e->nlimits;
    ptab_insert(&e->limit_index, l->hash, l); /* reserved */
    /* Appended: a name that sorts before the last one leaves the order to registry_order(). */
    if (e->nlimits && strcmp(e->limits[e->nlimits - 1]->pol.name, l->pol.name) > 0)
        e->limits_dirty = 1;
    e->limits[e->nlimits++] = l;
    e->limits_version++;
}

int sluice_engine_reserve_limits(sluice_engine *e, size_t more)
{
    if (more > SIZE_MAX / sizeof(elimit *) - e->nlimits)
        return SLUICE_ENOMEM;
    if (e->nlimits + more > e->limits_cap) {
        size_t cap = e->limits_cap ? 2 * e->limits_cap : 8;
        elimit **arr;

        if (cap < e->nlimits + more)
            cap = e->nlimits + more;
        arr = alloc_realloc(e->limits, cap * sizeof *arr);
        if (!arr)
            return SLUICE_ENOMEM;
        e->limits = arr;
        e->limits_cap = cap;
    }
    return ptab_reserve(&e->limit_index, more) == SLUICE_OK ? SLUICE_OK : SLUICE_ENOMEM;
}

/* A sluice_limit_build is the engine's own record of a limit, not yet registered: installing a
 * new name registers this very object, so nothing is allocated on the engine's thread. */
struct sluice_limit_build {
    elimit l; /* first: the build's address is the record's */
};

int sluice_limit_build_new(const sluice_limit_policy *p, sluice_limit_build **out, char *msg,
                           size_t msglen)
{
    sluice_limit_build *b;
    int rc;

    *out = NULL;
    msgf(msg, msglen, "%s", "");
    if (!p)
        return SLUICE_EINVAL;
    rc = sluice_limit_policy_validate(p, msg, msglen);
    if (rc != SLUICE_OK)
        return rc;
    b = alloc_calloc(1, sizeof *b);
    if (!b)
        goto fail;
    rc = make_cores(p, &b->l.lims, &b->l.nlims, msg, msglen);
    if (rc != SLUICE_OK)
        goto fail_build;
    rc = sluice_limit_policy_copy(&b->l.pol, p);
    if (rc != SLUICE_OK)
        goto fail_build;
    *out = b;
    return SLUICE_OK;
fail_build:
    free_cores(b->l.lims, b->l.nlims);
    alloc_free(b);
    if (rc != SLUICE_ENOMEM)
        return rc;
fail:
    msgf(msg, msglen, "%s", "out of memory");
    return SLUICE_ENOMEM;
}

void sluice_limit_build_free(sluice_limit_build *b)
{
    if (b)
        elimit_free(&b->l);
}

int sluice_engine_install_limit(sluice_engine *e, sluice_limit_build **bp, int64_t now_ns)
{
    sluice_limit_build *b = *bp;
    elimit *l = registry_find_limit(e, b->l.pol.name);

    if (l) {
        /* The build takes the old policy and cores away, to be freed wherever the caller likes. */
        sluice_limit_policy pol = l->pol;
        sluice_limit **lims = l->lims;
        size_t nlims = l->nlims;

        l->pol = b->l.pol;
        l->lims = b->l.lims;
        l->nlims = b->l.nlims;
        b->l.pol = pol;
        b->l.lims = lims;
        b->l.nlims = nlims;
        replaced(e, l, now_ns);
    } else {
        if (sluice_engine_reserve_limits(e, 1) != SLUICE_OK)
            return SLUICE_ENOMEM;
        registered(e, &b->l);
        *bp = NULL;
    }
    feed_limit_replaced(e, l ? l->pol.name : b->l.pol.name, 0);
    return SLUICE_OK;
}

uint64_t sluice_engine_limits_version(const sluice_engine *e)
{
    return e->limits_version;
}

int registry_set_limit(sluice_engine *e, const sluice_limit_policy *p, int64_t now_ns, char *msg,
                       size_t msglen)
{
    sluice_limit_policy copy;
    sluice_limit **lims;
    size_t nlims;
    elimit *l;
    int rc;

    msgf(msg, msglen, "%s", "");
    if (!p)
        return SLUICE_EINVAL;
    rc = sluice_limit_policy_validate(p, msg, msglen);
    if (rc != SLUICE_OK)
        return rc;
    rc = make_cores(p, &lims, &nlims, msg, msglen);
    if (rc != SLUICE_OK)
        return rc;
    rc = sluice_limit_policy_copy(&copy, p);
    if (rc != SLUICE_OK)
        goto fail_cores;
    l = registry_find_limit(e, p->name);
    if (l) {
        free_cores(l->lims, l->nlims);
        sluice_limit_policy_clear(&l->pol);
        l->pol = copy;
        l->lims = lims;
        l->nlims = nlims;
        replaced(e, l, now_ns);
        return SLUICE_OK;
    }
    rc = sluice_engine_reserve_limits(e, 1);
    if (rc != SLUICE_OK)
        goto fail_copy;
    l = alloc_calloc(1, sizeof *l);
    rc = SLUICE_ENOMEM;
    if (!l)
        goto fail_copy;
    l->pol = copy;
    l->lims = lims;
    l->nlims = nlims;
    registered(e, l);
    return SLUICE_OK;
fail_copy:
    sluice_limit_policy_clear(&copy);
fail_cores:
    free_cores(lims, nlims);
    if (rc == SLUICE_ENOMEM)
        msgf(msg, msglen, "%s", "out of memory");
    return rc;
}

/* After one key's override changed: running tasks on that key hold no lease or charge in the
 * new state (forget_grants, for one key). */
static void forget_key_grants(sluice_engine *e, const elimit *l, const char *key, size_t keylen)
{
    size_t pos = 0;
    task *t;

    while ((t = ptab_next(&e->ids, &pos)) != NULL)
        for (uint16_t i = 0; i < t->nlinks; i++)
            if (t->links[i].lim == l && t->links[i].keylen == keylen &&
                memcmp(t->links[i].key, key, keylen) == 0) {
                t->links[i].lease_id = 0;
                t->links[i].flags &= (uint8_t)~LINK_CHARGED;
                group_forget(t, i);
            }
}

int registry_set_override(sluice_engine *e, const char *name, const char *key, size_t keylen,
                          const sluice_limit_def *def, int64_t now_ns, char *msg, size_t msglen)
{
    elimit *l = registry_find_limit(e, name);
    sluice_limit_policy copy;
    sluice_limit **lims = NULL, *fresh = NULL;
    sluice_key_override *o;
    size_t n;
    long at;
    int rc;

    msgf(msg, msglen, "%s", "");
    if (!l)
        return SLUICE_ENOTFOUND;
    rc = policy_check_override_key(key, keylen, msg, msglen);
    if (rc != SLUICE_OK)
        return rc;
    at = policy_find_override(&l->pol, key, keylen);
    if (!def && at < 0) {
        msgf(msg, msglen, "limit \"%s\" has no override for that key", name);
        return SLUICE_ENOTFOUND;
    }
    rc = sluice_limit_policy_copy(&copy, &l->pol);
    if (rc != SLUICE_OK)
        goto fail;
    if (!def) {
        /* Removal: the later overrides move down one, as their cores will. */
        alloc_free(copy.overrides[at].key);
        memmove(&copy.overrides[at], &copy.overrides[at + 1],
                (copy.noverrides - (size_t)at - 1) * sizeof *copy.overrides);
        copy.noverrides--;
    } else {
        if (at < 0) {
            o = alloc_realloc(copy.overrides, (copy.noverrides + 1) * sizeof *o);
            rc = SLUICE_ENOMEM;
            if (!o)
                goto fail_copy;
            copy.overrides = o;
            o = &o[copy.noverrides];
            o->key = alloc_memdup0(key, keylen);
            if (!o->key)
                goto fail_copy;
            copy.noverrides++;
        } else {
            o = &copy.overrides[at];
        }
        o->def = *def;
        /* The key lives in the limit's table settings, whatever the override says. */
        o->def.max_keys = copy.def.max_keys;
        o->def.key_overflow = copy.def.key_overflow;
        o->def.max_key_len = copy.def.max_key_len;
    }
    rc = sluice_limit_policy_validate(&copy, msg, msglen);
    if (rc != SLUICE_OK)
        goto fail_copy;
    if (def) {
        rc = sluice_limit_new(&copy.overrides[at < 0 ? copy.noverrides - 1 : (size_t)at].def,
                              &fresh, msg, msglen);
        if (rc != SLUICE_OK)
            goto fail_copy;
    }
    n = 1 + copy.noverrides;
    lims = alloc_calloc(n, sizeof *lims);
    rc = SLUICE_ENOMEM;
    if (!lims)
        goto fail_fresh;
    /* Every other key keeps its core, and so its state. */
    lims[0] = l->lims[0];
    for (size_t i = 0; i < copy.noverrides; i++) {
        const char *k = copy.overrides[i].key;
        long old = policy_find_override(&l->pol, k, strlen(k));

        lims[1 + i] = strlen(k) == keylen && memcmp(k, key, keylen) == 0 ? fresh : l->lims[1 + old];
    }
    if (at >= 0)
        sluice_limit_free(l->lims[1 + at]);
    if (!def) /* back on the limit's own core, from a fresh start there too */
        sluice_limit_reset(lims[0], key, keylen);
    alloc_free(l->lims);
    l->lims = lims;
    l->nlims = n;
    sluice_limit_policy_clear(&l->pol);
    l->pol = copy;
    registry_apply_mode(e, l); /* the new core follows the limit's mode */
    forget_key_grants(e, l, key, keylen);
    park_rearm_limit(e, l, now_ns);
    e->limits_version++;
    return SLUICE_OK;
fail_fresh:
    sluice_limit_free(fresh);
fail_copy:
    sluice_limit_policy_clear(&copy);
fail:
    if (rc == SLUICE_ENOMEM)
        msgf(msg, msglen, "%s", "out of memory");
    return rc;
}

int registry_del_limit(sluice_engine *e, const char *name, int64_t now_ns)
{
    elimit *l = registry_find_limit(e, name);

    if (!l)
        return SLUICE_ENOTFOUND;
    if (l->typerefs)
        return SLUICE_ESTATE;
    ptab_remove(&e->limit_index, l->hash, l);
    /* The last limit takes its slot: O(1), at the price of the order. */
    e->nlimits--;
    if (l->pos != e->nlimits) {
        e->limits[l->pos] = e->limits[e->nlimits];
        e->limits[l->pos]->pos = l->pos;
        e->limits_dirty = 1;
    }
    l->dead = 1;
    park_rearm_limit(e, l, now_ns);
    registry_limit_unref(l);
    e->limits_version++;
    return SLUICE_OK;
}

size_t registry_list_limits(const sluice_engine *e,
                            void (*fn)(const sluice_limit_policy *p, void *arg), void *arg)
{
    if (fn) {
        registry_order(e);
        for (size_t i = 0; i < e->nlimits; i++)
            fn(&e->limits[i]->pol, arg);
    }
    return e->nlimits;
}

void registry_sweep(sluice_engine *e, int64_t now_ns, size_t budget, size_t max_limits)
{
    size_t n = max_limits < e->nlimits ? max_limits : e->nlimits;

    /* Removals and re-sorting move limits between slots: a limit may be swept twice or skipped
     * in one round, never for long, since the cursor keeps going round. */
    for (size_t done = 0; done < n; done++) {
        elimit *l;

        if (e->sweep_pos >= e->nlimits)
            e->sweep_pos = 0;
        l = e->limits[e->sweep_pos++];
        for (size_t k = 0; k < l->nlims; k++)
            sluice_limit_sweep(l->lims[k], now_ns, budget);
    }
}

size_t sluice_engine_sweep_limits(sluice_engine *e, int64_t now_ns, size_t budget,
                                  size_t max_limits)
{
    size_t n = max_limits < e->nlimits ? max_limits : e->nlimits;

    registry_sweep(e, now_ns, budget, max_limits);
    return n;
}

/* ---- Types ----------------------------------------------------------------------------------- */

static int type_eq(const void *p, const void *key)
{
    const etype *t = p;
    const name_ref *k = key;

    return strlen(t->pol.name) == k->len && memcmp(t->pol.name, k->name, k->len) == 0;
}

etype *registry_find_type(const sluice_engine *e, const char *name, size_t len)
{
    name_ref k = {name, len};

    if (!name)
        return NULL;
    return ptab_find(&e->types, name_hash(name, len), &k, type_eq);
}

/* Creates a type record for a name with the default settings, filed in the table. */
static int type_create(sluice_engine *e, const char *name, etype **out)
{
    size_t len = strlen(name);
    etype *t;
    int rc;

    *out = NULL;
    rc = ptab_reserve(&e->types, 1);
    if (rc == SLUICE_OK)
        rc = heap_reserve(&e->types_ready, e->ntypes + 1);
    if (rc != SLUICE_OK)
        return rc;
    t = alloc_calloc(1, sizeof *t);
    if (!t)
        return SLUICE_ENOMEM;
    sluice_type_policy_init(&t->pol);
    t->pol.lease_ns = e->pol.default_lease_ns;
    t->pol.name = alloc_memdup0(name, len);
    if (!t->pol.name) {
        alloc_free(t);
        return SLUICE_ENOMEM;
    }
    t->hash = name_hash(name, len);
    t->tidx = HEAP_NONE;
    heap_init(&t->ready, task_less_ready, offsetof(task, hidx));
    ptab_insert(&e->types, t->hash, t); /* reserved */
    e->ntypes++;
    *out = t;
    return SLUICE_OK;
}

static void type_free(sluice_engine *e, etype *t)
{
    chain_claim(t->chain, t->pol.nlimits, -1);
    ptab_remove(&e->types, t->hash, t);
    e->ntypes--;
    ready_free_type(e, t);
    heap_free(&t->ready);
    alloc_free(t->chain);
    sluice_type_policy_clear(&t->pol);
    alloc_free(t);
}

void registry_type_release(sluice_engine *e, etype *t)
{
    if (t && !t->declared && t->refs == 0 && t->nready == 0)
        type_free(e, t);
}

/* The limit of a type's chain whose key is the tenant of fair dispatch: fair_key, else the
 * first keyed limit; NULL under FIFO. Returns 0, or SLUICE_EINVAL with msg when fairness keys
 * has no keyed limit to go by. */
static int fair_limit(const sluice_type_policy *tp, elimit *const *chain, elimit **out, char *msg,
                      size_t msglen)
{
    *out = NULL;
    if (tp->fairness != SLUICE_FAIR_KEYS)
        return SLUICE_OK;
    for (size_t i = 0; i < tp->nlimits && !*out; i++)
        if (tp->fair_key ? strcmp(tp->limits[i], tp->fair_key) == 0
                         : chain[i]->pol.key_source != SLUICE_KEY_NONE)
            *out = chain[i];
    if (*out)
        return SLUICE_OK;
    msgf(msg, msglen,
         "type \"%s\": fairness keys shares workers between the keys of a keyed limit, and none "
         "of its limits has a key",
         tp->name);
    return SLUICE_EINVAL;
}

int registry_set_type(sluice_engine *e, const sluice_type_policy *tp, int64_t now_ns, char *msg,
                      size_t msglen)
{
    sluice_type_policy copy;
    elimit **chain = NULL, *fair = NULL;
    etype *t;
    int rc;

    msgf(msg, msglen, "%s", "");
    if (!tp)
        return SLUICE_EINVAL;
    rc = sluice_type_policy_validate(tp, msg, msglen);
    if (rc != SLUICE_OK)
        return rc;
    for (size_t i = 0; i < tp->nlimits; i++) {
        if (!registry_find_limit(e, tp->limits[i])) {
            sluice_event ev;

            memset(&ev, 0, sizeof ev);
            ev.kind = SLUICE_EVENT_UNKNOWN_LIMIT;
            ev.at_ns = now_ns;
            ev.limit = tp->limits[i];
            ev.type = tp->name;
            ev.count = 1;
            engine_emit(e, &ev, now_ns);
            msgf(msg, msglen, "type \"%s\" names limit \"%s\", which does not exist", tp->name,
                 tp->limits[i]);
            return SLUICE_ENOTFOUND;
        }
    }
    if (tp->nlimits) {
        chain = alloc_calloc(tp->nlimits, sizeof *chain);
        if (!chain)
            goto fail_nomem;
        for (size_t i = 0; i < tp->nlimits; i++)
            chain[i] = registry_find_limit(e, tp->limits[i]);
    }
    rc = fair_limit(tp, chain, &fair, msg, msglen);
    if (rc != SLUICE_OK) {
        alloc_free(chain);
        return rc;
    }
    if (sluice_type_policy_copy(&copy, tp) != SLUICE_OK)
        goto fail_chain;
    t = registry_find_type(e, tp->name, strlen(tp->name));
    if (!t && type_create(e, tp->name, &t) != SLUICE_OK) {
        sluice_type_policy_clear(&copy);
        goto fail_chain;
    }
    /* The ready tasks are re-filed in the new order (all or nothing). */
    if (ready_set_fairness(e, t, fair) != SLUICE_OK) {
        sluice_type_policy_clear(&copy);
        registry_type_release(e, t);
        goto fail_chain;
    }
    chain_claim(t->chain, t->pol.nlimits, -1);
    chain_claim(chain, copy.nlimits, 1);
    sluice_type_policy_clear(&t->pol);
    alloc_free(t->chain);
    t->pol = copy;
    t->chain = chain;
    t->declared = 1;
    return SLUICE_OK;
fail_chain:
    alloc_free(chain);
fail_nomem:
    msgf(msg, msglen, "%s", "out of memory");
    return SLUICE_ENOMEM;
}

int registry_type_for_submit(sluice_engine *e, const char *name, etype **out, char *msg,
                             size_t msglen)
{
    size_t len;

    *out = NULL;
    if (!name || !*name) {
        msgf(msg, msglen, "%s", "a task needs a type");
        return SLUICE_EINVAL;
    }
    len = strlen(name);
    *out = registry_find_type(e, name, len);
    if (*out)
        return SLUICE_OK;
    if (e->pol.strict_types) {
        msgf(msg, msglen, "unknown task type \"%.*s\" (strict_types is on)",
             (int)(len > 128 ? 128 : len), name);
        return SLUICE_ENOTFOUND;
    }
    if (len > 128) {
        msgf(msg, msglen, "%s", "task type names are at most 128 bytes");
        return SLUICE_EINVAL;
    }
    return type_create(e, name, out);
}

void registry_free(sluice_engine *e)
{
    size_t pos = 0;
    etype *t;

    while ((t = ptab_next(&e->types, &pos)) != NULL) {
        ready_free_type(e, t);
        heap_free(&t->ready);
        alloc_free(t->chain);
        sluice_type_policy_clear(&t->pol);
        alloc_free(t);
    }
    ptab_free(&e->types);
    ptab_free(&e->limit_index);
    for (size_t i = 0; i < e->nlimits; i++)
        registry_limit_unref(e->limits[i]);
    alloc_free(e->limits);
    e->limits = NULL;
    e->nlimits = e->limits_cap = 0;
}
