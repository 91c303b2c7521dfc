/* SPDX-License-Identifier: MIT */
/*
 * Shared test helpers: a counting allocator that can fail the Nth allocation (for out-of-memory
 * sweeps), a deterministic random generator (for property tests that replay exactly), and where
 * the source tree and the sluice binary are, so that every test binary runs from any directory,
 * under CTest or not.
 */
#ifndef SLUICE_TESTUTIL_H
#define SLUICE_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

/* Installs the counting allocator: allocation number `fail_at` (1-based, counted from this call)
 * and every later one fail while `fail_at` > 0; 0 never fails. Resets the counters. */
void oom_install(long fail_at);

/* Restores the C library allocator. */
void oom_uninstall(void);

/* Allocations made since oom_install(), and blocks allocated but not yet freed. */
long oom_allocations(void);
long oom_live_blocks(void);

/* Runs body(arg) under oom_install(n) for n = 1, 2, ... until it returns 0 (success) or
 * max_n is reached. body must return 0 on success and SLUICE_ENOMEM on failure, and must free
 * everything it allocated either way. Asserts (cmocka) that every failure is SLUICE_ENOMEM and
 * leaks no block. Returns the number of the first allocation that was not failed. */
long oom_sweep(int (*body)(void *arg), void *arg, long max_n);

/* xorshift64* generator, seeded explicitly so a failing property test replays. */
typedef struct test_rng {
    uint64_t s;
} test_rng;

void rng_seed(test_rng *r, uint64_t seed);
uint64_t rng_next(test_rng *r);
/* Uniform in [lo, hi] (inclusive). */
int64_t rng_range(test_rng *r, int64_t lo, int64_t hi);

/* The source tree (examples/, tests/fuzz/corpus/): $SLUICE_SOURCE_DIR when set (CTest sets it),
 * else the tree testutil.c was compiled from (CMake compiles it by absolute path). Fails the
 * running test, with a hint naming the variable, when that directory does not hold `rel`, a path
 * the caller needs. Returns "DIR/rel" in a static buffer, valid until the next call. */
const char *test_source_path(const char *rel);

/* The sluice binary: $SLUICE_BIN when set (CTest sets it), else `sluice` beside the running test
 * binary (both are built in the build directory). Returns NULL, with a hint on stderr, when it is
 * not an executable file. The string is static. */
const char *test_sluice_bin(void);

#endif
