/* SPDX-License-Identifier: MIT */
/*
 * bench_reload: how long a CONFIG RELOAD of a large file stalls the other clients of a server.
 *
 * One thread pings the server in a loop (PING, wait for +PONG, again) on its own connection and
 * records every round trip; the main thread sends CONFIG RELOAD on another connection, --reloads
 * times, rewriting the configuration file before each one so that every reload has work to do:
 *
 *   --mode same      the same file each time (every limit unchanged: the cheapest reload)
 *   --mode changed   every limit's rate alternates between 10/s and 20/s (every limit replaced)
 *   --mode renamed   the names alternate between a0.. and b0.. (every limit removed and added)
 *
 * The file holds --limits limits (a{i} or b{i}: {rate: R/s}) and one type naming the first. It is
 * written by this tool (--write FILE alone writes it and exits, for the server's first start),
 * so it must be the server's --config. A ping is "during" a reload when its round trip overlaps
 * the reload's (sent before the reply came, answered after the command left). One line per
 * reload, then the totals, as name=value words:
 *   reload n=1 seconds=3.91 reply=OK pings_during=0 ping_max_ms=3902.1
 *   total reloads=4 ping_max_ms=3902.1 ping_p50_ms=0.05 pings=123456
 * The number to read: ping_max_ms, the longest any client waited for the loop. --idle SECONDS
 * first pings that long without reloading, and prints the longest round trip then (idle_max_ms):
 * what the machine and the server's own timers cost without a reload, to compare with.
 *
 * Usage: bench_reload --port P --config FILE [--host 127.0.0.1] [--limits 200000] [--reloads 4]
 *                     [--mode same|changed|renamed] [--idle SECONDS]
 *        bench_reload --write FILE [--limits 200000]
 */
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MODE_SAME    0
#define MODE_CHANGED 1
#define MODE_RENAMED 2

/* The pinger's record: every round trip's start and end (ns), filled while `stop` is 0. */
typedef struct pinger {
    const char *host;
    int port;
    atomic_int stop;
    int64_t *start_ns; /* grown by the pinger thread only; read after it joined */
    int64_t *end_ns;
    size_t n, cap;
    int failed;
} pinger;

static int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Writes the configuration of `limits` limits named {prefix}{i} at `rate` per second. */
static int write_config(const char *path, size_t limits, char prefix, int rate)
{
    char tmp[4096];
    FILE *f;

    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    f = fopen(tmp, "w");
    if (!f) {
        perror(tmp);
        return -1;
    }
    fputs("limits:\n", f);
    for (size_t i = 0; i < limits; i++)
        fprintf(f, "  %c%zu: {rate: %d/s}\n", prefix, i, rate);
    fprintf(f, "types:\n  t:\n    limits: [%c0]\n", prefix);
    if (fclose(f) != 0 || rename(tmp, path) != 0) {
        perror(path);
        return -1;
    }
    return 0;
}

static void *ping_loop(void *arg)
{
    pinger *p = arg;
    redisContext *c = redisConnect(p->host, p->port);

    if (!c || c->err) {
        fprintf(stderr, "bench_reload: ping connection: %s\n", c ? c->errstr : "no memory");
        p->failed = 1;
        redisFree(c);
        return NULL;
    }
    while (!atomic_load(&p->stop)) {
        int64_t t0 = now_ns();
        redisReply *r = redisCommand(c, "PING");

        if (!r || r->type != REDIS_REPLY_STATUS) {
            fprintf(stderr, "bench_reload: PING failed\n");
            p->failed = 1;
            freeReplyObject(r);
            break;
        }
        freeReplyObject(r);
        if (p->n == p->cap) {
            size_t cap = p->cap ? p->cap * 2 : 65536;
            int64_t *s = realloc(p->start_ns, cap * sizeof(*s));
            int64_t *e = s ? realloc(p->end_ns, cap * sizeof(*e)) : NULL;

            if (s)
                p->start_ns = s;
            if (!s || !e) {
                p->failed = 1;
                break;
            }
            p->end_ns = e;
            p->cap = cap;
        }
        p->start_ns[p->n] = t0;
        p->end_ns[p->n] = now_ns();
        p->n++;
    }
    redisFree(c);
    return NULL;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    const char *host = "127.0.0.1", *config = NULL, *write_only = NULL;
    size_t limits = 200000, reloads = 4, during_total = 0;
    int port = 0, mode = MODE_CHANGED;
    double idle = 0;
    int64_t idle_end = 0;
    int64_t(*windows)[2];
    int64_t *lat, max_ns = 0;
    redisContext *c;
    pthread_t th;
    pinger p;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (!v) {
            fprintf(stderr, "bench_reload: %s needs a value\n", a);
            return 2;
        }
        if (strcmp(a, "--port") == 0)
            port = atoi(v);
        else if (strcmp(a, "--host") == 0)
            host = v;
        else if (strcmp(a, "--config") == 0)
            config = v;
        else if (strcmp(a, "--write") == 0)
            write_only = v;
        else if (strcmp(a, "--limits") == 0)
            limits = (size_t)strtoull(v, NULL, 10);
        else if (strcmp(a, "--idle") == 0)
            idle = strtod(v, NULL);
        else if (strcmp(a, "--reloads") == 0)
            reloads = (size_t)strtoull(v, NULL, 10);
        else if (strcmp(a, "--mode") == 0)
            mode = strcmp(v, "same") == 0      ? MODE_SAME
                   : strcmp(v, "renamed") == 0 ? MODE_RENAMED
                                               : MODE_CHANGED;
        else {
            fprintf(stderr, "bench_reload: unknown option %s\n", a);
            return 2;
        }
        i++;
    }
    if (write_only)
        return write_config(write_only, limits, 'a', 10) == 0 ? 0 : 1;
    if (!config || port <= 0 || limits == 0) {
        fprintf(stderr, "usage: bench_reload --port P --config FILE [--limits N] [--reloads N] "
                        "[--mode same|changed|renamed]\n");
        return 2;
    }
    c = redisConnect(host, port);
    if (!c || c->err) {
        fprintf(stderr, "bench_reload: %s\n", c ? c->errstr : "no memory");
        return 1;
    }
    windows = calloc(reloads ? reloads : 1, sizeof(*windows));
    memset(&p, 0, sizeof p);
    p.host = host;
    p.port = port;
    if (!windows || pthread_create(&th, NULL, ping_loop, &p) != 0)
        return 1;
    usleep(200000);
    if (idle > 0) {
        usleep((useconds_t)(idle * 1e6));
        idle_end = now_ns();
    }
    for (size_t i = 0; i < reloads; i++) {
        int flip = (int)((i + 1) % 2); /* the server started with variant 0 */
        redisReply *r;
        int64_t t0, t1;

        if (write_config(config, limits, mode == MODE_RENAMED && flip ? 'b' : 'a',
                         mode == MODE_CHANGED && flip ? 20 : 10) != 0)
            return 1;
        t0 = now_ns();
        r = redisCommand(c, "CONFIG RELOAD");
        t1 = now_ns();
        windows[i][0] = t0;
        windows[i][1] = t1;
        printf("reload n=%zu seconds=%.2f reply=%s\n", i + 1, (double)(t1 - t0) / 1e9,
               r ? r->str : "(none)");
        fflush(stdout);
        if (!r || r->type == REDIS_REPLY_ERROR)
            return 1;
        freeReplyObject(r);
        usleep(200000);
    }
    atomic_store(&p.stop, 1);
    pthread_join(th, NULL);
    redisFree(c);
    if (p.failed || p.n == 0)
        return 1;
    lat = malloc(p.n * sizeof(*lat));
    if (!lat)
        return 1;
    for (size_t k = 0; k < p.n; k++) {
        lat[k] = p.end_ns[k] - p.start_ns[k];
        if (lat[k] > max_ns)
            max_ns = lat[k];
    }
    for (size_t i = 0; i < reloads; i++) {
        int64_t wmax = 0;
        size_t during = 0;

        for (size_t k = 0; k < p.n; k++) {
            if (p.start_ns[k] < windows[i][1] && p.end_ns[k] > windows[i][0]) {
                during++;
                if (lat[k] > wmax)
                    wmax = lat[k];
            }
        }
        during_total += during;
        printf("reload n=%zu pings_during=%zu ping_max_ms=%.1f\n", i + 1, during,
               (double)wmax / 1e6);
    }
    if (idle_end) {
        int64_t imax = 0;

        for (size_t k = 0; k < p.n && p.end_ns[k] <= idle_end; k++)
            if (lat[k] > imax)
                imax = lat[k];
        printf("idle seconds=%.1f idle_max_ms=%.1f\n", idle, (double)imax / 1e6);
    }
    qsort(lat, p.n, sizeof(*lat), cmp_i64);
    printf("total reloads=%zu limits=%zu ping_max_ms=%.1f ping_p50_ms=%.3f ping_p99_ms=%.3f "
           "pings=%zu pings_during=%zu\n",
           reloads, limits, (double)max_ns / 1e6, (double)lat[p.n / 2] / 1e6,
           (double)lat[p.n * 99 / 100] / 1e6, p.n, during_total);
    free(lat);
    free(windows);
    free(p.start_ns);
    free(p.end_ns);
    return 0;
}
