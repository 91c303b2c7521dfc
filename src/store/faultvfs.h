/* SPDX-License-Identifier: MIT */
/*
 * A fault-injection SQLite VFS, "sluice-fault": a shim over the default VFS that fails chosen
 * writes and fsyncs, or pretends the disk is full, so tests (and the server's debug command)
 * can check what the store does when the disk misbehaves.
 *
 * The fault plan is process-wide; it may be armed from one thread while another writes (the
 * server's loop and commit threads). Counters run
 * from process start; arming counts from the moment of the call. Every file the shim opens
 * (database, WAL, journals, temporary files) is subject to the plan.
 */
#ifndef SLUICE_STORE_FAULTVFS_H
#define SLUICE_STORE_FAULTVFS_H

/* Registers the VFS under the name "sluice-fault" (not as the default). Idempotent. Returns 0,
 * or SLUICE_ESTATE when SQLite has no default VFS or refuses the registration. */
int faultvfs_register(void);

/* Fails the nth xWrite from now (1 = the next one) with SQLITE_IOERR_WRITE (errno EIO), once;
 * n <= 0 disarms. */
void faultvfs_fail_write(long n);

/* Fails the nth xSync from now with SQLITE_IOERR_FSYNC (errno EIO), once; n <= 0 disarms. */
void faultvfs_fail_sync(long n);

/* While on, every xWrite fails with SQLITE_FULL (errno ENOSPC) and writes nothing. */
void faultvfs_disk_full(int on);

/* Every xSync from now on first sleeps ms milliseconds (a slow disk); 0 turns it off. */
void faultvfs_slow_sync(long ms);

/* xWrite and xSync calls seen through the shim since the process started. */
long faultvfs_writes(void);
long faultvfs_syncs(void);

#endif
