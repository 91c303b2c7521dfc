/* SPDX-License-Identifier: MIT */
/*
 * The inside of a sluice_limit, shared by the files of the limit object: limit.c (decisions,
 * chains, reservations) and limit_persist.c (saving and restoring key state). Nothing outside
 * src/core includes this.
 */
#ifndef SLUICE_CORE_LIMIT_IMPL_H
#define SLUICE_CORE_LIMIT_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "sluice/limit.h"
#include "adapt.h"
#include "gcra.h"
#include "keytab.h"
#include "lease.h"
#include "quota.h"
#include "window.h"

/* A reservation: the slot handed out for an id, kept to answer a repeated ask. */
typedef struct reservation {
    int64_t slot_ns;
} reservation;

struct sluice_limit {
    sluice_limit_def def;          /* as given, with defaults filled in */
    gcra rate;                     /* RATE: precomputed parameters */
    keytab *keys;                  /* key -> per-kind state */
    keytab *reservations;          /* RATE: reservation id (8 bytes) -> reservation */
    lease_reg *leases;             /* CONCURRENCY: every lease */
    keytab *changed;               /* keys charged since the last drain (NULL: not tracking) */
    void (*on_changes)(void *arg); /* called when `changed` gets its first key (NULL: none) */
    void *on_changes_arg;
    int64_t last_now_ns;  /* newest time seen: the clock clamp */
    int64_t sweep_now_ns; /* `now` of the sweep in progress, for the idle callbacks */
    size_t sweep_pos;     /* where the next sweep resumes while changes are tracked */
    int shadow;           /* shadow mode: would-be denials pass uncharged (limit.h) */
    int adaptive;         /* RATE with an AIMD policy: keys are adapt_state, rate per key */
    int whole_rate;       /* RATE, not adaptive, T a whole number of ns: decided inline on a hit */
    adapt aimd;           /* adaptive: the policy's parameters */
    sluice_limit_stats stats;
};

/* A key after long keys were replaced by their digest. */
typedef struct norm_key {
    const char *key;
    size_t len;
    unsigned char digest[32];
} norm_key;

/* The latest time a limit works at: 101 years before INT64_MAX (the year 2161). A TAT may lie
 * up to burst * T <= 100 years ahead of now (gcra.c), so every time a limit forms from a later
 * clock would saturate and lose what it says; past it, time stops, and a key waits longer, never
 * less. */
#define LIMIT_LAST_NS (INT64_MAX - INT64_C(101) * 366 * 86400 * SLUICE_NS_PER_SEC)

/* What limit_clamp_now would return, remembering nothing: the `now` of a read (peek, estimate). */
static inline int64_t limit_view_now(const sluice_limit *lim, int64_t now_ns)
{
    if (now_ns < 0)
        now_ns = 0;
    else if (now_ns > LIMIT_LAST_NS)
        now_ns = LIMIT_LAST_NS;
    return now_ns > lim->last_now_ns ? now_ns : lim->last_now_ns;
}

/* The one clock clamp of sluice (limit.h, "Time"): every call that acts on a limit reads `now`
 * through here, so time inside a limit never runs backwards whoever calls, the engine or a
 * THROTTLE; it clamps now_ns to the newest time the limit has seen (and to >= 0) and remembers
 * it. Reads use limit_view_now and leave last_now_ns alone. Inline, as the next two: they are on
 * the path of every decision, and a call there is a stack frame the CPU must get through before
 * it can run ahead into the next decision's cache miss. */
static inline int64_t limit_clamp_now(sluice_limit *lim, int64_t now_ns)
{
    lim->last_now_ns = limit_view_now(lim, now_ns);
    return lim->last_now_ns;
}

/* Fills *nk with the key the table uses: the key itself, or its SHA-256 when longer than
 * max_key_len. Returns 0, SLUICE_EINVAL (NULL key with a length) or SLUICE_ENOMEM. */
int limit_normalize_key(sluice_limit *lim, const char *key, size_t keylen, norm_key *nk);

/* limit_normalize_key for reads: the same key, and nothing counted (a read changes nothing). */
int limit_read_key(const sluice_limit *lim, const char *key, size_t keylen, norm_key *nk);

/* Finds or creates a key's state for a call that will change it, applying the key cap and
 * recording the key for sluice_limit_drain. *state is NULL when the key goes untracked (cap
 * reached, overflow ALLOW); *fresh is 1 when it was just created. Returns 0, SLUICE_EBUSY or
 * SLUICE_ENOMEM. */
int limit_prepare_key(sluice_limit *lim, const norm_key *nk, int64_t now, void **state, int *fresh);

/* A full table's last resort before its overflow policy applies: forgets up to a fixed budget of
 * idle keys, at time `now` (already clamped). */
void limit_reclaim_keys(sluice_limit *lim, int64_t now);

/* Zeroed state of any kind, used to answer peeks about untracked keys. */
typedef union any_state {
    gcra_state rate;
    adapt_state adaptive;
    fixed_state window;
    sliding_state sliding;
    lease_key *lease;
    quota_state quota;
} any_state;

/* The GCRA parameters that decide on one key of a rate limit at `now`: the limit's own, or for
 * an adaptive limit those of the key's effective rate, built in *tmp, after bringing `state`
 * (its adapt_state) to now with adapt_refresh. A read works on a copy of the state. */
const gcra *limit_key_rate(const sluice_limit *lim, void *state, int64_t now, gcra *tmp);

/* Adaptive limits count their keys below the configured rate (stats.slowed): a key's stored
 * rate is lowered when its eff is not 0. Every write of a tracked key's AIMD state goes through
 * these two: limit_refresh_key brings a tracked key to now (adapt_refresh) and counts the change;
 * limit_note_slowed counts one the caller made (a decrease, an import), given whether the key
 * was lowered before. Removal is counted by the key table's destroy callback. No-ops for other
 * limits (limit_note_slowed: call it for adaptive limits only). */
void limit_refresh_key(sluice_limit *lim, void *state, int64_t now);
void limit_note_slowed(sluice_limit *lim, int was_slowed, const void *state);

/* Records that a key is about to change, for sluice_limit_drain (a no-op while the limit tracks
 * nothing). Done before the change, so running out of memory leaves nothing charged and nothing
 * unrecorded. Returns 0 or SLUICE_ENOMEM. */
int limit_mark_changed(sluice_limit *lim, const norm_key *nk);

/* Adds key to lim->changed (which must be non-NULL), calling lim->on_changes when it is the
 * first key recorded since the last drain. Returns 0 or SLUICE_ENOMEM (nothing recorded). */
int limit_note_changed(sluice_limit *lim, const char *key, size_t keylen);

/* Records a concurrency limit's key for sluice_limit_drain (a no-op while the limit tracks
 * nothing): its kept leases are about to change. limit_mark_changed skips concurrency keys, whose
 * task leases are not saved. Returns 0 or SLUICE_ENOMEM. */
int limit_mark_lease_key(sluice_limit *lim, const char *key, size_t keylen);

/* Decides on one key's state with the arithmetic of the limit's kind; `fresh` marks a key seen
 * for the first time, `peek` charges nothing. Returns 0, or an error from a kind that allocates
 * (sliding, concurrency). */
int limit_state_decide(sluice_limit *lim, void *state, int fresh, int64_t units, int64_t ttl_ns,
                       int64_t now, int peek, sluice_decision *d);

/* The decision given for a key the table cannot track (key cap reached, overflow ALLOW, or a
 * shadow limit whose overflow REFUSE would have refused it): allowed, with the limit's full
 * budget and `untracked` set, and shadow_denied for the would-be refusal. */
void limit_untracked_decision(const sluice_limit *lim, sluice_decision *d);

/* Turns a denial of a shadow limit into its pass (allowed, shadow_denied), counting nothing. */
static inline void limit_shadow_pass(sluice_decision *d)
{
    d->allowed = 1;
    d->shadow_denied = 1;
}

/* Counts a charging decision in the limit's figures (allowed, denied, units granted). A denial
 * of a shadow limit is turned into its pass here (allowed, shadow_denied set) and counted in
 * shadow_denied: the one branch shadow mode costs, on the denied path only. */
static inline void limit_count_decision(sluice_limit *lim, sluice_decision *d, int64_t units)
{
    if (d->allowed) {
        lim->stats.allowed++;
        lim->stats.units += (uint64_t)units;
    } else if (lim->shadow) {
        /* The denial charged nothing; it is only told as a pass. */
        limit_shadow_pass(d);
        lim->stats.shadow_denied++;
    } else {
        lim->stats.denied++;
    }
}

#endif
