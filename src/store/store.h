/* SPDX-License-Identifier: MIT */
/*
 * The store: where a server keeps what must survive a restart. One interface, several backends
 * (SQLite embedded today; Redis and PostgreSQL can follow without touching the engine).
 *
 * A store is written in transactions: store_begin, any number of puts and deletes, then
 * store_commit, which returns only once the transaction is as durable as the mode promises:
 *   STORE_ALWAYS  committed and fsynced before store_commit returns (the server answers clients
 *                 only after that; it commits once per loop turn, so many clients share one
 *                 fsync: group commit);
 *   STORE_BATCH   committed, fsynced at most every batch_ms: a crash loses up to batch_ms of
 *                 acknowledged changes (documented loss window);
 *   STORE_NONE    nothing is written; every call succeeds (memory only).
 * A failed commit (write error, fsync error, disk full) rolls the transaction back and returns
 * the error; the caller must not report success for any change in it. There is no retry of a
 * failed fsync (a failed fsync may have dropped dirty pages: PostgreSQL's lesson); the next
 * transaction starts afresh and will succeed once the cause (space) is gone.
 *
 * What is stored: tasks (sluice_task_record), limiter key state (opaque blobs from
 * sluice_limit_drain), runtime limit definitions (LIMIT.SET, as spec text), recurring series, and
 * a few integers of metadata (the last clock reading, so a clock that went back while the process
 * was down releases nothing early).
 *
 * Time: the store reads no clock. The STORE_BATCH schedule is kept in the caller's milliseconds:
 * store_commit and store_sync_due_ms take `now_ms` from the same clock (the server passes its
 * cached loop time), which must not go backwards.
 */
#ifndef SLUICE_STORE_STORE_H
#define SLUICE_STORE_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "sluice/engine.h"

typedef enum store_durability {
    STORE_ALWAYS = 0,
    STORE_BATCH,
    STORE_NONE,
} store_durability;

typedef struct store_options {
    const char *dir; /* data directory (created if missing); ignored for STORE_NONE */
    store_durability durability;
    int64_t batch_ms; /* STORE_BATCH: fsync interval; default 100 */
    int fault_vfs;    /* nonzero: file I/O through the "sluice-fault" VFS (store/faultvfs.h), as
                         the environment variable SLUICE_FAULT_VFS=1 also asks; tests only */
} store_options;

void store_options_init(store_options *o); /* ./data, ALWAYS, 100 ms, no fault VFS */

/* Parses "always", "batch" or "none". Returns 0 or SLUICE_EINVAL. */
int store_durability_parse(const char *text, store_durability *out);

typedef struct store store;

/* Callbacks of store_load, each returning 0 to go on or an error to stop the load with. */
typedef struct store_loader {
    int (*task)(const sluice_task_record *r, void *arg);
    int (*key)(const char *limit, const char *key, size_t keylen, const void *state, size_t len,
               void *arg);
    int (*limit)(const char *name, const char *spec, void *arg);
    int (*recurring)(const sluice_recurring_spec *spec, int64_t runs, int64_t skipped, void *arg);
    int (*meta)(const char *name, int64_t value, void *arg);
} store_loader;

/* Opens (creating if needed) the store described by o. Returns 0 and *out, or an error with a
 * one-line message (directory not writable, database corrupt, locked by another process). */
int store_open(const store_options *o, store **out, char *msg, size_t msglen);

/* Closes the store (committing nothing: an open transaction is rolled back). Accepts NULL. */
void store_close(store *s);

/* Reads everything back, in the order: meta, limits, recurring, keys, tasks (by id). Pointers
 * passed to the callbacks are borrowed, valid during the callback only; byte strings (payloads,
 * keys, states) are followed by a NUL not counted in their length. Callbacks must not call the
 * store. Returns 0, the first callback error, or a store error. */
int store_load(store *s, const store_loader *cb, void *arg);

/* A put or delete outside a transaction returns SLUICE_ESTATE. A put or delete that fails rolls
 * the whole transaction back: every later call returns the same error until store_commit (which
 * returns it too) or store_rollback. Meta names starting with "store." are the backend's own
 * (SLUICE_EINVAL) and store_load does not report them. Errors: SLUICE_EINVAL, SLUICE_ESTATE,
 * SLUICE_ENOMEM, SLUICE_EBUSY (locked), and SLUICE_EIO for I/O errors (store_error says). */
int store_begin(store *s);
int store_put_task(store *s, const sluice_task_record *r);
int store_del_task(store *s, uint64_t id);
int store_put_key(store *s, const char *limit, const char *key, size_t keylen, const void *state,
                  size_t len);
int store_del_key(store *s, const char *limit, const char *key, size_t keylen);
int store_del_limit_keys(store *s, const char *limit); /* all keys of a limit (LIMIT.RESET) */
int store_put_limit(store *s, const char *name, const char *spec);
int store_del_limit(store *s, const char *name);
int store_put_recurring(store *s, const sluice_recurring_spec *spec, int64_t runs, int64_t skipped);
int store_del_recurring(store *s, const char *name);
int store_put_meta(store *s, const char *name, int64_t value);

/* Commits the transaction as the durability mode promises (see above). now_ms is the caller's
 * time: with STORE_BATCH, the first commit after a sync starts the batch_ms countdown there.
 * Returns 0, or an error (the transaction was rolled back) with store_error() explaining it. */
int store_commit(store *s, int64_t now_ms);

/* Rolls back the open transaction, if any. */
void store_rollback(store *s);

/* The last error's one-line message ("disk full", "fsync failed: I/O error", ...). */
const char *store_error(const store *s);

/* Milliseconds until a STORE_BATCH store wants store_sync, or -1 when nothing is pending.
 * now_ms is on the clock given to store_commit. */
int64_t store_sync_due_ms(const store *s, int64_t now_ms);

/* STORE_BATCH: makes everything committed so far durable (fsync). Returns 0 or an error. */
int store_sync(store *s);

/* Runs the backend's own integrity check. Returns 0, or SLUICE_EINVAL with msg. */
int store_check(store *s, char *msg, size_t msglen);

#endif
