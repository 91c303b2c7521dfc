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
#include "base/dec.h"
#include "core/adapt.h"
#include "core/keyhash.h"
#include "base/grow.h"
#include "sluice/error.h"
#include "store/packed.h"

/* Defined by the file CMake generates from src/store/redis/limits.lua (cmake/embed_text.cmake). */
extern const char rlim_lua_text[];
extern const size_t rlim_lua_text_len;

/* Arguments of the call before the definitions: protocol, flags, now, request count, definition
 * count. */
#define RLIM_CALL_ARGS 5

typedef struct rlim_req {
    rlim_op op;
    size_t nlinks;
    size_t key0, nkeys; /* its keys: keys.v[key0 .. key0 + nkeys) (a part names them alone) */
} rlim_req;

struct rlim_batch {
    char *prefix;
    int audit;
    int64_t now_ns; /* injected time; 0: Redis TIME */
    rlim_req *reqs;
    size_t nreqs;
    size_t capreqs;
    packed_arena a; /* every key's and argument's bytes */
    packed_list keys;
    packed_list defs; /* each distinct limit definition of the batch, once */
    uint64_t *dhash;  /* a hash of each definition's text, to find it again quickly */
    size_t capdhash;
    /* The definition of the last link added (a batch mostly repeats it): its fields as its text
     * shows them, its shadow flag, and its 1-based index in defs (0: none yet), so that a repeat
     * is found without formatting the text. */
    sluice_limit_def last_def;
    int last_shadow;
    size_t last_idx;
    packed_list args;  /* one string per request */
    const char **argv; /* the command of rlim_batch_command */
    size_t *argvlen;
    size_t capargv;
    char head[5][24]; /* its numkeys, flags, now, request and definition counts */
};

/* ---- growth ------------------------------------------------------------------------------ */

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
    b->a.len = 0;
    b->keys.n = 0;
    b->defs.n = 0;
    b->args.n = 0;
    b->last_idx = 0;
}

void rlim_batch_free(rlim_batch *b)
{
    if (!b)
        return;
    alloc_free(b->prefix);
    alloc_free(b->reqs);
    alloc_free(b->a.buf);
    alloc_free(b->keys.v);
    alloc_free(b->defs.v);
    alloc_free(b->dhash);
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

static void hex(const unsigned char *d, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";

    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[d[i] >> 4];
        out[2 * i + 1] = digits[d[i] & 15];
    }
}

int rlim_link_names(const rlim_link *l, rlim_names *nm)
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

int rlim_link_ok(const rlim_link *l, rlim_op op)
{
    if (!l->def || !l->limit_id || (!l->key && l->keylen > 0) || (!l->tag && l->taglen > 0))
        return 0;
    if (l->def->kind < SLUICE_RATE || l->def->kind > SLUICE_QUOTA)
        return 0;
    if ((op == RLIM_DECIDE || op == RLIM_PEEK) && l->units < 1)
        return 0;
    if ((op == RLIM_LEASE_RENEW || op == RLIM_LEASE_RELEASE) && l->def->kind != SLUICE_CONCURRENCY)
        return 0;
    return 1;
}

static int put_tag_key(rlim_batch *b, const rlim_names *nm, const char *what)
{
    packed_piece pc[4] = {
        {b->prefix, strlen(b->prefix)}, {":{", 2}, {nm->tag, nm->taglen}, {what, 0}};

    pc[3].len = strlen(what);
    return packed_put_pieces(&b->a, &b->keys, pc, 4);
}

int rlim_def_adaptive(const sluice_limit_def *d)
{
    return d->kind == SLUICE_RATE && d->decrease_den > 0;
}

int rlim_def_text(const sluice_limit_def *d, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%d %" PRId64 " %" PRId64 " %" PRId64 " %d %" PRId64 " %" PRId64,
                     (int)d->kind, d->limit, d->period_ns, d->burst, d->start_empty != 0, d->ttl_ns,
                     (int64_t)d->calendar);
    adapt a;

    if (n < 0 || (size_t)n >= len || !rlim_def_adaptive(d))
        return n;
    adapt_init(&a, d);
    return n + snprintf(buf + n, len - (size_t)n,
                        " a %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64, a.floor,
                        a.num, a.den, a.step, a.every_ns);
}

int rlim_link_def_text(const rlim_link *l, char *buf, size_t len)
{
    int n = rlim_def_text(l->def, buf, len);

    if (l->shadow && n >= 0 && (size_t)n + 2 < len) {
        memcpy(buf + n, " s", 3);
        n += 2;
    }
    return n;
}

/* FNV-1a: only to skip most byte comparisons when looking a definition up. */
static uint64_t def_hash(const char *s, size_t len)
{
    uint64_t h = 14695981039346656037u;

    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211u;
    return h;
}

/* The 1-based index of def's text among the batch's definitions, appending it when new. */
static int def_lookup(rlim_batch *b, const rlim_link *l, size_t *idx)
{
    char text[RLIM_DEF_TEXT_MAX];
    int len = rlim_link_def_text(l, text, sizeof text);
    uint64_t h = def_hash(text, (size_t)len);
    void *dh = b->dhash;
    int rc;

    for (size_t i = b->defs.n; i-- > 0;) { /* newest first: a batch mostly repeats its last */
        if (b->dhash[i] == h && b->defs.v[i].len == (size_t)len &&
            memcmp(b->a.buf + b->defs.v[i].off, text, (size_t)len) == 0) {
            *idx = i + 1;
            return SLUICE_OK;
        }
    }
    rc = grow_array(&dh, &b->capdhash, b->defs.n + 1, sizeof(uint64_t), 16);
    b->dhash = dh;
    if (rc == SLUICE_OK)
        rc = packed_put(&b->a, &b->defs, text, (size_t)len);
    if (rc != SLUICE_OK)
        return rc;
    b->dhash[b->defs.n - 1] = h;
    *idx = b->defs.n;
    return SLUICE_OK;
}

/* 1 when a and b have the same text (rlim_def_text): the fields it shows are equal. */
static int def_same_text(const sluice_limit_def *a, const sluice_limit_def *b)
{
    return a->kind == b->kind && a->limit == b->limit && a->period_ns == b->period_ns &&
           a->burst == b->burst && (a->start_empty != 0) == (b->start_empty != 0) &&
           a->ttl_ns == b->ttl_ns && a->calendar == b->calendar &&
           a->decrease_num == b->decrease_num && a->decrease_den == b->decrease_den &&
           a->recover_pct == b->recover_pct && a->recover_ns == b->recover_ns &&
           a->floor_permits == b->floor_permits && a->floor_period_ns == b->floor_period_ns;
}

/* The 1-based index of def's text among the batch's definitions, appending it when new. The
 * text, not the pointer, identifies a definition: a def may be freed and its memory reused
 * between two adds (so the last one is compared field by field, never by its address). */
static int def_index(rlim_batch *b, const rlim_link *l, size_t *idx)
{
    int rc;

    if (b->last_idx > 0 && b->last_shadow == (l->shadow != 0) &&
        def_same_text(&b->last_def, l->def)) {
        *idx = b->last_idx;
        return SLUICE_OK;
    }
    rc = def_lookup(b, l, idx);
    if (rc == SLUICE_OK) {
        b->last_def = *l->def;
        b->last_shadow = l->shadow != 0;
        b->last_idx = *idx;
    }
    return rc;
}

int rlim_request_head(rlim_op op, const rlim_args *args, const char *counts, char *buf, size_t cap)
{
    static const char op_letter[] = " DPNRSBK";
    size_t clen = strlen(counts), n = 0;
    int64_t a[3] = {0, 0, 0};

    if (cap < clen + 4 + 3 * (DEC_MAX + 1))
        return -1;
    buf[n++] = op_letter[op];
    buf[n++] = ' ';
    memcpy(buf + n, counts, clen);
    n += clen;
    switch (op) {
    case RLIM_DECIDE:
    case RLIM_PEEK:
        a[0] = args ? args->ttl_ns : 0;
        break;
    case RLIM_LEASE_RENEW:
    case RLIM_LEASE_RELEASE: /* a1 is the lease id, unsigned */
        buf[n++] = ' ';
        n += dec_u64(buf + n, args->lease_id);
        buf[n++] = ' ';
        n += dec_i64(buf + n, op == RLIM_LEASE_RENEW ? args->ttl_ns : 0);
        memcpy(buf + n, " 0", 3);
        return (int)n + 2;
    case RLIM_SETTLE:
        a[0] = args->charged_ns;
        a[1] = args->estimate;
        a[2] = args->actual;
        break;
    case RLIM_BACKOFF:
        a[0] = args->wait_ns;
        break;
    case RLIM_RATE:
        break;
    }
    for (int i = 0; i < 3; i++) {
        buf[n++] = ' ';
        n += dec_i64(buf + n, a[i]);
    }
    buf[n] = '\0';
    return (int)n;
}

static int add_links(rlim_batch *b, rlim_op op, const rlim_link *links, size_t n,
                     const rlim_args *args, rlim_names *nm)
{
    size_t ntags = 0;
    int rc;

    for (size_t i = 0; i < n; i++) {
        rc = rlim_link_names(&links[i], &nm[i]);
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
        char idlen[DEC_MAX + 2], gen[DEC_MAX + 3] = "";
        size_t id_len = strlen(links[i].limit_id);
        packed_piece pc[9] = {{b->prefix, strlen(b->prefix)},
                              {":{", 2},
                              {nm[i].tag, nm[i].taglen},
                              {"}:", 2},
                              {gen, 0},
                              {idlen, 0},
                              {links[i].limit_id, id_len},
                              {":", 1},
                              {nm[i].key, nm[i].keylen}};

        if (links[i].gen > 0) {
            gen[0] = 'R';
            pc[4].len = 1 + dec_u64(gen + 1, links[i].gen);
            gen[pc[4].len++] = ':';
        }
        pc[5].len = dec_u64(idlen, id_len);
        idlen[pc[5].len++] = ':';
        rc = packed_put_pieces(&b->a, &b->keys, pc, 9);
        if (rc != SLUICE_OK)
            return rc;
    }
    /* ARGV of the request: one string "op T N a1 a2 a3" then "def tag units" per link. */
    {
        char stack[512], *str = stack;
        size_t cap = 128 + 64 * n, len = 0;
        char counts[2 * DEC_MAX + 2];
        size_t cl = dec_u64(counts, ntags);

        counts[cl++] = ' ';
        counts[cl + dec_u64(counts + cl, n)] = '\0';
        if (cap > sizeof stack) {
            str = alloc_malloc(cap);
            if (!str)
                return SLUICE_ENOMEM;
        }
        len = (size_t)rlim_request_head(op, args, counts, str, cap);
        rc = SLUICE_OK;
        for (size_t i = 0; i < n && rc == SLUICE_OK; i++) {
            size_t def;

            rc = def_index(b, &links[i], &def);
            if (rc != SLUICE_OK)
                break;
            str[len++] = ' ';
            len += dec_u64(str + len, def);
            str[len++] = ' ';
            len += dec_u64(str + len, nm[i].tagidx);
            str[len++] = ' ';
            len += dec_i64(str + len, links[i].units > 0 ? links[i].units : 1);
        }
        if (rc == SLUICE_OK)
            rc = packed_put(&b->a, &b->args, str, len);
        if (str != stack)
            alloc_free(str);
    }
    return rc;
}

int rlim_batch_add(rlim_batch *b, rlim_op op, const rlim_link *links, size_t n,
                   const rlim_args *args)
{
    size_t len = b->a.len, nkeys = b->keys.n, ndefs = b->defs.n, nargs = b->args.n;
    rlim_names stack[4], *nm = stack;
    void *reqs;
    int rc;

    if (op < RLIM_DECIDE || op > RLIM_OP_LAST || !links || n < 1)
        return SLUICE_EINVAL;
    if (op != RLIM_DECIDE && op != RLIM_PEEK && (n != 1 || !args))
        return SLUICE_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!rlim_link_ok(&links[i], op))
            return SLUICE_EINVAL;
    if (b->nreqs > (size_t)INT32_MAX)
        return SLUICE_EINVAL;
    reqs = b->reqs;
    rc = grow_array(&reqs, &b->capreqs, b->nreqs + 1, sizeof(rlim_req), 16);
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
        b->a.len = len;
        b->keys.n = nkeys;
        b->defs.n = ndefs;
        b->args.n = nargs;
        if (b->last_idx > ndefs) /* it named a definition just taken back */
            b->last_idx = 0;
        return rc;
    }
    b->reqs[b->nreqs].op = op;
    b->reqs[b->nreqs].nlinks = n;
    b->reqs[b->nreqs].key0 = nkeys;
    b->reqs[b->nreqs].nkeys = b->keys.n - nkeys;
    return (int)b->nreqs++;
}

/* ---- the command ------------------------------------------------------------------------- */

/* Makes room for total arguments in (*argv, *argvlen, *cap). */
static int argv_room(const char ***argv, size_t **argvlen, size_t *cap, size_t total)
{
    void *av = *argv, *al = *argvlen;
    size_t cap1 = *cap, cap2 = *cap;
    int rc = grow_array(&av, &cap1, total, sizeof(const char *), 16);

    *argv = av;
    if (rc == SLUICE_OK) {
        rc = grow_array(&al, &cap2, total, sizeof(size_t), 16);
        *argvlen = al;
        if (rc == SLUICE_OK)
            *cap = cap1 < cap2 ? cap1 : cap2;
    }
    return rc;
}

/* Builds a command of the batch into (argv, argvlen), heads in head: the requests reqs[0..n)
 * (NULL: every request, in order), their keys declared (protocol "2"), or, when cross is set,
 * declared none and following the requests (protocol "2x", limits.lua: the keys of a call
 * across slots). */
static int build_command(rlim_batch *b, const char *sha, const size_t *reqs, size_t n, int cross,
                         const char ***pargv, size_t **pargvlen, size_t *cap, char (*head)[24],
                         int *argc)
{
    size_t nkeys = 0, total, k = 0;
    const char **argv;
    size_t *argvlen;
    int rc;

    *argc = 0;
    if (n == 0)
        return SLUICE_EINVAL;
    for (size_t j = 0; j < n; j++) {
        size_t i = reqs ? reqs[j] : j;

        if (i >= b->nreqs)
            return SLUICE_EINVAL;
        nkeys += b->reqs[i].nkeys;
    }
    total = 3 + nkeys + RLIM_CALL_ARGS + b->defs.n + n;
    if (total > (size_t)INT32_MAX)
        return SLUICE_ERANGE;
    rc = argv_room(pargv, pargvlen, cap, total);
    if (rc != SLUICE_OK)
        return rc;
    argv = *pargv;
    argvlen = *pargvlen;
    snprintf(head[0], 24, "%zu", cross ? (size_t)0 : nkeys);
    snprintf(head[1], 24, "%s", b->audit ? "a" : "");
    if (b->now_ns > 0)
        snprintf(head[2], 24, "%" PRId64, b->now_ns);
    else
        head[2][0] = '\0';
    snprintf(head[3], 24, "%zu", n);
    snprintf(head[4], 24, "%zu", b->defs.n);

#define RLIM_ARG(s, l)                                                                             \
    do {                                                                                           \
        argv[k] = (s);                                                                             \
        argvlen[k] = (l);                                                                          \
        k++;                                                                                       \
    } while (0)
#define RLIM_KEYS()                                                                                \
    for (size_t j = 0; j < n; j++) {                                                               \
        const rlim_req *q = &b->reqs[reqs ? reqs[j] : j];                                          \
        for (size_t x = q->key0; x < q->key0 + q->nkeys; x++)                                      \
            RLIM_ARG(b->a.buf + b->keys.v[x].off, b->keys.v[x].len);                               \
    }
    if (sha) {
        RLIM_ARG("EVALSHA", 7);
        RLIM_ARG(sha, strlen(sha));
    } else {
        RLIM_ARG("EVAL", 4);
        RLIM_ARG(rlim_lua_text, rlim_lua_text_len);
    }
    RLIM_ARG(head[0], strlen(head[0]));
    if (!cross)
        RLIM_KEYS();
    if (cross)
        RLIM_ARG("2x", 2);
    else
        RLIM_ARG("2", 1);
    for (size_t i = 1; i < 5; i++)
        RLIM_ARG(head[i], strlen(head[i]));
    for (size_t i = 0; i < b->defs.n; i++)
        RLIM_ARG(b->a.buf + b->defs.v[i].off, b->defs.v[i].len);
    for (size_t j = 0; j < n; j++) {
        size_t i = reqs ? reqs[j] : j;

        RLIM_ARG(b->a.buf + b->args.v[i].off, b->args.v[i].len);
    }
    if (cross)
        RLIM_KEYS();
#undef RLIM_KEYS
#undef RLIM_ARG
    *argc = (int)k;
    return SLUICE_OK;
}

int rlim_batch_command(rlim_batch *b, const char *sha, int *argc, const char ***argv,
                       const size_t **argvlen)
{
    int rc =
        build_command(b, sha, NULL, b->nreqs, 0, &b->argv, &b->argvlen, &b->capargv, b->head, argc);

    *argv = rc == SLUICE_OK ? b->argv : NULL;
    *argvlen = rc == SLUICE_OK ? b->argvlen : NULL;
    return rc;
}

int rlim_batch_command_cross(rlim_batch *b, const char *sha, int *argc, const char ***argv,
                             const size_t **argvlen)
{
    int rc =
        build_command(b, sha, NULL, b->nreqs, 1, &b->argv, &b->argvlen, &b->capargv, b->head, argc);

    *argv = rc == SLUICE_OK ? b->argv : NULL;
    *argvlen = rc == SLUICE_OK ? b->argvlen : NULL;
    return rc;
}

int rlim_batch_command_part(rlim_batch *b, const char *sha, const size_t *reqs, size_t n, int cross,
                            rlim_cmd *out)
{
    if (!reqs)
        return SLUICE_EINVAL;
    return build_command(b, sha, reqs, n, cross, &out->argv, &out->argvlen, &out->cap, out->head,
                         &out->argc);
}

void rlim_cmd_free(rlim_cmd *c)
{
    if (!c)
        return;
    alloc_free(c->argv);
    alloc_free(c->argvlen);
    memset(c, 0, sizeof(*c));
}

/* ---- the reply --------------------------------------------------------------------------- */

/* A field holding 0..max. */
static int parse_small(packed_fields *f, long long max, long long *out)
{
    int64_t v;

    if (packed_i64(f, &v) != SLUICE_OK || v < 0 || v > max)
        return SLUICE_EPARSE;
    *out = (long long)v;
    return SLUICE_OK;
}

static int status_of(packed_fields *f, int *rc)
{
    static const struct {
        const char *word;
        int rc;
    } words[] = {{"OK", SLUICE_OK},
                 {"STALE", SLUICE_ESTALE},
                 {"STATE", SLUICE_ESTATE},
                 {"INVAL", SLUICE_EINVAL}};
    const char *s;
    size_t len;

    if (packed_next(f, &s, &len) != SLUICE_OK)
        return SLUICE_EPARSE;
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        if (len == strlen(words[i].word) && memcmp(s, words[i].word, len) == 0) {
            *rc = words[i].rc;
            return SLUICE_OK;
        }
    }
    return SLUICE_EPARSE;
}

static int read_decision(packed_fields *f, sluice_decision *d)
{
    long long allowed;
    int rc = parse_small(f, 2, &allowed); /* 2: a shadow link's pass */

    memset(d, 0, sizeof *d);
    if (rc == SLUICE_OK)
        rc = packed_i64(f, &d->limit);
    if (rc == SLUICE_OK)
        rc = packed_i64(f, &d->remaining);
    if (rc == SLUICE_OK)
        rc = packed_i64(f, &d->retry_after_ns);
    if (rc == SLUICE_OK)
        rc = packed_i64(f, &d->reset_after_ns);
    if (rc == SLUICE_OK)
        rc = packed_u64(f, &d->lease_id);
    d->allowed = allowed != 0;
    d->shadow_denied = allowed == 2;
    return rc;
}

/* One request's reply: a string "STATUS now [fields]" (redis/limits.lua). */
static int read_request(const rlim_req *q, const redisReply *r, rlim_result *res,
                        sluice_decision *decisions)
{
    if (!r || r->type != REDIS_REPLY_STRING)
        return SLUICE_EPARSE;
    return rlim_parse_answer(q->op, q->nlinks, r->str, r->len, res, decisions);
}

int rlim_parse_answer(rlim_op op, size_t nlinks, const char *s, size_t len, rlim_result *res,
                      sluice_decision *decisions)
{
    packed_fields f;
    int rc;

    f.p = s;
    f.end = s + len;
    rc = status_of(&f, &res->rc);
    if (rc == SLUICE_OK)
        rc = packed_i64(&f, &res->now_ns);
    if (rc != SLUICE_OK)
        return rc;
    res->n = nlinks;
    if (res->rc == SLUICE_EINVAL) /* the script's message follows (it may be empty) */
        return packed_at_end(&f) ? SLUICE_EPARSE : SLUICE_OK;
    switch (op) {
    case RLIM_DECIDE:
    case RLIM_PEEK: {
        long long allowed, denied_by;

        if (res->rc != SLUICE_OK)
            return SLUICE_EPARSE;
        rc = parse_small(&f, 1, &allowed);
        if (rc == SLUICE_OK)
            rc = parse_small(&f, (long long)nlinks - 1, &denied_by);
        if (rc == SLUICE_OK)
            rc = packed_i64(&f, &res->chain.retry_after_ns);
        if (rc != SLUICE_OK)
            return rc;
        res->chain.allowed = (int)allowed;
        res->chain.denied_by = (size_t)denied_by;
        for (size_t i = 0; i < nlinks; i++) {
            sluice_decision d;

            rc = read_decision(&f, &d);
            if (rc != SLUICE_OK)
                return rc;
            if (decisions)
                decisions[i] = d;
        }
        return packed_at_end(&f) ? SLUICE_OK : SLUICE_EPARSE;
    }
    case RLIM_LEASE_RENEW:
        if (res->rc != SLUICE_OK && res->rc != SLUICE_ESTALE)
            return SLUICE_EPARSE;
        rc = packed_i64(&f, &res->expires_ns);
        return rc == SLUICE_OK && packed_at_end(&f) ? SLUICE_OK : SLUICE_EPARSE;
    case RLIM_LEASE_RELEASE:
        return packed_at_end(&f) && (res->rc == SLUICE_OK || res->rc == SLUICE_ESTALE)
                   ? SLUICE_OK
                   : SLUICE_EPARSE;
    case RLIM_SETTLE:
        return packed_at_end(&f) && (res->rc == SLUICE_OK || res->rc == SLUICE_ESTATE)
                   ? SLUICE_OK
                   : SLUICE_EPARSE;
    case RLIM_BACKOFF:
        if (res->rc != SLUICE_OK)
            return SLUICE_EPARSE;
        rc = packed_i64(&f, &res->slot_ns);
        return rc == SLUICE_OK && packed_at_end(&f) ? SLUICE_OK : SLUICE_EPARSE;
    case RLIM_RATE:
        if (res->rc != SLUICE_OK)
            return SLUICE_EPARSE;
        rc = packed_i64(&f, &res->permits);
        if (rc == SLUICE_OK)
            rc = packed_i64(&f, &res->since_ns);
        return rc == SLUICE_OK && packed_at_end(&f) ? SLUICE_OK : SLUICE_EPARSE;
    }
    return SLUICE_EPARSE;
}

int rlim_batch_result(const rlim_batch *b, const struct redisReply *reply, size_t i,
                      rlim_result *res, sluice_decision *decisions)
{
    return rlim_batch_result_in(b, reply, b->nreqs, i, i, res, decisions);
}

int rlim_batch_result_in(const rlim_batch *b, const struct redisReply *reply, size_t nsent,
                         size_t j, size_t i, rlim_result *res, sluice_decision *decisions)
{
    int rc;

    memset(res, 0, sizeof *res);
    if (i >= b->nreqs || j >= nsent) {
        return SLUICE_EINVAL;
    }
    if (decisions)
        memset(decisions, 0, b->reqs[i].nlinks * sizeof *decisions);
    if (!reply || reply->type != REDIS_REPLY_ARRAY || reply->elements != nsent)
        return SLUICE_EPARSE;
    rc = read_request(&b->reqs[i], reply->element[j], res, decisions);
    if (rc != SLUICE_OK) {
        memset(res, 0, sizeof *res);
        if (decisions)
            memset(decisions, 0, b->reqs[i].nlinks * sizeof *decisions);
    }
    return rc;
}

/* The concatenation of n pieces as a new NUL-terminated string. */
static char *joined(const packed_piece *pc, size_t n, size_t *len)
{
    size_t total = 0;
    char *s;

    for (size_t i = 0; i < n; i++)
        total += pc[i].len;
    s = alloc_malloc(total + 1);
    if (!s)
        return NULL;
    *len = 0;
    for (size_t i = 0; i < n; i++) {
        if (pc[i].len > 0)
            memcpy(s + *len, pc[i].p, pc[i].len);
        *len += pc[i].len;
    }
    s[*len] = '\0';
    return s;
}

int rlim_link_keys(const char *prefix, const rlim_link *l, char **state_key, size_t *state_len,
                   char **clock_key, size_t *clock_len)
{
    rlim_names nm;
    char idlen[24], gen[28] = "";
    size_t id_len;
    int rc;

    *state_key = NULL;
    *clock_key = NULL;
    *state_len = 0;
    *clock_len = 0;
    if (!prefix)
        prefix = "sluice";
    if (strchr(prefix, '{') || strchr(prefix, '}') || !rlim_link_ok(l, RLIM_DECIDE))
        return SLUICE_EINVAL;
    rc = rlim_link_names(l, &nm);
    if (rc != SLUICE_OK)
        return rc;
    id_len = strlen(l->limit_id);
    snprintf(idlen, sizeof idlen, "%zu:", id_len);
    if (l->gen > 0)
        snprintf(gen, sizeof gen, "R%" PRIu64 ":", l->gen);
    {
        packed_piece sk[9] = {{prefix, strlen(prefix)}, {":{", 2},
                              {nm.tag, nm.taglen},      {"}:", 2},
                              {gen, strlen(gen)},       {idlen, strlen(idlen)},
                              {l->limit_id, id_len},    {":", 1},
                              {nm.key, nm.keylen}};
        packed_piece ck[4] = {
            {prefix, strlen(prefix)}, {":{", 2}, {nm.tag, nm.taglen}, {"}:clock", 7}};

        *state_key = joined(sk, 9, state_len);
        *clock_key = joined(ck, 4, clock_len);
    }
    if (!*state_key || !*clock_key) {
        alloc_free(*state_key);
        alloc_free(*clock_key);
        *state_key = NULL;
        *clock_key = NULL;
        *state_len = 0;
        *clock_len = 0;
        return SLUICE_ENOMEM;
    }
    return SLUICE_OK;
}

const char *rlim_script(size_t *len)
{
    if (len)
        *len = rlim_lua_text_len;
    return rlim_lua_text;
}
