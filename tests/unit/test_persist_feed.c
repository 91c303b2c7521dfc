/* SPDX-License-Identifier: MIT */
/*
 * Tests of the engine's change feed (src/engine/feed.c, "The change feed" in
 * include/sluice/engine.h), on a simulated clock: a change made after a pull is in the next pull
 * and a confirmed one is not yielded again; a pull not confirmed is yielded again with what
 * changed since (the union); an asynchronous consumer, which confirms a batch after the engine
 * changed again, loses nothing of those changes; a key the sweep forgets is yielded as a deletion;
 * a replaced limit yields its purge and a dropped definition, over which the caller records the
 * text, and its new keys are tracked without re-arming; recovery's forget calls; a pull that runs
 * out of memory loses nothing; a pull after a reload of 10,000 limits visits only the limits with
 * key changes; and an out-of-memory sweep over everything the feed does.
 */
#include "engine_fixture.h"

#include "engine/feed.h"
#include "testutil.h"

/* ---- The feed's contract (sluice_engine_changes) ------------------------------------------ */

/* An engine with a rate limit "api" keyed by "u" (1 a second), a type "t" on it, its feed on. */
static sluice_engine *feed_engine(void)
{
    sluice_engine *e = fx_engine(NULL);
    const char *limits[] = {"api", NULL};
    const sluice_changes *c;

    assert_int_equal(sluice_engine_changes(e, &c), SLUICE_ESTATE); /* not started */
    assert_null(c);
    fx_rate(e, "api", 1, SEC, 0, "u");
    fx_type(e, "t", limits);
    assert_int_equal(sluice_engine_changes_start(e), SLUICE_OK);
    assert_int_equal(sluice_engine_changes_start(e), SLUICE_OK); /* idempotent */
    return e;
}

static const sluice_changes *pull(sluice_engine *e)
{
    const sluice_changes *c;

    assert_int_equal(sluice_engine_changes(e, &c), SLUICE_OK);
    assert_non_null(c);
    return c;
}

static int batch_has_task(const sluice_changes *c, uint64_t want)
{
    size_t pos = 0;
    uint64_t id;

    while (sluice_changes_next_task(c, &pos, &id))
        if (id == want)
            return 1;
    return 0;
}

static size_t batch_tasks(const sluice_changes *c)
{
    size_t pos = 0, n = 0;
    uint64_t id;

    while (sluice_changes_next_task(c, &pos, &id))
        n++;
    return n;
}

/* Returns 1 and *state when the batch holds key `key` of limit id `lid`. */
static int batch_key(const sluice_changes *c, const char *lid, const char *key, const void **state)
{
    const char *id, *k;
    const void *st;
    size_t pos = 0, keylen, len;

    while (sluice_changes_next_key(c, &pos, &id, &k, &keylen, &st, &len))
        if (strcmp(id, lid) == 0 && keylen == strlen(key) && memcmp(k, key, keylen) == 0) {
            *state = st;
            return 1;
        }
    return 0;
}

/* Submits and delivers a task of user u at now, charging key u of "api". */
static uint64_t charge(sluice_engine *e, const char *u, int64_t now)
{
    char payload[64];
    sluice_delivery out[4];
    uint64_t id;

    snprintf(payload, sizeof payload, "{\"u\":\"%s\"}", u);
    id = fx_submit(e, "t", payload, now);
    assert_true(fx_poll(e, now, 4, out) >= 1); /* this one, and any other of a fresh key */
    return id;
}

static void test_feed_after_pull(void **unused)
{
    sluice_engine *e = feed_engine();
    const sluice_changes *c;
    uint64_t id1, id2, seq;

    (void)unused;
    seq = sluice_engine_changes_seq(e);
    id1 = fx_submit(e, "t", "{\"u\":\"a\"}", T0);
    assert_true(sluice_engine_changes_seq(e) > seq); /* a client may wait on it */
    c = pull(e);
    assert_true(batch_has_task(c, id1));
    assert_true(sluice_changes_has_changes(c));
    /* A change made while the batch is out waits for the next pull, confirmed or not. */
    id2 = fx_submit(e, "t", "{\"u\":\"b\"}", T0);
    sluice_engine_changes_done(e);
    c = pull(e);
    assert_true(batch_has_task(c, id2));
    assert_false(batch_has_task(c, id1)); /* confirmed: not yielded again */
    sluice_engine_changes_done(e);
    c = pull(e);
    assert_int_equal(batch_tasks(c), 0);
    assert_false(sluice_changes_has_changes(c));
    sluice_engine_changes_done(e);
    sluice_engine_changes_done(e); /* nothing out: harmless */
    sluice_engine_free(e);
}

static void test_feed_unconfirmed(void **unused)
{
    sluice_engine *e = feed_engine();
    const sluice_changes *c;
    sluice_changes_counts n;
    uint64_t id1, id2;

    (void)unused;
    id1 = fx_submit(e, "t", "{\"u\":\"a\"}", T0);
    c = pull(e);
    assert_true(batch_has_task(c, id1));
    /* The write failed: no confirmation. The next pull yields the union. */
    id2 = fx_submit(e, "t", "{\"u\":\"b\"}", T0);
    c = pull(e);
    assert_true(batch_has_task(c, id1));
    assert_true(batch_has_task(c, id2));
    assert_int_equal(batch_tasks(c), 2);
    sluice_engine_changes_count(e, &n);
    assert_int_equal(n.tasks, 2);
    assert_int_equal(n.lost, 0);
    sluice_engine_changes_done(e);
    sluice_engine_changes_count(e, &n);
    assert_int_equal(n.tasks, 0);
    c = pull(e);
    assert_int_equal(batch_tasks(c), 0);
    sluice_engine_free(e);
}

/* The pattern of an asynchronous consumer (the server's commit thread): pull a batch, copy it,
 * and pull nothing else until its write ended, while the engine goes on changing. A task and a
 * key that change again while the batch is out are yielded again by the next pull (with their
 * latest value) even though the batch that held them was confirmed; new ones too. */
static void test_feed_async_consumer(void **unused)
{
    sluice_engine *e = feed_engine();
    const sluice_changes *c;
    const void *st_a1, *st_a2;
    unsigned char a1[64];
    size_t pos, keylen, len;
    const char *id, *key;
    const void *st;
    uint64_t id1, id2, id3;

    (void)unused;
    id1 = charge(e, "a", T0);
    c = pull(e);
    assert_true(batch_has_task(c, id1));
    assert_true(batch_key(c, "api", "a", &st_a1));
    /* Copy key a's state as the consumer would: the batch is borrowed. */
    for (pos = 0; sluice_changes_next_key(c, &pos, &id, &key, &keylen, &st, &len);)
        if (keylen == 1 && key[0] == 'a') {
            assert_true(len <= sizeof a1);
            memcpy(a1, st, len);
        }
    /* The write is in flight: task 1 is acked, key a is charged again, a new key b. */
    assert_int_equal(sluice_engine_ack(e, id1, 0, T0 + SEC), SLUICE_OK);
    id2 = charge(e, "a", T0 + SEC);
    id3 = charge(e, "b", T0 + SEC);
    sluice_engine_changes_done(e); /* the write of the first batch succeeded */
    c = pull(e);
    assert_true(batch_has_task(c, id1)); /* changed after the first pull: yielded again */
    assert_true(batch_has_task(c, id2));
    assert_true(batch_has_task(c, id3));
    assert_true(batch_key(c, "api", "a", &st_a2));
    assert_true(batch_key(c, "api", "b", &st));
    assert_memory_not_equal(st_a2, a1, 8); /* the later state of a */
    sluice_engine_changes_done(e);
    c = pull(e);
    assert_int_equal(batch_tasks(c), 0);
    assert_false(batch_key(c, "api", "a", &st));
    sluice_engine_free(e);
}

static void test_feed_keys_and_sweep(void **unused)
{
    sluice_engine *e = feed_engine();
    const sluice_changes *c;
    const void *state = NULL;
    sluice_limit_stats st;

    (void)unused;
    assert_int_equal(sluice_engine_ack(e, charge(e, "a", T0), -1, T0), SLUICE_OK);
    c = pull(e);
    assert_true(batch_key(c, "api", "a", &state));
    assert_non_null(state); /* a spent burst: worth keeping */
    assert_false(batch_key(c, "api", "b", &state));
    sluice_engine_changes_done(e);
    c = pull(e);
    assert_false(batch_key(c, "api", "a", &state)); /* unchanged since */
    sluice_engine_changes_done(e);
    /* Idle a minute later: the sweep forgets the key, and the feed says to delete it. */
    assert_int_equal(sluice_engine_tick(e, T0 + MIN), SLUICE_OK);
    sluice_limit_get_stats(sluice_engine_limit_by_id(e, "api"), &st);
    assert_int_equal(st.keys, 0);
    c = pull(e);
    assert_true(batch_key(c, "api", "a", &state));
    assert_null(state);
    assert_false(sluice_changes_has_changes(c)); /* key states alone */
    sluice_engine_changes_done(e);
    sluice_engine_free(e);
}

static void test_feed_limit_replaced(void **unused)
{
    sluice_engine *e = feed_engine();
    const sluice_changes *c;
    const void *state = NULL;
    const char *name, *spec, *id;
    sluice_limit_def_op op;
    size_t pos = 0;

    (void)unused;
    charge(e, "a", T0);
    c = pull(e); /* out, not confirmed: holds key a of the old limit */
    assert_true(batch_key(c, "api", "a", &state));
    fx_rate(e, "api", 5, SEC, 0, "u"); /* replaced: its stored key state restarts */
    c = pull(e);
    assert_false(batch_key(c, "api", "a", &state)); /* dropped by the purge */
    assert_int_equal(sluice_changes_next_purge(c, &pos, &id), 1);
    assert_string_equal(id, "api");
    pos = 0;
    assert_int_equal(sluice_changes_next_limit(c, &pos, &name, &op, &spec), 1);
    assert_string_equal(name, "api");
    assert_int_equal(op, SLUICE_LIMIT_DEF_DROP);
    assert_null(spec);
    assert_true(sluice_changes_has_changes(c));
    /* The new limit's keys are tracked (no re-arming by the consumer), after the purge. */
    charge(e, "b", T0 + SEC);
    /* The caller that knows the text records it over the drop. */
    assert_int_equal(sluice_engine_changes_limit_def(e, "api", "rate=5/1s"), SLUICE_OK);
    c = pull(e);
    assert_true(batch_key(c, "api", "b", &state));
    assert_non_null(state);
    pos = 0;
    assert_int_equal(sluice_changes_next_limit(c, &pos, &name, &op, &spec), 1);
    assert_int_equal(op, SLUICE_LIMIT_DEF_SET);
    assert_string_equal(spec, "rate=5/1s");
    sluice_engine_changes_done(e);
    assert_int_equal(sluice_engine_changes_limit_def(e, "api", NULL), SLUICE_OK);
    c = pull(e);
    pos = 0;
    assert_int_equal(sluice_changes_next_limit(c, &pos, &name, &op, &spec), 1);
    assert_int_equal(op, SLUICE_LIMIT_DEF_GONE);
    sluice_engine_changes_done(e);
    sluice_engine_free(e);
}

/* Recovery's records: a stored key to delete unless its limit takes it again, and the keys of
 * a limit that is gone. */
static void test_feed_forget(void **unused)
{
    sluice_engine *e = fx_engine(NULL);
    const sluice_changes *c;
    const void *state = NULL;
    const char *id;
    size_t pos = 0;

    (void)unused;
    assert_int_equal(sluice_engine_changes_forget_key(e, "api", "a", 1), SLUICE_ESTATE);
    assert_int_equal(sluice_engine_changes_forget_keys(e, "gone"), SLUICE_ESTATE);
    assert_int_equal(sluice_engine_changes_limit_def(e, "api", "x"), SLUICE_ESTATE);
    assert_int_equal(sluice_engine_changes_seq(e), 0);
    sluice_engine_free(e);
    e = feed_engine();
    assert_int_equal(sluice_engine_changes_forget_key(e, "api", "a", 1), SLUICE_OK);
    assert_int_equal(sluice_engine_changes_forget_key(e, "api", "b", 1), SLUICE_OK);
    assert_int_equal(sluice_engine_changes_forget_keys(e, "gone"), SLUICE_OK);
    charge(e, "a", T0); /* taken again: its state replaces the deletion */
    c = pull(e);
    assert_true(batch_key(c, "api", "a", &state));
    assert_non_null(state);
    assert_true(batch_key(c, "api", "b", &state));
    assert_null(state);
    assert_int_equal(sluice_changes_next_purge(c, &pos, &id), 1);
    assert_string_equal(id, "gone");
    sluice_engine_changes_done(e);
    sluice_engine_free(e);
}

/* A pull that runs out of memory loses nothing: the next one yields everything. With `out`, a
 * batch is out (pulled, not confirmed) when the pull under test merges into it; without, the pull
 * moves what was recorded into the empty batch, which allocates nothing, and only its key drain
 * can run out (which keeps the key for the next pull). */
static void pull_oom(int out)
{
    long n;

    for (n = 1; n < 1000; n++) {
        sluice_engine *e = feed_engine();
        const sluice_changes *c;
        uint64_t ids[100];
        int rc;

        for (size_t i = 0; i < 100; i++) {
            ids[i] = fx_submit(e, "t", "{\"u\":\"a\"}", T0);
            if (out && i == 49)
                (void)pull(e);
        }
        charge(e, "k", T0);
        oom_install(n);
        rc = sluice_engine_changes(e, &c);
        oom_uninstall();
        if (rc == SLUICE_OK) {
            assert_non_null(c);
        } else {
            assert_int_equal(rc, SLUICE_ENOMEM);
            assert_null(c);
        }
        if (rc != SLUICE_OK || n % 2 || !out) { /* a failed pull, or one not confirmed */
            const void *state;

            c = pull(e);
            for (size_t i = 0; i < 100; i++)
                assert_true(batch_has_task(c, ids[i]));
            assert_true(batch_has_task(c, ids[99] + 1)); /* the charged one */
            assert_true(batch_key(c, "api", "k", &state));
        }
        sluice_engine_changes_done(e);
        sluice_engine_free(e);
        if (rc == SLUICE_OK && (out || n > 3))
            break;
    }
    assert_true(n > 1);
}

static void test_feed_pull_oom(void **unused)
{
    (void)unused;
    pull_oom(1);
    pull_oom(0);
}

/* Everything the feed does under an allocation failure at every point: each call fails with
 * SLUICE_ENOMEM or succeeds (a change the engine could not record is counted as lost), and
 * nothing leaks. */
static int feed_oom_body(void *arg)
{
    sluice_engine *e = NULL;
    sluice_limit_policy p;
    sluice_type_policy tp;
    const char *limits[] = {"api", NULL};
    const sluice_changes *c;
    sluice_delivery out[4];
    sluice_task_spec s;
    uint64_t id;
    char msg[128];
    int rc;

    (void)arg;
    rc = sluice_engine_new(NULL, &e);
    if (rc != SLUICE_OK)
        return rc;
    fx_limit(&p, "api", SLUICE_RATE, 1, SEC);
    p.key_source = SLUICE_KEY_PATH;
    p.key_path = (char *)"u";
    rc = sluice_engine_set_limit(e, &p, T0, msg, sizeof msg);
    if (rc == SLUICE_OK)
        rc = sluice_engine_changes_start(e);
    if (rc == SLUICE_OK) {
        sluice_type_policy_init(&tp);
        tp.name = (char *)"t";
        tp.limits = (char **)limits;
        tp.nlimits = 1;
        rc = sluice_engine_set_type(e, &tp, T0, msg, sizeof msg);
    }
    memset(&s, 0, sizeof s);
    s.type = "t";
    s.payload = "{\"u\":\"a\"}";
    s.payload_len = strlen(s.payload);
    for (int i = 0; i < 3 && rc == SLUICE_OK; i++)
        rc = sluice_engine_submit(e, &s, T0, &id, NULL);
    if (rc == SLUICE_OK && sluice_engine_poll(e, NULL, 0, 4, T0, out) < 0)
        rc = SLUICE_ENOMEM;
    if (rc == SLUICE_OK)
        rc = sluice_engine_changes(e, &c);
    if (rc == SLUICE_OK)
        rc = sluice_engine_changes_limit_def(e, "api", "rate=1/1s");
    if (rc == SLUICE_OK)
        rc =
            sluice_engine_set_limit(e, &p, T0, msg, sizeof msg); /* replaced while a batch is out */
    if (rc == SLUICE_OK)
        rc = sluice_engine_changes(e, &c);
    if (rc == SLUICE_OK)
        sluice_engine_changes_done(e);
    if (rc == SLUICE_OK && sluice_engine_tick(e, T0 + MIN) != SLUICE_OK)
        rc = SLUICE_ENOMEM;
    if (rc == SLUICE_OK)
        rc = sluice_engine_changes(e, &c);
    sluice_engine_free(e);
    return rc;
}

/* A foreign limit (kept outside the engine, as the server's CL.THROTTLE triples): visited after
 * the engine's own under its '!' id, resolved by limit_by_id, and its keys drained by a pull. */
typedef struct foreign_fx {
    sluice_limit *lim;
    int finds;
} foreign_fx;

static int foreign_visit(void *arg, int (*fn)(const char *id, sluice_limit *lim, void *fnarg),
                         void *fnarg)
{
    foreign_fx *f = arg;

    return fn("!x", f->lim, fnarg);
}

static sluice_limit *foreign_find(void *arg, const char *id)
{
    foreign_fx *f = arg;

    f->finds++;
    return strcmp(id, "!x") == 0 ? f->lim : NULL;
}

static void test_feed_foreign(void **unused)
{
    sluice_engine *e = feed_engine();
    foreign_fx f = {NULL, 0};
    sluice_foreign_limits fl = {foreign_visit, foreign_find, &f};
    sluice_limit_def def;
    sluice_decision d;
    const void *st;
    char msg[128];

    (void)unused;
    sluice_limit_def_init(&def, SLUICE_RATE);
    def.limit = 1;
    def.period_ns = SEC;
    assert_int_equal(sluice_limit_new(&def, &f.lim, msg, sizeof msg), SLUICE_OK);
    assert_true(sluice_engine_changes_running(e));
    sluice_engine_set_foreign_limits(e, &fl);
    assert_ptr_equal(sluice_engine_limit_by_id(e, "!x"), f.lim);
    assert_null(sluice_engine_limit_by_id(e, "!y"));
    assert_int_equal(f.finds, 2);
    sluice_limit_track_changes(f.lim, 1);
    assert_int_equal(sluice_limit_decide(f.lim, "k", 1, 1, SEC, 0, &d), SLUICE_OK);
    assert_true(d.allowed);
    assert_true(batch_key(pull(e), "!x", "k", &st));
    sluice_engine_changes_done(e);
    sluice_engine_set_foreign_limits(e, NULL);
    assert_null(sluice_engine_limit_by_id(e, "!x"));
    assert_int_equal(f.finds, 2);
    sluice_engine_free(e);
    sluice_limit_free(f.lim);
}

static size_t batch_purges(const sluice_changes *c)
{
    size_t pos = 0, n = 0;
    const char *id;

    while (sluice_changes_next_purge(c, &pos, &id))
        n++;
    return n;
}

/* A reload replacing 10,000 limits (as CONFIG RELOAD does: built apart, then installed) records
 * each one's purge and dropped definition, but the pulls that follow visit only the limits whose
 * keys changed: none after the reload, then the one a task charged. */
#define MANY 10000
static void test_feed_visits_changed(void **unused)
{
    sluice_engine *e = feed_engine();
    const sluice_changes *c;
    const void *state = NULL;
    char name[32], msg[256];
    uint64_t v;

    (void)unused;
    for (int i = 0; i < MANY; i++) {
        snprintf(name, sizeof name, "l%d", i);
        fx_rate(e, name, 10, SEC, 0, "u");
    }
    charge(e, "a", T0);
    c = pull(e);
    assert_true(batch_key(c, "api", "a", &state));
    sluice_engine_changes_done(e);
    v = feed_visits(e);
    for (int i = 0; i < MANY; i++) {
        sluice_limit_policy p;
        sluice_limit_build *b;

        snprintf(name, sizeof name, "l%d", i);
        fx_limit(&p, name, SLUICE_RATE, 20, SEC);
        p.key_source = SLUICE_KEY_PATH;
        p.key_path = (char *)"u";
        assert_int_equal(sluice_limit_build_new(&p, &b, msg, sizeof msg), SLUICE_OK);
        assert_int_equal(sluice_engine_install_limit(e, &b, T0 + SEC), SLUICE_OK);
        sluice_limit_build_free(b); /* the replaced cores */
    }
    c = pull(e);
    assert_int_equal(batch_purges(c), MANY); /* every stored key state of theirs goes */
    assert_int_equal(feed_visits(e), v);     /* but no limit had a key to drain */
    sluice_engine_changes_done(e);
    charge(e, "b", T0 + 2 * SEC);
    c = pull(e);
    assert_true(batch_key(c, "api", "b", &state));
    assert_int_equal(feed_visits(e), v + 1); /* "api" alone */
    sluice_engine_changes_done(e);
    c = pull(e);
    assert_false(sluice_changes_has_changes(c));
    assert_int_equal(feed_visits(e), v + 1); /* nothing changed: nothing visited */
    sluice_engine_changes_done(e);
    sluice_engine_free(e);
}

static void test_feed_oom(void **unused)
{
    (void)unused;
    oom_sweep(feed_oom_body, NULL, 5000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_feed_after_pull),     cmocka_unit_test(test_feed_unconfirmed),
        cmocka_unit_test(test_feed_async_consumer), cmocka_unit_test(test_feed_keys_and_sweep),
        cmocka_unit_test(test_feed_limit_replaced), cmocka_unit_test(test_feed_forget),
        cmocka_unit_test(test_feed_pull_oom),       cmocka_unit_test(test_feed_foreign),
        cmocka_unit_test(test_feed_visits_changed), cmocka_unit_test(test_feed_oom),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
