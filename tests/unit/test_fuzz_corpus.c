/* SPDX-License-Identifier: MIT */
/*
 * Replays the fuzz corpora of the engine, the config loader and the limit-spec grammar
 * (tests/fuzz/corpus/{engine,config,spec}/ in the source tree, see test_source_path) through
 * their harnesses (tests/fuzz/engine_harness.c, spec_harness.c), so every seed and every input a
 * fuzzer once found is checked by the normal test run, with any compiler. The RESP corpus has
 * its own test (test_resp_corpus.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <dirent.h>

#include "engine_harness.h"
#include "spec_harness.h"
#include "testutil.h"

#define MIN_CORPUS_FILES 10
#define CORPUS_MAX_INPUT (1u << 20) /* corpus files are small; anything larger is a mistake */

typedef const char *(*harness_fn)(const uint8_t *data, size_t size);

static uint8_t *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    uint8_t *data = malloc(CORPUS_MAX_INPUT + 1);
    size_t n;

    assert_non_null(f);
    assert_non_null(data);
    n = fread(data, 1, CORPUS_MAX_INPUT + 1, f);
    assert_false(ferror(f));
    fclose(f);
    assert_true(n <= CORPUS_MAX_INPUT);
    *size = n;
    return data;
}

static void replay(const char *rel, harness_fn run)
{
    char dir[4096], path[4096 + 256];
    DIR *d;
    struct dirent *e;
    size_t nfiles = 0;

    snprintf(dir, sizeof dir, "%s", test_source_path(rel));
    d = opendir(dir);
    if (!d)
        fail_msg("cannot open the corpus directory %s", dir);
    while ((e = readdir(d)) != NULL) {
        uint8_t *data;
        size_t size;
        const char *why;

        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        data = read_file(path, &size);
        why = run(data, size);
        free(data);
        if (why)
            fail_msg("%s/%s: %s", rel, e->d_name, why);
        nfiles++;
    }
    closedir(d);
    assert_true(nfiles >= MIN_CORPUS_FILES);
}

static void test_spec_corpus(void **state)
{
    (void)state;
    replay("tests/fuzz/corpus/spec", spec_harness_run);
}

static void test_config_corpus(void **state)
{
    (void)state;
    replay("tests/fuzz/corpus/config", config_harness_run);
}

static void test_engine_corpus(void **state)
{
    (void)state;
    replay("tests/fuzz/corpus/engine", engine_harness_run);
}

/* The harnesses accept what is valid and what is not, so one that rejects everything is caught
 * even if a corpus went missing. */
static void test_harness_sanity(void **state)
{
#define RUN(fn, s) assert_null(fn((const uint8_t *)(s), sizeof(s) - 1))
    (void)state;
    RUN(spec_harness_run, "");
    RUN(spec_harness_run, "rate=10/1s,key=input.user,burst=20");
    RUN(spec_harness_run, "90s");
    RUN(spec_harness_run, "rate=10/");
    RUN(config_harness_run, "");
    RUN(config_harness_run, "limits:\n  a:\n    rate: 10/1s\ntypes:\n  t:\n    limits: [a]\n");
    RUN(config_harness_run, "limits: [");
    RUN(engine_harness_run, "");
    RUN(engine_harness_run, "limit a rate=1/1s\nsubmit t units=3\npoll 2\nack 0 5\n");
    RUN(engine_harness_run, "config\ntypes:\n  t:\n    limits: [a]\nend\nsubmit t\nwake\npoll\n");
#undef RUN
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_harness_sanity),
        cmocka_unit_test(test_spec_corpus),
        cmocka_unit_test(test_config_corpus),
        cmocka_unit_test(test_engine_corpus),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
