/* SPDX-License-Identifier: MIT */
/*
 * sluice_recur_diff: the differential test of the PostgreSQL series function (sluice_recur_call,
 * src/store/pg/003_pgrecur.sql, through store/pg_recur.c) against the Redis store script's recur
 * ops (src/store/redis/recur.lua, through store/redis_recur.c).
 *
 * One random sequence of series requests, one to four per call, at the same injected times
 * (rrecur_batch_set_now / pgr_batch_set_now; moving by milliseconds to minutes, sometimes back),
 * goes to a throwaway redis-server and a throwaway PostgreSQL, one connection each: SETs of a
 * few names (interval or cron, START now, ahead or behind, END sometimes before START, MAX, KEY),
 * DELs, INFOs, LISTs of 1 to 64, and FIREs naming the version and next the store last reported,
 * or a stale one, with and without an occurrence, passing over points. Every field of every
 * answer is compared (status, time, version, next, deleted, fired, task id, runs, skipped, the
 * listed series field by field and byte by byte, earliest, more, messages). Occurrences are
 * ordinary tasks: claims of their type go to both stores' task ops between the series calls (so
 * that some occurrences are running when their series is replaced or deleted), and every 20 steps
 * INFO of every task so far compares their states (what a DEL or a replacement cancelled).
 *
 * Usage: sluice_recur_diff REDIS-PORT PG-CONNINFO SEED [STEPS]
 * Prints one line; exits 1 on the first mismatch (with the seed, step and field), 2 on a setup
 * error.
 */
#include <inttypes.h>

#define DIFF_NAME "recur_diff"
#include "diff_common.h"
#include "store/pg_recur.h"
#include "store/pg_tasks.h"
#include "store/redis_recur.h"
#include "store/redis_tasks.h"

static long nreqs, nfired, nstale, nlisted, ninval;
static uint64_t maxid;

/* Per name, the version and next the store last reported (0: none known). */
#define NNAMES 4
static const char *const names[NNAMES] = {"a", "b", "c d", "e"};
static uint64_t known_ver[NNAMES];
static int64_t known_next[NNAMES], known_every[NNAMES];
/* The name (its index) of each request of the call being built. */
static int req_name[16];

static void same_series(size_t i, const rrecur_series *x, const rrecur_series *y)
{
    SAME("version", x->version, y->version);
    SAME("interval", x->interval_ns, y->interval_ns);
    SAME("start", x->start_ns, y->start_ns);
    SAME("end", x->end_ns, y->end_ns);
    SAME("max", x->max_runs, y->max_runs);
    SAME("runs", x->runs, y->runs);
    SAME("skipped", x->skipped, y->skipped);
    SAME("next", x->next_ns, y->next_ns);
    same_bytes(i, "name", x->name, x->namelen, y->name, y->namelen);
    same_bytes(i, "type", x->type, x->typelen, y->type, y->typelen);
    same_bytes(i, "payload", x->payload, x->payload_len, y->payload, y->payload_len);
    same_bytes(i, "key", x->key, x->key_len, y->key, y->key_len);
    same_bytes(i, "cron", x->cron, x->cronlen, y->cron, y->cronlen);
}

static int name_index(const char *s, size_t len)
{
    for (int k = 0; k < NNAMES; k++)
        if (strlen(names[k]) == len && memcmp(names[k], s, len) == 0)
            return k;
    return -1;
}

/* Sends RB and PB (the same requests) and compares every answer. */
static void run(rrecur_batch *rb, pgr_batch *pb)
{
    const char **argv;
    const size_t *argvlen;
    const char *const *values;
    redisReply *rr;
    PGresult *pr;
    int argc;
    size_t n = rrecur_batch_count(rb);

    if (n == 0)
        return;
    rrecur_batch_set_now(rb, now_ns);
    pgr_batch_set_now(pb, now_ns);
    if (rrecur_batch_command(rb, sha, &argc, &argv, &argvlen) != SLUICE_OK ||
        pgr_batch_params(pb, &values) != SLUICE_OK)
        die("encoding failed");
    rr = redisCommandArgv(rc, argc, argv, argvlen);
    if (!rr || rr->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "redis: %s\n", rr ? rr->str : rc->errstr);
        exit(1);
    }
    pr = PQexecParams(pc, PGR_CALL_SQL, PGR_CALL_NPARAMS, NULL, values, NULL, NULL,
                      PGR_CALL_RESULT_FORMAT);
    if (PQresultStatus(pr) != PGRES_TUPLES_OK) {
        fprintf(stderr, "recur_diff: seed %u step %d: postgresql: %s", seed, step,
                PQerrorMessage(pc));
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        rrecur_result x, y;
        rrecur_series sx, sy;

        if (rrecur_batch_result(rb, rr, i, &x) != SLUICE_OK) {
            const redisReply *e =
                rr->type == REDIS_REPLY_ARRAY && i < rr->elements ? rr->element[i] : NULL;

            fprintf(stderr,
                    "recur_diff: seed %u step %d request %zu (op %d): redis answered "
                    "'%s'\n",
                    seed, step, i, (int)rrecur_batch_op(rb, i),
                    e && e->type == REDIS_REPLY_ARRAY && e->elements > 0 &&
                            e->element[0]->type == REDIS_REPLY_STRING
                        ? e->element[0]->str
                        : "?");
            exit(1);
        }
        if (pgr_batch_result(pb, pr, i, &y) != SLUICE_OK)
            die("postgresql answer unreadable");
        nreqs++;
        SAME("rc", x.rc, y.rc);
        SAME("now", x.now_ns, y.now_ns);
        SAME("version", x.version, y.version);
        SAME("next", x.next_ns, y.next_ns);
        SAME("deleted", x.deleted, y.deleted);
        SAME("fired", x.fired, y.fired);
        SAME("id", x.id, y.id);
        SAME("runs", x.runs, y.runs);
        SAME("skipped", x.skipped, y.skipped);
        SAME("nseries", x.nseries, y.nseries);
        SAME("earliest", x.earliest_ns, y.earliest_ns);
        SAME("more", x.more, y.more);
        same_bytes(i, "message", x.msg, x.msglen, y.msg, y.msglen);
        if (x.rc == SLUICE_EINVAL)
            ninval++;
        if (x.rc == SLUICE_ESTALE)
            nstale++;
        if (x.fired) {
            nfired++;
            if (x.id > maxid)
                maxid = x.id;
        }
        if (rrecur_batch_op(rb, i) == RRECUR_SET && x.rc == 0) {
            known_ver[req_name[i]] = x.version;
            known_next[req_name[i]] = x.next_ns;
        } else if (rrecur_batch_op(rb, i) == RRECUR_FIRE && x.rc == 0) {
            known_next[req_name[i]] = x.next_ns;
        }
        for (size_t k = 0; k < x.nseries; k++) {
            int ix;

            if (rrecur_batch_series(rb, rr, i, k, &sx) != SLUICE_OK ||
                pgr_batch_series(pb, pr, i, k, &sy) != SLUICE_OK)
                die("series unreadable");
            same_series(i, &sx, &sy);
            nlisted++;
            ix = name_index(sx.name, sx.namelen);
            if (ix >= 0) {
                known_ver[ix] = sx.version;
                known_next[ix] = sx.next_ns;
                known_every[ix] = sx.interval_ns;
            }
        }
    }
    freeReplyObject(rr);
    PQclear(pr);
}

/* Runs one task request (a claim of `job`, or INFO of task id) on both stores, comparing. */
static void task_both(rtask_op op, uint64_t id)
{
    static const char *const types[] = {"job"};
    static const size_t lens[] = {3};
    rtask_batch *tb;
    pgt_batch *qb;
    const char **argv;
    const size_t *argvlen;
    const char *const *values;
    rtask_claim c = {.types = types, .typelens = lens, .ntypes = 1, .count = 2};
    rtask_done d = {.id = id, .cost = -1, .retry_after_ns = -1};
    rtask_result x, y;
    redisReply *rr;
    PGresult *pr;
    int argc;
    size_t i = 0;

    if (rtask_batch_new(NULL, &tb) != SLUICE_OK || pgt_batch_new(&qb) != SLUICE_OK)
        die("task batch");
    rtask_batch_set_now(tb, now_ns);
    pgt_batch_set_now(qb, now_ns);
    if ((op == RTASK_CLAIM ? rtask_batch_add_claim(tb, &c) : rtask_batch_add_info(tb, &d)) != 0 ||
        (op == RTASK_CLAIM ? pgt_batch_add_claim(qb, &c) : pgt_batch_add_info(qb, &d)) != 0 ||
        rtask_batch_command(tb, sha, &argc, &argv, &argvlen) != SLUICE_OK ||
        pgt_batch_params(qb, &values) != SLUICE_OK)
        die("task encoding");
    rr = redisCommandArgv(rc, argc, argv, argvlen);
    if (!rr || rr->type == REDIS_REPLY_ERROR)
        die("redis task call");
    pr = PQexecParams(pc, PGT_CALL_SQL, PGT_CALL_NPARAMS, NULL, values, NULL, NULL,
                      PGT_CALL_RESULT_FORMAT);
    if (PQresultStatus(pr) != PGRES_TUPLES_OK)
        die("postgresql task call");
    if (rtask_batch_result(tb, rr, 0, &x) != SLUICE_OK ||
        pgt_batch_result(qb, pr, 0, &y) != SLUICE_OK)
        die("task answer unreadable");
    SAME("task rc", x.rc, y.rc);
    SAME("task delivered", x.ndelivered, y.ndelivered);
    for (size_t k = 0; x.rc == 0 && (op == RTASK_INFO ? k < 1 : k < x.ndelivered); k++) {
        rtask_task tx, ty;

        if (rtask_batch_task(tb, rr, 0, k, &tx) != SLUICE_OK ||
            pgt_batch_task(qb, pr, 0, k, &ty) != SLUICE_OK)
            die("task unreadable");
        SAME("task id", tx.id, ty.id);
        SAME("task state", tx.state, ty.state);
        SAME("task attempt", tx.attempt, ty.attempt);
    }
    freeReplyObject(rr);
    PQclear(pr);
    rtask_batch_free(tb);
    pgt_batch_free(qb);
}

/* The occurrence every FIRE with a task adds: a task of type job without links. */
static rtask_add occurrence;

static void add_random(rrecur_batch *rb, pgr_batch *pb)
{
    int k = (int)rnd(NNAMES);
    const char *name = names[k];
    int a = -1, b = -1;

    switch (rnd(10)) {
    case 0:
    case 1: { /* SET */
        sluice_recurring_spec s;
        char payload[32];

        memset(&s, 0, sizeof s);
        s.name = name;
        s.type = "job";
        snprintf(payload, sizeof payload, "{\"s\":%d}", step);
        s.payload = payload;
        s.payload_len = strlen(payload);
        if (rnd(5) == 0)
            s.cron = rnd(2) ? "* * * * *" : "*/5 * * * *";
        else
            s.interval_ns = (int64_t)(1 + rnd(3000)) * MS;
        known_every[k] = s.interval_ns;
        if (rnd(3) == 0)
            s.start_ns = now_ns + ((int64_t)rnd(5000) - 2000) * MS;
        if (rnd(4) == 0)
            s.end_ns = (s.start_ns ? s.start_ns : now_ns) + ((int64_t)rnd(20000) - 1000) * MS;
        if (rnd(3) == 0)
            s.max_runs = (int64_t)rnd(6);
        if (rnd(3) == 0) {
            s.key = "k1";
            s.key_len = 2;
        }
        a = rrecur_batch_add_set(rb, &s);
        b = pgr_batch_add_set(pb, &s);
        break;
    }
    case 2:
        a = rrecur_batch_add_del(rb, name, strlen(name));
        b = pgr_batch_add_del(pb, name, strlen(name));
        break;
    case 3:
        a = rrecur_batch_add_info(rb, name, strlen(name));
        b = pgr_batch_add_info(pb, name, strlen(name));
        break;
    case 4: {
        size_t max = rnd(2) ? 1 + rnd(2) : RRECUR_LIST_MAX;

        a = rrecur_batch_add_list(rb, max);
        b = pgr_batch_add_list(pb, max);
        break;
    }
    default: { /* FIRE: usually the known version and next, sometimes stale */
        rrecur_fire f;
        int64_t every = known_every[k] > 0 ? known_every[k] : SEC;

        memset(&f, 0, sizeof f);
        f.name = name;
        f.namelen = strlen(name);
        f.version = known_ver[k] ? known_ver[k] : 1;
        f.expected_ns = known_next[k];
        /* Sometimes a stale time (not past an ended series' next, INT64_MAX). */
        if (rnd(6) == 0 && f.expected_ns <= INT64_MAX - MS)
            f.expected_ns += MS;
        if (rnd(8) == 0)
            f.version++;
        f.missed = rnd(4) == 0 ? (int64_t)rnd(3) : 0;
        f.next_ns = rnd(10) == 0 || f.expected_ns > INT64_MAX / 2
                        ? INT64_MAX
                        : f.expected_ns + every * (1 + f.missed);
        if (rnd(4) != 0)
            f.task = &occurrence;
        a = rrecur_batch_add_fire(rb, &f);
        b = pgr_batch_add_fire(pb, &f);
        break;
    }
    }
    if (a >= 0 && a < 16)
        req_name[a] = k;
    if (a != b || a < 0) {
        fprintf(stderr, "recur_diff: seed %u step %d: encoders differ or refuse: %d %d\n", seed,
                step, a, b);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    rrecur_batch *rb;
    pgr_batch *pb;
    int steps;

    if (argc < 4) {
        fprintf(stderr, "usage: sluice_recur_diff REDIS-PORT PG-CONNINFO SEED [STEPS]\n");
        return 2;
    }
    redis_connect(atoi(argv[1]));
    pc = pg_connect(argv[2]);
    pg_exec(pc, "TRUNCATE sluice_recur, sluice_task, sluice_task_wake, sluice_limit_state");
    pg_exec(pc, "ALTER SEQUENCE sluice_task_id_seq RESTART");
    pg_exec(pc, "ALTER SEQUENCE sluice_recur_ver_seq RESTART");
    pg_exec(pc, "UPDATE sluice_task_clock SET now_ns = 0");
    seed = (unsigned)strtoul(argv[3], NULL, 10);
    steps = argc > 4 ? atoi(argv[4]) : 1000;
    rng = 0x9e3779b97f4a7c15u ^ ((uint64_t)seed * 0x100000001b3u);
    now_ns = INT64_C(1700000000000000000) + (int64_t)seed * 1000 * SEC;
    memset(&occurrence, 0, sizeof occurrence);
    occurrence.type = "job";
    occurrence.typelen = 3;
    occurrence.payload = "{}";
    occurrence.payload_len = 2;
    occurrence.lease_ns = 5 * SEC;
    occurrence.retry.max_attempts = 1;
    if (rrecur_batch_new(NULL, &rb) != SLUICE_OK || pgr_batch_new(&pb) != SLUICE_OK)
        die("batch");
    for (step = 0; step < steps; step++) {
        uint64_t t = rnd(20);
        size_t n = 1 + rnd(4);

        now_ns += t == 0   ? -(int64_t)rnd(2000) * MS
                  : t == 1 ? (int64_t)rnd(600) * SEC
                           : (int64_t)rnd(1500) * MS;
        rrecur_batch_reset(rb);
        pgr_batch_reset(pb);
        for (size_t j = 0; j < n; j++)
            add_random(rb, pb);
        run(rb, pb);
        if (rnd(3) == 0)
            task_both(RTASK_CLAIM, 0);
        if (step % 20 == 19)
            for (uint64_t id = 1; id <= maxid; id++)
                task_both(RTASK_INFO, id);
    }
    printf("recur_diff: seed %u: %d steps, %ld requests, %ld fired, %ld stale, %ld series "
           "listed, %ld refused, %ld fields compared, all equal\n",
           seed, steps, nreqs, nfired, nstale, nlisted, ninval, checks);
    rrecur_batch_free(rb);
    pgr_batch_free(pb);
    redisFree(rc);
    PQfinish(pc);
    return 0;
}
