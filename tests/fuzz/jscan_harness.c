/* SPDX-License-Identifier: MIT */
/*
 * The payload scanner's fuzz harness (see jscan_harness.h): a differential check of
 * base/jscan.c and policy/jpick.c against jansson. The paths read from both trees are every path
 * into the document as jansson parsed it, plus one past each array's end, a leading-zero index,
 * a member that is not there and a step through each scalar.
 */
#include "jscan_harness.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/attr.h"
#include "base/jscan.h"
#include "policy/dotpath.h"
#include "policy/jpick.h"
#include "policy/keytpl.h"
#include "sluice/error.h"

#define FLAGS      (JSON_DECODE_ANY | JSON_ALLOW_NUL)
#define MAX_PATHS  48
#define PATH_MAX_B 240

jscan_harness_stats jscan_harness_seen;

static char why[1200];

const char *jscan_harness_show(const char *doc, size_t len)
{
    static char out[600];
    size_t o = 0;

    for (size_t i = 0; i < len && o + 8 < sizeof out; i++) {
        unsigned char c = (unsigned char)doc[i];

        if (c >= 0x20 && c < 0x7f && c != '\\')
            out[o++] = (char)c;
        else
            o += (size_t)snprintf(out + o, sizeof out - o, "\\x%02x", c);
    }
    out[o] = '\0';
    return out;
}

/* Writes the reason into why; returns 1 (a broken invariant). */
PRINTF_ATTR(1, 2)
static int fail(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    return 1;
}

/* ---- Paths read from both trees ------------------------------------------------------------ */

typedef struct path_list {
    char *p[MAX_PATHS];
    size_t n;
} path_list;

static void add_path(path_list *l, const char *s)
{
    if (l->n < MAX_PATHS && strlen(s) < PATH_MAX_B)
        l->p[l->n++] = strdup(s);
}

static void free_paths(path_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->p[i]);
    l->n = 0;
}

/* Every path into v (under prefix), and a few that go wrong from each. */
static void collect(const json_t *v, const char *prefix, path_list *l)
{
    char path[PATH_MAX_B + 64];
    const char *key;
    json_t *child;
    size_t i;

    if (json_is_object(v)) {
        json_object_foreach((json_t *)v, key, child)
        {
            snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", key);
            add_path(l, path);
            collect(child, path, l);
        }
        snprintf(path, sizeof path, "%s%snope", prefix, *prefix ? "." : "");
        add_path(l, path);
    } else if (json_is_array(v)) {
        json_array_foreach((json_t *)v, i, child)
        {
            snprintf(path, sizeof path, "%s%s%zu", prefix, *prefix ? "." : "", i);
            add_path(l, path);
            collect(child, path, l);
        }
        snprintf(path, sizeof path, "%s%s%zu", prefix, *prefix ? "." : "", json_array_size(v));
        add_path(l, path);
        snprintf(path, sizeof path, "%s%s01", prefix, *prefix ? "." : "");
        add_path(l, path);
    } else if (*prefix) {
        snprintf(path, sizeof path, "%s.0", prefix);
        add_path(l, path);
    }
}

/* The same path read from the full parse and from a picked tree: same code, value and words. */
static int same_reading(const json_t *full, const json_t *picked, const char *path, const char *doc,
                        size_t len)
{
    char b1[512], b2[512], m1[400], m2[400];
    size_t l1 = 0, l2 = 0;
    int64_t n1, n2;
    int r1, r2;

    r1 = dotpath_extract_msg(full, path, b1, sizeof b1, &l1, m1, sizeof m1);
    r2 = dotpath_extract_msg(picked, path, b2, sizeof b2, &l2, m2, sizeof m2);
    if (r1 != r2 || l1 != l2 || (r1 == 0 && memcmp(b1, b2, l1) != 0) || strcmp(m1, m2) != 0)
        return fail("path \"%s\" reads %d \"%s\" from the parse, %d \"%s\" picked, in %s", path, r1,
                    m1, r2, m2, jscan_harness_show(doc, len));
    r1 = dotpath_number_msg(full, path, &n1, m1, sizeof m1);
    r2 = dotpath_number_msg(picked, path, &n2, m2, sizeof m2);
    if (r1 != r2 || n1 != n2 || strcmp(m1, m2) != 0)
        return fail("number at \"%s\": %d \"%s\" from the parse, %d \"%s\" picked, in %s", path, r1,
                    m1, r2, m2, jscan_harness_show(doc, len));
    jscan_harness_seen.paths++;
    return 0;
}

static int template_safe(const char *p)
{
    if (!*p)
        return 0;
    for (; *p; p++) {
        if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-", *p))
            return 0;
    }
    return 1;
}

/* Picks with the paths of l (all at once, and each alone) and compares every reading. */
static int compare_paths(const char *doc, size_t len, const json_t *full, path_list *l)
{
    jpick_path jp[MAX_PATHS + 2];
    json_t *picked;
    char tpl[2 * PATH_MAX_B + 8];
    int rc = 0;

    add_path(l, "input.nope");
    add_path(l, "0");
    for (size_t i = 0; i < l->n; i++)
        jp[i] = (jpick_path){l->p[i], strlen(l->p[i])};
    if (jpick_parse(doc, len, jp, l->n, &picked) != SLUICE_OK)
        return fail("jpick_parse failed on %s", jscan_harness_show(doc, len));
    for (size_t i = 0; i < l->n && rc == 0; i++)
        rc = same_reading(full, picked, l->p[i], doc, len);
    json_decref(picked);
    for (size_t i = 0; i < l->n && i < 6 && rc == 0; i++) {
        char prefixed[PATH_MAX_B + 8];

        snprintf(prefixed, sizeof prefixed, "input.%s", l->p[i]);
        jp[0] = (jpick_path){prefixed, strlen(prefixed)};
        if (jpick_parse(doc, len, jp, 1, &picked) != SLUICE_OK)
            return fail("jpick_parse failed on %s", jscan_harness_show(doc, len));
        rc = same_reading(full, picked, prefixed, doc, len);
        /* The same path without its prefix, unless the prefix was part of a longer one. */
        if (rc == 0 && strncmp(l->p[i], DOTPATH_INPUT_PREFIX, sizeof DOTPATH_INPUT_PREFIX - 1))
            rc = same_reading(full, picked, l->p[i], doc, len);
        json_decref(picked);
    }
    /* A template of two fields, picked from its own fields as the resolver does. */
    if (rc == 0 && l->n >= 2) {
        const char *a = l->p[0], *b = l->p[l->n > 3 ? l->n - 3 : 1];
        char k1[512], k2[512], m1[400], m2[400];
        size_t pos = 0, flen, nf = 0, l1, l2;
        const char *field;
        int e1, e2, r1, r2;

        if (!template_safe(a) || !template_safe(b))
            return 0;
        snprintf(tpl, sizeof tpl, "t:{%s}:{input.%s}", a, b);
        while (keytpl_next_field(tpl, &pos, &field, &flen))
            jp[nf++] = (jpick_path){field, flen};
        if (nf != 2)
            return fail("template %s has %zu fields, not 2", tpl, nf);
        if (jpick_parse(doc, len, jp, nf, &picked) != SLUICE_OK)
            return fail("jpick_parse failed on %s", jscan_harness_show(doc, len));
        r1 = keytpl_extract_msg(full, tpl, k1, sizeof k1, &l1, &e1, m1, sizeof m1);
        r2 = keytpl_extract_msg(picked, tpl, k2, sizeof k2, &l2, &e2, m2, sizeof m2);
        if (r1 != r2 || e1 != e2 || strcmp(m1, m2) != 0 ||
            (r1 == 0 && (l1 != l2 || memcmp(k1, k2, l1))))
            rc = fail("template %s: %d \"%s\" vs %d \"%s\" in %s", tpl, r1, m1, r2, m2,
                      jscan_harness_show(doc, len));
        json_decref(picked);
    }
    return rc;
}

/* ---- The differential check ------------------------------------------------------------- */

const char *jscan_harness_run(const char *doc, size_t len, int *verdict)
{
    json_error_t err;
    size_t at = 0;
    int v = jscan_validate(doc, len, &at), rc = 0;
    json_t *j = json_loadb(doc, len, FLAGS, &err);

    if (verdict)
        *verdict = v;
    if (v == 0 && !j)
        rc = fail("the scanner accepts what jansson refuses (%s): %s", err.text,
                  jscan_harness_show(doc, len));
    else if (v == SLUICE_EINVAL && j)
        rc = fail("the scanner refuses (at %zu) what jansson accepts: %s", at,
                  jscan_harness_show(doc, len));
    else if (v != 0 && v != SLUICE_EINVAL && v != JSCAN_UNSURE)
        rc = fail("the scanner answers %d", v);
    else if (at > len)
        rc = fail("fault offset %zu past the end (%zu)", at, len);
    if (rc == 0 && v == 0) {
        path_list l = {.n = 0};
        size_t start = jscan_skip_ws(doc, len, 0);

        /* The walk agrees with the scan on where the value ends. */
        if (jscan_skip_ws(doc, len, jscan_value_end(doc, len, start)) != len)
            rc = fail("the walk ends the value early: %s", jscan_harness_show(doc, len));
        if (rc == 0) {
            collect(j, "", &l);
            rc = compare_paths(doc, len, j, &l);
        }
        free_paths(&l);
        jscan_harness_seen.valid++;
    } else if (v == SLUICE_EINVAL) {
        jscan_harness_seen.invalid++;
    } else if (v == JSCAN_UNSURE) {
        jscan_harness_seen.unsure++;
    }
    json_decref(j);
    return rc ? why : NULL;
}
