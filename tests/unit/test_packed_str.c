/* SPDX-License-Identifier: MIT */
/*
 * The PostgreSQL encoders' string pieces (packed_str_*, packed_now_param in src/store/packed.c):
 * a string stays NUL-terminated through puts and cuts, hex is lowercase and two digits a byte
 * (every byte value, NUL included), the array literal is exactly "{" body "}" however often it
 * is rebuilt, the time parameter is NULL for the database's clock, and a failed put leaves the
 * string as it was and leaks nothing (an out-of-memory sweep).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/alloc.h"
#include "sluice/error.h"
#include "store/packed.h"
#include "testutil.h"

static void test_put_and_cut(void **state)
{
    packed_str s = {0}, empty = {0};

    (void)state;
    assert_int_equal(packed_str_put(&s, "", 0), SLUICE_OK);
    assert_non_null(s.p);
    assert_string_equal(s.p, "");
    for (int i = 0; i < 500; i++)
        assert_int_equal(packed_str_put(&s, "abc", 3), SLUICE_OK);
    assert_int_equal(s.len, 1500);
    assert_int_equal(memcmp(s.p + 1497, "abc", 4), 0); /* NUL-terminated */
    packed_str_cut(&s, 4);
    assert_string_equal(s.p, "abca");
    packed_str_cut(&s, 0);
    assert_string_equal(s.p, "");
    alloc_free(s.p);
    packed_str_cut(&empty, 0); /* nothing put yet: no buffer to terminate */
    assert_null(empty.p);
}

static void test_hex(void **state)
{
    packed_str s = {0};
    unsigned char all[256];
    char want[3];

    (void)state;
    for (int i = 0; i < 256; i++)
        all[i] = (unsigned char)i;
    assert_int_equal(packed_str_put(&s, "x", 1), SLUICE_OK);
    assert_int_equal(packed_str_hex(&s, all, sizeof all), SLUICE_OK);
    assert_int_equal(s.len, 1 + 2 * 256);
    assert_int_equal(s.p[s.len], '\0');
    for (int i = 0; i < 256; i++) {
        snprintf(want, sizeof want, "%02x", i);
        assert_memory_equal(s.p + 1 + 2 * i, want, 2);
    }
    assert_int_equal(packed_str_hex(&s, NULL, 0), SLUICE_OK);
    assert_int_equal(s.len, 1 + 2 * 256);
    alloc_free(s.p);
}

static void test_array(void **state)
{
    packed_str body = {0}, lit = {0};

    (void)state;
    assert_int_equal(packed_str_array(&lit, &body), SLUICE_OK);
    assert_string_equal(lit.p, "{}");
    assert_int_equal(packed_str_put(&body, "\"a\",\"b\"", 7), SLUICE_OK);
    assert_int_equal(packed_str_array(&lit, &body), SLUICE_OK);
    assert_string_equal(lit.p, "{\"a\",\"b\"}");
    assert_int_equal(lit.len, 9);
    /* Rebuilt, not appended to. */
    assert_int_equal(packed_str_array(&lit, &body), SLUICE_OK);
    assert_string_equal(lit.p, "{\"a\",\"b\"}");
    alloc_free(body.p);
    alloc_free(lit.p);
}

static void test_now_param(void **state)
{
    char buf[24];

    (void)state;
    assert_null(packed_now_param(buf, 0));
    assert_null(packed_now_param(buf, -5));
    assert_ptr_equal(packed_now_param(buf, 1), buf);
    assert_string_equal(buf, "1");
    assert_string_equal(packed_now_param(buf, INT64_MAX), "9223372036854775807");
}

/* Builds a long literal; on failure checks that the failed call left its string as it was. */
static int build_literal(void *arg)
{
    packed_str body = {0}, lit = {0};
    int rc = SLUICE_OK;

    (void)arg;
    for (int i = 0; i < 200 && rc == SLUICE_OK; i++) {
        size_t len = body.len;

        rc = packed_str_hex(&body, "key", 3);
        if (rc == SLUICE_OK)
            rc = packed_str_put(&body, ",", 1);
        if (rc != SLUICE_OK)
            assert_true(body.len == len || body.len == len + 6);
    }
    if (rc == SLUICE_OK)
        rc = packed_str_array(&lit, &body);
    if (rc == SLUICE_OK)
        assert_int_equal(lit.len, 200 * 7 + 2);
    alloc_free(body.p);
    alloc_free(lit.p);
    return rc;
}

static void test_oom(void **state)
{
    (void)state;
    assert_true(oom_sweep(build_literal, NULL, 100) > 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_put_and_cut), cmocka_unit_test(test_hex),
        cmocka_unit_test(test_array),       cmocka_unit_test(test_now_param),
        cmocka_unit_test(test_oom),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
