/* SPDX-License-Identifier: MIT */
/*
 * A client connection: its socket, RESP reader, reply buffer, authentication state, and the
 * blocked state of a command that waits (TASK.GET).
 *
 * Reading: every read is fed to the client's reader, and each complete command is run at once,
 * its reply appended to `out`. Writing: what nothing holds back is written right after the
 * read's commands ran (a request/response client gets its reply without waiting for the rest of
 * the turn); a client with replies is also put on the server's pending list and flushed at the
 * end of the loop turn (conn_flush), for replies produced outside a read (a blocked client
 * served, replies released by a commit); whatever the socket does not take at once is handed to
 * one uv_write, and replies produced meanwhile wait in `out`.
 *
 * Invariants:
 * - replies leave in the order their commands arrived (one write in flight at most, `out`
 *   appended behind it);
 * - bytes queued for the client (out.len + wlen) never exceed max_output: past it the client is
 *   closed at once and its replies dropped (Redis's client-output-buffer-limit);
 * - a protocol error, QUIT, or a refused connection sets CONN_CLOSE_AFTER_REPLY: nothing more is
 *   run, and once its replies are written the client's write side is shut down and what it
 *   still sends is read and dropped for up to a second before the socket is closed (a lingering
 *   close: closing with unread input makes the kernel send a reset, which can destroy the error
 *   reply before the client reads it);
 * - a blocked client runs no command (later ones stay in its reader) until it is unblocked;
 * - a deferred reply (conn_defer) keeps its place: later replies go behind it, and nothing of the
 *   client's is written until it is filled;
 * - with a password, a client not yet authenticated is on the server's unauth list (oldest
 *   first) and counts in nunauth until it authenticates or closes; it is closed after
 *   auth_timeout_ms, and when a new connection would leave fewer than auth_reserve slots of
 *   max_clients to authenticated clients (or none at all) the oldest of them is closed to make
 *   room, so connections that never AUTH cannot lock anyone out;
 * - after a failed AUTH the client runs nothing and reads nothing (CONN_AUTH_WAIT) for a delay
 *   that doubles with each failure in a row (server.h), on a timer: the loop never waits;
 * - a client silent for idle_timeout_ms is closed, unless it is blocked (a TASK.GET waiting is
 *   not idle) or waiting out an AUTH delay;
 * - a conn is freed only after its libuv handles are closed; conn_close may be called at any
 *   time, any number of times;
 * - a detached conn (CONN_DETACHED, conn_detached_new) has no socket, no handle and no reader,
 *   is on none of the server's client lists, and belongs to its owner, which frees it
 *   (conn_detached_free); it only ever runs the one command its owner hands it.
 */
#ifndef SLUICE_SERVER_CONN_H
#define SLUICE_SERVER_CONN_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "server/resp.h"
#include "server/server.h"

/* conn.flags */
#define CONN_AUTHED            0x01u   /* AUTH succeeded, or no password is set */
#define CONN_CLOSE_AFTER_REPLY 0x02u   /* read and run nothing more; close once flushed */
#define CONN_CLOSING           0x04u   /* uv_close was called: the conn is as good as gone */
#define CONN_PENDING           0x08u   /* on the server's pending list */
#define CONN_BLOCKED           0x10u   /* waiting in conn_block */
#define CONN_READING           0x20u   /* uv_read_start is on */
#define CONN_EOF               0x40u   /* the peer closed its side */
#define CONN_IN_COMMAND        0x80u   /* a command of this client is running (no re-entry) */
#define CONN_RESUME            0x100u  /* unblocked: run its buffered commands this turn */
#define CONN_LINGER            0x200u  /* replies written, write side shut: draining input */
#define CONN_UNAUTH            0x400u  /* on the server's unauth list */
#define CONN_AUTH_WAIT         0x800u  /* waiting out the delay after a failed AUTH */
#define CONN_DETACHED          0x1000u /* no socket: a command run for the HTTP API */

/* What a blocked client waits for. The callbacks run on the loop thread. */
typedef struct conn_block_ops {
    /* Tries to answer the client now (e.g. a task became available). Returns 1 when it replied
     * and called conn_unblock, 0 when there is still nothing for it. May be NULL. */
    int (*retry)(conn *c, void *arg);
    /* The timeout passed, or the server is stopping: reply (e.g. a null) and call
     * conn_unblock. Required. */
    void (*timeout)(conn *c, void *arg);
    /* The client is going away while blocked: forget it and free arg; do not reply. May be
     * NULL. */
    void (*cancel)(conn *c, void *arg);
    /* 1: the answer is already on its way (a read the shared store is answering: TASK.EXPLAIN),
     * so a client that half-closes its side still gets it, as it would get any other reply,
     * instead of being cancelled as a waiting TASK.GET is. */
    int answer_on_eof;
} conn_block_ops;

struct conn {
    uv_tcp_t tcp;           /* the socket; tcp.data = this conn */
    uv_timer_t block_timer; /* the timeout of a blocked command */
    uv_write_t wreq;        /* the write in flight */
    uv_shutdown_t sreq;     /* the shutdown of a lingering close */
    server *srv;
    uint64_t id;         /* CLIENT ID: unique for the server's life */
    unsigned flags;      /* CONN_* */
    int handles;         /* libuv handles not yet closed */
    int holds;           /* conn_hold count: replies are not flushed while > 0 */
    unsigned ndeferred;  /* conn_defer slots not filled yet (each also holds) */
    size_t defer_next;   /* where the slot filled last ended (the next slot's base) */
    size_t defer_last;   /* where the newest slot is */
    int store_lane;      /* rstore (PostgreSQL): the connection of its newest request */
    resp_reader *reader; /* the parser of what the client sends */
    resp_writer out;     /* replies not yet handed to the socket */
    char *wbuf;          /* the bytes of the write in flight (owned), or NULL */
    size_t wlen;
    const conn_block_ops *block_ops; /* while blocked */
    void *block_arg;
    int64_t blocked_ns; /* when it blocked */
    uint64_t ncommands; /* commands run */
    int64_t created_ns;
    int64_t active_ns;      /* last read from the client (or unblock): for idle_timeout_ms */
    unsigned auth_failures; /* failed AUTHs in a row */
    conn *uprev, *unext;    /* the server's unauth list */
    conn *prev, *next;      /* the server's client list */
    conn *pnext;            /* the server's pending list */
    conn *bprev, *bnext;    /* the server's blocked list */
    /* CONN_DETACHED: its owner's callback, once its reply is complete (conn_detached_new). */
    void (*done)(conn *c, void *arg);
    void *done_arg;
    char name[64]; /* CLIENT SETNAME / HELLO SETNAME */
    char addr[64]; /* the peer, "ip:port" */
};

/* Accepts a connection on the server's listener. A client beyond max_clients or refused by
 * protected mode gets an error reply and is closed after it. Returns 0 or a libuv error. */
int conn_accept(server *s);

/* The reply buffer of a client: handlers append replies here with the resp_* writers. */
static inline resp_writer *conn_out(conn *c)
{
    return &c->out;
}

/* Marks the client for a flush at the end of this loop turn (after appending a reply outside a
 * command, e.g. from a blocked client's callback). */
void conn_reply_ready(conn *c);

/* Writes what the socket takes now and queues the rest; nothing while a hold is on (conn_hold,
 * conn_defer) or a write is in flight. Called after a read and at the end of a loop turn. */
void conn_flush(conn *c);

/* Runs the client's buffered commands until none is complete, the client blocks, or it is to
 * be closed. Called after a read and after conn_unblock. */
void conn_process(conn *c);

/* Closes the client now (replies not yet written are dropped). Idempotent. */
void conn_close(conn *c);

/* Stops running commands and closes the client once its replies are written. */
void conn_close_after_reply(conn *c);

/* Blocks the client: it runs no more commands until conn_unblock. timeout_ms > 0 arms a timer
 * that calls ops->timeout; 0 waits forever (until the server stops). ops must outlive the block
 * (a static table); arg belongs to the caller (free it in timeout/cancel or after unblocking).
 * Returns 0, or SLUICE_ESTATE when the client is already blocked or closing. */
int conn_block(conn *c, int64_t timeout_ms, const conn_block_ops *ops, void *arg);

/* Unblocks the client (after its reply was appended) and runs its buffered commands later in
 * this turn. Idempotent. */
void conn_unblock(conn *c);

/* Holds back the client's replies (e.g. until a store commit of this turn is durable);
 * conn_release undoes one hold and schedules the flush. */
void conn_hold(conn *c);
void conn_release(conn *c);

/* Deferred replies: a command whose answer comes later (from the shared store, rstore.h) takes a
 * slot where its reply belongs; the client keeps running the commands it sent after it, whose
 * replies are appended behind the slot, and nothing is flushed until every slot is filled, so
 * replies still leave in command order. A client's slots are filled in the order they were
 * taken. conn_defer takes a slot and returns its ticket (a distance from the slot before it).
 * conn_defer_fill: the reply of the oldest slot was just appended to conn_out(c) from `mark` on
 * (mark = conn_out(c)->len before appending it); moves it into the slot and lets the client's
 * replies go once no slot is left. A closed client's slots are simply never filled. */
size_t conn_defer(conn *c);
void conn_defer_fill(conn *c, size_t ticket, size_t mark);

/* Detached clients: a client with no socket, for a command run on behalf of another protocol
 * (the admin port's HTTP API, commands_run_detached). It is authenticated, speaks RESP2, and is
 * on none of the server's client lists (not in nclients or CLIENT LIST, never idle-closed); its
 * reply is appended to conn_out(c) as any client's. A reply that comes later (a shared store's
 * deferred slot, a TASK.EXPLAIN blocked on the store) is announced by done(c, arg), exactly
 * once, from the end of the loop turn in which it became complete (the server's pending walk:
 * never from inside the store's callbacks); a conn closed meanwhile (out of memory for its
 * reply) is announced the same way, with CONN_CLOSING set and no reply to read. done may free c.
 * A blocking wait with a timeout (TASK.GET ... TIMEOUT) is refused on it (conn_block: no
 * timer). Returns 0 or SLUICE_ENOMEM; *out is NULL on failure. */
int conn_detached_new(server *s, void (*done)(conn *c, void *arg), void *arg, conn **out);

/* 1 when a detached client's reply is complete (no deferred slot, no hold, not blocked) or the
 * client was closed (CONN_CLOSING: no reply). */
int conn_detached_done(const conn *c);

/* Frees a detached client at any time: whatever it still waits for (its deferred slots in the
 * shared store's batches, its block) is forgotten, as for a client that closes, and done is not
 * called. Accepts NULL. */
void conn_detached_free(conn *c);

/* Applies the reader limits for the client's authentication state. */
void conn_apply_limits(conn *c);

/* AUTH succeeded: marks the client authenticated (off the unauth list, full reader limits, its
 * failure count reset). */
void conn_auth_ok(conn *c);

/* AUTH failed: the client runs and reads nothing more until a delay that doubles with each
 * failure in a row (SERVER_AUTH_DELAY_MS, at most SERVER_AUTH_DELAY_MAX_MS); the reply of the
 * failed AUTH is still written at once. */
void conn_auth_failed(conn *c);

/* Housekeeping: closes clients past auth_timeout_ms unauthenticated or idle_timeout_ms silent.
 * O(clients timed out) for the first, O(clients) when idle_timeout_ms is set. */
void conn_sweep_timeouts(server *s, int64_t now_ns);

#endif
