/* SPDX-License-Identifier: MIT */
/*
 * The inside of the admin port, shared by its files: admin.c (MHD in the loop, routing,
 * authentication, static files, replies), api.c (the JSON documents), metrics.c
 * (/metrics) and events.c (event tallies, the most-denied keys, the SSE streams). Nothing
 * outside these files includes it.
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

/* ---- Endpoints --------------------------------------------------------------------------- */

enum MHD_Result admin_api_stats(admin *a, struct MHD_Connection *c);
enum MHD_Result admin_api_limits(admin *a, struct MHD_Connection *c);
enum MHD_Result admin_api_limit(admin *a, struct MHD_Connection *c, const char *name);
enum MHD_Result admin_api_task(admin *a, struct MHD_Connection *c, const char *id);
enum MHD_Result admin_metrics(admin *a, struct MHD_Connection *c);
enum MHD_Result admin_sse_open(admin *a, struct MHD_Connection *c);

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
