/* SPDX-License-Identifier: MIT */
/*
 * `sluice top`: the numbers of a running server in a terminal, refreshed every second, like
 * `redis-cli --stat` or htop, for servers without a browser.
 *
 * Where the numbers come from: the admin port's JSON (the same documents the dashboard reads),
 * over a tiny HTTP/1.1 client written here: one GET per request on a fresh TCP connection
 * ("Connection: close"), the body read to the end, chunked transfer decoded when used. The admin
 * port was chosen over the RESP port's INFO because /api/stats is one snapshot of exactly these
 * figures, already per limit, and needs no RESP client in this command. /api/stats is read every
 * refresh; /api/limits (each limit's rule) at start and every ten seconds.
 *
 * Rates (allowed/s, denied/s, commands/s, done/s) are the differences of two consecutive
 * snapshots divided by the time between them on the server's clock (time_ms), so a slow refresh
 * does not distort them. With --once, one snapshot is printed with its totals and no rates.
 */
#include "cli/top.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <netdb.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/time.h>

#include "base/alloc.h"

#define EXIT_USAGE    2
#define MAX_RESPONSE  ((size_t)64 << 20)
#define IO_TIMEOUT_S  5
#define META_EVERY_MS 10000
#define NAME_WIDTH    22
#define RULE_WIDTH    26

static const char usage_text[] =
    "Usage: sluice top [OPTIONS]\n"
    "\n"
    "Shows a running server's numbers, refreshed every second: tasks by state, and per limit\n"
    "the decisions allowed and denied per second, parked tasks and tracked keys. Reads the\n"
    "admin port's /api/stats and /api/limits (sluice serve --admin-port). Ctrl-C quits.\n"
    "\n"
    "Options:\n"
    "      --host HOST       the admin port's host (default 127.0.0.1)\n"
    "  -p, --port N          the admin port (default 7380)\n"
    "  -a, --password PASS   the server's password (also SLUICE_PASSWORD)\n"
    "  -i, --interval SECS   seconds between refreshes, 0.1 to 3600 (default 1)\n"
    "      --once            print one snapshot (totals, no rates) and exit\n"
    "  -h, --help            show this help\n"
    "\n"
    "Exit status: 0 stopped, 1 the admin port cannot be read, 2 bad usage.\n";

enum { OPT_HOST = 256, OPT_ONCE };

static const struct option long_options[] = {
    {"host", required_argument, NULL, OPT_HOST},
    {"port", required_argument, NULL, 'p'},
    {"password", required_argument, NULL, 'a'},
    {"interval", required_argument, NULL, 'i'},
    {"once", no_argument, NULL, OPT_ONCE},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

typedef struct top_options {
    const char *host;
    int port;
    const char *password;
    double interval_s;
    int once;
} top_options;

/* ---- A tiny HTTP/1.1 GET client -------------------------------------------------------------
 */

typedef struct http_reply {
    int status;
    char *body; /* NUL-terminated, owned (alloc_free) */
    size_t len;
} http_reply;

/* Connects to host:port with send and receive timeouts. Returns the socket or -1 (errno set). */
static int dial(const char *host, int port)
{
    struct addrinfo hints, *res = NULL, *ai;
    struct timeval tv = {IO_TIMEOUT_S, 0};
    char service[16];
    int fd = -1, err = ECONNREFUSED;

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(service, sizeof(service), "%d", port);
    if (getaddrinfo(host, service, &hints, &res) != 0) {
        errno = EHOSTUNREACH;
        return -1;
    }
    for (ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0)
            continue;
        /* Linux bounds a blocking connect with the send timeout. */
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
            break;
        err = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        errno = err;
    return fd;
}

static int send_all(int fd, const char *p, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Reads until the peer closes. Returns 0 with *out (NUL-terminated, owned) or -1. */
static int read_all(int fd, char **out, size_t *outlen)
{
    size_t len = 0, cap = 16384;
    char *buf = alloc_malloc(cap);

    if (!buf)
        return -1;
    for (;;) {
        ssize_t n;

        if (cap - len < 4096) {
            char *p = cap >= MAX_RESPONSE ? NULL : alloc_realloc(buf, cap * 2);

            if (!p) {
                alloc_free(buf);
                errno = EMSGSIZE;
                return -1;
            }
            buf = p;
            cap *= 2;
        }
        n = recv(fd, buf + len, cap - len - 1, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            alloc_free(buf);
            return -1;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    *out = buf;
    *outlen = len;
    return 0;
}

/* Decodes a chunked body in place. Returns its length, or -1 when malformed. */
static long dechunk(char *p, size_t len)
{
    size_t in = 0, out = 0;

    for (;;) {
        char *end;
        unsigned long n;

        if (in >= len)
            return -1;
        n = strtoul(p + in, &end, 16);
        end = strstr(end, "\r\n");
        if (!end)
            return -1;
        in = (size_t)(end - p) + 2;
        if (n == 0)
            return (long)out;
        if (n > len - in)
            return -1;
        memmove(p + out, p + in, n);
        out += n;
        in += n + 2;
    }
}

/* Finds a header's value in the header block (case-insensitive name). NULL when absent. */
static const char *header(const char *head, const char *name)
{
    size_t n = strlen(name);

    for (const char *l = strstr(head, "\r\n"); l; l = strstr(l + 2, "\r\n")) {
        const char *v = l + 2;

        if (strncasecmp(v, name, n) == 0 && v[n] == ':') {
            v += n + 1;
            while (*v == ' ')
                v++;
            return v;
        }
        if (v[0] == '\r')
            break;
    }
    return NULL;
}

/* GETs path. Returns 0 with *r filled (free r->body), or -1 with a message in err. */
static int http_get(const top_options *o, const char *path, http_reply *r, char *err, size_t errlen)
{
    char req[2048], *raw = NULL, *body;
    const char *te, *cl;
    size_t rawlen = 0;
    int fd, n;

    memset(r, 0, sizeof(*r));
    n = snprintf(req, sizeof(req),
                 "GET %s HTTP/1.1\r\nHost: %s:%d\r\nUser-Agent: sluice-top\r\n"
                 "Accept: application/json\r\nConnection: close\r\n%s%s%s\r\n",
                 path, o->host, o->port, o->password ? "Authorization: Bearer " : "",
                 o->password ? o->password : "", o->password ? "\r\n" : "");
    if (n < 0 || (size_t)n >= sizeof(req)) {
        snprintf(err, errlen, "the request is too long");
        return -1;
    }
    fd = dial(o->host, o->port);
    if (fd < 0) {
        snprintf(err, errlen, "cannot connect to %s:%d: %s", o->host, o->port, strerror(errno));
        return -1;
    }
    if (send_all(fd, req, (size_t)n) != 0 || read_all(fd, &raw, &rawlen) != 0) {
        snprintf(err, errlen, "%s:%d: %s", o->host, o->port, strerror(errno));
        close(fd);
        return -1;
    }
    close(fd);
    body = strstr(raw, "\r\n\r\n");
    if (strncmp(raw, "HTTP/1.", 7) != 0 || !body || sscanf(raw + 8, " %d", &r->status) != 1) {
        snprintf(err, errlen, "%s:%d does not answer HTTP (is it the admin port?)", o->host,
                 o->port);
        alloc_free(raw);
        return -1;
    }
    body[2] = '\0'; /* ends the header block after its last line's CRLF */
    body += 4;
    r->len = rawlen - (size_t)(body - raw);
    te = header(raw, "Transfer-Encoding");
    cl = header(raw, "Content-Length");
    if (te && strncasecmp(te, "chunked", 7) == 0) {
        long m = dechunk(body, r->len);

        if (m < 0) {
            snprintf(err, errlen, "a malformed chunked reply from %s:%d", o->host, o->port);
            alloc_free(raw);
            return -1;
        }
        r->len = (size_t)m;
    } else if (cl) {
        unsigned long long m = strtoull(cl, NULL, 10);

        if (m < r->len)
            r->len = (size_t)m;
    }
    memmove(raw, body, r->len);
    raw[r->len] = '\0';
    r->body = raw;
    return 0;
}

/* GETs path and parses its JSON. Returns the document (json_decref it) or NULL with err. A 401
 * sets *unauthorized. */
static json_t *get_json(const top_options *o, const char *path, int *unauthorized, char *err,
                        size_t errlen)
{
    http_reply r;
    json_t *doc;

    if (http_get(o, path, &r, err, errlen) != 0)
        return NULL;
    if (r.status == 401) {
        *unauthorized = 1;
        snprintf(err, errlen, "the admin port wants the server's password (--password)");
        alloc_free(r.body);
        return NULL;
    }
    if (r.status != 200) {
        json_t *e = json_loadb(r.body, r.len, 0, NULL);
        const char *m = json_string_value(json_object_get(e, "message"));

        snprintf(err, errlen, "GET %s: HTTP %d%s%s", path, r.status, m ? ": " : "", m ? m : "");
        json_decref(e);
        alloc_free(r.body);
        return NULL;
    }
    doc = json_loadb(r.body, r.len, 0, NULL);
    alloc_free(r.body);
    if (!doc)
        snprintf(err, errlen, "GET %s: not JSON", path);
    return doc;
}

/* ---- The view ---------------------------------------------------------------------------- */

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

static double num(const json_t *o, const char *key)
{
    return json_number_value(json_object_get(o, key));
}

/* A string member, or dflt. */
static const char *str(const json_t *o, const char *key, const char *dflt)
{
    const char *v = json_string_value(json_object_get(o, key));

    return v ? v : dflt;
}

/* A field of the same limit in the previous snapshot, or -1 when absent. */
static double prev_field(const json_t *prev, const char *name, const char *key)
{
    size_t i;
    json_t *l;

    json_array_foreach(json_object_get(prev, "limits"), i, l)
    {
        if (strcmp(str(l, "name", ""), name) == 0)
            return num(l, key);
    }
    return -1;
}

/* Formats a count with thousands separators into buf. */
static const char *count(double v, char *buf, size_t len)
{
    char digits[32];
    size_t n, o = 0;

    snprintf(digits, sizeof(digits), "%.0f", v < 0 ? 0 : v);
    n = strlen(digits);
    for (size_t i = 0; i < n && o + 2 < len; i++) {
        if (i > 0 && (n - i) % 3 == 0)
            buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[o] = '\0';
    return buf;
}

/* Formats a rate (per second), or "-" when unknown. */
static const char *rate(double now, double before, double dt, char *buf, size_t len)
{
    double r;

    if (dt <= 0 || before < 0 || now < before) {
        snprintf(buf, len, "-");
        return buf;
    }
    r = (now - before) / dt;
    if (r >= 100)
        snprintf(buf, len, "%.0f", r);
    else
        snprintf(buf, len, "%.1f", r);
    return buf;
}

static const char *rule_of(const json_t *meta, const char *name)
{
    size_t i;
    json_t *l;

    json_array_foreach(json_object_get(meta, "limits"), i, l)
    {
        if (strcmp(str(l, "name", ""), name) == 0)
            return json_string_value(json_object_get(l, "spec"));
    }
    return NULL;
}

typedef struct row {
    const json_t *l;
    double allowed_s, denied_s; /* -1 when unknown */
} row;

static int by_activity(const void *a, const void *b)
{
    const row *x = a, *y = b;

    if (x->denied_s != y->denied_s)
        return x->denied_s < y->denied_s ? 1 : -1;
    if (x->allowed_s != y->allowed_s)
        return x->allowed_s < y->allowed_s ? 1 : -1;
    return strcmp(str(x->l, "name", ""), str(y->l, "name", ""));
}

/* Rows the terminal has room for (0: no limit, not a terminal). */
static size_t screen_rows(void)
{
    struct winsize ws;

    if (!isatty(STDOUT_FILENO) || ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) != 0 || ws.ws_row == 0)
        return 0;
    return ws.ws_row;
}

static void print_header(const top_options *o, const json_t *st, const json_t *prev, double dt)
{
    const json_t *t = json_object_get(st, "tasks"), *pt = json_object_get(prev, "tasks");
    char a[32], b[32], c[32], d[32], e[32], f[32], g[32], h[32];
    long long up = (long long)num(st, "uptime_s");
    time_t now = (time_t)(num(st, "time_ms") / 1000);
    struct tm tm;
    char clock[16];

    gmtime_r(&now, &tm);
    strftime(clock, sizeof(clock), "%H:%M:%S", &tm);
    printf(
        "sluice top - %s:%d - up %lldh%02lldm - %s clients - %s commands/s - %s UTC\n", o->host,
        o->port, up / 3600, (up % 3600) / 60, count(num(st, "clients"), a, sizeof(a)),
        rate(num(st, "commands_total"), prev ? num(prev, "commands_total") : -1, dt, b, sizeof(b)),
        clock);
    printf("tasks: queued %s  parked %s  running %s  done %s (%s/s)  failed %s (%s/s)  "
           "cancelled %s\n\n",
           count(num(t, "queued"), a, sizeof(a)), count(num(t, "parked"), b, sizeof(b)),
           count(num(t, "running"), c, sizeof(c)), count(num(t, "done"), d, sizeof(d)),
           rate(num(t, "done"), pt ? num(pt, "done") : -1, dt, e, sizeof(e)),
           count(num(t, "failed"), f, sizeof(f)),
           rate(num(t, "failed"), pt ? num(pt, "failed") : -1, dt, g, sizeof(g)),
           count(num(t, "cancelled"), h, sizeof(h)));
}

/* Prints one frame. prev may be NULL (no rates). */
static void print_frame(const top_options *o, const json_t *st, const json_t *prev,
                        const json_t *meta)
{
    const json_t *limits = json_object_get(st, "limits");
    double dt = prev ? (num(st, "time_ms") - num(prev, "time_ms")) / 1000 : 0;
    size_t n = json_array_size(limits), rows = screen_rows(), shown;
    row *v = n ? alloc_calloc(n, sizeof(*v)) : NULL;

    print_header(o, st, prev, dt);
    printf("%-*s %-11s %-*s %9s %9s %8s %9s %12s %12s\n", NAME_WIDTH, "LIMIT", "KIND", RULE_WIDTH,
           "RULE", "ALLOWED/s", "DENIED/s", "PARKED", "KEYS", "ALLOWED", "DENIED");
    if (n > 0 && !v) {
        printf("(out of memory)\n");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *l = json_array_get(limits, i);
        const char *name = str(l, "name", "?");

        v[i].l = l;
        v[i].allowed_s = v[i].denied_s = -1;
        if (prev && dt > 0) {
            double pa = prev_field(prev, name, "allowed_total");
            double pd = prev_field(prev, name, "denied_total");

            if (pa >= 0 && num(l, "allowed_total") >= pa)
                v[i].allowed_s = (num(l, "allowed_total") - pa) / dt;
            if (pd >= 0 && num(l, "denied_total") >= pd)
                v[i].denied_s = (num(l, "denied_total") - pd) / dt;
        }
    }
    qsort(v, n, sizeof(*v), by_activity);
    shown = rows > 6 && n > rows - 6 ? rows - 6 : n;
    for (size_t i = 0; i < shown; i++) {
        const json_t *l = v[i].l;
        const char *name = str(l, "name", "?");
        const char *rule = rule_of(meta, name);
        char a[32], b[32], c[32], d[32], e[32], f[32];

        if (v[i].allowed_s < 0)
            snprintf(a, sizeof(a), "-");
        else
            snprintf(a, sizeof(a), v[i].allowed_s >= 100 ? "%.0f" : "%.1f", v[i].allowed_s);
        if (v[i].denied_s < 0)
            snprintf(b, sizeof(b), "-");
        else
            snprintf(b, sizeof(b), v[i].denied_s >= 100 ? "%.0f" : "%.1f", v[i].denied_s);
        printf("%-*.*s %-11.11s %-*.*s %9s %9s %8s %9s %12s %12s\n", NAME_WIDTH, NAME_WIDTH, name,
               str(l, "kind", "?"), RULE_WIDTH, RULE_WIDTH, rule ? rule : "", a, b,
               count(num(l, "parked"), c, sizeof(c)), count(num(l, "keys"), d, sizeof(d)),
               count(num(l, "allowed_total"), e, sizeof(e)),
               count(num(l, "denied_total"), f, sizeof(f)));
    }
    if (shown < n)
        printf("... %zu more limits (a taller terminal shows them)\n", n - shown);
    if (n == 0)
        printf("(no limits)\n");
    alloc_free(v);
}

static int parse_options(int argc, char **argv, top_options *o)
{
    int c;

    memset(o, 0, sizeof(*o));
    o->host = "127.0.0.1";
    o->port = 7380;
    o->interval_s = 1;
    o->password = getenv("SLUICE_PASSWORD");
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":p:a:i:h", long_options, NULL)) != -1) {
        char *end;

        switch (c) {
        case OPT_HOST:
            o->host = optarg;
            break;
        case 'p': {
            long v = strtol(optarg, &end, 10);

            if (*end || end == optarg || v < 1 || v > 65535) {
                fprintf(stderr, "sluice top: bad --port \"%s\": expected 1 to 65535\n", optarg);
                return EXIT_USAGE;
            }
            o->port = (int)v;
            break;
        }
        case 'a':
            o->password = optarg[0] ? optarg : NULL;
            break;
        case 'i':
            o->interval_s = strtod(optarg, &end);
            if (*end || end == optarg || !(o->interval_s >= 0.1 && o->interval_s <= 3600)) {
                fprintf(stderr, "sluice top: bad --interval \"%s\": expected 0.1 to 3600\n",
                        optarg);
                return EXIT_USAGE;
            }
            break;
        case OPT_ONCE:
            o->once = 1;
            break;
        case 'h':
            fputs(usage_text, stdout);
            return 0;
        case ':':
            fprintf(stderr, "sluice top: option %s needs a value; see sluice top --help\n",
                    argv[optind - 1]);
            return EXIT_USAGE;
        default:
            fprintf(stderr, "sluice top: unknown option %s; see sluice top --help\n",
                    argv[optind - 1]);
            return EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "sluice top: unexpected argument \"%s\"; see sluice top --help\n",
                argv[optind]);
        return EXIT_USAGE;
    }
    return -1;
}

static void sleep_s(double s)
{
    struct timespec ts;

    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    while (!stop_requested && nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

int top_main(int argc, char **argv)
{
    top_options o;
    json_t *prev = NULL, *meta = NULL;
    int status = parse_options(argc, argv, &o), unauthorized = 0, tty;
    int64_t meta_at = 0;
    char err[512];

    if (status >= 0)
        return status;
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGPIPE, SIG_IGN);
    tty = isatty(STDOUT_FILENO);
    status = 0;
    while (!stop_requested) {
        json_t *st = get_json(&o, "/api/stats", &unauthorized, err, sizeof(err));
        int64_t now_ms;

        if (!st) {
            if (o.once || unauthorized) {
                fprintf(stderr, "sluice top: %s\n", err);
                status = 1;
                break;
            }
            if (tty)
                printf("\033[H\033[2J");
            printf("sluice top - %s (retrying)\n", err);
            fflush(stdout);
            json_decref(prev);
            prev = NULL;
            sleep_s(o.interval_s);
            continue;
        }
        now_ms = (int64_t)num(st, "time_ms");
        if (!meta || now_ms - meta_at >= META_EVERY_MS) {
            json_t *m = get_json(&o, "/api/limits", &unauthorized, err, sizeof(err));

            if (m) {
                json_decref(meta);
                meta = m;
                meta_at = now_ms;
            }
        }
        if (tty && !o.once)
            printf("\033[H\033[2J");
        print_frame(&o, st, prev, meta);
        fflush(stdout);
        json_decref(prev);
        prev = st;
        if (o.once)
            break;
        sleep_s(o.interval_s);
    }
    json_decref(prev);
    json_decref(meta);
    return status;
}
