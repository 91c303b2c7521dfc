/* SPDX-License-Identifier: MIT */
/*
 * Ready queues: see ready.h.
 */
#include "engine/ready.h"

#include <string.h>

#include "base/alloc.h"
#include "base/hash.h"
#include "base/ptab.h"
#include "base/sat.h"
#include "engine/registry.h"
#include "sluice/error.h"

/* The flows of a type under fair dispatch. */
struct fairq {
    elimit *lim;   /* the limit whose key is a task's tenant */
    ptab flows;    /* every flow, empty ones included, by key */
    heap active;   /* the flows with tasks, the next to serve first */
    int64_t vtime; /* the largest tag a delivery moved a flow to */
};

/* The ready tasks of one tenant. */
struct rflow {
    fairq *q;          /* its type's fair queue */
    char *key;         /* owned copy, NUL-terminated */
    size_t keylen;     /* bytes of key */
    uint64_t hash;     /* its key in q->flows */
    heap tasks;        /* most urgent first */
    int64_t tag;       /* virtual start of its head */
    uint64_t head_seq; /* its head's sequence number and priority, kept here so that ordering */
    int head_prio;     /* the flows reads no task (a cache miss each) */
    size_t aidx;       /* position in q->active */
    rflow *idle_next;  /* the engine's idle list, while empty */
    rflow *idle_prev;
    int idle; /* on the idle list */
};

typedef struct flow_ref {
    const char *key;
    size_t keylen;
} flow_ref;

static uint64_t flow_hash(const char *key, size_t keylen)
{
    return hash_bytes_secret(key, keylen, 0xfa17); /* a client's tenant */
}

static int flow_eq(const void *p, const void *key)
{
    const rflow *f = p;
    const flow_ref *k = key;

    return f->keylen == k->keylen && (k->keylen == 0 || memcmp(f->key, k->key, k->keylen) == 0);
}

/* Flow order: the more urgent head first; among equal priorities the flow served least (the
 * smaller tag); then the older head. */
static int flow_less(const void *a, const void *b)
{
    const rflow *x = a, *y = b;

    if (x->head_prio != y->head_prio)
        return x->head_prio > y->head_prio;
    if (x->tag != y->tag)
        return x->tag < y->tag;
    return x->head_seq < y->head_seq;
}

/* Copies a non-empty flow's head into its cache. */
static void note_head(rflow *f)
{
    const task *h = heap_top(&f->tasks);

    f->head_seq = h->seq;
    f->head_prio = h->priority;
}

/* ---- Tenants --------------------------------------------------------------------------------- */

/* The tenant of a task under fair queue q: its key on q's limit, "" when it has no such link
 * (a limit skipped for a missing key, or a chain from before the type changed). *units gets its
 * units there (the task's own units without such a link). */
static void tenant_of(const fairq *q, const task *t, const char **key, size_t *keylen,
                      int64_t *units)
{
    for (uint16_t i = 0; i < t->nlinks; i++)
        if (t->links[i].lim == q->lim) {
            *key = t->links[i].key;
            *keylen = t->links[i].keylen;
            *units = t->links[i].units;
            return;
        }
    *key = "";
    *keylen = 0;
    *units = t->units;
}

static rflow *flow_find(const fairq *q, const char *key, size_t keylen)
{
    flow_ref k = {key, keylen};

    return ptab_find(&q->flows, flow_hash(key, keylen), &k, flow_eq);
}

static void idle_unlink(sluice_engine *e, rflow *f)
{
    if (!f->idle)
        return;
    if (f->idle_prev)
        f->idle_prev->idle_next = f->idle_next;
    else
        e->idle_flows = f->idle_next;
    if (f->idle_next)
        f->idle_next->idle_prev = f->idle_prev;
    f->idle_next = f->idle_prev = NULL;
    f->idle = 0;
}

static void idle_link(sluice_engine *e, rflow *f)
{
    if (f->idle)
        return;
    f->idle_prev = NULL;
    f->idle_next = e->idle_flows;
    if (f->idle_next)
        f->idle_next->idle_prev = f;
    e->idle_flows = f;
    f->idle = 1;
}

static void flow_free(sluice_engine *e, rflow *f)
{
    idle_unlink(e, f);
    ptab_remove(&f->q->flows, f->hash, f);
    heap_free(&f->tasks);
    alloc_free(f->key);
    alloc_free(f);
}

/* Finds or creates the flow of a key, with room for one more task in it and room for it in the
 * active heap. A created flow starts idle (ready_trim frees it if no task comes). */
static int flow_reserve(sluice_engine *e, fairq *q, const char *key, size_t keylen)
{
    rflow *f = flow_find(q, key, keylen);
    int rc;

    if (!f) {
        rc = ptab_reserve(&q->flows, 1);
        if (rc == SLUICE_OK)
            rc = heap_reserve(&q->active, q->flows.n + 1);
        if (rc != SLUICE_OK)
            return rc;
        f = alloc_calloc(1, sizeof *f);
        if (!f)
            return SLUICE_ENOMEM;
        f->key = alloc_memdup0(key, keylen);
        if (!f->key) {
            alloc_free(f);
            return SLUICE_ENOMEM;
        }
        f->q = q;
        f->keylen = keylen;
        f->hash = flow_hash(key, keylen);
        f->aidx = HEAP_NONE;
        heap_init(&f->tasks, task_less_ready, offsetof(task, hidx));
        ptab_insert(&q->flows, f->hash, f); /* reserved */
        idle_link(e, f);
    }
    return heap_reserve(&f->tasks, f->tasks.n + 1);
}

/* ---- The types heap -------------------------------------------------------------------------- */

task *ready_head(const etype *t)
{
    const rflow *f;

    if (!t->fair)
        return heap_top(&t->ready);
    f = heap_top(&t->fair->active);
    return f ? heap_top(&f->tasks) : NULL;
}

int ready_type_less(const void *a, const void *b)
{
    return task_more_urgent(ready_head(a), ready_head(b));
}

/* Re-files the type after its head may have changed. */
static void refile_type(sluice_engine *e, etype *t)
{
    if (t->nready == 0) {
        if (t->tidx != HEAP_NONE)
            heap_remove(&e->types_ready, t);
    } else if (t->tidx == HEAP_NONE) {
        heap_push(&e->types_ready, t); /* room reserved for every type */
    } else {
        heap_update(&e->types_ready, t);
    }
}

/* ---- Filing ---------------------------------------------------------------------------------- */

int ready_reserve_links(sluice_engine *e, etype *t, const link_spec *links, size_t nlinks)
{
    if (!t->fair)
        return heap_reserve(&t->ready, t->ready.n + 1);
    for (size_t i = 0; i < nlinks; i++)
        if (links[i].lim == t->fair->lim)
            return flow_reserve(e, t->fair, links[i].key, links[i].keylen);
    return flow_reserve(e, t->fair, "", 0);
}

int ready_reserve(sluice_engine *e, const task *t)
{
    const char *key;
    size_t keylen;
    int64_t units;

    if (!t->type->fair)
        return heap_reserve(&t->type->ready, t->type->ready.n + 1);
    tenant_of(t->type->fair, t, &key, &keylen, &units);
    return flow_reserve(e, t->type->fair, key, keylen);
}

int ready_push(sluice_engine *e, task *t)
{
    etype *type = t->type;
    const char *key;
    size_t keylen;
    int64_t units;
    rflow *f;
    int rc;

    if (!type->fair) {
        rc = heap_push(&type->ready, t);
        if (rc != SLUICE_OK)
            return rc;
        type->nready++;
        if (heap_top(&type->ready) == t)
            refile_type(e, type);
        return SLUICE_OK;
    }
    tenant_of(type->fair, t, &key, &keylen, &units);
    f = flow_find(type->fair, key, keylen);
    if (!f) {
        rc = flow_reserve(e, type->fair, key, keylen);
        if (rc != SLUICE_OK)
            return rc;
        f = flow_find(type->fair, key, keylen);
    }
    rc = heap_push(&f->tasks, t);
    if (rc != SLUICE_OK)
        return rc;
    type->nready++;
    note_head(f);
    if (f->aidx == HEAP_NONE) {
        /* A flow that was empty joins behind those already served: every tag it had is at or
         * below the virtual time. */
        idle_unlink(e, f);
        if (f->tag < type->fair->vtime)
            f->tag = type->fair->vtime;
        heap_push(&type->fair->active, f); /* room reserved for every flow */
    } else if (heap_top(&f->tasks) == t) {
        heap_update(&type->fair->active, f);
    }
    refile_type(e, type);
    return SLUICE_OK;
}

void ready_remove(sluice_engine *e, task *t)
{
    etype *type = t->type;
    const char *key;
    size_t keylen;
    int64_t units;
    rflow *f;

    if (!type->fair) {
        int was_top = heap_top(&type->ready) == t;

        heap_remove(&type->ready, t);
        type->nready--;
        if (was_top)
            refile_type(e, type);
        return;
    }
    tenant_of(type->fair, t, &key, &keylen, &units);
    f = flow_find(type->fair, key, keylen);
    heap_remove(&f->tasks, t);
    type->nready--;
    if (f->tasks.n == 0) {
        heap_remove(&type->fair->active, f);
        idle_link(e, f);
    } else {
        note_head(f);
        heap_update(&type->fair->active, f);
    }
    refile_type(e, type);
}

void ready_served(sluice_engine *e, const task *t)
{
    fairq *q = t->type->fair;
    const char *key;
    size_t keylen;
    int64_t units;
    rflow *f;

    if (!q)
        return;
    tenant_of(q, t, &key, &keylen, &units);
    f = flow_find(q, key, keylen);
    if (!f)
        return;
    f->tag = sat_add_i64(f->tag, units > 0 ? units : 1);
    if (f->tag > q->vtime)
        q->vtime = f->tag;
    if (f->aidx != HEAP_NONE) {
        heap_update(&q->active, f);
        refile_type(e, t->type);
    }
}

task *ready_pick(const sluice_engine *e, const char *const *types, size_t ntypes)
{
    task *best = NULL;

    if (ntypes == 0) {
        const etype *t = heap_top(&e->types_ready);

        return t ? ready_head(t) : NULL;
    }
    for (size_t i = 0; i < ntypes; i++) {
        const etype *t;
        task *head;

        if (!types[i])
            continue;
        t = registry_find_type(e, types[i], strlen(types[i]));
        head = t ? ready_head(t) : NULL;
        if (head && (!best || task_more_urgent(head, best)))
            best = head;
    }
    return best;
}

/* ---- Configuration --------------------------------------------------------------------------- */

static void fairq_free(sluice_engine *e, fairq *q)
{
    size_t pos = 0;
    rflow *f;

    if (!q)
        return;
    while ((f = ptab_next(&q->flows, &pos)) != NULL) {
        idle_unlink(e, f);
        heap_free(&f->tasks);
        alloc_free(f->key);
        alloc_free(f);
    }
    ptab_free(&q->flows);
    heap_free(&q->active);
    alloc_free(q);
}

/* Takes every ready task of t out into arr (room for t->nready). */
static size_t take_all(sluice_engine *e, etype *t, task **arr)
{
    size_t n = 0;
    task *head;

    while ((head = ready_head(t)) != NULL) {
        ready_remove(e, head);
        arr[n++] = head;
    }
    return n;
}

int ready_set_fairness(sluice_engine *e, etype *t, elimit *lim)
{
    fairq *old = t->fair, *q = NULL;
    task **arr = NULL;
    size_t n, pushed = 0;
    int rc = SLUICE_OK;

    if ((old ? old->lim : NULL) == lim)
        return SLUICE_OK;
    if (lim) {
        q = alloc_calloc(1, sizeof *q);
        if (!q)
            return SLUICE_ENOMEM;
        q->lim = lim;
        ptab_init(&q->flows);
        heap_init(&q->active, flow_less, offsetof(rflow, aidx));
    }
    if (t->nready) {
        arr = alloc_calloc(t->nready, sizeof *arr);
        if (!arr) {
            fairq_free(e, q);
            return SLUICE_ENOMEM;
        }
    }
    /* Out of the old order (no allocation), into the new one; on failure back into the old,
     * whose heaps and flows kept their room. */
    n = take_all(e, t, arr);
    t->fair = q;
    for (; pushed < n; pushed++) {
        rc = ready_reserve(e, arr[pushed]);
        if (rc != SLUICE_OK)
            break;
        ready_push(e, arr[pushed]); /* reserved */
    }
    if (rc != SLUICE_OK) {
        for (size_t i = 0; i < pushed; i++)
            ready_remove(e, arr[i]);
        t->fair = old;
        for (size_t i = 0; i < n; i++)
            ready_push(e, arr[i]); /* into the room it left */
        old = q;
    }
    fairq_free(e, old);
    alloc_free(arr);
    return rc;
}

/* ---- Views and clean-up ---------------------------------------------------------------------- */

elimit *ready_fair_limit(const etype *t)
{
    return t->fair ? t->fair->lim : NULL;
}

int ready_flow_info(const task *t, const char **limit, const char **key, size_t *keylen,
                    size_t *flow_ready, size_t *flows)
{
    const fairq *q = t->type->fair;
    const rflow *f;
    int64_t units;

    if (!q)
        return 0;
    *limit = q->lim->pol.name;
    tenant_of(q, t, key, keylen, &units);
    f = flow_find(q, *key, *keylen);
    *flow_ready = f ? f->tasks.n : 0;
    *flows = q->active.n;
    return 1;
}

void ready_trim(sluice_engine *e)
{
    while (e->idle_flows)
        flow_free(e, e->idle_flows);
}

void ready_free_type(sluice_engine *e, etype *t)
{
    fairq_free(e, t->fair);
    t->fair = NULL;
}

size_t ready_bytes(const etype *t)
{
    size_t n = heap_bytes(&t->ready), pos = 0;
    const rflow *f;

    if (!t->fair)
        return n;
    n += sizeof *t->fair + ptab_bytes(&t->fair->flows) + heap_bytes(&t->fair->active);
    while ((f = ptab_next(&t->fair->flows, &pos)) != NULL)
        n += sizeof *f + f->keylen + 1 + heap_bytes(&f->tasks);
    return n;
}
