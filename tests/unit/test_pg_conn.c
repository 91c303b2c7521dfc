/* SPDX-License-Identifier: MIT */
/*
 * The PostgreSQL store's connection (store/pg_conn.c) without a server: the conninfo check
 * (libpq's own parser), the options pgconn_new refuses, that nothing is called back inside
 * pgconn_new or after pgconn_free, and out-of-memory sweeps of pgconn_new and of an attempt on
 * the loop (each failure is SLUICE_ENOMEM, or a DOWN with a reason, and leaks nothing). Its
 * behaviour against a real PostgreSQL (pipelining, deadlines, reconnects, the migration) is
 * tests/server/pg_conn.sh's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include <unistd.h>
#include <uv.h>

#include "sluice/error.h"
#include "store/pg_conn.h"
#include "pg_fixture.h"
#include "testutil.h"

static const pgconn_stmt stmts[] = {{"one", "SELECT 1", 0, 0}};

typedef struct seen {
    int nstate, ndown;
    char why[300];
} seen;

static void on_state(void *arg, pgconn_state s, const char *why)
{
    seen *x = arg;

    x->nstate++;
    if (s == PGCONN_DOWN) {
        x->ndown++;
        snprintf(x->why, sizeof x->why, "%s", why ? why : "(null)");
    }
}

static void on_notify(void *arg, const char *payload)
{
    (void)arg;
    (void)payload;
}

/* A loopback port nothing listens on (bound by the kernel's choice, then closed). */
static int closed_port(void)
{
    int port = 0, fd = pgfix_loopback_socket(0, &port);

    assert_true(fd >= 0);
    close(fd);
    return port;
}

static void test_state_names(void **state)
{
    (void)state;
    assert_string_equal(pgconn_state_name(PGCONN_DOWN), "down");
    assert_string_equal(pgconn_state_name(PGCONN_CONNECTING), "connecting");
    assert_string_equal(pgconn_state_name(PGCONN_LOADING), "loading");
    assert_string_equal(pgconn_state_name(PGCONN_UP), "up");
    assert_string_equal(pgconn_state_name(PGCONN_REFUSED), "refused");
}

static void test_check_conninfo(void **state)
{
    char err[200], tiny[8];

    (void)state;
    assert_int_equal(pgconn_check_conninfo("host=127.0.0.1 port=5432 dbname=x", err, sizeof err),
                     0);
    assert_string_equal(err, "");
    assert_int_equal(
        pgconn_check_conninfo("postgresql://u@h:5432/db?sslmode=disable", err, sizeof err), 0);
    assert_int_equal(pgconn_check_conninfo("", err, sizeof err), 0); /* libpq's defaults */
    assert_int_equal(pgconn_check_conninfo("host=x nonsense=1", err, sizeof err), SLUICE_EINVAL);
    assert_non_null(strstr(err, "nonsense"));
    assert_null(strchr(err, '\n'));
    assert_int_equal(pgconn_check_conninfo("host='unterminated", err, sizeof err), SLUICE_EINVAL);
    assert_true(err[0] != '\0' && !strchr(err, '\n'));
    assert_int_equal(pgconn_check_conninfo("postgresql://[::1", err, sizeof err), SLUICE_EINVAL);
    assert_true(err[0] != '\0' && !strchr(err, '\n'));
    assert_int_equal(pgconn_check_conninfo(NULL, err, sizeof err), SLUICE_EINVAL);
    assert_int_equal(pgconn_check_conninfo("host=x nonsense=1", NULL, 0), SLUICE_EINVAL);
    assert_int_equal(pgconn_check_conninfo("host=x nonsense=1", tiny, sizeof tiny), SLUICE_EINVAL);
    assert_int_equal(strlen(tiny), sizeof tiny - 1);
}

static pgconn_options good_options(seen *x)
{
    pgconn_options o = {
        .conninfo = "host=127.0.0.1 port=1 user=sluice dbname=postgres",
        .timeout_ms = 1000,
        .stmts = stmts,
        .nstmts = 1,
        .on_state = on_state,
        .arg = x,
        .listen = "chan",
        .on_notify = on_notify,
    };

    return o;
}

static void test_new_refuses(void **state)
{
    uv_loop_t loop;
    seen x = {0};
    pgconn_options o;
    pgconn_stmt bad_stmt = {NULL, "SELECT 1", 0, 0};
    pgconn *pc = (pgconn *)&x;

    (void)state;
    uv_loop_init(&loop);
    o = good_options(&x);
    o.conninfo = NULL;
    assert_int_equal(pgconn_new(&loop, &o, &pc), SLUICE_EINVAL);
    assert_null(pc);
    o = good_options(&x);
    o.conninfo = "host=x nonsense=1";
    assert_int_equal(pgconn_new(&loop, &o, &pc), SLUICE_EINVAL);
    o = good_options(&x);
    o.timeout_ms = 0;
    assert_int_equal(pgconn_new(&loop, &o, &pc), SLUICE_EINVAL);
    o = good_options(&x);
    o.stmts = NULL;
    assert_int_equal(pgconn_new(&loop, &o, &pc), SLUICE_EINVAL);
    o = good_options(&x);
    o.stmts = &bad_stmt;
    assert_int_equal(pgconn_new(&loop, &o, &pc), SLUICE_EINVAL);
    o = good_options(&x);
    o.listen = "";
    assert_int_equal(pgconn_new(&loop, &o, &pc), SLUICE_EINVAL);
    o = good_options(&x);
    o.on_notify = NULL;
    assert_int_equal(pgconn_new(&loop, &o, &pc), SLUICE_EINVAL);
    assert_int_equal(x.nstate, 0);
    pgconn_free(NULL);
    assert_int_equal(uv_run(&loop, UV_RUN_NOWAIT), 0);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static void reply_never(void *arg, const struct pg_result *r, const char *why)
{
    (void)r;
    (void)why;
    fail_msg("call %p answered", arg);
}

/* New, then free before the loop ran: DOWN, refusing calls, and not one callback. */
static void test_new_free_quiet(void **state)
{
    uv_loop_t loop;
    seen x = {0};
    pgconn_options o = good_options(&x);
    pgconn_call call = {.stmt = "one", .fn = reply_never};
    pgconn_stats st;
    pgconn *pc;

    (void)state;
    uv_loop_init(&loop);
    assert_int_equal(pgconn_new(&loop, &o, &pc), 0);
    assert_int_equal(pgconn_get_state(pc), PGCONN_DOWN);
    assert_string_equal(pgconn_last_error(pc), "");
    assert_int_equal(pgconn_send(pc, &call), SLUICE_ESTATE);
    pgconn_get_stats(pc, &st);
    assert_int_equal(st.calls + st.connects + st.failed_connects + st.in_flight, 0);
    pgconn_free(pc);
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(x.nstate, 0);
    assert_int_equal(uv_loop_close(&loop), 0);
}

/* Nothing listens: each attempt goes DOWN with libpq's reason (one line) and is retried. */
static void test_refused_port(void **state)
{
    uv_loop_t loop;
    seen x = {0};
    char conninfo[100];
    pgconn_options o = good_options(&x);
    pgconn_stats st;
    pgconn *pc;

    (void)state;
    snprintf(conninfo, sizeof conninfo, "host=127.0.0.1 port=%d user=sluice dbname=postgres",
             closed_port());
    o.conninfo = conninfo;
    uv_loop_init(&loop);
    assert_int_equal(pgconn_new(&loop, &o, &pc), 0);
    while (x.ndown < 2)
        uv_run(&loop, UV_RUN_ONCE);
    assert_non_null(strstr(x.why, "cannot connect: "));
    assert_null(strchr(x.why, '\n'));
    assert_string_equal(pgconn_last_error(pc), x.why);
    pgconn_get_stats(pc, &st);
    assert_int_equal(st.failed_connects, 2);
    assert_int_equal(st.connects, 0);
    pgconn_free(pc);
    assert_int_equal(uv_run(&loop, UV_RUN_DEFAULT), 0);
    assert_int_equal(uv_loop_close(&loop), 0);
}

static int new_and_free(void *arg)
{
    uv_loop_t loop;
    seen x = {0};
    pgconn_options o = good_options(&x);
    pgconn *pc;
    int rc;

    (void)arg;
    uv_loop_init(&loop);
    rc = pgconn_new(&loop, &o, &pc);
    if (rc == 0)
        pgconn_free(pc);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    return rc;
}

static void test_oom_new(void **state)
{
    (void)state;
    assert_true(oom_sweep(new_and_free, NULL, 50) > 1);
}

/* Every allocation of a connection attempt failed in turn: the attempt goes DOWN (with a
 * reason), and free leaks nothing. */
static void test_oom_attempt(void **state)
{
    char conninfo[100];

    (void)state;
    snprintf(conninfo, sizeof conninfo, "host=127.0.0.1 port=%d user=sluice dbname=postgres",
             closed_port());
    for (long n = 1; n <= 8; n++) {
        uv_loop_t loop;
        seen x = {0};
        pgconn_options o = good_options(&x);
        pgconn *pc;

        o.conninfo = conninfo;
        uv_loop_init(&loop);
        oom_install(n);
        if (pgconn_new(&loop, &o, &pc) == 0) {
            while (x.ndown < 1)
                uv_run(&loop, UV_RUN_ONCE);
            assert_true(x.why[0] != '\0');
            pgconn_free(pc);
        }
        uv_run(&loop, UV_RUN_DEFAULT);
        assert_int_equal(oom_live_blocks(), 0);
        oom_uninstall();
        uv_loop_close(&loop);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_state_names),  cmocka_unit_test(test_check_conninfo),
        cmocka_unit_test(test_new_refuses),  cmocka_unit_test(test_new_free_quiet),
        cmocka_unit_test(test_refused_port), cmocka_unit_test(test_oom_new),
        cmocka_unit_test(test_oom_attempt),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
