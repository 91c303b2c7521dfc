/* SPDX-License-Identifier: MIT */
/*
 * The encoder and decoder of the batched limits script (redis_limits.h; the argument and reply
 * layout is described at the top of src/store/redis/limits.lua, which this file must match).
 *
 * A batch keeps every argument's bytes in one arena and remembers them as (offset, length)
 * spans, keys and script arguments apart, because EVALSHA wants all keys before all arguments
 * while requests are added one at a time. rlim_batch_command turns the spans into pointers only
 * when the command is sent, so the arena may move while requests are added.
 *
 * Invariants:
 * - a failed rlim_batch_add leaves the batch exactly as it was (every size is rolled back);
 * - keys are normalised as the core normalises them (a key longer than its limit's max_key_len
 *   is replaced by its SHA-256), so a long key names the same state on every node;
 * - a tag never holds '{' or '}' and is never empty (it is replaced by the hex SHA-256 of
 *   itself), so Redis Cluster hashes exactly the tag and every key of one tag shares a slot.
 */
#include "store/redis_limits.h"

#include <hiredis.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "core/keyhash.h"
#include "sluice/error.h"

/* Defined by the file CMake generates from src/store/redis/limits.lua (cmake/embed_text.cmake). */
extern const char rlim_lua_text[];
extern const size_t rlim_lua_text_len;

/* Fields the script returns per link of a DECIDE or PEEK, and before them. */
#define RLIM_LINK_FIELDS 6
#define RLIM_DECIDE_HEAD 5

/* Arguments of the call before the requests: protocol, flags, now, request count. */
#define RLIM_CALL_ARGS 4

typedef struct span {
    size_t off;
    size_t len;
} span;

typedef struct span_list {
    span *v;
    size_t n;
    size_t cap;
} span_list;

typedef struct rlim_req {
    rlim_op op;
    size_t nlinks;
} rlim_req;

struct rlim_batch {
    char *prefix;
    int audit;
    int64_t now_ns; /* injected time; 0: Redis TIME */
    rlim_req *reqs;
    size_t nreqs;
    size_t capreqs;
    char *buf; /* the arena of every key's and argument's bytes */
    size_t len;
    size_t cap;
    span_list keys;
    span_list args;
    const char **argv; /* the command of rlim_batch_command */
    size_t *argvlen;
    size_t capargv;
    char head[4][24]; /* its numkeys, flags, now and request count */
};

/* ---- growth ------------------------------------------------------------------------------ */

static int grow(void **p, size_t *cap, size_t need, size_t size)
{
    size_t ncap = *cap ? *cap : 16;
    void *np;

    if (need <= *cap)
        return SLUICE_OK;
    while (ncap < need)
        ncap *= 2;
    np = alloc_realloc(*p, ncap * size);
    if (!np)
        return SLUICE_ENOMEM;
    *p = np;
    *cap = ncap;
    return SLUICE_OK;
}

/* Appends bytes to the arena and their span to list. */
static int put(rlim_batch *b, span_list *list, const void *data, size_t len)
{
    void *buf = b->buf, *v = list->v;
    int rc = grow(&buf, &b->cap, b->len + len + 1, 1);

    b->buf = buf;
    if (rc == SLUICE_OK)
        rc = grow(&v, &list->cap, list->n + 1, sizeof(span));
    list->v = v;
    if (rc != SLUICE_OK)
        return rc;
    if (len > 0)
        memcpy(b->buf + b->len, data, len);
    list->v[list->n].off = b->len;
    list->v[list->n].len = len;
    list->n++;
    b->len += len;
    b->buf[b->len++] = '\0'; /* so that a span can be read as a C string in a debugger */
    return SLUICE_OK;
}

static int put_str(rlim_batch *b, span_list *list, const char *s)
{
    return put(b, list, s, strlen(s));
}

static int put_i64(rlim_batch *b, span_list *list, int64_t v)
{
    char tmp[24];

    snprintf(tmp, sizeof tmp, "%" PRId64, v);
    return put_str(b, list, tmp);
}

static int put_u64(rlim_batch *b, span_list *list, uint64_t v)
{
    char tmp[24];

    snprintf(tmp, sizeof tmp, "%" PRIu64, v);
    return put_str(b, list, tmp);
}

/* Appends the concatenation of up to 8 pieces as one span (a key name). */
typedef struct piece {
    const char *p;
    size_t len;
} piece;

static int put_pieces(rlim_batch *b, span_list *list, const piece *pc, size_t n)
{
    void *buf = b->buf, *v = list->v;
    size_t total = 0;
    int rc;

    for (size_t i = 0; i < n; i++)
        total += pc[i].len;
    rc = grow(&buf, &b->cap, b->len + total + 1, 1);
    b->buf = buf;
    if (rc == SLUICE_OK)
        rc = grow(&v, &list->cap, list->n + 1, sizeof(span));
    list->v = v;
    if (rc != SLUICE_OK)
        return rc;
    list->v[list->n].off = b->len;
    list->v[list->n].len = total;
    list->n++;
    for (size_t i = 0; i < n; i++) {
        if (pc[i].len > 0)
            memcpy(b->buf + b->len, pc[i].p, pc[i].len);
        b->len += pc[i].len;
    }
    b->buf[b->len++] = '\0';
    return SLUICE_OK;
}

/* ---- life cycle -------------------------------------------------------------------------- */

int rlim_batch_new(const char *prefix, rlim_batch **out)
{
    rlim_batch *b;
    size_t plen;

    *out = NULL;
    if (!prefix)
        prefix = "sluice";
    if (strchr(prefix, '{') || strchr(prefix, '}'))
        return SLUICE_EINVAL;
    plen = strlen(prefix);
    b = alloc_calloc(1, sizeof *b);
    if (!b)
        return SLUICE_ENOMEM;
    b->prefix = alloc_malloc(plen + 1);
    if (!b->prefix) {
        alloc_free(b);
        return SLUICE_ENOMEM;
    }
    memcpy(b->prefix, prefix, plen + 1);
    *out = b;
    return SLUICE_OK;
}

void rlim_batch_reset(rlim_batch *b)
{
    b->nreqs = 0;
    b->len = 0;
    b->keys.n = 0;
    b->args.n = 0;
}

void rlim_batch_free(rlim_batch *b)
{
    if (!b)
        return;
    alloc_free(b->prefix);
    alloc_free(b->reqs);
    alloc_free(b->buf);
    alloc_free(b->keys.v);
    alloc_free(b->args.v);
    alloc_free(b->argv);
    alloc_free(b->argvlen);
    alloc_free(b);
}

int rlim_batch_set_audit(rlim_batch *b, int on)
{
    if (b->nreqs > 0)
        return SLUICE_ESTATE;
    b->audit = on != 0;
    return SLUICE_OK;
}

void rlim_batch_set_now(rlim_batch *b, int64_t now_ns)
{
    b->now_ns = now_ns > 0 ? now_ns : 0;
}

size_t rlim_batch_count(const rlim_batch *b)
{
    return b->nreqs;
}

size_t rlim_batch_link_count(const rlim_batch *b, size_t i)
{
    return i < b->nreqs ? b->reqs[i].nlinks : 0;
}

/* ---- requests ---------------------------------------------------------------------------- */

/* A link's key and tag as the script sees them. */
typedef struct link_names {
    const char *key;
    size_t keylen;
    unsigned char digest[KEYHASH_LEN];
    const char *tag;
    size_t taglen;
    char taghex[2 * KEYHASH_LEN];
    size_t tagidx; /* 1-based index among the request's distinct tags */
} link_names;

static void hex(const unsigned char *d, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";

    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[d[i] >> 4];
        out[2 * i + 1] = digits[d[i] & 15];
    }
}

static int names_of(const rlim_link *l, link_names *nm)
{
    int hashed = 0;

    nm->key = l->key ? l->key : "";
    nm->keylen = l->keylen;
    if (l->keylen > l->def->max_key_len) {
        int rc = keyhash_digest(l->key, l->keylen, nm->digest);

        if (rc != SLUICE_OK)
            return rc;
        nm->key = (const char *)nm->digest;
        nm->keylen = KEYHASH_LEN;
        hashed = 1;
    }
    if (l->tag) {
        nm->tag = l->tag;
        nm->taglen = l->taglen;
    } else if (hashed) { /* the digest's bytes may hold braces: its hex never does */
        hex(nm->digest, KEYHASH_LEN, nm->taghex);
        nm->tag = nm->taghex;
        nm->taglen = sizeof nm->taghex;
        return SLUICE_OK;
    } else if (nm->keylen > 0) {
        nm->tag = nm->key;
        nm->taglen = nm->keylen;
    } else {
        nm->tag = l->limit_id;
        nm->taglen = strlen(l->limit_id);
    }
    if (nm->taglen == 0 || memchr(nm->tag, '{', nm->taglen) || memchr(nm->tag, '}', nm->taglen)) {
        unsigned char d[KEYHASH_LEN];
        int rc = keyhash_digest(nm->tag, nm->taglen, d);

        if (rc != SLUICE_OK)
            return rc;
        hex(d, KEYHASH_LEN, nm->taghex);
        nm->tag = nm->taghex;
        nm->taglen = sizeof nm->taghex;
    }
    return SLUICE_OK;
}

static int link_ok(const rlim_link *l, rlim_op op)
{
    if (!l->def || !l->limit_id || (!l->key && l->keylen > 0) || (!l->tag && l->taglen > 0))
        return 0;
    if (l->def->kind < SLUICE_RATE || l->def->kind > SLUICE_QUOTA)
        return 0;
    /* The script knows no adaptive (AIMD) rate: deciding one as a plain rate would be wrong. */
    if (l->def->decrease_den > 0)
        return 0;
    if ((op == RLIM_DECIDE || op == RLIM_PEEK) && l->units < 1)
        return 0;
    if ((op == RLIM_LEASE_RENEW || op == RLIM_LEASE_RELEASE) && l->def->kind != SLUICE_CONCURRENCY)
        return 0;
    return 1;
}

static int put_tag_key(rlim_batch *b, const link_names *nm, const char *what)
{
    piece pc[4] = {{b->prefix, strlen(b->prefix)}, {":{", 2}, {nm->tag, nm->taglen}, {what, 0}};

    pc[3].len = strlen(what);
    return put_pieces(b, &b->keys, pc, 4);
}

static int add_links(rlim_batch *b, rlim_op op, const rlim_link *links, size_t n,
                     const rlim_args *args, link_names *nm)
{
    static const char *const op_word[] = {"", "D", "P", "N", "R", "S"};
    size_t ntags = 0;
    int rc;

    for (size_t i = 0; i < n; i++) {
        rc = names_of(&links[i], &nm[i]);
        if (rc != SLUICE_OK)
            return rc;
        nm[i].tagidx = 0;
        for (size_t j = 0; j < i; j++) {
            if (nm[j].taglen == nm[i].taglen && memcmp(nm[j].tag, nm[i].tag, nm[i].taglen) == 0) {
                nm[i].tagidx = nm[j].tagidx;
                break;
            }
        }
        if (nm[i].tagidx == 0)
            nm[i].tagidx = ++ntags;
    }
    /* KEYS: the tags' clocks, their audit lists, then the links' states. Tags are numbered
     * in the order of their first link. */
    for (int pass = 0; pass < (b->audit ? 2 : 1); pass++) {
        size_t t = 1;

        for (size_t i = 0; i < n; i++) {
            if (nm[i].tagidx != t)
                continue;
            rc = put_tag_key(b, &nm[i], pass == 0 ? "}:clock" : "}:audit");
            if (rc != SLUICE_OK)
                return rc;
            t++;
        }
    }
    for (size_t i = 0; i < n; i++) {
        char idlen[24];
        size_t id_len = strlen(links[i].limit_id);
        piece pc[8] = {{b->prefix, strlen(b->prefix)},
                       {":{", 2},
                       {nm[i].tag, nm[i].taglen},
                       {"}:", 2},
                       {idlen, 0},
                       {links[i].limit_id, id_len},
                       {":", 1},
                       {nm[i].key, nm[i].keylen}};

        snprintf(idlen, sizeof idlen, "%zu:", id_len);
        pc[4].len = strlen(idlen);
        rc = put_pieces(b, &b->keys, pc, 8);
        if (rc != SLUICE_OK)
            return rc;
    }
    /* ARGV of the request. */
    rc = put_str(b, &b->args, op_word[op]);
    if (rc == SLUICE_OK)
        rc = put_u64(b, &b->args, ntags);
    if (rc == SLUICE_OK)
        rc = put_u64(b, &b->args, n);
    if (rc != SLUICE_OK)
        return rc;
    switch (op) {
    case RLIM_DECIDE:
    case RLIM_PEEK:
        rc = put_i64(b, &b->args, args ? args->ttl_ns : 0);
        if (rc == SLUICE_OK)
            rc = put_str(b, &b->args, "0");
        if (rc == SLUICE_OK)
            rc = put_str(b, &b->args, "0");
        break;
    case RLIM_LEASE_RENEW:
    case RLIM_LEASE_RELEASE:
        rc = put_u64(b, &b->args, args->lease_id);
        if (rc == SLUICE_OK)
            rc = put_i64(b, &b->args, op == RLIM_LEASE_RENEW ? args->ttl_ns : 0);
        if (rc == SLUICE_OK)
            rc = put_str(b, &b->args, "0");
        break;
    case RLIM_SETTLE:
        rc = put_i64(b, &b->args, args->charged_ns);
        if (rc == SLUICE_OK)
            rc = put_i64(b, &b->args, args->estimate);
        if (rc == SLUICE_OK)
            rc = put_i64(b, &b->args, args->actual);
        break;
    }
    for (size_t i = 0; i < n && rc == SLUICE_OK; i++) {
        const sluice_limit_def *d = links[i].def;
        int64_t v[7] = {d->kind,
                        d->limit,
                        d->period_ns,
                        d->burst,
                        d->start_empty != 0,
                        d->ttl_ns,
                        (int64_t)d->calendar};

        for (size_t k = 0; k < 7 && rc == SLUICE_OK; k++)
            rc = put_i64(b, &b->args, v[k]);
        if (rc == SLUICE_OK)
            rc = put_str(b, &b->args, links[i].limit_id);
        if (rc == SLUICE_OK)
            rc = put(b, &b->args, nm[i].key, nm[i].keylen);
        if (rc == SLUICE_OK)
            rc = put_i64(b, &b->args, links[i].units > 0 ? links[i].units : 1);
        if (rc == SLUICE_OK)
            rc = put_u64(b, &b->args, nm[i].tagidx);
    }
    return rc;
}

int rlim_batch_add(rlim_batch *b, rlim_op op, const rlim_link *links, size_t n,
                   const rlim_args *args)
{
    size_t len = b->len, nkeys = b->keys.n, nargs = b->args.n;
    link_names stack[4], *nm = stack;
    void *reqs;
    int rc;

    if (op < RLIM_DECIDE || op > RLIM_SETTLE || !links || n < 1)
        return SLUICE_EINVAL;
    if (op != RLIM_DECIDE && op != RLIM_PEEK && (n != 1 || !args))
        return SLUICE_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!link_ok(&links[i], op))
            return SLUICE_EINVAL;
    if (b->nreqs > (size_t)INT32_MAX)
        return SLUICE_EINVAL;
    reqs = b->reqs;
    rc = grow(&reqs, &b->capreqs, b->nreqs + 1, sizeof(rlim_req));
    b->reqs = reqs;
    if (rc != SLUICE_OK)
        return rc;
    if (n > sizeof stack / sizeof stack[0]) {
        nm = alloc_calloc(n, sizeof *nm);
        if (!nm)
            return SLUICE_ENOMEM;
    }
    rc = add_links(b, op, links, n, args, nm);
    if (nm != stack)
        alloc_free(nm);
    if (rc != SLUICE_OK) {
        b->len = len;
        b->keys.n = nkeys;
        b->args.n = nargs;
        return rc;
    }
    b->reqs[b->nreqs].op = op;
    b->reqs[b->nreqs].nlinks = n;
    return (int)b->nreqs++;
}

/* ---- the command ------------------------------------------------------------------------- */

int rlim_batch_command(rlim_batch *b, const char *sha, int *argc, const char ***argv,
                       const size_t **argvlen)
{
    size_t total = 3 + b->keys.n + RLIM_CALL_ARGS + b->args.n, k = 0;
    void *av, *al;
    size_t cap;
    int rc;

    *argc = 0;
    *argv = NULL;
    *argvlen = NULL;
    if (b->nreqs == 0)
        return SLUICE_EINVAL;
    if (total > (size_t)INT32_MAX)
        return SLUICE_ERANGE;
    av = b->argv;
    al = b->argvlen;
    cap = b->capargv;
    rc = grow(&av, &cap, total, sizeof(const char *));
    b->argv = av;
    if (rc == SLUICE_OK) {
        size_t cap2 = b->capargv;

        rc = grow(&al, &cap2, total, sizeof(size_t));
        b->argvlen = al;
        if (rc == SLUICE_OK)
            b->capargv = cap < cap2 ? cap : cap2;
    }
    if (rc != SLUICE_OK)
        return rc;
    snprintf(b->head[0], sizeof b->head[0], "%zu", b->keys.n);
    snprintf(b->head[1], sizeof b->head[1], "%s", b->audit ? "a" : "");
    if (b->now_ns > 0)
        snprintf(b->head[2], sizeof b->head[2], "%" PRId64, b->now_ns);
    else
        b->head[2][0] = '\0';
    snprintf(b->head[3], sizeof b->head[3], "%zu", b->nreqs);

#define RLIM_ARG(s, l)                                                                             \
    do {                                                                                           \
        b->argv[k] = (s);                                                                          \
        b->argvlen[k] = (l);                                                                       \
        k++;                                                                                       \
    } while (0)
    if (sha) {
        RLIM_ARG("EVALSHA", 7);
        RLIM_ARG(sha, strlen(sha));
    } else {
        RLIM_ARG("EVAL", 4);
        RLIM_ARG(rlim_lua_text, rlim_lua_text_len);
    }
    RLIM_ARG(b->head[0], strlen(b->head[0]));
    for (size_t i = 0; i < b->keys.n; i++)
        RLIM_ARG(b->buf + b->keys.v[i].off, b->keys.v[i].len);
    RLIM_ARG("1", 1);
    RLIM_ARG(b->head[1], strlen(b->head[1]));
    RLIM_ARG(b->head[2], strlen(b->head[2]));
    RLIM_ARG(b->head[3], strlen(b->head[3]));
    for (size_t i = 0; i < b->args.n; i++)
        RLIM_ARG(b->buf + b->args.v[i].off, b->args.v[i].len);
#undef RLIM_ARG
    *argc = (int)k;
    *argv = b->argv;
    *argvlen = b->argvlen;
    return SLUICE_OK;
}

/* ---- the reply --------------------------------------------------------------------------- */

/* Parses a decimal int64 (an optional '-', then 1..19 digits, no overflow). */
static int parse_i64(const redisReply *r, int64_t *out)
{
    uint64_t v = 0, lim;
    size_t i = 0;
    int negative = 0;

    if (!r || r->type != REDIS_REPLY_STRING || r->len == 0 || r->len > 20)
        return SLUICE_EPARSE;
    if (r->str[0] == '-') {
        negative = 1;
        i = 1;
        if (r->len == 1)
            return SLUICE_EPARSE;
    }
    lim = negative ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; i < r->len; i++) {
        unsigned d = (unsigned char)r->str[i] - '0';

        if (d > 9 || v > (lim - d) / 10)
            return SLUICE_EPARSE;
        v = v * 10 + d;
    }
    *out = negative ? (v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v) : (int64_t)v;
    return SLUICE_OK;
}

static int parse_u64(const redisReply *r, uint64_t *out)
{
    uint64_t v = 0;

    if (!r || r->type != REDIS_REPLY_STRING || r->len == 0 || r->len > 20)
        return SLUICE_EPARSE;
    for (size_t i = 0; i < r->len; i++) {
        unsigned d = (unsigned char)r->str[i] - '0';

        if (d > 9 || v > (UINT64_MAX - d) / 10)
            return SLUICE_EPARSE;
        v = v * 10 + d;
    }
    *out = v;
    return SLUICE_OK;
}

/* An integer reply of 0 or 1 (or up to max). */
static int parse_small(const redisReply *r, long long max, long long *out)
{
    if (!r || r->type != REDIS_REPLY_INTEGER || r->integer < 0 || r->integer > max)
        return SLUICE_EPARSE;
    *out = r->integer;
    return SLUICE_OK;
}

static int status_of(const redisReply *r, int *rc)
{
    static const struct {
        const char *word;
        int rc;
    } words[] = {{"OK", SLUICE_OK},
                 {"STALE", SLUICE_ESTALE},
                 {"STATE", SLUICE_ESTATE},
                 {"INVAL", SLUICE_EINVAL}};

    if (!r || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS))
        return SLUICE_EPARSE;
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        if (r->len == strlen(words[i].word) && memcmp(r->str, words[i].word, r->len) == 0) {
            *rc = words[i].rc;
            return SLUICE_OK;
        }
    }
    return SLUICE_EPARSE;
}

static int read_decision(redisReply *const *f, sluice_decision *d)
{
    long long allowed;
    int rc = parse_small(f[0], 1, &allowed);

    memset(d, 0, sizeof *d);
    if (rc == SLUICE_OK)
        rc = parse_i64(f[1], &d->limit);
    if (rc == SLUICE_OK)
        rc = parse_i64(f[2], &d->remaining);
    if (rc == SLUICE_OK)
        rc = parse_i64(f[3], &d->retry_after_ns);
    if (rc == SLUICE_OK)
        rc = parse_i64(f[4], &d->reset_after_ns);
    if (rc == SLUICE_OK)
        rc = parse_u64(f[5], &d->lease_id);
    d->allowed = (int)allowed;
    return rc;
}

static int read_request(const rlim_req *q, const redisReply *r, rlim_result *res,
                        sluice_decision *decisions)
{
    int rc;

    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements < 2)
        return SLUICE_EPARSE;
    rc = status_of(r->element[0], &res->rc);
    if (rc == SLUICE_OK)
        rc = parse_i64(r->element[1], &res->now_ns);
    if (rc != SLUICE_OK)
        return rc;
    res->n = q->nlinks;
    if (res->rc == SLUICE_EINVAL) /* the script's message follows; nothing else */
        return r->elements == 3 ? SLUICE_OK : SLUICE_EPARSE;
    switch (q->op) {
    case RLIM_DECIDE:
    case RLIM_PEEK: {
        long long allowed, denied_by;

        if (res->rc != SLUICE_OK || r->elements != RLIM_DECIDE_HEAD + RLIM_LINK_FIELDS * q->nlinks)
            return SLUICE_EPARSE;
        rc = parse_small(r->element[2], 1, &allowed);
        if (rc == SLUICE_OK)
            rc = parse_small(r->element[3], (long long)q->nlinks - 1, &denied_by);
        if (rc == SLUICE_OK)
            rc = parse_i64(r->element[4], &res->chain.retry_after_ns);
        if (rc != SLUICE_OK)
            return rc;
        res->chain.allowed = (int)allowed;
        res->chain.denied_by = (size_t)denied_by;
        for (size_t i = 0; i < q->nlinks; i++) {
            sluice_decision d;

            rc = read_decision(r->element + RLIM_DECIDE_HEAD + RLIM_LINK_FIELDS * i, &d);
            if (rc != SLUICE_OK)
                return rc;
            if (decisions)
                decisions[i] = d;
        }
        return SLUICE_OK;
    }
    case RLIM_LEASE_RENEW:
        if (r->elements != 3 || (res->rc != SLUICE_OK && res->rc != SLUICE_ESTALE))
            return SLUICE_EPARSE;
        return parse_i64(r->element[2], &res->expires_ns);
    case RLIM_LEASE_RELEASE:
        return r->elements == 2 && (res->rc == SLUICE_OK || res->rc == SLUICE_ESTALE)
                   ? SLUICE_OK
                   : SLUICE_EPARSE;
    case RLIM_SETTLE:
        return r->elements == 2 && (res->rc == SLUICE_OK || res->rc == SLUICE_ESTATE)
                   ? SLUICE_OK
                   : SLUICE_EPARSE;
    }
    return SLUICE_EPARSE;
}

int rlim_batch_result(const rlim_batch *b, const struct redisReply *reply, size_t i,
                      rlim_result *res, sluice_decision *decisions)
{
    int rc;

    memset(res, 0, sizeof *res);
    if (i >= b->nreqs) {
        return SLUICE_EINVAL;
    }
    if (decisions)
        memset(decisions, 0, b->reqs[i].nlinks * sizeof *decisions);
    if (!reply || reply->type != REDIS_REPLY_ARRAY || reply->elements != b->nreqs)
        return SLUICE_EPARSE;
    rc = read_request(&b->reqs[i], reply->element[i], res, decisions);
    if (rc != SLUICE_OK) {
        memset(res, 0, sizeof *res);
        if (decisions)
            memset(decisions, 0, b->reqs[i].nlinks * sizeof *decisions);
    }
    return rc;
}

const char *rlim_script(size_t *len)
{
    if (len)
        *len = rlim_lua_text_len;
    return rlim_lua_text;
}
