/* SPDX-License-Identifier: MIT */
/*
 * Live limit changes shared on the store: the poll, the writes, and applying the shared set to
 * this node's engine (see rdefs.h). Every call goes through rstore's FIFO, so answers are
 * applied in the order the calls were sent: a write sent after a poll is applied after it, and
 * the version recorded after each answer is the store's version as of that call.
 */
#include "server/rdefs.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <uv.h>

#include "base/alloc.h"
#include "server/commands.h"
#include "server/counters.h"
#include "server/log.h"
#include "server/rstore.h"
#include "server/rtag.h"
#include "server/rtasks.h"
#include "sluice/config.h"
#include "sluice/error.h"
#include "sluice/policy_spec.h"
#include "store/redis_cluster.h"
#include "store/redis_limits.h"
#include "store/shared_defs.h"

typedef struct rdefs rdefs;

/* One call: the poll (one per node, reused) or a client's write. */
typedef struct dcall {
    rstore_call base; /* first: rstore's FIFO holds it */
    rdefs *rd;
    int is_set;            /* a write (else the poll) */
    int is_reset;          /* a LIMIT.RESET: 1 of one key (its answer's count in ver), 2 of
                            * every key of a limit */
    int is_spend;          /* a LIMIT.SPEND (its figures in usage) */
    int peek;              /* the poll's cheap form: the version alone (Redis GET) */
    int64_t known;         /* the version this node held when it was sent */
    char *name;            /* a write's limit, owned */
    char *spec;            /* a write's text, owned */
    sdefs_cmd cmd;         /* Redis: the command */
    sdefs_reset_cmd rcmd;  /* Redis: a reset's command */
    sdefs_wreset_cmd wcmd; /* Redis: a whole reset's command */
    sdefs_spend_cmd qcmd;  /* Redis: a spend read's command */
    int64_t budget;        /* a spend read's quota: its budget and calendar */
    sluice_calendar cal;
    sluice_quota_usage usage;               /* a spend read's answer */
    char *rkeys[2];                         /* a reset's state keys (Redis), or its tag and key
                                             * in hex (PostgreSQL), owned */
    size_t rlens[2];                        /* their lengths (Redis) */
    char rids[2][COMMAND_NAME_BUF * 2 + 8]; /* a reset's limit ids */
    const char *pgv[4];                     /* PostgreSQL: the statement's parameters */
    conn *c;                                /* a write's client; NULL once it closed */
    size_t ticket;                          /* its deferred slot */
    int reply_one;                          /* answer :1 (else +OK) */
    int is_gen;    /* a whole reset by generation (Redis Cluster): a write, answered +OK */
    int64_t ver;   /* the answer: the store's version */
    int full;      /* it carries the whole set, in set */
    sdefs_set set; /* the answer's set when full */
    struct dcall *prev, *next; /* writes in flight */
} dcall;

struct rdefs {
    server *s;
    int64_t ver;      /* the set's version the engine holds; -1: not loaded (the next answer
                       * carries the whole set) */
    sdefs_set have;   /* what the engine holds from the set (and this node's own writes) */
    dcall poll;       /* the poll's call */
    int in_flight;    /* the poll is out */
    int again;        /* a NOTIFY came while it was out: poll again at once */
    int need_full;    /* the version moved: the next poll reads the set (Redis) */
    uv_timer_t timer; /* the next poll */
    dcall *calls;     /* writes in flight */
    int closed;
    char slot_key[SDEFS_PREFIX_MAX + 16];
    int slot;     /* Redis Cluster: the slot of every defs key */
    size_t ngens; /* entries of `have` that are generations (SDEFS_GEN_PREFIX), not limits */
    rdefs_stats stats;
};

/* 1 when a set's entry is a whole reset's generation, not a limit. */
static int is_gen_name(const char *name)
{
    return strncmp(name, SDEFS_GEN_PREFIX, SDEFS_GEN_PREFIX_LEN) == 0;
}

static void count_gens(rdefs *rd)
{
    rd->ngens = 0;
    for (size_t i = 0; i < rd->have.n; i++)
        rd->ngens += is_gen_name(rd->have.e[i].name) ? 1 : 0;
}

/* Raises, in `have`, the generation of each limit id of the id list ids (NUL-terminated), as
 * defs.lua's "N" did in the store. Returns 0, or -1 (out of memory, a malformed list: the
 * caller reads the whole set again). */
static int raise_gens(rdefs *rd, const char *ids)
{
    const char *p = ids;
    int rc = 0;

    while (*p && rc == 0) {
        char *colon, name[SDEFS_GEN_PREFIX_LEN + COMMAND_NAME_BUF * 4], num[24];
        unsigned long long len = strtoull(p, &colon, 10);
        const char *old;

        if (*colon != ':' || strnlen(colon + 1, len) < len ||
            len + SDEFS_GEN_PREFIX_LEN >= sizeof name)
            return -1;
        memcpy(name, SDEFS_GEN_PREFIX, SDEFS_GEN_PREFIX_LEN);
        memcpy(name + SDEFS_GEN_PREFIX_LEN, colon + 1, len);
        name[SDEFS_GEN_PREFIX_LEN + len] = '\0';
        old = sdefs_set_get(&rd->have, name);
        snprintf(num, sizeof num, "%llu", (old ? strtoull(old, NULL, 10) : 0) + 1);
        rc = sdefs_set_put(&rd->have, name, SDEFS_GEN_PREFIX_LEN + len, num, strlen(num));
        p = colon + 1 + len;
    }
    count_gens(rd);
    return rc == 0 ? 0 : -1;
}

static rdefs *state_of(const server *s)
{
    return s ? s->rdefs_state : NULL;
}

int rdefs_active(const server *s)
{
    return state_of(s) != NULL;
}

/* ---- Applying the set ---------------------------------------------------------------------- */

/* Makes p (a complete policy) the engine's limit p->name: kept as it is when equal, its mode
 * switched when only that differs, else replaced. Returns 0 or the engine's error (why). */
static int install(server *s, const sluice_limit_policy *p, int64_t now, char *why, size_t len)
{
    const sluice_limit_policy *old = sluice_engine_get_limit(s->engine, p->name, NULL);
    int rc;

    if (old && server_policy_eq(old, p))
        return 0;
    if (old && server_policy_mode_only(old, p))
        return sluice_engine_set_limit_mode(s->engine, p->name, p->mode, now);
    rc = sluice_engine_set_limit(s->engine, p, now, why, len);
    if (rc == 0)
        cmd_limit_bump(s, p->name);
    return rc;
}

static int remove_limit(server *s, const char *name, int64_t now)
{
    int rc = sluice_engine_del_limit(s->engine, name, now);

    if (rc == 0)
        cmd_limit_bump(s, name);
    if (rc == SLUICE_ESTATE)
        log_warn("store: limit \"%s\" was removed by LIMIT.DEL, but a task type of this node's "
                 "configuration uses it: it stays here",
                 name);
    return rc == SLUICE_ENOTFOUND || rc == SLUICE_ESTATE ? 0 : rc;
}

/* Applies one definition of the set, as durable_load.c applies a stored LIMIT.SET. */
static void apply_one(rdefs *rd, const char *name, const char *spec)
{
    server *s = rd->s;
    int64_t now = server_now(s);
    sluice_limit_policy p;
    sluice_limit_mode mode;
    const char *bad;
    char why[512] = "";
    int rc;

    if (spec[0] == '\0') {
        rc = remove_limit(s, name, now);
    } else if (sluice_spec_parse_mode(spec, &mode)) {
        /* A tiered limit's mode (only a file declares those). */
        rc = sluice_engine_set_limit_mode(s->engine, name, mode, now);
        if (rc == SLUICE_ENOTFOUND)
            snprintf(why, sizeof why, "no limit of that name is declared here");
    } else {
        rc = sluice_spec_parse_policy(spec, &p, why, sizeof why);
        if (rc == 0) {
            p.name = alloc_memdup0(name, strlen(name));
            bad = p.name ? server_limit_unsupported(&p, server_store_postgres(s)) : NULL;
            if (!p.name)
                rc = SLUICE_ENOMEM;
            else if (bad) {
                snprintf(why, sizeof why, "%s", bad);
                rc = SLUICE_EINVAL;
            } else {
                rc = install(s, &p, now, why, sizeof why);
            }
            sluice_limit_policy_clear(&p);
        }
    }
    if (rc != 0) {
        rd->stats.refused++;
        log_warn("store: the shared LIMIT.SET %s \"%s\" is refused on this node (%s); its own "
                 "definition (if any) stays",
                 name, spec, why[0] ? why : sluice_strerror(rc));
        return;
    }
    rd->stats.applied++;
}

/* A name that left the set: back to this node's file, or gone. */
static void restore_file(rdefs *rd, const char *name)
{
    server *s = rd->s;
    const sluice_limit_policy *p =
        s->has_config ? sluice_config_find_limit(&s->config, name) : NULL;
    char why[512] = "";
    int rc =
        p ? install(s, p, server_now(s), why, sizeof why) : remove_limit(s, name, server_now(s));

    if (rc != 0)
        log_warn("store: limit \"%s\" could not go back to this node's file (%s)", name,
                 why[0] ? why : sluice_strerror(rc));
}

/* Makes the engine hold set (taken: emptied): applies what differs from `have`. */
static void reconcile(rdefs *rd, sdefs_set *set)
{
    size_t changed = 0;

    for (size_t i = 0; i < rd->have.n; i++)
        if (!is_gen_name(rd->have.e[i].name) && !sdefs_set_get(set, rd->have.e[i].name)) {
            restore_file(rd, rd->have.e[i].name);
            changed++;
        }
    for (size_t i = 0; i < set->n; i++) {
        const char *old = sdefs_set_get(&rd->have, set->e[i].name);

        if (!is_gen_name(set->e[i].name) && (!old || strcmp(old, set->e[i].spec) != 0)) {
            apply_one(rd, set->e[i].name, set->e[i].spec);
            changed++;
        }
    }
    sdefs_set_move(&rd->have, set);
    count_gens(rd);
    rd->stats.loads++;
    if (changed) {
        log_info("store: %zu shared limit definition(s) applied (version %" PRId64 ")", changed,
                 rd->ver);
        server_engine_changed(rd->s);
        server_signal_ready(rd->s);
    }
}

void rdefs_reapply(server *s)
{
    rdefs *rd = state_of(s);

    if (!rd)
        return;
    for (size_t i = 0; i < rd->have.n; i++)
        if (!is_gen_name(rd->have.e[i].name))
            apply_one(rd, rd->have.e[i].name, rd->have.e[i].spec);
    if (rd->have.n > rd->ngens)
        log_info("store: %zu shared limit definition(s) applied over the reloaded file",
                 rd->have.n - rd->ngens);
}

/* ---- Calls --------------------------------------------------------------------------------- */

/* Points k's call at its command: a GET when name is NULL, else a SET. Returns 0 or an error. */
static int command(rdefs *rd, dcall *k, const char *name, const char *spec)
{
    server *s = rd->s;
    int rc;

    k->known = rd->ver;
    k->is_set = name != NULL;
    k->ver = 0;
    k->full = 0;
    k->base.wait_replicas = 0;
    k->base.slot = rd->slot;
    /* On Redis a poll is a plain GET of the version while this node holds a set: no script
     * call, so it never meets (nor reloads after) a NOSCRIPT, and costs Redis one GET. */
    k->peek = !name && rstore_kind(s) != CONFIG_STORE_POSTGRES && rd->ver >= 0 && !rd->need_full;
    if (k->peek) {
        rc = sdefs_redis_version_command(&k->cmd, NULL);
        k->base.call.argc = rc == 0 ? k->cmd.argc : 0;
        k->base.call.argv = rc == 0 ? k->cmd.argv : NULL;
        k->base.call.argvlen = rc == 0 ? k->cmd.argvlen : NULL;
        return rc;
    }
    if (rstore_kind(s) == CONFIG_STORE_POSTGRES) {
        snprintf(k->cmd.known, sizeof k->cmd.known, "%" PRId64, k->known);
        k->pgv[0] = k->cmd.known;
        k->pgv[1] = name;
        k->pgv[2] = spec;
        if (name)
            rstore_call_pg(&k->base, SDEFS_PG_SET_STMT, SDEFS_PG_SET_NPARAMS, k->pgv);
        else
            rstore_call_pg(&k->base, SDEFS_PG_GET_STMT, SDEFS_PG_GET_NPARAMS, k->pgv);
        return 0;
    }
    rc = sdefs_redis_command(&k->cmd, NULL, rstore_sha(s), k->known, name, name ? strlen(name) : 0,
                             spec, spec ? strlen(spec) : 0);
    k->base.call.argc = rc == 0 ? k->cmd.argc : 0;
    k->base.call.argv = rc == 0 ? k->cmd.argv : NULL;
    k->base.call.argvlen = rc == 0 ? k->cmd.argvlen : NULL;
    return rc;
}

static void on_reply(rstore_call *call, const rstore_answer *a)
{
    dcall *k = (dcall *)(void *)call;
    int rc = k->is_spend   ? sdefs_spend_answer(a->redis, a->pg, k->budget, k->cal, &k->usage)
             : k->is_reset ? sdefs_reset_answer(a->redis, a->pg, &k->ver)
             : k->peek     ? sdefs_redis_version_answer(a->redis, &k->ver)
             : a->pg
                 ? sdefs_pg_answer(a->pg, k->is_set, k->known, &k->ver, &k->full, &k->set)
                 : sdefs_redis_answer(a->redis, k->is_set, k->known, &k->ver, &k->full, &k->set);

    if (rc == SLUICE_ENOMEM) {
        rstore_call_fail(call, "out of memory");
    } else if (rc != 0) {
        log_error("store: a limit definitions reply the store does not give");
        rstore_call_fail(call, "a malformed reply to the limit definitions call");
    }
}

static void on_timer(uv_timer_t *t);

static void arm(rdefs *rd, uint64_t delay_ms)
{
    if (rd->closed)
        return;
    uv_timer_start(&rd->timer, on_timer, delay_ms, 0);
}

/* The answer of k (sent at version k->known) is in: brings the engine to the store's set. */
static void take_answer(rdefs *rd, dcall *k)
{
    if (k->peek) {
        if (k->ver != rd->ver) {
            rd->need_full = 1; /* read the set now, with its version */
            rd->again = 1;
        }
        return;
    }
    if (!k->is_set)
        rd->need_full = 0;
    if (k->full) {
        rd->ver = k->ver;
        reconcile(rd, &k->set);
    } else if (k->is_gen && rd->ver == k->known && raise_gens(rd, k->name) == 0) {
        rd->ver = k->ver; /* our set, these generations one higher, is the store's */
    } else if (!k->is_gen && rd->ver == (k->is_set ? k->known : k->ver)) {
        rd->ver = k->ver; /* our set (plus our write) is the store's */
    } else {
        /* Another answer moved us meanwhile: read the whole set again. Never seen in order. */
        rd->ver = -1;
        arm(rd, 0);
    }
    sdefs_set_clear(&k->set);
}

static void poll_apply(rstore_call *call)
{
    dcall *k = (dcall *)(void *)call;
    rdefs *rd = k->rd;

    rd->in_flight = 0;
    if (k->base.why[0]) {
        rd->stats.failures++;
        sdefs_set_clear(&k->set);
    } else {
        take_answer(rd, k);
    }
    arm(rd, (rd->ver < 0 && !k->base.why[0]) || rd->again ? 0 : RDEFS_POLL_MS);
    rd->again = 0;
}

static void poll_send(rdefs *rd)
{
    int rc;

    if (!rstore_up(rd->s, NULL)) {
        arm(rd, RDEFS_POLL_MS);
        return;
    }
    rc = command(rd, &rd->poll, NULL, NULL);
    rd->poll.base.on_reply = on_reply;
    rd->poll.base.apply = poll_apply;
    rd->in_flight = 1;
    rd->stats.polls++;
    rstore_send(rd->s, &rd->poll.base, rc); /* may apply at once (a failure) */
}

static void on_timer(uv_timer_t *t)
{
    rdefs *rd = t->data;

    if (rd->closed || rd->in_flight || rd->s->stopping)
        return; /* the poll in flight arms the next one when it is applied */
    poll_send(rd);
}

void rdefs_notify(server *s)
{
    rdefs *rd = state_of(s);

    if (!rd)
        return;
    if (rd->in_flight)
        rd->again = 1; /* the poll out may have been read before that change committed */
    else
        arm(rd, 0);
}

static void write_free(dcall *k)
{
    sdefs_set_clear(&k->set);
    alloc_free(k->rkeys[0]);
    alloc_free(k->rkeys[1]);
    alloc_free(k->name);
    alloc_free(k->spec);
    alloc_free(k);
}

static void write_reply(dcall *k)
{
    resp_writer *w = conn_out(k->c);

    if (k->base.why[0] && k->is_gen)
        resp_error(w, "STOREDOWN",
                   "the shared store is unavailable (%s); the limit may or may not have been "
                   "reset",
                   k->base.why);
    else if (k->base.why[0])
        resp_error(w, "STOREDOWN",
                   "the shared store is unavailable (%s); the change is in force on this node "
                   "only until it reads the shared definitions again, which keep it only if the "
                   "store took it",
                   k->base.why);
    else if (k->reply_one)
        resp_int(w, 1);
    else
        resp_simple(w, "OK");
}

/* LIMIT.SPEND's map, as the single node writes it (cmd_limit.c). */
static void spend_reply(resp_writer *w, const sluice_quota_usage *u)
{
    resp_map(w, 5);
    resp_bulk_str(w, "spent");
    resp_int(w, u->spent);
    resp_bulk_str(w, "budget");
    resp_int(w, u->budget);
    resp_bulk_str(w, "remaining");
    resp_int(w, u->remaining);
    resp_bulk_str(w, "period_start_ms");
    resp_int(w, command_time_ms(u->period_start_ns));
    resp_bulk_str(w, "resets_at_ms");
    resp_int(w, command_time_ms(u->resets_at_ns));
}

static void write_apply(rstore_call *call)
{
    dcall *k = (dcall *)(void *)call;
    rdefs *rd = k->rd;

    if (k->prev)
        k->prev->next = k->next;
    else
        rd->calls = k->next;
    if (k->next)
        k->next->prev = k->prev;
    if (k->is_reset || k->is_spend) {
        if (k->c) {
            resp_writer *w = conn_out(k->c);
            size_t mark = w->len;

            if (k->base.why[0] && k->is_spend)
                resp_error(w, "STOREDOWN", "the shared store is unavailable (%s)", k->base.why);
            else if (k->base.why[0])
                resp_error(w, "STOREDOWN",
                           "the shared store is unavailable (%s); the %s may or may not have "
                           "been reset",
                           k->base.why, k->is_reset == 2 ? "limit" : "key");
            else if (k->is_spend)
                spend_reply(w, &k->usage);
            else if (k->is_reset == 2)
                resp_simple(w, "OK");
            else
                resp_int(w, k->ver > 0);
            if (!conn_out(k->c)->failed && conn_out(k->c)->len > mark)
                counters_reply(&rd->s->counters, conn_out(k->c)->buf + mark,
                               conn_out(k->c)->len - mark);
            conn_defer_fill(k->c, k->ticket, mark);
        }
        write_free(k);
        return;
    }
    if (k->base.why[0]) {
        /* The store may or may not have it: the next poll reads the whole set, which keeps or
         * undoes this node's change. */
        rd->stats.failures++;
        rd->ver = -1;
        sdefs_set_clear(&k->set);
    } else {
        rd->stats.writes++;
        take_answer(rd, k);
    }
    if (k->c) {
        size_t mark = conn_out(k->c)->len;

        write_reply(k);
        if (!conn_out(k->c)->failed && conn_out(k->c)->len > mark)
            counters_reply(&rd->s->counters, conn_out(k->c)->buf + mark,
                           conn_out(k->c)->len - mark);
        conn_defer_fill(k->c, k->ticket, mark);
    }
    write_free(k);
}

void rdefs_write(conn *c, const char *name, const char *spec, int reply_one)
{
    server *s = c->srv;
    rdefs *rd = state_of(s);
    dcall *k;
    int rc;

    k = alloc_calloc(1, sizeof(*k));
    if (k) {
        k->name = alloc_memdup0(name, strlen(name));
        k->spec = alloc_memdup0(spec, strlen(spec));
    }
    /* What the engine now holds: a later answer compares the store's set with it. */
    rc = k && k->name && k->spec ? sdefs_set_put(&rd->have, name, strlen(name), spec, strlen(spec))
                                 : SLUICE_ENOMEM;
    if (rc != 0) {
        if (k)
            write_free(k);
        rd->ver = -1; /* the next poll reads the whole set and repairs this node */
        resp_error(conn_out(c), "NOMEM", "out of memory");
        return;
    }
    k->rd = rd;
    k->reply_one = reply_one;
    /* The turn's limits or task batch goes first: the FIFO is the order the client's commands
     * were taken. */
    rstore_flush_limits(s);
    rtasks_flush(s);
    rc = command(rd, k, k->name, k->spec);
    k->base.on_reply = on_reply;
    k->base.apply = write_apply;
    k->c = c;
    k->base.lane = rstore_lane(s, c, 0); /* before its slot: rstore_pg.h, routing */
    k->ticket = conn_defer(c);
    k->next = rd->calls;
    if (rd->calls)
        rd->calls->prev = k;
    rd->calls = k;
    rstore_send(s, &k->base, rc);
}

/* Fills k's hex parameters (tag and key of link l) for PostgreSQL. Returns 0 or an error. */
static int pg_tag_key_hex(dcall *k, const rlim_link *l)
{
    static const char hex[] = "0123456789abcdef";
    rlim_names nm;
    int rc = rlim_link_names(l, &nm);

    for (int i = 0; rc == 0 && i < 2; i++) {
        const char *b = i ? nm.key : nm.tag;
        size_t len = i ? nm.keylen : nm.taglen;
        char *h = alloc_malloc(2 * len + 1);

        if (!h)
            return SLUICE_ENOMEM;
        for (size_t j = 0; j < len; j++) {
            h[2 * j] = hex[(unsigned char)b[j] >> 4];
            h[2 * j + 1] = hex[(unsigned char)b[j] & 15];
        }
        h[2 * len] = '\0';
        k->rkeys[i] = h;
    }
    return rc;
}

/* Fills k's reset command for the n links (their state keys on Redis; tag and key in hex on
 * PostgreSQL, where both links share them). Returns 0 or an error. */
static int reset_command(rdefs *rd, dcall *k, const rlim_link *links, size_t n)
{
    server *s = rd->s;
    int rc = 0;

    if (rstore_kind(s) == CONFIG_STORE_POSTGRES) {
        rc = pg_tag_key_hex(k, &links[0]);
        if (rc != 0)
            return rc;
        k->pgv[0] = k->rkeys[0];
        k->pgv[1] = links[0].limit_id;
        k->pgv[2] = k->rkeys[1];
        k->pgv[3] = n > 1 ? links[1].limit_id : NULL;
        rstore_call_pg(&k->base, SDEFS_PG_RESET_STMT, SDEFS_PG_RESET_NPARAMS, k->pgv);
        return 0;
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        char *clock = NULL;
        size_t clocklen = 0;

        rc = rlim_link_keys(NULL, &links[i], &k->rkeys[i], &k->rlens[i], &clock, &clocklen);
        alloc_free(clock);
    }
    if (rc == 0)
        rc = sdefs_redis_reset_command(&k->rcmd, rstore_sha(s), (const char *const *)k->rkeys,
                                       k->rlens, n);
    if (rc != 0)
        return rc;
    k->base.slot = rcl_key_slot(k->rkeys[0], k->rlens[0]);
    k->base.call.argc = k->rcmd.argc;
    k->base.call.argv = k->rcmd.argv;
    k->base.call.argvlen = k->rcmd.argvlen;
    return 0;
}

void rdefs_reset(conn *c, const char *name, const sluice_limit_def *def, const char *override_id,
                 const sluice_limit_def *odef, const char *key, size_t keylen)
{
    server *s = c->srv;
    rdefs *rd = state_of(s);
    rlim_link links[2];
    size_t n = override_id ? 2 : 1;
    dcall *k = alloc_calloc(1, sizeof(*k));
    int rc;

    if (!k) {
        resp_error(conn_out(c), "NOMEM", "out of memory");
        return;
    }
    memset(links, 0, sizeof links);
    snprintf(k->rids[0], sizeof k->rids[0], "%s", name);
    snprintf(k->rids[1], sizeof k->rids[1], "%s", override_id ? override_id : "");
    for (size_t i = 0; i < n; i++) {
        links[i].def = i ? odef : def;
        links[i].limit_id = k->rids[i];
        links[i].key = key;
        links[i].keylen = keylen;
        links[i].units = 1;
        rstore_link_tag(s, &links[i]); /* the tag THROTTLE's links carry */
    }
    k->rd = rd;
    k->is_reset = 1;
    k->base.wait_replicas = 0;
    rstore_flush_limits(s);
    rtasks_flush(s);
    rc = reset_command(rd, k, links, n);
    k->base.on_reply = on_reply;
    k->base.apply = write_apply;
    k->c = c;
    k->base.lane = rstore_lane(s, c, 0); /* before its slot: rstore_pg.h, routing */
    k->ticket = conn_defer(c);
    k->next = rd->calls;
    if (rd->calls)
        rd->calls->prev = k;
    rd->calls = k;
    rstore_send(s, &k->base, rc);
}

/* Queues k (a reset or spend call whose command is set, rc its build status) for client c. */
static void send_client_call(rdefs *rd, conn *c, dcall *k, int rc)
{
    k->rd = rd;
    k->base.wait_replicas = 0;
    k->base.on_reply = on_reply;
    k->base.apply = write_apply;
    k->c = c;
    k->ticket = conn_defer(c);
    k->next = rd->calls;
    if (rd->calls)
        rd->calls->prev = k;
    rd->calls = k;
    rstore_send(rd->s, &k->base, rc);
}

uint64_t rdefs_reset_gen(const server *s, const char *limit_id)
{
    const rdefs *rd = state_of(s);
    char name[SDEFS_GEN_PREFIX_LEN + COMMAND_NAME_BUF * 2 + 8];
    const char *v;

    if (!rd || rd->ngens == 0 ||
        snprintf(name, sizeof name, "%s%s", SDEFS_GEN_PREFIX, limit_id) >= (int)sizeof name)
        return 0;
    v = sdefs_set_get(&rd->have, name);
    return v ? strtoull(v, NULL, 10) : 0;
}

void rdefs_reset_all(conn *c, const char *name, const char *ids, size_t idslen)
{
    server *s = c->srv;
    rdefs *rd = state_of(s);
    dcall *k;
    int rc;

    k = alloc_calloc(1, sizeof(*k));
    if (k && rstore_kind(s) == CONFIG_STORE_POSTGRES)
        k->name = sdefs_pg_ids_array(ids, idslen); /* the statement's text[] */
    else if (k)
        k->name = alloc_memdup0(ids, idslen);
    if (!k || !k->name) {
        if (k)
            write_free(k);
        resp_error(conn_out(c), "NOMEM", "out of memory");
        return;
    }
    /* Decisions taken before the reset go first: the FIFO is the order of the commands. */
    rstore_flush_limits(s);
    rtasks_flush(s);
    if (rstore_kind(s) == CONFIG_STORE_REDIS_CLUSTER && !rstore_in_queue_slot(s, name)) {
        /* A limit no type names keeps its keys on every master: its generations are raised in
         * the shared set (defs.lua's "N"), which this node applies before it answers and the
         * others at their next poll. */
        k->is_set = 1;
        k->is_gen = 1;
        k->known = rd->ver;
        k->base.slot = rd->slot;
        rc = sdefs_redis_gen_command(&k->cmd, NULL, rstore_sha(s), k->known, k->name, idslen);
        k->base.call.argc = rc == 0 ? k->cmd.argc : 0;
        k->base.call.argv = rc == 0 ? k->cmd.argv : NULL;
        k->base.call.argvlen = rc == 0 ? k->cmd.argvlen : NULL;
        send_client_call(rd, c, k, rc);
        return;
    }
    k->is_reset = 2;
    if (rstore_kind(s) == CONFIG_STORE_POSTGRES) {
        k->pgv[0] = k->name;
        rstore_call_pg(&k->base, SDEFS_PG_RESET_ALL_STMT, SDEFS_PG_RESET_ALL_NPARAMS, k->pgv);
        rc = 0;
    } else {
        /* Every state of the limit carries the queue's tag (rtag.h): on a standalone Redis
         * every limit's, on a Cluster a limit a type names (the others: reset_by_generation). */
        rc = sdefs_redis_whole_reset_command(&k->wcmd, NULL, rstore_sha(s), RTAG_QUEUE, k->name,
                                             idslen);
        k->base.slot =
            rstore_kind(s) == CONFIG_STORE_REDIS_CLUSTER ? rstore_queue_slot(s) : rd->slot;
        k->base.call.argc = rc == 0 ? k->wcmd.argc : 0;
        k->base.call.argv = rc == 0 ? k->wcmd.argv : NULL;
        k->base.call.argvlen = rc == 0 ? k->wcmd.argvlen : NULL;
    }
    send_client_call(rd, c, k, rc);
}

void rdefs_spend(conn *c, const char *limit_id, const sluice_limit_def *def, const char *key,
                 size_t keylen)
{
    server *s = c->srv;
    rdefs *rd = state_of(s);
    rlim_link link;
    dcall *k = alloc_calloc(1, sizeof(*k));
    int rc;

    if (!k) {
        resp_error(conn_out(c), "NOMEM", "out of memory");
        return;
    }
    memset(&link, 0, sizeof link);
    snprintf(k->rids[0], sizeof k->rids[0], "%s", limit_id);
    link.def = def;
    link.limit_id = k->rids[0];
    link.key = key;
    link.keylen = keylen;
    link.units = 1;
    rstore_link_tag(s, &link);
    k->is_spend = 1;
    k->budget = def->limit;
    k->cal = def->calendar;
    /* A read after the client's earlier decisions: they go first. */
    rstore_flush_limits(s);
    rtasks_flush(s);
    if (rstore_kind(s) == CONFIG_STORE_POSTGRES) {
        rc = pg_tag_key_hex(k, &link);
        k->pgv[0] = k->rkeys[0];
        k->pgv[1] = k->rids[0];
        k->pgv[2] = k->rkeys[1];
        if (rc == 0)
            rstore_call_pg(&k->base, SDEFS_PG_SPEND_STMT, SDEFS_PG_SPEND_NPARAMS, k->pgv);
    } else {
        rc = rlim_link_keys(NULL, &link, &k->rkeys[0], &k->rlens[0], &k->rkeys[1], &k->rlens[1]);
        if (rc == 0)
            rc = sdefs_redis_spend_command(&k->qcmd, rstore_sha(s), k->rkeys[0], k->rlens[0],
                                           k->rkeys[1], k->rlens[1]);
        if (rc == 0) {
            k->base.slot = rcl_key_slot(k->rkeys[0], k->rlens[0]);
            k->base.call.argc = k->qcmd.argc;
            k->base.call.argv = k->qcmd.argv;
            k->base.call.argvlen = k->qcmd.argvlen;
        }
    }
    send_client_call(rd, c, k, rc);
}

void rdefs_conn_closed(conn *c)
{
    rdefs *rd = state_of(c->srv);

    if (!rd)
        return;
    for (dcall *k = rd->calls; k; k = k->next)
        if (k->c == c)
            k->c = NULL;
}

/* ---- Life ---------------------------------------------------------------------------------- */

int rdefs_open(server *s, int64_t timeout_ms)
{
    rdefs *rd = alloc_calloc(1, sizeof(*rd));
    uint64_t until;
    int n;

    if (!rd)
        return SLUICE_ENOMEM;
    rd->s = s;
    rd->ver = -1;
    rd->poll.rd = rd;
    n = sdefs_redis_slot_key(NULL, rd->slot_key, sizeof rd->slot_key);
    rd->slot = n > 0 ? rcl_key_slot(rd->slot_key, (size_t)n) : 0;
    uv_timer_init(&s->loop, &rd->timer);
    rd->timer.data = rd;
    s->rdefs_state = rd;
    /* The set before the first decision: the node listens only after this. A store that is up
     * may still refuse the first call (a Cluster whose slot map or master connection is not
     * ready yet): polls follow, until the set is read or the timeout passed. */
    if (rstore_up(s, NULL)) {
        until = uv_now(&s->loop) + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
        poll_send(rd);
        while (rd->in_flight || (rd->ver < 0 && uv_now(&s->loop) < until)) {
            if (!rd->in_flight && !uv_is_active((uv_handle_t *)&rd->timer))
                poll_send(rd);
            uv_run(&s->loop, UV_RUN_ONCE);
        }
    } else {
        arm(rd, RDEFS_POLL_MS);
    }
    if (rd->ver >= 0)
        log_info("store: shared limit definitions at version %" PRId64 " (%zu)", rd->ver,
                 rd->have.n - rd->ngens);
    return SLUICE_OK;
}

void rdefs_close(server *s)
{
    rdefs *rd = state_of(s);

    if (!rd || rd->closed)
        return;
    rd->closed = 1;
    uv_timer_stop(&rd->timer);
    uv_close((uv_handle_t *)&rd->timer, NULL);
}

void rdefs_free(server *s)
{
    rdefs *rd = state_of(s);

    if (!rd)
        return;
    rdefs_close(s);
    /* rstore_close applied every call in flight: no write is left. */
    sdefs_set_clear(&rd->poll.set);
    sdefs_set_clear(&rd->have);
    alloc_free(rd);
    s->rdefs_state = NULL;
}

void rdefs_get_stats(const server *s, rdefs_stats *out)
{
    const rdefs *rd = state_of(s);

    memset(out, 0, sizeof(*out));
    out->version = -1;
    if (rd) {
        *out = rd->stats;
        out->version = rd->ver;
    }
}

void rdefs_info_append(const server *s, char *buf, size_t len)
{
    rdefs_stats x;
    size_t at = strlen(buf);

    rdefs_get_stats(s, &x);
    if (at < len)
        snprintf(buf + at, len - at,
                 "store_defs_version:%" PRId64 "\r\nstore_defs_polls:%" PRIu64
                 "\r\nstore_defs_loads:%" PRIu64 "\r\nstore_defs_writes:%" PRIu64
                 "\r\nstore_defs_applied:%" PRIu64 "\r\nstore_defs_refused:%" PRIu64
                 "\r\nstore_defs_failures:%" PRIu64 "\r\n",
                 x.version, x.polls, x.loads, x.writes, x.applied, x.refused, x.failures);
}
