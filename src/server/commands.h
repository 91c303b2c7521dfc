/* SPDX-License-Identifier: MIT */
/*
 * The command table and dispatch: one row per command, `{name, arity, flags, handler}`, arity
 * -N meaning "at least N arguments, the name included" (as in Redis's server.h). Adding a
 * command is one row in commands.c and one handler declared below.
 *
 * Dispatch checks, in this order, before a handler runs: the command exists (-ERR unknown
 * command), the client is authenticated or the command is allowed before AUTH (-NOAUTH), and
 * the argument count fits the arity (-WRONGARGS). A handler then validates its own arguments
 * and appends exactly one reply to conn_out(c) — or blocks the client (conn_block) and replies
 * later.
 *
 * Error replies start with a stable code word (docs/commands.md lists them all):
 *   ERR (protocol and unknown command), WRONGARGS, NOAUTH, WRONGPASS, NOPROTO, NOLIMIT, BUSY,
 *   RATELIMITED, NOLEASE, INUSE, DENIED, NOMEM, OOM (past --maxmemory), CONFIG, IOERR (a change
 *   the store could not make durable, replied by durable.c instead of the command's own reply),
 *   and STOREDOWN (a decision the shared store could not make: it is unreachable or did not
 *   answer in time, and store_failure is closed; rstore.h).
 */
#ifndef SLUICE_SERVER_COMMANDS_H
#define SLUICE_SERVER_COMMANDS_H

#include <stddef.h>
#include <stdint.h>

#include "server/conn.h"
#include "server/resp.h"
#include "sluice/engine.h"

/* command_def.flags */
#define CMD_NOAUTH   0x01u /* allowed before AUTH (AUTH, HELLO, QUIT) */
#define CMD_WRITE    0x02u /* changes state (limits, counters) */
#define CMD_READONLY 0x04u /* only reads */
#define CMD_ADMIN    0x08u /* changes the server's configuration */
#define CMD_FAST     0x10u /* O(1) or O(log n) */
#define CMD_BLOCKING 0x20u /* may block the client */
#define CMD_LOCAL                                                                                  \
    0x40u                 /* keeps state the shared store does not share yet: refused under a      \
                           * redis store (rstore_reply_unavailable) */
#define CMD_DENYOOM 0x80u /* adds state: refused with -OOM past --maxmemory (memory.h) */
typedef void (*command_fn)(conn *c, const resp_command *cmd);

typedef struct command_def {
    const char *name; /* lower case; looked up case-insensitively */
    int arity;        /* N: exactly N arguments; -N: at least N (the name counts) */
    unsigned flags;   /* CMD_* */
    command_fn handler;
    const char *summary; /* one line for COMMAND DOCS and docs/commands.md */
} command_def;

/* The table, in the order COMMAND lists it, and its size. */
extern const command_def command_table[];
extern const size_t command_count;

/* Finds a command by name (any case). Returns NULL when there is none. Pure. */
const command_def *command_lookup(const char *name, size_t len);

/* Returns 1 when argc arguments (the name included) fit the arity. Pure. */
int command_arity_ok(int arity, size_t argc);

/* Sets up the per-module state of the command modules (after the engine exists). Returns 0 or
 * SLUICE_ENOMEM. commands_free accepts a server whose init failed half-way. */
int commands_init(server *s);
void commands_free(server *s);

/* Runs one command of client c: the checks of the file comment, then its handler. */
void commands_dispatch(conn *c, const resp_command *cmd);

/* Runs one command for a caller that is not a client (the admin port's HTTP API) on c, a
 * detached client (conn_detached_new, conn.h), through the same checks and handler as
 * commands_dispatch, as an authenticated RESP2 client would; its one reply is appended to
 * conn_out(c). Only commands that answer without waiting for a client's next move are run (not
 * CMD_NOAUTH connection commands, not CMD_BLOCKING ones): others get -ERR; a command the node's
 * shared store does not serve gets -NOTSHARED. Returns 1 when the reply is complete now (or c
 * was closed: conn_detached_done), 0 when it comes later, on a shared store once the store
 * answered: c's done callback says when. The reply is not held for durability: the caller reads
 * durable_changes before and after, and waits with durable_wait when it moved. */
int commands_run_detached(conn *c, const resp_command *cmd);

/* ---- Reply helpers shared by the command modules --------------------------------------- */

/* The task replies both queues give (cmd_task.c, and the shared one: rtasks.c), with the same
 * words. -NOTASK for an id nobody knows. */
void reply_notask(conn *c, uint64_t id);

/* -NOLEASE for an ACK, FAIL or TOUCH of a task that is not running at `attempt` (0: any
 * delivery): the task is in `state`, delivered running_attempt times. */
void reply_task_refused(conn *c, uint64_t id, int64_t attempt, sluice_task_state state,
                        int running_attempt);

/* One delivered task as TASK.GET gives it; d->type is typelen bytes (need not end in NUL). */
void write_delivery(resp_writer *w, const sluice_delivery *d, size_t typelen);

/* -WRONGARGS wrong number of arguments for 'name' command */
void reply_arity(conn *c, const char *name);

/* Replies with the error of an engine or limit call: ENOMEM -> -NOMEM (-OOM while the process is
 * within a quarter of its memory budget or past it: a limit refused a new key for it), EBUSY ->
 * -BUSY, ENOTFOUND -> -NOLIMIT, ESTALE -> -NOLEASE, ESTATE -> -INUSE, the rest -> -WRONGARGS; msg
 * (may be NULL or "") is the text, else sluice_strerror(rc). */
void reply_engine_error(conn *c, int rc, const char *msg);

/* -RATELIMITED limit=NAME kind=KIND [tier=TIER] key=KEY limit_value=N window_ms=N
 * retry_after_ms=N — the fields of seed 004 in `name=value` form, values percent-encoded
 * (command_encode_value) so a program splits on spaces and '='. retry_after_ms is -1 when no
 * wait helps. */
void reply_ratelimited(conn *c, const sluice_denial *d);

/* THROTTLE's reply for decision d (denied_by: the denying limit's name, NULL when allowed),
 * counted in throttle_allowed / throttle_denied. */
void reply_throttle(conn *c, const sluice_decision *d, const char *denied_by);

/* Writes the bytes at s into buf percent-encoded: bytes outside [A-Za-z0-9_.:/@+-] become
 * %XX. At most max_in input bytes are encoded (a longer value ends in "..."). Returns buf.
 * buf must hold 3 * max_in + 4 bytes. Pure. */
char *command_encode_value(const char *s, size_t len, size_t max_in, char *buf);

/* Parses a whole argument as a decimal int64. The one rule for every integer argument of every
 * command: an optional '+' or '-' sign, then 1 to 19 decimal digits (at most 20 characters in
 * all), nothing else (no spaces, no NUL), within int64 (no overflow). Returns 0 or -1. Pure. */
int command_parse_int(const char *s, size_t len, int64_t *out);

/* Copies an argument into buf as a NUL-terminated string when it fits (len < buflen) and holds
 * no NUL byte. Returns 0 or -1. */
int command_arg_str(const char *s, size_t len, char *buf, size_t buflen);

/* Case-insensitive comparison of an argument with a lower-case word. */
int command_arg_is(const char *s, size_t len, const char *word);

/* Converts a duration in ns to ms for a reply, rounded up; SLUICE_NEVER stays -1. */
int64_t command_ns_to_ms(int64_t ns);

/* An engine time (ns since the Unix epoch) as Unix ms for a reply, truncated; SLUICE_NEVER is
 * -1. */
int64_t command_time_ms(int64_t ns);

/* Room for the longest name a command takes (limit, task type, recurring series), its NUL
 * included: longer names cannot exist, so a longer argument names nothing. */
#define COMMAND_NAME_BUF 256

/* Parses an integer argument in [min, max] into *out. Returns 0, or -1 after replying
 * "-WRONGARGS <what> must be an integer from <min> to <max>". */
int command_int_arg(conn *c, const char *what, const char *s, size_t len, int64_t min, int64_t max,
                    int64_t *out);

/* Parses a task id (a positive decimal integer) into *id. Returns 0, or -1 after replying
 * "-WRONGARGS a task id is a positive decimal integer". */
int command_id_arg(conn *c, const char *s, size_t len, uint64_t *id);

/* ---- Handlers (cmd_server.c) ------------------------------------------------------------- */
void cmd_ping(conn *c, const resp_command *cmd);
void cmd_echo(conn *c, const resp_command *cmd);
void cmd_hello(conn *c, const resp_command *cmd);
void cmd_auth(conn *c, const resp_command *cmd);
void cmd_quit(conn *c, const resp_command *cmd);
void cmd_info(conn *c, const resp_command *cmd);
void cmd_command(conn *c, const resp_command *cmd);
void cmd_config(conn *c, const resp_command *cmd);
void cmd_client(conn *c, const resp_command *cmd);
void cmd_select(conn *c, const resp_command *cmd);

/* ---- Handlers (cmd_limit.c) -------------------------------------------------------------- */
void cmd_throttle(conn *c, const resp_command *cmd);
void cmd_lease_acquire(conn *c, const resp_command *cmd);
void cmd_lease_renew(conn *c, const resp_command *cmd);
void cmd_lease_release(conn *c, const resp_command *cmd);
void cmd_limit_set(conn *c, const resp_command *cmd);
void cmd_limit_get(conn *c, const resp_command *cmd);
void cmd_limit_list(conn *c, const resp_command *cmd);
void cmd_limit_del(conn *c, const resp_command *cmd);
void cmd_limit_reset(conn *c, const resp_command *cmd);
void cmd_limit_spend(conn *c, const resp_command *cmd);
void cmd_limit_backoff(conn *c, const resp_command *cmd);
void cmd_limit_rate(conn *c, const resp_command *cmd);
void cmd_limit_key(conn *c, const resp_command *cmd);
void cmd_limit_keydel(conn *c, const resp_command *cmd);

/* Module state of cmd_limit.c (lease handle generations per limit name). */
int cmd_limit_init(server *s);
void cmd_limit_free(server *s);
/* Records that the limit `name` was replaced or removed: its lease handles become stale. */
void cmd_limit_bump(server *s, const char *name);
/* Moves every lease handle generation to `base` (and bumps above it), so that no handle issued
 * before a restart matches one issued after it (a lease restored from the store keeps the
 * generation it was issued under as its tag, so its own handle still names it). Called once at
 * start, after recovery, with the server's clock in ns: it never goes back across restarts (floored
 * at the stored clock, see durable.h) and a run issues fewer generations than nanoseconds pass. */
void cmd_limit_rebase(server *s, uint64_t base);

/* The core limit that holds `key` of limit p, resolved as THROTTLE resolves it: the tier named
 * `tier` of a tiered limit (NULL when tier is NULL or names none of its tiers), else the key's
 * override's core when it has one, else the limit's own. NULL also when p no longer exists.
 * Valid until the limit is replaced or removed. */
sluice_limit *cmd_limit_key_core(server *s, const sluice_limit_policy *p, const char *tier,
                                 const char *key, size_t keylen);

/* Longest why text of a key's rate. */
#define CMD_RATE_WHY_LEN 200

/* One rate-limit key's rate now, as LIMIT.RATE and the admin API (/api/limits/NAME) show it. */
typedef struct cmd_key_rate {
    int64_t permits;            /* the effective rate now, per period */
    int64_t configured;         /* the configured rate, per period (permits <= configured) */
    int64_t period_ns;          /* the period both count in */
    int64_t since_ns;           /* the last decrease while permits < configured, else 0 */
    int adaptive;               /* 1: the rate follows the upstream's 429s (AIMD) */
    char why[CMD_RATE_WHY_LEN]; /* why the rate is what it is, a sentence */
} cmd_key_rate;

/* Fills *out with key's rate on core (from cmd_limit_key_core) at now_ns through
 * sluice_limit_key_rate. A read: changes nothing. Returns 0, or SLUICE_EINVAL (out zeroed) when
 * core is not a rate limit. */
int cmd_limit_key_rate(const sluice_limit *core, const char *key, size_t keylen, int64_t now_ns,
                       cmd_key_rate *out);

/* Fills *out for a key of rate limit def whose rate at now_ns is permits per period, lowered
 * last at since_ns (0 when at its configured rate): what cmd_limit_key_rate reads from a core,
 * a shared store's answer (rstore_rate) gives. */
void cmd_key_rate_explain(const sluice_limit_def *def, int64_t permits, int64_t since_ns,
                          int64_t now_ns, cmd_key_rate *out);

/* Writes LIMIT.RATE's reply for key: its rate, the configured one and why. */
void cmd_limit_rate_reply(conn *c, const char *key, size_t keylen, const cmd_key_rate *kr);

/* Reads lease handle arg (len bytes, as LEASE.ACQUIRE gave it) for TASK.ADD ... LEASE: returns 0
 * with the concurrency limit's name in limit (limitlen bytes; without a key override's "/=key"),
 * the core lease id in *id (0: a shadow limit's pass, which holds nothing) and the lease's tag
 * in *tag (the handle's generation: sluice_task_spec.lease_tag), or -1 when the handle is
 * malformed, its limit was replaced or removed since, or its id names another holder's lease
 * (a handle from before a restart whose lease was not restored). Whether the lease itself still
 * lives is the engine's to check. */
int cmd_lease_handle(server *s, const char *arg, size_t len, char *limit, size_t limitlen,
                     uint64_t *id, uint64_t *tag);

/* ---- Handlers (cmd_throttle.c: CL.THROTTLE) ---------------------------------------------- */
void cmd_cl_throttle(conn *c, const resp_command *cmd);
int cmd_cell_init(server *s);
void cmd_cell_free(server *s);
/* Forgets idle keys of the cached CL.THROTTLE limits (housekeeping). */
void cmd_cell_sweep(server *s, int64_t now_ns, size_t budget);
size_t cmd_cell_count(const server *s);

/* The reply of CL.THROTTLE, as redis-cell computes it. */
typedef struct cell_reply {
    int64_t limited;     /* 0 allowed, 1 limited */
    int64_t limit;       /* max_burst + 1 */
    int64_t remaining;   /* requests still allowed now */
    int64_t retry_after; /* seconds until the request would be allowed; -1 when allowed */
    int64_t reset_after; /* seconds until the bucket is full again */
} cell_reply;

/* Maps a sluice decision on a limit with burst = max_burst + 1 and emission interval t_ns to
 * the reply of redis-cell for `quantity` (0: the decision was a peek of 1 unit). Seconds are
 * rounded as redis-cell does: truncated, plus one when a millisecond part remains. Pure. */
void cell_map_decision(const sluice_decision *d, int64_t quantity, int64_t t_ns, cell_reply *out);

/* Writes CL.THROTTLE's reply r (five integers), counted in throttle_allowed / throttle_denied. */
void cell_write_reply(conn *c, const cell_reply *r);

/* The rate limit of a CL.THROTTLE triple (permits = count, period = period s, burst = max_burst +
 * 1; keys up to the server's max_key_len kept whole), validated. Returns 0, or SLUICE_EINVAL
 * with msg. */
int cell_def(const server *s, int64_t max_burst, int64_t count, int64_t period,
             sluice_limit_def *def, char *msg, size_t msglen);

/* Parses the feed id of a CL.THROTTLE triple, "!cell:MAX_BURST:COUNT:PERIOD" (decimal, no sign,
 * count and period >= 1). Returns 0, or -1 when id is not one. Pure. */
int cell_parse_id(const char *id, int64_t *max_burst, int64_t *count, int64_t *period);

/* ---- Handlers (cmd_task.c: TASK.*) -------------------------------------------------------- */
/* Besides the codes above they reply NOTASK (an id the engine does not know) and EXISTS (a task
 * key held by a running task, whose id the message gives as running_id=N). */
void cmd_task_add(conn *c, const resp_command *cmd);
void cmd_task_get(conn *c, const resp_command *cmd);
void cmd_task_ack(conn *c, const resp_command *cmd);
void cmd_task_fail(conn *c, const resp_command *cmd);
void cmd_task_cancel(conn *c, const resp_command *cmd);
void cmd_task_touch(conn *c, const resp_command *cmd);
void cmd_task_info(conn *c, const resp_command *cmd);
void cmd_task_explain(conn *c, const resp_command *cmd);
/* Module state of cmd_task.c (the deliveries buffer of TASK.GET), in server.task_state. */
int cmd_task_init(server *s);
void cmd_task_free(server *s);

/* ---- Handlers (cmd_recur.c: RECUR.*, cmd_debug.c: DEBUG) ---------------------------------- */
void cmd_recur_add(conn *c, const resp_command *cmd);
void cmd_recur_del(conn *c, const resp_command *cmd);
void cmd_recur_info(conn *c, const resp_command *cmd);
void cmd_debug(conn *c, const resp_command *cmd);

#endif
