/* SPDX-License-Identifier: MIT */
/*
 * Tests of the shared store's settings (src/config/config_store.h): the URL grammar that
 * `--store` and the YAML `store:` section share (every accepted form, every refused one with the
 * words of its message), the section in both of its forms, its mistakes pointed at their line,
 * and an out-of-memory sweep of a configuration that has one.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "config/config_store.h"
#include "sluice/config.h"
#include "sluice/error.h"
#include "testutil.h"

static char msg[1024];

static void url_ok(const char *url, const char *host, int port, int db)
{
    config_store_url u;

    assert_int_equal(config_store_parse_url(url, &u, msg, sizeof(msg)), 0);
    assert_string_equal(msg, "");
    assert_int_equal(u.kind, CONFIG_STORE_REDIS);
    assert_string_equal(u.host, host);
    assert_int_equal(u.port, port);
    assert_int_equal(u.db, db);
}

/* A PostgreSQL connection string: recognised, left to libpq. */
static void url_pg(const char *url)
{
    config_store_url u;

    assert_int_equal(config_store_parse_url(url, &u, msg, sizeof(msg)), 0);
    assert_string_equal(msg, "");
    assert_int_equal(u.kind, CONFIG_STORE_POSTGRES);
}

static void url_bad(const char *url, const char *words)
{
    config_store_url u;

    assert_int_equal(config_store_parse_url(url, &u, msg, sizeof(msg)), SLUICE_EINVAL);
    if (!strstr(msg, words))
        fail_msg("\"%s\": [%s] does not say [%s]", url, msg, words);
    assert_non_null(strstr(msg, "bad store URL"));
}

static void test_url_forms(void **unused)
{
    (void)unused;
    url_ok("redis://127.0.0.1:6379", "127.0.0.1", 6379, 0);
    url_ok("redis://localhost", "localhost", 6379, 0);
    url_ok("redis://cache-1.internal:7000/3", "cache-1.internal", 7000, 3);
    url_ok("REDIS://h:1/", "h", 1, 0);
    url_ok("redis://h/15", "h", 6379, 15);
    url_ok("redis://[::1]:6380/2", "::1", 6380, 2);
    url_ok("redis://[fe80::1]", "fe80::1", 6379, 0);
    url_ok("redis://h:65535/2147483647", "h", 65535, 2147483647);
    url_pg("postgresql://sluice@db:5432/sluice");
    url_pg("POSTGRES://db/sluice?sslmode=require");
    url_pg("host=127.0.0.1 port=5432 dbname=sluice");
    url_pg("  dbname = sluice");
}

/* redis-cluster://: the seeds in order, each with its port (6379 when none), database 0 only. */
static void test_url_cluster(void **unused)
{
    config_store_url u;
    char why[300];

    (void)unused;
    assert_int_equal(
        config_store_parse_url("redis-cluster://127.0.0.1:7001,h2,[::1]:7003", &u, why, sizeof why),
        0);
    assert_int_equal(u.kind, CONFIG_STORE_REDIS_CLUSTER);
    assert_int_equal(u.nseeds, 3);
    assert_string_equal(u.seeds[0].host, "127.0.0.1");
    assert_int_equal(u.seeds[0].port, 7001);
    assert_string_equal(u.seeds[1].host, "h2");
    assert_int_equal(u.seeds[1].port, 6379);
    assert_string_equal(u.seeds[2].host, "::1");
    assert_int_equal(u.seeds[2].port, 7003);
    assert_string_equal(u.host, "127.0.0.1");
    assert_int_equal(u.port, 7001);
    assert_int_equal(config_store_parse_url("REDIS+CLUSTER://one:1/0", &u, why, sizeof why), 0);
    assert_int_equal(u.kind, CONFIG_STORE_REDIS_CLUSTER);
    assert_int_equal(u.nseeds, 1);
    assert_int_equal(config_store_parse_url("redis-cluster://one:1/", &u, why, sizeof why), 0);
    assert_int_equal(u.nseeds, 1);
}

/* Redis's AUTH from "[USER]:PASSWORD@": percent-decoded, on standalone and Cluster URLs; the
 * URL as shown (config_store_redact) without the password. */
static void test_url_auth(void **unused)
{
    config_store_url u;
    char shown[200];

    (void)unused;
    assert_int_equal(config_store_parse_url("redis://:s3cret@h:7/2", &u, msg, sizeof msg), 0);
    assert_string_equal(u.user, "");
    assert_string_equal(u.password, "s3cret");
    assert_string_equal(u.host, "h");
    assert_int_equal(u.port, 7);
    assert_int_equal(u.db, 2);
    assert_int_equal(config_store_parse_url("redis://app:p%40ss%3Aw%25rd@h", &u, msg, sizeof msg),
                     0);
    assert_string_equal(u.user, "app");
    assert_string_equal(u.password, "p@ss:w%rd");
    assert_int_equal(u.port, CONFIG_STORE_DEFAULT_PORT);
    assert_int_equal(config_store_parse_url("redis-cluster://app:pw@a:1,b:2", &u, msg, sizeof msg),
                     0);
    assert_int_equal(u.kind, CONFIG_STORE_REDIS_CLUSTER);
    assert_string_equal(u.user, "app");
    assert_string_equal(u.password, "pw");
    assert_int_equal(u.nseeds, 2);
    assert_string_equal(u.seeds[1].host, "b");
    assert_int_equal(config_store_parse_url("redis://h:1", &u, msg, sizeof msg), 0);
    assert_string_equal(u.password, "");
    snprintf(shown, sizeof shown, "%s", "redis://app:p%40ss@h:1/0");
    config_store_redact(shown, sizeof shown);
    assert_string_equal(shown, "redis://app:***@h:1/0");
    snprintf(shown, sizeof shown, "%s", "redis-cluster://:pw@a:1,b:2");
    config_store_redact(shown, sizeof shown);
    assert_string_equal(shown, "redis-cluster://:***@a:1,b:2");
}

static void test_url_mistakes(void **unused)
{
    char long_host[400];

    (void)unused;
    url_bad("", "expected redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]");
    url_bad("http://h:1", "expected redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]");
    url_bad("127.0.0.1:6379", "expected redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]");
    url_bad("127.0.0.1:6379", "or postgresql://");
    url_bad("postgresq://h", "expected redis://");
    url_bad("=x", "expected redis://");
    url_bad("Host=h", "expected redis://"); /* libpq's keywords are lower case */
    url_bad("rediss://h:1", "TLS (rediss://) is not supported yet");
    url_bad("redis-cluster://", "no host");
    url_bad("redis-cluster://a:1,", "no host");
    url_bad("redis-cluster://a:1,,b:2", "no host");
    url_bad("redis-cluster://a:1/3", "a Redis Cluster has only database 0");
    url_bad("redis-cluster://a:1,b:0", "the port must be a number from 1 to 65535");
    url_bad("redis-cluster://a;b:2", "bad host name");
    url_bad("redis-cluster://x@a:1", "a user without a password");
    url_bad("redis-cluster://a:1?x=1", "URL options");
    url_bad("redis-cluster://a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q", "more than 16 seed nodes");
    url_bad("unix:///tmp/redis.sock", "Unix sockets are not supported yet");
    url_bad("redis://user@h:1", "a user without a password");
    url_bad("redis://user:@h:1", "a user without a password");
    url_bad("redis://:pw%4@h:1", "bad user or password");
    url_bad("redis://:pw%00x@h:1", "bad user or password");
    url_bad("redis://:secret@h:0", "the port must be");
    url_bad("redis://:topsecret@h h:1", "***"); /* the message never shows the password */
    url_bad("redis://", "no host");
    url_bad("redis://:6379", "no host");
    url_bad("redis://h:0", "the port must be a number from 1 to 65535");
    url_bad("redis://h:65536", "the port must be a number from 1 to 65535");
    url_bad("redis://h:12a", "the port must be a number from 1 to 65535");
    url_bad("redis://h:", "the port must be a number from 1 to 65535");
    url_bad("redis://h:123456", "the port must be a number from 1 to 65535");
    url_bad("redis://h/x", "the database must be a number");
    url_bad("redis://h/1/2", "the database must be a number");
    url_bad("redis://h/2147483648", "the database must be a number");
    url_bad("redis://h?timeout=1", "URL options (?...) are not supported");
    url_bad("redis://h:1/0?x", "URL options (?...) are not supported");
    url_bad("redis://h h:1", "bad host name");
    url_bad("redis://h,i:1", "bad host name");
    url_bad("redis://[::1", "an IPv6 address needs a closing ]");
    url_bad("redis://[]:1", "an IPv6 address needs a closing ]");
    url_bad("redis://[zz]:1", "bad IPv6 address");
    memset(long_host, 'a', 300);
    long_host[300] = '\0';
    char url[420];
    snprintf(url, sizeof url, "redis://%s:1", long_host);
    url_bad(url, "longer than 255 characters");
}

static int parse(const char *text, sluice_config *c)
{
    return sluice_config_parse(text, strlen(text), "t.yaml", c, msg, sizeof(msg));
}

static void test_section_forms(void **unused)
{
    sluice_config c;

    (void)unused;
    assert_int_equal(parse("limits: {a: {rate: 1/1s}}\n", &c), 0);
    assert_null(c.store.url);
    assert_int_equal(c.store.failure, SLUICE_STORE_FAILURE_UNSET);
    assert_int_equal(c.store.timeout_ns, 0);
    sluice_config_clear(&c);

    assert_int_equal(parse("store: redis://10.0.0.5:6379/1\n", &c), 0);
    assert_string_equal(c.store.url, "redis://10.0.0.5:6379/1");
    assert_int_equal(c.store.failure, SLUICE_STORE_FAILURE_UNSET);
    sluice_config_clear(&c);

    assert_int_equal(parse("store:\n  url: redis://h\n  failure: open\n  timeout: 250ms\n", &c), 0);
    assert_string_equal(c.store.url, "redis://h");
    assert_int_equal(c.store.failure, SLUICE_STORE_FAILURE_OPEN);
    assert_int_equal(c.store.timeout_ns, 250 * SLUICE_NS_PER_MS);
    sluice_config_clear(&c);

    assert_int_equal(parse("store: {url: 'postgresql://u@db/s', failure: open}\n", &c), 0);
    assert_string_equal(c.store.url, "postgresql://u@db/s");
    assert_int_equal(c.store.failure, SLUICE_STORE_FAILURE_OPEN);
    sluice_config_clear(&c);

    /* Replicas: absent is 0 (no WAIT), as is the timeout (the server's default then). */
    assert_int_equal(c.store.replicas, 0);
    assert_int_equal(c.store.replicas_timeout_ns, 0);
    sluice_config_clear(&c);
    assert_int_equal(parse("store: {url: redis://h, replicas: 2, replicas_timeout: 150ms}\n", &c),
                     0);
    assert_int_equal(c.store.replicas, 2);
    assert_int_equal(c.store.replicas_timeout_ns, 150 * SLUICE_NS_PER_MS);
    assert_int_equal(c.store.connections, 0); /* not given: the server's default (1) */
    sluice_config_clear(&c);

    /* Connections per node (PostgreSQL): 1 to 64. A Redis URL with it is refused when the
     * server starts (rstore_open), not here: the file may take --store from the command line. */
    assert_int_equal(parse("store: {url: 'postgresql://u@db/s', connections: 8}\n", &c), 0);
    assert_int_equal(c.store.connections, 8);
    sluice_config_clear(&c);
    assert_int_equal(parse("store:\n  url: 'host=db dbname=s'\n  connections: 1\n", &c), 0);
    assert_int_equal(c.store.connections, 1);
    sluice_config_clear(&c);
    assert_int_equal(parse("store: {url: 'postgresql://db/s', connections: 64}\n", &c), 0);
    assert_int_equal(c.store.connections, 64);
    sluice_config_clear(&c);

    assert_int_equal(parse("store: {failure: closed}\n", &c), 0);
    assert_null(c.store.url);
    assert_int_equal(c.store.failure, SLUICE_STORE_FAILURE_CLOSED);
    sluice_config_clear(&c);

    assert_int_equal(parse("store:\n", &c), 0);
    assert_null(c.store.url);
    sluice_config_clear(&c);
}

static void section_bad(const char *text, const char *want)
{
    sluice_config c;

    assert_int_not_equal(parse(text, &c), 0);
    assert_null(c.store.url);
    if (strcmp(msg, want) != 0)
        fail_msg("[%s] != [%s]", msg, want);
}

static void test_section_mistakes(void **unused)
{
    (void)unused;
    section_bad("store: redis://h:99999\n",
                "t.yaml:1:8: store: bad store URL \"redis://h:99999\": the port must be a number "
                "from 1 to 65535");
    section_bad("engine: {}\nstore:\n  url: rediss://h\n",
                "t.yaml:3:8: store.url: bad store URL \"rediss://h\": TLS (rediss://) is not "
                "supported yet");
    section_bad("store:\n  url: redis://h\n  failure: maybe\n",
                "t.yaml:3:12: store.failure: expected closed or open, got \"maybe\"");
    section_bad(
        "store:\n  url: redis://h\n  timeout: soon\n",
        "t.yaml:3:12: store.timeout: expected a duration such as 500ms, 30s, 5m, 1h or 1d, got "
        "\"soon\"");
    section_bad("store:\n  uri: redis://h\n", "t.yaml:2:3: store: unknown key \"uri\"; did you "
                                              "mean \"url\"?");
    section_bad("store: {url: redis://h, replicas: 65}\n",
                "t.yaml:1:35: store.replicas: expected at most 64, got \"65\"");
    section_bad("store: {url: redis://h, replicas: -1}\n",
                "t.yaml:1:35: store.replicas: expected a non-negative integer, got \"-1\"");
    section_bad("store: {url: redis://h, replicas_timeout: never}\n",
                "t.yaml:1:43: store.replicas_timeout: expected a duration such as 500ms, 30s, "
                "5m, 1h or 1d, got \"never\"");
    section_bad("store: {url: 'postgresql://db/s', connections: 0}\n",
                "t.yaml:1:48: store.connections: expected a positive integer, got \"0\"");
    section_bad("store: {url: 'postgresql://db/s', connections: 65}\n",
                "t.yaml:1:48: store.connections: expected at most 64, got \"65\"");
    section_bad("store: {url: 'postgresql://db/s', connections: many}\n",
                "t.yaml:1:48: store.connections: expected a positive integer, got \"many\"");
    section_bad("store: {url: 'postgresql://db/s', connection: 2}\n",
                "t.yaml:1:35: store: unknown key \"connection\"; did you mean \"connections\"?");
    section_bad("store: [redis://h]\n", "t.yaml:1:8: store: expected a store URL, or a mapping "
                                        "with url, failure and timeout, got a list");
}

static int parse_and_clear(void *arg)
{
    sluice_config c;
    int rc;

    (void)arg;
    rc = parse("store:\n  url: redis://h:1/2\n  failure: open\nlimits: {a: {rate: 1/1s}}\n", &c);
    if (rc == 0) {
        assert_string_equal(c.store.url, "redis://h:1/2");
        sluice_config_clear(&c);
    }
    return rc;
}

static void test_oom_sweep(void **unused)
{
    (void)unused;
    assert_true(oom_sweep(parse_and_clear, NULL, 1000) > 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_url_forms),     cmocka_unit_test(test_url_cluster),
        cmocka_unit_test(test_url_mistakes),  cmocka_unit_test(test_url_auth),
        cmocka_unit_test(test_section_forms), cmocka_unit_test(test_section_mistakes),
        cmocka_unit_test(test_oom_sweep),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
