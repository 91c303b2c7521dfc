/* SPDX-License-Identifier: MIT */
/*
 * The encoder and decoder of the Redis limits script (src/store/redis_limits.c), without Redis:
 * the exact argument layout of a batch (keys before arguments, tags, key names, the hashing of
 * long keys and of tags that hold braces), validation that leaves a batch unchanged, replies
 * built by hand as hiredis would hand them over (every op, every status, the largest numbers),
 * malformed replies refused with SLUICE_EPARSE and nothing half-read, and out-of-memory sweeps
 * of building a batch. The script's behaviour is tested against the core by
 * tests/tools/limits_diff.c (server_redis_limits).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <hiredis.h>

#include "core/keyhash.h"
#include "sluice/error.h"
#include "sluice/limit.h"
#include "store/redis_limits.h"
#include "rlim_fixture.h"
#include "reply_fixture.h"
#include "testutil.h"

static cmd command_of(rlim_batch *b, const char *sha)
{
    cmd c;

    assert_int_equal(rlim_batch_command(b, sha, &c.argc, &c.argv, &c.argvlen), SLUICE_OK);
    return c;
}

/* ---- arguments ------------------------------------------------------------------------------ */

static void test_layout_chain(void **state)
{
    rlim_batch *b;
    rlim_link links[2];
    rlim_args args = {0};
    cmd c;
    int i = 0;

    (void)state;
    assert_int_equal(rlim_batch_new(NULL, &b), SLUICE_OK);
    links[0] = link_of(&rate_def, "api", "", 2);      /* a global bucket: tag = limit id */
    links[1] = link_of(&lease_def, "slots", "t1", 1); /* tag = key */
    args.ttl_ns = 5 * SEC;
    assert_int_equal(rlim_batch_add(b, RLIM_DECIDE, links, 2, &args), 0);
    assert_int_equal(rlim_batch_count(b), 1);
    assert_int_equal(rlim_batch_link_count(b, 0), 2);
    assert_int_equal(rlim_batch_link_count(b, 1), 0);
    c = command_of(b, "0123456789abcdef0123456789abcdef01234567");
    assert_arg(&c, i++, "EVALSHA");
    assert_arg(&c, i++, "0123456789abcdef0123456789abcdef01234567");
    assert_arg(&c, i++, "4");
    assert_arg(&c, i++, "sluice:{api}:clock");
    assert_arg(&c, i++, "sluice:{t1}:clock");
    assert_arg(&c, i++, "sluice:{api}:3:api:");
    assert_arg(&c, i++, "sluice:{t1}:5:slots:t1");
    /* protocol, flags, no injected time, one request, two definitions */
    assert_arg(&c, i++, "2");
    assert_arg(&c, i++, "");
    assert_arg(&c, i++, "");
    assert_arg(&c, i++, "1");
    assert_arg(&c, i++, "2");
    /* the definitions: kind, limit, period, burst, start_empty, ttl, calendar */
    assert_arg(&c, i++, "1 10 1000000000 5 1 30000000000 0");
    assert_arg(&c, i++, "4 3 0 0 0 30000000000 0");
    /* the request: op, tags, links, ttl, -, -, then per link its definition, tag and units */
    assert_arg(&c, i++, "D 2 2 5000000000 0 0 1 1 2 2 2 1");
    assert_int_equal(c.argc, i);
    for (int k = 0; k < c.argc; k++)
        assert_int_equal(strlen(c.argv[k]), c.argvlen[k]); /* NUL-terminated, no inner NUL */
    rlim_batch_free(b);
}

/* A shadow link: its definition text says so (" s", a definition of its own next to the same
 * limit enforced), and its would-be denial comes back as allowed 2, read as a pass. */
static void test_shadow(void **state)
{
    rlim_batch *b;
    rlim_link links[2];
    rlim_result res;
    sluice_decision d[2];
    const char *ans = "OK 7 1 0 0 2 5 0 100 100 0 1 3 2 0 0 9";
    cmd c;
    int i = 0;

    (void)state;
    assert_int_equal(rlim_batch_new(NULL, &b), SLUICE_OK);
    links[0] = link_of(&rate_def, "api", "k", 1);
    links[0].shadow = 1;
    links[1] = link_of(&rate_def, "api2", "k", 1);
    assert_int_equal(rlim_batch_add(b, RLIM_DECIDE, links, 2, NULL), 0);
    c = command_of(b, "0123456789abcdef0123456789abcdef01234567");
    i = 3 + 3;              /* EVALSHA, sha, numkeys, then the one tag's clock and the two states */
    assert_arg(&c, i, "2"); /* the protocol, flags, time, one request, two definitions */
    assert_arg(&c, i + 4, "2");
    i += 5;
    assert_arg(&c, i++, "1 10 1000000000 5 1 30000000000 0 s");
    assert_arg(&c, i++, "1 10 1000000000 5 1 30000000000 0");
    assert_arg(&c, i++, "D 1 2 0 0 0 1 1 1 2 1 1");
    rlim_batch_free(b);

    assert_int_equal(rlim_parse_answer(RLIM_DECIDE, 2, ans, strlen(ans), &res, d), SLUICE_OK);
    assert_int_equal(res.chain.allowed, 1);
    assert_int_equal(d[0].allowed, 1);
    assert_int_equal(d[0].shadow_denied, 1);
    assert_int_equal(d[0].retry_after_ns, 100);
    assert_int_equal(d[1].allowed, 1);
    assert_int_equal(d[1].shadow_denied, 0);
    assert_int_equal(d[1].lease_id, 9);
    ans = "OK 7 1 0 0 3 5 0 100 100 0 1 3 2 0 0 9"; /* no allowed 3 */
    assert_int_equal(rlim_parse_answer(RLIM_DECIDE, 2, ans, strlen(ans), &res, d), SLUICE_EPARSE);
}

/* A backoff: one link, its wait as a1; answered with the key's next slot. */
static void test_backoff(void **state)
{
    rlim_batch *b;
    rlim_link l = link_of(&rate_def, "api", "k", 1);
    rlim_args args = {.wait_ns = 5 * SEC};
    rlim_result res;
    const char *ans = "OK 7 5000000007";
    cmd c;

    (void)state;
    assert_int_equal(rlim_batch_new(NULL, &b), SLUICE_OK);
    assert_int_equal(rlim_batch_add(b, RLIM_BACKOFF, &l, 1, NULL), SLUICE_EINVAL);
    assert_int_equal(rlim_batch_add(b, RLIM_BACKOFF, &l, 1, &args), 0);
    c = command_of(b, "0123456789abcdef0123456789abcdef01234567");
    assert_arg(&c, c.argc - 1, "B 1 1 5000000000 0 0 1 1 1");
    rlim_batch_free(b);
    assert_int_equal(rlim_parse_answer(RLIM_BACKOFF, 1, ans, strlen(ans), &res, NULL), SLUICE_OK);
    assert_int_equal(res.rc, SLUICE_OK);
    assert_int_equal(res.now_ns, 7);
    assert_int_equal(res.slot_ns, INT64_C(5000000007));
    ans = "OK 7";
    assert_int_equal(rlim_parse_answer(RLIM_BACKOFF, 1, ans, strlen(ans), &res, NULL),
                     SLUICE_EPARSE);
    ans = "INVAL 7 backoff applies to rate limits";
    assert_int_equal(rlim_parse_answer(RLIM_BACKOFF, 1, ans, strlen(ans), &res, NULL), SLUICE_OK);
    assert_int_equal(res.rc, SLUICE_EINVAL);
}

static void test_layout_ops(void **state)
{
    rlim_batch *b;
    rlim_link l = link_of(&lease_def, "slots", "k", 1);
    rlim_link q = link_of(&quota_def, "budget", "tenant", 1);
    rlim_args renew = {0}, release = {0}, settle = {0};
    cmd c;
    int i;

    (void)state;
    assert_int_equal(rlim_batch_new("app", &b), SLUICE_OK);
    rlim_batch_set_audit(b, 1);
    rlim_batch_set_now(b, INT64_C(1795526227131600001));
    renew.lease_id = UINT64_MAX;
    renew.ttl_ns = 7;
    release.lease_id = 42;
    settle.charged_ns = INT64_MAX;
    settle.estimate = 3;
    settle.actual = 8000000000;
    l.tag = "shared";
    l.taglen = 6;
    assert_int_equal(rlim_batch_add(b, RLIM_LEASE_RENEW, &l, 1, &renew), 0);
    assert_int_equal(rlim_batch_add(b, RLIM_LEASE_RELEASE, &l, 1, &release), 1);
    assert_int_equal(rlim_batch_add(b, RLIM_SETTLE, &q, 1, &settle), 2);
    assert_int_equal(rlim_batch_add(b, RLIM_PEEK, &q, 1, NULL), 3);
    c = command_of(b, NULL);
    i = 0;
    assert_arg(&c, i++, "EVAL");
    {
        size_t len;
        const char *text = rlim_script(&len);

        assert_int_equal(c.argvlen[i], len);
        assert_ptr_equal(c.argv[i], text);
        i++;
    }
    assert_arg(&c, i++, "12"); /* 4 requests x (clock + audit + state) */
    assert_arg(&c, i++, "app:{shared}:clock");
    assert_arg(&c, i++, "app:{shared}:audit");
    assert_arg(&c, i++, "app:{shared}:5:slots:k");
    assert_arg(&c, i++, "app:{shared}:clock");
    assert_arg(&c, i++, "app:{shared}:audit");
    assert_arg(&c, i++, "app:{shared}:5:slots:k");
    assert_arg(&c, i++, "app:{tenant}:clock");
    assert_arg(&c, i++, "app:{tenant}:audit");
    assert_arg(&c, i++, "app:{tenant}:6:budget:tenant");
    i += 3;
    assert_arg(&c, i++, "2");
    assert_arg(&c, i++, "a");
    assert_arg(&c, i++, "1795526227131600001");
    assert_arg(&c, i++, "4");
    assert_arg(&c, i++, "2"); /* the lease's and the quota's definitions, each once */
    assert_arg(&c, i++, "4 3 0 0 0 30000000000 0");
    assert_int_equal(c.argv[i][0], '5');
    assert_non_null(strstr(c.argv[i++], " 2")); /* calendar: month */
    assert_arg(&c, i++, "N 1 1 18446744073709551615 7 0 1 1 1");
    assert_arg(&c, i++, "R 1 1 42 0 0 1 1 1");
    assert_arg(&c, i++, "S 1 1 9223372036854775807 3 8000000000 2 1 1");
    assert_arg(&c, i++, "P 1 1 0 0 0 2 1 1");
    assert_int_equal(c.argc, i);

    /* reset keeps the audit flag and the injected time, drops the requests */
    rlim_batch_reset(b);
    assert_int_equal(rlim_batch_count(b), 0);
    {
        int argc;
        const char **argv;
        const size_t *argvlen;

        assert_int_equal(rlim_batch_command(b, "x", &argc, &argv, &argvlen), SLUICE_EINVAL);
        assert_int_equal(argc, 0);
        assert_null(argv);
    }
    assert_int_equal(rlim_batch_add(b, RLIM_PEEK, &q, 1, NULL), 0);
    c = command_of(b, "x");
    assert_arg(&c, 3 + 3, "2");
    assert_arg(&c, 3 + 4, "a");
    assert_arg(&c, 3 + 5, "1795526227131600001");
    rlim_batch_set_now(b, 0);
    assert_int_equal(rlim_batch_set_audit(b, 0), SLUICE_ESTATE); /* its keys are in the batch */
    rlim_batch_reset(b);
    assert_int_equal(rlim_batch_set_audit(b, 0), SLUICE_OK);
    assert_int_equal(rlim_batch_add(b, RLIM_PEEK, &q, 1, NULL), 0);
    c = command_of(b, "x");
    assert_arg(&c, 2, "2");
    assert_arg(&c, 3 + 2 + 2, "");
    rlim_batch_free(b);
}

static void test_tags_and_long_keys(void **state)
{
    rlim_batch *b;
    sluice_limit_def def = rate_def;
    char longkey[300];
    unsigned char digest[KEYHASH_LEN];
    rlim_link l;
    cmd c;
    char want[256];
    size_t at;

    (void)state;
    memset(longkey, 'x', sizeof longkey);
    def.max_key_len = 256;
    assert_int_equal(rlim_batch_new("p", &b), SLUICE_OK);

    /* A key longer than max_key_len goes by its SHA-256, in the state key and as its tag. */
    l = link_of(&def, "r", "", 1);
    l.key = longkey;
    l.keylen = sizeof longkey;
    assert_int_equal(rlim_batch_add(b, RLIM_DECIDE, &l, 1, NULL), 0);
    c = command_of(b, "s");
    assert_int_equal(keyhash_digest(longkey, sizeof longkey, digest), SLUICE_OK);
    memcpy(want, "p:{", 3);
    for (size_t k = 0; k < KEYHASH_LEN; k++)
        snprintf(want + 3 + 2 * k, 3, "%02x", digest[k]);
    at = 3 + 2 * KEYHASH_LEN;
    memcpy(want + at, "}:1:r:", 6);
    at += 6;
    memcpy(want + at, digest, KEYHASH_LEN);
    at += KEYHASH_LEN;
    assert_int_equal(c.argvlen[4], at);
    assert_memory_equal(c.argv[4], want, at);
    /* the key travels only in the state key's name: the request names its definition */
    assert_int_equal(c.argc, 3 + 2 + 5 + 1 + 1);
    assert_arg(&c, c.argc - 1, "D 1 1 0 0 0 1 1 1");

    /* A tag holding a brace is replaced by its hex digest: the Cluster slot stays the tag's. */
    rlim_batch_reset(b);
    l = link_of(&rate_def, "r", "a{b}", 1);
    assert_int_equal(rlim_batch_add(b, RLIM_DECIDE, &l, 1, NULL), 0);
    c = command_of(b, "s");
    assert_int_equal(c.argvlen[3], strlen("p:{}:clock") + 64);
    assert_null(memchr(c.argv[3] + 3, '{', c.argvlen[3] - 3));
    assert_int_equal(c.argv[3][3 + 64], '}');
    /* ... and the state key keeps the raw key after the limit id. */
    assert_int_equal(c.argvlen[4], 3 + 64 + strlen("}:1:r:a{b}"));
    assert_memory_equal(c.argv[4] + 3 + 64, "}:1:r:a{b}", strlen("}:1:r:a{b}"));

    /* The length of the limit id keeps "a:b" + "c" apart from "a" + "b:c". */
    rlim_batch_reset(b);
    l = link_of(&rate_def, "a:b", "c", 1);
    l.tag = "t";
    l.taglen = 1;
    assert_int_equal(rlim_batch_add(b, RLIM_DECIDE, &l, 1, NULL), 0);
    l = link_of(&rate_def, "a", "b:c", 1);
    l.tag = "t";
    l.taglen = 1;
    assert_int_equal(rlim_batch_add(b, RLIM_DECIDE, &l, 1, NULL), 1);
    c = command_of(b, "s");
    assert_arg(&c, 4, "p:{t}:3:a:b:c");
    assert_arg(&c, 6, "p:{t}:1:a:b:c");

    /* Links sharing a tag share one clock key. */
    rlim_batch_reset(b);
    {
        rlim_link two[3] = {link_of(&rate_def, "x", "k", 1), link_of(&quota_def, "y", "k", 1),
                            link_of(&rate_def, "z", "j", 1)};

        assert_int_equal(rlim_batch_add(b, RLIM_DECIDE, two, 3, NULL), 0);
    }
    c = command_of(b, "s");
    assert_arg(&c, 2, "5");
    assert_arg(&c, 3, "p:{k}:clock");
    assert_arg(&c, 4, "p:{j}:clock");
    /* two links of one definition send it once */
    assert_arg(&c, 3 + 5 + 4, "2");
    assert_arg(&c, 3 + 5 + 7, "D 2 3 0 0 0 1 1 1 2 1 1 1 2 1");
    rlim_batch_free(b);
}

static void test_add_refused(void **state)
{
    rlim_batch *b;
    rlim_link good = link_of(&rate_def, "r", "k", 1), bad;
    rlim_args args = {0};
    sluice_limit_def odd = rate_def;
    cmd before, after;

    (void)state;
    assert_int_equal(rlim_batch_new("p{x", &b), SLUICE_EINVAL);
    assert_null(b);
    assert_int_equal(rlim_batch_new("p", &b), SLUICE_OK);
    assert_int_equal(rlim_batch_add(b, RLIM_DECIDE, &good, 1, NULL), 0);
    before = command_of(b, "s");
    int argc = before.argc;

    bad = good;
    bad.units = 0;
    assert_int_equal(rlim_batch_add(b, RLIM_DECIDE, &bad, 1, NULL), SLUICE_EINVAL);
    assert_int_equal(rlim_batch_add(b, RLIM_DECIDE, &good, 0, NULL), SLUICE_EINVAL);
    assert_int_equal(rlim_batch_add(b, (rlim_op)0, &good, 1, NULL), SLUICE_EINVAL);
    assert_int_equal(rlim_batch_add(b, (rlim_op)9, &good, 1, NULL), SLUICE_EINVAL);
    /* renew and release are for concurrency links only, one link, with arguments */
    assert_int_equal(rlim_batch_add(b, RLIM_LEASE_RENEW, &good, 1, &args), SLUICE_EINVAL);
    bad = link_of(&lease_def, "l", "k", 1);
    assert_int_equal(rlim_batch_add(b, RLIM_LEASE_RELEASE, &bad, 1, NULL), SLUICE_EINVAL);
    {
        rlim_link two[2] = {good, good};

        assert_int_equal(rlim_batch_add(b, RLIM_SETTLE, two, 2, &args), SLUICE_EINVAL);
    }
    bad = good;
    bad.def = NULL;
    assert_int_equal(rlim_batch_add(b, RLIM_DECIDE, &bad, 1, NULL), SLUICE_EINVAL);
    bad = good;
    bad.limit_id = NULL;
    assert_int_equal(rlim_batch_add(b, RLIM_DECIDE, &bad, 1, NULL), SLUICE_EINVAL);
    bad = good;
    bad.key = NULL;
    assert_int_equal(rlim_batch_add(b, RLIM_DECIDE, &bad, 1, NULL), SLUICE_EINVAL);
    odd.kind = (sluice_limit_kind)17;
    bad = good;
    bad.def = &odd;
    assert_int_equal(rlim_batch_add(b, RLIM_DECIDE, &bad, 1, NULL), SLUICE_EINVAL);
    /* nothing changed */
    assert_int_equal(rlim_batch_count(b), 1);
    after = command_of(b, "s");
    assert_int_equal(after.argc, argc);
    rlim_batch_free(b);
    rlim_batch_free(NULL);
}

/* ---- replies ---------------------------------------------------------------------------- */

static redisReply *i_(long long v)
{
    redisReply *r = node(REDIS_REPLY_INTEGER);

    r->integer = v;
    return r;
}

static rlim_batch *four_requests(void)
{
    rlim_batch *b;
    rlim_link chain[2] = {link_of(&rate_def, "r", "k", 1), link_of(&lease_def, "l", "k", 1)};
    rlim_link lease = link_of(&lease_def, "l", "k", 1);
    rlim_link q = link_of(&quota_def, "q", "k", 1);
    rlim_args args = {0};

    reply_pool_reset();
    assert_int_equal(rlim_batch_new(NULL, &b), SLUICE_OK);
    assert_int_equal(rlim_batch_add(b, RLIM_DECIDE, chain, 2, NULL), 0);
    args.lease_id = 7;
    args.ttl_ns = SEC;
    assert_int_equal(rlim_batch_add(b, RLIM_LEASE_RENEW, &lease, 1, &args), 1);
    assert_int_equal(rlim_batch_add(b, RLIM_LEASE_RELEASE, &lease, 1, &args), 2);
    args.estimate = 1;
    assert_int_equal(rlim_batch_add(b, RLIM_SETTLE, &q, 1, &args), 3);
    return b;
}

/* The script answers each request with one string of space-separated fields: the trees above
 * are written field by field for readability, and packed here into the reply Redis sends (an
 * array of request strings). An integer node becomes its decimal text, a nil node an empty field
 * (which the decoder refuses). Anything that is not an array of requests is returned as is. */
static char packbuf[REPLY_POOL][512];

static redisReply *packed(redisReply *r)
{
    redisReply *out;

    if (!r || r->type != REDIS_REPLY_ARRAY)
        return r;
    out = node(REDIS_REPLY_ARRAY);
    out->element = elems[out - pool];
    out->elements = r->elements;
    for (size_t i = 0; i < r->elements; i++) {
        redisReply *q = r->element[i], *str;
        char *buf;
        size_t len = 0;

        if (!q || q->type != REDIS_REPLY_ARRAY) {
            out->element[i] = q;
            continue;
        }
        str = node(REDIS_REPLY_STRING);
        buf = packbuf[str - pool];
        for (size_t k = 0; k < q->elements; k++) {
            const redisReply *f = q->element[k];

            if (k > 0)
                buf[len++] = ' ';
            if (f->type == REDIS_REPLY_INTEGER)
                len += (size_t)snprintf(buf + len, 512 - len, "%lld", f->integer);
            else if (f->type == REDIS_REPLY_STRING) {
                memcpy(buf + len, f->str, f->len);
                len += f->len;
            }
        }
        buf[len] = '\0';
        str->str = buf;
        str->len = len;
        out->element[i] = str;
    }
    return out;
}

static redisReply *decide_reply(const char *lease)
{
    return a_(17, s_("OK"), s_("1795526227131600000"), i_(0), i_(1), s_("9223372036854775807"),
              i_(1), s_("5"), s_("4"), s_("0"), s_("200000000"), s_("0"), /* rate link */
              i_(0), s_("3"), s_("0"), s_("9223372036854775807"), s_("30000000000"), s_(lease));
}

static redisReply *good_reply(void)
{
    return a_(4, decide_reply("0"), a_(3, s_("STALE"), s_("1795526227131600001"), s_("0")),
              a_(2, s_("OK"), s_("1795526227131600002")),
              a_(2, s_("STATE"), s_("-9223372036854775808")));
}

static void test_decode(void **state)
{
    rlim_batch *b = four_requests();
    redisReply *r = good_reply();
    rlim_result res;
    sluice_decision d[2];

    (void)state;
    assert_int_equal(rlim_batch_result(b, packed(r), 0, &res, d), SLUICE_OK);
    assert_int_equal(res.rc, SLUICE_OK);
    assert_chain_answer(&res, d);
    /* decisions may be NULL */
    assert_int_equal(rlim_batch_result(b, packed(r), 0, &res, NULL), SLUICE_OK);

    assert_int_equal(rlim_batch_result(b, packed(r), 1, &res, NULL), SLUICE_OK);
    assert_int_equal(res.rc, SLUICE_ESTALE);
    assert_int_equal(res.now_ns, INT64_C(1795526227131600001));
    assert_int_equal(rlim_batch_result(b, packed(r), 2, &res, NULL), SLUICE_OK);
    assert_int_equal(res.rc, SLUICE_OK);
    assert_int_equal(rlim_batch_result(b, packed(r), 3, &res, NULL), SLUICE_OK);
    assert_int_equal(res.rc, SLUICE_ESTATE);
    assert_int_equal(res.now_ns, INT64_MIN);
    assert_int_equal(rlim_batch_result(b, packed(r), 4, &res, NULL), SLUICE_EINVAL);

    /* the largest lease id, and a renew's expiry */
    r = a_(4, decide_reply("18446744073709551615"),
           a_(3, s_("OK"), s_("1"), s_("9223372036854775807")), a_(2, s_("STALE"), s_("1")),
           a_(3, s_("INVAL"), s_("1"), s_("settle applies to ...")));
    assert_int_equal(rlim_batch_result(b, packed(r), 0, &res, d), SLUICE_OK);
    assert_true(d[1].lease_id == UINT64_MAX);
    assert_int_equal(rlim_batch_result(b, packed(r), 1, &res, NULL), SLUICE_OK);
    assert_int_equal(res.expires_ns, INT64_MAX);
    assert_int_equal(rlim_batch_result(b, packed(r), 2, &res, NULL), SLUICE_OK);
    assert_int_equal(res.rc, SLUICE_ESTALE);
    assert_int_equal(rlim_batch_result(b, packed(r), 3, &res, NULL), SLUICE_OK);
    assert_int_equal(res.rc, SLUICE_EINVAL);
    rlim_batch_free(b);
}

/* Replaces request 0's element k of a good reply with x and expects EPARSE, all zeroed. */
static void expect_bad0(rlim_batch *b, size_t k, redisReply *x)
{
    redisReply *r = good_reply();
    rlim_result res;
    sluice_decision d[2];

    r->element[0]->element[k] = x;
    memset(d, 0x5a, sizeof d);
    assert_int_equal(rlim_batch_result(b, packed(r), 0, &res, d), SLUICE_EPARSE);
    assert_int_equal(res.now_ns, 0);
    assert_int_equal(res.chain.allowed, 0);
    assert_int_equal(d[0].limit, 0);
    assert_int_equal(d[1].remaining, 0);
    /* the other requests are still readable */
    assert_int_equal(rlim_batch_result(b, packed(r), 2, &res, NULL), SLUICE_OK);
}

static void test_malformed(void **state)
{
    rlim_batch *b = four_requests();
    rlim_result res;
    redisReply *r;

    (void)state;
    /* the whole reply */
    r = node(REDIS_REPLY_ERROR);
    r->str = (char *)"NOSCRIPT No matching script";
    r->len = strlen(r->str);
    assert_int_equal(rlim_batch_result(b, packed(r), 0, &res, NULL), SLUICE_EPARSE);
    assert_int_equal(rlim_batch_result(b, NULL, 0, &res, NULL), SLUICE_EPARSE);
    assert_int_equal(rlim_batch_result(b, packed(a_(1, decide_reply("0"))), 0, &res, NULL),
                     SLUICE_EPARSE);
    assert_int_equal(rlim_batch_result(b, i_(4), 0, &res, NULL), SLUICE_EPARSE);
    /* fields of a decision */
    expect_bad0(b, 0, s_("YES"));
    expect_bad0(b, 0, i_(0));
    expect_bad0(b, 1, s_("17955262271316e+15"));
    expect_bad0(b, 1, s_("1.7955262271316e+18"));
    expect_bad0(b, 1, s_(""));
    expect_bad0(b, 1, s_("-"));
    expect_bad0(b, 1, s_("9223372036854775808"));
    expect_bad0(b, 1, s_("-9223372036854775809"));
    expect_bad0(b, 1, s_("123456789012345678901"));
    expect_bad0(b, 1, s_("+5"));
    expect_bad0(b, 1, s_("5 6")); /* a field too many */
    expect_bad0(b, 2, i_(2));
    expect_bad0(b, 2, s_("0x1"));
    expect_bad0(b, 3, i_(2)); /* denied_by past the links */
    expect_bad0(b, 3, i_(-1));
    expect_bad0(b, 5, i_(-1));
    expect_bad0(b, 7, s_("4x"));
    expect_bad0(b, 16, s_("18446744073709551616"));
    expect_bad0(b, 16, s_("-1"));
    expect_bad0(b, 16, node(REDIS_REPLY_NIL));
    /* shapes */
    r = good_reply(); /* a request's reply is one string, not an array of fields */
    assert_int_equal(rlim_batch_result(b, r, 0, &res, NULL), SLUICE_EPARSE);
    r = good_reply();
    r->element[0]->elements = 16;
    assert_int_equal(rlim_batch_result(b, packed(r), 0, &res, NULL), SLUICE_EPARSE);
    r = good_reply();
    r->element[1] = a_(2, s_("STALE"), s_("1")); /* a renew without its expiry */
    assert_int_equal(rlim_batch_result(b, packed(r), 1, &res, NULL), SLUICE_EPARSE);
    r->element[2] = a_(2, s_("STATE"), s_("1")); /* release cannot be STATE */
    assert_int_equal(rlim_batch_result(b, packed(r), 2, &res, NULL), SLUICE_EPARSE);
    r->element[3] = a_(2, s_("INVAL"), s_("1")); /* INVAL carries its message */
    assert_int_equal(rlim_batch_result(b, packed(r), 3, &res, NULL), SLUICE_EPARSE);
    r->element[3] = a_(3, s_("OK"), s_("1"), s_("2"));
    assert_int_equal(rlim_batch_result(b, packed(r), 3, &res, NULL), SLUICE_EPARSE);
    r->element[3] = s_("OK");
    assert_int_equal(rlim_batch_result(b, packed(r), 3, &res, NULL), SLUICE_EPARSE);
    r->element[0] =
        a_(17, s_("STALE"), s_("1"), i_(0), i_(0), s_("0"), i_(1), s_("5"), s_("4"), s_("0"),
           s_("0"), s_("0"), i_(0), s_("3"), s_("0"), s_("0"), s_("0"), s_("0"));
    assert_int_equal(rlim_batch_result(b, packed(r), 0, &res, NULL), SLUICE_EPARSE);
    rlim_batch_free(b);
}

/* ---- the script's text ------------------------------------------------------------------------
 */

static void test_script_text(void **state)
{
    size_t len;
    const char *text = rlim_script(&len);

    (void)state;
    assert_non_null(text);
    assert_int_equal(strlen(text), len); /* NUL-terminated, no NUL inside */
    assert_non_null(strstr(text, "SPDX-License-Identifier: MIT"));
    assert_non_null(strstr(text, "redis.call(\"TIME\")"));
    assert_ptr_equal(rlim_script(NULL), text);
}

/* ---- out of memory --------------------------------------------------------------------------- */

static int build_batch(void *arg)
{
    rlim_batch *b;
    rlim_link chain[3] = {link_of(&rate_def, "r", "k", 1), link_of(&lease_def, "l", "j", 2),
                          link_of(&quota_def, "q", "", 3)};
    rlim_args args = {0};
    const char **argv;
    const size_t *argvlen;
    int argc, rc;

    (void)arg;
    rc = rlim_batch_new("oom", &b);
    if (rc != SLUICE_OK)
        return rc;
    rlim_batch_set_audit(b, 1);
    for (int i = 0; i < 40 && rc >= 0; i++) {
        size_t before = rlim_batch_count(b);

        rc = rlim_batch_add(b, RLIM_DECIDE, chain, 3, &args);
        if (rc < 0)
            assert_int_equal(rlim_batch_count(b), before);
    }
    if (rc >= 0)
        rc = rlim_batch_command(b, "sha", &argc, &argv, &argvlen);
    if (rc == SLUICE_OK) {
        assert_int_equal(argc, 2 + 1 + 40 * 9 + 5 + 3 + 40); /* 3 definitions, once */
        /* a batch that ran out of memory once is whole: add more after a reset */
        rlim_batch_reset(b);
        rc = rlim_batch_add(b, RLIM_PEEK, chain, 1, NULL);
        rc = rc >= 0 ? rlim_batch_command(b, "sha", &argc, &argv, &argvlen) : rc;
    }
    rlim_batch_free(b);
    return rc < 0 ? rc : SLUICE_OK;
}

static void test_oom(void **state)
{
    (void)state;
    assert_true(oom_sweep(build_batch, NULL, 500) > 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout_chain),
        cmocka_unit_test(test_layout_ops),
        cmocka_unit_test(test_shadow),
        cmocka_unit_test(test_backoff),
        cmocka_unit_test(test_tags_and_long_keys),
        cmocka_unit_test(test_add_refused),
        cmocka_unit_test(test_decode),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_script_text),
        cmocka_unit_test(test_oom),
    };

    return cmocka_run_group_tests(tests, setup, NULL);
}
