/* SPDX-License-Identifier: MIT */
/*
 * The parking lot: see park.h.
 */
#include "engine/park.h"

#include <string.h>

#include "base/alloc.h"
#include "base/hash.h"
#include "base/sat.h"
#include "engine/ready.h"
#include "engine/registry.h"
#include "engine/task.h"
#include "sluice/error.h"

typedef struct wq_ref {
    const elimit *lim;
    uint16_t tier;
    const char *key;
    size_t keylen;
} wq_ref;

static uint64_t wq_hash(const elimit *l, uint16_t tier, const char *key, size_t keylen)
{
    return hash_bytes_secret(key, keylen, (uint64_t)(uintptr_t)l ^ ((uint64_t)tier << 48));
}

static int wq_eq(const void *p, const void *key)
{
    const waitq *q = p;
    const wq_ref *k = key;

    return q->lim == k->lim && q->tier == k->tier && q->keylen == k->keylen &&
           (k->keylen == 0 || memcmp(q->key, k->key, k->keylen) == 0);
}

int park_wake_less(const void *a, const void *b)
{
    const waitq *x = a, *y = b;

    return x->wake_ns < y->wake_ns;
}

waitq *park_find(const sluice_engine *e, const elimit *l, uint16_t tier, const char *key,
                 size_t keylen)
{
    wq_ref k = {l, tier, key, keylen};

    if (e->waitqs.n == 0)
        return NULL;
    return ptab_find(&e->waitqs, wq_hash(l, tier, key, keylen), &k, wq_eq);
}

static void wq_destroy(sluice_engine *e, waitq *q)
{
    if (q->widx != HEAP_NONE)
        heap_remove(&e->wakes, q);
    ptab_remove(&e->waitqs, q->hash, q);
    if (q->prev)
        q->prev->next = q->next;
    else
        q->lim->wqs = q->next;
    if (q->next)
        q->next->prev = q->prev;
    heap_free(&q->tasks);
    alloc_free(q->key);
    alloc_free(q);
}

/* Sets a queue's wake time (SLUICE_NEVER disarms). Never allocates: the wake heap has room for
 * every wait queue (reserved when a queue is created). */
static void arm(sluice_engine *e, waitq *q, int64_t wake_ns)
{
    q->wake_ns = wake_ns;
    if (wake_ns == SLUICE_NEVER) {
        if (q->widx != HEAP_NONE)
            heap_remove(&e->wakes, q);
    } else if (q->widx == HEAP_NONE) {
        heap_push(&e->wakes, q); /* room reserved by the caller */
    } else {
        heap_update(&e->wakes, q);
    }
}

int park_task(sluice_engine *e, task *t, uint16_t link, int64_t wake_ns)
{
    const task_link *l = &t->links[link];
    waitq *q = park_find(e, l->lim, l->tier, l->key, l->keylen);
    int created = 0, rc;

    /* Keep room in the wake heap for every queue, a new one included. */
    rc = heap_reserve(&e->wakes, e->waitqs.n + 1);
    if (rc != SLUICE_OK)
        return rc;
    if (!q) {
        rc = ptab_reserve(&e->waitqs, 1);
        if (rc != SLUICE_OK)
            return rc;
        q = alloc_calloc(1, sizeof *q);
        if (!q)
            return SLUICE_ENOMEM;
        q->key = alloc_memdup0(l->key, l->keylen);
        if (!q->key) {
            alloc_free(q);
            return SLUICE_ENOMEM;
        }
        q->lim = l->lim;
        q->tier = l->tier;
        q->keylen = l->keylen;
        q->hash = wq_hash(l->lim, l->tier, l->key, l->keylen);
        q->wake_ns = SLUICE_NEVER;
        q->widx = HEAP_NONE;
        heap_init(&q->tasks, task_less_ready, offsetof(task, hidx));
        q->units_exact = 1;
        ptab_insert(&e->waitqs, q->hash, q); /* reserved */
        q->next = l->lim->wqs;
        if (q->next)
            q->next->prev = q;
        l->lim->wqs = q;
        created = 1;
    }
    rc = heap_push(&q->tasks, t);
    if (rc != SLUICE_OK) {
        if (created)
            wq_destroy(e, q);
        return rc;
    }
    if (wake_ns < q->wake_ns)
        arm(e, q, wake_ns);
    if (!q->last || task_more_urgent(q->last, t))
        q->last = t;
    if (q->units_exact && l->units <= INT64_MAX - q->units)
        q->units += l->units;
    else
        q->units_exact = 0;
    t->state = SLUICE_TASK_PARKED;
    t->wq = q;
    t->park_link = link;
    e->nparked++;
    if (e->nparked > e->st.parked_peak)
        e->st.parked_peak = e->nparked;
    return SLUICE_OK;
}

/* The least urgent task on q, by a walk. */
static task *find_last(const waitq *q)
{
    task *last = NULL;

    for (size_t i = 0; i < q->tasks.n; i++) {
        task *o = heap_at(&q->tasks, i);

        if (!last || task_more_urgent(last, o))
            last = o;
    }
    return last;
}

/* Takes t off q's heap and its sums. Walks q only when t was the last in line, which a wake
 * (taking the head) meets only when t is alone. */
static void leave(waitq *q, task *t)
{
    heap_remove(&q->tasks, t);
    if (q->units_exact)
        q->units -= t->links[t->park_link].units;
    if (q->last == t)
        q->last = find_last(q);
}

void park_remove(sluice_engine *e, task *t)
{
    waitq *q = t->wq;

    leave(q, t);
    t->wq = NULL;
    t->park_link = LINK_NONE;
    e->nparked--;
    if (q->tasks.n == 0)
        wq_destroy(e, q);
}

/* Moves the head of q back to its ready queue. */
static int unpark_head(sluice_engine *e, waitq *q, task *head)
{
    int rc = ready_reserve(e, head);

    if (rc != SLUICE_OK)
        return rc;
    leave(q, head);
    head->wq = NULL;
    head->park_link = LINK_NONE;
    head->state = SLUICE_TASK_QUEUED;
    e->nparked--;
    e->nqueued++;
    ready_push(e, head); /* reserved */
    return SLUICE_OK;
}

int park_wake(sluice_engine *e, waitq *q, int64_t now)
{
    sluice_limit *core = q->lim->dead ? NULL : registry_core(q->lim, q->tier, q->key, q->keylen);
    sluice_decision d;
    int64_t cum = 0, wake = SLUICE_NEVER;
    size_t moved = 0;
    task *head;
    int rc = SLUICE_OK;

    memset(&d, 0, sizeof d);
    while ((head = heap_top(&q->tasks)) != NULL) {
        int64_t u = head->links[head->park_link].units;

        if (core) {
            if (u > INT64_MAX - cum)
                break;
            sluice_limit_decide(core, q->key, q->keylen, cum + u, now, SLUICE_PEEK, &d);
            /* A head that can never fit goes back too: the gate fails it with the reason. */
            if (!d.allowed && !(moved == 0 && d.retry_after_ns == SLUICE_NEVER))
                break;
        }
        rc = unpark_head(e, q, head);
        if (rc != SLUICE_OK) {
            wake = now;
            break;
        }
        moved++;
        if (core && d.allowed)
            cum += u;
    }
    if (q->tasks.n == 0) {
        wq_destroy(e, q);
        return rc;
    }
    if (rc == SLUICE_OK) {
        if (moved == 0) {
            wake = sat_add_i64(now, d.retry_after_ns > 0 ? d.retry_after_ns : 1);
        } else {
            /* The woken prefix is not charged yet: ask when the next task fits behind it. If
             * the limit cannot say (more than it holds at once), or the woken tasks may never
             * take their units (a concurrency slot is only freed by a release), look again
             * after PARK_RECHECK_NS. */
            int64_t start = 0, u = head->links[head->park_link].units;
            int64_t recheck = sat_add_i64(now, PARK_RECHECK_NS);

            if (u <= INT64_MAX - cum &&
                sluice_limit_estimate(core, q->key, q->keylen, cum + u, now, &start) == SLUICE_OK &&
                start > now && start != SLUICE_NEVER)
                wake = start;
            else
                wake = recheck;
            if (sluice_limit_get_def(core)->kind == SLUICE_CONCURRENCY && wake > recheck)
                wake = recheck;
        }
        if (wake == SLUICE_NEVER) /* a saturated now + retry_after: still look some day */
            wake = SLUICE_NEVER - 1;
    }
    arm(e, q, wake);
    return rc;
}

void park_wake_key(sluice_engine *e, elimit *l, uint16_t tier, const char *key, size_t keylen,
                   int64_t now)
{
    waitq *q = park_find(e, l, tier, key, keylen);

    if (q)
        park_wake(e, q, now);
}

void park_wake_limit(sluice_engine *e, elimit *l, int64_t now)
{
    waitq *q = l->wqs, *next;

    /* park_wake frees only the queue it wakes, so the next one is taken first. A queue whose
     * wake ran out of memory stays armed for now: the next tick retries it. */
    for (; q; q = next) {
        next = q->next;
        park_wake(e, q, now);
    }
}

int park_tick(sluice_engine *e, int64_t now)
{
    waitq *q;

    while ((q = heap_top(&e->wakes)) != NULL && q->wake_ns <= now) {
        int rc = park_wake(e, q, now);

        if (rc != SLUICE_OK)
            return rc;
    }
    return SLUICE_OK;
}

int64_t park_next_wake(const sluice_engine *e)
{
    const waitq *q = heap_top(&e->wakes);

    return q ? q->wake_ns : SLUICE_NEVER;
}

void park_rearm_limit(sluice_engine *e, elimit *l, int64_t when)
{
    for (waitq *q = l->wqs; q; q = q->next)
        if (when < q->wake_ns)
            arm(e, q, when);
}

void park_position(const task *t, size_t *ahead, int64_t *units_ahead)
{
    const waitq *q = t->wq;

    *ahead = 0;
    *units_ahead = 0;
    for (size_t i = 0; i < q->tasks.n; i++) {
        const task *o = heap_at(&q->tasks, i);

        if (o != t && task_more_urgent(o, t)) {
            (*ahead)++;
            if (o->links[o->park_link].units < INT64_MAX - *units_ahead)
                *units_ahead += o->links[o->park_link].units;
        }
    }
}

int64_t park_eta(const waitq *q, const task *t, uint16_t link, int64_t now)
{
    int64_t units_ahead = 0, start = 0, u = t->links[link].units;

    /* The units of every more urgent task on q (t itself excluded, parked or not). The last in
     * line, or a task about to join behind it (the usual FIFO case), has them all ahead: read
     * from the sum, so parking a long queue costs no walk per task. */
    if (q->units_exact && q->last == t)
        units_ahead = q->units - u;
    else if (q->units_exact && t->wq != q && (!q->last || task_more_urgent(q->last, t)))
        units_ahead = q->units;
    else
        for (size_t i = 0; i < q->tasks.n; i++) {
            const task *o = heap_at(&q->tasks, i);

            if (o != t && task_more_urgent(o, t))
                units_ahead = sat_add_i64(units_ahead, o->links[o->park_link].units);
        }
    /* When the limit cannot estimate (removed, or units past int64), the queue's wake is all
     * that is known. */
    if (q->lim->dead || units_ahead > INT64_MAX - u ||
        sluice_limit_estimate(registry_core(q->lim, q->tier, q->key, q->keylen), q->key, q->keylen,
                              units_ahead + u, now, &start) != SLUICE_OK)
        return q->wake_ns;
    /* The engine looks at the key only when its queue wakes: the task cannot start before. */
    if (start != SLUICE_NEVER && start < q->wake_ns)
        start = q->wake_ns;
    return start;
}

int64_t park_next_slot(const waitq *q, int64_t units, int64_t now)
{
    int64_t ahead = 0, start = 0;
    sluice_limit *core;

    if (q->lim->dead)
        return SLUICE_NEVER;
    core = registry_core(q->lim, q->tier, q->key, q->keylen);
    /* A concurrency wait ends with a release, which no estimate foresees. */
    if (sluice_limit_get_def(core)->kind == SLUICE_CONCURRENCY)
        return SLUICE_NEVER;
    if (q->units_exact)
        ahead = q->units;
    else
        for (size_t i = 0; i < q->tasks.n; i++) {
            const task *o = heap_at(&q->tasks, i);

            ahead = sat_add_i64(ahead, o->links[o->park_link].units);
        }
    if (units < 1 || ahead > INT64_MAX - units ||
        sluice_limit_estimate(core, q->key, q->keylen, ahead + units, now, &start) != SLUICE_OK)
        return SLUICE_NEVER;
    if (start != SLUICE_NEVER && start < q->wake_ns)
        start = q->wake_ns;
    return start;
}

task *park_last(const waitq *q)
{
    return q->last;
}

int park_beyond_horizon(const waitq *q, const task *t, uint16_t link, int64_t now)
{
    const sluice_limit_def *def;
    int64_t start;

    if (q->lim->dead)
        return 0;
    def = sluice_limit_get_def(registry_core(q->lim, q->tier, q->key, q->keylen));
    /* Concurrency is exempt, as in the gate: its wait ends with a release, not a slot. */
    if (def->kind == SLUICE_CONCURRENCY)
        return 0;
    start = park_eta(q, t, link, now);
    /* SLUICE_NEVER too: a queue that cannot say when it moves is past any horizon. The gate
     * fails a task that can never fit with reason `never` when it reaches the head. */
    return start != SLUICE_NEVER && start > now && sat_sub_i64(start, now) > def->horizon_ns;
}

size_t park_bytes(const sluice_engine *e)
{
    size_t n = ptab_bytes(&e->waitqs) + heap_bytes(&e->wakes), pos = 0;
    const waitq *q;

    while ((q = ptab_next(&e->waitqs, &pos)) != NULL)
        n += sizeof *q + q->keylen + 1 + heap_bytes(&q->tasks);
    return n;
}

void park_free_all(sluice_engine *e)
{
    size_t pos = 0;
    waitq *q;

    while ((q = ptab_next(&e->waitqs, &pos)) != NULL) {
        heap_free(&q->tasks);
        alloc_free(q->key);
        alloc_free(q);
    }
    ptab_free(&e->waitqs);
    heap_free(&e->wakes);
}
