/* SPDX-License-Identifier: MIT */
/*
 * Shared by the tests of the PostgreSQL store's connection (tests/unit/test_pg_conn.c, without a
 * server, and tests/tools/pg_conn_check.c, against one): a loopback TCP socket on a port of the
 * kernel's choice, the stand-in for a server that never answers (listening, never accepting) or
 * for a port nothing listens on (bound, then closed). Header-only and static, so each program has
 * its own copy and needs no library; plain C (no cmocka), since the tool is not a cmocka test.
 * Below it, for the cmocka tests of the PostgreSQL encoders/decoders only, a (req, val) result
 * builder.
 */
#ifndef SLUICE_TEST_PG_FIXTURE_H
#define SLUICE_TEST_PG_FIXTURE_H

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* A loopback TCP socket bound to a port of the kernel's choice, put in *port; listening when
 * do_listen (it never accepts: the kernel completes connections into its backlog and nothing
 * answers). Returns the descriptor, which the caller closes, or -1 with errno set and nothing
 * left open. */
static inline int pgfix_loopback_socket(int do_listen, int *port)
{
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 &&
        (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 ||
         getsockname(fd, (struct sockaddr *)&a, &len) != 0 || (do_listen && listen(fd, 64) != 0))) {
        int e = errno;

        close(fd);
        errno = e;
        fd = -1;
    }
    if (fd >= 0)
        *port = ntohs(a.sin_port);
    return fd;
}

/* The tests of the task and series encoders/decoders (test_pg_tasks.c, test_pg_recur.c) build
 * the results their calls return: defined only where libpq-fe.h and cmocka.h were included
 * first (the tool and test_pg_conn.c need neither). */
#if defined(LIBPQ_FE_H) && defined(cmocka_unit_test)
/* One row of a result: its request number and its element's bytes. */
typedef struct row {
    int req;
    const char *val; /* NULL: an SQL NULL */
    int len;         /* -1: strlen(val) */
} row;

/* A result as libpq hands it over in binary format: (req int4, val bytea) per row. */
static inline PGresult *result_of(ExecStatusType st, const row *rows, size_t n, unsigned col0_type)
{
    PGresult *r = PQmakeEmptyPGresult(NULL, st);
    PGresAttDesc cols[2];

    assert_non_null(r);
    if (st != PGRES_TUPLES_OK)
        return r;
    memset(cols, 0, sizeof cols);
    cols[0].name = (char *)"req";
    cols[0].typid = col0_type;
    cols[0].typlen = 4;
    cols[0].format = 1;
    cols[0].atttypmod = -1;
    cols[1].name = (char *)"val";
    cols[1].typid = 17; /* bytea */
    cols[1].typlen = -1;
    cols[1].format = 1;
    cols[1].atttypmod = -1;
    assert_int_equal(PQsetResultAttrs(r, 2, cols), 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char be[4] = {(unsigned char)((unsigned)rows[i].req >> 24),
                               (unsigned char)((unsigned)rows[i].req >> 16),
                               (unsigned char)((unsigned)rows[i].req >> 8),
                               (unsigned char)rows[i].req};
        int len = rows[i].val ? (rows[i].len >= 0 ? rows[i].len : (int)strlen(rows[i].val)) : -1;

        assert_int_equal(PQsetvalue(r, (int)i, 0, (char *)be, 4), 1);
        assert_int_equal(PQsetvalue(r, (int)i, 1, (char *)rows[i].val, len), 1);
    }
    return r;
}
#endif

#endif
