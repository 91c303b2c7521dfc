/* SPDX-License-Identifier: MIT */
/*
 * The shared stores' live limit definitions (src/store/shared_defs.c), without a store: the set
 * (put, replace, lookup, move; refusals that change nothing; an out-of-memory sweep), the exact
 * arguments of the Redis script's D1 calls, and both decoders, Redis's on reply trees built by
 * hand as hiredis hands them over and PostgreSQL's on results built with libpq's own
 * PQmakeEmptyPGresult / PQsetvalue: an unchanged set, a write on top of the caller's version, a
 * whole set, an empty one, and malformed answers refused with SLUICE_EPARSE and nothing filled.
 * The script and the SQL run against real stores in tests/server/shared_overrides.sh.
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
#include <libpq-fe.h>

#include "sluice/error.h"
#include "store/pg_schema.h"
#include "store/shared_defs.h"
#include "reply_fixture.h"
#include "testutil.h"

/* The arguments of an sdefs_cmd or sdefs_reset_cmd, as reply_fixture.h's assertions read them. */
#define CMD_OF(c) ((cmd){.argc = (c).argc, .argv = (c).argv, .argvlen = (c).argvlen})

static void test_set(void **state)
{
    sdefs_set s;

    (void)state;
    sdefs_set_init(&s);
    assert_null(sdefs_set_get(&s, "api"));
    assert_int_equal(sdefs_set_put(&s, "api", 3, "rate=5/1s", 9), SLUICE_OK);
    assert_int_equal(sdefs_set_put(&s, "old", 3, "", 0), SLUICE_OK);
    assert_string_equal(sdefs_set_get(&s, "api"), "rate=5/1s");
    assert_string_equal(sdefs_set_get(&s, "old"), "");
    /* Replacing keeps one entry per name. */
    assert_int_equal(sdefs_set_put(&s, "api", 3, "rate=9/1s,burst=2", 17), SLUICE_OK);
    assert_int_equal(s.n, 2);
    assert_string_equal(sdefs_set_get(&s, "api"), "rate=9/1s,burst=2");
    /* A name is compared whole, not as a prefix. */
    assert_null(sdefs_set_get(&s, "ap"));
    assert_int_equal(sdefs_set_put(&s, "apix", 3, "x", 1), SLUICE_OK); /* the first 3 bytes */
    assert_int_equal(s.n, 2);
    assert_string_equal(sdefs_set_get(&s, "api"), "x");
    /* Refusals change nothing. */
    assert_int_equal(sdefs_set_put(&s, "", 0, "x", 1), SLUICE_EINVAL);
    assert_int_equal(sdefs_set_put(&s, "a\0b", 3, "x", 1), SLUICE_EINVAL);
    assert_int_equal(sdefs_set_put(&s, "b", 1, "x\0y", 3), SLUICE_EINVAL);
    assert_int_equal(sdefs_set_put(&s, "b", 1, NULL, 2), SLUICE_EINVAL);
    assert_int_equal(s.n, 2);
    /* Many names: the array grows. */
    for (int i = 0; i < 100; i++) {
        char n[16];

        snprintf(n, sizeof n, "l%d", i);
        assert_int_equal(sdefs_set_put(&s, n, strlen(n), n, strlen(n)), SLUICE_OK);
    }
    assert_int_equal(s.n, 102);
    assert_string_equal(sdefs_set_get(&s, "l77"), "l77");
    {
        sdefs_set d;

        sdefs_set_init(&d);
        assert_int_equal(sdefs_set_put(&d, "z", 1, "z", 1), SLUICE_OK);
        sdefs_set_move(&d, &s);
        assert_int_equal(s.n, 0);
        assert_null(s.e);
        assert_null(sdefs_set_get(&d, "z"));
        assert_string_equal(sdefs_set_get(&d, "l5"), "l5");
        sdefs_set_clear(&d);
    }
    sdefs_set_clear(&s);
    sdefs_set_clear(NULL);
}

static int put_body(void *arg)
{
    sdefs_set s;
    int rc;

    (void)arg;
    sdefs_set_init(&s);
    for (int i = 0; i < 20; i++) {
        char n[16];
        size_t before;

        snprintf(n, sizeof n, "l%d", i);
        before = s.n;
        rc = sdefs_set_put(&s, n, strlen(n), "rate=1/1s", 9);
        if (rc == 0 && i % 3 == 0) {
            before = s.n;
            rc = sdefs_set_put(&s, n, strlen(n), "", 0); /* a replacement allocates too */
            if (rc != 0)
                assert_string_equal(sdefs_set_get(&s, n), "rate=1/1s"); /* kept */
        }
        if (rc != 0) {
            assert_int_equal(s.n, before); /* the failed put added nothing */
            sdefs_set_clear(&s);
            return rc;
        }
    }
    sdefs_set_clear(&s);
    return 0;
}

static void test_set_oom(void **state)
{
    (void)state;
    oom_sweep(put_body, NULL, 200);
}

static void test_redis_command(void **state)
{
    sdefs_cmd c;
    cmd m;

    (void)state;
    assert_int_equal(sdefs_redis_command(&c, NULL, "sha", 7, NULL, 0, NULL, 0), SLUICE_OK);
    m = CMD_OF(c);
    assert_int_equal(m.argc, 8);
    assert_arg(&m, 0, "EVALSHA");
    assert_arg(&m, 1, "sha");
    assert_arg(&m, 2, "2");
    assert_arg(&m, 3, "sluice:{defs}:limits");
    assert_arg(&m, 4, "sluice:{defs}:version");
    assert_arg(&m, 5, "D1");
    assert_arg(&m, 6, "G");
    assert_arg(&m, 7, "7");

    assert_int_equal(sdefs_redis_command(&c, "px", "sha", -1, "api", 3, "rate=1/1s", 9), 0);
    m = CMD_OF(c);
    assert_int_equal(m.argc, 10);
    assert_arg(&m, 3, "px:{defs}:limits");
    assert_arg(&m, 4, "px:{defs}:version");
    assert_arg(&m, 6, "S");
    assert_arg(&m, 7, "-1");
    assert_arg(&m, 8, "api");
    assert_arg(&m, 9, "rate=1/1s");
    /* A removal: an empty spec. */
    assert_int_equal(sdefs_redis_command(&c, NULL, "sha", 3, "api", 3, NULL, 0), 0);
    m = CMD_OF(c);
    assert_arg(&m, 9, "");

    assert_int_equal(sdefs_redis_command(&c, NULL, NULL, 0, NULL, 0, NULL, 0), SLUICE_EINVAL);
    assert_int_equal(sdefs_redis_command(&c, "a{b", "sha", 0, NULL, 0, NULL, 0), SLUICE_EINVAL);
    assert_int_equal(sdefs_redis_command(&c, NULL, "sha", 0, "api", 0, "x", 1), SLUICE_EINVAL);
    {
        char longp[SDEFS_PREFIX_MAX + 2], key[SDEFS_PREFIX_MAX + 16];

        memset(longp, 'p', sizeof longp - 1);
        longp[sizeof longp - 1] = '\0';
        assert_int_equal(sdefs_redis_command(&c, longp, "sha", 0, NULL, 0, NULL, 0), SLUICE_EINVAL);
        longp[SDEFS_PREFIX_MAX] = '\0'; /* the longest accepted */
        assert_int_equal(sdefs_redis_command(&c, longp, "sha", 0, NULL, 0, NULL, 0), SLUICE_OK);
        assert_int_equal(sdefs_redis_slot_key(NULL, key, sizeof key), 20);
        assert_string_equal(key, "sluice:{defs}:limits");
    }
}

static redisReply *int_(long long v)
{
    redisReply *r = node(REDIS_REPLY_INTEGER);

    r->integer = v;
    return r;
}

static void test_redis_answer(void **state)
{
    sdefs_set s;
    int64_t ver;
    int full;

    (void)state;
    sdefs_set_init(&s);
    reply_pool_reset();
    /* GET, unchanged: nothing filled. */
    assert_int_equal(sdefs_set_put(&s, "keep", 4, "k", 1), 0);
    assert_int_equal(sdefs_redis_answer(a_(1, int_(5)), 0, 5, &ver, &full, &s), SLUICE_OK);
    assert_int_equal(ver, 5);
    assert_int_equal(full, 0);
    assert_string_equal(sdefs_set_get(&s, "keep"), "k");
    /* GET, changed: the whole set replaces the old one. */
    assert_int_equal(
        sdefs_redis_answer(a_(5, int_(6), s_("api"), s_("rate=2/1s"), s_("old"), s_("")), 0, 5,
                           &ver, &full, &s),
        SLUICE_OK);
    assert_int_equal(ver, 6);
    assert_int_equal(full, 1);
    assert_int_equal(s.n, 2);
    assert_null(sdefs_set_get(&s, "keep"));
    assert_string_equal(sdefs_set_get(&s, "api"), "rate=2/1s");
    assert_string_equal(sdefs_set_get(&s, "old"), "");
    /* GET of a node that never loaded, empty store: full and empty. */
    assert_int_equal(sdefs_redis_answer(a_(1, int_(0)), 0, -1, &ver, &full, &s), SLUICE_OK);
    assert_int_equal(full, 1);
    assert_int_equal(s.n, 0);
    /* SET on top of the caller's version: just the version. */
    assert_int_equal(sdefs_set_put(&s, "keep", 4, "k", 1), 0);
    assert_int_equal(sdefs_redis_answer(a_(1, int_(8)), 1, 7, &ver, &full, &s), SLUICE_OK);
    assert_int_equal(ver, 8);
    assert_int_equal(full, 0);
    assert_int_equal(s.n, 1);
    /* SET after another node's write: the whole set. */
    assert_int_equal(
        sdefs_redis_answer(a_(3, int_(9), s_("b"), s_("rate=1/1s")), 1, 7, &ver, &full, &s),
        SLUICE_OK);
    assert_int_equal(full, 1);
    assert_int_equal(s.n, 1);
    assert_string_equal(sdefs_set_get(&s, "b"), "rate=1/1s");

    /* Malformed: refused, nothing filled. */
    {
        redisReply *err = node(REDIS_REPLY_ERROR);
        redisReply *bad[] = {
            NULL,
            err,
            s_("5"),
            a_(0),
            a_(1, s_("5")),
            a_(1, int_(-1)),
            a_(2, int_(6), s_("a")),          /* a name without its spec */
            a_(3, int_(6), s_("a"), int_(1)), /* a spec that is not a string */
            a_(3, int_(5), s_("a"), s_("x")), /* "unchanged" with a set */
            a_(3, int_(6), s_(""), s_("x")),  /* an empty name */
            a_(3, int_(6), s_("a"), NULL),    /* a missing element */
        };

        err->str = (char *)"ERR boom";
        err->len = 8;
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            ver = 42;
            full = 42;
            assert_int_equal(sdefs_redis_answer(bad[i], 0, 5, &ver, &full, &s), SLUICE_EPARSE);
            assert_int_equal(ver, 0);
            assert_int_equal(full, 0);
            assert_int_equal(s.n, 1); /* the old set is kept */
        }
        /* A SET answer one past known that carries a set is not a shape the script gives. */
        assert_int_equal(
            sdefs_redis_answer(a_(3, int_(8), s_("a"), s_("x")), 1, 7, &ver, &full, &s),
            SLUICE_EPARSE);
    }
    sdefs_set_clear(&s);
}

static int answer_body(void *arg)
{
    const redisReply *r = arg;
    sdefs_set s;
    int64_t ver;
    int full, rc;

    sdefs_set_init(&s);
    rc = sdefs_redis_answer(r, 0, 1, &ver, &full, &s);
    if (rc == 0) {
        assert_int_equal(s.n, 4);
        assert_string_equal(sdefs_set_get(&s, "d"), "rate=4/1s");
    } else {
        assert_int_equal(s.n, 0);
    }
    sdefs_set_clear(&s);
    return rc;
}

static void test_redis_answer_oom(void **state)
{
    redisReply *r;

    (void)state;
    reply_pool_reset();
    r = a_(9, int_(3), s_("a"), s_("rate=1/1s"), s_("b"), s_(""), s_("c"), s_("rate=3/1s"), s_("d"),
           s_("rate=4/1s"));
    oom_sweep(answer_body, r, 200);
}

/* A result as the statements return it: rows of (ver, name, spec), NULL where s is NULL. */
static PGresult *pg_rows(size_t n, const char *const (*rows)[3])
{
    PGresult *r = PQmakeEmptyPGresult(NULL, PGRES_TUPLES_OK);
    PGresAttDesc attrs[3];
    const char *names[3] = {"ver", "name", "spec"};

    assert_non_null(r);
    memset(attrs, 0, sizeof attrs);
    for (int i = 0; i < 3; i++) {
        attrs[i].name = (char *)names[i];
        attrs[i].format = 0;
        attrs[i].typid = i == 0 ? 20 : 25;
        attrs[i].typlen = -1;
        attrs[i].atttypmod = -1;
    }
    assert_true(PQsetResultAttrs(r, 3, attrs));
    for (size_t i = 0; i < n; i++)
        for (int f = 0; f < 3; f++)
            assert_true(PQsetvalue(r, (int)i, f, (char *)rows[i][f],
                                   rows[i][f] ? (int)strlen(rows[i][f]) : -1));
    return r;
}

static void test_pg_answer(void **state)
{
    static const char *const same[][3] = {{"5", NULL, NULL}};
    static const char *const all[][3] = {{"6", "api", "rate=2/1s"}, {"6", "old", ""}};
    static const char *const mixed[][3] = {{"6", "api", "x"}, {"7", "b", "y"}};
    static const char *const nospec[][3] = {{"6", "api", NULL}};
    static const char *const neg[][3] = {{"-3", NULL, NULL}};
    static const char *const junk[][3] = {{"6x", NULL, NULL}};
    sdefs_set s;
    PGresult *r;
    int64_t ver;
    int full;

    (void)state;
    sdefs_set_init(&s);
    assert_int_equal(sdefs_set_put(&s, "keep", 4, "k", 1), 0);
    r = pg_rows(1, same);
    assert_int_equal(sdefs_pg_answer((const struct pg_result *)r, 0, 5, &ver, &full, &s), 0);
    assert_int_equal(ver, 5);
    assert_int_equal(full, 0);
    assert_int_equal(s.n, 1);
    /* The same row answers a write one past known: incremental. */
    assert_int_equal(sdefs_pg_answer((const struct pg_result *)r, 1, 4, &ver, &full, &s), 0);
    assert_int_equal(full, 0);
    /* An empty set at a new version: the version row alone. */
    assert_int_equal(sdefs_pg_answer((const struct pg_result *)r, 0, -1, &ver, &full, &s), 0);
    assert_int_equal(full, 1);
    assert_int_equal(s.n, 0);
    PQclear(r);
    r = pg_rows(2, all);
    assert_int_equal(sdefs_pg_answer((const struct pg_result *)r, 0, 5, &ver, &full, &s), 0);
    assert_int_equal(ver, 6);
    assert_int_equal(full, 1);
    assert_string_equal(sdefs_set_get(&s, "api"), "rate=2/1s");
    assert_string_equal(sdefs_set_get(&s, "old"), "");
    /* A set answering "unchanged" is not a shape the functions give. */
    assert_int_equal(sdefs_pg_answer((const struct pg_result *)r, 0, 6, &ver, &full, &s),
                     SLUICE_EPARSE);
    assert_int_equal(s.n, 2);
    PQclear(r);
    {
        const char *const(*bad[])[3] = {mixed, nospec, neg, junk};
        size_t nrows[] = {2, 1, 1, 1};

        for (size_t i = 0; i < 4; i++) {
            r = pg_rows(nrows[i], bad[i]);
            assert_int_equal(sdefs_pg_answer((const struct pg_result *)r, 0, 1, &ver, &full, &s),
                             SLUICE_EPARSE);
            assert_int_equal(ver, 0);
            assert_int_equal(s.n, 2);
            PQclear(r);
        }
    }
    r = PQmakeEmptyPGresult(NULL, PGRES_FATAL_ERROR);
    assert_int_equal(sdefs_pg_answer((const struct pg_result *)r, 0, 1, &ver, &full, &s),
                     SLUICE_EPARSE);
    PQclear(r);
    assert_int_equal(sdefs_pg_answer(NULL, 0, 1, &ver, &full, &s), SLUICE_EPARSE);
    sdefs_set_clear(&s);
}

static void test_version(void **state)
{
    sdefs_cmd c;
    redisReply *nil;
    cmd m;
    int64_t v;

    (void)state;
    assert_int_equal(sdefs_redis_version_command(&c, NULL), SLUICE_OK);
    m = CMD_OF(c);
    assert_int_equal(m.argc, 2);
    assert_arg(&m, 0, "GET");
    assert_arg(&m, 1, "sluice:{defs}:version");
    assert_int_equal(sdefs_redis_version_command(&c, "a}b"), SLUICE_EINVAL);
    reply_pool_reset();
    nil = node(REDIS_REPLY_NIL);
    assert_int_equal(sdefs_redis_version_answer(nil, &v), SLUICE_OK);
    assert_int_equal(v, 0);
    assert_int_equal(sdefs_redis_version_answer(s_("42"), &v), SLUICE_OK);
    assert_int_equal(v, 42);
    assert_int_equal(sdefs_redis_version_answer(s_("9223372036854775807"), &v), SLUICE_OK);
    assert_int_equal(v, INT64_MAX);
    {
        redisReply *bad[] = {
            NULL,    s_(""),        s_("4x"), s_("-1"), s_("99999999999999999999999"),
            int_(3), a_(1, s_("1"))};

        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            v = 7;
            assert_int_equal(sdefs_redis_version_answer(bad[i], &v), SLUICE_EPARSE);
            assert_int_equal(v, 0);
        }
    }
}

static void test_reset(void **state)
{
    const char *keys[2] = {"sluice:{all}:3:api:k1", "sluice:{all}:8:api/=vip:k1"};
    size_t lens[2] = {strlen(keys[0]), strlen(keys[1])};
    sdefs_reset_cmd c;
    redisReply *err;
    PGresult *r;
    cmd m;
    int64_t n;

    (void)state;
    assert_int_equal(sdefs_redis_reset_command(&c, "sha", keys, lens, 2), SLUICE_OK);
    m = CMD_OF(c);
    assert_int_equal(m.argc, 7);
    assert_arg(&m, 0, "EVALSHA");
    assert_arg(&m, 1, "sha");
    assert_arg(&m, 2, "2");
    assert_arg(&m, 3, keys[0]);
    assert_arg(&m, 4, keys[1]);
    assert_arg(&m, 5, "D1");
    assert_arg(&m, 6, "X");
    assert_int_equal(sdefs_redis_reset_command(&c, "sha", keys, lens, 1), SLUICE_OK);
    assert_int_equal(c.argc, 6);
    assert_int_equal(sdefs_redis_reset_command(&c, "sha", keys, lens, 0), SLUICE_EINVAL);
    assert_int_equal(sdefs_redis_reset_command(&c, "sha", keys, lens, 3), SLUICE_EINVAL);
    assert_int_equal(sdefs_redis_reset_command(&c, NULL, keys, lens, 1), SLUICE_EINVAL);

    reply_pool_reset();
    assert_int_equal(sdefs_reset_answer(int_(2), NULL, &n), SLUICE_OK);
    assert_int_equal(n, 2);
    assert_int_equal(sdefs_reset_answer(int_(0), NULL, &n), SLUICE_OK);
    assert_int_equal(n, 0);
    assert_int_equal(sdefs_reset_answer(int_(-1), NULL, &n), SLUICE_EPARSE);
    err = node(REDIS_REPLY_ERROR);
    assert_int_equal(sdefs_reset_answer(err, NULL, &n), SLUICE_EPARSE);
    assert_int_equal(sdefs_reset_answer(a_(1, int_(1)), NULL, &n), SLUICE_EPARSE);
    assert_int_equal(n, 0);
    {
        static const char *const one[][3] = {{"1", NULL, NULL}};
        PGresAttDesc a;

        r = PQmakeEmptyPGresult(NULL, PGRES_TUPLES_OK);
        memset(&a, 0, sizeof a);
        a.name = (char *)"count";
        a.typid = 20;
        a.typlen = 8;
        a.atttypmod = -1;
        assert_true(PQsetResultAttrs(r, 1, &a));
        assert_true(PQsetvalue(r, 0, 0, (char *)"1", 1));
        assert_int_equal(sdefs_reset_answer(NULL, (const struct pg_result *)r, &n), SLUICE_OK);
        assert_int_equal(n, 1);
        PQclear(r);
        r = pg_rows(1, one); /* three columns: not a count */
        assert_int_equal(sdefs_reset_answer(NULL, (const struct pg_result *)r, &n), SLUICE_EPARSE);
        PQclear(r);
    }
    assert_int_equal(sdefs_reset_answer(NULL, NULL, &n), SLUICE_EPARSE);
}

/* One migration creates the set and the two functions the statements call. */
static void test_migration(void **state)
{
    int found = 0;

    (void)state;
    for (int v = 1; v <= PGS_VERSION; v++) {
        size_t len = 0;
        const char *sql = pgs_migration(v, &len);

        assert_non_null(sql);
        if (strstr(sql, "CREATE FUNCTION sluice_limit_defs_get(")) {
            found++;
            assert_non_null(strstr(sql, "CREATE FUNCTION sluice_limit_defs_set("));
            assert_non_null(strstr(sql, "CREATE TABLE sluice_limit_def "));
        }
    }
    assert_int_equal(found, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_set),
        cmocka_unit_test(test_set_oom),
        cmocka_unit_test(test_redis_command),
        cmocka_unit_test(test_redis_answer),
        cmocka_unit_test(test_redis_answer_oom),
        cmocka_unit_test(test_pg_answer),
        cmocka_unit_test(test_migration),
        cmocka_unit_test(test_reset),
        cmocka_unit_test(test_version),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
