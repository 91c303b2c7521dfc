/* SPDX-License-Identifier: MIT */
/*
 * The admin port (see admin.h): libmicrohttpd driven by the server's libuv loop, the routes,
 * authentication, the static dashboard files, /healthz and /readyz, and the reply helpers the
 * endpoint files share.
 *
 * The loop integration: MHD runs in "external" epoll mode (MHD_USE_EPOLL without an internal
 * thread). Its epoll descriptor becomes readable whenever one of its sockets (the listener, a
 * connection, the resume signal) has something; a uv_poll on it calls MHD_run(), and so does a
 * uv_timer armed after every run with MHD_get_timeout() (connection timeouts, and work MHD has
 * pending without a new socket event). Everything happens on the loop thread.
 *
 * Ownership: the admin state is s->admin_state. admin_stop closes MHD (which frees the event
 * streams with their responses) and starts closing the three libuv handles; admin_free frees
 * the state once the loop has finished those closes.
 */
#include "server/admin/admin.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <netinet/in.h>
#include <sys/socket.h>

#include "base/alloc.h"
#include "base/attr.h"
#include "server/admin/admin_impl.h"
#include "server/admin/dash_assets.h"
#include "server/log.h"
#include "sluice/error.h"

#define LISTEN_BACKLOG 128

/* ---- Replies ----------------------------------------------------------------------------- */

enum MHD_Result admin_queue(struct MHD_Connection *c, unsigned status, struct MHD_Response *r)
{
    enum MHD_Result rc;

    if (!r)
        return MHD_NO; /* out of memory: MHD closes the connection */
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    rc = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return rc;
}

/* A response owning body (a alloc_malloc block), with its Content-Type. */
static struct MHD_Response *owned_response(char *body, size_t len, const char *content_type)
{
    struct MHD_Response *r;

    r = MHD_create_response_from_buffer_with_free_callback(len, body, alloc_free);
    if (!r) {
        alloc_free(body);
        return NULL;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    return r;
}

enum MHD_Result admin_reply_owned(struct MHD_Connection *c, unsigned status,
                                  const char *content_type, char *body, size_t len)
{
    struct MHD_Response *r = owned_response(body, len, content_type);

    if (r)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    return admin_queue(c, status, r);
}

struct MHD_Response *admin_json_response(json_t *doc)
{
    struct MHD_Response *r;
    size_t n;
    char *buf;

    if (!doc)
        return NULL;
    n = json_dumpb(doc, NULL, 0, JSON_COMPACT);
    buf = n > 0 ? alloc_malloc(n + 1) : NULL;
    if (!buf) {
        json_decref(doc);
        return NULL;
    }
    json_dumpb(doc, buf, n, JSON_COMPACT);
    json_decref(doc);
    buf[n] = '\n';
    r = owned_response(buf, n + 1, "application/json");
    if (r)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    return r;
}

enum MHD_Result admin_reply_json_header(struct MHD_Connection *c, unsigned status, json_t *doc,
                                        const char *hname, const char *hvalue)
{
    static const char oom[] = "{\"error\":\"nomem\",\"message\":\"out of memory\"}\n";
    struct MHD_Response *r = admin_json_response(doc);

    if (r && hname)
        MHD_add_response_header(r, hname, hvalue);
    if (!r) {
        status = MHD_HTTP_INTERNAL_SERVER_ERROR;
        r = MHD_create_response_from_buffer(sizeof(oom) - 1, (void *)oom, MHD_RESPMEM_PERSISTENT);
        if (r)
            MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    }
    return admin_queue(c, status, r);
}

enum MHD_Result admin_reply_json(struct MHD_Connection *c, unsigned status, json_t *doc)
{
    return admin_reply_json_header(c, status, doc, NULL, NULL);
}

/* The {"error", "message"} document. NULL without memory. */
PRINTF_ATTR(2, 0) static json_t *error_doc(const char *code, const char *fmt, va_list ap)
{
    char msg[512];

    vsnprintf(msg, sizeof(msg), fmt, ap);
    return json_pack("{s:s, s:s}", "error", code, "message", msg);
}

enum MHD_Result admin_reply_error(struct MHD_Connection *c, unsigned status, const char *code,
                                  const char *fmt, ...)
{
    va_list ap;
    json_t *doc;

    va_start(ap, fmt);
    doc = error_doc(code, fmt, ap);
    va_end(ap);
    return admin_reply_json(c, status, doc);
}

/* ---- Authentication ---------------------------------------------------------------------- */

static int b64_value(unsigned char ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    if (ch == '+')
        return 62;
    if (ch == '/')
        return 63;
    return -1;
}

/* Decodes standard base64 (padding optional) into out. Returns the bytes written, or -1. */
static long b64_decode(const char *in, unsigned char *out, size_t cap)
{
    uint32_t acc = 0;
    size_t n = 0;
    int bits = 0;

    for (; *in && *in != '='; in++) {
        int v = b64_value((unsigned char)*in);

        if (v < 0)
            return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (n == cap)
                return -1;
            out[n++] = (unsigned char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    return (long)n;
}

int admin_authorized(const admin *a, struct MHD_Connection *c)
{
    const char *h;

    if (!a->srv->has_password)
        return 1;
    h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h)
        return 0;
    if (strncasecmp(h, "Bearer ", 7) == 0) {
        h += 7;
        while (*h == ' ')
            h++;
        return server_check_password(a->srv, h, strlen(h));
    }
    if (strncasecmp(h, "Basic ", 6) == 0) {
        unsigned char buf[1024];
        long n;
        const unsigned char *colon;

        h += 6;
        while (*h == ' ')
            h++;
        n = b64_decode(h, buf, sizeof(buf));
        if (n < 0)
            return 0;
        /* user:password; any user name will do, as on the data port's AUTH. */
        colon = memchr(buf, ':', (size_t)n);
        if (!colon)
            return 0;
        colon++;
        return server_check_password(a->srv, (const char *)colon, (size_t)(buf + n - colon));
    }
    return 0;
}

static enum MHD_Result reply_unauthorized(struct MHD_Connection *c)
{
    struct MHD_Response *r = admin_json_response(
        json_pack("{s:s, s:s}", "error", "unauthorized", "message",
                  "a password is required: HTTP Basic auth or Authorization: Bearer <password>"));

    if (r)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                                "Basic realm=\"sluice\", charset=\"UTF-8\"");
    return admin_queue(c, MHD_HTTP_UNAUTHORIZED, r);
}

static enum MHD_Result reply_method(struct MHD_Connection *c, const char *method)
{
    struct MHD_Response *r =
        admin_json_response(json_pack("{s:s, s:s+}", "error", "method_not_allowed", "message",
                                      "the admin port answers GET and HEAD only, not ", method));

    if (r)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    return admin_queue(c, MHD_HTTP_METHOD_NOT_ALLOWED, r);
}

/* ---- Routes ------------------------------------------------------------------------------ */

static enum MHD_Result reply_healthz(struct MHD_Connection *c)
{
    static const char ok[] = "ok\n";
    struct MHD_Response *r =
        MHD_create_response_from_buffer(sizeof(ok) - 1, (void *)ok, MHD_RESPMEM_PERSISTENT);

    if (r) {
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain; charset=utf-8");
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    }
    return admin_queue(c, MHD_HTTP_OK, r);
}

static enum MHD_Result reply_readyz(admin *a, struct MHD_Connection *c)
{
    const server *s = a->srv;
    const char *reason = NULL;

    if (s->stopping || a->stopping)
        reason = "the server is shutting down";
    else if (s->opt.config_path && !s->has_config)
        reason = "the configuration is not loaded";
    else if (s->port <= 0)
        reason = "the data port is not listening";
    if (reason)
        return admin_reply_json(c, MHD_HTTP_SERVICE_UNAVAILABLE,
                                json_pack("{s:b, s:s}", "ready", 0, "reason", reason));
    return admin_reply_json(c, MHD_HTTP_OK, json_pack("{s:b}", "ready", 1));
}

static enum MHD_Result reply_static(struct MHD_Connection *c, const dash_file *f)
{
    const char *inm =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_NONE_MATCH);
    struct MHD_Response *r;
    unsigned status = MHD_HTTP_OK;

    if (inm && strcmp(inm, f->etag) == 0) {
        status = MHD_HTTP_NOT_MODIFIED;
        r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    } else {
        r = MHD_create_response_from_buffer(f->len, (void *)f->data, MHD_RESPMEM_PERSISTENT);
        if (r)
            MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, f->content_type);
    }
    if (r) {
        /* Revalidate every time: the ETag makes that a 304 while the build is unchanged. */
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        MHD_add_response_header(r, MHD_HTTP_HEADER_ETAG, f->etag);
        MHD_add_response_header(r, "X-Frame-Options", "DENY");
    }
    return admin_queue(c, status, r);
}

static enum MHD_Result route(admin *a, struct MHD_Connection *c, const char *url, void **req_cls)
{
    const dash_file *f;

    if (strcmp(url, "/metrics") == 0)
        return admin_metrics(a, c);
    if (strcmp(url, "/api/stats") == 0)
        return admin_api_stats(a, c);
    if (strcmp(url, "/api/limits") == 0 || strcmp(url, "/api/limits/") == 0)
        return admin_api_limits(a, c);
    if (strncmp(url, "/api/limits/", 12) == 0)
        return admin_api_limit(a, c, url + 12, req_cls);
    if (strncmp(url, "/api/tasks/", 11) == 0)
        return admin_api_task(a, c, url + 11);
    if (strcmp(url, "/api/events") == 0)
        return admin_sse_open(a, c);
    if (strncmp(url, "/api/", 5) != 0 && (f = dash_find(url)) != NULL)
        return reply_static(c, f);
    return admin_reply_error(c, MHD_HTTP_NOT_FOUND, "not_found", "no such path: %.200s", url);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **req_cls)
{
    admin *a = cls;
    int get = strcmp(method, MHD_HTTP_METHOD_GET) == 0 || strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
    int probe = strcmp(url, "/healthz") == 0 || strcmp(url, "/readyz") == 0;

    (void)version;
    /* The decision API reads its bodies and answers POSTs (v1.c). */
    if (*req_cls == NULL && admin_v1_path(url))
        return admin_v1_begin(a, c, url, method, req_cls);
    if (*req_cls != NULL && *req_cls != a)
        return admin_v1_continue(a, *req_cls, upload_data, upload_data_size);
    /* The first call brings the headers only; answering then would make MHD close the
     * connection. The reply is queued once the request is whole; a body is read and dropped
     * (within the connection's memory limit). */
    if (*req_cls == NULL) {
        *req_cls = a;
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    a->requests++;
    if (!probe && !admin_authorized(a, c))
        return reply_unauthorized(c);
    if (!get)
        return reply_method(c, method);
    if (strcmp(url, "/healthz") == 0)
        return reply_healthz(c);
    if (strcmp(url, "/readyz") == 0)
        return reply_readyz(a, c);
    return route(a, c, url, req_cls);
}

/* MHD is done with a request: an API request's state goes. */
static void on_completed(void *cls, struct MHD_Connection *c, void **req_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)c;
    (void)toe;
    if (*req_cls && *req_cls != cls)
        admin_v1_free(*req_cls);
    *req_cls = NULL;
}

/* Protected mode, as on the data port. */
static enum MHD_Result accept_policy(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
    const admin *a = cls;

    (void)addrlen;
    if (server_peer_allowed(addr, a->srv->has_password, a->srv->opt.protected_mode))
        return MHD_YES;
    log_warn("admin: refused a client: protected mode (no password set, not on loopback)");
    return MHD_NO;
}

PRINTF_ATTR(2, 0) static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char line[512];
    size_t n;

    (void)cls;
    vsnprintf(line, sizeof(line), fmt, ap);
    n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    log_debug("admin: %s", line);
}

/* ---- The loop ---------------------------------------------------------------------------- */

static void on_timer(uv_timer_t *t);

/* Arms the timer for MHD's next deadline. */
static void arm(admin *a)
{
    MHD_UNSIGNED_LONG_LONG ms = 0;

    if (!a->d || a->stopping)
        return;
    if (MHD_get_timeout(a->d, &ms) == MHD_YES)
        uv_timer_start(&a->timer, on_timer, (uint64_t)ms, 0);
    else
        uv_timer_stop(&a->timer);
}

static void run(admin *a)
{
    if (!a->d || a->stopping)
        return;
    a->in_run = 1;
    MHD_run(a->d);
    a->in_run = 0;
    arm(a);
}

static void on_poll(uv_poll_t *p, int status, int events)
{
    (void)status;
    (void)events;
    run(p->data);
}

static void on_timer(uv_timer_t *t)
{
    run(t->data);
}

static void on_heartbeat(uv_timer_t *t)
{
    admin_sse_heartbeat(t->data);
}

void admin_kick(admin *a)
{
    /* Inside MHD_run, the arm() that follows it sees the resumed stream. */
    if (a->d && !a->stopping && !a->in_run)
        uv_timer_start(&a->timer, on_timer, 0, 0);
}

static void on_closed(uv_handle_t *h)
{
    admin *a = h->data;

    a->handles--;
}

/* ---- Life -------------------------------------------------------------------------------- */

/* Opens the listening socket. Returns the descriptor, or -1 with msg. */
static int listen_socket(const server *s, int *port, char *msg, size_t msglen)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    int fd, one = 1;

    memset(&ss, 0, sizeof(ss));
    if (uv_ip4_addr(s->opt.admin_bind, s->opt.admin_port, (struct sockaddr_in *)&ss) != 0 &&
        uv_ip6_addr(s->opt.admin_bind, s->opt.admin_port, (struct sockaddr_in6 *)&ss) != 0) {
        snprintf(msg, msglen, "bad admin bind address \"%s\": expected an IPv4 or IPv6 address",
                 s->opt.admin_bind);
        return -1;
    }
    fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(msg, msglen, "admin port: socket: %s", strerror(errno));
        return -1;
    }
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&ss,
             ss.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in)) !=
            0 ||
        listen(fd, LISTEN_BACKLOG) != 0 || getsockname(fd, (struct sockaddr *)&ss, &len) != 0) {
        snprintf(msg, msglen, "cannot listen on %s:%d (admin port): %s", s->opt.admin_bind,
                 s->opt.admin_port, strerror(errno));
        close(fd);
        return -1;
    }
    *port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                     : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

/* Writes the admin port to its file, atomically. */
static int write_port_file(const char *path, int port, char *msg, size_t msglen)
{
    char tmp[4096];
    FILE *f;

    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    f = fopen(tmp, "w");
    if (!f || fprintf(f, "%d\n", port) < 0 || fclose(f) != 0 || rename(tmp, path) != 0) {
        snprintf(msg, msglen, "cannot write the admin port file %s", path);
        return -1;
    }
    return 0;
}

/* Removes the port file written by a start that then failed. */
static void unlink_port_file(const server *s)
{
    if (s->opt.admin_port_file)
        unlink(s->opt.admin_port_file);
}

int admin_start(server *s, char *msg, size_t msglen)
{
    const union MHD_DaemonInfo *info;
    admin *a;
    int fd, port = 0, rc;

    s->admin_state = NULL;
    if (s->opt.admin_port < 0)
        return 0;
    fd = listen_socket(s, &port, msg, msglen);
    if (fd < 0) {
        if (s->opt.admin_port_explicit)
            return SLUICE_EINVAL;
        log_warn("%s; the admin port is off (choose one with --admin-port)", msg);
        msg[0] = '\0';
        return 0;
    }
    if (s->opt.admin_port_file && write_port_file(s->opt.admin_port_file, port, msg, msglen) != 0) {
        close(fd);
        return SLUICE_EINVAL;
    }
    a = alloc_calloc(1, sizeof(*a));
    if (!a) {
        close(fd);
        unlink_port_file(s);
        snprintf(msg, msglen, "out of memory");
        return SLUICE_ENOMEM;
    }
    a->srv = s;
    a->port = port;
    /* MHD owns the listening socket from here and closes it when it stops. */
    a->d = MHD_start_daemon(MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG,
                            (uint16_t)port, accept_policy, a, on_request, a,
                            MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned int)ADMIN_MAX_CONNECTIONS, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                            (unsigned int)ADMIN_MAX_PER_IP, MHD_OPTION_CONNECTION_TIMEOUT,
                            (unsigned int)ADMIN_TIMEOUT_S, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                            (size_t)ADMIN_CONN_MEMORY, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, a,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, a, MHD_OPTION_END);
    if (!a->d) {
        close(fd);
        unlink_port_file(s);
        alloc_free(a);
        snprintf(msg, msglen, "cannot start the admin port's HTTP server (libmicrohttpd)");
        return SLUICE_EINVAL;
    }
    info = MHD_get_daemon_info(a->d, MHD_DAEMON_INFO_EPOLL_FD);
    rc = info ? uv_poll_init(&s->loop, &a->poll, info->epoll_fd) : UV_EINVAL;
    if (rc != 0) {
        MHD_stop_daemon(a->d);
        unlink_port_file(s);
        alloc_free(a);
        snprintf(msg, msglen, "admin port: cannot watch MHD's epoll descriptor: %s",
                 uv_strerror(rc));
        return SLUICE_EINVAL;
    }
    a->poll.data = a;
    uv_timer_init(&s->loop, &a->timer);
    a->timer.data = a;
    uv_timer_init(&s->loop, &a->heartbeat);
    a->heartbeat.data = a;
    a->handles = 3;
    s->admin_state = a;
    uv_poll_start(&a->poll, UV_READABLE, on_poll);
    uv_timer_start(&a->heartbeat, on_heartbeat, ADMIN_SSE_HEARTBEAT_MS, ADMIN_SSE_HEARTBEAT_MS);
    /* The heartbeat alone must not keep a stopping loop alive. */
    uv_unref((uv_handle_t *)&a->heartbeat);
    arm(a);
    log_info("admin: listening on http://%s:%d/ (metrics at /metrics)", s->opt.admin_bind, port);
    return 0;
}

void admin_stop(server *s)
{
    admin *a = admin_of(s);

    if (!a || a->stopping)
        return;
    /* The streams end: resumed, their readers return end-of-stream; MHD must hold no
     * suspended connection when it stops. */
    admin_sse_end_all(a);
    admin_v1_stop(a);
    if (a->d)
        MHD_run(a->d);
    a->stopping = 1;
    uv_close((uv_handle_t *)&a->poll, on_closed);
    uv_close((uv_handle_t *)&a->timer, on_closed);
    uv_close((uv_handle_t *)&a->heartbeat, on_closed);
    if (a->d) {
        MHD_stop_daemon(a->d);
        a->d = NULL;
    }
}

void admin_free(server *s)
{
    admin *a = admin_of(s);

    if (!a)
        return;
    if (a->handles > 0)
        log_error("admin: freed with %d libuv handles still open", a->handles);
    admin_events_free(a);
    alloc_free(a);
    s->admin_state = NULL;
}

void admin_on_event(server *s, const sluice_event *ev)
{
    admin *a = admin_of(s);

    if (a && !a->stopping)
        admin_events_on(a, ev);
}

int admin_port(const server *s)
{
    const admin *a = admin_of(s);

    return a ? a->port : -1;
}
