/* SPDX-License-Identifier: MIT */
/*
 * The batch core the Redis task and recur encoders share (src/store/redis_batch.c), on its own:
 * the prefix check, the fixed keys, a request recorded or rolled back whole, the command's
 * layout (numkeys, fixed keys, request keys, the family word, now, count, arguments) for
 * EVALSHA and EVAL, the reply-head and bulk readers, and an out-of-memory sweep. The encoders'
 * own layouts are tested in test_redis_tasks.c and test_redis_recur.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include <hiredis.h>

#include "base/alloc.h"
#include "sluice/error.h"
#include "store/redis_batch.h"
#include "store/redis_limits.h"
#include "reply_fixture.h"
#include "testutil.h"

static const char *const names[] = {"clock", "seq"};

/* Adds request "Q 1" with argument arg and key "k:<arg>" (op 7). */
static int add_req(rbatch *c, const char *arg)
{
    rbatch_mark m = rbatch_mark_of(c);
    int rc = rbatch_put_fmt(c, &c->args, "%c %d", 'Q', 1);

    if (rc == SLUICE_OK)
        rc = packed_put(&c->a, &c->args, arg, strlen(arg));
    if (rc == SLUICE_OK)
        rc = rbatch_put_fmt(c, &c->keys, "k:%s", arg);
    return rbatch_finish(c, 7, m, rc);
}

static void test_init(void **state)
{
    rbatch c;

    (void)state;
    memset(&c, 0, sizeof c);
    assert_int_equal(rbatch_init(&c, "a}b", names, 2), SLUICE_EINVAL);
    rbatch_fini(&c);
    memset(&c, 0, sizeof c);
    assert_int_equal(rbatch_init(&c, NULL, names, 2), SLUICE_OK);
    assert_string_equal(c.prefix, "sluice");
    assert_int_equal(c.nfixed, 2);
    assert_string_equal(c.fixed[0], "sluice:{all}:clock");
    assert_string_equal(c.fixed[1], "sluice:{all}:seq");
    rbatch_fini(&c);
}

static void test_command(void **state)
{
    rbatch c;
    cmd m;
    size_t len;
    const char *text = rlim_script(&len);
    char *s;

    (void)state;
    memset(&c, 0, sizeof c);
    assert_int_equal(rbatch_init(&c, "px", names, 2), SLUICE_OK);
    assert_int_equal(rbatch_command(&c, "sha", "T1", &m.argc, &m.argv, &m.argvlen), SLUICE_EINVAL);
    assert_int_equal(m.argc, 0);
    assert_int_equal(add_req(&c, "one"), 0);
    assert_int_equal(add_req(&c, "two"), 1);
    assert_int_equal(rbatch_op(&c, 1), 7);
    assert_int_equal(rbatch_op(&c, 2), 0);
    /* A request whose text is too long is refused and leaves nothing behind. */
    assert_int_equal(rbatch_put_fmt(&c, &c.args, "%070d", 1), SLUICE_EINVAL);
    {
        rbatch_mark mk = rbatch_mark_of(&c);

        assert_int_equal(rbatch_put_fmt(&c, &c.args, "half"), SLUICE_OK);
        assert_int_equal(rbatch_finish(&c, 7, mk, SLUICE_EINVAL), SLUICE_EINVAL);
    }
    c.now_ns = 123;
    assert_int_equal(rbatch_command(&c, "sha", "R1", &m.argc, &m.argv, &m.argvlen), SLUICE_OK);
    assert_int_equal(m.argc, 3 + 2 + 2 + 3 + 4);
    assert_arg(&m, 0, "EVALSHA");
    assert_arg(&m, 1, "sha");
    assert_arg(&m, 2, "4");
    assert_arg(&m, 3, "px:{all}:clock");
    assert_arg(&m, 4, "px:{all}:seq");
    assert_arg(&m, 5, "k:one");
    assert_arg(&m, 6, "k:two");
    assert_arg(&m, 7, "R1");
    assert_arg(&m, 8, "123");
    assert_arg(&m, 9, "2");
    assert_arg(&m, 10, "Q 1");
    assert_arg(&m, 11, "one");
    assert_arg(&m, 12, "Q 1");
    assert_arg(&m, 13, "two");
    c.now_ns = 0;
    assert_int_equal(rbatch_command(&c, NULL, "T1", &m.argc, &m.argv, &m.argvlen), SLUICE_OK);
    assert_arg(&m, 0, "EVAL");
    assert_int_equal(m.argvlen[1], len);
    assert_ptr_equal(m.argv[1], text);
    assert_arg(&m, 7, "T1");
    assert_arg(&m, 8, "");
    rbatch_reset(&c);
    assert_int_equal(c.nreqs, 0);
    assert_int_equal(c.keys.n, 0);
    assert_int_equal(c.args.n, 0);
    s = rbatch_concat3("a", "-", "z");
    assert_string_equal(s, "a-z");
    alloc_free(s);
    rbatch_fini(&c);
}

static void test_reply(void **state)
{
    rbatch c;
    const redisReply *r;
    packed_fields f;
    const char *s;
    size_t len;
    redisReply *reply;

    (void)state;
    memset(&c, 0, sizeof c);
    assert_int_equal(rbatch_init(&c, NULL, names, 2), SLUICE_OK);
    assert_int_equal(add_req(&c, "one"), 0);
    reply_pool_reset();
    reply = a_(1, a_(2, s_("OK 5"), s_("body")));
    assert_int_equal(rbatch_reply_head(&c, reply, 0, &r, &f), SLUICE_OK);
    assert_ptr_equal(r, reply->element[0]);
    assert_int_equal(f.end - f.p, 4);
    assert_memory_equal(f.p, "OK 5", 4);
    assert_int_equal(rbatch_bulk(r->element[1], &s, &len), SLUICE_OK);
    assert_int_equal(len, 4);
    assert_memory_equal(s, "body", 4);
    assert_int_equal(rbatch_bulk(r, &s, &len), SLUICE_EPARSE);
    assert_int_equal(rbatch_bulk(NULL, &s, &len), SLUICE_EPARSE);
    assert_int_equal(rbatch_reply_head(&c, reply, 1, &r, &f), SLUICE_EINVAL);
    assert_int_equal(rbatch_reply_head(&c, s_("OK"), 0, &r, &f), SLUICE_EPARSE);
    assert_int_equal(rbatch_reply_head(&c, a_(2, reply->element[0], reply->element[0]), 0, &r, &f),
                     SLUICE_EPARSE);
    assert_int_equal(rbatch_reply_head(&c, a_(1, a_(0)), 0, &r, &f), SLUICE_EPARSE);
    assert_int_equal(rbatch_reply_head(&c, a_(1, a_(1, a_(0))), 0, &r, &f), SLUICE_EPARSE);
    assert_true(rbatch_word_is("OK", 2, "OK"));
    assert_false(rbatch_word_is("OK", 2, "OKAY"));
    assert_false(rbatch_word_is("NO", 2, "OK"));
    rbatch_fini(&c);
}

static int build(void *arg)
{
    rbatch c;
    cmd m;
    int rc;

    (void)arg;
    memset(&c, 0, sizeof c);
    rc = rbatch_init(&c, "oom", names, 2);
    for (int i = 0; i < 40 && rc >= 0; i++)
        rc = add_req(&c, "an-argument-long-enough-to-grow-the-arena");
    if (rc >= 0)
        rc = rbatch_command(&c, "sha", "T1", &m.argc, &m.argv, &m.argvlen);
    rbatch_fini(&c);
    return rc < 0 ? rc : SLUICE_OK;
}

static void test_oom(void **state)
{
    (void)state;
    assert_true(oom_sweep(build, NULL, 1000) > 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init),
        cmocka_unit_test(test_command),
        cmocka_unit_test(test_reply),
        cmocka_unit_test(test_oom),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
