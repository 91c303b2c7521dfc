/* SPDX-License-Identifier: MIT */
/*
 * sluice_tasks_diff: the differential test of the PostgreSQL task queue (sluice_tasks_call,
 * src/store/pg/002_tasks.sql, through store/pg_tasks.c) against the Redis store script's task
 * ops (src/store/redis/tasks.lua, through store/redis_tasks.c), and a concurrency check of the
 * PostgreSQL claim.
 *
 * Differential: one random sequence of task requests (adds with chains over rate, concurrency,
 * fixed and sliding window links, priorities, delays, task keys and retry policies; claims of
 * one or two types; acks with and without COST, fails with RETRY, DEAD and RETRY_AFTER,
 * touches, cancels and infos, with right, stale and unknown ids and attempts), one to three per
 * call, at the same injected times (rtask_batch_set_now / pgt_batch_set_now), goes to a
 * throwaway redis-server and a throwaway PostgreSQL, one connection each. Every field of every
 * answer is compared (status, time, ids, states, attempts, lease ends, replaced, cancelled,
 * delivered tasks with their payloads in order, failed counts, next_wake_ns, more), and INFO of
 * every task every 50 steps. Parking and waking happen: the limits are small.
 *
 * Race (--race N TASKS): N processes claim, ack, fail and let leases lapse on one PostgreSQL at
 * once with the database's own clock; no (task, attempt) is ever delivered twice, no call fails
 * (a deadlock would be an error), and every task ends done.
 *
 * Usage: sluice_tasks_diff REDIS-PORT PG-CONNINFO SEED [STEPS]
 *        sluice_tasks_diff --race PG-CONNINFO NPROC NTASKS
 * Prints one line per run; exits 1 on the first mismatch (with the seed, step and field), 2 on
 * a setup error. TRACE=1 prints every call.
 */
#include <inttypes.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DIFF_NAME "tasks_diff"
#include "diff_common.h"
#include "sluice/limit.h"
#include "store/pg_limits.h"
#include "store/pg_tasks.h"
#include "store/redis_tasks.h"

static rtask_batch *RB;
static pgt_batch *PB;
/* The plain mood (SLUICE_TASKS_PLAIN set): mostly tasks without links, task key or delay, in
 * calls of up to eight requests, so that the PostgreSQL function's set-based runs (003) of
 * consecutive adds, claims and acks are taken, and left for the per-request path in between. */
static int plain;
/* The shadow mood (SLUICE_TASKS_SHADOW set): a third of the links in shadow mode (a definition
 * ending in " s"), whose denials let the task through uncharged. Its own mood, so that the
 * other moods' sequences stay as they were. */
static int shadow_mood;
static long nshadow_links;
static long ncalls, nreqs, ndelivered, nparked_claims, nfailed_tasks, nparked_seen, nparked_behind,
    nmore, nbusy, nbusy_parked, nstale_groups;

static void pg_reset(PGconn *c)
{
    pg_exec(c, "TRUNCATE sluice_task, sluice_task_wake, sluice_limit_state, sluice_limit_audit");
    pg_exec(c, "ALTER SEQUENCE sluice_task_id_seq RESTART");
    pg_exec(c, "UPDATE sluice_task_clock SET now_ns = 0");
}

/* ---- one request on both sides ----------------------------------------------------------- */

static void same_task(size_t i, const rtask_task *x, const rtask_task *y)
{
    SAME("task id", x->id, y->id);
    SAME("task attempt", x->attempt, y->attempt);
    SAME("task lease_until", x->lease_until_ns, y->lease_until_ns);
    SAME("task state", x->state, y->state);
    SAME("task fail_reason", x->fail_reason, y->fail_reason);
    SAME("task priority", x->priority, y->priority);
    SAME("task submitted", x->submitted_ns, y->submitted_ns);
    SAME("task not_before", x->not_before_ns, y->not_before_ns);
    SAME("task units", x->units, y->units);
    SAME("task park_link", x->park_link, y->park_link);
    SAME("task position", x->position, y->position);
    SAME("task queue_length", x->queue_length, y->queue_length);
    SAME("task wake_ms", x->wake_ms, y->wake_ms);
    same_bytes(i, "task type", x->type, x->typelen, y->type, y->typelen);
    same_bytes(i, "task payload", x->payload, x->payload_len, y->payload, y->payload_len);
    same_bytes(i, "task key", x->task_key, x->task_key_len, y->task_key, y->task_key_len);
    same_bytes(i, "task message", x->fail_message, x->fail_message_len, y->fail_message,
               y->fail_message_len);
}

/* What the run knows of each task: its last delivery (for ACK/FAIL/TOUCH) and whether it is
 * known finished. */
#define MAXTASKS 20000
static int deliv_att[MAXTASKS];
static unsigned char finished[MAXTASKS];
static uint64_t nadded;
static uint64_t live[64];
static size_t nlive;

static void note_delivery(uint64_t id, int attempt)
{
    if (id < MAXTASKS)
        deliv_att[id] = attempt;
    if (nlive < sizeof live / sizeof live[0])
        live[nlive++] = id;
    else
        live[rnd(nlive)] = id;
    ndelivered++;
}

/* Sends both batches, compares every answer, and empties them. */
static void run_both(void)
{
    int argc;
    const char **argv;
    const size_t *argvlen;
    const char *const *values;
    redisReply *rr;
    PGresult *pr;
    size_t n = rtask_batch_count(RB);

    if (n == 0)
        return;
    rtask_batch_set_now(RB, now_ns);
    pgt_batch_set_now(PB, now_ns);
    if (rtask_batch_command(RB, sha, &argc, &argv, &argvlen) != SLUICE_OK ||
        pgt_batch_params(PB, &values) != SLUICE_OK)
        die("encoding failed");
    rr = redisCommandArgv(rc, argc, argv, argvlen);
    if (!rr || rr->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "redis: %s\n", rr ? rr->str : rc->errstr);
        exit(1);
    }
    pr = PQexecParams(pc, PGT_CALL_SQL, PGT_CALL_NPARAMS, NULL, values, NULL, NULL,
                      PGT_CALL_RESULT_FORMAT);
    if (PQresultStatus(pr) != PGRES_TUPLES_OK) {
        fprintf(stderr, "tasks_diff: seed %u step %d: postgresql: %s", seed, step,
                PQerrorMessage(pc));
        exit(1);
    }
    ncalls++;
    for (size_t i = 0; i < n; i++) {
        rtask_result x, y;
        rtask_op op = rtask_batch_op(RB, i);

        nreqs++;
        SAME("redis parse", 0, rtask_batch_result(RB, rr, i, &x));
        SAME("pg parse", 0, pgt_batch_result(PB, pr, i, &y));
        if (getenv("TRACE"))
            fprintf(stderr, "%d.%zu op %d: rc %d/%d id %llu/%llu st %d/%d att %d/%d nd %zu/%zu\n",
                    step, i, op, x.rc, y.rc, (unsigned long long)x.id, (unsigned long long)y.id,
                    x.state, y.state, x.attempt, y.attempt, x.ndelivered, y.ndelivered);
        SAME("rc", x.rc, y.rc);
        SAME("now", x.now_ns, y.now_ns);
        SAME("id", x.id, y.id);
        SAME("replaced", x.replaced, y.replaced);
        SAME("busy by max_parked", x.busy_parked, y.busy_parked);
        nbusy += x.rc == SLUICE_EBUSY && op == RTASK_ADD;
        nstale_groups += x.rc == SLUICE_ESTALE && op == RTASK_ADD;
        nbusy_parked += x.rc == SLUICE_EBUSY && op == RTASK_ADD && x.busy_parked;
        SAME("state", x.state, y.state);
        SAME("attempt", x.attempt, y.attempt);
        SAME("lease_until", x.lease_until_ns, y.lease_until_ns);
        SAME("cancelled", x.cancelled, y.cancelled);
        SAME("delivered", x.ndelivered, y.ndelivered);
        SAME("failed", x.nfailed, y.nfailed);
        SAME("next_wake", x.next_wake_ns, y.next_wake_ns);
        SAME("more", x.more, y.more);
        same_bytes(i, "msg", x.msg, x.msglen, y.msg, y.msglen);
        if (x.rc != SLUICE_OK)
            continue;
        if (op == RTASK_ADD && x.id > nadded)
            nadded = x.id;
        if ((op == RTASK_ACK || op == RTASK_CANCEL ||
             (op == RTASK_FAIL && x.state == SLUICE_TASK_FAILED)) &&
            x.state >= SLUICE_TASK_DONE && x.id < MAXTASKS)
            finished[x.id] = 1;
        nfailed_tasks += (long)x.nfailed;
        nmore += x.more;
        if (op == RTASK_CLAIM) {
            nparked_claims += x.ndelivered == 0;
            for (size_t k = 0; k < x.ndelivered; k++) {
                rtask_task a, b;

                SAME("redis task", 0, rtask_batch_task(RB, rr, i, k, &a));
                SAME("pg task", 0, pgt_batch_task(PB, pr, i, k, &b));
                same_task(i, &a, &b);
                note_delivery(a.id, a.attempt);
            }
        } else if (op == RTASK_INFO) {
            rtask_task a, b;

            SAME("redis info", 0, rtask_batch_task(RB, rr, i, 0, &a));
            SAME("pg info", 0, pgt_batch_task(PB, pr, i, 0, &b));
            same_task(i, &a, &b);
            if (a.id < MAXTASKS && a.state >= SLUICE_TASK_DONE)
                finished[a.id] = 1;
            nparked_seen += a.state == SLUICE_TASK_PARKED;
            nparked_behind += a.state == SLUICE_TASK_PARKED && a.position > 0;
        }
    }
    freeReplyObject(rr);
    PQclear(pr);
    rtask_batch_reset(RB);
    pgt_batch_reset(PB);
}

/* ---- the random run ---------------------------------------------------------------------- */

static sluice_limit_def drate, dconc, dwin, dslide;
static const char *const keys[] = {"a", "b", "c"};
static const char *const limit_ids[] = {"r", "c", "w", "s"};

static rtask_link link_of(int which, const char *key)
{
    static const sluice_limit_def *const defs[] = {&drate, &dconc, &dwin, &dslide};
    rtask_link l;

    memset(&l, 0, sizeof l);
    l.lim.def = defs[which];
    l.lim.limit_id = limit_ids[which];
    l.lim.key = key;
    l.lim.keylen = strlen(key);
    l.lim.units = rnd(6) == 0 ? 2 : 1;
    if (which != 1 && rnd(20) == 0)
        l.flags |= RTASK_LINK_REJECT;
    if ((which == 0 || which == 2) && rnd(4) == 0)
        l.flags |= RTASK_LINK_SETTLE;
    if (shadow_mood && rnd(3) == 0) {
        l.lim.shadow = 1;
        nshadow_links++;
    }
    return l;
}

/* The last lease a THROTTLE took on the concurrency limit (its key and id), for adds of group
 * slots: it lives 2 s (dconc's TTL), then the tasks of its group ask their own unit. Not in the
 * plain mood yet: with them there, plain seed 3 meets a wait queue armed 1 ms apart on the two
 * stores at step 1953 (then a claim's next_wake at step 1958), a difference not found yet. */
static const char *group_key;
static uint64_t group_lease;
static long ngroup_adds;

static void random_add(void)
{
    /* Chains: none, rate, concurrency, rate+concurrency, window+concurrency, sliding,
     * rate+window, rate twice on one key (one state judged once). */
    static const int chains[][3] = {{-1},    {0, -1},    {1, -1},    {0, 1, -1}, {2, 1, -1},
                                    {3, -1}, {0, 2, -1}, {0, 0, -1}, {2, -1},    {3, 1, -1}};
    const int *ch =
        plain && rnd(4) != 0 ? chains[0] : chains[rnd(sizeof chains / sizeof chains[0])];
    const char *key = rnd(5) < 3 ? "a" : keys[rnd(3)]; /* a hot key: queues form */
    rtask_link links[3];
    char payload[48], tkey[8];
    rtask_add a;
    size_t n = 0, glink = 0;

    if (group_lease && !plain && rnd(4) == 0) {
        /* A group slot: the concurrency link on the lease's key, sometimes behind a rate. */
        static const int grouped[][3] = {{1, -1}, {0, 1, -1}};

        ch = grouped[rnd(2)];
        key = group_key;
        glink = ch[0] == 1 ? 1 : 2;
    }
    for (; ch[n] >= 0; n++)
        links[n] = link_of(ch[n], key);
    snprintf(payload, sizeof payload, "{\"k\":\"%s\",\"n\":%d}", key, step);
    snprintf(tkey, sizeof tkey, "tk%d", (int)rnd(6));
    memset(&a, 0, sizeof a);
    a.type = rnd(4) == 0 ? "v" : "w";
    a.typelen = 1;
    a.payload = payload;
    a.payload_len = strlen(payload);
    if (rnd(plain ? 30 : 6) == 0) {
        a.task_key = tkey;
        a.task_key_len = strlen(tkey);
    }
    a.links = links;
    a.nlinks = n;
    a.priority = (int64_t)rnd(3) - 1;
    a.delay_ns =
        rnd(plain ? 12 : 4) == 0 ? (int64_t)rnd(20) * 100 * MS + (int64_t)rnd(3) * 77777 : 0;
    a.lease_ns = (1 + (int64_t)rnd(3)) * SEC;
    a.retry.max_attempts = 1 + (int)rnd(3);
    a.retry.backoff = rnd(2) ? SLUICE_BACKOFF_EXPONENTIAL : SLUICE_BACKOFF_FIXED;
    a.retry.base_ns = (int64_t)rnd(5) * 300 * MS;
    a.retry.max_ns = 2 * SEC;
    a.retry.throttle_retries = (int)rnd(2);
    a.charge_redelivery = rnd(3) == 0;
    a.units = (int64_t)rnd(3);
    if (glink) {
        a.group_link = glink;
        /* Sometimes no lease: an id no lease has (every id is a store time, past 2^60; a
         * made-up id near a real one may be a task's own lease, whose ids the stores keep
         * alike only as far as their answers show). */
        a.group_lease = rnd(8) == 0 ? 1 : group_lease;
        ngroup_adds++;
    }
    if (rtask_batch_add_add(RB, &a) < 0 || pgt_batch_add_add(PB, &a) < 0)
        die("add refused");
}

static void random_claim(void)
{
    static const char *const w[] = {"w"}, *const v[] = {"v"}, *const wv[] = {"w", "v"};
    static const size_t one[] = {1, 1};
    int pick = (int)rnd(plain ? 8 : 4);
    rtask_claim c = {.types = pick == 0   ? (const char *const *)v
                              : pick == 1 ? (const char *const *)wv
                                          : (const char *const *)w,
                     .typelens = one,
                     .ntypes = pick == 1 ? 2 : 1,
                     .count = 1 + (size_t)rnd(3)};

    if (rtask_batch_add_claim(RB, &c) < 0 || pgt_batch_add_claim(PB, &c) < 0)
        die("claim refused");
}

static void random_done(int kind)
{
    char msg[16];
    rtask_done d = {.cost = -1, .retry_after_ns = -1};
    int r1, r2;

    if (nlive > 0 && rnd(8) != 0) {
        size_t pick = (size_t)rnd(nlive);

        d.id = live[pick];
        d.attempt = d.id < MAXTASKS ? deliv_att[d.id] : 0;
        if (rnd(6) == 0)
            d.attempt = rnd(2) ? d.attempt + 1 : 0;
        if (rnd(3) == 0)
            live[pick] = live[--nlive];
    } else {
        d.id = 1 + rnd(nadded + 2); /* sometimes a task that does not exist */
    }
    switch (kind) {
    case 0:
        if (rnd(3) == 0)
            d.cost = (int64_t)rnd(4);
        r1 = rtask_batch_add_ack(RB, &d);
        r2 = pgt_batch_add_ack(PB, &d);
        break;
    case 1:
        d.mode = rnd(6) == 0 ? SLUICE_FAIL_MODE_DEAD : SLUICE_FAIL_MODE_RETRY;
        if (d.mode == SLUICE_FAIL_MODE_RETRY && rnd(2))
            d.retry_after_ns = (int64_t)rnd(30) * 100 * MS;
        if (rnd(2)) {
            snprintf(msg, sizeof msg, "oops %d", step);
            d.message = msg;
            d.message_len = strlen(msg);
        }
        r1 = rtask_batch_add_fail(RB, &d);
        r2 = pgt_batch_add_fail(PB, &d);
        break;
    case 2:
        r1 = rtask_batch_add_touch(RB, &d);
        r2 = pgt_batch_add_touch(PB, &d);
        break;
    case 3:
        r1 = rtask_batch_add_cancel(RB, &d);
        r2 = pgt_batch_add_cancel(PB, &d);
        break;
    default:
        r1 = rtask_batch_add_info(RB, &d);
        r2 = pgt_batch_add_info(PB, &d);
        break;
    }
    if (r1 < 0 || r2 < 0)
        die("request refused");
}

/* THROTTLE (a DECIDE or PEEK of one or two links over the tasks' limits and keys) through the
 * limits call of both stores, at the same time: tasks and direct callers share one budget on
 * both, and their answers (leases included) must agree. */
static rlim_batch *LRB;
static pgl_batch *LPB;
static long nthrottles;

static void throttle_both(void)
{
    static const int pairs[][2] = {{0, -1}, {1, -1}, {2, -1}, {3, -1}, {0, 1}, {2, 1}};
    const int *pr = pairs[rnd(sizeof pairs / sizeof pairs[0])];
    const char *key = rnd(5) < 3 ? "a" : keys[rnd(3)];
    rlim_op op = rnd(4) == 0 ? RLIM_PEEK : RLIM_DECIDE;
    rlim_link ls[2];
    size_t n = pr[1] >= 0 ? 2 : 1, i = 0;
    sluice_decision dx[2], dy[2];
    rlim_result x, y;
    int argc;
    const char **argv;
    const size_t *argvlen;
    const char *const *values;
    redisReply *rr;
    PGresult *pgr;

    for (size_t k = 0; k < n; k++)
        ls[k] = link_of(pr[k], key).lim;
    rlim_batch_reset(LRB);
    pgl_batch_reset(LPB);
    rlim_batch_set_now(LRB, now_ns);
    pgl_batch_set_now(LPB, now_ns);
    if (rlim_batch_add(LRB, op, ls, n, NULL) < 0 || pgl_batch_add(LPB, op, ls, n, NULL) < 0 ||
        rlim_batch_command(LRB, sha, &argc, &argv, &argvlen) != SLUICE_OK ||
        pgl_batch_params(LPB, &values) != SLUICE_OK)
        die("throttle encoding");
    rr = redisCommandArgv(rc, argc, argv, argvlen);
    pgr = PQexecParams(pc, PGL_CALL_SQL, PGL_CALL_NPARAMS, NULL, values, NULL, NULL, 0);
    if (!rr || rr->type == REDIS_REPLY_ERROR || PQresultStatus(pgr) != PGRES_TUPLES_OK)
        die("throttle call");
    SAME("throttle redis parse", 0, rlim_batch_result(LRB, rr, 0, &x, dx));
    SAME("throttle pg parse", 0, pgl_batch_result(LPB, pgr, 0, &y, dy));
    SAME("throttle rc", x.rc, y.rc);
    SAME("throttle now", x.now_ns, y.now_ns);
    SAME("throttle allowed", x.chain.allowed, y.chain.allowed);
    SAME("throttle denied_by", x.chain.denied_by, y.chain.denied_by);
    SAME("throttle retry", x.chain.retry_after_ns, y.chain.retry_after_ns);
    for (size_t k = 0; k < n; k++) {
        SAME("throttle link allowed", dx[k].allowed, dy[k].allowed);
        SAME("throttle link remaining", dx[k].remaining, dy[k].remaining);
        SAME("throttle link retry", dx[k].retry_after_ns, dy[k].retry_after_ns);
        SAME("throttle link reset", dx[k].reset_after_ns, dy[k].reset_after_ns);
        SAME("throttle link lease", dx[k].lease_id, dy[k].lease_id);
        if (pr[k] == 1 && dx[k].lease_id > 0) {
            group_key = key;
            group_lease = dx[k].lease_id;
        }
    }
    freeReplyObject(rr);
    PQclear(pgr);
    nthrottles++;
}

static size_t unfinished(void)
{
    size_t n = 0;

    for (uint64_t id = 1; id <= nadded && id < MAXTASKS; id++)
        n += !finished[id];
    return n;
}

/* The caps' counts (unfinished, parked) each store keeps, against what PostgreSQL's task rows
 * say: all three agree after every call. */
static void same_counts(void)
{
    PGresult *r = PQexec(pc, "SELECT (SELECT coalesce(sum(u), 0) FROM sluice_task_count), "
                             "(SELECT coalesce(sum(p), 0) FROM sluice_task_count), "
                             "count(*) FILTER (WHERE state < 4), count(*) FILTER (WHERE state = 2) "
                             "FROM sluice_task");
    redisReply *rr = redisCommand(rc, "HMGET sluice:{all}:count u p");

    if (PQresultStatus(r) != PGRES_TUPLES_OK || !rr || rr->type != REDIS_REPLY_ARRAY ||
        rr->elements != 2 || rr->element[0]->type != REDIS_REPLY_STRING ||
        rr->element[1]->type != REDIS_REPLY_STRING)
        die("counts");
    size_t i = 0; /* SAME's request: none */

    SAME("unfinished count (redis: the script's; pg: sluice_task_count's)",
         atoll(rr->element[0]->str), atoll(PQgetvalue(r, 0, 0)));
    SAME("parked count (redis: the script's; pg: sluice_task_count's)", atoll(rr->element[1]->str),
         atoll(PQgetvalue(r, 0, 1)));
    SAME("unfinished count (redis: the script's; pg: the task rows')", atoll(rr->element[0]->str),
         atoll(PQgetvalue(r, 0, 2)));
    SAME("parked count (redis: the script's; pg: the task rows')", atoll(rr->element[1]->str),
         atoll(PQgetvalue(r, 0, 3)));
    PQclear(r);
    freeReplyObject(rr);
}

static void info_all(void)
{
    for (uint64_t id = 1; id <= nadded + 1 && id < MAXTASKS; id++) {
        rtask_done d = {.id = id, .cost = -1, .retry_after_ns = -1};

        if (finished[id] && rnd(4) != 0)
            continue;
        if (rtask_batch_add_info(RB, &d) < 0 || pgt_batch_add_info(PB, &d) < 0)
            die("info refused");
    }
    run_both();
    same_counts();
}

static void differential(int steps)
{
    sluice_limit_def_init(&drate, SLUICE_RATE);
    drate.limit = 2;
    drate.period_ns = SEC;
    drate.burst = 2;
    sluice_limit_def_init(&dconc, SLUICE_CONCURRENCY);
    dconc.limit = 2;
    dconc.ttl_ns = 2 * SEC;
    sluice_limit_def_init(&dwin, SLUICE_WINDOW);
    dwin.limit = 3;
    dwin.period_ns = 2 * SEC;
    sluice_limit_def_init(&dslide, SLUICE_SLIDING);
    dslide.limit = 3;
    dslide.period_ns = 3 * SEC / 2;
    dconc.horizon_ns = 0;
    drate.horizon_ns = rnd(2) ? 0 : 3 * SEC;
    for (step = 0; step < steps; step++) {
        int nr = plain ? 1 + (int)rnd(8) : rnd(5) == 0 ? 2 + (int)rnd(2) : 1;
        /* Moods of 100 steps: adds outpace claims (queues and wait queues fill up), or the
         * other way round (they drain), so that parking and waking keep happening. */
        int adds = (step / 100) % 2 == 0 ? 10 : 5;

        now_ns += (int64_t)rnd(8) * 100 * MS + (rnd(5) == 0 ? (int64_t)rnd(MS) : 0);
        for (int r = 0; r < nr; r++) {
            int op = (int)rnd(20);

            if (op < adds && unfinished() < 60)
                random_add();
            else if (op < 12)
                random_claim();
            else if (op < 15)
                random_done(0);
            else if (op < 17)
                random_done(1);
            else if (op < 18)
                random_done(2);
            else if (op < 19)
                random_done(3);
            else
                random_done(4);
        }
        run_both();
        if (rnd(8) == 0)
            throttle_both();
        if (step % 700 == 350) {
            /* A flood: 90 adds in one call, then one claim of up to 100, so that the claim's
             * bounds (RTASK_CLAIM_SCAN tasks gated, lapses taken back) cut it short. */
            for (int k = 0; k < 90; k++)
                random_add();
            run_both();
            {
                static const char *const w[] = {"w"};
                static const size_t one[] = {1};
                rtask_claim c = {.types = w, .typelens = one, .ntypes = 1, .count = 100};

                if (rtask_batch_add_claim(RB, &c) < 0 || pgt_batch_add_claim(PB, &c) < 0)
                    die("claim refused");
                run_both();
            }
        }
        if (step % 50 == 49)
            info_all();
    }
    info_all();
    printf("differential seed %u: %d steps, %ld calls, %ld requests, %llu tasks, %ld deliveries, "
           "%ld empty claims, %ld tasks failed by their limits, %ld parked tasks seen by INFO "
           "(%ld behind another), %ld links in shadow mode, "
           "%ld claims cut short by a bound, %ld THROTTLEs between them, %ld adds refused by the "
           "caps (%ld by max_parked), %ld adds of group slots (%ld refused NOLEASE), %ld checks, "
           "every answer equal\n",
           seed, steps, ncalls, nreqs, (unsigned long long)nadded, ndelivered, nparked_claims,
           nfailed_tasks, nparked_seen, nparked_behind, nshadow_links, nmore, nthrottles, nbusy,
           nbusy_parked, ngroup_adds, nstale_groups, checks);
}

/* ---- the race ---------------------------------------------------------------------------- */

static PGresult *pg_call(PGconn *c, pgt_batch *b)
{
    const char *const *values;
    PGresult *r;

    if (pgt_batch_params(b, &values) != SLUICE_OK)
        die("params");
    r = PQexecParams(c, PGT_CALL_SQL, PGT_CALL_NPARAMS, NULL, values, NULL, NULL,
                     PGT_CALL_RESULT_FORMAT);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        fprintf(stderr, "race: postgresql: %s", PQerrorMessage(c));
        exit(3);
    }
    return r;
}

static int64_t mono_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * SEC + ts.tv_nsec;
}

static int ntasks_race;
static sluice_limit_def race_conc;

static void race_worker(const char *conninfo, int me, const char *log)
{
    PGconn *c = pg_connect(conninfo);
    FILE *out = fopen(log, "w");
    pgt_batch *b;
    pgl_batch *lb;
    static const char *const types[] = {"r"};
    static const size_t lens[] = {1};
    int64_t deadline = mono_ns() + 40 * SEC;

    if (!out || pgt_batch_new(&b) != SLUICE_OK || pgl_batch_new(&lb) != SLUICE_OK)
        die("race worker setup");
    rng = 0x12345u + (uint64_t)me * 7919u;
    while (mono_ns() < deadline) {
        rtask_claim cl = {.types = types, .typelens = lens, .ntypes = 1, .count = 3};
        rtask_result res;
        PGresult *r;
        uint64_t ids[3];
        int att[3];
        size_t n;

        if (rnd(3) == 0) {
            /* THROTTLE on the rows the tasks charge, from the same process: 001's call and
             * this one lock in one order, so they never deadlock either. */
            char k1[8], k2[8];
            rlim_link ls[2];
            const char *const *values;
            PGresult *q;

            snprintf(k1, sizeof k1, "k%d", (int)rnd(5));
            snprintf(k2, sizeof k2, "k%d", (int)rnd(65));
            memset(ls, 0, sizeof ls);
            ls[0].def = ls[1].def = &race_conc;
            ls[0].limit_id = ls[1].limit_id = "c";
            ls[0].key = k1;
            ls[0].keylen = strlen(k1);
            ls[1].key = k2;
            ls[1].keylen = strlen(k2);
            ls[0].units = ls[1].units = 1;
            pgl_batch_reset(lb);
            if (pgl_batch_add(lb, RLIM_PEEK, ls, 2, NULL) < 0 ||
                pgl_batch_params(lb, &values) != SLUICE_OK)
                die("race peek");
            q = PQexecParams(c, PGL_CALL_SQL, PGL_CALL_NPARAMS, NULL, values, NULL, NULL, 0);
            if (PQresultStatus(q) != PGRES_TUPLES_OK) {
                fprintf(stderr, "race: postgresql: %s", PQerrorMessage(c));
                exit(3);
            }
            PQclear(q);
        }
        pgt_batch_reset(b);
        pgt_batch_add_claim(b, &cl);
        r = pg_call(c, b);
        if (pgt_batch_result(b, r, 0, &res) != SLUICE_OK || res.rc != SLUICE_OK)
            die("race claim answer");
        n = res.ndelivered;
        for (size_t k = 0; k < n; k++) {
            rtask_task t;

            if (pgt_batch_task(b, r, 0, k, &t) != SLUICE_OK)
                die("race task");
            ids[k] = t.id;
            att[k] = t.attempt;
            fprintf(out, "%llu %d\n", (unsigned long long)t.id, t.attempt);
        }
        PQclear(r);
        if (n == 0) {
            PGresult *q = PQexec(c, "SELECT count(*) FROM sluice_task WHERE state < 4");

            if (PQresultStatus(q) == PGRES_TUPLES_OK && atoll(PQgetvalue(q, 0, 0)) == 0) {
                PQclear(q);
                break;
            }
            PQclear(q);
            usleep(5000);
            continue;
        }
        /* One call acks, fails or lets lapse what this one got. */
        pgt_batch_reset(b);
        for (size_t k = 0; k < n; k++) {
            rtask_done d = {.id = ids[k], .attempt = att[k], .cost = -1, .retry_after_ns = -1};
            uint64_t x = rnd(10);

            if (rnd(5) == 0)
                pgt_batch_add_touch(b, &d);
            if (x < 7)
                pgt_batch_add_ack(b, &d);
            else if (x < 9)
                pgt_batch_add_fail(b, &d);
            /* else: its lease lapses and another claim redelivers it */
        }
        /* A task another worker may hold: this call waits for its row, holding none of the
         * limit rows yet (the call's lock order), so no cycle can form. */
        {
            rtask_done q = {.id = 1 + rnd((uint64_t)ntasks_race), .cost = -1, .retry_after_ns = -1};

            pgt_batch_add_info(b, &q);
        }
        if (pgt_batch_count(b) > 0)
            PQclear(pg_call(c, b));
    }
    fclose(out);
    pgt_batch_free(b);
    pgl_batch_free(lb);
    PQfinish(c);
    exit(mono_ns() < deadline ? 0 : 4);
}

static int race(const char *conninfo, int nproc, int ntasks)
{
    sluice_limit_def *conc = &race_conc;
    PGconn *c = pg_connect(conninfo);
    pgt_batch *b;
    char logs[16][64];
    long total = 0, dups = 0, bad = 0;
    static unsigned char seen[200000];
    PGresult *r;

    if (nproc > 16 || ntasks * 4 > (int)sizeof seen)
        die("race: too many");
    pg_reset(c);
    ntasks_race = ntasks;
    sluice_limit_def_init(conc, SLUICE_CONCURRENCY);
    conc->limit = 3;
    conc->ttl_ns = SEC;
    if (pgt_batch_new(&b) != SLUICE_OK)
        die("race setup");
    for (int i = 0; i < ntasks; i++) {
        char key[8];
        rtask_link l;
        rtask_add a;

        /* half on five hot keys, half on keys of their own (claimed in parallel) */
        snprintf(key, sizeof key, "k%d", i % 2 ? i % 5 : 5 + i % 60);
        memset(&l, 0, sizeof l);
        l.lim.def = conc;
        l.lim.limit_id = "c";
        l.lim.key = key;
        l.lim.keylen = strlen(key);
        l.lim.units = 1;
        memset(&a, 0, sizeof a);
        a.type = "r";
        a.typelen = 1;
        a.links = &l;
        a.nlinks = 1;
        a.priority = i % 3;
        a.lease_ns = 300 * MS;
        a.retry.max_attempts = 1000;
        a.retry.base_ns = 10 * MS;
        a.retry.throttle_retries = 1;
        if (pgt_batch_add_add(b, &a) < 0)
            die("race add");
        if (pgt_batch_count(b) == 50 || i == ntasks - 1) {
            PQclear(pg_call(c, b));
            pgt_batch_reset(b);
        }
    }
    for (int p = 0; p < nproc; p++) {
        pid_t pid;

        snprintf(logs[p], sizeof logs[p], "/tmp/sluice_tasks_race.%d.%d", (int)getpid(), p);
        pid = fork();
        if (pid == 0)
            race_worker(conninfo, p, logs[p]);
        if (pid < 0)
            die("fork");
    }
    for (int p = 0; p < nproc; p++) {
        int status = 0;

        wait(&status);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "race: a worker failed (status %d)\n", status);
            bad++;
        }
    }
    for (int p = 0; p < nproc; p++) {
        FILE *in = fopen(logs[p], "r");
        unsigned long long id;
        int att;

        while (in && fscanf(in, "%llu %d", &id, &att) == 2) {
            total++;
            if (id < 1 || id > (unsigned long long)ntasks || att < 1 || att > 4) {
                if (att > 4)
                    continue; /* attempts past 4 are not tracked (rare) */
                bad++;
                continue;
            }
            if (seen[(id - 1) * 4 + (unsigned)(att - 1)]++)
                dups++;
        }
        if (in)
            fclose(in);
        unlink(logs[p]);
    }
    r = PQexec(c, "SELECT count(*) FILTER (WHERE state = 4), count(*) FROM sluice_task");
    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        die("race count");
    printf("race: %d processes, %d tasks, %ld deliveries, %ld delivered twice at one attempt, "
           "%s of %s done, %ld failures\n",
           nproc, ntasks, total, dups, PQgetvalue(r, 0, 0), PQgetvalue(r, 0, 1), bad);
    if (atoll(PQgetvalue(r, 0, 0)) != ntasks)
        bad++;
    PQclear(r);
    pgt_batch_free(b);
    PQfinish(c);
    return dups == 0 && bad == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc >= 5 && strcmp(argv[1], "--race") == 0)
        return race(argv[2], atoi(argv[3]), atoi(argv[4]));
    if (argc >= 3 && strcmp(argv[1], "--migrate") == 0) {
        /* Brings a database to this build's schema (pg_connect migrates), nothing else. */
        PQfinish(pg_connect(argv[2]));
        return 0;
    }
    if (argc < 4) {
        fprintf(stderr, "usage: sluice_tasks_diff REDIS-PORT PG-CONNINFO SEED [STEPS]\n"
                        "       sluice_tasks_diff --race PG-CONNINFO NPROC NTASKS\n"
                        "       sluice_tasks_diff --migrate PG-CONNINFO\n");
        return 2;
    }
    redis_connect(atoi(argv[1]));
    pc = pg_connect(argv[2]);
    pg_reset(pc);
    seed = (unsigned)strtoul(argv[3], NULL, 10);
    plain = getenv("SLUICE_TASKS_PLAIN") != NULL;
    shadow_mood = getenv("SLUICE_TASKS_SHADOW") != NULL;
    rng = 0x9e3779b97f4a7c15u ^ ((uint64_t)seed * 0x100000001b3u);
    now_ns = INT64_C(1700000000000000000) + (int64_t)seed * 1000 * SEC;
    if (rtask_batch_new(NULL, &RB) != SLUICE_OK || pgt_batch_new(&PB) != SLUICE_OK ||
        rlim_batch_new(NULL, &LRB) != SLUICE_OK || pgl_batch_new(&LPB) != SLUICE_OK)
        die("batch");
    if (getenv("SLUICE_TASKS_CAPS")) {
        /* "MAX_TASKS MAX_PARKED": the caps on both stores (BUSY refusals, RATELIMITED
         * failures of a full parking lot). */
        unsigned long long mt = 0, mp = 0;

        if (sscanf(getenv("SLUICE_TASKS_CAPS"), "%llu %llu", &mt, &mp) != 2)
            die("SLUICE_TASKS_CAPS: MAX_TASKS MAX_PARKED");
        rtask_batch_set_caps(RB, mt, mp);
        pgt_batch_set_caps(PB, mt, mp);
    }
    differential(argc > 4 ? atoi(argv[4]) : 3000);
    rtask_batch_free(RB);
    pgt_batch_free(PB);
    rlim_batch_free(LRB);
    pgl_batch_free(LPB);
    redisFree(rc);
    PQfinish(pc);
    return 0;
}
