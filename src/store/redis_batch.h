/* SPDX-License-Identifier: MIT */
/*
 * The part of a batched call of the store script that the task and recur encoders share
 * (redis_tasks.c, redis_recur.c): the prefix and the fixed keys built once, the arena that
 * collects request keys and arguments as spans, the roll-back of a failed request, and the
 * building of the EVAL / EVALSHA command. Each encoder embeds one rbatch and keeps its own list
 * of ops; its command differs from the other's only in the word that names its op family
 * ("T1", "R1") and in its fixed keys. Pure: no I/O.
 *
 * Invariants:
 * - fixed[0..nfixed) are "<prefix>:{all}:<name>", built by rbatch_init and never changed;
 * - the command's argument vector is reused from call to call and points into the batch (valid
 *   until the next change of the batch).
 */
#ifndef SLUICE_STORE_REDIS_BATCH_H
#define SLUICE_STORE_REDIS_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "store/packed.h"

struct redisReply; /* hiredis */

/* The most fixed keys an encoder has (recur.lua's 13). */
#define RBATCH_FIXED_MAX 16

typedef struct rbatch {
    char *prefix;                  /* the key prefix, owned */
    char *fixed[RBATCH_FIXED_MAX]; /* "<prefix>:{all}:<name>", owned */
    size_t nfixed;                 /* how many of fixed are used */
    int64_t now_ns;                /* injected time; 0: Redis TIME */
    size_t nreqs;                  /* requests in the batch */
    int *ops;                      /* each request's op (the encoder's enum) */
    size_t capops;
    packed_arena a;    /* every key's and argument's bytes */
    packed_list keys;  /* the request keys, after the fixed ones */
    packed_list args;  /* the request arguments */
    const char **argv; /* the last command built */
    size_t *argvlen;
    size_t capargv;
    char head[3][24];  /* numkeys, now, request count */
    char extra[2][24]; /* call-level arguments after the request count (the task caps) */
    size_t nextra;     /* how many of extra are sent (0: none); kept across resets */
} rbatch;

/* The sizes to roll a batch back to when a request fails half-way. */
typedef struct rbatch_mark {
    size_t len, nkeys, nargs;
} rbatch_mark;

/* a, m and z joined, in a new string (alloc_free it); NULL when out of memory. */
char *rbatch_concat3(const char *a, const char *m, const char *z);

/* Fills a zeroed c for `prefix` (NULL: "sluice") and the n fixed key names (n <=
 * RBATCH_FIXED_MAX). Returns 0, SLUICE_EINVAL (a prefix with '{' or '}') or SLUICE_ENOMEM;
 * after a failure rbatch_fini(c) frees what was built. */
int rbatch_init(rbatch *c, const char *prefix, const char *const *names, size_t n);

/* Frees what c owns (not c itself). */
void rbatch_fini(rbatch *c);

/* Empties c of requests, keeping its prefix, fixed keys and memory. */
void rbatch_reset(rbatch *c);

rbatch_mark rbatch_mark_of(const rbatch *c);
void rbatch_roll_back(rbatch *c, rbatch_mark m);

/* Ends a request of op `op` begun at mark m: records it and returns its index, or on rc (or
 * SLUICE_EINVAL past INT32_MAX requests, SLUICE_ENOMEM) rolls c back to m and returns that. */
int rbatch_finish(rbatch *c, int op, rbatch_mark m, int rc);

/* Request i's op, or 0 when there is no request i. */
int rbatch_op(const rbatch *c, size_t i);

/* Appends the printf text of fmt (at most 63 bytes) to list. Returns 0, SLUICE_EINVAL (too
 * long) or SLUICE_ENOMEM. */
int rbatch_put_fmt(rbatch *c, packed_list *list, const char *fmt, ...);

/* Builds EVALSHA sha (NULL: EVAL with the script's text) with the fixed keys, the request keys,
 * then `family` (the op family word, "T2" or "R1"), the now, the request count, c's call-level
 * `extra` arguments (nextra of them) and the request arguments. Returns 0 with *argc, *argv and
 * *argvlen (owned by c, valid until c changes), SLUICE_EINVAL (no request), SLUICE_ERANGE or
 * SLUICE_ENOMEM. */
int rbatch_command(rbatch *c, const char *sha, const char *family, int *argc, const char ***argv,
                   const size_t **argvlen);

/* 1 when the len bytes at s are the word w. */
int rbatch_word_is(const char *s, size_t len, const char *w);

/* Request i's reply in a batch reply of c->nreqs requests, and its first element as fields.
 * Returns 0, SLUICE_EINVAL (i out of range) or SLUICE_EPARSE. */
int rbatch_reply_head(const rbatch *c, const struct redisReply *reply, size_t i,
                      const struct redisReply **r, packed_fields *f);

/* The bulk string r as *s and *len (borrowed from r). Returns 0 or SLUICE_EPARSE (not a
 * string). */
int rbatch_bulk(const struct redisReply *r, const char **s, size_t *len);

#endif
