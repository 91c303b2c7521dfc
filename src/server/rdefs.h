/* SPDX-License-Identifier: MIT */
/*
 * Live limit changes shared by every node on a shared store, the node's side: with `--store
 * redis://`, `redis-cluster://` or `postgresql://`, LIMIT.SET, LIMIT.DEL, LIMIT.KEY and
 * LIMIT.KEYDEL change the definitions of every node, not only this one's.
 *
 * The store keeps one set of definitions (store/shared_defs.h: limit name -> the text the single
 * node would store for it, "" for a removal) and one version. A command checks and applies its
 * change on this node exactly as on a single node (same errors, same words), then hands the
 * limit's new text here: it is written to the store (one call through rstore's FIFO) and the
 * command is answered once the store has it. The write's answer tells whether anything else
 * changed since this node's version; if so it carries the whole set, which is applied before the
 * reply. So when a client reads OK, the store holds the change, and this node decides with it.
 *
 * Other nodes learn of it by reading the version: a timer reads it every RDEFS_POLL_MS (on
 * Redis a plain GET; on PostgreSQL the GET statement, whose answer carries the set only when it
 * changed; on Redis the script's GET follows when the version moved), and a node
 * whose version is older applies the set before its next turn. A change answered on one node is
 * therefore in force on every node within RDEFS_POLL_MS plus one store round trip, while the
 * store is up. On PostgreSQL a write also NOTIFYs every node, which then polls at once. A node
 * loads the set at start, before it listens; a CONFIG RELOAD re-applies it over the new file (the
 * shared definitions win over every node's file, as a single node's LIMIT.SET wins over its file at
 * start).
 *
 * Applying the set to the engine: each name whose text differs from what this node applied last
 * is applied as the single node's recovery applies a stored LIMIT.SET (durable_load.c): the same
 * definition keeps the limit's state, a mode alone switches the mode, "" removes the limit (one
 * in a type's chain stays, with a warning); a name that left the set (a write this node made
 * that the store did not take) goes back to the file's definition, or is removed.
 *
 * The same FIFO carries LIMIT.RESET (one key, or every key of a limit) and LIMIT.SPEND, which
 * change or read limit state in the store rather than the definitions: each is one call, answered
 * to its client when the store answered (rdefs_reset, rdefs_reset_all, rdefs_spend).
 *
 * Invariants:
 * - at most one poll of this node is in flight; every client write gets exactly one reply;
 * - `have` is what the engine holds from the set: after each answer it equals the store's set
 *   at the version this node records;
 * - nothing here blocks the loop (except rdefs_open, before listening).
 */
#ifndef SLUICE_SERVER_RDEFS_H
#define SLUICE_SERVER_RDEFS_H

#include <stdint.h>

#include "server/conn.h"
#include "server/server.h"
#include "sluice/limit.h"

/* How often a node asks the store whether the definitions changed, in ms. */
#define RDEFS_POLL_MS 100

/* Counters, for INFO. */
typedef struct rdefs_stats {
    int64_t version;   /* the set's version this node holds; -1 before the first load */
    uint64_t polls;    /* GETs sent */
    uint64_t loads;    /* answers that carried a new set (and were applied) */
    uint64_t writes;   /* LIMIT.* changes stored */
    uint64_t applied;  /* definitions applied from the store */
    uint64_t refused;  /* definitions from the store this node could not apply (logged) */
    uint64_t failures; /* calls that failed (store down, timeout, a malformed answer) */
} rdefs_stats;

/* Sets up the shared definitions (after rstore_open made the connection) and, when the store is
 * up, loads them before returning (running the loop, for at most timeout_ms). Returns 0 or
 * SLUICE_ENOMEM. */
int rdefs_open(server *s, int64_t timeout_ms);

/* Stops polling (its handle closes with the loop). Idempotent. */
void rdefs_close(server *s);

/* Frees the state. Accepts a server without one. */
void rdefs_free(server *s);

/* 1 when live limit changes go to the shared store. */
int rdefs_active(const server *s);

/* A LIMIT.* command of client c changed limit `name` on this node; `spec` (NUL-terminated) is
 * the text a single node stores for it (durable_limit_set's; "" for LIMIT.DEL's removal). The
 * store gets it; the reply (`+OK`, or `:1` when reply_one) is written when the store answered,
 * or `-STOREDOWN` when it did not (the change then stays on this node only until its next read
 * of the set, which undoes it if the store does not have it). */
void rdefs_write(conn *c, const char *name, const char *spec, int reply_one);

/* LIMIT.RESET name key on a shared store: forgets the key's state in the store, the limit's
 * (limit id `name`, definition def) and, when the key has an override, the override's (id
 * override_id, definition odef; both NULL otherwise). Replies `:1` when the store held any of
 * them, `:0` when not (the single node's "not tracked"), or `-STOREDOWN`. */
void rdefs_reset(conn *c, const char *name, const sluice_limit_def *def, const char *override_id,
                 const sluice_limit_def *odef, const char *key, size_t keylen);

/* LIMIT.RESET name (no key) on a standalone Redis or PostgreSQL store: forgets every key of the
 * limit ids `ids` (idslen bytes, an id list of shared_defs.h's sdefs_ids_put: the limit's name,
 * its tiers' "name/tier", its overrides' "name/=key") in the store, for every node at once. On
 * Redis their generation is raised (limits.lua's reset_key: every state of an older generation is
 * never read again and expires by its TTL); on PostgreSQL their rows are deleted. Leases go with
 * them. Replies `+OK` once the store answered, or `-STOREDOWN`. */
void rdefs_reset_all(conn *c, const char *name, const char *ids, size_t idslen);

/* On Redis Cluster, the generation of a whole LIMIT.RESET of a limit no type names, as this
 * node last read the shared set (0: never reset): its states are named with it (rlim_link's
 * gen), so that after a reset no node reads a state of before; a node that has not read the
 * set since the reset still uses the old generation, for one poll at most (~100 ms). */
uint64_t rdefs_reset_gen(const server *s, const char *limit_id);

/* LIMIT.SPEND on a shared store: reads quota key `key` of limit id `limit_id` (definition def)
 * from the store, charging nothing, and replies the single node's map (or `-STOREDOWN`). */
void rdefs_spend(conn *c, const char *limit_id, const sluice_limit_def *def, const char *key,
                 size_t keylen);

/* Another node changed the set (PostgreSQL's NOTIFY): polls now rather than at the next
 * RDEFS_POLL_MS. */
void rdefs_notify(server *s);

/* After CONFIG RELOAD installed a new file: applies the shared set over it again. */
void rdefs_reapply(server *s);

/* A client with deferred replies is closing: its replies are dropped. */
void rdefs_conn_closed(conn *c);

void rdefs_get_stats(const server *s, rdefs_stats *out);

/* Appends the counters to INFO store's text in buf (NUL-terminated, len bytes in all). */
void rdefs_info_append(const server *s, char *buf, size_t len);

#endif
