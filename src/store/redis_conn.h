/* SPDX-License-Identifier: MIT */
/*
 * One connection to a standalone Redis on the server's libuv loop (hiredis's async API), that
 * runs one Lua script by SHA and keeps itself usable: it resolves the host without blocking
 * (uv_getaddrinfo), connects, SELECTs the database, loads the script with SCRIPT LOAD on every
 * (re)connect, reloads it when a call meets NOSCRIPT (SCRIPT FLUSH, a failover to a replica that
 * never saw it) and retries that call once, and reconnects by itself with a backoff (20 ms
 * doubling to 1 s) whenever Redis goes away or stops answering.
 *
 * States: DOWN (no connection; a reconnect is scheduled) -> CONNECTING (resolving, TCP connect)
 * -> LOADING (SELECT and SCRIPT LOAD sent; a subscriber: SUBSCRIBE sent) -> UP (calls accepted;
 * a subscriber: messages arrive). Calls are accepted only when
 * UP; any other state refuses them at once (the caller applies its failure mode).
 *
 * Deadlines, not hopes: every call and every connection attempt has a deadline of timeout_ms
 * (a SIGSTOPped Redis still accepts TCP connections through the kernel, and answers nothing).
 * When the oldest call in flight passes it, the connection is dropped: every call in flight is
 * answered (reply NULL, why "timeout"), and a new connection is made. A call dropped that way
 * may still have been run by Redis (its bytes were sent): whoever calls must treat "no answer" as
 * "unknown", never as "not done".
 *
 * Invariants:
 * - every call accepted by rconn_evalsha gets exactly one answer through its callback, in the
 *   order the calls were made (Redis answers a connection in order; a dropped connection answers
 *   what is left in order);
 * - the loop never waits: nothing here blocks (the one blocking resolver call hiredis would make
 *   is given a numeric address);
 * - callbacks run on the loop thread, never inside rconn_evalsha.
 */
#ifndef SLUICE_STORE_REDIS_CONN_H
#define SLUICE_STORE_REDIS_CONN_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

struct redisReply;

typedef struct rconn rconn;

typedef enum rconn_state {
    RCONN_DOWN = 0,   /* no connection; one is scheduled */
    RCONN_CONNECTING, /* resolving the host or connecting */
    RCONN_LOADING,    /* connected; AUTH, SELECT and SCRIPT LOAD not yet answered */
    RCONN_UP          /* calls accepted */
} rconn_state;

/* Backoff between connection attempts. */
#define RCONN_BACKOFF_MIN_MS 20
#define RCONN_BACKOFF_MAX_MS 1000

typedef struct rconn_options {
    const char *host;     /* a name or an address literal; copied */
    int port;             /* 1..65535 */
    int db;               /* SELECTed on every connection */
    const char *user;     /* AUTH on every connection, before anything else: "AUTH user */
    const char *password; /* password", or "AUTH password" when user is NULL or ""; no AUTH
                           * when password is NULL or "" (both copied) */
    int64_t timeout_ms;   /* deadline of a call and of a connection attempt, > 0 */
    const char *script;   /* the Lua script, loaded on every connection; borrowed: it must */
    size_t script_len;    /* outlive the connection */
    /* Called on every change of state (may be NULL), with why the connection went down (NULL
     * when it came up). Runs on the loop thread. */
    void (*on_state)(void *arg, rconn_state state, const char *why);
    void *arg;
    /* A subscriber instead (script NULL): the connection SUBSCRIBEs to `channel` (copied) on
     * every (re)connect and is UP once Redis confirms it; each message published on it is handed
     * to on_message (its bytes valid during the call only). A subscriber takes no calls. Messages
     * published while it was not UP are lost: whoever listens treats coming UP as "something may
     * have been missed". */
    const char *channel;
    void (*on_message)(void *arg, const char *msg, size_t len);
} rconn_options;

/* The answer to one call: `reply` is Redis's (valid during the callback only; an error reply is
 * a REDIS_REPLY_ERROR, NOSCRIPT excepted, which is handled here), or NULL when there is none,
 * with `why` saying so ("timeout", "connection lost: ...", "stopped"). */
typedef void (*rconn_reply_fn)(void *arg, const struct redisReply *reply, const char *why);

/* One call, in memory the caller owns (embedded in its batch): the caller sets the first five
 * fields; the rest is rconn's. The call, argv and argvlen must stay valid and unchanged until
 * fn has run (a NOSCRIPT retry sends them again). argv[0] is "EVALSHA" and argv[1] the script's
 * SHA (rconn_sha), or any other command Redis answers with one reply (rstore sends its WAIT for
 * replicas this way: it must follow the script call on the same connection). */
typedef struct rconn_call {
    int argc;
    const char **argv;
    const size_t *argvlen;
    rconn_reply_fn fn;
    void *arg;
    /* private */
    struct rconn *rc;
    int64_t deadline_ms;     /* uv_now of the loop when it times out */
    int retried;             /* sent again after NOSCRIPT */
    struct rconn_call *next; /* the calls in flight, oldest first */
} rconn_call;

/* Counters, for INFO and /metrics. */
typedef struct rconn_stats {
    uint64_t connects;        /* connections that reached UP */
    uint64_t disconnects;     /* UP connections lost (or dropped) */
    uint64_t failed_connects; /* attempts that did not reach UP */
    uint64_t calls;           /* calls sent */
    uint64_t timeouts;        /* connections dropped because Redis did not answer in time */
    uint64_t script_loads;    /* SCRIPT LOADs answered (one per connection, and per NOSCRIPT) */
    uint64_t in_flight;       /* calls not answered yet */
} rconn_stats;

/* Creates the connection and starts connecting. Returns 0 with *out, SLUICE_ENOMEM, or
 * SLUICE_EINVAL (bad options). */
int rconn_new(uv_loop_t *loop, const rconn_options *o, rconn **out);

/* Answers every call in flight (reply NULL, why "stopped"), closes the connection and the
 * handles; the memory is freed once the loop has run their close callbacks (the caller runs the
 * loop). Accepts NULL. No callback of `on_state` runs after it. */
void rconn_free(rconn *rc);

rconn_state rconn_get_state(const rconn *rc);

/* Why the connection last went down ("" when it never did), and since when (uv_now ms; 0 when
 * up). */
const char *rconn_last_error(const rconn *rc);

/* The loaded script's SHA-1 in hex, 40 characters; "" until the first load. */
const char *rconn_sha(const rconn *rc);

/* Sends call (see rconn_call). Returns 0, after which call->fn runs exactly once, later; or
 * SLUICE_ESTATE when the connection is not UP (or is a subscriber), SLUICE_ENOMEM when the
 * command could not be queued: then fn never runs. */
int rconn_evalsha(rconn *rc, rconn_call *call);

void rconn_get_stats(const rconn *rc, rconn_stats *out);

/* The name of a state: "down", "connecting", "loading", "up". */
const char *rconn_state_name(rconn_state s);

#endif
