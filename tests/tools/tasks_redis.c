/* SPDX-License-Identifier: MIT */
/*
 * sluice_tasks_redis: the task ops of the store script (src/store/redis/tasks.lua) against a real
 * redis-server, through store/redis_tasks.c, with synchronous hiredis and injected store times
 * (so no test sleeps): add / claim / ack / fail / touch / cancel / info, lease lapse and
 * redelivery with attempt n+1, the ATTEMPT fence, delays and retry backoff, parking on a rate or
 * a concurrency limit and waking in priority order, strict priority behind a parked task,
 * all-or-nothing chains (checked with the limits ops of the same script: a task and THROTTLE
 * charge one budget), RETRY_AFTER holding a rate key back, task-key deduplication, exact int64
 * priorities and times past 2^53, and the claim's bound.
 *
 * With a seed, it runs instead the differential test against the single-node engine
 * (differential() below): the same random adds, claims, acks, fails and touches at the same
 * times through sluice_engine and through the script, every answer and, after every step, every
 * task's state, attempt and lease compared. One difference is allowed, and only one way: a task
 * the engine's tick already woke (queued) may still read parked in Redis until a claim looks.
 *
 * Usage: sluice_tasks_redis PORT [SEED [STEPS]] against a throwaway redis-server on
 * 127.0.0.1:PORT, whose database it empties first (FLUSHDB). Prints one line per scenario; exits
 * 1 on the first failed check (with its line, or the seed and step), 2 on a setup error. TRACE=1
 * in the environment prints the differential run step by step.
 */
#include <hiredis.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/engine.h"
#include "sluice/error.h"
#include "sluice/limit.h"
#include "sluice/policy.h"
#include "store/redis_limits.h"
#include "store/redis_tasks.h"

#define SEC INT64_C(1000000000)
#define MS  INT64_C(1000000)

static redisContext *conn;
static char sha[64];
static int64_t now_ns = INT64_C(1700000000000000000); /* past 2^53: exact integers matter */
static int checks;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        checks++;                                                                                  \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAILED at %s:%d: %s\n", __FILE__, __LINE__, #cond);                   \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static redisReply *run(rtask_batch *b)
{
    int argc;
    const char **argv;
    const size_t *argvlen;
    redisReply *r;

    rtask_batch_set_now(b, now_ns);
    if (rtask_batch_command(b, sha, &argc, &argv, &argvlen) != SLUICE_OK) {
        fprintf(stderr, "rtask_batch_command failed\n");
        exit(2);
    }
    r = redisCommandArgv(conn, argc, argv, argvlen);
    if (!r) {
        fprintf(stderr, "redis: %s\n", conn->errstr);
        exit(2);
    }
    if (r->type == REDIS_REPLY_ERROR) {
        fprintf(stderr, "script error: %s\n", r->str);
        exit(1);
    }
    return r;
}

/* ---- one-request helpers ----------------------------------------------------------------- */

static rtask_batch *B;

typedef struct task_opts {
    const char *type;
    const char *payload;
    const char *task_key;
    int64_t priority;
    int64_t delay_ns;
    int64_t lease_ns;
    int max_attempts;
    int64_t base_ns;
    int throttle_retries;
    int charge_redelivery;
    const rtask_link *links;
    size_t nlinks;
} task_opts;

static rtask_result add(const task_opts *o)
{
    rtask_add a;
    rtask_result res;
    redisReply *r;

    memset(&a, 0, sizeof a);
    a.type = o->type ? o->type : "t";
    a.typelen = strlen(a.type);
    a.payload = o->payload;
    a.payload_len = o->payload ? strlen(o->payload) : 0;
    a.task_key = o->task_key;
    a.task_key_len = o->task_key ? strlen(o->task_key) : 0;
    a.links = o->links;
    a.nlinks = o->nlinks;
    a.priority = o->priority;
    a.delay_ns = o->delay_ns;
    a.lease_ns = o->lease_ns ? o->lease_ns : 30 * SEC;
    a.retry.max_attempts = o->max_attempts ? o->max_attempts : 3;
    a.retry.backoff = SLUICE_BACKOFF_FIXED;
    a.retry.base_ns = o->base_ns ? o->base_ns : SEC;
    a.retry.max_ns = 300 * SEC;
    a.retry.throttle_retries = o->throttle_retries;
    a.charge_redelivery = o->charge_redelivery;
    rtask_batch_reset(B);
    CHECK(rtask_batch_add_add(B, &a) == 0);
    r = run(B);
    CHECK(rtask_batch_result(B, r, 0, &res) == SLUICE_OK);
    freeReplyObject(r);
    return res;
}

/* 1: claim() returns a claim cut short by its bound; 0: it claims again, as a node does. */
static int one_call;

/* Claims up to count tasks of type (NULL: "t"); ids[] and attempts[] receive the delivered. */
static rtask_result claim(const char *type, size_t count, uint64_t *ids, int *attempts,
                          char (*payloads)[64])
{
    const char *types[1] = {type ? type : "t"};
    size_t lens[1] = {strlen(types[0])};
    rtask_claim c = {types, lens, 1, count};
    rtask_result res;
    redisReply *r;

    rtask_batch_reset(B);
    CHECK(rtask_batch_add_claim(B, &c) == 0);
    r = run(B);
    CHECK(rtask_batch_result(B, r, 0, &res) == SLUICE_OK);
    CHECK(res.rc == 0);
    for (size_t k = 0; k < res.ndelivered; k++) {
        rtask_task t;

        CHECK(rtask_batch_task(B, r, 0, k, &t) == SLUICE_OK);
        CHECK(t.typelen == lens[0] && memcmp(t.type, types[0], lens[0]) == 0);
        CHECK(t.lease_until_ns > res.now_ns);
        if (ids)
            ids[k] = t.id;
        if (attempts)
            attempts[k] = t.attempt;
        if (payloads)
            snprintf(payloads[k], 64, "%.*s", (int)t.payload_len, t.payload);
    }
    CHECK(rtask_batch_task(B, r, 0, res.ndelivered, &(rtask_task){0}) == SLUICE_EINVAL);
    freeReplyObject(r);
    if (res.more && res.ndelivered == 0 && !one_call)
        return claim(type, count, ids, attempts, payloads);
    return res;
}

static rtask_result done(rtask_op op, uint64_t id, int64_t attempt, const rtask_done *extra)
{
    rtask_done d;
    rtask_result res;
    redisReply *r;
    int idx = -1;

    if (extra)
        d = *extra;
    else
        memset(&d, 0, sizeof d);
    d.id = id;
    d.attempt = attempt;
    if (!extra) {
        d.cost = -1;
        d.retry_after_ns = -1;
    }
    rtask_batch_reset(B);
    switch (op) {
    case RTASK_ACK:
        idx = rtask_batch_add_ack(B, &d);
        break;
    case RTASK_FAIL:
        idx = rtask_batch_add_fail(B, &d);
        break;
    case RTASK_TOUCH:
        idx = rtask_batch_add_touch(B, &d);
        break;
    case RTASK_CANCEL:
        idx = rtask_batch_add_cancel(B, &d);
        break;
    default:
        idx = rtask_batch_add_info(B, &d);
        break;
    }
    CHECK(idx == 0);
    r = run(B);
    CHECK(rtask_batch_result(B, r, 0, &res) == SLUICE_OK);
    freeReplyObject(r);
    return res;
}

static rtask_task info(uint64_t id, char *payload, size_t cap)
{
    rtask_done d = {.id = id, .cost = -1, .retry_after_ns = -1};
    rtask_task t;
    rtask_result res;
    redisReply *r;

    rtask_batch_reset(B);
    CHECK(rtask_batch_add_info(B, &d) == 0);
    r = run(B);
    CHECK(rtask_batch_result(B, r, 0, &res) == SLUICE_OK);
    CHECK(res.rc == 0);
    CHECK(rtask_batch_task(B, r, 0, 0, &t) == SLUICE_OK);
    if (payload)
        snprintf(payload, cap, "%.*s", (int)t.payload_len, t.payload);
    t.type = t.payload = t.task_key = t.fail_message = NULL; /* the reply is freed */
    freeReplyObject(r);
    return t;
}

/* THROTTLE through the limits ops of the same script: DECIDE (peek 0) or PEEK one link. */
static sluice_decision throttle(const rtask_link *l, int peek)
{
    rlim_batch *lb;
    rlim_result res;
    sluice_decision d;
    int argc;
    const char **argv;
    const size_t *argvlen;
    redisReply *r;

    CHECK(rlim_batch_new(NULL, &lb) == 0);
    rlim_batch_set_now(lb, now_ns);
    CHECK(rlim_batch_add(lb, peek ? RLIM_PEEK : RLIM_DECIDE, &l->lim, 1, NULL) == 0);
    CHECK(rlim_batch_command(lb, sha, &argc, &argv, &argvlen) == 0);
    r = redisCommandArgv(conn, argc, argv, argvlen);
    CHECK(r && r->type == REDIS_REPLY_ARRAY);
    CHECK(rlim_batch_result(lb, r, 0, &res, &d) == 0);
    CHECK(res.rc == 0);
    freeReplyObject(r);
    rlim_batch_free(lb);
    return d;
}

/* ---- limits ------------------------------------------------------------------------------ */

static sluice_limit_def rate_def, conc_def, quota_def;

static rtask_link link_of(const sluice_limit_def *def, const char *id, const char *key)
{
    rtask_link l;

    memset(&l, 0, sizeof l);
    l.lim.def = def;
    l.lim.limit_id = id;
    l.lim.key = key;
    l.lim.keylen = strlen(key);
    l.lim.units = 1;
    return l;
}

/* ---- scenarios --------------------------------------------------------------------------- */

static void basic(void)
{
    uint64_t ids[4];
    int att[4];
    rtask_result a = add(&(task_opts){.payload = "{\"n\":1}"});
    rtask_result b = add(&(task_opts){.payload = "{\"n\":2}", .priority = 5});
    rtask_result r;

    CHECK(a.rc == 0 && b.rc == 0 && b.id == a.id + 1 && !a.replaced);
    CHECK(a.now_ns == now_ns);
    r = claim(NULL, 4, ids, att, NULL);
    CHECK(r.ndelivered == 2 && ids[0] == b.id && ids[1] == a.id && att[0] == 1 && att[1] == 1);
    r = claim(NULL, 1, NULL, NULL, NULL);
    CHECK(r.ndelivered == 0 && r.next_wake_ns == now_ns + 30 * SEC); /* the leases' end */
    r = done(RTASK_ACK, b.id, 1, NULL);
    CHECK(r.rc == 0 && r.state == SLUICE_TASK_DONE && r.attempt == 1);
    r = done(RTASK_ACK, b.id, 0, NULL);
    CHECK(r.rc == SLUICE_ESTATE && r.state == SLUICE_TASK_DONE && r.attempt == 1);
    r = done(RTASK_ACK, 999999, 0, NULL);
    CHECK(r.rc == SLUICE_ENOTFOUND);
    r = done(RTASK_ACK, a.id, 0, NULL); /* no ATTEMPT: whichever runs */
    CHECK(r.rc == 0 && r.state == SLUICE_TASK_DONE);
    {
        rtask_task t = info(a.id, NULL, 0);

        CHECK(t.state == SLUICE_TASK_DONE && t.attempt == 1 && t.submitted_ns == a.now_ns);
        CHECK(t.units == 1);
    }
    printf("basic: add, claim in priority order, ack, NOTASK/NOLEASE ok\n");
}

static void lapse_and_fence(void)
{
    uint64_t ids[2];
    int att[2];
    rtask_result a = add(&(task_opts){.lease_ns = SEC});
    rtask_result r;

    r = claim(NULL, 1, ids, att, NULL);
    CHECK(r.ndelivered == 1 && ids[0] == a.id && att[0] == 1);
    now_ns += 500 * MS;
    r = claim(NULL, 1, NULL, NULL, NULL);
    CHECK(r.ndelivered == 0 && r.next_wake_ns == now_ns + 500 * MS);
    now_ns += 1500 * MS; /* the worker died: its lease lapsed */
    r = claim(NULL, 1, ids, att, NULL);
    CHECK(r.ndelivered == 1 && ids[0] == a.id && att[0] == 2);
    r = done(RTASK_ACK, a.id, 1, NULL); /* the dead delivery's late ack */
    CHECK(r.rc == SLUICE_ESTATE && r.state == SLUICE_TASK_RUNNING && r.attempt == 2);
    r = done(RTASK_TOUCH, a.id, 3, NULL); /* never delivered */
    CHECK(r.rc == SLUICE_ESTATE && r.attempt == 2);
    now_ns += 700 * MS;
    r = done(RTASK_TOUCH, a.id, 2, NULL);
    CHECK(r.rc == 0 && r.lease_until_ns == now_ns + SEC);
    now_ns += 700 * MS; /* past the first lease, within the touched one */
    r = claim(NULL, 1, NULL, NULL, NULL);
    CHECK(r.ndelivered == 0);
    r = done(RTASK_ACK, a.id, 2, NULL);
    CHECK(r.rc == 0 && r.state == SLUICE_TASK_DONE && r.attempt == 2);
    /* A lease that ran out is over even before a claim takes the task back. */
    a = add(&(task_opts){.lease_ns = SEC});
    r = claim(NULL, 1, ids, att, NULL);
    CHECK(r.ndelivered == 1 && ids[0] == a.id && att[0] == 1);
    now_ns += SEC;
    r = done(RTASK_TOUCH, a.id, 1, NULL);
    CHECK(r.rc == SLUICE_ESTATE && r.state == SLUICE_TASK_QUEUED && r.attempt == 1);
    r = claim(NULL, 1, ids, att, NULL);
    CHECK(r.ndelivered == 1 && ids[0] == a.id && att[0] == 2);
    CHECK(done(RTASK_ACK, a.id, 2, NULL).rc == 0);
    printf("lapse: redelivered with attempt 2, the late ack refused, touch extends ok\n");
}

static void delay_and_retry(void)
{
    uint64_t ids[2];
    int att[2];
    rtask_result a = add(&(task_opts){.delay_ns = 5 * SEC, .max_attempts = 2, .base_ns = SEC});
    rtask_result r;
    rtask_done f = {.mode = SLUICE_FAIL_MODE_RETRY, .cost = -1, .retry_after_ns = -1};
    rtask_task t;

    r = claim(NULL, 1, NULL, NULL, NULL);
    CHECK(r.ndelivered == 0 && r.next_wake_ns == now_ns + 5 * SEC);
    t = info(a.id, NULL, 0);
    CHECK(t.state == SLUICE_TASK_QUEUED && t.not_before_ns == now_ns + 5 * SEC);
    now_ns += 5 * SEC;
    r = claim(NULL, 1, ids, att, NULL);
    CHECK(r.ndelivered == 1 && ids[0] == a.id && att[0] == 1);
    f.message = "upstream 500";
    f.message_len = strlen(f.message);
    r = done(RTASK_FAIL, a.id, 1, &f);
    CHECK(r.rc == 0 && r.state == SLUICE_TASK_QUEUED && r.attempt == 1);
    r = claim(NULL, 1, NULL, NULL, NULL);
    CHECK(r.ndelivered == 0 && r.next_wake_ns == now_ns + SEC);
    now_ns += SEC;
    r = claim(NULL, 1, ids, att, NULL);
    CHECK(r.ndelivered == 1 && att[0] == 2);
    f.message = NULL;
    f.message_len = 0;
    r = done(RTASK_FAIL, a.id, 2, &f);
    CHECK(r.rc == 0 && r.state == SLUICE_TASK_FAILED);
    t = info(a.id, NULL, 0);
    CHECK(t.state == SLUICE_TASK_FAILED && t.fail_reason == SLUICE_FAIL_ATTEMPTS &&
          t.attempt == 2 && t.fail_message_len == 12);
    a = add(&(task_opts){0});
    r = claim(NULL, 1, ids, att, NULL);
    f.mode = SLUICE_FAIL_MODE_DEAD;
    r = done(RTASK_FAIL, a.id, 1, &f);
    CHECK(r.rc == 0 && r.state == SLUICE_TASK_FAILED);
    CHECK(info(a.id, NULL, 0).fail_reason == SLUICE_FAIL_DEAD);
    printf("delay and retry: due times, backoff, attempts, dead ok\n");
}

static void rate_park_and_wake(void)
{
    rtask_link l = link_of(&rate_def, "api", "k1");
    uint64_t ids[4];
    int att[4];
    rtask_result lo, hi, mid, r;
    sluice_decision d;

    /* The key's one unit is spent by a direct caller: tasks and THROTTLE share the budget. */
    d = throttle(&l, 0);
    CHECK(d.allowed);
    lo = add(&(task_opts){.links = &l, .nlinks = 1, .priority = 0});
    hi = add(&(task_opts){.links = &l, .nlinks = 1, .priority = 9});
    mid = add(&(task_opts){.links = &l, .nlinks = 1, .priority = 4});
    r = claim(NULL, 3, NULL, NULL, NULL);
    CHECK(r.ndelivered == 0 && r.next_wake_ns == now_ns + SEC);
    CHECK(info(hi.id, NULL, 0).state == SLUICE_TASK_PARKED);
    CHECK(info(lo.id, NULL, 0).state == SLUICE_TASK_PARKED);
    now_ns += SEC;
    r = claim(NULL, 3, ids, att, NULL);
    CHECK(r.ndelivered == 1 && ids[0] == hi.id);
    now_ns += SEC;
    r = claim(NULL, 3, ids, att, NULL);
    CHECK(r.ndelivered == 1 && ids[0] == mid.id);
    d = throttle(&l, 1); /* the task took the slot: a direct caller waits */
    CHECK(!d.allowed && d.retry_after_ns == SEC);
    now_ns += SEC;
    r = claim(NULL, 3, ids, att, NULL);
    CHECK(r.ndelivered == 1 && ids[0] == lo.id);
    for (int i = 0; i < 3; i++)
        CHECK(done(RTASK_ACK, i == 0 ? hi.id : i == 1 ? mid.id : lo.id, 1, NULL).rc == 0);
    printf("rate: parked, woken in priority order, one budget with THROTTLE ok\n");
}

static void concurrency_and_chain(void)
{
    rtask_link c = link_of(&conc_def, "slots", "k2");
    rtask_link chain[2] = {link_of(&rate_def, "api", "k3"), link_of(&conc_def, "slots", "k2")};
    uint64_t ids[4];
    int att[4];
    rtask_result x, y, z, r;
    sluice_decision d;

    x = add(&(task_opts){.links = &c, .nlinks = 1});
    y = add(&(task_opts){.links = &c, .nlinks = 1});
    r = claim(NULL, 2, ids, att, NULL);
    CHECK(r.ndelivered == 1 && ids[0] == x.id);
    CHECK(info(y.id, NULL, 0).state == SLUICE_TASK_PARKED);
    /* A chain whose concurrency link is full charges nothing, not even its rate link. */
    z = add(&(task_opts){.links = chain, .nlinks = 2, .priority = -1});
    r = claim(NULL, 2, NULL, NULL, NULL);
    CHECK(r.ndelivered == 0 && r.next_wake_ns == now_ns + 30 * SEC); /* x's lease */
    d = throttle(&chain[0], 1);
    CHECK(d.allowed); /* not charged: a charge would have spent its one unit */
    now_ns += SEC;
    CHECK(done(RTASK_ACK, x.id, 1, NULL).rc == 0); /* the slot is released: y wakes */
    r = claim(NULL, 2, ids, att, NULL);
    CHECK(r.ndelivered == 1 && ids[0] == y.id && att[0] == 1);
    CHECK(done(RTASK_ACK, y.id, 1, NULL).rc == 0);
    r = claim(NULL, 2, ids, att, NULL);
    CHECK(r.ndelivered == 1 && ids[0] == z.id);
    d = throttle(&chain[0], 1);
    CHECK(!d.allowed);
    /* Its lease lapses: the concurrency slot comes back with it; the redelivery keeps the grant
     * (it asks only its concurrency link, so the spent rate key does not hold it). */
    now_ns += 31 * SEC;
    CHECK(throttle(&chain[0], 0).allowed); /* the rate key refilled: spend it */
    r = claim(NULL, 2, ids, att, NULL);
    CHECK(r.ndelivered == 1 && ids[0] == z.id && att[0] == 2);
    CHECK(done(RTASK_ACK, z.id, 2, NULL).rc == 0);
    printf("concurrency: parked until release, all-or-nothing chain, grant kept on lapse ok\n");
}

static void retry_after(void)
{
    rtask_link l = link_of(&rate_def, "api", "k4");
    uint64_t ids[2];
    rtask_result a = add(&(task_opts){.links = &l, .nlinks = 1, .max_attempts = 1});
    rtask_done f = {.mode = SLUICE_FAIL_MODE_RETRY, .cost = -1, .retry_after_ns = 10 * SEC};
    rtask_result r;

    r = claim(NULL, 1, ids, NULL, NULL);
    CHECK(r.ndelivered == 1 && ids[0] == a.id);
    r = done(RTASK_FAIL, a.id, 1, &f);
    CHECK(r.rc == 0 && r.state == SLUICE_TASK_QUEUED); /* never out of attempts for a 429 */
    now_ns += 5 * SEC;
    CHECK(!throttle(&l, 1).allowed); /* the key is held back too */
    r = claim(NULL, 1, NULL, NULL, NULL);
    CHECK(r.ndelivered == 0 && r.next_wake_ns == now_ns + 5 * SEC);
    now_ns += 5 * SEC;
    r = claim(NULL, 1, ids, NULL, NULL);
    CHECK(r.ndelivered == 1 && ids[0] == a.id);
    CHECK(done(RTASK_ACK, a.id, 2, NULL).rc == 0);
    printf("retry_after: the task and its rate key held back ok\n");
}

static void task_key_and_cancel(void)
{
    char payloads[2][64];
    uint64_t ids[2];
    rtask_result a, b, r;

    a = add(&(task_opts){.task_key = "job-1", .payload = "{\"v\":1}"});
    b = add(&(task_opts){.task_key = "job-1", .payload = "{\"v\":2}"});
    CHECK(b.rc == 0 && b.id == a.id && b.replaced == 1);
    r = claim(NULL, 2, ids, NULL, payloads);
    CHECK(r.ndelivered == 1 && ids[0] == a.id && strcmp(payloads[0], "{\"v\":2}") == 0);
    b = add(&(task_opts){.task_key = "job-1"});
    CHECK(b.rc == SLUICE_EEXIST && b.id == a.id);
    r = done(RTASK_CANCEL, a.id, 0, NULL);
    CHECK(r.rc == SLUICE_EBUSY && r.state == SLUICE_TASK_RUNNING);
    CHECK(done(RTASK_ACK, a.id, 1, NULL).rc == 0);
    b = add(&(task_opts){.task_key = "job-1"}); /* finished: the key is free again */
    CHECK(b.rc == 0 && b.id != a.id && !b.replaced);
    r = done(RTASK_CANCEL, b.id, 0, NULL);
    CHECK(r.rc == 0 && r.cancelled == 1 && r.state == SLUICE_TASK_CANCELLED);
    r = done(RTASK_CANCEL, b.id, 0, NULL);
    CHECK(r.rc == 0 && r.cancelled == 0);
    CHECK(claim(NULL, 2, NULL, NULL, NULL).ndelivered == 0);
    printf("task keys and cancel ok\n");
}

static void exact_priorities(void)
{
    uint64_t ids[4];
    rtask_result a = add(&(task_opts){.type = "p", .priority = INT64_MIN});
    rtask_result b = add(&(task_opts){.type = "p", .priority = INT64_MAX});
    rtask_result c = add(&(task_opts){.type = "p", .priority = INT64_MAX - 1});
    rtask_result d = add(&(task_opts){.type = "p", .priority = -1});
    rtask_result r = claim("p", 4, ids, NULL, NULL);

    CHECK(r.ndelivered == 4 && ids[0] == b.id && ids[1] == c.id && ids[2] == d.id &&
          ids[3] == a.id);
    CHECK(info(c.id, NULL, 0).priority == INT64_MAX - 1);
    printf("exact int64 priorities ok\n");
}

static void bounded_claim(void)
{
    rtask_link l = link_of(&rate_def, "api", "k5");
    rtask_result r;
    size_t n = RTASK_CLAIM_SCAN + 6, parked = 0;

    CHECK(throttle(&l, 0).allowed);
    for (size_t i = 0; i < n; i++) /* each a distinct key of a spent limit: none waits behind */
    {
        char key[16];
        rtask_link k;

        snprintf(key, sizeof key, "b%zu", i);
        k = link_of(&rate_def, "api", key);
        CHECK(throttle(&k, 0).allowed);
        CHECK(add(&(task_opts){.type = "b", .links = &k, .nlinks = 1}).rc == 0);
    }
    one_call = 1;
    r = claim("b", 1, NULL, NULL, NULL);
    CHECK(r.ndelivered == 0 && r.more == 1 && r.next_wake_ns == r.now_ns);
    r = claim("b", 1, NULL, NULL, NULL);
    CHECK(r.ndelivered == 0 && r.more == 0);
    one_call = 0;
    parked = 0;
    for (uint64_t id = 1; id < 100000; id++) {
        rtask_done q = {.id = id, .cost = -1, .retry_after_ns = -1};
        rtask_result res;
        redisReply *rep;
        rtask_task t;

        rtask_batch_reset(B);
        rtask_batch_add_info(B, &q);
        rep = run(B);
        CHECK(rtask_batch_result(B, rep, 0, &res) == 0);
        if (res.rc == SLUICE_ENOTFOUND) {
            freeReplyObject(rep);
            break;
        }
        CHECK(rtask_batch_task(B, rep, 0, 0, &t) == 0);
        if (t.typelen == 1 && t.type[0] == 'b' && t.state == SLUICE_TASK_PARKED) {
            parked++;
            freeReplyObject(rep);
            res = done(RTASK_CANCEL, id, 0, NULL); /* leaves the next scenarios alone */
            CHECK(res.rc == 0 && res.cancelled == 1);
            continue;
        }
        freeReplyObject(rep);
    }
    CHECK(parked == n);
    {
        redisReply *z = redisCommand(conn, "ZCARD sluice:{all}:wakes");

        CHECK(z && z->type == REDIS_REPLY_INTEGER && z->integer == 0); /* none left armed */
        freeReplyObject(z);
    }
    printf("bounded claim: %d ready entries per call, then more=1 ok\n", RTASK_CLAIM_SCAN);
}

static void batch_and_errors(void)
{
    rtask_done ack = {.id = 424242, .cost = -1, .retry_after_ns = -1};
    const char *types[2] = {"t", "p"};
    size_t lens[2] = {1, 1};
    rtask_claim c = {types, lens, 2, 3};
    rtask_add a;
    rtask_result res;
    redisReply *r;

    memset(&a, 0, sizeof a);
    a.type = "t";
    a.typelen = 1;
    a.lease_ns = SEC;
    a.retry.max_attempts = 1;
    rtask_batch_reset(B);
    CHECK(rtask_batch_add_ack(B, &ack) == 0);
    CHECK(rtask_batch_add_add(B, &a) == 1);
    CHECK(rtask_batch_add_claim(B, &c) == 2);
    CHECK(rtask_batch_count(B) == 3 && rtask_batch_op(B, 2) == RTASK_CLAIM);
    r = run(B);
    CHECK(rtask_batch_result(B, r, 0, &res) == 0 && res.rc == SLUICE_ENOTFOUND);
    CHECK(rtask_batch_result(B, r, 1, &res) == 0 && res.rc == 0);
    CHECK(rtask_batch_result(B, r, 2, &res) == 0 && res.rc == 0 && res.ndelivered == 1);
    CHECK(rtask_batch_result(B, r, 3, &res) == SLUICE_EINVAL);
    freeReplyObject(r);
    printf("one batch of several ops ok\n");
}

/* throttle_retries 0: a retry asks its concurrency links only; 1: it pays its limits again.
 * charge_redelivery: a redelivery after a lapse pays again instead of keeping its grant. */
static void retries_and_redelivery(void)
{
    rtask_link l = link_of(&rate_def, "api", "k6");
    rtask_done f = {.mode = SLUICE_FAIL_MODE_RETRY, .cost = -1, .retry_after_ns = -1};
    uint64_t ids[2];
    int att[2];
    rtask_result a, r;

    a = add(&(task_opts){.type = "r", .links = &l, .nlinks = 1, .throttle_retries = 0});
    r = claim("r", 1, ids, att, NULL);
    CHECK(r.ndelivered == 1 && ids[0] == a.id);
    CHECK(done(RTASK_FAIL, a.id, 1, &f).state == SLUICE_TASK_QUEUED);
    now_ns += SEC;
    CHECK(throttle(&l, 0).allowed); /* the key's unit, refilled, is spent by a direct caller */
    r = claim("r", 1, ids, att, NULL);
    CHECK(r.ndelivered == 1 && ids[0] == a.id && att[0] == 2); /* a free retry */
    CHECK(done(RTASK_ACK, a.id, 2, NULL).rc == 0);

    now_ns += SEC;
    a = add(&(task_opts){.type = "r", .links = &l, .nlinks = 1, .throttle_retries = 1});
    r = claim("r", 1, ids, att, NULL);
    CHECK(r.ndelivered == 1 && ids[0] == a.id);
    CHECK(done(RTASK_FAIL, a.id, 1, &f).state == SLUICE_TASK_QUEUED);
    now_ns += SEC;
    CHECK(throttle(&l, 0).allowed);
    r = claim("r", 1, NULL, NULL, NULL);
    CHECK(r.ndelivered == 0 && info(a.id, NULL, 0).state == SLUICE_TASK_PARKED);
    now_ns += SEC;
    r = claim("r", 1, ids, att, NULL);
    CHECK(r.ndelivered == 1 && ids[0] == a.id && att[0] == 2);
    CHECK(done(RTASK_ACK, a.id, 2, NULL).rc == 0);

    now_ns += SEC;
    a = add(&(task_opts){
        .type = "r", .links = &l, .nlinks = 1, .lease_ns = SEC, .charge_redelivery = 1});
    r = claim("r", 1, ids, att, NULL);
    CHECK(r.ndelivered == 1 && ids[0] == a.id);
    now_ns += SEC; /* lapsed; the key refilled and is spent by a direct caller */
    CHECK(throttle(&l, 0).allowed);
    r = claim("r", 1, NULL, NULL, NULL);
    CHECK(r.ndelivered == 0 && info(a.id, NULL, 0).state == SLUICE_TASK_PARKED);
    now_ns += SEC;
    r = claim("r", 1, ids, att, NULL);
    CHECK(r.ndelivered == 1 && ids[0] == a.id && att[0] == 2);
    CHECK(done(RTASK_ACK, a.id, 2, NULL).rc == 0);
    printf("free retries, paid retries and charge_redelivery ok\n");
}

/* ACK COST settles the links flagged for it; one claim serves several types by urgency. */
static void settle_and_types(void)
{
    rtask_link q = link_of(&quota_def, "budget", "k7");
    const char *types[2] = {"x", "y"};
    size_t lens[2] = {1, 1};
    rtask_claim c = {types, lens, 2, 3};
    rtask_done ack = {.cost = 1, .retry_after_ns = -1};
    rtask_result a, x, y, res;
    rtask_task t;
    redisReply *rep;

    q.lim.units = 5;
    q.flags = RTASK_LINK_SETTLE;
    uint64_t ids[1];

    a = add(&(task_opts){.type = "s", .links = &q, .nlinks = 1});
    CHECK(claim("s", 1, ids, NULL, NULL).ndelivered == 1 && ids[0] == a.id);
    CHECK(done(RTASK_ACK, a.id, 1, &ack).rc == 0); /* 5 charged, settled to 1 */
    q.lim.units = 9;
    CHECK(throttle(&q, 1).allowed);
    q.lim.units = 10;
    CHECK(!throttle(&q, 1).allowed);

    x = add(&(task_opts){.type = "x", .priority = 1});
    y = add(&(task_opts){.type = "y", .priority = 2});
    rtask_batch_reset(B);
    CHECK(rtask_batch_add_claim(B, &c) == 0);
    rep = run(B);
    CHECK(rtask_batch_result(B, rep, 0, &res) == 0 && res.ndelivered == 2);
    CHECK(rtask_batch_task(B, rep, 0, 0, &t) == 0 && t.id == y.id && t.type[0] == 'y');
    CHECK(rtask_batch_task(B, rep, 0, 1, &t) == 0 && t.id == x.id && t.type[0] == 'x');
    freeReplyObject(rep);
    t = info(x.id, NULL, 0);
    CHECK(t.state == SLUICE_TASK_RUNNING && t.lease_until_ns == now_ns + 30 * SEC);
    CHECK(done(RTASK_ACK, x.id, 1, NULL).rc == 0 && done(RTASK_ACK, y.id, 1, NULL).rc == 0);
    printf("ack cost settles, one claim over two types ok\n");
}

/* ---- the differential run against the single-node engine -------------------------------- */

/* One type "w" whose chain is a rate limit "r" (2 per second, burst 2) and a concurrency limit
 * "c" (2 at once), both keyed by the payload's "k" (3 keys), lease 2 s, 3 attempts, backoff 1 s
 * fixed. The same random operations (adds with priorities and delays, claims, acks, fails with
 * and without RETRY_AFTER, touches, with right and stale attempts) at the same times (steps of
 * 100 ms, so that every slot and wake is a whole millisecond) go to the engine (ticked before each
 * operation, as a node's loop does) and to the script; every answer is compared. */
#define DKEYS    3
#define DMAXLIVE 30

static sluice_limit_def drate, dconc;

static rtask_result rt_add(const char *key, int prio, int64_t delay)
{
    rtask_link l[2];
    char payload[32];
    task_opts o = {.type = "w",
                   .priority = prio,
                   .delay_ns = delay,
                   .lease_ns = 2 * SEC,
                   .max_attempts = 3,
                   .base_ns = SEC,
                   .throttle_retries = 1,
                   .links = l,
                   .nlinks = 2,
                   .payload = payload};

    snprintf(payload, sizeof payload, "{\"k\":\"%s\"}", key);
    l[0] = link_of(&drate, "r", key);
    l[1] = link_of(&dconc, "c", key);
    return add(&o);
}

static void diff_fail(unsigned seed, int step, const char *what, long long a, long long b)
{
    fprintf(stderr, "diff: seed %u step %d: %s: engine %lld, redis %lld\n", seed, step, what, a, b);
    exit(1);
}

#define SAME(what, a, b)                                                                           \
    do {                                                                                           \
        checks++;                                                                                  \
        if ((long long)(a) != (long long)(b))                                                      \
            diff_fail(seed, step, what, (long long)(a), (long long)(b));                           \
    } while (0)

static uint64_t rnd_state;

static uint64_t rnd(uint64_t n)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return rnd_state % n;
}

/* The engine's answer to an ACK/FAIL/TOUCH naming `attempt`, as cmd_task.c's attempt_check and
 * reply_not_running word it: 0, SLUICE_ENOTFOUND or SLUICE_ESTATE (with the task's state). */
static int engine_fence(sluice_engine *e, uint64_t id, int attempt, sluice_task_state *st, int *att)
{
    sluice_task_info ti;

    if (sluice_engine_task_info(e, id, &ti) != 0)
        return SLUICE_ENOTFOUND;
    *st = ti.state;
    *att = ti.attempt;
    if (ti.state != SLUICE_TASK_RUNNING || (attempt > 0 && attempt != ti.attempt))
        return SLUICE_ESTATE;
    return 0;
}

static void differential(unsigned seed, int steps)
{
    static const char *const keys[DKEYS] = {"a", "b", "c"};
    const char *limits[] = {"r", "c", NULL};
    sluice_engine_policy ep;
    sluice_limit_policy lp;
    sluice_type_policy tp;
    sluice_engine *e;
    char msg[256];
    uint64_t live[DMAXLIVE * 4];
    int live_att[DMAXLIVE * 4];
    size_t nlive = 0;
    uint64_t nadded = 0;
    long delivered = 0, parked_seen = 0, unfinished = 0, busy = 0, busy_parked = 0;
    /* Seeds from 100 on run with small caps on both sides (max_tasks, max_parked), so that
     * BUSY refusals and RATELIMITED failures of a full parking lot come often. */
    int capped = seed >= 100;
    redisReply *infos;
    redisReply *fr = redisCommand(conn, "FLUSHDB");

    freeReplyObject(fr);
    rnd_state = 0x9e3779b97f4a7c15u ^ seed;
    sluice_engine_policy_init(&ep);
    if (capped) {
        ep.max_tasks = 12;
        ep.max_parked = 3;
    }
    rtask_batch_set_caps(B, capped ? ep.max_tasks : 0, capped ? ep.max_parked : 0);
    if (sluice_engine_new(&ep, &e) != 0)
        exit(2);
    sluice_limit_def_init(&drate, SLUICE_RATE);
    drate.limit = 2;
    drate.period_ns = SEC;
    drate.burst = 2;
    sluice_limit_def_init(&dconc, SLUICE_CONCURRENCY);
    dconc.limit = 2;
    dconc.ttl_ns = 2 * SEC;
    sluice_limit_policy_init(&lp);
    lp.name = "r";
    lp.def = drate;
    lp.key_source = SLUICE_KEY_PATH;
    lp.key_path = "k";
    if (sluice_engine_set_limit(e, &lp, now_ns, msg, sizeof msg) != 0)
        exit(2);
    lp.name = "c";
    lp.def = dconc;
    if (sluice_engine_set_limit(e, &lp, now_ns, msg, sizeof msg) != 0)
        exit(2);
    sluice_type_policy_init(&tp);
    tp.name = "w";
    tp.limits = (char **)limits;
    tp.nlimits = 2;
    tp.retry.max_attempts = 3;
    tp.retry.backoff = SLUICE_BACKOFF_FIXED;
    tp.retry.base_ns = SEC;
    tp.retry.throttle_retries = 1;
    tp.lease_ns = 2 * SEC;
    if (sluice_engine_set_type(e, &tp, now_ns, msg, sizeof msg) != 0) {
        fprintf(stderr, "set_type: %s\n", msg);
        exit(2);
    }
    for (int step = 0; step < steps; step++) {
        int op = (int)rnd(10);

        now_ns += (int64_t)rnd(8) * 100 * MS;
        sluice_engine_tick(e, now_ns);
        /* The node's timer: a claim of no task takes back lapsed leases and wakes due queues,
         * as the engine's tick does. */
        CHECK(claim("-", 1, NULL, NULL, NULL).ndelivered == 0);
        if (op < (capped ? 4 : 3) && unfinished < DMAXLIVE) {
            const char *k = keys[rnd(DKEYS)];
            int prio = (int)rnd(3) - 1;
            int64_t delay = rnd(4) == 0 ? (int64_t)rnd(20) * 100 * MS : 0;
            char payload[32];
            sluice_task_spec sp;
            sluice_submit_error err;
            uint64_t id = 0;
            rtask_result r;
            int erc;

            snprintf(payload, sizeof payload, "{\"k\":\"%s\"}", k);
            memset(&sp, 0, sizeof sp);
            sp.type = "w";
            sp.payload = payload;
            sp.payload_len = strlen(payload);
            sp.has_priority = 1;
            sp.priority = prio;
            sp.not_before_ns = delay ? now_ns + delay : 0;
            erc = sluice_engine_submit(e, &sp, now_ns, &id, &err);
            if (!capped)
                SAME("submit rc", 0, erc);
            r = rt_add(k, prio, delay);
            SAME("add rc", erc, r.rc);
            if (erc == SLUICE_EBUSY) {
                /* Which cap: the engine's message names it. */
                SAME("busy by max_parked", strstr(err.message, "max_parked") != NULL,
                     r.busy_parked);
                busy++; /* no id was taken on either side */
                busy_parked += r.busy_parked;
            } else {
                SAME("add id", id, r.id);
                nadded++;
            }
            if (getenv("TRACE"))
                fprintf(stderr, "%d t=%lld add %llu k=%s prio=%d delay=%lld\n", step,
                        (long long)((now_ns / MS) % 100000), (unsigned long long)id, k, prio,
                        (long long)(delay / MS));
        } else if (op < 6) {
            const char *types[1] = {"w"};
            sluice_delivery dv[3];
            size_t max = 1 + (size_t)rnd(3);
            uint64_t ids[3];
            int att[3];
            int n = sluice_engine_poll(e, types, 1, max, now_ns, dv);
            rtask_result r = claim("w", max, ids, att, NULL);

            if (getenv("TRACE")) {
                fprintf(stderr, "%d t=%lld claim %zu: engine", step,
                        (long long)((now_ns / MS) % 100000), max);
                for (int i = 0; i < n; i++)
                    fprintf(stderr, " %llu/%d", (unsigned long long)dv[i].id, dv[i].attempt);
                fprintf(stderr, " redis");
                for (size_t i = 0; i < r.ndelivered; i++)
                    fprintf(stderr, " %llu/%d", (unsigned long long)ids[i], att[i]);
                fprintf(stderr, "\n");
            }
            SAME("claim count", n, r.ndelivered);
            for (int i = 0; i < n; i++) {
                SAME("claim id", dv[i].id, ids[i]);
                SAME("claim attempt", dv[i].attempt, att[i]);
                if (nlive < sizeof live / sizeof live[0]) {
                    live[nlive] = ids[i];
                    live_att[nlive++] = att[i];
                }
                delivered++;
            }
            if (n == 0 && r.next_wake_ns == 0)
                SAME("next wake (none)", sluice_engine_next_wake(e) >= SLUICE_NEVER, 1);
        } else if (nlive > 0) {
            size_t pick = (size_t)rnd(nlive);
            uint64_t id = live[pick];
            int attempt = rnd(5) == 0 ? live_att[pick] + 1 : live_att[pick];
            sluice_task_state st = 0;
            int eatt = 0, erc = engine_fence(e, id, attempt, &st, &eatt);
            rtask_result r;

            if (op < 8) {
                if (erc == 0)
                    erc = sluice_engine_ack(e, id, -1, now_ns);
                r = done(RTASK_ACK, id, attempt, NULL);
            } else if (op < 9) {
                rtask_done f = {.mode = SLUICE_FAIL_MODE_RETRY,
                                .cost = -1,
                                .retry_after_ns = rnd(2) ? -1 : (int64_t)rnd(30) * 100 * MS};

                if (erc == 0)
                    erc =
                        f.retry_after_ns < 0
                            ? sluice_engine_fail(e, id, SLUICE_FAIL_MODE_RETRY, NULL, now_ns)
                            : sluice_engine_fail_retry_after(e, id, f.retry_after_ns, NULL, now_ns);
                r = done(RTASK_FAIL, id, attempt, &f);
            } else {
                int64_t until = 0;

                if (erc == 0)
                    erc = sluice_engine_touch(e, id, now_ns, &until);
                r = done(RTASK_TOUCH, id, attempt, NULL);
                if (erc == 0)
                    SAME("touch until", until, r.lease_until_ns);
            }
            if (getenv("TRACE"))
                fprintf(stderr, "%d t=%lld %s %llu/%d: engine %d redis %d\n", step,
                        (long long)((now_ns / MS) % 100000),
                        op < 8   ? "ack"
                        : op < 9 ? "fail"
                                 : "touch",
                        (unsigned long long)id, attempt, erc, r.rc);
            SAME("done rc", erc, r.rc);
            if (erc == SLUICE_ESTATE &&
                !(st == SLUICE_TASK_QUEUED && r.state == SLUICE_TASK_PARKED))
                SAME("refusal state", st, r.state); /* parked/queued: see the state check */
            if (erc != 0 || rnd(2) == 0) {
                live[pick] = live[--nlive];
                live_att[pick] = live_att[nlive];
            }
        }
        /* Every task's state and attempt, on both sides. */
        unfinished = 0;
        if (nadded == 0)
            continue;
        rtask_batch_reset(B); /* one call reads them all */
        rtask_batch_set_now(B, now_ns);
        for (uint64_t id = 1; id <= nadded; id++) {
            rtask_done q = {.id = id, .cost = -1, .retry_after_ns = -1};

            CHECK(rtask_batch_add_info(B, &q) == (int)(id - 1));
        }
        infos = run(B);
        for (uint64_t id = 1; id <= nadded; id++) {
            sluice_task_info ti;
            rtask_task t;

            if (sluice_engine_task_info(e, id, &ti) != 0)
                continue;
            CHECK(rtask_batch_task(B, infos, id - 1, 0, &t) == 0);
            /* The engine's tick wakes a parked task at its slot; the script wakes it when a
             * claim next looks: until then INFO says parked where the engine says queued. */
            if (getenv("TRACE") && ti.state < SLUICE_TASK_DONE)
                fprintf(stderr, "  %llu:%d/%d", (unsigned long long)id, ti.state, t.state);
            if (!(ti.state == SLUICE_TASK_QUEUED && t.state == SLUICE_TASK_PARKED)) {
                if (ti.state != t.state && getenv("TRACE")) {
                    sluice_explanation ex;
                    redisReply *z = redisCommand(conn, "ZRANGE sluice:{all}:wakes 0 -1 WITHSCORES");

                    if (sluice_engine_explain(e, id, now_ns, &ex) == 0)
                        fprintf(stderr, "\ntask %llu differs: engine: %s\n", (unsigned long long)id,
                                ex.text);
                    for (size_t i = 0; z && i < z->elements; i++)
                        fprintf(stderr, "  wakes: %s\n", z->element[i]->str);
                    freeReplyObject(z);
                }
                SAME("task state", ti.state, t.state);
            }
            SAME("task attempt", ti.attempt, t.attempt);
            if (ti.state == SLUICE_TASK_RUNNING)
                SAME("task lease", ti.lease_until_ns, t.lease_until_ns);
            parked_seen += ti.state == SLUICE_TASK_PARKED;
            if (getenv("TRACE") && ti.state == SLUICE_TASK_PARKED) {
                sluice_explanation ex;

                if (sluice_engine_explain(e, id, now_ns, &ex) == 0 && ex.limit && ex.key) {
                    redisReply *z = redisCommand(
                        conn, "ZSCORE sluice:{all}:wakes sluice:{all}:wq:sluice:{%s}:1:%s:%s",
                        ex.key, ex.limit, ex.key);
                    long long ems = (long long)((ex.wake_ns + MS - 1) / MS);

                    if (z && (z->type != REDIS_REPLY_STRING || atoll(z->str) != ems))
                        fprintf(stderr, "\n  queue %s:%s wake: engine %lld redis %s\n", ex.limit,
                                ex.key, ems % 100000,
                                z->type == REDIS_REPLY_STRING ? z->str + 8 : "none");
                    freeReplyObject(z);
                }
            }
            if (getenv("TRACE") && id == nadded)
                fprintf(stderr, "\n");
            unfinished += ti.state < SLUICE_TASK_DONE;
        }
        freeReplyObject(infos);
    }
    sluice_engine_free(e);
    rtask_batch_set_caps(B, 0, 0);
    printf("differential seed %u: %d steps, %llu tasks, %ld deliveries, %ld parked states seen, "
           "%ld adds refused by the caps (%ld by max_parked), every answer equal\n",
           seed, steps, (unsigned long long)nadded, delivered, parked_seen, busy, busy_parked);
}

int main(int argc, char **argv)
{
    redisReply *r;
    size_t len;
    const char *text;

    if (argc < 2) {
        fprintf(stderr, "usage: sluice_tasks_redis PORT\n");
        return 2;
    }
    conn = redisConnect("127.0.0.1", atoi(argv[1]));
    if (!conn || conn->err) {
        fprintf(stderr, "connect: %s\n", conn ? conn->errstr : "no memory");
        return 2;
    }
    r = redisCommand(conn, "FLUSHDB");
    freeReplyObject(r);
    text = rlim_script(&len);
    r = redisCommand(conn, "SCRIPT LOAD %b", text, len);
    if (!r || r->type != REDIS_REPLY_STRING) {
        fprintf(stderr, "SCRIPT LOAD failed: %s\n", r && r->str ? r->str : conn->errstr);
        return 2;
    }
    snprintf(sha, sizeof sha, "%s", r->str);
    freeReplyObject(r);
    sluice_limit_def_init(&rate_def, SLUICE_RATE);
    rate_def.limit = 1;
    rate_def.period_ns = SEC;
    rate_def.burst = 1;
    sluice_limit_def_init(&conc_def, SLUICE_CONCURRENCY);
    conc_def.limit = 1;
    conc_def.ttl_ns = 60 * SEC;
    sluice_limit_def_init(&quota_def, SLUICE_QUOTA);
    quota_def.limit = 10;
    quota_def.calendar = SLUICE_CAL_NONE;
    if (rtask_batch_new(NULL, &B) != 0)
        return 2;
    if (argc >= 3) { /* PORT SEED [STEPS]: the differential run alone */
        differential((unsigned)strtoul(argv[2], NULL, 10), argc > 3 ? atoi(argv[3]) : 2000);
        rtask_batch_free(B);
        redisFree(conn);
        printf("sluice_tasks_redis: %d checks passed\n", checks);
        return 0;
    }
    basic();
    lapse_and_fence();
    delay_and_retry();
    rate_park_and_wake();
    concurrency_and_chain();
    retry_after();
    task_key_and_cancel();
    exact_priorities();
    bounded_claim();
    batch_and_errors();
    retries_and_redelivery();
    settle_and_types();
    rtask_batch_free(B);
    redisFree(conn);
    printf("sluice_tasks_redis: %d checks passed\n", checks);
    return 0;
}
