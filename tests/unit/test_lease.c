/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of the concurrency leases (src/core/lease.c) on a simulated clock: every test sets
 * now_ns itself and never sleeps. Besides hand-picked cases (grants up to the limit, release,
 * renew, expiry of a lost holder, stale ids), a randomized test replays random acquire / release /
 * renew / reset / expire / time-advance sequences against a small reference model and checks
 * every decision and every key's held units, and an out-of-memory sweep fails each allocation of
 * a run of acquires in turn.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/lease.h"
#include "sluice/error.h"
#include "testutil.h"

#define SEC SLUICE_NS_PER_SEC
#define T0  (INT64_C(1700000000) * SEC) /* an arbitrary epoch time to start the clock at */

/* A registry with a few keys, freed in the right order by fixture_free. */
typedef struct fixture {
    lease_reg *r;
    lease_key *k[8];
} fixture;

static void fixture_new(fixture *f)
{
    memset(f, 0, sizeof *f);
    assert_int_equal(lease_reg_new(&f->r), SLUICE_OK);
}

static void fixture_free(fixture *f)
{
    for (size_t i = 0; i < sizeof f->k / sizeof f->k[0]; i++)
        lease_key_free(f->r, f->k[i]);
    lease_reg_free(f->r);
}

/* Acquires and asserts success of the call (not of the decision); returns the decision. */
static sluice_decision acq(fixture *f, size_t key, int64_t limit, int64_t units, int64_t ttl_ns,
                           int64_t now_ns)
{
    sluice_decision d;

    assert_int_equal(lease_acquire(f->r, &f->k[key], limit, units, ttl_ns, now_ns, 0, &d),
                     SLUICE_OK);
    return d;
}

static void test_acquire_to_limit_then_deny(void **state)
{
    fixture f;
    sluice_decision d;

    (void)state;
    fixture_new(&f);
    for (int i = 0; i < 3; i++) {
        d = acq(&f, 0, 3, 1, 10 * SEC, T0 + i * SEC);
        assert_true(d.allowed);
        assert_int_equal(d.lease_id, (uint64_t)i + 1);
        assert_int_equal(d.limit, 3);
        assert_int_equal(d.remaining, 2 - i);
        assert_int_equal(d.retry_after_ns, 0);
        assert_int_equal(d.reset_after_ns, 10 * SEC);
    }
    assert_int_equal(lease_key_held(f.k[0]), 3);

    /* The earliest lease (taken at T0) expires at T0 + 10 s. */
    d = acq(&f, 0, 3, 1, 10 * SEC, T0 + 4 * SEC);
    assert_false(d.allowed);
    assert_int_equal(d.lease_id, 0);
    assert_int_equal(d.remaining, 0);
    assert_int_equal(d.retry_after_ns, 6 * SEC);
    assert_int_equal(d.reset_after_ns, 8 * SEC); /* latest: taken at T0 + 2 s */
    assert_int_equal(lease_key_held(f.k[0]), 3);

    /* Exactly at retry_after the request is granted: expiry at t means gone at t. */
    d = acq(&f, 0, 3, 1, 10 * SEC, T0 + 10 * SEC);
    assert_true(d.allowed);
    assert_int_equal(d.lease_id, 4);
    assert_int_equal(lease_key_held(f.k[0]), 3);
    fixture_free(&f);
}

static void test_peek_creates_nothing(void **state)
{
    fixture f;
    sluice_decision d;
    size_t bytes;

    (void)state;
    fixture_new(&f);
    bytes = lease_bytes(f.r);
    assert_int_equal(lease_acquire(f.r, &f.k[0], 2, 1, SEC, T0, 1, &d), SLUICE_OK);
    assert_true(d.allowed);
    assert_int_equal(d.lease_id, 0);
    assert_int_equal(d.remaining, 2);
    assert_int_equal(d.reset_after_ns, 0);
    assert_null(f.k[0]);
    assert_int_equal(lease_bytes(f.r), bytes);

    acq(&f, 0, 2, 2, SEC, T0);
    assert_int_equal(lease_acquire(f.r, &f.k[0], 2, 1, SEC, T0, 1, &d), SLUICE_OK);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, SEC);
    assert_int_equal(lease_key_held(f.k[0]), 2);
    /* The next real lease still gets id 2: a peek issues no id. */
    assert_int_equal(acq(&f, 0, 2, 1, SEC, T0 + SEC).lease_id, 2);
    fixture_free(&f);
}

static void test_release_frees_units(void **state)
{
    fixture f;
    sluice_decision d;
    uint64_t a, b;

    (void)state;
    fixture_new(&f);
    a = acq(&f, 0, 2, 1, 10 * SEC, T0).lease_id;
    b = acq(&f, 0, 2, 1, 10 * SEC, T0).lease_id;
    assert_false(acq(&f, 0, 2, 1, 10 * SEC, T0).allowed);

    assert_int_equal(lease_release(f.r, a, T0 + SEC), SLUICE_OK);
    assert_int_equal(lease_key_held(f.k[0]), 1);
    d = acq(&f, 0, 2, 1, 10 * SEC, T0 + SEC);
    assert_true(d.allowed);
    assert_int_equal(d.remaining, 0);

    /* Releasing twice is a no-op success for as long as the lease would have lived. */
    assert_int_equal(lease_release(f.r, a, T0 + 2 * SEC), SLUICE_OK);
    assert_int_equal(lease_key_held(f.k[0]), 2);
    assert_int_equal(lease_release(f.r, a, T0 + 10 * SEC - 1), SLUICE_OK);
    assert_int_equal(lease_key_held(f.k[0]), 2);
    /* ... and a released lease cannot be renewed. */
    assert_int_equal(lease_renew(f.r, a, SEC, T0 + 3 * SEC, NULL), SLUICE_ESTALE);

    assert_int_equal(lease_release(f.r, b, T0 + 3 * SEC), SLUICE_OK);
    assert_int_equal(lease_key_held(f.k[0]), 1);
    /* Never-issued ids are stale. */
    assert_int_equal(lease_release(f.r, 0, T0 + 3 * SEC), SLUICE_ESTALE);
    assert_int_equal(lease_release(f.r, 999, T0 + 3 * SEC), SLUICE_ESTALE);
    assert_int_equal(lease_key_held(f.k[0]), 1);
    fixture_free(&f);
}

static void test_release_after_expiry_is_stale(void **state)
{
    fixture f;
    sluice_decision d;
    uint64_t lost, other;

    (void)state;
    fixture_new(&f);
    lost = acq(&f, 0, 1, 1, 5 * SEC, T0).lease_id;
    /* The holder disappears; after its TTL someone else gets the unit. */
    d = acq(&f, 0, 1, 1, 5 * SEC, T0 + 5 * SEC);
    assert_true(d.allowed);
    other = d.lease_id;
    /* The late release of the lost holder must not free the new holder's unit. */
    assert_int_equal(lease_release(f.r, lost, T0 + 6 * SEC), SLUICE_ESTALE);
    assert_int_equal(lease_key_held(f.k[0]), 1);
    assert_false(acq(&f, 0, 1, 1, 5 * SEC, T0 + 6 * SEC).allowed);
    assert_int_equal(lease_release(f.r, other, T0 + 6 * SEC), SLUICE_OK);

    /* Expired but not yet dropped (nothing looked at the key): stale too, nothing changes. */
    lost = acq(&f, 1, 1, 1, 5 * SEC, T0 + 6 * SEC).lease_id;
    assert_int_equal(lease_release(f.r, lost, T0 + 11 * SEC), SLUICE_ESTALE);
    assert_int_equal(lease_key_held(f.k[1]), 1);
    assert_true(lease_key_idle(f.k[1], T0 + 11 * SEC));

    /* A released lease past its expiry is forgotten: stale. */
    other = acq(&f, 2, 1, 1, 5 * SEC, T0).lease_id;
    assert_int_equal(lease_release(f.r, other, T0 + SEC), SLUICE_OK);
    assert_int_equal(lease_release(f.r, other, T0 + 5 * SEC), SLUICE_ESTALE);
    fixture_free(&f);
}

static void test_renew(void **state)
{
    fixture f;
    sluice_decision d;
    uint64_t id;
    int64_t exp = -1;

    (void)state;
    fixture_new(&f);
    id = acq(&f, 0, 1, 1, 5 * SEC, T0).lease_id;
    assert_int_equal(lease_renew(f.r, id, 5 * SEC, T0 + 4 * SEC, &exp), SLUICE_OK);
    assert_int_equal(exp, T0 + 9 * SEC);
    /* Past the original expiry the lease still holds its unit. */
    d = acq(&f, 0, 1, 1, 5 * SEC, T0 + 6 * SEC);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, 3 * SEC);
    assert_int_equal(lease_expire(f.r, T0 + 8 * SEC, NULL, NULL), 0);
    assert_int_equal(lease_renew(f.r, id, 5 * SEC, T0 + 8 * SEC, NULL), SLUICE_OK);

    /* Renew after expiry is stale and gives nothing back. */
    assert_int_equal(lease_renew(f.r, id, 5 * SEC, T0 + 13 * SEC, &exp), SLUICE_ESTALE);
    assert_int_equal(exp, 0);
    assert_true(acq(&f, 0, 1, 1, 5 * SEC, T0 + 13 * SEC).allowed);
    assert_int_equal(lease_renew(f.r, id, 5 * SEC, T0 + 13 * SEC, NULL), SLUICE_ESTALE);
    assert_int_equal(lease_renew(f.r, 12345, 5 * SEC, T0, NULL), SLUICE_ESTALE);

    /* Renewing reorders the key: the other lease now expires first. */
    fixture_free(&f);
    fixture_new(&f);
    id = acq(&f, 0, 2, 1, 5 * SEC, T0).lease_id;
    acq(&f, 0, 2, 1, 5 * SEC, T0 + SEC);
    assert_int_equal(lease_renew(f.r, id, 10 * SEC, T0 + 2 * SEC, NULL), SLUICE_OK);
    d = acq(&f, 0, 2, 1, 5 * SEC, T0 + 2 * SEC);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, 4 * SEC);
    assert_int_equal(d.reset_after_ns, 10 * SEC);
    fixture_free(&f);
}

/* Collects the ids passed to the expire callback. */
typedef struct expired_set {
    uint64_t ids[64];
    size_t n;
} expired_set;

static void collect(uint64_t id, void *arg)
{
    expired_set *s = arg;

    assert_true(s->n < 64);
    s->ids[s->n++] = id;
}

static void test_expire_callback(void **state)
{
    fixture f;
    expired_set s = {.n = 0};
    uint64_t a, b, c, e;

    (void)state;
    fixture_new(&f);
    a = acq(&f, 0, 10, 1, 3 * SEC, T0).lease_id; /* expires T0+3, live */
    b = acq(&f, 0, 10, 2, 2 * SEC, T0).lease_id; /* expires T0+2, released: a tombstone */
    c = acq(&f, 1, 10, 1, 9 * SEC, T0).lease_id; /* expires T0+9, not yet */
    e = acq(&f, 1, 10, 3, 1 * SEC, T0).lease_id; /* expires T0+1, live */
    assert_int_equal(lease_release(f.r, b, T0), SLUICE_OK);
    assert_int_equal(lease_key_held(f.k[0]), 1);

    assert_int_equal(lease_expire(f.r, T0, collect, &s), 0);
    assert_int_equal(s.n, 0);
    assert_int_equal(lease_expire(f.r, T0 + 3 * SEC, collect, &s), 2);
    assert_int_equal(s.n, 2);
    assert_int_equal(s.ids[0], e); /* in expiry order */
    assert_int_equal(s.ids[1], a);
    assert_int_equal(lease_key_held(f.k[0]), 0);
    assert_int_equal(lease_key_held(f.k[1]), 1);
    assert_true(lease_key_idle(f.k[0], T0 + 3 * SEC));
    assert_false(lease_key_idle(f.k[1], T0 + 3 * SEC));
    assert_int_equal(lease_release(f.r, a, T0 + 3 * SEC), SLUICE_ESTALE);
    assert_int_equal(lease_release(f.r, b, T0 + 3 * SEC), SLUICE_ESTALE);

    s.n = 0;
    assert_int_equal(lease_expire(f.r, T0 + 100 * SEC, collect, &s), 1);
    assert_int_equal(s.ids[0], c);
    assert_true(lease_key_idle(f.k[1], T0 + 100 * SEC));
    fixture_free(&f);
}

static void test_units_above_one_and_above_limit(void **state)
{
    fixture f;
    sluice_decision d;
    uint64_t big;

    (void)state;
    fixture_new(&f);
    big = acq(&f, 0, 5, 3, 10 * SEC, T0).lease_id;
    d = acq(&f, 0, 5, 2, 20 * SEC, T0 + SEC);
    assert_true(d.allowed);
    assert_int_equal(d.remaining, 0);
    assert_int_equal(d.reset_after_ns, 20 * SEC);
    d = acq(&f, 0, 5, 1, 20 * SEC, T0 + SEC);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, 9 * SEC);
    assert_int_equal(lease_release(f.r, big, T0 + 2 * SEC), SLUICE_OK);
    assert_int_equal(lease_key_held(f.k[0]), 2);
    d = acq(&f, 0, 5, 4, 20 * SEC, T0 + 2 * SEC);
    assert_false(d.allowed);
    assert_int_equal(d.remaining, 3);
    assert_true(acq(&f, 0, 5, 3, 20 * SEC, T0 + 2 * SEC).allowed);

    /* More units than the limit can ever hold: never, charging nothing, even on an empty key. */
    d = acq(&f, 0, 5, 6, 20 * SEC, T0 + 2 * SEC);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, SLUICE_NEVER);
    assert_int_equal(d.remaining, 0);
    d = acq(&f, 1, 5, INT64_MAX, 20 * SEC, T0);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, SLUICE_NEVER);
    assert_int_equal(d.remaining, 5);
    assert_int_equal(d.reset_after_ns, 0);
    assert_null(f.k[1]);
    fixture_free(&f);
}

/* Seed 002 (Conductor): concurrentExecLimit = 10 with 1000 task executions waiting and as many
 * workers polling. Workers finish after a random time and release; one in twenty is lost and its
 * lease expires. Never more than 10 run at once, and every task runs. */
static void test_seed002_concurrent_exec_limit(void **state)
{
    enum { TASKS = 1000, LIMIT = 10 };
    fixture f;
    test_rng rng;
    uint64_t running[LIMIT];
    int64_t done_at[LIMIT];
    int lost[LIMIT];
    size_t nrunning = 0;
    int waiting = TASKS, finished = 0;
    int64_t now = T0;

    (void)state;
    fixture_new(&f);
    rng_seed(&rng, 2);
    while (finished < TASKS) {
        /* Hand out tasks until the limit says no. */
        while (waiting > 0) {
            sluice_decision d = acq(&f, 0, LIMIT, 1, 30 * SEC, now);

            if (!d.allowed) {
                assert_int_equal(nrunning, LIMIT);
                assert_true(d.retry_after_ns > 0);
                break;
            }
            assert_true(nrunning < LIMIT);
            running[nrunning] = d.lease_id;
            /* A lost worker's unit comes back when its lease expires, 30 s after it started. */
            lost[nrunning] = rng_range(&rng, 0, 19) == 0;
            done_at[nrunning] = now + (lost[nrunning] ? 30 : rng_range(&rng, 1, 20)) * SEC;
            nrunning++;
            waiting--;
        }
        assert_true(lease_key_held(f.k[0]) <= LIMIT);
        assert_int_equal(lease_key_held(f.k[0]), (int64_t)nrunning);
        now += SEC;
        for (size_t i = 0; i < nrunning;) {
            if (now < done_at[i]) {
                i++;
                continue;
            }
            if (!lost[i])
                assert_int_equal(lease_release(f.r, running[i], now), SLUICE_OK);
            finished++;
            running[i] = running[--nrunning];
            done_at[i] = done_at[nrunning];
            lost[i] = lost[nrunning];
        }
        lease_expire(f.r, now, NULL, NULL);
    }
    assert_int_equal(waiting, 0);
    assert_int_equal(lease_key_held(f.k[0]), 0);
    fixture_free(&f);
}

/* Conductor's dynamic rateLimitKey: one limit of 3 per correlation id, independent of each other.
 */
static void test_per_key_independence(void **state)
{
    fixture f;
    uint64_t first = 0;

    (void)state;
    fixture_new(&f);
    for (size_t key = 0; key < 4; key++) {
        for (int i = 0; i < 3; i++) {
            sluice_decision d = acq(&f, key, 3, 1, 60 * SEC, T0);

            assert_true(d.allowed);
            if (key == 1 && i == 0)
                first = d.lease_id;
        }
        assert_false(acq(&f, key, 3, 1, 60 * SEC, T0).allowed);
    }
    assert_int_equal(lease_release(f.r, first, T0 + SEC), SLUICE_OK);
    assert_int_equal(lease_key_held(f.k[0]), 3);
    assert_int_equal(lease_key_held(f.k[1]), 2);
    assert_false(acq(&f, 0, 3, 1, 60 * SEC, T0 + SEC).allowed);
    assert_true(acq(&f, 1, 3, 1, 60 * SEC, T0 + SEC).allowed);

    /* Forgetting a key makes its leases stale and leaves the others alone. */
    lease_key_free(f.r, f.k[1]);
    f.k[1] = NULL;
    assert_int_equal(lease_release(f.r, first + 1, T0 + 2 * SEC), SLUICE_ESTALE);
    assert_int_equal(lease_renew(f.r, first + 2, SEC, T0 + 2 * SEC, NULL), SLUICE_ESTALE);
    assert_true(acq(&f, 1, 3, 3, 60 * SEC, T0 + 2 * SEC).allowed);
    assert_int_equal(lease_key_held(f.k[2]), 3);
    assert_int_equal(lease_expire(f.r, T0 + 61 * SEC, NULL, NULL), 9);
    fixture_free(&f);
}

/* ---- Randomized test against a reference model ----------------------------------------------- */

#define MODEL_KEYS 4
#define MODEL_MAX  4096

typedef enum model_state { M_LIVE, M_RELEASED, M_GONE } model_state;

/* What the model knows of one issued lease (index id - 1). */
typedef struct model_lease {
    size_t key;
    int64_t units;
    int64_t expires_ns;
    model_state st;
    int forgotten; /* live lease of a key that was freed */
} model_lease;

typedef struct model {
    model_lease l[MODEL_MAX];
    size_t n; /* leases issued */
} model;

static int64_t model_held(const model *m, size_t key, int64_t now)
{
    int64_t held = 0;

    for (size_t i = 0; i < m->n; i++) {
        const model_lease *l = &m->l[i];

        if (l->key == key && l->st == M_LIVE && l->expires_ns > now)
            held += l->units;
    }
    return held;
}

/* Latest expiry of the key's live leases, or 0 when none. */
static int64_t model_last(const model *m, size_t key, int64_t now)
{
    int64_t edge = 0;

    for (size_t i = 0; i < m->n; i++) {
        const model_lease *l = &m->l[i];

        if (l->key != key || l->st != M_LIVE || l->expires_ns <= now)
            continue;
        if (edge == 0 || l->expires_ns > edge)
            edge = l->expires_ns;
    }
    return edge;
}

/* The earliest expiry of the key's live leases after which `units` fit under `limit`, by brute
 * force over every candidate expiry. */
static int64_t model_freeing(const model *m, size_t key, int64_t now, int64_t limit, int64_t units,
                             int64_t held)
{
    int64_t best = 0;

    for (size_t i = 0; i < m->n; i++) {
        const model_lease *c = &m->l[i];
        int64_t freed = 0;

        if (c->key != key || c->st != M_LIVE || c->expires_ns <= now)
            continue;
        for (size_t j = 0; j < m->n; j++) {
            const model_lease *l = &m->l[j];

            if (l->key == key && l->st == M_LIVE && l->expires_ns > now &&
                l->expires_ns <= c->expires_ns)
                freed += l->units;
        }
        if (held - freed + units <= limit && (best == 0 || c->expires_ns < best))
            best = c->expires_ns;
    }
    return best;
}

/* Live leases of the key that expired are dropped silently by the real acquire. */
static void model_drop_expired(model *m, size_t key, int64_t now)
{
    for (size_t i = 0; i < m->n; i++) {
        if (m->l[i].key == key && m->l[i].st == M_LIVE && m->l[i].expires_ns <= now)
            m->l[i].st = M_GONE;
    }
}

static void expire_mark(uint64_t id, void *arg)
{
    uint8_t *seen = arg;

    assert_true(id >= 1 && id <= MODEL_MAX);
    assert_int_equal(seen[id - 1], 0);
    seen[id - 1] = 1;
}

static void run_model(uint64_t seed)
{
    static model m;
    static uint8_t seen[MODEL_MAX];
    const int64_t limit = 5;
    fixture f;
    test_rng rng;
    int64_t now = T0;

    fixture_new(&f);
    memset(&m, 0, sizeof m);
    rng_seed(&rng, seed);
    for (int step = 0; step < 3000 && m.n < MODEL_MAX; step++) {
        int64_t op = rng_range(&rng, 0, 99);
        size_t key = (size_t)rng_range(&rng, 0, MODEL_KEYS - 1);

        if (op < 40) {
            int64_t units = rng_range(&rng, 1, 6);
            int64_t ttl = rng_range(&rng, 1, 60);
            int peek = rng_range(&rng, 0, 9) == 0;
            int64_t held = model_held(&m, key, now);
            int64_t last = model_last(&m, key, now);
            int allow = held + units <= limit;
            sluice_decision d;

            assert_int_equal(lease_acquire(f.r, &f.k[key], limit, units, ttl, now, peek, &d),
                             SLUICE_OK);
            if (!peek) /* a peek forgets nothing (limit.h: a read changes nothing) */
                model_drop_expired(&m, key, now);
            assert_int_equal(d.allowed, allow);
            assert_int_equal(d.limit, limit);
            if (allow && !peek) {
                model_lease *l = &m.l[m.n++];

                assert_int_equal(d.lease_id, m.n);
                l->key = key;
                l->units = units;
                l->expires_ns = now + ttl;
                l->st = M_LIVE;
                held += units;
                if (now + ttl > last)
                    last = now + ttl;
            } else {
                assert_int_equal(d.lease_id, 0);
            }
            assert_int_equal(d.remaining, limit - held);
            assert_int_equal(d.retry_after_ns,
                             allow ? 0
                             : units > limit
                                 ? SLUICE_NEVER
                                 : model_freeing(&m, key, now, limit, units, held) - now);
            assert_int_equal(d.reset_after_ns, last ? last - now : 0);
            /* A peek forgets nothing: the key may still count leases expired by now. */
            if (peek)
                assert_true(lease_key_held(f.k[key]) >= held);
            else
                assert_int_equal(lease_key_held(f.k[key]), held);
        } else if (op < 60 && m.n > 0) {
            uint64_t id = (uint64_t)rng_range(&rng, 0, (int64_t)m.n + 1);
            model_lease *l = id >= 1 && id <= m.n ? &m.l[id - 1] : NULL;
            int ok = l && !l->forgotten && l->st != M_GONE && l->expires_ns > now;

            assert_int_equal(lease_release(f.r, id, now), ok ? SLUICE_OK : SLUICE_ESTALE);
            if (ok)
                l->st = M_RELEASED;
        } else if (op < 75 && m.n > 0) {
            uint64_t id = (uint64_t)rng_range(&rng, 1, (int64_t)m.n);
            model_lease *l = &m.l[id - 1];
            int64_t ttl = rng_range(&rng, 1, 60);
            int ok = !l->forgotten && l->st == M_LIVE && l->expires_ns > now;
            int64_t exp = -1;

            assert_int_equal(lease_renew(f.r, id, ttl, now, &exp), ok ? SLUICE_OK : SLUICE_ESTALE);
            assert_int_equal(exp, ok ? now + ttl : 0);
            if (ok)
                l->expires_ns = now + ttl;
        } else if (op < 90) {
            now += rng_range(&rng, 0, 12);
        } else if (op < 97) {
            size_t want = 0;
            size_t got;

            memset(seen, 0, sizeof seen);
            got = lease_expire(f.r, now, expire_mark, seen);
            for (size_t i = 0; i < m.n; i++) {
                model_lease *l = &m.l[i];
                int exp = !l->forgotten && l->st == M_LIVE && l->expires_ns <= now;

                assert_int_equal(seen[i], exp);
                if (exp) {
                    l->st = M_GONE;
                    want++;
                }
            }
            assert_int_equal(got, want);
        } else {
            /* The key table forgets the key (sluice_limit_reset or an idle sweep). */
            assert_int_equal(lease_key_idle(f.k[key], now), model_held(&m, key, now) == 0);
            lease_key_free(f.r, f.k[key]);
            f.k[key] = NULL;
            for (size_t i = 0; i < m.n; i++) {
                if (m.l[i].key == key && m.l[i].st == M_LIVE) {
                    m.l[i].st = M_GONE;
                    m.l[i].forgotten = 1;
                }
            }
        }
        /* The invariant: no key ever holds more than the limit among its live leases. */
        for (size_t k = 0; k < MODEL_KEYS; k++)
            assert_true(model_held(&m, k, now) <= limit);
    }
    /* After a full expiry every key's count is exact. */
    lease_expire(f.r, now, NULL, NULL);
    for (size_t k = 0; k < MODEL_KEYS; k++)
        assert_int_equal(lease_key_held(f.k[k]), model_held(&m, k, now));
    fixture_free(&f);
}

static void test_model(void **state)
{
    (void)state;
    for (uint64_t seed = 1; seed <= 40; seed++)
        run_model(seed);
}

/* ---- Memory ---------------------------------------------------------------------------------- */

/* Many leases: the map and heap grow past several doublings and shrink back after expiry. */
static void test_many_leases_and_bytes(void **state)
{
    enum { N = 5000 };
    fixture f;
    size_t empty;
    sluice_decision d;

    (void)state;
    fixture_new(&f);
    empty = lease_bytes(f.r);
    for (int i = 0; i < N; i++) {
        d = acq(&f, (size_t)i % 8, N, 1, (int64_t)(i % 97 + 1) * SEC, T0);
        assert_true(d.allowed);
    }
    assert_true(lease_bytes(f.r) > empty + N * 2 * sizeof(void *));
    for (uint64_t id = 1; id <= N; id += 2)
        assert_int_equal(lease_release(f.r, id, T0), SLUICE_OK);
    for (uint64_t id = 2; id <= N; id += 4)
        assert_int_equal(lease_renew(f.r, id, 200 * SEC, T0, NULL), SLUICE_OK);
    assert_int_equal(lease_expire(f.r, T0 + 100 * SEC, NULL, NULL), N / 4);
    assert_int_equal(lease_expire(f.r, T0 + 200 * SEC, NULL, NULL), N / 4);
    for (size_t k = 0; k < 8; k++)
        assert_int_equal(lease_key_held(f.k[k]), 0);
    /* Only the keys themselves remain on top of small arrays. */
    assert_true(lease_bytes(f.r) < empty + 4096);
    fixture_free(&f);
}

/* Freeing the registry first leaves keys holding nothing; they are then freed with r == NULL. */
static void test_free_registry_before_keys(void **state)
{
    lease_reg *r;
    lease_key *k = NULL;
    sluice_decision d;

    (void)state;
    assert_int_equal(lease_reg_new(&r), SLUICE_OK);
    assert_int_equal(lease_acquire(r, &k, 3, 2, SEC, T0, 0, &d), SLUICE_OK);
    lease_reg_free(r);
    assert_int_equal(lease_key_held(k), 0);
    lease_key_free(NULL, k);
    lease_reg_free(NULL);
    lease_key_free(NULL, NULL);
    assert_int_equal(lease_bytes(NULL), 0);
}

/* 40 acquires over 3 keys (map and heap growth, key creation). Every ENOMEM must leave the state
 * as it was: same held units, same bytes, and the next lease still gets the next id. */
static int oom_body(void *arg)
{
    lease_reg *r;
    lease_key *k[3] = {NULL, NULL, NULL};
    int rc;

    (void)arg;
    rc = lease_reg_new(&r);
    if (rc != SLUICE_OK)
        return rc;
    for (int i = 0; i < 40; i++) {
        size_t key = (size_t)i % 3;
        int64_t held = lease_key_held(k[key]);
        size_t bytes = lease_bytes(r);
        sluice_decision d;

        rc = lease_acquire(r, &k[key], 100, 1, SEC * (i % 5 + 1), T0, 0, &d);
        if (rc != SLUICE_OK) {
            assert_int_equal(lease_key_held(k[key]), held);
            assert_int_equal(lease_bytes(r), bytes);
            break;
        }
        assert_true(d.allowed);
        assert_int_equal(d.lease_id, (uint64_t)i + 1);
    }
    if (rc == SLUICE_OK) {
        assert_int_equal(lease_expire(r, T0 + 10 * SEC, NULL, NULL), 40);
    }
    for (size_t i = 0; i < 3; i++)
        lease_key_free(r, k[i]);
    lease_reg_free(r);
    return rc;
}

static void test_oom_sweep_acquire(void **state)
{
    (void)state;
    assert_true(oom_sweep(oom_body, NULL, 1000) > 1);
}

/* A request for several units waits for as many expiries as it needs, not only the first. */
static void test_retry_after_counts_units(void **unused)
{
    lease_reg *r;
    lease_key *k = NULL;
    sluice_decision d;

    (void)unused;
    assert_int_equal(lease_reg_new(&r), SLUICE_OK);
    for (int i = 1; i <= 3; i++)
        assert_int_equal(lease_acquire(r, &k, 3, 1, (int64_t)i * 10 * SEC, T0, 0, &d), SLUICE_OK);
    assert_int_equal(lease_acquire(r, &k, 3, 1, SEC, T0, 0, &d), SLUICE_OK);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, 10 * SEC);
    assert_int_equal(lease_acquire(r, &k, 3, 2, SEC, T0, 0, &d), SLUICE_OK);
    assert_false(d.allowed);
    assert_int_equal(d.retry_after_ns, 20 * SEC);
    assert_int_equal(lease_acquire(r, &k, 3, 3, SEC, T0, 0, &d), SLUICE_OK);
    assert_int_equal(d.retry_after_ns, 30 * SEC);
    /* Coming back then is granted. */
    assert_int_equal(lease_acquire(r, &k, 3, 2, SEC, T0 + 20 * SEC, 0, &d), SLUICE_OK);
    assert_true(d.allowed);
    lease_key_free(r, k);
    lease_reg_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_retry_after_counts_units),
        cmocka_unit_test(test_acquire_to_limit_then_deny),
        cmocka_unit_test(test_peek_creates_nothing),
        cmocka_unit_test(test_release_frees_units),
        cmocka_unit_test(test_release_after_expiry_is_stale),
        cmocka_unit_test(test_renew),
        cmocka_unit_test(test_expire_callback),
        cmocka_unit_test(test_units_above_one_and_above_limit),
        cmocka_unit_test(test_seed002_concurrent_exec_limit),
        cmocka_unit_test(test_per_key_independence),
        cmocka_unit_test(test_model),
        cmocka_unit_test(test_many_leases_and_bytes),
        cmocka_unit_test(test_free_registry_before_keys),
        cmocka_unit_test(test_oom_sweep_acquire),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
