/* SPDX-License-Identifier: MIT */
/*
 * The limit object: one policy (rate, window, sliding, concurrency, quota) and the state of every
 * key it tracks, behind the public API of include/sluice/limit.h.
 *
 * This file owns what the per-kind modules do not: definitions and their validation, the key
 * table with its cap and SHA-256 replacement of long keys, the clock clamp, reservations, and
 * atomic chains. The per-kind arithmetic lives in gcra.c, window.c, lease.c and quota.c.
 *
 * Invariants:
 * - lim->last_now_ns never decreases; every entry point decides at max(now_ns, last_now_ns).
 * - An entry in the key table is either in use or indistinguishable from an absent key, so the
 *   sweep and the cap may drop idle entries at any time.
 * - A failed call (ENOMEM, EBUSY) charges nothing; it may leave fresh (idle) entries behind.
 */
#include "sluice/limit.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/attr.h"
#include "sluice/error.h"
#include "sluice/spec.h"
#include "base/alloc.h"
#include "base/quote.h"
#include "base/sat.h"
#include "gcra.h"
#include "keyhash.h"
#include "keytab.h"
#include "limit_impl.h"
#include "lease.h"
#include "quota.h"
#include "window.h"

__extension__ typedef __int128 i128;

/* Entries visited to reclaim idle keys before a full table applies its overflow policy. */
#define CAP_RECLAIM_BUDGET 256

/* ---- Definitions ---------------------------------------------------------------------------- */

void sluice_limit_def_init(sluice_limit_def *def, sluice_limit_kind kind)
{
    memset(def, 0, sizeof *def);
    def->kind = kind;
    def->ttl_ns = SLUICE_DEFAULT_TTL_NS;
    def->horizon_ns = SLUICE_DEFAULT_HORIZON_NS;
    def->max_keys = SLUICE_DEFAULT_MAX_KEYS;
    def->key_overflow = SLUICE_KEYS_REFUSE;
    def->max_key_len = SLUICE_DEFAULT_MAX_KEY_LEN;
    def->calendar = SLUICE_CAL_NONE;
}

const char *sluice_limit_kind_name(sluice_limit_kind kind)
{
    switch (kind) {
    case SLUICE_RATE:
        return "rate";
    case SLUICE_WINDOW:
        return "window";
    case SLUICE_SLIDING:
        return "sliding";
    case SLUICE_CONCURRENCY:
        return "concurrency";
    case SLUICE_QUOTA:
        return "quota";
    }
    return "?";
}

/* Writes the explanation of a failed validation and returns rc. */
PRINTF_ATTR(4, 5) static int invalid(char *msg, size_t msglen, int rc, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vmsgf(msg, msglen, fmt, ap);
    va_end(ap);
    return rc;
}

/* An adaptive rate's floor in permits per the limit's period (adapt_init rounds it up). */
static int64_t adapt_floor(const sluice_limit_def *def)
{
    adapt a;

    adapt_init(&a, def);
    return a.floor;
}

/* Largest decrease denominator: a decimal of up to 6 digits (0.000001). */
#define MAX_DECREASE_DEN 1000000

static int validate_adaptive(const sluice_limit_def *def, int64_t burst, char *msg, size_t msglen)
{
    gcra g;
    int64_t den = def->decrease_den;

    while (den > 1 && den % 10 == 0)
        den /= 10;
    /* A decimal (den a power of ten), so that the spec writes it back exactly. */
    if (def->decrease_den < 10 || def->decrease_den > MAX_DECREASE_DEN || den != 1 ||
        def->decrease_num < 1 || def->decrease_num >= def->decrease_den)
        return invalid(msg, msglen, SLUICE_EINVAL,
                       "adaptive decrease must be a fraction between 0 and 1 with up to 6 "
                       "decimals (such as 0.5: decrease_num 5, decrease_den 10)");
    if (def->recover_pct < 1 || def->recover_pct > 100)
        return invalid(msg, msglen, SLUICE_EINVAL,
                       "adaptive recover must be 1%% to 100%% of the rate per interval, got %lld%%",
                       (long long)def->recover_pct);
    if (def->recover_ns < SLUICE_NS_PER_MS || def->recover_ns > SLUICE_MAX_PERIOD_NS)
        return invalid(msg, msglen, SLUICE_EINVAL,
                       "adaptive recover interval must be 1 ms to 366 days");
    if (def->floor_permits < 1 || def->floor_period_ns < 1 ||
        def->floor_period_ns > SLUICE_MAX_PERIOD_NS)
        return invalid(
            msg, msglen, SLUICE_EINVAL,
            "adaptive floor must be a rate of at least 1 per period of 1 ns to 366 days");
    if (adapt_floor(def) > def->limit) {
        char fp[SLUICE_SPEC_DURATION_MAX_LEN], lp[SLUICE_SPEC_DURATION_MAX_LEN];

        sluice_spec_format_duration(def->floor_period_ns, fp, sizeof fp);
        sluice_spec_format_duration(def->period_ns, lp, sizeof lp);
        return invalid(msg, msglen, SLUICE_EINVAL,
                       "adaptive floor %lld/%s is above the limit's rate of %lld/%s",
                       (long long)def->floor_permits, fp, (long long)def->limit, lp);
    }
    if (gcra_init(&g, adapt_floor(def), def->period_ns, burst, def->start_empty) != SLUICE_OK)
        return invalid(msg, msglen, SLUICE_ERANGE,
                       "burst %lld times the emission interval at the adaptive floor exceeds 100 "
                       "years",
                       (long long)burst);
    return SLUICE_OK;
}

int sluice_limit_def_validate(const sluice_limit_def *def, char *msg, size_t msglen)
{
    if (msg && msglen > 0)
        msg[0] = '\0';
    if (def->kind < SLUICE_RATE || def->kind > SLUICE_QUOTA)
        return invalid(msg, msglen, SLUICE_EINVAL, "unknown limit kind %lld", (long long)def->kind);
    if (def->limit < 1)
        return invalid(msg, msglen, SLUICE_EINVAL, "limit must be at least 1, got %lld",
                       (long long)def->limit);
    if (def->limit > SLUICE_MAX_PERMITS)
        return invalid(msg, msglen, SLUICE_ERANGE, "limit must be at most 1000000000, got %lld",
                       (long long)def->limit);
    if (def->kind == SLUICE_RATE || def->kind == SLUICE_WINDOW || def->kind == SLUICE_SLIDING) {
        if (def->period_ns < 1)
            return invalid(msg, msglen, SLUICE_EINVAL, "period must be at least 1 ns, got %lld ns",
                           (long long)def->period_ns);
        if (def->period_ns > SLUICE_MAX_PERIOD_NS)
            return invalid(msg, msglen, SLUICE_ERANGE,
                           "period must be at most 366 days, got %lld ns",
                           (long long)def->period_ns);
    }
    if (def->kind == SLUICE_RATE) {
        gcra g;
        int64_t burst = def->burst ? def->burst : def->limit;

        if (def->burst < 0)
            return invalid(msg, msglen, SLUICE_EINVAL, "burst must be at least 1, got %lld",
                           (long long)def->burst);
        if (burst > SLUICE_MAX_PERMITS)
            return invalid(msg, msglen, SLUICE_ERANGE, "burst must be at most 1000000000, got %lld",
                           (long long)burst);
        if (gcra_init(&g, def->limit, def->period_ns, burst, def->start_empty) != SLUICE_OK)
            return invalid(msg, msglen, SLUICE_ERANGE,
                           "burst %lld times the emission interval exceeds 100 years",
                           (long long)burst);
        if (def->decrease_den != 0 || def->decrease_num != 0 || def->recover_pct != 0 ||
            def->recover_ns != 0 || def->floor_permits != 0 || def->floor_period_ns != 0) {
            int rc = validate_adaptive(def, burst, msg, msglen);

            if (rc != SLUICE_OK)
                return rc;
        }
    } else {
        if (def->burst != 0)
            return invalid(msg, msglen, SLUICE_EINVAL,
                           "burst applies to rate limits only (got %lld)", (long long)def->burst);
        if (def->start_empty)
            return invalid(msg, msglen, SLUICE_EINVAL, "start_empty applies to rate limits only");
        if (def->decrease_den != 0)
            return invalid(msg, msglen, SLUICE_EINVAL,
                           "adaptive applies to rate limits only (a %s limit has no rate to lower)",
                           sluice_limit_kind_name(def->kind));
    }
    if (def->kind == SLUICE_SLIDING && def->limit > SLUICE_MAX_SLIDING_LIMIT)
        return invalid(msg, msglen, SLUICE_ERANGE,
                       "a sliding window holds at most 100000 units, got %lld",
                       (long long)def->limit);
    if (def->kind == SLUICE_CONCURRENCY && def->ttl_ns < 1)
        return invalid(msg, msglen, SLUICE_EINVAL, "lease ttl must be at least 1 ns, got %lld",
                       (long long)def->ttl_ns);
    if (def->kind != SLUICE_QUOTA && def->calendar != SLUICE_CAL_NONE)
        return invalid(msg, msglen, SLUICE_EINVAL, "a calendar period applies to quotas only");
    if (def->calendar < SLUICE_CAL_NONE || def->calendar > SLUICE_CAL_MONTH)
        return invalid(msg, msglen, SLUICE_EINVAL, "unknown quota period %lld",
                       (long long)def->calendar);
    if (def->horizon_ns < 1)
        return invalid(msg, msglen, SLUICE_EINVAL, "horizon must be at least 1 ns, got %lld",
                       (long long)def->horizon_ns);
    if (def->max_keys < 1)
        return invalid(msg, msglen, SLUICE_EINVAL, "max_keys must be at least 1, got %lld",
                       (long long)def->max_keys);
    if (def->key_overflow != SLUICE_KEYS_REFUSE && def->key_overflow != SLUICE_KEYS_ALLOW)
        return invalid(msg, msglen, SLUICE_EINVAL, "unknown key overflow policy %lld",
                       (long long)def->key_overflow);
    if (def->max_key_len < 32)
        return invalid(msg, msglen, SLUICE_EINVAL,
                       "max_key_len must be at least 32 (a SHA-256 digest), got %lld",
                       (long long)def->max_key_len);
    return SLUICE_OK;
}

/* ---- Per-kind state ---------------------------------------------------------------------------
 */

static size_t state_size(const sluice_limit_def *def)
{
    switch (def->kind) {
    case SLUICE_RATE:
        return def->decrease_den > 0 ? sizeof(adapt_state) : sizeof(gcra_state);
    case SLUICE_WINDOW:
        return sizeof(fixed_state);
    case SLUICE_SLIDING:
        return sizeof(sliding_state);
    case SLUICE_CONCURRENCY:
        return sizeof(lease_key *);
    case SLUICE_QUOTA:
        return sizeof(quota_state);
    }
    return 0;
}

static void destroy_state(void *value, void *arg)
{
    sluice_limit *lim = arg;

    if (lim->adaptive && ((const adapt_state *)value)->eff != 0)
        lim->stats.slowed--; /* a lowered key leaves the table */
    if (lim->def.kind == SLUICE_SLIDING)
        sliding_clear(value);
    else if (lim->def.kind == SLUICE_CONCURRENCY)
        lease_key_free(lim->leases, *(lease_key **)value);
}

static int state_idle(void *value, void *arg)
{
    sluice_limit *lim = arg;
    int64_t now = lim->sweep_now_ns;

    switch (lim->def.kind) {
    case SLUICE_RATE:
        /* The sweep visits every key in turn: bringing an adaptive key to now here takes a key
         * that recovered while untouched off stats.slowed within one sweep cycle. */
        limit_refresh_key(lim, value, now);
        /* A key below its configured rate still carries information: its AIMD state. */
        return gcra_idle(value, now) &&
               (!lim->adaptive || adapt_rate_at(&lim->aimd, value, now) == lim->aimd.permits);
    case SLUICE_WINDOW:
        return fixed_idle(value, lim->def.period_ns, now);
    case SLUICE_SLIDING:
        return sliding_idle(value, lim->def.period_ns, now);
    case SLUICE_CONCURRENCY:
        return lease_key_idle(*(lease_key **)value, now);
    case SLUICE_QUOTA:
        return quota_idle(value, now);
    }
    return 0;
}

void limit_note_slowed(sluice_limit *lim, int was_slowed, const void *state)
{
    int slowed = ((const adapt_state *)state)->eff != 0;

    if (slowed && !was_slowed)
        lim->stats.slowed++;
    else if (!slowed && was_slowed)
        lim->stats.slowed--;
}

void limit_refresh_key(sluice_limit *lim, void *state, int64_t now)
{
    adapt_state *s = state;
    int was;

    if (!lim->adaptive)
        return;
    was = s->eff != 0;
    adapt_refresh(&lim->aimd, s, now);
    limit_note_slowed(lim, was, s);
}

const gcra *limit_key_rate(const sluice_limit *lim, void *state, int64_t now, gcra *tmp)
{
    int64_t eff;

    if (!lim->adaptive)
        return &lim->rate;
    adapt_refresh(&lim->aimd, state, now);
    eff = adapt_rate_at(&lim->aimd, state, now);
    if (eff == lim->aimd.permits)
        return &lim->rate;
    /* Within bounds: validation checked the floor's burst * T, the longest of any rate here. */
    (void)gcra_init(tmp, eff, lim->def.period_ns, lim->def.burst, lim->def.start_empty);
    return tmp;
}

/* Decides on one key's state. `fresh` marks a key seen for the first time. */
int limit_state_decide(sluice_limit *lim, void *state, int fresh, int64_t units, int64_t ttl_ns,
                       int64_t now, int peek, sluice_decision *d)
{
    const sluice_limit_def *def = &lim->def;

    switch (def->kind) {
    case SLUICE_RATE:
        if (lim->adaptive) {
            adapt_state copy = *(adapt_state *)state;
            gcra g;

            if (peek) /* a read: the key's state is brought to now in a copy */
                state = &copy;
            else
                limit_refresh_key(lim, state, now);
            gcra_decide(limit_key_rate(lim, state, now, &g), state, fresh, units, now, peek, d);
            return SLUICE_OK;
        }
        gcra_decide(&lim->rate, state, fresh, units, now, peek, d);
        return SLUICE_OK;
    case SLUICE_WINDOW:
        fixed_decide(def->limit, def->period_ns, state, units, now, peek, d);
        return SLUICE_OK;
    case SLUICE_SLIDING:
        return sliding_decide(def->limit, def->period_ns, state, units, now, peek, d);
    case SLUICE_CONCURRENCY:
        return lease_acquire(lim->leases, state, def->limit, units, ttl_ns, now, peek, d);
    case SLUICE_QUOTA:
        quota_decide(def->limit, def->calendar, state, units, now, peek, d);
        return SLUICE_OK;
    }
    return SLUICE_EINVAL;
}

/* ---- Life cycle -------------------------------------------------------------------------------
 */

int sluice_limit_new(const sluice_limit_def *def, sluice_limit **out, char *msg, size_t msglen)
{
    sluice_limit *lim;
    int rc;

    *out = NULL;
    rc = sluice_limit_def_validate(def, msg, msglen);
    if (rc != SLUICE_OK)
        return rc;
    lim = alloc_calloc(1, sizeof *lim);
    if (!lim)
        goto fail_alloc;
    lim->def = *def;
    if (def->kind == SLUICE_RATE) {
        lim->def.burst = def->burst ? def->burst : def->limit;
        gcra_init(&lim->rate, def->limit, def->period_ns, lim->def.burst, def->start_empty);
        if (def->decrease_den > 0) {
            lim->adaptive = 1;
            adapt_init(&lim->aimd, def);
        }
        lim->whole_rate = !lim->adaptive && lim->rate.t_r == 0;
        if (keytab_new(sizeof(reservation), &lim->reservations) != SLUICE_OK)
            goto fail_reservations;
    }
    if (def->kind == SLUICE_CONCURRENCY && lease_reg_new(&lim->leases) != SLUICE_OK)
        goto fail_leases;
    if (keytab_new(state_size(def), &lim->keys) != SLUICE_OK)
        goto fail_keys;
    *out = lim;
    return SLUICE_OK;

fail_keys:
    lease_reg_free(lim->leases);
fail_leases:
    keytab_free(lim->reservations, NULL, NULL);
fail_reservations:
    alloc_free(lim);
fail_alloc:
    if (msg && msglen > 0)
        snprintf(msg, msglen, "out of memory");
    return SLUICE_ENOMEM;
}

void sluice_limit_free(sluice_limit *lim)
{
    if (!lim)
        return;
    keytab_free(lim->keys, destroy_state, lim);
    keytab_free(lim->reservations, NULL, NULL);
    keytab_free(lim->changed, NULL, NULL);
    lease_reg_free(lim->leases);
    alloc_free(lim);
}

const sluice_limit_def *sluice_limit_get_def(const sluice_limit *lim)
{
    return &lim->def;
}

void sluice_limit_set_shadow(sluice_limit *lim, int on)
{
    lim->shadow = on != 0;
}

int sluice_limit_shadow(const sluice_limit *lim)
{
    return lim->shadow;
}

/* ---- Shared steps -----------------------------------------------------------------------------
 */

/* limit_normalize_key without counting the request: for reads, which change nothing. Sets
 * *hashed when the key was replaced by its digest. */
static int normalize_key(const sluice_limit *lim, const char *key, size_t keylen, norm_key *nk,
                         int *hashed)
{
    *hashed = 0;
    if (!key && keylen > 0)
        return SLUICE_EINVAL;
    nk->key = key ? key : "";
    nk->len = keylen;
    if (keylen > lim->def.max_key_len) {
        int rc = keyhash_digest(key, keylen, nk->digest);

        if (rc != SLUICE_OK)
            return rc;
        nk->key = (const char *)nk->digest;
        nk->len = sizeof nk->digest;
        *hashed = 1;
    }
    return SLUICE_OK;
}

int limit_read_key(const sluice_limit *lim, const char *key, size_t keylen, norm_key *nk)
{
    int hashed;

    return normalize_key(lim, key, keylen, nk, &hashed);
}

int limit_normalize_key(sluice_limit *lim, const char *key, size_t keylen, norm_key *nk)
{
    int hashed, rc = normalize_key(lim, key, keylen, nk, &hashed);

    if (hashed)
        lim->stats.hashed++;
    return rc;
}

int limit_note_changed(sluice_limit *lim, const char *key, size_t keylen)
{
    size_t before = keytab_count(lim->changed);
    void *mark;
    int rc = keytab_upsert(lim->changed, key, keylen, &mark, NULL);

    /* The first change since the last drain tells the owner, which then drains only the limits
     * that told it instead of testing every one. */
    if (rc == SLUICE_OK && before == 0 && lim->on_changes)
        lim->on_changes(lim->on_changes_arg);
    return rc;
}

/* Records that a key is about to change, for sluice_limit_drain. Done before the change, so that
 * running out of memory here leaves nothing charged and nothing unrecorded. */
int limit_mark_changed(sluice_limit *lim, const norm_key *nk)
{
    if (!lim->changed || lim->def.kind == SLUICE_CONCURRENCY)
        return SLUICE_OK;
    return limit_note_changed(lim, nk->key, nk->len);
}

void limit_reclaim_keys(sluice_limit *lim, int64_t now)
{
    lim->sweep_now_ns = now;
    lim->stats.forgotten +=
        keytab_sweep(lim->keys, CAP_RECLAIM_BUDGET, state_idle, destroy_state, lim);
}

/* Finds or creates the state of a key for a charging call, applying the key cap. Sets *state
 * (NULL when the key must go untracked) and *fresh. */
int limit_prepare_key(sluice_limit *lim, const norm_key *nk, int64_t now, void **state, int *fresh)
{
    void *v = keytab_find(lim->keys, nk->key, nk->len);
    int rc = limit_mark_changed(lim, nk);

    *state = NULL;
    *fresh = 0;
    if (rc != SLUICE_OK)
        return rc;
    if (v) {
        *state = v;
        return SLUICE_OK;
    }
    if (keytab_count(lim->keys) >= lim->def.max_keys) {
        limit_reclaim_keys(lim, now);
        if (keytab_count(lim->keys) >= lim->def.max_keys) {
            if (lim->def.key_overflow == SLUICE_KEYS_REFUSE && !lim->shadow) {
                lim->stats.refused++;
                return SLUICE_EBUSY;
            }
            /* A shadow limit refuses nothing: its refusal is a would-be denial, counted as one
             * with the decision (limit_untracked_decision). */
            if (lim->def.key_overflow != SLUICE_KEYS_REFUSE)
                lim->stats.untracked++;
            return SLUICE_OK;
        }
    }
    return keytab_upsert(lim->keys, nk->key, nk->len, state, fresh);
}

void limit_untracked_decision(const sluice_limit *lim, sluice_decision *d)
{
    memset(d, 0, sizeof *d);
    d->allowed = 1;
    d->untracked = 1;
    d->limit = lim->def.kind == SLUICE_RATE ? lim->def.burst : lim->def.limit;
    d->remaining = d->limit;
    /* Past a refusing cap only a shadow limit lets a key through: what it would have refused. */
    d->shadow_denied = lim->def.key_overflow == SLUICE_KEYS_REFUSE;
}

/* The memory budget (--maxmemory; base/alloc.h) for a request about a key the limit does not
 * track: past the budget (counting the slot array the key table would grow to for it, so that a
 * large table's growth cannot overshoot the budget by a fifth of the table) the limit first forgets
 * keys that carry no information, then treats the new key as it treats one past max_keys, except
 * that a refusing limit answers SLUICE_ENOMEM (nothing charged, nothing created) rather than
 * SLUICE_EBUSY. Returns 0 to go on, 1 when the request goes untracked (key_overflow ALLOW, or a
 * shadow limit), or SLUICE_ENOMEM. Keys the limit tracks are never affected, and without a budget
 * this is one atomic load. */
static int budget_check(sluice_limit *lim, const norm_key *nk, int64_t now)
{
    if (!alloc_over_budget_by(keytab_growth_bytes(lim->keys)) ||
        keytab_find(lim->keys, nk->key, nk->len))
        return 0;
    limit_reclaim_keys(lim, now);
    if (!alloc_over_budget_by(keytab_growth_bytes(lim->keys)))
        return 0;
    if (lim->def.key_overflow == SLUICE_KEYS_REFUSE && !lim->shadow) {
        lim->stats.refused++;
        return SLUICE_ENOMEM;
    }
    if (lim->def.key_overflow != SLUICE_KEYS_REFUSE)
        lim->stats.untracked++;
    return 1;
}

/* Decides on one key; tag != 0 takes a kept lease (sluice_lease_acquire_kept) on a concurrency
 * limit. */
static int decide_one(sluice_limit *lim, const norm_key *nk, int64_t units, int64_t ttl_ns,
                      int64_t now, unsigned flags, uint64_t tag, sluice_decision *out)
{
    int peek = (flags & SLUICE_PEEK) != 0;
    void *state;
    int fresh = 0, rc;

    if (peek) {
        any_state blank;

        state = keytab_find(lim->keys, nk->key, nk->len);
        fresh = state == NULL;
        if (!state) {
            memset(&blank, 0, sizeof blank);
            state = &blank;
        }
        return limit_state_decide(lim, state, fresh, units, ttl_ns, now, 1, out);
    }
    rc = budget_check(lim, nk, now);
    if (rc == 0)
        rc = limit_prepare_key(lim, nk, now, &state, &fresh);
    else
        state = NULL;
    if (rc < 0)
        return rc;
    if (!state) {
        limit_untracked_decision(lim, out);
        return SLUICE_OK;
    }
    if (lim->def.kind == SLUICE_SLIDING) {
        rc = sliding_prepare(state, lim->def.limit);
        if (rc != SLUICE_OK)
            return rc;
    }
    if (tag) {
        lease_tagging kept = {.tag = tag, .key = nk->key, .keylen = nk->len};

        rc = limit_mark_lease_key(lim, nk->key, nk->len);
        if (rc != SLUICE_OK)
            return rc;
        return lease_acquire_kept(lim->leases, state, lim->def.limit, units, ttl_ns, now, &kept,
                                  out);
    }
    return limit_state_decide(lim, state, fresh, units, ttl_ns, now, 0, out);
}

/* ---- Public decisions -------------------------------------------------------------------------
 */

/* sluice_limit_decide for everything but its hot path: out of line, so that the hot path
 * needs no stack frame for the normalised key. */
static __attribute__((noinline)) int decide_slow(sluice_limit *lim, const char *key, size_t keylen,
                                                 int64_t units, int64_t now_ns, unsigned flags,
                                                 sluice_decision *out)
{
    norm_key nk;
    int rc;

    if (units < 1) {
        memset(out, 0, sizeof *out);
        return SLUICE_EINVAL;
    }
    rc = limit_normalize_key(lim, key, keylen, &nk);
    if (rc == SLUICE_OK) /* every kind fills every field of *out; a peek leaves the clock */
        rc = decide_one(lim, &nk, units, lim->def.ttl_ns,
                        flags & SLUICE_PEEK ? limit_view_now(lim, now_ns)
                                            : limit_clamp_now(lim, now_ns),
                        flags, 0, out);
    if (rc == SLUICE_OK && !(flags & SLUICE_PEEK) && out->shadow_denied)
        lim->stats.shadow_denied++; /* a shadow limit past its refusing key cap */
    else if (rc == SLUICE_OK && !(flags & SLUICE_PEEK))
        limit_count_decision(lim, out, units);
    else if (rc == SLUICE_OK && !out->allowed && lim->shadow)
        limit_shadow_pass(out); /* a peek answers as the decision would, counting nothing */
    if (rc != SLUICE_OK)
        memset(out, 0, sizeof *out);
    return rc;
}

int sluice_limit_decide(sluice_limit *lim, const char *key, size_t keylen, int64_t units,
                        int64_t now_ns, unsigned flags, sluice_decision *out)
{
    if (lim->whole_rate && !(flags & SLUICE_PEEK) && units >= 1 && keylen <= lim->def.max_key_len &&
        (key || keylen == 0)) {
        /* The hot path: a rate limit asked about a key it tracks, decided with no call but the
         * lookup (and the change record, when changes are tracked), so that the CPU runs ahead
         * into the next decisions and their cache misses overlap this one's. It does what
         * decide_one does for a tracked key, in the same order. */
        const char *k = key ? key : "";
        void *state = keytab_find(lim->keys, k, keylen);

        if (state) {
            int64_t now = limit_clamp_now(lim, now_ns);

            if (lim->changed) {
                int rc = limit_note_changed(lim, k, keylen);

                if (rc != SLUICE_OK) {
                    memset(out, 0, sizeof *out);
                    return rc;
                }
            }
            gcra_decide_whole(&lim->rate, state, 0, units, now, 0, out);
            limit_count_decision(lim, out, units);
            return SLUICE_OK;
        }
    }
    return decide_slow(lim, key, keylen, units, now_ns, flags, out);
}

void sluice_limit_prefetch(const sluice_limit *lim, const char *key, size_t keylen)
{
    if (keylen <= lim->def.max_key_len && (key || keylen == 0))
        keytab_prefetch(lim->keys, key ? key : "", keylen);
}

/* sluice_lease_acquire and sluice_lease_acquire_kept (tag != 0). */
static int lease_take(sluice_limit *lim, const char *key, size_t keylen, int64_t units,
                      int64_t ttl_ns, uint64_t tag, int64_t now_ns, sluice_decision *out)
{
    norm_key nk;
    int rc;

    memset(out, 0, sizeof *out);
    if (lim->def.kind != SLUICE_CONCURRENCY || units < 1 || ttl_ns < 1)
        return SLUICE_EINVAL;
    rc = limit_normalize_key(lim, key, keylen, &nk);
    if (rc != SLUICE_OK)
        return rc;
    rc = decide_one(lim, &nk, units, ttl_ns, limit_clamp_now(lim, now_ns), 0, tag, out);
    if (rc == SLUICE_OK && out->shadow_denied)
        lim->stats.shadow_denied++; /* a shadow limit past its refusing key cap */
    else if (rc == SLUICE_OK)
        limit_count_decision(lim, out, units);
    else
        memset(out, 0, sizeof *out);
    return rc;
}

int sluice_lease_acquire(sluice_limit *lim, const char *key, size_t keylen, int64_t units,
                         int64_t ttl_ns, int64_t now_ns, sluice_decision *out)
{
    return lease_take(lim, key, keylen, units, ttl_ns, 0, now_ns, out);
}

int sluice_lease_acquire_kept(sluice_limit *lim, const char *key, size_t keylen, int64_t units,
                              int64_t ttl_ns, uint64_t tag, int64_t now_ns, sluice_decision *out)
{
    if (tag == 0) {
        memset(out, 0, sizeof *out);
        return SLUICE_EINVAL;
    }
    return lease_take(lim, key, keylen, units, ttl_ns, tag, now_ns, out);
}

int limit_mark_lease_key(sluice_limit *lim, const char *key, size_t keylen)
{
    if (!lim->changed)
        return SLUICE_OK;
    return limit_note_changed(lim, key, keylen);
}

/* Records the key of a live kept lease as changed before a renew or a release changes it. */
static int mark_kept(sluice_limit *lim, uint64_t lease_id, int64_t now)
{
    const char *key;
    size_t keylen;

    if (!lim->changed || !lease_kept_name(lim->leases, lease_id, now, &key, &keylen))
        return SLUICE_OK;
    return limit_mark_lease_key(lim, key, keylen);
}

int sluice_lease_renew(sluice_limit *lim, uint64_t lease_id, int64_t ttl_ns, int64_t now_ns,
                       int64_t *expires_ns)
{
    int64_t now;
    int rc;

    if (expires_ns)
        *expires_ns = 0;
    if (lim->def.kind != SLUICE_CONCURRENCY || ttl_ns < 1)
        return SLUICE_EINVAL;
    now = limit_clamp_now(lim, now_ns);
    rc = mark_kept(lim, lease_id, now);
    if (rc != SLUICE_OK)
        return rc;
    return lease_renew(lim->leases, lease_id, ttl_ns, now, expires_ns);
}

int sluice_lease_release(sluice_limit *lim, uint64_t lease_id, int64_t now_ns)
{
    int64_t now;
    int rc;

    if (lim->def.kind != SLUICE_CONCURRENCY)
        return SLUICE_EINVAL;
    now = limit_clamp_now(lim, now_ns);
    rc = mark_kept(lim, lease_id, now);
    if (rc != SLUICE_OK)
        return rc;
    return lease_release(lim->leases, lease_id, now);
}

int sluice_lease_tag(const sluice_limit *lim, uint64_t lease_id, int64_t now_ns, uint64_t *tag)
{
    *tag = 0;
    if (lim->def.kind != SLUICE_CONCURRENCY)
        return SLUICE_EINVAL;
    return lease_tag(lim->leases, lease_id, limit_view_now(lim, now_ns), tag);
}

int sluice_lease_check(const sluice_limit *lim, uint64_t lease_id, const char *key, size_t keylen,
                       int64_t now_ns, int64_t *expires_ns)
{
    int64_t now = limit_view_now(lim, now_ns);
    const lease_key *k = NULL;
    norm_key nk;
    int rc;

    if (expires_ns)
        *expires_ns = 0;
    if (lim->def.kind != SLUICE_CONCURRENCY)
        return SLUICE_EINVAL;
    if (key) {
        lease_key *const *state;
        int hashed;

        /* Not limit_normalize_key: a read counts nothing, not even a hashed key. */
        rc = normalize_key(lim, key, keylen, &nk, &hashed);
        if (rc != SLUICE_OK)
            return rc;
        state = keytab_find(lim->keys, nk.key, nk.len);
        if (!state || !*state) /* the key holds no lease: the lease is gone or on another key */
            return lease_check(lim->leases, lease_id, NULL, now, NULL) == SLUICE_OK
                       ? SLUICE_ENOTFOUND
                       : SLUICE_ESTALE;
        k = *state;
    }
    return lease_check(lim->leases, lease_id, k, now, expires_ns);
}

size_t sluice_lease_expire(sluice_limit *lim, int64_t now_ns,
                           void (*fn)(uint64_t lease_id, void *arg), void *arg)
{
    if (lim->def.kind != SLUICE_CONCURRENCY)
        return 0;
    return lease_expire(lim->leases, limit_clamp_now(lim, now_ns), fn, arg);
}

int sluice_quota_settle(sluice_limit *lim, const char *key, size_t keylen, int64_t charged_ns,
                        int64_t estimate, int64_t actual, int64_t now_ns)
{
    norm_key nk;
    void *state;
    int rc;

    if (lim->def.kind != SLUICE_QUOTA || estimate < 0 || actual < 0)
        return SLUICE_EINVAL;
    rc = limit_normalize_key(lim, key, keylen, &nk);
    if (rc != SLUICE_OK)
        return rc;
    state = keytab_find(lim->keys, nk.key, nk.len);
    if (!state) /* forgotten: its period ended (a live charge keeps the key) */
        return SLUICE_ESTATE;
    return quota_settle(lim->def.calendar, state, charged_ns, estimate, actual,
                        limit_clamp_now(lim, now_ns));
}

/* Largest correction or estimate in units: keeps units * T inside int64 for any valid limit. */
#define MAX_ADJUST_UNITS (INT64_C(8) * SLUICE_MAX_PERMITS)

int sluice_limit_settle(sluice_limit *lim, const char *key, size_t keylen, int64_t charged_ns,
                        int64_t estimate, int64_t actual, int64_t now_ns)
{
    const sluice_limit_def *def = &lim->def;
    int64_t diff = actual - estimate, now;
    norm_key nk;
    void *state;
    int fresh, rc;

    if (def->kind == SLUICE_CONCURRENCY || estimate < 0 || actual < 0 ||
        estimate > MAX_ADJUST_UNITS || actual > MAX_ADJUST_UNITS)
        return SLUICE_EINVAL;
    if (def->kind == SLUICE_QUOTA)
        return sluice_quota_settle(lim, key, keylen, charged_ns, estimate, actual, now_ns);
    now = limit_clamp_now(lim, now_ns);
    if (def->kind == SLUICE_WINDOW && charged_ns < now - now % def->period_ns)
        return SLUICE_ESTATE;
    if (def->kind == SLUICE_SLIDING && now - charged_ns >= def->period_ns)
        return SLUICE_ESTATE;
    if (diff == 0)
        return SLUICE_OK;
    rc = limit_normalize_key(lim, key, keylen, &nk);
    if (rc != SLUICE_OK)
        return rc;
    if (diff < 0) {
        /* A forgotten key has nothing left to refund. */
        state = keytab_find(lim->keys, nk.key, nk.len);
        if (!state)
            return SLUICE_OK;
        rc = limit_mark_changed(lim, &nk);
        if (rc != SLUICE_OK)
            return rc;
    } else {
        rc = limit_prepare_key(lim, &nk, now, &state, &fresh);
        if (rc != SLUICE_OK || !state)
            return rc;
    }
    switch (def->kind) {
    case SLUICE_RATE: {
        gcra g;

        limit_refresh_key(lim, state, now);
        gcra_adjust(limit_key_rate(lim, state, now, &g), state, diff, now);
        return SLUICE_OK;
    }
    case SLUICE_WINDOW: {
        fixed_state *f = state;
        int64_t start = now - now % def->period_ns;

        if (f->start_ns != start) { /* the key's window is over, or it was just created */
            f->start_ns = start;
            f->count = 0;
        }
        f->count = sat_add_i64(f->count, diff) > 0 ? sat_add_i64(f->count, diff) : 0;
        return SLUICE_OK;
    }
    case SLUICE_SLIDING:
        return sliding_adjust(def->limit, state, diff, now);
    default:
        return SLUICE_EINVAL;
    }
}

int sluice_limit_estimate(sluice_limit *lim, const char *key, size_t keylen, int64_t units,
                          int64_t now_ns, int64_t *start_ns)
{
    const sluice_limit_def *def = &lim->def;
    sluice_decision d;
    any_state blank;
    norm_key nk;
    void *state;
    int64_t now;
    int hashed, rc;

    *start_ns = 0;
    if (units < 1)
        return SLUICE_EINVAL;
    if (units > MAX_ADJUST_UNITS)
        return SLUICE_ERANGE;
    /* A read: it neither counts the key nor moves the limit's clock (limit.h, "Time"). */
    rc = normalize_key(lim, key, keylen, &nk, &hashed);
    if (rc != SLUICE_OK)
        return rc;
    now = limit_view_now(lim, now_ns);
    if (lim->shadow) { /* it never holds anything back */
        *start_ns = now;
        return SLUICE_OK;
    }
    state = keytab_find(lim->keys, nk.key, nk.len);
    if (!state) {
        memset(&blank, 0, sizeof blank);
    }
    switch (def->kind) {
    case SLUICE_RATE: {
        gcra g;

        if (state) /* a read: the key's state is brought to now in a copy */
            memcpy(&blank, state, lim->adaptive ? sizeof(adapt_state) : sizeof(gcra_state));
        *start_ns =
            gcra_slot(limit_key_rate(lim, &blank, now, &g), &blank.rate, state == NULL, units, now);
        return SLUICE_OK;
    }
    case SLUICE_WINDOW: {
        /* Units beyond the current window's room fill the following windows in turn. */
        const fixed_state *f = state ? state : &blank.window;
        int64_t start = now - now % def->period_ns;
        int64_t count = f->start_ns == start ? f->count : 0;
        int64_t k = sat_add_i64(count, units - 1) / def->limit; /* count may be saturated */

        /* k * period passes int64 for 8 * 10^9 units of a long window: "never", not the past */
        *start_ns = k == 0 ? now : sat_add_i64(start, sat_mul_i64(k, def->period_ns));
        return SLUICE_OK;
    }
    default:
        break;
    }
    rc = limit_state_decide(lim, state ? state : &blank, state == NULL, units, def->ttl_ns, now, 1,
                            &d);
    if (rc != SLUICE_OK)
        return rc;
    if (d.allowed)
        *start_ns = now;
    else if (d.retry_after_ns != SLUICE_NEVER)
        *start_ns = sat_add_i64(now, d.retry_after_ns);
    else if (def->kind == SLUICE_SLIDING) /* more than one window's worth: whole windows */
        *start_ns = sat_add_i64(now + d.reset_after_ns,
                                sat_mul_i64((units - 1) / def->limit, def->period_ns));
    else
        *start_ns = SLUICE_NEVER;
    return SLUICE_OK;
}

/* Longest backoff: 30 days, as TASK.FAIL's RETRY_AFTER (an upstream asking for more is broken). */
#define MAX_BACKOFF_NS (INT64_C(30) * 86400 * SLUICE_NS_PER_SEC)

int sluice_limit_backoff(sluice_limit *lim, const char *key, size_t keylen, int64_t wait_ns,
                         int64_t now_ns, int64_t *slot_ns)
{
    const gcra *rate;
    gcra g;
    norm_key nk;
    void *state;
    int64_t now;
    int fresh, rc;

    if (slot_ns)
        *slot_ns = 0;
    if (lim->def.kind != SLUICE_RATE || wait_ns < 0)
        return SLUICE_EINVAL;
    if (wait_ns > MAX_BACKOFF_NS)
        return SLUICE_ERANGE;
    now = limit_clamp_now(lim, now_ns);
    rc = limit_normalize_key(lim, key, keylen, &nk);
    if (rc == SLUICE_OK)
        rc = limit_prepare_key(lim, &nk, now, &state, &fresh);
    if (rc != SLUICE_OK)
        return rc;
    if (!state) { /* untracked past the cap (overflow ALLOW): nothing can hold it back */
        if (slot_ns)
            *slot_ns = now;
        return SLUICE_OK;
    }
    /* A fresh start_empty key needs nothing more: once held, it is no longer new. */
    if (lim->adaptive) {
        int was = ((const adapt_state *)state)->eff != 0;

        adapt_decrease(&lim->aimd, state, now);
        limit_note_slowed(lim, was, state);
    }
    rate = limit_key_rate(lim, state, now, &g);
    gcra_backoff(rate, state, sat_add_i64(now, wait_ns));
    lim->stats.backoffs++;
    if (slot_ns)
        *slot_ns = gcra_slot(rate, state, 0, 1, now);
    return SLUICE_OK;
}

int sluice_limit_key_rate(const sluice_limit *lim, const char *key, size_t keylen, int64_t now_ns,
                          int64_t *permits, int64_t *since_ns)
{
    const adapt_state *state;
    adapt_state copy;
    norm_key nk;
    int hashed, rc;

    *permits = lim->def.limit;
    *since_ns = 0;
    if (lim->def.kind != SLUICE_RATE)
        return SLUICE_EINVAL;
    if (!lim->adaptive)
        return SLUICE_OK;
    rc = normalize_key(lim, key, keylen, &nk, &hashed);
    if (rc != SLUICE_OK)
        return rc;
    state = keytab_find(lim->keys, nk.key, nk.len);
    if (!state)
        return SLUICE_OK;
    copy = *state;
    adapt_refresh(&lim->aimd, &copy, limit_view_now(lim, now_ns));
    *permits = adapt_rate_at(&lim->aimd, &copy, limit_view_now(lim, now_ns));
    *since_ns = *permits < lim->def.limit ? copy.since_ns : 0;
    return SLUICE_OK;
}

/* ---- Reservations -----------------------------------------------------------------------------
 */

int sluice_limit_reserve(sluice_limit *lim, const char *key, size_t keylen, uint64_t id,
                         int64_t units, int64_t now_ns, int64_t *slot_ns)
{
    const gcra *rate;
    gcra g;
    reservation *r;
    norm_key nk;
    void *state, *slot_value;
    int64_t now, slot;
    int fresh, created, rc;

    *slot_ns = 0;
    if (lim->def.kind != SLUICE_RATE || units < 1 || units > lim->def.burst)
        return SLUICE_EINVAL;
    now = limit_clamp_now(lim, now_ns);
    r = keytab_find(lim->reservations, (const char *)&id, sizeof id);
    if (r) {
        *slot_ns = r->slot_ns;
        return SLUICE_OK;
    }
    rc = limit_normalize_key(lim, key, keylen, &nk);
    if (rc != SLUICE_OK)
        return rc;
    rc = limit_prepare_key(lim, &nk, now, &state, &fresh);
    if (rc != SLUICE_OK)
        return rc;
    if (!state) { /* untracked past the cap: it may run now */
        *slot_ns = now;
        return SLUICE_OK;
    }
    limit_refresh_key(lim, state, now);
    rate = limit_key_rate(lim, state, now, &g);
    slot = gcra_slot(rate, state, fresh, units, now);
    if (lim->shadow && slot > now) {
        /* The enforced limit would hold it back: it runs now, uncharged, and is counted. */
        lim->stats.shadow_denied++;
        *slot_ns = now;
        return SLUICE_OK;
    }
    *slot_ns = slot;
    if (slot - now > lim->def.horizon_ns)
        return SLUICE_EHORIZON;
    /* Record the reservation before charging, so that running out of memory charges nothing.
     * The key table is not touched in between, so `state` stays valid. */
    rc = keytab_upsert(lim->reservations, (const char *)&id, sizeof id, &slot_value, &created);
    if (rc != SLUICE_OK)
        return rc;
    ((reservation *)slot_value)->slot_ns = slot;
    gcra_charge(rate, state, fresh, units, now);
    lim->stats.allowed++;
    lim->stats.units += (uint64_t)units;
    return SLUICE_OK;
}

int sluice_limit_redeem(sluice_limit *lim, uint64_t id)
{
    if (!lim->reservations)
        return SLUICE_ENOTFOUND;
    return keytab_delete(lim->reservations, (const char *)&id, sizeof id, NULL, NULL);
}

static int reservation_stale(void *value, void *arg)
{
    const sluice_limit *lim = arg;
    const reservation *r = value;

    return r->slot_ns < lim->sweep_now_ns - lim->def.horizon_ns;
}

/* ---- Maintenance ------------------------------------------------------------------------------
 */

int sluice_limit_reset(sluice_limit *lim, const char *key, size_t keylen)
{
    norm_key nk;
    int rc;

    if (!key) {
        if (lim->changed) { /* every key it held must be deleted from a store */
            size_t pos = 0, len;
            const char *k;
            void *v;

            while (keytab_next(lim->keys, &pos, &k, &len, &v))
                if (limit_note_changed(lim, k, len) != SLUICE_OK)
                    return SLUICE_ENOMEM;
        }
        keytab_clear(lim->keys, destroy_state, lim);
        if (lim->reservations)
            keytab_clear(lim->reservations, NULL, NULL);
        return SLUICE_OK;
    }
    rc = limit_normalize_key(lim, key, keylen, &nk);
    if (rc == SLUICE_OK && keytab_find(lim->keys, nk.key, nk.len))
        rc = lim->def.kind == SLUICE_CONCURRENCY ? limit_mark_lease_key(lim, nk.key, nk.len)
                                                 : limit_mark_changed(lim, &nk);
    if (rc != SLUICE_OK)
        return rc;
    return keytab_delete(lim->keys, nk.key, nk.len, destroy_state, lim);
}

/* Keys forgotten per round of a tracked sweep (their copies live on the stack). */
#define SWEEP_CHUNK 64

/* The sweep while changes are tracked: every key it forgets must be recorded as changed (a store
 * then deletes it), and keytab_sweep's callbacks are not told keys. So visit up to `budget`
 * entries from where the last tracked sweep stopped (at most one pass), record the idle ones,
 * then delete them. Out of memory keeps the key it was recording (forgotten by a later sweep):
 * no key leaves the table unrecorded. Returns how many keys were forgotten. */
static size_t sweep_tracked(sluice_limit *lim, size_t budget)
{
    size_t removed = 0, count = keytab_count(lim->keys);
    int stop = 0;

    if (budget > count)
        budget = count;
    while (budget > 0 && !stop) {
        char *keys[SWEEP_CHUNK];
        size_t lens[SWEEP_CHUNK], n = 0;
        int wrapped = 0;

        while (budget > 0 && n < SWEEP_CHUNK) {
            const char *key;
            size_t keylen;
            void *value;

            if (!keytab_next(lim->keys, &lim->sweep_pos, &key, &keylen, &value)) {
                lim->sweep_pos = 0;
                if (wrapped) {
                    stop = 1; /* the table is empty */
                    break;
                }
                wrapped = 1;
                continue;
            }
            budget--;
            if (!state_idle(value, lim))
                continue;
            keys[n] = alloc_memdup0(key, keylen);
            /* A concurrency key a store never held (only tasks' leases, which are not saved)
             * leaves no row to delete. */
            if (!keys[n] ||
                ((lim->def.kind != SLUICE_CONCURRENCY || lease_key_stored(*(lease_key **)value)) &&
                 limit_note_changed(lim, key, keylen) != SLUICE_OK)) {
                alloc_free(keys[n]);
                stop = 1;
                break;
            }
            lens[n++] = keylen;
        }
        for (size_t i = 0; i < n; i++) {
            if (keytab_delete(lim->keys, keys[i], lens[i], destroy_state, lim) == SLUICE_OK)
                removed++;
            alloc_free(keys[i]);
        }
    }
    return removed;
}

size_t sluice_limit_sweep(sluice_limit *lim, int64_t now_ns, size_t budget)
{
    size_t n;

    lim->sweep_now_ns = limit_clamp_now(lim, now_ns);
    n = lim->changed ? sweep_tracked(lim, budget)
                     : keytab_sweep(lim->keys, budget, state_idle, destroy_state, lim);
    lim->stats.forgotten += n;
    if (lim->reservations)
        keytab_sweep(lim->reservations, budget, reservation_stale, NULL, lim);
    if (lim->leases)
        lease_expire(lim->leases, lim->sweep_now_ns, NULL, NULL);
    return n;
}

void sluice_limit_get_stats(const sluice_limit *lim, sluice_limit_stats *out)
{
    *out = lim->stats;
    out->keys = keytab_count(lim->keys);
    out->bytes = sizeof *lim + keytab_bytes(lim->keys);
    if (lim->reservations)
        out->bytes += keytab_bytes(lim->reservations);
    if (lim->leases)
        out->bytes += lease_bytes(lim->leases);
    if (lim->def.kind == SLUICE_SLIDING) {
        size_t pos = 0, keylen;
        const char *key;
        void *value;

        while (keytab_next(lim->keys, &pos, &key, &keylen, &value))
            out->bytes += sliding_bytes(value);
    }
}
