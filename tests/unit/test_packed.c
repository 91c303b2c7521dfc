/* SPDX-License-Identifier: MIT */
/*
 * The shared stores' packed strings (src/store/packed.c): the arena keeps every span's bytes
 * and their order however it grows, a failed put leaves it as it was, and the field reader takes
 * exactly the numbers the scripts write (the int64 and uint64 extremes) and refuses everything
 * else (empty fields, signs where none may be, overflow by one, non-digits).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "sluice/error.h"
#include "store/packed.h"
#include "testutil.h"

static void test_arena_keeps_spans(void **state)
{
    packed_arena a = {0};
    packed_list l = {0};
    char text[32];

    (void)state;
    for (int i = 0; i < 1000; i++) {
        int n = snprintf(text, sizeof text, "span-%d", i);

        assert_int_equal(packed_put(&a, &l, text, (size_t)n), SLUICE_OK);
    }
    packed_piece pc[3] = {{"pre", 3}, {"", 0}, {":fix", 4}};
    assert_int_equal(packed_put_pieces(&a, &l, pc, 3), SLUICE_OK);
    assert_int_equal(l.n, 1001);
    for (int i = 0; i < 1000; i++) {
        int n = snprintf(text, sizeof text, "span-%d", i);

        assert_int_equal(l.v[i].len, (size_t)n);
        assert_string_equal(packed_at(&a, l.v[i]), text);
    }
    assert_int_equal(l.v[1000].len, 7);
    assert_string_equal(packed_at(&a, l.v[1000]), "pre:fix");
    packed_free(&a, &l);
    assert_null(a.buf);
    assert_null(l.v);
}

static int put_twice(void *arg)
{
    packed_arena *a = arg;
    packed_list l = {0};
    int rc = packed_put(a, &l, "first", 5);

    if (rc == SLUICE_OK)
        rc = packed_put(a, &l, "second", 6);
    if (rc != SLUICE_OK) {
        /* What was put before the failure is intact; the failed put added nothing. */
        assert_true(l.n <= 1);
        if (l.n == 1)
            assert_string_equal(packed_at(a, l.v[0]), "first");
    } else {
        assert_int_equal(l.n, 2);
        assert_string_equal(packed_at(a, l.v[1]), "second");
    }
    packed_free(a, &l);
    return rc;
}

static void test_arena_out_of_memory(void **state)
{
    packed_arena a = {0};

    (void)state;
    assert_true(oom_sweep(put_twice, &a, 20) > 1);
}

static int read_i64(const char *s, int64_t *v)
{
    packed_fields f;

    packed_fields_init(&f, s, strlen(s));
    return packed_i64(&f, v);
}

static int read_u64(const char *s, uint64_t *v)
{
    packed_fields f;

    packed_fields_init(&f, s, strlen(s));
    return packed_u64(&f, v);
}

static void test_numbers(void **state)
{
    int64_t v;
    uint64_t u;

    (void)state;
    assert_int_equal(read_i64("9223372036854775807", &v), SLUICE_OK);
    assert_true(v == INT64_MAX);
    assert_int_equal(read_i64("-9223372036854775808", &v), SLUICE_OK);
    assert_true(v == INT64_MIN);
    assert_int_equal(read_i64("-0", &v), SLUICE_OK);
    assert_true(v == 0);
    assert_int_equal(read_i64("-17", &v), SLUICE_OK);
    assert_true(v == -17);
    assert_int_equal(read_i64("9223372036854775808", &v), SLUICE_EPARSE);
    assert_int_equal(read_i64("-9223372036854775809", &v), SLUICE_EPARSE);
    assert_int_equal(read_i64("-", &v), SLUICE_EPARSE);
    assert_int_equal(read_i64("+1", &v), SLUICE_EPARSE);
    assert_int_equal(read_i64("1x", &v), SLUICE_EPARSE);
    assert_int_equal(read_i64("", &v), SLUICE_EPARSE);
    assert_int_equal(read_u64("18446744073709551615", &u), SLUICE_OK);
    assert_true(u == UINT64_MAX);
    assert_int_equal(read_u64("18446744073709551616", &u), SLUICE_EPARSE);
    assert_int_equal(read_u64("-1", &u), SLUICE_EPARSE);
}

static void test_fields(void **state)
{
    const char *s = "OK 12 -3 7";
    packed_fields f;
    const char *w;
    size_t len;
    int64_t v;

    (void)state;
    packed_fields_init(&f, s, strlen(s));
    assert_int_equal(packed_next(&f, &w, &len), SLUICE_OK);
    assert_int_equal(len, 2);
    assert_memory_equal(w, "OK", 2);
    assert_int_equal(packed_range(&f, 0, 12, &v), SLUICE_OK);
    assert_true(v == 12);
    assert_int_equal(packed_range(&f, 0, 5, &v), SLUICE_EPARSE); /* -3 is below 0 */
    assert_true(v == 0);
    assert_false(packed_at_end(&f));
    assert_int_equal(packed_i64(&f, &v), SLUICE_OK);
    assert_true(v == 7);
    assert_true(packed_at_end(&f));
    assert_int_equal(packed_next(&f, &w, &len), SLUICE_EPARSE);

    /* Two spaces make an empty field, which is refused. */
    packed_fields_init(&f, "1  2", 4);
    assert_int_equal(packed_i64(&f, &v), SLUICE_OK);
    assert_int_equal(packed_i64(&f, &v), SLUICE_EPARSE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arena_keeps_spans),
        cmocka_unit_test(test_arena_out_of_memory),
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_fields),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
