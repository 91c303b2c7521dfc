/* SPDX-License-Identifier: MIT */
/*
 * The real `sluice serve` for tests that drive it with hiredis: started from test_sluice_bin()
 * ($SLUICE_BIN, else the sluice beside the test binary) on an ephemeral loopback port, memory only
 * (--durability none), in a fresh temporary directory, and stopped with SIGTERM, after which it
 * must exit 0.
 */
#ifndef SLUICE_SERVER_FIXTURE_H
#define SLUICE_SERVER_FIXTURE_H

#include <hiredis/hiredis.h>
#include <sys/types.h>

typedef struct server_fixture {
    pid_t pid;    /* the server process, 0 when stopped */
    int port;     /* the RESP port it bound */
    char dir[64]; /* its temporary directory: port file, log, config */
} server_fixture;

/* Starts the server; config_yaml (may be NULL) is written to a file and passed with --config.
 * Returns 0, or -1 with a reason on stderr. */
int server_fixture_start(server_fixture *f, const char *config_yaml);

/* The same with more command-line arguments (a NULL-terminated list, may be NULL). */
int server_fixture_start_args(server_fixture *f, const char *config_yaml, const char *const *extra);

/* Stops the server with SIGTERM and removes its directory. Returns 0 when it exited 0. */
int server_fixture_stop(server_fixture *f);

/* A new connection to the server (fails the test when it cannot connect). */
redisContext *server_fixture_connect(const server_fixture *f);

/* Runs a command (fails the test on a connection error) and returns the reply to free. */
redisReply *server_fixture_cmd(redisContext *c, const char *fmt, ...);

/* Sleeps ms milliseconds. */
void server_fixture_sleep_ms(long ms);

#endif
