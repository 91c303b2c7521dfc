/* SPDX-License-Identifier: MIT */
/*
 * The indexed binary heap: see heap.h. Sift-up and sift-down move a hole rather than swapping, and
 * write each moved item's index as it lands.
 */
#include "base/heap.h"

#include <string.h>

#include "sluice/error.h"
#include "base/alloc.h"
#include "base/grow.h"

static void set_index(const heap *h, void *item, size_t i)
{
    memcpy((char *)item + h->idx_off, &i, sizeof i);
}

size_t heap_index(const heap *h, const void *item)
{
    size_t i;

    memcpy(&i, (const char *)item + h->idx_off, sizeof i);
    return i;
}

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
    sluice_free(h->items);
    h->items = NULL;
    h->n = 0;
    h->cap = 0;
}

int heap_reserve(heap *h, size_t n)
{
    return grow_array(&h->items, &h->cap, n, sizeof *h->items, 8);
}

static void sift_up(heap *h, size_t i, void *item)
{
    while (i > 0) {
        size_t parent = (i - 1) / 2;

        if (!h->less(item, h->items[parent]))
            break;
        h->items[i] = h->items[parent];
        set_index(h, h->items[i], i);
        i = parent;
    }
    h->items[i] = item;
    set_index(h, item, i);
}

static void sift_down(heap *h, size_t i, void *item)
{
    for (;;) {
        size_t child = 2 * i + 1;

        if (child >= h->n)
            break;
        if (child + 1 < h->n && h->less(h->items[child + 1], h->items[child]))
            child++;
        if (!h->less(h->items[child], item))
            break;
        h->items[i] = h->items[child];
        set_index(h, h->items[i], i);
        i = child;
    }
    h->items[i] = item;
    set_index(h, item, i);
}

int heap_push(heap *h, void *item)
{
    if (h->n == h->cap) {
        int rc = heap_reserve(h, h->n + 1);

        if (rc != SLUICE_OK)
            return rc;
    }
    h->n++;
    sift_up(h, h->n - 1, item);
    return SLUICE_OK;
}

void *heap_top(const heap *h)
{
    return h->n ? h->items[0] : NULL;
}

void heap_remove(heap *h, void *item)
{
    size_t i = heap_index(h, item);
    void *last;

    set_index(h, item, HEAP_NONE);
    h->n--;
    if (i == h->n)
        return;
    last = h->items[h->n];
    if (i > 0 && h->less(last, h->items[(i - 1) / 2]))
        sift_up(h, i, last);
    else
        sift_down(h, i, last);
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
    size_t i = heap_index(h, item);

    if (i > 0 && h->less(item, h->items[(i - 1) / 2]))
        sift_up(h, i, item);
    else
        sift_down(h, i, item);
}

void heap_trim(heap *h, size_t min_cap)
{
    size_t cap = h->cap;
    void **items;

    while (cap / 2 >= min_cap && cap / 2 > 0 && h->n < cap / 4)
        cap /= 2;
    if (cap == h->cap)
        return;
    items = sluice_realloc(h->items, cap * sizeof *items);
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
