/* SPDX-License-Identifier: MIT */
/*
 * The shared part of the task and recur encoders (redis_batch.h): one copy of the life cycle,
 * the roll-back and the command building that both batches need, so that the two script calls
 * cannot drift apart in their layout (numkeys, fixed keys, request keys, family, now, count,
 * arguments; src/store/redis/tasks.lua and recur.lua read it).
 *
 * Invariants: those of redis_batch.h; a failed step leaves the batch as it was.
 */
#include "store/redis_batch.h"

#include <hiredis.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/grow.h"
#include "sluice/error.h"
#include "store/redis_limits.h"

char *rbatch_concat3(const char *a, const char *m, const char *z)
{
    size_t la = strlen(a), lm = strlen(m), lz = strlen(z);
    char *s = alloc_malloc(la + lm + lz + 1);

    if (!s)
        return NULL;
    memcpy(s, a, la);
    memcpy(s + la, m, lm);
    memcpy(s + la + lm, z, lz + 1);
    return s;
}

int rbatch_init(rbatch *c, const char *prefix, const char *const *names, size_t n)
{
    if (!prefix)
        prefix = "sluice";
    if (strchr(prefix, '{') || strchr(prefix, '}') || n > RBATCH_FIXED_MAX)
        return SLUICE_EINVAL;
    c->prefix = rbatch_concat3(prefix, "", "");
    if (!c->prefix)
        return SLUICE_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        c->fixed[i] = rbatch_concat3(prefix, ":{all}:", names[i]);
        if (!c->fixed[i])
            return SLUICE_ENOMEM;
        c->nfixed = i + 1;
    }
    return SLUICE_OK;
}

void rbatch_fini(rbatch *c)
{
    alloc_free(c->prefix);
    for (size_t i = 0; i < c->nfixed; i++)
        alloc_free(c->fixed[i]);
    alloc_free(c->ops);
    alloc_free(c->a.buf);
    alloc_free(c->keys.v);
    alloc_free(c->args.v);
    alloc_free(c->argv);
    alloc_free(c->argvlen);
}

void rbatch_reset(rbatch *c)
{
    c->nreqs = 0;
    c->a.len = 0;
    c->keys.n = 0;
    c->args.n = 0;
}

rbatch_mark rbatch_mark_of(const rbatch *c)
{
    rbatch_mark m = {c->a.len, c->keys.n, c->args.n};

    return m;
}

void rbatch_roll_back(rbatch *c, rbatch_mark m)
{
    c->a.len = m.len;
    c->keys.n = m.nkeys;
    c->args.n = m.nargs;
}

int rbatch_finish(rbatch *c, int op, rbatch_mark m, int rc)
{
    if (rc == SLUICE_OK && c->nreqs >= (size_t)INT32_MAX)
        rc = SLUICE_EINVAL;
    if (rc == SLUICE_OK)
        rc = grow_array(&c->ops, &c->capops, c->nreqs + 1, sizeof(*c->ops), 16);
    if (rc != SLUICE_OK) {
        rbatch_roll_back(c, m);
        return rc;
    }
    c->ops[c->nreqs] = op;
    return (int)c->nreqs++;
}

int rbatch_op(const rbatch *c, size_t i)
{
    return i < c->nreqs ? c->ops[i] : 0;
}

int rbatch_put_fmt(rbatch *c, packed_list *list, const char *fmt, ...)
{
    char text[64];
    va_list ap;
    int len;

    va_start(ap, fmt);
    len = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (len < 0 || (size_t)len >= sizeof text)
        return SLUICE_EINVAL;
    return packed_put(&c->a, list, text, (size_t)len);
}

int rbatch_command(rbatch *c, const char *sha, const char *family, int *argc, const char ***argv,
                   const size_t **argvlen)
{
    size_t total = 3 + c->nfixed + c->keys.n + 3 + c->nextra + c->args.n, k = 0;
    size_t cap1, cap2;
    int rc;

    *argc = 0;
    *argv = NULL;
    *argvlen = NULL;
    if (c->nreqs == 0)
        return SLUICE_EINVAL;
    if (total > (size_t)INT32_MAX)
        return SLUICE_ERANGE;
    cap1 = cap2 = c->capargv;
    rc = grow_array(&c->argv, &cap1, total, sizeof(const char *), 32);
    if (rc == SLUICE_OK)
        rc = grow_array(&c->argvlen, &cap2, total, sizeof(size_t), 32);
    /* One grown and the other not: the common capacity is the smaller. */
    if (rc == SLUICE_OK || cap1 != c->capargv || cap2 != c->capargv)
        c->capargv = cap1 < cap2 ? cap1 : cap2;
    if (rc != SLUICE_OK)
        return rc;
    snprintf(c->head[0], sizeof c->head[0], "%zu", c->nfixed + c->keys.n);
    if (c->now_ns > 0)
        snprintf(c->head[1], sizeof c->head[1], "%" PRId64, c->now_ns);
    else
        c->head[1][0] = '\0';
    snprintf(c->head[2], sizeof c->head[2], "%zu", c->nreqs);
#define RBATCH_ARG(s, l)                                                                           \
    do {                                                                                           \
        c->argv[k] = (s);                                                                          \
        c->argvlen[k] = (l);                                                                       \
        k++;                                                                                       \
    } while (0)
    if (sha) {
        RBATCH_ARG("EVALSHA", 7);
        RBATCH_ARG(sha, strlen(sha));
    } else {
        size_t len;
        const char *text = rlim_script(&len);

        RBATCH_ARG("EVAL", 4);
        RBATCH_ARG(text, len);
    }
    RBATCH_ARG(c->head[0], strlen(c->head[0]));
    for (size_t i = 0; i < c->nfixed; i++)
        RBATCH_ARG(c->fixed[i], strlen(c->fixed[i]));
    for (size_t i = 0; i < c->keys.n; i++)
        RBATCH_ARG(c->a.buf + c->keys.v[i].off, c->keys.v[i].len);
    RBATCH_ARG(family, strlen(family));
    RBATCH_ARG(c->head[1], strlen(c->head[1]));
    RBATCH_ARG(c->head[2], strlen(c->head[2]));
    for (size_t i = 0; i < c->nextra; i++)
        RBATCH_ARG(c->extra[i], strlen(c->extra[i]));
    for (size_t i = 0; i < c->args.n; i++)
        RBATCH_ARG(c->a.buf + c->args.v[i].off, c->args.v[i].len);
#undef RBATCH_ARG
    *argc = (int)k;
    *argv = c->argv;
    *argvlen = c->argvlen;
    return SLUICE_OK;
}

int rbatch_word_is(const char *s, size_t len, const char *w)
{
    return len == strlen(w) && memcmp(s, w, len) == 0;
}

int rbatch_reply_head(const rbatch *c, const redisReply *reply, size_t i, const redisReply **r,
                      packed_fields *f)
{
    const redisReply *h;

    if (i >= c->nreqs)
        return SLUICE_EINVAL;
    if (!reply || reply->type != REDIS_REPLY_ARRAY || reply->elements != c->nreqs)
        return SLUICE_EPARSE;
    *r = reply->element[i];
    if (!*r || (*r)->type != REDIS_REPLY_ARRAY || (*r)->elements < 1)
        return SLUICE_EPARSE;
    h = (*r)->element[0];
    if (!h || h->type != REDIS_REPLY_STRING)
        return SLUICE_EPARSE;
    packed_fields_init(f, h->str, h->len);
    return SLUICE_OK;
}

int rbatch_bulk(const redisReply *r, const char **s, size_t *len)
{
    if (!r || r->type != REDIS_REPLY_STRING)
        return SLUICE_EPARSE;
    *s = r->str;
    *len = r->len;
    return SLUICE_OK;
}
