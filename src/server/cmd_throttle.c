/* SPDX-License-Identifier: MIT */
/*
 * CL.THROTTLE: redis-cell's command, reply for reply, so its users can point their code at
 * sluice unchanged.
 *
 *   CL.THROTTLE key max_burst count period [quantity]
 *   -> [limited 0|1, limit, remaining, retry_after s (-1 when allowed), reset_after s]
 *
 * redis-cell is GCRA with emission interval T = period / count and a tolerance of
 * (max_burst + 1) * T, which is sluice's rate limit with permits = count, period = period s and
 * burst = max_burst + 1; the decision is sluice's, the reply mapping (cell_map_decision) is
 * redis-cell's: seconds are truncated and then bumped by one when a millisecond part remains,
 * and quantity 0 peeks.
 *
 * One sluice limit is kept per (max_burst, count, period) triple, created on first use: a key
 * used with two different triples has two independent buckets (redis-cell would share one
 * stored TAT between them). The cache holds at most max_adhoc triples; a new triple when it is
 * full evicts one whose limit tracks no key, or is refused with BUSY.
 *
 * The triples' limits are registered with the engine as foreign limits
 * (sluice_engine_set_foreign_limits) under the id "!cell:MAX_BURST:COUNT:PERIOD", so their key
 * states travel through the change feed to the store like a named limit's, and a restart does
 * not hand a key that spent its burst a fresh one: at recovery the id recreates its triple and
 * the key state is imported into it. A triple created while the feed runs tracks its key changes
 * from its first decision.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/hash.h"
#include "base/ptab.h"
#include "server/commands.h"
#include "server/log.h"
#include "server/rstore.h"
#include "server/memory.h"
#include "sluice/error.h"

typedef struct cell_entry {
    int64_t max_burst, count, period; /* the triple */
    int64_t t_ns;                     /* emission interval, truncated to whole ns */
    sluice_limit *lim;
} cell_entry;

typedef struct cell_state {
    cell_entry *entries; /* n used of max entries; never moved, so the index holds pointers */
    size_t n, max;
    ptab index; /* every used entry, filed under triple_key_hash; reserved for max entries */
} cell_state;

/* The lookup key of a triple. */
typedef struct triple_key {
    int64_t v[3]; /* max_burst, count, period */
} triple_key;

static uint64_t triple_key_hash(const triple_key *k)
{
    return hash_words3((uint64_t)k->v[0], (uint64_t)k->v[1], (uint64_t)k->v[2]);
}

static uint64_t entry_hash(const cell_entry *e)
{
    triple_key k = {{e->max_burst, e->count, e->period}};

    return triple_key_hash(&k);
}

static int entry_eq(const void *p, const void *key)
{
    const cell_entry *e = p;
    const triple_key *k = key;

    return e->max_burst == k->v[0] && e->count == k->v[1] && e->period == k->v[2];
}

static int cell_visit(void *arg, int (*fn)(const char *id, sluice_limit *lim, void *fnarg),
                      void *fnarg);
static sluice_limit *cell_find_id(void *arg, const char *id);

int cmd_cell_init(server *s)
{
    cell_state *cs = alloc_calloc(1, sizeof(*cs));

    if (!cs)
        return SLUICE_ENOMEM;
    cs->max = s->opt.max_adhoc ? s->opt.max_adhoc : 1;
    ptab_init(&cs->index);
    s->cell_state = cs;
    cs->entries = alloc_calloc(cs->max, sizeof(*cs->entries));
    /* Reserved once for every entry there can be, so filing one never fails. */
    if (!cs->entries || ptab_reserve(&cs->index, cs->max) != SLUICE_OK) {
        cmd_cell_free(s);
        return SLUICE_ENOMEM;
    }
    sluice_foreign_limits fl = {cell_visit, cell_find_id, s};
    sluice_engine_set_foreign_limits(s->engine, &fl);
    return 0;
}

void cmd_cell_free(server *s)
{
    cell_state *cs = s->cell_state;

    if (!cs)
        return;
    sluice_engine_set_foreign_limits(s->engine, NULL);
    for (size_t i = 0; i < cs->n; i++)
        sluice_limit_free(cs->entries[i].lim);
    alloc_free(cs->entries);
    ptab_free(&cs->index);
    alloc_free(cs);
    s->cell_state = NULL;
}

size_t cmd_cell_count(const server *s)
{
    const cell_state *cs = s->cell_state;

    return cs ? cs->n : 0;
}

void cmd_cell_sweep(server *s, int64_t now_ns, size_t budget)
{
    cell_state *cs = s->cell_state;

    for (size_t i = 0; cs && i < cs->n; i++)
        sluice_limit_sweep(cs->entries[i].lim, now_ns, budget);
}

static cell_entry *cell_find(cell_state *cs, int64_t max_burst, int64_t count, int64_t period)
{
    triple_key k = {{max_burst, count, period}};

    return ptab_find(&cs->index, triple_key_hash(&k), &k, entry_eq);
}

/* Drops one entry whose limit tracks no key, to make room. Returns 0, or -1 when all are in
 * use. Rare (only past max_adhoc triples). */
static int cell_evict(cell_state *cs)
{
    for (size_t i = 0; i < cs->n; i++) {
        sluice_limit_stats st;

        sluice_limit_get_stats(cs->entries[i].lim, &st);
        if (st.keys > 0)
            continue;
        sluice_limit_free(cs->entries[i].lim);
        (void)ptab_remove(&cs->index, entry_hash(&cs->entries[i]), &cs->entries[i]);
        cs->n--;
        if (i != cs->n) {
            /* The last entry moves into the hole; refile it at its new address (removing one
             * made room, so the insert cannot fail). */
            (void)ptab_remove(&cs->index, entry_hash(&cs->entries[cs->n]), &cs->entries[cs->n]);
            cs->entries[i] = cs->entries[cs->n];
            (void)ptab_insert(&cs->index, entry_hash(&cs->entries[i]), &cs->entries[i]);
        }
        return 0;
    }
    return -1;
}

int cell_def(const server *s, int64_t max_burst, int64_t count, int64_t period,
             sluice_limit_def *def, char *msg, size_t msglen)
{
    if (max_burst >= SLUICE_MAX_PERMITS || period > SLUICE_MAX_PERIOD_NS / SLUICE_NS_PER_SEC) {
        snprintf(msg, msglen,
                 "max_burst must be below %" PRId64 " and period at most %" PRId64 " seconds",
                 SLUICE_MAX_PERMITS, SLUICE_MAX_PERIOD_NS / SLUICE_NS_PER_SEC);
        return SLUICE_EINVAL;
    }
    sluice_limit_def_init(def, SLUICE_RATE);
    def->limit = count;
    def->period_ns = period * SLUICE_NS_PER_SEC;
    def->burst = max_burst + 1;
    if (def->max_key_len < s->opt.max_key_len)
        def->max_key_len = s->opt.max_key_len;
    if (sluice_limit_def_validate(def, msg, msglen) != 0)
        return SLUICE_EINVAL;
    return 0;
}

/* Creates the limit of a triple not cached yet. Returns it, or NULL with *rc and msg set
 * (SLUICE_EINVAL: parameters out of range; SLUICE_EBUSY: every cached triple is in use). */
static cell_entry *cell_create(server *s, int64_t max_burst, int64_t count, int64_t period, int *rc,
                               char *msg, size_t msglen)
{
    cell_state *cs = s->cell_state;
    sluice_limit_def def;
    cell_entry *e;

    *rc = cell_def(s, max_burst, count, period, &def, msg, msglen);
    if (*rc != 0)
        return NULL;
    if (cs->n == cs->max && cell_evict(cs) != 0) {
        *rc = SLUICE_EBUSY;
        snprintf(msg, msglen, "%zu parameter sets are in use (the maximum); reuse one", cs->max);
        return NULL;
    }
    e = &cs->entries[cs->n];
    *rc = sluice_limit_new(&def, &e->lim, msg, msglen);
    if (*rc != 0)
        return NULL;
    /* Tracked from its first decision, so the next pull of the feed drains its keys. */
    if (sluice_engine_changes_running(s->engine))
        sluice_limit_track_changes(e->lim, 1);
    e->max_burst = max_burst;
    e->count = count;
    e->period = period;
    e->t_ns = def.period_ns / count;
    (void)ptab_insert(&cs->index, entry_hash(e), e); /* reserved for max entries */
    cs->n++;
    return e;
}

/* Finds or creates the limit of a triple. Returns it, or NULL after replying. */
static cell_entry *cell_get(conn *c, int64_t max_burst, int64_t count, int64_t period)
{
    cell_entry *e = cell_find(c->srv->cell_state, max_burst, count, period);
    char msg[200];
    int rc;

    if (e)
        return e;
    /* A new parameter set is new state: refused past the memory budget (memory.h). */
    if (mem_refuse(c))
        return NULL;
    msg[0] = '\0';
    e = cell_create(c->srv, max_burst, count, period, &rc, msg, sizeof(msg));
    if (e)
        return e;
    if (rc == SLUICE_EINVAL)
        resp_error(conn_out(c), "WRONGARGS", "CL.THROTTLE: %s", msg);
    else if (rc == SLUICE_EBUSY)
        resp_error(conn_out(c), "BUSY", "CL.THROTTLE: %s", msg);
    else
        reply_engine_error(c, rc, msg);
    return NULL;
}

/* ---- The triples as the engine's foreign limits ------------------------------------------ */

#define CELL_ID_PREFIX "!cell:"

static int cell_visit(void *arg, int (*fn)(const char *id, sluice_limit *lim, void *fnarg),
                      void *fnarg)
{
    server *s = arg;
    cell_state *cs = s->cell_state;
    char id[96];

    for (size_t i = 0; cs && i < cs->n; i++) {
        const cell_entry *e = &cs->entries[i];
        int rc;

        snprintf(id, sizeof id, CELL_ID_PREFIX "%" PRId64 ":%" PRId64 ":%" PRId64, e->max_burst,
                 e->count, e->period);
        rc = fn(id, e->lim, fnarg);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int cell_parse_id(const char *id, int64_t *max_burst, int64_t *count, int64_t *period)
{
    int64_t v[3];
    const char *p;

    if (strncmp(id, CELL_ID_PREFIX, strlen(CELL_ID_PREFIX)) != 0)
        return -1;
    p = id + strlen(CELL_ID_PREFIX);
    for (int i = 0; i < 3; i++) {
        const char *start = p;

        v[i] = 0;
        while (*p >= '0' && *p <= '9') {
            if (v[i] > (INT64_MAX - 9) / 10)
                return -1;
            v[i] = v[i] * 10 + (*p++ - '0');
        }
        if (p == start || p - start > 18 || *p != (i < 2 ? ':' : '\0'))
            return -1;
        p++;
    }
    if (v[1] < 1 || v[2] < 1)
        return -1;
    *max_burst = v[0];
    *count = v[1];
    *period = v[2];
    return 0;
}

static sluice_limit *cell_find_id(void *arg, const char *id)
{
    server *s = arg;
    int64_t max_burst, count, period;
    cell_entry *e;
    char msg[200];
    int rc;

    if (!s->cell_state || cell_parse_id(id, &max_burst, &count, &period) != 0)
        return NULL;
    e = cell_find(s->cell_state, max_burst, count, period);
    if (!e)
        e = cell_create(s, max_burst, count, period, &rc, msg, sizeof(msg));
    return e ? e->lim : NULL;
}

/* Seconds of a non-negative duration, redis-cell's way: whole seconds, plus one when a
 * millisecond part remains. */
static int64_t cell_seconds(int64_t ns)
{
    int64_t s = ns / SLUICE_NS_PER_SEC;

    if ((ns % SLUICE_NS_PER_SEC) / SLUICE_NS_PER_MS > 0)
        s++;
    return s;
}

void cell_map_decision(const sluice_decision *d, int64_t quantity, int64_t t_ns, cell_reply *out)
{
    int64_t reset_ns = d->reset_after_ns;

    out->limit = d->limit;
    out->remaining = d->remaining < 0 ? 0 : d->remaining;
    out->retry_after = -1;
    if (quantity == 0) {
        /* A peek of one unit: redis-cell's quantity 0 always passes and reports the state
         * before that unit. */
        out->limited = 0;
        if (d->allowed) {
            out->remaining++;
            reset_ns = reset_ns > t_ns ? reset_ns - t_ns : 0;
        }
    } else {
        out->limited = !d->allowed;
        if (!d->allowed && d->retry_after_ns != SLUICE_NEVER)
            out->retry_after = cell_seconds(d->retry_after_ns);
    }
    out->reset_after = cell_seconds(reset_ns < 0 ? 0 : reset_ns);
}

void cell_write_reply(conn *c, const cell_reply *r)
{
    resp_writer *w = conn_out(c);

    if (r->limited)
        c->srv->stats.throttle_denied++;
    else
        c->srv->stats.throttle_allowed++;
    resp_array(w, 5);
    resp_int(w, r->limited);
    resp_int(w, r->limit);
    resp_int(w, r->remaining);
    resp_int(w, r->retry_after);
    resp_int(w, r->reset_after);
}

/* Under a shared store: the triple's limit is not kept here (its state is Redis's); its
 * definition travels with the request, under the same id as the local cache's feed id. */
static void cell_shared(conn *c, const resp_command *cmd, int64_t max_burst, int64_t count,
                        int64_t period, int64_t quantity)
{
    sluice_limit_def def;
    char msg[200], id[96];

    msg[0] = '\0';
    if (cell_def(c->srv, max_burst, count, period, &def, msg, sizeof(msg)) != 0) {
        resp_error(conn_out(c), "WRONGARGS", "CL.THROTTLE: %s", msg);
        return;
    }
    snprintf(id, sizeof id, CELL_ID_PREFIX "%" PRId64 ":%" PRId64 ":%" PRId64, max_burst, count,
             period);
    /* No mode of its own: the global switch alone makes it pass, as locally. */
    rstore_cell(c, &def, id, cmd->argv[1], cmd->argvlen[1], quantity, def.period_ns / count,
                !sluice_engine_enabled(c->srv->engine));
}

void cmd_cl_throttle(conn *c, const resp_command *cmd)
{
    server *s = c->srv;
    resp_writer *w = conn_out(c);
    int64_t max_burst, count, period, quantity = 1;
    cell_entry *e;
    sluice_decision d;
    cell_reply r;
    int rc;

    if (cmd->argc > 6) {
        reply_arity(c, "cl.throttle");
        return;
    }
    if (command_parse_int(cmd->argv[2], cmd->argvlen[2], &max_burst) != 0 ||
        command_parse_int(cmd->argv[3], cmd->argvlen[3], &count) != 0 ||
        command_parse_int(cmd->argv[4], cmd->argvlen[4], &period) != 0 ||
        (cmd->argc == 6 && command_parse_int(cmd->argv[5], cmd->argvlen[5], &quantity) != 0)) {
        resp_error(w, "WRONGARGS",
                   "CL.THROTTLE key max_burst count period [quantity]: the "
                   "numbers must be integers");
        return;
    }
    if (max_burst < 0 || count < 1 || period < 1 || quantity < 0) {
        resp_error(w, "WRONGARGS",
                   "CL.THROTTLE: max_burst and quantity must be >= 0, count and "
                   "period >= 1");
        return;
    }
    if (cmd->argvlen[1] > s->opt.max_key_len) {
        resp_error(w, "WRONGARGS", "key of %zu bytes is longer than the maximum of %zu",
                   cmd->argvlen[1], s->opt.max_key_len);
        return;
    }
    if (rstore_active(s)) {
        cell_shared(c, cmd, max_burst, count, period, quantity);
        return;
    }
    e = cell_get(c, max_burst, count, period);
    if (!e)
        return;
    /* CL.THROTTLE's parameter sets have no name and so no mode of their own: the global switch
     * (`enabled: false`) alone makes them let everything through, still counting. */
    sluice_limit_set_shadow(e->lim, !sluice_engine_enabled(s->engine));
    rc = sluice_limit_decide(e->lim, cmd->argv[1], cmd->argvlen[1], quantity ? quantity : 1,
                             server_now(s), quantity ? 0 : SLUICE_PEEK, &d);
    if (rc != 0) {
        reply_engine_error(c, rc, NULL);
        return;
    }
    cell_map_decision(&d, quantity, e->t_ns, &r);
    if (d.shadow_denied && quantity)
        s->stats.throttle_shadow_denied++;
    cell_write_reply(c, &r);
}
