/* SPDX-License-Identifier: MIT */
/*
 * Shared by the Redis encoder tests (test_redis_limits.c, test_redis_tasks.c): a built command's
 * arguments and a check of one of them, and hiredis reply trees built by hand from a static pool
 * of nodes (reset with reply_pool_reset, never freed), so a decoder is tested without Redis.
 * Static, so each test binary has its own pool. Include after <cmocka.h> and <hiredis.h>.
 */
#ifndef SLUICE_TEST_REPLY_FIXTURE_H
#define SLUICE_TEST_REPLY_FIXTURE_H

#include <stdarg.h>
#include <string.h>

/* A command's arguments as rlim_batch_command / rtask_batch_command give them. */
typedef struct cmd {
    int argc;
    const char **argv;
    const size_t *argvlen;
} cmd;

/* Argument i is exactly want. */
static void assert_arg(const cmd *c, int i, const char *want)
{
    assert_true(i < c->argc);
    assert_int_equal(c->argvlen[i], strlen(want));
    assert_memory_equal(c->argv[i], want, strlen(want));
}

#define REPLY_POOL      4096
#define REPLY_MAX_ELEMS 20
static redisReply pool[REPLY_POOL];
static redisReply *elems[REPLY_POOL][REPLY_MAX_ELEMS];
static size_t npool;

/* Forgets every node built so far. */
static void reply_pool_reset(void)
{
    npool = 0;
}

static redisReply *node(int type)
{
    redisReply *r;

    assert_true(npool < REPLY_POOL);
    r = &pool[npool++];
    memset(r, 0, sizeof *r);
    r->type = type;
    return r;
}

/* A bulk string (borrowing s). */
static redisReply *s_(const char *s)
{
    redisReply *r = node(REDIS_REPLY_STRING);

    r->str = (char *)s;
    r->len = strlen(s);
    return r;
}

/* An array of n nodes (the variadic arguments). */
static redisReply *a_(size_t n, ...)
{
    redisReply *r = node(REDIS_REPLY_ARRAY);
    va_list ap;

    assert_true(n <= REPLY_MAX_ELEMS);
    r->element = elems[r - pool];
    r->elements = n;
    va_start(ap, n);
    for (size_t i = 0; i < n; i++)
        r->element[i] = va_arg(ap, redisReply *);
    va_end(ap);
    return r;
}

#endif
