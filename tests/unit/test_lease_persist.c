/* SPDX-License-Identifier: MIT */
/*
 * Kept leases across a restart, on a simulated clock (issue 16): a direct holder's lease
 * (sluice_lease_acquire_kept) is saved with its concurrency key's state and restored with its
 * id and tag, so that the limit still counts it and its holder's handle still names it.
 *
 * Core: only kept leases are saved (a task's lease is re-taken by its task, so saving it would
 * count it twice); taking, renewing and releasing a kept lease records its key, and a release
 * yields a deletion; a lease that ended while the process was down is not restored, nor
 * recorded; restored leases count even past a smaller limit; ids issued later are above the
 * restored ones; the sweep records the forgetting of a key that held kept leases and of no
 * other; malformed blobs are refused; out of memory at every allocation of an import and of a
 * kept acquire leaves nothing behind.
 *
 * Engine: the change feed carries a kept lease and the task records of its group (limit, id and
 * tag); restored into a fresh engine, the limit still counts the lease, the group's queued task
 * runs under it, a group task restored running takes no unit of its own, and releasing the
 * lease gives the slot to the task that waited for it. Restored after the lease's end, the group
 * is over and each of its tasks takes its own unit.
 */
#include "engine_fixture.h"

#include "testutil.h"

#define TAG  UINT64_C(1763078400000000001) /* a handle generation: the server's clock in ns */
#define TAG2 UINT64_C(1763078500000000002)

/* ---- A store in memory ----------------------------------------------------------------------- */

/* One key state row: limit id, key, blob (len 0: deleted). */
typedef struct row {
    char id[32];
    char key[32];
    size_t keylen;
    unsigned char blob[1024];
    size_t len;
} row;

typedef struct mem {
    row rows[16];
    size_t n;
    size_t puts; /* rows reported since the test last looked */
    const char *id;
} mem;

static row *mem_find(mem *m, const char *id, const char *key, size_t keylen)
{
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->rows[i].id, id) == 0 && m->rows[i].keylen == keylen &&
            memcmp(m->rows[i].key, key, keylen) == 0)
            return &m->rows[i];
    return NULL;
}

static void mem_put_id(mem *m, const char *id, const char *key, size_t keylen, const void *state,
                       size_t len)
{
    row *r = mem_find(m, id, key, keylen);

    if (!r) {
        assert_true(m->n < sizeof m->rows / sizeof m->rows[0]);
        r = &m->rows[m->n++];
        snprintf(r->id, sizeof r->id, "%s", id);
        assert_true(keylen < sizeof r->key);
        memcpy(r->key, key, keylen);
        r->keylen = keylen;
    }
    assert_true(len <= sizeof r->blob);
    if (len)
        memcpy(r->blob, state, len);
    r->len = len;
    m->puts++;
}

static int mem_put(const char *key, size_t keylen, const void *state, size_t len, void *arg)
{
    mem *m = arg;

    mem_put_id(m, m->id, key, keylen, state, len);
    return 0;
}

/* Drains lim into m under id "c". */
static void drain(sluice_limit *lim, mem *m)
{
    m->id = "c";
    assert_int_equal(sluice_limit_drain(lim, mem_put, m), SLUICE_OK);
}

/* Imports every row of m into lim at now. */
static void import_all(sluice_limit *lim, const mem *m, int64_t now)
{
    for (size_t i = 0; i < m->n; i++)
        if (m->rows[i].len)
            assert_int_equal(sluice_limit_import(lim, m->rows[i].key, m->rows[i].keylen,
                                                 m->rows[i].blob, m->rows[i].len, now),
                             SLUICE_OK);
}

/* A concurrency limit of `limit` units, tracking changes. */
static sluice_limit *conc(int64_t limit)
{
    sluice_limit_def def;
    sluice_limit *l = NULL;
    char msg[128];

    sluice_limit_def_init(&def, SLUICE_CONCURRENCY);
    def.limit = limit;
    def.ttl_ns = MIN;
    assert_int_equal(sluice_limit_new(&def, &l, msg, sizeof msg), SLUICE_OK);
    sluice_limit_track_changes(l, 1);
    return l;
}

static uint64_t take(sluice_limit *l, const char *key, int64_t units, int64_t ttl, uint64_t tag,
                     int64_t now)
{
    sluice_decision d;

    if (tag)
        assert_int_equal(sluice_lease_acquire_kept(l, key, strlen(key), units, ttl, tag, now, &d),
                         SLUICE_OK);
    else
        assert_int_equal(sluice_lease_acquire(l, key, strlen(key), units, ttl, now, &d), SLUICE_OK);
    return d.allowed ? d.lease_id : 0;
}

static int full(sluice_limit *l, const char *key, int64_t units, int64_t now)
{
    sluice_decision d;

    assert_int_equal(sluice_limit_decide(l, key, strlen(key), units, now, SLUICE_PEEK, &d),
                     SLUICE_OK);
    return !d.allowed;
}

/* ---- Core ------------------------------------------------------------------------------------ */

/* A kept lease and a task's lease on one key: only the kept one is saved; restored later, it is
 * counted, keeps its id and tag, renews and releases, and new ids are above it. */
static void test_round_trip(void **unused)
{
    sluice_limit *a = conc(3), *b = conc(3);
    mem m = {0};
    uint64_t kept, task, tag = 0, next;
    int64_t exp = 0;

    (void)unused;
    kept = take(a, "k", 2, 10 * SEC, TAG, T0);
    task = take(a, "k", 1, 10 * SEC, 0, T0);
    assert_true(kept && task);
    assert_int_equal(sluice_lease_tag(a, kept, T0, &tag), SLUICE_OK);
    assert_true(tag == TAG);
    assert_int_equal(sluice_lease_tag(a, task, T0, &tag), SLUICE_OK);
    assert_true(tag == 0);
    assert_int_equal(sluice_lease_tag(a, 99, T0, &tag), SLUICE_ESTALE);
    drain(a, &m);
    assert_int_equal(m.n, 1);
    assert_int_equal(m.rows[0].len, 1 + 8 + 32); /* the kept lease alone */

    /* The restart: 1 s later, in a fresh limit. */
    import_all(b, &m, T0 + SEC);
    assert_true(full(b, "k", 2, T0 + SEC)); /* 2 of 3 held by the restored lease */
    assert_false(full(b, "k", 1, T0 + SEC));
    assert_int_equal(sluice_lease_tag(b, kept, T0 + SEC, &tag), SLUICE_OK);
    assert_true(tag == TAG);
    assert_int_equal(sluice_lease_check(b, kept, "k", 1, T0 + SEC, &exp), SLUICE_OK);
    assert_int_equal(exp, T0 + 10 * SEC); /* its expiry, in wall time */
    assert_int_equal(sluice_lease_check(b, task, "k", 1, T0 + SEC, NULL), SLUICE_ESTALE);
    /* Ids go on above the restored ones; the task's lease was not restored, so its id may be
     * issued again, under another tag (which tells a stale handle from the new holder). */
    next = take(b, "k", 1, MIN, TAG2, T0 + SEC);
    assert_true(next > kept);
    assert_int_equal(sluice_lease_tag(b, next, T0 + SEC, &tag), SLUICE_OK);
    assert_true(tag == TAG2);
    /* The import recorded the key, so its first drain rewrites it with both kept leases. */
    m.n = 0;
    drain(b, &m);
    assert_int_equal(m.n, 1);
    assert_int_equal(m.rows[0].len, 1 + 8 + 2 * 32);
    assert_int_equal(sluice_lease_renew(b, kept, MIN, T0 + 2 * SEC, &exp), SLUICE_OK);
    assert_int_equal(exp, T0 + 2 * SEC + MIN);
    assert_int_equal(sluice_lease_release(b, kept, T0 + 2 * SEC), SLUICE_OK);
    assert_false(full(b, "k", 2, T0 + 2 * SEC));
    sluice_limit_free(a);
    sluice_limit_free(b);
}

/* Renew and release record the key; a release of the last kept lease yields a deletion, and a
 * release again is still a no-op. A task's lease records nothing. */
static void test_changes_recorded(void **unused)
{
    sluice_limit *a = conc(3), *b = conc(3);
    mem m = {0};
    uint64_t kept, task;
    int64_t exp;

    (void)unused;
    task = take(a, "t", 1, MIN, 0, T0);
    assert_true(task);
    drain(a, &m);
    assert_int_equal(m.puts, 0);
    assert_int_equal(sluice_lease_release(a, task, T0), SLUICE_OK);
    drain(a, &m);
    assert_int_equal(m.puts, 0);

    kept = take(a, "k", 1, 10 * SEC, TAG, T0);
    drain(a, &m);
    assert_int_equal(m.puts, 1);
    drain(a, &m);
    assert_int_equal(m.puts, 1); /* nothing changed since */
    assert_int_equal(sluice_lease_renew(a, kept, MIN, T0 + SEC, &exp), SLUICE_OK);
    drain(a, &m);
    assert_int_equal(m.puts, 2);
    /* The renewed expiry is what a restart sees. */
    import_all(b, &m, T0 + 30 * SEC);
    assert_int_equal(sluice_lease_check(b, kept, "k", 1, T0 + 30 * SEC, NULL), SLUICE_OK);
    assert_int_equal(sluice_lease_release(a, kept, T0 + 2 * SEC), SLUICE_OK);
    drain(a, &m);
    assert_int_equal(m.puts, 3);
    assert_int_equal(m.rows[0].len, 0); /* deleted */
    assert_int_equal(sluice_lease_release(a, kept, T0 + 2 * SEC), SLUICE_OK);
    sluice_limit_free(a);
    sluice_limit_free(b);
}

/* A lease whose end passed while the process was down is not restored and not recorded; its
 * units are free. */
static void test_expired_while_down(void **unused)
{
    sluice_limit *a = conc(2), *b = conc(2);
    mem m = {0};
    uint64_t kept, tag;

    (void)unused;
    kept = take(a, "k", 2, 10 * SEC, TAG, T0);
    drain(a, &m);
    assert_int_equal(m.n, 1);
    import_all(b, &m, T0 + 10 * SEC); /* exactly its end: expired */
    assert_int_equal(sluice_lease_tag(b, kept, T0 + 10 * SEC, &tag), SLUICE_ESTALE);
    assert_false(full(b, "k", 2, T0 + 10 * SEC));
    m.puts = 0;
    drain(b, &m);
    assert_int_equal(m.puts, 0); /* the store's row is the recovery's to delete */
    sluice_limit_free(a);
    sluice_limit_free(b);
}

/* Leases restored count even past a limit that shrank while down, until they end. */
static void test_restored_past_limit(void **unused)
{
    sluice_limit *a = conc(3), *b = conc(1);
    mem m = {0};
    uint64_t l1, l2;

    (void)unused;
    l1 = take(a, "k", 1, 10 * SEC, TAG, T0);
    l2 = take(a, "k", 2, 20 * SEC, TAG, T0);
    drain(a, &m);
    import_all(b, &m, T0 + SEC);
    assert_true(full(b, "k", 1, T0 + SEC));
    assert_int_equal(sluice_lease_release(b, l2, T0 + SEC), SLUICE_OK);
    assert_true(full(b, "k", 1, T0 + SEC));
    assert_false(full(b, "k", 1, T0 + 10 * SEC)); /* l1 ended */
    assert_int_equal(sluice_lease_check(b, l1, "k", 1, T0 + 10 * SEC, NULL), SLUICE_ESTALE);
    sluice_limit_free(a);
    sluice_limit_free(b);
}

/* The sweep forgets an idle key: recorded (a deletion) when it held kept leases, not when only
 * tasks' leases were on it. */
static void test_sweep(void **unused)
{
    sluice_limit *a = conc(2);
    mem m = {0};

    (void)unused;
    assert_true(take(a, "kept", 1, SEC, TAG, T0));
    assert_true(take(a, "task", 1, SEC, 0, T0));
    drain(a, &m);
    assert_int_equal(m.n, 1);
    m.puts = 0;
    assert_int_equal(sluice_limit_sweep(a, T0 + 2 * SEC, 100), 2);
    drain(a, &m);
    assert_int_equal(m.puts, 1);
    assert_int_equal(m.rows[0].keylen, 4);
    assert_memory_equal(m.rows[0].key, "kept", 4);
    assert_int_equal(m.rows[0].len, 0);
    sluice_limit_free(a);
}

static void put64le(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* Malformed blobs, and blobs of another kind, are refused; a kept acquire needs a tag. */
static void test_refusals(void **unused)
{
    sluice_limit *a = conc(2), *rate = NULL;
    sluice_limit_def def;
    unsigned char b[1 + 8 + 32];
    sluice_decision d;
    char msg[128];

    (void)unused;
    assert_int_equal(sluice_lease_acquire_kept(a, "k", 1, 1, SEC, 0, T0, &d), SLUICE_EINVAL);
    memset(b, 0, sizeof b);
    b[0] = 'C';
    put64le(b + 1, 1);
    put64le(b + 9, 5);              /* id */
    put64le(b + 17, TAG);           /* tag */
    put64le(b + 25, 1);             /* units */
    put64le(b + 33, T0 + 10 * SEC); /* expiry */
    assert_int_equal(sluice_limit_import(a, "k", 1, b, 5, T0), SLUICE_EINVAL);
    assert_int_equal(sluice_limit_import(a, "k", 1, b, sizeof b - 1, T0), SLUICE_EINVAL);
    put64le(b + 1, 2); /* says 2 leases, holds 1 */
    assert_int_equal(sluice_limit_import(a, "k", 1, b, sizeof b, T0), SLUICE_EINVAL);
    put64le(b + 1, 1);
    put64le(b + 17, 0); /* no tag: never saved */
    assert_int_equal(sluice_limit_import(a, "k", 1, b, sizeof b, T0), SLUICE_EINVAL);
    put64le(b + 17, TAG);
    put64le(b + 25, 0); /* no units */
    assert_int_equal(sluice_limit_import(a, "k", 1, b, sizeof b, T0), SLUICE_EINVAL);
    put64le(b + 25, 1);
    b[0] = 'R';
    assert_int_equal(sluice_limit_import(a, "k", 1, b, sizeof b, T0), SLUICE_EINVAL);
    b[0] = 'C';
    sluice_limit_def_init(&def, SLUICE_RATE);
    def.limit = 10;
    def.period_ns = SEC;
    assert_int_equal(sluice_limit_new(&def, &rate, msg, sizeof msg), SLUICE_OK);
    assert_int_equal(sluice_limit_import(rate, "k", 1, b, sizeof b, T0), SLUICE_EINVAL);
    /* A second record malformed: nothing of the blob is restored. */
    {
        unsigned char two[1 + 8 + 64];
        uint64_t tag;

        memcpy(two, b, sizeof b);
        put64le(two + 1, 2);
        memcpy(two + 41, b + 9, 32);
        put64le(two + 41, 6); /* id */
        put64le(two + 57, 0); /* no units */
        assert_int_equal(sluice_limit_import(a, "k", 1, two, sizeof two, T0), SLUICE_EINVAL);
        assert_int_equal(sluice_lease_tag(a, 5, T0, &tag), SLUICE_ESTALE);
    }
    /* The good one, twice: the second names an id taken. */
    assert_int_equal(sluice_limit_import(a, "k", 1, b, sizeof b, T0), SLUICE_OK);
    assert_int_equal(sluice_limit_import(a, "j", 1, b, sizeof b, T0), SLUICE_EINVAL);
    assert_false(full(a, "j", 2, T0));
    assert_true(full(a, "k", 2, T0));
    sluice_limit_free(rate);
    sluice_limit_free(a);
}

/* ---- Out of memory -----------------------------------------------------------------------------
 */

typedef struct oom_case {
    mem m;
} oom_case;

/* A tracking concurrency limit of 2, made under the failing allocator. */
static int oom_limit(sluice_limit **out)
{
    sluice_limit_def def;
    char msg[128];
    int rc;

    sluice_limit_def_init(&def, SLUICE_CONCURRENCY);
    def.limit = 2;
    rc = sluice_limit_new(&def, out, msg, sizeof msg);
    if (rc == SLUICE_OK)
        sluice_limit_track_changes(*out, 1);
    return rc;
}

static int oom_import(void *arg)
{
    oom_case *c = arg;
    const row *r = &c->m.rows[0];
    sluice_limit *lim = NULL;
    int rc = oom_limit(&lim);

    if (rc == SLUICE_OK)
        rc = sluice_limit_import(lim, r->key, r->keylen, r->blob, r->len, T0 + SEC);
    if (rc == SLUICE_OK)
        assert_true(full(lim, "k", 1, T0 + SEC));
    sluice_limit_free(lim);
    return rc;
}

static int oom_acquire(void *arg)
{
    sluice_limit *lim = NULL;
    sluice_decision d;
    int rc = oom_limit(&lim);

    (void)arg;
    if (rc == SLUICE_OK)
        rc = sluice_lease_acquire_kept(lim, "k", 1, 1, SEC, TAG, T0, &d);
    if (rc == SLUICE_OK) {
        assert_true(d.allowed);
        assert_int_equal(sluice_lease_release(lim, d.lease_id, T0), SLUICE_OK);
    } else if (lim) {
        assert_false(full(lim, "k", 1, T0)); /* nothing taken */
    }
    sluice_limit_free(lim);
    return rc;
}

static void test_oom(void **unused)
{
    static oom_case c;
    sluice_limit *a = conc(2);

    (void)unused;
    memset(&c, 0, sizeof c);
    assert_true(take(a, "k", 2, 10 * SEC, TAG, T0));
    drain(a, &c.m);
    sluice_limit_free(a);
    assert_true(oom_sweep(oom_import, &c, 100) > 1);
    assert_true(oom_sweep(oom_acquire, NULL, 100) > 1);
}

/* ---- Engine ---------------------------------------------------------------------------------- */

/* What a store holds of an engine: key state rows and task records (deep copies). */
typedef struct engine_store {
    mem keys;
    sluice_task_record tasks[8];
    char strs[8][4][64]; /* each task's type, payload, lease_limit */
    size_t ntasks;
} engine_store;

static void keep_task(engine_store *st, const sluice_task_record *r)
{
    size_t i;

    for (i = 0; i < st->ntasks && st->tasks[i].id != r->id; i++)
        ;
    if (i == st->ntasks) {
        assert_true(st->ntasks < 8);
        st->ntasks++;
    }
    st->tasks[i] = *r;
    snprintf(st->strs[i][0], 64, "%s", r->type);
    st->tasks[i].type = st->strs[i][0];
    assert_true(r->payload_len < 64);
    memcpy(st->strs[i][1], r->payload, r->payload_len);
    st->tasks[i].payload = st->strs[i][1];
    if (r->lease_limit) {
        snprintf(st->strs[i][2], 64, "%s", r->lease_limit);
        st->tasks[i].lease_limit = st->strs[i][2];
    }
}

/* One loop turn of a store: pulls e's feed, keeps what it says, confirms. */
static void store_turn(sluice_engine *e, engine_store *st)
{
    const sluice_changes *c;
    const char *id, *key;
    const void *state;
    size_t pos, keylen, len;
    uint64_t tid;

    assert_int_equal(sluice_engine_changes(e, &c), SLUICE_OK);
    for (pos = 0; sluice_changes_next_key(c, &pos, &id, &key, &keylen, &state, &len);)
        mem_put_id(&st->keys, id, key, keylen, state, len);
    for (pos = 0; sluice_changes_next_task(c, &pos, &tid);) {
        sluice_task_record r;

        assert_int_equal(sluice_engine_export_task(e, tid, &r), SLUICE_OK);
        keep_task(st, &r);
    }
    sluice_engine_changes_done(e);
}

/* Recovery into a fresh engine at now: key states first, then tasks (as durable_load does). */
static void recover(sluice_engine *e, const engine_store *st, int64_t now)
{
    assert_int_equal(sluice_engine_changes_start(e), SLUICE_OK);
    for (size_t i = 0; i < st->keys.n; i++) {
        const row *r = &st->keys.rows[i];
        sluice_limit *lim = sluice_engine_limit_by_id(e, r->id);

        assert_non_null(lim);
        if (r->len)
            assert_int_equal(sluice_limit_import(lim, r->key, r->keylen, r->blob, r->len, now),
                             SLUICE_OK);
    }
    for (size_t i = 0; i < st->ntasks; i++) {
        sluice_submit_error err;

        if (sluice_engine_restore_task(e, &st->tasks[i], now, &err) != SLUICE_OK)
            fail_msg("restore %llu: %s", (unsigned long long)st->tasks[i].id, err.message);
    }
}

/* A concurrency limit "wf" of 1 keyed by input.wf, and type "step" naming it. */
static sluice_limit *wf_setup(sluice_engine *e)
{
    static const char *const lims[] = {"wf", NULL};
    sluice_limit_policy p;
    sluice_limit *live = NULL;

    fx_limit(&p, "wf", SLUICE_CONCURRENCY, 1, 0);
    p.key_source = SLUICE_KEY_PATH;
    p.key_path = (char *)"wf";
    fx_set_limit(e, &p);
    fx_type(e, "step", lims);
    assert_non_null(sluice_engine_get_limit(e, "wf", &live));
    return live;
}

static uint64_t submit_step(sluice_engine *e, uint64_t lease, uint64_t tag, int64_t now)
{
    sluice_task_spec s;

    memset(&s, 0, sizeof s);
    s.type = "step";
    s.payload = "{\"wf\":\"w1\"}";
    s.payload_len = strlen(s.payload);
    if (lease) {
        s.lease_limit = "wf";
        s.lease_id = lease;
        s.lease_tag = tag;
    }
    return fx_submit_spec(e, &s, now);
}

/* Builds the world before the restart: a kept lease of 10 s on w1, a group of two under it
 * (the first running), and another producer's task waiting for the slot. */
static void before_restart(engine_store *st, uint64_t *lease, uint64_t ids[3])
{
    sluice_engine *e = fx_engine(NULL);
    sluice_limit *live = wf_setup(e);
    sluice_delivery out[4];
    sluice_task_spec bad;
    sluice_submit_error err;
    uint64_t id;

    assert_int_equal(sluice_engine_changes_start(e), SLUICE_OK);
    *lease = take(live, "w1", 1, 10 * SEC, TAG, T0);
    assert_true(*lease);
    /* The tag must be the lease's: another is someone else's lease. */
    memset(&bad, 0, sizeof bad);
    bad.type = "step";
    bad.payload = "{\"wf\":\"w1\"}";
    bad.payload_len = strlen(bad.payload);
    bad.lease_limit = "wf";
    bad.lease_id = *lease;
    bad.lease_tag = TAG2;
    assert_int_equal(sluice_engine_submit(e, &bad, T0, &id, &err), SLUICE_ESTALE);
    ids[0] = submit_step(e, *lease, TAG, T0);
    ids[1] = submit_step(e, *lease, TAG, T0);
    ids[2] = submit_step(e, 0, 0, T0);
    assert_int_equal(fx_poll(e, T0, 1, out), 1);
    assert_int_equal(out[0].id, ids[0]);
    store_turn(e, st);
    assert_int_equal(st->keys.n, 1);
    assert_string_equal(st->keys.rows[0].id, "wf");
    assert_int_equal(st->ntasks, 3);
    assert_string_equal(st->tasks[1].lease_limit, "wf");
    assert_true(st->tasks[1].lease_id == *lease && st->tasks[1].lease_tag == TAG);
    assert_null(st->tasks[2].lease_limit);
    sluice_engine_free(e);
}

/* Restored while the lease lives: the limit still counts it, the group's queued task runs under
 * it, the restored running task holds no unit, and the release gives the slot to the task that
 * waited. */
static void test_engine_restart(void **unused)
{
    static engine_store st;
    sluice_engine *e = fx_engine(NULL);
    sluice_limit *live = wf_setup(e);
    sluice_delivery out[4];
    sluice_decision d;
    uint64_t lease, ids[3];
    int64_t now = T0 + SEC;

    (void)unused;
    memset(&st, 0, sizeof st);
    before_restart(&st, &lease, ids);
    recover(e, &st, now);
    assert_int_equal(fx_state(e, ids[0]), SLUICE_TASK_RUNNING);
    assert_int_equal(sluice_lease_acquire(live, "w1", 2, 1, SEC, now, &d), SLUICE_OK);
    assert_false(d.allowed); /* the restored lease still holds the one unit */
    assert_int_equal(fx_poll(e, now, 4, out), 1);
    assert_int_equal(out[0].id, ids[1]); /* under the group's slot */
    assert_int_equal(fx_state(e, ids[2]), SLUICE_TASK_PARKED);
    assert_int_equal(sluice_lease_release(live, lease, now), SLUICE_OK);
    assert_int_equal(sluice_engine_limit_released(e, "wf", now), SLUICE_OK);
    assert_int_equal(fx_poll(e, now, 4, out), 1);
    assert_int_equal(out[0].id, ids[2]); /* nobody else held the unit */
    /* The release went to the feed as the key's deletion. */
    memset(&st.keys, 0, sizeof st.keys);
    store_turn(e, &st);
    assert_int_equal(st.keys.n, 1);
    assert_int_equal(st.keys.rows[0].len, 0);
    sluice_engine_free(e);
}

/* Restored after the lease's end: the group is over, and its tasks each take their own unit,
 * one at a time on a limit of 1 (the running one's unit counts). */
static void test_engine_restart_after_end(void **unused)
{
    static engine_store st;
    sluice_engine *e = fx_engine(NULL);
    sluice_delivery out[4];
    sluice_task_record r;
    uint64_t lease, ids[3];
    int64_t now = T0 + 10 * SEC;

    (void)unused;
    (void)wf_setup(e);
    memset(&st, 0, sizeof st);
    before_restart(&st, &lease, ids);
    /* The running task's own lease runs past the group lease's end. */
    for (size_t i = 0; i < st.ntasks; i++)
        if (st.tasks[i].id == ids[0])
            st.tasks[i].lease_until_ns = T0 + MIN;
    recover(e, &st, now);
    assert_int_equal(fx_poll(e, now, 4, out), 0); /* ids[0] holds its own unit now */
    assert_int_equal(sluice_engine_ack(e, ids[0], -1, now), SLUICE_OK);
    assert_int_equal(fx_poll(e, now, 4, out), 1);
    assert_int_equal(out[0].id, ids[1]);
    assert_int_equal(sluice_engine_export_task(e, ids[1], &r), SLUICE_OK);
    assert_null(r.lease_limit); /* out of the group for good */
    sluice_engine_free(e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_changes_recorded),
        cmocka_unit_test(test_expired_while_down),
        cmocka_unit_test(test_restored_past_limit),
        cmocka_unit_test(test_sweep),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_oom),
        cmocka_unit_test(test_engine_restart),
        cmocka_unit_test(test_engine_restart_after_end),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
