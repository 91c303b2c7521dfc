/* SPDX-License-Identifier: MIT */
/*
 * `sluice serve`: command-line flags to server options, then the server's life.
 *
 * Every limit on what a client may send or be sent is a flag with a safe default (see
 * server.h). The configuration file's `server:` section is not read: the file describes the
 * engine, its limits and types; the network side is configured here.
 */
#include "cli/serve.h"

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_store.h"
#include "base/alloc.h"
#include "server/admin/admin.h"
#include "server/log.h"
#include "server/memory.h"
#include "server/server.h"

#define EXIT_USAGE 2

static const char usage_text[] =
    "Usage: sluice serve [OPTIONS]\n"
    "\n"
    "Runs the sluice server: RESP (the Redis protocol) on ADDR:PORT, so redis-cli and Redis\n"
    "client libraries talk to it. Stops gracefully on SIGTERM or SIGINT.\n"
    "\n"
    "Options:\n"
    "  -c, --config FILE         limits and task types (YAML); CONFIG RELOAD re-reads it\n"
    "  -b, --bind ADDR           address to listen on (default 127.0.0.1)\n"
    "  -p, --port N              port (default 7379; 0 = any free port)\n"
    "      --port-file FILE      write the port bound to FILE once listening\n"
    "      --requirepass PASS    clients must AUTH with PASS\n"
    "      --requirepass-file F  read the password from the first line of F\n"
    "      --protected-mode yes|no  without a password, accept loopback clients only (yes)\n"
    "      --log-level LEVEL     debug, info, warn or error (default info)\n"
    "\n"
    "Admin port (HTTP: /metrics, /api/..., the dashboard at /; see docs/admin.md):\n"
    "      --admin-port N        port (default 7380; 0 = any free port)\n"
    "      --admin-bind ADDR     address to listen on (default 127.0.0.1)\n"
    "      --admin-port-file F   write the admin port bound to F once listening\n"
    "      --no-admin            no admin port\n"
    "\n"
    "Durability (see docs/durability.md):\n"
    "      --data DIR            the store's directory (default ./data)\n"
    "      --durability MODE     always (a change is answered once fsynced), batch (fsync every\n"
    "                            --batch-ms: a crash may lose that much) or none (memory only);\n"
    "                            default always\n"
    "      --batch-ms N          fsync interval of batch, 1 to 60000 ms (default 100)\n"
    "      --enable-debug-commands  allow DEBUG (fault injection into the store: tests only)\n"
    "\n"
    "Several nodes (see docs/cluster.md; also the store: section of the config file):\n"
    "      --store URL           redis://[[USER]:PASSWORD@]HOST[:PORT][/DB] (PASSWORD: Redis's\n"
    "                            AUTH, %XX for reserved characters; never shown in INFO or the\n"
    "                            log): THROTTLE, CL.THROTTLE and LEASE.* of\n"
    "                            every node given the same URL charge one budget kept in that\n"
    "                            Redis, decided in Redis's clock, and the nodes share one task\n"
    "                            queue there (TASK.ADD, GET, ACK, FAIL, TOUCH, CANCEL, INFO,\n"
    "                            EXPLAIN)\n"
    "                            and its recurring series (RECUR.*: each point fires once,\n"
    "                            on whichever node gets there first). LIMIT.SET/DEL/KEY/KEYDEL\n"
    "                            and LIMIT.RESET on one node reach every node (within about\n"
    "                            100 ms); shadow mode, LIMIT.RATE/SPEND/BACKOFF, the caps,\n"
    "                            group slots (TASK.ADD ... LEASE) and the HTTP /v1 API act\n"
    "                            across nodes; INFO, /metrics and the dashboard show the\n"
    "                            counters of every node summed.\n"
    "                            Adaptive rates and fairness: keys are shared on Redis and\n"
    "                            Redis Cluster (refused on PostgreSQL).\n"
    "                            Nothing is kept on disk then (--data does not apply)\n"
    "      --store redis-cluster://HOST[:PORT],HOST[:PORT],...  a Redis Cluster (the seeds:\n"
    "                            the rest is read with CLUSTER SLOTS): all of the above, each\n"
    "                            key decided by its slot's master, MOVED and ASK followed. The\n"
    "                            task queue, the series and every limit a task type names live\n"
    "                            in the slot of {all} (one master); the other limits' keys\n"
    "                            spread over the masters (LIMIT.RESET of every key of such a\n"
    "                            limit reaches the other nodes at their next poll, ~100 ms)\n"
    "      --store postgresql://[USER@]HOST[:PORT]/DB  (or libpq's \"host=... dbname=...\")\n"
    "                            everything the redis store shares, kept in PostgreSQL and\n"
    "                            decided in its clock (changes reach other nodes at once, by\n"
    "                            NOTIFY); sluice creates and migrates its schema.\n"
    "                            Not shared there yet: adaptive rates, fairness: keys\n"
    "      --store-failure MODE  when the store is down or late: closed (answer -STOREDOWN, the\n"
    "                            default) or open (grant, counted in INFO and /metrics)\n"
    "      --store-timeout MS    how long a decision waits for the store (default 1000)\n"
    "      --store-replicas N    Redis: TASK.ADD, ACK, FAIL and CANCEL are answered only once\n"
    "                            WAIT confirms N replicas have the write; fewer within the\n"
    "                            timeout answers -NOTREPLICATED (default 0: no WAIT). THROTTLE\n"
    "                            and LEASE.* send no WAIT, but share the connection: one that\n"
    "                            waits delays them. (PostgreSQL: use synchronous_standby_names)\n"
    "      --store-replicas-timeout MS  WAIT's timeout, below --store-timeout (default half\n"
    "                            of it)\n"
    "      --store-connections N PostgreSQL: connections per node (1 to 64, default 1): calls\n"
    "                            on several run at once (a client's commands still run and\n"
    "                            answer in order); worth it only when PostgreSQL has idle\n"
    "                            CPUs (docs/postgres-store.md, \"Several connections\")\n"
    "      --store-audit         the store keeps every grant (Redis: audit lists; PostgreSQL:\n"
    "                            the table sluice_limit_audit): tests and debugging, it grows\n"
    "                            without bound\n"
    "\n"
    "Limits (BYTES may end in k, m or g):\n"
    "      --maxmemory BYTES     memory budget for everything clients can make the server hold\n"
    "                            (keys, limits, parameter sets, tasks, replies); past it new\n"
    "                            state is refused with -OOM. Suffixes kb/mb/gb (powers of 1024);\n"
    "                            0 = no limit; default half the machine's (or cgroup's) memory;\n"
    "                            overrides the configuration file's maxmemory:\n"
    "      --max-clients N       connections at once (default 10000)\n"
    "      --timeout SECONDS     close a client idle this long, never a blocked one (default 0:\n"
    "                            never)\n"
    "      --auth-timeout SECONDS  with a password, close a client not authenticated by then\n"
    "                            (default 10; 0: never)\n"
    "      --auth-reserve N      with a password, slots of --max-clients kept for authenticated\n"
    "                            clients (default 16)\n"
    "      --max-bulk-len BYTES  one argument (default 8m)\n"
    "      --max-args N          arguments of one command (default 1024)\n"
    "      --max-inline-len BYTES  one inline (telnet) command (default 64k)\n"
    "      --max-query-len BYTES   one command, all arguments (default 16m)\n"
    "      --max-key-len BYTES   a rate-limit key (default 1024)\n"
    "      --max-payload-len BYTES  a task payload (default 1m)\n"
    "      --max-output BYTES    replies queued for one client before it is cut (default 64m)\n"
    "      --max-cell-limits N   CL.THROTTLE parameter sets kept (default 1024)\n"
    "      --shutdown-timeout MS  time given to clients to drain on SIGTERM (default 5000)\n"
    "  -h, --help                show this help\n"
    "\n"
    "Before AUTH a client may send at most 10 arguments of 16 KiB each.\n"
    "Exit status: 0 stopped by a signal, 1 could not start, 2 bad usage.\n";

enum {
    OPT_PORT_FILE = 256,
    OPT_REQUIREPASS,
    OPT_REQUIREPASS_FILE,
    OPT_PROTECTED,
    OPT_LOG_LEVEL,
    OPT_MAX_CLIENTS,
    OPT_MAX_BULK,
    OPT_MAX_ARGS,
    OPT_MAX_INLINE,
    OPT_MAX_QUERY,
    OPT_MAX_KEY,
    OPT_MAX_PAYLOAD,
    OPT_MAX_OUTPUT,
    OPT_MAX_CELL,
    OPT_SHUTDOWN,
    OPT_ADMIN_PORT,
    OPT_ADMIN_BIND,
    OPT_ADMIN_PORT_FILE,
    OPT_NO_ADMIN,
    OPT_DATA,
    OPT_DURABILITY,
    OPT_BATCH_MS,
    OPT_DEBUG_COMMANDS,
    OPT_TIMEOUT,
    OPT_AUTH_TIMEOUT,
    OPT_AUTH_RESERVE,
    OPT_STORE,
    OPT_STORE_FAILURE,
    OPT_STORE_TIMEOUT,
    OPT_STORE_AUDIT,
    OPT_STORE_REPLICAS,
    OPT_STORE_REPLICAS_TIMEOUT,
    OPT_STORE_CONNECTIONS,
    OPT_MAXMEMORY,
};

static const struct option long_options[] = {
    {"config", required_argument, NULL, 'c'},
    {"bind", required_argument, NULL, 'b'},
    {"port", required_argument, NULL, 'p'},
    {"port-file", required_argument, NULL, OPT_PORT_FILE},
    {"requirepass", required_argument, NULL, OPT_REQUIREPASS},
    {"requirepass-file", required_argument, NULL, OPT_REQUIREPASS_FILE},
    {"protected-mode", required_argument, NULL, OPT_PROTECTED},
    {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
    {"max-clients", required_argument, NULL, OPT_MAX_CLIENTS},
    {"max-bulk-len", required_argument, NULL, OPT_MAX_BULK},
    {"max-args", required_argument, NULL, OPT_MAX_ARGS},
    {"max-inline-len", required_argument, NULL, OPT_MAX_INLINE},
    {"max-query-len", required_argument, NULL, OPT_MAX_QUERY},
    {"max-key-len", required_argument, NULL, OPT_MAX_KEY},
    {"max-payload-len", required_argument, NULL, OPT_MAX_PAYLOAD},
    {"max-output", required_argument, NULL, OPT_MAX_OUTPUT},
    {"max-cell-limits", required_argument, NULL, OPT_MAX_CELL},
    {"shutdown-timeout", required_argument, NULL, OPT_SHUTDOWN},
    {"admin-port", required_argument, NULL, OPT_ADMIN_PORT},
    {"admin-bind", required_argument, NULL, OPT_ADMIN_BIND},
    {"admin-port-file", required_argument, NULL, OPT_ADMIN_PORT_FILE},
    {"no-admin", no_argument, NULL, OPT_NO_ADMIN},
    {"data", required_argument, NULL, OPT_DATA},
    {"durability", required_argument, NULL, OPT_DURABILITY},
    {"batch-ms", required_argument, NULL, OPT_BATCH_MS},
    {"enable-debug-commands", no_argument, NULL, OPT_DEBUG_COMMANDS},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"auth-timeout", required_argument, NULL, OPT_AUTH_TIMEOUT},
    {"auth-reserve", required_argument, NULL, OPT_AUTH_RESERVE},
    {"store", required_argument, NULL, OPT_STORE},
    {"store-failure", required_argument, NULL, OPT_STORE_FAILURE},
    {"store-timeout", required_argument, NULL, OPT_STORE_TIMEOUT},
    {"store-audit", no_argument, NULL, OPT_STORE_AUDIT},
    {"store-replicas", required_argument, NULL, OPT_STORE_REPLICAS},
    {"store-replicas-timeout", required_argument, NULL, OPT_STORE_REPLICAS_TIMEOUT},
    {"store-connections", required_argument, NULL, OPT_STORE_CONNECTIONS},
    {"maxmemory", required_argument, NULL, OPT_MAXMEMORY},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

/* Parses a count or a size ("64k", "8m", "1g", powers of 1024) from 1 to max. */
static int parse_size(const char *s, int allow_suffix, unsigned long long max, size_t *out)
{
    unsigned long long v = 0, mul = 1;
    const char *p = s;

    if (*p < '0' || *p > '9')
        return -1;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (max - (unsigned)(*p - '0')) / 10)
            return -1;
        v = v * 10 + (unsigned)(*p - '0');
    }
    if (*p && allow_suffix) {
        if ((*p == 'k' || *p == 'K') && p[1] == '\0')
            mul = 1ull << 10;
        else if ((*p == 'm' || *p == 'M') && p[1] == '\0')
            mul = 1ull << 20;
        else if ((*p == 'g' || *p == 'G') && p[1] == '\0')
            mul = 1ull << 30;
        else
            return -1;
    } else if (*p) {
        return -1;
    }
    if (v == 0 || v > max / mul)
        return -1;
    *out = (size_t)(v * mul);
    return 0;
}

/* Reads the first line of path into buf (without the newline). Returns 0 or -1. */
static int read_password(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    size_t n;

    if (!f)
        return -1;
    if (!fgets(buf, (int)len, f)) {
        fclose(f);
        return -1;
    }
    fclose(f);
    n = strcspn(buf, "\r\n");
    buf[n] = '\0';
    return n > 0 ? 0 : -1;
}

static int bad_value(const char *opt, const char *value, const char *expected)
{
    fprintf(stderr, "sluice serve: bad %s \"%s\": expected %s\n", opt, value, expected);
    return EXIT_USAGE;
}

/* A size flag: the option's name, where it goes, whether k/m/g apply, and its ceiling. */
typedef struct size_flag {
    int opt;
    const char *name;
    int suffix;
    unsigned long long max;
} size_flag;

static const size_flag size_flags[] = {
    {OPT_MAX_CLIENTS, "--max-clients", 0, 1000000},
    {OPT_MAX_BULK, "--max-bulk-len", 1, 1ull << 30},
    {OPT_MAX_ARGS, "--max-args", 0, 1u << 20},
    {OPT_MAX_INLINE, "--max-inline-len", 1, 1ull << 30},
    {OPT_MAX_QUERY, "--max-query-len", 1, 1ull << 32},
    {OPT_MAX_KEY, "--max-key-len", 1, 1u << 20},
    {OPT_MAX_PAYLOAD, "--max-payload-len", 1, 1ull << 30},
    {OPT_MAX_OUTPUT, "--max-output", 1, 1ull << 32},
    {OPT_MAX_CELL, "--max-cell-limits", 0, 1u << 20},
    {OPT_SHUTDOWN, "--shutdown-timeout", 0, 3600000},
};

/* Where a size flag goes; NULL for --shutdown-timeout, which is not a size_t. */
static size_t *size_target(server_options *o, int opt)
{
    switch (opt) {
    case OPT_MAX_CLIENTS:
        return &o->max_clients;
    case OPT_MAX_BULK:
        return &o->limits.max_bulk_len;
    case OPT_MAX_ARGS:
        return &o->limits.max_args;
    case OPT_MAX_INLINE:
        return &o->limits.max_inline_len;
    case OPT_MAX_QUERY:
        return &o->limits.max_query_len;
    case OPT_MAX_KEY:
        return &o->max_key_len;
    case OPT_MAX_PAYLOAD:
        return &o->max_payload_len;
    case OPT_MAX_OUTPUT:
        return &o->max_output;
    case OPT_MAX_CELL:
        return &o->max_adhoc;
    default:
        return NULL;
    }
}

/* Fills o from argv. Returns -1 to go on, or the exit status to stop with. */
static int parse_options(int argc, char **argv, server_options *o, char *pass, size_t passlen)
{
    int c, no_admin = 0, data_given = 0;

    server_options_init(o);
    /* The server's own default is no admin port; the command's is 7380. */
    o->admin_port = ADMIN_DEFAULT_PORT;
    /* Likewise the server keeps nothing by default; the command keeps everything in ./data. */
    o->data_dir = "./data";
    o->durability = STORE_ALWAYS;
    o->batch_ms = 100;
    /* The server's own default is no budget; the command's is half the machine's memory. */
    o->maxmemory = mem_default_budget();
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":c:b:p:h", long_options, NULL)) != -1) {
        size_t v = 0;

        switch (c) {
        case 'c':
            o->config_path = optarg;
            break;
        case 'b':
            o->bind = optarg;
            break;
        case 'p':
            if (strcmp(optarg, "0") == 0)
                o->port = 0;
            else if (parse_size(optarg, 0, 65535, &v) != 0)
                return bad_value("--port", optarg, "a port number from 0 to 65535");
            else
                o->port = (int)v;
            break;
        case OPT_PORT_FILE:
            o->port_file = optarg;
            break;
        case OPT_REQUIREPASS:
            if (optarg[0] == '\0')
                return bad_value("--requirepass", optarg, "a non-empty password");
            o->requirepass = optarg;
            break;
        case OPT_REQUIREPASS_FILE:
            if (read_password(optarg, pass, passlen) != 0) {
                fprintf(stderr, "sluice serve: cannot read a password from %s\n", optarg);
                return EXIT_USAGE;
            }
            o->requirepass = pass;
            break;
        case OPT_PROTECTED:
            if (strcmp(optarg, "yes") == 0)
                o->protected_mode = 1;
            else if (strcmp(optarg, "no") == 0)
                o->protected_mode = 0;
            else
                return bad_value("--protected-mode", optarg, "yes or no");
            break;
        case OPT_LOG_LEVEL: {
            log_level level;

            if (log_parse_level(optarg, &level) != 0)
                return bad_value("--log-level", optarg, "debug, info, warn or error");
            log_set_level(level);
            break;
        }
        case OPT_ADMIN_PORT:
            if (strcmp(optarg, "0") == 0)
                o->admin_port = 0;
            else if (parse_size(optarg, 0, 65535, &v) != 0)
                return bad_value("--admin-port", optarg, "a port number from 0 to 65535");
            else
                o->admin_port = (int)v;
            o->admin_port_explicit = 1;
            break;
        case OPT_ADMIN_BIND:
            o->admin_bind = optarg;
            o->admin_port_explicit = 1;
            break;
        case OPT_ADMIN_PORT_FILE:
            o->admin_port_file = optarg;
            break;
        case OPT_NO_ADMIN:
            no_admin = 1;
            break;
        case OPT_DATA:
            if (optarg[0] == '\0')
                return bad_value("--data", optarg, "a directory");
            o->data_dir = optarg;
            data_given = 1;
            break;
        case OPT_STORE: {
            config_store_url u;
            char why[400];

            if (config_store_parse_url(optarg, &u, why, sizeof(why)) != 0) {
                fprintf(stderr, "sluice serve: --store: %s\n", why);
                return EXIT_USAGE;
            }
            o->store_url = optarg;
            break;
        }
        case OPT_STORE_FAILURE:
            if (strcmp(optarg, "closed") == 0)
                o->store_failure = SLUICE_STORE_FAILURE_CLOSED;
            else if (strcmp(optarg, "open") == 0)
                o->store_failure = SLUICE_STORE_FAILURE_OPEN;
            else
                return bad_value("--store-failure", optarg, "closed or open");
            break;
        case OPT_STORE_TIMEOUT:
            if (parse_size(optarg, 0, 600000, &v) != 0)
                return bad_value("--store-timeout", optarg,
                                 "a number of milliseconds from 1 to 600000");
            o->store_timeout_ms = (int64_t)v;
            break;
        case OPT_STORE_AUDIT:
            o->store_audit = 1;
            break;
        case OPT_STORE_REPLICAS:
            /* parse_size refuses 0, which is a valid choice here (no WAIT). */
            if (strcmp(optarg, "0") != 0 &&
                parse_size(optarg, 0, CONFIG_STORE_REPLICAS_MAX, &v) != 0)
                return bad_value("--store-replicas", optarg, "a number of replicas from 0 to 64");
            o->store_replicas = (int)v;
            break;
        case OPT_STORE_REPLICAS_TIMEOUT:
            if (parse_size(optarg, 0, 600000, &v) != 0)
                return bad_value("--store-replicas-timeout", optarg,
                                 "a number of milliseconds from 1 to 600000");
            o->store_replicas_timeout_ms = (int64_t)v;
            break;
        case OPT_STORE_CONNECTIONS:
            if (parse_size(optarg, 0, CONFIG_STORE_CONNECTIONS_MAX, &v) != 0)
                return bad_value("--store-connections", optarg,
                                 "a number of connections from 1 to 64");
            o->store_connections = (int)v;
            break;
        case OPT_DURABILITY:
            if (store_durability_parse(optarg, &o->durability) != 0)
                return bad_value("--durability", optarg, "always, batch or none");
            break;
        case OPT_BATCH_MS:
            if (parse_size(optarg, 0, 60000, &v) != 0)
                return bad_value("--batch-ms", optarg, "a number of milliseconds from 1 to 60000");
            o->batch_ms = (int64_t)v;
            break;
        case OPT_DEBUG_COMMANDS:
            o->debug_commands = 1;
            break;
        case OPT_TIMEOUT:
        case OPT_AUTH_TIMEOUT: {
            const char *name = c == OPT_TIMEOUT ? "--timeout" : "--auth-timeout";
            int64_t *ms = c == OPT_TIMEOUT ? &o->idle_timeout_ms : &o->auth_timeout_ms;

            if (strcmp(optarg, "0") == 0)
                v = 0;
            else if (parse_size(optarg, 0, 31536000, &v) != 0)
                return bad_value(name, optarg, "a number of seconds from 0 to 31536000");
            *ms = (int64_t)v * 1000;
            break;
        }
        case OPT_MAXMEMORY:
            if (alloc_parse_size(optarg, strlen(optarg), &v) != 0)
                return bad_value("--maxmemory", optarg,
                                 "a size in bytes such as 536870912, 512mb or 2gb (0: no limit)");
            o->maxmemory = v;
            o->maxmemory_set = 1;
            break;
        case OPT_AUTH_RESERVE:
            if (strcmp(optarg, "0") == 0)
                v = 0;
            else if (parse_size(optarg, 0, 1000000, &v) != 0)
                return bad_value("--auth-reserve", optarg, "a number from 0 to 1000000");
            o->auth_reserve = v;
            break;
        case 'h':
            fputs(usage_text, stdout);
            return 0;
        case ':':
            fprintf(stderr, "sluice serve: option %s needs a value; see sluice serve --help\n",
                    argv[optind - 1]);
            return EXIT_USAGE;
        case '?':
            fprintf(stderr, "sluice serve: unknown option %s; see sluice serve --help\n",
                    argv[optind - 1]);
            return EXIT_USAGE;
        default: {
            const size_flag *f = NULL;
            size_t *dst;

            for (size_t i = 0; i < sizeof(size_flags) / sizeof(size_flags[0]); i++) {
                if (size_flags[i].opt == c)
                    f = &size_flags[i];
            }
            if (!f)
                return EXIT_USAGE;
            if (parse_size(optarg, f->suffix, f->max, &v) != 0)
                return bad_value(f->name, optarg,
                                 f->suffix ? "a positive size in bytes (k, m, g allowed)"
                                           : "a positive whole number");
            dst = size_target(o, c);
            if (dst)
                *dst = v;
            else
                o->shutdown_ms = (int64_t)v;
            break;
        }
        }
    }
    if (optind < argc) {
        fprintf(stderr, "sluice serve: unexpected argument \"%s\"; see sluice serve --help\n",
                argv[optind]);
        return EXIT_USAGE;
    }
    if (no_admin)
        o->admin_port = -1;
    if (o->store_url && data_given) {
        fprintf(stderr,
                "sluice serve: --data names the embedded store; with --store %s nothing "
                "is kept on disk (the shared store keeps everything): drop one of them\n",
                o->store_url);
        return EXIT_USAGE;
    }
    /* One command never needs more than the whole query allows. */
    if (o->limits.max_bulk_len > o->limits.max_query_len)
        o->limits.max_query_len = o->limits.max_bulk_len;
    return -1;
}

int serve_main(int argc, char **argv)
{
    server_options o;
    server *s = NULL;
    char msg[512], pass[1024];
    int status, rc;

    status = parse_options(argc, argv, &o, pass, sizeof(pass));
    if (status >= 0)
        return status;
    /* A client that goes away mid-write must not kill the server. */
    signal(SIGPIPE, SIG_IGN);
    rc = server_new(&o, &s, msg, sizeof(msg));
    if (rc != 0) {
        log_error("cannot start: %s", msg[0] ? msg : "unknown error");
        fprintf(stderr, "sluice serve: %s\n", msg[0] ? msg : "cannot start");
        return 1;
    }
    status = server_run(s);
    server_free(s);
    memset(pass, 0, sizeof(pass));
    return status;
}
