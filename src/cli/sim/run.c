/* SPDX-License-Identifier: MIT */
/*
 * The simulation loop of `sluice simulate SCENARIO.yaml` (see run.h).
 *
 * The loop keeps three sources of events: the arrivals (all generated up front and sorted), a
 * min-heap of worker completions, and the engine's next wake. Each turn jumps the clock to the
 * earliest of them and, at that instant: completes the work that is due (ack, or fail when the
 * seeded generator says so), submits the arrivals that are due, ticks the engine when it asked
 * to be woken, then lets every pool with free workers poll until nothing more is handed out.
 * The run ends when nothing is left to happen (no arrivals, no busy worker, nothing queued,
 * parked or delayed), at the scenario's duration, or at the 30-day cap.
 *
 * What a grant counts on (its limits' keys, tiers and units, whether it charged them, the
 * concurrency units a task holds) is the engine's own report, read by keys.c
 * (sluice_engine_task_charges): the simulator resolves nothing itself. A task the gate fails
 * without a worker ever seeing it (overflow reject, a slot past the horizon) is found by watching
 * the engine's failure counter and asking sluice_engine_task_info about the tasks not started yet.
 * A worker slower than its task's lease loses the task, as in production: a heap entry at the
 * lease's expiry gives back its concurrency units, and the engine delivers it again.
 */
#include "cli/sim/run.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "base/alloc.h"
#include "base/hash.h"
#include "base/heap.h"
#include "base/ptab.h"
#include "cli/sim/keys.h"
#include "cli/sim/simulate.h"
#include "sluice/error.h"

#define KEY_MAX 1024 /* longest key kept for the report */

/* ---- Small containers --------------------------------------------------------------------- */

/* One arrival, before it is submitted. */
typedef struct arrival {
    int64_t t_ns;
    uint32_t stream;
    uint32_t index;
} arrival;

/* The pool of a heap entry that is not a worker but the expiry of a task's lease. */
#define LEASE_EXPIRY UINT32_MAX

/* One worker busy until t_ns with a task (or a lease expiring then): an entry of the completion
 * heap, allocated when pushed and freed when popped. */
typedef struct busy {
    int64_t t_ns;
    uint64_t seq; /* ties broken by start order, so the run is deterministic */
    size_t hidx;  /* position in the completion heap */
    uint32_t task;
    uint32_t gen;
    uint32_t pool;
} busy;

/* The private part of a result, and the state of a run. */
typedef struct simrun_priv {
    ptab ids;     /* engine id -> task index + 1 (as a pointer), filed under hash_mix(id) */
    simkeys keys; /* the index of the result's series */
    /* capacities of the result's arrays */
    size_t task_cap, sample_cap;
    /* the run */
    heap busy;            /* busy entries, earliest first */
    uint64_t seq;         /* the next busy entry's tie-breaker */
    size_t *free_workers; /* per pool */
    uint32_t *pending;    /* tasks not started (or waiting for a retry) */
    size_t npending, pending_cap;
    uint64_t rng;
    char **owned_types; /* type names of recurring occurrences */
    size_t ntypes_owned, types_cap;
} simrun_priv;

simkeys *simrun_keys(simrun_result *r)
{
    return &((simrun_priv *)r->priv)->keys;
}

static uint64_t sim_rand(simrun_priv *p)
{
    uint64_t x = p->rng;

    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    p->rng = x;
    return x * UINT64_C(0x2545f4914f6cdd1d);
}

/* Uniform in [lo, hi]. */
static int64_t sim_rand_range(simrun_priv *p, int64_t lo, int64_t hi)
{
    uint64_t span = (uint64_t)(hi - lo) + 1;

    if (hi <= lo)
        return lo;
    return lo + (int64_t)(span == 0 ? sim_rand(p) : sim_rand(p) % span);
}

/* Uniform in [0, 1). */
static double sim_rand_unit(simrun_priv *p)
{
    return (double)(sim_rand(p) >> 11) * (1.0 / 9007199254740992.0);
}

/* ---- Tasks and ids ------------------------------------------------------------------------ */

/* What the id table looks a task up by. */
typedef struct id_ref {
    const simrun_result *r;
    uint64_t id;
} id_ref;

/* ptab_eq_fn: p is a task index + 1, key an id_ref. */
static int id_eq(const void *p, const void *key)
{
    const id_ref *ref = key;

    return ref->r->tasks[(uintptr_t)p - 1].id == ref->id;
}

/* Files task index `task` (whose id is not in the table yet) under its engine id. */
static int id_put(simrun_result *r, uint64_t id, uint32_t task)
{
    simrun_priv *p = r->priv;

    return ptab_insert(&p->ids, hash_mix(id), (void *)(uintptr_t)(task + 1)) == 0 ? 0 : -1;
}

/* Returns the task index of an engine id, or -1. */
static long id_get(const simrun_result *r, uint64_t id)
{
    const simrun_priv *p = r->priv;
    id_ref ref = {r, id};
    void *found = id == 0 ? NULL : ptab_find(&p->ids, hash_mix(id), &ref, id_eq);

    return found ? (long)((uintptr_t)found - 1) : -1;
}

static simrun_task *new_task(simrun_result *r)
{
    simrun_priv *p = r->priv;
    simrun_task *t;

    if (sim_grow((void **)&r->tasks, &p->task_cap, r->ntasks + 1, sizeof(*r->tasks)) != 0)
        return NULL;
    t = &r->tasks[r->ntasks++];
    memset(t, 0, sizeof(*t));
    t->start_ns = -1;
    t->end_ns = -1;
    return t;
}

static int pending_add(simrun_priv *p, uint32_t task)
{
    if (sim_grow((void **)&p->pending, &p->pending_cap, p->npending + 1, sizeof(*p->pending)) != 0)
        return -1;
    p->pending[p->npending++] = task;
    return 0;
}

/* ---- The completion heap ------------------------------------------------------------------ */

static int busy_less(const void *a, const void *b)
{
    const busy *x = a, *y = b;

    return x->t_ns < y->t_ns || (x->t_ns == y->t_ns && x->seq < y->seq);
}

/* Pushes a copy of b, numbered after every entry pushed before. Returns 0 or -1. */
static int busy_push(simrun_priv *p, const busy *b)
{
    busy *copy;

    if (heap_reserve(&p->busy, p->busy.n + 1) != 0)
        return -1;
    copy = alloc_malloc(sizeof(*copy));
    if (!copy)
        return -1;
    *copy = *b;
    copy->seq = p->seq++;
    heap_push(&p->busy, copy); /* reserved */
    return 0;
}

/* The time of the earliest busy entry, or INT64_MAX when there is none. */
static int64_t busy_next(const simrun_priv *p)
{
    const busy *top = heap_top(&p->busy);

    return top ? top->t_ns : INT64_MAX;
}

/* ---- Arrivals ----------------------------------------------------------------------------- */

static int arrival_cmp(const void *a, const void *b)
{
    const arrival *x = a, *y = b;

    if (x->t_ns != y->t_ns)
        return x->t_ns < y->t_ns ? -1 : 1;
    if (x->stream != y->stream)
        return x->stream < y->stream ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

static int64_t scale_div(int64_t a, int64_t b, int64_t c)
{
    return a * (b / c) + (a * (b % c)) / c;
}

/* Generates every arrival of the scenario, sorted by time. */
static int build_arrivals(const scenario *sc, simrun_priv *p, arrival **out)
{
    arrival *arr = NULL;
    size_t n = 0;

    *out = NULL;
    if (sc->total == 0)
        return 0;
    arr = alloc_malloc(sc->total * sizeof(*arr));
    if (!arr)
        return -1;
    for (size_t si = 0; si < sc->nstreams; si++) {
        const scenario_stream *s = &sc->streams[si];
        int64_t span = s->until_ns - s->from_ns;

        for (size_t i = 0; i < s->count; i++) {
            arrival *a = &arr[n++];

            a->stream = (uint32_t)si;
            a->index = (uint32_t)i;
            switch (s->spread) {
            case SCENARIO_EVEN:
                a->t_ns = s->from_ns + scale_div((int64_t)i, span, (int64_t)s->count);
                break;
            case SCENARIO_RANDOM:
                a->t_ns = s->from_ns + sim_rand_range(p, 0, span - 1);
                break;
            case SCENARIO_AT:
            default:
                a->t_ns = s->at_ns;
                break;
            }
        }
        if (s->spread == SCENARIO_RANDOM) {
            /* Indexes follow arrival order within the stream, as for an even spread. */
            arrival *first = &arr[n - s->count];

            qsort(first, s->count, sizeof(*arr), arrival_cmp);
            for (size_t i = 0; i < s->count; i++)
                first[i].index = (uint32_t)i;
        }
    }
    qsort(arr, n, sizeof(*arr), arrival_cmp);
    *out = arr;
    return 0;
}

/* ---- The run ------------------------------------------------------------------------------ */

/* The state of one run, besides the result. */
typedef struct run {
    const scenario *sc;
    sluice_engine *e;
    simrun_result *r;
    simrun_priv *p;
    arrival *arr;
    size_t next_arrival;
    uint64_t failed_seen;   /* the engine's failed + cancelled counters at the last scan */
    sluice_limit *upstream; /* the scenario's upstream: its hidden rate, or NULL */
    char *msg;
    size_t msglen;
} run;

#define T0 SIMULATE_EPOCH_NS

static int oom(run *x)
{
    if (x->msg && x->msglen > 0)
        snprintf(x->msg, x->msglen, "out of memory");
    return SLUICE_ENOMEM;
}

static void on_event(const sluice_event *ev, void *arg)
{
    simrun_result *r = arg;

    if ((size_t)ev->kind < sizeof(r->events) / sizeof(r->events[0]))
        r->events[ev->kind] += ev->count ? ev->count : 1;
}

/* Submits arrival a at now. */
static int submit(run *x, const arrival *a, int64_t now)
{
    const scenario_stream *s = &x->sc->streams[a->stream];
    simrun_result *r = x->r;
    char key[KEY_MAX], task_key[KEY_MAX];
    size_t keylen = scenario_key(s, a->index, key, sizeof(key));
    scenario_vars v = {a->index, key};
    sluice_task_spec spec;
    sluice_submit_error err;
    simrun_task *t;
    json_t *payload;
    char *text;
    uint32_t ti;
    int rc;

    payload = scenario_payload(s, &v);
    if (!payload)
        return oom(x);
    text = json_dumps(payload, JSON_COMPACT); /* alloc_malloc (base/alloc.c): alloc_free */
    if (!text) {
        json_decref(payload);
        return oom(x);
    }
    memset(&spec, 0, sizeof(spec));
    spec.type = s->type;
    spec.payload = text;
    spec.payload_len = strlen(text);
    if (s->key || s->nkeys > 0) {
        spec.key = key;
        spec.key_len = keylen < sizeof(key) ? keylen : sizeof(key) - 1;
    }
    if (s->task_key) {
        long n = scenario_expand(s->task_key, &v, task_key, sizeof(task_key), NULL, 0);

        spec.task_key = task_key;
        spec.task_key_len = n < 0                          ? 0
                            : (size_t)n < sizeof(task_key) ? (size_t)n
                                                           : sizeof(task_key) - 1;
    }
    spec.units = s->units;
    spec.has_priority = s->has_priority;
    spec.priority = s->priority;

    t = new_task(r);
    if (!t)
        goto fail_oom;
    ti = (uint32_t)(t - r->tasks);
    t->stream = a->stream;
    t->index = a->index;
    t->type = s->type;
    t->arrival_ns = now;
    t->units = s->units;
    memset(&err, 0, sizeof(err));
    rc = sluice_engine_submit(x->e, &spec, T0 + now, &t->id, &err);
    if (rc == SLUICE_ENOMEM)
        goto fail_oom;
    if (rc != 0) {
        t = &r->tasks[ti];
        t->id = 0;
        t->outcome = SIMRUN_REFUSED;
        t->end_ns = now;
        t->why = alloc_memdup0(err.message[0] ? err.message : sluice_strerror(rc),
                               strlen(err.message[0] ? err.message : sluice_strerror(rc)));
        if (r->refused++ == 0)
            snprintf(r->first_refusal, sizeof(r->first_refusal), "%s",
                     err.message[0] ? err.message : sluice_strerror(rc));
    } else {
        long known = id_get(r, t->id);

        if (known >= 0) {
            /* The same task key replaced a queued or parked task's payload: it is that task. */
            t->outcome = SIMRUN_CANCELLED;
            t->end_ns = now;
            t->why = alloc_memdup0("replaced an earlier task", 24);
            t->id = 0;
        } else if (id_put(r, t->id, ti) != 0 || pending_add(x->p, ti) != 0) {
            goto fail_oom;
        }
    }
    /* The keys it is limited on, as the engine resolved them (none when it was refused). */
    if (simkeys_links(r, x->e, &r->tasks[ti], spec.key ? key : NULL) != 0)
        goto fail_oom;
    alloc_free(text);
    json_decref(payload);
    return 0;
fail_oom:
    alloc_free(text);
    json_decref(payload);
    return oom(x);
}

/* A delivery of a task the run has not seen: an occurrence of a recurring series. */
static long adopt(run *x, const sluice_delivery *d)
{
    simrun_result *r = x->r;
    simrun_priv *p = x->p;
    sluice_task_info info;
    const char *type = NULL, *key = NULL;
    simrun_task *t;
    uint32_t ti;

    /* Deliveries do not name their series: the first series of the type stands for it. */
    for (size_t i = x->sc->nrecurring; i-- > 0;) {
        if (strcmp(x->sc->recurring[i].type, d->type) == 0) {
            type = x->sc->recurring[i].type;
            key = x->sc->recurring[i].key;
        }
    }
    if (!type) {
        for (size_t i = 0; i < p->ntypes_owned; i++) {
            if (strcmp(p->owned_types[i], d->type) == 0)
                type = p->owned_types[i];
        }
    }
    if (!type) {
        char *copy = alloc_memdup0(d->type, strlen(d->type));

        if (!copy || sim_grow((void **)&p->owned_types, &p->types_cap, p->ntypes_owned + 1,
                              sizeof(*p->owned_types)) != 0) {
            alloc_free(copy);
            return -1;
        }
        p->owned_types[p->ntypes_owned++] = copy;
        type = copy;
    }
    t = new_task(r);
    if (!t)
        return -1;
    ti = (uint32_t)(t - r->tasks);
    t->id = d->id;
    t->stream = SIMRUN_RECURRING;
    t->type = type;
    t->units = 1;
    t->arrival_ns = -1;
    if (sluice_engine_task_info(x->e, d->id, &info) == 0)
        t->arrival_ns = info.submitted_ns - T0;
    if (simkeys_links(r, x->e, t, key) != 0 || id_put(r, d->id, ti) != 0)
        return -1;
    return (long)ti;
}

/* Hands delivery d to a worker of pool pi at now. */
static int start(run *x, size_t pi, const sluice_delivery *d, int64_t now)
{
    const scenario_workers *w = &x->sc->workers[pi];
    simrun_result *r = x->r;
    long ti = id_get(r, d->id);
    simrun_task *t;
    busy b;

    memset(&b, 0, sizeof(b));
    if (ti < 0)
        ti = adopt(x, d);
    if (ti < 0)
        return oom(x);
    t = &r->tasks[ti];
    if (t->outcome == SIMRUN_PENDING) {
        t->start_ns = now;
        if (t->arrival_ns < 0)
            t->arrival_ns = now;
    }
    /* The engine says what this grant charged: the whole chain, or (a redelivery after a lost
     * lease unless the type has charge_redelivery, a retry under throttle_retries 0) the
     * concurrency units only. */
    if (simkeys_delivered(r, x->e, t, d->charged, now) != 0)
        return oom(x);
    t->lease_lost = 0;
    t->outcome = SIMRUN_RUNNING;
    t->attempts = d->attempt > t->attempts ? d->attempt : t->attempts + 1;
    t->gen++;
    b.t_ns = now + sim_rand_range(x->p, w->service_min_ns, w->service_max_ns);
    b.task = (uint32_t)ti;
    b.gen = t->gen;
    b.pool = (uint32_t)pi;
    if (busy_push(x->p, &b) != 0)
        return oom(x);
    if (d->lease_until_ns > 0 && d->lease_until_ns - T0 < b.t_ns) {
        /* The work outlasts the lease: the engine takes the task back at its expiry. */
        b.t_ns = d->lease_until_ns - T0;
        b.pool = LEASE_EXPIRY;
        if (busy_push(x->p, &b) != 0)
            return oom(x);
    }
    x->p->free_workers[pi]--;
    return 0;
}

static simrun_outcome outcome_of(sluice_fail_reason reason)
{
    switch (reason) {
    case SLUICE_FAIL_RATELIMITED:
    case SLUICE_FAIL_HORIZON:
    case SLUICE_FAIL_NEVER:
        return SIMRUN_REJECTED;
    case SLUICE_FAIL_SKIPPED:
        return SIMRUN_SKIPPED;
    default:
        return SIMRUN_FAILED;
    }
}

/* Records a task the engine has finished (failed or cancelled) at now. */
static void finish_from_engine(run *x, simrun_task *t, const sluice_task_info *info, int64_t now)
{
    t->end_ns = now;
    if (info->state == SLUICE_TASK_CANCELLED) {
        t->outcome = SIMRUN_CANCELLED;
        return;
    }
    t->reason = info->failure.reason;
    t->outcome = outcome_of(info->failure.reason);
    if (t->outcome == SIMRUN_REJECTED && info->failure.limit) {
        alloc_free(t->why);
        t->why = alloc_memdup0(info->failure.limit, strlen(info->failure.limit));
        for (uint32_t i = 0; i < t->nlinks; i++) {
            simrun_series *s = &x->r->series[x->r->links[t->links + i].series];

            if (strcmp(s->limit, info->failure.limit) == 0) {
                /* Out of memory only loses the dot on the chart; the count stays right. */
                if (sim_grow((void **)&s->rej_ns, &s->rej_cap, s->nrej + 1, sizeof(*s->rej_ns)) ==
                    0)
                    s->rej_ns[s->nrej++] = now;
                s->rejected++;
                break;
            }
        }
    }
}

static const sluice_limit *series_core(const run *x, const simrun_series *s);

/* Each adaptive key's rate at the end of the run. */
static void final_rates(run *x)
{
    for (size_t i = 0; i < x->r->nseries; i++) {
        simrun_series *s = &x->r->series[i];
        const sluice_limit *core;
        int64_t since;

        s->rate_end = s->def.limit;
        if (s->def.kind == SLUICE_RATE && s->def.decrease_den > 0 && (core = series_core(x, s)))
            sluice_limit_key_rate(core, s->key, strlen(s->key), T0 + x->r->end_ns, &s->rate_end,
                                  &since);
    }
}

/* The core limit that decides key `key` of series s in the engine, or NULL. */
static const sluice_limit *series_core(const run *x, const simrun_series *s)
{
    char id[512];
    const sluice_limit_policy *p = sluice_engine_get_limit(x->e, s->limit, NULL);

    if (p && s->tier)
        snprintf(id, sizeof id, "%s/%s", s->limit, s->tier);
    else if (p && p->noverrides > 0)
        snprintf(id, sizeof id, "%s/=%s", s->limit, s->key);
    else
        snprintf(id, sizeof id, "%s", s->limit);
    if (!sluice_engine_limit_by_id(x->e, id))
        snprintf(id, sizeof id, "%s", s->limit);
    return sluice_engine_limit_by_id(x->e, id);
}

/* Notes that adaptive series s has rate permits at now, when that is a change. Returns 0, or -1
 * when out of memory. */
static int note_rate(simrun_series *s, int64_t now, int64_t permits)
{
    int64_t last = s->neff ? s->eff_v[s->neff - 1] : s->def.limit;

    if (permits == last)
        return 0;
    if (s->neff > 0 && s->eff_t[s->neff - 1] == now) {
        s->eff_v[s->neff - 1] = permits;
        return 0;
    }
    if (s->neff == s->eff_cap) {
        size_t cap = s->eff_cap ? 2 * s->eff_cap : 64;
        int64_t *a = alloc_realloc(s->eff_t, cap * sizeof *a);

        if (!a)
            return -1;
        s->eff_t = a;
        a = alloc_realloc(s->eff_v, cap * sizeof *a);
        if (!a)
            return -1;
        s->eff_v = a;
        s->eff_cap = cap;
    }
    s->eff_t[s->neff] = now;
    s->eff_v[s->neff++] = permits;
    return 0;
}

/* Notes every adaptive key's rate at now (it recovers between 429s, with no event of its own). */
static int note_rates(run *x, int64_t now)
{
    for (size_t i = 0; i < x->r->nseries; i++) {
        simrun_series *s = &x->r->series[i];
        const sluice_limit *core;
        int64_t permits, since;

        if (s->def.kind != SLUICE_RATE || s->def.decrease_den == 0 || !(core = series_core(x, s)) ||
            sluice_limit_key_rate(core, s->key, strlen(s->key), T0 + now, &permits, &since) != 0)
            continue;
        if (note_rate(s, now, permits) != 0)
            return -1;
    }
    return 0;
}

/* Records the adaptive rates of task t's keys after its upstream's 429 (the engine has lowered
 * them). */
static int record_rates(run *x, const simrun_task *t, int64_t now)
{
    for (uint32_t i = 0; i < t->nlinks; i++) {
        simrun_series *s = &x->r->series[x->r->links[t->links + i].series];
        const sluice_limit *core;
        int64_t permits, since;

        if (s->def.kind != SLUICE_RATE || s->def.decrease_den == 0 || !(core = series_core(x, s)) ||
            sluice_limit_key_rate(core, s->key, strlen(s->key), T0 + now, &permits, &since) != 0)
            continue;
        if (s->nrate == s->rate_cap) {
            size_t cap = s->rate_cap ? 2 * s->rate_cap : 16;
            int64_t *rt = alloc_realloc(s->rate_t, cap * sizeof *rt);

            if (!rt)
                return -1;
            s->rate_t = rt;
            rt = alloc_realloc(s->rate_v, cap * sizeof *rt);
            if (!rt)
                return -1;
            s->rate_v = rt;
            s->rate_cap = cap;
        }
        s->rate_t[s->nrate] = now;
        s->rate_v[s->nrate++] = permits;
        if (note_rate(s, now, permits) != 0)
            return -1;
    }
    return 0;
}

/* The scenario's upstream, called by the worker of task t at now: returns 1 when it answers 429
 * (and t was failed with RETRY_AFTER, as a worker would), 0 when the call goes through, -1 out
 * of memory. */
static int upstream_refuses(run *x, simrun_task *t, const busy *b, int64_t now)
{
    sluice_decision d;
    sluice_task_info info;
    int64_t wait;
    simrun_result *r = x->r;

    if (!x->upstream || sluice_limit_decide(x->upstream, "", 0, 1, T0 + now, 0, &d) != 0 ||
        d.allowed)
        return 0;
    wait = d.retry_after_ns > x->sc->upstream_retry_after_ns ? d.retry_after_ns
                                                             : x->sc->upstream_retry_after_ns;
    wait = (wait + SLUICE_NS_PER_MS - 1) / SLUICE_NS_PER_MS * SLUICE_NS_PER_MS; /* whole ms */
    if (sluice_engine_fail_retry_after(x->e, t->id, wait, "429", T0 + now) != 0)
        return 0; /* the engine took the task back meanwhile */
    if (r->n429 == r->u429_cap) {
        size_t cap = r->u429_cap ? 2 * r->u429_cap : 64;
        int64_t *a = alloc_realloc(r->u429_ns, cap * sizeof *a);

        if (!a)
            return -1;
        r->u429_ns = a;
        r->u429_cap = cap;
    }
    r->u429_ns[r->n429++] = now;
    if (record_rates(x, t, now) != 0)
        return -1;
    if (sluice_engine_task_info(x->e, t->id, &info) == 0 && info.state == SLUICE_TASK_FAILED) {
        finish_from_engine(x, t, &info, now);
    } else {
        t->outcome = SIMRUN_RETRYING;
        if (pending_add(x->p, b->task) != 0)
            return -1;
    }
    return 1;
}

/* Completes the work of busy entry b at now. */
static int complete(run *x, const busy *b, int64_t now)
{
    const scenario_workers *w;
    simrun_task *t = &x->r->tasks[b->task];
    sluice_task_info info;
    int rc;

    if (b->pool == LEASE_EXPIRY) {
        /* Before the engine's tick at this instant takes the task back: its leases still hold. */
        if (t->gen == b->gen && t->outcome == SIMRUN_RUNNING && !t->lease_lost) {
            if (simkeys_release(x->r, x->e, t, now) != 0)
                return oom(x);
            t->lease_lost = 1;
        }
        return 0;
    }
    w = &x->sc->workers[b->pool];
    x->p->free_workers[b->pool]++;
    if (t->gen != b->gen || t->outcome != SIMRUN_RUNNING || t->lease_lost)
        return 0; /* its lease expired first: the engine took the task back, the work is lost */
    if (simkeys_release(x->r, x->e, t, now) != 0)
        return oom(x);
    rc = upstream_refuses(x, t, b, now);
    if (rc != 0)
        return rc < 0 ? oom(x) : 0;
    if (w->failure_rate > 0 && sim_rand_unit(x->p) < w->failure_rate) {
        rc = sluice_engine_fail(x->e, t->id,
                                w->failure_mode == SCENARIO_FAIL_DEAD ? SLUICE_FAIL_MODE_DEAD
                                                                      : SLUICE_FAIL_MODE_RETRY,
                                "simulated failure", T0 + now);
        if (rc != 0)
            return 0; /* the engine took the task back meanwhile */
        if (sluice_engine_task_info(x->e, t->id, &info) == 0 && info.state == SLUICE_TASK_FAILED) {
            finish_from_engine(x, t, &info, now);
        } else {
            t->outcome = SIMRUN_RETRYING;
            if (pending_add(x->p, b->task) != 0)
                return oom(x);
        }
        return 0;
    }
    rc = sluice_engine_ack(x->e, t->id,
                           w->cost_min < 0 ? -1 : sim_rand_range(x->p, w->cost_min, w->cost_max),
                           T0 + now);
    if (rc == 0) {
        t->outcome = SIMRUN_DONE;
        t->end_ns = now;
    }
    return 0;
}

/* Finds the tasks the engine failed or cancelled without a worker (checked only when its
 * counters moved). */
static void scan_pending(run *x, int64_t now)
{
    sluice_engine_stats st;
    size_t keep = 0;

    sluice_engine_get_stats(x->e, &st);
    if (st.failed + st.cancelled == x->failed_seen)
        return;
    x->failed_seen = st.failed + st.cancelled;
    for (size_t i = 0; i < x->p->npending; i++) {
        simrun_task *t = &x->r->tasks[x->p->pending[i]];
        sluice_task_info info;

        if (t->outcome != SIMRUN_PENDING && t->outcome != SIMRUN_RETRYING)
            continue; /* started (or finished) since: drop it */
        if (sluice_engine_task_info(x->e, t->id, &info) == 0 &&
            (info.state == SLUICE_TASK_FAILED || info.state == SLUICE_TASK_CANCELLED)) {
            finish_from_engine(x, t, &info, now);
            continue;
        }
        x->p->pending[keep++] = x->p->pending[i];
    }
    x->p->npending = keep;
}

static int sample(run *x, int64_t now)
{
    simrun_result *r = x->r;
    simrun_priv *p = x->p;
    sluice_engine_stats st;
    simrun_sample s;

    sluice_engine_get_stats(x->e, &st);
    s.t_ns = now;
    s.parked = (uint32_t)st.parked;
    s.queued = (uint32_t)st.queued;
    s.running = (uint32_t)st.running;
    s.delayed = (uint32_t)st.delayed;
    if (r->nsamples > 0) {
        simrun_sample *last = &r->samples[r->nsamples - 1];

        if (last->parked == s.parked && last->queued == s.queued && last->running == s.running &&
            last->delayed == s.delayed)
            return 0;
        if (last->t_ns == now) {
            *last = s;
            return 0;
        }
    }
    if (sim_grow((void **)&r->samples, &p->sample_cap, r->nsamples + 1, sizeof(*r->samples)) != 0)
        return oom(x);
    r->samples[r->nsamples++] = s;
    return 0;
}

/* Lets every pool with free workers poll at now until nothing more is handed out. */
static int poll_all(run *x, int64_t now)
{
    sluice_delivery d[64];
    int progress = 1;

    while (progress) {
        progress = 0;
        for (size_t pi = 0; pi < x->sc->nworkers; pi++) {
            const scenario_workers *w = &x->sc->workers[pi];
            size_t want = x->p->free_workers[pi];
            int n;

            if (want == 0)
                continue;
            if (want > sizeof(d) / sizeof(d[0]))
                want = sizeof(d) / sizeof(d[0]);
            n = sluice_engine_poll(x->e, (const char *const *)w->types, w->ntypes, want, T0 + now,
                                   d);
            if (n < 0)
                return n == SLUICE_ENOMEM ? oom(x) : n;
            for (int i = 0; i < n; i++) {
                int rc = start(x, pi, &d[i], now);

                if (rc != 0)
                    return rc;
            }
            if (n > 0)
                progress = 1;
        }
    }
    return 0;
}

static int add_series(run *x)
{
    char why[256];

    for (size_t i = 0; i < x->sc->nrecurring; i++) {
        const scenario_recurring *sr = &x->sc->recurring[i];
        sluice_recurring_spec rs;
        int rc;

        memset(&rs, 0, sizeof(rs));
        rs.name = sr->name;
        rs.type = sr->type;
        rs.payload = sr->payload;
        rs.payload_len = sr->payload ? strlen(sr->payload) : 0;
        rs.key = sr->key;
        rs.key_len = sr->key ? strlen(sr->key) : 0;
        rs.interval_ns = sr->every_ns;
        rs.cron = sr->cron;
        rs.start_ns = T0 + sr->start_ns;
        rs.end_ns = sr->end_ns ? T0 + sr->end_ns : 0;
        rs.max_runs = sr->max_runs;
        why[0] = '\0';
        rc = sluice_engine_add_recurring(x->e, &rs, T0, why, sizeof(why));
        if (rc != 0) {
            if (x->msg && x->msglen > 0)
                snprintf(x->msg, x->msglen, "recurring series \"%s\": %s", sr->name,
                         why[0] ? why : sluice_strerror(rc));
            return rc;
        }
    }
    return 0;
}

/* Returns 1 when nothing is left to happen but the engine's housekeeping and the recurring
 * series. */
static int idle_but_series(const run *x)
{
    sluice_engine_stats st;

    if (x->next_arrival < x->sc->total || x->p->busy.n > 0)
        return 0;
    sluice_engine_get_stats(x->e, &st);
    return st.queued == 0 && st.parked == 0 && st.running == 0 && st.delayed == 0;
}

/* Returns 1 when nothing is left to happen but the engine's housekeeping. */
static int idle(const run *x)
{
    return x->sc->nrecurring == 0 && idle_but_series(x);
}

static int loop(run *x)
{
    const scenario *sc = x->sc;
    int64_t now = 0, limit = sc->duration_ns ? sc->duration_ns : SCENARIO_MAX_SPAN_NS;
    int rc;

    for (;;) {
        int64_t next = INT64_MAX, wake;

        while (busy_next(x->p) <= now) {
            busy *b = heap_pop(&x->p->busy);

            rc = complete(x, b, now);
            alloc_free(b);
            if (rc != 0)
                return rc;
        }
        while (x->next_arrival < sc->total && x->arr[x->next_arrival].t_ns <= now) {
            rc = submit(x, &x->arr[x->next_arrival++], now);
            if (rc != 0)
                return rc;
        }
        for (int i = 0; i < 4 && sluice_engine_next_wake(x->e) <= T0 + now; i++) {
            rc = sluice_engine_tick(x->e, T0 + now);
            if (rc != 0)
                return oom(x);
        }
        rc = poll_all(x, now);
        if (rc == 0)
            rc = sample(x, now);
        if (rc == 0 && x->sc->upstream_permits > 0 && note_rates(x, now) != 0)
            rc = oom(x);
        if (rc != 0)
            return rc;
        scan_pending(x, now);
        x->r->end_ns = now;
        if (idle(x))
            return 0;

        if (x->next_arrival < sc->total)
            next = x->arr[x->next_arrival].t_ns;
        if (busy_next(x->p) < next)
            next = busy_next(x->p);
        wake = sluice_engine_next_wake(x->e);
        if (wake != SLUICE_NEVER && wake - T0 < next)
            next = wake - T0 > now ? wake - T0 : now + 1;
        if (next == INT64_MAX)
            return 0; /* stuck: work that no worker takes */
        if (next > limit) {
            x->r->stopped = !idle_but_series(x);
            if (sc->duration_ns)
                x->r->end_ns = sc->duration_ns;
            return 0;
        }
        now = next;
    }
}

/* Notes the engine state of every task still unfinished at the end. */
static void final_states(run *x)
{
    for (size_t i = 0; i < x->r->ntasks; i++) {
        simrun_task *t = &x->r->tasks[i];
        sluice_task_info info;

        if (t->outcome != SIMRUN_PENDING && t->outcome != SIMRUN_RUNNING &&
            t->outcome != SIMRUN_RETRYING)
            continue;
        if (t->id && sluice_engine_task_info(x->e, t->id, &info) == 0) {
            if (info.state == SLUICE_TASK_FAILED || info.state == SLUICE_TASK_CANCELLED)
                finish_from_engine(x, t, &info, x->r->end_ns);
            else
                t->final_state = info.state;
        }
    }
}

int simrun_run(const scenario *sc, const sluice_config *cfg, simrun_result **out, char *msg,
               size_t msglen)
{
    sluice_engine_policy policy;
    simrun_result *r;
    run x;
    int rc;

    if (out)
        *out = NULL;
    if (msg && msglen > 0)
        msg[0] = '\0';
    if (!sc || !cfg || !out)
        return SLUICE_EINVAL;
    memset(&x, 0, sizeof(x));
    x.sc = sc;
    x.msg = msg;
    x.msglen = msglen;
    r = alloc_calloc(1, sizeof(*r));
    if (!r)
        return oom(&x);
    r->sc = sc;
    r->cfg = cfg;
    x.r = r;
    x.p = r->priv = alloc_calloc(1, sizeof(simrun_priv));
    if (!x.p) {
        rc = oom(&x);
        goto fail;
    }
    ptab_init(&x.p->ids);
    ptab_init(&x.p->keys.index);
    heap_init(&x.p->busy, busy_less, offsetof(busy, hidx));
    x.p->rng = (sc->seed ^ UINT64_C(0x9e3779b97f4a7c15)) | 1;
    for (int i = 0; i < 8; i++)
        sim_rand(x.p);
    x.p->free_workers = alloc_calloc(sc->nworkers ? sc->nworkers : 1, sizeof(size_t));
    if (!x.p->free_workers || build_arrivals(sc, x.p, &x.arr) != 0) {
        rc = oom(&x);
        goto fail;
    }
    for (size_t i = 0; i < sc->nworkers; i++)
        x.p->free_workers[i] = sc->workers[i].count;

    /* The simulation reads the fate of every task back, so the engine keeps them all. */
    policy = cfg->engine;
    if (policy.max_finished < sc->total + 1024)
        policy.max_finished = sc->total + 1024;
    rc = sluice_engine_new(&policy, &x.e);
    if (rc != 0) {
        if (msg && msglen > 0)
            snprintf(msg, msglen, "cannot create the engine: %s", sluice_strerror(rc));
        goto fail;
    }
    sluice_engine_on_event(x.e, on_event, r);
    if (sc->upstream_permits > 0) {
        sluice_limit_def up;
        char why[160];

        sluice_limit_def_init(&up, SLUICE_RATE);
        up.limit = sc->upstream_permits;
        up.period_ns = sc->upstream_period_ns;
        rc = sluice_limit_new(&up, &x.upstream, why, sizeof why);
        if (rc != 0) {
            if (msg && msglen > 0)
                snprintf(msg, msglen, "scenario upstream: %s", why);
            goto fail;
        }
    }
    rc = sluice_config_apply(cfg, x.e, T0, msg, msglen);
    if (rc == 0)
        rc = add_series(&x);
    if (rc == 0)
        rc = loop(&x);
    if (rc != 0)
        goto fail;
    final_states(&x);
    final_rates(&x);
    simkeys_figures(r);
    sluice_engine_get_stats(x.e, &r->stats);
    r->span_ns = sc->duration_ns ? sc->duration_ns : r->end_ns;
    sluice_engine_free(x.e);
    sluice_limit_free(x.upstream);
    alloc_free(x.arr);
    *out = r;
    return 0;
fail:
    sluice_limit_free(x.upstream);
    sluice_engine_free(x.e);
    alloc_free(x.arr);
    simrun_result_free(r);
    return rc;
}

void simrun_result_free(simrun_result *r)
{
    if (r)
        alloc_free(r->u429_ns);
    simrun_priv *p;

    if (!r)
        return;
    p = r->priv;
    for (size_t i = 0; i < r->ntasks; i++) {
        alloc_free(r->tasks[i].key);
        alloc_free(r->tasks[i].why);
    }
    alloc_free(r->tasks);
    alloc_free(r->links);
    for (size_t i = 0; i < r->nseries; i++) {
        simrun_series *s = &r->series[i];

        alloc_free(s->limit);
        alloc_free(s->tier);
        alloc_free(s->key);
        alloc_free(s->t_ns);
        alloc_free(s->cum);
        alloc_free(s->rate_t);
        alloc_free(s->rate_v);
        alloc_free(s->eff_t);
        alloc_free(s->eff_v);
        alloc_free(s->rej_ns);
        alloc_free(s->held_t);
        alloc_free(s->held_v);
    }
    alloc_free(r->series);
    alloc_free(r->samples);
    if (p) {
        busy *b;

        ptab_free(&p->ids);
        simkeys_free(&p->keys);
        while ((b = heap_pop(&p->busy)) != NULL)
            alloc_free(b);
        heap_free(&p->busy);
        alloc_free(p->free_workers);
        alloc_free(p->pending);
        for (size_t i = 0; i < p->ntypes_owned; i++)
            alloc_free(p->owned_types[i]);
        alloc_free(p->owned_types);
        alloc_free(p);
    }
    alloc_free(r);
}

const char *simrun_outcome_name(simrun_outcome o)
{
    switch (o) {
    case SIMRUN_PENDING:
        return "pending";
    case SIMRUN_RUNNING:
        return "running";
    case SIMRUN_RETRYING:
        return "retrying";
    case SIMRUN_DONE:
        return "done";
    case SIMRUN_FAILED:
        return "failed";
    case SIMRUN_REJECTED:
        return "rejected";
    case SIMRUN_CANCELLED:
        return "cancelled";
    case SIMRUN_SKIPPED:
        return "skipped";
    case SIMRUN_REFUSED:
        return "refused";
    }
    return "?";
}
