/* SPDX-License-Identifier: MIT */
/*
 * `sluice top`: a live terminal view of a running server, read from its admin port.
 */
#ifndef SLUICE_CLI_TOP_H
#define SLUICE_CLI_TOP_H

/* Runs `sluice top` with argv[0] = "top". Returns the exit status: 0 (stopped with Ctrl-C, or
 * --once printed its snapshot), 1 when the admin port cannot be read (--once, or a password is
 * wanted), 2 for bad usage. */
int top_main(int argc, char **argv);

#endif
