/* SPDX-License-Identifier: MIT */
/*
 * Window limits on one key: at most `limit` units per window of `window_ns`.
 *
 * Fixed window: windows are aligned to multiples of window_ns since the epoch (as a Redis INCR +
 * EXPIRE counter is, seed 004, or Conductor's N per F seconds, seed 002). The state is the start
 * of the current window and the units counted in it.
 *
 * Sliding window: at most `limit` units in ANY interval of length window_ns. Exact: the state
 * keeps one record per grant (time, units) for the grants of the last window, in a ring that
 * grows on demand up to `limit` records (a grant has at least one unit), and merges grants made
 * at the same nanosecond. Its memory is bounded by the active grants, and validation caps the
 * limit at SLUICE_MAX_SLIDING_LIMIT.
 *
 * Both fill a sluice_decision exactly as GCRA does: retry_after is the exact (never
 * under-stated) wait after which the same request passes, SLUICE_NEVER when units > limit.
 */
#ifndef SLUICE_CORE_WINDOW_H
#define SLUICE_CORE_WINDOW_H

#include <stddef.h>
#include <stdint.h>

#include "sluice/limit.h"

/* A fixed window key. Zeroed = fresh. */
typedef struct fixed_state {
    int64_t start_ns; /* start of the window `count` belongs to */
    int64_t count;    /* units granted in that window */
} fixed_state;

void fixed_decide(int64_t limit, int64_t window_ns, fixed_state *s, int64_t units, int64_t now_ns,
                  int peek, sluice_decision *d);

/* Returns 1 when s carries no information at now_ns (its window has ended or it is empty). */
int fixed_idle(const fixed_state *s, int64_t window_ns, int64_t now_ns);

/* One grant remembered by a sliding window. */
typedef struct sliding_event {
    int64_t at_ns;
    int64_t units;
} sliding_event;

/* A sliding window key. Zeroed = fresh (no allocation until the first grant). */
typedef struct sliding_state {
    sliding_event *ring; /* cap records, owned; NULL while cap == 0 */
    uint32_t head;       /* index of the oldest record */
    uint32_t n;          /* records in use */
    uint32_t cap;        /* records allocated */
    int64_t total;       /* units over the n records */
} sliding_state;

/* Makes sure one more record fits, so that a following non-peek sliding_decide cannot fail.
 * Returns 0 or SLUICE_ENOMEM (s unchanged). */
int sliding_prepare(sliding_state *s, int64_t limit);

/* Decides on s. Drops records older than the window first. A grant (not peek) needs the room
 * made by sliding_prepare(); returns SLUICE_ENOMEM (nothing charged, *d denied) when there is
 * none and growing fails. Returns 0 otherwise. */
int sliding_decide(int64_t limit, int64_t window_ns, sliding_state *s, int64_t units,
                   int64_t now_ns, int peek, sluice_decision *d);

/* Corrects the units recorded: diff > 0 records an extra charge at now_ns (SLUICE_ENOMEM when
 * the ring cannot grow; nothing changes), diff < 0 refunds from the newest records. */
int sliding_adjust(int64_t limit, sliding_state *s, int64_t diff, int64_t now_ns);

/* Replaces s with n records (oldest first, times non-decreasing), as restored after a restart.
 * Returns 0 or SLUICE_ENOMEM (s unchanged). */
int sliding_load(sliding_state *s, int64_t limit, const sliding_event *events, uint32_t n);

/* Copies the i-th record from the oldest into *out and returns 1, or returns 0 past the end. */
int sliding_get(const sliding_state *s, uint32_t i, sliding_event *out);

/* Returns 1 when s holds no grant inside the window ending at now_ns. */
int sliding_idle(const sliding_state *s, int64_t window_ns, int64_t now_ns);

/* Bytes allocated by s (its ring). */
size_t sliding_bytes(const sliding_state *s);

/* Frees the ring and zeroes s. Accepts a fresh state. */
void sliding_clear(sliding_state *s);

#endif
