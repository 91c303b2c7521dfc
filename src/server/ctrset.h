/* SPDX-License-Identifier: MIT */
/*
 * A set of named counters summed across nodes: the bookkeeping of rcounters.h, pure (no I/O,
 * no clock), so that it is tested on its own (tests/unit/test_ctrset.c).
 *
 * Each node counts locally, on the decision path, with no round trip (ctrset_add). Now and then
 * (rcounters.c: every second, and at shutdown) the node flushes: ctrset_begin freezes what was
 * counted since the last flush into the flush's deltas under a new sequence number, the store
 * adds them to its totals unless it has already seen that node's sequence number, and answers
 * the totals (ctrset_total for each, then ctrset_confirm). A flush that got no answer keeps its
 * deltas frozen: the next ctrset_begin sends exactly them again under the same sequence number,
 * so the store applies a flush once however many times its answer was lost, and counts made
 * meanwhile wait for the flush after.
 *
 * Invariants (each has a test):
 * - nothing counted is lost or counted twice: node == every delta sent and confirmed +
 *   inflight + pending, and a delta leaves `pending` only into `inflight`, and `inflight` only
 *   when a flush is confirmed;
 * - ctr_cluster (what the node shows for the whole cluster) never decreases: the store's totals
 *   only grow while it keeps its data, and when a store lost some (a Redis restarted without
 *   persistence) the loss is added to the counter's `offset`;
 * - ctr_cluster >= what this node counted since its start that the store has not lost.
 *
 * Names are "CODE:NAME" (rcounters.h lists the codes), at most CTRSET_NAME_MAX bytes; a longer
 * one is not counted. The set is small (a few counters per limit and per task type).
 */
#ifndef SLUICE_SERVER_CTRSET_H
#define SLUICE_SERVER_CTRSET_H

#include <stddef.h>
#include <stdint.h>

#include "base/ptab.h"

/* Longest counter name, "CODE:NAME". */
#define CTRSET_NAME_MAX 512

/* One counter. */
typedef struct ctr {
    uint64_t hash;     /* of the name */
    uint64_t node;     /* counted by this node since it started */
    uint64_t pending;  /* counted, in no flush yet */
    uint64_t inflight; /* frozen in the flush in flight (sent, not confirmed) */
    uint64_t store;    /* the store's total as the last confirmed flush read it */
    uint64_t offset;   /* what the store lost (a reset), added back so shown values never fall */
    uint64_t reading;  /* the total of the answer being read (ctrset_total) */
    int seen;          /* 1 when the answer being read named it */
    size_t len;
    char name[]; /* len bytes and a NUL */
} ctr;

typedef struct ctrset {
    ptab tab; /* ctr * by hash_bytes of the name */
    ctr **v;  /* every counter, in creation order */
    size_t n, cap;
    uint64_t seq;     /* the sequence number of the flush in flight, or of the last one */
    int busy;         /* a flush is in flight (begun, not confirmed): its deltas are frozen */
    uint64_t dropped; /* counts not kept for want of memory */
} ctrset;

/* An empty set (allocates nothing). */
void ctrset_init(ctrset *s);

/* Frees every counter. Accepts a zeroed set. */
void ctrset_free(ctrset *s);

/* Counts delta on "code:name" (name of len bytes, any bytes), creating the counter. Returns 0,
 * SLUICE_ENOMEM (nothing counted; added to dropped) or SLUICE_EINVAL (name too long). */
int ctrset_add(ctrset *s, const char *code, const char *name, size_t len, uint64_t delta);

/* The counter "code:name", or NULL when nothing was counted or read for it. The pointer is
 * valid until the set is freed. */
const ctr *ctrset_find(const ctrset *s, const char *code, const char *name, size_t len);

/* The cluster-wide value the node shows: the store's last total, what it lost, and what this
 * node counted that the store has not confirmed (saturating). */
uint64_t ctr_cluster(const ctr *c);

/* Starts a flush: when none is in flight, moves every counter's pending into inflight under the
 * next sequence number; when one is (its answer never came), keeps it as it is, to be sent
 * again. Returns the number of counters with a delta to send (0 is still a flush: it reads the
 * totals). Ensures: s->busy. */
size_t ctrset_begin(ctrset *s);

/* One total of the store's answer to the flush in flight: the counter named name (len bytes,
 * "code:name") has total n. Creates the counter (another node's) when unknown. Returns 0 or
 * SLUICE_ENOMEM (that total is skipped: read again at the next flush). */
int ctrset_total(ctrset *s, const char *name, size_t len, uint64_t n);

/* The store answered the flush in flight with the totals given to ctrset_total since
 * ctrset_begin (a counter not named has total 0: the store lost it). Each counter's inflight is
 * now in the store's total; a total below the last one plus inflight is a loss, kept in offset.
 * Ensures: !s->busy, every inflight 0. */
void ctrset_confirm(ctrset *s);

/* The answer could not be read: the totals given since ctrset_begin are forgotten, and the
 * flush stays in flight (sent again by the next ctrset_begin). */
void ctrset_unread(ctrset *s);

/* Counts counted here and not yet confirmed by the store (pending + inflight, all counters). */
uint64_t ctrset_unconfirmed(const ctrset *s);

/* Writes the flush's counters with a delta as two PostgreSQL array literals, names
 * ({"la:api","ts:"}: every name quoted, '"' and '\' escaped) and deltas ({1,2}), each
 * NUL-terminated, into *buf (grown, alloc_* memory the caller frees); *names_off and
 * *deltas_off are their offsets in it. Returns 0 or SLUICE_ENOMEM. Pure. */
int ctrset_pg_arrays(const ctrset *s, char **buf, size_t *cap, size_t *names_off,
                     size_t *deltas_off);

/* Parses a total: decimal digits only, no sign, at most UINT64_MAX (a store's negative or
 * malformed value is refused). Returns 0 or -1. Pure. */
int ctrset_parse_u64(const char *s, size_t len, uint64_t *out);

#endif
