/* SPDX-License-Identifier: MIT */
/*
 * The encoder and decoder of the PostgreSQL limits function (src/store/pg_limits.c), without a
 * server: the exact parameters of a batch (array literals, quoting, hex keys and tags, the
 * hashing of long keys, definitions sent once), validation that leaves a batch unchanged,
 * results built by hand with libpq's PQmakeEmptyPGresult (every op, every status, the largest
 * numbers), malformed results refused with SLUICE_EPARSE and nothing half-read, out-of-memory
 * sweeps of building a batch, and the embedded migrations. The function's behaviour is tested
 * against the core by tests/tools/limits_diff.c (server_pg_limits).
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

#include "core/keyhash.h"
#include "sluice/error.h"
#include "sluice/limit.h"
#include "store/pg_limits.h"
#include "store/pg_schema.h"
#include "rlim_fixture.h"
#include "testutil.h"

/* A chain (rate + lease, a TTL), a renew, a settle on a quota, a peek repeating the rate. */
static pgl_batch *four_requests(void)
{
    pgl_batch *b;
    rlim_link chain[2] = {link_of(&rate_def, "api", "u1", 2), link_of(&lease_def, "conc", "u1", 1)};
    rlim_link q = link_of(&quota_def, "month", "", 7);
    rlim_args a = {0};

    assert_int_equal(pgl_batch_new(&b), SLUICE_OK);
    a.ttl_ns = 5 * SEC;
    assert_int_equal(pgl_batch_add(b, RLIM_DECIDE, chain, 2, &a), 0);
    memset(&a, 0, sizeof a);
    a.lease_id = UINT64_MAX;
    a.ttl_ns = SEC;
    assert_int_equal(pgl_batch_add(b, RLIM_LEASE_RENEW, &chain[1], 1, &a), 1);
    memset(&a, 0, sizeof a);
    a.charged_ns = INT64_MIN;
    a.estimate = 7;
    a.actual = 9;
    assert_int_equal(pgl_batch_add(b, RLIM_SETTLE, &q, 1, &a), 2);
    assert_int_equal(pgl_batch_add(b, RLIM_PEEK, chain, 1, NULL), 3);
    return b;
}

static void test_params_layout(void **state)
{
    pgl_batch *b = four_requests();
    const char *const *v;

    (void)state;
    assert_int_equal(pgl_batch_count(b), 4);
    assert_int_equal(pgl_batch_link_count(b, 0), 2);
    assert_int_equal(pgl_batch_link_count(b, 3), 1);
    assert_int_equal(pgl_batch_link_count(b, 4), 0);
    assert_int_equal(pgl_batch_params(b, &v), SLUICE_OK);
    assert_null(v[0]); /* the database's clock */
    assert_string_equal(v[1], "");
    /* (sluice_limit_def_init gives every kind the default lease TTL; only leases read it) */
    assert_string_equal(v[2], "{\"1 10 1000000000 5 1 30000000000 0\","
                              "\"4 3 0 0 0 30000000000 0\",\"5 1000 0 0 0 30000000000 2\"}");
    /* tags: the key "u1" (hex 7531), the limit id of the empty key ("month") */
    assert_string_equal(v[3], "{\"7531\",\"7531\",\"7531\",\"6d6f6e7468\",\"7531\"}");
    assert_string_equal(v[4], "{\"api\",\"conc\",\"conc\",\"month\",\"api\"}");
    assert_string_equal(v[5], "{\"7531\",\"7531\",\"7531\",\"\",\"7531\"}");
    assert_string_equal(v[6], "{\"D 2 5000000000 0 0 1 2 2 1\","
                              "\"N 1 18446744073709551615 1000000000 0 2 1\","
                              "\"S 1 -9223372036854775808 7 9 3 7\",\"P 1 0 0 0 1 2\"}");
    /* the time and the audit flag, kept by a reset */
    pgl_batch_set_now(b, INT64_C(1795526227131600000));
    pgl_batch_set_audit(b, 1);
    pgl_batch_reset(b);
    assert_int_equal(pgl_batch_count(b), 0);
    assert_int_equal(pgl_batch_params(b, &v), SLUICE_EINVAL);
    {
        rlim_link l = link_of(&rate_def, "api", "x", 1);

        assert_int_equal(pgl_batch_add(b, RLIM_DECIDE, &l, 1, NULL), 0);
    }
    assert_int_equal(pgl_batch_params(b, &v), SLUICE_OK);
    assert_string_equal(v[0], "1795526227131600000");
    assert_string_equal(v[1], "a");
    assert_string_equal(v[2], "{\"1 10 1000000000 5 1 30000000000 0\"}");
    assert_string_equal(v[6], "{\"D 1 0 0 0 1 1\"}");
    pgl_batch_set_now(b, 0);
    assert_int_equal(pgl_batch_params(b, &v), SLUICE_OK);
    assert_null(v[0]);
    pgl_batch_free(b);
}

static void test_quoting_and_long_keys(void **state)
{
    pgl_batch *b;
    sluice_limit_def d = rate_def;
    const char *const *v;
    const char key[] = {'a', '\0', '\xff', '"'};
    rlim_link l = link_of(&rate_def, "q\"uo\\te", "", 1);
    unsigned char dg[KEYHASH_LEN];
    char want[512], hex[2 * KEYHASH_LEN + 1], hexhex[4 * KEYHASH_LEN + 1];

    (void)state;
    assert_int_equal(pgl_batch_new(&b), SLUICE_OK);
    l.key = key;
    l.keylen = sizeof key;
    l.tag = "{t}";
    l.taglen = 3;
    assert_int_equal(pgl_batch_add(b, RLIM_DECIDE, &l, 1, NULL), 0);
    assert_int_equal(pgl_batch_params(b, &v), SLUICE_OK);
    /* a limit id's quote and backslash are escaped; a key's bytes travel as hex; a tag holding
     * braces becomes the hex of its digest (the same rule as on Redis), sent as hex again */
    assert_string_equal(v[4], "{\"q\\\"uo\\\\te\"}");
    assert_string_equal(v[5], "{\"6100ff22\"}");
    assert_int_equal(keyhash_digest("{t}", 3, dg), SLUICE_OK);
    for (size_t i = 0; i < KEYHASH_LEN; i++)
        snprintf(hex + 2 * i, 3, "%02x", dg[i]);
    for (size_t i = 0; i < 2 * KEYHASH_LEN; i++)
        snprintf(hexhex + 2 * i, 3, "%02x", (unsigned char)hex[i]);
    snprintf(want, sizeof want, "{\"%s\"}", hexhex);
    assert_string_equal(v[3], want);

    /* a key longer than max_key_len goes by its SHA-256, and (no tag given) so does its tag */
    pgl_batch_reset(b);
    d.max_key_len = 4;
    l = link_of(&d, "api", "a-long-key", 1);
    assert_int_equal(pgl_batch_add(b, RLIM_DECIDE, &l, 1, NULL), 0);
    assert_int_equal(pgl_batch_params(b, &v), SLUICE_OK);
    assert_int_equal(keyhash_digest("a-long-key", 10, dg), SLUICE_OK);
    for (size_t i = 0; i < KEYHASH_LEN; i++)
        snprintf(hex + 2 * i, 3, "%02x", dg[i]);
    snprintf(want, sizeof want, "{\"%s\"}", hex);
    assert_string_equal(v[5], want);
    for (size_t i = 0; i < 2 * KEYHASH_LEN; i++)
        snprintf(hexhex + 2 * i, 3, "%02x", (unsigned char)hex[i]);
    snprintf(want, sizeof want, "{\"%s\"}", hexhex);
    assert_string_equal(v[3], want);
    pgl_batch_free(b);
}

static void test_add_refused(void **state)
{
    pgl_batch *b = four_requests();
    const char *const *v;
    char before[PGL_CALL_NPARAMS][512];
    rlim_link l = link_of(&rate_def, "api", "k", 0);
    rlim_link lease = link_of(&lease_def, "conc", "k", 1);
    rlim_link two[2] = {lease, lease};
    sluice_limit_def adaptive = rate_def;
    rlim_args a = {0};

    (void)state;
    assert_int_equal(pgl_batch_params(b, &v), SLUICE_OK);
    for (int i = 1; i < PGL_CALL_NPARAMS; i++)
        snprintf(before[i], sizeof before[i], "%s", v[i]);
    assert_int_equal(pgl_batch_add(b, RLIM_DECIDE, &l, 1, NULL), SLUICE_EINVAL); /* 0 units */
    l.units = 1;
    assert_int_equal(pgl_batch_add(b, RLIM_LEASE_RENEW, &l, 1, &a), SLUICE_EINVAL);
    assert_int_equal(pgl_batch_add(b, RLIM_LEASE_RELEASE, two, 2, &a), SLUICE_EINVAL);
    assert_int_equal(pgl_batch_add(b, RLIM_SETTLE, &l, 1, NULL), SLUICE_EINVAL);
    assert_int_equal(pgl_batch_add(b, (rlim_op)0, &l, 1, NULL), SLUICE_EINVAL);
    assert_int_equal(pgl_batch_add(b, (rlim_op)7, &l, 1, NULL), SLUICE_EINVAL);
    assert_int_equal(pgl_batch_add(b, RLIM_DECIDE, &l, 0, NULL), SLUICE_EINVAL);
    assert_int_equal(pgl_batch_add(b, RLIM_DECIDE, NULL, 1, NULL), SLUICE_EINVAL);
    adaptive.decrease_den = 2; /* AIMD: not something the function knows */
    l.def = &adaptive;
    assert_int_equal(pgl_batch_add(b, RLIM_DECIDE, &l, 1, NULL), SLUICE_EINVAL);
    l.def = NULL;
    assert_int_equal(pgl_batch_add(b, RLIM_DECIDE, &l, 1, NULL), SLUICE_EINVAL);
    assert_int_equal(pgl_batch_count(b), 4);
    assert_int_equal(pgl_batch_params(b, &v), SLUICE_OK);
    for (int i = 1; i < PGL_CALL_NPARAMS; i++)
        assert_string_equal(v[i], before[i]);
    pgl_batch_free(b);
}

/* A result as libpq hands it over: one text column, one row per string (NULL: an SQL NULL). */
static PGresult *result_of(ExecStatusType st, size_t n, const char *const *rows)
{
    PGresult *r = PQmakeEmptyPGresult(NULL, st);
    PGresAttDesc col;

    assert_non_null(r);
    memset(&col, 0, sizeof col);
    col.name = (char *)"a";
    col.typid = 25; /* text */
    col.typlen = -1;
    col.atttypmod = -1;
    if (st != PGRES_TUPLES_OK)
        return r;
    assert_int_equal(PQsetResultAttrs(r, 1, &col), 1);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(
            PQsetvalue(r, (int)i, 0, (char *)rows[i], rows[i] ? (int)strlen(rows[i]) : -1), 1);
    return r;
}

static const char *const good_rows[4] = {
    "OK 1795526227131600000 0 1 9223372036854775807 1 5 4 0 200000000 0 0 3 3 "
    "9223372036854775807 30000000000 0",
    "OK 1795526227131600001 9223372036854775807",
    "STATE -9223372036854775808",
    "OK 1 1 0 0 1 5 3 0 1 18446744073709551615",
};

static void test_decode(void **state)
{
    pgl_batch *b = four_requests();
    PGresult *r = result_of(PGRES_TUPLES_OK, 4, good_rows);
    rlim_result res;
    sluice_decision d[2];

    (void)state;
    assert_int_equal(pgl_batch_result(b, r, 0, &res, d), SLUICE_OK);
    assert_chain_answer(&res, d);
    assert_int_equal(pgl_batch_result(b, r, 0, &res, NULL), SLUICE_OK);
    assert_int_equal(pgl_batch_result(b, r, 1, &res, NULL), SLUICE_OK);
    assert_int_equal(res.expires_ns, INT64_MAX);
    assert_int_equal(pgl_batch_result(b, r, 2, &res, NULL), SLUICE_OK);
    assert_int_equal(res.rc, SLUICE_ESTATE);
    assert_int_equal(res.now_ns, INT64_MIN);
    assert_int_equal(pgl_batch_result(b, r, 3, &res, d), SLUICE_OK);
    assert_true(d[0].lease_id == UINT64_MAX);
    assert_int_equal(pgl_batch_result(b, r, 4, &res, NULL), SLUICE_EINVAL);
    PQclear(r);
    {
        const char *const rows[4] = {"INVAL 5 bad link", "STALE 5 0", "INVAL 5 settle applies",
                                     "OK 5 1 0 0 1 5 4 0 1 0"};

        r = result_of(PGRES_TUPLES_OK, 4, rows);
        assert_int_equal(pgl_batch_result(b, r, 0, &res, d), SLUICE_OK);
        assert_int_equal(res.rc, SLUICE_EINVAL);
        assert_int_equal(pgl_batch_result(b, r, 1, &res, NULL), SLUICE_OK);
        assert_int_equal(res.rc, SLUICE_ESTALE);
        assert_int_equal(pgl_batch_result(b, r, 2, &res, NULL), SLUICE_OK);
        assert_int_equal(res.rc, SLUICE_EINVAL);
        PQclear(r);
    }
    pgl_batch_free(b);
}

/* Expects EPARSE for request 0 of this result, with the answer and decisions zeroed. */
static void expect_bad(pgl_batch *b, PGresult *r)
{
    rlim_result res;
    sluice_decision d[2];

    memset(d, 0x5a, sizeof d);
    assert_int_equal(pgl_batch_result(b, r, 0, &res, d), SLUICE_EPARSE);
    assert_int_equal(res.now_ns, 0);
    assert_int_equal(res.chain.allowed, 0);
    assert_int_equal(d[0].limit, 0);
    assert_int_equal(d[1].remaining, 0);
    PQclear(r);
}

static void test_malformed(void **state)
{
    pgl_batch *b = four_requests();
    const char *rows[4] = {good_rows[0], good_rows[1], good_rows[2], good_rows[3]};
    static const char *const bad0[] = {
        "OK 1795526227131600000 0 1 9223372036854775807 1 5 4 0 200000000 0 0 3 3",
        "OK 1795526227131600000 0 1 9223372036854775807 1 5 4 0 200000000 0 0 3 3 1 2 0 7",
        "OK 1795526227131600000 0 2 9223372036854775807 1 5 4 0 200000000 0 0 3 3 1 2 0",
        "OK 9223372036854775808 0 1 0 1 5 4 0 200000000 0 0 3 3 1 2 0",
        "OK 1e18 0 1 0 1 5 4 0 200000000 0 0 3 3 1 2 0",
        "YES 1 0 1 0 1 5 4 0 200000000 0 0 3 3 1 2 0",
        "STALE 1",
        "",
        "OK  1",
    };

    (void)state;
    for (size_t k = 0; k < sizeof bad0 / sizeof bad0[0]; k++) {
        rows[0] = bad0[k];
        expect_bad(b, result_of(PGRES_TUPLES_OK, 4, rows));
    }
    rows[0] = NULL; /* an SQL NULL */
    expect_bad(b, result_of(PGRES_TUPLES_OK, 4, rows));
    rows[0] = good_rows[0];
    expect_bad(b, result_of(PGRES_TUPLES_OK, 3, rows)); /* a row short */
    expect_bad(b, result_of(PGRES_FATAL_ERROR, 0, rows));
    expect_bad(b, NULL);
    pgl_batch_free(b);
}

static void test_migrations(void **state)
{
    size_t len = 0;
    const char *sql = pgs_migration(1, &len);

    (void)state;
    assert_non_null(sql);
    assert_int_equal(strlen(sql), len);
    assert_non_null(strstr(sql, "CREATE FUNCTION sluice_limits_call("));
    assert_non_null(strstr(sql, "CREATE TABLE sluice_limit_state"));
    assert_null(pgs_migration(0, &len));
    assert_null(pgs_migration(PGS_VERSION + 1, &len));
}

static int build_batch(void *arg)
{
    pgl_batch *b = NULL;
    const char *const *v;
    rlim_link chain[3] = {link_of(&rate_def, "api", "u1", 2), link_of(&lease_def, "conc", "u1", 1),
                          link_of(&quota_def, "m\"q", "a-key", 3)};
    int rc;

    (void)arg;
    rc = pgl_batch_new(&b);
    for (int i = 0; i < 40 && rc == SLUICE_OK; i++) {
        rc = pgl_batch_add(b, i % 2 ? RLIM_PEEK : RLIM_DECIDE, chain, 3, NULL);
        if (rc >= 0)
            rc = SLUICE_OK;
    }
    if (rc == SLUICE_OK)
        rc = pgl_batch_params(b, &v);
    pgl_batch_free(b);
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
        cmocka_unit_test(test_params_layout), cmocka_unit_test(test_quoting_and_long_keys),
        cmocka_unit_test(test_add_refused),   cmocka_unit_test(test_decode),
        cmocka_unit_test(test_malformed),     cmocka_unit_test(test_migrations),
        cmocka_unit_test(test_oom),
    };

    return cmocka_run_group_tests(tests, setup, NULL);
}
