/* SPDX-License-Identifier: MIT */
/*
 * bench_core: decisions per second of the limiter core on one thread, against a floor.
 *
 * One random request stream over 1,000,000 distinct keys ("tenant:123456") is generated up
 * front, materialised as key bytes so reading it is a sequential scan and every measured cache
 * miss belongs to the table under test. The same stream then drives:
 *
 *   floor  the fastest lookup + update of an int64 per key written here for this stream: a
 *          specialised open-addressing table (24-byte slots: the key as two words and the
 *          counter, no hash stored, no tag, no length, nothing general), keys read as the
 *          server hands them over (pointer and length) and hashed by two hash_absorb steps;
 *          one at a time, and prefetching 8 ahead (the floor of the prefetching cases);
 *   keytab the same lookup + increment through sluice's key table (keytab_find), to tell the
 *          table's share of the costs below from the rest of a decision;
 *   gcra   sluice_limit_decide on a rate limit of 1000 per second per key;
 *   chain  sluice_chain_decide over a global rate, a per-key rate and a per-key fixed window;
 *   ...prefetching  the same, announcing the key 8 requests ahead with sluice_limit_prefetch(),
 *          as the server does for pipelined commands, so that cache misses overlap;
 *   hot    sluice_limit_decide on one key (the 1000/s rate, so mostly denials).
 *
 * Every table is first filled with all keys (untimed), so runs measure the steady state. The
 * cases are run round-robin, RUNS rounds, and each figure is the median of its RUNS runs, so a
 * change in the machine's load during the bench hits every case alike. Runs are timed by the
 * monotonic clock, or with BENCH_CPU=1 in the environment by the thread's CPU time, which leaves
 * out the time other processes hold the core on a crowded machine (their cache and TLB traffic
 * still counts against every case alike). The clock is read only to time runs; the limiter's
 * `now_ns` is simulated, starting at 1.7e18 ns (late 2023) and advancing 100 ns per request.
 *
 * Last, the bytes per tracked key of a per-key rate limit (sluice_limit_get_stats) are printed
 * for several numbers of keys, so that the figure is not that of one lucky size.
 *
 * Usage: bench_core [requests-per-run]   (default 10,000,000)
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/keytab.h"
#include "base/hash.h"
#include "sluice/error.h"
#include "sluice/limit.h"

#define NKEYS      1000000u
#define KEY_STRIDE 16 /* bytes per key in the stream; keys are 13 bytes, zero-padded */
#define KEY_LEN    13
#define RUNS       7
#define START_NS   INT64_C(1700000000000000000)
#define STEP_NS    100

/* The request stream: `n` keys of KEY_LEN bytes, KEY_STRIDE apart. */
static char *stream;
static size_t nreq;
static int64_t now_ns = START_NS; /* simulated time, never rewound between runs */

/* ---- The floor: the fastest table of int64 counters for this stream ----------------------- */

/* One slot: the key as two words (zero-padded; the stream's keys are never all zero bytes, so
 * k0 == 0 marks an empty slot) and the counter. 2^21 slots: half full at 1M keys. */
typedef struct floor_slot {
    uint64_t k0, k1; /* the key, zero-padded to 16 bytes */
    int64_t count;   /* requests seen for this key */
} floor_slot;

#define FLOOR_BITS 21

static floor_slot *floor_slots;

/* The key's two words (keys of 9 to 16 bytes, read without going past their end) and its home
 * slot. */
static inline size_t floor_home(const char *key, size_t len, uint64_t *k0, uint64_t *k1)
{
    *k0 = hash_load64((const unsigned char *)key);
    *k1 = hash_load64((const unsigned char *)key + len - 8) >> (8 * (16 - len));
    return (size_t)hash_absorb(hash_absorb(0, *k0), *k1) & (((size_t)1 << FLOOR_BITS) - 1);
}

/* Counts one request for a key: the least work any per-key table must do. */
static inline int64_t floor_hit(const char *key, size_t len)
{
    uint64_t k0, k1;
    size_t i = floor_home(key, len, &k0, &k1);

    for (;;) {
        floor_slot *s = &floor_slots[i];

        if (s->k0 == k0 && s->k1 == k1)
            return ++s->count;
        if (s->k0 == 0) {
            s->k0 = k0;
            s->k1 = k1;
            return s->count = 1;
        }
        i = (i + 1) & (((size_t)1 << FLOOR_BITS) - 1);
    }
}

static inline void floor_prefetch(const char *key, size_t len)
{
    uint64_t k0, k1;

    __builtin_prefetch(&floor_slots[floor_home(key, len, &k0, &k1)], 1, 3);
}

/* ---- Runs --------------------------------------------------------------------------------- */

typedef enum bench_case {
    CASE_FLOOR,
    CASE_FLOOR_PREFETCH,
    CASE_KEYTAB,
    CASE_GCRA,
    CASE_GCRA_PREFETCH,
    CASE_CHAIN,
    CASE_CHAIN_PREFETCH,
    CASE_HOT,
    NCASES
} bench_case;

/* How far ahead the prefetching cases announce keys: as a server does for the commands already
 * buffered from a pipelining client. */
#define PREFETCH_AHEAD 8

/* The key table measured on its own: int64 counters. */
static keytab *counters;

/* The limits under test. */
static sluice_limit *gcra_lim, *global_lim, *chain_rate_lim, *chain_window_lim, *hot_lim;

/* The clock runs are timed by: CLOCK_MONOTONIC, or the thread's CPU time (BENCH_CPU=1). */
static clockid_t run_clock = CLOCK_MONOTONIC;

static double seconds_now(void)
{
    struct timespec ts;

    clock_gettime(run_clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void fail(const char *what, int rc)
{
    fprintf(stderr, "bench_core: %s: %s\n", what, sluice_strerror(rc));
    exit(1);
}

/* The key of request r + PREFETCH_AHEAD. The stream is followed by a copy of its first
 * PREFETCH_AHEAD keys, so this is one addition, not a division: the harness's own cost is part
 * of every case's time, and a division per request would weigh on the cheap floor most. */
static const char *ahead_key(size_t r)
{
    return stream + (r + PREFETCH_AHEAD) * KEY_STRIDE;
}

/* Runs the n requests of the stream from `first` (first + n <= nreq) through one case; returns
 * how many were allowed (the floor: the sum of counters, so the work cannot be optimised away). */
static uint64_t run_case(bench_case c, size_t first, size_t n)
{
    uint64_t allowed = 0;
    sluice_decision d;
    sluice_chain_link links[3] = {
        {global_lim, "global", 6, 1},
        {chain_rate_lim, NULL, KEY_LEN, 1},
        {chain_window_lim, NULL, KEY_LEN, 1},
    };
    sluice_chain_result res;
    int rc;

    for (size_t r = first; r < first + n; r++) {
        const char *key = stream + r * KEY_STRIDE;

        now_ns += STEP_NS;
        switch (c) {
        case CASE_FLOOR:
            allowed += (uint64_t)floor_hit(key, KEY_LEN);
            break;
        case CASE_FLOOR_PREFETCH:
            floor_prefetch(ahead_key(r), KEY_LEN);
            allowed += (uint64_t)floor_hit(key, KEY_LEN);
            break;
        case CASE_KEYTAB: {
            int64_t *v = keytab_find(counters, key, KEY_LEN);

            allowed += (uint64_t)++ * v;
            break;
        }
        case CASE_GCRA:
            rc = sluice_limit_decide(gcra_lim, key, KEY_LEN, 1, now_ns, 0, &d);
            if (rc != SLUICE_OK)
                fail("sluice_limit_decide", rc);
            allowed += (uint64_t)d.allowed;
            break;
        case CASE_GCRA_PREFETCH:
            sluice_limit_prefetch(gcra_lim, ahead_key(r), KEY_LEN);
            rc = sluice_limit_decide(gcra_lim, key, KEY_LEN, 1, now_ns, 0, &d);
            if (rc != SLUICE_OK)
                fail("sluice_limit_decide", rc);
            allowed += (uint64_t)d.allowed;
            break;
        case CASE_CHAIN_PREFETCH:
            sluice_limit_prefetch(chain_rate_lim, ahead_key(r), KEY_LEN);
            sluice_limit_prefetch(chain_window_lim, ahead_key(r), KEY_LEN);
            /* fall through */
        case CASE_CHAIN:
            links[1].key = key;
            links[2].key = key;
            rc = sluice_chain_decide(links, 3, now_ns, 0, NULL, &res);
            if (rc != SLUICE_OK)
                fail("sluice_chain_decide", rc);
            allowed += (uint64_t)res.allowed;
            break;
        case CASE_HOT:
        case NCASES:
            rc = sluice_limit_decide(hot_lim, "tenant:000042", KEY_LEN, 1, now_ns, 0, &d);
            if (rc != SLUICE_OK)
                fail("sluice_limit_decide", rc);
            allowed += (uint64_t)d.allowed;
            break;
        }
    }
    return allowed;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* The median decisions per second of each case, over RUNS round-robin rounds. */
static double median_rate[NCASES];
static uint64_t allowed_per_run[NCASES];

static void measure_all(void)
{
    static double rate[NCASES][RUNS];

    for (int i = 0; i < RUNS; i++) {
        for (int c = 0; c < NCASES; c++) {
            double t0 = seconds_now(), t1;

            allowed_per_run[c] = run_case((bench_case)c, 0, nreq);
            t1 = seconds_now();
            rate[c][i] = (double)nreq / (t1 - t0);
        }
    }
    for (int c = 0; c < NCASES; c++) {
        qsort(rate[c], RUNS, sizeof rate[c][0], cmp_double);
        median_rate[c] = rate[c][RUNS / 2];
        fprintf(stderr, "  case %d: min %.2fM median %.2fM max %.2fM\n", c, rate[c][0] / 1e6,
                median_rate[c] / 1e6, rate[c][RUNS - 1] / 1e6);
    }
}

/* ---- Set-up ------------------------------------------------------------------------------- */

static uint64_t rng_state = 0x2545f4914f6cdd1du;

static uint64_t rng_next(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1du;
}

static sluice_limit *new_limit(sluice_limit_kind kind, int64_t limit, int64_t period_ns)
{
    sluice_limit_def def;
    sluice_limit *lim = NULL;
    char msg[128];
    int rc;

    sluice_limit_def_init(&def, kind);
    def.limit = limit;
    def.period_ns = period_ns;
    def.max_keys = 4 * NKEYS;
    rc = sluice_limit_new(&def, &lim, msg, sizeof msg);
    if (rc != SLUICE_OK) {
        fprintf(stderr, "bench_core: sluice_limit_new: %s\n", msg);
        exit(1);
    }
    return lim;
}

/* Fills every table with every key once, so the timed runs see the steady state. */
static void warm_up(void)
{
    char key[KEY_STRIDE];

    for (uint32_t k = 0; k < NKEYS; k++) {
        snprintf(key, sizeof key, "tenant:%06" PRIu32, k);
        memcpy(stream, key, KEY_STRIDE);
        void *v;

        (void)floor_hit(stream, KEY_LEN);
        if (keytab_upsert(counters, stream, KEY_LEN, &v, NULL) != SLUICE_OK)
            fail("keytab_upsert", SLUICE_ENOMEM);
        (void)run_case(CASE_GCRA, 0, 1);
        (void)run_case(CASE_CHAIN, 0, 1);
    }
}

static void print_bytes(const char *name, const sluice_limit *lim)
{
    sluice_limit_stats st;

    sluice_limit_get_stats(lim, &st);
    printf("  %-34s %8zu keys %11zu bytes %7.1f bytes/key\n", name, st.keys, st.bytes,
           st.keys ? (double)st.bytes / (double)st.keys : 0.0);
}

/* Prints the bytes per tracked key of a per-key rate limit holding n keys. */
static void bytes_at_size(size_t n)
{
    sluice_limit *lim = new_limit(SLUICE_RATE, 1000, SLUICE_NS_PER_SEC);
    char key[KEY_STRIDE];
    sluice_decision d;
    char name[32];

    for (size_t k = 0; k < n; k++) {
        snprintf(key, sizeof key, "tenant:%06zu", k % 1000000u);
        if (k >= 1000000u)
            key[6] = '-'; /* "tenant-123456": keys beyond the first million */
        if (sluice_limit_decide(lim, key, KEY_LEN, 1, START_NS, 0, &d) != SLUICE_OK)
            fail("sluice_limit_decide", SLUICE_ENOMEM);
    }
    snprintf(name, sizeof name, "rate limit, %zu keys", n);
    print_bytes(name, lim);
    sluice_limit_free(lim);
}

/* Prints one case's line: decisions per second and the fraction of the floor `base`. */
static void print_case(const char *name, bench_case c, bench_case base, int with_allowed)
{
    char allowed[24] = "-";

    if (with_allowed)
        snprintf(allowed, sizeof allowed, "%" PRIu64, allowed_per_run[c]);
    printf("  %-36s %13.2fM %8.2fx %12s\n", name, median_rate[c] / 1e6,
           median_rate[c] / median_rate[base], allowed);
}

int main(int argc, char **argv)
{
    static const size_t sizes[] = {1000, 100000, 500000, 1000000, 1500000, 2000000};
    char key[KEY_STRIDE];

    nreq = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : 10000000u;
    if (getenv("BENCH_CPU") && strcmp(getenv("BENCH_CPU"), "1") == 0)
        run_clock = CLOCK_THREAD_CPUTIME_ID;
    if (nreq < NKEYS) {
        fprintf(stderr, "usage: bench_core [requests-per-run >= %u]\n", NKEYS);
        return 2;
    }
    stream = calloc(nreq + PREFETCH_AHEAD, KEY_STRIDE);
    floor_slots = calloc((size_t)1 << FLOOR_BITS, sizeof *floor_slots);
    if (!stream || !floor_slots) {
        fprintf(stderr, "bench_core: out of memory\n");
        return 1;
    }
    if (keytab_new(sizeof(int64_t), &counters) != SLUICE_OK) {
        fprintf(stderr, "bench_core: out of memory\n");
        return 1;
    }
    gcra_lim = new_limit(SLUICE_RATE, 1000, SLUICE_NS_PER_SEC);
    global_lim = new_limit(SLUICE_RATE, SLUICE_MAX_PERMITS, SLUICE_NS_PER_SEC);
    chain_rate_lim = new_limit(SLUICE_RATE, 1000, SLUICE_NS_PER_SEC);
    chain_window_lim = new_limit(SLUICE_WINDOW, 100000, 60 * SLUICE_NS_PER_SEC);
    hot_lim = new_limit(SLUICE_RATE, 1000, SLUICE_NS_PER_SEC);

    warm_up();
    for (size_t r = 0; r < nreq; r++) {
        uint32_t k = (uint32_t)(rng_next() % NKEYS);

        snprintf(key, sizeof key, "tenant:%06" PRIu32, k);
        memcpy(stream + r * KEY_STRIDE, key, KEY_STRIDE);
    }
    memcpy(stream + nreq * KEY_STRIDE, stream, PREFETCH_AHEAD * KEY_STRIDE);

    printf("bench_core: %u keys, %zu requests per run, median of %d round-robin runs, "
           "one thread, timed by %s\n\n",
           NKEYS, nreq, RUNS, run_clock == CLOCK_MONOTONIC ? "the monotonic clock" : "CPU time");
    measure_all();
    printf("  %-36s %14s %9s %12s\n", "case", "decisions/s", "vs floor", "allowed/run");
    print_case("floor (specialised table, int64)", CASE_FLOOR, CASE_FLOOR, 0);
    print_case("keytab (keytab_find, int64 counter)", CASE_KEYTAB, CASE_FLOOR, 0);
    print_case("gcra (sluice_limit_decide)", CASE_GCRA, CASE_FLOOR, 1);
    print_case("chain of 3 (rate, rate, window)", CASE_CHAIN, CASE_FLOOR, 1);
    print_case("hot key (one key, 1000/s)", CASE_HOT, CASE_FLOOR, 1);
    printf("  prefetching 8 ahead, against the floor prefetching 8 ahead:\n");
    print_case("floor, prefetching", CASE_FLOOR_PREFETCH, CASE_FLOOR_PREFETCH, 0);
    print_case("gcra, prefetching", CASE_GCRA_PREFETCH, CASE_FLOOR_PREFETCH, 1);
    print_case("chain of 3, prefetching", CASE_CHAIN_PREFETCH, CASE_FLOOR_PREFETCH, 1);

    printf("\nmemory after the runs (sluice_limit_get_stats):\n");
    print_bytes("gcra, per-key rate", gcra_lim);
    print_bytes("chain, per-key rate", chain_rate_lim);
    print_bytes("chain, per-key window", chain_window_lim);
    printf("  %-34s %8u keys %11zu bytes %7.1f bytes/key\n", "floor table", NKEYS,
           ((size_t)1 << FLOOR_BITS) * sizeof *floor_slots,
           (double)(((size_t)1 << FLOOR_BITS) * sizeof *floor_slots) / NKEYS);

    keytab_free(counters, NULL, NULL);
    sluice_limit_free(gcra_lim);
    sluice_limit_free(global_lim);
    sluice_limit_free(chain_rate_lim);
    sluice_limit_free(chain_window_lim);
    sluice_limit_free(hot_lim);
    free(floor_slots);
    free(stream);

    printf("\nbytes per tracked key by size (a per-key rate limit, 16-byte state):\n");
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        bytes_at_size(sizes[i]);
    return 0;
}
