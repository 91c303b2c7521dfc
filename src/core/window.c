/* SPDX-License-Identifier: MIT */
/*
 * Fixed and sliding window limits on one key (see window.h for the model).
 *
 * Fixed window: the window holding t is [t - t mod W, t - t mod W + W). A key counts the units
 * granted in one window; a request is granted when count + units <= limit, and a denied one waits
 * for the next window, where the count starts again at 0.
 *
 * Sliding window: a grant made at time g counts in every interval (t - W, t] that holds g, so it
 * stops counting at g + W exactly ("leaves the window" when now - g >= W). A request of u units
 * at now is granted when the units of the records still in the window plus u fit in the limit.
 * Checking this at every grant bounds every interval of length W: the grants of any such interval
 * lie in the window that ended at the latest of them, which was checked when it was granted.
 *
 * Ensures:
 * - the ring holds the records in time order, oldest at head, one per distinct grant time, each
 *   with units >= 1, so n <= total <= limit (for the limit the records were granted under);
 * - retry_after is the exact wait: one nanosecond less and the same request is still denied;
 * - a peek never writes the state, and a denial charges nothing (a decision that is not a peek
 *   forgets the records that left the window, which changes no answer);
 * - times before the epoch are read as the epoch, and a now older than the state's newest time
 *   is read as that time (time never runs backwards inside a key).
 * Every difference of times below lies in [0, now], and every sum of units in [0, 2 * limit], so
 * nothing overflows for limits and windows within the bounds of include/sluice/limit.h.
 */
#include "window.h"

#include <string.h>

#include "base/alloc.h"
#include "base/sat.h"
#include "sluice/error.h"

/* Records a fresh ring starts with; it then doubles up to the limit. */
#define SLIDING_MIN_CAP UINT32_C(4)

static int64_t clamp_epoch(int64_t now_ns)
{
    return now_ns < 0 ? 0 : now_ns;
}

/* ---- Fixed window ------------------------------------------------------------------------- */

void fixed_decide(int64_t limit, int64_t window_ns, fixed_state *s, int64_t units, int64_t now_ns,
                  int peek, sluice_decision *d)
{
    int64_t now = clamp_epoch(now_ns);
    int64_t start = now - now % window_ns;
    int64_t used;
    int64_t left; /* time to the end of the current window, in [1, window_ns] */

    if (s->count > 0 && start < s->start_ns) {
        now = s->start_ns;
        start = s->start_ns;
    }
    used = s->start_ns == start ? s->count : 0;
    left = window_ns - (now - start);

    d->limit = limit;
    d->lease_id = 0;
    d->untracked = 0;
    d->shadow_denied = 0;
    if (units <= limit && used <= limit - units) {
        d->allowed = 1;
        d->remaining = limit - used - units;
        d->retry_after_ns = 0;
        d->reset_after_ns = left;
        if (!peek) {
            s->start_ns = start;
            s->count = used + units;
        }
        return;
    }
    d->allowed = 0;
    d->remaining = used < limit ? limit - used : 0;
    d->retry_after_ns = units > limit ? SLUICE_NEVER : left;
    d->reset_after_ns = used > 0 ? left : 0;
}

int fixed_idle(const fixed_state *s, int64_t window_ns, int64_t now_ns)
{
    int64_t now = clamp_epoch(now_ns);

    return s->count == 0 || now - now % window_ns > s->start_ns;
}

/* ---- Sliding window ----------------------------------------------------------------------- */

/* The i-th record from the oldest (i < n). */
static sliding_event *ring_at(const sliding_state *s, uint32_t i)
{
    uint32_t k = s->head + i;

    if (k >= s->cap)
        k -= s->cap;
    return &s->ring[k];
}

/* The newest record (n > 0). */
static sliding_event *ring_newest(const sliding_state *s)
{
    return ring_at(s, s->n - 1);
}

/* Moves the records into a new ring of new_cap (>= n, >= 1) records, oldest first. Returns 0 or
 * SLUICE_ENOMEM with s unchanged. */
static int ring_resize(sliding_state *s, uint32_t new_cap)
{
    sliding_event *ring = alloc_malloc((size_t)new_cap * sizeof *ring);

    if (!ring)
        return SLUICE_ENOMEM;
    if (s->n > 0) {
        uint32_t first = s->cap - s->head; /* records from head to the end of the array */

        if (first >= s->n) {
            memcpy(ring, s->ring + s->head, (size_t)s->n * sizeof *ring);
        } else {
            memcpy(ring, s->ring + s->head, (size_t)first * sizeof *ring);
            memcpy(ring + first, s->ring, (size_t)(s->n - first) * sizeof *ring);
        }
    }
    alloc_free(s->ring);
    s->ring = ring;
    s->head = 0;
    s->cap = new_cap;
    return SLUICE_OK;
}

/* The largest ring a key with this limit may need: one record per unit. */
static uint32_t cap_bound(int64_t limit)
{
    if (limit < 1)
        return 1;
    if (limit > (int64_t)(UINT32_MAX / 2))
        return UINT32_MAX / 2;
    return (uint32_t)limit;
}

/* Makes room for one more record when the ring is full, doubling it up to max_cap. Returns 0 when
 * a record fits or none is needed (a full ring of max_cap records), else SLUICE_ENOMEM. */
static int ring_grow(sliding_state *s, uint32_t max_cap)
{
    uint32_t new_cap;

    if (s->n < s->cap)
        return SLUICE_OK;
    if (s->cap >= max_cap)
        return SLUICE_OK;
    new_cap = s->cap == 0 ? SLIDING_MIN_CAP : s->cap * 2;
    if (new_cap > max_cap)
        new_cap = max_cap;
    return ring_resize(s, new_cap);
}

int sliding_prepare(sliding_state *s, int64_t limit)
{
    /* Give memory back once most of the records left the window; a failure to shrink costs
     * nothing but the memory. The hysteresis (shrink below a quarter, to a half) keeps a key
     * whose traffic hovers around a size from reallocating on every grant. */
    if (s->cap > SLIDING_MIN_CAP && s->n < s->cap / 4) {
        uint32_t new_cap = s->cap / 2;

        if (new_cap < SLIDING_MIN_CAP)
            new_cap = SLIDING_MIN_CAP;
        (void)ring_resize(s, new_cap);
    }
    return ring_grow(s, cap_bound(limit));
}

/* What a key holds at now: the index of its oldest record still in the window and the units of
 * the records from there on. */
typedef struct sliding_view {
    uint32_t first;
    int64_t total;
} sliding_view;

static sliding_view sliding_look(const sliding_state *s, int64_t window_ns, int64_t now)
{
    sliding_view v = {0, s->total};

    while (v.first < s->n) {
        const sliding_event *e = ring_at(s, v.first);

        if (now - e->at_ns < window_ns)
            break;
        v.total -= e->units;
        v.first++;
    }
    return v;
}

/* The time from now until the records from v.first on have given back `excess` units (1 <=
 * excess <= v.total): the moment the record that completes it leaves the window. */
static int64_t sliding_wait(const sliding_state *s, sliding_view v, int64_t window_ns, int64_t now,
                            int64_t excess)
{
    int64_t freed = 0;
    uint32_t i = v.first;
    const sliding_event *e;

    for (;;) {
        e = ring_at(s, i);
        freed = sat_add_i64(freed, e->units);
        if (freed >= excess || i + 1 >= s->n)
            break;
        i++;
    }
    return window_ns - (now - e->at_ns);
}

/* The time from now until every record from v.first on has left the window. */
static int64_t sliding_drain(const sliding_state *s, sliding_view v, int64_t window_ns, int64_t now)
{
    if (v.first >= s->n)
        return 0;
    return window_ns - (now - ring_newest(s)->at_ns);
}

int sliding_decide(int64_t limit, int64_t window_ns, sliding_state *s, int64_t units,
                   int64_t now_ns, int peek, sluice_decision *d)
{
    int64_t now = clamp_epoch(now_ns);
    sliding_view v;

    if (s->n > 0 && now < ring_newest(s)->at_ns)
        now = ring_newest(s)->at_ns;
    v = sliding_look(s, window_ns, now);
    if (!peek) {
        /* Forget the records that left the window: they never count again, and a key denied
         * over and over must not walk past them each time. */
        s->head = v.first == s->n ? 0 : (uint32_t)(ring_at(s, v.first) - s->ring);
        s->n -= v.first;
        s->total = v.total;
        v.first = 0;
    }

    d->limit = limit;
    d->lease_id = 0;
    d->untracked = 0;
    d->shadow_denied = 0;
    if (units > limit || v.total > limit - units) {
        d->allowed = 0;
        d->remaining = v.total < limit ? limit - v.total : 0;
        if (units > limit)
            d->retry_after_ns = SLUICE_NEVER;
        else
            d->retry_after_ns =
                sliding_wait(s, v, window_ns, now, sat_add_i64(v.total, units) - limit);
        d->reset_after_ns = sliding_drain(s, v, window_ns, now);
        return SLUICE_OK;
    }

    d->allowed = 1;
    d->remaining = limit - v.total - units;
    d->retry_after_ns = 0;
    d->reset_after_ns = window_ns;
    if (peek)
        return SLUICE_OK;

    if (s->n == 0 || ring_newest(s)->at_ns != now) {
        /* Normally sliding_prepare() made room; a key whose records outnumber its limit (the
         * limit was lowered) may still grow past it, one record at a time. */
        uint32_t max_cap = cap_bound(limit) > s->n ? cap_bound(limit) : s->n + 1;
        sliding_event *e;

        if (ring_grow(s, max_cap) != SLUICE_OK) {
            d->allowed = 0;
            d->remaining = limit - v.total;
            d->reset_after_ns = sliding_drain(s, v, window_ns, now);
            return SLUICE_ENOMEM;
        }
        e = ring_at(s, s->n);
        e->at_ns = now;
        e->units = 0;
        s->n++;
    }
    ring_newest(s)->units += units;
    s->total += units;
    return SLUICE_OK;
}

int sliding_idle(const sliding_state *s, int64_t window_ns, int64_t now_ns)
{
    return s->n == 0 || clamp_epoch(now_ns) - ring_newest(s)->at_ns >= window_ns;
}

size_t sliding_bytes(const sliding_state *s)
{
    return (size_t)s->cap * sizeof *s->ring;
}

void sliding_clear(sliding_state *s)
{
    alloc_free(s->ring);
    memset(s, 0, sizeof *s);
}

int sliding_adjust(int64_t limit, sliding_state *s, int64_t diff, int64_t now_ns)
{
    int64_t now = clamp_epoch(now_ns);

    if (diff > 0) {
        uint32_t max_cap = cap_bound(limit) > s->n ? cap_bound(limit) : s->n + 1;

        if (s->n > 0 && now < ring_newest(s)->at_ns)
            now = ring_newest(s)->at_ns;
        if (s->n == 0 || ring_newest(s)->at_ns != now) {
            sliding_event *e;

            if (ring_grow(s, max_cap) != SLUICE_OK)
                return SLUICE_ENOMEM;
            e = ring_at(s, s->n);
            e->at_ns = now;
            e->units = 0;
            s->n++;
        }
        /* Corrections of up to 8 * 10^9 units pile up: saturate, "too many to count". */
        ring_newest(s)->units = sat_add_i64(ring_newest(s)->units, diff);
        s->total = sat_add_i64(s->total, diff);
        return SLUICE_OK;
    }
    /* A refund gives back the newest grants first: they are the ones that would leave the
     * window last, so the refund takes effect for as long as possible. */
    while (diff < 0 && s->n > 0) {
        sliding_event *e = ring_newest(s);
        int64_t take = -diff < e->units ? -diff : e->units;

        e->units -= take;
        s->total -= take;
        diff += take;
        if (e->units == 0)
            s->n--;
    }
    if (s->n == 0)
        s->head = 0;
    return SLUICE_OK;
}

int sliding_load(sliding_state *s, int64_t limit, const sliding_event *events, uint32_t n)
{
    uint32_t cap = SLIDING_MIN_CAP;
    sliding_event *ring;

    (void)limit;
    while (cap < n)
        cap *= 2;
    ring = alloc_malloc((size_t)cap * sizeof *ring);
    if (!ring)
        return SLUICE_ENOMEM;
    sliding_clear(s);
    s->ring = ring;
    s->cap = cap;
    for (uint32_t i = 0; i < n; i++) {
        ring[i] = events[i];
        s->total += events[i].units;
    }
    s->n = n;
    return SLUICE_OK;
}

int sliding_get(const sliding_state *s, uint32_t i, sliding_event *out)
{
    if (i >= s->n)
        return 0;
    *out = *ring_at(s, i);
    return 1;
}
