/* SPDX-License-Identifier: MIT */
/*
 * The encoder and decoder of the PostgreSQL task function (src/store/pg_tasks.c), without a
 * server: the exact request strings of a batch (hex bytes, a link's definition, tag, limit id and
 * key), validation that leaves a batch unchanged, results built by hand in libpq's binary format
 * with PQmakeEmptyPGresult (every op, refusals, payloads holding NUL bytes), malformed results
 * refused with SLUICE_EPARSE and nothing half-read, out-of-memory sweeps of building a batch, and
 * the embedded migration 2. The function's behaviour is tested against the Redis script by
 * tests/tools/tasks_diff.c (server_pg_tasks).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <libpq-fe.h>

#include "sluice/error.h"
#include "sluice/limit.h"
#include "store/pg_recur.h"
#include "store/pg_schema.h"
#include "store/pg_tasks.h"
#include "pg_fixture.h"
#include "testutil.h"

/* The links' limits and link_of are the limits encoders' tests' (rlim_fixture.h): a rate of
 * 10/s with a burst of 5 that starts empty, so that a link's definition text is the one
 * test_pg_limits.c checks, and a concurrency of 3. Its quota definition and chain answer are
 * theirs alone. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-variable"
#include "rlim_fixture.h"
#pragma GCC diagnostic pop

static const char *const two_types[] = {"w", "vv"};
static const size_t two_lens[] = {1, 2};

/* ADD (a rate link, a task key), CLAIM of two types, ACK with a cost, FAIL dead with a message,
 * TOUCH, CANCEL, INFO. */
static pgt_batch *seven_requests(void)
{
    pgt_batch *b;
    rtask_link l;
    rtask_add a;
    rtask_claim c = {.types = two_types, .typelens = two_lens, .ntypes = 2, .count = 5};
    rtask_done d = {.id = 9, .attempt = 2, .cost = 4, .retry_after_ns = -1};

    assert_int_equal(pgt_batch_new(&b), SLUICE_OK);
    memset(&l, 0, sizeof l);
    l.lim = link_of(&rate_def, "api", "u1", 2);
    l.flags = RTASK_LINK_REJECT;
    l.horizon_ns = 7;
    memset(&a, 0, sizeof a);
    a.type = "w";
    a.typelen = 1;
    a.task_key = "k1";
    a.task_key_len = 2;
    a.links = &l;
    a.nlinks = 1;
    a.priority = -5;
    a.lease_ns = 30 * SEC;
    a.retry.max_attempts = 3;
    a.retry.backoff = SLUICE_BACKOFF_EXPONENTIAL;
    a.retry.base_ns = SEC;
    a.retry.max_ns = 60 * SEC;
    a.retry.throttle_retries = 1;
    assert_int_equal(pgt_batch_add_add(b, &a), 0);
    assert_int_equal(pgt_batch_add_claim(b, &c), 1);
    assert_int_equal(pgt_batch_add_ack(b, &d), 2);
    d.attempt = 0;
    d.cost = -1;
    d.mode = SLUICE_FAIL_MODE_DEAD;
    d.message = "x\"y";
    d.message_len = 3;
    assert_int_equal(pgt_batch_add_fail(b, &d), 3);
    d.message = NULL;
    d.message_len = 0;
    d.mode = SLUICE_FAIL_MODE_RETRY;
    assert_int_equal(pgt_batch_add_touch(b, &d), 4);
    assert_int_equal(pgt_batch_add_cancel(b, &d), 5);
    d.id = INT64_MAX;
    assert_int_equal(pgt_batch_add_info(b, &d), 6);
    return b;
}

static const char seven_literal[] =
    "{\"A 77 7b7d 6b31 1 -5 0 30000000000 3 1 1000000000 60000000000 1 0 1 1 "
    "1 10 1000000000 5 1 30000000000 0 2 1 7 7531 617069 7531\","
    "\"C 5 2 77 7676\","
    "\"K 9 2 4 0 -1  0\","
    "\"F 9 0 -1 1 -1 782279 1\","
    "\"T 9 0 -1 0 -1  0\","
    "\"X 9 0 -1 0 -1  0\","
    "\"I 9223372036854775807 0 -1 0 -1  0\"}";

static void test_params_layout(void **state)
{
    pgt_batch *b = seven_requests();
    const char *const *v;

    (void)state;
    assert_int_equal(pgt_batch_count(b), 7);
    assert_int_equal(pgt_batch_op(b, 0), RTASK_ADD);
    assert_int_equal(pgt_batch_op(b, 6), RTASK_INFO);
    assert_int_equal(pgt_batch_op(b, 7), 0);
    assert_int_equal(pgt_batch_params(b, &v), SLUICE_OK);
    assert_null(v[0]); /* the database's clock */
    assert_string_equal(v[1], seven_literal);
    assert_string_equal(v[2], "0"); /* no caps */
    assert_string_equal(v[3], "0");
    pgt_batch_set_caps(b, 500, 40);
    assert_int_equal(pgt_batch_params(b, &v), SLUICE_OK);
    assert_string_equal(v[2], "500");
    assert_string_equal(v[3], "40");
    /* the injected time is kept by a reset */
    pgt_batch_set_now(b, INT64_C(1795526227131600000));
    pgt_batch_reset(b);
    assert_int_equal(pgt_batch_count(b), 0);
    assert_int_equal(pgt_batch_params(b, &v), SLUICE_EINVAL);
    {
        rtask_add a;
        const char payload[] = {'{', '\0', '"', '\\', '}'};

        memset(&a, 0, sizeof a);
        a.type = "t y";
        a.typelen = 3;
        a.payload = payload;
        a.payload_len = sizeof payload;
        a.lease_ns = 1;
        a.retry.max_attempts = 1;
        a.units = 4;
        a.delay_ns = 5;
        assert_int_equal(pgt_batch_add_add(b, &a), 0);
    }
    assert_int_equal(pgt_batch_params(b, &v), SLUICE_OK);
    assert_string_equal(v[0], "1795526227131600000");
    /* any bytes travel as hex; no task key is an empty field; UNITS 0 is sent as 1 */
    assert_string_equal(v[1], "{\"A 742079 7b00225c7d  0 0 5 1 1 0 0 0 0 0 4 0\"}");
    pgt_batch_set_now(b, 0);
    assert_int_equal(pgt_batch_params(b, &v), SLUICE_OK);
    assert_null(v[0]);
    pgt_batch_free(b);
}

static void test_add_refused(void **state)
{
    pgt_batch *b = seven_requests();
    const char *const *v;
    char before[2048];
    rtask_link l;
    rtask_add a;
    rtask_claim c = {.types = two_types, .typelens = two_lens, .ntypes = 2, .count = 0};
    rtask_done d = {.id = 0, .cost = -1, .retry_after_ns = -1};
    sluice_limit_def adaptive = rate_def;

    (void)state;
    assert_int_equal(pgt_batch_params(b, &v), SLUICE_OK);
    snprintf(before, sizeof before, "%s", v[1]);
    memset(&l, 0, sizeof l);
    l.lim = link_of(&rate_def, "api", "u1", 0); /* 0 units */
    memset(&a, 0, sizeof a);
    a.type = "w";
    a.typelen = 1;
    a.links = &l;
    a.nlinks = 1;
    a.lease_ns = SEC;
    a.retry.max_attempts = 1;
    assert_int_equal(pgt_batch_add_add(b, &a), SLUICE_EINVAL);
    l.lim.units = 1;
    l.flags = 4; /* no such flag */
    assert_int_equal(pgt_batch_add_add(b, &a), SLUICE_EINVAL);
    l.flags = 0;
    adaptive.decrease_den = 2; /* AIMD: not something the function knows */
    l.lim.def = &adaptive;
    assert_int_equal(pgt_batch_add_add(b, &a), SLUICE_EINVAL);
    l.lim.def = &rate_def;
    a.lease_ns = 0;
    assert_int_equal(pgt_batch_add_add(b, &a), SLUICE_EINVAL);
    a.lease_ns = SEC;
    a.task_key = "";
    assert_int_equal(pgt_batch_add_add(b, &a), SLUICE_EINVAL);
    a.task_key = NULL;
    a.typelen = 0;
    assert_int_equal(pgt_batch_add_add(b, &a), SLUICE_EINVAL);
    assert_int_equal(pgt_batch_add_add(b, NULL), SLUICE_EINVAL);
    assert_int_equal(pgt_batch_add_claim(b, &c), SLUICE_EINVAL);
    c.count = RTASK_CLAIM_MAX + 1;
    assert_int_equal(pgt_batch_add_claim(b, &c), SLUICE_EINVAL);
    c.count = 1;
    c.ntypes = 0;
    assert_int_equal(pgt_batch_add_claim(b, &c), SLUICE_EINVAL);
    assert_int_equal(pgt_batch_add_ack(b, &d), SLUICE_EINVAL); /* id 0 */
    d.id = (uint64_t)INT64_MAX + 1;
    assert_int_equal(pgt_batch_add_info(b, &d), SLUICE_EINVAL);
    d.id = 1;
    d.attempt = -1;
    assert_int_equal(pgt_batch_add_touch(b, &d), SLUICE_EINVAL);
    d.attempt = 0;
    d.mode = SLUICE_FAIL_MODE_DEAD;
    d.retry_after_ns = 5; /* DEAD with RETRY_AFTER */
    assert_int_equal(pgt_batch_add_fail(b, &d), SLUICE_EINVAL);
    d.mode = (sluice_fail_mode)7;
    d.retry_after_ns = -1;
    assert_int_equal(pgt_batch_add_fail(b, &d), SLUICE_EINVAL);
    assert_int_equal(pgt_batch_count(b), 7);
    assert_int_equal(pgt_batch_params(b, &v), SLUICE_OK);
    assert_string_equal(v[1], before);
    pgt_batch_free(b);
}

static const row good_rows[] = {
    {1, "OK 1795526227131600000 7 0", -1},
    {2, "OK 1795526227131600000 2 1 0 0", -1},
    {2, "7 1 1795526257131600000", -1},
    {2, "w", -1},
    {2, "{\"a\":1}", -1},
    {2, "8 3 9223372036854775807", -1},
    {2, "vv", -1},
    {2, "p\0q", 3},
    {3, "OK 1795526227131600000 4 2", -1},
    {4, "NOLEASE 1795526227131600000 5 2", -1},
    {5, "OK 1795526227131600000 3 1 1795526257131600000", -1},
    {6, "INUSE 1795526227131600000 3 1", -1},
    {7, "OK 1795526227131600000 9223372036854775807 5 2 0 5 -3 100 0 1 1 2 0 0 0 -1", -1},
    {7, "w", -1},
    {7, "{}", -1},
    {7, "k1", -1},
    {7, "x\"y", -1},
};
#define NGOOD (sizeof good_rows / sizeof good_rows[0])

/* A group slot's two fields follow the links; a group link must be a concurrency link. */
static void test_group(void **state)
{
    pgt_batch *b;
    const char *const *v;
    rtask_link l;
    rtask_add a;

    (void)state;
    assert_int_equal(pgt_batch_new(&b), SLUICE_OK);
    memset(&l, 0, sizeof l);
    l.lim = link_of(&rate_def, "api", "u1", 1);
    memset(&a, 0, sizeof a);
    a.type = "w";
    a.typelen = 1;
    a.links = &l;
    a.nlinks = 1;
    a.lease_ns = SEC;
    a.retry.max_attempts = 1;
    a.group_link = 1;
    a.group_lease = 77;
    assert_int_equal(pgt_batch_add_add(b, &a), SLUICE_EINVAL); /* a rate link */
    l.lim = link_of(&lease_def, "slot", "u1", 1);
    assert_int_equal(pgt_batch_add_add(b, &a), 0);
    assert_int_equal(pgt_batch_params(b, &v), SLUICE_OK);
    assert_non_null(strstr(v[1], " 1 77\"}"));
    pgt_batch_free(b);
}

static void test_decode(void **state)
{
    pgt_batch *b = seven_requests();
    PGresult *r = result_of(PGRES_TUPLES_OK, good_rows, NGOOD, 23);
    rtask_result res;
    rtask_task t;

    (void)state;
    assert_int_equal(pgt_batch_result(b, r, 0, &res), SLUICE_OK);
    assert_int_equal(res.rc, SLUICE_OK);
    assert_int_equal(res.now_ns, INT64_C(1795526227131600000));
    assert_int_equal(res.id, 7);
    assert_int_equal(res.replaced, 0);
    assert_int_equal(pgt_batch_result(b, r, 1, &res), SLUICE_OK);
    assert_int_equal(res.ndelivered, 2);
    assert_int_equal(res.nfailed, 1);
    assert_int_equal(res.next_wake_ns, 0);
    assert_int_equal(res.more, 0);
    assert_int_equal(pgt_batch_task(b, r, 1, 0, &t), SLUICE_OK);
    assert_int_equal(t.id, 7);
    assert_int_equal(t.attempt, 1);
    assert_int_equal(t.lease_until_ns, INT64_C(1795526257131600000));
    assert_int_equal(t.state, SLUICE_TASK_RUNNING);
    assert_memory_equal(t.type, "w", 1);
    assert_int_equal(t.payload_len, 7);
    assert_int_equal(pgt_batch_task(b, r, 1, 1, &t), SLUICE_OK);
    assert_int_equal(t.lease_until_ns, INT64_MAX);
    assert_int_equal(t.typelen, 2);
    assert_int_equal(t.payload_len, 3);
    assert_memory_equal(t.payload, "p\0q", 3); /* bytes, read in place */
    assert_int_equal(pgt_batch_task(b, r, 1, 2, &t), SLUICE_EINVAL);
    assert_int_equal(pgt_batch_task(b, r, 0, 0, &t), SLUICE_EINVAL); /* not a CLAIM/INFO */
    assert_int_equal(pgt_batch_result(b, r, 2, &res), SLUICE_OK);
    assert_int_equal(res.state, SLUICE_TASK_DONE);
    assert_int_equal(res.attempt, 2);
    assert_int_equal(pgt_batch_result(b, r, 3, &res), SLUICE_OK);
    assert_int_equal(res.rc, SLUICE_ESTATE); /* NOLEASE: failed, attempt 2 */
    assert_int_equal(res.state, SLUICE_TASK_FAILED);
    assert_int_equal(pgt_batch_result(b, r, 4, &res), SLUICE_OK);
    assert_int_equal(res.lease_until_ns, INT64_C(1795526257131600000));
    assert_int_equal(pgt_batch_result(b, r, 5, &res), SLUICE_OK);
    assert_int_equal(res.rc, SLUICE_EBUSY);
    assert_int_equal(pgt_batch_result(b, r, 6, &res), SLUICE_OK);
    assert_int_equal(res.id, INT64_MAX);
    assert_int_equal(pgt_batch_task(b, r, 6, 0, &t), SLUICE_OK);
    assert_int_equal(t.state, SLUICE_TASK_FAILED);
    assert_int_equal(t.fail_reason, SLUICE_FAIL_DEAD);
    assert_int_equal(t.priority, -3);
    assert_int_equal(t.submitted_ns, 100);
    assert_int_equal(t.units, 2);
    assert_int_equal(t.park_link, 0); /* not parked: where it waits is "0 0 0 -1" */
    assert_int_equal(t.queue_length, 0);
    assert_int_equal(t.wake_ms, -1);
    assert_int_equal(t.task_key_len, 2);
    assert_memory_equal(t.fail_message, "x\"y", 3);
    assert_int_equal(pgt_batch_task(b, r, 6, 1, &t), SLUICE_EINVAL);
    assert_int_equal(pgt_batch_result(b, r, 7, &res), SLUICE_EINVAL);
    PQclear(r);
    pgt_batch_free(b);
}

/* Expects EPARSE for request `i` of this result, with the answer zeroed. */
static void expect_bad(pgt_batch *b, PGresult *r, size_t i)
{
    rtask_result res;
    rtask_task t;

    memset(&res, 0x5a, sizeof res);
    assert_int_equal(pgt_batch_result(b, r, i, &res), SLUICE_EPARSE);
    assert_int_equal(res.now_ns, 0);
    assert_int_equal(res.id, 0);
    assert_int_equal(res.ndelivered, 0);
    memset(&t, 0x5a, sizeof t);
    if (pgt_batch_op(b, i) == RTASK_CLAIM || pgt_batch_op(b, i) == RTASK_INFO) {
        assert_int_equal(pgt_batch_task(b, r, i, 0, &t), SLUICE_EPARSE);
        assert_null(t.payload);
    }
    PQclear(r);
}

static void test_malformed(void **state)
{
    pgt_batch *b = seven_requests();
    row rows[NGOOD + 1];
    struct {
        size_t at;
        const char *val;
        size_t req; /* the request it breaks */
    } bad[] = {
        {0, "OK 1795526227131600000 0 0", 0},      /* id 0 */
        {0, "OK 1795526227131600000 7 0 1", 0},    /* a field too many */
        {0, "NOLEASE 1795526227131600000 3 1", 0}, /* not an ADD's refusal */
        {0, "OK 1e18 7 0", 0},                     /* not an integer */
        {0, "", 0},                                /* empty */
        {1, "OK 1795526227131600000 3 1 0 0", 1},  /* 3 delivered, 2 sent */
        {8, "OK 1795526227131600000 9 2", 2},      /* no such state */
    };

    (void)state;
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        memcpy(rows, good_rows, sizeof good_rows);
        rows[bad[k].at].val = bad[k].val;
        rows[bad[k].at].len = -1;
        expect_bad(b, result_of(PGRES_TUPLES_OK, rows, NGOOD, 23), bad[k].req);
    }
    /* A delivered task's element, and an INFO's fields past its state, are read by
     * pgt_batch_task: the answer stays readable, the task is refused. */
    static const struct {
        size_t at;
        const char *val;
        size_t req, k;
    } bad_task[] = {
        {2, "7 0 1795526257131600000", 1, 0}, /* attempt 0 */
        {2, "7 1", 1, 0},                     /* a field short */
        {12, "OK 1795526227131600000 9 5 2 0 5 -3 100 0 1 1 2 0 0 0 -1 3", 6, 0}, /* one too many */
        {12, "OK 1795526227131600000 9 5 2 0 5 -3 100 0 2 1 2 0 0 0 -1", 6, 0},   /* has key 2 */
        {12, "OK 1795526227131600000 9 5 2 0 9 -3 100 0 1 1 2 0 0 0 -1", 6, 0},   /* no reason 9 */
        {12, "OK 1795526227131600000 9 5 2 0 5 -3 100 0 1 1 2", 6, 0}, /* where it waits missing */
        {12, "OK 1795526227131600000 9 2 0 0 0 -3 100 0 1 1 2 1 -1 3 5", 6, 0}, /* position -1 */
        {12, "OK 1795526227131600000 9 2 0 0 0 -3 100 0 1 1 2 1 0 1 -2", 6, 0}, /* wake -2 */
    };
    for (size_t k = 0; k < sizeof bad_task / sizeof bad_task[0]; k++) {
        PGresult *r;
        rtask_result res;
        rtask_task t;

        memcpy(rows, good_rows, sizeof good_rows);
        rows[bad_task[k].at].val = bad_task[k].val;
        r = result_of(PGRES_TUPLES_OK, rows, NGOOD, 23);
        assert_int_equal(pgt_batch_result(b, r, bad_task[k].req, &res), SLUICE_OK);
        memset(&t, 0x5a, sizeof t);
        assert_int_equal(pgt_batch_task(b, r, bad_task[k].req, bad_task[k].k, &t), SLUICE_EPARSE);
        assert_int_equal(t.id, 0);
        assert_null(t.payload);
        PQclear(r);
    }
    memcpy(rows, good_rows, sizeof good_rows);
    rows[0].val = NULL; /* an SQL NULL */
    expect_bad(b, result_of(PGRES_TUPLES_OK, rows, NGOOD, 23), 0);
    memcpy(rows, good_rows, sizeof good_rows);
    expect_bad(b, result_of(PGRES_TUPLES_OK, rows, NGOOD - 4, 23), 6); /* INFO cut short */
    expect_bad(b, result_of(PGRES_TUPLES_OK, rows, 8, 23), 0);         /* requests missing */
    expect_bad(b, result_of(PGRES_TUPLES_OK, rows, NGOOD, 20), 0);     /* req is not an int4 */
    rows[9].req = 3; /* a refusal with a second element */
    expect_bad(b, result_of(PGRES_TUPLES_OK, rows, NGOOD, 23), 2);
    memcpy(rows, good_rows, sizeof good_rows);
    rows[NGOOD] = good_rows[NGOOD - 1];
    rows[NGOOD].req = 8; /* a request the batch never sent */
    expect_bad(b, result_of(PGRES_TUPLES_OK, rows, NGOOD + 1, 23), 0);
    expect_bad(b, result_of(PGRES_FATAL_ERROR, rows, 0, 23), 0);
    expect_bad(b, NULL, 1);
    pgt_batch_free(b);
}

/* The wake row (request number 0, first: PGBATCH_WAKE_ROW_SQL) says the call made work ready and
 * is skipped by the reading of every request; a row 0 anywhere else is refused. */
static void test_wake_row(void **state)
{
    pgt_batch *b = seven_requests();
    row rows[NGOOD + 2];
    rtask_result res;
    rtask_task t;
    PGresult *r;

    (void)state;
    r = result_of(PGRES_TUPLES_OK, good_rows, NGOOD, 23);
    assert_int_equal(pgbatch_woke(r), 0);
    PQclear(r);
    rows[0] = (row){0, "", -1};
    memcpy(rows + 1, good_rows, sizeof good_rows);
    r = result_of(PGRES_TUPLES_OK, rows, NGOOD + 1, 23);
    assert_int_equal(pgbatch_woke(r), 1);
    assert_int_equal(pgt_batch_result(b, r, 0, &res), SLUICE_OK);
    assert_int_equal(res.id, 7);
    assert_int_equal(pgt_batch_task(b, r, 1, 1, &t), SLUICE_OK);
    assert_memory_equal(t.payload, "p\0q", 3);
    assert_int_equal(pgt_batch_result(b, r, 6, &res), SLUICE_OK);
    assert_int_equal(res.id, INT64_MAX);
    PQclear(r);
    /* Two wake rows, or one that is not first: not the statement's result. */
    rows[1] = (row){0, "", -1};
    memcpy(rows + 2, good_rows, sizeof good_rows);
    expect_bad(b, result_of(PGRES_TUPLES_OK, rows, NGOOD + 2, 23), 0);
    memcpy(rows, good_rows, sizeof good_rows);
    rows[NGOOD] = (row){0, "", -1};
    r = result_of(PGRES_TUPLES_OK, rows, NGOOD + 1, 23);
    assert_int_equal(pgbatch_woke(r), 0);
    expect_bad(b, r, 0);
    expect_bad(b, result_of(PGRES_FATAL_ERROR, rows, 0, 23), 0);
    r = result_of(PGRES_FATAL_ERROR, rows, 0, 23);
    assert_int_equal(pgbatch_woke(r), 0);
    PQclear(r);
    assert_int_equal(pgbatch_woke(NULL), 0);
    pgt_batch_free(b);
}

static void test_migration(void **state)
{
    size_t len = 0;
    const char *sql = pgs_migration(2, &len);

    (void)state;
    assert_true(PGS_VERSION >= 6); /* the task queue is version 2, made set-based by 6 */
    assert_non_null(sql);
    assert_int_equal(strlen(sql), len);
    assert_non_null(strstr(sql, "CREATE FUNCTION sluice_tasks_call("));
    assert_non_null(strstr(sql, "FOR UPDATE SKIP LOCKED"));
    assert_non_null(strstr(sql, "pg_notify('" PGT_WAKE_CHANNEL "'"));
    /* 6 replaces the call (set-based runs) and keeps its claims and its wake-ups. */
    sql = pgs_migration(6, &len);
    assert_non_null(sql);
    assert_int_equal(strlen(sql), len);
    assert_non_null(strstr(sql, "CREATE OR REPLACE FUNCTION sluice_tasks_call("));
    assert_non_null(strstr(sql, "FOR UPDATE SKIP LOCKED"));
    assert_non_null(strstr(sql, "pg_notify('" PGT_WAKE_CHANNEL "'"));
    /* 7 takes the NOTIFY out of the calls: they mark the wake, the statement reads the mark. */
    sql = pgs_migration(7, &len);
    assert_non_null(sql);
    assert_non_null(strstr(sql, "CREATE OR REPLACE FUNCTION sluice_task_woke("));
    assert_non_null(strstr(sql, "'sluice.twake'"));
    assert_non_null(strstr(PGT_CALL_SQL, "'sluice.twake'"));
    assert_non_null(strstr(PGR_CALL_SQL, "'sluice.twake'"));
    assert_null(pgs_migration(PGS_VERSION + 1, &len));
}

static int build_batch(void *arg)
{
    pgt_batch *b = NULL;
    const char *const *v;
    rtask_link links[2];
    rtask_add a;
    rtask_claim c = {.types = two_types, .typelens = two_lens, .ntypes = 2, .count = 3};
    rtask_done d = {
        .id = 12, .attempt = 1, .cost = -1, .retry_after_ns = 5, .message = "m", .message_len = 1};
    int rc;

    (void)arg;
    memset(links, 0, sizeof links);
    links[0].lim = link_of(&rate_def, "api", "u1", 2);
    links[1].lim = link_of(&lease_def, "conc", "a much longer key than most", 1);
    memset(&a, 0, sizeof a);
    a.type = "w";
    a.typelen = 1;
    a.payload = "{\"x\":1}";
    a.payload_len = 7;
    a.links = links;
    a.nlinks = 2;
    a.lease_ns = SEC;
    a.retry.max_attempts = 2;
    rc = pgt_batch_new(&b);
    for (int i = 0; i < 30 && rc == SLUICE_OK; i++) {
        rc = i % 3 == 0   ? pgt_batch_add_add(b, &a)
             : i % 3 == 1 ? pgt_batch_add_claim(b, &c)
                          : pgt_batch_add_fail(b, &d);
        if (rc >= 0)
            rc = SLUICE_OK;
    }
    if (rc == SLUICE_OK)
        rc = pgt_batch_params(b, &v);
    pgt_batch_free(b);
    return rc;
}

static void test_oom(void **state)
{
    (void)state;
    assert_true(oom_sweep(build_batch, NULL, 500) > 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_params_layout), cmocka_unit_test(test_add_refused),
        cmocka_unit_test(test_decode),        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_migration),     cmocka_unit_test(test_oom),
        cmocka_unit_test(test_wake_row),      cmocka_unit_test(test_group),
    };

    return cmocka_run_group_tests(tests, setup, NULL);
}
