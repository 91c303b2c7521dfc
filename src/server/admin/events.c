/* SPDX-License-Identifier: MIT */
/*
 * The engine's events on the admin port: tallied per limit (for /metrics and /api/limits) and
 * streamed to every /api/events client as Server-Sent Events.
 *
 * Tallies: per limit name, the THROTTLED tasks wanted and granted, events by kind, and the
 * most-denied keys, a Space-Saving summary of ADMIN_SKETCH_SLOTS keys: a key already listed adds
 * its denials; a new key takes a free slot or replaces the least-denied one, inheriting its count
 * as its error (so any key denied more than total/slots times is listed, and count - err, what is
 * reported, never over-states a key's denials). Memory is bounded: one slot array per limit that
 * saw a denial, and at most ADMIN_MAX_TALLIES limits.
 *
 * Streams: an event is formatted once into a reference-counted message and queued on every
 * stream, ADMIN_SSE_QUEUE messages at most; a full queue drops its oldest message and the stream
 * later receives a `dropped` event with how many it lost. So a slow reader costs bounded memory
 * and never delays the loop or the other streams. A stream with nothing to send is suspended in
 * MHD and resumed when a message is queued; the heartbeat queues a comment every
 * ADMIN_SSE_HEARTBEAT_MS, which also reveals streams whose peer went away (MHD does not watch a
 * suspended connection).
 *
 * The wire format of one event:
 *   id: 42
 *   event: throttled
 *   data: {"kind":"throttled","at_ms":...,"limit":"api","key":"alice","type":"sync","count":1,
 *          "wanted":5,"granted":2,"next_slot_ms":null,"summary":false}
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/hash.h"
#include "base/sat.h"
#include "server/admin/admin_impl.h"
#include "server/log.h"
#include "sluice/error.h"

#define ADMIN_MAX_TALLIES 65536
#define SSE_BLOCK         4096

static const char *const kind_names[ADMIN_EVENT_KINDS] = {
    "event",  "throttled", "deferred",      "rejected",          "unknown_limit",
    "budget", "key_cap",   "shadow_denied", "recurring_too_fast"};

/* ---- Tallies ----------------------------------------------------------------------------- */

static int tally_eq(const void *p, const void *key)
{
    return strcmp(((const limit_tally *)p)->name, key) == 0;
}

const limit_tally *admin_tally(const admin *a, const char *name)
{
    if (!a || !name)
        return NULL;
    return ptab_find(&a->tallies, hash_bytes(name, strlen(name)), name, tally_eq);
}

/* Finds or creates the tally of a limit; NULL when out of memory or past the cap. */
static limit_tally *tally_get(admin *a, const char *name)
{
    uint64_t h = hash_bytes(name, strlen(name));
    limit_tally *t = ptab_find(&a->tallies, h, name, tally_eq);

    if (t)
        return t;
    if (a->tallies.n >= ADMIN_MAX_TALLIES || ptab_reserve(&a->tallies, 1) != SLUICE_OK)
        return NULL;
    t = alloc_calloc(1, sizeof(*t));
    if (!t)
        return NULL;
    t->name = alloc_memdup0(name, strlen(name));
    if (!t->name) {
        alloc_free(t);
        return NULL;
    }
    t->hash = h;
    (void)ptab_insert(&a->tallies, h, t); /* reserved */
    return t;
}

static void sketch_add(limit_tally *t, const char *key, size_t keylen, uint64_t n)
{
    sketch_slot *min = NULL;
    uint64_t h;

    if (n == 0)
        return;
    if (!t->sketch) {
        t->sketch = alloc_calloc(ADMIN_SKETCH_SLOTS, sizeof(*t->sketch));
        if (!t->sketch)
            return;
    }
    if (keylen > ADMIN_SKETCH_KEY)
        keylen = ADMIN_SKETCH_KEY; /* a longer key is listed by its first bytes */
    h = hash_bytes(key, keylen);
    for (size_t i = 0; i < ADMIN_SKETCH_SLOTS; i++) {
        sketch_slot *s = &t->sketch[i];

        if (s->count > 0 && s->hash == h && s->keylen == keylen &&
            memcmp(s->key, key, keylen) == 0) {
            s->count = sat_add_u64(s->count, n);
            return;
        }
        if (!min || s->count < min->count)
            min = s;
    }
    /* A free slot has count 0, so it is the minimum. */
    min->err = min->count;
    min->count = sat_add_u64(min->count, n);
    min->hash = h;
    min->keylen = (uint16_t)keylen;
    memcpy(min->key, key, keylen);
}

uint64_t admin_tally_denied(const limit_tally *t, const char *key, size_t keylen)
{
    if (!t->sketch)
        return 0;
    if (keylen > ADMIN_SKETCH_KEY)
        keylen = ADMIN_SKETCH_KEY;
    for (size_t i = 0; i < ADMIN_SKETCH_SLOTS; i++) {
        const sketch_slot *s = &t->sketch[i];

        if (s->count > 0 && s->keylen == keylen && memcmp(s->key, key, keylen) == 0)
            return s->count - s->err;
    }
    return 0;
}

size_t admin_tally_top(const limit_tally *t, const sketch_slot **out, size_t max)
{
    size_t n = 0;

    if (!t->sketch)
        return 0;
    for (size_t i = 0; i < ADMIN_SKETCH_SLOTS; i++) {
        const sketch_slot *s = &t->sketch[i];
        size_t at;

        if (s->count == 0 ||
            (n == max && (max == 0 || s->count - s->err <= out[n - 1]->count - out[n - 1]->err)))
            continue;
        at = n < max ? n++ : max - 1;
        while (at > 0 && out[at - 1]->count - out[at - 1]->err < s->count - s->err) {
            out[at] = out[at - 1];
            at--;
        }
        out[at] = s;
    }
    return n;
}

static void tally(admin *a, const sluice_event *ev)
{
    uint64_t count = ev->count ? ev->count : 1;
    size_t k = (size_t)ev->kind < ADMIN_EVENT_KINDS ? (size_t)ev->kind : 0;
    limit_tally *t;

    a->events[k] += count;
    if (!ev->limit)
        return;
    t = tally_get(a, ev->limit);
    if (!t)
        return;
    t->events[k] += count;
    if (ev->kind == SLUICE_EVENT_THROTTLED) {
        uint64_t wanted = ev->wanted > 0 ? (uint64_t)ev->wanted : 0;
        uint64_t granted = ev->granted > 0 ? (uint64_t)ev->granted : 0;

        t->wanted += wanted;
        t->granted += granted;
        if (ev->key && wanted > granted)
            sketch_add(t, ev->key, strlen(ev->key), wanted - granted);
    }
}

void admin_events_free(admin *a)
{
    size_t pos = 0;
    limit_tally *t;

    while ((t = ptab_next(&a->tallies, &pos)) != NULL) {
        alloc_free(t->name);
        alloc_free(t->sketch);
        alloc_free(t);
    }
    ptab_free(&a->tallies);
}

/* ---- Stream messages --------------------------------------------------------------------- */

struct sse_msg {
    size_t refs;
    size_t len;
    char data[];
};

static sse_msg *msg_new(const char *text, size_t len)
{
    sse_msg *m = alloc_malloc(sizeof(*m) + len);

    if (!m)
        return NULL;
    m->refs = 1;
    m->len = len;
    memcpy(m->data, text, len);
    return m;
}

static void msg_unref(sse_msg *m)
{
    if (m && --m->refs == 0)
        alloc_free(m);
}

/* Formats an event as one SSE message. */
static sse_msg *event_msg(admin *a, const sluice_event *ev)
{
    size_t k = (size_t)ev->kind < ADMIN_EVENT_KINDS ? (size_t)ev->kind : 0;
    json_t *o = json_object();
    char head[96];
    size_t n, hlen;
    sse_msg *m = NULL;
    char *buf;
    int bad = !o;

    if (!bad) {
        bad |= json_object_set_new(o, "kind", json_string(kind_names[k]));
        bad |= json_object_set_new(o, "at_ms", admin_json_time(ev->at_ns));
        bad |= json_object_set_new(o, "limit", ev->limit ? json_string(ev->limit) : json_null());
        bad |= json_object_set_new(
            o, "key", ev->key ? admin_json_bytes(ev->key, strlen(ev->key)) : json_null());
        bad |= json_object_set_new(
            o, "type", ev->type ? admin_json_bytes(ev->type, strlen(ev->type)) : json_null());
        bad |= json_object_set_new(o, "count", admin_json_u64(ev->count ? ev->count : 1));
        bad |= json_object_set_new(o, "wanted", json_integer(ev->wanted));
        bad |= json_object_set_new(o, "granted", json_integer(ev->granted));
        bad |= json_object_set_new(o, "next_slot_ms", admin_json_time(ev->next_slot_ns));
        bad |= json_object_set_new(o, "summary", json_boolean(ev->summary));
    }
    if (bad)
        goto done;
    hlen =
        (size_t)snprintf(head, sizeof(head),
                         "id: %" PRIu64 "\nevent: %s\ndata: ", ++a->next_event_id, kind_names[k]);
    n = json_dumpb(o, NULL, 0, JSON_COMPACT);
    if (n == 0)
        goto done;
    buf = alloc_malloc(hlen + n + 2);
    if (!buf)
        goto done;
    memcpy(buf, head, hlen);
    json_dumpb(o, buf + hlen, n, JSON_COMPACT);
    memcpy(buf + hlen + n, "\n\n", 2);
    m = msg_new(buf, hlen + n + 2);
    alloc_free(buf);
done:
    json_decref(o);
    return m;
}

/* ---- Streams ----------------------------------------------------------------------------- */

struct sse_client {
    admin *a;
    struct MHD_Connection *conn;
    sse_msg *queue[ADMIN_SSE_QUEUE]; /* a ring: head, n entries */
    size_t head, n;
    size_t offset;    /* bytes of queue[head] already sent */
    uint64_t dropped; /* messages lost since the last `dropped` event */
    char note[160];   /* a `dropped` event being sent */
    size_t note_len, note_off;
    int suspended;
    int ended; /* the server is stopping: end the stream */
    sse_client *prev, *next;
};

static void client_resume(sse_client *cl)
{
    if (cl->suspended) {
        cl->suspended = 0;
        MHD_resume_connection(cl->conn);
        admin_kick(cl->a);
    }
}

/* Queues m (a reference is taken) on a stream, dropping its oldest message when it is full. */
static void client_push(sse_client *cl, sse_msg *m)
{
    if (cl->ended)
        return;
    if (cl->n == ADMIN_SSE_QUEUE) {
        /* The oldest goes, unless it is half sent (then the next one goes). */
        size_t victim = cl->offset > 0 ? (cl->head + 1) % ADMIN_SSE_QUEUE : cl->head;

        msg_unref(cl->queue[victim]);
        if (victim == cl->head) {
            cl->head = (cl->head + 1) % ADMIN_SSE_QUEUE;
        } else {
            /* Close the gap after the half-sent head. */
            for (size_t i = 1; i + 1 < cl->n; i++)
                cl->queue[(cl->head + i) % ADMIN_SSE_QUEUE] =
                    cl->queue[(cl->head + i + 1) % ADMIN_SSE_QUEUE];
        }
        cl->n--;
        cl->dropped++;
        cl->a->sse_dropped++;
    }
    m->refs++;
    cl->queue[(cl->head + cl->n) % ADMIN_SSE_QUEUE] = m;
    cl->n++;
    client_resume(cl);
}

static void broadcast(admin *a, sse_msg *m)
{
    for (sse_client *cl = a->clients; cl; cl = cl->next)
        client_push(cl, m);
}

void admin_events_on(admin *a, const sluice_event *ev)
{
    sse_msg *m;

    tally(a, ev);
    if (!a->clients)
        return;
    m = event_msg(a, ev);
    if (!m) {
        log_warn("admin: out of memory formatting an event for the event streams");
        return;
    }
    broadcast(a, m);
    msg_unref(m);
}

void admin_sse_heartbeat(admin *a)
{
    static const char beat[] = ": keepalive\n\n";
    sse_msg *m;

    if (!a->clients)
        return;
    m = msg_new(beat, sizeof(beat) - 1);
    if (!m)
        return;
    broadcast(a, m);
    msg_unref(m);
}

void admin_sse_end_all(admin *a)
{
    for (sse_client *cl = a->clients; cl; cl = cl->next) {
        cl->ended = 1;
        client_resume(cl);
    }
}

/* MHD's content reader: copies what is queued; suspends the stream when nothing is. */
static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    sse_client *cl = cls;
    size_t out = 0;

    (void)pos;
    if (cl->ended)
        return MHD_CONTENT_READER_END_OF_STREAM;
    if (cl->dropped > 0 && cl->note_len == 0) {
        int n = snprintf(cl->note, sizeof(cl->note),
                         "event: dropped\ndata: {\"kind\":\"dropped\",\"count\":%" PRIu64
                         ",\"message\":\"%" PRIu64 " events dropped: this stream read too "
                         "slowly\"}\n\n",
                         cl->dropped, cl->dropped);

        cl->note_len = n > 0 && (size_t)n < sizeof(cl->note) ? (size_t)n : 0;
        cl->note_off = 0;
        cl->dropped = 0;
    }
    while (out < max && cl->note_len > 0) {
        size_t k = cl->note_len - cl->note_off;

        if (k > max - out)
            k = max - out;
        memcpy(buf + out, cl->note + cl->note_off, k);
        out += k;
        cl->note_off += k;
        if (cl->note_off == cl->note_len)
            cl->note_len = cl->note_off = 0;
    }
    while (out < max && cl->n > 0) {
        sse_msg *m = cl->queue[cl->head];
        size_t k = m->len - cl->offset;

        if (k > max - out)
            k = max - out;
        memcpy(buf + out, m->data + cl->offset, k);
        out += k;
        cl->offset += k;
        if (cl->offset == m->len) {
            msg_unref(m);
            cl->queue[cl->head] = NULL;
            cl->head = (cl->head + 1) % ADMIN_SSE_QUEUE;
            cl->n--;
            cl->offset = 0;
        }
    }
    if (out == 0) {
        cl->suspended = 1;
        MHD_suspend_connection(cl->conn);
    }
    return (ssize_t)out;
}

/* Frees a stream when MHD is done with its response. */
static void sse_free(void *cls)
{
    sse_client *cl = cls;
    admin *a = cl->a;

    while (cl->n > 0) {
        msg_unref(cl->queue[cl->head]);
        cl->head = (cl->head + 1) % ADMIN_SSE_QUEUE;
        cl->n--;
    }
    if (cl->prev)
        cl->prev->next = cl->next;
    else
        a->clients = cl->next;
    if (cl->next)
        cl->next->prev = cl->prev;
    a->nclients--;
    alloc_free(cl);
}

enum MHD_Result admin_sse_open(admin *a, struct MHD_Connection *c)
{
    static const char hello[] = "retry: 2000\n: sluice events\n\n";
    struct MHD_Response *r;
    enum MHD_Result rc;
    sse_client *cl;
    sse_msg *m;

    if (a->nclients >= ADMIN_SSE_MAX)
        return admin_reply_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "too_many_streams",
                                 "%d event streams are open already", ADMIN_SSE_MAX);
    cl = alloc_calloc(1, sizeof(*cl));
    m = msg_new(hello, sizeof(hello) - 1);
    if (!cl || !m) {
        alloc_free(cl);
        msg_unref(m);
        return admin_reply_json(c, MHD_HTTP_OK, NULL);
    }
    cl->a = a;
    cl->conn = c;
    r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, SSE_BLOCK, sse_read, cl, sse_free);
    if (!r) {
        alloc_free(cl);
        msg_unref(m);
        return MHD_NO;
    }
    cl->next = a->clients;
    if (a->clients)
        a->clients->prev = cl;
    a->clients = cl;
    a->nclients++;
    client_push(cl, m);
    msg_unref(m);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream; charset=utf-8");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    rc = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return rc;
}
