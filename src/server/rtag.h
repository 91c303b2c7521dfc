/* SPDX-License-Identifier: MIT */
/*
 * Where a limit's shared state lives on a Redis store: the hash tag of its links
 * (store/redis_limits.h), decided here once for every caller (THROTTLE, LEASE.*, the task
 * queue's chains, LIMIT.RESET and LIMIT.SPEND), so that one (limit, key) is one state whichever
 * command touches it.
 *
 * - Standalone Redis: everything under the queue's tag, RTAG_QUEUE (one clock key per call).
 * - Redis Cluster: a limit that a task type names keeps its state under RTAG_QUEUE too, in the
 *   slot of the task queue, so that a claim decides a task's chain in the same script call as
 *   it takes the task (all-or-nothing, in one master's clock). Every other limit keeps the
 *   default tag of redis_limits.h (the key, or the limit for a global bucket), so its keys
 *   spread over the masters. docs/cluster.md ("On Redis Cluster") says what that means for the
 *   queue's master.
 *
 * Which limits a type names is read once, from the configuration file's types at start (types
 * change only with the file). A file that would move a limit in or out of the queue's slot is
 * refused by CONFIG RELOAD (rtag_cluster_moves): the nodes would decide it in two slots.
 */
#ifndef SLUICE_SERVER_RTAG_H
#define SLUICE_SERVER_RTAG_H

#include <stddef.h>

#include "base/ptab.h"
#include "sluice/config.h"

/* The task queue's hash tag: its keys are "<prefix>:{all}:...". */
#define RTAG_QUEUE     "all"
#define RTAG_QUEUE_LEN 3

/* The limits the types of one configuration name (copies of their names). */
typedef struct rtag_map {
    ptab names;  /* of the names in arena */
    char *arena; /* the names, NUL-terminated, one after another */
} rtag_map;

/* An empty map (names nothing). */
void rtag_map_init(rtag_map *m);

/* Makes m the limits c's types name (c NULL: none), copied. Returns 0, or SLUICE_ENOMEM (m then
 * names nothing). */
int rtag_map_build(rtag_map *m, const sluice_config *c);

void rtag_map_free(rtag_map *m);

/* 1 when a type names the limit of limit_id ("name", or "name/tier" for a tier's state). */
int rtag_map_queued(const rtag_map *m, const char *limit_id);

/* On Redis Cluster: the first limit (declared in either file, or named by a type of either)
 * that one file's types name and the other's do not, as a message in buf; NULL when none. */
const char *rtag_cluster_moves(const sluice_config *prev, const sluice_config *next, char *buf,
                               size_t len);

#endif
