/* SPDX-License-Identifier: MIT */
/*
 * bench_taskload: task throughput of a job server, put and reserve+delete, over the wire.
 *
 * N client threads, one connection each, drive one server in one of two protocols:
 *
 *   beanstalk  beanstalkd's text protocol over a socket written here:
 *              put: "put 0 0 60 <bytes>\r\n<data>\r\n" -> "INSERTED <id>"
 *              consume: "reserve-with-timeout 0" -> "RESERVED <id> <bytes>\r\n<data>\r\n"
 *              (or "TIMED_OUT": the queue is empty), then "delete <id>" -> "DELETED"
 *   resp       sluice's RESP over the same socket code as beanstalk (the requests built into
 *              one buffer and written at once, the replies read into one buffer and parsed in
 *              place): "TASK.ADD <type> <payload>" -> :id; "TASK.GET <type> COUNT 1" ->
 *              [[id, type, payload, ...]] (or [] when empty), then "TASK.ACK <id>" -> +OK
 *   resp-hiredis  the same over hiredis (redisAppendCommand, one reply object per reply)
 *
 * Both servers are driven by the same code path but for the bytes of the protocol: the client
 * costs the same CPU per request whichever server it measures, which matters on a machine
 * where client and server share the CPUs. (With hiredis the client spent more per reply than
 * the beanstalk one: a reply object allocated and freed for every reply and every element.)
 *
 * Two phases, each timed on its own: `put` (every client submits -n jobs) and `consume` (every
 * client takes and completes jobs until the server says the queue is empty). With pipelining
 * depth D (-P, default 1: plain request/response, as beanstalkd's usual clients do) a client
 * writes D requests at once and then reads their D replies; in `consume` it alternates D takes
 * with the deletes of what they returned, so depth 1 is take, wait, delete, wait.
 *
 * Every payload is the same number of bytes (-s, default 64) of JSON (sluice wants JSON; the
 * bytes are identical for beanstalkd) naming its client and sequence number:
 * {"c":3,"s":17,"p":"xxxx..."}. `consume` checks each payload it receives against a table of the
 * clients x jobs the put phase submitted: every job must come back exactly once, so a lost, a
 * duplicated or a corrupted job fails the run (exit status 1).
 *
 * Connections are opened before the clock starts; all threads then start together on a
 * barrier and the phase ends when the last one finishes (CLOCK_MONOTONIC). Each phase prints
 * one line of name=value words, e.g.
 *   taskload proto=resp phase=put clients=50 depth=1 size=64 jobs=10000 seconds=0.41
 *            ops_per_sec=24390 errors=0
 * and `consume` adds duplicates= and missing=.
 *
 * With several ports (--port P1,P2,P3: several sluice nodes sharing one store), client i
 * connects to the (i mod n)-th.
 *
 * Usage: bench_taskload --proto beanstalk|resp|resp-hiredis --port P[,P...] [--host 127.0.0.1] [-c
 * 50] [-n 200]
 *                       [-P 1] [-s 64] [--phase put|consume|both] [--type bench]
 */
#include <arpa/inet.h>
#include <errno.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define PROTO_BEANSTALK 0
#define PROTO_RESP      1 /* raw socket */
#define PROTO_HIREDIS   2 /* RESP over hiredis */
#define PHASE_PUT       1
#define PHASE_CONSUME   2
#define MIN_SIZE        48    /* room for the JSON frame around the largest numbers */
#define MAX_SIZE        65000 /* under beanstalkd's default job size limit (65535) */
#define READ_BUF        65536
#define ERR_LEN         200

typedef struct load_opts {
    int proto;        /* PROTO_BEANSTALK, PROTO_RESP or PROTO_HIREDIS */
    const char *host; /* IPv4 address of the server */
    int ports[16];    /* its port, or the ports of several nodes (client i: i mod nports) */
    unsigned nports;
    unsigned clients; /* client threads, one connection each */
    unsigned jobs;    /* jobs each client puts */
    unsigned depth;   /* requests written at once before reading their replies */
    size_t size;      /* payload bytes */
    const char *type; /* sluice task type */
    int phases;       /* PHASE_PUT | PHASE_CONSUME */
} load_opts;

/* A beanstalkd connection: the socket and what was read from it but not parsed yet. */
typedef struct bs_conn {
    int fd;            /* the connected socket */
    char in[READ_BUF]; /* bytes received, in[off..len) not consumed yet */
    size_t off;        /* first unconsumed byte */
    size_t len;        /* end of the received bytes */
    char *out;         /* requests being built for one write */
    size_t out_len;    /* bytes in out */
    size_t out_cap;    /* capacity of out */
} bs_conn;

/* One client thread. */
typedef struct client {
    const load_opts *o;       /* the run's options */
    int port;                 /* the port it connects to */
    unsigned index;           /* client number, written into its payloads */
    int phase;                /* PHASE_PUT or PHASE_CONSUME */
    bs_conn *bs;              /* the raw connection (PROTO_BEANSTALK, PROTO_RESP) */
    redisContext *rc;         /* the hiredis connection (PROTO_HIREDIS) */
    pthread_barrier_t *start; /* all clients and the timer start together */
    atomic_uchar *seen;       /* clients x jobs: set when a job is consumed */
    uint64_t ops;             /* jobs put or consumed */
    uint64_t duplicates;      /* jobs consumed a second time */
    char err[ERR_LEN];        /* the first error, "" if none */
} client;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Reads "P[,P...]" into o->ports. Returns 0, or -1 for a bad list. */
static int parse_ports(load_opts *o, const char *s)
{
    char *end;

    o->nports = 0;
    for (;;) {
        unsigned long v = strtoul(s, &end, 10);

        if (end == s || v < 1 || v > 65535 || o->nports == sizeof o->ports / sizeof o->ports[0])
            return -1;
        o->ports[o->nports++] = (int)v;
        if (*end == '\0')
            return 0;
        if (*end != ',')
            return -1;
        s = end + 1;
    }
}

static void fail(client *c, const char *what, const char *detail)
{
    if (c->err[0] == '\0')
        snprintf(c->err, sizeof c->err, "client %u: %s%s%s", c->index, what, detail ? ": " : "",
                 detail ? detail : "");
}

/* Writes the payload of job `seq` of client `cl`: exactly `size` bytes of JSON. */
static void payload_fill(char *buf, size_t size, unsigned cl, unsigned seq)
{
    int n = snprintf(buf, size, "{\"c\":%u,\"s\":%u,\"p\":\"", cl, seq);
    size_t head = (size_t)n;
    memset(buf + head, 'x', size - head - 2);
    buf[size - 2] = '"';
    buf[size - 1] = '}';
}

/* Reads back the client and sequence number of a payload; 0, or -1 if it is not one of ours. */
static int payload_parse(const char *buf, size_t len, const load_opts *o, unsigned *cl,
                         unsigned *seq)
{
    char tmp[MIN_SIZE + 1];
    unsigned a, b;
    if (len != o->size)
        return -1;
    memcpy(tmp, buf, MIN_SIZE);
    tmp[MIN_SIZE] = '\0';
    if (sscanf(tmp, "{\"c\":%u,\"s\":%u,", &a, &b) != 2 || a >= o->clients || b >= o->jobs ||
        buf[len - 1] != '}')
        return -1;
    *cl = a;
    *seq = b;
    return 0;
}

/* Marks one consumed payload in the table; a wrong payload or a second delivery is an error. */
static int consumed(client *c, const char *payload, size_t len)
{
    unsigned cl, seq;
    if (payload_parse(payload, len, c->o, &cl, &seq) != 0) {
        fail(c, "consumed a payload that was never put", NULL);
        return -1;
    }
    if (atomic_exchange(&c->seen[(size_t)cl * c->o->jobs + seq], 1)) {
        c->duplicates++;
        fail(c, "a job was consumed twice", NULL);
        return -1;
    }
    c->ops++;
    return 0;
}

/* ---- beanstalkd ---------------------------------------------------------------------------- */

static bs_conn *bs_connect(const load_opts *o, int port, char *err)
{
    struct sockaddr_in sa;
    int one = 1;
    bs_conn *b = calloc(1, sizeof *b);
    if (!b) {
        snprintf(err, ERR_LEN, "out of memory");
        return NULL;
    }
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, o->host, &sa.sin_addr) != 1) {
        snprintf(err, ERR_LEN, "bad IPv4 address %s", o->host);
        goto fail_addr;
    }
    b->fd = socket(AF_INET, SOCK_STREAM, 0);
    if (b->fd < 0 || connect(b->fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        snprintf(err, ERR_LEN, "connect %s:%d: %s", o->host, port, strerror(errno));
        goto fail_connect;
    }
    setsockopt(b->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    /* The longest request: a RESP TASK.ADD, its headers and the type name around the payload. */
    b->out_cap = (size_t)o->depth * (o->size + 96 + strlen(o->type));
    b->out = malloc(b->out_cap);
    if (!b->out) {
        snprintf(err, ERR_LEN, "out of memory");
        goto fail_connect;
    }
    return b;

fail_connect:
    if (b->fd >= 0)
        close(b->fd);
fail_addr:
    free(b);
    return NULL;
}

static void bs_free(bs_conn *b)
{
    if (!b)
        return;
    close(b->fd);
    free(b->out);
    free(b);
}

/* Appends one formatted request to the output buffer (sized for depth requests). */
static void bs_append(bs_conn *b, const char *data, size_t len)
{
    memcpy(b->out + b->out_len, data, len);
    b->out_len += len;
}

static int bs_flush(bs_conn *b)
{
    size_t done = 0;
    while (done < b->out_len) {
        ssize_t n = write(b->fd, b->out + done, b->out_len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        done += (size_t)n;
    }
    b->out_len = 0;
    return 0;
}

/* Reads more bytes, moving what is unconsumed to the front first. 0, or -1 on EOF/error. */
static int bs_fill(bs_conn *b)
{
    ssize_t n;
    if (b->off > 0) {
        memmove(b->in, b->in + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
    }
    if (b->len == sizeof b->in)
        return -1;
    do
        n = read(b->fd, b->in + b->len, sizeof b->in - b->len);
    while (n < 0 && errno == EINTR);
    if (n <= 0)
        return -1;
    b->len += (size_t)n;
    return 0;
}

/* Copies the next line, without its CRLF, into line (NUL-terminated). 0, or -1. */
static int bs_line(bs_conn *b, char *line, size_t cap)
{
    for (;;) {
        char *start = b->in + b->off;
        char *nl = memchr(start, '\n', b->len - b->off);
        if (nl) {
            size_t n = (size_t)(nl - start);
            if (n == 0 || start[n - 1] != '\r' || n > cap)
                return -1;
            memcpy(line, start, n - 1);
            line[n - 1] = '\0';
            b->off += n + 1;
            return 0;
        }
        if (bs_fill(b) != 0)
            return -1;
    }
}

/* Makes the next n bytes contiguous; returns them (valid until the next read), or NULL. */
static const char *bs_bytes(bs_conn *b, size_t n)
{
    while (b->len - b->off < n)
        if (bs_fill(b) != 0)
            return NULL;
    b->off += n;
    return b->in + b->off - n;
}

static void bs_put(client *c)
{
    const load_opts *o = c->o;
    bs_conn *b = c->bs;
    char line[128], head[64];
    int hlen = snprintf(head, sizeof head, "put 0 0 60 %zu\r\n", o->size);
    for (unsigned seq = 0; seq < o->jobs;) {
        unsigned k = o->jobs - seq < o->depth ? o->jobs - seq : o->depth;
        for (unsigned i = 0; i < k; i++) {
            bs_append(b, head, (size_t)hlen);
            payload_fill(b->out + b->out_len, o->size, c->index, seq + i);
            b->out_len += o->size;
            bs_append(b, "\r\n", 2);
        }
        if (bs_flush(b) != 0) {
            fail(c, "write", strerror(errno));
            return;
        }
        for (unsigned i = 0; i < k; i++) {
            uint64_t id;
            if (bs_line(b, line, sizeof line) != 0) {
                fail(c, "read", "connection lost or bad reply");
                return;
            }
            if (sscanf(line, "INSERTED %" SCNu64, &id) != 1) {
                fail(c, "put", line);
                return;
            }
            c->ops++;
        }
        seq += k;
    }
}

static void bs_consume(client *c)
{
    static const char reserve[] = "reserve-with-timeout 0\r\n";
    const load_opts *o = c->o;
    bs_conn *b = c->bs;
    uint64_t *ids = malloc(o->depth * sizeof *ids);
    char line[128];
    if (!ids) {
        fail(c, "out of memory", NULL);
        return;
    }
    for (int empty = 0; !empty;) {
        unsigned k = 0;
        for (unsigned i = 0; i < o->depth; i++)
            bs_append(b, reserve, sizeof reserve - 1);
        if (bs_flush(b) != 0) {
            fail(c, "write", strerror(errno));
            break;
        }
        for (unsigned i = 0; i < o->depth; i++) {
            uint64_t id;
            size_t len;
            const char *data;
            if (bs_line(b, line, sizeof line) != 0) {
                fail(c, "read", "connection lost or bad reply");
                goto out;
            }
            if (strcmp(line, "TIMED_OUT") == 0) {
                empty = 1;
                continue;
            }
            if (sscanf(line, "RESERVED %" SCNu64 " %zu", &id, &len) != 2) {
                fail(c, "reserve", line);
                goto out;
            }
            data = bs_bytes(b, len + 2);
            if (!data || data[len] != '\r' || data[len + 1] != '\n') {
                fail(c, "reserve", "bad job body");
                goto out;
            }
            if (consumed(c, data, len) != 0)
                goto out;
            ids[k++] = id;
        }
        for (unsigned i = 0; i < k; i++) {
            char del[64];
            int n = snprintf(del, sizeof del, "delete %" PRIu64 "\r\n", ids[i]);
            bs_append(b, del, (size_t)n);
        }
        if (k > 0 && bs_flush(b) != 0) {
            fail(c, "write", strerror(errno));
            break;
        }
        for (unsigned i = 0; i < k; i++) {
            if (bs_line(b, line, sizeof line) != 0) {
                fail(c, "read", "connection lost or bad reply");
                goto out;
            }
            if (strcmp(line, "DELETED") != 0) {
                fail(c, "delete", line);
                goto out;
            }
        }
    }
out:
    free(ids);
}

/* ---- sluice (RESP), raw socket ------------------------------------------------------------ */

/* Appends a RESP bulk string. */
static void rs_bulk(bs_conn *b, const char *p, size_t len)
{
    char head[32];
    int n = snprintf(head, sizeof head, "$%zu\r\n", len);
    bs_append(b, head, (size_t)n);
    bs_append(b, p, len);
    bs_append(b, "\r\n", 2);
}

/* Reads one RESP reply header line into line; its type is line[0]. 0, or -1. */
static int rs_line(client *c, char *line, size_t cap)
{
    if (bs_line(c->bs, line, cap) != 0 || line[0] == '\0') {
        fail(c, "read", "connection lost or bad reply");
        return -1;
    }
    return 0;
}

/* Skips one whole reply value whose header line is `line` (already read). 0, or -1. */
static int rs_skip(client *c, const char *line)
{
    char sub[128];
    long long n = strtoll(line + 1, NULL, 10);
    switch (line[0]) {
    case '+':
    case '-':
    case ':':
        return 0;
    case '$':
        if (n >= 0 && !bs_bytes(c->bs, (size_t)n + 2)) {
            fail(c, "read", "connection lost");
            return -1;
        }
        return 0;
    case '*':
        for (long long i = 0; i < n; i++)
            if (rs_line(c, sub, sizeof sub) != 0 || rs_skip(c, sub) != 0)
                return -1;
        return 0;
    default:
        fail(c, "read", "not a RESP reply");
        return -1;
    }
}

static void rs_put(client *c)
{
    const load_opts *o = c->o;
    bs_conn *b = c->bs;
    char line[128];
    size_t tlen = strlen(o->type);
    for (unsigned seq = 0; seq < o->jobs;) {
        unsigned k = o->jobs - seq < o->depth ? o->jobs - seq : o->depth;
        for (unsigned i = 0; i < k; i++) {
            char head[32];
            int n;
            bs_append(b, "*3\r\n$8\r\nTASK.ADD\r\n", 18);
            rs_bulk(b, o->type, tlen);
            n = snprintf(head, sizeof head, "$%zu\r\n", o->size);
            bs_append(b, head, (size_t)n);
            payload_fill(b->out + b->out_len, o->size, c->index, seq + i);
            b->out_len += o->size;
            bs_append(b, "\r\n", 2);
        }
        if (bs_flush(b) != 0) {
            fail(c, "write", strerror(errno));
            return;
        }
        for (unsigned i = 0; i < k; i++) {
            if (rs_line(c, line, sizeof line) != 0)
                return;
            if (line[0] != ':') {
                fail(c, "TASK.ADD", line);
                return;
            }
            c->ops++;
        }
        seq += k;
    }
}

/* Reads one TASK.GET reply: *id = 0 when the queue was empty, else the task's id after its
 * payload was checked. 0, or -1. */
static int rs_get_reply(client *c, long long *id)
{
    char line[128];
    long long n;
    size_t len;
    const char *data;
    *id = 0;
    if (rs_line(c, line, sizeof line) != 0)
        return -1;
    if (line[0] != '*') {
        fail(c, "TASK.GET", line);
        return -1;
    }
    n = strtoll(line + 1, NULL, 10);
    if (n <= 0)
        return 0; /* [] (or a null array): empty */
    if (n != 1) {
        fail(c, "TASK.GET", "more than one task for COUNT 1");
        return -1;
    }
    /* The task: [id, type, payload, ...]. */
    if (rs_line(c, line, sizeof line) != 0)
        return -1;
    n = strtoll(line + 1, NULL, 10);
    if (line[0] != '*' || n < 3) {
        fail(c, "TASK.GET", "unexpected reply");
        return -1;
    }
    if (rs_line(c, line, sizeof line) != 0)
        return -1;
    if (line[0] != ':') {
        fail(c, "TASK.GET", "unexpected reply");
        return -1;
    }
    *id = strtoll(line + 1, NULL, 10);
    if (rs_line(c, line, sizeof line) != 0 || rs_skip(c, line) != 0) /* the type */
        return -1;
    if (rs_line(c, line, sizeof line) != 0)
        return -1;
    if (line[0] != '$' || line[1] == '-') {
        fail(c, "TASK.GET", "unexpected reply");
        return -1;
    }
    len = (size_t)strtoull(line + 1, NULL, 10);
    data = bs_bytes(c->bs, len + 2);
    if (!data || data[len] != '\r' || data[len + 1] != '\n') {
        fail(c, "TASK.GET", "bad payload");
        return -1;
    }
    if (consumed(c, data, len) != 0) /* before the next read moves the buffer */
        return -1;
    for (long long i = 3; i < n; i++) /* the fields after the payload */
        if (rs_line(c, line, sizeof line) != 0 || rs_skip(c, line) != 0)
            return -1;
    return 0;
}

static void rs_consume(client *c)
{
    const load_opts *o = c->o;
    bs_conn *b = c->bs;
    long long *ids = malloc(o->depth * sizeof *ids);
    char line[128], get[128];
    int glen;
    if (!ids) {
        fail(c, "out of memory", NULL);
        return;
    }
    glen = snprintf(get, sizeof get,
                    "*4\r\n$8\r\nTASK.GET\r\n$%zu\r\n%s\r\n$5\r\nCOUNT\r\n$1\r\n1\r\n",
                    strlen(o->type), o->type);
    for (int empty = 0; !empty;) {
        unsigned k = 0;
        for (unsigned i = 0; i < o->depth; i++)
            bs_append(b, get, (size_t)glen);
        if (bs_flush(b) != 0) {
            fail(c, "write", strerror(errno));
            break;
        }
        for (unsigned i = 0; i < o->depth; i++) {
            long long id;
            if (rs_get_reply(c, &id) != 0)
                goto out;
            if (id == 0)
                empty = 1;
            else
                ids[k++] = id;
        }
        for (unsigned i = 0; i < k; i++) {
            char num[32];
            int n = snprintf(num, sizeof num, "%lld", ids[i]);
            bs_append(b, "*2\r\n$8\r\nTASK.ACK\r\n", 18);
            rs_bulk(b, num, (size_t)n);
        }
        if (k > 0 && bs_flush(b) != 0) {
            fail(c, "write", strerror(errno));
            break;
        }
        for (unsigned i = 0; i < k; i++) {
            if (rs_line(c, line, sizeof line) != 0)
                goto out;
            if (strcmp(line, "+OK") != 0) {
                fail(c, "TASK.ACK", line);
                goto out;
            }
        }
    }
out:
    free(ids);
}

/* ---- sluice (RESP), hiredis ---------------------------------------------------------------- */

/* Reads one reply; NULL (with the error noted) if the connection failed. Caller frees. */
static redisReply *resp_reply(client *c)
{
    void *r = NULL;
    if (redisGetReply(c->rc, &r) != REDIS_OK || !r) {
        fail(c, "read", c->rc->errstr);
        return NULL;
    }
    return r;
}

static void resp_put(client *c)
{
    const load_opts *o = c->o;
    char *payload = malloc(o->size);
    if (!payload) {
        fail(c, "out of memory", NULL);
        return;
    }
    for (unsigned seq = 0; seq < o->jobs;) {
        unsigned k = o->jobs - seq < o->depth ? o->jobs - seq : o->depth;
        for (unsigned i = 0; i < k; i++) {
            payload_fill(payload, o->size, c->index, seq + i);
            if (redisAppendCommand(c->rc, "TASK.ADD %s %b", o->type, payload, o->size) !=
                REDIS_OK) {
                fail(c, "out of memory", NULL);
                goto out;
            }
        }
        for (unsigned i = 0; i < k; i++) {
            redisReply *r = resp_reply(c);
            if (!r)
                goto out;
            if (r->type != REDIS_REPLY_INTEGER) {
                fail(c, "TASK.ADD", r->type == REDIS_REPLY_ERROR ? r->str : "not an integer");
                freeReplyObject(r);
                goto out;
            }
            freeReplyObject(r);
            c->ops++;
        }
        seq += k;
    }
out:
    free(payload);
}

static void resp_consume(client *c)
{
    const load_opts *o = c->o;
    long long *ids = malloc(o->depth * sizeof *ids);
    if (!ids) {
        fail(c, "out of memory", NULL);
        return;
    }
    for (int empty = 0; !empty;) {
        unsigned k = 0;
        for (unsigned i = 0; i < o->depth; i++)
            if (redisAppendCommand(c->rc, "TASK.GET %s COUNT 1", o->type) != REDIS_OK) {
                fail(c, "out of memory", NULL);
                goto out;
            }
        for (unsigned i = 0; i < o->depth; i++) {
            redisReply *r = resp_reply(c), *t;
            int bad;
            if (!r)
                goto out;
            if (r->type == REDIS_REPLY_ARRAY && r->elements == 0) {
                empty = 1;
                freeReplyObject(r);
                continue;
            }
            t = r->type == REDIS_REPLY_ARRAY && r->elements == 1 ? r->element[0] : NULL;
            bad = !t || t->type != REDIS_REPLY_ARRAY || t->elements < 3 ||
                  t->element[0]->type != REDIS_REPLY_INTEGER ||
                  t->element[2]->type != REDIS_REPLY_STRING;
            if (bad) {
                fail(c, "TASK.GET", r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
                freeReplyObject(r);
                goto out;
            }
            ids[k++] = t->element[0]->integer;
            bad = consumed(c, t->element[2]->str, t->element[2]->len) != 0;
            freeReplyObject(r);
            if (bad)
                goto out;
        }
        for (unsigned i = 0; i < k; i++)
            if (redisAppendCommand(c->rc, "TASK.ACK %lld", ids[i]) != REDIS_OK) {
                fail(c, "out of memory", NULL);
                goto out;
            }
        for (unsigned i = 0; i < k; i++) {
            redisReply *r = resp_reply(c);
            if (!r)
                goto out;
            if (r->type != REDIS_REPLY_STATUS || strcmp(r->str, "OK") != 0) {
                fail(c, "TASK.ACK", r->type == REDIS_REPLY_ERROR ? r->str : "not +OK");
                freeReplyObject(r);
                goto out;
            }
            freeReplyObject(r);
        }
    }
out:
    free(ids);
}

/* ---- the run ------------------------------------------------------------------------------- */

static void *client_main(void *arg)
{
    client *c = arg;
    pthread_barrier_wait(c->start);
    if (c->o->proto == PROTO_BEANSTALK) {
        if (c->phase == PHASE_PUT)
            bs_put(c);
        else
            bs_consume(c);
    } else if (c->o->proto == PROTO_RESP) {
        if (c->phase == PHASE_PUT)
            rs_put(c);
        else
            rs_consume(c);
    } else {
        if (c->phase == PHASE_PUT)
            resp_put(c);
        else
            resp_consume(c);
    }
    return NULL;
}

static int connect_client(client *c)
{
    const load_opts *o = c->o;
    if (o->proto != PROTO_HIREDIS) {
        c->bs = bs_connect(o, c->port, c->err);
        return c->bs ? 0 : -1;
    }
    c->rc = redisConnect(o->host, c->port);
    if (!c->rc || c->rc->err) {
        fail(c, "connect", c->rc ? c->rc->errstr : "out of memory");
        return -1;
    }
    return 0;
}

/* Runs one phase with every client; prints its line. 0 if every client finished cleanly. */
static int run_phase(const load_opts *o, int phase, atomic_uchar *seen)
{
    client *cl = calloc(o->clients, sizeof *cl);
    pthread_t *th = calloc(o->clients, sizeof *th);
    pthread_barrier_t start;
    uint64_t ops = 0, dups = 0, errors = 0, missing = 0;
    int64_t t0, t1;
    double secs;
    if (!cl || !th) {
        fprintf(stderr, "bench_taskload: out of memory\n");
        free(cl);
        free(th);
        return -1;
    }
    /* Every connection is opened before any thread starts, so the clock never times a connect
     * and a server that refuses one fails the phase before it begins. */
    for (unsigned i = 0; i < o->clients; i++) {
        cl[i] = (client){.o = o,
                         .port = o->ports[i % o->nports],
                         .index = i,
                         .phase = phase,
                         .start = &start,
                         .seen = seen};
        if (connect_client(&cl[i]) != 0) {
            fprintf(stderr, "bench_taskload: %s\n", cl[i].err);
            goto fail_connect;
        }
    }
    pthread_barrier_init(&start, NULL, o->clients + 1);
    for (unsigned i = 0; i < o->clients; i++)
        if (pthread_create(&th[i], NULL, client_main, &cl[i]) != 0) {
            fprintf(stderr, "bench_taskload: cannot start thread %u\n", i);
            exit(1); /* the barrier would never open */
        }
    pthread_barrier_wait(&start);
    t0 = now_ns();
    for (unsigned i = 0; i < o->clients; i++)
        pthread_join(th[i], NULL);
    t1 = now_ns();
    for (unsigned i = 0; i < o->clients; i++) {
        ops += cl[i].ops;
        dups += cl[i].duplicates;
        if (cl[i].err[0] != '\0') {
            errors++;
            fprintf(stderr, "bench_taskload: %s\n", cl[i].err);
        }
        bs_free(cl[i].bs);
        if (cl[i].rc)
            redisFree(cl[i].rc);
    }
    pthread_barrier_destroy(&start);
    free(cl);
    free(th);

    secs = (double)(t1 - t0) / 1e9;
    printf("taskload proto=%s phase=%s clients=%u depth=%u size=%zu jobs=%" PRIu64
           " seconds=%.4f ops_per_sec=%.0f errors=%" PRIu64,
           o->proto == PROTO_BEANSTALK ? "beanstalk"
           : o->proto == PROTO_RESP    ? "resp"
                                       : "resp-hiredis",
           phase == PHASE_PUT ? "put" : "consume", o->clients, o->depth, o->size, ops, secs,
           secs > 0 ? (double)ops / secs : 0.0, errors);
    if (phase == PHASE_CONSUME) {
        size_t total = (size_t)o->clients * o->jobs;
        for (size_t i = 0; i < total; i++)
            missing += atomic_load(&seen[i]) == 0;
        printf(" duplicates=%" PRIu64 " missing=%" PRIu64, dups, missing);
    }
    printf("\n");
    fflush(stdout);
    return errors == 0 && dups == 0 && missing == 0 ? 0 : -1;

fail_connect:
    for (unsigned i = 0; i < o->clients; i++) {
        bs_free(cl[i].bs);
        if (cl[i].rc)
            redisFree(cl[i].rc);
    }
    free(cl);
    free(th);
    return -1;
}

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: bench_taskload --proto beanstalk|resp|resp-hiredis --port P[,P...] [options]\n"
            "  --host ADDR      IPv4 address of the server (default 127.0.0.1)\n"
            "  -c N             client threads, one connection each (default 50)\n"
            "  -n N             jobs each client puts (default 200)\n"
            "  -P N             requests written before reading replies (default 1)\n"
            "  -s BYTES         payload size (default 64)\n"
            "  --phase PHASE    put, consume or both (default both)\n"
            "  --type NAME      sluice task type (default bench)\n"
            "`consume` expects exactly the jobs `put` made with the same -c, -n and -s.\n");
}

static unsigned long num_arg(const char *name, const char *s, unsigned long min, unsigned long max)
{
    char *end;
    unsigned long v;
    errno = 0;
    v = strtoul(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < min || v > max) {
        fprintf(stderr, "bench_taskload: %s wants an integer in %lu..%lu, not '%s'\n", name, min,
                max, s);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    load_opts o = {.proto = -1,
                   .host = "127.0.0.1",
                   .clients = 50,
                   .jobs = 200,
                   .depth = 1,
                   .size = 64,
                   .type = "bench",
                   .phases = PHASE_PUT | PHASE_CONSUME};
    atomic_uchar *seen;
    int rc = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        }
        if (!v) {
            usage(stderr);
            return 2;
        }
        i++;
        if (strcmp(a, "--proto") == 0 && strcmp(v, "beanstalk") == 0)
            o.proto = PROTO_BEANSTALK;
        else if (strcmp(a, "--proto") == 0 && strcmp(v, "resp") == 0)
            o.proto = PROTO_RESP;
        else if (strcmp(a, "--proto") == 0 && strcmp(v, "resp-hiredis") == 0)
            o.proto = PROTO_HIREDIS;
        else if (strcmp(a, "--host") == 0)
            o.host = v;
        else if (strcmp(a, "--port") == 0) {
            if (parse_ports(&o, v) != 0) {
                fprintf(stderr,
                        "bench_taskload: --port wants P or P1,P2,... (at most 16), not '%s'\n", v);
                return 2;
            }
        } else if (strcmp(a, "-c") == 0)
            o.clients = (unsigned)num_arg(a, v, 1, 10000);
        else if (strcmp(a, "-n") == 0)
            o.jobs = (unsigned)num_arg(a, v, 1, 100000000);
        else if (strcmp(a, "-P") == 0)
            o.depth = (unsigned)num_arg(a, v, 1, 1000);
        else if (strcmp(a, "-s") == 0)
            o.size = num_arg(a, v, MIN_SIZE, MAX_SIZE);
        else if (strcmp(a, "--phase") == 0 && strcmp(v, "put") == 0)
            o.phases = PHASE_PUT;
        else if (strcmp(a, "--phase") == 0 && strcmp(v, "consume") == 0)
            o.phases = PHASE_CONSUME;
        else if (strcmp(a, "--phase") == 0 && strcmp(v, "both") == 0)
            o.phases = PHASE_PUT | PHASE_CONSUME;
        else if (strcmp(a, "--type") == 0)
            o.type = v;
        else {
            fprintf(stderr, "bench_taskload: bad option %s %s\n", a, v);
            usage(stderr);
            return 2;
        }
    }
    if (o.proto < 0 || o.nports == 0) {
        usage(stderr);
        return 2;
    }
    seen = calloc((size_t)o.clients * o.jobs, sizeof *seen);
    if (!seen) {
        fprintf(stderr, "bench_taskload: out of memory\n");
        return 1;
    }
    if ((o.phases & PHASE_PUT) && run_phase(&o, PHASE_PUT, seen) != 0)
        rc = 1;
    if (rc == 0 && (o.phases & PHASE_CONSUME) && run_phase(&o, PHASE_CONSUME, seen) != 0)
        rc = 1;
    free(seen);
    return rc;
}
