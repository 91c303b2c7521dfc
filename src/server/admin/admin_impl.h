/* SPDX-License-Identifier: MIT */
/*
 * The inside of the admin port, shared by its files: admin.c (MHD in the loop, routing,
 * authentication, static files, replies), api.c (the JSON documents), metrics.c
 * (/metrics), events.c (event tallies, the most-denied keys, the SSE streams) and v1.c (the
 * HTTP decision API). Nothing outside these files includes it, but the unit tests of v1.c's
 * pure helpers.
 */
#ifndef SLUICE_SERVER_ADMIN_IMPL_H
#define SLUICE_SERVER_ADMIN_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <microhttpd.h>
#include <uv.h>

#include "base/attr.h"
#include "base/ptab.h"
#include "server/admin/admin.h"
#include "server/server.h"

/* Engine event kinds counted (index = sluice_event_kind; 0 unused). */
#define ADMIN_EVENT_KINDS 9

/* Keys of one limit's most-denied list (a Space-Saving summary) and the bytes kept of a key. */
#define ADMIN_SKETCH_SLOTS 64
#define ADMIN_SKETCH_KEY   256

typedef struct sse_client sse_client;
typedef struct sse_msg sse_msg;
typedef struct admin_v1_req admin_v1_req;

/* One slot of a most-denied summary. */
typedef struct sketch_slot {
    uint64_t hash;  /* of the key bytes kept */
    uint64_t count; /* tasks denied, plus err */
    uint64_t err;   /* the count inherited from the key it replaced: count - err <= the truth */
    uint16_t keylen;
    char key[ADMIN_SKETCH_KEY];
} sketch_slot;

/* What the events of one limit add up to (the engine's events are its only source). */
typedef struct limit_tally {
    char *name;                         /* owned */
    uint64_t hash;                      /* of name */
    uint64_t wanted;                    /* THROTTLED: tasks polls asked of throttled keys */
    uint64_t granted;                   /* THROTTLED: of which granted */
    uint64_t events[ADMIN_EVENT_KINDS]; /* events (summaries count what they summarise) */
    sketch_slot *sketch;                /* ADMIN_SKETCH_SLOTS, allocated at its first denial */
} limit_tally;

typedef struct admin {
    server *srv;
    struct MHD_Daemon *d;
    uv_poll_t poll;       /* MHD's epoll descriptor */
    uv_timer_t timer;     /* MHD_get_timeout(), or 0 to run MHD soon (admin_kick) */
    uv_timer_t heartbeat; /* keeps event streams alive and finds the dead ones */
    int handles;          /* libuv handles not yet closed */
    int port;             /* bound */
    int stopping;
    int in_run; /* inside MHD_run: a kick just re-arms afterwards */

    ptab tallies; /* limit_tally * by the hash_bytes of their name (zeroed = empty) */
    uint64_t events[ADMIN_EVENT_KINDS]; /* every event, by kind */

    /* Event streams. */
    sse_client *clients; /* doubly linked through sse_client.prev/next */
    size_t nclients;
    uint64_t next_event_id;
    uint64_t sse_dropped; /* events dropped for slow readers, all streams together */
    uint64_t requests;    /* HTTP requests answered */

    /* The HTTP decision API (v1.c). */
    admin_v1_req *v1_waiting; /* requests suspended until their commit or the shared store's
                               * answer, doubly linked */
    size_t v1_body_bytes;     /* bytes allocated for request bodies, all requests together */
} admin;

/* The admin of a server (NULL when off). */
static inline admin *admin_of(const server *s)
{
    return (admin *)s->admin_state;
}

/* Runs MHD at the next loop iteration (after an SSE stream was resumed). */
void admin_kick(admin *a);

/* ---- Replies (admin.c) ------------------------------------------------------------------- */

/* Queues doc (consumed, may be NULL: 500) as an application/json reply with `status`. */
enum MHD_Result admin_reply_json(struct MHD_Connection *c, unsigned status, json_t *doc);

/* Queues {"error": code, "message": ...} with `status`. */
enum MHD_Result admin_reply_error(struct MHD_Connection *c, unsigned status, const char *code,
                                  const char *fmt, ...) PRINTF_ATTR(4, 5);

/* Queues doc (consumed) as admin_reply_json does, with one more header when hname is not NULL. */
enum MHD_Result admin_reply_json_header(struct MHD_Connection *c, unsigned status, json_t *doc,
                                        const char *hname, const char *hvalue);

/* A newline-terminated application/json response of doc (consumed), not cached. NULL without
 * memory (or when doc is NULL); admin_queue then answers by closing the connection. */
struct MHD_Response *admin_json_response(json_t *doc);

/* Queues r (may be NULL: out of memory) with `status` and destroys the caller's reference. */
enum MHD_Result admin_queue(struct MHD_Connection *c, unsigned status, struct MHD_Response *r);

/* Returns 1 when the request carries the server's password (Basic or Bearer, compared in
 * constant time), or none is set. */
int admin_authorized(const admin *a, struct MHD_Connection *c);

/* Queues `len` bytes taken over from body (a alloc_malloc block, freed with the response). */
enum MHD_Result admin_reply_owned(struct MHD_Connection *c, unsigned status,
                                  const char *content_type, char *body, size_t len);

/* ---- JSON helpers (api.c) ----------------------------------------------------------- */

/* A JSON string of len bytes; bytes that are not valid UTF-8 become '?'. NULL only without
 * memory. */
json_t *admin_json_bytes(const char *s, size_t len);

/* An integer, clamped to what JSON (jansson) holds. */
json_t *admin_json_u64(uint64_t v);

/* Unix ms of ns, or JSON null for SLUICE_NEVER / 0. */
json_t *admin_json_time(int64_t ns);

/* The "rate" of a rate-limit key in /api/limits/{name}'s top_keys: its effective rate now and
 * why (cmd_limit_key_rate, as LIMIT.RATE), and when it can next take a unit if later than now
 * (sluice_limit_estimate). core is the key's core limit (cmd_limit_key_core). JSON null for a
 * NULL core or one that is not a rate limit; NULL without memory. A read: changes nothing. */
json_t *admin_key_rate_json(sluice_limit *core, const char *key, size_t keylen, int64_t now_ns);

/* The explanation of task id (the "explain" object of /api/tasks/{id}), JSON null when the
 * engine does not know the task, NULL without memory. */
json_t *admin_explain_json(admin *a, uint64_t id);

/* Parses a decimal task id (1 to 20 digits, no sign). Returns 0 or -1. Pure. */
int admin_parse_id(const char *s, uint64_t *out);

/* ---- Endpoints --------------------------------------------------------------------------- */

enum MHD_Result admin_api_stats(admin *a, struct MHD_Connection *c);
enum MHD_Result admin_api_limits(admin *a, struct MHD_Connection *c);
enum MHD_Result admin_api_limit(admin *a, struct MHD_Connection *c, const char *name,
                                void **req_cls);
enum MHD_Result admin_api_task(admin *a, struct MHD_Connection *c, const char *id);
enum MHD_Result admin_metrics(admin *a, struct MHD_Connection *c);
enum MHD_Result admin_sse_open(admin *a, struct MHD_Connection *c);

/* ---- The HTTP decision API (v1.c, and its pure side v1_reply.c) ---------------------------- */

/* One value of a RESP2 reply read back. */
typedef struct admin_resp_val {
    char type;     /* ':' integer, '$' bulk, '_' null (nil bulk), '-' error, '+' simple */
    int64_t i;     /* ':' */
    const char *s; /* '$', '-', '+': the bytes (an error's is "WORD message"), in the buffer */
    size_t len;
} admin_resp_val;

/* Parses exactly one RESP2 reply of buf (len bytes): a scalar (*n = 1) or a flat array of at most
 * max scalars (*is_array = 1, *n its length). Nested arrays, maps and anything malformed or
 * trailing are refused. Returns 0 or -1. Pure. */
int admin_resp_parse(const char *buf, size_t len, admin_resp_val *vals, size_t max, size_t *n,
                     int *is_array);

/* The HTTP status of a RESP error word (len bytes), and the error_type and title of seed 004's
 * error body: WRONGARGS and CROSSSLOT 400, NOAUTH 401, NOLIMIT and NOTASK 404, EXISTS, INUSE and
 * NOLEASE 409, RATELIMITED 429, NOTSHARED 501, BUSY, NOMEM, OOM, IOERR, STOREDOWN and
 * NOTREPLICATED 503, anything else 500. Pure. */
unsigned admin_v1_status(const char *word, size_t len, const char **error_type, const char **title);

/* A denial, as the 429 body reports it. */
typedef struct admin_v1_denial {
    const char *limit_name; /* the limit that said no */
    const char *kind;       /* rate, window, sliding, quota, concurrency, tiered */
    const char *key;        /* keylen bytes, any */
    size_t keylen;
    int64_t limit;           /* its capacity */
    int64_t window_ms;       /* its period, 0 when it has none */
    const char *window_text; /* the period in words when window_ms does not say it (quota) */
    int64_t retry_after_ms;  /* -1: no wait helps */
    int64_t remaining;
    int peek;
} admin_v1_denial;

/* Seed 004's rate-limit error body: {"status": "failed", "error": "Rate limit exceeded",
 * "error_type": "RateLimitError", "details": {limit_type, limit_name, key, limit, window,
 * window_ms, retry_after_seconds (rounded up; null when no wait helps), retry_after_ms,
 * remaining, peek, message}, "help"}. NULL without memory. Pure. */
json_t *admin_v1_denial_json(const admin_v1_denial *d);

/* Seconds of a wait of ms milliseconds, rounded up (0 for none). Pure. */
int64_t admin_v1_seconds(int64_t ms);

/* A window in words: "60 seconds", "1 second", "1500 ms". Pure. */
void admin_v1_window_text(int64_t window_ms, char *buf, size_t buflen);

/* Returns 1 when url belongs to the API (/v1/...). */
int admin_v1_path(const char *url);

/* The first call of an API request (headers only): checks the password (401 at once), the route
 * and method (404, 405), the Content-Length against the route's bound (413 at once), and sets
 * *req_cls to a new request. */
enum MHD_Result admin_v1_begin(admin *a, struct MHD_Connection *c, const char *url,
                               const char *method, void **req_cls);

/* The later calls: buffers the body (413 past the route's bound, 503 past ADMIN_V1_BODY_TOTAL),
 * then answers, or suspends the request until its commit (a submit on the embedded store) or
 * until the shared store answered its command, and answers once resumed. */
enum MHD_Result admin_v1_continue(admin *a, admin_v1_req *r, const char *upload_data,
                                  size_t *upload_data_size);

/* GET /api/limits/{name}/spend?key=K[&tier=T] on a shared store, where the spending lives in the
 * store: runs LIMIT.SPEND on a detached client, as the API's routes run their commands, and
 * answers with the embedded store's document (or its /api error), at once or once the store
 * answered (the connection suspended meanwhile). Sets *req_cls to the request, which
 * admin_v1_continue finishes and admin_v1_free frees. name and key were checked by the caller
 * (a quota that exists, a key given). */
enum MHD_Result admin_v1_spend(admin *a, struct MHD_Connection *c, const char *name,
                               const char *key, const char *tier, void **req_cls);

/* MHD is done with the request: frees it. Accepts NULL. */
void admin_v1_free(admin_v1_req *r);

/* The admin port stops: every suspended request is resumed with a 503 SHUTDOWN (MHD must hold
 * none); one waiting for the shared store forgets its place there first. */
void admin_v1_stop(admin *a);

/* ---- Events and streams (events.c) -------------------------------------------------- */

/* The tally of a limit, or NULL when it saw no event. */
const limit_tally *admin_tally(const admin *a, const char *name);

/* The denials counted for a key of a limit's tally since it was listed (a lower bound of its
 * denials; 0 when it is not listed). */
uint64_t admin_tally_denied(const limit_tally *t, const char *key, size_t keylen);

/* Fills out with up to max slots of a tally, most denied first (by count - err). Returns how
 * many. */
size_t admin_tally_top(const limit_tally *t, const sketch_slot **out, size_t max);

/* Counts an event and queues it for every stream. */
void admin_events_on(admin *a, const sluice_event *ev);

/* Queues a heartbeat comment on every stream (and so finds the streams whose peer left). */
void admin_sse_heartbeat(admin *a);

/* Ends every stream (their readers return end-of-stream once resumed). */
void admin_sse_end_all(admin *a);

/* Frees the tallies (the streams are freed by MHD with their responses). */
void admin_events_free(admin *a);

#endif
