/* SPDX-License-Identifier: MIT */
/*
 * The command table, its lookup, dispatch with the auth and arity checks, and the reply helpers
 * the command modules share (error mapping, the RATELIMITED line, argument parsing).
 *
 * Lookup is on the hot path (every THROTTLE goes through it), so the table is indexed once by the
 * hash of each lowercase name in a pointer table over static slots; a lookup lowercases the name
 * on the stack, hashes it once and, almost always, makes one comparison.
 */
#include "server/commands.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/hash.h"
#include "base/ptab.h"
#include "server/durable.h"
#include "server/log.h"
#include "server/rstore.h"
#include "server/memory.h"
#include "sluice/error.h"
#include "sluice/limit.h"

/* ---- The table --------------------------------------------------------------------------- */

const command_def command_table[] = {
    /* Connection and server (cmd_server.c). */
    {"ping", -1, CMD_FAST, cmd_ping, "PING [message]: +PONG, or the message"},
    {"echo", 2, CMD_FAST, cmd_echo, "ECHO message: the message"},
    {"hello", -1, CMD_NOAUTH | CMD_FAST, cmd_hello,
     "HELLO [2|3 [AUTH user pass] [SETNAME name]]: switch protocol, server facts"},
    {"auth", -2, CMD_NOAUTH | CMD_FAST, cmd_auth, "AUTH [user] password: authenticate"},
    {"quit", -1, CMD_NOAUTH | CMD_FAST, cmd_quit, "QUIT: +OK, then the connection is closed"},
    {"info", -1, CMD_READONLY, cmd_info, "INFO [section ...]: server, clients, engine, limits"},
    {"command", -1, CMD_READONLY, cmd_command, "COMMAND [COUNT|DOCS|INFO|LIST]: the commands"},
    {"config", -2, CMD_ADMIN, cmd_config, "CONFIG RELOAD | CONFIG GET pattern"},
    {"client", -2, CMD_FAST, cmd_client, "CLIENT ID|GETNAME|SETNAME|SETINFO|LIST"},
    {"select", 2, CMD_FAST, cmd_select, "SELECT 0: accepted for client libraries"},
    /* Decisions and leases (cmd_limit.c, cmd_throttle.c). */
    {"throttle", -3, CMD_WRITE | CMD_FAST, cmd_throttle,
     "THROTTLE limit|type key [UNITS n] [PEEK]: a rate-limit decision"},
    {"cl.throttle", -5, CMD_WRITE | CMD_FAST, cmd_cl_throttle,
     "CL.THROTTLE key max_burst count period [quantity]: redis-cell's reply"},
    {"lease.acquire", -3, CMD_WRITE | CMD_FAST | CMD_DENYOOM, cmd_lease_acquire,
     "LEASE.ACQUIRE limit key [TTL ms] [UNITS n]: take a concurrency lease"},
    {"lease.renew", -2, CMD_WRITE | CMD_FAST, cmd_lease_renew,
     "LEASE.RENEW lease [TTL ms]: extend a lease"},
    {"lease.release", 2, CMD_WRITE | CMD_FAST, cmd_lease_release,
     "LEASE.RELEASE lease: give a lease back"},
    /* Limits, changed live (cmd_limit.c). */
    {"limit.set", 3, CMD_WRITE | CMD_ADMIN | CMD_DENYOOM, cmd_limit_set,
     "LIMIT.SET name spec: add or replace a named limit"},
    {"limit.get", 2, CMD_READONLY, cmd_limit_get, "LIMIT.GET name: a limit's spec and figures"},
    /* Not CMD_LOCAL: under a shared store an adaptive rate key's rate is read from the store. */
    {"limit.rate", -3, CMD_READONLY, cmd_limit_rate,
     "LIMIT.RATE limit key [TIER v]: a rate limit's rate for key now, and why"},
    {"limit.list", 1, CMD_READONLY, cmd_limit_list, "LIMIT.LIST: every limit and its spec"},
    {"limit.del", 2, CMD_WRITE | CMD_ADMIN, cmd_limit_del, "LIMIT.DEL name: remove a limit"},
    {"limit.reset", -2, CMD_WRITE | CMD_ADMIN, cmd_limit_reset,
     "LIMIT.RESET name [key]: forget the state of one key or of all"},
    {"limit.spend", -3, CMD_READONLY, cmd_limit_spend,
     "LIMIT.SPEND name key [TIER tier]: a quota key's spent, budget, remaining and reset"},
    {"limit.backoff", -4, CMD_WRITE | CMD_FAST, cmd_limit_backoff,
     "LIMIT.BACKOFF limit key ms [TIER v]: hold a rate limit's key back (the upstream said 429)"},
    {"limit.key", 4, CMD_WRITE | CMD_ADMIN | CMD_DENYOOM, cmd_limit_key,
     "LIMIT.KEY name key spec: give one key of a keyed limit its own limit"},
    {"limit.keydel", 3, CMD_WRITE | CMD_ADMIN, cmd_limit_keydel,
     "LIMIT.KEYDEL name key: remove a key's own limit"},
    /* Tasks (cmd_task.c). */
    {"task.add", -3, CMD_WRITE | CMD_FAST | CMD_DENYOOM, cmd_task_add,
     "TASK.ADD type payload [KEY k] [UNITS n] [PRIORITY p] [ID taskkey] [DELAY ms]: submit"},
    {"task.get", -2, CMD_WRITE | CMD_BLOCKING, cmd_task_get,
     "TASK.GET type [type ...] [COUNT n] [TIMEOUT ms]: take granted tasks, or wait"},
    {"task.ack", -2, CMD_WRITE | CMD_FAST, cmd_task_ack,
     "TASK.ACK id [COST n] [ATTEMPT n]: complete a running task"},
    {"task.fail", -2, CMD_WRITE | CMD_FAST, cmd_task_fail,
     "TASK.FAIL id [RETRY|DEAD] [RETRY_AFTER ms] [REASON text] [ATTEMPT n]: fail a running task"},
    {"task.cancel", 2, CMD_WRITE | CMD_FAST, cmd_task_cancel,
     "TASK.CANCEL id: cancel a queued or parked task"},
    {"task.touch", -2, CMD_WRITE | CMD_FAST, cmd_task_touch,
     "TASK.TOUCH id [ATTEMPT n]: extend a running task's lease"},
    {"task.info", 2, CMD_READONLY | CMD_FAST, cmd_task_info, "TASK.INFO id: a task's fields"},
    {"task.explain", 2, CMD_READONLY | CMD_FAST, cmd_task_explain,
     "TASK.EXPLAIN id: why a task waits and when it should start"},
    /* Recurring series (cmd_recur.c). */
    {"recur.add", -6, CMD_WRITE | CMD_DENYOOM, cmd_recur_add,
     "RECUR.ADD name type payload EVERY ms|CRON expr [KEY k] [START ms] [END ms] [MAX n]"},
    {"recur.del", 2, CMD_WRITE, cmd_recur_del, "RECUR.DEL name: remove a recurring series"},
    {"recur.info", 2, CMD_READONLY | CMD_FAST, cmd_recur_info,
     "RECUR.INFO name: a series' runs, skips and next occurrence"},
    /* Tests only (cmd_debug.c): refused unless --enable-debug-commands. */
    {"debug", -2, CMD_ADMIN, cmd_debug,
     "DEBUG FAULT WRITE n|SYNC n|FULL on|off|CLEAR, DEBUG SLEEP ms: test hooks"},
};

const size_t command_count = sizeof(command_table) / sizeof(command_table[0]);

/* Longest command name, in bytes. */
#define NAME_MAX_LEN 32
/* Slots of the lookup index: a power of two, at least twice the table. */
#define INDEX_SLOTS 128

/* The index: each row of command_table filed under the hash of its (lowercase) name. It lives in
 * static slots, built on the first lookup, so a lookup never allocates and cannot fail. */
static ptab_slot index_slots[INDEX_SLOTS];
static ptab index_tab;
static int index_built;

/* A lowercased name being looked up. */
typedef struct name_key {
    const char *s;
    size_t len;
} name_key;

static unsigned char lower(unsigned char ch)
{
    return ch >= 'A' && ch <= 'Z' ? (unsigned char)(ch + ('a' - 'A')) : ch;
}

static int row_eq(const void *p, const void *key)
{
    const command_def *d = p;
    const name_key *k = key;

    return strlen(d->name) == k->len && memcmp(d->name, k->s, k->len) == 0;
}

static void build_index(void)
{
    ptab_init_fixed(&index_tab, index_slots, INDEX_SLOTS);
    for (size_t i = 0; i < command_count; i++) {
        const char *name = command_table[i].name;

        /* Cannot fail while INDEX_SLOTS / 4 * 3 exceeds the rows (test_server_units finds each). */
        (void)ptab_insert(&index_tab, hash_bytes(name, strlen(name)), (void *)&command_table[i]);
    }
    index_built = 1;
}

int command_arg_is(const char *s, size_t len, const char *word)
{
    size_t n = strlen(word);

    if (len != n)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (lower((unsigned char)s[i]) != (unsigned char)word[i])
            return 0;
    }
    return 1;
}

const command_def *command_lookup(const char *name, size_t len)
{
    char low[NAME_MAX_LEN];
    name_key k = {low, len};

    if (len == 0 || len > NAME_MAX_LEN)
        return NULL;
    if (!index_built)
        build_index();
    for (size_t i = 0; i < len; i++)
        low[i] = (char)lower((unsigned char)name[i]);
    return ptab_find(&index_tab, hash_bytes(low, len), &k, row_eq);
}

int command_arity_ok(int arity, size_t argc)
{
    if (arity >= 0)
        return argc == (size_t)arity;
    return argc >= (size_t)-arity;
}

/* ---- Module state ------------------------------------------------------------------------ */

int commands_init(server *s)
{
    int rc = cmd_limit_init(s);

    if (rc == 0)
        rc = cmd_cell_init(s);
    if (rc == 0)
        rc = cmd_task_init(s);
    if (rc != 0)
        commands_free(s);
    return rc;
}

void commands_free(server *s)
{
    cmd_task_free(s);
    cmd_cell_free(s);
    cmd_limit_free(s);
}

/* ---- Dispatch ---------------------------------------------------------------------------- */

/* Appends up to max bytes of an argument, quoted, for an error message; bytes that are not
 * printable ASCII become '?', so the message stays one clean line. */
static size_t show_arg(char *buf, size_t cap, const char *s, size_t len, size_t max)
{
    size_t o = 0;

    if (cap < 4)
        return 0;
    buf[o++] = '\'';
    for (size_t i = 0; i < len && i < max && o + 3 < cap; i++) {
        unsigned char ch = (unsigned char)s[i];

        buf[o++] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
    }
    buf[o++] = '\'';
    buf[o] = '\0';
    return o;
}

static void reply_unknown(conn *c, const resp_command *cmd)
{
    char name[140], args[400];
    size_t o = 0;

    show_arg(name, sizeof(name), cmd->argv[0], cmd->argvlen[0], 128);
    args[0] = '\0';
    for (size_t i = 1; i < cmd->argc && o < 128; i++) {
        o += show_arg(args + o, sizeof(args) - o - 1, cmd->argv[i], cmd->argvlen[i], 128 - o);
        if (o + 1 < sizeof(args)) {
            args[o++] = ' ';
            args[o] = '\0';
        }
    }
    resp_error(conn_out(c), "ERR", "unknown command %s, with args beginning with: %s", name, args);
}

/* 1 when the node serves command d with its store: a command that decides in this process only
 * (CMD_LOCAL) is not served on a shared store yet (rstore_reply_unavailable says why). */
static int store_serves(const server *s, const command_def *d)
{
    return !((d->flags & CMD_LOCAL) && rstore_active(s));
}

static void dispatch(conn *c, const resp_command *cmd)
{
    const command_def *d = command_lookup(cmd->argv[0], cmd->argvlen[0]);

    if (!d) {
        reply_unknown(c, cmd);
        return;
    }
    if (!(c->flags & CONN_AUTHED) && !(d->flags & CMD_NOAUTH)) {
        resp_error(conn_out(c), "NOAUTH", "Authentication required.");
        return;
    }
    if (!command_arity_ok(d->arity, cmd->argc)) {
        reply_arity(c, d->name);
        return;
    }
    /* Past the memory budget, a command that adds state is refused before it runs. */
    if ((d->flags & CMD_DENYOOM) && mem_refuse(c))
        return;
    c->srv->stats.commands++;
    counters_command(&c->srv->counters, (size_t)(d - command_table));
    if (!store_serves(c->srv, d)) {
        rstore_reply_unavailable(c, d->name);
        return;
    }
    d->handler(c, cmd);
}

void commands_dispatch(conn *c, const resp_command *cmd)
{
    size_t mark = conn_out(c)->len;
    uint64_t changes = durable_changes(c->srv);

    dispatch(c, cmd);
    /* A reply to a change waits for the turn's commit (durable.h). */
    durable_after_command(c, changes, mark);
    /* Replies are flushed at the end of the loop turn, so what this command appended starts at
     * mark; its error code (if any) is counted for /metrics. */
    if (!conn_out(c)->failed && conn_out(c)->len > mark)
        counters_reply(&c->srv->counters, conn_out(c)->buf + mark, conn_out(c)->len - mark);
}

int commands_run_detached(conn *c, const resp_command *cmd)
{
    server *s = c->srv;
    const command_def *d = cmd->argc > 0 ? command_lookup(cmd->argv[0], cmd->argvlen[0]) : NULL;
    resp_writer *out = conn_out(c);
    size_t mark = out->len;

    if (!d || (d->flags & (CMD_NOAUTH | CMD_BLOCKING))) {
        resp_error(out, "ERR", "this command is not available here");
        return 1;
    }
    /* Refused in a word of its own, so that the HTTP API can say 501 rather than 500. */
    if (!store_serves(s, d)) {
        char upper[NAME_MAX_LEN + 1];
        size_t i;

        for (i = 0; d->name[i] && i < NAME_MAX_LEN; i++)
            upper[i] = (char)(d->name[i] >= 'a' && d->name[i] <= 'z' ? d->name[i] - 'a' + 'A'
                                                                     : d->name[i]);
        upper[i] = '\0';
        resp_error(out, "NOTSHARED",
                   "%s is not available with a %s store yet (docs/cluster.md lists what is "
                   "shared)",
                   upper, rstore_kind_name(s));
        return 1;
    }
    /* The handlers read c->srv and append to conn_out(c); under a shared store they may take a
     * deferred slot or block c until the store answers (conn.h: its owner hears of it). */
    c->flags |= CONN_IN_COMMAND;
    dispatch(c, cmd);
    c->flags &= ~CONN_IN_COMMAND;
    durable_after_detached(s);
    if (!out->failed && out->len > mark)
        counters_reply(&s->counters, out->buf + mark, out->len - mark);
    return conn_detached_done(c);
}

/* ---- Reply helpers ----------------------------------------------------------------------- */

void reply_arity(conn *c, const char *name)
{
    resp_error(conn_out(c), "WRONGARGS", "wrong number of arguments for '%s' command", name);
}

void reply_engine_error(conn *c, int rc, const char *msg)
{
    const char *code;

    switch (rc) {
    case SLUICE_ENOMEM:
        /* Past the budget, or close enough to it that the growth of a key table would pass it
         * (the core refuses that too: core/limit.c), it is the budget that refused. */
        if (alloc_over_budget_by(alloc_budget() / 4)) {
            mem_reply_oom(c);
            return;
        }
        code = "NOMEM";
        break;
    case SLUICE_EBUSY:
        code = "BUSY";
        break;
    case SLUICE_ENOTFOUND:
        code = "NOLIMIT";
        break;
    case SLUICE_ESTALE:
        code = "NOLEASE";
        break;
    case SLUICE_ESTATE:
        code = "INUSE";
        break;
    default:
        code = "WRONGARGS";
        break;
    }
    resp_error(conn_out(c), code, "%s", msg && msg[0] ? msg : sluice_strerror(rc));
}

static int plain_byte(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_' || ch == '.' || ch == ':' || ch == '/' || ch == '@' || ch == '+' || ch == '-';
}

char *command_encode_value(const char *s, size_t len, size_t max_in, char *buf)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;

    for (size_t i = 0; i < len && i < max_in; i++) {
        unsigned char ch = (unsigned char)s[i];

        if (plain_byte(ch)) {
            buf[o++] = (char)ch;
        } else {
            buf[o++] = '%';
            buf[o++] = hex[ch >> 4];
            buf[o++] = hex[ch & 15];
        }
    }
    if (len > max_in) {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o] = '\0';
    return buf;
}

int64_t command_ns_to_ms(int64_t ns)
{
    if (ns == SLUICE_NEVER)
        return -1;
    if (ns <= 0)
        return 0;
    return ns / SLUICE_NS_PER_MS + (ns % SLUICE_NS_PER_MS != 0);
}

int64_t command_time_ms(int64_t ns)
{
    return ns == SLUICE_NEVER ? -1 : ns / SLUICE_NS_PER_MS;
}

void reply_ratelimited(conn *c, const sluice_denial *d)
{
    /* Keys are encoded up to 256 bytes: a denial line stays short. */
    char name[3 * 128 + 4], key[3 * 256 + 4], tier[3 * 128 + 4];
    const char *k = d->key ? d->key : "";
    const char *n = d->limit ? d->limit : "";

    command_encode_value(n, strlen(n), 128, name);
    command_encode_value(k, strlen(k), 256, key);
    if (d->tier)
        command_encode_value(d->tier, strlen(d->tier), 128, tier);
    if (d->attempted) /* a quota: seed 004's figures, after the words every denial has */
        resp_error(conn_out(c), "RATELIMITED",
                   "limit=%s kind=%s%s%s key=%s limit_value=%" PRId64 " window_ms=%" PRId64
                   " retry_after_ms=%" PRId64 " current=%" PRId64 " attempted=%" PRId64,
                   name, d->kind ? d->kind : "?", d->tier ? " tier=" : "", d->tier ? tier : "", key,
                   d->limit_value, d->window_ns / SLUICE_NS_PER_MS,
                   command_ns_to_ms(d->retry_after_ns), d->current, d->attempted);
    else
        resp_error(conn_out(c), "RATELIMITED",
                   "limit=%s kind=%s%s%s key=%s limit_value=%" PRId64 " window_ms=%" PRId64
                   " retry_after_ms=%" PRId64,
                   name, d->kind ? d->kind : "?", d->tier ? " tier=" : "", d->tier ? tier : "", key,
                   d->limit_value, d->window_ns / SLUICE_NS_PER_MS,
                   command_ns_to_ms(d->retry_after_ns));
}

int command_parse_int(const char *s, size_t len, int64_t *out)
{
    uint64_t v = 0, max;
    size_t i = 0;
    int neg = 0;

    if (len == 0 || len > 20)
        return -1;
    if (s[0] == '-' || s[0] == '+') {
        /* A '+' is accepted as redis-cell accepts it (Rust's i64 parser does). */
        neg = s[0] == '-';
        i = 1;
        if (len == 1)
            return -1;
    }
    max = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; i < len; i++) {
        unsigned d;

        if (s[i] < '0' || s[i] > '9')
            return -1;
        d = (unsigned)(s[i] - '0');
        if (v > (max - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    if (neg)
        *out = v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v;
    else
        *out = (int64_t)v;
    return 0;
}

int command_arg_str(const char *s, size_t len, char *buf, size_t buflen)
{
    if (len >= buflen || memchr(s, '\0', len))
        return -1;
    memcpy(buf, s, len);
    buf[len] = '\0';
    return 0;
}

int command_int_arg(conn *c, const char *what, const char *s, size_t len, int64_t min, int64_t max,
                    int64_t *out)
{
    if (command_parse_int(s, len, out) == 0 && *out >= min && *out <= max)
        return 0;
    resp_error(conn_out(c), "WRONGARGS", "%s must be an integer from %" PRId64 " to %" PRId64, what,
               min, max);
    return -1;
}

int command_id_arg(conn *c, const char *s, size_t len, uint64_t *id)
{
    int64_t v;

    if (command_parse_int(s, len, &v) == 0 && v > 0) {
        *id = (uint64_t)v;
        return 0;
    }
    resp_error(conn_out(c), "WRONGARGS", "a task id is a positive decimal integer");
    return -1;
}
