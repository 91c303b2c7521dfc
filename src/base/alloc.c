/* SPDX-License-Identifier: MIT */
/*
 * The replaceable allocator behind every allocation of libsluice (see include/sluice/alloc.h).
 * The function pointers are process-wide; replacing them is not thread-safe and is meant to
 * happen once at start-up or between tests.
 */
#include "alloc.h"

#include <stdlib.h>
#include <string.h>

#include "sluice/alloc.h"
#include "sluice/error.h"

static sluice_malloc_fn malloc_impl = malloc;
static sluice_realloc_fn realloc_impl = realloc;
static sluice_calloc_fn calloc_impl = calloc;
static sluice_free_fn free_impl = free;

int sluice_replace_allocator(sluice_malloc_fn malloc_fn, sluice_realloc_fn realloc_fn,
                             sluice_calloc_fn calloc_fn, sluice_free_fn free_fn)
{
    if (!malloc_fn || !realloc_fn || !calloc_fn || !free_fn)
        return SLUICE_EINVAL;
    malloc_impl = malloc_fn;
    realloc_impl = realloc_fn;
    calloc_impl = calloc_fn;
    free_impl = free_fn;
    return SLUICE_OK;
}

void sluice_reset_allocator(void)
{
    malloc_impl = malloc;
    realloc_impl = realloc;
    calloc_impl = calloc;
    free_impl = free;
}

void *sluice_malloc(size_t size)
{
    return malloc_impl(size);
}

void *sluice_calloc(size_t count, size_t size)
{
    return calloc_impl(count, size);
}

void *sluice_realloc(void *ptr, size_t size)
{
    return realloc_impl(ptr, size);
}

void sluice_free(void *ptr)
{
    if (ptr)
        free_impl(ptr);
}

char *sluice_memdup0(const char *s, size_t len)
{
    char *copy = sluice_malloc(len + 1);

    if (!copy)
        return NULL;
    memcpy(copy, s, len);
    copy[len] = '\0';
    return copy;
}
