/* SPDX-License-Identifier: MIT */
/*
 * Durability of the server (see durable.h): a copier from the engine's change feed
 * (sluice_engine_changes) to the store through a commit thread, held replies and their release
 * or failure, the limiter-key timer, the batch sync timer, the final commit at a graceful stop,
 * and INFO's persistence section. Recovery at start is durable_load.c.
 *
 * Invariants:
 * - a held reply leaves only after the commit that follows it: released when that commit
 *   succeeded, replaced by -IOERR when it failed (the server never says "done" for a change that
 *   may not be durable; the change stays in memory and in the feed, and the next commit retries
 *   it). d->held are the replies of changes not yet pulled, d->flight those of the job in
 *   flight; a pull moves the first into the second, which is empty then;
 * - a held reply's undo (durable_key_changed) runs exactly when that reply becomes -IOERR, even
 *   when its client is gone; its argument is freed when the reply's fate is decided;
 * - at most one job is in flight (d->busy), and no batch is pulled while it is: the feed's batch
 *   out is exactly the job's, and sluice_engine_changes_done after it forgets nothing recorded
 *   since (that waits in the feed for the next pull);
 * - the feed's batch is confirmed (sluice_engine_changes_done) only after a successful commit,
 *   so nothing recorded is ever dropped (out of memory while recording aside, which the engine
 *   counts);
 * - the commit thread reads only the job (a buffer the loop filled before posting it and does
 *   not touch until the job is done) and the store; the handoff is under d->mu;
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
#include "base/grow.h"
#include "server/durable_impl.h"
#include "server/log.h"
#include "sluice/error.h"

/* ---- The clock --------------------------------------------------------------------------- */

/* Decisions take the server's cached loop time (server_now). The clock is read here only to fix
 * server_now's offset at start, and to time a commit for the store_commit histogram: a duration
 * inside one call, which the loop time (constant during the call) cannot measure. */
int64_t durable_read_clock(clockid_t id)
{
    struct timespec ts;

    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * SLUICE_NS_PER_SEC + (int64_t)ts.tv_nsec;
}

int64_t durable_clock_offset(int64_t floor_ns)
{
    int64_t mono = durable_read_clock(CLOCK_MONOTONIC), wall = durable_read_clock(CLOCK_REALTIME);

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

void durable_delivered(server *s, uint64_t max_id)
{
    durable *d = state_of(s);

    /* A task whose add is not durable yet must not reach a worker before it is: then the reply
     * waits as any other. */
    if (d && d->st && max_id <= d->durable_id)
        d->lease_only = 1;
}

/* ---- Held replies ------------------------------------------------------------------------ */

uint64_t durable_changes(const server *s)
{
    const durable *d = state_of(s);

    return d && d->st ? sluice_engine_changes_seq(s->engine) : 0;
}

/* What the running command asked through durable_key_changed, taken (and cleared) once. */
typedef struct key_change {
    int wait, oom;
    durable_undo_fn undo;
    char *arg; /* owned */
} key_change;

static key_change take_key_change(durable *d)
{
    key_change k = {d->key_wait, d->key_oom, d->key_undo, d->key_undo_arg};

    d->key_wait = d->key_oom = 0;
    d->key_undo = NULL;
    d->key_undo_arg = NULL;
    return k;
}

static void hold_reply(durable *d, conn *c, size_t mark, key_change *k);

void durable_key_changed(conn *c, durable_undo_fn undo, const char *arg)
{
    durable *d = state_of(c->srv);

    /* Only `always` promises a change durable in its reply; batch and none keep the key timer's
     * window (docs/durability.md). */
    if (!d || !d->st || d->mode != STORE_ALWAYS)
        return;
    alloc_free(d->key_undo_arg); /* a second call in one command keeps the last */
    d->key_wait = 1;
    d->key_oom = 0;
    d->key_undo = undo;
    d->key_undo_arg = NULL;
    if (undo && arg && !(d->key_undo_arg = alloc_memdup0(arg, strlen(arg))))
        d->key_oom = 1;
}

void durable_after_command(conn *c, uint64_t before, size_t mark)
{
    durable *d = state_of(c->srv);
    key_change k;

    if (!d)
        return;
    k = take_key_change(d);
    if (d->lease_only) {
        /* TASK.GET of durable tasks: its changes go with the next commit, unheld. */
        d->lease_only = 0;
        d->lazy += sluice_engine_changes_seq(c->srv->engine) - before;
    } else if (d->st && (k.wait || sluice_engine_changes_seq(c->srv->engine) != before) &&
               !c->out.failed && c->out.len > mark) {
        hold_reply(d, c, mark, &k);
    }
    alloc_free(k.arg);
}

void durable_after_detached(server *s)
{
    durable *d = state_of(s);

    if (d)
        alloc_free(take_key_change(d).arg);
}

void durable_delivered_unblocked(conn *c, size_t mark, uint64_t max_id)
{
    durable *d = state_of(c->srv);

    if (d && d->st && max_id > d->durable_id && !c->out.failed && c->out.len > mark)
        hold_reply(d, c, mark, NULL);
}

/* Makes room for one more held entry. Returns 0, or -1 when out of memory. */
static int held_grow(durable *d)
{
    return grow_array(&d->held, &d->held_cap, d->nheld + 1, sizeof(*d->held), 64) == SLUICE_OK ? 0
                                                                                               : -1;
}

/* Holds the reply client c appended from mark until the next commit; k (may be NULL) is what
 * undoes its change if that commit fails (its arg is taken). */
static void hold_reply(durable *d, conn *c, size_t mark, key_change *k)
{
    durable_undo_fn undo = k ? k->undo : NULL;
    char *arg = k ? k->arg : NULL;

    if ((k && k->oom) || held_grow(d) != 0) {
        /* Cannot hold it: make the change durable now instead, before the reply can go. The
         * commit may rewrite this client's earlier held replies (-IOERR): its reply is the
         * buffer's tail, so measure it from the end. */
        size_t tail = c->out.len - mark;

        durable_commit(d);
        if (d->last_ok)
            return;
        c->out.len -= tail; /* its reply becomes the error */
        resp_error(conn_out(c), "IOERR", "%s", d->last_error);
        if (undo)
            undo(d->srv, arg ? arg : "");
        return;
    }
    if (k)
        k->arg = NULL; /* the entry owns it now */
    d->held[d->nheld++] = (durable_held){c, mark, c->out.len, NULL, NULL, undo, arg};
    conn_hold(c);
    /* Another round of the turn's end, for a client resumed there after the commit. */
    server_signal_ready(c->srv);
}

int durable_wait(server *s, durable_wait_fn fn, void *arg)
{
    durable *d = state_of(s);

    if (!d || !d->st)
        return 1;
    if (held_grow(d) != 0) {
        /* As a reply that cannot be held: the change is made durable before the answer. */
        durable_commit(d);
        return d->last_ok ? 1 : SLUICE_EIO;
    }
    d->held[d->nheld++] = (durable_held){NULL, 0, 0, fn, arg, NULL, NULL};
    server_signal_ready(s);
    return 0;
}

void durable_wait_cancel(server *s, void *arg)
{
    durable *d = state_of(s);

    if (!d)
        return;
    for (size_t i = 0; i < d->nheld; i++)
        if (d->held[i].fn && d->held[i].arg == arg)
            d->held[i].fn = NULL;
    for (size_t i = 0; i < d->nflight; i++)
        if (d->flight[i].fn && d->flight[i].arg == arg)
            d->flight[i].fn = NULL;
}

const char *durable_last_error(const server *s)
{
    const durable *d = state_of(s);

    return d ? d->last_error : "";
}

void durable_conn_closed(conn *c)
{
    durable *d = state_of(c->srv);

    if (!d)
        return;
    for (size_t i = 0; i < d->nheld; i++)
        if (d->held[i].c == c)
            d->held[i].c = NULL;
    for (size_t i = 0; i < d->nflight; i++)
        if (d->flight[i].c == c)
            d->flight[i].c = NULL;
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
    buf = alloc_malloc(len ? len : 1);
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
    alloc_free(w->buf);
    w->buf = buf;
    w->len = w->cap = len;
    return 0;
}

/* Turns the replies of the commit in flight (d->flight) into -IOERR reason. A client's replies
 * held for the next commit (d->held) follow its replies in flight in its buffer: their offsets
 * move by what the rewrite added or removed. */
static void fail_flight(durable *d, const char *reason)
{
    char err[320];
    int n = snprintf(err, sizeof err, "-IOERR %s\r\n", reason[0] ? reason : "?");
    size_t errlen = n > 0 && (size_t)n < sizeof err ? (size_t)n : sizeof err - 1;

    /* The message is one line already (store errors are); keep it so whatever it holds. */
    for (size_t i = 6; i + 2 < errlen; i++)
        if (err[i] == '\r' || err[i] == '\n')
            err[i] = ' ';
    memcpy(err + errlen - 2, "\r\n", 2);
    /* Waiters are told, and are done with: release_flight does not call them again. A reply's
     * change that must not outlive its refusal (a lease granted) is undone, whether or not its
     * client is still there. */
    for (size_t i = 0; i < d->nflight; i++) {
        durable_held *h = &d->flight[i];

        if (h->undo) {
            durable_undo_fn undo = h->undo;

            h->undo = NULL;
            undo(d->srv, h->undo_arg ? h->undo_arg : "");
        }

        if (h->fn) {
            durable_wait_fn fn = h->fn;

            h->fn = NULL;
            fn(h->arg, reason[0] ? reason : "?");
        }
    }
    /* A commit nobody waited for (the key timer's) may have no array at all: qsort wants one. */
    if (d->nflight > 1)
        qsort(d->flight, d->nflight, sizeof *d->flight, held_cmp);
    for (size_t i = 0; i < d->nflight;) {
        size_t j = i;

        while (j < d->nflight && d->flight[j].c == d->flight[i].c)
            j++;
        if (d->flight[i].c) {
            conn *c = d->flight[i].c;
            size_t before = conn_out(c)->len;

            if (rewrite_client(c, &d->flight[i], j - i, err, errlen) != 0) {
                log_error("client %" PRIu64 " %s closed: out of memory for its -IOERR replies",
                          c->id, c->addr);
                conn_close(c); /* clears its entries through durable_conn_closed */
            } else {
                size_t after = conn_out(c)->len;

                for (size_t k = 0; k < d->nheld; k++)
                    if (d->held[k].c == c) {
                        d->held[k].start = d->held[k].start - before + after;
                        d->held[k].end = d->held[k].end - before + after;
                    }
                d->ioerr_replies += j - i;
                for (size_t k = i; k < j; k++)
                    counters_reply(&d->srv->counters, err, errlen);
            }
        }
        i = j;
    }
}

/* Releases every reply of the commit in flight (the commit decided their fate). */
static void release_flight(durable *d)
{
    /* conn_release may flush and close a client: take the list first. */
    size_t n = d->nflight;

    d->nflight = 0;
    for (size_t i = 0; i < n; i++) {
        alloc_free(d->flight[i].undo_arg);
        d->flight[i].undo_arg = NULL;
        d->flight[i].undo = NULL;
        if (d->flight[i].c) {
            conn_release(d->flight[i].c);
        } else if (d->flight[i].fn) {
            durable_wait_fn fn = d->flight[i].fn;

            d->flight[i].fn = NULL;
            fn(d->flight[i].arg, NULL);
        }
    }
}

/* ---- Commits (loop thread) ---------------------------------------------------------------- */

static void arm_sync(durable *d, int64_t due_ms);

/* A job finished (or could not start): confirm the feed's batch or keep it, release or fail the
 * replies of the commit, count, arm the sync timer. */
static void job_done(durable *d)
{
    durable_job *j = &d->job;

    d->busy = 0;
    if (j->sync) {
        if (j->sync_rc == 0) {
            d->syncs++;
        } else {
            d->failed_syncs++;
            snprintf(d->last_error, sizeof d->last_error, "%s", j->err);
            log_error("persistence: %s; commits since the last good sync may not survive a "
                      "machine crash",
                      d->last_error);
        }
    }
    if (j->commit) {
        prom_hist_observe(&d->srv->counters.store_commit, (double)j->took_ns / 1e9);
        if (j->rc == 0) {
            d->commits++;
            d->last_commit_ns = j->clock_ns;
            if (j->next_id > d->durable_id)
                d->durable_id = j->next_id;
            /* Only now: the batch is durable. No other batch was pulled meanwhile. */
            sluice_engine_changes_done(d->srv->engine);
            if (!d->last_ok)
                log_warn("persistence: commits succeed again (%" PRIu64 " failed so far)",
                         d->failed_commits);
            d->last_ok = 1;
        } else {
            d->failed_commits++;
            d->changes_at_failure = d->seq_pulled;
            snprintf(d->last_error, sizeof d->last_error, "%s", j->err);
            if (d->last_ok)
                log_error("persistence: commit failed: %s; %zu replies get -IOERR, the changes "
                          "stay in memory and are written by the next commit",
                          d->last_error, d->nflight);
            d->last_ok = 0;
            fail_flight(d, d->last_error);
        }
        release_flight(d);
    }
    if (j->sync_due_ms >= 0 && j->sync_due_ms < INT64_MAX) {
        int64_t since = server_now(d->srv) / SLUICE_NS_PER_MS - j->now_ms;

        arm_sync(d, j->sync_due_ms > since ? j->sync_due_ms - since : 0);
    }
    /* Keep the buffer of an ordinary turn; give back a huge one. */
    if (j->cap > (1u << 20)) {
        alloc_free(j->buf);
        j->buf = NULL;
        j->cap = 0;
    }
    j->len = 0;
}

/* Hands d->job to the commit thread, or runs it here when the thread is not running. */
static void job_post(durable *d)
{
    d->busy = 1;
    if (!d->thread_on) {
        durable_job_run(d->st, d->mode, &d->job);
        job_done(d);
        return;
    }
    uv_mutex_lock(&d->mu);
    d->posted = 1;
    uv_mutex_unlock(&d->mu);
    /* Signalled after the unlock: a thread woken while the mutex is still held would only
     * block on it again, one more sleep and wake-up on the commit's path. */
    uv_cond_signal(&d->todo_cv);
}

/* Handles the completion of the job in flight, if it finished. With `wait`, waits for it. */
static void job_reap(durable *d, int wait)
{
    int done;

    if (!d->busy || !d->thread_on)
        return;
    uv_mutex_lock(&d->mu);
    while (wait && !d->finished)
        uv_cond_wait(&d->done_cv, &d->mu);
    done = d->finished;
    d->finished = 0;
    uv_mutex_unlock(&d->mu);
    if (done)
        job_done(d);
}

/* The replies the commit released are written at the end of the turn, after durable_turn
 * posted the next commit: writing them here first (about 20 writes at -P1, each waking a client)
 * delayed that post and lowered durable -P1 throughput, and starting the commit here instead cut
 * it off from the requests read later in the turn. */
static void on_job_done(uv_async_t *a)
{
    job_reap(a->data, 0);
}

/* The replies held so far become those of the next commit in flight (d->flight is empty). */
static void swap_held(durable *d)
{
    durable_held *h = d->flight;
    size_t cap = d->flight_cap;

    d->flight = d->held;
    d->flight_cap = d->held_cap;
    d->nflight = d->nheld;
    d->held = h;
    d->held_cap = cap;
    d->nheld = 0;
}

/* Starts a commit of everything the feed holds (with a sync when one is due), unless one is in
 * flight. The replies held so far go with it. */
static void commit_start(durable *d, int sync)
{
    durable_job *j = &d->job;
    const sluice_changes *c;
    int rc;

    if (d->busy)
        return;
    swap_held(d);
    j->len = 0;
    j->oom = 0;
    j->commit = 1;
    j->sync = sync || d->sync_wanted;
    d->sync_wanted = 0;
    j->clock_ns = server_now(d->srv);
    j->now_ms = j->clock_ns / SLUICE_NS_PER_MS;
    /* The batch is the union of everything not yet confirmed: after a failed commit, what that
     * one tried is yielded again with what changed since. */
    rc = sluice_engine_changes(d->srv->engine, &c);
    d->seq_pulled = sluice_engine_changes_seq(d->srv->engine);
    d->lazy = 0;
    j->next_id = sluice_engine_last_id(d->srv->engine);
    if (rc == 0)
        durable_job_fill(d, c);
    if (rc != 0 || j->oom) {
        /* Nothing reached the store: fail it here, the batch stays unconfirmed. */
        d->busy = 1;
        j->rc = SLUICE_ENOMEM;
        j->took_ns = 0;
        d->sync_wanted = j->sync; /* the sync waits for the next job */
        j->sync = 0;
        j->sync_due_ms = -1;
        snprintf(j->err, sizeof j->err, "%s",
                 rc != 0 ? "out of memory collecting the changes"
                         : "out of memory copying the changes");
        job_done(d);
        return;
    }
    job_post(d);
}

/* Posts a sync alone (STORE_BATCH), unless a job is in flight (then the next one syncs). */
static void sync_start(durable *d)
{
    durable_job *j = &d->job;

    if (d->busy) {
        d->sync_wanted = 1;
        return;
    }
    d->sync_wanted = 0;
    j->len = 0;
    j->commit = 0;
    j->sync = 1;
    j->now_ms = server_now(d->srv) / SLUICE_NS_PER_MS;
    job_post(d);
}

int durable_commit(durable *d)
{
    if (!d->st) {
        d->nflight = 0;
        return 0;
    }
    job_reap(d, 1);
    commit_start(d, 0);
    job_reap(d, 1);
    return d->last_ok ? 0 : SLUICE_EIO;
}

/* Returns 1 when the feed holds anything to write, key states included (draining the limiters'
 * keys into it: pulling a batch without confirming it loses nothing). Not while a job is in
 * flight (its batch is out). */
static int has_anything(durable *d)
{
    const sluice_changes *c;
    sluice_changes_counts n;

    if (d->busy)
        return 0;
    if (sluice_engine_changes(d->srv->engine, &c) != SLUICE_OK)
        return 1; /* let the commit try, and say why it cannot */
    sluice_engine_changes_count(d->srv->engine, &n);
    return n.tasks || n.series || n.limits || n.purges || n.keys;
}

void durable_turn(server *s)
{
    durable *d = state_of(s);
    uint64_t seq, fresh;

    if (!d || !d->st || d->busy)
        return; /* a commit in flight: this turn's changes and replies wait for the next one */
    seq = sluice_engine_changes_seq(s->engine);
    /* Changes since the last pull that someone may wait for: deliveries of durable tasks do not
     * count (they go with the next commit, or the key timer's). */
    fresh = seq - d->seq_pulled - d->lazy;
    if (!d->nheld) {
        if (!fresh) {
            if (d->sync_wanted)
                sync_start(d);
            return;
        }
        /* After a failure, changes nobody waits for are retried by the key timer (every
         * DURABLE_KEYS_MS) rather than by every turn: a full disk must not cost THROTTLE a
         * failing transaction per turn. */
        if (!d->last_ok && seq == d->changes_at_failure)
            return;
    }
    commit_start(d, 0);
}

/* ---- Timers ------------------------------------------------------------------------------ */

/* Limiter state of decisions (THROTTLE, deliveries) that no task commit took along: written
 * every DURABLE_KEYS_MS, without holding anyone. */
static void on_keys_timer(uv_timer_t *t)
{
    durable *d = t->data;

    if (has_anything(d))
        commit_start(d, 0);
}

static void on_sync_timer(uv_timer_t *t)
{
    sync_start(t->data);
}

/* STORE_BATCH: arms the sync timer for the next sync due in due_ms, unless it is armed. */
static void arm_sync(durable *d, int64_t due_ms)
{
    if (!d->st || d->mode != STORE_BATCH || d->closing ||
        uv_is_active((uv_handle_t *)&d->sync_timer))
        return;
    uv_timer_start(&d->sync_timer, on_sync_timer, (uint64_t)due_ms, 0);
}

/* ---- Life -------------------------------------------------------------------------------- */

static void free_state(durable *d)
{
    alloc_free(d->key_undo_arg);
    alloc_free(d->held);
    alloc_free(d->flight);
    alloc_free(d->job.buf);
    alloc_free(d);
}

static void on_handle_closed(uv_handle_t *h)
{
    durable *d = h->data;

    if (--d->handles == 0)
        free_state(d);
}

/* Starts the commit thread. Returns 0 or an error (then jobs run on the loop thread). */
static int thread_start(durable *d)
{
    if (uv_mutex_init(&d->mu) != 0)
        return SLUICE_ENOMEM;
    if (uv_cond_init(&d->todo_cv) != 0) {
        uv_mutex_destroy(&d->mu);
        return SLUICE_ENOMEM;
    }
    if (uv_cond_init(&d->done_cv) != 0) {
        uv_cond_destroy(&d->todo_cv);
        uv_mutex_destroy(&d->mu);
        return SLUICE_ENOMEM;
    }
    if (uv_thread_create(&d->thread, durable_commit_thread, d) != 0) {
        uv_cond_destroy(&d->done_cv);
        uv_cond_destroy(&d->todo_cv);
        uv_mutex_destroy(&d->mu);
        return SLUICE_ENOMEM;
    }
    d->thread_on = 1;
    return 0;
}

/* Waits for the job in flight, stops the thread and joins it. */
static void thread_stop(durable *d)
{
    if (!d->thread_on)
        return;
    job_reap(d, 1);
    uv_mutex_lock(&d->mu);
    d->stop = 1;
    uv_cond_signal(&d->todo_cv);
    uv_mutex_unlock(&d->mu);
    uv_thread_join(&d->thread);
    d->thread_on = 0;
    uv_cond_destroy(&d->done_cv);
    uv_cond_destroy(&d->todo_cv);
    uv_mutex_destroy(&d->mu);
}

int durable_open(server *s, char *msg, size_t msglen)
{
    durable *d = alloc_calloc(1, sizeof *d);
    store_options so;
    int rc;

    if (!d) {
        alloc_free(d);
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
        /* Recovery runs here, on the loop thread, before the commit thread starts. */
        if (rc == 0)
            rc = durable_load(d, msg, msglen);
        if (rc != 0) {
            store_close(d->st);
            free_state(d);
            return rc;
        }
        /* Every task restored is in the store; what recovery left in the feed is not a
         * change anyone waits for. */
        d->durable_id = sluice_engine_last_id(s->engine);
        d->seq_pulled = sluice_engine_changes_seq(s->engine);
    }
    s->durable_state = d;
    uv_timer_init(&s->loop, &d->keys_timer);
    uv_timer_init(&s->loop, &d->sync_timer);
    uv_async_init(&s->loop, &d->done_async, on_job_done);
    d->keys_timer.data = d->sync_timer.data = d->done_async.data = d;
    d->handles = 3;
    uv_unref((uv_handle_t *)&d->done_async);
    if (d->st) {
        /* What recovery left in the feed (finished tasks the engine forgot, keys to delete). */
        if (has_anything(d) && durable_commit(d) != 0)
            log_warn("persistence: the first commit failed: %s", d->last_error);
        if (thread_start(d) != 0)
            log_warn("persistence: cannot start the commit thread; commits run on the loop");
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
        /* Drain: the commit in flight, then one for what is left; then the thread goes. */
        job_reap(d, 1);
        if (d->nheld || has_anything(d))
            durable_commit(d);
        thread_stop(d);
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
    /* Whatever is still held (no store) leaves now. */
    release_flight(d);
    swap_held(d);
    release_flight(d);
    s->durable_state = NULL;
    uv_close((uv_handle_t *)&d->keys_timer, on_handle_closed);
    uv_close((uv_handle_t *)&d->sync_timer, on_handle_closed);
    uv_close((uv_handle_t *)&d->done_async, on_handle_closed);
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
    /* The limiters' changed keys reach the feed when it is pulled (the key timer's pull, or a
     * commit's): pull now, as the key timer would, so that dirty_keys counts every key not yet
     * written. Pulling without confirming loses nothing; never while a job holds the batch. */
    if (!d->busy) {
        const sluice_changes *pulled;

        (void)sluice_engine_changes(s->engine, &pulled);
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
             "\r\nheld_replies:%zu\r\ncommit_in_flight:%d\r\nuntracked_changes:%" PRIu64
             "\r\nlast_error:%s"
             "\r\nrecovered_tasks:%" PRIu64 "\r\nunrestorable_tasks:%" PRIu64
             "\r\nrecovered_keys:%" PRIu64 "\r\ndropped_keys:%" PRIu64
             "\r\nrecovered_limits:%" PRIu64 "\r\nrecovered_series:%" PRIu64
             "\r\nunrestorable_series:%" PRIu64 "\r\nrecovery_ms:%" PRId64 "\r\n",
             mode_name(d->mode), d->st && s->opt.data_dir ? s->opt.data_dir : "",
             d->mode == STORE_BATCH ? s->opt.batch_ms : 0, DURABLE_KEYS_MS, d->last_ok, ago,
             d->commits, d->failed_commits, d->syncs, d->failed_syncs, d->ioerr_replies, dc.tasks,
             dc.series, dc.limits + dc.purges, dc.keys, d->nheld + d->nflight, d->busy, dc.lost,
             d->last_error, d->rec.tasks, d->rec.unrestorable, d->rec.keys, d->rec.keys_dropped,
             d->rec.limits, d->rec.series, d->rec.series_failed, d->rec.ms);
}
