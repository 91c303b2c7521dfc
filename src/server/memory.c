/* SPDX-License-Identifier: MIT */
/*
 * The server's memory budget (see memory.h): the default taken from the machine, the refusal of
 * new state past the budget, and the closing of clients whose queued replies keep the process
 * over it. The counting itself is the allocator's (base/alloc.c); everything here runs on the
 * loop thread.
 */
#include "server/memory.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "server/commands.h"
#include "server/log.h"
#include "sluice/limit.h"

/* Keys examined per limit when a refused command sweeps (the housekeeping sweeps 2,000 every
 * 100 ms; this runs at most once per loop phase, and only past the budget). */
#define MEM_SWEEP_BUDGET 20000

/* ---- The default ------------------------------------------------------------------------- */

/* Reads the first number in path (after the prefix `key`, when given, on its line) into *out.
 * Returns 0, or -1 when the file or the number is missing ("max" is missing too). */
static int read_number(const char *path, const char *key, unsigned long long *out)
{
    char line[256];
    FILE *f = fopen(path, "r");
    int rc = -1;

    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f)) {
        const char *p = line;
        unsigned long long v = 0;
        int digits = 0;

        if (key) {
            if (strncmp(line, key, strlen(key)) != 0)
                continue;
            p += strlen(key);
        }
        while (*p == ' ' || *p == '\t' || *p == ':')
            p++;
        for (; *p >= '0' && *p <= '9' && digits < 19; p++, digits++)
            v = v * 10 + (unsigned)(*p - '0');
        if (digits > 0 && digits < 19) {
            *out = v;
            rc = 0;
        }
        break;
    }
    fclose(f);
    return rc;
}

size_t mem_default_budget(void)
{
    unsigned long long total = 0, v;

    if (read_number("/proc/meminfo", "MemTotal", &v) == 0 && v <= (~0ull >> 11))
        total = v * 1024;
    /* A cgroup's limit, when smaller, is what the OOM killer enforces (v1 reports "no limit" as
     * a huge number, which the min ignores). */
    if (read_number("/sys/fs/cgroup/memory.max", NULL, &v) == 0 && v > 0 && (!total || v < total))
        total = v;
    else if (read_number("/sys/fs/cgroup/memory/memory.limit_in_bytes", NULL, &v) == 0 && v > 0 &&
             (!total || v < total))
        total = v;
#if SIZE_MAX < ULLONG_MAX
    if (total / 2 > SIZE_MAX)
        return SIZE_MAX;
#endif
    return (size_t)(total / 2);
}

void mem_set_budget(server *s, size_t bytes)
{
    s->maxmemory = bytes;
    alloc_set_budget(bytes);
}

/* ---- Refusing new state ------------------------------------------------------------------ */

typedef struct sweep_walk {
    server *s;
    int64_t now;
} sweep_walk;

static void sweep_limit(const sluice_limit_policy *p, void *arg)
{
    sweep_walk *sw = arg;
    sluice_limit *live = NULL;

    if (sluice_engine_get_limit(sw->s->engine, p->name, &live) && live)
        sluice_limit_sweep(live, sw->now, MEM_SWEEP_BUDGET);
}

/* Forgets what carries no information: idle keys of every limit, idle CL.THROTTLE parameter
 * sets. Once per loop phase, so a flood of refused commands does not sweep for each. */
static void reclaim(server *s)
{
    int64_t now = server_now(s);
    sweep_walk sw = {s, now};

    if (s->mem_swept_ns == now)
        return;
    s->mem_swept_ns = now;
    sluice_engine_list_limits(s->engine, sweep_limit, &sw);
    cmd_cell_sweep(s, now, MEM_SWEEP_BUDGET);
}

void mem_reply_oom(conn *c)
{
    server *s = c->srv;

    s->stats.oom_refused++;
    resp_error(conn_out(c), "OOM",
               "command not allowed when used memory > 'maxmemory' (%zu bytes used of %zu)",
               alloc_live_bytes(), s->maxmemory);
}

int mem_refuse(conn *c)
{
    server *s = c->srv;

    if (!alloc_over_budget())
        return 0;
    reclaim(s);
    if (!alloc_over_budget())
        return 0;
    mem_reply_oom(c);
    return 1;
}

/* ---- Reply buffers ----------------------------------------------------------------------- */

static size_t queued(const conn *c)
{
    return c->out.len + c->wlen;
}

/* Queued replies large enough to close a client for (memory.h). */
static int large(const server *s, const conn *c)
{
    size_t q = queued(c);

    return q >= MEM_MIN_VICTIM_OUTPUT && q >= s->maxmemory / 16;
}

static void close_for_memory(conn *c)
{
    server *s = c->srv;

    s->stats.oom_closes++;
    log_warn("client %" PRIu64 " %s closed: %zu bytes of replies queued while memory is over "
             "--maxmemory (%zu bytes used of %zu)",
             c->id, c->addr, queued(c), alloc_live_bytes(), s->maxmemory);
    conn_close(c);
}

int mem_output_over(conn *c)
{
    if (!c->wbuf || !large(c->srv, c) || queued(c) < c->srv->maxmemory / 4 || !alloc_over_budget())
        return 0;
    close_for_memory(c);
    return 1;
}

void mem_enforce_output(server *s)
{
    size_t live = alloc_live_bytes(), freed = 0;

    if (!alloc_over_budget())
        return;
    /* The buffers of a closed client are freed only once libuv closed its handles (later in this
     * loop iteration), so count what each closing gives back instead of re-reading the counter. */
    while (freed < live && live - freed > s->maxmemory) {
        conn *victim = NULL;

        for (conn *c = s->clients; c; c = c->next) {
            if (c->flags & CONN_CLOSING || !large(s, c))
                continue;
            if (!victim || queued(c) > queued(victim))
                victim = c;
        }
        if (!victim)
            return;
        freed += queued(victim);
        close_for_memory(victim);
    }
}
