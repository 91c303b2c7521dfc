/* SPDX-License-Identifier: MIT */
/*
 * Event aggregation (see events.h for the contract).
 *
 * Each open group is one allocation: its running summary followed, inline, by its identity
 * encoded as bytes, which is also its key in the group map (a pointer table, filed under the
 * hash_bytes of the identity). The encoding is the kind, then for each of limit, key and type
 * either a 0 byte (NULL) or a 1 byte followed by the string and its NUL, then for BUDGET the
 * percent. C strings hold no NUL, so the encoding is unambiguous, and the strings inside it are
 * ready-made C strings that the summary points to: a group copies its strings once, when it opens.
 * A binary min-heap on interval end says which group to flush next.
 *
 * Invariants:
 * - Every open group is in the map and in the heap exactly once, and is freed when it leaves
 *   both (at its flush, or in events_free()).
 * - A group's summary has count 0 until a second event of its interval arrives; a summary is
 *   delivered only with count > 0.
 * - The heap array and the map's slots are freed when the last group leaves, so an idle
 *   aggregator holds one small block whatever it saw before.
 *
 * Workload: under sustained throttling nearly every event belongs to a group already open, which
 * costs one encoding into a stack buffer and one hash lookup, and allocates nothing. Opening a
 * group costs one allocation plus amortized growth of the map and the heap.
 */
#include "engine/events.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "base/hash.h"
#include "base/heap.h"
#include "base/ptab.h"
#include "base/sat.h"
#include "sluice/error.h"
#include "sluice/limit.h"

#define IDENT_STACK_MAX 512 /* identities up to this many bytes are encoded on the stack */
#define HEAP_MIN_CAP    8   /* slots below which the heap's array is not halved */

/* One open group: an interval that began with an event delivered at once. */
typedef struct group {
    int64_t end_ns;   /* when the interval ends: the first event's now_ns + the interval */
    size_t hidx;      /* position in the heap */
    uint64_t hash;    /* of ident: its key in the group map */
    sluice_event sum; /* the summary of the events after the first; strings point into ident */
    size_t ident_len; /* bytes of ident */
    char ident[];     /* the encoded identity (see the file comment) */
} group;

struct events {
    int64_t interval_ns; /* length of every interval, >= 1 */
    sluice_event_fn fn;  /* the sink; NULL drops events */
    void *arg;           /* passed to fn */
    ptab groups;         /* every open group, by identity; no slots when empty */
    heap heap;           /* every open group, least end_ns first; no array when empty */
};

/* ---- Identities --------------------------------------------------------------------------- */

static size_t str_ident_len(const char *s)
{
    return s ? strlen(s) + 2 : 1;
}

static size_t ident_len(const sluice_event *e)
{
    size_t len =
        sizeof(int) + str_ident_len(e->limit) + str_ident_len(e->key) + str_ident_len(e->type);

    if (e->kind == SLUICE_EVENT_BUDGET)
        len += sizeof(int64_t);
    return len;
}

static char *put_str(char *p, const char *s)
{
    size_t n;

    if (!s) {
        *p++ = 0;
        return p;
    }
    *p++ = 1;
    n = strlen(s) + 1;
    memcpy(p, s, n);
    return p + n;
}

/* Writes e's identity to out, which has room for ident_len(e) bytes. */
static void encode_ident(const sluice_event *e, char *out)
{
    int kind = (int)e->kind;
    char *p = out;

    memcpy(p, &kind, sizeof kind);
    p += sizeof kind;
    p = put_str(p, e->limit);
    p = put_str(p, e->key);
    p = put_str(p, e->type);
    if (e->kind == SLUICE_EVENT_BUDGET)
        memcpy(p, &e->wanted, sizeof e->wanted);
}

/* Points *s at the string encoded at p (NULL for the NULL marker); returns the byte after it. */
static const char *get_str(const char *p, const char **s)
{
    if (*p++ == 0) {
        *s = NULL;
        return p;
    }
    *s = p;
    return p + strlen(p) + 1;
}

/* An identity being looked up. */
typedef struct ident_key {
    const char *p;
    size_t len;
} ident_key;

static int group_eq(const void *pg, const void *key)
{
    const group *g = pg;
    const ident_key *k = key;

    return g->ident_len == k->len && memcmp(g->ident, k->p, k->len) == 0;
}

/* ---- Arithmetic --------------------------------------------------------------------------- */

static uint64_t event_count(const sluice_event *e)
{
    return e->count ? e->count : 1;
}

/* ---- Delivery ----------------------------------------------------------------------------- */

/* Delivers e as an immediate event: summary 0, count at least 1, strings the caller's. */
static void deliver_now(const events *ev, const sluice_event *e)
{
    sluice_event out = *e;

    if (!ev->fn)
        return;
    out.count = event_count(e);
    out.summary = 0;
    ev->fn(&out, ev->arg);
}

/* ---- The heap ----------------------------------------------------------------------------- */

static int group_less(const void *a, const void *b)
{
    return ((const group *)a)->end_ns < ((const group *)b)->end_ns;
}

/* ---- Groups ------------------------------------------------------------------------------- */

/* Adds e, an event after the first of g's interval, to g's summary. */
static void accumulate(group *g, const sluice_event *e)
{
    uint64_t n = event_count(e);
    sluice_event *s = &g->sum;

    if (s->count == 0) {
        s->at_ns = e->at_ns;
        s->next_slot_ns = e->next_slot_ns;
    } else {
        if (e->at_ns < s->at_ns)
            s->at_ns = e->at_ns;
        if (e->next_slot_ns > s->next_slot_ns)
            s->next_slot_ns = e->next_slot_ns;
    }
    s->count = sat_add_u64(s->count, n);
    if (s->kind != SLUICE_EVENT_BUDGET)
        s->wanted = sat_add_i64(s->wanted, e->wanted);
    s->granted = sat_add_i64(s->granted, e->granted);
}

/* Opens a group for e (identity ident, len bytes) at now_ns and delivers e at once. Returns 0,
 * or SLUICE_ENOMEM with nothing changed and nothing delivered. */
static int open_group(events *ev, const sluice_event *e, const char *ident, size_t len,
                      uint64_t hash, int64_t now_ns)
{
    const char *p;
    group *g;
    int rc;

    /* Room in both structures first, so that filing the group cannot fail. */
    rc = heap_reserve(&ev->heap, ev->heap.n + 1);
    if (rc == SLUICE_OK)
        rc = ptab_reserve(&ev->groups, 1);
    if (rc != SLUICE_OK)
        return rc;
    if (len > SIZE_MAX - sizeof *g)
        return SLUICE_ENOMEM;
    g = alloc_malloc(sizeof *g + len);
    if (!g)
        return SLUICE_ENOMEM;
    memset(g, 0, sizeof *g);
    memcpy(g->ident, ident, len);
    g->ident_len = len;
    g->hash = hash;
    g->end_ns = sat_add_i64(now_ns, ev->interval_ns);
    g->sum.kind = e->kind;
    p = g->ident + sizeof(int);
    p = get_str(p, &g->sum.limit);
    p = get_str(p, &g->sum.key);
    (void)get_str(p, &g->sum.type);
    if (e->kind == SLUICE_EVENT_BUDGET)
        g->sum.wanted = e->wanted;
    g->sum.summary = 1;

    (void)ptab_insert(&ev->groups, hash, g); /* reserved */
    (void)heap_push(&ev->heap, g);           /* reserved */

    deliver_now(ev, e);
    return SLUICE_OK;
}

/* ---- The interface ------------------------------------------------------------------------ */

int events_new(int64_t interval_ns, events **out)
{
    events *ev;

    if (!out)
        return SLUICE_EINVAL;
    *out = NULL;
    if (interval_ns < 1)
        return SLUICE_EINVAL;
    ev = alloc_calloc(1, sizeof *ev);
    if (!ev)
        return SLUICE_ENOMEM;
    ev->interval_ns = interval_ns;
    heap_init(&ev->heap, group_less, offsetof(group, hidx));
    ptab_init(&ev->groups);
    *out = ev;
    return SLUICE_OK;
}

void events_free(events *ev)
{
    if (!ev)
        return;
    for (size_t i = 0; i < ev->heap.n; i++)
        alloc_free(heap_at(&ev->heap, i));
    heap_free(&ev->heap);
    ptab_free(&ev->groups);
    alloc_free(ev);
}

void events_set_sink(events *ev, sluice_event_fn fn, void *arg)
{
    if (!ev)
        return;
    ev->fn = fn;
    ev->arg = arg;
}

int events_emit(events *ev, const sluice_event *e, int64_t now_ns)
{
    char stack[IDENT_STACK_MAX];
    char *ident = stack;
    ident_key key;
    uint64_t hash;
    group *g;
    size_t len;
    int rc;

    if (!ev || !e)
        return SLUICE_EINVAL;
    (void)events_flush(ev, now_ns);

    len = ident_len(e);
    if (len > sizeof stack) {
        ident = alloc_malloc(len);
        if (!ident) {
            rc = SLUICE_ENOMEM;
            goto fail_deliver;
        }
    }
    encode_ident(e, ident);
    key.p = ident;
    key.len = len;
    hash = hash_bytes(ident, len);
    g = ptab_find(&ev->groups, hash, &key, group_eq);
    if (g) {
        accumulate(g, e);
        rc = SLUICE_OK;
    } else {
        rc = open_group(ev, e, ident, len, hash, now_ns);
    }
    if (ident != stack)
        alloc_free(ident);
    if (rc != SLUICE_OK)
        goto fail_deliver;
    return SLUICE_OK;

fail_deliver:
    /* Never lost silently: what cannot be aggregated goes out on its own. */
    deliver_now(ev, e);
    return rc;
}

int events_flush(events *ev, int64_t now_ns)
{
    if (!ev)
        return SLUICE_EINVAL;
    for (;;) {
        group *g = heap_top(&ev->heap);

        if (!g || g->end_ns > now_ns)
            break;
        (void)heap_pop(&ev->heap);
        (void)ptab_remove(&ev->groups, g->hash, g);
        /* The group has left both structures, so a sink that looks at ev sees it gone. */
        if (g->sum.count > 0 && ev->fn)
            ev->fn(&g->sum, ev->arg);
        alloc_free(g);
    }
    /* The arrays follow the groups open, and are freed once none is (the map never shrinks
     * otherwise: it is sized by the most groups open at once). */
    if (ev->heap.n == 0) {
        heap_free(&ev->heap);
        ptab_free(&ev->groups);
    } else {
        heap_trim(&ev->heap, HEAP_MIN_CAP);
    }
    return SLUICE_OK;
}

int64_t events_next_flush(const events *ev)
{
    const group *g = ev ? heap_top(&ev->heap) : NULL;

    return g ? g->end_ns : SLUICE_NEVER;
}
