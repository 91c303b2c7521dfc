/* SPDX-License-Identifier: MIT */
/*
 * Tests of the small base helpers: saturating arithmetic (src/base/sat.h) and the grow helper
 * (src/base/grow.h). Saturation is checked at and around every edge of the range against the
 * exact result computed in 128 bits; growth is checked for its capacities, its overflow refusal
 * and, under an out-of-memory sweep, for leaving the array unchanged and leaking nothing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/alloc.h"
#include "base/grow.h"
#include "base/hash.h"
#include "base/heap.h"
#include "base/ptab.h"
#include "base/quote.h"
#include "base/sat.h"
#include "sluice/error.h"
#include "testutil.h"

/* ---- sat.h --------------------------------------------------------------------------------- */

static int64_t clamp_i128(__int128 v)
{
    if (v > INT64_MAX)
        return INT64_MAX;
    if (v < INT64_MIN)
        return INT64_MIN;
    return (int64_t)v;
}

static uint64_t clamp_u128(__int128 v)
{
    if (v > (__int128)UINT64_MAX)
        return UINT64_MAX;
    if (v < 0)
        return 0;
    return (uint64_t)v;
}

static const int64_t edges_i[] = {
    INT64_MIN,
    INT64_MIN + 1,
    INT64_MIN / 2,
    -3037000500,
    -3037000499,
    -2,
    -1,
    0,
    1,
    2,
    3037000499,
    3037000500,
    INT64_MAX / 2,
    INT64_MAX / 2 + 1,
    INT64_MAX - 1,
    INT64_MAX,
};

static const uint64_t edges_u[] = {
    0,          1, 2, 4294967295u, 4294967296u, UINT64_MAX / 2, UINT64_MAX / 2 + 1, UINT64_MAX - 1,
    UINT64_MAX,
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static void test_sat_signed_edges(void **state)
{
    (void)state;
    for (size_t i = 0; i < COUNT(edges_i); i++) {
        for (size_t j = 0; j < COUNT(edges_i); j++) {
            int64_t a = edges_i[i], b = edges_i[j];

            assert_true(sat_add_i64(a, b) == clamp_i128((__int128)a + b));
            assert_true(sat_sub_i64(a, b) == clamp_i128((__int128)a - b));
            assert_true(sat_mul_i64(a, b) == clamp_i128((__int128)a * b));
        }
    }
}

static void test_sat_unsigned_edges(void **state)
{
    (void)state;
    for (size_t i = 0; i < COUNT(edges_u); i++) {
        for (size_t j = 0; j < COUNT(edges_u); j++) {
            uint64_t a = edges_u[i], b = edges_u[j];

            assert_true(sat_add_u64(a, b) == clamp_u128((__int128)a + b));
            assert_true(sat_sub_u64(a, b) == clamp_u128((__int128)a - b));
            /* a * b can exceed 128 signed bits only when both exceed 2^63; clamp first. */
            if (a > UINT32_MAX && b > UINT32_MAX)
                assert_true(sat_mul_u64(a, b) == UINT64_MAX);
            else
                assert_true(sat_mul_u64(a, b) == clamp_u128((__int128)a * b));
        }
    }
}

static void test_sat_random(void **state)
{
    test_rng r;

    (void)state;
    rng_seed(&r, 9);
    for (int i = 0; i < 100000; i++) {
        int64_t a = (int64_t)rng_next(&r) >> (rng_next(&r) % 64);
        int64_t b = (int64_t)rng_next(&r) >> (rng_next(&r) % 64);
        uint64_t ua = rng_next(&r) >> (rng_next(&r) % 64);
        uint64_t ub = rng_next(&r) >> (rng_next(&r) % 64);

        assert_true(sat_add_i64(a, b) == clamp_i128((__int128)a + b));
        assert_true(sat_sub_i64(a, b) == clamp_i128((__int128)a - b));
        assert_true(sat_mul_i64(a, b) == clamp_i128((__int128)a * b));
        assert_true(sat_add_u64(ua, ub) == clamp_u128((__int128)ua + ub));
        assert_true(sat_sub_u64(ua, ub) == clamp_u128((__int128)ua - ub));
        if (ua <= UINT32_MAX || ub <= UINT32_MAX)
            assert_true(sat_mul_u64(ua, ub) == clamp_u128((__int128)ua * ub));
    }
}

/* ---- grow.h -------------------------------------------------------------------------------- */

static void test_grow_capacities(void **state)
{
    int64_t *v = NULL;
    size_t cap = 0;

    (void)state;
    assert_int_equal(grow_array(&v, &cap, 0, sizeof *v, 8), SLUICE_OK);
    assert_null(v);
    assert_int_equal(cap, 0);
    assert_int_equal(grow_array(&v, &cap, 1, sizeof *v, 8), SLUICE_OK);
    assert_non_null(v);
    assert_int_equal(cap, 8);
    for (size_t i = 0; i < 8; i++)
        v[i] = (int64_t)i;
    assert_int_equal(grow_array(&v, &cap, 8, sizeof *v, 8), SLUICE_OK);
    assert_int_equal(cap, 8);
    assert_int_equal(grow_array(&v, &cap, 9, sizeof *v, 8), SLUICE_OK);
    assert_int_equal(cap, 16);
    assert_int_equal(grow_array(&v, &cap, 100, sizeof *v, 8), SLUICE_OK);
    assert_int_equal(cap, 128);
    for (size_t i = 0; i < 8; i++)
        assert_int_equal(v[i], (int64_t)i);
    alloc_free(v);
}

static void test_grow_first_cap_larger_than_need(void **state)
{
    char *p = NULL;
    size_t cap = 0;

    (void)state;
    assert_int_equal(grow_array(&p, &cap, 3, 1, 1024), SLUICE_OK);
    assert_int_equal(cap, 1024);
    alloc_free(p);
    p = NULL;
    cap = 0;
    assert_int_equal(grow_array(&p, &cap, 5000, 1, 1024), SLUICE_OK);
    assert_int_equal(cap, 8192);
    alloc_free(p);
}

static void test_grow_refuses_overflow(void **state)
{
    uint64_t *v = NULL;
    size_t cap = 0;

    (void)state;
    assert_int_equal(grow_array(&v, &cap, SIZE_MAX / 4, sizeof *v, 8), SLUICE_ENOMEM);
    assert_null(v);
    assert_int_equal(cap, 0);
    assert_int_equal(grow_array(&v, &cap, SIZE_MAX / 2 + 1, 2, 8), SLUICE_ENOMEM);
    assert_null(v);
    assert_int_equal(cap, 0);
}

/* Appends 1000 values one at a time; on failure the array must still be intact. */
static int grow_body(void *arg)
{
    uint32_t *v = NULL;
    size_t cap = 0, n = 0;
    int rc = SLUICE_OK;

    (void)arg;
    for (uint32_t i = 0; i < 1000; i++) {
        uint32_t *before = v;
        size_t before_cap = cap;

        rc = grow_array(&v, &cap, n + 1, sizeof *v, 4);
        if (rc != SLUICE_OK) {
            assert_ptr_equal(v, before);
            assert_int_equal(cap, before_cap);
            for (size_t k = 0; k < n; k++)
                assert_int_equal(v[k], k);
            break;
        }
        v[n++] = i;
    }
    alloc_free(v);
    return rc;
}

static void test_grow_oom_sweep(void **state)
{
    long n;

    (void)state;
    n = oom_sweep(grow_body, NULL, 100);
    /* 4, 8, ..., 1024: nine allocations, the tenth is never failed. */
    assert_int_equal(n, 10);
}

/* ---- ptab.h: the fixed table --------------------------------------------------------------- */

static int int_eq(const void *p, const void *key)
{
    return *(const int *)p == *(const int *)key;
}

static void test_ptab_fixed(void **state)
{
    ptab_slot slots[16];
    int v[16];
    ptab t;

    (void)state;
    memset(slots, 0, sizeof slots);
    oom_install(1); /* a fixed table never allocates */
    ptab_init_fixed(&t, slots, 16);
    for (int i = 0; i < 12; i++) {
        v[i] = i;
        assert_int_equal(ptab_insert(&t, hash_mix((uint64_t)i), &v[i]), SLUICE_OK);
    }
    v[12] = 12;
    assert_int_equal(ptab_insert(&t, hash_mix(12), &v[12]), SLUICE_ENOMEM);
    assert_int_equal(ptab_reserve(&t, 1), SLUICE_ENOMEM);
    for (int i = 0; i < 12; i++)
        assert_ptr_equal(ptab_find(&t, hash_mix((uint64_t)i), &i, int_eq), &v[i]);
    assert_int_equal(ptab_remove(&t, hash_mix(3), &v[3]), SLUICE_OK);
    assert_int_equal(ptab_insert(&t, hash_mix(12), &v[12]), SLUICE_OK);
    assert_null(ptab_find(&t, hash_mix(3), &v[3], int_eq));
    assert_int_equal(oom_allocations(), 0);
    ptab_free(&t); /* leaves the caller's slots alone */
    oom_uninstall();
    assert_int_equal(t.cap, 0);
}

/* ---- hash.h ------------------------------------------------------------------------------- */

static void test_hash_words3(void **state)
{
    /* Small triples, the workload it serves, never collide; the low bits spread evenly. */
    enum { SLOTS = 1024 };
    static uint64_t seen[21 * 21 * 21];
    unsigned counts[SLOTS] = {0};
    size_t n = 0;

    (void)state;
    for (uint64_t a = 0; a < 21; a++)
        for (uint64_t b = 1; b < 22; b++)
            for (uint64_t c = 1; c < 22; c++) {
                uint64_t h = hash_words3(a, b * 1000, c * 60);

                for (size_t k = 0; k < n; k++)
                    assert_true(seen[k] != h);
                seen[n++] = h;
                counts[h % SLOTS]++;
            }
    for (size_t i = 0; i < SLOTS; i++)
        assert_true(counts[i] < 30); /* 9 expected per slot */
    assert_true(hash_words3(1, 2, 3) != hash_words3(3, 2, 1));
}

/* ---- heap.h: trimming ------------------------------------------------------------------------ */

typedef struct hitem {
    int v;
    size_t idx;
} hitem;

static int hitem_less(const void *a, const void *b)
{
    return ((const hitem *)a)->v < ((const hitem *)b)->v;
}

static void test_heap_trim(void **state)
{
    hitem it[100];
    heap h;

    (void)state;
    heap_init(&h, hitem_less, offsetof(hitem, idx));
    for (int i = 0; i < 100; i++) {
        it[i].v = (i * 37) % 100;
        assert_int_equal(heap_push(&h, &it[i]), SLUICE_OK);
    }
    assert_int_equal(h.cap, 128);
    heap_trim(&h, 8); /* full enough: kept */
    assert_int_equal(h.cap, 128);
    for (int i = 0; i < 90; i++)
        assert_int_equal(((hitem *)heap_pop(&h))->v, i);
    heap_trim(&h, 8); /* 10 of 128: halved until a quarter is used */
    assert_int_equal(h.cap, 32);
    heap_trim(&h, 8);
    assert_int_equal(h.cap, 32);
    for (int i = 90; i < 100; i++)
        assert_int_equal(((hitem *)heap_pop(&h))->v, i);
    heap_trim(&h, 16); /* empty: down to min_cap, not below */
    assert_int_equal(h.cap, 16);
    heap_trim(&h, 1); /* 0 < 4 / 4 still halves; 0 < 2 / 4 does not */
    assert_int_equal(h.cap, 2);
    heap_free(&h);
    assert_null(h.items);
    assert_int_equal(heap_push(&h, &it[0]), SLUICE_OK);
    assert_ptr_equal(heap_top(&h), &it[0]);
    heap_free(&h);
}

/* heap_prepare allocates aside and changes nothing until heap_install; out of memory leaves the
 * heap as it was. */
static void test_heap_prepare_install(void **state)
{
    hitem it[9];
    void **items;
    size_t cap;
    heap h;

    (void)state;
    heap_init(&h, hitem_less, offsetof(hitem, idx));
    for (int i = 0; i < 8; i++) {
        it[i].v = 8 - i;
        assert_int_equal(heap_push(&h, &it[i]), SLUICE_OK);
    }
    assert_int_equal(heap_prepare(&h, 8, &items, &cap), SLUICE_OK); /* room already */
    assert_null(items);
    heap_install(&h, items, cap);
    assert_int_equal(h.cap, 8);

    oom_install(1);
    assert_int_equal(heap_prepare(&h, 9, &items, &cap), SLUICE_ENOMEM);
    oom_uninstall();
    assert_int_equal(h.cap, 8);

    assert_int_equal(heap_prepare(&h, 9, &items, &cap), SLUICE_OK);
    assert_non_null(items);
    assert_int_equal(cap, 16);
    assert_int_equal(h.cap, 8); /* nothing changed yet */
    heap_install(&h, items, cap);
    assert_int_equal(h.cap, 16);
    it[8].v = 0;
    assert_int_equal(heap_push(&h, &it[8]), SLUICE_OK);
    for (int v = 0; v <= 8; v++)
        assert_int_equal(((hitem *)heap_pop(&h))->v, v);
    heap_free(&h);
}

/* ---- quote.h: the message formatter -------------------------------------------------------- */

static void test_msgf(void **state)
{
    char m[12];

    (void)state;
    msgf(NULL, 10, "x%d", 1); /* no message wanted: nothing happens */
    memset(m, '#', sizeof m);
    msgf(m, 0, "x%d", 1);
    assert_int_equal(m[0], '#');
    msgf(m, sizeof m, "a %s", "long message");
    assert_string_equal(m, "a long mess"); /* cut, NUL-terminated */

    msgf(m, sizeof m, "ctx: ");
    msgf_append(m, sizeof m, "%s", "why");
    assert_string_equal(m, "ctx: why");
    msgf_append(m, sizeof m, "%s", " and more");
    assert_string_equal(m, "ctx: why an");

    /* A prefix that fills the buffer is followed by nothing. */
    msgf(m, sizeof m, "%s", "0123456789abcdef");
    msgf_append(m, sizeof m, "%s", "reason");
    assert_string_equal(m, "0123456789a");
    msgf(m, sizeof m, "%s", "0123456789a"); /* exactly full */
    msgf_append(m, sizeof m, "%s", "reason");
    assert_string_equal(m, "0123456789a");
    msgf_append(NULL, 0, "%s", "reason");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sat_signed_edges),
        cmocka_unit_test(test_sat_unsigned_edges),
        cmocka_unit_test(test_sat_random),
        cmocka_unit_test(test_grow_capacities),
        cmocka_unit_test(test_grow_first_cap_larger_than_need),
        cmocka_unit_test(test_grow_refuses_overflow),
        cmocka_unit_test(test_grow_oom_sweep),
        cmocka_unit_test(test_ptab_fixed),
        cmocka_unit_test(test_hash_words3),
        cmocka_unit_test(test_heap_trim),
        cmocka_unit_test(test_heap_prepare_install),
        cmocka_unit_test(test_msgf),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
