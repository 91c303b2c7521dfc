/* SPDX-License-Identifier: MIT */
/*
 * The configuration file: loading, the top level, the `engine:` and `types:` sections, and
 * freeing (the `limits:` section is config_limits.c; installing into an engine is
 * config_apply.c).
 *
 * sluice_config_parse() has libyaml compose the whole document into a node tree first, so a YAML
 * syntax error is reported before anything is interpreted, and the walk that follows can look
 * keys up in any order and point every message at the node it is about (yaml_walk.h). The result
 * is built in a local sluice_config and handed out only when everything, cross-references
 * included, checked out; on failure it is cleared, so nothing leaks and *out stays zeroed.
 *
 * Sections are read in a fixed order (engine, store, limits, types) whatever their order in the
 * file, because types refer to limits by name. The `store:` section is config_store.c.
 */
#include "sluice/config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include <yaml.h>

#include "config/config_limits.h"
#include "config/config_store.h"
#include "config/yaml_walk.h"
#include "base/alloc.h"
#include "base/quote.h"
#include "base/grow.h"
#include "base/hash.h"
#include "base/ptab.h"
#include "policy/policy_check.h"
#include "sluice/error.h"

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

/* The name shown in messages for a buffer parsed without a file name. */
#define NO_NAME "<config>"

static const char *const top_keys[] = {"enabled", "engine",    "store",
                                       "limits",  "maxmemory", "types"};
static const char *const engine_keys[] = {"max_tasks",    "max_parked",     "max_finished",
                                          "strict_types", "event_interval", "default_lease"};
static const char *const type_keys[] = {
    "limits", "priority", "lease", "retry", "fairness", "fair_key", "charge_redelivery"};
static const char *const fairnesses[] = {"fifo", "keys"};
static const char *const retry_keys[] = {"max_attempts", "backoff", "base", "max",
                                         "throttle_retries"};
static const char *const backoffs[] = {"fixed", "exponential"};

/* ---- engine: ------------------------------------------------------------------------------ */

static int parse_engine(ywalk *w, const yaml_node_t *node, sluice_engine_policy *e)
{
    int64_t max_tasks = (int64_t)e->max_tasks, max_parked = (int64_t)e->max_parked,
            max_finished = (int64_t)e->max_finished;
    policy_fault f;
    char why[200];
    int rc;

    if (!node || yw_is_null(node))
        return 0;
    rc = yw_expect_map(w, node, "a mapping of engine settings");
    if (rc == 0)
        rc = yw_check_keys(w, node, engine_keys, N_OF(engine_keys));
    if (rc != 0)
        return rc;
    if ((rc = yw_field_int(w, node, "max_tasks", 1, INT64_MAX, &max_tasks)) != 0 ||
        (rc = yw_field_int(w, node, "max_parked", 1, INT64_MAX, &max_parked)) != 0 ||
        (rc = yw_field_int(w, node, "max_finished", 0, INT64_MAX, &max_finished)) != 0 ||
        (rc = yw_field_bool(w, node, "strict_types", &e->strict_types)) != 0 ||
        (rc = yw_field_duration(w, node, "event_interval", 1, &e->event_interval_ns)) != 0 ||
        (rc = yw_field_duration(w, node, "default_lease", 1, &e->default_lease_ns)) != 0)
        return rc;
    e->max_tasks = (size_t)max_tasks;
    e->max_parked = (size_t)max_parked;
    e->max_finished = (size_t)max_finished;
    /* Every value was checked as it was read; this only guards against the two drifting. */
    if (policy_check_engine(e, &f, why, sizeof(why)) != 0)
        return yw_fail(w, node, SLUICE_EINVAL, "%s", why);
    return 0;
}

/* ---- types: ------------------------------------------------------------------------------- */

/* ---- The names' index --------------------------------------------------------------------- */

/* sluice_config.index: the limits and the types by name, so that the lookups of a type's limits
 * and of a reload (every old limit in the new configuration) are O(1), not O(limits) each. A
 * table is used only while it holds every entry (n == nlimits / ntypes); otherwise the lookups
 * fall back to a scan, which is what a configuration built by hand gets. */
typedef struct config_index {
    ptab limits;
    ptab types;
} config_index;

static int limit_name_eq(const void *p, const void *key)
{
    return strcmp(((const sluice_limit_policy *)p)->name, key) == 0;
}

static int type_name_eq(const void *p, const void *key)
{
    return strcmp(((const sluice_type_policy *)p)->name, key) == 0;
}

/* Files the limits (types == 0) or the types of cfg in its index. Returns 0 or SLUICE_ENOMEM. */
static int index_build(sluice_config *cfg, int types)
{
    config_index *ix = cfg->index;
    size_t n = types ? cfg->ntypes : cfg->nlimits;
    ptab *t;

    if (!ix) {
        ix = alloc_calloc(1, sizeof(*ix));
        if (!ix)
            return SLUICE_ENOMEM;
        ptab_init(&ix->limits);
        ptab_init(&ix->types);
        cfg->index = ix;
    }
    t = types ? &ix->types : &ix->limits;
    if (ptab_reserve(t, n) != SLUICE_OK)
        return SLUICE_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        const char *name = types ? cfg->types[i].name : cfg->limits[i].name;

        (void)ptab_insert(t, hash_bytes(name, strlen(name)),
                          types ? (void *)&cfg->types[i] : (void *)&cfg->limits[i]);
    }
    return 0;
}

/* Fails for a limit name no limit has, suggesting a close one or listing the declared ones. */
static int unknown_limit(ywalk *w, const yaml_node_t *node, const sluice_config *cfg)
{
    const char *best = NULL, *s;
    size_t len, best_d = SIZE_MAX, o = 0;
    char list[300];
    yw_quoted q;

    s = yw_text(node, &len);
    for (size_t i = 0; i < cfg->nlimits; i++) {
        size_t d = yw_typo_distance(s, len, cfg->limits[i].name);

        if (d < best_d) {
            best = cfg->limits[i].name;
            best_d = d;
        }
    }
    if (best)
        return yw_fail(w, node, SLUICE_EINVAL, "unknown limit %s; did you mean \"%s\"?",
                       yw_quote(&q, s, len), best);
    if (cfg->nlimits == 0)
        return yw_fail(w, node, SLUICE_EINVAL, "unknown limit %s: the limits section declares none",
                       yw_quote(&q, s, len));
    list[0] = '\0';
    for (size_t i = 0; i < cfg->nlimits; i++) {
        int m = snprintf(list + o, sizeof(list) - o, "%s%s", i ? ", " : "", cfg->limits[i].name);

        if (m < 0 || (size_t)m >= sizeof(list) - o) {
            snprintf(list + o, sizeof(list) - o, ", ...");
            break;
        }
        o += (size_t)m;
    }
    return yw_fail(w, node, SLUICE_EINVAL, "unknown limit %s; the limits declared are %s",
                   yw_quote(&q, s, len), list);
}

/* Reads `limits:` of a type: a list of declared limit names (or one name). */
static int parse_type_limits(ywalk *w, const yaml_node_t *node, const sluice_config *cfg,
                             sluice_type_policy *t)
{
    yaml_node_item_t *items = NULL;
    size_t n = 1, saved;
    yw_got g;
    int rc = 0;

    if (yw_is_null(node))
        return 0;
    if (node->type == YAML_SEQUENCE_NODE) {
        items = node->data.sequence.items.start;
        n = (size_t)(node->data.sequence.items.top - items);
        if (n == 0)
            return 0;
    } else if (node->type != YAML_SCALAR_NODE) {
        return yw_fail(w, node, SLUICE_EINVAL, "expected a list of limit names, got %s",
                       yw_describe(node, &g));
    }
    t->limits = alloc_calloc(n, sizeof(*t->limits));
    if (!t->limits)
        return yw_fail(w, node, SLUICE_ENOMEM, "out of memory");
    for (size_t i = 0; i < n && rc == 0; i++) {
        const yaml_node_t *item = items ? yw_node(w, items[i]) : node;
        const sluice_limit_policy *lim;
        const char *s;
        size_t len;

        saved = items ? yw_push_index(w, i) : w->pathlen;
        rc = yw_string(w, item, "a limit name", &s, &len);
        if (rc == 0) {
            lim = sluice_config_find_limit(cfg, s);
            if (!lim) {
                rc = unknown_limit(w, item, cfg);
            } else {
                t->limits[i] = alloc_memdup0(s, len);
                t->nlimits = i + 1;
                if (!t->limits[i])
                    rc = yw_fail(w, item, SLUICE_ENOMEM, "out of memory");
            }
        }
        yw_pop(w, saved);
    }
    return rc;
}

static int parse_retry(ywalk *w, const yaml_node_t *node, sluice_retry_policy *r)
{
    int64_t attempts = r->max_attempts;
    int backoff = (int)r->backoff;
    int rc;

    if (yw_is_null(node))
        return 0;
    rc = yw_expect_map(w, node, "a mapping of retry settings");
    if (rc == 0)
        rc = yw_check_keys(w, node, retry_keys, N_OF(retry_keys));
    if (rc != 0)
        return rc;
    if ((rc = yw_field_int(w, node, "max_attempts", 1, INT_MAX, &attempts)) != 0 ||
        (rc = yw_field_choice(w, node, "backoff", backoffs, N_OF(backoffs), &backoff)) != 0 ||
        (rc = yw_field_duration(w, node, "base", 0, &r->base_ns)) != 0 ||
        (rc = yw_field_duration(w, node, "max", 0, &r->max_ns)) != 0 ||
        (rc = yw_field_bool(w, node, "throttle_retries", &r->throttle_retries)) != 0)
        return rc;
    r->max_attempts = (int)attempts;
    r->backoff = backoff == 0 ? SLUICE_BACKOFF_FIXED : SLUICE_BACKOFF_EXPONENTIAL;
    return 0;
}

/* Pushes the path of the node a type fault blames and returns it. */
static const yaml_node_t *type_fault_node(ywalk *w, const yaml_node_t *namekey,
                                          const yaml_node_t *map, const policy_fault *f)
{
    const char *field = NULL, *alt = NULL;
    yaml_node_t *key, *node, *retry;

    if (!map || map->type != YAML_MAPPING_NODE)
        return namekey;
    switch (f->field) {
    case POLICY_FIELD_LIMITS:
        node = yw_get(w, map, "limits", &key);
        if (!key)
            return namekey;
        yw_push(w, "limits", 6);
        if (node->type == YAML_SEQUENCE_NODE &&
            f->index < (size_t)(node->data.sequence.items.top - node->data.sequence.items.start)) {
            yw_push_index(w, f->index);
            return yw_node(w, node->data.sequence.items.start[f->index]);
        }
        return node;
    case POLICY_FIELD_LEASE:
        field = "lease";
        break;
    case POLICY_FIELD_FAIRNESS:
        field = "fairness";
        break;
    case POLICY_FIELD_FAIR_KEY:
        field = "fair_key";
        break;
    case POLICY_FIELD_CHARGE_REDELIVERY:
        field = "charge_redelivery";
        break;
    case POLICY_FIELD_RETRY_MAX_ATTEMPTS:
        alt = "max_attempts";
        break;
    case POLICY_FIELD_RETRY_BACKOFF:
        alt = "backoff";
        break;
    case POLICY_FIELD_RETRY_BASE:
        alt = "base";
        break;
    case POLICY_FIELD_RETRY_MAX:
        alt = "max";
        break;
    case POLICY_FIELD_RETRY_THROTTLE:
        alt = "throttle_retries";
        break;
    default:
        return namekey;
    }
    if (field) {
        node = yw_get(w, map, field, &key);
        if (!key)
            return namekey;
        yw_push(w, field, strlen(field));
        return node;
    }
    retry = yw_get(w, map, "retry", &key);
    if (!key)
        return namekey;
    yw_push(w, "retry", 5);
    node = yw_get(w, retry, alt, &key);
    if (!key && f->field == POLICY_FIELD_RETRY_MAX) {
        /* A base above the default max: blame the base that was given. */
        alt = "base";
        node = yw_get(w, retry, alt, &key);
    }
    if (!key)
        return retry;
    yw_push(w, alt, strlen(alt));
    return node;
}

/* Reads `fairness:` and `fair_key:` of a type. The tenant of fair dispatch is the key of one of
 * the type's limits: fair_key names it, by default the first keyed limit of `limits`, and it
 * must be keyed (a limit without a key gives every task the same tenant). */
static int parse_fairness(ywalk *w, const yaml_node_t *namekey, const yaml_node_t *map,
                          const sluice_config *cfg, sluice_type_policy *t)
{
    int fairness = (int)t->fairness, rc;
    const sluice_limit_policy *lim = NULL;
    yaml_node_t *key, *node;
    const char *s;
    size_t len, saved;
    yw_quoted q;

    rc = yw_field_choice(w, map, "fairness", fairnesses, N_OF(fairnesses), &fairness);
    if (rc != 0)
        return rc;
    t->fairness = fairness == 1 ? SLUICE_FAIR_KEYS : SLUICE_FAIR_FIFO;
    node = yw_get(w, map, "fair_key", &key);
    if (key) {
        saved = yw_push(w, "fair_key", 8);
        rc = yw_string(w, node, "a limit name", &s, &len);
        if (rc == 0 && t->fairness != SLUICE_FAIR_KEYS)
            rc = yw_fail(w, node, SLUICE_EINVAL, "fair_key needs fairness: keys");
        for (size_t i = 0; rc == 0 && !lim && i < t->nlimits; i++)
            if (strlen(t->limits[i]) == len && memcmp(t->limits[i], s, len) == 0)
                lim = sluice_config_find_limit(cfg, t->limits[i]);
        if (rc == 0 && !lim)
            rc = yw_fail(w, node, SLUICE_EINVAL,
                         "%s is not one of the type's limits (fair_key names the limit whose key "
                         "is a task's tenant)",
                         yw_quote(&q, s, len));
        if (rc == 0 && lim->key_source == SLUICE_KEY_NONE)
            rc = yw_fail(w, node, SLUICE_EINVAL,
                         "limit \"%s\" has no key, so it cannot tell tenants apart", lim->name);
        yw_pop(w, saved);
        if (rc != 0)
            return rc;
    } else if (t->fairness == SLUICE_FAIR_KEYS) {
        for (size_t i = 0; !lim && i < t->nlimits; i++) {
            lim = sluice_config_find_limit(cfg, t->limits[i]);
            if (lim && lim->key_source == SLUICE_KEY_NONE)
                lim = NULL;
        }
        if (!lim) {
            node = yw_get(w, map, "fairness", &key);
            saved = yw_push(w, "fairness", 8);
            rc = yw_fail(w, node ? node : namekey, SLUICE_EINVAL,
                         "keys shares workers between the keys of a keyed limit, and none of "
                         "the type's limits has a key");
            yw_pop(w, saved);
            return rc;
        }
    }
    if (lim) {
        t->fair_key = alloc_memdup0(lim->name, strlen(lim->name));
        if (!t->fair_key)
            return yw_fail(w, map, SLUICE_ENOMEM, "out of memory");
    }
    return 0;
}

static int parse_type(ywalk *w, const yaml_node_t *namekey, const yaml_node_t *map,
                      const sluice_config *cfg, sluice_type_policy *t)
{
    int64_t priority = t->priority;
    yaml_node_t *key, *node;
    policy_fault f;
    char why[400];
    size_t saved;
    int rc;

    if (!yw_is_null(map)) {
        rc = yw_expect_map(w, map, "a mapping of the type's settings");
        if (rc == 0)
            rc = yw_check_keys(w, map, type_keys, N_OF(type_keys));
        if (rc != 0)
            return rc;
        node = yw_get(w, map, "limits", &key);
        if (key) {
            saved = yw_push(w, "limits", 6);
            rc = parse_type_limits(w, node, cfg, t);
            yw_pop(w, saved);
            if (rc != 0)
                return rc;
        }
        if ((rc = yw_field_int(w, map, "priority", INT_MIN, INT_MAX, &priority)) != 0 ||
            (rc = yw_field_duration(w, map, "lease", 1, &t->lease_ns)) != 0)
            return rc;
        t->priority = (int)priority;
        node = yw_get(w, map, "retry", &key);
        if (key) {
            saved = yw_push(w, "retry", 5);
            rc = parse_retry(w, node, &t->retry);
            yw_pop(w, saved);
            if (rc != 0)
                return rc;
        }
        if ((rc = yw_field_bool(w, map, "charge_redelivery", &t->charge_redelivery)) != 0 ||
            (rc = parse_fairness(w, namekey, map, cfg, t)) != 0)
            return rc;
    }
    if (policy_check_type(t, &f, why, sizeof(why)) != 0) {
        const yaml_node_t *at;

        saved = w->pathlen;
        at = type_fault_node(w, namekey, map, &f);
        rc = yw_fail(w, at, SLUICE_EINVAL, "%s", why);
        yw_pop(w, saved);
        return rc;
    }
    return 0;
}

static int reserve_types(ywalk *w, const yaml_node_t *section, size_t n, void *arg)
{
    sluice_config *cfg = arg;

    cfg->types = alloc_calloc(n, sizeof(*cfg->types));
    return cfg->types ? 0 : yw_fail(w, section, SLUICE_ENOMEM, "out of memory");
}

static int parse_type_entry(ywalk *w, size_t i, const yaml_node_t *key, const char *name,
                            size_t len, const yaml_node_t *value, void *arg)
{
    sluice_config *cfg = arg;
    sluice_type_policy *t = &cfg->types[i];

    sluice_type_policy_init(t);
    cfg->ntypes = i + 1;
    t->name = alloc_memdup0(name, len);
    if (!t->name)
        return yw_fail(w, key, SLUICE_ENOMEM, "out of memory");
    t->line = yw_line(key);
    return parse_type(w, key, value, cfg, t);
}

static int parse_types(ywalk *w, const yaml_node_t *section, sluice_config *cfg)
{
    static const yw_named types = {"type", "a mapping of task type names to their settings",
                                   reserve_types, parse_type_entry};

    return yw_each_named(w, section, &types, cfg);
}

/* ---- The document ------------------------------------------------------------------------ */

/* Reports a libyaml error. `text` is the input, to turn a reader error's byte offset into a
 * line and column. */
static int yaml_error(ywalk *w, const yaml_parser_t *parser, const char *text, size_t len)
{
    yaml_mark_t mark = parser->problem_mark;
    const char *problem = parser->problem ? parser->problem : "unknown error";

    if (parser->error == YAML_MEMORY_ERROR)
        return yw_fail(w, NULL, SLUICE_ENOMEM, "out of memory");
    if (parser->error == YAML_READER_ERROR) {
        size_t line = 0, col = 0;

        for (size_t i = 0; i < parser->problem_offset && i < len; i++) {
            if (text[i] == '\n') {
                line++;
                col = 0;
            } else {
                col++;
            }
        }
        mark.line = line;
        mark.column = col;
        if (parser->problem_value >= 0)
            return yw_fail_mark(w, mark, SLUICE_EPARSE, "invalid text: %s (byte 0x%02x)", problem,
                                (unsigned)parser->problem_value);
        return yw_fail_mark(w, mark, SLUICE_EPARSE, "invalid text: %s", problem);
    }
    if (parser->context)
        return yw_fail_mark(
            w, mark, SLUICE_EPARSE, "YAML syntax error: %s (%s at line %zu, column %zu)", problem,
            parser->context, parser->context_mark.line + 1, parser->context_mark.column + 1);
    return yw_fail_mark(w, mark, SLUICE_EPARSE, "YAML syntax error: %s", problem);
}

/* Refuses a document nested deeper than SLUICE_CONFIG_MAX_DEPTH, reading it as events up to the
 * first collection too deep: the cost of that read is bounded by the depth cap, however deep the
 * file goes, where loading it whole is quadratic in its depth. Returns 0 when the depth is
 * within bounds, or for a syntax error (which yaml_parser_load then reports as usual). */
static int check_depth(ywalk *w, const char *text, size_t len)
{
    yaml_parser_t parser;
    yaml_event_t ev;
    int depth = 0, rc = 0, done = 0;

    if (!yaml_parser_initialize(&parser))
        return yw_fail(w, NULL, SLUICE_ENOMEM, "out of memory");
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    while (!done && rc == 0) {
        if (!yaml_parser_parse(&parser, &ev))
            break;
        switch (ev.type) {
        case YAML_MAPPING_START_EVENT:
        case YAML_SEQUENCE_START_EVENT:
            if (++depth > SLUICE_CONFIG_MAX_DEPTH)
                rc = yw_fail_mark(w, ev.start_mark, SLUICE_EINVAL,
                                  "nested more than %d levels deep (mappings and lists)",
                                  SLUICE_CONFIG_MAX_DEPTH);
            break;
        case YAML_MAPPING_END_EVENT:
        case YAML_SEQUENCE_END_EVENT:
            depth--;
            break;
        case YAML_STREAM_END_EVENT:
            done = 1;
            break;
        default:
            break;
        }
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&parser);
    return rc;
}

/* Walks the root of the document into cfg. */
static int walk(ywalk *w, const yaml_node_t *root, const char *const *ignored, sluice_config *cfg)
{
    const char *names[N_OF(top_keys) + SLUICE_CONFIG_MAX_IGNORED];
    size_t nnames = 0;
    yaml_node_t *node;
    size_t saved;
    int enabled = 1, rc;

    /* The sections, and the top-level keys the caller reads itself. */
    for (size_t i = 0; i < N_OF(top_keys); i++)
        names[nnames++] = top_keys[i];
    for (size_t i = 0; ignored && ignored[i] && i < SLUICE_CONFIG_MAX_IGNORED; i++)
        names[nnames++] = ignored[i];
    rc = yw_expect_map(w, root, "a mapping with the sections engine, limits and types");
    if (rc == 0)
        rc = yw_check_keys(w, root, names, nnames);
    if (rc != 0)
        return rc;

    /* Seed 004's global switch: off lets every limit through, still counting. */
    rc = yw_field_bool(w, root, "enabled", &enabled);
    if (rc != 0)
        return rc;
    cfg->disabled = !enabled;

    /* The server's memory budget (server/memory.h): read here so one file says it all. */
    node = yw_get(w, root, "maxmemory", NULL);
    if (node && !yw_is_null(node)) {
        const char *text;
        size_t len;

        saved = yw_push(w, "maxmemory", 9);
        rc = yw_string(w, node, "a size in bytes such as 536870912, 512mb or 2gb", &text, &len);
        if (rc == 0 && alloc_parse_size(text, len, &cfg->maxmemory) != 0)
            rc = yw_fail(w, node, SLUICE_EINVAL,
                         "expected a size in bytes such as 536870912, 512mb or 2gb (0: no limit)");
        yw_pop(w, saved);
        if (rc != 0)
            return rc;
        cfg->has_maxmemory = 1;
    }

    node = yw_get(w, root, "engine", NULL);
    saved = yw_push(w, "engine", 6);
    rc = parse_engine(w, node, &cfg->engine);
    yw_pop(w, saved);
    if (rc != 0)
        return rc;

    node = yw_get(w, root, "store", NULL);
    saved = yw_push(w, "store", 5);
    rc = config_parse_store(w, node, &cfg->store);
    yw_pop(w, saved);
    if (rc != 0)
        return rc;

    node = yw_get(w, root, "limits", NULL);
    saved = yw_push(w, "limits", 6);
    rc = config_parse_limits(w, node, cfg);
    yw_pop(w, saved);
    if (rc == 0 && index_build(cfg, 0) != 0)
        rc = yw_fail(w, NULL, SLUICE_ENOMEM, "out of memory");
    if (rc != 0)
        return rc;

    node = yw_get(w, root, "types", NULL);
    saved = yw_push(w, "types", 5);
    rc = parse_types(w, node, cfg);
    yw_pop(w, saved);
    if (rc == 0 && index_build(cfg, 1) != 0)
        rc = yw_fail(w, NULL, SLUICE_ENOMEM, "out of memory");
    return rc;
}

int sluice_config_parse(const char *text, size_t len, const char *name, sluice_config *out,
                        char *msg, size_t msglen)
{
    return sluice_config_parse_ignoring(text, len, name, NULL, out, msg, msglen);
}

int sluice_config_parse_ignoring(const char *text, size_t len, const char *name,
                                 const char *const *ignored, sluice_config *out, char *msg,
                                 size_t msglen)
{
    sluice_config cfg;
    yaml_parser_t parser;
    yaml_document_t doc, extra;
    yaml_node_t *root, *extra_root;
    ywalk w;
    int rc;

    if (msg && msglen > 0)
        msg[0] = '\0';
    if (!out)
        return SLUICE_EINVAL;
    memset(out, 0, sizeof(*out));
    if (!text && len > 0)
        return SLUICE_EINVAL;
    memset(&cfg, 0, sizeof(cfg));
    sluice_engine_policy_init(&cfg.engine);
    if (!yaml_parser_initialize(&parser)) {
        msgf(msg, msglen, "%s: out of memory", name ? name : NO_NAME);
        return SLUICE_ENOMEM;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)(text ? text : ""), len);
    yw_init(&w, NULL, name ? name : NO_NAME, msg, msglen);
    rc = check_depth(&w, text ? text : "", len);
    if (rc != 0)
        goto fail_load;
    if (!yaml_parser_load(&parser, &doc)) {
        rc = yaml_error(&w, &parser, text, len);
        goto fail_load;
    }
    w.doc = &doc;
    root = yaml_document_get_root_node(&doc);
    if (!root) {
        rc = yw_fail(&w, NULL, SLUICE_EINVAL,
                     "the file is empty: expected a mapping with the sections engine, limits and "
                     "types");
        goto fail_doc;
    }
    if (!yaml_parser_load(&parser, &extra)) {
        rc = yaml_error(&w, &parser, text, len);
        goto fail_doc;
    }
    extra_root = yaml_document_get_root_node(&extra);
    if (extra_root) {
        rc = yw_fail_mark(&w, extra.start_mark, SLUICE_EINVAL,
                          "a second YAML document: a configuration file holds exactly one");
        yaml_document_delete(&extra);
        goto fail_doc;
    }
    yaml_document_delete(&extra);

    rc = walk(&w, root, ignored, &cfg);
    if (rc != 0)
        goto fail_walk;
    if (name) {
        cfg.path = alloc_memdup0(name, strlen(name));
        if (!cfg.path) {
            rc = yw_fail(&w, NULL, SLUICE_ENOMEM, "out of memory");
            goto fail_walk;
        }
    }
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    *out = cfg;
    return 0;

fail_walk:
    sluice_config_clear(&cfg);
fail_doc:
    yaml_document_delete(&doc);
fail_load:
    yaml_parser_delete(&parser);
    return rc;
}

/* ---- Files ------------------------------------------------------------------------------- */

/* Reads the whole file into an allocated buffer. Returns 0 or an error with msg written. */
static int read_file(const char *path, char **text, size_t *len, char *msg, size_t msglen)
{
    FILE *f;
    char *buf = NULL;
    size_t cap = 0, n = 0, got;
    int rc = 0, err;

    *text = NULL;
    *len = 0;
    f = fopen(path, "rb");
    if (!f) {
        err = errno;
        msgf(msg, msglen, "%s: cannot open: %s", path, strerror(err));
        return err == ENOENT ? SLUICE_ENOTFOUND : SLUICE_EINVAL;
    }
    /* Reads at most one byte past the cap: enough to tell the file is too large, however
     * large it is (a reload must not spend its time on one that is refused anyway). */
    for (;;) {
        size_t want;

        if (n > SLUICE_CONFIG_MAX_BYTES) {
            msgf(msg, msglen,
                 "%s: the file is larger than %zu bytes, the most a configuration may have", path,
                 (size_t)SLUICE_CONFIG_MAX_BYTES);
            rc = SLUICE_EINVAL;
            break;
        }
        if (n == cap && grow_array(&buf, &cap, n + 1, 1, 4096) != SLUICE_OK) {
            msgf(msg, msglen, "%s: out of memory", path);
            rc = SLUICE_ENOMEM;
            break;
        }
        want = cap - n;
        if (want > SLUICE_CONFIG_MAX_BYTES + 1 - n)
            want = SLUICE_CONFIG_MAX_BYTES + 1 - n;
        got = fread(buf + n, 1, want, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) {
                err = errno;
                msgf(msg, msglen, "%s: cannot read: %s", path, strerror(err));
                rc = SLUICE_EINVAL;
            }
            break;
        }
    }
    fclose(f);
    if (rc != 0) {
        alloc_free(buf);
        return rc;
    }
    *text = buf;
    *len = n;
    return 0;
}

int sluice_config_load(const char *path, sluice_config *out, char *msg, size_t msglen)
{
    char *text;
    size_t len;
    int rc;

    if (msg && msglen > 0)
        msg[0] = '\0';
    if (!out)
        return SLUICE_EINVAL;
    memset(out, 0, sizeof(*out));
    if (!path)
        return SLUICE_EINVAL;
    rc = read_file(path, &text, &len, msg, msglen);
    if (rc != 0)
        return rc;
    rc = sluice_config_parse(text, len, path, out, msg, msglen);
    alloc_free(text);
    return rc;
}

/* ---- The result -------------------------------------------------------------------------- */

void sluice_config_clear(sluice_config *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->nlimits; i++)
        sluice_limit_policy_clear(&c->limits[i]);
    alloc_free(c->limits);
    for (size_t i = 0; i < c->ntypes; i++)
        sluice_type_policy_clear(&c->types[i]);
    alloc_free(c->types);
    alloc_free(c->path);
    alloc_free(c->store.url);
    if (c->index) {
        config_index *ix = c->index;

        ptab_free(&ix->limits);
        ptab_free(&ix->types);
        alloc_free(ix);
    }
    memset(c, 0, sizeof(*c));
}

const sluice_limit_policy *sluice_config_find_limit(const sluice_config *c, const char *name)
{
    const config_index *ix;

    if (!c || !name)
        return NULL;
    ix = c->index;
    if (ix && ix->limits.n == c->nlimits)
        return ptab_find(&ix->limits, hash_bytes(name, strlen(name)), name, limit_name_eq);
    for (size_t i = 0; i < c->nlimits; i++) {
        if (c->limits[i].name && strcmp(c->limits[i].name, name) == 0)
            return &c->limits[i];
    }
    return NULL;
}

const sluice_type_policy *sluice_config_find_type(const sluice_config *c, const char *name)
{
    const config_index *ix;

    if (!c || !name)
        return NULL;
    ix = c->index;
    if (ix && ix->types.n == c->ntypes)
        return ptab_find(&ix->types, hash_bytes(name, strlen(name)), name, type_name_eq);
    for (size_t i = 0; i < c->ntypes; i++) {
        if (c->types[i].name && strcmp(c->types[i].name, name) == 0)
            return &c->types[i];
    }
    return NULL;
}
