/* SPDX-License-Identifier: MIT */
/*
 * The timeline picture of `sluice simulate SCENARIO.yaml --svg FILE`.
 *
 * svg_render() turns a chart description (panels stacked over one shared time axis, each holding
 * lines of points) into the text of a self-contained SVG document: no scripts, no external fonts
 * or stylesheets, so the file can be opened anywhere or embedded in a page. It knows nothing
 * about limits or engines: the caller (simrun) decides which series go into which panel.
 *
 * Pure: no I/O, no global state; the one growing buffer goes through alloc_realloc.
 */
#ifndef SLUICE_CLI_SVG_H
#define SLUICE_CLI_SVG_H

#include <stddef.h>
#include <stdint.h>

/* One point of a line: a time offset from time 0 and a value. */
typedef struct svg_point {
    int64_t t_ns; /* offset from time 0, >= 0 */
    double y;     /* value, >= 0 */
} svg_point;

/* How a line joins its points. */
typedef enum svg_line_kind {
    SVG_STEP = 0, /* a value holds until the next point, then jumps (a counter) */
    SVG_LINEAR,   /* straight segments between points (an envelope such as burst + t/T) */
    SVG_AREA,     /* as SVG_STEP, with the area under it filled (a depth) */
    SVG_MARKS,    /* no line: a cross at each point (events such as rejections) */
    SVG_TICKS,    /* no line: a short tick up from the time axis at each point's t_ns (events
                   * such as an upstream's 429s); y is ignored and does not scale the axis */
} svg_line_kind;

/* Colour of a line: an index into the palette, or grey for reference lines. */
#define SVG_COLOR_AUTO (-1) /* the next palette colour of its panel */
#define SVG_COLOR_GREY (-2) /* a neutral grey */

/* One line of a panel. Borrowed pointers, valid during svg_render(). */
typedef struct svg_line {
    const char *label; /* legend text; NULL keeps it out of the legend */
    const svg_point *pts;
    size_t n; /* points, ordered by t_ns */
    svg_line_kind kind;
    int dashed;          /* 1 for a dashed stroke (limits and envelopes) */
    int color;           /* palette index >= 0, SVG_COLOR_AUTO or SVG_COLOR_GREY */
    int reference;       /* 1: drawn, but not used to scale the y axis (clipped at the top) */
    int extend;          /* 1: a step line's last value is held to the end of the time axis */
    int markers;         /* 1: a dot where a step line rises (each grant), when there are few */
    const char *tooltip; /* NULL, or a <title> for the line's path: its values in words, which
                          * viewers show on hover and scripts can read */
} svg_line;

/* One panel: a plot area with its own y axis and legend. */
typedef struct svg_panel {
    const char *title;   /* shown above the plot area */
    const char *y_label; /* the y axis title */
    const svg_line *lines;
    size_t nlines;
    int tall; /* 1 for a tall panel (the main one), 0 for a short one */
} svg_panel;

/* The whole picture. */
typedef struct svg_chart {
    const char *title;    /* the heading */
    const char *subtitle; /* one line under it; may be NULL */
    int64_t t_end_ns;     /* the time to show (> 0; 1 s is used otherwise); the axis ends at
                           * the first tick at or after it */
    const svg_panel *panels;
    size_t npanels;
} svg_chart;

/* Most legend entries drawn per panel; the rest are summarised as "+N more". */
#define SVG_MARKERS_MAX 120 /* a line with more rises than this gets no dots */

#define SVG_LEGEND_MAX 10

/* Writes t (>= 0) as at most two units, largest first, as the time axis labels it: "0", "45s",
 * "1m30s", "2h", "1d6h", "250ms", "1s500ms". buf of 32 bytes always suffices. */
void svg_format_time(int64_t t, char *buf, size_t len);

/* Renders the chart. Sets *out to NULL and *len to 0 first; on success stores a NUL-terminated
 * SVG document in *out (the caller frees it with alloc_free) and its length in *len, and
 * returns 0. Returns SLUICE_EINVAL when an argument is NULL or a line has points but a NULL
 * array, SLUICE_ENOMEM when out of memory (nothing is then left allocated). */
int svg_render(const svg_chart *chart, char **out, size_t *len);

#endif
