/* SPDX-License-Identifier: MIT */
/*
 * Tests of the Prometheus exposition writer (server/admin/prom.h) and the server counters
 * (server/counters.h). The writer's output is checked by parsing it back with a small parser of
 * the text format written here, independent of the writer: every line is a `# HELP`, a
 * `# TYPE` or a sample `name{labels} value`; every family has exactly one HELP and one TYPE,
 * both before its samples, and its samples are contiguous; names and label names match the
 * format's grammar; label values use only the escapes \\, \" and \n; a histogram's buckets are
 * cumulative, in increasing `le` order, and end with le="+Inf" equal to its _count. Plus the
 * embedded dashboard table, the engine's wait buckets, and an out-of-memory sweep.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/alloc.h"
#include "server/counters.h"
#include "server/admin/dash_assets.h"
#include "server/admin/prom.h"
#include "sluice/engine.h"
#include "sluice/error.h"
#include "testutil.h"

/* ---- A parser of the text format --------------------------------------------------------- */

#define MAX_FAMILIES 64
#define MAX_SAMPLES  512
#define MAX_TEXT     256

typedef struct family {
    char name[MAX_TEXT];
    char type[16];
    char help[MAX_TEXT];
    int helps, types, samples;
    int closed; /* another family's sample came after this one's */
} family;

typedef struct sample {
    char name[MAX_TEXT];
    char labels[MAX_TEXT]; /* decoded, "k=v,k=v" without le */
    char le[32];           /* "" when none */
    double value;
    int family;
} sample;

typedef struct parsed {
    family fam[MAX_FAMILIES];
    int nfam;
    sample s[MAX_SAMPLES];
    int ns;
    char error[256];
} parsed;

static int perr(parsed *p, const char *line, const char *why)
{
    snprintf(p->error, sizeof(p->error), "%s: [%.120s]", why, line);
    return -1;
}

static int name_char(char c, int first, int colon)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':') ||
           (!first && c >= '0' && c <= '9');
}

/* Reads a name at *s into out. Returns 0 or -1. */
static int read_name(const char **s, char *out, int colon)
{
    size_t n = 0;

    if (!name_char(**s, 1, colon))
        return -1;
    while (name_char(**s, n == 0, colon) && n + 1 < MAX_TEXT)
        out[n++] = *(*s)++;
    out[n] = '\0';
    return 0;
}

static family *find_family(parsed *p, const char *name)
{
    for (int i = 0; i < p->nfam; i++) {
        if (strcmp(p->fam[i].name, name) == 0)
            return &p->fam[i];
    }
    return NULL;
}

static family *get_family(parsed *p, const char *name)
{
    family *f = find_family(p, name);

    if (f || p->nfam == MAX_FAMILIES)
        return f;
    f = &p->fam[p->nfam++];
    memset(f, 0, sizeof(*f));
    snprintf(f->name, sizeof(f->name), "%s", name);
    return f;
}

/* The family a sample name belongs to: itself, or a histogram's base name. */
static family *family_of(parsed *p, const char *name)
{
    static const char *const suffixes[] = {"_bucket", "_sum", "_count"};
    family *f = find_family(p, name);

    if (f)
        return f;
    for (size_t i = 0; i < 3; i++) {
        size_t n = strlen(name), k = strlen(suffixes[i]);
        char base[MAX_TEXT];

        if (n > k && strcmp(name + n - k, suffixes[i]) == 0) {
            snprintf(base, sizeof(base), "%.*s", (int)(n - k), name);
            f = find_family(p, base);
            if (f && strcmp(f->type, "histogram") == 0)
                return f;
        }
    }
    return NULL;
}

static int parse_comment(parsed *p, const char *line)
{
    const char *s = line + 2;
    char name[MAX_TEXT];
    family *f;

    if (strncmp(s, "HELP ", 5) == 0) {
        s += 5;
        if (read_name(&s, name, 1) != 0 || *s != ' ')
            return perr(p, line, "bad HELP name");
        f = get_family(p, name);
        if (f->helps++ || f->samples)
            return perr(p, line, "HELP twice or after samples");
        for (const char *q = s + 1; *q; q++) {
            if (*q == '\\' && q[1] != '\\' && q[1] != 'n')
                return perr(p, line, "bad escape in HELP");
            if (*q == '\\')
                q++;
        }
        snprintf(f->help, sizeof(f->help), "%s", s + 1);
        return 0;
    }
    if (strncmp(s, "TYPE ", 5) == 0) {
        s += 5;
        if (read_name(&s, name, 1) != 0 || *s != ' ')
            return perr(p, line, "bad TYPE name");
        f = get_family(p, name);
        if (f->types++ || f->samples)
            return perr(p, line, "TYPE twice or after samples");
        s++;
        if (strcmp(s, "counter") && strcmp(s, "gauge") && strcmp(s, "histogram") &&
            strcmp(s, "summary") && strcmp(s, "untyped"))
            return perr(p, line, "unknown TYPE");
        snprintf(f->type, sizeof(f->type), "%s", s);
        return 0;
    }
    return perr(p, line, "a comment that is neither HELP nor TYPE");
}

/* Reads a quoted label value at *s (after the opening quote), decoding escapes. */
static int read_value(const char **s, char *out, size_t cap)
{
    size_t n = 0;

    for (; **s != '"'; (*s)++) {
        char c = **s;

        if (c == '\0' || c == '\n')
            return -1;
        if (c == '\\') {
            (*s)++;
            if (**s == 'n')
                c = '\n';
            else if (**s == '\\' || **s == '"')
                c = **s;
            else
                return -1;
        }
        if (n + 1 < cap)
            out[n++] = c;
    }
    (*s)++;
    out[n] = '\0';
    return 0;
}

static int parse_sample(parsed *p, const char *line, int *last_family)
{
    const char *s = line;
    sample *sm;
    family *f;
    char *end;

    if (p->ns == MAX_SAMPLES)
        return perr(p, line, "too many samples for the test parser");
    sm = &p->s[p->ns];
    memset(sm, 0, sizeof(*sm));
    if (read_name(&s, sm->name, 1) != 0)
        return perr(p, line, "bad metric name");
    if (*s == '{') {
        size_t o = 0;

        s++;
        while (*s != '}') {
            char lname[MAX_TEXT], lvalue[MAX_TEXT];

            if (read_name(&s, lname, 0) != 0 || *s++ != '=' || *s++ != '"' ||
                read_value(&s, lvalue, sizeof(lvalue)) != 0)
                return perr(p, line, "bad label");
            if (strcmp(lname, "le") == 0)
                snprintf(sm->le, sizeof(sm->le), "%.31s", lvalue);
            else
                o += (size_t)snprintf(sm->labels + o, sizeof(sm->labels) - o, "%s%s=%s",
                                      o ? "," : "", lname, lvalue);
            if (*s == ',')
                s++;
            else if (*s != '}')
                return perr(p, line, "labels not separated by ,");
        }
        s++;
    }
    if (*s++ != ' ')
        return perr(p, line, "no space before the value");
    if (strcmp(s, "+Inf") == 0)
        sm->value = INFINITY;
    else if (strcmp(s, "-Inf") == 0)
        sm->value = -INFINITY;
    else if (strcmp(s, "NaN") == 0)
        sm->value = NAN;
    else {
        sm->value = strtod(s, &end);
        if (end == s || *end != '\0')
            return perr(p, line, "bad value");
    }
    f = family_of(p, sm->name);
    if (!f || !f->helps || !f->types)
        return perr(p, line, "a sample without HELP and TYPE before it");
    if (f->closed)
        return perr(p, line, "a family's samples are not contiguous");
    sm->family = (int)(f - p->fam);
    if (*last_family >= 0 && *last_family != sm->family)
        p->fam[*last_family].closed = 1;
    *last_family = sm->family;
    f->samples++;
    p->ns++;
    return 0;
}

/* Checks every histogram: per label set, buckets increase in le and count, +Inf == _count. */
static int check_histograms(parsed *p)
{
    for (int i = 0; i < p->ns; i++) {
        const sample *c = &p->s[i];
        char bucket[MAX_TEXT + 8];
        double prev_le = -INFINITY, prev_count = 0, inf = -1;
        int nb = 0;

        if (strcmp(p->fam[c->family].type, "histogram") != 0)
            continue;
        if (strlen(c->name) < 6 || strcmp(c->name + strlen(c->name) - 6, "_count") != 0)
            continue;
        snprintf(bucket, sizeof(bucket), "%.*s_bucket", (int)(strlen(c->name) - 6), c->name);
        for (int k = 0; k < p->ns; k++) {
            const sample *b = &p->s[k];
            double le;

            if (strcmp(b->name, bucket) != 0 || strcmp(b->labels, c->labels) != 0)
                continue;
            le = strcmp(b->le, "+Inf") == 0 ? INFINITY : strtod(b->le, NULL);
            if (!b->le[0] || !(le > prev_le) || b->value < prev_count) {
                snprintf(p->error, sizeof(p->error), "%.100s{%.100s}: buckets not cumulative",
                         bucket, b->labels);
                return -1;
            }
            prev_le = le;
            prev_count = b->value;
            if (isinf(le))
                inf = b->value;
            nb++;
        }
        if (nb == 0 || inf < 0 || inf != c->value) {
            snprintf(p->error, sizeof(p->error), "%.100s{%.100s}: +Inf bucket %g != count %g",
                     bucket, c->labels, inf, c->value);
            return -1;
        }
    }
    return 0;
}

/* Parses text. Returns 0, or -1 with p->error. */
static int parse(parsed *p, const char *text, size_t len)
{
    char line[1024];
    size_t at = 0;
    int last = -1;

    memset(p, 0, sizeof(*p));
    if (len == 0 || text[len - 1] != '\n')
        return perr(p, "", "the output does not end with a newline");
    while (at < len) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t n = (size_t)(nl - (text + at));

        if (n >= sizeof(line))
            return perr(p, text + at, "line too long for the test parser");
        memcpy(line, text + at, n);
        line[n] = '\0';
        at += n + 1;
        if (memchr(line, '\0', n))
            return perr(p, line, "a NUL byte");
        if (line[0] == '#' ? parse_comment(p, line) : parse_sample(p, line, &last))
            return -1;
    }
    for (int i = 0; i < p->nfam; i++) {
        if (p->fam[i].helps != 1 || p->fam[i].types != 1)
            return perr(p, p->fam[i].name, "a family without exactly one HELP and one TYPE");
    }
    return check_histograms(p);
}

/* The value of a sample (labels as "k=v,k=v", decoded), asserting it exists. */
static double value_of(const parsed *p, const char *name, const char *labels, const char *le)
{
    for (int i = 0; i < p->ns; i++) {
        if (strcmp(p->s[i].name, name) == 0 && strcmp(p->s[i].labels, labels) == 0 &&
            strcmp(p->s[i].le, le ? le : "") == 0)
            return p->s[i].value;
    }
    fail_msg("no sample %s{%s} le=%s", name, labels, le ? le : "-");
    return 0;
}

/* ---- Writer tests ------------------------------------------------------------------------ */

static void write_sample_set(prom_buf *b)
{
    static const double bounds[] = {0.005, 0.01, 0.1, 1, 10};
    prom_label lb[3] = {{"limit", "api"}, {"kind", "rate"}, {"decision", "allowed"}};
    prom_hist h;

    prom_family(b, "sluice_x_total", METRICS_COUNTER, "A counter\\ with a \nnewline.");
    prom_sample_u64(b, "sluice_x_total", lb, 3, 42);
    lb[2].value = "denied";
    prom_sample_u64(b, "sluice_x_total", lb, 3, UINT64_MAX);
    prom_family(b, "sluice_g", METRICS_GAUGE, "Gauges: doubles and signed.");
    prom_sample_f64(b, "sluice_g", lb, 1, 0.1);
    lb[0].value = "b";
    prom_sample_f64(b, "sluice_g", lb, 1, 1e-9);
    lb[0].value = "c";
    prom_sample_f64(b, "sluice_g", lb, 1, NAN);
    lb[0].value = "d";
    prom_sample_f64(b, "sluice_g", lb, 1, INFINITY);
    lb[0].value = "e";
    prom_sample_i64(b, "sluice_g", lb, 1, -7);
    prom_family(b, "sluice_plain", METRICS_GAUGE, "");
    prom_sample_u64(b, "sluice_plain", NULL, 0, 3);
    prom_family(b, "sluice_wait_seconds", METRICS_HISTOGRAM, "A histogram.");
    assert_int_equal(prom_hist_init(&h, bounds, 5), 0);
    prom_hist_observe(&h, 0.005); /* on a bound: that bucket */
    prom_hist_observe(&h, 0.02);
    prom_hist_observe(&h, 0.02);
    prom_hist_observe(&h, 100); /* past every bound */
    prom_hist_observe(&h, NAN); /* ignored */
    lb[0].value = "api";
    prom_hist_write(b, "sluice_wait_seconds", lb, 1, &h);
    lb[0].value = "empty";
    prom_hist_init(&h, bounds, 5);
    prom_hist_write(b, "sluice_wait_seconds", lb, 1, &h);
}

static void test_writer_parses_back(void **unused)
{
    prom_buf b;
    parsed *p = calloc(1, sizeof(*p));

    (void)unused;
    prom_buf_init(&b);
    write_sample_set(&b);
    assert_false(b.failed);
    if (parse(p, b.buf, b.len) != 0)
        fail_msg("%s\n%s", p->error, b.buf);
    assert_int_equal(p->nfam, 4);
    assert_true(value_of(p, "sluice_x_total", "limit=api,kind=rate,decision=allowed", NULL) == 42);
    assert_true(value_of(p, "sluice_x_total", "limit=api,kind=rate,decision=denied", NULL) ==
                (double)UINT64_MAX);
    assert_true(value_of(p, "sluice_g", "limit=api", NULL) == 0.1);
    assert_true(value_of(p, "sluice_g", "limit=b", NULL) == 1e-9);
    assert_true(isnan(value_of(p, "sluice_g", "limit=c", NULL)));
    assert_true(isinf(value_of(p, "sluice_g", "limit=d", NULL)));
    assert_true(value_of(p, "sluice_g", "limit=e", NULL) == -7);
    assert_true(value_of(p, "sluice_plain", "", NULL) == 3);
    assert_true(value_of(p, "sluice_wait_seconds_bucket", "limit=api", "0.005") == 1);
    assert_true(value_of(p, "sluice_wait_seconds_bucket", "limit=api", "0.01") == 1);
    assert_true(value_of(p, "sluice_wait_seconds_bucket", "limit=api", "0.1") == 3);
    assert_true(value_of(p, "sluice_wait_seconds_bucket", "limit=api", "10") == 3);
    assert_true(value_of(p, "sluice_wait_seconds_bucket", "limit=api", "+Inf") == 4);
    assert_true(value_of(p, "sluice_wait_seconds_count", "limit=api", NULL) == 4);
    assert_true(fabs(value_of(p, "sluice_wait_seconds_sum", "limit=api", NULL) - 100.045) < 1e-9);
    assert_true(value_of(p, "sluice_wait_seconds_bucket", "limit=empty", "+Inf") == 0);
    /* HELP escapes backslash and newline. */
    assert_non_null(strstr(b.buf, "# HELP sluice_x_total A counter\\\\ with a \\nnewline.\n"));
    /* Bounds and doubles in their shortest form. */
    assert_non_null(strstr(b.buf, "le=\"0.005\""));
    assert_non_null(strstr(b.buf, "sluice_g{limit=\"api\"} 0.1\n"));
    prom_buf_clear(&b);
    free(p);
}

static void test_label_escaping(void **unused)
{
    const char *nasty[] = {"a\"b", "back\\slash", "new\nline", "\"\\\n\"", "", "ünï ✓", "}{,="};
    prom_buf b;
    parsed *p = calloc(1, sizeof(*p));

    (void)unused;
    prom_buf_init(&b);
    prom_family(&b, "sluice_t", METRICS_GAUGE, "help");
    for (size_t i = 0; i < sizeof(nasty) / sizeof(nasty[0]); i++) {
        prom_label lb = {"type", nasty[i]};

        prom_sample_u64(&b, "sluice_t", &lb, 1, i);
    }
    assert_false(b.failed);
    assert_non_null(strstr(b.buf, "sluice_t{type=\"a\\\"b\"} 0\n"));
    assert_non_null(strstr(b.buf, "sluice_t{type=\"back\\\\slash\"} 1\n"));
    assert_non_null(strstr(b.buf, "sluice_t{type=\"new\\nline\"} 2\n"));
    if (parse(p, b.buf, b.len) != 0)
        fail_msg("%s", p->error);
    /* Decoded back to the bytes written. */
    for (size_t i = 0; i < sizeof(nasty) / sizeof(nasty[0]); i++) {
        char want[MAX_TEXT];

        snprintf(want, sizeof(want), "type=%s", nasty[i]);
        assert_true(value_of(p, "sluice_t", want, NULL) == (double)i);
    }
    prom_buf_clear(&b);
    free(p);
}

static void test_bad_names_fail(void **unused)
{
    const char *bad_metric[] = {"", "1abc", "a-b", "a b", "é", "a{"};
    const char *bad_label[] = {"", "__reserved", "a:b", "9x", "a-b"};
    const char *good[] = {"a", "_a", "a:b", "sluice_x_total", "A9_:"};
    prom_buf b;

    (void)unused;
    for (size_t i = 0; i < sizeof(bad_metric) / sizeof(bad_metric[0]); i++) {
        assert_false(prom_name_ok(bad_metric[i]));
        prom_buf_init(&b);
        prom_family(&b, bad_metric[i], METRICS_GAUGE, "x");
        assert_true(b.failed);
        prom_buf_clear(&b);
    }
    for (size_t i = 0; i < sizeof(bad_label) / sizeof(bad_label[0]); i++) {
        prom_label lb = {bad_label[i], "v"};

        assert_false(prom_label_name_ok(bad_label[i]));
        prom_buf_init(&b);
        prom_family(&b, "ok", METRICS_GAUGE, "x");
        prom_sample_u64(&b, "ok", &lb, 1, 1);
        assert_true(b.failed);
        assert_null(prom_buf_take(&b, &(size_t){0}));
    }
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        assert_true(prom_name_ok(good[i]));
    assert_false(prom_name_ok(NULL));
}

static void test_histogram_bounds(void **unused)
{
    const double inc[] = {1, 2, 3}, dup[] = {1, 1}, dec[] = {2, 1}, inf[] = {1, INFINITY};
    double many[METRICS_HIST_MAX_BOUNDS + 1];
    prom_hist h;

    (void)unused;
    for (size_t i = 0; i <= METRICS_HIST_MAX_BOUNDS; i++)
        many[i] = (double)i + 1;
    assert_int_equal(prom_hist_init(&h, inc, 3), 0);
    assert_int_equal(prom_hist_init(&h, many, METRICS_HIST_MAX_BOUNDS), 0);
    assert_int_equal(prom_hist_init(&h, many, METRICS_HIST_MAX_BOUNDS + 1), -1);
    assert_int_equal(prom_hist_init(&h, inc, 0), -1);
    assert_int_equal(prom_hist_init(&h, dup, 2), -1);
    assert_int_equal(prom_hist_init(&h, dec, 2), -1);
    assert_int_equal(prom_hist_init(&h, inf, 2), -1);
    /* A failed init leaves one +Inf bucket that still counts. */
    prom_hist_observe(&h, 5);
    assert_int_equal(h.counts[0], 1);
    assert_int_equal(h.count, 1);
}

/* A large histogram and many series: everything still parses, +Inf == count per series. */
static void test_random_histograms(void **unused)
{
    static const double bounds[] = {0.001, 0.01, 0.1, 1, 10, 100};
    test_rng rng;
    prom_buf b;
    parsed *p = calloc(1, sizeof(*p));

    (void)unused;
    rng_seed(&rng, 7);
    prom_buf_init(&b);
    prom_family(&b, "sluice_h_seconds", METRICS_HISTOGRAM, "Random.");
    for (int series = 0; series < 20; series++) {
        char name[16];
        prom_label lb = {"type", name};
        prom_hist h;
        int n = (int)rng_range(&rng, 0, 500);

        snprintf(name, sizeof(name), "t%d", series);
        prom_hist_init(&h, bounds, 6);
        for (int i = 0; i < n; i++)
            prom_hist_observe(&h, (double)rng_range(&rng, 0, 200000) / 1000.0);
        prom_hist_write(&b, "sluice_h_seconds", &lb, 1, &h);
        assert_int_equal(h.count, (uint64_t)n);
    }
    if (parse(p, b.buf, b.len) != 0)
        fail_msg("%s", p->error);
    prom_buf_clear(&b);
    free(p);
}

/* The parser catches what it must: the writer's checks are only as good as this. */
static void test_parser_rejects(void **unused)
{
    static const char *const bad[] = {
        "x 1\n",                                        /* no HELP/TYPE */
        "# HELP x h\n# TYPE x gauge\nx{a=\"b} 1\n",     /* unterminated */
        "# HELP x h\n# TYPE x gauge\nx{a=\"\\t\"} 1\n", /* bad escape */
        "# HELP x h\n# TYPE x gauge\nx 1",              /* no final newline */
        "# HELP x h\n# TYPE x gauge\nx one\n",          /* bad value */
        "# HELP x h\n# TYPE x gauge\n# HELP y h\n# TYPE y gauge\nx 1\ny 1\nx 2\n",
        "# HELP h h\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\n"
        "h_sum 0\nh_count 1\n", /* not cumulative */
        "# HELP h h\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 0\nh_count 1\n",
        "# TYPE x gauge\nx 1\n",                             /* no HELP */
        "# HELP x h\n# TYPE x gauge\n# TYPE x gauge\nx 1\n", /* TYPE twice */
    };
    parsed *p = calloc(1, sizeof(*p));

    (void)unused;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (parse(p, bad[i], strlen(bad[i])) == 0)
            fail_msg("accepted bad input %zu: %s", i, bad[i]);
    }
    free(p);
}

static int write_all_body(void *arg)
{
    prom_buf b;
    size_t len;
    char *text;

    (void)arg;
    prom_buf_init(&b);
    for (int i = 0; i < 50; i++)
        write_sample_set(&b);
    text = prom_buf_take(&b, &len);
    if (!text)
        return SLUICE_ENOMEM;
    alloc_free(text);
    return 0;
}

static void test_oom_sweep(void **unused)
{
    (void)unused;
    assert_true(oom_sweep(write_all_body, NULL, 100) > 1);
}

/* ---- Counters, the dashboard table, the wait buckets ---------------------------------- */

static void test_counters_reply(void **unused)
{
    server_counters c;
    size_t other = COUNTERS_ERROR_CODES - 1, wrongargs = 1;

    (void)unused;
    counters_init(&c);
    assert_string_equal(counters_error_name(wrongargs), "WRONGARGS");
    assert_string_equal(counters_error_name(other), "other");
    assert_null(counters_error_name(COUNTERS_ERROR_CODES));
    counters_reply(&c, "-WRONGARGS bad\r\n", 16);
    counters_reply(&c, "-ERR\r\n", 6);
    counters_reply(&c, "-SOMETHINGNEW x\r\n", 17);
    counters_reply(&c, "-WRONGARGSX y\r\n", 15);
    counters_reply(&c, "+OK\r\n", 5);
    counters_reply(&c, ":1\r\n", 4);
    counters_reply(&c, "-", 1);
    assert_int_equal(c.errors[wrongargs], 1);
    assert_int_equal(c.errors[0], 1);
    assert_int_equal(c.errors[other], 2);
    counters_command(&c, 3);
    counters_command(&c, COUNTERS_MAX_COMMANDS); /* past the table: ignored */
    assert_int_equal(c.calls[3], 1);
    /* The commit histogram exists (and is empty) from the start. */
    assert_true(c.store_commit.nbounds > 0);
    assert_int_equal(c.store_commit.count, 0);
}

static void test_dashboard_table(void **unused)
{
    const dash_file *index;

    (void)unused;
    assert_true(dash_nfiles >= 1);
    index = dash_find("/");
    assert_non_null(index);
    assert_ptr_equal(index, dash_find("index.html"));
    assert_ptr_equal(index, dash_find("/index.html"));
    assert_string_equal(index->content_type, "text/html; charset=utf-8");
    assert_true(index->len > 0);
    assert_int_equal(index->etag[0], '"');
    assert_null(dash_find("/nope.js"));
    assert_null(dash_find("/../index.html"));
    assert_null(dash_find(NULL));
    for (size_t i = 0; i < dash_nfiles; i++)
        assert_ptr_equal(dash_find(dash_files[i].path), &dash_files[i]);
}

static void test_wait_bounds(void **unused)
{
    (void)unused;
    assert_int_equal(sluice_wait_bounds_ns[0], SLUICE_NS_PER_MS);
    for (size_t i = 1; i < SLUICE_WAIT_BUCKETS; i++)
        assert_true(sluice_wait_bounds_ns[i] > sluice_wait_bounds_ns[i - 1]);
    assert_int_equal(sluice_wait_bounds_ns[SLUICE_WAIT_BUCKETS - 1], 3600 * SLUICE_NS_PER_SEC);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_writer_parses_back), cmocka_unit_test(test_label_escaping),
        cmocka_unit_test(test_bad_names_fail),     cmocka_unit_test(test_histogram_bounds),
        cmocka_unit_test(test_random_histograms),  cmocka_unit_test(test_parser_rejects),
        cmocka_unit_test(test_oom_sweep),          cmocka_unit_test(test_counters_reply),
        cmocka_unit_test(test_dashboard_table),    cmocka_unit_test(test_wait_bounds),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
