/* SPDX-License-Identifier: MIT */
/*
 * Redis Cluster, the node's side: one rconn (store/redis_conn.h) per master, the slot map that
 * says which master owns which of the 16384 slots, and the routing of each script call to the
 * owner of its slot. Every call names one slot (its keys all hash to it: the caller groups its
 * requests so); the call goes to that slot's owner as the map knows it. When the owner answers
 * `-MOVED slot host:port` the map is corrected at once for that slot, a full refresh (CLUSTER
 * SLOTS) is asked, and the call is resent to the new owner; `-ASK slot host:port` (a slot being
 * migrated) resends the call to that node once, behind `ASKING` on the same connection. A call
 * follows at most RCL_REDIRECTS_MAX redirects, then fails. `-TRYAGAIN` (a multi-key call while
 * its slot's keys are split between two masters, or some do not exist yet on either) is resent
 * by the map every RCL_TRYAGAIN_MS until the migration ends, for at most the connection timeout,
 * then handed to the caller.
 *
 * The map is read with CLUSTER SLOTS from any master that is up: when the first connection comes
 * up, after every MOVED, whenever a master's connection goes down, and once a second while a
 * slot has no known owner. A master that is not up fails the calls of its slots at once (the
 * caller applies its failure mode to them); the other slots keep working.
 *
 * One call per master per turn: the caller groups a turn's requests by the master that owns
 * their slot (rcl_group) and sends each group as one call (rcl_send_multi): a group of one slot
 * as that slot's call (above), a group of several as a call across slots that declares no key,
 * sent to the master itself. Such a call is split by slot (rcl_split) when the master refuses it
 * before running anything (rcl_split_worthy; the limits script refuses, with nothing written, a
 * call naming a slot that master does not wholly serve), each part then routed as a call of its
 * slot; a slot that made a call be refused goes alone for a while.
 *
 * The pure parts (CRC16 and the key slot as Redis Cluster specifies them, CLUSTER SLOTS and
 * MOVED/ASK parsing, the split of a call by slot and which errors split it) are exposed for the
 * tests.
 *
 * Invariants:
 * - every call accepted by rcl_send gets exactly one answer through its fn, never inside
 *   rcl_send (rconn's rule), the caller's argv unchanged; likewise a call accepted by
 *   rcl_send_multi, every request of it answered once, by the whole call or by its part;
 * - a call across slots is resent (split) only after a refusal that ran nothing, never after a
 *   lost answer, so no request is decided twice;
 * - a redirect is followed only to a node whose connection is up; a call redirected to a node
 *   still connecting (one the map did not name before) waits for it, as a TRYAGAIN does, within
 *   the timeout since it was first sent, then fails with why;
 * - nothing blocks the loop.
 */
#ifndef SLUICE_STORE_REDIS_CLUSTER_H
#define SLUICE_STORE_REDIS_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "store/redis_conn.h"

struct redisReply;

/* Slots of a Redis Cluster. */
#define RCL_SLOTS 16384
/* Redirects (MOVED, ASK) one call follows at most. */
#define RCL_REDIRECTS_MAX 5
/* Pause before a call answered -TRYAGAIN is resent. */
#define RCL_TRYAGAIN_MS 20
/* Longest host name of a node. */
#define RCL_HOST_MAX 255
/* Masters a map may name at most (CLUSTER SLOTS with more is refused). */
#define RCL_NODES_MAX 256

/* ---- Pure parts -------------------------------------------------------------------------- */

/* CRC16-CCITT (XMODEM: polynomial 0x1021, initial 0), the checksum Redis Cluster hashes keys
 * with. rcl_crc16("123456789", 9) == 0x31C3. */
uint16_t rcl_crc16(const void *buf, size_t len);

/* The slot of a key as Redis Cluster computes it: the CRC16 of the bytes between the first '{'
 * and the first '}' after it when that is not empty, else of the whole key; modulo 16384. */
int rcl_key_slot(const char *key, size_t len);

/* A node of the map. */
typedef struct rcl_addr {
    char host[RCL_HOST_MAX + 1];
    int port;
} rcl_addr;

/* A slot map: the owner of each slot as an index into nodes (-1: none known). */
typedef struct rcl_map {
    int16_t owner[RCL_SLOTS];
    rcl_addr nodes[RCL_NODES_MAX];
    size_t nnodes;
} rcl_map;

/* Reads a CLUSTER SLOTS reply (an array of [start, end, [host, port, id...], replicas...]) into
 * *m (masters only, in the order first named; slots nobody covers get -1). An empty host (a
 * node that does not know its address) is read as `fallback_host`. Returns 0, or SLUICE_EPARSE
 * for a reply of another shape (*m then undefined). Pure. */
int rcl_map_parse(const struct redisReply *r, const char *fallback_host, rcl_map *m);

/* Reads an error reply "MOVED <slot> <host>:<port>" or "ASK <slot> <host>:<port>" (the host may
 * be an IPv6 literal: the port follows the last ':'). Returns 1 for MOVED, 2 for ASK with the
 * fields filled, 0 for any other text. Pure. */
int rcl_parse_redirect(const char *s, size_t len, int *slot, rcl_addr *to);

/* One slot's share of a call across slots (rcl_split): its requests are order[first ..
 * first + n). */
typedef struct rcl_span {
    int slot;
    size_t first, n;
} rcl_span;

/* Splits a call's n requests (slots[i]: request i's slot) by slot: spans get one entry per
 * distinct slot, in the order of each slot's first request, and order the request indexes span
 * after span, each span's in call order (so each client's requests in one slot keep their
 * order). order and spans hold n entries each. Returns the number of spans. Pure. */
size_t rcl_split(const int *slots, size_t n, size_t *order, rcl_span *spans);

/* 1 when an error reply to a call across slots says that the call ran nothing: the script's
 * own refusal ("XSLOT": a slot not wholly served by that master) or an error Redis answers
 * before it runs a script (MOVED, ASK, TRYAGAIN, CROSSSLOT, CLUSTERDOWN, OOM, BUSY, LOADING,
 * READONLY, MASTERDOWN, NOSCRIPT); its requests can then be resent slot by slot. Any other error
 * (the script failed while running: it may have written) is 0: its requests fail. Pure. */
int rcl_split_worthy(const char *s, size_t len);

/* ---- The cluster connection --------------------------------------------------------------- */

typedef struct rcluster rcluster;

typedef struct rcl_options {
    const rcl_addr *seeds; /* where to read the map first (copied) */
    size_t nseeds;         /* >= 1 */
    int64_t timeout_ms;    /* each connection's deadline (rconn) */
    const char *script;    /* loaded on every master (borrowed; outlives the cluster) */
    const char *user;      /* AUTH on every node's connection (rconn_options; borrowed: both */
    const char *password;  /* outlive the cluster) */
    size_t script_len;
    /* Called when the cluster becomes usable (up 1: a map is known and a master is up) or
     * stops being so (up 0, why), and when a master's connection goes down (up 1, why set). */
    void (*on_state)(void *arg, int up, const char *why);
    void *arg;
} rcl_options;

/* One call: the caller sets argc, argv, argvlen (EVALSHA sha numkeys keys...), fn, arg and
 * slot; the rest is the cluster's. The memory stays the caller's and must stay valid until fn
 * has run. */
typedef struct rcl_call {
    int argc;
    const char **argv;
    const size_t *argvlen;
    rconn_reply_fn fn;
    void *arg;
    int slot; /* 0..16383: every key of the call hashes to it */
    /* Set by the cluster, read by the caller once fn ran: 1 when the call was sent again after
     * its first send (a redirect, a TRYAGAIN, a NOSCRIPT reload, a wait for a new owner), so
     * that a command the caller sent behind its first send on that connection (a WAIT) did not
     * come after the write that answered. */
    int resent;
    /* private */
    rcluster *cl;
    rconn_call inner;  /* the call on the owner's connection */
    rconn_call asking; /* ASKING ahead of a resend after -ASK */
    int redirects;
    uint64_t first_ms;      /* uv_now when it was first sent (TRYAGAIN's budget) */
    struct rcl_call *retry; /* in the cluster's list of calls waiting to be resent */
} rcl_call;

/* A call whose requests lie in several slots of one master (rcl_group), sent to that master as
 * one script call that declares no key (rlim_batch_command_cross). When it is answered, fn gets
 * the answer. When the master refuses it before running anything (rcl_split_worthy: a slot moved,
 * migrating or importing, the cluster down...), the call is split by slot (rcl_split) and each
 * slot's requests go as a call of their own, with declared keys, routed by slot with every
 * redirect followed (rcl_send): build makes each part's command, on_part gets each part's answer
 * (in any order), and fn then gets (NULL, NULL). So every request is answered once, by the whole
 * call or by its part, and none is sent twice but after a refusal that ran nothing. The caller
 * sets the fields above "private"; their memory stays the caller's until fn has run. */
typedef struct rcl_multi {
    int argc;
    const char **argv;
    const size_t *argvlen;
    int node;         /* rcl_group's answer for the slots; -1: every request is in slots[0],
                       * and goes as that slot's call (declared keys) */
    const int *slots; /* slots[i]: request i's slot */
    size_t n;         /* requests */
    /* Part p's command, for the requests reqs[0..n) of the call; its memory stays valid until
     * on_part has run for it. Returns 0, or an error (the part then fails). */
    int (*build)(void *arg, size_t p, const size_t *reqs, size_t n, int *argc, const char ***argv,
                 const size_t **argvlen);
    /* A part's answer: reply (an array of n answers, answer j for request reqs[j]; or an error),
     * or NULL and why. */
    void (*on_part)(void *arg, const size_t *reqs, size_t n, const struct redisReply *reply,
                    const char *why);
    rconn_reply_fn fn;
    void *arg;
    /* private */
    rcluster *cl;
    rconn_call inner;
    size_t *order;
    rcl_span *spans;
    struct rcl_mpart *parts;
    size_t cap;      /* entries of order and spans */
    size_t capparts; /* entries of parts */
    size_t pending;  /* parts not answered yet */
} rcl_multi;

typedef struct rcl_stats {
    uint64_t moved, asks, tryagains, refreshes, refresh_failures;
    uint64_t multi;     /* calls across slots sent (rcl_send_multi) */
    uint64_t splits;    /* of them, split by slot */
    uint64_t parts;     /* the per-slot calls they were split into */
    size_t masters;     /* masters in the map */
    size_t masters_up;  /* of them, connected */
    size_t slots_known; /* slots with an owner */
    uint64_t connects, disconnects, failed_connects, timeouts, script_loads, in_flight;
} rcl_stats;

/* Creates the cluster connection and starts connecting to the seeds. Returns 0 with *out,
 * SLUICE_EINVAL (no seed, bad options) or SLUICE_ENOMEM. */
int rcl_new(uv_loop_t *loop, const rcl_options *o, rcluster **out);

/* Answers every call in flight (reply NULL, why "stopped"), closes every connection; memory is
 * freed once the loop ran the close callbacks. Accepts NULL. */
void rcl_free(rcluster *cl);

/* 1 when a map is known and at least one master is up. */
int rcl_up(const rcluster *cl);

/* Why the cluster is not usable, or why a slot's master is not ("" when it is; the text is
 * valid until the next call on cl). */
const char *rcl_last_error(const rcluster *cl);
const char *rcl_slot_why(rcluster *cl, int slot);

/* The script's SHA (every master loads the same script): "" until one loaded it. */
const char *rcl_sha(const rcluster *cl);

/* Sends call to its slot's owner. Returns 0 (fn runs exactly once, later), SLUICE_ESTATE (no
 * owner known, or its connection is not up: rcl_slot_why says which) or SLUICE_ENOMEM; fn then
 * never runs. */
int rcl_send(rcluster *cl, rcl_call *call);

/* The group a request in slot joins for one call per master: the index of the master the map
 * names for slot when its connection is up (0 .. RCL_NODES_MAX - 1), else -1 (the request goes
 * in a call of its own slot, which rcl_send answers by that slot's state). */
int rcl_group(const rcluster *cl, int slot);

/* Sends m (a call across slots of master m->node; with node -1, the call of one slot, as one
 * part: on_part gets its answer, then fn (NULL, NULL)). Returns 0 (m->fn runs exactly once,
 * later, and on_part once per part before it when the call is split), SLUICE_ESTATE (that master
 * is not up, or the slot's: rcl_slot_why says why), SLUICE_ENOMEM or build's error; nothing then
 * runs. */
int rcl_send_multi(rcluster *cl, rcl_multi *m);

/* Frees m's private arrays (kept from call to call for reuse). Not while m is in flight. */
void rcl_multi_free(rcl_multi *m);

void rcl_get_stats(const rcluster *cl, rcl_stats *out);

#endif
