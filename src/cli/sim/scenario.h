/* SPDX-License-Identifier: MIT */
/*
 * Scenario files of `sluice simulate SCENARIO.yaml`: what happens to an engine, on a simulated
 * clock (docs/simulation.md is the reference of the format).
 *
 * A scenario file is a configuration file (its `engine:`, `limits:` and `types:` sections are
 * read by the configuration loader, exactly as `sluice serve` reads them) with one more
 * top-level section, `scenario:`, read here:
 *
 *   scenario:
 *     title: 20 tasks on 15 per minute
 *     duration: 5m          # optional: stop then (default: when everything is finished)
 *     seed: 7               # the random generator's seed (service times, failures, spreads)
 *     arrivals:             # streams of submitted tasks
 *       - type: sync
 *         count: 20         # 20 at once...
 *         at: 0s            # ...at this offset
 *         key: tenant-a     # explicit key: a template, or a list cycled over
 *       - type: sync
 *         rate: 2/s         # or a rate over [from, until); or count with from/until
 *         from: 10s
 *         until: 1m
 *         payload: {tenant_id: "tenant-{i%10}", agents: "{i%4}"}
 *     workers:              # default: one worker for every type that finishes at once
 *       - count: 4
 *         types: [sync]
 *         service: 200ms..2s
 *         failure_rate: 0.05
 *         failure_mode: retry
 *     recurring:            # optional series (needs duration)
 *       - {name: report, type: sync, every: 1m}
 *
 * Templates: in `key`, `task_key` and the string values of `payload`, `{i}` is the arrival's
 * index in its stream (from 0), `{i%N}` and `{i/N}` its remainder and quotient by N, `{key}` the
 * arrival's explicit key, `{{` and `}}` literal braces. A payload string that is exactly one
 * numeric placeholder ("{i%4}") becomes a JSON number.
 *
 * Parsing is strict like the configuration loader's (same helpers, same messages): an unknown
 * key, a value of the wrong type or a bad template is one error naming FILE:LINE:COLUMN and the
 * dotted path, e.g. `s.yaml:14:16: scenario.arrivals[1].count: expected an integer from 1 to
 * 1000000, got "many"`.
 *
 * Pure: scenario_parse() reads a buffer and allocates; it does no I/O.
 */
#ifndef SLUICE_CLI_SCENARIO_H
#define SLUICE_CLI_SCENARIO_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "sluice/config.h"

/* Most tasks all arrival streams of one scenario may submit together. */
#define SCENARIO_MAX_ARRIVALS ((size_t)1000000)

/* Latest offset of anything in a scenario (an arrival, the duration): 30 days. */
#define SCENARIO_MAX_SPAN_NS (INT64_C(30) * 86400 * INT64_C(1000000000))

/* How a stream places its arrivals in [from, until). */
typedef enum scenario_spread {
    SCENARIO_AT = 0, /* all at at_ns */
    SCENARIO_EVEN,   /* evenly: arrival i at from + i * (until - from) / count */
    SCENARIO_RANDOM, /* uniformly at random (seeded), then sorted */
} scenario_spread;

/* Where a definition was written, for messages about it found after parsing. */
typedef struct scenario_pos {
    int line, column; /* from 1; 0 when not from a file */
} scenario_pos;

/* One stream of arrivals: `count` tasks of one type. */
typedef struct scenario_stream {
    char *type;            /* the task type, owned */
    scenario_pos type_pos; /* where `type:` was given */
    size_t count;          /* tasks, >= 1 */
    scenario_spread spread;
    int64_t at_ns;   /* SCENARIO_AT */
    int64_t from_ns; /* SCENARIO_EVEN / RANDOM: the interval [from_ns, until_ns) */
    int64_t until_ns;
    char *key;   /* explicit key template, owned; NULL = none */
    char **keys; /* or a list of keys cycled over (arrival i takes keys[i % nkeys]) */
    size_t nkeys;
    char *task_key;   /* task key template, owned; NULL = none */
    json_t *payload;  /* payload template (a JSON object), owned reference; NULL = {} */
    int64_t units;    /* units each task asks for, >= 1 */
    int has_priority; /* 1 when `priority` was given */
    int priority;
} scenario_stream;

/* How a worker pool handles a failure. */
typedef enum scenario_failure_mode {
    SCENARIO_FAIL_RETRY = 0, /* fail the task for a retry (the type's retry policy decides) */
    SCENARIO_FAIL_DEAD,      /* fail it for good */
} scenario_failure_mode;

/* One pool of identical workers. */
typedef struct scenario_workers {
    size_t count; /* workers, >= 1 */
    char **types; /* the task types they take, owned; ntypes == 0: any */
    size_t ntypes;
    scenario_pos types_pos;
    int64_t service_min_ns; /* service time, uniform in [min, max] (equal: fixed) */
    int64_t service_max_ns;
    double failure_rate; /* probability in [0, 1] that a delivery fails */
    scenario_failure_mode failure_mode;
    int64_t cost_min; /* actual cost acked, uniform in [min, max]; -1: keep the charge */
    int64_t cost_max;
} scenario_workers;

/* One recurring series (see sluice_recurring_spec). */
typedef struct scenario_recurring {
    char *name; /* owned */
    char *type; /* owned */
    scenario_pos type_pos;
    int64_t every_ns; /* interval, or 0 with cron */
    char *cron;       /* owned; NULL with every */
    int64_t start_ns; /* offsets from time 0 */
    int64_t end_ns;   /* 0 = never */
    int64_t max_runs; /* 0 = unlimited */
    char *key;        /* explicit key, owned; NULL = none */
    char *payload;    /* JSON text, owned; NULL = {} */
} scenario_recurring;

/* A parsed `scenario:` section. */
typedef struct scenario {
    char *title;         /* owned; NULL when not given */
    int64_t duration_ns; /* 0 = until everything is finished */
    uint64_t seed;
    scenario_stream *streams;
    size_t nstreams;
    size_t total; /* arrivals of every stream together */
    scenario_workers *workers;
    size_t nworkers;
    scenario_recurring *recurring;
    size_t nrecurring;
    /* `upstream: {rate: 7/1s, retry_after: 1s}`: the API the workers call answers 429 above
     * this hidden rate (a GCRA of that rate, burst one period's worth); a worker whose call is
     * refused fails its task with RETRY_AFTER (the upstream's wait, at least retry_after).
     * upstream_permits 0: no upstream. */
    int64_t upstream_permits;
    int64_t upstream_period_ns;
    int64_t upstream_retry_after_ns;
} scenario;

/* Parses the `scenario:` section of the YAML text (the other top-level keys are left to the
 * configuration loader; a key that is neither is not reported here). `name` (may be NULL) is the
 * file name shown in messages. Sets *out to NULL first; on success stores a new scenario there
 * (free it with scenario_free) and returns 0. Returns SLUICE_EPARSE (YAML syntax), SLUICE_EINVAL
 * (anything else, including a file without a scenario: section), or SLUICE_ENOMEM, with the
 * one-line message in msg (always NUL-terminated when msglen > 0). */
int scenario_parse(const char *text, size_t len, const char *name, scenario **out, char *msg,
                   size_t msglen);

/* Checks the scenario against its configuration: every type it names is declared in `types:`.
 * Returns 0 or SLUICE_EINVAL with "FILE:LINE:COLUMN: ..." in msg. */
int scenario_check(const scenario *sc, const sluice_config *cfg, const char *name, char *msg,
                   size_t msglen);

/* Frees a scenario. Accepts NULL. */
void scenario_free(scenario *sc);

/* Variables of a template. */
typedef struct scenario_vars {
    size_t i;        /* the arrival's index in its stream */
    const char *key; /* the arrival's explicit key ("" when none) */
} scenario_vars;

/* Expands the template tmpl into buf (at most buflen - 1 bytes and a NUL). Returns the length
 * the expansion needs (the text is cut when it is >= buflen), or -1 for a malformed template, with
 * the reason in msg when msg is not NULL. */
long scenario_expand(const char *tmpl, const scenario_vars *v, char *buf, size_t buflen, char *msg,
                     size_t msglen);

/* Builds the payload of arrival v of stream s: its template with every string expanded. Returns
 * a new JSON object (the caller decrefs it), or NULL when out of memory. */
json_t *scenario_payload(const scenario_stream *s, const scenario_vars *v);

/* Writes the explicit key of arrival i of stream s into buf (NUL-terminated, cut to buflen - 1).
 * Returns the key's full length, or 0 when the stream has no key. */
size_t scenario_key(const scenario_stream *s, size_t i, char *buf, size_t buflen);

#endif
