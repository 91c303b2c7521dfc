/* SPDX-License-Identifier: MIT */
/*
 * Tests of the scenario mode of `sluice simulate`: the SVG builder (pure: well-formed output,
 * escaping of any key, the legend, the axes, out-of-memory sweep), the scenario templates, and
 * the simulation loop on tiny scenarios written here (seed 003's timeline, rejections, retries,
 * determinism, the sliding-window figure against a brute-force reference), with its reports,
 * and its agreement with the engine: the keys, grants and held units it shows are those the
 * engine reports (sluice_engine_task_charges), refused tasks add none.
 *
 * svg.c, payload.c, scenario.c, keys.c, run.c, chart.c and report.c (src/cli/sim/) belong to the
 * sluice binary, not to libsluice, so they are compiled into this test directly.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "cli/sim/payload.c"
#include "cli/sim/scenario.c"
#include "cli/sim/chart.c"
#include "cli/sim/keys.c"
#include "cli/sim/report.c"
#include "cli/sim/run.c"
#include "cli/sim/svg.c"
#include "sluice/error.h"
#include "testutil.h"

/* ---- A small well-formedness check ---------------------------------------------------------- */

/* Returns NULL when doc is well-formed XML as far as SVG output goes (balanced tags, quoted
 * attributes, no raw '<' or stray '&' in text), else a pointer near the fault. */
static const char *xml_fault(const char *doc)
{
    const char *stack[64];
    size_t stack_len[64], depth = 0;
    const char *p = doc;

    while (*p) {
        if (*p == '&') {
            if (strncmp(p, "&amp;", 5) && strncmp(p, "&lt;", 4) && strncmp(p, "&gt;", 4) &&
                strncmp(p, "&quot;", 6) && strncmp(p, "&#39;", 5))
                return p;
            p++;
            continue;
        }
        if (*p != '<') {
            if ((unsigned char)*p < 0x20 && *p != '\n' && *p != '\t')
                return p;
            p++;
            continue;
        }
        if (p[1] == '?') {
            p = strstr(p, "?>");
            if (!p)
                return doc;
            p += 2;
        } else if (p[1] == '/') {
            const char *name = p + 2;
            size_t n = strcspn(name, ">");

            if (depth == 0 || stack_len[depth - 1] != n || strncmp(stack[depth - 1], name, n))
                return p;
            depth--;
            p = name + n + 1;
        } else {
            const char *name = p + 1;
            size_t n = strcspn(name, " />\n");
            int quoted = 0;

            p = name + n;
            while (*p && (quoted || (*p != '>' && *p != '<'))) {
                if (*p == '"')
                    quoted = !quoted;
                p++;
            }
            if (*p != '>')
                return p;
            if (p[-1] != '/') {
                if (depth == 64)
                    return p;
                stack[depth] = name;
                stack_len[depth++] = n;
            }
            p++;
        }
    }
    return depth == 0 ? NULL : doc;
}

static void assert_well_formed(const char *doc)
{
    const char *at = xml_fault(doc);

    if (at)
        fail_msg("not well-formed near: %.60s", at);
}

/* ---- The SVG builder --------------------------------------------------------------------------
 */

static char *render(const svg_chart *c)
{
    char *out = NULL;
    size_t len = 0;

    assert_int_equal(svg_render(c, &out, &len), 0);
    assert_non_null(out);
    assert_int_equal(strlen(out), len);
    return out;
}

static void test_render(void **unused)
{
    svg_point steps[] = {{0, 0}, {0, 15}, {4 * SEC, 16}, {8 * SEC, 17}};
    svg_point env[] = {{0, 15}, {60 * SEC, 30}};
    svg_point depth[] = {{0, 5}, {4 * SEC, 4}, {8 * SEC, 3}};
    svg_line top[] = {
        {.label = "limit",
         .pts = env,
         .n = 2,
         .kind = SVG_LINEAR,
         .dashed = 1,
         .color = SVG_COLOR_GREY,
         .reference = 1},
        {.label = "tenant-a",
         .pts = steps,
         .n = 4,
         .kind = SVG_STEP,
         .color = SVG_COLOR_AUTO,
         .extend = 1,
         .markers = 1},
    };
    svg_line bottom[] = {{.label = "parked", .pts = depth, .n = 3, .kind = SVG_AREA, .color = 2}};
    svg_panel panels[] = {{"limit api", "tasks", top, 2, 1}, {"parked", "tasks", bottom, 1, 0}};
    svg_chart c = {"A <title> & more", "sub", 20 * SEC, panels, 2};
    char *doc;

    (void)unused;
    doc = render(&c);
    assert_well_formed(doc);
    assert_non_null(strstr(doc, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>"));
    assert_non_null(strstr(doc, "<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert_non_null(strstr(doc, "A &lt;title&gt; &amp; more"));
    assert_non_null(strstr(doc, ">tenant-a</text>"));
    assert_non_null(strstr(doc, "stroke-dasharray")); /* the envelope */
    assert_non_null(strstr(doc, "<circle"));          /* the markers of the grants */
    assert_non_null(strstr(doc, "fill-opacity"));     /* the parked area */
    assert_null(strstr(doc, "<script"));
    assert_null(strstr(doc, "href"));
    /* The time axis ends on a tick at or after 20 s, and the reference line, whose points go up
     * to 30, does not stretch the value axis beyond the data's 17 (plus headroom). */
    assert_non_null(strstr(doc, ">20s</text>"));
    assert_null(strstr(doc, ">30</text>"));
    assert_true(doc[strlen(doc) - 1] == '\n');
    assert_non_null(strstr(doc, "</svg>\n"));
    alloc_free(doc);
}

static void test_escaping(void **unused)
{
    static const char bad[] = "k\x01<\"'>&\xff\xc3\xa9-\xe2\x82";
    svg_point pts[] = {{0, 1}};
    svg_line line = {.label = bad, .pts = pts, .n = 1};
    svg_panel panel = {bad, bad, &line, 1, 1};
    svg_chart c = {bad, bad, SEC, &panel, 1};
    char *doc;

    (void)unused;
    doc = render(&c);
    assert_well_formed(doc);
    /* Control bytes and bytes that are not UTF-8 become '?'; é is kept. */
    assert_non_null(strstr(doc, "k?&lt;&quot;&#39;&gt;&amp;?\xc3\xa9-??"));
    alloc_free(doc);
}

static void test_legend(void **unused)
{
    svg_point pts[] = {{0, 0}, {SEC, 1}};
    svg_line lines[SVG_LEGEND_MAX + 3];
    char labels[SVG_LEGEND_MAX + 3][48];
    svg_panel panel;
    svg_chart c;
    char *doc;

    (void)unused;
    for (size_t i = 0; i < SVG_LEGEND_MAX + 3; i++) {
        snprintf(labels[i], sizeof(labels[i]), "key-%zu-with-a-label-long-enough-to-be-cut", i);
        lines[i] = (svg_line){.label = labels[i], .pts = pts, .n = 2};
    }
    panel = (svg_panel){"keys", "tasks", lines, SVG_LEGEND_MAX + 3, 1};
    c = (svg_chart){"t", NULL, 2 * SEC, &panel, 1};
    doc = render(&c);
    assert_well_formed(doc);
    assert_non_null(strstr(doc, ">+3 more</text>"));
    assert_non_null(strstr(doc, "key-0-with-a-label-long-en\xe2\x80\xa6</text>"));
    assert_null(strstr(doc, "key-12-"));
    alloc_free(doc);
}

static void test_axes(void **unused)
{
    char buf[32];
    double top;

    (void)unused;
    svg_format_time(0, buf, sizeof(buf));
    assert_string_equal(buf, "0");
    svg_format_time(90 * SEC, buf, sizeof(buf));
    assert_string_equal(buf, "1m30s");
    svg_format_time(7200 * SEC, buf, sizeof(buf));
    assert_string_equal(buf, "2h");
    svg_format_time(1500 * MS, buf, sizeof(buf));
    assert_string_equal(buf, "1s500ms");
    svg_format_time(86400 * SEC + 6 * 3600 * SEC + 5 * SEC, buf, sizeof(buf));
    assert_string_equal(buf, "1d6h");
    svg_format_time(250 * MS, buf, sizeof(buf));
    assert_string_equal(buf, "250ms");

    assert_int_equal(time_step(20 * SEC), 2 * SEC);
    assert_int_equal(time_step(22 * SEC), 5 * SEC);
    assert_int_equal(time_step(10 * 60 * SEC), 60 * SEC);
    assert_int_equal(time_step(3 * 3600 * SEC), 1800 * SEC);

    /* Counts get whole ticks: 5 for 11 (never 2.5), 1 for 1, 100 for 400. */
    assert_true(value_step(11, &top) == 5 && top == 15);
    assert_true(value_step(1, &top) == 1 && top == 2);
    assert_true(value_step(400, &top) == 100 && top == 500);
    assert_true(value_step(100, &top) == 20 && top == 120);
    assert_true(value_step(120, &top) == 25 && top == 150);
}

/* Event ticks stand on the time axis, one per pixel column, and never scale the y axis; a
 * line's tooltip is the <title> of its path. */
static void test_ticks_tooltip(void **unused)
{
    svg_point rate[] = {{0, 20}, {SEC, 10}, {2 * SEC, 5}};
    svg_point ev[] = {{SEC, 1000}, {SEC, 1000}, {2 * SEC, 1000}};
    svg_line lines[] = {
        {.label = "acme rate",
         .pts = rate,
         .n = 3,
         .kind = SVG_STEP,
         .color = SVG_COLOR_AUTO,
         .extend = 1,
         .tooltip = "acme: 20/1s & <more>"},
        {.label = "upstream 429 (3)", .pts = ev, .n = 3, .kind = SVG_TICKS, .color = 2},
    };
    svg_panel panel = {"adaptive rate of api", "permits per 1s", lines, 2, 0};
    svg_chart c = {"t", NULL, 4 * SEC, &panel, 1};
    char *doc;
    const char *p;
    size_t ticks = 0;

    (void)unused;
    doc = render(&c);
    assert_well_formed(doc);
    assert_non_null(strstr(doc, "\"><title>acme: 20/1s &amp; &lt;more&gt;</title></path>\n"));
    assert_non_null(strstr(doc, ">upstream 429 (3)</text>"));
    assert_null(strstr(doc, ">1000</text>")); /* the axis is scaled by the rate only */
    assert_non_null(strstr(doc, ">20</text>"));
    for (p = doc; (p = strstr(p, "v-9")) != NULL; p++)
        ticks++;
    assert_int_equal(ticks, 2 + 3); /* two columns on the plot, three strokes in the legend */
    alloc_free(doc);
}

static void test_einval(void **unused)
{
    svg_line line = {.label = "x", .pts = NULL, .n = 3};
    svg_panel panel = {"p", "y", &line, 1, 1};
    svg_chart c = {"t", NULL, SEC, &panel, 1};
    char *out = (char *)1;
    size_t len = 1;

    (void)unused;
    assert_int_equal(svg_render(NULL, &out, &len), SLUICE_EINVAL);
    assert_null(out);
    assert_int_equal(len, 0);
    assert_int_equal(svg_render(&c, &out, &len), SLUICE_EINVAL);
    assert_int_equal(svg_render(&c, NULL, &len), SLUICE_EINVAL);
    /* No panels, no time: still a document. */
    c.npanels = 0;
    c.t_end_ns = 0;
    assert_int_equal(svg_render(&c, &out, &len), 0);
    assert_well_formed(out);
    alloc_free(out);
}

static int svg_oom_body(void *arg)
{
    const svg_chart *c = arg;
    char *out;
    size_t len;
    int rc = svg_render(c, &out, &len);

    if (rc == 0)
        alloc_free(out);
    return rc;
}

static void test_svg_oom(void **unused)
{
    svg_point pts[400];
    svg_line line = {.label = "k", .pts = pts, .n = 400, .extend = 1};
    svg_panel panel = {"p", "y", &line, 1, 1};
    svg_chart c = {"t", NULL, 400 * SEC, &panel, 1};

    (void)unused;
    for (size_t i = 0; i < 400; i++)
        pts[i] = (svg_point){(int64_t)i * SEC, (double)i};
    assert_true(oom_sweep(svg_oom_body, &c, 100) > 1);
}

/* ---- Templates --------------------------------------------------------------------------------
 */

static void test_templates(void **unused)
{
    scenario_vars v = {17, "acme"};
    char buf[64], why[160];

    (void)unused;
    assert_int_equal(scenario_expand("tenant-{i%10}", &v, buf, sizeof(buf), NULL, 0), 8);
    assert_string_equal(buf, "tenant-7");
    scenario_expand("{i}/{i/5}:{key}", &v, buf, sizeof(buf), NULL, 0);
    assert_string_equal(buf, "17/3:acme");
    scenario_expand("{{literal}} {i%3}", &v, buf, sizeof(buf), NULL, 0);
    assert_string_equal(buf, "{literal} 2");
    /* Cut to the buffer, but the full length is returned. */
    assert_int_equal(scenario_expand("abcdefgh", &v, buf, 4, NULL, 0), 8);
    assert_string_equal(buf, "abc");
    assert_int_equal(scenario_expand("{j}", &v, buf, sizeof(buf), why, sizeof(why)), -1);
    assert_non_null(strstr(why, "unknown placeholder"));
    assert_int_equal(scenario_expand("{i%0}", &v, buf, sizeof(buf), NULL, 0), -1);
    assert_int_equal(scenario_expand("{i", &v, buf, sizeof(buf), NULL, 0), -1);
    assert_true(numeric_template("{i%4}"));
    assert_false(numeric_template("x{i%4}"));
    assert_false(numeric_template("{key}"));
}

/* ---- The simulation ---------------------------------------------------------------------------
 */

/* A parsed scenario file and its configuration. */
typedef struct fixture {
    sluice_config cfg;
    scenario *sc;
} fixture;

static void load(fixture *f, const char *yaml)
{
    static const char *const ignored[] = {"scenario", NULL};
    char msg[512];

    memset(f, 0, sizeof(*f));
    if (sluice_config_parse_ignoring(yaml, strlen(yaml), "t.yaml", ignored, &f->cfg, msg,
                                     sizeof(msg)) != 0 ||
        scenario_parse(yaml, strlen(yaml), "t.yaml", &f->sc, msg, sizeof(msg)) != 0 ||
        scenario_check(f->sc, &f->cfg, "t.yaml", msg, sizeof(msg)) != 0)
        fail_msg("%s", msg);
}

static void unload(fixture *f)
{
    scenario_free(f->sc);
    sluice_config_clear(&f->cfg);
}

static simrun_result *run_ok(const fixture *f)
{
    simrun_result *r = NULL;
    char msg[256];

    if (simrun_run(f->sc, &f->cfg, &r, msg, sizeof(msg)) != 0)
        fail_msg("simrun_run: %s", msg);
    return r;
}

static const char seed003[] = "limits:\n"
                              "  api: {rate: 15/1m, key: explicit}\n"
                              "types:\n"
                              "  job: {limits: [api]}\n"
                              "scenario:\n"
                              "  arrivals:\n"
                              "    - {type: job, count: 20, key: tenant-a}\n"
                              "    - {type: job, count: 5, at: 10s, key: tenant-b}\n";

static void test_seed003_timeline(void **unused)
{
    static const int64_t want[] = {4, 8, 12, 16, 20};
    fixture f;
    simrun_result *r;

    (void)unused;
    load(&f, seed003);
    r = run_ok(&f);
    assert_int_equal(r->ntasks, 25);
    for (size_t i = 0; i < 15; i++) {
        assert_int_equal(r->tasks[i].start_ns, 0);
        assert_int_equal(r->tasks[i].outcome, SIMRUN_DONE);
        assert_string_equal(r->tasks[i].key, "tenant-a");
    }
    for (size_t i = 15; i < 20; i++)
        assert_int_equal(r->tasks[i].start_ns, want[i - 15] * SEC);
    /* The other tenant never waits behind the first one's backlog. */
    for (size_t i = 20; i < 25; i++) {
        assert_int_equal(r->tasks[i].arrival_ns, 10 * SEC);
        assert_int_equal(r->tasks[i].start_ns, 10 * SEC);
    }
    assert_int_equal(r->nseries, 2);
    assert_string_equal(r->series[0].key, "tenant-a");
    assert_int_equal(r->series[0].n, 20);
    assert_int_equal(r->series[0].max_period, 20);
    assert_int_equal(r->stats.parked_peak, 5);
    assert_int_equal(r->end_ns, 20 * SEC);
    assert_false(r->stopped);
    simrun_result_free(r);
    unload(&f);
}

static void test_reject(void **unused)
{
    fixture f;
    simrun_result *r;

    (void)unused;
    load(&f, "limits:\n"
             "  breaker: {window: 3/1h, key: input.wf, overflow: reject}\n"
             "types:\n"
             "  run: {limits: [breaker]}\n"
             "scenario:\n"
             "  arrivals:\n"
             "    - {type: run, count: 5, from: 0s, until: 5s, payload: {wf: loop}}\n"
             "    - {type: run, count: 2, at: 1s, payload: {wf: \"w-{i}\"}}\n");
    r = run_ok(&f);
    assert_int_equal(r->ntasks, 7);
    for (size_t i = 0, done = 0, rejected = 0; i < r->ntasks; i++) {
        const simrun_task *t = &r->tasks[i];

        if (strcmp(t->key, "loop") != 0) {
            assert_int_equal(t->outcome, SIMRUN_DONE);
            continue;
        }
        if (t->outcome == SIMRUN_DONE) {
            assert_true(++done <= 3);
        } else {
            assert_int_equal(t->outcome, SIMRUN_REJECTED);
            assert_string_equal(t->why, "breaker");
            assert_int_equal(t->start_ns, -1);
            assert_int_equal(t->end_ns, t->arrival_ns);
            assert_true(++rejected <= 2);
        }
    }
    for (size_t i = 0; i < r->nseries; i++) {
        if (strcmp(r->series[i].key, "loop") == 0) {
            assert_int_equal(r->series[i].rejected, 2);
            assert_int_equal(r->series[i].nrej, 2);
        }
    }
    simrun_result_free(r);
    unload(&f);
}

static const char busy_yaml[] = "limits:\n"
                                "  api: {rate: 30/1m, key: explicit}\n"
                                "  slots: {concurrency: 2}\n"
                                "types:\n"
                                "  job:\n"
                                "    limits: [api, slots]\n"
                                "    lease: 4s\n"
                                "    retry: {max_attempts: 2, backoff: fixed, base: 1s}\n"
                                "scenario:\n"
                                "  seed: 42\n"
                                "  arrivals:\n"
                                "    - type: job\n"
                                "      count: 30\n"
                                "      from: 0s\n"
                                "      until: 30s\n"
                                "      spread: random\n"
                                "      key: [a, b, c]\n"
                                "  workers:\n"
                                "    - {count: 3, service: 1s..6s, failure_rate: 0.3}\n";

static void test_deterministic(void **unused)
{
    static const char *const keys[] = {"a", "b", "c"};
    fixture f;
    simrun_result *a, *b;
    size_t done = 0, failed = 0;

    (void)unused;
    load(&f, busy_yaml);
    a = run_ok(&f);
    b = run_ok(&f);
    assert_int_equal(a->ntasks, 30);
    assert_int_equal(b->ntasks, 30);
    for (size_t i = 0; i < a->ntasks; i++) {
        const simrun_task *x = &a->tasks[i], *y = &b->tasks[i];

        assert_int_equal(x->arrival_ns, y->arrival_ns);
        assert_int_equal(x->start_ns, y->start_ns);
        assert_int_equal(x->end_ns, y->end_ns);
        assert_int_equal(x->outcome, y->outcome);
        assert_int_equal(x->attempts, y->attempts);
        /* Keys cycle over the list in arrival order. */
        assert_string_equal(x->key, keys[i % 3]);
        done += x->outcome == SIMRUN_DONE;
        failed += x->outcome == SIMRUN_FAILED;
        if (x->outcome == SIMRUN_FAILED)
            assert_int_equal(x->reason, SLUICE_FAIL_ATTEMPTS);
    }
    /* Everything ends one way or the other, and some of it fails (30% per attempt). */
    assert_int_equal(done + failed, 30);
    assert_true(failed > 0);
    assert_true(a->stats.retried > 0);
    /* Never more than 2 held at once, and leases that expire give their slot back. */
    for (size_t i = 0; i < a->nseries; i++) {
        if (a->series[i].def.kind == SLUICE_CONCURRENCY)
            assert_true(a->series[i].max_period <= 2);
    }
    simrun_result_free(a);
    simrun_result_free(b);
    unload(&f);
}

/* The series of (limit, tier, key) in r, or NULL. */
static const simrun_series *find_series(const simrun_result *r, const char *limit, const char *tier,
                                        const char *key)
{
    for (size_t i = 0; i < r->nseries; i++) {
        const simrun_series *s = &r->series[i];

        if (strcmp(s->limit, limit) == 0 && strcmp(s->key, key) == 0 &&
            ((!tier && !s->tier) || (tier && s->tier && strcmp(tier, s->tier) == 0)))
            return s;
    }
    return NULL;
}

/* The simulator counts what the engine charged and nothing else. Where it used to resolve links
 * itself it disagreed with the engine: a bad units value (0, or not a number), a missing key
 * under a limit without missing_key: global, a key of the wrong kind, or a tier value no tier
 * matches were refused by the engine but still added a key (with 1 unit, or on the global key,
 * or untiered) to the simulator's report; a key of 1 KiB or more was counted on the global key;
 * the occurrences of two recurring series of one type were all counted on the first series'
 * key. */
static void test_agrees_with_engine(void **unused)
{
    fixture f;
    simrun_result *r;
    char *yaml, *long_key;
    size_t n = 0;
    const simrun_series *s;

    (void)unused;
    long_key = alloc_malloc(1101);
    assert_non_null(long_key);
    memset(long_key, 'k', 1100);
    long_key[1100] = '\0';
    yaml = alloc_malloc(4096);
    assert_non_null(yaml);
    snprintf(yaml, 4096,
             "limits:\n"
             "  tokens: {rate: 100/1m, key: input.user, units: input.tokens}\n"
             "  calls: {rate: 10/1m, key: input.org, missing_key: global}\n"
             "  seats: {rate: 10/1m, key: input.team}\n"
             "  size:\n"
             "    tier:\n"
             "      field: input.agents\n"
             "      tiers:\n"
             "        - {name: small, max: 2, rate: 20/1m}\n"
             "        - {name: big, min: 5, rate: 5/1m}\n"
             "  api: {rate: 10/1m, key: explicit}\n"
             "types:\n"
             "  job: {limits: [tokens, calls, seats, size]}\n"
             "  sync: {limits: [api]}\n"
             "scenario:\n"
             "  duration: 150s\n"
             "  arrivals:\n"
             "    - {type: job, count: 3, payload: {user: ann, org: acme, team: red, tokens: 5,\n"
             "                                      agents: 1}}\n"
             "    - {type: job, count: 2, at: 1s, payload: {user: bob, org: acme, team: red,\n"
             "                                              tokens: 0, agents: 1}}\n"
             "    - {type: job, count: 1, at: 1s, payload: {user: dan, org: acme, team: red,\n"
             "                                              tokens: many, agents: 1}}\n"
             "    - {type: job, count: 2, at: 2s, payload: {user: cy, team: blue, tokens: 7,\n"
             "                                              agents: 6}}\n"
             "    - {type: job, count: 1, at: 3s, payload: {user: eve, org: {id: 1}, team: blue,\n"
             "                                              tokens: 1, agents: 1}}\n"
             "    - {type: job, count: 1, at: 3s, payload: {user: fay, org: acme, tokens: 1,\n"
             "                                              agents: 1}}\n"
             "    - {type: job, count: 1, at: 3s, payload: {user: gus, org: acme, team: red,\n"
             "                                              tokens: 1, agents: 3}}\n"
             "    - {type: job, count: 2, at: 4s, payload: {user: %s, org: acme, team: red,\n"
             "                                              tokens: 2, agents: 0}}\n"
             "  recurring:\n"
             "    - {name: r1, type: sync, every: 1m, key: a}\n"
             "    - {name: r2, type: sync, every: 1m, key: b}\n",
             long_key);
    load(&f, yaml);
    r = run_ok(&f);

    /* bob (units 0), dan (units "many"), eve (an org that is not a string), fay (no team, and
     * seats has no missing_key: global) and gus (3 agents: no tier) are refused by the engine:
     * they have no links and add no key. */
    for (size_t i = 0; i < r->ntasks; i++) {
        const simrun_task *t = &r->tasks[i];

        if (t->outcome == SIMRUN_REFUSED) {
            assert_int_equal(t->nlinks, 0);
            assert_string_equal(t->key, "");
            n++;
        } else if (t->stream != SIMRUN_RECURRING) {
            assert_int_equal(t->outcome, SIMRUN_DONE);
            assert_int_equal(t->nlinks, 4);
        }
    }
    assert_int_equal(n, 6);
    assert_int_equal(r->refused, 6);
    for (size_t i = 0; i < r->nseries; i++)
        assert_true(r->series[i].n > 0); /* every key shown was charged */
    assert_null(find_series(r, "tokens", NULL, "bob"));
    assert_null(find_series(r, "tokens", NULL, "dan"));
    assert_null(find_series(r, "seats", NULL, ""));
    assert_null(find_series(r, "size", NULL, ""));

    /* The units read from the input, the global key of missing_key: global, the tier chosen. */
    s = find_series(r, "tokens", NULL, "ann");
    assert_non_null(s);
    assert_int_equal(s->n, 3);
    assert_int_equal(s->cum[s->n - 1], 15);
    s = find_series(r, "calls", NULL, "");
    assert_non_null(s);
    assert_int_equal(s->n, 2); /* cy's two tasks, which name no org */
    s = find_series(r, "size", "big", "");
    assert_non_null(s);
    assert_int_equal(s->n, 2);
    assert_int_equal(s->def.limit, 5);
    s = find_series(r, "size", "small", "");
    assert_non_null(s);
    assert_int_equal(s->n, 5);

    /* A long key is a key like any other. */
    s = find_series(r, "tokens", NULL, long_key);
    assert_non_null(s);
    assert_int_equal(s->n, 2);
    assert_int_equal(s->cum[s->n - 1], 4);
    assert_null(find_series(r, "tokens", NULL, ""));

    /* Each recurring series on its own key: occurrences at 0 s, 60 s and 120 s. */
    s = find_series(r, "api", NULL, "a");
    assert_non_null(s);
    assert_int_equal(s->n, 3);
    s = find_series(r, "api", NULL, "b");
    assert_non_null(s);
    assert_int_equal(s->n, 3);

    simrun_result_free(r);
    unload(&f);
    alloc_free(yaml);
    alloc_free(long_key);
}

/* Grants and held units follow the engine's own counters: a first delivery is charged, a
 * redelivery after a lost lease and a retry under throttle_retries false are not, and every
 * concurrency unit taken is given back (ack, fail or lease expiry) by the end. */
static void test_counts_follow_engine(void **unused)
{
    fixture f;
    simrun_result *r;
    size_t grants_api = 0, grants_slots = 0;

    (void)unused;
    load(&f, "limits:\n"
             "  api: {rate: 600/1m, key: explicit}\n"
             "  slots: {concurrency: 2}\n"
             "types:\n"
             "  job:\n"
             "    limits: [api, slots]\n"
             "    lease: 3s\n"
             "    retry: {max_attempts: 5, backoff: fixed, base: 1s, throttle_retries: false}\n"
             "scenario:\n"
             "  seed: 9\n"
             "  arrivals:\n"
             "    - {type: job, count: 40, from: 0s, until: 40s, key: [a, b]}\n"
             "  workers:\n"
             "    - {count: 3, service: 1s..5s, failure_rate: 0.3}\n");
    r = run_ok(&f);
    assert_false(r->stopped);
    assert_true(r->stats.redelivered > 0);
    assert_true(r->stats.retried > 0);
    for (size_t i = 0; i < r->nseries; i++) {
        const simrun_series *s = &r->series[i];

        if (strcmp(s->limit, "api") == 0) {
            grants_api += s->n;
        } else {
            grants_slots += s->n;
            assert_int_equal(s->held, 0);
            assert_true(s->held_peak <= 2);
        }
    }
    assert_int_equal(grants_api, r->stats.delivered - r->stats.redelivered - r->stats.retried);
    assert_int_equal(grants_slots, grants_api);
    simrun_result_free(r);
    unload(&f);
}

/* simrun_max_in against a brute-force count over every interval that starts at a grant. */
static void test_max_in_property(void **unused)
{
    test_rng rng;

    (void)unused;
    rng_seed(&rng, 7);
    for (int round = 0; round < 200; round++) {
        int64_t t[64], cum[64], w = rng_range(&rng, 1, 20) * SEC, want = 0, acc = 0;
        size_t n = (size_t)rng_range(&rng, 0, 64);
        simrun_series s;

        for (size_t i = 0; i < n; i++) {
            t[i] = (i ? t[i - 1] : 0) + rng_range(&rng, 0, 3) * SEC;
            acc += rng_range(&rng, 1, 3);
            cum[i] = acc;
        }
        for (size_t i = 0; i < n; i++) {
            int64_t in = 0;

            for (size_t j = 0; j < n; j++) {
                if (t[j] >= t[i] && t[j] < t[i] + w)
                    in += cum[j] - (j ? cum[j - 1] : 0);
            }
            want = in > want ? in : want;
        }
        memset(&s, 0, sizeof(s));
        s.t_ns = t;
        s.cum = cum;
        s.n = n;
        assert_int_equal(simrun_max_in(&s, w), want);
    }
}

static void test_reports(void **unused)
{
    fixture f;
    simrun_result *r;
    char *text = NULL, *svg = NULL;
    size_t len = 0;
    FILE *mem;

    (void)unused;
    load(&f, seed003);
    r = run_ok(&f);

    mem = open_memstream(&text, &len);
    assert_non_null(mem);
    simreport_text(mem, r, "t.yaml", 0);
    fclose(mem);
    assert_non_null(strstr(text, "max grants   api: 20 in any 1m"));
    assert_non_null(strstr(text, "parked peak  5"));
    assert_non_null(strstr(text, "25 submitted: 25 done"));
    free(text);

    mem = open_memstream(&text, &len);
    assert_non_null(mem);
    simreport_csv(mem, r);
    fclose(mem);
    assert_non_null(
        strstr(text, "index,arrival_s,granted_s,type,key,outcome\n0,0,0,job,tenant-a,done\n"));
    assert_non_null(strstr(text, "\n15,0,4,job,tenant-a,done\n"));
    free(text);

    assert_int_equal(simchart_svg(r, "t.yaml", &svg, &len), 0);
    assert_well_formed(svg);
    assert_non_null(strstr(svg, ">tenant-b</text>"));
    assert_non_null(strstr(svg, "limit: burst 15 + t/4s"));
    assert_non_null(strstr(svg, "parked peak 5"));
    alloc_free(svg);
    simrun_result_free(r);
    unload(&f);
}

static int simrun_oom_body(void *arg)
{
    const fixture *f = arg;
    simrun_result *r = NULL;
    char msg[256], *svg = NULL;
    size_t len;
    int rc = simrun_run(f->sc, &f->cfg, &r, msg, sizeof(msg));

    if (rc == 0) {
        rc = simchart_svg(r, "t.yaml", &svg, &len);
        alloc_free(svg);
    }
    simrun_result_free(r);
    return rc;
}

/* Every allocation of a run (the engine's included) may fail: the run then fails cleanly. */
static void test_simrun_oom(void **unused)
{
    fixture f;

    (void)unused;
    load(&f, seed003);
    assert_true(oom_sweep(simrun_oom_body, &f, 5000) > 10);
    unload(&f);
}

/* An adaptive limit in front of an upstream: the rate the chart draws starts at the configured
 * rate, passes through the rate after each 429 and ends at the rate at the end; the rate panel
 * and the hidden rate are drawn. */
static const char upstream_yaml[] = "limits:\n"
                                    "  api: {rate: 20/1s, burst: 1, key: explicit,\n"
                                    "        adaptive: {decrease: 0.5, recover: 10%/10s}}\n"
                                    "types:\n"
                                    "  call: {limits: [api]}\n"
                                    "scenario:\n"
                                    "  upstream: {rate: 7/1s}\n"
                                    "  arrivals: [{type: call, count: 200, key: acme}]\n"
                                    "  workers: [{count: 10, service: 50ms}]\n";

static void test_adaptive_chart(void **unused)
{
    fixture f;
    simrun_result *r = NULL;
    const simrun_series *s = NULL;
    char msg[256], *svg = NULL;
    size_t len, k = 0;

    (void)unused;
    load(&f, upstream_yaml);
    assert_int_equal(simrun_run(f.sc, &f.cfg, &r, msg, sizeof(msg)), 0);
    for (size_t i = 0; i < r->nseries; i++)
        s = strcmp(r->series[i].key, "acme") == 0 ? &r->series[i] : s;
    assert_non_null(s);
    assert_true(r->n429 > 0 && s->nrate > 0 && s->neff >= s->nrate);
    /* Every rate after a 429 is a point of the drawn line, in order. */
    for (size_t j = 0; j < s->neff && k < s->nrate; j++) {
        if (s->eff_t[j] == s->rate_t[k]) {
            assert_int_equal(s->eff_v[j], s->rate_v[k]);
            while (k < s->nrate && s->rate_t[k] == s->eff_t[j])
                k++;
        }
    }
    assert_int_equal(k, s->nrate);
    assert_int_equal(s->eff_v[s->neff - 1], s->rate_end);
    assert_int_equal(simchart_svg(r, "t.yaml", &svg, &len), 0);
    assert_well_formed(svg);
    assert_non_null(strstr(svg, ">adaptive rate of api</text>"));
    assert_non_null(strstr(svg, ">permits per 1s</text>"));
    assert_non_null(strstr(svg, "<title>hidden rate 7/1s</title>"));
    assert_non_null(strstr(svg, "<title>acme: 20/1s; after each 429: "));
    alloc_free(svg);
    simrun_result_free(r);
    unload(&f);
}

/* Every allocation of an adaptive run and its chart may fail: they then fail cleanly. */
static void test_adaptive_oom(void **unused)
{
    fixture f;

    (void)unused;
    load(&f, upstream_yaml);
    assert_true(oom_sweep(simrun_oom_body, &f, 20000) > 10);
    unload(&f);
}

static void test_scenario_errors(void **unused)
{
    static const struct {
        const char *yaml;
        const char *want;
    } cases[] = {
        {"scenario:\n  arrivals:\n    - {type: job}\n",
         "t.yaml:3:7: scenario.arrivals[0]: an arrival stream needs a count"},
        {"scenario:\n  arrivals:\n    - {type: job, rate: 2/s}\n",
         "t.yaml:3:19: scenario.arrivals[0]: a rate needs an interval"},
        {"scenario:\n  arrivals:\n    - {type: job, rate: 2/x, from: 0s, until: 1s}\n",
         "t.yaml:3:25: scenario.arrivals[0].rate: expected a rate"},
        {"scenario:\n  arrivals:\n    - {type: job, count: 1, from: 5s, until: 1s}\n",
         "t.yaml:3:39: scenario.arrivals[0]: until must come after from"},
        {"scenario:\n  seeds: 3\n", "t.yaml:2:3: scenario: unknown key \"seeds\"; did you mean"},
        {"scenario: [1]\n", "t.yaml:1:11: scenario: expected a mapping"},
        {"other: 1\n", "t.yaml:1:1: expected a scenario: section"},
    };

    (void)unused;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        scenario *sc = (scenario *)1;
        char msg[512];
        int rc =
            scenario_parse(cases[i].yaml, strlen(cases[i].yaml), "t.yaml", &sc, msg, sizeof(msg));

        assert_int_equal(rc, SLUICE_EINVAL);
        assert_null(sc);
        if (strncmp(msg, cases[i].want, strlen(cases[i].want)) != 0)
            fail_msg("case %zu: got [%s], wanted [%s...]", i, msg, cases[i].want);
    }
}

static void test_rate_arrivals(void **unused)
{
    const char yaml[] = "scenario:\n"
                        "  arrivals:\n"
                        "    - {type: job, rate: 3/1s, from: 10s, until: 12s}\n"
                        "    - {type: job, count: 4, from: 0s, until: 2s, key: \"k{i%2}\"}\n";
    scenario *sc;
    char msg[256], key[16];

    (void)unused;
    assert_int_equal(scenario_parse(yaml, strlen(yaml), "t.yaml", &sc, msg, sizeof(msg)), 0);
    assert_int_equal(sc->nstreams, 2);
    assert_int_equal(sc->streams[0].count, 6);
    assert_int_equal(sc->streams[0].spread, SCENARIO_EVEN);
    assert_int_equal(sc->streams[0].from_ns, 10 * SEC);
    assert_int_equal(sc->streams[0].until_ns, 12 * SEC);
    assert_int_equal(sc->total, 10);
    assert_int_equal(scenario_key(&sc->streams[1], 3, key, sizeof(key)), 2);
    assert_string_equal(key, "k1");
    assert_int_equal(scenario_key(&sc->streams[0], 3, key, sizeof(key)), 0);
    /* The default worker pool: one worker for any type, done at once. */
    assert_int_equal(sc->nworkers, 1);
    assert_int_equal(sc->workers[0].count, 1);
    assert_int_equal(sc->workers[0].ntypes, 0);
    scenario_free(sc);
}

static void test_payload(void **unused)
{
    const char yaml[] = "scenario:\n"
                        "  arrivals:\n"
                        "    - type: job\n"
                        "      count: 1\n"
                        "      key: [acme]\n"
                        "      payload: {n: \"{i%4}\", s: \"x-{i}-{key}\", f: 1.5, b: true,\n"
                        "                z: null, q: \"7\", l: [1, \"{i}\"]}\n";
    scenario *sc;
    scenario_vars v = {6, "acme"};
    char msg[256], *text;
    json_t *j;

    (void)unused;
    assert_int_equal(scenario_parse(yaml, strlen(yaml), "t.yaml", &sc, msg, sizeof(msg)), 0);
    j = scenario_payload(&sc->streams[0], &v);
    assert_non_null(j);
    text = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(text,
                        "{\"b\":true,\"f\":1.5,\"l\":[1,6],\"n\":2,\"q\":\"7\",\"s\":\"x-6-acme\","
                        "\"z\":null}");
    free(text);
    json_decref(j);
    scenario_free(sc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_render),
        cmocka_unit_test(test_escaping),
        cmocka_unit_test(test_legend),
        cmocka_unit_test(test_axes),
        cmocka_unit_test(test_ticks_tooltip),
        cmocka_unit_test(test_einval),
        cmocka_unit_test(test_svg_oom),
        cmocka_unit_test(test_templates),
        cmocka_unit_test(test_seed003_timeline),
        cmocka_unit_test(test_reject),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_max_in_property),
        cmocka_unit_test(test_reports),
        cmocka_unit_test(test_scenario_errors),
        cmocka_unit_test(test_rate_arrivals),
        cmocka_unit_test(test_payload),
        cmocka_unit_test(test_simrun_oom),
        cmocka_unit_test(test_adaptive_chart),
        cmocka_unit_test(test_adaptive_oom),
        cmocka_unit_test(test_agrees_with_engine),
        cmocka_unit_test(test_counts_follow_engine),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
