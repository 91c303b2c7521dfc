/* SPDX-License-Identifier: MIT */
/*
 * Tests of event aggregation (src/engine/events.c).
 *
 * A recording sink copies every delivered event (the strings it gets are valid during the
 * callback only). Hand-picked cases cover the contract: an event storm on one key becomes one
 * immediate event and one summary, groups are independent and forgotten after their interval,
 * THROTTLED sums, BUDGET percents kept apart, NULL strings, interval boundaries and
 * events_next_flush(). A randomized property test replays thousands of events against a naive
 * reference model and compares every delivered event in order; the out-of-memory sweep checks
 * that no occurrence is ever lost. Everything runs on a simulated clock: the tests set now_ns.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine/events.h"
#include "sluice/error.h"
#include "sluice/limit.h"
#include "testutil.h"

#define SEC_NS INT64_C(1000000000)

/* One delivered event, with its strings copied (NULL stays NULL). */
typedef struct rec {
    sluice_event ev; /* as delivered; its strings point to the copies below */
    char *limit;     /* malloc'd copies, NULL for NULL */
    char *key;
    char *type;
} rec;

/* What the recording sink has seen. */
typedef struct recorder {
    rec *recs;       /* delivered events in order */
    size_t n;        /* events in recs */
    size_t cap;      /* slots of recs */
    uint64_t occurs; /* the sum of every delivered count: the occurrences accounted for */
} recorder;

static char *copy_str(const char *s)
{
    char *c;
    size_t len;

    if (!s)
        return NULL;
    len = strlen(s);
    c = malloc(len + 1);
    assert_non_null(c);
    memcpy(c, s, len + 1);
    return c;
}

static void record(const sluice_event *e, void *arg)
{
    recorder *r = arg;
    rec *x;

    if (r->n == r->cap) {
        r->cap = r->cap ? r->cap * 2 : 16;
        r->recs = realloc(r->recs, r->cap * sizeof *r->recs);
        assert_non_null(r->recs);
    }
    x = &r->recs[r->n++];
    x->ev = *e;
    x->limit = copy_str(e->limit);
    x->key = copy_str(e->key);
    x->type = copy_str(e->type);
    x->ev.limit = x->limit;
    x->ev.key = x->key;
    x->ev.type = x->type;
    r->occurs += e->count;
}

static void recorder_reset(recorder *r)
{
    for (size_t i = 0; i < r->n; i++) {
        free(r->recs[i].limit);
        free(r->recs[i].key);
        free(r->recs[i].type);
    }
    free(r->recs);
    memset(r, 0, sizeof *r);
}

static events *new_events(int64_t interval_ns, recorder *r)
{
    events *ev = NULL;

    assert_int_equal(events_new(interval_ns, &ev), SLUICE_OK);
    assert_non_null(ev);
    events_set_sink(ev, record, r);
    return ev;
}

static sluice_event make(sluice_event_kind kind, const char *limit, const char *key, int64_t at_ns)
{
    sluice_event e;

    memset(&e, 0, sizeof e);
    e.kind = kind;
    e.limit = limit;
    e.key = key;
    e.type = "mail";
    e.at_ns = at_ns;
    e.count = 1;
    return e;
}

static int str_eq(const char *a, const char *b)
{
    if (!a || !b)
        return a == b;
    return strcmp(a, b) == 0;
}

/* Checks the identity and the shape of a recorded event. */
static void check_rec(const rec *x, sluice_event_kind kind, const char *limit, const char *key,
                      int summary, uint64_t count)
{
    assert_int_equal(x->ev.kind, kind);
    assert_true(str_eq(x->ev.limit, limit));
    assert_true(str_eq(x->ev.key, key));
    assert_int_equal(x->ev.summary, summary);
    assert_int_equal(x->ev.count, count);
}

/* ---- Hand-picked cases -------------------------------------------------------------------- */

static void test_new_and_arguments(void **state)
{
    events *ev = (events *)&ev;
    sluice_event e = make(SLUICE_EVENT_DEFERRED, "l", "k", 0);

    (void)state;
    assert_int_equal(events_new(0, &ev), SLUICE_EINVAL);
    assert_null(ev);
    ev = (events *)&ev;
    assert_int_equal(events_new(-5, &ev), SLUICE_EINVAL);
    assert_null(ev);
    assert_int_equal(events_new(1, NULL), SLUICE_EINVAL);
    events_free(NULL);
    assert_int_equal(events_next_flush(NULL), SLUICE_NEVER);
    assert_int_equal(events_flush(NULL, 0), SLUICE_EINVAL);
    assert_int_equal(events_emit(NULL, &e, 0), SLUICE_EINVAL);
    events_set_sink(NULL, record, NULL);

    assert_int_equal(events_new(1, &ev), SLUICE_OK);
    assert_int_equal(events_emit(ev, NULL, 0), SLUICE_EINVAL);
    assert_int_equal(events_next_flush(ev), SLUICE_NEVER);
    assert_int_equal(events_flush(ev, 100), SLUICE_OK);
    events_free(ev);
}

/* 1000 deferrals of one key within one interval: one event at once, one summary of 999 at the
 * interval's end, nothing in between. */
static void test_storm_one_key(void **state)
{
    recorder r = {0};
    const int64_t t0 = 1000 * SEC_NS;
    events *ev = new_events(SEC_NS, &r);

    (void)state;
    for (int i = 0; i < 1000; i++) {
        int64_t now = t0 + i * 1000000; /* one per millisecond: the last at t0 + 999 ms */
        sluice_event e = make(SLUICE_EVENT_DEFERRED, "stripe", "tenant-1", now);

        /* Slots that go up and down; the latest is the one given at i = 500. */
        e.next_slot_ns = i == 500 ? t0 + 9 * SEC_NS : t0 + 5 * SEC_NS - i % 7;
        assert_int_equal(events_emit(ev, &e, now), SLUICE_OK);
        assert_int_equal(r.n, 1);
        assert_int_equal(events_next_flush(ev), t0 + SEC_NS);
    }
    check_rec(&r.recs[0], SLUICE_EVENT_DEFERRED, "stripe", "tenant-1", 0, 1);
    assert_int_equal(r.recs[0].ev.at_ns, t0);
    assert_string_equal(r.recs[0].ev.type, "mail");

    assert_int_equal(events_flush(ev, t0 + SEC_NS - 1), SLUICE_OK);
    assert_int_equal(r.n, 1);
    assert_int_equal(events_flush(ev, t0 + SEC_NS), SLUICE_OK);
    assert_int_equal(r.n, 2);
    check_rec(&r.recs[1], SLUICE_EVENT_DEFERRED, "stripe", "tenant-1", 1, 999);
    assert_string_equal(r.recs[1].ev.type, "mail");
    assert_int_equal(r.recs[1].ev.at_ns, t0 + 1000000); /* the first summarised event */
    assert_int_equal(r.recs[1].ev.next_slot_ns, t0 + 9 * SEC_NS);
    assert_int_equal(events_next_flush(ev), SLUICE_NEVER);

    /* Nothing more to say about that interval. */
    assert_int_equal(events_flush(ev, t0 + 10 * SEC_NS), SLUICE_OK);
    assert_int_equal(r.n, 2);
    events_free(ev);
    recorder_reset(&r);
}

static void test_two_keys_independent(void **state)
{
    recorder r = {0};
    events *ev = new_events(100, &r);
    sluice_event a = make(SLUICE_EVENT_DEFERRED, "l", "a", 0);
    sluice_event b = make(SLUICE_EVENT_DEFERRED, "l", "b", 0);
    sluice_event t = make(SLUICE_EVENT_THROTTLED, "l", "a", 0); /* same key, other kind */

    (void)state;
    assert_int_equal(events_emit(ev, &a, 0), SLUICE_OK);
    assert_int_equal(events_emit(ev, &a, 10), SLUICE_OK);
    assert_int_equal(events_emit(ev, &b, 30), SLUICE_OK);
    assert_int_equal(events_emit(ev, &t, 40), SLUICE_OK);
    assert_int_equal(r.n, 3);
    check_rec(&r.recs[1], SLUICE_EVENT_DEFERRED, "l", "b", 0, 1);
    check_rec(&r.recs[2], SLUICE_EVENT_THROTTLED, "l", "a", 0, 1);
    for (int i = 0; i < 5; i++)
        assert_int_equal(events_emit(ev, &b, 50 + i), SLUICE_OK);
    assert_int_equal(events_next_flush(ev), 100);

    /* a's interval ends at 100 (summary 1), b's at 130 (summary 5), t's at 140 (none). */
    assert_int_equal(events_flush(ev, 100), SLUICE_OK);
    assert_int_equal(r.n, 4);
    check_rec(&r.recs[3], SLUICE_EVENT_DEFERRED, "l", "a", 1, 1);
    assert_int_equal(events_next_flush(ev), 130);

    /* An emit flushes what is due before it: b's summary, then a new immediate a. */
    assert_int_equal(events_emit(ev, &a, 135), SLUICE_OK);
    assert_int_equal(r.n, 6);
    check_rec(&r.recs[4], SLUICE_EVENT_DEFERRED, "l", "b", 1, 5);
    check_rec(&r.recs[5], SLUICE_EVENT_DEFERRED, "l", "a", 0, 1);
    assert_int_equal(events_next_flush(ev), 140);
    assert_int_equal(events_flush(ev, 140), SLUICE_OK);
    assert_int_equal(r.n, 6);
    assert_int_equal(events_next_flush(ev), 235);
    events_free(ev);
    recorder_reset(&r);
}

static void test_throttled_sums(void **state)
{
    recorder r = {0};
    events *ev = new_events(SEC_NS, &r);
    sluice_event e = make(SLUICE_EVENT_THROTTLED, "stripe", "k", 0);

    (void)state;
    e.wanted = 10;
    e.granted = 3;
    assert_int_equal(events_emit(ev, &e, 0), SLUICE_OK);
    assert_int_equal(r.recs[0].ev.wanted, 10);
    assert_int_equal(r.recs[0].ev.granted, 3);
    e.wanted = 7;
    e.granted = 0;
    assert_int_equal(events_emit(ev, &e, 1), SLUICE_OK);
    e.wanted = 5;
    e.granted = 2;
    e.count = 3; /* an event that already stands for several occurrences */
    assert_int_equal(events_emit(ev, &e, 2), SLUICE_OK);
    e.wanted = INT64_MAX; /* saturates rather than overflows */
    e.granted = 1;
    e.count = 0; /* counts as one */
    assert_int_equal(events_emit(ev, &e, 3), SLUICE_OK);
    assert_int_equal(events_flush(ev, SEC_NS), SLUICE_OK);
    assert_int_equal(r.n, 2);
    check_rec(&r.recs[1], SLUICE_EVENT_THROTTLED, "stripe", "k", 1, 5);
    assert_int_equal(r.recs[1].ev.wanted, INT64_MAX);
    assert_int_equal(r.recs[1].ev.granted, 3);

    /* The immediate event keeps an explicit count and normalizes 0 to 1. */
    e.count = 4;
    assert_int_equal(events_emit(ev, &e, 2 * SEC_NS), SLUICE_OK);
    assert_int_equal(r.recs[2].ev.count, 4);
    e.key = "other";
    e.count = 0;
    e.summary = 1; /* ignored */
    assert_int_equal(events_emit(ev, &e, 2 * SEC_NS), SLUICE_OK);
    assert_int_equal(r.recs[3].ev.count, 1);
    assert_int_equal(r.recs[3].ev.summary, 0);
    events_free(ev);
    recorder_reset(&r);
}

static void test_single_event_no_summary(void **state)
{
    recorder r = {0};
    events *ev = new_events(50, &r);
    sluice_event e = make(SLUICE_EVENT_REJECTED, "l", "k", 7);

    (void)state;
    assert_int_equal(events_emit(ev, &e, 7), SLUICE_OK);
    assert_int_equal(r.n, 1);
    assert_int_equal(events_next_flush(ev), 57);
    assert_int_equal(events_flush(ev, 57), SLUICE_OK);
    assert_int_equal(r.n, 1);
    assert_int_equal(events_next_flush(ev), SLUICE_NEVER);
    events_free(ev);
    recorder_reset(&r);
}

/* After its interval a group is forgotten: its memory is returned, and the next event of the
 * same identity opens a new interval and is delivered at once. */
static void test_groups_forgotten(void **state)
{
    recorder r = {0};
    events *ev;
    long idle_blocks;

    (void)state;
    oom_install(0);
    ev = new_events(1000, &r);
    idle_blocks = oom_live_blocks();
    for (int k = 0; k < 200; k++) {
        char key[16];
        sluice_event e = make(SLUICE_EVENT_DEFERRED, "l", key, 0);

        snprintf(key, sizeof key, "key-%d", k);
        assert_int_equal(events_emit(ev, &e, k), SLUICE_OK);
        assert_int_equal(events_emit(ev, &e, k), SLUICE_OK);
    }
    assert_int_equal(r.n, 200);
    assert_true(oom_live_blocks() > idle_blocks + 200);
    assert_int_equal(events_next_flush(ev), 1000);
    assert_int_equal(events_flush(ev, 1199), SLUICE_OK);
    assert_int_equal(r.n, 400);
    assert_int_equal(events_next_flush(ev), SLUICE_NEVER);
    assert_int_equal(oom_live_blocks(), idle_blocks);

    {
        sluice_event e = make(SLUICE_EVENT_DEFERRED, "l", "key-7", 1200);

        assert_int_equal(events_emit(ev, &e, 1200), SLUICE_OK);
        assert_int_equal(r.n, 401);
        check_rec(&r.recs[400], SLUICE_EVENT_DEFERRED, "l", "key-7", 0, 1);
        assert_int_equal(events_next_flush(ev), 2200);
    }
    events_free(ev);
    assert_int_equal(oom_live_blocks(), 0);
    oom_uninstall();
    recorder_reset(&r);
}

/* An event at exactly the interval's end belongs to the next interval. */
static void test_interval_boundary(void **state)
{
    recorder r = {0};
    events *ev = new_events(10, &r);
    sluice_event e = make(SLUICE_EVENT_DEFERRED, "l", "k", 0);

    (void)state;
    assert_int_equal(events_emit(ev, &e, 0), SLUICE_OK);
    assert_int_equal(events_emit(ev, &e, 9), SLUICE_OK);
    assert_int_equal(r.n, 1);
    assert_int_equal(events_emit(ev, &e, 10), SLUICE_OK);
    assert_int_equal(r.n, 3);
    check_rec(&r.recs[1], SLUICE_EVENT_DEFERRED, "l", "k", 1, 1);
    check_rec(&r.recs[2], SLUICE_EVENT_DEFERRED, "l", "k", 0, 1);
    assert_int_equal(events_next_flush(ev), 20);

    /* A summary pending when the sink changes goes to the new sink; a NULL sink drops events but
     * still aggregates them. */
    assert_int_equal(events_emit(ev, &e, 11), SLUICE_OK);
    events_set_sink(ev, NULL, NULL);
    assert_int_equal(events_flush(ev, 20), SLUICE_OK);
    assert_int_equal(events_emit(ev, &e, 20), SLUICE_OK);
    assert_int_equal(events_emit(ev, &e, 21), SLUICE_OK);
    assert_int_equal(events_emit(ev, &e, 22), SLUICE_OK);
    events_set_sink(ev, record, &r);
    assert_int_equal(r.n, 3);
    assert_int_equal(events_flush(ev, SLUICE_NEVER), SLUICE_OK);
    assert_int_equal(r.n, 4);
    check_rec(&r.recs[3], SLUICE_EVENT_DEFERRED, "l", "k", 1, 2);

    /* A time so late that the interval's end saturates is still flushed by SLUICE_NEVER. */
    assert_int_equal(events_emit(ev, &e, INT64_MAX - 5), SLUICE_OK);
    assert_int_equal(events_emit(ev, &e, INT64_MAX - 4), SLUICE_OK);
    assert_int_equal(r.n, 5);
    assert_int_equal(events_flush(ev, SLUICE_NEVER), SLUICE_OK);
    assert_int_equal(r.n, 6);
    assert_int_equal(events_next_flush(ev), SLUICE_NEVER);
    events_free(ev);
    recorder_reset(&r);
}

static void test_budget_percents_apart(void **state)
{
    recorder r = {0};
    events *ev = new_events(SEC_NS, &r);
    sluice_event e = make(SLUICE_EVENT_BUDGET, "monthly", "acme", 0);

    (void)state;
    e.wanted = 80;
    assert_int_equal(events_emit(ev, &e, 0), SLUICE_OK);
    assert_int_equal(events_emit(ev, &e, 1), SLUICE_OK);
    assert_int_equal(events_emit(ev, &e, 2), SLUICE_OK);
    e.wanted = 100;
    assert_int_equal(events_emit(ev, &e, 3), SLUICE_OK);
    assert_int_equal(r.n, 2);
    check_rec(&r.recs[0], SLUICE_EVENT_BUDGET, "monthly", "acme", 0, 1);
    assert_int_equal(r.recs[0].ev.wanted, 80);
    check_rec(&r.recs[1], SLUICE_EVENT_BUDGET, "monthly", "acme", 0, 1);
    assert_int_equal(r.recs[1].ev.wanted, 100);
    assert_int_equal(events_emit(ev, &e, 4), SLUICE_OK);
    assert_int_equal(events_flush(ev, SLUICE_NEVER), SLUICE_OK);
    assert_int_equal(r.n, 4);
    /* The percent is identity, not a sum. */
    check_rec(&r.recs[2], SLUICE_EVENT_BUDGET, "monthly", "acme", 1, 2);
    assert_int_equal(r.recs[2].ev.wanted, 80);
    check_rec(&r.recs[3], SLUICE_EVENT_BUDGET, "monthly", "acme", 1, 1);
    assert_int_equal(r.recs[3].ev.wanted, 100);

    /* For other kinds, wanted is a measurement and does not split groups. */
    e.kind = SLUICE_EVENT_THROTTLED;
    e.wanted = 80;
    assert_int_equal(events_emit(ev, &e, 10 * SEC_NS), SLUICE_OK);
    e.wanted = 100;
    assert_int_equal(events_emit(ev, &e, 10 * SEC_NS), SLUICE_OK);
    assert_int_equal(r.n, 5);
    events_free(ev);
    recorder_reset(&r);
}

/* NULL strings are allowed, passed through, and distinct from "" and from each other's
 * positions; no two identities are confused by where one string ends and the next begins. */
static void test_null_strings(void **state)
{
    static const struct {
        const char *limit, *key, *type;
    } ids[] = {
        {NULL, NULL, NULL}, {"", NULL, NULL},  {NULL, "", NULL},  {NULL, NULL, ""},
        {"", "", ""},       {"a", NULL, NULL}, {NULL, "a", NULL}, {NULL, NULL, "a"},
        {"ab", "c", NULL},  {"a", "bc", NULL}, {"a", "b", "c"},   {"a", "b", NULL},
    };
    const size_t n = sizeof ids / sizeof ids[0];
    recorder r = {0};
    events *ev = new_events(100, &r);

    (void)state;
    for (int round = 0; round < 3; round++) {
        for (size_t i = 0; i < n; i++) {
            sluice_event e = make(SLUICE_EVENT_UNKNOWN_LIMIT, ids[i].limit, ids[i].key, 0);

            e.type = ids[i].type;
            /* Distinct opening times, so the summaries come in order of i. */
            assert_int_equal(events_emit(ev, &e, (int64_t)((size_t)round * n + i)), SLUICE_OK);
        }
    }
    assert_int_equal(r.n, n);
    assert_int_equal(events_flush(ev, 200), SLUICE_OK);
    assert_int_equal(r.n, 2 * n);
    for (size_t i = 0; i < n; i++) {
        const rec *first = &r.recs[i], *sum = &r.recs[n + i];

        check_rec(first, SLUICE_EVENT_UNKNOWN_LIMIT, ids[i].limit, ids[i].key, 0, 1);
        assert_true(str_eq(first->ev.type, ids[i].type));
        check_rec(sum, SLUICE_EVENT_UNKNOWN_LIMIT, ids[i].limit, ids[i].key, 1, 2);
        assert_true(str_eq(sum->ev.type, ids[i].type));
    }
    events_free(ev);
    recorder_reset(&r);
}

/* Identities longer than the stack buffer take the allocating path. */
static void test_long_strings(void **state)
{
    recorder r = {0};
    events *ev = new_events(100, &r);
    char big[2000];
    sluice_event e;

    (void)state;
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    e = make(SLUICE_EVENT_KEY_CAP, big, big, 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(events_emit(ev, &e, i), SLUICE_OK);
    big[5] = 'y'; /* the module kept its own copy */
    assert_int_equal(events_emit(ev, &e, 3), SLUICE_OK);
    assert_int_equal(r.n, 2);
    assert_int_equal(events_flush(ev, 100), SLUICE_OK);
    assert_int_equal(r.n, 3);
    assert_int_equal(r.recs[2].ev.count, 2);
    assert_int_equal(strlen(r.recs[2].ev.limit), sizeof big - 1);
    assert_int_equal(strspn(r.recs[2].ev.key, "x"), sizeof big - 1);
    events_free(ev);
    recorder_reset(&r);
}

/* events_next_flush() is the earliest open interval's end, also when groups open out of order
 * (a clock that stepped back) and when many are open at once. */
static void test_next_flush(void **state)
{
    recorder r = {0};
    events *ev = new_events(1000, &r);
    test_rng rng;
    int64_t starts[300];

    (void)state;
    rng_seed(&rng, 7);
    for (int i = 0; i < 300; i++) {
        char key[16];
        sluice_event e = make(SLUICE_EVENT_DEFERRED, NULL, key, 0);
        int64_t min = INT64_MAX;

        snprintf(key, sizeof key, "%d", i);
        starts[i] = rng_range(&rng, 0, 999);
        /* Never flush: each emit's now is below every group's end (>= 1000). */
        assert_int_equal(events_emit(ev, &e, starts[i]), SLUICE_OK);
        for (int j = 0; j <= i; j++)
            min = starts[j] < min ? starts[j] : min;
        assert_int_equal(events_next_flush(ev), min + 1000);
    }
    /* Flushing in steps drains the groups in order of end. */
    for (int64_t now = 1000; now < 2000; now += 37) {
        int64_t min = INT64_MAX;

        assert_int_equal(events_flush(ev, now), SLUICE_OK);
        for (int j = 0; j < 300; j++) {
            if (starts[j] + 1000 > now && starts[j] + 1000 < min)
                min = starts[j] + 1000;
        }
        assert_int_equal(events_next_flush(ev), min == INT64_MAX ? SLUICE_NEVER : min);
        assert_true(events_next_flush(ev) > now);
    }
    assert_int_equal(r.n, 300);
    events_free(ev);
    recorder_reset(&r);
}

/* ---- Property test against a reference model ---------------------------------------------- */

#define MODEL_MAX 256

/* The model's open group: a linear list, searched naively. */
typedef struct model_group {
    sluice_event_kind kind;
    const char *limit, *key, *type; /* pointers into the static pools below */
    int64_t percent;                /* BUDGET only */
    int64_t end_ns;
    sluice_event sum; /* the expected summary */
} model_group;

typedef struct model {
    int64_t interval_ns;
    model_group g[MODEL_MAX];
    size_t n;
    sluice_event expect[4 * MODEL_MAX]; /* events expected since the last check */
    size_t nexpect;
} model;

static void model_flush(model *m, int64_t now)
{
    for (;;) {
        size_t best = m->n;

        for (size_t i = 0; i < m->n; i++) {
            if (m->g[i].end_ns <= now && (best == m->n || m->g[i].end_ns < m->g[best].end_ns))
                best = i;
        }
        if (best == m->n)
            return;
        if (m->g[best].sum.count > 0)
            m->expect[m->nexpect++] = m->g[best].sum;
        m->g[best] = m->g[--m->n];
    }
}

static void model_emit(model *m, const sluice_event *e, int64_t now)
{
    model_flush(m, now);
    for (size_t i = 0; i < m->n; i++) {
        model_group *g = &m->g[i];

        if (g->kind == e->kind && str_eq(g->limit, e->limit) && str_eq(g->key, e->key) &&
            str_eq(g->type, e->type) &&
            (e->kind != SLUICE_EVENT_BUDGET || g->percent == e->wanted)) {
            if (g->sum.count == 0)
                g->sum.at_ns = e->at_ns;
            if (g->sum.count == 0 || e->next_slot_ns > g->sum.next_slot_ns)
                g->sum.next_slot_ns = e->next_slot_ns;
            g->sum.count += e->count;
            if (e->kind != SLUICE_EVENT_BUDGET)
                g->sum.wanted += e->wanted;
            g->sum.granted += e->granted;
            return;
        }
    }
    assert_true(m->n < MODEL_MAX);
    {
        model_group *g = &m->g[m->n++];

        memset(g, 0, sizeof *g);
        g->kind = e->kind;
        g->limit = e->limit;
        g->key = e->key;
        g->type = e->type;
        g->percent = e->wanted;
        g->end_ns = now + m->interval_ns;
        g->sum.kind = e->kind;
        g->sum.limit = e->limit;
        g->sum.key = e->key;
        g->sum.type = e->type;
        g->sum.wanted = e->kind == SLUICE_EVENT_BUDGET ? e->wanted : 0;
        g->sum.summary = 1;
    }
    m->expect[m->nexpect] = *e;
    m->expect[m->nexpect].summary = 0;
    m->nexpect++;
}

static int64_t model_next(const model *m)
{
    int64_t min = SLUICE_NEVER;

    for (size_t i = 0; i < m->n; i++)
        min = m->g[i].end_ns < min ? m->g[i].end_ns : min;
    return min;
}

static void check_same(const sluice_event *want, const sluice_event *got)
{
    assert_int_equal(got->kind, want->kind);
    assert_true(str_eq(got->limit, want->limit));
    assert_true(str_eq(got->key, want->key));
    assert_true(str_eq(got->type, want->type));
    assert_int_equal(got->summary, want->summary);
    assert_int_equal(got->count, want->count);
    assert_int_equal(got->at_ns, want->at_ns);
    assert_int_equal(got->wanted, want->wanted);
    assert_int_equal(got->granted, want->granted);
    assert_int_equal(got->next_slot_ns, want->next_slot_ns);
}

/* Compares what the module delivered since the last check with what the model expects. */
static void check_deliveries(model *m, recorder *r)
{
    assert_int_equal(r->n, m->nexpect);
    for (size_t i = 0; i < r->n; i++)
        check_same(&m->expect[i], &r->recs[i].ev);
    m->nexpect = 0;
    recorder_reset(r);
}

static void run_property(uint64_t seed, int steps)
{
    static const char *const limits[] = {NULL, "stripe", "mail"};
    static const char *const keys[] = {NULL, "", "k1", "k2", "k3"};
    static const char *const types[] = {NULL, "charge"};
    static const sluice_event_kind kinds[] = {SLUICE_EVENT_THROTTLED, SLUICE_EVENT_DEFERRED,
                                              SLUICE_EVENT_BUDGET};
    static model m;
    recorder r = {0};
    test_rng rng;
    events *ev;
    int64_t now = 0;

    rng_seed(&rng, seed);
    memset(&m, 0, sizeof m);
    m.interval_ns = rng_range(&rng, 1, 300);
    ev = new_events(m.interval_ns, &r);
    for (int step = 0; step < steps; step++) {
        /* Strictly increasing emit times, so no two intervals end together and the order of
         * summaries is fully determined. */
        now += rng_range(&rng, 1, m.interval_ns / 3 + 1);
        if (rng_range(&rng, 0, 9) == 0) {
            assert_int_equal(events_flush(ev, now), SLUICE_OK);
            model_flush(&m, now);
        } else {
            sluice_event e;

            memset(&e, 0, sizeof e);
            e.kind = kinds[rng_range(&rng, 0, 2)];
            e.limit = limits[rng_range(&rng, 0, 2)];
            e.key = keys[rng_range(&rng, 0, 4)];
            e.type = types[rng_range(&rng, 0, 1)];
            e.at_ns = now;
            e.count = (uint64_t)rng_range(&rng, 1, 3);
            e.wanted = e.kind == SLUICE_EVENT_BUDGET ? (rng_range(&rng, 0, 1) ? 80 : 100)
                                                     : rng_range(&rng, 0, 20);
            e.granted = rng_range(&rng, 0, 20);
            e.next_slot_ns = now + rng_range(&rng, -50, 500);
            assert_int_equal(events_emit(ev, &e, now), SLUICE_OK);
            model_emit(&m, &e, now);
        }
        check_deliveries(&m, &r);
        assert_int_equal(events_next_flush(ev), model_next(&m));
    }
    assert_int_equal(events_flush(ev, SLUICE_NEVER), SLUICE_OK);
    model_flush(&m, SLUICE_NEVER);
    check_deliveries(&m, &r);
    assert_int_equal(events_next_flush(ev), SLUICE_NEVER);
    events_free(ev);
}

static void test_property(void **state)
{
    (void)state;
    for (uint64_t seed = 1; seed <= 50; seed++)
        run_property(seed, 2000);
}

/* ---- Out of memory ------------------------------------------------------------------------ */

/* Emits a mix of events (new groups, existing groups, a long identity, flushes) and checks that
 * every occurrence is delivered whatever fails. Returns 0 or SLUICE_ENOMEM. */
static int oom_body(void *arg)
{
    recorder *r = arg;
    char big[700];
    uint64_t emitted = 0;
    events *ev = NULL;
    int rc, failed = 0;

    recorder_reset(r);
    rc = events_new(100, &ev);
    if (rc != SLUICE_OK) {
        assert_int_equal(rc, SLUICE_ENOMEM);
        assert_null(ev);
        return rc;
    }
    events_set_sink(ev, record, r);
    memset(big, 'z', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    for (int i = 0; i < 60; i++) {
        char key[16];
        sluice_event e;

        snprintf(key, sizeof key, "k%d", i % 20);
        e = make(i % 2 ? SLUICE_EVENT_THROTTLED : SLUICE_EVENT_BUDGET, "l", key, i);
        e.wanted = 80;
        e.granted = 1;
        if (i % 7 == 3)
            e.key = big;
        rc = events_emit(ev, &e, i * 4);
        emitted++;
        if (rc != SLUICE_OK) {
            assert_int_equal(rc, SLUICE_ENOMEM);
            failed = 1;
            /* Delivered at once, unaggregated. */
            assert_true(r->n > 0);
            assert_int_equal(r->recs[r->n - 1].ev.summary, 0);
            assert_int_equal(r->recs[r->n - 1].ev.count, 1);
        }
    }
    assert_int_equal(events_flush(ev, SLUICE_NEVER), SLUICE_OK);
    assert_int_equal(events_next_flush(ev), SLUICE_NEVER);
    /* No occurrence lost, none counted twice. */
    assert_int_equal(r->occurs, emitted);
    events_free(ev);
    return failed ? SLUICE_ENOMEM : SLUICE_OK;
}

static void test_oom_sweep(void **state)
{
    recorder r = {0};
    long n;

    (void)state;
    n = oom_sweep(oom_body, &r, 10000);
    assert_true(n > 40); /* the body makes about a hundred allocations */
    recorder_reset(&r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_new_and_arguments),
        cmocka_unit_test(test_storm_one_key),
        cmocka_unit_test(test_two_keys_independent),
        cmocka_unit_test(test_throttled_sums),
        cmocka_unit_test(test_single_event_no_summary),
        cmocka_unit_test(test_groups_forgotten),
        cmocka_unit_test(test_interval_boundary),
        cmocka_unit_test(test_budget_percents_apart),
        cmocka_unit_test(test_null_strings),
        cmocka_unit_test(test_long_strings),
        cmocka_unit_test(test_next_flush),
        cmocka_unit_test(test_property),
        cmocka_unit_test(test_oom_sweep),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
