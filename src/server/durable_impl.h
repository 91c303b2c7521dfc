/* SPDX-License-Identifier: MIT */
/*
 * The durable state shared by durable.c (commits, held replies, timers, INFO) and
 * durable_load.c (recovery at start). Not API: server/durable.h is.
 */
#ifndef SLUICE_SERVER_DURABLE_IMPL_H
#define SLUICE_SERVER_DURABLE_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "server/durable.h"
#include "store/store.h"

/* Meta names (store_put_meta) written at every commit. */
#define META_CLOCK   "clock_ns" /* the server clock when the commit was made */
#define META_NEXT_ID "next_id"  /* the largest task id issued so far */

/* One held reply: bytes [start, end) of a client's reply buffer. */
typedef struct durable_held {
    conn *c; /* NULL once the client closed */
    size_t start, end;
} durable_held;

/* What recovery found, for the log and INFO. */
typedef struct durable_recovery {
    uint64_t tasks;         /* tasks restored */
    uint64_t running;       /* of which RUNNING with a live lease */
    uint64_t finished;      /* of which finished (kept for TASK.INFO) */
    uint64_t unrestorable;  /* tasks kept in the store that could not be restored */
    uint64_t keys;          /* key states read */
    uint64_t keys_dropped;  /* of which dropped: malformed, another kind, or the limit is gone */
    uint64_t limits;        /* runtime limit definitions re-applied */
    uint64_t limits_failed; /* of which refused (logged) */
    uint64_t series;        /* recurring series restored */
    uint64_t series_failed; /* series kept in the store that could not be restored */
    int64_t clock_floor_ns; /* the last clock reading stored, 0 when none */
    int64_t ms;             /* how long recovery took */
} durable_recovery;

typedef struct durable {
    server *srv;
    store *st;                   /* NULL: memory only */
    store_durability mode;       /* STORE_NONE when st is NULL */
    uint64_t changes_at_failure; /* the feed's sluice_engine_changes_seq at the last failure */
    durable_held *held;          /* replies held until the next commit */
    size_t nheld, held_cap;      /* entries used and allocated */
    uv_timer_t keys_timer;       /* commits changed limiter keys every DURABLE_KEYS_MS */
    uv_timer_t sync_timer;       /* STORE_BATCH: store_sync when due */
    int handles;                 /* timer handles initialised and not yet closed */
    int closing;                 /* durable_close ran */
    /* Figures (INFO persistence). */
    uint64_t commits;             /* transactions committed */
    uint64_t failed_commits;      /* transactions that failed */
    uint64_t syncs, failed_syncs; /* STORE_BATCH syncs */
    uint64_t ioerr_replies;       /* held replies turned into -IOERR */
    int last_ok;                  /* 1 when the last commit succeeded (or none was tried) */
    int64_t last_commit_ns;       /* server clock of the last successful commit */
    char last_error[256];         /* the last commit or sync error, "" when none */
    durable_recovery rec;         /* what start-up recovered */
} durable;

/* durable_load.c: reads the store into the engine (see durable_open). Returns 0 or an error with
 * msg. */
int durable_load(durable *d, char *msg, size_t msglen);

/* durable.c: writes the engine's change feed (sluice_engine_changes) and the meta in one
 * transaction, and confirms the batch when it committed; see durable_turn. Returns 0 or the
 * error. Held replies are released either way. */
int durable_commit(durable *d);

#endif
