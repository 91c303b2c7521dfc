/* SPDX-License-Identifier: MIT */
/*
 * `sluice check FILE`: loads a configuration file exactly as the server would (parse, validate,
 * install into a scratch engine), and either prints one line per limit and per type (what the
 * file means, in words close to the file's own) or the one-line error that stops the load.
 *
 * The error goes to stderr as the loader wrote it, `FILE:LINE:COLUMN: PATH: ...`, without a
 * prefix, so editors and CI annotators that understand compiler output can jump to the line.
 * Usage errors are prefixed `sluice check:` like every other command's.
 */
#include "cli/check.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/attr.h"
#include "sluice/config.h"
#include "sluice/engine.h"
#include "sluice/error.h"
#include "sluice/limit.h"
#include "sluice/spec.h"

#define EXIT_INVALID 1
#define EXIT_USAGE   2

static const char usage_text[] =
    "Usage: sluice check FILE\n"
    "\n"
    "Validates a configuration file (engine settings, limits and task types) and prints one\n"
    "line per limit and per type saying what it declares. On the first error, prints it as\n"
    "FILE:LINE:COLUMN: SETTING: what was expected, and exits with status 1.\n"
    "The file format is described in docs/configuration.md.\n"
    "\n"
    "Options:\n"
    "  -h, --help     show this help and exit\n"
    "\n"
    "Exit status: 0 the file is valid, 1 it is not (or cannot be read), 2 bad usage.\n";

/* A line being written: appends until the buffer is full, then silently cuts. */
typedef struct line {
    char *buf;
    size_t len, pos;
} line;

PRINTF_ATTR(2, 3)
static void put(line *l, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (l->len == 0 || l->pos >= l->len - 1)
        return;
    va_start(ap, fmt);
    n = vsnprintf(l->buf + l->pos, l->len - l->pos, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    l->pos += (size_t)n;
    if (l->pos > l->len - 1)
        l->pos = l->len - 1;
}

static const char *dur(int64_t ns, char *buf, size_t len)
{
    if (sluice_spec_format_duration(ns, buf, len) != 0)
        snprintf(buf, len, "%" PRId64 "ns", ns);
    return buf;
}

/* "rate 100/1m burst 100", "concurrency 10 ttl 30s", "quota 1000/day". */
static void put_def(line *l, const sluice_limit_def *def)
{
    char d[SLUICE_SPEC_DURATION_MAX_LEN];

    switch (def->kind) {
    case SLUICE_RATE:
        put(l, "rate %" PRId64 "/%s burst %" PRId64, def->limit, dur(def->period_ns, d, sizeof(d)),
            def->burst ? def->burst : def->limit);
        if (def->start_empty)
            put(l, " start_empty");
        if (def->decrease_den > 0) {
            char f[SLUICE_SPEC_DURATION_MAX_LEN];
            int digits = 0;

            for (int64_t x = def->decrease_den; x > 1; x /= 10) /* a power of ten: a decimal */
                digits++;
            put(l,
                " adaptive (each 429 multiplies a key's rate by 0.%0*" PRId64
                ", it regains %" PRId64 "%% of the rate every %s, never below %" PRId64 "/%s)",
                digits, def->decrease_num, def->recover_pct, dur(def->recover_ns, d, sizeof(d)),
                def->floor_permits, dur(def->floor_period_ns, f, sizeof(f)));
        }
        break;
    case SLUICE_WINDOW:
    case SLUICE_SLIDING:
        put(l, "%s %" PRId64 "/%s", sluice_limit_kind_name(def->kind), def->limit,
            dur(def->period_ns, d, sizeof(d)));
        break;
    case SLUICE_CONCURRENCY:
        put(l, "concurrency %" PRId64 " ttl %s", def->limit, dur(def->ttl_ns, d, sizeof(d)));
        return;
    case SLUICE_QUOTA:
        put(l, "quota %" PRId64 "/%s", def->limit,
            def->calendar == SLUICE_CAL_DAY     ? "day"
            : def->calendar == SLUICE_CAL_MONTH ? "month"
                                                : "total");
        break;
    }
    if (def->horizon_ns != SLUICE_DEFAULT_HORIZON_NS)
        put(l, " horizon %s", dur(def->horizon_ns, d, sizeof(d)));
}

static void put_tier_match(line *l, const sluice_tier *t)
{
    if (t->equals)
        put(l, "=%s", t->equals);
    else if (t->min == INT64_MIN && t->max == INT64_MAX)
        put(l, "any");
    else if (t->min == INT64_MIN)
        put(l, "<=%" PRId64, t->max);
    else if (t->max == INT64_MAX)
        put(l, ">=%" PRId64, t->min);
    else if (t->min == t->max)
        put(l, "=%" PRId64, t->min);
    else
        put(l, "%" PRId64 "..%" PRId64, t->min, t->max);
}

void check_describe_limit(const sluice_limit_policy *p, char *buf, size_t len)
{
    line l = {buf, len, 0};

    if (len > 0)
        buf[0] = '\0';
    put(&l, "limit %s: ", p->name);
    if (p->ntiers > 0) {
        put(&l, "tiers by %s [", p->tier_path);
        for (size_t i = 0; i < p->ntiers; i++) {
            put(&l, "%s%s ", i ? "; " : "", p->tiers[i].name);
            put_tier_match(&l, &p->tiers[i]);
            put(&l, ": ");
            put_def(&l, &p->tiers[i].def);
        }
        put(&l, "]");
    } else {
        put_def(&l, &p->def);
    }
    switch (p->key_source) {
    case SLUICE_KEY_NONE:
        put(&l, ", key none");
        break;
    case SLUICE_KEY_EXPLICIT:
        put(&l, ", key explicit");
        break;
    case SLUICE_KEY_PATH:
        put(&l, ", key %s", p->key_path);
        break;
    }
    if (p->key_source != SLUICE_KEY_NONE && p->missing_key_global)
        put(&l, " (missing: global)");
    if (p->key_source != SLUICE_KEY_NONE && p->missing_key_skip)
        put(&l, " (missing: skip)");
    if (p->units_source == SLUICE_UNITS_FIXED)
        put(&l, ", units %" PRId64, p->units_fixed);
    else if (p->units_source == SLUICE_UNITS_PATH)
        put(&l, ", units %s", p->units_path);
    put(&l, ", overflow %s", p->overflow == SLUICE_OVERFLOW_REJECT ? "reject" : "wait");
    if (p->mode == SLUICE_MODE_SHADOW)
        put(&l, ", mode shadow (counts, never denies)");
    for (size_t i = 0; i < p->noverrides; i++) {
        put(&l, "%s%s: ", i ? "; " : ", overrides [", p->overrides[i].key);
        put_def(&l, &p->overrides[i].def);
        if (i + 1 == p->noverrides)
            put(&l, "]");
    }
}

void check_describe_type(const sluice_type_policy *t, char *buf, size_t len)
{
    const sluice_retry_policy *r = &t->retry;
    char d1[SLUICE_SPEC_DURATION_MAX_LEN], d2[SLUICE_SPEC_DURATION_MAX_LEN];
    line l = {buf, len, 0};

    if (len > 0)
        buf[0] = '\0';
    put(&l, "type %s: limits ", t->name);
    if (t->nlimits == 0)
        put(&l, "none");
    for (size_t i = 0; i < t->nlimits; i++)
        put(&l, "%s%s", i ? ", " : "", t->limits[i]);
    put(&l, "; priority %d, lease %s, ", t->priority, dur(t->lease_ns, d1, sizeof(d1)));
    if (r->max_attempts <= 1)
        put(&l, "no retry");
    else if (r->backoff == SLUICE_BACKOFF_FIXED)
        put(&l, "retry %d attempts fixed %s", r->max_attempts, dur(r->base_ns, d1, sizeof(d1)));
    else
        put(&l, "retry %d attempts exponential %s..%s", r->max_attempts,
            dur(r->base_ns, d1, sizeof(d1)), dur(r->max_ns, d2, sizeof(d2)));
    if (r->max_attempts > 1 && !r->throttle_retries)
        put(&l, ", retries skip the limits");
    /* Only what differs from the defaults, so existing summaries read as before. */
    if (t->fairness == SLUICE_FAIR_KEYS)
        put(&l, "; fairness keys of %s", t->fair_key ? t->fair_key : "the first keyed limit");
    if (t->charge_redelivery)
        put(&l, "; redeliveries pay the limits again");
}

static void print_engine(const sluice_engine_policy *e)
{
    char d1[SLUICE_SPEC_DURATION_MAX_LEN], d2[SLUICE_SPEC_DURATION_MAX_LEN];

    printf("engine: max_tasks %zu, max_parked %zu, max_finished %zu, strict_types %s, "
           "event_interval %s, default_lease %s\n",
           e->max_tasks, e->max_parked, e->max_finished, e->strict_types ? "true" : "false",
           dur(e->event_interval_ns, d1, sizeof(d1)), dur(e->default_lease_ns, d2, sizeof(d2)));
}

int check_main(int argc, char **argv)
{
    const char *file = NULL;
    sluice_engine *engine = NULL;
    sluice_config cfg;
    char msg[1024], text[1024];
    int i, rc, options_done = 0;

    for (i = 1; i < argc; i++) {
        const char *a = argv[i];

        if (!options_done && (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)) {
            fputs(usage_text, stdout);
            return 0;
        }
        if (!options_done && strcmp(a, "--") == 0) {
            options_done = 1;
            continue;
        }
        if (!options_done && a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "sluice check: unknown option %s; see sluice check --help\n", a);
            return EXIT_USAGE;
        }
        if (file) {
            fprintf(stderr, "sluice check: unexpected argument \"%s\": one file at a time\n", a);
            return EXIT_USAGE;
        }
        file = a;
    }
    if (!file) {
        fprintf(stderr, "sluice check: no file given; usage: sluice check FILE\n");
        return EXIT_USAGE;
    }

    rc = sluice_config_load(file, &cfg, msg, sizeof(msg));
    if (rc != 0) {
        fprintf(stderr, "%s\n", msg[0] ? msg : sluice_strerror(rc));
        return EXIT_INVALID;
    }
    /* Install it into a scratch engine too, as `sluice serve` would, so that nothing the engine
     * would refuse passes the check. The scratch engine is thrown away, so its time is 0. */
    rc = sluice_engine_new(&cfg.engine, &engine);
    if (rc == 0)
        rc = sluice_config_apply(&cfg, engine, 0, msg, sizeof(msg));
    else
        snprintf(msg, sizeof(msg), "%s: engine: %s", file, sluice_strerror(rc));
    sluice_engine_free(engine);
    if (rc != 0) {
        fprintf(stderr, "%s\n", msg[0] ? msg : sluice_strerror(rc));
        sluice_config_clear(&cfg);
        return EXIT_INVALID;
    }
    if (cfg.disabled)
        printf("enabled: false: every limit lets everything through, counting its would-be "
               "denials as shadow_denied\n");
    print_engine(&cfg.engine);
    for (size_t j = 0; j < cfg.nlimits; j++) {
        check_describe_limit(&cfg.limits[j], text, sizeof(text));
        printf("%s\n", text);
    }
    for (size_t j = 0; j < cfg.ntypes; j++) {
        check_describe_type(&cfg.types[j], text, sizeof(text));
        printf("%s\n", text);
    }
    printf("%s: ok, %zu limit%s, %zu type%s\n", file, cfg.nlimits, cfg.nlimits == 1 ? "" : "s",
           cfg.ntypes, cfg.ntypes == 1 ? "" : "s");
    sluice_config_clear(&cfg);
    return 0;
}
