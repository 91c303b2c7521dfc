/* SPDX-License-Identifier: MIT */
/*
 * The fuzz harness of the payload scanner (base/jscan.h) and of picking (policy/jpick.h), both
 * checked against jansson. Shared by the libFuzzer target (fuzz_jscan.c) and the unit test
 * (tests/unit/test_jscan.c), which runs it over its whole corpus, so every input the fuzzer
 * finds keeps being checked by the normal test run.
 */
#ifndef SLUICE_TESTS_JSCAN_HARNESS_H
#define SLUICE_TESTS_JSCAN_HARNESS_H

#include <stddef.h>

/* What the documents checked so far held. */
typedef struct jscan_harness_stats {
    long valid, invalid, unsure; /* jscan_validate's verdicts */
    long paths;                  /* dot paths read from both trees */
} jscan_harness_stats;

extern jscan_harness_stats jscan_harness_seen;

/* Checks doc[0..len) (any bytes). Checks: whatever jscan_validate accepts jansson accepts
 * (JSON_DECODE_ANY | JSON_ALLOW_NUL), whatever it refuses as invalid jansson refuses; for an
 * accepted document, the walk ends where the scan did, and every dot path into it (and paths
 * that miss, go past an array's end or through a scalar, with and without `input.`), and a key
 * template of two of them, read the same code, value and words from jpick_parse's tree as from
 * jansson's full parse. Returns NULL when all held, else a static description of the first
 * broken one. *verdict (may be NULL) receives jscan_validate's answer. Frees all it allocates. */
const char *jscan_harness_run(const char *doc, size_t len, int *verdict);

/* The document, printable (bytes outside ASCII as \xHH), truncated; a static buffer. */
const char *jscan_harness_show(const char *doc, size_t len);

#endif
