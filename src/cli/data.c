/* SPDX-License-Identifier: MIT */
/*
 * `sluice data check DIR`: opens a data directory as the server would (taking its lock, so it
 * refuses a directory a running server holds), runs the backend's integrity check (SQLite's
 * PRAGMA integrity_check), then reads every record back and checks what the server relies on:
 * every task record is well formed (a known state, units >= 1, a type), no two unfinished tasks
 * hold the same task key, and every key state and limit row can be read. Prints one summary
 * line, or the first problem, and exits 0 or 1.
 *
 * Opening may create the directory's files when they are missing, as `serve` would; a directory
 * without sluice.db is refused first, so a typo does not create an empty store.
 */
#include "cli/data.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/grow.h"
#include "sluice/error.h"
#include "store/store.h"

#define EXIT_BAD   1
#define EXIT_USAGE 2

static const char usage_text[] =
    "Usage: sluice data check DIR\n"
    "\n"
    "Checks the data directory of `sluice serve --data DIR` while no server uses it: the\n"
    "database's integrity, then every record (tasks well formed, no task key held by two\n"
    "unfinished tasks, key states and limits readable). Prints a summary line.\n"
    "\n"
    "Exit status: 0 sound, 1 a problem (printed), or the directory cannot be opened (a server\n"
    "holds it), 2 bad usage.\n";

/* What the walk over the records found. */
typedef struct census {
    uint64_t tasks[SLUICE_TASK_CANCELLED + 1]; /* by state */
    uint64_t keys, limits, tombstones, series;
    char **task_keys; /* copies of the task keys of unfinished tasks (length-prefixed) */
    size_t nkeys, cap;
    char problem[256]; /* the first problem, "" when none */
} census;

static int problem(census *c, const char *what, uint64_t id)
{
    if (!c->problem[0])
        snprintf(c->problem, sizeof c->problem, "%s (task %" PRIu64 ")", what, id);
    return 0; /* go on: the summary still counts everything */
}

static int on_task(const sluice_task_record *r, void *arg)
{
    census *c = arg;
    char *copy;

    if (r->state < SLUICE_TASK_QUEUED || r->state > SLUICE_TASK_CANCELLED)
        return problem(c, "a task in an unknown state", r->id);
    c->tasks[r->state]++;
    if (r->id == 0 || r->units < 1 || r->attempt < 0 || !r->type || !r->type[0])
        return problem(c, "a malformed task record", r->id);
    if (!r->task_key || r->state >= SLUICE_TASK_DONE)
        return 0;
    if (grow_array(&c->task_keys, &c->cap, c->nkeys + 1, sizeof *c->task_keys, 256) != SLUICE_OK)
        return SLUICE_ENOMEM;
    copy = alloc_malloc(sizeof(size_t) + r->task_key_len);
    if (!copy)
        return SLUICE_ENOMEM;
    memcpy(copy, &r->task_key_len, sizeof(size_t));
    memcpy(copy + sizeof(size_t), r->task_key, r->task_key_len);
    c->task_keys[c->nkeys++] = copy;
    return 0;
}

static int on_key(const char *limit, const char *key, size_t keylen, const void *state, size_t len,
                  void *arg)
{
    census *c = arg;

    (void)key;
    (void)keylen;
    (void)state;
    c->keys++;
    if (!limit[0] || len == 0)
        return problem(c, "an empty key state", 0);
    return 0;
}

static int on_limit(const char *name, const char *spec, void *arg)
{
    census *c = arg;

    (void)name;
    if (spec[0])
        c->limits++;
    else
        c->tombstones++;
    return 0;
}

static int on_series(const sluice_recurring_spec *spec, int64_t runs, int64_t skipped, void *arg)
{
    census *c = arg;

    (void)spec;
    c->series++;
    if (runs < 0 || skipped < 0)
        return problem(c, "a recurring series with negative counters", 0);
    return 0;
}

static int on_meta(const char *name, int64_t value, void *arg)
{
    (void)name;
    (void)value;
    (void)arg;
    return 0;
}

static int key_cmp(const void *a, const void *b)
{
    const char *x = *(char *const *)a, *y = *(char *const *)b;
    size_t lx, ly;
    int d;

    memcpy(&lx, x, sizeof lx);
    memcpy(&ly, y, sizeof ly);
    d = memcmp(x + sizeof(size_t), y + sizeof(size_t), lx < ly ? lx : ly);
    return d ? d : (lx > ly) - (lx < ly);
}

static int check_dir(const char *dir)
{
    store_options so;
    store *st = NULL;
    census c;
    store_loader cb = {on_task, on_key, on_limit, on_series, on_meta};
    char msg[512], db[PATH_MAX];
    uint64_t total = 0;
    int rc, status = EXIT_BAD;

    memset(&c, 0, sizeof c);
    if ((size_t)snprintf(db, sizeof db, "%s/sluice.db", dir) >= sizeof db || access(db, R_OK)) {
        fprintf(stderr, "sluice data check: %s: no sluice.db there (not a data directory)\n", dir);
        return EXIT_BAD;
    }
    store_options_init(&so);
    so.dir = dir;
    rc = store_open(&so, &st, msg, sizeof msg);
    if (rc != 0) {
        fprintf(stderr, "sluice data check: %s\n", msg);
        return EXIT_BAD;
    }
    rc = store_check(st, msg, sizeof msg);
    if (rc != 0) {
        fprintf(stderr, "sluice data check: %s: %s\n", dir, msg[0] ? msg : store_error(st));
        goto done;
    }
    rc = store_load(st, &cb, &c);
    if (rc != 0) {
        fprintf(stderr, "sluice data check: %s: cannot read the records: %s\n", dir,
                store_error(st));
        goto done;
    }
    if (c.nkeys > 1) {
        qsort(c.task_keys, c.nkeys, sizeof *c.task_keys, key_cmp);
        for (size_t i = 1; i < c.nkeys && !c.problem[0]; i++)
            if (key_cmp(&c.task_keys[i - 1], &c.task_keys[i]) == 0)
                problem(&c, "two unfinished tasks hold the same task key", 0);
    }
    if (c.problem[0]) {
        fprintf(stderr, "sluice data check: %s: %s\n", dir, c.problem);
        goto done;
    }
    for (size_t i = 0; i <= SLUICE_TASK_CANCELLED; i++)
        total += c.tasks[i];
    printf("%s: ok: %" PRIu64 " tasks (%" PRIu64 " queued or parked, %" PRIu64 " running, %" PRIu64
           " finished), %" PRIu64 " key states, %" PRIu64 " limit definitions, %" PRIu64
           " removed limits, %" PRIu64 " recurring series\n",
           dir, total, c.tasks[SLUICE_TASK_QUEUED] + c.tasks[SLUICE_TASK_PARKED],
           c.tasks[SLUICE_TASK_RUNNING],
           c.tasks[SLUICE_TASK_DONE] + c.tasks[SLUICE_TASK_FAILED] + c.tasks[SLUICE_TASK_CANCELLED],
           c.keys, c.limits, c.tombstones, c.series);
    status = 0;
done:
    for (size_t i = 0; i < c.nkeys; i++)
        alloc_free(c.task_keys[i]);
    alloc_free(c.task_keys);
    store_close(st);
    return status;
}

int data_main(int argc, char **argv)
{
    if (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        fputs(usage_text, stdout);
        return 0;
    }
    if (argc != 3 || strcmp(argv[1], "check") != 0) {
        fprintf(stderr, "sluice data: expected `sluice data check DIR`; see sluice data --help\n");
        return EXIT_USAGE;
    }
    return check_dir(argv[2]);
}
