/* SPDX-License-Identifier: MIT */
/*
 * Tests of the pure helpers of the HTTP decision API (src/server/admin/v1.c): reading a RESP2
 * reply back (admin_resp_parse: every reply the resp_writer produces for THROTTLE and TASK.ADD,
 * random ones round-tripped, every truncation and trailing byte refused), the map from RESP
 * error words to HTTP statuses, the window in words, and seed 004's 429 body (every field, a
 * "never" denial, binary keys, and an out-of-memory sweep).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "server/admin/admin_impl.h"
#include "server/resp.h"
#include "sluice/error.h"
#include "testutil.h"

static int parse(const resp_writer *w, admin_resp_val *v, size_t max, size_t *n, int *arr)
{
    return admin_resp_parse(w->buf, w->len, v, max, n, arr);
}

static void test_parse_throttle_reply(void **unused)
{
    resp_writer w;
    admin_resp_val v[8];
    size_t n;
    int arr;

    (void)unused;
    resp_writer_init(&w, 2);
    resp_array(&w, 6);
    resp_int(&w, 0);
    resp_int(&w, 5);
    resp_int(&w, 0);
    resp_int(&w, 29500);
    resp_int(&w, 60000);
    resp_bulk(&w, "a\r\nb", 4);
    assert_int_equal(parse(&w, v, 8, &n, &arr), 0);
    assert_int_equal(arr, 1);
    assert_int_equal(n, 6);
    assert_int_equal(v[0].type, ':');
    assert_int_equal(v[0].i, 0);
    assert_int_equal(v[1].i, 5);
    assert_int_equal(v[3].i, 29500);
    assert_int_equal(v[5].type, '$');
    assert_int_equal(v[5].len, 4);
    assert_memory_equal(v[5].s, "a\r\nb", 4);
    /* Allowed: the last value is nil. */
    resp_writer_clear(&w);
    resp_array(&w, 6);
    for (int i = 0; i < 5; i++)
        resp_int(&w, i == 0 ? 1 : -1);
    resp_null(&w);
    assert_int_equal(parse(&w, v, 8, &n, &arr), 0);
    assert_int_equal(n, 6);
    assert_int_equal(v[4].i, -1);
    assert_int_equal(v[5].type, '_');
    /* Fewer slots than values: refused. */
    assert_int_equal(parse(&w, v, 5, &n, &arr), -1);
    resp_writer_clear(&w);
}

static void test_parse_scalars(void **unused)
{
    resp_writer w;
    admin_resp_val v[2];
    size_t n;
    int arr;

    (void)unused;
    resp_writer_init(&w, 2);
    resp_int(&w, INT64_MAX);
    assert_int_equal(parse(&w, v, 2, &n, &arr), 0);
    assert_int_equal(arr, 0);
    assert_int_equal(n, 1);
    assert_true(v[0].i == INT64_MAX);
    resp_writer_clear(&w);
    resp_error(&w, "EXISTS", "running_id=%d the task key is held", 7);
    assert_int_equal(parse(&w, v, 2, &n, &arr), 0);
    assert_int_equal(v[0].type, '-');
    assert_int_equal(v[0].len, strlen("EXISTS running_id=7 the task key is held"));
    assert_memory_equal(v[0].s, "EXISTS running_id=7", 19);
    resp_writer_clear(&w);
    resp_simple(&w, "OK");
    assert_int_equal(parse(&w, v, 2, &n, &arr), 0);
    assert_int_equal(v[0].type, '+');
    resp_writer_clear(&w);
    resp_array(&w, 0);
    assert_int_equal(parse(&w, v, 2, &n, &arr), 0);
    assert_int_equal(arr, 1);
    assert_int_equal(n, 0);
    resp_writer_clear(&w);
}

static void test_parse_refuses(void **unused)
{
    static const char *const bad[] = {
        "",
        ":1",
        ":1\r",
        ":x\r\n",
        "$3\r\nab\r\n",
        "$2\r\nabc\r\n",
        "$-2\r\n",
        "*1\r\n",
        "*-1\r\n",
        "*1\r\n*1\r\n:1\r\n",
        "%1\r\n:1\r\n:2\r\n",
        ":1\r\n:2\r\n",
        ":1\r\nx",
        "?\r\n",
        "*2\r\n:1\r\n",
    };
    admin_resp_val v[4];
    size_t n;
    int arr;

    (void)unused;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(admin_resp_parse(bad[i], strlen(bad[i]), v, 4, &n, &arr), -1);
}

/* Every reply of random values round-trips; every proper prefix is refused. */
static void test_parse_roundtrip_prop(void **unused)
{
    test_rng rng;
    admin_resp_val v[8];
    char bytes[32];

    (void)unused;
    rng_seed(&rng, 14);
    for (int round = 0; round < 2000; round++) {
        resp_writer w;
        size_t count = (size_t)rng_range(&rng, 0, 8), n, blen[8];
        int64_t ints[8];
        char kind[8];
        int arr;

        resp_writer_init(&w, 2);
        resp_array(&w, count);
        for (size_t i = 0; i < count; i++) {
            kind[i] = (char)rng_range(&rng, 0, 2);
            if (kind[i] == 0) {
                ints[i] = (int64_t)rng_next(&rng);
                resp_int(&w, ints[i]);
            } else if (kind[i] == 1) {
                blen[i] = (size_t)rng_range(&rng, 0, sizeof bytes);
                for (size_t k = 0; k < blen[i]; k++)
                    bytes[k] = (char)rng_next(&rng);
                resp_bulk(&w, bytes, blen[i]);
            } else {
                resp_null(&w);
            }
        }
        assert_false(w.failed);
        assert_int_equal(parse(&w, v, 8, &n, &arr), 0);
        assert_int_equal(n, count);
        for (size_t i = 0; i < count; i++) {
            if (kind[i] == 0)
                assert_true(v[i].type == ':' && v[i].i == ints[i]);
            else if (kind[i] == 1)
                assert_true(v[i].type == '$' && v[i].len == blen[i]);
            else
                assert_int_equal(v[i].type, '_');
        }
        for (size_t cut = 0; cut < w.len; cut++)
            assert_int_equal(admin_resp_parse(w.buf, cut, v, 8, &n, &arr), -1);
        resp_writer_clear(&w);
    }
}

static void test_status_map(void **unused)
{
    static const struct {
        const char *word;
        unsigned status;
    } cases[] = {
        {"WRONGARGS", 400},
        {"NOAUTH", 401},
        {"NOLIMIT", 404},
        {"NOTASK", 404},
        {"EXISTS", 409},
        {"INUSE", 409},
        {"NOLEASE", 409},
        {"RATELIMITED", 429},
        {"BUSY", 503},
        {"NOMEM", 503},
        {"IOERR", 503},
        {"ERR", 500},
        {"WRONGARG", 500},
        {"", 500},
        /* The shared stores' words (docs/http.md). */
        {"STOREDOWN", 503},
        {"NOTREPLICATED", 503},
        {"CROSSSLOT", 400},
        {"NOTSHARED", 501},
        {"OOM", 503},
    };
    const char *type, *title;

    (void)unused;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        type = title = NULL;
        assert_int_equal(admin_v1_status(cases[i].word, strlen(cases[i].word), &type, &title),
                         cases[i].status);
        assert_non_null(type);
        assert_non_null(title);
    }
    admin_v1_status("BUSY", 4, &type, &title);
    assert_string_equal(type, "BusyError");
    admin_v1_status("WRONGARGS", 9, &type, &title);
    assert_string_equal(type, "ValidationError");
    admin_v1_status("STOREDOWN", 9, &type, &title);
    assert_string_equal(type, "StorageError");
    /* Only the word counts: a prefix of a longer buffer. */
    assert_int_equal(admin_v1_status("NOLIMIT no limit", 7, &type, &title), 404);
}

static void test_window_text(void **unused)
{
    char buf[64];

    (void)unused;
    admin_v1_window_text(60000, buf, sizeof buf);
    assert_string_equal(buf, "60 seconds");
    admin_v1_window_text(1000, buf, sizeof buf);
    assert_string_equal(buf, "1 second");
    admin_v1_window_text(1500, buf, sizeof buf);
    assert_string_equal(buf, "1500 ms");
}

static admin_v1_denial sample(void)
{
    admin_v1_denial d;

    memset(&d, 0, sizeof d);
    d.limit_name = "heavy";
    d.kind = "rate";
    d.key = "alice";
    d.keylen = 5;
    d.limit = 5;
    d.window_ms = 60000;
    d.retry_after_ms = 29001;
    d.remaining = 0;
    return d;
}

static void test_denial_json(void **unused)
{
    admin_v1_denial d = sample();
    json_t *doc = admin_v1_denial_json(&d), *det;

    (void)unused;
    assert_non_null(doc);
    assert_string_equal(json_string_value(json_object_get(doc, "status")), "failed");
    assert_string_equal(json_string_value(json_object_get(doc, "error")), "Rate limit exceeded");
    assert_string_equal(json_string_value(json_object_get(doc, "error_type")), "RateLimitError");
    assert_true(json_string_length(json_object_get(doc, "help")) > 0);
    det = json_object_get(doc, "details");
    assert_string_equal(json_string_value(json_object_get(det, "limit_type")), "rate");
    assert_string_equal(json_string_value(json_object_get(det, "limit_name")), "heavy");
    assert_string_equal(json_string_value(json_object_get(det, "key")), "alice");
    assert_int_equal(json_integer_value(json_object_get(det, "limit")), 5);
    assert_string_equal(json_string_value(json_object_get(det, "window")), "60 seconds");
    assert_int_equal(json_integer_value(json_object_get(det, "window_ms")), 60000);
    /* Rounded up: 29.001 s is 30 s. */
    assert_int_equal(json_integer_value(json_object_get(det, "retry_after_seconds")), 30);
    assert_int_equal(json_integer_value(json_object_get(det, "retry_after_ms")), 29001);
    assert_true(json_is_false(json_object_get(det, "peek")));
    assert_non_null(strstr(json_string_value(json_object_get(det, "message")), "wait 30s"));
    json_decref(doc);
}

static void test_denial_never_and_binary(void **unused)
{
    admin_v1_denial d = sample();
    json_t *doc, *det;
    const char key[] = {'k', '\xff', '"', '\0', 'z'};

    (void)unused;
    d.retry_after_ms = -1;
    d.key = key;
    d.keylen = sizeof key;
    d.window_ms = 0;
    d.window_text = NULL;
    d.kind = "concurrency";
    doc = admin_v1_denial_json(&d);
    assert_non_null(doc);
    det = json_object_get(doc, "details");
    assert_true(json_is_null(json_object_get(det, "retry_after_seconds")));
    assert_int_equal(json_integer_value(json_object_get(det, "retry_after_ms")), -1);
    assert_true(json_is_null(json_object_get(det, "window")));
    assert_true(json_is_null(json_object_get(det, "window_ms")));
    /* The key is kept byte for byte where it is UTF-8, and every byte is accounted for. */
    assert_int_equal(json_string_length(json_object_get(det, "key")), sizeof key);
    assert_non_null(strstr(json_string_value(json_object_get(det, "message")), "never"));
    json_decref(doc);
    /* A quota's period in words. */
    d = sample();
    d.kind = "quota";
    d.window_text = "1 day";
    d.window_ms = 86400000;
    doc = admin_v1_denial_json(&d);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(doc, "details"), "window")), "1 day");
    json_decref(doc);
}

static int denial_body(void *arg)
{
    json_t *doc = admin_v1_denial_json(arg);

    if (!doc)
        return SLUICE_ENOMEM;
    json_decref(doc);
    return 0;
}

static void test_denial_oom(void **unused)
{
    admin_v1_denial d = sample();

    (void)unused;
    assert_true(oom_sweep(denial_body, &d, 200) > 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_throttle_reply), cmocka_unit_test(test_parse_scalars),
        cmocka_unit_test(test_parse_refuses),        cmocka_unit_test(test_parse_roundtrip_prop),
        cmocka_unit_test(test_status_map),           cmocka_unit_test(test_window_text),
        cmocka_unit_test(test_denial_json),          cmocka_unit_test(test_denial_never_and_binary),
        cmocka_unit_test(test_denial_oom),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
