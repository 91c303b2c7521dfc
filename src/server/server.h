/* SPDX-License-Identifier: MIT */
/*
 * The server: `sluice serve`, one libuv loop thread that owns the engine and speaks RESP.
 *
 * Like Redis, everything happens on one thread: accepting, reading, parsing, running commands,
 * writing. Commands never block the loop; a command that must wait (TASK.GET with a timeout)
 * blocks its client instead (conn_block in conn.h).
 *
 * One loop turn:
 *   timers   -> the engine timer (armed at sluice_engine_next_wake) runs sluice_engine_tick;
 *               the housekeeping timer forgets idle keys and expired leases;
 *   poll     -> read callbacks feed each client's RESP reader and run every complete command,
 *               appending replies to the client's output buffer (nothing is written yet);
 *   check    -> the cached clock is invalidated;
 *   prepare  -> ("before sleep") blocked clients are retried when something signalled them
 *               (server_signal_ready), the turn's decisions on a shared store leave as one
 *               script call (rstore.h: their replies are deferred until it answers), the
 *               turn's changes are committed to the store in one
 *               transaction (durable.h: replies that wait for it are held until then), every
 *               client with replies is flushed with one write
 *               (replies are batched per turn: a pipeline of 16 commands costs one syscall), the
 *               engine timer is re-armed, the clock is invalidated.
 *
 * The clock: server_now() is the only clock read behind any decision in sluice. It reads the
 * clock at most once per loop phase (the first call after an invalidation), so every command of
 * one batch sees the same `now`; the engine, the limits THROTTLE calls and the store (commit and
 * sync schedule) all take this time. It is CLOCK_MONOTONIC plus an offset fixed at start (the wall
 * clock then, floored at the last time persisted; see durable.h), so a wall-clock step while
 * running changes nothing, and it never returns less than before (the offset only grows), with no
 * ratchet of its own. Other clock reads: the log's wall-clock timestamps (log.c), the start-up
 * offset and the durations that time a commit or a load (durable.c, durable_load.c): none of them
 * decides anything.
 *
 * Hooks for the TASK.* commands (src/server/cmd_task.c, added later):
 *   - commands: add one row per command to the table in commands.c and declare its handler in
 *     commands.h (handlers get the client and the parsed command; they reply with the resp_*
 *     writers on conn_out(c) and the reply helpers of commands.h);
 *   - per-module state: add a `cmd_task_init`/`cmd_task_free` pair to commands_init() and
 *     commands_free() in commands.c and keep the state behind server.task_state;
 *   - waiting workers: a handler that finds nothing to hand out copies what it needs from its
 *     arguments (they are only valid during the call), calls conn_block() with a timeout and
 *     callbacks, and returns without replying; the client then runs no further command (what
 *     it sends meanwhile is buffered) until conn_unblock(). Whenever something may have made
 *     work available (a submit, an ack, an engine tick) code calls server_signal_ready(); at
 *     the end of that loop turn the server calls the `retry` callback of every blocked client,
 *     oldest first (fairness is the order of blocking). A callback that answers appends its
 *     reply and calls conn_unblock(); the client's buffered commands then run later in the
 *     same turn, never inside the callback. The engine tick signals by itself (housekeeping
 *     ticks it every 100 ms). A blocked client that disconnects gets its `cancel` callback;
 *     a stopping server calls every blocked client's `timeout` callback before closing it.
 *     tests/unit/test_server_block.c shows the whole protocol.
 *   - durability: replies are written at the end of the turn; a store that group-commits per
 *     turn can hold a client's replies back with conn_hold()/conn_release() (see conn.h).
 */
#ifndef SLUICE_SERVER_SERVER_H
#define SLUICE_SERVER_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "server/counters.h"
#include "server/resp.h"
#include "sluice/config.h"
#include "sluice/engine.h"
#include "store/store.h"

typedef struct conn conn;
typedef struct server server;

/* Defaults of server_options_init(). */
#define SERVER_DEFAULT_BIND        "127.0.0.1"
#define SERVER_DEFAULT_PORT        7379
#define SERVER_DEFAULT_MAX_CLIENTS 10000
#define SERVER_DEFAULT_MAX_BULK    ((size_t)8 << 20)  /* one argument */
#define SERVER_DEFAULT_MAX_ARGS    ((size_t)1024)     /* arguments of one command */
#define SERVER_DEFAULT_MAX_INLINE  ((size_t)64 << 10) /* one inline command line */
#define SERVER_DEFAULT_MAX_QUERY   ((size_t)16 << 20) /* one command, all arguments */
#define SERVER_DEFAULT_MAX_KEY     ((size_t)1024)     /* a rate-limit key */
#define SERVER_DEFAULT_MAX_PAYLOAD ((size_t)1 << 20)  /* a task's JSON payload */
#define SERVER_DEFAULT_MAX_OUTPUT  ((size_t)64 << 20) /* replies queued for one client */
#define SERVER_DEFAULT_MAX_ADHOC   ((size_t)1024)     /* CL.THROTTLE parameter triples */
#define SERVER_DEFAULT_SHUTDOWN_MS 5000
/* With a password: a connection that has not AUTHed after this is closed, and this many slots
 * of max_clients are never given to connections that have not. */
#define SERVER_DEFAULT_AUTH_TIMEOUT_MS 10000
#define SERVER_DEFAULT_AUTH_RESERVE    16
/* After the nth failed AUTH in a row, the client's next command waits AUTH_DELAY_MS << (n - 1),
 * at most SERVER_AUTH_DELAY_MAX_MS. */
#define SERVER_AUTH_DELAY_MS     100
#define SERVER_AUTH_DELAY_MAX_MS 5000
/* Before AUTH only tiny requests are read (Redis CVE-2021-32675). */
#define SERVER_PREAUTH_MAX_ARGS   ((size_t)10)
#define SERVER_PREAUTH_MAX_BULK   ((size_t)16384)
#define SERVER_PREAUTH_MAX_INLINE ((size_t)16384)
#define SERVER_PREAUTH_MAX_QUERY  ((size_t)65536)

/* Everything `sluice serve` can be told. Strings are borrowed: they must outlive the server. */
typedef struct server_options {
    const char *config_path; /* YAML file of limits and types; NULL = start empty */
    const char *bind;        /* address to listen on (IPv4 or IPv6 literal) */
    int port;                /* 0 = an ephemeral port (see port_file) */
    const char *port_file;   /* when set, the bound port is written there once listening */
    const char *requirepass; /* NULL = no password (then only loopback clients: protected) */
    int protected_mode;      /* 1: without a password, refuse clients not on loopback */
    size_t max_clients;      /* connections at once; more are told so and closed */
    size_t auth_reserve;     /* with a password: slots of max_clients kept for authenticated
                              * clients (at most max_clients - 1 take effect) */
    int64_t auth_timeout_ms; /* with a password: a client not authenticated after this is closed;
                              * 0 = never */
    int64_t idle_timeout_ms; /* a client silent for this long is closed (a blocked one never);
                              * 0 = never (the default, as Redis's `timeout 0`) */
    resp_limits limits;      /* reader limits of an authenticated client */
    resp_limits preauth;     /* reader limits before AUTH (only when a password is set) */
    size_t max_key_len;      /* longest rate-limit key accepted (WRONGARGS beyond) */
    size_t max_payload_len;  /* longest task payload accepted (TASK.ADD) */
    size_t max_output;       /* replies queued for one client; past it the client is closed */
    size_t max_adhoc;        /* CL.THROTTLE limits cached (one per parameter triple) */
    size_t maxmemory;        /* the memory budget in bytes (memory.h); 0 = none (the default
                              * here; `sluice serve` takes half the machine's memory) */
    int maxmemory_set;       /* 1: maxmemory was given on the command line, and the
                              * configuration file's `maxmemory:` is ignored */
    int64_t shutdown_ms;     /* on SIGTERM, clients still draining after this are cut */
    /* The admin port (admin.h): HTTP for /metrics, /api and the dashboard. */
    const char *admin_bind;      /* address (default 127.0.0.1) */
    int admin_port;              /* -1: off (the default here; `sluice serve` turns it on at
                                  * 7380); 0: an ephemeral port (see admin_port_file) */
    const char *admin_port_file; /* when set, the admin port is written there once listening */
    int admin_port_explicit;     /* 1: failing to bind is an error; 0: a warning, admin off */
    /* Durability (durable.h, docs/durability.md). */
    const char *data_dir;        /* the store's directory; NULL = memory only (the default
                                  * here; `sluice serve` uses ./data) */
    store_durability durability; /* always, batch or none */
    int64_t batch_ms;            /* STORE_BATCH: fsync interval */
    int debug_commands;          /* 1: DEBUG allowed, and the store uses the fault VFS */
    /* The shared store (rstore.h, docs/cluster.md): THROTTLE and CL.THROTTLE decided in Redis.
     * Unset here, the configuration file's store: section applies. */
    const char *store_url;              /* redis://HOST[:PORT][/DB]; NULL: the embedded store */
    sluice_store_failure store_failure; /* UNSET: the file's, else closed */
    int64_t store_timeout_ms;           /* 0: the file's, else 1000 */
    int store_replicas;                 /* -1: the file's, else 0; > 0: task writes WAIT */
    int64_t store_replicas_timeout_ms;  /* 0: the file's, else half of store_timeout_ms */
    int store_audit;                    /* 1: Redis keeps every grant in audit lists (tests) */
    int store_connections; /* PostgreSQL: connections per node; 0: the file's, else 1 */
} server_options;

/* Fills every option with its default (no config, 127.0.0.1:7379, no password, protected). */
void server_options_init(server_options *o);

/* Counters shown by INFO. */
typedef struct server_stats {
    uint64_t connections;      /* accepted since start */
    uint64_t rejected;         /* refused: max clients or protected mode */
    uint64_t commands;         /* commands run */
    uint64_t protocol_errors;  /* clients closed after a protocol error */
    uint64_t output_overflows; /* clients closed past max_output */
    uint64_t throttle_allowed; /* THROTTLE and CL.THROTTLE decisions */
    uint64_t throttle_denied;
    uint64_t throttle_shadow_denied; /* of the allowed: passed by a shadow limit's would-be no */
    uint64_t auth_failures;
    uint64_t auth_timeouts;  /* closed for not authenticating in time */
    uint64_t auth_evictions; /* unauthenticated clients closed to make room for a new one */
    uint64_t idle_timeouts;  /* closed after --timeout of silence */
    uint64_t oom_refused;    /* commands refused with -OOM past --maxmemory */
    uint64_t oom_closes;     /* clients closed for their queued replies past --maxmemory */
} server_stats;

/* The server. Fields are shared with the command modules of this layer (not API). */
struct server {
    uv_loop_t loop;
    uv_tcp_t listener;
    uv_signal_t sigterm, sigint;
    uv_prepare_t before_sleep; /* end of a loop turn: retry blocked, flush, re-arm */
    uv_check_t after_io;       /* after the I/O callbacks: invalidate the clock */
    uv_timer_t engine_timer;   /* fires at sluice_engine_next_wake */
    uv_timer_t housekeeping;   /* forgets idle keys, expires leases, every 100 ms */
    uv_timer_t stop_timer;     /* shutdown deadline */
    server_options opt;
    int has_password;
    unsigned char password_digest[32]; /* SHA-256 of requirepass (compared in constant time) */

    sluice_engine *engine;
    sluice_config config; /* the configuration loaded last (names it declared, for reload);
                           * only a reload's switch writes it (reload.h) */
    int has_config;
    uint64_t config_version;       /* sluice_engine_limits_version when config was installed */
    struct reload_job *reload_job; /* reload.c: the CONFIG RELOAD in flight, NULL when none */

    int64_t clock_offset_ns; /* server_now = CLOCK_MONOTONIC + this (durable.h) */
    int64_t now_ns;          /* the cached clock (server_now) */
    int now_valid;           /* 0 once a phase ended: the next server_now reads the clock */
    int64_t started_ns;      /* for INFO uptime */
    int64_t engine_wake;     /* when the engine timer is armed for (SLUICE_NEVER: not armed) */

    conn *clients; /* every client (doubly linked through conn.prev/next) */
    size_t nclients;
    size_t nclosing;   /* of nclients, those already closing (gone for the max_clients check) */
    conn *unauth_head; /* clients not yet authenticated, oldest first (conn.uprev/unext) */
    conn *unauth_tail;
    size_t nunauth;
    conn *pending;      /* clients with replies to flush this turn (through conn.pnext) */
    conn *blocked_head; /* blocked clients, oldest first (through conn.bprev/bnext) */
    conn *blocked_tail;
    size_t nblocked;
    int ready_signalled; /* server_signal_ready was called this turn */
    uint64_t next_client_id;
    int port;            /* the port bound */
    int stopping;        /* a signal asked the server to stop */
    int exit_code;       /* status run returns */
    size_t open_handles; /* server-owned libuv handles not yet closed */

    size_t maxmemory;     /* the budget in force (memory.h): the option or the file's; 0 = none */
    int64_t mem_swept_ns; /* the loop phase of the last sweep for memory (memory.c) */

    server_stats stats;
    void *limit_state;   /* cmd_limit.c: lease generations */
    void *cell_state;    /* cmd_throttle.c: CL.THROTTLE limits cache */
    void *task_state;    /* cmd_task.c (TASK.*), when present */
    void *admin_state;   /* admin.c: the admin port, NULL when off */
    void *durable_state; /* durable.c: the store, the commit state, held replies */
    void *rstore_state;  /* rstore.c: the shared store (Redis), NULL when not used */
    void *rtasks_state;  /* rtasks.c: the task queue on the shared store, NULL when not used */
    void *rrecur_state;  /* rrecur.c: recurring series on the shared store, NULL when not used */
    void *rctr_state;    /* rcounters.c: counters summed across nodes, NULL when not used */
    void *rdefs_state;   /* rdefs.c: live limit definitions on the shared store, NULL when not */

    /* Commands by name, errors by code, store commit latency (the admin port's /metrics). */
    server_counters counters;

    char read_buf[64 * 1024]; /* every read lands here before it is fed to a reader */
};

/* Creates a server: loads the configuration (when given), creates the engine, binds and
 * listens, installs the signal handlers, and logs `listening on ADDR:PORT`. On failure returns
 * a negative code (SLUICE_* or a libuv error) with a one-line reason in msg and *out NULL.
 * The server is freed with server_free(). */
int server_new(const server_options *opt, server **out, char *msg, size_t msglen);

/* Runs the loop until SIGTERM/SIGINT (or server_stop) drained every client. Returns the exit
 * status: 0 after a graceful stop. */
int server_run(server *s);

/* Stops accepting, answers what is in flight (blocked clients get their timeout reply), closes
 * each client once its replies are written, then lets server_run return. Idempotent. */
void server_stop(server *s);

/* Frees everything. Accepts NULL. Only after server_run returned (or instead of running). */
void server_free(server *s);

/* The time of this loop phase, ns since the Unix epoch (see the file comment). */
int64_t server_now(server *s);

/* Asks the server to retry blocked clients at the end of this loop turn. Cheap; call it after
 * anything that may have made work available. */
void server_signal_ready(server *s);

/* Re-arms the engine timer after a change that may have moved the engine's next wake (a
 * submit with a delay, a new limit). Cheap; the end of every loop turn does it too. */
void server_engine_changed(server *s);

/* Protected mode: returns 1 when a client at `peer` may connect. Without a password and with
 * protected mode on, only loopback peers are accepted (127.0.0.0/8, ::1, IPv4-mapped
 * loopback, Unix sockets). `peer` may be NULL (unknown address: refused when protected). */
int server_peer_allowed(const struct sockaddr *peer, int has_password, int protected_mode);

/* Returns 1 when `pass` is the password (constant time in the bytes compared). */
int server_check_password(const server *s, const char *pass, size_t len);

/* Returns 1 when two limit policies enforce the same thing (declaration lines aside), so that
 * setting one over the other can keep the limit's state. Pure. */
int server_policy_eq(const sluice_limit_policy *a, const sluice_limit_policy *b);

/* Returns 1 when two limit policies differ in their mode (enforce / shadow) alone: setting one
 * over the other is a sluice_engine_set_limit_mode, which keeps the limit's state. Pure. */
int server_policy_mode_only(const sluice_limit_policy *a, const sluice_limit_policy *b);

/* What a configuration asks for that a shared store (Redis's script; PostgreSQL's functions
 * when postgres is 1) cannot do yet (it would enforce every limit as a plain one, or hand out a
 * fair type's tasks in arrival order), as the reason to refuse it; NULL when nothing. Pure. */
const char *server_store_unsupported(const sluice_config *c, int postgres);

/* What one limit asks for that a shared store cannot do yet (an adaptive rate on PostgreSQL, when
 * postgres is 1), as the reason to refuse it; NULL when nothing. Pure. */
const char *server_limit_unsupported(const sluice_limit_policy *p, int postgres);

/* 1 when the node's store is PostgreSQL. */
int server_store_postgres(const server *s);

/* Sets the memory budget in force: the command line's, else the configuration file's
 * `maxmemory:`, else the option's default. */
void server_apply_budget(server *s);

/* conn.c: a client was freed (the last one lets a stopping server finish). */
void server_client_gone(server *s);

/* Loads path, validates and applies it all-or-nothing, synchronously on the calling thread (the
 * loop's reload is reload_start in reload.h, which runs the same steps with the parsing and the
 * building off the loop): the file is parsed, checked and its changed limits built before the
 * live engine is touched, so every error in the file surfaces before anything changes; then the
 * changed limits are installed, limits the previous file declared and the new one does not are
 * removed. Limits whose policy is unchanged keep their state; a limit the file declares that
 * LIMIT.SET changed takes the file's policy again. Returns 0 with msg naming those limits (or
 * empty), or an error with msg (SLUICE_EBUSY while a reload_start is in flight). */
int server_load_config(server *s, const char *path, char *msg, size_t msglen);

#endif
