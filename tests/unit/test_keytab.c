/* SPDX-License-Identifier: MIT */
/*
 * Tests of the key table (src/core/keytab.c) and of the key digest (src/core/keyhash.c).
 *
 * Hand-picked cases cover the edges (binary and empty keys, the inline/out-of-line boundary,
 * value alignment); a randomized property test replays thousands of operations against a naive
 * reference model (an array indexed by key number) and compares every key after every step; the
 * out-of-memory sweep fails each allocation of a growing table in turn. All of it is pure: no
 * clock, no sleep; "idleness" is a simulated expiry time stored in each value.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/keyhash.h"
#include "core/keytab.h"
#include "base/hash.h"
#include "sluice/error.h"
#include "testutil.h"

/* The value the tests store: 16 bytes, like a rate limit's state. */
typedef struct test_value {
    uint64_t id;        /* which key this is (index into the test's key list) */
    int64_t expires_ns; /* idle once the simulated clock reaches it */
} test_value;

/* The simulated clock and the counters the callbacks update. */
typedef struct sweep_ctx {
    int64_t now_ns;
    size_t idle_calls;
    size_t destroyed;
} sweep_ctx;

static int value_idle(void *value, void *arg)
{
    sweep_ctx *c = arg;
    const test_value *v = value;

    c->idle_calls++;
    return v->expires_ns <= c->now_ns;
}

static void value_destroy(void *value, void *arg)
{
    sweep_ctx *c = arg;

    (void)value;
    c->destroyed++;
}

static keytab *new_table(void)
{
    keytab *t = NULL;

    assert_int_equal(keytab_new(sizeof(test_value), &t), SLUICE_OK);
    assert_non_null(t);
    return t;
}

static void test_new_rejects_large_values(void **state)
{
    keytab *t = (keytab *)&t;

    (void)state;
    assert_int_equal(keytab_new(65, &t), SLUICE_EINVAL);
    assert_null(t);
    assert_int_equal(keytab_new(0, &t), SLUICE_OK);
    assert_int_equal(keytab_count(t), 0);
    assert_int_equal(keytab_bytes(t), 0);
    keytab_free(t, NULL, NULL);
    keytab_free(NULL, NULL, NULL);
}

static void test_basics(void **state)
{
    keytab *t = new_table();
    sweep_ctx c = {0};
    test_value *v = NULL, *w = NULL;
    int created = -1;

    (void)state;
    assert_null(keytab_find(t, "alpha", 5));
    assert_int_equal(keytab_delete(t, "alpha", 5, NULL, NULL), SLUICE_ENOTFOUND);

    assert_int_equal(keytab_upsert(t, "alpha", 5, (void **)&v, &created), SLUICE_OK);
    assert_int_equal(created, 1);
    assert_int_equal(v->id, 0);
    assert_int_equal(v->expires_ns, 0);
    v->id = 42;
    assert_int_equal(keytab_count(t), 1);

    assert_int_equal(keytab_upsert(t, "alpha", 5, (void **)&w, &created), SLUICE_OK);
    assert_int_equal(created, 0);
    assert_ptr_equal(v, w);
    assert_int_equal(w->id, 42);
    assert_ptr_equal(keytab_find(t, "alpha", 5), v);
    assert_null(keytab_find(t, "alph", 4));
    assert_null(keytab_find(t, "alphab", 6));
    assert_int_equal(keytab_upsert(t, "beta", 4, (void **)&w, NULL), SLUICE_OK);
    assert_int_equal(keytab_count(t), 2);

    assert_int_equal(keytab_delete(t, "alpha", 5, value_destroy, &c), SLUICE_OK);
    assert_int_equal(c.destroyed, 1);
    assert_null(keytab_find(t, "alpha", 5));
    assert_non_null(keytab_find(t, "beta", 4));
    assert_int_equal(keytab_delete(t, "alpha", 5, value_destroy, &c), SLUICE_ENOTFOUND);
    assert_int_equal(c.destroyed, 1);
    assert_int_equal(keytab_count(t), 1);

    /* A key inserted again starts from a zeroed value. */
    assert_int_equal(keytab_upsert(t, "alpha", 5, (void **)&v, &created), SLUICE_OK);
    assert_int_equal(created, 1);
    assert_int_equal(v->id, 0);

    keytab_free(t, value_destroy, &c);
    assert_int_equal(c.destroyed, 3);
}

static void test_binary_keys(void **state)
{
    static const char *const keys[] = {"a", "a\0", "a\0b", "a\0c", "\0a", "\0\0\0\0\0\0\0\0\0"};
    static const size_t lens[] = {1, 2, 3, 3, 2, 9};
    const size_t n = sizeof lens / sizeof lens[0];
    keytab *t = new_table();
    test_value *v;
    int created;

    (void)state;
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(keytab_upsert(t, keys[i], lens[i], (void **)&v, &created), SLUICE_OK);
        assert_int_equal(created, 1);
        v->id = i;
    }
    assert_int_equal(keytab_count(t), n);
    for (size_t i = 0; i < n; i++) {
        v = keytab_find(t, keys[i], lens[i]);
        assert_non_null(v);
        assert_int_equal(v->id, i);
    }
    /* Iteration hands back the exact bytes. */
    {
        size_t pos = 0, keylen, seen = 0;
        const char *key;
        void *value;

        while (keytab_next(t, &pos, &key, &keylen, &value)) {
            size_t id = (size_t)((test_value *)value)->id;

            assert_int_equal(keylen, lens[id]);
            assert_memory_equal(key, keys[id], keylen);
            seen++;
        }
        assert_int_equal(seen, n);
    }
    keytab_free(t, NULL, NULL);
}

static void test_empty_key(void **state)
{
    keytab *t = new_table();
    test_value *v, *w;
    int created;

    (void)state;
    assert_null(keytab_find(t, NULL, 0));
    assert_int_equal(keytab_upsert(t, NULL, 0, (void **)&v, &created), SLUICE_OK);
    assert_int_equal(created, 1);
    v->id = 7;
    /* NULL and "" of length 0 are the same key. */
    assert_int_equal(keytab_upsert(t, "", 0, (void **)&w, &created), SLUICE_OK);
    assert_int_equal(created, 0);
    assert_ptr_equal(v, w);
    assert_null(keytab_find(t, "\0", 1));
    assert_int_equal(keytab_delete(t, "", 0, NULL, NULL), SLUICE_OK);
    assert_null(keytab_find(t, NULL, 0));
    assert_int_equal(keytab_count(t), 0);
    keytab_free(t, NULL, NULL);
}

/* The bytes of a table after inserting n short keys and deleting the last `deleted` of them in
 * order: the table's own memory, to which out-of-line keys add their bytes. */
static size_t short_keys_bytes(size_t n, size_t deleted)
{
    keytab *t = new_table();
    size_t bytes;
    void *v;

    for (size_t i = 0; i < n; i++)
        assert_int_equal(keytab_upsert(t, (const char *)&i, sizeof i, &v, NULL), SLUICE_OK);
    for (size_t i = n - deleted; i < n; i++)
        assert_int_equal(keytab_delete(t, (const char *)&i, sizeof i, NULL, NULL), SLUICE_OK);
    bytes = keytab_bytes(t);
    keytab_free(t, NULL, NULL);
    return bytes;
}

static void test_long_keys(void **state)
{
    keytab *t = new_table();
    char key[300];
    size_t key_bytes = 0;
    test_value *v;

    (void)state;
    /* Every length from 0 to 299 (across the inline limit), each a distinct key that shares a
     * long prefix with the others. */
    memset(key, 'x', sizeof key);
    for (size_t len = 0; len < sizeof key; len++) {
        if (len > 0)
            key[len - 1] = (char)('A' + len % 26);
        assert_int_equal(keytab_upsert(t, key, len, (void **)&v, NULL), SLUICE_OK);
        v->id = len;
        if (len > 15)
            key_bytes += len;
        if (len > 0)
            key[len - 1] = 'x';
    }
    assert_int_equal(keytab_count(t), sizeof key);
    /* Keys of 16 bytes and more live out of line and cost exactly their bytes on top of a table
     * of as many short keys. */
    assert_int_equal(keytab_bytes(t) - key_bytes, short_keys_bytes(sizeof key, 0));
    for (size_t len = 0; len < sizeof key; len++) {
        if (len > 0)
            key[len - 1] = (char)('A' + len % 26);
        v = keytab_find(t, key, len);
        assert_non_null(v);
        assert_int_equal(v->id, len);
        /* Same length, last byte different: absent. */
        if (len > 0) {
            key[len - 1] = 'x';
            assert_null(keytab_find(t, key, len));
        }
    }
    /* Deleting the long keys returns their bytes. */
    for (size_t len = 17; len < sizeof key; len++) {
        key[len - 1] = (char)('A' + len % 26);
        assert_int_equal(keytab_delete(t, key, len, NULL, NULL), SLUICE_OK);
        key[len - 1] = 'x';
    }
    assert_int_equal(keytab_count(t), 17);
    assert_int_equal(keytab_bytes(t) - 16, short_keys_bytes(sizeof key, sizeof key - 17));
    keytab_free(t, NULL, NULL);
}

static void test_value_alignment(void **state)
{
    (void)state;
    for (size_t size = 0; size <= 64; size++) {
        keytab *t = NULL;

        assert_int_equal(keytab_new(size, &t), SLUICE_OK);
        for (int i = 0; i < 100; i++) {
            char key[16];
            unsigned char *v;
            int len = snprintf(key, sizeof key, "k%d", i);

            assert_int_equal(keytab_upsert(t, key, (size_t)len, (void **)&v, NULL), SLUICE_OK);
            assert_int_equal((uintptr_t)v % 8, 0);
            for (size_t b = 0; b < size; b++)
                assert_int_equal(v[b], 0);
            memset(v, 0xff, size);
        }
        keytab_free(t, NULL, NULL);
    }
}

/* ---- Property test against a reference model --------------------------------------------------
 */

#define MAX_KEY 40

/* A key of the test's universe, and what the model believes about it. */
typedef struct model_key {
    char bytes[MAX_KEY];
    size_t len;
    int present;        /* the model holds this key */
    int64_t expires_ns; /* its value, when present */
} model_key;

/* Fills n distinct random keys: lengths 0..MAX_KEY, bytes from a tiny alphabet (including NUL)
 * so that many keys share prefixes and lengths. */
static void make_universe(test_rng *r, model_key *u, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int dup;

        do {
            u[i].len = (size_t)rng_range(r, 0, MAX_KEY);
            for (size_t b = 0; b < u[i].len; b++)
                u[i].bytes[b] = "\0ab\xff"[rng_range(r, 0, 3)];
            dup = 0;
            for (size_t j = 0; j < i && !dup; j++)
                dup = u[j].len == u[i].len && memcmp(u[j].bytes, u[i].bytes, u[i].len) == 0;
        } while (dup);
        u[i].present = 0;
    }
}

/* Checks that the table holds exactly the model's keys with the model's values. */
static void check_model(const keytab *t, const model_key *u, size_t n)
{
    size_t present = 0;

    for (size_t i = 0; i < n; i++) {
        const test_value *v = keytab_find(t, u[i].bytes, u[i].len);

        if (!u[i].present) {
            assert_null(v);
            continue;
        }
        present++;
        assert_non_null(v);
        assert_int_equal(v->id, i);
        assert_int_equal(v->expires_ns, u[i].expires_ns);
    }
    assert_int_equal(keytab_count(t), present);
}

static void run_property(uint64_t seed, size_t universe, int steps)
{
    model_key *u = calloc(universe, sizeof *u);
    keytab *t = new_table();
    sweep_ctx c = {0};
    test_rng r;

    assert_non_null(u);
    rng_seed(&r, seed);
    make_universe(&r, u, universe);
    for (int step = 0; step < steps; step++) {
        size_t k = (size_t)rng_range(&r, 0, (int64_t)universe - 1);
        int64_t op = rng_range(&r, 0, 99);
        test_value *v;
        int created;

        c.now_ns++;
        if (op < 55) {
            /* Upsert: a new key gets an expiry, a present one is pushed further out. */
            assert_int_equal(keytab_upsert(t, u[k].bytes, u[k].len, (void **)&v, &created),
                             SLUICE_OK);
            assert_int_equal(created, !u[k].present);
            if (created) {
                assert_int_equal(v->expires_ns, 0);
                v->id = k;
                u[k].present = 1;
                u[k].expires_ns = c.now_ns;
            }
            assert_int_equal(v->id, k);
            u[k].expires_ns += rng_range(&r, 0, 50);
            v->expires_ns = u[k].expires_ns;
        } else if (op < 85) {
            size_t before = c.destroyed;
            int rc = keytab_delete(t, u[k].bytes, u[k].len, value_destroy, &c);

            assert_int_equal(rc, u[k].present ? SLUICE_OK : SLUICE_ENOTFOUND);
            assert_int_equal(c.destroyed - before, u[k].present ? 1 : 0);
            u[k].present = 0;
        } else if (op < 98) {
            /* A sweep of random budget: whatever it removed must have been idle, and it must
             * report exactly that many. */
            size_t before = c.destroyed, removed, gone = 0;

            removed = keytab_sweep(t, (size_t)rng_range(&r, 0, 64), value_idle, value_destroy, &c);
            assert_int_equal(c.destroyed - before, removed);
            for (size_t i = 0; i < universe; i++) {
                if (u[i].present && !keytab_find(t, u[i].bytes, u[i].len)) {
                    assert_true(u[i].expires_ns <= c.now_ns);
                    u[i].present = 0;
                    gone++;
                }
            }
            assert_int_equal(gone, removed);
        } else {
            size_t before = c.destroyed, n = keytab_count(t);

            keytab_clear(t, value_destroy, &c);
            assert_int_equal(c.destroyed - before, n);
            for (size_t i = 0; i < universe; i++)
                u[i].present = 0;
        }
        check_model(t, u, universe);
    }
    /* A full pass removes every idle key and nothing else. */
    c.now_ns += 25;
    keytab_sweep(t, SIZE_MAX, value_idle, value_destroy, &c);
    for (size_t i = 0; i < universe; i++)
        if (u[i].present && u[i].expires_ns <= c.now_ns)
            u[i].present = 0;
    check_model(t, u, universe);
    keytab_free(t, NULL, NULL);
    free(u);
}

static void test_property_small(void **state)
{
    (void)state;
    /* 12 keys keep the table at 16 slots, 3/4 full: long clusters that wrap around the end. */
    for (uint64_t seed = 1; seed <= 20; seed++)
        run_property(seed, 12, 2000);
}

static void test_property_large(void **state)
{
    (void)state;
    /* Grows and shrinks through several sizes. */
    run_property(0x5eed, 600, 20000);
}

/* ---- Sweep and iteration ----------------------------------------------------------------------
 */

static void insert_numbered(keytab *t, size_t n, int64_t expires_ns)
{
    for (size_t i = 0; i < n; i++) {
        char key[32];
        int len = snprintf(key, sizeof key, "key:%zu", i);
        test_value *v;

        assert_int_equal(keytab_upsert(t, key, (size_t)len, (void **)&v, NULL), SLUICE_OK);
        v->id = i;
        v->expires_ns = expires_ns < 0 ? (int64_t)i : expires_ns;
    }
}

static void test_sweep_cursor_wraps(void **state)
{
    keytab *t = new_table();
    sweep_ctx c = {0};
    size_t cap, removed = 0, calls = 0;

    (void)state;
    insert_numbered(t, 1000, -1); /* key i expires at i */
    cap = keytab_capacity(t);
    assert_int_equal(keytab_sweep(t, 0, value_idle, value_destroy, &c), 0);

    /* Nothing idle: one pass of `cap` slots asks every entry exactly once. */
    c.now_ns = -1;
    assert_int_equal(keytab_sweep(t, cap, value_idle, value_destroy, &c), 0);
    assert_int_equal(c.idle_calls, 1000);
    /* Starting mid-table with a budget that does not divide the capacity, passes wrap around:
     * again each entry is asked once per `cap` slots visited. */
    keytab_sweep(t, 37, value_idle, value_destroy, &c);
    c.idle_calls = 0;
    for (size_t visited = 0; visited < cap; visited += 7)
        keytab_sweep(t, visited + 7 <= cap ? 7 : cap - visited, value_idle, value_destroy, &c);
    assert_int_equal(c.idle_calls, 1000);

    /* Keys 0..499 idle: small budgets remove them all within one pass and nothing else. */
    c.now_ns = 499;
    for (size_t visited = 0; visited < cap; visited += 13) {
        removed += keytab_sweep(t, 13, value_idle, value_destroy, &c);
        calls++;
    }
    assert_int_equal(removed, 500);
    assert_int_equal(c.destroyed, 500);
    assert_int_equal(keytab_count(t), 500);
    for (size_t i = 0; i < 1000; i++) {
        char key[32];
        int len = snprintf(key, sizeof key, "key:%zu", i);

        if (i < 500)
            assert_null(keytab_find(t, key, (size_t)len));
        else
            assert_non_null(keytab_find(t, key, (size_t)len));
    }
    assert_true(calls > 1);
    keytab_free(t, value_destroy, &c);
    assert_int_equal(c.destroyed, 1000);
}

static void test_next_visits_each_once(void **state)
{
    enum { N = 5000 };
    keytab *t = new_table();
    unsigned char *seen = calloc(N, 1);
    size_t pos = 0, keylen, n = 0;
    const char *key;
    void *value;

    (void)state;
    assert_non_null(seen);
    assert_int_equal(keytab_next(t, &pos, &key, &keylen, &value), 0);
    insert_numbered(t, N, 0);
    /* Delete every third key so the slot order has holes and shifted entries. */
    for (size_t i = 0; i < N; i += 3) {
        char k[32];
        int len = snprintf(k, sizeof k, "key:%zu", i);

        assert_int_equal(keytab_delete(t, k, (size_t)len, NULL, NULL), SLUICE_OK);
    }
    pos = 0;
    while (keytab_next(t, &pos, &key, &keylen, &value)) {
        const test_value *v = value;
        char k[32];
        int len = snprintf(k, sizeof k, "key:%zu", (size_t)v->id);

        assert_true(v->id < N);
        assert_int_equal(v->id % 3 != 0, 1);
        assert_int_equal(seen[v->id], 0);
        seen[v->id] = 1;
        assert_int_equal(keylen, (size_t)len);
        assert_memory_equal(key, k, keylen);
        n++;
    }
    assert_int_equal(n, keytab_count(t));
    assert_int_equal(n, N - (N + 2) / 3);
    /* The end is sticky. */
    assert_int_equal(keytab_next(t, &pos, &key, &keylen, &value), 0);
    free(seen);
    keytab_free(t, NULL, NULL);
}

static void test_million_keys_swept(void **state)
{
    enum { N = 1000000 };
    keytab *t = new_table();
    sweep_ctx c = {0};
    size_t bytes, removed = 0, calls = 0;

    (void)state;
    insert_numbered(t, N, -1);
    assert_int_equal(keytab_count(t), N);
    bytes = keytab_bytes(t);
    print_message("1,000,000 keys of 5-10 bytes, 16-byte values: %zu bytes (%.1f per key), "
                  "%zu slots\n",
                  bytes, (double)bytes / N, keytab_capacity(t));
    /* Every key short enough to be inline: the table is just its slots, 32 bytes each, at a load
     * of at least 2/3: under 48 bytes a key. */
    assert_int_equal(bytes, keytab_capacity(t) * 32);
    assert_true(bytes <= (size_t)N * 48);

    c.now_ns = N; /* every key idle */
    while (keytab_count(t) > 0) {
        removed += keytab_sweep(t, 65536, value_idle, value_destroy, &c);
        assert_true(++calls <= 64);
    }
    assert_int_equal(removed, N);
    assert_int_equal(c.destroyed, N);
    /* The table gave its memory back as it emptied. */
    print_message("after sweeping all away: %zu keys, %zu bytes\n", keytab_count(t),
                  keytab_bytes(t));
    assert_int_equal(keytab_bytes(t), 0);
    assert_null(keytab_find(t, "key:1", 5));
    /* And it is still usable. */
    insert_numbered(t, 10, 0);
    assert_int_equal(keytab_count(t), 10);
    keytab_free(t, NULL, NULL);
}

static void test_shrinks_on_delete(void **state)
{
    keytab *t = new_table();
    size_t peak;

    (void)state;
    insert_numbered(t, 10000, 0);
    peak = keytab_capacity(t);
    for (size_t i = 0; i < 9990; i++) {
        char key[32];
        int len = snprintf(key, sizeof key, "key:%zu", i);

        assert_int_equal(keytab_delete(t, key, (size_t)len, NULL, NULL), SLUICE_OK);
        assert_true(keytab_count(t) <= keytab_capacity(t) * 3 / 4);
    }
    assert_true(keytab_capacity(t) < peak / 64);
    for (size_t i = 9990; i < 10000; i++) {
        char key[32];
        int len = snprintf(key, sizeof key, "key:%zu", i);
        const test_value *v = keytab_find(t, key, (size_t)len);

        assert_non_null(v);
        assert_int_equal(v->id, i);
    }
    keytab_free(t, NULL, NULL);
}

/* Keys that differ only in their last 8 bytes, 2^18 of them: about 8 pairs share the 32 bits of
 * hash a slot keeps, so the key comparison itself (not just the hash) must tell them apart. */
static void test_partial_hash_collisions(void **state)
{
    enum { N = 1 << 18 };
    static const size_t lens[] = {16, 24};

    (void)state;
    for (size_t l = 0; l < 2; l++) {
        keytab *t = new_table();
        char key[24];
        test_value *v;
        int created;

        memset(key, '#', sizeof key);
        for (uint32_t i = 0; i < N; i++) {
            memcpy(key + lens[l] - sizeof i, &i, sizeof i);
            assert_int_equal(keytab_upsert(t, key, lens[l], (void **)&v, &created), SLUICE_OK);
            assert_int_equal(created, 1);
            v->id = i;
        }
        for (uint32_t i = 0; i < N; i++) {
            memcpy(key + lens[l] - sizeof i, &i, sizeof i);
            v = keytab_find(t, key, lens[l]);
            assert_non_null(v);
            assert_int_equal(v->id, i);
        }
        assert_int_equal(keytab_count(t), N);
        keytab_free(t, NULL, NULL);
    }
}

/* ---- Out of memory ----------------------------------------------------------------------------
 */

/* A key of the OOM test: every fifth one too long to be inline, so both the key copy and the
 * slot array can fail. */
static size_t oom_key(size_t i, char *buf, size_t buflen)
{
    int len =
        snprintf(buf, buflen, i % 5 == 0 ? "a-long-key-that-lives-out-of-line:%zu" : "k%zu", i);

    return (size_t)len;
}

/* Inserts 200 keys (growing the table several times); on failure checks that the table is as it
 * was before the failed call, then frees everything. */
static int upsert_growth_body(void *arg)
{
    enum { N = 200 };
    keytab *t = NULL;
    long allocations;
    int rc;

    (void)arg;
    rc = keytab_new(sizeof(test_value), &t);
    if (rc != SLUICE_OK) {
        assert_null(t);
        return rc;
    }
    for (size_t i = 0; i < N; i++) {
        char key[64];
        size_t len = oom_key(i, key, sizeof key), bytes = keytab_bytes(t);
        size_t cap = keytab_capacity(t);
        test_value *v = (test_value *)&rc;
        int created = -1;

        rc = keytab_upsert(t, key, len, (void **)&v, &created);
        if (rc != SLUICE_OK) {
            assert_int_equal(rc, SLUICE_ENOMEM);
            assert_null(v);
            assert_int_equal(created, 0);
            assert_int_equal(keytab_count(t), i);
            assert_int_equal(keytab_bytes(t), bytes);
            assert_int_equal(keytab_capacity(t), cap);
            assert_null(keytab_find(t, key, len));
            for (size_t j = 0; j < i; j++) {
                const test_value *w;

                len = oom_key(j, key, sizeof key);
                w = keytab_find(t, key, len);
                assert_non_null(w);
                assert_int_equal(w->id, j);
            }
            keytab_free(t, NULL, NULL);
            return rc;
        }
        v->id = i;
    }
    /* Existing keys never allocate (in this, the passing run, the next allocation would fail
     * anyway). */
    allocations = oom_allocations();
    for (size_t i = 0; i < N; i++) {
        char key[64];
        size_t len = oom_key(i, key, sizeof key);
        test_value *v;
        int created;

        assert_int_equal(keytab_upsert(t, key, len, (void **)&v, &created), SLUICE_OK);
        assert_int_equal(created, 0);
        assert_int_equal(v->id, i);
    }
    assert_int_equal(oom_allocations(), allocations);
    keytab_free(t, NULL, NULL);
    return SLUICE_OK;
}

static void test_oom_upsert_growth(void **state)
{
    long n;

    (void)state;
    n = oom_sweep(upsert_growth_body, NULL, 1000);
    /* The table, 40 long keys and 18 slot arrays (16, 20, 24, ... 236, 279: each 3/16 larger)
     * pass once allocation 60 fails. */
    assert_int_equal(n, 1 + 40 + 18 + 1);
}

/* Deleting and sweeping under a failing allocator: the shrinking they do is best effort, so
 * every removal still happens, nothing leaks and every other key keeps its value. */
static void shrink_under_oom(long fail_at, long *allocations)
{
    enum { N = 300 };
    keytab *t = NULL;
    sweep_ctx c = {0};
    char key[64];
    size_t len;
    long before;

    oom_install(0);
    t = new_table();
    for (size_t i = 0; i < N; i++) {
        test_value *v;

        len = oom_key(i, key, sizeof key);
        assert_int_equal(keytab_upsert(t, key, len, (void **)&v, NULL), SLUICE_OK);
        v->id = i;
        v->expires_ns = (int64_t)(i % 2); /* odd keys stay busy longer */
    }
    /* From here on, allocation number fail_at and all later ones fail. The counters restart, so
     * the blocks of the filled table count as -before once freed. */
    before = oom_live_blocks();
    oom_install(fail_at);
    for (size_t i = 0; i < N; i += 3) {
        len = oom_key(i, key, sizeof key);
        assert_int_equal(keytab_delete(t, key, len, NULL, NULL), SLUICE_OK);
    }
    c.now_ns = 0; /* even keys idle */
    keytab_sweep(t, SIZE_MAX, value_idle, value_destroy, &c);
    for (size_t i = 0; i < N; i++) {
        const test_value *v;

        len = oom_key(i, key, sizeof key);
        v = keytab_find(t, key, len);
        if (i % 3 == 0 || i % 2 == 0) {
            assert_null(v);
        } else {
            assert_non_null(v);
            assert_int_equal(v->id, i);
        }
    }
    assert_int_equal(keytab_count(t), N / 3); /* odd and not a multiple of 3 */
    c.now_ns = 1;
    keytab_sweep(t, SIZE_MAX, value_idle, value_destroy, &c);
    assert_int_equal(keytab_count(t), 0);
    assert_int_equal(keytab_bytes(t), 0);
    *allocations = oom_allocations();
    keytab_free(t, NULL, NULL);
    assert_int_equal(oom_live_blocks(), -before);
    oom_uninstall();
}

static void test_oom_shrink(void **state)
{
    long allocations = 0;

    (void)state;
    /* Fail the first shrink, then the second, ... until the removals need no more. */
    for (long n = 1;; n++) {
        shrink_under_oom(n, &allocations);
        if (allocations < n)
            break;
        assert_true(n < 100);
    }
}

/* The bound the table promises: at most 48 bytes a tracked key (13-byte keys, 16-byte values)
 * at every size from 1,000 keys up, at the top of each growth step as at the bottom. */
static void test_bytes_per_key_bound(void **state)
{
    enum { N = 600000 };
    keytab *t = new_table();
    double worst = 0;
    char key[32];
    void *v;

    (void)state;
    for (size_t i = 0; i < N; i++) {
        int len = snprintf(key, sizeof key, "tenant:%06zu", i);
        size_t bytes;

        assert_int_equal(keytab_upsert(t, key, (size_t)len, &v, NULL), SLUICE_OK);
        bytes = keytab_bytes(t);
        if (i + 1 >= 1000) {
            assert_true(bytes <= 48 * (i + 1));
            if ((double)bytes / (double)(i + 1) > worst)
                worst = (double)bytes / (double)(i + 1);
        }
    }
    print_message("worst bytes per key from 1,000 to %d keys: %.1f\n", N, worst);
    keytab_free(t, NULL, NULL);
}

/* Removing a key shifts later entries of its cluster back (short and out-of-line keys alike):
 * a moved key stays findable, its value travels with it, and iteration sees each key once. */
static void test_delete_shifts_entries(void **state)
{
    keytab *t = new_table();
    test_value *v;
    size_t pos = 0, keylen, seen = 0;
    const char *key;
    void *value;

    (void)state;
    insert_numbered(t, 100, 0);
    assert_int_equal(keytab_delete(t, "key:0", 5, NULL, NULL), SLUICE_OK);
    v = keytab_find(t, "key:99", 6);
    assert_non_null(v);
    assert_int_equal(v->id, 99);
    assert_int_equal(keytab_upsert(t, "a key of thirty-two bytes, long.", 32, &value, NULL),
                     SLUICE_OK);
    ((test_value *)value)->id = 1000;
    assert_int_equal(keytab_delete(t, "key:1", 5, NULL, NULL), SLUICE_OK);
    v = keytab_find(t, "a key of thirty-two bytes, long.", 32);
    assert_non_null(v);
    assert_int_equal(v->id, 1000);
    while (keytab_next(t, &pos, &key, &keylen, &value)) {
        v = keytab_find(t, key, keylen);
        assert_ptr_equal(v, value);
        seen++;
    }
    assert_int_equal(seen, 99);
    keytab_free(t, NULL, NULL);
}

/* ---- Hashes -----------------------------------------------------------------------------------
 */

static void test_hash_spreads_low_bits(void **state)
{
    enum { KEYS = 1 << 20, BUCKETS = 1 << 16 };
    unsigned *bucket = calloc(BUCKETS, sizeof *bucket);
    unsigned max = 0;

    (void)state;
    assert_non_null(bucket);
    assert_int_equal(hash_bytes("abc", 3), hash_bytes("abc", 3));
    assert_true(hash_bytes("a", 1) != hash_bytes("a\0", 2));
    assert_true(hash_bytes("", 0) != hash_bytes("\0", 1));
    /* Sequential keys, 16 per bucket on average; a fair hash keeps the fullest well under 48. */
    for (unsigned i = 0; i < KEYS; i++) {
        char key[32];
        int len = snprintf(key, sizeof key, "tenant:%06u", i);
        unsigned b = (unsigned)(hash_bytes(key, (size_t)len) & (BUCKETS - 1));

        if (++bucket[b] > max)
            max = bucket[b];
    }
    assert_true(max < 48);
    free(bucket);
}

/* The inverse of one hash_absorb step's mix (y = m ^ (m >> 32), m = x * HASH_MUL_A): what a
 * client computes to craft keys, since each step is a bijection. */
static uint64_t unmix(uint64_t y)
{
    uint64_t m = (y & UINT64_C(0xffffffff00000000)) | ((y ^ (y >> 32)) & 0xffffffffu);
    uint64_t inv = HASH_MUL_A; /* Newton's iteration: inv * A = 1 mod 2^64 */

    for (int i = 0; i < 5; i++)
        inv *= 2 - HASH_MUL_A * inv;
    return m * inv;
}

/* 4096 keys of 15 bytes that would all have one hash if the key table hashed them without its
 * secret (hash_absorb twice from HASH_MUL_C, as keytab.c did): a client can make as many as it
 * likes, and linear probing would file them in one run, every lookup walking it. Keyed by the
 * process's secret they spread as random keys do. */
static void test_crafted_collisions_spread(void **state)
{
    enum { N = 4096 };
    const uint64_t target = UINT64_C(0x5eed5eed5eed5eed), top = (uint64_t)16 << 56;
    keytab *t = new_table();
    uint64_t w0 = 0;
    size_t made = 0;

    (void)state;
    assert_int_equal(hash_bytes_keyed("abc", 3, 0), hash_bytes("abc", 3));
    assert_true(hash_bytes_keyed("abc", 3, 1) != hash_bytes_keyed("abc", 3, 2));
    assert_true(hash_process_seed() != 0);
    assert_int_equal(hash_process_seed(), hash_process_seed());
    while (made < N) {
        uint64_t w1 = hash_absorb(HASH_MUL_C, ++w0) ^ unmix(target);
        unsigned char key[15];
        test_value *v;
        int created;

        if ((w1 & UINT64_C(0xff00000000000000)) != top) /* byte 15 of the slot: the length */
            continue;
        assert_int_equal(hash_absorb(hash_absorb(HASH_MUL_C, w0), w1), target);
        for (int i = 0; i < 8; i++)
            key[i] = (unsigned char)(w0 >> (8 * i));
        for (int i = 0; i < 7; i++)
            key[8 + i] = (unsigned char)(w1 >> (8 * i));
        assert_int_equal(keytab_upsert(t, (const char *)key, sizeof key, (void **)&v, &created),
                         SLUICE_OK);
        assert_int_equal(created, 1);
        made++;
    }
    assert_int_equal(keytab_count(t), N);
    /* Random keys at this load (0.8): a longest probe of about 50 to 150 slots; one run of
     * every key: 4095. */
    assert_true(keytab_longest_probe(t) < 1024);
    keytab_free(t, NULL, NULL);
}

static void expect_digest(const char *key, size_t keylen, const char *hex)
{
    unsigned char out[KEYHASH_LEN];
    char got[2 * KEYHASH_LEN + 1];

    assert_int_equal(keyhash_digest(key, keylen, out), SLUICE_OK);
    for (size_t i = 0; i < KEYHASH_LEN; i++)
        snprintf(got + 2 * i, 3, "%02x", out[i]);
    assert_string_equal(got, hex);
}

static void test_keyhash_vectors(void **state)
{
    unsigned char out[KEYHASH_LEN];

    (void)state;
    /* FIPS 180-2 examples, and the empty string. */
    expect_digest("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    expect_digest("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 56,
                  "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    expect_digest("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    expect_digest(NULL, 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    assert_int_equal(keyhash_digest(NULL, 1, out), SLUICE_EINVAL);
    assert_int_equal(keyhash_digest("abc", 3, NULL), SLUICE_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_new_rejects_large_values),
        cmocka_unit_test(test_basics),
        cmocka_unit_test(test_binary_keys),
        cmocka_unit_test(test_empty_key),
        cmocka_unit_test(test_long_keys),
        cmocka_unit_test(test_value_alignment),
        cmocka_unit_test(test_property_small),
        cmocka_unit_test(test_property_large),
        cmocka_unit_test(test_sweep_cursor_wraps),
        cmocka_unit_test(test_next_visits_each_once),
        cmocka_unit_test(test_million_keys_swept),
        cmocka_unit_test(test_shrinks_on_delete),
        cmocka_unit_test(test_partial_hash_collisions),
        cmocka_unit_test(test_oom_upsert_growth),
        cmocka_unit_test(test_oom_shrink),
        cmocka_unit_test(test_bytes_per_key_bound),
        cmocka_unit_test(test_delete_shifts_entries),
        cmocka_unit_test(test_hash_spreads_low_bits),
        cmocka_unit_test(test_crafted_collisions_spread),
        cmocka_unit_test(test_keyhash_vectors),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
