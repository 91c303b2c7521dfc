/* SPDX-License-Identifier: MIT */
/*
 * The TASK.* commands over the wire with a real client library: starts `sluice serve --port 0`
 * (the binary that test_sluice_bin() finds) with a configuration of task types in a
 * temporary directory, and drives it with hiredis.
 *
 * Checked: a worker that disappears keeps its task until the lease expires, then the task goes to
 * another client (attempt 2); 20 workers in their own threads, blocked on TASK.GET while a
 * producer adds 200 tasks, get every task exactly once (each acked, none redelivered); blocked
 * workers are served oldest first; a worker that disconnects while blocked is dropped and the
 * task added next goes to a live worker. The server is stopped with SIGTERM and must exit 0.
 * Timing bounds are loose: the machine may be busy.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
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

/* The task types of the tests. */
static const char config_yaml[] = "types:\n"
                                  "  short:\n"
                                  "    lease: 1s\n"
                                  "  work: {}\n"
                                  "  fifo: {}\n"
                                  "  lost:\n"
                                  "    lease: 1s\n";

static server_fixture fx;

static int64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

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

static redisContext *connect_server(void)
{
    return server_fixture_connect(&fx);
}

/* Runs a command that replies with an integer (TASK.ADD: the id) and returns it. */
static long long cmd_int(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    redisReply *r;
    long long v;

    va_start(ap, fmt);
    r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (!r)
        fail_msg("command %s: %s", fmt, c->errstr);
    if (r->type != REDIS_REPLY_INTEGER)
        fail_msg("%s: wanted an integer, got type %d %s", fmt, r->type, r->str ? r->str : "");
    v = r->integer;
    freeReplyObject(r);
    return v;
}

static void expect_ok(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    redisReply *r;

    va_start(ap, fmt);
    r = redisvCommand(c, fmt, ap);
    va_end(ap);
    assert_non_null(r);
    if (r->type != REDIS_REPLY_STATUS || strcmp(r->str, "OK") != 0)
        fail_msg("%s: wanted +OK, got type %d %s", fmt, r->type, r->str ? r->str : "");
    freeReplyObject(r);
}

/* A task of a TASK.GET reply (RESP2): [id, type, payload, attempt, lease_until_ms]. */
typedef struct got_task {
    long long id;
    long long attempt;
    long long lease_until_ms;
} got_task;

/* Reads one TASK.GET reply. Returns the number of tasks (0 on timeout), filling out[0..]. */
static size_t parse_get(const redisReply *r, got_task *out, size_t max)
{
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_true(r->elements <= max);
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *t = r->element[i];

        assert_int_equal(t->type, REDIS_REPLY_ARRAY);
        assert_int_equal(t->elements, 5);
        assert_int_equal(t->element[0]->type, REDIS_REPLY_INTEGER);
        assert_int_equal(t->element[1]->type, REDIS_REPLY_STRING);
        assert_int_equal(t->element[2]->type, REDIS_REPLY_STRING);
        assert_int_equal(t->element[3]->type, REDIS_REPLY_INTEGER);
        assert_int_equal(t->element[4]->type, REDIS_REPLY_INTEGER);
        out[i].id = t->element[0]->integer;
        out[i].attempt = t->element[3]->integer;
        out[i].lease_until_ms = t->element[4]->integer;
    }
    return r->elements;
}

/* TASK.GET with a reply awaited now. Returns the number of tasks. */
static size_t get_tasks(redisContext *c, got_task *out, size_t max, const char *fmt, ...)
{
    va_list ap;
    redisReply *r;
    size_t n;

    va_start(ap, fmt);
    r = redisvCommand(c, fmt, ap);
    va_end(ap);
    if (!r)
        fail_msg("command %s: %s", fmt, c->errstr);
    n = parse_get(r, out, max);
    freeReplyObject(r);
    return n;
}

/* Sends a command without waiting for its reply (a worker that will block). */
static void send_only(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    int done = 0;

    va_start(ap, fmt);
    assert_int_equal(redisvAppendCommand(c, fmt, ap), REDIS_OK);
    va_end(ap);
    while (!done)
        assert_int_equal(redisBufferWrite(c, &done), REDIS_OK);
}

static long long blocked_clients(redisContext *c)
{
    redisReply *r = server_fixture_cmd(c, "INFO clients");
    const char *p;
    long long n = -1;

    assert_int_equal(r->type, REDIS_REPLY_STRING);
    p = strstr(r->str, "blocked_clients:");
    if (p)
        n = strtoll(p + strlen("blocked_clients:"), NULL, 10);
    freeReplyObject(r);
    return n;
}

/* Waits until the server counts n blocked clients (at most 30 s: a deadline, not a pace). */
static void wait_blocked(redisContext *c, long long n)
{
    int64_t t0 = mono_ms();
    long long now;

    while ((now = blocked_clients(c)) != n) {
        if (mono_ms() - t0 > 30000)
            fail_msg("waited 30 s for %lld blocked clients; there are %lld", n, now);
        server_fixture_sleep_ms(5);
    }
}

/* The state field of TASK.INFO id (caller frees). */
static char *task_state(redisContext *c, long long id)
{
    redisReply *r = server_fixture_cmd(c, "TASK.INFO %lld", id);
    char *state = NULL;

    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        if (strcmp(r->element[i]->str, "state") == 0)
            state = strdup(r->element[i + 1]->str);
    }
    freeReplyObject(r);
    assert_non_null(state);
    return state;
}

/* ---- Tests ------------------------------------------------------------------------------- */

/* A worker takes a task and vanishes: at least once, the task comes back to another client
 * once its 1 s lease expires, as attempt 2, and no earlier. */
static void test_worker_disappears(void **state)
{
    redisContext *producer = connect_server(), *a = connect_server(), *b = connect_server();
    got_task t[2];
    long long id;
    int64_t t0, waited;
    char *st;

    (void)state;
    id = cmd_int(producer, "TASK.ADD short %s", "{\"job\":1}");
    /* t0 before the delivery, not after its reply: the lease starts after t0 however late this
     * thread reads the reply, so the redelivery can be no earlier than t0 + 1 s. The TIMEOUT
     * (1 min) is only a deadline; coming back near it would be late. */
    t0 = mono_ms();
    assert_int_equal(get_tasks(a, t, 2, "TASK.GET short"), 1);
    assert_int_equal(t[0].id, id);
    assert_int_equal(t[0].attempt, 1);
    redisFree(a); /* the worker is gone, holding the task */
    assert_int_equal(get_tasks(b, t, 2, "TASK.GET short TIMEOUT 60000"), 1);
    waited = mono_ms() - t0;
    assert_int_equal(t[0].id, id);
    assert_int_equal(t[0].attempt, 2);
    if (waited < 500 || waited > 50000)
        fail_msg("redelivered after %" PRId64 " ms; the lease is 1 s", waited);
    expect_ok(b, "TASK.ACK %lld", id);
    st = task_state(producer, id);
    assert_string_equal(st, "done");
    free(st);
    redisFree(b);
    redisFree(producer);
}

enum { WORKERS = 20, TASKS = 200 };

static atomic_int delivered[TASKS + 1]; /* per task id (ids of this test are base + 1 ..) */
static atomic_int acked;
static atomic_int worker_errors;
static atomic_int redelivered;
static long long id_base;

static void *worker_main(void *arg)
{
    redisContext *c = arg;
    int first = 1;

    /* The first TASK.GET was sent by the main thread (so that every worker is blocked before
     * the producer starts); then each worker acks what it got and asks again. */
    while (atomic_load(&acked) < TASKS) {
        redisReply *r = NULL;

        if (!first)
            r = redisCommand(c, "TASK.GET work TIMEOUT 500");
        else if (redisGetReply(c, (void **)&r) != REDIS_OK)
            r = NULL;
        first = 0;
        if (!r || r->type != REDIS_REPLY_ARRAY) {
            atomic_fetch_add(&worker_errors, 1);
            freeReplyObject(r);
            break;
        }
        for (size_t i = 0; i < r->elements; i++) {
            const redisReply *t = r->element[i];
            long long id = t->element[0]->integer - id_base;
            redisReply *ack;

            if (id < 1 || id > TASKS || t->element[3]->integer != 1) {
                atomic_fetch_add(&redelivered, 1);
                continue;
            }
            atomic_fetch_add(&delivered[id], 1);
            ack = redisCommand(c, "TASK.ACK %lld", t->element[0]->integer);
            if (!ack || ack->type != REDIS_REPLY_STATUS)
                atomic_fetch_add(&worker_errors, 1);
            else
                atomic_fetch_add(&acked, 1);
            freeReplyObject(ack);
        }
        freeReplyObject(r);
    }
    return NULL;
}

/* 20 workers blocked on TASK.GET, 200 tasks from a producer: each delivered exactly once. */
static void test_many_workers(void **state)
{
    redisContext *producer = connect_server();
    redisContext *ws[WORKERS];
    pthread_t th[WORKERS];
    got_task first;
    int64_t t0;

    (void)state;
    /* Ids are global: the ids of this test start after the highest so far. */
    id_base = cmd_int(producer, "TASK.ADD work {}");
    assert_int_equal(get_tasks(producer, &first, 1, "TASK.GET work"), 1);
    expect_ok(producer, "TASK.ACK %lld", first.id);
    for (int i = 0; i < WORKERS; i++) {
        ws[i] = connect_server();
        send_only(ws[i], "TASK.GET work TIMEOUT 60000");
    }
    wait_blocked(producer, WORKERS);
    for (int i = 0; i < WORKERS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, ws[i]), 0);
    t0 = mono_ms();
    for (int i = 0; i < TASKS; i++)
        assert_int_equal(redisAppendCommand(producer, "TASK.ADD work {\"i\":%d}", i), REDIS_OK);
    for (int i = 0; i < TASKS; i++) {
        redisReply *r;

        assert_int_equal(redisGetReply(producer, (void **)&r), REDIS_OK);
        assert_int_equal(r->type, REDIS_REPLY_INTEGER);
        assert_int_equal(r->integer, id_base + 1 + i);
        freeReplyObject(r);
    }
    for (int i = 0; i < WORKERS; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    assert_int_equal(atomic_load(&worker_errors), 0);
    assert_int_equal(atomic_load(&redelivered), 0);
    assert_int_equal(atomic_load(&acked), TASKS);
    for (int i = 1; i <= TASKS; i++) {
        if (atomic_load(&delivered[i]) != 1)
            fail_msg("task %lld delivered %d times", id_base + i, atomic_load(&delivered[i]));
    }
    /* A deadline for "not stuck", not a speed: the machine may be busy. */
    if (mono_ms() - t0 > 120000)
        fail_msg("200 tasks took %" PRId64 " ms", mono_ms() - t0);
    /* Nothing is left running or queued. */
    {
        redisReply *r = server_fixture_cmd(producer, "INFO engine");

        assert_non_null(strstr(r->str, "tasks_queued:0"));
        assert_non_null(strstr(r->str, "tasks_running:0"));
        freeReplyObject(r);
    }
    for (int i = 0; i < WORKERS; i++)
        redisFree(ws[i]);
    redisFree(producer);
}

/* Three workers block in the order A, B, C; tasks added one by one go to A, then B, then C. */
static void test_oldest_first(void **state)
{
    redisContext *producer = connect_server();
    redisContext *w[3];
    got_task t[2];
    long long ids[3];

    (void)state;
    for (int i = 0; i < 3; i++) {
        w[i] = connect_server();
        send_only(w[i], "TASK.GET fifo TIMEOUT 60000");
        wait_blocked(producer, i + 1);
    }
    for (int i = 0; i < 3; i++) {
        redisReply *r;

        ids[i] = cmd_int(producer, "TASK.ADD fifo {\"n\":%d}", i);
        assert_int_equal(redisGetReply(w[i], (void **)&r), REDIS_OK);
        assert_int_equal(parse_get(r, t, 2), 1);
        freeReplyObject(r);
        assert_int_equal(t[0].id, ids[i]);
        wait_blocked(producer, 2 - i);
    }
    /* All three at once, in one pipeline: still one each, oldest first. */
    for (int i = 0; i < 3; i++) {
        send_only(w[i], "TASK.GET fifo TIMEOUT 60000");
        wait_blocked(producer, i + 1);
    }
    for (int i = 0; i < 3; i++)
        assert_int_equal(redisAppendCommand(producer, "TASK.ADD fifo {}"), REDIS_OK);
    for (int i = 0; i < 3; i++) {
        redisReply *r;

        assert_int_equal(redisGetReply(producer, (void **)&r), REDIS_OK);
        ids[i] = r->integer;
        freeReplyObject(r);
    }
    for (int i = 0; i < 3; i++) {
        redisReply *r;

        assert_int_equal(redisGetReply(w[i], (void **)&r), REDIS_OK);
        assert_int_equal(parse_get(r, t, 2), 1);
        freeReplyObject(r);
        assert_int_equal(t[0].id, ids[i]);
    }
    for (int i = 0; i < 3; i++)
        redisFree(w[i]);
    redisFree(producer);
}

/* A worker that disconnects while blocked is dropped: the next task goes to a live worker, as
 * its first attempt. Without waiting for the server to notice, the task still arrives (at
 * worst after its 1 s lease, had it been handed to the closing connection). */
static void test_disconnect_while_blocked(void **state)
{
    redisContext *producer = connect_server(), *gone, *live = connect_server();
    got_task t[2];
    long long id;

    (void)state;
    gone = connect_server();
    send_only(gone, "TASK.GET lost TIMEOUT 10000");
    wait_blocked(producer, 1);
    redisFree(gone);
    wait_blocked(producer, 0);
    id = cmd_int(producer, "TASK.ADD lost {\"a\":1}");
    assert_int_equal(get_tasks(live, t, 2, "TASK.GET lost TIMEOUT 30000"), 1);
    assert_int_equal(t[0].id, id);
    assert_int_equal(t[0].attempt, 1);
    expect_ok(live, "TASK.ACK %lld", id);

    /* The close and the submit race. */
    gone = connect_server();
    send_only(gone, "TASK.GET lost TIMEOUT 10000");
    wait_blocked(producer, 1);
    redisFree(gone);
    id = cmd_int(producer, "TASK.ADD lost {\"a\":2}");
    assert_int_equal(get_tasks(live, t, 2, "TASK.GET lost TIMEOUT 30000"), 1);
    assert_int_equal(t[0].id, id);
    assert_true(t[0].attempt == 1 || t[0].attempt == 2);
    expect_ok(live, "TASK.ACK %lld", id);
    redisFree(live);
    redisFree(producer);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_worker_disappears),
        cmocka_unit_test(test_many_workers),
        cmocka_unit_test(test_oldest_first),
        cmocka_unit_test(test_disconnect_while_blocked),
    };
    signal(SIGPIPE, SIG_IGN);
    return cmocka_run_group_tests(tests, start_server, stop_server);
}
