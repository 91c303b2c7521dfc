/* SPDX-License-Identifier: MIT */
/*
 * The pointer table: see ptab.h.
 */
#include "base/ptab.h"

#include <string.h>

#include "sluice/error.h"
#include "base/alloc.h"

void ptab_init(ptab *t)
{
    t->slots = NULL;
    t->cap = 0;
    t->n = 0;
    t->fixed = 0;
}

void ptab_init_fixed(ptab *t, ptab_slot *slots, size_t cap)
{
    t->slots = slots;
    t->cap = cap;
    t->n = 0;
    t->fixed = 1;
}

void ptab_free(ptab *t)
{
    if (!t->fixed)
        alloc_free(t->slots);
    ptab_init(t);
}

static void place(ptab_slot *slots, size_t cap, uint64_t hash, void *p)
{
    size_t mask = cap - 1, i = (size_t)hash & mask;

    while (slots[i].p)
        i = (i + 1) & mask;
    slots[i].hash = hash;
    slots[i].p = p;
}

static int grow(ptab *t, size_t need)
{
    size_t cap = t->cap ? t->cap : 16;
    ptab_slot *slots;

    if (t->fixed)
        return need > cap / 4 * 3 ? SLUICE_ENOMEM : SLUICE_OK;
    while (need > cap / 4 * 3) {
        if (cap > SIZE_MAX / 2 / sizeof *slots)
            return SLUICE_ENOMEM;
        cap *= 2;
    }
    if (cap == t->cap)
        return SLUICE_OK;
    slots = alloc_calloc(cap, sizeof *slots);
    if (!slots)
        return SLUICE_ENOMEM;
    for (size_t i = 0; i < t->cap; i++)
        if (t->slots[i].p)
            place(slots, cap, t->slots[i].hash, t->slots[i].p);
    alloc_free(t->slots);
    t->slots = slots;
    t->cap = cap;
    return SLUICE_OK;
}

int ptab_reserve(ptab *t, size_t more)
{
    if (more > SIZE_MAX - t->n)
        return SLUICE_ENOMEM;
    return grow(t, t->n + more);
}

void ptab_clear(ptab *t)
{
    if (t->cap)
        memset(t->slots, 0, t->cap * sizeof *t->slots);
    t->n = 0;
}

int ptab_insert(ptab *t, uint64_t hash, void *p)
{
    int rc = grow(t, t->n + 1);

    if (rc != SLUICE_OK)
        return rc;
    place(t->slots, t->cap, hash, p);
    t->n++;
    return SLUICE_OK;
}

int ptab_remove(ptab *t, uint64_t hash, const void *p)
{
    size_t mask, i, j;

    if (!t->cap)
        return SLUICE_ENOTFOUND;
    mask = t->cap - 1;
    for (i = (size_t)hash & mask; t->slots[i].p != p; i = (i + 1) & mask)
        if (!t->slots[i].p)
            return SLUICE_ENOTFOUND;
    /* Backward-shift deletion: pull later members of the probe run into the hole when their
     * home slot does not lie cyclically in (hole, j]. */
    for (j = (i + 1) & mask; t->slots[j].p; j = (j + 1) & mask) {
        size_t home = (size_t)t->slots[j].hash & mask;

        if (((j - home) & mask) >= ((j - i) & mask)) {
            t->slots[i] = t->slots[j];
            i = j;
        }
    }
    t->slots[i].p = NULL;
    t->slots[i].hash = 0;
    t->n--;
    return SLUICE_OK;
}

void *ptab_next(const ptab *t, size_t *pos)
{
    while (*pos < t->cap) {
        void *p = t->slots[(*pos)++].p;

        if (p)
            return p;
    }
    return NULL;
}

size_t ptab_bytes(const ptab *t)
{
    return t->cap * sizeof *t->slots;
}

void ptab_shrink(ptab *t)
{
    size_t cap = 16;
    ptab_slot *slots;

    if (t->fixed || t->cap == 0 || t->n >= t->cap / 8)
        return;
    if (t->n == 0) {
        ptab_free(t);
        return;
    }
    while (t->n > cap / 8 * 3)
        cap *= 2;
    if (cap >= t->cap)
        return;
    slots = alloc_calloc(cap, sizeof *slots);
    if (!slots)
        return;
    for (size_t i = 0; i < t->cap; i++)
        if (t->slots[i].p)
            place(slots, cap, t->slots[i].hash, t->slots[i].p);
    alloc_free(t->slots);
    t->slots = slots;
    t->cap = cap;
}
