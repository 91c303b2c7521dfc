/* SPDX-License-Identifier: MIT */
/*
 * The store's front: the functions of store.h, which check the transaction state and then
 * dispatch to a backend through its struct store_ops (store_impl.h). The backends are SQLite
 * (store_sqlite.c) and `none`, defined here, whose every call succeeds and stores nothing
 * (STORE_NONE: memory only). Redis and PostgreSQL backends would be one more table each.
 *
 * Invariants:
 * - A transaction is NONE (closed), OPEN, or FAILED: a put that failed rolled the backend back,
 *   and every later put returns its error until store_commit (which returns it too) or
 *   store_rollback closes it. A failed transaction never reaches the backend's commit, so the
 *   caller cannot report success for half of one.
 * - The front keeps the STORE_BATCH bookkeeping (is a sync due, since when) so every backend
 *   gets the same schedule, on the caller's clock (store_commit's now_ms: the store reads none);
 *   store_sync keeps the commits pending when the backend's sync fails, and the next store_sync
 *   tries again.
 * - The last error's message lives in the front (s->err), whichever layer produced it.
 */
#include "store/store.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "sluice/error.h"
#include "store/store_impl.h"

enum txn_state {
    TXN_NONE = 0, /* no transaction */
    TXN_OPEN,     /* begun, every put so far succeeded */
    TXN_FAILED,   /* a put failed: rolled back, waiting for commit or rollback */
};

struct store {
    const struct store_ops *ops; /* the backend */
    void *impl;                  /* the backend's state */
    store_durability durability;
    int64_t batch_ms;          /* STORE_BATCH: the longest a commit waits for its sync */
    enum txn_state txn;        /* see above */
    int txn_rc;                /* TXN_FAILED: the error that failed it */
    int unsynced;              /* STORE_BATCH: commits since the last successful sync */
    int64_t unsynced_since_ms; /* the caller's now_ms at the first of them (store_commit) */
    char err[256];             /* the last error, one line */
};

/* ---- The `none` backend ---------------------------------------------------------------- */

static int none_open(const store_options *o, void **impl, char *msg, size_t msglen)
{
    (void)o;
    (void)msg;
    (void)msglen;
    *impl = NULL;
    return 0;
}

static void none_close(void *impl)
{
    (void)impl;
}

static int none_load(void *impl, const store_loader *cb, void *arg)
{
    (void)impl;
    (void)cb;
    (void)arg;
    return 0;
}

static int none_void(void *impl)
{
    (void)impl;
    return 0;
}

static void none_rollback(void *impl)
{
    (void)impl;
}

static int none_put_task(void *impl, const sluice_task_record *r)
{
    (void)impl;
    (void)r;
    return 0;
}

static int none_del_task(void *impl, uint64_t id)
{
    (void)impl;
    (void)id;
    return 0;
}

static int none_put_key(void *impl, const char *limit, const char *key, size_t keylen,
                        const void *state, size_t len)
{
    (void)impl;
    (void)limit;
    (void)key;
    (void)keylen;
    (void)state;
    (void)len;
    return 0;
}

static int none_del_key(void *impl, const char *limit, const char *key, size_t keylen)
{
    (void)impl;
    (void)limit;
    (void)key;
    (void)keylen;
    return 0;
}

static int none_name(void *impl, const char *name)
{
    (void)impl;
    (void)name;
    return 0;
}

static int none_put_limit(void *impl, const char *name, const char *spec)
{
    (void)impl;
    (void)name;
    (void)spec;
    return 0;
}

static int none_put_recurring(void *impl, const sluice_recurring_spec *spec, int64_t runs,
                              int64_t skipped)
{
    (void)impl;
    (void)spec;
    (void)runs;
    (void)skipped;
    return 0;
}

static int none_put_meta(void *impl, const char *name, int64_t value)
{
    (void)impl;
    (void)name;
    (void)value;
    return 0;
}

static int none_check(void *impl, char *msg, size_t msglen)
{
    (void)impl;
    if (msglen)
        msg[0] = '\0';
    return 0;
}

static const char *none_error(const void *impl)
{
    (void)impl;
    return "";
}

static const struct store_ops none_ops = {
    .name = "none",
    .open = none_open,
    .close = none_close,
    .load = none_load,
    .begin = none_void,
    .put_task = none_put_task,
    .del_task = none_del_task,
    .put_key = none_put_key,
    .del_key = none_del_key,
    .del_limit_keys = none_name,
    .put_limit = none_put_limit,
    .del_limit = none_name,
    .put_recurring = none_put_recurring,
    .del_recurring = none_name,
    .put_meta = none_put_meta,
    .commit = none_void,
    .rollback = none_rollback,
    .sync = none_void,
    .check = none_check,
    .error = none_error,
};

/* ---- Options --------------------------------------------------------------------------- */

void store_options_init(store_options *o)
{
    memset(o, 0, sizeof *o);
    o->dir = "./data";
    o->durability = STORE_ALWAYS;
    o->batch_ms = 100;
    o->fault_vfs = 0;
}

int store_durability_parse(const char *text, store_durability *out)
{
    static const struct {
        const char *name;
        store_durability d;
    } names[] = {{"always", STORE_ALWAYS}, {"batch", STORE_BATCH}, {"none", STORE_NONE}};

    if (!text || !out)
        return SLUICE_EINVAL;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(text, names[i].name) == 0) {
            *out = names[i].d;
            return 0;
        }
    }
    return SLUICE_EINVAL;
}

/* ---- Helpers --------------------------------------------------------------------------- */

static int set_err(store *s, int rc, const char *text)
{
    snprintf(s->err, sizeof s->err, "%s", text);
    return rc;
}

/* Copies the backend's message after one of its calls failed with rc. */
static int backend_err(store *s, int rc)
{
    const char *m = s->ops->error(s->impl);

    return set_err(s, rc, m && m[0] ? m : sluice_strerror(rc));
}

/* Returns 0 when a put may go to the backend, or the error to return instead. */
static int txn_check(store *s)
{
    if (!s)
        return SLUICE_EINVAL;
    if (s->txn == TXN_FAILED)
        return s->txn_rc;
    if (s->txn != TXN_OPEN)
        return set_err(s, SLUICE_ESTATE, "no transaction is open");
    return 0;
}

/* Fails the open transaction with rc (message already set): rolls the backend back. */
static int txn_fail(store *s, int rc)
{
    if (s->txn == TXN_OPEN)
        s->ops->rollback(s->impl);
    s->txn = TXN_FAILED;
    s->txn_rc = rc;
    return rc;
}

/* The result of a backend put: a failure fails the transaction. */
static int txn_result(store *s, int rc)
{
    if (rc == 0)
        return 0;
    backend_err(s, rc);
    return txn_fail(s, rc);
}

/* An invalid argument to a put fails the transaction like any other put error: the caller
 * meant that change to be in it. */
static int txn_invalid(store *s, const char *what)
{
    set_err(s, SLUICE_EINVAL, what);
    return txn_fail(s, SLUICE_EINVAL);
}

/* ---- Life ------------------------------------------------------------------------------ */

int store_open(const store_options *o, store **out, char *msg, size_t msglen)
{
    store *s;
    int rc;

    if (msglen)
        msg[0] = '\0';
    if (!out)
        return SLUICE_EINVAL;
    *out = NULL;
    if (!o || (unsigned)o->durability > (unsigned)STORE_NONE ||
        (o->durability != STORE_NONE && (!o->dir || !o->dir[0]))) {
        snprintf(msg, msglen, "invalid store options");
        return SLUICE_EINVAL;
    }
    if (o->durability == STORE_BATCH && o->batch_ms <= 0) {
        snprintf(msg, msglen, "batch interval must be positive");
        return SLUICE_EINVAL;
    }
    s = alloc_calloc(1, sizeof *s);
    if (!s) {
        snprintf(msg, msglen, "out of memory");
        return SLUICE_ENOMEM;
    }
    s->ops = o->durability == STORE_NONE ? &none_ops : &store_sqlite_ops;
    s->durability = o->durability;
    s->batch_ms = o->batch_ms;
    rc = s->ops->open(o, &s->impl, msg, msglen);
    if (rc) {
        alloc_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

void store_close(store *s)
{
    if (!s)
        return;
    s->ops->close(s->impl);
    alloc_free(s);
}

int store_load(store *s, const store_loader *cb, void *arg)
{
    int rc;

    if (!s || !cb)
        return SLUICE_EINVAL;
    rc = s->ops->load(s->impl, cb, arg);
    if (rc)
        backend_err(s, rc);
    return rc;
}

/* ---- Transactions ---------------------------------------------------------------------- */

int store_begin(store *s)
{
    int rc;

    if (!s)
        return SLUICE_EINVAL;
    if (s->txn == TXN_OPEN)
        return set_err(s, SLUICE_ESTATE, "a transaction is already open");
    s->txn = TXN_NONE; /* a failed one was rolled back already */
    rc = s->ops->begin(s->impl);
    if (rc)
        return backend_err(s, rc);
    s->txn = TXN_OPEN;
    return 0;
}

int store_put_task(store *s, const sluice_task_record *r)
{
    int rc = txn_check(s);

    if (rc != 0)
        return rc;
    if (!r || !r->type || (!r->payload && r->payload_len) || (!r->key && r->key_len) ||
        (!r->task_key && r->task_key_len))
        return txn_invalid(s, "invalid task record");
    return txn_result(s, s->ops->put_task(s->impl, r));
}

int store_del_task(store *s, uint64_t id)
{
    int rc = txn_check(s);

    if (rc != 0)
        return rc;
    return txn_result(s, s->ops->del_task(s->impl, id));
}

int store_put_key(store *s, const char *limit, const char *key, size_t keylen, const void *state,
                  size_t len)
{
    int rc = txn_check(s);

    if (rc != 0)
        return rc;
    if (!limit || (!key && keylen) || (!state && len))
        return txn_invalid(s, "invalid key state");
    return txn_result(
        s, s->ops->put_key(s->impl, limit, key ? key : "", keylen, state ? state : "", len));
}

int store_del_key(store *s, const char *limit, const char *key, size_t keylen)
{
    int rc = txn_check(s);

    if (rc != 0)
        return rc;
    if (!limit || (!key && keylen))
        return txn_invalid(s, "invalid key");
    return txn_result(s, s->ops->del_key(s->impl, limit, key ? key : "", keylen));
}

int store_del_limit_keys(store *s, const char *limit)
{
    int rc = txn_check(s);

    if (rc != 0)
        return rc;
    if (!limit)
        return txn_invalid(s, "invalid limit name");
    return txn_result(s, s->ops->del_limit_keys(s->impl, limit));
}

int store_put_limit(store *s, const char *name, const char *spec)
{
    int rc = txn_check(s);

    if (rc != 0)
        return rc;
    if (!name || !spec)
        return txn_invalid(s, "invalid limit");
    return txn_result(s, s->ops->put_limit(s->impl, name, spec));
}

int store_del_limit(store *s, const char *name)
{
    int rc = txn_check(s);

    if (rc != 0)
        return rc;
    if (!name)
        return txn_invalid(s, "invalid limit name");
    return txn_result(s, s->ops->del_limit(s->impl, name));
}

int store_put_recurring(store *s, const sluice_recurring_spec *spec, int64_t runs, int64_t skipped)
{
    int rc = txn_check(s);

    if (rc != 0)
        return rc;
    if (!spec || !spec->name || !spec->type || (!spec->payload && spec->payload_len) ||
        (!spec->key && spec->key_len))
        return txn_invalid(s, "invalid recurring series");
    return txn_result(s, s->ops->put_recurring(s->impl, spec, runs, skipped));
}

int store_del_recurring(store *s, const char *name)
{
    int rc = txn_check(s);

    if (rc != 0)
        return rc;
    if (!name)
        return txn_invalid(s, "invalid recurring name");
    return txn_result(s, s->ops->del_recurring(s->impl, name));
}

int store_put_meta(store *s, const char *name, int64_t value)
{
    int rc = txn_check(s);

    if (rc != 0)
        return rc;
    if (!name || strncmp(name, "store.", 6) == 0)
        return txn_invalid(s, "invalid meta name (\"store.\" names are reserved)");
    return txn_result(s, s->ops->put_meta(s->impl, name, value));
}

int store_commit(store *s, int64_t now_ms)
{
    int rc;

    if (!s)
        return SLUICE_EINVAL;
    if (s->txn == TXN_FAILED) {
        s->txn = TXN_NONE;
        return s->txn_rc;
    }
    if (s->txn != TXN_OPEN)
        return set_err(s, SLUICE_ESTATE, "no transaction is open");
    s->txn = TXN_NONE;
    rc = s->ops->commit(s->impl);
    if (rc)
        return backend_err(s, rc);
    if (s->durability == STORE_BATCH && !s->unsynced) {
        s->unsynced = 1;
        s->unsynced_since_ms = now_ms;
    }
    return 0;
}

void store_rollback(store *s)
{
    if (!s)
        return;
    if (s->txn == TXN_OPEN)
        s->ops->rollback(s->impl);
    s->txn = TXN_NONE;
}

const char *store_error(const store *s)
{
    return s ? s->err : "no store";
}

/* ---- Durability ------------------------------------------------------------------------ */

int64_t store_sync_due_ms(const store *s, int64_t now_ms)
{
    int64_t due;

    if (!s || s->durability != STORE_BATCH || !s->unsynced)
        return -1;
    due = s->unsynced_since_ms + s->batch_ms - now_ms;
    if (due < 0)
        return 0;
    return due > s->batch_ms ? s->batch_ms : due;
}

int store_sync(store *s)
{
    int rc;

    if (!s)
        return SLUICE_EINVAL;
    if (s->durability != STORE_BATCH || !s->unsynced)
        return 0;
    rc = s->ops->sync(s->impl);
    if (rc)
        return backend_err(s, rc);
    s->unsynced = 0;
    return 0;
}

int store_check(store *s, char *msg, size_t msglen)
{
    int rc;

    if (msglen)
        msg[0] = '\0';
    if (!s)
        return SLUICE_EINVAL;
    rc = s->ops->check(s->impl, msg, msglen);
    if (rc)
        set_err(s, rc, msglen && msg[0] ? msg : sluice_strerror(rc));
    return rc;
}
