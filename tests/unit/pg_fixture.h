/* SPDX-License-Identifier: MIT */
/*
 * Shared by the tests of the PostgreSQL store's connection (tests/unit/test_pg_conn.c, without a
 * server, and tests/tools/pg_conn_check.c, against one): a loopback TCP socket on a port of the
 * kernel's choice, the stand-in for a server that never answers (listening, never accepting) or
 * for a port nothing listens on (bound, then closed). Header-only and static, so each program has
 * its own copy and needs no library; plain C (no cmocka), since the tool is not a cmocka test.
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

#endif
