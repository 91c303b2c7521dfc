/* SPDX-License-Identifier: MIT */
/*
 * Counters summed across nodes, their bookkeeping (ctrset.h). Counters are never removed: a
 * node's set holds the counters of its configuration plus whatever the store's totals name, a
 * few per limit and per task type.
 */
#include "server/ctrset.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/grow.h"
#include "base/hash.h"
#include "base/sat.h"
#include "sluice/error.h"

typedef struct ctr_key {
    const char *name;
    size_t len;
} ctr_key;

static int ctr_eq(const void *p, const void *key)
{
    const ctr *c = p;
    const ctr_key *k = key;

    return c->len == k->len && memcmp(c->name, k->name, k->len) == 0;
}

void ctrset_init(ctrset *s)
{
    memset(s, 0, sizeof(*s));
    ptab_init(&s->tab);
}

void ctrset_free(ctrset *s)
{
    for (size_t i = 0; i < s->n; i++)
        alloc_free(s->v[i]);
    alloc_free(s->v);
    ptab_free(&s->tab);
    memset(s, 0, sizeof(*s));
}

static ctr *find(const ctrset *s, const char *name, size_t len, uint64_t hash)
{
    ctr_key k = {name, len};

    return ptab_find(&s->tab, hash, &k, ctr_eq);
}

/* The counter of the full name, created when absent. NULL without memory. */
static ctr *get(ctrset *s, const char *name, size_t len)
{
    uint64_t hash = hash_bytes(name, len);
    ctr *c = find(s, name, len, hash);

    if (c)
        return c;
    if (grow_array(&s->v, &s->cap, s->n + 1, sizeof(*s->v), 16) != SLUICE_OK ||
        ptab_reserve(&s->tab, 1) != SLUICE_OK)
        return NULL;
    c = alloc_calloc(1, sizeof(*c) + len + 1);
    if (!c)
        return NULL;
    c->hash = hash;
    c->len = len;
    memcpy(c->name, name, len);
    c->name[len] = '\0';
    /* Reserved above: neither can fail. */
    (void)ptab_insert(&s->tab, hash, c);
    s->v[s->n++] = c;
    return c;
}

/* Writes "code:name" into buf (CTRSET_NAME_MAX bytes). Returns its length, or 0 when too long. */
static size_t full_name(char *buf, const char *code, const char *name, size_t len)
{
    size_t cl = strlen(code);

    if (cl + 1 + len > CTRSET_NAME_MAX)
        return 0;
    memcpy(buf, code, cl);
    buf[cl] = ':';
    if (len)
        memcpy(buf + cl + 1, name, len);
    return cl + 1 + len;
}

int ctrset_add(ctrset *s, const char *code, const char *name, size_t len, uint64_t delta)
{
    char buf[CTRSET_NAME_MAX];
    size_t n = full_name(buf, code, name, len);
    ctr *c;

    if (n == 0)
        return SLUICE_EINVAL;
    c = get(s, buf, n);
    if (!c) {
        s->dropped = sat_add_u64(s->dropped, delta);
        return SLUICE_ENOMEM;
    }
    c->node = sat_add_u64(c->node, delta);
    c->pending = sat_add_u64(c->pending, delta);
    return 0;
}

const ctr *ctrset_find(const ctrset *s, const char *code, const char *name, size_t len)
{
    char buf[CTRSET_NAME_MAX];
    size_t n = full_name(buf, code, name, len);

    if (n == 0)
        return NULL;
    return find(s, buf, n, hash_bytes(buf, n));
}

uint64_t ctr_cluster(const ctr *c)
{
    return sat_add_u64(sat_add_u64(c->store, c->offset), sat_add_u64(c->inflight, c->pending));
}

size_t ctrset_begin(ctrset *s)
{
    size_t n = 0;

    if (!s->busy) {
        s->seq++;
        for (size_t i = 0; i < s->n; i++) {
            ctr *c = s->v[i];

            c->inflight = c->pending;
            c->pending = 0;
        }
        s->busy = 1;
    }
    for (size_t i = 0; i < s->n; i++)
        n += s->v[i]->inflight > 0;
    return n;
}

int ctrset_total(ctrset *s, const char *name, size_t len, uint64_t n)
{
    ctr *c = len <= CTRSET_NAME_MAX ? get(s, name, len) : NULL;

    if (!c)
        return SLUICE_ENOMEM;
    c->reading = n;
    c->seen = 1;
    return 0;
}

void ctrset_confirm(ctrset *s)
{
    for (size_t i = 0; i < s->n; i++) {
        ctr *c = s->v[i];
        uint64_t total = c->seen ? c->reading : 0;
        uint64_t expect = sat_add_u64(c->store, c->inflight);

        /* Other nodes only add, and this node's inflight is in the total once (applied now, or
         * by an earlier sending whose answer was lost): a total below that is a loss. */
        if (total < expect)
            c->offset = sat_add_u64(c->offset, expect - total);
        c->store = total;
        c->inflight = 0;
        c->seen = 0;
        c->reading = 0;
    }
    s->busy = 0;
}

void ctrset_unread(ctrset *s)
{
    for (size_t i = 0; i < s->n; i++) {
        s->v[i]->seen = 0;
        s->v[i]->reading = 0;
    }
}

uint64_t ctrset_unconfirmed(const ctrset *s)
{
    uint64_t n = 0;

    for (size_t i = 0; i < s->n; i++)
        n = sat_add_u64(n, sat_add_u64(s->v[i]->pending, s->v[i]->inflight));
    return n;
}

/* Appends len bytes to *buf at *at. Returns 0 or SLUICE_ENOMEM. */
static int put(char **buf, size_t *cap, size_t *at, const char *p, size_t len)
{
    if (grow_array(buf, cap, *at + len, 1, 256) != SLUICE_OK)
        return SLUICE_ENOMEM;
    memcpy(*buf + *at, p, len);
    *at += len;
    return 0;
}

int ctrset_pg_arrays(const ctrset *s, char **buf, size_t *cap, size_t *names_off,
                     size_t *deltas_off)
{
    size_t at = 0;
    int first = 1, rc = 0;

    *names_off = 0;
    rc |= put(buf, cap, &at, "{", 1);
    for (size_t i = 0; i < s->n && rc == 0; i++) {
        const ctr *c = s->v[i];

        if (c->inflight == 0)
            continue;
        rc |= put(buf, cap, &at, first ? "\"" : ",\"", first ? 1 : 2);
        for (size_t k = 0; k < c->len && rc == 0; k++) {
            if (c->name[k] == '"' || c->name[k] == '\\')
                rc |= put(buf, cap, &at, "\\", 1);
            rc |= put(buf, cap, &at, &c->name[k], 1);
        }
        rc |= put(buf, cap, &at, "\"", 1);
        first = 0;
    }
    rc |= put(buf, cap, &at, "}", 2); /* with the NUL */
    *deltas_off = at;
    first = 1;
    rc |= put(buf, cap, &at, "{", 1);
    for (size_t i = 0; i < s->n && rc == 0; i++) {
        char num[24];
        int len;

        if (s->v[i]->inflight == 0)
            continue;
        len = snprintf(num, sizeof num, "%s%llu", first ? "" : ",",
                       (unsigned long long)s->v[i]->inflight);
        rc |= put(buf, cap, &at, num, (size_t)len);
        first = 0;
    }
    rc |= put(buf, cap, &at, "}", 2);
    return rc ? SLUICE_ENOMEM : 0;
}

int ctrset_parse_u64(const char *s, size_t len, uint64_t *out)
{
    uint64_t v = 0;

    *out = 0;
    if (len == 0 || len > 20)
        return -1;
    for (size_t i = 0; i < len; i++) {
        unsigned d;

        if (s[i] < '0' || s[i] > '9')
            return -1;
        d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}
