/* SPDX-License-Identifier: MIT */
/*
 * The shared core of the PostgreSQL task and series encoders (pg_batch.h).
 *
 * An answer's rows are sorted by request number, so request i's rows are found by two binary
 * searches rather than a walk from the top, and each of them is checked before it is used.
 */
#include "store/pg_batch.h"

#include <libpq-fe.h>
#include <stdarg.h>
#include <stdio.h>

#include "base/alloc.h"
#include "base/grow.h"
#include "sluice/error.h"

/* PostgreSQL's type oids of the answer's columns (pg_type.h, stable across versions). */
#define PGB_OID_INT4  23
#define PGB_OID_BYTEA 17

void pgbatch_reset(pgbatch *b)
{
    packed_str_cut(&b->body, 0);
    b->nreqs = 0;
}

void pgbatch_fini(pgbatch *b)
{
    alloc_free(b->body.p);
    alloc_free(b->lit.p);
    alloc_free(b->ops);
}

void pgbatch_set_now(pgbatch *b, int64_t now_ns)
{
    b->now_ns = now_ns > 0 ? now_ns : 0;
}

int pgbatch_put_fmt(packed_str *s, const char *fmt, ...)
{
    char text[256];
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

int pgbatch_put_hex(packed_str *s, const void *data, size_t len)
{
    int rc = packed_str_put(s, " ", 1);

    return rc == SLUICE_OK ? packed_str_hex(s, data, len) : rc;
}

int pgbatch_begin(pgbatch *b, char op)
{
    char head[3] = {',', '"', op};

    return b->body.len > 0 ? packed_str_put(&b->body, head, 3)
                           : packed_str_put(&b->body, head + 1, 2);
}

int pgbatch_end(pgbatch *b, int op, size_t mark, int rc)
{
    if (rc == SLUICE_OK && b->nreqs >= (size_t)INT32_MAX)
        rc = SLUICE_EINVAL;
    if (rc == SLUICE_OK)
        rc = packed_str_put(&b->body, "\"", 1);
    if (rc == SLUICE_OK)
        rc = grow_array(&b->ops, &b->capops, b->nreqs + 1, sizeof(int), 16);
    if (rc != SLUICE_OK) {
        packed_str_cut(&b->body, mark);
        return rc;
    }
    b->ops[b->nreqs] = op;
    return (int)b->nreqs++;
}

int pgbatch_params(pgbatch *b, const char *const **values)
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

/* The request number of row `row` (binary int4), or -1 for a malformed one. */
static int64_t row_req(const PGresult *r, int row)
{
    const unsigned char *p = (const unsigned char *)PQgetvalue(r, row, 0);

    if (PQgetisnull(r, row, 0) || PQgetlength(r, row, 0) != 4)
        return -1;
    return (int64_t)(int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
                              (uint32_t)p[3]);
}

/* The first row whose request number is at least want. */
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

int pgbatch_woke(const struct pg_result *result)
{
    const PGresult *r = (const PGresult *)result;

    return r && PQresultStatus(r) == PGRES_TUPLES_OK && PQnfields(r) == 2 && PQfformat(r, 0) == 1 &&
           PQftype(r, 0) == PGB_OID_INT4 && PQntuples(r) > 0 && row_req(r, 0) == 0;
}

int pgbatch_rows(const pgbatch *b, const struct pg_result *result, size_t i, int *first, int *n)
{
    const PGresult *r = (const PGresult *)result;
    int lo, hi;

    int base = pgbatch_woke(result); /* the wake row, first when there is one */

    if (!r || PQresultStatus(r) != PGRES_TUPLES_OK || PQnfields(r) != 2 || PQfformat(r, 0) != 1 ||
        PQfformat(r, 1) != 1 || PQftype(r, 0) != PGB_OID_INT4 || PQftype(r, 1) != PGB_OID_BYTEA ||
        PQntuples(r) < (int)b->nreqs + base)
        return SLUICE_EPARSE;
    if (row_req(r, base) != 1 || row_req(r, PQntuples(r) - 1) != (int64_t)b->nreqs)
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
