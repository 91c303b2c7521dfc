/* SPDX-License-Identifier: MIT */
/*
 * The arena of a batched script call's strings and the reader of its answers' fields
 * (packed.h), shared by the Redis store's encoders so that both read numbers by one rule; and
 * the growable string the PostgreSQL store's encoders build their array literals in.
 */
#include "store/packed.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/grow.h"
#include "sluice/error.h"

/* Room for len more bytes and their NUL, and one more span; nothing written yet. */
static int reserve(packed_arena *a, packed_list *list, size_t len)
{
    int rc = grow_array(&a->buf, &a->cap, a->len + len + 1, 1, 256);

    if (rc == SLUICE_OK)
        rc = grow_array(&list->v, &list->cap, list->n + 1, sizeof(packed_span), 16);
    return rc;
}

int packed_put(packed_arena *a, packed_list *list, const void *data, size_t len)
{
    packed_piece pc = {data, len};

    return packed_put_pieces(a, list, &pc, 1);
}

int packed_put_pieces(packed_arena *a, packed_list *list, const packed_piece *pc, size_t n)
{
    size_t total = 0;
    int rc;

    for (size_t i = 0; i < n; i++)
        total += pc[i].len;
    rc = reserve(a, list, total);
    if (rc != SLUICE_OK)
        return rc;
    list->v[list->n].off = a->len;
    list->v[list->n].len = total;
    list->n++;
    for (size_t i = 0; i < n; i++) {
        if (pc[i].len > 0)
            memcpy(a->buf + a->len, pc[i].p, pc[i].len);
        a->len += pc[i].len;
    }
    a->buf[a->len++] = '\0';
    return SLUICE_OK;
}

void packed_free(packed_arena *a, packed_list *list)
{
    if (a) {
        alloc_free(a->buf);
        memset(a, 0, sizeof(*a));
    }
    if (list) {
        alloc_free(list->v);
        memset(list, 0, sizeof(*list));
    }
}

int packed_next(packed_fields *f, const char **s, size_t *len)
{
    const char *e;

    if (f->p > f->end)
        return SLUICE_EPARSE;
    e = memchr(f->p, ' ', (size_t)(f->end - f->p));
    if (!e)
        e = f->end;
    if (e == f->p)
        return SLUICE_EPARSE;
    *s = f->p;
    *len = (size_t)(e - f->p);
    f->p = e + 1;
    return SLUICE_OK;
}

int packed_at_end(const packed_fields *f)
{
    return f->p > f->end;
}

/* The digits s[0..len) as a value no larger than lim. */
static int digits(const char *s, size_t len, uint64_t lim, uint64_t *out)
{
    uint64_t v = 0;

    if (len == 0)
        return SLUICE_EPARSE;
    for (size_t i = 0; i < len; i++) {
        unsigned d = (unsigned char)s[i] - '0';

        if (d > 9 || v > (lim - d) / 10)
            return SLUICE_EPARSE;
        v = v * 10 + d;
    }
    *out = v;
    return SLUICE_OK;
}

int packed_i64(packed_fields *f, int64_t *out)
{
    const char *s;
    size_t len;
    uint64_t v;
    int negative;

    if (packed_next(f, &s, &len) != SLUICE_OK || len > 20)
        return SLUICE_EPARSE;
    negative = s[0] == '-';
    if (digits(s + negative, len - (size_t)negative,
               negative ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX, &v) != SLUICE_OK)
        return SLUICE_EPARSE;
    /* -(v - 1) - 1 reaches INT64_MIN without overflowing. */
    *out = !negative ? (int64_t)v : v == 0 ? 0 : -(int64_t)(v - 1) - 1;
    return SLUICE_OK;
}

int packed_u64(packed_fields *f, uint64_t *out)
{
    const char *s;
    size_t len;

    if (packed_next(f, &s, &len) != SLUICE_OK || len > 20)
        return SLUICE_EPARSE;
    return digits(s, len, UINT64_MAX, out);
}

int packed_range(packed_fields *f, int64_t lo, int64_t hi, int64_t *out)
{
    int64_t v = 0;

    *out = 0;
    if (packed_i64(f, &v) != SLUICE_OK || v < lo || v > hi)
        return SLUICE_EPARSE;
    *out = v;
    return SLUICE_OK;
}

int packed_str_room(packed_str *s, size_t more)
{
    return grow_array(&s->p, &s->cap, s->len + more + 1, 1, 256);
}

int packed_str_put(packed_str *s, const void *data, size_t len)
{
    int rc = packed_str_room(s, len);

    if (rc != SLUICE_OK)
        return rc;
    if (len > 0)
        memcpy(s->p + s->len, data, len);
    s->len += len;
    s->p[s->len] = '\0';
    return SLUICE_OK;
}

void packed_str_cut(packed_str *s, size_t len)
{
    s->len = len;
    if (s->p)
        s->p[len] = '\0';
}

int packed_str_hex(packed_str *s, const void *data, size_t len)
{
    static const char digits[] = "0123456789abcdef";
    const unsigned char *p = data;
    int rc = packed_str_room(s, 2 * len);

    if (rc != SLUICE_OK)
        return rc;
    for (size_t i = 0; i < len; i++) {
        s->p[s->len++] = digits[p[i] >> 4];
        s->p[s->len++] = digits[p[i] & 15];
    }
    s->p[s->len] = '\0';
    return SLUICE_OK;
}

int packed_str_array(packed_str *lit, const packed_str *body)
{
    int rc;

    lit->len = 0;
    rc = packed_str_room(lit, body->len + 2);
    if (rc != SLUICE_OK)
        return rc;
    lit->p[lit->len++] = '{';
    if (body->len > 0)
        memcpy(lit->p + lit->len, body->p, body->len);
    lit->len += body->len;
    lit->p[lit->len++] = '}';
    lit->p[lit->len] = '\0';
    return SLUICE_OK;
}

const char *packed_now_param(char buf[24], int64_t now_ns)
{
    if (now_ns <= 0)
        return NULL;
    snprintf(buf, 24, "%" PRId64, now_ns);
    return buf;
}
