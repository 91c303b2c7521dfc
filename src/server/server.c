/* SPDX-License-Identifier: MIT */
/*
 * The server: the libuv loop, the listener, signals, the cached clock, the engine timer, the end
 * of a loop turn ("before sleep": retry blocked clients, flush replies) and the graceful stop.
 * See server.h for the shape of a loop turn.
 *
 * Ownership: the server owns the engine, the loaded configuration, every client and every
 * libuv handle here. It is freed only once the loop has stopped, which happens when every handle
 * is closed: server_stop closes the listener and the signal handles, each client closes once its
 * replies are written, and the last client to go closes the timers and the turn hooks.
 */
#include "server/server.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <sys/socket.h>

#include "base/alloc.h"
#include "config/config_store.h"
#include "server/admin/admin.h"
#include "server/commands.h"
#include "server/conn.h"
#include "server/durable.h"
#include "server/log.h"
#include "server/rcounters.h"
#include "server/rstore.h"
#include "server/memory.h"
#include "sluice/error.h"

#define LISTEN_BACKLOG      511
#define HOUSEKEEPING_MS     100
#define HOUSEKEEPING_BUDGET 2000 /* keys examined per limit per housekeeping run */
/* Limits swept per housekeeping run, round-robin: with 200,000 limits, sweeping them all took
 * the loop 200 ms of every 100; each limit's turn now comes every nlimits / 1024 runs. */
#define HOUSEKEEPING_LIMITS 1024

void server_options_init(server_options *o)
{
    memset(o, 0, sizeof(*o));
    o->bind = SERVER_DEFAULT_BIND;
    o->port = SERVER_DEFAULT_PORT;
    o->protected_mode = 1;
    o->max_clients = SERVER_DEFAULT_MAX_CLIENTS;
    o->auth_reserve = SERVER_DEFAULT_AUTH_RESERVE;
    o->auth_timeout_ms = SERVER_DEFAULT_AUTH_TIMEOUT_MS;
    resp_limits_init(&o->limits);
    o->limits.max_bulk_len = SERVER_DEFAULT_MAX_BULK;
    o->limits.max_args = SERVER_DEFAULT_MAX_ARGS;
    o->limits.max_inline_len = SERVER_DEFAULT_MAX_INLINE;
    o->limits.max_query_len = SERVER_DEFAULT_MAX_QUERY;
    o->preauth.max_bulk_len = SERVER_PREAUTH_MAX_BULK;
    o->preauth.max_args = SERVER_PREAUTH_MAX_ARGS;
    o->preauth.max_inline_len = SERVER_PREAUTH_MAX_INLINE;
    o->preauth.max_query_len = SERVER_PREAUTH_MAX_QUERY;
    o->max_key_len = SERVER_DEFAULT_MAX_KEY;
    o->max_payload_len = SERVER_DEFAULT_MAX_PAYLOAD;
    o->max_output = SERVER_DEFAULT_MAX_OUTPUT;
    o->max_adhoc = SERVER_DEFAULT_MAX_ADHOC;
    o->shutdown_ms = SERVER_DEFAULT_SHUTDOWN_MS;
    o->admin_bind = SERVER_DEFAULT_BIND;
    o->admin_port = -1;
    o->store_replicas = -1;
}

/* ---- The clock --------------------------------------------------------------------------- */

/* The only clock read behind a decision in sluice (server.h, "The clock"). No ratchet here:
 * CLOCK_MONOTONIC does not go back and the offset only ever grows (durable_load raises it to the
 * stored floor), so this never returns less than before; the one clamp is the limits' (limit.h). */
int64_t server_now(server *s)
{
    if (!s->now_valid) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        s->now_ns =
            (int64_t)ts.tv_sec * SLUICE_NS_PER_SEC + (int64_t)ts.tv_nsec + s->clock_offset_ns;
        s->now_valid = 1;
    }
    return s->now_ns;
}

/* ---- Protected mode and passwords -------------------------------------------------------- */

int server_peer_allowed(const struct sockaddr *peer, int has_password, int protected_mode)
{
    if (has_password || !protected_mode)
        return 1;
    if (!peer)
        return 0;
    if (peer->sa_family == AF_UNIX)
        return 1;
    if (peer->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)(const void *)peer;
        const unsigned char *a = (const unsigned char *)&in->sin_addr.s_addr;

        return a[0] == 127;
    }
    if (peer->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)(const void *)peer;
        const unsigned char *a = in6->sin6_addr.s6_addr;
        static const unsigned char loop6[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
        static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

        if (memcmp(a, loop6, 16) == 0)
            return 1;
        return memcmp(a, mapped, 12) == 0 && a[12] == 127;
    }
    return 0;
}

/* SHA-256 of len bytes; returns 0 or -1. */
static int digest(const char *p, size_t len, unsigned char out[32])
{
    unsigned int n = 0;

    if (EVP_Digest(p, len, out, &n, EVP_sha256(), NULL) != 1 || n != 32)
        return -1;
    return 0;
}

int server_check_password(const server *s, const char *pass, size_t len)
{
    unsigned char d[32];

    if (!s->has_password)
        return 0;
    /* Comparing digests makes the comparison independent of the lengths as well. */
    if (digest(pass, len, d) != 0)
        return 0;
    return CRYPTO_memcmp(d, s->password_digest, sizeof(d)) == 0;
}

/* ---- Configuration ----------------------------------------------------------------------- */

static int str_eq(const char *a, const char *b)
{
    if (!a || !b)
        return a == b;
    return strcmp(a, b) == 0;
}

static int def_eq(const sluice_limit_def *a, const sluice_limit_def *b)
{
    return a->kind == b->kind && a->limit == b->limit && a->period_ns == b->period_ns &&
           a->burst == b->burst && a->start_empty == b->start_empty && a->ttl_ns == b->ttl_ns &&
           a->calendar == b->calendar && a->horizon_ns == b->horizon_ns &&
           a->max_keys == b->max_keys && a->key_overflow == b->key_overflow &&
           a->max_key_len == b->max_key_len && a->decrease_num == b->decrease_num &&
           a->decrease_den == b->decrease_den && a->recover_pct == b->recover_pct &&
           a->recover_ns == b->recover_ns && a->floor_permits == b->floor_permits &&
           a->floor_period_ns == b->floor_period_ns;
}

int server_policy_eq(const sluice_limit_policy *a, const sluice_limit_policy *b)
{
    if (!str_eq(a->name, b->name) || !def_eq(&a->def, &b->def) || a->key_source != b->key_source ||
        !str_eq(a->key_path, b->key_path) || a->missing_key_global != b->missing_key_global ||
        a->missing_key_skip != b->missing_key_skip || a->overflow != b->overflow ||
        a->mode != b->mode || a->units_source != b->units_source ||
        a->units_fixed != b->units_fixed || !str_eq(a->units_path, b->units_path) ||
        !str_eq(a->tier_path, b->tier_path) || a->ntiers != b->ntiers)
        return 0;
    if (a->noverrides != b->noverrides)
        return 0;
    for (size_t i = 0; i < a->noverrides; i++) {
        const sluice_key_override *x = &a->overrides[i];
        size_t j = 0;

        /* The same keys with the same limits, in any order. */
        while (j < b->noverrides && !str_eq(x->key, b->overrides[j].key))
            j++;
        if (j == b->noverrides || !def_eq(&x->def, &b->overrides[j].def))
            return 0;
    }
    for (size_t i = 0; i < a->ntiers; i++) {
        const sluice_tier *x = &a->tiers[i], *y = &b->tiers[i];

        if (!str_eq(x->name, y->name) || x->min != y->min || x->max != y->max ||
            !str_eq(x->equals, y->equals) || !def_eq(&x->def, &y->def))
            return 0;
    }
    return 1;
}

int server_policy_mode_only(const sluice_limit_policy *a, const sluice_limit_policy *b)
{
    sluice_limit_policy same;

    if (a->mode == b->mode)
        return 0;
    /* A shallow copy: only compared, never freed. */
    same = *b;
    same.mode = a->mode;
    return server_policy_eq(a, &same);
}

static int def_adaptive(const sluice_limit_def *d)
{
    return d->decrease_den > 0;
}

const char *server_limit_unsupported(const sluice_limit_policy *p, int postgres)
{
    int adaptive = def_adaptive(&p->def);

    if (!postgres) /* the Redis script decides AIMD rates (limits.lua, "adaptive rates") */
        return NULL;
    for (size_t t = 0; t < p->ntiers; t++)
        adaptive |= def_adaptive(&p->tiers[t].def);
    for (size_t k = 0; k < p->noverrides; k++)
        adaptive |= def_adaptive(&p->overrides[k].def);
    if (adaptive)
        return "adaptive rate limits are not available with the PostgreSQL store yet (its "
               "functions know no AIMD rate; the Redis store has them)";
    return NULL;
}

int server_store_postgres(const server *s)
{
    return config_store_is_postgres(s->opt.store_url);
}

const char *server_store_unsupported(const sluice_config *c, int postgres)
{
    for (size_t i = 0; i < c->nlimits; i++) {
        const char *why = server_limit_unsupported(&c->limits[i], postgres);

        if (why)
            return why;
    }
    for (size_t i = 0; postgres && i < c->ntypes; i++)
        if (c->types[i].fairness == SLUICE_FAIR_KEYS)
            return "fairness: keys is not available with the PostgreSQL store yet (its shared "
                   "queue hands out tasks by priority, then arrival; the Redis store has it)";
    return NULL;
}

void server_apply_budget(server *s)
{
    size_t bytes = s->opt.maxmemory;

    if (!s->opt.maxmemory_set && s->has_config && s->config.has_maxmemory)
        bytes = s->config.maxmemory;
    if (bytes != s->maxmemory || alloc_budget() != bytes)
        log_info("memory budget: %zu bytes%s", bytes, bytes ? "" : " (no limit)");
    mem_set_budget(s, bytes);
}

/* ---- Engine timer and housekeeping ------------------------------------------------------- */

static void on_engine_timer(uv_timer_t *t)
{
    server *s = t->data;
    int rc;

    s->engine_wake = SLUICE_NEVER;
    s->now_valid = 0;
    rc = sluice_engine_tick(s->engine, server_now(s));
    if (rc != 0)
        log_error("engine tick: %s", sluice_strerror(rc));
    server_signal_ready(s);
}

static void arm_engine_timer(server *s)
{
    int64_t wake, now;
    uint64_t delay;

    if (s->stopping)
        return;
    wake = sluice_engine_next_wake(s->engine);
    if (wake == s->engine_wake)
        return;
    s->engine_wake = wake;
    if (wake == SLUICE_NEVER) {
        uv_timer_stop(&s->engine_timer);
        return;
    }
    now = server_now(s);
    delay = wake <= now ? 0 : (uint64_t)((wake - now + SLUICE_NS_PER_MS - 1) / SLUICE_NS_PER_MS);
    uv_timer_start(&s->engine_timer, on_engine_timer, delay, 0);
}

void server_engine_changed(server *s)
{
    arm_engine_timer(s);
}

/* The engine forgets idle keys of its limits in its tick, which otherwise runs only when work
 * is due, and with a small budget; housekeeping ticks it regularly and sweeps the limits with a
 * larger budget, so memory follows the active keys even under millions of keys a second. */
static void on_housekeeping(uv_timer_t *t)
{
    server *s = t->data;
    int64_t now;
    int rc;

    s->now_valid = 0;
    now = server_now(s);
    rc = sluice_engine_tick(s->engine, now);
    if (rc != 0)
        log_error("engine tick: %s", sluice_strerror(rc));
    sluice_engine_sweep_limits(s->engine, now, HOUSEKEEPING_BUDGET, HOUSEKEEPING_LIMITS);
    cmd_cell_sweep(s, now, HOUSEKEEPING_BUDGET);
    conn_sweep_timeouts(s, now);
    /* Counters summed across nodes: this node's counts out, everyone's totals in. */
    rcounters_tick(s);
    server_signal_ready(s);
}

static void on_event(const sluice_event *ev, void *arg)
{
    static const char *const kinds[] = {"?",        "throttled",     "deferred",
                                        "rejected", "unknown_limit", "budget",
                                        "key_cap",  "shadow_denied", "recurring_too_fast"};
    const char *kind = (size_t)ev->kind < sizeof(kinds) / sizeof(kinds[0]) ? kinds[ev->kind] : "?";

    admin_on_event(arg, ev);
    if (ev->kind == SLUICE_EVENT_RECURRING_TOO_FAST) {
        log_warn("recurring series %s (type %s) is scheduled every %.3f s but limit %s lets one "
                 "occurrence through every %.3f s: occurrences will wait behind the limiter",
                 ev->key ? ev->key : "-", ev->type ? ev->type : "-", (double)ev->wanted / 1e9,
                 ev->limit ? ev->limit : "-", (double)ev->granted / 1e9);
        return;
    }
    log_info("event %s%s limit=%s key=%s type=%s count=%" PRIu64, kind,
             ev->summary ? " (summary)" : "", ev->limit ? ev->limit : "-", ev->key ? ev->key : "-",
             ev->type ? ev->type : "-", ev->count);
}

/* ---- The end of a loop turn -------------------------------------------------------------- */

void server_signal_ready(server *s)
{
    s->ready_signalled = 1;
}

static void retry_blocked(server *s)
{
    conn *c = s->blocked_head;

    while (c) {
        conn *next = c->bnext;

        if ((c->flags & CONN_BLOCKED) && c->block_ops && c->block_ops->retry)
            c->block_ops->retry(c, c->block_arg);
        c = next;
    }
}

static void before_sleep(uv_prepare_t *h)
{
    server *s = h->data;
    int rounds = 0;
    conn *c;

    /* Resumed clients may signal again (a submit that feeds a waiting worker): loop until
     * quiet, since the poll that follows may sleep for long; a bounded number of rounds, so a
     * callback that always signals cannot spin the loop (the housekeeping tick retries). */
    do {
        if (s->ready_signalled) {
            s->ready_signalled = 0;
            retry_blocked(s);
        }
        /* The turn's shared-store decisions leave as one call; their replies wait for it. */
        rstore_turn(s);
        /* One commit for every change of the turn, before any reply it holds can leave. */
        durable_turn(s);
        while ((c = s->pending) != NULL) {
            s->pending = c->pnext;
            c->pnext = NULL;
            c->flags &= ~CONN_PENDING;
            if (c->flags & CONN_RESUME) {
                /* Unblocked this turn: run what it sent meanwhile (this may queue it again). */
                c->flags &= ~CONN_RESUME;
                conn_process(c);
                if (c->flags & CONN_PENDING)
                    continue;
            }
            conn_flush(c);
        }
    } while (s->ready_signalled && ++rounds < 16);
    /* Resumed clients may have added decisions after the send above. */
    rstore_turn(s);
    /* What the flushes could not write stays queued: past the budget, the largest queues go. */
    mem_enforce_output(s);
    arm_engine_timer(s);
    s->now_valid = 0;
}

static void after_io(uv_check_t *h)
{
    server *s = h->data;

    s->now_valid = 0;
}

/* ---- Accepting --------------------------------------------------------------------------- */

static void on_connection(uv_stream_t *l, int status)
{
    server *s = l->data;
    int rc;

    if (status < 0) {
        log_warn("accept: %s", uv_strerror(status));
        return;
    }
    rc = conn_accept(s);
    if (rc != 0)
        log_warn("accept: %s", rc == SLUICE_ENOMEM ? sluice_strerror(rc) : uv_strerror(rc));
}

static int bind_listener(server *s, char *msg, size_t msglen)
{
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    int rc;

    memset(&ss, 0, sizeof(ss));
    if (uv_ip4_addr(s->opt.bind, s->opt.port, (struct sockaddr_in *)&ss) != 0 &&
        uv_ip6_addr(s->opt.bind, s->opt.port, (struct sockaddr_in6 *)&ss) != 0) {
        snprintf(msg, msglen, "bad bind address \"%s\": expected an IPv4 or IPv6 address",
                 s->opt.bind);
        return UV_EINVAL;
    }
    rc = uv_tcp_bind(&s->listener, (const struct sockaddr *)&ss, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&s->listener, LISTEN_BACKLOG, on_connection);
    if (rc != 0) {
        snprintf(msg, msglen, "cannot listen on %s:%d: %s", s->opt.bind, s->opt.port,
                 uv_strerror(rc));
        return rc;
    }
    rc = uv_tcp_getsockname(&s->listener, (struct sockaddr *)&ss, &len);
    if (rc != 0) {
        snprintf(msg, msglen, "getsockname: %s", uv_strerror(rc));
        return rc;
    }
    s->port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                       : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    return 0;
}

/* Writes the port to the port file, atomically (a reader never sees half a number). */
static int write_port_file(const server *s, char *msg, size_t msglen)
{
    char tmp[4096];
    FILE *f;

    int ok;

    snprintf(tmp, sizeof(tmp), "%s.tmp", s->opt.port_file);
    f = fopen(tmp, "w");
    if (!f) {
        snprintf(msg, msglen, "cannot write the port file %s", s->opt.port_file);
        return SLUICE_EINVAL;
    }
    ok = fprintf(f, "%d\n", s->port) > 0;
    ok = fclose(f) == 0 && ok;
    if (!ok || rename(tmp, s->opt.port_file) != 0) {
        remove(tmp);
        snprintf(msg, msglen, "cannot write the port file %s", s->opt.port_file);
        return SLUICE_EINVAL;
    }
    return 0;
}

/* ---- Stopping ---------------------------------------------------------------------------- */

static void on_handle_closed(uv_handle_t *h)
{
    server *s = h->data;

    s->open_handles--;
}

static void close_handle(server *s, uv_handle_t *h)
{
    if (!uv_is_closing(h))
        uv_close(h, on_handle_closed);
    (void)s;
}

/* Closes the handles that outlive the clients, once the last client is gone. */
static void maybe_finish(server *s)
{
    if (!s->stopping || s->nclients > 0)
        return;
    /* The last flush of the counters summed across nodes; its answer calls us again. */
    if (rcounters_stop(s))
        return;
    rstore_close(s); /* its connection's handles would keep the loop running */
    close_handle(s, (uv_handle_t *)&s->before_sleep);
    close_handle(s, (uv_handle_t *)&s->after_io);
    close_handle(s, (uv_handle_t *)&s->engine_timer);
    close_handle(s, (uv_handle_t *)&s->housekeeping);
    close_handle(s, (uv_handle_t *)&s->stop_timer);
}

void server_client_gone(server *s)
{
    maybe_finish(s);
}

static void on_stop_deadline(uv_timer_t *t)
{
    server *s = t->data;
    conn *c = s->clients;

    log_warn("shutdown: %zu clients still draining after %" PRId64 " ms; closing them", s->nclients,
             s->opt.shutdown_ms);
    while (c) {
        conn *next = c->next;

        conn_close(c);
        c = next;
    }
}

void server_stop(server *s)
{
    conn *c;

    if (s->stopping)
        return;
    s->stopping = 1;
    log_info("shutting down: %zu clients to drain", s->nclients);
    close_handle(s, (uv_handle_t *)&s->listener);
    admin_stop(s);
    close_handle(s, (uv_handle_t *)&s->sigterm);
    close_handle(s, (uv_handle_t *)&s->sigint);
    uv_timer_stop(&s->engine_timer);
    uv_timer_stop(&s->housekeeping);
    /* Blocked clients get their timeout reply: they are in flight too. */
    while ((c = s->blocked_head) != NULL)
        c->block_ops->timeout(c, c->block_arg);
    c = s->clients;
    while (c) {
        conn *next = c->next;

        conn_close_after_reply(c);
        c = next;
    }
    if (s->nclients > 0) {
        uv_timer_start(&s->stop_timer, on_stop_deadline, (uint64_t)s->opt.shutdown_ms, 0);
        uv_unref((uv_handle_t *)&s->stop_timer);
    }
    maybe_finish(s);
}

static void on_signal(uv_signal_t *h, int signum)
{
    server *s = h->data;

    log_info("received %s", signum == SIGTERM ? "SIGTERM" : "SIGINT");
    server_stop(s);
}

/* ---- Life ------------------------------------------------------------------------------- */

static void init_handle(server *s, uv_handle_t *h)
{
    h->data = s;
    s->open_handles++;
}

int server_new(const server_options *opt, server **out, char *msg, size_t msglen)
{
    server *s;
    sluice_engine_policy ep;
    int rc;

    *out = NULL;
    if (msg && msglen > 0)
        msg[0] = '\0';
    s = alloc_calloc(1, sizeof(*s));
    if (!s) {
        snprintf(msg, msglen, "out of memory");
        return SLUICE_ENOMEM;
    }
    s->opt = *opt;
    s->engine_wake = SLUICE_NEVER;
    s->next_client_id = 1;
    counters_init(&s->counters);
    s->clock_offset_ns = durable_clock_offset(0);
    s->started_ns = server_now(s);
    if (opt->requirepass) {
        s->has_password = 1;
        if (digest(opt->requirepass, strlen(opt->requirepass), s->password_digest) != 0) {
            snprintf(msg, msglen, "cannot hash the password (SHA-256 unavailable)");
            rc = SLUICE_ENOMEM;
            goto fail_alloc;
        }
    }

    sluice_engine_policy_init(&ep);
    if (opt->config_path) {
        rc = sluice_config_load(opt->config_path, &s->config, msg, msglen);
        if (rc != 0)
            goto fail_alloc;
        s->has_config = 1;
        ep = s->config.engine;
        /* The command line wins over the file's store: section. */
        if (!s->opt.store_url)
            s->opt.store_url = s->config.store.url;
        if (s->opt.store_failure == SLUICE_STORE_FAILURE_UNSET)
            s->opt.store_failure = s->config.store.failure;
        if (s->opt.store_timeout_ms == 0)
            s->opt.store_timeout_ms = s->config.store.timeout_ns / SLUICE_NS_PER_MS;
        if (s->opt.store_replicas < 0)
            s->opt.store_replicas = (int)s->config.store.replicas;
        if (s->opt.store_replicas_timeout_ms == 0)
            s->opt.store_replicas_timeout_ms =
                s->config.store.replicas_timeout_ns / SLUICE_NS_PER_MS;
        if (s->opt.store_connections == 0)
            s->opt.store_connections = (int)s->config.store.connections;
        const char *why =
            s->opt.store_url
                ? server_store_unsupported(&s->config, config_store_is_postgres(s->opt.store_url))
                : NULL;

        if (why) {
            snprintf(msg, msglen, "%s: %s", opt->config_path, why);
            rc = SLUICE_EINVAL;
            goto fail_config;
        }
    }
    /* With a shared store nothing is kept on disk here: the commands that would keep something
     * (tasks, series, LIMIT.SET) are refused (rstore_reply_unavailable). */
    if (s->opt.store_url)
        s->opt.data_dir = NULL;
    rc = sluice_engine_new(&ep, &s->engine);
    if (rc != 0) {
        snprintf(msg, msglen, "cannot create the engine: %s", sluice_strerror(rc));
        goto fail_config;
    }
    sluice_engine_on_event(s->engine, on_event, s);
    if (s->has_config) {
        rc = sluice_config_apply(&s->config, s->engine, server_now(s), msg, msglen);
        if (rc != 0)
            goto fail_engine;
        /* Every limit of the file is live as declared (durable_open may change some). */
        s->config_version = sluice_engine_limits_version(s->engine);
    }
    rc = commands_init(s);
    if (rc != 0) {
        snprintf(msg, msglen, "out of memory");
        goto fail_commands;
    }

    rc = uv_loop_init(&s->loop);
    if (rc != 0) {
        snprintf(msg, msglen, "uv_loop_init: %s", uv_strerror(rc));
        goto fail_commands;
    }
    s->loop.data = s;
    uv_tcp_init(&s->loop, &s->listener);
    init_handle(s, (uv_handle_t *)&s->listener);
    uv_signal_init(&s->loop, &s->sigterm);
    init_handle(s, (uv_handle_t *)&s->sigterm);
    uv_signal_init(&s->loop, &s->sigint);
    init_handle(s, (uv_handle_t *)&s->sigint);
    uv_prepare_init(&s->loop, &s->before_sleep);
    init_handle(s, (uv_handle_t *)&s->before_sleep);
    uv_check_init(&s->loop, &s->after_io);
    init_handle(s, (uv_handle_t *)&s->after_io);
    uv_timer_init(&s->loop, &s->engine_timer);
    init_handle(s, (uv_handle_t *)&s->engine_timer);
    uv_timer_init(&s->loop, &s->housekeeping);
    init_handle(s, (uv_handle_t *)&s->housekeeping);
    uv_timer_init(&s->loop, &s->stop_timer);
    init_handle(s, (uv_handle_t *)&s->stop_timer);

    /* Recovery before listening: the first client sees everything the store held. */
    rc = durable_open(s, msg, msglen);
    if (rc != 0)
        goto fail_loop;
    rc = rstore_open(s, msg, msglen);
    if (rc != 0)
        goto fail_loop;
    rc = rcounters_open(s);
    if (rc != 0) {
        snprintf(msg, msglen, "out of memory");
        goto fail_loop;
    }
    /* After recovery, which floors the clock at the stored one: see cmd_limit_rebase. */
    cmd_limit_rebase(s, (uint64_t)server_now(s));
    /* After recovery too: what the store held is loaded whatever the budget, which then only
     * refuses what clients add. */
    server_apply_budget(s);
    rc = bind_listener(s, msg, msglen);
    if (rc != 0)
        goto fail_loop;
    /* Signals first: whoever reads the port file may send SIGTERM at once. */
    uv_signal_start(&s->sigterm, on_signal, SIGTERM);
    uv_signal_start(&s->sigint, on_signal, SIGINT);
    if (opt->port_file) {
        rc = write_port_file(s, msg, msglen);
        if (rc != 0)
            goto fail_loop;
    }
    rc = admin_start(s, msg, msglen);
    if (rc != 0)
        goto fail_loop;
    uv_prepare_start(&s->before_sleep, before_sleep);
    uv_check_start(&s->after_io, after_io);
    uv_timer_start(&s->housekeeping, on_housekeeping, HOUSEKEEPING_MS, HOUSEKEEPING_MS);
    /* Housekeeping alone must not keep a stopping loop alive. */
    uv_unref((uv_handle_t *)&s->housekeeping);

    log_info("sluice %s: %zu limits, %zu types%s%s", "serve", s->has_config ? s->config.nlimits : 0,
             s->has_config ? s->config.ntypes : 0, s->has_config ? " from " : "",
             s->has_config ? opt->config_path : "");
    if (!s->has_password && opt->protected_mode)
        log_info("no password set: protected mode, only loopback clients are accepted");
    log_info("listening on %s:%d", opt->bind, s->port);
    *out = s;
    return 0;

fail_loop:
    alloc_set_budget(0);
    s->stopping = 1;
    close_handle(s, (uv_handle_t *)&s->listener);
    close_handle(s, (uv_handle_t *)&s->sigterm);
    close_handle(s, (uv_handle_t *)&s->sigint);
    close_handle(s, (uv_handle_t *)&s->before_sleep);
    close_handle(s, (uv_handle_t *)&s->after_io);
    close_handle(s, (uv_handle_t *)&s->engine_timer);
    close_handle(s, (uv_handle_t *)&s->housekeeping);
    close_handle(s, (uv_handle_t *)&s->stop_timer);
    durable_close(s);
    rstore_close(s);
    uv_run(&s->loop, UV_RUN_DEFAULT);
    rstore_free(s);
    rcounters_free(s);
    uv_loop_close(&s->loop);
fail_commands:
    commands_free(s);
fail_engine:
    sluice_engine_free(s->engine);
fail_config:
    sluice_config_clear(&s->config);
fail_alloc:
    alloc_free(s);
    return rc;
}

int server_run(server *s)
{
    uv_run(&s->loop, UV_RUN_DEFAULT);
    log_info("stopped");
    return s->exit_code;
}

void server_free(server *s)
{
    if (!s)
        return;
    if (!s->stopping)
        server_stop(s);
    /* The last commit (limiter state included), then the store's timers close with the rest. */
    durable_close(s);
    rstore_close(s);
    /* Close whatever is left (a server freed without running) and let the closes finish. */
    uv_run(&s->loop, UV_RUN_DEFAULT);
    rstore_free(s);
    rcounters_free(s);
    admin_free(s);
    if (uv_loop_close(&s->loop) != 0)
        log_error("the loop still had open handles at exit");
    commands_free(s);
    sluice_engine_free(s->engine);
    sluice_config_clear(&s->config);
    alloc_set_budget(0);
    alloc_free(s);
}
