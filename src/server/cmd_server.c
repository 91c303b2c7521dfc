/* SPDX-License-Identifier: MIT */
/*
 * Connection and server commands: PING, ECHO, HELLO, AUTH, QUIT, INFO, COMMAND, CONFIG, CLIENT,
 * SELECT. Enough of Redis's own for redis-cli, redis-benchmark and the common client libraries
 * to connect, authenticate, pick RESP3 and introspect; nothing here touches the limits.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/attr.h"
#include "base/grow.h"
#include "server/commands.h"
#include "server/durable.h"
#include "server/log.h"
#include "server/reload.h"
#include "server/rcounters.h"
#include "server/rstore.h"
#include "sluice/error.h"
#include "sluice/policy_spec.h"
#include "sluice/spec.h"

#ifndef SLUICE_VERSION_STRING
#define SLUICE_VERSION_STRING "0.1.0"
#endif
/* The Redis version reported to client libraries that check it before using RESP3 or HELLO. */
#define REDIS_COMPAT_VERSION "7.0.0"

/* ---- A small string builder (INFO, CLIENT LIST) ------------------------------------------- */

typedef struct sbuf {
    char *p;
    size_t len, cap;
    int failed;
} sbuf;

PRINTF_ATTR(2, 3) static void sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (b->failed)
        return;
    for (;;) {
        size_t room = b->cap - b->len;

        va_start(ap, fmt);
        n = vsnprintf(b->p ? b->p + b->len : NULL, room, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = 1;
            return;
        }
        if ((size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        if (grow_array(&b->p, &b->cap, b->len + (size_t)n + 1, 1, 1024) != SLUICE_OK) {
            b->failed = 1;
            return;
        }
    }
}

/* Replies with the built text as one bulk string and frees it. */
static void sb_reply(conn *c, sbuf *b)
{
    if (b->failed)
        resp_error(conn_out(c), "NOMEM", "out of memory");
    else
        resp_bulk(conn_out(c), b->p ? b->p : "", b->len);
    alloc_free(b->p);
}

/* ---- PING, ECHO, SELECT, QUIT ------------------------------------------------------------ */

void cmd_ping(conn *c, const resp_command *cmd)
{
    if (cmd->argc > 2)
        reply_arity(c, "ping");
    else if (cmd->argc == 2)
        resp_bulk(conn_out(c), cmd->argv[1], cmd->argvlen[1]);
    else
        resp_simple(conn_out(c), "PONG");
}

void cmd_echo(conn *c, const resp_command *cmd)
{
    resp_bulk(conn_out(c), cmd->argv[1], cmd->argvlen[1]);
}

void cmd_select(conn *c, const resp_command *cmd)
{
    int64_t db;

    if (command_parse_int(cmd->argv[1], cmd->argvlen[1], &db) != 0)
        resp_error(conn_out(c), "WRONGARGS", "value is not an integer or out of range");
    else if (db != 0)
        resp_error(conn_out(c), "ERR", "DB index is out of range (sluice has only database 0)");
    else
        resp_simple(conn_out(c), "OK");
}

void cmd_quit(conn *c, const resp_command *cmd)
{
    (void)cmd;
    resp_simple(conn_out(c), "OK");
    conn_close_after_reply(c);
}

/* ---- AUTH and HELLO ---------------------------------------------------------------------- */

/* Checks a user and password. Returns 1 when they authenticate the client. */
static int authenticate(conn *c, const char *user, size_t ulen, const char *pass, size_t plen)
{
    server *s = c->srv;

    if ((user && !command_arg_is(user, ulen, "default")) || !server_check_password(s, pass, plen)) {
        s->stats.auth_failures++;
        log_warn("client %" PRIu64 " %s: authentication failed", c->id, c->addr);
        conn_auth_failed(c); /* its next command waits: guessing is slow */
        return 0;
    }
    conn_auth_ok(c);
    return 1;
}

void cmd_auth(conn *c, const resp_command *cmd)
{
    const char *user = NULL;
    size_t ulen = 0;

    if (cmd->argc > 3) {
        resp_error(conn_out(c), "WRONGARGS", "syntax error: AUTH [username] password");
        return;
    }
    if (!c->srv->has_password) {
        resp_error(conn_out(c), "ERR",
                   "AUTH <password> called without any password configured for the default "
                   "user. Are you sure your configuration is correct?");
        return;
    }
    if (cmd->argc == 3) {
        user = cmd->argv[1];
        ulen = cmd->argvlen[1];
    }
    if (authenticate(c, user, ulen, cmd->argv[cmd->argc - 1], cmd->argvlen[cmd->argc - 1]))
        resp_simple(conn_out(c), "OK");
    else
        resp_error(conn_out(c), "WRONGPASS", "invalid username-password pair or user is disabled.");
}

/* Sets the client's name; names with spaces or control bytes are refused, as in Redis. */
static int set_name(conn *c, const char *name, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if ((unsigned char)name[i] <= ' ' || (unsigned char)name[i] >= 0x7f)
            return -1;
    }
    if (len >= sizeof(c->name))
        return -1;
    memcpy(c->name, name, len);
    c->name[len] = '\0';
    return 0;
}

void cmd_hello(conn *c, const resp_command *cmd)
{
    resp_writer *w = conn_out(c);
    int64_t proto = w->proto;
    const char *name = NULL;
    size_t namelen = 0;

    if (cmd->argc >= 2) {
        if (command_parse_int(cmd->argv[1], cmd->argvlen[1], &proto) != 0 ||
            (proto != 2 && proto != 3)) {
            resp_error(w, "NOPROTO", "unsupported protocol version");
            return;
        }
    }
    for (size_t i = 2; i < cmd->argc; i++) {
        if (command_arg_is(cmd->argv[i], cmd->argvlen[i], "auth") && i + 2 < cmd->argc) {
            if (c->srv->has_password && !authenticate(c, cmd->argv[i + 1], cmd->argvlen[i + 1],
                                                      cmd->argv[i + 2], cmd->argvlen[i + 2])) {
                resp_error(w, "WRONGPASS", "invalid username-password pair or user is disabled.");
                return;
            }
            i += 2;
        } else if (command_arg_is(cmd->argv[i], cmd->argvlen[i], "setname") && i + 1 < cmd->argc) {
            name = cmd->argv[i + 1];
            namelen = cmd->argvlen[i + 1];
            i += 1;
        } else {
            resp_error(w, "WRONGARGS", "syntax error in HELLO option '%.*s'",
                       (int)(cmd->argvlen[i] > 64 ? 64 : cmd->argvlen[i]), cmd->argv[i]);
            return;
        }
    }
    if (!(c->flags & CONN_AUTHED)) {
        resp_error(w, "NOAUTH",
                   "HELLO must be called with the client already authenticated, otherwise the "
                   "HELLO <proto> AUTH <user> <pass> option can be used to authenticate the "
                   "client and select the RESP protocol version at the same time");
        return;
    }
    if (name && set_name(c, name, namelen) != 0) {
        resp_error(w, "WRONGARGS",
                   "Client names cannot contain spaces, newlines or special "
                   "characters.");
        return;
    }
    w->proto = (int)proto;
    resp_map(w, 7);
    resp_bulk_str(w, "server");
    resp_bulk_str(w, "sluice");
    resp_bulk_str(w, "version");
    resp_bulk_str(w, SLUICE_VERSION_STRING);
    resp_bulk_str(w, "proto");
    resp_int(w, proto);
    resp_bulk_str(w, "id");
    resp_int(w, (int64_t)c->id);
    resp_bulk_str(w, "mode");
    resp_bulk_str(w, "standalone");
    resp_bulk_str(w, "role");
    resp_bulk_str(w, "master");
    resp_bulk_str(w, "modules");
    resp_array(w, 0);
}

/* ---- INFO -------------------------------------------------------------------------------- */

static void info_server(conn *c, sbuf *b)
{
    server *s = c->srv;
    int64_t up = (server_now(s) - s->started_ns) / SLUICE_NS_PER_SEC;

    sb_printf(b,
              "# Server\r\nsluice_version:%s\r\nredis_version:%s\r\nredis_mode:standalone\r\n"
              "multiplexing_api:libuv %s\r\nprocess_id:%ld\r\ntcp_port:%d\r\n"
              "uptime_in_seconds:%" PRId64 "\r\nuptime_in_days:%" PRId64 "\r\n"
              "config_file:%s\r\n",
              SLUICE_VERSION_STRING, REDIS_COMPAT_VERSION, uv_version_string(), (long)getpid(),
              s->port, up, up / 86400, s->opt.config_path ? s->opt.config_path : "");
}

static void info_clients(conn *c, sbuf *b)
{
    server *s = c->srv;

    sb_printf(b,
              "# Clients\r\nconnected_clients:%zu\r\nblocked_clients:%zu\r\nmaxclients:%zu\r\n"
              "auth_required:%d\r\nprotected_mode:%s\r\nmax_output_bytes:%zu\r\n",
              s->nclients, s->nblocked, s->opt.max_clients, s->has_password,
              s->opt.protected_mode ? "yes" : "no", s->opt.max_output);
}

static void info_stats(conn *c, sbuf *b)
{
    const server_stats *st = &c->srv->stats;

    sb_printf(b,
              "# Stats\r\ntotal_connections_received:%" PRIu64 "\r\nrejected_connections:%" PRIu64
              "\r\ntotal_commands_processed:%" PRIu64 "\r\nprotocol_errors:%" PRIu64
              "\r\noutput_buffer_overflows:%" PRIu64 "\r\nauth_failures:%" PRIu64
              "\r\nthrottle_allowed:%" PRIu64 "\r\nthrottle_denied:%" PRIu64
              "\r\nthrottle_shadow_denied:%" PRIu64 "\r\nauth_timeouts:%" PRIu64
              "\r\nauth_evictions:%" PRIu64 "\r\nidle_timeouts:%" PRIu64
              "\r\nunauthenticated_clients:%zu\r\n",
              st->connections, st->rejected, st->commands, st->protocol_errors,
              st->output_overflows, st->auth_failures, st->throttle_allowed, st->throttle_denied,
              st->throttle_shadow_denied, st->auth_timeouts, st->auth_evictions, st->idle_timeouts,
              c->srv->nunauth);
}

static void info_engine(conn *c, sbuf *b)
{
    server *s = c->srv;
    sluice_engine_stats st;
    int64_t wake = sluice_engine_next_wake(s->engine);

    sluice_engine_get_stats(s->engine, &st);
    sb_printf(b,
              "# Engine\r\ntasks_queued:%zu\r\ntasks_parked:%zu\r\ntasks_running:%zu\r\n"
              "tasks_delayed:%zu\r\nsubmitted:%" PRIu64 "\r\ndelivered:%" PRIu64 "\r\n"
              "done:%" PRIu64 "\r\nfailed:%" PRIu64 "\r\ncancelled:%" PRIu64 "\r\n"
              "retried:%" PRIu64 "\r\nredelivered:%" PRIu64 "\r\nrejected:%" PRIu64 "\r\n"
              "parked_peak:%zu\r\ntasks_bytes:%zu\r\nnext_wake_in_ms:%" PRId64 "\r\n",
              st.queued, st.parked, st.running, st.delayed, st.submitted, st.delivered, st.done,
              st.failed, st.cancelled, st.retried, st.redelivered, st.rejected, st.parked_peak,
              st.tasks_bytes, wake == SLUICE_NEVER ? -1 : command_ns_to_ms(wake - server_now(s)));
}

/* The memory budget (memory.h): used_memory is what the allocator counts (live blocks, their
 * usable sizes), used_memory_rss what the kernel charges the process. */
static void info_memory(conn *c, sbuf *b)
{
    server *s = c->srv;
    size_t used = alloc_live_bytes();
    unsigned long long rss = 0;
    char line[128];
    FILE *f = fopen("/proc/self/status", "r");

    while (f && fgets(line, sizeof(line), f)) {
        if (strncmp(line, "VmRSS:", 6) == 0) {
            rss = strtoull(line + 6, NULL, 10) * 1024;
            break;
        }
    }
    if (f)
        fclose(f);
    sb_printf(b,
              "# Memory\r\nused_memory:%zu\r\nused_memory_rss:%llu\r\nmaxmemory:%zu\r\n"
              "maxmemory_policy:noeviction\r\nused_memory_counted:%d\r\n"
              "oom_refused:%" PRIu64 "\r\noom_client_closes:%" PRIu64 "\r\n",
              used, rss, s->maxmemory, alloc_counting(), s->stats.oom_refused, s->stats.oom_closes);
}

typedef struct info_walk {
    server *s;
    sbuf *b;
} info_walk;

/* Whether a limit, one of its tiers or one of its key overrides has an adaptive rate. */
static int info_adaptive(const sluice_limit_policy *p)
{
    if (p->def.decrease_den > 0)
        return 1;
    for (size_t i = 0; i < p->ntiers; i++)
        if (p->tiers[i].def.decrease_den > 0)
            return 1;
    for (size_t i = 0; i < p->noverrides; i++)
        if (p->overrides[i].def.decrease_den > 0)
            return 1;
    return 0;
}

static void info_limit_line(const sluice_limit_policy *p, void *arg)
{
    info_walk *iw = arg;
    sluice_limit *live = NULL;
    sluice_limit_stats st;
    sluice_limit_figures f;

    memset(&st, 0, sizeof(st));
    sluice_engine_get_limit(iw->s->engine, p->name, &live);
    if (live)
        sluice_limit_get_stats(live, &st);
    for (size_t i = 0; i < p->noverrides; i++) {
        /* Keys with an override live in a core of their own ("name/=key"): count them too. */
        char id[2 * COMMAND_NAME_BUF + 4];
        sluice_limit *core;
        sluice_limit_stats os;

        snprintf(id, sizeof(id), "%s/=%s", p->name, p->overrides[i].key);
        core = sluice_engine_limit_by_id(iw->s->engine, id);
        if (!core)
            continue;
        sluice_limit_get_stats(core, &os);
        st.keys += os.keys;
        st.bytes += os.bytes;
        st.untracked += os.untracked;
        st.refused += os.refused;
        st.forgotten += os.forgotten;
    }
    /* The decisions are summed over every tier; mode is the one in force now (the global
     * switch off makes every limit shadow). */
    if (sluice_engine_limit_figures(iw->s->engine, p->name, server_now(iw->s), 0, &f) != 0)
        memset(&f, 0, sizeof(f));
    sb_printf(iw->b,
              "limit_%s:kind=%s,tiers=%zu,keys=%zu,bytes=%zu,untracked=%" PRIu64 ",refused=%" PRIu64
              ",forgotten=%" PRIu64 ",mode=%s,allowed=%" PRIu64 ",denied=%" PRIu64
              ",shadow_denied=%" PRIu64,
              p->name, sluice_limit_kind_name(p->def.kind), p->ntiers, st.keys, st.bytes,
              st.untracked, st.refused, st.forgotten, f.shadow ? "shadow" : "enforce",
              f.core.allowed, f.core.denied, f.core.shadow_denied);
    /* Keys with a limit of their own (LIMIT.KEY): listed only where there are some, so the line
     * of every other limit reads as before. */
    if (p->noverrides > 0)
        sb_printf(iw->b, ",overrides=%zu", p->noverrides);
    /* Keys held back for an upstream's 429 (LIMIT.BACKOFF, TASK.FAIL ... RETRY_AFTER): listed
     * once there were some, for the same reason. */
    if (f.core.backoffs > 0)
        sb_printf(iw->b, ",backoffs=%" PRIu64, f.core.backoffs);
    /* Keys of an adaptive limit running below their configured rate now: a counter each core
     * keeps (sluice_limit_stats.slowed), so INFO stays cheap however many keys the limit has.
     * Listed for adaptive limits only (any tier or key override adaptive), for the same reason;
     * not under a shared store, whose keys' rates are the store's, not this node's memory. */
    if ((info_adaptive(p) || f.core.slowed > 0) && !rstore_active(iw->s))
        sb_printf(iw->b, ",keys_slowed=%zu", f.core.slowed);
    sb_printf(iw->b, "\r\n");
}

static void info_limits(conn *c, sbuf *b)
{
    server *s = c->srv;
    info_walk iw = {s, b};
    size_t n = sluice_engine_list_limits(s->engine, NULL, NULL);

    sb_printf(b, "# Limits\r\nlimits:%zu\r\nlimits_enabled:%d\r\ncell_limits:%zu\r\n", n,
              sluice_engine_enabled(s->engine), cmd_cell_count(s));
    sluice_engine_list_limits(s->engine, info_limit_line, &iw);
}

static void info_persistence(conn *c, sbuf *b)
{
    char text[4096];

    durable_info(c->srv, text, sizeof(text));
    sb_printf(b, "%s", text);
}

static void info_store(conn *c, sbuf *b)
{
    char text[2048];

    rstore_info(c->srv, text, sizeof(text));
    sb_printf(b, "%s", text);
}

/* Counters summed across the nodes of a shared store (rcounters.h), and whether figures are. */
static void info_counters(conn *c, sbuf *b)
{
    /* A line per limit and per type: sized for a few hundred of them. */
    size_t len = 256 * 1024;
    char *text = alloc_malloc(len);

    if (!text)
        return;
    rcounters_info(c->srv, text, len);
    sb_printf(b, "%s", text);
    alloc_free(text);
}

typedef struct info_section {
    const char *name;
    void (*fn)(conn *c, sbuf *b);
} info_section;

static const info_section sections[] = {
    {"server", info_server},           {"clients", info_clients},
    {"memory", info_memory},           {"stats", info_stats},
    {"engine", info_engine},           {"limits", info_limits},
    {"persistence", info_persistence}, {"store", info_store},
    {"counters", info_counters},
};

#define N_SECTIONS (sizeof(sections) / sizeof(sections[0]))

void cmd_info(conn *c, const resp_command *cmd)
{
    sbuf b = {0};
    unsigned want = 0;

    if (cmd->argc == 1)
        want = (1u << N_SECTIONS) - 1;
    for (size_t i = 1; i < cmd->argc; i++) {
        if (command_arg_is(cmd->argv[i], cmd->argvlen[i], "all") ||
            command_arg_is(cmd->argv[i], cmd->argvlen[i], "default") ||
            command_arg_is(cmd->argv[i], cmd->argvlen[i], "everything"))
            want = (1u << N_SECTIONS) - 1;
        for (size_t k = 0; k < N_SECTIONS; k++) {
            if (command_arg_is(cmd->argv[i], cmd->argvlen[i], sections[k].name))
                want |= 1u << k;
        }
    }
    for (size_t k = 0; k < N_SECTIONS; k++) {
        if (want & (1u << k)) {
            if (b.len > 0)
                sb_printf(&b, "\r\n");
            sections[k].fn(c, &b);
        }
    }
    sb_reply(c, &b);
}

/* ---- COMMAND ----------------------------------------------------------------------------- */

static void command_info(resp_writer *w, const command_def *d)
{
    static const struct {
        unsigned bit;
        const char *name;
    } flags[] = {
        {CMD_WRITE, "write"},     {CMD_READONLY, "readonly"}, {CMD_ADMIN, "admin"},
        {CMD_FAST, "fast"},       {CMD_NOAUTH, "no_auth"},    {CMD_BLOCKING, "blocking"},
        {CMD_DENYOOM, "denyoom"},
    };
    size_t nflags = 0;
    int cell = strcmp(d->name, "cl.throttle") == 0; /* its key is argument 1, as in redis-cell */

    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
        nflags += (d->flags & flags[i].bit) != 0;
    resp_array(w, 10);
    resp_bulk_str(w, d->name);
    resp_int(w, d->arity);
    resp_array(w, nflags);
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++) {
        if (d->flags & flags[i].bit)
            resp_simple(w, flags[i].name);
    }
    resp_int(w, cell);
    resp_int(w, cell);
    resp_int(w, cell);
    resp_array(w, 0); /* ACL categories */
    resp_array(w, 0); /* tips */
    resp_array(w, 0); /* key specs */
    resp_array(w, 0); /* subcommands */
}

void cmd_command(conn *c, const resp_command *cmd)
{
    resp_writer *w = conn_out(c);

    if (cmd->argc == 1) {
        resp_array(w, command_count);
        for (size_t i = 0; i < command_count; i++)
            command_info(w, &command_table[i]);
    } else if (command_arg_is(cmd->argv[1], cmd->argvlen[1], "count")) {
        resp_int(w, (int64_t)command_count);
    } else if (command_arg_is(cmd->argv[1], cmd->argvlen[1], "docs")) {
        /* redis-cli asks for docs at start-up; it falls back to its own help on an empty
         * answer, so the summaries live in docs/commands.md and COMMAND INFO instead. */
        resp_map(w, 0);
    } else if (command_arg_is(cmd->argv[1], cmd->argvlen[1], "list")) {
        resp_array(w, command_count);
        for (size_t i = 0; i < command_count; i++)
            resp_bulk_str(w, command_table[i].name);
    } else if (command_arg_is(cmd->argv[1], cmd->argvlen[1], "info")) {
        resp_array(w, cmd->argc - 2);
        for (size_t i = 2; i < cmd->argc; i++) {
            const command_def *d = command_lookup(cmd->argv[i], cmd->argvlen[i]);

            if (d)
                command_info(w, d);
            else
                resp_null(w);
        }
    } else {
        resp_error(w, "WRONGARGS", "unknown COMMAND subcommand; try COUNT, DOCS, INFO or LIST");
    }
}

/* ---- CONFIG ------------------------------------------------------------------------------ */

/* Glob match of a lower-case pattern (`*`, `?`) against a lower-case name. */
static int glob_match(const char *p, const char *s)
{
    if (*p == '\0')
        return *s == '\0';
    if (*p == '*')
        return glob_match(p + 1, s) || (*s && glob_match(p, s + 1));
    if (*s && (*p == '?' || *p == *s))
        return glob_match(p + 1, s + 1);
    return 0;
}

void cmd_config(conn *c, const resp_command *cmd)
{
    server *s = c->srv;
    resp_writer *w = conn_out(c);

    if (command_arg_is(cmd->argv[1], cmd->argvlen[1], "reload") && cmd->argc == 2) {
        /* Parsed off the loop; the client waits for the switch (reload.h). */
        reload_start(s, c);
    } else if (command_arg_is(cmd->argv[1], cmd->argvlen[1], "get") && cmd->argc >= 3) {
        char port[24], clients[24];
        const char *names[] = {"port",           "bind", "maxclients",
                               "protected-mode", "save", "appendonly"};
        const char *values[6];
        int match[6] = {0};
        size_t n = 0;

        snprintf(port, sizeof(port), "%d", s->port);
        snprintf(clients, sizeof(clients), "%zu", s->opt.max_clients);
        values[0] = port;
        values[1] = s->opt.bind;
        values[2] = clients;
        values[3] = s->opt.protected_mode ? "yes" : "no";
        values[4] = "";
        values[5] = "no";
        for (size_t i = 2; i < cmd->argc; i++) {
            char pat[64];

            if (command_arg_str(cmd->argv[i], cmd->argvlen[i], pat, sizeof(pat)) != 0)
                continue;
            for (char *q = pat; *q; q++)
                *q = (char)(*q >= 'A' && *q <= 'Z' ? *q + ('a' - 'A') : *q);
            for (size_t k = 0; k < 6; k++)
                match[k] |= glob_match(pat, names[k]);
        }
        for (size_t k = 0; k < 6; k++)
            n += (size_t)match[k];
        resp_map(w, n);
        for (size_t k = 0; k < 6; k++) {
            if (match[k]) {
                resp_bulk_str(w, names[k]);
                resp_bulk_str(w, values[k]);
            }
        }
    } else {
        resp_error(w, "WRONGARGS",
                   "unknown CONFIG subcommand or wrong arguments; try "
                   "CONFIG RELOAD or CONFIG GET pattern");
    }
}

/* ---- CLIENT ------------------------------------------------------------------------------ */

void cmd_client(conn *c, const resp_command *cmd)
{
    resp_writer *w = conn_out(c);
    const char *sub = cmd->argv[1];
    size_t sublen = cmd->argvlen[1];

    if (command_arg_is(sub, sublen, "id") && cmd->argc == 2) {
        resp_int(w, (int64_t)c->id);
    } else if (command_arg_is(sub, sublen, "getname") && cmd->argc == 2) {
        if (c->name[0])
            resp_bulk_str(w, c->name);
        else
            resp_null(w);
    } else if (command_arg_is(sub, sublen, "setname") && cmd->argc == 3) {
        if (set_name(c, cmd->argv[2], cmd->argvlen[2]) != 0)
            resp_error(w, "WRONGARGS",
                       "Client names cannot contain spaces, newlines or special "
                       "characters.");
        else
            resp_simple(w, "OK");
    } else if (command_arg_is(sub, sublen, "setinfo") && cmd->argc == 4) {
        resp_simple(w, "OK"); /* library name and version: accepted, not kept */
    } else if (command_arg_is(sub, sublen, "list") && cmd->argc == 2) {
        server *s = c->srv;
        int64_t now = server_now(s);
        sbuf b = {0};

        for (conn *x = s->clients; x; x = x->next) {
            if (x->flags & CONN_CLOSING)
                continue;
            sb_printf(&b,
                      "id=%" PRIu64 " addr=%s name=%s age=%" PRId64 " cmds=%" PRIu64
                      " blocked=%d resp=%d\n",
                      x->id, x->addr, x->name, (now - x->created_ns) / SLUICE_NS_PER_SEC,
                      x->ncommands, (x->flags & CONN_BLOCKED) != 0, x->out.proto);
        }
        sb_reply(c, &b);
    } else {
        resp_error(w, "WRONGARGS",
                   "unknown CLIENT subcommand or wrong arguments; try ID, "
                   "GETNAME, SETNAME name, SETINFO attr value or LIST");
    }
}
