/* SPDX-License-Identifier: MIT */
/*
 * TASK.EXPLAIN on a shared store (Redis, PostgreSQL): why a task waits, in the single node's
 * reply (cmd_task.c: the same eight fields, in the same order), built from what the store keeps.
 * Two calls, in the node's FIFO of calls (rstore.h): the task is read as TASK.INFO reads it
 * (rtasks_info_then); when it waits (parked, or queued and due) its chain is resolved as TASK.ADD
 * resolves it (sluice_engine_resolve_task on its type, payload and units) and peeked in the
 * store's clock (rstore_peek_then: the chain judged, nothing charged, nothing written). Any node
 * explains any task the same way, whichever node added it.
 *
 * Where a parked task waits comes from the store with the task (INFO's park_link, position,
 * queue_length, wake_ms): the limit and key of the link it parked on, the tasks ahead of it in
 * that key's wait queue in the order claims take them, the queue's length and when the queue is
 * armed to wake, as the single node reports them. The estimated start is the store time at which
 * the peeked chain would grant it (the single node's also counts the units queued ahead of it on
 * that key; the shared store does not sum them, and the text says the start is the chain's).
 *
 * Invariants:
 * - the client is blocked (conn_block) from the command until its reply, so it runs nothing
 *   else meanwhile and the reply, appended when the last answer comes, keeps its command order;
 * - each explain is answered exactly once (or not at all when its client went away), and freed
 *   by the last answer that comes for it;
 * - nothing here blocks the loop.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "server/commands.h"
#include "server/rstore.h"
#include "server/rtasks.h"
#include "sluice/error.h"

/* Links peeked at most: a longer chain is explained without its peek. */
#define XPLAIN_LINKS 16
/* A link's key as the text shows it (the single node prints whole keys; a shared key is cut). */
#define XPLAIN_KEY_BUF 256

/* One explain in flight. */
typedef struct xplain {
    conn *c;                     /* NULL once its client went away (or the server stopped) */
    uint64_t id;                 /* the task */
    int in_flight;               /* a call for it is in the FIFO */
    sluice_task_state state;     /* the task's, from the store */
    int attempt;                 /* deliveries so far */
    char type[COMMAND_NAME_BUF]; /* its type, for the text */
    size_t nlinks;               /* links peeked */
    char names[XPLAIN_LINKS][COMMAND_NAME_BUF]; /* their limits' names (a denial names one) */
    char keys[XPLAIN_LINKS][XPLAIN_KEY_BUF];    /* their keys, cut */
    int park_link;        /* PARKED: the link it waits on (1-based), from the store; else 0 */
    int64_t position;     /* PARKED: tasks ahead of it in that link key's wait queue */
    int64_t queue_length; /* PARKED: tasks in that queue */
    int64_t wake_ms;      /* PARKED: when the queue is armed to wake (store ms); -1: never */
    int64_t flow_ready;   /* QUEUED in a fair flow: its tenant's ready tasks, from the store */
    int64_t flows;        /* and the tenants taking turns; 0: not in a fair flow */
    int fair_link;        /* the link whose key is its tenant (0-based), -1: none (the "") */
} xplain;

static void x_timeout(conn *c, void *arg);
static void x_cancel(conn *c, void *arg);

/* No retry: only the store's answers move an explain on; a client that half-closes still
 * gets its answer. */
static const conn_block_ops x_ops = {NULL, x_timeout, x_cancel, 1};

/* Frees x unless a call still holds it. */
static void x_release(xplain *x)
{
    if (!x->in_flight)
        alloc_free(x);
}

/* The server is stopping (the only timeout: the block has no timer). */
static void x_timeout(conn *c, void *arg)
{
    xplain *x = arg;

    resp_error(conn_out(c), "STOREDOWN",
               "the server is stopping; task %" PRIu64 " was not explained", x->id);
    x->c = NULL;
    conn_unblock(c);
    x_release(x);
}

static void x_cancel(conn *c, void *arg)
{
    xplain *x = arg;

    (void)c;
    x->c = NULL;
    x_release(x);
}

/* The seconds from now to at, for sentences (saturating, as the engine's). */
static double secs(int64_t at, int64_t now)
{
    int64_t d;

    if (at > 0 && now < 0 && at > INT64_MAX + now)
        d = INT64_MAX;
    else if (at < 0 && now > 0 && at < INT64_MIN + now)
        d = INT64_MIN;
    else
        d = at - now;
    return (double)d / 1e9;
}

/* Writes the reply, unblocks the client and frees x (the last answer holds it no more). */
static void x_reply(xplain *x, const char *limit, const char *key, int64_t start_ns,
                    const char *text)
{
    conn *c = x->c;
    resp_writer *w;

    x->in_flight = 0;
    if (!c) {
        x_release(x);
        return;
    }
    w = conn_out(c);
    resp_map(w, 8);
    resp_field_str(w, "state", sluice_task_state_name(x->state));
    resp_field_str(w, "limit", limit);
    resp_field_str(w, "key", key);
    resp_field_int(w, "position", x->park_link > 0, x->position);
    resp_field_int(w, "queue_length", x->park_link > 0, x->queue_length);
    resp_field_int(w, "wake_ms", x->park_link > 0 && x->wake_ms >= 0, x->wake_ms);
    resp_field_int(w, "estimated_start_ms", start_ns != 0, command_time_ms(start_ns));
    resp_field_str(w, "text", text);
    x->c = NULL;
    conn_unblock(c);
    x_release(x);
}

/* Answers an error (the store failed a call), unblocks and frees. */
static void x_fail(xplain *x, const char *why)
{
    conn *c = x->c;

    x->in_flight = 0;
    if (c) {
        resp_error(conn_out(c), "STOREDOWN",
                   "the shared store is unavailable (%s); nothing was done",
                   why && why[0] ? why : "not connected");
        x->c = NULL;
        conn_unblock(c);
    }
    x_release(x);
}

/* The text of a parked task's explanation: where it waits (its link's limit and key, the tasks
 * ahead of it, when its key wakes: the single node's sentence) and what the peek of its chain
 * said: verdict 1 it grants the task at start_ns, -1 it cannot as things stand, 0 it would
 * grant it now (a node takes it when its key is next woken). */
static void parked_text(const xplain *x, char *text, size_t len, int64_t now, int verdict,
                        int64_t start_ns)
{
    char where[XPLAIN_KEY_BUF + COMMAND_NAME_BUF + 160] = "Parked";
    int n;

    if (x->park_link > 0 && (size_t)x->park_link <= x->nlinks)
        snprintf(where, sizeof where,
                 "Parked on limit \"%s\" key \"%s\" with %" PRId64 " task(s) ahead of %" PRId64,
                 x->names[x->park_link - 1], x->keys[x->park_link - 1], x->position,
                 x->queue_length);
    else if (x->park_link > 0)
        snprintf(where, sizeof where, "Parked with %" PRId64 " task(s) ahead of %" PRId64,
                 x->position, x->queue_length);
    n = snprintf(text, len, "%s", where);
    if (n < 0 || (size_t)n >= len)
        return;
    if (x->park_link > 0 && x->wake_ms >= 0) {
        /* A wake past what nanoseconds hold saturates, as every time here. */
        int64_t wake_ns =
            x->wake_ms > INT64_MAX / SLUICE_NS_PER_MS ? INT64_MAX : x->wake_ms * SLUICE_NS_PER_MS;

        n += snprintf(text + n, len - (size_t)n, "; the key wakes in %.3f s",
                      secs(wake_ns > now ? wake_ns : now, now));
    }
    if (n < 0 || (size_t)n >= len)
        return;
    if (verdict < 0)
        snprintf(text + n, len - (size_t)n, "; the limit cannot grant it as things stand.");
    else if (verdict > 0)
        snprintf(text + n, len - (size_t)n,
                 "; its chain, peeked in the store's clock, grants it in about %.3f s (not "
                 "counting the units queued ahead of it).",
                 secs(start_ns, now));
    else
        snprintf(text + n, len - (size_t)n,
                 "; its chain, peeked in the store's clock, would grant it now, so a node takes "
                 "it when its key is next woken.");
}

/* The peek of a waiting task's chain answered. */
static void on_peek(void *arg, const rlim_result *r, const sluice_decision *dec, const char *why)
{
    xplain *x = arg;
    char text[2048];
    const char *lim = NULL, *key = NULL;
    int64_t now, start;
    int never = 0;

    (void)dec;
    if (why || !r) {
        x_fail(x, why);
        return;
    }
    if (r->rc != 0) {
        if (x->state == SLUICE_TASK_PARKED) {
            char where[XPLAIN_KEY_BUF + COMMAND_NAME_BUF + 160];

            parked_text(x, where, sizeof where, r->now_ns, 0, r->now_ns);
            snprintf(text, sizeof text, "%.*s; the store refused the peek of its chain (%s).",
                     (int)strcspn(where, ";"), where, sluice_strerror(r->rc));
        } else {
            snprintf(text, sizeof text,
                     "Queued and due; the store refused the peek of its chain (%s).",
                     sluice_strerror(r->rc));
        }
        if (x->park_link > 0 && (size_t)x->park_link <= x->nlinks)
            x_reply(x, x->names[x->park_link - 1], x->keys[x->park_link - 1], 0, text);
        else
            x_reply(x, NULL, NULL, 0, text);
        return;
    }
    now = r->now_ns;
    start = now;
    if (!r->chain.allowed && r->chain.denied_by < x->nlinks) {
        lim = x->names[r->chain.denied_by];
        key = x->keys[r->chain.denied_by];
        never = r->chain.retry_after_ns == SLUICE_NEVER || r->chain.retry_after_ns < 0;
        start = never ? SLUICE_NEVER : now + r->chain.retry_after_ns;
    }
    if (x->state == SLUICE_TASK_PARKED) {
        parked_text(x, text, sizeof text, now, lim ? (never ? -1 : 1) : 0, start);
        if (x->park_link > 0 && (size_t)x->park_link <= x->nlinks)
            x_reply(x, x->names[x->park_link - 1], x->keys[x->park_link - 1], start, text);
        else
            x_reply(x, lim, key, start, text);
        return;
    }
    /* Queued and due: the single node names no limit for it; the peek says what its gate would
     * answer now. */
    {
        char why_now[800] = "";
        int len;

        if (x->flows > 0 && x->fair_link >= 0) /* its turn, as engine.c's explain says it */
            len = snprintf(text, sizeof text,
                           "Queued and due; type \"%s\" shares workers fairly between the keys "
                           "of limit \"%s\": key \"%s\" has %" PRId64 " task(s) ready, and "
                           "%" PRId64 " key(s) take turns.",
                           x->type, x->names[x->fair_link], x->keys[x->fair_link], x->flow_ready,
                           x->flows);
        else if (x->flows > 0)
            len = snprintf(text, sizeof text,
                           "Queued and due; type \"%s\" shares workers fairly between keys, and "
                           "this task has none on its fair limit: key \"\" has %" PRId64
                           " task(s) ready, and %" PRId64 " key(s) take turns.",
                           x->type, x->flow_ready, x->flows);
        else
            len = snprintf(text, sizeof text,
                           "Queued and due: the next worker polling type \"%s\" takes it "
                           "through the gate (the shared store does not count the tasks of its "
                           "type that are ready).",
                           x->type);

        if (lim && never)
            snprintf(why_now, sizeof why_now,
                     " Its chain, peeked in the store's clock, would not grant it now: limit "
                     "\"%s\" (key \"%s\") cannot grant it as things stand.",
                     lim, key);
        else if (lim)
            snprintf(why_now, sizeof why_now,
                     " Its chain, peeked in the store's clock, would not grant it now: limit "
                     "\"%s\" (key \"%s\") grants it in about %.3f s, and the gate parks it "
                     "until then.",
                     lim, key, secs(start, now));
        if (len > 0 && (size_t)len < sizeof text)
            snprintf(text + len, sizeof text - (size_t)len, "%s", why_now);
    }
    x_reply(x, NULL, NULL, start, text);
}

/* Resolves the waiting task's chain as TASK.ADD did and sends its peek. Returns 0 (on_peek
 * answers), or -1 with text saying why there is no peek (x is answered by the caller). */
static int send_peek(xplain *x, const rtask_task *t, char *text, size_t textlen)
{
    server *s = x->c->srv;
    sluice_charge ch[XPLAIN_LINKS];
    rstore_link links[XPLAIN_LINKS];
    char ids[XPLAIN_LINKS][COMMAND_NAME_BUF * 2];
    sluice_task_spec spec;
    sluice_task_plan plan;
    sluice_submit_error err;
    char *payload;
    int n;

    if (t->typelen >= sizeof x->type) {
        snprintf(text, textlen, "its type's name is longer than any this node knows");
        return -1;
    }
    payload = alloc_malloc(t->payload_len + 1);
    if (!payload) {
        snprintf(text, textlen, "out of memory");
        return -1;
    }
    memcpy(payload, t->payload, t->payload_len);
    payload[t->payload_len] = '\0';
    memset(&spec, 0, sizeof spec);
    spec.type = x->type;
    spec.payload = payload;
    spec.payload_len = t->payload_len;
    spec.units = t->units;
    spec.has_priority = 1;
    spec.priority = (int)t->priority;
    n = sluice_engine_resolve_task(s->engine, &spec, server_now(s), &plan, ch, XPLAIN_LINKS, &err);
    alloc_free(payload);
    if (n < 0) {
        snprintf(text, textlen, "its chain cannot be resolved on this node: %s", err.message);
        return -1;
    }
    if (n == 0)
        return 1;
    if (n > XPLAIN_LINKS) {
        snprintf(text, textlen, "its chain has more than %d links", XPLAIN_LINKS);
        return -1;
    }
    x->nlinks = (size_t)n;
    x->fair_link = plan.fair ? plan.fair_link : -1;
    for (int i = 0; i < n; i++) {
        size_t kl = ch[i].keylen < XPLAIN_KEY_BUF - 1 ? ch[i].keylen : XPLAIN_KEY_BUF - 1;

        if (ch[i].tier)
            snprintf(ids[i], sizeof ids[i], "%s/%s", ch[i].limit, ch[i].tier);
        else
            snprintf(ids[i], sizeof ids[i], "%s", ch[i].limit);
        snprintf(x->names[i], sizeof x->names[i], "%s", ch[i].limit);
        memcpy(x->keys[i], ch[i].key, kl);
        x->keys[i][kl] = '\0';
        links[i].def = ch[i].def;
        links[i].limit_id = ids[i];
        links[i].name = ch[i].limit;
        links[i].key = ch[i].key;
        links[i].keylen = ch[i].keylen;
        links[i].units = ch[i].units;
        links[i].shadow = 0; /* the task's chain as the store keeps it: enforced */
    }
    x->in_flight = 1;
    if (rstore_peek_then(x->c, links, (size_t)n, on_peek, x) != 0) {
        /* c has its error reply: done. */
        conn *c = x->c;

        x->in_flight = 0;
        x->c = NULL;
        conn_unblock(c);
        x_release(x);
        return 2;
    }
    return 0;
}

/* The task read from the store. */
static void on_info(void *arg, const rtask_task *t, const rtask_result *r, const char *why)
{
    xplain *x = arg;
    char text[1024], cause[400];
    int64_t now;
    int rc;

    x->in_flight = 0;
    if (!x->c) {
        x_release(x);
        return;
    }
    if (why || !r) {
        x_fail(x, why);
        return;
    }
    if (r->rc != 0 || !t) {
        conn *c = x->c;

        if (r->rc == SLUICE_ENOTFOUND)
            reply_notask(c, x->id);
        else
            reply_engine_error(c, r->rc, "the shared store cannot explain this task");
        x->c = NULL;
        conn_unblock(c);
        x_release(x);
        return;
    }
    now = r->now_ns;
    x->state = t->state;
    x->attempt = t->attempt;
    if (t->state == SLUICE_TASK_PARKED && t->park_link > 0) {
        x->park_link = t->park_link;
        x->position = t->position;
        x->queue_length = t->queue_length;
        x->wake_ms = t->wake_ms;
    }
    x->flow_ready = t->flow_ready;
    x->flows = t->flows;
    snprintf(x->type, sizeof x->type, "%.*s",
             (int)(t->typelen < sizeof x->type - 1 ? t->typelen : sizeof x->type - 1), t->type);
    if (t->state == SLUICE_TASK_QUEUED && t->not_before_ns > now) {
        snprintf(text, sizeof text,
                 "Queued, held back until %.3f s from now (not_before or retry backoff); it is "
                 "gated when a worker polls after that.",
                 secs(t->not_before_ns, now));
        x_reply(x, NULL, NULL, t->not_before_ns, text);
        return;
    }
    switch (t->state) {
    case SLUICE_TASK_QUEUED: /* and due: its gate is peeked, as a parked task's */
    case SLUICE_TASK_PARKED:
        rc = send_peek(x, t, cause, sizeof cause);
        if (rc == 0 || rc == 2)
            return;
        if (rc == 1) { /* no limits: nothing to wait for */
            if (t->state == SLUICE_TASK_PARKED)
                parked_text(x, text, sizeof text, now, 0, now);
            else
                snprintf(text, sizeof text,
                         "Queued and due: the next worker polling type \"%s\" takes it through the "
                         "gate (the shared store does not count the tasks of its type that are "
                         "ready).",
                         x->type);
            x_reply(x, NULL, NULL, now, text);
            return;
        }
        if (t->state == SLUICE_TASK_PARKED) {
            char where[XPLAIN_KEY_BUF + COMMAND_NAME_BUF + 160];

            parked_text(x, where, sizeof where, now, 0, now);
            snprintf(text, sizeof text, "%.*s; its chain was not peeked (%s).",
                     (int)strcspn(where, ";"), where, cause);
        } else {
            snprintf(text, sizeof text, "Queued and due; its chain was not peeked (%s).", cause);
        }
        x_reply(x, NULL, NULL, 0, text);
        return;
    case SLUICE_TASK_RUNNING:
        snprintf(text, sizeof text,
                 "Running (attempt %d); its lease ends in %.3f s unless the worker acks, fails or "
                 "touches it.",
                 t->attempt, secs(t->lease_until_ns, now));
        break;
    case SLUICE_TASK_DONE:
        snprintf(text, sizeof text, "Done after %d attempt(s).", t->attempt);
        break;
    case SLUICE_TASK_CANCELLED:
        snprintf(text, sizeof text, "Cancelled before it ran.");
        break;
    case SLUICE_TASK_FAILED:
    default:
        /* The shared store does not keep which limit refused a task (TASK.INFO's denial fields
         * are null too). */
        snprintf(text, sizeof text, "Failed (%s) after %d attempt(s).",
                 sluice_fail_reason_name(t->fail_reason), t->attempt);
        break;
    }
    x_reply(x, NULL, NULL, 0, text);
}

void rtasks_explain(conn *c, uint64_t id)
{
    xplain *x = alloc_calloc(1, sizeof(*x));

    if (!x) {
        resp_error(conn_out(c), "NOMEM", "out of memory");
        return;
    }
    x->c = c;
    x->id = id;
    if (conn_block(c, 0, &x_ops, x) != 0) {
        alloc_free(x);
        resp_error(conn_out(c), "ERR", "TASK.EXPLAIN cannot wait for the shared store now");
        return;
    }
    x->in_flight = 1;
    if (rtasks_info_then(c, id, on_info, x) != 0) {
        /* c has its error reply. */
        x->in_flight = 0;
        x->c = NULL;
        conn_unblock(c);
        alloc_free(x);
    }
}
