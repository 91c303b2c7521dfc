/* SPDX-License-Identifier: MIT */
/*
 * Tests of where a limit's shared state lives on Redis Cluster (server/rtag.h): the limits a
 * type names (their tiers' and per-key overrides' ids too) are in the queue's slot and no
 * other is; the map owns its names (the file it was read from may go); a reload that moves a
 * limit in or out of that slot is named, one that keeps the set (reordered, a type added over
 * the same limits) is not. An out-of-memory sweep covers building the map.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "server/rtag.h"
#include "sluice/config.h"
#include "sluice/error.h"
#include "testutil.h"

static void parse(const char *yaml, sluice_config *c)
{
    char msg[256] = "";
    int rc = sluice_config_parse(yaml, strlen(yaml), "test.yaml", c, msg, sizeof msg);

    if (rc != 0)
        fail_msg("config: %s", msg);
}

static const char BASE[] = "limits:\n"
                           "  api: {rate: 5/1s, key: explicit}\n"
                           "  global: {rate: 100/1s}\n"
                           "  free: {rate: 9/1s, key: explicit}\n"
                           "  plan:\n"
                           "    key: explicit\n"
                           "    tier:\n"
                           "      field: input.n\n"
                           "      tiers:\n"
                           "        - {name: gold, max: 0, rate: 10/1s}\n"
                           "        - {name: lead, min: 1, rate: 1/1s}\n"
                           "types:\n"
                           "  call: {limits: [api, global]}\n"
                           "  paid: {limits: [plan, api]}\n"
                           "  bare: {}\n";

static void test_named_limits_live_in_the_queue_slot(void **state)
{
    sluice_config c;
    rtag_map m;

    (void)state;
    parse(BASE, &c);
    rtag_map_init(&m);
    assert_int_equal(rtag_map_build(&m, &c), 0);
    sluice_config_clear(&c); /* the map keeps its own copies */
    assert_true(rtag_map_queued(&m, "api"));
    assert_true(rtag_map_queued(&m, "global"));
    assert_true(rtag_map_queued(&m, "plan"));
    assert_true(rtag_map_queued(&m, "plan/gold")); /* a tier's state */
    assert_true(rtag_map_queued(&m, "api/=vip"));  /* a key's own limit (LIMIT.KEY) */
    assert_false(rtag_map_queued(&m, "free"));
    assert_false(rtag_map_queued(&m, "free/x"));
    assert_false(rtag_map_queued(&m, "ap"));   /* a prefix of a name is not the name */
    assert_false(rtag_map_queued(&m, "apix")); /* nor a name with more after it */
    assert_false(rtag_map_queued(&m, "!cell:4:30:1"));
    assert_false(rtag_map_queued(&m, ""));
    rtag_map_free(&m);
}

static void test_no_config_names_nothing(void **state)
{
    rtag_map m;

    (void)state;
    rtag_map_init(&m);
    assert_false(rtag_map_queued(&m, "api"));
    assert_int_equal(rtag_map_build(&m, NULL), 0);
    assert_false(rtag_map_queued(&m, "api"));
    rtag_map_free(&m);
    rtag_map_free(&m); /* twice is fine */
}

/* A reload from prev to the file `yaml` is refused with a message holding `want`. */
static void assert_moves(const sluice_config *prev, const char *yaml, const char *want)
{
    sluice_config next;
    char buf[512];
    const char *why;

    parse(yaml, &next);
    why = rtag_cluster_moves(prev, &next, buf, sizeof buf);
    assert_non_null(why);
    assert_non_null(strstr(why, want));
    sluice_config_clear(&next);
}

static void test_reload_that_moves_a_limit_is_named(void **state)
{
    sluice_config prev, same;
    char buf[512];

    (void)state;
    parse(BASE, &prev);
    /* The same set, in another order and with one more type over the same limits: no move. */
    parse("limits:\n  api: {rate: 5/1s, key: explicit}\n  global: {rate: 100/1s}\n"
          "  plan: {rate: 2/1s, key: explicit}\n"
          "types:\n  paid: {limits: [api, plan]}\n  call: {limits: [global, api]}\n"
          "  more: {limits: [api]}\n",
          &same);
    assert_null(rtag_cluster_moves(&prev, &same, buf, sizeof buf));
    /* free joins a type's chain. */
    assert_moves(&prev,
                 "limits:\n  api: {rate: 5/1s, key: explicit}\n  global: {rate: 100/1s}\n"
                 "  plan: {rate: 1/1s, key: explicit}\n  free: {rate: 9/1s, key: explicit}\n"
                 "types:\n  call: {limits: [api, global]}\n  paid: {limits: [plan, api, free]}\n",
                 "limit \"free\" would move into the task queue's Redis Cluster");
    /* global leaves: no type names it any more. */
    assert_moves(&prev,
                 "limits:\n  api: {rate: 5/1s, key: explicit}\n  global: {rate: 100/1s}\n"
                 "  plan: {rate: 1/1s, key: explicit}\n"
                 "types:\n  call: {limits: [api]}\n  paid: {limits: [plan, api]}\n",
                 "limit \"global\" would move out of");
    /* From no file, or to none: every named limit moves. */
    assert_non_null(rtag_cluster_moves(NULL, &prev, buf, sizeof buf));
    assert_non_null(rtag_cluster_moves(&prev, NULL, buf, sizeof buf));
    assert_null(rtag_cluster_moves(NULL, NULL, buf, sizeof buf));
    sluice_config_clear(&prev);
    sluice_config_clear(&same);
}

static int build_body(void *arg)
{
    rtag_map m;
    int rc;

    rtag_map_init(&m);
    rc = rtag_map_build(&m, arg);
    if (rc == 0) {
        assert_true(rtag_map_queued(&m, "plan/gold"));
        assert_false(rtag_map_queued(&m, "free"));
    } else {
        assert_int_equal(rc, SLUICE_ENOMEM);
        assert_false(rtag_map_queued(&m, "api")); /* a failed build names nothing */
    }
    rtag_map_free(&m);
    return rc;
}

static void test_build_out_of_memory(void **state)
{
    sluice_config c;

    (void)state;
    parse(BASE, &c);
    assert_true(oom_sweep(build_body, &c, 20) > 1);
    sluice_config_clear(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_named_limits_live_in_the_queue_slot),
        cmocka_unit_test(test_no_config_names_nothing),
        cmocka_unit_test(test_reload_that_moves_a_limit_is_named),
        cmocka_unit_test(test_build_out_of_memory),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
