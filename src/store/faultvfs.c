/* SPDX-License-Identifier: MIT */
/*
 * The "sluice-fault" SQLite VFS (see faultvfs.h): every call goes to the default VFS, except that
 * xWrite and xSync first count themselves and consult the fault plan. A failed call does nothing
 * to the file and sets errno as the real failure would (EIO, ENOSPC), so SQLite's error path and
 * our messages see what they would see on a sick disk.
 *
 * Invariants:
 * - A shim file is our header followed by the real VFS's file object (szOsFile is the sum), and
 *   its pMethods is set exactly when the real file's is, so SQLite calls xClose exactly when the
 *   real file needs closing (even after a failed xOpen).
 * - An armed fault fires once: faultvfs_fail_write(n) fails write number writes()+n and disarms.
 * - Nothing here allocates: the VFS and its method tables are static.
 * - The plan and the counters are atomics: the server arms faults on its loop thread (DEBUG
 *   FAULT) while its commit thread writes and syncs; a fault still fires exactly once.
 */
#include "store/faultvfs.h"

#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <time.h>

#include <sqlite3.h>

#include "sluice/error.h"

typedef struct fault_file {
    sqlite3_file base;  /* pMethods: &fault_io_methods, or NULL when the real open failed */
    sqlite3_file *real; /* the default VFS's file, placed right after this struct */
} fault_file;

static atomic_long n_writes;      /* xWrite calls so far */
static atomic_long n_syncs;       /* xSync calls so far */
static atomic_long fail_write_at; /* the value of n_writes whose call fails, or 0 */
static atomic_long fail_sync_at;  /* the value of n_syncs whose call fails, or 0 */
static atomic_long slow_sync_ms;  /* every xSync first sleeps this long */
static atomic_int disk_full;      /* every write fails with SQLITE_FULL */
static int registered;

static sqlite3_vfs fault_vfs;

static sqlite3_vfs *real_vfs(sqlite3_vfs *vfs)
{
    return (sqlite3_vfs *)vfs->pAppData;
}

static sqlite3_file *real_file(sqlite3_file *f)
{
    return ((fault_file *)f)->real;
}

/* ---- The plan -------------------------------------------------------------------------- */

void faultvfs_fail_write(long n)
{
    fail_write_at = n > 0 ? n_writes + n : 0;
}

void faultvfs_fail_sync(long n)
{
    fail_sync_at = n > 0 ? n_syncs + n : 0;
}

void faultvfs_disk_full(int on)
{
    disk_full = on != 0;
}

void faultvfs_slow_sync(long ms)
{
    slow_sync_ms = ms > 0 ? ms : 0;
}

/* Returns 1 when the call numbered n is the armed one of *at, disarming it (once only, whichever
 * thread gets there). */
static int fires(atomic_long *at, long n)
{
    long want = atomic_load(at);

    return want != 0 && n == want && atomic_compare_exchange_strong(at, &want, 0);
}

long faultvfs_writes(void)
{
    return n_writes;
}

long faultvfs_syncs(void)
{
    return n_syncs;
}

/* ---- File methods ---------------------------------------------------------------------- */

static int ff_close(sqlite3_file *f)
{
    sqlite3_file *r = real_file(f);
    int rc = SQLITE_OK;

    if (r->pMethods)
        rc = r->pMethods->xClose(r);
    f->pMethods = NULL;
    return rc;
}

static int ff_read(sqlite3_file *f, void *buf, int amt, sqlite3_int64 off)
{
    sqlite3_file *r = real_file(f);

    return r->pMethods->xRead(r, buf, amt, off);
}

static int ff_write(sqlite3_file *f, const void *buf, int amt, sqlite3_int64 off)
{
    sqlite3_file *r = real_file(f);

    long n = atomic_fetch_add(&n_writes, 1) + 1;

    if (disk_full) {
        errno = ENOSPC;
        return SQLITE_FULL;
    }
    if (fires(&fail_write_at, n)) {
        errno = EIO;
        return SQLITE_IOERR_WRITE;
    }
    return r->pMethods->xWrite(r, buf, amt, off);
}

static int ff_truncate(sqlite3_file *f, sqlite3_int64 size)
{
    sqlite3_file *r = real_file(f);

    return r->pMethods->xTruncate(r, size);
}

static int ff_sync(sqlite3_file *f, int flags)
{
    sqlite3_file *r = real_file(f);

    long n = atomic_fetch_add(&n_syncs, 1) + 1;
    long slow = atomic_load(&slow_sync_ms);

    if (slow > 0) {
        /* A slow disk: the commit thread sits in its fsync while the loop goes on. */
        struct timespec ts = {slow / 1000, (slow % 1000) * 1000000L};

        nanosleep(&ts, NULL);
    }
    if (fires(&fail_sync_at, n)) {
        errno = EIO;
        return SQLITE_IOERR_FSYNC;
    }
    return r->pMethods->xSync(r, flags);
}

static int ff_file_size(sqlite3_file *f, sqlite3_int64 *size)
{
    sqlite3_file *r = real_file(f);

    return r->pMethods->xFileSize(r, size);
}

static int ff_lock(sqlite3_file *f, int level)
{
    sqlite3_file *r = real_file(f);

    return r->pMethods->xLock(r, level);
}

static int ff_unlock(sqlite3_file *f, int level)
{
    sqlite3_file *r = real_file(f);

    return r->pMethods->xUnlock(r, level);
}

static int ff_check_reserved_lock(sqlite3_file *f, int *out)
{
    sqlite3_file *r = real_file(f);

    return r->pMethods->xCheckReservedLock(r, out);
}

static int ff_file_control(sqlite3_file *f, int op, void *arg)
{
    sqlite3_file *r = real_file(f);

    return r->pMethods->xFileControl(r, op, arg);
}

static int ff_sector_size(sqlite3_file *f)
{
    sqlite3_file *r = real_file(f);

    return r->pMethods->xSectorSize(r);
}

static int ff_device_characteristics(sqlite3_file *f)
{
    sqlite3_file *r = real_file(f);

    return r->pMethods->xDeviceCharacteristics(r);
}

static int ff_shm_map(sqlite3_file *f, int page, int pgsz, int extend, void volatile **pp)
{
    sqlite3_file *r = real_file(f);

    if (r->pMethods->iVersion < 2)
        return SQLITE_IOERR_SHMMAP;
    return r->pMethods->xShmMap(r, page, pgsz, extend, pp);
}

static int ff_shm_lock(sqlite3_file *f, int offset, int n, int flags)
{
    sqlite3_file *r = real_file(f);

    if (r->pMethods->iVersion < 2)
        return SQLITE_IOERR_SHMLOCK;
    return r->pMethods->xShmLock(r, offset, n, flags);
}

static void ff_shm_barrier(sqlite3_file *f)
{
    sqlite3_file *r = real_file(f);

    if (r->pMethods->iVersion >= 2)
        r->pMethods->xShmBarrier(r);
}

static int ff_shm_unmap(sqlite3_file *f, int delete_flag)
{
    sqlite3_file *r = real_file(f);

    if (r->pMethods->iVersion < 2)
        return SQLITE_OK;
    return r->pMethods->xShmUnmap(r, delete_flag);
}

static int ff_fetch(sqlite3_file *f, sqlite3_int64 off, int amt, void **pp)
{
    sqlite3_file *r = real_file(f);

    if (r->pMethods->iVersion < 3) {
        *pp = NULL;
        return SQLITE_OK;
    }
    return r->pMethods->xFetch(r, off, amt, pp);
}

static int ff_unfetch(sqlite3_file *f, sqlite3_int64 off, void *p)
{
    sqlite3_file *r = real_file(f);

    if (r->pMethods->iVersion < 3)
        return SQLITE_OK;
    return r->pMethods->xUnfetch(r, off, p);
}

static const sqlite3_io_methods fault_io_methods = {
    .iVersion = 3,
    .xClose = ff_close,
    .xRead = ff_read,
    .xWrite = ff_write,
    .xTruncate = ff_truncate,
    .xSync = ff_sync,
    .xFileSize = ff_file_size,
    .xLock = ff_lock,
    .xUnlock = ff_unlock,
    .xCheckReservedLock = ff_check_reserved_lock,
    .xFileControl = ff_file_control,
    .xSectorSize = ff_sector_size,
    .xDeviceCharacteristics = ff_device_characteristics,
    .xShmMap = ff_shm_map,
    .xShmLock = ff_shm_lock,
    .xShmBarrier = ff_shm_barrier,
    .xShmUnmap = ff_shm_unmap,
    .xFetch = ff_fetch,
    .xUnfetch = ff_unfetch,
};

/* ---- VFS methods ----------------------------------------------------------------------- */

static int fv_open(sqlite3_vfs *vfs, sqlite3_filename name, sqlite3_file *f, int flags,
                   int *out_flags)
{
    fault_file *ff = (fault_file *)f;
    int rc;

    ff->real = (sqlite3_file *)(ff + 1);
    ff->real->pMethods = NULL;
    rc = real_vfs(vfs)->xOpen(real_vfs(vfs), name, ff->real, flags, out_flags);
    ff->base.pMethods = ff->real->pMethods ? &fault_io_methods : NULL;
    return rc;
}

static int fv_delete(sqlite3_vfs *vfs, const char *name, int sync_dir)
{
    return real_vfs(vfs)->xDelete(real_vfs(vfs), name, sync_dir);
}

static int fv_access(sqlite3_vfs *vfs, const char *name, int flags, int *out)
{
    return real_vfs(vfs)->xAccess(real_vfs(vfs), name, flags, out);
}

static int fv_full_pathname(sqlite3_vfs *vfs, const char *name, int n, char *out)
{
    return real_vfs(vfs)->xFullPathname(real_vfs(vfs), name, n, out);
}

static void *fv_dl_open(sqlite3_vfs *vfs, const char *name)
{
    return real_vfs(vfs)->xDlOpen(real_vfs(vfs), name);
}

static void fv_dl_error(sqlite3_vfs *vfs, int n, char *msg)
{
    real_vfs(vfs)->xDlError(real_vfs(vfs), n, msg);
}

typedef void (*dl_symbol)(void);

static dl_symbol fv_dl_sym(sqlite3_vfs *vfs, void *handle, const char *symbol)
{
    return real_vfs(vfs)->xDlSym(real_vfs(vfs), handle, symbol);
}

static void fv_dl_close(sqlite3_vfs *vfs, void *handle)
{
    real_vfs(vfs)->xDlClose(real_vfs(vfs), handle);
}

static int fv_randomness(sqlite3_vfs *vfs, int n, char *out)
{
    return real_vfs(vfs)->xRandomness(real_vfs(vfs), n, out);
}

static int fv_sleep(sqlite3_vfs *vfs, int us)
{
    return real_vfs(vfs)->xSleep(real_vfs(vfs), us);
}

static int fv_current_time(sqlite3_vfs *vfs, double *out)
{
    return real_vfs(vfs)->xCurrentTime(real_vfs(vfs), out);
}

static int fv_get_last_error(sqlite3_vfs *vfs, int n, char *out)
{
    return real_vfs(vfs)->xGetLastError(real_vfs(vfs), n, out);
}

static int fv_current_time_int64(sqlite3_vfs *vfs, sqlite3_int64 *out)
{
    sqlite3_vfs *r = real_vfs(vfs);
    double day;
    int rc;

    if (r->iVersion >= 2 && r->xCurrentTimeInt64)
        return r->xCurrentTimeInt64(r, out);
    rc = r->xCurrentTime(r, &day);
    *out = (sqlite3_int64)(day * 86400000.0);
    return rc;
}

static int fv_set_system_call(sqlite3_vfs *vfs, const char *name, sqlite3_syscall_ptr p)
{
    sqlite3_vfs *r = real_vfs(vfs);

    if (r->iVersion < 3 || !r->xSetSystemCall)
        return SQLITE_NOTFOUND;
    return r->xSetSystemCall(r, name, p);
}

static sqlite3_syscall_ptr fv_get_system_call(sqlite3_vfs *vfs, const char *name)
{
    sqlite3_vfs *r = real_vfs(vfs);

    if (r->iVersion < 3 || !r->xGetSystemCall)
        return NULL;
    return r->xGetSystemCall(r, name);
}

static const char *fv_next_system_call(sqlite3_vfs *vfs, const char *name)
{
    sqlite3_vfs *r = real_vfs(vfs);

    if (r->iVersion < 3 || !r->xNextSystemCall)
        return NULL;
    return r->xNextSystemCall(r, name);
}

int faultvfs_register(void)
{
    sqlite3_vfs *r;

    if (registered)
        return 0;
    if (sqlite3_initialize() != SQLITE_OK)
        return SLUICE_ESTATE;
    r = sqlite3_vfs_find(NULL);
    if (!r)
        return SLUICE_ESTATE;
    fault_vfs = (sqlite3_vfs){
        .iVersion = 3,
        .szOsFile = (int)sizeof(fault_file) + r->szOsFile,
        .mxPathname = r->mxPathname,
        .zName = "sluice-fault",
        .pAppData = r,
        .xOpen = fv_open,
        .xDelete = fv_delete,
        .xAccess = fv_access,
        .xFullPathname = fv_full_pathname,
        .xDlOpen = fv_dl_open,
        .xDlError = fv_dl_error,
        .xDlSym = fv_dl_sym,
        .xDlClose = fv_dl_close,
        .xRandomness = fv_randomness,
        .xSleep = fv_sleep,
        .xCurrentTime = fv_current_time,
        .xGetLastError = fv_get_last_error,
        .xCurrentTimeInt64 = fv_current_time_int64,
        .xSetSystemCall = fv_set_system_call,
        .xGetSystemCall = fv_get_system_call,
        .xNextSystemCall = fv_next_system_call,
    };
    if (sqlite3_vfs_register(&fault_vfs, 0) != SQLITE_OK)
        return SLUICE_ESTATE;
    registered = 1;
    return 0;
}
