/* SPDX-License-Identifier: MIT */
/*
 * The SQLite backend of the store: one database, <dir>/sluice.db, in WAL mode, written by one
 * process at a time (an flock on <dir>/LOCK, which holds the owner's pid for the message the
 * next one gets). Every statement is prepared once at open. The expected workload is one small
 * transaction per loop turn (a few rows of tasks and key states), read back whole at start-up.
 *
 * How a commit becomes durable:
 * - STORE_ALWAYS: synchronous=FULL. In WAL mode SQLite then fsyncs the WAL at the end of every
 *   commit, before COMMIT returns; the commit frame, checksummed and salted, is what crash
 *   recovery looks for. The unix VFS fsyncs the directory the first time it syncs a new WAL.
 *   One store_commit per loop turn makes that one fsync a group commit.
 * - STORE_BATCH: synchronous=NORMAL. A commit appends its frames to the WAL without an fsync:
 *   it survives a crash of the process (the kernel has the pages) but not of the machine.
 *   store_sync then fsyncs the WAL file itself (xSync on the WAL's sqlite3_file, found with
 *   SQLITE_FCNTL_JOURNAL_POINTER): one fsync of sequential data makes every frame written so far
 *   durable, and as frames carry cumulative checksums, recovery finds every commit up to the
 *   last one synced. A PASSIVE checkpoint would fsync the WAL too, but only when it has pages to
 *   copy back (a reader such as an operator's sqlite3 shell holding an old snapshot makes it do
 *   nothing, sync included), and it adds a second fsync and random writes to the database file.
 * - Checkpoints: the WAL hook replaces SQLite's auto-checkpoint, which runs inside COMMIT and
 *   would report its own I/O error as the failure of a transaction that did commit. We run a
 *   PASSIVE checkpoint after a commit that left the WAL past CHECKPOINT_FRAMES; its errors are
 *   not the commit's (the WAL still holds everything) and it is tried again after the next one.
 *
 * Failures: any error of a put or of COMMIT rolls the transaction back and leaves a one-line
 * reason ("disk full", "fsync failed: Input/output error"). The pager leaves its error state
 * when the transaction ends, so the next transaction runs normally once the cause is gone. A
 * commit whose frames were written but whose fsync failed leaves those frames in the WAL beyond
 * its valid end; the next commit overwrites them, and until then a crash could let recovery find
 * them: a change reported as failed may survive a crash, an acknowledged one is never lost. A
 * failed fsync is not retried as if it had proved anything (PostgreSQL's lesson); a failed
 * store_sync leaves the commits since the last good one in doubt, and says so.
 *
 * Locking: EXCLUSIVE (set before the first access in WAL mode). One process writes the database
 * anyway (the flock on LOCK), so SQLite takes its file locks once and keeps the WAL index in
 * memory, not in a -shm file: a commit makes no lock calls. No other process can read the
 * database while a server has it open; it can once the server stopped (or was killed: the next
 * open recovers the WAL as usual).
 *
 * Schema: version SCHEMA_VERSION, kept in meta under "store.schema_version"; the file is marked
 * with PRAGMA application_id. To change the schema, append a step to `migrations` (never edit a
 * released one); open runs the missing steps in one transaction and refuses a newer schema.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "base/alloc.h"
#include "sluice/error.h"
#include "store/faultvfs.h"
#include "store/store_impl.h"

#define APPLICATION_ID    0x736c7563 /* "sluc" */
#define CHECKPOINT_FRAMES 1000       /* WAL frames after which a commit is followed by one */
#define BUSY_TIMEOUT_MS   250        /* only an outside process can hold a lock we want */
#define WAL_SIZE_LIMIT    "67108864" /* bytes of WAL kept after a checkpoint resets it */

/* Schema steps: migrations[v] takes version v to v + 1. */
static const char *const migrations[] = {
    "CREATE TABLE meta(name TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE limits(name TEXT PRIMARY KEY NOT NULL, spec TEXT NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE recurring(name TEXT PRIMARY KEY NOT NULL, type TEXT NOT NULL, payload BLOB,"
    " key BLOB, interval_ns INTEGER NOT NULL, cron TEXT, start_ns INTEGER NOT NULL,"
    " end_ns INTEGER NOT NULL, max_runs INTEGER NOT NULL, runs INTEGER NOT NULL,"
    " skipped INTEGER NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE keys(\"limit\" TEXT NOT NULL, key BLOB NOT NULL, state BLOB NOT NULL,"
    " PRIMARY KEY(\"limit\", key)) WITHOUT ROWID;"
    "CREATE TABLE tasks(id INTEGER PRIMARY KEY, state INTEGER NOT NULL, type TEXT NOT NULL,"
    " payload BLOB, key BLOB, task_key BLOB, units INTEGER NOT NULL, priority INTEGER NOT NULL,"
    " attempt INTEGER NOT NULL, submitted_ns INTEGER NOT NULL, not_before_ns INTEGER NOT NULL,"
    " lease_until_ns INTEGER NOT NULL, granted INTEGER NOT NULL, series TEXT,"
    " fail_reason INTEGER NOT NULL, fail_limit TEXT, fail_message TEXT);",
    /* 2: a task's group slot (the producer's lease it runs under), restored with the lease. */
    "ALTER TABLE tasks ADD COLUMN lease_limit TEXT;"
    "ALTER TABLE tasks ADD COLUMN lease_id INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE tasks ADD COLUMN lease_tag INTEGER NOT NULL DEFAULT 0;",
};

#define SCHEMA_VERSION ((int64_t)(sizeof migrations / sizeof migrations[0]))

enum stmt_id {
    ST_BEGIN,
    ST_COMMIT,
    ST_ROLLBACK,
    ST_PUT_TASK,
    ST_DEL_TASK,
    ST_PUT_KEY,
    ST_DEL_KEY,
    ST_DEL_LIMIT_KEYS,
    ST_PUT_LIMIT,
    ST_DEL_LIMIT,
    ST_PUT_RECURRING,
    ST_DEL_RECURRING,
    ST_PUT_META,
    ST_LOAD_META,
    ST_LOAD_LIMITS,
    ST_LOAD_RECURRING,
    ST_LOAD_KEYS,
    ST_LOAD_TASKS,
    ST_COUNT
};

static const char *const stmt_sql[ST_COUNT] = {
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_PUT_TASK] = "INSERT OR REPLACE INTO tasks(id, state, type, payload, key, task_key, units,"
                    " priority, attempt, submitted_ns, not_before_ns, lease_until_ns, granted,"
                    " series, fail_reason, fail_limit, fail_message, lease_limit, lease_id,"
                    " lease_tag)"
                    " VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    [ST_DEL_TASK] = "DELETE FROM tasks WHERE id = ?",
    [ST_PUT_KEY] = "INSERT OR REPLACE INTO keys(\"limit\", key, state) VALUES(?, ?, ?)",
    [ST_DEL_KEY] = "DELETE FROM keys WHERE \"limit\" = ? AND key = ?",
    [ST_DEL_LIMIT_KEYS] = "DELETE FROM keys WHERE \"limit\" = ?",
    [ST_PUT_LIMIT] = "INSERT OR REPLACE INTO limits(name, spec) VALUES(?, ?)",
    [ST_DEL_LIMIT] = "DELETE FROM limits WHERE name = ?",
    [ST_PUT_RECURRING] = "INSERT OR REPLACE INTO recurring(name, type, payload, key, interval_ns,"
                         " cron, start_ns, end_ns, max_runs, runs, skipped)"
                         " VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    [ST_DEL_RECURRING] = "DELETE FROM recurring WHERE name = ?",
    [ST_PUT_META] = "INSERT OR REPLACE INTO meta(name, value) VALUES(?, ?)",
    [ST_LOAD_META] = "SELECT name, value FROM meta WHERE substr(name, 1, 6) <> 'store.'"
                     " ORDER BY name",
    [ST_LOAD_LIMITS] = "SELECT name, spec FROM limits ORDER BY name",
    [ST_LOAD_RECURRING] = "SELECT name, type, payload, key, interval_ns, cron, start_ns, end_ns,"
                          " max_runs, runs, skipped FROM recurring ORDER BY name",
    [ST_LOAD_KEYS] = "SELECT \"limit\", key, state FROM keys ORDER BY \"limit\", key",
    [ST_LOAD_TASKS] = "SELECT id, state, type, payload, key, task_key, units, priority, attempt,"
                      " submitted_ns, not_before_ns, lease_until_ns, granted, series,"
                      " fail_reason, fail_limit, fail_message, lease_limit, lease_id, lease_tag"
                      " FROM tasks ORDER BY id",
};

typedef struct sqlite_store {
    sqlite3 *db;
    sqlite3_stmt *stmt[ST_COUNT]; /* prepared at open, finalized at close */
    int lock_fd;                  /* holds the flock on <dir>/LOCK; -1 when none */
    int wal_frames;               /* frames in the WAL after the last commit (WAL hook) */
    char err[256];                /* the last failure, one line */
} sqlite_store;

/* ---- Errors ---------------------------------------------------------------------------- */

/* Describes SQLite result rc (extended) in ss->err, with sys_errno when it is an I/O error;
 * returns the sluice code for it. */
static int sq_error(sqlite_store *ss, int rc, int sys_errno)
{
    const char *what;
    int primary = rc & 0xff;
    int with_errno = 1;

    switch (rc) {
    case SQLITE_IOERR_FSYNC:
    case SQLITE_IOERR_DIR_FSYNC:
        what = "fsync failed";
        break;
    case SQLITE_IOERR_WRITE:
        what = "write failed";
        break;
    case SQLITE_IOERR_READ:
    case SQLITE_IOERR_SHORT_READ:
        what = "read failed";
        break;
    case SQLITE_IOERR_TRUNCATE:
        what = "truncate failed";
        break;
    default:
        with_errno = primary == SQLITE_IOERR || primary == SQLITE_CANTOPEN;
        switch (primary) {
        case SQLITE_FULL:
            what = "disk full";
            break;
        case SQLITE_IOERR:
            what = "I/O error";
            break;
        case SQLITE_CORRUPT:
            what = "database corrupt";
            break;
        case SQLITE_NOTADB:
            what = "not a database";
            break;
        case SQLITE_NOMEM:
            what = "out of memory";
            break;
        case SQLITE_READONLY:
            what = "database is read-only";
            break;
        case SQLITE_BUSY:
        case SQLITE_LOCKED:
            what = "database is locked";
            break;
        case SQLITE_CANTOPEN:
            what = "cannot open the database file";
            break;
        case SQLITE_PERM:
            what = "permission denied";
            break;
        default:
            what = ss->db ? sqlite3_errmsg(ss->db) : sqlite3_errstr(rc);
            break;
        }
    }
    if (with_errno && sys_errno > 0)
        snprintf(ss->err, sizeof ss->err, "%s: %s", what, strerror(sys_errno));
    else
        snprintf(ss->err, sizeof ss->err, "%s", what);
    if (primary == SQLITE_NOMEM)
        return SLUICE_ENOMEM;
    if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED)
        return SLUICE_EBUSY;
    return SLUICE_EIO;
}

/* The error of the last call on the connection that returned rc. */
static int db_error(sqlite_store *ss, int rc)
{
    return sq_error(ss, rc, sqlite3_system_errno(ss->db));
}

/* ---- Statements ------------------------------------------------------------------------ */

/* Binds parameters left to right, keeping the first error. */
typedef struct binder {
    sqlite3_stmt *st;
    int i;  /* the last parameter bound (1-based) */
    int rc; /* the first bind error, or SQLITE_OK */
} binder;

static void b_i64(binder *b, int64_t v)
{
    int rc = sqlite3_bind_int64(b->st, ++b->i, v);

    if (b->rc == SQLITE_OK)
        b->rc = rc;
}

/* NULL binds SQL NULL. */
static void b_text(binder *b, const char *s)
{
    int rc = s ? sqlite3_bind_text(b->st, ++b->i, s, -1, SQLITE_STATIC)
               : sqlite3_bind_null(b->st, ++b->i);

    if (b->rc == SQLITE_OK)
        b->rc = rc;
}

/* NULL binds SQL NULL; any other pointer a blob of len bytes (possibly empty). */
static void b_blob(binder *b, const void *p, size_t len)
{
    int rc = p ? sqlite3_bind_blob64(b->st, ++b->i, p, (sqlite3_uint64)len, SQLITE_STATIC)
               : sqlite3_bind_null(b->st, ++b->i);

    if (b->rc == SQLITE_OK)
        b->rc = rc;
}

/* Runs a bound statement that returns no rows, then resets and unbinds it. */
static int run(sqlite_store *ss, const binder *b)
{
    int rc = b->rc;
    int out = 0;

    if (rc == SQLITE_OK)
        rc = sqlite3_step(b->st);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW && rc != SQLITE_OK)
        out = db_error(ss, rc);
    sqlite3_reset(b->st);
    sqlite3_clear_bindings(b->st);
    return out;
}

static binder bind_start(sqlite_store *ss, enum stmt_id id)
{
    return (binder){.st = ss->stmt[id], .i = 0, .rc = SQLITE_OK};
}

/* Runs SQL text (several statements allowed) outside the statement cache. */
static int exec_sql(sqlite_store *ss, const char *sql)
{
    int rc = sqlite3_exec(ss->db, sql, NULL, NULL, NULL);

    return rc == SQLITE_OK ? 0 : db_error(ss, rc);
}

/* Runs a one-row query of one integer; *found says whether there was a row. */
static int query_int(sqlite_store *ss, const char *sql, int64_t *out, int *found)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(ss->db, sql, -1, &st, NULL);
    int ret = 0;

    *out = 0;
    *found = 0;
    if (rc != SQLITE_OK)
        return db_error(ss, rc);
    rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) {
        *out = sqlite3_column_int64(st, 0);
        *found = 1;
    } else if (rc != SQLITE_DONE) {
        ret = db_error(ss, rc);
    }
    sqlite3_finalize(st);
    return ret;
}

/* Reads a text or blob column as a NUL-terminated borrowed pointer and its length; SQL NULL
 * gives NULL and 0. (sqlite3_column_text terminates blobs too, without changing the bytes.) */
static int col_bytes(sqlite_store *ss, sqlite3_stmt *st, int i, const char **p, size_t *len)
{
    *p = NULL;
    *len = 0;
    if (sqlite3_column_type(st, i) == SQLITE_NULL)
        return 0;
    *p = (const char *)sqlite3_column_text(st, i);
    *len = (size_t)sqlite3_column_bytes(st, i);
    if (!*p) {
        if (sqlite3_errcode(ss->db) == SQLITE_NOMEM)
            return sq_error(ss, SQLITE_NOMEM, 0);
        *p = "";
        *len = 0;
    }
    return 0;
}

/* ---- Opening --------------------------------------------------------------------------- */

static void fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

    /* Best effort: some file systems refuse fsync on a directory, and SQLite syncs the
     * directory of the WAL itself. */
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

/* Creates dir and its missing parents with mode 0700. Returns 0 or -1 with errno. */
static int make_dirs(const char *dir)
{
    char path[PATH_MAX];
    size_t len = strlen(dir);
    struct stat sb;

    if (stat(dir, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode)) {
            errno = ENOTDIR;
            return -1;
        }
        return 0;
    }
    if (len >= sizeof path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(path, dir, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        path[i] = '\0';
        if (mkdir(path, 0700) != 0 && errno != EEXIST)
            return -1;
        if (i < len)
            path[i] = '/';
    }
    /* Make the new directory's name durable in its parent. */
    while (len > 1 && path[len - 1] == '/')
        path[--len] = '\0';
    {
        char *slash = strrchr(path, '/');

        if (!slash)
            fsync_dir(".");
        else if (slash == path)
            fsync_dir("/");
        else {
            *slash = '\0';
            fsync_dir(path);
        }
    }
    return 0;
}

/* Takes the flock on <dir>/LOCK and writes our pid in it. */
static int lock_dir(sqlite_store *ss, const char *dir, const char *lockpath, char *msg,
                    size_t msglen)
{
    char buf[32];
    int fd = open(lockpath, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    int len;

    if (fd < 0) {
        snprintf(msg, msglen, "data directory %s: cannot create LOCK: %s", dir, strerror(errno));
        return SLUICE_EINVAL;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
        long pid = 0;

        if (n > 0) {
            buf[n] = '\0';
            pid = strtol(buf, NULL, 10);
        }
        close(fd);
        if (e != EWOULDBLOCK) {
            snprintf(msg, msglen, "data directory %s: cannot lock LOCK: %s", dir, strerror(e));
            return SLUICE_EINVAL;
        }
        if (pid > 0)
            snprintf(msg, msglen, "data directory %s is in use by another sluice (pid %ld)", dir,
                     pid);
        else
            snprintf(msg, msglen, "data directory %s is in use by another sluice", dir);
        return SLUICE_EBUSY;
    }
    len = snprintf(buf, sizeof buf, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, buf, (size_t)len, 0) != len) {
        snprintf(msg, msglen, "data directory %s: cannot write LOCK: %s", dir, strerror(errno));
        close(fd);
        return SLUICE_EINVAL;
    }
    ss->lock_fd = fd;
    return 0;
}

/* Brings the schema to SCHEMA_VERSION in one transaction. */
static int migrate(sqlite_store *ss)
{
    int64_t app_id, ntables, version = 0;
    int found, rc;
    char sql[128];

    if ((rc = exec_sql(ss, "BEGIN IMMEDIATE")) != 0)
        return rc;
    if ((rc = query_int(ss, "PRAGMA application_id", &app_id, &found)) != 0 ||
        (rc = query_int(ss, "SELECT count(*) FROM sqlite_master WHERE type = 'table'", &ntables,
                        &found)) != 0)
        goto fail;
    if (app_id != APPLICATION_ID) {
        if (app_id != 0 || ntables != 0) {
            snprintf(ss->err, sizeof ss->err, "sluice.db is not a sluice database");
            rc = SLUICE_EINVAL;
            goto fail;
        }
    } else {
        rc = query_int(ss, "SELECT value FROM meta WHERE name = 'store.schema_version'", &version,
                       &found);
        if (rc)
            goto fail;
        if (!found || version < 1) {
            snprintf(ss->err, sizeof ss->err, "sluice.db has no schema version");
            rc = SLUICE_EINVAL;
            goto fail;
        }
    }
    if (version > SCHEMA_VERSION) {
        snprintf(ss->err, sizeof ss->err,
                 "sluice.db has schema %" PRId64 ", newer than this sluice's %" PRId64
                 " (upgrade sluice)",
                 version, SCHEMA_VERSION);
        rc = SLUICE_EINVAL;
        goto fail;
    }
    if (version == SCHEMA_VERSION)
        return exec_sql(ss, "COMMIT");
    if (version == 0) {
        snprintf(sql, sizeof sql, "PRAGMA application_id = %d", APPLICATION_ID);
        if ((rc = exec_sql(ss, sql)) != 0)
            goto fail;
    }
    for (int64_t v = version; v < SCHEMA_VERSION; v++) {
        if ((rc = exec_sql(ss, migrations[v])) != 0)
            goto fail;
    }
    snprintf(sql, sizeof sql,
             "INSERT OR REPLACE INTO meta(name, value) VALUES('store.schema_version', %" PRId64 ")",
             SCHEMA_VERSION);
    if ((rc = exec_sql(ss, sql)) != 0 || (rc = exec_sql(ss, "COMMIT")) != 0)
        goto fail;
    return 0;

fail:
    if (!sqlite3_get_autocommit(ss->db))
        sqlite3_exec(ss->db, "ROLLBACK", NULL, NULL, NULL);
    return rc;
}

static int wal_hook(void *arg, sqlite3 *db, const char *name, int frames)
{
    (void)db;
    (void)name;
    ((sqlite_store *)arg)->wal_frames = frames;
    return SQLITE_OK;
}

/* Sets up the connection: WAL, sync level, schema, statements. */
static int setup(sqlite_store *ss, store_durability durability)
{
    sqlite3_stmt *st = NULL;
    int rc, ret = 0;

    sqlite3_extended_result_codes(ss->db, 1);
    sqlite3_busy_timeout(ss->db, BUSY_TIMEOUT_MS);
    sqlite3_db_config(ss->db, SQLITE_DBCONFIG_DEFENSIVE, 1, (int *)NULL);

    /* Before WAL mode is entered, so that the WAL index lives in memory (Locking, above): six
     * fcntl calls less per commit. */
    if ((rc = exec_sql(ss, "PRAGMA locking_mode = EXCLUSIVE")) != 0)
        return rc;
    rc = sqlite3_prepare_v2(ss->db, "PRAGMA journal_mode = WAL", -1, &st, NULL);
    if (rc != SQLITE_OK)
        return db_error(ss, rc);
    rc = sqlite3_step(st);
    if (rc != SQLITE_ROW) {
        ret = db_error(ss, rc);
    } else if (strcmp((const char *)sqlite3_column_text(st, 0), "wal") != 0) {
        snprintf(ss->err, sizeof ss->err, "cannot switch sluice.db to WAL mode");
        ret = SLUICE_ESTATE;
    }
    sqlite3_finalize(st);
    if (ret)
        return ret;
    rc = exec_sql(ss, durability == STORE_ALWAYS ? "PRAGMA synchronous = FULL"
                                                 : "PRAGMA synchronous = NORMAL");
    if (rc || (rc = exec_sql(ss, "PRAGMA journal_size_limit = " WAL_SIZE_LIMIT)) != 0 ||
        (rc = migrate(ss)) != 0)
        return rc;
    for (int i = 0; i < ST_COUNT; i++) {
        rc = sqlite3_prepare_v3(ss->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &ss->stmt[i],
                                NULL);
        if (rc != SQLITE_OK)
            return db_error(ss, rc);
    }
    sqlite3_wal_hook(ss->db, wal_hook, ss);
    return 0;
}

static void sq_close(void *impl)
{
    sqlite_store *ss = impl;

    if (!ss)
        return;
    if (ss->db) {
        if (!sqlite3_get_autocommit(ss->db))
            sqlite3_exec(ss->db, "ROLLBACK", NULL, NULL, NULL);
        for (int i = 0; i < ST_COUNT; i++)
            sqlite3_finalize(ss->stmt[i]);
        sqlite3_close_v2(ss->db);
    }
    if (ss->lock_fd >= 0)
        close(ss->lock_fd); /* releases the flock */
    alloc_free(ss);
}

static int sq_open(const store_options *o, void **impl, char *msg, size_t msglen)
{
    char dbpath[PATH_MAX], lockpath[PATH_MAX];
    const char *vfs = NULL;
    const char *env = getenv("SLUICE_FAULT_VFS");
    sqlite_store *ss;
    int rc;

    *impl = NULL;
    if ((size_t)snprintf(dbpath, sizeof dbpath, "%s/sluice.db", o->dir) >= sizeof dbpath ||
        (size_t)snprintf(lockpath, sizeof lockpath, "%s/LOCK", o->dir) >= sizeof lockpath) {
        snprintf(msg, msglen, "data directory %s: path too long", o->dir);
        return SLUICE_EINVAL;
    }
    ss = alloc_calloc(1, sizeof *ss);
    if (!ss) {
        snprintf(msg, msglen, "out of memory");
        return SLUICE_ENOMEM;
    }
    ss->lock_fd = -1;
    if (make_dirs(o->dir) != 0) {
        snprintf(msg, msglen, "data directory %s: cannot create it: %s", o->dir, strerror(errno));
        rc = SLUICE_EINVAL;
        goto fail;
    }
    if (access(o->dir, W_OK | X_OK) != 0) {
        snprintf(msg, msglen, "data directory %s is not writable: %s", o->dir, strerror(errno));
        rc = SLUICE_EINVAL;
        goto fail;
    }
    if ((rc = lock_dir(ss, o->dir, lockpath, msg, msglen)) != 0)
        goto fail;
    if (o->fault_vfs || (env && strcmp(env, "1") == 0)) {
        if (faultvfs_register() != 0) {
            snprintf(msg, msglen, "cannot register the fault-injection VFS");
            rc = SLUICE_ESTATE;
            goto fail;
        }
        vfs = "sluice-fault";
    }
    rc =
        sqlite3_open_v2(dbpath, &ss->db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_PRIVATECACHE, vfs);
    if (rc != SQLITE_OK) {
        rc = ss->db ? db_error(ss, rc) : sq_error(ss, rc, 0);
        snprintf(msg, msglen, "data directory %s: sluice.db: %s", o->dir, ss->err);
        goto fail;
    }
    if ((rc = setup(ss, o->durability)) != 0) {
        snprintf(msg, msglen, "data directory %s: %s", o->dir, ss->err);
        goto fail;
    }
    fsync_dir(o->dir); /* the names of a new sluice.db and LOCK */
    *impl = ss;
    return 0;

fail:
    sq_close(ss);
    return rc;
}

/* ---- Loading --------------------------------------------------------------------------- */

typedef int (*row_fn)(sqlite_store *ss, sqlite3_stmt *st, const store_loader *cb, void *arg);

static int row_meta(sqlite_store *ss, sqlite3_stmt *st, const store_loader *cb, void *arg)
{
    (void)ss;
    return cb->meta((const char *)sqlite3_column_text(st, 0), sqlite3_column_int64(st, 1), arg);
}

static int row_limit(sqlite_store *ss, sqlite3_stmt *st, const store_loader *cb, void *arg)
{
    const char *name, *spec;
    size_t len;
    int rc;

    if ((rc = col_bytes(ss, st, 0, &name, &len)) != 0 ||
        (rc = col_bytes(ss, st, 1, &spec, &len)) != 0)
        return rc;
    return cb->limit(name, spec, arg);
}

static int row_recurring(sqlite_store *ss, sqlite3_stmt *st, const store_loader *cb, void *arg)
{
    sluice_recurring_spec r = {0};
    size_t len;
    int rc;

    if ((rc = col_bytes(ss, st, 0, &r.name, &len)) != 0 ||
        (rc = col_bytes(ss, st, 1, &r.type, &len)) != 0 ||
        (rc = col_bytes(ss, st, 2, &r.payload, &r.payload_len)) != 0 ||
        (rc = col_bytes(ss, st, 3, &r.key, &r.key_len)) != 0 ||
        (rc = col_bytes(ss, st, 5, &r.cron, &len)) != 0)
        return rc;
    r.interval_ns = sqlite3_column_int64(st, 4);
    r.start_ns = sqlite3_column_int64(st, 6);
    r.end_ns = sqlite3_column_int64(st, 7);
    r.max_runs = sqlite3_column_int64(st, 8);
    return cb->recurring(&r, sqlite3_column_int64(st, 9), sqlite3_column_int64(st, 10), arg);
}

static int row_key(sqlite_store *ss, sqlite3_stmt *st, const store_loader *cb, void *arg)
{
    const char *limit, *key, *state;
    size_t len, keylen, statelen;
    int rc;

    if ((rc = col_bytes(ss, st, 0, &limit, &len)) != 0 ||
        (rc = col_bytes(ss, st, 1, &key, &keylen)) != 0 ||
        (rc = col_bytes(ss, st, 2, &state, &statelen)) != 0)
        return rc;
    return cb->key(limit, key, keylen, state, statelen, arg);
}

static int row_task(sqlite_store *ss, sqlite3_stmt *st, const store_loader *cb, void *arg)
{
    sluice_task_record r = {0};
    size_t len;
    int rc;

    if ((rc = col_bytes(ss, st, 2, &r.type, &len)) != 0 ||
        (rc = col_bytes(ss, st, 3, &r.payload, &r.payload_len)) != 0 ||
        (rc = col_bytes(ss, st, 4, &r.key, &r.key_len)) != 0 ||
        (rc = col_bytes(ss, st, 5, &r.task_key, &r.task_key_len)) != 0 ||
        (rc = col_bytes(ss, st, 13, &r.series, &len)) != 0 ||
        (rc = col_bytes(ss, st, 15, &r.fail_limit, &len)) != 0 ||
        (rc = col_bytes(ss, st, 16, &r.fail_message, &len)) != 0 ||
        (rc = col_bytes(ss, st, 17, &r.lease_limit, &len)) != 0)
        return rc;
    r.id = (uint64_t)sqlite3_column_int64(st, 0);
    r.state = (sluice_task_state)sqlite3_column_int(st, 1);
    r.units = sqlite3_column_int64(st, 6);
    r.priority = sqlite3_column_int(st, 7);
    r.attempt = sqlite3_column_int(st, 8);
    r.submitted_ns = sqlite3_column_int64(st, 9);
    r.not_before_ns = sqlite3_column_int64(st, 10);
    r.lease_until_ns = sqlite3_column_int64(st, 11);
    r.granted = sqlite3_column_int(st, 12);
    r.fail_reason = (sluice_fail_reason)sqlite3_column_int(st, 14);
    if (r.lease_limit) { /* a tag is a generation in ns: stored as the int64 it fits */
        r.lease_id = (uint64_t)sqlite3_column_int64(st, 18);
        r.lease_tag = (uint64_t)sqlite3_column_int64(st, 19);
    }
    return cb->task(&r, arg);
}

static int load_rows(sqlite_store *ss, enum stmt_id id, row_fn row, const store_loader *cb,
                     void *arg)
{
    sqlite3_stmt *st = ss->stmt[id];
    int rc, out = 0;

    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        out = row(ss, st, cb, arg);
        if (out) {
            if (!ss->err[0])
                snprintf(ss->err, sizeof ss->err, "load stopped: %s", sluice_strerror(out));
            break;
        }
    }
    if (!out && rc != SQLITE_DONE)
        out = db_error(ss, rc);
    sqlite3_reset(st);
    return out;
}

static int sq_load(void *impl, const store_loader *cb, void *arg)
{
    sqlite_store *ss = impl;
    int rc = 0;

    ss->err[0] = '\0';
    if (!rc && cb->meta)
        rc = load_rows(ss, ST_LOAD_META, row_meta, cb, arg);
    if (!rc && cb->limit)
        rc = load_rows(ss, ST_LOAD_LIMITS, row_limit, cb, arg);
    if (!rc && cb->recurring)
        rc = load_rows(ss, ST_LOAD_RECURRING, row_recurring, cb, arg);
    if (!rc && cb->key)
        rc = load_rows(ss, ST_LOAD_KEYS, row_key, cb, arg);
    if (!rc && cb->task)
        rc = load_rows(ss, ST_LOAD_TASKS, row_task, cb, arg);
    return rc;
}

/* ---- Writing --------------------------------------------------------------------------- */

static int sq_begin(void *impl)
{
    sqlite_store *ss = impl;
    binder b = bind_start(ss, ST_BEGIN);

    return run(ss, &b);
}

static int sq_put_task(void *impl, const sluice_task_record *r)
{
    sqlite_store *ss = impl;
    binder b = bind_start(ss, ST_PUT_TASK);

    b_i64(&b, (int64_t)r->id);
    b_i64(&b, (int64_t)r->state);
    b_text(&b, r->type);
    b_blob(&b, r->payload, r->payload_len);
    b_blob(&b, r->key, r->key_len);
    b_blob(&b, r->task_key, r->task_key_len);
    b_i64(&b, r->units);
    b_i64(&b, r->priority);
    b_i64(&b, r->attempt);
    b_i64(&b, r->submitted_ns);
    b_i64(&b, r->not_before_ns);
    b_i64(&b, r->lease_until_ns);
    b_i64(&b, r->granted);
    b_text(&b, r->series);
    b_i64(&b, (int64_t)r->fail_reason);
    b_text(&b, r->fail_limit);
    b_text(&b, r->fail_message);
    b_text(&b, r->lease_limit);
    b_i64(&b, r->lease_limit ? (int64_t)r->lease_id : 0);
    b_i64(&b, r->lease_limit ? (int64_t)r->lease_tag : 0);
    return run(ss, &b);
}

static int sq_del_task(void *impl, uint64_t id)
{
    sqlite_store *ss = impl;
    binder b = bind_start(ss, ST_DEL_TASK);

    b_i64(&b, (int64_t)id);
    return run(ss, &b);
}

static int sq_put_key(void *impl, const char *limit, const char *key, size_t keylen,
                      const void *state, size_t len)
{
    sqlite_store *ss = impl;
    binder b = bind_start(ss, ST_PUT_KEY);

    b_text(&b, limit);
    b_blob(&b, key, keylen);
    b_blob(&b, state, len);
    return run(ss, &b);
}

static int sq_del_key(void *impl, const char *limit, const char *key, size_t keylen)
{
    sqlite_store *ss = impl;
    binder b = bind_start(ss, ST_DEL_KEY);

    b_text(&b, limit);
    b_blob(&b, key, keylen);
    return run(ss, &b);
}

/* A statement whose one parameter is a name. */
static int by_name(sqlite_store *ss, enum stmt_id id, const char *name)
{
    binder b = bind_start(ss, id);

    b_text(&b, name);
    return run(ss, &b);
}

static int sq_del_limit_keys(void *impl, const char *limit)
{
    return by_name(impl, ST_DEL_LIMIT_KEYS, limit);
}

static int sq_put_limit(void *impl, const char *name, const char *spec)
{
    sqlite_store *ss = impl;
    binder b = bind_start(ss, ST_PUT_LIMIT);

    b_text(&b, name);
    b_text(&b, spec);
    return run(ss, &b);
}

static int sq_del_limit(void *impl, const char *name)
{
    return by_name(impl, ST_DEL_LIMIT, name);
}

static int sq_put_recurring(void *impl, const sluice_recurring_spec *spec, int64_t runs,
                            int64_t skipped)
{
    sqlite_store *ss = impl;
    binder b = bind_start(ss, ST_PUT_RECURRING);

    b_text(&b, spec->name);
    b_text(&b, spec->type);
    b_blob(&b, spec->payload, spec->payload_len);
    b_blob(&b, spec->key, spec->key_len);
    b_i64(&b, spec->interval_ns);
    b_text(&b, spec->cron);
    b_i64(&b, spec->start_ns);
    b_i64(&b, spec->end_ns);
    b_i64(&b, spec->max_runs);
    b_i64(&b, runs);
    b_i64(&b, skipped);
    return run(ss, &b);
}

static int sq_del_recurring(void *impl, const char *name)
{
    return by_name(impl, ST_DEL_RECURRING, name);
}

static int sq_put_meta(void *impl, const char *name, int64_t value)
{
    sqlite_store *ss = impl;
    binder b = bind_start(ss, ST_PUT_META);

    b_text(&b, name);
    b_i64(&b, value);
    return run(ss, &b);
}

static void sq_rollback(void *impl)
{
    sqlite_store *ss = impl;
    binder b = bind_start(ss, ST_ROLLBACK);

    /* SQLite rolls back by itself on some errors (SQLITE_FULL, SQLITE_IOERR); then there is
     * nothing left to roll back. */
    if (!sqlite3_get_autocommit(ss->db)) {
        char keep[sizeof ss->err];

        memcpy(keep, ss->err, sizeof keep); /* the failure's reason, not the rollback's */
        (void)run(ss, &b);
        memcpy(ss->err, keep, sizeof keep);
    }
}

static int sq_commit(void *impl)
{
    sqlite_store *ss = impl;
    binder b = bind_start(ss, ST_COMMIT);
    int rc = run(ss, &b);

    if (rc) {
        sq_rollback(ss);
        return rc;
    }
    if (ss->wal_frames >= CHECKPOINT_FRAMES)
        (void)sqlite3_wal_checkpoint_v2(ss->db, "main", SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
    return 0;
}

static int sq_sync(void *impl)
{
    sqlite_store *ss = impl;
    sqlite3_file *wal = NULL;
    int rc = sqlite3_file_control(ss->db, "main", SQLITE_FCNTL_JOURNAL_POINTER, &wal);

    if (rc != SQLITE_OK)
        return db_error(ss, rc);
    if (!wal || !wal->pMethods)
        return 0; /* no WAL open: every commit is in the database file already */
    errno = 0;
    rc = wal->pMethods->xSync(wal, SQLITE_SYNC_NORMAL);
    if (rc != SQLITE_OK)
        return sq_error(ss, rc, errno);
    return 0;
}

static int sq_check(void *impl, char *msg, size_t msglen)
{
    sqlite_store *ss = impl;
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(ss->db, "PRAGMA integrity_check", -1, &st, NULL);
    int ret = 0, nproblems = 0;

    if (rc != SQLITE_OK) {
        ret = db_error(ss, rc);
        snprintf(msg, msglen, "%s", ss->err);
        return ret;
    }
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        const char *line = (const char *)sqlite3_column_text(st, 0);

        if (line && strcmp(line, "ok") == 0)
            continue;
        if (nproblems++ == 0)
            snprintf(msg, msglen, "integrity check: %s", line ? line : "?");
    }
    if (rc != SQLITE_DONE) {
        ret = db_error(ss, rc);
        snprintf(msg, msglen, "integrity check: %s", ss->err);
    } else if (nproblems) {
        if (nproblems > 1) {
            size_t used = strlen(msg);

            if (used < msglen)
                snprintf(msg + used, msglen - used, " (and %d more)", nproblems - 1);
        }
        ret = SLUICE_EINVAL;
    }
    sqlite3_finalize(st);
    return ret;
}

static const char *sq_errmsg(const void *impl)
{
    const sqlite_store *ss = impl;

    return ss ? ss->err : "";
}

const struct store_ops store_sqlite_ops = {
    .name = "sqlite",
    .open = sq_open,
    .close = sq_close,
    .load = sq_load,
    .begin = sq_begin,
    .put_task = sq_put_task,
    .del_task = sq_del_task,
    .put_key = sq_put_key,
    .del_key = sq_del_key,
    .del_limit_keys = sq_del_limit_keys,
    .put_limit = sq_put_limit,
    .del_limit = sq_del_limit,
    .put_recurring = sq_put_recurring,
    .del_recurring = sq_del_recurring,
    .put_meta = sq_put_meta,
    .commit = sq_commit,
    .rollback = sq_rollback,
    .sync = sq_sync,
    .check = sq_check,
    .error = sq_errmsg,
};
