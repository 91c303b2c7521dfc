/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target of the YAML config loader (include/sluice/config.h). The checks live in
 * spec_harness.c, which test_fuzz_corpus also runs over the seed corpus (tests/fuzz/corpus/config/)
 * in every build; this file only turns a broken invariant into a crash the fuzzer records.
 *
 * Build: cmake -DCMAKE_C_COMPILER=clang -DSLUICE_FUZZ=ON, then
 *        ./fuzz_config -dict=tests/fuzz/config.dict -max_total_time=180 <scratch-dir>
 * tests/fuzz/corpus/config
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "spec_harness.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *why = config_harness_run(data, size);

    if (why) {
        fprintf(stderr, "config invariant broken: %s\n", why);
        abort();
    }
    return 0;
}
