/* SPDX-License-Identifier: MIT */
/*
 * Saving and restoring a limit's key state, so that a restart does not hand every key a fresh
 * burst (see sluice_limit_track_changes, sluice_limit_drain and sluice_limit_import).
 *
 * A key's state travels as a blob: one byte naming the kind, then little-endian 64-bit integers.
 * The blob also carries the parameters its numbers depend on (permits for a rate's fractional
 * TAT, the window length, the calendar), so that a blob written under one definition and read
 * under another is converted or dropped rather than misread.
 *
 *   rate     'R' tat_ns tat_rem permits [saved_ns [eff since_ns]]
 *   window   'W' start_ns count window_ns
 *   quota    'Q' period_start_ns period_end_ns spent calendar
 *   sliding  'S' window_ns n, then n times (at_ns units)
 *   leases   'C' n, then n times (lease_id tag units expires_ns)
 *
 * A concurrency key saves its kept leases only (sluice_lease_acquire_kept: a direct holder's,
 * LEASE.ACQUIRE), each with its id and tag so that its holder's handle still names it after a
 * restart. The leases tasks hold are not saved: a task restored running takes its leases again.
 * Expiry times are absolute, so a lease that expired while the process was down is not restored.
 *
 * Restoring never makes a key richer than the blob said, and never poorer than a full wait:
 * states that carry no information any more are dropped, and a rate key is brought back no
 * further ahead than burst * T, so a clock that went back while the process was down cannot
 * lock a key out. A rate key held further ahead than that when it was saved (a backoff,
 * sluice_limit_backoff, or an over-estimate settled) carries saved_ns, the limit's `now` at the
 * drain: it is brought back no further ahead than it was then (tat - saved_ns), so the backoff
 * survives a restart and a clock step back still locks it no longer than it was locked.
 * A key of an adaptive rate below its configured rate also carries its AIMD state (eff and
 * since_ns, adapt.h); its tat_rem then counts in 1/eff, which the `permits` field names.
 */
#include <string.h>

#include "sluice/error.h"
#include "base/alloc.h"
#include "base/sat.h"
#include "limit_impl.h"
#include "quota.h"
#include "window.h"

#define BLOB_RATE    'R'
#define BLOB_WINDOW  'W'
#define BLOB_QUOTA   'Q'
#define BLOB_SLIDING 'S'
#define BLOB_LEASES  'C'

/* Header of a sliding blob: kind byte, window, record count. */
#define SLIDING_HEADER (1 + 8 + 8)
#define SLIDING_RECORD 16
/* Header of a leases blob: kind byte, lease count; then 32 bytes a lease. */
#define LEASES_HEADER (1 + 8)
#define LEASES_RECORD 32

static void put64(unsigned char *p, int64_t v)
{
    uint64_t u = (uint64_t)v;

    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(u >> (8 * i));
}

static int64_t get64(const unsigned char *p)
{
    uint64_t u = 0;

    for (int i = 0; i < 8; i++)
        u |= (uint64_t)p[i] << (8 * i);
    return (int64_t)u;
}

void sluice_limit_track_changes(sluice_limit *lim, int on)
{
    if (!on) {
        keytab_free(lim->changed, NULL, NULL);
        lim->changed = NULL;
        return;
    }
    if (!lim->changed)
        (void)keytab_new(0, &lim->changed); /* without memory, changes go untracked */
}

int sluice_limit_on_changes(sluice_limit *lim, void (*fn)(void *arg), void *arg)
{
    lim->on_changes = fn;
    lim->on_changes_arg = arg;
    return lim->changed ? SLUICE_OK : SLUICE_ESTATE;
}

int sluice_limit_has_changes(const sluice_limit *lim)
{
    return lim->changed && keytab_count(lim->changed) > 0;
}

/* Builds the blob of a fixed-size state into buf (SLUICE_KEY_STATE_MAX bytes); returns its
 * length. */
static size_t fixed_blob(const sluice_limit *lim, const void *state, unsigned char *buf)
{
    switch (lim->def.kind) {
    case SLUICE_RATE: {
        const gcra_state *g = state;
        const adapt_state *a = state;
        int adapted = lim->adaptive && a->eff > 0;

        buf[0] = BLOB_RATE;
        put64(buf + 1, g->tat_ns);
        put64(buf + 9, g->tat_rem);
        put64(buf + 17, adapted ? a->eff : lim->def.limit); /* what tat_rem counts in */
        if (g->tat_ns - lim->last_now_ns <= lim->rate.bt_q && !adapted)
            return 25;
        put64(buf + 25, lim->last_now_ns); /* held past a burst: keep how far (import_rate) */
        if (!adapted)
            return 33;
        put64(buf + 33, a->eff);
        put64(buf + 41, a->since_ns);
        return 49;
    }
    case SLUICE_WINDOW: {
        const fixed_state *f = state;

        buf[0] = BLOB_WINDOW;
        put64(buf + 1, f->start_ns);
        put64(buf + 9, f->count);
        put64(buf + 17, lim->def.period_ns);
        return 25;
    }
    case SLUICE_QUOTA: {
        const quota_state *q = state;

        buf[0] = BLOB_QUOTA;
        put64(buf + 1, q->period_start_ns);
        put64(buf + 9, q->period_end_ns);
        put64(buf + 17, q->spent);
        put64(buf + 25, (int64_t)lim->def.calendar);
        return 33;
    }
    default:
        return 0;
    }
}

/* Builds a sliding key's blob in a fresh allocation (freed by the caller). */
static unsigned char *sliding_blob(const sluice_limit *lim, const sliding_state *s, size_t *len)
{
    unsigned char *buf;
    sliding_event e;
    uint32_t i;

    *len = SLIDING_HEADER + (size_t)s->n * SLIDING_RECORD;
    buf = alloc_malloc(*len);
    if (!buf)
        return NULL;
    buf[0] = BLOB_SLIDING;
    put64(buf + 1, lim->def.period_ns);
    put64(buf + 9, (int64_t)s->n);
    for (i = 0; sliding_get(s, i, &e); i++) {
        put64(buf + SLIDING_HEADER + (size_t)i * SLIDING_RECORD, e.at_ns);
        put64(buf + SLIDING_HEADER + (size_t)i * SLIDING_RECORD + 8, e.units);
    }
    return buf;
}

/* Where leases_blob writes the next lease. */
typedef struct blob_cursor {
    unsigned char *p;
} blob_cursor;

static void put_lease(uint64_t lease_id, uint64_t tag, int64_t units, int64_t expires_ns, void *arg)
{
    blob_cursor *c = arg;

    put64(c->p, (int64_t)lease_id);
    put64(c->p + 8, (int64_t)tag);
    put64(c->p + 16, units);
    put64(c->p + 24, expires_ns);
    c->p += LEASES_RECORD;
}

/* Builds a concurrency key's blob of its n kept leases alive at now (n > 0) in a fresh
 * allocation (freed by the caller). */
static unsigned char *leases_blob(const lease_key *k, size_t n, int64_t now, size_t *len)
{
    unsigned char *buf;
    blob_cursor c;

    *len = LEASES_HEADER + n * LEASES_RECORD;
    buf = alloc_malloc(*len);
    if (!buf)
        return NULL;
    buf[0] = BLOB_LEASES;
    put64(buf + 1, (int64_t)n);
    c.p = buf + LEASES_HEADER;
    lease_key_kept(k, now, put_lease, &c);
    return buf;
}

static int state_is_idle(const sluice_limit *lim, const void *state, int64_t now)
{
    switch (lim->def.kind) {
    case SLUICE_RATE:
        return gcra_idle(state, now) &&
               (!lim->adaptive || adapt_rate_at(&lim->aimd, state, now) == lim->aimd.permits);
    case SLUICE_WINDOW:
        return fixed_idle(state, lim->def.period_ns, now);
    case SLUICE_SLIDING:
        return sliding_idle(state, lim->def.period_ns, now);
    case SLUICE_QUOTA:
        return quota_idle(state, now);
    case SLUICE_CONCURRENCY: /* only its kept leases are saved */
        return lease_key_kept(*(lease_key *const *)state, now, NULL, NULL) == 0;
    default:
        return 1;
    }
}

int sluice_limit_drain(sluice_limit *lim,
                       int (*fn)(const char *key, size_t keylen, const void *state, size_t len,
                                 void *arg),
                       void *arg)
{
    size_t pos = 0, keylen;
    const char *key;
    void *mark;

    if (!lim->changed)
        return SLUICE_OK;
    while (keytab_next(lim->changed, &pos, &key, &keylen, &mark)) {
        const void *state = keytab_find(lim->keys, key, keylen);
        unsigned char buf[SLUICE_KEY_STATE_MAX];
        unsigned char *blob = NULL;
        size_t len = 0;
        int rc;

        if (state && !state_is_idle(lim, state, lim->last_now_ns)) {
            if (lim->def.kind == SLUICE_SLIDING || lim->def.kind == SLUICE_CONCURRENCY) {
                blob = lim->def.kind == SLUICE_SLIDING
                           ? sliding_blob(lim, state, &len)
                           : leases_blob(*(lease_key *const *)state,
                                         lease_key_kept(*(lease_key *const *)state,
                                                        lim->last_now_ns, NULL, NULL),
                                         lim->last_now_ns, &len);
                if (!blob)
                    return SLUICE_ENOMEM;
            } else {
                len = fixed_blob(lim, state, buf);
            }
        }
        /* On failure every key stays recorded: the ones already visited are reported again next
         * time, which a store absorbs (a put replaces). */
        rc = fn(key, keylen, len ? (blob ? blob : buf) : NULL, len, arg);
        alloc_free(blob);
        if (rc != 0)
            return rc;
    }
    keytab_clear(lim->changed, NULL, NULL);
    return SLUICE_OK;
}

/* ---- Import -----------------------------------------------------------------------------------
 */

/* Decodes a rate blob into a state valid under the current definition. Returns 1 when the key
 * still carries information, 0 when it should be dropped, -1 when malformed. */
static int import_rate(const sluice_limit *lim, const unsigned char *b, size_t len, int64_t now,
                       adapt_state *out)
{
    const gcra *g = &lim->rate;
    int64_t tat, rem, permits, lead_q = g->bt_q, lead_r = g->bt_r, denom = g->permits;

    memset(out, 0, sizeof *out);
    if (len != 25 && len != 33 && len != 49)
        return -1;
    if (len == 49 && lim->adaptive) {
        /* The AIMD state, kept within the current policy's floor and ceiling. */
        int64_t eff = get64(b + 33);

        if (eff < lim->aimd.floor)
            eff = lim->aimd.floor;
        out->eff = eff >= lim->aimd.permits ? 0 : eff;
        out->since_ns = out->eff ? get64(b + 41) : 0;
        if (out->eff)
            denom = out->eff;
    }
    tat = get64(b + 1);
    rem = get64(b + 9);
    permits = get64(b + 17);
    if (rem < 0 || permits < 1 || rem >= permits)
        return -1;
    if (len >= 33 && sat_sub_i64(tat, get64(b + 25)) > lead_q) {
        lead_q = sat_sub_i64(tat, get64(b + 25)); /* the lead it was saved with, past a burst */
        lead_r = 0;
    }
    if (permits != denom) { /* the fraction means something else now: round up */
        tat += rem > 0;
        rem = 0;
    }
    if ((tat < now || (tat == now && rem == 0)) && out->eff == 0)
        return 0;
    /* No further ahead than a full burst (or the lead it was saved with): a clock that went back
     * while down locks nothing longer than it was locked. */
    if (tat - now > lead_q || (tat - now == lead_q && rem > lead_r)) {
        tat = now + lead_q;
        rem = lead_r;
    }
    if (tat < now || (tat == now && rem == 0)) { /* only its AIMD state is left */
        tat = 0;
        rem = 0;
    }
    out->g.tat_ns = tat;
    out->g.tat_rem = rem;
    return 1;
}

static int import_window(const sluice_limit *lim, const unsigned char *b, size_t len, int64_t now,
                         fixed_state *out)
{
    int64_t period = lim->def.period_ns;

    if (len != 25)
        return -1;
    out->start_ns = get64(b + 1);
    out->count = get64(b + 9);
    if (out->count < 0)
        return -1;
    /* Only the current window of the same length carries information. */
    if (get64(b + 17) != period || out->start_ns != now - now % period || out->count == 0)
        return 0;
    return 1;
}

static int import_quota(const sluice_limit *lim, const unsigned char *b, size_t len, int64_t now,
                        quota_state *out)
{
    if (len != 33)
        return -1;
    out->period_start_ns = get64(b + 1);
    out->period_end_ns = get64(b + 9);
    out->spent = get64(b + 17);
    if (out->spent < 0 || out->period_end_ns < out->period_start_ns)
        return -1;
    if (get64(b + 25) != (int64_t)lim->def.calendar || out->period_end_ns <= now || out->spent == 0)
        return 0;
    return 1;
}

/* Decodes a sliding blob: the records still inside the window, times clamped to now (a record
 * from the future, after a clock step back, counts until it leaves). Sets *events (allocated,
 * freed by the caller) and *n. */
static int import_sliding(const sluice_limit *lim, const unsigned char *b, size_t len, int64_t now,
                          sliding_event **events, uint32_t *n)
{
    int64_t count, window = lim->def.period_ns;
    uint32_t kept = 0;

    *events = NULL;
    *n = 0;
    if (len < SLIDING_HEADER)
        return -1;
    count = get64(b + 9);
    if (count < 0 || count > (int64_t)UINT32_MAX ||
        len != SLIDING_HEADER + (size_t)count * SLIDING_RECORD)
        return -1;
    if (get64(b + 1) != window || count == 0)
        return 0;
    *events = alloc_malloc((size_t)count * sizeof **events);
    if (!*events)
        return -2;
    for (int64_t i = 0; i < count; i++) {
        const unsigned char *r = b + SLIDING_HEADER + (size_t)i * SLIDING_RECORD;
        sliding_event e = {get64(r), get64(r + 8)};

        if (e.units < 1)
            return -1;
        if (e.at_ns > now)
            e.at_ns = now;
        if (kept > 0 && e.at_ns < (*events)[kept - 1].at_ns)
            return -1;
        if (now - e.at_ns < window)
            (*events)[kept++] = e;
    }
    *n = kept;
    return kept > 0;
}

/* Restores a leases blob on `key`: its kept leases still alive at now, each with its id and tag,
 * whatever the key holds now (they were granted). The blob is checked whole first, so a malformed
 * one restores nothing. Returns 0, SLUICE_EINVAL, SLUICE_EBUSY or SLUICE_ENOMEM (the process
 * cannot start then; leases restored before it stay). */
static int import_leases(sluice_limit *lim, const char *key, size_t keylen, const unsigned char *b,
                         size_t len, int64_t now)
{
    int64_t count;
    norm_key nk;
    void *state;
    int fresh, rc;

    if (len < LEASES_HEADER)
        return SLUICE_EINVAL;
    count = get64(b + 1);
    if (count < 0 || (uint64_t)count > (len - LEASES_HEADER) / LEASES_RECORD ||
        len != LEASES_HEADER + (size_t)count * LEASES_RECORD)
        return SLUICE_EINVAL;
    for (int64_t i = 0; i < count; i++) {
        const unsigned char *r = b + LEASES_HEADER + (size_t)i * LEASES_RECORD;
        int64_t units = get64(r + 16);

        if (get64(r) == 0 || get64(r + 8) == 0 || units < 1 || units > SLUICE_MAX_PERMITS)
            return SLUICE_EINVAL;
    }
    for (int64_t i = 0; i < count; i++) {
        const unsigned char *r = b + LEASES_HEADER + (size_t)i * LEASES_RECORD;
        lease_tagging kept;

        if (get64(r + 24) <= now) /* it ended while the process was down */
            continue;
        rc = limit_normalize_key(lim, key, keylen, &nk);
        if (rc == SLUICE_OK)
            rc = limit_mark_lease_key(lim, nk.key, nk.len);
        if (rc == SLUICE_OK)
            rc = limit_prepare_key(lim, &nk, now, &state, &fresh);
        if (rc == SLUICE_OK && !state)
            rc = SLUICE_EBUSY; /* untracked past the cap: a restored key must not be lost */
        if (rc != SLUICE_OK)
            return rc;
        kept.tag = (uint64_t)get64(r + 8);
        kept.key = nk.key;
        kept.keylen = nk.len;
        rc = lease_restore(lim->leases, state, (uint64_t)get64(r), get64(r + 16), get64(r + 24),
                           &kept);
        if (rc != SLUICE_OK)
            return rc;
    }
    return SLUICE_OK;
}

int sluice_limit_import(sluice_limit *lim, const char *key, size_t keylen, const void *blob,
                        size_t len, int64_t now_ns)
{
    const unsigned char *b = blob;
    sliding_event *events = NULL;
    uint32_t nevents = 0;
    union {
        adapt_state rate;
        fixed_state window;
        quota_state quota;
    } decoded;
    int64_t now = limit_clamp_now(lim, now_ns);
    norm_key nk;
    void *state;
    int fresh, keep, rc;

    if (!b || len < 1 || keylen > lim->def.max_key_len)
        return SLUICE_EINVAL;
    switch (lim->def.kind) {
    case SLUICE_RATE:
        keep = b[0] == BLOB_RATE ? import_rate(lim, b, len, now, &decoded.rate) : -1;
        break;
    case SLUICE_WINDOW:
        keep = b[0] == BLOB_WINDOW ? import_window(lim, b, len, now, &decoded.window) : -1;
        break;
    case SLUICE_QUOTA:
        keep = b[0] == BLOB_QUOTA ? import_quota(lim, b, len, now, &decoded.quota) : -1;
        break;
    case SLUICE_SLIDING:
        keep = b[0] == BLOB_SLIDING ? import_sliding(lim, b, len, now, &events, &nevents) : -1;
        break;
    case SLUICE_CONCURRENCY:
        return b[0] == BLOB_LEASES ? import_leases(lim, key, keylen, b, len, now) : SLUICE_EINVAL;
    default:
        keep = -1;
    }
    if (keep <= 0) {
        alloc_free(events);
        return keep == 0 ? SLUICE_OK : keep == -2 ? SLUICE_ENOMEM : SLUICE_EINVAL;
    }
    rc = limit_normalize_key(lim, key, keylen, &nk);
    if (rc == SLUICE_OK)
        rc = limit_prepare_key(lim, &nk, now, &state, &fresh);
    if (rc == SLUICE_OK && !state)
        rc = SLUICE_EBUSY; /* untracked past the cap: a restored key must not be lost quietly */
    if (rc == SLUICE_OK) {
        if (lim->def.kind == SLUICE_SLIDING)
            rc = sliding_load(state, lim->def.limit, events, nevents);
        else if (lim->def.kind == SLUICE_RATE && lim->adaptive) {
            int was = !fresh && ((const adapt_state *)state)->eff != 0;

            memcpy(state, &decoded.rate, sizeof(adapt_state));
            limit_note_slowed(lim, was, state);
        } else if (lim->def.kind == SLUICE_RATE)
            memcpy(state, &decoded.rate, sizeof(gcra_state));
        else if (lim->def.kind == SLUICE_WINDOW)
            memcpy(state, &decoded.window, sizeof decoded.window);
        else
            memcpy(state, &decoded.quota, sizeof decoded.quota);
    }
    alloc_free(events);
    return rc;
}
