/* SPDX-License-Identifier: MIT */
/*
 * The encoder and decoder of the batched task function (pg_tasks.h; the request and answer
 * layout is described above sluice_tasks_call in src/store/pg/002_tasks.sql, which this file
 * must match).
 *
 * A batch keeps its requests as the body of one PostgreSQL array literal: each request is one
 * double-quoted element whose fields are separated by single spaces, every byte string (type,
 * payload, task key, message, a link's tag, limit id and key) written as lowercase hex, so that
 * any bytes travel in a text parameter and no field holds a space, a quote or a backslash.
 * Answers are read with redis_tasks.c's parsers (rtask_parse_*): the function answers with the
 * script's elements.
 *
 * Invariants:
 * - a failed add leaves the batch exactly as it was (its lengths are rolled back);
 * - a link's tag and key are redis_limits.c's rlim_link_names, so a task charges the limit row
 *   sluice_limits_call charges for the same (limit, key);
 * - the result is read in place (binary format): strings handed out point into it.
 */
#include "store/pg_tasks.h"

#include <inttypes.h>
#include <libpq-fe.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/grow.h"
#include "sluice/error.h"
#include "store/packed.h"

/* PostgreSQL's type oids of the result's columns (pg_type.h, stable across versions). */
#define PGT_OID_INT4  23
#define PGT_OID_BYTEA 17

struct pgt_batch {
    int64_t now_ns;  /* injected time; 0: clock_timestamp() */
    packed_str body; /* the array literal's body: "r1","r2",... */
    packed_str lit;  /* the literal sent: {body} */
    rtask_op *ops;
    size_t nreqs;
    size_t capops;
    char now[24];
    const char *values[PGT_CALL_NPARAMS];
};

/* A space, then a formatted field. */
static int put_fmt(packed_str *s, const char *fmt, ...)
{
    char text[RLIM_DEF_TEXT_MAX + 2];
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

int pgt_batch_new(pgt_batch **out)
{
    pgt_batch *b = alloc_calloc(1, sizeof *b);

    *out = NULL;
    if (!b)
        return SLUICE_ENOMEM;
    *out = b;
    return SLUICE_OK;
}

void pgt_batch_reset(pgt_batch *b)
{
    packed_str_cut(&b->body, 0);
    b->nreqs = 0;
}

void pgt_batch_free(pgt_batch *b)
{
    if (!b)
        return;
    alloc_free(b->body.p);
    alloc_free(b->lit.p);
    alloc_free(b->ops);
    alloc_free(b);
}

void pgt_batch_set_now(pgt_batch *b, int64_t now_ns)
{
    b->now_ns = now_ns > 0 ? now_ns : 0;
}

size_t pgt_batch_count(const pgt_batch *b)
{
    return b->nreqs;
}

rtask_op pgt_batch_op(const pgt_batch *b, size_t i)
{
    return i < b->nreqs ? b->ops[i] : (rtask_op)0;
}

/* Opens request `op` (a separating comma, the quote, the op letter); end_req closes it and
 * records it, or rolls the batch back to `mark` on rc. */
static int begin_req(pgt_batch *b, char op)
{
    char head[3] = {',', '"', op};

    return b->body.len > 0 ? packed_str_put(&b->body, head, 3)
                           : packed_str_put(&b->body, head + 1, 2);
}

static int end_req(pgt_batch *b, rtask_op op, size_t mark, int rc)
{
    if (rc == SLUICE_OK && b->nreqs >= (size_t)INT32_MAX)
        rc = SLUICE_EINVAL;
    if (rc == SLUICE_OK)
        rc = packed_str_put(&b->body, "\"", 1);
    if (rc == SLUICE_OK)
        rc = grow_array(&b->ops, &b->capops, b->nreqs + 1, sizeof(rtask_op), 16);
    if (rc != SLUICE_OK) {
        packed_str_cut(&b->body, mark);
        return rc;
    }
    b->ops[b->nreqs] = op;
    return (int)b->nreqs++;
}

static int add_link(packed_str *s, const rtask_link *l)
{
    char text[RLIM_DEF_TEXT_MAX];
    rlim_names nm;
    int64_t horizon;
    int rc;

    if (!rlim_link_ok(&l->lim, RLIM_DECIDE) || l->lim.units < 1 ||
        (l->flags & ~(unsigned)(RTASK_LINK_REJECT | RTASK_LINK_SETTLE)) != 0)
        return SLUICE_EINVAL;
    rc = rlim_link_names(&l->lim, &nm);
    if (rc != SLUICE_OK)
        return rc;
    horizon = l->horizon_ns > 0 ? l->horizon_ns : l->lim.def->horizon_ns;
    rlim_def_text(l->lim.def, text, sizeof text);
    rc = put_fmt(s, "%s", text);
    if (rc == SLUICE_OK)
        rc = put_fmt(s, "%" PRId64 " %u %" PRId64, l->lim.units, l->flags,
                     horizon > 0 ? horizon : 0);
    if (rc == SLUICE_OK)
        rc = put_hex(s, nm.tag, nm.taglen);
    if (rc == SLUICE_OK)
        rc = put_hex(s, l->lim.limit_id, strlen(l->lim.limit_id));
    if (rc == SLUICE_OK)
        rc = put_hex(s, nm.key, nm.keylen);
    return rc;
}

int pgt_batch_add_add(pgt_batch *b, const rtask_add *a)
{
    size_t mark = b->body.len;
    packed_str *s = &b->body;
    int rc;

    if (!rtask_add_ok(a))
        return SLUICE_EINVAL;
    rc = begin_req(b, 'A');
    if (rc == SLUICE_OK)
        rc = put_hex(s, a->type, a->typelen);
    if (rc == SLUICE_OK)
        rc = a->payload ? put_hex(s, a->payload, a->payload_len) : put_hex(s, "{}", 2);
    if (rc == SLUICE_OK)
        rc = put_hex(s, a->task_key, a->task_key ? a->task_key_len : 0);
    if (rc == SLUICE_OK)
        rc = put_fmt(s, "%d %" PRId64 " %" PRId64 " %" PRId64, a->task_key ? 1 : 0, a->priority,
                     a->delay_ns, a->lease_ns);
    if (rc == SLUICE_OK)
        rc = put_fmt(s, "%d %d %" PRId64 " %" PRId64 " %d %d", a->retry.max_attempts,
                     a->retry.backoff == SLUICE_BACKOFF_EXPONENTIAL ? 1 : 0, a->retry.base_ns,
                     a->retry.max_ns, a->retry.throttle_retries ? 1 : 0,
                     a->charge_redelivery ? 1 : 0);
    if (rc == SLUICE_OK)
        rc = put_fmt(s, "%" PRId64 " %zu", a->units > 0 ? a->units : 1, a->nlinks);
    for (size_t i = 0; i < a->nlinks && rc == SLUICE_OK; i++)
        rc = add_link(s, &a->links[i]);
    return end_req(b, RTASK_ADD, mark, rc);
}

int pgt_batch_add_claim(pgt_batch *b, const rtask_claim *c)
{
    size_t mark = b->body.len;
    int rc;

    if (!rtask_claim_ok(c))
        return SLUICE_EINVAL;
    rc = begin_req(b, 'C');
    if (rc == SLUICE_OK)
        rc = put_fmt(&b->body, "%zu %zu", c->count, c->ntypes);
    for (size_t i = 0; i < c->ntypes && rc == SLUICE_OK; i++)
        rc = put_hex(&b->body, c->types[i], c->typelens[i]);
    return end_req(b, RTASK_CLAIM, mark, rc);
}

static int add_done(pgt_batch *b, rtask_op op, const rtask_done *d)
{
    static const char words[] = {0, 'A', 'C', 'K', 'F', 'T', 'X', 'I'};
    size_t mark = b->body.len;
    int rc;

    /* The function's columns are bigint and int: narrower than the script's numbers. */
    if (!rtask_done_ok(op, d) || d->id > (uint64_t)INT64_MAX || d->attempt > INT32_MAX)
        return SLUICE_EINVAL;
    rc = begin_req(b, words[op]);
    if (rc == SLUICE_OK)
        rc = put_fmt(&b->body, "%" PRIu64 " %" PRId64 " %" PRId64 " %d %" PRId64, d->id, d->attempt,
                     op == RTASK_ACK && d->cost >= 0 ? d->cost : -1,
                     op == RTASK_FAIL && d->mode == SLUICE_FAIL_MODE_DEAD ? 1 : 0,
                     op == RTASK_FAIL && d->retry_after_ns >= 0 ? d->retry_after_ns : -1);
    if (rc == SLUICE_OK)
        rc = put_hex(&b->body, d->message, d->message ? d->message_len : 0);
    if (rc == SLUICE_OK)
        rc = put_fmt(&b->body, "%d", op == RTASK_FAIL && d->message ? 1 : 0);
    return end_req(b, op, mark, rc);
}

int pgt_batch_add_ack(pgt_batch *b, const rtask_done *d)
{
    return add_done(b, RTASK_ACK, d);
}

int pgt_batch_add_fail(pgt_batch *b, const rtask_done *d)
{
    return add_done(b, RTASK_FAIL, d);
}

int pgt_batch_add_touch(pgt_batch *b, const rtask_done *d)
{
    return add_done(b, RTASK_TOUCH, d);
}

int pgt_batch_add_cancel(pgt_batch *b, const rtask_done *d)
{
    return add_done(b, RTASK_CANCEL, d);
}

int pgt_batch_add_info(pgt_batch *b, const rtask_done *d)
{
    return add_done(b, RTASK_INFO, d);
}

int pgt_batch_params(pgt_batch *b, const char *const **values)
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
static int rows_of(const pgt_batch *b, const PGresult *r, size_t i, int *first, int *n)
{
    int lo, hi;

    if (!r || PQresultStatus(r) != PGRES_TUPLES_OK || PQnfields(r) != 2 || PQfformat(r, 0) != 1 ||
        PQfformat(r, 1) != 1 || PQftype(r, 0) != PGT_OID_INT4 || PQftype(r, 1) != PGT_OID_BYTEA ||
        PQntuples(r) < (int)b->nreqs)
        return SLUICE_EPARSE;
    if (row_req(r, PQntuples(r) - 1) != (int64_t)b->nreqs)
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

int pgt_batch_result(const pgt_batch *b, const struct pg_result *result, size_t i,
                     rtask_result *res)
{
    const PGresult *r = (const PGresult *)result;
    int first, n, rc;

    memset(res, 0, sizeof *res);
    if (i >= b->nreqs)
        return SLUICE_EINVAL;
    rc = rows_of(b, r, i, &first, &n);
    if (rc == SLUICE_OK)
        rc = rtask_parse_answer(b->ops[i], PQgetvalue(r, first, 1),
                                (size_t)PQgetlength(r, first, 1), (size_t)n, res);
    if (rc == SLUICE_OK && n != 1 &&
        (res->rc != SLUICE_OK || (b->ops[i] != RTASK_CLAIM && b->ops[i] != RTASK_INFO)))
        rc = SLUICE_EPARSE; /* a refusal, and every answer but a claim's or an info's, is one
                             * element */
    if (rc != SLUICE_OK)
        memset(res, 0, sizeof *res);
    return rc;
}

static void elem(const PGresult *r, int row, const char **s, size_t *len)
{
    *s = PQgetvalue(r, row, 1);
    *len = (size_t)PQgetlength(r, row, 1);
}

int pgt_batch_task(const pgt_batch *b, const struct pg_result *result, size_t i, size_t k,
                   rtask_task *out)
{
    const PGresult *r = (const PGresult *)result;
    rtask_result res;
    const char *s;
    size_t len;
    int first, n, has_key, has_msg, rc;

    memset(out, 0, sizeof *out);
    if (i >= b->nreqs || (b->ops[i] != RTASK_CLAIM && b->ops[i] != RTASK_INFO))
        return SLUICE_EINVAL;
    rc = pgt_batch_result(b, result, i, &res);
    if (rc != SLUICE_OK)
        return rc;
    if (res.rc != SLUICE_OK)
        return SLUICE_EINVAL;
    rows_of(b, r, i, &first, &n); /* checked by pgt_batch_result */
    if (b->ops[i] == RTASK_INFO) {
        if (k != 0)
            return SLUICE_EINVAL;
        elem(r, first, &s, &len);
        rc = rtask_parse_info(s, len, out, &has_key, &has_msg);
        if (rc != SLUICE_OK)
            return rc;
        elem(r, first + 1, &out->type, &out->typelen);
        elem(r, first + 2, &out->payload, &out->payload_len);
        if (has_key)
            elem(r, first + 3, &out->task_key, &out->task_key_len);
        if (has_msg)
            elem(r, first + 4, &out->fail_message, &out->fail_message_len);
        return SLUICE_OK;
    }
    if (k >= res.ndelivered)
        return SLUICE_EINVAL;
    elem(r, first + 1 + 3 * (int)k, &s, &len);
    rc = rtask_parse_delivery(s, len, out);
    if (rc != SLUICE_OK)
        return rc;
    elem(r, first + 2 + 3 * (int)k, &out->type, &out->typelen);
    elem(r, first + 3 + 3 * (int)k, &out->payload, &out->payload_len);
    return SLUICE_OK;
}
