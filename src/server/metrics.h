/* SPDX-License-Identifier: MIT */
/*
 * The Prometheus text exposition format (version 0.0.4), written into a growable buffer, and
 * the histogram object the server's components observe into. Pure: no I/O, no clock.
 *
 * Output shape: a family is announced once (`# HELP name text` then `# TYPE name type`) and its
 * samples follow it contiguously (`name{label="value",...} value`), one per line, every line
 * ending in \n. Label values are escaped (\\, \", \n), help texts too (\\, \n). Names are
 * checked against [a-zA-Z_:][a-zA-Z0-9_:]* and label names against [a-zA-Z_][a-zA-Z0-9_]*: a
 * bad one fails the buffer instead of writing an unparseable line.
 *
 * Conventions the callers follow: the `sluice_` prefix, `_total` on counters, base units
 * (seconds, bytes) in the name, and labels with bounded values (limit and type names, never
 * keys).
 */
#ifndef SLUICE_SERVER_METRICS_H
#define SLUICE_SERVER_METRICS_H

#include <stddef.h>
#include <stdint.h>

/* The Content-Type of the output. */
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* An output buffer. failed is set by an allocation failure or a bad name, after which nothing
 * more is appended. */
typedef struct metrics_buf {
    char *buf; /* NUL-terminated when len > 0 */
    size_t len, cap;
    int failed;
} metrics_buf;

void metrics_buf_init(metrics_buf *b);
void metrics_buf_clear(metrics_buf *b); /* frees the bytes; the buffer can be reused */

/* Hands the bytes over (free them with sluice_free) and leaves b empty. Returns NULL with
 * *len 0 when the buffer failed or is empty. */
char *metrics_buf_take(metrics_buf *b, size_t *len);

/* Appends raw bytes (the callers' own text, e.g. JSON). */
void metrics_buf_append(metrics_buf *b, const char *s, size_t len);
void metrics_buf_printf(metrics_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

typedef enum metrics_type {
    METRICS_COUNTER,
    METRICS_GAUGE,
    METRICS_HISTOGRAM,
} metrics_type;

/* One label of a sample. */
typedef struct metrics_label {
    const char *name;  /* [a-zA-Z_][a-zA-Z0-9_]*, not starting with __ */
    const char *value; /* any UTF-8; escaped on output; NULL writes "" */
} metrics_label;

/* Returns 1 when name is a valid metric name / label name. Pure. */
int metrics_name_ok(const char *name);
int metrics_label_name_ok(const char *name);

/* Writes the HELP and TYPE lines of a family. */
void metrics_family(metrics_buf *b, const char *name, metrics_type type, const char *help);

/* Writes one sample of the family last announced: an unsigned integer, a signed one, or a
 * double (NaN and the infinities in Prometheus's spelling). */
void metrics_sample_u64(metrics_buf *b, const char *name, const metrics_label *labels,
                        size_t nlabels, uint64_t value);
void metrics_sample_i64(metrics_buf *b, const char *name, const metrics_label *labels,
                        size_t nlabels, int64_t value);
void metrics_sample_f64(metrics_buf *b, const char *name, const metrics_label *labels,
                        size_t nlabels, double value);

/* ---- Histograms ------------------------------------------------------------------------- */

#define METRICS_HIST_MAX_BOUNDS 24

/* A histogram with fixed buckets. Counts are kept per bucket and made cumulative on output.
 * Plain data: embed it, zero it, init it once; observe() never allocates. */
typedef struct metrics_hist {
    size_t nbounds;                               /* upper bounds in bounds[] */
    double bounds[METRICS_HIST_MAX_BOUNDS];       /* increasing, finite */
    uint64_t counts[METRICS_HIST_MAX_BOUNDS + 1]; /* per bucket; the last is past every bound */
    double sum;                                   /* of every observation */
    uint64_t count;                               /* observations */
} metrics_hist;

/* Sets the bucket bounds and zeroes the counts. Returns 0, or -1 when n is 0 or too large or the
 * bounds do not strictly increase or are not finite (h is then zeroed: one +Inf bucket). */
int metrics_hist_init(metrics_hist *h, const double *bounds, size_t n);

/* Counts one observation (v <= bound goes to that bucket; NaN is ignored). */
void metrics_hist_observe(metrics_hist *h, double v);

/* Writes a histogram's samples: name_bucket{labels...,le="b"} (cumulative, ending with
 * le="+Inf" equal to the count), name_sum and name_count. The family must have been announced
 * with METRICS_HISTOGRAM under `name`. */
void metrics_hist_write(metrics_buf *b, const char *name, const metrics_label *labels,
                        size_t nlabels, const metrics_hist *h);

#endif
