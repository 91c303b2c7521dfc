/* SPDX-License-Identifier: MIT */
/*
 * Tests of the engine's introspection (engine.h, "Introspection"): per-type counters and tasks
 * by state, the wait-time histogram, per-limit figures (parked tasks and keys, rejections by
 * reason, quota spending), and the keys with the most parked tasks. On a simulated clock.
 */
#include "engine_fixture.h"

typedef struct type_seen {
    sluice_type_stats st[8];
    char names[8][32];
    size_t n;
} type_seen;

static void collect(const sluice_type_stats *st, void *arg)
{
    type_seen *s = arg;

    assert_true(s->n < 8);
    snprintf(s->names[s->n], sizeof(s->names[0]), "%s", st->name);
    s->st[s->n] = *st;
    s->st[s->n].name = s->names[s->n];
    s->n++;
}

static const sluice_type_stats *type_of(type_seen *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++) {
        if (strcmp(s->names[i], name) == 0)
            return &s->st[i];
    }
    fail_msg("no type %s", name);
    return NULL;
}

static void stats_now(sluice_engine *e, type_seen *s)
{
    int n;

    memset(s, 0, sizeof(*s));
    n = sluice_engine_type_stats(e, collect, s);
    assert_int_equal(n, (int)s->n);
}

static void test_type_counters(void **unused)
{
    static const char *const chain[] = {"api", NULL};
    sluice_engine *e = fx_engine(NULL);
    sluice_delivery d[16];
    const sluice_type_stats *st;
    type_seen seen;
    int n;

    (void)unused;
    fx_rate(e, "api", 2, SEC, 2, "input.t");
    fx_type_ex(e, "sync", chain, 2, 1, 30 * SEC);
    for (int i = 0; i < 5; i++)
        fx_submit(e, "sync", "{\"t\":\"a\"}", T0);
    for (int i = 0; i < 3; i++)
        fx_submit(e, "sync", "{\"t\":\"b\"}", T0);
    fx_submit(e, "sync", "{\"t\":\"c\"}", T0);
    fx_submit(e, "adhoc", "{}", T0); /* an undeclared type */
    stats_now(e, &seen);
    assert_int_equal(seen.n, 2);
    /* Name order. */
    assert_string_equal(seen.names[0], "adhoc");
    assert_false(seen.st[0].declared);
    st = type_of(&seen, "sync");
    assert_true(st->declared);
    assert_int_equal(st->submitted, 9);
    assert_int_equal(st->queued, 9);

    n = fx_poll(e, T0, 16, d);
    assert_int_equal(n, 6); /* a: 2, b: 2, c: 1, adhoc: 1 */
    stats_now(e, &seen);
    st = type_of(&seen, "sync");
    assert_int_equal(st->delivered, 5);
    assert_int_equal(st->running, 5);
    assert_int_equal(st->parked, 4);
    assert_int_equal(st->queued, 0);
    assert_int_equal(st->wait_count, 5);
    assert_int_equal(st->wait[0], 5); /* granted at once: the first bucket */
    assert_int_equal(type_of(&seen, "adhoc")->running, 1);

    /* ack two, fail one (retried), fail one dead; cancel a parked one. */
    int acked = 0, failed = 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(d[i].type, "sync") != 0)
            continue;
        if (acked < 2) {
            assert_int_equal(sluice_engine_ack(e, d[i].id, -1, T0 + MS), SLUICE_OK);
            acked++;
        } else if (failed == 0) {
            assert_int_equal(
                sluice_engine_fail(e, d[i].id, SLUICE_FAIL_MODE_RETRY, "flaky", T0 + MS),
                SLUICE_OK);
            failed++;
        } else if (failed == 1) {
            assert_int_equal(sluice_engine_fail(e, d[i].id, SLUICE_FAIL_MODE_DEAD, "dead", T0 + MS),
                             SLUICE_OK);
            failed++;
        }
    }
    stats_now(e, &seen);
    st = type_of(&seen, "sync");
    assert_int_equal(st->done, 2);
    assert_int_equal(st->retried, 1);
    assert_int_equal(st->failed, 1);
    assert_int_equal(st->delayed, 1);
    assert_int_equal(st->running, 1);
    assert_int_equal(st->cancelled, 0);

    /* A parked task delivered 3 s after its submission lands in the (1 s, 5 s] bucket. */
    n = fx_poll(e, T0 + 3 * SEC, 16, d);
    assert_true(n > 0);
    stats_now(e, &seen);
    st = type_of(&seen, "sync");
    assert_true(st->wait_count > 5);
    assert_true(st->wait[6] > 0);
    assert_true(sluice_wait_bounds_ns[5] < 3 * SEC && 3 * SEC <= sluice_wait_bounds_ns[6]);
    assert_true(st->wait_sum_ns >= 3 * (uint64_t)SEC);
    sluice_engine_free(e);
}

static void test_limit_figures_and_top(void **unused)
{
    static const char *const chain[] = {"api", NULL};
    sluice_engine *e = fx_engine(NULL);
    sluice_parked_key top[4];
    sluice_limit_figures f;
    sluice_delivery d[16];
    int n;

    (void)unused;
    fx_rate(e, "api", 1, SEC, 1, "input.t");
    fx_type(e, "sync", chain);
    for (int i = 0; i < 4; i++)
        fx_submit(e, "sync", "{\"t\":\"heavy\"}", T0);
    for (int i = 0; i < 2; i++)
        fx_submit(e, "sync", "{\"t\":\"light\"}", T0);
    fx_submit(e, "sync", "{\"t\":\"once\"}", T0);
    assert_int_equal(fx_poll(e, T0, 16, d), 3);

    assert_int_equal(sluice_engine_limit_figures(e, "api", T0, 0, &f), SLUICE_OK);
    assert_int_equal(f.parked, 4);
    assert_int_equal(f.parked_keys, 2);
    assert_int_equal(f.core.keys, 3);
    assert_int_equal(f.core.allowed, 3);
    assert_true(f.next_wake_ns > T0 && f.next_wake_ns <= T0 + SEC);
    assert_int_equal(sluice_engine_limit_figures(e, "nope", T0, 0, &f), SLUICE_ENOTFOUND);
    assert_int_equal(f.parked, 0);

    n = sluice_engine_top_parked(e, "api", top, 4);
    assert_int_equal(n, 2);
    assert_int_equal(top[0].keylen, 5);
    assert_memory_equal(top[0].key, "heavy", 5);
    assert_int_equal(top[0].parked, 3);
    assert_null(top[0].tier);
    assert_int_equal(top[1].parked, 1);
    assert_memory_equal(top[1].key, "light", 5);
    /* Bounded: only the first. */
    assert_int_equal(sluice_engine_top_parked(e, "api", top, 1), 1);
    assert_memory_equal(top[0].key, "heavy", 5);
    assert_int_equal(sluice_engine_top_parked(e, "api", top, 0), 0);
    assert_int_equal(sluice_engine_top_parked(e, "nope", top, 4), SLUICE_ENOTFOUND);
    sluice_engine_free(e);
}

static void test_rejections_by_reason(void **unused)
{
    static const char *const chain[] = {"breaker", NULL};
    sluice_engine *e = fx_engine(NULL);
    sluice_limit_policy p;
    sluice_limit_figures f;
    sluice_delivery d[4];
    type_seen seen;

    (void)unused;
    fx_limit(&p, "breaker", SLUICE_WINDOW, 1, 3600 * SEC);
    p.overflow = SLUICE_OVERFLOW_REJECT;
    fx_set_limit(e, &p);
    fx_type(e, "spawn", chain);
    fx_submit(e, "spawn", "{}", T0);
    fx_submit(e, "spawn", "{}", T0);
    fx_submit(e, "spawn", "{}", T0);
    assert_int_equal(fx_poll(e, T0, 4, d), 1);
    assert_int_equal(sluice_engine_limit_figures(e, "breaker", T0, 0, &f), SLUICE_OK);
    assert_int_equal(f.rejected[SLUICE_FAIL_RATELIMITED], 2);
    assert_int_equal(f.rejected[SLUICE_FAIL_HORIZON], 0);
    stats_now(e, &seen);
    assert_int_equal(type_of(&seen, "spawn")->failed, 2);
    sluice_engine_free(e);
}

static void test_quota_spent(void **unused)
{
    static const char *const chain[] = {"budget", NULL};
    sluice_engine *e = fx_engine(NULL);
    sluice_limit_policy p;
    sluice_limit_figures f;
    sluice_delivery d[4];
    sluice_task_spec s;
    int64_t spent = -1;
    size_t keys = 9;

    (void)unused;
    fx_limit(&p, "budget", SLUICE_QUOTA, 100, 0);
    p.def.calendar = SLUICE_CAL_DAY;
    p.key_source = SLUICE_KEY_EXPLICIT;
    fx_set_limit(e, &p);
    fx_type(e, "spend", chain);
    memset(&s, 0, sizeof(s));
    s.type = "spend";
    s.units = 30;
    s.key = "x";
    s.key_len = 1;
    fx_submit_spec(e, &s, T0);
    s.key = "y";
    fx_submit_spec(e, &s, T0);
    s.units = 10;
    fx_submit_spec(e, &s, T0);
    assert_int_equal(fx_poll(e, T0, 4, d), 3);
    assert_int_equal(sluice_engine_limit_figures(e, "budget", T0, SLUICE_FIGURES_QUOTA, &f),
                     SLUICE_OK);
    assert_int_equal(f.quota_spent, 70);
    assert_int_equal(sluice_engine_limit_figures(e, "budget", T0, 0, &f), SLUICE_OK);
    assert_int_equal(f.quota_spent, 0);
    /* The next day nothing is spent in the current period. */
    assert_int_equal(
        sluice_engine_limit_figures(e, "budget", T0 + 86400 * SEC, SLUICE_FIGURES_QUOTA, &f),
        SLUICE_OK);
    assert_int_equal(f.quota_spent, 0);
    /* The core call on a limit of another kind. */
    {
        sluice_limit_def def;
        sluice_limit *lim = NULL;

        sluice_limit_def_init(&def, SLUICE_RATE);
        def.limit = 1;
        def.period_ns = SEC;
        assert_int_equal(sluice_limit_new(&def, &lim, NULL, 0), SLUICE_OK);
        assert_int_equal(sluice_limit_quota_spent(lim, T0, &spent, &keys), SLUICE_EINVAL);
        assert_int_equal(spent, 0);
        assert_int_equal(keys, 0);
        sluice_limit_free(lim);
    }
    sluice_engine_free(e);
}

/* A first wait longer than the int64 range (a time far below zero, then one near the top: the
 * engine takes the times it is given) lands past the last bucket with a saturated sum, never as
 * a negative wait. The fuzz target found the overflow (corpus/engine/regress-wait-overflow). */
static void test_wait_saturates(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    sluice_delivery d[1];
    type_seen seen;
    const sluice_type_stats *st;

    (void)unused;
    fx_submit(e, "far", "{}", INT64_MIN / 2 - SEC);
    assert_int_equal(fx_poll(e, INT64_MAX, 1, d), 1);
    stats_now(e, &seen);
    st = type_of(&seen, "far");
    assert_int_equal(st->wait_count, 1);
    assert_int_equal(st->wait[SLUICE_WAIT_BUCKETS], 1);
    assert_true(st->wait_sum_ns >= (uint64_t)INT64_MAX);
    sluice_engine_free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_type_counters),        cmocka_unit_test(test_limit_figures_and_top),
        cmocka_unit_test(test_rejections_by_reason), cmocka_unit_test(test_quota_spent),
        cmocka_unit_test(test_wait_saturates),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
