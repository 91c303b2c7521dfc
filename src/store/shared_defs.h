/* SPDX-License-Identifier: MIT */
/*
 * The live limit definitions a shared store keeps for every node (LIMIT.SET, LIMIT.DEL,
 * LIMIT.KEY, LIMIT.KEYDEL): the set itself, and the encoder and decoder of its two calls on
 * Redis (the store script's "D1" ops, src/store/redis/defs.lua) and on PostgreSQL (the functions
 * of src/store/pg/005_overrides.sql). Pure: no I/O, no clock; the server (server/rdefs.c) sends
 * the calls through its store connection and applies what they answer.
 *
 * The set maps a limit name to the text the single node would store for it (durable.h's runtime
 * definition: a one-line spec, "mode=..." for a tiered limit, or "" for a removal). It has one
 * version, raised by every write; a node at version v holds exactly the set of v.
 *
 * Two calls, one answer shape:
 * - GET(known): the version; and the whole set when the version is not `known`.
 * - SET(known, name, spec): stores it, raises the version; answers the new version, and the
 *   whole new set unless the new version is known + 1 (then the caller's set plus this write is
 *   the new set).
 *
 * Invariants: a set holds each name once (sdefs_set_put replaces); an answer that is not one of
 * these shapes is refused with SLUICE_EPARSE and fills nothing.
 */
#ifndef SLUICE_STORE_SHARED_DEFS_H
#define SLUICE_STORE_SHARED_DEFS_H

#include <stddef.h>
#include <stdint.h>

#include "sluice/limit.h"
#include "store/packed.h"

struct redisReply;
struct pg_result;

/* One definition: name and spec, NUL-terminated, owned by the set. */
typedef struct sdefs_entry {
    char *name;
    char *spec; /* "" for a removal */
} sdefs_entry;

/* A set of definitions: n entries in e, unordered. Zero-initialise, or sdefs_set_init. */
typedef struct sdefs_set {
    sdefs_entry *e;
    size_t n, cap;
} sdefs_set;

void sdefs_set_init(sdefs_set *set);

/* Frees every entry and the array; the set is then empty (and may be reused). Accepts NULL. */
void sdefs_set_clear(sdefs_set *set);

/* Sets name's spec (adding it, or replacing its spec). Copies both. Returns 0, SLUICE_EINVAL (an
 * empty name, or one or a spec holding a NUL byte), or SLUICE_ENOMEM with the set unchanged. */
int sdefs_set_put(sdefs_set *set, const char *name, size_t namelen, const char *spec,
                  size_t speclen);

/* The spec of name (borrowed: valid until the set changes), or NULL when it holds none. */
const char *sdefs_set_get(const sdefs_set *set, const char *name);

/* Moves src's entries into dst (whose old ones are freed); src is left empty. */
void sdefs_set_move(sdefs_set *dst, sdefs_set *src);

/* ---- Redis ---------------------------------------------------------------------------------- */

/* The key prefix longest accepted, and the names' room. */
#define SDEFS_PREFIX_MAX 64

/* One call's command, in memory the caller owns: argv points into it and into the name and spec
 * given (which must outlive the command's use). */
typedef struct sdefs_cmd {
    int argc;
    const char *argv[10];
    size_t argvlen[10];
    char set_key[SDEFS_PREFIX_MAX + 16];
    char ver_key[SDEFS_PREFIX_MAX + 16];
    char known[24];
} sdefs_cmd;

/* Builds "EVALSHA sha 2 <prefix>:{defs}:limits <prefix>:{defs}:version D1 G known" (name NULL)
 * or "... D1 S known name spec" (a SET). prefix NULL: "sluice". Returns 0, or SLUICE_EINVAL (a
 * prefix too long or holding a brace, a NULL sha, an empty name, a NULL spec with a name). */
int sdefs_redis_command(sdefs_cmd *cmd, const char *prefix, const char *sha, int64_t known,
                        const char *name, size_t namelen, const char *spec, size_t speclen);

/* The cheap poll: "GET <prefix>:{defs}:version", no script (a poll never meets NOSCRIPT, and
 * costs Redis one GET). A node whose version differs then reads the set with a GET call of the
 * script, which answers the version and the set together. Returns 0 or SLUICE_EINVAL (a bad
 * prefix). */
int sdefs_redis_version_command(sdefs_cmd *cmd, const char *prefix);

/* Reads the answer to it: *ver the version (0 when the key does not exist). Returns 0 or
 * SLUICE_EPARSE (*ver 0). */
int sdefs_redis_version_answer(const struct redisReply *r, int64_t *ver);

/* LIMIT.RESET of one key: "EVALSHA sha n state_key... D1 X" (n = 1 or 2: the states of the
 * limit's key and of its override), argv pointing into keys (which must outlive its use).
 * Returns 0 or SLUICE_EINVAL (a NULL sha, n not 1 or 2). The reply is an integer: how many of
 * the keys existed. */
typedef struct sdefs_reset_cmd {
    int argc;
    const char *argv[7];
    size_t argvlen[7];
    char nkeys[4];
} sdefs_reset_cmd;
int sdefs_redis_reset_command(sdefs_reset_cmd *cmd, const char *sha, const char *const *keys,
                              const size_t *keylens, size_t n);

/* An id list: limit ids, each written "<len>:<id>" (len its bytes in decimal), one after
 * another, so that an id may hold any byte (an override's key, a space included). Appends the
 * id name + sep + rest (restlen bytes: "api", "api/tier", "api/=key") to s. Returns 0 or
 * SLUICE_ENOMEM (s unchanged). */
int sdefs_ids_put(packed_str *s, const char *name, const char *sep, const char *rest,
                  size_t restlen);

/* The id list ids (idslen bytes) as a PostgreSQL text[] literal, allocated (alloc_free), for
 * SDEFS_PG_RESET_ALL's $1; NULL when memory ran out or the list is malformed. */
char *sdefs_pg_ids_array(const char *ids, size_t idslen);

/* LIMIT.RESET of every key of some limits (LIMIT.RESET name, no key): "EVALSHA sha 1
 * <prefix>:{<tag>}:resets D1 W ids", ids an id list (sdefs_ids_put; it must outlive the
 * command's use). The script raises each id's generation in the tag's generation
 * hash, so that every state of those limits under that tag reads as fresh (limits.lua's
 * reset_key). Returns 0 or SLUICE_EINVAL (a NULL sha, an empty ids, a bad prefix or tag). The
 * reply is an integer (generations raised), read with sdefs_reset_answer. */
typedef struct sdefs_wreset_cmd {
    int argc;
    const char *argv[7];
    size_t argvlen[7];
    char marker[SDEFS_PREFIX_MAX + 80];
} sdefs_wreset_cmd;
int sdefs_redis_whole_reset_command(sdefs_wreset_cmd *cmd, const char *prefix, const char *sha,
                                    const char *tag, const char *ids, size_t idslen);

/* LIMIT.RESET of every key of limits no type names, on Redis Cluster: "EVALSHA sha 2
 * <prefix>:{defs}:limits <prefix>:{defs}:version D1 N known ids" (ids an id list, which must
 * outlive the command's use). The script raises the set's entry "#reset:<id>" (SDEFS_GEN_PREFIX)
 * of each id and the version; its answer is a SET's (sdefs_redis_answer with is_set): without the
 * set when the version is known + 1, the caller's set with each of these generations one higher
 * being the store's. Returns 0 or SLUICE_EINVAL (a NULL sha, empty ids). */
int sdefs_redis_gen_command(sdefs_cmd *cmd, const char *prefix, const char *sha, int64_t known,
                            const char *ids, size_t idslen);

/* The set's entries that are not limits but a limit id's whole-reset generation on Redis
 * Cluster: "#reset:<limit id>" -> the generation in decimal. */
#define SDEFS_GEN_PREFIX     "#reset:"
#define SDEFS_GEN_PREFIX_LEN 7

/* LIMIT.SPEND: "EVALSHA sha 2 state_key clock_key D1 Q" (the quota key's state and its tag's
 * clock, rlim_link_keys's names, which must outlive the command's use); read-only. Returns 0 or
 * SLUICE_EINVAL (a NULL sha). Its reply is read with sdefs_spend_answer. */
typedef struct sdefs_spend_cmd {
    int argc;
    const char *argv[7];
    size_t argvlen[7];
} sdefs_spend_cmd;
int sdefs_redis_spend_command(sdefs_spend_cmd *cmd, const char *sha, const char *state_key,
                              size_t state_len, const char *clock_key, size_t clock_len);

/* The key every call names first (its Redis Cluster slot is the call's slot): into buf, len bytes
 * (SDEFS_PREFIX_MAX + 16 suffice). Returns its length, or SLUICE_EINVAL. */
int sdefs_redis_slot_key(const char *prefix, char *buf, size_t len);

/* Reads the answer to a call made with `known` (is_set: a SET, else a GET): *ver the store's
 * version, *full 1 when it carries the whole set, which then replaces *set's entries; 0 when
 * the caller's set is current (GET) or is current with its write (SET). Returns 0, or
 * SLUICE_EPARSE (an error reply, another shape; nothing filled), or SLUICE_ENOMEM (*set emptied).
 */
int sdefs_redis_answer(const struct redisReply *r, int is_set, int64_t known, int64_t *ver,
                       int *full, sdefs_set *set);

/* ---- PostgreSQL ----------------------------------------------------------------------------- */

/* The prepared statements and their parameter counts: $1 known, $2 name, $3 spec. */
#define SDEFS_PG_GET_STMT    "sluice_defs_get"
#define SDEFS_PG_GET_SQL     "SELECT ver, name, spec FROM sluice_limit_defs_get($1::bigint)"
#define SDEFS_PG_GET_NPARAMS 1
#define SDEFS_PG_SET_STMT    "sluice_defs_set"
#define SDEFS_PG_SET_SQL                                                                           \
    "SELECT ver, name, spec FROM sluice_limit_defs_set($1::bigint, $2::text, $3::text)"
#define SDEFS_PG_SET_NPARAMS 3

/* LIMIT.RESET of one key: $1 its tag and $3 its key (hex, as the limits call names them), $2
 * and $4 the limit ids of its states ($4 NULL when there is no override); one row, the count of
 * states it deleted. */
#define SDEFS_PG_RESET_STMT "sluice_defs_reset"
#define SDEFS_PG_RESET_SQL                                                                         \
    "WITH d AS (DELETE FROM sluice_limit_state WHERE tag = decode($1, 'hex') AND key = "           \
    "decode($3, 'hex') AND (lim = $2 OR lim = $4) AND kind <> 0 RETURNING 1) "                     \
    "SELECT count(*) FROM d"
#define SDEFS_PG_RESET_NPARAMS 4

/* LIMIT.RESET of every key of some limits: $1 their ids (a text[], sdefs_pg_ids_array); one row,
 * the count of states it deleted. The rows are locked in the limits call's order (tag, limit id,
 * key; bytewise) before they are deleted, so a reset never deadlocks with a decision; clock rows
 * (kind -1) stay, as the ratchet must. */
#define SDEFS_PG_RESET_ALL_STMT "sluice_defs_reset_all"
#define SDEFS_PG_RESET_ALL_SQL                                                                     \
    "WITH l AS (SELECT tag, lim, key FROM sluice_limit_state WHERE lim = ANY "                     \
    "($1::text[]) AND kind > 0 ORDER BY tag, lim COLLATE \"C\", key FOR "                          \
    "UPDATE), d AS (DELETE FROM sluice_limit_state s USING l WHERE s.tag = l.tag AND s.lim = "     \
    "l.lim AND s.key = l.key RETURNING 1) SELECT count(*) FROM d"
#define SDEFS_PG_RESET_ALL_NPARAMS 1

/* LIMIT.SPEND: $1 the quota key's tag and $3 its key (hex), $2 its limit id; one row: the state
 * ("{start,end,spent}", NULL when there is none), the tag's clock (ns, NULL when none) and the
 * database's time (ns, clock_timestamp() as the limits call reads it). Read-only. */
#define SDEFS_PG_SPEND_STMT "sluice_defs_spend"
#define SDEFS_PG_SPEND_SQL                                                                         \
    "SELECT (SELECT st::text FROM sluice_limit_state WHERE tag = decode($1, 'hex') AND lim = $2 "  \
    "AND key = decode($3, 'hex') AND kind = 5), (SELECT st[1] FROM sluice_limit_state WHERE tag "  \
    "= decode($1, 'hex') AND lim = '' AND key = '\\x'::bytea AND kind = -1), "                     \
    "(trunc(extract(epoch FROM clock_timestamp()) * 1000000) * 1000)::bigint"
#define SDEFS_PG_SPEND_NPARAMS 3

/* Reads a LIMIT.SPEND answer (Redis's reply r, or PostgreSQL's row res) into *out for a quota of
 * budget `budget` and calendar cal, as sluice_limit_quota_usage reads a single node's key: the
 * store's time is its clock ratcheted by the tag's clock (as a decision's), the period is the
 * calendar's at that time, and a state whose period ended (or that spent nothing) counts 0.
 * Returns 0, or SLUICE_EPARSE (an answer of another shape; *out zeroed). */
int sdefs_spend_answer(const struct redisReply *r, const struct pg_result *res, int64_t budget,
                       sluice_calendar cal, sluice_quota_usage *out);

/* The pure part of it: the figures of a quota state (has_state 0: none) at store time now_ns. */
void sdefs_quota_usage(int64_t budget, sluice_calendar cal, int has_state, int64_t start_ns,
                       int64_t end_ns, int64_t spent, int64_t now_ns, sluice_quota_usage *out);

/* The count a reset answered (Redis's integer reply, PostgreSQL's one row): 0 and *n, or
 * SLUICE_EPARSE. */
int sdefs_reset_answer(const struct redisReply *r, const struct pg_result *res, int64_t *n);

/* As sdefs_redis_answer, for the rows (ver, name, spec; text format) of either statement. */
int sdefs_pg_answer(const struct pg_result *res, int is_set, int64_t known, int64_t *ver, int *full,
                    sdefs_set *set);

#endif
