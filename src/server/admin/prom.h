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
#ifndef SLUICE_SERVER_ADMIN_PROM_H
#define SLUICE_SERVER_ADMIN_PROM_H

#include <stddef.h>
#include <stdint.h>

#include "base/attr.h"

/* The Content-Type of the output. */
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

/* An output buffer. failed is set by an allocation failure or a bad name, after which nothing
 * more is appended. */
typedef struct prom_buf {
    char *buf; /* NUL-terminated when len > 0 */
    size_t len, cap;
    int failed;
} prom_buf;

void prom_buf_init(prom_buf *b);
void prom_buf_clear(prom_buf *b); /* frees the bytes; the buffer can be reused */

/* Hands the bytes over (free them with alloc_free) and leaves b empty. Returns NULL with
 * *len 0 when the buffer failed or is empty. */
char *prom_buf_take(prom_buf *b, size_t *len);

/* Appends raw bytes (the callers' own text, e.g. JSON). */
void prom_buf_append(prom_buf *b, const char *s, size_t len);
void prom_buf_printf(prom_buf *b, const char *fmt, ...) PRINTF_ATTR(2, 3);

typedef enum prom_type {
    METRICS_COUNTER,
    METRICS_GAUGE,
    METRICS_HISTOGRAM,
} prom_type;

/* One label of a sample. */
typedef struct prom_label {
    const char *name;  /* [a-zA-Z_][a-zA-Z0-9_]*, not starting with __ */
    const char *value; /* any UTF-8; escaped on output; NULL writes "" */
} prom_label;

/* Returns 1 when name is a valid metric name / label name. Pure. */
int prom_name_ok(const char *name);
int prom_label_name_ok(const char *name);

/* Writes the HELP and TYPE lines of a family. */
void prom_family(prom_buf *b, const char *name, prom_type type, const char *help);

/* Writes one sample of the family last announced: an unsigned integer, a signed one, or a
 * double (NaN and the infinities in Prometheus's spelling). */
void prom_sample_u64(prom_buf *b, const char *name, const prom_label *labels, size_t nlabels,
                     uint64_t value);
void prom_sample_i64(prom_buf *b, const char *name, const prom_label *labels, size_t nlabels,
                     int64_t value);
void prom_sample_f64(prom_buf *b, const char *name, const prom_label *labels, size_t nlabels,
                     double value);

/* ---- Histograms ------------------------------------------------------------------------- */

#define METRICS_HIST_MAX_BOUNDS 24

/* A histogram with fixed buckets. Counts are kept per bucket and made cumulative on output.
 * Plain data: embed it, zero it, init it once; observe() never allocates. */
typedef struct prom_hist {
    size_t nbounds;                               /* upper bounds in bounds[] */
    double bounds[METRICS_HIST_MAX_BOUNDS];       /* increasing, finite */
    uint64_t counts[METRICS_HIST_MAX_BOUNDS + 1]; /* per bucket; the last is past every bound */
    double sum;                                   /* of every observation */
    uint64_t count;                               /* observations */
} prom_hist;

/* Sets the bucket bounds and zeroes the counts. Returns 0, or -1 when n is 0 or too large or the
 * bounds do not strictly increase or are not finite (h is then zeroed: one +Inf bucket). */
int prom_hist_init(prom_hist *h, const double *bounds, size_t n);

/* Counts one observation (v <= bound goes to that bucket; NaN is ignored). */
void prom_hist_observe(prom_hist *h, double v);

/* Writes a histogram's samples: name_bucket{labels...,le="b"} (cumulative, ending with
 * le="+Inf" equal to the count), name_sum and name_count. The family must have been announced
 * with METRICS_HISTOGRAM under `name`. */
void prom_hist_write(prom_buf *b, const char *name, const prom_label *labels, size_t nlabels,
                     const prom_hist *h);

#endif
