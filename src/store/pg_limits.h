/* SPDX-License-Identifier: MIT */
/*
 * Shared limits on PostgreSQL: the encoder and decoder of one batched call of the limits
 * function sluice_limits_call (src/store/pg/001_limits.sql, applied by store/pg_schema.c). Pure:
 * it builds the call's parameters and reads its result; no connection, no clock. The caller owns
 * the connection, sends PGL_CALL_SQL with pgl_batch_params and hands the PGresult back.
 *
 * The requests, links and answers are the Redis store's (store/redis_limits.h: rlim_link,
 * rlim_op, rlim_args, rlim_result), with the same meaning, the same state names (a link's key,
 * hashed when longer than max_key_len, and its tag) and the same answers decision for decision;
 * only the transport differs. One batch is one function call carrying many requests, evaluated
 * in order in one transaction; each request is atomic (a chain charges all of its links or
 * none); one request's error never aborts the others. Every decision uses the database's clock
 * (clock_timestamp() read after every row of the batch is locked, ratcheted per tag so that it
 * never goes back), never the caller's.
 *
 * Invariants:
 * - Requests come back in the order they were added; pgl_batch_result(i) reads the i-th.
 * - The batch copies what it is given: links, keys and definitions may be freed after
 *   pgl_batch_add returns; a failed add leaves the batch exactly as it was.
 * - A malformed or unexpected result is refused with SLUICE_EPARSE, never half-read into a
 *   decision that was not made.
 */
#ifndef SLUICE_STORE_PG_LIMITS_H
#define SLUICE_STORE_PG_LIMITS_H

#include <stddef.h>
#include <stdint.h>

#include "store/redis_limits.h"

struct pg_result; /* libpq's PGresult */

/* The statement a batch is sent with (7 text parameters, from pgl_batch_params): one row per
 * request, in order, one text column holding its answer. Prepare it once per connection. */
#define PGL_CALL_SQL                                                                               \
    "SELECT a FROM unnest(sluice_limits_call($1::bigint, $2, $3::text[], $4::text[], "             \
    "$5::text[], $6::text[], $7::text[])) WITH ORDINALITY AS u(a, n) ORDER BY n"
#define PGL_CALL_NPARAMS 7

typedef struct pgl_batch pgl_batch;

/* Creates an empty batch. Returns 0 and *out, or SLUICE_ENOMEM with *out NULL. Free with
 * pgl_batch_free. */
int pgl_batch_new(pgl_batch **out);

/* Empties the batch for the next loop turn, keeping its memory, audit flag and injected time. */
void pgl_batch_reset(pgl_batch *b);

/* Frees the batch. Accepts NULL. */
void pgl_batch_free(pgl_batch *b);

/* Audit (a debugging option): when on, every granted link of the batch's DECIDE requests is
 * recorded in the table sluice_limit_audit (tag, lim, key, units, now_ns). */
void pgl_batch_set_audit(pgl_batch *b, int on);

/* Tests only: decide at now_ns (still ratcheted) instead of clock_timestamp(); 0 goes back to
 * the database's clock. */
void pgl_batch_set_now(pgl_batch *b, int64_t now_ns);

/* Appends one request of n links (n >= 1; RENEW, RELEASE and SETTLE take exactly one). Returns
 * its index in the batch (>= 0), or SLUICE_EINVAL (a bad op, link, units or argument) or
 * SLUICE_ENOMEM, the batch unchanged. */
int pgl_batch_add(pgl_batch *b, rlim_op op, const rlim_link *links, size_t n,
                  const rlim_args *args);

/* Requests in the batch. */
size_t pgl_batch_count(const pgl_batch *b);

/* Links of request i (0 when i is out of range). */
size_t pgl_batch_link_count(const pgl_batch *b, size_t i);

/* The PGL_CALL_NPARAMS text parameters of PGL_CALL_SQL (values[0], the time, is NULL: the
 * database's clock), for PQexecParams / PQexecPrepared / PQsendQueryPrepared with text formats.
 * The array and its strings belong to the batch and stay valid until its next add, reset or
 * free. Returns 0, SLUICE_EINVAL for an empty batch, or SLUICE_ENOMEM. */
int pgl_batch_params(pgl_batch *b, const char *const **values);

/* Reads request i of the result of this batch's call. decisions (may be NULL) receives the
 * request's links' decisions (pgl_batch_link_count(b, i) entries). Returns 0 with *res filled
 * (the request's own error in res->rc), SLUICE_EINVAL for i out of range, or SLUICE_EPARSE for
 * a result that is not the function's (an error, a wrong shape, a malformed number), with *res
 * and decisions zeroed. */
int pgl_batch_result(const pgl_batch *b, const struct pg_result *result, size_t i, rlim_result *res,
                     sluice_decision *decisions);

#endif
