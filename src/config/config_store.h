/* SPDX-License-Identifier: MIT */
/*
 * The shared store's settings: the URL grammar (`redis://HOST[:PORT][/DB]`, or a PostgreSQL
 * connection string), read by the YAML `store:` section and by `sluice serve --store`, and the
 * section itself.
 *
 * One grammar for both, so the file and the flag accept and refuse the same URLs with the same
 * words. Parsing is pure: no name is resolved here (the connection resolves HOST without blocking
 * the loop, src/store/redis_conn.h), so a URL that parses may still name a host that does not
 * answer.
 */
#ifndef SLUICE_CONFIG_CONFIG_STORE_H
#define SLUICE_CONFIG_CONFIG_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "config/yaml_walk.h"
#include "sluice/config.h"

/* Redis's own default port, used when the URL names none. */
#define CONFIG_STORE_DEFAULT_PORT 6379
/* Longest host name a URL may give (DNS: 253 characters). */
#define CONFIG_STORE_HOST_MAX 255
/* Default of store.timeout / --store-timeout: how long a decision waits for the store. */
#define CONFIG_STORE_DEFAULT_TIMEOUT_NS ((int64_t)1000 * 1000 * 1000)
/* Most replicas store.replicas / --store-replicas may ask WAIT for. */
#define CONFIG_STORE_REPLICAS_MAX 64
/* Most connections per node store.connections / --store-connections may ask (PostgreSQL). */
#define CONFIG_STORE_CONNECTIONS_MAX 64

/* Longest user name and password a Redis URL may give (decoded). */
#define CONFIG_STORE_AUTH_MAX 128

/* Which engine a store URL names. */
typedef enum config_store_kind {
    CONFIG_STORE_REDIS = 1,
    CONFIG_STORE_POSTGRES,
    CONFIG_STORE_REDIS_CLUSTER, /* redis-cluster://H1:P1,H2:P2,... */
} config_store_kind;

/* Seed nodes a redis-cluster:// URL may name at most. */
#define CONFIG_STORE_SEEDS_MAX 16

/* One seed node of a Redis Cluster URL. */
typedef struct config_store_seed {
    char host[CONFIG_STORE_HOST_MAX + 1];
    int port;
} config_store_seed;

/* A parsed store URL. */
typedef struct config_store_url {
    config_store_kind kind;
    /* Redis only (a PostgreSQL URL goes to libpq as it is: host, port and db stay empty). */
    char host[CONFIG_STORE_HOST_MAX + 1]; /* a name, an IPv4 literal or an IPv6 one (no []) */
    int port;                             /* 1..65535 */
    int db;                               /* the SELECT index, 0 when the URL names none */
    /* Redis's AUTH, from "redis://[USER]:PASSWORD@..." (percent-decoded): sent on every
     * connection before anything else, as "AUTH USER PASSWORD" (an ACL user) or "AUTH
     * PASSWORD" (requirepass) when user is empty; no AUTH when password is empty. */
    char user[CONFIG_STORE_AUTH_MAX + 1];
    char password[CONFIG_STORE_AUTH_MAX + 1];
    /* Redis Cluster: the seed nodes, in the URL's order (host and port are the first's). */
    config_store_seed seeds[CONFIG_STORE_SEEDS_MAX];
    size_t nseeds;
} config_store_url;

/* Parses url as `redis://HOST[:PORT][/DB]` (the scheme in any case; HOST a name of letters,
 * digits, '.', '-' and '_', an IPv4 literal or a bracketed IPv6 literal; PORT 1..65535; DB a
 * decimal index below 2^31), or as a PostgreSQL connection string: a `postgresql://` or
 * `postgres://` URI, or libpq's `keyword=value ...` form (kind CONFIG_STORE_POSTGRES; only its
 * shape is checked here: libpq parses it when the node connects, and refuses it there with its
 * own words). Returns 0 with *out filled, or SLUICE_EINVAL with msg (when msglen > 0) naming the
 * problem in one line (the URL in it with its password shown as "***"): another scheme
 * (rediss:// and unix:// are named: not supported yet), a user without a password, a bad host,
 * port or database, or anything after the database. `[USER]:PASSWORD@` before the host gives
 * Redis's AUTH (user and password percent-decoded, %XX; at most CONFIG_STORE_AUTH_MAX bytes
 * each). `redis-cluster://HOST[:PORT][,HOST[:PORT]...]` (also `redis+cluster://`) names a
 * Redis Cluster by 1 to CONFIG_STORE_SEEDS_MAX seed nodes (kind CONFIG_STORE_REDIS_CLUSTER;
 * each seed as a redis:// host and port; no database: a Cluster has only database 0). Pure. */
int config_store_parse_url(const char *url, config_store_url *out, char *msg, size_t msglen);

/* 1 when url names a Redis Cluster (its scheme is redis-cluster:// or redis+cluster://), else 0.
 * Pure. */
int config_store_is_cluster(const char *url);

/* Longest store URL a message or INFO shows (longer ones are cut). */
#define CONFIG_STORE_URL_MAX (CONFIG_STORE_HOST_MAX + 64)

/* Replaces, in place, every password in a store URL (a URI's "user:password@", a PostgreSQL
 * "password=" keyword or URI option) by "***", for messages, INFO and the log. Pure. */
void config_store_redact(char *url, size_t cap);

/* 1 when url names a PostgreSQL database (config_store_parse_url's CONFIG_STORE_POSTGRES), else
 * 0. Pure. */
int config_store_is_postgres(const char *url);

/* Reads the `store:` section at node (absent or null: nothing) into *out, whose url is then
 * allocated (freed by sluice_config_clear). Returns 0 or the error it reported through w. */
int config_parse_store(ywalk *w, const yaml_node_t *node, sluice_store_config *out);

#endif
