/* SPDX-License-Identifier: MIT */
/*
 * The encoder and decoder of the PostgreSQL series function (src/store/pg_recur.c), without a
 * server: the exact request strings of a batch (hex names, payloads, keys and cron texts; a
 * FIRE's occurrence byte for byte the element pg_tasks.c writes for the same TASK.ADD), requests
 * refused with the batch unchanged, results built by hand in libpq's binary format with
 * PQmakeEmptyPGresult (every op and refusal, series of LIST and INFO), malformed results refused
 * with SLUICE_EPARSE and nothing half-read, an out-of-memory sweep of building a batch, and the
 * embedded migration 3. The function's behaviour is tested over the wire by
 * tests/server/pg_recur.sh (server_pg_recur: the Redis store's series test on PostgreSQL).
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

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-variable"
#include "rlim_fixture.h"
#pragma GCC diagnostic pop

/* The occurrence the FIREs below add: one rate link on key u1, as TASK.ADD would send it. */
static void occurrence(rtask_add *a, rtask_link *l)
{
    memset(l, 0, sizeof *l);
    l->lim = link_of(&rate_def, "api", "u1", 1);
    memset(a, 0, sizeof *a);
    a->type = "job";
    a->typelen = 3;
    a->payload = "{}";
    a->payload_len = 2;
    a->links = l;
    a->nlinks = 1;
    a->lease_ns = 30 * SEC;
    a->retry.max_attempts = 3;
}

/* SET (a cron series with a KEY), DEL, INFO of a name holding a space, LIST, a FIRE that only
 * moves next and a FIRE that adds an occurrence. */
static pgr_batch *six_requests(void)
{
    pgr_batch *b;
    sluice_recurring_spec spec;
    rrecur_fire f;
    rtask_link l;
    rtask_add a;

    assert_int_equal(pgr_batch_new(&b), SLUICE_OK);
    memset(&spec, 0, sizeof spec);
    spec.name = "tick";
    spec.type = "job";
    spec.payload = "{\"n\":7}";
    spec.payload_len = 7;
    spec.key = "alice";
    spec.key_len = 5;
    spec.cron = "*/5 * * * *";
    spec.start_ns = 1000;
    spec.max_runs = 3;
    assert_int_equal(pgr_batch_add_set(b, &spec), 0);
    assert_int_equal(pgr_batch_add_del(b, "tick", 4), 1);
    assert_int_equal(pgr_batch_add_info(b, "x y", 3), 2);
    assert_int_equal(pgr_batch_add_list(b, RRECUR_LIST_MAX), 3);
    memset(&f, 0, sizeof f);
    f.name = "tick";
    f.namelen = 4;
    f.version = 5;
    f.expected_ns = 1000;
    f.next_ns = 2000;
    assert_int_equal(pgr_batch_add_fire(b, &f), 4);
    occurrence(&a, &l);
    f.task = &a;
    f.next_ns = INT64_MAX;
    f.missed = 2;
    assert_int_equal(pgr_batch_add_fire(b, &f), 5);
    return b;
}

/* The element pg_tasks.c writes for the occurrence (without its quotes). */
static void occurrence_text(char *out, size_t len)
{
    pgt_batch *t;
    const char *const *v;
    rtask_link l;
    rtask_add a;
    size_t n;

    occurrence(&a, &l);
    assert_int_equal(pgt_batch_new(&t), SLUICE_OK);
    assert_int_equal(pgt_batch_add_add(t, &a), 0);
    assert_int_equal(pgt_batch_params(t, &v), SLUICE_OK);
    n = strlen(v[1]);
    assert_true(n > 4 && n - 4 < len);
    memcpy(out, v[1] + 2, n - 4); /* {"A ..."} */
    out[n - 4] = '\0';
    pgt_batch_free(t);
}

static void test_params_layout(void **state)
{
    pgr_batch *b = six_requests();
    const char *const *v;
    char occ[512], want[1024];

    (void)state;
    assert_int_equal(pgr_batch_count(b), 6);
    assert_int_equal(pgr_batch_op(b, 0), RRECUR_SET);
    assert_int_equal(pgr_batch_op(b, 3), RRECUR_LIST);
    assert_int_equal(pgr_batch_op(b, 5), RRECUR_FIRE);
    assert_int_equal(pgr_batch_op(b, 6), 0);
    assert_int_equal(pgr_batch_params(b, &v), SLUICE_OK);
    assert_null(v[0]); /* the database's clock */
    occurrence_text(occ, sizeof occ);
    assert_true(strncmp(occ, "A 6a6f62 7b7d ", 14) == 0);
    snprintf(want, sizeof want,
             "{\"S 7469636b 6a6f62 7b226e223a377d 616c696365 1 0 2a2f35202a202a202a202a 1000 0 "
             "3\","
             "\"D 7469636b\","
             "\"I 782079\","
             "\"L 64\","
             "\"F 7469636b 5 1000 0 2000 0\","
             "\"F 7469636b 5 1000 1 9223372036854775807 2 %s\"}",
             occ);
    assert_string_equal(v[1], want);
    /* the injected time is kept by a reset */
    pgr_batch_set_now(b, INT64_C(1795526227131600000));
    pgr_batch_reset(b);
    assert_int_equal(pgr_batch_count(b), 0);
    assert_int_equal(pgr_batch_params(b, &v), SLUICE_EINVAL);
    {
        sluice_recurring_spec spec;

        memset(&spec, 0, sizeof spec);
        spec.name = "s";
        spec.type = "t";
        spec.interval_ns = 100 * SLUICE_NS_PER_MS;
        assert_int_equal(pgr_batch_add_set(b, &spec), 0);
    }
    assert_int_equal(pgr_batch_params(b, &v), SLUICE_OK);
    assert_string_equal(v[0], "1795526227131600000");
    /* no payload is "{}", no KEY and no cron empty fields */
    assert_string_equal(v[1], "{\"S 73 74 7b7d  0 100000000  0 0 0\"}");
    pgr_batch_set_now(b, 0);
    assert_int_equal(pgr_batch_params(b, &v), SLUICE_OK);
    assert_null(v[0]);
    pgr_batch_free(b);
}

static void test_add_refused(void **state)
{
    pgr_batch *b = six_requests();
    const char *const *v;
    char before[2048];
    sluice_recurring_spec spec;
    rrecur_fire f;
    rtask_link l;
    rtask_add a;

    (void)state;
    assert_int_equal(pgr_batch_params(b, &v), SLUICE_OK);
    snprintf(before, sizeof before, "%s", v[1]);
    memset(&spec, 0, sizeof spec);
    spec.name = "s";
    spec.type = "t";
    assert_int_equal(pgr_batch_add_set(b, &spec), SLUICE_EINVAL); /* no schedule */
    spec.interval_ns = SEC;
    spec.cron = "* * * * *";
    assert_int_equal(pgr_batch_add_set(b, &spec), SLUICE_EINVAL); /* two */
    spec.cron = NULL;
    spec.key = "";
    assert_int_equal(pgr_batch_add_set(b, &spec), SLUICE_EINVAL); /* an empty KEY */
    spec.key = NULL;
    spec.end_ns = -1;
    assert_int_equal(pgr_batch_add_set(b, &spec), SLUICE_EINVAL);
    spec.end_ns = 0;
    spec.name = "";
    assert_int_equal(pgr_batch_add_set(b, &spec), SLUICE_EINVAL);
    assert_int_equal(pgr_batch_add_set(b, NULL), SLUICE_EINVAL);
    assert_int_equal(pgr_batch_add_del(b, "x", 0), SLUICE_EINVAL);
    assert_int_equal(pgr_batch_add_info(b, NULL, 1), SLUICE_EINVAL);
    assert_int_equal(pgr_batch_add_list(b, 0), SLUICE_EINVAL);
    assert_int_equal(pgr_batch_add_list(b, RRECUR_LIST_MAX + 1), SLUICE_EINVAL);
    memset(&f, 0, sizeof f);
    f.name = "tick";
    f.namelen = 4;
    assert_int_equal(pgr_batch_add_fire(b, &f), SLUICE_EINVAL); /* version 0 */
    f.version = 1;
    f.missed = -1;
    assert_int_equal(pgr_batch_add_fire(b, &f), SLUICE_EINVAL);
    f.missed = 0;
    occurrence(&a, &l);
    a.lease_ns = 0; /* an occurrence the task encoder refuses: the FIRE is refused whole */
    f.task = &a;
    assert_int_equal(pgr_batch_add_fire(b, &f), SLUICE_EINVAL);
    assert_int_equal(pgr_batch_add_fire(b, NULL), SLUICE_EINVAL);
    assert_int_equal(pgr_batch_count(b), 6);
    assert_int_equal(pgr_batch_params(b, &v), SLUICE_OK);
    assert_string_equal(v[1], before);
    pgr_batch_free(b);
}

/* The answers to six_requests, as sluice_recur_call gives them. */
static const row good_rows[] = {
    {1, "OK 1795526227131600000 5 1795526227131600000", -1},
    {2, "OK 1795526227131600000 1", -1},
    {3, "OK 1795526227131600000", -1},
    {3, "5 1 0 1000 0 3 2 1 9223372036854775807", -1},
    {3, "x y", -1},
    {3, "job", -1},
    {3, "{\"n\":7}", -1},
    {3, "alice", -1},
    {3, "*/5 * * * *", -1},
    {4, "OK 1795526227131600000 2 1795526227000000000 1", -1},
    {4, "6 0 100000000 1000 0 0 0 0 1795526227100000000", -1},
    {4, "a", -1},
    {4, "job", -1},
    {4, "p\0q", 3},
    {4, "", -1},
    {4, "", -1},
    {4, "7 1 0 1000 5000 0 4 0 1795526227131600000", -1},
    {4, "b", -1},
    {4, "job", -1},
    {4, "{}", -1},
    {4, "k", -1},
    {4, "0 * * * *", -1},
    {5, "STALE 1795526227131600000", -1},
    {6, "OK 1795526227131600000 1 42 3 2 9223372036854775807", -1},
};
#define NGOOD (sizeof good_rows / sizeof good_rows[0])

static void test_decode(void **state)
{
    pgr_batch *b = six_requests();
    PGresult *r = result_of(PGRES_TUPLES_OK, good_rows, NGOOD, 23);
    rrecur_result res;
    rrecur_series x;

    (void)state;
    assert_int_equal(pgr_batch_result(b, r, 0, &res), SLUICE_OK);
    assert_int_equal(res.rc, SLUICE_OK);
    assert_int_equal(res.now_ns, INT64_C(1795526227131600000));
    assert_int_equal(res.version, 5);
    assert_int_equal(res.next_ns, INT64_C(1795526227131600000));
    assert_int_equal(pgr_batch_result(b, r, 1, &res), SLUICE_OK);
    assert_int_equal(res.deleted, 1);
    /* INFO: one series, a cron series with a KEY */
    assert_int_equal(pgr_batch_result(b, r, 2, &res), SLUICE_OK);
    assert_int_equal(res.nseries, 1);
    assert_int_equal(pgr_batch_series(b, r, 2, 0, &x), SLUICE_OK);
    assert_int_equal(x.version, 5);
    assert_int_equal(x.interval_ns, 0);
    assert_int_equal(x.max_runs, 3);
    assert_int_equal(x.runs, 2);
    assert_int_equal(x.skipped, 1);
    assert_int_equal(x.next_ns, INT64_MAX);
    assert_memory_equal(x.name, "x y", 3);
    assert_int_equal(x.key_len, 5);
    assert_memory_equal(x.key, "alice", 5);
    assert_int_equal(x.cronlen, 11);
    assert_int_equal(pgr_batch_series(b, r, 2, 1, &x), SLUICE_EINVAL);
    /* LIST: two series, the bound reached */
    assert_int_equal(pgr_batch_result(b, r, 3, &res), SLUICE_OK);
    assert_int_equal(res.nseries, 2);
    assert_int_equal(res.earliest_ns, INT64_C(1795526227000000000));
    assert_int_equal(res.more, 1);
    assert_int_equal(pgr_batch_series(b, r, 3, 0, &x), SLUICE_OK);
    assert_int_equal(x.interval_ns, 100 * SLUICE_NS_PER_MS);
    assert_null(x.key); /* has_key 0 */
    assert_int_equal(x.cronlen, 0);
    assert_int_equal(x.payload_len, 3);
    assert_memory_equal(x.payload, "p\0q", 3); /* bytes, read in place */
    assert_int_equal(pgr_batch_series(b, r, 3, 1, &x), SLUICE_OK);
    assert_int_equal(x.version, 7);
    assert_int_equal(x.end_ns, 5000);
    assert_int_equal(x.runs, 4);
    assert_memory_equal(x.key, "k", 1);
    assert_int_equal(pgr_batch_series(b, r, 3, 2, &x), SLUICE_EINVAL);
    /* FIREs: one lost the race, one added task 42 and ended the series */
    assert_int_equal(pgr_batch_result(b, r, 4, &res), SLUICE_OK);
    assert_int_equal(res.rc, SLUICE_ESTALE);
    assert_int_equal(pgr_batch_series(b, r, 4, 0, &x), SLUICE_EINVAL);
    assert_int_equal(pgr_batch_result(b, r, 5, &res), SLUICE_OK);
    assert_int_equal(res.rc, SLUICE_OK);
    assert_int_equal(res.fired, 1);
    assert_int_equal(res.id, 42);
    assert_int_equal(res.runs, 3);
    assert_int_equal(res.skipped, 2);
    assert_int_equal(res.next_ns, INT64_MAX);
    assert_int_equal(pgr_batch_result(b, r, 6, &res), SLUICE_EINVAL);
    PQclear(r);
    pgr_batch_free(b);
}

static void test_refusals(void **state)
{
    pgr_batch *b = six_requests();
    static const row rows[] = {
        {1, "INVAL 100 the series ends before it starts", -1},
        {2, "OK 100 0", -1},
        {3, "NOTASK 100", -1},
        {4, "OK 100 0 0 0", -1},
        {5, "NOTASK 100", -1},
        {6, "OK 100 0 0 3 7 2000", -1},
    };
    PGresult *r = result_of(PGRES_TUPLES_OK, rows, sizeof rows / sizeof rows[0], 23);
    rrecur_result res;

    (void)state;
    assert_int_equal(pgr_batch_result(b, r, 0, &res), SLUICE_OK);
    assert_int_equal(res.rc, SLUICE_EINVAL);
    assert_int_equal(res.msglen, strlen("the series ends before it starts"));
    assert_memory_equal(res.msg, "the series ends before it starts", res.msglen);
    assert_int_equal(pgr_batch_result(b, r, 1, &res), SLUICE_OK);
    assert_int_equal(res.deleted, 0);
    assert_int_equal(pgr_batch_result(b, r, 2, &res), SLUICE_OK);
    assert_int_equal(res.rc, SLUICE_ENOTFOUND);
    assert_int_equal(pgr_batch_result(b, r, 3, &res), SLUICE_OK);
    assert_int_equal(res.nseries, 0);
    assert_int_equal(res.earliest_ns, 0);
    assert_int_equal(pgr_batch_result(b, r, 4, &res), SLUICE_OK);
    assert_int_equal(res.rc, SLUICE_ENOTFOUND);
    assert_int_equal(pgr_batch_result(b, r, 5, &res), SLUICE_OK);
    assert_int_equal(res.fired, 0); /* a point skipped: no task */
    assert_int_equal(res.skipped, 7);
    PQclear(r);
    pgr_batch_free(b);
}

static void expect_bad(pgr_batch *b, PGresult *r, size_t i)
{
    rrecur_result res;
    rrecur_series x;

    memset(&res, 0x5a, sizeof res);
    assert_int_equal(pgr_batch_result(b, r, i, &res), SLUICE_EPARSE);
    assert_int_equal(res.now_ns, 0);
    assert_int_equal(res.nseries, 0);
    assert_null(res.msg);
    if (pgr_batch_op(b, i) == RRECUR_LIST || pgr_batch_op(b, i) == RRECUR_INFO) {
        memset(&x, 0x5a, sizeof x);
        assert_int_equal(pgr_batch_series(b, r, i, 0, &x), SLUICE_EPARSE);
        assert_null(x.name);
    }
    PQclear(r);
}

static void test_malformed(void **state)
{
    pgr_batch *b = six_requests();
    row rows[NGOOD];
    struct {
        size_t at;
        const char *val;
        size_t req; /* the request it breaks */
    } bad[] = {
        {0, "OK 1795526227131600000 0 1795526227131600000", 0}, /* version 0 */
        {0, "OK 1795526227131600000 5", 0},                     /* a field missing */
        {0, "STALE 1795526227131600000", 0},                    /* not a SET's refusal */
        {1, "OK 1795526227131600000 2", 1},                     /* deleted 2 */
        {2, "NOTASK 1795526227131600000 x", 2},                 /* a field too many */
        {3, "5 1 0 1000 0 3 2 1 -5", 2},                        /* a negative next */
        {3, "5 1 100 1000 0 3 2 1 9", 2},                       /* interval and cron */
        {4, "", 2},                                             /* no name */
        {9, "OK 1795526227131600000 3 0 1", 3},                 /* one series too many */
        {9, "OK 1795526227131600000 2 0 2", 3},                 /* more 2 */
        {22, "OK 1795526227131600000", 4},                      /* a FIRE without fields */
        {23, "OK 1795526227131600000 1 0 3 2 0", 5},            /* fired, task 0 */
        {23, "OK 1e18 1 42 3 2 0", 5},                          /* not an integer */
    };

    (void)state;
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        memcpy(rows, good_rows, sizeof rows);
        rows[bad[k].at].val = bad[k].val;
        rows[bad[k].at].len = -1;
        expect_bad(b, result_of(PGRES_TUPLES_OK, rows, NGOOD, 23), bad[k].req);
    }
    /* an SQL NULL element, a request without rows, rows out of order, the wrong column type, an
     * error result */
    memcpy(rows, good_rows, sizeof rows);
    rows[4].val = NULL;
    expect_bad(b, result_of(PGRES_TUPLES_OK, rows, NGOOD, 23), 2);
    expect_bad(b, result_of(PGRES_TUPLES_OK, good_rows, NGOOD - 1, 23), 5);
    memcpy(rows, good_rows, sizeof rows);
    rows[1].req = 3;
    expect_bad(b, result_of(PGRES_TUPLES_OK, rows, NGOOD, 23), 1);
    expect_bad(b, result_of(PGRES_TUPLES_OK, good_rows, NGOOD, 20), 0);
    expect_bad(b, result_of(PGRES_FATAL_ERROR, NULL, 0, 23), 0);
    expect_bad(b, NULL, 0);
    pgr_batch_free(b);
}

static void test_migration(void **state)
{
    size_t len = 0;
    const char *sql = pgs_migration(3, &len);

    (void)state;
    assert_true(PGS_VERSION >= 3);
    assert_non_null(sql);
    assert_int_equal(strlen(sql), len);
    assert_non_null(strstr(sql, "CREATE FUNCTION sluice_recur_call("));
    /* the occurrence is 002's ADD, in the same transaction */
    assert_non_null(strstr(sql, "sluice_task_add(f[8 : cardinality(f)], now)"));
    assert_non_null(strstr(sql, "clock_timestamp()"));
    assert_null(pgs_migration(PGS_VERSION + 1, &len));
}

static int build_batch(void *arg)
{
    pgr_batch *b = NULL;
    const char *const *v;
    sluice_recurring_spec spec;
    rrecur_fire f;
    rtask_link l;
    rtask_add a;
    int rc;

    (void)arg;
    memset(&spec, 0, sizeof spec);
    spec.name = "a series";
    spec.type = "job";
    spec.payload = "{\"x\":1}";
    spec.payload_len = 7;
    spec.interval_ns = SEC;
    occurrence(&a, &l);
    memset(&f, 0, sizeof f);
    f.name = "a series";
    f.namelen = 8;
    f.version = 3;
    f.expected_ns = 5;
    f.next_ns = 6;
    f.task = &a;
    rc = pgr_batch_new(&b);
    for (int i = 0; i < 30 && rc == SLUICE_OK; i++) {
        rc = i % 4 == 0   ? pgr_batch_add_set(b, &spec)
             : i % 4 == 1 ? pgr_batch_add_fire(b, &f)
             : i % 4 == 2 ? pgr_batch_add_list(b, 8)
                          : pgr_batch_add_del(b, "a series", 8);
        if (rc >= 0)
            rc = SLUICE_OK;
    }
    if (rc == SLUICE_OK)
        rc = pgr_batch_params(b, &v);
    pgr_batch_free(b);
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
        cmocka_unit_test(test_decode),        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_malformed),     cmocka_unit_test(test_migration),
        cmocka_unit_test(test_oom),
    };

    return cmocka_run_group_tests(tests, setup, NULL);
}
