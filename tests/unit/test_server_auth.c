/* SPDX-License-Identifier: MIT */
/*
 * Hostile and idle clients against a real `sluice serve`, over the wire: a connection that never
 * AUTHs is closed after --auth-timeout; with --max-clients N, connections that never AUTH cannot
 * lock an authenticated client out (the oldest of them makes room); --timeout closes an idle
 * client but never one blocked in TASK.GET; wrong passwords are slowed down (each failure in a
 * row doubles the wait before the connection's next command) and the right one still works.
 *
 * Times: only lower bounds on delays (safe on a slow machine) and generous deadlines.
 */
#include <errno.h>
#include <setjmp.h>
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
#include <arpa/inet.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

/* Kept in step with SERVER_AUTH_DELAY_MS (src/server/server.h): the documented first delay. */
#define AUTH_DELAY_MS 100
/* Generous: how long a test waits for something that should take about a second. */
#define DEADLINE_S 30

static server_fixture fx;

static int64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A plain TCP connection to the server, with a receive deadline of DEADLINE_S. */
static int raw_connect(void)
{
    struct sockaddr_in sa;
    struct timeval tv = {DEADLINE_S, 0};
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    assert_true(fd >= 0);
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)fx.port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
    return fd;
}

/* Sends s and reads one reply line into buf. Returns its length, 0 on EOF or reset. */
static size_t raw_cmd(int fd, const char *s, char *buf, size_t buflen)
{
    size_t n = 0;

    if (send(fd, s, strlen(s), MSG_NOSIGNAL) < 0)
        return 0;
    while (n + 1 < buflen) {
        ssize_t got = recv(fd, buf + n, 1, 0);

        if (got <= 0)
            return 0;
        if (buf[n++] == '\n')
            break;
    }
    buf[n] = '\0';
    return n;
}

/* Waits until the server closes fd (EOF or reset), at most DEADLINE_S. Returns the ms waited,
 * or -1 when the connection was still open at the deadline. */
static int64_t wait_closed(int fd)
{
    int64_t t0 = mono_ms();
    char b[256];

    for (;;) {
        ssize_t got = recv(fd, b, sizeof(b), 0);

        if (got == 0 || (got < 0 && errno == ECONNRESET))
            return mono_ms() - t0;
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return -1;
        if (got < 0 && errno != EINTR)
            return mono_ms() - t0;
    }
}

static void expect_reply_str(redisContext *c, int type, const char *want, const char *fmt, ...)
{
    va_list ap;
    redisReply *r;

    va_start(ap, fmt);
    r = redisvCommand(c, fmt, ap);
    va_end(ap);
    assert_non_null(r);
    if (r->type != type || (want && strncmp(r->str, want, strlen(want)) != 0))
        fail_msg("%s: got type %d [%s], want [%s]", fmt, r->type, r->str ? r->str : "", want);
    freeReplyObject(r);
}

static int stop_server(void **state)
{
    (void)state;
    return server_fixture_stop(&fx);
}

/* ---- An unauthenticated connection is closed after --auth-timeout ------------------------ */

static int start_auth_timeout(void **state)
{
    static const char *const args[] = {"--requirepass", "secret", "--auth-timeout", "1", NULL};

    (void)state;
    return server_fixture_start_args(&fx, NULL, args);
}

static void test_unauth_closed_after_timeout(void **state)
{
    redisContext *authed;
    char line[256];
    int fd;
    int64_t t0, waited;

    (void)state;
    t0 = mono_ms();
    fd = raw_connect();
    authed = server_fixture_connect(&fx);
    expect_reply_str(authed, REDIS_REPLY_STATUS, "OK", "AUTH secret");
    /* Before AUTH the connection works (it is told to authenticate) ... */
    assert_true(raw_cmd(fd, "PING\r\n", line, sizeof(line)) > 0);
    assert_non_null(strstr(line, "NOAUTH"));
    /* ... and is closed about a second after it connected, never before. */
    waited = wait_closed(fd);
    assert_true(waited >= 0);
    assert_true(mono_ms() - t0 >= 1000);
    close(fd);
    /* The authenticated client, as old, stays. */
    expect_reply_str(authed, REDIS_REPLY_STATUS, "PONG", "PING");
    redisFree(authed);
}

/* ---- Unauthenticated connections cannot lock out an authenticated client ----------------- */

static int start_reserve(void **state)
{
    static const char *const args[] = {
        "--requirepass", "secret", "--max-clients", "4", "--auth-reserve", "1", NULL};

    (void)state;
    return server_fixture_start_args(&fx, NULL, args);
}

static void test_unauth_cannot_lock_out(void **state)
{
    enum { N = 12 };
    int fds[N];
    char line[256];
    redisContext *first, *late;

    (void)state;
    first = server_fixture_connect(&fx);
    expect_reply_str(first, REDIS_REPLY_STATUS, "OK", "AUTH secret");
    /* Three times --max-clients of connections that never AUTH, each accepted in turn. */
    for (int i = 0; i < N; i++) {
        fds[i] = raw_connect();
        raw_cmd(fds[i], "PING\r\n", line, sizeof(line)); /* NOAUTH, or closed for room */
    }
    /* The authenticated client was never closed for room; a new one connects and AUTHs. */
    expect_reply_str(first, REDIS_REPLY_STATUS, "PONG", "PING");
    late = server_fixture_connect(&fx);
    expect_reply_str(late, REDIS_REPLY_STATUS, "OK", "AUTH secret");
    expect_reply_str(late, REDIS_REPLY_STATUS, "PONG", "PING");
    /* The oldest unauthenticated ones made room: the first is closed, the newest is open. */
    assert_true(wait_closed(fds[0]) >= 0);
    assert_true(raw_cmd(fds[N - 1], "PING\r\n", line, sizeof(line)) > 0);
    assert_non_null(strstr(line, "NOAUTH"));
    {
        redisReply *r = redisCommand(late, "INFO stats");

        assert_non_null(r);
        assert_int_equal(r->type, REDIS_REPLY_STRING);
        assert_null(strstr(r->str, "auth_evictions:0\r\n"));
        assert_non_null(strstr(r->str, "auth_evictions:"));
        freeReplyObject(r);
    }
    for (int i = 0; i < N; i++)
        close(fds[i]);
    redisFree(late);
    redisFree(first);
}

/* ---- --timeout closes idle clients, never a blocked TASK.GET ----------------------------- */

static int start_idle(void **state)
{
    static const char *const args[] = {"--timeout", "1", NULL};

    (void)state;
    return server_fixture_start_args(&fx, "types:\n  work: {}\n", args);
}

static void test_idle_closed_blocked_kept(void **state)
{
    redisContext *worker;
    redisReply *r;
    char line[256];
    int fd;
    int64_t t0;

    (void)state;
    fd = raw_connect();
    assert_true(raw_cmd(fd, "PING\r\n", line, sizeof(line)) > 0);
    t0 = mono_ms();
    worker = server_fixture_connect(&fx);
    /* Blocked three times the idle timeout: never closed for it. */
    r = redisCommand(worker, "TASK.GET work TIMEOUT 3000");
    assert_non_null(r);
    /* Nothing came: an empty array (RESP2). */
    assert_true(r->type == REDIS_REPLY_NIL || (r->type == REDIS_REPLY_ARRAY && r->elements == 0));
    freeReplyObject(r);
    assert_true(mono_ms() - t0 >= 2900);
    /* Back from the wait, it is not idle either: its next command works. */
    expect_reply_str(worker, REDIS_REPLY_STATUS, "PONG", "PING");
    /* The silent one was closed meanwhile (at least a second after its last command). */
    assert_true(wait_closed(fd) >= 0);
    close(fd);
    redisFree(worker);
}

/* ---- Wrong passwords are slowed down ----------------------------------------------------- */

static int start_password(void **state)
{
    static const char *const args[] = {"--requirepass", "secret", NULL};

    (void)state;
    return server_fixture_start_args(&fx, NULL, args);
}

static void test_auth_failures_slowed(void **state)
{
    redisContext *c;
    int64_t t0, took;

    (void)state;
    c = server_fixture_connect(&fx);
    t0 = mono_ms();
    /* Four failures in a row: the second waits 1, the third 2, the fourth 4 delays. */
    for (int i = 0; i < 4; i++)
        expect_reply_str(c, REDIS_REPLY_ERROR, "WRONGPASS", "AUTH wrong%d", i);
    took = mono_ms() - t0;
    if (took < 7 * AUTH_DELAY_MS)
        fail_msg("4 wrong AUTHs took %lld ms, want at least %d", (long long)took,
                 7 * AUTH_DELAY_MS);
    /* The right password still works (after 8 delays), and so does the connection. */
    expect_reply_str(c, REDIS_REPLY_STATUS, "OK", "AUTH secret");
    assert_true(mono_ms() - t0 >= 15 * AUTH_DELAY_MS);
    expect_reply_str(c, REDIS_REPLY_STATUS, "PONG", "PING");
    /* Success resets the count: one more failure costs one delay, not sixteen. */
    t0 = mono_ms();
    expect_reply_str(c, REDIS_REPLY_ERROR, "WRONGPASS", "AUTH wrong");
    expect_reply_str(c, REDIS_REPLY_STATUS, "PONG", "PING");
    assert_true(mono_ms() - t0 >= AUTH_DELAY_MS);
    redisFree(c);

    /* Pipelined guesses gain nothing: 5 in one write take 1 + 2 + 4 + 8 delays. */
    c = server_fixture_connect(&fx);
    t0 = mono_ms();
    for (int i = 0; i < 5; i++)
        assert_int_equal(redisAppendCommand(c, "AUTH wrong%d", i), REDIS_OK);
    for (int i = 0; i < 5; i++) {
        redisReply *r = NULL;

        assert_int_equal(redisGetReply(c, (void **)&r), REDIS_OK);
        assert_int_equal(r->type, REDIS_REPLY_ERROR);
        freeReplyObject(r);
    }
    took = mono_ms() - t0;
    if (took < 15 * AUTH_DELAY_MS)
        fail_msg("5 pipelined wrong AUTHs took %lld ms, want at least %d", (long long)took,
                 15 * AUTH_DELAY_MS);
    redisFree(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_unauth_closed_after_timeout, start_auth_timeout,
                                        stop_server),
        cmocka_unit_test_setup_teardown(test_unauth_cannot_lock_out, start_reserve, stop_server),
        cmocka_unit_test_setup_teardown(test_idle_closed_blocked_kept, start_idle, stop_server),
        cmocka_unit_test_setup_teardown(test_auth_failures_slowed, start_password, stop_server),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
