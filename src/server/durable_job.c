/* SPDX-License-Identifier: MIT */
/*
 * The durable commit's job (see durable_impl.h): the loop thread serialises the change feed's
 * batch into a job buffer (durable_job_fill), and the commit thread writes that buffer to the
 * store in one transaction, with its fsync, and the batch-mode sync (durable_job_run,
 * durable_commit_thread). durable.c owns everything around it: when a job is posted, what
 * happens to the replies it holds, and the thread's life.
 *
 * Invariants:
 * - the buffer holds everything the store must write, copied from the engine at the pull, so
 *   the commit thread reads only the job and the store, never the engine;
 * - a job whose serialisation ran out of memory is never run: it is reported as failed, and the
 *   batch stays unconfirmed in the feed for the next commit.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "server/durable_impl.h"
#include "server/log.h"
#include "sluice/error.h"

/* ---- Serialising a batch (loop thread) ---------------------------------------------------- */

/* Operation codes of a job's buffer. Strings are a length (u64, JOB_NULL for NULL) followed by
 * the bytes and a NUL, so the thread reads them in place. */
enum {
    OP_LIMIT_PUT = 1, /* name, spec */
    OP_LIMIT_DEL,     /* name */
    OP_PURGE,         /* limit id */
    OP_KEY_PUT,       /* limit id, key, state */
    OP_KEY_DEL,       /* limit id, key */
    OP_SERIES_PUT,    /* name type payload key cron, interval start end max_runs runs skipped */
    OP_SERIES_DEL,    /* name */
    OP_TASK_PUT,      /* a sluice_task_record, field by field */
    OP_TASK_DEL,      /* id */
};
#define JOB_NULL UINT64_MAX

static void job_bytes(durable_job *j, const void *p, size_t n)
{
    if (j->oom)
        return;
    if (j->cap - j->len < n) {
        size_t cap = j->cap ? j->cap : 4096;
        unsigned char *b;

        while (cap - j->len < n)
            cap *= 2;
        b = alloc_realloc(j->buf, cap);
        if (!b) {
            j->oom = 1;
            return;
        }
        j->buf = b;
        j->cap = cap;
    }
    if (n)
        memcpy(j->buf + j->len, p, n);
    j->len += n;
}

static void job_u64(durable_job *j, uint64_t v)
{
    job_bytes(j, &v, sizeof v);
}

static void job_i64(durable_job *j, int64_t v)
{
    job_bytes(j, &v, sizeof v);
}

static void job_str(durable_job *j, const char *p, size_t len)
{
    if (!p) {
        job_u64(j, JOB_NULL);
        return;
    }
    job_u64(j, len);
    job_bytes(j, p, len);
    job_bytes(j, "", 1);
}

static void job_cstr(durable_job *j, const char *p)
{
    job_str(j, p, p ? strlen(p) : 0);
}

/* Copies a batch of the engine's change feed into d->job, exporting each task and series now.
 * The order is the feed's (see include/sluice/engine.h): definitions, purges, key states,
 * series, tasks. Sets job->oom when out of memory. */
void durable_job_fill(durable *d, const sluice_changes *c)
{
    sluice_engine *e = d->srv->engine;
    durable_job *j = &d->job;
    const char *name, *spec, *id, *key;
    const void *state;
    size_t pos, keylen, len;
    sluice_limit_def_op op;
    uint64_t tid;

    for (pos = 0; sluice_changes_next_limit(c, &pos, &name, &op, &spec);) {
        job_u64(j, op == SLUICE_LIMIT_DEF_DROP ? OP_LIMIT_DEL : OP_LIMIT_PUT);
        job_cstr(j, name);
        if (op != SLUICE_LIMIT_DEF_DROP) /* GONE: a tombstone, removed again at start */
            job_cstr(j, op == SLUICE_LIMIT_DEF_SET && spec ? spec : "");
    }
    for (pos = 0; sluice_changes_next_purge(c, &pos, &id);) {
        job_u64(j, OP_PURGE);
        job_cstr(j, id);
    }
    for (pos = 0; sluice_changes_next_key(c, &pos, &id, &key, &keylen, &state, &len);) {
        job_u64(j, state ? OP_KEY_PUT : OP_KEY_DEL);
        job_cstr(j, id);
        job_str(j, key, keylen);
        if (state)
            job_str(j, state, len);
    }
    for (pos = 0; sluice_changes_next_series(c, &pos, &name);) {
        sluice_recurring_spec rs;
        int64_t runs, skipped;

        if (sluice_engine_recurring_state(e, name, &rs, &runs, &skipped) != SLUICE_OK) {
            job_u64(j, OP_SERIES_DEL);
            job_cstr(j, name);
            continue;
        }
        job_u64(j, OP_SERIES_PUT);
        job_cstr(j, rs.name);
        job_cstr(j, rs.type);
        job_str(j, rs.payload, rs.payload_len);
        job_str(j, rs.key, rs.key_len);
        job_cstr(j, rs.cron);
        job_i64(j, rs.interval_ns);
        job_i64(j, rs.start_ns);
        job_i64(j, rs.end_ns);
        job_i64(j, rs.max_runs);
        job_i64(j, runs);
        job_i64(j, skipped);
    }
    for (pos = 0; sluice_changes_next_task(c, &pos, &tid);) {
        sluice_task_record r;

        if (sluice_engine_export_task(e, tid, &r) != SLUICE_OK) {
            job_u64(j, OP_TASK_DEL);
            job_u64(j, tid);
            continue;
        }
        job_u64(j, OP_TASK_PUT);
        job_u64(j, r.id);
        job_i64(j, r.state);
        job_cstr(j, r.type);
        job_str(j, r.payload, r.payload_len);
        job_str(j, r.key, r.key_len);
        job_str(j, r.task_key, r.task_key_len);
        job_i64(j, r.units);
        job_i64(j, r.priority);
        job_i64(j, r.attempt);
        job_i64(j, r.submitted_ns);
        job_i64(j, r.not_before_ns);
        job_i64(j, r.lease_until_ns);
        job_i64(j, r.granted);
        job_cstr(j, r.series);
        job_i64(j, r.fail_reason);
        job_cstr(j, r.fail_limit);
        job_cstr(j, r.fail_message);
        job_cstr(j, r.lease_limit);
        job_u64(j, r.lease_id);
        job_u64(j, r.lease_tag);
    }
}

/* ---- Writing a job (commit thread, or the loop thread when the thread is not running) ---- */

/* A reader of a job's buffer. */
typedef struct job_reader {
    const unsigned char *p, *end;
} job_reader;

static uint64_t rd_u64(job_reader *r)
{
    uint64_t v = 0;

    if ((size_t)(r->end - r->p) >= sizeof v) {
        memcpy(&v, r->p, sizeof v);
        r->p += sizeof v;
    }
    return v;
}

static int64_t rd_i64(job_reader *r)
{
    return (int64_t)rd_u64(r);
}

/* A string in place (NUL-terminated), NULL for a NULL one; its length in *len (may be NULL). */
static const char *rd_str(job_reader *r, size_t *len)
{
    uint64_t n = rd_u64(r);
    const char *p;

    if (len)
        *len = 0;
    if (n == JOB_NULL || (uint64_t)(r->end - r->p) < n + 1)
        return NULL;
    p = (const char *)r->p;
    r->p += n + 1;
    if (len)
        *len = (size_t)n;
    return p;
}

/* Writes the job's operations inside an open transaction. Returns 0 or the error. */
static int job_write(store *st, const durable_job *j)
{
    job_reader r = {j->buf, j->buf + j->len};
    int rc = 0;

    while (rc == 0 && r.p < r.end) {
        uint64_t op = rd_u64(&r);
        const char *a, *b, *k;
        size_t blen, klen;

        switch (op) {
        case OP_LIMIT_PUT:
            a = rd_str(&r, NULL);
            b = rd_str(&r, NULL);
            rc = store_put_limit(st, a, b ? b : "");
            break;
        case OP_LIMIT_DEL:
            rc = store_del_limit(st, rd_str(&r, NULL));
            break;
        case OP_PURGE:
            rc = store_del_limit_keys(st, rd_str(&r, NULL));
            break;
        case OP_KEY_PUT:
            a = rd_str(&r, NULL);
            k = rd_str(&r, &klen);
            b = rd_str(&r, &blen);
            rc = store_put_key(st, a, k, klen, b, blen);
            break;
        case OP_KEY_DEL:
            a = rd_str(&r, NULL);
            k = rd_str(&r, &klen);
            rc = store_del_key(st, a, k, klen);
            break;
        case OP_SERIES_PUT: {
            sluice_recurring_spec rs;
            int64_t runs, skipped;

            memset(&rs, 0, sizeof rs);
            rs.name = rd_str(&r, NULL);
            rs.type = rd_str(&r, NULL);
            rs.payload = rd_str(&r, &rs.payload_len);
            rs.key = rd_str(&r, &rs.key_len);
            rs.cron = rd_str(&r, NULL);
            rs.interval_ns = rd_i64(&r);
            rs.start_ns = rd_i64(&r);
            rs.end_ns = rd_i64(&r);
            rs.max_runs = rd_i64(&r);
            runs = rd_i64(&r);
            skipped = rd_i64(&r);
            rc = store_put_recurring(st, &rs, runs, skipped);
            break;
        }
        case OP_SERIES_DEL:
            rc = store_del_recurring(st, rd_str(&r, NULL));
            break;
        case OP_TASK_PUT: {
            sluice_task_record t;

            memset(&t, 0, sizeof t);
            t.id = rd_u64(&r);
            t.state = (sluice_task_state)rd_i64(&r);
            t.type = rd_str(&r, NULL);
            t.payload = rd_str(&r, &t.payload_len);
            t.key = rd_str(&r, &t.key_len);
            t.task_key = rd_str(&r, &t.task_key_len);
            t.units = rd_i64(&r);
            t.priority = (int)rd_i64(&r);
            t.attempt = (int)rd_i64(&r);
            t.submitted_ns = rd_i64(&r);
            t.not_before_ns = rd_i64(&r);
            t.lease_until_ns = rd_i64(&r);
            t.granted = (int)rd_i64(&r);
            t.series = rd_str(&r, NULL);
            t.fail_reason = (sluice_fail_reason)rd_i64(&r);
            t.fail_limit = rd_str(&r, NULL);
            t.fail_message = rd_str(&r, NULL);
            t.lease_limit = rd_str(&r, NULL);
            t.lease_id = rd_u64(&r);
            t.lease_tag = rd_u64(&r);
            rc = store_put_task(st, &t);
            break;
        }
        case OP_TASK_DEL:
            rc = store_del_task(st, rd_u64(&r));
            break;
        default:
            rc = SLUICE_EINVAL; /* cannot happen: the loop wrote the buffer */
            break;
        }
    }
    if (rc == 0)
        rc = store_put_meta(st, META_CLOCK, j->clock_ns);
    if (rc == 0)
        rc = store_put_meta(st, META_NEXT_ID, (int64_t)j->next_id);
    return rc;
}

/* Runs a job on the store: the transaction (and its fsync in STORE_ALWAYS), then the sync it
 * asks for. Touches nothing but the store and the job. */
void durable_job_run(store *st, store_durability mode, durable_job *j)
{
    int64_t t0 = durable_read_clock(CLOCK_MONOTONIC);

    j->rc = 0;
    j->err[0] = '\0';
    if (j->commit) {
        j->rc = store_begin(st);
        if (j->rc == 0)
            j->rc = job_write(st, j);
        if (j->rc == 0)
            j->rc = store_commit(st, j->now_ms);
        else
            store_rollback(st);
        if (j->rc != 0)
            snprintf(j->err, sizeof j->err, "%s", store_error(st));
    }
    j->took_ns = durable_read_clock(CLOCK_MONOTONIC) - t0;
    j->sync_rc = 0;
    if (j->sync) {
        j->sync_rc = store_sync(st);
        if (j->sync_rc != 0 && j->rc == 0)
            snprintf(j->err, sizeof j->err, "sync: %s", store_error(st));
    }
    j->sync_due_ms = mode == STORE_BATCH ? store_sync_due_ms(st, j->now_ms) : -1;
}

/* The commit thread: runs each job posted, then wakes the loop. */
void durable_commit_thread(void *arg)
{
    durable *d = arg;

    for (;;) {
        uv_mutex_lock(&d->mu);
        while (!d->posted && !d->stop)
            uv_cond_wait(&d->todo_cv, &d->mu);
        if (!d->posted) {
            uv_mutex_unlock(&d->mu);
            return;
        }
        d->posted = 0;
        uv_mutex_unlock(&d->mu);
        durable_job_run(d->st, d->mode, &d->job);
        uv_mutex_lock(&d->mu);
        d->finished = 1;
        uv_mutex_unlock(&d->mu);
        /* After the unlock, so that a loop waiting in job_reap does not wake to a held mutex. */
        uv_cond_signal(&d->done_cv);
        uv_async_send(&d->done_async);
    }
}
