/* SPDX-License-Identifier: MIT */
/*
 * sluice's schema in PostgreSQL: numbered migrations (src/store/pg/NNN_*.sql, embedded at build
 * time), applied in order inside one transaction that records the version reached in the table
 * sluice_schema. A node calls pgs_migrate once per connection set-up, before its first call.
 *
 * Ensures:
 * - a database on an older version is brought to PGS_VERSION, all migrations or none;
 * - nodes starting at once migrate one at a time (a transaction-scoped advisory lock), so a
 *   migration never runs twice;
 * - a database on a newer version than this build knows is refused with a message, unchanged:
 *   an older sluice must not write state whose meaning changed under it.
 *
 * Synchronous (blocking libpq calls): meant for start-up, not for the event loop.
 */
#ifndef SLUICE_STORE_PG_SCHEMA_H
#define SLUICE_STORE_PG_SCHEMA_H

#include <stddef.h>

struct pg_conn; /* libpq's PGconn */

/* The schema version this build writes and reads. */
#define PGS_VERSION 11

/* The text of migration v (1..PGS_VERSION) and its length, or NULL for another v. */
const char *pgs_migration(int v, size_t *len);

/* Brings conn's database to PGS_VERSION. *from (may be NULL) receives the version found (0: none).
 * Returns 0; SLUICE_ESTATE when the database holds a newer schema; SLUICE_EIO when a statement
 * failed (the connection's error). On failure err (errlen bytes, may be NULL) holds a sentence
 * for the operator, and the transaction was rolled back. */
int pgs_migrate(struct pg_conn *conn, int *from, char *err, size_t errlen);

#endif
