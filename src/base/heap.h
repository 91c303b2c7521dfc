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
#ifndef SLUICE_ENGINE_HEAP_H
#define SLUICE_ENGINE_HEAP_H

#include <stddef.h>
#include <stdint.h>

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

/* Makes an empty heap (allocates nothing). */
void heap_init(heap *h, heap_less_fn less, size_t idx_off);

/* Frees the array (not the items, whose index fields are left as they are). */
void heap_free(heap *h);

/* Makes room for `n` items in all. Returns 0 or SLUICE_ENOMEM (heap unchanged). */
int heap_reserve(heap *h, size_t n);

/* Inserts item (its index field is overwritten). Returns 0 or SLUICE_ENOMEM (heap unchanged);
 * never fails when the heap holds fewer items than it reserved. */
int heap_push(heap *h, void *item);

/* Returns the least item, or NULL when empty. */
void *heap_top(const heap *h);

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

/* Returns item's index field: its position, or HEAP_NONE. */
size_t heap_index(const heap *h, const void *item);

#endif
