/* SPDX-License-Identifier: MIT */
/*
 * The part of a batched PostgreSQL call that the task and series encoders share (pg_tasks.c,
 * pg_recur.c): requests kept as the body of one text-array literal, each a double-quoted element
 * of space-separated fields, the roll-back of a request that fails half-way, the two text
 * parameters of the call (the injected time and the literal), and the reading of the answer,
 * whose rows are (request number int4, element bytea) in binary format, in request order. Each
 * encoder embeds one pgbatch and keeps its op enum in `ops`. Pure: no I/O.
 *
 * Invariants:
 * - a request opened with pgbatch_begin is either closed and counted by pgbatch_end, or cut
 *   back to its mark: the body never holds half a request;
 * - the parameters point into the batch (valid until its next change).
 */
#ifndef SLUICE_STORE_PG_BATCH_H
#define SLUICE_STORE_PG_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "base/attr.h"
#include "store/packed.h"

struct pg_result; /* libpq's PGresult */

typedef struct pgbatch {
    int64_t now_ns;  /* injected time; 0: clock_timestamp() */
    packed_str body; /* the array literal's body: "r1","r2",... */
    packed_str lit;  /* the literal sent: {body} */
    int *ops;        /* each request's op (the encoder's enum) */
    size_t nreqs;
    size_t capops;
    char now[24];          /* the time parameter's text */
    const char *values[2]; /* the call's parameters: the time, the literal */
} pgbatch;

/* Empties b for the next call, keeping its memory. */
void pgbatch_reset(pgbatch *b);

/* Frees what b owns (not b itself). */
void pgbatch_fini(pgbatch *b);

/* Injected store time for tests (0 or less: the database's clock_timestamp()). */
void pgbatch_set_now(pgbatch *b, int64_t now_ns);

/* A space, then a formatted field (at most 254 bytes: SLUICE_EINVAL beyond). */
int pgbatch_put_fmt(packed_str *s, const char *fmt, ...) PRINTF_ATTR(2, 3);

/* A space, then bytes as lowercase hex (nothing for none: an empty field). */
int pgbatch_put_hex(packed_str *s, const void *data, size_t len);

/* Opens a request whose first field is the letter `op`; returns 0 or SLUICE_ENOMEM. Take
 * `mark = b->body.len` before it for pgbatch_end. */
int pgbatch_begin(pgbatch *b, char op);

/* Closes the request opened at `mark` and records `op` for it, when rc is 0: returns its index.
 * Otherwise, or when the batch cannot take it, cuts the body back to mark and returns the
 * error (rc, SLUICE_EINVAL or SLUICE_ENOMEM). */
int pgbatch_end(pgbatch *b, int op, size_t mark, int rc);

/* The two text parameters of the call in *values. SLUICE_EINVAL for an empty batch,
 * SLUICE_ENOMEM. */
int pgbatch_params(pgbatch *b, const char *const **values);

/* Rows [*first, *first + *n) of result hold request i's elements (at least one); the result's
 * shape and every row's request number are checked (a leading wake row, PGBATCH_WAKE_ROW_SQL, is
 * skipped). SLUICE_EPARSE for anything else. */
int pgbatch_rows(const pgbatch *b, const struct pg_result *result, size_t i, int *first, int *n);

/* The tail of the task and series call statements (PGT_CALL_SQL, PGR_CALL_SQL, inside their
 * `FROM (...)`, whose rows are (req, val, n)): one more row, (0, '', 0), when a request of the
 * call made work ready (schema version 7 notes it in the transaction-local setting sluice.twake,
 * 007_pgconns.sql). UNION ALL runs its branches in order, so the setting is read after the
 * function has run; ORDER BY n puts the row first. */
#define PGBATCH_WAKE_ROW_SQL                                                                       \
    "UNION ALL SELECT 0, ''::bytea, 0 WHERE current_setting('sluice.twake', true) = '1'"

/* 1 when result (a call of PGT_CALL_SQL or PGR_CALL_SQL that succeeded) carries the wake row:
 * a request made work ready, and the caller should run pg_notify on the wake channel once the
 * call has answered. 0 otherwise (an error, no row, another shape). */
int pgbatch_woke(const struct pg_result *result);

#endif
