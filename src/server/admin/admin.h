/* SPDX-License-Identifier: MIT */
/*
 * The admin port: HTTP on its own address (default 127.0.0.1:7380) for monitoring and the
 * dashboard. GET /metrics (Prometheus), /api/stats, /api/limits, /api/limits/{name},
 * /api/tasks/{id}, /api/events (Server-Sent Events), /healthz, /readyz, and the dashboard's
 * static files at / (docs/admin.md has the shapes); and the HTTP decision API for callers that do
 * not speak RESP, POST /v1/throttle, POST /v1/tasks, GET /v1/tasks/{id}/explain (v1.c,
 * docs/http.md).
 *
 * Threading: libmicrohttpd runs inside the server's libuv loop, on the loop thread, like
 * everything else that touches the engine. It is started in "external" epoll mode: one uv_poll
 * watches MHD's epoll descriptor and one uv_timer follows MHD_get_timeout(); each of them calls
 * MHD_run(), which runs the request handlers there and then. No thread is started and nothing is
 * locked. An SSE client with nothing to read is suspended (MHD_suspend_connection) and resumed
 * when an event or a heartbeat is queued for it, so it never busy-waits and never blocks the loop.
 *
 * Abuse bounds: connections at once, per IP, a per-connection memory pool, an inactivity
 * deadline (which also bounds how long the request headers may take), at most ADMIN_SSE_MAX
 * event streams with ADMIN_SSE_QUEUE events queued each (a slow reader loses the oldest and is
 * told so with a `dropped` event).
 *
 * Authentication: when the server has a password, every request but /healthz and /readyz must
 * carry it, as HTTP Basic auth (any user name) or `Authorization: Bearer <password>`, compared in
 * constant time; otherwise 401 with WWW-Authenticate. Without a password and with protected mode
 * on, only loopback peers may connect (as on the data port).
 */
#ifndef SLUICE_SERVER_ADMIN_H
#define SLUICE_SERVER_ADMIN_H

#include <stddef.h>

#include "server/server.h"
#include "sluice/engine.h"

#define ADMIN_DEFAULT_PORT     7380
#define ADMIN_MAX_CONNECTIONS  256         /* HTTP connections at once */
#define ADMIN_MAX_PER_IP       64          /* of which from one address */
#define ADMIN_TIMEOUT_S        10          /* inactivity (and header) deadline, seconds */
#define ADMIN_CONN_MEMORY      (64u << 10) /* per-connection pool: headers and buffers */
#define ADMIN_SSE_MAX          64          /* event streams at once */
#define ADMIN_SSE_QUEUE        256         /* events queued per stream */
#define ADMIN_SSE_HEARTBEAT_MS 15000       /* a comment line this often keeps streams alive */
#define ADMIN_TOP_KEYS         20          /* keys listed by /api/limits/{name} */
#define ADMIN_V1_BODY_TOTAL    (64u << 20) /* request bodies buffered at once, all together */

/* Starts the admin port when s->opt.admin_port >= 0: binds s->opt.admin_bind:admin_port,
 * writes admin_port_file, and hooks MHD into s->loop (which must be initialised). When the port
 * was not given explicitly (admin_port_explicit 0) and cannot be bound, logs a warning and
 * returns 0 without an admin port; otherwise a bind failure is an error. Returns 0, or a
 * negative code with a one-line reason in msg (nothing is left behind). */
int admin_start(server *s, char *msg, size_t msglen);

/* Stops serving: ends the event streams, stops MHD, and closes the admin's libuv handles (the
 * loop finishes closing them). Idempotent; a no-op without an admin port. */
void admin_stop(server *s);

/* Frees the admin state. Only after the loop has run the closes of admin_stop. Accepts a
 * server without an admin port. */
void admin_free(server *s);

/* The server's engine event sink calls this with every (aggregated) event: it is counted per
 * limit and key for /metrics and /api/limits/{name}, and queued for every event stream. Never
 * blocks. A no-op without an admin port. */
void admin_on_event(server *s, const sluice_event *ev);

/* The port the admin listens on, or -1 when it is off. */
int admin_port(const server *s);

#endif
