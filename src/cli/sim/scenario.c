/* SPDX-License-Identifier: MIT */
/*
 * Scenario files: the `scenario:` section of a simulation file (see scenario.h for the format).
 *
 * The YAML text is loaded into libyaml's node tree and walked with the configuration loader's
 * helpers (config/yaml_walk.h), so a scenario error reads exactly like a configuration error:
 * FILE:LINE:COLUMN, the dotted path of the setting, what was expected and what was found. The
 * other top-level sections are not looked at here; the configuration loader reads them from the
 * same text.
 *
 * Templates and payloads (checked while parsing, expanded per arrival) are payload.c's.
 */
#include "cli/sim/scenario.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "cli/sim/payload.h"
#include "config/yaml_walk.h"
#include "base/alloc.h"
#include "sluice/error.h"
#include "sluice/spec.h"

/* ---- Reading nodes ------------------------------------------------------------------------ */

/* Copies a scalar's text (checked by yw_string) into a new string. */
static int read_string(ywalk *w, const yaml_node_t *node, const char *what, char **out)
{
    const char *s;
    size_t len;
    int rc;

    *out = NULL;
    rc = yw_string(w, node, what, &s, &len);
    if (rc != 0)
        return rc;
    *out = alloc_memdup0(s, len);
    if (!*out)
        return yw_fail(w, node, SLUICE_ENOMEM, "out of memory");
    return 0;
}

/* Reads a template string into a new string. */
static int read_template(ywalk *w, const yaml_node_t *node, const char *what, int key_allowed,
                         char **out)
{
    int rc = read_string(w, node, what, out);

    if (rc == 0)
        rc = payload_check_template(w, node, *out, key_allowed);
    return rc;
}

/* Reads a time offset: "0" or a duration, at most SCENARIO_MAX_SPAN_NS. */
static int read_offset(ywalk *w, const yaml_node_t *node, int64_t *out)
{
    yw_got g;
    int rc;

    *out = 0;
    if (yw_is_scalar(node) && node->data.scalar.length == 1 && node->data.scalar.value[0] == '0')
        return 0;
    rc = yw_duration(w, node, 0, out);
    if (rc != 0)
        return rc;
    if (*out > SCENARIO_MAX_SPAN_NS)
        return yw_fail(w, node, SLUICE_EINVAL, "expected an offset of at most 30d, got %s",
                       yw_describe(node, &g));
    return 0;
}

/* Reads "A..B" (or a single A, meaning A..A) of offsets or of integers. */
static int read_range(ywalk *w, const yaml_node_t *node, int durations, int64_t min, int64_t max,
                      int64_t *lo, int64_t *hi)
{
    const char *s, *dots;
    size_t len;
    yw_got g;
    const char *what = durations ? "a duration (200ms) or a range of two (200ms..2s)"
                                 : "an integer or a range "
                                   "(10..50)";

    *lo = *hi = 0;
    if (!yw_is_scalar(node))
        return yw_fail(w, node, SLUICE_EINVAL, "expected %s, got %s", what, yw_describe(node, &g));
    s = yw_text(node, &len);
    for (int part = 0; part < 2; part++) {
        const char *end = s + len;
        size_t n;
        int64_t v = 0;
        char *stop;

        dots = NULL;
        for (const char *p = s; p + 1 < end; p++) {
            if (p[0] == '.' && p[1] == '.') {
                dots = p;
                break;
            }
        }
        if (part == 0 && dots)
            end = dots;
        n = (size_t)(end - s);
        if (n == 0 || n > 30)
            return yw_fail(w, node, SLUICE_EINVAL, "expected %s, got %s", what,
                           yw_describe(node, &g));
        if (durations) {
            if (!(n == 1 && s[0] == '0') && (sluice_spec_parse_duration(s, n, &v) != 0))
                return yw_fail(w, node, SLUICE_EINVAL, "expected %s, got %s", what,
                               yw_describe(node, &g));
        } else {
            char tmp[32];

            memcpy(tmp, s, n);
            tmp[n] = '\0';
            errno = 0;
            v = strtoll(tmp, &stop, 10);
            if (errno != 0 || *stop != '\0' || tmp[0] == '+' || tmp[0] == ' ')
                return yw_fail(w, node, SLUICE_EINVAL, "expected %s, got %s", what,
                               yw_describe(node, &g));
        }
        if (v < min || v > max)
            return yw_fail(w, node, SLUICE_EINVAL, "%s out of range in %s",
                           part == 0 ? "the value" : "the upper end", yw_describe(node, &g));
        if (part == 0) {
            *lo = *hi = v;
            if (!dots)
                return 0;
            len -= (size_t)(dots + 2 - s);
            s = dots + 2;
        } else {
            *hi = v;
        }
    }
    if (*hi < *lo)
        return yw_fail(w, node, SLUICE_EINVAL, "the range %s runs backwards",
                       yw_describe(node, &g));
    return 0;
}

/* Reads a probability: a plain number from 0 to 1. */
static int read_probability(ywalk *w, const yaml_node_t *node, double *out)
{
    char tmp[64], *stop;
    const char *s;
    size_t len;
    yw_got g;
    double v;

    *out = 0;
    if (!yw_is_scalar(node) || node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        goto bad;
    s = yw_text(node, &len);
    if (len == 0 || len >= sizeof(tmp))
        goto bad;
    memcpy(tmp, s, len);
    tmp[len] = '\0';
    errno = 0;
    v = strtod(tmp, &stop);
    if (errno != 0 || *stop != '\0' || !(v >= 0.0 && v <= 1.0) || tmp[0] == ' ')
        goto bad;
    *out = v;
    return 0;
bad:
    return yw_fail(w, node, SLUICE_EINVAL, "expected a number from 0 to 1, got %s",
                   yw_describe(node, &g));
}

/* Reads "N/PERIOD" ("2/s", "120/1m"): N arrivals every PERIOD. */
static int read_rate(ywalk *w, const yaml_node_t *node, int64_t *n, int64_t *period_ns)
{
    const char *s, *slash;
    size_t len, plen;
    uint64_t v;
    yw_got g;
    char per[32];

    *n = *period_ns = 0;
    if (!yw_is_scalar(node))
        goto bad;
    s = yw_text(node, &len);
    slash = memchr(s, '/', len);
    if (!slash || slash == s || slash - s > 7)
        goto bad;
    v = 0;
    for (const char *d = s; d < slash; d++) {
        if (*d < '0' || *d > '9')
            goto bad;
        v = v * 10 + (uint64_t)(*d - '0');
    }
    if (v == 0 || v > 1000000)
        goto bad;
    plen = len - (size_t)(slash + 1 - s);
    if (plen == 0 || plen + 2 > sizeof(per))
        goto bad;
    if (slash[1] >= '0' && slash[1] <= '9') {
        memcpy(per, slash + 1, plen);
    } else {
        per[0] = '1';
        memcpy(per + 1, slash + 1, plen);
        plen++;
    }
    if (sluice_spec_parse_duration(per, plen, period_ns) != 0 || *period_ns <= 0)
        goto bad;
    *n = (int64_t)v;
    return 0;
bad:
    return yw_fail(w, node, SLUICE_EINVAL,
                   "expected a rate such as 2/s, 30/1m or 500/1h (at most 1000000 per period), "
                   "got %s",
                   yw_describe(node, &g));
}

/* Reads a list of strings (or one string, a list of one) into a new array. */
static int read_string_list(ywalk *w, const yaml_node_t *node, const char *what, char ***out,
                            size_t *n)
{
    size_t count, i = 0;
    char **list;
    int rc;

    *out = NULL;
    *n = 0;
    if (node && node->type == YAML_SEQUENCE_NODE)
        count = (size_t)(node->data.sequence.items.top - node->data.sequence.items.start);
    else
        count = 1;
    if (count == 0) {
        yw_got g;
        return yw_fail(w, node, SLUICE_EINVAL, "expected a non-empty list of %ss, got %s", what,
                       yw_describe(node, &g));
    }
    list = alloc_calloc(count, sizeof(*list));
    if (!list)
        return yw_fail(w, node, SLUICE_ENOMEM, "out of memory");
    if (node && node->type == YAML_SEQUENCE_NODE) {
        for (yaml_node_item_t *it = node->data.sequence.items.start;
             it < node->data.sequence.items.top; it++, i++) {
            size_t saved = yw_push_index(w, i);

            rc = read_string(w, yw_node(w, *it), what, &list[i]);
            yw_pop(w, saved);
            if (rc != 0)
                goto fail;
        }
    } else {
        rc = read_string(w, node, what, &list[0]);
        if (rc != 0)
            goto fail;
    }
    *out = list;
    *n = count;
    return 0;
fail:
    for (size_t j = 0; j < count; j++)
        alloc_free(list[j]);
    alloc_free(list);
    return rc;
}

static void pos_of(const yaml_node_t *node, scenario_pos *pos)
{
    pos->line = node ? (int)node->start_mark.line + 1 : 0;
    pos->column = node ? (int)node->start_mark.column + 1 : 0;
}

/* ---- Sections ----------------------------------------------------------------------------- */

/* Runs `stmt` with key `name` of map pushed on the path, when it is present; value in v. */
#define FIELD(map, name, stmt)                                                                     \
    do {                                                                                           \
        yaml_node_t *k_, *v;                                                                       \
        v = yw_get(w, (map), (name), &k_);                                                         \
        if (k_) {                                                                                  \
            size_t saved_ = yw_push(w, (name), strlen(name));                                      \
            rc = (stmt);                                                                           \
            yw_pop(w, saved_);                                                                     \
            if (rc != 0)                                                                           \
                return rc;                                                                         \
        }                                                                                          \
    } while (0)

/* (a * b) / c without overflow, for 0 <= a <= c (or small a) and b >= 0, c > 0. */
static int64_t mul_div(int64_t a, int64_t b, int64_t c)
{
    return a * (b / c) + (a * (b % c)) / c;
}

static int read_stream(ywalk *w, const yaml_node_t *map, scenario_stream *s)
{
    static const char *const keys[] = {"type",     "count",   "at",     "from",
                                       "until",    "rate",    "spread", "key",
                                       "task_key", "payload", "units",  "priority"};
    static const char *const spreads[] = {"even", "random"};
    yaml_node_t *k;
    int64_t count = 0, rate_n = 0, rate_per = 0, prio = 0;
    int has_at, has_from, has_until, has_rate, has_count, spread = 0, rc;

    rc = yw_expect_map(w, map, "a mapping of arrival settings (type, count, at, ...)");
    if (rc != 0)
        return rc;
    rc = yw_check_keys(w, map, keys, sizeof(keys) / sizeof(keys[0]));
    if (rc != 0)
        return rc;
    s->units = 1;
    if (!yw_get(w, map, "type", &k))
        return yw_fail(w, map, SLUICE_EINVAL, "an arrival stream needs a type");
    FIELD(map, "type", read_string(w, v, "a task type name", &s->type));
    pos_of(yw_get(w, map, "type", NULL), &s->type_pos);

    has_from = (yw_get(w, map, "from", &k), k != NULL);
    has_until = (yw_get(w, map, "until", &k), k != NULL);
    has_rate = (yw_get(w, map, "rate", &k), k != NULL);
    has_count = (yw_get(w, map, "count", &k), k != NULL);
    has_at = (yw_get(w, map, "at", &k), k != NULL);

    FIELD(map, "count", yw_int(w, v, 1, (int64_t)SCENARIO_MAX_ARRIVALS, &count));
    FIELD(map, "at", read_offset(w, v, &s->at_ns));
    FIELD(map, "from", read_offset(w, v, &s->from_ns));
    FIELD(map, "until", read_offset(w, v, &s->until_ns));
    FIELD(map, "rate", read_rate(w, v, &rate_n, &rate_per));
    FIELD(map, "spread", yw_choice(w, v, spreads, 2, &spread));

    if (has_at && (has_from || has_until || has_rate)) {
        yw_get(w, map, "at", &k);
        return yw_fail(w, k, SLUICE_EINVAL,
                       "give either at (all at once) or from and until (spread), not both");
    }
    if (has_from != has_until) {
        yw_get(w, map, has_from ? "from" : "until", &k);
        return yw_fail(w, k, SLUICE_EINVAL, "from and until go together");
    }
    if (has_rate && has_count) {
        yw_get(w, map, "rate", &k);
        return yw_fail(w, k, SLUICE_EINVAL, "give either count or rate, not both");
    }
    if (has_rate && !has_from) {
        yw_get(w, map, "rate", &k);
        return yw_fail(w, k, SLUICE_EINVAL, "a rate needs an interval: add from and until");
    }
    if (!has_rate && !has_count)
        return yw_fail(w, map, SLUICE_EINVAL, "an arrival stream needs a count (or a rate)");
    if (has_from && s->until_ns <= s->from_ns) {
        yw_get(w, map, "until", &k);
        return yw_fail(w, k, SLUICE_EINVAL, "until must come after from");
    }
    if (!has_from && (yw_get(w, map, "spread", &k), k != NULL))
        return yw_fail(w, k, SLUICE_EINVAL, "spread applies to from..until only");
    if (has_rate) {
        int64_t span = s->until_ns - s->from_ns;
        double c = floor((double)(span / rate_per) * (double)rate_n +
                         (double)mul_div(span % rate_per, rate_n, rate_per));

        if (c < 1 || c > (double)SCENARIO_MAX_ARRIVALS) {
            yw_get(w, map, "rate", &k);
            return yw_fail(w, k, SLUICE_EINVAL,
                           "this rate gives %.0f arrivals in [from, until); expected 1 to %zu", c,
                           SCENARIO_MAX_ARRIVALS);
        }
        count = (int64_t)c;
        /* Arrival i at from + i * period / n: the same as an even spread over exactly count
         * periods' worth of time. */
        s->until_ns = s->from_ns + mul_div(count, rate_per, rate_n);
        if (s->until_ns <= s->from_ns)
            s->until_ns = s->from_ns + 1;
        s->spread = spread == 1 ? SCENARIO_RANDOM : SCENARIO_EVEN;
    } else if (has_from) {
        s->spread = spread == 1 ? SCENARIO_RANDOM : SCENARIO_EVEN;
    } else {
        s->spread = SCENARIO_AT;
    }
    s->count = (size_t)count;

    if (yw_get(w, map, "key", &k), k) {
        yaml_node_t *kv = yw_get(w, map, "key", NULL);

        if (kv && kv->type == YAML_SEQUENCE_NODE)
            FIELD(map, "key", read_string_list(w, v, "key", &s->keys, &s->nkeys));
        else
            FIELD(map, "key", read_template(w, v, "a key or a list of keys", 0, &s->key));
    }
    FIELD(map, "task_key", read_template(w, v, "a task key template", 1, &s->task_key));
    FIELD(map, "payload", payload_read(w, v, &s->payload));
    FIELD(map, "units", yw_int(w, v, 1, SLUICE_MAX_PERMITS, &s->units));
    FIELD(map, "priority", yw_int(w, v, -1000000, 1000000, &prio));
    if (yw_get(w, map, "priority", &k), k) {
        s->has_priority = 1;
        s->priority = (int)prio;
    }
    return 0;
}

static int read_workers(ywalk *w, const yaml_node_t *map, scenario_workers *p)
{
    static const char *const keys[] = {"count",        "types",        "service",
                                       "failure_rate", "failure_mode", "cost"};
    static const char *const modes[] = {"retry", "dead"};
    int64_t count = 1;
    int mode = 0, rc;

    rc = yw_expect_map(w, map, "a mapping of worker settings (count, types, service, ...)");
    if (rc != 0)
        return rc;
    rc = yw_check_keys(w, map, keys, sizeof(keys) / sizeof(keys[0]));
    if (rc != 0)
        return rc;
    p->cost_min = p->cost_max = -1;
    FIELD(map, "count", yw_int(w, v, 1, 100000, &count));
    p->count = (size_t)count;
    FIELD(map, "types", read_string_list(w, v, "task type name", &p->types, &p->ntypes));
    pos_of(yw_get(w, map, "types", NULL), &p->types_pos);
    FIELD(map, "service",
          read_range(w, v, 1, 0, SCENARIO_MAX_SPAN_NS, &p->service_min_ns, &p->service_max_ns));
    FIELD(map, "failure_rate", read_probability(w, v, &p->failure_rate));
    FIELD(map, "failure_mode", yw_choice(w, v, modes, 2, &mode));
    p->failure_mode = mode == 1 ? SCENARIO_FAIL_DEAD : SCENARIO_FAIL_RETRY;
    FIELD(map, "cost", read_range(w, v, 0, 0, SLUICE_MAX_PERMITS, &p->cost_min, &p->cost_max));
    return 0;
}

/* Reads a payload given as a mapping or JSON text into JSON text. */
static int read_payload_text(ywalk *w, const yaml_node_t *node, char **out)
{
    json_t *j;
    int rc = payload_read(w, node, &j);

    *out = NULL;
    if (rc != 0)
        return rc;
    *out = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!*out)
        return yw_fail(w, node, SLUICE_ENOMEM, "out of memory");
    /* json_dumps allocates with jansson's allocator, which is sluice's (base/alloc.c): the text
     * is freed with alloc_free like everything else. */
    return 0;
}

static int read_recurring(ywalk *w, const yaml_node_t *map, scenario_recurring *r)
{
    static const char *const keys[] = {"name", "type",     "every", "cron",   "start",
                                       "end",  "max_runs", "key",   "payload"};
    yaml_node_t *k, *k2;
    int rc;

    rc = yw_expect_map(w, map, "a mapping of series settings (name, type, every, ...)");
    if (rc != 0)
        return rc;
    rc = yw_check_keys(w, map, keys, sizeof(keys) / sizeof(keys[0]));
    if (rc != 0)
        return rc;
    if (!yw_get(w, map, "name", &k) && !k)
        return yw_fail(w, map, SLUICE_EINVAL, "a recurring series needs a name");
    if (!yw_get(w, map, "type", &k) && !k)
        return yw_fail(w, map, SLUICE_EINVAL, "a recurring series needs a type");
    FIELD(map, "name", read_string(w, v, "a series name", &r->name));
    FIELD(map, "type", read_string(w, v, "a task type name", &r->type));
    pos_of(yw_get(w, map, "type", NULL), &r->type_pos);
    yw_get(w, map, "every", &k);
    yw_get(w, map, "cron", &k2);
    if ((k != NULL) == (k2 != NULL))
        return yw_fail(w, k ? k : map, SLUICE_EINVAL, "give exactly one of every and cron");
    FIELD(map, "every", yw_duration(w, v, 1, &r->every_ns));
    FIELD(map, "cron", read_string(w, v, "a 5-field cron expression", &r->cron));
    FIELD(map, "start", read_offset(w, v, &r->start_ns));
    FIELD(map, "end", read_offset(w, v, &r->end_ns));
    FIELD(map, "max_runs", yw_int(w, v, 1, INT64_MAX, &r->max_runs));
    FIELD(map, "key", read_string(w, v, "a key", &r->key));
    FIELD(map, "payload", read_payload_text(w, v, &r->payload));
    return 0;
}

/* Reads a list section: calls `read` on each item of a sequence of n items of `size` bytes. */
static int read_list(ywalk *w, const yaml_node_t *node, const char *what, size_t size, void **items,
                     size_t *n, int (*read)(ywalk *w, const yaml_node_t *map, void *item))
{
    size_t count, i = 0;
    char *arr;
    yw_got g;
    int rc;

    if (!node || node->type != YAML_SEQUENCE_NODE)
        return yw_fail(w, node, SLUICE_EINVAL, "expected a list of %s, got %s", what,
                       yw_describe(node, &g));
    count = (size_t)(node->data.sequence.items.top - node->data.sequence.items.start);
    if (count == 0)
        return 0;
    arr = alloc_calloc(count, size);
    if (!arr)
        return yw_fail(w, node, SLUICE_ENOMEM, "out of memory");
    *items = arr;
    *n = count; /* so scenario_free frees what was read before an error */
    for (yaml_node_item_t *it = node->data.sequence.items.start; it < node->data.sequence.items.top;
         it++, i++) {
        size_t saved = yw_push_index(w, i);

        rc = read(w, yw_node(w, *it), arr + i * size);
        yw_pop(w, saved);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static int read_stream_item(ywalk *w, const yaml_node_t *map, void *item)
{
    return read_stream(w, map, item);
}

static int read_workers_item(ywalk *w, const yaml_node_t *map, void *item)
{
    return read_workers(w, map, item);
}

static int read_recurring_item(ywalk *w, const yaml_node_t *map, void *item)
{
    return read_recurring(w, map, item);
}

/* Reads `upstream: {rate: N/PERIOD, retry_after: DURATION}`. */
static int read_upstream(ywalk *w, const yaml_node_t *map, scenario *sc)
{
    static const char *const keys[] = {"rate", "retry_after"};
    int rc;

    rc = yw_expect_map(w, map, "a mapping: rate (the hidden rate), retry_after");
    if (rc == 0)
        rc = yw_check_keys(w, map, keys, sizeof(keys) / sizeof(keys[0]));
    if (rc != 0)
        return rc;
    if (!yw_get(w, map, "rate", NULL))
        return yw_fail(w, map, SLUICE_EINVAL, "an upstream needs its hidden rate: rate: 7/1s");
    FIELD(map, "rate", read_rate(w, v, &sc->upstream_permits, &sc->upstream_period_ns));
    FIELD(map, "retry_after", yw_duration(w, v, 0, &sc->upstream_retry_after_ns));
    return 0;
}

static int read_scenario(ywalk *w, const yaml_node_t *map, scenario *sc)
{
    static const char *const keys[] = {"title",   "duration",  "seed",    "arrivals",
                                       "workers", "recurring", "upstream"};
    yaml_node_t *k;
    int64_t seed = 1;
    int rc;

    rc = yw_expect_map(w, map, "a mapping of scenario settings (arrivals, workers, ...)");
    if (rc != 0)
        return rc;
    rc = yw_check_keys(w, map, keys, sizeof(keys) / sizeof(keys[0]));
    if (rc != 0)
        return rc;
    FIELD(map, "title", read_string(w, v, "a title", &sc->title));
    FIELD(map, "duration", read_offset(w, v, &sc->duration_ns));
    if ((yw_get(w, map, "duration", &k), k) && sc->duration_ns == 0)
        return yw_fail(w, yw_get(w, map, "duration", NULL), SLUICE_EINVAL,
                       "expected a duration above zero");
    FIELD(map, "seed", yw_int(w, v, 0, INT64_MAX, &seed));
    sc->seed = (uint64_t)seed;
    FIELD(map, "arrivals",
          read_list(w, v, "arrival streams", sizeof(scenario_stream), (void **)&sc->streams,
                    &sc->nstreams, read_stream_item));
    FIELD(map, "workers",
          read_list(w, v, "worker pools", sizeof(scenario_workers), (void **)&sc->workers,
                    &sc->nworkers, read_workers_item));
    FIELD(map, "recurring",
          read_list(w, v, "recurring series", sizeof(scenario_recurring), (void **)&sc->recurring,
                    &sc->nrecurring, read_recurring_item));
    FIELD(map, "upstream", read_upstream(w, v, sc));
    if (sc->nrecurring > 0 && sc->duration_ns == 0) {
        yw_get(w, map, "recurring", &k);
        return yw_fail(w, k, SLUICE_EINVAL,
                       "recurring series never finish: give the scenario a duration");
    }
    if (sc->nstreams == 0 && sc->nrecurring == 0)
        return yw_fail(w, map, SLUICE_EINVAL,
                       "a scenario needs arrivals (or recurring series) to simulate");
    for (size_t i = 0; i < sc->nstreams; i++) {
        if (sc->streams[i].count > SCENARIO_MAX_ARRIVALS - sc->total) {
            yw_get(w, map, "arrivals", &k);
            return yw_fail(w, k, SLUICE_EINVAL, "more than %zu arrivals in all",
                           SCENARIO_MAX_ARRIVALS);
        }
        sc->total += sc->streams[i].count;
    }
    return 0;
}

#undef FIELD

/* ---- Entry points ------------------------------------------------------------------------- */

int scenario_parse(const char *text, size_t len, const char *name, scenario **out, char *msg,
                   size_t msglen)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    yaml_node_t *root, *node, *key;
    scenario *sc = NULL;
    ywalk w;
    int rc;

    if (out)
        *out = NULL;
    if (msg && msglen > 0)
        msg[0] = '\0';
    if (!text || !out)
        return SLUICE_EINVAL;
    if (!name)
        name = "<scenario>";
    if (!yaml_parser_initialize(&parser)) {
        if (msg && msglen > 0)
            snprintf(msg, msglen, "%s: out of memory", name);
        return SLUICE_ENOMEM;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    if (!yaml_parser_load(&parser, &doc)) {
        rc = parser.error == YAML_MEMORY_ERROR ? SLUICE_ENOMEM : SLUICE_EPARSE;
        if (msg && msglen > 0)
            snprintf(msg, msglen, "%s:%zu:%zu: %s%s%s", name, parser.problem_mark.line + 1,
                     parser.problem_mark.column + 1,
                     parser.problem ? parser.problem : "YAML syntax error",
                     parser.context ? " " : "", parser.context ? parser.context : "");
        yaml_parser_delete(&parser);
        return rc;
    }
    yw_init(&w, &doc, name, msg, msglen);
    root = yaml_document_get_root_node(&doc);
    node = root && root->type == YAML_MAPPING_NODE ? yw_get(&w, root, "scenario", &key) : NULL;
    if (!root || root->type != YAML_MAPPING_NODE || !key) {
        rc = yw_fail(&w, root, SLUICE_EINVAL,
                     "expected a scenario: section (arrivals, workers, ...) next to the "
                     "configuration; see docs/simulation.md");
        goto out;
    }
    sc = alloc_calloc(1, sizeof(*sc));
    if (!sc) {
        rc = yw_fail(&w, root, SLUICE_ENOMEM, "out of memory");
        goto out;
    }
    yw_push(&w, "scenario", 8);
    rc = read_scenario(&w, node, sc);
    if (rc == 0 && sc->nworkers == 0) {
        /* The default: one worker for any type that finishes at once, so grants are the
         * limits' alone. */
        sc->workers = alloc_calloc(1, sizeof(*sc->workers));
        if (!sc->workers) {
            rc = yw_fail(&w, node, SLUICE_ENOMEM, "out of memory");
        } else {
            sc->nworkers = 1;
            sc->workers[0].count = 1;
            sc->workers[0].cost_min = sc->workers[0].cost_max = -1;
        }
    }
out:
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    if (rc != 0) {
        scenario_free(sc);
        return rc;
    }
    *out = sc;
    return 0;
}

static int fail_at(const char *name, scenario_pos pos, char *msg, size_t msglen, const char *what,
                   const char *type)
{
    if (msg && msglen > 0)
        snprintf(msg, msglen, "%s:%d:%d: %s: type \"%s\" is not declared in types:", name, pos.line,
                 pos.column, what, type);
    return SLUICE_EINVAL;
}

int scenario_check(const scenario *sc, const sluice_config *cfg, const char *name, char *msg,
                   size_t msglen)
{
    char what[80];

    if (msg && msglen > 0)
        msg[0] = '\0';
    if (!name)
        name = "<scenario>";
    for (size_t i = 0; i < sc->nstreams; i++) {
        if (!sluice_config_find_type(cfg, sc->streams[i].type)) {
            snprintf(what, sizeof(what), "scenario.arrivals[%zu].type", i);
            return fail_at(name, sc->streams[i].type_pos, msg, msglen, what, sc->streams[i].type);
        }
    }
    for (size_t i = 0; i < sc->nworkers; i++) {
        for (size_t j = 0; j < sc->workers[i].ntypes; j++) {
            if (!sluice_config_find_type(cfg, sc->workers[i].types[j])) {
                snprintf(what, sizeof(what), "scenario.workers[%zu].types", i);
                return fail_at(name, sc->workers[i].types_pos, msg, msglen, what,
                               sc->workers[i].types[j]);
            }
        }
    }
    for (size_t i = 0; i < sc->nrecurring; i++) {
        if (!sluice_config_find_type(cfg, sc->recurring[i].type)) {
            snprintf(what, sizeof(what), "scenario.recurring[%zu].type", i);
            return fail_at(name, sc->recurring[i].type_pos, msg, msglen, what,
                           sc->recurring[i].type);
        }
    }
    return 0;
}

static void free_list(char **list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        alloc_free(list[i]);
    alloc_free(list);
}

void scenario_free(scenario *sc)
{
    if (!sc)
        return;
    for (size_t i = 0; i < sc->nstreams; i++) {
        scenario_stream *s = &sc->streams[i];

        alloc_free(s->type);
        alloc_free(s->key);
        free_list(s->keys, s->nkeys);
        alloc_free(s->task_key);
        json_decref(s->payload);
    }
    alloc_free(sc->streams);
    for (size_t i = 0; i < sc->nworkers; i++)
        free_list(sc->workers[i].types, sc->workers[i].ntypes);
    alloc_free(sc->workers);
    for (size_t i = 0; i < sc->nrecurring; i++) {
        scenario_recurring *r = &sc->recurring[i];

        alloc_free(r->name);
        alloc_free(r->type);
        alloc_free(r->cron);
        alloc_free(r->key);
        alloc_free(r->payload);
    }
    alloc_free(sc->recurring);
    alloc_free(sc->title);
    alloc_free(sc);
}
