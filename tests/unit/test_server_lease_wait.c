/* SPDX-License-Identifier: MIT */
/*
 * The reply of a granted LEASE.ACQUIRE or a LEASE.RENEW waits for the commit of its lease
 * (durable_key_changed, docs/durability.md "Leases and group slots"), on the real `sluice serve`
 * with `--durability always` and a data directory, driven with hiredis.
 *
 * Checked, each from the state the server reports right after the reply (INFO persistence,
 * which pulls the limiters' changed keys before it counts them): after a granted ACQUIRE and
 * after a RENEW nothing is left to write and no reply is held, so the lease was committed
 * before its reply left; 16 pipelined ACQUIREs are answered by one commit; with a full disk
 * (the fault VFS, DEBUG FAULT FULL) a granted ACQUIRE is answered -IOERR and its lease is
 * released (the limit's units are all free again), a RENEW is answered -IOERR and its lease is
 * kept; a denied ACQUIRE is answered RATELIMITED at once. Nothing here sleeps: every check reads
 * what the reply promised.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "server_fixture.h"

static server_fixture fx;
static char data_dir[64];

static const char config[] = "limits:\n"
                             "  slots:\n"
                             "    concurrency: 2\n"
                             "    key: explicit\n"
                             "  many:\n"
                             "    concurrency: 1000\n"
                             "    key: explicit\n";

static int start_server(void **state)
{
    const char *extra[] = {
        "--durability", "always", "--data", data_dir, "--enable-debug-commands", NULL};

    (void)state;
    snprintf(data_dir, sizeof data_dir, "/tmp/sluice-leasewait-XXXXXX");
    if (!mkdtemp(data_dir))
        return -1;
    return server_fixture_start_args(&fx, config, extra);
}

static int stop_server(void **state)
{
    char cmd[128];
    int rc = server_fixture_stop(&fx);

    (void)state;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", data_dir);
    if (system(cmd) != 0)
        rc = -1;
    return rc;
}

/* One field of INFO persistence, as an integer. */
static long long info(redisContext *c, const char *name)
{
    redisReply *r = server_fixture_cmd(c, "INFO persistence");
    char key[64];
    const char *at;
    long long v = -1;

    assert_int_equal(r->type, REDIS_REPLY_STRING);
    snprintf(key, sizeof key, "\n%s:", name);
    at = strstr(r->str, key);
    assert_non_null(at);
    v = strtoll(at + strlen(key), NULL, 10);
    freeReplyObject(r);
    return v;
}

/* LEASE.ACQUIRE's handle (a granted lease), copied into out. */
static void acquire(redisContext *c, const char *limit, const char *key, int units, char *out,
                    size_t len)
{
    redisReply *r =
        server_fixture_cmd(c, "LEASE.ACQUIRE %s %s UNITS %d TTL 600000", limit, key, units);

    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_true(r->elements >= 2);
    snprintf(out, len, "%s", r->element[1]->str);
    freeReplyObject(r);
}

/* The reply of a command is an error starting with want. */
static void expect_error(redisContext *c, const char *want, const char *fmt, ...)
{
    va_list ap;
    redisReply *r;

    va_start(ap, fmt);
    r = redisvCommand(c, fmt, ap);
    va_end(ap);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ERROR);
    if (strncmp(r->str, want, strlen(want)) != 0)
        fail_msg("wanted [%s...], got [%s]", want, r->str);
    freeReplyObject(r);
}

static void expect_status(redisContext *c, const char *want, const char *fmt, ...)
{
    va_list ap;
    redisReply *r;

    va_start(ap, fmt);
    r = redisvCommand(c, fmt, ap);
    va_end(ap);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_STATUS);
    assert_string_equal(r->str, want);
    freeReplyObject(r);
}

static void test_acquire_and_renew_are_durable_on_reply(void **state)
{
    redisContext *c = server_fixture_connect(&fx);
    char h[256];
    redisReply *r;
    long long commits = info(c, "commits");

    (void)state;
    acquire(c, "slots", "a", 1, h, sizeof h);
    /* The reply left after the commit that carries the lease's key: nothing is dirty. */
    assert_int_equal(info(c, "dirty_keys"), 0);
    assert_int_equal(info(c, "held_replies"), 0);
    assert_true(info(c, "commits") > commits);
    commits = info(c, "commits");
    r = server_fixture_cmd(c, "LEASE.RENEW %s TTL 900000", h);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    assert_int_equal(r->integer, 900000);
    freeReplyObject(r);
    assert_int_equal(info(c, "dirty_keys"), 0);
    assert_true(info(c, "commits") > commits);
    /* A denied ACQUIRE changes nothing and is answered at once. */
    expect_error(c, "RATELIMITED", "LEASE.ACQUIRE slots a UNITS 2 TTL 1000");
    expect_status(c, "OK", "LEASE.RELEASE %s", h);
    redisFree(c);
}

static void test_pipeline_shares_a_commit(void **state)
{
    redisContext *c = server_fixture_connect(&fx);
    long long before = info(c, "commits");
    redisReply *r;

    (void)state;
    /* hiredis writes the appended commands in one go at the first redisGetReply. */
    for (int i = 0; i < 16; i++)
        redisAppendCommand(c, "LEASE.ACQUIRE many p TTL 600000");
    for (int i = 0; i < 16; i++) {
        assert_int_equal(redisGetReply(c, (void **)&r), REDIS_OK);
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        freeReplyObject(r);
    }
    /* One commit; the 100 ms key timer may have added one of its own meanwhile. */
    assert_in_range(info(c, "commits") - before, 1, 2);
    assert_int_equal(info(c, "dirty_keys"), 0);
    redisFree(c);
}

static void test_full_disk_refuses_and_releases(void **state)
{
    redisContext *c = server_fixture_connect(&fx);
    char h[256], h2[256];

    (void)state;
    acquire(c, "slots", "f", 1, h, sizeof h);
    expect_status(c, "OK", "DEBUG FAULT FULL on");
    expect_error(c, "IOERR disk full", "LEASE.ACQUIRE slots f TTL 600000");
    /* Released: the one unit left is free, so this one is granted (and refused by the disk). */
    expect_error(c, "IOERR disk full", "LEASE.ACQUIRE slots f TTL 600000");
    expect_error(c, "IOERR disk full", "LEASE.RENEW %s TTL 600000", h);
    expect_status(c, "OK", "DEBUG FAULT FULL off");
    acquire(c, "slots", "f", 1, h2, sizeof h2);
    expect_error(c, "RATELIMITED", "LEASE.ACQUIRE slots f TTL 600000");
    /* The RENEW the disk refused left the first lease its holder's. */
    expect_status(c, "OK", "LEASE.RELEASE %s", h);
    expect_status(c, "OK", "LEASE.RELEASE %s", h2);
    assert_true(info(c, "ioerr_replies") >= 3);
    redisFree(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_acquire_and_renew_are_durable_on_reply),
        cmocka_unit_test(test_pipeline_shares_a_commit),
        cmocka_unit_test(test_full_disk_refuses_and_releases),
    };

    return cmocka_run_group_tests(tests, start_server, stop_server);
}
