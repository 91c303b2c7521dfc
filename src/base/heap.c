/* SPDX-License-Identifier: MIT */
/*
 * The indexed binary heap: see heap.h (the sifts are inline there).
 */
#include "base/heap.h"

#include <string.h>

#include "sluice/error.h"
#include "base/alloc.h"
#include "base/grow.h"

void heap_init(heap *h, heap_less_fn less, size_t idx_off)
{
    h->items = NULL;
    h->n = 0;
    h->cap = 0;
    h->less = less;
    h->idx_off = idx_off;
}

void heap_free(heap *h)
{
    alloc_free(h->items);
    h->items = NULL;
    h->n = 0;
    h->cap = 0;
}

int heap_reserve(heap *h, size_t n)
{
    return grow_array(&h->items, &h->cap, n, sizeof *h->items, 8);
}

int heap_prepare(const heap *h, size_t n, void ***items, size_t *cap)
{
    size_t c = h->cap;

    *items = NULL;
    *cap = c;
    return n <= h->cap ? SLUICE_OK : grow_array(items, cap, n, sizeof **items, 8);
}

void heap_install(heap *h, void **items, size_t cap)
{
    if (!items)
        return;
    if (h->n)
        memcpy(items, h->items, h->n * sizeof *items);
    alloc_free(h->items);
    h->items = items;
    h->cap = cap;
}

int heap_push(heap *h, void *item)
{
    return heap_push_by(h, item, h->less);
}

void heap_remove(heap *h, void *item)
{
    heap_remove_by(h, item, h->less);
}

void *heap_pop(heap *h)
{
    void *top = heap_top(h);

    if (top)
        heap_remove(h, top);
    return top;
}

void heap_update(heap *h, void *item)
{
    heap_update_by(h, item, h->less);
}

void heap_trim(heap *h, size_t min_cap)
{
    size_t cap = h->cap;
    void **items;

    while (cap / 2 >= min_cap && cap / 2 > 0 && h->n < cap / 4)
        cap /= 2;
    if (cap == h->cap)
        return;
    items = alloc_realloc(h->items, cap * sizeof *items);
    if (!items)
        return;
    h->items = items;
    h->cap = cap;
}

void *heap_at(const heap *h, size_t i)
{
    return h->items[i];
}

size_t heap_bytes(const heap *h)
{
    return h->cap * sizeof *h->items;
}
