/* SPDX-License-Identifier: MIT */
/*
 * Decisions, leases and live limit changes: THROTTLE, LEASE.ACQUIRE/RENEW/RELEASE and
 * LIMIT.SET/GET/LIST/DEL/RESET/BACKOFF.
 *
 * THROTTLE asks one named limit, or every limit of a task type's chain as one atomic decision
 * (sluice_chain_decide: granted only when all have budget, nothing charged otherwise). The key
 * given is the key of every limit in the chain that takes one (key=explicit or a key path: the
 * caller passes the value the path would give); key=none limits use their global bucket.
 *
 * Lease handles are text, "NAME/GEN/ID": the limit, the generation of that name when the lease
 * was taken, and the core lease id. Replacing or removing a limit bumps its name's generation,
 * so handles of the old limit are refused (NOLEASE) instead of touching a new limit that happens
 * to reuse the same ids. The generation table is this module's state; names are few (one per
 * limit ever named), so it is a small pointer table that only grows.
 *
 * A lease taken with LEASE.ACQUIRE is a kept lease (sluice_lease_acquire_kept) whose tag is
 * the generation its handle carries; the store saves it with its limit's key state and restores
 * it at start with its id and tag, so its handle still names it after a restart. A handle
 * names a lease only when the lease's tag is the handle's generation; a lease that is gone is
 * judged by its name's generation now, so that its RENEW or RELEASE says "gone" as before.
 * Under `durability: always` the reply of a granted ACQUIRE and of a RENEW waits for the commit
 * of the key's state (durable_key_changed); a failed commit answers -IOERR and releases the
 * refused ACQUIRE's lease (lease_undo). RELEASE waits for nothing: a lost release only holds
 * the units until the lease's end. Leases not written before a crash (batch) are lost, and core
 * lease ids then continue above the restored ones only, so an id can be issued again. Generations
 * are therefore rebased at start (cmd_limit_rebase) on the server's clock in ns, which never goes
 * back across restarts: a handle issued before a restart carries a generation below every one
 * issued after it, so a stale RELEASE, RENEW or TASK.ADD ... LEASE is refused (NOLEASE) rather than
 * touching a new holder's lease of the same id. A name never bumped has the base generation.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/hash.h"
#include "base/ptab.h"
#include "server/commands.h"
#include "server/durable.h"
#include "server/log.h"
#include "server/rdefs.h"
#include "server/rstore.h"
#include "sluice/error.h"
#include "sluice/policy_spec.h"
#include "sluice/spec.h"
#include "store/shared_defs.h"

/* Longest LIMIT.SET spec. */
#define SPEC_BUF SLUICE_POLICY_SPEC_MAX_LEN
/* The id of a key override's core, "name/=key" (both bounded well below COMMAND_NAME_BUF). */
#define KEY_ID_BUF (2 * COMMAND_NAME_BUF + 4)
/* Links of a chain held on the stack; longer chains are allocated. */
#define CHAIN_STACK 16

/* ---- Generations ------------------------------------------------------------------------- */

typedef struct gen_entry {
    uint64_t gen;
    char name[]; /* NUL-terminated */
} gen_entry;

typedef struct limit_state {
    ptab gens;        /* gen_entry * by the hash_bytes of their name; only grows */
    uint64_t counter; /* the last generation given; >= base */
    uint64_t base;    /* the generation of a name never bumped since start */
} limit_state;

static int gen_eq(const void *p, const void *key)
{
    return strcmp(((const gen_entry *)p)->name, key) == 0;
}

int cmd_limit_init(server *s)
{
    limit_state *ls = alloc_calloc(1, sizeof(*ls));

    if (!ls)
        return SLUICE_ENOMEM;
    ptab_init(&ls->gens);
    s->limit_state = ls;
    return 0;
}

void cmd_limit_free(server *s)
{
    limit_state *ls = s->limit_state;
    size_t pos = 0;
    gen_entry *e;

    if (!ls)
        return;
    while ((e = ptab_next(&ls->gens, &pos)) != NULL)
        alloc_free(e);
    ptab_free(&ls->gens);
    alloc_free(ls);
    s->limit_state = NULL;
}

static gen_entry *gen_find(const limit_state *ls, const char *name)
{
    return ptab_find(&ls->gens, hash_bytes(name, strlen(name)), name, gen_eq);
}

static uint64_t gen_of(const server *s, const char *name)
{
    const gen_entry *e = gen_find(s->limit_state, name);

    return e ? e->gen : ((const limit_state *)s->limit_state)->base;
}

void cmd_limit_rebase(server *s, uint64_t base)
{
    limit_state *ls = s->limit_state;
    size_t pos = 0;
    gen_entry *e;

    if (base <= ls->counter)
        base = ls->counter + 1;
    /* No handle was issued yet: names bumped during recovery simply start at the base too. */
    while ((e = ptab_next(&ls->gens, &pos)) != NULL)
        e->gen = base;
    ls->base = base;
    ls->counter = base;
}

void cmd_limit_bump(server *s, const char *name)
{
    limit_state *ls = s->limit_state;
    gen_entry *e = gen_find(ls, name);
    size_t len = strlen(name);

    ls->counter++;
    if (e) {
        e->gen = ls->counter;
        return;
    }
    e = ptab_reserve(&ls->gens, 1) == SLUICE_OK ? alloc_malloc(sizeof(*e) + len + 1) : NULL;
    if (!e) {
        /* Without room the name keeps the base generation; its old handles stay accepted by a new
         * limit of the same name (whose lease ids restart). Log it: it is only memory. */
        log_error("lease generations: out of memory for limit \"%s\"", name);
        return;
    }
    memcpy(e->name, name, len + 1);
    e->gen = ls->counter;
    (void)ptab_insert(&ls->gens, hash_bytes(name, len), e); /* reserved */
}

/* ---- Shared argument handling ------------------------------------------------------------ */

/* Copies a name argument; replies NOLIMIT and returns -1 when it cannot name anything. */
static int name_arg(conn *c, const char *s, size_t len, char *buf)
{
    if (command_arg_str(s, len, buf, COMMAND_NAME_BUF) == 0)
        return 0;
    resp_error(conn_out(c), "NOLIMIT",
               "no limit named that (names are at most %d bytes of "
               "A-Z a-z 0-9 _ . : -)",
               COMMAND_NAME_BUF - 1);
    return -1;
}

/* Checks a key argument's length; replies WRONGARGS and returns -1 when it is too long. */
static int key_arg(conn *c, size_t len)
{
    if (len <= c->srv->opt.max_key_len)
        return 0;
    resp_error(conn_out(c), "WRONGARGS", "key of %zu bytes is longer than the maximum of %zu", len,
               c->srv->opt.max_key_len);
    return -1;
}

/* Replies WRONGARGS for a limit THROTTLE cannot charge: a concurrency limit's units are held
 * by a lease, which only LEASE.ACQUIRE hands out (a THROTTLE grant would hold them, unreleasable,
 * until the TTL); a peek is fine. */
static int check_throttle(conn *c, const sluice_limit_policy *p, unsigned flags)
{
    if (p->def.kind != SLUICE_CONCURRENCY || p->ntiers > 0 || (flags & SLUICE_PEEK))
        return 0;
    resp_error(conn_out(c), "WRONGARGS",
               "limit \"%s\" is a concurrency limit: take its units with LEASE.ACQUIRE (THROTTLE "
               "can only PEEK at it)",
               p->name);
    return -1;
}

/* Replies WRONGARGS for a limit that cannot be asked directly (tiered). */
static int check_direct(conn *c, const sluice_limit_policy *p, const sluice_limit *live)
{
    if (p->ntiers == 0 && live)
        return 0;
    resp_error(conn_out(c), "WRONGARGS",
               "limit \"%s\" is tiered: its tier is chosen from a task's input (%s), so it is "
               "asked through tasks, not directly",
               p->name, p->tier_path ? p->tier_path : "?");
    return -1;
}

/* Writes the id of key's override core of p ("name/=key") into id and returns 1, or returns 0
 * when p has no override for key. */
static int override_id(const sluice_limit_policy *p, const char *key, size_t keylen, char *id,
                       size_t idlen)
{
    for (size_t i = 0; i < p->noverrides; i++)
        if (strlen(p->overrides[i].key) == keylen &&
            memcmp(p->overrides[i].key, key, keylen) == 0) {
            snprintf(id, idlen, "%s/=%s", p->name, p->overrides[i].key);
            return 1;
        }
    return 0;
}

/* The core limit that holds key of an untiered limit p: its override's, or `live`. */
static sluice_limit *key_core(server *s, const sluice_limit_policy *p, const char *key,
                              size_t keylen, sluice_limit *live)
{
    char id[KEY_ID_BUF];
    sluice_limit *o;

    if (p->noverrides == 0 || !override_id(p, key, keylen, id, sizeof(id)))
        return live;
    o = sluice_engine_limit_by_id(s->engine, id);
    return o ? o : live;
}

sluice_limit *cmd_limit_key_core(server *s, const sluice_limit_policy *p, const char *tier,
                                 const char *key, size_t keylen)
{
    char id[2 * COMMAND_NAME_BUF + 2];
    sluice_limit *live = NULL;

    if (p->ntiers > 0) {
        if (!tier || snprintf(id, sizeof(id), "%s/%s", p->name, tier) >= (int)sizeof(id))
            return NULL;
        return sluice_engine_limit_by_id(s->engine, id);
    }
    if (!sluice_engine_get_limit(s->engine, p->name, &live))
        return NULL;
    return key_core(s, p, key, keylen, live);
}

int cmd_limit_key_rate(const sluice_limit *core, const char *key, size_t keylen, int64_t now_ns,
                       cmd_key_rate *out)
{
    const sluice_limit_def *def = sluice_limit_get_def(core);
    int64_t permits, since_ns;

    memset(out, 0, sizeof(*out));
    if (def->kind != SLUICE_RATE ||
        sluice_limit_key_rate(core, key, keylen, now_ns, &permits, &since_ns) != SLUICE_OK)
        return SLUICE_EINVAL;
    cmd_key_rate_explain(def, permits, since_ns, now_ns, out);
    return SLUICE_OK;
}

void cmd_key_rate_explain(const sluice_limit_def *def, int64_t permits, int64_t since_ns,
                          int64_t now_ns, cmd_key_rate *out)
{
    char per[SLUICE_SPEC_DURATION_MAX_LEN], every[SLUICE_SPEC_DURATION_MAX_LEN];

    memset(out, 0, sizeof(*out));
    out->permits = permits;
    out->since_ns = since_ns;
    out->configured = def->limit;
    out->period_ns = def->period_ns;
    out->adaptive = def->decrease_den > 0;
    if (!out->adaptive)
        snprintf(out->why, sizeof(out->why), "configured (not adaptive)");
    else if (out->permits >= def->limit)
        snprintf(out->why, sizeof(out->why), "configured (adaptive, at its configured rate)");
    else {
        sluice_spec_format_duration(def->period_ns, per, sizeof(per));
        sluice_spec_format_duration(def->recover_ns, every, sizeof(every));
        snprintf(out->why, sizeof(out->why),
                 "lowered from %" PRId64 "/%s by its upstream's 429s, the last %" PRId64
                 " ms ago; regains %" PRId64 "%% every %s",
                 def->limit, per, command_ns_to_ms(now_ns - out->since_ns), def->recover_pct,
                 every);
    }
}

/* ---- THROTTLE ---------------------------------------------------------------------------- */

/* THROTTLE's TIER option: the value a task's tier field would hold. */
typedef struct tier_arg {
    const char *value; /* NULL when not given */
    size_t len;
} tier_arg;

/* Room for the id of a limit or of one of its tiers, "name/tier". */
#define LIMIT_ID_BUF (2 * COMMAND_NAME_BUF + 2)

/* Finds the core limit THROTTLE asks of p: p itself, or for a tiered limit the tier that `ta`
 * chooses by the engine's rule (a string tier matches `equals`, a numeric one its inclusive
 * range). id (LIMIT_ID_BUF bytes) receives its id: the name, or "name/tier". Returns 0, or -1
 * after replying (no TIER for a tiered limit, no tier matches, or a concurrency tier THROTTLE
 * cannot charge). */
static int throttle_core(conn *c, const sluice_limit_policy *p, const tier_arg *ta, unsigned flags,
                         sluice_limit **live, char *id)
{
    size_t i;
    int64_t v = 0;

    snprintf(id, LIMIT_ID_BUF, "%s", p->name);
    if (p->ntiers == 0)
        return check_direct(c, p, *live);
    if (!ta->value) {
        resp_error(conn_out(c), "WRONGARGS",
                   "limit \"%s\" is tiered by the task field \"%s\": pass TIER v, the value that "
                   "field would hold (THROTTLE name key TIER v)",
                   p->name, p->tier_path ? p->tier_path : "?");
        return -1;
    }
    if (!p->tiers[0].equals && command_parse_int(ta->value, ta->len, &v) != 0) {
        resp_error(conn_out(c), "WRONGARGS",
                   "limit \"%s\" has numeric tiers: TIER takes an integer", p->name);
        return -1;
    }
    for (i = 0; i < p->ntiers; i++) {
        const sluice_tier *t = &p->tiers[i];

        if (t->equals ? strlen(t->equals) == ta->len && memcmp(t->equals, ta->value, ta->len) == 0
                      : t->min <= v && v <= t->max)
            break;
    }
    if (i == p->ntiers) {
        resp_error(conn_out(c), "WRONGARGS", "limit \"%s\": no tier matches \"%.*s\"", p->name,
                   (int)(ta->len > 64 ? 64 : ta->len), ta->value);
        return -1;
    }
    snprintf(id, LIMIT_ID_BUF, "%s/%s", p->name, p->tiers[i].name);
    *live = sluice_engine_limit_by_id(c->srv->engine, id);
    if (!*live)
        return check_direct(c, p, NULL);
    if (p->tiers[i].def.kind == SLUICE_CONCURRENCY && !(flags & SLUICE_PEEK)) {
        resp_error(conn_out(c), "WRONGARGS",
                   "tier \"%s\" of limit \"%s\" is a concurrency limit: THROTTLE can only PEEK "
                   "at it",
                   p->tiers[i].name, p->name);
        return -1;
    }
    return 0;
}

/* THROTTLE's reply, positional like CL.THROTTLE's (cheap to write and to parse, and the same
 * in RESP2 and RESP3): [allowed 0|1, limit, remaining, retry_after_ms, reset_after_ms,
 * denied_by (the limit's name, or nil when allowed)]. A shadow limit's would-be denial is
 * answered allowed (retry_after 0, nil), and counted as its shadow_denied. */
void reply_throttle(conn *c, const sluice_decision *d, const char *denied_by)
{
    resp_writer *w = conn_out(c);

    if (d->allowed)
        c->srv->stats.throttle_allowed++;
    else
        c->srv->stats.throttle_denied++;
    if (d->shadow_denied)
        c->srv->stats.throttle_shadow_denied++;
    resp_array(w, 6);
    resp_int(w, d->allowed);
    resp_int(w, d->limit);
    resp_int(w, d->remaining < 0 ? 0 : d->remaining);
    resp_int(w, d->allowed ? 0 : command_ns_to_ms(d->retry_after_ns));
    resp_int(w, command_ns_to_ms(d->reset_after_ns));
    if (denied_by)
        resp_bulk_str(w, denied_by);
    else
        resp_null(w);
}

/* Resolves the key and units one limit is asked for. Returns 0, 1 when the limit is skipped
 * (missing_key=skip and an empty key: it does not gate), or -1 after replying. */
static int resolve_link(conn *c, const sluice_limit_policy *p, const resp_command *cmd,
                        int64_t units, sluice_chain_link *link)
{
    const char *key = cmd->argv[2];
    size_t keylen = cmd->argvlen[2];

    if (p->key_source == SLUICE_KEY_NONE) {
        key = "";
        keylen = 0;
    } else if (keylen == 0 && p->missing_key_skip) {
        return 1;
    } else if (keylen == 0 && !p->missing_key_global) {
        resp_error(conn_out(c), "WRONGARGS", "limit \"%s\" needs a key (its missing_key is error)",
                   p->name);
        return -1;
    }
    link->key = key;
    link->keylen = keylen;
    if (units > 0)
        link->units = units;
    else
        link->units = p->units_source == SLUICE_UNITS_FIXED ? p->units_fixed : 1;
    return 0;
}

/* Under a shared store: hands the resolved links to rstore, which replies (now or later). ids[i]
 * is the id of links[i]'s limit (its name, or "name/tier"). */
static void throttle_shared(conn *c, const sluice_chain_link *links,
                            const sluice_limit_policy *const *pols, const char *const *ids,
                            size_t n, unsigned flags)
{
    /* Zeroed: GCC cannot see that every entry rstore_throttle reads is written below. */
    rstore_link stack[CHAIN_STACK] = {0}, *rl = stack;

    if (n > CHAIN_STACK) {
        rl = alloc_calloc(n, sizeof(*rl));
        if (!rl) {
            resp_error(conn_out(c), "NOMEM", "out of memory");
            return;
        }
    }
    for (size_t i = 0; i < n; i++) {
        rl[i] = (rstore_link){.def = sluice_limit_get_def(links[i].limit),
                              .limit_id = ids[i],
                              .name = pols[i]->name,
                              .key = links[i].key,
                              .keylen = links[i].keylen,
                              .units = links[i].units,
                              .shadow = sluice_limit_shadow(links[i].limit)};
    }
    rstore_throttle(c, rl, n, flags);
    if (rl != stack)
        alloc_free(rl);
}

static void throttle_type(conn *c, const resp_command *cmd, const sluice_type_policy *t,
                          int64_t units, unsigned flags, const tier_arg *ta)
{
    server *s = c->srv;
    sluice_chain_link stack_links[CHAIN_STACK], *links = stack_links;
    sluice_decision stack_dec[CHAIN_STACK], *dec = stack_dec;
    const sluice_limit_policy *stack_pol[CHAIN_STACK], **pols = stack_pol;
    char(*ids)[LIMIT_ID_BUF] = NULL, id[LIMIT_ID_BUF];
    const char **idp = NULL;
    sluice_chain_result res;
    size_t n = t->nlimits, report = 0, kept = 0;
    int rc;

    if (n == 0) {
        sluice_decision d = {.allowed = 1};
        reply_throttle(c, &d, NULL);
        return;
    }
    if (n > CHAIN_STACK) {
        links = alloc_calloc(n, sizeof(*links));
        dec = alloc_calloc(n, sizeof(*dec));
        pols = alloc_calloc(n, sizeof(*pols));
        if (!links || !dec || !pols) {
            resp_error(conn_out(c), "NOMEM", "out of memory");
            goto done;
        }
    }
    if (rstore_active(s)) {
        ids = alloc_calloc(n, sizeof(*ids));
        idp = alloc_calloc(n, sizeof(*idp));
        if (!ids || !idp) {
            resp_error(conn_out(c), "NOMEM", "out of memory");
            goto done;
        }
    }
    for (size_t i = 0; i < n; i++) {
        sluice_limit *live = NULL;
        const sluice_limit_policy *p = sluice_engine_get_limit(s->engine, t->limits[i], &live);

        if (!p) {
            resp_error(conn_out(c), "NOLIMIT",
                       "type \"%s\" names limit \"%s\", which does not "
                       "exist",
                       t->name, t->limits[i]);
            goto done;
        }
        if (throttle_core(c, p, ta, flags, &live, id) != 0 || check_throttle(c, p, flags) != 0 ||
            (rc = resolve_link(c, p, cmd, units, &links[kept])) < 0)
            goto done;
        if (rc == 1) /* skipped: the key is empty and the limit's missing_key is skip */
            continue;
        links[kept].limit = key_core(s, p, links[kept].key, links[kept].keylen, live);
        pols[kept] = p;
        if (ids) {
            memcpy(ids[kept], id, sizeof(id));
            idp[kept] = ids[kept];
        }
        kept++;
    }
    n = kept;
    if (n == 0) {
        sluice_decision d = {.allowed = 1};
        reply_throttle(c, &d, NULL);
        goto done;
    }
    if (ids) {
        throttle_shared(c, links, pols, idp, n, flags);
        goto done;
    }
    /* A client's request: new keys are weighed against the memory budget (server/memory.h). */
    rc = sluice_chain_decide(links, n, server_now(s), flags | SLUICE_BUDGET, dec, &res);
    if (rc != 0) {
        reply_engine_error(c, rc, NULL);
        goto done;
    }
    if (!res.allowed) {
        report = res.denied_by;
    } else {
        /* Report the tightest link: the one with the fewest units left, among the links that
         * said yes for real when there are any (a shadow link's would-be no has none left). */
        for (size_t i = 1; i < n; i++) {
            if (dec[i].shadow_denied != dec[report].shadow_denied
                    ? dec[report].shadow_denied
                    : dec[i].remaining < dec[report].remaining)
                report = i;
        }
    }
    dec[report].allowed = res.allowed;
    if (!res.allowed)
        dec[report].retry_after_ns = res.retry_after_ns;
    /* The reply counts as a shadow pass when any link of the chain would have said no. */
    for (size_t i = 0; i < n; i++)
        dec[report].shadow_denied |= res.allowed && dec[i].shadow_denied;
    reply_throttle(c, &dec[report], res.allowed ? NULL : pols[report]->name);
done:
    if (links != stack_links) {
        alloc_free(links);
        alloc_free(dec);
        alloc_free((void *)pols);
    }
    alloc_free(ids);
    alloc_free((void *)idp);
}

void cmd_throttle(conn *c, const resp_command *cmd)
{
    server *s = c->srv;
    char name[COMMAND_NAME_BUF];
    const sluice_limit_policy *p;
    sluice_limit *live = NULL;
    sluice_chain_link link;
    sluice_decision d;
    int64_t units = 0;
    unsigned flags = 0;
    tier_arg ta = {NULL, 0};
    char id[LIMIT_ID_BUF];
    int rc;

    for (size_t i = 3; i < cmd->argc; i++) {
        if (command_arg_is(cmd->argv[i], cmd->argvlen[i], "peek")) {
            flags |= SLUICE_PEEK;
        } else if (command_arg_is(cmd->argv[i], cmd->argvlen[i], "tier") && i + 1 < cmd->argc) {
            ta.value = cmd->argv[i + 1];
            ta.len = cmd->argvlen[i + 1];
            i++;
        } else if (command_arg_is(cmd->argv[i], cmd->argvlen[i], "units") && i + 1 < cmd->argc) {
            if (command_int_arg(c, "UNITS", cmd->argv[i + 1], cmd->argvlen[i + 1], 1,
                                SLUICE_MAX_PERMITS, &units) != 0)
                return;
            i++;
        } else {
            resp_error(conn_out(c), "WRONGARGS",
                       "syntax error: THROTTLE limit key [UNITS n] [TIER v] [PEEK]");
            return;
        }
    }
    if (name_arg(c, cmd->argv[1], cmd->argvlen[1], name) != 0 || key_arg(c, cmd->argvlen[2]) != 0)
        return;
    p = sluice_engine_get_limit(s->engine, name, &live);
    if (!p) {
        const sluice_type_policy *t = sluice_engine_get_type(s->engine, name);

        if (!t) {
            resp_error(conn_out(c), "NOLIMIT", "no limit or task type named \"%s\"", name);
            return;
        }
        throttle_type(c, cmd, t, units, flags, &ta);
        return;
    }
    if (throttle_core(c, p, &ta, flags, &live, id) != 0 || check_throttle(c, p, flags) != 0 ||
        (rc = resolve_link(c, p, cmd, units, &link)) < 0)
        return;
    if (rc == 1) { /* missing_key=skip and no key: the limit does not apply */
        sluice_decision none = {.allowed = 1};
        reply_throttle(c, &none, NULL);
        return;
    }
    /* The key's override, if any, gives the definition (on a shared store too: its state keeps
     * the limit's id, as a type's chain names it). */
    live = key_core(s, p, link.key, link.keylen, live);
    if (rstore_active(s)) {
        const char *idp = id;

        link.limit = live;
        throttle_shared(c, &link, &p, &idp, 1, flags);
        return;
    }
    rc = sluice_limit_decide(live, link.key, link.keylen, link.units, server_now(s), flags, &d);
    if (rc != 0) {
        reply_engine_error(c, rc, NULL);
        return;
    }
    reply_throttle(c, &d, d.allowed ? NULL : p->name);
}

/* ---- Leases ------------------------------------------------------------------------------ */

/* A parsed lease handle "NAME/GEN/ID". */
typedef struct lease_handle {
    char name[COMMAND_NAME_BUF];
    uint64_t gen, id;
} lease_handle;

static int parse_u64(const char *s, size_t len, uint64_t *out)
{
    int64_t v;

    if (len == 0 || s[0] == '-' || command_parse_int(s, len, &v) != 0)
        return -1;
    *out = (uint64_t)v;
    return 0;
}

static int parse_handle(const char *s, size_t len, lease_handle *h)
{
    const char *end = s + len, *p2 = NULL, *p1 = NULL;

    for (const char *q = end; q > s; q--) {
        if (q[-1] == '/') {
            if (!p2)
                p2 = q - 1;
            else {
                p1 = q - 1;
                break;
            }
        }
    }
    if (!p1 || !p2)
        return -1;
    if (command_arg_str(s, (size_t)(p1 - s), h->name, sizeof(h->name)) != 0 ||
        parse_u64(p1 + 1, (size_t)(p2 - p1 - 1), &h->gen) != 0 ||
        parse_u64(p2 + 1, (size_t)(end - p2 - 1), &h->id) != 0)
        return -1;
    return 0;
}

/* Whether handle h may name its lease on concurrency limit live: a lease of that id still
 * remembered must carry the handle's generation as its tag (else it is another holder's, such as
 * a task's or one issued after a restart); a lease that is gone is judged by the name's
 * generation now. */
static int handle_current(server *srv, const sluice_limit *live, const lease_handle *h)
{
    uint64_t tag;

    if (h->id != 0 && sluice_lease_tag(live, h->id, server_now(srv), &tag) == SLUICE_OK)
        return tag == h->gen;
    return gen_of(srv, h->name) == h->gen;
}

/* Finds the concurrency limit of handle s (len bytes); NULL when the handle is malformed, names
 * a limit that was replaced or removed, or names another holder's lease. */
static sluice_limit *handle_find(server *srv, const char *s, size_t len, lease_handle *h)
{
    sluice_limit *live = NULL;
    const sluice_limit_policy *p;

    if (parse_handle(s, len, h) == 0) {
        /* A lease on a key with an override names that key's core: "name/=key/GEN/ID". */
        char *ov = strstr(h->name, "/=");

        if (ov) {
            live = sluice_engine_limit_by_id(srv->engine, h->name);
            *ov = '\0';
            p = sluice_engine_get_limit(srv->engine, h->name, NULL);
            *ov = '/';
        } else {
            p = sluice_engine_get_limit(srv->engine, h->name, &live);
        }
        if (p && live && p->def.kind == SLUICE_CONCURRENCY && handle_current(srv, live, h))
            return live;
    }
    return NULL;
}

int cmd_lease_handle(server *s, const char *arg, size_t len, char *limit, size_t limitlen,
                     uint64_t *id, uint64_t *tag)
{
    lease_handle h;
    char *ov;

    *id = 0;
    *tag = 0;
    if (limitlen)
        limit[0] = '\0';
    if (!handle_find(s, arg, len, &h))
        return -1;
    ov = strstr(h.name, "/=");
    if (ov) /* the limit's name, before its override's key */
        *ov = '\0';
    if (strlen(h.name) >= limitlen)
        return -1;
    memcpy(limit, h.name, strlen(h.name) + 1);
    *id = h.id;
    *tag = h.gen;
    return 0;
}

/* Lease h (on limit name h->name, perhaps "name/=key") was just released: tasks parked on its
 * limit wake now, not at its expiry. */
static void lease_freed(server *s, lease_handle *h)
{
    char *ov = strstr(h->name, "/=");

    if (ov) /* the limit's name, before its override's key */
        *ov = '\0';
    sluice_engine_limit_released(s->engine, h->name, server_now(s));
    server_signal_ready(s);
    server_engine_changed(s);
}

/* durable_key_changed's undo of a granted LEASE.ACQUIRE whose commit failed: the client was
 * told -IOERR, so nobody holds the lease; released here, or it would take its units until its
 * TTL. A lease already gone (expired, or released by a guessed handle) is left alone. */
static void lease_undo(server *s, const char *handle)
{
    lease_handle h;
    sluice_limit *live = handle_find(s, handle, strlen(handle), &h);

    if (live && h.id != 0 && sluice_lease_release(live, h.id, server_now(s)) == SLUICE_OK)
        lease_freed(s, &h);
}

/* Finds the concurrency limit of a handle; replies NOLEASE and returns NULL when the handle
 * is malformed or names a limit that was replaced or removed. */
static sluice_limit *handle_limit(conn *c, const resp_command *cmd, lease_handle *h)
{
    sluice_limit *live = handle_find(c->srv, cmd->argv[1], cmd->argvlen[1], h);

    if (live)
        return live;
    resp_error(conn_out(c), "NOLEASE",
               "no such lease (it expired, was released, its limit "
               "changed, or it never existed)");
    return NULL;
}

/* Parses [TTL ms] [UNITS n] options from argv[from]. Returns 0 or -1 after replying. */
static int lease_options(conn *c, const resp_command *cmd, size_t from, int allow_units,
                         int64_t *ttl_ms, int64_t *units)
{
    for (size_t i = from; i < cmd->argc; i++) {
        if (command_arg_is(cmd->argv[i], cmd->argvlen[i], "ttl") && i + 1 < cmd->argc) {
            if (command_int_arg(c, "TTL", cmd->argv[i + 1], cmd->argvlen[i + 1], 1,
                                SLUICE_MAX_PERIOD_NS / SLUICE_NS_PER_MS, ttl_ms) != 0)
                return -1;
            i++;
        } else if (allow_units && command_arg_is(cmd->argv[i], cmd->argvlen[i], "units") &&
                   i + 1 < cmd->argc) {
            if (command_int_arg(c, "UNITS", cmd->argv[i + 1], cmd->argvlen[i + 1], 1,
                                SLUICE_MAX_PERMITS, units) != 0)
                return -1;
            i++;
        } else {
            resp_error(conn_out(c), "WRONGARGS", "syntax error: expected TTL ms%s",
                       allow_units ? " or UNITS n" : "");
            return -1;
        }
    }
    return 0;
}

void cmd_lease_acquire(conn *c, const resp_command *cmd)
{
    server *s = c->srv;
    resp_writer *w = conn_out(c);
    char name[COMMAND_NAME_BUF], hname[KEY_ID_BUF], handle[KEY_ID_BUF + 48];
    const sluice_limit_policy *p;
    sluice_limit *live = NULL;
    sluice_chain_link link;
    sluice_decision d;
    int64_t ttl_ms = 0, units = 0, ttl_ns;
    int rc;

    if (lease_options(c, cmd, 3, 1, &ttl_ms, &units) != 0 ||
        name_arg(c, cmd->argv[1], cmd->argvlen[1], name) != 0 || key_arg(c, cmd->argvlen[2]) != 0)
        return;
    p = sluice_engine_get_limit(s->engine, name, &live);
    if (!p) {
        resp_error(w, "NOLIMIT", "no limit named \"%s\"", name);
        return;
    }
    if (check_direct(c, p, live) != 0)
        return;
    if (p->def.kind != SLUICE_CONCURRENCY) {
        resp_error(w, "WRONGARGS",
                   "limit \"%s\" is a %s limit; leases are taken on concurrency "
                   "limits",
                   name, sluice_limit_kind_name(p->def.kind));
        return;
    }
    rc = resolve_link(c, p, cmd, units, &link);
    if (rc == 1) /* a lease is always on a key: skip has nothing to skip here */
        resp_error(w, "WRONGARGS", "limit \"%s\" needs a key for a lease", name);
    if (rc != 0)
        return;
    if (!override_id(p, link.key, link.keylen, hname, sizeof(hname)))
        snprintf(hname, sizeof(hname), "%s", name);
    live = key_core(s, p, link.key, link.keylen, live);
    ttl_ns = ttl_ms > 0 ? ttl_ms * SLUICE_NS_PER_MS : sluice_limit_get_def(live)->ttl_ns;
    if (rstore_active(s)) {
        /* The handle names the policy (RENEW and RELEASE find it by name); the key's override,
         * if any, only gives the definition, and only that key ever uses its state. */
        rstore_lease(c, RLIM_DECIDE, sluice_limit_get_def(live), name, link.key, link.keylen,
                     link.units, 0, ttl_ns, sluice_limit_shadow(live));
        return;
    }
    /* Kept: the store saves it, and its tag is its handle's generation (see the top). */
    rc = sluice_lease_acquire_kept(live, link.key, link.keylen, link.units, ttl_ns,
                                   gen_of(s, hname), server_now(s), &d);
    if (rc != 0) {
        reply_engine_error(c, rc, NULL);
        return;
    }
    if (!d.allowed) {
        char keybuf[COMMAND_NAME_BUF];
        sluice_denial den = {.reason = SLUICE_FAIL_RATELIMITED,
                             .limit = name,
                             .kind = "concurrency",
                             .key = keybuf,
                             .limit_value = sluice_limit_get_def(live)->limit,
                             .window_ns = 0,
                             .retry_after_ns = d.retry_after_ns};

        /* The key may hold any byte; it is encoded in the reply, and cut at 255 bytes here. */
        size_t kl = link.keylen < sizeof(keybuf) - 1 ? link.keylen : sizeof(keybuf) - 1;
        memcpy(keybuf, link.key, kl);
        keybuf[kl] = '\0';
        s->stats.throttle_denied++;
        reply_ratelimited(c, &den);
        return;
    }
    s->stats.throttle_allowed++;
    if (d.shadow_denied) /* a shadow limit's pass holds nothing: its handle's id is 0 */
        s->stats.throttle_shadow_denied++;
    snprintf(handle, sizeof(handle), "%s/%" PRIu64 "/%" PRIu64, hname, gen_of(s, hname),
             d.lease_id);
    resp_map(w, 3);
    resp_bulk_str(w, "lease");
    resp_bulk_str(w, handle);
    resp_bulk_str(w, "ttl_ms");
    resp_int(w, command_ns_to_ms(ttl_ns));
    resp_bulk_str(w, "remaining");
    resp_int(w, d.remaining);
    /* The reply promises the lease: under `durability: always` it leaves once the key's state
     * is durable, and a failed commit turns it into -IOERR and releases the lease. A shadow
     * pass (id 0) holds nothing. */
    if (d.lease_id != 0)
        durable_key_changed(c, lease_undo, handle);
}

/* LEASE.RENEW / RELEASE under a shared store: the handle names the limit, the lease id and the
 * key (rstore_parse_handle); the limit must still be a concurrency limit of this node's
 * configuration. */
static void lease_shared(conn *c, const resp_command *cmd, rlim_op op, int64_t ttl_ms)
{
    char name[COMMAND_NAME_BUF];
    size_t keymax = c->srv->opt.max_key_len, keylen = 0;
    char *key = alloc_malloc(keymax + 1);
    const sluice_limit_policy *p;
    sluice_limit *live = NULL;
    uint64_t id = 0;

    if (!key) {
        resp_error(conn_out(c), "NOMEM", "out of memory");
        return;
    }
    if (rstore_parse_handle(cmd->argv[1], cmd->argvlen[1], name, sizeof(name), &id, key, keymax,
                            &keylen) != 0 ||
        !(p = sluice_engine_get_limit(c->srv->engine, name, &live)) || !live || p->ntiers > 0 ||
        p->def.kind != SLUICE_CONCURRENCY) {
        resp_error(conn_out(c), "NOLEASE",
                   "no such lease (it expired, was released, its limit "
                   "changed, or it never existed)");
        alloc_free(key);
        return;
    }
    live = key_core(c->srv, p, key, keylen, live); /* the key's override gives its ttl */
    if (id == 0 && sluice_limit_shadow(live)) {
        /* A shadow limit's pass (rstore_lease) held nothing: answered as on one node. (Id 0
         * is also a fail-open grant's, which the store answers NOLEASE once the limit is
         * enforced.) */
        alloc_free(key);
        if (op == RLIM_LEASE_RENEW)
            resp_int(conn_out(c),
                     ttl_ms > 0 ? ttl_ms : command_ns_to_ms(sluice_limit_get_def(live)->ttl_ns));
        else
            resp_simple(conn_out(c), "OK");
        return;
    }
    rstore_lease(c, op, sluice_limit_get_def(live), name, key, keylen, 1, id,
                 ttl_ms > 0 ? ttl_ms * SLUICE_NS_PER_MS : 0, 0);
    alloc_free(key);
}

void cmd_lease_renew(conn *c, const resp_command *cmd)
{
    lease_handle h;
    sluice_limit *live;
    int64_t ttl_ms = 0, ttl_ns, now, expires = 0;
    int rc;

    if (lease_options(c, cmd, 2, 0, &ttl_ms, NULL) != 0)
        return;
    if (rstore_active(c->srv)) {
        lease_shared(c, cmd, RLIM_LEASE_RENEW, ttl_ms);
        return;
    }
    live = handle_limit(c, cmd, &h);
    if (!live)
        return;
    ttl_ns = ttl_ms > 0 ? ttl_ms * SLUICE_NS_PER_MS : sluice_limit_get_def(live)->ttl_ns;
    now = server_now(c->srv);
    if (h.id == 0) { /* a shadow limit's pass: nothing is held, so there is nothing to lose */
        resp_int(conn_out(c), command_ns_to_ms(ttl_ns));
        return;
    }
    rc = sluice_lease_renew(live, h.id, ttl_ns, now, &expires);
    if (rc == SLUICE_ESTALE)
        resp_error(conn_out(c), "NOLEASE", "lease is gone (it expired or was released)");
    else if (rc != 0)
        reply_engine_error(c, rc, NULL);
    else {
        resp_int(conn_out(c), command_ns_to_ms(expires - now));
        /* The new expiry is promised: a crash must not bring back the old one, which could end
         * the lease (and admit another holder) while its holder still runs. A failed commit
         * answers -IOERR and undoes nothing: the lease stays its holder's, renewed in memory. */
        durable_key_changed(c, NULL, NULL);
    }
}

void cmd_lease_release(conn *c, const resp_command *cmd)
{
    lease_handle h;
    sluice_limit *live;
    int rc;

    if (rstore_active(c->srv)) {
        lease_shared(c, cmd, RLIM_LEASE_RELEASE, 0);
        return;
    }
    live = handle_limit(c, cmd, &h);
    if (!live)
        return;
    if (h.id == 0) { /* a shadow limit's pass held nothing */
        resp_simple(conn_out(c), "OK");
        return;
    }
    rc = sluice_lease_release(live, h.id, server_now(c->srv));
    if (rc == SLUICE_ESTALE)
        resp_error(conn_out(c), "NOLEASE", "lease is gone (it expired, or never existed)");
    else if (rc != 0)
        reply_engine_error(c, rc, NULL);
    else {
        /* Not held for a commit: a release lost in a crash brings the lease back until its TTL,
         * which admits fewer, never more (docs/durability.md). */
        lease_freed(c->srv, &h);
        resp_simple(conn_out(c), "OK");
    }
}

/* ---- LIMIT.* ----------------------------------------------------------------------------- */

/* The reply of a LIMIT.* change now in force on this node: at once (`+OK`, or `:1` when
 * reply_one), or, on a shared store, once the store holds `spec` for `name` (rdefs.h). */
static void limit_changed_reply(conn *c, const char *name, const char *spec, int reply_one)
{
    if (rdefs_active(c->srv))
        rdefs_write(c, name, spec, reply_one);
    else if (reply_one)
        resp_int(conn_out(c), 1);
    else
        resp_simple(conn_out(c), "OK");
}

/* Switches limit `name` to `mode` in place (LIMIT.SET name mode=shadow, or a spec that differs
 * from the live one in its mode alone) and persists `spec`, the text given. A bare "mode=..." of
 * an untiered limit is persisted as the limit's whole spec, so that it never hides a runtime
 * definition stored before it; a tiered limit (only the file declares those) stores the bare
 * text, applied over the file's version at start. Replies. */
static void limit_set_mode(conn *c, const char *name, const char *spec, sluice_limit_mode mode)
{
    server *s = c->srv;
    char text[SLUICE_POLICY_SPEC_MAX_LEN];
    const sluice_limit_policy *p = sluice_engine_get_limit(s->engine, name, NULL);
    int rc;

    if (!p) {
        resp_error(conn_out(c), "NOLIMIT",
                   "no limit named \"%s\" (mode= alone switches an existing limit; give its "
                   "spec to create one)",
                   name);
        return;
    }
    rc = p->mode == mode ? 0 : sluice_engine_set_limit_mode(s->engine, name, mode, server_now(s));
    if (rc != 0) {
        reply_engine_error(c, rc, NULL);
        return;
    }
    if (p->ntiers == 0 && sluice_spec_format_policy(p, text, sizeof(text)) == 0)
        spec = text;
    durable_limit_set(s, name, spec);
    server_engine_changed(s);
    log_info("limit \"%s\" in %s mode by client %" PRIu64, name, sluice_limit_mode_name(mode),
             c->id);
    limit_changed_reply(c, name, spec, 0);
}

void cmd_limit_set(conn *c, const resp_command *cmd)
{
    server *s = c->srv;
    char name[COMMAND_NAME_BUF], spec[SPEC_BUF], msg[512];
    const sluice_limit_policy *old;
    sluice_limit_policy p;
    sluice_limit_mode mode;
    int rc;

    if (command_arg_str(cmd->argv[1], cmd->argvlen[1], name, sizeof(name)) != 0) {
        resp_error(conn_out(c), "WRONGARGS",
                   "a limit name is 1 to 128 bytes of A-Z a-z 0-9 _ . "
                   ": -");
        return;
    }
    if (command_arg_str(cmd->argv[2], cmd->argvlen[2], spec, sizeof(spec)) != 0) {
        resp_error(conn_out(c), "WRONGARGS",
                   "spec too long (at most %d bytes) or holds a NUL "
                   "byte",
                   SPEC_BUF - 1);
        return;
    }
    if (sluice_spec_parse_mode(spec, &mode)) {
        limit_set_mode(c, name, spec, mode);
        return;
    }
    rc = sluice_spec_parse_policy(spec, &p, msg, sizeof(msg));
    if (rc != 0) {
        reply_engine_error(c, rc, msg);
        return;
    }
    p.name = alloc_memdup0(name, strlen(name));
    if (!p.name) {
        sluice_limit_policy_clear(&p);
        resp_error(conn_out(c), "NOMEM", "out of memory");
        return;
    }
    if (rdefs_active(s) && server_limit_unsupported(&p, server_store_postgres(s))) {
        /* The store would enforce what this node would not: refused, as in a file. */
        resp_error(conn_out(c), "ERR", "%s", server_limit_unsupported(&p, 1));
        sluice_limit_policy_clear(&p);
        return;
    }
    old = sluice_engine_get_limit(s->engine, name, NULL);
    if (old && server_policy_eq(old, &p)) {
        /* The same limit again: keep its state (LIMIT.RESET clears it). */
        sluice_limit_policy_clear(&p);
        durable_limit_set(s, name, spec);
        limit_changed_reply(c, name, spec, 0);
        return;
    }
    if (old && server_policy_mode_only(old, &p)) {
        /* The same limit in the other mode: switched live, its budget and leases kept. */
        mode = p.mode;
        sluice_limit_policy_clear(&p);
        limit_set_mode(c, name, spec, mode);
        return;
    }
    rc = sluice_engine_set_limit(s->engine, &p, server_now(s), msg, sizeof(msg));
    sluice_limit_policy_clear(&p);
    if (rc != 0) {
        reply_engine_error(c, rc, msg);
        return;
    }
    cmd_limit_bump(s, name);
    durable_limit_set(s, name, spec); /* re-applied at start, over the file's version */
    server_engine_changed(s);
    log_info("limit \"%s\" %s by client %" PRIu64 ": %s", name, old ? "replaced" : "added", c->id,
             spec);
    limit_changed_reply(c, name, spec, 0);
}

/* LIMIT.KEY name key spec (spec NULL: LIMIT.KEYDEL name key): sets or removes key's override,
 * then stores the limit's new one-line spec, re-applied at start like LIMIT.SET's. */
static void limit_key(conn *c, const resp_command *cmd, int del)
{
    server *s = c->srv;
    char name[COMMAND_NAME_BUF], spec[SLUICE_SPEC_MAX_LEN], msg[512], id[KEY_ID_BUF];
    char text[SLUICE_POLICY_SPEC_MAX_LEN];
    const sluice_limit_policy *p;
    sluice_limit_def def;
    int rc;

    if (name_arg(c, cmd->argv[1], cmd->argvlen[1], name) != 0)
        return;
    p = sluice_engine_get_limit(s->engine, name, NULL);
    if (!p) {
        resp_error(conn_out(c), "NOLIMIT", "no limit named \"%s\"", name);
        return;
    }
    if (!del) {
        if (command_arg_str(cmd->argv[3], cmd->argvlen[3], spec, sizeof(spec)) != 0) {
            resp_error(conn_out(c), "WRONGARGS",
                       "spec too long (at most %d bytes) or holds a NUL byte",
                       SLUICE_SPEC_MAX_LEN - 1);
            return;
        }
        rc = sluice_spec_parse_limit(spec, &def, msg, sizeof(msg));
        if (rc != 0) {
            reply_engine_error(c, rc, msg);
            return;
        }
        if (def.decrease_den > 0 && rdefs_active(s) && server_store_postgres(s)) {
            resp_error(conn_out(c), "ERR", "%s",
                       "adaptive rate limits are not available with the PostgreSQL store yet "
                       "(its functions know no AIMD rate; the Redis store has them)");
            return;
        }
    }
    rc = sluice_engine_set_key_override(s->engine, name, cmd->argv[2], cmd->argvlen[2],
                                        del ? NULL : &def, server_now(s), msg, sizeof(msg));
    if (rc == SLUICE_ENOTFOUND && del) {
        resp_int(conn_out(c), 0);
        return;
    }
    if (rc != 0) {
        reply_engine_error(c, rc, msg);
        return;
    }
    /* Old handles of that key's leases name a core that is gone: refuse them. */
    snprintf(id, sizeof(id), "%s/=%.*s", name, (int)cmd->argvlen[2], cmd->argv[2]);
    cmd_limit_bump(s, id);
    p = sluice_engine_get_limit(s->engine, name, NULL);
    text[0] = '\0';
    if (p && sluice_spec_format_policy(p, text, sizeof(text)) == 0)
        durable_limit_set(s, name, text); /* re-applied at start, over the file's version */
    server_engine_changed(s);
    server_signal_ready(s);
    log_info("limit \"%s\": key \"%s\" override %s by client %" PRIu64, name, id + strlen(name) + 2,
             del ? "removed" : "set", c->id);
    if (rdefs_active(s) && text[0] == '\0') {
        /* "" would share a removal: never that for a spec that did not fit. */
        resp_error(conn_out(c), "ERR",
                   "limit \"%s\" with this override has no one-line spec of at most %d bytes: "
                   "the change is in force on this node only",
                   name, SLUICE_POLICY_SPEC_MAX_LEN - 1);
        return;
    }
    limit_changed_reply(c, name, text, del);
}

void cmd_limit_key(conn *c, const resp_command *cmd)
{
    limit_key(c, cmd, 0);
}

void cmd_limit_keydel(conn *c, const resp_command *cmd)
{
    limit_key(c, cmd, 1);
}

/* Writes a limit's one-line spec, or a description of its tiers. */
static void policy_text(const sluice_limit_policy *p, char *buf, size_t len)
{
    if (p->ntiers > 0)
        snprintf(buf, len, "tiered by %s (%zu tiers)%s", p->tier_path ? p->tier_path : "?",
                 p->ntiers, p->mode == SLUICE_MODE_SHADOW ? ", mode=shadow" : "");
    else if (sluice_spec_format_policy(p, buf, len) != 0)
        snprintf(buf, len, "?");
}

/* LIMIT.RATE name key [TIER v]: a rate limit's key, its rate now ("20/1s"), the configured one,
 * and why it is that (an adaptive rate lowered by its upstream's 429s). */
void cmd_limit_rate(conn *c, const resp_command *cmd)
{
    resp_writer *w = conn_out(c);
    char name[COMMAND_NAME_BUF];
    const sluice_limit_policy *p;
    const sluice_limit_def *def;
    sluice_limit *core = NULL;
    tier_arg ta = {NULL, 0};
    char id[LIMIT_ID_BUF];
    cmd_key_rate kr;
    const char *key = cmd->argv[2];
    size_t keylen = cmd->argvlen[2];

    if (cmd->argc == 5 && command_arg_is(cmd->argv[3], cmd->argvlen[3], "tier")) {
        ta.value = cmd->argv[4];
        ta.len = cmd->argvlen[4];
    } else if (cmd->argc != 3) {
        resp_error(w, "WRONGARGS", "syntax error: LIMIT.RATE limit key [TIER v]");
        return;
    }
    if (name_arg(c, cmd->argv[1], cmd->argvlen[1], name) != 0 || key_arg(c, keylen) != 0)
        return;
    p = sluice_engine_get_limit(c->srv->engine, name, &core);
    if (!p) {
        resp_error(w, "NOLIMIT", "no limit named \"%s\"", name);
        return;
    }
    if (throttle_core(c, p, &ta, SLUICE_PEEK, &core, id) != 0)
        return;
    core = key_core(c->srv, p, key, keylen, core);
    def = sluice_limit_get_def(core);
    if (def->kind == SLUICE_RATE && def->decrease_den > 0 && rstore_active(c->srv)) {
        /* The key's rate lives in the store, under the id THROTTLE charges it by. */
        rstore_rate(c, def, id, key, keylen);
        return;
    }
    if (cmd_limit_key_rate(core, key, keylen, server_now(c->srv), &kr) != SLUICE_OK) {
        resp_error(w, "WRONGARGS", "limit \"%s\" is a %s limit: only a rate limit has a rate",
                   p->name, sluice_limit_kind_name(def->kind));
        return;
    }
    cmd_limit_rate_reply(c, key, keylen, &kr);
}

void cmd_limit_rate_reply(conn *c, const char *key, size_t keylen, const cmd_key_rate *kr)
{
    resp_writer *w = conn_out(c);
    char per[SLUICE_SPEC_DURATION_MAX_LEN];

    sluice_spec_format_duration(kr->period_ns, per, sizeof(per));
    resp_map(w, 4);
    resp_bulk_str(w, "key");
    resp_bulk(w, key, keylen);
    resp_bulk_str(w, "rate");
    resp_bulk_fmt(w, "%" PRId64 "/%s", kr->permits, per);
    resp_bulk_str(w, "configured");
    resp_bulk_fmt(w, "%" PRId64 "/%s", kr->configured, per);
    resp_bulk_str(w, "why");
    resp_bulk_str(w, kr->why);
}

void cmd_limit_get(conn *c, const resp_command *cmd)
{
    resp_writer *w = conn_out(c);
    char name[COMMAND_NAME_BUF], text[SLUICE_POLICY_SPEC_MAX_LEN];
    const sluice_limit_policy *p;
    sluice_limit *live = NULL;
    sluice_limit_stats st;

    if (name_arg(c, cmd->argv[1], cmd->argvlen[1], name) != 0)
        return;
    p = sluice_engine_get_limit(c->srv->engine, name, &live);
    if (!p) {
        resp_error(w, "NOLIMIT", "no limit named \"%s\"", name);
        return;
    }
    memset(&st, 0, sizeof(st));
    if (live)
        sluice_limit_get_stats(live, &st);
    for (size_t i = 0; i < p->noverrides; i++) {
        /* Keys with their own limit are tracked by their own core: count them too. */
        sluice_limit *o =
            key_core(c->srv, p, p->overrides[i].key, strlen(p->overrides[i].key), NULL);
        sluice_limit_stats os;

        if (o) {
            sluice_limit_get_stats(o, &os);
            st.keys += os.keys;
        }
    }
    policy_text(p, text, sizeof(text));
    resp_map(w, 6);
    resp_bulk_str(w, "name");
    resp_bulk_str(w, p->name);
    resp_bulk_str(w, "spec");
    resp_bulk_str(w, text);
    resp_bulk_str(w, "kind");
    resp_bulk_str(w, sluice_limit_kind_name(p->ntiers ? p->tiers[0].def.kind : p->def.kind));
    resp_bulk_str(w, "tiers");
    resp_array(w, p->ntiers);
    for (size_t i = 0; i < p->ntiers; i++) {
        char spec[SLUICE_SPEC_MAX_LEN];

        if (sluice_spec_format_limit(&p->tiers[i].def, spec, sizeof(spec)) != 0)
            snprintf(spec, sizeof(spec), "?");
        resp_bulk_fmt(w, "%s: %s", p->tiers[i].name, spec);
    }
    resp_bulk_str(w, "keys");
    resp_int(w, (int64_t)st.keys);
    resp_bulk_str(w, "source");
    if (p->line > 0)
        resp_bulk_fmt(w, "config line %d", p->line);
    else
        resp_bulk_str(w, "runtime");
}

static void list_one(const sluice_limit_policy *p, void *arg)
{
    resp_writer *w = arg;
    char text[SLUICE_POLICY_SPEC_MAX_LEN];

    policy_text(p, text, sizeof(text));
    resp_bulk_str(w, p->name);
    resp_bulk_str(w, text);
}

void cmd_limit_list(conn *c, const resp_command *cmd)
{
    sluice_engine *e = c->srv->engine;
    resp_writer *w = conn_out(c);

    (void)cmd;
    resp_map(w, sluice_engine_list_limits(e, NULL, NULL));
    sluice_engine_list_limits(e, list_one, w);
}

void cmd_limit_del(conn *c, const resp_command *cmd)
{
    server *s = c->srv;
    char name[COMMAND_NAME_BUF];
    int rc;

    if (name_arg(c, cmd->argv[1], cmd->argvlen[1], name) != 0)
        return;
    rc = sluice_engine_del_limit(s->engine, name, server_now(s));
    if (rc == SLUICE_ENOTFOUND) {
        resp_error(conn_out(c), "NOLIMIT", "no limit named \"%s\"", name);
    } else if (rc == SLUICE_ESTATE) {
        resp_error(conn_out(c), "INUSE",
                   "limit \"%s\" is in a task type's chain; change the "
                   "type first",
                   name);
    } else if (rc != 0) {
        reply_engine_error(c, rc, NULL);
    } else {
        cmd_limit_bump(s, name);
        durable_limit_del(s, name);
        server_engine_changed(s);
        log_info("limit \"%s\" removed by client %" PRIu64, name, c->id);
        limit_changed_reply(c, name, "", 1); /* "": a removal, on every node */
    }
}

/* LIMIT.SPEND on a shared store: the single node's argument errors, then the key's state is read
 * from the store (by the limit id and definition THROTTLE charges it under). */
static void spend_shared(conn *c, const sluice_limit_policy *p, const char *tier, const char *key,
                         size_t keylen)
{
    char id[LIMIT_ID_BUF];
    sluice_limit *core;

    if (p->ntiers > 0 && !tier) {
        resp_error(conn_out(c), "WRONGARGS", "limit \"%s\" is tiered: give TIER name", p->name);
        return;
    }
    core = p->ntiers > 0 || !tier ? cmd_limit_key_core(c->srv, p, tier, key, keylen) : NULL;
    if (!core) {
        resp_error(conn_out(c), "WRONGARGS", "limit \"%s\" has no tier \"%s\"", p->name,
                   tier ? tier : "");
        return;
    }
    if (p->ntiers > 0)
        snprintf(id, sizeof id, "%s/%s", p->name, tier);
    else
        snprintf(id, sizeof id, "%s", p->name);
    rdefs_spend(c, id, sluice_limit_get_def(core), key, keylen);
}

/* LIMIT.SPEND name key [TIER tier]: one quota key's spending in its current period (seed 004's
 * "a user's daily spend"). A read: it changes nothing, not even the limit's clock. */
void cmd_limit_spend(conn *c, const resp_command *cmd)
{
    server *s = c->srv;
    resp_writer *w = conn_out(c);
    char name[COMMAND_NAME_BUF], tier[COMMAND_NAME_BUF];
    const sluice_limit_policy *p;
    sluice_quota_usage u;
    int has_tier = 0, rc;

    if (cmd->argc != 3 && cmd->argc != 5) {
        reply_arity(c, "limit.spend");
        return;
    }
    if (name_arg(c, cmd->argv[1], cmd->argvlen[1], name) != 0 || key_arg(c, cmd->argvlen[2]) != 0)
        return;
    if (cmd->argc == 5) {
        if (!command_arg_is(cmd->argv[3], cmd->argvlen[3], "tier")) {
            resp_error(w, "WRONGARGS", "%s", "LIMIT.SPEND name key [TIER tier]");
            return;
        }
        if (name_arg(c, cmd->argv[4], cmd->argvlen[4], tier) != 0)
            return;
        has_tier = 1;
    }
    p = sluice_engine_get_limit(s->engine, name, NULL);
    if (!p) {
        resp_error(w, "NOLIMIT", "no limit named \"%s\"", name);
        return;
    }
    if ((p->ntiers ? p->tiers[0].def.kind : p->def.kind) != SLUICE_QUOTA) {
        resp_error(w, "WRONGARGS", "limit \"%s\" is a %s limit; LIMIT.SPEND reads quotas", name,
                   sluice_limit_kind_name(p->ntiers ? p->tiers[0].def.kind : p->def.kind));
        return;
    }
    if (rdefs_active(s)) {
        spend_shared(c, p, has_tier ? tier : NULL, cmd->argv[2], cmd->argvlen[2]);
        return;
    }
    rc = sluice_engine_quota_usage(s->engine, name, has_tier ? tier : NULL, cmd->argv[2],
                                   cmd->argvlen[2], server_now(s), &u);
    if (rc == SLUICE_EINVAL) {
        resp_error(w, "WRONGARGS", "limit \"%s\" is tiered: give TIER name", name);
        return;
    }
    if (rc == SLUICE_ENOTFOUND) {
        resp_error(w, "WRONGARGS", "limit \"%s\" has no tier \"%s\"", name, has_tier ? tier : "");
        return;
    }
    if (rc != 0) {
        reply_engine_error(c, rc, NULL);
        return;
    }
    resp_map(w, 5);
    resp_bulk_str(w, "spent");
    resp_int(w, u.spent);
    resp_bulk_str(w, "budget");
    resp_int(w, u.budget);
    resp_bulk_str(w, "remaining");
    resp_int(w, u.remaining);
    resp_bulk_str(w, "period_start_ms");
    resp_int(w, command_time_ms(u.period_start_ns));
    resp_bulk_str(w, "resets_at_ms");
    resp_int(w, command_time_ms(u.resets_at_ns));
}

/* LIMIT.RESET name on a shared store: every limit id whose states hold p's keys (its own, its
 * tiers', its overrides'), as an id list (sdefs_ids_put), to the store. */
static void reset_all_shared(conn *c, const sluice_limit_policy *p)
{
    packed_str ids = {0};
    int rc = sdefs_ids_put(&ids, p->name, "", "", 0);

    for (size_t i = 0; i < p->ntiers && rc == 0; i++)
        rc = sdefs_ids_put(&ids, p->name, "/", p->tiers[i].name, strlen(p->tiers[i].name));
    for (size_t i = 0; i < p->noverrides && rc == 0; i++)
        rc = sdefs_ids_put(&ids, p->name, "/=", p->overrides[i].key, strlen(p->overrides[i].key));
    if (rc != 0) {
        alloc_free(ids.p);
        resp_error(conn_out(c), "NOMEM", "out of memory");
        return;
    }
    log_info("limit \"%s\" reset by client %" PRIu64 " (every node)", p->name, c->id);
    rdefs_reset_all(c, p->name, ids.p, ids.len);
    alloc_free(ids.p);
}

void cmd_limit_reset(conn *c, const resp_command *cmd)
{
    server *s = c->srv;
    char name[COMMAND_NAME_BUF], msg[256];
    const sluice_limit_policy *p;
    sluice_limit *live = NULL;
    int rc;

    if (cmd->argc > 3) {
        reply_arity(c, "limit.reset");
        return;
    }
    if (cmd->argc == 2 && rstore_active(s) && !rdefs_active(s)) {
        rstore_reply_unavailable(c, "limit.reset");
        return;
    }
    if (name_arg(c, cmd->argv[1], cmd->argvlen[1], name) != 0)
        return;
    p = sluice_engine_get_limit(s->engine, name, &live);
    if (!p) {
        resp_error(conn_out(c), "NOLIMIT", "no limit named \"%s\"", name);
        return;
    }
    if (cmd->argc == 3) {
        if (check_direct(c, p, live) != 0)
            return;
        if (rdefs_active(s)) {
            char id[KEY_ID_BUF];
            sluice_limit *own = key_core(s, p, cmd->argv[2], cmd->argvlen[2], live);
            int has = override_id(p, cmd->argv[2], cmd->argvlen[2], id, sizeof id);

            rdefs_reset(c, name, sluice_limit_get_def(live), has ? id : NULL,
                        has ? sluice_limit_get_def(own) : NULL, cmd->argv[2], cmd->argvlen[2]);
            return;
        }
        live = key_core(s, p, cmd->argv[2], cmd->argvlen[2], live);
        rc = sluice_limit_reset(live, cmd->argv[2], cmd->argvlen[2]);
        resp_int(conn_out(c), rc == 0);
        return;
    }
    if (rdefs_active(s)) {
        reset_all_shared(c, p);
        return;
    }
    if (p->ntiers == 0 && live) {
        sluice_limit_reset(live, NULL, 0);
        /* Every key: those with their own limit (LIMIT.KEY) too, whose state is their core's. */
        for (size_t i = 0; i < p->noverrides; i++) {
            char id[KEY_ID_BUF];
            sluice_limit *o;

            snprintf(id, sizeof id, "%s/=%s", p->name, p->overrides[i].key);
            o = sluice_engine_limit_by_id(s->engine, id);
            if (o)
                sluice_limit_reset(o, NULL, 0);
        }
    } else {
        /* Every tier restarts when the policy is installed again. */
        sluice_limit_policy copy;

        rc = sluice_limit_policy_copy(&copy, p);
        if (rc == 0) {
            rc = sluice_engine_set_limit(s->engine, &copy, server_now(s), msg, sizeof(msg));
            sluice_limit_policy_clear(&copy);
        }
        if (rc != 0) {
            reply_engine_error(c, rc, NULL);
            return;
        }
        cmd_limit_bump(s, name);
    }
    log_info("limit \"%s\" reset by client %" PRIu64, name, c->id);
    resp_simple(conn_out(c), "OK");
}

/* Longest LIMIT.BACKOFF: 30 days, as TASK.FAIL's RETRY_AFTER. */
#define MAX_BACKOFF_MS (30LL * 24 * 3600 * 1000)

void cmd_limit_backoff(conn *c, const resp_command *cmd)
{
    server *s = c->srv;
    char name[COMMAND_NAME_BUF];
    const sluice_limit_policy *p;
    sluice_limit *live = NULL;
    tier_arg ta = {NULL, 0};
    char id[LIMIT_ID_BUF];
    int64_t ms = 0, slot = 0, now = server_now(s);
    int rc;

    if (cmd->argc == 6 && command_arg_is(cmd->argv[4], cmd->argvlen[4], "tier")) {
        ta.value = cmd->argv[5];
        ta.len = cmd->argvlen[5];
    } else if (cmd->argc != 4) {
        resp_error(conn_out(c), "WRONGARGS", "syntax error: LIMIT.BACKOFF limit key ms [TIER v]");
        return;
    }
    if (name_arg(c, cmd->argv[1], cmd->argvlen[1], name) != 0 || key_arg(c, cmd->argvlen[2]) != 0 ||
        command_int_arg(c, "ms", cmd->argv[3], cmd->argvlen[3], 0, MAX_BACKOFF_MS, &ms) != 0)
        return;
    p = sluice_engine_get_limit(s->engine, name, &live);
    if (!p) {
        resp_error(conn_out(c), "NOLIMIT", "no limit named \"%s\"", name);
        return;
    }
    /* As a peek: a concurrency tier is refused below with the other kinds, not as THROTTLE. */
    if (throttle_core(c, p, &ta, SLUICE_PEEK, &live, id) != 0)
        return;
    live = key_core(s, p, cmd->argv[2], cmd->argvlen[2], live);
    if (sluice_limit_get_def(live)->kind != SLUICE_RATE) {
        resp_error(conn_out(c), "WRONGARGS",
                   "limit \"%s\" is a %s limit: only a rate limit's key can be held back to a "
                   "time (a window, sliding window, quota or concurrency limit has no slot to "
                   "move)",
                   p->name, sluice_limit_kind_name(sluice_limit_get_def(live)->kind));
        return;
    }
    if (rstore_active(s)) {
        /* The key's state is the store's: held back there, in its clock, for every node. */
        rstore_backoff(c, sluice_limit_get_def(live), id, cmd->argv[2], cmd->argvlen[2],
                       ms * SLUICE_NS_PER_MS);
        return;
    }
    rc = sluice_limit_backoff(live, cmd->argv[2], cmd->argvlen[2], ms * SLUICE_NS_PER_MS, now,
                              &slot);
    if (rc != 0) {
        reply_engine_error(c, rc, NULL);
        return;
    }
    /* How long the key now waits for one unit: the backoff, or longer when it already waited. */
    resp_int(conn_out(c), command_ns_to_ms(slot - now));
}
