/* SPDX-License-Identifier: MIT */
/*
 * Shared limits on Redis: the encoder and decoder of one batched call of the limits script
 * (src/store/redis/limits.lua, embedded at build time). Pure: it builds the arguments of one
 * EVALSHA and reads its reply; no I/O, no hiredis connection, no clock. The caller (the server)
 * owns the connection, sends the command and hands the reply back.
 *
 * One batch is one script call carrying many requests (every decision of a loop turn), evaluated
 * by Redis in order; each request is atomic (a chain charges all of its links or none), and one
 * request's error never aborts the others. Every decision uses the store's clock (Redis TIME,
 * ratcheted per hash tag so that it never goes back), never the caller's.
 *
 * Key layout (docs/redis-store.md): a link's state lives in
 * `<prefix>:{<tag>}:<len>:<limit_id>:<key>`, its tag's clock in `<prefix>:{<tag>}:clock`, its
 * grants (when auditing) in
 * `<prefix>:{<tag>}:audit`; <len> is the length of limit_id in decimal, so that no two (limit,
 * key) pairs share a name (a limit reset whole by LIMIT.RESET has its states under
 * `<prefix>:{<tag>}:R<g>:<len>:<limit_id>:<key>` instead: the script maps the names sent here to
 * them itself, limits.lua's reset_key). The tag of a link is the one its rlim_link names, else its
 * key (the hex of its digest for a key longer than max_key_len), else (an empty key: a global
 * bucket) its limit id; a tag that is empty or holds '{' or '}' is replaced by the hex of its
 * SHA-256. It must be the same for every request that touches one (limit, key), or that state is
 * split in two.
 *
 * Invariants:
 * - Requests come back in the order they were added; rlim_batch_result(i) reads the i-th.
 * - The batch copies nothing it is given but the bytes of its arguments: links, keys and
 *   definitions may be freed after rlim_batch_add returns.
 * - A malformed or unexpected reply is refused with SLUICE_EPARSE, never half-read into a
 *   decision that was not made.
 */
#ifndef SLUICE_STORE_REDIS_LIMITS_H
#define SLUICE_STORE_REDIS_LIMITS_H

#include <stddef.h>
#include <stdint.h>

#include "core/keyhash.h"
#include "sluice/limit.h"

struct redisReply; /* hiredis; only its fields type, integer, len, str, elements, element */

/* One link of a request: a limit (its whole definition travels with every call, once per call
 * however many links name it, so nodes with the same config need no shared definitions and a
 * changed config takes effect at once), the key it is asked about, and the units asked. */
typedef struct rlim_link {
    const sluice_limit_def *def; /* kind and parameters */
    const char *limit_id;        /* the limit's name, or the CL.THROTTLE id "!cell:B:C:P" */
    const char *key;             /* may hold any bytes; NULL only with keylen 0 */
    size_t keylen;
    const char *tag; /* the Redis Cluster hash tag of this state; NULL: the key, or the limit
                      * id for an empty key. Must be the same for every use of (limit, key). */
    size_t taglen;
    int64_t units; /* >= 1 (RENEW and RELEASE ignore it) */
    uint64_t gen;  /* > 0: the state is "<prefix>:{<tag>}:R<gen>:<len>:<limit_id>:<key>", the
                    * generation of a whole LIMIT.RESET the node names itself (Redis Cluster, a
                    * limit no type names: server/rdefs.h); 0: the script's own (reset_key) */
    int shadow;    /* 1: the link's limit is in shadow mode (or limits are off): decided and
                    * charged as the others, but its would-be denial passes uncharged and never
                    * makes the chain deny (core/chain.c's rule); its decision then comes back
                    * allowed with shadow_denied set */
} rlim_link;

typedef enum rlim_op {
    RLIM_DECIDE = 1,    /* a chain: all-or-nothing; a concurrency link takes a lease */
    RLIM_PEEK,          /* the same, charging nothing and writing nothing (not even the clock) */
    RLIM_LEASE_RENEW,   /* one concurrency link + lease id + ttl */
    RLIM_LEASE_RELEASE, /* one concurrency link + lease id */
    RLIM_SETTLE,        /* one link + charged time + estimate + actual (sluice_limit_settle) */
    RLIM_BACKOFF,       /* one rate link + wait: held back (sluice_limit_backoff; LIMIT.BACKOFF) */
    RLIM_RATE, /* one rate link: its key's rate now (sluice_limit_key_rate; LIMIT.RATE). A read,
                * as a peek; Redis only (PostgreSQL has no adaptive rates) */
} rlim_op;

/* The last op, for range checks. */
#define RLIM_OP_LAST RLIM_RATE

/* The arguments of an op beyond its links. Zero what an op does not use. */
typedef struct rlim_args {
    int64_t ttl_ns;     /* DECIDE: lease TTL of concurrency links (0: the def's ttl_ns);
                         * RENEW: the new TTL from the store's now (0: the def's ttl_ns) */
    uint64_t lease_id;  /* RENEW, RELEASE: the id a DECIDE returned */
    int64_t charged_ns; /* SETTLE: the store time of the grant being corrected */
    int64_t estimate;   /* SETTLE: the units charged then */
    int64_t actual;     /* SETTLE: the units it really cost */
    int64_t wait_ns;    /* BACKOFF: nothing granted on the key before the store's now + wait_ns */
} rlim_args;

typedef struct rlim_batch rlim_batch;

/* Creates an empty batch whose keys start with `prefix` (NULL: "sluice"). Returns 0 and *out,
 * or SLUICE_EINVAL (a prefix with '{' or '}') / SLUICE_ENOMEM with *out NULL. Free with
 * rlim_batch_free. */
int rlim_batch_new(const char *prefix, rlim_batch **out);

/* Empties the batch for the next loop turn, keeping its memory, its audit flag and its
 * injected time. */
void rlim_batch_reset(rlim_batch *b);

/* Frees the batch. Accepts NULL. */
void rlim_batch_free(rlim_batch *b);

/* Audit (a debugging option of the node): when on, every grant of the batch's DECIDE requests is
 * appended to `<prefix>:{<tag>}:audit` as "limit_id key units store_now_ns" (one entry per
 * link; the key is the raw key bytes, so a reader splits off limit_id at the first space and
 * units and time at the last two). The audit lists are KEYS of each request, so the flag is set
 * on an empty batch (new or reset): returns 0, or SLUICE_ESTATE (nothing changed) when the
 * batch holds requests. rlim_batch_reset keeps the flag. */
int rlim_batch_set_audit(rlim_batch *b, int on);

/* Tests only: decide at now_ns (still ratcheted) instead of Redis TIME; 0 goes back to TIME. */
void rlim_batch_set_now(rlim_batch *b, int64_t now_ns);

/* Appends one request of n links (n >= 1; RENEW, RELEASE and SETTLE take exactly one). Returns
 * its index in the batch (>= 0; replies come back in the same order), or SLUICE_EINVAL (a bad
 * op, link, units or argument; the batch is unchanged) or SLUICE_ENOMEM (unchanged). */
int rlim_batch_add(rlim_batch *b, rlim_op op, const rlim_link *links, size_t n,
                   const rlim_args *args);

/* Requests in the batch. */
size_t rlim_batch_count(const rlim_batch *b);

/* The command "EVALSHA <sha> numkeys keys... args..." (or "EVAL <script> ..." when sha is NULL)
 * as argc/argv/argvlen for redisAsyncCommandArgv / redisCommandArgv. The arrays belong to the
 * batch and stay valid until its next add, reset or free. Returns 0, SLUICE_EINVAL for an empty
 * batch, or SLUICE_ENOMEM. */
int rlim_batch_command(rlim_batch *b, const char *sha, int *argc, const char ***argv,
                       const size_t **argvlen);

/* The command of a call across slots of one Redis Cluster master: as rlim_batch_command (same
 * arrays, same validity), but with no declared key ("EVALSHA sha 0 2x ..."): the keys follow the
 * requests (limits.lua, "calls across slots"), since the keys one call declares must all hash to
 * one slot. Its reply reads as rlim_batch_command's. The script answers it with an error
 * beginning "XSLOT", having written nothing, when a slot it names is not wholly served by the
 * master it reached (moved, migrating, importing, no owner): resend its requests slot by slot
 * (rlim_batch_command_part). Redis 7 (the script's shebang flag allow-cross-slot-keys). */
int rlim_batch_command_cross(rlim_batch *b, const char *sha, int *argc, const char ***argv,
                             const size_t **argvlen);

/* A command built into memory of the caller's (rlim_batch_command_part): argv and argvlen hold
 * argc arguments, pointing into the batch and into head. Zero it before the first use; free
 * with rlim_cmd_free. */
typedef struct rlim_cmd {
    int argc;
    const char **argv;
    size_t *argvlen;
    size_t cap;
    char head[5][24];
} rlim_cmd;

/* The command of a part of the batch: the requests reqs[0..n) (indexes into the batch, n >= 1),
 * in that order, with every definition of the batch (the requests name definitions by their
 * index in it), their keys declared (protocol "2": they must share one slot) or, with cross set,
 * following them (protocol "2x", as rlim_batch_command_cross), into *out, valid until the
 * batch's next add, reset or free and out's next use. Its reply holds n answers: answer j is
 * request reqs[j]'s (rlim_batch_result_in). Returns 0, SLUICE_EINVAL (n 0, an index out of
 * range) or SLUICE_ENOMEM. */
int rlim_batch_command_part(rlim_batch *b, const char *sha, const size_t *reqs, size_t n, int cross,
                            rlim_cmd *out);

void rlim_cmd_free(rlim_cmd *c);

/* One request's answer. */
typedef struct rlim_result {
    int rc;         /* 0, or this request's error: SLUICE_ESTALE (RENEW/RELEASE of a lease that
                     * is gone), SLUICE_ESTATE (SETTLE of a grant whose window or period is over),
                     * SLUICE_EINVAL (SETTLE on a concurrency limit, BACKOFF on another kind than
                     * a rate or with a negative wait; a request the script refused) */
    int64_t now_ns; /* the store time the request was decided at */
    sluice_chain_result chain; /* DECIDE, PEEK: as sluice_chain_decide fills it */
    int64_t expires_ns;        /* RENEW: the lease's new expiry (store time) */
    int64_t slot_ns;  /* BACKOFF: the key's earliest slot for one unit afterwards (store time) */
    int64_t permits;  /* RATE: the key's rate now, per the limit's period */
    int64_t since_ns; /* RATE: its last decrease while below the configured rate, else 0 */
    size_t n;         /* links of the request */
} rlim_result;

/* Reads request i of the reply to this batch's command. decisions (may be NULL) receives the n
 * links' decisions as sluice_chain_decide gives them (DECIDE, PEEK; lease_id of concurrency
 * links); it must hold rlim_batch_link_count(b, i) entries. Returns 0 with *res filled (the
 * request's own error in res->rc), SLUICE_EINVAL for i out of range, or SLUICE_EPARSE for a
 * reply that is not the script's (an error reply, a wrong shape, a malformed number), with
 * *res and decisions zeroed. */
int rlim_batch_result(const rlim_batch *b, const struct redisReply *reply, size_t i,
                      rlim_result *res, sluice_decision *decisions);

/* As rlim_batch_result, for a reply of nsent answers (a part's): reads its answer j as request i
 * of the batch. rlim_batch_result(b, r, i, ...) is rlim_batch_result_in(b, r, count, i, i, ...). */
int rlim_batch_result_in(const rlim_batch *b, const struct redisReply *reply, size_t nsent,
                         size_t j, size_t i, rlim_result *res, sluice_decision *decisions);

/* Links of request i (0 when i is out of range). */
size_t rlim_batch_link_count(const rlim_batch *b, size_t i);

/* The names the script gives a DECIDE link's state and its tag's clock (the layout above), as
 * two NUL-terminated copies the caller frees with alloc_free: the task queue stores them with a
 * task (redis_tasks.h) so that its claims charge the very state THROTTLE charges. Returns 0, or
 * SLUICE_EINVAL (a link rlim_batch_add would refuse; a prefix with braces) / SLUICE_ENOMEM, with
 * both NULL. */
int rlim_link_keys(const char *prefix, const rlim_link *l, char **state_key, size_t *state_len,
                   char **clock_key, size_t *clock_len);

/* ---- shared with the PostgreSQL store (store/pg_limits.c) ------------------------------------
 * Both shared stores name a link's state the same way, describe a limit the same way and answer
 * a request in the same words; these are the one copy of those rules. */

/* A link's state name: its key as the core stores it (the SHA-256 of a key longer than the
 * limit's max_key_len) and its tag (see the header comment). */
typedef struct rlim_names {
    const char *key; /* the key's bytes, or digest; borrowed from the link or this struct */
    size_t keylen;
    unsigned char digest[KEYHASH_LEN];
    const char *tag; /* the tag's bytes: the link's, its key, its limit id, or taghex */
    size_t taglen;
    char taghex[2 * KEYHASH_LEN];
    size_t tagidx; /* the Redis encoder's: 1-based index among a request's distinct tags */
} rlim_names;

/* Fills *nm for link l (valid for as long as l's strings and *nm itself). Returns 0 or
 * SLUICE_ENOMEM (hashing a long key or tag). */
int rlim_link_names(const rlim_link *l, rlim_names *nm);

/* 1 when link l may be sent with op (a known kind; units >= 1 for DECIDE and PEEK; a
 * concurrency limit for RENEW and RELEASE), else 0. The PostgreSQL encoders also refuse an
 * adaptive rate (rlim_def_adaptive), which only the Redis script decides. */
int rlim_link_ok(const rlim_link *l, rlim_op op);

/* Writes a limit definition as the stores read it, "kind limit period_ns burst start_empty
 * ttl_ns calendar", followed for an adaptive rate by " a floor num den step every_ns"
 * (core/adapt.h's parameters, derived by adapt_init), into buf (NUL-terminated; RLIM_DEF_TEXT_MAX
 * bytes always suffice). Returns its length. */
#define RLIM_DEF_TEXT_MAX 288
int rlim_def_text(const sluice_limit_def *d, char *buf, size_t len);

/* 1 when d is an adaptive (AIMD) rate, whose keys each have their own effective rate. */
int rlim_def_adaptive(const sluice_limit_def *d);

/* The definition text of a link as the limits calls send it: rlim_def_text of its def, followed
 * by " s" when the link is in shadow mode (RLIM_DEF_TEXT_MAX bytes always suffice). Returns its
 * length. */
int rlim_link_def_text(const rlim_link *l, char *buf, size_t len);

/* Writes the head of a request as the stores read it, "OPWORD COUNTS a1 a2 a3" (COUNTS is the
 * caller's: the Redis script also wants the request's tag count), with op's numbers: a lease id
 * and TTL for RENEW/RELEASE, a TTL for DECIDE/PEEK, charged time, estimate and actual for SETTLE,
 * the wait for BACKOFF.
 * Returns its length (NUL-terminated), or -1 when cap is below strlen(counts) + 67. */
int rlim_request_head(rlim_op op, const rlim_args *args, const char *counts, char *buf, size_t cap);

/* Reads one request's answer, the string "STATUS now_ns [fields]" both stores return (the reply
 * format of src/store/redis/limits.lua), for a request of op with nlinks links. Fills *res and
 * (may be NULL) decisions[nlinks]; returns 0, or SLUICE_EPARSE for a string of another shape
 * (res and decisions then partly written: the caller zeroes them). */
int rlim_parse_answer(rlim_op op, size_t nlinks, const char *s, size_t len, rlim_result *res,
                      sluice_decision *decisions);

/* The script's text (embedded at build time from src/store/redis/limits.lua) and its length.
 * The node loads it with SCRIPT LOAD on every (re)connect and reloads it on a NOSCRIPT reply.
 * It also holds the task ops (src/store/redis/tasks.lua, appended at build time; redis_tasks.h)
 * and the recurring series' ops (src/store/redis/recur.lua, appended after it; redis_recur.h):
 * one script, one SHA. */
const char *rlim_script(size_t *len);

#endif
