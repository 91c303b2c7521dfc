/* SPDX-License-Identifier: MIT */
/*
 * Recovery at start: everything the store holds, read back into a fresh engine that already has
 * the configuration file's limits and types (see durable_open for the order and why).
 *
 * Nothing read is ever deleted because it cannot be used now: a task or a series whose type or
 * limit is gone stays in the store (logged, counted), so that a configuration fixed later brings
 * it back; its id is reserved so that no new task takes it. Only limiter key state is dropped
 * when it cannot apply (its limit is gone, or the blob is of another kind): it is soft state, and
 * at worst such a key starts as its start_empty setting says.
 *
 * Failures that stop the start: the store cannot be read (I/O, corruption) and out of memory.
 * Everything else is logged at warning level, the first WARN_DETAILS of a kind in detail.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "server/durable_impl.h"
#include "server/log.h"
#include "sluice/error.h"
#include "sluice/policy_spec.h"

/* Refusals of one kind logged one by one before they are only counted. */
#define WARN_DETAILS 20

typedef struct loader {
    durable *d;
    server *s;
    int clock_set;    /* the clock floor was applied */
    int64_t floor_ns; /* meta clock_ns */
    uint64_t next_id; /* meta next_id */
    uint64_t max_id;  /* the largest task id read */
    char *msg;        /* where a fatal error is described */
    size_t msglen;
} loader;

/* The server clock for restoring, raised to the stored floor on first use (the meta rows come
 * first, before anything needs the time). */
static int64_t load_now(loader *l)
{
    server *s = l->s;

    if (!l->clock_set) {
        l->clock_set = 1;
        s->now_valid = 0;
        if (server_now(s) < l->floor_ns) {
            log_warn("persistence: the wall clock reads %" PRId64 " ms before the last time "
                     "stored; the server clock starts from the stored time instead",
                     (l->floor_ns - server_now(s)) / SLUICE_NS_PER_MS);
            s->clock_offset_ns += l->floor_ns - server_now(s);
            s->now_valid = 0;
        }
    }
    return server_now(s);
}

static int on_meta(const char *name, int64_t value, void *arg)
{
    loader *l = arg;

    if (strcmp(name, META_CLOCK) == 0)
        l->floor_ns = value;
    else if (strcmp(name, META_NEXT_ID) == 0 && value > 0)
        l->next_id = (uint64_t)value;
    return 0;
}

static int fatal(loader *l, int rc, const char *what)
{
    snprintf(l->msg, l->msglen, "recovery: %s: %s", what, sluice_strerror(rc));
    return rc;
}

/* A runtime definition (LIMIT.SET) over the file's, or a tombstone (LIMIT.DEL): spec "". */
static int apply_limit(const char *name, const char *spec, void *arg)
{
    loader *l = arg;
    durable *d = l->d;
    sluice_engine *e = l->s->engine;
    sluice_limit_policy p;
    const sluice_limit_policy *old;
    sluice_limit_mode mode;
    char why[512];
    int64_t now = load_now(l);
    int rc;

    if (spec[0] == '\0') {
        rc = sluice_engine_del_limit(e, name, now);
        if (rc == SLUICE_ESTATE)
            log_warn("persistence: limit \"%s\" was removed by LIMIT.DEL, but a task type of the "
                     "configuration uses it: it stays",
                     name);
        if (rc == 0 || rc == SLUICE_ENOTFOUND)
            d->rec.limits++;
        else
            d->rec.limits_failed++;
        return 0;
    }
    why[0] = '\0';
    if (sluice_spec_parse_mode(spec, &mode)) {
        /* LIMIT.SET name mode=...: of a limit the file declares (a tiered one), over its
         * version there. */
        rc = sluice_engine_set_limit_mode(e, name, mode, now);
        if (rc == SLUICE_ENOTFOUND)
            snprintf(why, sizeof why, "no limit of that name is declared");
        goto applied;
    }
    rc = sluice_spec_parse_policy(spec, &p, why, sizeof why);
    if (rc == SLUICE_ENOMEM)
        return fatal(l, rc, "a stored limit");
    if (rc == 0) {
        p.name = alloc_memdup0(name, strlen(name));
        if (!p.name) {
            sluice_limit_policy_clear(&p);
            return fatal(l, SLUICE_ENOMEM, "a stored limit");
        }
        old = sluice_engine_get_limit(e, name, NULL);
        rc = old && server_policy_eq(old, &p) ? 0
             : old && server_policy_mode_only(old, &p)
                 ? sluice_engine_set_limit_mode(e, name, p.mode, now)
                 : sluice_engine_set_limit(e, &p, now, why, sizeof why);
        sluice_limit_policy_clear(&p);
        if (rc == SLUICE_ENOMEM)
            return fatal(l, rc, "a stored limit");
    }
applied:
    if (rc != 0) {
        d->rec.limits_failed++;
        log_warn("persistence: the stored LIMIT.SET %s \"%s\" is refused now (%s); the "
                 "configuration's version (if any) applies",
                 name, spec, why[0] ? why : sluice_strerror(rc));
        return 0;
    }
    d->rec.limits++;
    return 0;
}

static int on_limit(const char *name, const char *spec, void *arg)
{
    loader *l = arg;
    int rc = apply_limit(name, spec, arg);

    /* Applying it records a replacement in the engine's feed, which drops the stored row: record
     * the row as it is over that (the first commit rewrites it unchanged). */
    if (rc == 0 &&
        sluice_engine_changes_limit_def(l->s->engine, name, spec[0] ? spec : NULL) == SLUICE_ENOMEM)
        rc = fatal(l, SLUICE_ENOMEM, "a stored limit");
    return rc;
}

static int on_recurring(const sluice_recurring_spec *spec, int64_t runs, int64_t skipped, void *arg)
{
    loader *l = arg;
    durable *d = l->d;
    char why[256] = "";
    int rc = sluice_engine_restore_recurring(l->s->engine, spec, runs, skipped, load_now(l), why,
                                             sizeof why);

    if (rc == SLUICE_ENOMEM)
        return fatal(l, rc, "a recurring series");
    if (rc != 0) {
        if (d->rec.series_failed++ < WARN_DETAILS)
            log_warn("persistence: recurring series \"%s\" cannot be restored (%s); it stays in "
                     "the store",
                     spec->name, why[0] ? why : sluice_strerror(rc));
        return 0;
    }
    d->rec.series++;
    return 0;
}

static int on_key(const char *id, const char *key, size_t keylen, const void *state, size_t len,
                  void *arg)
{
    loader *l = arg;
    durable *d = l->d;
    sluice_limit *lim = sluice_engine_limit_by_id(l->s->engine, id);
    int rc;

    d->rec.keys++;
    if (!lim) {
        /* Its limit (or tier) is gone: forget what is stored for it. */
        d->rec.keys_dropped++;
        return sluice_engine_changes_forget_keys(l->s->engine, id) == SLUICE_OK
                   ? 0
                   : fatal(l, SLUICE_ENOMEM, "a key state");
    }
    /* Every key read is rewritten by the first commit: deleted unless the import kept it (a kept
     * key is recorded as changed by its limit, which the feed tracks, and its state drained at
     * the first pull replaces the deletion). So states that expired while the process was down
     * leave the store. */
    if (sluice_engine_changes_forget_key(l->s->engine, id, key, keylen) != SLUICE_OK)
        return fatal(l, SLUICE_ENOMEM, "a key state");
    rc = sluice_limit_import(lim, key, keylen, state, len, load_now(l));
    if (rc == SLUICE_ENOMEM)
        return fatal(l, rc, "a key state");
    if (rc != 0) {
        if (d->rec.keys_dropped++ < WARN_DETAILS)
            log_warn("persistence: a key state of limit %s is dropped: %s", id,
                     rc == SLUICE_EBUSY ? "its key table is full" : "not a state of this limit");
    }
    return 0;
}

static int on_task(const sluice_task_record *r, void *arg)
{
    loader *l = arg;
    durable *d = l->d;
    sluice_submit_error err;
    int rc;

    if (r->id > l->max_id)
        l->max_id = r->id;
    rc = sluice_engine_restore_task(l->s->engine, r, load_now(l), &err);
    if (rc == SLUICE_ENOMEM)
        return fatal(l, rc, "a task");
    if (rc != 0) {
        if (d->rec.unrestorable++ < WARN_DETAILS)
            log_warn("persistence: task %" PRIu64 " (type \"%s\", %s) cannot be restored: %s; it "
                     "stays in the store",
                     r->id, r->type, sluice_task_state_name(r->state),
                     err.message[0] ? err.message : sluice_strerror(rc));
        return 0;
    }
    d->rec.tasks++;
    if (r->state == SLUICE_TASK_DONE || r->state == SLUICE_TASK_FAILED ||
        r->state == SLUICE_TASK_CANCELLED)
        d->rec.finished++;
    else if (r->state == SLUICE_TASK_RUNNING && r->lease_until_ns > server_now(l->s))
        d->rec.running++;
    return 0;
}

/* Times the load for its log line only; nothing is decided on it (server.h, "The clock"). */
static int64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int durable_load(durable *d, char *msg, size_t msglen)
{
    loader l = {.d = d, .s = d->srv, .msg = msg, .msglen = msglen};
    store_loader cb = {.task = on_task,
                       .key = on_key,
                       .limit = on_limit,
                       .recurring = on_recurring,
                       .meta = on_meta};
    int64_t t0 = mono_ms();
    int rc;

    msg[0] = '\0';
    rc = store_load(d->st, &cb, &l);
    if (rc != 0) {
        if (!msg[0])
            snprintf(msg, msglen, "data directory %s: cannot read the store: %s",
                     d->srv->opt.data_dir, store_error(d->st));
        return rc;
    }
    (void)load_now(&l); /* an empty store still applies nothing, but sets the clock base */
    sluice_engine_reserve_ids(d->srv->engine, l.max_id > l.next_id ? l.max_id : l.next_id);
    d->rec.clock_floor_ns = l.floor_ns;
    d->srv->now_valid = 0;
    d->rec.ms = mono_ms() - t0;
    if (d->rec.unrestorable > WARN_DETAILS)
        log_warn("persistence: %" PRIu64 " tasks in all cannot be restored (kept in the store)",
                 d->rec.unrestorable);
    log_info("persistence: %s, durability %s: recovered %" PRIu64 " tasks (%" PRIu64
             " running, %" PRIu64 " finished), %" PRIu64 " unrestorable; %" PRIu64
             " key states (%" PRIu64 " dropped), %" PRIu64 " limit changes, %" PRIu64
             " recurring series, in %" PRId64 " ms",
             d->srv->opt.data_dir,
             d->mode == STORE_ALWAYS  ? "always"
             : d->mode == STORE_BATCH ? "batch"
                                      : "none",
             d->rec.tasks, d->rec.running, d->rec.finished, d->rec.unrestorable, d->rec.keys,
             d->rec.keys_dropped, d->rec.limits, d->rec.series, d->rec.ms);
    return 0;
}
