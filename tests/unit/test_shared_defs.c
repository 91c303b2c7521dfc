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

#include "core/quota.h"
#include "base/alloc.h"
#include "sluice/error.h"
#include "sluice/limit.h"
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

/* LIMIT.RESET of every key: the generation call's exact arguments and its refusals. */
static void test_whole_reset(void **state)
{
    sdefs_wreset_cmd c;
    cmd m;

    (void)state;
    assert_int_equal(sdefs_redis_whole_reset_command(&c, NULL, "sha", "all", "3:api8:api/=vip", 15),
                     SLUICE_OK);
    m = CMD_OF(c);
    assert_int_equal(m.argc, 7);
    assert_arg(&m, 0, "EVALSHA");
    assert_arg(&m, 1, "sha");
    assert_arg(&m, 2, "1");
    assert_arg(&m, 3, "sluice:{all}:resets");
    assert_arg(&m, 4, "D1");
    assert_arg(&m, 5, "W");
    assert_arg(&m, 6, "3:api8:api/=vip");
    assert_int_equal(sdefs_redis_whole_reset_command(&c, "p", "sha", "t", "x", 1), SLUICE_OK);
    m = CMD_OF(c);
    assert_arg(&m, 3, "p:{t}:resets");
    assert_int_equal(sdefs_redis_whole_reset_command(&c, NULL, NULL, "all", "x", 1), SLUICE_EINVAL);
    assert_int_equal(sdefs_redis_whole_reset_command(&c, NULL, "sha", "all", "x", 0),
                     SLUICE_EINVAL);
    assert_int_equal(sdefs_redis_whole_reset_command(&c, NULL, "sha", "", "x", 1), SLUICE_EINVAL);
    assert_int_equal(sdefs_redis_whole_reset_command(&c, NULL, "sha", "a}b", "x", 1),
                     SLUICE_EINVAL);
    assert_int_equal(sdefs_redis_whole_reset_command(&c, "a{", "sha", "all", "x", 1),
                     SLUICE_EINVAL);
    assert_int_equal(c.argc, 0);
}

/* A whole reset by generation on Redis Cluster (defs.lua's "N"): its exact arguments, and its
 * short answer read as a SET's. */
static void test_gen_reset(void **state)
{
    sdefs_cmd c;
    cmd m;

    (void)state;
    assert_int_equal(sdefs_redis_gen_command(&c, NULL, "sha", 7, "3:api", 5), SLUICE_OK);
    m = CMD_OF(c);
    assert_int_equal(m.argc, 9);
    assert_arg(&m, 0, "EVALSHA");
    assert_arg(&m, 2, "2");
    assert_arg(&m, 3, "sluice:{defs}:limits");
    assert_arg(&m, 4, "sluice:{defs}:version");
    assert_arg(&m, 5, "D1");
    assert_arg(&m, 6, "N");
    assert_arg(&m, 7, "7");
    assert_arg(&m, 8, "3:api");
    assert_int_equal(sdefs_redis_gen_command(&c, NULL, NULL, 7, "3:api", 5), SLUICE_EINVAL);
    assert_int_equal(sdefs_redis_gen_command(&c, NULL, "sha", 7, "", 0), SLUICE_EINVAL);
}

/* The id list of a whole reset: any byte in an id (a space, a quote, a colon) survives, on Redis
 * as written and on PostgreSQL as a text[] literal. */
static void test_id_list(void **state)
{
    packed_str s = {0};
    char *lit;

    (void)state;
    assert_int_equal(sdefs_ids_put(&s, "api", "", "", 0), SLUICE_OK);
    assert_int_equal(sdefs_ids_put(&s, "api", "/", "gold", 4), SLUICE_OK);
    assert_int_equal(sdefs_ids_put(&s, "api", "/=", "a b\"c\\:9", 8), SLUICE_OK);
    assert_string_equal(s.p, "3:api8:api/gold13:api/=a b\"c\\:9");
    lit = sdefs_pg_ids_array(s.p, s.len);
    assert_non_null(lit);
    assert_string_equal(lit, "{\"api\",\"api/gold\",\"api/=a b\\\"c\\\\:9\"}");
    alloc_free(lit);
    assert_null(sdefs_pg_ids_array("3:ap", 4));  /* cut short */
    assert_null(sdefs_pg_ids_array("x:api", 5)); /* no length */
    assert_null(sdefs_pg_ids_array("1:\0", 3));  /* a NUL byte */
    alloc_free(s.p);
}

#define DAY_NS (INT64_C(86400) * 1000000000)
#define T0_NS  (INT64_C(1763078400) * 1000000000) /* a UTC midnight */

/* The figures of a raw state, by hand: fresh, within its period, past it, past the budget, a
 * quota without a period. */
static void test_quota_usage(void **state)
{
    sluice_quota_usage u;

    (void)state;
    sdefs_quota_usage(100, SLUICE_CAL_DAY, 0, 0, 0, 0, T0_NS + 5, &u);
    assert_int_equal(u.spent, 0);
    assert_int_equal(u.budget, 100);
    assert_int_equal(u.remaining, 100);
    assert_int_equal(u.period_start_ns, T0_NS);
    assert_int_equal(u.resets_at_ns, T0_NS + DAY_NS);
    sdefs_quota_usage(100, SLUICE_CAL_DAY, 1, T0_NS, T0_NS + DAY_NS, 30, T0_NS + 5, &u);
    assert_int_equal(u.spent, 30);
    assert_int_equal(u.remaining, 70);
    /* The period ended: nothing spent in the next one. */
    sdefs_quota_usage(100, SLUICE_CAL_DAY, 1, T0_NS, T0_NS + DAY_NS, 30, T0_NS + DAY_NS, &u);
    assert_int_equal(u.spent, 0);
    assert_int_equal(u.period_start_ns, T0_NS + DAY_NS);
    /* A settlement past the budget. */
    sdefs_quota_usage(100, SLUICE_CAL_DAY, 1, T0_NS, T0_NS + DAY_NS, 130, T0_NS + 9, &u);
    assert_int_equal(u.spent, 130);
    assert_int_equal(u.remaining, 0);
    sdefs_quota_usage(10, SLUICE_CAL_NONE, 1, 0, SLUICE_NEVER, 4, T0_NS, &u);
    assert_int_equal(u.spent, 4);
    assert_int_equal(u.remaining, 6);
    assert_int_equal(u.period_start_ns, 0);
    assert_int_equal(u.resets_at_ns, SLUICE_NEVER);
}

/* Property: the raw state a store keeps (quota.h's, as the scripts port it), read by
 * sdefs_quota_usage, gives the core's own sluice_limit_quota_usage figures, over random charges,
 * settlements and times on a simulated clock, for both calendars and none. */
static void test_quota_usage_model(void **state)
{
    static const sluice_calendar cals[] = {SLUICE_CAL_NONE, SLUICE_CAL_DAY, SLUICE_CAL_MONTH};
    uint64_t seed = 0x5eed;

    (void)state;
    for (size_t ci = 0; ci < 3; ci++) {
        sluice_limit_def def;
        sluice_limit *lim;
        quota_state q;
        char msg[128];
        int64_t now = T0_NS, last_ok = 0;

        sluice_limit_def_init(&def, SLUICE_QUOTA);
        def.limit = 50;
        def.calendar = cals[ci];
        assert_int_equal(sluice_limit_new(&def, &lim, msg, sizeof msg), SLUICE_OK);
        memset(&q, 0, sizeof q);
        for (int i = 0; i < 4000; i++) {
            sluice_quota_usage want, got;
            sluice_decision d;
            uint64_t r;
            int64_t units;

            seed = seed * 6364136223846793005u + 1442695040888963407u;
            r = seed >> 33;
            now += r % 7 == 0 ? (int64_t)(r % 40) * (DAY_NS / 8) : (int64_t)(r % 1000) * 1000000;
            units = (int64_t)(r % 13) + 1;
            if (r % 5 == 0 && last_ok) {
                int64_t actual = (int64_t)((r >> 4) % 30);
                int rc1 = sluice_limit_settle(lim, "k", 1, last_ok, 1, actual, now);
                int rc2 = quota_settle(def.calendar, &q, last_ok, 1, actual, now);

                assert_int_equal(rc1, rc2);
            } else {
                sluice_limit_decide(lim, "k", 1, units, now, 0, &d);
                quota_decide(def.limit, def.calendar, &q, units, now, 0, &d);
                if (d.allowed && units == 1)
                    last_ok = now;
            }
            assert_int_equal(sluice_limit_quota_usage(lim, "k", 1, now, &want), SLUICE_OK);
            sdefs_quota_usage(def.limit, def.calendar, 1, q.period_start_ns, q.period_end_ns,
                              q.spent, now, &got);
            assert_memory_equal(&want, &got, sizeof want);
        }
        sluice_limit_free(lim);
    }
}

/* A PostgreSQL result of three text columns (state, clock, now) and one row. */
static PGresult *pg_spend_row(const char *st, const char *clock, const char *now)
{
    static const char *row[1][3];

    row[0][0] = st;
    row[0][1] = clock;
    row[0][2] = now;
    return pg_rows(1, (const char *const(*)[3])row);
}

/* LIMIT.SPEND's call and both stores' answers: the state, the clock's ratchet, another kind's
 * state read as absent, malformed answers refused. */
static void test_spend(void **state)
{
    sdefs_spend_cmd c;
    sluice_quota_usage u;
    redisReply *r;
    PGresult *p;
    char now_s[24], clock[64], st[96];
    cmd m;

    (void)state;
    assert_int_equal(sdefs_redis_spend_command(&c, "sha", "sk", 2, "ck", 2), SLUICE_OK);
    m = CMD_OF(c);
    assert_int_equal(m.argc, 7);
    assert_arg(&m, 0, "EVALSHA");
    assert_arg(&m, 2, "2");
    assert_arg(&m, 3, "sk");
    assert_arg(&m, 4, "ck");
    assert_arg(&m, 5, "D1");
    assert_arg(&m, 6, "Q");
    assert_int_equal(sdefs_redis_spend_command(&c, NULL, "sk", 2, "ck", 2), SLUICE_EINVAL);

    reply_pool_reset();
    snprintf(st, sizeof st, "q %lld %lld 30", (long long)T0_NS, (long long)(T0_NS + DAY_NS));
    /* TIME: T0 + 1 s; no clock. */
    r = a_(4, s_(st), s_(""), s_("1763078401"), s_("000000"));
    assert_int_equal(sdefs_spend_answer(r, NULL, 100, SLUICE_CAL_DAY, &u), SLUICE_OK);
    assert_int_equal(u.spent, 30);
    assert_int_equal(u.remaining, 70);
    assert_int_equal(u.period_start_ns, T0_NS);
    /* The tag's clock ahead of TIME (past the period's end) wins: nothing spent now. */
    snprintf(clock, sizeof clock, "%lld 7 -1", (long long)(T0_NS + DAY_NS + 1));
    r = a_(4, s_(st), s_(clock), s_("1763078401"), s_("000000"));
    assert_int_equal(sdefs_spend_answer(r, NULL, 100, SLUICE_CAL_DAY, &u), SLUICE_OK);
    assert_int_equal(u.spent, 0);
    assert_int_equal(u.period_start_ns, T0_NS + DAY_NS);
    /* A rate's state under the name (a limit redefined): absent. */
    r = a_(4, s_("r 5 0"), s_(""), s_("1763078401"), s_("5"));
    assert_int_equal(sdefs_spend_answer(r, NULL, 100, SLUICE_CAL_DAY, &u), SLUICE_OK);
    assert_int_equal(u.spent, 0);
    assert_int_equal(u.budget, 100);
    /* Malformed: a short array, a bad state, a bad clock, bad TIME, an error reply. */
    assert_int_equal(sdefs_spend_answer(a_(3, s_(""), s_(""), s_("1")), NULL, 1, 0, &u),
                     SLUICE_EPARSE);
    r = a_(4, s_("q 1 2"), s_(""), s_("1763078401"), s_("0"));
    assert_int_equal(sdefs_spend_answer(r, NULL, 1, 0, &u), SLUICE_EPARSE);
    r = a_(4, s_("q 1 2 3 "), s_(""), s_("1763078401"), s_("0"));
    assert_int_equal(sdefs_spend_answer(r, NULL, 1, 0, &u), SLUICE_EPARSE);
    r = a_(4, s_(""), s_("12 x 1"), s_("1763078401"), s_("0"));
    assert_int_equal(sdefs_spend_answer(r, NULL, 1, 0, &u), SLUICE_EPARSE);
    r = a_(4, s_(""), s_(""), s_("1763078401"), s_("1000000"));
    assert_int_equal(sdefs_spend_answer(r, NULL, 1, 0, &u), SLUICE_EPARSE);
    assert_int_equal(sdefs_spend_answer(node(REDIS_REPLY_ERROR), NULL, 1, 0, &u), SLUICE_EPARSE);
    assert_int_equal(u.budget, 0);

    snprintf(now_s, sizeof now_s, "%lld", (long long)(T0_NS + 5));
    snprintf(st, sizeof st, "{%lld,%lld,12}", (long long)T0_NS, (long long)(T0_NS + DAY_NS));
    p = pg_spend_row(st, NULL, now_s);
    assert_int_equal(sdefs_spend_answer(NULL, (const struct pg_result *)p, 20, SLUICE_CAL_DAY, &u),
                     SLUICE_OK);
    assert_int_equal(u.spent, 12);
    assert_int_equal(u.remaining, 8);
    PQclear(p);
    snprintf(clock, sizeof clock, "%lld", (long long)(T0_NS + DAY_NS));
    p = pg_spend_row(st, clock, now_s);
    assert_int_equal(sdefs_spend_answer(NULL, (const struct pg_result *)p, 20, SLUICE_CAL_DAY, &u),
                     SLUICE_OK);
    assert_int_equal(u.spent, 0);
    PQclear(p);
    p = pg_spend_row(NULL, NULL, now_s);
    assert_int_equal(sdefs_spend_answer(NULL, (const struct pg_result *)p, 20, SLUICE_CAL_DAY, &u),
                     SLUICE_OK);
    assert_int_equal(u.spent, 0);
    assert_int_equal(u.period_start_ns, T0_NS);
    PQclear(p);
    p = pg_spend_row("{1,2}", NULL, now_s);
    assert_int_equal(sdefs_spend_answer(NULL, (const struct pg_result *)p, 20, 0, &u),
                     SLUICE_EPARSE);
    PQclear(p);
    p = pg_spend_row(NULL, NULL, NULL);
    assert_int_equal(sdefs_spend_answer(NULL, (const struct pg_result *)p, 20, 0, &u),
                     SLUICE_EPARSE);
    PQclear(p);
    assert_int_equal(sdefs_spend_answer(NULL, NULL, 20, 0, &u), SLUICE_EPARSE);
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
        cmocka_unit_test(test_whole_reset),
        cmocka_unit_test(test_id_list),
        cmocka_unit_test(test_gen_reset),
        cmocka_unit_test(test_quota_usage),
        cmocka_unit_test(test_quota_usage_model),
        cmocka_unit_test(test_spend),
        cmocka_unit_test(test_version),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
