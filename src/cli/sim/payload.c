/* SPDX-License-Identifier: MIT */
/*
 * Templates and payloads of scenario arrivals (see scenario.h for the placeholders).
 *
 * A template is checked once, while the file is parsed, so that a bad placeholder is an error at
 * its line and column, and expanded for every arrival. Payload templates are kept as JSON values:
 * a YAML mapping is converted with YAML 1.2 typing (plain integers, reals, true/false and null
 * keep their type, everything else is a string), JSON text is parsed as it is; every string in
 * them is a template, and one that is exactly a numeric placeholder becomes a number.
 */
#include "cli/sim/payload.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "sluice/error.h"

#define MAX_DEPTH 64 /* nesting of a payload */

/* Parses a decimal number (no sign) of at most 18 digits at s; returns the characters read. */
static size_t parse_uint(const char *s, uint64_t *v)
{
    size_t n = 0;

    *v = 0;
    while (s[n] >= '0' && s[n] <= '9' && n < 18) {
        *v = *v * 10 + (uint64_t)(s[n] - '0');
        n++;
    }
    return n;
}

/* Reads the placeholder starting at s (after its '{'). Returns the characters up to and including
 * its '}', or 0 when it is not one; *is_key tells {key}, else *value is its number. */
static size_t placeholder(const char *s, const scenario_vars *v, int *is_key, uint64_t *value)
{
    uint64_t n;
    size_t m;

    *is_key = 0;
    *value = 0;
    if (strncmp(s, "key}", 4) == 0) {
        *is_key = 1;
        return 4;
    }
    if (s[0] != 'i')
        return 0;
    if (s[1] == '}') {
        *value = v->i;
        return 2;
    }
    if (s[1] != '%' && s[1] != '/')
        return 0;
    m = parse_uint(s + 2, &n);
    if (m == 0 || n == 0 || s[2 + m] != '}')
        return 0;
    *value = s[1] == '%' ? v->i % n : v->i / n;
    return 3 + m;
}

long scenario_expand(const char *tmpl, const scenario_vars *v, char *buf, size_t buflen, char *msg,
                     size_t msglen)
{
    size_t o = 0;
    char num[24];

#define EMIT(p, n)                                                                                 \
    do {                                                                                           \
        size_t n_ = (n);                                                                           \
        for (size_t k_ = 0; k_ < n_; k_++) {                                                       \
            if (o + 1 < buflen)                                                                    \
                buf[o] = (p)[k_];                                                                  \
            o++;                                                                                   \
        }                                                                                          \
    } while (0)

    for (const char *s = tmpl; *s;) {
        if (s[0] == '{' && s[1] == '{') {
            EMIT("{", 1);
            s += 2;
        } else if (s[0] == '}' && s[1] == '}') {
            EMIT("}", 1);
            s += 2;
        } else if (s[0] == '{') {
            int is_key;
            uint64_t value;
            size_t m = placeholder(s + 1, v, &is_key, &value);

            if (m == 0) {
                if (msg && msglen > 0)
                    snprintf(msg, msglen,
                             "unknown placeholder at \"%.20s\"; expected {i}, {i%%N}, {i/N}, "
                             "{key}, or {{ for a brace",
                             s);
                return -1;
            }
            if (is_key) {
                EMIT(v->key ? v->key : "", v->key ? strlen(v->key) : 0);
            } else {
                int k = snprintf(num, sizeof(num), "%llu", (unsigned long long)value);
                EMIT(num, (size_t)k);
            }
            s += 1 + m;
        } else {
            EMIT(s, 1);
            s++;
        }
    }
#undef EMIT
    if (buflen > 0)
        buf[o < buflen ? o : buflen - 1] = '\0';
    return (long)o;
}

/* Returns 1 when the template is exactly one numeric placeholder ("{i%4}"). */
static int numeric_template(const char *t)
{
    scenario_vars v = {0, ""};
    int is_key;
    uint64_t value;
    size_t m;

    if (t[0] != '{' || t[1] == '{')
        return 0;
    m = placeholder(t + 1, &v, &is_key, &value);
    return m > 0 && !is_key && t[1 + m] == '\0';
}

/* Returns 1 when the string holds a placeholder (or an escaped brace) to expand. */
static int has_braces(const char *t)
{
    return strchr(t, '{') != NULL || strstr(t, "}}") != NULL;
}

static json_t *expand_json(const json_t *t, const scenario_vars *v, int depth)
{
    json_t *out;

    if (depth > MAX_DEPTH)
        return NULL;
    if (json_is_object(t)) {
        const char *k;
        json_t *val;

        out = json_object();
        if (!out)
            return NULL;
        json_object_foreach((json_t *)t, k, val)
        {
            json_t *e = expand_json(val, v, depth + 1);

            if (!e || json_object_set_new(out, k, e) != 0) {
                json_decref(out);
                return NULL;
            }
        }
        return out;
    }
    if (json_is_array(t)) {
        size_t i;
        json_t *val;

        out = json_array();
        if (!out)
            return NULL;
        json_array_foreach((json_t *)t, i, val)
        {
            json_t *e = expand_json(val, v, depth + 1);

            if (!e || json_array_append_new(out, e) != 0) {
                json_decref(out);
                return NULL;
            }
        }
        return out;
    }
    if (json_is_string(t) && has_braces(json_string_value(t))) {
        const char *s = json_string_value(t);
        char small[256], *big = NULL;
        long n;

        if (numeric_template(s)) {
            n = scenario_expand(s, v, small, sizeof(small), NULL, 0);
            return json_integer((json_int_t)strtoll(small, NULL, 10));
        }
        n = scenario_expand(s, v, small, sizeof(small), NULL, 0);
        if (n < 0)
            return NULL;
        if ((size_t)n < sizeof(small))
            return json_stringn(small, (size_t)n);
        big = alloc_malloc((size_t)n + 1);
        if (!big)
            return NULL;
        scenario_expand(s, v, big, (size_t)n + 1, NULL, 0);
        out = json_stringn(big, (size_t)n);
        alloc_free(big);
        return out;
    }
    return json_incref((json_t *)t);
}

json_t *scenario_payload(const scenario_stream *s, const scenario_vars *v)
{
    if (!s->payload)
        return json_object();
    return expand_json(s->payload, v, 0);
}

size_t scenario_key(const scenario_stream *s, size_t i, char *buf, size_t buflen)
{
    scenario_vars v = {i, ""};
    long n;

    if (buflen > 0)
        buf[0] = '\0';
    if (s->nkeys > 0) {
        const char *k = s->keys[i % s->nkeys];
        size_t len = strlen(k);

        if (buflen > 0) {
            size_t c = len < buflen ? len : buflen - 1;
            memcpy(buf, k, c);
            buf[c] = '\0';
        }
        return len;
    }
    if (!s->key)
        return 0;
    n = scenario_expand(s->key, &v, buf, buflen, NULL, 0);
    return n < 0 ? 0 : (size_t)n;
}

/* Checks a template string at node. */
int payload_check_template(ywalk *w, const yaml_node_t *node, const char *t, int key_allowed)
{
    scenario_vars v = {0, "k"};
    char buf[8], why[160];

    if (scenario_expand(t, &v, buf, sizeof(buf), why, sizeof(why)) < 0)
        return yw_fail(w, node, SLUICE_EINVAL, "%s", why);
    if (!key_allowed && strstr(t, "{key}"))
        return yw_fail(w, node, SLUICE_EINVAL,
                       "{key} cannot be used in the key itself; use {i}, {i%%N} or {i/N}");
    return 0;
}

/* Looks like a YAML 1.2 real: optional sign, digits with one '.' and/or an exponent. */
static int looks_real(const char *s, size_t len)
{
    char tmp[64], *stop;

    if (len == 0 || len >= sizeof(tmp) || !strpbrk(s, "0123456789"))
        return 0;
    memcpy(tmp, s, len);
    tmp[len] = '\0';
    if (strspn(tmp, "+-0123456789.eE") != len)
        return 0;
    strtod(tmp, &stop);
    return *stop == '\0';
}

static int to_json(ywalk *w, const yaml_node_t *node, int depth, json_t **out);

/* Adds the member k: v of a YAML mapping to the JSON object obj. */
static int member_to_json(ywalk *w, const yaml_node_t *k, const yaml_node_t *v, int depth,
                          json_t *obj)
{
    const char *ks;
    size_t klen, saved;
    json_t *val;
    char *kc;
    yw_quoted q;
    int rc;

    rc = yw_string(w, k, "a member name", &ks, &klen);
    if (rc != 0)
        return rc;
    kc = alloc_memdup0(ks, klen);
    if (!kc)
        return yw_fail(w, k, SLUICE_ENOMEM, "out of memory");
    if (json_object_get(obj, kc)) {
        alloc_free(kc);
        return yw_fail(w, k, SLUICE_EINVAL, "member %s is given twice", yw_quote(&q, ks, klen));
    }
    saved = yw_push(w, ks, klen);
    rc = to_json(w, v, depth + 1, &val);
    yw_pop(w, saved);
    if (rc == 0 && json_object_set_new(obj, kc, val) != 0)
        rc = yw_fail(w, k, SLUICE_ENOMEM, "out of memory");
    alloc_free(kc);
    return rc;
}

/* Converts a YAML node into a JSON value, checking the templates in its strings. */
static int to_json(ywalk *w, const yaml_node_t *node, int depth, json_t **out)
{
    int rc;

    *out = NULL;
    if (depth > MAX_DEPTH)
        return yw_fail(w, node, SLUICE_EINVAL, "the payload is nested too deeply");
    if (!node || yw_is_null(node)) {
        *out = json_null();
        return 0;
    }
    if (node->type == YAML_MAPPING_NODE) {
        json_t *obj = json_object();

        if (!obj)
            return yw_fail(w, node, SLUICE_ENOMEM, "out of memory");
        for (yaml_node_pair_t *p = node->data.mapping.pairs.start; p < node->data.mapping.pairs.top;
             p++) {
            rc = member_to_json(w, yw_node(w, p->key), yw_node(w, p->value), depth, obj);
            if (rc != 0) {
                json_decref(obj);
                return rc;
            }
        }
        *out = obj;
        return 0;
    }
    if (node->type == YAML_SEQUENCE_NODE) {
        json_t *arr = json_array();
        size_t i = 0;

        if (!arr)
            return yw_fail(w, node, SLUICE_ENOMEM, "out of memory");
        for (yaml_node_item_t *it = node->data.sequence.items.start;
             it < node->data.sequence.items.top; it++, i++) {
            size_t saved = yw_push_index(w, i);
            json_t *val;

            rc = to_json(w, yw_node(w, *it), depth + 1, &val);
            yw_pop(w, saved);
            if (rc == 0 && json_array_append_new(arr, val) != 0)
                rc = yw_fail(w, node, SLUICE_ENOMEM, "out of memory");
            if (rc != 0) {
                json_decref(arr);
                return rc;
            }
        }
        *out = arr;
        return 0;
    }
    {
        const char *s;
        size_t len;
        char *copy;

        rc = yw_string(w, node, "a value", &s, &len);
        if (rc != 0)
            return rc;
        if (node->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
            if (len == 4 && memcmp(s, "true", 4) == 0) {
                *out = json_true();
                return 0;
            }
            if (len == 5 && memcmp(s, "false", 5) == 0) {
                *out = json_false();
                return 0;
            }
            if (yw_looks_int(node)) {
                int64_t v;

                rc = yw_int(w, node, INT64_MIN, INT64_MAX, &v);
                if (rc != 0)
                    return rc;
                *out = json_integer((json_int_t)v);
                return *out ? 0 : yw_fail(w, node, SLUICE_ENOMEM, "out of memory");
            }
            if (looks_real(s, len)) {
                char tmp[64];

                memcpy(tmp, s, len);
                tmp[len] = '\0';
                *out = json_real(strtod(tmp, NULL));
                return *out ? 0 : yw_fail(w, node, SLUICE_ENOMEM, "out of memory");
            }
        }
        copy = alloc_memdup0(s, len);
        if (!copy)
            return yw_fail(w, node, SLUICE_ENOMEM, "out of memory");
        rc = payload_check_template(w, node, copy, 1);
        if (rc == 0) {
            *out = json_stringn(copy, len);
            if (!*out)
                rc = yw_fail(w, node, SLUICE_ENOMEM, "out of memory");
        }
        alloc_free(copy);
        return rc;
    }
}

/* Checks the templates of every string in a JSON value (a payload given as JSON text). */
static int check_json_templates(ywalk *w, const yaml_node_t *node, const json_t *j)
{
    const char *k;
    json_t *val;
    size_t i;
    int rc;

    if (json_is_object(j)) {
        json_object_foreach((json_t *)j, k, val)
        {
            rc = check_json_templates(w, node, val);
            if (rc != 0)
                return rc;
        }
    } else if (json_is_array(j)) {
        json_array_foreach((json_t *)j, i, val)
        {
            rc = check_json_templates(w, node, val);
            if (rc != 0)
                return rc;
        }
    } else if (json_is_string(j)) {
        return payload_check_template(w, node, json_string_value(j), 1);
    }
    return 0;
}

/* Reads a payload: a mapping, or a JSON object as a string. */
int payload_read(ywalk *w, const yaml_node_t *node, json_t **out)
{
    yw_got g;
    int rc;

    *out = NULL;
    if (node && node->type == YAML_MAPPING_NODE)
        return to_json(w, node, 0, out);
    if (yw_is_scalar(node)) {
        const char *s;
        size_t len;
        json_error_t err;
        json_t *j;

        s = yw_text(node, &len);
        j = json_loadb(s, len, JSON_REJECT_DUPLICATES, &err);
        if (!j)
            return yw_fail(w, node, SLUICE_EINVAL, "invalid JSON payload: %s (at character %d)",
                           err.text, err.position);
        if (!json_is_object(j)) {
            json_decref(j);
            return yw_fail(w, node, SLUICE_EINVAL, "expected a JSON object as the payload");
        }
        rc = check_json_templates(w, node, j);
        if (rc != 0) {
            json_decref(j);
            return rc;
        }
        *out = j;
        return 0;
    }
    return yw_fail(w, node, SLUICE_EINVAL, "expected a mapping or a JSON object text, got %s",
                   yw_describe(node, &g));
}
