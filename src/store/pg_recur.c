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
#include "store/pg_tasks.h"

/* PostgreSQL's type oids of the result's columns (pg_type.h, stable across versions). */
#define PGR_OID_INT4  23
#define PGR_OID_BYTEA 17

struct pgr_batch {
    int64_t now_ns;     /* injected time; 0: clock_timestamp() */
    packed_str body;    /* the array literal's body: "r1","r2",... */
    packed_str lit;     /* the literal sent: {body} */
    rrecur_op *ops;     /* the op of each request */
    size_t nreqs;       /* requests */
    size_t capops;      /* room in ops */
    pgt_batch *scratch; /* encodes an occurrence's ADD (created at the first FIRE with one) */
    char now[24];       /* the time parameter's text */
    const char *values[PGR_CALL_NPARAMS];
};

/* A space, then a formatted field. */
static int put_fmt(packed_str *s, const char *fmt, ...)
{
    char text[64];
    va_list ap;
    int len;

    va_start(ap, fmt);
    len = vsnprintf(text + 1, sizeof text - 1, fmt, ap);
    va_end(ap);
    if (len < 0 || (size_t)len >= sizeof text - 1)
        return SLUICE_EINVAL;
    text[0] = ' ';
    return packed_str_put(s, text, (size_t)len + 1);
}

/* A space, then bytes as lowercase hex (nothing for none: an empty field). */
static int put_hex(packed_str *s, const void *data, size_t len)
{
    int rc = packed_str_put(s, " ", 1);

    return rc == SLUICE_OK ? packed_str_hex(s, data, len) : rc;
}

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
    packed_str_cut(&b->body, 0);
    b->nreqs = 0;
}

void pgr_batch_free(pgr_batch *b)
{
    if (!b)
        return;
    alloc_free(b->body.p);
    alloc_free(b->lit.p);
    alloc_free(b->ops);
    pgt_batch_free(b->scratch);
    alloc_free(b);
}

void pgr_batch_set_now(pgr_batch *b, int64_t now_ns)
{
    b->now_ns = now_ns > 0 ? now_ns : 0;
}

size_t pgr_batch_count(const pgr_batch *b)
{
    return b->nreqs;
}

rrecur_op pgr_batch_op(const pgr_batch *b, size_t i)
{
    return i < b->nreqs ? b->ops[i] : (rrecur_op)0;
}

/* Opens request `op` (a separating comma, the quote, the op letter); end_req closes it and
 * records it, or rolls the batch back to `mark` on rc. */
static int begin_req(pgr_batch *b, char op)
{
    char head[3] = {',', '"', op};

    return b->body.len > 0 ? packed_str_put(&b->body, head, 3)
                           : packed_str_put(&b->body, head + 1, 2);
}

static int end_req(pgr_batch *b, rrecur_op op, size_t mark, int rc)
{
    if (rc == SLUICE_OK && b->nreqs >= (size_t)INT32_MAX)
        rc = SLUICE_EINVAL;
    if (rc == SLUICE_OK)
        rc = packed_str_put(&b->body, "\"", 1);
    if (rc == SLUICE_OK)
        rc = grow_array(&b->ops, &b->capops, b->nreqs + 1, sizeof(rrecur_op), 16);
    if (rc != SLUICE_OK) {
        packed_str_cut(&b->body, mark);
        return rc;
    }
    b->ops[b->nreqs] = op;
    return (int)b->nreqs++;
}

int pgr_batch_add_set(pgr_batch *b, const sluice_recurring_spec *spec)
{
    size_t mark = b->body.len;
    packed_str *s = &b->body;
    int rc;

    if (!rrecur_spec_ok(spec))
        return SLUICE_EINVAL;
    rc = begin_req(b, 'S');
    if (rc == SLUICE_OK)
        rc = put_hex(s, spec->name, strlen(spec->name));
    if (rc == SLUICE_OK)
        rc = put_hex(s, spec->type, strlen(spec->type));
    if (rc == SLUICE_OK)
        rc = spec->payload ? put_hex(s, spec->payload, spec->payload_len) : put_hex(s, "{}", 2);
    if (rc == SLUICE_OK)
        rc = put_hex(s, spec->key, spec->key ? spec->key_len : 0);
    if (rc == SLUICE_OK)
        rc = put_fmt(s, "%d %" PRId64, spec->key ? 1 : 0, spec->interval_ns);
    if (rc == SLUICE_OK)
        rc = put_hex(s, spec->cron, spec->cron ? strlen(spec->cron) : 0);
    if (rc == SLUICE_OK)
        rc = put_fmt(s, "%" PRId64 " %" PRId64 " %" PRId64, spec->start_ns, spec->end_ns,
                     spec->max_runs);
    return end_req(b, RRECUR_SET, mark, rc);
}

static int add_named(pgr_batch *b, rrecur_op op, char word, const char *name, size_t namelen)
{
    size_t mark = b->body.len;
    int rc;

    if (!name || namelen == 0)
        return SLUICE_EINVAL;
    rc = begin_req(b, word);
    if (rc == SLUICE_OK)
        rc = put_hex(&b->body, name, namelen);
    return end_req(b, op, mark, rc);
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
    size_t mark = b->body.len;
    int rc;

    if (max < 1 || max > RRECUR_LIST_MAX)
        return SLUICE_EINVAL;
    rc = begin_req(b, 'L');
    if (rc == SLUICE_OK)
        rc = put_fmt(&b->body, "%zu", max);
    return end_req(b, RRECUR_LIST, mark, rc);
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
    rc = packed_str_put(&b->body, " ", 1);
    if (rc == SLUICE_OK)
        rc = packed_str_put(&b->body, values[1] + 2, len - 4);
    return rc;
}

int pgr_batch_add_fire(pgr_batch *b, const rrecur_fire *f)
{
    size_t mark = b->body.len;
    int rc;

    if (!rrecur_fire_ok(f))
        return SLUICE_EINVAL;
    rc = begin_req(b, 'F');
    if (rc == SLUICE_OK)
        rc = put_hex(&b->body, f->name, f->namelen);
    if (rc == SLUICE_OK)
        rc = put_fmt(&b->body, "%" PRIu64 " %" PRId64 " %d %" PRId64 " %" PRId64, f->version,
                     f->expected_ns, f->task ? 1 : 0, f->next_ns, f->missed);
    if (rc == SLUICE_OK && f->task)
        rc = put_occurrence(b, f->task);
    return end_req(b, RRECUR_FIRE, mark, rc);
}

int pgr_batch_params(pgr_batch *b, const char *const **values)
{
    int rc;

    *values = NULL;
    if (b->nreqs == 0)
        return SLUICE_EINVAL;
    rc = packed_str_array(&b->lit, &b->body);
    if (rc != SLUICE_OK)
        return rc;
    b->values[0] = packed_now_param(b->now, b->now_ns);
    b->values[1] = b->lit.p;
    *values = b->values;
    return SLUICE_OK;
}

/* ---- the result -------------------------------------------------------------------------- */

/* The request number of row `row` (binary int4), or -1 for a malformed one. */
static int64_t row_req(const PGresult *r, int row)
{
    const unsigned char *p = (const unsigned char *)PQgetvalue(r, row, 0);

    if (PQgetisnull(r, row, 0) || PQgetlength(r, row, 0) != 4)
        return -1;
    return (int64_t)(int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
                              (uint32_t)p[3]);
}

/* The first row whose request number is at least want (rows are in request order). */
static int lower_bound(const PGresult *r, int64_t want)
{
    int lo = 0, hi = PQntuples(r);

    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;

        if (row_req(r, mid) < want)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Rows [*first, *first + *n) hold request i's elements; every one is checked. */
static int rows_of(const pgr_batch *b, const PGresult *r, size_t i, int *first, int *n)
{
    int lo, hi;

    if (!r || PQresultStatus(r) != PGRES_TUPLES_OK || PQnfields(r) != 2 || PQfformat(r, 0) != 1 ||
        PQfformat(r, 1) != 1 || PQftype(r, 0) != PGR_OID_INT4 || PQftype(r, 1) != PGR_OID_BYTEA ||
        PQntuples(r) < (int)b->nreqs)
        return SLUICE_EPARSE;
    if (row_req(r, 0) != 1 || row_req(r, PQntuples(r) - 1) != (int64_t)b->nreqs)
        return SLUICE_EPARSE;
    lo = lower_bound(r, (int64_t)i + 1);
    hi = lower_bound(r, (int64_t)i + 2);
    if (hi <= lo)
        return SLUICE_EPARSE;
    for (int k = lo; k < hi; k++)
        if (row_req(r, k) != (int64_t)i + 1 || PQgetisnull(r, k, 1))
            return SLUICE_EPARSE;
    *first = lo;
    *n = hi - lo;
    return SLUICE_OK;
}

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
    if (i >= b->nreqs)
        return SLUICE_EINVAL;
    rc = rows_of(b, r, i, &first, &n);
    if (rc == SLUICE_OK)
        rc = rrecur_parse_answer(b->ops[i], PQgetvalue(r, first, 1),
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
    if (i >= b->nreqs || (b->ops[i] != RRECUR_LIST && b->ops[i] != RRECUR_INFO))
        return SLUICE_EINVAL;
    rc = pgr_batch_result(b, result, i, &res);
    if (rc != SLUICE_OK)
        return rc;
    if (res.rc != SLUICE_OK || k >= res.nseries)
        return SLUICE_EINVAL;
    rows_of(b, r, i, &first, &n); /* checked by pgr_batch_result */
    return read_series(r, first + 1 + RRECUR_SERIES_ELEMS * (int)k, out);
}
