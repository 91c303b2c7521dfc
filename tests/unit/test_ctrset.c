/* SPDX-License-Identifier: MIT */
/*
 * Tests of the counters summed across nodes, their bookkeeping (server/ctrset.h): counting,
 * flushes confirmed, flushes whose answer was lost (sent again, unchanged, under the same
 * number), a store that lost its totals (shown values never fall), the PostgreSQL array
 * literals and the parsing of totals. A property test runs three nodes against a model of the
 * store (totals plus each node's last applied number, as counters.lua and 004_counters.sql keep
 * them) through random counts, flushes, lost answers and store resets, and checks after every
 * step that nothing is lost or counted twice and that no node's shown figure ever decreases.
 * An out-of-memory sweep covers counting and reading totals.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/alloc.h"
#include "server/ctrset.h"
#include "server/rcounters.h"
#include "store/pg_schema.h"
#include "sluice/error.h"
#include "testutil.h"

static uint64_t cluster_of(const ctrset *s, const char *code, const char *name)
{
    const ctr *c = ctrset_find(s, code, name, strlen(name));

    return c ? ctr_cluster(c) : 0;
}

static uint64_t node_of(const ctrset *s, const char *code, const char *name)
{
    const ctr *c = ctrset_find(s, code, name, strlen(name));

    return c ? c->node : 0;
}

static void test_count_and_find(void **state)
{
    ctrset s;

    (void)state;
    ctrset_init(&s);
    assert_null(ctrset_find(&s, "la", "api", 3));
    assert_int_equal(ctrset_add(&s, "la", "api", 3, 2), 0);
    assert_int_equal(ctrset_add(&s, "la", "api", 3, 3), 0);
    assert_int_equal(ctrset_add(&s, "ld", "api", 3, 1), 0);
    assert_int_equal(ctrset_add(&s, "ts", "", 0, 7), 0);
    assert_int_equal(node_of(&s, "la", "api"), 5);
    assert_int_equal(cluster_of(&s, "la", "api"), 5);
    assert_int_equal(node_of(&s, "ld", "api"), 1);
    assert_int_equal(node_of(&s, "ts", ""), 7);
    /* "la:api" and "l:aapi" are different names: the code and the name are separated. */
    assert_null(ctrset_find(&s, "l", "aapi", 4));
    assert_string_equal(ctrset_find(&s, "ts", "", 0)->name, "ts:");
    assert_int_equal(ctrset_unconfirmed(&s), 13);
    /* A name past the maximum is refused, not cut. */
    {
        char big[CTRSET_NAME_MAX];

        memset(big, 'x', sizeof big);
        assert_int_equal(ctrset_add(&s, "la", big, sizeof big, 1), SLUICE_EINVAL);
        assert_int_equal(ctrset_add(&s, "l", big, CTRSET_NAME_MAX - 2, 1), 0);
    }
    ctrset_free(&s);
}

static void test_flush_confirmed(void **state)
{
    ctrset s;
    const ctr *c;

    (void)state;
    ctrset_init(&s);
    ctrset_add(&s, "la", "api", 3, 4);
    assert_int_equal(ctrset_begin(&s), 1);
    assert_int_equal(s.seq, 1);
    assert_true(s.busy);
    c = ctrset_find(&s, "la", "api", 3);
    assert_int_equal(c->inflight, 4);
    assert_int_equal(c->pending, 0);
    /* Counted while the flush is in flight: pending, shown at once. */
    ctrset_add(&s, "la", "api", 3, 1);
    assert_int_equal(ctr_cluster(c), 5);
    /* The store holds 4 of ours plus 10 of another node's; it names another node's counter. */
    assert_int_equal(ctrset_total(&s, "la:api", 6, 14), 0);
    assert_int_equal(ctrset_total(&s, "td:", 3, 9), 0);
    ctrset_confirm(&s);
    assert_false(s.busy);
    assert_int_equal(c->inflight, 0);
    assert_int_equal(c->store, 14);
    assert_int_equal(c->offset, 0);
    assert_int_equal(ctr_cluster(c), 15);
    assert_int_equal(c->node, 5);
    assert_int_equal(cluster_of(&s, "td", ""), 9);
    assert_int_equal(node_of(&s, "td", ""), 0);
    assert_int_equal(ctrset_unconfirmed(&s), 1);
    /* An empty flush still reads the totals. */
    assert_int_equal(ctrset_begin(&s), 1);
    ctrset_total(&s, "la:api", 6, 15);
    ctrset_total(&s, "td:", 3, 9);
    ctrset_confirm(&s);
    assert_int_equal(ctrset_begin(&s), 0);
    assert_int_equal(s.seq, 3);
    ctrset_total(&s, "la:api", 6, 20);
    ctrset_total(&s, "td:", 3, 9);
    ctrset_confirm(&s);
    assert_int_equal(ctr_cluster(c), 20);
    ctrset_free(&s);
}

static void test_lost_answer_resends_the_same(void **state)
{
    ctrset s;
    const ctr *c;

    (void)state;
    ctrset_init(&s);
    ctrset_add(&s, "la", "api", 3, 4);
    ctrset_begin(&s);
    c = ctrset_find(&s, "la", "api", 3);
    /* No answer: the flush stays in flight; later counts wait for the flush after. */
    ctrset_add(&s, "la", "api", 3, 2);
    assert_int_equal(ctrset_begin(&s), 1);
    assert_int_equal(s.seq, 1);
    assert_int_equal(c->inflight, 4);
    assert_int_equal(c->pending, 2);
    assert_int_equal(ctr_cluster(c), 6);
    /* A malformed answer is forgotten, the flush stays in flight. */
    ctrset_total(&s, "la:api", 6, 999);
    ctrset_unread(&s);
    assert_true(s.busy);
    assert_int_equal(ctrset_begin(&s), 1);
    assert_int_equal(s.seq, 1);
    /* The store had applied it the first time: the total holds it once. */
    ctrset_total(&s, "la:api", 6, 4);
    ctrset_confirm(&s);
    assert_int_equal(ctr_cluster(c), 6);
    assert_int_equal(c->offset, 0);
    assert_int_equal(ctrset_begin(&s), 1);
    assert_int_equal(s.seq, 2);
    assert_int_equal(c->inflight, 2);
    ctrset_free(&s);
}

static void test_store_reset_stays_monotonic(void **state)
{
    ctrset s;
    const ctr *c;

    (void)state;
    ctrset_init(&s);
    ctrset_add(&s, "la", "api", 3, 5);
    ctrset_begin(&s);
    ctrset_total(&s, "la:api", 6, 50);
    ctrset_confirm(&s);
    c = ctrset_find(&s, "la", "api", 3);
    assert_int_equal(ctr_cluster(c), 50);
    /* The store restarted empty: our next flush of 2 is all it has. */
    ctrset_add(&s, "la", "api", 3, 2);
    ctrset_begin(&s);
    ctrset_total(&s, "la:api", 6, 2);
    ctrset_confirm(&s);
    assert_int_equal(c->offset, 50);
    assert_int_equal(ctr_cluster(c), 52);
    /* A counter the answer does not name at all was lost too. */
    ctrset_begin(&s);
    ctrset_confirm(&s);
    assert_int_equal(ctr_cluster(c), 52);
    assert_int_equal(c->store, 0);
    ctrset_free(&s);
}

/* ---- Property: three nodes and a model of the store -------------------------------------- */

#define NODES 3
#define NAMES 4

typedef struct model_store {
    uint64_t total[NAMES];
    uint64_t last_seq[NODES];
    uint64_t applied[NAMES]; /* every delta applied since the last reset (the truth) */
} model_store;

static const char *const names[NAMES] = {"la:a", "ld:a", "ts:", "tv:call"};

/* A flush of node i reaching the store: applied when its number is new (counters.lua). */
static void store_apply(model_store *m, int i, const ctrset *s)
{
    if (s->seq <= m->last_seq[i])
        return;
    m->last_seq[i] = s->seq;
    for (size_t k = 0; k < s->n; k++) {
        for (int j = 0; j < NAMES; j++) {
            if (strcmp(s->v[k]->name, names[j]) == 0) {
                m->total[j] += s->v[k]->inflight;
                m->applied[j] += s->v[k]->inflight;
            }
        }
    }
}

/* Node i flushes and the store answers (applied when its number is new). */
static void flush_answered(model_store *m, ctrset *set, int i)
{
    ctrset_begin(&set[i]);
    store_apply(m, i, &set[i]);
    for (int j = 0; j < NAMES; j++)
        if (m->total[j] > 0)
            ctrset_total(&set[i], names[j], strlen(names[j]), m->total[j]);
    ctrset_confirm(&set[i]);
}

/* The counter of full name `name` in a set, or NULL. */
static const ctr *by_name(const ctrset *s, const char *name)
{
    for (size_t k = 0; k < s->n; k++)
        if (strcmp(s->v[k]->name, name) == 0)
            return s->v[k];
    return NULL;
}

/* After every step: no node's shown figure decreased, and the store never holds more than the
 * nodes counted (nothing applied twice). */
static void check_step(const model_store *m, const ctrset *set, uint64_t shown[NODES][NAMES],
                       const uint64_t *counted)
{
    for (int n = 0; n < NODES; n++) {
        uint64_t unconfirmed = 0;

        for (int j = 0; j < NAMES; j++) {
            const ctr *c = by_name(&set[n], names[j]);
            uint64_t v = c ? ctr_cluster(c) : 0;

            if (c)
                unconfirmed += c->pending + c->inflight;
            assert_true(v >= shown[n][j]);
            shown[n][j] = v;
        }
        assert_int_equal(unconfirmed, ctrset_unconfirmed(&set[n]));
    }
    for (int j = 0; j < NAMES; j++)
        assert_true(m->applied[j] <= counted[j]);
}

static void test_property_nodes(void **state)
{
    test_rng r;

    (void)state;
    for (uint64_t seed = 1; seed <= 40; seed++) {
        ctrset set[NODES];
        model_store m;
        uint64_t shown[NODES][NAMES], counted[NAMES];
        int resets = 0;

        memset(&m, 0, sizeof m);
        memset(shown, 0, sizeof shown);
        memset(counted, 0, sizeof counted);
        rng_seed(&r, seed);
        for (int i = 0; i < NODES; i++)
            ctrset_init(&set[i]);
        for (int step = 0; step < 3000; step++) {
            int i = (int)rng_range(&r, 0, NODES - 1);
            int64_t what = rng_range(&r, 0, 99);

            if (what < 50) {
                int j = (int)rng_range(&r, 0, NAMES - 1);
                uint64_t d = (uint64_t)rng_range(&r, 1, 5);
                const char *colon = strchr(names[j], ':');
                char code[8];

                memcpy(code, names[j], (size_t)(colon - names[j]));
                code[colon - names[j]] = '\0';
                assert_int_equal(ctrset_add(&set[i], code, colon + 1, strlen(colon + 1), d), 0);
                counted[j] += d;
            } else if (what < 98) {
                /* A flush: lost before the store (the store down), applied with its answer
                 * lost, or applied and answered (an answer may omit a counter never written,
                 * as HGETALL does). */
                int64_t fate = rng_range(&r, 0, 9);

                ctrset_begin(&set[i]);
                if (fate >= 3)
                    store_apply(&m, i, &set[i]);
                if (fate >= 5) {
                    for (int j = 0; j < NAMES; j++)
                        if (m.total[j] > 0 || rng_range(&r, 0, 1))
                            ctrset_total(&set[i], names[j], strlen(names[j]), m.total[j]);
                    ctrset_confirm(&set[i]);
                }
            } else if (seed % 2 == 0 && resets < 2) {
                /* Even seeds: the store restarts empty (no persistence), totals and numbers
                 * gone. Odd seeds keep it, for the exact checks at the end. */
                memset(&m, 0, sizeof m);
                resets++;
            }
            check_step(&m, set, shown, counted);
        }
        /* The store comes back for good: every node's flush in flight and its counts get
         * through (two flushes each), then every node reads the totals once more. */
        for (int round = 0; round < 3; round++)
            for (int i = 0; i < NODES; i++) {
                flush_answered(&m, set, i);
                check_step(&m, set, shown, counted);
            }
        for (int j = 0; j < NAMES; j++) {
            uint64_t since = 0;

            assert_int_equal(m.total[j], m.applied[j]);
            for (int n = 0; n < NODES; n++) {
                const ctr *c = by_name(&set[n], names[j]);

                if (!c)
                    continue;
                assert_int_equal(c->pending + c->inflight, 0);
                since += c->node;
            }
            /* Every count is in some node's own figure... */
            assert_int_equal(since, counted[j]);
            /* ... and, the store never reset, in the store exactly once, as every node shows. */
            if (resets == 0) {
                assert_int_equal(m.total[j], counted[j]);
                for (int n = 0; n < NODES; n++)
                    assert_int_equal(shown[n][j], counted[j]);
            }
        }
        for (int i = 0; i < NODES; i++)
            ctrset_free(&set[i]);
    }
}

/* ---- Encoders ---------------------------------------------------------------------------- */

static void test_pg_arrays(void **state)
{
    ctrset s;
    char *buf = NULL;
    size_t cap = 0, names_off = 0, deltas_off = 0;

    (void)state;
    ctrset_init(&s);
    ctrset_add(&s, "la", "a\"b\\c", 5, 3);
    ctrset_add(&s, "ld", "quiet", 5, 1);
    ctrset_add(&s, "ts", "", 0, 12345678901234ULL);
    ctrset_begin(&s);
    ctrset_total(&s, "ld:quiet", 8, 1);
    ctrset_total(&s, "la:a\"b\\c", 8, 3);
    ctrset_total(&s, "ts:", 3, 12345678901234ULL);
    ctrset_confirm(&s);
    ctrset_add(&s, "la", "a\"b\\c", 5, 3);
    ctrset_add(&s, "ts", "", 0, 12345678901234ULL);
    ctrset_begin(&s); /* ld:quiet has no delta: left out */
    assert_int_equal(ctrset_pg_arrays(&s, &buf, &cap, &names_off, &deltas_off), 0);
    assert_string_equal(buf + names_off, "{\"la:a\\\"b\\\\c\",\"ts:\"}");
    assert_string_equal(buf + deltas_off, "{3,12345678901234}");
    ctrset_confirm(&s);
    /* Nothing to send: two empty arrays. */
    ctrset_begin(&s);
    assert_int_equal(ctrset_pg_arrays(&s, &buf, &cap, &names_off, &deltas_off), 0);
    assert_string_equal(buf + names_off, "{}");
    assert_string_equal(buf + deltas_off, "{}");
    alloc_free(buf);
    ctrset_free(&s);
}

static void test_parse_u64(void **state)
{
    uint64_t v = 1;

    (void)state;
    assert_int_equal(ctrset_parse_u64("0", 1, &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(ctrset_parse_u64("18446744073709551615", 20, &v), 0);
    assert_true(v == UINT64_MAX);
    assert_int_equal(ctrset_parse_u64("18446744073709551616", 20, &v), -1);
    assert_int_equal(v, 0);
    assert_int_equal(ctrset_parse_u64("-1", 2, &v), -1);
    assert_int_equal(ctrset_parse_u64("", 0, &v), -1);
    assert_int_equal(ctrset_parse_u64("12x", 3, &v), -1);
    assert_int_equal(ctrset_parse_u64("1e5", 3, &v), -1);
    assert_int_equal(ctrset_parse_u64("123456", 3, &v), 0);
    assert_int_equal(v, 123);
}

/* The PostgreSQL migration and the statement rcounters.c prepares agree on the function. */
static void test_pg_migration(void **state)
{
    size_t len = 0;
    const char *sql = pgs_migration(4, &len);

    (void)state;
    assert_true(PGS_VERSION >= 4);
    assert_non_null(sql);
    assert_int_equal(strlen(sql), len);
    assert_non_null(strstr(sql, "CREATE FUNCTION sluice_counters_call(p_node text, p_seq bigint, "
                                "p_names text[], p_deltas bigint[])"));
    assert_non_null(strstr(sql, "RETURNS TABLE (c_name text, c_n bigint)"));
    assert_non_null(strstr(RCOUNTERS_PG_SQL, "sluice_counters_call($1, $2::bigint, $3::text[], "
                                             "$4::bigint[])"));
    assert_int_equal(RCOUNTERS_PG_NPARAMS, 4);
}

/* ---- Out of memory ----------------------------------------------------------------------- */

static int oom_body(void *arg)
{
    ctrset s;
    char *buf = NULL;
    size_t cap = 0, a = 0, b = 0;
    int rc;

    (void)arg;
    ctrset_init(&s);
    rc = ctrset_add(&s, "la", "api", 3, 1);
    if (rc == 0)
        rc = ctrset_add(&s, "ld", "api", 3, 1);
    if (rc == 0) {
        ctrset_begin(&s);
        rc = ctrset_total(&s, "tv:call", 7, 5);
    }
    if (rc == 0)
        rc = ctrset_pg_arrays(&s, &buf, &cap, &a, &b);
    if (rc != 0) {
        /* Whatever failed changed nothing that was there. */
        assert_true(s.dropped <= 1);
    }
    alloc_free(buf);
    ctrset_free(&s);
    return rc;
}

static void test_oom(void **state)
{
    (void)state;
    assert_true(oom_sweep(oom_body, NULL, 1000) > 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_count_and_find),
        cmocka_unit_test(test_flush_confirmed),
        cmocka_unit_test(test_lost_answer_resends_the_same),
        cmocka_unit_test(test_store_reset_stays_monotonic),
        cmocka_unit_test(test_property_nodes),
        cmocka_unit_test(test_pg_arrays),
        cmocka_unit_test(test_parse_u64),
        cmocka_unit_test(test_pg_migration),
        cmocka_unit_test(test_oom),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
