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

/* Returns a NUL-terminated copy of the len bytes at s, or NULL when out of memory. */
char *alloc_memdup0(const char *s, size_t len);

#endif
