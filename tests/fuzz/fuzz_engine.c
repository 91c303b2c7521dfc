/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target of the engine driven by a script of task and limit commands on a simulated
 * clock. The checks live in engine_harness.c, which test_fuzz_corpus also runs over the seed corpus
 * (tests/fuzz/corpus/engine/) in every build; this file only turns a broken invariant into a crash
 * the fuzzer records.
 *
 * Build: cmake -DCMAKE_C_COMPILER=clang -DSLUICE_FUZZ=ON, then
 *        ./fuzz_engine -dict=tests/fuzz/engine.dict -max_total_time=180 <scratch-dir>
 * tests/fuzz/corpus/engine
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine_harness.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *why = engine_harness_run(data, size);

    if (why) {
        fprintf(stderr, "engine invariant broken: %s\n", why);
        abort();
    }
    return 0;
}
