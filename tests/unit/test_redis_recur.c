/* SPDX-License-Identifier: MIT */
/*
 * The encoder and decoder of the recur ops of the store script (src/store/redis_recur.c), without
 * Redis: the exact layout of a call (tasks.lua's ten fixed keys then recur.lua's three, each op's
 * arguments), a FIRE's occurrence carried exactly as rtask_batch encodes a TASK.ADD (same keys,
 * same arguments: one ADD code path), validation that leaves a batch unchanged, replies built by
 * hand as hiredis hands them over (every op, every status), malformed replies refused with
 * SLUICE_EPARSE and nothing half-read, and an out-of-memory sweep of building a call. Also the
 * engine's schedule functions the nodes fire with (sluice_recurring_first, _catch_up, _check),
 * against a brute-force walk of the schedule. The script itself runs against a real Redis in
 * tests/server/redis_recur.sh (server_redis_recur).
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

#include "sluice/engine.h"
#include "sluice/error.h"
#include "sluice/limit.h"
#include "store/redis_recur.h"
#include "store/redis_tasks.h"
#include "reply_fixture.h"
#include "rtask_fixture.h"
#include "testutil.h"

#define MIN (60 * SEC)

static sluice_recurring_spec spec_of(void)
{
    sluice_recurring_spec s;

    memset(&s, 0, sizeof s);
    s.name = "nightly";
    s.type = "email";
    s.payload = "{}";
    s.payload_len = 2;
    s.key = "acct";
    s.key_len = 4;
    s.interval_ns = 500 * SLUICE_NS_PER_MS;
    s.start_ns = 1000 * SEC;
    s.end_ns = 2000 * SEC;
    s.max_runs = 7;
    return s;
}

static cmd command_of(rrecur_batch *b, const char *sha)
{
    cmd c;

    assert_int_equal(rrecur_batch_command(b, sha, &c.argc, &c.argv, &c.argvlen), SLUICE_OK);
    return c;
}

/* ---- layout ------------------------------------------------------------------------------ */

static void test_layout(void **state)
{
    static const char *const fixed[] = {"clock", "seq",  "task", "body",  "links", "run", "wakes",
                                        "tkey",  "done", "msg",  "recur", "rdue",  "rseq"};
    sluice_recurring_spec sp = spec_of();
    rrecur_fire f1 = {"nightly", 7, 9, 1000 * SEC, 1500 * SEC, 0, NULL};
    rrecur_batch *b;
    char key[64];
    cmd m;
    int k = 0;

    (void)state;
    assert_int_equal(rrecur_batch_new("px", &b), SLUICE_OK);
    assert_int_equal(rrecur_batch_command(b, "sha", &m.argc, &m.argv, &m.argvlen), SLUICE_EINVAL);
    assert_int_equal(rrecur_batch_add_set(b, &sp), 0);
    assert_int_equal(rrecur_batch_add_del(b, "nightly", 7), 1);
    assert_int_equal(rrecur_batch_add_info(b, "nightly", 7), 2);
    assert_int_equal(rrecur_batch_add_list(b, RRECUR_LIST_MAX), 3);
    f1.missed = 2;
    assert_int_equal(rrecur_batch_add_fire(b, &f1), 4);
    assert_int_equal(rrecur_batch_count(b), 5);
    assert_int_equal(rrecur_batch_op(b, 0), RRECUR_SET);
    assert_int_equal(rrecur_batch_op(b, 3), RRECUR_LIST);
    assert_int_equal(rrecur_batch_op(b, 4), RRECUR_FIRE);
    assert_int_equal(rrecur_batch_op(b, 5), 0);
    rrecur_batch_set_now(b, 123);
    m = command_of(b, "abc");
    assert_arg(&m, k++, "EVALSHA");
    assert_arg(&m, k++, "abc");
    assert_arg(&m, k++, "13");
    for (size_t i = 0; i < 13; i++) {
        snprintf(key, sizeof key, "px:{all}:%s", fixed[i]);
        assert_arg(&m, k++, key);
    }
    assert_arg(&m, k++, "R1");
    assert_arg(&m, k++, "123");
    assert_arg(&m, k++, "5");
    assert_arg(&m, k++, "S 10");
    assert_arg(&m, k++, "nightly");
    assert_arg(&m, k++, "email");
    assert_arg(&m, k++, "{}");
    assert_arg(&m, k++, "acct");
    assert_arg(&m, k++, "1");
    assert_arg(&m, k++, "500000000");
    assert_arg(&m, k++, "");
    assert_arg(&m, k++, "1000000000000");
    assert_arg(&m, k++, "2000000000000");
    assert_arg(&m, k++, "7");
    assert_arg(&m, k++, "D 1");
    assert_arg(&m, k++, "nightly");
    assert_arg(&m, k++, "I 1");
    assert_arg(&m, k++, "nightly");
    assert_arg(&m, k++, "L 1");
    assert_arg(&m, k++, "64");
    assert_arg(&m, k++, "F 6");
    assert_arg(&m, k++, "nightly");
    assert_arg(&m, k++, "9");
    assert_arg(&m, k++, "1000000000000");
    assert_arg(&m, k++, "0");
    assert_arg(&m, k++, "1500000000000");
    assert_arg(&m, k++, "2");
    assert_int_equal(m.argc, k);
    /* A cron series: no interval, its text; no key; the default payload. */
    rrecur_batch_reset(b);
    sp.interval_ns = 0;
    sp.cron = "*/5 * * * *";
    sp.key = NULL;
    sp.key_len = 0;
    sp.payload = NULL;
    sp.payload_len = 0;
    sp.start_ns = sp.end_ns = sp.max_runs = 0;
    assert_int_equal(rrecur_batch_add_set(b, &sp), 0);
    m = command_of(b, NULL);
    assert_arg(&m, 0, "EVAL");
    assert_arg(&m, 2, "13");
    k = 3 + 13;
    assert_arg(&m, k++, "R1");
    assert_arg(&m, k++, "123"); /* the injected time stays over a reset */
    assert_arg(&m, k++, "1");
    assert_arg(&m, k++, "S 10");
    k += 2;
    assert_arg(&m, k++, "{}");
    assert_arg(&m, k++, "");
    assert_arg(&m, k++, "0");
    assert_arg(&m, k++, "0");
    assert_arg(&m, k++, "*/5 * * * *");
    assert_arg(&m, k++, "0");
    assert_arg(&m, k++, "0");
    assert_arg(&m, k++, "0");
    rrecur_batch_set_now(b, 0);
    m = command_of(b, "abc");
    assert_arg(&m, 3 + 13 + 1, "");
    rrecur_batch_free(b);
}

/* A FIRE carries its occurrence exactly as TASK.ADD's request: the same keys and arguments. */
static void test_fire_is_an_add(void **state)
{
    rtask_link l[2] = {link_of("api", "k1"), link_of("per_user", "u 2")};
    rtask_add a = add_of(l, 2);
    rrecur_fire f = {"s", 1, 42, 5 * SEC, 6 * SEC, 3, &a};
    rrecur_batch *b;
    rtask_batch *t;
    cmd m, want;
    size_t nadd = 16 + 4 * 2, nkeys = 2 + 2 * 2;

    (void)state;
    assert_int_equal(rrecur_batch_new(NULL, &b), SLUICE_OK);
    assert_int_equal(rtask_batch_new(NULL, &t), SLUICE_OK);
    assert_int_equal(rrecur_batch_add_list(b, 1), 0);
    assert_int_equal(rrecur_batch_add_fire(b, &f), 1);
    assert_int_equal(rtask_batch_add_add(t, &a), 0);
    m = command_of(b, "x");
    assert_int_equal(rtask_batch_command(t, "x", &want.argc, &want.argv, &want.argvlen), 0);
    /* keys: 13 fixed, then the ADD's own, which end the task call's keys */
    assert_arg(&m, 2, "19");
    for (size_t i = 0; i < nkeys; i++) {
        size_t wi = 3 + 10 + i;

        assert_int_equal(m.argvlen[3 + 13 + i], want.argvlen[wi]);
        assert_memory_equal(m.argv[3 + 13 + i], want.argv[wi], want.argvlen[wi]);
    }
    assert_arg(&m, 3 + 19 + 3 + 2, "F 30");
    assert_arg(&m, 3 + 19 + 3 + 3, "s");
    assert_arg(&m, 3 + 19 + 3 + 6, "1"); /* fire */
    assert_arg(&m, 3 + 19 + 3 + 8, "3"); /* missed */
    for (size_t i = 0; i < nadd; i++) {
        size_t mi = (size_t)m.argc - nadd + i, wi = (size_t)want.argc - nadd + i;

        assert_int_equal(m.argvlen[mi], want.argvlen[wi]);
        assert_memory_equal(m.argv[mi], want.argv[wi], want.argvlen[wi]);
    }
    rtask_batch_free(t);
    rrecur_batch_free(b);
}

static void test_refused(void **state)
{
    sluice_recurring_spec sp = spec_of(), bad;
    rtask_add a = add_of(NULL, 0);
    rrecur_fire f = {"s", 1, 1, 0, 0, 0, NULL};
    rrecur_batch *b;
    cmd before, after;

    (void)state;
    assert_int_equal(rrecur_batch_new("a{b", &b), SLUICE_EINVAL);
    assert_null(b);
    assert_int_equal(rrecur_batch_new(NULL, &b), SLUICE_OK);
    assert_int_equal(rrecur_batch_add_set(b, &sp), 0);
    before = command_of(b, "x");
    bad = sp;
    bad.cron = "* * * * *"; /* both schedules */
    assert_int_equal(rrecur_batch_add_set(b, &bad), SLUICE_EINVAL);
    bad = sp;
    bad.interval_ns = 0; /* neither */
    assert_int_equal(rrecur_batch_add_set(b, &bad), SLUICE_EINVAL);
    bad = sp;
    bad.name = "";
    assert_int_equal(rrecur_batch_add_set(b, &bad), SLUICE_EINVAL);
    bad = sp;
    bad.max_runs = -1;
    assert_int_equal(rrecur_batch_add_set(b, &bad), SLUICE_EINVAL);
    bad = sp;
    bad.key_len = 0; /* a key of no bytes */
    assert_int_equal(rrecur_batch_add_set(b, &bad), SLUICE_EINVAL);
    assert_int_equal(rrecur_batch_add_set(b, NULL), SLUICE_EINVAL);
    assert_int_equal(rrecur_batch_add_del(b, "x", 0), SLUICE_EINVAL);
    assert_int_equal(rrecur_batch_add_info(b, NULL, 3), SLUICE_EINVAL);
    assert_int_equal(rrecur_batch_add_list(b, 0), SLUICE_EINVAL);
    assert_int_equal(rrecur_batch_add_list(b, RRECUR_LIST_MAX + 1), SLUICE_EINVAL);
    f.version = 0;
    assert_int_equal(rrecur_batch_add_fire(b, &f), SLUICE_EINVAL);
    f.version = 1;
    f.missed = -1;
    assert_int_equal(rrecur_batch_add_fire(b, &f), SLUICE_EINVAL);
    f.missed = 0;
    a.lease_ns = 0; /* the occurrence's ADD refuses it: nothing of the FIRE stays */
    f.task = &a;
    assert_int_equal(rrecur_batch_add_fire(b, &f), SLUICE_EINVAL);
    assert_int_equal(rrecur_batch_count(b), 1);
    after = command_of(b, "x");
    assert_int_equal(after.argc, before.argc);
    for (int i = 0; i < after.argc; i++) {
        assert_int_equal(after.argvlen[i], before.argvlen[i]);
        assert_memory_equal(after.argv[i], before.argv[i], before.argvlen[i]);
    }
    rrecur_batch_free(b);
}

/* ---- replies ----------------------------------------------------------------------------- */

/* A batch of one request of each op: SET, DEL, INFO, LIST, FIRE. */
static rrecur_batch *all_ops(void)
{
    sluice_recurring_spec sp = spec_of();
    rrecur_fire f = {"s", 1, 1, 0, 0, 0, NULL};
    rrecur_batch *b;

    assert_int_equal(rrecur_batch_new(NULL, &b), SLUICE_OK);
    assert_int_equal(rrecur_batch_add_set(b, &sp), 0);
    assert_int_equal(rrecur_batch_add_del(b, "s", 1), 1);
    assert_int_equal(rrecur_batch_add_info(b, "s", 1), 2);
    assert_int_equal(rrecur_batch_add_list(b, 5), 3);
    assert_int_equal(rrecur_batch_add_fire(b, &f), 4);
    return b;
}

static void test_decode(void **state)
{
    rrecur_batch *b = all_ops();
    rrecur_result r;
    rrecur_series x;
    redisReply *reply;

    (void)state;
    reply_pool_reset();
    reply =
        a_(5, a_(1, s_("OK 100 12 1000000000000")), a_(1, s_("OK 101 1")),
           a_(7, s_("OK 102"), s_("12 1 500000000 1000000000000 0 7 3 1 1500000000000"), s_("s"),
              s_("email"), s_("{}"), s_("acct"), s_("")),
           a_(13, s_("OK 103 2 1600000000 1"), s_("3 0 0 60000000000 0 0 9 0 9223372036854775807"),
              s_("c"), s_("job"), s_("{\"a\":1}"), s_(""), s_("*/5 * * * *"),
              s_("4 1 250000000 5 6 0 0 0 7"), s_("d"), s_("job"), s_("{}"), s_("k"), s_("")),
           a_(1, s_("OK 104 1 77 4 2 1750000000000")));
    assert_int_equal(rrecur_batch_result(b, reply, 0, &r), SLUICE_OK);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.now_ns, 100);
    assert_int_equal(r.version, 12);
    assert_int_equal(r.next_ns, 1000 * SEC);
    assert_int_equal(rrecur_batch_result(b, reply, 1, &r), SLUICE_OK);
    assert_int_equal(r.deleted, 1);
    assert_int_equal(rrecur_batch_result(b, reply, 2, &r), SLUICE_OK);
    assert_int_equal(r.nseries, 1);
    assert_int_equal(rrecur_batch_series(b, reply, 2, 0, &x), SLUICE_OK);
    assert_int_equal(x.version, 12);
    assert_int_equal(x.interval_ns, 500000000);
    assert_int_equal(x.start_ns, 1000 * SEC);
    assert_int_equal(x.max_runs, 7);
    assert_int_equal(x.runs, 3);
    assert_int_equal(x.skipped, 1);
    assert_int_equal(x.next_ns, 1500 * SEC);
    assert_int_equal(x.key_len, 4);
    assert_memory_equal(x.key, "acct", 4);
    assert_int_equal(x.cronlen, 0);
    assert_int_equal(rrecur_batch_series(b, reply, 2, 1, &x), SLUICE_EINVAL);
    assert_int_equal(rrecur_batch_result(b, reply, 3, &r), SLUICE_OK);
    assert_int_equal(r.nseries, 2);
    assert_int_equal(r.earliest_ns, 1600000000);
    assert_int_equal(r.more, 1);
    assert_int_equal(rrecur_batch_series(b, reply, 3, 0, &x), SLUICE_OK);
    assert_int_equal(x.cronlen, 11);
    assert_memory_equal(x.cron, "*/5 * * * *", 11);
    assert_null(x.key); /* has_key 0 */
    assert_int_equal(x.next_ns, SLUICE_NEVER);
    assert_int_equal(x.payload_len, 7);
    assert_int_equal(rrecur_batch_series(b, reply, 3, 1, &x), SLUICE_OK);
    assert_memory_equal(x.name, "d", 1);
    assert_memory_equal(x.key, "k", 1);
    assert_int_equal(rrecur_batch_series(b, reply, 3, 2, &x), SLUICE_EINVAL);
    assert_int_equal(rrecur_batch_series(b, reply, 0, 0, &x), SLUICE_EINVAL); /* a SET */
    assert_int_equal(rrecur_batch_result(b, reply, 4, &r), SLUICE_OK);
    assert_int_equal(r.fired, 1);
    assert_int_equal(r.id, 77);
    assert_int_equal(r.runs, 4);
    assert_int_equal(r.skipped, 2);
    assert_int_equal(r.next_ns, 1750 * SEC);
    assert_int_equal(rrecur_batch_result(b, reply, 5, &r), SLUICE_EINVAL);
    rrecur_batch_free(b);
}

static void test_statuses(void **state)
{
    rrecur_batch *b = all_ops();
    rrecur_result r;
    rrecur_series x;
    redisReply *reply;

    (void)state;
    reply_pool_reset();
    reply = a_(5, a_(1, s_("INVAL 100 the series ends before it starts")), a_(1, s_("OK 101 0")),
               a_(1, s_("NOTASK 102")), a_(1, s_("OK 103 0 0 0")), a_(1, s_("STALE 104")));
    assert_int_equal(rrecur_batch_result(b, reply, 0, &r), SLUICE_OK);
    assert_int_equal(r.rc, SLUICE_EINVAL);
    assert_int_equal(r.msglen, strlen("the series ends before it starts"));
    assert_memory_equal(r.msg, "the series ends before it starts", r.msglen);
    assert_int_equal(rrecur_batch_result(b, reply, 1, &r), SLUICE_OK);
    assert_int_equal(r.deleted, 0);
    assert_int_equal(rrecur_batch_result(b, reply, 2, &r), SLUICE_OK);
    assert_int_equal(r.rc, SLUICE_ENOTFOUND);
    assert_int_equal(rrecur_batch_series(b, reply, 2, 0, &x), SLUICE_EINVAL);
    assert_int_equal(rrecur_batch_result(b, reply, 3, &r), SLUICE_OK);
    assert_int_equal(r.nseries, 0);
    assert_int_equal(r.earliest_ns, 0);
    assert_int_equal(rrecur_batch_result(b, reply, 4, &r), SLUICE_OK);
    assert_int_equal(r.rc, SLUICE_ESTALE);
    assert_int_equal(r.now_ns, 104);
    rrecur_batch_free(b);
}

/* Each reply is wrong in one way; request idx must be refused with EPARSE and zeroed. */
static void expect_parse(rrecur_batch *b, redisReply *reply, size_t idx)
{
    rrecur_result r;
    rrecur_series x;

    assert_int_equal(rrecur_batch_result(b, reply, idx, &r), SLUICE_EPARSE);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.now_ns, 0);
    assert_int_equal(r.version, 0);
    if (rrecur_batch_op(b, idx) == RRECUR_LIST || rrecur_batch_op(b, idx) == RRECUR_INFO) {
        assert_int_not_equal(rrecur_batch_series(b, reply, idx, 0, &x), SLUICE_OK);
        assert_int_equal(x.version, 0);
    }
}

static redisReply *with(size_t at, redisReply *r)
{
    redisReply *ok[5];

    ok[0] = a_(1, s_("OK 1 1 1"));
    ok[1] = a_(1, s_("OK 1 1"));
    ok[2] = a_(1, s_("NOTASK 1"));
    ok[3] = a_(1, s_("OK 1 0 0 0"));
    ok[4] = a_(1, s_("STALE 1"));
    ok[at] = r;
    return a_(5, ok[0], ok[1], ok[2], ok[3], ok[4]);
}

static void test_malformed(void **state)
{
    rrecur_batch *b = all_ops();
    rrecur_result r;

    (void)state;
    reply_pool_reset();
    assert_int_equal(rrecur_batch_result(b, s_("OK"), 0, &r), SLUICE_EPARSE);
    assert_int_equal(rrecur_batch_result(b, a_(1, a_(1, s_("OK 1 1 1"))), 0, &r), SLUICE_EPARSE);
    expect_parse(b, with(0, a_(1, s_("OK 1 0 5"))), 0);   /* version 0 */
    expect_parse(b, with(0, a_(1, s_("OK 1 1"))), 0);     /* no next */
    expect_parse(b, with(0, a_(1, s_("OK 1 1 1 9"))), 0); /* a field too many */
    expect_parse(b, with(0, a_(1, s_("STALE 1"))), 0);    /* STALE is FIRE's */
    expect_parse(b, with(0, a_(1, s_("NOTASK 1"))), 0);   /* SET never says NOTASK */
    expect_parse(b, with(0, a_(1, s_("INVAL 1"))), 0);    /* INVAL without a message */
    expect_parse(b, with(0, a_(1, s_("YES 1 1 1"))), 0);
    expect_parse(b, with(0, a_(2, s_("OK 1 1 1"), s_("x"))), 0);
    expect_parse(b, with(1, a_(1, s_("OK 1 2"))), 1); /* deleted 2 */
    expect_parse(b, with(2, a_(2, s_("OK 1"), s_("1 0 1 0 0 0 0 0 0"))), 2);
    expect_parse(
        b,
        with(2, a_(7, s_("OK 1"), s_("1 0 1 0 0 0 0 0"), s_("s"), s_("t"), s_(""), s_(""), s_(""))),
        2); /* a series field missing: read by rrecur_batch_series */
    expect_parse(b, with(3, a_(1, s_("OK 1 1 0 0"))), 3); /* says 1 series, has none */
    expect_parse(b, with(3, a_(1, s_("OK 1 65 0 0"))), 3);
    expect_parse(b, with(3, a_(1, s_("OK 1 0 0 2"))), 3);
    expect_parse(b, with(4, a_(1, s_("OK 1 1 0 1 0 5"))), 4); /* fired without an id */
    expect_parse(b, with(4, a_(1, s_("OK 1 0 9 1 0 5"))), 4); /* an id without firing */
    expect_parse(b, with(4, a_(1, s_("OK 1 1 9 -1 0 5"))), 4);
    expect_parse(b, with(4, a_(2, s_("STALE 1"), s_("x"))), 4);
    expect_parse(b, with(4, a_(1, s_("OK 1 1 9 1 0"))), 4);
    rrecur_batch_free(b);
}

/* A series whose head parses but whose schedule is both or neither, or that has no name, is
 * refused (by the result already: never half-read). */
static void test_bad_series(void **state)
{
    rrecur_batch *b = all_ops();
    rrecur_series x;
    rrecur_result r;
    redisReply *reply;

    (void)state;
    reply_pool_reset();
    reply = with(2, a_(7, s_("OK 1"), s_("1 0 5 0 0 0 0 0 0"), s_("s"), s_("t"), s_(""), s_(""),
                       s_("* * * * *")));
    assert_int_equal(rrecur_batch_series(b, reply, 2, 0, &x), SLUICE_EPARSE);
    assert_int_equal(rrecur_batch_result(b, reply, 2, &r), SLUICE_EPARSE);
    reply = with(
        2, a_(7, s_("OK 1"), s_("1 0 0 0 0 0 0 0 0"), s_("s"), s_("t"), s_(""), s_(""), s_("")));
    assert_int_equal(rrecur_batch_series(b, reply, 2, 0, &x), SLUICE_EPARSE);
    assert_int_equal(rrecur_batch_result(b, reply, 2, &r), SLUICE_EPARSE);
    reply = with(
        2, a_(7, s_("OK 1"), s_("1 0 5 0 0 0 0 0 0"), s_(""), s_("t"), s_(""), s_(""), s_("")));
    assert_int_equal(rrecur_batch_series(b, reply, 2, 0, &x), SLUICE_EPARSE);
    assert_int_equal(rrecur_batch_result(b, reply, 2, &r), SLUICE_EPARSE);
    rrecur_batch_free(b);
}

/* ---- the engine's schedule, as the nodes use it ------------------------------------------- */

static void test_schedule(void **state)
{
    sluice_recurring_spec s;
    int64_t missed, next;
    char msg[128];
    test_rng rng;

    (void)state;
    memset(&s, 0, sizeof s);
    s.name = "n";
    s.type = "t";
    s.interval_ns = 100;
    s.start_ns = 1000;
    assert_int_equal(sluice_recurring_check(&s, msg, sizeof msg), SLUICE_OK);
    /* The grid starts at start: the first point at or after `from`. */
    assert_int_equal(sluice_recurring_first(&s, 1000), 1000);
    assert_int_equal(sluice_recurring_first(&s, 1001), 1100);
    assert_int_equal(sluice_recurring_first(&s, 5), 1000);
    /* Catching up: due 1000 at 1350 runs once, skips 1100..1300, resumes at 1400. */
    assert_int_equal(sluice_recurring_catch_up(&s, 1000, 1350, &missed), 1400);
    assert_int_equal(missed, 3);
    assert_int_equal(sluice_recurring_catch_up(&s, 1000, 1000, &missed), 1100);
    assert_int_equal(missed, 0);
    s.end_ns = 1250;
    assert_int_equal(sluice_recurring_catch_up(&s, 1000, 1350, &missed), SLUICE_NEVER);
    assert_int_equal(missed, 2);
    assert_int_equal(sluice_recurring_first(&s, 1201), SLUICE_NEVER);
    /* Random grids against a walk of the schedule. */
    rng_seed(&rng, 10);
    for (int i = 0; i < 2000; i++) {
        int64_t from, due, now, p, want_missed = 0;

        s.interval_ns = rng_range(&rng, 1, 1000);
        s.start_ns = rng_range(&rng, 0, 10000);
        s.end_ns = rng_range(&rng, 0, 3) == 0 ? 0 : s.start_ns + rng_range(&rng, 0, 20000);
        from = rng_range(&rng, 0, 30000);
        p = s.start_ns;
        while (p < from)
            p += s.interval_ns;
        if (s.end_ns && p > s.end_ns)
            p = SLUICE_NEVER;
        assert_int_equal(sluice_recurring_first(&s, from), p);
        if (p == SLUICE_NEVER)
            continue;
        due = p;
        now = due + rng_range(&rng, 0, 5000);
        for (p = due + s.interval_ns; p <= now && (!s.end_ns || p <= s.end_ns); p += s.interval_ns)
            want_missed++;
        if (s.end_ns && p > s.end_ns)
            p = SLUICE_NEVER;
        assert_int_equal(sluice_recurring_catch_up(&s, due, now, &missed), p);
        assert_int_equal(missed, want_missed);
    }
    /* Cron: every five minutes, UTC. */
    memset(&s, 0, sizeof s);
    s.name = "n";
    s.type = "t";
    s.cron = "*/5 * * * *";
    s.start_ns = 1;
    assert_int_equal(sluice_recurring_first(&s, 7 * MIN), 10 * MIN);
    assert_int_equal(sluice_recurring_first(&s, 10 * MIN), 10 * MIN);
    next = sluice_recurring_catch_up(&s, 10 * MIN, 21 * MIN, &missed);
    assert_int_equal(next, 25 * MIN);
    assert_int_equal(missed, 2);
    /* The checks and their words (the engine's). */
    s.cron = "bad";
    assert_int_equal(sluice_recurring_check(&s, msg, sizeof msg), SLUICE_EINVAL);
    assert_non_null(strstr(msg, "cron"));
    assert_int_equal(sluice_recurring_first(&s, 0), SLUICE_NEVER);
    s.interval_ns = 5;
    assert_int_equal(sluice_recurring_check(&s, msg, sizeof msg), SLUICE_EINVAL);
    assert_non_null(strstr(msg, "exactly one"));
    s.cron = NULL;
    s.start_ns = 10;
    s.end_ns = 5;
    assert_int_equal(sluice_recurring_check(&s, msg, sizeof msg), SLUICE_EINVAL);
    assert_string_equal(msg, "the series ends before it starts");
    s.start_ns = 0; /* the store's now: checked by the script */
    assert_int_equal(sluice_recurring_check(&s, msg, sizeof msg), SLUICE_OK);
    s.name = NULL;
    assert_int_equal(sluice_recurring_check(&s, msg, sizeof msg), SLUICE_EINVAL);
}

/* ---- memory ------------------------------------------------------------------------------ */

static int build_batch(void *arg)
{
    rtask_link l[2] = {link_of("api", "k1"), link_of("a-very-long-limit-name", "another key")};
    rtask_add a = add_of(l, 2);
    sluice_recurring_spec sp = spec_of();
    rrecur_fire f = {"a-series-name", 13, 9, 1000, 2000, 0, &a}, g = {"x", 1, 1, 1, 2, 0, NULL};
    rrecur_batch *b;
    cmd m;
    int rc;

    (void)arg;
    rc = rrecur_batch_new("oom", &b);
    if (rc != SLUICE_OK)
        return rc;
    for (int i = 0; i < 20 && rc >= 0; i++) {
        rc = rrecur_batch_add_set(b, &sp);
        if (rc >= 0)
            rc = rrecur_batch_add_fire(b, &f);
        if (rc >= 0)
            rc = rrecur_batch_add_fire(b, &g);
        if (rc >= 0)
            rc = rrecur_batch_add_list(b, 64);
        if (rc >= 0)
            rc = rrecur_batch_add_del(b, "x", 1);
    }
    if (rc >= 0)
        rc = rrecur_batch_command(b, "sha", &m.argc, &m.argv, &m.argvlen);
    rrecur_batch_free(b);
    return rc < 0 ? rc : SLUICE_OK;
}

static void test_oom(void **state)
{
    (void)state;
    assert_true(oom_sweep(build_batch, NULL, 4000) > 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),     cmocka_unit_test(test_fire_is_an_add),
        cmocka_unit_test(test_refused),    cmocka_unit_test(test_decode),
        cmocka_unit_test(test_statuses),   cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_bad_series), cmocka_unit_test(test_schedule),
        cmocka_unit_test(test_oom),
    };

    return cmocka_run_group_tests(tests, setup, NULL);
}
