/* SPDX-License-Identifier: MIT */
/*
 * Server-wide counters for the admin port's /metrics: commands run by name, error replies by
 * code, and the store's commit latency histogram. Plain data embedded in the server, bumped on
 * the loop thread; nothing here allocates.
 *
 * Cardinality is fixed: one counter per row of the command table and one per known error code
 * (docs/commands.md lists them), plus "other" for any code not in the list.
 */
#ifndef SLUICE_SERVER_COUNTERS_H
#define SLUICE_SERVER_COUNTERS_H

#include <stddef.h>
#include <stdint.h>

#include "server/admin/prom.h"

/* Rows of the command table counted (commands.c has fewer). */
#define COUNTERS_MAX_COMMANDS 64
/* Error codes counted: the known ones and "other" (the last). */
#define COUNTERS_ERROR_CODES 19

typedef struct server_counters {
    uint64_t calls[COUNTERS_MAX_COMMANDS]; /* commands run, by row of command_table */
    uint64_t errors[COUNTERS_ERROR_CODES]; /* error replies, by counters_error_name index */
    prom_hist store_commit;                /* seconds per store commit: the store observes */
} server_counters;

/* Zeroes the counters and sets the commit histogram's buckets (100 us to 2.5 s). */
void counters_init(server_counters *c);

/* Counts a command by its row in the command table (rows past the maximum are not counted). */
static inline void counters_command(server_counters *c, size_t row)
{
    if (row < COUNTERS_MAX_COMMANDS)
        c->calls[row]++;
}

/* Counts the reply at reply[0..len) when it is an error ("-CODE message\r\n"). Pure. */
void counters_reply(server_counters *c, const char *reply, size_t len);

/* The code of error index i ("WRONGARGS", ..., "other"); NULL past the last. */
const char *counters_error_name(size_t i);

#endif
