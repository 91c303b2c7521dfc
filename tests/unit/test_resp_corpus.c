/* SPDX-License-Identifier: MIT */
/*
 * Replays the RESP fuzz corpus (tests/fuzz/corpus/resp/ in the source tree, see test_source_path)
 * through the fuzz harness (tests/fuzz/resp_harness.c), so that every seed and every
 * input the fuzzer once found is checked by the normal test run, with any compiler. Each file is
 * run as is and again under every split mode and both limit sets (its control byte replaced).
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

#include "resp_harness.h"
#include "testutil.h"

#define MIN_CORPUS_FILES 20
#define CORPUS_MAX_INPUT (1u << 20) /* corpus files are small; anything larger is a mistake */

/* Reads path whole into a malloc'ed buffer; returns its size, or aborts the test. */
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

static void run_one(const char *name, const uint8_t *data, size_t size)
{
    const char *why = resp_harness_run(data, size);

    if (why)
        fail_msg("%s (control byte 0x%02x): %s", name, size ? data[0] : 0, why);
}

static void test_corpus(void **state)
{
    char dir[4096], path[4096 + 256];
    DIR *d;
    struct dirent *e;
    size_t nfiles = 0;

    (void)state;
    snprintf(dir, sizeof dir, "%s", test_source_path("tests/fuzz/corpus/resp"));
    d = opendir(dir);
    if (!d)
        fail_msg("cannot open the corpus directory %s", dir);
    while ((e = readdir(d)) != NULL) {
        uint8_t *data;
        size_t size;

        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        data = read_file(path, &size);
        run_one(e->d_name, data, size);
        if (size > 0) {
            /* Every split mode (and, for mode 1, a few chunk sizes) under both limit sets. */
            static const uint8_t ctls[] = {0x00, 0x01, 0x05, 0x1d, 0x02, 0x03, 0x80,
                                           0x81, 0x8d, 0x82, 0x83, 0xf6, 0x7b};

            for (size_t i = 0; i < sizeof ctls; i++) {
                data[0] = ctls[i];
                run_one(e->d_name, data, size);
            }
        }
        free(data);
        nfiles++;
    }
    closedir(d);
    assert_true(nfiles >= MIN_CORPUS_FILES);
}

/* A few inputs that end in different states (a command, an error, the middle of a command) all
 * pass, so a harness that rejects everything is caught even if the corpus went missing. */
static void test_harness_sanity(void **state)
{
#define INPUT(s)                                                                                   \
    {                                                                                              \
        (const uint8_t *)(s), sizeof(s) - 1                                                        \
    }
    static const struct {
        const uint8_t *data;
        size_t size;
    } inputs[] = {
        INPUT("\x00*1\r\n$4\r\nPING\r\n"),
        INPUT("\x01PING\r\nECHO \"a b\"\r\n"),
        INPUT("\x82*2\r\n$3\r\nGET\r\n$17\r\n"), /* over the tight max_bulk_len */
        INPUT("\x03*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n"),
        INPUT("\x02*2\r\n$3\r\nGET\r\n$5\r\nab"), /* ends mid-command */
    };
#undef INPUT

    (void)state;
    assert_null(resp_harness_run(NULL, 0));
    for (size_t i = 0; i < sizeof inputs / sizeof inputs[0]; i++)
        run_one("sample", inputs[i].data, inputs[i].size);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_harness_sanity),
        cmocka_unit_test(test_corpus),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
