/* SPDX-License-Identifier: MIT */
/*
 * The encoder and decoder of the task ops of the store script (redis_tasks.h; the argument and
 * reply layout is described at the top of src/store/redis/tasks.lua, which this file must match).
 *
 * A batch keeps every argument's bytes in one arena and remembers them as (offset, length)
 * spans, keys and arguments apart (EVALSHA wants all keys before all arguments while requests
 * come one at a time); rtask_batch_command turns spans into pointers only when the command is
 * sent, so the arena may move while requests are added. The queue's ten fixed keys are built
 * once, with the batch. That part is redis_batch.c's, shared with the recur encoder.
 *
 * Invariants:
 * - a failed add leaves the batch exactly as it was (every size is rolled back);
 * - a link's state and clock keys are redis_limits.c's (rlim_link_keys), so a task charges the
 *   state THROTTLE charges;
 * - a priority travels twice: in decimal (for TASK.INFO) and as a code of 16 hex digits whose
 *   byte order is the urgency order (higher priority first), so Redis sorts tasks exactly.
 */
#include "store/redis_tasks.h"

#include <hiredis.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "sluice/error.h"
#include "store/packed.h"
#include "store/redis_batch.h"

/* The queue's fixed keys (tasks.lua's KEYS 1..10), after "<prefix>:{all}:". */
static const char *const fixed_names[] = {"clock", "seq",   "task", "body", "links",
                                          "run",   "wakes", "tkey", "done", "msg"};
#define NFIXED (sizeof fixed_names / sizeof fixed_names[0])

struct rtask_batch {
    rbatch c; /* prefix, fixed keys, arena and command (redis_batch.h) */
    char *channel;
};

/* ---- the arena --------------------------------------------------------------------------- */

static int put_str(rtask_batch *b, packed_list *list, const char *s)
{
    return packed_put(&b->c.a, list, s, strlen(s));
}

/* "<prefix>:{all}:<what><name>" as a key. */
static int put_queue_key(rtask_batch *b, const char *what, const char *name, size_t namelen)
{
    packed_piece pc[4] = {
        {b->c.prefix, strlen(b->c.prefix)}, {":{all}:", 7}, {what, strlen(what)}, {name, namelen}};

    return packed_put_pieces(&b->c.a, &b->c.keys, pc, 4);
}

/* ---- life cycle -------------------------------------------------------------------------- */

int rtask_batch_new(const char *prefix, rtask_batch **out)
{
    rtask_batch *b;
    int rc;

    *out = NULL;
    b = alloc_calloc(1, sizeof *b);
    if (!b)
        return SLUICE_ENOMEM;
    rc = rbatch_init(&b->c, prefix, fixed_names, NFIXED);
    if (rc == SLUICE_OK) {
        b->c.nextra = 2;
        rtask_batch_set_caps(b, 0, 0);
        b->channel = rbatch_concat3(b->c.prefix, ":{all}:", "wake");
        if (!b->channel)
            rc = SLUICE_ENOMEM;
    }
    if (rc != SLUICE_OK) {
        rtask_batch_free(b);
        return rc;
    }
    *out = b;
    return SLUICE_OK;
}

void rtask_batch_reset(rtask_batch *b)
{
    rbatch_reset(&b->c);
}

void rtask_batch_free(rtask_batch *b)
{
    if (!b)
        return;
    rbatch_fini(&b->c);
    alloc_free(b->channel);
    alloc_free(b);
}

void rtask_batch_set_now(rtask_batch *b, int64_t now_ns)
{
    b->c.now_ns = now_ns > 0 ? now_ns : 0;
}

void rtask_batch_set_caps(rtask_batch *b, uint64_t max_tasks, uint64_t max_parked)
{
    snprintf(b->c.extra[0], sizeof b->c.extra[0], "%" PRIu64, max_tasks);
    snprintf(b->c.extra[1], sizeof b->c.extra[1], "%" PRIu64, max_parked);
}

size_t rtask_batch_count(const rtask_batch *b)
{
    return b->c.nreqs;
}

rtask_op rtask_batch_op(const rtask_batch *b, size_t i)
{
    return (rtask_op)rbatch_op(&b->c, i);
}

const char *rtask_wake_channel(const rtask_batch *b)
{
    return b->channel;
}

/* ---- requests ---------------------------------------------------------------------------- */

/* Ends a request: records it, or rolls the batch back on rc. */
static int finish_req(rtask_batch *b, rtask_op op, rbatch_mark m, int rc)
{
    return rbatch_finish(&b->c, (int)op, m, rc);
}

/* The head "<op> <nargs>" is written first with a placeholder count and patched at the end:
 * its text has a fixed width so that the patch never moves the arena. */
static int put_head(rtask_batch *b, char op, size_t *at)
{
    char text[16];
    int len = snprintf(text, sizeof text, "%c %010u", op, 0u);

    *at = b->c.args.n;
    return packed_put(&b->c.a, &b->c.args, text, (size_t)len);
}

static void patch_head(rtask_batch *b, size_t at)
{
    packed_span *h = &b->c.args.v[at];
    size_t nargs = b->c.args.n - at - 1;
    char *p = b->c.a.buf + h->off;
    char text[16];
    int len = snprintf(text, sizeof text, "%c %zu", p[0], nargs);

    /* Shorter than the placeholder: the span shrinks (the arena keeps the tail bytes unused). */
    memcpy(p, text, (size_t)len + 1);
    h->len = (size_t)len;
}

/* The urgency code of a priority: 16 hex digits, smaller for a higher priority. */
static void priority_code(int64_t priority, char out[17])
{
    uint64_t u = (uint64_t)priority ^ UINT64_C(0x8000000000000000);

    snprintf(out, 17, "%016" PRIx64, ~u);
}

int rtask_add_ok(const rtask_add *a)
{
    return a && a->type && a->typelen > 0 && (a->payload || a->payload_len == 0) &&
           (a->task_key || a->task_key_len == 0) && (!a->task_key || a->task_key_len > 0) &&
           (a->links || a->nlinks == 0) && a->nlinks <= 65534 && a->delay_ns >= 0 &&
           a->units >= 0 && a->lease_ns > 0 && a->retry.max_attempts >= 1 &&
           a->retry.base_ns >= 0 && a->retry.max_ns >= 0 && a->group_link <= a->nlinks &&
           (a->group_link == 0 ||
            (a->group_lease > 0 &&
             a->links[a->group_link - 1].lim.def->kind == SLUICE_CONCURRENCY)) &&
           (!a->fair || (a->fair_units >= 1 && (a->tenant || a->tenant_len == 0)));
}

/* The arguments of an ADD: 16 fixed, 4 per link, then the group slot's two (written "0" "0"
 * when only the fair three follow). */
#define ADD_ARGS       16
#define ADD_LINK_ARGS  4
#define ADD_GROUP_ARGS 2
#define ADD_FAIR_ARGS  3

size_t rtask_add_nargs(const rtask_add *a)
{
    size_t n = ADD_ARGS + ADD_LINK_ARGS * a->nlinks;

    if (a->group_link > 0 || a->fair)
        n += ADD_GROUP_ARGS;
    return a->fair ? n + ADD_FAIR_ARGS : n;
}

int rtask_claim_ok(const rtask_claim *c)
{
    if (!c || !c->types || !c->typelens || c->ntypes < 1 || c->ntypes > 1024 || c->count < 1 ||
        c->count > RTASK_CLAIM_MAX)
        return 0;
    for (size_t i = 0; i < c->ntypes; i++)
        if (!c->types[i] || c->typelens[i] == 0)
            return 0;
    return 1;
}

int rtask_done_ok(rtask_op op, const rtask_done *d)
{
    if (!d || d->id == 0 || d->attempt < 0 || (!d->message && d->message_len > 0))
        return 0;
    return op != RTASK_FAIL ||
           ((d->mode == SLUICE_FAIL_MODE_RETRY || d->mode == SLUICE_FAIL_MODE_DEAD) &&
            (d->mode != SLUICE_FAIL_MODE_DEAD || d->retry_after_ns < 0));
}

static int add_link(rtask_batch *b, const rtask_link *l)
{
    char text[RLIM_DEF_TEXT_MAX];
    char *sk = NULL, *ck = NULL;
    size_t sklen, cklen;
    int64_t horizon;
    int rc = rlim_link_keys(b->c.prefix, &l->lim, &sk, &sklen, &ck, &cklen);

    if (rc != SLUICE_OK)
        return rc;
    if (l->lim.units < 1 || (l->flags & ~(unsigned)(RTASK_LINK_REJECT | RTASK_LINK_SETTLE)) != 0)
        rc = SLUICE_EINVAL;
    horizon = l->horizon_ns > 0 ? l->horizon_ns : l->lim.def->horizon_ns;
    if (rc == SLUICE_OK)
        rc = packed_put(&b->c.a, &b->c.args, text,
                        (size_t)rlim_link_def_text(&l->lim, text, sizeof text));
    if (rc == SLUICE_OK)
        rc = rbatch_put_fmt(&b->c, &b->c.args, "%" PRId64, l->lim.units);
    if (rc == SLUICE_OK)
        rc = rbatch_put_fmt(&b->c, &b->c.args, "%u", l->flags);
    if (rc == SLUICE_OK)
        rc = rbatch_put_fmt(&b->c, &b->c.args, "%" PRId64, horizon > 0 ? horizon : 0);
    if (rc == SLUICE_OK)
        rc = packed_put(&b->c.a, &b->c.keys, sk, sklen);
    if (rc == SLUICE_OK)
        rc = packed_put(&b->c.a, &b->c.keys, ck, cklen);
    alloc_free(sk);
    alloc_free(ck);
    return rc;
}

int rtask_batch_add_add(rtask_batch *b, const rtask_add *a)
{
    rbatch_mark m = rbatch_mark_of(&b->c);
    char code[17];
    size_t head;
    int rc;

    if (!rtask_add_ok(a))
        return SLUICE_EINVAL;
    priority_code(a->priority, code);
    rc = put_head(b, 'A', &head);
    if (rc == SLUICE_OK)
        rc = packed_put(&b->c.a, &b->c.args, a->type, a->typelen);
    if (rc == SLUICE_OK)
        rc = a->payload ? packed_put(&b->c.a, &b->c.args, a->payload, a->payload_len)
                        : put_str(b, &b->c.args, "{}");
    if (rc == SLUICE_OK)
        rc = packed_put(&b->c.a, &b->c.args, a->task_key ? a->task_key : "", a->task_key_len);
    if (rc == SLUICE_OK)
        rc = put_str(b, &b->c.args, a->task_key ? "1" : "0");
    if (rc == SLUICE_OK)
        rc = put_str(b, &b->c.args, code);
    if (rc == SLUICE_OK)
        rc = rbatch_put_fmt(&b->c, &b->c.args, "%" PRId64, a->priority);
    if (rc == SLUICE_OK)
        rc = rbatch_put_fmt(&b->c, &b->c.args, "%" PRId64, a->delay_ns);
    if (rc == SLUICE_OK)
        rc = rbatch_put_fmt(&b->c, &b->c.args, "%" PRId64, a->lease_ns);
    if (rc == SLUICE_OK)
        rc = rbatch_put_fmt(&b->c, &b->c.args, "%d", a->retry.max_attempts);
    if (rc == SLUICE_OK)
        rc = put_str(b, &b->c.args, a->retry.backoff == SLUICE_BACKOFF_EXPONENTIAL ? "1" : "0");
    if (rc == SLUICE_OK)
        rc = rbatch_put_fmt(&b->c, &b->c.args, "%" PRId64, a->retry.base_ns);
    if (rc == SLUICE_OK)
        rc = rbatch_put_fmt(&b->c, &b->c.args, "%" PRId64, a->retry.max_ns);
    if (rc == SLUICE_OK)
        rc = put_str(b, &b->c.args, a->retry.throttle_retries ? "1" : "0");
    if (rc == SLUICE_OK)
        rc = put_str(b, &b->c.args, a->charge_redelivery ? "1" : "0");
    if (rc == SLUICE_OK)
        rc = rbatch_put_fmt(&b->c, &b->c.args, "%" PRId64, a->units > 0 ? a->units : 1);
    if (rc == SLUICE_OK)
        rc = rbatch_put_fmt(&b->c, &b->c.args, "%zu", a->nlinks);
    if (rc == SLUICE_OK)
        rc = put_queue_key(b, "ready:", a->type, a->typelen);
    if (rc == SLUICE_OK)
        rc = put_queue_key(b, "delayed:", a->type, a->typelen);
    for (size_t i = 0; i < a->nlinks && rc == SLUICE_OK; i++)
        rc = add_link(b, &a->links[i]);
    if (rc == SLUICE_OK && (a->group_link > 0 || a->fair)) { /* a group slot, or "0" "0" */
        rc = rbatch_put_fmt(&b->c, &b->c.args, "%zu", a->group_link);
        if (rc == SLUICE_OK)
            rc = rbatch_put_fmt(&b->c, &b->c.args, "%" PRIu64, a->group_lease);
    }
    if (rc == SLUICE_OK && a->fair) { /* its tenant's flow: "1", the tenant, its turn's units */
        rc = put_str(b, &b->c.args, "1");
        if (rc == SLUICE_OK)
            rc = packed_put(&b->c.a, &b->c.args, a->tenant ? a->tenant : "", a->tenant_len);
        if (rc == SLUICE_OK)
            rc = rbatch_put_fmt(&b->c, &b->c.args, "%" PRId64, a->fair_units);
    }
    if (rc == SLUICE_OK)
        patch_head(b, head);
    return finish_req(b, RTASK_ADD, m, rc);
}

int rtask_batch_add_claim(rtask_batch *b, const rtask_claim *c)
{
    rbatch_mark m = rbatch_mark_of(&b->c);
    size_t head;
    int rc;

    if (!rtask_claim_ok(c))
        return SLUICE_EINVAL;
    rc = put_head(b, 'C', &head);
    if (rc == SLUICE_OK)
        rc = rbatch_put_fmt(&b->c, &b->c.args, "%zu", c->count);
    if (rc == SLUICE_OK)
        rc = rbatch_put_fmt(&b->c, &b->c.args, "%zu", c->ntypes);
    for (size_t i = 0; i < c->ntypes && rc == SLUICE_OK; i++) {
        rc = packed_put(&b->c.a, &b->c.args, c->types[i], c->typelens[i]);
        if (rc == SLUICE_OK)
            rc = put_queue_key(b, "ready:", c->types[i], c->typelens[i]);
        if (rc == SLUICE_OK)
            rc = put_queue_key(b, "delayed:", c->types[i], c->typelens[i]);
    }
    if (rc == SLUICE_OK)
        patch_head(b, head);
    return finish_req(b, RTASK_CLAIM, m, rc);
}

static int add_done(rtask_batch *b, rtask_op op, const rtask_done *d)
{
    static const char words[] = {0, 'A', 'C', 'K', 'F', 'T', 'X', 'I'};
    rbatch_mark m = rbatch_mark_of(&b->c);
    size_t head;
    int rc;

    if (!rtask_done_ok(op, d))
        return SLUICE_EINVAL;
    rc = put_head(b, words[op], &head);
    if (rc == SLUICE_OK)
        rc = rbatch_put_fmt(&b->c, &b->c.args, "%" PRIu64, d->id);
    if (rc == SLUICE_OK)
        rc = rbatch_put_fmt(&b->c, &b->c.args, "%" PRId64, d->attempt);
    if (rc == SLUICE_OK)
        rc = rbatch_put_fmt(&b->c, &b->c.args, "%" PRId64,
                            op == RTASK_ACK && d->cost >= 0 ? d->cost : -1);
    if (rc == SLUICE_OK)
        rc = put_str(b, &b->c.args,
                     op == RTASK_FAIL && d->mode == SLUICE_FAIL_MODE_DEAD ? "1" : "0");
    if (rc == SLUICE_OK)
        rc = rbatch_put_fmt(&b->c, &b->c.args, "%" PRId64,
                            op == RTASK_FAIL && d->retry_after_ns >= 0 ? d->retry_after_ns : -1);
    if (rc == SLUICE_OK)
        rc = packed_put(&b->c.a, &b->c.args, d->message ? d->message : "",
                        d->message ? d->message_len : 0);
    if (rc == SLUICE_OK)
        rc = put_str(b, &b->c.args, op == RTASK_FAIL && d->message ? "1" : "0");
    if (rc == SLUICE_OK)
        patch_head(b, head);
    return finish_req(b, op, m, rc);
}

int rtask_batch_add_ack(rtask_batch *b, const rtask_done *d)
{
    return add_done(b, RTASK_ACK, d);
}

int rtask_batch_add_fail(rtask_batch *b, const rtask_done *d)
{
    return add_done(b, RTASK_FAIL, d);
}

int rtask_batch_add_touch(rtask_batch *b, const rtask_done *d)
{
    return add_done(b, RTASK_TOUCH, d);
}

int rtask_batch_add_cancel(rtask_batch *b, const rtask_done *d)
{
    return add_done(b, RTASK_CANCEL, d);
}

int rtask_batch_add_info(rtask_batch *b, const rtask_done *d)
{
    return add_done(b, RTASK_INFO, d);
}

/* ---- the command ------------------------------------------------------------------------- */

int rtask_batch_command(rtask_batch *b, const char *sha, int *argc, const char ***argv,
                        const size_t **argvlen)
{
    return rbatch_command(&b->c, sha, "T2", argc, argv, argvlen);
}

/* ---- the reply --------------------------------------------------------------------------- */

static int state_attempt(packed_fields *f, rtask_result *res)
{
    int64_t st = 0, at = 0;
    int rc = packed_range(f, SLUICE_TASK_QUEUED, SLUICE_TASK_CANCELLED, &st);

    if (rc == SLUICE_OK)
        rc = packed_range(f, 0, INT32_MAX, &at);
    res->state = (sluice_task_state)st;
    res->attempt = (int)at;
    return rc;
}

int rtask_parse_answer(rtask_op op, const char *s, size_t len, size_t nelems, rtask_result *res)
{
    const char *w;
    size_t wlen;
    int64_t v = 0;
    packed_fields f;
    int rc;

    memset(res, 0, sizeof *res);
    packed_fields_init(&f, s, len);
    if (packed_next(&f, &w, &wlen) != SLUICE_OK || packed_i64(&f, &res->now_ns) != SLUICE_OK)
        return SLUICE_EPARSE;
    if (rbatch_word_is(w, wlen, "INVAL")) {
        if (packed_at_end(&f))
            return SLUICE_EPARSE;
        res->rc = SLUICE_EINVAL;
        res->msg = f.p;
        res->msglen = (size_t)(f.end - f.p);
        return SLUICE_OK;
    }
    if (rbatch_word_is(w, wlen, "NOTASK")) {
        res->rc = SLUICE_ENOTFOUND;
        return op != RTASK_ADD && op != RTASK_CLAIM && packed_at_end(&f) ? SLUICE_OK
                                                                         : SLUICE_EPARSE;
    }
    if (op == RTASK_ADD && rbatch_word_is(w, wlen, "NOLEASE")) {
        res->rc = SLUICE_ESTALE; /* the group's lease is not live */
        return packed_at_end(&f) ? SLUICE_OK : SLUICE_EPARSE;
    }
    if (rbatch_word_is(w, wlen, "NOLEASE") || rbatch_word_is(w, wlen, "INUSE")) {
        int nolease = w[0] == 'N';

        if (nolease ? (op != RTASK_ACK && op != RTASK_FAIL && op != RTASK_TOUCH)
                    : op != RTASK_CANCEL)
            return SLUICE_EPARSE;
        res->rc = nolease ? SLUICE_ESTATE : SLUICE_EBUSY;
        rc = state_attempt(&f, res);
        return rc == SLUICE_OK && packed_at_end(&f) ? SLUICE_OK : SLUICE_EPARSE;
    }
    if (rbatch_word_is(w, wlen, "BUSY")) {
        const char *which;
        size_t whichlen;

        if (op != RTASK_ADD || packed_next(&f, &which, &whichlen) != SLUICE_OK ||
            !packed_at_end(&f))
            return SLUICE_EPARSE;
        if (rbatch_word_is(which, whichlen, "parked"))
            res->busy_parked = 1;
        else if (!rbatch_word_is(which, whichlen, "tasks"))
            return SLUICE_EPARSE;
        res->rc = SLUICE_EBUSY;
        return SLUICE_OK;
    }
    if (rbatch_word_is(w, wlen, "EXISTS")) {
        if (op != RTASK_ADD || packed_range(&f, 1, INT64_MAX, &v) != SLUICE_OK ||
            !packed_at_end(&f))
            return SLUICE_EPARSE;
        res->rc = SLUICE_EEXIST;
        res->id = (uint64_t)v;
        return SLUICE_OK;
    }
    if (!rbatch_word_is(w, wlen, "OK"))
        return SLUICE_EPARSE;
    switch (op) {
    case RTASK_ADD:
        rc = packed_range(&f, 1, INT64_MAX, &v);
        res->id = (uint64_t)v;
        if (rc == SLUICE_OK)
            rc = packed_range(&f, 0, 1, &v);
        res->replaced = (int)v;
        break;
    case RTASK_CLAIM:
        rc = packed_range(&f, 0, RTASK_CLAIM_MAX, &v);
        res->ndelivered = (size_t)v;
        if (rc == SLUICE_OK)
            rc = packed_range(&f, 0, INT64_MAX, &v);
        res->nfailed = (size_t)v;
        if (rc == SLUICE_OK)
            rc = packed_range(&f, 0, INT64_MAX, &res->next_wake_ns);
        if (rc == SLUICE_OK)
            rc = packed_range(&f, 0, 1, &v);
        res->more = (int)v;
        if (rc == SLUICE_OK && nelems != 1 + 3 * res->ndelivered)
            rc = SLUICE_EPARSE;
        break;
    case RTASK_ACK:
    case RTASK_FAIL:
        rc = state_attempt(&f, res);
        break;
    case RTASK_TOUCH:
        rc = state_attempt(&f, res);
        if (rc == SLUICE_OK)
            rc = packed_range(&f, 0, INT64_MAX, &res->lease_until_ns);
        break;
    case RTASK_CANCEL:
        rc = state_attempt(&f, res);
        if (rc == SLUICE_OK)
            rc = packed_range(&f, 0, 1, &v);
        res->cancelled = (int)v;
        break;
    case RTASK_INFO:
        rc = packed_range(&f, 1, INT64_MAX, &v);
        res->id = (uint64_t)v;
        if (rc == SLUICE_OK)
            rc = state_attempt(&f, res);
        return rc == SLUICE_OK && nelems == 5 ? SLUICE_OK : SLUICE_EPARSE;
    default:
        return SLUICE_EPARSE;
    }
    return rc == SLUICE_OK && packed_at_end(&f) ? SLUICE_OK : SLUICE_EPARSE;
}

static int read_result(const rtask_batch *b, const redisReply *reply, size_t i, rtask_result *res)
{
    const redisReply *r;
    packed_fields f;
    int rc = rbatch_reply_head(&b->c, reply, i, &r, &f);

    if (rc != SLUICE_OK)
        return rc;
    return rtask_parse_answer(rtask_batch_op(b, i), f.p, (size_t)(f.end - f.p), r->elements, res);
}

int rtask_batch_result(const rtask_batch *b, const struct redisReply *reply, size_t i,
                       rtask_result *res)
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

int rtask_parse_info(const char *s, size_t len, rtask_task *out, int *has_key, int *has_msg)
{
    const char *w;
    size_t wlen;
    int64_t v = 0, hk = 0, hm = 0;
    packed_fields fs, *f = &fs;
    int rc;

    memset(out, 0, sizeof *out);
    *has_key = *has_msg = 0;
    packed_fields_init(f, s, len);
    rc = packed_next(f, &w, &wlen);
    if (rc == SLUICE_OK && !rbatch_word_is(w, wlen, "OK"))
        rc = SLUICE_EPARSE;
    if (rc == SLUICE_OK)
        rc = packed_i64(f, &v); /* now */
    if (rc == SLUICE_OK)
        rc = packed_range(f, 1, INT64_MAX, &v);
    out->id = (uint64_t)v;
    if (rc == SLUICE_OK)
        rc = packed_range(f, SLUICE_TASK_QUEUED, SLUICE_TASK_CANCELLED, &v);
    out->state = (sluice_task_state)v;
    if (rc == SLUICE_OK)
        rc = packed_range(f, 0, INT32_MAX, &v);
    out->attempt = (int)v;
    if (rc == SLUICE_OK)
        rc = packed_range(f, 0, INT64_MAX, &out->lease_until_ns);
    if (rc == SLUICE_OK)
        rc = packed_range(f, SLUICE_FAIL_NONE, SLUICE_FAIL_SKIPPED, &v);
    out->fail_reason = (sluice_fail_reason)v;
    if (rc == SLUICE_OK)
        rc = packed_i64(f, &out->priority);
    if (rc == SLUICE_OK)
        rc = packed_i64(f, &out->submitted_ns);
    if (rc == SLUICE_OK)
        rc = packed_i64(f, &out->not_before_ns);
    if (rc == SLUICE_OK)
        rc = packed_range(f, 0, 1, &hk);
    if (rc == SLUICE_OK)
        rc = packed_range(f, 0, 1, &hm);
    if (rc == SLUICE_OK)
        rc = packed_range(f, 1, INT64_MAX, &out->units);
    if (rc == SLUICE_OK)
        rc = packed_range(f, 0, INT32_MAX, &v);
    out->park_link = (int)v;
    if (rc == SLUICE_OK)
        rc = packed_range(f, 0, INT64_MAX, &out->position);
    if (rc == SLUICE_OK)
        rc = packed_range(f, 0, INT64_MAX, &out->queue_length);
    if (rc == SLUICE_OK)
        rc = packed_range(f, -1, INT64_MAX, &out->wake_ms);
    if (rc == SLUICE_OK && !packed_at_end(f)) { /* a fair flow's two (PostgreSQL has none) */
        rc = packed_range(f, 0, INT64_MAX, &out->flow_ready);
        if (rc == SLUICE_OK)
            rc = packed_range(f, 0, INT64_MAX, &out->flows);
    }
    if (rc == SLUICE_OK && !packed_at_end(f))
        rc = SLUICE_EPARSE;
    if (rc != SLUICE_OK) {
        memset(out, 0, sizeof *out);
        return SLUICE_EPARSE;
    }
    *has_key = (int)hk;
    *has_msg = (int)hm;
    return SLUICE_OK;
}

int rtask_parse_delivery(const char *s, size_t len, rtask_task *out)
{
    int64_t v = 0;
    packed_fields f;
    int rc;

    memset(out, 0, sizeof *out);
    packed_fields_init(&f, s, len);
    rc = packed_range(&f, 1, INT64_MAX, &v);
    out->id = (uint64_t)v;
    if (rc == SLUICE_OK)
        rc = packed_range(&f, 1, INT32_MAX, &v);
    out->attempt = (int)v;
    if (rc == SLUICE_OK)
        rc = packed_range(&f, 0, INT64_MAX, &out->lease_until_ns);
    if (rc == SLUICE_OK && !packed_at_end(&f))
        rc = SLUICE_EPARSE;
    out->state = SLUICE_TASK_RUNNING;
    if (rc != SLUICE_OK) {
        memset(out, 0, sizeof *out);
        return SLUICE_EPARSE;
    }
    return SLUICE_OK;
}

int rtask_batch_task(const rtask_batch *b, const struct redisReply *reply, size_t i, size_t k,
                     rtask_task *out)
{
    const redisReply *r, *h;
    rtask_result res;
    int has_key, has_msg;
    int rc;

    memset(out, 0, sizeof *out);
    if (i >= b->c.nreqs ||
        (rtask_batch_op(b, i) != RTASK_CLAIM && rtask_batch_op(b, i) != RTASK_INFO))
        return SLUICE_EINVAL;
    rc = rtask_batch_result(b, reply, i, &res);
    if (rc != SLUICE_OK)
        return rc;
    if (res.rc != SLUICE_OK)
        return SLUICE_EINVAL;
    r = reply->element[i];
    if (rtask_batch_op(b, i) == RTASK_INFO) {
        if (k != 0)
            return SLUICE_EINVAL;
        h = r->element[0];
        rc = rtask_parse_info(h->str, h->len, out, &has_key, &has_msg);
        if (rc == SLUICE_OK)
            rc = rbatch_bulk(r->element[1], &out->type, &out->typelen);
        if (rc == SLUICE_OK)
            rc = rbatch_bulk(r->element[2], &out->payload, &out->payload_len);
        if (rc == SLUICE_OK && has_key)
            rc = rbatch_bulk(r->element[3], &out->task_key, &out->task_key_len);
        if (rc == SLUICE_OK && has_msg)
            rc = rbatch_bulk(r->element[4], &out->fail_message, &out->fail_message_len);
        if (rc == SLUICE_OK && (!has_key && r->element[3]->type != REDIS_REPLY_STRING))
            rc = SLUICE_EPARSE;
        if (rc == SLUICE_OK && (!has_msg && r->element[4]->type != REDIS_REPLY_STRING))
            rc = SLUICE_EPARSE;
        if (rc != SLUICE_OK)
            memset(out, 0, sizeof *out);
        return rc;
    }
    if (k >= res.ndelivered)
        return SLUICE_EINVAL;
    h = r->element[1 + 3 * k];
    rc = h && h->type == REDIS_REPLY_STRING ? rtask_parse_delivery(h->str, h->len, out)
                                            : SLUICE_EPARSE;
    if (rc == SLUICE_OK)
        rc = rbatch_bulk(r->element[2 + 3 * k], &out->type, &out->typelen);
    if (rc == SLUICE_OK)
        rc = rbatch_bulk(r->element[3 + 3 * k], &out->payload, &out->payload_len);
    if (rc != SLUICE_OK)
        memset(out, 0, sizeof *out);
    return rc;
}
