/* SPDX-License-Identifier: MIT */
/*
 * sluice_torture: the client side of the kill -9 torture test (tests/server/torture.sh), over
 * hiredis. Three roles, one per invocation:
 *
 *   produce PORT PREFIX COUNT CONNS DEPTH LOG
 *       Adds tasks of type `t` with unique task keys PREFIX-0, PREFIX-1, ... over CONNS
 *       connections, DEPTH commands pipelined on each, so that many clients' changes land in one
 *       loop turn (one group commit). Before a batch is sent, every key in it is logged as
 *       "S key" (sent); once its reply arrives, "A key id" (acknowledged: an id) or "E key"
 *       (an error reply). Stops at COUNT keys or when the server goes away (killed).
 *   work PORT LOG [drain]
 *       Takes tasks (TASK.GET t COUNT 50 TIMEOUT 100) and acks each, logging "D id" once the
 *       ACK's +OK arrived. Stops when the server goes away, or with `drain` once the server has
 *       no unfinished task left (INFO engine) and TASK.GET came back empty.
 *   verify PORT FINAL LOG...
 *       Reads every log given (producers' and workers') and scans the server's task ids with
 *       TASK.INFO from 1 up, to 2000 ids past the largest id any log names. Checks:
 *         - every acknowledged key is present, under the id it was given, exactly once;
 *         - no task has a key that no producer sent (no phantom), and no key is on two ids;
 *         - every task whose ACK was acknowledged is done;
 *         - with FINAL = 1, every task is done (the workers completed everything).
 *       Prints a summary; exit status 1 on the first violated check (up to 10 are printed).
 *
 * Exit status 0 on success, 1 on a failed check, 2 on bad usage or a broken log.
 */
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>

#define MAX_CONNS  64
#define SCAN_PAST  2000 /* ids scanned past the largest one known */
#define SCAN_BATCH 500

static redisContext *connect_port(int port)
{
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);

    if (!c || c->err) {
        if (c)
            redisFree(c);
        return NULL;
    }
    tv.tv_sec = 10;
    redisSetTimeout(c, tv);
    return c;
}

/* ---- produce ----------------------------------------------------------------------------- */

static int produce(int port, const char *prefix, long count, int nconns, int depth,
                   const char *logpath)
{
    redisContext *cs[MAX_CONNS];
    FILE *log = fopen(logpath, "a");
    long next = 0, acked = 0;
    int alive = 1;

    if (!log || nconns < 1 || nconns > MAX_CONNS || depth < 1) {
        fprintf(stderr, "torture produce: bad arguments or log %s\n", logpath);
        return 2;
    }
    for (int i = 0; i < nconns; i++) {
        cs[i] = connect_port(port);
        if (!cs[i]) {
            nconns = i;
            break;
        }
    }
    while (alive && nconns > 0 && next < count) {
        long first = next;
        int sent[MAX_CONNS];

        /* Log the whole batch as sent before a byte of it leaves. */
        for (int i = 0; i < nconns; i++) {
            sent[i] = 0;
            for (int k = 0; k < depth && next < count; k++, next++, sent[i]++)
                fprintf(log, "S %s-%ld\n", prefix, next);
        }
        fflush(log);
        next = first;
        for (int i = 0; i < nconns; i++)
            for (int k = 0; k < sent[i]; k++, next++) {
                char key[128], payload[160];

                snprintf(key, sizeof key, "%s-%ld", prefix, next);
                snprintf(payload, sizeof payload, "{\"k\":\"%s\"}", key);
                redisAppendCommand(cs[i], "TASK.ADD t %s ID %s", payload, key);
            }
        next = first;
        for (int i = 0; i < nconns && alive; i++)
            for (int k = 0; k < sent[i]; k++, next++) {
                redisReply *r = NULL;

                if (redisGetReply(cs[i], (void **)&r) != REDIS_OK || !r) {
                    alive = 0;
                    break;
                }
                if (r->type == REDIS_REPLY_INTEGER) {
                    fprintf(log, "A %s-%ld %lld\n", prefix, next, r->integer);
                    acked++;
                } else {
                    fprintf(log, "E %s-%ld %s\n", prefix, next,
                            r->type == REDIS_REPLY_ERROR ? r->str : "?");
                }
                freeReplyObject(r);
            }
        fflush(log);
    }
    for (int i = 0; i < nconns; i++)
        redisFree(cs[i]);
    fclose(log);
    printf("produce %s: %ld sent, %ld acknowledged%s\n", prefix, next, acked,
           alive ? "" : " (server gone)");
    return 0;
}

/* ---- work -------------------------------------------------------------------------------- */

/* Unfinished tasks per INFO engine, or -1 when it cannot be read. */
static long unfinished(redisContext *c)
{
    static const char *const fields[] = {
        "tasks_queued:", "tasks_parked:", "tasks_running:", "tasks_delayed:"};
    redisReply *r = redisCommand(c, "INFO engine");
    long n = 0;

    if (!r || r->type != REDIS_REPLY_STRING) {
        if (r)
            freeReplyObject(r);
        return -1;
    }
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        const char *p = strstr(r->str, fields[i]);

        if (p)
            n += strtol(p + strlen(fields[i]), NULL, 10);
    }
    freeReplyObject(r);
    return n;
}

static int work(int port, const char *logpath, int drain)
{
    redisContext *c = connect_port(port);
    FILE *log = fopen(logpath, "a");
    long done = 0;

    if (!log) {
        fprintf(stderr, "torture work: cannot open %s\n", logpath);
        return 2;
    }
    while (c) {
        redisReply *r = redisCommand(c, "TASK.GET t COUNT 50 TIMEOUT 100");
        size_t n;

        if (!r)
            break;
        if (r->type != REDIS_REPLY_ARRAY) {
            freeReplyObject(r);
            break;
        }
        n = r->elements;
        for (size_t i = 0; i < n; i++)
            redisAppendCommand(c, "TASK.ACK %lld", r->element[i]->element[0]->integer);
        for (size_t i = 0; i < n; i++) {
            redisReply *a = NULL;

            if (redisGetReply(c, (void **)&a) != REDIS_OK || !a) {
                freeReplyObject(r);
                goto gone;
            }
            if (a->type == REDIS_REPLY_STATUS) {
                fprintf(log, "D %lld\n", r->element[i]->element[0]->integer);
                done++;
            }
            freeReplyObject(a);
        }
        fflush(log);
        freeReplyObject(r);
        if (drain && n == 0 && unfinished(c) == 0)
            break;
    }
gone:
    if (c)
        redisFree(c);
    fclose(log);
    printf("work: %ld acked\n", done);
    return 0;
}

/* ---- verify ------------------------------------------------------------------------------ */

/* A string set/map with open addressing: key -> value (an id, or a flag). */
typedef struct smap {
    char **keys;
    long long *vals;
    size_t cap, n;
} smap;

static uint64_t hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;

    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static long long *smap_slot(smap *m, const char *key, int create)
{
    size_t at;

    if (create && (m->n + 1) * 2 > m->cap) {
        smap old = *m;

        m->cap = old.cap ? old.cap * 2 : 1024;
        m->keys = calloc(m->cap, sizeof *m->keys);
        m->vals = calloc(m->cap, sizeof *m->vals);
        if (!m->keys || !m->vals) {
            fprintf(stderr, "torture verify: out of memory\n");
            exit(2);
        }
        m->n = 0;
        for (size_t i = 0; i < old.cap; i++)
            if (old.keys[i]) {
                at = hash(old.keys[i]) & (m->cap - 1);
                while (m->keys[at])
                    at = (at + 1) & (m->cap - 1);
                m->keys[at] = old.keys[i];
                m->vals[at] = old.vals[i];
                m->n++;
            }
        free(old.keys);
        free(old.vals);
    }
    if (!m->cap)
        return NULL;
    for (at = hash(key) & (m->cap - 1); m->keys[at]; at = (at + 1) & (m->cap - 1))
        if (strcmp(m->keys[at], key) == 0)
            return &m->vals[at];
    if (!create)
        return NULL;
    m->keys[at] = strdup(key);
    m->vals[at] = 0;
    m->n++;
    return &m->vals[at];
}

static void smap_free(smap *m)
{
    for (size_t i = 0; i < m->cap; i++)
        free(m->keys[i]);
    free(m->keys);
    free(m->vals);
}

static int failures;

__attribute__((format(printf, 1, 2))) static void fail(const char *fmt, ...)
{
    va_list ap;

    if (failures++ >= 10)
        return;
    va_start(ap, fmt);
    fputs("FAIL: ", stdout);
    vprintf(fmt, ap);
    fputc('\n', stdout);
    va_end(ap);
}

/* A field of a TASK.INFO reply (a flat array of name, value pairs in RESP2), or NULL. */
static const redisReply *info_field(const redisReply *r, const char *name)
{
    for (size_t i = 0; i + 1 < r->elements; i += 2)
        if (r->element[i]->type == REDIS_REPLY_STRING && strcmp(r->element[i]->str, name) == 0)
            return r->element[i + 1];
    return NULL;
}

static int verify(int port, int final, int nlogs, char **logs)
{
    smap sent = {0}, acked = {0}, done = {0}, seen = {0}, found = {0};
    long long max_id = 0, scanned = 0, present = 0, ndone = 0;
    redisContext *c;
    char line[512];

    for (int i = 0; i < nlogs; i++) {
        FILE *f = fopen(logs[i], "r");

        if (!f)
            continue; /* a role that never ran */
        while (fgets(line, sizeof line, f)) {
            char key[256];
            long long id;

            if (line[0] == 'S' && sscanf(line, "S %255s", key) == 1) {
                *smap_slot(&sent, key, 1) = 1;
            } else if (line[0] == 'A' && sscanf(line, "A %255s %lld", key, &id) == 2) {
                long long *v = smap_slot(&acked, key, 1);

                if (*v && *v != id)
                    fail("key %s acknowledged twice, as %lld and %lld", key, *v, id);
                *v = id;
                if (id > max_id)
                    max_id = id;
            } else if (line[0] == 'D' && sscanf(line, "D %lld", &id) == 1) {
                char idtext[32];

                snprintf(idtext, sizeof idtext, "%lld", id);
                *smap_slot(&done, idtext, 1) = 1;
                if (id > max_id)
                    max_id = id;
            }
        }
        fclose(f);
    }
    c = connect_port(port);
    if (!c) {
        fprintf(stderr, "torture verify: cannot connect to port %d\n", port);
        return 2;
    }
    for (long long base = 1, last_found = 0;
         base <= max_id + SCAN_PAST || base <= last_found + SCAN_PAST; base += SCAN_BATCH) {
        for (long long id = base; id < base + SCAN_BATCH; id++)
            redisAppendCommand(c, "TASK.INFO %lld", id);
        for (long long id = base; id < base + SCAN_BATCH; id++) {
            redisReply *r = NULL;
            const redisReply *tk, *st;
            char idtext[32];

            if (redisGetReply(c, (void **)&r) != REDIS_OK || !r) {
                fprintf(stderr, "torture verify: the server went away\n");
                return 2;
            }
            scanned++;
            if (r->type != REDIS_REPLY_ARRAY) {
                freeReplyObject(r);
                continue; /* NOTASK */
            }
            last_found = id;
            present++;
            snprintf(idtext, sizeof idtext, "%lld", id);
            *smap_slot(&found, idtext, 1) = 1;
            tk = info_field(r, "task_key");
            st = info_field(r, "state");
            if (!tk || tk->type != REDIS_REPLY_STRING) {
                fail("task %lld has no task key (a phantom)", id);
            } else {
                long long *a = smap_slot(&acked, tk->str, 0), *s;

                if (!smap_slot(&sent, tk->str, 0))
                    fail("task %lld has key %s, which no producer sent (a phantom)", id, tk->str);
                s = smap_slot(&seen, tk->str, 1);
                if (*s)
                    fail("key %s is on two tasks: %lld and %lld", tk->str, *s, id);
                *s = id;
                if (a && *a != id)
                    fail("key %s was acknowledged as task %lld but is task %lld", tk->str, *a, id);
            }
            if (st && st->type == REDIS_REPLY_STRING) {
                int is_done = strcmp(st->str, "done") == 0;

                ndone += is_done;
                if (smap_slot(&done, idtext, 0) && !is_done)
                    fail("task %lld was acked (+OK) but is %s", id, st->str);
                if (final && !is_done)
                    fail("task %lld is %s at the end, not done", id, st->str);
            }
            freeReplyObject(r);
        }
    }
    /* Every acknowledged key must have been seen, under its id. */
    for (size_t i = 0; i < acked.cap; i++)
        if (acked.keys[i]) {
            long long *s = smap_slot(&seen, acked.keys[i], 0);

            if (!s)
                fail("key %s was acknowledged as task %lld but is missing", acked.keys[i],
                     acked.vals[i]);
        }
    /* And every task whose ACK was acknowledged. */
    for (size_t i = 0; i < done.cap; i++)
        if (done.keys[i] && !smap_slot(&found, done.keys[i], 0))
            fail("task %s was acked (+OK) but is missing", done.keys[i]);
    redisFree(c);
    smap_free(&sent);
    smap_free(&acked);
    smap_free(&done);
    smap_free(&seen);
    smap_free(&found);
    printf("verify: %zu keys sent, %zu acknowledged, %zu acks; %lld ids scanned, %lld tasks "
           "present, %lld done; %d failures\n",
           sent.n, acked.n, done.n, scanned, present, ndone, failures);
    return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN); /* a killed server must not kill the client */
    if (argc == 8 && strcmp(argv[1], "produce") == 0)
        return produce(atoi(argv[2]), argv[3], atol(argv[4]), atoi(argv[5]), atoi(argv[6]),
                       argv[7]);
    if ((argc == 4 || argc == 5) && strcmp(argv[1], "work") == 0)
        return work(atoi(argv[2]), argv[3], argc == 5 && strcmp(argv[4], "drain") == 0);
    if (argc >= 4 && strcmp(argv[1], "verify") == 0)
        return verify(atoi(argv[2]), atoi(argv[3]), argc - 4, argv + 4);
    fprintf(stderr, "usage: sluice_torture produce PORT PREFIX COUNT CONNS DEPTH LOG\n"
                    "       sluice_torture work PORT LOG [drain]\n"
                    "       sluice_torture verify PORT FINAL LOG...\n");
    return 2;
}
