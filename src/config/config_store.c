/* SPDX-License-Identifier: MIT */
/*
 * The shared store's settings (config_store.h): the URL grammar and the YAML `store:` section.
 *
 * The URL is checked strictly and whole: a URL sluice would read differently from how the user
 * meant it (a password it would not send, a TLS scheme it would not speak, a database a Cluster
 * does not have) is refused with its reason rather than half-used.
 */
#include "config/config_store.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/alloc.h"
#include "base/hex.h"
#include "sluice/error.h"

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static const char *const store_keys[] = {"url",      "failure",          "timeout",
                                         "replicas", "replicas_timeout", "connections"};
static const char *const failure_words[] = {"closed", "open"};
/* What a store URL may be, for the messages. */
#define EXPECTED                                                                                   \
    "expected redis://[[USER]:PASSWORD@]HOST[:PORT][/DB], redis-cluster://HOST[:PORT],... or "     \
    "postgresql://[USER@]HOST[:PORT]/DB"

/* ---- Passwords --------------------------------------------------------------------------- */

/* The end of the password value that starts at v: a quoted keyword value ('...', with \'
 * escapes), else up to a space, '&' or, in a URI's user part, '@'. */
static const char *password_end(const char *v, int in_user)
{
    if (*v == '\'' && !in_user) {
        for (v++; *v && *v != '\''; v++)
            if (*v == '\\' && v[1])
                v++;
        return *v ? v + 1 : v;
    }
    return v + strcspn(v, in_user ? "@" : " &");
}

void config_store_redact(char *url, size_t cap)
{
    char out[CONFIG_STORE_URL_MAX];
    const char *p = url, *user_pw = NULL, *scheme = strstr(url, "://");
    size_t o = 0;

    if (scheme) {
        const char *user = scheme + 3, *end = user + strcspn(user, "/?@");
        const char *colon = memchr(user, ':', (size_t)(end - user));

        if (*end == '@' && colon)
            user_pw = colon + 1;
    }
    while (*p && o + 4 < sizeof out) {
        if (p == user_pw) {
            p = password_end(p, 1);
            memcpy(out + o, "***", 3);
            o += 3;
            continue;
        }
        if (strncmp(p, "password", 8) == 0 &&
            (p == url || p[-1] == ' ' || p[-1] == '?' || p[-1] == '&')) {
            const char *q = p + 8 + strspn(p + 8, " ");

            if (*q == '=') {
                q += 1 + strspn(q + 1, " ");
                while (p < q && o + 4 < sizeof out)
                    out[o++] = *p++;
                p = password_end(q, 0);
                memcpy(out + o, "***", 3);
                o += 3;
                continue;
            }
        }
        out[o++] = *p++;
    }
    out[o] = '\0';
    snprintf(url, cap, "%s", out);
}

static int url_fail(char *msg, size_t msglen, const char *url, const char *why)
{
    char shown[CONFIG_STORE_URL_MAX];

    snprintf(shown, sizeof shown, "%s", url);
    config_store_redact(shown, sizeof shown);
    if (msg && msglen > 0)
        snprintf(msg, msglen, "bad store URL \"%.120s\": %s", shown, why);
    return SLUICE_EINVAL;
}

static int is_host_byte(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '.' || ch == '-' || ch == '_';
}

/* Reads 1 to `digits` decimal digits at *p into *v (at most max). Returns 0 or -1. */
static int read_number(const char **p, int digits, long max, long *v)
{
    const char *s = *p;
    long n = 0;
    int k = 0;

    while (*s >= '0' && *s <= '9') {
        if (++k > digits)
            return -1;
        n = n * 10 + (*s - '0');
        s++;
    }
    if (k == 0 || n > max)
        return -1;
    *p = s;
    *v = n;
    return 0;
}

/* 1 when s starts with libpq's `keyword=value` form: a keyword of letters and '_', then '='
 * (spaces allowed around it). */
static int is_pg_keywords(const char *s)
{
    const char *p = s;

    while (*p == ' ')
        p++;
    s = p;
    while ((*p >= 'a' && *p <= 'z') || *p == '_')
        p++;
    if (p == s)
        return 0;
    while (*p == ' ')
        p++;
    return *p == '=';
}

/* Reads HOST[:PORT] at *p into host (CONFIG_STORE_HOST_MAX + 1 bytes) and *port, stopping at
 * the first byte of `stops` after it (or the end). Returns 0 with *p past it, or SLUICE_EINVAL
 * with msg. */
static int parse_host_port(const char *url, const char **pp, const char *stops, char *host_out,
                           int *port, char *msg, size_t msglen)
{
    const char *p = *pp, *host, *host_end;
    size_t hostlen;
    long v;

    if (*p == '[') {
        host = ++p;
        while (*p && *p != ']') {
            if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f') ||
                  (*p >= 'A' && *p <= 'F') || *p == ':' || *p == '.'))
                return url_fail(msg, msglen, url, "bad IPv6 address between [ and ]");
            p++;
        }
        if (*p != ']' || p == host)
            return url_fail(msg, msglen, url, "an IPv6 address needs a closing ]");
        host_end = p++;
    } else {
        host = p;
        while (is_host_byte(*p))
            p++;
        host_end = p;
    }
    hostlen = (size_t)(host_end - host);
    if (hostlen == 0)
        return url_fail(msg, msglen, url, "no host (expected redis://HOST[:PORT][/DB])");
    if (hostlen > CONFIG_STORE_HOST_MAX)
        return url_fail(msg, msglen, url, "the host name is longer than 255 characters");
    if (*p && *p != ':' && !strchr(stops, *p))
        return url_fail(msg, msglen, url, "bad host name (letters, digits, '.', '-' and '_')");
    memcpy(host_out, host, hostlen);
    host_out[hostlen] = '\0';
    *port = CONFIG_STORE_DEFAULT_PORT;
    if (*p == ':') {
        p++;
        if (read_number(&p, 5, 65535, &v) != 0 || v == 0 || (*p && !strchr(stops, *p)))
            return url_fail(msg, msglen, url, "the port must be a number from 1 to 65535");
        *port = (int)v;
    }
    *pp = p;
    return 0;
}

/* Percent-decodes [from, to) into out (room for CONFIG_STORE_AUTH_MAX bytes and a NUL). Returns
 * 0, or -1 for a bad %XX, a NUL byte or too long a result. */
static int decode_auth(const char *from, const char *to, char *out)
{
    size_t n = 0;

    while (from < to) {
        int ch = (unsigned char)*from++;

        if (ch == '%') {
            int hi = to - from >= 2 ? hex_digit_value((unsigned char)from[0]) : -1;
            int lo = hi >= 0 ? hex_digit_value((unsigned char)from[1]) : -1;

            if (lo < 0 || (hi == 0 && lo == 0))
                return -1;
            ch = hi * 16 + lo;
            from += 2;
        }
        if (n == CONFIG_STORE_AUTH_MAX)
            return -1;
        out[n++] = (char)ch;
    }
    out[n] = '\0';
    return 0;
}

/* Reads "[USER]:PASSWORD@" at *p, if the URL's authority (up to `ends`) has an '@', into out's
 * user and password, and moves *p past it. */
static int parse_auth(const char *url, const char **p, const char *ends, config_store_url *out,
                      char *msg, size_t msglen)
{
    const char *end = *p + strcspn(*p, ends), *at = memchr(*p, '@', (size_t)(end - *p));
    const char *colon;

    if (!at)
        return 0;
    colon = memchr(*p, ':', (size_t)(at - *p));
    if (!colon || colon + 1 == at)
        return url_fail(msg, msglen, url,
                        "a user without a password: give redis://[USER]:PASSWORD@HOST (Redis's "
                        "AUTH)");
    if (decode_auth(*p, colon, out->user) != 0 || decode_auth(colon + 1, at, out->password) != 0)
        return url_fail(msg, msglen, url,
                        "bad user or password: at most 128 bytes each, written with %XX escapes "
                        "for reserved characters (%40 for @, %3A for :)");
    *p = at + 1;
    return 0;
}

/* The part of a redis-cluster:// URL after the scheme: seeds separated by ','. */
static int parse_cluster(const char *url, const char *p, config_store_url *out, char *msg,
                         size_t msglen)
{
    int rc;

    out->kind = CONFIG_STORE_REDIS_CLUSTER;
    rc = parse_auth(url, &p, "/?", out, msg, msglen);
    if (rc != 0)
        return rc;
    for (;;) {
        config_store_seed *sd;

        if (out->nseeds == CONFIG_STORE_SEEDS_MAX)
            return url_fail(msg, msglen, url, "more than 16 seed nodes (a few are enough)");
        sd = &out->seeds[out->nseeds];
        rc = parse_host_port(url, &p, ",/?", sd->host, &sd->port, msg, msglen);
        if (rc != 0)
            return rc;
        out->nseeds++;
        if (*p != ',')
            break;
        p++;
    }
    if (*p == '/') {
        long db = 0;

        p++;
        if (*p && *p != '?' && (read_number(&p, 10, 2147483647L, &db) != 0 || db != 0))
            return url_fail(msg, msglen, url, "a Redis Cluster has only database 0 (give no /DB)");
    }
    if (*p == '?')
        return url_fail(msg, msglen, url, "URL options (?...) are not supported");
    if (*p)
        return url_fail(msg, msglen, url, "expected redis-cluster://HOST[:PORT],HOST[:PORT],...");
    memcpy(out->host, out->seeds[0].host, sizeof out->host);
    out->port = out->seeds[0].port;
    return 0;
}

int config_store_parse_url(const char *url, config_store_url *out, char *msg, size_t msglen)
{
    static const char scheme[] = "redis://";
    const char *p;
    long v;
    int rc;

    if (msg && msglen > 0)
        msg[0] = '\0';
    memset(out, 0, sizeof(*out));
    if (!url || !*url)
        return url_fail(msg, msglen, "", EXPECTED);
    if (strncasecmp(url, "postgresql://", 13) == 0 || strncasecmp(url, "postgres://", 11) == 0 ||
        is_pg_keywords(url)) {
        out->kind = CONFIG_STORE_POSTGRES;
        return 0;
    }
    out->kind = CONFIG_STORE_REDIS;
    if (strncasecmp(url, "rediss://", 9) == 0)
        return url_fail(msg, msglen, url, "TLS (rediss://) is not supported yet");
    if (strncasecmp(url, "redis-cluster://", 16) == 0 ||
        strncasecmp(url, "redis+cluster://", 16) == 0)
        return parse_cluster(url, url + 16, out, msg, msglen);
    if (strncasecmp(url, "unix://", 7) == 0 || strncasecmp(url, "redis+unix://", 13) == 0 ||
        strncasecmp(url, "redis+socket://", 15) == 0)
        return url_fail(msg, msglen, url,
                        "Unix sockets are not supported yet: give redis://HOST[:PORT][/DB]");
    if (strncasecmp(url, scheme, sizeof(scheme) - 1) != 0)
        return url_fail(msg, msglen, url, EXPECTED);
    p = url + sizeof(scheme) - 1;
    rc = parse_auth(url, &p, "/?", out, msg, msglen);
    if (rc == 0)
        rc = parse_host_port(url, &p, "/?", out->host, &out->port, msg, msglen);
    if (rc != 0)
        return rc;
    if (*p == '/') {
        p++;
        if (*p && *p != '?') {
            if (read_number(&p, 10, 2147483647L, &v) != 0 || (*p && *p != '?'))
                return url_fail(msg, msglen, url,
                                "the database must be a number (the SELECT index, e.g. /0)");
            out->db = (int)v;
        }
    }
    if (*p == '?')
        return url_fail(msg, msglen, url, "URL options (?...) are not supported");
    return 0;
}

int config_store_is_cluster(const char *url)
{
    return url && (strncasecmp(url, "redis-cluster://", 16) == 0 ||
                   strncasecmp(url, "redis+cluster://", 16) == 0);
}

int config_store_is_postgres(const char *url)
{
    config_store_url u;

    return url && config_store_parse_url(url, &u, NULL, 0) == 0 && u.kind == CONFIG_STORE_POSTGRES;
}

/* Reads and checks a URL node into *out (allocated). */
static int parse_url(ywalk *w, const yaml_node_t *node, sluice_store_config *out)
{
    config_store_url u;
    const char *s;
    size_t len;
    char why[300];
    int rc;

    rc = yw_string(w, node, "a store URL, redis://HOST[:PORT][/DB] or postgresql://...", &s, &len);
    if (rc != 0)
        return rc;
    if (config_store_parse_url(s, &u, why, sizeof(why)) != 0)
        return yw_fail(w, node, SLUICE_EINVAL, "%s", why);
    out->url = alloc_memdup0(s, len);
    if (!out->url)
        return yw_fail(w, node, SLUICE_ENOMEM, "out of memory");
    return 0;
}

int config_parse_store(ywalk *w, const yaml_node_t *node, sluice_store_config *out)
{
    const yaml_node_t *url;
    size_t saved;
    int rc, choice = -1;

    if (!node || yw_is_null(node))
        return 0;
    if (yw_is_scalar(node))
        return parse_url(w, node, out);
    /* The words predate replicas and replicas_timeout (an unknown key names every key). */
    rc = yw_expect_map(w, node, "a store URL, or a mapping with url, failure and timeout");
    if (rc == 0)
        rc = yw_check_keys(w, node, store_keys, N_OF(store_keys));
    if (rc != 0)
        return rc;
    url = yw_get(w, node, "url", NULL);
    if (url) {
        saved = yw_push(w, "url", 3);
        rc = parse_url(w, url, out);
        yw_pop(w, saved);
        if (rc != 0)
            return rc;
    }
    if ((rc = yw_field_choice(w, node, "failure", failure_words, N_OF(failure_words), &choice)) !=
            0 ||
        (rc = yw_field_duration(w, node, "timeout", SLUICE_NS_PER_MS, &out->timeout_ns)) != 0 ||
        (rc = yw_field_int(w, node, "replicas", 0, CONFIG_STORE_REPLICAS_MAX, &out->replicas)) !=
            0 ||
        (rc = yw_field_duration(w, node, "replicas_timeout", SLUICE_NS_PER_MS,
                                &out->replicas_timeout_ns)) != 0 ||
        (rc = yw_field_int(w, node, "connections", 1, CONFIG_STORE_CONNECTIONS_MAX,
                           &out->connections)) != 0)
        return rc;
    if (choice >= 0)
        out->failure = choice == 0 ? SLUICE_STORE_FAILURE_CLOSED : SLUICE_STORE_FAILURE_OPEN;
    return 0;
}
