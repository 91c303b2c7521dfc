/* SPDX-License-Identifier: MIT */
/*
 * Resolution of a task's links: see resolve.h. Extracted keys are written back to back into the
 * engine's scratch buffer (grown on demand), and their pointers fixed once all are known, since
 * growing the buffer moves it.
 *
 * The payload is read as little as the type needs: a scan checks it is JSON (base/jscan.h), a
 * type that reads no path parses nothing, and one that does gets a tree of only what its paths
 * reach (policy/jpick.h). jansson parses the whole payload only when the scan refuses it (or
 * cannot tell), so that a refusal keeps jansson's verdict and words.
 */
#include "engine/resolve.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/grow.h"
#include "base/jscan.h"
#include "policy/dotpath.h"
#include "policy/jpick.h"
#include "policy/keytpl.h"
#include "engine/registry.h"
#include "sluice/error.h"
#include "base/quote.h"

/* The scanner must not accept nesting jansson refuses. */
#ifdef JSON_PARSER_MAX_DEPTH
_Static_assert(JSCAN_MAX_DEPTH <= JSON_PARSER_MAX_DEPTH, "jscan nests deeper than jansson");
#endif

#define KEY_UNSET      SIZE_MAX
#define PATHS_ON_STACK 16 /* dot paths of a type read without allocating their list */
/* choose_key: the limit is skipped (missing_key: skip); not a sluice error code (those are < 0). */
#define RESOLVE_SKIP 1

static int kbuf_grow(sluice_engine *e, size_t need)
{
    return grow_array(&e->kbuf, &e->kbuf_cap, need, 1, 256);
}

/* Extracts the text at path into the scratch buffer at offset *used; on success the text is at
 * [*used - len - 1, ...) NUL-terminated and *used is advanced past it. */
static int extract(sluice_engine *e, const json_t *input, const char *path, size_t *used,
                   size_t *len, char *why, size_t whylen)
{
    for (;;) {
        int rc = kbuf_grow(e, *used + 64);

        if (rc != SLUICE_OK)
            return rc;
        rc = dotpath_extract_msg(input, path, e->kbuf + *used, e->kbuf_cap - *used, len, why,
                                 whylen);
        if (rc == SLUICE_ERANGE) {
            rc = kbuf_grow(e, *used + *len + 1);
            if (rc != SLUICE_OK)
                return rc;
            continue;
        }
        if (rc == SLUICE_OK)
            *used += *len + 1;
        return rc;
    }
}

/* extract() for a limit's key text, a dot path or a template (keytpl.h); *empty is set when the
 * key or one of its fields is empty. */
static int extract_key(sluice_engine *e, const json_t *input, const char *text, size_t *used,
                       size_t *len, int *empty, char *why, size_t whylen)
{
    for (;;) {
        int rc = kbuf_grow(e, *used + 64);

        if (rc != SLUICE_OK)
            return rc;
        rc = keytpl_extract_msg(input, text, e->kbuf + *used, e->kbuf_cap - *used, len, empty, why,
                                whylen);
        if (rc == SLUICE_ERANGE) {
            rc = kbuf_grow(e, *used + *len + 1);
            if (rc != SLUICE_OK)
                return rc;
            continue;
        }
        if (rc == SLUICE_OK)
            *used += *len + 1;
        return rc;
    }
}

/* Chooses the tier of p for this input. */
static int choose_tier(sluice_engine *e, const sluice_limit_policy *p, const json_t *input,
                       size_t used, uint16_t *tier, char *msg, size_t msglen)
{
    char why[160];
    int rc;

    *tier = 0;
    if (p->ntiers == 0 || !p->tier_path)
        return SLUICE_OK;
    if (p->tiers[0].equals) {
        size_t len, at = used;

        rc = extract(e, input, p->tier_path, &at, &len, why, sizeof why);
        if (rc == SLUICE_ENOMEM)
            return rc;
        if (rc == SLUICE_OK) {
            for (size_t i = 0; i < p->ntiers; i++) {
                const char *eq = p->tiers[i].equals;

                if (eq && strlen(eq) == len && memcmp(eq, e->kbuf + used, len) == 0) {
                    *tier = (uint16_t)i;
                    return SLUICE_OK;
                }
            }
            msgf(msg, msglen, "limit \"%s\": no tier matches \"%.*s\" at \"%s\"", p->name,
                 (int)(len > 64 ? 64 : len), e->kbuf + used, p->tier_path);
            return SLUICE_EINVAL;
        }
    } else {
        int64_t v;

        rc = dotpath_number_msg(input, p->tier_path, &v, why, sizeof why);
        if (rc == SLUICE_OK) {
            for (size_t i = 0; i < p->ntiers; i++) {
                if (!p->tiers[i].equals && p->tiers[i].min <= v && v <= p->tiers[i].max) {
                    *tier = (uint16_t)i;
                    return SLUICE_OK;
                }
            }
            msgf(msg, msglen, "limit \"%s\": no tier matches %" PRId64 " at \"%s\"", p->name, v,
                 p->tier_path);
            return SLUICE_EINVAL;
        }
    }
    msgf(msg, msglen, "limit \"%s\": tier: %s", p->name, why);
    return SLUICE_EINVAL;
}

/* Resolves the key of p; *off receives its offset in the scratch buffer, or KEY_UNSET with
 * *key / *keylen set directly (the spec's key, or the global key ""). */
static int choose_key(sluice_engine *e, const sluice_limit_policy *p, const sluice_task_spec *spec,
                      const json_t *input, size_t *used, size_t *off, const char **key,
                      size_t *keylen, char *msg, size_t msglen)
{
    char why[320];
    int rc, empty = 0;

    *off = KEY_UNSET;
    *key = "";
    *keylen = 0;
    switch (p->key_source) {
    case SLUICE_KEY_NONE:
        return SLUICE_OK;
    case SLUICE_KEY_EXPLICIT:
        if (p->missing_key_skip && (!spec->key || spec->key_len == 0))
            return RESOLVE_SKIP;
        if (spec->key) {
            *key = spec->key;
            *keylen = spec->key_len;
            return SLUICE_OK;
        }
        if (p->missing_key_global)
            return SLUICE_OK;
        msgf(msg, msglen, "limit \"%s\" needs an explicit key (KEY), and none was given", p->name);
        return SLUICE_EINVAL;
    case SLUICE_KEY_PATH:
        *off = *used;
        rc = extract_key(e, input, p->key_path, used, keylen, &empty, why, sizeof why);
        if (rc == SLUICE_OK && empty && p->missing_key_skip) {
            *off = KEY_UNSET;
            return RESOLVE_SKIP;
        }
        if (rc == SLUICE_OK || rc == SLUICE_ENOMEM)
            return rc;
        *off = KEY_UNSET;
        *keylen = 0;
        if (rc == SLUICE_ENOTFOUND && p->missing_key_skip)
            return RESOLVE_SKIP;
        if (rc == SLUICE_ENOTFOUND && p->missing_key_global)
            return SLUICE_OK;
        msgf(msg, msglen, "limit \"%s\": %s", p->name, why);
        return SLUICE_EINVAL;
    }
    msgf(msg, msglen, "limit \"%s\": unknown key source", p->name);
    return SLUICE_EINVAL;
}

static int choose_units(const sluice_limit_policy *p, int64_t task_units, const json_t *input,
                        int64_t *units, uint8_t *flags, char *msg, size_t msglen)
{
    char why[160];
    int rc;

    *flags = 0;
    switch (p->units_source) {
    case SLUICE_UNITS_FIXED:
        *units = p->units_fixed;
        return SLUICE_OK;
    case SLUICE_UNITS_PATH:
        rc = dotpath_number_msg(input, p->units_path, units, why, sizeof why);
        if (rc != SLUICE_OK) {
            msgf(msg, msglen, "limit \"%s\": units: %s", p->name, why);
            return SLUICE_EINVAL;
        }
        if (*units < 1) {
            msgf(msg, msglen, "limit \"%s\": units at \"%s\" must be at least 1, got %" PRId64,
                 p->name, p->units_path, *units);
            return SLUICE_EINVAL;
        }
        *flags = LINK_SETTLE;
        return SLUICE_OK;
    case SLUICE_UNITS_TASK:
    default:
        *units = task_units;
        *flags = LINK_SETTLE;
        return SLUICE_OK;
    }
}

int resolve_needs_input(const etype *t)
{
    for (size_t i = 0; i < t->pol.nlimits; i++) {
        const sluice_limit_policy *p = &t->chain[i]->pol;

        if (p->key_source == SLUICE_KEY_PATH || p->units_source == SLUICE_UNITS_PATH ||
            (p->ntiers && p->tier_path))
            return 1;
    }
    return 0;
}

int resolve_links(sluice_engine *e, const etype *t, const sluice_task_spec *spec, int64_t units,
                  const json_t *input, int64_t now_ns, link_spec *out, size_t *nout, char *msg,
                  size_t msglen)
{
    size_t n = t->pol.nlimits, used = 0, kept = 0;
    size_t offs[16], *off = offs;
    uint8_t skips[16], *skip = skips;
    int rc = SLUICE_OK;

    *nout = 0;
    if (n > 16) {
        off = alloc_calloc(n, sizeof *off);
        skip = alloc_calloc(n, sizeof *skip);
        if (!off || !skip) {
            alloc_free(off == offs ? NULL : off);
            alloc_free(skip == skips ? NULL : skip);
            return SLUICE_ENOMEM;
        }
    }
    for (size_t i = 0; i < n; i++) {
        elimit *l = t->chain[i];
        const sluice_limit_policy *p = &l->pol;

        memset(&out[i], 0, sizeof out[i]);
        out[i].lim = l;
        skip[i] = 0;
        if (l->dead) {
            sluice_event ev;

            memset(&ev, 0, sizeof ev);
            ev.kind = SLUICE_EVENT_UNKNOWN_LIMIT;
            ev.at_ns = now_ns;
            ev.limit = p->name;
            ev.type = t->pol.name;
            ev.count = 1;
            engine_emit(e, &ev, now_ns);
            msgf(msg, msglen, "type \"%s\" names limit \"%s\", which does not exist", t->pol.name,
                 p->name);
            rc = SLUICE_ENOTFOUND;
            break;
        }
        rc = choose_tier(e, p, input, used, &out[i].tier, msg, msglen);
        if (rc == SLUICE_OK)
            rc = choose_key(e, p, spec, input, &used, &off[i], &out[i].key, &out[i].keylen, msg,
                            msglen);
        if (rc == RESOLVE_SKIP) { /* missing_key: skip: this limit does not gate the task */
            skip[i] = 1;
            rc = SLUICE_OK;
            continue;
        }
        if (rc == SLUICE_OK)
            rc = choose_units(p, units, input, &out[i].units, &out[i].flags, msg, msglen);
        if (rc != SLUICE_OK)
            break;
    }
    if (rc == SLUICE_OK) {
        /* Keys are fixed once the scratch stops moving; skipped links are dropped. */
        for (size_t i = 0; i < n; i++) {
            if (skip[i])
                continue;
            if (off[i] != KEY_UNSET)
                out[i].key = e->kbuf + off[i];
            out[kept++] = out[i];
        }
        *nout = kept;
    }
    if (off != offs) {
        alloc_free(off);
        alloc_free(skip);
    }
    if (rc == SLUICE_ENOMEM)
        msgf(msg, msglen, "%s", "out of memory");
    return rc;
}

int resolve_parse_payload(const sluice_task_spec *spec, json_t **input, char *msg, size_t msglen)
{
    json_error_t jerr;
    unsigned long failures = alloc_json_failures();

    *input = NULL;
    if (!spec->payload)
        return SLUICE_OK;
    *input = json_loadb(spec->payload, spec->payload_len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    if (*input)
        return SLUICE_OK;
    /* jansson allocates through sluice's allocator (base/alloc.c): running out is not a syntax
     * error, though jansson may report it as one (or not at all). */
    if (alloc_json_failures() != failures) {
        msgf(msg, msglen, "%s", "out of memory");
        return SLUICE_ENOMEM;
    }
    msgf(msg, msglen, "payload is not valid JSON: %s (line %d, column %d)", jerr.text, jerr.line,
         jerr.column);
    return SLUICE_EINVAL;
}

/* Lists in paths[0..cap) the dot paths that resolving a task of type t reads (key paths, template
 * fields, tier and units paths); returns their number, which may exceed cap (call again with
 * room for all). */
static size_t type_paths(const etype *t, jpick_path *paths, size_t cap)
{
    size_t n = 0;

    for (size_t i = 0; i < t->pol.nlimits; i++) {
        const sluice_limit_policy *p = &t->chain[i]->pol;

        if (p->key_source == SLUICE_KEY_PATH && p->key_path) {
            if (keytpl_is_template(p->key_path)) {
                size_t pos = 0, len;
                const char *field;

                while (keytpl_next_field(p->key_path, &pos, &field, &len)) {
                    if (n < cap)
                        paths[n] = (jpick_path){field, len};
                    n++;
                }
            } else {
                if (n < cap)
                    paths[n] = (jpick_path){p->key_path, strlen(p->key_path)};
                n++;
            }
        }
        if (p->ntiers && p->tier_path) {
            if (n < cap)
                paths[n] = (jpick_path){p->tier_path, strlen(p->tier_path)};
            n++;
        }
        if (p->units_source == SLUICE_UNITS_PATH && p->units_path) {
            if (n < cap)
                paths[n] = (jpick_path){p->units_path, strlen(p->units_path)};
            n++;
        }
    }
    return n;
}

/* Builds the input tree of type t from a payload jscan_validate accepted: only what t's paths
 * reach (jpick.h). */
static int pick_input(const etype *t, const sluice_task_spec *spec, json_t **input)
{
    jpick_path stack[PATHS_ON_STACK], *paths = stack;
    size_t n = type_paths(t, stack, PATHS_ON_STACK);
    int rc;

    if (n > PATHS_ON_STACK) {
        paths = alloc_calloc(n, sizeof *paths);
        if (!paths)
            return SLUICE_ENOMEM;
        type_paths(t, paths, n);
    }
    rc = jpick_parse(spec->payload, spec->payload_len, paths, n, input);
    if (paths != stack)
        alloc_free(paths);
    return rc;
}

int resolve_input(const etype *t, const sluice_task_spec *spec, json_t **input, char *msg,
                  size_t msglen)
{
    int rc;

    *input = NULL;
    if (!spec->payload)
        return SLUICE_OK;
    /* The scanner says yes or no; for no (or "cannot tell") jansson decides, and words the
     * reply as it always has. */
    if (jscan_validate(spec->payload, spec->payload_len, NULL) != 0)
        return resolve_parse_payload(spec, input, msg, msglen);
    if (!t || !resolve_needs_input(t))
        return SLUICE_OK;
    rc = pick_input(t, spec, input);
    if (rc == SLUICE_EINVAL) /* jansson refused a piece the scanner passed: let it see it all */
        return resolve_parse_payload(spec, input, msg, msglen);
    if (rc == SLUICE_ENOMEM)
        msgf(msg, msglen, "%s", "out of memory");
    return rc;
}

int resolve_spec(sluice_engine *e, const etype *t, const sluice_task_spec *spec, int64_t units,
                 int64_t now_ns, link_spec *out, size_t *nout, char *msg, size_t msglen)
{
    json_t *input = NULL;
    int rc = resolve_input(t, spec, &input, msg, msglen);

    if (rc != SLUICE_OK)
        return rc;
    rc = resolve_links(e, t, spec, units, input, now_ns, out, nout, msg, msglen);
    json_decref(input);
    return rc;
}
