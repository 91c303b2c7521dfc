/* SPDX-License-Identifier: MIT */
/*
 * CONFIG RELOAD: re-reading the --config file without stalling the loop.
 *
 * A reload has three steps, and only the middle one runs on the loop:
 *
 *   prepare (a libuv worker thread)  read, parse and check the file (sluice_config_load), refuse
 *       what the shared store cannot do, compare it with the file loaded last (server.config,
 *       which nothing changes while a reload is in flight), and build every limit whose
 *       definition differs from that file's (sluice_limit_build_new: the policy copy and the core
 *       limits, which is where the time and the allocations of a reload go). Touches no engine
 *       and no client. Any error here refuses the reload: nothing has changed.
 *   switch (the loop, one turn)      install the built limits (sluice_engine_install_limit: O(1)
 *       each, no allocation after one reserve), switch the modes that alone changed, set the
 *       types, remove the limits the file no longer declares, and make the new file the one in
 *       force. The old definitions are handed back, not freed.
 *   free (a worker thread again)     free the previous file and the replaced limits' cores.
 *
 * Consistency: the switch runs inside one callback of the loop, between two commands, so every
 * decision sees either the old configuration entirely or the new one entirely; nothing is
 * installed in slices. What makes the switch cheap is that it only touches what changed: when no
 * limit changed since the previous reload (sluice_engine_limits_version is where that reload
 * left it: no LIMIT.SET, LIMIT.DEL, LIMIT.KEY or mode switch since), the file's diff computed
 * off the loop is exact and a limit whose definition is unchanged costs nothing. Otherwise every
 * limit the file declares is compared with the live one on the loop (a hash lookup and a compare
 * each), as a reload always did, still without building anything there.
 *
 * The client that sent CONFIG RELOAD is blocked (conn_block) until the switch: its reply says the
 * new configuration is in force (or why it was refused), and the commands it pipelined after it
 * run after that. Other clients are served all along, by the old configuration until the switch.
 * One reload at a time: a CONFIG RELOAD while one is in flight is answered -BUSY at once.
 */
#ifndef SLUICE_SERVER_RELOAD_H
#define SLUICE_SERVER_RELOAD_H

#include <stddef.h>

#include "server/conn.h"
#include "server/server.h"

/* CONFIG RELOAD from client c: starts a reload of s->opt.config_path and blocks c until it is in
 * force or refused (then c gets +OK or -CONFIG reason). Replies at once, without blocking, with
 * -CONFIG when the server has no --config and -BUSY while another reload is in flight. */
void reload_start(server *s, conn *c);

/* 1 while a reload is in flight (prepared on a worker, not yet switched). */
int reload_running(const server *s);

#endif
