/* SPDX-License-Identifier: MIT */
/*
 * The timeline picture: a chart description in, the text of one SVG document out.
 *
 * Layout: a heading, then the panels stacked top to bottom, each a plot area with its own y axis
 * and grid on the left and its legend on the right; every panel shares the same time axis, from 0
 * to t_end_ns, with ticks at a "nice" step (1, 2, 5, 10, 15, 30 of a unit) and labels written as
 * "1m30s". Reference lines (limit envelopes) are clipped to the plot area and do not stretch the
 * y axis, so a growing envelope never squashes the data it bounds.
 *
 * The document is self-contained: plain attributes, no CSS, no scripts, generic font families.
 * Text is escaped for XML, and bytes that are not valid UTF-8 (or are control characters) are
 * written as '?', so any key makes a well-formed file. Points that fall on the same pixel column
 * are merged, which keeps the file small when a series has many thousands of grants. Event
 * ticks (SVG_TICKS) stand on the time axis and never scale the y axis.
 */
#include "cli/sim/svg.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "sluice/error.h"

/* ---- Layout (pixels) --------------------------------------------------------------------- */

#define WIDTH        1000.0
#define PLOT_X       72.0  /* left edge of the plot areas */
#define PLOT_W       690.0 /* width of the plot areas */
#define LEGEND_X     790.0 /* left edge of the legends */
#define HEAD_H       78.0  /* heading height */
#define PANEL_TITLE  24.0  /* space above a plot area for its title */
#define PLOT_H_TALL  300.0
#define PLOT_H_SHORT 140.0
#define PANEL_GAP    52.0 /* below a plot area: tick labels and breathing space */
#define FOOT_H       28.0 /* below the last panel: the time axis title */
#define LEGEND_ROW   18.0
#define PAD_X        10.0 /* between the y axis and time 0 */
#define LEGEND_CHARS 26   /* label characters shown before an ellipsis */

#define FONT "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif"

/* Tableau 10: distinct, colour-blind friendly enough, readable on white. */
static const char *const palette[] = {
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac",
};
#define PALETTE_N (sizeof(palette) / sizeof(palette[0]))
#define GREY      "#6b7280"

/* ---- A growing text buffer ---------------------------------------------------------------- */

typedef struct sbuf {
    char *p;    /* the text, NUL-terminated when len > 0 */
    size_t len; /* bytes used, without the NUL */
    size_t cap; /* bytes allocated */
    int failed; /* an allocation failed: everything after it is dropped */
} sbuf;

static int sb_reserve(sbuf *b, size_t more)
{
    size_t want;
    char *np;

    if (b->failed)
        return -1;
    if (b->len + more + 1 <= b->cap)
        return 0;
    want = b->cap ? b->cap : 4096;
    while (want < b->len + more + 1)
        want *= 2;
    np = alloc_realloc(b->p, want);
    if (!np) {
        b->failed = 1;
        return -1;
    }
    b->p = np;
    b->cap = want;
    return 0;
}

static void sb_put(sbuf *b, const char *s, size_t n)
{
    if (sb_reserve(b, n) != 0)
        return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_puts(sbuf *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

__attribute__((format(printf, 2, 3))) static void sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || sb_reserve(b, (size_t)n) != 0)
        return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* Returns the length of the valid UTF-8 sequence at s (at most n bytes), or 0 when the bytes
 * there are not one. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    size_t want;
    uint32_t cp;

    if (s[0] < 0x80)
        return 1;
    if (s[0] >= 0xc2 && s[0] <= 0xdf) {
        want = 2;
        cp = s[0] & 0x1fu;
    } else if (s[0] >= 0xe0 && s[0] <= 0xef) {
        want = 3;
        cp = s[0] & 0x0fu;
    } else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
        want = 4;
        cp = s[0] & 0x07u;
    } else {
        return 0;
    }
    if (n < want)
        return 0;
    for (size_t i = 1; i < want; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3fu);
    }
    if ((want == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (want == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return want;
}

/* Writes s as XML character data, at most max_chars characters (0 = all), ending with an
 * ellipsis when cut. */
static void sb_text(sbuf *b, const char *s, size_t max_chars)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t n = strlen(s), chars = 0;

    for (size_t i = 0; i < n;) {
        size_t l = utf8_len(u + i, n - i);

        if (max_chars > 0 && chars == max_chars) {
            sb_puts(b, "\xe2\x80\xa6");
            return;
        }
        chars++;
        if (l == 0 || (u[i] < 0x20) || u[i] == 0x7f) {
            sb_puts(b, "?");
            i++;
            continue;
        }
        switch (u[i]) {
        case '&':
            sb_puts(b, "&amp;");
            break;
        case '<':
            sb_puts(b, "&lt;");
            break;
        case '>':
            sb_puts(b, "&gt;");
            break;
        case '"':
            sb_puts(b, "&quot;");
            break;
        case '\'':
            sb_puts(b, "&#39;");
            break;
        default:
            sb_put(b, s + i, l);
            break;
        }
        i += l;
    }
}

/* ---- Axes --------------------------------------------------------------------------------- */

#define MS  INT64_C(1000000)
#define SEC INT64_C(1000000000)

/* Steps of the time axis, smallest first. */
static const int64_t time_steps[] = {
    1 * MS,           2 * MS,          5 * MS,          10 * MS,         20 * MS,
    50 * MS,          100 * MS,        200 * MS,        500 * MS,        1 * SEC,
    2 * SEC,          5 * SEC,         10 * SEC,        15 * SEC,        30 * SEC,
    60 * SEC,         120 * SEC,       300 * SEC,       600 * SEC,       900 * SEC,
    1800 * SEC,       3600 * SEC,      7200 * SEC,      3 * 3600 * SEC,  6 * 3600 * SEC,
    12 * 3600 * SEC,  24 * 3600 * SEC, 48 * 3600 * SEC, 7 * 86400 * SEC, 14 * 86400 * SEC,
    30 * 86400 * SEC,
};

/* Returns the smallest time step that puts at most 10 ticks on [0, t_end]. */
static int64_t time_step(int64_t t_end)
{
    size_t n = sizeof(time_steps) / sizeof(time_steps[0]);

    for (size_t i = 0; i < n; i++) {
        if (t_end / time_steps[i] <= 10)
            return time_steps[i];
    }
    return time_steps[n - 1] * (t_end / (time_steps[n - 1] * 10) + 1);
}

void svg_format_time(int64_t t, char *buf, size_t len)
{
    static const struct {
        int64_t ns;
        const char *unit;
    } units[] = {{86400 * SEC, "d"}, {3600 * SEC, "h"}, {60 * SEC, "m"}, {SEC, "s"}, {MS, "ms"}};
    size_t used = 0, parts = 0;

    buf[0] = '\0';
    if (t <= 0) {
        snprintf(buf, len, "0");
        return;
    }
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]) && parts < 2; i++) {
        int64_t q = t / units[i].ns;

        if (q == 0) {
            if (parts > 0)
                break; /* "1h" rather than "1h0m5s" */
            continue;
        }
        t -= q * units[i].ns;
        if (used < len)
            used += (size_t)snprintf(buf + used, len - used, "%lld%s", (long long)q, units[i].unit);
        parts++;
        if (t == 0)
            break;
    }
    if (buf[0] == '\0')
        snprintf(buf, len, "%lldns", (long long)t);
}

/* Returns a "nice" step (1, 2, 2.5 or 5 times a power of ten) for about 5 ticks up to ymax, and
 * sets *top to the axis top: the first tick at or above ymax plus 5% headroom. */
static double value_step(double ymax, double *top)
{
    double raw = ymax / 5.0, mag, step;

    if (raw <= 0)
        raw = 0.2;
    mag = pow(10.0, floor(log10(raw)));
    if (raw / mag <= 1.0)
        step = mag;
    else if (raw / mag <= 2.0)
        step = 2.0 * mag;
    else if (raw / mag <= 2.5 && mag >= 10)
        step = 2.5 * mag; /* 25, 250: never 2.5 for counts */
    else if (raw / mag <= 5.0)
        step = 5.0 * mag;
    else
        step = 10.0 * mag;
    if (ymax >= 1 && step < 1)
        step = 1; /* counts: no fractional ticks */
    *top = ceil(ymax * 1.05 / step) * step;
    if (*top <= 0)
        *top = step;
    return step;
}

/* ---- Drawing ------------------------------------------------------------------------------ */

/* A panel's coordinate system. */
typedef struct frame {
    double x0, y0; /* top-left corner of the plot area */
    double w, h;   /* its size */
    int64_t t_end; /* time at the right edge */
    double top;    /* value at the top edge */
} frame;

static double fx(const frame *f, int64_t t)
{
    if (t < 0)
        t = 0;
    /* Time 0 sits a little right of the y axis, so a burst at 0 is not hidden by the axis. */
    return f->x0 + PAD_X + (f->w - PAD_X) * ((double)t / (double)f->t_end);
}

static double fy(const frame *f, double y)
{
    return f->y0 + f->h - f->h * (y / f->top);
}

static const char *line_color(const svg_line *l, size_t auto_index)
{
    if (l->color == SVG_COLOR_GREY)
        return GREY;
    if (l->color >= 0)
        return palette[(size_t)l->color % PALETTE_N];
    return palette[auto_index % PALETTE_N];
}

/* Writes the path data of a line ("M x y H x V y ..."); for an area, closed down to zero. */
static void path_data(sbuf *b, const frame *f, const svg_line *l)
{
    double cx, cy, x, y;

    cx = round(fx(f, l->pts[0].t_ns) * 10) / 10;
    cy = round(fy(f, l->pts[0].y) * 10) / 10;
    sb_printf(b, "M%.1f %.1f", cx, cy);
    for (size_t i = 1; i < l->n; i++) {
        x = round(fx(f, l->pts[i].t_ns) * 10) / 10;
        y = round(fy(f, l->pts[i].y) * 10) / 10;
        if (l->kind == SVG_LINEAR) {
            if (x != cx || y != cy)
                sb_printf(b, "L%.1f %.1f", x, y);
        } else {
            if (x != cx)
                sb_printf(b, "H%.1f", x);
            if (y != cy)
                sb_printf(b, "V%.1f", y);
        }
        cx = x;
        cy = y;
    }
    if (l->extend && l->kind != SVG_LINEAR) {
        x = f->x0 + f->w;
        if (x != cx)
            sb_printf(b, "H%.1f", x);
        cx = x;
    }
    if (l->kind == SVG_AREA)
        sb_printf(b, "V%.1fH%.1fZ", f->y0 + f->h, round(fx(f, l->pts[0].t_ns) * 10) / 10);
}

static void draw_line(sbuf *b, const frame *f, const svg_line *l, const char *color, size_t clip)
{
    if (l->n == 0)
        return;
    if (l->kind == SVG_TICKS) {
        double prev = -1;

        sb_printf(b, "<path fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" d=\"", color);
        for (size_t i = 0; i < l->n; i++) {
            double x = round(fx(f, l->pts[i].t_ns) * 10) / 10;

            if (x != prev) /* one tick per pixel column */
                sb_printf(b, "M%.1f %.1fv-9", x, f->y0 + f->h);
            prev = x;
        }
        sb_puts(b, "\"/>\n");
        return;
    }
    if (l->kind == SVG_MARKS) {
        sb_printf(b,
                  "<path clip-path=\"url(#clip%zu)\" fill=\"none\" stroke=\"%s\" "
                  "stroke-width=\"1.6\" d=\"",
                  clip, color);
        for (size_t i = 0; i < l->n; i++) {
            double x = fx(f, l->pts[i].t_ns), y = fy(f, l->pts[i].y);

            sb_printf(b, "M%.1f %.1fl7 7m0 -7l-7 7", x - 3.5, y - 3.5);
        }
        sb_puts(b, "\"/>\n");
        return;
    }
    if (l->kind == SVG_AREA) {
        sb_printf(b, "<path clip-path=\"url(#clip%zu)\" fill=\"%s\" fill-opacity=\"0.18\" d=\"",
                  clip, color);
        path_data(b, f, l);
        sb_puts(b, "\"/>\n");
    }
    sb_printf(b,
              "<path clip-path=\"url(#clip%zu)\" fill=\"none\" stroke=\"%s\" stroke-width=\"%s\" "
              "stroke-linejoin=\"round\"%s d=\"",
              clip, color, l->dashed ? "1.5" : "2", l->dashed ? " stroke-dasharray=\"6 4\"" : "");
    if (l->kind == SVG_AREA) {
        svg_line outline = *l;

        outline.kind = SVG_STEP;
        path_data(b, f, &outline);
    } else {
        path_data(b, f, l);
    }
    if (l->tooltip) {
        sb_puts(b, "\"><title>");
        sb_text(b, l->tooltip, 0);
        sb_puts(b, "</title></path>\n");
    } else {
        sb_puts(b, "\"/>\n");
    }
}

/* Dots where a step line rises, so that a burst at one instant shows as one dot. */
static void draw_markers(sbuf *b, const frame *f, const svg_line *l, const char *color, size_t clip)
{
    size_t rises = 0;

    for (size_t i = 1; i < l->n; i++)
        rises += l->pts[i].y > l->pts[i - 1].y;
    if (rises == 0 || rises > SVG_MARKERS_MAX)
        return;
    sb_printf(b,
              "<g clip-path=\"url(#clip%zu)\" fill=\"%s\" stroke=\"#ffffff\" "
              "stroke-width=\"1\">\n",
              clip, color);
    for (size_t i = 1; i < l->n; i++) {
        if (l->pts[i].y > l->pts[i - 1].y)
            sb_printf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\"/>\n", fx(f, l->pts[i].t_ns),
                      fy(f, l->pts[i].y));
    }
    sb_puts(b, "</g>\n");
}

static void draw_legend(sbuf *b, const svg_panel *p, double x, double y)
{
    size_t shown = 0, hidden = 0, auto_index = 0;

    for (size_t i = 0; i < p->nlines; i++) {
        const svg_line *l = &p->lines[i];
        const char *color = line_color(l, auto_index);
        double ry;

        if (l->color == SVG_COLOR_AUTO)
            auto_index++;
        if (!l->label)
            continue;
        if (shown == SVG_LEGEND_MAX) {
            hidden++;
            continue;
        }
        ry = y + (double)shown * LEGEND_ROW;
        if (l->kind == SVG_TICKS)
            sb_printf(b,
                      "<path fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" "
                      "d=\"M%.1f %.1fv-9m6 9v-9m6 9v-9\"/>\n",
                      color, x + 5, ry + 4.5);
        else if (l->kind == SVG_MARKS)
            sb_printf(b,
                      "<path fill=\"none\" stroke=\"%s\" stroke-width=\"1.6\" "
                      "d=\"M%.1f %.1fl7 7m0 -7l-7 7\"/>\n",
                      color, x + 7.5, ry - 3.5);
        else if (l->kind == SVG_AREA)
            sb_printf(b,
                      "<rect x=\"%.1f\" y=\"%.1f\" width=\"22\" height=\"10\" fill=\"%s\" "
                      "fill-opacity=\"0.18\" stroke=\"%s\" stroke-width=\"1.5\"/>\n",
                      x, ry - 5, color, color);
        else
            sb_printf(b,
                      "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                      "stroke-width=\"%s\"%s/>\n",
                      x, ry, x + 22, ry, color, l->dashed ? "1.5" : "2.5",
                      l->dashed ? " stroke-dasharray=\"6 4\"" : "");
        sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#1f2937\">", x + 30, ry + 4);
        sb_text(b, l->label, LEGEND_CHARS);
        sb_puts(b, "</text>\n");
        shown++;
    }
    if (hidden > 0)
        sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" fill=\"%s\">+%zu more</text>\n", x + 30,
                  y + (double)shown * LEGEND_ROW + 4, GREY, hidden);
}

static void draw_panel(sbuf *b, const svg_panel *p, size_t index, double top_y, int64_t t_end,
                       int last)
{
    frame f;
    double ymax = 0, step, tick_y;
    int64_t tstep;
    size_t auto_index = 0;
    char label[32];

    f.x0 = PLOT_X;
    f.y0 = top_y + PANEL_TITLE;
    f.w = PLOT_W;
    f.h = p->tall ? PLOT_H_TALL : PLOT_H_SHORT;
    f.t_end = t_end;
    for (size_t i = 0; i < p->nlines; i++) {
        if (p->lines[i].reference || p->lines[i].kind == SVG_TICKS)
            continue;
        for (size_t j = 0; j < p->lines[i].n; j++)
            ymax = p->lines[i].pts[j].y > ymax ? p->lines[i].pts[j].y : ymax;
    }
    if (ymax < 1)
        ymax = 1;
    /* A reference line that starts not far above the data (a burst) is worth showing whole. */
    {
        double ref = ymax;

        for (size_t i = 0; i < p->nlines; i++) {
            if (p->lines[i].reference && p->lines[i].n > 0 && p->lines[i].pts[0].y > ref &&
                p->lines[i].pts[0].y <= 2 * ymax)
                ref = p->lines[i].pts[0].y;
        }
        ymax = ref;
    }
    step = value_step(ymax, &f.top);

    sb_printf(b,
              "<clipPath id=\"clip%zu\"><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
              "height=\"%.1f\"/></clipPath>\n",
              index, f.x0, f.y0 - 2, f.w + 2, f.h + 4);
    /* Title. */
    sb_printf(b,
              "<text x=\"%.1f\" y=\"%.1f\" font-size=\"14\" font-weight=\"600\" "
              "fill=\"#111827\">",
              f.x0, top_y + 14);
    sb_text(b, p->title ? p->title : "", 0);
    sb_puts(b, "</text>\n");
    /* Plot background and grid. */
    sb_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#f9fafb\"/>\n",
              f.x0, f.y0, f.w, f.h);
    for (double v = 0; v <= f.top + step / 1000; v += step) {
        tick_y = fy(&f, v);
        sb_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\"/>\n",
                  f.x0, tick_y, f.x0 + f.w, tick_y, v == 0 ? "#9ca3af" : "#e5e7eb");
        snprintf(label, sizeof(label), "%g", v);
        sb_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#4b5563\">%s</text>\n",
                  f.x0 - 8, tick_y + 4, label);
    }
    tstep = time_step(t_end);
    for (int64_t t = 0; t <= t_end; t += tstep) {
        double x = fx(&f, t);

        sb_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\"/>\n", x,
                  f.y0, x, f.y0 + f.h, "#eef0f3");
        sb_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#9ca3af\"/>\n",
                  x, f.y0 + f.h, x, f.y0 + f.h + 5);
        svg_format_time(t, label, sizeof(label));
        sb_printf(b,
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#4b5563\">%s</text>\n",
                  x, f.y0 + f.h + 19, label);
        if (t > INT64_MAX - tstep)
            break;
    }
    /* The y axis title, turned to run upwards along the axis. */
    sb_printf(b,
              "<text transform=\"translate(%.1f %.1f) rotate(-90)\" text-anchor=\"middle\" "
              "fill=\"#374151\">",
              18.0, f.y0 + f.h / 2);
    sb_text(b, p->y_label ? p->y_label : "", 0);
    sb_puts(b, "</text>\n");
    /* Lines: reference lines first, so the data is drawn over them. */
    for (int pass = 0; pass < 2; pass++) {
        auto_index = 0;
        for (size_t i = 0; i < p->nlines; i++) {
            const svg_line *l = &p->lines[i];
            const char *color = line_color(l, auto_index);

            if (l->color == SVG_COLOR_AUTO)
                auto_index++;
            if ((pass == 0) == (l->reference != 0)) {
                draw_line(b, &f, l, color, index);
                if (l->markers && l->kind == SVG_STEP)
                    draw_markers(b, &f, l, color, index);
            }
        }
    }
    sb_printf(b,
              "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
              "stroke=\"#d1d5db\"/>\n",
              f.x0, f.y0, f.w, f.h);
    draw_legend(b, p, LEGEND_X, f.y0 + 8);
    if (last)
        sb_printf(b,
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#374151\">time "
                  "(simulated)</text>\n",
                  f.x0 + f.w / 2, f.y0 + f.h + 40);
}

int svg_render(const svg_chart *chart, char **out, size_t *len)
{
    sbuf b = {0};
    double height, y;
    int64_t t_end;

    if (out)
        *out = NULL;
    if (len)
        *len = 0;
    if (!chart || !out || !len || (chart->npanels > 0 && !chart->panels))
        return SLUICE_EINVAL;
    for (size_t i = 0; i < chart->npanels; i++) {
        if (chart->panels[i].nlines > 0 && !chart->panels[i].lines)
            return SLUICE_EINVAL;
        for (size_t j = 0; j < chart->panels[i].nlines; j++) {
            if (chart->panels[i].lines[j].n > 0 && !chart->panels[i].lines[j].pts)
                return SLUICE_EINVAL;
        }
    }
    t_end = chart->t_end_ns > 0 ? chart->t_end_ns : SEC;
    {
        /* End the axis on a tick. */
        int64_t step = time_step(t_end);

        if (t_end % step != 0 && t_end / step < INT64_MAX / step - 1)
            t_end = (t_end / step + 1) * step;
    }

    height = HEAD_H + FOOT_H;
    for (size_t i = 0; i < chart->npanels; i++)
        height += PANEL_TITLE + (chart->panels[i].tall ? PLOT_H_TALL : PLOT_H_SHORT) + PANEL_GAP;

    sb_printf(&b,
              "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
              "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
              "viewBox=\"0 0 %.0f %.0f\" font-family=\"%s\" font-size=\"12\">\n",
              WIDTH, height, WIDTH, height, FONT);
    sb_puts(&b, "<title>");
    sb_text(&b, chart->title ? chart->title : "sluice simulation", 0);
    sb_puts(&b, "</title>\n");
    sb_printf(&b, "<rect width=\"%.0f\" height=\"%.0f\" fill=\"#ffffff\"/>\n", WIDTH, height);
    sb_printf(&b,
              "<text x=\"%.1f\" y=\"34\" font-size=\"20\" font-weight=\"700\" "
              "fill=\"#111827\">",
              PLOT_X - 54);
    sb_text(&b, chart->title ? chart->title : "sluice simulation", 0);
    sb_puts(&b, "</text>\n");
    if (chart->subtitle) {
        sb_printf(&b, "<text x=\"%.1f\" y=\"56\" font-size=\"13\" fill=\"#4b5563\">", PLOT_X - 54);
        sb_text(&b, chart->subtitle, 0);
        sb_puts(&b, "</text>\n");
    }
    y = HEAD_H;
    for (size_t i = 0; i < chart->npanels; i++) {
        const svg_panel *p = &chart->panels[i];

        draw_panel(&b, p, i, y, t_end, i + 1 == chart->npanels);
        y += PANEL_TITLE + (p->tall ? PLOT_H_TALL : PLOT_H_SHORT) + PANEL_GAP;
    }
    sb_puts(&b, "</svg>\n");
    if (b.failed) {
        alloc_free(b.p);
        return SLUICE_ENOMEM;
    }
    *out = b.p;
    *len = b.len;
    return 0;
}
