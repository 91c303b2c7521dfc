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

/* The flag of a link in shadow mode on the wire (beside RTASK_LINK_REJECT and _SETTLE). */
#define PGT_LINK_SHADOW 4u
#include "store/packed.h"
#include "store/pg_batch.h"

struct pgt_batch {
    pgbatch c;                            /* the requests, the answer's rows (pg_batch.h) */
    char caps[2][24];                     /* max_tasks and max_parked in decimal ("0": none) */
    const char *values[PGT_CALL_NPARAMS]; /* pgbatch's two parameters, then the caps */
};

int pgt_batch_new(pgt_batch **out)
{
    pgt_batch *b = alloc_calloc(1, sizeof *b);

    *out = NULL;
    if (!b)
        return SLUICE_ENOMEM;
    pgt_batch_set_caps(b, 0, 0);
    *out = b;
    return SLUICE_OK;
}

void pgt_batch_set_caps(pgt_batch *b, uint64_t max_tasks, uint64_t max_parked)
{
    /* A cap past INT64_MAX is none: the function takes bigints. */
    snprintf(b->caps[0], sizeof b->caps[0], "%" PRIu64, max_tasks > INT64_MAX ? 0 : max_tasks);
    snprintf(b->caps[1], sizeof b->caps[1], "%" PRIu64, max_parked > INT64_MAX ? 0 : max_parked);
}

void pgt_batch_reset(pgt_batch *b)
{
    pgbatch_reset(&b->c);
}

void pgt_batch_free(pgt_batch *b)
{
    if (!b)
        return;
    pgbatch_fini(&b->c);
    alloc_free(b);
}

void pgt_batch_set_now(pgt_batch *b, int64_t now_ns)
{
    pgbatch_set_now(&b->c, now_ns);
}

size_t pgt_batch_count(const pgt_batch *b)
{
    return b->c.nreqs;
}

rtask_op pgt_batch_op(const pgt_batch *b, size_t i)
{
    return i < b->c.nreqs ? (rtask_op)b->c.ops[i] : (rtask_op)0;
}

static int add_link(packed_str *s, const rtask_link *l)
{
    char text[RLIM_DEF_TEXT_MAX];
    rlim_names nm;
    int64_t horizon;
    int rc;

    if (!rlim_link_ok(&l->lim, RLIM_DECIDE) || rlim_def_adaptive(l->lim.def) || l->lim.units < 1 ||
        (l->flags & ~(unsigned)(RTASK_LINK_REJECT | RTASK_LINK_SETTLE)) != 0)
        return SLUICE_EINVAL;
    rc = rlim_link_names(&l->lim, &nm);
    if (rc != SLUICE_OK)
        return rc;
    horizon = l->horizon_ns > 0 ? l->horizon_ns : l->lim.def->horizon_ns;
    rlim_def_text(l->lim.def, text, sizeof text);
    rc = pgbatch_put_fmt(s, "%s", text);
    /* A link in shadow mode travels as flag 4 (the definition's fields are counted): the
     * function stores its definition with the " s" the script's reads (011_taskshadow.sql). */
    if (rc == SLUICE_OK)
        rc = pgbatch_put_fmt(s, "%" PRId64 " %u %" PRId64, l->lim.units,
                             l->flags | (l->lim.shadow ? PGT_LINK_SHADOW : 0u),
                             horizon > 0 ? horizon : 0);
    if (rc == SLUICE_OK)
        rc = pgbatch_put_hex(s, nm.tag, nm.taglen);
    if (rc == SLUICE_OK)
        rc = pgbatch_put_hex(s, l->lim.limit_id, strlen(l->lim.limit_id));
    if (rc == SLUICE_OK)
        rc = pgbatch_put_hex(s, nm.key, nm.keylen);
    return rc;
}

int pgt_batch_add_add(pgt_batch *b, const rtask_add *a)
{
    size_t mark = b->c.body.len;
    packed_str *s = &b->c.body;
    int rc;

    /* No fair flows in 002's queue yet: the server refuses fairness: keys on PostgreSQL
     * (server_store_unsupported), so a fair task here would be filed FIFO unnoticed. */
    if (!rtask_add_ok(a) || a->fair)
        return SLUICE_EINVAL;
    rc = pgbatch_begin(&b->c, 'A');
    if (rc == SLUICE_OK)
        rc = pgbatch_put_hex(s, a->type, a->typelen);
    if (rc == SLUICE_OK)
        rc = a->payload ? pgbatch_put_hex(s, a->payload, a->payload_len)
                        : pgbatch_put_hex(s, "{}", 2);
    if (rc == SLUICE_OK)
        rc = pgbatch_put_hex(s, a->task_key, a->task_key ? a->task_key_len : 0);
    if (rc == SLUICE_OK)
        rc = pgbatch_put_fmt(s, "%d %" PRId64 " %" PRId64 " %" PRId64, a->task_key ? 1 : 0,
                             a->priority, a->delay_ns, a->lease_ns);
    if (rc == SLUICE_OK)
        rc = pgbatch_put_fmt(s, "%d %d %" PRId64 " %" PRId64 " %d %d", a->retry.max_attempts,
                             a->retry.backoff == SLUICE_BACKOFF_EXPONENTIAL ? 1 : 0,
                             a->retry.base_ns, a->retry.max_ns, a->retry.throttle_retries ? 1 : 0,
                             a->charge_redelivery ? 1 : 0);
    if (rc == SLUICE_OK)
        rc = pgbatch_put_fmt(s, "%" PRId64 " %zu", a->units > 0 ? a->units : 1, a->nlinks);
    for (size_t i = 0; i < a->nlinks && rc == SLUICE_OK; i++)
        rc = add_link(s, &a->links[i]);
    if (rc == SLUICE_OK && a->group_link > 0) /* a group slot: two more fields */
        rc = pgbatch_put_fmt(s, "%zu %" PRIu64, a->group_link, a->group_lease);
    return pgbatch_end(&b->c, (int)RTASK_ADD, mark, rc);
}

int pgt_batch_add_claim(pgt_batch *b, const rtask_claim *c)
{
    size_t mark = b->c.body.len;
    int rc;

    if (!rtask_claim_ok(c))
        return SLUICE_EINVAL;
    rc = pgbatch_begin(&b->c, 'C');
    if (rc == SLUICE_OK)
        rc = pgbatch_put_fmt(&b->c.body, "%zu %zu", c->count, c->ntypes);
    for (size_t i = 0; i < c->ntypes && rc == SLUICE_OK; i++)
        rc = pgbatch_put_hex(&b->c.body, c->types[i], c->typelens[i]);
    return pgbatch_end(&b->c, (int)RTASK_CLAIM, mark, rc);
}

static int add_done(pgt_batch *b, rtask_op op, const rtask_done *d)
{
    static const char words[] = {0, 'A', 'C', 'K', 'F', 'T', 'X', 'I'};
    size_t mark = b->c.body.len;
    int rc;

    /* The function's columns are bigint and int: narrower than the script's numbers. */
    if (!rtask_done_ok(op, d) || d->id > (uint64_t)INT64_MAX || d->attempt > INT32_MAX)
        return SLUICE_EINVAL;
    rc = pgbatch_begin(&b->c, words[op]);
    if (rc == SLUICE_OK)
        rc = pgbatch_put_fmt(&b->c.body, "%" PRIu64 " %" PRId64 " %" PRId64 " %d %" PRId64, d->id,
                             d->attempt, op == RTASK_ACK && d->cost >= 0 ? d->cost : -1,
                             op == RTASK_FAIL && d->mode == SLUICE_FAIL_MODE_DEAD ? 1 : 0,
                             op == RTASK_FAIL && d->retry_after_ns >= 0 ? d->retry_after_ns : -1);
    if (rc == SLUICE_OK)
        rc = pgbatch_put_hex(&b->c.body, d->message, d->message ? d->message_len : 0);
    if (rc == SLUICE_OK)
        rc = pgbatch_put_fmt(&b->c.body, "%d", op == RTASK_FAIL && d->message ? 1 : 0);
    return pgbatch_end(&b->c, (int)op, mark, rc);
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
    const char *const *two = NULL;
    int rc = pgbatch_params(&b->c, &two);

    *values = NULL;
    if (rc != SLUICE_OK)
        return rc;
    b->values[0] = two[0];
    b->values[1] = two[1];
    b->values[2] = b->caps[0];
    b->values[3] = b->caps[1];
    *values = b->values;
    return SLUICE_OK;
}

/* ---- the result -------------------------------------------------------------------------- */

int pgt_batch_result(const pgt_batch *b, const struct pg_result *result, size_t i,
                     rtask_result *res)
{
    const PGresult *r = (const PGresult *)result;
    int first, n, rc;

    memset(res, 0, sizeof *res);
    if (i >= b->c.nreqs)
        return SLUICE_EINVAL;
    rc = pgbatch_rows(&b->c, result, i, &first, &n);
    if (rc == SLUICE_OK)
        rc = rtask_parse_answer(b->c.ops[i], PQgetvalue(r, first, 1),
                                (size_t)PQgetlength(r, first, 1), (size_t)n, res);
    if (rc == SLUICE_OK && n != 1 &&
        (res->rc != SLUICE_OK || (b->c.ops[i] != RTASK_CLAIM && b->c.ops[i] != RTASK_INFO)))
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
    if (i >= b->c.nreqs || (b->c.ops[i] != RTASK_CLAIM && b->c.ops[i] != RTASK_INFO))
        return SLUICE_EINVAL;
    rc = pgt_batch_result(b, result, i, &res);
    if (rc != SLUICE_OK)
        return rc;
    if (res.rc != SLUICE_OK)
        return SLUICE_EINVAL;
    pgbatch_rows(&b->c, result, i, &first, &n); /* checked by pgt_batch_result */
    if (b->c.ops[i] == RTASK_INFO) {
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
