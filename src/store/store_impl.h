/* SPDX-License-Identifier: MIT */
/*
 * The backend interface of the store: a table of functions that the front (store.c) calls after
 * it has checked the transaction state, so a backend sees only well-formed sequences
 * (begin, puts, then commit or rollback; load, sync and check outside of that or inside).
 *
 * Invariants a backend keeps:
 * - a failing put or commit leaves no transaction open (the backend rolls back itself);
 * - error() describes the last failure in one line and stays valid until the next call;
 * - the backend allocates its own memory through alloc_malloc (the libraries it uses may have
 *   their own allocators).
 */
#ifndef SLUICE_STORE_STORE_IMPL_H
#define SLUICE_STORE_STORE_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

struct store_ops {
    const char *name; /* "sqlite", "none" */
    /* Opens the backend for o; *impl is its state. Returns 0 or an error with msg. */
    int (*open)(const store_options *o, void **impl, char *msg, size_t msglen);
    void (*close)(void *impl); /* rolls back an open transaction; impl may be NULL */
    int (*load)(void *impl, const store_loader *cb, void *arg);
    int (*begin)(void *impl);
    int (*put_task)(void *impl, const sluice_task_record *r);
    int (*del_task)(void *impl, uint64_t id);
    int (*put_key)(void *impl, const char *limit, const char *key, size_t keylen, const void *state,
                   size_t len);
    int (*del_key)(void *impl, const char *limit, const char *key, size_t keylen);
    int (*del_limit_keys)(void *impl, const char *limit);
    int (*put_limit)(void *impl, const char *name, const char *spec);
    int (*del_limit)(void *impl, const char *name);
    int (*put_recurring)(void *impl, const sluice_recurring_spec *spec, int64_t runs,
                         int64_t skipped);
    int (*del_recurring)(void *impl, const char *name);
    int (*put_meta)(void *impl, const char *name, int64_t value);
    int (*commit)(void *impl); /* durable as the mode opened with promises, or rolled back */
    void (*rollback)(void *impl);
    int (*sync)(void *impl); /* makes every commit so far durable */
    int (*check)(void *impl, char *msg, size_t msglen);
    const char *(*error)(const void *impl); /* the last failure, one line */
};

/* The SQLite backend (store_sqlite.c). */
extern const struct store_ops store_sqlite_ops;

#endif
