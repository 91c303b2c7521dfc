/* SPDX-License-Identifier: MIT */
/*
 * Tests of seed 004's spend queries and spawn detail, on a simulated clock:
 * sluice_limit_quota_usage (one quota key's spent, budget, remaining and reset, read without
 * moving the limit's clock), sluice_engine_quota_usage (by limit name, tier and key override),
 * and the figures a quota refusal reports (the key's current spending and the units attempted,
 * as seed 004's "Agent spawn limit exceeded" error gives current_agents and
 * attempted_new_agents).
 */
#include "engine_fixture.h"

#include "testutil.h"

#define HOUR (60 * MIN)
#define DAY  (24 * HOUR)

static sluice_limit *quota(int64_t budget, sluice_calendar cal)
{
    sluice_limit_def def;
    sluice_limit *lim = NULL;
    char msg[128];

    sluice_limit_def_init(&def, SLUICE_QUOTA);
    def.limit = budget;
    def.calendar = cal;
    if (sluice_limit_new(&def, &lim, msg, sizeof msg) != SLUICE_OK)
        fail_msg("quota: %s", msg);
    return lim;
}

static void spend(sluice_limit *lim, const char *key, int64_t units, int64_t now, int allowed)
{
    sluice_decision d;

    assert_int_equal(sluice_limit_decide(lim, key, strlen(key), units, now, 0, &d), SLUICE_OK);
    assert_int_equal(d.allowed, allowed);
}

static sluice_quota_usage usage(sluice_limit *lim, const char *key, int64_t now)
{
    sluice_quota_usage u;

    assert_int_equal(sluice_limit_quota_usage(lim, key, strlen(key), now, &u), SLUICE_OK);
    return u;
}

/* A daily budget: spent, remaining and the reset at the next UTC midnight; a key never charged
 * has spent nothing; a new day starts at 0. */
static void test_daily(void **unused)
{
    sluice_limit *lim = quota(100, SLUICE_CAL_DAY);
    sluice_quota_usage u;

    (void)unused;
    u = usage(lim, "ann", T0 + HOUR);
    assert_int_equal(u.spent, 0);
    assert_int_equal(u.budget, 100);
    assert_int_equal(u.remaining, 100);
    assert_int_equal(u.period_start_ns, T0); /* T0 is a midnight */
    assert_int_equal(u.resets_at_ns, T0 + DAY);
    spend(lim, "ann", 30, T0 + HOUR, 1);
    spend(lim, "ann", 45, T0 + 2 * HOUR, 1);
    spend(lim, "ann", 30, T0 + 3 * HOUR, 0); /* 75 + 30 > 100 */
    u = usage(lim, "ann", T0 + 3 * HOUR);
    assert_int_equal(u.spent, 75);
    assert_int_equal(u.remaining, 25);
    assert_int_equal(usage(lim, "bob", T0 + 3 * HOUR).spent, 0);
    u = usage(lim, "ann", T0 + DAY + HOUR);
    assert_int_equal(u.spent, 0);
    assert_int_equal(u.remaining, 100);
    assert_int_equal(u.period_start_ns, T0 + DAY);
    assert_int_equal(u.resets_at_ns, T0 + 2 * DAY);
    sluice_limit_free(lim);
}

/* A total cap never resets; spending past the budget (after a settlement) leaves 0 remaining. */
static void test_total_and_overspent(void **unused)
{
    sluice_limit *lim = quota(5, SLUICE_CAL_NONE);
    sluice_quota_usage u;

    (void)unused;
    spend(lim, "wf", 4, T0, 1);
    assert_int_equal(sluice_quota_settle(lim, "wf", 2, T0, 4, 9, T0 + SEC), SLUICE_OK);
    u = usage(lim, "wf", T0 + SEC);
    assert_int_equal(u.spent, 9);
    assert_int_equal(u.remaining, 0);
    assert_int_equal(u.period_start_ns, 0);
    assert_int_equal(u.resets_at_ns, SLUICE_NEVER);
    sluice_limit_free(lim);
}

/* A read changes nothing, not even the clock: asked far ahead, a later charge at an earlier time
 * still lands in the day the limit is in (had the read moved the clamp, it would start a new
 * day). Long keys are read as the decisions store them (hashed), and nothing is counted. */
static void test_read_changes_nothing(void **unused)
{
    sluice_limit *lim = quota(100, SLUICE_CAL_DAY);
    sluice_limit_stats before, after;
    char longkey[400];

    (void)unused;
    memset(longkey, 'k', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = '\0';
    spend(lim, "ann", 10, T0 + HOUR, 1);
    spend(lim, longkey, 7, T0 + HOUR, 1);
    sluice_limit_get_stats(lim, &before);
    assert_int_equal(usage(lim, "ann", T0 + 3 * DAY).spent, 0);
    assert_int_equal(usage(lim, longkey, T0 + 2 * HOUR).spent, 7);
    sluice_limit_get_stats(lim, &after);
    assert_memory_equal(&before, &after, sizeof before);
    spend(lim, "ann", 10, T0 + 2 * HOUR, 1);
    assert_int_equal(usage(lim, "ann", T0 + 2 * HOUR).spent, 20);
    sluice_limit_free(lim);
}

static void test_errors(void **unused)
{
    sluice_limit *lim = quota(10, SLUICE_CAL_DAY);
    sluice_limit_def def;
    sluice_limit *rate = NULL;
    sluice_quota_usage u;
    char msg[64];

    (void)unused;
    assert_int_equal(sluice_limit_quota_usage(lim, NULL, 3, T0, &u), SLUICE_EINVAL);
    assert_int_equal(u.budget, 0);
    assert_int_equal(sluice_limit_quota_usage(lim, NULL, 0, T0, &u), SLUICE_OK);
    sluice_limit_def_init(&def, SLUICE_RATE);
    def.limit = 1;
    def.period_ns = SEC;
    assert_int_equal(sluice_limit_new(&def, &rate, msg, sizeof msg), SLUICE_OK);
    assert_int_equal(sluice_limit_quota_usage(rate, "a", 1, T0, &u), SLUICE_EINVAL);
    assert_int_equal(sluice_limit_quota_usage(NULL, "a", 1, T0, &u), SLUICE_EINVAL);
    sluice_limit_free(rate);
    sluice_limit_free(lim);
}

/* A keyed daily budget in the engine, a per-key override, and the errors by name and tier. */
static void test_engine_usage(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    const char *lims[] = {"daily", NULL};
    sluice_limit_policy p;
    sluice_limit_def vip;
    sluice_quota_usage u;
    sluice_delivery out[8];
    char msg[128];

    (void)unused;
    fx_limit(&p, "daily", SLUICE_QUOTA, 10, 0);
    p.def.calendar = SLUICE_CAL_DAY;
    p.key_source = SLUICE_KEY_PATH;
    p.key_path = "user";
    fx_set_limit(e, &p);
    fx_type(e, "job", lims);
    sluice_limit_def_init(&vip, SLUICE_QUOTA);
    vip.limit = 1000;
    vip.calendar = SLUICE_CAL_DAY;
    assert_int_equal(
        sluice_engine_set_key_override(e, "daily", "vip", 3, &vip, T0, msg, sizeof msg), SLUICE_OK);
    fx_submit(e, "job", "{\"user\":\"ann\"}", T0 + HOUR);
    fx_submit(e, "job", "{\"user\":\"ann\"}", T0 + HOUR);
    fx_submit(e, "job", "{\"user\":\"vip\"}", T0 + HOUR);
    assert_int_equal(fx_poll(e, T0 + HOUR, 8, out), 3);
    assert_int_equal(sluice_engine_quota_usage(e, "daily", NULL, "ann", 3, T0 + HOUR, &u),
                     SLUICE_OK);
    assert_int_equal(u.spent, 2);
    assert_int_equal(u.budget, 10);
    assert_int_equal(u.remaining, 8);
    assert_int_equal(u.resets_at_ns, T0 + DAY);
    assert_int_equal(sluice_engine_quota_usage(e, "daily", NULL, "vip", 3, T0 + HOUR, &u),
                     SLUICE_OK);
    assert_int_equal(u.spent, 1);
    assert_int_equal(u.budget, 1000);
    assert_int_equal(sluice_engine_quota_usage(e, "nope", NULL, "ann", 3, T0, &u),
                     SLUICE_ENOTFOUND);
    assert_int_equal(sluice_engine_quota_usage(e, "daily", "heavy", "ann", 3, T0, &u),
                     SLUICE_ENOTFOUND);
    /* A tiered quota needs its tier. */
    {
        sluice_limit_policy tp;
        sluice_tier tiers[2];

        fx_limit(&tp, "tq", SLUICE_QUOTA, 1, 0);
        memset(tiers, 0, sizeof tiers);
        tiers[0].name = "light";
        tiers[0].min = INT64_MIN;
        tiers[0].max = 2;
        sluice_limit_def_init(&tiers[0].def, SLUICE_QUOTA);
        tiers[0].def.limit = 50;
        tiers[1].name = "heavy";
        tiers[1].min = 3;
        tiers[1].max = INT64_MAX;
        sluice_limit_def_init(&tiers[1].def, SLUICE_QUOTA);
        tiers[1].def.limit = 5;
        tp.tiers = tiers;
        tp.ntiers = 2;
        tp.tier_path = "agents";
        tp.key_source = SLUICE_KEY_PATH;
        tp.key_path = "user";
        fx_set_limit(e, &tp);
        assert_int_equal(sluice_engine_quota_usage(e, "tq", NULL, "ann", 3, T0, &u), SLUICE_EINVAL);
        assert_int_equal(sluice_engine_quota_usage(e, "tq", "heavy", "ann", 3, T0, &u), SLUICE_OK);
        assert_int_equal(u.budget, 5);
        assert_int_equal(sluice_engine_quota_usage(e, "tq", "light", "ann", 3, T0, &u), SLUICE_OK);
        assert_int_equal(u.budget, 50);
    }
    /* Not a quota. */
    fx_rate(e, "r", 1, SEC, 1, NULL);
    assert_int_equal(sluice_engine_quota_usage(e, "r", NULL, "", 0, T0, &u), SLUICE_EINVAL);
    sluice_engine_free(e);
}

/* Seed 004's spawn cap: 5 agents per workflow, ever. A spawn of 2 more after 4 is refused and
 * says both figures: 4 there, 2 attempted. */
static void test_spawn_refusal_figures(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    const char *lims[] = {"agent_spawns", NULL};
    sluice_limit_policy p;
    sluice_task_spec s;
    sluice_task_info ti;
    sluice_explanation ex;
    sluice_delivery out[4];
    uint64_t id;
    const char *payload = "{\"workflow_id\":\"wf1\"}";

    (void)unused;
    fx_limit(&p, "agent_spawns", SLUICE_QUOTA, 5, 0);
    p.key_source = SLUICE_KEY_PATH;
    p.key_path = "workflow_id";
    p.overflow = SLUICE_OVERFLOW_REJECT;
    fx_set_limit(e, &p);
    fx_type(e, "spawn", lims);
    memset(&s, 0, sizeof s);
    s.type = "spawn";
    s.payload = payload;
    s.payload_len = strlen(payload);
    s.units = 4;
    fx_submit_spec(e, &s, T0);
    assert_int_equal(fx_poll(e, T0, 4, out), 1);
    s.units = 2;
    id = fx_submit_spec(e, &s, T0 + SEC);
    assert_int_equal(fx_poll(e, T0 + SEC, 4, out), 0);
    assert_int_equal(sluice_engine_task_info(e, id, &ti), SLUICE_OK);
    assert_int_equal(ti.state, SLUICE_TASK_FAILED);
    assert_string_equal(ti.failure.limit, "agent_spawns");
    assert_string_equal(ti.failure.kind, "quota");
    assert_int_equal(ti.failure.limit_value, 5);
    assert_int_equal(ti.failure.current, 4);
    assert_int_equal(ti.failure.attempted, 2);
    assert_string_equal(ti.fail_message,
                        "ratelimited by limit \"agent_spawns\" (key \"wf1\"): 4 of 5 spent, 2 "
                        "more asked");
    assert_int_equal(sluice_engine_explain(e, id, T0 + SEC, &ex), SLUICE_OK);
    /* Other kinds carry no such figures. */
    {
        const char *rl[] = {"r", NULL};

        fx_limit(&p, "r", SLUICE_WINDOW, 1, MIN);
        p.overflow = SLUICE_OVERFLOW_REJECT;
        fx_set_limit(e, &p);
        fx_type(e, "w", rl);
        fx_submit(e, "w", NULL, T0 + SEC);
        id = fx_submit(e, "w", NULL, T0 + SEC);
        assert_int_equal(fx_poll(e, T0 + SEC, 4, out), 1);
        assert_int_equal(sluice_engine_task_info(e, id, &ti), SLUICE_OK);
        assert_int_equal(ti.state, SLUICE_TASK_FAILED);
        assert_int_equal(ti.failure.current, 0);
        assert_int_equal(ti.failure.attempted, 0);
        assert_string_equal(ti.fail_message, "ratelimited by limit \"r\" (key \"\")");
    }
    sluice_engine_free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_daily),
        cmocka_unit_test(test_total_and_overspent),
        cmocka_unit_test(test_read_changes_nothing),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_engine_usage),
        cmocka_unit_test(test_spawn_refusal_figures),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
