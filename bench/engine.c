/* SPDX-License-Identifier: MIT */
/*
 * bench_engine: in-process dispatch throughput of the engine, and the memory a parked task costs.
 *
 * Throughput cases (tasks per second through submit -> poll -> ack, one thread; producers and
 * workers are simulated in the same loop, in batches of 64: submit 64, poll up to 64, ack each):
 *
 *   no limit   a type with no limits: the cost of the task objects, queues and tables alone;
 *   keyed      one rate limit keyed by a dot path into the JSON input, over 10,000 tenants,
 *              generous enough never to deny (the gate's cost, not throttling);
 *   chain of 3 a global rate, the per-tenant rate and a per-tenant concurrency cap, evaluated
 *              atomically per task (leases taken at poll, released at ack).
 *
 * Memory: 1,000,000 tasks submitted for one key of a 1/min limit and polled once, so all but one
 * park; sluice_engine_get_stats' tasks_bytes (tasks, payloads and the index slots holding them)
 * divided by the number parked. Payloads are ~20 bytes of JSON.
 *
 * Each figure is the median of 5 runs. The clock is read only to time runs; the engine's now_ns
 * is simulated and advances 1 us per task.
 *
 * Usage: bench_engine [tasks-per-run [parked]]   (defaults 200,000 and 1,000,000)
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sluice/engine.h"
#include "sluice/error.h"
#include "sluice/policy.h"

#define RUNS     5
#define BATCH    64
#define NTENANTS 10000
#define START_NS INT64_C(1763078400000000000)

typedef enum bench_case { CASE_PLAIN, CASE_KEYED, CASE_CHAIN } bench_case;

static double now_sec(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void die(const char *what, int rc, const char *msg)
{
    fprintf(stderr, "bench_engine: %s: %s %s\n", what, sluice_strerror(rc), msg ? msg : "");
    exit(1);
}

static void set_limit(sluice_engine *e, const char *name, sluice_limit_kind kind, int64_t limit,
                      int64_t period_ns, const char *key_path)
{
    sluice_limit_policy p;
    char msg[256];
    int rc;

    sluice_limit_policy_init(&p);
    p.name = (char *)name;
    sluice_limit_def_init(&p.def, kind);
    p.def.limit = limit;
    p.def.period_ns = period_ns;
    if (key_path) {
        p.key_source = SLUICE_KEY_PATH;
        p.key_path = (char *)key_path;
    }
    rc = sluice_engine_set_limit(e, &p, START_NS, msg, sizeof msg);
    if (rc != SLUICE_OK)
        die("set_limit", rc, msg);
}

static void set_type(sluice_engine *e, const char *name, const char *const *limits, size_t n)
{
    sluice_type_policy t;
    char msg[256];
    int rc;

    sluice_type_policy_init(&t);
    t.name = (char *)name;
    t.limits = (char **)limits;
    t.nlimits = n;
    rc = sluice_engine_set_type(e, &t, START_NS, msg, sizeof msg);
    if (rc != SLUICE_OK)
        die("set_type", rc, msg);
}

static sluice_engine *make_engine(void)
{
    static const char *keyed[] = {"tenant"};
    static const char *chain[] = {"global", "tenant", "running"};
    sluice_engine_policy pol;
    sluice_engine *e;
    int rc;

    sluice_engine_policy_init(&pol);
    pol.max_finished = 1000;
    rc = sluice_engine_new(&pol, &e);
    if (rc != SLUICE_OK)
        die("engine_new", rc, NULL);
    /* Generous limits: the bench measures the gate, not throttling. */
    set_limit(e, "global", SLUICE_RATE, INT64_C(1000000000), SLUICE_NS_PER_SEC, NULL);
    set_limit(e, "tenant", SLUICE_RATE, 1000000, SLUICE_NS_PER_SEC, "input.tenant");
    set_limit(e, "running", SLUICE_CONCURRENCY, 1000, 0, "input.tenant");
    set_type(e, "plain", NULL, 0);
    set_type(e, "keyed", keyed, 1);
    set_type(e, "chain", chain, 3);
    return e;
}

/* One run: n tasks through submit -> poll -> ack. Returns tasks per second. */
static double run(bench_case c, size_t n)
{
    static const char *types[] = {"plain", "keyed", "chain"};
    sluice_engine *e = make_engine();
    sluice_delivery out[BATCH];
    char payload[64];
    int64_t now = START_NS;
    size_t done = 0, submitted = 0;
    uint32_t rnd = 12345;
    double t0, t1;

    t0 = now_sec();
    while (done < n) {
        for (size_t i = 0; i < BATCH && submitted < n; i++) {
            sluice_task_spec s;
            uint64_t id;
            int rc;

            rnd = rnd * 1664525u + 1013904223u;
            memset(&s, 0, sizeof s);
            s.type = types[c];
            s.payload_len = (size_t)snprintf(payload, sizeof payload, "{\"tenant\":\"t%05u\"}",
                                             (rnd >> 8) % NTENANTS);
            s.payload = payload;
            rc = sluice_engine_submit(e, &s, now, &id, NULL);
            if (rc != SLUICE_OK)
                die("submit", rc, NULL);
            submitted++;
            now += 1000;
        }
        {
            int k = sluice_engine_poll(e, NULL, 0, BATCH, now, out);

            if (k < 0)
                die("poll", k, NULL);
            for (int i = 0; i < k; i++) {
                int rc = sluice_engine_ack(e, out[i].id, -1, now);

                if (rc != SLUICE_OK)
                    die("ack", rc, NULL);
            }
            done += (size_t)k;
            if (k == 0 && submitted == n)
                die("poll", SLUICE_ESTATE, "nothing left to poll");
        }
    }
    t1 = now_sec();
    sluice_engine_free(e);
    return (double)n / (t1 - t0);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

static double median_run(bench_case c, size_t n)
{
    double v[RUNS];

    for (int i = 0; i < RUNS; i++)
        v[i] = run(c, n);
    qsort(v, RUNS, sizeof v[0], cmp_double);
    return v[RUNS / 2];
}

/* Parks nparked tasks on one key; returns bytes per parked task, *secs the time to park them. */
static double parked_bytes(size_t nparked, double *secs)
{
    static const char *lims[] = {"slow"};
    sluice_engine_policy pol;
    sluice_engine_stats st;
    sluice_engine *e;
    sluice_delivery out[1];
    const char *payload = "{\"tenant\":\"t00042\"}";
    double t0;
    int rc;

    sluice_engine_policy_init(&pol);
    pol.max_parked = nparked + 1;
    pol.max_tasks = nparked + 2;
    rc = sluice_engine_new(&pol, &e);
    if (rc != SLUICE_OK)
        die("engine_new", rc, NULL);
    set_limit(e, "slow", SLUICE_RATE, 1, 60 * SLUICE_NS_PER_SEC, "input.tenant");
    set_type(e, "slow", lims, 1);
    t0 = now_sec();
    for (size_t i = 0; i < nparked + 1; i++) {
        sluice_task_spec s;
        uint64_t id;

        memset(&s, 0, sizeof s);
        s.type = "slow";
        s.payload = payload;
        s.payload_len = strlen(payload);
        rc = sluice_engine_submit(e, &s, START_NS, &id, NULL);
        if (rc != SLUICE_OK)
            die("submit", rc, NULL);
    }
    rc = sluice_engine_poll(e, NULL, 0, 1, START_NS, out);
    if (rc != 1)
        die("poll", rc, NULL);
    /* Poll once more: the first poll stopped after its one delivery; this one parks the rest. */
    rc = sluice_engine_poll(e, NULL, 0, 1, START_NS, out);
    if (rc != 0)
        die("poll", rc, NULL);
    *secs = now_sec() - t0;
    sluice_engine_get_stats(e, &st);
    if (st.parked != nparked)
        die("park", SLUICE_ESTATE, "not everything parked");
    sluice_engine_free(e);
    return (double)st.tasks_bytes / (double)st.parked;
}

int main(int argc, char **argv)
{
    size_t n = 200000, nparked = 1000000;
    double secs, bytes;

    if (argc > 1)
        n = (size_t)strtoull(argv[1], NULL, 10);
    if (argc > 2)
        nparked = (size_t)strtoull(argv[2], NULL, 10);
    if (n < BATCH || nparked < 1) {
        fprintf(stderr, "usage: bench_engine [tasks-per-run >= %d [parked >= 1]]\n", BATCH);
        return 2;
    }
    printf("bench_engine: %zu tasks per run, batches of %d, median of %d runs, one thread\n\n", n,
           BATCH, RUNS);
    printf("  %-48s %14s %12s\n", "case (submit -> poll -> ack)", "tasks/s", "ns/task");
    {
        static const char *names[] = {"no limit", "one keyed rate limit, 10k keys",
                                      "chain of 3 (global, per-key rate, per-key conc)"};

        for (int c = CASE_PLAIN; c <= CASE_CHAIN; c++) {
            double rate = median_run((bench_case)c, n);

            printf("  %-48s %13.0fk %12.0f\n", names[c], rate / 1e3, 1e9 / rate);
        }
    }
    bytes = parked_bytes(nparked, &secs);
    printf("\n  %zu tasks parked on one key in %.2f s: %.0f bytes per parked task "
           "(tasks_bytes / parked)\n",
           nparked, secs, bytes);
    return 0;
}
