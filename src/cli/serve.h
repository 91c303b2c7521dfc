/* SPDX-License-Identifier: MIT */
/*
 * `sluice serve`: the network server (src/server/server.h), configured from the command line.
 */
#ifndef SLUICE_CLI_SERVE_H
#define SLUICE_CLI_SERVE_H

/* Runs `sluice serve` with argv[0] = "serve": parses the flags into server options, runs the
 * server until SIGTERM/SIGINT, and returns the exit status: 0 after a graceful stop, 1 when the
 * server could not start (a bad config file, a port in use), 2 for bad usage. */
int serve_main(int argc, char **argv);

#endif
