/* SPDX-License-Identifier: MIT */
/*
 * Tests of the engine's persistence (the change feed's tasks and series, export, restore, series
 * state), on a simulated clock.
 *
 * The round trip builds an engine with tasks in every state (done, cancelled, failed by a
 * denial, queued with every field set, delayed, parked, running, running with a lease that ends
 * before the restore, retrying, occurrences of series), exports every task and the limiter's
 * key state, restores them into a fresh engine with the same policies at a later time, and
 * checks the ids, the state mapping, every field, and the behaviour that follows: the task
 * whose lease passed is redelivered without paying its rate limit again, the parked one is
 * re-paced by the restored limiter state, the running one holds its concurrency slot again, new
 * ids follow the restored ones, the task key map and the series counters are back.
 *
 * The change feed is checked kind by kind against a list, and by a property test: a store kept
 * only from the reported ids must always equal a full export (so nothing changes unreported),
 * and a restore of that store into a fresh engine gives back the same tasks. An out-of-memory
 * sweep checks that a restore is all or nothing.
 */
#include "engine_fixture.h"

#include "testutil.h"

#define HOUR (60 * MIN)

/* ---- Helpers --------------------------------------------------------------------------------- */

/* Task ids yielded by the change feed, in the order pulled. */
typedef struct changes {
    uint64_t ids[8192];
    size_t n;
} changes;

/* Names yielded by the change feed. */
typedef struct series_changes {
    char names[64][32];
    size_t n;
} series_changes;

/* Limiter key states saved by the round trip (keep_key, below). */
typedef struct key_store key_store;
static int keep_key(const char *key, size_t keylen, const void *state, size_t len, void *arg);
static void set_key_limit(key_store *ks, const char *id);

/* Engines whose feed a test reads, each into its lists (any may be NULL). */
static struct watcher {
    sluice_engine *e;
    changes *c;
    series_changes *sc;
    key_store *ks; /* the key states of limits "tenant" and "breaker" */
} watchers[4];

/* Pulls every watched engine's feed into its lists and confirms it, as a store's loop turn does.
 * Key states and limits are left to the tests that look at them. */
static void sync_all(void)
{
    for (size_t w = 0; w < sizeof watchers / sizeof watchers[0]; w++) {
        const sluice_changes *batch;
        const char *name, *key;
        const void *state;
        size_t pos, keylen, len;
        uint64_t id;

        if (!watchers[w].e)
            continue;
        assert_int_equal(sluice_engine_changes(watchers[w].e, &batch), SLUICE_OK);
        for (pos = 0; sluice_changes_next_task(batch, &pos, &id);)
            if (watchers[w].c) {
                assert_true(watchers[w].c->n < sizeof watchers[w].c->ids / sizeof(uint64_t));
                watchers[w].c->ids[watchers[w].c->n++] = id;
            }
        for (pos = 0; watchers[w].ks &&
                      sluice_changes_next_key(batch, &pos, &name, &key, &keylen, &state, &len);)
            if (strcmp(name, "tenant") == 0 || strcmp(name, "breaker") == 0) {
                set_key_limit(watchers[w].ks, name);
                keep_key(key, keylen, state, len, watchers[w].ks);
            }
        for (pos = 0; sluice_changes_next_series(batch, &pos, &name);)
            if (watchers[w].sc) {
                series_changes *sc = watchers[w].sc;

                assert_true(sc->n < 64);
                snprintf(sc->names[sc->n++], sizeof sc->names[0], "%s", name);
            }
        sluice_engine_changes_done(watchers[w].e);
    }
}

/* Starts e's feed and reads it into c and sc from now on (c NULL, sc NULL: stop reading e's). */
static void watch(sluice_engine *e, changes *c, series_changes *sc)
{
    struct watcher *free_slot = NULL;

    sync_all();
    assert_int_equal(sluice_engine_changes_start(e), SLUICE_OK);
    for (size_t w = 0; w < sizeof watchers / sizeof watchers[0]; w++) {
        if (watchers[w].e == e) {
            watchers[w].c = c ? c : watchers[w].c;
            watchers[w].sc = sc ? sc : watchers[w].sc;
            if (!c && !sc)
                watchers[w].e = NULL;
            return;
        }
        if (!watchers[w].e && !free_slot)
            free_slot = &watchers[w];
    }
    assert_non_null(free_slot);
    if (c || sc)
        *free_slot = (struct watcher){e, c, sc, NULL};
}

/* Before an engine a test watched is freed. */
static void unwatch_all(void)
{
    memset(watchers, 0, sizeof watchers);
}

static int changed(changes *c, uint64_t id)
{
    sync_all();
    for (size_t i = 0; i < c->n; i++)
        if (c->ids[i] == id)
            return 1;
    return 0;
}

/* Checks that id was yielded since the last check, then forgets the list. */
#define EXPECT_CHANGED(c, id)                                                                      \
    do {                                                                                           \
        assert_true(changed((c), (id)));                                                           \
        (c)->n = 0;                                                                                \
    } while (0)

static int series_changed(series_changes *c, const char *name)
{
    sync_all();
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->names[i], name) == 0)
            return 1;
    return 0;
}

static int set_type_rc(sluice_engine *e, const char *name, const char *const *limits,
                       int max_attempts, int64_t backoff_ns, int throttle_retries, int64_t lease_ns)
{
    sluice_type_policy t;
    char msg[256];
    size_t n = 0;

    sluice_type_policy_init(&t);
    while (limits && limits[n])
        n++;
    t.name = (char *)name;
    t.limits = (char **)limits;
    t.nlimits = n;
    t.retry.max_attempts = max_attempts;
    t.retry.backoff = SLUICE_BACKOFF_FIXED;
    t.retry.base_ns = backoff_ns;
    t.retry.max_ns = backoff_ns;
    t.retry.throttle_retries = throttle_retries;
    t.lease_ns = lease_ns;
    return sluice_engine_set_type(e, &t, T0, msg, sizeof msg);
}

static void set_type(sluice_engine *e, const char *name, const char *const *limits,
                     int max_attempts, int64_t backoff_ns, int throttle_retries, int64_t lease_ns)
{
    int rc = set_type_rc(e, name, limits, max_attempts, backoff_ns, throttle_retries, lease_ns);

    if (rc != SLUICE_OK)
        fail_msg("set_type %s: %s", name, sluice_strerror(rc));
}

/*
 * The policies of every engine here:
 *   tenant   rate 1 per 10 min, burst 1, keyed by input.tenant
 *   breaker  rate 1 per minute, overflow reject, explicit key
 *   conc     concurrency 1, global
 *   sync [tenant] 3 attempts, 5 min backoff, lease 50 s;  mail [breaker];  job [conc] lease 10 min;
 *   plain, tick: no limits;  work: no limits, 5 attempts, 1 s backoff, lease 10 s.
 * Returns 0 or the first error (SLUICE_ENOMEM under the out-of-memory sweep).
 */
static int policies_rc(sluice_engine *e)
{
    static const char *const sync_l[] = {"tenant", NULL};
    static const char *const mail_l[] = {"breaker", NULL};
    static const char *const job_l[] = {"conc", NULL};
    sluice_limit_policy p;
    char msg[256];
    int rc;

    fx_limit(&p, "tenant", SLUICE_RATE, 1, 10 * MIN);
    p.def.burst = 1;
    p.key_source = SLUICE_KEY_PATH;
    p.key_path = "tenant";
    rc = sluice_engine_set_limit(e, &p, T0, msg, sizeof msg);
    if (rc == SLUICE_OK) {
        fx_limit(&p, "breaker", SLUICE_RATE, 1, MIN);
        p.overflow = SLUICE_OVERFLOW_REJECT;
        p.key_source = SLUICE_KEY_EXPLICIT;
        rc = sluice_engine_set_limit(e, &p, T0, msg, sizeof msg);
    }
    if (rc == SLUICE_OK) {
        fx_limit(&p, "conc", SLUICE_CONCURRENCY, 1, 0);
        rc = sluice_engine_set_limit(e, &p, T0, msg, sizeof msg);
    }
    if (rc == SLUICE_OK)
        rc = set_type_rc(e, "sync", sync_l, 3, 5 * MIN, 1, 50 * SEC);
    if (rc == SLUICE_OK)
        rc = set_type_rc(e, "mail", mail_l, 3, SEC, 1, 30 * SEC);
    if (rc == SLUICE_OK)
        rc = set_type_rc(e, "job", job_l, 3, SEC, 1, 10 * MIN);
    if (rc == SLUICE_OK)
        rc = set_type_rc(e, "plain", NULL, 3, SEC, 1, 30 * SEC);
    if (rc == SLUICE_OK)
        rc = set_type_rc(e, "tick", NULL, 3, SEC, 1, 30 * SEC);
    if (rc == SLUICE_OK)
        rc = set_type_rc(e, "work", NULL, 5, SEC, 1, 10 * SEC);
    return rc;
}

static void policies(sluice_engine *e)
{
    assert_int_equal(policies_rc(e), SLUICE_OK);
}

static sluice_engine *strict_engine(size_t max_finished)
{
    sluice_engine_policy pol;

    sluice_engine_policy_init(&pol);
    pol.strict_types = 1;
    if (max_finished)
        pol.max_finished = max_finished;
    return fx_engine(&pol);
}

static uint64_t submit_full(sluice_engine *e, const char *type, const char *payload,
                            const char *key, const char *task_key, int64_t units, int priority,
                            int64_t not_before, int64_t now)
{
    sluice_task_spec s;

    memset(&s, 0, sizeof s);
    s.type = type;
    s.payload = payload;
    s.payload_len = payload ? strlen(payload) : 0;
    s.key = key;
    s.key_len = key ? strlen(key) : 0;
    s.task_key = task_key;
    s.task_key_len = task_key ? strlen(task_key) : 0;
    s.units = units;
    s.has_priority = priority != 0;
    s.priority = priority;
    s.not_before_ns = not_before;
    return fx_submit_spec(e, &s, now);
}

/* Ticks, then polls up to max tasks of one type. */
static int poll_type(sluice_engine *e, const char *type, int64_t now, size_t max,
                     sluice_delivery *out)
{
    const char *types[1];
    int n;

    types[0] = type;
    assert_int_equal(sluice_engine_tick(e, now), SLUICE_OK);
    n = sluice_engine_poll(e, types, 1, max, now, out);
    assert_true(n >= 0);
    return n;
}

static void add_series(sluice_engine *e, const char *name, const char *type, int64_t interval_ns,
                       const char *cron, const char *payload, int64_t max_runs, int64_t now)
{
    sluice_recurring_spec r;
    char msg[256];
    int rc;

    memset(&r, 0, sizeof r);
    r.name = name;
    r.type = type;
    r.interval_ns = interval_ns;
    r.cron = cron;
    r.payload = payload;
    r.payload_len = payload ? strlen(payload) : 0;
    r.max_runs = max_runs;
    rc = sluice_engine_add_recurring(e, &r, now, msg, sizeof msg);
    if (rc != SLUICE_OK)
        fail_msg("add_recurring %s: %s (%s)", name, sluice_strerror(rc), msg);
}

/* ---- Records: deep copies, comparison, the state mapping ------------------------------------- */

static char *dup_n(const char *s, size_t len)
{
    char *p;

    if (!s)
        return NULL;
    p = malloc(len + 1);
    assert_non_null(p);
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

static char *dup_s(const char *s)
{
    return s ? dup_n(s, strlen(s)) : NULL;
}

/* A record that owns its strings (as a store would hold it). */
static void rec_copy(sluice_task_record *dst, const sluice_task_record *src)
{
    *dst = *src;
    dst->type = dup_s(src->type);
    dst->payload = dup_n(src->payload, src->payload_len);
    dst->key = dup_n(src->key, src->key_len);
    dst->task_key = dup_n(src->task_key, src->task_key_len);
    dst->series = dup_s(src->series);
    dst->fail_limit = dup_s(src->fail_limit);
    dst->fail_message = dup_s(src->fail_message);
}

static void rec_clear(sluice_task_record *r)
{
    free((char *)r->type);
    free((char *)r->payload);
    free((char *)r->key);
    free((char *)r->task_key);
    free((char *)r->series);
    free((char *)r->fail_limit);
    free((char *)r->fail_message);
    memset(r, 0, sizeof *r);
}

static int bytes_eq(const char *a, size_t alen, const char *b, size_t blen)
{
    if (!a || !b)
        return !a && !b;
    return alen == blen && memcmp(a, b, alen) == 0;
}

static int str_eq(const char *a, const char *b)
{
    if (!a || !b)
        return !a && !b;
    return strcmp(a, b) == 0;
}

/* Fields a restore keeps as they were (everything but state, lease and grant). */
static void assert_same_content(const sluice_task_record *a, const sluice_task_record *b)
{
    assert_int_equal(a->id, b->id);
    assert_string_equal(a->type, b->type);
    assert_true(bytes_eq(a->payload, a->payload_len, b->payload, b->payload_len));
    assert_true(bytes_eq(a->key, a->key_len, b->key, b->key_len));
    assert_true(bytes_eq(a->task_key, a->task_key_len, b->task_key, b->task_key_len));
    assert_int_equal(a->units, b->units);
    assert_int_equal(a->priority, b->priority);
    assert_int_equal(a->attempt, b->attempt);
    assert_int_equal(a->submitted_ns, b->submitted_ns);
    assert_int_equal(a->not_before_ns, b->not_before_ns);
    assert_true(str_eq(a->series, b->series));
    assert_int_equal(a->fail_reason, b->fail_reason);
    assert_true(str_eq(a->fail_limit, b->fail_limit));
    assert_true(str_eq(a->fail_message, b->fail_message));
}

static void assert_same_record(const sluice_task_record *a, const sluice_task_record *b)
{
    assert_same_content(a, b);
    assert_int_equal(a->state, b->state);
    assert_int_equal(a->lease_until_ns, b->lease_until_ns);
    assert_int_equal(a->granted, b->granted);
}

/* The state a record comes back in when restored at now. */
static sluice_task_state mapped_state(const sluice_task_record *r, int64_t now)
{
    switch (r->state) {
    case SLUICE_TASK_PARKED:
        return SLUICE_TASK_QUEUED;
    case SLUICE_TASK_RUNNING:
        return r->lease_until_ns > now ? SLUICE_TASK_RUNNING : SLUICE_TASK_QUEUED;
    default:
        return r->state;
    }
}

static sluice_task_record export_of(const sluice_engine *e, uint64_t id)
{
    sluice_task_record r;

    if (sluice_engine_export_task(e, id, &r) != SLUICE_OK)
        fail_msg("task %llu not found", (unsigned long long)id);
    return r;
}

static void restore_ok(sluice_engine *e, const sluice_task_record *r, int64_t now)
{
    sluice_submit_error err;
    int rc = sluice_engine_restore_task(e, r, now, &err);

    if (rc != SLUICE_OK)
        fail_msg("restore %llu: %s (%s)", (unsigned long long)r->id, sluice_strerror(rc),
                 err.message);
}

/* ---- Limiter key state, as a store would carry it -------------------------------------------- */

typedef struct key_blob {
    char limit[32];
    char key[64];
    size_t keylen;
    unsigned char state[SLUICE_KEY_STATE_MAX];
    size_t len;
} key_blob;

struct key_store {
    key_blob b[32];
    size_t n;
    const char *limit; /* the limit being drained */
};

static void set_key_limit(key_store *ks, const char *id)
{
    ks->limit = id;
}

static int keep_key(const char *key, size_t keylen, const void *state, size_t len, void *arg)
{
    key_store *ks = arg;
    key_blob *b = NULL;

    assert_true(keylen < sizeof b->key && len <= SLUICE_KEY_STATE_MAX);
    for (size_t i = 0; i < ks->n; i++)
        if (strcmp(ks->b[i].limit, ks->limit) == 0 && ks->b[i].keylen == keylen &&
            memcmp(ks->b[i].key, key, keylen) == 0)
            b = &ks->b[i];
    if (!b) {
        assert_true(ks->n < 32);
        b = &ks->b[ks->n++];
        snprintf(b->limit, sizeof b->limit, "%s", ks->limit);
        memcpy(b->key, key, keylen);
        b->keylen = keylen;
    }
    b->len = state ? len : 0;
    if (state)
        memcpy(b->state, state, len);
    return 0;
}

static sluice_limit *core_of(const sluice_engine *e, const char *limit)
{
    sluice_limit *live = NULL;

    assert_non_null(sluice_engine_get_limit(e, limit, &live));
    assert_non_null(live);
    return live;
}

/* Saves the key states the change feed yields for the watched engines' limits (a round trip
 * watches "tenant" and "breaker"). */
static void drain_keys(void)
{
    sync_all();
}

static void import_keys(sluice_engine *e, const key_store *ks, int64_t now)
{
    for (size_t i = 0; i < ks->n; i++)
        if (ks->b[i].len)
            assert_int_equal(sluice_limit_import(core_of(e, ks->b[i].limit), ks->b[i].key,
                                                 ks->b[i].keylen, ks->b[i].state, ks->b[i].len,
                                                 now),
                             SLUICE_OK);
}

static void restore_series_from(sluice_engine *to, const sluice_engine *from, const char *name,
                                int64_t now)
{
    sluice_recurring_spec spec;
    int64_t runs, skipped;
    char msg[256];
    int rc;

    assert_int_equal(sluice_engine_recurring_state(from, name, &spec, &runs, &skipped), SLUICE_OK);
    rc = sluice_engine_restore_recurring(to, &spec, runs, skipped, now, msg, sizeof msg);
    if (rc != SLUICE_OK)
        fail_msg("restore series %s: %s (%s)", name, sluice_strerror(rc), msg);
}

/* ---- The round trip -------------------------------------------------------------------------- */

static void test_round_trip(void **unused)
{
    const int64_t restore_at = T0 + MIN;
    sluice_engine *a = strict_engine(0), *b;
    changes *ca = calloc(1, sizeof *ca), *cb = calloc(1, sizeof *cb);
    series_changes sb;
    sluice_delivery out[8];
    sluice_task_record recs[32], r;
    key_store ks;
    sluice_engine_stats st;
    sluice_task_info info;
    sluice_decision dec;
    uint64_t done, cancelled, m1, m2, s1, s2, x, g, run, d, delayed, o_h = 0, f1 = 0, f2, last;
    int64_t runs, skipped;
    sluice_recurring_spec spec;
    sluice_recurring_info ri;

    (void)unused;
    assert_non_null(ca);
    assert_non_null(cb);
    memset(&ks, 0, sizeof ks);
    policies(a);
    watch(a, ca, NULL);
    watchers[0].ks = &ks; /* the feed tracks every limit's keys; the trip saves these two */

    /* Finished: done, cancelled, failed by a denial (m2: breaker allows one a minute). */
    done = submit_full(a, "plain", "{\"n\":\"a\"}", NULL, "tk-a", 0, 0, 0, T0);
    assert_int_equal(poll_type(a, "plain", T0, 8, out), 1);
    assert_int_equal(sluice_engine_ack(a, done, -1, T0), SLUICE_OK);
    cancelled = submit_full(a, "plain", NULL, NULL, NULL, 0, 0, 0, T0);
    assert_int_equal(sluice_engine_cancel(a, cancelled, T0), SLUICE_OK);
    m1 = submit_full(a, "mail", NULL, "wf-1", NULL, 0, 0, 0, T0);
    m2 = submit_full(a, "mail", NULL, "wf-1", NULL, 0, 0, 0, T0);
    assert_int_equal(poll_type(a, "mail", T0, 8, out), 1);
    assert_int_equal(out[0].id, m1);
    assert_int_equal(sluice_engine_ack(a, m1, -1, T0), SLUICE_OK);
    assert_int_equal(fx_state(a, m2), SLUICE_TASK_FAILED);

    /* sync: s1 runs and is acked, s2 parks behind it on acme; x runs on beta (its lease ends
     * before the restore); g runs on gamma, fails and waits 5 min for its retry. */
    s1 = submit_full(a, "sync", "{\"tenant\":\"acme\"}", NULL, NULL, 0, 0, 0, T0);
    s2 = submit_full(a, "sync", "{\"tenant\":\"acme\"}", NULL, NULL, 0, 0, 0, T0);
    x = submit_full(a, "sync", "{\"tenant\":\"beta\"}", NULL, NULL, 0, 0, 0, T0);
    g = submit_full(a, "sync", "{\"tenant\":\"gamma\"}", NULL, NULL, 0, 0, 0, T0);
    assert_int_equal(poll_type(a, "sync", T0, 8, out), 3);
    assert_int_equal(fx_state(a, s2), SLUICE_TASK_PARKED);
    assert_int_equal(sluice_engine_ack(a, s1, -1, T0), SLUICE_OK);
    assert_int_equal(sluice_engine_fail(a, g, SLUICE_FAIL_MODE_RETRY, "flaky", T0), SLUICE_OK);

    /* Running across the restore, holding the one concurrency slot. */
    run = submit_full(a, "job", "{\"j\":1}", NULL, NULL, 0, 0, 0, T0);
    assert_int_equal(poll_type(a, "job", T0, 8, out), 1);

    /* Queued with every field set, its payload replaced by task key; and a delayed one. */
    d = submit_full(a, "plain", "{\"v\":1}", "k-explicit", "tk-q", 3, 5, 0, T0);
    assert_int_equal(submit_full(a, "plain", "{\"v\":2}", "k-explicit", "tk-q", 3, 5, 0, T0), d);
    delayed = submit_full(a, "plain", NULL, NULL, NULL, 0, 0, T0 + HOUR, T0);

    /* Series: an hourly occurrence left queued; "fast" runs once, then misses two points and
     * leaves its third occurrence queued. */
    add_series(a, "hourly", "plain", HOUR, NULL, "{\"s\":\"h\"}", 0, T0);
    add_series(a, "fast", "tick", 10 * SEC, NULL, NULL, 0, T0);
    assert_int_equal(sluice_engine_tick(a, T0), SLUICE_OK);
    for (uint64_t id = delayed + 1; id <= delayed + 2; id++) {
        r = export_of(a, id);
        assert_non_null(r.series);
        if (strcmp(r.series, "hourly") == 0)
            o_h = id;
        else
            f1 = id;
    }
    assert_true(o_h && f1);
    assert_int_equal(poll_type(a, "tick", T0, 8, out), 1);
    assert_int_equal(sluice_engine_ack(a, f1, -1, T0), SLUICE_OK);
    assert_int_equal(sluice_engine_tick(a, T0 + 35 * SEC), SLUICE_OK);
    f2 = delayed + 3;
    last = f2;
    assert_int_equal(export_of(a, f2).state, SLUICE_TASK_QUEUED);

    /* Every task was reported at least once. */
    for (uint64_t id = 1; id <= last; id++)
        assert_true(changed(ca, id));

    /* The records as exported. */
    r = export_of(a, x);
    assert_int_equal(r.state, SLUICE_TASK_RUNNING);
    assert_int_equal(r.lease_until_ns, T0 + 50 * SEC);
    assert_int_equal(r.granted, 1);
    r = export_of(a, g);
    assert_int_equal(r.state, SLUICE_TASK_QUEUED);
    assert_int_equal(r.not_before_ns, T0 + 5 * MIN);
    assert_int_equal(r.attempt, 1);
    assert_int_equal(r.granted, 0);
    assert_string_equal(r.fail_message, "flaky");
    r = export_of(a, m2);
    assert_int_equal(r.fail_reason, SLUICE_FAIL_RATELIMITED);
    assert_string_equal(r.fail_limit, "breaker");
    r = export_of(a, d);
    assert_int_equal(r.key_len, 10);
    assert_memory_equal(r.key, "k-explicit", 10);
    assert_memory_equal(r.payload, "{\"v\":2}", 7);
    assert_null(export_of(a, done).key);

    /* Export everything and the limiter state, as a store holds them. */
    assert_true(last < 32);
    for (uint64_t id = 1; id <= last; id++) {
        r = export_of(a, id);
        rec_copy(&recs[id], &r);
    }
    drain_keys();
    assert_true(ks.n >= 4); /* acme, beta, gamma, wf-1 */

    /* A fresh engine with the same policies: series first, then keys, then tasks (by id). */
    b = strict_engine(0);
    policies(b);
    memset(&sb, 0, sizeof sb);
    watch(b, cb, &sb);
    restore_series_from(b, a, "hourly", restore_at);
    restore_series_from(b, a, "fast", restore_at);
    import_keys(b, &ks, restore_at);
    for (uint64_t id = last; id >= 1; id--) /* any order will do */
        restore_ok(b, &recs[id], restore_at);
    sync_all();
    assert_int_equal(cb->n, 0); /* restoring reports nothing */
    sync_all();
    assert_int_equal(sb.n, 0);

    /* Same ids, mapped states, same contents. */
    for (uint64_t id = 1; id <= last; id++) {
        r = export_of(b, id);
        assert_same_content(&recs[id], &r);
        assert_int_equal(r.state, mapped_state(&recs[id], restore_at));
    }
    r = export_of(b, x); /* lease passed: queued, holding its grant */
    assert_int_equal(r.state, SLUICE_TASK_QUEUED);
    assert_int_equal(r.granted, 1);
    r = export_of(b, run); /* lease still on */
    assert_int_equal(r.state, SLUICE_TASK_RUNNING);
    assert_int_equal(r.lease_until_ns, T0 + 10 * MIN);
    assert_int_equal(export_of(b, s2).state, SLUICE_TASK_QUEUED);
    assert_int_equal(sluice_engine_task_info(b, m2, &info), SLUICE_OK);
    assert_int_equal(info.failure.reason, SLUICE_FAIL_RATELIMITED);
    assert_string_equal(info.failure.limit, "breaker");
    assert_string_equal(info.failure.key, "wf-1");
    assert_int_equal(sluice_engine_task_info(b, g, &info), SLUICE_OK);
    assert_string_equal(info.task_key ? info.task_key : "", "");
    sluice_engine_get_stats(b, &st);
    assert_int_equal(st.queued, 5);  /* s2, x, d, o_h, f2 */
    assert_int_equal(st.delayed, 2); /* g, delayed */
    assert_int_equal(st.running, 1); /* run */
    assert_int_equal(st.parked, 0);

    /* New ids follow the restored ones. */
    assert_true(submit_full(b, "tick", NULL, NULL, NULL, 0, 0, 0, restore_at) > last);

    /* x is delivered at once, redeeming its grant: beta's budget (spent until T0 + 10 min by
     * x's first grant, restored) is not charged again. s2 is re-paced: acme has no budget
     * either, so it parks again rather than running at once. */
    assert_int_equal(poll_type(b, "sync", restore_at, 8, out), 1);
    assert_int_equal(out[0].id, x);
    assert_int_equal(out[0].attempt, 2);
    EXPECT_CHANGED(cb, x);
    assert_int_equal(
        sluice_limit_decide(core_of(b, "tenant"), "beta", 4, 1, restore_at, SLUICE_PEEK, &dec),
        SLUICE_OK);
    assert_false(dec.allowed);
    assert_int_equal(dec.retry_after_ns, T0 + 10 * MIN - restore_at);
    assert_int_equal(fx_state(b, s2), SLUICE_TASK_PARKED);
    assert_int_equal(sluice_engine_ack(b, x, -1, restore_at), SLUICE_OK);

    /* The running job holds the concurrency slot again: another job waits for its ack. */
    {
        uint64_t j2 = submit_full(b, "job", NULL, NULL, NULL, 0, 0, 0, restore_at);

        assert_int_equal(poll_type(b, "job", restore_at, 8, out), 0);
        assert_int_equal(fx_state(b, j2), SLUICE_TASK_PARKED);
        assert_int_equal(sluice_engine_ack(b, run, -1, restore_at + SEC), SLUICE_OK);
        assert_int_equal(poll_type(b, "job", restore_at + SEC, 8, out), 1);
        assert_int_equal(out[0].id, j2);
    }

    /* The task key map is back: the same key replaces d's payload. */
    assert_int_equal(submit_full(b, "plain", "{\"v\":3}", NULL, "tk-q", 3, 5, 0, restore_at), d);

    /* Series: counters survive, the schedule resumes at the first point after the restore, and
     * the queued occurrence belongs to its series again (removing it cancels the occurrence). */
    assert_int_equal(sluice_engine_recurring_state(b, "fast", &spec, &runs, &skipped), SLUICE_OK);
    assert_int_equal(runs, 1);
    assert_int_equal(skipped, 2);
    assert_int_equal(spec.interval_ns, 10 * SEC);
    assert_int_equal(spec.start_ns, T0);
    assert_int_equal(sluice_engine_recurring_state(b, "hourly", &spec, &runs, &skipped), SLUICE_OK);
    assert_int_equal(runs, 0);
    assert_memory_equal(spec.payload, "{\"s\":\"h\"}", spec.payload_len);
    assert_int_equal(sluice_engine_recurring_info(b, "hourly", &ri), SLUICE_OK);
    assert_int_equal(ri.next_ns, T0 + HOUR);
    assert_int_equal(sluice_engine_del_recurring(b, "fast", restore_at + SEC), SLUICE_OK);
    assert_int_equal(fx_state(b, f2), SLUICE_TASK_CANCELLED);
    assert_int_equal(fx_state(b, o_h), SLUICE_TASK_QUEUED);

    /* s2 starts at acme's next slot, as it would have without the restart. */
    assert_int_equal(poll_type(b, "sync", T0 + 10 * MIN - SEC, 8, out), 0);
    {
        int n = poll_type(b, "sync", T0 + 10 * MIN, 8, out), seen = 0;

        for (int i = 0; i < n; i++)
            seen |= out[i].id == s2;
        assert_true(seen);
    }

    for (uint64_t id = 1; id <= last; id++)
        rec_clear(&recs[id]);
    free(ca);
    free(cb);
    unwatch_all();
    sluice_engine_free(a);
    sluice_engine_free(b);
}

/* ---- The change hook, kind by kind ----------------------------------------------------------- */

static void test_feed_kinds(void **unused)
{
    sluice_engine *e = strict_engine(1); /* keeps one finished task */
    changes *c = calloc(1, sizeof *c);
    series_changes sc;
    sluice_delivery out[8];
    sluice_task_record r;
    sluice_recurring_spec spec;
    uint64_t id, id2, id3, m1, m2, occ;
    int64_t until;

    (void)unused;
    assert_non_null(c);
    memset(&sc, 0, sizeof sc);
    policies(e);
    watch(e, c, &sc);

    /* created */
    id = submit_full(e, "work", "{\"v\":1}", NULL, "k", 0, 0, 0, T0);
    EXPECT_CHANGED(c, id);
    /* payload replaced */
    assert_int_equal(submit_full(e, "work", "{\"v\":2}", NULL, "k", 0, 0, 0, T0), id);
    EXPECT_CHANGED(c, id);
    /* running: state, attempt, lease */
    assert_int_equal(poll_type(e, "work", T0, 8, out), 1);
    EXPECT_CHANGED(c, id);
    /* touch: lease */
    assert_int_equal(sluice_engine_touch(e, id, T0 + SEC, &until), SLUICE_OK);
    EXPECT_CHANGED(c, id);
    assert_int_equal(export_of(e, id).lease_until_ns, until);
    /* retry: queued, not_before the backoff's end */
    assert_int_equal(sluice_engine_fail(e, id, SLUICE_FAIL_MODE_RETRY, "again", T0 + 2 * SEC),
                     SLUICE_OK);
    EXPECT_CHANGED(c, id);
    r = export_of(e, id);
    assert_int_equal(r.state, SLUICE_TASK_QUEUED);
    assert_int_equal(r.not_before_ns, T0 + 3 * SEC);
    /* coming due changes nothing durable; the next delivery does */
    assert_int_equal(poll_type(e, "work", T0 + 3 * SEC, 8, out), 1);
    EXPECT_CHANGED(c, id);
    assert_int_equal(export_of(e, id).attempt, 2);
    /* lost lease: queued, holding its grant */
    assert_int_equal(sluice_engine_tick(e, T0 + 13 * SEC), SLUICE_OK);
    EXPECT_CHANGED(c, id);
    r = export_of(e, id);
    assert_int_equal(r.state, SLUICE_TASK_QUEUED);
    assert_int_equal(r.granted, 1);
    /* done */
    assert_int_equal(poll_type(e, "work", T0 + 13 * SEC, 8, out), 1);
    sync_all();
    c->n = 0;
    assert_int_equal(sluice_engine_ack(e, id, -1, T0 + 14 * SEC), SLUICE_OK);
    EXPECT_CHANGED(c, id);
    assert_int_equal(export_of(e, id).state, SLUICE_TASK_DONE);
    /* cancelled; and the done task is forgotten (max_finished 1): the store deletes it */
    id2 = submit_full(e, "work", NULL, NULL, NULL, 0, 0, 0, T0 + 14 * SEC);
    sync_all();
    c->n = 0;
    assert_int_equal(sluice_engine_cancel(e, id2, T0 + 14 * SEC), SLUICE_OK);
    assert_true(changed(c, id));
    EXPECT_CHANGED(c, id2);
    assert_int_equal(sluice_engine_export_task(e, id, &r), SLUICE_ENOTFOUND);
    /* failed by the worker (dead) */
    id3 = submit_full(e, "work", NULL, NULL, NULL, 0, 0, 0, T0 + 15 * SEC);
    assert_int_equal(poll_type(e, "work", T0 + 15 * SEC, 8, out), 1);
    sync_all();
    c->n = 0;
    assert_int_equal(sluice_engine_fail(e, id3, SLUICE_FAIL_MODE_DEAD, "gone", T0 + 15 * SEC),
                     SLUICE_OK);
    EXPECT_CHANGED(c, id3);
    assert_int_equal(export_of(e, id3).fail_reason, SLUICE_FAIL_DEAD);
    /* failed by a limit's denial */
    m1 = submit_full(e, "mail", NULL, "wf", NULL, 0, 0, 0, T0 + 16 * SEC);
    m2 = submit_full(e, "mail", NULL, "wf", NULL, 0, 0, 0, T0 + 16 * SEC);
    sync_all();
    c->n = 0;
    assert_int_equal(poll_type(e, "mail", T0 + 16 * SEC, 8, out), 1);
    assert_true(changed(c, m1));
    EXPECT_CHANGED(c, m2);
    assert_int_equal(export_of(e, m2).state, SLUICE_TASK_FAILED);
    assert_int_equal(sluice_engine_ack(e, m1, -1, T0 + 16 * SEC), SLUICE_OK);

    /* series: added, an occurrence created, a run counted, a point skipped, removed */
    add_series(e, "s", "work", MIN, NULL, NULL, 0, T0 + MIN);
    assert_true(series_changed(&sc, "s"));
    sync_all();
    sc.n = 0;
    sync_all();
    c->n = 0;
    assert_int_equal(sluice_engine_tick(e, T0 + MIN), SLUICE_OK);
    sync_all();
    assert_int_equal(c->n, 1);
    occ = c->ids[0];
    EXPECT_CHANGED(c, occ);
    assert_string_equal(export_of(e, occ).series, "s");
    assert_int_equal(poll_type(e, "work", T0 + MIN, 8, out), 1);
    assert_true(series_changed(&sc, "s")); /* runs 1 */
    sync_all();
    sc.n = 0;
    assert_int_equal(sluice_engine_ack(e, occ, -1, T0 + MIN), SLUICE_OK);
    sync_all();
    assert_int_equal(sc.n, 0); /* nothing of the series changed */
    assert_int_equal(sluice_engine_tick(e, T0 + 3 * MIN + SEC), SLUICE_OK); /* missed T0+2min */
    assert_true(series_changed(&sc, "s"));
    sync_all();
    sc.n = 0;
    sync_all();
    occ = c->ids[c->n - 1];
    sync_all();
    c->n = 0;
    assert_int_equal(sluice_engine_del_recurring(e, "s", T0 + 3 * MIN + SEC), SLUICE_OK);
    EXPECT_CHANGED(c, occ); /* cancelled, and no longer of the series */
    assert_true(series_changed(&sc, "s"));
    assert_int_equal(sluice_engine_recurring_state(e, "s", &spec, NULL, NULL), SLUICE_ENOTFOUND);

    /* A pull confirmed is not yielded again; what changes after it is. */
    sync_all();
    c->n = 0;
    sync_all();
    assert_int_equal(c->n, 0);
    id = submit_full(e, "work", NULL, NULL, NULL, 0, 0, 0, T0 + 4 * MIN);
    EXPECT_CHANGED(c, id);
    unwatch_all();
    free(c);
    sluice_engine_free(e);
}

/* ---- Errors ---------------------------------------------------------------------------------- */

static void test_restore_errors(void **unused)
{
    static const char *const region_l[] = {"region", NULL};
    sluice_engine *a = strict_engine(0), *b;
    sluice_task_record old, sync, dup, bad;
    sluice_submit_error err;
    sluice_engine_stats st;
    sluice_limit_policy p;
    uint64_t old_id, sync_id, held;

    (void)unused;
    policies(a);
    set_type(a, "old", NULL, 3, SEC, 1, 30 * SEC);
    old_id = submit_full(a, "old", NULL, NULL, NULL, 0, 0, 0, T0);
    sync_id = submit_full(a, "sync", "{\"tenant\":\"acme\"}", NULL, "tk", 0, 0, 0, T0);
    old = export_of(a, old_id);
    sync = export_of(a, sync_id);

    /* B has no type "old", and its "sync" is keyed by a path the payload lacks. */
    b = strict_engine(0);
    fx_limit(&p, "region", SLUICE_RATE, 1, MIN);
    p.key_source = SLUICE_KEY_PATH;
    p.key_path = "region";
    fx_set_limit(b, &p);
    set_type(b, "sync", region_l, 3, SEC, 1, 30 * SEC);
    assert_int_equal(sluice_engine_restore_task(b, &old, T0, &err), SLUICE_ENOTFOUND);
    assert_non_null(strstr(err.message, "old"));
    assert_int_equal(sluice_engine_restore_task(b, &sync, T0, &err), SLUICE_EINVAL);
    assert_non_null(strstr(err.message, "region"));
    sluice_engine_get_stats(b, &st);
    assert_int_equal(st.queued + st.delayed + st.running + st.parked, 0);
    /* Nothing half-restored: the failed ids are free, and ids start from 1 again. */
    assert_int_equal(sluice_engine_export_task(b, sync_id, &dup), SLUICE_ENOTFOUND);
    assert_int_equal(submit_full(b, "sync", "{\"region\":\"eu\"}", NULL, NULL, 0, 0, 0, T0), 1);
    sluice_engine_free(b);

    /* Same policies: an id taken, a task key held, bad records. */
    b = strict_engine(0);
    policies(b);
    restore_ok(b, &sync, T0);
    assert_int_equal(sluice_engine_restore_task(b, &sync, T0, &err), SLUICE_EEXIST);
    dup = sync;
    dup.id = 99;
    assert_int_equal(sluice_engine_restore_task(b, &dup, T0, &err), SLUICE_EEXIST);
    assert_int_equal(err.existing_id, sync_id);
    dup.state = SLUICE_TASK_DONE; /* a finished task does not hold its key */
    restore_ok(b, &dup, T0);
    held = submit_full(b, "sync", "{\"tenant\":\"z\"}", NULL, "tk", 0, 0, 0, T0);
    assert_int_equal(held, sync_id);
    bad = sync;
    bad.id = 0;
    assert_int_equal(sluice_engine_restore_task(b, &bad, T0, NULL), SLUICE_EINVAL);
    bad = sync;
    bad.id = 100;
    bad.units = 0;
    assert_int_equal(sluice_engine_restore_task(b, &bad, T0, NULL), SLUICE_EINVAL);
    bad.units = 1;
    bad.state = (sluice_task_state)42;
    assert_int_equal(sluice_engine_restore_task(b, &bad, T0, NULL), SLUICE_EINVAL);
    assert_int_equal(sluice_engine_restore_task(b, NULL, T0, NULL), SLUICE_EINVAL);
    /* An occurrence whose series is gone stands alone. */
    bad = old;
    bad.id = 101;
    bad.type = "plain";
    bad.series = "nope";
    restore_ok(b, &bad, T0);
    assert_null(export_of(b, 101).series);
    assert_int_equal(sluice_engine_export_task(b, 7777, &dup), SLUICE_ENOTFOUND);
    sluice_engine_free(a);
    sluice_engine_free(b);
}

/* ---- Series ---------------------------------------------------------------------------------- */

static void test_series_restore(void **unused)
{
    sluice_engine *a = strict_engine(0), *b;
    sluice_recurring_spec spec;
    sluice_recurring_info ri;
    sluice_delivery out[8];
    sluice_engine_stats st;
    int64_t runs, skipped;
    uint64_t occ;
    char msg[256];

    (void)unused;
    policies(a);
    add_series(a, "c", "tick", 0, "*/5 * * * *", "{\"c\":1}", 2, T0);
    add_series(a, "i", "plain", 10 * SEC, NULL, NULL, 0, T0);
    assert_int_equal(sluice_engine_tick(a, T0), SLUICE_OK);
    assert_int_equal(poll_type(a, "tick", T0, 8, out), 1);
    assert_int_equal(sluice_engine_ack(a, out[0].id, -1, T0), SLUICE_OK);
    assert_int_equal(poll_type(a, "tick", T0 + 5 * MIN, 8, out), 1);
    assert_int_equal(sluice_engine_recurring_state(a, "c", &spec, &runs, &skipped), SLUICE_OK);
    assert_string_equal(spec.cron, "*/5 * * * *");
    assert_string_equal(spec.type, "tick");
    assert_int_equal(spec.start_ns, T0);
    assert_int_equal(spec.max_runs, 2);
    assert_int_equal(runs, 2);
    assert_int_equal(skipped, 0);
    occ = 0;
    for (uint64_t id = 1; id <= 4; id++) {
        sluice_task_record r;

        if (sluice_engine_export_task(a, id, &r) == SLUICE_OK && r.series &&
            strcmp(r.series, "i") == 0 && r.submitted_ns == T0)
            occ = id;
    }
    assert_true(occ != 0);

    /* Restored at T0, the very time "i" created its occurrence: once the occurrence is back,
     * the series resumes after it, so T0 does not run twice. */
    b = strict_engine(0);
    policies(b);
    restore_series_from(b, a, "c", T0);
    restore_series_from(b, a, "i", T0);
    assert_int_equal(sluice_engine_recurring_info(b, "i", &ri), SLUICE_OK);
    assert_int_equal(ri.next_ns, T0);
    {
        sluice_task_record r = export_of(a, occ);

        restore_ok(b, &r, T0);
    }
    assert_int_equal(sluice_engine_recurring_info(b, "i", &ri), SLUICE_OK);
    assert_int_equal(ri.next_ns, T0 + 10 * SEC);
    assert_int_equal(sluice_engine_tick(b, T0), SLUICE_OK);
    sluice_engine_get_stats(b, &st);
    assert_int_equal(st.queued, 1);
    assert_int_equal(sluice_engine_tick(b, T0 + 10 * SEC), SLUICE_OK);
    sluice_engine_get_stats(b, &st);
    assert_int_equal(st.queued, 2);

    /* A series restored complete stays complete; its counters and definition are kept. */
    assert_int_equal(sluice_engine_recurring_info(b, "c", &ri), SLUICE_OK);
    assert_int_equal(ri.runs, 2);
    assert_int_equal(ri.next_ns, SLUICE_NEVER);
    assert_int_equal(sluice_engine_recurring_state(b, "c", &spec, &runs, &skipped), SLUICE_OK);
    assert_string_equal(spec.cron, "*/5 * * * *");
    assert_memory_equal(spec.payload, "{\"c\":1}", spec.payload_len);

    /* Errors: a name in use, negative counters, a template whose type is gone. */
    assert_int_equal(sluice_engine_recurring_state(a, "c", &spec, &runs, &skipped), SLUICE_OK);
    assert_int_equal(sluice_engine_restore_recurring(b, &spec, runs, skipped, T0, msg, sizeof msg),
                     SLUICE_EEXIST);
    assert_int_equal(sluice_engine_del_recurring(b, "c", T0 + 10 * SEC), SLUICE_OK);
    assert_int_equal(sluice_engine_restore_recurring(b, &spec, -1, 0, T0, msg, sizeof msg),
                     SLUICE_EINVAL);
    sluice_engine_free(b);
    b = strict_engine(0);
    assert_int_equal(sluice_engine_restore_recurring(b, &spec, runs, skipped, T0, msg, sizeof msg),
                     SLUICE_ENOTFOUND);
    assert_non_null(strstr(msg, "tick"));
    assert_int_equal(sluice_engine_recurring_state(b, "c", &spec, &runs, &skipped),
                     SLUICE_ENOTFOUND);
    assert_int_equal(runs, 0);
    sluice_engine_free(a);
    sluice_engine_free(b);
}

/* ---- Property: the store kept from the reports is the engine ----------------------------------
 */

#define P_IDS 4096

/* A store fed only by the change hook, and the engine it follows. */
typedef struct pworld {
    sluice_engine *e;
    test_rng rng;
    int64_t now;
    changes *c;
    series_changes sc;
    sluice_task_record store[P_IDS];
    int present[P_IDS];
    uint64_t max_id;
} pworld;

static const char *const p_types[] = {"sync", "mail", "job", "plain", "work"};
static const char *const p_task_keys[] = {"ka", "kb", "kc"};

/* Totals over every run, to check the runs exercise what they claim to. */
static struct {
    uint64_t deleted;      /* tasks forgotten: deleted from the store */
    uint64_t by_state[7];  /* restored, by the state they came back in */
    uint64_t lease_passed; /* restored RUNNING with their lease passed */
    uint64_t granted;      /* restored QUEUED holding a grant */
    uint64_t occurrences;  /* restored linked to a series */
    uint64_t denied;       /* restored FAILED by a limit */
    uint64_t parked;       /* PARKED in the engine restored from (QUEUED once restored) */
} p_totals;

/* Writes what the hook reported since the last flush, as a store's loop turn does. */
static void p_flush(pworld *w)
{
    sync_all();
    for (size_t i = 0; i < w->c->n; i++) {
        uint64_t id = w->c->ids[i];
        sluice_task_record r;
        int had;

        assert_true(id < P_IDS);
        if (id > w->max_id)
            w->max_id = id;
        had = w->present[id];
        if (w->present[id])
            rec_clear(&w->store[id]);
        w->present[id] = sluice_engine_export_task(w->e, id, &r) == SLUICE_OK;
        if (w->present[id])
            rec_copy(&w->store[id], &r);
        else if (had)
            p_totals.deleted++;
    }
    w->c->n = 0;
}

static void p_count(const sluice_task_record *stored, const sluice_task_record *restored,
                    int64_t now)
{
    p_totals.by_state[restored->state]++;
    if (stored->state == SLUICE_TASK_RUNNING && stored->lease_until_ns <= now)
        p_totals.lease_passed++;
    if (restored->state == SLUICE_TASK_QUEUED && restored->granted)
        p_totals.granted++;
    if (restored->series)
        p_totals.occurrences++;
    if (restored->fail_limit)
        p_totals.denied++;
}

/* The state as the store needs it: parking is not reported (both come back QUEUED). */
static sluice_task_state durable_state(sluice_task_state s)
{
    return s == SLUICE_TASK_PARKED ? SLUICE_TASK_QUEUED : s;
}

/* Every task the engine keeps is in the store as exported, and nothing else is. */
static void p_check_store(const pworld *w)
{
    for (uint64_t id = 1; id <= w->max_id; id++) {
        sluice_task_record r;
        int found = sluice_engine_export_task(w->e, id, &r) == SLUICE_OK;

        assert_int_equal(found, w->present[id]);
        if (!found)
            continue;
        r.state = durable_state(r.state);
        {
            sluice_task_record s = w->store[id];

            s.state = durable_state(s.state);
            assert_same_record(&s, &r);
        }
    }
}

/* A random kept task in one of the given states (0 ends the list), or 0. */
static uint64_t p_pick(pworld *w, sluice_task_state s1, sluice_task_state s2)
{
    uint64_t start;

    if (!w->max_id)
        return 0;
    start = (uint64_t)rng_range(&w->rng, 1, (int64_t)w->max_id);
    for (uint64_t k = 0; k < w->max_id; k++) {
        uint64_t id = (start + k - 1) % w->max_id + 1;
        sluice_task_info info;

        if (sluice_engine_task_info(w->e, id, &info) == SLUICE_OK &&
            (info.state == s1 || info.state == s2))
            return id;
    }
    return 0;
}

static void p_submit(pworld *w)
{
    const char *type = p_types[rng_range(&w->rng, 0, 4)];
    char payload[64], key[8], task_key[16];
    sluice_task_spec s;
    sluice_submit_error err;
    uint64_t id;
    int rc;

    memset(&s, 0, sizeof s);
    s.type = type;
    if (strcmp(type, "sync") == 0)
        snprintf(payload, sizeof payload, "{\"tenant\":\"t%d\"}", (int)rng_range(&w->rng, 0, 2));
    else
        snprintf(payload, sizeof payload, "{\"n\":%d}", (int)rng_range(&w->rng, 0, 999));
    if (rng_range(&w->rng, 0, 5) != 0 || strcmp(type, "sync") == 0) {
        s.payload = payload;
        s.payload_len = strlen(payload);
    }
    if (strcmp(type, "mail") == 0 || rng_range(&w->rng, 0, 5) == 0) {
        snprintf(key, sizeof key, "w%d", (int)rng_range(&w->rng, 0, 2));
        s.key = key;
        s.key_len = strlen(key);
    }
    if (rng_range(&w->rng, 0, 4) == 0) {
        /* Per type: a replacement keeps the holder's type, so another type's payload could
         * leave it with one its own limits cannot resolve (a restore would refuse it). */
        snprintf(task_key, sizeof task_key, "%s-%s", type, p_task_keys[rng_range(&w->rng, 0, 2)]);
        s.task_key = task_key;
        s.task_key_len = strlen(task_key);
    }
    if (strcmp(type, "plain") == 0)
        s.units = rng_range(&w->rng, 1, 3);
    s.has_priority = 1;
    s.priority = (int)rng_range(&w->rng, -1, 2);
    if (rng_range(&w->rng, 0, 5) == 0)
        s.not_before_ns = w->now + rng_range(&w->rng, 1, 60) * SEC;
    rc = sluice_engine_submit(w->e, &s, w->now, &id, &err);
    assert_true(rc == SLUICE_OK || rc == SLUICE_EEXIST);
}

static void p_step(pworld *w)
{
    int64_t r = rng_range(&w->rng, 0, 99);
    sluice_delivery out[4];
    uint64_t id;

    if (r < 30) {
        p_submit(w);
    } else if (r < 52) {
        const char *type = p_types[rng_range(&w->rng, 0, 4)];
        size_t ntypes = (size_t)rng_range(&w->rng, 0, 1);

        assert_true(sluice_engine_poll(w->e, &type, ntypes, 4, w->now, out) >= 0);
    } else if (r < 64) {
        if ((id = p_pick(w, SLUICE_TASK_RUNNING, 0)) != 0)
            assert_int_equal(sluice_engine_ack(w->e, id, -1, w->now), SLUICE_OK);
    } else if (r < 72) {
        if ((id = p_pick(w, SLUICE_TASK_RUNNING, 0)) != 0)
            assert_int_equal(sluice_engine_fail(w->e, id,
                                                rng_range(&w->rng, 0, 9) == 0
                                                    ? SLUICE_FAIL_MODE_DEAD
                                                    : SLUICE_FAIL_MODE_RETRY,
                                                "x", w->now),
                             SLUICE_OK);
    } else if (r < 76) {
        if ((id = p_pick(w, SLUICE_TASK_QUEUED, SLUICE_TASK_PARKED)) != 0)
            assert_int_equal(sluice_engine_cancel(w->e, id, w->now), SLUICE_OK);
    } else if (r < 80) {
        if ((id = p_pick(w, SLUICE_TASK_RUNNING, 0)) != 0)
            assert_int_equal(sluice_engine_touch(w->e, id, w->now, NULL), SLUICE_OK);
    } else if (r < 82) {
        const char *name = rng_range(&w->rng, 0, 1) ? "sa" : "sb";

        if (rng_range(&w->rng, 0, 2) == 0)
            sluice_engine_del_recurring(w->e, name, w->now);
        else
            add_series(w->e, name, rng_range(&w->rng, 0, 1) ? "plain" : "work",
                       rng_range(&w->rng, 3, 20) * SEC, NULL, NULL, rng_range(&w->rng, 0, 4),
                       w->now);
    } else {
        w->now += rng_range(&w->rng, 0, 20000) * MS;
        assert_int_equal(sluice_engine_tick(w->e, w->now), SLUICE_OK);
    }
}

/* Counts agree with each other: every unfinished task is counted in one state. */
static void check_counts(const sluice_engine *e)
{
    sluice_engine_stats st;

    sluice_engine_get_stats(e, &st);
    assert_int_equal(st.queued + st.parked + st.running + st.delayed,
                     st.submitted - st.done - st.failed - st.cancelled);
}

static void run_persist_property(uint64_t seed, int steps)
{
    pworld *w = calloc(1, sizeof *w);
    const int64_t gap = 30 * SEC;
    sluice_engine *b;
    changes *cb = calloc(1, sizeof *cb);
    size_t kept = 0;

    assert_non_null(w);
    assert_non_null(cb);
    w->c = calloc(1, sizeof *w->c);
    assert_non_null(w->c);
    rng_seed(&w->rng, seed);
    w->now = T0;
    w->e = strict_engine(40);
    policies(w->e);
    watch(w->e, w->c, &w->sc);
    for (int i = 0; i < steps; i++) {
        p_step(w);
        p_flush(w);
        sync_all();
        w->sc.n = 0;
        if (i % 8 == 0)
            p_check_store(w);
    }
    p_check_store(w);

    /* Restore the store into a fresh engine, a while later: series first, then tasks by id. */
    b = strict_engine(40);
    policies(b);
    watch(b, cb, NULL);
    {
        static const char *const names[] = {"sa", "sb"};
        sluice_recurring_spec spec;

        for (size_t i = 0; i < 2; i++)
            if (sluice_engine_recurring_state(w->e, names[i], &spec, NULL, NULL) == SLUICE_OK)
                restore_series_from(b, w->e, names[i], w->now + gap);
    }
    for (uint64_t id = 1; id <= w->max_id; id++)
        if (w->present[id]) {
            restore_ok(b, &w->store[id], w->now + gap);
            kept++;
        }
    sync_all();
    assert_int_equal(cb->n, 0);
    check_counts(b);
    /* The same set of (id, state after the mapping, payload), and nothing else. */
    for (uint64_t id = 1; id <= w->max_id + 1; id++) {
        sluice_task_record r;
        int found = sluice_engine_export_task(b, id, &r) == SLUICE_OK;

        assert_int_equal(found, id <= w->max_id && w->present[id]);
        if (!found)
            continue;
        assert_int_equal(r.state, mapped_state(&w->store[id], w->now + gap));
        assert_true(
            bytes_eq(r.payload, r.payload_len, w->store[id].payload, w->store[id].payload_len));
        assert_same_content(&w->store[id], &r);
        p_count(&w->store[id], &r, w->now + gap);
        if (export_of(w->e, id).state == SLUICE_TASK_PARKED)
            p_totals.parked++;
    }
    /* The restored engine works on: workers drain it until nothing is left unfinished. */
    watch(b, NULL, NULL);
    {
        int64_t now = w->now + gap;
        sluice_engine_stats st;
        int round;

        for (round = 0; round < 100000; round++) {
            sluice_delivery out[8];
            int64_t next;
            int n;

            assert_int_equal(sluice_engine_tick(b, now), SLUICE_OK);
            n = sluice_engine_poll(b, NULL, 0, 8, now, out);
            assert_true(n >= 0);
            for (int i = 0; i < n; i++)
                assert_int_equal(sluice_engine_ack(b, out[i].id, -1, now), SLUICE_OK);
            sluice_engine_get_stats(b, &st);
            if (st.queued + st.parked + st.running + st.delayed == 0)
                break;
            next = sluice_engine_next_wake(b);
            if (n == 0)
                now = next > now && next != SLUICE_NEVER ? next : now + SEC;
        }
        assert_true(round < 100000);
        check_counts(b);
    }
    assert_true(kept > 0);
    for (uint64_t id = 1; id <= w->max_id; id++)
        if (w->present[id])
            rec_clear(&w->store[id]);
    unwatch_all();
    sluice_engine_free(b);
    sluice_engine_free(w->e);
    free(cb);
    free(w->c);
    free(w);
}

static void test_property_store_follows_engine(void **unused)
{
    (void)unused;
    for (uint64_t seed = 1; seed <= 30; seed++)
        run_persist_property(seed * 0x9e3779b97f4a7c15u, 1200);
    printf("persist property: restored %llu queued (%llu holding a grant, %llu of them after a "
           "lease passed), %llu running, %llu done, %llu failed (%llu by a limit), %llu "
           "cancelled, %llu occurrences, %llu parked before; %llu deleted\n",
           (unsigned long long)p_totals.by_state[SLUICE_TASK_QUEUED],
           (unsigned long long)p_totals.granted, (unsigned long long)p_totals.lease_passed,
           (unsigned long long)p_totals.by_state[SLUICE_TASK_RUNNING],
           (unsigned long long)p_totals.by_state[SLUICE_TASK_DONE],
           (unsigned long long)p_totals.by_state[SLUICE_TASK_FAILED],
           (unsigned long long)p_totals.denied,
           (unsigned long long)p_totals.by_state[SLUICE_TASK_CANCELLED],
           (unsigned long long)p_totals.occurrences, (unsigned long long)p_totals.parked,
           (unsigned long long)p_totals.deleted);
    for (int st = SLUICE_TASK_QUEUED; st <= SLUICE_TASK_CANCELLED; st++)
        if (st != SLUICE_TASK_PARKED)
            assert_true(p_totals.by_state[st] > 0);
    assert_true(p_totals.granted > 0);
    assert_true(p_totals.lease_passed > 0);
    assert_true(p_totals.occurrences > 0);
    assert_true(p_totals.denied > 0);
    assert_true(p_totals.deleted > 0);
    assert_true(p_totals.parked > 0);
}

/* ---- Out of memory --------------------------------------------------------------------------- */

typedef struct oom_src {
    const sluice_engine *a;
    sluice_task_record recs[16];
    size_t n;
} oom_src;

static int oom_restore(void *arg)
{
    const oom_src *src = arg;
    sluice_engine_policy pol;
    sluice_engine *b = NULL;
    sluice_recurring_spec spec;
    int64_t runs, skipped;
    char msg[256];
    int rc;

    sluice_engine_policy_init(&pol);
    pol.strict_types = 1;
    rc = sluice_engine_new(&pol, &b);
    if (rc != SLUICE_OK)
        return rc;
    rc = policies_rc(b);
    if (rc == SLUICE_OK) {
        assert_int_equal(sluice_engine_recurring_state(src->a, "s", &spec, &runs, &skipped),
                         SLUICE_OK);
        rc = sluice_engine_restore_recurring(b, &spec, runs, skipped, T0 + MIN, msg, sizeof msg);
    }
    for (size_t i = 0; i < src->n && rc == SLUICE_OK; i++) {
        rc = sluice_engine_restore_task(b, &src->recs[i], T0 + MIN, NULL);
        check_counts(b);
        /* All or nothing: a failed restore leaves no trace of the task. */
        if (rc != SLUICE_OK) {
            sluice_task_record r;

            assert_int_equal(sluice_engine_export_task(b, src->recs[i].id, &r), SLUICE_ENOTFOUND);
        }
    }
    sluice_engine_free(b);
    return rc;
}

static void test_oom_restore(void **unused)
{
    sluice_engine *a = strict_engine(0);
    sluice_delivery out[8];
    oom_src src;
    long n;

    (void)unused;
    memset(&src, 0, sizeof src);
    policies(a);
    submit_full(a, "sync", "{\"tenant\":\"a-rather-long-tenant-name-that-needs-its-own-block\"}",
                NULL, NULL, 0, 0, 0, T0);
    submit_full(a, "sync", "{\"tenant\":\"a-rather-long-tenant-name-that-needs-its-own-block\"}",
                NULL, "tk", 0, 0, 0, T0);
    submit_full(a, "job", NULL, NULL, NULL, 0, 0, 0, T0);
    submit_full(a, "mail", NULL, "w", NULL, 0, 0, 0, T0);
    submit_full(a, "mail", NULL, "w", NULL, 0, 0, 0, T0);
    submit_full(a, "plain", "{\"v\":1}", "k", "tk2", 2, 1, T0 + HOUR, T0);
    add_series(a, "s", "plain", MIN, NULL, NULL, 0, T0);
    assert_int_equal(sluice_engine_tick(a, T0), SLUICE_OK);
    assert_int_equal(sluice_engine_poll(a, NULL, 0, 8, T0, out), 4); /* sync, job, mail, s */
    assert_int_equal(sluice_engine_fail(a, out[3].id, SLUICE_FAIL_MODE_DEAD, "dead", T0),
                     SLUICE_OK);
    for (uint64_t id = 1; id <= 7; id++) {
        sluice_task_record r = export_of(a, id);

        rec_copy(&src.recs[src.n++], &r);
    }
    src.a = a;
    n = oom_sweep(oom_restore, &src, 100000);
    printf("oom restore: %ld allocation points\n", n);
    assert_true(n > 10);
    for (size_t i = 0; i < src.n; i++)
        rec_clear(&src.recs[i]);
    sluice_engine_free(a);
}

/* ---- Registration ---------------------------------------------------------------------------- */

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_feed_kinds),
        cmocka_unit_test(test_restore_errors),
        cmocka_unit_test(test_series_restore),
        cmocka_unit_test(test_property_store_follows_engine),
        cmocka_unit_test(test_oom_restore),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
