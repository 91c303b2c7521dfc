/* SPDX-License-Identifier: MIT */
/*
 * The encoder and decoder of the task ops of the store script (src/store/redis_tasks.c), without
 * Redis: the exact argument layout of a batch (the ten fixed keys of the tag {all}, the
 * per-request keys, each op's arguments, the priority's urgency code), validation that leaves a
 * batch unchanged, replies built by hand as hiredis hands them over (every op, every status),
 * malformed replies refused with SLUICE_EPARSE and nothing half-read, and out-of-memory sweeps
 * of building a batch. The script itself runs against a real Redis in tests/tools/tasks_redis.c
 * (server_redis_taskq).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <hiredis.h>

#include "sluice/error.h"
#include "sluice/limit.h"
#include "store/redis_limits.h"
#include "store/redis_tasks.h"
#include "reply_fixture.h"
#include "rtask_fixture.h"
#include "testutil.h"

static cmd command_of(rtask_batch *b, const char *sha)
{
    cmd c;

    assert_int_equal(rtask_batch_command(b, sha, &c.argc, &c.argv, &c.argvlen), SLUICE_OK);
    return c;
}

/* ---- layout ------------------------------------------------------------------------------ */

static void test_layout(void **state)
{
    rtask_link l = link_of("api", "k1");
    rtask_add a = add_of(&l, 1);
    const char *types[2] = {"email", "sms"};
    size_t lens[2] = {5, 3};
    rtask_claim c = {types, lens, 2, 10};
    rtask_done d = {.id = 42, .attempt = 2, .cost = 7, .retry_after_ns = -1};
    rtask_batch *b;
    cmd m;
    int k = 0;

    (void)state;
    assert_int_equal(rtask_batch_new("px", &b), SLUICE_OK);
    assert_string_equal(rtask_wake_channel(b), "px:{all}:wake");
    assert_int_equal(rtask_batch_command(b, "sha", &m.argc, &m.argv, &m.argvlen), SLUICE_EINVAL);
    assert_int_equal(rtask_batch_add_add(b, &a), 0);
    assert_int_equal(rtask_batch_add_claim(b, &c), 1);
    assert_int_equal(rtask_batch_add_ack(b, &d), 2);
    rtask_batch_set_now(b, 123);
    rtask_batch_set_caps(b, 500, 40);
    assert_int_equal(rtask_batch_count(b), 3);
    assert_int_equal(rtask_batch_op(b, 0), RTASK_ADD);
    assert_int_equal(rtask_batch_op(b, 1), RTASK_CLAIM);
    assert_int_equal(rtask_batch_op(b, 2), RTASK_ACK);
    assert_int_equal(rtask_batch_op(b, 3), 0);
    m = command_of(b, "abc");
    assert_arg(&m, k++, "EVALSHA");
    assert_arg(&m, k++, "abc");
    assert_arg(&m, k++, "18"); /* 10 fixed + 2 (add) + 2 (link) + 4 (claim) */
    assert_arg(&m, k++, "px:{all}:clock");
    assert_arg(&m, k++, "px:{all}:seq");
    assert_arg(&m, k++, "px:{all}:task");
    assert_arg(&m, k++, "px:{all}:body");
    assert_arg(&m, k++, "px:{all}:links");
    assert_arg(&m, k++, "px:{all}:run");
    assert_arg(&m, k++, "px:{all}:wakes");
    assert_arg(&m, k++, "px:{all}:tkey");
    assert_arg(&m, k++, "px:{all}:done");
    assert_arg(&m, k++, "px:{all}:msg");
    assert_arg(&m, k++, "px:{all}:ready:email");
    assert_arg(&m, k++, "px:{all}:delayed:email");
    assert_arg(&m, k++, "px:{k1}:3:api:k1"); /* where THROTTLE keeps it */
    assert_arg(&m, k++, "px:{k1}:clock");
    assert_arg(&m, k++, "px:{all}:ready:email");
    assert_arg(&m, k++, "px:{all}:delayed:email");
    assert_arg(&m, k++, "px:{all}:ready:sms");
    assert_arg(&m, k++, "px:{all}:delayed:sms");
    assert_arg(&m, k++, "T2");
    assert_arg(&m, k++, "123");
    assert_arg(&m, k++, "3");
    assert_arg(&m, k++, "500"); /* the caps */
    assert_arg(&m, k++, "40");
    assert_arg(&m, k++, "A 20");
    assert_arg(&m, k++, "email");
    assert_arg(&m, k++, "{\"to\":\"x\"}");
    assert_arg(&m, k++, "");
    assert_arg(&m, k++, "0");
    assert_arg(&m, k++, "7ffffffffffffffc"); /* ~(3 ^ 2^63) */
    assert_arg(&m, k++, "3");
    assert_arg(&m, k++, "0");
    assert_arg(&m, k++, "30000000000");
    assert_arg(&m, k++, "3");
    assert_arg(&m, k++, "1");
    assert_arg(&m, k++, "1000000000");
    assert_arg(&m, k++, "60000000000");
    assert_arg(&m, k++, "1");
    assert_arg(&m, k++, "0");
    assert_arg(&m, k++, "4"); /* units */
    assert_arg(&m, k++, "1");
    assert_arg(&m, k++, "1 10 1000000000 5 0 30000000000 0"); /* limits.lua's definition */
    assert_arg(&m, k++, "2");
    assert_arg(&m, k++, "2");
    {
        char h[32];

        snprintf(h, sizeof h, "%lld", (long long)rate_def.horizon_ns);
        assert_arg(&m, k++, h);
    }
    assert_arg(&m, k++, "C 4");
    assert_arg(&m, k++, "10");
    assert_arg(&m, k++, "2");
    assert_arg(&m, k++, "email");
    assert_arg(&m, k++, "sms");
    assert_arg(&m, k++, "K 7");
    assert_arg(&m, k++, "42");
    assert_arg(&m, k++, "2");
    assert_arg(&m, k++, "7");
    assert_arg(&m, k++, "0");
    assert_arg(&m, k++, "-1");
    assert_arg(&m, k++, "");
    assert_arg(&m, k++, "0");
    assert_int_equal(m.argc, k);
    /* EVAL carries the one store script; TIME when no time is injected. */
    rtask_batch_set_now(b, 0);
    m = command_of(b, NULL);
    {
        size_t len;
        const char *text = rlim_script(&len);

        assert_arg(&m, 0, "EVAL");
        assert_int_equal(m.argvlen[1], len);
        assert_ptr_equal(m.argv[1], text);
        assert_non_null(strstr(text, "tasks_main"));
        assert_arg(&m, 3 + 18 + 1, "");
    }
    rtask_batch_reset(b);
    assert_int_equal(rtask_batch_count(b), 0);
    rtask_batch_free(b);
    rtask_batch_free(NULL);
}

static void test_priority_codes(void **state)
{
    static const int64_t prios[] = {INT64_MAX, INT64_MAX - 1, 1, 0, -1, INT64_MIN + 1, INT64_MIN};
    char prev[17] = "";
    rtask_batch *b;

    (void)state;
    /* Higher priorities get smaller codes, byte for byte: the ready zsets sort exactly. */
    for (size_t i = 0; i < sizeof prios / sizeof prios[0]; i++) {
        rtask_add a = add_of(NULL, 0);
        cmd m;

        assert_int_equal(rtask_batch_new(NULL, &b), SLUICE_OK);
        a.priority = prios[i];
        assert_int_equal(rtask_batch_add_add(b, &a), 0);
        m = command_of(b, "s");
        /* EVALSHA s 12 <10 fixed> ready delayed T2 now 1 caps caps head type payload tkey has
         * code */
        assert_int_equal(m.argvlen[3 + 12 + 5 + 5], 16);
        assert_true(memcmp(prev, m.argv[3 + 12 + 5 + 5], 16) < 0 || i == 0);
        memcpy(prev, m.argv[3 + 12 + 5 + 5], 16);
        prev[16] = '\0';
        rtask_batch_free(b);
    }
    assert_string_equal(prev, "ffffffffffffffff");
}

static void test_refused(void **state)
{
    rtask_link l = link_of("api", "k");
    rtask_link bad = l;
    rtask_add a = add_of(&l, 1);
    const char *types[1] = {"t"};
    size_t lens[1] = {1}, zero[1] = {0};
    rtask_claim c = {types, lens, 1, 1};
    rtask_done d = {.id = 1, .cost = -1, .retry_after_ns = -1};
    rtask_batch *b;
    cmd before, after;

    (void)state;
    assert_int_equal(rtask_batch_new("a{b", &b), SLUICE_EINVAL);
    assert_null(b);
    assert_int_equal(rtask_batch_new(NULL, &b), SLUICE_OK);
    assert_int_equal(rtask_batch_add_claim(b, &c), 0);
    before = command_of(b, "s");
    {
        int argc = before.argc;

        a.typelen = 0;
        assert_int_equal(rtask_batch_add_add(b, &a), SLUICE_EINVAL);
        a = add_of(&l, 1);
        a.lease_ns = 0;
        assert_int_equal(rtask_batch_add_add(b, &a), SLUICE_EINVAL);
        a = add_of(&l, 1);
        a.retry.max_attempts = 0;
        assert_int_equal(rtask_batch_add_add(b, &a), SLUICE_EINVAL);
        a = add_of(&l, 1);
        a.delay_ns = -1;
        assert_int_equal(rtask_batch_add_add(b, &a), SLUICE_EINVAL);
        /* A bad second link: the first link's keys and arguments are rolled back. */
        {
            rtask_link two[2] = {l, l};

            two[1].lim.units = 0;
            a = add_of(two, 2);
            assert_int_equal(rtask_batch_add_add(b, &a), SLUICE_EINVAL);
            two[1] = l;
            two[1].flags = 8;
            assert_int_equal(rtask_batch_add_add(b, &a), SLUICE_EINVAL);
        }
        bad.lim.def = NULL;
        a = add_of(&bad, 1);
        assert_int_equal(rtask_batch_add_add(b, &a), SLUICE_EINVAL);
        c.count = 0;
        assert_int_equal(rtask_batch_add_claim(b, &c), SLUICE_EINVAL);
        c.count = RTASK_CLAIM_MAX + 1;
        assert_int_equal(rtask_batch_add_claim(b, &c), SLUICE_EINVAL);
        c.count = 1;
        c.typelens = zero;
        assert_int_equal(rtask_batch_add_claim(b, &c), SLUICE_EINVAL);
        d.id = 0;
        assert_int_equal(rtask_batch_add_ack(b, &d), SLUICE_EINVAL);
        d.id = 1;
        d.mode = SLUICE_FAIL_MODE_DEAD;
        d.retry_after_ns = 5;
        assert_int_equal(rtask_batch_add_fail(b, &d), SLUICE_EINVAL);
        d.mode = (sluice_fail_mode)99;
        d.retry_after_ns = -1;
        assert_int_equal(rtask_batch_add_fail(b, &d), SLUICE_EINVAL);
        assert_int_equal(rtask_batch_count(b), 1);
        after = command_of(b, "s");
        assert_int_equal(after.argc, argc);
    }
    rtask_batch_free(b);
}

/* ---- replies ----------------------------------------------------------------------------- */

/* A batch of one request of each op: add, claim, ack, fail, touch, cancel, info. */
static rtask_batch *seven(void)
{
    rtask_add a = add_of(NULL, 0);
    const char *types[1] = {"t"};
    size_t lens[1] = {1};
    rtask_claim c = {types, lens, 1, 2};
    rtask_done d = {.id = 9, .cost = -1, .retry_after_ns = -1};
    rtask_batch *b;

    reply_pool_reset();
    assert_int_equal(rtask_batch_new(NULL, &b), SLUICE_OK);
    assert_int_equal(rtask_batch_add_add(b, &a), 0);
    assert_int_equal(rtask_batch_add_claim(b, &c), 1);
    assert_int_equal(rtask_batch_add_ack(b, &d), 2);
    assert_int_equal(rtask_batch_add_fail(b, &d), 3);
    assert_int_equal(rtask_batch_add_touch(b, &d), 4);
    assert_int_equal(rtask_batch_add_cancel(b, &d), 5);
    assert_int_equal(rtask_batch_add_info(b, &d), 6);
    return b;
}

static redisReply *good(void)
{
    return a_(7, a_(1, s_("OK 1700000000000000001 5 1")),
              a_(7, s_("OK 1700000000000000002 2 1 0 0"), s_("5 1 9223372036854775807"), s_("t"),
                 s_("{}"), s_("6 3 1700000030000000002"), s_("t"), s_("{\"a\":1}")),
              a_(1, s_("NOLEASE 1700000000000000003 4 2")), a_(1, s_("OK 3 1 2")),
              a_(1, s_("OK 4 3 2 1700000030000000004")), a_(1, s_("INUSE 5 3 2")),
              a_(5, s_("OK 6 9 5 2 0 4 -9223372036854775808 7 0 1 1 3 0 0 0 -1"), s_("t"), s_("{}"),
                 s_("key"), s_("boom")));
}

static void test_decode(void **state)
{
    rtask_batch *b = seven();
    redisReply *r = good();
    rtask_result res;
    rtask_task t;

    (void)state;
    assert_int_equal(rtask_batch_result(b, r, 0, &res), SLUICE_OK);
    assert_int_equal(res.rc, 0);
    assert_int_equal(res.now_ns, INT64_C(1700000000000000001));
    assert_int_equal(res.id, 5);
    assert_int_equal(res.replaced, 1);
    assert_int_equal(rtask_batch_result(b, r, 1, &res), SLUICE_OK);
    assert_int_equal(res.ndelivered, 2);
    assert_int_equal(res.nfailed, 1);
    assert_int_equal(res.next_wake_ns, 0);
    assert_int_equal(res.more, 0);
    assert_int_equal(rtask_batch_task(b, r, 1, 0, &t), SLUICE_OK);
    assert_int_equal(t.id, 5);
    assert_int_equal(t.attempt, 1);
    assert_int_equal(t.lease_until_ns, INT64_MAX);
    assert_int_equal(t.state, SLUICE_TASK_RUNNING);
    assert_memory_equal(t.type, "t", 1);
    assert_int_equal(rtask_batch_task(b, r, 1, 1, &t), SLUICE_OK);
    assert_int_equal(t.id, 6);
    assert_int_equal(t.attempt, 3);
    assert_int_equal(t.payload_len, 7);
    assert_int_equal(rtask_batch_task(b, r, 1, 2, &t), SLUICE_EINVAL);
    assert_int_equal(rtask_batch_task(b, r, 0, 0, &t), SLUICE_EINVAL); /* not a claim */
    assert_int_equal(rtask_batch_result(b, r, 2, &res), SLUICE_OK);
    assert_int_equal(res.rc, SLUICE_ESTATE);
    assert_int_equal(res.state, SLUICE_TASK_DONE);
    assert_int_equal(res.attempt, 2);
    assert_int_equal(rtask_batch_result(b, r, 3, &res), SLUICE_OK);
    assert_int_equal(res.rc, 0);
    assert_int_equal(res.state, SLUICE_TASK_QUEUED);
    assert_int_equal(res.attempt, 2);
    assert_int_equal(rtask_batch_result(b, r, 4, &res), SLUICE_OK);
    assert_int_equal(res.lease_until_ns, INT64_C(1700000030000000004));
    assert_int_equal(rtask_batch_result(b, r, 5, &res), SLUICE_OK);
    assert_int_equal(res.rc, SLUICE_EBUSY);
    assert_int_equal(res.state, SLUICE_TASK_RUNNING);
    assert_int_equal(rtask_batch_result(b, r, 6, &res), SLUICE_OK);
    assert_int_equal(res.id, 9);
    assert_int_equal(rtask_batch_task(b, r, 6, 0, &t), SLUICE_OK);
    assert_int_equal(t.state, SLUICE_TASK_FAILED);
    assert_int_equal(t.attempt, 2);
    assert_int_equal(t.fail_reason, SLUICE_FAIL_ATTEMPTS);
    assert_int_equal(t.priority, INT64_MIN);
    assert_int_equal(t.submitted_ns, 7);
    assert_int_equal(t.not_before_ns, 0);
    assert_memory_equal(t.task_key, "key", 3);
    assert_int_equal(t.fail_message_len, 4);
    assert_int_equal(t.units, 3);
    assert_int_equal(t.park_link, 0);
    assert_int_equal(t.wake_ms, -1);
    assert_int_equal(rtask_batch_task(b, r, 6, 1, &t), SLUICE_EINVAL);
    assert_int_equal(rtask_batch_result(b, r, 7, &res), SLUICE_EINVAL);
    rtask_batch_free(b);
}

/* INFO of a parked task ends with where it waits: its link, the tasks ahead of it in that link
 * key's wait queue, the queue's length and its wake in ms; each out of range is refused. */
static void test_info_parked(void **state)
{
    static const char parked[] = "OK 6 9 2 0 0 0 -3 100 0 0 0 1 2 3 4 1700000000123";
    static const char *const bad[] = {
        "OK 6 9 2 0 0 0 -3 100 0 0 0 1 2 3 4",                 /* its wake missing */
        "OK 6 9 2 0 0 0 -3 100 0 0 0 1 -1 3 4 5",              /* link -1 */
        "OK 6 9 2 0 0 0 -3 100 0 0 0 1 2 -1 4 5",              /* position -1 */
        "OK 6 9 2 0 0 0 -3 100 0 0 0 1 2 3 -4 5",              /* length -4 */
        "OK 6 9 2 0 0 0 -3 100 0 0 0 1 2 3 4 -2",              /* wake -2 */
        "OK 6 9 2 0 0 0 -3 100 0 0 0 1 2 3 4 1700000000123 0", /* a field too many */
        "OK 6 9 1 0 0 0 -3 100 0 0 0 1 0 0 0 -1 5 2 1",        /* three flow fields */
        "OK 6 9 1 0 0 0 -3 100 0 0 0 1 0 0 0 -1 5 -2",         /* flows -2 */
    };
    static const char fair[] = "OK 6 9 1 0 0 0 -3 100 0 0 0 1 0 0 0 -1 5 2";
    rtask_task t;
    int hk, hm;

    (void)state;
    assert_int_equal(rtask_parse_info(parked, sizeof parked - 1, &t, &hk, &hm), SLUICE_OK);
    assert_int_equal(t.state, SLUICE_TASK_PARKED);
    assert_int_equal(t.park_link, 2);
    assert_int_equal(t.position, 3);
    assert_int_equal(t.queue_length, 4);
    assert_int_equal(t.wake_ms, INT64_C(1700000000123));
    assert_int_equal(t.flows, 0);
    /* A due task of a fair flow: its tenant's ready tasks and the flows taking turns. */
    assert_int_equal(rtask_parse_info(fair, sizeof fair - 1, &t, &hk, &hm), SLUICE_OK);
    assert_int_equal(t.state, SLUICE_TASK_QUEUED);
    assert_int_equal(t.flow_ready, 5);
    assert_int_equal(t.flows, 2);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(rtask_parse_info(bad[i], strlen(bad[i]), &t, &hk, &hm), SLUICE_EPARSE);
        assert_int_equal(t.park_link, 0);
        assert_int_equal(t.position, 0);
    }
}

static void test_statuses(void **state)
{
    rtask_batch *b = seven();
    redisReply *r = a_(7, a_(1, s_("EXISTS 1 12")), a_(1, s_("OK 2 0 0 1700000001000000000 1")),
                       a_(1, s_("NOTASK 3")), a_(1, s_("INVAL 4 bad link 1")),
                       a_(1, s_("NOLEASE 5 3 7")), a_(1, s_("OK 6 6 0 0")), a_(1, s_("NOTASK 7")));
    rtask_result res;

    (void)state;
    assert_int_equal(rtask_batch_result(b, r, 0, &res), SLUICE_OK);
    assert_int_equal(res.rc, SLUICE_EEXIST);
    assert_int_equal(res.id, 12);
    assert_int_equal(rtask_batch_result(b, r, 1, &res), SLUICE_OK);
    assert_int_equal(res.next_wake_ns, INT64_C(1700000001000000000));
    assert_int_equal(res.more, 1);
    assert_int_equal(rtask_batch_result(b, r, 2, &res), SLUICE_OK);
    assert_int_equal(res.rc, SLUICE_ENOTFOUND);
    assert_int_equal(rtask_batch_result(b, r, 3, &res), SLUICE_OK);
    assert_int_equal(res.rc, SLUICE_EINVAL);
    assert_int_equal(res.msglen, 10);
    assert_memory_equal(res.msg, "bad link 1", 10);
    assert_int_equal(rtask_batch_result(b, r, 4, &res), SLUICE_OK);
    assert_int_equal(res.rc, SLUICE_ESTATE);
    assert_int_equal(res.attempt, 7);
    assert_int_equal(rtask_batch_result(b, r, 5, &res), SLUICE_OK);
    assert_int_equal(res.cancelled, 0);
    assert_int_equal(res.state, SLUICE_TASK_CANCELLED);
    rtask_batch_free(b);
}

static void expect_bad(rtask_batch *b, size_t i, redisReply *r)
{
    rtask_result res;

    assert_int_equal(rtask_batch_result(b, r, i, &res), SLUICE_EPARSE);
    assert_int_equal(res.rc, 0);
    assert_int_equal(res.now_ns, 0);
    assert_int_equal(res.id, 0);
}

static void test_malformed(void **state)
{
    rtask_batch *b = seven();
    redisReply *ok = good();
    rtask_result res;
    rtask_task t;

    (void)state;
    expect_bad(b, 0, NULL);
    expect_bad(b, 0, s_("OK"));
    expect_bad(b, 0, a_(1, a_(1, s_("OK 1 5 1")))); /* wrong count of requests */
    {
        redisReply *bad = good();

        bad->element[0] = a_(1, s_("OK 1 5 2")); /* replaced must be 0/1 */
        expect_bad(b, 0, bad);
        bad->element[0] = a_(1, s_("OK 1 0 0")); /* id 0 */
        expect_bad(b, 0, bad);
        bad->element[0] = a_(1, s_("OK 1 5 0 9")); /* a field too many */
        expect_bad(b, 0, bad);
        bad->element[0] = a_(1, s_("NOLEASE 1 3 1")); /* not an ADD's status */
        expect_bad(b, 0, bad);
        bad->element[0] = a_(1, s_("OK 99999999999999999999 5 0")); /* overflow */
        expect_bad(b, 0, bad);
        bad->element[0] = a_(1, s_("OK 1  5 0")); /* an empty field */
        expect_bad(b, 0, bad);
        bad->element[0] = a_(0);
        expect_bad(b, 0, bad);
        bad->element[0] = s_("OK 1 5 0"); /* not an array */
        expect_bad(b, 0, bad);
        bad->element[1] = a_(2, s_("OK 2 1 0 0 0"), s_("5 1 9")); /* 3 elements a task */
        expect_bad(b, 1, bad);
        bad->element[2] = a_(1, s_("OK 3 9 1")); /* a state out of range */
        expect_bad(b, 2, bad);
        bad->element[2] = a_(1, s_("INUSE 3 3 1")); /* INUSE answers a CANCEL only */
        expect_bad(b, 2, bad);
        bad->element[2] = a_(1, s_("INVAL 3")); /* INVAL needs its message */
        expect_bad(b, 2, bad);
        bad->element[2] = a_(1, s_("WHAT 3"));
        expect_bad(b, 2, bad);
        bad->element[6] =
            a_(4, s_("OK 6 9 5 2 0 4 0 7 0 1 1 1 0 0 0 -1"), s_("t"), s_("{}"), s_("k"));
        expect_bad(b, 6, bad);
        assert_int_equal(rtask_batch_task(b, bad, 6, 0, &t), SLUICE_EPARSE);
        assert_int_equal(t.id, 0);
        bad->element[1] = a_(4, s_("OK 2 1 0 0 0"), s_("5 0 9"), s_("t"), s_("{}"));
        assert_int_equal(rtask_batch_result(b, bad, 1, &res), SLUICE_OK);
        assert_int_equal(rtask_batch_task(b, bad, 1, 0, &t), SLUICE_EPARSE); /* attempt 0 */
        assert_int_equal(t.id, 0);
    }
    assert_int_equal(rtask_batch_result(b, ok, 0, &res), SLUICE_OK);
    rtask_batch_free(b);
}

/* ---- memory ------------------------------------------------------------------------------ */

static int build_batch(void *arg)
{
    rtask_link l[2] = {link_of("api", "k1"), link_of("a-very-long-limit-name", "another key")};
    rtask_add a = add_of(l, 2);
    const char *types[2] = {"email", "sms"};
    size_t lens[2] = {5, 3};
    rtask_claim c = {types, lens, 2, 10};
    rtask_done d = {.id = 42, .cost = -1, .retry_after_ns = -1};
    rtask_batch *b;
    cmd m;
    int rc;

    (void)arg;
    rc = rtask_batch_new("oom", &b);
    if (rc != SLUICE_OK)
        return rc;
    for (int i = 0; i < 20 && rc >= 0; i++) {
        rc = rtask_batch_add_add(b, &a);
        if (rc >= 0)
            rc = rtask_batch_add_claim(b, &c);
        if (rc >= 0)
            rc = rtask_batch_add_fail(b, &d);
    }
    if (rc >= 0)
        rc = rtask_batch_command(b, "sha", &m.argc, &m.argv, &m.argvlen);
    rtask_batch_free(b);
    return rc < 0 ? rc : SLUICE_OK;
}

static void test_oom(void **state)
{
    (void)state;
    assert_true(oom_sweep(build_batch, NULL, 2000) > 1);
}

/* The caps' and group slots' answers to an ADD, and a group slot's two extra arguments. */
static void test_caps_and_groups(void **state)
{
    rtask_result res;
    rtask_link l = link_of("api", "k");
    rtask_add a = add_of(&l, 1);
    sluice_limit_def conc;
    rtask_batch *b;
    cmd m;

    (void)state;
    assert_int_equal(rtask_parse_answer(RTASK_ADD, "BUSY 5 tasks", 12, 1, &res), SLUICE_OK);
    assert_int_equal(res.rc, SLUICE_EBUSY);
    assert_int_equal(res.busy_parked, 0);
    assert_int_equal(res.now_ns, 5);
    assert_int_equal(rtask_parse_answer(RTASK_ADD, "BUSY 5 parked", 13, 1, &res), SLUICE_OK);
    assert_int_equal(res.rc, SLUICE_EBUSY);
    assert_int_equal(res.busy_parked, 1);
    assert_int_equal(rtask_parse_answer(RTASK_ADD, "BUSY 5 other", 12, 1, &res), SLUICE_EPARSE);
    assert_int_equal(rtask_parse_answer(RTASK_CLAIM, "BUSY 5 tasks", 12, 1, &res), SLUICE_EPARSE);
    assert_int_equal(rtask_parse_answer(RTASK_ADD, "NOLEASE 5", 9, 1, &res), SLUICE_OK);
    assert_int_equal(res.rc, SLUICE_ESTALE);
    assert_int_equal(rtask_parse_answer(RTASK_ADD, "NOLEASE 5 1 2", 13, 1, &res), SLUICE_EPARSE);
    /* A group link must be a concurrency link of the task. */
    assert_int_equal(rtask_batch_new(NULL, &b), SLUICE_OK);
    a.group_link = 1;
    a.group_lease = 77;
    assert_int_equal(rtask_batch_add_add(b, &a), SLUICE_EINVAL);
    sluice_limit_def_init(&conc, SLUICE_CONCURRENCY);
    conc.limit = 1;
    conc.ttl_ns = 1000000000;
    l.lim.def = &conc;
    a.group_link = 2;
    assert_int_equal(rtask_batch_add_add(b, &a), SLUICE_EINVAL);
    a.group_link = 1;
    a.group_lease = 0;
    assert_int_equal(rtask_batch_add_add(b, &a), SLUICE_EINVAL);
    a.group_lease = 77;
    assert_int_equal(rtask_batch_add_add(b, &a), 0);
    m = command_of(b, "s");
    assert_string_equal(m.argv[m.argc - 2], "1"); /* after the link's four arguments */
    assert_string_equal(m.argv[m.argc - 1], "77");
    rtask_batch_free(b);
}

/* A fair ADD: the group slot's two written as "0" "0" when it has none, then "1", the tenant and
 * the turn's units; rtask_add_nargs counts them (redis_recur.c copies that many). */
static void test_fair_add(void **state)
{
    rtask_link l = link_of("api", "k");
    rtask_add a = add_of(&l, 1);
    rtask_batch *b;
    size_t plain = rtask_add_nargs(&a);
    cmd m;

    (void)state;
    assert_int_equal(plain, 16 + 4);
    assert_int_equal(rtask_batch_new(NULL, &b), SLUICE_OK);
    a.fair = 1;
    a.fair_units = 0;
    assert_int_equal(rtask_batch_add_add(b, &a), SLUICE_EINVAL); /* a turn costs >= 1 */
    a.fair_units = 3;
    a.tenant = "acme";
    a.tenant_len = 4;
    assert_int_equal(rtask_add_nargs(&a), plain + 5);
    assert_int_equal(rtask_batch_add_add(b, &a), 0);
    m = command_of(b, "s");
    assert_string_equal(m.argv[m.argc - 5], "0");
    assert_string_equal(m.argv[m.argc - 4], "0");
    assert_string_equal(m.argv[m.argc - 3], "1");
    assert_string_equal(m.argv[m.argc - 2], "acme");
    assert_string_equal(m.argv[m.argc - 1], "3");
    assert_string_equal(m.argv[m.argc - 6 - 20], "A 25"); /* the head counts all of them */
    rtask_batch_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),          cmocka_unit_test(test_priority_codes),
        cmocka_unit_test(test_refused),         cmocka_unit_test(test_decode),
        cmocka_unit_test(test_info_parked),     cmocka_unit_test(test_statuses),
        cmocka_unit_test(test_malformed),       cmocka_unit_test(test_oom),
        cmocka_unit_test(test_caps_and_groups), cmocka_unit_test(test_fair_add),
    };

    return cmocka_run_group_tests(tests, setup, NULL);
}
