/* SPDX-License-Identifier: MIT */
/*
 * The encoder and decoder of the recur ops of the store script (redis_recur.h; the argument and
 * reply layout is described at the top of src/store/redis/recur.lua, which this file must match).
 *
 * Same arena-and-spans scheme as redis_tasks.c, and the same code: the prefix, the fixed keys,
 * the arena and the building of the command are redis_batch.c's, so the two calls cannot drift
 * apart in their layout; this file adds the recur ops' arguments and reads their replies.
 *
 * An occurrence's ADD arguments and keys are not written here a second time: the batch encodes
 * the occurrence with rtask_batch_add_add into a scratch task batch and copies that request's
 * keys and arguments (the tail of its command), so an occurrence reaches tasks.lua's ADD exactly
 * as TASK.ADD's task does.
 *
 * Invariants:
 * - a failed add leaves the batch exactly as it was (every size is rolled back);
 * - the fixed keys are tasks.lua's ten then recur.lua's three, built once with the batch.
 */
#include "store/redis_recur.h"

#include <hiredis.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "sluice/error.h"
#include "store/packed.h"
#include "store/redis_batch.h"

/* The fixed keys (recur.lua's KEYS 1..13), after "<prefix>:{all}:": the queue's, then ours. */
static const char *const fixed_names[] = {"clock", "seq",  "task", "body",  "links", "run", "wakes",
                                          "tkey",  "done", "msg",  "recur", "rdue",  "rseq"};
#define NFIXED (sizeof fixed_names / sizeof fixed_names[0])

/* The arguments of a FIRE before its occurrence's ADD arguments. */
#define FIRE_ARGS 6

struct rrecur_batch {
    rbatch c;             /* prefix, fixed keys, arena and command (redis_batch.h) */
    rtask_batch *scratch; /* encodes an occurrence's ADD (created at the first FIRE with one) */
};

/* ---- life cycle -------------------------------------------------------------------------- */

int rrecur_batch_new(const char *prefix, rrecur_batch **out)
{
    rrecur_batch *b;
    int rc;

    *out = NULL;
    b = alloc_calloc(1, sizeof *b);
    if (!b)
        return SLUICE_ENOMEM;
    rc = rbatch_init(&b->c, prefix, fixed_names, NFIXED);
    if (rc != SLUICE_OK) {
        rrecur_batch_free(b);
        return rc;
    }
    *out = b;
    return SLUICE_OK;
}

void rrecur_batch_reset(rrecur_batch *b)
{
    rbatch_reset(&b->c);
}

void rrecur_batch_free(rrecur_batch *b)
{
    if (!b)
        return;
    rbatch_fini(&b->c);
    rtask_batch_free(b->scratch);
    alloc_free(b);
}

void rrecur_batch_set_now(rrecur_batch *b, int64_t now_ns)
{
    b->c.now_ns = now_ns > 0 ? now_ns : 0;
}

size_t rrecur_batch_count(const rrecur_batch *b)
{
    return b->c.nreqs;
}

rrecur_op rrecur_batch_op(const rrecur_batch *b, size_t i)
{
    return (rrecur_op)rbatch_op(&b->c, i);
}

/* ---- requests ---------------------------------------------------------------------------- */

static int put(rrecur_batch *b, const char *s, size_t len)
{
    return packed_put(&b->c.a, &b->c.args, s, len);
}

/* Writes the head "<op> <nargs>" of a request of nargs arguments. */
static int put_head(rrecur_batch *b, char op, size_t nargs)
{
    return rbatch_put_fmt(&b->c, &b->c.args, "%c %zu", op, nargs);
}

/* Ends a request: records it, or rolls the batch back on rc. */
static int finish_req(rrecur_batch *b, rrecur_op op, rbatch_mark m, int rc)
{
    return rbatch_finish(&b->c, (int)op, m, rc);
}

int rrecur_spec_ok(const sluice_recurring_spec *spec)
{
    return spec && spec->name && *spec->name && spec->type && *spec->type &&
           (spec->interval_ns > 0) != (spec->cron != NULL) && spec->interval_ns >= 0 &&
           spec->start_ns >= 0 && spec->end_ns >= 0 && spec->max_runs >= 0 &&
           (spec->payload || spec->payload_len == 0) && (spec->key || spec->key_len == 0) &&
           (!spec->key || spec->key_len > 0);
}

int rrecur_fire_ok(const rrecur_fire *f)
{
    return f && f->name && f->namelen > 0 && f->version > 0 && f->missed >= 0 &&
           (!f->task || f->task->nlinks <= 65534);
}

int rrecur_batch_add_set(rrecur_batch *b, const sluice_recurring_spec *spec)
{
    rbatch_mark m = rbatch_mark_of(&b->c);
    int rc;

    if (!rrecur_spec_ok(spec))
        return SLUICE_EINVAL;
    rc = put_head(b, 'S', 10);
    if (rc == SLUICE_OK)
        rc = put(b, spec->name, strlen(spec->name));
    if (rc == SLUICE_OK)
        rc = put(b, spec->type, strlen(spec->type));
    if (rc == SLUICE_OK)
        rc = spec->payload ? put(b, spec->payload, spec->payload_len) : put(b, "{}", 2);
    if (rc == SLUICE_OK)
        rc = put(b, spec->key ? spec->key : "", spec->key_len);
    if (rc == SLUICE_OK)
        rc = put(b, spec->key ? "1" : "0", 1);
    if (rc == SLUICE_OK)
        rc = rbatch_put_fmt(&b->c, &b->c.args, "%" PRId64, spec->interval_ns);
    if (rc == SLUICE_OK)
        rc = put(b, spec->cron ? spec->cron : "", spec->cron ? strlen(spec->cron) : 0);
    if (rc == SLUICE_OK)
        rc = rbatch_put_fmt(&b->c, &b->c.args, "%" PRId64, spec->start_ns);
    if (rc == SLUICE_OK)
        rc = rbatch_put_fmt(&b->c, &b->c.args, "%" PRId64, spec->end_ns);
    if (rc == SLUICE_OK)
        rc = rbatch_put_fmt(&b->c, &b->c.args, "%" PRId64, spec->max_runs);
    return finish_req(b, RRECUR_SET, m, rc);
}

static int add_named(rrecur_batch *b, rrecur_op op, char word, const char *name, size_t namelen)
{
    rbatch_mark m = rbatch_mark_of(&b->c);
    int rc;

    if (!name || namelen == 0)
        return SLUICE_EINVAL;
    rc = put_head(b, word, 1);
    if (rc == SLUICE_OK)
        rc = put(b, name, namelen);
    return finish_req(b, op, m, rc);
}

int rrecur_batch_add_del(rrecur_batch *b, const char *name, size_t namelen)
{
    return add_named(b, RRECUR_DEL, 'D', name, namelen);
}

int rrecur_batch_add_info(rrecur_batch *b, const char *name, size_t namelen)
{
    return add_named(b, RRECUR_INFO, 'I', name, namelen);
}

int rrecur_batch_add_list(rrecur_batch *b, size_t max)
{
    rbatch_mark m = rbatch_mark_of(&b->c);
    int rc;

    if (max < 1 || max > RRECUR_LIST_MAX)
        return SLUICE_EINVAL;
    rc = put_head(b, 'L', 1);
    if (rc == SLUICE_OK)
        rc = rbatch_put_fmt(&b->c, &b->c.args, "%zu", max);
    return finish_req(b, RRECUR_LIST, m, rc);
}

/* Appends the keys and arguments of the occurrence t, as tasks.lua's ADD takes them: the tail of
 * the scratch batch's command (its request keys end the keys, its arguments end the command). */
static int put_occurrence(rrecur_batch *b, const rtask_add *t)
{
    size_t nargs = rtask_add_nargs(t), nkeys = 2 + 2 * t->nlinks;
    const char **argv;
    const size_t *argvlen;
    int argc = 0, rc = SLUICE_OK, idx;
    size_t kstart, astart;

    if (!b->scratch)
        rc = rtask_batch_new(b->c.prefix, &b->scratch);
    if (rc != SLUICE_OK)
        return rc;
    rtask_batch_reset(b->scratch);
    idx = rtask_batch_add_add(b->scratch, t);
    if (idx < 0)
        return idx;
    rc = rtask_batch_command(b->scratch, "-", &argc, &argv, &argvlen);
    if (rc != SLUICE_OK)
        return rc;
    /* ... keys (request keys last), "T2", now, "1", the two caps, "A <nargs>", the nargs
     * arguments. */
    if ((size_t)argc < 3 + nkeys + 6 + nargs)
        return SLUICE_EINVAL;
    astart = (size_t)argc - nargs;
    kstart = astart - 6 - nkeys;
    if (argvlen[astart - 1] < 2 || argv[astart - 1][0] != 'A')
        return SLUICE_EINVAL;
    for (size_t i = 0; i < nkeys && rc == SLUICE_OK; i++)
        rc = packed_put(&b->c.a, &b->c.keys, argv[kstart + i], argvlen[kstart + i]);
    for (size_t i = 0; i < nargs && rc == SLUICE_OK; i++)
        rc = put(b, argv[astart + i], argvlen[astart + i]);
    return rc;
}

int rrecur_batch_add_fire(rrecur_batch *b, const rrecur_fire *f)
{
    rbatch_mark m = rbatch_mark_of(&b->c);
    size_t nargs;
    int rc;

    if (!rrecur_fire_ok(f))
        return SLUICE_EINVAL;
    nargs = FIRE_ARGS + (f->task ? rtask_add_nargs(f->task) : 0);
    rc = put_head(b, 'F', nargs);
    if (rc == SLUICE_OK)
        rc = put(b, f->name, f->namelen);
    if (rc == SLUICE_OK)
        rc = rbatch_put_fmt(&b->c, &b->c.args, "%" PRIu64, f->version);
    if (rc == SLUICE_OK)
        rc = rbatch_put_fmt(&b->c, &b->c.args, "%" PRId64, f->expected_ns);
    if (rc == SLUICE_OK)
        rc = put(b, f->task ? "1" : "0", 1);
    if (rc == SLUICE_OK)
        rc = rbatch_put_fmt(&b->c, &b->c.args, "%" PRId64, f->next_ns);
    if (rc == SLUICE_OK)
        rc = rbatch_put_fmt(&b->c, &b->c.args, "%" PRId64, f->missed);
    if (rc == SLUICE_OK && f->task)
        rc = put_occurrence(b, f->task);
    return finish_req(b, RRECUR_FIRE, m, rc);
}

/* ---- the command ------------------------------------------------------------------------- */

int rrecur_batch_command(rrecur_batch *b, const char *sha, int *argc, const char ***argv,
                         const size_t **argvlen)
{
    return rbatch_command(&b->c, sha, "R1", argc, argv, argvlen);
}

/* ---- the answers' text (shared with pg_recur.c) ------------------------------------------ */

/* A time that is a store time or SLUICE_NEVER. */
static int time_field(packed_fields *f, int64_t *out)
{
    return packed_range(f, 0, INT64_MAX, out);
}

static int parse_answer(rrecur_op op, const char *s, size_t len, size_t nelems, rrecur_result *res)
{
    const char *w;
    size_t wlen;
    int64_t v = 0;
    uint64_t u = 0;
    packed_fields f;
    int rc = SLUICE_OK;

    packed_fields_init(&f, s, len);
    if (packed_next(&f, &w, &wlen) != SLUICE_OK || packed_i64(&f, &res->now_ns) != SLUICE_OK)
        return SLUICE_EPARSE;
    if (rbatch_word_is(w, wlen, "INVAL")) {
        if (packed_at_end(&f) || nelems != 1)
            return SLUICE_EPARSE;
        res->rc = SLUICE_EINVAL;
        res->msg = f.p;
        res->msglen = (size_t)(f.end - f.p);
        return SLUICE_OK;
    }
    if (rbatch_word_is(w, wlen, "NOTASK") || rbatch_word_is(w, wlen, "STALE")) {
        int stale = w[0] == 'S';

        if ((stale ? op != RRECUR_FIRE : (op != RRECUR_INFO && op != RRECUR_FIRE)) ||
            !packed_at_end(&f) || nelems != 1)
            return SLUICE_EPARSE;
        res->rc = stale ? SLUICE_ESTALE : SLUICE_ENOTFOUND;
        return SLUICE_OK;
    }
    if (!rbatch_word_is(w, wlen, "OK"))
        return SLUICE_EPARSE;
    if ((op == RRECUR_SET || op == RRECUR_DEL || op == RRECUR_FIRE) && nelems != 1)
        return SLUICE_EPARSE;
    switch (op) {
    case RRECUR_SET:
        rc = packed_u64(&f, &res->version);
        if (rc == SLUICE_OK && res->version == 0)
            rc = SLUICE_EPARSE;
        if (rc == SLUICE_OK)
            rc = time_field(&f, &res->next_ns);
        break;
    case RRECUR_DEL:
        rc = packed_range(&f, 0, 1, &v);
        res->deleted = (int)v;
        break;
    case RRECUR_INFO:
        res->nseries = 1;
        if (nelems != 1 + RRECUR_SERIES_ELEMS)
            rc = SLUICE_EPARSE;
        break;
    case RRECUR_LIST:
        rc = packed_range(&f, 0, RRECUR_LIST_MAX, &v);
        res->nseries = (size_t)v;
        if (rc == SLUICE_OK)
            rc = time_field(&f, &res->earliest_ns);
        if (rc == SLUICE_OK)
            rc = packed_range(&f, 0, 1, &v);
        res->more = (int)v;
        if (rc == SLUICE_OK && nelems != 1 + RRECUR_SERIES_ELEMS * res->nseries)
            rc = SLUICE_EPARSE;
        break;
    case RRECUR_FIRE:
        rc = packed_range(&f, 0, 1, &v);
        res->fired = (int)v;
        if (rc == SLUICE_OK)
            rc = packed_u64(&f, &u);
        res->id = u;
        if (rc == SLUICE_OK && (res->fired != 0) != (u != 0))
            rc = SLUICE_EPARSE;
        if (rc == SLUICE_OK)
            rc = packed_range(&f, 0, INT64_MAX, &res->runs);
        if (rc == SLUICE_OK)
            rc = packed_range(&f, 0, INT64_MAX, &res->skipped);
        if (rc == SLUICE_OK)
            rc = time_field(&f, &res->next_ns);
        break;
    default:
        rc = SLUICE_EPARSE;
        break;
    }
    if (rc != SLUICE_OK || !packed_at_end(&f))
        return SLUICE_EPARSE;
    return SLUICE_OK;
}

int rrecur_parse_answer(rrecur_op op, const char *s, size_t len, size_t nelems, rrecur_result *res)
{
    int rc;

    memset(res, 0, sizeof *res);
    rc = parse_answer(op, s, len, nelems, res);
    if (rc != SLUICE_OK)
        memset(res, 0, sizeof *res);
    return rc;
}

int rrecur_parse_series(const char *const e[RRECUR_SERIES_ELEMS],
                        const size_t elen[RRECUR_SERIES_ELEMS], rrecur_series *out)
{
    int64_t has_key = 0;
    packed_fields f;
    int rc;

    memset(out, 0, sizeof *out);
    for (size_t j = 0; j < RRECUR_SERIES_ELEMS; j++)
        if (!e[j])
            return SLUICE_EPARSE;
    packed_fields_init(&f, e[0], elen[0]);
    rc = packed_u64(&f, &out->version);
    if (rc == SLUICE_OK && out->version == 0)
        rc = SLUICE_EPARSE;
    if (rc == SLUICE_OK)
        rc = packed_range(&f, 0, 1, &has_key);
    if (rc == SLUICE_OK)
        rc = packed_range(&f, 0, INT64_MAX, &out->interval_ns);
    if (rc == SLUICE_OK)
        rc = packed_range(&f, 0, INT64_MAX, &out->start_ns);
    if (rc == SLUICE_OK)
        rc = packed_range(&f, 0, INT64_MAX, &out->end_ns);
    if (rc == SLUICE_OK)
        rc = packed_range(&f, 0, INT64_MAX, &out->max_runs);
    if (rc == SLUICE_OK)
        rc = packed_range(&f, 0, INT64_MAX, &out->runs);
    if (rc == SLUICE_OK)
        rc = packed_range(&f, 0, INT64_MAX, &out->skipped);
    if (rc == SLUICE_OK)
        rc = time_field(&f, &out->next_ns);
    if (rc == SLUICE_OK && !packed_at_end(&f))
        rc = SLUICE_EPARSE;
    out->name = e[1];
    out->namelen = elen[1];
    out->type = e[2];
    out->typelen = elen[2];
    out->payload = e[3];
    out->payload_len = elen[3];
    out->key = e[4];
    out->key_len = elen[4];
    out->cron = e[5];
    out->cronlen = elen[5];
    /* Exactly one schedule, as SET took it. */
    if (rc == SLUICE_OK && (out->interval_ns > 0) == (out->cronlen > 0))
        rc = SLUICE_EPARSE;
    if (rc == SLUICE_OK && (out->namelen == 0 || out->typelen == 0))
        rc = SLUICE_EPARSE;
    if (rc == SLUICE_OK && !has_key) {
        out->key = NULL;
        out->key_len = 0;
    }
    if (rc != SLUICE_OK)
        memset(out, 0, sizeof *out);
    return rc;
}

/* ---- the reply --------------------------------------------------------------------------- */

/* The RRECUR_SERIES_ELEMS elements of a series from e[0]. */
static int read_series(redisReply *const *e, rrecur_series *out)
{
    const char *s[RRECUR_SERIES_ELEMS];
    size_t len[RRECUR_SERIES_ELEMS];

    memset(out, 0, sizeof *out);
    for (size_t j = 0; j < RRECUR_SERIES_ELEMS; j++)
        if (rbatch_bulk(e[j], &s[j], &len[j]) != SLUICE_OK)
            return SLUICE_EPARSE;
    return rrecur_parse_series(s, len, out);
}

static int read_result(const rrecur_batch *b, const redisReply *reply, size_t i, rrecur_result *res)
{
    const redisReply *r;
    packed_fields f;
    int rc = rbatch_reply_head(&b->c, reply, i, &r, &f);

    if (rc != SLUICE_OK)
        return rc;
    rc = rrecur_parse_answer(rrecur_batch_op(b, i), f.p, (size_t)(f.end - f.p), r->elements, res);
    if (rc != SLUICE_OK)
        return rc;
    /* Every series is read once here, so that a reply is refused whole, never half-read. */
    for (size_t k = 0; k < res->nseries; k++) {
        rrecur_series x;

        if (read_series(r->element + 1 + RRECUR_SERIES_ELEMS * k, &x) != SLUICE_OK)
            return SLUICE_EPARSE;
    }
    return SLUICE_OK;
}

int rrecur_batch_result(const rrecur_batch *b, const struct redisReply *reply, size_t i,
                        rrecur_result *res)
{
    int rc;

    memset(res, 0, sizeof *res);
    if (i >= b->c.nreqs)
        return SLUICE_EINVAL;
    rc = read_result(b, reply, i, res);
    if (rc != SLUICE_OK)
        memset(res, 0, sizeof *res);
    return rc;
}

int rrecur_batch_series(const rrecur_batch *b, const struct redisReply *reply, size_t i, size_t k,
                        rrecur_series *out)
{
    rrecur_result res;
    int rc;

    memset(out, 0, sizeof *out);
    if (i >= b->c.nreqs ||
        (rrecur_batch_op(b, i) != RRECUR_LIST && rrecur_batch_op(b, i) != RRECUR_INFO))
        return SLUICE_EINVAL;
    rc = rrecur_batch_result(b, reply, i, &res);
    if (rc != SLUICE_OK)
        return rc;
    if (res.rc != SLUICE_OK || k >= res.nseries)
        return SLUICE_EINVAL;
    rc = read_series(reply->element[i]->element + 1 + RRECUR_SERIES_ELEMS * k, out);
    if (rc != SLUICE_OK)
        memset(out, 0, sizeof *out);
    return rc;
}
