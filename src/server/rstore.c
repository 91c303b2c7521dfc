/* SPDX-License-Identifier: MIT */
/*
 * Limits shared on Redis or PostgreSQL, the node's side (rstore.h): the turn's batch, the calls
 * in flight, the deferred replies, the failure modes.
 *
 * A batch (rbatch) is one call of the store: the encoded requests (rlim_batch,
 * store/redis_limits.h, for Redis; pgl_batch, store/pg_limits.h, for PostgreSQL),
 * one wait per request (the client and its deferred-reply ticket, and what its reply needs: the
 * links' names for THROTTLE's denied_by, the quantity and emission interval of CL.THROTTLE), and
 * room for the decoded answer. Batches in flight form a FIFO; an answer is decoded into its
 * batch when it arrives (hiredis frees the reply after the callback), and batches are applied to
 * their clients strictly in FIFO order, so a client's slots are filled in the order taken even
 * when a NOSCRIPT retry makes Redis answer out of order. Applied batches are kept for reuse (their
 * buffers keep their capacity), at most SPARE_MAX of them.
 *
 * On Redis Cluster the turn's batch is sent as one script call per master (send_groups: its
 * requests grouped by the master of their slot, rcl_multi), and is answered once every one of
 * them (and every part of one split by slot) is; its replies are then applied in request order
 * like any batch's.
 *
 * Invariants:
 * - every request added gets exactly one reply: decoded from Redis, or by the failure mode when
 *   its batch could not be sent or got no answer (rconn answers every call it accepted);
 * - a wait whose client closed has c == NULL and is skipped (rstore_conn_closed);
 * - nothing here blocks the loop.
 *
 * Opening and closing the store, and its figures, are rstore_life.c's; what both files share
 * (the batch, the wait, the store's state) is in rstore_impl.h.
 */
#include "server/rstore_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <hiredis/hiredis.h>
#include <libpq-fe.h>

#include "base/alloc.h"
#include "base/grow.h"
#include "base/hex.h"
#include "server/commands.h"
#include "server/log.h"
#include "server/rcounters.h"
#include "server/rdefs.h"
#include "server/rrecur.h"
#include "server/rtasks.h"
#include "sluice/error.h"
#include "store/shared_defs.h"

/* ---- Batches ----------------------------------------------------------------------------- */

void rstore_batch_free(rbatch *b)
{
    if (!b)
        return;
    rlim_batch_free(b->rb);
    pgl_batch_free(b->pb);
    for (size_t i = 0; b->cmds && i < b->slotcap; i++)
        rlim_cmd_free(&b->cmds[i]);
    for (size_t g = 0; g < b->capgroups; g++) {
        rcl_multi_free(&b->groups[g].m);
        rlim_cmd_free(&b->groups[g].cmd);
    }
    alloc_free(b->groups);
    alloc_free(b->cmds);
    alloc_free(b->slots);
    alloc_free(b->gkey);
    alloc_free(b->gslot);
    alloc_free(b->order);
    alloc_free(b->scratch);
    alloc_free(b->spans);
    alloc_free(b->w);
    alloc_free(b->dec);
    alloc_free(b->arena);
    alloc_free(b);
}

static rbatch *batch_get(rstore *st)
{
    rbatch *b = st->spare;
    int rc;

    if (b) {
        st->spare = b->next;
        st->nspare--;
        b->next = NULL;
        return b;
    }
    b = alloc_calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    b->st = st;
    if (st->kind == CONFIG_STORE_POSTGRES) {
        rc = pgl_batch_new(&b->pb);
        if (rc == 0)
            pgl_batch_set_audit(b->pb, st->audit);
    } else {
        rc = rlim_batch_new(NULL, &b->rb);
        if (rc == 0)
            rlim_batch_set_audit(b->rb, st->audit);
    }
    if (rc != 0) {
        alloc_free(b);
        return NULL;
    }
    return b;
}

static void batch_recycle(rstore *st, rbatch *b)
{
    if (b->pb)
        pgl_batch_reset(b->pb);
    else
        rlim_batch_reset(b->rb);
    b->n = b->ndec = b->alen = 0;
    b->tnext = NULL;
    b->part_why[0] = '\0';
    b->base.answered = 0;
    b->base.why[0] = '\0';
    if (st->nspare >= SPARE_MAX) {
        rstore_batch_free(b);
        return;
    }
    b->next = st->spare;
    st->spare = b;
    st->nspare++;
}

/* Redis Cluster: makes room for n requests in b's per-request arrays. Returns 0 or -1. */
static int slots_room(rbatch *b, size_t n)
{
    size_t cap = b->slotcap < 64 ? 64 : b->slotcap;
    int *sl, *gk, *gs;
    size_t *o, *sc;
    rcl_span *sp;
    rlim_cmd *cm;

    if (n <= b->slotcap)
        return 0;
    while (cap < n)
        cap *= 2;
    sl = alloc_realloc(b->slots, cap * sizeof(*sl));
    if (sl)
        b->slots = sl;
    gk = alloc_realloc(b->gkey, cap * sizeof(*gk));
    if (gk)
        b->gkey = gk;
    gs = alloc_realloc(b->gslot, cap * sizeof(*gs));
    if (gs)
        b->gslot = gs;
    o = alloc_realloc(b->order, cap * sizeof(*o));
    if (o)
        b->order = o;
    sc = alloc_realloc(b->scratch, cap * sizeof(*sc));
    if (sc)
        b->scratch = sc;
    sp = alloc_realloc(b->spans, cap * sizeof(*sp));
    if (sp)
        b->spans = sp;
    cm = alloc_realloc(b->cmds, cap * sizeof(*cm));
    if (cm) {
        memset(cm + b->slotcap, 0, (cap - b->slotcap) * sizeof(*cm));
        b->cmds = cm;
    }
    if (!sl || !gk || !gs || !o || !sc || !sp || !cm)
        return -1; /* what did grow is kept, with the old capacity */
    b->slotcap = cap;
    return 0;
}

/* Makes room for one more wait, n decisions and alen bytes of names. Returns 0 or -1. */
static int batch_reserve(rbatch *b, size_t n, size_t alen)
{
    if ((b->st->cl && slots_room(b, b->n + 1) != 0) ||
        grow_array(&b->w, &b->cap, b->n + 1, sizeof(*b->w), 64) != SLUICE_OK ||
        grow_array(&b->dec, &b->deccap, b->ndec + n, sizeof(*b->dec), 64) != SLUICE_OK ||
        grow_array(&b->arena, &b->acap, b->alen + alen, 1, 1024) != SLUICE_OK)
        return -1;
    return 0;
}

/* ---- Replies ----------------------------------------------------------------------------- */

/* The capacity a decision reports for a definition (as the core's `limit` field). */
static int64_t def_capacity(const sluice_limit_def *def)
{
    if (def->kind == SLUICE_RATE && def->burst > 0)
        return def->burst;
    return def->limit;
}

static void note_fail_open(rstore *st)
{
    int64_t now = server_now(st->s);

    st->stats.fail_open_grants++;
    st->open_unlogged++;
    if (now - st->open_logged_ns < OPEN_LOG_NS)
        return;
    log_warn("event store_fail_open (summary) count=%" PRIu64 " total=%" PRIu64
             ": granted without the shared store (%s)",
             st->open_unlogged, st->stats.fail_open_grants,
             st->logged_why[0] ? st->logged_why : "unavailable");
    st->open_unlogged = 0;
    st->open_logged_ns = now;
}

/* A lease handle under a redis store, "NAME/ID/KEYHEX": the key travels in the handle because
 * RENEW and RELEASE name only the handle, and any node may receive them. */
static void reply_handle(conn *c, const char *name, uint64_t id, const char *key, size_t keylen)
{
    static const char hex[] = "0123456789abcdef";
    size_t nlen = strlen(name), len = nlen + 24 + 2 * keylen;
    char *buf = alloc_malloc(len + 1);
    int at;

    if (!buf) {
        resp_error(conn_out(c), "NOMEM", "out of memory");
        return;
    }
    at = snprintf(buf, len + 1, "%s/%" PRIu64 "/", name, id);
    for (size_t i = 0; i < keylen; i++) {
        buf[at++] = hex[(unsigned char)key[i] >> 4];
        buf[at++] = hex[(unsigned char)key[i] & 15];
    }
    resp_bulk(conn_out(c), buf, (size_t)at);
    alloc_free(buf);
}

/* LEASE.ACQUIRE's grant: {lease, ttl_ms, remaining}. */
static void reply_lease(conn *c, const char *name, uint64_t id, const char *key, size_t keylen,
                        int64_t ttl_ns, int64_t remaining)
{
    resp_writer *w = conn_out(c);

    c->srv->stats.throttle_allowed++;
    resp_map(w, 3);
    resp_bulk_str(w, "lease");
    reply_handle(c, name, id, key, keylen);
    resp_bulk_str(w, "ttl_ms");
    resp_int(w, command_ns_to_ms(ttl_ns));
    resp_bulk_str(w, "remaining");
    resp_int(w, remaining < 0 ? 0 : remaining);
}

/* What a request is, for the replies that do not come from Redis. */
typedef struct req_info {
    wait_kind kind;
    int64_t limit;  /* the capacity reported */
    int64_t ttl_ns; /* leases */
    const char *name, *key;
    size_t keylen;
} req_info;

/* The reply of a request the store could not decide: an error (closed) or a grant (open). */
static void reply_unavailable_decision(rstore *st, conn *c, const req_info *q, const char *why)
{
    /* A backoff grants nothing: not holding the key back is never a decision to make up; nor
     * is a key's rate, which a read cannot make up either. */
    if (!st->fail_open || q->kind == WAIT_BACKOFF || q->kind == WAIT_RATE) {
        st->stats.unavailable++;
        resp_error(conn_out(c), "STOREDOWN",
                   "the shared store is unavailable (%s); nothing was granted",
                   why && why[0] ? why : "not connected");
        return;
    }
    note_fail_open(st);
    switch (q->kind) {
    case WAIT_ACQUIRE:
        /* Lease id 0: no lease exists, so its RENEW and RELEASE answer NOLEASE once back. */
        reply_lease(c, q->name, 0, q->key, q->keylen, q->ttl_ns, 0);
        return;
    case WAIT_RENEW:
        resp_int(conn_out(c), command_ns_to_ms(q->ttl_ns));
        return;
    case WAIT_RELEASE:
        resp_simple(conn_out(c), "OK");
        return;
    case WAIT_CELL: {
        cell_reply r = {0, q->limit, 0, -1, 0};

        cell_write_reply(c, &r);
        return;
    }
    case WAIT_THROTTLE:
    case WAIT_BACKOFF:
    case WAIT_RATE:
        break;
    }
    sluice_decision d = {.allowed = 1, .limit = q->limit};
    reply_throttle(c, &d, NULL);
}

/* The reply of a lease request Redis answered. */
static void reply_lease_answer(conn *c, const rstore_wait *w, const sluice_decision *d,
                               const char *name, const char *key)
{
    if (w->kind == WAIT_RENEW || w->kind == WAIT_RELEASE) {
        if (w->res.rc == SLUICE_ESTALE)
            resp_error(conn_out(c), "NOLEASE", "lease is gone (it expired or was released)");
        else if (w->res.rc != 0)
            reply_engine_error(c, w->res.rc, NULL);
        else if (w->kind == WAIT_RENEW)
            resp_int(conn_out(c), command_ns_to_ms(w->res.expires_ns - w->res.now_ns));
        else
            resp_simple(conn_out(c), "OK");
        return;
    }
    if (w->res.rc != 0) {
        reply_engine_error(c, w->res.rc, NULL);
        return;
    }
    if (d->allowed && w->res.chain.allowed) {
        if (d->shadow_denied) { /* a shadow limit's pass holds nothing: its handle's id is 0 */
            c->srv->stats.throttle_shadow_denied++;
            rcounters_limit_shadow(c->srv, name);
        } else
            rcounters_limit(c->srv, name, 1, w->units);
        reply_lease(c, name, d->lease_id, key, w->keylen, w->ttl_ns, d->remaining);
        return;
    }
    rcounters_limit(c->srv, name, 0, 0);
    char keybuf[256];
    size_t kl = w->keylen < sizeof(keybuf) - 1 ? w->keylen : sizeof(keybuf) - 1;
    sluice_denial den = {.reason = SLUICE_FAIL_RATELIMITED,
                         .limit = name,
                         .kind = "concurrency",
                         .key = keybuf,
                         .limit_value = w->limit,
                         .window_ns = 0,
                         .retry_after_ns = d->retry_after_ns};

    /* The key may hold any byte; it is encoded in the reply, and cut at 255 bytes here. */
    memcpy(keybuf, key, kl);
    keybuf[kl] = '\0';
    c->srv->stats.throttle_denied++;
    reply_ratelimited(c, &den);
}

/* Counts a THROTTLE the store decided, per link as the core does: a grant on every link with its
 * units, a denial on the link that denied (rcounters.h); a shadow link's would-be denial is
 * counted as its shadow_denied, whatever the chain did. names: the links' names,
 * NUL-separated. */
static void count_throttle(server *s, const rstore_wait *w, const sluice_decision *dec,
                           const char *names)
{
    for (size_t i = 0; i < w->nlinks; i++, names += strlen(names) + 1) {
        if (dec[i].shadow_denied) {
            rcounters_limit_shadow(s, names);
            continue;
        }
        if (w->res.chain.allowed)
            rcounters_limit(s, names, 1, w->units);
        else if (i == w->res.chain.denied_by)
            rcounters_limit(s, names, 0, 0);
    }
}

/* Why a wait of b was not answered by the store, or NULL when it was. */
static const char *wait_why(const rbatch *b, const rstore_wait *w)
{
    if (b->base.why[0])
        return b->base.why;
    return w->failed ? b->part_why : NULL;
}

/* Writes the reply of one answered wait (its batch decoded). */
static void reply_wait(rstore *st, rbatch *b, rstore_wait *w)
{
    conn *c = w->c;
    sluice_decision *dec = &b->dec[w->dec];
    const char *why = wait_why(b, w);

    if (w->kind >= WAIT_ACQUIRE) {
        const char *name = &b->arena[w->names];
        const char *key = name + strlen(name) + 1;

        if (why) {
            req_info q = {w->kind, w->limit, w->ttl_ns, name, key, w->keylen};

            reply_unavailable_decision(st, c, &q, why);
            return;
        }
        st->stats.answered++;
        reply_lease_answer(c, w, dec, name, key);
        return;
    }
    if (why) {
        req_info q = {w->kind, w->limit, 0, NULL, NULL, 0};

        reply_unavailable_decision(st, c, &q, why);
        return;
    }
    st->stats.answered++;
    if (w->res.rc != 0) {
        reply_engine_error(c, w->res.rc, NULL);
        return;
    }
    if (w->kind == WAIT_BACKOFF) {
        /* How long the key now waits for one unit, in the store's time. */
        resp_int(conn_out(c), command_ns_to_ms(w->res.slot_ns - w->res.now_ns));
        return;
    }
    if (w->kind == WAIT_RATE) {
        sluice_limit_def def;
        cmd_key_rate kr;

        memcpy(&def, &b->arena[w->names], sizeof(def));
        cmd_key_rate_explain(&def, w->res.permits, w->res.since_ns, w->res.now_ns, &kr);
        cmd_limit_rate_reply(c, &b->arena[w->names + sizeof(def)], w->keylen, &kr);
        return;
    }
    if (w->kind == WAIT_CELL) {
        cell_reply r;

        cell_map_decision(&dec[0], w->quantity, w->t_ns, &r);
        if (dec[0].shadow_denied && w->quantity)
            st->s->stats.throttle_shadow_denied++;
        cell_write_reply(c, &r);
        return;
    }
    /* THROTTLE: as the local chain reports it, the denying link, else the tightest one. */
    size_t report = 0;
    const char *name = &b->arena[w->names];

    if (!w->res.chain.allowed) {
        report = w->res.chain.denied_by < w->nlinks ? w->res.chain.denied_by : 0;
    } else {
        /* The tightest link among those that said yes for real when there are any (a shadow
         * link's would-be no has none left). */
        for (size_t i = 1; i < w->nlinks; i++) {
            if (dec[i].shadow_denied != dec[report].shadow_denied
                    ? dec[report].shadow_denied
                    : dec[i].remaining < dec[report].remaining)
                report = i;
        }
    }
    if (!w->peek)
        count_throttle(st->s, w, dec, name);
    for (size_t i = 0; i < report; i++)
        name += strlen(name) + 1;
    dec[report].allowed = w->res.chain.allowed;
    if (!w->res.chain.allowed)
        dec[report].retry_after_ns = w->res.chain.retry_after_ns;
    /* The reply counts as a shadow pass when any link of the chain would have said no. */
    for (size_t i = 0; i < w->nlinks; i++)
        dec[report].shadow_denied |= w->res.chain.allowed && dec[i].shadow_denied;
    reply_throttle(c, &dec[report], w->res.chain.allowed ? NULL : name);
}

/* Writes a limits batch's answers to its clients and recycles it (rstore_call.apply). */
static void apply_batch(rstore_call *call)
{
    rbatch *b = (rbatch *)(void *)call;
    rstore *st = b->st;

    for (size_t i = 0; i < b->n; i++) {
        rstore_wait *w = &b->w[i];
        size_t mark;

        if (w->fn) {
            const char *why = wait_why(b, w);

            w->fn(w->fn_arg, why ? NULL : &w->res, why ? NULL : &b->dec[w->dec], why);
            continue;
        }
        if (!w->c)
            continue;
        mark = conn_out(w->c)->len;
        reply_wait(st, b, w);
        if (!conn_out(w->c)->failed && conn_out(w->c)->len > mark)
            counters_reply(&st->s->counters, conn_out(w->c)->buf + mark,
                           conn_out(w->c)->len - mark);
        conn_defer_fill(w->c, w->ticket, mark);
    }
    batch_recycle(st, b);
}

/* Applies every answered call at the head of the FIFO to its clients. */
void rstore_drain(rstore *st)
{
    rstore_call *c;

    while ((c = st->head) != NULL && c->answered && !c->waiting) {
        st->head = c->next;
        if (!st->head)
            st->tail = NULL;
        c->next = NULL;
        c->apply(c);
    }
}

void rstore_call_fail(rstore_call *c, const char *why)
{
    snprintf(c->why, sizeof c->why, "%s", why && why[0] ? why : "no answer");
    c->answered = 1;
}

/* Decodes a limits batch's answer (rstore_call.on_reply). */
static void decode_batch(rstore_call *call, const rstore_answer *a)
{
    rbatch *b = (rbatch *)(void *)call;

    for (size_t i = 0; i < b->n; i++) {
        rstore_wait *w = &b->w[i];
        int rc = b->pb
                     ? pgl_batch_result(b->pb, a->pg, (size_t)w->req, &w->res, &b->dec[w->dec])
                     : rlim_batch_result(b->rb, a->redis, (size_t)w->req, &w->res, &b->dec[w->dec]);

        if (rc != 0) {
            log_error("store %s: a reply the script does not give (request %zu of %zu)", b->st->url,
                      i, b->n);
            rstore_call_fail(call, "a malformed reply from the script");
            return;
        }
    }
}

/* ---- Redis Cluster: one script call per master ------------------------------------------- */

const char *rstore_down_why(const rstore *st);

/* Decodes the answer of n requests of group g: request j of the answer is the group's request
 * reqs[j] (NULL: j), i.e. the batch's order[first + reqs[j]]. No reply, or an error, fails them
 * with why. */
static void group_decode(rgroup *g, const size_t *reqs, size_t n, const redisReply *reply,
                         const char *why)
{
    rbatch *b = g->b;
    const char *fail = NULL;
    char text[200];

    if (!reply) {
        fail = why && why[0] ? why : "no answer";
    } else if (reply->type == REDIS_REPLY_ERROR) {
        snprintf(text, sizeof text, "the script failed: %.*s",
                 (int)(reply->len < 150 ? reply->len : 150), reply->str);
        log_error("store %s: %s", b->st->url, text);
        fail = text;
    }
    for (size_t j = 0; j < n && !fail; j++) {
        rstore_wait *w = &b->w[b->order[g->first + (reqs ? reqs[j] : j)]];

        if (rlim_batch_result_in(b->rb, reply, n, j, (size_t)w->req, &w->res, &b->dec[w->dec]) !=
            0) {
            log_error("store %s: a reply the script does not give (request %zu of %zu)", b->st->url,
                      j, n);
            fail = "a malformed reply from the script";
        }
    }
    if (!fail)
        return;
    if (!b->part_why[0])
        snprintf(b->part_why, sizeof b->part_why, "%s", fail);
    for (size_t j = 0; j < n; j++)
        b->w[b->order[g->first + (reqs ? reqs[j] : j)]].failed = 1;
}

/* A part of group g's call (rcl_multi.on_part): a split one's slot, or a group of one slot. */
static void group_part(void *arg, const size_t *reqs, size_t n, const redisReply *reply,
                       const char *why)
{
    group_decode(arg, reqs, n, reply, why);
}

/* The command of part p of group g (rcl_multi.build): its requests reqs[0..n), one slot's. */
static int group_build(void *arg, size_t p, const size_t *reqs, size_t n, int *argc,
                       const char ***argv, const size_t **argvlen)
{
    rgroup *g = arg;
    rbatch *b = g->b;
    rlim_cmd *cmd;
    int rc;

    if (p >= g->m.n)
        return SLUICE_EINVAL;
    for (size_t j = 0; j < n; j++)
        b->scratch[j] = b->order[g->first + reqs[j]];
    cmd = &b->cmds[g->first + p];
    rc = rlim_batch_command_part(b->rb, rcl_sha(b->st->cl), b->scratch, n, 0, cmd);
    if (rc != 0)
        return rc;
    *argc = cmd->argc;
    *argv = cmd->argv;
    *argvlen = cmd->argvlen;
    return 0;
}

/* One group's call is over; the batch is answered with the last. */
static void group_done(rbatch *b)
{
    if (--b->pending > 0)
        return;
    b->base.answered = 1;
    rstore_drain(b->st);
}

/* Group g's call answered (rcl_multi.fn): its whole answer, or (NULL, NULL) once its parts were
 * decoded (group_part). */
static void group_answer(void *arg, const redisReply *reply, const char *why)
{
    rgroup *g = arg;

    if (reply || why)
        group_decode(g, NULL, g->m.n, reply, why);
    group_done(g->b);
}

/* Sends a Redis Cluster batch (rstore_call.send): its requests grouped by the master of their
 * slot, one script call each, across slots when a group holds several (the map can have changed
 * since the requests were added: it is read now). A group that cannot be sent fails at once. */
static int send_groups(rstore_call *call)
{
    rbatch *b = (rbatch *)(void *)call;
    rstore *st = b->st;
    size_t ng;

    for (size_t i = 0; i < b->n; i++) {
        int g = rcl_group(st->cl, b->slots[i]);

        b->gkey[i] = g >= 0 ? g : RCL_NODES_MAX + b->slots[i];
    }
    ng = rcl_split(b->gkey, b->n, b->order, b->spans);
    if (ng > b->capgroups) {
        rgroup *gs = alloc_calloc(ng, sizeof(*gs));

        if (!gs)
            return SLUICE_ENOMEM;
        for (size_t g = 0; g < b->capgroups; g++) {
            rcl_multi_free(&b->groups[g].m);
            rlim_cmd_free(&b->groups[g].cmd);
        }
        alloc_free(b->groups);
        b->groups = gs;
        b->capgroups = ng;
    }
    b->pending = ng + 1; /* held while sending: a group failing at once cannot end the batch */
    for (size_t k = 0; k < ng; k++) {
        rgroup *g = &b->groups[k];
        const rcl_span *sp = &b->spans[k];
        int node = sp->slot < RCL_NODES_MAX ? sp->slot : -1, cross = 0, rc = 0;

        g->b = b;
        g->first = sp->first;
        for (size_t j = 0; j < sp->n; j++) {
            b->gslot[sp->first + j] = b->slots[b->order[sp->first + j]];
            cross |= b->gslot[sp->first + j] != b->gslot[sp->first];
        }
        g->m.slots = &b->gslot[sp->first];
        g->m.n = sp->n;
        g->m.node = cross ? node : -1; /* one slot: that slot's own call, keys declared */
        g->m.build = group_build;
        g->m.on_part = group_part;
        g->m.fn = group_answer;
        g->m.arg = g;
        if (cross) {
            rc = rlim_batch_command_part(b->rb, rcl_sha(st->cl), &b->order[sp->first], sp->n, 1,
                                         &g->cmd);
            g->m.argc = g->cmd.argc;
            g->m.argv = g->cmd.argv;
            g->m.argvlen = g->cmd.argvlen;
        }
        if (rc == 0)
            rc = rcl_send_multi(st->cl, &g->m);
        if (rc == 0) {
            if (k > 0)
                st->stats.batches++; /* script calls: rstore_send counts the first */
            continue;
        }
        group_decode(g, NULL, sp->n, NULL,
                     rc == SLUICE_ENOMEM                      ? "out of memory"
                     : rcl_slot_why(st->cl, g->m.slots[0])[0] ? rcl_slot_why(st->cl, g->m.slots[0])
                                                              : rstore_down_why(st));
        b->pending--;
    }
    if (--b->pending == 0)
        b->base.answered = 1; /* every group failed at once: rstore_send drains */
    return 0;
}

static void send_wait(rstore *st);

/* The answer of the WAIT in flight: the replicas that confirmed everything the connection wrote
 * before it, given to every call it covers; then the next WAIT, for the calls sent meanwhile. */
static void on_wait_answer(void *arg, const redisReply *reply, const char *why)
{
    rstore *st = arg;
    int64_t acked = reply && reply->type == REDIS_REPLY_INTEGER ? reply->integer : -1;

    (void)why;
    st->wait_busy = 0;
    for (rstore_call *c = st->head; c; c = c->next)
        if (c->waiting && c->wait_gen == st->wait_gen_sent) {
            c->acked = acked; /* -1: no answer or an error: nothing confirmed */
            c->waiting = 0;
        }
    if (st->wait_pending)
        send_wait(st);
    rstore_drain(st);
}

/* Marks c as waiting for the next WAIT, and sends it unless one is in flight. */
static void need_wait(rstore *st, rstore_call *c)
{
    c->waiting = 1;
    c->wait_gen = st->wait_gen_next;
    st->wait_pending = 1;
    if (!st->wait_busy)
        send_wait(st);
}

static void on_answer(void *arg, const redisReply *reply, const char *why)
{
    rstore_call *c = arg;
    rstore *st = c->st;

    /* A call resent behind a NOSCRIPT reload (on a Cluster: or redirected, or resent after
     * TRYAGAIN) ran after the WAIT that followed it, or on another master: that WAIT does not
     * cover its writes, so one more WAIT goes behind it. */
    if (reply && (st->cl ? c->ccall.resent : c->call.retried) && c->wait_replicas > 0)
        need_wait(st, c);
    if (!reply) {
        rstore_call_fail(c, why);
    } else if (reply->type == REDIS_REPLY_ERROR) {
        char text[200];

        snprintf(text, sizeof text, "the script failed: %.*s",
                 (int)(reply->len < 150 ? reply->len : 150), reply->str);
        log_error("store %s: %s", st->url, text);
        rstore_call_fail(c, text);
    } else {
        rstore_answer a = {reply, NULL};

        c->answered = 1;
        c->on_reply(c, &a);
    }
    rstore_drain(st);
}

void rstore_send_batch(rstore *st);
static void send_lane(rstore *st, int lane);

/* PostgreSQL's answer to a call: a result, an error result, or none (why). */
static void on_pg_answer(void *arg, const PGresult *result, const char *why)
{
    rstore_call *c = arg;
    rstore *st = c->st;
    int lane = c->lane;

    rpg_answered(st->pg, lane, &c->pgcall, result);
    if (!result) {
        rstore_call_fail(c, why);
    } else if (PQresultStatus(result) != PGRES_TUPLES_OK) {
        char text[200];
        const char *m = PQresultErrorMessage(result);
        size_t len = strcspn(m, "\n");

        snprintf(text, sizeof text, "the store's function failed: %.*s",
                 (int)(len < 150 ? len : 150), m);
        log_error("store %s: %s", st->url, text);
        rstore_call_fail(c, text);
    } else {
        rstore_answer a = {NULL, result};

        c->answered = 1;
        c->on_reply(c, &a);
    }
    rstore_drain(st); /* may apply c: lane was read before */
    /* What was held back on this lane while this call was in flight leaves now, together: its
     * limits batch or its task batch (at most one of them holds requests: taking a request of
     * one kind sends the same lane's batch of the other kind first). */
    if (!st->closed && rpg_may_send(st->pg, lane))
        send_lane(st, lane);
}

/* Sends `WAIT replicas timeout` on the store's connection, covering the calls marked with the
 * next generation (everything they wrote was sent before it). When it cannot be sent, they are
 * answered "nothing confirmed" at once. */
static void send_wait(rstore *st)
{
    int n = snprintf(st->wait_n, sizeof st->wait_n, "%d", st->replicas);
    int m = snprintf(st->wait_ms, sizeof st->wait_ms, "%" PRId64, st->replicas_timeout_ms);
    int rc;

    st->wait_gen_sent = st->wait_gen_next++;
    st->wait_pending = 0;
    st->wait_argv[0] = "WAIT";
    st->wait_argvlen[0] = 4;
    st->wait_argv[1] = st->wait_n;
    st->wait_argvlen[1] = (size_t)n;
    st->wait_argv[2] = st->wait_ms;
    st->wait_argvlen[2] = (size_t)m;
    st->wait.argc = 3;
    st->wait.argv = st->wait_argv;
    st->wait.argvlen = st->wait_argvlen;
    st->wait.fn = on_wait_answer;
    st->wait.arg = st;
    if (st->cl) {
        /* Every write that waits is a task or series call, all in the queue's slot: its master
         * took them on its connection, before this WAIT (rcl_call's resent tells the others). */
        st->cwait.argc = 3;
        st->cwait.argv = st->wait_argv;
        st->cwait.argvlen = st->wait_argvlen;
        st->cwait.fn = on_wait_answer;
        st->cwait.arg = st;
        st->cwait.slot = rcl_key_slot("{" RTAG_QUEUE "}", RTAG_QUEUE_LEN + 2);
        rc = st->closed ? SLUICE_ESTATE : rcl_send(st->cl, &st->cwait);
    } else {
        rc = st->closed || !st->conn ? SLUICE_ESTATE : rconn_evalsha(st->conn, &st->wait);
    }
    if (rc == 0) {
        st->wait_busy = 1;
        st->stats.replica_waits++;
        return;
    }
    for (rstore_call *c = st->head; c; c = c->next)
        if (c->waiting && c->wait_gen == st->wait_gen_sent) {
            c->acked = -1;
            c->waiting = 0;
        }
}

int rstore_replicas(const server *s, int64_t *timeout_ms)
{
    const rstore *st = state_of(s);

    if (timeout_ms)
        *timeout_ms = st ? st->replicas_timeout_ms : 0;
    return st ? st->replicas : 0;
}

void rstore_send(server *s, rstore_call *c, int rc)
{
    rstore *st = state_of(s);

    c->st = st;
    c->answered = 0;
    c->waiting = 0;
    c->acked = 0;
    c->why[0] = '\0';
    c->next = NULL;
    if (st->tail)
        st->tail->next = c;
    else
        st->head = c;
    st->tail = c;
    if (rc == 0 && (st->closed || (!st->conn && !st->pg && !st->cl)))
        rc = SLUICE_ESTATE;
    if (rc == 0 && st->pg) {
        c->pgcall.fn = on_pg_answer;
        c->pgcall.arg = c;
        rc = rpg_send(st->pg, &c->lane, &c->pgcall);
    } else if (rc == 0 && c->send) {
        rc = c->send(c);
    } else if (rc == 0 && st->cl) {
        c->ccall.argc = c->call.argc;
        c->ccall.argv = c->call.argv;
        c->ccall.argvlen = c->call.argvlen;
        c->ccall.fn = on_answer;
        c->ccall.arg = c;
        c->ccall.slot = c->slot;
        rc = rcl_send(st->cl, &c->ccall);
    } else if (rc == 0) {
        c->call.fn = on_answer;
        c->call.arg = c;
        rc = rconn_evalsha(st->conn, &c->call);
    }
    if (rc == 0) {
        st->stats.batches++;
        if (c->wait_replicas > 0)
            need_wait(st, c);
        if (c->answered)
            rstore_drain(st); /* Redis Cluster: every call of it failed at once (send_groups) */
        return;
    }
    if (rc == SLUICE_ENOMEM)
        rstore_call_fail(c, "out of memory");
    else if (st->cl && !st->closed && rcl_slot_why(st->cl, c->slot)[0])
        rstore_call_fail(c, rcl_slot_why(st->cl, c->slot)); /* this slot's master is down */
    else
        rstore_call_fail(c, rstore_down_why(st));
    rstore_drain(st);
}

const char *rstore_sha(const server *s)
{
    const rstore *st = state_of(s);

    if (st && st->cl)
        return rcl_sha(st->cl);
    return st && st->conn ? rconn_sha(st->conn) : "";
}

/* Sends one batch of the turn (or answers it by the failure mode when it cannot be sent). */
static void send_one(rstore *st, rbatch *b)
{
    int argc = 0, rc;
    const char **argv = NULL;
    const size_t *argvlen = NULL;
    uint64_t before;
    size_t n;

    if (st->closed) {
        rc = SLUICE_ESTATE;
    } else if (b->pb) {
        const char *const *values = NULL;

        rc = pgl_batch_params(b->pb, &values);
        rstore_call_pg(&b->base, RPG_LIMITS_STMT, PGL_CALL_NPARAMS, values);
    } else if (st->cl) {
        rc = 0; /* one call per master (send_groups) */
    } else {
        rc = !st->conn ? SLUICE_ESTATE
                       : rlim_batch_command(b->rb, rconn_sha(st->conn), &argc, &argv, &argvlen);
    }
    b->base.send = st->cl && b->rb ? send_groups : NULL;
    b->base.slot = b->slot;
    b->base.lane = st->pg ? b->slot : 0; /* PostgreSQL: the batch's slot is its lane */
    b->base.call.argc = argc;
    b->base.call.argv = argv;
    b->base.call.argvlen = argvlen;
    b->base.on_reply = decode_batch;
    b->base.apply = apply_batch;
    n = b->n;
    before = st->stats.batches;
    rstore_send(st->s, &b->base, rc);
    if (st->stats.batches != before)
        st->stats.requests += n;
}

/* Sends the turn's batches that pick says may go (every one when pick is NULL), in the order
 * they were created (the FIFO is send order); the others stay, in their order. */
static void send_some(rstore *st, int (*pick)(const rstore *st, const rbatch *b, int lane),
                      int lane)
{
    rbatch *b, *keep = NULL, *keep_tail = NULL;

    while ((b = st->cur) != NULL) {
        st->cur = b->tnext;
        if (!st->cur)
            st->cur_tail = NULL;
        b->tnext = NULL;
        if (pick && !pick(st, b, lane)) {
            if (keep_tail)
                keep_tail->tnext = b;
            else
                keep = b;
            keep_tail = b;
            continue;
        }
        if (st->open && st->open[b->slot] == b)
            st->open[b->slot] = NULL;
        if (st->added == b)
            st->added = NULL;
        send_one(st, b); /* a batch a reply's callback adds meanwhile joins the loop */
    }
    st->cur = keep;
    st->cur_tail = keep_tail;
}

void rstore_send_batch(rstore *st)
{
    send_some(st, NULL, 0);
}

/* send_some's picks: the batches of one lane; those whose lane has no call in flight. */
static int pick_lane(const rstore *st, const rbatch *b, int lane)
{
    (void)st;
    return b->slot == lane;
}

static int pick_free(const rstore *st, const rbatch *b, int lane)
{
    (void)lane;
    return rpg_may_send(st->pg, b->slot);
}

/* PostgreSQL: sends what lane holds back, its limits batches, else its task batch. */
static void send_lane(rstore *st, int lane)
{
    rbatch *b;

    for (b = st->cur; b && b->slot != lane; b = b->tnext)
        ;
    if (b)
        send_some(st, pick_lane, lane);
    else
        rtasks_flush_lane(st->s, lane);
}

void rstore_flush_limits(server *s)
{
    rstore *st = state_of(s);

    if (st && st->cur)
        rstore_send_batch(st);
}

void rstore_flush_limits_lane(server *s, int lane)
{
    rstore *st = state_of(s);

    if (st && st->cur)
        send_some(st, st->pg ? pick_lane : NULL, lane);
}

int rstore_may_send(const server *s, int lane)
{
    const rstore *st = state_of(s);

    return !st || !st->pg || rpg_may_send(st->pg, lane);
}

int rstore_lane(server *s, conn *c, int decision)
{
    rstore *st = state_of(s);

    return st && st->pg ? rpg_lane(st->pg, c, decision) : 0;
}

int rstore_lanes(const server *s)
{
    const rstore *st = state_of(s);

    return st && st->pg ? rpg_count(st->pg) : 1;
}

int rstore_listening(const server *s)
{
    const rstore *st = state_of(s);

    if (st && st->pg)
        return !st->closed && rpg_listening(st->pg);
    return rstore_up(s, NULL);
}

void rstore_turn(server *s)
{
    rstore *st = state_of(s);

    if (!st)
        return;
    /* PostgreSQL: a lane's batch is held while that lane has a call in flight; its answer
     * sends it. */
    if (st->cur)
        send_some(st, st->pg ? pick_free : NULL, 0);
    rtasks_turn(s);
}

/* ---- Requests ---------------------------------------------------------------------------- */

/* 1 when the store refused this node for good (PostgreSQL: a newer schema). */
int rstore_refused(const rstore *st)
{
    return st->pg && rpg_refused(st->pg);
}

int rstore_is_up(const rstore *st)
{
    if (st->closed)
        return 0;
    if (st->cl)
        return rcl_up(st->cl);
    if (st->pg)
        return rpg_up(st->pg);
    return st->conn && rconn_get_state(st->conn) == RCONN_UP;
}

const char *rstore_down_why(const rstore *st)
{
    const char *e;

    if (st->closed || (!st->conn && !st->pg && !st->cl))
        return "stopping";
    if (st->cl)
        return rcl_last_error(st->cl);
    if (st->pg)
        return rpg_why(st->pg);
    e = rconn_last_error(st->conn);
    if (e[0])
        return e;
    return rconn_state_name(rconn_get_state(st->conn));
}

int rstore_up(const server *s, const char **why)
{
    const rstore *st = state_of(s);

    if (st && rstore_is_up(st))
        return 1;
    if (why)
        *why = st ? rstore_down_why(st) : "no shared store";
    return 0;
}

/* The tag of a link (redis_limits.h: it scopes the store clock that decides it). Redis: the one
 * tag RTAG_QUEUE. PostgreSQL: none, so that each key has its own clock row: there a tag is a row
 * every call naming it locks, and one tag for everything would make every call of every node
 * wait for the one before it. Redis Cluster: rtag.h. */
static void set_tag(const rstore *st, rlim_link *l)
{
    /* Redis Cluster: a limit no type names gets the default tag, a function of (limit, key)
     * alone (the key, or the limit id for a global bucket; redis_limits.h), so that one state
     * lives in one slot whichever command or chain touches it, and keys spread over the
     * masters; a limit a type names lives in the queue's slot, where claims decide chains. */
    l->gen = 0;
    if (st->kind == CONFIG_STORE_POSTGRES ||
        (st->kind == CONFIG_STORE_REDIS_CLUSTER && !rtag_map_queued(&st->queued, l->limit_id))) {
        l->tag = NULL;
        l->taglen = 0;
        /* Its whole resets are generations the node names (rdefs.h): no tag holds them all. */
        if (st->kind == CONFIG_STORE_REDIS_CLUSTER)
            l->gen = rdefs_reset_gen(st->s, l->limit_id);
        return;
    }
    l->tag = RTAG_QUEUE;
    l->taglen = RTAG_QUEUE_LEN;
}

void rstore_link_tag(const server *s, rlim_link *l)
{
    const rstore *st = state_of(s);

    if (st)
        set_tag(st, l);
}

int rstore_in_queue_slot(const server *s, const char *limit_id)
{
    rlim_link l;

    memset(&l, 0, sizeof l);
    l.limit_id = limit_id;
    rstore_link_tag(s, &l);
    return l.tag != NULL;
}

int rstore_queue_slot(const server *s)
{
    const rstore *st = state_of(s);

    return st && st->kind == CONFIG_STORE_REDIS_CLUSTER
               ? rcl_key_slot("{" RTAG_QUEUE "}", RTAG_QUEUE_LEN + 2)
               : 0;
}

/* Redis Cluster: which limits live in the queue's slot, read once from the file at start (a
 * reload may not change them, rtag_cluster_moves). */
int rstore_build_queued(rstore *st)
{
    if (st->kind != CONFIG_STORE_REDIS_CLUSTER)
        return 0;
    return rtag_map_build(&st->queued, st->s->has_config ? &st->s->config : NULL);
}

/* The slot of a request's links on Redis Cluster (0 on other stores), or -1 (after replying
 * CROSSSLOT: its links' tags hash to different slots, and one script call cannot touch two
 * slots) or -2 (after replying: out of memory). names are the links' names for the message
 * (NULL: the limit ids). */
static int request_slot(const rstore *st, conn *c, const rlim_link *links, size_t n,
                        const char *const *names)
{
    int slot = -1;

    if (st->kind != CONFIG_STORE_REDIS_CLUSTER)
        return 0;
    for (size_t i = 0; i < n; i++) {
        rlim_names nm;
        int s;

        if (rlim_link_names(&links[i], &nm) != 0) {
            resp_error(conn_out(c), "NOMEM", "out of memory");
            return -2;
        }
        s = rcl_crc16(nm.tag, nm.taglen) & (RCL_SLOTS - 1);
        if (slot >= 0 && s != slot) {
            resp_error(conn_out(c), "CROSSSLOT",
                       "limits \"%s\" and \"%s\" of this request keep their state in "
                       "different Redis Cluster slots (each link's hash tag is its key, or its "
                       "limit for a global bucket), and one request is decided by one script "
                       "call in one slot; nothing was charged (docs/cluster.md)",
                       names ? names[0] : links[0].limit_id, names ? names[i] : links[i].limit_id);
            return -1;
        }
        slot = s;
    }
    return slot < 0 ? 0 : slot;
}

/* The turn's batch (created when needed), or NULL (out of memory). */
static rbatch *turn_batch(rstore *st, int slot)
{
    rbatch *b = st->open ? st->open[slot] : st->cur;

    if (b)
        return b;
    b = batch_get(st);
    if (!b)
        return NULL;
    b->slot = slot;
    b->tnext = NULL;
    if (st->cur_tail)
        st->cur_tail->tnext = b;
    else
        st->cur = b;
    st->cur_tail = b;
    if (st->open)
        st->open[slot] = b;
    return b;
}

/* Adds one request to the turn's batch for its slot and, when defer is 1, defers the client's
 * reply (0: the caller sets the wait's fn, and c only hears errors). Returns the wait (to be
 * completed by the caller, in st->added, before anything else touches the batch), or NULL after
 * replying. */
static rstore_wait *add_request_to(rstore *st, conn *c, rlim_op op, const rlim_link *links,
                                   size_t n, size_t namelen, const rlim_args *args, int slot,
                                   int defer)
{
    rbatch *b;
    rstore_wait *w;
    int idx;

    /* PostgreSQL: the request's lane is its batch's "slot" (rstore_pg.h: routing). */
    if (st->pg)
        slot = rpg_lane(st->pg, c, 1);
    /* A task call of this turn (of this lane) goes first: the FIFO is the order requests were
     * taken. */
    if (st->pg)
        rtasks_flush_lane(st->s, slot);
    else
        rtasks_flush(st->s);
    b = turn_batch(st, slot);
    if (!b) {
        resp_error(conn_out(c), "NOMEM", "out of memory");
        return NULL;
    }
    if (batch_reserve(b, n, namelen) != 0) {
        resp_error(conn_out(c), "NOMEM", "out of memory");
        return NULL;
    }
    idx = b->pb ? pgl_batch_add(b->pb, op, links, n, args)
                : rlim_batch_add(b->rb, op, links, n, args);
    if (idx < 0) {
        if (idx == SLUICE_ENOMEM)
            resp_error(conn_out(c), "NOMEM", "out of memory");
        else
            reply_engine_error(c, idx, "the shared store cannot take this request");
        return NULL;
    }
    if (st->cl)
        b->slots[b->n] = slot;
    w = &b->w[b->n++];
    memset(w, 0, sizeof(*w));
    st->added = b;
    w->c = defer ? c : NULL;
    w->ticket = defer ? conn_defer(c) : 0;
    w->req = idx;
    w->nlinks = n;
    w->dec = b->ndec;
    b->ndec += n;
    w->names = b->alen;
    return w;
}

static rstore_wait *add_request_args(rstore *st, conn *c, rlim_op op, const rlim_link *links,
                                     size_t n, size_t namelen, const rlim_args *args, int slot)
{
    return add_request_to(st, c, op, links, n, namelen, args, slot, 1);
}

static rstore_wait *add_request(rstore *st, conn *c, rlim_op op, const rlim_link *links, size_t n,
                                size_t namelen, int slot)
{
    rlim_args args;

    memset(&args, 0, sizeof(args));
    return add_request_args(st, c, op, links, n, namelen, &args, slot);
}

/* Sends the turn's batches at once when the last one used is full (the rest of the turn starts
 * others). All of them, in order: a batch sent ahead of an older one would be answered ahead of
 * it. */
static void maybe_send_full(rstore *st)
{
    if (st->added && st->added->n >= RSTORE_BATCH_MAX)
        rstore_send_batch(st);
}

/* request_slot for a THROTTLE, whose message names the links by their limits' names. */
static int throttle_slot(const rstore *st, conn *c, const rstore_link *links, const rlim_link *rl,
                         size_t n)
{
    const char *stack[LINKS_STACK], **names = stack;
    int slot;

    if (n > LINKS_STACK) {
        names = alloc_calloc(n, sizeof(*names));
        if (!names) {
            resp_error(conn_out(c), "NOMEM", "out of memory");
            return -2;
        }
    }
    for (size_t i = 0; i < n; i++)
        names[i] = links[i].name;
    slot = request_slot(st, c, rl, n, names);
    if (names != stack)
        alloc_free(names);
    return slot;
}

/* The store's links of a chain: each node's link with its hash tag. */
static void to_rlim_links(const rstore *st, const rstore_link *links, size_t n, rlim_link *rl)
{
    for (size_t i = 0; i < n; i++) {
        memset(&rl[i], 0, sizeof(rl[i]));
        rl[i].def = links[i].def;
        rl[i].limit_id = links[i].limit_id;
        rl[i].key = links[i].key;
        rl[i].keylen = links[i].keylen;
        rl[i].units = links[i].units;
        rl[i].shadow = links[i].shadow;
        set_tag(st, &rl[i]);
    }
}

void rstore_throttle(conn *c, const rstore_link *links, size_t n, unsigned flags)
{
    rstore *st = state_of(c->srv);
    rlim_link stack[LINKS_STACK], *rl = stack;
    size_t namelen = 0;
    rstore_wait *w;
    int slot;

    if (!rstore_is_up(st)) {
        req_info q = {WAIT_THROTTLE, def_capacity(links[0].def), 0, NULL, NULL, 0};

        reply_unavailable_decision(st, c, &q, rstore_down_why(st));
        return;
    }
    if (n > LINKS_STACK) {
        rl = alloc_calloc(n, sizeof(*rl));
        if (!rl) {
            resp_error(conn_out(c), "NOMEM", "out of memory");
            return;
        }
    }
    to_rlim_links(st, links, n, rl);
    for (size_t i = 0; i < n; i++)
        namelen += strlen(links[i].name) + 1;
    slot = st->kind == CONFIG_STORE_REDIS_CLUSTER ? throttle_slot(st, c, links, rl, n) : 0;
    w = slot < 0 ? NULL
                 : add_request(st, c, (flags & SLUICE_PEEK) ? RLIM_PEEK : RLIM_DECIDE, rl, n,
                               namelen, slot);
    if (rl != stack)
        alloc_free(rl);
    if (!w)
        return;
    w->kind = WAIT_THROTTLE;
    w->limit = def_capacity(links[0].def);
    w->units = links[0].units;
    w->peek = (flags & SLUICE_PEEK) != 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(links[i].name) + 1;

        memcpy(st->added->arena + st->added->alen, links[i].name, len);
        st->added->alen += len;
    }
    maybe_send_full(st);
}

int rstore_peek_then(conn *c, const rstore_link *links, size_t n, rstore_peek_fn fn, void *arg)
{
    rstore *st = state_of(c->srv);
    rlim_link stack[LINKS_STACK], *rl = stack;
    rlim_args args;
    rstore_wait *w;
    int slot;

    if (!rstore_is_up(st)) {
        fn(arg, NULL, NULL, rstore_down_why(st));
        return 0;
    }
    if (n > LINKS_STACK) {
        rl = alloc_calloc(n, sizeof(*rl));
        if (!rl) {
            resp_error(conn_out(c), "NOMEM", "out of memory");
            return -1;
        }
    }
    to_rlim_links(st, links, n, rl);
    memset(&args, 0, sizeof(args));
    slot = st->kind == CONFIG_STORE_REDIS_CLUSTER ? throttle_slot(st, c, links, rl, n) : 0;
    w = slot < 0 ? NULL : add_request_to(st, c, RLIM_PEEK, rl, n, 0, &args, slot, 0);
    if (rl != stack)
        alloc_free(rl);
    if (!w)
        return -1;
    w->kind = WAIT_THROTTLE;
    w->peek = 1;
    w->fn = fn;
    w->fn_arg = arg;
    maybe_send_full(st);
    return 0;
}

/* The link of a one-key request (CL.THROTTLE, LIMIT.BACKOFF, LIMIT.RATE, LEASE.*): def's state of
 * key under limit_id, tagged as THROTTLE tags it. */
static void one_link(rstore *st, rlim_link *link, const sluice_limit_def *def, const char *limit_id,
                     const char *key, size_t keylen, int64_t units)
{
    memset(link, 0, sizeof(*link));
    link->def = def;
    link->limit_id = limit_id;
    link->key = key;
    link->keylen = keylen;
    link->units = units > 0 ? units : 1;
    set_tag(st, link);
}

/* Adds a request of one link with namelen bytes of names for its reply; returns its wait, or
 * NULL after replying (no slot, no memory). */
static rstore_wait *add_one(rstore *st, conn *c, rlim_op op, const rlim_link *link,
                            const rlim_args *args, size_t namelen)
{
    int slot = request_slot(st, c, link, 1, NULL);

    return slot < 0 ? NULL : add_request_args(st, c, op, link, 1, namelen, args, slot);
}

void rstore_cell(conn *c, const sluice_limit_def *def, const char *id, const char *key,
                 size_t keylen, int64_t quantity, int64_t t_ns, int shadow)
{
    rstore *st = state_of(c->srv);
    rlim_link link;
    rlim_args args;
    rstore_wait *w;

    if (!rstore_is_up(st)) {
        req_info q = {WAIT_CELL, def_capacity(def), 0, NULL, NULL, 0};

        reply_unavailable_decision(st, c, &q, rstore_down_why(st));
        return;
    }
    one_link(st, &link, def, id, key, keylen, quantity);
    link.shadow = shadow;
    memset(&args, 0, sizeof(args));
    w = add_one(st, c, quantity ? RLIM_DECIDE : RLIM_PEEK, &link, &args, 0);
    if (!w)
        return;
    w->kind = WAIT_CELL;
    w->limit = def_capacity(def);
    w->quantity = quantity;
    w->t_ns = t_ns;
    maybe_send_full(st);
}

void rstore_backoff(conn *c, const sluice_limit_def *def, const char *limit_id, const char *key,
                    size_t keylen, int64_t wait_ns)
{
    rstore *st = state_of(c->srv);
    rlim_link link;
    rlim_args args;
    rstore_wait *w;

    if (!rstore_is_up(st)) {
        req_info q = {WAIT_BACKOFF, def_capacity(def), 0, NULL, NULL, 0};

        reply_unavailable_decision(st, c, &q, rstore_down_why(st));
        return;
    }
    one_link(st, &link, def, limit_id, key, keylen, 1);
    memset(&args, 0, sizeof(args));
    args.wait_ns = wait_ns;
    w = add_one(st, c, RLIM_BACKOFF, &link, &args, 0);
    if (!w)
        return;
    w->kind = WAIT_BACKOFF;
    w->limit = def_capacity(def);
    maybe_send_full(st);
}

void rstore_rate(conn *c, const sluice_limit_def *def, const char *limit_id, const char *key,
                 size_t keylen)
{
    rstore *st = state_of(c->srv);
    rlim_link link;
    rlim_args args;
    rstore_wait *w;

    if (!rstore_is_up(st)) {
        req_info q = {WAIT_RATE, def->limit, 0, NULL, NULL, 0};

        reply_unavailable_decision(st, c, &q, rstore_down_why(st));
        return;
    }
    one_link(st, &link, def, limit_id, key, keylen, 1);
    memset(&args, 0, sizeof(args));
    w = add_one(st, c, RLIM_RATE, &link, &args, sizeof(*def) + keylen);
    if (!w)
        return;
    /* The definition is copied: a reload may free def before the answer comes. */
    w->kind = WAIT_RATE;
    w->limit = def->limit;
    w->keylen = keylen;
    memcpy(st->added->arena + st->added->alen, def, sizeof(*def));
    if (keylen)
        memcpy(st->added->arena + st->added->alen + sizeof(*def), key, keylen);
    st->added->alen += sizeof(*def) + keylen;
    maybe_send_full(st);
}

void rstore_lease(conn *c, rlim_op op, const sluice_limit_def *def, const char *name,
                  const char *key, size_t keylen, int64_t units, uint64_t lease_id, int64_t ttl_ns,
                  int shadow)
{
    rstore *st = state_of(c->srv);
    wait_kind kind = op == RLIM_DECIDE        ? WAIT_ACQUIRE
                     : op == RLIM_LEASE_RENEW ? WAIT_RENEW
                                              : WAIT_RELEASE;
    size_t nlen = strlen(name) + 1;
    rlim_link link;
    rlim_args args;
    rstore_wait *w;

    if (!rstore_is_up(st)) {
        req_info q = {kind, def->limit, ttl_ns > 0 ? ttl_ns : def->ttl_ns, name, key, keylen};

        reply_unavailable_decision(st, c, &q, rstore_down_why(st));
        return;
    }
    one_link(st, &link, def, name, key, keylen, units);
    link.shadow = op == RLIM_DECIDE && shadow;
    memset(&args, 0, sizeof(args));
    args.ttl_ns = ttl_ns;
    args.lease_id = lease_id;
    w = add_one(st, c, op, &link, &args, nlen + keylen);
    if (!w)
        return;
    w->kind = kind;
    w->limit = def->limit;
    w->units = link.units;
    w->ttl_ns = ttl_ns > 0 ? ttl_ns : def->ttl_ns;
    w->keylen = keylen;
    memcpy(st->added->arena + st->added->alen, name, nlen);
    if (keylen)
        memcpy(st->added->arena + st->added->alen + nlen, key, keylen);
    st->added->alen += nlen + keylen;
    maybe_send_full(st);
}

int rstore_parse_handle(const char *s, size_t len, char *name, size_t namemax, uint64_t *id,
                        char *key, size_t keymax, size_t *keylen)
{
    const char *end = s + len, *p = memchr(s, '/', len), *q;
    uint64_t v = 0;
    size_t n = 0;

    if (!p || p == s || (size_t)(p - s) >= namemax || memchr(s, '\0', (size_t)(p - s)))
        return -1;
    memcpy(name, s, (size_t)(p - s));
    name[p - s] = '\0';
    q = ++p;
    while (p < end && *p >= '0' && *p <= '9') {
        uint64_t d = (uint64_t)(*p++ - '0');

        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    if (p == q || p == end || *p != '/' || (end - p - 1) % 2 != 0)
        return -1;
    for (p++; p < end; p += 2) {
        int hi = hex_digit_value((unsigned char)p[0]), lo = hex_digit_value((unsigned char)p[1]);

        if (hi < 0 || lo < 0 || n >= keymax)
            return -1;
        key[n++] = (char)(hi << 4 | lo);
    }
    *id = v;
    *keylen = n;
    return 0;
}

void rstore_conn_closed(conn *c)
{
    rstore *st = state_of(c->srv);

    if (!st)
        return;
    rtasks_conn_closed(c);
    rrecur_conn_closed(c);
    rdefs_conn_closed(c);
    for (rbatch *b = st->cur; b; b = b->tnext)
        for (size_t i = 0; i < b->n; i++)
            if (b->w[i].c == c)
                b->w[i].c = NULL;
    for (rstore_call *call = st->head; call; call = call->next) {
        rbatch *b = (rbatch *)(void *)call;

        if (call->apply != apply_batch)
            continue;
        for (size_t i = 0; i < b->n; i++)
            if (b->w[i].c == c)
                b->w[i].c = NULL;
    }
}

void rstore_reply_unavailable(conn *c, const char *command)
{
    char upper[64];
    size_t i;

    for (i = 0; command[i] && i + 1 < sizeof upper; i++)
        upper[i] =
            command[i] >= 'a' && command[i] <= 'z' ? (char)(command[i] - 'a' + 'A') : command[i];
    upper[i] = '\0';
    resp_error(conn_out(c), "ERR",
               "%s is not available with a %s store yet: this version shares THROTTLE, "
               "CL.THROTTLE, LEASE.*, the task queue (TASK.ADD, GET, ACK, FAIL, TOUCH, "
               "CANCEL, INFO), recurring series (RECUR.*) and live LIMIT.SET/DEL/KEY/KEYDEL "
               "changes across nodes only (docs/cluster.md)",
               upper, rstore_kind_name(c->srv));
}

config_store_kind rstore_kind(const server *s)
{
    const rstore *st = state_of(s);

    return st ? st->kind : CONFIG_STORE_REDIS;
}

const char *rstore_kind_name(const server *s)
{
    switch (rstore_kind(s)) {
    case CONFIG_STORE_POSTGRES:
        return "postgresql";
    case CONFIG_STORE_REDIS_CLUSTER:
        return "redis-cluster";
    case CONFIG_STORE_REDIS:
        break;
    }
    return "redis";
}
