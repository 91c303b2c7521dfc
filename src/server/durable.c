/* SPDX-License-Identifier: MIT */
/*
 * Durability of the server (see durable.h): a copier from the engine's change feed
 * (sluice_engine_changes) to the store, one transaction per loop turn, held replies and their
 * release or failure, the limiter-key timer, the batch sync timer, the final commit at a graceful
 * stop, and INFO's persistence section. Recovery at start is durable_load.c.
 *
 * Invariants:
 * - a held reply leaves only after the commit that follows it: released when that commit
 *   succeeded, replaced by -IOERR when it failed (the server never says "done" for a change that
 *   may not be durable; the change stays in memory and in the feed, and the next commit retries
 *   it);
 * - the feed's batch is confirmed (sluice_engine_changes_done) only after a successful commit,
 *   so nothing recorded is ever dropped (out of memory while recording aside, which the engine
 *   counts);
 * - a failed fsync is never retried as if it had proved anything: the next commit is a new
 *   transaction that writes the whole unconfirmed batch (the union of what failed and what
 *   changed since) again.
 *
 * Commit errors are logged when they start and when they stop (not once per turn), so a full
 * disk does not flood the log.
 */
#include "server/durable.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "server/durable_impl.h"
#include "server/log.h"
#include "sluice/error.h"

/* ---- The clock --------------------------------------------------------------------------- */

/* Decisions take the server's cached loop time (server_now). The clock is read here only to fix
 * server_now's offset at start, and to time a commit for the store_commit histogram: a duration
 * inside one call, which the loop time (constant during the call) cannot measure. */
static int64_t read_clock(clockid_t id)
{
    struct timespec ts;

    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * SLUICE_NS_PER_SEC + (int64_t)ts.tv_nsec;
}

int64_t durable_clock_offset(int64_t floor_ns)
{
    int64_t mono = read_clock(CLOCK_MONOTONIC), wall = read_clock(CLOCK_REALTIME);

    return (wall > floor_ns ? wall : floor_ns) - mono;
}

/* ---- Recording changes ------------------------------------------------------------------- */

static durable *state_of(const server *s)
{
    return s ? s->durable_state : NULL;
}

/* A runtime limit definition could not be recorded for lack of memory (the engine counts it as
 * lost): it will not be written unless it changes again. Rare and logged. */
static void lost(const char *what)
{
    log_error("persistence: out of memory recording a change (%s); it is not written until it "
              "changes again",
              what);
}

void durable_limit_set(server *s, const char *name, const char *spec)
{
    durable *d = state_of(s);

    if (!d || !d->st)
        return;
    if (sluice_engine_changes_limit_def(s->engine, name, spec) == SLUICE_ENOMEM)
        lost("a limit definition");
}

void durable_limit_del(server *s, const char *name)
{
    durable *d = state_of(s);

    if (!d || !d->st)
        return;
    /* The engine recorded the removal (the stored row is dropped). A limit the file declares
     * needs a tombstone over that, or the file brings it back at the next start. */
    if (s->has_config && sluice_config_find_limit(&s->config, name) &&
        sluice_engine_changes_limit_def(s->engine, name, NULL) == SLUICE_ENOMEM)
        lost("a limit removal");
}

/* ---- Held replies ------------------------------------------------------------------------ */

uint64_t durable_changes(const server *s)
{
    const durable *d = state_of(s);

    return d && d->st ? sluice_engine_changes_seq(s->engine) : 0;
}

void durable_after_command(conn *c, uint64_t before, size_t mark)
{
    durable *d = state_of(c->srv);

    if (!d || !d->st || sluice_engine_changes_seq(c->srv->engine) == before || c->out.failed ||
        c->out.len <= mark)
        return;
    if (d->nheld == d->held_cap) {
        size_t cap = d->held_cap ? d->held_cap * 2 : 64;
        durable_held *h = sluice_realloc(d->held, cap * sizeof *h);

        if (!h) {
            /* Cannot hold it: make the change durable now instead, before the reply can go. */
            durable_commit(d);
            if (d->last_ok)
                return;
            c->out.len = mark; /* its reply becomes the error */
            resp_error(conn_out(c), "IOERR", "%s", d->last_error);
            return;
        }
        d->held = h;
        d->held_cap = cap;
    }
    d->held[d->nheld++] = (durable_held){c, mark, c->out.len};
    conn_hold(c);
    /* Another round of the turn's end, for a client resumed there after the commit. */
    server_signal_ready(c->srv);
}

void durable_conn_closed(conn *c)
{
    durable *d = state_of(c->srv);

    if (!d)
        return;
    for (size_t i = 0; i < d->nheld; i++)
        if (d->held[i].c == c)
            d->held[i].c = NULL;
}

static int held_cmp(const void *a, const void *b)
{
    const durable_held *x = a, *y = b;

    if (x->c != y->c)
        return (uintptr_t)x->c < (uintptr_t)y->c ? -1 : 1;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* Replaces the held ranges h[0..n) of one client by the error line err (errlen bytes). Returns
 * 0, or -1 when out of memory. */
static int rewrite_client(conn *c, const durable_held *h, size_t n, const char *err, size_t errlen)
{
    resp_writer *w = conn_out(c);
    size_t len = w->len, at = 0, o = 0;
    char *buf;

    for (size_t i = 0; i < n; i++)
        len = len - (h[i].end - h[i].start) + errlen;
    buf = sluice_malloc(len ? len : 1);
    if (!buf)
        return -1;
    for (size_t i = 0; i < n; i++) {
        memcpy(buf + o, w->buf + at, h[i].start - at);
        o += h[i].start - at;
        memcpy(buf + o, err, errlen);
        o += errlen;
        at = h[i].end;
    }
    memcpy(buf + o, w->buf + at, w->len - at);
    sluice_free(w->buf);
    w->buf = buf;
    w->len = w->cap = len;
    return 0;
}

/* Turns every held reply into -IOERR reason. */
static void fail_held(durable *d)
{
    char err[320];
    int n = snprintf(err, sizeof err, "-IOERR %s\r\n", d->last_error[0] ? d->last_error : "?");
    size_t errlen = n > 0 && (size_t)n < sizeof err ? (size_t)n : sizeof err - 1;

    /* The message is one line already (store errors are); keep it so whatever it holds. */
    for (size_t i = 6; i + 2 < errlen; i++)
        if (err[i] == '\r' || err[i] == '\n')
            err[i] = ' ';
    memcpy(err + errlen - 2, "\r\n", 2);
    qsort(d->held, d->nheld, sizeof *d->held, held_cmp);
    for (size_t i = 0; i < d->nheld;) {
        size_t j = i;

        while (j < d->nheld && d->held[j].c == d->held[i].c)
            j++;
        if (d->held[i].c) {
            conn *c = d->held[i].c;

            if (rewrite_client(c, &d->held[i], j - i, err, errlen) != 0) {
                log_error("client %" PRIu64 " %s closed: out of memory for its -IOERR replies",
                          c->id, c->addr);
                conn_close(c); /* clears its entries through durable_conn_closed */
            } else {
                d->ioerr_replies += j - i;
                for (size_t k = i; k < j; k++)
                    counters_reply(&d->srv->counters, err, errlen);
            }
        }
        i = j;
    }
}

/* Releases every held reply (the commit decided their fate). */
static void release_held(durable *d)
{
    /* conn_release may flush and close a client: take the list first. */
    size_t n = d->nheld;

    d->nheld = 0;
    for (size_t i = 0; i < n; i++)
        if (d->held[i].c)
            conn_release(d->held[i].c);
}

/* ---- Commits ----------------------------------------------------------------------------- */

static void arm_sync(durable *d);

/* Writes a batch of the engine's change feed and the meta inside an open transaction. Returns 0
 * or the error. The order is the feed's (see include/sluice/engine.h): definitions, purges, key
 * states, series, tasks. */
static int write_batch(durable *d, const sluice_changes *c)
{
    sluice_engine *e = d->srv->engine;
    store *st = d->st;
    const char *name, *spec, *id, *key;
    const void *state;
    size_t pos, keylen, len;
    sluice_limit_def_op op;
    uint64_t tid;
    int rc = 0;

    for (pos = 0; rc == 0 && sluice_changes_next_limit(c, &pos, &name, &op, &spec);) {
        if (op == SLUICE_LIMIT_DEF_SET)
            rc = store_put_limit(st, name, spec ? spec : "");
        else if (op == SLUICE_LIMIT_DEF_GONE)
            rc = store_put_limit(st, name, ""); /* a tombstone: removed again at start */
        else
            rc = store_del_limit(st, name);
    }
    for (pos = 0; rc == 0 && sluice_changes_next_purge(c, &pos, &id);)
        rc = store_del_limit_keys(st, id);
    for (pos = 0; rc == 0 && sluice_changes_next_key(c, &pos, &id, &key, &keylen, &state, &len);)
        rc = state ? store_put_key(st, id, key, keylen, state, len)
                   : store_del_key(st, id, key, keylen);
    for (pos = 0; rc == 0 && sluice_changes_next_series(c, &pos, &name);) {
        sluice_recurring_spec rs;
        int64_t runs, skipped;

        if (sluice_engine_recurring_state(e, name, &rs, &runs, &skipped) == SLUICE_OK)
            rc = store_put_recurring(st, &rs, runs, skipped);
        else
            rc = store_del_recurring(st, name);
    }
    for (pos = 0; rc == 0 && sluice_changes_next_task(c, &pos, &tid);) {
        sluice_task_record r;

        if (sluice_engine_export_task(e, tid, &r) == SLUICE_OK)
            rc = store_put_task(st, &r);
        else
            rc = store_del_task(st, tid);
    }
    if (rc == 0)
        rc = store_put_meta(st, META_CLOCK, server_now(d->srv));
    if (rc == 0)
        rc = store_put_meta(st, META_NEXT_ID, (int64_t)sluice_engine_last_id(e));
    return rc;
}

int durable_commit(durable *d)
{
    const sluice_changes *c;
    const char *why = NULL; /* a failure before the store was asked: its reason */
    int64_t t0;
    int rc;

    if (!d->st) {
        release_held(d);
        return 0;
    }
    /* The batch is the union of everything not yet confirmed: after a failed commit, what that
     * one tried is yielded again with what changed since. */
    rc = sluice_engine_changes(d->srv->engine, &c);
    t0 = read_clock(CLOCK_MONOTONIC);
    if (rc != 0) {
        why = "out of memory collecting the changes";
    } else {
        rc = store_begin(d->st);
        if (rc == 0)
            rc = write_batch(d, c);
        if (rc == 0)
            rc = store_commit(d->st, server_now(d->srv) / SLUICE_NS_PER_MS);
        else
            store_rollback(d->st);
    }
    prom_hist_observe(&d->srv->counters.store_commit,
                      (double)(read_clock(CLOCK_MONOTONIC) - t0) / 1e9);
    if (rc == 0) {
        d->commits++;
        d->last_commit_ns = server_now(d->srv);
        sluice_engine_changes_done(d->srv->engine); /* only now: the batch is durable */
        if (!d->last_ok)
            log_warn("persistence: commits succeed again (%" PRIu64 " failed so far)",
                     d->failed_commits);
        d->last_ok = 1;
        release_held(d);
        arm_sync(d);
        return 0;
    }
    d->failed_commits++;
    d->changes_at_failure = sluice_engine_changes_seq(d->srv->engine);
    snprintf(d->last_error, sizeof d->last_error, "%s", why ? why : store_error(d->st));
    if (d->last_ok)
        log_error("persistence: commit failed: %s; %zu replies get -IOERR, the changes stay in "
                  "memory and are written by the next commit",
                  d->last_error, d->nheld);
    d->last_ok = 0;
    fail_held(d);
    release_held(d);
    return rc;
}

/* Returns 1 when the feed holds a change a client may wait for (anything but key states). */
static int has_changes(const sluice_engine *e)
{
    sluice_changes_counts n;

    sluice_engine_changes_count(e, &n);
    return n.tasks || n.series || n.limits || n.purges;
}

/* Returns 1 when the feed holds anything to write, key states included (draining the limiters'
 * keys into it: pulling a batch without confirming it loses nothing). */
static int has_anything(durable *d)
{
    const sluice_changes *c;
    sluice_changes_counts n;

    if (sluice_engine_changes(d->srv->engine, &c) != SLUICE_OK)
        return 1; /* let the commit try, and say why it cannot */
    sluice_engine_changes_count(d->srv->engine, &n);
    return n.tasks || n.series || n.limits || n.purges || n.keys;
}

void durable_turn(server *s)
{
    durable *d = state_of(s);

    if (!d)
        return;
    if (!d->nheld) {
        if (!d->st || !has_changes(s->engine))
            return;
        /* After a failure, changes nobody waits for are retried by the key timer (every
         * DURABLE_KEYS_MS) rather than by every turn: a full disk must not cost THROTTLE a
         * failing transaction per turn. */
        if (!d->last_ok && sluice_engine_changes_seq(s->engine) == d->changes_at_failure)
            return;
    }
    durable_commit(d);
}

/* ---- Timers ------------------------------------------------------------------------------ */

/* Limiter state of decisions (THROTTLE, deliveries) that no task commit took along: written
 * every DURABLE_KEYS_MS, without holding anyone. */
static void on_keys_timer(uv_timer_t *t)
{
    durable *d = t->data;

    if (has_anything(d))
        durable_commit(d);
}

static void on_sync_timer(uv_timer_t *t)
{
    durable *d = t->data;

    if (store_sync(d->st) == 0) {
        d->syncs++;
    } else {
        d->failed_syncs++;
        snprintf(d->last_error, sizeof d->last_error, "sync: %s", store_error(d->st));
        log_error("persistence: %s; commits since the last good sync may not survive a machine "
                  "crash",
                  d->last_error);
    }
    arm_sync(d);
}

/* STORE_BATCH: arms the sync timer for the next sync due, unless it is armed. */
static void arm_sync(durable *d)
{
    int64_t due;

    if (!d->st || d->mode != STORE_BATCH || d->closing ||
        uv_is_active((uv_handle_t *)&d->sync_timer))
        return;
    due = store_sync_due_ms(d->st, server_now(d->srv) / SLUICE_NS_PER_MS);
    if (due >= 0)
        uv_timer_start(&d->sync_timer, on_sync_timer, (uint64_t)due, 0);
}

/* ---- Life -------------------------------------------------------------------------------- */

static void free_state(durable *d)
{
    sluice_free(d->held);
    sluice_free(d);
}

static void on_timer_closed(uv_handle_t *h)
{
    durable *d = h->data;

    if (--d->handles == 0)
        free_state(d);
}

int durable_open(server *s, char *msg, size_t msglen)
{
    durable *d = sluice_calloc(1, sizeof *d);
    store_options so;
    int rc;

    if (!d) {
        sluice_free(d);
        snprintf(msg, msglen, "out of memory");
        return SLUICE_ENOMEM;
    }
    d->srv = s;
    d->last_ok = 1;
    d->mode = s->opt.data_dir ? s->opt.durability : STORE_NONE;
    if (d->mode != STORE_NONE) {
        store_options_init(&so);
        so.dir = s->opt.data_dir;
        so.durability = d->mode;
        so.batch_ms = s->opt.batch_ms > 0 ? s->opt.batch_ms : 100;
        so.fault_vfs = s->opt.debug_commands;
        rc = store_open(&so, &d->st, msg, msglen);
        /* The feed first: a restore that trims old finished tasks records them, so the store
         * forgets them too. */
        if (rc == 0 && sluice_engine_changes_start(s->engine) != SLUICE_OK) {
            snprintf(msg, msglen, "out of memory");
            rc = SLUICE_ENOMEM;
        }
        if (rc == 0)
            rc = durable_load(d, msg, msglen);
        if (rc != 0) {
            store_close(d->st);
            free_state(d);
            return rc;
        }
    }
    s->durable_state = d;
    uv_timer_init(&s->loop, &d->keys_timer);
    uv_timer_init(&s->loop, &d->sync_timer);
    d->keys_timer.data = d->sync_timer.data = d;
    d->handles = 2;
    if (d->st) {
        /* What recovery left in the feed (finished tasks the engine forgot, keys to delete). */
        if (has_anything(d) && durable_commit(d) != 0)
            log_warn("persistence: the first commit failed: %s", d->last_error);
        uv_timer_start(&d->keys_timer, on_keys_timer, DURABLE_KEYS_MS, DURABLE_KEYS_MS);
        /* Neither timer keeps a stopping loop alive: durable_close does the last commit. */
        uv_unref((uv_handle_t *)&d->keys_timer);
    }
    uv_unref((uv_handle_t *)&d->sync_timer);
    return 0;
}

void durable_close(server *s)
{
    durable *d = state_of(s);

    if (!d || d->closing)
        return;
    d->closing = 1;
    if (d->st) {
        if (d->nheld || has_anything(d))
            durable_commit(d);
        if (!d->last_ok)
            log_error("persistence: the last commit failed (%s); changes since the last good "
                      "one are lost",
                      d->last_error);
        if (d->mode == STORE_BATCH && store_sync(d->st) != 0)
            log_error("persistence: the final sync failed: %s", store_error(d->st));
        store_close(d->st);
        d->st = NULL;
        log_info("persistence: %" PRIu64 " commits, %" PRIu64 " failed; store closed", d->commits,
                 d->failed_commits);
    }
    release_held(d);
    s->durable_state = NULL;
    uv_close((uv_handle_t *)&d->keys_timer, on_timer_closed);
    uv_close((uv_handle_t *)&d->sync_timer, on_timer_closed);
}

/* ---- INFO -------------------------------------------------------------------------------- */

static const char *mode_name(store_durability m)
{
    return m == STORE_ALWAYS ? "always" : m == STORE_BATCH ? "batch" : "none";
}

void durable_info(server *s, char *buf, size_t len)
{
    const durable *d = state_of(s);
    sluice_changes_counts dc;
    int64_t ago = -1;

    if (!d) {
        snprintf(buf, len, "# Persistence\r\ndurability:none\r\n");
        return;
    }
    sluice_engine_changes_count(s->engine, &dc);
    if (d->last_commit_ns > 0)
        ago = (server_now(s) - d->last_commit_ns) / SLUICE_NS_PER_MS;
    snprintf(buf, len,
             "# Persistence\r\ndurability:%s\r\ndata_dir:%s\r\nbatch_ms:%" PRId64
             "\r\nkeys_interval_ms:%d\r\nlast_commit_ok:%d\r\nlast_commit_ms_ago:%" PRId64
             "\r\ncommits:%" PRIu64 "\r\nfailed_commits:%" PRIu64 "\r\nsyncs:%" PRIu64
             "\r\nfailed_syncs:%" PRIu64 "\r\nioerr_replies:%" PRIu64
             "\r\ndirty_tasks:%zu\r\ndirty_series:%zu\r\ndirty_limits:%zu\r\ndirty_keys:%zu"
             "\r\nheld_replies:%zu\r\nuntracked_changes:%" PRIu64 "\r\nlast_error:%s"
             "\r\nrecovered_tasks:%" PRIu64 "\r\nunrestorable_tasks:%" PRIu64
             "\r\nrecovered_keys:%" PRIu64 "\r\ndropped_keys:%" PRIu64
             "\r\nrecovered_limits:%" PRIu64 "\r\nrecovered_series:%" PRIu64
             "\r\nunrestorable_series:%" PRIu64 "\r\nrecovery_ms:%" PRId64 "\r\n",
             mode_name(d->mode), d->st && s->opt.data_dir ? s->opt.data_dir : "",
             d->mode == STORE_BATCH ? s->opt.batch_ms : 0, DURABLE_KEYS_MS, d->last_ok, ago,
             d->commits, d->failed_commits, d->syncs, d->failed_syncs, d->ioerr_replies, dc.tasks,
             dc.series, dc.limits + dc.purges, dc.keys, d->nheld, dc.lost, d->last_error,
             d->rec.tasks, d->rec.unrestorable, d->rec.keys, d->rec.keys_dropped, d->rec.limits,
             d->rec.series, d->rec.series_failed, d->rec.ms);
}
