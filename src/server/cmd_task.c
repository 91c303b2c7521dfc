/* SPDX-License-Identifier: MIT */
/*
 * The task commands, the wire face of the dispatch engine (include/sluice/engine.h):
 * TASK.ADD, TASK.GET, TASK.ACK, TASK.FAIL, TASK.CANCEL, TASK.TOUCH, TASK.INFO, TASK.EXPLAIN.
 *
 * TASK.GET hands out granted tasks only (the engine's poll gates them and parks the others), so
 * a worker never holds a task while waiting for budget. When nothing is grantable and the worker
 * gave a TIMEOUT, the client blocks holding nothing: only its wish (types and count) is kept.
 * Whenever work may have become grantable (a submit, an ack or fail releasing a concurrency slot,
 * an engine tick waking a parked key or taking back an expired lease) the server retries the
 * blocked clients at the end of the loop turn, oldest first, each polling for itself.
 *
 * Delivery is at least once: a worker that disappears while holding tasks keeps them until their
 * lease expires, and the engine then hands them to the next worker (attempt + 1). A blocked
 * client whose connection ended (EOF read) is handed nothing: its retry answers with the empty
 * reply at once, so its close can proceed, and it leaves the blocked list.
 *
 * With a redis store (rstore_active) the same commands, once their arguments are checked here
 * with the same words, go to the queue shared on Redis (rtasks.h) instead of the engine; the
 * engine still resolves a new task's chain (sluice_engine_resolve_task). TASK.EXPLAIN reads the
 * task from the store and peeks its chain there (rtasks_explain.c); TASK.ADD's LEASE names the
 * shared lease (add_shared_group), whose life the store checks.
 *
 * Module state (server.task_state): one array of TASK_MAX_COUNT deliveries, reused by every poll
 * (the loop is single-threaded and a poll's deliveries are written out before the next one).
 */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "server/commands.h"
#include "server/durable.h"
#include "server/rstore.h"
#include "server/rtasks.h"
#include "sluice/error.h"

/* Longest TASK.FAIL REASON. TASK.INFO shows its first 127 bytes. */
#define REASON_BUF 1024

/* Longest RETRY_AFTER a worker may pass on from an upstream: 30 days, past any real
 * Retry-After, and far from overflowing when turned into nanoseconds. */
#define MAX_RETRY_AFTER_MS (30LL * 24 * 3600 * 1000)
/* Most tasks one TASK.GET may take (COUNT), and the longest it may block (TIMEOUT, ms). */
#define TASK_MAX_COUNT      1000
#define TASK_MAX_TIMEOUT_MS INT64_C(2147483647)

typedef struct task_state {
    sluice_delivery deliveries[TASK_MAX_COUNT]; /* scratch of every poll */
} task_state;

/* What a blocked TASK.GET waits for; one allocation, the names copied behind the struct. */
typedef struct task_wait {
    size_t count;       /* tasks wanted, 1 to TASK_MAX_COUNT */
    size_t ntypes;      /* types wanted, at least 1 */
    const char **types; /* ntypes names, pointing behind the struct */
} task_wait;

int cmd_task_init(server *s)
{
    task_state *ts = alloc_calloc(1, sizeof(*ts));

    if (!ts)
        return SLUICE_ENOMEM;
    s->task_state = ts;
    return 0;
}

void cmd_task_free(server *s)
{
    alloc_free(s->task_state);
    s->task_state = NULL;
}

/* ---- Shared argument handling ------------------------------------------------------------ */

/* Checks a type name argument: 1 to COMMAND_NAME_BUF - 1 bytes, no NUL. Returns 0, or -1 after
 * replying WRONGARGS. */
static int type_arg(conn *c, const char *s, size_t len)
{
    if (len > 0 && len < COMMAND_NAME_BUF && !memchr(s, '\0', len))
        return 0;
    resp_error(conn_out(c), "WRONGARGS", "a task type name is 1 to %d bytes", COMMAND_NAME_BUF - 1);
    return -1;
}

/* Checks a key-like argument (KEY, ID) against max_key_len; replies WRONGARGS and returns -1
 * when it is too long or empty. */
static int key_arg(conn *c, const char *what, size_t len)
{
    size_t max = c->srv->opt.max_key_len;

    if (len > 0 && len <= max)
        return 0;
    resp_error(conn_out(c), "WRONGARGS", "%s of %zu bytes: it must be 1 to %zu bytes", what, len,
               max);
    return -1;
}

void reply_notask(conn *c, uint64_t id)
{
    resp_error(conn_out(c), "NOTASK",
               "no task %" PRIu64 " (it never existed, or finished long ago and was forgotten)",
               id);
}

void reply_task_refused(conn *c, uint64_t id, int64_t attempt, sluice_task_state state,
                        int running_attempt)
{
    if (attempt == 0)
        resp_error(conn_out(c), "NOLEASE",
                   "task %" PRIu64 " is %s, not running: no worker holds it (its lease expired, "
                   "or it was never delivered)",
                   id, sluice_task_state_name(state));
    /* Say what happened to that delivery: it never was, it was handed out again, or its lease
     * ran out and the task waits (or finished) without a worker. */
    else if (attempt > running_attempt)
        resp_error(conn_out(c), "NOLEASE",
                   "task %" PRIu64 " attempt %" PRId64 " is not running: it was never delivered "
                   "(the task is %s and was delivered %d time(s))",
                   id, attempt, sluice_task_state_name(state), running_attempt);
    else if (state == SLUICE_TASK_RUNNING)
        resp_error(conn_out(c), "NOLEASE",
                   "task %" PRIu64 " attempt %" PRId64 " is not running (the task is running at "
                   "attempt %d): that delivery's lease expired and the task was handed out again",
                   id, attempt, running_attempt);
    else
        resp_error(conn_out(c), "NOLEASE",
                   "task %" PRIu64 " attempt %" PRId64 " is not running (the task is %s at "
                   "attempt %d): that delivery is over",
                   id, attempt, sluice_task_state_name(state), running_attempt);
}

/* Replies to the failure of a call that needs a running task (ack, fail, touch): NOTASK, or
 * NOLEASE naming the state the task is in. */
static void reply_not_running(conn *c, int rc, uint64_t id)
{
    sluice_task_info ti;

    if (rc == SLUICE_ENOTFOUND)
        reply_notask(c, id);
    else if (rc == SLUICE_ESTATE && sluice_engine_task_info(c->srv->engine, id, &ti) == 0)
        reply_task_refused(c, id, 0, ti.state, ti.attempt);
    else
        reply_engine_error(c, rc, NULL);
}

/* A worker names the delivery it acts for with ATTEMPT n (the attempt TASK.GET gave it). A worker
 * whose lease expired while the task went to another worker must not ack, fail or touch that
 * other delivery: this refuses it with NOLEASE. Returns 0 when the call may go on (no ATTEMPT
 * given, or it is the running attempt), -1 after replying. */
static int attempt_check(conn *c, uint64_t id, int64_t attempt)
{
    sluice_task_info ti;

    if (attempt == 0)
        return 0;
    if (sluice_engine_task_info(c->srv->engine, id, &ti) != 0) {
        reply_notask(c, id);
        return -1;
    }
    if (ti.state == SLUICE_TASK_RUNNING && ti.attempt == attempt)
        return 0;
    reply_task_refused(c, id, attempt, ti.state, ti.attempt);
    return -1;
}

/* ---- TASK.ADD ---------------------------------------------------------------------------- */

/* TASK.ADD ... LEASE handle under a shared store: the handle is the shared lease's
 * ("NAME/ID/KEYHEX", rstore_parse_handle), checked as a single node checks its own (NOLEASE for
 * a handle that names no concurrency limit of this node, WRONGARGS for a shadow pass), then
 * rtasks_add_group checks the chain and the store the lease's life. */
static void add_shared_group(conn *c, const sluice_task_spec *spec, int64_t delay_ns,
                             const char *handle, size_t handlelen)
{
    char name[COMMAND_NAME_BUF];
    size_t keymax = c->srv->opt.max_key_len, keylen = 0;
    char *key = alloc_malloc(keymax + 1);
    const sluice_limit_policy *p;
    sluice_limit *live = NULL;
    rtasks_group g;
    uint64_t id = 0;

    if (!key) {
        resp_error(conn_out(c), "NOMEM", "out of memory");
        return;
    }
    if (rstore_parse_handle(handle, handlelen, name, sizeof(name), &id, key, keymax, &keylen) !=
            0 ||
        !(p = sluice_engine_get_limit(c->srv->engine, name, &live)) || !live || p->ntiers > 0 ||
        p->def.kind != SLUICE_CONCURRENCY) {
        resp_error(conn_out(c), "NOLEASE",
                   "no such lease (it expired, was released, its limit changed, the "
                   "server restarted, or it never existed)");
    } else if (id == 0) {
        resp_error(conn_out(c), "WRONGARGS",
                   "that lease is a shadow limit's pass and holds no unit: submit "
                   "without LEASE");
    } else {
        memset(&g, 0, sizeof(g));
        g.limit = name;
        g.id = id;
        g.key = key;
        g.keylen = keylen;
        rtasks_add_group(c, spec, delay_ns, &g);
    }
    alloc_free(key);
}

void cmd_task_add(conn *c, const resp_command *cmd)
{
    server *s = c->srv;
    sluice_task_spec spec;
    sluice_submit_error err;
    char lease_limit[COMMAND_NAME_BUF];
    const char *handle = NULL;
    size_t handlelen = 0;
    int64_t v, delay_ms = 0;
    uint64_t id;
    int rc;

    memset(&spec, 0, sizeof(spec));
    for (size_t i = 3; i < cmd->argc; i += 2) {
        const char *a = cmd->argv[i], *val = i + 1 < cmd->argc ? cmd->argv[i + 1] : NULL;
        size_t alen = cmd->argvlen[i], vlen = val ? cmd->argvlen[i + 1] : 0;

        if (!val)
            goto syntax;
        if (command_arg_is(a, alen, "key")) {
            if (key_arg(c, "KEY", vlen) != 0)
                return;
            spec.key = val;
            spec.key_len = vlen;
        } else if (command_arg_is(a, alen, "units")) {
            if (command_int_arg(c, "UNITS", val, vlen, 1, SLUICE_MAX_PERMITS, &spec.units) != 0)
                return;
        } else if (command_arg_is(a, alen, "priority")) {
            if (command_int_arg(c, "PRIORITY", val, vlen, INT_MIN, INT_MAX, &v) != 0)
                return;
            spec.has_priority = 1;
            spec.priority = (int)v;
        } else if (command_arg_is(a, alen, "id")) {
            if (key_arg(c, "ID", vlen) != 0)
                return;
            spec.task_key = val;
            spec.task_key_len = vlen;
        } else if (command_arg_is(a, alen, "lease")) {
            if (rstore_active(s)) {
                /* The shared lease's handle: read below, with the store's checks. */
                handle = val;
                handlelen = vlen;
                continue;
            }
            /* A group slot: the task runs under its producer's lease (docs/limits.md). */
            if (cmd_lease_handle(s, val, vlen, lease_limit, sizeof(lease_limit), &spec.lease_id,
                                 &spec.lease_tag) != 0) {
                resp_error(conn_out(c), "NOLEASE",
                           "no such lease (it expired, was released, its limit changed, the "
                           "server restarted, or it never existed)");
                return;
            }
            if (spec.lease_id == 0) {
                resp_error(conn_out(c), "WRONGARGS",
                           "that lease is a shadow limit's pass and holds no unit: submit "
                           "without LEASE");
                return;
            }
            spec.lease_limit = lease_limit;
        } else if (command_arg_is(a, alen, "delay")) {
            if (command_int_arg(c, "DELAY", val, vlen, 0, SLUICE_MAX_PERIOD_NS / SLUICE_NS_PER_MS,
                                &delay_ms) != 0)
                return;
        } else {
            goto syntax;
        }
    }
    if (type_arg(c, cmd->argv[1], cmd->argvlen[1]) != 0)
        return;
    if (cmd->argvlen[2] > s->opt.max_payload_len) {
        resp_error(conn_out(c), "WRONGARGS",
                   "payload of %zu bytes is longer than the maximum of %zu", cmd->argvlen[2],
                   s->opt.max_payload_len);
        return;
    }
    spec.type = cmd->argv[1]; /* NUL-terminated by the reader, and holds no NUL */
    spec.payload = cmd->argv[2];
    spec.payload_len = cmd->argvlen[2];
    if (rstore_active(s)) {
        /* The shared queue: resolved here as the engine would, decided in the store. */
        if (handle)
            add_shared_group(c, &spec, delay_ms * SLUICE_NS_PER_MS, handle, handlelen);
        else
            rtasks_add(c, &spec, delay_ms * SLUICE_NS_PER_MS);
        return;
    }
    if (delay_ms > 0)
        spec.not_before_ns = server_now(s) + delay_ms * SLUICE_NS_PER_MS;
    rc = sluice_engine_submit(s->engine, &spec, server_now(s), &id, &err);
    if (rc == SLUICE_EEXIST) {
        resp_error(conn_out(c), "EXISTS",
                   "running_id=%" PRIu64 " the task key is held by running task %" PRIu64
                   "; it can be submitted again once that task finishes",
                   err.existing_id, err.existing_id);
        return;
    }
    if (rc != 0) {
        reply_engine_error(c, rc, err.message);
        return;
    }
    /* Work for a blocked worker, or a new timer (DELAY). */
    server_signal_ready(s);
    if (delay_ms > 0)
        server_engine_changed(s);
    resp_int(conn_out(c), (int64_t)id);
    return;

syntax:
    resp_error(conn_out(c), "WRONGARGS",
               "syntax error: TASK.ADD type payload [KEY k] [UNITS n] [PRIORITY p] "
               "[ID taskkey] [DELAY ms] [LEASE handle]");
}

/* ---- TASK.GET ---------------------------------------------------------------------------- */

/* One delivered task: [id, type, payload, attempt, lease_until_ms] in RESP2, a map of the same
 * names in RESP3. */
static void reply_delivery(resp_writer *w, const sluice_delivery *d)
{
    write_delivery(w, d, strlen(d->type));
}

void write_delivery(resp_writer *w, const sluice_delivery *d, size_t typelen)
{
    int map = w->proto >= 3;

    if (map)
        resp_map(w, 5);
    else
        resp_array(w, 5);
    if (map)
        resp_bulk_str(w, "id");
    resp_int(w, (int64_t)d->id);
    if (map)
        resp_bulk_str(w, "type");
    resp_bulk(w, d->type, typelen);
    if (map)
        resp_bulk_str(w, "payload");
    resp_bulk(w, d->payload, d->payload_len);
    if (map)
        resp_bulk_str(w, "attempt");
    resp_int(w, d->attempt);
    if (map)
        resp_bulk_str(w, "lease_until_ms");
    resp_int(w, command_time_ms(d->lease_until_ns));
}

/* Polls for up to count tasks of the types and replies with them when there are any. Returns
 * the number delivered (replied), 0 (nothing grantable: no reply), or a negative code (an
 * error was replied). */
static int poll_reply(conn *c, const char *const *types, size_t ntypes, size_t count)
{
    server *s = c->srv;
    task_state *ts = s->task_state;
    int n = sluice_engine_poll(s->engine, types, ntypes, count, server_now(s), ts->deliveries);

    if (n < 0) {
        reply_engine_error(c, n, NULL);
        return n;
    }
    if (n == 0)
        return 0;
    resp_array(conn_out(c), (size_t)n);
    for (int i = 0; i < n; i++)
        reply_delivery(conn_out(c), &ts->deliveries[i]);
    return n;
}

/* The largest id of the n tasks poll_reply delivered. */
static uint64_t max_delivered(const server *s, int n)
{
    const task_state *ts = s->task_state;
    uint64_t max_id = 0;

    for (int k = 0; k < n; k++)
        if (ts->deliveries[k].id > max_id)
            max_id = ts->deliveries[k].id;
    return max_id;
}

static void get_timeout(conn *c, void *arg)
{
    resp_array(conn_out(c), 0);
    conn_unblock(c);
    alloc_free(arg);
}

static int get_retry(conn *c, void *arg)
{
    task_wait *w = arg;
    size_t mark = conn_out(c)->len;
    int n;

    if (c->flags & (CONN_EOF | CONN_CLOSE_AFTER_REPLY | CONN_CLOSING)) {
        /* Gone, or going: a task handed out now would only wait for its lease to expire. */
        get_timeout(c, arg);
        return 1;
    }
    n = poll_reply(c, w->types, w->ntypes, w->count);
    if (n == 0)
        return 0;
    if (n > 0)
        durable_delivered_unblocked(c, mark, max_delivered(c->srv, n));
    conn_unblock(c);
    alloc_free(w);
    return 1;
}

static void get_cancel(conn *c, void *arg)
{
    (void)c;
    alloc_free(arg);
}

static const conn_block_ops get_ops = {get_retry, get_timeout, get_cancel, 0};

/* Copies what a TASK.GET waits for (argv[1 .. 1 + ntypes)) into one allocation. Returns NULL
 * when out of memory. */
static task_wait *wait_new(const resp_command *cmd, size_t ntypes, size_t count)
{
    size_t len = sizeof(task_wait) + ntypes * sizeof(char *);
    task_wait *w;
    char *p;

    for (size_t i = 1; i <= ntypes; i++)
        len += cmd->argvlen[i] + 1;
    w = alloc_malloc(len);
    if (!w)
        return NULL;
    w->count = count;
    w->ntypes = ntypes;
    w->types = (const char **)(void *)(w + 1);
    p = (char *)(w->types + ntypes);
    for (size_t i = 0; i < ntypes; i++) {
        memcpy(p, cmd->argv[i + 1], cmd->argvlen[i + 1]);
        p[cmd->argvlen[i + 1]] = '\0';
        w->types[i] = p;
        p += cmd->argvlen[i + 1] + 1;
    }
    return w;
}

void cmd_task_get(conn *c, const resp_command *cmd)
{
    size_t ntypes = 1, i;
    int64_t count = 1, timeout_ms = 0;
    task_wait *w;
    int n;

    /* Types first (the first argument always is one), then COUNT and TIMEOUT options. */
    while (1 + ntypes < cmd->argc &&
           !command_arg_is(cmd->argv[1 + ntypes], cmd->argvlen[1 + ntypes], "count") &&
           !command_arg_is(cmd->argv[1 + ntypes], cmd->argvlen[1 + ntypes], "timeout"))
        ntypes++;
    for (i = 1 + ntypes; i < cmd->argc; i += 2) {
        const char *a = cmd->argv[i];
        size_t alen = cmd->argvlen[i];

        if (i + 1 >= cmd->argc) {
            goto syntax;
        } else if (command_arg_is(a, alen, "count")) {
            if (command_int_arg(c, "COUNT", cmd->argv[i + 1], cmd->argvlen[i + 1], 1,
                                TASK_MAX_COUNT, &count) != 0)
                return;
        } else if (command_arg_is(a, alen, "timeout")) {
            if (command_int_arg(c, "TIMEOUT", cmd->argv[i + 1], cmd->argvlen[i + 1], 0,
                                TASK_MAX_TIMEOUT_MS, &timeout_ms) != 0)
                return;
        } else {
            goto syntax;
        }
    }
    for (i = 1; i <= ntypes; i++) {
        if (type_arg(c, cmd->argv[i], cmd->argvlen[i]) != 0)
            return;
    }
    /* Reader arguments are NUL-terminated: argv + 1 is an array of type names as it stands. */
    if (rstore_active(c->srv)) {
        rtasks_get(c, cmd->argv + 1, ntypes, (size_t)count, timeout_ms);
        return;
    }
    n = poll_reply(c, cmd->argv + 1, ntypes, (size_t)count);
    if (n > 0)
        durable_delivered(c->srv, max_delivered(c->srv, n));
    if (n != 0)
        return;
    if (timeout_ms == 0) {
        resp_array(conn_out(c), 0);
        return;
    }
    w = wait_new(cmd, ntypes, (size_t)count);
    if (!w) {
        resp_error(conn_out(c), "NOMEM", "out of memory");
        return;
    }
    if (conn_block(c, timeout_ms, &get_ops, w) != 0) {
        alloc_free(w);
        resp_array(conn_out(c), 0);
    }
    return;

syntax:
    resp_error(conn_out(c), "WRONGARGS",
               "syntax error: TASK.GET type [type ...] [COUNT n] [TIMEOUT ms]");
}

/* ---- TASK.ACK, TASK.FAIL, TASK.CANCEL, TASK.TOUCH ----------------------------------------- */

void cmd_task_ack(conn *c, const resp_command *cmd)
{
    server *s = c->srv;
    uint64_t id;
    int64_t cost = -1, attempt = 0;
    int rc;

    for (size_t i = 2; i < cmd->argc; i += 2) {
        const char *a = cmd->argv[i];
        size_t alen = cmd->argvlen[i];

        if (i + 1 < cmd->argc && command_arg_is(a, alen, "cost")) {
            if (command_int_arg(c, "COST", cmd->argv[i + 1], cmd->argvlen[i + 1], 0,
                                SLUICE_MAX_PERMITS, &cost) != 0)
                return;
        } else if (i + 1 < cmd->argc && command_arg_is(a, alen, "attempt")) {
            if (command_int_arg(c, "ATTEMPT", cmd->argv[i + 1], cmd->argvlen[i + 1], 1, INT32_MAX,
                                &attempt) != 0)
                return;
        } else {
            resp_error(conn_out(c), "WRONGARGS", "syntax error: TASK.ACK id [COST n] [ATTEMPT n]");
            return;
        }
    }
    if (command_id_arg(c, cmd->argv[1], cmd->argvlen[1], &id) != 0)
        return;
    if (rstore_active(s)) {
        rtask_done d = {.id = id, .attempt = attempt, .cost = cost, .retry_after_ns = -1};

        rtasks_done(c, RTASK_ACK, &d);
        return;
    }
    if (attempt_check(c, id, attempt) != 0)
        return;
    rc = sluice_engine_ack(s->engine, id, cost, server_now(s));
    if (rc != 0) {
        reply_not_running(c, rc, id);
        return;
    }
    /* Its concurrency slots are free and a settled cost may give budget back. */
    server_signal_ready(s);
    server_engine_changed(s);
    resp_simple(conn_out(c), "OK");
}

void cmd_task_fail(conn *c, const resp_command *cmd)
{
    server *s = c->srv;
    char reason[REASON_BUF];
    sluice_task_info ti;
    sluice_fail_mode mode = SLUICE_FAIL_MODE_RETRY;
    int has_reason = 0;
    int64_t attempt = 0, retry_after_ms = -1;
    uint64_t id;
    int rc;

    for (size_t i = 2; i < cmd->argc; i++) {
        const char *a = cmd->argv[i];
        size_t alen = cmd->argvlen[i];

        if (command_arg_is(a, alen, "retry_after") && i + 1 < cmd->argc) {
            if (command_int_arg(c, "RETRY_AFTER", cmd->argv[i + 1], cmd->argvlen[i + 1], 0,
                                MAX_RETRY_AFTER_MS, &retry_after_ms) != 0)
                return;
            i++;
        } else if (command_arg_is(a, alen, "retry")) {
            mode = SLUICE_FAIL_MODE_RETRY;
        } else if (command_arg_is(a, alen, "dead")) {
            mode = SLUICE_FAIL_MODE_DEAD;
        } else if (command_arg_is(a, alen, "reason") && i + 1 < cmd->argc) {
            if (command_arg_str(cmd->argv[i + 1], cmd->argvlen[i + 1], reason, sizeof(reason)) !=
                0) {
                resp_error(conn_out(c), "WRONGARGS",
                           "REASON is at most %d bytes and holds no NUL byte", REASON_BUF - 1);
                return;
            }
            has_reason = 1;
            i++;
        } else if (command_arg_is(a, alen, "attempt") && i + 1 < cmd->argc) {
            if (command_int_arg(c, "ATTEMPT", cmd->argv[i + 1], cmd->argvlen[i + 1], 1, INT32_MAX,
                                &attempt) != 0)
                return;
            i++;
        } else {
            resp_error(conn_out(c), "WRONGARGS",
                       "syntax error: TASK.FAIL id [RETRY|DEAD] [RETRY_AFTER ms] [REASON text] "
                       "[ATTEMPT n]");
            return;
        }
    }
    if (retry_after_ms >= 0 && mode == SLUICE_FAIL_MODE_DEAD) {
        resp_error(conn_out(c), "WRONGARGS",
                   "RETRY_AFTER retries the task: it cannot go with DEAD");
        return;
    }
    if (command_id_arg(c, cmd->argv[1], cmd->argvlen[1], &id) != 0)
        return;
    if (rstore_active(s)) {
        rtask_done d = {.id = id,
                        .attempt = attempt,
                        .cost = -1,
                        .mode = mode,
                        .retry_after_ns =
                            retry_after_ms >= 0 ? retry_after_ms * SLUICE_NS_PER_MS : -1,
                        .message = has_reason ? reason : NULL,
                        .message_len = has_reason ? strlen(reason) : 0};

        rtasks_done(c, RTASK_FAIL, &d);
        return;
    }
    if (attempt_check(c, id, attempt) != 0)
        return;
    if (retry_after_ms >= 0)
        rc = sluice_engine_fail_retry_after(s->engine, id, retry_after_ms * SLUICE_NS_PER_MS,
                                            has_reason ? reason : NULL, server_now(s));
    else
        rc = sluice_engine_fail(s->engine, id, mode, has_reason ? reason : NULL, server_now(s));
    if (rc != 0) {
        reply_not_running(c, rc, id);
        return;
    }
    server_signal_ready(s);
    server_engine_changed(s); /* the retry's backoff timer */
    if (sluice_engine_task_info(s->engine, id, &ti) == 0)
        resp_bulk_str(conn_out(c), sluice_task_state_name(ti.state));
    else
        resp_bulk_str(conn_out(c), "failed"); /* finished and already forgotten */
}

void cmd_task_cancel(conn *c, const resp_command *cmd)
{
    server *s = c->srv;
    sluice_task_info ti;
    uint64_t id;
    int rc;

    if (command_id_arg(c, cmd->argv[1], cmd->argvlen[1], &id) != 0)
        return;
    if (rstore_active(s)) {
        rtask_done d = {.id = id, .cost = -1, .retry_after_ns = -1};

        rtasks_done(c, RTASK_CANCEL, &d);
        return;
    }
    rc = sluice_engine_cancel(s->engine, id, server_now(s));
    if (rc == 0) {
        /* A parked task gone may let a less urgent one on its key through. */
        server_signal_ready(s);
        server_engine_changed(s);
        resp_int(conn_out(c), 1);
    } else if (rc == SLUICE_ENOTFOUND) {
        reply_notask(c, id);
    } else if (rc == SLUICE_ESTATE && sluice_engine_task_info(s->engine, id, &ti) == 0) {
        if (ti.state == SLUICE_TASK_RUNNING)
            resp_error(conn_out(c), "INUSE",
                       "task %" PRIu64 " is running: a worker holds it; it can be cancelled only "
                       "while queued or parked",
                       id);
        else
            resp_int(conn_out(c), 0); /* already finished: nothing to cancel */
    } else {
        reply_engine_error(c, rc, NULL);
    }
}

void cmd_task_touch(conn *c, const resp_command *cmd)
{
    server *s = c->srv;
    int64_t until = 0, attempt = 0;
    uint64_t id;
    int rc;

    if (cmd->argc != 2 &&
        (cmd->argc != 4 || !command_arg_is(cmd->argv[2], cmd->argvlen[2], "attempt"))) {
        resp_error(conn_out(c), "WRONGARGS", "syntax error: TASK.TOUCH id [ATTEMPT n]");
        return;
    }
    if (cmd->argc == 4 &&
        command_int_arg(c, "ATTEMPT", cmd->argv[3], cmd->argvlen[3], 1, INT32_MAX, &attempt) != 0)
        return;
    if (command_id_arg(c, cmd->argv[1], cmd->argvlen[1], &id) != 0)
        return;
    if (rstore_active(s)) {
        rtask_done d = {.id = id, .attempt = attempt, .cost = -1, .retry_after_ns = -1};

        rtasks_done(c, RTASK_TOUCH, &d);
        return;
    }
    if (attempt_check(c, id, attempt) != 0)
        return;
    rc = sluice_engine_touch(s->engine, id, server_now(s), &until);
    if (rc != 0) {
        reply_not_running(c, rc, id);
        return;
    }
    server_engine_changed(s);
    resp_int(conn_out(c), command_time_ms(until));
}

/* ---- TASK.INFO, TASK.EXPLAIN ------------------------------------------------------------- */

void cmd_task_info(conn *c, const resp_command *cmd)
{
    resp_writer *w = conn_out(c);
    sluice_task_info ti;
    const sluice_denial *d = &ti.failure;
    uint64_t id;
    int failed, by_limit;

    if (command_id_arg(c, cmd->argv[1], cmd->argvlen[1], &id) != 0)
        return;
    if (rstore_active(c->srv)) {
        rtask_done rd = {.id = id, .cost = -1, .retry_after_ns = -1};

        rtasks_done(c, RTASK_INFO, &rd);
        return;
    }
    if (sluice_engine_task_info(c->srv->engine, id, &ti) != 0) {
        reply_notask(c, id);
        return;
    }
    failed = ti.state == SLUICE_TASK_FAILED;
    by_limit = failed && d->limit != NULL;
    resp_map(w, 22);
    resp_field_int(w, "id", 1, (int64_t)ti.id);
    resp_field_str(w, "state", sluice_task_state_name(ti.state));
    resp_field_str(w, "type", ti.type);
    resp_bulk_str(w, "payload");
    resp_bulk(w, ti.payload, ti.payload_len);
    resp_field_str(w, "task_key", ti.task_key);
    resp_field_int(w, "priority", 1, ti.priority);
    resp_field_int(w, "units", 1, ti.units);
    resp_field_int(w, "attempt", 1, ti.attempt);
    resp_field_int(w, "submitted_ms", 1, command_time_ms(ti.submitted_ns));
    resp_field_int(w, "not_before_ms", 1, command_time_ms(ti.not_before_ns));
    resp_field_int(w, "lease_until_ms", ti.state == SLUICE_TASK_RUNNING,
                   command_time_ms(ti.lease_until_ns));
    resp_field_str(w, "fail_reason", failed ? sluice_fail_reason_name(d->reason) : NULL);
    resp_field_str(w, "fail_message", failed ? ti.fail_message : NULL);
    /* The denial, as seed 004 names its fields, when a limit failed the task. */
    resp_field_str(w, "limit", by_limit ? d->limit : NULL);
    resp_field_str(w, "kind", by_limit ? d->kind : NULL);
    resp_field_str(w, "tier", by_limit ? d->tier : NULL);
    resp_field_str(w, "key", by_limit ? d->key : NULL);
    resp_field_int(w, "limit_value", by_limit, d->limit_value);
    resp_field_int(w, "window_ms", by_limit, d->window_ns / SLUICE_NS_PER_MS);
    resp_field_int(w, "retry_after_ms", by_limit, command_ns_to_ms(d->retry_after_ns));
    /* A quota's figures, as seed 004's spawn error gives them (current + attempted > limit). */
    resp_field_int(w, "current", by_limit && d->attempted, d->current);
    resp_field_int(w, "attempted", by_limit && d->attempted, d->attempted);
}

void cmd_task_explain(conn *c, const resp_command *cmd)
{
    server *s = c->srv;
    resp_writer *w = conn_out(c);
    sluice_explanation ex;
    uint64_t id;
    int parked;

    if (command_id_arg(c, cmd->argv[1], cmd->argvlen[1], &id) != 0)
        return;
    if (rstore_active(s)) {
        rtasks_explain(c, id);
        return;
    }
    if (sluice_engine_explain(s->engine, id, server_now(s), &ex) != 0) {
        reply_notask(c, id);
        return;
    }
    parked = ex.state == SLUICE_TASK_PARKED;
    resp_map(w, 8);
    resp_field_str(w, "state", sluice_task_state_name(ex.state));
    resp_field_str(w, "limit", parked ? ex.limit : NULL);
    resp_field_str(w, "key", parked ? ex.key : NULL);
    resp_field_int(w, "position", parked, (int64_t)ex.position);
    resp_field_int(w, "queue_length", parked, (int64_t)ex.queue_length);
    resp_field_int(w, "wake_ms", parked, command_time_ms(ex.wake_ns));
    resp_field_int(w, "estimated_start_ms", ex.estimated_start_ns != 0,
                   command_time_ms(ex.estimated_start_ns));
    resp_field_str(w, "text", ex.text);
}
