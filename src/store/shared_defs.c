/* SPDX-License-Identifier: MIT */
/*
 * The shared stores' live limit definitions: the set, and the calls that read and write it on
 * Redis and PostgreSQL (see shared_defs.h). Pure: it builds arguments and reads answers.
 *
 * A set is a plain array: it holds the limits changed at runtime, a handful to a few hundred,
 * looked up once per change applied, so a linear scan costs less than keeping an index.
 */
#include "store/shared_defs.h"

#include <errno.h>
#include <hiredis.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/grow.h"
#include "core/quota.h"
#include "sluice/error.h"

static int parse_i64(const char *s, int64_t *out);

/* ---- The set ------------------------------------------------------------------------------- */

void sdefs_set_init(sdefs_set *set)
{
    memset(set, 0, sizeof(*set));
}

void sdefs_set_clear(sdefs_set *set)
{
    if (!set)
        return;
    for (size_t i = 0; i < set->n; i++) {
        alloc_free(set->e[i].name);
        alloc_free(set->e[i].spec);
    }
    alloc_free(set->e);
    memset(set, 0, sizeof(*set));
}

static sdefs_entry *find(const sdefs_set *set, const char *name, size_t namelen)
{
    for (size_t i = 0; i < set->n; i++)
        if (strlen(set->e[i].name) == namelen && memcmp(set->e[i].name, name, namelen) == 0)
            return &set->e[i];
    return NULL;
}

int sdefs_set_put(sdefs_set *set, const char *name, size_t namelen, const char *spec,
                  size_t speclen)
{
    sdefs_entry *e;
    char *n = NULL, *sp;

    if (!name || namelen == 0 || memchr(name, '\0', namelen) || (!spec && speclen) ||
        (speclen && memchr(spec, '\0', speclen)))
        return SLUICE_EINVAL;
    e = find(set, name, namelen);
    /* Every allocation first, so that a failure leaves the set as it was. */
    sp = alloc_memdup0(speclen ? spec : "", speclen);
    if (!sp)
        return SLUICE_ENOMEM;
    if (!e) {
        n = alloc_memdup0(name, namelen);
        if (!n || grow_array(&set->e, &set->cap, set->n + 1, sizeof(*set->e), 8) != 0) {
            alloc_free(n);
            alloc_free(sp);
            return SLUICE_ENOMEM;
        }
        e = &set->e[set->n++];
        e->name = n;
        e->spec = NULL;
    }
    alloc_free(e->spec);
    e->spec = sp;
    return SLUICE_OK;
}

const char *sdefs_set_get(const sdefs_set *set, const char *name)
{
    const sdefs_entry *e = find(set, name, strlen(name));

    return e ? e->spec : NULL;
}

void sdefs_set_move(sdefs_set *dst, sdefs_set *src)
{
    sdefs_set_clear(dst);
    *dst = *src;
    memset(src, 0, sizeof(*src));
}

/* ---- Redis --------------------------------------------------------------------------------- */

static int key_name(const char *prefix, const char *what, char *buf, size_t len)
{
    int n;

    if (!prefix)
        prefix = "sluice";
    if (strlen(prefix) > SDEFS_PREFIX_MAX || strpbrk(prefix, "{}"))
        return SLUICE_EINVAL;
    n = snprintf(buf, len, "%s:{defs}:%s", prefix, what);
    return n < 0 || (size_t)n >= len ? SLUICE_EINVAL : n;
}

int sdefs_redis_slot_key(const char *prefix, char *buf, size_t len)
{
    return key_name(prefix, "limits", buf, len);
}

#define ARG(s, l)                                                                                  \
    do {                                                                                           \
        cmd->argv[cmd->argc] = (s);                                                                \
        cmd->argvlen[cmd->argc++] = (l);                                                           \
    } while (0)

/* "EVALSHA sha 2 <prefix>:{defs}:limits <prefix>:{defs}:version D1 <op> known" into cmd. */
static int defs_head(sdefs_cmd *cmd, const char *prefix, const char *sha, int64_t known,
                     const char *op)
{
    int ks = key_name(prefix, "limits", cmd->set_key, sizeof cmd->set_key);
    int kv = key_name(prefix, "version", cmd->ver_key, sizeof cmd->ver_key);

    if (ks < 0 || kv < 0)
        return SLUICE_EINVAL;
    snprintf(cmd->known, sizeof cmd->known, "%" PRId64, known);
    ARG("EVALSHA", 7);
    ARG(sha, strlen(sha));
    ARG("2", 1);
    ARG(cmd->set_key, (size_t)ks);
    ARG(cmd->ver_key, (size_t)kv);
    ARG("D1", 2);
    ARG(op, 1);
    ARG(cmd->known, strlen(cmd->known));
    return SLUICE_OK;
}

int sdefs_redis_command(sdefs_cmd *cmd, const char *prefix, const char *sha, int64_t known,
                        const char *name, size_t namelen, const char *spec, size_t speclen)
{
    memset(cmd, 0, sizeof(*cmd));
    if (!sha || (name && (namelen == 0 || (!spec && speclen))) ||
        defs_head(cmd, prefix, sha, known, name ? "S" : "G") != SLUICE_OK) {
        memset(cmd, 0, sizeof(*cmd));
        return SLUICE_EINVAL;
    }
    if (name) {
        ARG(name, namelen);
        ARG(speclen ? spec : "", speclen);
    }
    return SLUICE_OK;
}

int sdefs_redis_gen_command(sdefs_cmd *cmd, const char *prefix, const char *sha, int64_t known,
                            const char *ids, size_t idslen)
{
    memset(cmd, 0, sizeof(*cmd));
    if (!sha || !ids || idslen == 0 || defs_head(cmd, prefix, sha, known, "N") != SLUICE_OK) {
        memset(cmd, 0, sizeof(*cmd));
        return SLUICE_EINVAL;
    }
    ARG(ids, idslen);
    return SLUICE_OK;
}
#undef ARG

int sdefs_redis_version_command(sdefs_cmd *cmd, const char *prefix)
{
    int kv;

    memset(cmd, 0, sizeof(*cmd));
    kv = key_name(prefix, "version", cmd->ver_key, sizeof cmd->ver_key);
    if (kv < 0)
        return SLUICE_EINVAL;
    cmd->argv[0] = "GET";
    cmd->argvlen[0] = 3;
    cmd->argv[1] = cmd->ver_key;
    cmd->argvlen[1] = (size_t)kv;
    cmd->argc = 2;
    return SLUICE_OK;
}

int sdefs_redis_version_answer(const struct redisReply *r, int64_t *ver)
{
    char buf[24];

    *ver = 0;
    if (r && r->type == REDIS_REPLY_NIL)
        return SLUICE_OK;
    if (!r || r->type != REDIS_REPLY_STRING || r->len == 0 || r->len >= sizeof buf)
        return SLUICE_EPARSE;
    memcpy(buf, r->str, r->len);
    buf[r->len] = '\0';
    return parse_i64(buf, ver) == 0 ? SLUICE_OK : SLUICE_EPARSE;
}

int sdefs_redis_reset_command(sdefs_reset_cmd *cmd, const char *sha, const char *const *keys,
                              const size_t *keylens, size_t n)
{
    memset(cmd, 0, sizeof(*cmd));
    if (!sha || n < 1 || n > 2)
        return SLUICE_EINVAL;
    snprintf(cmd->nkeys, sizeof cmd->nkeys, "%zu", n);
    cmd->argv[0] = "EVALSHA";
    cmd->argvlen[0] = 7;
    cmd->argv[1] = sha;
    cmd->argvlen[1] = strlen(sha);
    cmd->argv[2] = cmd->nkeys;
    cmd->argvlen[2] = 1;
    for (size_t i = 0; i < n; i++) {
        cmd->argv[3 + i] = keys[i];
        cmd->argvlen[3 + i] = keylens[i];
    }
    cmd->argc = 3 + (int)n;
    cmd->argv[cmd->argc] = "D1";
    cmd->argvlen[cmd->argc++] = 2;
    cmd->argv[cmd->argc] = "X";
    cmd->argvlen[cmd->argc++] = 1;
    return SLUICE_OK;
}

int sdefs_ids_put(packed_str *s, const char *name, const char *sep, const char *rest,
                  size_t restlen)
{
    size_t nl = strlen(name), sl = strlen(sep), mark = s->len;
    char head[24];
    int hl = snprintf(head, sizeof head, "%zu:", nl + sl + restlen);
    int rc = packed_str_put(s, head, (size_t)hl);

    if (rc == SLUICE_OK)
        rc = packed_str_put(s, name, nl);
    if (rc == SLUICE_OK)
        rc = packed_str_put(s, sep, sl);
    if (rc == SLUICE_OK && restlen > 0)
        rc = packed_str_put(s, rest, restlen);
    if (rc != SLUICE_OK && s->p)
        packed_str_cut(s, mark);
    return rc;
}

char *sdefs_pg_ids_array(const char *ids, size_t idslen)
{
    packed_str lit = {0};
    const char *p = ids, *end = ids + idslen;
    int rc = packed_str_put(&lit, "{", 1);

    while (rc == SLUICE_OK && p < end) {
        char *colon;
        unsigned long long len;

        errno = 0;
        len = strtoull(p, &colon, 10);
        if (errno || colon == p || colon >= end || *colon != ':' || len > (size_t)(end - colon - 1))
            rc = SLUICE_EINVAL;
        if (rc == SLUICE_OK)
            rc = packed_str_put(&lit, lit.len > 1 ? ",\"" : "\"", lit.len > 1 ? 2 : 1);
        for (const char *q = colon + 1; rc == SLUICE_OK && q < colon + 1 + len; q++) {
            if (*q == '\0')
                rc = SLUICE_EINVAL; /* no text holds a NUL */
            else if (*q == '"' || *q == '\\')
                rc = packed_str_put(&lit, "\\", 1);
            if (rc == SLUICE_OK)
                rc = packed_str_put(&lit, q, 1);
        }
        if (rc == SLUICE_OK)
            rc = packed_str_put(&lit, "\"", 1);
        p = colon + 1 + len;
    }
    if (rc == SLUICE_OK)
        rc = packed_str_put(&lit, "}", 1);
    if (rc != SLUICE_OK) {
        alloc_free(lit.p);
        return NULL;
    }
    return lit.p;
}

int sdefs_redis_whole_reset_command(sdefs_wreset_cmd *cmd, const char *prefix, const char *sha,
                                    const char *tag, const char *ids, size_t idslen)
{
    int n;

    memset(cmd, 0, sizeof(*cmd));
    if (!prefix)
        prefix = "sluice";
    if (!sha || !ids || idslen == 0 || !tag || !*tag || strlen(prefix) > SDEFS_PREFIX_MAX ||
        strpbrk(prefix, "{}") || strpbrk(tag, "{}"))
        return SLUICE_EINVAL;
    n = snprintf(cmd->marker, sizeof cmd->marker, "%s:{%s}:resets", prefix, tag);
    if (n < 0 || (size_t)n >= sizeof cmd->marker)
        return SLUICE_EINVAL;
#define ARG(s, l)                                                                                  \
    do {                                                                                           \
        cmd->argv[cmd->argc] = (s);                                                                \
        cmd->argvlen[cmd->argc++] = (l);                                                           \
    } while (0)
    ARG("EVALSHA", 7);
    ARG(sha, strlen(sha));
    ARG("1", 1);
    ARG(cmd->marker, (size_t)n);
    ARG("D1", 2);
    ARG("W", 1);
    ARG(ids, idslen);
    return SLUICE_OK;
}

int sdefs_redis_spend_command(sdefs_spend_cmd *cmd, const char *sha, const char *state_key,
                              size_t state_len, const char *clock_key, size_t clock_len)
{
    memset(cmd, 0, sizeof(*cmd));
    if (!sha || !state_key || !clock_key)
        return SLUICE_EINVAL;
    ARG("EVALSHA", 7);
    ARG(sha, strlen(sha));
    ARG("2", 1);
    ARG(state_key, state_len);
    ARG(clock_key, clock_len);
    ARG("D1", 2);
    cmd->argv[cmd->argc] = "Q";
    cmd->argvlen[cmd->argc++] = 1;
#undef ARG
    return SLUICE_OK;
}

/* Whether an answer at version ver to a call made with known carries the whole set. */
static int is_full(int is_set, int64_t known, int64_t ver)
{
    return is_set ? known < 0 || ver != known + 1 : ver != known;
}

int sdefs_redis_answer(const struct redisReply *r, int is_set, int64_t known, int64_t *ver,
                       int *full, sdefs_set *set)
{
    sdefs_set got;
    int64_t v;
    int f, rc;

    *ver = 0;
    *full = 0;
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 1 || r->elements % 2 != 1 ||
        !r->element[0] || r->element[0]->type != REDIS_REPLY_INTEGER || r->element[0]->integer < 0)
        return SLUICE_EPARSE;
    v = r->element[0]->integer;
    f = is_full(is_set, known, v);
    if (!f && r->elements != 1)
        return SLUICE_EPARSE;
    sdefs_set_init(&got);
    for (size_t i = 1; i + 1 < r->elements; i += 2) {
        const redisReply *n = r->element[i], *s = r->element[i + 1];

        if (!n || !s || n->type != REDIS_REPLY_STRING || s->type != REDIS_REPLY_STRING) {
            sdefs_set_clear(&got);
            return SLUICE_EPARSE;
        }
        rc = sdefs_set_put(&got, n->str, n->len, s->str, s->len);
        if (rc != 0) {
            sdefs_set_clear(&got);
            if (rc == SLUICE_ENOMEM)
                sdefs_set_clear(set);
            return rc == SLUICE_ENOMEM ? rc : SLUICE_EPARSE;
        }
    }
    if (f)
        sdefs_set_move(set, &got);
    *ver = v;
    *full = f;
    return SLUICE_OK;
}

/* ---- PostgreSQL ---------------------------------------------------------------------------- */

static int parse_i64(const char *s, int64_t *out)
{
    char *end;
    long long v;

    if (!s || *s < '0' || *s > '9')
        return -1;
    errno = 0;
    v = strtoll(s, &end, 10);
    if (*end || v < 0 || errno == ERANGE)
        return -1;
    *out = (int64_t)v;
    return 0;
}

int sdefs_pg_answer(const struct pg_result *res, int is_set, int64_t known, int64_t *ver, int *full,
                    sdefs_set *set)
{
    const PGresult *r = (const PGresult *)res;
    sdefs_set got;
    int64_t v = 0;
    int nrows, f, rc;

    *ver = 0;
    *full = 0;
    if (!r || PQresultStatus(r) != PGRES_TUPLES_OK || PQnfields(r) != 3 || PQntuples(r) < 1 ||
        PQgetisnull(r, 0, 0) || parse_i64(PQgetvalue(r, 0, 0), &v) != 0)
        return SLUICE_EPARSE;
    nrows = PQntuples(r);
    f = is_full(is_set, known, v);
    sdefs_set_init(&got);
    for (int i = 0; i < nrows; i++) {
        int64_t vi;

        if (PQgetisnull(r, i, 0) || parse_i64(PQgetvalue(r, i, 0), &vi) != 0 || vi != v)
            goto bad;
        if (PQgetisnull(r, i, 1)) /* the version alone: no definition on this row */
            continue;
        if (!f || PQgetisnull(r, i, 2))
            goto bad;
        rc = sdefs_set_put(&got, PQgetvalue(r, i, 1), (size_t)PQgetlength(r, i, 1),
                           PQgetvalue(r, i, 2), (size_t)PQgetlength(r, i, 2));
        if (rc == SLUICE_ENOMEM) {
            sdefs_set_clear(&got);
            sdefs_set_clear(set);
            return rc;
        }
        if (rc != 0)
            goto bad;
    }
    if (f)
        sdefs_set_move(set, &got);
    *ver = v;
    *full = f;
    return SLUICE_OK;
bad:
    sdefs_set_clear(&got);
    return SLUICE_EPARSE;
}

int sdefs_reset_answer(const struct redisReply *r, const struct pg_result *res, int64_t *n)
{
    const PGresult *p = (const PGresult *)res;

    *n = 0;
    if (r)
        return r->type == REDIS_REPLY_INTEGER && r->integer >= 0 ? (*n = r->integer, SLUICE_OK)
                                                                 : SLUICE_EPARSE;
    if (!p || PQresultStatus(p) != PGRES_TUPLES_OK || PQnfields(p) != 1 || PQntuples(p) != 1 ||
        PQgetisnull(p, 0, 0) || parse_i64(PQgetvalue(p, 0, 0), n) != 0) {
        *n = 0;
        return SLUICE_EPARSE;
    }
    return SLUICE_OK;
}

/* ---- LIMIT.SPEND --------------------------------------------------------------------------- */

void sdefs_quota_usage(int64_t budget, sluice_calendar cal, int has_state, int64_t start_ns,
                       int64_t end_ns, int64_t spent, int64_t now_ns, sluice_quota_usage *out)
{
    quota_state q = {start_ns, end_ns, spent};
    int64_t end;

    memset(out, 0, sizeof *out);
    if (now_ns < 0)
        now_ns = 0;
    out->budget = budget;
    out->period_start_ns = quota_period_start(cal, now_ns, &end);
    out->resets_at_ns = end;
    /* As the store's load: a state that spent nothing, or whose period ended, is absent. */
    if (has_state && spent > 0 && !quota_idle(&q, now_ns))
        out->spent = spent;
    out->remaining = out->spent < out->budget ? out->budget - out->spent : 0;
}

/* A signed decimal integer of exactly len bytes (no sign but '-', no overflow). */
static int parse_s64(const char *s, size_t len, int64_t *out)
{
    char buf[24], *end;
    long long v;

    if (!s || len == 0 || len >= sizeof buf)
        return -1;
    memcpy(buf, s, len);
    buf[len] = '\0';
    if (!(buf[0] == '-' || (buf[0] >= '0' && buf[0] <= '9')))
        return -1;
    errno = 0;
    v = strtoll(buf, &end, 10);
    if (*end || errno == ERANGE || end == buf)
        return -1;
    *out = (int64_t)v;
    return 0;
}

/* Reads up to n space- or comma-separated integers of s[0..len) into v; returns how many, or -1
 * for anything else. */
static int parse_ints(const char *s, size_t len, char sep, int64_t *v, int n)
{
    size_t at = 0;
    int k = 0;

    while (at < len) {
        size_t e = at;

        while (e < len && s[e] != sep)
            e++;
        if (k == n || parse_s64(s + at, e - at, &v[k]) != 0)
            return -1;
        k++;
        at = e < len ? e + 1 : e;
        if (e < len && at == len)
            return -1; /* a trailing separator */
    }
    return k;
}

int sdefs_spend_answer(const struct redisReply *r, const struct pg_result *res, int64_t budget,
                       sluice_calendar cal, sluice_quota_usage *out)
{
    const PGresult *p = (const PGresult *)res;
    int64_t st[3] = {0, 0, 0}, now = 0, clock = 0, us = 0;
    int has = 0;

    memset(out, 0, sizeof *out);
    if (r) {
        const redisReply *e[4];
        int64_t v[3];

        if (r->type != REDIS_REPLY_ARRAY || r->elements != 4)
            return SLUICE_EPARSE;
        for (int i = 0; i < 4; i++) {
            e[i] = r->element[i];
            if (!e[i] || e[i]->type != REDIS_REPLY_STRING)
                return SLUICE_EPARSE;
        }
        /* The state: "q <start> <end> <spent>"; another kind's (a limit redefined) is absent. */
        if (e[0]->len > 2 && memcmp(e[0]->str, "q ", 2) == 0) {
            if (parse_ints(e[0]->str + 2, e[0]->len - 2, ' ', st, 3) != 3)
                return SLUICE_EPARSE;
            has = 1;
        }
        /* The clock: "<ns> <last lease id> <deadline ms>". */
        if (e[1]->len && (parse_ints(e[1]->str, e[1]->len, ' ', v, 3) != 3))
            return SLUICE_EPARSE;
        if (e[1]->len)
            clock = v[0];
        if (parse_s64(e[2]->str, e[2]->len, &now) != 0 ||
            parse_s64(e[3]->str, e[3]->len, &us) != 0 || now < 0 || us < 0 || us >= 1000000 ||
            now > INT64_MAX / 1000000000 - 1)
            return SLUICE_EPARSE;
        now = now * 1000000000 + us * 1000;
    } else {
        if (!p || PQresultStatus(p) != PGRES_TUPLES_OK || PQnfields(p) != 3 || PQntuples(p) != 1 ||
            PQgetisnull(p, 0, 2) ||
            parse_s64(PQgetvalue(p, 0, 2), (size_t)PQgetlength(p, 0, 2), &now) != 0)
            return SLUICE_EPARSE;
        if (!PQgetisnull(p, 0, 0)) {
            const char *t = PQgetvalue(p, 0, 0);
            size_t len = (size_t)PQgetlength(p, 0, 0);

            if (len < 2 || t[0] != '{' || t[len - 1] != '}' ||
                parse_ints(t + 1, len - 2, ',', st, 3) != 3)
                return SLUICE_EPARSE;
            has = 1;
        }
        if (!PQgetisnull(p, 0, 1) &&
            parse_s64(PQgetvalue(p, 0, 1), (size_t)PQgetlength(p, 0, 1), &clock) != 0)
            return SLUICE_EPARSE;
    }
    /* The store's time, as a decision reads it: its clock, ratcheted by the tag's. */
    if (clock > now)
        now = clock;
    sdefs_quota_usage(budget, cal, has, st[0], st[1], st[2], now, out);
    return SLUICE_OK;
}
