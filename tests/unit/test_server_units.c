/* SPDX-License-Identifier: MIT */
/*
 * Tests of the pure pieces of the server: the command table (names, arities, flags, lookup),
 * the CL.THROTTLE reply mapping against redis-cell's own test table (driven through a real
 * sluice limit on a simulated clock), the protected-mode decision, policy equality, and the
 * argument and reply helpers.
 */
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <arpa/inet.h>
#include <cmocka.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "server/commands.h"
#include "server/server.h"
#include "sluice/error.h"
#include "sluice/limit.h"
#include "sluice/policy_spec.h"

#define MS  SLUICE_NS_PER_MS
#define SEC SLUICE_NS_PER_SEC

/* ---- The command table ------------------------------------------------------------------- */

static void test_table_rows(void **unused)
{
    (void)unused;
    assert_true(command_count >= 20);
    for (size_t i = 0; i < command_count; i++) {
        const command_def *d = &command_table[i];
        char upper[64];

        assert_non_null(d->name);
        assert_non_null(d->handler);
        assert_non_null(d->summary);
        assert_int_not_equal(d->arity, 0);
        for (const char *p = d->name; *p; p++)
            assert_false(*p >= 'A' && *p <= 'Z');
        for (size_t k = 0; k < i; k++)
            assert_string_not_equal(d->name, command_table[k].name);
        /* Found by its own name, in any case. */
        assert_ptr_equal(command_lookup(d->name, strlen(d->name)), d);
        for (size_t k = 0; k <= strlen(d->name); k++)
            upper[k] =
                (char)(d->name[k] >= 'a' && d->name[k] <= 'z' ? d->name[k] - 32 : d->name[k]);
        assert_ptr_equal(command_lookup(upper, strlen(upper)), d);
        /* Only the commands a client needs to log in run before AUTH. */
        if (d->flags & CMD_NOAUTH)
            assert_true(strcmp(d->name, "auth") == 0 || strcmp(d->name, "hello") == 0 ||
                        strcmp(d->name, "quit") == 0);
    }
}

static void test_table_arity(void **unused)
{
    static const struct {
        const char *name;
        int arity;
    } want[] = {
        {"ping", -1},         {"auth", -2},        {"hello", -1},         {"quit", -1},
        {"throttle", -3},     {"cl.throttle", -5}, {"lease.acquire", -3}, {"lease.renew", -2},
        {"lease.release", 2}, {"limit.set", 3},    {"limit.get", 2},      {"limit.list", 1},
        {"limit.del", 2},     {"limit.reset", -2}, {"config", -2},        {"info", -1},
        {"command", -1},
    };

    (void)unused;
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        const command_def *d = command_lookup(want[i].name, strlen(want[i].name));

        assert_non_null(d);
        assert_int_equal(d->arity, want[i].arity);
    }
    assert_true(command_arity_ok(2, 2));
    assert_false(command_arity_ok(2, 1));
    assert_false(command_arity_ok(2, 3));
    assert_true(command_arity_ok(-3, 3));
    assert_true(command_arity_ok(-3, 10));
    assert_false(command_arity_ok(-3, 2));
    assert_true(command_arity_ok(-1, 1));
}

static void test_lookup_misses(void **unused)
{
    (void)unused;
    assert_null(command_lookup("nope", 4));
    assert_null(command_lookup("", 0));
    assert_null(command_lookup("pin", 3));
    assert_null(command_lookup("pingg", 5));
    assert_null(command_lookup("ping\0", 5));
    assert_null(command_lookup("throttle", 7));
    /* Longer than any name: refused before hashing. */
    assert_null(command_lookup("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 48));
}

/* ---- CL.THROTTLE against redis-cell's table ---------------------------------------------- */

/* redis-cell's rounding of a duration to seconds (for the expected values). */
static int64_t cell_secs(int64_t ns)
{
    int64_t s = ns / SEC;

    return (ns % SEC) / MS > 0 ? s + 1 : s;
}

static void test_cell_table(void **unused)
{
    /* redis-cell src/cell/mod.rs it_rate_limits: limit 5 (max_burst 4), 1 per second. */
    static const struct {
        int64_t at_ms, volume, remaining, reset_ms, retry_ms; /* retry -1000: allowed */
        int limited;
    } cases[] = {
        {0, 6, 5, 0, -1000, 1},       {0, 1, 4, 1000, -1000, 0},    {0, 1, 3, 2000, -1000, 0},
        {0, 1, 2, 3000, -1000, 0},    {0, 1, 1, 4000, -1000, 0},    {0, 1, 0, 5000, -1000, 0},
        {0, 1, 0, 5000, 1000, 1},     {3000, 1, 2, 3000, -1000, 0}, {3100, 1, 1, 3900, -1000, 0},
        {4000, 1, 1, 4000, -1000, 0}, {8000, 1, 4, 1000, -1000, 0}, {9500, 1, 4, 1000, -1000, 0},
        {9500, 0, 4, 1000, -1000, 0}, {9500, 2, 2, 3000, -1000, 0}, {9500, 5, 2, 3000, 3000, 1},
    };
    const int64_t start = INT64_C(1700000000) * SEC;
    sluice_limit_def def;
    sluice_limit *lim;

    (void)unused;
    sluice_limit_def_init(&def, SLUICE_RATE);
    def.limit = 1;
    def.period_ns = SEC;
    def.burst = 5;
    assert_int_equal(sluice_limit_new(&def, &lim, NULL, 0), 0);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        sluice_decision d;
        cell_reply r;
        int64_t q = cases[i].volume;

        assert_int_equal(sluice_limit_decide(lim, "foo", 3, q ? q : 1, start + cases[i].at_ms * MS,
                                             q ? 0 : SLUICE_PEEK, &d),
                         0);
        cell_map_decision(&d, q, SEC, &r);
        if (r.limited != cases[i].limited || r.limit != 5 || r.remaining != cases[i].remaining ||
            r.reset_after != cell_secs(cases[i].reset_ms * MS) ||
            r.retry_after != (cases[i].retry_ms < 0 ? -1 : cell_secs(cases[i].retry_ms * MS)))
            fail_msg("case %zu: got %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64, i,
                     r.limited, r.limit, r.remaining, r.retry_after, r.reset_after);
    }
    sluice_limit_free(lim);
}

/* The example of redis-cell's README: CL.THROTTLE user123 15 30 60 1 -> 0 16 15 -1 2. */
static void test_cell_readme(void **unused)
{
    sluice_limit_def def;
    sluice_limit *lim;
    sluice_decision d;
    cell_reply r;

    (void)unused;
    sluice_limit_def_init(&def, SLUICE_RATE);
    def.limit = 30;
    def.period_ns = 60 * SEC;
    def.burst = 16;
    assert_int_equal(sluice_limit_new(&def, &lim, NULL, 0), 0);
    assert_int_equal(sluice_limit_decide(lim, "user123", 7, 1, 1000 * SEC, 0, &d), 0);
    cell_map_decision(&d, 1, 2 * SEC, &r);
    assert_int_equal(r.limited, 0);
    assert_int_equal(r.limit, 16);
    assert_int_equal(r.remaining, 15);
    assert_int_equal(r.retry_after, -1);
    assert_int_equal(r.reset_after, 2);
    sluice_limit_free(lim);
}

static void test_cell_rounding(void **unused)
{
    sluice_decision d;
    cell_reply r;

    (void)unused;
    memset(&d, 0, sizeof(d));
    d.limit = 2;
    d.allowed = 0;
    d.retry_after_ns = 1 * SEC + 999 * 1000; /* under a millisecond past: not bumped */
    d.reset_after_ns = 1 * SEC + MS;         /* a millisecond past: bumped */
    cell_map_decision(&d, 1, SEC, &r);
    assert_int_equal(r.limited, 1);
    assert_int_equal(r.retry_after, 1);
    assert_int_equal(r.reset_after, 2);
    d.retry_after_ns = SLUICE_NEVER;
    cell_map_decision(&d, 1, SEC, &r);
    assert_int_equal(r.retry_after, -1);
    d.remaining = -3;
    cell_map_decision(&d, 1, SEC, &r);
    assert_int_equal(r.remaining, 0);
}

/* ---- Protected mode ---------------------------------------------------------------------- */

static int allowed4(const char *ip, int has_password, int protected_mode)
{
    struct sockaddr_in in;

    memset(&in, 0, sizeof(in));
    in.sin_family = AF_INET;
    assert_int_equal(inet_pton(AF_INET, ip, &in.sin_addr), 1);
    return server_peer_allowed((const struct sockaddr *)&in, has_password, protected_mode);
}

static int allowed6(const char *ip)
{
    struct sockaddr_in6 in6;

    memset(&in6, 0, sizeof(in6));
    in6.sin6_family = AF_INET6;
    assert_int_equal(inet_pton(AF_INET6, ip, &in6.sin6_addr), 1);
    return server_peer_allowed((const struct sockaddr *)&in6, 0, 1);
}

static void test_protected_mode(void **unused)
{
    struct sockaddr un;

    (void)unused;
    assert_true(allowed4("127.0.0.1", 0, 1));
    assert_true(allowed4("127.10.20.30", 0, 1));
    assert_false(allowed4("10.0.0.1", 0, 1));
    assert_false(allowed4("192.168.1.2", 0, 1));
    assert_false(allowed4("128.0.0.1", 0, 1));
    assert_true(allowed4("10.0.0.1", 1, 1)); /* a password lifts it */
    assert_true(allowed4("10.0.0.1", 0, 0)); /* so does --protected-mode no */
    assert_true(allowed6("::1"));
    assert_true(allowed6("::ffff:127.0.0.1"));
    assert_false(allowed6("::ffff:10.0.0.1"));
    assert_false(allowed6("2001:db8::1"));
    assert_false(allowed6("::"));
    assert_false(server_peer_allowed(NULL, 0, 1));
    assert_true(server_peer_allowed(NULL, 1, 1));
    memset(&un, 0, sizeof(un));
    un.sa_family = AF_UNIX;
    assert_true(server_peer_allowed(&un, 0, 1));
}

/* ---- Helpers ----------------------------------------------------------------------------- */

static void test_parse_int(void **unused)
{
    int64_t v;

    (void)unused;
    assert_int_equal(command_parse_int("0", 1, &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(command_parse_int("-1", 2, &v), 0);
    assert_int_equal(v, -1);
    assert_int_equal(command_parse_int("9223372036854775807", 19, &v), 0);
    assert_int_equal(v, INT64_MAX);
    assert_int_equal(command_parse_int("-9223372036854775808", 20, &v), 0);
    assert_int_equal(v, INT64_MIN);
    assert_int_equal(command_parse_int("9223372036854775808", 19, &v), -1);
    assert_int_equal(command_parse_int("", 0, &v), -1);
    assert_int_equal(command_parse_int("-", 1, &v), -1);
    assert_int_equal(command_parse_int("1a", 2, &v), -1);
    assert_int_equal(command_parse_int(" 1", 2, &v), -1);
    assert_int_equal(command_parse_int("1\0", 2, &v), -1);
    /* A leading '+' is accepted (redis-cell accepts it), once, before the digits. */
    assert_int_equal(command_parse_int("+1", 2, &v), 0);
    assert_int_equal(v, 1);
    assert_int_equal(command_parse_int("+9223372036854775807", 20, &v), 0);
    assert_int_equal(v, INT64_MAX);
    assert_int_equal(command_parse_int("+9223372036854775808", 20, &v), -1);
    assert_int_equal(command_parse_int("+", 1, &v), -1);
    assert_int_equal(command_parse_int("++1", 3, &v), -1);
    assert_int_equal(command_parse_int("+-1", 3, &v), -1);
    assert_int_equal(command_parse_int("-+1", 3, &v), -1);
    assert_int_equal(command_parse_int(" +1", 3, &v), -1);
    assert_int_equal(command_parse_int("+ 1", 3, &v), -1);
    assert_int_equal(command_parse_int("1+", 2, &v), -1);
}

static void test_encode_and_ms(void **unused)
{
    char buf[3 * 16 + 4];

    (void)unused;
    assert_string_equal(command_encode_value("u1", 2, 16, buf), "u1");
    assert_string_equal(command_encode_value("a b=%", 5, 16, buf), "a%20b%3D%25");
    assert_string_equal(command_encode_value("x\r\n\0", 4, 16, buf), "x%0D%0A%00");
    assert_string_equal(command_encode_value("abcdefghijklmnopqrst", 20, 4, buf), "abcd...");
    assert_int_equal(command_ns_to_ms(0), 0);
    assert_int_equal(command_ns_to_ms(-5), 0);
    assert_int_equal(command_ns_to_ms(1), 1);
    assert_int_equal(command_ns_to_ms(MS), 1);
    assert_int_equal(command_ns_to_ms(MS + 1), 2);
    assert_int_equal(command_ns_to_ms(SLUICE_NEVER), -1);
    /* Absolute times are truncated to the ms, unlike the durations above (rounded up). */
    assert_int_equal(command_time_ms(0), 0);
    assert_int_equal(command_time_ms(MS - 1), 0);
    assert_int_equal(command_time_ms(1700000000123 * MS + MS / 2), 1700000000123);
    assert_int_equal(command_time_ms(SLUICE_NEVER), -1);
    assert_true(command_arg_is("PeEk", 4, "peek"));
    assert_false(command_arg_is("peeks", 5, "peek"));
}

static void test_policy_eq(void **unused)
{
    sluice_limit_policy a, b;
    char na[] = "x", nb[] = "x";

    (void)unused;
    assert_int_equal(sluice_spec_parse_policy("rate=5/1s,key=input.t", &a, NULL, 0), 0);
    assert_int_equal(sluice_spec_parse_policy("rate=5/1s,key=input.t", &b, NULL, 0), 0);
    a.name = na;
    b.name = nb;
    assert_true(server_policy_eq(&a, &b));
    b.line = 12; /* where it was declared does not matter */
    assert_true(server_policy_eq(&a, &b));
    b.def.burst = 7;
    assert_false(server_policy_eq(&a, &b));
    b.def.burst = a.def.burst;
    b.overflow = SLUICE_OVERFLOW_REJECT;
    assert_false(server_policy_eq(&a, &b));
    a.name = b.name = NULL;
    sluice_limit_policy_clear(&a);
    sluice_limit_policy_clear(&b);
}

/* The feed id of a CL.THROTTLE triple parses back to the triple, and nothing else parses. */
static void test_cell_parse_id(void **unused)
{
    int64_t b = -1, c = -1, p = -1;

    (void)unused;
    assert_int_equal(cell_parse_id("!cell:2:1:3600", &b, &c, &p), 0);
    assert_int_equal(b, 2);
    assert_int_equal(c, 1);
    assert_int_equal(p, 3600);
    assert_int_equal(cell_parse_id("!cell:0:5:1", &b, &c, &p), 0);
    assert_int_equal(b, 0);
    static const char *const bad[] = {
        "cell:2:1:3600",
        "!cell:2:1",
        "!cell:2:1:3600:",
        "!cell:2:0:60",
        "!cell:2:1:0",
        "!cell:-2:1:60",
        "!cell::1:60",
        "!cell:2:1:60x",
        "!cell:2: 1:60",
        "!cell:1:1:9999999999999999999",
        "",
        "!cell:",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(cell_parse_id(bad[i], &b, &c, &p), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_rows),    cmocka_unit_test(test_table_arity),
        cmocka_unit_test(test_lookup_misses), cmocka_unit_test(test_cell_table),
        cmocka_unit_test(test_cell_readme),   cmocka_unit_test(test_cell_rounding),
        cmocka_unit_test(test_cell_parse_id), cmocka_unit_test(test_protected_mode),
        cmocka_unit_test(test_parse_int),     cmocka_unit_test(test_encode_and_ms),
        cmocka_unit_test(test_policy_eq),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
