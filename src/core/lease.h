/* SPDX-License-Identifier: MIT */
/*
 * Concurrency leases: at most `limit` units held at once per key; each holder has a lease with a
 * time-to-live, so a holder that disappears gives its units back when the lease expires.
 *
 * A lease_reg belongs to one concurrency limit and holds every lease of it: a map from lease id
 * to lease, and a min-heap of expiry times so that sluice_lease_expire() finds expired leases
 * without scanning. A lease_key is one key's share: the units held and its live leases; the key
 * table stores a pointer to it (it is heap-allocated so that leases can point back to it while
 * the table moves entries).
 *
 * A lease is kept when its holder gave it a non-zero tag (lease_acquire_kept): a store saves the
 * kept leases of a key with the key's state (limit_persist.c) and lease_restore brings them back
 * with their ids and tags after a restart. The leases tasks hold are not kept (tag 0): a task
 * restored running takes its leases again, so saving them too would count them twice.
 *
 * Invariants:
 * - held == sum of units of the key's live (unreleased, unexpired-when-last-looked) leases;
 * - lease ids are issued in increasing order from 1 (or above the largest restored one) and
 *   never reused within a registry;
 * - a released lease is remembered until it would have expired, so releasing it again is a
 *   successful no-op; an expired lease is forgotten, so releasing it is SLUICE_ESTALE.
 */
#ifndef SLUICE_CORE_LEASE_H
#define SLUICE_CORE_LEASE_H

#include <stddef.h>
#include <stdint.h>

#include "sluice/limit.h"

typedef struct lease_reg lease_reg;
typedef struct lease_key lease_key;

/* Returns 0 and a new registry in *out, or SLUICE_ENOMEM. */
int lease_reg_new(lease_reg **out);

/* Frees the registry and every lease in it (lease_keys are freed by lease_key_free). Accepts
 * NULL. */
void lease_reg_free(lease_reg *r);

/* Asks for `units` on the key whose share is *kp (NULL for a key without leases). Leases of the
 * key that expired by now_ns are dropped first. Granted when held + units <= limit: unless peek,
 * a lease expiring at now_ns + ttl_ns is created (allocating *kp when NULL) and its id put in
 * d->lease_id. A denial's retry_after is the time until enough of the key's leases have expired
 * for `units` to fit (a release may come sooner), or SLUICE_NEVER when units > limit. Returns 0, or
 * SLUICE_ENOMEM with nothing taken. */
int lease_acquire(lease_reg *r, lease_key **kp, int64_t limit, int64_t units, int64_t ttl_ns,
                  int64_t now_ns, int peek, sluice_decision *d);

/* Who holds a kept lease: its tag (non-zero) and the normalised key it is on (keylen bytes). */
typedef struct lease_tagging {
    uint64_t tag;
    const char *key;
    size_t keylen;
} lease_tagging;

/* lease_acquire (never a peek) of a kept lease: the lease carries kept->tag and a copy of its
 * key, and marks *kp as stored. */
int lease_acquire_kept(lease_reg *r, lease_key **kp, int64_t limit, int64_t units, int64_t ttl_ns,
                       int64_t now_ns, const lease_tagging *kept, sluice_decision *d);

/* Brings back a kept lease with its own id, units, expiry and tagging, whatever the key holds
 * (it was granted before a restart). Later ids are issued above it. Returns 0, SLUICE_EINVAL
 * (id 0 or taken, units < 1, tag 0) or SLUICE_ENOMEM, changing nothing on failure. */
int lease_restore(lease_reg *r, lease_key **kp, uint64_t lease_id, int64_t units,
                  int64_t expires_ns, const lease_tagging *kept);

/* The tag of lease lease_id, remembered at now_ns (live, or released and not yet expired): 0
 * and *tag (0 for a lease not kept), or SLUICE_ESTALE (*tag 0). */
int lease_tag(const lease_reg *r, uint64_t lease_id, int64_t now_ns, uint64_t *tag);

/* Returns 1 and the key of live kept lease lease_id (borrowed, valid while it lives), else 0. */
int lease_kept_name(const lease_reg *r, uint64_t lease_id, int64_t now_ns, const char **key,
                    size_t *keylen);

/* Calls fn (may be NULL) for every kept lease of k alive at now_ns, in expiry order, and returns
 * how many there are. A read. */
size_t lease_key_kept(const lease_key *k, int64_t now_ns,
                      void (*fn)(uint64_t lease_id, uint64_t tag, int64_t units, int64_t expires_ns,
                                 void *arg),
                      void *arg);

/* Returns 1 when a kept lease was ever taken or restored on k (a store may hold its state). */
int lease_key_stored(const lease_key *k);

/* See sluice_lease_renew / sluice_lease_release / sluice_lease_expire in sluice/limit.h. */
int lease_renew(lease_reg *r, uint64_t lease_id, int64_t ttl_ns, int64_t now_ns,
                int64_t *expires_ns);
int lease_release(lease_reg *r, uint64_t lease_id, int64_t now_ns);
size_t lease_expire(lease_reg *r, int64_t now_ns, void (*fn)(uint64_t lease_id, void *arg),
                    void *arg);

/* A read of lease lease_id at now_ns: returns 0 when it is live and holds units of key k (k
 * NULL: of any key), *expires_ns (may be NULL) then getting its expiry; SLUICE_ESTALE when it
 * expired, was released or was never issued; SLUICE_ENOTFOUND when it is live on another key.
 * Changes nothing: an expired lease is not forgotten here. */
int lease_check(const lease_reg *r, uint64_t lease_id, const lease_key *k, int64_t now_ns,
                int64_t *expires_ns);

/* Units k holds (0 for NULL). */
int64_t lease_key_held(const lease_key *k);

/* Returns 1 when k (may be NULL) has no live lease at now_ns. */
int lease_key_idle(const lease_key *k, int64_t now_ns);

/* Frees k; its live leases are forgotten and become stale. Accepts NULL. */
void lease_key_free(lease_reg *r, lease_key *k);

/* Bytes held by the registry, its leases and lease_keys. */
size_t lease_bytes(const lease_reg *r);

#endif
