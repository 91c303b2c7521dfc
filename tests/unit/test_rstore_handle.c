/* SPDX-License-Identifier: MIT */
/*
 * Tests of the lease handles of a redis store (rstore_parse_handle, rstore.h): "NAME/ID/KEYHEX",
 * the key carried in hex so that any node can renew or release the lease. Every well-formed
 * handle parses back to its parts (keys of any byte, empty keys, the largest id); every
 * malformed one (the embedded store's "NAME/GEN/ID" included, when its id is odd-length hex) is
 * refused, and a key longer than the caller's room is refused rather than cut.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "server/rstore.h"
#include "testutil.h"

static int parse(const char *h, char *name, uint64_t *id, char *key, size_t keymax, size_t *keylen)
{
    return rstore_parse_handle(h, strlen(h), name, 256, id, key, keymax, keylen);
}

static void test_good_handles(void **unused)
{
    char name[256], key[64];
    uint64_t id = 0;
    size_t keylen = 99;

    (void)unused;
    assert_int_equal(parse("slots/1795544285409417000/6b2f31", name, &id, key, sizeof key, &keylen),
                     0);
    assert_string_equal(name, "slots");
    assert_true(id == UINT64_C(1795544285409417000));
    assert_int_equal(keylen, 3);
    assert_memory_equal(key, "k/1", 3);

    assert_int_equal(parse("a.b:c-d/0/", name, &id, key, sizeof key, &keylen), 0);
    assert_string_equal(name, "a.b:c-d");
    assert_true(id == 0);
    assert_int_equal(keylen, 0);

    assert_int_equal(parse("x/18446744073709551615/00FFff20", name, &id, key, sizeof key, &keylen),
                     0);
    assert_true(id == UINT64_MAX);
    assert_int_equal(keylen, 4);
    assert_memory_equal(key, "\x00\xff\xff ", 4);
}

static void test_bad_handles(void **unused)
{
    static const char *const bad[] = {
        "",
        "slots",
        "slots/",
        "slots/12",
        "/1/6b",
        "slots//6b",
        "slots/x1/6b",
        "slots/1/6",
        "slots/1/6g",
        "slots/1/6b2",
        "slots/-1/6b",
        "slots/18446744073709551616/6b",
        "slots/1 /6b",
    };
    char name[256], key[64];
    uint64_t id;
    size_t keylen;

    (void)unused;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (parse(bad[i], name, &id, key, sizeof key, &keylen) != -1)
            fail_msg("\"%s\" parsed", bad[i]);
    }
    /* The key must fit the caller's room: three bytes do not fit two. */
    assert_int_equal(parse("slots/1/6b2f31", name, &id, key, 2, &keylen), -1);
    /* A name too long for the caller's buffer. */
    char longname[300];
    memset(longname, 'n', 280);
    snprintf(longname + 280, sizeof longname - 280, "/1/6b");
    assert_int_equal(parse(longname, name, &id, key, sizeof key, &keylen), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_handles),
        cmocka_unit_test(test_bad_handles),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
