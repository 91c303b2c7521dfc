/* SPDX-License-Identifier: MIT */
/*
 * The shared task queue on PostgreSQL: the encoder and decoder of one batched call of the task
 * function sluice_tasks_call (src/store/pg/002_tasks.sql, applied by store/pg_schema.c). Pure,
 * like pg_limits.h: it builds the call's parameters and reads its result; no connection, no
 * clock. The caller owns the connection, sends PGT_CALL_SQL with pgt_batch_params (asking for
 * results in PGT_CALL_RESULT_FORMAT) and hands the PGresult back.
 *
 * The requests and answers are the Redis store's (store/redis_tasks.h: rtask_add, rtask_claim,
 * rtask_done, rtask_result, rtask_task), with the same meaning and the same answers request for
 * request (tests/tools/tasks_diff.c runs both on the same random operations); only the transport
 * differs. Its semantics, bounds and what this slice leaves out are redis_tasks.h's. One batch is
 * one function call carrying many requests, evaluated in order in one transaction; each request
 * is atomic. Every time is the database's (clock_timestamp() read after the call's locks,
 * ratcheted so that it never goes back), never the caller's. A claim takes its tasks with FOR
 * UPDATE SKIP LOCKED, so nodes claiming at once take different tasks; a task or wait queue
 * another node's call holds is left for a later claim (the answer says `more`).
 *
 * A call in which a request made work ready answers a leading row of request number 0
 * (pgbatch_woke); its caller then runs pg_notify(PGT_WAKE_CHANNEL, '1') in a transaction of its
 * own (schema version 7, 007_pgconns.sql: a pg_notify inside the call would serialize every
 * node's commits): a node LISTENs on it to wake its blocked TASK.GETs.
 *
 * Invariants:
 * - Requests come back in the order they were added; pgt_batch_result(i) reads the i-th.
 * - The batch copies what it is given; a failed add leaves the batch exactly as it was.
 * - A malformed or unexpected result is refused with SLUICE_EPARSE, never half-read.
 */
#ifndef SLUICE_STORE_PG_TASKS_H
#define SLUICE_STORE_PG_TASKS_H

#include <stddef.h>
#include <stdint.h>

#include "store/pg_batch.h"
#include "store/redis_tasks.h"

struct pg_result; /* libpq's PGresult */

/* The statement a batch is sent with (PGT_CALL_NPARAMS text parameters, from pgt_batch_params):
 * rows (request number from 1, one element of its answer), in the order the function returned
 * them (WITH ORDINALITY: never left to the planner), after one row of request number 0 when the
 * call made work ready (pgbatch_woke: the caller then notifies PGT_WAKE_CHANNEL). Its results must
 * be asked in binary (PGT_CALL_RESULT_FORMAT, the resultFormat argument of PQexecParams /
 * PQsendQueryPrepared): payloads are bytes, read in place. Prepare it once per connection. */
#define PGT_CALL_SQL                                                                               \
    "SELECT req, val FROM (SELECT req, val, n FROM sluice_tasks_call($1::bigint, $2::text[], "     \
    "$3::bigint, $4::bigint) WITH ORDINALITY AS u(req, val, n) " PGBATCH_WAKE_ROW_SQL ") w "       \
    "ORDER BY n"
#define PGT_CALL_NPARAMS       4
#define PGT_CALL_RESULT_FORMAT 1

/* The channel of the wake-up notifications (LISTEN sluice_wake). */
#define PGT_WAKE_CHANNEL "sluice_wake"

typedef struct pgt_batch pgt_batch;

/* Creates an empty batch. Returns 0 and *out, or SLUICE_ENOMEM with *out NULL. Free with
 * pgt_batch_free. */
int pgt_batch_new(pgt_batch **out);

/* Empties the batch for the next loop turn, keeping its memory and its injected time. */
void pgt_batch_reset(pgt_batch *b);

/* Frees the batch. Accepts NULL. */
void pgt_batch_free(pgt_batch *b);

/* Tests only: decide at now_ns (still ratcheted) instead of clock_timestamp(); 0 goes back to
 * the database's clock. */
void pgt_batch_set_now(pgt_batch *b, int64_t now_ns);

/* The caps every call of the batch carries (kept across resets), as rtask_batch_set_caps:
 * max_tasks and max_parked (0: none), enforced by the function with the Redis script's rules
 * (redis_tasks.h, "Caps"). */
void pgt_batch_set_caps(pgt_batch *b, uint64_t max_tasks, uint64_t max_parked);

/* Append one request each, with rtask_batch_add_*'s checks. Return its index in the batch
 * (>= 0), or SLUICE_EINVAL (a bad argument) / SLUICE_ENOMEM, the batch unchanged. */
int pgt_batch_add_add(pgt_batch *b, const rtask_add *a);
int pgt_batch_add_claim(pgt_batch *b, const rtask_claim *c);
int pgt_batch_add_ack(pgt_batch *b, const rtask_done *d);
int pgt_batch_add_fail(pgt_batch *b, const rtask_done *d);
int pgt_batch_add_touch(pgt_batch *b, const rtask_done *d);
int pgt_batch_add_cancel(pgt_batch *b, const rtask_done *d);
int pgt_batch_add_info(pgt_batch *b, const rtask_done *d);

/* Requests in the batch. */
size_t pgt_batch_count(const pgt_batch *b);

/* The op of request i (0 when out of range). */
rtask_op pgt_batch_op(const pgt_batch *b, size_t i);

/* The PGT_CALL_NPARAMS text parameters of PGT_CALL_SQL (values[0], the time, is NULL: the
 * database's clock; values[2] and [3] the caps). The array and its strings belong to the batch and
 * stay valid until its next add, reset or free. Returns 0, SLUICE_EINVAL for an empty batch, or
 * SLUICE_ENOMEM. */
int pgt_batch_params(pgt_batch *b, const char *const **values);

/* Reads request i of the result of this batch's call (binary format). Returns 0 with *res
 * filled (the request's own refusal in res->rc; res->msg points into the result), SLUICE_EINVAL
 * for i out of range, or SLUICE_EPARSE for a result that is not the function's, with *res
 * zeroed. */
int pgt_batch_result(const pgt_batch *b, const struct pg_result *result, size_t i,
                     rtask_result *res);

/* Task k (0..ndelivered-1) of CLAIM request i, or (k 0) the task of INFO request i; its strings
 * point into the result (valid while it is). Returns 0, SLUICE_EINVAL (i not a CLAIM/INFO, k
 * out of range, the request refused) or SLUICE_EPARSE. */
int pgt_batch_task(const pgt_batch *b, const struct pg_result *result, size_t i, size_t k,
                   rtask_task *out);

#endif
