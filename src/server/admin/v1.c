/* SPDX-License-Identifier: MIT */
/*
 * The HTTP decision API on the admin port, for callers that do not speak RESP:
 *
 *   POST /v1/throttle             {"limit", "key", "units", "peek", "tier"}  -> THROTTLE
 *   POST /v1/tasks                {"type", "payload", "key", "units", "priority", "id",
 *                                  "delay_ms"}                                -> TASK.ADD
 *   GET  /v1/tasks/{id}/explain                                               -> the explanation
 *
 * There is no second implementation of anything: a JSON body becomes the arguments of the RESP
 * command, which runs through the command table (commands_run_detached) exactly as a client's
 * would, and its RESP reply becomes the HTTP answer. Its error word picks the status
 * (admin_v1_status: WRONGARGS 400, NOLIMIT/NOTASK 404, EXISTS 409, BUSY/NOMEM/IOERR 503, a
 * shared store's STOREDOWN 503 and NOTSHARED 501), a denial is 429 with Retry-After and seed
 * 004's JSON error body (admin_v1_denial_json), and a decision's figures also go out as
 * RateLimit-* headers. An explain on a shared store runs TASK.EXPLAIN, whose map becomes the
 * embedded store's explanation object.
 *
 * Durability: a submit is answered only once its task is durable, as TASK.ADD's reply is. When
 * the command moved the change feed (durable_changes) the connection is suspended in MHD and
 * parked on a->v1_waiting with durable_wait; the commit's completion resumes it and the reply
 * (or 503 when the commit failed) is queued on MHD's next call.
 *
 * Shared stores (docs/cluster.md): each request runs its command on a detached client of its
 * own (conn_detached_new), so its reply is exactly its command's. Under a shared store the
 * reply comes once the store answered (a deferred slot, or TASK.EXPLAIN's block): the
 * connection is suspended and parked on a->v1_waiting (V1_STORE) until the detached client's
 * done callback, at the end of the loop turn that completed it, takes the reply, frees the
 * client and resumes the connection. A suspended connection cannot go away under us (MHD notices
 * a client that left only once resumed), and every store call is answered within the store's
 * timeout (-STOREDOWN otherwise, 503 here), so a request waits no longer than that.
 *
 * admin_v1_stop answers every parked request with 503 SHUTDOWN before MHD stops (a stopped MHD
 * must hold no suspended connection); a request waiting for the store has its detached client
 * freed, which forgets its place in the store's batches (the store may still apply the command).
 *
 * The pure helpers (reading the RESP reply back, the status map, the 429 body) are in
 * v1_reply.c.
 *
 * Bounds: a body is buffered up to its route's maximum (413 past it, and at once when the
 * Content-Length says so), and all bodies being received together up to ADMIN_V1_BODY_TOTAL
 * (503 past it). A request without the password is refused (401) before its body is read.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "server/admin/admin_impl.h"
#include "server/commands.h"
#include "server/durable.h"
#include "server/log.h"
#include "server/rstore.h"
#include "sluice/error.h"

/* Bytes of a throttle body beyond the key (names, numbers, white space). */
#define V1_THROTTLE_SLACK ((size_t)16 << 10)
/* Bytes of a task body beyond the payload. */
#define V1_TASK_SLACK ((size_t)64 << 10)
/* Body of a GET (none is expected; a small one is read and dropped). */
#define V1_GET_BODY ((size_t)4 << 10)
/* Bytes of a body past its bound read and dropped, so that the 413 reaches the client (MHD
 * answers only once the request is whole); past them the connection is closed. */
#define V1_DISCARD_MAX ((size_t)4 << 20)
/* Values of one RESP reply read back (THROTTLE's has 6; TASK.EXPLAIN's map, 8 fields, 16). */
#define V1_REPLY_VALUES 16

typedef enum v1_route {
    V1_NONE = 0,
    V1_THROTTLE,
    V1_TASKS,
    V1_EXPLAIN,
    V1_SPEND, /* GET /api/limits/{name}/spend on a shared store (admin_v1_spend) */
} v1_route;

typedef enum v1_state {
    V1_READING = 0, /* headers seen, the body arriving */
    V1_WAITING,     /* suspended until its commit */
    V1_STORE,       /* suspended until the shared store answered its command */
    V1_DONE,        /* resumed: the reply (or the failure) is ready to queue */
} v1_state;

struct admin_v1_req {
    admin *a;
    struct MHD_Connection *conn;
    v1_route route;
    v1_state state;
    uint64_t id;               /* V1_EXPLAIN: the task */
    char *body;                /* alloc_malloc, NUL-terminated; NULL before the first byte */
    size_t len, cap;           /* body bytes and its allocation */
    size_t max;                /* the route's body bound */
    unsigned refused;          /* 413 or 503 (the status to answer): the body is dropped */
    size_t dropped;            /* bytes dropped since */
    resp_writer reply;         /* V1_WAITING/V1_DONE: the command's reply */
    conn *vc;                  /* V1_STORE: the detached client its command runs on (owned) */
    json_t *json;              /* the body parsed, kept until the answer (name and key are in it) */
    const char *name, *key;    /* V1_THROTTLE: as asked, in json ("" for no key) */
    size_t keylen;             /* V1_THROTTLE */
    int peek;                  /* V1_THROTTLE */
    char *spend_args;          /* V1_SPEND: name, key and tier, each NUL-terminated (owned) */
    const char *spend_tier;    /* V1_SPEND: in spend_args, NULL for none */
    char failure[256];         /* V1_DONE: the commit's error, "" when durable */
    int shutdown;              /* V1_DONE: answered early, the admin port is stopping */
    admin_v1_req *prev, *next; /* a->v1_waiting while V1_WAITING or V1_STORE */
};

/* ---- Replies ----------------------------------------------------------------------------- */

/* Queues seed 004's error shape: {"status": "failed", "error": title, "error_type", "code",
 * "details": {"message"}, "help"}, with an optional Allow or Retry-After header. */
static enum MHD_Result reply_failed(struct MHD_Connection *c, unsigned status, const char *type,
                                    const char *title, const char *code, const char *message,
                                    const char *help, const char *hname, const char *hvalue)
{
    json_t *doc =
        json_pack("{s:s, s:s, s:s, s:s, s:{s:s}, s:s}", "status", "failed", "error", title,
                  "error_type", type, "code", code, "details", "message", message, "help", help);

    return admin_reply_json_header(c, status, doc, hname, hvalue);
}

static enum MHD_Result reply_bad(struct MHD_Connection *c, const char *message)
{
    return reply_failed(c, MHD_HTTP_BAD_REQUEST, "ValidationError", "Invalid request", "BADREQUEST",
                        message, "Fix the request body (docs/http.md)", NULL, NULL);
}

/* Answers the RESP error reply of a command (err: "WORD message", len bytes). */
static enum MHD_Result reply_resp_error(struct MHD_Connection *c, const char *err, size_t len)
{
    const char *sp = memchr(err, ' ', len);
    size_t wlen = sp ? (size_t)(sp - err) : len;
    const char *type, *title, *help;
    char word[32], msg[1024];
    unsigned status = admin_v1_status(err, wlen, &type, &title);

    snprintf(word, sizeof word, "%.*s", (int)(wlen < 31 ? wlen : 31), err);
    if (sp)
        snprintf(msg, sizeof msg, "%.*s", (int)(len - wlen - 1 < 1000 ? len - wlen - 1 : 1000),
                 sp + 1);
    else
        msg[0] = '\0';
    switch (status) {
    case 400:
        help = "Fix the request (docs/http.md, docs/commands.md)";
        break;
    case 404:
        help = "Check the name or id (GET /api/limits lists the limits)";
        break;
    case 409:
        help = "Wait for the running task to finish, or use another task key";
        break;
    case 503:
        help = "Back off and retry; a submit with an \"id\" (task key) is safe to repeat";
        break;
    default:
        help = "See the server's log";
        break;
    }
    return reply_failed(c, status, type, title, word, msg, help,
                        status == 503 ? MHD_HTTP_HEADER_RETRY_AFTER : NULL, "1");
}

/* ---- Running a command ------------------------------------------------------------------- */

static void waiting_link(admin_v1_req *r)
{
    r->prev = NULL;
    r->next = r->a->v1_waiting;
    if (r->next)
        r->next->prev = r;
    r->a->v1_waiting = r;
}

static void waiting_unlink(admin_v1_req *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        r->a->v1_waiting = r->next;
    if (r->next)
        r->next->prev = r->prev;
    r->prev = r->next = NULL;
}

/* Moves the reply of detached client vc into r->reply and frees vc. A client closed before its
 * reply was whole (out of memory for it) leaves a NOMEM error instead. */
static void take_reply(admin_v1_req *r, conn *vc)
{
    resp_writer_clear(&r->reply);
    if (vc->flags & CONN_CLOSING) {
        resp_writer_init(&r->reply, 2);
        resp_error(&r->reply, "NOMEM", "out of memory for the reply");
    } else {
        r->reply = *conn_out(vc);
        resp_writer_init(conn_out(vc), 2);
    }
    conn_detached_free(vc);
    if (r->vc == vc)
        r->vc = NULL;
}

/* The done callback of a request's detached client (conn.h): the store answered its command
 * (at the end of a loop turn, outside MHD): the reply is taken and the connection resumed. */
static void on_store(conn *vc, void *arg)
{
    admin_v1_req *r = arg;

    if (r->state != V1_STORE || r->vc != vc)
        return; /* not suspended yet: run() takes the reply itself */
    take_reply(r, vc);
    waiting_unlink(r);
    r->state = V1_DONE;
    MHD_resume_connection(r->conn);
    admin_kick(r->a);
}

/* Runs argv (n arguments) as a command on a detached client of r's own. Returns 1 when its
 * reply is in r->reply (initialised here, cleared by admin_v1_free), 0 when the shared store
 * answers it later: r->vc holds the client, and the caller suspends the request
 * (suspend_for_store). */
static int run(admin_v1_req *r, const char **argv, const size_t *argvlen, size_t n)
{
    resp_command cmd = {n, argv, argvlen};
    conn *vc;

    resp_writer_clear(&r->reply);
    resp_writer_init(&r->reply, 2);
    if (conn_detached_new(r->a->srv, on_store, r, &vc) != 0) {
        r->reply.failed = 1;
        return 1;
    }
    if (!commands_run_detached(vc, &cmd)) {
        r->vc = vc;
        return 0;
    }
    take_reply(r, vc);
    return 1;
}

/* Suspends the request until the store answers its command (on_store resumes it). */
static enum MHD_Result suspend_for_store(admin_v1_req *r)
{
    r->state = V1_STORE;
    waiting_link(r);
    MHD_suspend_connection(r->conn);
    return MHD_YES;
}

/* A string member of a body: NULL when absent; -1 (after replying) when of another type. */
static int opt_string(struct MHD_Connection *c, json_t *body, const char *name, const char **s,
                      size_t *len, enum MHD_Result *rc)
{
    json_t *v = json_object_get(body, name);
    char msg[128];

    *s = NULL;
    *len = 0;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v)) {
        snprintf(msg, sizeof msg, "\"%s\" must be a string", name);
        *rc = reply_bad(c, msg);
        return -1;
    }
    *s = json_string_value(v);
    *len = json_string_length(v);
    return 0;
}

/* An integer member as decimal text in buf: "" when absent; -1 (after replying) when not an
 * integer. The command checks its range. */
static int opt_int(struct MHD_Connection *c, json_t *body, const char *name, char *buf,
                   size_t buflen, enum MHD_Result *rc)
{
    json_t *v = json_object_get(body, name);
    char msg[128];

    buf[0] = '\0';
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v)) {
        snprintf(msg, sizeof msg, "\"%s\" must be an integer", name);
        *rc = reply_bad(c, msg);
        return -1;
    }
    snprintf(buf, buflen, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    return 0;
}

/* Refuses members other than the allowed ones (a misspelt "unit" must not be ignored). */
static int only_members(struct MHD_Connection *c, json_t *body, const char *const *allowed,
                        enum MHD_Result *rc)
{
    const char *k;
    json_t *v;

    json_object_foreach(body, k, v)
    {
        size_t i;
        char msg[200];

        for (i = 0; allowed[i]; i++)
            if (strcmp(allowed[i], k) == 0)
                break;
        if (!allowed[i]) {
            snprintf(msg, sizeof msg, "unknown member \"%.64s\"", k);
            *rc = reply_bad(c, msg);
            return -1;
        }
    }
    return 0;
}

/* Parses the body as a JSON object. NULL after replying. */
static json_t *body_object(admin_v1_req *r, enum MHD_Result *rc)
{
    json_error_t e;
    json_t *body;
    char msg[300];

    if (!r->body) {
        *rc = reply_bad(r->conn, "the request needs a JSON object body");
        return NULL;
    }
    body = json_loadb(r->body, r->len, JSON_REJECT_DUPLICATES, &e);
    if (!body) {
        snprintf(msg, sizeof msg, "the body is not JSON: %s (line %d, column %d)", e.text, e.line,
                 e.column);
        *rc = reply_bad(r->conn, msg);
        return NULL;
    }
    if (!json_is_object(body)) {
        json_decref(body);
        *rc = reply_bad(r->conn, "the body must be a JSON object");
        return NULL;
    }
    return body;
}

/* ---- POST /v1/throttle ------------------------------------------------------------------- */

/* Fills the kind and window of the limit that denied. */
static void denial_limit(admin *a, const char *name, admin_v1_denial *d)
{
    const sluice_limit_policy *p = sluice_engine_get_limit(a->srv->engine, name, NULL);

    d->kind = "unknown";
    d->window_ms = 0;
    d->window_text = NULL;
    if (!p)
        return;
    if (p->ntiers > 0) {
        /* The tier chosen is not in THROTTLE's reply; its capacity is. */
        d->kind = "tiered";
        return;
    }
    d->kind = sluice_limit_kind_name(p->def.kind);
    switch (p->def.kind) {
    case SLUICE_RATE:
    case SLUICE_WINDOW:
    case SLUICE_SLIDING:
        d->window_ms = p->def.period_ns / SLUICE_NS_PER_MS;
        break;
    case SLUICE_QUOTA:
        d->window_text = p->def.calendar == SLUICE_CAL_DAY     ? "1 day"
                         : p->def.calendar == SLUICE_CAL_MONTH ? "1 month"
                                                               : NULL;
        d->window_ms = p->def.calendar == SLUICE_CAL_DAY     ? INT64_C(86400000)
                       : p->def.calendar == SLUICE_CAL_MONTH ? INT64_C(30) * 86400000
                                                             : 0;
        break;
    default:
        break;
    }
}

/* Adds RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset (seconds). */
static void ratelimit_headers(struct MHD_Response *r, int64_t limit, int64_t remaining,
                              int64_t reset_ms)
{
    char v[32];

    snprintf(v, sizeof v, "%" PRId64, limit);
    MHD_add_response_header(r, "RateLimit-Limit", v);
    snprintf(v, sizeof v, "%" PRId64, remaining);
    MHD_add_response_header(r, "RateLimit-Remaining", v);
    snprintf(v, sizeof v, "%" PRId64, admin_v1_seconds(reset_ms));
    MHD_add_response_header(r, "RateLimit-Reset", v);
}

static enum MHD_Result throttle_answer(admin_v1_req *r, const admin_resp_val *v, size_t n,
                                       const char *name, const char *key, size_t keylen, int peek)
{
    struct MHD_Response *resp;
    admin_v1_denial d;
    json_t *doc;
    char denied_by[COMMAND_NAME_BUF], secs[32];
    int allowed;

    for (size_t i = 0; i < 5; i++)
        if (i >= n || v[i].type != ':')
            return reply_failed(r->conn, 500, "ServerError", "Internal error", "ERR",
                                "THROTTLE gave a reply of an unexpected shape", "See the log", NULL,
                                NULL);
    allowed = v[0].i != 0;
    if (allowed) {
        doc = json_pack("{s:s, s:b, s:b, s:s, s:o, s:I, s:I, s:I, s:I}", "status", "ok", "allowed",
                        1, "peek", peek, "name", name, "key", admin_json_bytes(key, keylen),
                        "limit", (json_int_t)v[1].i, "remaining", (json_int_t)v[2].i,
                        "retry_after_ms", (json_int_t)0, "reset_after_ms", (json_int_t)v[4].i);
        resp = admin_json_response(doc);
        if (resp)
            ratelimit_headers(resp, v[1].i, v[2].i, v[4].i);
        return admin_queue(r->conn, MHD_HTTP_OK, resp);
    }
    snprintf(denied_by, sizeof denied_by, "%.*s",
             n > 5 && v[5].type == '$' ? (int)(v[5].len < 255 ? v[5].len : 255) : 0,
             n > 5 && v[5].type == '$' ? v[5].s : "");
    memset(&d, 0, sizeof d);
    d.limit_name = denied_by[0] ? denied_by : name;
    d.key = key;
    d.keylen = keylen;
    d.limit = v[1].i;
    d.remaining = v[2].i;
    d.retry_after_ms = v[3].i;
    d.peek = peek;
    denial_limit(r->a, d.limit_name, &d);
    resp = admin_json_response(admin_v1_denial_json(&d));
    if (resp) {
        ratelimit_headers(resp, v[1].i, v[2].i, v[4].i);
        if (d.retry_after_ms >= 0) {
            int64_t s = admin_v1_seconds(d.retry_after_ms);

            snprintf(secs, sizeof secs, "%" PRId64, s > 0 ? s : 1);
            MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, secs);
        }
    }
    return admin_queue(r->conn, MHD_HTTP_TOO_MANY_REQUESTS, resp);
}

/* Answers a throttle from THROTTLE's reply in r->reply. */
static enum MHD_Result throttle_finish(admin_v1_req *r)
{
    admin_resp_val v[V1_REPLY_VALUES];
    size_t nv;
    int is_array;

    if (r->reply.failed ||
        admin_resp_parse(r->reply.buf, r->reply.len, v, V1_REPLY_VALUES, &nv, &is_array) != 0)
        return admin_reply_json(r->conn, 500, NULL);
    if (!is_array && nv == 1 && v[0].type == '-')
        return reply_resp_error(r->conn, v[0].s, v[0].len);
    return throttle_answer(r, v, nv, r->name, r->key, r->keylen, r->peek);
}

static enum MHD_Result do_throttle(admin_v1_req *r)
{
    static const char *const members[] = {"limit", "key", "units", "peek", "tier", NULL};
    const char *argv[9], *name, *key, *tier;
    size_t argvlen[9], n = 0, namelen, keylen, tierlen;
    char units[32], tierbuf[32];
    enum MHD_Result rc = MHD_NO;
    json_t *body, *peekv, *tierv;
    int peek = 0;

    body = body_object(r, &rc);
    if (!body)
        return rc;
    if (only_members(r->conn, body, members, &rc) != 0 ||
        opt_string(r->conn, body, "limit", &name, &namelen, &rc) != 0 ||
        opt_string(r->conn, body, "key", &key, &keylen, &rc) != 0 ||
        opt_int(r->conn, body, "units", units, sizeof units, &rc) != 0)
        goto done;
    if (!name) {
        rc = reply_bad(r->conn, "\"limit\" is required: the name of a limit or task type");
        goto done;
    }
    peekv = json_object_get(body, "peek");
    if (peekv && !json_is_null(peekv) && !json_is_boolean(peekv)) {
        rc = reply_bad(r->conn, "\"peek\" must be true or false");
        goto done;
    }
    peek = peekv && json_is_true(peekv);
    /* A tier is the value the task's tier field would hold: a string or an integer. */
    tierv = json_object_get(body, "tier");
    tier = NULL;
    tierlen = 0;
    if (tierv && json_is_integer(tierv)) {
        snprintf(tierbuf, sizeof tierbuf, "%" JSON_INTEGER_FORMAT, json_integer_value(tierv));
        tier = tierbuf;
        tierlen = strlen(tierbuf);
    } else if (opt_string(r->conn, body, "tier", &tier, &tierlen, &rc) != 0) {
        goto done;
    }
    if (!key) {
        key = "";
        keylen = 0;
    }
    argv[n] = "THROTTLE", argvlen[n++] = 8;
    argv[n] = name, argvlen[n++] = namelen;
    argv[n] = key, argvlen[n++] = keylen;
    if (units[0]) {
        argv[n] = "UNITS", argvlen[n++] = 5;
        argv[n] = units, argvlen[n++] = strlen(units);
    }
    if (tier) {
        argv[n] = "TIER", argvlen[n++] = 4;
        argv[n] = tier, argvlen[n++] = tierlen;
    }
    if (peek)
        argv[n] = "PEEK", argvlen[n++] = 4;
    /* name and key live in the body, kept with the request until the answer. */
    r->json = body;
    body = NULL;
    r->name = name;
    r->key = key;
    r->keylen = keylen;
    r->peek = peek;
    rc = run(r, argv, argvlen, n) ? throttle_finish(r) : suspend_for_store(r);
done:
    json_decref(body);
    return rc;
}

/* ---- POST /v1/tasks ---------------------------------------------------------------------- */

/* Answers a submit from TASK.ADD's reply in r->reply (and the commit's outcome). */
static enum MHD_Result tasks_answer(admin_v1_req *r)
{
    admin_resp_val v[V1_REPLY_VALUES];
    struct MHD_Response *resp;
    char loc[64];
    size_t nv;
    int is_array;

    if (r->shutdown)
        return reply_failed(r->conn, MHD_HTTP_SERVICE_UNAVAILABLE, "BusyError", "Shutting down",
                            "SHUTDOWN", r->failure,
                            "Retry with the same \"id\" (task key) once the server is back", NULL,
                            NULL);
    if (r->failure[0])
        return reply_failed(r->conn, MHD_HTTP_SERVICE_UNAVAILABLE, "StorageError", "Not durable",
                            "IOERR", r->failure,
                            "The task is kept in memory and written by the next commit; retry "
                            "with the same \"id\" (task key) to be sure of exactly one task",
                            MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (r->reply.failed ||
        admin_resp_parse(r->reply.buf, r->reply.len, v, V1_REPLY_VALUES, &nv, &is_array) != 0 ||
        is_array || nv != 1)
        return admin_reply_json(r->conn, 500, NULL);
    if (v[0].type == '-')
        return reply_resp_error(r->conn, v[0].s, v[0].len);
    if (v[0].type != ':')
        return admin_reply_json(r->conn, 500, NULL);
    snprintf(loc, sizeof loc, "/v1/tasks/%" PRId64 "/explain", v[0].i);
    resp = admin_json_response(
        json_pack("{s:s, s:I, s:s}", "status", "ok", "id", (json_int_t)v[0].i, "explain", loc));
    if (resp)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_LOCATION, loc);
    return admin_queue(r->conn, MHD_HTTP_CREATED, resp);
}

static void on_durable(void *arg, const char *error)
{
    admin_v1_req *r = arg;
    admin *a = r->a;

    snprintf(r->failure, sizeof r->failure, "%s", error ? error : "");
    waiting_unlink(r);
    r->state = V1_DONE;
    MHD_resume_connection(r->conn);
    admin_kick(a);
}

static enum MHD_Result do_tasks(admin_v1_req *r)
{
    static const char *const members[] = {"type",     "payload", "key",      "units",
                                          "priority", "id",      "delay_ms", NULL};
    const char *argv[13], *type, *key, *tkey;
    size_t argvlen[13], n = 0, typelen, keylen, tkeylen, plen;
    char units[32], prio[32], delay[32];
    enum MHD_Result rc = MHD_NO;
    json_t *body, *payload;
    char *ptext = NULL;
    uint64_t before;
    int wrc;

    body = body_object(r, &rc);
    if (!body)
        return rc;
    if (only_members(r->conn, body, members, &rc) != 0 ||
        opt_string(r->conn, body, "type", &type, &typelen, &rc) != 0 ||
        opt_string(r->conn, body, "key", &key, &keylen, &rc) != 0 ||
        opt_string(r->conn, body, "id", &tkey, &tkeylen, &rc) != 0 ||
        opt_int(r->conn, body, "units", units, sizeof units, &rc) != 0 ||
        opt_int(r->conn, body, "priority", prio, sizeof prio, &rc) != 0 ||
        opt_int(r->conn, body, "delay_ms", delay, sizeof delay, &rc) != 0)
        goto done;
    if (!type) {
        rc = reply_bad(r->conn, "\"type\" is required: the task type");
        goto done;
    }
    /* The payload is any JSON value (an object by default), handed to TASK.ADD as its text. */
    payload = json_object_get(body, "payload");
    if (payload) {
        plen = json_dumpb(payload, NULL, 0, JSON_COMPACT | JSON_ENCODE_ANY);
        ptext = alloc_malloc(plen ? plen : 1);
        if (!ptext) {
            rc = admin_reply_json(r->conn, 500, NULL);
            goto done;
        }
        json_dumpb(payload, ptext, plen, JSON_COMPACT | JSON_ENCODE_ANY);
    } else {
        plen = 2;
    }
    argv[n] = "TASK.ADD", argvlen[n++] = 8;
    argv[n] = type, argvlen[n++] = typelen;
    argv[n] = ptext ? ptext : "{}", argvlen[n++] = plen;
    if (key)
        argv[n] = "KEY", argvlen[n++] = 3, argv[n] = key, argvlen[n++] = keylen;
    if (units[0])
        argv[n] = "UNITS", argvlen[n++] = 5, argv[n] = units, argvlen[n++] = strlen(units);
    if (prio[0])
        argv[n] = "PRIORITY", argvlen[n++] = 8, argv[n] = prio, argvlen[n++] = strlen(prio);
    if (tkey)
        argv[n] = "ID", argvlen[n++] = 2, argv[n] = tkey, argvlen[n++] = tkeylen;
    if (delay[0])
        argv[n] = "DELAY", argvlen[n++] = 5, argv[n] = delay, argvlen[n++] = strlen(delay);
    before = durable_changes(r->a->srv);
    r->failure[0] = '\0';
    if (!run(r, argv, argvlen, n)) {
        /* A shared store: answered once the store holds the task (docs/cluster.md). */
        rc = suspend_for_store(r);
        goto done;
    }
    if (durable_changes(r->a->srv) == before || r->reply.failed) {
        rc = tasks_answer(r);
        goto done;
    }
    /* As TASK.ADD's reply is held: the answer leaves once the task is durable. */
    wrc = durable_wait(r->a->srv, on_durable, r);
    if (wrc != 0) {
        if (wrc < 0)
            snprintf(r->failure, sizeof r->failure, "%s", durable_last_error(r->a->srv));
        rc = tasks_answer(r);
        goto done;
    }
    r->state = V1_WAITING;
    waiting_link(r);
    MHD_suspend_connection(r->conn);
    rc = MHD_YES;
done:
    alloc_free(ptext);
    json_decref(body);
    return rc;
}

/* ---- GET /v1/tasks/{id}/explain ---------------------------------------------------------- */

static enum MHD_Result reply_no_task(admin_v1_req *r)
{
    char msg[128];

    snprintf(msg, sizeof msg,
             "no task %" PRIu64 " (it never existed, or finished long ago and was forgotten)",
             r->id);
    return reply_failed(r->conn, MHD_HTTP_NOT_FOUND, "NotFoundError", "No such task", "NOTASK", msg,
                        "Check the id TASK.ADD or POST /v1/tasks returned", NULL, NULL);
}

/* Answers an explain from TASK.EXPLAIN's reply in r->reply (a shared store): its map of eight
 * fields becomes the object the embedded store's explanation gives (admin_explain_json: the
 * same names, strings, integers and nulls). */
static enum MHD_Result explain_finish(admin_v1_req *r)
{
    admin_resp_val v[V1_REPLY_VALUES];
    json_t *ex;
    size_t nv;
    int is_array, bad = 0;

    if (r->reply.failed ||
        admin_resp_parse(r->reply.buf, r->reply.len, v, V1_REPLY_VALUES, &nv, &is_array) != 0)
        return admin_reply_json(r->conn, 500, NULL);
    if (!is_array && nv == 1 && v[0].type == '-') {
        if (v[0].len >= 7 && memcmp(v[0].s, "NOTASK ", 7) == 0)
            return reply_no_task(r);
        return reply_resp_error(r->conn, v[0].s, v[0].len);
    }
    if (!is_array || nv % 2 != 0)
        return admin_reply_json(r->conn, 500, NULL);
    ex = json_object();
    for (size_t i = 0; ex && !bad && i < nv; i += 2) {
        char name[64];
        json_t *val;

        if (v[i].type != '$' || v[i].len >= sizeof name) {
            bad = 1;
            break;
        }
        memcpy(name, v[i].s, v[i].len);
        name[v[i].len] = '\0';
        switch (v[i + 1].type) {
        case '$':
            val = admin_json_bytes(v[i + 1].s, v[i + 1].len);
            break;
        case ':':
            val = json_integer((json_int_t)v[i + 1].i);
            break;
        case '_':
            val = json_null();
            break;
        default:
            val = NULL;
            break;
        }
        bad = !val || json_object_set_new(ex, name, val) != 0;
    }
    if (ex && (bad || json_object_set_new(ex, "id", admin_json_u64(r->id)) != 0)) {
        json_decref(ex);
        ex = NULL;
    }
    return admin_reply_json(r->conn, MHD_HTTP_OK, ex);
}

static enum MHD_Result do_explain(admin_v1_req *r)
{
    const char *argv[2];
    size_t argvlen[2];
    char idtext[24];
    json_t *ex;

    if (rstore_active(r->a->srv)) {
        /* The task is in the store, not in this node's engine: TASK.EXPLAIN asks the store. */
        snprintf(idtext, sizeof idtext, "%" PRIu64, r->id);
        argv[0] = "TASK.EXPLAIN", argvlen[0] = 12;
        argv[1] = idtext, argvlen[1] = strlen(idtext);
        return run(r, argv, argvlen, 2) ? explain_finish(r) : suspend_for_store(r);
    }
    ex = admin_explain_json(r->a, r->id);
    if (ex && json_is_null(ex)) {
        json_decref(ex);
        return reply_no_task(r);
    }
    if (ex && json_object_set_new(ex, "id", admin_json_u64(r->id)) != 0) {
        json_decref(ex);
        ex = NULL;
    }
    return admin_reply_json(r->conn, MHD_HTTP_OK, ex);
}

/* ---- GET /api/limits/{name}/spend on a shared store --------------------------------------- */

/* The status and code of an /api error answer for a RESP error word. */
static unsigned spend_status(const char *err, size_t len, const char **code)
{
    const char *sp = memchr(err, ' ', len), *type, *title;
    unsigned status = admin_v1_status(err, sp ? (size_t)(sp - err) : len, &type, &title);

    size_t wlen = sp ? (size_t)(sp - err) : len;

    *code = status == 400                                   ? "bad_request"
            : status == 404                                 ? "not_found"
            : wlen == 9 && memcmp(err, "STOREDOWN", 9) == 0 ? "store_down"
            : status == 503                                 ? "unavailable"
                                                            : "error";
    return status;
}

/* A time of LIMIT.SPEND's reply (ms) as /api gives times: null for none (-1). */
static json_t *spend_time(int64_t ms)
{
    return ms <= 0 ? json_null() : json_integer((json_int_t)ms);
}

/* Answers a spend query from LIMIT.SPEND's reply in r->reply: its map of five integers becomes
 * the document the embedded store's spend query gives (api.c, api_spend), an error the /api
 * error of its word (NOLIMIT 404, WRONGARGS 400, STOREDOWN 503). */
static enum MHD_Result spend_finish(admin_v1_req *r)
{
    static const char *const fields[] = {"spent", "budget", "remaining", "period_start_ms",
                                         "resets_at_ms"};
    admin_resp_val v[V1_REPLY_VALUES];
    const char *name = r->spend_args, *key = name + strlen(name) + 1, *code;
    int64_t got[5] = {0}; /* all five are checked by `seen`; this quiets -O3 */
    unsigned seen = 0;
    size_t nv;
    int is_array, bad = 0;
    json_t *doc;

    if (r->reply.failed ||
        admin_resp_parse(r->reply.buf, r->reply.len, v, V1_REPLY_VALUES, &nv, &is_array) != 0)
        return admin_reply_json(r->conn, 500, NULL);
    if (!is_array && nv == 1 && v[0].type == '-') {
        unsigned status = spend_status(v[0].s, v[0].len, &code);
        const char *sp = memchr(v[0].s, ' ', v[0].len);
        size_t off = sp ? (size_t)(sp - v[0].s) + 1 : 0;

        return admin_reply_error(r->conn, status, code, "%.*s", (int)(v[0].len - off),
                                 v[0].s + off);
    }
    for (size_t i = 0; is_array && i + 1 < nv; i += 2)
        for (unsigned f = 0; f < 5; f++)
            if (v[i].type == '$' && v[i + 1].type == ':' && v[i].len == strlen(fields[f]) &&
                memcmp(v[i].s, fields[f], v[i].len) == 0) {
                got[f] = v[i + 1].i;
                seen |= 1u << f;
            }
    if (seen != 0x1f)
        return admin_reply_json(r->conn, 500, NULL);
    doc = json_object();
    if (!doc)
        return admin_reply_json(r->conn, MHD_HTTP_OK, NULL);
    bad |= json_object_set_new(doc, "limit", admin_json_bytes(name, strlen(name)));
    bad |= json_object_set_new(
        doc, "tier",
        r->spend_tier ? admin_json_bytes(r->spend_tier, strlen(r->spend_tier)) : json_null());
    bad |= json_object_set_new(doc, "key", admin_json_bytes(key, strlen(key)));
    bad |= json_object_set_new(doc, "spent", json_integer((json_int_t)got[0]));
    bad |= json_object_set_new(doc, "budget", json_integer((json_int_t)got[1]));
    bad |= json_object_set_new(doc, "remaining", json_integer((json_int_t)got[2]));
    bad |= json_object_set_new(doc, "period_start_ms", spend_time(got[3]));
    bad |= json_object_set_new(doc, "resets_at_ms", spend_time(got[4]));
    if (bad) {
        json_decref(doc);
        doc = NULL;
    }
    return admin_reply_json(r->conn, MHD_HTTP_OK, doc);
}

enum MHD_Result admin_v1_spend(admin *a, struct MHD_Connection *c, const char *name,
                               const char *key, const char *tier, void **req_cls)
{
    size_t nlen = strlen(name), klen = strlen(key), tlen = tier ? strlen(tier) : 0;
    const char *argv[5];
    size_t argvlen[5], n = 0;
    admin_v1_req *r = alloc_calloc(1, sizeof *r);

    if (r)
        r->spend_args = alloc_malloc(nlen + klen + tlen + 3);
    if (!r || !r->spend_args) {
        alloc_free(r);
        return admin_reply_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "nomem", "%s", "out of memory");
    }
    r->a = a;
    r->conn = c;
    r->route = V1_SPEND;
    memcpy(r->spend_args, name, nlen + 1);
    memcpy(r->spend_args + nlen + 1, key, klen + 1);
    if (tier) {
        r->spend_tier = r->spend_args + nlen + klen + 2;
        memcpy(r->spend_args + nlen + klen + 2, tier, tlen + 1);
    }
    *req_cls = r; /* freed by admin_v1_free when MHD is done with the request */
    argv[n] = "LIMIT.SPEND", argvlen[n++] = 11;
    argv[n] = name, argvlen[n++] = nlen;
    argv[n] = key, argvlen[n++] = klen;
    if (tier)
        argv[n] = "TIER", argvlen[n++] = 4, argv[n] = tier, argvlen[n++] = tlen;
    return run(r, argv, argvlen, n) ? spend_finish(r) : suspend_for_store(r);
}

/* ---- The request's life ------------------------------------------------------------------ */

int admin_v1_path(const char *url)
{
    return strncmp(url, "/v1/", 4) == 0 || strcmp(url, "/v1") == 0;
}

/* Finds the route of url and method. Returns the route, or V1_NONE after replying (404, 405). */
static v1_route route_of(admin *a, struct MHD_Connection *c, const char *url, const char *method,
                         uint64_t *id, enum MHD_Result *rc)
{
    int post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;
    int get = strcmp(method, MHD_HTTP_METHOD_GET) == 0 || strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
    const char *allow = NULL;
    v1_route route = V1_NONE;
    char msg[300];

    (void)a;
    if (strcmp(url, "/v1/throttle") == 0) {
        route = V1_THROTTLE;
        allow = post ? NULL : "POST";
    } else if (strcmp(url, "/v1/tasks") == 0) {
        route = V1_TASKS;
        allow = post ? NULL : "POST";
    } else if (strncmp(url, "/v1/tasks/", 10) == 0) {
        const char *p = url + 10, *slash = strchr(p, '/');
        char digits[24];
        size_t len = slash ? (size_t)(slash - p) : 0;

        if (slash && strcmp(slash, "/explain") == 0 && len > 0 && len < sizeof digits) {
            memcpy(digits, p, len);
            digits[len] = '\0';
            if (admin_parse_id(digits, id) == 0 && *id > 0) {
                route = V1_EXPLAIN;
                allow = get ? NULL : "GET, HEAD";
            }
        }
    }
    if (route == V1_NONE) {
        snprintf(msg, sizeof msg, "no such path: %.200s", url);
        *rc = reply_failed(c, MHD_HTTP_NOT_FOUND, "NotFoundError", "Not found", "NOTFOUND", msg,
                           "The API is POST /v1/throttle, POST /v1/tasks and GET "
                           "/v1/tasks/{id}/explain (docs/http.md)",
                           NULL, NULL);
        return V1_NONE;
    }
    if (allow) {
        snprintf(msg, sizeof msg, "%.200s answers %s only, not %.20s", url, allow, method);
        *rc = reply_failed(c, MHD_HTTP_METHOD_NOT_ALLOWED, "ValidationError", "Method not allowed",
                           "METHOD", msg, "Use the method in the Allow header",
                           MHD_HTTP_HEADER_ALLOW, allow);
        return V1_NONE;
    }
    return route;
}

static enum MHD_Result reply_too_large(struct MHD_Connection *c, size_t max)
{
    char msg[128];

    snprintf(msg, sizeof msg, "the body is larger than the maximum of %zu bytes", max);
    return reply_failed(c, MHD_HTTP_CONTENT_TOO_LARGE, "ValidationError", "Request too large",
                        "TOOLARGE", msg, "Send a smaller body (a shorter key or payload)", NULL,
                        NULL);
}

enum MHD_Result admin_v1_begin(admin *a, struct MHD_Connection *c, const char *url,
                               const char *method, void **req_cls)
{
    enum MHD_Result rc = MHD_NO;
    const char *cl;
    admin_v1_req *r;
    v1_route route;
    uint64_t id = 0;
    size_t max;

    a->requests++;
    /* Refused before the body is read: a caller without the password costs nothing more. */
    if (!admin_authorized(a, c))
        return reply_failed(c, MHD_HTTP_UNAUTHORIZED, "AuthenticationError",
                            "Authentication required", "NOAUTH",
                            "a password is required: Authorization: Bearer <password>",
                            "Send the server's password (requirepass) as a bearer token",
                            MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"sluice\"");
    route = route_of(a, c, url, method, &id, &rc);
    if (route == V1_NONE)
        return rc;
    switch (route) {
    case V1_THROTTLE:
        max = V1_THROTTLE_SLACK + 6 * a->srv->opt.max_key_len;
        break;
    case V1_TASKS:
        max = V1_TASK_SLACK + a->srv->opt.max_payload_len + 12 * a->srv->opt.max_key_len;
        break;
    default:
        max = V1_GET_BODY;
        break;
    }
    cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > max)
        return reply_too_large(c, max);
    r = alloc_calloc(1, sizeof *r);
    if (!r)
        return admin_reply_json(c, 500, NULL);
    r->a = a;
    r->conn = c;
    r->route = route;
    r->id = id;
    r->max = max;
    *req_cls = r;
    return MHD_YES;
}

/* Appends n bytes of the body. Returns 0, 1 when past the bound, -1 when over the total bound
 * or out of memory. */
static int body_append(admin_v1_req *r, const char *data, size_t n)
{
    admin *a = r->a;
    size_t cap;
    char *buf;

    if (n > r->max - r->len)
        return 1;
    if (r->len + n + 1 > r->cap) {
        cap = r->cap ? r->cap * 2 : 1024;
        while (cap < r->len + n + 1)
            cap *= 2;
        if (cap > r->max + 1)
            cap = r->max + 1;
        if (a->v1_body_bytes - r->cap + cap > ADMIN_V1_BODY_TOTAL)
            return -1;
        buf = alloc_realloc(r->body, cap);
        if (!buf)
            return -1;
        a->v1_body_bytes = a->v1_body_bytes - r->cap + cap;
        r->body = buf;
        r->cap = cap;
    }
    memcpy(r->body + r->len, data, n);
    r->len += n;
    r->body[r->len] = '\0';
    return 0;
}

/* Answers a resumed request from its command's reply (or the server's stop). */
static enum MHD_Result finish(admin_v1_req *r)
{
    if (r->shutdown && r->route == V1_SPEND)
        return admin_reply_error(r->conn, MHD_HTTP_SERVICE_UNAVAILABLE, "shutdown", "%s",
                                 r->failure);
    if (r->shutdown && r->route != V1_TASKS)
        return reply_failed(r->conn, MHD_HTTP_SERVICE_UNAVAILABLE, "BusyError", "Shutting down",
                            "SHUTDOWN", r->failure, "Retry on another server", NULL, NULL);
    switch (r->route) {
    case V1_THROTTLE:
        return throttle_finish(r);
    case V1_EXPLAIN:
        return explain_finish(r);
    case V1_SPEND:
        return spend_finish(r);
    default:
        return tasks_answer(r);
    }
}

enum MHD_Result admin_v1_continue(admin *a, admin_v1_req *r, const char *upload_data,
                                  size_t *upload_data_size)
{
    if (r->state == V1_DONE) {
        r->state = V1_READING; /* answered once */
        return finish(r);
    }
    if (*upload_data_size > 0) {
        size_t n = *upload_data_size;
        int brc = r->refused ? 0 : body_append(r, upload_data, n);

        *upload_data_size = 0;
        if (brc != 0) {
            /* Refused: what was buffered goes now, the rest is dropped as it comes. */
            r->refused = brc > 0 ? MHD_HTTP_CONTENT_TOO_LARGE : MHD_HTTP_SERVICE_UNAVAILABLE;
            a->v1_body_bytes -= r->cap;
            alloc_free(r->body);
            r->body = NULL;
            r->len = r->cap = 0;
        }
        if (r->refused) {
            r->dropped += n;
            if (r->dropped > V1_DISCARD_MAX)
                return MHD_NO; /* closes the connection */
        }
        return MHD_YES;
    }
    if (r->refused == MHD_HTTP_CONTENT_TOO_LARGE)
        return reply_too_large(r->conn, r->max);
    if (r->refused)
        return reply_failed(r->conn, MHD_HTTP_SERVICE_UNAVAILABLE, "BusyError", "Server busy",
                            "BUSY", "too many request bodies are being received at once",
                            "Back off and retry", MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (a->srv->stopping || a->stopping)
        return reply_failed(r->conn, MHD_HTTP_SERVICE_UNAVAILABLE, "BusyError", "Shutting down",
                            "SHUTDOWN", "the server is shutting down", "Retry on another server",
                            NULL, NULL);
    switch (r->route) {
    case V1_THROTTLE:
        return do_throttle(r);
    case V1_TASKS:
        return do_tasks(r);
    case V1_EXPLAIN:
        return do_explain(r);
    default:
        return admin_reply_json(r->conn, 500, NULL);
    }
}

void admin_v1_free(admin_v1_req *r)
{
    if (!r)
        return;
    if (r->state == V1_WAITING || r->state == V1_STORE) {
        /* Not expected (a suspended request is resumed before MHD lets it go); be safe. */
        if (r->state == V1_WAITING)
            durable_wait_cancel(r->a->srv, r);
        waiting_unlink(r);
    }
    conn_detached_free(r->vc); /* forgets its place in the store's batches */
    alloc_free(r->spend_args);
    r->a->v1_body_bytes -= r->cap;
    alloc_free(r->body);
    json_decref(r->json);
    resp_writer_clear(&r->reply);
    alloc_free(r);
}

void admin_v1_stop(admin *a)
{
    admin_v1_req *r;

    while ((r = a->v1_waiting) != NULL) {
        if (r->state == V1_STORE) {
            /* Its place in the store's batches is forgotten; the store may still apply it. */
            conn_detached_free(r->vc);
            r->vc = NULL;
            r->shutdown = 1;
            snprintf(r->failure, sizeof r->failure, "%s",
                     r->route == V1_TASKS
                         ? "the server is shutting down before the shared store answered; the "
                           "task may or may not have been added"
                         : "the server is shutting down before the shared store answered");
            waiting_unlink(r);
            r->state = V1_DONE;
            MHD_resume_connection(r->conn);
            continue;
        }
        durable_wait_cancel(a->srv, r);
        r->shutdown = 1;
        on_durable(r, "the server is shutting down before the task's commit completed; the "
                      "final commit may still store it");
    }
}
