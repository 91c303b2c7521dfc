/* SPDX-License-Identifier: MIT */
/*
 * `sluice simulate SCENARIO.yaml`: the command, and the reports of a run (see report.h).
 *
 * Times are printed in seconds from time 0, rounded to the millisecond and without trailing
 * zeros ("4", "0.6", "12.345"). "Units" and "grants" are the same number unless some task asked
 * for more than one unit; the report says units only when they differ.
 */
#include "cli/sim/report.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli/sim/scenario.h"
#include "cli/sim/chart.h"
#include "cli/sim/keys.h"
#include "cli/sim/svg.h"
#include "base/alloc.h"
#include "sluice/error.h"
#include "sluice/spec.h"

#define EXIT_FAILED 1
#define EXIT_USAGE  2

#define TABLE_KEYS 40 /* rows of the per-key table before "... more" */

static const char usage_text[] =
    "Usage: sluice simulate SCENARIO.yaml [--svg FILE] [--tasks] [--format text|csv]\n"
    "\n"
    "Runs the engine on a simulated clock: the limits and task types of the file's configuration\n"
    "sections, and the arrivals and workers of its scenario: section (docs/simulation.md).\n"
    "\n"
    "Options:\n"
    "  -s, --svg FILE         also draw the timeline into FILE: units granted per key against\n"
    "                         each limit, and the parked depth over time\n"
    "  -t, --tasks            print every task, also when there are more than 200\n"
    "  -f, --format FORMAT    text (default), or csv: index,arrival_s,granted_s,type,key,outcome\n"
    "  -h, --help             show this help and exit\n"
    "\n"
    "Exit status: 0 done, 1 a malformed file or a failed simulation, 2 bad usage.\n";

/* ---- Formatting ---------------------------------------------------------------------------- */

/* Writes ns as seconds rounded to the millisecond: "4", "0.6", "12.345", "-" when negative. */
/* Drops the trailing zeros of a decimal number in buf, and the point when nothing follows it. */
static const char *trim_zeros(char *buf)
{
    size_t n = strlen(buf);

    while (n > 0 && buf[n - 1] == '0')
        buf[--n] = '\0';
    if (n > 0 && buf[n - 1] == '.')
        buf[--n] = '\0';
    return buf;
}

static const char *secs(int64_t ns, char *buf, size_t len)
{
    int64_t ms;

    if (ns < 0) {
        snprintf(buf, len, "-");
        return buf;
    }
    ms = (ns + 500000) / 1000000;
    snprintf(buf, len, "%" PRId64 ".%03" PRId64, ms / 1000, ms % 1000);
    return trim_zeros(buf);
}

/* Writes ns (>= 0) as exact seconds, trailing zeros dropped: "4", "0.6", "302.786836111". */
static const char *exact_secs(int64_t ns, char *buf, size_t len)
{
    snprintf(buf, len, "%" PRId64 ".%09" PRId64, ns / SLUICE_NS_PER_SEC, ns % SLUICE_NS_PER_SEC);
    return trim_zeros(buf);
}

/* Writes x with at most two decimals, trailing zeros dropped. */
static const char *num(double x, char *buf, size_t len)
{
    snprintf(buf, len, "%.2f", x);
    return trim_zeros(buf);
}

static const char *dur(int64_t ns, char *buf, size_t len)
{
    if (sluice_spec_format_duration(ns, buf, len) != 0)
        snprintf(buf, len, "?");
    return buf;
}

/* The limit's one-line spec, e.g. "rate=15/1m". */
static const char *spec_of(const sluice_limit_def *def, char *buf, size_t len)
{
    if (sluice_spec_format_limit(def, buf, len) != 0)
        snprintf(buf, len, "%s", sluice_limit_kind_name(def->kind));
    return buf;
}

/* How a task ended, as one word: done, failed:dead, rejected:LIMIT, unfinished:parked... */
static void outcome_text(const simrun_task *t, char *buf, size_t len)
{
    switch (t->outcome) {
    case SIMRUN_FAILED:
        snprintf(buf, len, "failed:%s", sluice_fail_reason_name(t->reason));
        break;
    case SIMRUN_REJECTED:
        snprintf(buf, len, "rejected:%s", t->why ? t->why : sluice_fail_reason_name(t->reason));
        break;
    case SIMRUN_PENDING:
    case SIMRUN_RUNNING:
    case SIMRUN_RETRYING:
        snprintf(buf, len, "unfinished:%s",
                 t->final_state ? sluice_task_state_name(t->final_state)
                                : simrun_outcome_name(t->outcome));
        break;
    default:
        snprintf(buf, len, "%s", simrun_outcome_name(t->outcome));
        break;
    }
}

static int unfinished(const simrun_task *t)
{
    return t->outcome == SIMRUN_PENDING || t->outcome == SIMRUN_RUNNING ||
           t->outcome == SIMRUN_RETRYING;
}

/* ---- CSV ----------------------------------------------------------------------------------- */

/* Writes a CSV field, quoted when it holds a comma, a quote or a line break. */
static void csv_field(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

void simreport_csv(FILE *f, const simrun_result *r)
{
    char a[32], g[32], o[200];

    fprintf(f, "index,arrival_s,granted_s,type,key,outcome\n");
    for (size_t i = 0; i < r->ntasks; i++) {
        const simrun_task *t = &r->tasks[i];

        exact_secs(t->arrival_ns, a, sizeof(a));
        if (t->start_ns >= 0)
            exact_secs(t->start_ns, g, sizeof(g));
        else
            g[0] = '\0';
        outcome_text(t, o, sizeof(o));
        fprintf(f, "%zu,%s,%s,", i, a, g);
        csv_field(f, t->type);
        fputc(',', f);
        csv_field(f, t->key ? t->key : "");
        fputc(',', f);
        csv_field(f, o);
        fputc('\n', f);
    }
}

/* ---- Text ---------------------------------------------------------------------------------- */

static void print_setting(FILE *f, const simrun_result *r, const char *file)
{
    const scenario *sc = r->sc;
    const sluice_config *cfg = r->cfg;
    char b1[SLUICE_SPEC_MAX_LEN], b2[64];

    fprintf(f, "scenario  %s", file);
    if (sc->title)
        fprintf(f, ": %s", sc->title);
    fprintf(f, "\n          %zu task%s in %zu stream%s", sc->total, sc->total == 1 ? "" : "s",
            sc->nstreams, sc->nstreams == 1 ? "" : "s");
    if (sc->nrecurring)
        fprintf(f, " + %zu recurring series", sc->nrecurring);
    fprintf(f, ", seed %" PRIu64, sc->seed);
    if (sc->duration_ns)
        fprintf(f, ", duration %s", dur(sc->duration_ns, b2, sizeof(b2)));
    fprintf(f, "\n");
    for (size_t i = 0; i < cfg->nlimits; i++) {
        const sluice_limit_policy *p = &cfg->limits[i];

        fprintf(f, "%-9s %s: ", i == 0 ? "limits" : "", p->name);
        if (p->ntiers > 0) {
            fprintf(f, "tiers on %s:", p->tier_path ? p->tier_path : "?");
            for (size_t t = 0; t < p->ntiers; t++)
                fprintf(f, " %s %s%s", p->tiers[t].name, spec_of(&p->tiers[t].def, b1, sizeof(b1)),
                        t + 1 < p->ntiers ? "," : "");
        } else {
            fprintf(f, "%s", spec_of(&p->def, b1, sizeof(b1)));
        }
        if (p->key_source == SLUICE_KEY_EXPLICIT)
            fprintf(f, ", key explicit");
        else if (p->key_source == SLUICE_KEY_PATH)
            fprintf(f, ", key %s", p->key_path);
        if (p->overflow == SLUICE_OVERFLOW_REJECT)
            fprintf(f, ", overflow reject");
        fprintf(f, "\n");
    }
    for (size_t i = 0; i < cfg->ntypes; i++) {
        const sluice_type_policy *t = &cfg->types[i];

        fprintf(f, "%-9s %s:", i == 0 ? "types" : "", t->name);
        if (t->nlimits == 0)
            fprintf(f, " no limits");
        for (size_t j = 0; j < t->nlimits; j++)
            fprintf(f, "%s %s", j ? "," : "", t->limits[j]);
        if (t->fairness == SLUICE_FAIR_KEYS && t->fair_key)
            fprintf(f, "; fair between keys of %s", t->fair_key);
        if (t->charge_redelivery)
            fprintf(f, "; redeliveries pay again");
        fprintf(f, "\n");
    }
    for (size_t i = 0; i < sc->nworkers; i++) {
        const scenario_workers *w = &sc->workers[i];

        fprintf(f, "%-9s %zu for ", i == 0 ? "workers" : "", w->count);
        if (w->ntypes == 0)
            fprintf(f, "any type");
        for (size_t j = 0; j < w->ntypes; j++)
            fprintf(f, "%s%s", j ? ", " : "", w->types[j]);
        fprintf(f, ", service %s", dur(w->service_min_ns, b2, sizeof(b2)));
        if (w->service_max_ns != w->service_min_ns)
            fprintf(f, "..%s", dur(w->service_max_ns, b2, sizeof(b2)));
        if (w->failure_rate > 0)
            fprintf(f, ", %s%% fail (%s)", num(w->failure_rate * 100, b2, sizeof(b2)),
                    w->failure_mode == SCENARIO_FAIL_DEAD ? "dead" : "retry");
        fprintf(f, "\n");
    }
}

static void print_tasks(FILE *f, const simrun_result *r)
{
    size_t wi = 4, wt = 4, wk = 3, wa = 9, ws = 7, we = 5, ww = 6;
    char a[32], s[32], e[32], w[32], o[200], u[32];
    int weighted = 0;

    for (size_t i = 0; i < r->ntasks; i++) {
        const simrun_task *t = &r->tasks[i];
        size_t l;

        weighted |= t->units != 1;
        snprintf(a, sizeof(a), "%zu", i);
        wi = strlen(a) > wi ? strlen(a) : wi;
        wt = strlen(t->type) > wt ? strlen(t->type) : wt;
        l = t->key ? strlen(t->key) : 0;
        wk = l > wk ? (l > 40 ? 40 : l) : wk;
        wa = strlen(secs(t->arrival_ns, a, sizeof(a))) > wa ? strlen(a) : wa;
        ws = strlen(secs(t->start_ns, a, sizeof(a))) > ws ? strlen(a) : ws;
        we = strlen(secs(t->end_ns, a, sizeof(a))) > we ? strlen(a) : we;
    }
    fprintf(f, "\n%*s  %-*s  %-*s  %*s  %*s  %*s  %*s  %5s%s  %s\n", (int)wi, "task", (int)wt,
            "type", (int)wk, "key", (int)wa, "arrival_s", (int)ws, "start_s", (int)we, "end_s",
            (int)ww, "wait_s", "tries", weighted ? "   units" : "", "outcome");
    for (size_t i = 0; i < r->ntasks; i++) {
        const simrun_task *t = &r->tasks[i];

        secs(t->arrival_ns, a, sizeof(a));
        secs(t->start_ns, s, sizeof(s));
        secs(t->end_ns, e, sizeof(e));
        secs(t->start_ns >= 0 ? t->start_ns - t->arrival_ns : -1, w, sizeof(w));
        outcome_text(t, o, sizeof(o));
        u[0] = '\0';
        if (weighted)
            snprintf(u, sizeof(u), "  %6" PRId64, t->units);
        fprintf(f, "%*zu  %-*s  %-*.40s  %*s  %*s  %*s  %*s  %5d%s  %s\n", (int)wi, i, (int)wt,
                t->type, (int)wk, t->key ? t->key : "", (int)wa, a, (int)ws, s, (int)we, e, (int)ww,
                w, t->attempts, u, o);
    }
}

/* Writes "N in any PERIOD" (or the figure of a concurrency or quota limit) for series s. */
static void max_text(const simrun_series *s, char *buf, size_t len)
{
    char d[32];
    const char *what = s->weighted ? " units" : "";

    switch (s->def.kind) {
    case SLUICE_CONCURRENCY:
        snprintf(buf, len, "%" PRId64 "%s held at once", s->max_period, what);
        break;
    case SLUICE_QUOTA:
        snprintf(buf, len, "%" PRId64 "%s in one %s", s->max_period, what,
                 s->def.calendar == SLUICE_CAL_DAY     ? "day"
                 : s->def.calendar == SLUICE_CAL_MONTH ? "month"
                                                       : "run");
        break;
    default:
        if (s->max_minute >= 0)
            snprintf(buf, len, "%" PRId64 "%s in any %s, %" PRId64 " in any 1m", s->max_period,
                     what, dur(s->def.period_ns, d, sizeof(d)), s->max_minute);
        else
            snprintf(buf, len, "%" PRId64 "%s in any %s", s->max_period, what,
                     dur(s->def.period_ns, d, sizeof(d)));
        break;
    }
}

static void print_keys(FILE *f, const simrun_result *r, const size_t *ord)
{
    size_t wl = 5, wt = 4, wk = 3, wm = 3, shown = 0;
    char a[32], b[32], m[96], sp[SLUICE_SPEC_MAX_LEN];

    if (r->nseries == 0)
        return;
    for (size_t i = 0; i < r->nseries && i < TABLE_KEYS; i++) {
        const simrun_series *s = &r->series[ord[i]];
        size_t l = strlen(s->key);

        if (l == 0)
            l = strlen("(global)");
        wl = strlen(s->limit) > wl ? strlen(s->limit) : wl;
        wt = s->tier && strlen(s->tier) > wt ? strlen(s->tier) : wt;
        wk = l > wk ? (l > 40 ? 40 : l) : wk;
        max_text(s, m, sizeof(m));
        if (s->rejected)
            snprintf(m + strlen(m), sizeof(m) - strlen(m), ", %zu rejected", s->rejected);
        wm = strlen(m) > wm ? strlen(m) : wm;
    }
    fprintf(f, "\n%-*s  %-*s  %-*s  %6s  %7s  %8s  %8s  %-*s  %s\n", (int)wl, "limit", (int)wt,
            "tier", (int)wk, "key", "grants", "units", "first_s", "last_s", (int)wm, "max",
            "limit is");
    for (size_t i = 0; i < r->nseries; i++) {
        const simrun_series *s = &r->series[ord[i]];

        if (shown == TABLE_KEYS) {
            fprintf(f, "... %zu more keys\n", r->nseries - shown);
            break;
        }
        shown++;
        max_text(s, m, sizeof(m));
        if (s->rejected)
            snprintf(m + strlen(m), sizeof(m) - strlen(m), ", %zu rejected", s->rejected);
        fprintf(f, "%-*s  %-*s  %-*.40s  %6zu  %7" PRId64 "  %8s  %8s  %-*s  %s\n", (int)wl,
                s->limit, (int)wt, s->tier ? s->tier : "-", (int)wk,
                s->key[0] ? s->key : "(global)", s->n, s->n ? s->cum[s->n - 1] : 0,
                s->n ? secs(s->t_ns[0], a, sizeof(a)) : "-",
                s->n ? secs(s->t_ns[s->n - 1], b, sizeof(b)) : "-", (int)wm, m,
                spec_of(&s->def, sp, sizeof(sp)));
    }
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile p (0 < p <= 100) of n sorted values. */
static int64_t pct(const int64_t *v, size_t n, int p)
{
    size_t rank = ((size_t)p * n + 99) / 100;

    return v[rank > 0 ? rank - 1 : 0];
}

static void print_summary(FILE *f, const simrun_result *r, const size_t *ord)
{
    size_t by[SIMRUN_REFUSED + 1] = {0}, started = 0, unfin = 0;
    int64_t first = INT64_MAX, last_end = 0, *waits;
    char a[32], b[32], c[32], d[32], m[128], sp[SLUICE_SPEC_MAX_LEN];

    for (size_t i = 0; i < r->ntasks; i++) {
        const simrun_task *t = &r->tasks[i];

        by[t->outcome]++;
        if (unfinished(t))
            unfin++;
        if (t->arrival_ns >= 0 && t->arrival_ns < first)
            first = t->arrival_ns;
        if (t->outcome == SIMRUN_DONE && t->end_ns > last_end)
            last_end = t->end_ns;
        if (t->start_ns >= 0)
            started++;
    }
    fprintf(f, "\nsummary\n");
    fprintf(f, "  tasks        %zu submitted: %zu done, %zu failed, %zu rejected", r->ntasks,
            by[SIMRUN_DONE], by[SIMRUN_FAILED], by[SIMRUN_REJECTED]);
    if (by[SIMRUN_REFUSED])
        fprintf(f, ", %zu refused", by[SIMRUN_REFUSED]);
    if (by[SIMRUN_CANCELLED])
        fprintf(f, ", %zu cancelled", by[SIMRUN_CANCELLED]);
    if (by[SIMRUN_SKIPPED])
        fprintf(f, ", %zu skipped", by[SIMRUN_SKIPPED]);
    fprintf(f, ", %zu unfinished\n", unfin);
    if (r->stats.retried || r->stats.redelivered)
        fprintf(f, "  retries      %" PRIu64 " retried, %" PRIu64 " redelivered\n",
                r->stats.retried, r->stats.redelivered);
    if (r->refused)
        fprintf(f, "  refused      first: %s\n", r->first_refusal);
    if (by[SIMRUN_DONE] > 0 && first != INT64_MAX) {
        int64_t span = last_end - first;

        if (span > 0) {
            double per_min = (double)by[SIMRUN_DONE] * 6e10 / (double)span;

            fprintf(f, "  throughput   %zu done in %ss: %s per second, %s per minute",
                    by[SIMRUN_DONE], secs(span, a, sizeof(a)), num(per_min / 60, b, sizeof(b)),
                    num(per_min, c, sizeof(c)));
            if (per_min < 1)
                fprintf(f, ", %s per hour", num(per_min * 60, d, sizeof(d)));
            fprintf(f, "\n");
        } else
            fprintf(f, "  throughput   %zu done at once (at %ss)\n", by[SIMRUN_DONE],
                    secs(last_end, a, sizeof(a)));
    }
    waits = started ? alloc_malloc(started * sizeof(*waits)) : NULL;
    if (waits) {
        size_t n = 0;

        for (size_t i = 0; i < r->ntasks; i++) {
            if (r->tasks[i].start_ns >= 0)
                waits[n++] = r->tasks[i].start_ns - r->tasks[i].arrival_ns;
        }
        qsort(waits, n, sizeof(*waits), cmp_i64);
        fprintf(f, "  wait         p50 %ss, p90 %ss, p99 %ss, max %ss\n",
                secs(pct(waits, n, 50), a, sizeof(a)), secs(pct(waits, n, 90), b, sizeof(b)),
                secs(pct(waits, n, 99), c, sizeof(c)), secs(waits[n - 1], d, sizeof(d)));
        alloc_free(waits);
    }
    /* The busiest key of every limit (and tier): series are in limit, tier order. */
    for (size_t i = 0; i < r->nseries; i++) {
        const simrun_series *s = &r->series[ord[i]], *best = s;
        size_t j = i + 1;

        while (j < r->nseries && strcmp(r->series[ord[j]].limit, s->limit) == 0 &&
               strcmp(r->series[ord[j]].tier ? r->series[ord[j]].tier : "",
                      s->tier ? s->tier : "") == 0) {
            if (r->series[ord[j]].max_period > best->max_period)
                best = &r->series[ord[j]];
            j++;
        }
        max_text(best, m, sizeof(m));
        fprintf(f, "  %-12s %s%s%s: %s (limit %s", i == 0 ? "max grants" : "", best->limit,
                best->tier ? "/" : "", best->tier ? best->tier : "", m,
                spec_of(&best->def, sp, sizeof(sp)));
        if (best->key[0])
            fprintf(f, "; busiest key %s", best->key);
        fprintf(f, ")\n");
        i = j - 1;
    }
    fprintf(f, "  parked peak  %zu\n", r->stats.parked_peak);
    if (r->events[SLUICE_EVENT_THROTTLED] || r->events[SLUICE_EVENT_DEFERRED] ||
        r->events[SLUICE_EVENT_REJECTED])
        fprintf(
            f, "  events       %" PRIu64 " throttled, %" PRIu64 " deferred, %" PRIu64 " rejected\n",
            r->events[SLUICE_EVENT_THROTTLED], r->events[SLUICE_EVENT_DEFERRED],
            r->events[SLUICE_EVENT_REJECTED]);
    fprintf(f, "  simulated    %ss", secs(r->end_ns, a, sizeof(a)));
    if (r->end_ns >= 3600 * SLUICE_NS_PER_SEC) {
        svg_format_time(r->end_ns, b, sizeof(b));
        fprintf(f, " (%s)", b);
    }
    if (r->stopped)
        fprintf(f, " (stopped with work left: %s)",
                r->sc->duration_ns ? "the scenario's duration" : "the 30-day cap");
    fprintf(f, "\n");
}

/* Points of an adaptive key's rate listed before "... (N more)". */
#define RATE_POINTS_SHOWN 12

/* The scenario's upstream and the adaptive rates that learned it: how many calls it refused,
 * how many in the last quarter of the run (the convergence), the tasks done per second then,
 * and each adaptive key's rate after each 429 and at the end. */
static void print_upstream(FILE *f, const simrun_result *r)
{
    const scenario *sc = r->sc;
    int64_t span = r->end_ns, q = span - span / 4;
    size_t late429 = 0, late_done = 0;
    char b1[32], b2[32], b3[32];

    if (sc->upstream_permits == 0)
        return;
    for (size_t i = 0; i < r->n429; i++)
        late429 += r->u429_ns[i] >= q;
    for (size_t i = 0; i < r->ntasks; i++)
        late_done += r->tasks[i].outcome == SIMRUN_DONE && r->tasks[i].end_ns >= q;
    fprintf(f, "\nUpstream (hidden rate %" PRId64 "/%s): %zu calls answered 429",
            sc->upstream_permits, dur(sc->upstream_period_ns, b1, sizeof b1), r->n429);
    if (r->n429 > 0)
        fprintf(f, ", the last at %ss", secs(r->u429_ns[r->n429 - 1], b2, sizeof b2));
    fprintf(f,
            ".\nLast quarter of the run (from %ss): %zu answered 429, %s tasks done per second.\n",
            secs(q, b2, sizeof b2), late429,
            num(span > q ? (double)late_done * 1e9 / (double)(span - q) : 0, b3, sizeof b3));
    for (size_t i = 0; i < r->nseries; i++) {
        const simrun_series *s = &r->series[i];
        char per[32];

        if (s->def.kind != SLUICE_RATE || s->def.decrease_den == 0)
            continue;
        dur(s->def.period_ns, per, sizeof per);
        fprintf(f, "Adaptive rate of %s%s%s key \"%s\": %" PRId64 "/%s", s->limit,
                s->tier ? "/" : "", s->tier ? s->tier : "", s->key, s->def.limit, per);
        for (size_t k = 0; k < s->nrate && k < RATE_POINTS_SHOWN; k++)
            fprintf(f, ", %" PRId64 "/%s at %ss", s->rate_v[k], per,
                    secs(s->rate_t[k], b2, sizeof b2));
        if (s->nrate > RATE_POINTS_SHOWN)
            fprintf(f, ", ... (%zu more)", s->nrate - RATE_POINTS_SHOWN);
        fprintf(f, "; at the end %" PRId64 "/%s.\n", s->rate_end, per);
    }
}

void simreport_text(FILE *f, const simrun_result *r, const char *file, int all_tasks)
{
    size_t *ord = simkeys_order(r);

    print_setting(f, r, file);
    if (all_tasks || r->ntasks <= SIMREPORT_TASKS_MAX)
        print_tasks(f, r);
    else
        fprintf(f,
                "\n(%zu tasks: per-task lines left out; --tasks prints them, --format csv "
                "writes them as CSV)\n",
                r->ntasks);
    if (ord) {
        print_keys(f, r, ord);
        print_summary(f, r, ord);
    }
    print_upstream(f, r);
    alloc_free(ord);
}

/* ---- The command --------------------------------------------------------------------------- */

int simreport_is_scenario(int argc, char **argv)
{
    static const char *const with_value[] = {"-l",       "--limit", "-a",     "--arrivals",
                                             "-u",       "--units", "--hold", "-f",
                                             "--format", "-s",      "--svg"};

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        size_t k;

        if (strcmp(a, "--") == 0)
            return i + 1 < argc;
        if (a[0] != '-' || a[1] == '\0')
            return 1;
        for (k = 0; k < sizeof(with_value) / sizeof(with_value[0]); k++) {
            if (strcmp(a, with_value[k]) == 0)
                break;
        }
        if (k < sizeof(with_value) / sizeof(with_value[0]))
            i++;
    }
    return 0;
}

/* Reads a whole file. Returns 0, or 1 with the message printed. */
static int read_all(const char *path, char **text, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL, *nb;
    size_t cap = 0, n = 0, got;

    *text = NULL;
    *len = 0;
    if (!f) {
        fprintf(stderr, "sluice simulate: %s: cannot open: %s\n", path, strerror(errno));
        return 1;
    }
    do {
        if (n == cap) {
            cap = cap ? cap * 2 : 65536;
            if (cap > SLUICE_CONFIG_MAX_BYTES * 2) {
                fprintf(stderr, "sluice simulate: %s: larger than %zu bytes\n", path,
                        (size_t)SLUICE_CONFIG_MAX_BYTES);
                goto fail;
            }
            nb = alloc_realloc(buf, cap + 1);
            if (!nb) {
                fprintf(stderr, "sluice simulate: out of memory\n");
                goto fail;
            }
            buf = nb;
        }
        got = fread(buf + n, 1, cap - n, f);
        n += got;
    } while (got > 0);
    if (ferror(f)) {
        fprintf(stderr, "sluice simulate: %s: cannot read: %s\n", path, strerror(errno));
        goto fail;
    }
    fclose(f);
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return 0;
fail:
    fclose(f);
    alloc_free(buf);
    return 1;
}

static int write_file(const char *path, const char *data, size_t len)
{
    FILE *f = fopen(path, "wb");

    if (!f) {
        fprintf(stderr, "sluice simulate: --svg %s: cannot open: %s\n", path, strerror(errno));
        return 1;
    }
    if (fwrite(data, 1, len, f) != len || fclose(f) != 0) {
        fprintf(stderr, "sluice simulate: --svg %s: cannot write\n", path);
        return 1;
    }
    return 0;
}

static const struct option long_options[] = {
    {"svg", required_argument, NULL, 's'},
    {"tasks", no_argument, NULL, 't'},
    {"format", required_argument, NULL, 'f'},
    {"help", no_argument, NULL, 'h'},
    {"limit", required_argument, NULL, 'L'},
    {"arrivals", required_argument, NULL, 'L'},
    {NULL, 0, NULL, 0},
};

int simreport_main(int argc, char **argv)
{
    static const char *const ignored[] = {"scenario", NULL};
    const char *file = NULL, *svg_path = NULL;
    int all_tasks = 0, csv = 0, c, status = EXIT_FAILED, rc;
    char msg[1024], *text = NULL, *svg = NULL;
    size_t len, svg_len;
    sluice_config cfg;
    scenario *sc = NULL;
    simrun_result *res = NULL;

    memset(&cfg, 0, sizeof(cfg));
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":s:tf:hl:a:", long_options, NULL)) != -1) {
        switch (c) {
        case 's':
            svg_path = optarg;
            break;
        case 't':
            all_tasks = 1;
            break;
        case 'f':
            if (strcmp(optarg, "text") == 0 || strcmp(optarg, "csv") == 0) {
                csv = strcmp(optarg, "csv") == 0;
                break;
            }
            fprintf(stderr, "sluice simulate: bad --format \"%s\": expected text or csv\n", optarg);
            return EXIT_USAGE;
        case 'h':
            fputs(usage_text, stdout);
            return 0;
        case 'L':
        case 'l':
        case 'a':
            fprintf(stderr, "sluice simulate: give either a scenario file or --limit and "
                            "--arrivals, not both\n");
            return EXIT_USAGE;
        case ':':
            fprintf(stderr,
                    "sluice simulate: option %s needs a value; see sluice simulate --help\n",
                    argv[optind - 1]);
            return EXIT_USAGE;
        default:
            fprintf(stderr, "sluice simulate: unknown option %s; see sluice simulate --help\n",
                    argv[optind - 1]);
            return EXIT_USAGE;
        }
    }
    if (optind >= argc || optind + 1 < argc) {
        fprintf(stderr, "sluice simulate: expected one scenario file; see sluice simulate "
                        "--help\n");
        return EXIT_USAGE;
    }
    file = argv[optind];
    if (read_all(file, &text, &len) != 0)
        return EXIT_FAILED;
    rc = sluice_config_parse_ignoring(text, len, file, ignored, &cfg, msg, sizeof(msg));
    if (rc == 0)
        rc = scenario_parse(text, len, file, &sc, msg, sizeof(msg));
    if (rc == 0)
        rc = scenario_check(sc, &cfg, file, msg, sizeof(msg));
    if (rc != 0) {
        fprintf(stderr, "sluice simulate: %s\n", msg);
        goto out;
    }
    rc = simrun_run(sc, &cfg, &res, msg, sizeof(msg));
    if (rc != 0) {
        fprintf(stderr, "sluice simulate: %s: %s\n", file, msg[0] ? msg : sluice_strerror(rc));
        goto out;
    }
    if (csv)
        simreport_csv(stdout, res);
    else
        simreport_text(stdout, res, file, all_tasks);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "sluice simulate: cannot write the output\n");
        goto out;
    }
    if (svg_path) {
        rc = simchart_svg(res, file, &svg, &svg_len);
        if (rc != 0) {
            fprintf(stderr, "sluice simulate: --svg: %s\n", sluice_strerror(rc));
            goto out;
        }
        if (write_file(svg_path, svg, svg_len) != 0)
            goto out;
    }
    status = 0;
out:
    alloc_free(svg);
    simrun_result_free(res);
    scenario_free(sc);
    sluice_config_clear(&cfg);
    alloc_free(text);
    return status;
}
