/* SPDX-License-Identifier: MIT */
/*
 * Recurring series shared on Redis: the encoder and decoder of one call of the recur ops of the
 * store script (src/store/redis/limits.lua + tasks.lua + recur.lua: ONE script, so that an
 * occurrence is added by the task queue's own ADD op). Pure, like redis_tasks.h: it builds the
 * arguments of one EVALSHA and reads its reply; no I/O, no clock. The caller owns the connection.
 *
 * One call carries many requests, evaluated by Redis in order; each is atomic, and one request's
 * error never aborts the others. Every time is the store's (Redis TIME, ratcheted by the clock
 * of the tag {all}), never the caller's.
 *
 * Keys (docs/redis-store.md, "Recurring series"): the task queue's ten fixed keys, then
 * `<prefix>:{all}:recur` (hash name -> record), `<prefix>:{all}:rdue` (zset of live series by
 * ceil(next ms)) and `<prefix>:{all}:rseq` (version counter); a FIRE that adds an occurrence
 * also takes its ADD's keys. All under the tag {all}: one slot with the queue.
 *
 * The script computes no schedule: the node computes every point with the engine's code
 * (sluice_recurring_first / sluice_recurring_after) and FIRE compares and sets: it applies only
 * when the series is still at the version and next time the node read, so of many nodes firing
 * one due point exactly one adds its task (the others are told STALE).
 *
 * Invariants:
 * - Requests come back in the order they were added; rrecur_batch_result(i) reads the i-th.
 * - The batch copies the bytes of its arguments; nothing it is given is kept.
 * - A failed add leaves the batch exactly as it was.
 * - A malformed or unexpected reply is refused with SLUICE_EPARSE, never half-read.
 */
#ifndef SLUICE_STORE_REDIS_RECUR_H
#define SLUICE_STORE_REDIS_RECUR_H

#include <stddef.h>
#include <stdint.h>

#include "sluice/engine.h"
#include "store/redis_tasks.h"

struct redisReply; /* hiredis */

/* Most series one LIST returns (more: its result says so, the node lists again at once). */
#define RRECUR_LIST_MAX 64

/* A series remembers the ids of its occurrences that may not have started, so that RECUR.DEL
 * and a replacement cancel them as the single node does; the list is pruned of started ones
 * each time its length reaches a multiple of RRECUR_OCC_PRUNE (recur.lua's OCC_KEEP). */
#define RRECUR_OCC_PRUNE 32

typedef enum rrecur_op {
    RRECUR_SET = 1, /* RECUR.ADD: add or replace */
    RRECUR_DEL,     /* RECUR.DEL */
    RRECUR_INFO,    /* RECUR.INFO */
    RRECUR_LIST,    /* the due series */
    RRECUR_FIRE,    /* move a due series on, maybe adding its occurrence */
} rrecur_op;

/* FIRE of a due series, as the node computed it from what LIST (or INFO) gave. */
typedef struct rrecur_fire {
    const char *name; /* the series; namelen bytes */
    size_t namelen;
    uint64_t version;    /* as listed */
    int64_t expected_ns; /* its next as listed: applies only if still so */
    int64_t next_ns;     /* the new next (a schedule point, or SLUICE_NEVER: the series is over) */
    int64_t missed;      /* schedule points passed over (counted in skipped) */
    const rtask_add *task; /* the occurrence to add (resolved by the node), or NULL: only move
                            * next (the first point lies ahead, or none is left) */
} rrecur_fire;

typedef struct rrecur_batch rrecur_batch;

/* Creates an empty batch whose keys start with `prefix` (NULL: "sluice"). Returns 0 and *out, or
 * SLUICE_EINVAL (a prefix with '{' or '}') / SLUICE_ENOMEM with *out NULL. */
int rrecur_batch_new(const char *prefix, rrecur_batch **out);

/* Empties the batch, keeping its memory and its injected time. */
void rrecur_batch_reset(rrecur_batch *b);

/* Frees the batch. Accepts NULL. */
void rrecur_batch_free(rrecur_batch *b);

/* Tests only: decide at now_ns (still ratcheted) instead of Redis TIME; 0 goes back to TIME. */
void rrecur_batch_set_now(rrecur_batch *b, int64_t now_ns);

/* Append one request each. Return its index in the batch (>= 0), or SLUICE_EINVAL (a bad
 * argument: the batch is unchanged) / SLUICE_ENOMEM (unchanged). SET takes the spec as the
 * command checked it (sluice_recurring_check): name, type, exactly one of interval_ns and cron;
 * start_ns 0 means the store's now. LIST takes 1..RRECUR_LIST_MAX. */
int rrecur_batch_add_set(rrecur_batch *b, const sluice_recurring_spec *spec);
int rrecur_batch_add_del(rrecur_batch *b, const char *name, size_t namelen);
int rrecur_batch_add_info(rrecur_batch *b, const char *name, size_t namelen);
int rrecur_batch_add_list(rrecur_batch *b, size_t max);
int rrecur_batch_add_fire(rrecur_batch *b, const rrecur_fire *f);

/* Requests in the batch. */
size_t rrecur_batch_count(const rrecur_batch *b);

/* The op of request i (0 when out of range). */
rrecur_op rrecur_batch_op(const rrecur_batch *b, size_t i);

/* The command "EVALSHA <sha> numkeys keys... args..." (EVAL with the script when sha is NULL) as
 * argc/argv/argvlen; the arrays belong to the batch and stay valid until its next add, reset or
 * free. Returns 0, SLUICE_EINVAL for an empty batch, or SLUICE_ENOMEM. */
int rrecur_batch_command(rrecur_batch *b, const char *sha, int *argc, const char ***argv,
                         const size_t **argvlen);

/* One request's answer. */
typedef struct rrecur_result {
    int rc;              /* 0, or: SLUICE_ENOTFOUND (INFO, FIRE: no such series), SLUICE_ESTALE
                          * (FIRE: the series moved on: another node fired it, or it was replaced),
                          * SLUICE_EINVAL (the script refused the request: msg says why) */
    int64_t now_ns;      /* the store time the request was decided at */
    uint64_t version;    /* SET: the series' new version */
    int64_t next_ns;     /* SET, FIRE: the series' next (SLUICE_NEVER: over) */
    int deleted;         /* DEL: 1 when a series was removed */
    int fired;           /* FIRE: 1 when an occurrence was added (task id below) */
    uint64_t id;         /* FIRE: the occurrence's task id */
    int64_t runs;        /* FIRE: occurrences added so far */
    int64_t skipped;     /* FIRE: points skipped so far */
    size_t nseries;      /* LIST: series returned (read with rrecur_batch_series); INFO: 1 */
    int64_t earliest_ns; /* LIST: the earliest next of any live series (ms precision); 0: none */
    int more;            /* LIST: the bound stopped it: list again at once */
    const char *msg;     /* EINVAL: the script's message (into the reply) */
    size_t msglen;
} rrecur_result;

/* Reads request i of the reply to this batch's command. Returns 0 with *res filled (the
 * request's own refusal in res->rc), SLUICE_EINVAL for i out of range, or SLUICE_EPARSE for a
 * reply that is not the script's, with *res zeroed. */
int rrecur_batch_result(const rrecur_batch *b, const struct redisReply *reply, size_t i,
                        rrecur_result *res);

/* The elements of one series in an answer (INFO: after the head; LIST: per series). */
#define RRECUR_SERIES_ELEMS 6

/* A series as the store holds it. Strings point into the hiredis reply (valid while it is) and
 * are NOT NUL-terminated (lengths given); key is NULL when the series has none. */
typedef struct rrecur_series {
    const char *name, *type, *payload, *key, *cron;
    size_t namelen, typelen, payload_len, key_len, cronlen; /* cronlen 0: an interval series */
    uint64_t version;
    int64_t interval_ns; /* 0: a cron series */
    int64_t start_ns;    /* the effective start (the store time of the ADD when none given) */
    int64_t end_ns;      /* 0: never */
    int64_t max_runs;    /* 0: unlimited */
    int64_t runs;        /* occurrences added */
    int64_t skipped;     /* points skipped */
    int64_t next_ns;     /* a schedule point, or the time from which to find the first one;
                          * SLUICE_NEVER: over */
} rrecur_series;

/* Series k of LIST request i (0..nseries-1), or (k 0) the series of INFO request i. Returns 0,
 * SLUICE_EINVAL (not a LIST/INFO that answered OK, k out of range) or SLUICE_EPARSE. */
int rrecur_batch_series(const rrecur_batch *b, const struct redisReply *reply, size_t i, size_t k,
                        rrecur_series *out);

/* The checks every encoder makes (this one and pg_recur.c's): 1 when spec is a SET request as
 * rrecur_batch_add_set takes it, f a FIRE as rrecur_batch_add_fire takes it; else 0. */
int rrecur_spec_ok(const sluice_recurring_spec *spec);
int rrecur_fire_ok(const rrecur_fire *f);

/* The answers' text, shared with the PostgreSQL store (pg_recur.c), whose function answers each
 * request with the same elements as the script. rrecur_parse_answer reads the first element s
 * (len bytes) of the answer to a request of op that has nelems elements: 0 with *res filled
 * (res->msg points into s), or SLUICE_EPARSE with *res zeroed. rrecur_parse_series reads the
 * RRECUR_SERIES_ELEMS elements of one series (e[j], elen[j] bytes; strings point into them): 0,
 * or SLUICE_EPARSE with *out zeroed. */
int rrecur_parse_answer(rrecur_op op, const char *s, size_t len, size_t nelems, rrecur_result *res);
int rrecur_parse_series(const char *const e[RRECUR_SERIES_ELEMS],
                        const size_t elen[RRECUR_SERIES_ELEMS], rrecur_series *out);

#endif
