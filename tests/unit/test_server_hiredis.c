/* SPDX-License-Identifier: MIT */
/*
 * The real server driven by a real client library: starts `sluice serve --port 0` (the binary
 * that test_sluice_bin() finds) in a temporary directory and talks to it with hiredis:
 * many connections at once, a pipeline of 10,000 commands, THROTTLE correctness across clients
 * (a 100/s limit never grants more than burst + elapsed/T, and grants what its retry_after and
 * reset_after promise), CL.THROTTLE, leases, and error replies parsed field by field. The server is
 * stopped with SIGTERM and must exit 0.
 */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "server_fixture.h"
#include <hiredis/hiredis.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>

static server_fixture fx;

static int64_t mono_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int start_server(void **state)
{
    (void)state;
    return server_fixture_start(&fx, NULL);
}

static int stop_server(void **state)
{
    (void)state;
    return server_fixture_stop(&fx);
}

static redisContext *connect_server(void)
{
    return server_fixture_connect(&fx);
}

static void expect_status(redisContext *c, const char *want, const char *fmt, ...)
{
    va_list ap;
    redisReply *r;

    va_start(ap, fmt);
    r = redisvCommand(c, fmt, ap);
    va_end(ap);
    assert_non_null(r);
    if (r->type != REDIS_REPLY_STATUS || strcmp(r->str, want) != 0)
        fail_msg("%s: wanted +%s, got type %d %s", fmt, want, r->type, r->str ? r->str : "");
    freeReplyObject(r);
}

/* Expects an error reply starting with the code word; returns its text (caller frees). */
static char *expect_error(redisContext *c, const char *code, const char *fmt, ...)
{
    va_list ap;
    redisReply *r;
    char *text;

    va_start(ap, fmt);
    r = redisvCommand(c, fmt, ap);
    va_end(ap);
    assert_non_null(r);
    if (r->type != REDIS_REPLY_ERROR || strncmp(r->str, code, strlen(code)) != 0 ||
        (r->str[strlen(code)] != ' ' && r->str[strlen(code)] != '\0'))
        fail_msg("%s: wanted -%s, got type %d %s", fmt, code, r->type, r->str ? r->str : "");
    text = strdup(r->str);
    freeReplyObject(r);
    return text;
}

/* THROTTLE's reply: [allowed, limit, remaining, retry_after_ms, reset_after_ms, denied_by]. */
enum { T_ALLOWED, T_LIMIT, T_REMAINING, T_RETRY, T_RESET, T_DENIED_BY };

static long long field(const redisReply *r, int at)
{
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 6);
    assert_int_equal(r->element[at]->type, REDIS_REPLY_INTEGER);
    return r->element[at]->integer;
}

/* ---- Tests ------------------------------------------------------------------------------- */

static void test_many_clients(void **state)
{
    enum { N = 50 };
    redisContext *cs[N];

    (void)state;
    for (int i = 0; i < N; i++)
        cs[i] = connect_server();
    /* Every connection sends before any reads: the server serves them all in one loop. */
    for (int i = 0; i < N; i++)
        assert_int_equal(redisAppendCommand(cs[i], "PING %d", i), REDIS_OK);
    for (int i = 0; i < N; i++) {
        redisReply *r;
        char want[16];

        assert_int_equal(redisGetReply(cs[i], (void **)&r), REDIS_OK);
        snprintf(want, sizeof(want), "%d", i);
        assert_int_equal(r->type, REDIS_REPLY_STRING);
        assert_string_equal(r->str, want);
        freeReplyObject(r);
    }
    {
        redisReply *r = server_fixture_cmd(cs[0], "INFO clients");

        assert_int_equal(r->type, REDIS_REPLY_STRING);
        assert_non_null(strstr(r->str, "connected_clients:50"));
        freeReplyObject(r);
    }
    for (int i = 0; i < N; i++)
        redisFree(cs[i]);
}

static void test_pipeline_10k(void **state)
{
    enum { N = 10000 };
    redisContext *c = connect_server();

    (void)state;
    expect_status(c, "OK", "LIMIT.SET pipe rate=1000000/1s,key=explicit");
    for (int i = 0; i < N; i++) {
        if (i % 2)
            assert_int_equal(redisAppendCommand(c, "THROTTLE pipe k%d", i % 100), REDIS_OK);
        else
            assert_int_equal(redisAppendCommand(c, "CL.THROTTLE p%d 10 100 1", i % 100), REDIS_OK);
    }
    for (int i = 0; i < N; i++) {
        redisReply *r;

        assert_int_equal(redisGetReply(c, (void **)&r), REDIS_OK);
        assert_int_equal(r->type, REDIS_REPLY_ARRAY);
        if (i % 2) {
            assert_int_equal(field(r, T_ALLOWED), 1);
            assert_int_equal(r->element[T_DENIED_BY]->type, REDIS_REPLY_NIL);
        } else {
            assert_int_equal(r->elements, 5);
            assert_int_equal(r->element[1]->integer, 11);
        }
        freeReplyObject(r);
    }
    redisFree(c);
}

/* Sleeps until `ms` milliseconds after the CLOCK_MONOTONIC reading `from_ns` (the server's clock
 * is CLOCK_MONOTONIC too, plus a fixed offset, so its durations are this clock's). */
static void sleep_until_after(int64_t from_ns, long long ms)
{
    int64_t until = from_ns + (int64_t)ms * 1000000;
    struct timespec ts = {.tv_sec = (time_t)(until / 1000000000),
                          .tv_nsec = (long)(until % 1000000000)};

    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

/* Spends the budget of r100/any on one connection: batches of 16 THROTTLEs in one write, until
 * a batch ends with a denial (a slow machine only needs more batches). Sets the last denial's
 * retry_after and reset_after and `at`, a time after the server decided it; nothing is asked
 * after that denial, so the server's promise holds from then on: a request `retry` ms later is
 * granted, and `reset` ms later the whole burst is back. */
static void spend_budget(redisContext *c, long long *retry, long long *reset, int64_t *at)
{
    enum { BATCH = 16, MAX_BATCHES = 1000 };

    for (int b = 0; b < MAX_BATCHES; b++) {
        int last_denied = 0;

        for (int i = 0; i < BATCH; i++)
            assert_int_equal(redisAppendCommand(c, "THROTTLE r100 any"), REDIS_OK);
        for (int i = 0; i < BATCH; i++) {
            redisReply *r;

            assert_int_equal(redisGetReply(c, (void **)&r), REDIS_OK);
            last_denied = !field(r, T_ALLOWED);
            if (last_denied) {
                *retry = field(r, T_RETRY);
                *reset = field(r, T_RESET);
            }
            freeReplyObject(r);
        }
        *at = mono_ns();
        if (last_denied)
            return;
    }
    fail_msg("%d batches of %d THROTTLEs, none ended with a denial", MAX_BATCHES, BATCH);
}

/* A 100/s limit with a burst of 10, hammered by 8 clients for at least a second: it never grants
 * more than burst + elapsed / T (T = 10 ms); a slow client sends fewer requests, which only makes
 * that easier to meet, so the hammering lasts until it has been denied too (the bound was
 * pressed). That it does not grant too few is checked against the server's own figures, not
 * against how many requests this machine manages to send in a second: once the budget is
 * spent, a request `retry_after` ms after a denial is granted, and `reset_after` ms after one the
 * whole burst of 10 is granted. Waiting longer than that (a busy machine) only leaves more room,
 * so neither check depends on the machine's speed, and each is made every time. */
static void test_throttle_across_clients(void **state)
{
    enum { N = 8, RETRIES = 20, RESETS = 3 };
    redisContext *cs[N];
    long long granted = 0, denied = 0, retry = 0, reset = 0;
    int64_t t0, t1, at;
    double elapsed_T;

    (void)state;
    for (int i = 0; i < N; i++)
        cs[i] = connect_server();
    expect_status(cs[0], "OK", "LIMIT.SET r100 rate=100/1s,burst=10");
    t0 = mono_ns();
    while (mono_ns() - t0 < 1000000000LL || denied == 0) {
        if (mono_ns() - t0 > 120 * 1000000000LL)
            fail_msg("8 clients for 120 s and never denied (granted %lld)", granted);
        for (int i = 0; i < N; i++)
            assert_int_equal(redisAppendCommand(cs[i], "THROTTLE r100 any"), REDIS_OK);
        for (int i = 0; i < N; i++) {
            redisReply *r;

            assert_int_equal(redisGetReply(cs[i], (void **)&r), REDIS_OK);
            assert_int_equal(field(r, T_LIMIT), 10);
            if (field(r, T_ALLOWED)) {
                granted++;
            } else {
                denied++;
                assert_true(field(r, T_RETRY) >= 1);
                assert_true(field(r, T_RETRY) <= 10);
                assert_int_equal(r->element[T_DENIED_BY]->type, REDIS_REPLY_STRING);
                assert_string_equal(r->element[T_DENIED_BY]->str, "r100");
            }
            freeReplyObject(r);
        }
    }
    t1 = mono_ns();
    elapsed_T = (double)(t1 - t0) / 10e6;
    if (granted > 10 + (long long)elapsed_T + 1)
        fail_msg("granted %lld in %.1f T: more than burst + elapsed/T", granted, elapsed_T);
    assert_true(denied > 0);

    /* Not too few: what a denial promises is granted. */
    for (int k = 0; k < RETRIES; k++) {
        redisReply *r;

        spend_budget(cs[0], &retry, &reset, &at);
        assert_true(retry >= 1 && retry <= 10);
        sleep_until_after(at, retry);
        r = server_fixture_cmd(cs[0], "THROTTLE r100 any");
        if (!field(r, T_ALLOWED))
            fail_msg("denied %lld ms after a denial that said retry_after %lld ms (%lld now)",
                     (long long)((mono_ns() - at) / 1000000), retry, field(r, T_RETRY));
        freeReplyObject(r);
    }
    for (int k = 0; k < RESETS; k++) {
        spend_budget(cs[0], &retry, &reset, &at);
        assert_true(reset >= 1 && reset <= 110);
        sleep_until_after(at, reset);
        for (int i = 0; i < 10; i++)
            assert_int_equal(redisAppendCommand(cs[0], "THROTTLE r100 any"), REDIS_OK);
        for (int i = 0; i < 10; i++) {
            redisReply *r;

            assert_int_equal(redisGetReply(cs[0], (void **)&r), REDIS_OK);
            if (!field(r, T_ALLOWED))
                fail_msg("request %d of the burst denied %lld ms after reset_after said %lld ms",
                         i + 1, (long long)((mono_ns() - at) / 1000000), reset);
            freeReplyObject(r);
        }
    }
    for (int i = 0; i < N; i++)
        redisFree(cs[i]);
}

static void test_cl_throttle_readme(void **state)
{
    redisContext *c = connect_server();
    redisReply *r;
    static const long long want[5] = {0, 16, 15, -1, 2};

    (void)state;
    r = server_fixture_cmd(c, "CL.THROTTLE user123 15 30 60 1");
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 5);
    for (int i = 0; i < 5; i++)
        assert_int_equal(r->element[i]->integer, want[i]);
    freeReplyObject(r);
    /* Integers written with a leading '+' are accepted, as redis-cell accepts them: the same
     * limit, one more unit taken. */
    r = server_fixture_cmd(c, "CL.THROTTLE user123 +15 +30 +60 +1");
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 5);
    assert_int_equal(r->element[0]->integer, 0);
    assert_int_equal(r->element[2]->integer, 14);
    freeReplyObject(r);
    redisFree(c);
}

static void test_errors_parsed(void **state)
{
    redisContext *c = connect_server();
    redisReply *r;
    char *e, lease[128];
    char limit[64], kind[32], key[64];
    long long value, window, retry;

    (void)state;
    e = expect_error(c, "WRONGARGS", "THROTTLE onlyone");
    assert_non_null(strstr(e, "wrong number of arguments for 'throttle'"));
    free(e);
    free(expect_error(c, "NOLIMIT", "THROTTLE nosuch k"));
    free(expect_error(c, "WRONGARGS", "LIMIT.SET bad rate=10/5x"));
    free(expect_error(c, "ERR", "NOSUCHCOMMAND a b"));
    free(expect_error(c, "WRONGARGS", "CL.THROTTLE k -1 1 1"));

    /* A concurrency limit of 1: the second lease is refused with seed 004's fields. */
    expect_status(c, "OK", "LIMIT.SET db concurrency=1,key=explicit,ttl=10s");
    r = server_fixture_cmd(c, "LEASE.ACQUIRE db user%s", " 1");
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_string_equal(r->element[0]->str, "lease");
    snprintf(lease, sizeof(lease), "%s", r->element[1]->str);
    freeReplyObject(r);
    e = expect_error(c, "RATELIMITED", "LEASE.ACQUIRE db user%s", " 1");
    assert_int_equal(sscanf(e,
                            "RATELIMITED limit=%63s kind=%31s key=%63s limit_value=%lld "
                            "window_ms=%lld retry_after_ms=%lld",
                            limit, kind, key, &value, &window, &retry),
                     6);
    assert_string_equal(limit, "db");
    assert_string_equal(kind, "concurrency");
    assert_string_equal(key, "user%201"); /* the space is percent-encoded */
    assert_int_equal(value, 1);
    assert_int_equal(window, 0);
    assert_true(retry > 9000 && retry <= 10000);
    free(e);
    r = server_fixture_cmd(c, "LEASE.RENEW %s TTL 5000", lease);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    assert_int_equal(r->integer, 5000);
    freeReplyObject(r);
    expect_status(c, "OK", "LEASE.RELEASE %s", lease);
    free(expect_error(c, "NOLEASE", "LEASE.RENEW %s", "db/0/999"));
    free(expect_error(c, "NOLEASE", "LEASE.RELEASE %s", "garbage"));
    /* Replacing the limit makes old handles stale. */
    expect_status(c, "OK", "LIMIT.SET db concurrency=2,key=explicit");
    free(expect_error(c, "NOLEASE", "LEASE.RENEW %s", lease));
    redisFree(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_many_clients),
        cmocka_unit_test(test_pipeline_10k),
        cmocka_unit_test(test_throttle_across_clients),
        cmocka_unit_test(test_cl_throttle_readme),
        cmocka_unit_test(test_errors_parsed),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, start_server, stop_server);
}
