/* SPDX-License-Identifier: MIT */
/*
 * The two halves every batched script call of the shared stores needs, written once: an arena
 * that collects the call's byte strings (key names, arguments) as spans, and a cursor that reads
 * one request's answer, a string of fields separated by single spaces ("OK 1732... 5 0 -1").
 * Used by the Redis store's encoders (redis_limits.c, redis_tasks.c). Also a growable string
 * and the pieces of a PostgreSQL array literal, for the PostgreSQL store's encoders (pg_limits.c,
 * pg_tasks.c), which keep each array parameter as a string and send it wrapped in braces.
 * Pure: no I/O.
 *
 * Invariants:
 * - A span stays valid (as an offset) however the arena grows; its bytes are followed by a NUL
 *   (so a span reads as a C string in a debugger), which its length does not count.
 * - A failed put leaves the arena and the list as they were (SLUICE_ENOMEM).
 * - The reader never reads past the end it was given and refuses an empty field, a number with
 *   a sign it does not allow, a non-digit or an overflow with SLUICE_EPARSE.
 */
#ifndef SLUICE_STORE_PACKED_H
#define SLUICE_STORE_PACKED_H

#include <stddef.h>
#include <stdint.h>

/* ---- the arena ------------------------------------------------------------------------------ */

typedef struct packed_span {
    size_t off; /* into the arena's buf */
    size_t len;
} packed_span;

typedef struct packed_list {
    packed_span *v;
    size_t n;
    size_t cap;
} packed_list;

typedef struct packed_arena {
    char *buf;
    size_t len;
    size_t cap;
} packed_arena;

/* A piece of a span built from several (a key name: prefix, tag, limit id, key). */
typedef struct packed_piece {
    const char *p;
    size_t len;
} packed_piece;

/* Appends the bytes to the arena and their span to list. Returns 0 or SLUICE_ENOMEM. */
int packed_put(packed_arena *a, packed_list *list, const void *data, size_t len);

/* Appends the concatenation of n pieces as one span. Returns 0 or SLUICE_ENOMEM. */
int packed_put_pieces(packed_arena *a, packed_list *list, const packed_piece *pc, size_t n);

/* The bytes of a span (NUL-terminated). */
static inline const char *packed_at(const packed_arena *a, packed_span s)
{
    return a->buf + s.off;
}

/* Frees the arena's and the list's memory (either may be NULL). */
void packed_free(packed_arena *a, packed_list *list);

/* ---- the reader ----------------------------------------------------------------------------- */

/* A cursor over one answer's fields. */
typedef struct packed_fields {
    const char *p;
    const char *end;
} packed_fields;

static inline void packed_fields_init(packed_fields *f, const char *s, size_t len)
{
    f->p = s;
    f->end = s + len;
}

/* The next field: 0 with *s and *len, or SLUICE_EPARSE when none is left (or it is empty). */
int packed_next(packed_fields *f, const char **s, size_t *len);

/* 1 when every field has been read. */
int packed_at_end(const packed_fields *f);

/* A decimal int64 field (an optional '-', digits, no overflow). */
int packed_i64(packed_fields *f, int64_t *out);

/* A decimal uint64 field (digits only, no overflow). */
int packed_u64(packed_fields *f, uint64_t *out);

/* An int64 field within lo..hi; *out is 0 when it is refused. */
int packed_range(packed_fields *f, int64_t lo, int64_t hi, int64_t *out);

/* ---- the PostgreSQL array literal ---------------------------------------------------------- */

/* A growable string, always NUL-terminated once anything was put (p is NULL before). */
typedef struct packed_str {
    char *p;
    size_t len;
    size_t cap;
} packed_str;

/* Room for `more` bytes and a NUL after len. Returns 0 or SLUICE_ENOMEM (s unchanged). */
int packed_str_room(packed_str *s, size_t more);

/* Appends len bytes. Returns 0 or SLUICE_ENOMEM (s unchanged). */
int packed_str_put(packed_str *s, const void *data, size_t len);

/* Cuts s back to len bytes (len <= s->len): a failed request's roll-back. */
void packed_str_cut(packed_str *s, size_t len);

/* Appends the bytes as lowercase hex (two digits a byte). Returns 0 or SLUICE_ENOMEM (s
 * unchanged). */
int packed_str_hex(packed_str *s, const void *data, size_t len);

/* Sets lit to "{" body "}": the array literal whose elements body holds. Returns 0 or
 * SLUICE_ENOMEM. */
int packed_str_array(packed_str *lit, const packed_str *body);

/* A call's time parameter: now_ns as decimal text in buf, or NULL (the database's own clock)
 * when now_ns is not positive. */
const char *packed_now_param(char buf[24], int64_t now_ns);

#endif
