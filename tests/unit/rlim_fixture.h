/* SPDX-License-Identifier: MIT */
/*
 * Shared by the shared stores' encoder tests (test_redis_limits.c, test_pg_limits.c): the three
 * limit definitions they build requests from (a rate of 10/s with a burst of 5 that starts
 * empty, a concurrency of 3 with a 30 s TTL, a monthly quota of 1000) and a link over them.
 * Static, so each test binary has its own copies.
 */
#ifndef SLUICE_TEST_RLIM_FIXTURE_H
#define SLUICE_TEST_RLIM_FIXTURE_H

#include <string.h>

#include "sluice/error.h"
#include "sluice/limit.h"
#include "store/redis_limits.h"

#define SEC SLUICE_NS_PER_SEC

static sluice_limit_def rate_def, lease_def, quota_def;

/* cmocka group setup: fills the three definitions. */
static int setup(void **state)
{
    (void)state;
    sluice_limit_def_init(&rate_def, SLUICE_RATE);
    rate_def.limit = 10;
    rate_def.period_ns = SEC;
    rate_def.burst = 5;
    rate_def.start_empty = 1;
    sluice_limit_def_init(&lease_def, SLUICE_CONCURRENCY);
    lease_def.limit = 3;
    lease_def.ttl_ns = 30 * SEC;
    sluice_limit_def_init(&quota_def, SLUICE_QUOTA);
    quota_def.limit = 1000;
    quota_def.calendar = SLUICE_CAL_MONTH;
    return 0;
}

/* A link of def (limit id `id`) asking `units` of `key`, with the default tag. */
static rlim_link link_of(const sluice_limit_def *def, const char *id, const char *key,
                         int64_t units)
{
    rlim_link l;

    memset(&l, 0, sizeof l);
    l.def = def;
    l.limit_id = id;
    l.key = key;
    l.keylen = strlen(key);
    l.units = units;
    return l;
}

/* The first request of both encoder tests' replies, as either store answers it ("OK
 * 1795526227131600000 0 1 ..."): a chain of a rate link granted (5, 4 left, reset in 200 ms) and
 * a concurrency link that never fits (3 at most), so the chain is denied by link 1. */
static void assert_chain_answer(const rlim_result *res, const sluice_decision *d)
{
    assert_int_equal(res->rc, SLUICE_OK);
    assert_int_equal(res->now_ns, INT64_C(1795526227131600000));
    assert_int_equal(res->n, 2);
    assert_int_equal(res->chain.allowed, 0);
    assert_int_equal(res->chain.denied_by, 1);
    assert_int_equal(res->chain.retry_after_ns, SLUICE_NEVER);
    assert_int_equal(d[0].allowed, 1);
    assert_int_equal(d[0].limit, 5);
    assert_int_equal(d[0].remaining, 4);
    assert_int_equal(d[0].retry_after_ns, 0);
    assert_int_equal(d[0].reset_after_ns, 200000000);
    assert_int_equal(d[0].lease_id, 0);
    assert_int_equal(d[0].untracked, 0);
    assert_int_equal(d[1].allowed, 0);
    assert_int_equal(d[1].limit, 3);
    assert_int_equal(d[1].retry_after_ns, SLUICE_NEVER);
    assert_int_equal(d[1].reset_after_ns, 30 * SEC);
}

#endif
