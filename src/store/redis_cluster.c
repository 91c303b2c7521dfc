/* SPDX-License-Identifier: MIT */
/*
 * Redis Cluster routing (redis_cluster.h): the nodes we know (seeds and the masters CLUSTER SLOTS
 * named), one rconn each, the slot map as indexes into them, and each call's redirects.
 *
 * Nodes are never forgotten while the cluster lives: a master that left the map keeps its
 * connection (cheap, and it may come back), so an index into `nodes` stays valid and a MOVED to a
 * node we once knew finds its connection already up. The map is replaced whole by each
 * successful CLUSTER SLOTS; a MOVED corrects its one slot at once, before the refresh answers,
 * so the calls that follow go to the new owner straight away.
 *
 * Invariants:
 * - owner[s] is -1 or an index into nodes;
 * - at most one CLUSTER SLOTS is in flight (refresh_busy);
 * - a call is in at most one connection's list at a time: it is resent only from its own
 *   answer's callback, after rconn has let go of it.
 */
#include "store/redis_cluster.h"

#include <stdio.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "base/alloc.h"
#include "base/grow.h"
#include "sluice/error.h"

/* While some slot has no known owner (or a refresh failed), the map is read again this often. */
#define REFRESH_MS 1000
/* A slot that made a call across slots be refused (it is migrating, or moved) goes in calls of
 * its own this long, so that a migration does not make every call of its master be sent twice. */
#define SOLO_MS 1000

/* ---- Pure parts -------------------------------------------------------------------------- */

uint16_t rcl_crc16(const void *buf, size_t len)
{
    const unsigned char *p = buf;
    uint16_t crc = 0;

    /* Bit by bit: a key is hashed once per request, and the table a faster form needs is more
     * code than this loop costs. */
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)(p[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = (uint16_t)((crc & 0x8000) ? ((crc << 1) ^ 0x1021) : (crc << 1));
    }
    return crc;
}

int rcl_key_slot(const char *key, size_t len)
{
    const char *open = len ? memchr(key, '{', len) : NULL;

    if (open) {
        size_t rest = len - (size_t)(open - key) - 1;
        const char *close = rest ? memchr(open + 1, '}', rest) : NULL;

        if (close && close > open + 1)
            return rcl_crc16(open + 1, (size_t)(close - open - 1)) & (RCL_SLOTS - 1);
    }
    return rcl_crc16(key, len) & (RCL_SLOTS - 1);
}

static int map_node(rcl_map *m, const char *host, size_t hostlen, int port)
{
    for (size_t i = 0; i < m->nnodes; i++)
        if (m->nodes[i].port == port && strlen(m->nodes[i].host) == hostlen &&
            memcmp(m->nodes[i].host, host, hostlen) == 0)
            return (int)i;
    if (m->nnodes >= RCL_NODES_MAX)
        return -1;
    memcpy(m->nodes[m->nnodes].host, host, hostlen);
    m->nodes[m->nnodes].host[hostlen] = '\0';
    m->nodes[m->nnodes].port = port;
    return (int)m->nnodes++;
}

int rcl_map_parse(const redisReply *r, const char *fallback_host, rcl_map *m)
{
    for (size_t s = 0; s < RCL_SLOTS; s++)
        m->owner[s] = -1;
    m->nnodes = 0;
    if (!r || r->type != REDIS_REPLY_ARRAY)
        return SLUICE_EPARSE;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i], *n;
        const char *host;
        size_t hostlen;
        int idx;

        if (!e || e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER)
            return SLUICE_EPARSE;
        n = e->element[2];
        if (n->type != REDIS_REPLY_ARRAY || n->elements < 2 ||
            n->element[1]->type != REDIS_REPLY_INTEGER)
            return SLUICE_EPARSE;
        if (e->element[0]->integer < 0 || e->element[1]->integer >= RCL_SLOTS ||
            e->element[0]->integer > e->element[1]->integer || n->element[1]->integer < 1 ||
            n->element[1]->integer > 65535)
            return SLUICE_EPARSE;
        if (n->element[0]->type == REDIS_REPLY_STRING && n->element[0]->len > 0 &&
            !(n->element[0]->len == 1 && n->element[0]->str[0] == '?')) {
            host = n->element[0]->str;
            hostlen = n->element[0]->len;
        } else if (n->element[0]->type == REDIS_REPLY_STRING ||
                   n->element[0]->type == REDIS_REPLY_NIL) {
            /* The node does not know how it is reached: the address we asked it at. */
            host = fallback_host ? fallback_host : "";
            hostlen = strlen(host);
        } else {
            return SLUICE_EPARSE;
        }
        if (hostlen == 0 || hostlen > RCL_HOST_MAX)
            return SLUICE_EPARSE;
        idx = map_node(m, host, hostlen, (int)n->element[1]->integer);
        if (idx < 0)
            return SLUICE_EPARSE;
        for (long long s = e->element[0]->integer; s <= e->element[1]->integer; s++)
            m->owner[s] = (int16_t)idx;
    }
    return 0;
}

int rcl_parse_redirect(const char *s, size_t len, int *slot, rcl_addr *to)
{
    const char *p, *end = s + len, *colon = NULL;
    int kind;
    long v = 0, port = 0;

    if (len > 6 && memcmp(s, "MOVED ", 6) == 0) {
        kind = 1;
        p = s + 6;
    } else if (len > 4 && memcmp(s, "ASK ", 4) == 0) {
        kind = 2;
        p = s + 4;
    } else {
        return 0;
    }
    if (p == end || *p < '0' || *p > '9')
        return 0;
    while (p < end && *p >= '0' && *p <= '9' && v < RCL_SLOTS)
        v = v * 10 + (*p++ - '0');
    if (v >= RCL_SLOTS || p == end || *p != ' ')
        return 0;
    p++;
    for (const char *q = p; q < end; q++)
        if (*q == ':')
            colon = q;
    if (!colon || colon == p || (size_t)(colon - p) > RCL_HOST_MAX || colon + 1 == end)
        return 0;
    for (const char *q = colon + 1; q < end; q++) {
        if (*q < '0' || *q > '9' || port > 65535)
            return 0;
        port = port * 10 + (*q - '0');
    }
    if (port < 1 || port > 65535)
        return 0;
    memcpy(to->host, p, (size_t)(colon - p));
    to->host[colon - p] = '\0';
    to->port = (int)port;
    *slot = (int)v;
    return kind;
}

size_t rcl_split(const int *slots, size_t n, size_t *order, rcl_span *spans)
{
    size_t ns = 0, at = 0, k;

    /* Quadratic in the slots of one call, and only run when a call was refused (a migration):
     * simpler than a hash, and a turn's call holds a few hundred requests at most. */
    for (size_t i = 0; i < n; i++) {
        for (k = 0; k < ns && spans[k].slot != slots[i]; k++)
            ;
        if (k == ns) {
            spans[ns].slot = slots[i];
            spans[ns++].n = 0;
        }
        spans[k].n++;
    }
    for (k = 0; k < ns; k++) {
        spans[k].first = at;
        at += spans[k].n;
        spans[k].n = 0;
    }
    for (size_t i = 0; i < n; i++) {
        for (k = 0; spans[k].slot != slots[i]; k++)
            ;
        order[spans[k].first + spans[k].n++] = i;
    }
    return ns;
}

int rcl_split_worthy(const char *s, size_t len)
{
    static const char *const words[] = {"XSLOT",     "MOVED",       "ASK",        "TRYAGAIN",
                                        "CROSSSLOT", "CLUSTERDOWN", "OOM",        "BUSY",
                                        "LOADING",   "READONLY",    "MASTERDOWN", "NOSCRIPT"};

    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        size_t w = strlen(words[i]);

        if (len >= w && memcmp(s, words[i], w) == 0 && (len == w || s[w] == ' '))
            return 1;
    }
    return 0;
}

/* ---- The cluster connection --------------------------------------------------------------- */

typedef struct rcl_node {
    rcluster *cl;
    rcl_addr a;
    rconn *conn;
    int up; /* its connection is UP */
} rcl_node;

struct rcluster {
    uv_loop_t *loop;
    uv_timer_t timer; /* the periodic refresh while the map is incomplete */
    uv_timer_t retry; /* the resend of the calls answered -TRYAGAIN */
    rcl_call *retry_head, *retry_tail;
    int handles; /* timers not yet closed */
    int64_t timeout_ms;
    const char *script;
    size_t script_len;
    const char *user, *password; /* AUTH (borrowed) */
    void (*on_state)(void *arg, int up, const char *why);
    void *arg;
    rcl_node **nodes; /* every node we know; never shrinks */
    size_t nnodes, capnodes;
    int16_t owner[RCL_SLOTS];
    uint64_t *solo; /* RCL_SLOTS entries: until when (uv_now) a slot goes alone (SOLO_MS) */
    int have_map;
    int was_up;   /* rcl_up at the last on_state */
    rcl_map *tmp; /* a refresh's parse target (large: not on the stack) */
    rconn_call refresh;
    const char *refresh_argv[2];
    size_t refresh_argvlen[2];
    size_t refresh_node; /* the node the refresh in flight was sent to */
    int refresh_busy;
    int want_refresh;
    size_t rr; /* where the next refresh starts looking for an up node */
    int stopping;
    rcl_stats st;
    char last_error[256];
    char why[400]; /* rcl_slot_why's and a failed redirect's text */
};

static int add_node(rcluster *cl, const rcl_addr *a);

static void notify(rcluster *cl, const char *why)
{
    int up = rcl_up(cl);

    if (cl->on_state && (up != cl->was_up || why))
        cl->on_state(cl->arg, up, why);
    cl->was_up = up;
}

static int find_node(const rcluster *cl, const char *host, int port)
{
    for (size_t i = 0; i < cl->nnodes; i++)
        if (cl->nodes[i]->a.port == port && strcmp(cl->nodes[i]->a.host, host) == 0)
            return (int)i;
    return -1;
}

static void on_refresh(void *arg, const redisReply *reply, const char *why);

/* Reads the map again from a master that is up (none: later, when one comes up). */
static void refresh(rcluster *cl)
{
    if (cl->stopping)
        return;
    cl->want_refresh = 1;
    if (cl->refresh_busy)
        return;
    for (size_t k = 0; k < cl->nnodes; k++) {
        size_t i = (cl->rr + k) % cl->nnodes;

        if (!cl->nodes[i]->up)
            continue;
        cl->refresh_argv[0] = "CLUSTER";
        cl->refresh_argvlen[0] = 7;
        cl->refresh_argv[1] = "SLOTS";
        cl->refresh_argvlen[1] = 5;
        cl->refresh.argc = 2;
        cl->refresh.argv = cl->refresh_argv;
        cl->refresh.argvlen = cl->refresh_argvlen;
        cl->refresh.fn = on_refresh;
        cl->refresh.arg = cl;
        if (rconn_evalsha(cl->nodes[i]->conn, &cl->refresh) == 0) {
            cl->refresh_busy = 1;
            cl->refresh_node = i;
            cl->want_refresh = 0;
            cl->rr = i + 1;
            return;
        }
    }
}

static void on_refresh(void *arg, const redisReply *reply, const char *why)
{
    rcluster *cl = arg;
    rcl_node *from;
    int16_t idx[RCL_NODES_MAX];
    size_t known = 0;

    (void)why;
    cl->refresh_busy = 0;
    if (cl->stopping)
        return;
    from = cl->nodes[cl->refresh_node];
    if (!reply || rcl_map_parse(reply, from->a.host, cl->tmp) != 0) {
        cl->st.refresh_failures++;
        if (reply && reply->type == REDIS_REPLY_ERROR)
            snprintf(cl->last_error, sizeof cl->last_error, "CLUSTER SLOTS at %.60s:%d: %.150s",
                     from->a.host, from->a.port, reply->str);
        cl->want_refresh = 1; /* the timer tries again */
        return;
    }
    for (size_t i = 0; i < cl->tmp->nnodes; i++) {
        int at = find_node(cl, cl->tmp->nodes[i].host, cl->tmp->nodes[i].port);

        if (at < 0)
            at = add_node(cl, &cl->tmp->nodes[i]);
        if (at < 0) {
            cl->st.refresh_failures++;
            cl->want_refresh = 1;
            return;
        }
        idx[i] = (int16_t)at;
    }
    for (size_t s = 0; s < RCL_SLOTS; s++) {
        cl->owner[s] = cl->tmp->owner[s] < 0 ? -1 : idx[cl->tmp->owner[s]];
        known += cl->owner[s] >= 0;
    }
    cl->st.refreshes++;
    cl->have_map = 1;
    /* A slot nobody serves (a cluster being set up, a master lost without a replica): look
     * again on the timer. */
    if (known < RCL_SLOTS)
        cl->want_refresh = 1;
    notify(cl, NULL);
}

static void on_node_state(void *arg, rconn_state state, const char *why)
{
    rcl_node *n = arg;
    rcluster *cl = n->cl;

    if (cl->stopping)
        return;
    if (state == RCONN_UP) {
        n->up = 1;
        if (!cl->have_map || cl->want_refresh)
            refresh(cl);
        notify(cl, NULL);
        return;
    }
    if (!n->up)
        return;
    n->up = 0;
    snprintf(cl->last_error, sizeof cl->last_error, "%.100s:%d: %.120s", n->a.host, n->a.port,
             why ? why : "down");
    /* A master lost may mean a failover: its slots may have a new owner. */
    refresh(cl);
    notify(cl, cl->last_error);
}

static int add_node(rcluster *cl, const rcl_addr *a)
{
    rconn_options o;
    rcl_node *n;

    if (cl->nnodes >= RCL_NODES_MAX ||
        grow_array(&cl->nodes, &cl->capnodes, cl->nnodes + 1, sizeof(*cl->nodes), 8) != 0)
        return -1;
    n = alloc_calloc(1, sizeof(*n));
    if (!n)
        return -1;
    n->cl = cl;
    n->a = *a;
    memset(&o, 0, sizeof(o));
    o.host = n->a.host;
    o.port = n->a.port;
    o.db = 0;
    o.timeout_ms = cl->timeout_ms;
    o.script = cl->script;
    o.script_len = cl->script_len;
    o.user = cl->user;
    o.password = cl->password;
    o.on_state = on_node_state;
    o.arg = n;
    if (rconn_new(cl->loop, &o, &n->conn) != 0) {
        alloc_free(n);
        return -1;
    }
    cl->nodes[cl->nnodes] = n;
    return (int)cl->nnodes++;
}

static void on_timer(uv_timer_t *t)
{
    rcluster *cl = t->data;

    if (cl->want_refresh)
        refresh(cl);
}

int rcl_new(uv_loop_t *loop, const rcl_options *o, rcluster **out)
{
    rcluster *cl;

    *out = NULL;
    if (!o->seeds || o->nseeds == 0 || o->timeout_ms <= 0 || !o->script)
        return SLUICE_EINVAL;
    cl = alloc_calloc(1, sizeof(*cl));
    if (!cl)
        return SLUICE_ENOMEM;
    cl->tmp = alloc_malloc(sizeof(*cl->tmp));
    cl->solo = alloc_calloc(RCL_SLOTS, sizeof(*cl->solo));
    if (!cl->tmp || !cl->solo) {
        alloc_free(cl->tmp);
        alloc_free(cl->solo);
        alloc_free(cl);
        return SLUICE_ENOMEM;
    }
    cl->loop = loop;
    cl->timeout_ms = o->timeout_ms;
    cl->script = o->script;
    cl->script_len = o->script_len;
    cl->user = o->user;
    cl->password = o->password;
    cl->on_state = o->on_state;
    cl->arg = o->arg;
    for (size_t s = 0; s < RCL_SLOTS; s++)
        cl->owner[s] = -1;
    snprintf(cl->last_error, sizeof cl->last_error, "no slot map yet");
    for (size_t i = 0; i < o->nseeds; i++) {
        if (find_node(cl, o->seeds[i].host, o->seeds[i].port) >= 0)
            continue;
        if (add_node(cl, &o->seeds[i]) < 0) {
            for (size_t k = 0; k < cl->nnodes; k++) {
                rconn_free(cl->nodes[k]->conn);
                alloc_free(cl->nodes[k]);
            }
            alloc_free(cl->nodes);
            alloc_free(cl->tmp);
            alloc_free(cl->solo);
            alloc_free(cl);
            return SLUICE_ENOMEM;
        }
    }
    uv_timer_init(loop, &cl->timer);
    cl->timer.data = cl;
    uv_timer_init(loop, &cl->retry);
    cl->retry.data = cl;
    cl->handles = 2;
    uv_timer_start(&cl->timer, on_timer, REFRESH_MS, REFRESH_MS);
    *out = cl;
    return 0;
}

static void on_timer_closed(uv_handle_t *h)
{
    rcluster *cl = h->data;

    if (--cl->handles == 0)
        alloc_free(cl);
}

void rcl_free(rcluster *cl)
{
    rcl_call *c;

    if (!cl || cl->stopping)
        return;
    cl->stopping = 1;
    while ((c = cl->retry_head) != NULL) {
        cl->retry_head = c->retry;
        c->retry = NULL;
        c->fn(c->arg, NULL, "stopped");
    }
    cl->retry_tail = NULL;
    /* Each rconn_free answers its calls in flight ("stopped"): on_inner hands them on. */
    for (size_t i = 0; i < cl->nnodes; i++) {
        rconn_free(cl->nodes[i]->conn);
        alloc_free(cl->nodes[i]);
    }
    alloc_free(cl->nodes);
    cl->nodes = NULL;
    cl->nnodes = 0;
    alloc_free(cl->tmp);
    cl->tmp = NULL;
    alloc_free(cl->solo);
    cl->solo = NULL;
    uv_timer_stop(&cl->timer);
    uv_timer_stop(&cl->retry);
    uv_close((uv_handle_t *)&cl->timer, on_timer_closed);
    uv_close((uv_handle_t *)&cl->retry, on_timer_closed);
}

int rcl_up(const rcluster *cl)
{
    if (!cl || cl->stopping || !cl->have_map)
        return 0;
    for (size_t i = 0; i < cl->nnodes; i++)
        if (cl->nodes[i]->up)
            return 1;
    return 0;
}

const char *rcl_last_error(const rcluster *cl)
{
    if (!cl || cl->stopping)
        return "stopping";
    return cl->last_error;
}

const char *rcl_slot_why(rcluster *cl, int slot)
{
    int o;

    if (!cl || cl->stopping)
        return "stopping";
    o = slot >= 0 && slot < RCL_SLOTS ? cl->owner[slot] : -1;
    if (o < 0) {
        snprintf(cl->why, sizeof cl->why, "no master of the cluster is known for slot %d (%.200s)",
                 slot, cl->last_error);
        return cl->why;
    }
    if (!cl->nodes[o]->up) {
        const char *e = rconn_last_error(cl->nodes[o]->conn);

        snprintf(cl->why, sizeof cl->why, "the master of slot %d, %.100s:%d, is down: %.150s", slot,
                 cl->nodes[o]->a.host, cl->nodes[o]->a.port,
                 e[0] ? e : rconn_state_name(rconn_get_state(cl->nodes[o]->conn)));
        return cl->why;
    }
    return "";
}

const char *rcl_sha(const rcluster *cl)
{
    for (size_t i = 0; cl && i < cl->nnodes; i++)
        if (rconn_sha(cl->nodes[i]->conn)[0])
            return rconn_sha(cl->nodes[i]->conn);
    return "";
}

static void on_asking(void *arg, const redisReply *reply, const char *why)
{
    /* ASKING answers +OK; a failure shows in the call that follows it. The call's memory is not
     * touched: it may be answered already. */
    (void)arg;
    (void)reply;
    (void)why;
}

static int route(rcluster *cl, rcl_call *call);

static void on_retry(uv_timer_t *t);

/* 1 when call was queued to be resent in RCL_TRYAGAIN_MS (within its budget: the timeout since
 * it was first sent), else 0. */
static int queue_retry(rcluster *cl, rcl_call *call)
{
    if (cl->stopping ||
        uv_now(cl->loop) - call->first_ms + RCL_TRYAGAIN_MS > (uint64_t)cl->timeout_ms)
        return 0;
    call->redirects = 0; /* the time budget bounds the rounds of a migration */
    call->resent = 1;
    call->retry = NULL;
    if (cl->retry_tail)
        cl->retry_tail->retry = call;
    else
        cl->retry_head = call;
    cl->retry_tail = call;
    if (!uv_is_active((uv_handle_t *)&cl->retry))
        uv_timer_start(&cl->retry, on_retry, RCL_TRYAGAIN_MS, 0);
    return 1;
}

/* Resends the queued calls by the map (the owner answers ASK again while the slot migrates,
 * MOVED once it has; a new owner's connection may have come up meanwhile); one that cannot be
 * sent waits again within its budget, else is answered with why. */
static void on_retry(uv_timer_t *t)
{
    rcluster *cl = t->data;
    rcl_call *list = cl->retry_head, *c;

    cl->retry_head = cl->retry_tail = NULL;
    while ((c = list) != NULL) {
        list = c->retry;
        c->retry = NULL;
        if (route(cl, c) != 0 && !queue_retry(cl, c))
            c->fn(c->arg, NULL,
                  rcl_slot_why(cl, c->slot)[0] ? rcl_slot_why(cl, c->slot)
                                               : "could not resend the call");
    }
}

/* 1 when call, answered -TRYAGAIN, was queued to be resent. */
static int queue_tryagain(rcluster *cl, rcl_call *call, const redisReply *reply)
{
    if (reply->len < 8 || memcmp(reply->str, "TRYAGAIN", 8) != 0 || !queue_retry(cl, call))
        return 0;
    cl->st.tryagains++;
    return 1;
}

/* The owner's answer: a redirect is followed (the call goes on), TRYAGAIN resent after a
 * pause, anything else is the caller's. */
static void on_inner(void *arg, const redisReply *reply, const char *why)
{
    rcl_call *call = arg;
    rcluster *cl = call->cl;
    rcl_addr to;
    int slot = 0, kind = 0, at;

    call->resent |= call->inner.retried; /* rconn sent it again after NOSCRIPT */
    if (reply && reply->type == REDIS_REPLY_ERROR && !cl->stopping) {
        if (queue_tryagain(cl, call, reply))
            return;
        kind = rcl_parse_redirect(reply->str, reply->len, &slot, &to);
    }
    if (kind == 0 || call->redirects >= RCL_REDIRECTS_MAX) {
        call->fn(call->arg, reply, why);
        return;
    }
    call->redirects++;
    call->resent = 1;
    at = find_node(cl, to.host, to.port);
    if (at < 0)
        at = add_node(cl, &to);
    if (kind == 1) {
        cl->st.moved++;
        if (at >= 0)
            cl->owner[slot] = (int16_t)at;
        refresh(cl);
    } else {
        cl->st.asks++;
    }
    if (at >= 0 && cl->nodes[at]->up) {
        rconn *c = cl->nodes[at]->conn;

        if (kind == 2) {
            static const char *const asking_argv[1] = {"ASKING"};
            static const size_t asking_len[1] = {6};

            call->asking.argc = 1;
            call->asking.argv = (const char **)asking_argv;
            call->asking.argvlen = asking_len;
            call->asking.fn = on_asking;
            call->asking.arg = NULL;
            if (rconn_evalsha(c, &call->asking) != 0)
                goto fail;
        }
        if (rconn_evalsha(c, &call->inner) == 0)
            return;
    }
fail:
    /* A master we did not know (a promoted replica, a new master) is being connected: the call
     * waits for it within its budget. */
    if (at >= 0 && !cl->nodes[at]->up && queue_retry(cl, call))
        return;
    snprintf(cl->why, sizeof cl->why, "slot %d %s to %.100s:%d, which is not connected yet", slot,
             kind == 1 ? "moved" : "is being migrated", to.host, to.port);
    call->fn(call->arg, NULL, cl->why);
}

/* Sends call to its slot's owner as the map knows it. Returns 0 or an rconn error. */
static int route(rcluster *cl, rcl_call *call)
{
    int o = cl->owner[call->slot];

    if (o < 0 || !cl->nodes[o]->up)
        return SLUICE_ESTATE;
    return rconn_evalsha(cl->nodes[o]->conn, &call->inner);
}

int rcl_send(rcluster *cl, rcl_call *call)
{
    if (!cl || cl->stopping || call->slot < 0 || call->slot >= RCL_SLOTS)
        return SLUICE_ESTATE;
    call->cl = cl;
    call->redirects = 0;
    call->resent = 0;
    call->retry = NULL;
    call->first_ms = uv_now(cl->loop);
    call->inner.argc = call->argc;
    call->inner.argv = call->argv;
    call->inner.argvlen = call->argvlen;
    call->inner.fn = on_inner;
    call->inner.arg = call;
    return route(cl, call);
}

/* ---- Calls across slots ------------------------------------------------------------------ */

/* One part of a split call: one slot's requests, routed as any call (rcl_send). */
struct rcl_mpart {
    rcl_call call;
    rcl_multi *m;
    size_t span;
};

int rcl_group(const rcluster *cl, int slot)
{
    int o;

    if (!cl || cl->stopping || slot < 0 || slot >= RCL_SLOTS)
        return -1;
    o = cl->owner[slot];
    if (o < 0 || !cl->nodes[o]->up || cl->solo[slot] > uv_now(cl->loop))
        return -1;
    return o;
}

static void part_done(rcl_multi *m)
{
    if (--m->pending == 0)
        m->fn(m->arg, NULL, NULL);
}

static void on_part_answer(void *arg, const redisReply *reply, const char *why)
{
    struct rcl_mpart *mp = arg;
    rcl_multi *m = mp->m;
    const rcl_span *sp = &m->spans[mp->span];

    m->on_part(m->arg, &m->order[sp->first], sp->n, reply, why);
    part_done(m);
}

/* Makes room in m's arrays for n requests and nparts parts. Not while parts are in flight. */
static int multi_room(rcl_multi *m, size_t n, size_t nparts)
{
    if (n > m->cap) {
        size_t *order = alloc_malloc(n * sizeof(*order));
        rcl_span *spans = alloc_malloc(n * sizeof(*spans));

        if (!order || !spans) {
            alloc_free(order);
            alloc_free(spans);
            return SLUICE_ENOMEM;
        }
        alloc_free(m->order);
        alloc_free(m->spans);
        m->order = order;
        m->spans = spans;
        m->cap = n;
    }
    if (nparts > m->capparts) {
        struct rcl_mpart *parts = alloc_calloc(nparts, sizeof(*parts));

        if (!parts)
            return SLUICE_ENOMEM;
        alloc_free(m->parts);
        m->parts = parts;
        m->capparts = nparts;
    }
    return 0;
}

/* The master refused m before running it: each slot's requests go as a call of their own. Safe
 * because the refusal wrote nothing (rcl_split_worthy; limits.lua, "calls across slots"). */
static void split(rcluster *cl, rcl_multi *m, const redisReply *reply)
{
    size_t ns;
    int slot;
    rcl_addr to;

    if (multi_room(m, m->n, 0) != 0) {
        m->fn(m->arg, NULL, "out of memory");
        return;
    }
    cl->st.splits++;
    /* "XSLOT <prefix>:{<tag>}: ...": that tag's slot goes alone for a while; a MOVED or ASK
     * names its slot. */
    if (reply->len > 6 && memcmp(reply->str, "XSLOT ", 6) == 0) {
        /* The probe key ends at the tag's '}' (a tag never holds one; it may hold spaces). */
        const char *k = reply->str + 6, *end = memchr(k, '}', reply->len - 6);

        if (end)
            cl->solo[rcl_key_slot(k, (size_t)(end - k) + 1)] = uv_now(cl->loop) + SOLO_MS;
    } else if (rcl_parse_redirect(reply->str, reply->len, &slot, &to) != 0) {
        cl->solo[slot] = uv_now(cl->loop) + SOLO_MS;
    }
    ns = rcl_split(m->slots, m->n, m->order, m->spans);
    if (multi_room(m, m->n, ns) != 0) {
        m->fn(m->arg, NULL, "out of memory");
        return;
    }
    m->pending = ns + 1; /* held until every part is sent: a part failing at once cannot end m */
    for (size_t k = 0; k < ns; k++) {
        struct rcl_mpart *mp = &m->parts[k];
        const rcl_span *sp = &m->spans[k];
        int rc;

        memset(mp, 0, sizeof(*mp));
        mp->m = m;
        mp->span = k;
        rc = m->build(m->arg, k, &m->order[sp->first], sp->n, &mp->call.argc, &mp->call.argv,
                      &mp->call.argvlen);
        if (rc == 0) {
            mp->call.fn = on_part_answer;
            mp->call.arg = mp;
            mp->call.slot = sp->slot;
            rc = rcl_send(cl, &mp->call);
        }
        if (rc == 0) {
            cl->st.parts++;
            continue;
        }
        m->on_part(m->arg, &m->order[sp->first], sp->n, NULL,
                   rc == SLUICE_ENOMEM             ? "out of memory"
                   : rcl_slot_why(cl, sp->slot)[0] ? rcl_slot_why(cl, sp->slot)
                                                   : "could not send the call");
        m->pending--;
    }
    part_done(m);
}

static void on_multi_answer(void *arg, const redisReply *reply, const char *why)
{
    rcl_multi *m = arg;
    rcluster *cl = m->cl;

    /* No answer (a connection lost, a timeout): the call may have run, so it is never resent. */
    if (!reply || reply->type != REDIS_REPLY_ERROR || cl->stopping ||
        !rcl_split_worthy(reply->str, reply->len)) {
        m->fn(m->arg, reply, why);
        return;
    }
    split(cl, m, reply);
}

/* A group of one slot (node -1): one part, its requests all, sent as that slot's call. */
static int send_single(rcluster *cl, rcl_multi *m)
{
    struct rcl_mpart *mp;
    int rc;

    if (multi_room(m, m->n, 1) != 0)
        return SLUICE_ENOMEM;
    for (size_t i = 0; i < m->n; i++)
        m->order[i] = i;
    m->spans[0].slot = m->slots[0];
    m->spans[0].first = 0;
    m->spans[0].n = m->n;
    mp = &m->parts[0];
    memset(mp, 0, sizeof(*mp));
    mp->m = m;
    rc = m->build(m->arg, 0, m->order, m->n, &mp->call.argc, &mp->call.argv, &mp->call.argvlen);
    if (rc != 0)
        return rc;
    mp->call.fn = on_part_answer;
    mp->call.arg = mp;
    mp->call.slot = m->slots[0];
    m->pending = 1;
    rc = rcl_send(cl, &mp->call);
    if (rc != 0)
        m->pending = 0;
    return rc;
}

int rcl_send_multi(rcluster *cl, rcl_multi *m)
{
    int rc;

    if (!cl || cl->stopping || m->n == 0)
        return SLUICE_ESTATE;
    m->cl = cl;
    m->pending = 0;
    if (m->node < 0)
        return send_single(cl, m);
    if ((size_t)m->node >= cl->nnodes || !cl->nodes[m->node]->up)
        return SLUICE_ESTATE;
    m->inner.argc = m->argc;
    m->inner.argv = m->argv;
    m->inner.argvlen = m->argvlen;
    m->inner.fn = on_multi_answer;
    m->inner.arg = m;
    rc = rconn_evalsha(cl->nodes[m->node]->conn, &m->inner);
    if (rc == 0)
        cl->st.multi++;
    return rc;
}

void rcl_multi_free(rcl_multi *m)
{
    if (!m)
        return;
    alloc_free(m->order);
    alloc_free(m->spans);
    alloc_free(m->parts);
    m->order = NULL;
    m->spans = NULL;
    m->parts = NULL;
    m->cap = m->capparts = 0;
}

void rcl_get_stats(const rcluster *cl, rcl_stats *out)
{
    int seen[RCL_NODES_MAX];

    memset(out, 0, sizeof(*out));
    if (!cl)
        return;
    *out = cl->st;
    out->masters = out->masters_up = out->slots_known = 0;
    out->connects = out->disconnects = out->failed_connects = 0;
    out->timeouts = out->script_loads = out->in_flight = 0;
    memset(seen, 0, sizeof seen);
    for (size_t s = 0; s < RCL_SLOTS; s++)
        if (cl->owner[s] >= 0) {
            out->slots_known++;
            seen[(size_t)cl->owner[s]] = 1;
        }
    for (size_t i = 0; i < cl->nnodes; i++) {
        rconn_stats rs;

        if (seen[i]) {
            out->masters++;
            out->masters_up += cl->nodes[i]->up ? 1u : 0u;
        }
        rconn_get_stats(cl->nodes[i]->conn, &rs);
        out->connects += rs.connects;
        out->disconnects += rs.disconnects;
        out->failed_connects += rs.failed_connects;
        out->timeouts += rs.timeouts;
        out->script_loads += rs.script_loads;
        out->in_flight += rs.in_flight;
    }
}
