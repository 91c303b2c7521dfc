/* SPDX-License-Identifier: MIT */
/*
 * The real `sluice serve` with a type under `fairness: keys`, driven over the wire: a tenant
 * with one task is served within the first two deliveries while another has 500 queued, and
 * TASK.EXPLAIN says why a queued task's turn depends on its key's share.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "server_fixture.h"

static const char config_yaml[] = "limits:\n"
                                  "  per_user: {rate: 100000/1s, key: input.user}\n"
                                  "types:\n"
                                  "  job:\n"
                                  "    limits: [per_user]\n"
                                  "    fairness: keys\n";

static server_fixture fx;

static int start_server(void **state)
{
    (void)state;
    return server_fixture_start(&fx, config_yaml);
}

static int stop_server(void **state)
{
    (void)state;
    return server_fixture_stop(&fx);
}

static long long add_task(redisContext *c, const char *user)
{
    redisReply *r = server_fixture_cmd(c, "TASK.ADD job {\"user\":\"%s\"}", user);
    long long id;

    if (r->type != REDIS_REPLY_INTEGER)
        fail_msg("TASK.ADD: wanted an integer, got type %d %s", r->type, r->str ? r->str : "");
    id = r->integer;
    freeReplyObject(r);
    return id;
}

static void test_small_tenant_first(void **unused)
{
    redisContext *c = server_fixture_connect(&fx);
    redisReply *r;
    long long first = 0, small;
    int seen = 0;

    (void)unused;
    /* 500 tasks in one pipeline: one loop turn, one commit. */
    for (int i = 0; i < 500; i++)
        assert_int_equal(redisAppendCommand(c, "TASK.ADD job {\"user\":\"big\"}"), REDIS_OK);
    for (int i = 0; i < 500; i++) {
        assert_int_equal(redisGetReply(c, (void **)&r), REDIS_OK);
        assert_int_equal(r->type, REDIS_REPLY_INTEGER);
        if (i == 0)
            first = r->integer;
        freeReplyObject(r);
    }
    small = add_task(c, "small");
    r = server_fixture_cmd(c, "TASK.GET job COUNT 2");
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 2);
    for (size_t i = 0; i < r->elements; i++)
        if (r->element[i]->element[0]->integer == small)
            seen = 1;
    freeReplyObject(r);
    assert_true(seen);

    r = server_fixture_cmd(c, "TASK.EXPLAIN %lld", first + 400);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    seen = 0;
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        if (strcmp(r->element[i]->str, "text") == 0 &&
            strstr(r->element[i + 1]->str, "shares workers fairly between the keys of limit "
                                           "\"per_user\": key \"big\""))
            seen = 1;
    freeReplyObject(r);
    assert_true(seen);
    redisFree(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_tenant_first),
    };

    return cmocka_run_group_tests(tests, start_server, stop_server);
}
