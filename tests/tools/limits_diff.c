/* SPDX-License-Identifier: MIT */
/*
 * sluice_limits_diff: the differential test of the shared stores' limits -- the Redis script
 * (src/store/redis/limits.lua) and the PostgreSQL function (src/store/pg/001_limits.sql) --
 * against the C core. One driver for both: they take the same requests and must give the same
 * answers, so the same random sequences prove each of them equal to the core.
 *
 * Random worlds of five limits (rate with units, burst and start_empty, adaptive rates whose
 * keys' rates backoffs lower and time restores (Redis only: PostgreSQL refuses them), fixed and
 * sliding windows, concurrency leases, quotas with none/day/month calendars; some of them in shadow
 * mode, and now and then all of them, as under `enabled: false`) get random batches of requests
 * (chains of 1 to 3 links, peeks, lease renewals and releases, settlements, backoffs of a key by a
 * wait of nanoseconds to 30 days) at injected times that move forward by steps of nanoseconds to
 * days, and sometimes back. Every request goes both through the in-process core
 * (sluice_chain_decide and friends) and through the store (one EVALSHA, or one call of
 * sluice_limits_call, per batch, built and read by store/redis_limits.c or store/pg_limits.c), and
 * every field of every answer is compared: the chain's result, each link's decision, lease
 * presence, renew expiries, statuses and the store time used.
 *
 * The stores ratchet their clock per tag and forget idle state at the request's time; the core
 * clamps per limit and forgets idle keys when swept. So the driver puts every link of a round
 * under one tag, passes the core the running maximum of the injected times (the ratchet), and
 * sweeps every limit at that time before each request. One case where the core answers
 * differently is not generated: a peek, at a time past the clock, on a start_empty rate key that
 * became idle in between (swept: "empty"; not swept: "full"). (Peeks past the clock on a
 * concurrency key are generated: the core used to drop the leases expired by the peek's time,
 * which this test found; the core's peek now changes nothing, as the stores'.)
 *
 * Also checked: the audit (one entry per granted link), the store's own clock (a decision
 * without an injected time is taken near the real clock: Redis TIME, PostgreSQL
 * clock_timestamp()) and the ratchet (after a decision at a future time, decisions on the store's
 * clock do not go back). On PostgreSQL also contention: several connections deciding chains over
 * the same keys at once never fail (no deadlock) and lose or invent no grant (check_race).
 *
 * Usage: sluice_limits_diff REDIS-PORT|PG-CONNINFO [SEED [OPS_PER_KIND]], against a throwaway
 * redis-server on 127.0.0.1:PORT (emptied first with FLUSHDB so that a seed replays) or a
 * throwaway PostgreSQL database named by a libpq connection string or URI (its sluice schema
 * created or migrated, its limit tables emptied before each round). Prints a summary; exits 1 on
 * the first mismatches (printed with the seed, round and request), 2 on a setup error.
 */
#include <hiredis.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sluice/error.h"
#include "sluice/limit.h"
#include "store/pg_limits.h"
#include "store/pg_schema.h"
#include "store/redis_limits.h"

#define NLIM       5
#define NKEYS      5
#define MAX_BATCH  8
#define MAX_LINKS  3
#define NGRANTS    64
#define NLEASES    256
#define NS_PER_DAY (INT64_C(86400) * SLUICE_NS_PER_SEC)

static uint64_t rng_state;

static uint64_t rnd(void)
{
    uint64_t x = rng_state;

    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return x * UINT64_C(2685821657736338717);
}

/* Uniform in [lo, hi]. */
static int64_t rr(int64_t lo, int64_t hi)
{
    return lo + (int64_t)(rnd() % (uint64_t)(hi - lo + 1));
}

static int chance(int percent)
{
    return rr(0, 99) < percent;
}

static const char *const key_names[NKEYS] = {"", "a", "b", "c-a-rather-long-key-name"};

typedef struct grant {
    int lim;
    int key;
    int64_t at_ns;
    int64_t units;
} grant;

typedef struct lease_pair {
    int lim;
    int key;
    uint64_t core_id;
    uint64_t redis_id;
} lease_pair;

typedef struct world {
    sluice_limit_def def[NLIM];
    sluice_limit *lim[NLIM];
    char id[NLIM][16];
    grant grants[NGRANTS];
    size_t ngrants;
    lease_pair leases[NLEASES];
    size_t nleases;
    uint64_t last_redis_lease;
    int64_t clock; /* the ratchet: newest time of a request that was not a peek */
} world;

/* One request of a batch, as both sides get it. */
typedef struct req {
    rlim_op op;
    size_t n;
    int lim[MAX_LINKS];
    int key[MAX_LINKS];
    int64_t units[MAX_LINKS];
    rlim_args args;
    int lease;       /* RENEW/RELEASE: index in world.leases */
    int acquire_ttl; /* a one-link concurrency DECIDE through sluice_lease_acquire with a TTL */
} req;

static long ops_per_kind[6];
static long adaptive_ops, adaptive_backoffs;
static int with_adaptive; /* adaptive (AIMD) rates: the Redis script has them, PostgreSQL not */
static long mismatches;
static long total_requests, total_calls;
static const char *where_seed;
static int where_round;

static void report(int ri, const char *what, int64_t core, int64_t redis)
{
    mismatches++;
    if (mismatches <= 10)
        fprintf(stderr,
                "MISMATCH seed %s round %d request %d: %s core=%" PRId64 " store=%" PRId64 "\n",
                where_seed, where_round, ri, what, core, redis);
}

#define SAME(ri, what, c, r)                                                                       \
    do {                                                                                           \
        if ((int64_t)(c) != (int64_t)(r))                                                          \
            report(ri, what, (int64_t)(c), (int64_t)(r));                                          \
    } while (0)

static int64_t pick_period(void)
{
    static const int64_t periods[] = {1000,
                                      SLUICE_NS_PER_MS,
                                      7 * SLUICE_NS_PER_MS,
                                      SLUICE_NS_PER_SEC,
                                      60 * SLUICE_NS_PER_SEC,
                                      3600 * SLUICE_NS_PER_SEC,
                                      NS_PER_DAY,
                                      30 * NS_PER_DAY,
                                      366 * NS_PER_DAY};

    return periods[rr(0, (int64_t)(sizeof periods / sizeof periods[0]) - 1)];
}

static void make_limit(world *w, int i, sluice_limit_kind kind)
{
    for (;;) {
        sluice_limit_def *d = &w->def[i];
        char msg[128];

        sluice_limit_def_init(d, kind);
        d->limit = chance(90) ? rr(1, 12) : rr(1, 1000000000);
        if (kind == SLUICE_SLIDING && d->limit > 50)
            d->limit = rr(1, 50);
        d->period_ns = pick_period();
        if (kind == SLUICE_RATE) {
            d->burst = chance(40) ? 0 : rr(1, 3 * (d->limit < 10 ? d->limit : 10));
            d->start_empty = chance(40);
            if (chance(30))
                d->period_ns += rr(1, 999);    /* T with a fraction */
            if (with_adaptive && chance(40)) { /* its keys' rates lowered by backoffs */
                static const int64_t every[] = {SLUICE_NS_PER_MS,         7 * SLUICE_NS_PER_MS,
                                                SLUICE_NS_PER_SEC,        60 * SLUICE_NS_PER_SEC,
                                                3600 * SLUICE_NS_PER_SEC, 366 * NS_PER_DAY};

                d->decrease_den = 10;
                for (int64_t digits = rr(1, 6); digits > 1; digits--)
                    d->decrease_den *= 10;
                d->decrease_num = rr(1, d->decrease_den - 1);
                /* Small steps of a larger rate take several intervals to recover: refreshes
                 * between them must move since by whole intervals only. */
                if (chance(40))
                    d->limit = rr(20, 2000);
                d->recover_pct = chance(60) ? rr(1, 10) : rr(1, 100);
                d->recover_ns = every[rr(0, 5)] + (chance(30) ? rr(0, 999) : 0);
                d->floor_permits = rr(1, d->limit);
                d->floor_period_ns = chance(70) ? d->period_ns : pick_period();
            }
        }
        if (kind == SLUICE_CONCURRENCY) {
            d->limit = rr(1, 5);
            d->ttl_ns =
                chance(50) ? rr(1, 1000) * SLUICE_NS_PER_MS : rr(1, 3600) * SLUICE_NS_PER_SEC;
        }
        if (kind == SLUICE_QUOTA)
            d->calendar = (sluice_calendar)rr(0, 2);
        if (kind == SLUICE_CONCURRENCY || kind == SLUICE_QUOTA)
            d->period_ns = 0;
        if (chance(20))
            d->max_key_len = 8; /* the long key goes by its digest */
        if (sluice_limit_new(d, &w->lim[i], msg, sizeof msg) == SLUICE_OK)
            return;
    }
}

static void world_init(world *w, int focus)
{
    int all_shadow = chance(5); /* `enabled: false`: every limit in shadow mode */

    memset(w, 0, sizeof *w);
    for (int i = 0; i < NLIM; i++) {
        sluice_limit_kind kind = i < 3 ? (sluice_limit_kind)focus : (sluice_limit_kind)rr(1, 5);

        make_limit(w, i, kind);
        snprintf(w->id[i], sizeof w->id[i], "L%d", i);
        /* Shadow links: judged and charged as enforced ones, their would-be denials passed. */
        sluice_limit_set_shadow(w->lim[i], all_shadow || chance(20));
    }
}

static void world_free(world *w)
{
    for (int i = 0; i < NLIM; i++)
        sluice_limit_free(w->lim[i]);
}

/* The next batch time: forward by ns to days, sometimes the same, sometimes back. */
static int64_t step_time(int64_t t)
{
    static const int64_t scales[] = {0,
                                     1000,
                                     SLUICE_NS_PER_MS,
                                     100 * SLUICE_NS_PER_MS,
                                     SLUICE_NS_PER_SEC,
                                     60 * SLUICE_NS_PER_SEC,
                                     3600 * SLUICE_NS_PER_SEC,
                                     3 * NS_PER_DAY};
    int64_t scale = scales[rr(0, 7)];
    int64_t d = scale ? rr(1, scale) : 0;

    if (chance(8))
        return t - d; /* the caller's clock stepped back */
    return t + d;
}

/* A peek past the clock on this limit may be answered differently (see the header comment). */
static int peek_ahead_differs(const world *w, int lim)
{
    return w->def[lim].kind == SLUICE_RATE && w->def[lim].start_empty;
}

static void gen_request(world *w, req *q, int64_t t, int64_t clock)
{
    int r = (int)rr(0, 99);

    memset(q, 0, sizeof *q);
    q->op = RLIM_DECIDE;
    if (r < 15)
        q->op = RLIM_PEEK;
    else if (r < 27 && w->nleases > 0)
        q->op = chance(50) ? RLIM_LEASE_RENEW : RLIM_LEASE_RELEASE;
    else if (r < 37 && w->ngrants > 0)
        q->op = RLIM_SETTLE;
    else if (r < (with_adaptive ? 50 : 43))
        q->op = RLIM_BACKOFF;
    else if (with_adaptive && r < 55)
        q->op = RLIM_RATE;

    if (q->op == RLIM_LEASE_RENEW || q->op == RLIM_LEASE_RELEASE) {
        q->lease = (int)rr(0, (int64_t)w->nleases - 1);
        q->n = 1;
        q->lim[0] = w->leases[q->lease].lim;
        q->key[0] = w->leases[q->lease].key;
        q->units[0] = 1;
        q->args.lease_id = w->leases[q->lease].redis_id;
        q->args.ttl_ns = rr(1, 2000) * SLUICE_NS_PER_MS;
        return;
    }
    if (q->op == RLIM_RATE) { /* LIMIT.RATE: maybe not a rate limit, refused by both */
        q->n = 1;
        q->lim[0] = (int)rr(0, NLIM - 1);
        q->key[0] = (int)rr(0, NKEYS - 2);
        q->units[0] = 1;
        return;
    }
    if (q->op == RLIM_BACKOFF) {
        static const int64_t waits[] = {0,
                                        1000,
                                        SLUICE_NS_PER_MS,
                                        SLUICE_NS_PER_SEC,
                                        3600 * SLUICE_NS_PER_SEC,
                                        30 * NS_PER_DAY};

        q->n = 1;
        q->lim[0] = (int)rr(0, NLIM - 1); /* maybe not a rate limit: refused by both */
        for (int tries = 0; with_adaptive && tries < 8 && w->def[q->lim[0]].decrease_den == 0;
             tries++)
            q->lim[0] = (int)rr(0, NLIM - 1); /* mostly an adaptive one, when there is one */
        q->key[0] = (int)rr(0, NKEYS - 2);
        q->units[0] = 1;
        q->args.wait_ns = rr(0, waits[rr(0, 5)]);
        if (chance(2))
            q->args.wait_ns = -1; /* refused by both */
        return;
    }
    if (q->op == RLIM_SETTLE) {
        const grant *g = &w->grants[rr(0, (int64_t)w->ngrants - 1)];

        q->n = 1;
        q->lim[0] = g->lim;
        q->key[0] = g->key;
        q->units[0] = 1;
        q->args.charged_ns = chance(90) ? g->at_ns : g->at_ns - rr(0, 40 * NS_PER_DAY);
        q->args.estimate = g->units;
        q->args.actual = chance(95) ? rr(0, 3 * g->units + 2) : rr(0, INT64_C(8000000000));
        if (chance(2))
            q->args.actual = -1; /* refused by both */
        if (chance(3))
            q->lim[0] = (int)rr(0, NLIM - 1); /* maybe a concurrency limit: refused by both */
        return;
    }
    q->n = (size_t)(chance(50) ? 1 : rr(2, MAX_LINKS));
    for (size_t i = 0; i < q->n; i++) {
        int lim = (int)rr(0, NLIM - 1);

        if (q->op == RLIM_PEEK && t > clock && peek_ahead_differs(w, lim))
            q->op = RLIM_DECIDE; /* the cases of the header comment */
        q->lim[i] = lim;
        q->key[i] = (int)rr(0, NKEYS - 2);
        q->units[i] = chance(93) ? rr(1, 3) : rr(1, w->def[lim].limit + 2);
        if (w->def[lim].kind == SLUICE_RATE && chance(3))
            q->units[i] = (w->def[lim].burst ? w->def[lim].burst : w->def[lim].limit) + 1;
    }
    if (q->op == RLIM_DECIDE && q->n == 1 && w->def[q->lim[0]].kind == SLUICE_CONCURRENCY &&
        chance(50)) {
        q->acquire_ttl = 1;
        q->args.ttl_ns = rr(1, 3000) * SLUICE_NS_PER_MS;
    }
}

static void make_link(const world *w, const req *q, size_t i, rlim_link *l)
{
    memset(l, 0, sizeof *l);
    l->def = sluice_limit_get_def(w->lim[q->lim[i]]);
    l->limit_id = w->id[q->lim[i]];
    l->key = key_names[q->key[i]];
    l->keylen = strlen(l->key);
    l->tag = "T";
    l->taglen = 1;
    l->units = q->units[i];
    l->shadow = sluice_limit_shadow(w->lim[q->lim[i]]);
}

static void sweep_all(world *w, int64_t now)
{
    for (int i = 0; i < NLIM; i++)
        sluice_limit_sweep(w->lim[i], now, SIZE_MAX);
}

static void remember_grant(world *w, int lim, int key, int64_t at, int64_t units)
{
    grant *g;

    if (w->def[lim].kind == SLUICE_CONCURRENCY)
        return;
    if (w->ngrants < NGRANTS)
        g = &w->grants[w->ngrants++];
    else
        g = &w->grants[rr(0, NGRANTS - 1)];
    g->lim = lim;
    g->key = key;
    g->at_ns = at;
    g->units = units;
}

/* Runs request q on the core at the driver's clock and compares with Redis's answer. */
static void check_request(world *w, const req *q, int ri, int64_t t, const rlim_result *res,
                          const sluice_decision *rd, int rrc)
{
    const sluice_decision *rdec = rd;
    int peek = q->op == RLIM_PEEK || q->op == RLIM_RATE; /* reads: the clock stays */
    int64_t now;

    if (rrc != SLUICE_OK) {
        report(ri, "reply could not be read (rc)", 0, rrc);
        return;
    }
    /* SLUICE_DIFF_TRACE=ROUND prints every request of that round (to read a mismatch). */
    if (getenv("SLUICE_DIFF_TRACE") && atoi(getenv("SLUICE_DIFF_TRACE")) == where_round) {
        fprintf(stderr,
                "req %d op %d t %" PRId64 " clock %" PRId64 " lease %" PRIu64 " ttl %" PRId64 ":",
                ri, (int)q->op, t, w->clock, q->args.lease_id, q->args.ttl_ns);
        for (size_t i = 0; i < q->n; i++)
            fprintf(stderr, " [L%d %s lim %" PRId64 " ttl %" PRId64 " key %d u %" PRId64 "]",
                    q->lim[i], sluice_limit_kind_name(w->def[q->lim[i]].kind),
                    w->def[q->lim[i]].limit, w->def[q->lim[i]].ttl_ns, q->key[i], q->units[i]);
        fprintf(stderr, " -> redis rc %d allowed %d rem0 %" PRId64 "\n", res->rc,
                res->chain.allowed, rd[0].remaining);
    }
    if (!peek && t > w->clock)
        w->clock = t;
    sweep_all(w, w->clock);
    now = peek && t > w->clock ? t : w->clock;
    SAME(ri, "store time", now, res->now_ns);
    total_requests++;
    for (size_t i = 0; i < q->n; i++) {
        ops_per_kind[w->def[q->lim[i]].kind]++;
        if (w->def[q->lim[i]].decrease_den > 0)
            adaptive_ops++;
    }
    if (q->op == RLIM_BACKOFF && w->def[q->lim[0]].decrease_den > 0)
        adaptive_backoffs++;

    if (q->op == RLIM_DECIDE || q->op == RLIM_PEEK) {
        sluice_chain_link links[MAX_LINKS];
        sluice_decision cd[MAX_LINKS];
        sluice_chain_result cr;
        int rc;

        for (size_t i = 0; i < q->n; i++) {
            links[i].limit = w->lim[q->lim[i]];
            links[i].key = key_names[q->key[i]];
            links[i].keylen = strlen(links[i].key);
            links[i].units = q->units[i];
        }
        if (q->acquire_ttl) {
            rc = sluice_lease_acquire(links[0].limit, links[0].key, links[0].keylen, links[0].units,
                                      q->args.ttl_ns, now, &cd[0]);
            memset(&cr, 0, sizeof cr);
            cr.allowed = cd[0].allowed;
            cr.retry_after_ns = cd[0].allowed ? 0 : cd[0].retry_after_ns;
        } else {
            rc = sluice_chain_decide(links, q->n, now, peek ? SLUICE_PEEK : 0, cd, &cr);
        }
        SAME(ri, "core rc", SLUICE_OK, rc);
        SAME(ri, "request status", SLUICE_OK, res->rc);
        SAME(ri, "chain allowed", cr.allowed, res->chain.allowed);
        SAME(ri, "chain retry_after", cr.retry_after_ns, res->chain.retry_after_ns);
        if (!cr.allowed)
            SAME(ri, "chain denied_by", cr.denied_by, res->chain.denied_by);
        for (size_t i = 0; i < q->n; i++) {
            char what[64];

#define FIELD(f)                                                                                   \
    do {                                                                                           \
        snprintf(what, sizeof what, "link %zu (%s) " #f, i,                                        \
                 sluice_limit_kind_name(w->def[q->lim[i]].kind));                                  \
        SAME(ri, what, cd[i].f, rdec[i].f);                                                        \
    } while (0)
            FIELD(allowed);
            FIELD(shadow_denied);
            FIELD(limit);
            FIELD(remaining);
            FIELD(retry_after_ns);
            FIELD(reset_after_ns);
#undef FIELD
            SAME(ri, "lease presence", cd[i].lease_id != 0, rdec[i].lease_id != 0);
            if (cd[i].lease_id && rdec[i].lease_id) {
                if (rdec[i].lease_id <= w->last_redis_lease)
                    report(ri, "store lease id not increasing", (int64_t)w->last_redis_lease,
                           (int64_t)rdec[i].lease_id);
                w->last_redis_lease = rdec[i].lease_id;
                if (w->nleases < NLEASES) {
                    lease_pair *p = &w->leases[w->nleases++];

                    p->lim = q->lim[i];
                    p->key = q->key[i];
                    p->core_id = cd[i].lease_id;
                    p->redis_id = rdec[i].lease_id;
                }
            }
        }
        if (cr.allowed && !peek)
            for (size_t i = 0; i < q->n; i++)
                remember_grant(w, q->lim[i], q->key[i], now, q->units[i]);
        return;
    }
    if (q->op == RLIM_LEASE_RENEW || q->op == RLIM_LEASE_RELEASE) {
        const lease_pair *p = &w->leases[q->lease];
        int rc;

        if (q->op == RLIM_LEASE_RENEW) {
            int64_t exp = 0;

            rc = sluice_lease_renew(w->lim[p->lim], p->core_id, q->args.ttl_ns, now, &exp);
            SAME(ri, "renew status", rc, res->rc);
            if (rc == SLUICE_OK)
                SAME(ri, "renew expiry", exp, res->expires_ns);
        } else {
            rc = sluice_lease_release(w->lim[p->lim], p->core_id, now);
            SAME(ri, "release status", rc, res->rc);
        }
        return;
    }
    if (q->op == RLIM_RATE) {
        int64_t permits = 0, since = 0;
        int rc = sluice_limit_key_rate(w->lim[q->lim[0]], key_names[q->key[0]],
                                       strlen(key_names[q->key[0]]), now, &permits, &since);

        SAME(ri, "rate status", rc, res->rc);
        if (rc == SLUICE_OK) {
            SAME(ri, "key rate", permits, res->permits);
            SAME(ri, "key rate since", since, res->since_ns);
        }
        return;
    }
    if (q->op == RLIM_BACKOFF) {
        int64_t slot = 0;
        int rc = sluice_limit_backoff(w->lim[q->lim[0]], key_names[q->key[0]],
                                      strlen(key_names[q->key[0]]), q->args.wait_ns, now, &slot);

        SAME(ri, "backoff status", rc, res->rc);
        if (rc == SLUICE_OK)
            SAME(ri, "backoff slot", slot, res->slot_ns);
        return;
    }
    {
        int rc = sluice_limit_settle(w->lim[q->lim[0]], key_names[q->key[0]],
                                     strlen(key_names[q->key[0]]), q->args.charged_ns,
                                     q->args.estimate, q->args.actual, now);

        SAME(ri, "settle status", rc, res->rc);
    }
}

/* ---- the two stores ----------------------------------------------------------------------
 * Both stores take the same requests (rlim_link, rlim_op, rlim_args) and give the same answers
 * (rlim_result); only the batch, the transport and the audit differ. */

typedef struct store {
    int pg;           /* 0: Redis (hiredis), 1: PostgreSQL (libpq) */
    redisContext *rc; /* Redis */
    char sha[64];     /* Redis: the script's SHA-1 */
    PGconn *pc;       /* PostgreSQL */
    rlim_batch *rb;   /* the batch of the current round */
    pgl_batch *pb;
    char prefix[64]; /* Redis: the round's key prefix (PostgreSQL: tables emptied instead) */
} store;

/* A reply of either store. */
typedef struct reply {
    redisReply *r;
    PGresult *p;
} reply;

static void pg_exec(store *st, const char *sql)
{
    PGresult *r = PQexec(st->pc, sql);

    if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK) {
        fprintf(stderr, "postgresql: %s: %s\n", sql, PQerrorMessage(st->pc));
        exit(2);
    }
    PQclear(r);
}

/* A new batch (the previous one freed) whose state starts empty: a fresh key prefix on Redis,
 * emptied tables on PostgreSQL. */
static void store_begin(store *st, const char *prefix, int audit)
{
    rlim_batch_free(st->rb);
    pgl_batch_free(st->pb);
    st->rb = NULL;
    st->pb = NULL;
    snprintf(st->prefix, sizeof st->prefix, "%s", prefix);
    if (st->pg) {
        pg_exec(st, "TRUNCATE sluice_limit_state, sluice_limit_audit");
        if (pgl_batch_new(&st->pb) != SLUICE_OK)
            exit(2);
        pgl_batch_set_audit(st->pb, audit);
        return;
    }
    if (rlim_batch_new(prefix, &st->rb) != SLUICE_OK)
        exit(2);
    rlim_batch_set_audit(st->rb, audit);
}

static void store_reset(store *st, int64_t now)
{
    if (st->pg) {
        pgl_batch_reset(st->pb);
        pgl_batch_set_now(st->pb, now);
    } else {
        rlim_batch_reset(st->rb);
        rlim_batch_set_now(st->rb, now);
    }
}

static int store_add(store *st, rlim_op op, const rlim_link *links, size_t n, const rlim_args *args)
{
    return st->pg ? pgl_batch_add(st->pb, op, links, n, args)
                  : rlim_batch_add(st->rb, op, links, n, args);
}

static reply call(store *st)
{
    reply out = {NULL, NULL};

    if (st->pg) {
        const char *const *values;

        if (pgl_batch_params(st->pb, &values) != SLUICE_OK) {
            fprintf(stderr, "pgl_batch_params failed\n");
            exit(2);
        }
        out.p = PQexecParams(st->pc, PGL_CALL_SQL, PGL_CALL_NPARAMS, NULL, values, NULL, NULL, 0);
        if (PQresultStatus(out.p) != PGRES_TUPLES_OK) {
            fprintf(stderr, "function error: %s\n", PQerrorMessage(st->pc));
            exit(1);
        }
    } else {
        int argc;
        const char **argv;
        const size_t *argvlen;

        if (rlim_batch_command(st->rb, st->sha, &argc, &argv, &argvlen) != SLUICE_OK) {
            fprintf(stderr, "rlim_batch_command failed\n");
            exit(2);
        }
        out.r = redisCommandArgv(st->rc, argc, argv, argvlen);
        if (!out.r) {
            fprintf(stderr, "redis: %s\n", st->rc->errstr);
            exit(2);
        }
        if (out.r->type == REDIS_REPLY_ERROR) {
            fprintf(stderr, "script error: %s\n", out.r->str);
            exit(1);
        }
    }
    total_calls++;
    return out;
}

static int store_result(store *st, reply r, size_t i, rlim_result *res, sluice_decision *d)
{
    return st->pg ? pgl_batch_result(st->pb, r.p, i, res, d)
                  : rlim_batch_result(st->rb, r.r, i, res, d);
}

static void reply_free(reply r)
{
    freeReplyObject(r.r);
    PQclear(r.p);
}

/* Audit entries of the round: the Redis list of tag T, or the PostgreSQL table. -1: none. */
static long long audit_count(store *st)
{
    long long n = -1;

    if (st->pg) {
        PGresult *r = PQexec(st->pc, "SELECT count(*) FROM sluice_limit_audit");

        if (PQresultStatus(r) == PGRES_TUPLES_OK)
            n = atoll(PQgetvalue(r, 0, 0));
        PQclear(r);
    } else {
        redisReply *r = redisCommand(st->rc, "LLEN %s:{T}:audit", st->prefix);

        n = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
        freeReplyObject(r);
    }
    return n;
}

/* One round: a world, its batches, and (when auditing) the audit's count. */
static void run_round(store *st, int round, int focus, int requests)
{
    char prefix[64];
    world w;
    int64_t t = INT64_C(1577836800) * SLUICE_NS_PER_SEC + rr(0, 10 * 365 * NS_PER_DAY);
    int audit = chance(30);
    long granted_links = 0;

    where_round = round;
    snprintf(prefix, sizeof prefix, "diff%sr%d", where_seed, round);
    world_init(&w, focus);
    store_begin(st, prefix, audit);
    while (requests > 0) {
        req qs[MAX_BATCH];
        int n = (int)rr(1, MAX_BATCH);
        int64_t clock = w.clock;
        reply r;

        t = step_time(t);
        store_reset(st, t);
        for (int i = 0; i < n; i++) {
            rlim_link links[MAX_LINKS];
            int idx;

            gen_request(&w, &qs[i], t, clock);
            if (qs[i].op != RLIM_PEEK && qs[i].op != RLIM_RATE && t > clock)
                clock = t;
            for (size_t k = 0; k < qs[i].n; k++)
                make_link(&w, &qs[i], k, &links[k]);
            idx = store_add(st, qs[i].op, links, qs[i].n, &qs[i].args);
            if (idx != i) {
                fprintf(stderr, "batch add: %d\n", idx);
                exit(2);
            }
        }
        r = call(st);
        for (int i = 0; i < n; i++) {
            rlim_result res;
            sluice_decision d[MAX_LINKS];
            int rc = store_result(st, r, (size_t)i, &res, d);

            check_request(&w, &qs[i], i, t, &res, d, rc);
            if (rc == SLUICE_OK && res.chain.allowed && qs[i].op == RLIM_DECIDE)
                for (size_t k = 0; k < qs[i].n; k++)
                    granted_links += !d[k].shadow_denied; /* a shadow pass charged nothing */
        }
        reply_free(r);
        requests -= n;
        if (mismatches > 10)
            break;
    }
    if (audit) {
        long long n = audit_count(st);

        /* Redis has no list when nothing was granted (LLEN 0); the table simply counts 0. */
        if (n != granted_links)
            report(-1, "audit entries", granted_links, n);
    }
    world_free(&w);
}

static int64_t wall_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * SLUICE_NS_PER_SEC + ts.tv_nsec;
}

/* The store's own clock and the ratchet, on a rate limit under the default tag (its key). */
static void check_clock(store *st)
{
    sluice_limit_def def;
    rlim_link l = {0};
    rlim_result res;
    sluice_decision d;
    reply r;
    int64_t before = wall_ns(), future;
    char prefix[64];

    sluice_limit_def_init(&def, SLUICE_RATE);
    def.limit = 1000;
    def.period_ns = SLUICE_NS_PER_SEC;
    l.def = &def;
    l.limit_id = "clock";
    l.key = "k";
    l.keylen = 1;
    l.units = 1;
    snprintf(prefix, sizeof prefix, "clock%s", where_seed);
    store_begin(st, prefix, 0);
    store_reset(st, 0);
    store_add(st, RLIM_DECIDE, &l, 1, NULL);
    r = call(st);
    if (store_result(st, r, 0, &res, &d) != SLUICE_OK || !res.chain.allowed)
        report(-2, "store-clock decision", 1, res.chain.allowed);
    if (res.now_ns < before - 5 * SLUICE_NS_PER_SEC ||
        res.now_ns > wall_ns() + 5 * SLUICE_NS_PER_SEC)
        report(-2, "store clock far from the wall clock", before, res.now_ns);
    reply_free(r);
    /* A decision an hour ahead, then the store's clock again: the tag's clock does not go back. */
    future = res.now_ns + 3600 * SLUICE_NS_PER_SEC;
    store_reset(st, future);
    store_add(st, RLIM_DECIDE, &l, 1, NULL);
    reply_free(call(st));
    store_reset(st, 0);
    store_add(st, RLIM_PEEK, &l, 1, NULL);
    store_add(st, RLIM_DECIDE, &l, 1, NULL);
    r = call(st);
    for (size_t i = 0; i < 2; i++) {
        if (store_result(st, r, i, &res, &d) != SLUICE_OK || res.now_ns != future)
            report(-2, "ratchet: time after a future decision", future, res.now_ns);
    }
    reply_free(r);
}

/* ---- contention (PostgreSQL) ------------------------------------------------------------
 * Several processes, each with its own connection (as several nodes), send batches of chains
 * over the same keys at once, on the database's clock, naming the links in random orders and
 * each key under its own tag, so that every batch locks rows that others hold. No call may fail
 * (a deadlock between two calls would be an error), and no grant may be lost or invented: for
 * every (limit, key) the units the processes saw granted add up to exactly what the database
 * holds, within the budget. Quotas without a calendar make that an exact count. */

#define RACE_PROCS   4
#define RACE_BATCHES 150
#define RACE_LIMITS  2
#define RACE_KEYS    4

static void race_child(const char *conninfo, int id, int fd)
{
    sluice_limit_def def[RACE_LIMITS];
    static const char *const ids[RACE_LIMITS] = {"R0", "R1"};
    static const char *const keys[RACE_KEYS] = {"a", "b", "c", "d"};
    int64_t granted[RACE_LIMITS][RACE_KEYS] = {{0}};
    PGconn *c = PQconnectdb(conninfo);
    pgl_batch *b;

    rng_state = (uint64_t)(id + 1) * UINT64_C(0x9E3779B97F4A7C15) + rng_state;
    if (PQstatus(c) != CONNECTION_OK || pgl_batch_new(&b) != SLUICE_OK)
        _exit(2);
    for (int i = 0; i < RACE_LIMITS; i++) {
        sluice_limit_def_init(&def[i], SLUICE_QUOTA);
        def[i].limit = i == 0 ? 700 : 400;
    }
    for (int n = 0; n < RACE_BATCHES; n++) {
        int nreq = (int)rr(1, MAX_BATCH);
        int lim[MAX_BATCH][MAX_LINKS], key[MAX_BATCH][MAX_LINKS];
        int64_t units[MAX_BATCH][MAX_LINKS];
        size_t nl[MAX_BATCH];
        const char *const *values;
        PGresult *r;

        pgl_batch_reset(b);
        for (int q = 0; q < nreq; q++) {
            rlim_link links[MAX_LINKS];

            nl[q] = (size_t)rr(1, MAX_LINKS);
            for (size_t k = 0; k < nl[q]; k++) {
                memset(&links[k], 0, sizeof links[k]);
                lim[q][k] = (int)rr(0, RACE_LIMITS - 1);
                key[q][k] = (int)rr(0, RACE_KEYS - 1);
                units[q][k] = rr(1, 3);
                links[k].def = &def[lim[q][k]];
                links[k].limit_id = ids[lim[q][k]];
                links[k].key = keys[key[q][k]];
                links[k].keylen = 1;
                links[k].units = units[q][k];
            }
            if (pgl_batch_add(b, RLIM_DECIDE, links, nl[q], NULL) != q)
                _exit(2);
        }
        if (pgl_batch_params(b, &values) != SLUICE_OK)
            _exit(2);
        r = PQexecParams(c, PGL_CALL_SQL, PGL_CALL_NPARAMS, NULL, values, NULL, NULL, 0);
        if (PQresultStatus(r) != PGRES_TUPLES_OK) {
            fprintf(stderr, "race: process %d: %s", id, PQerrorMessage(c));
            _exit(1);
        }
        for (int q = 0; q < nreq; q++) {
            rlim_result res;

            if (pgl_batch_result(b, r, (size_t)q, &res, NULL) != SLUICE_OK || res.rc != SLUICE_OK)
                _exit(1);
            if (res.chain.allowed)
                for (size_t k = 0; k < nl[q]; k++)
                    granted[lim[q][k]][key[q][k]] += units[q][k];
        }
        PQclear(r);
    }
    if (write(fd, granted, sizeof granted) != (ssize_t)sizeof granted)
        _exit(2);
    pgl_batch_free(b);
    PQfinish(c);
    _exit(0);
}

static void check_race(store *st, const char *conninfo)
{
    int64_t total[RACE_LIMITS][RACE_KEYS] = {{0}};
    pid_t pids[RACE_PROCS];
    int fds[RACE_PROCS];
    PGresult *r;

    where_round = -3;
    store_begin(st, "race", 0);
    for (int i = 0; i < RACE_PROCS; i++) {
        int p[2];

        if (pipe(p) != 0)
            exit(2);
        fflush(NULL);
        pids[i] = fork();
        if (pids[i] < 0)
            exit(2);
        if (pids[i] == 0) {
            close(p[0]);
            race_child(conninfo, i, p[1]);
        }
        close(p[1]);
        fds[i] = p[0];
    }
    for (int i = 0; i < RACE_PROCS; i++) {
        int64_t g[RACE_LIMITS][RACE_KEYS];
        int status;

        if (read(fds[i], g, sizeof g) != (ssize_t)sizeof g)
            memset(g, 0, sizeof g);
        close(fds[i]);
        waitpid(pids[i], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            report(-3, "race: a process failed (exit status)", 0, WEXITSTATUS(status));
        for (int l = 0; l < RACE_LIMITS; l++)
            for (int k = 0; k < RACE_KEYS; k++)
                total[l][k] += g[l][k];
    }
    r = PQexec(st->pc, "SELECT substr(lim, 2)::int, get_byte(key, 0) - 97, st[3] "
                       "FROM sluice_limit_state WHERE kind = 5");
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        exit(2);
    for (int i = 0; i < PQntuples(r); i++) {
        int l = atoi(PQgetvalue(r, i, 0)), k = atoi(PQgetvalue(r, i, 1));

        if (l < 0 || l >= RACE_LIMITS || k < 0 || k >= RACE_KEYS)
            exit(2);
        SAME(-3, "race: units granted vs spent in the database", total[l][k],
             atoll(PQgetvalue(r, i, 2)));
        if (total[l][k] > (l == 0 ? 700 : 400))
            report(-3, "race: over budget", l == 0 ? 700 : 400, total[l][k]);
        total[l][k] = 0;
    }
    for (int l = 0; l < RACE_LIMITS; l++)
        for (int k = 0; k < RACE_KEYS; k++)
            SAME(-3, "race: units granted without a state in the database", 0, total[l][k]);
    PQclear(r);
    printf("race: %d processes x %d batches on shared keys, no call failed\n", RACE_PROCS,
           RACE_BATCHES);
}

static void connect_redis(store *st, int port)
{
    size_t len;
    const char *text = rlim_script(&len);
    redisReply *r;

    st->rc = redisConnect("127.0.0.1", port);
    if (!st->rc || st->rc->err) {
        fprintf(stderr, "connect: %s\n", st->rc ? st->rc->errstr : "out of memory");
        exit(2);
    }
    /* A throwaway server: start from nothing, so that a seed replays exactly. */
    freeReplyObject(redisCommand(st->rc, "FLUSHDB"));
    r = redisCommand(st->rc, "SCRIPT LOAD %b", text, len);
    if (!r || r->type != REDIS_REPLY_STRING) {
        fprintf(stderr, "SCRIPT LOAD failed: %s\n", r && r->str ? r->str : st->rc->errstr);
        exit(2);
    }
    snprintf(st->sha, sizeof st->sha, "%s", r->str);
    freeReplyObject(r);
}

static void connect_pg(store *st, const char *conninfo)
{
    char err[256];
    int from;

    st->pg = 1;
    st->pc = PQconnectdb(conninfo);
    if (PQstatus(st->pc) != CONNECTION_OK) {
        fprintf(stderr, "connect: %s\n", PQerrorMessage(st->pc));
        exit(2);
    }
    pg_exec(st, "SET client_min_messages = warning");
    if (pgs_migrate(st->pc, &from, err, sizeof err) != SLUICE_OK) {
        fprintf(stderr, "%s\n", err);
        exit(2);
    }
}

int main(int argc, char **argv)
{
    const char *where = argc > 1 ? argv[1] : "";
    const char *seed = argc > 2 ? argv[2] : "1";
    long per_kind = argc > 3 ? atol(argv[3]) : 10000;
    store st = {0};
    int round = 0;

    if (where[0] >= '1' && where[0] <= '9') {
        connect_redis(&st, atoi(where));
        with_adaptive = 1;
    } else if (strchr(where, '=') || strncmp(where, "postgres", 8) == 0) {
        connect_pg(&st, where);
    } else {
        fprintf(stderr, "usage: sluice_limits_diff REDIS-PORT|PG-CONNINFO [SEED [OPS_PER_KIND]]\n");
        return 2;
    }
    where_seed = seed;
    rng_state = strtoull(seed, NULL, 10) * UINT64_C(0x9E3779B97F4A7C15) + 1;
    check_clock(&st);
    if (st.pg)
        check_race(&st, where);
    for (;;) {
        int focus = 0;

        for (int k = SLUICE_RATE; k <= SLUICE_QUOTA; k++)
            if (ops_per_kind[k] < per_kind && (!focus || ops_per_kind[k] < ops_per_kind[focus]))
                focus = k;
        if (!focus || mismatches > 10)
            break;
        run_round(&st, round++, focus, 300);
    }
    printf("%s seed %s: %d rounds, %ld requests in %ld calls; link decisions: rate %ld, "
           "window %ld, sliding %ld, concurrency %ld, quota %ld (on adaptive rates %ld, and "
           "%ld backoffs lowering them); %ld mismatches\n",
           st.pg ? "postgresql" : "redis", seed, round, total_requests, total_calls,
           ops_per_kind[1], ops_per_kind[2], ops_per_kind[3], ops_per_kind[4], ops_per_kind[5],
           adaptive_ops, adaptive_backoffs, mismatches);
    rlim_batch_free(st.rb);
    pgl_batch_free(st.pb);
    if (st.rc)
        redisFree(st.rc);
    if (st.pc)
        PQfinish(st.pc);
    return mismatches ? 1 : 0;
}
