/* SPDX-License-Identifier: MIT */
/*
 * Tests of the change set (src/engine/changeset.c), the container behind the engine's change
 * feed (whose contract test_persist_feed.c tests), and of the engine's limit ids
 * (src/engine/persist_limits.c) that name its key states.
 *
 * The change set: each part dedups and keeps the latest value; a purge drops the key states
 * recorded for the purged limit and its tiers but not for a limit whose name merely starts the
 * same, and queues every id known to have rows; clear keeps the known ids. A property test runs
 * random operations against a tiny reference model and compares every walk with it. An
 * out-of-memory sweep checks that every failing call returns SLUICE_ENOMEM and leaks nothing.
 *
 * The limit ids: a plain limit is named by its name, each tier of a tiered one "name/tier";
 * lookups by id find the same core limit the walk gave, and refuse unknown names and tiers;
 * reserving ids moves the next id issued.
 */
#include "engine_fixture.h"

#include "engine/changeset.h"
#include "testutil.h"

/* ---- Helpers ----------------------------------------------------------------------------- */

static size_t count_tasks(const changeset *d)
{
    size_t pos = 0, n = 0;
    uint64_t id;

    while (changeset_next_task(d, &pos, &id))
        n++;
    return n;
}

static int has_task(const changeset *d, uint64_t want)
{
    size_t pos = 0;
    uint64_t id;

    while (changeset_next_task(d, &pos, &id))
        if (id == want)
            return 1;
    return 0;
}

/* The state recorded for (id, key): 1 and *state/len, or 0 when none. */
static int find_key(const changeset *d, const char *lid, const char *key, const void **state,
                    size_t *len)
{
    size_t pos = 0, keylen;
    const char *i, *k;

    while (changeset_next_key(d, &pos, &i, &k, &keylen, state, len))
        if (strcmp(i, lid) == 0 && keylen == strlen(key) && memcmp(k, key, keylen) == 0)
            return 1;
    return 0;
}

static int has_purge(const changeset *d, const char *want)
{
    size_t pos = 0;
    const char *id;

    while (changeset_next_purge(d, &pos, &id))
        if (strcmp(id, want) == 0)
            return 1;
    return 0;
}

/* ---- The changeset set ----------------------------------------------------------------------- */

static void test_tasks_and_series(void **unused)
{
    changeset *d = NULL;
    sluice_changes_counts dc;
    size_t pos = 0;
    const char *name;

    (void)unused;
    assert_int_equal(changeset_new(&d), SLUICE_OK);
    assert_true(changeset_is_empty(d));
    assert_false(changeset_has_changes(d));
    for (uint64_t id = 1; id <= 1000; id++) {
        assert_int_equal(changeset_add_task(d, id), SLUICE_OK);
        assert_int_equal(changeset_add_task(d, id), SLUICE_OK); /* the same turn reports it again */
    }
    assert_int_equal(changeset_add_task(d, 0), SLUICE_EINVAL);
    assert_int_equal(count_tasks(d), 1000);
    assert_true(has_task(d, 1) && has_task(d, 777) && has_task(d, 1000));
    assert_false(has_task(d, 1001));
    assert_int_equal(changeset_add_series(d, "nightly"), SLUICE_OK);
    assert_int_equal(changeset_add_series(d, "nightly"), SLUICE_OK);
    assert_int_equal(changeset_next_series(d, &pos, &name), 1);
    assert_string_equal(name, "nightly");
    assert_int_equal(changeset_next_series(d, &pos, &name), 0);
    changeset_get_counts(d, &dc);
    assert_int_equal(dc.tasks, 1000);
    assert_int_equal(dc.series, 1);
    assert_true(changeset_has_changes(d));
    changeset_clear(d);
    assert_true(changeset_is_empty(d));
    assert_int_equal(count_tasks(d), 0);
    assert_int_equal(changeset_add_task(d, 5), SLUICE_OK); /* usable after a clear */
    assert_int_equal(count_tasks(d), 1);
    changeset_free(d);
    changeset_free(NULL);
}

static void test_limits_latest_wins(void **unused)
{
    changeset *d = NULL;
    size_t pos = 0;
    const char *name, *spec;
    sluice_limit_def_op op;

    (void)unused;
    assert_int_equal(changeset_new(&d), SLUICE_OK);
    assert_int_equal(changeset_set_limit(d, "api", SLUICE_LIMIT_DEF_SET, "rate=1/1s"), SLUICE_OK);
    assert_int_equal(changeset_set_limit(d, "api", SLUICE_LIMIT_DEF_SET, "rate=2/1s"), SLUICE_OK);
    assert_int_equal(changeset_set_limit(d, "old", SLUICE_LIMIT_DEF_SET, "rate=3/1s"), SLUICE_OK);
    assert_int_equal(changeset_set_limit(d, "old", SLUICE_LIMIT_DEF_GONE, NULL), SLUICE_OK);
    assert_int_equal(changeset_next_limit(d, &pos, &name, &op, &spec), 1);
    assert_string_equal(name, "api");
    assert_int_equal(op, SLUICE_LIMIT_DEF_SET);
    assert_string_equal(spec, "rate=2/1s");
    assert_int_equal(changeset_next_limit(d, &pos, &name, &op, &spec), 1);
    assert_string_equal(name, "old");
    assert_int_equal(op, SLUICE_LIMIT_DEF_GONE);
    assert_null(spec);
    assert_int_equal(changeset_next_limit(d, &pos, &name, &op, &spec), 0);
    assert_true(changeset_has_changes(d));
    changeset_free(d);
}

static void test_keys_and_purges(void **unused)
{
    changeset *d = NULL;
    const void *state;
    size_t len;
    sluice_changes_counts dc;

    (void)unused;
    assert_int_equal(changeset_new(&d), SLUICE_OK);
    assert_int_equal(changeset_put_key(d, "api", "k1", 2, "AAAA", 4), SLUICE_OK);
    assert_int_equal(changeset_put_key(d, "api", "k1", 2, "BB", 2), SLUICE_OK); /* latest wins */
    assert_int_equal(changeset_put_key(d, "api", "k2", 2, NULL, 0), SLUICE_OK); /* a deletion */
    assert_int_equal(changeset_put_key(d, "api2", "k1", 2, "CC", 2), SLUICE_OK);
    assert_int_equal(changeset_put_key(d, "plan/free", "u\0x", 3, "DD", 2), SLUICE_OK);
    assert_false(changeset_has_changes(d)); /* key states alone: the timer's business */
    assert_false(changeset_is_empty(d));
    assert_true(find_key(d, "api", "k1", &state, &len));
    assert_int_equal(len, 2);
    assert_memory_equal(state, "BB", 2);
    assert_true(find_key(d, "api", "k2", &state, &len));
    assert_null(state);
    assert_int_equal(len, 0);

    /* Purging "api" drops its keys, not those of "api2". */
    assert_int_equal(changeset_purge_limit(d, "api"), SLUICE_OK);
    assert_false(find_key(d, "api", "k1", &state, &len));
    assert_false(find_key(d, "api", "k2", &state, &len));
    assert_true(find_key(d, "api2", "k1", &state, &len));
    assert_true(has_purge(d, "api"));
    assert_false(has_purge(d, "api2"));
    assert_true(changeset_has_changes(d));

    /* A tiered limit: its tiers' ids are purged with it, once known. */
    assert_int_equal(changeset_note_stored(d, "plan/pro"), SLUICE_OK);
    assert_int_equal(changeset_purge_limit(d, "plan"), SLUICE_OK);
    assert_true(has_purge(d, "plan"));
    assert_true(has_purge(d, "plan/free"));
    assert_true(has_purge(d, "plan/pro"));
    assert_false(find_key(d, "plan/free", "u\0x", &state, &len));

    /* A key recorded after the purge (the new limit's) is written after it: it stays. */
    assert_int_equal(changeset_put_key(d, "api", "k3", 2, "EE", 2), SLUICE_OK);
    assert_true(find_key(d, "api", "k3", &state, &len));
    changeset_get_counts(d, &dc);
    assert_int_equal(dc.keys, 2); /* api2/k1 and api/k3 */

    /* A clear forgets the changes, not which ids have rows. */
    changeset_clear(d);
    assert_true(changeset_is_empty(d));
    assert_int_equal(changeset_purge_limit(d, "api"), SLUICE_OK);
    assert_true(has_purge(d, "api"));
    assert_int_equal(changeset_purge_limit(d, "api2"), SLUICE_OK);
    assert_true(has_purge(d, "api2"));
    /* Forgotten by the purges: purging again queues only the names themselves. */
    changeset_clear(d);
    assert_int_equal(changeset_purge_limit(d, "plan"), SLUICE_OK);
    assert_true(has_purge(d, "plan"));
    assert_false(has_purge(d, "plan/pro"));
    changeset_free(d);
}

/* A key put again after its purge in the same set: revived, with the new state only. */
static void test_key_revived(void **unused)
{
    changeset *d = NULL;
    const void *state;
    size_t len;

    (void)unused;
    assert_int_equal(changeset_new(&d), SLUICE_OK);
    assert_int_equal(changeset_put_key(d, "a", "k", 1, "old", 3), SLUICE_OK);
    assert_int_equal(changeset_purge_limit(d, "a"), SLUICE_OK);
    assert_int_equal(changeset_put_key(d, "a", "k", 1, "new!", 4), SLUICE_OK);
    assert_true(find_key(d, "a", "k", &state, &len));
    assert_int_equal(len, 4);
    assert_memory_equal(state, "new!", 4);
    changeset_free(d);
}

/* ---- Property: random operations against a reference model -------------------------------- */

#define MODEL_IDS  64
#define MODEL_LIMS 4
#define MODEL_KEYS 8

typedef struct model {
    int task[MODEL_IDS + 1];
    int key[MODEL_LIMS][MODEL_KEYS]; /* 0 none, -1 deletion, v > 0 state byte v */
    int purged[MODEL_LIMS];
} model;

static const char *const lim_ids[MODEL_LIMS] = {"a", "a/t", "ab", "b"};

static void test_property(void **unused)
{
    test_rng rng;

    (void)unused;
    rng_seed(&rng, 20251114);
    for (int round = 0; round < 200; round++) {
        changeset *d = NULL;
        model m;

        memset(&m, 0, sizeof m);
        assert_int_equal(changeset_new(&d), SLUICE_OK);
        for (int step = 0; step < 300; step++) {
            int op = (int)rng_range(&rng, 0, 9);

            if (op < 4) {
                uint64_t id = (uint64_t)rng_range(&rng, 1, MODEL_IDS);

                assert_int_equal(changeset_add_task(d, id), SLUICE_OK);
                m.task[id] = 1;
            } else if (op < 8) {
                int l = (int)rng_range(&rng, 0, MODEL_LIMS - 1);
                int k = (int)rng_range(&rng, 0, MODEL_KEYS - 1);
                int v = (int)rng_range(&rng, -1, 50);
                char key[8], st = (char)v;

                snprintf(key, sizeof key, "k%d", k);
                if (v <= 0)
                    v = -1;
                assert_int_equal(changeset_put_key(d, lim_ids[l], key, strlen(key),
                                                   v > 0 ? &st : NULL, v > 0 ? 1 : 0),
                                 SLUICE_OK);
                m.key[l][k] = v;
            } else if (op == 8) {
                /* Purge limit "a" (ids "a" and "a/t") or "b"; "ab" only by its own name. */
                int which = (int)rng_range(&rng, 0, 2);
                const char *name = which == 0 ? "a" : which == 1 ? "b" : "ab";

                assert_int_equal(changeset_purge_limit(d, name), SLUICE_OK);
                for (int l = 0; l < MODEL_LIMS; l++) {
                    int match = strcmp(lim_ids[l], name) == 0 ||
                                (strncmp(lim_ids[l], name, strlen(name)) == 0 &&
                                 lim_ids[l][strlen(name)] == '/');

                    if (match)
                        for (int k = 0; k < MODEL_KEYS; k++)
                            m.key[l][k] = 0;
                }
            } else {
                changeset_clear(d);
                memset(m.task, 0, sizeof m.task);
                memset(m.key, 0, sizeof m.key);
            }
            /* Compare every walk with the model. */
            size_t n = 0;
            for (uint64_t id = 1; id <= MODEL_IDS; id++) {
                assert_int_equal(has_task(d, id), m.task[id]);
                n += (size_t)m.task[id];
            }
            assert_int_equal(count_tasks(d), n);
            n = 0;
            for (int l = 0; l < MODEL_LIMS; l++)
                for (int k = 0; k < MODEL_KEYS; k++) {
                    char key[8];
                    const void *state;
                    size_t len;
                    int found;

                    snprintf(key, sizeof key, "k%d", k);
                    found = find_key(d, lim_ids[l], key, &state, &len);
                    assert_int_equal(found, m.key[l][k] != 0);
                    if (m.key[l][k] > 0) {
                        assert_int_equal(len, 1);
                        assert_int_equal(*(const char *)state, (char)m.key[l][k]);
                    } else if (m.key[l][k] < 0) {
                        assert_null(state);
                    }
                    n += m.key[l][k] != 0;
                }
            sluice_changes_counts dc;
            changeset_get_counts(d, &dc);
            assert_int_equal(dc.keys, n);
        }
        changeset_free(d);
    }
}

/* ---- Out of memory ----------------------------------------------------------------------- */

static int oom_body(void *arg)
{
    changeset *d = NULL;
    int rc;

    (void)arg;
    rc = changeset_new(&d);
    if (rc != SLUICE_OK)
        return rc;
    for (uint64_t id = 1; id <= 100 && rc == SLUICE_OK; id++)
        rc = changeset_add_task(d, id);
    if (rc == SLUICE_OK)
        rc = changeset_add_series(d, "s");
    if (rc == SLUICE_OK)
        rc = changeset_set_limit(d, "api", SLUICE_LIMIT_DEF_SET, "rate=1/1s");
    for (int i = 0; i < 50 && rc == SLUICE_OK; i++) {
        char key[16];

        snprintf(key, sizeof key, "key-%d", i);
        rc = changeset_put_key(d, i % 2 ? "api" : "plan/pro", key, strlen(key), "xyz", 3);
    }
    if (rc == SLUICE_OK)
        rc = changeset_purge_limit(d, "plan");
    if (rc == SLUICE_OK)
        changeset_clear(d);
    if (rc == SLUICE_OK)
        rc = changeset_add_task(d, 7);
    changeset_free(d);
    return rc;
}

static void test_oom(void **unused)
{
    (void)unused;
    oom_sweep(oom_body, NULL, 2000);
}

/* ---- The engine's limit ids --------------------------------------------------------------- */

typedef struct seen_ids {
    char ids[8][64];
    sluice_limit *lims[8];
    size_t n;
} seen_ids;

static int collect(const char *id, sluice_limit *lim, void *arg)
{
    seen_ids *s = arg;

    assert_true(s->n < 8);
    snprintf(s->ids[s->n], sizeof s->ids[0], "%s", id);
    s->lims[s->n++] = lim;
    return 0;
}

static int stop_at_two(const char *id, sluice_limit *lim, void *arg)
{
    int *n = arg;

    (void)id;
    (void)lim;
    return ++*n == 2 ? 42 : 0;
}

static void test_limit_ids(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    sluice_limit_policy p;
    sluice_tier tiers[2];
    seen_ids s = {0};
    int n = 0;

    (void)unused;
    fx_rate(e, "zeta", 10, SEC, 0, NULL);
    memset(tiers, 0, sizeof tiers);
    tiers[0].name = "free";
    tiers[0].equals = "free";
    sluice_limit_def_init(&tiers[0].def, SLUICE_RATE);
    tiers[0].def.limit = 1;
    tiers[0].def.period_ns = MIN;
    tiers[1] = tiers[0];
    tiers[1].name = "pro";
    tiers[1].equals = "pro";
    tiers[1].def.limit = 100;
    fx_limit(&p, "plan", SLUICE_RATE, 1, MIN);
    p.tier_path = "plan";
    p.tiers = tiers;
    p.ntiers = 2;
    fx_set_limit(e, &p);

    assert_int_equal(sluice_engine_visit_limits(e, collect, &s), 0);
    assert_int_equal(s.n, 3);
    assert_string_equal(s.ids[0], "plan/free"); /* name order, then tier order */
    assert_string_equal(s.ids[1], "plan/pro");
    assert_string_equal(s.ids[2], "zeta");
    for (size_t i = 0; i < s.n; i++)
        assert_ptr_equal(sluice_engine_limit_by_id(e, s.ids[i]), s.lims[i]);
    assert_int_equal(sluice_limit_get_def(s.lims[1])->limit, 100);
    assert_null(sluice_engine_limit_by_id(e, "plan"));      /* tiered: only by tier */
    assert_null(sluice_engine_limit_by_id(e, "plan/gold")); /* no such tier */
    assert_null(sluice_engine_limit_by_id(e, "zeta/free")); /* not tiered */
    assert_null(sluice_engine_limit_by_id(e, "nope"));
    assert_null(sluice_engine_limit_by_id(e, ""));
    assert_null(sluice_engine_limit_by_id(e, NULL));
    assert_int_equal(sluice_engine_visit_limits(e, stop_at_two, &n), 42);
    assert_int_equal(n, 2);
    sluice_engine_free(e);
}

static void test_reserve_ids(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    const char *none[] = {NULL};
    uint64_t id;

    (void)unused;
    fx_type(e, "t", none);
    assert_int_equal(sluice_engine_last_id(e), 0);
    assert_int_equal(fx_submit(e, "t", "{}", T0), 1);
    sluice_engine_reserve_ids(e, 100);
    assert_int_equal(sluice_engine_last_id(e), 100);
    id = fx_submit(e, "t", "{}", T0);
    assert_int_equal(id, 101);
    sluice_engine_reserve_ids(e, 50); /* never lowers */
    assert_int_equal(fx_submit(e, "t", "{}", T0), 102);
    assert_int_equal(sluice_engine_last_id(e), 102);
    sluice_engine_free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tasks_and_series), cmocka_unit_test(test_limits_latest_wins),
        cmocka_unit_test(test_keys_and_purges),  cmocka_unit_test(test_key_revived),
        cmocka_unit_test(test_property),         cmocka_unit_test(test_oom),
        cmocka_unit_test(test_limit_ids),        cmocka_unit_test(test_reserve_ids),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
