/* SPDX-License-Identifier: MIT */
/*
 * Shared helpers of the engine tests (test_engine*.c): building limits and types in one call,
 * submitting and polling on a simulated clock, and an event sink that counts what it gets.
 * Everything is static inline so each test binary takes only what it uses.
 */
#ifndef SLUICE_TEST_ENGINE_FIXTURE_H
#define SLUICE_TEST_ENGINE_FIXTURE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sluice/engine.h"
#include "sluice/error.h"
#include "sluice/limit.h"
#include "sluice/policy.h"

#define SEC SLUICE_NS_PER_SEC
#define MS  SLUICE_NS_PER_MS
#define MIN (60 * SEC)
/* 2025-11-14 00:00:00 UTC: a Friday, midnight. */
#define T0 (INT64_C(1763078400) * SEC)

static inline sluice_engine *fx_engine(const sluice_engine_policy *p)
{
    sluice_engine *e = NULL;

    assert_int_equal(sluice_engine_new(p, &e), SLUICE_OK);
    assert_non_null(e);
    return e;
}

/* A limit policy of one kind with defaults; the caller adjusts fields, then fx_set_limit. */
static inline void fx_limit(sluice_limit_policy *p, const char *name, sluice_limit_kind kind,
                            int64_t limit, int64_t period_ns)
{
    sluice_limit_policy_init(p);
    p->name = (char *)name; /* borrowed: set_limit copies, and the test never clears it */
    sluice_limit_def_init(&p->def, kind);
    p->def.limit = limit;
    p->def.period_ns = period_ns;
}

static inline void fx_set_limit(sluice_engine *e, const sluice_limit_policy *p)
{
    char msg[256];
    int rc = sluice_engine_set_limit(e, p, T0, msg, sizeof msg);

    if (rc != SLUICE_OK)
        fail_msg("set_limit %s: %s (%s)", p->name, sluice_strerror(rc), msg);
}

/* A rate limit: permits per period, burst (0 = permits), keyed by path (NULL = global). */
static inline void fx_rate(sluice_engine *e, const char *name, int64_t permits, int64_t period_ns,
                           int64_t burst, const char *key_path)
{
    sluice_limit_policy p;

    fx_limit(&p, name, SLUICE_RATE, permits, period_ns);
    p.def.burst = burst;
    if (key_path) {
        p.key_source = SLUICE_KEY_PATH;
        p.key_path = (char *)key_path;
    }
    fx_set_limit(e, &p);
}

/* fx_rate with a horizon (a task whose place in line starts it later than that is refused). */
static inline void fx_rate_horizon(sluice_engine *e, const char *name, int64_t permits,
                                   int64_t period_ns, int64_t burst, const char *key_path,
                                   int64_t horizon_ns)
{
    sluice_limit_policy p;

    fx_limit(&p, name, SLUICE_RATE, permits, period_ns);
    p.def.burst = burst;
    p.def.horizon_ns = horizon_ns;
    if (key_path) {
        p.key_source = SLUICE_KEY_PATH;
        p.key_path = (char *)key_path;
    }
    fx_set_limit(e, &p);
}

/* A type naming n limits (a NULL-terminated list). */
static inline void fx_type_ex(sluice_engine *e, const char *name, const char *const *limits,
                              int max_attempts, int throttle_retries, int64_t lease_ns)
{
    sluice_type_policy t;
    char msg[256];
    size_t n = 0;
    int rc;

    sluice_type_policy_init(&t);
    while (limits && limits[n])
        n++;
    t.name = (char *)name;
    t.limits = (char **)limits;
    t.nlimits = n;
    if (max_attempts)
        t.retry.max_attempts = max_attempts;
    t.retry.throttle_retries = throttle_retries;
    if (lease_ns)
        t.lease_ns = lease_ns;
    rc = sluice_engine_set_type(e, &t, T0, msg, sizeof msg);
    if (rc != SLUICE_OK)
        fail_msg("set_type %s: %s (%s)", name, sluice_strerror(rc), msg);
}

static inline void fx_type(sluice_engine *e, const char *name, const char *const *limits)
{
    fx_type_ex(e, name, limits, 0, 1, 0);
}

/* Submits and returns the submit's code; *id gets the id. */
static inline int fx_try(sluice_engine *e, const char *type, const char *payload, int64_t now,
                         uint64_t *id, sluice_submit_error *err)
{
    sluice_task_spec s;

    memset(&s, 0, sizeof s);
    s.type = type;
    s.payload = payload;
    s.payload_len = payload ? strlen(payload) : 0;
    return sluice_engine_submit(e, &s, now, id, err);
}

/* Submits a task that must be accepted; returns its id. */
static inline uint64_t fx_submit(sluice_engine *e, const char *type, const char *payload,
                                 int64_t now)
{
    sluice_submit_error err;
    uint64_t id = 0;
    int rc = fx_try(e, type, payload, now, &id, &err);

    if (rc != SLUICE_OK)
        fail_msg("submit %s %s: %s (%s)", type, payload ? payload : "", sluice_strerror(rc),
                 err.message);
    return id;
}

/* Submits with every spec field at hand. */
static inline uint64_t fx_submit_spec(sluice_engine *e, const sluice_task_spec *s, int64_t now)
{
    sluice_submit_error err;
    uint64_t id = 0;
    int rc = sluice_engine_submit(e, s, now, &id, &err);

    if (rc != SLUICE_OK)
        fail_msg("submit: %s (%s)", sluice_strerror(rc), err.message);
    return id;
}

/* Ticks, then polls up to max tasks of any type; returns how many were delivered. */
static inline int fx_poll(sluice_engine *e, int64_t now, size_t max, sluice_delivery *out)
{
    int n;

    assert_int_equal(sluice_engine_tick(e, now), SLUICE_OK);
    n = sluice_engine_poll(e, NULL, 0, max, now, out);
    assert_true(n >= 0);
    return n;
}

static inline sluice_task_state fx_state(const sluice_engine *e, uint64_t id)
{
    sluice_task_info info;

    assert_int_equal(sluice_engine_task_info(e, id, &info), SLUICE_OK);
    return info.state;
}

/* An event sink that counts per kind and keeps the last event of each kind (strings dropped). */
typedef struct fx_events {
    size_t n[16];          /* events by kind */
    size_t summaries[16];  /* of which summaries */
    uint64_t count[16];    /* occurrences by kind (sum of counts) */
    sluice_event last[16]; /* the last event of each kind (strings NULLed) */
    char last_limit[16][64];
    char last_key[16][64];
} fx_events;

static inline void fx_on_event(const sluice_event *ev, void *arg)
{
    fx_events *r = arg;
    size_t k = (size_t)ev->kind;

    assert_true(k >= 1 && k < 16);
    r->n[k]++;
    r->count[k] += ev->count;
    if (ev->summary)
        r->summaries[k]++;
    r->last[k] = *ev;
    r->last[k].limit = r->last[k].key = r->last[k].type = NULL;
    snprintf(r->last_limit[k], sizeof r->last_limit[k], "%s", ev->limit ? ev->limit : "");
    snprintf(r->last_key[k], sizeof r->last_key[k], "%s", ev->key ? ev->key : "");
}

#endif
