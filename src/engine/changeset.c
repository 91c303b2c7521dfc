/* SPDX-License-Identifier: MIT */
/*
 * A change set (see changeset.h): a set of task ids and five small maps keyed by bytes, each an
 * array in insertion order (so a walk is a scan of it) indexed by a pointer table (base/ptab.h)
 * whose "pointers" are entry numbers + 1, hashed with base/hash.h. An entry of a map can be
 * killed (a purged key state) without being unlinked; a later upsert of the same bytes revives
 * it. changeset_clear empties every part and gives back the memory of an index grown past
 * KEEP_SLOTS, so a burst does not pin memory for good.
 */
#include "engine/changeset.h"

#include <string.h>

#include "base/alloc.h"
#include "base/hash.h"
#include "base/ptab.h"
#include "sluice/error.h"

/* Indexes larger than this are freed rather than kept empty by changeset_clear. */
#define KEEP_SLOTS 4096u

/* An entry number as the pointer a ptab files (0 would be the empty slot: numbers start at 1). */
#define AS_REF(i) ((void *)(uintptr_t)((i) + 1))
#define REF_AT(p) ((size_t)(uintptr_t)(p)-1)

/* Empties an index before its entries are dropped, when it grew past KEEP_SLOTS (a small one
 * is emptied entry by entry by its owner, which keeps its slots for the next turn). Returns 1
 * when it did. */
static int index_drop_if_big(ptab *t)
{
    if (t->cap <= KEEP_SLOTS)
        return 0;
    ptab_free(t);
    ptab_init(t);
    return 1;
}

/* ---- A set of task ids ------------------------------------------------------------------- */

typedef struct idset {
    uint64_t *ids;    /* in insertion order */
    uint64_t *hashes; /* hash_mix of each id */
    size_t n, cap;    /* ids held and allocated */
    ptab index;       /* entry numbers + 1, by hash */
} idset;

/* What an index lookup compares an entry with. */
typedef struct id_probe {
    const idset *s;
    uint64_t id;
} id_probe;

static int id_eq(const void *p, const void *key)
{
    const id_probe *q = key;

    return q->s->ids[REF_AT(p)] == q->id;
}

static int idset_add(idset *s, uint64_t id)
{
    uint64_t h = hash_mix(id);
    id_probe q = {s, id};

    if (ptab_find(&s->index, h, &q, id_eq))
        return SLUICE_OK;
    if (ptab_reserve(&s->index, 1) != SLUICE_OK)
        return SLUICE_ENOMEM;
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        uint64_t *ids = alloc_realloc(s->ids, cap * sizeof *ids);

        if (!ids)
            return SLUICE_ENOMEM;
        s->ids = ids;
        ids = alloc_realloc(s->hashes, cap * sizeof *ids);
        if (!ids)
            return SLUICE_ENOMEM; /* ids grew alone: harmless, cap is the smaller */
        s->hashes = ids;
        s->cap = cap;
    }
    s->ids[s->n] = id;
    s->hashes[s->n] = h;
    (void)ptab_insert(&s->index, h, AS_REF(s->n)); /* reserved: cannot fail */
    s->n++;
    return SLUICE_OK;
}

static void idset_clear(idset *s)
{
    if (!index_drop_if_big(&s->index))
        for (size_t i = 0; i < s->n; i++)
            (void)ptab_remove(&s->index, s->hashes[i], AS_REF(i));
    s->n = 0;
    if (s->cap > KEEP_SLOTS) {
        alloc_free(s->ids);
        alloc_free(s->hashes);
        s->ids = s->hashes = NULL;
        s->cap = 0;
    }
}

static void idset_free(idset *s)
{
    ptab_free(&s->index);
    alloc_free(s->ids);
    alloc_free(s->hashes);
}

/* ---- A map keyed by bytes ---------------------------------------------------------------- */

typedef struct bentry {
    char *k;       /* owned key bytes, NUL-terminated (not counted in klen) */
    size_t klen;   /* bytes of k */
    size_t idlen;  /* key states: bytes of the limit id at the front of k */
    void *v;       /* owned value bytes, or NULL */
    size_t vlen;   /* bytes of v */
    int op;        /* limits: the sluice_limit_def_op */
    int live;      /* 0: killed (skipped by walks, revived by an upsert) */
    uint64_t hash; /* of the key bytes */
} bentry;

typedef struct bmap {
    bentry *ents;  /* in insertion order */
    size_t n, cap; /* entries used and allocated */
    size_t live;   /* entries alive */
    ptab index;    /* entry numbers + 1, by hash */
} bmap;

typedef struct bytes_probe {
    const bmap *m;
    const char *k;
    size_t klen;
} bytes_probe;

static int bytes_eq(const void *p, const void *key)
{
    const bytes_probe *q = key;
    const bentry *e = &q->m->ents[REF_AT(p)];

    return e->klen == q->klen && memcmp(e->k, q->k, q->klen) == 0;
}

static bentry *bmap_find(const bmap *m, const char *k, size_t klen, uint64_t h)
{
    bytes_probe q = {m, k, klen};
    void *p = ptab_find(&m->index, h, &q, bytes_eq);

    return p ? &m->ents[REF_AT(p)] : NULL;
}

/* Finds or adds the entry of k (made of an id of idlen bytes, and for key states a NUL and the
 * key); a new or revived entry is live with no value. Returns NULL when out of memory. */
static bentry *bmap_upsert(bmap *m, const char *k, size_t klen, size_t idlen)
{
    uint64_t h = hash_bytes(k, klen);
    bentry *e = bmap_find(m, k, klen, h);
    char *copy;

    if (e) {
        if (!e->live) {
            e->live = 1;
            m->live++;
        }
        return e;
    }
    if (ptab_reserve(&m->index, 1) != SLUICE_OK)
        return NULL;
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 32;
        bentry *ents = alloc_realloc(m->ents, cap * sizeof *ents);

        if (!ents)
            return NULL;
        m->ents = ents;
        m->cap = cap;
    }
    copy = alloc_memdup0(k, klen);
    if (!copy)
        return NULL;
    e = &m->ents[m->n];
    memset(e, 0, sizeof *e);
    e->k = copy;
    e->klen = klen;
    e->idlen = idlen;
    e->hash = h;
    e->live = 1;
    (void)ptab_insert(&m->index, h, AS_REF(m->n)); /* reserved: cannot fail */
    m->n++;
    m->live++;
    return e;
}

/* Sets an entry's value to a copy of len bytes at v (NULL: no value). Returns 0 or ENOMEM
 * (the old value kept). */
static int bentry_set(bentry *e, const void *v, size_t len)
{
    void *copy = NULL;

    if (v) {
        copy = alloc_malloc(len ? len : 1);
        if (!copy)
            return SLUICE_ENOMEM;
        memcpy(copy, v, len);
    }
    alloc_free(e->v);
    e->v = copy;
    e->vlen = v ? len : 0;
    return SLUICE_OK;
}

static void bentry_kill(bmap *m, bentry *e)
{
    if (!e->live)
        return;
    e->live = 0;
    m->live--;
    alloc_free(e->v);
    e->v = NULL;
    e->vlen = 0;
}

static void bmap_clear(bmap *m)
{
    if (!index_drop_if_big(&m->index))
        for (size_t i = 0; i < m->n; i++)
            (void)ptab_remove(&m->index, m->ents[i].hash, AS_REF(i));
    for (size_t i = 0; i < m->n; i++) {
        alloc_free(m->ents[i].k);
        alloc_free(m->ents[i].v);
    }
    m->n = 0;
    m->live = 0;
    if (m->cap > KEEP_SLOTS) {
        alloc_free(m->ents);
        m->ents = NULL;
        m->cap = 0;
    }
}

static void bmap_free(bmap *m)
{
    bmap_clear(m);
    ptab_free(&m->index);
    alloc_free(m->ents);
}

/* The next live entry at or after *pos, or NULL. */
static const bentry *bmap_next(const bmap *m, size_t *pos)
{
    while (*pos < m->n) {
        const bentry *e = &m->ents[(*pos)++];

        if (e->live)
            return e;
    }
    return NULL;
}

/* ---- The change set ------------------------------------------------------------------------ */

struct sluice_changes {
    idset tasks; /* task ids */
    bmap series; /* series names */
    bmap limits; /* limit names: op and spec */
    bmap purges; /* limit ids whose stored key rows are to be deleted */
    bmap keys;   /* "id\0key": the state blob (no value: delete the key) */
    bmap known;  /* limit ids that may have key rows in the store (not cleared) */
};

int changeset_new(changeset **out)
{
    *out = alloc_calloc(1, sizeof **out);
    return *out ? SLUICE_OK : SLUICE_ENOMEM;
}

void changeset_free(changeset *d)
{
    if (!d)
        return;
    idset_free(&d->tasks);
    bmap_free(&d->series);
    bmap_free(&d->limits);
    bmap_free(&d->purges);
    bmap_free(&d->keys);
    bmap_free(&d->known);
    alloc_free(d);
}

int changeset_add_task(changeset *d, uint64_t id)
{
    if (id == 0)
        return SLUICE_EINVAL;
    return idset_add(&d->tasks, id);
}

int changeset_add_series(changeset *d, const char *name)
{
    return bmap_upsert(&d->series, name, strlen(name), strlen(name)) ? SLUICE_OK : SLUICE_ENOMEM;
}

int changeset_set_limit(changeset *d, const char *name, sluice_limit_def_op op, const char *spec)
{
    size_t len = strlen(name);
    uint64_t h = hash_bytes(name, len);
    int existed = bmap_find(&d->limits, name, len, h) != NULL;
    bentry *e = bmap_upsert(&d->limits, name, len, len);

    if (!e)
        return SLUICE_ENOMEM;
    if (bentry_set(e, op == SLUICE_LIMIT_DEF_SET && spec ? spec : NULL,
                   op == SLUICE_LIMIT_DEF_SET && spec ? strlen(spec) + 1 : 0) != SLUICE_OK) {
        if (!existed)
            bentry_kill(&d->limits, e); /* leave no half-made entry behind */
        return SLUICE_ENOMEM;
    }
    e->op = (int)op;
    return SLUICE_OK;
}

/* Bytes of the limit name at the front of limit id `id` (a name holds no '/'). */
static size_t name_len(const char *id, size_t idlen)
{
    const char *slash = memchr(id, '/', idlen);

    return slash ? (size_t)(slash - id) : idlen;
}

int changeset_note_stored(changeset *d, const char *id)
{
    size_t idlen = strlen(id), nlen = name_len(id, idlen);
    bentry *e = bmap_upsert(&d->known, id, nlen, nlen);
    char *ids;

    if (!e)
        return SLUICE_ENOMEM;
    /* The ids of one limit, each NUL-terminated, one after the other: a purge finds them by the
     * limit's name, not by a walk of every limit's. */
    for (size_t at = 0; at < e->vlen; at += strlen((char *)e->v + at) + 1)
        if (strcmp((char *)e->v + at, id) == 0)
            return SLUICE_OK;
    ids = alloc_realloc(e->v, e->vlen + idlen + 1);
    if (!ids)
        return SLUICE_ENOMEM; /* an entry with no ids left behind is harmless */
    memcpy(ids + e->vlen, id, idlen + 1);
    e->v = ids;
    e->vlen += idlen + 1;
    return SLUICE_OK;
}

int changeset_put_key(changeset *d, const char *id, const char *key, size_t keylen,
                      const void *state, size_t len)
{
    size_t idlen = strlen(id), klen = idlen + 1 + keylen;
    char stack[512], *k = klen <= sizeof stack ? stack : alloc_malloc(klen);
    bentry *e;
    int rc = SLUICE_ENOMEM;

    if (!k)
        return SLUICE_ENOMEM;
    memcpy(k, id, idlen);
    k[idlen] = '\0';
    if (keylen)
        memcpy(k + idlen + 1, key, keylen);
    if (changeset_note_stored(d, id) != SLUICE_OK)
        goto done;
    e = bmap_upsert(&d->keys, k, klen, idlen);
    if (e)
        rc = bentry_set(e, state && len ? state : NULL, state && len ? len : 0);
    if (e && rc != SLUICE_OK && !e->v)
        bentry_kill(&d->keys, e);
done:
    if (k != stack)
        alloc_free(k);
    return rc;
}

/* Returns 1 when limit id `id` (of idlen bytes) belongs to the limit `name` (nlen bytes). */
static int id_of(const char *id, size_t idlen, const char *name, size_t nlen)
{
    return idlen >= nlen && memcmp(id, name, nlen) == 0 && (idlen == nlen || id[nlen] == '/');
}

/* Queues the deletion of every known id of `name` (an id, as changeset_purge_limit takes) but
 * the name itself, and forgets them as known. Returns 0 or SLUICE_ENOMEM (the ones queued
 * already are harmless deletions, and all stay known). */
static int purge_known(changeset *d, const char *name, size_t nlen)
{
    size_t plen = name_len(name, nlen), keep = 0;
    bentry *e = bmap_find(&d->known, name, plen, hash_bytes(name, plen));
    char *ids;

    if (!e || !e->live)
        return SLUICE_OK;
    ids = e->v;
    for (size_t at = 0; at < e->vlen; at += strlen(ids + at) + 1)
        if (id_of(ids + at, strlen(ids + at), name, nlen) &&
            !bmap_upsert(&d->purges, ids + at, strlen(ids + at), strlen(ids + at)))
            return SLUICE_ENOMEM;
    /* Every one queued: forget them, keeping the others of the limit in order. */
    for (size_t at = 0; at < e->vlen;) {
        size_t len = strlen(ids + at) + 1;

        if (!id_of(ids + at, len - 1, name, nlen)) {
            memmove(ids + keep, ids + at, len);
            keep += len;
        }
        at += len;
    }
    e->vlen = keep;
    if (keep == 0)
        bentry_kill(&d->known, e);
    return SLUICE_OK;
}

int changeset_purge_limit(changeset *d, const char *name)
{
    size_t nlen = strlen(name);

    /* Queue the deletions first: once they are in, nothing below can fail. */
    if (!bmap_upsert(&d->purges, name, nlen, nlen) || purge_known(d, name, nlen) != SLUICE_OK)
        return SLUICE_ENOMEM;
    if (d->keys.live)
        for (size_t i = 0; i < d->keys.n; i++)
            if (d->keys.ents[i].live && id_of(d->keys.ents[i].k, d->keys.ents[i].idlen, name, nlen))
                bentry_kill(&d->keys, &d->keys.ents[i]);
    return SLUICE_OK;
}

int changeset_next_task(const changeset *d, size_t *pos, uint64_t *id)
{
    if (*pos >= d->tasks.n)
        return 0;
    *id = d->tasks.ids[(*pos)++];
    return 1;
}

int changeset_next_series(const changeset *d, size_t *pos, const char **name)
{
    const bentry *e = bmap_next(&d->series, pos);

    if (!e)
        return 0;
    *name = e->k;
    return 1;
}

int changeset_next_limit(const changeset *d, size_t *pos, const char **name,
                         sluice_limit_def_op *op, const char **spec)
{
    const bentry *e = bmap_next(&d->limits, pos);

    if (!e)
        return 0;
    *name = e->k;
    *op = (sluice_limit_def_op)e->op;
    *spec = e->v;
    return 1;
}

int changeset_next_purge(const changeset *d, size_t *pos, const char **id)
{
    const bentry *e = bmap_next(&d->purges, pos);

    if (!e)
        return 0;
    *id = e->k;
    return 1;
}

int changeset_next_key(const changeset *d, size_t *pos, const char **id, const char **key,
                       size_t *keylen, const void **state, size_t *len)
{
    const bentry *e = bmap_next(&d->keys, pos);

    if (!e)
        return 0;
    *id = e->k;
    *key = e->k + e->idlen + 1;
    *keylen = e->klen - e->idlen - 1;
    *state = e->v;
    *len = e->vlen;
    return 1;
}

void changeset_get_counts(const changeset *d, sluice_changes_counts *out)
{
    out->tasks = d->tasks.n;
    out->series = d->series.live;
    out->limits = d->limits.live;
    out->purges = d->purges.live;
    out->keys = d->keys.live;
    out->lost = 0;
}

int changeset_has_changes(const changeset *d)
{
    return d->tasks.n || d->series.live || d->limits.live || d->purges.live;
}

int changeset_is_empty(const changeset *d)
{
    return !changeset_has_changes(d) && d->keys.live == 0;
}

void changeset_clear(changeset *d)
{
    idset_clear(&d->tasks);
    bmap_clear(&d->series);
    bmap_clear(&d->limits);
    bmap_clear(&d->purges);
    bmap_clear(&d->keys);
}

/* Swaps the recorded changes of a and b (not their known ids). */
static void swap_changes(changeset *a, changeset *b)
{
    changeset t = *a;

    a->tasks = b->tasks;
    a->series = b->series;
    a->limits = b->limits;
    a->purges = b->purges;
    a->keys = b->keys;
    b->tasks = t.tasks;
    b->series = t.series;
    b->limits = t.limits;
    b->purges = t.purges;
    b->keys = t.keys;
}

/* changeset_merge into a dst with no change recorded: src's changes are moved, not copied (a
 * reload's hundreds of thousands of purges and definitions cost no allocation), then dst's known
 * ids are purged as src's purges say and src's key ids become known in dst. On failure the
 * changes go back to src, with at most some harmless purges more. */
static int take_changes(changeset *dst, changeset *src)
{
    swap_changes(dst, src);
    for (size_t i = 0; i < dst->purges.n; i++) {
        const bentry *e = &dst->purges.ents[i];

        /* e->k is its own allocation: valid while purge_known grows the entries. */
        if (e->live && purge_known(dst, e->k, e->klen) != SLUICE_OK)
            goto fail;
    }
    for (size_t i = 0; i < dst->keys.n; i++) {
        const bentry *e = &dst->keys.ents[i];

        if (e->live && changeset_note_stored(dst, e->k) != SLUICE_OK)
            goto fail;
    }
    return SLUICE_OK;
fail:
    swap_changes(dst, src);
    return SLUICE_ENOMEM;
}

int changeset_merge(changeset *dst, changeset *src)
{
    const bentry *e;
    size_t pos;
    uint64_t id;

    if (changeset_is_empty(dst))
        return take_changes(dst, src);

    /* Purges first: they delete what dst recorded before them, never what src adds after. */
    for (pos = 0; (e = bmap_next(&src->purges, &pos)) != NULL;)
        if (changeset_purge_limit(dst, e->k) != SLUICE_OK)
            return SLUICE_ENOMEM;
    for (pos = 0; (e = bmap_next(&src->keys, &pos)) != NULL;)
        if (changeset_put_key(dst, e->k, e->k + e->idlen + 1, e->klen - e->idlen - 1, e->v,
                              e->vlen) != SLUICE_OK)
            return SLUICE_ENOMEM;
    for (pos = 0; (e = bmap_next(&src->limits, &pos)) != NULL;)
        if (changeset_set_limit(dst, e->k, (sluice_limit_def_op)e->op, e->v) != SLUICE_OK)
            return SLUICE_ENOMEM;
    for (pos = 0; (e = bmap_next(&src->series, &pos)) != NULL;)
        if (changeset_add_series(dst, e->k) != SLUICE_OK)
            return SLUICE_ENOMEM;
    for (pos = 0; changeset_next_task(src, &pos, &id);)
        if (changeset_add_task(dst, id) != SLUICE_OK)
            return SLUICE_ENOMEM;
    return SLUICE_OK;
}
