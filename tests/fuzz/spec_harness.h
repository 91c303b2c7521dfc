/* SPDX-License-Identifier: MIT */
/*
 * The fuzz harnesses of the configuration side: the limit-spec grammar (spec.h, policy_spec.h)
 * and the YAML config loader (config.h). Shared by the libFuzzer targets (fuzz_spec.c,
 * fuzz_config.c) and the corpus replay test (tests/unit/test_fuzz_corpus.c), so every input the
 * fuzzer found keeps being checked by the normal test run.
 *
 * Each function returns NULL when every invariant held, or a static description of the first
 * broken one; nothing aborts. Both allocate through the sluice allocator and free all of it.
 */
#ifndef SLUICE_TESTS_SPEC_HARNESS_H
#define SLUICE_TESTS_SPEC_HARNESS_H

#include <stddef.h>
#include <stdint.h>

/* Parses the input (up to its first NUL) as a duration, a limit spec and a policy spec. Checks:
 * an error leaves a one-line, non-empty message; what parses formats without error, and the
 * formatted text parses back to a definition that formats to the same text (canonical forms are
 * fixed points); a parsed duration is >= 0. */
const char *spec_harness_run(const uint8_t *data, size_t size);

/* Parses the input as a YAML configuration. Checks: an error leaves a one-line, non-empty
 * message and a cleared config; a parsed config finds each of its limits and types by name,
 * every untiered limit formats as a policy spec that parses back to the same text, and the
 * config applies to a fresh engine (or is refused with a message) without leaking. */
const char *config_harness_run(const uint8_t *data, size_t size);

#endif
