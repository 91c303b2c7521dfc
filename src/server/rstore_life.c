/* SPDX-License-Identifier: MIT */
/*
 * The shared store's life on a node (rstore.h): opening it (Redis, Redis Cluster, PostgreSQL:
 * the URL's checks, the first connection's bounded wait before the server listens, the task
 * queue and series on it), noticing it go down and come back, closing it, and its figures
 * (rstore_get_stats, INFO store). The calls themselves are rstore.c's.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "base/alloc.h"
#include "server/commands.h"
#include "server/log.h"
#include "server/rcounters.h"
#include "server/rdefs.h"
#include "server/rrecur.h"
#include "server/rstore_impl.h"
#include "server/rtasks.h"
#include "sluice/error.h"
#include "store/shared_defs.h"

/* ---- Life -------------------------------------------------------------------------------- */

/* Logs a store that went down, once per reason. */
static void note_down(rstore *st, const char *why)
{
    if (!why || strcmp(why, st->logged_why) == 0)
        return;
    snprintf(st->logged_why, sizeof st->logged_why, "%s", why);
    log_warn("store %s: down: %s; until it is back decisions %s", st->url, why,
             st->fail_open ? "are granted (store_failure: open)"
                           : "answer -STOREDOWN (store_failure: closed)");
}

static void on_state(void *arg, rconn_state state, const char *why)
{
    rstore *st = arg;

    if (state == RCONN_UP) {
        log_info("store %s: up (limits script %s)", st->url, rconn_sha(st->conn));
        st->logged_why[0] = '\0';
        rtasks_store_up(st->s);
        return;
    }
    note_down(st, why);
}

static void on_cluster_state(void *arg, int up, const char *why)
{
    rstore *st = arg;

    if (up && !why) {
        rcl_stats cs;

        rcl_get_stats(st->cl, &cs);
        log_info("store %s: up (%zu masters, %zu of them connected, %zu slots mapped; limits "
                 "script %s)",
                 st->url, cs.masters, cs.masters_up, cs.slots_known, rcl_sha(st->cl));
        st->logged_why[0] = '\0';
        return;
    }
    if (up) {
        /* One master lost: its slots answer by the failure mode, the others keep deciding. */
        log_warn("store %s: a master is down: %s; its slots' decisions %s until it is back",
                 st->url, why, st->fail_open ? "are granted" : "answer -STOREDOWN");
        return;
    }
    note_down(st, why);
}

/* Opens the task queue's and the series' node side on the store (rtasks_open: u says where the
 * wake subscriber connects, NULL on PostgreSQL, whose connection LISTENs). Returns 0, or an
 * error with msg (then neither is open). */
static int open_queue(rstore *st, const config_store_url *u, char *msg, size_t msglen)
{
    int rc = rtasks_open(st->s, u, st->timeout_ms, msg, msglen);

    if (rc == 0 && rrecur_open(st->s) != 0) {
        rtasks_free(st->s);
        snprintf(msg, msglen, "out of memory");
        rc = SLUICE_ENOMEM;
    }
    return rc;
}

/* Connects to a Redis Cluster's masters (rstore_open's half for it), and the task queue's
 * subscriber to a seed (rtasks_open). Returns 0, or an error with msg. */
static int open_cluster(rstore *st, char *msg, size_t msglen)
{
    rcl_options o;
    rcl_addr seeds[CONFIG_STORE_SEEDS_MAX];
    size_t script_len = 0;
    int rc;

    for (size_t i = 0; i < st->u.nseeds; i++) {
        snprintf(seeds[i].host, sizeof seeds[i].host, "%s", st->u.seeds[i].host);
        seeds[i].port = st->u.seeds[i].port;
    }
    memset(&o, 0, sizeof(o));
    o.seeds = seeds;
    o.nseeds = st->u.nseeds;
    o.timeout_ms = st->timeout_ms;
    o.user = st->u.user;
    o.password = st->u.password;
    o.script = rlim_script(&script_len);
    o.script_len = script_len;
    o.on_state = on_cluster_state;
    o.arg = st;
    if (rstore_build_queued(st) != 0) {
        snprintf(msg, msglen, "out of memory");
        return SLUICE_ENOMEM;
    }
    rc = rcl_new(&st->s->loop, &o, &st->cl);
    if (rc != 0) {
        rtag_map_free(&st->queued);
        snprintf(msg, msglen, "store %s: %s", st->url, sluice_strerror(rc));
        return rc;
    }
    st->s->rstore_state = st;
    rc = open_queue(st, &st->u, msg, msglen);
    if (rc != 0) {
        rcl_free(st->cl);
        st->cl = NULL;
        rtag_map_free(&st->queued);
        st->s->rstore_state = NULL;
    }
    return rc;
}

/* Connects to PostgreSQL (rstore_open's half for it). Returns 0, or an error with msg. */
static int open_pg(rstore *st, char *msg, size_t msglen)
{
    rpg_options o;
    char why[256];
    int rc;

    if (st->replicas > 0) {
        snprintf(msg, msglen,
                 "store: replicas is a Redis setting (WAIT); on PostgreSQL configure "
                 "synchronous_standby_names and synchronous_commit instead (docs/cluster.md)");
        return SLUICE_EINVAL;
    }
    if (pgconn_check_conninfo(st->url, why, sizeof why) != 0) {
        config_store_redact(st->url, sizeof st->url);
        snprintf(msg, msglen, "bad store URL \"%.120s\": %s", st->url, why);
        return SLUICE_EINVAL;
    }
    {
        char shown[sizeof st->url];

        snprintf(shown, sizeof shown, "%s", st->url);
        config_store_redact(shown, sizeof shown);
        memset(&o, 0, sizeof(o));
        o.conninfo = st->url;
        o.url = shown;
        o.connections = st->s->opt.store_connections > 0 ? st->s->opt.store_connections
                                                         : RPG_CONNECTIONS_DEFAULT;
        o.timeout_ms = st->timeout_ms;
        o.fail_open = st->fail_open;
        st->open = alloc_calloc((size_t)o.connections, sizeof(*st->open));
        rc = st->open ? rpg_new(st->s, &o, &st->pg) : SLUICE_ENOMEM; /* copies both */
    }
    config_store_redact(st->url, sizeof st->url);
    if (rc != 0) {
        alloc_free(st->open);
        st->open = NULL;
        snprintf(msg, msglen, "store %s: %s", st->url, sluice_strerror(rc));
        return rc;
    }
    st->s->rstore_state = st;
    rc = open_queue(st, NULL, msg, msglen);
    if (rc != 0) {
        rpg_free(st->pg);
        st->pg = NULL;
        alloc_free(st->open);
        st->open = NULL;
        st->s->rstore_state = NULL;
    }
    return rc;
}

/* Connects to Redis, and its task queue's subscriber (rstore_open's half for it). Returns 0, or
 * an error with msg. */
static int open_redis(rstore *st, char *msg, size_t msglen)
{
    server *s = st->s;
    rconn_options o;
    size_t script_len = 0;
    const char *script = rlim_script(&script_len);
    int rc;

    memset(&o, 0, sizeof(o));
    o.host = st->u.host;
    o.port = st->u.port;
    o.db = st->u.db;
    o.user = st->u.user;
    o.password = st->u.password;
    o.timeout_ms = st->timeout_ms;
    o.script = script;
    o.script_len = script_len;
    o.on_state = on_state;
    o.arg = st;
    rc = rconn_new(&s->loop, &o, &st->conn);
    if (rc != 0) {
        snprintf(msg, msglen, "store %s: %s", st->url, sluice_strerror(rc));
        return rc;
    }
    s->rstore_state = st;
    rc = open_queue(st, &st->u, msg, msglen);
    if (rc != 0) {
        rconn_free(st->conn);
        st->conn = NULL;
        s->rstore_state = NULL;
    }
    return rc;
}

int rstore_open(server *s, char *msg, size_t msglen)
{
    rstore *st;
    uint64_t until;
    int rc;

    if (!s->opt.store_url)
        return 0;
    st = alloc_calloc(1, sizeof(*st));
    if (!st) {
        snprintf(msg, msglen, "out of memory");
        return SLUICE_ENOMEM;
    }
    rc = config_store_parse_url(s->opt.store_url, &st->u, msg, msglen);
    if (rc != 0) {
        alloc_free(st);
        return rc;
    }
    if (strlen(s->opt.store_url) >= sizeof st->url) {
        snprintf(msg, msglen, "bad store URL: longer than %zu bytes", sizeof st->url - 1);
        alloc_free(st);
        return SLUICE_EINVAL;
    }
    snprintf(st->url, sizeof st->url, "%s", s->opt.store_url);
    st->kind = st->u.kind;
    if (st->kind != CONFIG_STORE_POSTGRES) /* st->u has the AUTH; INFO and the log never show it */
        config_store_redact(st->url, sizeof st->url);
    rtag_map_init(&st->queued);
    s->opt.store_url = st->url; /* the caller's string (the config's) may not outlive a reload */
    st->s = s;
    st->fail_open = s->opt.store_failure == SLUICE_STORE_FAILURE_OPEN;
    st->timeout_ms = s->opt.store_timeout_ms > 0
                         ? s->opt.store_timeout_ms
                         : CONFIG_STORE_DEFAULT_TIMEOUT_NS / SLUICE_NS_PER_MS;
    st->audit = s->opt.store_audit;
    st->replicas = s->opt.store_replicas > 0 ? s->opt.store_replicas : 0;
    st->replicas_timeout_ms = s->opt.store_replicas_timeout_ms > 0
                                  ? s->opt.store_replicas_timeout_ms
                                  : st->timeout_ms / 2;
    if (st->replicas > 0 &&
        (st->replicas_timeout_ms < 1 || st->replicas_timeout_ms >= st->timeout_ms)) {
        /* WAIT blocks the connection: a WAIT as long as the store's deadline would make every
         * call behind it time out and drop the connection. */
        snprintf(msg, msglen,
                 "store: the replicas timeout (%" PRId64 " ms) must be at least 1 ms and less "
                 "than the store timeout (%" PRId64 " ms)",
                 st->replicas_timeout_ms, st->timeout_ms);
        alloc_free(st);
        return SLUICE_EINVAL;
    }
    if (st->kind != CONFIG_STORE_POSTGRES && s->opt.store_connections > 0) {
        snprintf(msg, msglen,
                 "store: connections is a PostgreSQL setting; a %s store keeps one connection "
                 "per node (per master on a Cluster)",
                 st->kind == CONFIG_STORE_REDIS_CLUSTER ? "redis-cluster" : "redis");
        alloc_free(st);
        return SLUICE_EINVAL;
    }
    rc = st->kind == CONFIG_STORE_POSTGRES        ? open_pg(st, msg, msglen)
         : st->kind == CONFIG_STORE_REDIS_CLUSTER ? open_cluster(st, msg, msglen)
                                                  : open_redis(st, msg, msglen);
    if (rc != 0) {
        alloc_free(st);
        return rc;
    }
    s->rstore_state = st;
    /* The first connection before listening, so that a node that starts next to a running Redis
     * decides its first request; a Redis still down after the timeout is not fatal. */
    until = uv_now(&s->loop) + (uint64_t)st->timeout_ms;
    /* PostgreSQL: every connection (they follow the first one), so that the node starts with
     * all of them; up with fewer after the timeout. */
    while (!(st->pg ? rpg_all_up(st->pg) : rstore_is_up(st)) && !rstore_refused(st) &&
           uv_now(&s->loop) < until)
        uv_run(&s->loop, UV_RUN_ONCE);
    if (rstore_refused(st)) {
        /* A newer schema than this build knows: starting would answer -STOREDOWN forever. */
        snprintf(msg, msglen, "store %s: %s", st->url, rstore_down_why(st));
        rstore_free(s);
        return SLUICE_ESTATE;
    }
    if (!rstore_is_up(st))
        log_warn("store %s: not up after %" PRId64 " ms (%s); starting anyway, decisions %s "
                 "until it is",
                 st->url, st->timeout_ms, rstore_down_why(st),
                 st->fail_open ? "are granted" : "answer -STOREDOWN");
    /* The shared limit definitions, loaded before the first decision when the store is up. */
    if (rdefs_open(s, st->timeout_ms) != 0) {
        snprintf(msg, msglen, "out of memory");
        rstore_free(s);
        return SLUICE_ENOMEM;
    }
    log_info("store %s: THROTTLE, CL.THROTTLE, LEASE.* and the task queue in %s (store_failure: "
             "%s, timeout %" PRId64 " ms%s)",
             st->url,
             st->pg   ? "PostgreSQL"
             : st->cl ? "Redis Cluster"
                      : "Redis",
             st->fail_open ? "open" : "closed", st->timeout_ms, st->audit ? ", audit on" : "");
    if (st->replicas > 0)
        log_info("store %s: task writes wait for %d replica(s) (WAIT, %" PRId64 " ms)", st->url,
                 st->replicas, st->replicas_timeout_ms);
    return 0;
}

void rstore_close(server *s)
{
    rstore *st = state_of(s);
    rconn *rc;

    if (!st || st->closed)
        return;
    st->closed = 1;
    rstore_send_batch(st); /* answered by the failure mode at once: closed */
    rtasks_close(s);
    rrecur_close(s);
    rdefs_close(s);
    rc = st->conn;
    rconn_free(rc); /* answers what is in flight ("stopped") */
    st->conn = NULL;
    rpg_free(st->pg); /* likewise, on every connection */
    st->pg = NULL;
    rcl_free(st->cl); /* likewise */
    st->cl = NULL;
    rstore_drain(st);
}

void rstore_free(server *s)
{
    rstore *st = state_of(s);
    rbatch *b;

    if (!st)
        return;
    rstore_close(s); /* answers and applies every call in flight: the FIFO is empty */
    rtasks_free(s);
    rrecur_free(s);
    rdefs_free(s);
    while ((b = st->cur) != NULL) { /* none: rstore_close sent them */
        st->cur = b->tnext;
        rstore_batch_free(b);
    }
    while ((b = st->spare) != NULL) {
        st->spare = b->next;
        rstore_batch_free(b);
    }
    rtag_map_free(&st->queued);
    alloc_free(st->open); /* PostgreSQL's per-lane batch pointers */
    alloc_free(st);
    s->rstore_state = NULL;
}

/* The connection's side of the counters, whichever store it is. */
static void conn_counts(rstore_stats *out, int up, const char *state, const char *last_error,
                        uint64_t connects, uint64_t disconnects, uint64_t failed_connects,
                        uint64_t timeouts, uint64_t in_flight)
{
    out->up = up;
    out->state = state;
    out->last_error = last_error;
    out->connects = connects;
    out->disconnects = disconnects;
    out->failed_connects = failed_connects;
    out->timeouts = timeouts;
    out->in_flight = in_flight;
}

void rstore_get_stats(const server *s, rstore_stats *out)
{
    const rstore *st = state_of(s);
    rconn_stats cs;
    pgconn_stats ps;

    memset(out, 0, sizeof(*out));
    out->state = "none";
    out->last_error = "";
    if (!st)
        return;
    *out = st->stats;
    if (st->closed || (!st->conn && !st->pg && !st->cl)) {
        out->state = "stopped";
        out->last_error = "";
        return;
    }
    if (st->pg) {
        int up;

        /* The connections' sums; "up" while one is (rstore_pg.h), the error lane 0's. */
        rpg_get_stats(st->pg, &ps, &up);
        conn_counts(out, up > 0, rpg_state_name(st->pg), rpg_last_error(st->pg), ps.connects,
                    ps.disconnects, ps.failed_connects, ps.timeouts, ps.in_flight);
        return;
    }
    if (st->cl) {
        rcl_stats ks;

        rcl_get_stats(st->cl, &ks);
        out->up = rcl_up(st->cl);
        out->state = out->up ? "up" : "down";
        out->last_error = rcl_last_error(st->cl);
        out->connects = ks.connects;
        out->disconnects = ks.disconnects;
        out->failed_connects = ks.failed_connects;
        out->timeouts = ks.timeouts;
        out->script_loads = ks.script_loads;
        out->in_flight = ks.in_flight;
        return;
    }
    rconn_get_stats(st->conn, &cs);
    conn_counts(out, rconn_get_state(st->conn) == RCONN_UP,
                rconn_state_name(rconn_get_state(st->conn)), rconn_last_error(st->conn),
                cs.connects, cs.disconnects, cs.failed_connects, cs.timeouts, cs.in_flight);
    out->script_loads = cs.script_loads;
}

void rstore_info(const server *s, char *buf, size_t len)
{
    const rstore *st = state_of(s);
    rstore_stats x;
    rtasks_stats t;
    size_t at;

    if (!st) {
        snprintf(buf, len, "# Store\r\nstore:embedded\r\n");
        return;
    }
    rstore_get_stats(s, &x);
    snprintf(buf, len,
             "# Store\r\nstore:%s\r\nstore_url:%s\r\nstore_state:%s\r\nstore_failure:%s\r\n"
             "store_timeout_ms:%" PRId64 "\r\nstore_audit:%d\r\nstore_batches:%" PRIu64
             "\r\nstore_requests:%" PRIu64 "\r\nstore_answered:%" PRIu64
             "\r\nstore_unavailable:%" PRIu64 "\r\nstore_fail_open_grants:%" PRIu64
             "\r\nstore_in_flight:%" PRIu64 "\r\nstore_connects:%" PRIu64
             "\r\nstore_disconnects:%" PRIu64 "\r\nstore_failed_connects:%" PRIu64
             "\r\nstore_timeouts:%" PRIu64 "\r\nstore_script_loads:%" PRIu64
             "\r\nstore_last_error:%s\r\n",
             rstore_kind_name(s), st->url, x.state, st->fail_open ? "open" : "closed",
             st->timeout_ms, st->audit, x.batches, x.requests, x.answered, x.unavailable,
             x.fail_open_grants, x.in_flight, x.connects, x.disconnects, x.failed_connects,
             x.timeouts, x.script_loads, x.last_error);
    if (st->cl) {
        rcl_stats ks;

        rcl_get_stats(st->cl, &ks);
        at = strlen(buf);
        snprintf(buf + at, len - at,
                 "store_cluster_masters:%zu\r\nstore_cluster_masters_up:%zu\r\n"
                 "store_cluster_slots_known:%zu\r\nstore_cluster_moved:%" PRIu64
                 "\r\nstore_cluster_asks:%" PRIu64 "\r\nstore_cluster_tryagains:%" PRIu64
                 "\r\nstore_cluster_refreshes:%" PRIu64
                 "\r\nstore_cluster_refresh_failures:%" PRIu64
                 "\r\nstore_cluster_cross_calls:%" PRIu64 "\r\nstore_cluster_splits:%" PRIu64
                 "\r\nstore_cluster_split_parts:%" PRIu64 "\r\n",
                 ks.masters, ks.masters_up, ks.slots_known, ks.moved, ks.asks, ks.tryagains,
                 ks.refreshes, ks.refresh_failures, ks.multi, ks.splits, ks.parts);
    }
    rtasks_get_stats(s, &t);
    at = strlen(buf);
    snprintf(buf + at, len - at,
             "store_task_requests:%" PRIu64 "\r\nstore_task_claims:%" PRIu64
             "\r\nstore_task_delivered:%" PRIu64 "\r\nstore_task_waiters:%" PRIu64
             "\r\nstore_task_wakes:%" PRIu64 "\r\nstore_task_subscriber:%s\r\n"
             "store_replicas:%d\r\nstore_replicas_timeout_ms:%" PRId64
             "\r\nstore_replica_waits:%" PRIu64 "\r\nstore_under_replicated:%" PRIu64 "\r\n",
             t.requests, t.claims, t.delivered, t.waiters, t.wakes, t.subscriber_up ? "up" : "down",
             st->replicas, st->replicas_timeout_ms, x.replica_waits, t.under_replicated);
    if (st->pg)
        rpg_info_append(st->pg, buf, len);
    rrecur_info_append(s, buf, len);
    rdefs_info_append(s, buf, len);
}
