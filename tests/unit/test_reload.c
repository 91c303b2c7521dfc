/* SPDX-License-Identifier: MIT */
/*
 * Tests of the configuration reload's plan and switch (src/server/reload.c) on an in-process
 * server that is created but not run: server_load_config runs the same prepare and switch steps
 * as CONFIG RELOAD, on the calling thread.
 *
 * Checked: unchanged limits keep their state and changed ones restart, removed ones go; a refused
 * file changes nothing (not even the limits version); a limit changed behind the file's back
 * (as LIMIT.SET does) is compared on the switch, replaced and named; a reload while one is in
 * flight is refused; and reloading back and forth leaks nothing (the replaced limits' old cores
 * are freed with the plan).
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

#include "base/alloc.h"
#include "server/server.h"
#include "sluice/error.h"

#define NLIMITS 50

#define PATH_TEMPLATE "/tmp/sluice-test-reload-XXXXXX"

static char path[sizeof PATH_TEMPLATE];
static char msg[512];

/* Writes the file: NLIMITS limits l0.. at `rate` per hour (l0 at `first` per hour), `extra`
 * more lines at the end of the limits: section, and one type using l0. */
static void write_file(int first, int rate, const char *extra)
{
    FILE *f = fopen(path, "w");

    assert_non_null(f);
    fprintf(f, "limits:\n  l0: {rate: %d/1h, burst: 1, key: explicit}\n", first);
    for (int i = 1; i < NLIMITS; i++)
        fprintf(f, "  l%d: {rate: %d/1h}\n", i, rate);
    fprintf(f, "%stypes:\n  t: {limits: [l0]}\n", extra);
    assert_int_equal(fclose(f), 0);
}

static server *start(void)
{
    server_options o;
    server *s = NULL;
    int fd;

    memcpy(path, PATH_TEMPLATE, sizeof PATH_TEMPLATE);
    fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    write_file(1, 1, "");
    server_options_init(&o);
    o.port = 0;
    o.config_path = path;
    if (server_new(&o, &s, msg, sizeof msg) != 0)
        fail_msg("server_new: %s", msg);
    return s;
}

static void stop(server *s)
{
    server_free(s);
    unlink(path);
}

/* One decision on l0's key k at now: 1 allowed, 0 denied. */
static int decide(server *s, int64_t now)
{
    sluice_limit *live = NULL;
    sluice_decision d;

    assert_non_null(sluice_engine_get_limit(s->engine, "l0", &live));
    assert_int_equal(sluice_limit_decide(live, "k", 1, 1, now, 0, &d), SLUICE_OK);
    return d.allowed;
}

static int64_t rate_of(server *s, const char *name)
{
    const sluice_limit_policy *p = sluice_engine_get_limit(s->engine, name, NULL);

    return p ? p->def.limit : -1;
}

static void load(server *s)
{
    if (server_load_config(s, path, msg, sizeof msg) != 0)
        fail_msg("reload: %s", msg);
}

static void test_changed_unchanged_removed(void **unused)
{
    server *s = start();
    int64_t now = server_now(s);

    (void)unused;
    assert_int_equal(decide(s, now), 1);
    assert_int_equal(decide(s, now), 0);
    /* The others change, l0 does not: its spent burst stays spent. */
    write_file(1, 2, "  extra: {rate: 5/1h}\n");
    load(s);
    assert_string_equal(msg, "");
    assert_int_equal(decide(s, now), 0);
    assert_int_equal(rate_of(s, "l7"), 2);
    assert_int_equal(rate_of(s, "extra"), 5);
    /* l0 changes: its state restarts; extra is no longer declared: removed. */
    write_file(3, 2, "");
    load(s);
    assert_int_equal(decide(s, now), 1);
    assert_int_equal(rate_of(s, "l0"), 3);
    assert_int_equal(rate_of(s, "extra"), -1);
    stop(s);
}

static void test_refused_changes_nothing(void **unused)
{
    server *s = start();
    uint64_t v = sluice_engine_limits_version(s->engine);
    FILE *f;

    (void)unused;
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("limits:\n  l0: {rate: 9/1h}\n  l1: {rate: ten/1h}\n", f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(server_load_config(s, path, msg, sizeof msg), SLUICE_EINVAL);
    assert_non_null(strstr(msg, ":3:"));
    assert_int_equal(rate_of(s, "l0"), 1);
    assert_true(sluice_engine_limits_version(s->engine) == v);
    unlink(path);
    assert_int_equal(server_load_config(s, path, msg, sizeof msg), SLUICE_ENOTFOUND);
    assert_non_null(strstr(msg, "cannot open"));
    assert_int_equal(rate_of(s, "l0"), 1);
    stop(s);
}

/* A limit changed in the engine since the file was installed: the switch compares every limit
 * with the live one, gives the file's definition back and names it. */
static void test_changed_behind_the_file(void **unused)
{
    server *s = start();
    sluice_limit_policy p = *sluice_engine_get_limit(s->engine, "l5", NULL);

    (void)unused;
    p.def.limit = 42;
    assert_int_equal(sluice_engine_set_limit(s->engine, &p, server_now(s), msg, sizeof msg), 0);
    load(s); /* the same file */
    assert_string_equal(msg, "l5");
    assert_int_equal(rate_of(s, "l5"), 1);
    /* Nothing changed since: the next reload of the same file names nothing. */
    load(s);
    assert_string_equal(msg, "");
    stop(s);
}

/* The same file reloaded back and forth: after the first round, memory returns to where it was
 * (the old cores handed back by the switch are freed with the plan). */
static void test_no_leak(void **unused)
{
    server *s = start();
    size_t before;

    (void)unused;
    if (!alloc_counting())
        skip();
    for (int round = 0; round < 2; round++) {
        write_file(1, 2, "");
        load(s);
        write_file(1, 1, "");
        load(s);
    }
    before = alloc_live_bytes();
    for (int round = 0; round < 5; round++) {
        write_file(1, 2, "");
        load(s);
        write_file(1, 1, "");
        load(s);
    }
    /* One limit's cores leaked per round would be NLIMITS * 5 blocks of hundreds of bytes. */
    assert_true(alloc_live_bytes() <= before + 1024);
    stop(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_changed_unchanged_removed),
        cmocka_unit_test(test_refused_changes_nothing),
        cmocka_unit_test(test_changed_behind_the_file),
        cmocka_unit_test(test_no_leak),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
