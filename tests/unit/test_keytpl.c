/* SPDX-License-Identifier: MIT */
/*
 * Tests of key templates (policy/keytpl.c, issue 13 item 7): the syntax and its faults with their
 * offsets, extraction against dot paths (a template's key is the concatenation of what each field
 * gives alone), the buffer contract, the config loader's file:line:column errors, and the engine
 * on a simulated clock: tasks keyed by two fields share a bucket exactly when both fields agree,
 * and the missing_key rules apply when any field is missing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "engine_fixture.h"
#include "policy/dotpath.h"
#include "policy/keytpl.h"
#include "sluice/config.h"
#include "sluice/policy_spec.h"

static char msg[512];

static void expect_bad(const char *tpl, size_t at, const char *needle)
{
    size_t where = 99;

    assert_int_equal(keytpl_validate(tpl, &where, msg, sizeof msg), SLUICE_EINVAL);
    if (!strstr(msg, needle))
        fail_msg("%s: message \"%s\" lacks \"%s\"", tpl, msg, needle);
    assert_int_equal(where, at);
}

static void test_syntax(void **unused)
{
    size_t at = 9;

    (void)unused;
    assert_true(keytpl_is_template("{input.user}"));
    assert_true(keytpl_is_template("a}}"));
    assert_false(keytpl_is_template("input.user"));
    assert_false(keytpl_is_template(NULL));
    assert_int_equal(keytpl_validate("{input.user}:{input.workflow_tag}", &at, msg, sizeof msg),
                     SLUICE_OK);
    assert_int_equal(at, 0);
    assert_string_equal(msg, "");
    assert_int_equal(keytpl_validate("{user}", NULL, NULL, 0), SLUICE_OK);
    assert_int_equal(keytpl_validate("rl:{{{a.0.b}}}", NULL, NULL, 0), SLUICE_OK);
    /* Plain dot paths are checked as dot paths. */
    assert_int_equal(keytpl_validate("input.user", NULL, NULL, 0), SLUICE_OK);
    assert_int_equal(keytpl_validate("input..x", NULL, msg, sizeof msg), SLUICE_EINVAL);

    expect_bad("{input.user", 0, "never closed");
    expect_bad("a:{input.user}:{b", 15, "never closed");
    expect_bad("a}b", 1, "closes no field");
    expect_bad("{}", 0, "empty field");
    expect_bad("x{a}{}", 4, "empty field");
    expect_bad("{a{b}}", 2, "do not nest");
    expect_bad("{input.user|lower}", 11, "unknown syntax '|'");
    expect_bad("{ user}", 1, "unknown syntax ' '");
    expect_bad("${input.user}", 0, "unknown syntax \"${\"");
    expect_bad("{a},{b}", 3, "comma");
    expect_bad("{a}\t", 3, "control byte");
    expect_bad("{{literal}}", 0, "no field");
    expect_bad("x{input..a}", 2, "two dots");
    expect_bad("{input.}", 1, "nothing after");
    expect_bad("{a}{a}{a}{a}{a}{a}{a}{a}{a}{a}{a}{a}{a}{a}{a}{a}{a}", 48, "more than 16 fields");
}

static void expect_key(const json_t *in, const char *tpl, const char *key, int empty)
{
    char buf[256];
    size_t len = 99;
    int e = 7;

    assert_int_equal(keytpl_extract_msg(in, tpl, buf, sizeof buf, &len, &e, msg, sizeof msg),
                     SLUICE_OK);
    assert_int_equal(len, strlen(key));
    assert_string_equal(buf, key);
    assert_int_equal(e, empty);
}

static void test_extract(void **unused)
{
    json_t *in = json_loads("{\"user\":\"ann\",\"workflow_tag\":\"etl\",\"n\":5,\"r\":2.0,"
                            "\"b\":true,\"e\":\"\",\"nul\":null,\"o\":{\"x\":[\"y\"]}}",
                            0, NULL);
    char buf[8];
    size_t len;
    int empty;

    (void)unused;
    assert_non_null(in);
    expect_key(in, "{input.user}:{input.workflow_tag}", "ann:etl", 0);
    expect_key(in, "{user}{n}{r}{b}", "ann52true", 0);
    expect_key(in, "{{{o.x.0}}}", "{y}", 0);
    expect_key(in, "t-{e}", "t-", 1);
    expect_key(in, "input.user", "ann", 0);
    expect_key(in, "input.e", "", 1);
    /* A missing field is ENOTFOUND, a field of the wrong kind EINVAL, both with the path named. */
    assert_int_equal(
        keytpl_extract_msg(in, "{user}:{missing}", buf, sizeof buf, &len, &empty, msg, sizeof msg),
        SLUICE_ENOTFOUND);
    assert_non_null(strstr(msg, "missing"));
    assert_int_equal(
        keytpl_extract_msg(in, "{user}:{nul}", buf, sizeof buf, &len, &empty, msg, sizeof msg),
        SLUICE_EINVAL);
    assert_int_equal(
        keytpl_extract_msg(NULL, "{user}", buf, sizeof buf, &len, &empty, msg, sizeof msg),
        SLUICE_ENOTFOUND);
    assert_int_equal(
        keytpl_extract_msg(in, "{user", buf, sizeof buf, &len, &empty, msg, sizeof msg),
        SLUICE_EINVAL);
    /* Too small: ERANGE with the full length, whichever piece overflowed; then it fits. */
    assert_int_equal(keytpl_extract_msg(in, "{user}:{workflow_tag}:{user}", buf, sizeof buf, &len,
                                        &empty, NULL, 0),
                     SLUICE_ERANGE);
    assert_int_equal(len, 11);
    assert_int_equal(
        keytpl_extract_msg(in, "abcdefgh{user}", buf, sizeof buf, &len, &empty, NULL, 0),
        SLUICE_ERANGE);
    assert_int_equal(len, 11);
    assert_int_equal(keytpl_extract_msg(in, "{user}", NULL, 0, &len, &empty, NULL, 0),
                     SLUICE_ERANGE);
    assert_int_equal(len, 3);
    assert_int_equal(keytpl_extract_msg(in, "{user}:{n}xy", buf, sizeof buf, &len, &empty, NULL, 0),
                     SLUICE_OK);
    assert_string_equal(buf, "ann:5xy");
    json_decref(in);
}

/* Property: for random inputs, a template of fields is the concatenation of the fields' dot path
 * extractions with the literal text between them. */
static void test_extract_matches_dotpaths(void **unused)
{
    static const char *const names[] = {"a", "b", "c"};
    uint64_t seed = 0x9e3779b97f4a7c15u;

    (void)unused;
    for (int round = 0; round < 500; round++) {
        char text[256], want[512], tpl[128], one[128], got[512];
        size_t len, n1, w = 0;
        int empty, t = 0;
        json_t *in;

        seed = seed * 6364136223846793005u + 1442695040888963407u;
        snprintf(text, sizeof text, "{\"a\":\"%.*s\",\"b\":%d,\"c\":\"x%u\"}", (int)(seed >> 60),
                 "0123456789abcdef", (int)(seed >> 40 & 0xff), (unsigned)(seed >> 20 & 0xf));
        in = json_loads(text, 0, NULL);
        assert_non_null(in);
        for (int f = 0; f < 1 + (int)(seed >> 8 & 3); f++) {
            const char *nm = names[(seed >> (2 * f)) % 3];

            t += snprintf(tpl + t, sizeof tpl - (size_t)t, "%s{input.%s}", f ? "/" : "", nm);
            if (f)
                want[w++] = '/';
            assert_int_equal(dotpath_extract(in, nm, one, sizeof one, &n1), SLUICE_OK);
            memcpy(want + w, one, n1);
            w += n1;
        }
        want[w] = '\0';
        assert_int_equal(
            keytpl_extract_msg(in, tpl, got, sizeof got, &len, &empty, msg, sizeof msg), SLUICE_OK);
        assert_string_equal(got, want);
        assert_int_equal(len, w);
        json_decref(in);
    }
}

static int parse(const char *text, sluice_config *c)
{
    return sluice_config_parse(text, strlen(text), "t.yaml", c, msg, sizeof msg);
}

static void test_config(void **unused)
{
    sluice_config c;
    const sluice_limit_policy *l;

    (void)unused;
    assert_int_equal(parse("limits:\n  wf:\n    rate: 10/1m\n"
                           "    key: \"{input.user}:{input.workflow_tag}\"\n"
                           "    missing_key: skip\n",
                           &c),
                     SLUICE_OK);
    l = sluice_config_find_limit(&c, "wf");
    assert_non_null(l);
    assert_int_equal(l->key_source, SLUICE_KEY_PATH);
    assert_string_equal(l->key_path, "{input.user}:{input.workflow_tag}");
    assert_int_equal(l->missing_key_skip, 1);
    sluice_config_clear(&c);
    /* Plain scalars work too. */
    assert_int_equal(parse("limits:\n  wf:\n    rate: 10/1m\n    key: u-{user}\n", &c), SLUICE_OK);
    sluice_config_clear(&c);

    /* Faults point at the byte inside the scalar: quoted, plain, and an unclosed brace. */
    assert_int_equal(parse("limits:\n  wf:\n    rate: 10/1m\n    key: \"{input.user}:{}\"\n", &c),
                     SLUICE_EINVAL);
    assert_string_equal(msg, "t.yaml:4:24: limits.wf.key: key template "
                             "\"{input.user}:{}\": empty field {} at offset 13");
    assert_int_equal(parse("limits:\n  wf:\n    rate: 10/1m\n    key: u-{us er}\n", &c),
                     SLUICE_EINVAL);
    assert_non_null(strstr(msg, "t.yaml:4:15: limits.wf.key: key template"));
    assert_int_equal(parse("limits:\n  wf:\n    rate: 10/1m\n    key: \"{input.user\"\n", &c),
                     SLUICE_EINVAL);
    assert_non_null(strstr(msg, "t.yaml:4:11: limits.wf.key: key template \"{input.user\": the "
                                "'{' at offset 0 is never closed"));
    assert_int_equal(parse("limits:\n  wf:\n    rate: 10/1m\n    key: \"a}\"\n", &c),
                     SLUICE_EINVAL);
    assert_non_null(strstr(msg, "t.yaml:4:12:"));
    /* Unquoted, a template starting with a brace is a YAML mapping: the error says to quote it. */
    assert_int_equal(parse("limits:\n  wf:\n    rate: 10/1m\n    key: {input.user}\n", &c),
                     SLUICE_EINVAL);
    assert_non_null(strstr(msg, "t.yaml:4:10: limits.wf.key: expected none, explicit or a path"));
    assert_non_null(
        strstr(msg, "got a mapping; a key template that starts with '{' must be quoted"));
    /* An escape in the scalar: the column is the scalar's. */
    assert_int_equal(parse("limits:\n  wf:\n    rate: 10/1m\n    key: \"\\x41{}\"\n", &c),
                     SLUICE_EINVAL);
    assert_non_null(strstr(msg, "t.yaml:4:10:"));
}

/* The spec language (LIMIT.SET, what is stored) carries a template and writes it back. */
static void test_spec_round_trip(void **unused)
{
    sluice_limit_policy p, q;
    char text[256];

    (void)unused;
    assert_int_equal(
        sluice_spec_parse_policy("rate=10/1m,key={input.user}:{input.tag}", &p, msg, sizeof msg),
        SLUICE_OK);
    assert_int_equal(p.key_source, SLUICE_KEY_PATH);
    assert_string_equal(p.key_path, "{input.user}:{input.tag}");
    assert_int_equal(sluice_spec_format_policy(&p, text, sizeof text), SLUICE_OK);
    assert_int_equal(sluice_spec_parse_policy(text, &q, msg, sizeof msg), SLUICE_OK);
    assert_string_equal(q.key_path, p.key_path);
    sluice_limit_policy_clear(&p);
    sluice_limit_policy_clear(&q);
    assert_int_equal(sluice_spec_parse_policy("rate=10/1m,key={input.user", &p, msg, sizeof msg),
                     SLUICE_EINVAL);
    assert_non_null(strstr(msg, "never closed"));
}

static void submit_key(sluice_engine *e, const char *payload, uint64_t *id)
{
    *id = fx_submit(e, "t", payload, T0);
}

static const char *key_of(sluice_engine *e, uint64_t id)
{
    static sluice_charge ch[2];

    assert_int_equal(sluice_engine_task_charges(e, id, ch, 2), 1);
    return ch[0].key;
}

static void test_engine(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    const char *lims[] = {"wf", NULL};
    sluice_limit_policy p;
    sluice_delivery out[8];
    sluice_submit_error err;
    uint64_t a1, a2, b1, c1, id;

    (void)unused;
    /* One per minute per (user, workflow tag): seed 004's per-workflow breaker. */
    fx_limit(&p, "wf", SLUICE_RATE, 1, MIN);
    p.key_source = SLUICE_KEY_PATH;
    p.key_path = "{input.user}:{input.workflow_tag}";
    fx_set_limit(e, &p);
    fx_type(e, "t", lims);
    submit_key(e, "{\"user\":\"ann\",\"workflow_tag\":\"etl\"}", &a1);
    submit_key(e, "{\"workflow_tag\":\"etl\",\"user\":\"ann\",\"x\":1}", &a2);
    submit_key(e, "{\"user\":\"ann\",\"workflow_tag\":\"ml\"}", &b1);
    submit_key(e, "{\"user\":\"bob\",\"workflow_tag\":\"etl\"}", &c1);
    assert_string_equal(key_of(e, a1), "ann:etl");
    assert_string_equal(key_of(e, b1), "ann:ml");
    /* a2 shares a1's key and parks; the other two keys run at once. */
    assert_int_equal(fx_poll(e, T0, 8, out), 3);
    assert_int_equal(fx_state(e, a2), SLUICE_TASK_PARKED);
    for (int i = 0; i < 3; i++)
        assert_int_equal(sluice_engine_ack(e, out[i].id, -1, T0), SLUICE_OK);
    assert_int_equal(fx_poll(e, T0 + MIN - 1, 8, out), 0);
    assert_int_equal(fx_poll(e, T0 + MIN, 8, out), 1);
    assert_int_equal(out[0].id, a2);

    /* missing_key: error (the default): any missing field refuses the task, naming the field. */
    assert_int_equal(fx_try(e, "t", "{\"user\":\"ann\"}", T0, &id, &err), SLUICE_EINVAL);
    assert_non_null(strstr(err.message, "workflow_tag"));
    /* global: a task missing any field shares the global key. */
    p.missing_key_global = 1;
    fx_set_limit(e, &p);
    id = fx_submit(e, "t", "{\"user\":\"ann\"}", T0);
    assert_string_equal(key_of(e, id), "");
    /* skip: a missing or an empty field skips the limit. */
    p.missing_key_global = 0;
    p.missing_key_skip = 1;
    fx_set_limit(e, &p);
    id = fx_submit(e, "t", "{\"user\":\"ann\"}", T0);
    assert_int_equal(sluice_engine_task_charges(e, id, NULL, 0), 0);
    id = fx_submit(e, "t", "{\"user\":\"\",\"workflow_tag\":\"etl\"}", T0);
    assert_int_equal(sluice_engine_task_charges(e, id, NULL, 0), 0);
    id = fx_submit(e, "t", "{\"user\":\"ann\",\"workflow_tag\":\"etl\"}", T0);
    assert_int_equal(sluice_engine_task_charges(e, id, NULL, 0), 1);
    /* A wrong kind of value is an error whatever missing_key says. */
    assert_int_equal(fx_try(e, "t", "{\"user\":null,\"workflow_tag\":\"etl\"}", T0, &id, &err),
                     SLUICE_EINVAL);
    sluice_engine_free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_syntax),
        cmocka_unit_test(test_extract),
        cmocka_unit_test(test_extract_matches_dotpaths),
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_spec_round_trip),
        cmocka_unit_test(test_engine),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
