/* SPDX-License-Identifier: MIT */
/*
 * An indexed binary min-heap of pointers whose items know their index, so that any item can be
 * removed or re-ordered in O(log n), not only the top. The engine keeps its ready queues, wait
 * queues, timers and wake-ups in such heaps.
 *
 * Each item stores its own position in a size_t field at `idx_off` bytes from its start;
 * HEAP_NONE means "in no heap". An item is in at most one heap through a given field.
 *
 * Invariants:
 * - For every i > 0: !less(items[i], items[(i - 1) / 2]) (the top is the least item).
 * - For every item in the heap: *(size_t *)(item + idx_off) == its index in items.
 * - Removing never shrinks the array, so re-inserting an item just removed never allocates:
 *   callers rely on this to undo a step without a chance of running out of memory. Only an
 *   explicit heap_trim() gives memory back.
 */
#ifndef SLUICE_BASE_HEAP_H
#define SLUICE_BASE_HEAP_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define HEAP_NONE SIZE_MAX

/* Returns non-zero when a must come out before b. */
typedef int (*heap_less_fn)(const void *a, const void *b);

typedef struct heap {
    void **items;      /* the array, items[0] the top */
    size_t n;          /* items held */
    size_t cap;        /* slots allocated */
    heap_less_fn less; /* the order */
    size_t idx_off;    /* offset of the items' size_t index field */
} heap;

/* Makes room for `n` items in all. Returns 0 or SLUICE_ENOMEM (heap unchanged). */
int heap_reserve(heap *h, size_t n);

/* heap_reserve in two steps, for a caller that must obtain every allocation of an operation
 * before it changes anything: heap_prepare allocates aside an array with room for `n` items
 * (*items = NULL when the heap already has room) and leaves the heap as it is; heap_install
 * moves the heap into it (and does nothing for NULL). An array not installed is given back
 * with alloc_free. Returns 0 or SLUICE_ENOMEM. */
int heap_prepare(const heap *h, size_t n, void ***items, size_t *cap);
void heap_install(heap *h, void **items, size_t cap);

/* Returns item's index field: its position, or HEAP_NONE. */
static inline size_t heap_index(const heap *h, const void *item)
{
    size_t i;

    memcpy(&i, (const char *)item + h->idx_off, sizeof i);
    return i;
}

/* ---- The sifts, inline --------------------------------------------------------------------- *
 * The _by functions are heap_push, heap_remove and heap_update with the order passed in: it must
 * be the heap's own (h->less). A caller on a hot path that passes its order as a constant gets
 * the comparison inlined into the sift loops; everyone else calls the plain functions, which are
 * these with h->less. Sift-up and sift-down move a hole rather than swapping, and write each
 * moved item's index as it lands. */

static inline void heap_set_index_(const heap *h, void *item, size_t i)
{
    memcpy((char *)item + h->idx_off, &i, sizeof i);
}

static inline void heap_sift_up_(heap *h, size_t i, void *item, heap_less_fn less)
{
    while (i > 0) {
        size_t parent = (i - 1) / 2;

        if (!less(item, h->items[parent]))
            break;
        h->items[i] = h->items[parent];
        heap_set_index_(h, h->items[i], i);
        i = parent;
    }
    h->items[i] = item;
    heap_set_index_(h, item, i);
}

static inline void heap_sift_down_(heap *h, size_t i, void *item, heap_less_fn less)
{
    for (;;) {
        size_t child = 2 * i + 1;

        if (child >= h->n)
            break;
        if (child + 1 < h->n && less(h->items[child + 1], h->items[child]))
            child++;
        if (!less(h->items[child], item))
            break;
        h->items[i] = h->items[child];
        heap_set_index_(h, h->items[i], i);
        i = child;
    }
    h->items[i] = item;
    heap_set_index_(h, item, i);
}

static inline int heap_push_by(heap *h, void *item, heap_less_fn less)
{
    if (h->n == h->cap) {
        int rc = heap_reserve(h, h->n + 1);

        if (rc != 0)
            return rc;
    }
    h->n++;
    heap_sift_up_(h, h->n - 1, item, less);
    return 0;
}

static inline void heap_remove_by(heap *h, void *item, heap_less_fn less)
{
    size_t i = heap_index(h, item);
    void *last;

    heap_set_index_(h, item, HEAP_NONE);
    h->n--;
    if (i == h->n)
        return;
    last = h->items[h->n];
    if (i > 0 && less(last, h->items[(i - 1) / 2]))
        heap_sift_up_(h, i, last, less);
    else
        heap_sift_down_(h, i, last, less);
}

static inline void heap_update_by(heap *h, void *item, heap_less_fn less)
{
    size_t i = heap_index(h, item);

    if (i > 0 && less(item, h->items[(i - 1) / 2]))
        heap_sift_up_(h, i, item, less);
    else
        heap_sift_down_(h, i, item, less);
}

/* ---- The interface ------------------------------------------------------------------------- */

/* Makes an empty heap (allocates nothing). */
void heap_init(heap *h, heap_less_fn less, size_t idx_off);

/* Frees the array (not the items, whose index fields are left as they are). */
void heap_free(heap *h);

/* Inserts item (its index field is overwritten). Returns 0 or SLUICE_ENOMEM (heap unchanged);
 * never fails when the heap holds fewer items than it reserved. */
int heap_push(heap *h, void *item);

/* Returns the least item, or NULL when empty. */
static inline void *heap_top(const heap *h)
{
    return h->n ? h->items[0] : NULL;
}

/* Removes and returns the least item (NULL when empty); its index becomes HEAP_NONE. */
void *heap_pop(heap *h);

/* Removes item, which must be in h; its index becomes HEAP_NONE. */
void heap_remove(heap *h, void *item);

/* Restores the order after item's key changed (item must be in h). */
void heap_update(heap *h, void *item);

/* Gives memory back after removals, for a heap whose size swings: while fewer than a quarter of
 * the slots are used, halves the array, never below min_cap slots (so a heap that empties and
 * refills around a small size does not reallocate each time; heap_free() gives everything back).
 * Best effort: a failed shrink keeps the larger array. The next push after a trim may allocate
 * again (the no-allocation promise after removals holds only until a trim). */
void heap_trim(heap *h, size_t min_cap);

/* Returns the item at position i (0 <= i < n), in array order (not sorted). */
void *heap_at(const heap *h, size_t i);

/* Bytes allocated for the array. */
size_t heap_bytes(const heap *h);

#endif
