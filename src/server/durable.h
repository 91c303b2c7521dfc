/* SPDX-License-Identifier: MIT */
/*
 * Durability of the server: the store (store/store.h) attached to the loop. Recovery at start,
 * group commits on a commit thread, replies held until their commit, the limiter-state timer,
 * the batch sync timer, and the server clock's base. docs/durability.md tells the user's
 * side of it.
 *
 * The per-turn commit copies the engine's change feed (sluice_engine_changes, "The change feed" in
 * include/sluice/engine.h) to the store: the engine records every task, series, limit replacement
 * and limiter key that changed; LIMIT.SET and LIMIT.DEL add the definition's text
 * (durable_limit_*). A command that moved the feed's counter (sluice_engine_changes_seq) and wrote
 * a reply has that reply held (conn_hold) from the byte it started at, so nothing of that client's
 * is written from then on (its other replies may leave earlier: conn.h). At the end of the turn,
 * before the turn's last flush, durable_turn pulls the feed's batch, copies it (task records and
 * series exported, key states, definitions) into a job, and hands the job to the commit thread,
 * which writes it in one transaction (and fsyncs) while the loop serves the next turns. When the
 * job is done the loop is woken (uv_async): on success it confirms the batch
 * (sluice_engine_changes_done) and releases the replies held for that commit, on failure each of
 * them is replaced by `-IOERR <reason>` and released (either way written at the end of that
 * turn, once the next job is posted), and the batch stays unconfirmed, so the
 * next transaction writes it again with what changed since. At most one job is in flight: the
 * changes of the turns meanwhile wait in the feed (recorded after the pull, so not in the batch
 * out), and their replies wait for the next job, started as soon as the one in flight is done.
 * So many clients share one fsync, the loop never waits for it, and no client is told "done" for
 * a change that may not be on disk.
 *
 * Limiter key state does not move the counter (keys are drained into the feed at a pull): a
 * command whose reply promises a key state (a lease granted or renewed) says so with
 * durable_key_changed, and under `always` its reply is held the same way; the commit that
 * releases it pulled the feed after the command, so it carries the key. When that commit fails
 * the command's undo runs (a refused lease is released) as its reply becomes -IOERR.
 *
 * TASK.GET of tasks whose add is durable is not held: its lease goes with the next commit (a
 * crash before that brings the task back queued; docs/durability.md).
 *
 * Limiter state alone (THROTTLE traffic) never makes a turn commit: a timer drains and commits it
 * every DURABLE_KEYS_MS, and the graceful stop commits the rest.
 *
 * The clock: server_now() is CLOCK_MONOTONIC plus server.clock_offset_ns, an offset fixed at start
 * to the wall clock then, raised if needed so that the clock starts no earlier than the last
 * reading persisted (meta "clock_ns", written at every commit). A wall clock that went back while
 * the process was down thus releases nothing early, and a wall-clock step while it runs changes
 * nothing.
 *
 * Threads: everything here runs on the loop thread, except the writing of a job (the store
 * and the job's buffer only, never the engine or a client), on the commit thread after start.
 * Recovery runs on the loop thread before the commit thread starts; durable_close waits for the
 * job in flight, writes the rest and joins the thread before the store is closed.
 */
#ifndef SLUICE_SERVER_DURABLE_H
#define SLUICE_SERVER_DURABLE_H

#include <stddef.h>
#include <stdint.h>

#include "server/conn.h"
#include "server/server.h"

/* How often changed limiter keys are written when nothing else commits (ms). */
#define DURABLE_KEYS_MS 100

/* The offset that makes CLOCK_MONOTONIC read as the wall clock now, or as floor_ns when the wall
 * clock is behind it. */
int64_t durable_clock_offset(int64_t floor_ns);

/* Attaches the store the options ask for (opt.data_dir, opt.durability; none or no directory:
 * memory only) and recovers everything it holds into the engine, in this order: the clock floor,
 * runtime limit definitions (over the configuration file's), recurring series, limiter key state,
 * then tasks. A task that cannot be restored (its type or limit is gone) stays in the store, is
 * logged and counted. Starts the engine's change feed and the timers. Call after the engine has its
 * configuration and the loop is initialised, before listening. Returns 0, or an error with a
 * one-line msg (the directory cannot be opened or is locked, the database is corrupt, out of
 * memory); then nothing is attached. */
int durable_open(server *s, char *msg, size_t msglen);

/* Writes whatever the change feed still holds (the limiters' keys included), syncs a batch store,
 * closes the store and the timers. The state is freed once the timers' close callbacks ran (the
 * caller runs the loop). Idempotent; accepts a server without durable state. */
void durable_close(server *s);

/* The change counter (0 without durable state), read before a command runs. */
uint64_t durable_changes(const server *s);

/* After a command of client c ran: when the counter moved past `before` (or the command called
 * durable_key_changed) and the command appended a reply at or after `mark` in conn_out(c), holds
 * that reply until the turn's commit. */
void durable_after_command(conn *c, uint64_t before, size_t mark);

/* The end of a loop turn, before replies are flushed: commits the change feed when a change or a
 * held reply waits, then releases (or fails) the held replies. */
void durable_turn(server *s);

/* TASK.GET (the command running) delivered tasks whose ids are at most max_id: when every one
 * of them was added by a commit that succeeded, its reply does not wait for a commit (the
 * deliveries' leases are written by the next commit, or the key timer's, within
 * DURABLE_KEYS_MS); a crash before that brings the tasks back queued (docs/durability.md). */
void durable_delivered(server *s, uint64_t max_id);

/* A blocked TASK.GET woken outside a command appended its deliveries (tasks up to id max_id) at
 * or after mark in conn_out(c): when one of them was not yet added by a commit that succeeded,
 * the reply is held until the next commit, as a command's. */
void durable_delivered_unblocked(conn *c, size_t mark, uint64_t max_id);

/* Undoes a change whose commit failed, on the loop thread; arg is the text the command gave to
 * durable_key_changed (valid during the call only). */
typedef void (*durable_undo_fn)(server *s, const char *arg);

/* For a command handler, after it wrote its reply: the command changed limiter key state that its
 * reply promises is durable (a lease granted by LEASE.ACQUIRE or renewed by LEASE.RENEW). Key
 * states do not move the change counter (they reach the feed when it is pulled), so without this
 * the reply would leave before the key is written. Under `durability: always`, the reply is held
 * (by durable_after_command, as a task's) until a commit started after the command (whose pull
 * drains the key's state) is durable. When that commit fails, the reply becomes -IOERR and
 * undo(s, arg) is called (undo NULL: the change stays in memory, written by the next commit).
 * arg (NUL-terminated, may be NULL) is copied. Under `batch` or `none`, or without a store,
 * nothing waits: the key goes with the next commit or the key timer's (DURABLE_KEYS_MS). */
void durable_key_changed(conn *c, durable_undo_fn undo, const char *arg);

/* After a command run without a client (commands_run_detached): drops what it asked through
 * durable_key_changed, which no reply can wait for there (the HTTP API runs no lease command; a
 * caller that does must wait with durable_wait). */
void durable_after_detached(server *s);

/* The outcome of a durable_wait: error is NULL when the changes are durable, else the one-line
 * reason of the commit that failed (valid during the call only). */
typedef void (*durable_wait_fn)(void *arg, const char *error);

/* For a caller that is not a client (the admin port's HTTP API): its request changed something
 * (durable_changes moved past what it read before) and its answer must wait, as a held reply
 * does, for the commit of this turn's changes. Returns 1 when there is nothing to wait for (no
 * store): answer now, fn is never called; 0 when fn(arg, ...) will be called once, on the loop
 * thread, when the commit that takes these changes completes (never from inside this call).
 * Without memory to record the wait, the changes are made durable at once instead: 1 when that
 * commit succeeded, SLUICE_EIO when it failed (the reason in durable_last_error). */
int durable_wait(server *s, durable_wait_fn fn, void *arg);

/* Forgets every wait of arg (its fn is not called). For a caller that must answer earlier (the
 * admin port stopping). */
void durable_wait_cancel(server *s, void *arg);

/* The reason of the last commit that failed, "" when none. */
const char *durable_last_error(const server *s);

/* A client is closing: forget its held replies (they are dropped with it). */
void durable_conn_closed(conn *c);

/* LIMIT.SET stored `spec` for `name`; LIMIT.DEL removed `name`. Call after the engine call (which
 * recorded the replacement or removal itself: the stored key state restarts and a stored runtime
 * definition is dropped), to record the definition's text (SET) or a tombstone (DEL of a limit
 * the configuration file declares) over that. */
void durable_limit_set(server *s, const char *name, const char *spec);
void durable_limit_del(server *s, const char *name);

/* Writes INFO's "# Persistence" section (lines ending in \r\n) into buf, NUL-terminated. */
void durable_info(server *s, char *buf, size_t len);

#endif
