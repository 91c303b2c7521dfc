/* SPDX-License-Identifier: MIT */
/*
 * `sluice check FILE`: validates a configuration file and summarises what it declares.
 */
#ifndef SLUICE_CLI_CHECK_H
#define SLUICE_CLI_CHECK_H

#include <stddef.h>

#include "sluice/policy.h"

/* Writes a one-line summary of a limit into buf (always NUL-terminated when len > 0), e.g.
 * "limit stripe: rate 100/1m burst 100, key input.tenant_id, overflow wait". p must validate. */
void check_describe_limit(const sluice_limit_policy *p, char *buf, size_t len);

/* Writes a one-line summary of a task type, e.g.
 * "type charge: limits stripe, budget; priority 0, lease 30s, retry 3 attempts exponential 1s..5m".
 */
void check_describe_type(const sluice_type_policy *t, char *buf, size_t len);

/* Runs `sluice check` with argv[0] = "check". Prints the summary to stdout and the one-line error
 * to stderr. Returns the exit status: 0 the file is valid, 1 it is not (or cannot be read),
 * 2 bad usage. */
int check_main(int argc, char **argv);

#endif
