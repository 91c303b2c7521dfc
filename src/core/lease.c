/* SPDX-License-Identifier: MIT */
/*
 * Concurrency leases: see lease.h.
 *
 * Every lease the registry remembers sits in two structures: a map from lease id to lease (the
 * base pointer table, ids hashed by hash_mix) and a binary min-heap (base/heap) ordered by
 * (expiry, id), each lease storing its heap index so release and renew fix it in O(log n). A live
 * lease also sits in its key's doubly-linked list, which is kept sorted by expiry: the earliest
 * expiry (retry_after) is its head, the latest (reset_after) its tail, and expired leases are
 * dropped from the head. Insertion walks back from the tail, so it is O(1) when a key's leases
 * share one TTL and time moves forward (the common case) and O(leases of the key) otherwise.
 *
 * A kept lease (lease_acquire_kept, lease_restore) also carries its holder's tag and a copy of
 * the normalised key it is on, so that a renew or a release, which name only the id, can tell
 * the limit which key's saved state changed; the leases of tasks carry neither.
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
#include "base/hash.h"
#include "base/heap.h"
#include "base/ptab.h"
#include "base/sat.h"
#include "sluice/error.h"

#define HEAP_MIN_CAP ((size_t)16)

typedef struct lease lease;

/* One lease, live or a tombstone. */
struct lease {
    uint64_t id;        /* issued in increasing order from 1, or restored with its own */
    int64_t expires_ns; /* expired when expires_ns <= now */
    int64_t units;      /* units held; 0 for a tombstone */
    lease_key *key;     /* owning key; NULL for a tombstone */
    lease *prev;        /* neighbours in key's list (sorted by expiry) */
    lease *next;
    size_t heap_idx; /* position in the registry's heap */
    uint64_t tag;    /* the holder's tag; non-zero: a kept lease, saved with its key */
    size_t keylen;   /* kept: bytes of name */
    char name[];     /* kept: the (normalised) key it was taken on, so that a renew or a
                      * release by id can say which key's saved leases changed */
};

/* One key's share of a concurrency limit. */
struct lease_key {
    int64_t held; /* units of the leases in the list */
    lease *head;  /* live lease expiring first */
    lease *tail;  /* live lease expiring last */
    int stored;   /* a kept lease was taken or restored on it: a store may hold its leases */
};

/* The leases of one concurrency limit. */
struct lease_reg {
    uint64_t next_id; /* id of the next lease issued */
    ptab map;         /* every lease, filed under hash_mix(id); map.n == expiry.n */
    heap expiry;      /* every lease, soonest (expires_ns, id) first */
    size_t nkeys;     /* lease_keys allocated (for lease_bytes) */
    size_t names;     /* bytes of the kept leases' key names (for lease_bytes) */
};

/* ---- Time arithmetic ------------------------------------------------------------------------- */

/* The wait from now until t (t > now for a live lease); 0 when t <= now, saturated. */
static int64_t wait_until(int64_t t, int64_t now)
{
    return t <= now ? 0 : sat_sub_i64(t, now);
}

static int lease_has_id(const void *p, const void *key)
{
    return ((const lease *)p)->id == *(const uint64_t *)key;
}

static lease *map_find(const lease_reg *r, uint64_t id)
{
    return ptab_find(&r->map, hash_mix(id), &id, lease_has_id);
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
    (void)ptab_remove(&r->map, hash_mix(l->id), l);
    r->names -= l->keylen;
    alloc_free(l);
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
/* The expiry after which enough of a key's leases are gone for `units` (<= limit) to fit, given
 * its first live lease l and the units `held` from l on: walks the list in expiry order, so a
 * request for several units waits for as many expiries as it needs, not just the first. */
static int64_t expiry_freeing(const lease *l, int64_t held, int64_t limit, int64_t units)
{

    while (l->next && units > limit - (held - l->units)) {
        held -= l->units;
        l = l->next;
    }
    return l->expires_ns;
}

static void reg_shrink(lease_reg *r)
{
    ptab_shrink(&r->map);
    if (r->expiry.cap > HEAP_MIN_CAP && r->expiry.n < r->expiry.cap / 4)
        heap_trim(&r->expiry, HEAP_MIN_CAP);
}

/* ---- Public functions ------------------------------------------------------------------------ */

int lease_reg_new(lease_reg **out)
{
    lease_reg *r;

    *out = NULL;
    r = alloc_calloc(1, sizeof *r);
    if (!r)
        return SLUICE_ENOMEM;
    r->next_id = 1;
    heap_init(&r->expiry, lease_before, offsetof(lease, heap_idx));
    ptab_init(&r->map);
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
        alloc_free(l);
    }
    heap_free(&r->expiry);
    ptab_free(&r->map);
    alloc_free(r);
}

/* Inserts a lease (id, expiry, units, and kept's tag and key when kept is not NULL) on key *kp,
 * creating the key when *kp is NULL, into the map, the expiry heap and the key's list. Takes every
 * allocation before changing anything (the heap's larger array is obtained aside and installed
 * only once the map has room too, because a successful realloc cannot be undone), so NULL (out of
 * memory) leaves the registry exactly as it was. The caller counts the units in the key. */
static lease *insert_lease(lease_reg *r, lease_key **kp, uint64_t id, int64_t expires_ns,
                           int64_t units, const lease_tagging *kept)
{
    lease_key *k = *kp, *new_key = NULL;
    size_t keylen = kept ? kept->keylen : 0;
    void **items;
    size_t items_cap;
    lease *l;

    if (!k) {
        new_key = alloc_calloc(1, sizeof *new_key);
        if (!new_key)
            return NULL;
    }
    l = alloc_calloc(1, sizeof *l + keylen);
    if (!l)
        goto fail;
    if (heap_prepare(&r->expiry, r->expiry.n < HEAP_MIN_CAP ? HEAP_MIN_CAP : r->expiry.n + 1,
                     &items, &items_cap) != SLUICE_OK)
        goto fail;
    if (ptab_reserve(&r->map, 1) != SLUICE_OK) {
        alloc_free(items);
        goto fail;
    }
    heap_install(&r->expiry, items, items_cap);
    if (new_key) {
        k = new_key;
        *kp = k;
        r->nkeys++;
    }
    l->id = id;
    l->expires_ns = expires_ns;
    l->units = units;
    l->key = k;
    if (kept) {
        l->tag = kept->tag;
        l->keylen = kept->keylen;
        if (kept->keylen)
            memcpy(l->name, kept->key, kept->keylen);
        r->names += kept->keylen;
    }
    (void)ptab_insert(&r->map, hash_mix(l->id), l);  /* cannot fail after the reserve */
    (void)heap_push_by(&r->expiry, l, lease_before); /* reserved */
    key_link(k, l);
    return l;

fail:
    alloc_free(l);
    alloc_free(new_key);
    return NULL;
}

/* lease_acquire and lease_acquire_kept: a kept lease (tag != 0) carries its key's name. */
static int acquire(lease_reg *r, lease_key **kp, int64_t limit, int64_t units, int64_t ttl_ns,
                   int64_t now_ns, int peek, const lease_tagging *kept, sluice_decision *d)
{
    lease_key *k = *kp;
    lease *l;
    const lease *head; /* k's first lease alive at now_ns */
    int64_t held;      /* the units of k's leases alive at now_ns */

    memset(d, 0, sizeof *d);
    head = NULL;
    held = 0;
    if (k && !peek) {
        key_drop_expired(r, k, now_ns);
        head = k->head;
        held = k->held;
    } else if (k) {
        /* A peek is a read: it skips the leases expired by now_ns instead of forgetting them,
         * since now_ns may be ahead of the limit's clock, which a later call can still be at. */
        head = k->head;
        held = k->held;
        while (head && head->expires_ns <= now_ns) {
            held -= head->units;
            head = head->next;
        }
    }
    d->limit = limit;

    /* units > limit - held rather than held + units > limit: no overflow for any units. */
    if (units > limit || units > limit - held) {
        d->allowed = 0;
        d->remaining = limit > held ? limit - held : 0;
        if (units > limit)
            d->retry_after_ns = SLUICE_NEVER;
        else
            d->retry_after_ns = wait_until(expiry_freeing(head, held, limit, units), now_ns);
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

    l = insert_lease(r, kp, r->next_id, sat_add_i64(now_ns, ttl_ns), units, kept);
    if (!l)
        return SLUICE_ENOMEM;
    r->next_id++;
    k = *kp;
    if (kept)
        k->stored = 1;
    k->held += units;

    d->remaining = limit - k->held;
    d->reset_after_ns = wait_until(k->tail->expires_ns, now_ns);
    d->lease_id = l->id;
    return SLUICE_OK;
}

int lease_acquire(lease_reg *r, lease_key **kp, int64_t limit, int64_t units, int64_t ttl_ns,
                  int64_t now_ns, int peek, sluice_decision *d)
{
    return acquire(r, kp, limit, units, ttl_ns, now_ns, peek, NULL, d);
}

int lease_acquire_kept(lease_reg *r, lease_key **kp, int64_t limit, int64_t units, int64_t ttl_ns,
                       int64_t now_ns, const lease_tagging *kept, sluice_decision *d)
{
    return acquire(r, kp, limit, units, ttl_ns, now_ns, 0, kept, d);
}

int lease_restore(lease_reg *r, lease_key **kp, uint64_t lease_id, int64_t units,
                  int64_t expires_ns, const lease_tagging *kept)
{
    if (lease_id == 0 || units < 1 || kept->tag == 0 || map_find(r, lease_id))
        return SLUICE_EINVAL;
    if (!insert_lease(r, kp, lease_id, expires_ns, units, kept))
        return SLUICE_ENOMEM;
    /* Restored leases were granted: they count even past the limit (a smaller one now). */
    (*kp)->held += units;
    (*kp)->stored = 1;
    if (lease_id >= r->next_id)
        r->next_id = lease_id + 1; /* ids issued later never meet a restored one */
    return SLUICE_OK;
}

int lease_tag(const lease_reg *r, uint64_t lease_id, int64_t now_ns, uint64_t *tag)
{
    const lease *l = lease_lookup(r, lease_id, now_ns);

    *tag = 0;
    if (!l)
        return SLUICE_ESTALE;
    *tag = l->tag;
    return SLUICE_OK;
}

int lease_kept_name(const lease_reg *r, uint64_t lease_id, int64_t now_ns, const char **key,
                    size_t *keylen)
{
    const lease *l = lease_lookup(r, lease_id, now_ns);

    *key = NULL;
    *keylen = 0;
    if (!l || l->tag == 0 || !l->key)
        return 0;
    *key = l->name;
    *keylen = l->keylen;
    return 1;
}

size_t lease_key_kept(const lease_key *k, int64_t now_ns,
                      void (*fn)(uint64_t lease_id, uint64_t tag, int64_t units, int64_t expires_ns,
                                 void *arg),
                      void *arg)
{
    size_t n = 0;

    for (const lease *l = k ? k->head : NULL; l; l = l->next) {
        if (l->tag == 0 || l->expires_ns <= now_ns)
            continue;
        n++;
        if (fn)
            fn(l->id, l->tag, l->units, l->expires_ns, arg);
    }
    return n;
}

int lease_key_stored(const lease_key *k)
{
    return k && k->stored;
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

int lease_check(const lease_reg *r, uint64_t lease_id, const lease_key *k, int64_t now_ns,
                int64_t *expires_ns)
{
    const lease *l = lease_lookup(r, lease_id, now_ns);

    if (expires_ns)
        *expires_ns = 0;
    if (!l || !l->key) /* gone, or a tombstone: a released lease holds nothing */
        return SLUICE_ESTALE;
    if (k && l->key != k)
        return SLUICE_ENOTFOUND;
    if (expires_ns)
        *expires_ns = l->expires_ns;
    return SLUICE_OK;
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
    alloc_free(k);
}

size_t lease_bytes(const lease_reg *r)
{
    if (!r)
        return 0;
    return sizeof *r + ptab_bytes(&r->map) + heap_bytes(&r->expiry) + r->map.n * sizeof(lease) +
           r->names + r->nkeys * sizeof(lease_key);
}
