/* SPDX-License-Identifier: MIT */
/*
 * The keys of a simulation (see keys.h): the series of units granted per limit, tier and key,
 * their index, the resolution of a task's keys, and the figures of the report.
 *
 * A series is two parallel arrays, grant times and cumulative units, appended in time order (the
 * simulated clock never goes back), so "the most units in any interval of length w" is one pass
 * with two pointers. Concurrency series also keep the units held over time, a point per change.
 */
#include "cli/sim/keys.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/sim/simulate.h"
#include "base/alloc.h"
#include "policy/dotpath.h"

#define MINUTE_NS (60 * SLUICE_NS_PER_SEC)
#define KEY_BUF   1024 /* longest key kept for the report */

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
    np = sluice_realloc(*p, want * size);
    if (!np)
        return -1;
    *p = np;
    *cap = want;
    return 0;
}

static uint64_t hash_bytes(uint64_t h, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= UINT64_C(0x100000001b3);
    }
    return h;
}

/* ---- Series ------------------------------------------------------------------------------- */

static uint64_t series_hash(const char *limit, const char *tier, const char *key, size_t keylen)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325);

    h = hash_bytes(h, limit, strlen(limit) + 1);
    h = hash_bytes(h, tier ? tier : "", tier ? strlen(tier) + 1 : 1);
    return hash_bytes(h, key, keylen);
}

static int series_match(const simrun_series *s, const char *limit, const char *tier,
                        const char *key, size_t keylen)
{
    return strcmp(s->limit, limit) == 0 &&
           ((!s->tier && !tier) || (s->tier && tier && strcmp(s->tier, tier) == 0)) &&
           strlen(s->key) == keylen && memcmp(s->key, key, keylen) == 0;
}

static int series_rehash(simrun_result *r)
{
    simkeys *k = simrun_keys(r);
    size_t ncap = k->cap ? k->cap * 2 : 256;
    uint32_t *slot = sluice_calloc(ncap, sizeof(*slot));

    if (!slot)
        return -1;
    for (size_t i = 0; i < r->nseries; i++) {
        const simrun_series *s = &r->series[i];
        size_t h = (size_t)(series_hash(s->limit, s->tier, s->key, strlen(s->key)) & (ncap - 1));

        while (slot[h] != 0)
            h = (h + 1) & (ncap - 1);
        slot[h] = (uint32_t)i + 1;
    }
    sluice_free(k->slot);
    k->slot = slot;
    k->cap = ncap;
    return 0;
}

/* Returns the index of the series of (limit, tier, key), adding it when new; -1 when out of
 * memory. */
static long series_get(simrun_result *r, const sluice_limit_policy *pol, const sluice_tier *tier,
                       const char *key, size_t keylen)
{
    simkeys *k = simrun_keys(r);
    const char *tname = tier ? tier->name : NULL;
    simrun_series *s;
    size_t h;

    if ((r->nseries + 1) * 2 > k->cap && series_rehash(r) != 0)
        return -1;
    h = (size_t)(series_hash(pol->name, tname, key, keylen) & (k->cap - 1));
    while (k->slot[h] != 0) {
        s = &r->series[k->slot[h] - 1];
        if (series_match(s, pol->name, tname, key, keylen))
            return (long)k->slot[h] - 1;
        h = (h + 1) & (k->cap - 1);
    }
    if (sim_grow((void **)&r->series, &k->series_cap, r->nseries + 1, sizeof(*r->series)) != 0)
        return -1;
    s = &r->series[r->nseries];
    memset(s, 0, sizeof(*s));
    s->limit = sluice_memdup0(pol->name, strlen(pol->name));
    s->tier = tname ? sluice_memdup0(tname, strlen(tname)) : NULL;
    s->key = sluice_memdup0(key, keylen);
    if (!s->limit || !s->key || (tname && !s->tier)) {
        sluice_free(s->limit);
        sluice_free(s->tier);
        sluice_free(s->key);
        return -1;
    }
    s->def = tier ? tier->def : pol->def;
    s->overflow = pol->overflow;
    s->max_minute = -1;
    k->slot[h] = (uint32_t)r->nseries + 1;
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
        int64_t *nv = sluice_realloc(s->held_v, cap * sizeof(*s->held_v));

        if (!nv)
            return; /* held_t grew, held_v did not: held_cap stays the smaller of the two */
        s->held_v = nv;
        s->held_cap = cap;
    }
    s->held_t[s->nheld] = now;
    s->held_v[s->nheld++] = s->held;
}

static int series_grant(simrun_series *s, int64_t now, int64_t units)
{
    size_t cap = s->cap;

    if (sim_grow((void **)&s->t_ns, &cap, s->n + 1, sizeof(*s->t_ns)) != 0)
        return -1;
    if (cap != s->cap) {
        int64_t *nc = sluice_realloc(s->cum, cap * sizeof(*s->cum));

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
    if (s->def.kind == SLUICE_CONCURRENCY) {
        s->held += units;
        if (s->held > s->held_peak)
            s->held_peak = s->held;
        held_point(s, now);
    }
    return 0;
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

/* ---- Resolution (as engine/resolve.c) ----------------------------------------------------- */

static const sluice_tier *choose_tier(const sluice_limit_policy *pol, const json_t *input)
{
    char buf[KEY_BUF];
    size_t len;
    int64_t v;

    if (pol->ntiers == 0 || !pol->tier_path)
        return NULL;
    if (pol->tiers[0].equals) {
        if (dotpath_extract(input, pol->tier_path, buf, sizeof(buf), &len) != 0)
            return NULL;
        for (size_t i = 0; i < pol->ntiers; i++) {
            if (pol->tiers[i].equals && strlen(pol->tiers[i].equals) == len &&
                memcmp(pol->tiers[i].equals, buf, len) == 0)
                return &pol->tiers[i];
        }
        return NULL;
    }
    if (dotpath_number(input, pol->tier_path, &v) != 0)
        return NULL;
    for (size_t i = 0; i < pol->ntiers; i++) {
        if (!pol->tiers[i].equals && pol->tiers[i].min <= v && v <= pol->tiers[i].max)
            return &pol->tiers[i];
    }
    return NULL;
}

/* Resolves the links of task t (type tp, explicit key, payload input, own units) into the
 * result's link table, and writes its display key. Returns 0 or -1 when out of memory. */
int simkeys_resolve(simrun_result *r, sluice_engine *e, const sluice_type_policy *tp,
                    simrun_task *t, const char *xkey, const json_t *input, int64_t units)
{
    simkeys *k = simrun_keys(r);
    char disp[KEY_BUF], buf[KEY_BUF];
    size_t dlen = 0;

    disp[0] = '\0';
    t->links = (uint32_t)r->nlinks;
    t->nlinks = 0;
    for (size_t i = 0; tp && i < tp->nlimits; i++) {
        const sluice_limit_policy *pol = sluice_engine_get_limit(e, tp->limits[i], NULL);
        const sluice_tier *tier;
        const char *key = "";
        size_t keylen = 0;
        int64_t u = units, v;
        long si;

        if (!pol)
            continue;
        tier = choose_tier(pol, input);
        if (pol->key_source == SLUICE_KEY_EXPLICIT && xkey) {
            key = xkey;
            keylen = strlen(xkey);
        } else if (pol->key_source == SLUICE_KEY_PATH &&
                   dotpath_extract(input, pol->key_path, buf, sizeof(buf), &keylen) == 0) {
            key = buf;
        } else {
            keylen = 0;
        }
        if (pol->units_source == SLUICE_UNITS_FIXED)
            u = pol->units_fixed;
        else if (pol->units_source == SLUICE_UNITS_PATH)
            u = dotpath_number(input, pol->units_path, &v) == 0 && v > 0 ? v : 1;
        si = series_get(r, pol, tier, key, keylen);
        if (si < 0 ||
            sim_grow((void **)&r->links, &k->link_cap, r->nlinks + 1, sizeof(*r->links)) != 0)
            return -1;
        r->links[r->nlinks].series = (uint32_t)si;
        r->links[r->nlinks].units = u;
        r->nlinks++;
        t->nlinks++;
        if (keylen > 0 && dlen + keylen + 2 < sizeof(disp)) {
            if (dlen > 0)
                disp[dlen++] = ',';
            memcpy(disp + dlen, key, keylen);
            dlen += keylen;
            disp[dlen] = '\0';
        }
    }
    if (dlen == 0 && xkey) {
        dlen = strlen(xkey) < sizeof(disp) - 1 ? strlen(xkey) : sizeof(disp) - 1;
        memcpy(disp, xkey, dlen);
        disp[dlen] = '\0';
    }
    t->key = sluice_memdup0(disp, dlen);
    return t->key ? 0 : -1;
}

/* Records a grant of task t at now on every series of its chain. */
int simkeys_grant(simrun_result *r, const simrun_task *t, int64_t now)
{
    for (uint32_t i = 0; i < t->nlinks; i++) {
        const simrun_link *l = &r->links[t->links + i];

        if (series_grant(&r->series[l->series], now, l->units) != 0)
            return -1;
    }
    return 0;
}

/* Takes the concurrency units of task t again (a redelivery after its lease expired). */
void simkeys_hold(simrun_result *r, const simrun_task *t, int64_t now)
{
    for (uint32_t i = 0; i < t->nlinks; i++) {
        const simrun_link *l = &r->links[t->links + i];
        simrun_series *s = &r->series[l->series];

        if (s->def.kind == SLUICE_CONCURRENCY) {
            s->held += l->units;
            if (s->held > s->held_peak)
                s->held_peak = s->held;
            held_point(s, now);
        }
    }
}

/* Gives back the concurrency units task t held. */
void simkeys_release(simrun_result *r, const simrun_task *t, int64_t now)
{
    for (uint32_t i = 0; i < t->nlinks; i++) {
        const simrun_link *l = &r->links[t->links + i];
        simrun_series *s = &r->series[l->series];

        if (s->def.kind == SLUICE_CONCURRENCY) {
            s->held = s->held > l->units ? s->held - l->units : 0;
            held_point(s, now);
        }
    }
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
    size_t *ord = sluice_malloc((r->nseries ? r->nseries : 1) * sizeof(*ord));

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
    sluice_free(k->slot);
    k->slot = NULL;
    k->cap = 0;
}
