/* SPDX-License-Identifier: MIT */
/*
 * Tests of the dot-path module (src/policy/dotpath.c): path validation, key extraction from
 * nested objects and arrays for every JSON type, the canonical text of numbers (with a round-trip
 * property test over random doubles and integers), the `input.` prefix, keys that do not fit,
 * numeric tier fields, the exact reason messages, and that nothing is allocated.
 */
#include <locale.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "policy/dotpath.h"
#include "sluice/error.h"
#include "testutil.h"

static const char doc_text[] =
    "{"
    "  \"tenant_id\": \"acme\","
    "  \"user\": 12345,"
    "  \"negative\": -7,"
    "  \"big\": 9223372036854775807,"
    "  \"small\": -9223372036854775808,"
    "  \"ratio\": 0.1,"
    "  \"whole\": 5.0,"
    "  \"halves\": 2.5,"
    "  \"huge\": 1e300,"
    "  \"negzero\": -0.0,"
    "  \"flag\": true,"
    "  \"off\": false,"
    "  \"nothing\": null,"
    "  \"empty\": \"\","
    "  \"unicode\": \"caf\\u00e9 \\ud83d\\ude00\","
    "  \"nul\": \"a\\u0000b\","
    "  \"numeric_string\": \"42\","
    "  \"config\": {\"provider\": {\"name\": \"openai\", \"tier\": 3, \"rank\": 2.0}},"
    "  \"items\": [{\"id\": \"first\"}, {\"id\": 2}, [10, 20, 30]],"
    "  \"obj\": {},"
    "  \"arr\": [],"
    "  \"input\": {\"x\": \"inner\"},"
    "  \"a.b\": \"dotted\""
    "}";

static json_t *load(const char *text)
{
    json_error_t err;
    json_t *j = json_loads(text, JSON_ALLOW_NUL, &err);

    if (!j)
        fail_msg("json_loads: %s at line %d", err.text, err.line);
    return j;
}

static int setup_doc(void **state)
{
    *state = load(doc_text);
    return 0;
}

static int teardown_doc(void **state)
{
    json_decref(*state);
    /* A failed locale test must not leave its ',' decimal point to the tests after it. */
    setlocale(LC_NUMERIC, "C");
    return 0;
}

/* Extracts path from doc and checks the key (want_len bytes of want). */
static void expect_key_len(const json_t *doc, const char *path, const char *want, size_t want_len)
{
    char buf[256], msg[256];
    size_t len = 999;
    int rc = dotpath_extract_msg(doc, path, buf, sizeof buf, &len, msg, sizeof msg);

    if (rc != 0)
        fail_msg("dotpath_extract(\"%s\") = %d: %s", path, rc, msg);
    assert_string_equal(msg, "");
    assert_int_equal(len, want_len);
    assert_memory_equal(buf, want, want_len);
    assert_int_equal(buf[len], '\0');

    /* The message-less variant agrees. */
    len = 999;
    assert_int_equal(dotpath_extract(doc, path, buf, sizeof buf, &len), 0);
    assert_int_equal(len, want_len);
}

static void expect_key(const json_t *doc, const char *path, const char *want)
{
    expect_key_len(doc, path, want, strlen(want));
}

static void expect_extract_error(const json_t *doc, const char *path, int want_rc,
                                 const char *want_msg)
{
    char buf[64], msg[256];
    size_t len = 999;
    int rc;

    memset(buf, 'q', sizeof buf);
    rc = dotpath_extract_msg(doc, path, buf, sizeof buf, &len, msg, sizeof msg);
    if (rc != want_rc)
        fail_msg("dotpath_extract(\"%s\") = %d, expected %d (%s)", path, rc, want_rc, msg);
    assert_string_equal(msg, want_msg);
    assert_int_equal(len, 0);
    assert_int_equal(buf[0], 'q'); /* untouched */
    assert_int_equal(dotpath_extract(doc, path, buf, sizeof buf, &len), want_rc);
}

static void expect_number(const json_t *doc, const char *path, int64_t want)
{
    char msg[256];
    int64_t v = -1;
    int rc = dotpath_number_msg(doc, path, &v, msg, sizeof msg);

    if (rc != 0)
        fail_msg("dotpath_number(\"%s\") = %d: %s", path, rc, msg);
    assert_string_equal(msg, "");
    assert_int_equal(v, want);
    v = -1;
    assert_int_equal(dotpath_number(doc, path, &v), 0);
    assert_int_equal(v, want);
}

static void expect_number_error(const json_t *doc, const char *path, int want_rc,
                                const char *want_msg)
{
    char msg[256];
    int64_t v = -1;
    int rc = dotpath_number_msg(doc, path, &v, msg, sizeof msg);

    if (rc != want_rc)
        fail_msg("dotpath_number(\"%s\") = %d, expected %d (%s)", path, rc, want_rc, msg);
    assert_string_equal(msg, want_msg);
    assert_int_equal(v, 0);
    v = -1;
    assert_int_equal(dotpath_number(doc, path, &v), want_rc);
    assert_int_equal(v, 0);
}

/* --- validation ---------------------------------------------------------------------------- */

static void test_validate(void **state)
{
    static const char *const good[] = {
        "tenant_id",
        "config.provider.name",
        "items.0.id",
        "input.tenant_id",
        "input",
        "input.input",
        "a",
        "0",
        "a b.c-d",
        "inputx.y",
        "\xc3\xa9t\xc3\xa9",
    };
    static const struct {
        const char *path;
        const char *msg;
    } bad[] = {
        {"", "key path \"\": is empty"},
        {"input.", "key path \"input.\": nothing after \"input.\""},
        {".", "key path \".\": starts with a dot"},
        {".a", "key path \".a\": starts with a dot"},
        {"a.", "key path \"a.\": ends with a dot"},
        {"a.b.", "key path \"a.b.\": ends with a dot"},
        {"a..b", "key path \"a..b\": empty segment at offset 2 (two dots in a row)"},
        {"input..a", "key path \"input..a\": empty segment at offset 6 (two dots in a row)"},
        {"input.a.", "key path \"input.a.\": ends with a dot"},
        {"..", "key path \"..\": starts with a dot"},
        {"input.workflow_,d", "key path \"input.workflow_,d\": comma at offset 15"},
        {"a.b\tc", "key path \"a.b\tc\": control byte at offset 3"},
    };
    char msg[128];

    (void)state;
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        strcpy(msg, "stale");
        assert_int_equal(dotpath_validate(good[i], msg, sizeof msg), 0);
        assert_string_equal(msg, "");
        assert_int_equal(dotpath_validate(good[i], NULL, 0), 0);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(dotpath_validate(bad[i].path, msg, sizeof msg), SLUICE_EINVAL);
        assert_string_equal(msg, bad[i].msg);
        assert_int_equal(dotpath_validate(bad[i].path, NULL, 0), SLUICE_EINVAL);
    }
    assert_int_equal(dotpath_validate(NULL, msg, sizeof msg), SLUICE_EINVAL);
    assert_string_equal(msg, "key path: none given");

    /* Truncation keeps the message NUL-terminated. */
    for (size_t len = 1; len < 40; len++) {
        char m[40];

        assert_int_equal(dotpath_validate("a..b", m, len), SLUICE_EINVAL);
        assert_true(strlen(m) < len);
    }
}

/* --- extraction ---------------------------------------------------------------------------- */

static void test_extract_strings(void **state)
{
    const json_t *doc = *state;

    expect_key(doc, "tenant_id", "acme");
    expect_key(doc, "empty", "");
    expect_key(doc, "unicode", "caf\xc3\xa9 \xf0\x9f\x98\x80");
    expect_key(doc, "numeric_string", "42");
    /* Embedded NULs are part of the key. */
    expect_key_len(doc, "nul", "a\0b", 3);
}

static void test_extract_nested_and_prefix(void **state)
{
    const json_t *doc = *state;

    expect_key(doc, "config.provider.name", "openai");
    expect_key(doc, "input.config.provider.name", "openai");
    expect_key(doc, "input.tenant_id", "acme");
    expect_key(doc, "config.provider.tier", "3");
    /* Only one `input.` is dropped: a member called "input" is reached through it. */
    expect_key(doc, "input.input.x", "inner");
    expect_extract_error(doc, "input.x", SLUICE_ENOTFOUND,
                         "key path \"input.x\": no member \"x\" in the input");
    /* A member whose name has a dot cannot be named by a path. */
    expect_extract_error(doc, "a.b", SLUICE_ENOTFOUND,
                         "key path \"a.b\": no member \"a\" in the input");
}

static void test_extract_numbers_and_booleans(void **state)
{
    const json_t *doc = *state;

    expect_key(doc, "user", "12345");
    expect_key(doc, "negative", "-7");
    expect_key(doc, "big", "9223372036854775807");
    expect_key(doc, "small", "-9223372036854775808");
    expect_key(doc, "ratio", "0.1");
    expect_key(doc, "whole", "5"); /* the same key as the integer 5 */
    expect_key(doc, "halves", "2.5");
    expect_key(doc, "huge", "1e+300");
    expect_key(doc, "negzero", "0");
    expect_key(doc, "config.provider.rank", "2");
    expect_key(doc, "flag", "true");
    expect_key(doc, "off", "false");
}

static void test_extract_real_canonical_forms(void **state)
{
    static const struct {
        const char *json;
        const char *key;
    } cases[] = {
        {"0.30000000000000004", "0.30000000000000004"}, /* needs all 17 digits */
        {"0.3", "0.3"},
        {"0.1e1", "1"},
        {"1.5e-7", "1.5e-07"},
        {"123456789012345.6", "123456789012345.6"}, /* 16 digits */
        {"3.141592653589793", "3.141592653589793"},
        {"-2.5E+10", "-25000000000"},
        {"1e21", "1e+21"},
        {"4.9406564584124654e-324", "4.94065645841247e-324"},  /* smallest subnormal */
        {"1.7976931348623157e308", "1.7976931348623157e+308"}, /* largest double */
    };

    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[64];
        json_t *doc;

        snprintf(text, sizeof text, "{\"v\": %s}", cases[i].json);
        doc = load(text);
        expect_key(doc, "v", cases[i].key);
        json_decref(doc);
    }
}

static void test_extract_arrays(void **state)
{
    const json_t *doc = *state;
    json_t *top;

    expect_key(doc, "items.0.id", "first");
    expect_key(doc, "input.items.1.id", "2");
    expect_key(doc, "items.2.0", "10");
    expect_key(doc, "items.2.2", "30");
    expect_extract_error(doc, "items.3", SLUICE_ENOTFOUND,
                         "key path \"items.3\": index 3 is past the end of \"items\" (3 elements)");
    expect_extract_error(
        doc, "items.2.3", SLUICE_ENOTFOUND,
        "key path \"items.2.3\": index 3 is past the end of \"items.2\" (3 elements)");
    expect_extract_error(doc, "arr.0", SLUICE_ENOTFOUND,
                         "key path \"arr.0\": index 0 is past the end of \"arr\" (0 elements)");
    expect_extract_error(
        doc, "items.99999999999999999999999", SLUICE_ENOTFOUND,
        "key path \"items.99999999999999999999999\": index 99999999999999999999999 is past "
        "the end of \"items\" (3 elements)");
    expect_extract_error(doc, "items.id", SLUICE_EINVAL,
                         "key path \"items.id\": \"items\" is an array and \"id\" is not an index");
    expect_extract_error(doc, "items.01", SLUICE_EINVAL,
                         "key path \"items.01\": \"items\" is an array and \"01\" is not an index");
    expect_extract_error(doc, "items.-1", SLUICE_EINVAL,
                         "key path \"items.-1\": \"items\" is an array and \"-1\" is not an index");
    expect_extract_error(doc, "items.+1", SLUICE_EINVAL,
                         "key path \"items.+1\": \"items\" is an array and \"+1\" is not an index");

    /* An input that is itself an array. */
    top = load("[\"zero\", {\"name\": \"one\"}]");
    expect_key(top, "0", "zero");
    expect_key(top, "input.1.name", "one");
    expect_extract_error(top, "2", SLUICE_ENOTFOUND,
                         "key path \"2\": index 2 is past the end of the input (2 elements)");
    expect_extract_error(top, "name", SLUICE_EINVAL,
                         "key path \"name\": the input is an array and \"name\" is not an index");
    json_decref(top);

    /* Numeric member names of objects are plain names. */
    top = load("{\"0\": \"object zero\", \"01\": \"oh-one\"}");
    expect_key(top, "0", "object zero");
    expect_key(top, "01", "oh-one");
    json_decref(top);
}

static void test_extract_wrong_kinds(void **state)
{
    const json_t *doc = *state;
    json_t *scalar;

    expect_extract_error(doc, "nothing", SLUICE_EINVAL, "key path \"nothing\": value is null");
    expect_extract_error(doc, "input.nothing", SLUICE_EINVAL,
                         "key path \"input.nothing\": value is null");
    expect_extract_error(doc, "config", SLUICE_EINVAL,
                         "key path \"config\": value is an object, not a string, number or "
                         "boolean");
    expect_extract_error(doc, "obj", SLUICE_EINVAL,
                         "key path \"obj\": value is an object, not a string, number or boolean");
    expect_extract_error(doc, "items", SLUICE_EINVAL,
                         "key path \"items\": value is an array, not a string, number or boolean");
    expect_extract_error(doc, "input", SLUICE_EINVAL,
                         "key path \"input\": value is an object, not a string, number or "
                         "boolean");
    /* Through a scalar. */
    expect_extract_error(doc, "tenant_id.name", SLUICE_EINVAL,
                         "key path \"tenant_id.name\": \"tenant_id\" is a string, not an object "
                         "or array");
    expect_extract_error(doc, "config.provider.tier.x", SLUICE_EINVAL,
                         "key path \"config.provider.tier.x\": \"config.provider.tier\" is an "
                         "integer, not an object or array");
    expect_extract_error(doc, "nothing.x", SLUICE_EINVAL,
                         "key path \"nothing.x\": \"nothing\" is null, not an object or array");
    expect_extract_error(doc, "flag.x", SLUICE_EINVAL,
                         "key path \"flag.x\": \"flag\" is a boolean, not an object or array");
    expect_extract_error(doc, "ratio.0", SLUICE_EINVAL,
                         "key path \"ratio.0\": \"ratio\" is a real number, not an object or "
                         "array");

    /* An input that is a scalar. */
    scalar = json_string("just a string");
    expect_extract_error(scalar, "x", SLUICE_EINVAL,
                         "key path \"x\": the input is a string, not an object or array");
    json_decref(scalar);
}

static void test_extract_missing(void **state)
{
    const json_t *doc = *state;

    expect_extract_error(doc, "tenant", SLUICE_ENOTFOUND,
                         "key path \"tenant\": no member \"tenant\" in the input");
    expect_extract_error(doc, "input.tenant", SLUICE_ENOTFOUND,
                         "key path \"input.tenant\": no member \"tenant\" in the input");
    expect_extract_error(doc, "config.provider.model", SLUICE_ENOTFOUND,
                         "key path \"config.provider.model\": no member \"model\" in "
                         "\"config.provider\"");
    expect_extract_error(doc, "config.region.name", SLUICE_ENOTFOUND,
                         "key path \"config.region.name\": no member \"region\" in \"config\"");
    expect_extract_error(doc, "items.0.name", SLUICE_ENOTFOUND,
                         "key path \"items.0.name\": no member \"name\" in \"items.0\"");
    expect_extract_error(doc, "Tenant_ID", SLUICE_ENOTFOUND,
                         "key path \"Tenant_ID\": no member \"Tenant_ID\" in the input");
    expect_extract_error(NULL, "tenant_id", SLUICE_ENOTFOUND,
                         "key path \"tenant_id\": the task has no input");
}

static void test_extract_bad_paths(void **state)
{
    const json_t *doc = *state;
    char buf[16], msg[128];
    size_t len = 7;

    expect_extract_error(doc, "", SLUICE_EINVAL, "key path \"\": is empty");
    expect_extract_error(doc, "config..name", SLUICE_EINVAL,
                         "key path \"config..name\": empty segment at offset 7 (two dots in a "
                         "row)");
    expect_extract_error(doc, "input.", SLUICE_EINVAL,
                         "key path \"input.\": nothing after \"input.\"");
    /* A bad path is reported even without an input. */
    expect_extract_error(NULL, ".x", SLUICE_EINVAL, "key path \".x\": starts with a dot");

    assert_int_equal(dotpath_extract_msg(doc, NULL, buf, sizeof buf, &len, msg, sizeof msg),
                     SLUICE_EINVAL);
    assert_string_equal(msg, "key path: none given");
    assert_int_equal(len, 0);
    assert_int_equal(dotpath_extract_msg(doc, "tenant_id", buf, sizeof buf, NULL, msg, sizeof msg),
                     SLUICE_EINVAL);
}

static void test_extract_buffer_sizes(void **state)
{
    const json_t *doc = *state;
    char buf[8], msg[128];
    size_t len;

    /* "acme" needs 4 bytes and its NUL. */
    len = 0;
    assert_int_equal(dotpath_extract(doc, "tenant_id", buf, 5, &len), 0);
    assert_string_equal(buf, "acme");
    assert_int_equal(len, 4);

    memset(buf, 'q', sizeof buf);
    len = 0;
    assert_int_equal(dotpath_extract_msg(doc, "tenant_id", buf, 4, &len, msg, sizeof msg),
                     SLUICE_ERANGE);
    assert_int_equal(len, 4); /* what it needs, without the NUL */
    assert_int_equal(buf[0], 'q');
    assert_string_equal(msg, "key path \"tenant_id\": key of 4 bytes does not fit in a buffer of 4 "
                             "bytes");

    /* A size query. */
    len = 0;
    assert_int_equal(dotpath_extract(doc, "config.provider.name", NULL, 0, &len), SLUICE_ERANGE);
    assert_int_equal(len, 6);
    len = 0;
    assert_int_equal(dotpath_extract(doc, "big", buf, sizeof buf, &len), SLUICE_ERANGE);
    assert_int_equal(len, 19);

    /* The empty key fits in one byte. */
    assert_int_equal(dotpath_extract(doc, "empty", buf, 1, &len), 0);
    assert_int_equal(len, 0);
    assert_string_equal(buf, "");
    assert_int_equal(dotpath_extract(doc, "empty", NULL, 0, &len), SLUICE_ERANGE);
    assert_int_equal(len, 0);
}

static void test_extract_long_keys(void **state)
{
    enum { N = 100000 };
    char *big = malloc(N + 1), *buf = malloc(N + 1);
    json_t *doc;
    size_t len = 0;

    (void)state;
    assert_non_null(big);
    assert_non_null(buf);
    for (size_t i = 0; i < N; i++)
        big[i] = (char)('a' + i % 26);
    big[N] = '\0';
    doc = json_object();
    assert_int_equal(json_object_set_new(doc, "payload", json_string(big)), 0);

    assert_int_equal(dotpath_extract(doc, "input.payload", buf, N + 1, &len), 0);
    assert_int_equal(len, N);
    assert_memory_equal(buf, big, N + 1);
    assert_int_equal(dotpath_extract(doc, "payload", buf, N, &len), SLUICE_ERANGE);
    assert_int_equal(len, N);

    /* A long member name and a long path: quoted in the reason up to 128 bytes. */
    {
        char msg[512], want[512];
        char path[300];

        memset(path, 'k', 200);
        path[200] = '\0';
        assert_int_equal(dotpath_extract_msg(doc, path, buf, 16, &len, msg, sizeof msg),
                         SLUICE_ENOTFOUND);
        snprintf(want, sizeof want, "key path \"%.128s\": no member \"%.128s\" in the input", path,
                 path);
        assert_string_equal(msg, want);
    }
    json_decref(doc);
    free(big);
    free(buf);
}

static void test_extract_deep(void **state)
{
    enum { DEPTH = 500 };
    char path[DEPTH * 2 + 16];
    json_t *root = json_object(), *cur = root;
    char buf[16];
    size_t len = 0;

    (void)state;
    path[0] = '\0';
    for (int i = 0; i < DEPTH; i++) {
        json_t *child = json_object();

        assert_int_equal(json_object_set_new(cur, "d", child), 0);
        cur = child;
        strcat(path, i ? ".d" : "d");
    }
    assert_int_equal(json_object_set_new(cur, "leaf", json_integer(7)), 0);
    strcat(path, ".leaf");
    assert_int_equal(dotpath_extract(root, path, buf, sizeof buf, &len), 0);
    assert_string_equal(buf, "7");
    strcat(path, ".x");
    assert_int_equal(dotpath_extract(root, path, buf, sizeof buf, &len), SLUICE_EINVAL);
    json_decref(root);
}

/* A locale whose decimal point is ',', built with glibc's localedef (Debian's libc-bin, which is
 * Essential, so every machine that builds sluice has it) into dir from a two-character charmap and
 * an LC_NUMERIC section, then selected through LOCPATH. localedef complains about everything the
 * source leaves out (hence -c and no output); what counts is that setlocale then reports ','.
 * Returns 1 when LC_NUMERIC is set to it. */
static int use_built_comma_locale(const char *dir)
{
    char path[256], cmd[1024];
    FILE *f;

    snprintf(path, sizeof path, "%s/numeric.src", dir);
    if (!(f = fopen(path, "w")))
        return 0;
    fputs("LC_NUMERIC\ndecimal_point \"<U002C>\"\nthousands_sep \"\"\ngrouping -1\n"
          "END LC_NUMERIC\n",
          f);
    fclose(f);
    snprintf(path, sizeof path, "%s/charmap.src", dir);
    if (!(f = fopen(path, "w")))
        return 0;
    fputs("<code_set_name> SLUICE-COMMA\n<comment_char> %\n<escape_char> /\nCHARMAP\n"
          "<U002C> /x2c COMMA\n<U002E> /x2e FULL STOP\nEND CHARMAP\n",
          f);
    fclose(f);
    snprintf(cmd, sizeof cmd,
             "localedef -c -i %s/numeric.src -f %s/charmap.src %s/sluice_comma >/dev/null 2>&1",
             dir, dir, dir);
    (void)system(cmd);
    if (setenv("LOCPATH", dir, 1) != 0)
        return 0;
    return setlocale(LC_NUMERIC, "sluice_comma") != NULL;
}

/* The decimal point is '.' whatever LC_NUMERIC says. The comma locale is built by the test (or,
 * failing that, an installed one is used), so that this never depends on which locales the
 * machine happens to have; when neither works the test fails, it does not skip. */
static void test_extract_locale_independent(void **state)
{
    static const char *const comma_locales[] = {"de_DE.UTF-8", "fr_FR.UTF-8", "de_DE", "fr_FR"};
    const json_t *doc = *state;
    char dir[] = "/tmp/sluice-locale-XXXXXX", cmd[64];
    int found;

    assert_non_null(mkdtemp(dir));
    found = use_built_comma_locale(dir);
    unsetenv("LOCPATH");
    for (size_t i = 0; i < sizeof comma_locales / sizeof comma_locales[0] && !found; i++)
        found = setlocale(LC_NUMERIC, comma_locales[i]) != NULL;
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    (void)system(cmd);
    if (!found)
        fail_msg("no locale with a ',' decimal point: localedef (Debian libc-bin) could not build "
                 "one and none is installed (Debian locales: localedef -i de_DE -f UTF-8 "
                 "de_DE.UTF-8)");
    assert_string_equal(localeconv()->decimal_point, ",");
    expect_key(doc, "halves", "2.5");
    expect_key(doc, "ratio", "0.1");
    setlocale(LC_NUMERIC, "C");
}

/* --- numbers ------------------------------------------------------------------------------- */

static void test_number(void **state)
{
    const json_t *doc = *state;
    json_t *edge;

    expect_number(doc, "user", 12345);
    expect_number(doc, "input.negative", -7);
    expect_number(doc, "big", INT64_MAX);
    expect_number(doc, "small", INT64_MIN);
    expect_number(doc, "whole", 5);
    expect_number(doc, "negzero", 0);
    expect_number(doc, "config.provider.tier", 3);
    expect_number(doc, "config.provider.rank", 2);
    expect_number(doc, "items.2.1", 20);

    expect_number_error(doc, "halves", SLUICE_EINVAL,
                        "key path \"halves\": value 2.5 is not a whole number");
    expect_number_error(doc, "ratio", SLUICE_EINVAL,
                        "key path \"ratio\": value 0.1 is not a whole number");
    expect_number_error(doc, "huge", SLUICE_ERANGE,
                        "key path \"huge\": value 1e+300 is out of the int64 range");
    expect_number_error(doc, "numeric_string", SLUICE_EINVAL,
                        "key path \"numeric_string\": value is a string, not a number");
    expect_number_error(doc, "flag", SLUICE_EINVAL,
                        "key path \"flag\": value is a boolean, not a number");
    expect_number_error(doc, "nothing", SLUICE_EINVAL,
                        "key path \"nothing\": value is null, not a number");
    expect_number_error(doc, "items", SLUICE_EINVAL,
                        "key path \"items\": value is an array, not a number");
    expect_number_error(doc, "config", SLUICE_EINVAL,
                        "key path \"config\": value is an object, not a number");
    expect_number_error(doc, "tier", SLUICE_ENOTFOUND,
                        "key path \"tier\": no member \"tier\" in the input");
    expect_number_error(NULL, "tier", SLUICE_ENOTFOUND, "key path \"tier\": the task has no input");
    expect_number_error(doc, "a..b", SLUICE_EINVAL,
                        "key path \"a..b\": empty segment at offset 2 (two dots in a row)");
    assert_int_equal(dotpath_number(doc, "user", NULL), SLUICE_EINVAL);

    /* The edges of int64 as reals: -2^63 fits, 2^63 does not. */
    edge = load("{\"lo\": -9223372036854775808.0, \"hi\": 9223372036854775808.0, "
                "\"below\": 9223372036854774784.0, \"frac\": -0.5, \"tiny\": 1e-300}");
    expect_number(edge, "lo", INT64_MIN);
    expect_number(edge, "below", INT64_C(9223372036854774784));
    expect_number_error(edge, "hi", SLUICE_ERANGE,
                        "key path \"hi\": value 9.223372036854776e+18 is out of the int64 range");
    expect_number_error(edge, "frac", SLUICE_EINVAL,
                        "key path \"frac\": value -0.5 is not a whole number");
    expect_number_error(edge, "tiny", SLUICE_EINVAL,
                        "key path \"tiny\": value 1e-300 is not a whole number");
    json_decref(edge);
}

/* --- properties ---------------------------------------------------------------------------- */

/* Random doubles (every bit pattern but NaN and infinity) and integers: the key reads back as the
 * same number, and is the shortest text that does. */
static void test_property_number_round_trip(void **state)
{
    test_rng r;
    char buf[64];
    size_t len;

    (void)state;
    rng_seed(&r, 7);
    for (int i = 0; i < 20000; i++) {
        uint64_t b = rng_next(&r);
        double d;
        json_t *doc;

        memcpy(&d, &b, sizeof d);
        doc = json_object();
        if (i % 2 == 0) {
            json_t *v = json_real(d);

            if (!v) { /* NaN or infinity: jansson refuses them */
                json_decref(doc);
                continue;
            }
            json_object_set_new(doc, "v", v);
            assert_int_equal(dotpath_extract(doc, "v", buf, sizeof buf, &len), 0);
            assert_int_equal(strlen(buf), len);
            assert_true(strtod(buf, NULL) == d);
            if (d != 0.0) {
                char shorter[64];

                /* It is the first of %.15g, %.16g and %.17g that reads back. */
                for (int prec = 15; prec <= 17; prec++) {
                    snprintf(shorter, sizeof shorter, "%.*g", prec, d);
                    if (strtod(shorter, NULL) == d)
                        break;
                }
                assert_string_equal(buf, shorter);
            } else {
                assert_string_equal(buf, "0");
            }
        } else {
            json_int_t n = (json_int_t)b;
            int64_t got;

            json_object_set_new(doc, "v", json_integer(n));
            assert_int_equal(dotpath_extract(doc, "v", buf, sizeof buf, &len), 0);
            assert_true(strtoll(buf, NULL, 10) == n);
            assert_int_equal(dotpath_number(doc, "v", &got), 0);
            assert_true(got == n);
        }
        json_decref(doc);
    }
}

/* Random paths over a small document: never a crash, always one of the documented codes, and a
 * message that starts with "key path" on every failure. */
static void test_property_random_paths(void **state)
{
    static const char *const segs[] = {"config", "provider", "name",  "items", "0",    "1",
                                       "2",      "id",       "input", "",      "tier", "x"};
    const json_t *doc = *state;
    test_rng r;

    rng_seed(&r, 99);
    for (int i = 0; i < 20000; i++) {
        char path[128] = "", buf[32], msg[64];
        size_t len = 5;
        int64_t v;
        int nseg = (int)rng_range(&r, 1, 5), rc;

        for (int k = 0; k < nseg; k++) {
            if (k)
                strcat(path, ".");
            strcat(path, segs[rng_range(&r, 0, (int64_t)(sizeof segs / sizeof segs[0]) - 1)]);
        }
        rc = dotpath_extract_msg(doc, path, buf, sizeof buf, &len, msg, sizeof msg);
        assert_true(rc == 0 || rc == SLUICE_EINVAL || rc == SLUICE_ENOTFOUND);
        if (rc == 0) {
            assert_string_equal(msg, "");
            assert_int_equal(strlen(buf), len);
        } else {
            assert_memory_equal(msg, "key path", 8);
            assert_int_equal(len, 0);
        }
        rc = dotpath_number_msg(doc, path, &v, msg, sizeof msg);
        assert_true(rc == 0 || rc == SLUICE_EINVAL || rc == SLUICE_ENOTFOUND);
    }
}

/* Nothing goes through the sluice allocator (or any allocator: a lookup cannot fail for lack of
 * memory). */
static void test_no_allocation(void **state)
{
    const json_t *doc = *state;
    char buf[64], msg[128];
    size_t len;
    int64_t v;

    oom_install(1);
    assert_int_equal(dotpath_extract(doc, "input.config.provider.name", buf, sizeof buf, &len), 0);
    assert_int_equal(dotpath_extract(doc, "ratio", buf, sizeof buf, &len), 0);
    assert_int_equal(dotpath_extract_msg(doc, "missing", buf, sizeof buf, &len, msg, sizeof msg),
                     SLUICE_ENOTFOUND);
    assert_int_equal(dotpath_number(doc, "items.2.0", &v), 0);
    assert_int_equal(dotpath_validate("a..b", msg, sizeof msg), SLUICE_EINVAL);
    assert_int_equal(oom_allocations(), 0);
    oom_uninstall();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validate),
        cmocka_unit_test_setup_teardown(test_extract_strings, setup_doc, teardown_doc),
        cmocka_unit_test_setup_teardown(test_extract_nested_and_prefix, setup_doc, teardown_doc),
        cmocka_unit_test_setup_teardown(test_extract_numbers_and_booleans, setup_doc, teardown_doc),
        cmocka_unit_test(test_extract_real_canonical_forms),
        cmocka_unit_test_setup_teardown(test_extract_arrays, setup_doc, teardown_doc),
        cmocka_unit_test_setup_teardown(test_extract_wrong_kinds, setup_doc, teardown_doc),
        cmocka_unit_test_setup_teardown(test_extract_missing, setup_doc, teardown_doc),
        cmocka_unit_test_setup_teardown(test_extract_bad_paths, setup_doc, teardown_doc),
        cmocka_unit_test_setup_teardown(test_extract_buffer_sizes, setup_doc, teardown_doc),
        cmocka_unit_test(test_extract_long_keys),
        cmocka_unit_test(test_extract_deep),
        cmocka_unit_test_setup_teardown(test_extract_locale_independent, setup_doc, teardown_doc),
        cmocka_unit_test_setup_teardown(test_number, setup_doc, teardown_doc),
        cmocka_unit_test(test_property_number_round_trip),
        cmocka_unit_test_setup_teardown(test_property_random_paths, setup_doc, teardown_doc),
        cmocka_unit_test_setup_teardown(test_no_allocation, setup_doc, teardown_doc),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
