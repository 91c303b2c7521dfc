/* SPDX-License-Identifier: MIT */
/*
 * Tests of the store (src/store): the front and its `none` backend, the SQLite backend, and the
 * fault-injection VFS that lets these tests make writes and fsyncs fail or the disk fill up.
 *
 * Every test gets a fresh directory under $TMPDIR (mkdtemp) and removes it at the end. The
 * checks: every record kind round-trips field by field (binary payloads with NUL bytes, long
 * keys, NULL versus empty); replace and delete; the load order; what each durability mode does
 * (counted fsyncs through the fault VFS); reopen sees what was committed and nothing else; the
 * directory lock; a failed commit (write error, fsync error, disk full) is rolled back, invisible
 * after reopen, and the next commit succeeds; a child process killed with SIGKILL in the middle
 * of commits loses none it reported; out-of-memory at every allocation of ours.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "sluice/error.h"
#include "store/faultvfs.h"
#include "store/store.h"
#include "testutil.h"

/* ---- Temporary directories ------------------------------------------------------------- */

typedef struct fixture {
    char dir[512]; /* the test's temporary directory */
} fixture;

static void rm_rf(const char *path)
{
    struct stat sb;
    DIR *d;
    struct dirent *e;

    if (lstat(path, &sb) != 0)
        return;
    if (S_ISDIR(sb.st_mode) && (d = opendir(path)) != NULL) {
        while ((e = readdir(d)) != NULL) {
            char child[1024];

            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            snprintf(child, sizeof child, "%s/%s", path, e->d_name);
            rm_rf(child);
        }
        closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    const char *tmp = getenv("TMPDIR");

    if (!f)
        return -1;
    snprintf(f->dir, sizeof f->dir, "%s/sluice-store-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(f->dir)) {
        free(f);
        return -1;
    }
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;

    faultvfs_fail_write(0);
    faultvfs_fail_sync(0);
    faultvfs_disk_full(0);
    rm_rf(f->dir);
    free(f);
    return 0;
}

/* The store's directory inside the fixture's (a subdirectory, so open must create it). */
static const char *data_dir(void **state)
{
    static char path[600];

    snprintf(path, sizeof path, "%s/data", ((fixture *)*state)->dir);
    return path;
}

static store *open_store(const char *dir, store_durability d, int fault)
{
    store_options o;
    store *s = NULL;
    char msg[256];
    int rc;

    store_options_init(&o);
    o.dir = dir;
    o.durability = d;
    o.fault_vfs = fault;
    rc = store_open(&o, &s, msg, sizeof msg);
    if (rc)
        fail_msg("store_open(%s): %s", dir, msg);
    return s;
}

static int64_t monotonic_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- What a load returns --------------------------------------------------------------- */

enum kind { K_META = 1, K_LIMIT, K_RECURRING, K_KEY, K_TASK };

/* Owned copy of a byte string; p == NULL stands for NULL. */
typedef struct bytes {
    char *p;
    size_t len;
} bytes;

static bytes bdup(const char *p, size_t len)
{
    bytes b = {NULL, len};

    if (p) {
        assert_int_equal(p[len], '\0'); /* the store promises a terminating NUL */
        b.p = malloc(len + 1);
        assert_non_null(b.p);
        memcpy(b.p, p, len + 1);
    }
    return b;
}

static bytes sdup(const char *s)
{
    return bdup(s, s ? strlen(s) : 0);
}

typedef struct ltask {
    uint64_t id;
    int state, priority, attempt, granted, fail_reason;
    int64_t units, submitted_ns, not_before_ns, lease_until_ns;
    bytes type, payload, key, task_key, series, fail_limit, fail_message, lease_limit;
    uint64_t lease_id, lease_tag;
} ltask;

typedef struct lrec {
    bytes name, type, payload, key, cron;
    int64_t interval_ns, start_ns, end_ns, max_runs, runs, skipped;
} lrec;

typedef struct lkey {
    bytes limit, key, state;
} lkey;

typedef struct lnamed {
    bytes name, text;
    int64_t value;
} lnamed;

typedef struct loaded {
    int kinds[4096]; /* the kind of each callback, in call order */
    size_t nkinds;
    ltask tasks[256];
    size_t ntasks;
    lrec recs[16];
    size_t nrecs;
    lkey keys[64];
    size_t nkeys;
    lnamed limits[16];
    size_t nlimits;
    lnamed metas[16];
    size_t nmetas;
    int stop_at; /* a callback number (1-based) that returns SLUICE_EINVAL; 0 = none */
} loaded;

static int note(loaded *l, enum kind k)
{
    assert_true(l->nkinds < sizeof l->kinds / sizeof l->kinds[0]);
    l->kinds[l->nkinds++] = (int)k;
    return l->stop_at && (size_t)l->stop_at == l->nkinds ? SLUICE_EINVAL : 0;
}

static int on_task(const sluice_task_record *r, void *arg)
{
    loaded *l = arg;
    ltask *t;

    assert_true(l->ntasks < 256);
    t = &l->tasks[l->ntasks++];
    t->id = r->id;
    t->state = (int)r->state;
    t->priority = r->priority;
    t->attempt = r->attempt;
    t->granted = r->granted;
    t->fail_reason = (int)r->fail_reason;
    t->units = r->units;
    t->submitted_ns = r->submitted_ns;
    t->not_before_ns = r->not_before_ns;
    t->lease_until_ns = r->lease_until_ns;
    t->type = sdup(r->type);
    t->payload = bdup(r->payload, r->payload_len);
    t->key = bdup(r->key, r->key_len);
    t->task_key = bdup(r->task_key, r->task_key_len);
    t->series = sdup(r->series);
    t->fail_limit = sdup(r->fail_limit);
    t->fail_message = sdup(r->fail_message);
    t->lease_limit = sdup(r->lease_limit);
    t->lease_id = r->lease_id;
    t->lease_tag = r->lease_tag;
    return note(l, K_TASK);
}

static int on_key(const char *limit, const char *key, size_t keylen, const void *state, size_t len,
                  void *arg)
{
    loaded *l = arg;
    lkey *k;

    assert_true(l->nkeys < 64);
    k = &l->keys[l->nkeys++];
    k->limit = sdup(limit);
    k->key = bdup(key, keylen);
    k->state = bdup(state, len);
    return note(l, K_KEY);
}

static int on_limit(const char *name, const char *spec, void *arg)
{
    loaded *l = arg;
    lnamed *n;

    assert_true(l->nlimits < 16);
    n = &l->limits[l->nlimits++];
    n->name = sdup(name);
    n->text = sdup(spec);
    return note(l, K_LIMIT);
}

static int on_recurring(const sluice_recurring_spec *spec, int64_t runs, int64_t skipped, void *arg)
{
    loaded *l = arg;
    lrec *r;

    assert_true(l->nrecs < 16);
    r = &l->recs[l->nrecs++];
    r->name = sdup(spec->name);
    r->type = sdup(spec->type);
    r->payload = bdup(spec->payload, spec->payload_len);
    r->key = bdup(spec->key, spec->key_len);
    r->cron = sdup(spec->cron);
    r->interval_ns = spec->interval_ns;
    r->start_ns = spec->start_ns;
    r->end_ns = spec->end_ns;
    r->max_runs = spec->max_runs;
    r->runs = runs;
    r->skipped = skipped;
    return note(l, K_RECURRING);
}

static int on_meta(const char *name, int64_t value, void *arg)
{
    loaded *l = arg;
    lnamed *n;

    assert_true(l->nmetas < 16);
    n = &l->metas[l->nmetas++];
    n->name = sdup(name);
    n->value = value;
    return note(l, K_META);
}

static const store_loader loader = {
    .task = on_task,
    .key = on_key,
    .limit = on_limit,
    .recurring = on_recurring,
    .meta = on_meta,
};

static void loaded_free(loaded *l)
{
    for (size_t i = 0; i < l->ntasks; i++) {
        ltask *t = &l->tasks[i];

        free(t->type.p);
        free(t->payload.p);
        free(t->key.p);
        free(t->task_key.p);
        free(t->series.p);
        free(t->fail_limit.p);
        free(t->fail_message.p);
        free(t->lease_limit.p);
    }
    for (size_t i = 0; i < l->nrecs; i++) {
        free(l->recs[i].name.p);
        free(l->recs[i].type.p);
        free(l->recs[i].payload.p);
        free(l->recs[i].key.p);
        free(l->recs[i].cron.p);
    }
    for (size_t i = 0; i < l->nkeys; i++) {
        free(l->keys[i].limit.p);
        free(l->keys[i].key.p);
        free(l->keys[i].state.p);
    }
    for (size_t i = 0; i < l->nlimits; i++) {
        free(l->limits[i].name.p);
        free(l->limits[i].text.p);
    }
    for (size_t i = 0; i < l->nmetas; i++)
        free(l->metas[i].name.p);
    free(l);
}

static loaded *load_all(store *s)
{
    loaded *l = calloc(1, sizeof *l);

    assert_non_null(l);
    assert_int_equal(store_load(s, &loader, l), 0);
    return l;
}

/* Equal byte strings, NULL only equal to NULL. */
static void assert_bytes(bytes got, const char *want, size_t len)
{
    if (!want) {
        assert_null(got.p);
        return;
    }
    assert_non_null(got.p);
    assert_int_equal(got.len, len);
    assert_memory_equal(got.p, want, len);
}

static void assert_str(bytes got, const char *want)
{
    assert_bytes(got, want, want ? strlen(want) : 0);
}

static void assert_task(const ltask *t, const sluice_task_record *r)
{
    assert_int_equal(t->id, r->id);
    assert_int_equal(t->state, (int)r->state);
    assert_str(t->type, r->type);
    assert_bytes(t->payload, r->payload, r->payload_len);
    assert_bytes(t->key, r->key, r->key_len);
    assert_bytes(t->task_key, r->task_key, r->task_key_len);
    assert_int_equal(t->units, r->units);
    assert_int_equal(t->priority, r->priority);
    assert_int_equal(t->attempt, r->attempt);
    assert_int_equal(t->submitted_ns, r->submitted_ns);
    assert_int_equal(t->not_before_ns, r->not_before_ns);
    assert_int_equal(t->lease_until_ns, r->lease_until_ns);
    assert_int_equal(t->granted, r->granted);
    assert_str(t->series, r->series);
    assert_int_equal(t->fail_reason, (int)r->fail_reason);
    assert_str(t->fail_limit, r->fail_limit);
    assert_str(t->fail_message, r->fail_message);
    assert_str(t->lease_limit, r->lease_limit);
    assert_int_equal(t->lease_id, r->lease_limit ? r->lease_id : 0);
    assert_int_equal(t->lease_tag, r->lease_limit ? r->lease_tag : 0);
}

static void assert_rec(const lrec *got, const sluice_recurring_spec *want, int64_t runs,
                       int64_t skipped)
{
    assert_str(got->name, want->name);
    assert_str(got->type, want->type);
    assert_bytes(got->payload, want->payload, want->payload_len);
    assert_bytes(got->key, want->key, want->key_len);
    assert_str(got->cron, want->cron);
    assert_int_equal(got->interval_ns, want->interval_ns);
    assert_int_equal(got->start_ns, want->start_ns);
    assert_int_equal(got->end_ns, want->end_ns);
    assert_int_equal(got->max_runs, want->max_runs);
    assert_int_equal(got->runs, runs);
    assert_int_equal(got->skipped, skipped);
}

/* A plain QUEUED task with the given id and payload. */
static sluice_task_record plain_task(uint64_t id, const char *payload, size_t len)
{
    sluice_task_record r = {0};

    r.id = id;
    r.state = SLUICE_TASK_QUEUED;
    r.type = "job";
    r.payload = payload;
    r.payload_len = len;
    r.units = 1;
    r.submitted_ns = 1000 + (int64_t)id;
    return r;
}

/* Whether task id is among those loaded. */
static int has_task(const loaded *l, uint64_t id)
{
    for (size_t i = 0; i < l->ntasks; i++) {
        if (l->tasks[i].id == id)
            return 1;
    }
    return 0;
}

/* Commits one transaction holding task id (with a payload of len bytes). */
static int commit_task(store *s, uint64_t id, size_t len)
{
    static char payload[65536];
    sluice_task_record r;
    int rc;

    assert_true(len <= sizeof payload);
    memset(payload, 'a' + (int)(id % 26), len);
    r = plain_task(id, payload, len);
    assert_int_equal(store_begin(s), 0);
    rc = store_put_task(s, &r);
    if (rc)
        return rc;
    return store_commit(s, monotonic_ms());
}

static void assert_check_ok(store *s)
{
    char msg[256];

    assert_int_equal(store_check(s, msg, sizeof msg), 0);
}

/* ---- Options --------------------------------------------------------------------------- */

static void test_options(void **state)
{
    store_options o;
    store_durability d = STORE_NONE;

    (void)state;
    store_options_init(&o);
    assert_string_equal(o.dir, "./data");
    assert_int_equal(o.durability, STORE_ALWAYS);
    assert_int_equal(o.batch_ms, 100);
    assert_int_equal(o.fault_vfs, 0);
    assert_int_equal(store_durability_parse("always", &d), 0);
    assert_int_equal(d, STORE_ALWAYS);
    assert_int_equal(store_durability_parse("batch", &d), 0);
    assert_int_equal(d, STORE_BATCH);
    assert_int_equal(store_durability_parse("none", &d), 0);
    assert_int_equal(d, STORE_NONE);
    assert_int_equal(store_durability_parse("sometimes", &d), SLUICE_EINVAL);
    assert_int_equal(store_durability_parse("", &d), SLUICE_EINVAL);
    assert_int_equal(d, STORE_NONE); /* untouched on error */
}

/* ---- Round trips ----------------------------------------------------------------------- */

static const char full_payload[] = "{\"a\":1}\0\"hidden\"\0\xff";
static const char binary_key[] = "k\0e\0y\xff";
static const char task_key[] = "tk\0x";

static sluice_task_record full_task(void)
{
    sluice_task_record r = {0};

    r.id = 7;
    r.state = SLUICE_TASK_FAILED;
    r.type = "email";
    r.payload = full_payload;
    r.payload_len = sizeof full_payload - 1;
    r.key = binary_key;
    r.key_len = sizeof binary_key - 1;
    r.task_key = task_key;
    r.task_key_len = sizeof task_key - 1;
    r.units = 3;
    r.priority = -5;
    r.attempt = 2;
    r.submitted_ns = INT64_MAX - 1;
    r.not_before_ns = INT64_MIN + 1;
    r.lease_until_ns = 1700000000123456789;
    r.granted = 1;
    r.series = "nightly";
    r.fail_reason = SLUICE_FAIL_ATTEMPTS;
    r.fail_limit = "api";
    r.fail_message = "worker said: boom";
    return r;
}

typedef struct sample {
    sluice_task_record tasks[3]; /* in id order */
    sluice_recurring_spec recs[2];
    char long_key[5000];
    char state_blob[64];
} sample;

static void sample_init(sample *x)
{
    memset(x, 0, sizeof *x);
    x->tasks[0] = plain_task(3, NULL, 0); /* NULL payload and every optional field NULL */
    x->tasks[1] = full_task();
    x->tasks[2] = plain_task((uint64_t)1 << 40, "", 0); /* empty, not NULL */
    x->tasks[2].state = SLUICE_TASK_RUNNING;
    /* A group slot: a lease id and a tag past 2^60 (a generation in ns). */
    x->tasks[2].lease_limit = "wf";
    x->tasks[2].lease_id = 42;
    x->tasks[2].lease_tag = UINT64_C(1764000000000000123);
    for (size_t i = 0; i < sizeof x->long_key; i++)
        x->long_key[i] = (char)(i * 7 % 256);
    for (size_t i = 0; i < sizeof x->state_blob; i++)
        x->state_blob[i] = (char)(i % 3 == 0 ? 0 : 255 - i);
    x->recs[0] = (sluice_recurring_spec){.name = "nightly",
                                         .type = "report",
                                         .payload = full_payload,
                                         .payload_len = sizeof full_payload - 1,
                                         .key = "acct\0one",
                                         .key_len = 8,
                                         .cron = "0 3 * * *",
                                         .start_ns = 5,
                                         .end_ns = 0,
                                         .max_runs = 0};
    x->recs[1] = (sluice_recurring_spec){.name = "tick",
                                         .type = "ping",
                                         .interval_ns = 1000000000,
                                         .start_ns = 1,
                                         .end_ns = 2000000000000,
                                         .max_runs = 10};
}

static void sample_put(store *s, const sample *x)
{
    assert_int_equal(store_begin(s), 0);
    /* Out of order on purpose: the load sorts. */
    assert_int_equal(store_put_task(s, &x->tasks[2]), 0);
    assert_int_equal(store_put_task(s, &x->tasks[0]), 0);
    assert_int_equal(store_put_task(s, &x->tasks[1]), 0);
    assert_int_equal(store_put_key(s, "api", x->long_key, sizeof x->long_key, x->state_blob,
                                   sizeof x->state_blob),
                     0);
    assert_int_equal(store_put_key(s, "api", "", 0, "s", 1), 0);
    assert_int_equal(store_put_key(s, "db", "k", 1, x->state_blob, 16), 0);
    assert_int_equal(store_put_limit(s, "db", "concurrency: 5"), 0);
    assert_int_equal(store_put_limit(s, "api", "rate: 10/s"), 0);
    assert_int_equal(store_put_recurring(s, &x->recs[1], 4, 1), 0);
    assert_int_equal(store_put_recurring(s, &x->recs[0], 0, 0), 0);
    assert_int_equal(store_put_meta(s, "clock_ns", 123456789), 0);
    assert_int_equal(store_put_meta(s, "a.neg", -1), 0);
    assert_int_equal(store_commit(s, monotonic_ms()), 0);
}

static void sample_verify(store *s, const sample *x)
{
    loaded *l = load_all(s);

    assert_int_equal(l->ntasks, 3);
    for (size_t i = 0; i < 3; i++)
        assert_task(&l->tasks[i], &x->tasks[i]);
    assert_int_equal(l->nkeys, 3);
    /* Keys by (limit, key): "" sorts before the long key. */
    assert_str(l->keys[0].limit, "api");
    assert_bytes(l->keys[0].key, "", 0);
    assert_bytes(l->keys[0].state, "s", 1);
    assert_str(l->keys[1].limit, "api");
    assert_bytes(l->keys[1].key, x->long_key, sizeof x->long_key);
    assert_bytes(l->keys[1].state, x->state_blob, sizeof x->state_blob);
    assert_str(l->keys[2].limit, "db");
    assert_bytes(l->keys[2].key, "k", 1);
    assert_bytes(l->keys[2].state, x->state_blob, 16);
    assert_int_equal(l->nlimits, 2);
    assert_str(l->limits[0].name, "api");
    assert_str(l->limits[0].text, "rate: 10/s");
    assert_str(l->limits[1].name, "db");
    assert_str(l->limits[1].text, "concurrency: 5");
    assert_int_equal(l->nrecs, 2);
    assert_rec(&l->recs[0], &x->recs[0], 0, 0);
    assert_rec(&l->recs[1], &x->recs[1], 4, 1);
    assert_int_equal(l->nmetas, 2); /* the backend's own "store." names are not reported */
    assert_str(l->metas[0].name, "a.neg");
    assert_int_equal(l->metas[0].value, -1);
    assert_str(l->metas[1].name, "clock_ns");
    assert_int_equal(l->metas[1].value, 123456789);
    loaded_free(l);
}

static void roundtrip(void **state, store_durability d)
{
    sample *x = malloc(sizeof *x);
    store *s;

    assert_non_null(x);
    sample_init(x);
    s = open_store(data_dir(state), d, 0);
    sample_put(s, x);
    sample_verify(s, x);
    assert_int_equal(store_sync(s), 0);
    assert_check_ok(s);
    store_close(s);
    s = open_store(data_dir(state), d, 0);
    sample_verify(s, x);
    store_close(s);
    free(x);
}

static void test_roundtrip_always(void **state)
{
    roundtrip(state, STORE_ALWAYS);
}

static void test_roundtrip_batch(void **state)
{
    roundtrip(state, STORE_BATCH);
}

static void test_replace_and_delete(void **state)
{
    store *s = open_store(data_dir(state), STORE_ALWAYS, 0);
    sluice_task_record a = plain_task(1, "one", 3), b = plain_task(2, "two", 3);
    sluice_recurring_spec rec = {.name = "r", .type = "t", .interval_ns = 5};
    loaded *l;

    assert_int_equal(store_begin(s), 0);
    assert_int_equal(store_put_task(s, &a), 0);
    assert_int_equal(store_put_task(s, &b), 0);
    assert_int_equal(store_put_key(s, "x", "k1", 2, "v1", 2), 0);
    assert_int_equal(store_put_key(s, "x", "k2", 2, "v2", 2), 0);
    assert_int_equal(store_put_key(s, "y", "k1", 2, "w1", 2), 0);
    assert_int_equal(store_put_limit(s, "x", "old"), 0);
    assert_int_equal(store_put_limit(s, "y", "why"), 0);
    assert_int_equal(store_put_recurring(s, &rec, 1, 0), 0);
    assert_int_equal(store_put_meta(s, "m", 1), 0);
    assert_int_equal(store_commit(s, monotonic_ms()), 0);

    /* Put twice = replace, in the same transaction and across transactions. */
    a.state = SLUICE_TASK_RUNNING;
    a.payload = "uno";
    a.attempt = 1;
    assert_int_equal(store_begin(s), 0);
    assert_int_equal(store_put_task(s, &a), 0);
    a.payload = "UNO!";
    a.payload_len = 4;
    assert_int_equal(store_put_task(s, &a), 0);
    assert_int_equal(store_put_key(s, "x", "k1", 2, "V1-new", 6), 0);
    assert_int_equal(store_put_limit(s, "x", "new"), 0);
    rec.cron = "* * * * *";
    rec.interval_ns = 0;
    assert_int_equal(store_put_recurring(s, &rec, 9, 3), 0);
    assert_int_equal(store_put_meta(s, "m", 2), 0);
    assert_int_equal(store_del_task(s, 2), 0);
    assert_int_equal(store_del_task(s, 99), 0); /* absent: not an error */
    assert_int_equal(store_del_key(s, "x", "k2", 2), 0);
    assert_int_equal(store_commit(s, monotonic_ms()), 0);

    l = load_all(s);
    assert_int_equal(l->ntasks, 1);
    assert_task(&l->tasks[0], &a);
    assert_int_equal(l->nkeys, 2);
    assert_bytes(l->keys[0].state, "V1-new", 6);
    assert_str(l->keys[1].limit, "y");
    assert_int_equal(l->nlimits, 2);
    assert_str(l->limits[0].text, "new");
    assert_int_equal(l->nrecs, 1);
    assert_rec(&l->recs[0], &rec, 9, 3);
    assert_int_equal(l->nmetas, 1);
    assert_int_equal(l->metas[0].value, 2);
    loaded_free(l);

    /* LIMIT.RESET: all keys of one limit; then the limit and the series go. */
    assert_int_equal(store_begin(s), 0);
    assert_int_equal(store_del_limit_keys(s, "x"), 0);
    assert_int_equal(store_del_limit(s, "y"), 0);
    assert_int_equal(store_del_recurring(s, "r"), 0);
    assert_int_equal(store_commit(s, monotonic_ms()), 0);
    store_close(s);

    s = open_store(data_dir(state), STORE_ALWAYS, 0);
    l = load_all(s);
    assert_int_equal(l->nkeys, 1);
    assert_str(l->keys[0].limit, "y");
    assert_int_equal(l->nlimits, 1);
    assert_str(l->limits[0].name, "x");
    assert_int_equal(l->nrecs, 0);
    assert_int_equal(l->ntasks, 1);
    loaded_free(l);
    store_close(s);
}

static void test_load_order(void **state)
{
    store *s = open_store(data_dir(state), STORE_ALWAYS, 0);
    test_rng rng;
    loaded *l;
    size_t i;

    rng_seed(&rng, 7);
    assert_int_equal(store_begin(s), 0);
    for (i = 0; i < 40; i++) {
        sluice_task_record r = plain_task((uint64_t)rng_range(&rng, 1, 1000000), "p", 1);
        char name[32];

        assert_int_equal(store_put_task(s, &r), 0);
        if (i % 4 == 0) {
            snprintf(name, sizeof name, "lim%02d", (int)rng_range(&rng, 0, 99));
            assert_int_equal(store_put_limit(s, name, "rate: 1/s"), 0);
            assert_int_equal(store_put_key(s, name, "k", 1, "s", 1), 0);
            assert_int_equal(store_put_meta(s, name, (int64_t)i), 0);
        }
        if (i % 10 == 0) {
            sluice_recurring_spec rec = {.name = name, .type = "t", .interval_ns = 1};

            assert_int_equal(store_put_recurring(s, &rec, 0, 0), 0);
        }
    }
    assert_int_equal(store_commit(s, monotonic_ms()), 0);

    l = load_all(s);
    for (i = 1; i < l->nkinds; i++)
        assert_true(l->kinds[i - 1] <= l->kinds[i]); /* meta, limits, recurring, keys, tasks */
    assert_int_equal(l->kinds[0], K_META);
    assert_int_equal(l->kinds[l->nkinds - 1], K_TASK);
    for (i = 1; i < l->ntasks; i++)
        assert_true(l->tasks[i - 1].id < l->tasks[i].id);
    for (i = 1; i < l->nlimits; i++)
        assert_true(strcmp(l->limits[i - 1].name.p, l->limits[i].name.p) < 0);
    for (i = 1; i < l->nmetas; i++)
        assert_true(strcmp(l->metas[i - 1].name.p, l->metas[i].name.p) < 0);
    loaded_free(l);

    /* A callback's error stops the load and is returned. */
    l = calloc(1, sizeof *l);
    assert_non_null(l);
    l->stop_at = 3;
    assert_int_equal(store_load(s, &loader, l), SLUICE_EINVAL);
    assert_int_equal(l->nkinds, 3);
    loaded_free(l);

    /* NULL callbacks skip their kind. */
    l = calloc(1, sizeof *l);
    assert_non_null(l);
    {
        store_loader only_tasks = {.task = on_task};

        assert_int_equal(store_load(s, &only_tasks, l), 0);
        for (i = 0; i < l->nkinds; i++)
            assert_int_equal(l->kinds[i], K_TASK);
    }
    loaded_free(l);
    store_close(s);
}

/* ---- Transactions ---------------------------------------------------------------------- */

static void test_uncommitted_not_seen(void **state)
{
    store *s = open_store(data_dir(state), STORE_ALWAYS, 0);
    sluice_task_record r = plain_task(1, "x", 1);
    loaded *l;

    assert_int_equal(commit_task(s, 1, 10), 0);
    /* Rolled back explicitly. */
    r.id = 2;
    assert_int_equal(store_begin(s), 0);
    assert_int_equal(store_put_task(s, &r), 0);
    assert_int_equal(store_del_task(s, 1), 0);
    store_rollback(s);
    assert_int_equal(store_commit(s, monotonic_ms()), SLUICE_ESTATE); /* nothing open any more */
    /* Left open at close. */
    r.id = 3;
    assert_int_equal(store_begin(s), 0);
    assert_int_equal(store_put_task(s, &r), 0);
    store_close(s);

    s = open_store(data_dir(state), STORE_ALWAYS, 0);
    l = load_all(s);
    assert_int_equal(l->ntasks, 1);
    assert_int_equal(l->tasks[0].id, 1);
    loaded_free(l);
    store_close(s);
}

static void test_misuse(void **state)
{
    store *s = open_store(data_dir(state), STORE_ALWAYS, 0);
    sluice_task_record r = plain_task(1, "x", 1);

    assert_int_equal(store_put_task(s, &r), SLUICE_ESTATE);
    assert_string_equal(store_error(s), "no transaction is open");
    assert_int_equal(store_commit(s, monotonic_ms()), SLUICE_ESTATE);
    assert_int_equal(store_begin(s), 0);
    assert_int_equal(store_begin(s), SLUICE_ESTATE);
    assert_int_equal(store_put_task(s, &r), 0); /* the open transaction is unharmed */
    assert_int_equal(store_commit(s, monotonic_ms()), 0);
    store_rollback(s); /* nothing open: no-op */
    assert_int_equal(store_begin(NULL), SLUICE_EINVAL);
    assert_int_equal(store_load(s, NULL, NULL), SLUICE_EINVAL);
    store_close(NULL);
    store_close(s);
}

/* A put that fails fails its whole transaction: later puts and the commit return its error. */
static void test_failed_put_fails_transaction(void **state)
{
    store *s = open_store(data_dir(state), STORE_ALWAYS, 0);
    sluice_task_record good = plain_task(1, "x", 1), bad = plain_task(2, "y", 1);
    loaded *l;

    bad.type = NULL;
    assert_int_equal(store_begin(s), 0);
    assert_int_equal(store_put_task(s, &good), 0);
    assert_int_equal(store_put_task(s, &bad), SLUICE_EINVAL);
    assert_int_equal(store_put_meta(s, "m", 1), SLUICE_EINVAL);
    assert_int_equal(store_commit(s, monotonic_ms()), SLUICE_EINVAL);
    /* Reserved meta names. */
    assert_int_equal(store_begin(s), 0);
    assert_int_equal(store_put_meta(s, "store.schema_version", 99), SLUICE_EINVAL);
    store_rollback(s);
    /* The next transaction works; begin right after a failed put works too. */
    assert_int_equal(store_begin(s), 0);
    assert_int_equal(store_put_task(s, &bad), SLUICE_EINVAL);
    assert_int_equal(store_begin(s), 0);
    good.id = 3;
    assert_int_equal(store_put_task(s, &good), 0);
    assert_int_equal(store_commit(s, monotonic_ms()), 0);
    store_close(s);

    s = open_store(data_dir(state), STORE_ALWAYS, 0);
    l = load_all(s);
    assert_int_equal(l->ntasks, 1);
    assert_int_equal(l->tasks[0].id, 3);
    assert_int_equal(l->nmetas, 0);
    loaded_free(l);
    store_close(s);
}

/* ---- Modes ----------------------------------------------------------------------------- */

static void test_none(void **state)
{
    sample *x = malloc(sizeof *x);
    store *s;
    loaded *l;
    struct stat sb;
    char msg[64];

    assert_non_null(x);
    sample_init(x);
    s = open_store(data_dir(state), STORE_NONE, 0);
    sample_put(s, x);
    assert_int_equal(store_begin(s), 0);
    assert_int_equal(store_del_task(s, 7), 0);
    assert_int_equal(store_del_key(s, "api", "", 0), 0);
    assert_int_equal(store_del_limit_keys(s, "api"), 0);
    assert_int_equal(store_del_limit(s, "api"), 0);
    assert_int_equal(store_del_recurring(s, "tick"), 0);
    assert_int_equal(store_commit(s, monotonic_ms()), 0);
    l = load_all(s);
    assert_int_equal(l->nkinds, 0);
    loaded_free(l);
    assert_int_equal(store_sync_due_ms(s, monotonic_ms()), -1);
    assert_int_equal(store_sync(s), 0);
    assert_int_equal(store_check(s, msg, sizeof msg), 0);
    store_close(s);
    assert_int_equal(stat(data_dir(state), &sb), -1); /* nothing was written, not even the dir */
    free(x);
}

/* STORE_ALWAYS: every commit fsyncs, nothing is left for store_sync. */
static void test_always_syncs_each_commit(void **state)
{
    store *s = open_store(data_dir(state), STORE_ALWAYS, 1);
    long syncs;

    for (int i = 1; i <= 3; i++) {
        syncs = faultvfs_syncs();
        assert_int_equal(commit_task(s, (uint64_t)i, 100), 0);
        assert_true(faultvfs_syncs() > syncs);
        assert_int_equal(store_sync_due_ms(s, monotonic_ms()), -1);
    }
    syncs = faultvfs_syncs();
    assert_int_equal(store_sync(s), 0);
    assert_int_equal(faultvfs_syncs(), syncs);
    store_close(s);
}

/* One transaction holding task id, committed at the caller's now_ms. */
static void commit_task_at(store *s, uint64_t id, int64_t now_ms)
{
    sluice_task_record r = plain_task(id, "x", 1);

    assert_int_equal(store_begin(s), 0);
    assert_int_equal(store_put_task(s, &r), 0);
    assert_int_equal(store_commit(s, now_ms), 0);
}

/* The store reads no clock: the STORE_BATCH countdown starts at the now_ms given to the first
 * commit after a sync, on a simulated clock far from the machine's (and nowhere near it). */
static void test_batch_schedule_uses_time_given(void **state)
{
    const int64_t t = INT64_C(5) * 1000 * 1000 * 1000; /* ms; no real monotonic clock reads this */
    store *s = open_store(data_dir(state), STORE_BATCH, 0);

    commit_task_at(s, 1, t);
    assert_int_equal(store_sync_due_ms(s, t), 100); /* batch_ms from the commit's time */
    assert_int_equal(store_sync_due_ms(s, t + 40), 60);
    commit_task_at(s, 2, t + 70); /* a later commit does not restart the countdown */
    assert_int_equal(store_sync_due_ms(s, t + 70), 30);
    assert_int_equal(store_sync_due_ms(s, t + 100), 0);
    assert_int_equal(store_sync_due_ms(s, t + 5000), 0); /* overdue */
    assert_int_equal(store_sync(s), 0);
    assert_int_equal(store_sync_due_ms(s, t + 5000), -1);
    commit_task_at(s, 3, t + 6000); /* the next batch starts at its own first commit */
    assert_int_equal(store_sync_due_ms(s, t + 6000), 100);
    assert_int_equal(store_sync_due_ms(s, t + 6099), 1);
    store_close(s);
}

/* STORE_BATCH: commits do not fsync; store_sync fsyncs the WAL once, when commits are pending. */
static void test_batch_syncs_on_store_sync(void **state)
{
    store *s = open_store(data_dir(state), STORE_BATCH, 1);
    long syncs, writes;
    int64_t due;
    loaded *l;

    assert_int_equal(store_sync_due_ms(s, monotonic_ms()), -1);
    syncs = faultvfs_syncs();
    writes = faultvfs_writes();
    for (int i = 1; i <= 5; i++)
        assert_int_equal(commit_task(s, (uint64_t)i, 100), 0);
    assert_int_equal(faultvfs_syncs(), syncs); /* written, not synced */
    assert_true(faultvfs_writes() > writes);
    due = store_sync_due_ms(s, monotonic_ms());
    assert_true(due >= 0 && due <= 100);
    assert_int_equal(store_sync_due_ms(s, monotonic_ms() + 1000), 0); /* overdue */
    assert_int_equal(store_sync(s), 0);
    assert_int_equal(faultvfs_syncs(), syncs + 1);
    assert_int_equal(store_sync_due_ms(s, monotonic_ms()), -1);
    assert_int_equal(store_sync(s), 0); /* nothing pending: no fsync */
    assert_int_equal(faultvfs_syncs(), syncs + 1);

    /* A failed sync reports it and stays due; the next one goes through. */
    assert_int_equal(commit_task(s, 6, 100), 0);
    faultvfs_fail_sync(1);
    assert_int_equal(store_sync(s), SLUICE_EIO);
    assert_true(strncmp(store_error(s), "fsync failed", 12) == 0);
    assert_true(store_sync_due_ms(s, monotonic_ms()) >= 0);
    assert_int_equal(store_sync(s), 0);
    assert_int_equal(store_sync_due_ms(s, monotonic_ms()), -1);
    store_close(s);

    s = open_store(data_dir(state), STORE_BATCH, 0);
    l = load_all(s);
    assert_int_equal(l->ntasks, 6);
    loaded_free(l);
    store_close(s);
}

static void test_env_selects_fault_vfs(void **state)
{
    store *s;
    long writes;

    setenv("SLUICE_FAULT_VFS", "1", 1);
    s = open_store(data_dir(state), STORE_ALWAYS, 0);
    unsetenv("SLUICE_FAULT_VFS");
    writes = faultvfs_writes();
    assert_int_equal(commit_task(s, 1, 10), 0);
    assert_true(faultvfs_writes() > writes);
    store_close(s);
}

/* ---- Opening --------------------------------------------------------------------------- */

static void test_lock(void **state)
{
    store *a = open_store(data_dir(state), STORE_ALWAYS, 0), *b = (store *)1;
    store_options o;
    char msg[256], want[320];

    store_options_init(&o);
    o.dir = data_dir(state);
    assert_int_equal(store_open(&o, &b, msg, sizeof msg), SLUICE_EBUSY);
    assert_null(b);
    snprintf(want, sizeof want, "data directory %s is in use by another sluice (pid %ld)", o.dir,
             (long)getpid());
    assert_string_equal(msg, want);
    o.durability = STORE_BATCH; /* the mode does not matter */
    assert_int_equal(store_open(&o, &b, msg, sizeof msg), SLUICE_EBUSY);
    store_close(a);
    b = open_store(o.dir, STORE_ALWAYS, 0);
    store_close(b);
}

static void test_creates_directory(void **state)
{
    char dir[700], path[760], buf[32];
    struct stat sb;
    store *s;
    int fd;
    ssize_t n;

    snprintf(dir, sizeof dir, "%s/a/b/c/", ((fixture *)*state)->dir);
    s = open_store(dir, STORE_ALWAYS, 0);
    assert_int_equal(stat(dir, &sb), 0);
    assert_true(S_ISDIR(sb.st_mode));
    assert_int_equal(sb.st_mode & 0777, 0700);
    snprintf(path, sizeof path, "%s/LOCK", dir);
    fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    n = read(fd, buf, sizeof buf - 1);
    close(fd);
    assert_true(n > 0);
    buf[n] = '\0';
    assert_int_equal(strtol(buf, NULL, 10), (long)getpid());
    snprintf(path, sizeof path, "%s/sluice.db", dir);
    assert_int_equal(stat(path, &sb), 0);
    store_close(s);
}

static void test_open_errors(void **state)
{
    const char *dir = data_dir(state);
    store_options o;
    store *s = NULL;
    sqlite3 *db;
    char msg[256], path[700];
    FILE *f;

    store_options_init(&o);
    o.dir = dir;
    /* A file where the directory should be. */
    snprintf(path, sizeof path, "%s/file", ((fixture *)*state)->dir);
    f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    o.dir = path;
    assert_int_equal(store_open(&o, &s, msg, sizeof msg), SLUICE_EINVAL);
    assert_non_null(strstr(msg, "Not a directory"));
    o.dir = dir;
    o.durability = STORE_BATCH;
    o.batch_ms = 0;
    assert_int_equal(store_open(&o, &s, msg, sizeof msg), SLUICE_EINVAL);
    o.batch_ms = 100;

    /* Garbage in sluice.db. */
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(path, sizeof path, "%s/sluice.db", dir);
    f = fopen(path, "w");
    assert_non_null(f);
    for (int i = 0; i < 1000; i++)
        fputs("not a database ", f);
    fclose(f);
    assert_int_not_equal(store_open(&o, &s, msg, sizeof msg), 0);
    assert_null(s);
    assert_non_null(strstr(msg, "not a database"));

    /* Somebody else's SQLite database. */
    unlink(path);
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "CREATE TABLE t(x)", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    assert_int_equal(store_open(&o, &s, msg, sizeof msg), SLUICE_EINVAL);
    assert_non_null(strstr(msg, "not a sluice database"));

    /* A schema from a newer sluice. */
    unlink(path);
    s = open_store(dir, STORE_ALWAYS, 0);
    store_close(s);
    s = NULL;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db,
                                  "UPDATE meta SET value = 99 WHERE name = 'store.schema_version'",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sqlite3_close(db);
    assert_int_equal(store_open(&o, &s, msg, sizeof msg), SLUICE_EINVAL);
    assert_non_null(strstr(msg, "newer"));
    assert_null(s);
}

/* A data directory written by schema 1 (before tasks had group slots) is migrated at open: its
 * tasks load without a slot, and a task with one round-trips afterwards. */
static void test_migrates_schema_1(void **state)
{
    const char *dir = data_dir(state);
    char path[700];
    sqlite3 *db;
    store *s;
    loaded *l;
    sluice_task_record r = plain_task(9, "{}", 2);
    int64_t version = 0;
    sqlite3_stmt *st;

    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(path, sizeof path, "%s/sluice.db", dir);
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    /* Schema 1 as released. */
    assert_int_equal(
        sqlite3_exec(
            db,
            "PRAGMA application_id = 1936487779;"
            "CREATE TABLE meta(name TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL) WITHOUT "
            "ROWID;"
            "CREATE TABLE limits(name TEXT PRIMARY KEY NOT NULL, spec TEXT NOT NULL) WITHOUT ROWID;"
            "CREATE TABLE recurring(name TEXT PRIMARY KEY NOT NULL, type TEXT NOT NULL, payload "
            "BLOB, key BLOB, interval_ns INTEGER NOT NULL, cron TEXT, start_ns INTEGER NOT NULL,"
            " end_ns INTEGER NOT NULL, max_runs INTEGER NOT NULL, runs INTEGER NOT NULL,"
            " skipped INTEGER NOT NULL) WITHOUT ROWID;"
            "CREATE TABLE keys(\"limit\" TEXT NOT NULL, key BLOB NOT NULL, state BLOB NOT NULL,"
            " PRIMARY KEY(\"limit\", key)) WITHOUT ROWID;"
            "CREATE TABLE tasks(id INTEGER PRIMARY KEY, state INTEGER NOT NULL, type TEXT NOT "
            "NULL, payload BLOB, key BLOB, task_key BLOB, units INTEGER NOT NULL, priority INTEGER "
            "NOT NULL, attempt INTEGER NOT NULL, submitted_ns INTEGER NOT NULL, not_before_ns "
            "INTEGER NOT NULL, lease_until_ns INTEGER NOT NULL, granted INTEGER NOT NULL, series "
            "TEXT, fail_reason INTEGER NOT NULL, fail_limit TEXT, fail_message TEXT);"
            "INSERT INTO meta VALUES('store.schema_version', 1);"
            "INSERT INTO tasks VALUES(3, 0, 'job', NULL, NULL, NULL, 1, 0, 0, 1003, 0, 0, 0, NULL,"
            " 0, NULL, NULL);",
            NULL, NULL, NULL),
        SQLITE_OK);
    sqlite3_close(db);

    s = open_store(dir, STORE_ALWAYS, 0);
    l = load_all(s);
    assert_int_equal(l->ntasks, 1);
    assert_int_equal(l->tasks[0].id, 3);
    assert_null(l->tasks[0].lease_limit.p);
    assert_int_equal(l->tasks[0].lease_id, 0);
    loaded_free(l);
    r.lease_limit = "wf";
    r.lease_id = 5;
    r.lease_tag = UINT64_C(1764000000000000999);
    assert_int_equal(store_begin(s), 0);
    assert_int_equal(store_put_task(s, &r), 0);
    assert_int_equal(store_commit(s, monotonic_ms()), 0);
    store_close(s);

    s = open_store(dir, STORE_ALWAYS, 0);
    l = load_all(s);
    assert_int_equal(l->ntasks, 2);
    assert_task(&l->tasks[1], &r);
    loaded_free(l);
    store_close(s);

    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "SELECT value FROM meta WHERE name = "
                                        "'store.schema_version'",
                                        -1, &st, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(st), SQLITE_ROW);
    version = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    assert_int_equal(version, 2);
}

/* ---- Faults ---------------------------------------------------------------------------- */

/* The Nth write of commit N fails: rolled back, invisible after reopen, and commit N + 1 works.
 * Swept over every write of a multi-page commit. */
static void test_write_fault(void **state)
{
    store *s = open_store(data_dir(state), STORE_ALWAYS, 1);
    uint64_t id = 1;
    int committed[64] = {0};
    int failures = 0;
    loaded *l;

    assert_int_equal(commit_task(s, id, 100), 0);
    committed[id] = 1;
    for (long n = 1; n < 30; n++) {
        long writes = faultvfs_writes();
        int rc;

        id++;
        assert_true(id + 1 < 64);
        faultvfs_fail_write(n);
        rc = commit_task(s, id, 20000); /* several pages */
        faultvfs_fail_write(0);
        if (rc == 0) {
            committed[id] = 1;
            assert_true(faultvfs_writes() - writes < n); /* the fault never fired */
            break;
        }
        failures++;
        assert_true(strncmp(store_error(s), "write failed", 12) == 0);
        /* The next transaction succeeds. */
        id++;
        assert_int_equal(commit_task(s, id, 100), 0);
        committed[id] = 1;
    }
    assert_true(failures >= 3);
    assert_check_ok(s);
    store_close(s);

    s = open_store(data_dir(state), STORE_ALWAYS, 0);
    l = load_all(s);
    for (uint64_t i = 1; i <= id; i++)
        assert_int_equal(has_task(l, i), committed[i]);
    loaded_free(l);
    assert_check_ok(s);
    store_close(s);
}

static void test_fsync_fault(void **state)
{
    store *s = open_store(data_dir(state), STORE_ALWAYS, 1);
    loaded *l;

    assert_int_equal(commit_task(s, 1, 100), 0);
    faultvfs_fail_sync(1);
    assert_int_equal(commit_task(s, 2, 100), SLUICE_EIO);
    assert_true(strncmp(store_error(s), "fsync failed", 12) == 0);
    assert_int_equal(commit_task(s, 3, 100), 0);
    /* A long fsync failure sequence: every other commit. */
    for (uint64_t id = 4; id < 20; id += 2) {
        faultvfs_fail_sync(1);
        assert_int_equal(commit_task(s, id, 5000), SLUICE_EIO);
        assert_int_equal(commit_task(s, id + 1, 5000), 0);
    }
    assert_check_ok(s);
    store_close(s);

    s = open_store(data_dir(state), STORE_ALWAYS, 0);
    l = load_all(s);
    assert_true(has_task(l, 1));
    assert_false(has_task(l, 2));
    assert_true(has_task(l, 3));
    for (uint64_t id = 4; id < 20; id += 2) {
        assert_false(has_task(l, id));
        assert_true(has_task(l, id + 1));
    }
    loaded_free(l);
    store_close(s);
}

static void test_disk_full(void **state)
{
    store *s = open_store(data_dir(state), STORE_ALWAYS, 1);
    loaded *l;

    assert_int_equal(commit_task(s, 1, 100), 0);
    faultvfs_disk_full(1);
    assert_int_equal(commit_task(s, 2, 100), SLUICE_EIO);
    assert_string_equal(store_error(s), "disk full");
    assert_int_equal(commit_task(s, 3, 30000), SLUICE_EIO); /* still full */
    assert_string_equal(store_error(s), "disk full");
    faultvfs_disk_full(0);
    assert_int_equal(commit_task(s, 4, 30000), 0); /* space is back */
    assert_int_equal(commit_task(s, 5, 100), 0);
    assert_check_ok(s);
    store_close(s);

    s = open_store(data_dir(state), STORE_ALWAYS, 0);
    l = load_all(s);
    assert_int_equal(l->ntasks, 3);
    assert_true(has_task(l, 1) && has_task(l, 4) && has_task(l, 5));
    loaded_free(l);
    store_close(s);
}

/* ---- Crashes --------------------------------------------------------------------------- */

typedef struct crash_seen {
    uint64_t max_id; /* the largest task id */
    size_t ntasks;
    int64_t last; /* meta "last" */
} crash_seen;

static int crash_on_task(const sluice_task_record *r, void *arg)
{
    crash_seen *c = arg;

    c->ntasks++;
    if (r->id > c->max_id)
        c->max_id = r->id;
    return 0;
}

static int crash_on_meta(const char *name, int64_t value, void *arg)
{
    if (strcmp(name, "last") == 0)
        ((crash_seen *)arg)->last = value;
    return 0;
}

/* The child: continues the sequence of tasks left by the previous rounds, one transaction per
 * task, and reports each task's id once its commit returned. */
static void crash_child(const char *dir, int fd)
{
    store_options o;
    store *s;
    char msg[256], payload[3000];
    crash_seen seen = {0};
    store_loader cb = {.task = crash_on_task};

    store_options_init(&o);
    o.dir = dir;
    if (store_open(&o, &s, msg, sizeof msg) != 0 || store_load(s, &cb, &seen) != 0)
        _exit(2);
    memset(payload, 'p', sizeof payload);
    for (uint64_t k = seen.max_id + 1;; k++) {
        sluice_task_record r = plain_task(k, payload, (k * 37) % sizeof payload);

        if (store_begin(s) || store_put_task(s, &r) ||
            store_put_key(s, "lim", (const char *)&k, sizeof k, payload, 40) ||
            store_put_meta(s, "last", (int64_t)k) || store_commit(s, monotonic_ms()))
            _exit(3);
        if (write(fd, &k, sizeof k) != (ssize_t)sizeof k)
            _exit(4);
    }
}

static void test_crash_loses_no_reported_commit(void **state)
{
    const char *dir = data_dir(state);
    test_rng rng;
    uint64_t prev_max = 0; /* the last task id found after the previous round */

    rng_seed(&rng, 2024);
    for (int round = 0; round < 5; round++) {
        int fds[2], status;
        pid_t pid;
        uint64_t k, reported = 0;
        struct timespec ts;
        crash_seen seen = {0};
        store_loader cb = {.task = crash_on_task, .meta = crash_on_meta};
        store *s;

        /* Each round continues from the previous round's data: recovery upon recovery. */
        assert_int_equal(pipe(fds), 0);
        pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(fds[0]);
            crash_child(dir, fds[1]);
        }
        close(fds[1]);
        /* Kill it at a random moment after its first commit. */
        assert_int_equal(read(fds[0], &k, sizeof k), (ssize_t)sizeof k);
        reported = k;
        ts.tv_sec = 0;
        ts.tv_nsec = (long)rng_range(&rng, 1, 200) * 1000000L;
        nanosleep(&ts, NULL);
        kill(pid, SIGKILL);
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFSIGNALED(status)); /* killed in the middle, not failed */
        while (read(fds[0], &k, sizeof k) == (ssize_t)sizeof k)
            reported = k;
        close(fds[0]);

        s = open_store(dir, STORE_ALWAYS, 0);
        assert_int_equal(store_load(s, &cb, &seen), 0);
        assert_check_ok(s);
        store_close(s);
        /* Every reported commit is there, in one unbroken sequence from 1. */
        assert_true(seen.max_id >= reported);
        assert_int_equal(seen.ntasks, seen.max_id);
        assert_int_equal(seen.last, (int64_t)seen.max_id);
        assert_true(reported > prev_max); /* this round committed something */
        prev_max = seen.max_id;
        print_message("round %d: tasks up to %lu reported, %lu found\n", round,
                      (unsigned long)reported, (unsigned long)seen.max_id);
    }
}

/* ---- Checkpoints and damage --------------------------------------------------------- */

/* Checkpoints keep the WAL bounded (the store runs them itself, after commits). */
static void test_checkpoints_bound_the_wal(void **state)
{
    store *s = open_store(data_dir(state), STORE_BATCH, 0);
    char path[700];
    struct stat sb;
    crash_seen seen = {0};
    store_loader cb = {.task = crash_on_task};
    for (uint64_t id = 1; id <= 1500; id++) {
        assert_int_equal(commit_task(s, id, 3000), 0);
        if (id % 100 == 0)
            assert_int_equal(store_sync(s), 0);
    }
    snprintf(path, sizeof path, "%s/sluice.db-wal", data_dir(state));
    assert_int_equal(stat(path, &sb), 0);
    assert_true(sb.st_size < (off_t)1100 * (4096 + 24)); /* 1000 frames and a commit's worth */
    store_close(s);

    s = open_store(data_dir(state), STORE_ALWAYS, 0);
    assert_int_equal(store_load(s, &cb, &seen), 0);
    assert_int_equal(seen.ntasks, 1500);
    assert_int_equal(seen.max_id, 1500);
    assert_check_ok(s);
    store_close(s);
}

/* A damaged page is found by store_check. */
static void test_check_finds_damage(void **state)
{
    store *s = open_store(data_dir(state), STORE_ALWAYS, 0);
    char path[700], junk[512], msg[256];
    int fd;

    for (uint64_t id = 1; id <= 200; id++)
        assert_int_equal(commit_task(s, id, 1500), 0);
    assert_check_ok(s);
    store_close(s); /* checkpoints everything into sluice.db */

    snprintf(path, sizeof path, "%s/sluice.db", data_dir(state));
    fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    memset(junk, 0x5a, sizeof junk);
    assert_int_equal(pwrite(fd, junk, sizeof junk, 4096 * 20 + 8), (ssize_t)sizeof junk);
    assert_int_equal(pwrite(fd, junk, sizeof junk, 4096 * 40 + 2000), (ssize_t)sizeof junk);
    close(fd);

    s = open_store(data_dir(state), STORE_ALWAYS, 0);
    assert_int_equal(store_check(s, msg, sizeof msg), SLUICE_EINVAL);
    assert_true(strncmp(msg, "integrity check: ", 17) == 0);
    assert_string_equal(store_error(s), msg);
    store_close(s);
}

/* ---- Out of memory --------------------------------------------------------------------- */

typedef struct oom_arg {
    const char *dir;
    store_durability d;
} oom_arg;

static int oom_count(const sluice_task_record *r, void *arg)
{
    (void)r;
    (*(int *)arg)++;
    return 0;
}

static int oom_body(void *p)
{
    oom_arg *a = p;
    store_options o;
    store *s;
    char msg[256];
    sluice_task_record r = plain_task(1, "x", 1);
    store_loader cb = {.task = oom_count};
    int rc, n = 0;

    store_options_init(&o);
    o.dir = a->dir;
    o.durability = a->d;
    rc = store_open(&o, &s, msg, sizeof msg);
    if (rc)
        return rc;
    if ((rc = store_begin(s)) || (rc = store_put_task(s, &r)) ||
        (rc = store_commit(s, monotonic_ms())) || (rc = store_load(s, &cb, &n))) {
        store_close(s);
        return rc;
    }
    store_close(s);
    return 0;
}

static void test_oom(void **state)
{
    oom_arg a = {data_dir(state), STORE_ALWAYS};

    assert_true(oom_sweep(oom_body, &a, 50) > 1);
    a.d = STORE_BATCH;
    assert_true(oom_sweep(oom_body, &a, 50) > 1);
    a.d = STORE_NONE;
    assert_true(oom_sweep(oom_body, &a, 50) > 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_options, setup, teardown),
        cmocka_unit_test_setup_teardown(test_roundtrip_always, setup, teardown),
        cmocka_unit_test_setup_teardown(test_roundtrip_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replace_and_delete, setup, teardown),
        cmocka_unit_test_setup_teardown(test_load_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_uncommitted_not_seen, setup, teardown),
        cmocka_unit_test_setup_teardown(test_misuse, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_put_fails_transaction, setup, teardown),
        cmocka_unit_test_setup_teardown(test_none, setup, teardown),
        cmocka_unit_test_setup_teardown(test_always_syncs_each_commit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_syncs_on_store_sync, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_schedule_uses_time_given, setup, teardown),
        cmocka_unit_test_setup_teardown(test_env_selects_fault_vfs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lock, setup, teardown),
        cmocka_unit_test_setup_teardown(test_creates_directory, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_migrates_schema_1, setup, teardown),
        cmocka_unit_test_setup_teardown(test_write_fault, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fsync_fault, setup, teardown),
        cmocka_unit_test_setup_teardown(test_disk_full, setup, teardown),
        cmocka_unit_test_setup_teardown(test_checkpoints_bound_the_wal, setup, teardown),
        cmocka_unit_test_setup_teardown(test_check_finds_damage, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crash_loses_no_reported_commit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_oom, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
