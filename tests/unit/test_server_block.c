/* SPDX-License-Identifier: MIT */
/*
 * Tests of the blocked-client mechanism that TASK.GET builds on (conn_block, conn_unblock,
 * server_signal_ready), on an in-process server: the loop runs in a thread, a raw socket plays
 * the client, and the test injects actions into the loop thread through a uv_async handle
 * (libuv's one thread-safe call), as a blocking command handler would do them.
 *
 * Checked: a blocked client runs no command until unblocked, then runs what it sent meanwhile,
 * in order; the timeout fires and its reply comes first; a signal retries blocked clients at the
 * end of the turn; a client that goes away while blocked is cancelled, not answered; a stopping
 * server answers blocked clients (their timeout reply) before it exits 0.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <cmocka.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include "server/conn.h"
#include "server/server.h"
#include "sluice/error.h"

enum action {
    ACT_NONE,
    ACT_BLOCK_TIMEOUT,
    ACT_BLOCK_RETRY,
    ACT_SIGNAL,
    ACT_BLOCK_CANCEL,
    ACT_STOP
};

static server *srv;
static uv_async_t async;
static atomic_int action;
static atomic_int acted;     /* the loop thread ran the action */
static atomic_int ready;     /* the retry callback may answer */
static atomic_int cancelled; /* the cancel callback ran */
static atomic_int retries;   /* retry callback calls */
static int run_status = -1;

/* How long the test waits for anything the loop thread does: a deadline, not a pace (every wait
 * returns as soon as the thing happened), generous so that a busy machine only makes it slower. */
#define DEADLINE_MS 30000

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

static int64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- Callbacks a blocking command would provide ------------------------------------------ */

static void on_timeout(conn *c, void *arg)
{
    (void)arg;
    resp_simple(conn_out(c), "TIMEOUT");
    conn_unblock(c);
}

static int on_retry(conn *c, void *arg)
{
    (void)arg;
    atomic_fetch_add(&retries, 1);
    if (!atomic_load(&ready))
        return 0;
    resp_simple(conn_out(c), "READY");
    conn_unblock(c);
    return 1;
}

static void on_cancel(conn *c, void *arg)
{
    (void)c;
    (void)arg;
    atomic_store(&cancelled, 1);
}

static const conn_block_ops timeout_ops = {NULL, on_timeout, NULL, 0};
static const conn_block_ops retry_ops = {on_retry, on_timeout, on_cancel, 0};

/* The newest client that is not closing. */
static conn *newest_client(void)
{
    for (conn *c = srv->clients; c; c = c->next) {
        if (!(c->flags & CONN_CLOSING))
            return c;
    }
    return NULL;
}

static void on_async(uv_async_t *h)
{
    conn *c = newest_client();

    (void)h;
    switch (atomic_load(&action)) {
    case ACT_BLOCK_TIMEOUT:
        assert_int_equal(conn_block(c, 150, &timeout_ops, NULL), 0);
        assert_int_equal(conn_block(c, 150, &timeout_ops, NULL), SLUICE_ESTATE);
        break;
    case ACT_BLOCK_RETRY:
    case ACT_BLOCK_CANCEL:
        assert_int_equal(conn_block(c, 0, &retry_ops, NULL), 0);
        break;
    case ACT_SIGNAL:
        server_signal_ready(srv);
        break;
    case ACT_STOP:
        uv_close((uv_handle_t *)&async, NULL);
        server_stop(srv);
        break;
    default:
        break;
    }
    atomic_store(&acted, 1);
}

/* Runs an action in the loop thread and waits until it ran. */
static void act(enum action a)
{
    atomic_store(&acted, 0);
    atomic_store(&action, a);
    uv_async_send(&async);
    for (int64_t t0 = mono_ms(); !atomic_load(&acted) && mono_ms() - t0 < DEADLINE_MS;)
        sleep_ms(2);
    assert_true(atomic_load(&acted));
}

/* ---- The client side --------------------------------------------------------------------- */

static int connect_client(void)
{
    struct sockaddr_in a;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    size_t before = srv->nclients;

    assert_true(fd >= 0);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)srv->port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    /* Wait until the server has accepted it (this one, not only the first: the actions pick the
     * newest client). */
    for (int64_t t0 = mono_ms(); srv->nclients == before && mono_ms() - t0 < DEADLINE_MS;)
        sleep_ms(2);
    assert_true(srv->nclients > before);
    sleep_ms(20);
    return fd;
}

static void send_str(int fd, const char *s)
{
    assert_int_equal(write(fd, s, strlen(s)), (ssize_t)strlen(s));
}

/* Reads until `want` bytes came or the time `until` (mono_ms) passed; returns what came,
 * NUL-terminated. */
static const char *recv_until(int fd, size_t want, int64_t until)
{
    static char buf[256];
    size_t n = 0;

    while (n < want && n < sizeof(buf) - 1) {
        struct pollfd p = {fd, POLLIN, 0};
        int64_t left = until - mono_ms();
        ssize_t r;

        if (left < 0 || poll(&p, 1, (int)left) <= 0)
            break;
        r = read(fd, buf + n, sizeof(buf) - 1 - n);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    buf[n] = '\0';
    return buf;
}

/* Reads until `want` bytes came or DEADLINE_MS passed. */
static const char *recv_want(int fd, size_t want)
{
    return recv_until(fd, want, mono_ms() + DEADLINE_MS);
}

static void *run_thread(void *arg)
{
    (void)arg;
    run_status = server_run(srv);
    return NULL;
}

/* ---- The test ---------------------------------------------------------------------------- */

static void test_blocking(void **unused)
{
    server_options o;
    pthread_t th;
    char msg[256];
    int fd, fd2;

    (void)unused;
    server_options_init(&o);
    o.port = 0;
    assert_int_equal(server_new(&o, &srv, msg, sizeof(msg)), 0);
    assert_int_equal(uv_async_init(&srv->loop, &async, on_async), 0);
    assert_int_equal(pthread_create(&th, NULL, run_thread, NULL), 0);

    /* A blocked client runs nothing until its timeout (150 ms) replies; then its PING runs. */
    fd = connect_client();
    {
        int tested = 0;

        /* Nothing may come before the timeout. Whether something came early can be told only
         * when this thread looks in time: a wait until 140 ms after the block (t0 is before it;
         * 10 ms for the loop's coarse clock) that ends with nothing proves it, a byte before then
         * disproves it, a byte seen only after then (this thread was late) tells nothing, and
         * the round is made again. A busy machine only makes more rounds. */
        for (int round = 0; round < 50 && !tested; round++) {
            int64_t t0 = mono_ms(), left;
            struct pollfd p = {fd, POLLIN, 0};
            int rc;

            act(ACT_BLOCK_TIMEOUT);
            send_str(fd, "PING\r\n");
            left = t0 + 140 - mono_ms();
            rc = poll(&p, 1, left > 0 ? (int)left : 0);
            if (rc == 0)
                tested = 1;
            else if (mono_ms() < t0 + 140)
                fail_msg("a reply %" PRId64 " ms after blocking for 150 ms", mono_ms() - t0);
            assert_string_equal(recv_want(fd, 17), "+TIMEOUT\r\n+PONG\r\n");
        }
        assert_true(tested);
    }

    /* Blocked without a timeout: a signal retries it; it answers once ready. */
    act(ACT_BLOCK_RETRY);
    send_str(fd, "PING a\r\nPING b\r\n");
    act(ACT_SIGNAL);
    /* The retry runs at the end of the signal's turn, after the action: wait for it, then let
     * one more turn pass (a no-op action), so that whatever that turn wrote has been sent; it
     * must have written nothing. */
    for (int64_t t0 = mono_ms(); atomic_load(&retries) < 1 && mono_ms() - t0 < DEADLINE_MS;)
        sleep_ms(2);
    assert_true(atomic_load(&retries) >= 1);
    act(ACT_NONE);
    assert_string_equal(recv_until(fd, 1, mono_ms()), "");
    atomic_store(&ready, 1);
    act(ACT_SIGNAL);
    assert_string_equal(recv_want(fd, 22), "+READY\r\n$1\r\na\r\n$1\r\nb\r\n");
    atomic_store(&ready, 0);

    /* A client that leaves while blocked is cancelled. */
    fd2 = connect_client();
    act(ACT_BLOCK_CANCEL);
    assert_int_equal(srv->nblocked, 1);
    close(fd2);
    for (int64_t t0 = mono_ms(); !atomic_load(&cancelled) && mono_ms() - t0 < DEADLINE_MS;)
        sleep_ms(2);
    assert_true(atomic_load(&cancelled));
    assert_int_equal(srv->nblocked, 0);

    /* A stopping server answers its blocked client, then exits 0. */
    act(ACT_BLOCK_RETRY);
    send_str(fd, "PING c\r\n");
    act(ACT_STOP);
    assert_string_equal(recv_want(fd, 10), "+TIMEOUT\r\n");
    assert_int_equal(pthread_join(th, NULL), 0);
    assert_int_equal(run_status, 0);
    close(fd);
    server_free(srv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_blocking),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
