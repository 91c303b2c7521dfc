/* SPDX-License-Identifier: MIT */
/*
 * RESP: the Redis protocol, as spoken on sluice's data port.
 *
 * The reader (resp_read.c) is a pure parser: it is fed bytes as they arrive and hands back whole
 * commands (an array of arguments), doing no I/O. It understands the two request forms Redis
 * accepts: multibulk (`*2\r\n$4\r\nPING\r\n$2\r\nhi\r\n`) and inline (`PING hi\r\n`, for telnet).
 *
 * Invariants:
 * - Nothing is allocated from a declared length before the bytes arrive: a `$1000000000` header
 *   costs nothing until the bytes come, and any length over the configured maximum is refused
 *   as soon as its header is read.
 * - Once a protocol error is found the reader stays failed (every later call returns the same
 *   error); the connection sends the error and closes.
 * - Arguments are binary-safe (NUL bytes allowed).
 *
 * The writer (resp_write.c) appends replies to a growable buffer: RESP2 types, and the RESP3 types
 * a client asks for with HELLO 3 (maps, booleans, doubles, null).
 */
#ifndef SLUICE_SERVER_RESP_H
#define SLUICE_SERVER_RESP_H

#include <stddef.h>
#include <stdint.h>

#include "base/attr.h"

/* Limits of the reader; every one is configurable, with safe defaults (resp_limits_init). */
typedef struct resp_limits {
    size_t max_bulk_len;   /* bytes in one argument; default 8 MiB (Redis allows 512 MiB) */
    size_t max_args;       /* arguments in one command; default 1024 * 1024 */
    size_t max_inline_len; /* bytes of an inline command line; default 64 KiB */
    size_t max_query_len;  /* bytes of one whole command (all arguments); default 64 MiB */
} resp_limits;

void resp_limits_init(resp_limits *l);

/* One parsed command. argv[i] points into memory owned by the reader, valid until the next
 * resp_reader_feed or resp_reader_next call, and is followed by a NUL byte not counted in
 * argvlen[i] (so strtoll and friends are safe on it). */
typedef struct resp_command {
    size_t argc;
    const char **argv;
    const size_t *argvlen;
} resp_command;

typedef struct resp_reader resp_reader;

/* Returns 0 and a new reader, or SLUICE_ENOMEM. */
int resp_reader_new(const resp_limits *limits, resp_reader **out);
void resp_reader_free(resp_reader *r); /* accepts NULL */

/* Changes the limits of a live reader (tighter before AUTH, wider after). */
void resp_reader_set_limits(resp_reader *r, const resp_limits *limits);

/* Appends len bytes received from the peer. Returns 0, or SLUICE_ENOMEM (the reader is then
 * failed). The bytes are copied; buffered bytes are bounded by the limits plus one read. Bytes fed
 * to a reader that failed on a protocol error are dropped (returns 0), so a connection still
 * sending its error reply needs no special case. */
int resp_reader_feed(resp_reader *r, const char *buf, size_t len);

/* Parses the next complete command from the buffered bytes. Returns 1 and fills *cmd when one is
 * complete, 0 when more bytes are needed, SLUICE_ENOMEM, or SLUICE_EPARSE on a protocol error, with
 * a one-line message (Redis's wording where it has one, e.g. "Protocol error: invalid multibulk
 * length") in resp_reader_error(). Empty inline lines and `*0`/`*-1` arrays are skipped, as Redis
 * does. */
int resp_reader_next(resp_reader *r, resp_command *cmd);

/* The message of the error that failed the reader, or NULL. */
const char *resp_reader_error(const resp_reader *r);

/* Bytes buffered and not yet consumed (for the per-client query buffer limit). */
size_t resp_reader_buffered(const resp_reader *r);

/* ---- Writer -------------------------------------------------------------------------------- */

/* A reply buffer. proto is 2 or 3 (RESP3 after HELLO 3). */
typedef struct resp_writer {
    char *buf;
    size_t len, cap;
    int proto;
    int failed; /* an allocation failed: the buffer is incomplete and the client must be closed */
} resp_writer;

void resp_writer_init(resp_writer *w, int proto);
void resp_writer_clear(resp_writer *w);             /* frees the buffer */
void resp_writer_consume(resp_writer *w, size_t n); /* drops the first n bytes (sent) */

/* Each appends one reply; failures set w->failed (callers check once per command). */
void resp_simple(resp_writer *w, const char *s); /* +OK */
void resp_error(resp_writer *w, const char *code, const char *fmt, ...)
    PRINTF_ATTR(3, 4);                                     /* -CODE message */
void resp_int(resp_writer *w, int64_t v);                  /* :42 */
void resp_bulk(resp_writer *w, const char *s, size_t len); /* $3 abc */
void resp_bulk_str(resp_writer *w, const char *s);         /* NUL-terminated */
void resp_bulk_fmt(resp_writer *w, const char *fmt, ...) PRINTF_ATTR(2, 3);
void resp_null(resp_writer *w);             /* $-1 or _ in RESP3 */
void resp_array(resp_writer *w, size_t n);  /* *n */
void resp_map(resp_writer *w, size_t n);    /* %n in RESP3, *2n in RESP2 (n pairs follow) */
void resp_bool(resp_writer *w, int v);      /* #t/#f in RESP3, :1/:0 in RESP2 */
void resp_double(resp_writer *w, double v); /* ,v in RESP3, bulk string in RESP2 */

/* One entry of a map (the field's name, then its value): an integer, or null when has is 0; a
 * string, or null when s is NULL. */
void resp_field_int(resp_writer *w, const char *name, int has, int64_t v);
void resp_field_str(resp_writer *w, const char *name, const char *s);

#endif
