/* SPDX-License-Identifier: MIT */
/*
 * One Redis connection on the loop (redis_conn.h): hiredis's async context attached to libuv
 * through hiredis's own adapter, plus what hiredis 0.14 leaves to its user: resolving without
 * blocking, deadlines, reconnecting, and the script's life.
 *
 * Who answers a call: hiredis runs a command's callback exactly once, with the reply, or with NULL
 * when the context is freed (by us after a deadline, or by hiredis when Redis closed the
 * connection). Every call's completion goes through that callback, so a call is never answered
 * twice or forgotten. Our own list of calls in flight (oldest first) mirrors hiredis's, and only
 * serves the deadline: the oldest call's deadline is the only one armed.
 *
 * The one exception to answers in call order: a call that met NOSCRIPT is sent again behind the
 * reload, so calls sent after it may be answered first (the caller orders its own answers).
 */
#include "store/redis_conn.h"

#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include <hiredis/adapters/libuv.h>
#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "base/alloc.h"
#include "sluice/error.h"

/* While a TCP connect is in progress its socket is looked at this often (ms): hiredis's libuv
 * adapter drops the poll's error status, so a refused connect would otherwise be noticed only at
 * the attempt's deadline (the whole timeout). */
#define CONNECT_PROBE_MS 20

/* The privdata of the setup commands (any distinct addresses). */
static char tag_auth, tag_select, tag_load, tag_reload;

struct rconn {
    uv_loop_t *loop;
    uv_timer_t deadline;      /* the oldest call's deadline, or the connection attempt's */
    uv_timer_t retry;         /* the next connection attempt */
    uv_getaddrinfo_t resolve; /* the host's address (one request at a time) */
    redisAsyncContext *ac;    /* NULL when there is no connection (or it is being dropped) */
    rconn_state state;
    int stopping;  /* rconn_free was called */
    int resolving; /* resolve is in flight (its callback will run) */
    int handles;   /* timers not yet closed */
    char host[256];
    int port, db;
    char *user, *password; /* AUTH's (NULL: none) */
    int64_t timeout_ms;
    const char *script;
    size_t script_len;
    char *channel; /* a subscriber's channel (owned), else NULL */
    void (*on_message)(void *arg, const char *msg, size_t len);
    void (*on_state)(void *arg, rconn_state state, const char *why);
    void *arg;
    char sha[41];
    uint64_t backoff_ms;       /* the wait before the next attempt */
    uint64_t attempt_deadline; /* uv_now when the attempt in progress gives up */
    rconn_call *head, *tail;   /* calls in flight, oldest first */
    char last_error[256];
    rconn_stats st;
};

static void start_attempt(rconn *rc);
static void arm_deadline(rconn *rc);

static void on_retry(uv_timer_t *t)
{
    start_attempt(t->data);
}

const char *rconn_state_name(rconn_state s)
{
    switch (s) {
    case RCONN_DOWN:
        return "down";
    case RCONN_CONNECTING:
        return "connecting";
    case RCONN_LOADING:
        return "loading";
    case RCONN_UP:
        return "up";
    }
    return "?";
}

static void set_state(rconn *rc, rconn_state s, const char *why)
{
    rc->state = s;
    if (rc->on_state && !rc->stopping)
        rc->on_state(rc->arg, s, why);
}

static void maybe_free(rconn *rc)
{
    if (rc->stopping && rc->handles == 0 && !rc->resolving) {
        alloc_free(rc->channel);
        alloc_free(rc->user);
        alloc_free(rc->password);
        alloc_free(rc);
    }
}

static void on_timer_closed(uv_handle_t *h)
{
    rconn *rc = h->data;

    rc->handles--;
    maybe_free(rc);
}

/* Drops the connection (or the attempt) and schedules the next attempt. Every call in flight is
 * answered with why. Safe inside a hiredis callback (hiredis then frees the context on return). */
static void drop(rconn *rc, const char *why)
{
    redisAsyncContext *ac = rc->ac;
    rconn_state was = rc->state;

    /* Truncated on purpose: the reason is for INFO and the log. */
    snprintf(rc->last_error, sizeof rc->last_error, "%.*s", (int)sizeof rc->last_error - 1, why);
    rc->ac = NULL;
    uv_timer_stop(&rc->deadline);
    if (was == RCONN_UP)
        rc->st.disconnects++;
    else if (was != RCONN_DOWN)
        rc->st.failed_connects++;
    rc->state = RCONN_DOWN;
    if (rc->resolving)
        uv_cancel((uv_req_t *)&rc->resolve);
    if (ac)
        redisAsyncFree(ac); /* answers the calls in flight (reply NULL) */
    if (rc->stopping)
        return;
    if (was != RCONN_DOWN)
        set_state(rc, RCONN_DOWN, rc->last_error);
    uv_timer_start(&rc->retry, on_retry, rc->backoff_ms, 0);
    rc->backoff_ms =
        rc->backoff_ms * 2 > RCONN_BACKOFF_MAX_MS ? RCONN_BACKOFF_MAX_MS : rc->backoff_ms * 2;
}

/* ---- Calls ------------------------------------------------------------------------------- */

static void call_unlink(rconn *rc, rconn_call *call)
{
    rconn_call **p = &rc->head, *prev = NULL;

    while (*p && *p != call) {
        prev = *p;
        p = &(*p)->next;
    }
    if (!*p)
        return;
    *p = call->next;
    if (rc->tail == call)
        rc->tail = prev;
    call->next = NULL;
    rc->st.in_flight--;
}

static void call_link(rconn *rc, rconn_call *call)
{
    call->rc = rc;
    call->next = NULL;
    call->deadline_ms = (int64_t)(uv_now(rc->loop) + (uint64_t)rc->timeout_ms);
    if (rc->tail)
        rc->tail->next = call;
    else
        rc->head = call;
    rc->tail = call;
    rc->st.in_flight++;
}

static void on_call_reply(redisAsyncContext *ac, void *r, void *privdata);

static int send_call(rconn *rc, rconn_call *call)
{
    if (redisAsyncCommandArgv(rc->ac, on_call_reply, call, call->argc, call->argv, call->argvlen) !=
        REDIS_OK)
        return SLUICE_ENOMEM;
    call_link(rc, call);
    rc->st.calls++;
    if (rc->head == call)
        arm_deadline(rc);
    return 0;
}

static int is_noscript(const redisReply *r)
{
    return r->type == REDIS_REPLY_ERROR && r->len >= 8 && memcmp(r->str, "NOSCRIPT", 8) == 0;
}

static void on_call_reply(redisAsyncContext *ac, void *r, void *privdata)
{
    rconn_call *call = privdata;
    rconn *rc = call->rc;
    const redisReply *reply = r;
    const char *why = NULL;

    call_unlink(rc, call);
    if (reply && is_noscript(reply) && !call->retried && rc->ac == ac && rc->state == RCONN_UP) {
        /* The script is gone from Redis (SCRIPT FLUSH, a new master): load it again and resend
         * the call behind the load, once. */
        call->retried = 1;
        if (redisAsyncCommand(ac, NULL, &tag_reload, "SCRIPT LOAD %b", rc->script,
                              rc->script_len) == REDIS_OK &&
            send_call(rc, call) == 0)
            return;
    }
    if (!reply)
        why = rc->ac == ac && ac->errstr && ac->errstr[0] ? ac->errstr
              : rc->last_error[0]                         ? rc->last_error
                                                          : "connection lost";
    if (rc->head == NULL)
        uv_timer_stop(&rc->deadline);
    else if (!rc->stopping)
        arm_deadline(rc);
    call->fn(call->arg, reply, why);
}

int rconn_evalsha(rconn *rc, rconn_call *call)
{
    if (rc->state != RCONN_UP || !rc->ac || rc->stopping || rc->channel)
        return SLUICE_ESTATE;
    call->retried = 0;
    return send_call(rc, call);
}

/* ---- Deadlines --------------------------------------------------------------------------- */

static void on_deadline(uv_timer_t *t)
{
    rconn *rc = t->data;
    uint64_t now = uv_now(rc->loop);
    char why[200];

    if (rc->state == RCONN_CONNECTING && rc->ac && now < rc->attempt_deadline) {
        int err = 0;
        socklen_t len = sizeof(err);

        if (getsockopt(rc->ac->c.fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err != 0) {
            snprintf(why, sizeof why, "cannot connect to %.100s:%d: %s", rc->host, rc->port,
                     strerror(err));
            drop(rc, why);
            return;
        }
    }
    if (rc->state == RCONN_CONNECTING || rc->state == RCONN_LOADING) {
        if (now < rc->attempt_deadline) {
            arm_deadline(rc);
            return;
        }
        snprintf(why, sizeof why, "%s %.100s:%d did not answer within %lld ms",
                 rc->state == RCONN_CONNECTING ? "connecting to" : "loading the script into",
                 rc->host, rc->port, (long long)rc->timeout_ms);
        drop(rc, why);
        return;
    }
    if (rc->head && (int64_t)now >= rc->head->deadline_ms) {
        rc->st.timeouts++;
        snprintf(why, sizeof why, "timeout: %.100s:%d did not answer within %lld ms", rc->host,
                 rc->port, (long long)rc->timeout_ms);
        drop(rc, why);
        return;
    }
    arm_deadline(rc);
}

static void arm_deadline(rconn *rc)
{
    uint64_t now = uv_now(rc->loop), due;

    if (rc->state == RCONN_CONNECTING && rc->ac && now + CONNECT_PROBE_MS < rc->attempt_deadline)
        due = now + CONNECT_PROBE_MS;
    else if (rc->state == RCONN_CONNECTING || rc->state == RCONN_LOADING)
        due = rc->attempt_deadline;
    else if (rc->head)
        due = (uint64_t)rc->head->deadline_ms;
    else {
        uv_timer_stop(&rc->deadline);
        return;
    }
    uv_timer_start(&rc->deadline, on_deadline, due > now ? due - now : 0, 0);
}

/* ---- Connecting -------------------------------------------------------------------------- */

static void on_setup_reply(redisAsyncContext *ac, void *r, void *privdata)
{
    rconn *rc = ac->data;
    const redisReply *reply = r;
    char why[300];

    if (!reply || rc->ac != ac)
        return; /* the connection is going: drop or the disconnect callback says why */
    if (reply->type == REDIS_REPLY_ERROR) {
        snprintf(why, sizeof why, "%s failed: %.*s",
                 privdata == &tag_auth     ? "AUTH"
                 : privdata == &tag_select ? "SELECT"
                                           : "SCRIPT LOAD",
                 (int)reply->len, reply->str);
        if (privdata == &tag_reload) /* the call resent behind it meets NOSCRIPT and says so */
            return;
        drop(rc, why);
        return;
    }
    if (privdata == &tag_select || privdata == &tag_auth)
        return;
    if (reply->type != REDIS_REPLY_STRING || reply->len != 40) {
        drop(rc, "SCRIPT LOAD did not answer a SHA-1");
        return;
    }
    memcpy(rc->sha, reply->str, 40);
    rc->sha[40] = '\0';
    rc->st.script_loads++;
    if (privdata == &tag_reload || rc->state != RCONN_LOADING)
        return;
    rc->st.connects++;
    rc->backoff_ms = RCONN_BACKOFF_MIN_MS;
    rc->last_error[0] = '\0';
    uv_timer_stop(&rc->deadline);
    set_state(rc, RCONN_UP, NULL);
}

/* A subscriber's replies: the confirmation of its SUBSCRIBE (-> UP), then every message. A NULL
 * reply is the context going away (the disconnect callback, or drop, says why). */
static void on_sub_reply(redisAsyncContext *ac, void *r, void *privdata)
{
    rconn *rc = ac->data;
    const redisReply *reply = r;
    const redisReply *kind, *body;

    (void)privdata;
    if (!reply || rc->ac != ac || rc->stopping)
        return;
    if (reply->type == REDIS_REPLY_ERROR) {
        char why[300];

        snprintf(why, sizeof why, "SUBSCRIBE failed: %.*s", (int)reply->len, reply->str);
        drop(rc, why);
        return;
    }
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 3 ||
        reply->element[0]->type != REDIS_REPLY_STRING)
        return;
    kind = reply->element[0];
    if (kind->len == 9 && memcmp(kind->str, "subscribe", 9) == 0) {
        if (rc->state != RCONN_LOADING)
            return;
        rc->st.connects++;
        rc->backoff_ms = RCONN_BACKOFF_MIN_MS;
        rc->last_error[0] = '\0';
        uv_timer_stop(&rc->deadline);
        set_state(rc, RCONN_UP, NULL);
        return;
    }
    body = reply->element[2];
    if (kind->len == 7 && memcmp(kind->str, "message", 7) == 0 &&
        body->type == REDIS_REPLY_STRING && rc->on_message)
        rc->on_message(rc->arg, body->str, body->len);
}

static void on_connect(const redisAsyncContext *cac, int status)
{
    redisAsyncContext *ac = (redisAsyncContext *)cac;
    rconn *rc = ac->data;
    char why[300];

    if (rc->ac != ac)
        return;
    if (status != REDIS_OK) {
        /* hiredis frees the context after this callback. */
        snprintf(why, sizeof why, "cannot connect to %.100s:%d: %s", rc->host, rc->port,
                 ac->errstr && ac->errstr[0] ? ac->errstr : "error");
        rc->ac = NULL;
        drop(rc, why);
        return;
    }
    rc->state = RCONN_LOADING;
    /* AUTH first: Redis refuses everything else (NOAUTH) before it. Its failure drops the
     * connection with Redis's words; the commands queued behind it are dropped with it. */
    if (rc->password && (rc->user ? redisAsyncCommand(ac, on_setup_reply, &tag_auth, "AUTH %s %s",
                                                      rc->user, rc->password)
                                  : redisAsyncCommand(ac, on_setup_reply, &tag_auth, "AUTH %s",
                                                      rc->password)) != REDIS_OK) {
        drop(rc, "out of memory");
        return;
    }
    if (rc->channel) {
        /* Pub/sub ignores the database: nothing to SELECT. */
        if (redisAsyncCommand(ac, on_sub_reply, NULL, "SUBSCRIBE %s", rc->channel) != REDIS_OK)
            drop(rc, "out of memory");
        return;
    }
    if (redisAsyncCommand(ac, on_setup_reply, &tag_select, "SELECT %d", rc->db) != REDIS_OK ||
        redisAsyncCommand(ac, on_setup_reply, &tag_load, "SCRIPT LOAD %b", rc->script,
                          rc->script_len) != REDIS_OK)
        drop(rc, "out of memory");
}

static void on_disconnect(const redisAsyncContext *cac, int status)
{
    redisAsyncContext *ac = (redisAsyncContext *)cac;
    rconn *rc = ac->data;
    char why[300];

    (void)status;
    if (rc->ac != ac)
        return; /* dropped by us: already handled */
    snprintf(why, sizeof why, "connection to %.100s:%d lost: %s", rc->host, rc->port,
             ac->errstr && ac->errstr[0] ? ac->errstr : "closed");
    rc->ac = NULL; /* hiredis frees it after this callback */
    drop(rc, why);
}

static void on_resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    rconn *rc = req->data;
    char ip[64], why[400];
    redisAsyncContext *ac;

    rc->resolving = 0;
    if (rc->stopping || rc->state != RCONN_CONNECTING) {
        uv_freeaddrinfo(res);
        maybe_free(rc);
        return;
    }
    if (status < 0 || !res) {
        snprintf(why, sizeof why, "cannot resolve %.100s: %s", rc->host,
                 status < 0 ? uv_strerror(status) : "no address");
        uv_freeaddrinfo(res);
        drop(rc, why);
        return;
    }
    if (res->ai_family == AF_INET6)
        uv_ip6_name((const struct sockaddr_in6 *)(const void *)res->ai_addr, ip, sizeof ip);
    else
        uv_ip4_name((const struct sockaddr_in *)(const void *)res->ai_addr, ip, sizeof ip);
    uv_freeaddrinfo(res);
    /* A numeric address: hiredis's own getaddrinfo returns at once. */
    ac = redisAsyncConnect(ip, rc->port);
    if (!ac) {
        drop(rc, "out of memory");
        return;
    }
    if (ac->err) {
        snprintf(why, sizeof why, "cannot connect to %.100s:%d: %s", rc->host, rc->port,
                 ac->errstr ? ac->errstr : "error");
        redisAsyncFree(ac);
        drop(rc, why);
        return;
    }
    ac->data = rc;
    if (redisLibuvAttach(ac, rc->loop) != REDIS_OK) {
        redisAsyncFree(ac);
        drop(rc, "cannot attach the connection to the loop");
        return;
    }
    rc->ac = ac;
    redisAsyncSetConnectCallback(ac, on_connect);
    redisAsyncSetDisconnectCallback(ac, on_disconnect);
    arm_deadline(rc); /* probe the connect (CONNECT_PROBE_MS) */
}

static void start_attempt(rconn *rc)
{
    struct addrinfo hints;
    int rv;

    if (rc->stopping)
        return;
    if (rc->resolving) {
        /* A cancelled lookup has not called back yet: its request cannot be reused. */
        uv_timer_start(&rc->retry, on_retry, RCONN_BACKOFF_MIN_MS, 0);
        return;
    }
    rc->state = RCONN_CONNECTING;
    rc->attempt_deadline = uv_now(rc->loop) + (uint64_t)rc->timeout_ms;
    arm_deadline(rc);
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    rc->resolve.data = rc;
    rv = uv_getaddrinfo(rc->loop, &rc->resolve, on_resolved, rc->host, NULL, &hints);
    if (rv != 0) {
        char why[300];

        snprintf(why, sizeof why, "cannot resolve %.100s: %s", rc->host, uv_strerror(rv));
        drop(rc, why);
        return;
    }
    rc->resolving = 1;
}

/* ---- Life -------------------------------------------------------------------------------- */

int rconn_new(uv_loop_t *loop, const rconn_options *o, rconn **out)
{
    rconn *rc;

    *out = NULL;
    if (!o->host || strlen(o->host) >= sizeof(rc->host) || o->port < 1 || o->port > 65535 ||
        o->timeout_ms <= 0 || !o->script == !o->channel)
        return SLUICE_EINVAL;
    rc = alloc_calloc(1, sizeof(*rc));
    if (!rc)
        return SLUICE_ENOMEM;
    if (o->channel) {
        size_t len = strlen(o->channel);

        rc->channel = alloc_malloc(len + 1);
        if (!rc->channel) {
            alloc_free(rc);
            return SLUICE_ENOMEM;
        }
        memcpy(rc->channel, o->channel, len + 1);
        rc->on_message = o->on_message;
    }
    if (o->password && *o->password) {
        rc->password = alloc_memdup0(o->password, strlen(o->password));
        if (rc->password && o->user && *o->user)
            rc->user = alloc_memdup0(o->user, strlen(o->user));
        if (!rc->password || (o->user && *o->user && !rc->user)) {
            alloc_free(rc->password);
            alloc_free(rc->channel);
            alloc_free(rc);
            return SLUICE_ENOMEM;
        }
    }
    rc->loop = loop;
    snprintf(rc->host, sizeof rc->host, "%s", o->host);
    rc->port = o->port;
    rc->db = o->db;
    rc->timeout_ms = o->timeout_ms;
    rc->script = o->script;
    rc->script_len = o->script_len;
    rc->on_state = o->on_state;
    rc->arg = o->arg;
    rc->backoff_ms = RCONN_BACKOFF_MIN_MS;
    uv_timer_init(loop, &rc->deadline);
    rc->deadline.data = rc;
    uv_timer_init(loop, &rc->retry);
    rc->retry.data = rc;
    rc->handles = 2;
    start_attempt(rc);
    *out = rc;
    return 0;
}

void rconn_free(rconn *rc)
{
    if (!rc || rc->stopping)
        return;
    rc->stopping = 1;
    drop(rc, "stopped");
    uv_close((uv_handle_t *)&rc->deadline, on_timer_closed);
    uv_close((uv_handle_t *)&rc->retry, on_timer_closed);
}

rconn_state rconn_get_state(const rconn *rc)
{
    return rc->state;
}

const char *rconn_last_error(const rconn *rc)
{
    return rc->last_error;
}

const char *rconn_sha(const rconn *rc)
{
    return rc->sha;
}

void rconn_get_stats(const rconn *rc, rconn_stats *out)
{
    *out = rc->st;
}
