/* SPDX-License-Identifier: MIT */
/*
 * The SVG timeline of `sluice simulate SCENARIO.yaml --svg FILE`.
 */
#ifndef SLUICE_CLI_SIMCHART_H
#define SLUICE_CLI_SIMCHART_H

#include <stddef.h>

#include "cli/sim/run.h"

/* Builds the SVG timeline of a run: a panel per limit with the units granted over time on each
 * key (at most 6 keys, the busiest; for a concurrency limit the units held) against the limit's
 * envelope, rejections marked, and a panel of the parked, queued and running depth. `file` names
 * the scenario in the subtitle. Returns 0 with *svg (free with alloc_free) and *len, or
 * SLUICE_ENOMEM. */
int simchart_svg(const simrun_result *r, const char *file, char **svg, size_t *len);

#endif
