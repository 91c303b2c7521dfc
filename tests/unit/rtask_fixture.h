/* SPDX-License-Identifier: MIT */
/*
 * Shared by the Redis task and recur encoder tests (test_redis_tasks.c, test_redis_recur.c): a
 * rate definition (10/s, burst 5, starting full), a settling task link over it asking 2 units,
 * and a task to add ("email", priority 3, exponential retries, 4 units) that carries links. A
 * recurring occurrence is such a task, so both tests build the same one. Static, so each test
 * binary has its own copies. Include after <cmocka.h>.
 */
#ifndef SLUICE_TEST_RTASK_FIXTURE_H
#define SLUICE_TEST_RTASK_FIXTURE_H

#include <string.h>

#include "sluice/error.h"
#include "sluice/limit.h"
#include "store/redis_tasks.h"

#define SEC SLUICE_NS_PER_SEC

static sluice_limit_def rate_def;

/* cmocka group setup: fills the definition. */
static int setup(void **state)
{
    (void)state;
    sluice_limit_def_init(&rate_def, SLUICE_RATE);
    rate_def.limit = 10;
    rate_def.period_ns = SEC;
    rate_def.burst = 5;
    return 0;
}

/* A settling link of rate_def (limit id `id`) asking 2 units of `key`. */
static rtask_link link_of(const char *id, const char *key)
{
    rtask_link l;

    memset(&l, 0, sizeof l);
    l.lim.def = &rate_def;
    l.lim.limit_id = id;
    l.lim.key = key;
    l.lim.keylen = strlen(key);
    l.lim.units = 2;
    l.flags = RTASK_LINK_SETTLE;
    return l;
}

/* A task of type "email" with the n links (borrowed). */
static rtask_add add_of(const rtask_link *links, size_t n)
{
    rtask_add a;

    memset(&a, 0, sizeof a);
    a.type = "email";
    a.typelen = 5;
    a.payload = "{\"to\":\"x\"}";
    a.payload_len = strlen(a.payload);
    a.links = links;
    a.nlinks = n;
    a.priority = 3;
    a.delay_ns = 0;
    a.lease_ns = 30 * SEC;
    a.retry.max_attempts = 3;
    a.retry.backoff = SLUICE_BACKOFF_EXPONENTIAL;
    a.retry.base_ns = SEC;
    a.retry.max_ns = 60 * SEC;
    a.retry.throttle_retries = 1;
    a.units = 4;
    return a;
}

#endif
