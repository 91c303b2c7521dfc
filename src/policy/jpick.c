/* SPDX-License-Identifier: MIT */
/*
 * Picking the parts of a validated payload that dot paths reach (see jpick.h).
 *
 * One descent serves every path at once: at each value the paths still wanted there are split by
 * their next segment among the members (or elements) that segment names, so a value shared by
 * several paths is visited once. The descent is as deep as the longest path has segments. Only
 * the values where paths end, and member names that hold escapes, go through jansson; everything
 * else is skipped by offsets (base/jscan.h).
 */
#include "policy/jpick.h"

#include <string.h>

#include "base/alloc.h"
#include "base/jscan.h"
#include "policy/dotpath.h"
#include "sluice/error.h"

#define WANTS_ON_STACK 8

/* The rest of one path still to follow: the text from the current segment on. */
typedef struct want {
    const char *seg; /* the current segment, up to the next dot */
    size_t rest;     /* bytes left from seg; 0: the path ends at this value */
} want;

/* The length of w's current segment. */
static size_t seg_len(const want *w)
{
    const char *dot = memchr(w->seg, '.', w->rest);

    return dot ? (size_t)(dot - w->seg) : w->rest;
}

/* w past its current segment of n bytes (and the dot after it). */
static want advance(const want *w, size_t n)
{
    want next;

    next.seg = w->seg + n + (n < w->rest);
    next.rest = n < w->rest ? w->rest - n - 1 : 0;
    return next;
}

/* Parses doc[at..end) in full with jansson, as the whole payload would be. */
static int load(const char *doc, size_t at, size_t end, json_t **out)
{
    unsigned long failures = alloc_json_failures();

    *out = json_loadb(doc + at, end - at, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    if (*out)
        return SLUICE_OK;
    return alloc_json_failures() != failures ? SLUICE_ENOMEM : SLUICE_EINVAL;
}

static int pick(const char *doc, size_t len, size_t at, const want *w, size_t nw, json_t **out);

/* Picks the members of the object at doc[at] that the wants name. */
static int pick_object(const char *doc, size_t len, size_t at, const want *w, size_t nw, want *sub,
                       json_t **out)
{
    json_t *obj = json_object(), *name_json = NULL;
    size_t name, namelen, value;
    jscan_iter it;
    int rc = SLUICE_OK;

    if (!obj)
        return SLUICE_ENOMEM;
    jscan_iter_open(&it, doc, len, at);
    while (rc == SLUICE_OK && jscan_iter_next(&it, &name, &namelen, &value)) {
        const char *key = doc + name + 1;
        size_t keylen = namelen - 2, nsub = 0;
        json_t *child;

        /* A name with escapes is compared decoded, as jansson stores it. */
        if (memchr(key, '\\', keylen)) {
            rc = load(doc, name, name + namelen, &name_json);
            if (rc != SLUICE_OK)
                break;
            key = json_string_value(name_json);
            keylen = json_string_length(name_json);
        }
        for (size_t k = 0; k < nw; k++) {
            size_t n = seg_len(&w[k]);

            if (n == keylen && memcmp(w[k].seg, key, n) == 0)
                sub[nsub++] = advance(&w[k], n);
        }
        if (nsub > 0) {
            rc = pick(doc, len, value, sub, nsub, &child);
            /* A later duplicate replaces the earlier one, as in jansson's parse. */
            if (rc == SLUICE_OK && json_object_setn_new(obj, key, keylen, child) != 0)
                rc = SLUICE_ENOMEM;
        }
        json_decref(name_json);
        name_json = NULL;
    }
    if (rc != SLUICE_OK) {
        json_decref(obj);
        return rc;
    }
    *out = obj;
    return SLUICE_OK;
}

/* Picks the elements of the array at doc[at] that the wants index; null stands for the others,
 * so that the array keeps its length. */
static int pick_array(const char *doc, size_t len, size_t at, const want *w, size_t nw, want *sub,
                      json_t **out)
{
    json_t *arr = json_array();
    size_t index = 0, value;
    jscan_iter it;
    int rc = SLUICE_OK;

    if (!arr)
        return SLUICE_ENOMEM;
    jscan_iter_open(&it, doc, len, at);
    while (rc == SLUICE_OK && jscan_iter_next(&it, NULL, NULL, &value)) {
        json_t *child = json_null();
        size_t nsub = 0;

        for (size_t k = 0; k < nw; k++) {
            size_t n = seg_len(&w[k]), ix;

            if (dotpath_index(w[k].seg, n, &ix) && ix == index)
                sub[nsub++] = advance(&w[k], n);
        }
        if (nsub > 0)
            rc = pick(doc, len, value, sub, nsub, &child);
        if (rc == SLUICE_OK && json_array_append_new(arr, child) != 0)
            rc = SLUICE_ENOMEM;
        index++;
    }
    if (rc != SLUICE_OK) {
        json_decref(arr);
        return rc;
    }
    *out = arr;
    return SLUICE_OK;
}

/* Builds in *out the value at doc[at] pruned to the wants w[0..nw). */
static int pick(const char *doc, size_t len, size_t at, const want *w, size_t nw, json_t **out)
{
    want stack[WANTS_ON_STACK], *sub = stack;
    int rc;

    *out = NULL;
    for (size_t k = 0; k < nw; k++) {
        if (w[k].rest == 0) /* a path ends here: all of the value */
            return load(doc, at, jscan_value_end(doc, len, at), out);
    }
    if (doc[at] != '{' && doc[at] != '[') /* a scalar on the way: the paths fail on its kind */
        return load(doc, at, jscan_value_end(doc, len, at), out);
    if (nw > WANTS_ON_STACK) {
        sub = alloc_malloc(nw * sizeof *sub);
        if (!sub)
            return SLUICE_ENOMEM;
    }
    if (doc[at] == '{')
        rc = pick_object(doc, len, at, w, nw, sub, out);
    else
        rc = pick_array(doc, len, at, w, nw, sub, out);
    if (sub != stack)
        alloc_free(sub);
    return rc;
}

int jpick_parse(const char *doc, size_t len, const jpick_path *paths, size_t npaths, json_t **out)
{
    const size_t plen = sizeof DOTPATH_INPUT_PREFIX - 1;
    want stack[WANTS_ON_STACK], *w = stack;
    int rc;

    *out = NULL;
    if (npaths > WANTS_ON_STACK) {
        w = alloc_malloc(npaths * sizeof *w);
        if (!w)
            return SLUICE_ENOMEM;
    }
    for (size_t k = 0; k < npaths; k++) {
        w[k].seg = paths[k].text;
        w[k].rest = paths[k].len;
        if (w[k].rest >= plen && memcmp(w[k].seg, DOTPATH_INPUT_PREFIX, plen) == 0) {
            w[k].seg += plen;
            w[k].rest -= plen;
        }
    }
    rc = pick(doc, len, jscan_skip_ws(doc, len, 0), w, npaths, out);
    if (w != stack)
        alloc_free(w);
    return rc;
}
