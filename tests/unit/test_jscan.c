/* SPDX-License-Identifier: MIT */
/*
 * Tests of the validating JSON scanner (base/jscan.c) and of picking (policy/jpick.c), both
 * against jansson, the parser they stand in for on the submit path.
 *
 * Every document of the corpus is given to both: whatever jscan_validate accepts jansson must
 * accept (with JSON_DECODE_ANY | JSON_ALLOW_NUL, as task payloads are read), whatever it refuses
 * jansson must refuse, and JSCAN_UNSURE is allowed only where the scanner says it cannot judge.
 * For every accepted document, dot paths (every path into the document, and variations that miss
 * or go through scalars) read the same values, or fail with the same code and words, from the
 * pruned tree jpick_parse builds as from jansson's full parse; so do key templates.
 *
 * The corpus: hand-picked edge cases (nesting at the depth limit, escapes, surrogates, overlong
 * and truncated UTF-8, numbers at the int64 and double limits, trailing bytes, NUL bytes), every
 * JSON-looking string literal of the unit and server tests and every line of the engine fuzz
 * corpus, the fuzz corpus of fuzz_jscan (tests/fuzz/corpus/jscan/), and generated documents (random
 * values written with every escape, duplicate names and odd whitespace) with random mutations. The
 * random generator is seeded, so a failure replays. The differential check itself is
 * tests/fuzz/jscan_harness.c, shared with the libFuzzer target fuzz_jscan; this file adds the
 * submit path's verdict and words (resolve_input against a full parse) and the exact verdicts of
 * the hand-picked cases.
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <jansson.h>

#include "base/jscan.h"
#include "engine/resolve.h"
#include "policy/dotpath.h"
#include "policy/jpick.h"
#include "policy/keytpl.h"
#include "sluice/error.h"
#include "jscan_harness.h"
#include "testutil.h"

#define FLAGS (JSON_DECODE_ANY | JSON_ALLOW_NUL)

static void same_verdict(const char *doc, size_t len);

/* Checks one document against jansson (the harness) and the submit path; returns the
 * scanner's verdict. */
static int check_doc(const char *doc, size_t len)
{
    int v = 0;
    const char *why = jscan_harness_run(doc, len, &v);

    if (why)
        fail_msg("%s", why);
    same_verdict(doc, len);
    return v;
}

/* ---- The differential check ------------------------------------------------------------- */

/* The submit path (resolve_input) gives a payload the verdict and the words of a full parse. */
static void same_verdict(const char *doc, size_t len)
{
    sluice_task_spec spec;
    json_t *in1 = NULL, *in2 = NULL;
    char m1[256] = "", m2[256] = "";
    int r1, r2;

    memset(&spec, 0, sizeof spec);
    spec.payload = doc;
    spec.payload_len = len;
    r1 = resolve_input(NULL, &spec, &in1, m1, sizeof m1);
    r2 = resolve_parse_payload(&spec, &in2, m2, sizeof m2);
    if (r1 != r2 || (r1 != 0 && strcmp(m1, m2) != 0))
        fail_msg("submit says %d \"%s\", a full parse %d \"%s\": %s", r1, m1, r2, m2,
                 jscan_harness_show(doc, len));
    json_decref(in1);
    json_decref(in2);
}

#define EXPECT(doc, verdict)                                                                       \
    do {                                                                                           \
        if (check_doc(doc, sizeof(doc) - 1) != (verdict))                                          \
            fail_msg("%s: not %s", jscan_harness_show(doc, sizeof(doc) - 1), #verdict);            \
    } while (0)

#define OK     0
#define BAD    SLUICE_EINVAL
#define UNSURE JSCAN_UNSURE

/* ---- Hand-picked cases --------------------------------------------------------------------- */

static void test_syntax(void **unused)
{
    (void)unused;
    EXPECT("{}", OK);
    EXPECT(" [ ] ", OK);
    EXPECT("\t\r\n{\"a\" : [1 , 2 ,{}] }\n", OK);
    EXPECT("\"top\"", OK);
    EXPECT("true", OK);
    EXPECT("false", OK);
    EXPECT("null", OK);
    EXPECT("", BAD);
    EXPECT("   ", BAD);
    EXPECT("tru", BAD);
    EXPECT("truex", BAD);
    EXPECT("True", BAD);
    EXPECT("nul", BAD);
    EXPECT("[1,]", BAD);
    EXPECT("[,1]", BAD);
    EXPECT("{,}", BAD);
    EXPECT("{\"a\":1,}", BAD);
    EXPECT("{\"a\" 1}", BAD);
    EXPECT("{\"a\":}", BAD);
    EXPECT("{1:1}", BAD);
    EXPECT("{'a':1}", BAD);
    EXPECT("[1 2]", BAD);
    EXPECT("[", BAD);
    EXPECT("]", BAD);
    EXPECT("[}", BAD);
    EXPECT("{]", BAD);
    EXPECT("{\"a\":1]", BAD);
    EXPECT("[1}", BAD);
    /* Trailing bytes. */
    EXPECT("1 2", BAD);
    EXPECT("{} x", BAD);
    EXPECT("[]]", BAD);
    EXPECT("{}{}", BAD);
    EXPECT("\"a\"\"b\"", BAD);
    EXPECT("{}\f", BAD);
    EXPECT("{}\v", BAD);
    EXPECT("\xef\xbb\xbf{}", BAD); /* a byte order mark is not whitespace */
    EXPECT("/* c */ {}", BAD);
    /* Duplicates are accepted (the last one counts). */
    EXPECT("{\"a\":1,\"a\":{\"b\":2},\"a\":[3]}", OK);
}

static void test_numbers(void **unused)
{
    (void)unused;
    EXPECT("0", OK);
    EXPECT("-0", OK);
    EXPECT("-0.0", OK);
    EXPECT("0e0", OK);
    EXPECT("0E+00", OK);
    EXPECT("1.5e-3", OK);
    EXPECT("01", BAD);
    EXPECT("-01", BAD);
    EXPECT("00", BAD);
    EXPECT("1.", BAD);
    EXPECT(".5", BAD);
    EXPECT("1.e5", BAD);
    EXPECT("1e", BAD);
    EXPECT("1e+", BAD);
    EXPECT("-", BAD);
    EXPECT("+1", BAD);
    EXPECT("-a", BAD);
    EXPECT("0x10", BAD);
    EXPECT("1_000", BAD);
    EXPECT("NaN", BAD);
    EXPECT("Infinity", BAD);
    EXPECT("-Infinity", BAD);
    /* Integers must fit in int64 (jansson: "too big integer"). */
    EXPECT("9223372036854775807", OK);
    EXPECT("-9223372036854775808", OK);
    EXPECT("9223372036854775808", BAD);
    EXPECT("-9223372036854775809", BAD);
    EXPECT("18446744073709551616", BAD);
    EXPECT("[99999999999999999999]", BAD);
    EXPECT("9223372036854775808.0", OK);
    EXPECT("9223372036854775808e0", OK);
    /* Reals must not overflow a double (jansson: "real number overflow"); underflow is fine. */
    EXPECT("1e999", BAD);
    EXPECT("-1e999", BAD);
    EXPECT("1e309", BAD);
    EXPECT("10e308", BAD);
    EXPECT("0.1e310", BAD);
    EXPECT("1e307", OK);
    EXPECT("9.99e307", OK);
    EXPECT("0.1e309", UNSURE);
    EXPECT("1e308", UNSURE);
    EXPECT("1.7976931348623157e308", UNSURE);
    EXPECT("1.8e308", UNSURE);
    EXPECT("1e-999", OK);
    EXPECT("0e99999999999999999999999", OK);
    EXPECT("0.000000e999", OK);
    EXPECT("1e-99999999999999999999999", OK);
    EXPECT("1e99999999999999999999999", BAD);
    EXPECT("123456789012345678901234567890.5", OK);
    EXPECT("0.00000000000000000000000000000000000001e340", OK);
}

static void test_strings(void **unused)
{
    (void)unused;
    EXPECT("\"\"", OK);
    EXPECT("\"\\\" \\\\ \\/ \\b \\f \\n \\r \\t\"", OK);
    EXPECT("\"\\a\"", BAD);
    EXPECT("\"\\x41\"", BAD);
    EXPECT("\"\\U0041\"", BAD);
    EXPECT("\"\\u004\"", BAD);
    EXPECT("\"\\u00G1\"", BAD);
    EXPECT("\"\\u0041\\u00e9\\u20AC\"", OK);
    EXPECT("\"\\", BAD);
    EXPECT("\"abc", BAD);
    EXPECT("\"a\tb\"", BAD); /* control bytes must be escaped */
    EXPECT("\"a\nb\"", BAD);
    EXPECT("\"a\x1f\"", BAD);
    EXPECT("\"a\x7f\"", OK);
    EXPECT("\"a\\\x80\"", BAD);
    /* Surrogates: only as a high-low pair. */
    EXPECT("\"\\uD83D\\uDE00\"", OK);
    EXPECT("\"\\udbff\\udfff\"", OK);
    EXPECT("\"\\uD800\"", BAD);
    EXPECT("\"\\uD800x\"", BAD);
    EXPECT("\"\\uD800\\n\"", BAD);
    EXPECT("\"\\uD800\\u0041\"", BAD);
    EXPECT("\"\\uD800\\uD800\"", BAD);
    EXPECT("\"\\uDC00\"", BAD);
    EXPECT("\"\\uDC00\\uD800\"", BAD);
    EXPECT("\"\\uD800\\uDC0\"", BAD);
    /* \u0000: a value may hold it (JSON_ALLOW_NUL), a member name may not. */
    EXPECT("\"a\\u0000b\"", OK);
    EXPECT("{\"a\":\"\\u0000\"}", OK);
    EXPECT("{\"\\u0000\":1}", BAD);
    EXPECT("{\"a\\u0000b\":1}", BAD);
    EXPECT("{\"a\":{\"x\\u0000\":1}}", BAD);
    /* UTF-8. */
    EXPECT("\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"", OK);
    EXPECT("\"\xf4\x8f\xbf\xbf\"", OK);  /* U+10FFFF */
    EXPECT("\"\xee\x80\x80\"", OK);      /* U+E000 */
    EXPECT("\"\xed\x9f\xbf\"", OK);      /* U+D7FF */
    EXPECT("\"\xc0\xaf\"", BAD);         /* overlong / */
    EXPECT("\"\xc1\xbf\"", BAD);         /* overlong */
    EXPECT("\"\xe0\x80\xaf\"", BAD);     /* overlong, 3 bytes */
    EXPECT("\"\xe0\x9f\xbf\"", BAD);     /* overlong U+07FF */
    EXPECT("\"\xf0\x80\x80\xaf\"", BAD); /* overlong, 4 bytes */
    EXPECT("\"\xf0\x8f\xbf\xbf\"", BAD); /* overlong U+FFFF */
    EXPECT("\"\xed\xa0\x80\"", BAD);     /* U+D800 encoded */
    EXPECT("\"\xed\xbf\xbf\"", BAD);     /* U+DFFF encoded */
    EXPECT("\"\xf4\x90\x80\x80\"", BAD); /* past U+10FFFF */
    EXPECT("\"\xf5\x80\x80\x80\"", BAD);
    EXPECT("\"\xff\"", BAD);
    EXPECT("\"\x80\"", BAD); /* stray continuation byte */
    EXPECT("\"\xc3\"", BAD); /* cut short by the quote */
    EXPECT("\"\xe2\x82\"", BAD);
    EXPECT("\"\xc3", BAD); /* cut short by the end */
    EXPECT("\"\xc3\x28\"", BAD);
    EXPECT("\xc3\xa9", BAD); /* outside a string */
    EXPECT("{\"\xc3\xa9\":1}", OK);
    EXPECT("{\"\xc0\xaf\":1}", BAD);
}

/* Long strings are scanned 8 bytes at a time: every special byte at every offset in such a
 * block, and strings ending at every offset, are judged as jansson judges them. */
static void test_string_blocks(void **unused)
{
    static const char *specials[] = {"\x01",         "\x1f",   " ",        "\"",   "\\", "\\n",
                                     "\x7f",         "\x80",   "\xc3\xa9", "\xff", "~",  "!",
                                     "\xe2\x82\xac", "\\u0041"};
    char doc[64];

    (void)unused;
    for (size_t k = 0; k < sizeof specials / sizeof *specials; k++) {
        for (size_t at = 0; at < 24; at++) {
            size_t n = strlen(specials[k]), len = 0;

            doc[len++] = '"';
            memset(doc + len, 'x', at);
            len += at;
            memcpy(doc + len, specials[k], n);
            len += n;
            memset(doc + len, 'y', 20);
            len += 20;
            doc[len++] = '"';
            check_doc(doc, len);
        }
    }
    for (size_t at = 0; at < 40; at++) {
        doc[0] = '"';
        memset(doc + 1, 'z', at);
        check_doc(doc, at + 1); /* never closed */
        doc[at + 1] = '"';
        assert_int_equal(check_doc(doc, at + 2), 0);
    }
}

static void test_nul_bytes(void **unused)
{
    (void)unused;
    EXPECT("\0", BAD);
    EXPECT("\0{}", BAD);
    EXPECT("{}\0", BAD);
    EXPECT("\"a\0b\"", BAD);
    EXPECT("\"a\"\0", BAD);
    EXPECT("[\0]", BAD);
    EXPECT("{\"a\0\":1}", BAD);
    /* jansson loses a NUL byte read just after a number or literal: the scanner leaves those to
     * it. */
    EXPECT("1\0", UNSURE);
    EXPECT("[1\0]", UNSURE);
    EXPECT("[true\0,1]", UNSURE);
    EXPECT("1\0\0", UNSURE);
    EXPECT("1\0"
           "2",
           UNSURE);
}

/* Nesting at, under and over JSCAN_MAX_DEPTH, with every kind of innermost value. */
static void test_depth(void **unused)
{
    static const char *inner[] = {"", "1", "{}", "[]", "\"s\"", "{\"a\":1}", "[[]]"};
    size_t cap = 8 * JSCAN_MAX_DEPTH + 64;
    char *doc = malloc(cap);

    (void)unused;
    assert_non_null(doc);
    for (size_t n = JSCAN_MAX_DEPTH - 3; n <= JSCAN_MAX_DEPTH + 2; n++) {
        for (size_t k = 0; k < sizeof inner / sizeof *inner; k++) {
            size_t len = 0, ilen = strlen(inner[k]);

            for (size_t d = 0; d < n; d++)
                doc[len++] = '[';
            memcpy(doc + len, inner[k], ilen);
            len += ilen;
            for (size_t d = 0; d < n; d++)
                doc[len++] = ']';
            check_doc(doc, len);
            /* The same in objects: {"a":{"a":...}}. */
            len = 0;
            for (size_t d = 0; d < n; d++) {
                memcpy(doc + len, "{\"a\":", 5);
                len += 5;
            }
            memcpy(doc + len, *inner[k] ? inner[k] : "0", *inner[k] ? ilen : 1);
            len += *inner[k] ? ilen : 1;
            for (size_t d = 0; d < n; d++)
                doc[len++] = '}';
            check_doc(doc, len);
        }
    }
    /* The exact limit: 2048 empty arrays nest, 2049 do not; 2047 arrays hold a scalar, 2048
     * do not. */
    memset(doc, '[', JSCAN_MAX_DEPTH);
    memset(doc + JSCAN_MAX_DEPTH, ']', JSCAN_MAX_DEPTH);
    assert_int_equal(jscan_validate(doc, 2 * JSCAN_MAX_DEPTH, NULL), 0);
    memset(doc, '[', JSCAN_MAX_DEPTH + 1);
    memset(doc + JSCAN_MAX_DEPTH + 1, ']', JSCAN_MAX_DEPTH + 1);
    assert_int_equal(jscan_validate(doc, 2 * JSCAN_MAX_DEPTH + 2, NULL), SLUICE_EINVAL);
    memset(doc, '[', JSCAN_MAX_DEPTH - 1);
    doc[JSCAN_MAX_DEPTH - 1] = '7';
    memset(doc + JSCAN_MAX_DEPTH, ']', JSCAN_MAX_DEPTH - 1);
    assert_int_equal(jscan_validate(doc, 2 * JSCAN_MAX_DEPTH - 1, NULL), 0);
    memset(doc, '[', JSCAN_MAX_DEPTH);
    doc[JSCAN_MAX_DEPTH] = '7';
    memset(doc + JSCAN_MAX_DEPTH + 1, ']', JSCAN_MAX_DEPTH);
    assert_int_equal(jscan_validate(doc, 2 * JSCAN_MAX_DEPTH + 1, NULL), SLUICE_EINVAL);
    /* Far deeper than the limit: refused without recursion. */
    {
        size_t big = 200000;
        char *deep = malloc(2 * big);

        assert_non_null(deep);
        memset(deep, '[', big);
        memset(deep + big, ']', big);
        assert_int_equal(jscan_validate(deep, 2 * big, NULL), SLUICE_EINVAL);
        free(deep);
    }
    free(doc);
}

/* ---- Picking ------------------------------------------------------------------------------ */

static void test_pick(void **unused)
{
    static const char doc[] =
        "{\"user\": {\"id\": \"u-1\", \"tier\": 3}, \"big\": [1, 2, {\"deep\": true}],"
        " \"us\\u0065r\": {\"id\": \"escaped-wins\"}, \"n\": 2.0, \"s\": \"a\\u0000b\"}";
    jpick_path p[] = {{"input.user.id", 13}, {"big.2.deep", 10}, {"n", 1}, {"s", 1}};
    json_t *t = NULL, *full = json_loads(doc, FLAGS, NULL);
    char buf[64];
    size_t len;
    int64_t n;

    (void)unused;
    assert_int_equal(jscan_validate(doc, sizeof doc - 1, NULL), 0);
    assert_int_equal(jpick_parse(doc, sizeof doc - 1, p, 4, &t), SLUICE_OK);
    /* The later "user" (written with an escape) replaces the first, as in jansson. */
    assert_int_equal(dotpath_extract(t, "user.id", buf, sizeof buf, &len), 0);
    assert_string_equal(buf, "escaped-wins");
    assert_int_equal(dotpath_extract(full, "user.id", buf, sizeof buf, &len), 0);
    assert_string_equal(buf, "escaped-wins");
    assert_int_equal(dotpath_extract(t, "big.2.deep", buf, sizeof buf, &len), 0);
    assert_string_equal(buf, "true");
    assert_int_equal(json_array_size(json_object_get(t, "big")), 3);
    assert_int_equal(dotpath_number(t, "n", &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(dotpath_extract(t, "s", buf, sizeof buf, &len), 0);
    assert_int_equal(len, 3);
    assert_memory_equal(buf, "a\0b", 3);
    /* Only what the paths reach was built. */
    assert_null(json_object_get(t, "x"));
    assert_int_equal(json_object_size(json_object_get(t, "user")), 1);
    json_decref(t);
    json_decref(full);
}

static const char oom_doc[] = "{\"a\": {\"b\": [0, {\"c\": \"x\"}, 2]}, \"k\\u0065y\": \"v\","
                              " \"a\": {\"b\": [5, {\"c\": \"y\"}]}, \"z\": 1}";

static int pick_body(void *arg)
{
    jpick_path p[] = {{"a.b.1.c", 7}, {"key", 3}, {"a.b.0", 5}, {"z", 1},   {"a.b.9", 5},
                      {"q", 1},       {"a", 1},   {"k", 1},     {"a.b", 3}, {"key.x", 5}};
    json_t *t = NULL;
    char buf[32];
    size_t len;
    int rc;

    (void)arg;
    rc = jpick_parse(oom_doc, sizeof oom_doc - 1, p, sizeof p / sizeof *p, &t);
    if (rc != SLUICE_OK) {
        assert_null(t);
        return rc;
    }
    assert_int_equal(dotpath_extract(t, "a.b.1.c", buf, sizeof buf, &len), 0);
    assert_string_equal(buf, "y");
    assert_int_equal(dotpath_extract(t, "key", buf, sizeof buf, &len), 0);
    assert_string_equal(buf, "v");
    json_decref(t);
    return SLUICE_OK;
}

static void test_pick_oom(void **unused)
{
    (void)unused;
    assert_true(oom_sweep(pick_body, NULL, 10000) > 5);
}

/* ---- Corpora ------------------------------------------------------------------------------- */

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    long n;

    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    *len = fread(buf, 1, (size_t)n, f);
    buf[*len] = '\0';
    fclose(f);
    return buf;
}

/* Checks every C string literal of src that looks like JSON, with its C escapes undone. */
static size_t check_c_literals(const char *src, size_t len)
{
    char *out = malloc(len + 1);
    size_t n = 0;

    assert_non_null(out);
    for (size_t i = 0; i < len; i++) {
        size_t o = 0;

        if (src[i] != '"' || (i > 0 && src[i - 1] == '\''))
            continue;
        for (i++; i < len && src[i] != '"' && src[i] != '\n'; i++) {
            char c = src[i];

            if (c == '\\' && i + 1 < len) {
                c = src[++i];
                switch (c) {
                case 'n':
                    c = '\n';
                    break;
                case 't':
                    c = '\t';
                    break;
                case 'r':
                    c = '\r';
                    break;
                case '0':
                    c = '\0';
                    break;
                case 'x': {
                    unsigned v = 0;
                    int k = 0;

                    while (k < 2 && i + 1 < len && strchr("0123456789abcdefABCDEF", src[i + 1]) &&
                           src[i + 1]) {
                        char h = src[++i];

                        v = v * 16 + (unsigned)(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
                        k++;
                    }
                    c = (char)v;
                    break;
                }
                default:
                    break;
                }
            }
            out[o++] = c;
        }
        if (o > 0 && (out[0] == '{' || out[0] == '[')) {
            check_doc(out, o);
            n++;
        }
    }
    free(out);
    return n;
}

/* Checks every line of a file, and every tail of a line from a '{', '[' or '"' on. */
static size_t check_lines(const char *src, size_t len)
{
    size_t n = 0, start = 0;

    for (size_t i = 0; i <= len; i++) {
        if (i < len && src[i] != '\n')
            continue;
        check_doc(src + start, i - start);
        n++;
        for (size_t k = start; k < i; k++) {
            if (src[k] == '{' || src[k] == '[' || src[k] == '\'') {
                size_t from = src[k] == '\'' ? k + 1 : k;
                const char *q = src[k] == '\'' ? memchr(src + from, '\'', i - from) : NULL;

                check_doc(src + from, q ? (size_t)(q - (src + from)) : i - from);
                n++;
            }
        }
        start = i + 1;
    }
    return n;
}

/* How check_dir reads a file. */
#define AS_C_LITERALS 0 /* every JSON-looking C string literal */
#define AS_LINES      1 /* every line, and tails of lines */
#define AS_WHOLE      2 /* the whole file, one document (a fuzz corpus) */

static size_t check_dir(const char *rel, const char *suffix, int how)
{
    char dir[4096], path[8192];
    struct dirent *de;
    size_t n = 0;
    DIR *d;

    snprintf(dir, sizeof dir, "%s", test_source_path(rel));
    d = opendir(dir);
    assert_non_null(d);
    while ((de = readdir(d)) != NULL) {
        size_t nl = strlen(de->d_name), sl = strlen(suffix), len;
        char *src;

        if (de->d_name[0] == '.' || nl < sl || strcmp(de->d_name + nl - sl, suffix) != 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        src = read_all(path, &len);
        if (!src)
            continue;
        if (how == AS_WHOLE) {
            check_doc(src, len);
            n++;
        } else {
            n += how == AS_C_LITERALS ? check_c_literals(src, len) : check_lines(src, len);
        }
        free(src);
    }
    closedir(d);
    return n;
}

static void test_corpus_files(void **unused)
{
    size_t n = 0;

    (void)unused;
    n += check_dir("tests/unit", ".c", AS_C_LITERALS);
    n += check_dir("tests/server", ".sh", AS_LINES);
    n += check_dir("tests/fuzz/corpus/engine", "", AS_LINES);
    n += check_dir("examples", "", AS_LINES);
    n += check_dir("tests/fuzz/corpus/jscan", "", AS_WHOLE);
    print_message("corpus files: %zu documents (%ld valid, %ld invalid, %ld unsure so far)\n", n,
                  jscan_harness_seen.valid, jscan_harness_seen.invalid, jscan_harness_seen.unsure);
    assert_true(n > 1000);
}

/* ---- Generated documents ---------------------------------------------------------------- */

typedef struct gen {
    char *buf;
    size_t len, cap;
    test_rng *r;
} gen;

static void put(gen *g, const char *s, size_t n)
{
    if (g->len + n > g->cap) {
        g->cap = (g->len + n) * 2;
        g->buf = realloc(g->buf, g->cap);
        assert_non_null(g->buf);
    }
    memcpy(g->buf + g->len, s, n);
    g->len += n;
}

static void puts_(gen *g, const char *s)
{
    put(g, s, strlen(s));
}

static int pick_n(gen *g, int n)
{
    return (int)rng_range(g->r, 0, n - 1);
}

static void gen_ws(gen *g)
{
    static const char *ws[] = {"", "", "", " ", "\n", "\t", "\r\n  "};

    puts_(g, ws[pick_n(g, 7)]);
}

static void gen_string(gen *g, int name)
{
    static const char *names[] = {
        "a",    "b", "id",         "user",    "x",   "0",   "1",
        "tier", "",  "us\\u0065r", "\\u0061", "a.b", "k-1", "\\u00e9t\\u00e9"};
    static const char *pieces[] = {"abc",          " ",
                                   "\\\"",         "\\\\",
                                   "\\/",          "\\b",
                                   "\\f",          "\\n",
                                   "\\r",          "\\t",
                                   "\\u0041",      "\\u00e9",
                                   "\\u20ac",      "\\uD83D\\uDE00",
                                   "\\u0000",      "\xc3\xa9",
                                   "\xe2\x82\xac", "\xf0\x9f\x98\x80",
                                   "\x7f",         "\\uDBFF\\uDFFF",
                                   "xyz-0.9",      ",:[]{}"};

    put(g, "\"", 1);
    if (name && pick_n(g, 4) != 0) {
        puts_(g, names[pick_n(g, (int)(sizeof names / sizeof *names))]);
    } else {
        int n = pick_n(g, 5);

        for (int k = 0; k < n; k++) {
            const char *p = pieces[pick_n(g, (int)(sizeof pieces / sizeof *pieces))];

            if (name && strcmp(p, "\\u0000") == 0 && pick_n(g, 8) != 0)
                continue;
            puts_(g, p);
        }
    }
    put(g, "\"", 1);
}

static void gen_number(gen *g)
{
    static const char *special[] = {"0",
                                    "-0",
                                    "-0.0",
                                    "1",
                                    "-1",
                                    "2.0",
                                    "2.5",
                                    "1e2",
                                    "1E-2",
                                    "5.0e0",
                                    "9223372036854775807",
                                    "-9223372036854775808",
                                    "9223372036854775808",
                                    "1e308",
                                    "1e999",
                                    "-1e-999",
                                    "1.5e300",
                                    "123456789.123456789",
                                    "0.1",
                                    "1e15",
                                    "4611686018427387904.0",
                                    "-9223372036854775809.0"};
    char num[64];

    if (pick_n(g, 3) == 0) {
        puts_(g, special[pick_n(g, (int)(sizeof special / sizeof *special))]);
        return;
    }
    snprintf(num, sizeof num, "%s%d%s", pick_n(g, 3) == 0 ? "-" : "", pick_n(g, 100000),
             pick_n(g, 4) == 0   ? ".25"
             : pick_n(g, 6) == 0 ? "e3"
                                 : "");
    puts_(g, num);
}

static void gen_value(gen *g, int depth)
{
    int kind = depth > 5 ? pick_n(g, 5) : pick_n(g, 8);

    switch (kind) {
    case 0:
        gen_string(g, 0);
        break;
    case 1:
        gen_number(g);
        break;
    case 2:
        puts_(g, pick_n(g, 2) ? "true" : "false");
        break;
    case 3:
        puts_(g, "null");
        break;
    case 4:
        gen_number(g);
        break;
    case 5:
    case 6: {
        int n = pick_n(g, 5);

        put(g, "{", 1);
        for (int k = 0; k < n; k++) {
            if (k > 0)
                put(g, ",", 1);
            gen_ws(g);
            gen_string(g, 1);
            gen_ws(g);
            put(g, ":", 1);
            gen_ws(g);
            gen_value(g, depth + 1);
            gen_ws(g);
        }
        put(g, "}", 1);
        break;
    }
    default: {
        int n = pick_n(g, 5);

        put(g, "[", 1);
        for (int k = 0; k < n; k++) {
            if (k > 0)
                put(g, ",", 1);
            gen_ws(g);
            gen_value(g, depth + 1);
            gen_ws(g);
        }
        put(g, "]", 1);
    }
    }
}

/* One random change: a byte replaced, removed or inserted, a cut, or a slice repeated. */
static void mutate(gen *g)
{
    static const char bytes[] = {'\0',   '\x1f', '"',    '\\',   ',',    ':', ']', '}', '[',
                                 '{',    'e',    '-',    '0',    '.',    'u', 'D', ' ', '\x80',
                                 '\xc0', '\xed', '\xf4', '\xf5', '\xff', 'x', '1', '+'};
    size_t at = g->len ? (size_t)rng_range(g->r, 0, (int64_t)g->len - 1) : 0;
    char b = pick_n(g, 4) == 0 ? (char)pick_n(g, 256) : bytes[pick_n(g, (int)sizeof bytes)];

    switch (pick_n(g, 5)) {
    case 0:
        if (g->len)
            g->buf[at] = b;
        break;
    case 1:
        if (g->len) {
            memmove(g->buf + at, g->buf + at + 1, g->len - at - 1);
            g->len--;
        }
        break;
    case 2:
        put(g, " ", 1);
        memmove(g->buf + at + 1, g->buf + at, g->len - at - 1);
        g->buf[at] = b;
        break;
    case 3:
        g->len = at;
        break;
    default: {
        size_t n = (size_t)rng_range(g->r, 0, (int64_t)(g->len - at));
        char *copy = malloc(n + 1);

        assert_non_null(copy);
        memcpy(copy, g->buf + at, n);
        put(g, copy, n);
        free(copy);
    }
    }
}

static void test_generated(void **unused)
{
    test_rng r;
    gen g = {.buf = NULL, .len = 0, .cap = 0, .r = &r};
    long before_valid = jscan_harness_seen.valid, before_invalid = jscan_harness_seen.invalid;

    (void)unused;
    rng_seed(&r, 20261124);
    for (int i = 0; i < 30000; i++) {
        g.len = 0;
        gen_ws(&g);
        gen_value(&g, pick_n(&g, 4) == 0 ? 6 : 0);
        gen_ws(&g);
        if (i % 2 == 1) {
            int n = 1 + pick_n(&g, 3);

            for (int k = 0; k < n; k++)
                mutate(&g);
        }
        check_doc(g.buf ? g.buf : "", g.len);
    }
    free(g.buf);
    print_message("generated: %ld valid, %ld invalid, %ld unsure in all, %ld paths read\n",
                  jscan_harness_seen.valid, jscan_harness_seen.invalid, jscan_harness_seen.unsure,
                  jscan_harness_seen.paths);
    /* Both verdicts were exercised in bulk. */
    assert_true(jscan_harness_seen.valid - before_valid > 10000);
    assert_true(jscan_harness_seen.invalid - before_invalid > 5000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_syntax),       cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_strings),      cmocka_unit_test(test_string_blocks),
        cmocka_unit_test(test_nul_bytes),    cmocka_unit_test(test_depth),
        cmocka_unit_test(test_pick),         cmocka_unit_test(test_pick_oom),
        cmocka_unit_test(test_corpus_files), cmocka_unit_test(test_generated),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
