/* SPDX-License-Identifier: MIT */
/*
 * Task objects: see task.h. The block is laid out as: the task, its links (flexible array), then
 * each link's key, the task key and the explicit key, NUL-terminated, back to back.
 */
#include "engine/task.h"

#include <string.h>

#include "base/alloc.h"
#include "base/hash.h"
#include "sluice/error.h"

/* Copies len bytes to p + *off, NUL-terminated, and returns where they went. */
static const char *put_str(char *p, size_t *off, const char *src, size_t len)
{
    char *dst = p + *off;

    if (len)
        memcpy(dst, src, len);
    dst[len] = '\0';
    *off += len + 1;
    return dst;
}

int task_new(const link_spec *links, size_t nlinks, const char *task_key, size_t task_key_len,
             const char *key, size_t key_len, task **out)
{
    size_t len = sizeof(task), off;
    task *t;
    char *p;

    *out = NULL;
    if (nlinks >= LINK_NONE || task_key_len > UINT32_MAX / 2 || key_len > UINT32_MAX / 2)
        return SLUICE_EINVAL;
    len += nlinks * sizeof(task_link);
    for (size_t i = 0; i < nlinks; i++) {
        if (links[i].keylen > UINT32_MAX / 2)
            return SLUICE_EINVAL;
        len += links[i].keylen + 1;
    }
    if (task_key)
        len += task_key_len + 1;
    if (key)
        len += key_len + 1;
    if (len > UINT32_MAX)
        return SLUICE_EINVAL;
    t = alloc_calloc(1, len);
    if (!t)
        return SLUICE_ENOMEM;
    t->bytes = (uint32_t)len;
    t->hidx = HEAP_NONE;
    t->park_link = LINK_NONE;
    t->fail_link = LINK_NONE;
    t->group_link = LINK_NONE;
    t->nlinks = (uint16_t)nlinks;
    p = (char *)t;
    off = sizeof(task) + nlinks * sizeof(task_link);
    for (size_t i = 0; i < nlinks; i++) {
        task_link *l = &t->links[i];

        l->lim = links[i].lim;
        l->units = links[i].units;
        l->tier = links[i].tier;
        l->flags = links[i].flags;
        l->keylen = (uint32_t)links[i].keylen;
        l->key = put_str(p, &off, links[i].key, links[i].keylen);
    }
    if (task_key) {
        t->task_key = put_str(p, &off, task_key, task_key_len);
        t->task_key_len = (uint32_t)task_key_len;
    }
    if (key) {
        t->key = put_str(p, &off, key, key_len);
        t->key_len = (uint32_t)key_len;
    }
    *out = t;
    return SLUICE_OK;
}

void task_free(task *t)
{
    if (!t)
        return;
    alloc_free(t->payload);
    alloc_free(t->fail_message);
    alloc_free(t);
}

int task_copy_payload(const char *payload, size_t len, char **out)
{
    *out = NULL;
    if (!payload)
        return SLUICE_OK;
    *out = alloc_memdup0(payload, len);
    return *out ? SLUICE_OK : SLUICE_ENOMEM;
}

size_t task_size(const task *t)
{
    return t->bytes + (t->payload ? t->payload_len + 1 : 0);
}

int task_more_urgent(const task *a, const task *b)
{
    if (a->priority != b->priority)
        return a->priority > b->priority;
    return a->seq < b->seq;
}

int task_less_ready(const void *a, const void *b)
{
    return task_more_urgent(a, b);
}

int task_less_due(const void *a, const void *b)
{
    const task *x = a, *y = b;

    if (x->due_ns != y->due_ns)
        return x->due_ns < y->due_ns;
    return x->id < y->id;
}

uint64_t task_id_hash(uint64_t id)
{
    return hash_mix(id);
}

int task_id_eq(const void *p, const void *key)
{
    return ((const task *)p)->id == *(const uint64_t *)key;
}

uint64_t task_key_hash(const char *key, size_t len)
{
    return hash_bytes_secret(key, len, 0x7a5c); /* a client's ID */
}

int task_key_eq(const void *p, const void *key)
{
    const task *t = p;
    const task_key_ref *k = key;

    return t->task_key_len == k->len && memcmp(t->task_key, k->key, k->len) == 0;
}

task *task_by_id(const sluice_engine *e, uint64_t id)
{
    return ptab_find(&e->ids, task_id_hash(id), &id, task_id_eq);
}

task *task_by_key(const sluice_engine *e, const char *key, size_t len)
{
    task_key_ref k = {key, len};

    return ptab_find(&e->task_keys, task_key_hash(key, len), &k, task_key_eq);
}
