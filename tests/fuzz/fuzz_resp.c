/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target of the RESP reader (src/server/resp_read.c). The checks live in resp_harness.c,
 * which test_resp_corpus also runs over the seed corpus (tests/fuzz/corpus/resp/) in every build;
 * this file only turns a broken invariant into a crash the fuzzer records.
 *
 * Build: cmake -DCMAKE_C_COMPILER=clang -DSLUICE_FUZZ=ON, then
 *        ./fuzz_resp -max_total_time=120 <scratch-dir> tests/fuzz/corpus/resp
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "resp_harness.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *why = resp_harness_run(data, size);

    if (why) {
        fprintf(stderr, "resp invariant broken: %s\n", why);
        abort();
    }
    return 0;
}
