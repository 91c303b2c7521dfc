/* SPDX-License-Identifier: MIT */
/*
 * Counters summed across nodes (rcounters.h): the node's side of a flush. One flush at a time:
 * built from the set's frozen deltas (ctrset_begin), sent through rstore's FIFO (rstore_send), its
 * answer read into the set (ctrset_total, ctrset_confirm) or, without one, kept for the next
 * flush, which sends the same deltas under the same sequence number.
 *
 * THROTTLE's grants and denials are already counted per node in server_stats (by the reply
 * writers every store shares); they are folded into the set at each flush as the difference
 * since the last one, so no reply path needs a second counter for them.
 */
#include "server/rcounters.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <libpq-fe.h>

#include "base/alloc.h"
#include "base/attr.h"
#include "base/grow.h"
#include "base/hash.h"
#include "server/ctrset.h"
#include "server/log.h"
#include "server/rstore.h"
#include "sluice/error.h"

/* Defined by the file CMake generates from src/store/redis/counters.lua. */
extern const char rcounters_lua_text[];
extern const size_t rcounters_lua_text_len;

/* The store's keys (redis): one hash of totals, one number per node; both under the {all} tag,
 * so that they share a slot on a Redis Cluster. */
#define KEY_TOTALS "sluice:{all}:counters"
#define KEY_NODE   "sluice:{all}:counters:node:"

/* Arguments of EVAL before the name, delta pairs: EVAL script 2 key key seq ttl. */
#define FIXED_ARGS 7

typedef struct rcounters {
    rstore_call call; /* first: rstore's FIFO holds it */
    server *s;
    ctrset set;
    char node[33];                        /* this node's id, 128 random bits in hex */
    char node_key[sizeof(KEY_NODE) + 33]; /* KEY_NODE + node */
    char seq[24], ttl[24];                /* ARGV[1], ARGV[2] */
    const char **argv;                    /* the EVAL */
    size_t *argvlen;
    size_t argcap, lencap;
    char *nums; /* the deltas in decimal, 24 bytes each */
    size_t numscap;
    char *pgbuf; /* PostgreSQL: the two array literals */
    size_t pgcap;
    const char *pgvals[RCOUNTERS_PG_NPARAMS];
    int in_flight;            /* the flush is in rstore's FIFO */
    int ok;                   /* its answer was read */
    int final;                /* the server stops: the last flush */
    int done;                 /* the last flush is over (answered, failed, or nothing to send) */
    int parked;               /* the server waits for it (rcounters_stop returned 1) */
    int64_t sent_ns, read_ns; /* when the last flush was sent, when totals were last read */
    uint64_t flushes, failures;
    uint64_t folded_allowed, folded_denied; /* server_stats already in the set */
    char last_error[256];
} rcounters;

static rcounters *state_of(const server *s)
{
    return s->rctr_state;
}

/* 128 bits from /dev/urandom; the clock and the pid when it cannot be read. A node's id only
 * needs to differ from every other node's. */
static void make_node_id(char out[33])
{
    static const char hex[] = "0123456789abcdef";
    unsigned char r[16];
    FILE *f = fopen("/dev/urandom", "rb");
    size_t got = f ? fread(r, 1, sizeof r, f) : 0;

    if (f)
        fclose(f);
    if (got != sizeof r) {
        struct timespec ts;
        uint64_t a, b;

        timespec_get(&ts, TIME_UTC);
        a = hash_bytes(&ts, sizeof ts);
        b = hash_bytes_seeded(&ts, sizeof ts, (uint64_t)getpid());
        memcpy(r, &a, 8);
        memcpy(r + 8, &b, 8);
    }
    for (size_t i = 0; i < sizeof r; i++) {
        out[2 * i] = hex[r[i] >> 4];
        out[2 * i + 1] = hex[r[i] & 15];
    }
    out[32] = '\0';
}

int rcounters_open(server *s)
{
    rcounters *st;

    if (!rstore_active(s))
        return 0;
    st = alloc_calloc(1, sizeof(*st));
    if (!st)
        return SLUICE_ENOMEM;
    st->s = s;
    ctrset_init(&st->set);
    make_node_id(st->node);
    snprintf(st->node_key, sizeof st->node_key, "%s%s", KEY_NODE, st->node);
    st->read_ns = -1;
    s->rctr_state = st;
    return 0;
}

void rcounters_free(server *s)
{
    rcounters *st = state_of(s);

    if (!st)
        return;
    ctrset_free(&st->set);
    alloc_free(st->argv);
    alloc_free(st->argvlen);
    alloc_free(st->nums);
    alloc_free(st->pgbuf);
    alloc_free(st);
    s->rctr_state = NULL;
}

/* ---- Counting ---------------------------------------------------------------------------- */

void rcounters_limit(server *s, const char *name, int allowed, int64_t units)
{
    rcounters *st = state_of(s);

    if (!st || !name)
        return;
    if (allowed) {
        ctrset_add(&st->set, RCTR_LIMIT_ALLOWED, name, strlen(name), 1);
        ctrset_add(&st->set, RCTR_LIMIT_UNITS, name, strlen(name), units > 0 ? (uint64_t)units : 0);
    } else {
        ctrset_add(&st->set, RCTR_LIMIT_DENIED, name, strlen(name), 1);
    }
}

void rcounters_limit_shadow(server *s, const char *name)
{
    rcounters *st = state_of(s);

    if (st && name)
        ctrset_add(&st->set, RCTR_LIMIT_SHADOW, name, strlen(name), 1);
}

void rcounters_task(server *s, const char *code, const char *type, size_t typelen, uint64_t n)
{
    rcounters *st = state_of(s);

    if (!st || n == 0)
        return;
    ctrset_add(&st->set, code, "", 0, n);
    if (type && typelen > 0)
        ctrset_add(&st->set, code, type, typelen, n);
}

/* Adds what server_stats counted since the last fold. */
static void fold_stats(rcounters *st)
{
    const server_stats *ss = &st->s->stats;

    if (ss->throttle_allowed > st->folded_allowed &&
        ctrset_add(&st->set, RCTR_THROTTLE_ALLOWED, "", 0,
                   ss->throttle_allowed - st->folded_allowed) == 0)
        st->folded_allowed = ss->throttle_allowed;
    if (ss->throttle_denied > st->folded_denied &&
        ctrset_add(&st->set, RCTR_THROTTLE_DENIED, "", 0,
                   ss->throttle_denied - st->folded_denied) == 0)
        st->folded_denied = ss->throttle_denied;
}

/* ---- Reading ----------------------------------------------------------------------------- */

int rcounters_get(const server *s, const char *code, const char *name, uint64_t *cluster,
                  uint64_t *node)
{
    rcounters *st = state_of(s);
    const ctr *c;

    *cluster = 0;
    *node = 0;
    if (!st)
        return 0;
    /* THROTTLE's figures are counted in server_stats: fold them first, so that a node's own
     * grants show at once, as every other count does. */
    fold_stats(st);
    c = ctrset_find(&st->set, code, name, name ? strlen(name) : 0);
    if (c) {
        *cluster = ctr_cluster(c);
        *node = c->node;
    }
    return 1;
}

void rcounters_get_stats(const server *s, rcounters_stats *out)
{
    const rcounters *st = state_of(s);

    memset(out, 0, sizeof(*out));
    out->interval_ms = RCOUNTERS_FLUSH_MS;
    out->age_ms = -1;
    out->last_error = "";
    if (!st)
        return;
    out->active = 1;
    if (st->read_ns >= 0) {
        int64_t age = (server_now(st->s) - st->read_ns) / SLUICE_NS_PER_MS;

        out->age_ms = age < 0 ? 0 : age;
    }
    out->flushes = st->flushes;
    out->failures = st->failures;
    out->unconfirmed = ctrset_unconfirmed(&st->set);
    out->dropped = st->set.dropped;
    out->last_error = st->last_error;
}

/* ---- Flushing ---------------------------------------------------------------------------- */

/* Builds the flush's EVAL (Redis) or parameters (PostgreSQL) from the set's frozen deltas.
 * Returns 0 or SLUICE_ENOMEM. */
static int build(rcounters *st, size_t n)
{
    size_t a = FIXED_ARGS, k = 0;

    snprintf(st->seq, sizeof st->seq, "%" PRIu64, st->set.seq);
    if (rstore_kind(st->s) == CONFIG_STORE_POSTGRES) {
        size_t names = 0, deltas = 0;

        if (ctrset_pg_arrays(&st->set, &st->pgbuf, &st->pgcap, &names, &deltas) != 0)
            return SLUICE_ENOMEM;
        st->pgvals[0] = st->node;
        st->pgvals[1] = st->seq;
        st->pgvals[2] = st->pgbuf + names;
        st->pgvals[3] = st->pgbuf + deltas;
        rstore_call_pg(&st->call, RCOUNTERS_PG_STMT, RCOUNTERS_PG_NPARAMS, st->pgvals);
        return 0;
    }
    if (grow_array(&st->argv, &st->argcap, FIXED_ARGS + 2 * n, sizeof(*st->argv), 32) != 0 ||
        grow_array(&st->argvlen, &st->lencap, FIXED_ARGS + 2 * n, sizeof(*st->argvlen), 32) != 0)
        return SLUICE_ENOMEM;
    if (grow_array(&st->nums, &st->numscap, 24 * (n + 1), 1, 256) != 0)
        return SLUICE_ENOMEM;
    snprintf(st->ttl, sizeof st->ttl, "%" PRId64, RCOUNTERS_NODE_TTL_MS);
    st->argv[0] = "EVAL";
    st->argv[1] = rcounters_lua_text;
    st->argv[2] = "2";
    st->argv[3] = KEY_TOTALS;
    st->argv[4] = st->node_key;
    st->argv[5] = st->seq;
    st->argv[6] = st->ttl;
    st->argvlen[0] = 4;
    st->argvlen[1] = rcounters_lua_text_len;
    st->argvlen[2] = 1;
    st->argvlen[3] = strlen(KEY_TOTALS);
    st->argvlen[4] = strlen(st->node_key);
    st->argvlen[5] = strlen(st->seq);
    st->argvlen[6] = strlen(st->ttl);
    for (size_t i = 0; i < st->set.n; i++) {
        const ctr *c = st->set.v[i];
        char *num = st->nums + 24 * k;

        if (c->inflight == 0)
            continue;
        snprintf(num, 24, "%" PRIu64, c->inflight);
        st->argv[a] = c->name;
        st->argvlen[a++] = c->len;
        st->argv[a] = num;
        st->argvlen[a++] = strlen(num);
        k++;
    }
    st->call.call.argc = (int)a;
    st->call.call.argv = st->argv;
    st->call.call.argvlen = st->argvlen;
    st->call.slot = rcl_key_slot(KEY_TOTALS, strlen(KEY_TOTALS));
    return 0;
}

/* Reads Redis's answer, {applied, {name, total, ...}}. Returns 0 or -1. */
static int read_redis(rcounters *st, const redisReply *r)
{
    const redisReply *kv;

    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[1]->type != REDIS_REPLY_ARRAY || r->element[1]->elements % 2 != 0)
        return -1;
    kv = r->element[1];
    for (size_t i = 0; i < kv->elements; i += 2) {
        const redisReply *k = kv->element[i], *v = kv->element[i + 1];
        uint64_t n;

        if (k->type != REDIS_REPLY_STRING || v->type != REDIS_REPLY_STRING ||
            ctrset_parse_u64(v->str, v->len, &n) != 0)
            return -1;
        ctrset_total(&st->set, k->str, k->len, n);
    }
    return 0;
}

/* Reads PostgreSQL's answer, one row (name, total) per counter. Returns 0 or -1. */
static int read_pg(rcounters *st, const PGresult *r)
{
    int rows = PQntuples(r);

    if (PQnfields(r) != 2)
        return -1;
    for (int i = 0; i < rows; i++) {
        uint64_t n;

        if (PQgetisnull(r, i, 0) || PQgetisnull(r, i, 1) ||
            ctrset_parse_u64(PQgetvalue(r, i, 1), (size_t)PQgetlength(r, i, 1), &n) != 0)
            return -1;
        ctrset_total(&st->set, PQgetvalue(r, i, 0), (size_t)PQgetlength(r, i, 0), n);
    }
    return 0;
}

/* rstore_call.on_reply: the totals, read while the answer is valid. */
static void on_reply(rstore_call *call, const rstore_answer *a)
{
    rcounters *st = (rcounters *)(void *)call;
    int rc = a->pg ? read_pg(st, a->pg) : read_redis(st, a->redis);

    if (rc != 0) {
        ctrset_unread(&st->set);
        rstore_call_fail(call, "a malformed answer to the counters' flush");
        return;
    }
    ctrset_confirm(&st->set);
    st->ok = 1;
}

static void send_flush(rcounters *st);

/* rstore_call.apply: the flush is over (confirmed, or kept for the next). */
static void on_apply(rstore_call *call)
{
    rcounters *st = (rcounters *)(void *)call;

    st->in_flight = 0;
    if (st->ok) {
        st->flushes++;
        st->read_ns = server_now(st->s);
    } else {
        st->failures++;
        snprintf(st->last_error, sizeof st->last_error, "%s", call->why);
    }
    if (!st->final || st->done)
        return;
    /* Stopping: a confirmed flush that left counts behind (counted while it was in flight)
     * sends one more, whose own apply ends the stop; a failed one is the end (the store is
     * away, and the server must stop). */
    if (st->ok && ctrset_unconfirmed(&st->set) > 0 && rstore_up(st->s, NULL)) {
        send_flush(st);
        return;
    }
    st->done = 1;
    if (ctrset_unconfirmed(&st->set) > 0)
        log_warn("store %s: %" PRIu64 " counts of this node were not flushed before it stopped "
                 "(%s)",
                 rstore_kind_name(st->s), ctrset_unconfirmed(&st->set),
                 st->last_error[0] ? st->last_error : "the store is unavailable");
    if (st->parked) {
        st->parked = 0;
        /* The server waits in its last step for this flush: let it finish now. */
        server_client_gone(st->s);
    }
}

static void send_flush(rcounters *st)
{
    size_t n;
    int rc;

    fold_stats(st);
    n = ctrset_begin(&st->set);
    rc = build(st, n);
    st->ok = 0;
    st->in_flight = 1;
    st->sent_ns = server_now(st->s);
    st->call.on_reply = on_reply;
    st->call.apply = on_apply;
    st->call.wait_replicas = 0;
    /* apply may run before this returns (the store down, out of memory). */
    rstore_send(st->s, &st->call, rc);
}

void rcounters_tick(server *s)
{
    rcounters *st = state_of(s);
    int64_t now;

    if (!st || st->in_flight || st->final || !rstore_up(s, NULL))
        return;
    now = server_now(s);
    if (st->sent_ns != 0 && now - st->sent_ns < (int64_t)RCOUNTERS_FLUSH_MS * SLUICE_NS_PER_MS)
        return;
    send_flush(st);
}

int rcounters_stop(server *s)
{
    rcounters *st = state_of(s);

    if (!st || st->done)
        return 0;
    st->final = 1;
    if (!st->in_flight) {
        fold_stats(st);
        if (ctrset_unconfirmed(&st->set) == 0 || !rstore_up(s, NULL)) {
            st->done = 1;
            return 0;
        }
        send_flush(st);
    }
    if (st->done)
        return 0;
    st->parked = 1;
    return 1;
}

/* ---- INFO -------------------------------------------------------------------------------- */

/* INFO's text being written, and the server it describes. */
typedef struct info_walk {
    char *p;
    size_t len, at;
    const server *s;
} info_walk;

static void put_line(info_walk *b, const char *fmt, ...) PRINTF_ATTR(2, 3);

static void put_line(info_walk *b, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (b->at + 1 >= b->len)
        return;
    va_start(ap, fmt);
    n = vsnprintf(b->p + b->at, b->len - b->at, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    b->at = (size_t)n >= b->len - b->at ? b->len - 1 : b->at + (size_t)n;
}

/* "cluster_<what>:N" and "node_<what>:N" of one all-types (or THROTTLE) counter. */
static void put_pair(info_walk *b, const char *what, const char *code)
{
    uint64_t cl, nd;

    rcounters_get(b->s, code, "", &cl, &nd);
    put_line(b, "cluster_%s:%" PRIu64 "\r\nnode_%s:%" PRIu64 "\r\n", what, cl, what, nd);
}

static void info_limit(const sluice_limit_policy *p, void *arg)
{
    info_walk *b = arg;
    uint64_t ca, na, cd, nd, cu, nu, cs, ns;

    rcounters_get(b->s, RCTR_LIMIT_ALLOWED, p->name, &ca, &na);
    rcounters_get(b->s, RCTR_LIMIT_DENIED, p->name, &cd, &nd);
    rcounters_get(b->s, RCTR_LIMIT_UNITS, p->name, &cu, &nu);
    rcounters_get(b->s, RCTR_LIMIT_SHADOW, p->name, &cs, &ns);
    put_line(b,
             "counters_limit_%s:allowed=%" PRIu64 ",denied=%" PRIu64 ",units=%" PRIu64
             ",node_allowed=%" PRIu64 ",node_denied=%" PRIu64 ",node_units=%" PRIu64
             ",shadow_denied=%" PRIu64 ",node_shadow_denied=%" PRIu64 "\r\n",
             p->name, ca, cd, cu, na, nd, nu, cs, ns);
}

static void info_type(const sluice_type_stats *t, void *arg)
{
    info_walk *b = arg;
    uint64_t cl, nd;

    if (!t->declared)
        return;
    rcounters_get(b->s, RCTR_TASK_DELIVERED, t->name, &cl, &nd);
    put_line(b, "counters_type_%s:delivered=%" PRIu64 ",node_delivered=%" PRIu64 "\r\n", t->name,
             cl, nd);
}

void rcounters_info(server *s, char *buf, size_t len)
{
    info_walk w = {buf, len, 0, s};
    rcounters_stats cs;

    if (len == 0)
        return;
    buf[0] = '\0';
    rcounters_get_stats(s, &cs);
    put_line(&w, "# Counters\r\ncounters_scope:%s\r\n", cs.active ? "cluster" : "node");
    if (!cs.active)
        return;
    put_line(&w,
             "counters_flush_interval_ms:%" PRId64 "\r\ncounters_age_ms:%" PRId64
             "\r\ncounters_flushes:%" PRIu64 "\r\ncounters_flush_failures:%" PRIu64
             "\r\ncounters_unconfirmed:%" PRIu64 "\r\ncounters_dropped:%" PRIu64
             "\r\ncounters_last_error:%s\r\n",
             cs.interval_ms, cs.age_ms, cs.flushes, cs.failures, cs.unconfirmed, cs.dropped,
             cs.last_error);
    put_pair(&w, "throttle_allowed", RCTR_THROTTLE_ALLOWED);
    put_pair(&w, "throttle_denied", RCTR_THROTTLE_DENIED);
    put_pair(&w, "tasks_submitted", RCTR_TASK_SUBMITTED);
    put_pair(&w, "tasks_delivered", RCTR_TASK_DELIVERED);
    put_pair(&w, "tasks_done", RCTR_TASK_DONE);
    put_pair(&w, "tasks_failed", RCTR_TASK_FAILED);
    put_pair(&w, "tasks_retried", RCTR_TASK_RETRIED);
    put_pair(&w, "tasks_cancelled", RCTR_TASK_CANCELLED);
    sluice_engine_list_limits(s->engine, info_limit, &w);
    sluice_engine_type_stats(s->engine, info_type, &w);
}
