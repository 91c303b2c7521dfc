/* SPDX-License-Identifier: MIT */
/*
 * The `limits:` section of the configuration file: YAML mappings in, validated
 * sluice_limit_policy values out.
 *
 * A limit is a mapping with exactly one kind key (rate, window, sliding, concurrency, quota, the
 * long form permits + period, or tier for a limit whose definition depends on the task), the
 * options of that kind (burst and start_empty for rates, ttl for concurrency, horizon for all
 * but concurrency), and the settings every limit has (key, missing_key, overflow, units,
 * max_keys, keys_overflow, max_key_len). A limit may also be written as one string in the limit
 * spec grammar of include/sluice/spec.h (`stripe: rate=100/1s,burst=10`).
 *
 * Each value is checked where it is read, so its message points at it. Checks that involve
 * several fields (units above the burst, tiers that overlap) are the policy's own
 * (policy/policy_check.h), run once the limit is complete; the field they blame is mapped back to
 * the node that set it.
 */
#include "config/config_limits.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "policy/dotpath.h"
#include "policy/keytpl.h"
#include "policy/policy_check.h"
#include "sluice/error.h"
#include "sluice/spec.h"

/* Every key a limit may have. */
static const char *const limit_keys[] = {
    "rate",     "window",        "sliding",     "concurrency", "quota",       "permits",
    "period",   "tier",          "burst",       "start_empty", "horizon",     "ttl",
    "max_keys", "keys_overflow", "max_key_len", "key",         "missing_key", "overflow",
    "units",    "mode",          "overrides",   "adaptive",
};

/* Every key of one key's override: a limit definition. */
static const char *const override_keys[] = {
    "rate",   "window", "sliding",     "concurrency", "quota", "permits",
    "period", "burst",  "start_empty", "horizon",     "ttl",   "adaptive",
};

/* Every key a tier may have. */
static const char *const tier_keys[] = {
    "name",  "min",     "max",    "equals", "rate",        "window",  "sliding", "concurrency",
    "quota", "permits", "period", "burst",  "start_empty", "horizon", "ttl",     "adaptive",
};

/* The settings of an adaptive (AIMD) rate. */
static const char *const adaptive_keys[] = {"decrease", "recover", "floor"};

static const char *const tier_section_keys[] = {"field", "tiers"};
static const char *const quota_keys[] = {"budget", "period"};
static const char *const calendars[] = {"day", "month", "total"};
static const char *const overflows[] = {"wait", "reject"};
static const char *const modes[] = {"enforce", "shadow"};
static const char *const missing_keys[] = {"error", "global", "skip"};
static const char *const key_overflows[] = {"refuse", "allow"};
static const char *const key_words[] = {"none", "explicit"};
static const char *const units_words[] = {"task"};

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* The keys that set a limit's kind, in the order messages list them. */
typedef struct kind_key {
    const char *name;
    sluice_limit_kind kind; /* 0 for tier */
} kind_key;

static const kind_key kind_keys[] = {
    {"rate", SLUICE_RATE},
    {"window", SLUICE_WINDOW},
    {"sliding", SLUICE_SLIDING},
    {"permits", SLUICE_RATE},
    {"concurrency", SLUICE_CONCURRENCY},
    {"quota", SLUICE_QUOTA},
    {"tier", 0},
};

#define KINDS_LIMIT "rate, window, sliding, concurrency, quota or tier"
#define KINDS_TIER  "rate, window, sliding, concurrency or quota"

/* Largest count or budget of a limit (sluice_limit_def_validate's bound). */
#define MAX_COUNT SLUICE_MAX_PERMITS

/* Settings of a limit that every tier shares. */
typedef struct common_opts {
    int64_t max_keys;
    int key_overflow;
    int64_t max_key_len;
} common_opts;

static const kind_key *kind_of(const yaml_node_t *key)
{
    size_t len;
    const char *s = yw_text(key, &len);

    for (size_t i = 0; i < N_OF(kind_keys); i++) {
        if (strlen(kind_keys[i].name) == len && memcmp(kind_keys[i].name, s, len) == 0)
            return &kind_keys[i];
    }
    return NULL;
}

/* Finds the one kind key of a mapping whose keys were checked. *key is NULL when there is none;
 * a second one is an error. */
static int find_kind(ywalk *w, const yaml_node_t *map, int in_tier, const kind_key **kind,
                     yaml_node_t **key, yaml_node_t **value)
{
    *kind = NULL;
    *key = *value = NULL;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yw_node(w, p->key);
        const kind_key *kk = kind_of(k);
        size_t saved, len;
        const char *s;
        int rc;

        if (!kk)
            continue;
        if (*kind) {
            s = yw_text(k, &len);
            saved = yw_push(w, s, len);
            rc = yw_fail(w, k, SLUICE_EINVAL,
                         "a %s has exactly one of %s, and %s is already "
                         "given at line %d",
                         in_tier ? "tier" : "limit", in_tier ? KINDS_TIER : KINDS_LIMIT,
                         (*kind)->name, yw_line(*key));
            yw_pop(w, saved);
            return rc;
        }
        *kind = kk;
        *key = k;
        *value = yw_node(w, p->value);
    }
    return 0;
}

/* ---- Values of the kinds ----------------------------------------------------------------- */

/* Parses a count in [1, MAX_COUNT]: decimal digits, '_' allowed between two digits (1_000).
 * Returns 0, -1 (not a count) or -2 (out of range). */
static int parse_count(const char *s, size_t n, int64_t *out)
{
    int64_t v = 0;

    *out = 0;
    if (n == 0 || s[0] < '0' || s[0] > '9' || s[n - 1] < '0' || s[n - 1] > '9')
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '_' && s[i + 1] >= '0' && s[i + 1] <= '9')
            continue;
        if (s[i] < '0' || s[i] > '9')
            return -1;
        if (v <= MAX_COUNT)
            v = v * 10 + (s[i] - '0');
    }
    if (v < 1 || v > MAX_COUNT)
        return -2;
    *out = v;
    return 0;
}

/* Parses a period: a duration, or a bare unit meaning one of it ("m" = "1m"). */
static int parse_period(const char *s, size_t n, int64_t *ns)
{
    char buf[8];

    *ns = 0;
    if (n > 0 && (s[0] < '0' || s[0] > '9')) {
        if (n + 2 > sizeof(buf))
            return SLUICE_EPARSE;
        buf[0] = '1';
        memcpy(buf + 1, s, n);
        return sluice_spec_parse_duration(buf, n + 1, ns);
    }
    return sluice_spec_parse_duration(s, n, ns);
}

/* Checks a parsed period against the bounds of a limit. */
static int check_period(ywalk *w, const yaml_node_t *node, int rc, int64_t ns)
{
    yw_got g;

    if (rc == SLUICE_ERANGE || (rc == 0 && ns > SLUICE_MAX_PERIOD_NS))
        return yw_fail(w, node, SLUICE_EINVAL, "the period must be at most 366 days, got %s",
                       yw_describe(node, &g));
    if (rc == 0 && ns < 1)
        return yw_fail(w, node, SLUICE_EINVAL, "the period must be above zero, got %s",
                       yw_describe(node, &g));
    return rc == 0 ? 0 : SLUICE_EPARSE;
}

/* Reads "COUNT/PERIOD" (rate, window, sliding). */
static int parse_per(ywalk *w, const yaml_node_t *node, sluice_limit_def *def)
{
    const char *s, *slash;
    size_t n, nlen;
    yw_got g;
    int rc;

    if (!yw_is_scalar(node))
        goto syntax;
    s = yw_text(node, &n);
    slash = memchr(s, '/', n);
    if (!slash)
        goto syntax;
    nlen = (size_t)(slash - s);
    rc = parse_count(s, nlen, &def->limit);
    if (rc == -1)
        goto syntax;
    if (rc == -2)
        return yw_fail(w, node, SLUICE_EINVAL, "the count must be from 1 to %" PRId64 ", got %s",
                       MAX_COUNT, yw_describe(node, &g));
    rc = parse_period(slash + 1, n - nlen - 1, &def->period_ns);
    rc = check_period(w, node, rc, def->period_ns);
    if (rc == SLUICE_EPARSE)
        goto syntax;
    return rc;

syntax:
    return yw_fail(w, node, SLUICE_EINVAL, "expected COUNT/PERIOD such as 100/1m or 10/1s, got %s",
                   yw_describe(node, &g));
}

/* Reads a quota: "BUDGET/day|month|total" or {budget: N, period: day|month|total}. */
static int parse_quota(ywalk *w, const yaml_node_t *node, sluice_limit_def *def)
{
    const char *s, *slash;
    size_t n, nlen;
    int64_t budget = 0;
    yaml_node_t *key;
    yw_got g;
    int rc, cal = 0;

    if (node && node->type == YAML_MAPPING_NODE) {
        rc = yw_check_keys(w, node, quota_keys, N_OF(quota_keys));
        if (rc != 0)
            return rc;
        yw_get(w, node, "budget", &key);
        if (!key)
            return yw_fail(w, node, SLUICE_EINVAL, "missing budget: the units allowed per period");
        yw_get(w, node, "period", &key);
        if (!key)
            return yw_fail(w, node, SLUICE_EINVAL, "missing period: expected day, month or total");
        rc = yw_field_int(w, node, "budget", 1, MAX_COUNT, &budget);
        if (rc == 0)
            rc = yw_field_choice(w, node, "period", calendars, N_OF(calendars), &cal);
        if (rc != 0)
            return rc;
    } else {
        if (!yw_is_scalar(node))
            goto syntax;
        s = yw_text(node, &n);
        slash = memchr(s, '/', n);
        if (!slash)
            goto syntax;
        nlen = (size_t)(slash - s);
        rc = parse_count(s, nlen, &budget);
        if (rc == -1)
            goto syntax;
        if (rc == -2)
            return yw_fail(w, node, SLUICE_EINVAL,
                           "the budget must be from 1 to %" PRId64 ", got %s", MAX_COUNT,
                           yw_describe(node, &g));
        for (cal = 0; cal < (int)N_OF(calendars); cal++) {
            if (strlen(calendars[cal]) == n - nlen - 1 &&
                memcmp(calendars[cal], slash + 1, n - nlen - 1) == 0)
                break;
        }
        if (cal == (int)N_OF(calendars))
            goto syntax;
    }
    def->limit = budget;
    def->calendar = cal == 0 ? SLUICE_CAL_DAY : cal == 1 ? SLUICE_CAL_MONTH : SLUICE_CAL_NONE;
    return 0;

syntax:
    return yw_fail(w, node, SLUICE_EINVAL,
                   "expected BUDGET/day, BUDGET/month or BUDGET/total such as 1000/day, or "
                   "{budget: 1000, period: day}, got %s",
                   yw_describe(node, &g));
}

/* Reads the long form of a rate: permits: N with period: DURATION. */
static int parse_permits(ywalk *w, const yaml_node_t *map, const yaml_node_t *permits_key,
                         sluice_limit_def *def)
{
    yaml_node_t *key, *value = yw_get(w, map, "period", &key);
    size_t saved, n;
    const char *s;
    yw_got g;
    int rc;

    if (!key) {
        saved = yw_push(w, "permits", 7);
        rc = yw_fail(w, permits_key, SLUICE_EINVAL,
                     "permits needs a period, such as period: 1m (or write rate: N/1m)");
        yw_pop(w, saved);
        return rc;
    }
    rc = yw_field_int(w, map, "permits", 1, MAX_COUNT, &def->limit);
    if (rc != 0)
        return rc;
    saved = yw_push(w, "period", 6);
    if (!yw_is_scalar(value)) {
        rc = SLUICE_EPARSE;
    } else {
        s = yw_text(value, &n);
        rc = parse_period(s, n, &def->period_ns);
        rc = check_period(w, value, rc, def->period_ns);
    }
    if (rc == SLUICE_EPARSE)
        rc = yw_fail(w, value, SLUICE_EINVAL, "expected a period such as 1s, 1m or 1h, got %s",
                     yw_describe(value, &g));
    yw_pop(w, saved);
    return rc;
}

/* Fails when option `name` is present, with the message "NAME WHY". */
static int refuse_option(ywalk *w, const yaml_node_t *map, const char *name, const char *why)
{
    yaml_node_t *key;
    size_t saved;
    int rc;

    yw_get(w, map, name, &key);
    if (!key)
        return 0;
    saved = yw_push(w, name, strlen(name));
    rc = yw_fail(w, key, SLUICE_EINVAL, "%s %s", name, why);
    yw_pop(w, saved);
    return rc;
}

/* Reads `adaptive: {decrease: 0.5, recover: 10%/1m, floor: 5/1s}` of a rate (its period set),
 * each setting with the spec grammar's reader; a setting left out takes its default. */
static int parse_adaptive(ywalk *w, const yaml_node_t *map, sluice_limit_def *def)
{
    yaml_node_t *node = yw_get(w, map, "adaptive", NULL);
    size_t saved;
    int rc;

    if (!node)
        return 0;
    saved = yw_push(w, "adaptive", 8);
    rc = yw_expect_map(w, node, "a mapping of decrease, recover and floor");
    if (rc == 0)
        rc = yw_check_keys(w, node, adaptive_keys, N_OF(adaptive_keys));
    for (size_t i = 0; rc == 0 && i < N_OF(adaptive_keys); i++) {
        yaml_node_t *v = yw_get(w, node, adaptive_keys[i], NULL);
        const char *text;
        char why[200];
        size_t len, inner;

        if (!v)
            continue;
        inner = yw_push(w, adaptive_keys[i], strlen(adaptive_keys[i]));
        rc = yw_string(w, v, "a value", &text, &len);
        if (rc == 0 &&
            sluice_spec_parse_adaptive(adaptive_keys[i], text, len, def, why, sizeof(why)) != 0)
            rc = yw_fail(w, v, SLUICE_EINVAL, "%s", why);
        yw_pop(w, inner);
    }
    if (rc == 0 && def->decrease_den == 0) /* an empty mapping: every default */
        rc = sluice_spec_parse_adaptive("decrease", "0.5", 3, def, NULL, 0);
    yw_pop(w, saved);
    return rc;
}

/* Reads the definition of a limit or a tier from its mapping: the kind and the kind's own
 * options (burst, start_empty, horizon, ttl). The engine refuses a task whose wait would exceed
 * the horizon for every kind but concurrency, so horizon is accepted there too (the one-line
 * spec grammar keeps it to rates). `blame` is the node to point at when no kind is
 * given. The mapping's keys were checked. */
static int parse_def(ywalk *w, const yaml_node_t *map, const yaml_node_t *blame, int in_tier,
                     const kind_key *kind, yaml_node_t *kind_key_node, yaml_node_t *kind_value,
                     sluice_limit_def *def)
{
    const char *kname;
    yaml_node_t *key;
    size_t saved, len;
    const char *s;
    char why[120];
    int rc;

    yw_get(w, map, "period", &key);
    if (key && (!kind || strcmp(kind->name, "permits") != 0)) {
        saved = yw_push(w, "period", 6);
        rc = yw_fail(w, key, SLUICE_EINVAL,
                     "period goes with permits (permits: 15, period: 1m); or write rate: 15/1m");
        yw_pop(w, saved);
        return rc;
    }
    if (!kind)
        return yw_fail(w, blame, SLUICE_EINVAL, "no limit given: expected one of %s",
                       in_tier ? KINDS_TIER : KINDS_LIMIT);

    sluice_limit_def_init(def, kind->kind);
    if (kind->kind == SLUICE_RATE && strcmp(kind->name, "permits") == 0) {
        rc = parse_permits(w, map, kind_key_node, def);
    } else {
        s = yw_text(kind_key_node, &len);
        saved = yw_push(w, s, len);
        if (kind->kind == SLUICE_CONCURRENCY)
            rc = yw_int(w, kind_value, 1, MAX_COUNT, &def->limit);
        else if (kind->kind == SLUICE_QUOTA)
            rc = parse_quota(w, kind_value, def);
        else
            rc = parse_per(w, kind_value, def);
        yw_pop(w, saved);
    }
    if (rc != 0)
        return rc;

    kname = sluice_limit_kind_name(kind->kind);
    if (kind->kind != SLUICE_RATE) {
        snprintf(why, sizeof(why), "applies to rate limits only, and this is a %s limit", kname);
        if ((rc = refuse_option(w, map, "burst", why)) != 0 ||
            (rc = refuse_option(w, map, "start_empty", why)) != 0 ||
            (rc = refuse_option(w, map, "adaptive", why)) != 0)
            return rc;
    }
    if (kind->kind == SLUICE_CONCURRENCY) {
        rc = refuse_option(w, map, "horizon",
                           "applies to rate, window, sliding and quota limits, not to a "
                           "concurrency limit (its slots free up when tasks finish)");
        if (rc != 0)
            return rc;
    } else {
        snprintf(why, sizeof(why), "applies to concurrency limits only, and this is a %s limit",
                 kname);
        if ((rc = refuse_option(w, map, "ttl", why)) != 0)
            return rc;
    }
    if ((rc = yw_field_int(w, map, "burst", 1, MAX_COUNT, &def->burst)) != 0 ||
        (rc = yw_field_bool(w, map, "start_empty", &def->start_empty)) != 0 ||
        (rc = yw_field_duration(w, map, "horizon", 1, &def->horizon_ns)) != 0 ||
        (rc = yw_field_duration(w, map, "ttl", 1, &def->ttl_ns)) != 0)
        return rc;
    return parse_adaptive(w, map, def);
}

/* ---- Keys, units, tiers ------------------------------------------------------------------ */

static int starts_with_input(const char *s, size_t n)
{
    return n >= 6 && memcmp(s, "input.", 6) == 0;
}

/* Reads a dot-path value (the text starts with "input.") into an owned copy. */
static int take_path(ywalk *w, const yaml_node_t *node, const char *s, size_t n, char **out)
{
    char why[200];

    if (dotpath_validate(s, why, sizeof(why)) != 0)
        return yw_fail(w, node, SLUICE_EINVAL, "%s", why);
    *out = alloc_memdup0(s, n);
    return *out ? 0 : yw_fail(w, node, SLUICE_ENOMEM, "out of memory");
}

/* Reads a key template (keytpl.h) into an owned copy. A fault is reported at its own column when
 * the scalar sits on one line and holds no escape (its source is then the text itself, quoted or
 * not), else at the scalar. */
static int take_template(ywalk *w, const yaml_node_t *node, const char *s, size_t n, char **out)
{
    char why[300];
    size_t at;

    if (memchr(s, '\0', n))
        return yw_fail(w, node, SLUICE_EINVAL, "a key template cannot hold a NUL byte");
    *out = alloc_memdup0(s, n);
    if (!*out)
        return yw_fail(w, node, SLUICE_ENOMEM, "out of memory");
    if (keytpl_validate(*out, &at, why, sizeof(why)) != 0) {
        yaml_mark_t mark = node->start_mark;
        size_t quotes = node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE ? 0 : 2;

        alloc_free(*out);
        *out = NULL;
        if (node->end_mark.line == mark.line && node->end_mark.column - mark.column == n + quotes)
            mark.column += at + quotes / 2;
        return yw_fail_mark(w, mark, SLUICE_EINVAL, "%s", why);
    }
    return 0;
}

/* Fails for a word that is neither one of the words nor a path, with a hint. */
static int bad_word_or_path(ywalk *w, const yaml_node_t *node, const char *expected,
                            const char *const *words, size_t nwords)
{
    size_t n;
    const char *s = yw_text(node, &n), *hint = yw_suggest(s, n, words, nwords);
    yw_got g;

    if (hint)
        return yw_fail(w, node, SLUICE_EINVAL, "expected %s, got %s; did you mean \"%s\"?",
                       expected, yw_describe(node, &g), hint);
    if (n > 0 && n < 100 && dotpath_validate(s, NULL, 0) == 0)
        return yw_fail(w, node, SLUICE_EINVAL, "expected %s, got %s; did you mean \"input.%s\"?",
                       expected, yw_describe(node, &g), s);
    return yw_fail(w, node, SLUICE_EINVAL, "expected %s, got %s", expected, yw_describe(node, &g));
}

static int parse_key(ywalk *w, const yaml_node_t *map, sluice_limit_policy *p)
{
    static const char expected[] =
        "none, explicit or a path into the task's input such as input.tenant_id";
    yaml_node_t *key, *node = yw_get(w, map, "key", &key);
    size_t saved, n;
    const char *s;
    int rc, which;

    if (!key)
        return 0;
    saved = yw_push(w, "key", 3);
    /* `key: {input.user}:{input.tag}` unquoted is a YAML flow mapping, not text. */
    if (node && node->type == YAML_MAPPING_NODE)
        rc = yw_fail(w, node, SLUICE_EINVAL,
                     "expected %s, got a mapping; a key template that starts with '{' must be "
                     "quoted, e.g. key: \"{input.user}:{input.workflow_tag}\"",
                     expected);
    else
        rc = yw_string(w, node, expected, &s, &n);
    if (rc == 0) {
        if (memchr(s, '{', n) || memchr(s, '}', n)) {
            p->key_source = SLUICE_KEY_PATH;
            rc = take_template(w, node, s, n, &p->key_path);
        } else if (starts_with_input(s, n)) {
            p->key_source = SLUICE_KEY_PATH;
            rc = take_path(w, node, s, n, &p->key_path);
        } else if (yw_choice(w, node, key_words, N_OF(key_words), &which) == 0) {
            p->key_source = which == 0 ? SLUICE_KEY_NONE : SLUICE_KEY_EXPLICIT;
        } else {
            rc = bad_word_or_path(w, node, expected, key_words, N_OF(key_words));
        }
    }
    yw_pop(w, saved);
    return rc;
}

static int parse_units(ywalk *w, const yaml_node_t *map, sluice_limit_policy *p)
{
    static const char expected[] =
        "task, a positive integer or a path into the task's input such as input.tokens";
    yaml_node_t *key, *node = yw_get(w, map, "units", &key);
    size_t saved, n;
    const char *s;
    int rc, which;

    if (!key)
        return 0;
    saved = yw_push(w, "units", 5);
    if (yw_looks_int(node)) {
        p->units_source = SLUICE_UNITS_FIXED;
        rc = yw_int(w, node, 1, MAX_COUNT, &p->units_fixed);
    } else {
        rc = yw_string(w, node, expected, &s, &n);
        if (rc == 0) {
            if (starts_with_input(s, n)) {
                p->units_source = SLUICE_UNITS_PATH;
                rc = take_path(w, node, s, n, &p->units_path);
            } else if (yw_choice(w, node, units_words, N_OF(units_words), &which) == 0) {
                p->units_source = SLUICE_UNITS_TASK;
            } else {
                rc = bad_word_or_path(w, node, expected, units_words, N_OF(units_words));
            }
        }
    }
    yw_pop(w, saved);
    return rc;
}

/* Reads one tier (the item of `tiers` at index i, the path ending in "[i]"). */
static int parse_tier(ywalk *w, const yaml_node_t *item, sluice_tier *t)
{
    const kind_key *kind;
    yaml_node_t *kkey, *kvalue, *key, *name, *minkey, *maxkey;
    size_t saved, n;
    const char *s;
    char why[200];
    int rc;

    rc = yw_expect_map(w, item,
                       "a mapping with the tier's name, its match (min, max or equals) "
                       "and its limit");
    if (rc == 0)
        rc = yw_check_keys(w, item, tier_keys, N_OF(tier_keys));
    if (rc != 0)
        return rc;
    name = yw_get(w, item, "name", &key);
    if (!key)
        return yw_fail(w, item, SLUICE_EINVAL, "missing name: every tier has a name");
    saved = yw_push(w, "name", 4);
    rc = yw_string(w, name, "a tier name", &s, &n);
    if (rc == 0 && policy_check_name(s, why, sizeof(why)) != 0)
        rc = yw_fail(w, name, SLUICE_EINVAL, "%s", why);
    if (rc == 0) {
        t->name = alloc_memdup0(s, n);
        if (!t->name)
            rc = yw_fail(w, name, SLUICE_ENOMEM, "out of memory");
    }
    yw_pop(w, saved);
    if (rc != 0)
        return rc;

    if ((rc = yw_field_int(w, item, "min", INT64_MIN, INT64_MAX, &t->min)) != 0 ||
        (rc = yw_field_int(w, item, "max", INT64_MIN, INT64_MAX, &t->max)) != 0)
        return rc;
    yw_get(w, item, "min", &minkey);
    yw_get(w, item, "max", &maxkey);
    yw_get(w, item, "equals", &key);
    if (key) {
        saved = yw_push(w, "equals", 6);
        if (minkey || maxkey) {
            rc = yw_fail(w, key, SLUICE_EINVAL,
                         "a tier matches numbers (min, max) or a string (equals), not both");
        } else {
            rc = yw_string(w, yw_get(w, item, "equals", NULL), "the string this tier matches", &s,
                           &n);
            if (rc == 0) {
                t->equals = alloc_memdup0(s, n);
                if (!t->equals)
                    rc = yw_fail(w, key, SLUICE_ENOMEM, "out of memory");
            }
        }
        yw_pop(w, saved);
        if (rc != 0)
            return rc;
    }
    rc = find_kind(w, item, 1, &kind, &kkey, &kvalue);
    if (rc == 0)
        rc = parse_def(w, item, item, 1, kind, kkey, kvalue, &t->def);
    return rc;
}

static int parse_tiers(ywalk *w, const yaml_node_t *node, sluice_limit_policy *p)
{
    yaml_node_t *key, *field, *list;
    size_t saved, saved2, n;
    const char *s;
    int rc;

    rc = yw_expect_map(w, node, "a mapping with field and tiers");
    if (rc == 0)
        rc = yw_check_keys(w, node, tier_section_keys, N_OF(tier_section_keys));
    if (rc != 0)
        return rc;
    field = yw_get(w, node, "field", &key);
    if (!key)
        return yw_fail(w, node, SLUICE_EINVAL,
                       "missing field: the path of the input value that chooses the tier, such "
                       "as input.agent_count");
    saved = yw_push(w, "field", 5);
    rc = yw_string(w, field, "a path into the task's input such as input.agent_count", &s, &n);
    if (rc == 0 && !starts_with_input(s, n))
        rc = bad_word_or_path(w, field, "a path into the task's input such as input.agent_count",
                              NULL, 0);
    if (rc == 0)
        rc = take_path(w, field, s, n, &p->tier_path);
    yw_pop(w, saved);
    if (rc != 0)
        return rc;

    list = yw_get(w, node, "tiers", &key);
    if (!key)
        return yw_fail(w, node, SLUICE_EINVAL, "missing tiers: the list of tiers");
    saved = yw_push(w, "tiers", 5);
    if (!list || list->type != YAML_SEQUENCE_NODE ||
        list->data.sequence.items.top == list->data.sequence.items.start) {
        yw_got g;

        rc = yw_fail(w, list, SLUICE_EINVAL, "expected a list of at least one tier, got %s",
                     yw_describe(list, &g));
        yw_pop(w, saved);
        return rc;
    }
    n = (size_t)(list->data.sequence.items.top - list->data.sequence.items.start);
    p->tiers = alloc_calloc(n, sizeof(*p->tiers));
    if (!p->tiers) {
        rc = yw_fail(w, list, SLUICE_ENOMEM, "out of memory");
        yw_pop(w, saved);
        return rc;
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        sluice_tier *t = &p->tiers[i];

        t->min = INT64_MIN;
        t->max = INT64_MAX;
        p->ntiers = i + 1;
        saved2 = yw_push_index(w, i);
        rc = parse_tier(w, yw_node(w, list->data.sequence.items.start[i]), t);
        yw_pop(w, saved2);
    }
    yw_pop(w, saved);
    return rc;
}

/* ---- A limit ----------------------------------------------------------------------------- */

/* Pushes the path of the node a policy fault blames and returns that node (the limit's name key
 * when the field was not set in the file). */
static const yaml_node_t *fault_node(ywalk *w, const yaml_node_t *namekey, const yaml_node_t *map,
                                     const policy_fault *f)
{
    static const char *const match_keys[] = {"equals", "min", "max"};
    const char *field = NULL;
    yaml_node_t *key, *node, *tier, *list, *item;
    const kind_key *kind;
    size_t n;
    const char *s;

    switch (f->field) {
    case POLICY_FIELD_DEF:
        if (find_kind(w, map, 0, &kind, &key, &node) == 0 && kind) {
            s = yw_text(key, &n);
            yw_push(w, s, n);
            return node;
        }
        return namekey;
    case POLICY_FIELD_OVERRIDE:
        /* The override's value, by its index in the mapping (the loader keeps the file's order). */
        node = yw_get(w, map, "overrides", &key);
        if (!key)
            return namekey;
        yw_push(w, "overrides", 9);
        if (node->type != YAML_MAPPING_NODE ||
            f->index >= (size_t)(node->data.mapping.pairs.top - node->data.mapping.pairs.start))
            return key;
        s = yw_text(yw_node(w, node->data.mapping.pairs.start[f->index].key), &n);
        yw_push(w, s, n);
        return yw_node(w, node->data.mapping.pairs.start[f->index].value);
    case POLICY_FIELD_KEY:
        field = "key";
        break;
    case POLICY_FIELD_MISSING_KEY:
        field = "missing_key";
        break;
    case POLICY_FIELD_OVERFLOW:
        field = "overflow";
        break;
    case POLICY_FIELD_MODE:
        field = "mode";
        break;
    case POLICY_FIELD_UNITS:
        field = "units";
        break;
    case POLICY_FIELD_TIER_FIELD:
    case POLICY_FIELD_TIERS:
    case POLICY_FIELD_TIER_NAME:
    case POLICY_FIELD_TIER_MATCH:
    case POLICY_FIELD_TIER_DEF:
        tier = yw_get(w, map, "tier", &key);
        if (!key)
            return namekey;
        yw_push(w, "tier", 4);
        if (f->field == POLICY_FIELD_TIER_FIELD) {
            yw_push(w, "field", 5);
            return yw_get(w, tier, "field", NULL);
        }
        list = yw_get(w, tier, "tiers", &key);
        if (!key)
            return tier;
        yw_push(w, "tiers", 5);
        if (f->field == POLICY_FIELD_TIERS || list->type != YAML_SEQUENCE_NODE ||
            f->index >= (size_t)(list->data.sequence.items.top - list->data.sequence.items.start))
            return list;
        item = yw_node(w, list->data.sequence.items.start[f->index]);
        yw_push_index(w, f->index);
        if (f->field == POLICY_FIELD_TIER_NAME) {
            yw_push(w, "name", 4);
            return yw_get(w, item, "name", NULL);
        }
        if (f->field == POLICY_FIELD_TIER_MATCH) {
            for (size_t i = 0; i < N_OF(match_keys); i++) {
                node = yw_get(w, item, match_keys[i], &key);
                if (key) {
                    yw_push(w, match_keys[i], strlen(match_keys[i]));
                    return node;
                }
            }
            return item;
        }
        if (find_kind(w, item, 1, &kind, &key, &node) == 0 && kind) {
            s = yw_text(key, &n);
            yw_push(w, s, n);
            return node;
        }
        return item;
    default:
        return namekey;
    }
    node = yw_get(w, map, field, &key);
    if (!key)
        return namekey;
    yw_push(w, field, strlen(field));
    return node;
}

/* Runs the policy's own checks and reports a failure at the node that set the field (in map,
 * when given; else at `namekey`). */
static int check_limit(ywalk *w, const yaml_node_t *namekey, const yaml_node_t *map,
                       const sluice_limit_policy *p)
{
    policy_fault f;
    char why[400];
    size_t saved = w->pathlen;
    const yaml_node_t *at;
    int rc;

    if (policy_check_limit(p, &f, why, sizeof(why)) == 0)
        return 0;
    at = map ? fault_node(w, namekey, map, &f) : namekey;
    rc = yw_fail(w, at, SLUICE_EINVAL, "%s", why);
    yw_pop(w, saved);
    return rc;
}

/* Reads a limit written as one limit spec string. */
static int parse_spec_limit(ywalk *w, const yaml_node_t *node, sluice_limit_policy *p)
{
    char why[400];
    size_t n;
    const char *s;
    int rc;

    rc = yw_string(w, node,
                   "a mapping of the limit's settings, or a limit spec such as "
                   "rate=100/1m,burst=10",
                   &s, &n);
    if (rc != 0)
        return rc;
    if (sluice_spec_parse_limit(s, &p->def, why, sizeof(why)) != 0)
        return yw_fail(w, node, SLUICE_EINVAL, "%s", why);
    return 0;
}

/* Reads the definition of one override: a mapping as a tier's limit, or a limit spec string. */
static int parse_override_def(ywalk *w, const yaml_node_t *value, sluice_limit_def *def)
{
    const kind_key *kind;
    yaml_node_t *kkey, *kvalue;
    int rc;

    if (value->type == YAML_SCALAR_NODE) {
        char why[400];
        size_t n;
        const char *s;

        rc = yw_string(w, value, "the key's limit: a mapping such as {rate: 1000/1s}", &s, &n);
        if (rc == 0 && sluice_spec_parse_limit(s, def, why, sizeof(why)) != 0)
            rc = yw_fail(w, value, SLUICE_EINVAL, "%s", why);
        return rc;
    }
    rc = yw_expect_map(w, value, "the key's limit: a mapping such as {rate: 1000/1s}");
    if (rc == 0)
        rc = yw_check_keys(w, value, override_keys, N_OF(override_keys));
    if (rc == 0)
        rc = find_kind(w, value, 1, &kind, &kkey, &kvalue);
    if (rc == 0)
        rc = parse_def(w, value, value, 1, kind, kkey, kvalue, def);
    return rc;
}

/* Reads `overrides:`, a mapping of keys to their own limit (after the limit's own settings, whose
 * key table settings the overrides share). */
static int parse_overrides(ywalk *w, const yaml_node_t *map, sluice_limit_policy *p)
{
    yaml_node_t *key, *node = yw_get(w, map, "overrides", &key);
    size_t saved, n, count;
    const char *s;
    char why[200];
    int rc;

    if (!key)
        return 0;
    saved = yw_push(w, "overrides", 9);
    if (p->key_source == SLUICE_KEY_NONE || p->ntiers > 0) {
        rc = yw_fail(w, key, SLUICE_EINVAL,
                     "per-key overrides apply to a keyed limit without tiers");
        goto out;
    }
    rc = yw_expect_map(w, node,
                       "a mapping of keys to their own limit, e.g. {tenant-42: {rate: 1000/1s}}");
    if (rc != 0)
        goto out;
    count = (size_t)(node->data.mapping.pairs.top - node->data.mapping.pairs.start);
    if (count > SLUICE_MAX_KEY_OVERRIDES) {
        rc = yw_fail(w, node, SLUICE_EINVAL, "at most %d keys have overrides, got %zu",
                     SLUICE_MAX_KEY_OVERRIDES, count);
        goto out;
    }
    if (count == 0)
        goto out;
    p->overrides = alloc_calloc(count, sizeof(*p->overrides));
    if (!p->overrides) {
        rc = yw_fail(w, node, SLUICE_ENOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < count; i++) {
        yaml_node_pair_t *pair = &node->data.mapping.pairs.start[i];
        yaml_node_t *k = yw_node(w, pair->key), *v = yw_node(w, pair->value);
        sluice_key_override *o = &p->overrides[i];
        size_t saved2;

        rc = yw_string(w, k, "a key", &s, &n);
        if (rc == 0 && (memchr(s, '\0', n) || policy_check_override_key(s, n, why, sizeof(why))))
            rc = yw_fail(w, k, SLUICE_EINVAL, "%s",
                         memchr(s, '\0', n) ? "an override's key holds no NUL byte" : why);
        if (rc == 0 && policy_find_override(p, s, n) >= 0)
            rc = yw_fail(w, k, SLUICE_EINVAL, "key \"%.*s\" has two overrides", (int)n, s);
        if (rc != 0)
            goto out;
        o->key = alloc_memdup0(s, n);
        if (!o->key) {
            rc = yw_fail(w, k, SLUICE_ENOMEM, "out of memory");
            goto out;
        }
        p->noverrides = i + 1;
        saved2 = yw_push(w, s, n);
        rc = parse_override_def(w, v, &o->def);
        yw_pop(w, saved2);
        if (rc != 0)
            goto out;
        o->def.max_keys = p->def.max_keys;
        o->def.key_overflow = p->def.key_overflow;
        o->def.max_key_len = p->def.max_key_len;
    }
out:
    yw_pop(w, saved);
    return rc;
}

static int parse_limit(ywalk *w, const yaml_node_t *namekey, const yaml_node_t *map,
                       sluice_limit_policy *p)
{
    common_opts c = {(int64_t)SLUICE_DEFAULT_MAX_KEYS, SLUICE_KEYS_REFUSE,
                     (int64_t)SLUICE_DEFAULT_MAX_KEY_LEN};
    const kind_key *kind;
    yaml_node_t *kkey, *kvalue, *key;
    size_t saved;
    int rc, which;

    if (map && map->type == YAML_SCALAR_NODE) {
        rc = parse_spec_limit(w, map, p);
        return rc == 0 ? check_limit(w, map, NULL, p) : rc;
    }
    rc = yw_expect_map(w, map,
                       "a mapping of the limit's settings, or a limit spec such as "
                       "rate=100/1m,burst=10");
    if (rc == 0)
        rc = yw_check_keys(w, map, limit_keys, N_OF(limit_keys));
    if (rc == 0)
        rc = find_kind(w, map, 0, &kind, &kkey, &kvalue);
    if (rc != 0)
        return rc;

    if (kind && kind->kind == 0) {
        static const char why[] = "goes in each tier of a tiered limit";

        if ((rc = refuse_option(w, map, "burst", why)) != 0 ||
            (rc = refuse_option(w, map, "start_empty", why)) != 0 ||
            (rc = refuse_option(w, map, "horizon", why)) != 0 ||
            (rc = refuse_option(w, map, "ttl", why)) != 0 ||
            (rc = refuse_option(w, map, "period", why)) != 0)
            return rc;
        sluice_limit_def_init(&p->def, SLUICE_RATE);
        saved = yw_push(w, "tier", 4);
        rc = parse_tiers(w, kvalue, p);
        yw_pop(w, saved);
    } else {
        rc = parse_def(w, map, namekey, 0, kind, kkey, kvalue, &p->def);
    }
    if (rc != 0)
        return rc;

    if ((rc = parse_key(w, map, p)) != 0)
        return rc;
    yw_get(w, map, "missing_key", &key);
    if (key && p->key_source == SLUICE_KEY_NONE) {
        saved = yw_push(w, "missing_key", 11);

        rc = yw_fail(w, key, SLUICE_EINVAL,
                     "missing_key applies to a limit with a key, and this one has none");
        yw_pop(w, saved);
        return rc;
    }
    which = 0;
    if ((rc = yw_field_choice(w, map, "missing_key", missing_keys, N_OF(missing_keys), &which)) !=
        0)
        return rc;
    p->missing_key_global = which == 1;
    p->missing_key_skip = which == 2;
    which = 0;
    if ((rc = yw_field_choice(w, map, "overflow", overflows, N_OF(overflows), &which)) != 0)
        return rc;
    p->overflow = which == 1 ? SLUICE_OVERFLOW_REJECT : SLUICE_OVERFLOW_WAIT;
    which = 0;
    if ((rc = yw_field_choice(w, map, "mode", modes, N_OF(modes), &which)) != 0)
        return rc;
    p->mode = which == 1 ? SLUICE_MODE_SHADOW : SLUICE_MODE_ENFORCE;
    if ((rc = parse_units(w, map, p)) != 0)
        return rc;

    which = 0;
    if ((rc = yw_field_int(w, map, "max_keys", 1, INT64_MAX, &c.max_keys)) != 0 ||
        (rc = yw_field_choice(w, map, "keys_overflow", key_overflows, N_OF(key_overflows),
                              &which)) != 0 ||
        (rc = yw_field_int(w, map, "max_key_len", 32, 1 << 20, &c.max_key_len)) != 0)
        return rc;
    c.key_overflow = which == 1 ? SLUICE_KEYS_ALLOW : SLUICE_KEYS_REFUSE;
    p->def.max_keys = (size_t)c.max_keys;
    p->def.key_overflow = (sluice_key_overflow)c.key_overflow;
    p->def.max_key_len = (size_t)c.max_key_len;
    for (size_t i = 0; i < p->ntiers; i++) {
        p->tiers[i].def.max_keys = (size_t)c.max_keys;
        p->tiers[i].def.key_overflow = (sluice_key_overflow)c.key_overflow;
        p->tiers[i].def.max_key_len = (size_t)c.max_key_len;
    }
    if ((rc = parse_overrides(w, map, p)) != 0)
        return rc;
    return check_limit(w, namekey, map, p);
}

static int reserve_limits(ywalk *w, const yaml_node_t *section, size_t n, void *arg)
{
    sluice_config *cfg = arg;

    cfg->limits = alloc_calloc(n, sizeof(*cfg->limits));
    return cfg->limits ? 0 : yw_fail(w, section, SLUICE_ENOMEM, "out of memory");
}

static int parse_limit_entry(ywalk *w, size_t i, const yaml_node_t *key, const char *name,
                             size_t len, const yaml_node_t *value, void *arg)
{
    sluice_config *cfg = arg;
    sluice_limit_policy *p = &cfg->limits[i];

    sluice_limit_policy_init(p);
    cfg->nlimits = i + 1;
    p->name = alloc_memdup0(name, len);
    if (!p->name)
        return yw_fail(w, key, SLUICE_ENOMEM, "out of memory");
    p->line = yw_line(key);
    return parse_limit(w, key, value, p);
}

int config_parse_limits(ywalk *w, const yaml_node_t *section, sluice_config *cfg)
{
    static const yw_named limits = {"limit", "a mapping of limit names to their settings",
                                    reserve_limits, parse_limit_entry};

    return yw_each_named(w, section, &limits, cfg);
}
