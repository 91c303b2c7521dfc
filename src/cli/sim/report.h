/* SPDX-License-Identifier: MIT */
/*
 * The scenario mode of `sluice simulate`: `sluice simulate SCENARIO.yaml [--svg FILE] [--tasks]
 * [--format text|csv]`, and the reports of a run (text, CSV, the SVG timeline).
 *
 * simreport_main() reads the file once, hands its text to the configuration loader (for the
 * engine, limits and types sections) and to scenario_parse() (for the scenario section), runs the
 * simulation (run.h), prints the result and draws it (chart.h). The report functions only
 * format a finished simrun_result.
 */
#ifndef SLUICE_CLI_SIMREPORT_H
#define SLUICE_CLI_SIMREPORT_H

#include <stddef.h>
#include <stdio.h>

#include "cli/sim/run.h"

/* Per-task lines are printed up to this many tasks unless --tasks asks for them all. */
#define SIMREPORT_TASKS_MAX 200

/* Returns 1 when the `sluice simulate` command line (argv[0] = "simulate") names a scenario file:
 * a positional argument that is not the value of an option. */
int simreport_is_scenario(int argc, char **argv);

/* Runs `sluice simulate SCENARIO.yaml ...` with argv[0] = "simulate". Returns the exit status:
 * 0 done, 1 the file is malformed or the simulation failed, 2 bad usage. */
int simreport_main(int argc, char **argv);

/* Writes the text report: the setting, per-task lines (when all_tasks, or when there are at most
 * SIMREPORT_TASKS_MAX tasks), the per-key table and the summary. `file` names the scenario. */
void simreport_text(FILE *f, const simrun_result *r, const char *file, int all_tasks);

/* Writes one CSV line per task: index,arrival_s,granted_s,type,key,outcome (times in exact
 * seconds; granted_s empty when it never started). */
void simreport_csv(FILE *f, const simrun_result *r);

#endif
