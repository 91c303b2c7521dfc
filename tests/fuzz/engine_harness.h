/* SPDX-License-Identifier: MIT */
/*
 * The engine fuzz harness: a script of task and limit commands run against one engine on a
 * simulated clock. Shared by the libFuzzer target (fuzz_engine.c) and the corpus replay test
 * (tests/unit/test_fuzz_corpus.c).
 *
 * The script is text, one command a line, words split on spaces (so the fuzzer's dictionary and
 * hand-written seeds read like the TASK.* and LIMIT.* commands they stand for):
 *   limit NAME POLICYSPEC        LIMIT.SET (sluice_spec_parse_policy, then set_limit)
 *   dellimit NAME                LIMIT.DEL
 *   config / ... / end           a YAML configuration applied as CONFIG RELOAD does
 *   submit TYPE [units=N] [priority=N] [key=K] [taskkey=K] [after=MS] [PAYLOAD]   TASK.ADD
 *   poll [N] [TYPE]              TASK.GET
 *   ack T [COST]  fail T [dead]  retry T MS  cancel T  touch T      TASK.ACK/FAIL/CANCEL/TOUCH
 *   explain T  charges T  info T   reads
 *   advance MS  tick  wake       the clock: forward MS (may be huge), run tick, jump to next_wake
 * T is an index into the ids submitted so far (modulo their number) or, written #N, a raw id.
 * Numbers are parsed as int64 with saturation, so extreme values reach the engine.
 *
 * Checks after every command: the stats add up (tasks counted queued, delayed, parked and
 * running are exactly the known unfinished tasks, by state), delivered tasks are running and
 * carry an attempt >= 1, a task's charges are readable, and finished counts never exceed the
 * submitted; at the end the engine frees everything (leaks are the sanitizer's to find).
 */
#ifndef SLUICE_TESTS_ENGINE_HARNESS_H
#define SLUICE_TESTS_ENGINE_HARNESS_H

#include <stddef.h>
#include <stdint.h>

/* Runs the script; returns NULL when every invariant held, or a static description of the first
 * broken one. */
const char *engine_harness_run(const uint8_t *data, size_t size);

#endif
