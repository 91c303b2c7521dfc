/* SPDX-License-Identifier: MIT */
/*
 * Recurring series shared on PostgreSQL: the encoder and decoder of one batched call of the
 * series function sluice_recur_call (src/store/pg/003_pgrecur.sql, applied by
 * store/pg_schema.c). Pure, like pg_tasks.h: it builds the call's parameters and reads its
 * result; no connection, no clock. The caller owns the connection, sends PGR_CALL_SQL with
 * pgr_batch_params (asking for results in PGR_CALL_RESULT_FORMAT) and hands the PGresult back.
 *
 * The requests and answers are the Redis store's (store/redis_recur.h: sluice_recurring_spec,
 * rrecur_fire, rrecur_result, rrecur_series), with the same meaning and the same answers request
 * for request, read by the same parsers (rrecur_parse_answer, rrecur_parse_series); only the
 * transport differs. One batch is one function call, evaluated in order in one transaction;
 * each request is atomic. Every time is the database's (clock_timestamp() read after the call's
 * locks, ratcheted by the task queue's clock), never the caller's. A FIRE compares and sets the
 * series' (version, next) under its row lock, and adds its occurrence with the task queue's own
 * ADD in the same transaction: of several nodes firing one point exactly one adds its task.
 *
 * An occurrence's ADD is not encoded here a second time: the batch encodes it with
 * pgt_batch_add_add into a scratch task batch and copies that request, so an occurrence reaches
 * 002's ADD exactly as TASK.ADD's task does.
 *
 * Invariants:
 * - Requests come back in the order they were added; pgr_batch_result(i) reads the i-th.
 * - The batch copies what it is given; a failed add leaves the batch exactly as it was.
 * - A malformed or unexpected result is refused with SLUICE_EPARSE, never half-read.
 */
#ifndef SLUICE_STORE_PG_RECUR_H
#define SLUICE_STORE_PG_RECUR_H

#include <stddef.h>
#include <stdint.h>

#include "sluice/engine.h"
#include "store/pg_batch.h"
#include "store/redis_recur.h"

struct pg_result; /* libpq's PGresult */

/* The statement a batch is sent with (PGR_CALL_NPARAMS text parameters, from pgr_batch_params):
 * rows (request number from 1, one element of its answer) in the order the function returned
 * them, after one row of request number 0 when the call made work ready (pgbatch_woke, as
 * PGT_CALL_SQL's). Results in binary (PGR_CALL_RESULT_FORMAT): payloads are bytes, read in
 * place. Prepare it once per connection. */
#define PGR_CALL_SQL                                                                               \
    "SELECT req, val FROM (SELECT req, val, n FROM sluice_recur_call($1::bigint, $2::text[]) "     \
    "WITH ORDINALITY AS u(req, val, n) " PGBATCH_WAKE_ROW_SQL ") w ORDER BY n"
#define PGR_CALL_NPARAMS       2
#define PGR_CALL_RESULT_FORMAT 1

typedef struct pgr_batch pgr_batch;

/* Creates an empty batch. Returns 0 and *out, or SLUICE_ENOMEM with *out NULL. Free with
 * pgr_batch_free. */
int pgr_batch_new(pgr_batch **out);

/* Empties the batch, keeping its memory and its injected time. */
void pgr_batch_reset(pgr_batch *b);

/* Frees the batch. Accepts NULL. */
void pgr_batch_free(pgr_batch *b);

/* Tests only: decide at now_ns (still ratcheted) instead of clock_timestamp(); 0 goes back to
 * the database's clock. */
void pgr_batch_set_now(pgr_batch *b, int64_t now_ns);

/* Append one request each, with rrecur_batch_add_*'s checks. Return its index in the batch
 * (>= 0), or SLUICE_EINVAL (a bad argument) / SLUICE_ENOMEM, the batch unchanged. */
int pgr_batch_add_set(pgr_batch *b, const sluice_recurring_spec *spec);
int pgr_batch_add_del(pgr_batch *b, const char *name, size_t namelen);
int pgr_batch_add_info(pgr_batch *b, const char *name, size_t namelen);
int pgr_batch_add_list(pgr_batch *b, size_t max);
int pgr_batch_add_fire(pgr_batch *b, const rrecur_fire *f);

/* Requests in the batch. */
size_t pgr_batch_count(const pgr_batch *b);

/* The op of request i (0 when out of range). */
rrecur_op pgr_batch_op(const pgr_batch *b, size_t i);

/* The PGR_CALL_NPARAMS text parameters of PGR_CALL_SQL (values[0], the time, is NULL: the
 * database's clock). The array and its strings belong to the batch and stay valid until its
 * next add, reset or free. Returns 0, SLUICE_EINVAL for an empty batch, or SLUICE_ENOMEM. */
int pgr_batch_params(pgr_batch *b, const char *const **values);

/* Reads request i of the result of this batch's call (binary format). Returns 0 with *res
 * filled (the request's own refusal in res->rc; res->msg points into the result), SLUICE_EINVAL
 * for i out of range, or SLUICE_EPARSE for a result that is not the function's, with *res
 * zeroed. Every series of a LIST or INFO is checked here. */
int pgr_batch_result(const pgr_batch *b, const struct pg_result *result, size_t i,
                     rrecur_result *res);

/* Series k of LIST request i (0..nseries-1), or (k 0) the series of INFO request i; its strings
 * point into the result (valid while it is), not NUL-terminated. Returns 0, SLUICE_EINVAL (not
 * a LIST/INFO that answered OK, k out of range) or SLUICE_EPARSE. */
int pgr_batch_series(const pgr_batch *b, const struct pg_result *result, size_t i, size_t k,
                     rrecur_series *out);

#endif
