/* SPDX-License-Identifier: MIT */
/*
 * The timeline picture of a simulation (see chart.h): a simrun_result turned into the panels
 * and lines of an svg_chart, which svg.c renders.
 *
 * One panel per limit, in configuration order: the busiest keys' cumulative grants (units held
 * over time for a concurrency limit), each tier's envelope dashed in the tier's colour, and the
 * rejections as crosses on their key's line; after the panel of an adaptive (AIMD) rate limit, a
 * short panel of its keys' effective rates in permits per the limit's period (its own y axis,
 * since the limit panel counts grants), the upstream's hidden rate dashed in the same unit and
 * the upstream's 429s as ticks on its time axis; then one panel of the engine's depth (parked,
 * queued, running; it carries the 429 ticks when no panel is adaptive). Every string and point
 * array the chart borrows is kept in one chart_mem and freed together once the document is
 * rendered.
 */
#include "cli/sim/chart.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli/sim/keys.h"
#include "cli/sim/svg.h"
#include "base/alloc.h"
#include "sluice/error.h"
#include "sluice/spec.h"

#define CHART_KEYS 6 /* keys drawn per limit panel */

static const char *chart_dur(int64_t ns, char *buf, size_t len)
{
    if (sluice_spec_format_duration(ns, buf, len) != 0)
        snprintf(buf, len, "?");
    return buf;
}

/* The limit's one-line spec, e.g. "rate=15/1m". */
static const char *chart_spec(const sluice_limit_def *def, char *buf, size_t len)
{
    if (sluice_spec_format_limit(def, buf, len) != 0)
        snprintf(buf, len, "%s", sluice_limit_kind_name(def->kind));
    return buf;
}

/* Everything a chart borrows, freed together. */
typedef struct chart_mem {
    svg_point **pts;
    size_t npts, cap;
    char **strs;
    size_t nstrs, scap;
} chart_mem;

static svg_point *mem_points(chart_mem *m, size_t n)
{
    svg_point *p;

    if (sim_grow((void **)&m->pts, &m->cap, m->npts + 1, sizeof(*m->pts)) != 0)
        return NULL;
    p = alloc_malloc((n ? n : 1) * sizeof(*p));
    if (p)
        m->pts[m->npts++] = p;
    return p;
}

static char *mem_printf(chart_mem *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static char *mem_printf(chart_mem *m, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    char *s;

    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (sim_grow((void **)&m->strs, &m->scap, m->nstrs + 1, sizeof(*m->strs)) != 0)
        return NULL;
    s = alloc_memdup0(buf, strlen(buf));
    if (s)
        m->strs[m->nstrs++] = s;
    return s;
}

static void mem_free(chart_mem *m)
{
    for (size_t i = 0; i < m->npts; i++)
        alloc_free(m->pts[i]);
    for (size_t i = 0; i < m->nstrs; i++)
        alloc_free(m->strs[i]);
    alloc_free(m->pts);
    alloc_free(m->strs);
}

/* The step line of a series from (0, 0): the units granted so far, or for a concurrency limit
 * the units held at each moment. */
static int series_line(chart_mem *m, const simrun_series *s, svg_line *l, const char *label)
{
    int held = s->def.kind == SLUICE_CONCURRENCY;
    size_t count = held ? s->nheld : s->n, n = 0;
    svg_point *p = mem_points(m, count + 1);

    if (!p)
        return -1;
    p[n++] = (svg_point){0, 0};
    for (size_t i = 0; i < count; i++) {
        int64_t t = held ? s->held_t[i] : s->t_ns[i];
        double y = (double)(held ? s->held_v[i] : s->cum[i]);

        if (n > 1 && p[n - 1].t_ns == t)
            n--;
        p[n++] = (svg_point){t, y};
    }
    memset(l, 0, sizeof(*l));
    l->label = label;
    l->pts = p;
    l->n = n;
    l->kind = SVG_STEP;
    l->color = SVG_COLOR_AUTO;
    l->extend = 1;
    l->markers = !held;
    return 0;
}

/* The envelope of def over [0, span]: the most units any key can have been granted by time t.
 * For a concurrency limit: the units it lets be held at once. Returns 1 when a line was made, 0
 * for kinds without one (monthly quotas), -1 when out of memory. */
static int envelope(chart_mem *m, const sluice_limit_def *def, int64_t span, svg_line *l,
                    const char *prefix, int color)
{
    char d[32];
    svg_point *p;

    memset(l, 0, sizeof(*l));
    if (def->kind == SLUICE_RATE) {
        int64_t burst = def->burst ? def->burst : def->limit;
        double t_ns = (double)def->period_ns / (double)def->limit;
        double start = def->start_empty ? 1.0 : (double)burst;

        p = mem_points(m, 2);
        if (!p)
            return -1;
        p[0] = (svg_point){0, start};
        p[1] = (svg_point){span, start + (double)span / t_ns};
        l->n = 2;
        l->kind = SVG_LINEAR;
        if (def->start_empty)
            l->label = mem_printf(m, "%s1 + t/%s (start empty)", prefix,
                                  chart_dur((int64_t)t_ns, d, sizeof(d)));
        else
            l->label = mem_printf(m, "%sburst %" PRId64 " + t/%s", prefix, burst,
                                  chart_dur((int64_t)t_ns, d, sizeof(d)));
    } else if (def->kind == SLUICE_WINDOW || def->kind == SLUICE_SLIDING ||
               (def->kind == SLUICE_QUOTA && def->calendar == SLUICE_CAL_DAY)) {
        int64_t w = def->kind == SLUICE_QUOTA ? 86400 * SLUICE_NS_PER_SEC : def->period_ns;
        size_t windows = (size_t)(span / w) + 1, n = 0;

        if (windows > 2000) {
            /* Too many steps to draw: their straight upper bound. */
            p = mem_points(m, 2);
            if (!p)
                return -1;
            p[0] = (svg_point){0, (double)def->limit};
            p[1] = (svg_point){span, (double)def->limit * (1.0 + (double)span / (double)w)};
            n = 2;
            l->kind = SVG_LINEAR;
        } else {
            p = mem_points(m, windows + 1);
            if (!p)
                return -1;
            for (size_t k = 0; k < windows; k++)
                p[n++] = (svg_point){(int64_t)k * w, (double)def->limit * (double)(k + 1)};
            l->kind = SVG_STEP;
            l->extend = 1;
        }
        l->n = n;
        l->label = mem_printf(m, "%s%" PRId64 " per %s%s", prefix, def->limit,
                              def->kind == SLUICE_QUOTA ? "day" : chart_dur(w, d, sizeof(d)),
                              def->kind == SLUICE_WINDOW ? " window" : "");
    } else if (def->kind == SLUICE_CONCURRENCY) {
        p = mem_points(m, 1);
        if (!p)
            return -1;
        p[0] = (svg_point){0, (double)def->limit};
        l->n = 1;
        l->kind = SVG_STEP;
        l->extend = 1;
        l->label = mem_printf(m, "%s%" PRId64 " at once", prefix, def->limit);
    } else if (def->kind == SLUICE_QUOTA && def->calendar == SLUICE_CAL_NONE) {
        p = mem_points(m, 1);
        if (!p)
            return -1;
        p[0] = (svg_point){0, (double)def->limit};
        l->n = 1;
        l->kind = SVG_STEP;
        l->extend = 1;
        l->label = mem_printf(m, "%sbudget %" PRId64, prefix, def->limit);
    } else {
        return 0;
    }
    if (!l->label)
        return -1;
    l->pts = p;
    l->dashed = 1;
    l->reference = 1;
    l->color = color;
    return 1;
}

/* Adds the panel of limit `name` (series ord[from..to)) to the chart arrays. */
static int limit_panel(chart_mem *m, const simrun_result *r, const size_t *ord, size_t from,
                       size_t to, svg_panel *panel, svg_line **lines_out)
{
    const simrun_series *s0 = &r->series[ord[from]];
    const sluice_limit_policy *pol = sluice_config_find_limit(r->cfg, s0->limit);
    size_t nkeys = to - from, drawn = 0, nl = 0;
    int weighted = 0, rc;
    svg_line *lines;
    char sp[SLUICE_SPEC_MAX_LEN];
    const char *key_text = "";

    /* Most CHART_KEYS keys, the busiest of each tier first, plus an envelope per tier. */
    lines = alloc_calloc(3 * nkeys + 1, sizeof(*lines));
    if (!lines)
        return -1;
    *lines_out = lines;
    for (size_t i = from; i < to; i++) {
        const simrun_series *s = &r->series[ord[i]];

        if (i == from ||
            strcmp(s->tier ? s->tier : "",
                   r->series[ord[i - 1]].tier ? r->series[ord[i - 1]].tier : "") != 0) {
            int color = s->tier ? simkeys_tier_rank(pol, s->tier) % 10 : SVG_COLOR_GREY;
            const char *prefix = s->tier ? mem_printf(m, "%s: ", s->tier) : "limit: ";

            if (!prefix)
                return -1;
            /* Past the end: the axis runs on to its next tick, and the plot clips it. */
            rc = envelope(m, &s->def, 2 * r->span_ns + 1, &lines[nl], prefix, color);
            if (rc < 0)
                return -1;
            nl += (size_t)rc;
        }
    }
    for (size_t i = from; i < to && drawn < CHART_KEYS; i++) {
        const simrun_series *s = &r->series[ord[i]];
        const char *label;

        if (s->n == 0)
            continue;
        if (s->tier)
            label = mem_printf(m, "%s%s%s", s->tier, s->key[0] ? " \xc2\xb7 " : "", s->key);
        else
            label = mem_printf(m, "%s", s->key[0] ? s->key : "(global)");
        if (!label || series_line(m, s, &lines[nl], label) != 0)
            return -1;
        if (s->tier)
            lines[nl].color =
                simkeys_tier_rank(pol, s->tier) % 10; /* a tier's keys share its colour */
        weighted |= s->weighted;
        nl++;
        drawn++;
        if (s->nrej > 0) {
            svg_point *p = mem_points(m, s->nrej);
            size_t j = 0;

            if (!p)
                return -1;
            /* A rejection drawn at the key's count at that moment: on its line. */
            for (size_t k = 0; k < s->nrej; k++) {
                while (j < s->n && s->t_ns[j] <= s->rej_ns[k])
                    j++;
                p[k] = (svg_point){s->rej_ns[k], j ? (double)s->cum[j - 1] : 0.0};
            }
            lines[nl] =
                (svg_line){.label = mem_printf(m, "%s rejected (%zu)",
                                               s->key[0] ? s->key : "(global)", s->rejected),
                           .pts = p,
                           .n = s->nrej,
                           .kind = SVG_MARKS,
                           .color = 2};
            if (!lines[nl].label)
                return -1;
            nl++;
        }
    }
    if (drawn > 4) {
        /* Dots on many lines are noise. */
        for (size_t i = 0; i < nl; i++)
            lines[i].markers = 0;
    }
    if (pol && pol->key_source == SLUICE_KEY_EXPLICIT)
        key_text = ", key explicit";
    else if (pol && pol->key_source == SLUICE_KEY_PATH)
        key_text = mem_printf(m, ", key %s", pol->key_path);
    if (!key_text)
        return -1;
    if (pol && pol->ntiers > 0)
        panel->title =
            mem_printf(m, "limit %s \xe2\x80\x94 %zu tiers on %s%s%s", s0->limit, pol->ntiers,
                       pol->tier_path ? pol->tier_path : "?",
                       pol->overflow == SLUICE_OVERFLOW_REJECT ? ", reject" : "", key_text);
    else
        panel->title = mem_printf(
            m, "limit %s \xe2\x80\x94 %s%s%s%s", s0->limit, chart_spec(&s0->def, sp, sizeof(sp)),
            s0->overflow == SLUICE_OVERFLOW_REJECT ? ", overflow reject" : "", key_text,
            nkeys > drawn ? mem_printf(m, " (%zu busiest of %zu keys)", drawn, nkeys) : "");
    if (!panel->title)
        return -1;
    if (s0->def.kind == SLUICE_CONCURRENCY)
        panel->y_label = weighted ? "units held" : "tasks running";
    else
        panel->y_label = weighted ? "units granted (cumulative)" : "tasks granted (cumulative)";
    panel->lines = lines;
    panel->nlines = nl;
    panel->tall = 1;
    return 0;
}

static int series_adaptive(const simrun_series *s)
{
    return s->def.kind == SLUICE_RATE && s->def.decrease_den > 0;
}

/* The upstream's 429s as ticks on the time axis, or 0 when it answered none. */
static int ticks_429(chart_mem *m, const simrun_result *r, svg_line *l)
{
    svg_point *p;

    if (r->n429 == 0)
        return 0;
    p = mem_points(m, r->n429);
    if (!p)
        return -1;
    for (size_t i = 0; i < r->n429; i++)
        p[i] = (svg_point){r->u429_ns[i], 0};
    *l = (svg_line){.label = mem_printf(m, "upstream 429 (%zu)", r->n429),
                    .pts = p,
                    .n = r->n429,
                    .kind = SVG_TICKS,
                    .color = 2};
    return l->label ? 1 : -1;
}

/* The words of a key's rate line, as the text report says them: the configured rate, the rate
 * after each of the first RATE_TIP_POINTS 429s, and at the end ("acme: 20/1s; after each 429:
 * 10/1s at 0.55s, ...; at the end 4/1s"). */
#define RATE_TIP_POINTS 12

static char *rate_tooltip(chart_mem *m, const simrun_series *s, const char *per)
{
    char buf[400], t[32];
    size_t used;

    used = (size_t)snprintf(buf, sizeof buf, "%s: %" PRId64 "/%s", s->key[0] ? s->key : "(global)",
                            s->def.limit, per);
    for (size_t k = 0; k < s->nrate && k < RATE_TIP_POINTS && used < sizeof buf; k++) {
        int64_t ms = (s->rate_t[k] + 500000) / 1000000; /* to the ms, as the report rounds */

        snprintf(t, sizeof t, "%" PRId64 ".%03" PRId64, ms / 1000, ms % 1000);
        /* trailing zeros dropped, as the report writes it: "0.55", "24" */
        for (size_t e = strlen(t); e > 0 && t[e - 1] == '0'; e--)
            t[e - 1] = '\0';
        if (t[strlen(t) - 1] == '.')
            t[strlen(t) - 1] = '\0';
        used += (size_t)snprintf(buf + used, sizeof buf - used, "%s%" PRId64 "/%s at %ss",
                                 k == 0 ? "; after each 429: " : ", ", s->rate_v[k], per, t);
    }
    if (s->nrate > RATE_TIP_POINTS && used < sizeof buf)
        used += (size_t)snprintf(buf + used, sizeof buf - used, ", ... (%zu more)",
                                 s->nrate - RATE_TIP_POINTS);
    if (used < sizeof buf)
        snprintf(buf + used, sizeof buf - used, "; at the end %" PRId64 "/%s", s->rate_end, per);
    return mem_printf(m, "%s", buf);
}

/* Adds the panel of the effective rates of limit `name`'s adaptive keys (series ord[from..to)),
 * when it has any: one step line per key, from the configured rate at 0 to the rate after each
 * 429 (the points the engine recorded) and the rate at the end; the upstream's hidden rate
 * converted to the limit's period; the 429 ticks. Returns 1 when a panel was added, 0 when the
 * limit has no adaptive key, -1 when out of memory. */
static int rate_panel(chart_mem *m, const simrun_result *r, const size_t *ord, size_t from,
                      size_t to, svg_panel *panel, svg_line **lines_out)
{
    const simrun_series *s0 = NULL;
    size_t nl = 0, drawn = 0, nkeys = 0;
    svg_line *lines;
    char per[32];
    int rc;

    for (size_t i = from; i < to; i++) {
        if (series_adaptive(&r->series[ord[i]])) {
            s0 = s0 ? s0 : &r->series[ord[i]];
            nkeys++;
        }
    }
    if (!s0)
        return 0;
    lines = alloc_calloc(CHART_KEYS + 2, sizeof(*lines));
    if (!lines)
        return -1;
    *lines_out = lines;
    chart_dur(s0->def.period_ns, per, sizeof(per));
    for (size_t i = from; i < to && drawn < CHART_KEYS; i++) {
        const simrun_series *s = &r->series[ord[i]];
        svg_point *p;
        size_t n = 0;
        char *tip;

        if (!series_adaptive(s))
            continue;
        p = mem_points(m, s->neff + 2);
        if (!p)
            return -1;
        p[n++] = (svg_point){0, (double)s->def.limit};
        for (size_t k = 0; k < s->neff; k++) {
            if (p[n - 1].t_ns == s->eff_t[k])
                n--; /* a change at time 0 */
            p[n++] = (svg_point){s->eff_t[k], (double)s->eff_v[k]};
        }
        if (r->end_ns > p[n - 1].t_ns)
            p[n++] = (svg_point){r->end_ns, (double)s->rate_end};
        else
            p[n - 1].y = (double)s->rate_end;
        tip = rate_tooltip(m, s, per);
        lines[nl] = (svg_line){.label = mem_printf(m, "%s rate", s->key[0] ? s->key : "(global)"),
                               .pts = p,
                               .n = n,
                               .kind = SVG_STEP,
                               .color = SVG_COLOR_AUTO,
                               .extend = 1,
                               .tooltip = tip};
        if (!lines[nl].label || !tip)
            return -1;
        nl++;
        drawn++;
    }
    if (r->sc->upstream_permits > 0 && r->sc->upstream_period_ns > 0) {
        double hidden = (double)r->sc->upstream_permits * (double)s0->def.period_ns /
                        (double)r->sc->upstream_period_ns;
        svg_point *p = mem_points(m, 1);
        char up[32];

        if (!p)
            return -1;
        p[0] = (svg_point){0, hidden};
        lines[nl] =
            (svg_line){.label = mem_printf(m, "hidden rate %" PRId64 "/%s", r->sc->upstream_permits,
                                           chart_dur(r->sc->upstream_period_ns, up, sizeof(up))),
                       .pts = p,
                       .n = 1,
                       .kind = SVG_STEP,
                       .dashed = 1,
                       .color = SVG_COLOR_GREY,
                       .extend = 1,
                       .tooltip = mem_printf(m, "hidden rate %g/%s", hidden, per)};
        if (!lines[nl].label || !lines[nl].tooltip)
            return -1;
        nl++;
    }
    rc = ticks_429(m, r, &lines[nl]);
    if (rc < 0)
        return -1;
    nl += (size_t)rc;
    panel->title =
        mem_printf(m, "adaptive rate of %s%s", s0->limit,
                   nkeys > drawn ? mem_printf(m, " (%zu of %zu keys)", drawn, nkeys) : "");
    panel->y_label = mem_printf(m, "permits per %s", per);
    if (!panel->title || !panel->y_label)
        return -1;
    panel->lines = lines;
    panel->nlines = nl;
    panel->tall = 0;
    return 1;
}

int simchart_svg(const simrun_result *r, const char *file, char **svg, size_t *len)
{
    chart_mem m;
    svg_panel *panels = NULL;
    svg_line **owned = NULL, depth[4];
    size_t np = 0, *ord = NULL, nown = 0, peak = 0, done = 0, ndepth = 3, nrate = 0;
    svg_point *pk, *qu, *ru;
    svg_chart chart;
    int rc = SLUICE_ENOMEM;

    *svg = NULL;
    *len = 0;
    memset(&m, 0, sizeof(m));
    ord = simkeys_order(r);
    panels = alloc_calloc(2 * r->nseries + 2, sizeof(*panels));
    owned = alloc_calloc(2 * r->nseries + 2, sizeof(*owned));
    if (!ord || !panels || !owned)
        goto out;
    for (size_t i = 0; i < r->nseries;) {
        size_t j = i + 1;

        while (j < r->nseries && strcmp(r->series[ord[j]].limit, r->series[ord[i]].limit) == 0)
            j++;
        if (limit_panel(&m, r, ord, i, j, &panels[np], &owned[nown++]) != 0)
            goto out;
        np++;
        rc = rate_panel(&m, r, ord, i, j, &panels[np], &owned[nown++]);
        if (rc < 0) {
            rc = SLUICE_ENOMEM;
            goto out;
        }
        np += (size_t)rc;
        nrate += (size_t)rc;
        rc = SLUICE_ENOMEM;
        i = j;
    }
    /* The depth panel: parked (the point of it), queued and running. */
    pk = mem_points(&m, r->nsamples + 1);
    qu = mem_points(&m, r->nsamples + 1);
    ru = mem_points(&m, r->nsamples + 1);
    if (!pk || !qu || !ru)
        goto out;
    for (size_t i = 0; i < r->nsamples; i++) {
        const simrun_sample *s = &r->samples[i];

        pk[i] = (svg_point){s->t_ns, (double)s->parked};
        qu[i] = (svg_point){s->t_ns, (double)(s->queued + s->delayed)};
        ru[i] = (svg_point){s->t_ns, (double)s->running};
        if (s->parked > peak)
            peak = s->parked;
    }
    for (size_t i = 0; i < r->ntasks; i++)
        done += r->tasks[i].outcome == SIMRUN_DONE;
    memset(depth, 0, sizeof(depth));
    depth[0] = (svg_line){
        .label = "parked", .pts = pk, .n = r->nsamples, .kind = SVG_AREA, .color = 2, .extend = 1};
    depth[1] = (svg_line){
        .label = "queued", .pts = qu, .n = r->nsamples, .kind = SVG_STEP, .color = 5, .extend = 1};
    depth[2] = (svg_line){
        .label = "running", .pts = ru, .n = r->nsamples, .kind = SVG_STEP, .color = 0, .extend = 1};
    if (nrate == 0) {
        /* No rate panel to carry the upstream's 429s: they stand on this panel's time axis. */
        int t = ticks_429(&m, r, &depth[3]);

        if (t < 0)
            goto out;
        ndepth += (size_t)t;
    }
    panels[np].title = mem_printf(&m, "tasks waiting and running (parked peak %zu)", peak);
    if (!panels[np].title)
        goto out;
    panels[np].y_label = "tasks";
    panels[np].lines = depth;
    panels[np].nlines = ndepth;
    panels[np].tall = 0;
    np++;

    memset(&chart, 0, sizeof(chart));
    chart.title = r->sc->title ? r->sc->title : file;
    chart.subtitle = mem_printf(
        &m, "%s \xc2\xb7 %zu tasks, %zu done \xc2\xb7 seed %" PRIu64 " \xc2\xb7 sluice simulate",
        file, r->ntasks, done, r->sc->seed);
    if (!chart.subtitle)
        goto out;
    chart.t_end_ns = r->span_ns > 0 ? r->span_ns : SLUICE_NS_PER_SEC;
    chart.panels = panels;
    chart.npanels = np;
    rc = svg_render(&chart, svg, len);
out:
    for (size_t i = 0; i < nown; i++)
        alloc_free(owned[i]);
    alloc_free(owned);
    alloc_free(panels);
    alloc_free(ord);
    mem_free(&m);
    return rc;
}
