/* SPDX-License-Identifier: MIT */
/*
 * Where a limit's shared state lives on a Redis store (rtag.h).
 */
#include "server/rtag.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/hash.h"
#include "sluice/error.h"

/* A name as a key of the map: its bytes and length (a limit id's part before its tier). */
typedef struct name_key {
    const char *s;
    size_t len;
} name_key;

static int name_eq(const void *p, const void *key)
{
    const name_key *k = key;
    const char *name = p;

    return strncmp(name, k->s, k->len) == 0 && name[k->len] == '\0';
}

void rtag_map_init(rtag_map *m)
{
    ptab_init(&m->names);
    m->arena = NULL;
}

void rtag_map_free(rtag_map *m)
{
    ptab_free(&m->names);
    alloc_free(m->arena);
    m->arena = NULL;
}

static int map_has(const rtag_map *m, const char *s, size_t len)
{
    name_key k = {s, len};

    return ptab_find(&m->names, hash_bytes(s, len), &k, name_eq) != NULL;
}

int rtag_map_build(rtag_map *m, const sluice_config *c)
{
    size_t links = 0, bytes = 0, at = 0;

    rtag_map_free(m);
    for (size_t i = 0; c && i < c->ntypes; i++)
        for (size_t k = 0; k < c->types[i].nlimits; k++) {
            links++;
            bytes += strlen(c->types[i].limits[k]) + 1;
        }
    if (links == 0)
        return 0;
    m->arena = alloc_malloc(bytes);
    if (!m->arena || ptab_reserve(&m->names, links) != 0) {
        rtag_map_free(m);
        return SLUICE_ENOMEM;
    }
    for (size_t i = 0; i < c->ntypes; i++)
        for (size_t k = 0; k < c->types[i].nlimits; k++) {
            const char *name = c->types[i].limits[k];
            size_t len = strlen(name);

            if (map_has(m, name, len))
                continue;
            memcpy(m->arena + at, name, len + 1);
            /* Reserved above: an insert cannot fail. */
            (void)ptab_insert(&m->names, hash_bytes(name, len), m->arena + at);
            at += len + 1;
        }
    return 0;
}

int rtag_map_queued(const rtag_map *m, const char *limit_id)
{
    size_t len = strlen(limit_id);
    const char *slash;

    if (m->names.n == 0)
        return 0;
    if (map_has(m, limit_id, len))
        return 1;
    /* A tier's state is keyed "name/tier": it lives where its limit does. */
    slash = memchr(limit_id, '/', len);
    return slash && map_has(m, limit_id, (size_t)(slash - limit_id));
}

/* 1 when a type of c names limit `name`. */
static int config_names(const sluice_config *c, const char *name)
{
    for (size_t i = 0; c && i < c->ntypes; i++)
        for (size_t k = 0; k < c->types[i].nlimits; k++)
            if (strcmp(c->types[i].limits[k], name) == 0)
                return 1;
    return 0;
}

/* The first limit a type of `in` names that no type of `out` does, or NULL. */
static const char *first_moved(const sluice_config *in, const sluice_config *out)
{
    for (size_t i = 0; in && i < in->ntypes; i++)
        for (size_t k = 0; k < in->types[i].nlimits; k++)
            if (!config_names(out, in->types[i].limits[k]))
                return in->types[i].limits[k];
    return NULL;
}

const char *rtag_cluster_moves(const sluice_config *prev, const sluice_config *next, char *buf,
                               size_t len)
{
    const char *joins = first_moved(next, prev), *leaves = joins ? NULL : first_moved(prev, next);

    if (!joins && !leaves)
        return NULL;
    snprintf(buf, len,
             "limit \"%s\" would %s the task queue's Redis Cluster slot (a limit that a type "
             "names keeps its state in the queue's slot, {" RTAG_QUEUE "}, so that a claim "
             "decides the chain with the task), and the nodes still running the old file would "
             "keep deciding it in the old slot; to change which limits the types name, stop "
             "every node and start them with the new file (the limit then starts afresh in "
             "its new slot; docs/cluster.md, \"On Redis Cluster\")",
             joins ? joins : leaves, joins ? "move into" : "move out of");
    return buf;
}
