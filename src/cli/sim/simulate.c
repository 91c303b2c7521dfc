/* SPDX-License-Identifier: MIT */
/*
 * `sluice simulate`: runs requests through one limit on a simulated clock and prints when each is
 * granted, then a summary.
 *
 * The subcommand has two modes chosen by its arguments: `--limit SPEC --arrivals SPEC` (the limit
 * mode, here) and a positional scenario file (the scenario mode: report.c, which drives the
 * whole engine). Both count time from 0 = SIMULATE_EPOCH_NS on the limit's clock; every printed
 * time is an offset from it.
 *
 * The simulation is a queue in front of the limit: requests are served in arrival order, each
 * one waiting for its slot behind the previous one, so the output shows how a limit paces a
 * backlog (seed 003's "15 at once, then one every 4 s").
 */
#include "cli/sim/simulate.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli/sim/arrivals.h"
#include "cli/sim/report.h"
#include "base/alloc.h"
#include "sluice/error.h"
#include "sluice/spec.h"

#define EXIT_RUN_FAILED 1
#define EXIT_USAGE      2

#define DEFAULT_HOLD_NS SLUICE_NS_PER_SEC

static const char usage_text[] =
    "Usage: sluice simulate --limit SPEC --arrivals SPEC [--units N] [--hold DURATION]\n"
    "                       [--format text|csv]\n"
    "       sluice simulate SCENARIO.yaml [--svg FILE] [--tasks] [--format text|csv]\n"
    "\n"
    "Runs requests through one limit on a simulated clock and shows when each is granted.\n"
    "Requests are served in arrival order; each waits for its slot behind the one before it.\n"
    "Nothing is dropped unless the limit can never grant it (more units than it holds, or a\n"
    "spent total quota): that request is rejected.\n"
    "\n"
    "Options:\n"
    "  -l, --limit SPEC       the limit (required), e.g. rate=15/1m,burst=15\n"
    "  -a, --arrivals SPEC    when the requests arrive (required), e.g. 20@0,5@90s,300@0..60s\n"
    "  -u, --units N          units each request asks for (default 1)\n"
    "      --hold DURATION    concurrency limits only: how long each granted request holds its\n"
    "                         lease before releasing it (default 1s; a shorter ttl wins)\n"
    "  -f, --format FORMAT    text (default): a table of arrival, grant and wait times and a\n"
    "                         summary; csv: the header index,arrival_s,granted_s then one line\n"
    "                         per request (granted_s empty when rejected)\n"
    "  -h, --help             show this help and exit\n"
    "\n"
    "Limit SPEC (one kind, then its options, comma-separated):\n"
    "  rate=N/PERIOD          N per PERIOD, paced evenly (GCRA); options burst=B (how many may\n"
    "                         go back-to-back, default N), start_empty (a new key has nothing\n"
    "                         saved up), horizon=DURATION (default 1h)\n"
    "  window=N/PERIOD        N per fixed window of PERIOD, windows aligned to the clock\n"
    "  sliding=N/PERIOD       N in any interval of length PERIOD\n"
    "  concurrency=N          N held at once; option ttl=DURATION (lease lifetime, default 30s)\n"
    "  quota=N/day|month|total  N per UTC calendar day or month, or N in total\n"
    "  any kind: max_keys=N, keys_overflow=refuse|allow, max_key_len=N\n"
    "  PERIOD, DURATION: a number with a unit ms, s, m, h or d (also us, ns): 250ms, 5s, 1m;\n"
    "  a PERIOD may be a bare unit: rate=10/s\n"
    "\n"
    "Arrivals SPEC (comma-separated groups):\n"
    "  N                      N requests at time 0\n"
    "  N@T                    N requests at once at time T (0, 90s, 2m)\n"
    "  N@T1..T2               N requests spread evenly from T1 to T2 (0..60s)\n"
    "\n"
    "Times are printed in seconds from time 0 (2024-01-01T00:00:00Z on the limit's clock).\n"
    "The text summary gives the requests granted and rejected, the most granted in any one\n"
    "period of the limit, and the mean rate per period from the first arrival to the last\n"
    "grant.\n"
    "\n"
    "Exit status: 0 done (rejections included), 1 the simulation failed, 2 bad usage or a\n"
    "malformed spec.\n"
    "\n"
    "Example: sluice simulate --limit rate=15/1m,burst=15 --arrivals 20\n"
    "  grants 15 requests at 0 s, then one every 4 s: 4, 8, 12, 16, 20 s.\n";

/* Output formats. */
typedef enum sim_format {
    FORMAT_TEXT,
    FORMAT_CSV,
} sim_format;

/* The command line of one run. */
typedef struct sim_options {
    const char *limit;    /* --limit SPEC, or NULL */
    const char *arrivals; /* --arrivals SPEC, or NULL */
    const char *scenario; /* the positional argument, or NULL */
    int64_t units;        /* --units */
    int64_t hold_ns;      /* --hold */
    int hold_given;       /* 1 when --hold was on the command line */
    sim_format format;    /* --format */
} sim_options;

/* ---- The simulation ---------------------------------------------------------------------- */

/* One lease waiting for its release. */
typedef struct pending_release {
    int64_t at_ns;     /* offset at which its holder releases it */
    uint64_t lease_id; /* the lease */
} pending_release;

int simulate_run(const sluice_limit_def *def, const int64_t *arrival_ns, size_t n, int64_t units,
                 int64_t hold_ns, int64_t *granted_ns, char *msg, size_t msglen)
{
    sluice_limit *lim = NULL;
    pending_release *rel = NULL;
    size_t rel_head = 0, rel_tail = 0;
    int concurrency = def->kind == SLUICE_CONCURRENCY;
    int64_t cursor = 0; /* when the previous request was decided */
    sluice_decision d;
    int rc;

    if (msg && msglen > 0)
        msg[0] = '\0';
    rc = sluice_limit_new(def, &lim, msg, msglen);
    if (rc != 0)
        return rc;
    if (concurrency && n > 0) {
        /* Grants come in time order and all hold for the same time, so releases are due in
         * grant order too: a queue, at most one entry per request. */
        rel = alloc_malloc(n * sizeof(*rel));
        if (!rel) {
            rc = SLUICE_ENOMEM;
            if (msg && msglen > 0)
                snprintf(msg, msglen, "out of memory");
            goto out;
        }
    }

    for (size_t i = 0; i < n; i++) {
        int64_t t = arrival_ns[i] > cursor ? arrival_ns[i] : cursor;

        for (;;) {
            int64_t next;

            while (concurrency && rel_head < rel_tail && rel[rel_head].at_ns <= t) {
                /* SLUICE_ESTALE: its TTL ran out first, and the limit already dropped it. */
                sluice_lease_release(lim, rel[rel_head].lease_id,
                                     SIMULATE_EPOCH_NS + rel[rel_head].at_ns);
                rel_head++;
            }
            rc = sluice_limit_decide(lim, "", 0, units, SIMULATE_EPOCH_NS + t, 0, &d);
            if (rc != 0) {
                if (msg && msglen > 0)
                    snprintf(msg, msglen, "request %zu: the limit failed: %s", i,
                             sluice_strerror(rc));
                goto out;
            }
            if (d.allowed) {
                granted_ns[i] = t;
                if (concurrency) {
                    rel[rel_tail].at_ns = t + hold_ns;
                    rel[rel_tail].lease_id = d.lease_id;
                    rel_tail++;
                }
                break;
            }
            if (d.retry_after_ns == SLUICE_NEVER) {
                granted_ns[i] = SIMULATE_REJECTED;
                break;
            }
            if (d.retry_after_ns > SIMULATE_MAX_SPAN_NS - t) {
                rc = SLUICE_ERANGE;
                if (msg && msglen > 0)
                    snprintf(msg, msglen,
                             "request %zu would wait past 100 years of simulated time; use fewer "
                             "arrivals or a faster limit",
                             i);
                goto out;
            }
            next = t + (d.retry_after_ns > 0 ? d.retry_after_ns : 1);
            /* A release may free units before the lease's TTL, which is all the limit knows. */
            if (concurrency && rel_head < rel_tail && rel[rel_head].at_ns < next)
                next = rel[rel_head].at_ns;
            t = next;
        }
        cursor = t;
    }
    rc = 0;
out:
    alloc_free(rel);
    sluice_limit_free(lim);
    return rc;
}

/* ---- Output ------------------------------------------------------------------------------ */

/* Writes ns (>= 0) as seconds with as many decimals as needed: "4", "0.25", "1.000000001". */
static void format_seconds(int64_t ns, char *buf, size_t len)
{
    int64_t frac = ns % SLUICE_NS_PER_SEC;
    size_t n;

    if (frac == 0) {
        snprintf(buf, len, "%" PRId64, ns / SLUICE_NS_PER_SEC);
        return;
    }
    snprintf(buf, len, "%" PRId64 ".%09" PRId64, ns / SLUICE_NS_PER_SEC, frac);
    n = strlen(buf);
    while (n > 0 && buf[n - 1] == '0')
        buf[--n] = '\0';
}

/* Writes x with at most two decimals, trailing zeros dropped: "20", "12.05", "0.5". */
static void format_rate(double x, char *buf, size_t len)
{
    size_t n;

    snprintf(buf, len, "%.2f", x);
    n = strlen(buf);
    while (n > 0 && buf[n - 1] == '0')
        buf[--n] = '\0';
    if (n > 0 && buf[n - 1] == '.')
        buf[--n] = '\0';
}

/* Returns the most grants in any half-open interval of length w_ns. granted_ns is non-decreasing
 * over its granted entries (grants are made in time order). */
static size_t max_in_window(const int64_t *granted_ns, size_t n, int64_t w_ns)
{
    size_t best = 0, in = 0, lo = 0;

    for (size_t hi = 0; hi < n; hi++) {
        if (granted_ns[hi] == SIMULATE_REJECTED)
            continue;
        in++;
        while (granted_ns[lo] == SIMULATE_REJECTED || granted_ns[lo] <= granted_ns[hi] - w_ns) {
            if (granted_ns[lo] != SIMULATE_REJECTED)
                in--;
            lo++;
        }
        if (in > best)
            best = in;
    }
    return best;
}

/* Returns the number of the UTC calendar day or month holding offset t_ns. */
static int64_t calendar_bucket(sluice_calendar cal, int64_t t_ns)
{
    time_t secs = (time_t)((SIMULATE_EPOCH_NS + t_ns) / SLUICE_NS_PER_SEC);
    struct tm tm;

    if (cal == SLUICE_CAL_DAY)
        return (SIMULATE_EPOCH_NS + t_ns) / (86400 * SLUICE_NS_PER_SEC);
    gmtime_r(&secs, &tm);
    return (int64_t)tm.tm_year * 12 + tm.tm_mon;
}

/* Returns the most grants in one calendar period of a quota. */
static size_t max_in_calendar(sluice_calendar cal, const int64_t *granted_ns, size_t n)
{
    size_t best = 0, in = 0;
    int64_t bucket = -1;

    for (size_t i = 0; i < n; i++) {
        int64_t b;

        if (granted_ns[i] == SIMULATE_REJECTED)
            continue;
        b = calendar_bucket(cal, granted_ns[i]);
        in = b == bucket ? in + 1 : 1;
        bucket = b;
        if (in > best)
            best = in;
    }
    return best;
}

static void print_csv(const arrivals *arr, const int64_t *granted_ns)
{
    char a[32], g[32];

    printf("index,arrival_s,granted_s\n");
    for (size_t i = 0; i < arr->n; i++) {
        format_seconds(arr->at_ns[i], a, sizeof(a));
        g[0] = '\0';
        if (granted_ns[i] != SIMULATE_REJECTED)
            format_seconds(granted_ns[i], g, sizeof(g));
        printf("%zu,%s,%s\n", i, a, g);
    }
}

static void print_text(const sim_options *o, const sluice_limit_def *def, const arrivals *arr,
                       const int64_t *granted_ns)
{
    char spec[SLUICE_SPEC_MAX_LEN], a[32], g[32], w[32], per[SLUICE_SPEC_DURATION_MAX_LEN];
    char rate[48];
    size_t granted = 0, wa = strlen("arrival_s"), wg = strlen("granted_s"), ww = strlen("wait_s");
    size_t wi = strlen("index"), best;
    int64_t first = arr->n > 0 ? arr->at_ns[0] : 0, last = first, per_ns;

    /* Column widths: the longest value of each. */
    for (size_t i = 0; i < arr->n; i++) {
        format_seconds(arr->at_ns[i], a, sizeof(a));
        wa = strlen(a) > wa ? strlen(a) : wa;
        if (granted_ns[i] == SIMULATE_REJECTED)
            continue;
        granted++;
        last = granted_ns[i];
        format_seconds(granted_ns[i], g, sizeof(g));
        wg = strlen(g) > wg ? strlen(g) : wg;
        format_seconds(granted_ns[i] - arr->at_ns[i], w, sizeof(w));
        ww = strlen(w) > ww ? strlen(w) : ww;
    }
    snprintf(a, sizeof(a), "%zu", arr->n);
    wi = strlen(a) > wi ? strlen(a) : wi;

    sluice_spec_format_limit(def, spec, sizeof(spec));
    printf("limit     %s\n", spec);
    printf("requests  %zu of %" PRId64 " unit%s", arr->n, o->units, o->units == 1 ? "" : "s");
    if (def->kind == SLUICE_CONCURRENCY) {
        sluice_spec_format_duration(o->hold_ns, per, sizeof(per));
        printf(", each holding its lease for %s", per);
    }
    printf("\n\n");
    printf("%*s  %*s  %*s  %*s\n", (int)wi, "index", (int)wa, "arrival_s", (int)wg, "granted_s",
           (int)ww, "wait_s");
    for (size_t i = 0; i < arr->n; i++) {
        format_seconds(arr->at_ns[i], a, sizeof(a));
        if (granted_ns[i] == SIMULATE_REJECTED) {
            printf("%*zu  %*s  %*s\n", (int)wi, i, (int)wa, a, (int)wg, "rejected");
            continue;
        }
        format_seconds(granted_ns[i], g, sizeof(g));
        format_seconds(granted_ns[i] - arr->at_ns[i], w, sizeof(w));
        printf("%*zu  %*s  %*s  %*s\n", (int)wi, i, (int)wa, a, (int)wg, g, (int)ww, w);
    }

    printf("\ngranted    %zu of %zu (%zu rejected)\n", granted, arr->n, arr->n - granted);
    switch (def->kind) {
    case SLUICE_RATE:
    case SLUICE_WINDOW:
    case SLUICE_SLIDING:
        per_ns = def->period_ns;
        best = max_in_window(granted_ns, arr->n, per_ns);
        sluice_spec_format_duration(per_ns, per, sizeof(per));
        printf("max        %zu in any %s\n", best, per);
        break;
    case SLUICE_CONCURRENCY:
        /* A lease is held from its grant for the hold or the TTL, whichever ends first, so the
         * most held at once is the most grants within that time. */
        best =
            max_in_window(granted_ns, arr->n, o->hold_ns < def->ttl_ns ? o->hold_ns : def->ttl_ns);
        printf("max held   %zu at once (%" PRId64 " units)\n", best, (int64_t)best * o->units);
        per_ns = SLUICE_NS_PER_SEC;
        break;
    case SLUICE_QUOTA:
    default:
        per_ns = 86400 * SLUICE_NS_PER_SEC;
        if (def->calendar == SLUICE_CAL_NONE)
            return;
        best = max_in_calendar(def->calendar, granted_ns, arr->n);
        printf("max        %zu in one calendar %s\n", best,
               def->calendar == SLUICE_CAL_DAY ? "day" : "month");
        break;
    }
    if (granted == 0)
        return;
    /* Over the time from the first arrival to the last grant, but at least one period, so that
     * a burst granted at once counts as that many per period rather than as infinitely fast. */
    {
        int64_t span = last - first > per_ns ? last - first : per_ns;
        format_rate((double)granted * (double)per_ns / (double)span, rate, sizeof(rate));
        sluice_spec_format_duration(per_ns, per, sizeof(per));
        printf("mean rate  %s per %s\n", rate, per);
    }
}

/* ---- Modes ------------------------------------------------------------------------------- */

/* `sluice simulate --limit SPEC --arrivals SPEC`. */
static int simulate_limit(const sim_options *o)
{
    sluice_limit_def def;
    arrivals *arr = NULL;
    int64_t *granted = NULL;
    char msg[512];
    int status = EXIT_RUN_FAILED;
    int rc;

    if (!o->limit || !o->arrivals) {
        fprintf(stderr, "sluice simulate: %s is required; see sluice simulate --help\n",
                !o->limit ? "--limit" : "--arrivals");
        return EXIT_USAGE;
    }
    rc = sluice_spec_parse_limit(o->limit, &def, msg, sizeof(msg));
    if (rc != 0) {
        fprintf(stderr, "sluice simulate: --limit: %s\n", msg);
        return EXIT_USAGE;
    }
    if (o->hold_given && def.kind != SLUICE_CONCURRENCY) {
        fprintf(stderr,
                "sluice simulate: --hold applies to concurrency limits only, not to a %s "
                "limit\n",
                sluice_limit_kind_name(def.kind));
        return EXIT_USAGE;
    }
    rc = arrivals_parse(o->arrivals, &arr, msg, sizeof(msg));
    if (rc != 0) {
        fprintf(stderr, "sluice simulate: --arrivals: %s\n", msg);
        return rc == SLUICE_ENOMEM ? EXIT_RUN_FAILED : EXIT_USAGE;
    }
    granted = alloc_malloc(arr->n * sizeof(*granted));
    if (!granted) {
        fprintf(stderr, "sluice simulate: out of memory\n");
        goto out;
    }
    rc = simulate_run(&def, arr->at_ns, arr->n, o->units, o->hold_ns, granted, msg, sizeof(msg));
    if (rc != 0) {
        fprintf(stderr, "sluice simulate: %s\n", msg[0] ? msg : sluice_strerror(rc));
        goto out;
    }
    if (o->format == FORMAT_CSV)
        print_csv(arr, granted);
    else
        print_text(o, &def, arr, granted);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "sluice simulate: cannot write the output\n");
        goto out;
    }
    status = 0;
out:
    alloc_free(granted);
    arrivals_free(arr);
    return status;
}

/* ---- Command line ------------------------------------------------------------------------ */

enum { OPT_HOLD = 256 };

static const struct option long_options[] = {
    {"limit", required_argument, NULL, 'l'},
    {"arrivals", required_argument, NULL, 'a'},
    {"units", required_argument, NULL, 'u'},
    {"hold", required_argument, NULL, OPT_HOLD},
    {"format", required_argument, NULL, 'f'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

/* Parses --units: a whole number from 1 to SLUICE_MAX_PERMITS. */
static int parse_units(const char *s, int64_t *out)
{
    int64_t v = 0;

    if (!*s)
        return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        v = v * 10 + (*s - '0');
        if (v > SLUICE_MAX_PERMITS)
            return -1;
    }
    if (v < 1)
        return -1;
    *out = v;
    return 0;
}

/* Fills o from argv. Returns -1 to go on, or the exit status to stop with. */
static int parse_options(int argc, char **argv, sim_options *o)
{
    int c;

    memset(o, 0, sizeof(*o));
    o->units = 1;
    o->hold_ns = DEFAULT_HOLD_NS;
    o->format = FORMAT_TEXT;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":l:a:u:f:h", long_options, NULL)) != -1) {
        switch (c) {
        case 'l':
            o->limit = optarg;
            break;
        case 'a':
            o->arrivals = optarg;
            break;
        case 'u':
            if (parse_units(optarg, &o->units) != 0) {
                fprintf(stderr,
                        "sluice simulate: bad --units \"%s\": expected a whole number "
                        "from 1 to 1000000000\n",
                        optarg);
                return EXIT_USAGE;
            }
            break;
        case OPT_HOLD:
            if (sluice_spec_parse_duration(optarg, strlen(optarg), &o->hold_ns) != 0 ||
                o->hold_ns < 1) {
                fprintf(stderr,
                        "sluice simulate: bad --hold \"%s\": expected a positive number "
                        "with a unit ms, s, m, h or d\n",
                        optarg);
                return EXIT_USAGE;
            }
            o->hold_given = 1;
            break;
        case 'f':
            if (strcmp(optarg, "text") == 0) {
                o->format = FORMAT_TEXT;
            } else if (strcmp(optarg, "csv") == 0) {
                o->format = FORMAT_CSV;
            } else {
                fprintf(stderr, "sluice simulate: bad --format \"%s\": expected text or csv\n",
                        optarg);
                return EXIT_USAGE;
            }
            break;
        case 'h':
            fputs(usage_text, stdout);
            return 0;
        case ':':
            fprintf(stderr,
                    "sluice simulate: option %s needs a value; see sluice simulate --help\n",
                    argv[optind - 1]);
            return EXIT_USAGE;
        default:
            if (optopt)
                fprintf(stderr, "sluice simulate: unknown option -%c; see sluice simulate --help\n",
                        optopt);
            else
                fprintf(stderr, "sluice simulate: unknown option %s; see sluice simulate --help\n",
                        argv[optind - 1]);
            return EXIT_USAGE;
        }
    }
    if (optind < argc) {
        o->scenario = argv[optind];
        if (optind + 1 < argc) {
            fprintf(stderr,
                    "sluice simulate: unexpected argument \"%s\"; see sluice simulate "
                    "--help\n",
                    argv[optind + 1]);
            return EXIT_USAGE;
        }
    }
    return -1;
}

int simulate_main(int argc, char **argv)
{
    sim_options o;
    int status;

    /* A scenario file has options of its own (--svg, --tasks): the scenario mode reads them. */
    if (simreport_is_scenario(argc, argv))
        return simreport_main(argc, argv);
    status = parse_options(argc, argv, &o);
    if (status >= 0)
        return status;
    if (o.scenario)
        return simreport_main(argc, argv);
    return simulate_limit(&o);
}
