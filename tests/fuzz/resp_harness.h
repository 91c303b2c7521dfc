/* SPDX-License-Identifier: MIT */
/*
 * The RESP reader harness shared by the libFuzzer target (tests/fuzz/fuzz_resp.c) and the corpus
 * replay test (tests/unit/test_resp_corpus.c), so that every input the fuzzer ever found keeps
 * being checked by the normal test run.
 */
#ifndef SLUICE_TESTS_RESP_HARNESS_H
#define SLUICE_TESTS_RESP_HARNESS_H

#include <stddef.h>
#include <stdint.h>

/* Runs the RESP reader over one input and checks its invariants. data[0] is a control byte: its
 * low two bits choose how the rest is split into reads (one byte at a time, fixed chunks, random
 * chunks, or random chunks drained only every other read), its top bit selects tight limits and,
 * with it, the next bit a 1-byte max_inline_len; data[1..] are the bytes received. Checks that:
 * - every command has 1 <= argc <= max_args, each argument <= max_bulk_len, all of them
 *   <= max_query_len, and each argument is followed by a NUL;
 * - the split reading yields exactly the commands and the final state (error message or not) of
 *   reading the whole input at once;
 * - after an error every call returns the same error, further bytes change nothing, and the
 *   message is one "Protocol error: ..." line;
 * - writing the commands back with the writer and reading that gives the same commands.
 * Returns NULL when all held, or a static description of the first broken one. Allocates through
 * the current sluice allocator and frees everything it allocated. */
const char *resp_harness_run(const uint8_t *data, size_t size);

#endif
