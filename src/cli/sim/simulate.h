/* SPDX-License-Identifier: MIT */
/*
 * `sluice simulate`: requests run through one limit on a simulated clock.
 *
 * simulate_main() is the subcommand (option parsing, output). simulate_run() is the simulation
 * itself, pure and reusable: the scenario mode (`sluice simulate SCENARIO.yaml`) will drive the
 * same loop with arrivals and limits read from a file.
 */
#ifndef SLUICE_CLI_SIMULATE_H
#define SLUICE_CLI_SIMULATE_H

#include <stddef.h>
#include <stdint.h>

#include "sluice/limit.h"

/* The wall-clock instant that simulated time 0 stands for: 2024-01-01T00:00:00Z, so that the
 * fixed windows and calendar quotas of the limit line up with time 0 as they would at midnight. */
#define SIMULATE_EPOCH_NS (INT64_C(1704067200) * SLUICE_NS_PER_SEC)

/* No grant later than this offset from time 0: a hundred years. */
#define SIMULATE_MAX_SPAN_NS (INT64_C(36500) * 86400 * SLUICE_NS_PER_SEC)

/* granted_ns of a request the limit rejected (it could never be granted). */
#define SIMULATE_REJECTED INT64_C(-1)

/* Runs n requests of `units` units each through a fresh limit made from def, in arrival order.
 * arrival_ns holds their arrival offsets from time 0 (non-decreasing, >= 0). Each request waits
 * for its slot behind the one before it: from t = max(its arrival, the time the previous request
 * was decided) it asks sluice_limit_decide() for key "" and, while denied, asks again after the
 * wait the limit names, until granted; a denial that no wait can turn into a grant
 * (retry_after SLUICE_NEVER) rejects it. For a concurrency limit each grant holds its lease for
 * hold_ns, then releases it (a lease whose TTL is shorter expires first). hold_ns is ignored for
 * other kinds.
 * Fills granted_ns[i] (n entries) with the offset at which request i was granted, or
 * SIMULATE_REJECTED. Returns 0; SLUICE_ERANGE when a grant would come after
 * SIMULATE_MAX_SPAN_NS; SLUICE_ENOMEM; or the error of sluice_limit_new() or decide, with a
 * one-line message in msg (always NUL-terminated when msglen > 0). */
int simulate_run(const sluice_limit_def *def, const int64_t *arrival_ns, size_t n, int64_t units,
                 int64_t hold_ns, int64_t *granted_ns, char *msg, size_t msglen);

/* Runs `sluice simulate` with argv[0] = "simulate". Writes results to stdout and errors (one
 * line) to stderr. Returns the process exit status: 0 done (rejections included), 1 the
 * simulation failed, 2 bad usage or a malformed spec. */
int simulate_main(int argc, char **argv);

#endif
