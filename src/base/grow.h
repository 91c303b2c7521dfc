/* SPDX-License-Identifier: MIT */
/*
 * The one way a dynamic array grows: capacity doubles (from a first capacity the caller picks)
 * until it holds what is needed, through the replaceable allocator, refusing sizes whose byte
 * count would overflow. Doubling keeps appends amortized O(1); the caller's first capacity keeps
 * small arrays small.
 *
 * Ensures: on failure the array and its capacity are unchanged (still valid, still owned by the
 * caller), so a caller that grows before it changes anything can back out cleanly.
 */
#ifndef SLUICE_BASE_GROW_H
#define SLUICE_BASE_GROW_H

#include <stddef.h>

/* Makes the array *itemsp (a pointer to a T *, passed as void *) of *cap elements of `size`
 * bytes hold at least `need` elements. Does nothing when *cap >= need; otherwise the new
 * capacity is the first of first_cap (when *cap is 0) or *cap, doubled, that reaches need, and
 * *itemsp is reallocated (its first *cap elements kept; the new ones uninitialized).
 * Returns 0 or SLUICE_ENOMEM (out of memory, or need * size does not fit a size_t), with
 * *itemsp and *cap unchanged. size and first_cap must be > 0. */
int grow_array(void *itemsp, size_t *cap, size_t need, size_t size, size_t first_cap);

#endif
