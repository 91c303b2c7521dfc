/* SPDX-License-Identifier: MIT */
/*
 * The pure parts of Redis Cluster routing (src/store/redis_cluster.c), without Redis: CRC16 and
 * the key slot on Redis Cluster's own vectors and hash-tag rules, the slot of every key the
 * limits script names for a link (the routing invariant: a request goes to the slot of its tag,
 * and every key it touches is in that slot), CLUSTER SLOTS replies built by hand (masters,
 * replicas ignored, an unknown endpoint, malformed shapes refused), and MOVED / ASK parsing.
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
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
