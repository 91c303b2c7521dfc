/* SPDX-License-Identifier: MIT */
/*
 * The durable state shared by durable.c (commits, held replies, timers, INFO) and
 * durable_load.c (recovery at start). Not API: server/durable.h is.
 */
#ifndef SLUICE_SERVER_DURABLE_IMPL_H
#define SLUICE_SERVER_DURABLE_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <uv.h>

#include "server/durable.h"
#include "store/store.h"

/* Meta names (store_put_meta) written at every commit. */
#define META_CLOCK   "clock_ns" /* the server clock when the commit was made */
#define META_NEXT_ID "next_id"  /* the largest task id issued so far */

/* One held reply: bytes [start, end) of a client's reply buffer; or, with fn set (c NULL), a
 * waiter of durable_wait, told the commit's outcome instead. */
typedef struct durable_held {
    conn *c; /* NULL once the client closed, and for a waiter */
    size_t start, end;
    durable_wait_fn fn;   /* a waiter's callback; NULL once called or cancelled */
    void *arg;            /* passed to fn */
    durable_undo_fn undo; /* a reply's: undoes its change when the commit fails; may be NULL */
    char *undo_arg;       /* passed to undo; owned (alloc_free), NULL when none */
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

/* One commit's writes, serialised on the loop thread from the engine's change feed, written by
 * the commit thread (durable.c): a byte buffer of operations, each a code and its fields (see
 * job_* in durable.c), so nothing the thread reads belongs to the engine. */
typedef struct durable_job {
    unsigned char *buf; /* the operations */
    size_t len, cap;    /* bytes used and allocated */
    int oom;            /* 1: serialising ran out of memory (the job is not run) */
    int commit;         /* 1: a transaction to write; 0: a sync only */
    int sync;           /* STORE_BATCH: store_sync after the commit (or alone) */
    int64_t clock_ns;   /* the server clock at the pull (meta clock_ns) */
    uint64_t next_id;   /* the largest task id issued at the pull (meta next_id) */
    int64_t now_ms;     /* store_commit's now_ms (the pull's loop time) */
    /* Results, written by the thread. */
    int rc;              /* the commit's: 0 or the error */
    int sync_rc;         /* the sync's */
    int64_t took_ns;     /* how long the store took for the commit */
    int64_t sync_due_ms; /* store_sync_due_ms after the job, from now_ms; -1 when none */
    char err[256];       /* rc != 0: why; sync_rc != 0: the sync's reason */
} durable_job;

typedef struct durable {
    server *srv;
    store *st;                   /* NULL: memory only */
    store_durability mode;       /* STORE_NONE when st is NULL */
    uint64_t changes_at_failure; /* the feed's sluice_engine_changes_seq at the last failure */
    durable_held *held;          /* replies held until the next commit (not yet pulled) */
    size_t nheld, held_cap;      /* entries used and allocated */
    durable_held *flight;        /* replies held until the commit in flight */
    size_t nflight, flight_cap;  /* entries used and allocated */
    uint64_t seq_pulled;         /* sluice_engine_changes_seq at the last pull */
    uint64_t lazy;               /* of the changes since, those of deliveries (durable_delivered) */
    int lease_only;              /* the running command delivered durable tasks only */
    /* durable_key_changed by the running command, taken by durable_after_command. */
    int key_wait;             /* its reply waits for the commit of a key state */
    int key_oom;              /* copying undo_arg ran out of memory: commit at once instead */
    durable_undo_fn key_undo; /* what undoes its change if that commit fails, or NULL */
    char *key_undo_arg;       /* owned copy of the argument of key_undo, or NULL */
    uint64_t durable_id;      /* every task up to this id was added by a commit that succeeded */
    /* The commit thread (durable.c): one job in flight at most, while the feed fills. */
    durable_job job;            /* the job in flight, or the last one */
    int thread_on;              /* the thread runs */
    int busy;                   /* a job was posted and its completion not yet handled */
    int posted, finished, stop; /* under mu: job for the thread, job done, thread to stop */
    int sync_wanted;            /* STORE_BATCH: a sync is due while a job was in flight */
    uv_thread_t thread;
    uv_mutex_t mu;
    uv_cond_t todo_cv, done_cv;
    uv_async_t done_async; /* wakes the loop when a job finished */
    uv_timer_t keys_timer; /* commits changed limiter keys every DURABLE_KEYS_MS */
    uv_timer_t sync_timer; /* STORE_BATCH: store_sync when due */
    int handles;           /* timer handles initialised and not yet closed */
    int closing;           /* durable_close ran */
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

/* durable.c: a synchronous commit (start-up, a reply that cannot be held, the graceful stop):
 * waits for the job in flight, then writes the engine's change feed (sluice_engine_changes) and
 * the meta in one transaction on the commit thread and waits for it, confirming the batch when
 * it committed; see durable_turn. Returns 0 or the error. Held replies are released either
 * way. */
int durable_commit(durable *d);

/* durable.c: clock_gettime(id) in nanoseconds; times a commit or a load, never a decision. */
int64_t durable_read_clock(clockid_t id);

/* durable_job.c, loop thread: serialises batch c of the engine's change feed, with the meta
 * (clock, next id), into d->job (on running out of memory, sets job.oom). */
void durable_job_fill(durable *d, const sluice_changes *c);

/* durable_job.c, any thread: runs job j on the store (the transaction and its fsync, then the
 * sync it asks for) and records the results in j. Touches nothing but the store and the job. */
void durable_job_run(store *st, store_durability mode, durable_job *j);

/* durable_job.c: the commit thread's body (arg: the durable state); runs each job posted under
 * d->mu and wakes the loop through d->done_async, until d->stop. */
void durable_commit_thread(void *arg);

#endif
