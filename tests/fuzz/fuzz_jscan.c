/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target of the payload scanner (base/jscan.h) and picking (policy/jpick.h), checked
 * against jansson. The checks live in jscan_harness.c, which test_jscan also runs over its corpus
 * in every build; this file only turns a broken invariant into a crash the fuzzer records.
 *
 * Build: cmake -DCMAKE_C_COMPILER=clang -DSLUICE_FUZZ=ON, then
 *        ./fuzz_jscan -max_total_time=180 <scratch-dir>
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "jscan_harness.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *why = jscan_harness_run((const char *)data, size, NULL);

    if (why) {
        fprintf(stderr, "jscan invariant broken: %s\n", why);
        abort();
    }
    return 0;
}
