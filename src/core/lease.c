/* SPDX-License-Identifier: MIT */
/*
 * Concurrency leases: see lease.h.
 *
 * Every lease the registry remembers sits in two structures: an open-addressing map from lease id
 * to lease (linear probing, backward-shift deletion, load <= 3/4) and a binary min-heap (base/heap)
 * ordered by (expiry, id), each lease storing its heap index so release and renew fix it in
 * O(log n). A live
 * lease also sits in its key's doubly-linked list, which is kept sorted by expiry: the earliest
 * expiry (retry_after) is its head, the latest (reset_after) its tail, and expired leases are
 * dropped from the head. Insertion walks back from the tail, so it is O(1) when a key's leases
 * share one TTL and time moves forward (the common case) and O(leases of the key) otherwise.
 *
 * Invariants:
 * - map count == heap length == leases allocated; every lease is in both;
 * - a live lease has key != NULL and units >= 1 and is in key's list; a tombstone (released, not
 *   yet expired) has key == NULL and units == 0 and is in no list;
 * - key->held == sum of units of the leases in key's list;
 * - a lease is forgotten (unlinked and freed) once it is popped by lease_expire(), dropped by
 *   lease_acquire() on its key, or its key is freed; lookups of a lease whose expiry is <= now
 *   treat it as forgotten already, so the moment it is actually freed is never observable.
 *
 * Teardown: free the keys (lease_key_free) and then the registry. A key freed after its registry
 * must be passed r == NULL; lease_reg_free() left it holding nothing.
 *
 * Allocation happens only in lease_acquire() (key, lease, map and heap growth, all obtained before
 * anything changes) and in the opportunistic shrinking of lease_expire(), whose failure is ignored.
 */
#include "lease.h"

#include <stddef.h>
#include <string.h>

#include "base/alloc.h"
#include "base/heap.h"
#include "base/sat.h"
#include "sluice/error.h"

#define MAP_MIN_CAP  ((size_t)16)
#define HEAP_MIN_CAP ((size_t)16)

typedef struct lease lease;

/* One lease, live or a tombstone. */
struct lease {
    uint64_t id;        /* issued in increasing order from 1 */
    int64_t expires_ns; /* expired when expires_ns <= now */
    int64_t units;      /* units held; 0 for a tombstone */
    lease_key *key;     /* owning key; NULL for a tombstone */
    lease *prev;        /* neighbours in key's list (sorted by expiry) */
    lease *next;
    size_t heap_idx; /* position in the registry's heap */
};

/* One key's share of a concurrency limit. */
struct lease_key {
    int64_t held; /* units of the leases in the list */
    lease *head;  /* live lease expiring first */
    lease *tail;  /* live lease expiring last */
};

/* The leases of one concurrency limit. */
struct lease_reg {
    uint64_t next_id; /* id of the next lease issued */
    lease **slots;    /* id map: map_cap slots, NULL when empty */
    size_t map_cap;   /* 0 or a power of two */
    size_t map_count; /* leases in the map (== expiry.n) */
    heap expiry;      /* every lease, soonest (expires_ns, id) first */
    size_t nkeys;     /* lease_keys allocated (for lease_bytes) */
};

/* ---- Time arithmetic ------------------------------------------------------------------------- */

/* The wait from now until t (t > now for a live lease); 0 when t <= now, saturated. */
static int64_t wait_until(int64_t t, int64_t now)
{
    return t <= now ? 0 : sat_sub_i64(t, now);
}

/* ---- Id map ---------------------------------------------------------------------------------- */

static size_t map_home(uint64_t id, size_t mask)
{
    uint64_t h = id * UINT64_C(0x9e3779b97f4a7c15);

    h ^= h >> 29;
    return (size_t)h & mask;
}

static lease *map_find(const lease_reg *r, uint64_t id)
{
    size_t mask, i;

    if (r->map_cap == 0)
        return NULL;
    mask = r->map_cap - 1;
    for (i = map_home(id, mask); r->slots[i]; i = (i + 1) & mask) {
        if (r->slots[i]->id == id)
            return r->slots[i];
    }
    return NULL;
}

/* Puts l into slots (cap a power of two with a free slot); l's id is not there yet. */
static void map_place(lease **slots, size_t cap, lease *l)
{
    size_t mask = cap - 1;
    size_t i = map_home(l->id, mask);

    while (slots[i])
        i = (i + 1) & mask;
    slots[i] = l;
}

/* Moves every lease into `slots` (zeroed, cap slots) and frees the old array. */
static void map_rehash(lease_reg *r, lease **slots, size_t cap)
{
    for (size_t i = 0; i < r->map_cap; i++) {
        if (r->slots[i])
            map_place(slots, cap, r->slots[i]);
    }
    sluice_free(r->slots);
    r->slots = slots;
    r->map_cap = cap;
}

/* Removes l from the map, shifting later entries of its probe run back (no tombstones). */
static void map_remove(lease_reg *r, const lease *l)
{
    size_t mask = r->map_cap - 1;
    size_t i = map_home(l->id, mask);
    size_t j;

    while (r->slots[i] != l)
        i = (i + 1) & mask;
    j = i;
    for (;;) {
        size_t home;

        j = (j + 1) & mask;
        if (!r->slots[j])
            break;
        home = map_home(r->slots[j]->id, mask);
        /* The entry at j may move to the hole at i unless its home lies cyclically in (i, j]. */
        if (i <= j ? (home > i && home <= j) : (home > i || home <= j))
            continue;
        r->slots[i] = r->slots[j];
        i = j;
    }
    r->slots[i] = NULL;
    r->map_count--;
}

/* ---- Expiry heap ----------------------------------------------------------------------------- */

/* The heap's order: soonest expiry first, ties by id (so expiry order is deterministic). Passed
 * to the heap_*_by functions, so acquire, renew and release compare inline. */
static int lease_before(const void *pa, const void *pb)
{
    const lease *a = pa, *b = pb;

    if (a->expires_ns != b->expires_ns)
        return a->expires_ns < b->expires_ns;
    return a->id < b->id;
}

/* ---- Key lists ------------------------------------------------------------------------------- */

/* Inserts l into k's list by expiry, walking back from the tail. */
static void key_link(lease_key *k, lease *l)
{
    lease *after = k->tail;

    while (after && after->expires_ns > l->expires_ns)
        after = after->prev;
    l->prev = after;
    l->next = after ? after->next : k->head;
    if (l->next)
        l->next->prev = l;
    else
        k->tail = l;
    if (after)
        after->next = l;
    else
        k->head = l;
}

static void key_unlink(lease_key *k, lease *l)
{
    if (l->prev)
        l->prev->next = l->next;
    else
        k->head = l->next;
    if (l->next)
        l->next->prev = l->prev;
    else
        k->tail = l->prev;
    l->prev = NULL;
    l->next = NULL;
}

/* ---- Lease lifetime -------------------------------------------------------------------------- */

/* Forgets l entirely: gives back its units (if live) and frees it. */
static void lease_forget(lease_reg *r, lease *l)
{
    if (l->key) {
        l->key->held -= l->units;
        key_unlink(l->key, l);
    }
    heap_remove_by(&r->expiry, l, lease_before);
    map_remove(r, l);
    sluice_free(l);
}

/* Forgets k's leases that expired by now_ns (they are at the head of its list). */
static void key_drop_expired(lease_reg *r, lease_key *k, int64_t now_ns)
{
    while (k->head && k->head->expires_ns <= now_ns)
        lease_forget(r, k->head);
}

/* Returns the remembered, unexpired lease with this id, or NULL. */
static lease *lease_lookup(const lease_reg *r, uint64_t id, int64_t now_ns)
{
    lease *l = map_find(r, id);

    return l && l->expires_ns > now_ns ? l : NULL;
}

/* Shrinks the map and heap after mass expiry so memory follows the live leases. Best effort: an
 * allocation failure keeps the larger arrays. */
/* The expiry after which enough of k's leases are gone for `units` (<= limit) to fit: walks the
 * list in expiry order, so a request for several units waits for as many expiries as it needs,
 * not just the first. */
static int64_t expiry_freeing(const lease_key *k, int64_t limit, int64_t units)
{
    int64_t held = k->held;
    const lease *l = k->head;

    while (l->next && units > limit - (held - l->units)) {
        held -= l->units;
        l = l->next;
    }
    return l->expires_ns;
}

static void reg_shrink(lease_reg *r)
{
    if (r->map_cap > MAP_MIN_CAP && r->map_count < r->map_cap / 8) {
        size_t cap = r->map_cap / 2;
        lease **slots;

        while (cap > MAP_MIN_CAP && r->map_count < cap / 8)
            cap /= 2;
        slots = sluice_calloc(cap, sizeof *slots);
        if (slots)
            map_rehash(r, slots, cap);
    }
    if (r->expiry.cap > HEAP_MIN_CAP && r->expiry.n < r->expiry.cap / 4)
        heap_trim(&r->expiry, HEAP_MIN_CAP);
}

/* ---- Public functions ------------------------------------------------------------------------ */

int lease_reg_new(lease_reg **out)
{
    lease_reg *r;

    *out = NULL;
    r = sluice_calloc(1, sizeof *r);
    if (!r)
        return SLUICE_ENOMEM;
    r->next_id = 1;
    heap_init(&r->expiry, lease_before, offsetof(lease, heap_idx));
    *out = r;
    return SLUICE_OK;
}

void lease_reg_free(lease_reg *r)
{
    if (!r)
        return;
    /* Detach live leases from their keys so that keys freed later hold nothing dangling. */
    for (size_t i = 0; i < r->expiry.n; i++) {
        lease *l = heap_at(&r->expiry, i);

        if (l->key) {
            l->key->head = NULL;
            l->key->tail = NULL;
            l->key->held = 0;
        }
        sluice_free(l);
    }
    heap_free(&r->expiry);
    sluice_free(r->slots);
    sluice_free(r);
}

int lease_acquire(lease_reg *r, lease_key **kp, int64_t limit, int64_t units, int64_t ttl_ns,
                  int64_t now_ns, int peek, sluice_decision *d)
{
    lease_key *k = *kp;
    lease_key *new_key = NULL;
    lease **new_slots = NULL;
    size_t new_map_cap = 0;
    lease *l;
    int64_t held;

    memset(d, 0, sizeof *d);
    if (k)
        key_drop_expired(r, k, now_ns);
    held = k ? k->held : 0;
    d->limit = limit;

    /* units > limit - held rather than held + units > limit: no overflow for any units. */
    if (units > limit || units > limit - held) {
        d->allowed = 0;
        d->remaining = limit > held ? limit - held : 0;
        if (units > limit)
            d->retry_after_ns = SLUICE_NEVER;
        else
            d->retry_after_ns = wait_until(expiry_freeing(k, limit, units), now_ns);
        d->reset_after_ns = k && k->tail ? wait_until(k->tail->expires_ns, now_ns) : 0;
        return SLUICE_OK;
    }

    d->allowed = 1;
    if (peek) {
        /* Nothing is charged, so the figures are those of the key as it stands. */
        d->remaining = limit - held;
        d->reset_after_ns = k && k->tail ? wait_until(k->tail->expires_ns, now_ns) : 0;
        return SLUICE_OK;
    }

    /* Obtain every allocation before changing anything; the heap realloc comes last because a
     * successful realloc cannot be undone. */
    if ((r->map_count + 1) * 4 > r->map_cap * 3) {
        new_map_cap = r->map_cap ? r->map_cap * 2 : MAP_MIN_CAP;
        if (new_map_cap > SIZE_MAX / 2 / sizeof *new_slots)
            return SLUICE_ENOMEM;
        new_slots = sluice_calloc(new_map_cap, sizeof *new_slots);
        if (!new_slots)
            goto fail_slots;
    }
    if (!k) {
        new_key = sluice_calloc(1, sizeof *new_key);
        if (!new_key)
            goto fail_key;
    }
    l = sluice_calloc(1, sizeof *l);
    if (!l)
        goto fail_lease;
    if (r->expiry.n == r->expiry.cap &&
        heap_reserve(&r->expiry, r->expiry.n < HEAP_MIN_CAP ? HEAP_MIN_CAP : r->expiry.n + 1) !=
            SLUICE_OK)
        goto fail_heap;

    if (new_slots)
        map_rehash(r, new_slots, new_map_cap);
    if (new_key) {
        k = new_key;
        *kp = k;
        r->nkeys++;
    }
    l->id = r->next_id++;
    l->expires_ns = sat_add_i64(now_ns, ttl_ns);
    l->units = units;
    l->key = k;
    map_place(r->slots, r->map_cap, l);
    r->map_count++;
    (void)heap_push_by(&r->expiry, l, lease_before); /* reserved */
    key_link(k, l);
    k->held += units;

    d->remaining = limit - k->held;
    d->reset_after_ns = wait_until(k->tail->expires_ns, now_ns);
    d->lease_id = l->id;
    return SLUICE_OK;

fail_heap:
    sluice_free(l);
fail_lease:
    sluice_free(new_key);
fail_key:
    sluice_free(new_slots);
fail_slots:
    return SLUICE_ENOMEM;
}

int lease_renew(lease_reg *r, uint64_t lease_id, int64_t ttl_ns, int64_t now_ns,
                int64_t *expires_ns)
{
    lease *l = lease_lookup(r, lease_id, now_ns);

    if (expires_ns)
        *expires_ns = 0;
    if (!l || !l->key)
        return SLUICE_ESTALE;
    key_unlink(l->key, l);
    l->expires_ns = sat_add_i64(now_ns, ttl_ns);
    key_link(l->key, l);
    heap_update_by(&r->expiry, l, lease_before);
    if (expires_ns)
        *expires_ns = l->expires_ns;
    return SLUICE_OK;
}

int lease_release(lease_reg *r, uint64_t lease_id, int64_t now_ns)
{
    lease *l = lease_lookup(r, lease_id, now_ns);

    if (!l)
        return SLUICE_ESTALE;
    if (l->key) {
        /* Becomes a tombstone: remembered (in map and heap) until its expiry, holding nothing. */
        l->key->held -= l->units;
        key_unlink(l->key, l);
        l->key = NULL;
        l->units = 0;
    }
    return SLUICE_OK;
}

size_t lease_expire(lease_reg *r, int64_t now_ns, void (*fn)(uint64_t lease_id, void *arg),
                    void *arg)
{
    size_t n = 0;

    for (;;) {
        lease *l = heap_top(&r->expiry);
        uint64_t id;
        int live;

        if (!l || l->expires_ns > now_ns)
            break;
        id = l->id;
        live = l->key != NULL;
        /* Forget first, so that fn sees the registry in its final state and may call into it. */
        lease_forget(r, l);
        if (live) {
            n++;
            if (fn)
                fn(id, arg);
        }
    }
    reg_shrink(r);
    return n;
}

int64_t lease_key_held(const lease_key *k)
{
    return k ? k->held : 0;
}

int lease_key_idle(const lease_key *k, int64_t now_ns)
{
    /* The list is sorted by expiry: no live lease when the latest one has expired. */
    return !k || !k->tail || k->tail->expires_ns <= now_ns;
}

void lease_key_free(lease_reg *r, lease_key *k)
{
    if (!k)
        return;
    /* Keys are normally freed before their registry. lease_reg_free() detaches every key from its
     * leases, so a key outliving its registry is freed with r == NULL and touches nothing else. */
    while (k->head)
        lease_forget(r, k->head);
    if (r)
        r->nkeys--;
    sluice_free(k);
}

size_t lease_bytes(const lease_reg *r)
{
    if (!r)
        return 0;
    return sizeof *r + r->map_cap * sizeof *r->slots + heap_bytes(&r->expiry) +
           r->map_count * sizeof(lease) + r->nkeys * sizeof(lease_key);
}
