/* SPDX-License-Identifier: MIT */
/*
 * Internal allocation entry points: every module allocates through these so that the allocator
 * set with sluice_replace_allocator() (and the tests' failing allocator) sees every allocation.
 */
#ifndef SLUICE_BASE_ALLOC_H
#define SLUICE_BASE_ALLOC_H

#include <stddef.h>

void *alloc_malloc(size_t size);
void *alloc_calloc(size_t count, size_t size);
void *alloc_realloc(void *ptr, size_t size);
void alloc_free(void *ptr);

/* The number of allocations jansson asked for on this thread and did not get (only counted once
 * sluice_replace_allocator routed jansson here). A JSON parse during which it grew failed for
 * want of memory, whatever error jansson reported. */
unsigned long alloc_json_failures(void);

/* The memory budget (--maxmemory; see alloc.c). Bytes held by the live blocks allocated through
 * these functions (usable sizes, so malloc's rounding counts). Exact and thread-safe while the
 * allocator is the C library's; alloc_counting() is 0 when it cannot be counted (a replaced
 * allocator, or a C library without malloc_usable_size). */
size_t alloc_live_bytes(void);
int alloc_counting(void);

/* Sets the process-wide budget in bytes (0 = none, the default). Nothing is refused by the
 * allocator itself: code that creates state a client asked for checks alloc_over_budget() and
 * refuses the request instead, so reads, replies and frees go on past the budget. */
void alloc_set_budget(size_t bytes);
size_t alloc_budget(void);

/* Returns 1 when a budget is set and the live bytes exceed it. One relaxed atomic load each. */
int alloc_over_budget(void);

/* Returns 1 when a budget is set and the live bytes plus `extra` exceed it: an allocation of extra
 * bytes about to be made for new state (a key table's next slot array) would pass it. */
int alloc_over_budget_by(size_t extra);

/* Parses a memory size: decimal digits, then optionally a unit, any case: b, k or kb, m or mb,
 * g or gb, t or tb (powers of 1024, as every size flag of `sluice serve`), nothing else. 0 is
 * accepted. Returns 0 with *out set, or -1 (bad text, or more than SIZE_MAX bytes). Pure. */
int alloc_parse_size(const char *s, size_t len, size_t *out);

/* Returns a NUL-terminated copy of the len bytes at s, or NULL when out of memory. */
char *alloc_memdup0(const char *s, size_t len);

#endif
