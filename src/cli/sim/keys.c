/* SPDX-License-Identifier: MIT */
/*
 * The keys of a simulation (see keys.h): the series of units granted per limit, tier and key,
 * their index, the engine's charges recorded on them, and the figures of the report.
 *
 * A series is two parallel arrays, grant times and cumulative units, appended in time order (the
 * simulated clock never goes back), so "the most units in any interval of length w" is one pass
 * with two pointers. Concurrency series also keep the units held over time, a point per change.
 *
 * Links, grants and held units come from sluice_engine_task_charges only: a task's links are
 * read once, when the engine accepted it (they never change afterwards: a same-task-key submit
 * replaces the payload, not the links), and their charged and held flags at every delivery and
 * just before every release.
 */
#include "cli/sim/keys.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/alloc.h"
#include "base/hash.h"
#include "cli/sim/simulate.h"

#define MINUTE_NS (60 * SLUICE_NS_PER_SEC)
#define KEY_BUF   1024 /* longest list of a task's keys kept for its report line */

/* Makes room for `need` elements of `size` bytes in *p (capacity *cap). Returns 0 or -1. */
int sim_grow(void **p, size_t *cap, size_t need, size_t size)
{
    size_t want = *cap ? *cap : 16;
    void *np;

    if (need <= *cap)
        return 0;
    while (want < need) {
        if (want > SIZE_MAX / 2 / size)
            return -1;
        want *= 2;
    }
    np = alloc_realloc(*p, want * size);
    if (!np)
        return -1;
    *p = np;
    *cap = want;
    return 0;
}

/* ---- Series ------------------------------------------------------------------------------- */

/* What a series is looked up by: a link as the engine reported it, in the result r. */
typedef struct series_ref {
    const simrun_result *r;
    const sluice_charge *c;
} series_ref;

static uint64_t series_hash(const char *limit, const char *tier, const char *key, size_t keylen)
{
    uint64_t h = hash_bytes(limit, strlen(limit));

    if (tier)
        h = hash_bytes_seeded(tier, strlen(tier), h);
    return hash_bytes_seeded(key, keylen, hash_mix(h));
}

/* ptab_eq_fn: p is a series index + 1, key a series_ref. */
static int series_eq(const void *p, const void *key)
{
    const series_ref *ref = key;
    const simrun_series *s = &ref->r->series[(uintptr_t)p - 1];
    const sluice_charge *c = ref->c;

    return strcmp(s->limit, c->limit) == 0 &&
           ((!s->tier && !c->tier) || (s->tier && c->tier && strcmp(s->tier, c->tier) == 0)) &&
           strlen(s->key) == c->keylen && memcmp(s->key, c->key, c->keylen) == 0;
}

/* The definition enforced on the keys of link c: its tier's, or its limit's. */
static void series_def(const sluice_engine *e, const sluice_charge *c, simrun_series *s)
{
    const sluice_limit_policy *pol = sluice_engine_get_limit(e, c->limit, NULL);

    memset(&s->def, 0, sizeof(s->def));
    s->def.kind = c->kind;
    if (!pol)
        return; /* removed since: only its kind is known */
    s->def = pol->def;
    s->overflow = pol->overflow;
    for (size_t i = 0; c->tier && i < pol->ntiers; i++) {
        if (strcmp(pol->tiers[i].name, c->tier) == 0)
            s->def = pol->tiers[i].def;
    }
    for (size_t i = 0; i < pol->noverrides; i++) {
        /* A key with its own limit is drawn against its own capacity. */
        const char *k = pol->overrides[i].key;

        if (strlen(k) == c->keylen && memcmp(k, c->key, c->keylen) == 0)
            s->def = pol->overrides[i].def;
    }
}

/* Returns the index of the series of link c, adding it when new; -1 when out of memory. */
static long series_get(simrun_result *r, const sluice_engine *e, const sluice_charge *c)
{
    simkeys *k = simrun_keys(r);
    uint64_t h = series_hash(c->limit, c->tier, c->key, c->keylen);
    series_ref ref = {r, c};
    void *found = ptab_find(&k->index, h, &ref, series_eq);
    simrun_series *s;

    if (found)
        return (long)((uintptr_t)found - 1);
    if (ptab_reserve(&k->index, 1) != 0 ||
        sim_grow((void **)&r->series, &k->series_cap, r->nseries + 1, sizeof(*r->series)) != 0)
        return -1;
    s = &r->series[r->nseries];
    memset(s, 0, sizeof(*s));
    s->limit = alloc_memdup0(c->limit, strlen(c->limit));
    s->tier = c->tier ? alloc_memdup0(c->tier, strlen(c->tier)) : NULL;
    s->key = alloc_memdup0(c->key, c->keylen);
    if (!s->limit || !s->key || (c->tier && !s->tier)) {
        alloc_free(s->limit);
        alloc_free(s->tier);
        alloc_free(s->key);
        return -1;
    }
    series_def(e, c, s);
    s->max_minute = -1;
    ptab_insert(&k->index, h, (void *)(uintptr_t)(r->nseries + 1)); /* reserved */
    return (long)r->nseries++;
}

/* Notes the units held on a concurrency series at now (out of memory loses the point only). */
static void held_point(simrun_series *s, int64_t now)
{
    size_t cap = s->held_cap;

    if (s->nheld > 0 && s->held_t[s->nheld - 1] == now) {
        s->held_v[s->nheld - 1] = s->held;
        return;
    }
    if (sim_grow((void **)&s->held_t, &cap, s->nheld + 1, sizeof(*s->held_t)) != 0)
        return;
    if (cap != s->held_cap) {
        int64_t *nv = alloc_realloc(s->held_v, cap * sizeof(*s->held_v));

        if (!nv)
            return; /* held_t grew, held_v did not: held_cap stays the smaller of the two */
        s->held_v = nv;
        s->held_cap = cap;
    }
    s->held_t[s->nheld] = now;
    s->held_v[s->nheld++] = s->held;
}

/* Appends a grant of units at now to series s. Returns 0 or -1 when out of memory. */
static int series_grant(simrun_series *s, int64_t now, int64_t units)
{
    size_t cap = s->cap;

    if (sim_grow((void **)&s->t_ns, &cap, s->n + 1, sizeof(*s->t_ns)) != 0)
        return -1;
    if (cap != s->cap) {
        int64_t *nc = alloc_realloc(s->cum, cap * sizeof(*s->cum));

        if (!nc)
            return -1;
        s->cum = nc;
        s->cap = cap;
    }
    s->t_ns[s->n] = now;
    s->cum[s->n] = (s->n ? s->cum[s->n - 1] : 0) + units;
    s->n++;
    if (units != 1)
        s->weighted = 1;
    return 0;
}

/* Adds delta units (negative: given back) to those held on concurrency series s at now. */
static void series_hold(simrun_series *s, int64_t now, int64_t delta)
{
    s->held = s->held + delta > 0 ? s->held + delta : 0;
    if (s->held > s->held_peak)
        s->held_peak = s->held;
    held_point(s, now);
}

int64_t simrun_max_in(const simrun_series *s, int64_t w_ns)
{
    int64_t best = 0;
    size_t j = 0;

    /* For each grant i, the units of grants in [t_i, t_i + w): intervals starting at a grant
     * are the only ones that can hold the most. */
    for (size_t i = 0; i < s->n; i++) {
        int64_t before = i ? s->cum[i - 1] : 0;

        if (i > 0 && s->t_ns[i] == s->t_ns[i - 1])
            continue;
        if (j < i)
            j = i;
        while (j + 1 < s->n && s->t_ns[j + 1] - s->t_ns[i] < w_ns)
            j++;
        if (s->cum[j] - before > best)
            best = s->cum[j] - before;
    }
    return best;
}

/* The most units granted in one UTC calendar day or month (quota), or in all (total). */
static int64_t max_in_calendar(const simrun_series *s)
{
    int64_t best = 0, in = 0, bucket = INT64_MIN;

    for (size_t i = 0; i < s->n; i++) {
        int64_t at = SIMULATE_EPOCH_NS + s->t_ns[i], b, units;

        units = s->cum[i] - (i ? s->cum[i - 1] : 0);
        if (s->def.calendar == SLUICE_CAL_DAY) {
            b = at / (86400 * SLUICE_NS_PER_SEC);
        } else if (s->def.calendar == SLUICE_CAL_MONTH) {
            time_t secs = (time_t)(at / SLUICE_NS_PER_SEC);
            struct tm tm;

            gmtime_r(&secs, &tm);
            b = (int64_t)tm.tm_year * 12 + tm.tm_mon;
        } else {
            b = 0;
        }
        in = b == bucket ? in + units : units;
        bucket = b;
        if (in > best)
            best = in;
    }
    return best;
}

/* ---- The engine's charges ------------------------------------------------------------------- */

/* Reads the charges of task id into the index's scratch. Returns how many links it has (0 when
 * the engine forgot it), or -1 when out of memory. */
static long read_charges(simkeys *k, const sluice_engine *e, uint64_t id)
{
    int n = sluice_engine_task_charges(e, id, k->ch, k->ch_cap);

    if (n < 0)
        return 0;
    if ((size_t)n > k->ch_cap) {
        if (sim_grow((void **)&k->ch, &k->ch_cap, (size_t)n, sizeof(*k->ch)) != 0)
            return -1;
        n = sluice_engine_task_charges(e, id, k->ch, k->ch_cap);
    }
    return n;
}

int simkeys_links(simrun_result *r, const sluice_engine *e, simrun_task *t, const char *xkey)
{
    simkeys *k = simrun_keys(r);
    long n = read_charges(k, e, t->id);
    char disp[KEY_BUF];
    size_t dlen = 0;

    if (n < 0)
        return -1;
    disp[0] = '\0';
    t->links = (uint32_t)r->nlinks;
    t->nlinks = 0;
    for (long i = 0; i < n; i++) {
        const sluice_charge *c = &k->ch[i];
        long si = series_get(r, e, c);

        if (si < 0 ||
            sim_grow((void **)&r->links, &k->link_cap, r->nlinks + 1, sizeof(*r->links)) != 0)
            return -1;
        r->links[r->nlinks].series = (uint32_t)si;
        r->links[r->nlinks].units = c->units;
        r->nlinks++;
        t->nlinks++;
        if (c->keylen > 0 && dlen + c->keylen + 2 < sizeof(disp)) {
            if (dlen > 0)
                disp[dlen++] = ',';
            memcpy(disp + dlen, c->key, c->keylen);
            dlen += c->keylen;
            disp[dlen] = '\0';
        }
    }
    if (dlen == 0 && xkey) {
        dlen = strlen(xkey) < sizeof(disp) - 1 ? strlen(xkey) : sizeof(disp) - 1;
        memcpy(disp, xkey, dlen);
        disp[dlen] = '\0';
    }
    t->key = alloc_memdup0(disp, dlen);
    return t->key ? 0 : -1;
}

int simkeys_delivered(simrun_result *r, const sluice_engine *e, const simrun_task *t, int charged,
                      int64_t now)
{
    simkeys *k = simrun_keys(r);
    long n = read_charges(k, e, t->id);

    if (n < 0)
        return -1;
    for (long i = 0; i < n && (uint32_t)i < t->nlinks; i++) {
        const sluice_charge *c = &k->ch[i];
        simrun_series *s = &r->series[r->links[t->links + i].series];

        if (charged && (c->charged || c->held) && series_grant(s, now, c->units) != 0)
            return -1;
        if (c->held)
            series_hold(s, now, c->units);
    }
    return 0;
}

int simkeys_release(simrun_result *r, const sluice_engine *e, const simrun_task *t, int64_t now)
{
    simkeys *k = simrun_keys(r);
    long n = read_charges(k, e, t->id);

    if (n < 0)
        return -1;
    for (long i = 0; i < n && (uint32_t)i < t->nlinks; i++) {
        if (k->ch[i].held)
            series_hold(&r->series[r->links[t->links + i].series], now, -k->ch[i].units);
    }
    return 0;
}

void simkeys_figures(simrun_result *r)
{
    for (size_t i = 0; i < r->nseries; i++) {
        simrun_series *s = &r->series[i];

        switch (s->def.kind) {
        case SLUICE_RATE:
        case SLUICE_WINDOW:
        case SLUICE_SLIDING:
            s->max_period = simrun_max_in(s, s->def.period_ns);
            if (s->def.period_ns < MINUTE_NS)
                s->max_minute = simrun_max_in(s, MINUTE_NS);
            break;
        case SLUICE_CONCURRENCY:
            s->max_period = s->held_peak;
            break;
        case SLUICE_QUOTA:
        default:
            s->max_period = max_in_calendar(s);
            break;
        }
    }
}

/* ---- Report order ----------------------------------------------------------------------- */

/* Orders series by limit (config order), then tier, then grants (most first), then key. */
static const simrun_result *sort_ctx;

static size_t limit_rank(const simrun_result *r, const char *name)
{
    for (size_t i = 0; i < r->cfg->nlimits; i++) {
        if (strcmp(r->cfg->limits[i].name, name) == 0)
            return i;
    }
    return SIZE_MAX;
}

int simkeys_tier_rank(const sluice_limit_policy *pol, const char *tier)
{
    for (size_t i = 0; pol && i < pol->ntiers; i++) {
        if (strcmp(pol->tiers[i].name, tier) == 0)
            return (int)i;
    }
    return 0;
}

static int series_cmp(const void *a, const void *b)
{
    const simrun_series *x = &sort_ctx->series[*(const size_t *)a];
    const simrun_series *y = &sort_ctx->series[*(const size_t *)b];
    size_t rx = limit_rank(sort_ctx, x->limit), ry = limit_rank(sort_ctx, y->limit);
    int c;

    if (rx != ry)
        return rx < ry ? -1 : 1;
    if (x->tier && y->tier) {
        const sluice_limit_policy *pol = sluice_config_find_limit(sort_ctx->cfg, x->limit);
        int tx = simkeys_tier_rank(pol, x->tier), ty = simkeys_tier_rank(pol, y->tier);

        if (tx != ty)
            return tx < ty ? -1 : 1;
    }
    c = strcmp(x->tier ? x->tier : "", y->tier ? y->tier : "");
    if (c != 0)
        return c;
    if (x->n != y->n)
        return x->n > y->n ? -1 : 1;
    return strcmp(x->key, y->key);
}

size_t *simkeys_order(const simrun_result *r)
{
    size_t *ord = alloc_malloc((r->nseries ? r->nseries : 1) * sizeof(*ord));

    if (!ord)
        return NULL;
    for (size_t i = 0; i < r->nseries; i++)
        ord[i] = i;
    sort_ctx = r;
    qsort(ord, r->nseries, sizeof(*ord), series_cmp);
    sort_ctx = NULL;
    return ord;
}

void simkeys_free(simkeys *k)
{
    ptab_free(&k->index);
    alloc_free(k->ch);
    k->ch = NULL;
    k->ch_cap = 0;
}
