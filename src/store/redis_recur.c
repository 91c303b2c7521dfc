/* SPDX-License-Identifier: MIT */
/*
 * The encoder and decoder of the recur ops of the store script (redis_recur.h; the argument and
 * reply layout is described at the top of src/store/redis/recur.lua, which this file must match).
 *
 * Same arena-and-spans scheme as redis_tasks.c: every key's and argument's bytes in one arena,
 * remembered as (offset, length) spans, turned into pointers only when the command is built.
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
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/grow.h"
#include "sluice/error.h"
#include "store/packed.h"

/* The fixed keys (recur.lua's KEYS 1..13), after "<prefix>:{all}:": the queue's, then ours. */
static const char *const fixed_names[] = {"clock", "seq",  "task", "body",  "links", "run", "wakes",
                                          "tkey",  "done", "msg",  "recur", "rdue",  "rseq"};
#define NFIXED (sizeof fixed_names / sizeof fixed_names[0])

/* The arguments tasks.lua's ADD takes before its links, and per link. */
#define ADD_ARGS      16
#define ADD_LINK_ARGS 4
/* The arguments of a FIRE before its occurrence's ADD arguments. */
#define FIRE_ARGS 6

struct rrecur_batch {
    char *prefix;
    char *fixed[NFIXED];
    int64_t now_ns; /* injected time; 0: Redis TIME */
    rrecur_op *ops;
    size_t nreqs, capreqs;
    packed_arena a; /* every key's and argument's bytes */
    packed_list keys;
    packed_list args;
    const char **argv;
    size_t *argvlen;
    size_t capargv;
    rtask_batch *scratch; /* encodes an occurrence's ADD (created at the first FIRE with one) */
    char head[3][24];     /* numkeys, now, request count */
};

/* ---- life cycle -------------------------------------------------------------------------- */

static char *concat3(const char *a, const char *m, const char *z)
{
    size_t la = strlen(a), lm = strlen(m), lz = strlen(z);
    char *s = alloc_malloc(la + lm + lz + 1);

    if (!s)
        return NULL;
    memcpy(s, a, la);
    memcpy(s + la, m, lm);
    memcpy(s + la + lm, z, lz + 1);
    return s;
}

int rrecur_batch_new(const char *prefix, rrecur_batch **out)
{
    rrecur_batch *b;

    *out = NULL;
    if (!prefix)
        prefix = "sluice";
    if (strchr(prefix, '{') || strchr(prefix, '}'))
        return SLUICE_EINVAL;
    b = alloc_calloc(1, sizeof *b);
    if (!b)
        return SLUICE_ENOMEM;
    b->prefix = concat3(prefix, "", "");
    if (!b->prefix) {
        rrecur_batch_free(b);
        return SLUICE_ENOMEM;
    }
    for (size_t i = 0; i < NFIXED; i++) {
        b->fixed[i] = concat3(prefix, ":{all}:", fixed_names[i]);
        if (!b->fixed[i]) {
            rrecur_batch_free(b);
            return SLUICE_ENOMEM;
        }
    }
    *out = b;
    return SLUICE_OK;
}

void rrecur_batch_reset(rrecur_batch *b)
{
    b->nreqs = 0;
    b->a.len = 0;
    b->keys.n = 0;
    b->args.n = 0;
}

void rrecur_batch_free(rrecur_batch *b)
{
    if (!b)
        return;
    alloc_free(b->prefix);
    for (size_t i = 0; i < NFIXED; i++)
        alloc_free(b->fixed[i]);
    alloc_free(b->ops);
    alloc_free(b->a.buf);
    alloc_free(b->keys.v);
    alloc_free(b->args.v);
    alloc_free(b->argv);
    alloc_free(b->argvlen);
    rtask_batch_free(b->scratch);
    alloc_free(b);
}

void rrecur_batch_set_now(rrecur_batch *b, int64_t now_ns)
{
    b->now_ns = now_ns > 0 ? now_ns : 0;
}

size_t rrecur_batch_count(const rrecur_batch *b)
{
    return b->nreqs;
}

rrecur_op rrecur_batch_op(const rrecur_batch *b, size_t i)
{
    return i < b->nreqs ? b->ops[i] : (rrecur_op)0;
}

/* ---- requests ---------------------------------------------------------------------------- */

typedef struct mark {
    size_t len, nkeys, nargs;
} mark;

static mark mark_of(const rrecur_batch *b)
{
    mark m = {b->a.len, b->keys.n, b->args.n};

    return m;
}

static void roll_back(rrecur_batch *b, mark m)
{
    b->a.len = m.len;
    b->keys.n = m.nkeys;
    b->args.n = m.nargs;
}

static int put(rrecur_batch *b, const char *s, size_t len)
{
    return packed_put(&b->a, &b->args, s, len);
}

static int put_fmt(rrecur_batch *b, const char *fmt, ...)
{
    char text[64];
    va_list ap;
    int len;

    va_start(ap, fmt);
    len = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (len < 0 || (size_t)len >= sizeof text)
        return SLUICE_EINVAL;
    return packed_put(&b->a, &b->args, text, (size_t)len);
}

/* Writes the head "<op> <nargs>" of a request of nargs arguments. */
static int put_head(rrecur_batch *b, char op, size_t nargs)
{
    return put_fmt(b, "%c %zu", op, nargs);
}

/* Ends a request: records it, or rolls the batch back on rc. */
static int finish_req(rrecur_batch *b, rrecur_op op, mark m, int rc)
{
    if (rc == SLUICE_OK && b->nreqs >= (size_t)INT32_MAX)
        rc = SLUICE_EINVAL;
    if (rc == SLUICE_OK)
        rc = grow_array(&b->ops, &b->capreqs, b->nreqs + 1, sizeof(*b->ops), 16);
    if (rc != SLUICE_OK) {
        roll_back(b, m);
        return rc;
    }
    b->ops[b->nreqs] = op;
    return (int)b->nreqs++;
}

int rrecur_batch_add_set(rrecur_batch *b, const sluice_recurring_spec *spec)
{
    mark m = mark_of(b);
    int rc;

    if (!spec || !spec->name || !*spec->name || !spec->type || !*spec->type ||
        (spec->interval_ns > 0) == (spec->cron != NULL) || spec->interval_ns < 0 ||
        spec->start_ns < 0 || spec->end_ns < 0 || spec->max_runs < 0 ||
        (!spec->payload && spec->payload_len > 0) || (!spec->key && spec->key_len > 0) ||
        (spec->key && spec->key_len == 0))
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
        rc = put_fmt(b, "%" PRId64, spec->interval_ns);
    if (rc == SLUICE_OK)
        rc = put(b, spec->cron ? spec->cron : "", spec->cron ? strlen(spec->cron) : 0);
    if (rc == SLUICE_OK)
        rc = put_fmt(b, "%" PRId64, spec->start_ns);
    if (rc == SLUICE_OK)
        rc = put_fmt(b, "%" PRId64, spec->end_ns);
    if (rc == SLUICE_OK)
        rc = put_fmt(b, "%" PRId64, spec->max_runs);
    return finish_req(b, RRECUR_SET, m, rc);
}

static int add_named(rrecur_batch *b, rrecur_op op, char word, const char *name, size_t namelen)
{
    mark m = mark_of(b);
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
    mark m = mark_of(b);
    int rc;

    if (max < 1 || max > RRECUR_LIST_MAX)
        return SLUICE_EINVAL;
    rc = put_head(b, 'L', 1);
    if (rc == SLUICE_OK)
        rc = put_fmt(b, "%zu", max);
    return finish_req(b, RRECUR_LIST, m, rc);
}

/* Appends the keys and arguments of the occurrence t, as tasks.lua's ADD takes them: the tail of
 * the scratch batch's command (its request keys end the keys, its arguments end the command). */
static int put_occurrence(rrecur_batch *b, const rtask_add *t)
{
    size_t nargs = ADD_ARGS + ADD_LINK_ARGS * t->nlinks, nkeys = 2 + 2 * t->nlinks;
    const char **argv;
    const size_t *argvlen;
    int argc = 0, rc = SLUICE_OK, idx;
    size_t kstart, astart;

    if (!b->scratch)
        rc = rtask_batch_new(b->prefix, &b->scratch);
    if (rc != SLUICE_OK)
        return rc;
    rtask_batch_reset(b->scratch);
    idx = rtask_batch_add_add(b->scratch, t);
    if (idx < 0)
        return idx;
    rc = rtask_batch_command(b->scratch, "-", &argc, &argv, &argvlen);
    if (rc != SLUICE_OK)
        return rc;
    /* ... keys (request keys last), "T1", now, "1", "A <nargs>", the nargs arguments. */
    if ((size_t)argc < 3 + nkeys + 4 + nargs)
        return SLUICE_EINVAL;
    astart = (size_t)argc - nargs;
    kstart = astart - 4 - nkeys;
    if (argvlen[astart - 1] < 2 || argv[astart - 1][0] != 'A')
        return SLUICE_EINVAL;
    for (size_t i = 0; i < nkeys && rc == SLUICE_OK; i++)
        rc = packed_put(&b->a, &b->keys, argv[kstart + i], argvlen[kstart + i]);
    for (size_t i = 0; i < nargs && rc == SLUICE_OK; i++)
        rc = put(b, argv[astart + i], argvlen[astart + i]);
    return rc;
}

int rrecur_batch_add_fire(rrecur_batch *b, const rrecur_fire *f)
{
    mark m = mark_of(b);
    size_t nargs;
    int rc;

    if (!f || !f->name || f->namelen == 0 || f->version == 0 || f->missed < 0 ||
        (f->task && f->task->nlinks > 65534))
        return SLUICE_EINVAL;
    nargs = FIRE_ARGS + (f->task ? ADD_ARGS + ADD_LINK_ARGS * f->task->nlinks : 0);
    rc = put_head(b, 'F', nargs);
    if (rc == SLUICE_OK)
        rc = put(b, f->name, f->namelen);
    if (rc == SLUICE_OK)
        rc = put_fmt(b, "%" PRIu64, f->version);
    if (rc == SLUICE_OK)
        rc = put_fmt(b, "%" PRId64, f->expected_ns);
    if (rc == SLUICE_OK)
        rc = put(b, f->task ? "1" : "0", 1);
    if (rc == SLUICE_OK)
        rc = put_fmt(b, "%" PRId64, f->next_ns);
    if (rc == SLUICE_OK)
        rc = put_fmt(b, "%" PRId64, f->missed);
    if (rc == SLUICE_OK && f->task)
        rc = put_occurrence(b, f->task);
    return finish_req(b, RRECUR_FIRE, m, rc);
}

/* ---- the command ------------------------------------------------------------------------- */

int rrecur_batch_command(rrecur_batch *b, const char *sha, int *argc, const char ***argv,
                         const size_t **argvlen)
{
    size_t total = 3 + NFIXED + b->keys.n + 3 + b->args.n, k = 0;
    size_t cap1, cap2;
    int rc;

    *argc = 0;
    *argv = NULL;
    *argvlen = NULL;
    if (b->nreqs == 0)
        return SLUICE_EINVAL;
    if (total > (size_t)INT32_MAX)
        return SLUICE_ERANGE;
    cap1 = cap2 = b->capargv;
    rc = grow_array(&b->argv, &cap1, total, sizeof(const char *), 32);
    if (rc == SLUICE_OK)
        rc = grow_array(&b->argvlen, &cap2, total, sizeof(size_t), 32);
    if (rc == SLUICE_OK || cap1 != b->capargv || cap2 != b->capargv)
        b->capargv = cap1 < cap2 ? cap1 : cap2;
    if (rc != SLUICE_OK)
        return rc;
    snprintf(b->head[0], sizeof b->head[0], "%zu", NFIXED + b->keys.n);
    if (b->now_ns > 0)
        snprintf(b->head[1], sizeof b->head[1], "%" PRId64, b->now_ns);
    else
        b->head[1][0] = '\0';
    snprintf(b->head[2], sizeof b->head[2], "%zu", b->nreqs);
#define RRECUR_ARG(s, l)                                                                           \
    do {                                                                                           \
        b->argv[k] = (s);                                                                          \
        b->argvlen[k] = (l);                                                                       \
        k++;                                                                                       \
    } while (0)
    if (sha) {
        RRECUR_ARG("EVALSHA", 7);
        RRECUR_ARG(sha, strlen(sha));
    } else {
        size_t len;
        const char *text = rlim_script(&len);

        RRECUR_ARG("EVAL", 4);
        RRECUR_ARG(text, len);
    }
    RRECUR_ARG(b->head[0], strlen(b->head[0]));
    for (size_t i = 0; i < NFIXED; i++)
        RRECUR_ARG(b->fixed[i], strlen(b->fixed[i]));
    for (size_t i = 0; i < b->keys.n; i++)
        RRECUR_ARG(b->a.buf + b->keys.v[i].off, b->keys.v[i].len);
    RRECUR_ARG("R1", 2);
    RRECUR_ARG(b->head[1], strlen(b->head[1]));
    RRECUR_ARG(b->head[2], strlen(b->head[2]));
    for (size_t i = 0; i < b->args.n; i++)
        RRECUR_ARG(b->a.buf + b->args.v[i].off, b->args.v[i].len);
#undef RRECUR_ARG
    *argc = (int)k;
    *argv = b->argv;
    *argvlen = b->argvlen;
    return SLUICE_OK;
}

/* ---- the reply --------------------------------------------------------------------------- */

static int word_is(const char *s, size_t len, const char *w)
{
    return len == strlen(w) && memcmp(s, w, len) == 0;
}

/* The first element of request i's reply, as fields, and the request's reply. */
static int head_of(const rrecur_batch *b, const redisReply *reply, size_t i, const redisReply **r,
                   packed_fields *f)
{
    const redisReply *h;

    if (!reply || reply->type != REDIS_REPLY_ARRAY || reply->elements != b->nreqs)
        return SLUICE_EPARSE;
    *r = reply->element[i];
    if (!*r || (*r)->type != REDIS_REPLY_ARRAY || (*r)->elements < 1)
        return SLUICE_EPARSE;
    h = (*r)->element[0];
    if (!h || h->type != REDIS_REPLY_STRING)
        return SLUICE_EPARSE;
    packed_fields_init(f, h->str, h->len);
    return SLUICE_OK;
}

static int read_series(redisReply *const *e, rrecur_series *out);

/* A time that is a store time or SLUICE_NEVER. */
static int time_field(packed_fields *f, int64_t *out)
{
    return packed_range(f, 0, INT64_MAX, out);
}

static int read_result(const rrecur_batch *b, const redisReply *reply, size_t i, rrecur_result *res)
{
    rrecur_op op = b->ops[i];
    const redisReply *r;
    const char *w;
    size_t wlen;
    int64_t v = 0;
    uint64_t u = 0;
    packed_fields f;
    int rc = head_of(b, reply, i, &r, &f);

    if (rc != SLUICE_OK)
        return rc;
    if (packed_next(&f, &w, &wlen) != SLUICE_OK || packed_i64(&f, &res->now_ns) != SLUICE_OK)
        return SLUICE_EPARSE;
    if (word_is(w, wlen, "INVAL")) {
        if (packed_at_end(&f) || r->elements != 1)
            return SLUICE_EPARSE;
        res->rc = SLUICE_EINVAL;
        res->msg = f.p;
        res->msglen = (size_t)(f.end - f.p);
        return SLUICE_OK;
    }
    if (word_is(w, wlen, "NOTASK") || word_is(w, wlen, "STALE")) {
        int stale = w[0] == 'S';

        if ((stale ? op != RRECUR_FIRE : (op != RRECUR_INFO && op != RRECUR_FIRE)) ||
            !packed_at_end(&f) || r->elements != 1)
            return SLUICE_EPARSE;
        res->rc = stale ? SLUICE_ESTALE : SLUICE_ENOTFOUND;
        return SLUICE_OK;
    }
    if (!word_is(w, wlen, "OK"))
        return SLUICE_EPARSE;
    if ((op == RRECUR_SET || op == RRECUR_DEL || op == RRECUR_FIRE) && r->elements != 1)
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
        if (r->elements != 7)
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
        if (rc == SLUICE_OK && r->elements != 1 + 6 * res->nseries)
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
    }
    if (rc != SLUICE_OK || !packed_at_end(&f))
        return SLUICE_EPARSE;
    /* Every series is read once here, so that a reply is refused whole, never half-read. */
    for (size_t k = 0; k < res->nseries; k++) {
        rrecur_series x;

        if (read_series(r->element + 1 + 6 * k, &x) != SLUICE_OK)
            return SLUICE_EPARSE;
    }
    return SLUICE_OK;
}

int rrecur_batch_result(const rrecur_batch *b, const struct redisReply *reply, size_t i,
                        rrecur_result *res)
{
    int rc;

    memset(res, 0, sizeof *res);
    if (i >= b->nreqs)
        return SLUICE_EINVAL;
    rc = read_result(b, reply, i, res);
    if (rc != SLUICE_OK)
        memset(res, 0, sizeof *res);
    return rc;
}

static int bulk(const redisReply *r, const char **s, size_t *len)
{
    if (!r || r->type != REDIS_REPLY_STRING)
        return SLUICE_EPARSE;
    *s = r->str;
    *len = r->len;
    return SLUICE_OK;
}

/* The six elements of a series from e[0]. */
static int read_series(redisReply *const *e, rrecur_series *out)
{
    int64_t has_key = 0;
    packed_fields f;
    int rc;

    if (!e[0] || e[0]->type != REDIS_REPLY_STRING)
        return SLUICE_EPARSE;
    packed_fields_init(&f, e[0]->str, e[0]->len);
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
    if (rc == SLUICE_OK)
        rc = bulk(e[1], &out->name, &out->namelen);
    if (rc == SLUICE_OK)
        rc = bulk(e[2], &out->type, &out->typelen);
    if (rc == SLUICE_OK)
        rc = bulk(e[3], &out->payload, &out->payload_len);
    if (rc == SLUICE_OK)
        rc = bulk(e[4], &out->key, &out->key_len);
    if (rc == SLUICE_OK)
        rc = bulk(e[5], &out->cron, &out->cronlen);
    /* Exactly one schedule, as SET took it. */
    if (rc == SLUICE_OK && (out->interval_ns > 0) == (out->cronlen > 0))
        rc = SLUICE_EPARSE;
    if (rc == SLUICE_OK && (out->namelen == 0 || out->typelen == 0))
        rc = SLUICE_EPARSE;
    if (rc == SLUICE_OK && !has_key) {
        out->key = NULL;
        out->key_len = 0;
    }
    return rc;
}

int rrecur_batch_series(const rrecur_batch *b, const struct redisReply *reply, size_t i, size_t k,
                        rrecur_series *out)
{
    rrecur_result res;
    int rc;

    memset(out, 0, sizeof *out);
    if (i >= b->nreqs || (b->ops[i] != RRECUR_LIST && b->ops[i] != RRECUR_INFO))
        return SLUICE_EINVAL;
    rc = rrecur_batch_result(b, reply, i, &res);
    if (rc != SLUICE_OK)
        return rc;
    if (res.rc != SLUICE_OK || k >= res.nseries)
        return SLUICE_EINVAL;
    rc = read_series(reply->element[i]->element + 1 + 6 * k, out);
    if (rc != SLUICE_OK)
        memset(out, 0, sizeof *out);
    return rc;
}
