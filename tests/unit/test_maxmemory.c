/* SPDX-License-Identifier: MIT */
/*
 * Tests of the memory budget (issue 12 item 3): the allocator's count of live bytes (exact over
 * malloc, calloc, realloc and free, and off under a replaced allocator), the size parser of
 * --maxmemory and `maxmemory:`, and the refusal in the limit core: past the budget a limit
 * forgets idle keys first, then refuses a new key with SLUICE_ENOMEM (nothing charged) or lets it
 * through untracked when configured to, and keeps answering for the keys it tracks. Decisions run
 * on a simulated clock.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/alloc.h"
#include "sluice/config.h"
#include "sluice/error.h"
#include "sluice/limit.h"
#include "testutil.h"

#define SEC SLUICE_NS_PER_SEC
#define T0  (INT64_C(1763078400) * SEC)

static void test_counting(void **unused)
{
    size_t base, grown;
    char *p, *q;

    (void)unused;
    assert_int_equal(alloc_counting(), 1);
    base = alloc_live_bytes();
    p = alloc_malloc(1000);
    assert_non_null(p);
    assert_true(alloc_live_bytes() >= base + 1000);
    p = alloc_realloc(p, 100000);
    assert_non_null(p);
    grown = alloc_live_bytes();
    assert_true(grown >= base + 100000);
    q = alloc_calloc(10, 100);
    assert_non_null(q);
    assert_true(alloc_live_bytes() >= grown + 1000);
    alloc_free(q);
    assert_int_equal(alloc_live_bytes(), grown);
    p = alloc_realloc(p, 10);
    assert_non_null(p);
    assert_true(alloc_live_bytes() < grown);
    alloc_free(p);
    alloc_free(NULL);
    assert_int_equal(alloc_live_bytes(), base);
    q = alloc_memdup0("abc", 3);
    assert_true(alloc_live_bytes() >= base + 4);
    alloc_free(q);
    assert_int_equal(alloc_live_bytes(), base);

    /* A replaced allocator is not counted (and its frees are not either). */
    oom_install(0);
    assert_int_equal(alloc_counting(), 0);
    p = alloc_malloc(5000);
    assert_int_equal(alloc_live_bytes(), base);
    alloc_free(p);
    oom_uninstall();
    assert_int_equal(alloc_counting(), 1);
    assert_int_equal(alloc_live_bytes(), base);
}

static void test_budget(void **unused)
{
    char *held = alloc_malloc(4096); /* something alive to be over budget with */
    size_t live;

    (void)unused;
    assert_non_null(held);
    alloc_set_budget(0);
    assert_int_equal(alloc_over_budget(), 0);
    assert_int_equal(alloc_over_budget_by(SIZE_MAX), 0);
    live = alloc_live_bytes();
    alloc_set_budget(live + 100);
    assert_int_equal(alloc_budget(), live + 100);
    assert_int_equal(alloc_over_budget(), 0);
    assert_int_equal(alloc_over_budget_by(100), 0);
    assert_int_equal(alloc_over_budget_by(101), 1);
    alloc_set_budget(live - 1);
    assert_int_equal(alloc_over_budget(), 1);
    alloc_set_budget(0);
    alloc_free(held);
}

static void test_parse_size(void **unused)
{
    static const struct {
        const char *text;
        int rc;
        size_t bytes;
    } cases[] = {
        {"0", 0, 0},
        {"536870912", 0, 536870912},
        {"512mb", 0, (size_t)512 << 20},
        {"512MB", 0, (size_t)512 << 20},
        {"512m", 0, (size_t)512 << 20},
        {"2gb", 0, (size_t)2 << 30},
        {"2G", 0, (size_t)2 << 30},
        {"64k", 0, 65536},
        {"64kb", 0, 65536},
        {"100b", 0, 100},
        {"1t", 0, (size_t)1 << 40},
        {"", -1, 0},
        {"mb", -1, 0},
        {"-1", -1, 0},
        {"+5", -1, 0},
        {"12xb", -1, 0},
        {"12 mb", -1, 0},
        {"12mbb", -1, 0},
        {"1bb", -1, 0},
        {"99999999999999999999", -1, 0},
        {"17179869184gb", -1, 0},
    };

    (void)unused;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t out = 7;
        int rc = alloc_parse_size(cases[i].text, strlen(cases[i].text), &out);

        if (rc != cases[i].rc || (rc == 0 && out != cases[i].bytes))
            fail_msg("%s: rc %d, %zu", cases[i].text, rc, out);
    }
}

static void test_config_key(void **unused)
{
    sluice_config c;
    char msg[256];
    const char *ok = "maxmemory: 512mb\nlimits: {a: {rate: 1/s}}\n";
    const char *num = "maxmemory: 1048576\n";
    const char *none = "limits: {a: {rate: 1/s}}\n";
    const char *bad = "maxmemory: lots\n";

    (void)unused;
    assert_int_equal(sluice_config_parse(ok, strlen(ok), "t.yaml", &c, msg, sizeof msg), 0);
    assert_int_equal(c.has_maxmemory, 1);
    assert_int_equal(c.maxmemory, (size_t)512 << 20);
    sluice_config_clear(&c);
    assert_int_equal(sluice_config_parse(num, strlen(num), "t.yaml", &c, msg, sizeof msg), 0);
    assert_int_equal(c.maxmemory, 1048576);
    sluice_config_clear(&c);
    assert_int_equal(sluice_config_parse(none, strlen(none), "t.yaml", &c, msg, sizeof msg), 0);
    assert_int_equal(c.has_maxmemory, 0);
    sluice_config_clear(&c);
    assert_int_equal(sluice_config_parse(bad, strlen(bad), "t.yaml", &c, msg, sizeof msg),
                     SLUICE_EINVAL);
    assert_non_null(strstr(msg, "maxmemory"));
    assert_non_null(strstr(msg, "512mb"));
}

static sluice_limit *make(int64_t limit, int64_t period_ns, sluice_key_overflow overflow)
{
    sluice_limit_def def;
    sluice_limit *lim;
    char msg[128];

    sluice_limit_def_init(&def, SLUICE_RATE);
    def.limit = limit;
    def.period_ns = period_ns;
    def.key_overflow = overflow;
    assert_int_equal(sluice_limit_new(&def, &lim, msg, sizeof msg), SLUICE_OK);
    return lim;
}

static size_t nkeys(const sluice_limit *lim)
{
    sluice_limit_stats st;

    sluice_limit_get_stats(lim, &st);
    return st.keys;
}

static int decide(sluice_limit *lim, const char *key, int64_t now, sluice_decision *d)
{
    return sluice_limit_decide(lim, key, strlen(key), 1, now, 0, d);
}

/* Past the budget: tracked keys answer, a new key is refused (nothing created or charged), an
 * ALLOW limit and a shadow limit let it through untracked; under the budget again, all is as
 * before. */
static void test_refusal(void **unused)
{
    sluice_limit *lim = make(1, 3600 * SEC, SLUICE_KEYS_REFUSE);
    sluice_limit *open = make(1, 3600 * SEC, SLUICE_KEYS_ALLOW);
    sluice_limit *shadow = make(1, 3600 * SEC, SLUICE_KEYS_REFUSE);
    sluice_limit_stats st;
    sluice_decision d;
    size_t keys;

    (void)unused;
    sluice_limit_set_shadow(shadow, 1);
    assert_int_equal(decide(lim, "old", T0, &d), 0);
    assert_int_equal(d.allowed, 1);
    keys = nkeys(lim);

    alloc_set_budget(1); /* far below what the process holds */
    assert_int_equal(decide(lim, "new", T0, &d), SLUICE_ENOMEM);
    assert_int_equal(d.allowed, 0);
    assert_int_equal(nkeys(lim), keys);
    sluice_limit_get_stats(lim, &st);
    assert_int_equal(st.refused, 1);
    /* The key tracked before still answers, and still remembers its charge. */
    assert_int_equal(decide(lim, "old", T0 + SEC, &d), 0);
    assert_int_equal(d.allowed, 0);
    /* A peek creates nothing, so it is never refused. */
    assert_int_equal(sluice_limit_decide(lim, "new", 3, 1, T0, SLUICE_PEEK, &d), 0);
    assert_int_equal(d.allowed, 1);
    /* Configured to: untracked, allowed, counted. */
    assert_int_equal(decide(open, "new", T0, &d), 0);
    assert_int_equal(d.allowed, 1);
    assert_int_equal(d.untracked, 1);
    assert_int_equal(nkeys(open), 0);
    sluice_limit_get_stats(open, &st);
    assert_int_equal(st.untracked, 1);
    assert_int_equal(decide(shadow, "new", T0, &d), 0);
    assert_int_equal(d.allowed, 1);
    assert_int_equal(nkeys(shadow), 0);

    alloc_set_budget(0);
    assert_int_equal(decide(lim, "new", T0, &d), 0);
    assert_int_equal(d.allowed, 1);
    assert_int_equal(nkeys(lim), keys + 1);
    sluice_limit_free(lim);
    sluice_limit_free(open);
    sluice_limit_free(shadow);
}

/* Past the budget a limit first forgets the keys that carry no information: an idle key goes, and
 * when that brings the process under the budget the new key is taken. */
static void test_forget_first(void **unused)
{
    sluice_limit *lim = make(10, SEC, SLUICE_KEYS_REFUSE);
    sluice_decision d;
    char key[32];
    size_t held;

    (void)unused;
    for (int i = 0; i < 20000; i++) {
        snprintf(key, sizeof key, "k%d", i);
        assert_int_equal(decide(lim, key, T0, &d), 0);
    }
    assert_int_equal(nkeys(lim), 20000);
    held = alloc_live_bytes();
    /* Just under what is held: a new key is refused at T0, when every key is still busy ... */
    alloc_set_budget(held - 1);
    assert_int_equal(decide(lim, "fresh", T0, &d), SLUICE_ENOMEM);
    /* ... and taken once they are idle (a second later, full again) and forgotten for it. */
    for (int i = 0; i < 1000 && decide(lim, "fresh", T0 + 2 * SEC, &d) == SLUICE_ENOMEM; i++)
        continue;
    assert_int_equal(decide(lim, "fresh", T0 + 2 * SEC, &d), 0);
    assert_true(nkeys(lim) < 20000);
    alloc_set_budget(0);
    sluice_limit_free(lim);
}

/* Chains weigh new keys against the budget only when asked (SLUICE_BUDGET: a client's request);
 * the engine's own grants, for tasks already admitted, pass. */
static void test_chain(void **unused)
{
    sluice_limit *a = make(5, 3600 * SEC, SLUICE_KEYS_REFUSE);
    sluice_limit *b = make(5, 3600 * SEC, SLUICE_KEYS_ALLOW);
    sluice_chain_link links[2];
    sluice_decision dec[2];
    sluice_chain_result res;

    (void)unused;
    memset(links, 0, sizeof links);
    links[0].limit = a;
    links[0].key = "new";
    links[0].keylen = 3;
    links[0].units = 1;
    links[1].limit = b;
    links[1].key = "new";
    links[1].keylen = 3;
    links[1].units = 1;
    alloc_set_budget(1);
    assert_int_equal(sluice_chain_decide(links, 2, T0, SLUICE_BUDGET, dec, &res), SLUICE_ENOMEM);
    assert_int_equal(nkeys(a), 0);
    /* Only the ALLOW link: through, untracked. */
    assert_int_equal(sluice_chain_decide(links + 1, 1, T0, SLUICE_BUDGET, dec, &res), 0);
    assert_int_equal(res.allowed, 1);
    assert_int_equal(nkeys(b), 0);
    /* Without the flag the chain is decided as ever. */
    assert_int_equal(sluice_chain_decide(links, 2, T0, 0, dec, &res), 0);
    assert_int_equal(res.allowed, 1);
    assert_int_equal(nkeys(a), 1);
    assert_int_equal(nkeys(b), 1);
    /* A tracked key passes with the flag too. */
    assert_int_equal(sluice_chain_decide(links, 2, T0, SLUICE_BUDGET, dec, &res), 0);
    assert_int_equal(res.allowed, 1);
    alloc_set_budget(0);
    sluice_limit_free(a);
    sluice_limit_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counting),   cmocka_unit_test(test_budget),
        cmocka_unit_test(test_parse_size), cmocka_unit_test(test_config_key),
        cmocka_unit_test(test_refusal),    cmocka_unit_test(test_forget_first),
        cmocka_unit_test(test_chain),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
