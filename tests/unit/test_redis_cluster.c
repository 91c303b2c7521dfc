/* SPDX-License-Identifier: MIT */
/*
 * The pure parts of Redis Cluster routing (src/store/redis_cluster.c), without Redis: CRC16 and
 * the key slot on Redis Cluster's own vectors and hash-tag rules, the slot of every key the
 * limits script names for a link (the routing invariant: a request goes to the slot of its tag,
 * and every key it touches is in that slot), CLUSTER SLOTS replies built by hand (masters,
 * replicas ignored, an unknown endpoint, malformed shapes refused), MOVED / ASK parsing, and
 * the pieces of one call per master: the split of a refused call by slot, which errors split it,
 * and the call across slots and its parts as the encoder builds and reads them.
 * The cluster connection itself runs against a real 3-master cluster in
 * tests/server/redis_cluster.sh.
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

#include "base/alloc.h"
#include "sluice/error.h"
#include "sluice/limit.h"
#include "store/redis_cluster.h"
#include "store/redis_limits.h"
#include "reply_fixture.h"

static redisReply *i_(long long v)
{
    redisReply *r = node(REDIS_REPLY_INTEGER);

    r->integer = v;
    return r;
}

static int slot_of(const char *key)
{
    return rcl_key_slot(key, strlen(key));
}

static void test_crc16(void **unused)
{
    (void)unused;
    assert_int_equal(rcl_crc16("123456789", 9), 0x31C3);
    assert_int_equal(rcl_crc16("", 0), 0);
    assert_int_equal(rcl_crc16("A", 1), 0x58E5);
}

static void test_key_slot(void **unused)
{
    (void)unused;
    /* CLUSTER KEYSLOT's answers. */
    assert_int_equal(slot_of("foo"), 12182);
    assert_int_equal(slot_of("bar"), 5061);
    assert_int_equal(slot_of("123456789"), 0x31C3 & 16383);
    /* The hash tag: the first {...} that is not empty. */
    assert_int_equal(slot_of("{user1000}.following"), slot_of("{user1000}.followers"));
    assert_int_equal(slot_of("{user1000}.following"), slot_of("user1000"));
    assert_int_equal(slot_of("foo{bar}{zap}"), slot_of("bar"));
    assert_int_equal(slot_of("foo{{bar}}zap"), slot_of("{bar"));
    /* An empty tag, or none closed: the whole key. */
    assert_int_equal(slot_of("foo{}{bar}"), rcl_crc16("foo{}{bar}", 10) & 16383);
    assert_int_equal(slot_of("foo{bar"), rcl_crc16("foo{bar", 7) & 16383);
    assert_int_equal(rcl_key_slot(NULL, 0), 0);
}

/* Every key the script names for a link (its state, its tag's clock) is in the slot of the tag
 * rstore routes the request by: the CRC16 of the tag rlim_link_names gives. */
static void test_link_keys_in_tag_slot(void **unused)
{
    static const char *const keys[] = {"user:1", "", "{weird}", "k}{", "x"};
    sluice_limit_def def;
    char longkey[300];

    (void)unused;
    memset(&def, 0, sizeof def);
    def.kind = SLUICE_RATE;
    def.limit = 10;
    def.period_ns = SLUICE_NS_PER_SEC;
    def.max_key_len = 256;
    memset(longkey, 'k', sizeof longkey);
    for (size_t i = 0; i < sizeof keys / sizeof keys[0] + 1; i++) {
        rlim_link l;
        rlim_names nm;
        char *state, *clock;
        size_t slen, clen;
        int slot;

        memset(&l, 0, sizeof l);
        l.def = &def;
        l.limit_id = "api";
        l.key = i < sizeof keys / sizeof keys[0] ? keys[i] : longkey;
        l.keylen = i < sizeof keys / sizeof keys[0] ? strlen(keys[i]) : sizeof longkey;
        l.units = 1;
        assert_int_equal(rlim_link_names(&l, &nm), 0);
        slot = rcl_crc16(nm.tag, nm.taglen) & 16383;
        assert_int_equal(rlim_link_keys(NULL, &l, &state, &slen, &clock, &clen), 0);
        assert_int_equal(rcl_key_slot(state, slen), slot);
        assert_int_equal(rcl_key_slot(clock, clen), slot);
        alloc_free(state);
        alloc_free(clock);
        /* A whole reset's generation the node names (rdefs.h): "}:R<g>:" before the id, the
         * same slot. */
        l.gen = 42;
        assert_int_equal(rlim_link_keys(NULL, &l, &state, &slen, &clock, &clen), 0);
        assert_int_equal(rcl_key_slot(state, slen), slot);
        assert_non_null(strstr(state, "}:R42:3:api:"));
        alloc_free(state);
        alloc_free(clock);
    }
}

/* A whole batch call as rstore sends it for one slot: every KEYS argument is in that slot (else
 * Redis Cluster answers CROSSSLOT), audit lists included. (A key holding braces is tagged by
 * its digest, not by its own braces: test_link_keys_in_tag_slot.) */
static void test_batch_keys_one_slot(void **unused)
{
    sluice_limit_def def;
    rlim_batch *b;
    rlim_link l;
    cmd c;
    long numkeys;

    (void)unused;
    memset(&def, 0, sizeof def);
    def.kind = SLUICE_RATE;
    def.limit = 10;
    def.period_ns = SLUICE_NS_PER_SEC;
    def.max_key_len = 256;
    memset(&l, 0, sizeof l);
    l.def = &def;
    l.limit_id = "api";
    l.units = 1;
    assert_int_equal(rlim_batch_new(NULL, &b), 0);
    assert_int_equal(rlim_batch_set_audit(b, 1), 0);
    l.key = "user:1000";
    l.keylen = strlen(l.key);
    assert_true(rlim_batch_add(b, RLIM_DECIDE, &l, 1, NULL) >= 0);
    assert_true(rlim_batch_add(b, RLIM_PEEK, &l, 1, NULL) >= 0);
    l.limit_id = "other";
    assert_true(rlim_batch_add(b, RLIM_DECIDE, &l, 1, NULL) >= 0);
    assert_int_equal(rlim_batch_command(b, "0123456789012345678901234567890123456789", &c.argc,
                                        &c.argv, &c.argvlen),
                     0);
    assert_arg(&c, 0, "EVALSHA");
    numkeys = strtol(c.argv[2], NULL, 10);
    assert_true(numkeys >= 4);
    for (long k = 0; k < numkeys; k++)
        assert_int_equal(rcl_key_slot(c.argv[3 + k], c.argvlen[3 + k]),
                         rcl_key_slot("user:1000", 9));
    rlim_batch_free(b);
}

/* A call across slots is split by slot: one span per slot in the order of its first request,
 * each span's requests in call order (a client's requests in one slot keep their order). */
static void test_split(void **unused)
{
    const int slots[] = {5, 9, 5, 7, 9, 5};
    const size_t want_order[] = {0, 2, 5, 1, 4, 3};
    const int one[] = {42, 42, 42};
    size_t order[6];
    rcl_span spans[6];

    (void)unused;
    assert_int_equal(rcl_split(slots, 6, order, spans), 3);
    assert_int_equal(spans[0].slot, 5);
    assert_int_equal(spans[0].first, 0);
    assert_int_equal(spans[0].n, 3);
    assert_int_equal(spans[1].slot, 9);
    assert_int_equal(spans[1].first, 3);
    assert_int_equal(spans[1].n, 2);
    assert_int_equal(spans[2].slot, 7);
    assert_int_equal(spans[2].first, 5);
    assert_int_equal(spans[2].n, 1);
    assert_memory_equal(order, want_order, sizeof want_order);
    assert_int_equal(rcl_split(one, 3, order, spans), 1);
    assert_int_equal(spans[0].n, 3);
    assert_int_equal(order[0] + order[1] * 10 + order[2] * 100, 210);
    assert_int_equal(rcl_split(one, 0, order, spans), 0);
}

/* Only an error that ran nothing splits a call: Redis's refusals before a script runs, and the
 * script's own XSLOT (written before anything). A script that failed while running does not. */
static void test_split_worthy(void **unused)
{
    static const char *const yes[] = {
        "XSLOT sluice:{k}: ERR Script attempted to access a non local key in a cluster node",
        "MOVED 3999 127.0.0.1:6381",
        "ASK 3999 127.0.0.1:6381",
        "TRYAGAIN Multiple keys request during rehashing of slot",
        "CROSSSLOT Keys in request don't hash to the same slot",
        "CLUSTERDOWN The cluster is down",
        "OOM command not allowed when used memory > 'maxmemory'.",
        "BUSY Redis is busy running a script.",
        "LOADING Redis is loading the dataset in memory",
        "READONLY You can't write against a read only replica.",
        "MASTERDOWN Link with MASTER is down",
        "NOSCRIPT No matching script.",
        "XSLOT",
    };
    static const char *const no[] = {
        "ERR Error running script (call to f_x): @user_script:12: Script attempted to access a "
        "non local key",
        "ERR sluice store script: protocol 9 not understood",
        "XSLOTS x",
        "MOVEDX 1 h:1",
        "",
    };

    (void)unused;
    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++)
        assert_int_equal(rcl_split_worthy(yes[i], strlen(yes[i])), 1);
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++)
        assert_int_equal(rcl_split_worthy(no[i], strlen(no[i])), 0);
    /* The probe key the script names in XSLOT, "<prefix>:{<tag>}", is in the tag's slot: the
     * node sends that slot alone for a while. */
    assert_int_equal(slot_of("sluice:{user:1}"), slot_of("user:1"));
}

static void add_user(rlim_batch *b, rlim_link *l, const char *key)
{
    l->key = key;
    l->keylen = strlen(key);
    assert_true(rlim_batch_add(b, RLIM_DECIDE, l, 1, NULL) >= 0);
}

/* A batch's three commands: the whole call with declared keys ("2"), the call across slots ("2x":
 * no declared key, the same keys after the requests), and a part (a subset of the requests with
 * their own keys and every definition); a part's reply is read back as the batch's requests. */
static void test_cross_and_parts(void **unused)
{
    static const char *const sha = "0123456789012345678901234567890123456789";
    sluice_limit_def def;
    rlim_batch *b;
    rlim_link l;
    cmd whole, cross, part;
    rlim_cmd pc;
    const size_t reqs[] = {2, 0};
    rlim_result res;
    sluice_decision d;
    char keys[6][64];
    size_t klen[6];

    (void)unused;
    memset(&def, 0, sizeof def);
    def.kind = SLUICE_RATE;
    def.limit = 10;
    def.period_ns = SLUICE_NS_PER_SEC;
    def.max_key_len = 256;
    memset(&l, 0, sizeof l);
    l.def = &def;
    l.limit_id = "api";
    l.units = 1;
    memset(&pc, 0, sizeof pc);
    assert_int_equal(rlim_batch_new(NULL, &b), 0);
    add_user(b, &l, "user:1");
    add_user(b, &l, "user:2");
    l.units = 3;
    add_user(b, &l, "user:3");
    assert_true(slot_of("user:1") != slot_of("user:2"));

    assert_int_equal(rlim_batch_command(b, sha, &whole.argc, &whole.argv, &whole.argvlen), 0);
    /* EVALSHA sha 6 keys... 2 flags now 3 1 def req req req */
    assert_int_equal(whole.argc, 3 + 6 + 5 + 1 + 3);
    assert_arg(&whole, 2, "6");
    assert_arg(&whole, 9, "2");
    for (int k = 0; k < 6; k++) {
        assert_true(whole.argvlen[3 + k] < sizeof keys[0]);
        memcpy(keys[k], whole.argv[3 + k], whole.argvlen[3 + k]);
        klen[k] = whole.argvlen[3 + k];
    }
    assert_int_equal(rcl_key_slot(keys[0], klen[0]), slot_of("user:1"));
    assert_int_equal(rcl_key_slot(keys[5], klen[5]), slot_of("user:3"));

    assert_int_equal(rlim_batch_command_cross(b, sha, &cross.argc, &cross.argv, &cross.argvlen), 0);
    assert_int_equal(cross.argc, whole.argc);
    assert_arg(&cross, 0, "EVALSHA");
    assert_arg(&cross, 2, "0");
    assert_arg(&cross, 3, "2x");
    assert_arg(&cross, 6, "3");
    assert_arg(&cross, 7, "1");
    for (int k = 0; k < 6; k++) {
        assert_int_equal(cross.argvlen[12 + k], klen[k]);
        assert_memory_equal(cross.argv[12 + k], keys[k], klen[k]);
    }

    /* Part {2, 0}: its keys (request 2's, then 0's), "2", two requests, the one definition. */
    assert_int_equal(rlim_batch_command_part(b, sha, reqs, 2, 0, &pc), 0);
    part.argc = pc.argc;
    part.argv = pc.argv;
    part.argvlen = pc.argvlen;
    assert_int_equal(part.argc, 3 + 4 + 5 + 1 + 2);
    assert_arg(&part, 2, "4");
    assert_memory_equal(part.argv[3], keys[4], klen[4]);
    assert_memory_equal(part.argv[5], keys[0], klen[0]);
    assert_arg(&part, 7, "2");
    assert_arg(&part, 10, "2");
    assert_arg(&part, 11, "1");
    assert_int_equal(part.argvlen[13], cross.argvlen[11]); /* request 2's string */
    assert_memory_equal(part.argv[13], cross.argv[11], cross.argvlen[11]);
    assert_memory_equal(part.argv[14], cross.argv[9], cross.argvlen[9]);
    for (int k = 0; k < 4; k++)
        assert_int_equal(rcl_key_slot(part.argv[3 + k], part.argvlen[3 + k]) == slot_of("user:3") ||
                             rcl_key_slot(part.argv[3 + k], part.argvlen[3 + k]) ==
                                 slot_of("user:1"),
                         1);
    /* The same part across slots: no declared key, "2x", its keys after its requests. */
    assert_int_equal(rlim_batch_command_part(b, sha, reqs, 2, 1, &pc), 0);
    part.argc = pc.argc;
    part.argv = pc.argv;
    part.argvlen = pc.argvlen;
    assert_int_equal(part.argc, 3 + 5 + 1 + 2 + 4);
    assert_arg(&part, 2, "0");
    assert_arg(&part, 3, "2x");
    assert_arg(&part, 6, "2");
    assert_memory_equal(part.argv[9], cross.argv[11], cross.argvlen[11]);
    assert_memory_equal(part.argv[11], keys[4], klen[4]);
    assert_memory_equal(part.argv[13], keys[0], klen[0]);
    assert_int_equal(rlim_batch_command_part(b, sha, reqs, 0, 0, &pc), SLUICE_EINVAL);
    {
        const size_t bad[] = {3};

        assert_int_equal(rlim_batch_command_part(b, sha, bad, 1, 0, &pc), SLUICE_EINVAL);
    }

    /* The part's reply: answer 0 is request 2's, answer 1 request 0's. */
    reply_pool_reset();
    {
        redisReply *r = a_(2, s_("OK 1000000000000 0 0 100000000 0 10 0 100000000 0 0"),
                           s_("OK 1000000000000 1 0 0 1 10 9 0 100000000 0"));

        assert_int_equal(rlim_batch_result_in(b, r, 2, 0, 2, &res, &d), 0);
        assert_int_equal(res.chain.allowed, 0);
        assert_int_equal(rlim_batch_result_in(b, r, 2, 1, 0, &res, &d), 0);
        assert_int_equal(res.chain.allowed, 1);
        assert_int_equal(d.remaining, 9);
        /* A reply of another length is not this part's. */
        assert_int_equal(rlim_batch_result_in(b, r, 3, 1, 0, &res, &d), SLUICE_EPARSE);
        assert_int_equal(rlim_batch_result(b, r, 0, &res, &d), SLUICE_EPARSE);
        assert_int_equal(rlim_batch_result_in(b, r, 2, 2, 0, &res, &d), SLUICE_EINVAL);
    }
    rlim_cmd_free(&pc);
    rlim_batch_free(b);
}

/* A 3-master map with a replica each, one master without an address it knows. */
static redisReply *three_masters(void)
{
    reply_pool_reset();
    return a_(4,
              a_(4, i_(0), i_(5460), a_(3, s_("127.0.0.1"), i_(7001), s_("id1")),
                 a_(3, s_("127.0.0.1"), i_(7004), s_("r1"))),
              a_(3, i_(5461), i_(10922), a_(3, s_(""), i_(7002), s_("id2"))),
              a_(3, i_(10923), i_(16000), a_(4, s_("10.0.0.3"), i_(7003), s_("id3"), a_(0))),
              a_(3, i_(16001), i_(16383), a_(3, s_("127.0.0.1"), i_(7001), s_("id1"))));
}

static void test_map_parse(void **unused)
{
    rcl_map *m = malloc(sizeof *m);

    (void)unused;
    assert_non_null(m);
    assert_int_equal(rcl_map_parse(three_masters(), "seed.example", m), 0);
    assert_int_equal(m->nnodes, 3);
    assert_string_equal(m->nodes[0].host, "127.0.0.1");
    assert_int_equal(m->nodes[0].port, 7001);
    assert_string_equal(m->nodes[1].host, "seed.example"); /* the address we asked */
    assert_int_equal(m->nodes[1].port, 7002);
    assert_string_equal(m->nodes[2].host, "10.0.0.3");
    assert_int_equal(m->owner[0], 0);
    assert_int_equal(m->owner[5460], 0);
    assert_int_equal(m->owner[5461], 1);
    assert_int_equal(m->owner[10922], 1);
    assert_int_equal(m->owner[10923], 2);
    assert_int_equal(m->owner[16000], 2);
    assert_int_equal(m->owner[16001], 0);
    assert_int_equal(m->owner[16383], 0);
    /* Routing: a key goes to the owner of its tag's slot. */
    assert_int_equal(m->owner[slot_of("foo")], 2);    /* 12182 */
    assert_int_equal(m->owner[slot_of("bar")], 0);    /* 5061 */
    assert_int_equal(m->owner[slot_of("{bar}x")], 0); /* the tag decides */

    /* Slots nobody covers are -1. */
    reply_pool_reset();
    assert_int_equal(rcl_map_parse(a_(1, a_(3, i_(100), i_(200), a_(2, s_("h"), i_(1)))), NULL, m),
                     0);
    assert_int_equal(m->owner[99], -1);
    assert_int_equal(m->owner[100], 0);
    assert_int_equal(m->owner[201], -1);
    reply_pool_reset();
    assert_int_equal(rcl_map_parse(a_(0), NULL, m), 0);
    assert_int_equal(m->nnodes, 0);
    free(m);
}

static void test_map_malformed(void **unused)
{
    rcl_map *m = malloc(sizeof *m);

    (void)unused;
    assert_non_null(m);
    reply_pool_reset();
    assert_int_equal(rcl_map_parse(NULL, NULL, m), SLUICE_EPARSE);
    assert_int_equal(rcl_map_parse(s_("ERR This instance has cluster support disabled"), NULL, m),
                     SLUICE_EPARSE);
    assert_int_equal(rcl_map_parse(a_(1, a_(2, i_(0), i_(1))), NULL, m), SLUICE_EPARSE);
    assert_int_equal(rcl_map_parse(a_(1, a_(3, s_("0"), i_(1), a_(2, s_("h"), i_(1)))), NULL, m),
                     SLUICE_EPARSE);
    assert_int_equal(rcl_map_parse(a_(1, a_(3, i_(5), i_(4), a_(2, s_("h"), i_(1)))), NULL, m),
                     SLUICE_EPARSE);
    assert_int_equal(rcl_map_parse(a_(1, a_(3, i_(0), i_(16384), a_(2, s_("h"), i_(1)))), NULL, m),
                     SLUICE_EPARSE);
    assert_int_equal(rcl_map_parse(a_(1, a_(3, i_(0), i_(1), a_(2, s_("h"), i_(0)))), NULL, m),
                     SLUICE_EPARSE);
    assert_int_equal(rcl_map_parse(a_(1, a_(3, i_(0), i_(1), a_(1, s_("h")))), NULL, m),
                     SLUICE_EPARSE);
    /* No address and none to fall back on. */
    assert_int_equal(rcl_map_parse(a_(1, a_(3, i_(0), i_(1), a_(2, s_(""), i_(1)))), NULL, m),
                     SLUICE_EPARSE);
    free(m);
}

static void test_redirect(void **unused)
{
    rcl_addr to;
    int slot = -1;

    (void)unused;
    assert_int_equal(rcl_parse_redirect("MOVED 3999 127.0.0.1:6381", 25, &slot, &to), 1);
    assert_int_equal(slot, 3999);
    assert_string_equal(to.host, "127.0.0.1");
    assert_int_equal(to.port, 6381);
    assert_int_equal(rcl_parse_redirect("ASK 16383 ::1:7002", 18, &slot, &to), 2);
    assert_int_equal(slot, 16383);
    assert_string_equal(to.host, "::1");
    assert_int_equal(to.port, 7002);
    assert_int_equal(rcl_parse_redirect("MOVED 0 h.example:1", 19, &slot, &to), 1);
    assert_string_equal(to.host, "h.example");
    /* Anything else is not a redirect. */
    assert_int_equal(rcl_parse_redirect("ERR x", 5, &slot, &to), 0);
    assert_int_equal(rcl_parse_redirect("CROSSSLOT Keys", 14, &slot, &to), 0);
    assert_int_equal(rcl_parse_redirect("MOVED 16384 h:1", 15, &slot, &to), 0);
    assert_int_equal(rcl_parse_redirect("MOVED x h:1", 11, &slot, &to), 0);
    assert_int_equal(rcl_parse_redirect("MOVED 1 h", 9, &slot, &to), 0);
    assert_int_equal(rcl_parse_redirect("MOVED 1 h:", 10, &slot, &to), 0);
    assert_int_equal(rcl_parse_redirect("MOVED 1 :1", 10, &slot, &to), 0);
    assert_int_equal(rcl_parse_redirect("MOVED 1 h:70000", 15, &slot, &to), 0);
    assert_int_equal(rcl_parse_redirect("MOVED 1 h:1x", 12, &slot, &to), 0);
    assert_int_equal(rcl_parse_redirect("MOVED", 5, &slot, &to), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc16),
        cmocka_unit_test(test_key_slot),
        cmocka_unit_test(test_link_keys_in_tag_slot),
        cmocka_unit_test(test_batch_keys_one_slot),
        cmocka_unit_test(test_map_parse),
        cmocka_unit_test(test_map_malformed),
        cmocka_unit_test(test_redirect),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_split_worthy),
        cmocka_unit_test(test_cross_and_parts),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
