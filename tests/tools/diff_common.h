/* SPDX-License-Identifier: MIT */
/*
 * Shared by the differential tests of a PostgreSQL function against the Redis store script
 * (tests/tools/tasks_diff.c, recur_diff.c): the run's state every comparison reports (seed, step,
 * the count of checks, the injected time), the xorshift generator, the two connections' set-up (a
 * throwaway redis-server, flushed, with the store script loaded; a PostgreSQL brought to this
 * build's schema) and the comparisons that stop the run at the first difference (exit 1, naming the
 * seed, step, request and field). Setup errors exit 2. Header-only and static, one copy per
 * program: define DIFF_NAME (the program's name in its messages) before including it.
 */
#ifndef SLUICE_TEST_DIFF_COMMON_H
#define SLUICE_TEST_DIFF_COMMON_H

#include <hiredis.h>
#include <libpq-fe.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/error.h"
#include "store/pg_schema.h"
#include "store/redis_limits.h"

#ifndef DIFF_NAME
#error "define DIFF_NAME before including diff_common.h"
#endif

#define SEC INT64_C(1000000000)
#define MS  INT64_C(1000000)

static redisContext *rc;
static char sha[64]; /* the store script's, as SCRIPT LOAD answered */
static PGconn *pc;
static int64_t now_ns; /* the time both sides are told */
static unsigned seed;
static int step;
static long checks; /* fields compared so far */
static uint64_t rng;

static uint64_t rnd(uint64_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng % n;
}

static void die(const char *what)
{
    fprintf(stderr, DIFF_NAME ": %s\n", what);
    exit(2);
}

static void pg_exec(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);

    if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK) {
        fprintf(stderr, "postgresql: %s: %s\n", sql, PQerrorMessage(c));
        exit(2);
    }
    PQclear(r);
}

/* A connection to conninfo, its database migrated to this build's schema. */
static PGconn *pg_connect(const char *conninfo)
{
    PGconn *c = PQconnectdb(conninfo);
    char err[256];
    int from;

    if (PQstatus(c) != CONNECTION_OK) {
        fprintf(stderr, "connect: %s\n", PQerrorMessage(c));
        exit(2);
    }
    pg_exec(c, "SET client_min_messages = warning");
    if (pgs_migrate(c, &from, err, sizeof err) != SLUICE_OK) {
        fprintf(stderr, "%s\n", err);
        exit(2);
    }
    return c;
}

/* rc connected to the redis-server on 127.0.0.1:port, flushed, the store script loaded (sha). */
static void redis_connect(int port)
{
    const char *text;
    size_t len;
    redisReply *r;

    rc = redisConnect("127.0.0.1", port);
    if (!rc || rc->err)
        die("redis connect");
    freeReplyObject(redisCommand(rc, "FLUSHDB"));
    text = rlim_script(&len);
    r = redisCommand(rc, "SCRIPT LOAD %b", text, len);
    if (!r || r->type != REDIS_REPLY_STRING)
        die("SCRIPT LOAD");
    snprintf(sha, sizeof sha, "%s", r->str);
    freeReplyObject(r);
}

/* Request i's field what: a number each side; i must be in scope. */
#define SAME(what, a, b)                                                                           \
    do {                                                                                           \
        checks++;                                                                                  \
        if ((long long)(a) != (long long)(b)) {                                                    \
            fprintf(stderr, DIFF_NAME ": seed %u step %d request %zu: %s: redis %lld, pg %lld\n",  \
                    seed, step, i, what, (long long)(a), (long long)(b));                          \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* Request i's field what: bytes each side (NULL: absent, which only matches absent). */
static void same_bytes(size_t i, const char *what, const char *a, size_t alen, const char *b,
                       size_t blen)
{
    checks++;
    if ((a == NULL) != (b == NULL) || alen != blen || (alen > 0 && memcmp(a, b, alen) != 0)) {
        fprintf(stderr, DIFF_NAME ": seed %u step %d request %zu: %s: redis '%.*s', pg '%.*s'\n",
                seed, step, i, what, a ? (int)alen : 6, a ? a : "(null)", b ? (int)blen : 6,
                b ? b : "(null)");
        exit(1);
    }
}

#endif
