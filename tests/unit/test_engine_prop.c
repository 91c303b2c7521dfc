/* SPDX-License-Identifier: MIT */
/*
 * Property and out-of-memory tests of the engine.
 *
 * The property test drives an engine with random limits (rate, fixed window, sliding window,
 * concurrency; global or keyed; wait or reject) through random submits, polls, acks, fails,
 * cancels, lost workers and time steps, against a small model of each task's coarse state. It
 * checks after every step that every task is in exactly one state and the engine's counts agree
 * with the model; it logs every charged grant and checks that no limit was exceeded in any
 * window (GCRA: at most burst + elapsed / T units in any interval; fixed: at most limit per
 * aligned window; sliding: at most limit in any period; concurrency: at most limit held); and
 * it finally keeps workers polling and acking until every task ended in a terminal state.
 * It runs once with every type in FIFO order and exactly-once grants, and once with fair
 * dispatch between keys for every type that has a keyed limit and charge_redelivery for every
 * other type (a lost lease then pays again): neither may skip a limit or lose a task.
 *
 * The out-of-memory sweep fails allocation N (and every later one) for N = 1, 2, ... over a
 * whole submit / poll / park / ack / fail / cancel / tick / recurring cycle until the cycle
 * runs without a failure: each failure must be SLUICE_ENOMEM, leave consistent counts, and
 * leak nothing; once more with fair dispatch and charge_redelivery, ending with a change back to
 * FIFO that re-files the ready tasks.
 */
#include "engine_fixture.h"

#include "testutil.h"

#define MAX_TASKS 4000
#define NKEYS     3
#define NLIMITS   4
#define MAX_LOG   20000

enum { M_PENDING = 1, M_RUNNING, M_DONE, M_FAILED, M_CANCELLED };

typedef struct mtask {
    uint64_t id;
    int state;
    int type;
    int key;
    int64_t units;
    int attempt;
    int hold;       /* lost its lease: the next delivery redeems the grant */
    int free_retry; /* a retry under throttle_retries 0 */
    int64_t lease_until;
} mtask;

typedef struct grant {
    int64_t at;
    int64_t units;
} grant;

typedef struct world {
    sluice_engine *e;
    test_rng rng;
    int64_t now;
    /* limits: 0 rate, 1 window, 2 sliding, 3 concurrency */
    sluice_limit_def defs[NLIMITS];
    int keyed[NLIMITS];
    /* types: which limits each names, and its settings */
    int type_limits[5][NLIMITS];
    int throttle[5];
    int64_t lease[5];
    mtask tasks[MAX_TASKS];
    size_t ntasks;
    grant *log[NLIMITS][NKEYS];
    size_t nlog[NLIMITS][NKEYS];
    int64_t held[NKEYS]; /* concurrency units held per key (or [0] when global) */
    int charge[5];       /* the type has charge_redelivery */
} world;

/* 1: types get fairness keys (when they have a keyed limit) or charge_redelivery. */
static int prop_fair;

static const char *limit_names[NLIMITS] = {"rate", "win", "slide", "conc"};
static const char *type_names[5] = {"t0", "t1", "t2", "t3", "t4"};
static const char *key_payloads[NKEYS] = {"{\"k\":\"a\"}", "{\"k\":\"b\"}", "{\"k\":\"c\"}"};

static int key_slot(const world *w, int lim, int key)
{
    return w->keyed[lim] ? key : 0;
}

static void setup(world *w, uint64_t seed)
{
    static const int64_t periods[] = {SEC, 2 * SEC, 5 * SEC};
    sluice_engine_policy pol;

    memset(w, 0, sizeof *w);
    rng_seed(&w->rng, seed);
    w->now = T0;
    sluice_engine_policy_init(&pol);
    pol.max_finished = MAX_TASKS;
    w->e = fx_engine(&pol);
    for (int l = 0; l < NLIMITS; l++) {
        static const sluice_limit_kind kinds[] = {SLUICE_RATE, SLUICE_WINDOW, SLUICE_SLIDING,
                                                  SLUICE_CONCURRENCY};
        sluice_limit_policy p;

        fx_limit(&p, limit_names[l], kinds[l], rng_range(&w->rng, 1, 4),
                 kinds[l] == SLUICE_CONCURRENCY ? 0 : periods[rng_range(&w->rng, 0, 2)]);
        if (kinds[l] == SLUICE_RATE) {
            p.def.burst = rng_range(&w->rng, 1, p.def.limit);
            p.def.start_empty = (int)rng_range(&w->rng, 0, 1);
        }
        w->keyed[l] = (int)rng_range(&w->rng, 0, 1);
        if (w->keyed[l]) {
            p.key_source = SLUICE_KEY_PATH;
            p.key_path = "k";
        }
        if (l == 1 && rng_range(&w->rng, 0, 3) == 0)
            p.overflow = SLUICE_OVERFLOW_REJECT;
        fx_set_limit(w->e, &p);
        w->defs[l] = p.def;
        if (w->defs[l].kind == SLUICE_RATE && w->defs[l].burst == 0)
            w->defs[l].burst = w->defs[l].limit;
    }
    {
        static const int chains[5][NLIMITS] = {
            {1, 0, 0, 0}, {0, 1, 0, 1}, {0, 0, 1, 0}, {1, 0, 0, 1}, {0, 0, 0, 0}};

        for (int t = 0; t < 5; t++) {
            const char *names[NLIMITS + 1];
            size_t n = 0;

            for (int l = 0; l < NLIMITS; l++) {
                w->type_limits[t][l] = chains[t][l];
                if (chains[t][l])
                    names[n++] = limit_names[l];
            }
            names[n] = NULL;
            w->throttle[t] = (int)rng_range(&w->rng, 0, 1);
            w->lease[t] = rng_range(&w->rng, 2, 5) * SEC;
            {
                sluice_type_policy tp;
                char msg[256];

                sluice_type_policy_init(&tp);
                tp.name = (char *)type_names[t];
                tp.limits = (char **)names;
                tp.nlimits = n;
                tp.lease_ns = w->lease[t];
                tp.retry.max_attempts = 3;
                tp.retry.backoff = SLUICE_BACKOFF_FIXED;
                tp.retry.base_ns = 500 * MS;
                tp.retry.throttle_retries = w->throttle[t];
                if (prop_fair) {
                    for (int l = 0; l < NLIMITS; l++)
                        if (chains[t][l] && w->keyed[l])
                            tp.fairness = SLUICE_FAIR_KEYS;
                    w->charge[t] = t % 2;
                    tp.charge_redelivery = w->charge[t];
                }
                assert_int_equal(sluice_engine_set_type(w->e, &tp, w->now, msg, sizeof msg),
                                 SLUICE_OK);
            }
        }
    }
}

static void teardown(world *w)
{
    for (int l = 0; l < NLIMITS; l++)
        for (int k = 0; k < NKEYS; k++)
            free(w->log[l][k]);
    sluice_engine_free(w->e);
}

static mtask *find(world *w, uint64_t id)
{
    for (size_t i = 0; i < w->ntasks; i++)
        if (w->tasks[i].id == id)
            return &w->tasks[i];
    fail_msg("unknown id %llu", (unsigned long long)id);
    return NULL;
}

static void log_grant(world *w, int lim, int key, int64_t units)
{
    int k = key_slot(w, lim, key);

    if (w->nlog[lim][k] % 256 == 0) {
        w->log[lim][k] = realloc(w->log[lim][k], (w->nlog[lim][k] + 256) * sizeof(grant));
        assert_non_null(w->log[lim][k]);
    }
    w->log[lim][k][w->nlog[lim][k]++] = (grant){w->now, units};
}

static void on_delivery(world *w, const sluice_delivery *d)
{
    mtask *m = find(w, d->id);
    int charged = !m->hold && !m->free_retry;

    assert_int_equal(m->state, M_PENDING);
    m->state = M_RUNNING;
    m->attempt++;
    assert_int_equal(d->attempt, m->attempt);
    m->lease_until = w->now + w->lease[m->type];
    assert_int_equal(d->lease_until_ns, m->lease_until);
    m->hold = m->free_retry = 0;
    for (int l = 0; l < NLIMITS; l++) {
        if (!w->type_limits[m->type][l])
            continue;
        if (l == 3) {
            int k = key_slot(w, l, m->key);

            w->held[k] += m->units;
            assert_true(w->held[k] <= w->defs[l].limit);
        } else if (charged) {
            log_grant(w, l, m->key, m->units);
        }
    }
}

static void release(world *w, mtask *m)
{
    if (w->type_limits[m->type][3])
        w->held[key_slot(w, 3, m->key)] -= m->units;
}

/* Applies the lease expiries a tick at w->now performs. */
static void model_tick(world *w)
{
    for (size_t i = 0; i < w->ntasks; i++) {
        mtask *m = &w->tasks[i];

        if (m->state == M_RUNNING && m->lease_until <= w->now) {
            release(w, m);
            m->state = M_PENDING;
            m->hold = !w->charge[m->type];
        }
    }
    assert_int_equal(sluice_engine_tick(w->e, w->now), SLUICE_OK);
}

/* Pending tasks the gate failed (reject, never, horizon) are found with task_info. */
static void sync_failures(world *w)
{
    for (size_t i = 0; i < w->ntasks; i++) {
        mtask *m = &w->tasks[i];
        sluice_task_info info;

        if (m->state != M_PENDING)
            continue;
        assert_int_equal(sluice_engine_task_info(w->e, m->id, &info), SLUICE_OK);
        if (info.state == SLUICE_TASK_FAILED) {
            assert_non_null(info.failure.limit);
            assert_true(info.failure.reason == SLUICE_FAIL_RATELIMITED ||
                        info.failure.reason == SLUICE_FAIL_NEVER ||
                        info.failure.reason == SLUICE_FAIL_HORIZON);
            m->state = M_FAILED;
        } else {
            assert_true(info.state == SLUICE_TASK_QUEUED || info.state == SLUICE_TASK_PARKED);
        }
    }
}

/* Every task is in exactly the state the model says, and the counts agree. */
static void check_states(world *w)
{
    size_t pending = 0, running = 0, done = 0, failed = 0, cancelled = 0;
    sluice_engine_stats st;

    for (size_t i = 0; i < w->ntasks; i++) {
        const mtask *m = &w->tasks[i];
        sluice_task_info info;

        assert_int_equal(sluice_engine_task_info(w->e, m->id, &info), SLUICE_OK);
        switch (m->state) {
        case M_PENDING:
            assert_true(info.state == SLUICE_TASK_QUEUED || info.state == SLUICE_TASK_PARKED);
            pending++;
            break;
        case M_RUNNING:
            assert_int_equal(info.state, SLUICE_TASK_RUNNING);
            assert_int_equal(info.lease_until_ns, m->lease_until);
            running++;
            break;
        case M_DONE:
            assert_int_equal(info.state, SLUICE_TASK_DONE);
            done++;
            break;
        case M_FAILED:
            assert_int_equal(info.state, SLUICE_TASK_FAILED);
            failed++;
            break;
        default:
            assert_int_equal(info.state, SLUICE_TASK_CANCELLED);
            cancelled++;
            break;
        }
    }
    sluice_engine_get_stats(w->e, &st);
    assert_int_equal(st.queued + st.parked + st.delayed, pending);
    assert_int_equal(st.running, running);
    assert_int_equal(st.done, done);
    assert_int_equal(st.failed, failed);
    assert_int_equal(st.cancelled, cancelled);
    assert_int_equal(st.submitted, w->ntasks);
}

/* No limit exceeded in any window, by the grant log. */
static void check_limits(const world *w)
{
    for (int l = 0; l < 3; l++) {
        const sluice_limit_def *d = &w->defs[l];

        for (int k = 0; k < NKEYS; k++) {
            const grant *g = w->log[l][k];
            size_t n = w->nlog[l][k];

            for (size_t i = 0; i < n; i++) {
                int64_t sum = 0;

                for (size_t j = i; j < n; j++) {
                    sum += g[j].units;
                    if (l == 0) {
                        /* burst + elapsed / T, with T = period / limit exactly */
                        int64_t allow = d->burst + (g[j].at - g[i].at) * d->limit / d->period_ns;

                        if (sum > allow)
                            fail_msg("rate exceeded: %lld units in %lld ns (burst %lld)",
                                     (long long)sum, (long long)(g[j].at - g[i].at),
                                     (long long)d->burst);
                    } else if (l == 1) {
                        if (g[j].at / d->period_ns != g[i].at / d->period_ns)
                            break;
                        assert_true(sum <= d->limit);
                    } else {
                        if (g[j].at - g[i].at >= d->period_ns)
                            break;
                        assert_true(sum <= d->limit);
                    }
                }
            }
        }
    }
}

static void op_submit(world *w)
{
    sluice_task_spec s;
    sluice_submit_error err;
    mtask *m;
    uint64_t id;
    int rc;

    if (w->ntasks == MAX_TASKS)
        return;
    m = &w->tasks[w->ntasks];
    memset(m, 0, sizeof *m);
    m->type = (int)rng_range(&w->rng, 0, 4);
    m->key = (int)rng_range(&w->rng, 0, NKEYS - 1);
    /* One task in ten costs two units, also on start_empty limits, whose new keys must let a
     * multi-unit task through once enough budget has accumulated. */
    m->units = rng_range(&w->rng, 0, 9) == 0 ? 2 : 1;
    memset(&s, 0, sizeof s);
    s.type = type_names[m->type];
    s.payload = key_payloads[m->key];
    s.payload_len = strlen(s.payload);
    s.units = m->units;
    s.has_priority = 1;
    s.priority = (int)rng_range(&w->rng, 0, 2);
    rc = sluice_engine_submit(w->e, &s, w->now, &id, &err);
    assert_int_equal(rc, SLUICE_OK);
    m->id = id;
    m->state = M_PENDING;
    w->ntasks++;
}

static void op_poll(world *w)
{
    sluice_delivery out[8];
    const char *types[2];
    size_t ntypes = 0;
    int n;

    if (rng_range(&w->rng, 0, 2) == 0) {
        types[ntypes++] = type_names[rng_range(&w->rng, 0, 4)];
        types[ntypes++] = type_names[rng_range(&w->rng, 0, 4)];
    }
    n = sluice_engine_poll(w->e, types, ntypes, (size_t)rng_range(&w->rng, 1, 8), w->now, out);
    assert_true(n >= 0);
    for (int i = 0; i < n; i++)
        on_delivery(w, &out[i]);
    sync_failures(w);
}

static mtask *pick(world *w, int state)
{
    size_t start, i;

    if (!w->ntasks)
        return NULL;
    start = (size_t)rng_range(&w->rng, 0, (int64_t)w->ntasks - 1);
    for (i = 0; i < w->ntasks; i++) {
        mtask *m = &w->tasks[(start + i) % w->ntasks];

        if (m->state == state)
            return m;
    }
    return NULL;
}

static void finish_running(world *w, mtask *m, int fail, int dead)
{
    if (!fail) {
        assert_int_equal(sluice_engine_ack(w->e, m->id, -1, w->now), SLUICE_OK);
        release(w, m);
        m->state = M_DONE;
        return;
    }
    assert_int_equal(sluice_engine_fail(w->e, m->id,
                                        dead ? SLUICE_FAIL_MODE_DEAD : SLUICE_FAIL_MODE_RETRY, "x",
                                        w->now),
                     SLUICE_OK);
    release(w, m);
    if (dead || m->attempt >= 3) {
        m->state = M_FAILED;
    } else {
        m->state = M_PENDING;
        m->free_retry = !w->throttle[m->type];
    }
}

static void op_step(world *w)
{
    int64_t r = rng_range(&w->rng, 0, 99);
    mtask *m;

    if (r < 30) {
        op_submit(w);
    } else if (r < 55) {
        op_poll(w);
    } else if (r < 70) {
        if ((m = pick(w, M_RUNNING)) != NULL)
            finish_running(w, m, 0, 0);
    } else if (r < 77) {
        if ((m = pick(w, M_RUNNING)) != NULL)
            finish_running(w, m, 1, rng_range(&w->rng, 0, 9) == 0);
    } else if (r < 82) {
        if ((m = pick(w, M_PENDING)) != NULL) {
            assert_int_equal(sluice_engine_cancel(w->e, m->id, w->now), SLUICE_OK);
            m->state = M_CANCELLED;
        }
        if ((m = pick(w, M_RUNNING)) != NULL)
            assert_int_equal(sluice_engine_cancel(w->e, m->id, w->now), SLUICE_ESTATE);
    } else {
        /* Time passes; workers that did not ack lose their leases. */
        w->now += rng_range(&w->rng, 0, 700) * MS;
        model_tick(w);
    }
}

/* Totals over every run, to check the runs exercise what they claim to. */
static uint64_t total_parked_peak, total_rejected, total_redelivered, total_grants;

static void run_property(uint64_t seed, int steps)
{
    world *w = calloc(1, sizeof *w);

    assert_non_null(w);
    setup(w, seed);
    for (int i = 0; i < steps; i++) {
        op_step(w);
        if (i % 16 == 0)
            check_states(w);
    }
    check_states(w);
    check_limits(w);
    /* Drain: workers keep polling and acking; every task must end. */
    for (int round = 0; round < 200000; round++) {
        int left = 0;

        for (size_t i = 0; i < w->ntasks; i++)
            if (w->tasks[i].state == M_PENDING || w->tasks[i].state == M_RUNNING)
                left++;
        if (!left)
            break;
        model_tick(w);
        for (;;) {
            sluice_delivery out[8];
            int n = sluice_engine_poll(w->e, NULL, 0, 8, w->now, out);

            assert_true(n >= 0);
            for (int i = 0; i < n; i++)
                on_delivery(w, &out[i]);
            for (int i = 0; i < n; i++)
                finish_running(w, find(w, out[i].id), 0, 0);
            if (n == 0)
                break;
        }
        sync_failures(w);
        {
            int64_t next = sluice_engine_next_wake(w->e);

            w->now = next > w->now && next != SLUICE_NEVER ? next : w->now + 100 * MS;
        }
    }
    check_states(w);
    check_limits(w);
    {
        sluice_engine_stats st;

        sluice_engine_get_stats(w->e, &st);
        total_parked_peak += st.parked_peak;
        total_rejected += st.rejected;
        total_redelivered += st.redelivered;
        for (int l = 0; l < NLIMITS; l++)
            for (int k = 0; k < NKEYS; k++)
                total_grants += w->nlog[l][k];
    }
    for (size_t i = 0; i < w->ntasks; i++) {
        if (w->tasks[i].state < M_DONE) {
            sluice_explanation x;

            sluice_engine_explain(w->e, w->tasks[i].id, w->now, &x);
            fail_msg("seed %llu: task %llu never ended: %s", (unsigned long long)seed,
                     (unsigned long long)w->tasks[i].id, x.text);
        }
    }
    teardown(w);
    free(w);
}

static void test_property_random(void **unused)
{
    (void)unused;
    for (uint64_t seed = 1; seed <= 40; seed++)
        run_property(seed * 0x9e3779b97f4a7c15u, 1500);
    printf("property: %llu grants logged, parked peaks %llu, %llu rejected, %llu redelivered\n",
           (unsigned long long)total_grants, (unsigned long long)total_parked_peak,
           (unsigned long long)total_rejected, (unsigned long long)total_redelivered);
    assert_true(total_grants > 1000);
    assert_true(total_parked_peak > 100);
    assert_true(total_rejected > 0);
    assert_true(total_redelivered > 0);
}

/* The same with fair dispatch and charge_redelivery. */
static void test_property_fair(void **unused)
{
    (void)unused;
    total_grants = total_parked_peak = total_rejected = total_redelivered = 0;
    prop_fair = 1;
    for (uint64_t seed = 1; seed <= 40; seed++)
        run_property(seed * 0x9e3779b97f4a7c15u, 1500);
    prop_fair = 0;
    printf("fair: %llu grants logged, parked peaks %llu, %llu rejected, %llu redelivered\n",
           (unsigned long long)total_grants, (unsigned long long)total_parked_peak,
           (unsigned long long)total_rejected, (unsigned long long)total_redelivered);
    assert_true(total_grants > 1000);
    assert_true(total_redelivered > 0);
}

/* ---- Out of memory --------------------------------------------------------------------------- */

/* Counts agree with each other: every unfinished task is counted in one state. */
static void check_counts(const sluice_engine *e)
{
    sluice_engine_stats st;

    sluice_engine_get_stats(e, &st);
    assert_int_equal(st.queued + st.parked + st.running + st.delayed,
                     st.submitted - st.done - st.failed - st.cancelled);
}

#define TRY(call)                                                                                  \
    do {                                                                                           \
        rc = (call);                                                                               \
        if (rc < 0) {                                                                              \
            assert_int_equal(rc, SLUICE_ENOMEM);                                                   \
            goto out;                                                                              \
        }                                                                                          \
        rc = SLUICE_OK;                                                                            \
    } while (0)

/* 1: the cycle's type has fairness keys and charge_redelivery, and goes back to FIFO. */
static int oom_fair;

static int oom_cycle(void)
{
    const char *lims[] = {"rate", "conc", NULL};
    sluice_engine *e = NULL;
    sluice_limit_policy p;
    sluice_type_policy t;
    sluice_recurring_spec r;
    sluice_task_spec s;
    sluice_delivery out[8];
    sluice_explanation x;
    char msg[256];
    uint64_t id[6];
    int rc = SLUICE_OK;

    TRY(sluice_engine_new(NULL, &e));
    fx_limit(&p, "rate", SLUICE_RATE, 2, MIN);
    p.key_source = SLUICE_KEY_PATH;
    p.key_path = "tenant";
    TRY(sluice_engine_set_limit(e, &p, T0, msg, sizeof msg));
    fx_limit(&p, "conc", SLUICE_CONCURRENCY, 1, 0);
    TRY(sluice_engine_set_limit(e, &p, T0, msg, sizeof msg));
    sluice_type_policy_init(&t);
    t.name = "job";
    t.limits = (char **)lims;
    t.nlimits = 2;
    t.fairness = oom_fair ? SLUICE_FAIR_KEYS : SLUICE_FAIR_FIFO;
    t.charge_redelivery = oom_fair;
    TRY(sluice_engine_set_type(e, &t, T0, msg, sizeof msg));
    memset(&s, 0, sizeof s);
    s.type = "job";
    s.payload = "{\"tenant\":\"a-rather-long-tenant-name-that-needs-its-own-allocation\"}";
    s.payload_len = strlen(s.payload);
    for (int i = 0; i < 4; i++) {
        TRY(sluice_engine_submit(e, &s, T0, &id[i], NULL));
        check_counts(e);
    }
    s.task_key = "tk";
    s.task_key_len = 2;
    TRY(sluice_engine_submit(e, &s, T0, &id[4], NULL));
    TRY(sluice_engine_submit(e, &s, T0, &id[5], NULL)); /* replaces the payload */
    s.type = "untyped";
    s.task_key = NULL;
    s.task_key_len = 0;
    TRY(sluice_engine_submit(e, &s, T0, &id[5], NULL));
    TRY(sluice_engine_poll(e, NULL, 0, 8, T0, out));
    check_counts(e);
    TRY(sluice_engine_explain(e, id[1], T0, &x));
    TRY(sluice_engine_ack(e, id[0], 3, T0 + SEC));
    TRY(sluice_engine_cancel(e, id[2], T0 + SEC));
    TRY(sluice_engine_tick(e, T0 + SEC));
    rc = sluice_engine_poll(e, NULL, 0, 8, T0 + SEC, out);
    TRY(rc);
    check_counts(e);
    if (rc > 0)
        TRY(sluice_engine_fail(e, out[0].id, SLUICE_FAIL_MODE_RETRY, "retry me", T0 + 2 * SEC));
    memset(&r, 0, sizeof r);
    r.name = "every-minute";
    r.type = "untyped";
    r.cron = "* * * * *";
    TRY(sluice_engine_add_recurring(e, &r, T0, msg, sizeof msg));
    TRY(sluice_engine_tick(e, T0 + 2 * MIN));
    TRY(sluice_engine_poll(e, NULL, 0, 8, T0 + 2 * MIN, out));
    check_counts(e);
    TRY(sluice_engine_del_recurring(e, "every-minute", T0 + 2 * MIN));
    fx_limit(&p, "rate", SLUICE_RATE, 5, MIN);
    TRY(sluice_engine_set_limit(e, &p, T0 + 2 * MIN, msg, sizeof msg));
    TRY(sluice_engine_tick(e, T0 + 3 * MIN));
    if (oom_fair) {
        t.fairness = SLUICE_FAIR_FIFO;
        TRY(sluice_engine_set_type(e, &t, T0 + 3 * MIN, msg, sizeof msg));
        TRY(sluice_engine_poll(e, NULL, 0, 8, T0 + 3 * MIN, out));
        check_counts(e);
    }
out:
    if (e)
        check_counts(e);
    sluice_engine_free(e);
    return rc;
}

static void oom_sweep_cycle(void)
{
    long n;

    for (n = 1; n < 100000; n++) {
        long allocations;
        int rc;

        oom_install(n);
        rc = oom_cycle();
        allocations = oom_allocations();
        oom_uninstall();
        assert_true(rc == SLUICE_OK || rc == SLUICE_ENOMEM);
        assert_int_equal(oom_live_blocks(), 0);
        if (allocations < n)
            break; /* the whole cycle ran without a failed allocation */
    }
    printf("oom sweep: %ld allocation points\n", n);
    assert_true(n > 20);
    assert_true(n < 100000);
}

static void test_oom_sweep(void **unused)
{
    (void)unused;
    oom_fair = 0;
    oom_sweep_cycle();
}

static void test_oom_sweep_fair(void **unused)
{
    (void)unused;
    oom_fair = 1;
    oom_sweep_cycle();
    oom_fair = 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_property_random),
        cmocka_unit_test(test_property_fair),
        cmocka_unit_test(test_oom_sweep),
        cmocka_unit_test(test_oom_sweep_fair),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
