/* SPDX-License-Identifier: MIT */
/*
 * The encoder and decoder of the batched series function (pg_recur.h; the request and answer
 * layout is described above sluice_recur_call in src/store/pg/003_pgrecur.sql, which this file
 * must match).
 *
 * As pg_tasks.c: a batch keeps its requests as the body of one PostgreSQL array literal, each
 * request one double-quoted element whose fields are separated by single spaces, every byte
 * string (name, type, payload, key, cron) written as lowercase hex, so that any bytes travel in a
 * text parameter and no field holds a space, a quote or a backslash. A FIRE's occurrence is the
 * element pgt_batch_add_add writes for it (taken from a scratch task batch's literal), appended
 * to the FIRE's fields. Answers are read with redis_recur.c's parsers: the function answers with
 * the script's elements, one row (req, val) each.
 *
 * Invariants:
 * - a failed add leaves the batch exactly as it was (its lengths are rolled back);
 * - the result is read in place (binary format): strings handed out point into it.
 */
#include "store/pg_recur.h"

#include <inttypes.h>
#include <libpq-fe.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/grow.h"
#include "sluice/error.h"
#include "store/packed.h"
#include "store/pg_batch.h"
#include "store/pg_tasks.h"

struct pgr_batch {
    pgbatch c;          /* the requests, the parameters, the answer's rows (pg_batch.h) */
    pgt_batch *scratch; /* encodes an occurrence's ADD (created at the first FIRE with one) */
};

int pgr_batch_new(pgr_batch **out)
{
    pgr_batch *b = alloc_calloc(1, sizeof *b);

    *out = NULL;
    if (!b)
        return SLUICE_ENOMEM;
    *out = b;
    return SLUICE_OK;
}

void pgr_batch_reset(pgr_batch *b)
{
    pgbatch_reset(&b->c);
}

void pgr_batch_free(pgr_batch *b)
{
    if (!b)
        return;
    pgbatch_fini(&b->c);
    pgt_batch_free(b->scratch);
    alloc_free(b);
}

void pgr_batch_set_now(pgr_batch *b, int64_t now_ns)
{
    pgbatch_set_now(&b->c, now_ns);
}

size_t pgr_batch_count(const pgr_batch *b)
{
    return b->c.nreqs;
}

rrecur_op pgr_batch_op(const pgr_batch *b, size_t i)
{
    return i < b->c.nreqs ? (rrecur_op)b->c.ops[i] : (rrecur_op)0;
}

int pgr_batch_add_set(pgr_batch *b, const sluice_recurring_spec *spec)
{
    size_t mark = b->c.body.len;
    packed_str *s = &b->c.body;
    int rc;

    if (!rrecur_spec_ok(spec))
        return SLUICE_EINVAL;
    rc = pgbatch_begin(&b->c, 'S');
    if (rc == SLUICE_OK)
        rc = pgbatch_put_hex(s, spec->name, strlen(spec->name));
    if (rc == SLUICE_OK)
        rc = pgbatch_put_hex(s, spec->type, strlen(spec->type));
    if (rc == SLUICE_OK)
        rc = spec->payload ? pgbatch_put_hex(s, spec->payload, spec->payload_len)
                           : pgbatch_put_hex(s, "{}", 2);
    if (rc == SLUICE_OK)
        rc = pgbatch_put_hex(s, spec->key, spec->key ? spec->key_len : 0);
    if (rc == SLUICE_OK)
        rc = pgbatch_put_fmt(s, "%d %" PRId64, spec->key ? 1 : 0, spec->interval_ns);
    if (rc == SLUICE_OK)
        rc = pgbatch_put_hex(s, spec->cron, spec->cron ? strlen(spec->cron) : 0);
    if (rc == SLUICE_OK)
        rc = pgbatch_put_fmt(s, "%" PRId64 " %" PRId64 " %" PRId64, spec->start_ns, spec->end_ns,
                             spec->max_runs);
    return pgbatch_end(&b->c, (int)RRECUR_SET, mark, rc);
}

static int add_named(pgr_batch *b, rrecur_op op, char word, const char *name, size_t namelen)
{
    size_t mark = b->c.body.len;
    int rc;

    if (!name || namelen == 0)
        return SLUICE_EINVAL;
    rc = pgbatch_begin(&b->c, word);
    if (rc == SLUICE_OK)
        rc = pgbatch_put_hex(&b->c.body, name, namelen);
    return pgbatch_end(&b->c, (int)op, mark, rc);
}

int pgr_batch_add_del(pgr_batch *b, const char *name, size_t namelen)
{
    return add_named(b, RRECUR_DEL, 'D', name, namelen);
}

int pgr_batch_add_info(pgr_batch *b, const char *name, size_t namelen)
{
    return add_named(b, RRECUR_INFO, 'I', name, namelen);
}

int pgr_batch_add_list(pgr_batch *b, size_t max)
{
    size_t mark = b->c.body.len;
    int rc;

    if (max < 1 || max > RRECUR_LIST_MAX)
        return SLUICE_EINVAL;
    rc = pgbatch_begin(&b->c, 'L');
    if (rc == SLUICE_OK)
        rc = pgbatch_put_fmt(&b->c.body, "%zu", max);
    return pgbatch_end(&b->c, (int)RRECUR_LIST, mark, rc);
}

/* Appends a space and the occurrence t as 002's ADD takes it: the one element of a scratch task
 * batch's literal, `{"A ..."}`, without its braces and quotes. */
static int put_occurrence(pgr_batch *b, const rtask_add *t)
{
    const char *const *values;
    size_t len;
    int rc = SLUICE_OK, idx;

    if (!b->scratch)
        rc = pgt_batch_new(&b->scratch);
    if (rc != SLUICE_OK)
        return rc;
    pgt_batch_reset(b->scratch);
    idx = pgt_batch_add_add(b->scratch, t);
    if (idx < 0)
        return idx;
    rc = pgt_batch_params(b->scratch, &values);
    if (rc != SLUICE_OK)
        return rc;
    len = strlen(values[1]);
    if (len < 6 || memcmp(values[1], "{\"A ", 4) != 0 || memcmp(values[1] + len - 2, "\"}", 2) != 0)
        return SLUICE_EINVAL;
    rc = packed_str_put(&b->c.body, " ", 1);
    if (rc == SLUICE_OK)
        rc = packed_str_put(&b->c.body, values[1] + 2, len - 4);
    return rc;
}

int pgr_batch_add_fire(pgr_batch *b, const rrecur_fire *f)
{
    size_t mark = b->c.body.len;
    int rc;

    if (!rrecur_fire_ok(f))
        return SLUICE_EINVAL;
    rc = pgbatch_begin(&b->c, 'F');
    if (rc == SLUICE_OK)
        rc = pgbatch_put_hex(&b->c.body, f->name, f->namelen);
    if (rc == SLUICE_OK)
        rc = pgbatch_put_fmt(&b->c.body, "%" PRIu64 " %" PRId64 " %d %" PRId64 " %" PRId64,
                             f->version, f->expected_ns, f->task ? 1 : 0, f->next_ns, f->missed);
    if (rc == SLUICE_OK && f->task)
        rc = put_occurrence(b, f->task);
    return pgbatch_end(&b->c, (int)RRECUR_FIRE, mark, rc);
}

int pgr_batch_params(pgr_batch *b, const char *const **values)
{
    return pgbatch_params(&b->c, values);
}

/* ---- the result -------------------------------------------------------------------------- */

/* The RRECUR_SERIES_ELEMS elements of a series from row `row`. */
static int read_series(const PGresult *r, int row, rrecur_series *out)
{
    const char *s[RRECUR_SERIES_ELEMS];
    size_t len[RRECUR_SERIES_ELEMS];

    for (int j = 0; j < RRECUR_SERIES_ELEMS; j++) {
        s[j] = PQgetvalue(r, row + j, 1);
        len[j] = (size_t)PQgetlength(r, row + j, 1);
    }
    return rrecur_parse_series(s, len, out);
}

int pgr_batch_result(const pgr_batch *b, const struct pg_result *result, size_t i,
                     rrecur_result *res)
{
    const PGresult *r = (const PGresult *)result;
    int first = 0, n = 0, rc;

    memset(res, 0, sizeof *res);
    if (i >= b->c.nreqs)
        return SLUICE_EINVAL;
    rc = pgbatch_rows(&b->c, result, i, &first, &n);
    if (rc == SLUICE_OK)
        rc = rrecur_parse_answer(b->c.ops[i], PQgetvalue(r, first, 1),
                                 (size_t)PQgetlength(r, first, 1), (size_t)n, res);
    /* Every series is read once here, so that a result is refused whole, never half-read. */
    for (size_t k = 0; rc == SLUICE_OK && k < res->nseries; k++) {
        rrecur_series x;

        rc = read_series(r, first + 1 + RRECUR_SERIES_ELEMS * (int)k, &x);
    }
    if (rc != SLUICE_OK)
        memset(res, 0, sizeof *res);
    return rc;
}

int pgr_batch_series(const pgr_batch *b, const struct pg_result *result, size_t i, size_t k,
                     rrecur_series *out)
{
    const PGresult *r = (const PGresult *)result;
    rrecur_result res;
    int first = 0, n = 0, rc;

    memset(out, 0, sizeof *out);
    if (i >= b->c.nreqs || (b->c.ops[i] != RRECUR_LIST && b->c.ops[i] != RRECUR_INFO))
        return SLUICE_EINVAL;
    rc = pgr_batch_result(b, result, i, &res);
    if (rc != SLUICE_OK)
        return rc;
    if (res.rc != SLUICE_OK || k >= res.nseries)
        return SLUICE_EINVAL;
    pgbatch_rows(&b->c, result, i, &first, &n); /* checked by pgr_batch_result */
    return read_series(r, first + 1 + RRECUR_SERIES_ELEMS * (int)k, out);
}
