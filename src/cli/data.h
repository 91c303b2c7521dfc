/* SPDX-License-Identifier: MIT */
/*
 * `sluice data check DIR`: checks a server's data directory (the store of `sluice serve --data`).
 */
#ifndef SLUICE_CLI_DATA_H
#define SLUICE_CLI_DATA_H

/* Runs `sluice data` with argv[0] = "data". Prints a summary to stdout, or the first problem to
 * stderr. Returns the exit status: 0 the store is sound, 1 it is not (or cannot be opened: a
 * running server holds it), 2 bad usage. */
int data_main(int argc, char **argv);

#endif
