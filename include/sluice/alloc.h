/* SPDX-License-Identifier: MIT */
/*
 * The replaceable allocator.
 *
 * Every allocation libsluice makes goes through these four functions, so an embedding program can
 * route memory to its own allocator and tests can make the Nth allocation fail. libsluice never
 * aborts on out-of-memory: a failed allocation makes the calling function return SLUICE_ENOMEM and
 * leave its objects as they were.
 */
#ifndef SLUICE_ALLOC_H
#define SLUICE_ALLOC_H

#include <stddef.h>

#include "sluice/export.h"

#ifdef __cplusplus
extern "C" {
#endif
SLUICE_API_BEGIN

typedef void *(*sluice_malloc_fn)(size_t size);
typedef void *(*sluice_realloc_fn)(void *ptr, size_t size);
typedef void *(*sluice_calloc_fn)(size_t count, size_t size);
typedef void (*sluice_free_fn)(void *ptr);

/* Replaces the allocator. All four functions must be given and must behave like their C library
 * namesakes. Must be called before any libsluice object exists, or after all were freed.
 * jansson's allocator is process-global: this also routes it (json_set_alloc_funcs) through the
 * allocator current at each call, for every user of jansson in the process; so no jansson value
 * may be alive across a replacement either. Returns 0, or SLUICE_EINVAL when a function is
 * NULL. */
int sluice_replace_allocator(sluice_malloc_fn malloc_fn, sluice_realloc_fn realloc_fn,
                             sluice_calloc_fn calloc_fn, sluice_free_fn free_fn);

/* Restores the C library allocator. */
void sluice_reset_allocator(void);

SLUICE_API_END

#ifdef __cplusplus
}
#endif
#endif
