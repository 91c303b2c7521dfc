/* SPDX-License-Identifier: MIT */
/*
 * The memory budget of the server (`--maxmemory`, `maxmemory:` in the configuration file).
 *
 * What clients can make the process hold is counted in one place: the allocator keeps the live
 * bytes of every allocation made through it (base/alloc.h), which covers key tables, CL.THROTTLE
 * parameter sets, limits, tasks and their payloads, and the reply buffers of every client. The
 * server sets the budget there; past it, in this order:
 *
 *   1. state that carries no information is forgotten first: a limit sweeps its idle keys before
 *      it would track a new one (core/limit.c), and a command that adds state sweeps every limit
 *      and the CL.THROTTLE cache once per loop phase (mem_refuse);
 *   2. new state is refused with `-OOM ...` (as Redis answers): the commands flagged CMD_DENYOOM
 *      (TASK.ADD, LIMIT.SET, LEASE.ACQUIRE, RECUR.ADD, LIMIT.KEY), THROTTLE on a key its limit does
 *      not track, CL.THROTTLE with a new parameter set. A limit configured with
 *      `on_key_overflow: allow` lets a new key through untracked instead (it fails open because it
 *      was told to); reads, TASK.GET/ACK/FAIL, deletes, INFO and PING keep working;
 *   3. reply buffers: a client whose queued replies are large while the process is over budget is
 *      closed, the largest first, until what is closed covers the excess (mem_enforce_output).
 *
 * Nothing here crashes or aborts: the budget is a number compared with a counter. The process's
 * RSS exceeds the budget by a fixed overhead (code, libraries, SQLite's page cache, the allocator's
 * own bookkeeping and free lists): docs/configuration.md gives the figure measured.
 */
#ifndef SLUICE_SERVER_MEMORY_H
#define SLUICE_SERVER_MEMORY_H

#include <stddef.h>
#include <stdint.h>

#include "server/conn.h"
#include "server/server.h"

/* A client's queued replies below this, or below 1/16 of the budget, are never a reason to
 * close it for memory: a client that pipelines and reads normally keeps well under it. */
#define MEM_MIN_VICTIM_OUTPUT ((size_t)1 << 20)

/* The default budget of `sluice serve`: half of the machine's memory, or of the cgroup's limit
 * when one is set and smaller (cgroup v2 memory.max, else v1 memory.limit_in_bytes). Returns 0
 * (no budget) when neither can be read. Reads /proc and /sys. */
size_t mem_default_budget(void);

/* Sets the server's budget (0 = none) in the allocator, and remembers it for INFO. */
void mem_set_budget(server *s, size_t bytes);

/* For a command that adds state (CMD_DENYOOM), before it runs: returns 0 when it may run,
 * or 1 after replying -OOM because the process is over budget even after sweeping. */
int mem_refuse(conn *c);

/* Replies -OOM with the budget and its use (for handlers that refuse new state themselves). */
void mem_reply_oom(conn *c);

/* Called after each command of client c: returns 1 after closing c when the process is over
 * budget, c is a slow reader (the socket did not take its last write: a write is in flight) and
 * its queued replies are a quarter of the budget or more. (Smaller queues are left to
 * mem_enforce_output, which picks the largest first: a client that pipelines a burst and reads
 * it back is rarely the one to go.) */
int mem_output_over(conn *c);

/* End of a loop turn, after the flushes: while over budget, closes the clients with the most
 * replies still queued (each large, as above) until the replies closed cover the excess. O(clients)
 * per client closed, nothing when under budget. */
void mem_enforce_output(server *s);

#endif
