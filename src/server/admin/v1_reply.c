/* SPDX-License-Identifier: MIT */
/*
 * The pure side of the HTTP decision API (v1.c): reading a command's RESP2 reply back
 * (admin_resp_parse), the map from RESP error words to HTTP statuses, and seed 004's rate-limit
 * error body. No I/O and no server state, so tests/unit/test_admin_v1.c drives them directly.
 *
 * The replies read back are the server's own (the resp_writer's), so the reader accepts only what
 * THROTTLE and TASK.ADD answer: one scalar or one flat array of scalars, and refuses anything
 * else (nesting, maps, a truncated or trailing byte) rather than guess.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "server/admin/admin_impl.h"
#include "server/commands.h"

int admin_resp_parse(const char *buf, size_t len, admin_resp_val *vals, size_t max, size_t *n,
                     int *is_array)
{
    size_t pos = 0, count = 1;

    *n = 0;
    *is_array = 0;
    for (size_t k = 0; k < count; k++) {
        const char *eol;
        char type;
        int64_t v;

        if (pos >= len)
            return -1;
        eol = memchr(buf + pos, '\r', len - pos);
        if (!eol || (size_t)(eol - buf) + 1 >= len || eol[1] != '\n')
            return -1;
        type = buf[pos];
        if (type == '*') {
            if (k != 0 || *is_array ||
                command_parse_int(buf + pos + 1, (size_t)(eol - buf) - pos - 1, &v) != 0 || v < 0 ||
                (size_t)v > max)
                return -1;
            *is_array = 1;
            count = (size_t)v + 1;
            pos = (size_t)(eol - buf) + 2;
            continue;
        }
        if (*n == max)
            return -1;
        admin_resp_val *out = &vals[(*n)++];

        out->type = type;
        out->i = 0;
        out->s = buf + pos + 1;
        out->len = (size_t)(eol - buf) - pos - 1;
        pos = (size_t)(eol - buf) + 2;
        switch (type) {
        case '-':
        case '+':
            break;
        case ':':
            if (command_parse_int(out->s, out->len, &out->i) != 0)
                return -1;
            break;
        case '_':
            out->len = 0;
            break;
        case '$':
            if (command_parse_int(out->s, out->len, &v) != 0 || v < -1)
                return -1;
            if (v == -1) {
                out->type = '_';
                out->len = 0;
                break;
            }
            if ((size_t)v > len - pos || len - pos - (size_t)v < 2 ||
                buf[pos + (size_t)v] != '\r' || buf[pos + (size_t)v + 1] != '\n')
                return -1;
            out->s = buf + pos;
            out->len = (size_t)v;
            pos += (size_t)v + 2;
            break;
        default:
            return -1;
        }
    }
    return pos == len ? 0 : -1;
}

unsigned admin_v1_status(const char *word, size_t len, const char **error_type, const char **title)
{
    static const struct {
        const char *word;
        unsigned status;
        const char *type, *title;
    } map[] = {
        {"WRONGARGS", 400, "ValidationError", "Invalid request"},
        {"NOLIMIT", 404, "NotFoundError", "No such limit or task type"},
        {"NOTASK", 404, "NotFoundError", "No such task"},
        {"RATELIMITED", 429, "RateLimitError", "Rate limit exceeded"},
        {"EXISTS", 409, "ConflictError", "Task key held by a running task"},
        {"INUSE", 409, "ConflictError", "In use"},
        {"NOLEASE", 409, "ConflictError", "No such lease"},
        {"BUSY", 503, "BusyError", "Server busy"},
        {"NOMEM", 503, "BusyError", "Server out of memory"},
        {"OOM", 503, "BusyError", "Server past its memory budget"},
        {"IOERR", 503, "StorageError", "Not durable"},
        {"NOAUTH", 401, "AuthenticationError", "Authentication required"},
        {"NOTSHARED", 501, "NotImplementedError", "Not available with a shared store yet"},
        {"STOREDOWN", 503, "StorageError", "Shared store unavailable"},
        {"NOTREPLICATED", 503, "StorageError", "Not replicated"},
        {"CROSSSLOT", 400, "ValidationError", "Keys in different Redis Cluster slots"},
    };

    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
        if (strlen(map[i].word) == len && memcmp(map[i].word, word, len) == 0) {
            *error_type = map[i].type;
            *title = map[i].title;
            return map[i].status;
        }
    }
    *error_type = "ServerError";
    *title = "Internal error";
    return 500;
}

int64_t admin_v1_seconds(int64_t ms)
{
    if (ms <= 0)
        return 0;
    return ms / 1000 + (ms % 1000 != 0);
}

void admin_v1_window_text(int64_t window_ms, char *buf, size_t buflen)
{
    if (window_ms % 1000 == 0)
        snprintf(buf, buflen, "%" PRId64 " second%s", window_ms / 1000,
                 window_ms == 1000 ? "" : "s");
    else
        snprintf(buf, buflen, "%" PRId64 " ms", window_ms);
}

json_t *admin_v1_denial_json(const admin_v1_denial *d)
{
    char window[64], msg[512], key[80];
    int64_t secs = admin_v1_seconds(d->retry_after_ms);
    size_t klen = d->keylen > 64 ? 64 : d->keylen;
    json_t *details, *doc;
    int bad = 0;

    window[0] = '\0';
    if (d->window_text)
        snprintf(window, sizeof window, "%s", d->window_text);
    else if (d->window_ms > 0)
        admin_v1_window_text(d->window_ms, window, sizeof window);
    /* The key in the sentence is cut short and kept printable; the exact bytes are in "key". */
    for (size_t i = 0; i < klen; i++)
        key[i] = d->key[i] >= 0x20 && d->key[i] < 0x7f && d->key[i] != '"' ? d->key[i] : '?';
    key[klen] = '\0';
    if (d->retry_after_ms < 0)
        snprintf(msg, sizeof msg,
                 "Limit \"%s\" (%s, %" PRId64 "%s%s) can never grant this request for key "
                 "\"%s%s\": it asks more than the limit's capacity.",
                 d->limit_name, d->kind, d->limit, window[0] ? " per " : "", window, key,
                 d->keylen > klen ? "..." : "");
    else
        snprintf(msg, sizeof msg,
                 "Limit \"%s\" (%s, %" PRId64 "%s%s) is exhausted for key \"%s%s\". Please wait "
                 "%" PRId64 "s.",
                 d->limit_name, d->kind, d->limit, window[0] ? " per " : "", window, key,
                 d->keylen > klen ? "..." : "", secs);
    details = json_object();
    doc = json_object();
    if (!details || !doc) {
        json_decref(details);
        json_decref(doc);
        return NULL;
    }
    bad |= json_object_set_new(details, "limit_type", json_string(d->kind));
    bad |= json_object_set_new(details, "limit_name", json_string(d->limit_name));
    bad |= json_object_set_new(details, "key", admin_json_bytes(d->key, d->keylen));
    bad |= json_object_set_new(details, "limit", json_integer(d->limit));
    bad |= json_object_set_new(details, "window", window[0] ? json_string(window) : json_null());
    bad |= json_object_set_new(details, "window_ms",
                               d->window_ms > 0 ? json_integer(d->window_ms) : json_null());
    bad |= json_object_set_new(details, "retry_after_seconds",
                               d->retry_after_ms < 0 ? json_null() : json_integer(secs));
    bad |= json_object_set_new(details, "retry_after_ms", json_integer(d->retry_after_ms));
    bad |= json_object_set_new(details, "remaining", json_integer(d->remaining));
    bad |= json_object_set_new(details, "peek", json_boolean(d->peek));
    bad |= json_object_set_new(details, "message", json_string(msg));
    bad |= json_object_set_new(doc, "status", json_string("failed"));
    bad |= json_object_set_new(doc, "error", json_string("Rate limit exceeded"));
    bad |= json_object_set_new(doc, "error_type", json_string("RateLimitError"));
    bad |= json_object_set_new(doc, "details", details);
    bad |= json_object_set_new(
        doc, "help",
        json_string(d->retry_after_ms < 0
                        ? "Ask for fewer units, or raise the limit (LIMIT.SET or the configuration)"
                        : "Retry after retry_after_seconds (the Retry-After header), ask for fewer "
                          "units, or raise the limit (LIMIT.SET or the configuration)"));
    if (bad) {
        json_decref(doc);
        return NULL;
    }
    return doc;
}
