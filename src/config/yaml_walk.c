/* SPDX-License-Identifier: MIT */
/*
 * Walking a libyaml document tree with precise error messages (see yaml_walk.h).
 *
 * The helpers read libyaml's nodes in place: scalars are byte ranges inside the document, so
 * nothing is copied or allocated here. Messages are written straight into the caller's buffer.
 */
#include "config/yaml_walk.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/attr.h"
#include "base/hash.h"
#include "base/ptab.h"
#include "policy/policy_check.h"
#include "sluice/error.h"
#include "sluice/spec.h"

void yw_init(ywalk *w, yaml_document_t *doc, const char *file, char *msg, size_t msglen)
{
    w->doc = doc;
    w->file = file;
    w->msg = msg;
    w->msglen = msglen;
    w->path[0] = '\0';
    w->pathlen = 0;
    if (msg && msglen > 0)
        msg[0] = '\0';
}

/* ---- Paths ------------------------------------------------------------------------------- */

static void path_append(ywalk *w, const char *s, size_t n, int escape)
{
    static const char hex[] = "0123456789abcdef";

    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[4];
        size_t m = 1;

        esc[0] = (char)c;
        if (escape && (c < 0x20 || c == 0x7f)) {
            esc[0] = '\\';
            esc[1] = 'x';
            esc[2] = hex[c >> 4];
            esc[3] = hex[c & 15];
            m = 4;
        }
        if (w->pathlen + m + 1 > sizeof(w->path))
            return;
        memcpy(w->path + w->pathlen, esc, m);
        w->pathlen += m;
        w->path[w->pathlen] = '\0';
    }
}

size_t yw_push(ywalk *w, const char *key, size_t keylen)
{
    size_t saved = w->pathlen;

    if (w->pathlen > 0)
        path_append(w, ".", 1, 0);
    path_append(w, key, keylen > 80 ? 80 : keylen, 1);
    if (keylen > 80)
        path_append(w, "...", 3, 0);
    return saved;
}

size_t yw_push_index(ywalk *w, size_t index)
{
    size_t saved = w->pathlen;
    char buf[32];
    int n = snprintf(buf, sizeof(buf), "[%zu]", index);

    path_append(w, buf, (size_t)n, 0);
    return saved;
}

void yw_pop(ywalk *w, size_t saved)
{
    w->pathlen = saved;
    w->path[saved] = '\0';
}

/* ---- Messages ---------------------------------------------------------------------------- */

PRINTF_ATTR(5, 0)
static int vfail(ywalk *w, size_t line, size_t column, int rc, const char *fmt, va_list ap)
{
    msgf(w->msg, w->msglen, "%s:%zu:%zu: %s%s", w->file, line, column, w->path,
         w->pathlen > 0 ? ": " : "");
    vmsgf_append(w->msg, w->msglen, fmt, ap);
    return rc;
}

int yw_fail(ywalk *w, const yaml_node_t *at, int rc, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    if (at)
        rc = vfail(w, at->start_mark.line + 1, at->start_mark.column + 1, rc, fmt, ap);
    else
        rc = vfail(w, 1, 1, rc, fmt, ap);
    va_end(ap);
    return rc;
}

int yw_fail_mark(ywalk *w, yaml_mark_t mark, int rc, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    rc = vfail(w, mark.line + 1, mark.column + 1, rc, fmt, ap);
    va_end(ap);
    return rc;
}

int yw_line(const yaml_node_t *node)
{
    return node ? (int)node->start_mark.line + 1 : 0;
}

const char *yw_quote(yw_quoted *q, const char *s, size_t n)
{
    return quote_bytes(q, s, n, 60);
}

/* ---- Nodes ------------------------------------------------------------------------------- */

yaml_node_t *yw_node(const ywalk *w, int id)
{
    return yaml_document_get_node(w->doc, id);
}

const char *yw_text(const yaml_node_t *node, size_t *len)
{
    *len = node->data.scalar.length;
    return (const char *)node->data.scalar.value;
}

static int text_is(const yaml_node_t *node, const char *word)
{
    size_t n = strlen(word);

    return node->data.scalar.length == n && memcmp(node->data.scalar.value, word, n) == 0;
}

int yw_is_null(const yaml_node_t *node)
{
    if (!node)
        return 1;
    if (node->type != YAML_SCALAR_NODE || node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return 0;
    return text_is(node, "") || text_is(node, "~") || text_is(node, "null") ||
           text_is(node, "Null") || text_is(node, "NULL");
}

int yw_is_scalar(const yaml_node_t *node)
{
    return node && node->type == YAML_SCALAR_NODE && !yw_is_null(node);
}

/* Parses a YAML integer: optional sign, decimal digits, '_' between digits. Returns 1 when the
 * text is one; *over is set when its magnitude does not fit in an int64 (then *out is clamped). */
static int parse_int(const char *s, size_t n, int64_t *out, int *over)
{
    uint64_t v = 0, limit;
    int neg = 0, digits = 0;
    size_t i = 0;

    *out = 0;
    *over = 0;
    if (n > 0 && (s[0] == '-' || s[0] == '+')) {
        neg = s[0] == '-';
        i = 1;
    }
    limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; i < n; i++) {
        if (s[i] == '_') {
            if (digits == 0 || i + 1 >= n || s[i + 1] < '0' || s[i + 1] > '9')
                return 0;
            continue;
        }
        if (s[i] < '0' || s[i] > '9')
            return 0;
        digits++;
        if (!*over) {
            unsigned d = (unsigned)(s[i] - '0');
            if (v > (limit - d) / 10)
                *over = 1;
            else
                v = v * 10 + d;
        }
    }
    if (digits == 0)
        return 0;
    if (*over)
        *out = neg ? INT64_MIN : INT64_MAX;
    else if (neg)
        *out = v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v;
    else
        *out = (int64_t)v;
    return 1;
}

const char *yw_describe(const yaml_node_t *node, yw_got *g)
{
    yw_quoted q;
    int64_t v;
    int over;

    if (!node || yw_is_null(node)) {
        snprintf(g->s, sizeof(g->s), "nothing");
    } else if (node->type == YAML_MAPPING_NODE) {
        snprintf(g->s, sizeof(g->s), "%s",
                 node->data.mapping.pairs.top == node->data.mapping.pairs.start ? "an empty mapping"
                                                                                : "a mapping");
    } else if (node->type == YAML_SEQUENCE_NODE) {
        snprintf(g->s, sizeof(g->s), "%s",
                 node->data.sequence.items.top == node->data.sequence.items.start ? "an empty list"
                                                                                  : "a list");
    } else {
        const char *s = (const char *)node->data.scalar.value;
        size_t n = node->data.scalar.length;
        int looks_typed =
            parse_int(s, n, &v, &over) || text_is(node, "true") || text_is(node, "false");

        snprintf(g->s, sizeof(g->s), "%s%s", yw_quote(&q, s, n),
                 node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE && looks_typed
                     ? " (a quoted string)"
                     : "");
    }
    return g->s;
}

int yw_expect_map(ywalk *w, const yaml_node_t *node, const char *what)
{
    yw_got g;

    if (node && node->type == YAML_MAPPING_NODE)
        return 0;
    return yw_fail(w, node, SLUICE_EINVAL, "expected %s, got %s", what, yw_describe(node, &g));
}

const char *yw_join(char *buf, size_t buflen, const char *const *words, size_t n,
                    const char *last_sep)
{
    size_t o = 0;

    if (buflen == 0)
        return buf;
    buf[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        const char *sep = i == 0 ? "" : i + 1 == n ? last_sep : ", ";
        int m = snprintf(buf + o, buflen - o, "%s%s", sep, words[i]);

        if (m < 0 || (size_t)m >= buflen - o)
            break;
        o += (size_t)m;
    }
    return buf;
}

int yw_check_keys(ywalk *w, const yaml_node_t *map, const char *const *names, size_t n)
{
    const yaml_node_pair_t *p, *q;

    for (p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        const yaml_node_t *key = yw_node(w, p->key);
        const char *s, *hint;
        size_t len, i;
        yw_quoted qk;
        yw_got g;
        char list[600];

        if (!yw_is_scalar(key))
            return yw_fail(w, key, SLUICE_EINVAL, "expected a key name, got %s",
                           yw_describe(key, &g));
        s = yw_text(key, &len);
        for (i = 0; i < n; i++) {
            if (strlen(names[i]) == len && memcmp(names[i], s, len) == 0)
                break;
        }
        if (i == n) {
            hint = yw_suggest(s, len, names, n);
            if (hint)
                return yw_fail(w, key, SLUICE_EINVAL, "unknown key %s; did you mean \"%s\"?",
                               yw_quote(&qk, s, len), hint);
            return yw_fail(w, key, SLUICE_EINVAL, "unknown key %s; expected %s",
                           yw_quote(&qk, s, len), yw_join(list, sizeof(list), names, n, " or "));
        }
        for (q = map->data.mapping.pairs.start; q < p; q++) {
            const yaml_node_t *prev = yw_node(w, q->key);
            size_t plen;
            const char *ps = yw_text(prev, &plen);

            if (plen == len && memcmp(ps, s, len) == 0)
                return yw_fail(w, key, SLUICE_EINVAL, "key %s is given twice (first at line %d)",
                               yw_quote(&qk, s, len), yw_line(prev));
        }
    }
    return 0;
}

yaml_node_t *yw_get(const ywalk *w, const yaml_node_t *map, const char *name, yaml_node_t **key)
{
    size_t n = strlen(name);

    if (key)
        *key = NULL;
    if (!map || map->type != YAML_MAPPING_NODE)
        return NULL;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
         p++) {
        yaml_node_t *k = yw_node(w, p->key);

        if (k && k->type == YAML_SCALAR_NODE && k->data.scalar.length == n &&
            memcmp(k->data.scalar.value, name, n) == 0) {
            if (key)
                *key = k;
            return yw_node(w, p->value);
        }
    }
    return NULL;
}

/* ---- Scalars ----------------------------------------------------------------------------- */

static const char *int_kind(int64_t min, int64_t max, char *buf, size_t len)
{
    if (min == 1)
        return "a positive integer";
    if (min == 0)
        return "a non-negative integer";
    if (min == INT64_MIN && max == INT64_MAX)
        return "an integer";
    snprintf(buf, len, "an integer from %" PRId64 " to %" PRId64, min, max);
    return buf;
}

int yw_int(ywalk *w, const yaml_node_t *node, int64_t min, int64_t max, int64_t *out)
{
    char kind[80];
    yw_got g;
    int64_t v;
    int over;

    *out = 0;
    if (!yw_is_scalar(node) || node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE ||
        !parse_int((const char *)node->data.scalar.value, node->data.scalar.length, &v, &over) ||
        ((v < min || over) && (min == 0 || min == 1)))
        return yw_fail(w, node, SLUICE_EINVAL, "expected %s, got %s",
                       int_kind(min, max, kind, sizeof(kind)), yw_describe(node, &g));
    if (v < min)
        return yw_fail(w, node, SLUICE_EINVAL, "expected at least %" PRId64 ", got %s", min,
                       yw_describe(node, &g));
    if (v > max || over)
        return yw_fail(w, node, SLUICE_EINVAL, "expected at most %" PRId64 ", got %s", max,
                       yw_describe(node, &g));
    *out = v;
    return 0;
}

int yw_bool(ywalk *w, const yaml_node_t *node, int *out)
{
    yw_got g;

    *out = 0;
    if (yw_is_scalar(node) && node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
        if (text_is(node, "true")) {
            *out = 1;
            return 0;
        }
        if (text_is(node, "false"))
            return 0;
    }
    return yw_fail(w, node, SLUICE_EINVAL, "expected true or false, got %s", yw_describe(node, &g));
}

int yw_duration(ywalk *w, const yaml_node_t *node, int64_t min_ns, int64_t *out)
{
    yw_got g;
    int rc;

    *out = 0;
    if (!yw_is_scalar(node))
        return yw_fail(w, node, SLUICE_EINVAL,
                       "expected a duration such as 500ms, 30s, 5m, 1h or 1d, got %s",
                       yw_describe(node, &g));
    rc = sluice_spec_parse_duration((const char *)node->data.scalar.value, node->data.scalar.length,
                                    out);
    if (rc == SLUICE_ERANGE)
        return yw_fail(w, node, SLUICE_EINVAL, "the duration %s is too long",
                       yw_describe(node, &g));
    if (rc != 0)
        return yw_fail(w, node, SLUICE_EINVAL,
                       "expected a duration such as 500ms, 30s, 5m, 1h or 1d, got %s",
                       yw_describe(node, &g));
    if (*out < min_ns) {
        *out = 0;
        return yw_fail(w, node, SLUICE_EINVAL, "expected a duration above zero, got %s",
                       yw_describe(node, &g));
    }
    return 0;
}

int yw_choice(ywalk *w, const yaml_node_t *node, const char *const *words, size_t n, int *index)
{
    char list[300];
    const char *s, *hint;
    size_t len;
    yw_got g;

    *index = 0;
    if (yw_is_scalar(node)) {
        s = yw_text(node, &len);
        for (size_t i = 0; i < n; i++) {
            if (strlen(words[i]) == len && memcmp(words[i], s, len) == 0) {
                *index = (int)i;
                return 0;
            }
        }
        hint = yw_suggest(s, len, words, n);
        if (hint)
            return yw_fail(w, node, SLUICE_EINVAL, "expected %s, got %s; did you mean \"%s\"?",
                           yw_join(list, sizeof(list), words, n, " or "), yw_describe(node, &g),
                           hint);
    }
    return yw_fail(w, node, SLUICE_EINVAL, "expected %s, got %s",
                   yw_join(list, sizeof(list), words, n, " or "), yw_describe(node, &g));
}

int yw_string(ywalk *w, const yaml_node_t *node, const char *what, const char **s, size_t *len)
{
    yw_got g;

    *s = NULL;
    *len = 0;
    if (!yw_is_scalar(node))
        return yw_fail(w, node, SLUICE_EINVAL, "expected %s, got %s", what, yw_describe(node, &g));
    if (memchr(node->data.scalar.value, '\0', node->data.scalar.length))
        return yw_fail(w, node, SLUICE_EINVAL, "expected %s, got %s with a NUL byte", what,
                       yw_describe(node, &g));
    *s = yw_text(node, len);
    return 0;
}

int yw_looks_int(const yaml_node_t *node)
{
    int64_t v;
    int over;

    return yw_is_scalar(node) && node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
           parse_int((const char *)node->data.scalar.value, node->data.scalar.length, &v, &over);
}

/* Finds key `name` and, when present, pushes it; returns its value (NULL when absent). */
static yaml_node_t *enter(ywalk *w, const yaml_node_t *map, const char *name, size_t *saved,
                          yaml_node_t **key)
{
    yaml_node_t *value = yw_get(w, map, name, key);

    if (*key)
        *saved = yw_push(w, name, strlen(name));
    return value;
}

int yw_field_int(ywalk *w, const yaml_node_t *map, const char *name, int64_t min, int64_t max,
                 int64_t *out)
{
    size_t saved = 0;
    yaml_node_t *key, *value;
    int64_t v;
    int rc;

    value = enter(w, map, name, &saved, &key);
    if (!key)
        return 0;
    rc = yw_int(w, value, min, max, &v);
    yw_pop(w, saved);
    if (rc == 0)
        *out = v;
    return rc;
}

int yw_field_bool(ywalk *w, const yaml_node_t *map, const char *name, int *out)
{
    size_t saved = 0;
    yaml_node_t *key, *value;
    int v, rc;

    value = enter(w, map, name, &saved, &key);
    if (!key)
        return 0;
    rc = yw_bool(w, value, &v);
    yw_pop(w, saved);
    if (rc == 0)
        *out = v;
    return rc;
}

int yw_field_duration(ywalk *w, const yaml_node_t *map, const char *name, int64_t min_ns,
                      int64_t *out)
{
    size_t saved = 0;
    yaml_node_t *key, *value;
    int64_t v;
    int rc;

    value = enter(w, map, name, &saved, &key);
    if (!key)
        return 0;
    rc = yw_duration(w, value, min_ns, &v);
    yw_pop(w, saved);
    if (rc == 0)
        *out = v;
    return rc;
}

int yw_field_choice(ywalk *w, const yaml_node_t *map, const char *name, const char *const *words,
                    size_t n, int *index)
{
    size_t saved = 0;
    yaml_node_t *key, *value;
    int v, rc;

    value = enter(w, map, name, &saved, &key);
    if (!key)
        return 0;
    rc = yw_choice(w, value, words, n, &v);
    yw_pop(w, saved);
    if (rc == 0)
        *index = v;
    return rc;
}

/* ---- Suggestions ------------------------------------------------------------------------- */

/* Longest names compared for "did you mean". */
#define SUGGEST_MAX 64

/* Optimal string alignment distance (edits, with adjacent transpositions), case-insensitive. */
static size_t distance(const char *a, size_t n, const char *b, size_t m)
{
    size_t d[SUGGEST_MAX + 1][SUGGEST_MAX + 1];

    for (size_t i = 0; i <= n; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= m; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= n; i++) {
        for (size_t j = 1; j <= m; j++) {
            int ca = tolower((unsigned char)a[i - 1]), cb = tolower((unsigned char)b[j - 1]);
            size_t best = d[i - 1][j - 1] + (ca != cb);

            if (d[i - 1][j] + 1 < best)
                best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == cb && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    }
    return d[n][m];
}

size_t yw_typo_distance(const char *s, size_t len, const char *name)
{
    size_t m = strlen(name), d, allowed;

    if (len == 0 || len > SUGGEST_MAX || m > SUGGEST_MAX)
        return SIZE_MAX;
    d = distance(s, len, name, m);
    allowed = m <= 3 ? 1 : m <= 6 ? 2 : 3;
    return d <= allowed ? d : SIZE_MAX;
}

const char *yw_suggest(const char *s, size_t len, const char *const *names, size_t n)
{
    const char *best = NULL;
    size_t best_d = SIZE_MAX;

    for (size_t i = 0; i < n; i++) {
        size_t d = yw_typo_distance(s, len, names[i]);

        if (d < best_d) {
            best = names[i];
            best_d = d;
        }
    }
    return best;
}

/* ---- Named sections ------------------------------------------------------------------------ */

/* A name looked up in the table of a section's key nodes. */
typedef struct named_key {
    const char *s;
    size_t len;
} named_key;

static int key_node_eq(const void *p, const void *key)
{
    const yaml_node_t *node = p;
    const named_key *k = key;

    return node->data.scalar.length == k->len && memcmp(node->data.scalar.value, k->s, k->len) == 0;
}

int yw_each_named(ywalk *w, const yaml_node_t *section, const yw_named *spec, void *arg)
{
    const yaml_node_pair_t *pairs;
    ptab seen; /* the key nodes read so far, by name: duplicates in linear time */
    size_t n;
    int rc;

    if (!section || yw_is_null(section))
        return 0;
    rc = yw_expect_map(w, section, spec->expected);
    if (rc != 0)
        return rc;
    pairs = section->data.mapping.pairs.start;
    n = (size_t)(section->data.mapping.pairs.top - pairs);
    if (n == 0)
        return 0;
    ptab_init(&seen);
    rc = spec->reserve(w, section, n, arg);
    if (rc == 0 && ptab_reserve(&seen, n) != SLUICE_OK)
        rc = yw_fail(w, section, SLUICE_ENOMEM, "out of memory");
    for (size_t i = 0; i < n && rc == 0; i++) {
        yaml_node_t *key = yw_node(w, pairs[i].key);
        const yaml_node_t *prev;
        char what[32], why[200];
        named_key k;
        uint64_t h;
        size_t saved;
        yw_quoted q;

        snprintf(what, sizeof(what), "a %s name", spec->what);
        rc = yw_string(w, key, what, &k.s, &k.len);
        if (rc != 0)
            break;
        if (policy_check_name(k.s, why, sizeof(why)) != 0) {
            rc = yw_fail(w, key, SLUICE_EINVAL, "bad %s name: %s", spec->what, why);
            break;
        }
        h = hash_bytes(k.s, k.len);
        prev = ptab_find(&seen, h, &k, key_node_eq);
        if (prev) {
            rc = yw_fail(w, key, SLUICE_EINVAL, "the %s %s is declared twice (first at line %d)",
                         spec->what, yw_quote(&q, k.s, k.len), yw_line(prev));
            break;
        }
        (void)ptab_insert(&seen, h, key); /* reserved above */
        saved = yw_push(w, k.s, k.len);
        rc = spec->entry(w, i, key, k.s, k.len, yw_node(w, pairs[i].value), arg);
        yw_pop(w, saved);
    }
    ptab_free(&seen);
    return rc;
}
