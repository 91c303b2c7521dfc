/* SPDX-License-Identifier: MIT */
/*
 * The schema migrations of the PostgreSQL store (pg_schema.h). The migration texts are the files
 * of src/store/pg/, turned into C arrays by cmake/embed_text.cmake, so the binary carries exactly
 * the SQL that the tests ran.
 *
 * Invariant: migration v is applied only on top of version v - 1, in the same transaction as the
 * update of sluice_schema, so the recorded version always names what the database holds.
 */
#include "store/pg_schema.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sluice/error.h"

/* Defined by the files CMake generates from src/store/pg/NNN_*.sql. */
extern const char pgs_sql_001[];
extern const size_t pgs_sql_001_len;
extern const char pgs_sql_002[];
extern const size_t pgs_sql_002_len;
extern const char pgs_sql_003[];
extern const size_t pgs_sql_003_len;

/* The advisory lock migrators take: any constant of our own ("sluice" in ASCII). */
#define PGS_LOCK_KEY "125779665104229"

const char *pgs_migration(int v, size_t *len)
{
    switch (v) {
    case 1:
        if (len)
            *len = pgs_sql_001_len;
        return pgs_sql_001;
    case 2:
        if (len)
            *len = pgs_sql_002_len;
        return pgs_sql_002;
    case 3:
        if (len)
            *len = pgs_sql_003_len;
        return pgs_sql_003;
    default:
        return NULL;
    }
}

/* Runs one statement (or several, simple protocol). Returns 0, or SLUICE_EIO with err set. */
static int exec(PGconn *c, const char *sql, PGresult **out, char *err, size_t errlen)
{
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;

    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        if (err)
            snprintf(err, errlen, "PostgreSQL schema set-up failed: %s", PQerrorMessage(c));
        PQclear(r);
        return SLUICE_EIO;
    }
    if (out)
        *out = r;
    else
        PQclear(r);
    return SLUICE_OK;
}

int pgs_migrate(struct pg_conn *conn, int *from, char *err, size_t errlen)
{
    PGconn *c = conn;
    PGresult *r = NULL;
    char sql[128];
    int version = 0, rc;

    if (from)
        *from = 0;
    if (err && errlen)
        err[0] = '\0';
    rc = exec(c, "BEGIN", NULL, err, errlen);
    if (rc != SLUICE_OK)
        return rc;
    rc = exec(c,
              "SELECT pg_advisory_xact_lock(" PGS_LOCK_KEY ");"
              "CREATE TABLE IF NOT EXISTS sluice_schema (version integer NOT NULL)",
              NULL, err, errlen);
    if (rc == SLUICE_OK)
        rc = exec(c, "SELECT coalesce(max(version), 0) FROM sluice_schema", &r, err, errlen);
    if (rc != SLUICE_OK)
        goto fail_rollback;
    version = atoi(PQgetvalue(r, 0, 0));
    PQclear(r);
    if (from)
        *from = version;
    if (version > PGS_VERSION) {
        if (err)
            snprintf(err, errlen,
                     "the database's sluice schema is version %d, newer than this sluice knows "
                     "(%d): upgrade sluice, or use another database",
                     version, PGS_VERSION);
        rc = SLUICE_ESTATE;
        goto fail_rollback;
    }
    for (int v = version + 1; v <= PGS_VERSION; v++) {
        rc = exec(c, pgs_migration(v, NULL), NULL, err, errlen);
        if (rc != SLUICE_OK)
            goto fail_rollback;
    }
    snprintf(sql, sizeof sql,
             "DELETE FROM sluice_schema; INSERT INTO sluice_schema (version) VALUES (%d)",
             PGS_VERSION);
    if (version < PGS_VERSION)
        rc = exec(c, sql, NULL, err, errlen);
    if (rc == SLUICE_OK)
        rc = exec(c, "COMMIT", NULL, err, errlen);
    if (rc != SLUICE_OK)
        goto fail_rollback;
    return SLUICE_OK;

fail_rollback:
    PQclear(PQexec(c, "ROLLBACK"));
    return rc;
}
