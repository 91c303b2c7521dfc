/* SPDX-License-Identifier: MIT */
/*
 * Allocations made on sluice's behalf by its libraries: jansson parses task payloads through
 * sluice's allocator (base/alloc.c sets its hook), so an OOM sweep reaches every allocation of a
 * payload parse and each failure comes back as SLUICE_ENOMEM with nothing leaked; the SHA-256 of
 * a long key allocates nothing at all (core/keyhash.c), which this test proves by counting
 * libcrypto's own allocations (its allocator is replaced before libcrypto's first use), so a
 * long-key decision can only fail on sluice's own allocations, all of which the sweep reaches.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <jansson.h>
#include <openssl/crypto.h>

#include "core/keyhash.h"
#include "engine/resolve.h"
#include "sluice/error.h"
#include "sluice/limit.h"
#include "testutil.h"

#define SEC SLUICE_NS_PER_SEC
#define T0  (INT64_C(1763078400) * SEC)

/* ---- libcrypto's allocations, counted ---------------------------------------------------- */

static long crypto_allocs;

static void *crypto_malloc(size_t n, const char *file, int line)
{
    (void)file;
    (void)line;
    crypto_allocs++;
    return malloc(n);
}

static void *crypto_realloc(void *p, size_t n, const char *file, int line)
{
    (void)file;
    (void)line;
    crypto_allocs++;
    return realloc(p, n);
}

static void crypto_free(void *p, const char *file, int line)
{
    (void)file;
    (void)line;
    free(p);
}

/* ---- JSON payloads ----------------------------------------------------------------------- */

static const char payload[] =
    "{\"user\": {\"id\": \"u-123\", \"tier\": \"pro\", \"tags\": [1, 2.5, \"three\", null, true]},"
    " \"tokens\": 8600000, \"text\": \"a string long enough to need its own buffer growth......\","
    " \"nested\": {\"a\": {\"b\": {\"c\": [[], {}, [{\"d\": \"e\"}]]}}}}";

static int parse_payload(void *arg)
{
    sluice_task_spec spec;
    json_t *input = NULL;
    char msg[128];
    int rc;

    (void)arg;
    memset(&spec, 0, sizeof spec);
    spec.payload = payload;
    spec.payload_len = sizeof payload - 1;
    rc = resolve_parse_payload(&spec, &input, msg, sizeof msg);
    if (rc == SLUICE_OK) {
        assert_non_null(input);
        assert_int_equal(json_integer_value(json_object_get(input, "tokens")), 8600000);
    } else {
        assert_null(input);
        assert_string_equal(msg, "out of memory");
    }
    json_decref(input);
    return rc;
}

static void test_json_payload_oom(void **unused)
{
    long first_ok;

    (void)unused;
    /* jansson's allocations are seen (many of them) and every one of them may fail cleanly. */
    first_ok = oom_sweep(parse_payload, NULL, 100000);
    assert_true(first_ok > 10);
    /* Without a failing allocator the parse allocates through alloc_malloc too. */
    oom_install(0);
    assert_int_equal(parse_payload(NULL), SLUICE_OK);
    assert_int_equal(oom_allocations(), first_ok - 1);
    assert_int_equal(oom_live_blocks(), 0);
    oom_uninstall();
}

/* A syntax error is still a syntax error, not an allocation failure. */
static void test_json_payload_bad(void **unused)
{
    sluice_task_spec spec;
    json_t *input = NULL;
    char msg[128];

    (void)unused;
    memset(&spec, 0, sizeof spec);
    spec.payload = "{\"a\": ";
    spec.payload_len = strlen(spec.payload);
    assert_int_equal(resolve_parse_payload(&spec, &input, msg, sizeof msg), SLUICE_EINVAL);
    assert_null(input);
    assert_non_null(strstr(msg, "payload is not valid JSON"));
}

/* ---- Long keys ------------------------------------------------------------------------------ */

static void test_keyhash_allocates_nothing(void **unused)
{
    static const unsigned char abc[KEYHASH_LEN] = {0xba, 0x78, 0x16, 0xbf, 0x8f, 0x01, 0xcf, 0xea,
                                                   0x41, 0x41, 0x40, 0xde, 0x5d, 0xae, 0x22, 0x23,
                                                   0xb0, 0x03, 0x61, 0xa3, 0x96, 0x17, 0x7a, 0x9c,
                                                   0xb4, 0x10, 0xff, 0x61, 0xf2, 0x00, 0x15, 0xad};
    unsigned char out[KEYHASH_LEN];
    static char big[1 << 16];
    long before = crypto_allocs;

    (void)unused;
    memset(big, 'k', sizeof big);
    /* Every sluice allocation fails and libcrypto's are counted: none is made, and none fails. */
    oom_install(1);
    assert_int_equal(keyhash_digest("abc", 3, out), SLUICE_OK);
    assert_memory_equal(out, abc, KEYHASH_LEN);
    for (int i = 0; i < 100; i++)
        assert_int_equal(keyhash_digest(big, sizeof big, out), SLUICE_OK);
    assert_int_equal(keyhash_digest(NULL, 0, out), SLUICE_OK);
    assert_int_equal(oom_allocations(), 0);
    oom_uninstall();
    assert_int_equal(crypto_allocs, before);
}

static int long_key_decisions(void *arg)
{
    sluice_limit_def def;
    sluice_limit *lim;
    sluice_decision d;
    char msg[64], key[2000];
    int rc;

    (void)arg;
    sluice_limit_def_init(&def, SLUICE_RATE);
    def.limit = 3;
    def.period_ns = SEC;
    def.max_key_len = 64;
    rc = sluice_limit_new(&def, &lim, msg, sizeof msg);
    if (rc != SLUICE_OK)
        return rc;
    memset(key, 'x', sizeof key);
    for (int i = 0; i < 20 && rc == SLUICE_OK; i++) {
        key[sizeof key - 1] = (char)('a' + i % 10);
        rc = sluice_limit_decide(lim, key, sizeof key, 1, T0 + i, 0, &d);
    }
    sluice_limit_free(lim);
    return rc;
}

static void test_long_key_oom(void **unused)
{
    long before = crypto_allocs;

    (void)unused;
    assert_true(oom_sweep(long_key_decisions, NULL, 10000) > 1);
    assert_int_equal(crypto_allocs, before);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_payload_oom),
        cmocka_unit_test(test_json_payload_bad),
        cmocka_unit_test(test_keyhash_allocates_nothing),
        cmocka_unit_test(test_long_key_oom),
    };

    /* Before libcrypto's first allocation, or the replacement is refused. */
    if (CRYPTO_set_mem_functions(crypto_malloc, crypto_realloc, crypto_free) != 1) {
        fprintf(stderr, "CRYPTO_set_mem_functions refused\n");
        return 1;
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
