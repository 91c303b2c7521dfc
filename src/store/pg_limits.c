/* SPDX-License-Identifier: MIT */
/*
 * The encoder and decoder of the batched limits function (pg_limits.h; the parameter and
 * answer layout is described above sluice_limits_call in src/store/pg/001_limits.sql, which this
 * file must match).
 *
 * A batch keeps each array parameter as the body of a PostgreSQL array literal, every element
 * double-quoted and escaped, so that adding a request appends to five strings and sending the
 * batch only wraps them in braces. Definitions are sent once per batch however many links name
 * them (found again by their text, newest first: a batch mostly repeats its last one).
 *
 * Invariants:
 * - a failed pgl_batch_add leaves the batch exactly as it was (every length is rolled back);
 * - keys and tags are named by store/redis_limits.c's rlim_link_names, so a (limit, key) has
 *   the same tag and the same (possibly hashed) key in both shared stores; both travel as hex,
 *   so any bytes are safe in a text parameter.
 */
#include "store/pg_limits.h"

#include <inttypes.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/grow.h"
#include "sluice/error.h"
#include "store/packed.h"

typedef struct pgl_req {
    rlim_op op;
    size_t nlinks;
} pgl_req;

/* The array parameters, in the order of sluice_limits_call's $3..$7. */
enum { PGL_DEFS, PGL_TAGS, PGL_LIMS, PGL_KEYS, PGL_REQS, PGL_NARRAYS };

struct pgl_batch {
    int audit;
    int64_t now_ns;              /* injected time; 0: clock_timestamp() */
    packed_str arr[PGL_NARRAYS]; /* array literal bodies: "e1","e2",... */
    packed_str lit[PGL_NARRAYS]; /* the literals sent: {body} */
    size_t *defoff;              /* each distinct definition's text, as a span of deftext */
    size_t *deflen;
    size_t ndefs;
    size_t capdefs;
    size_t capdeflen;
    packed_str deftext;
    pgl_req *reqs;
    size_t nreqs;
    size_t capreqs;
    char now[24];
    const char *values[PGL_CALL_NPARAMS];
};

/* Appends one array element: a comma when not the first, then the bytes double-quoted with '"'
 * and '\' escaped (array literal syntax). */
static int put_elem(packed_str *s, const char *p, size_t len)
{
    int rc = grow_array(&s->p, &s->cap, s->len + 2 * len + 4, 1, 256);

    if (rc != SLUICE_OK)
        return rc;
    if (s->len > 0)
        s->p[s->len++] = ',';
    s->p[s->len++] = '"';
    for (size_t i = 0; i < len; i++) {
        if (p[i] == '"' || p[i] == '\\')
            s->p[s->len++] = '\\';
        s->p[s->len++] = p[i];
    }
    s->p[s->len++] = '"';
    s->p[s->len] = '\0';
    return SLUICE_OK;
}

/* Appends bytes as one element of lowercase hex. */
static int put_hex_elem(packed_str *s, const char *p, size_t len)
{
    int rc = packed_str_put(s, s->len > 0 ? ",\"" : "\"", s->len > 0 ? 2 : 1);

    if (rc == SLUICE_OK)
        rc = packed_str_hex(s, p, len);
    return rc == SLUICE_OK ? packed_str_put(s, "\"", 1) : rc;
}

int pgl_batch_new(pgl_batch **out)
{
    pgl_batch *b = alloc_calloc(1, sizeof *b);

    *out = NULL;
    if (!b)
        return SLUICE_ENOMEM;
    *out = b;
    return SLUICE_OK;
}

void pgl_batch_reset(pgl_batch *b)
{
    for (int i = 0; i < PGL_NARRAYS; i++)
        b->arr[i].len = 0;
    b->ndefs = 0;
    b->deftext.len = 0;
    b->nreqs = 0;
}

void pgl_batch_free(pgl_batch *b)
{
    if (!b)
        return;
    for (int i = 0; i < PGL_NARRAYS; i++) {
        alloc_free(b->arr[i].p);
        alloc_free(b->lit[i].p);
    }
    alloc_free(b->defoff);
    alloc_free(b->deflen);
    alloc_free(b->deftext.p);
    alloc_free(b->reqs);
    alloc_free(b);
}

void pgl_batch_set_audit(pgl_batch *b, int on)
{
    b->audit = on != 0;
}

void pgl_batch_set_now(pgl_batch *b, int64_t now_ns)
{
    b->now_ns = now_ns;
}

size_t pgl_batch_count(const pgl_batch *b)
{
    return b->nreqs;
}

size_t pgl_batch_link_count(const pgl_batch *b, size_t i)
{
    return i < b->nreqs ? b->reqs[i].nlinks : 0;
}

/* The 1-based index of d's text among the batch's definitions, appending it when new. The text,
 * not the pointer, identifies a definition: a def may be freed and its memory reused between two
 * adds. */
static int def_index(pgl_batch *b, const rlim_link *l, size_t *idx)
{
    char text[RLIM_DEF_TEXT_MAX];
    size_t len = (size_t)rlim_link_def_text(l, text, sizeof text);
    int rc;

    for (size_t i = b->ndefs; i-- > 0;) {
        if (b->deflen[i] == len && memcmp(b->deftext.p + b->defoff[i], text, len) == 0) {
            *idx = i + 1;
            return SLUICE_OK;
        }
    }
    rc = grow_array(&b->defoff, &b->capdefs, b->ndefs + 1, sizeof(size_t), 16);
    if (rc == SLUICE_OK)
        rc = grow_array(&b->deflen, &b->capdeflen, b->ndefs + 1, sizeof(size_t), 16);
    if (rc == SLUICE_OK)
        rc = put_elem(&b->arr[PGL_DEFS], text, len);
    if (rc != SLUICE_OK)
        return rc;
    b->defoff[b->ndefs] = b->deftext.len;
    b->deflen[b->ndefs] = len;
    rc = packed_str_put(&b->deftext, text, len);
    if (rc != SLUICE_OK)
        return rc;
    *idx = ++b->ndefs;
    return SLUICE_OK;
}

/* Appends the request's links to the per-link arrays and its string to the requests. */
static int add_request(pgl_batch *b, rlim_op op, const rlim_link *links, size_t n,
                       const rlim_args *args)
{
    char head[128], part[64], counts[24];
    packed_str req = {0};
    int len, rc = SLUICE_OK;

    snprintf(counts, sizeof counts, "%zu", n);
    len = rlim_request_head(op, args, counts, head, sizeof head);
    rc = packed_str_put(&req, head, (size_t)len);
    for (size_t i = 0; i < n && rc == SLUICE_OK; i++) {
        rlim_names nm;
        size_t def;

        rc = rlim_link_names(&links[i], &nm);
        if (rc == SLUICE_OK)
            rc = def_index(b, &links[i], &def);
        if (rc == SLUICE_OK)
            rc = put_hex_elem(&b->arr[PGL_TAGS], nm.tag, nm.taglen);
        if (rc == SLUICE_OK)
            rc = put_elem(&b->arr[PGL_LIMS], links[i].limit_id, strlen(links[i].limit_id));
        if (rc == SLUICE_OK)
            rc = put_hex_elem(&b->arr[PGL_KEYS], nm.key, nm.keylen);
        if (rc == SLUICE_OK) {
            len = snprintf(part, sizeof part, " %zu %" PRId64, def,
                           links[i].units > 0 ? links[i].units : 1);
            rc = packed_str_put(&req, part, (size_t)len);
        }
    }
    if (rc == SLUICE_OK)
        rc = put_elem(&b->arr[PGL_REQS], req.p, req.len);
    alloc_free(req.p);
    return rc;
}

int pgl_batch_add(pgl_batch *b, rlim_op op, const rlim_link *links, size_t n, const rlim_args *args)
{
    size_t lens[PGL_NARRAYS], ndefs = b->ndefs, deftext = b->deftext.len;
    int rc;

    if (op < RLIM_DECIDE || op > RLIM_OP_LAST || op == RLIM_RATE || !links || n < 1)
        return SLUICE_EINVAL;
    if (op != RLIM_DECIDE && op != RLIM_PEEK && (n != 1 || !args))
        return SLUICE_EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!rlim_link_ok(&links[i], op) || rlim_def_adaptive(links[i].def))
            return SLUICE_EINVAL; /* no AIMD rate in sluice_limits_call: refused at start */
    if (b->nreqs > (size_t)INT32_MAX)
        return SLUICE_EINVAL;
    rc = grow_array(&b->reqs, &b->capreqs, b->nreqs + 1, sizeof(pgl_req), 16);
    if (rc != SLUICE_OK)
        return rc;
    for (int i = 0; i < PGL_NARRAYS; i++)
        lens[i] = b->arr[i].len;
    rc = add_request(b, op, links, n, args);
    if (rc != SLUICE_OK) {
        for (int i = 0; i < PGL_NARRAYS; i++)
            packed_str_cut(&b->arr[i], lens[i]);
        b->ndefs = ndefs;
        b->deftext.len = deftext;
        return rc;
    }
    b->reqs[b->nreqs].op = op;
    b->reqs[b->nreqs].nlinks = n;
    return (int)b->nreqs++;
}

int pgl_batch_params(pgl_batch *b, const char *const **values)
{
    int rc;

    *values = NULL;
    if (b->nreqs == 0)
        return SLUICE_EINVAL;
    for (int i = 0; i < PGL_NARRAYS; i++) {
        rc = packed_str_array(&b->lit[i], &b->arr[i]);
        if (rc != SLUICE_OK)
            return rc;
        b->values[2 + i] = b->lit[i].p;
    }
    b->values[0] = packed_now_param(b->now, b->now_ns);
    b->values[1] = b->audit ? "a" : "";
    *values = b->values;
    return SLUICE_OK;
}

int pgl_batch_result(const pgl_batch *b, const struct pg_result *result, size_t i, rlim_result *res,
                     sluice_decision *decisions)
{
    const PGresult *r = (const PGresult *)result;
    int rc;

    memset(res, 0, sizeof *res);
    if (i >= b->nreqs)
        return SLUICE_EINVAL;
    if (decisions)
        memset(decisions, 0, b->reqs[i].nlinks * sizeof *decisions);
    if (!r || PQresultStatus(r) != PGRES_TUPLES_OK || PQnfields(r) != 1 ||
        PQntuples(r) != (int)b->nreqs || PQgetisnull(r, (int)i, 0))
        return SLUICE_EPARSE;
    rc = rlim_parse_answer(b->reqs[i].op, b->reqs[i].nlinks, PQgetvalue(r, (int)i, 0),
                           (size_t)PQgetlength(r, (int)i, 0), res, decisions);
    if (rc != SLUICE_OK) {
        memset(res, 0, sizeof *res);
        if (decisions)
            memset(decisions, 0, b->reqs[i].nlinks * sizeof *decisions);
    }
    return rc;
}
