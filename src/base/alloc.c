/* SPDX-License-Identifier: MIT */
/*
 * The replaceable allocator behind every allocation of libsluice (see include/sluice/alloc.h).
 * The function pointers are process-wide; replacing them is not thread-safe and is meant to
 * happen once at start-up or between tests.
 *
 * jansson (task payloads, the admin API) allocates through its own hook, json_set_alloc_funcs,
 * which is process-global too: replacing the allocator points it at two trampolines that call
 * whatever allocator is current, so JSON parsing counts against the same memory as everything
 * else and the OOM sweeps reach it. Every other user of jansson in the process then allocates
 * through sluice's allocator as well (harmless: it behaves like malloc). Until the first
 * replacement jansson keeps the C library's malloc, which is also sluice's default. jansson does
 * not always report a failed allocation as such (a string its lexer could not save comes back as
 * a syntax error), so the trampoline counts them: a parse that saw one failed for want of memory.
 */
#include "alloc.h"

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "sluice/alloc.h"
#include "sluice/error.h"

static sluice_malloc_fn malloc_impl = malloc;
static sluice_realloc_fn realloc_impl = realloc;
static sluice_calloc_fn calloc_impl = calloc;
static sluice_free_fn free_impl = free;

/* Allocations jansson asked for and did not get, on this thread (alloc_json_failures). */
static _Thread_local unsigned long json_failures;

static void *json_alloc(size_t size)
{
    void *p = malloc_impl(size);

    if (!p)
        json_failures++;
    return p;
}

unsigned long alloc_json_failures(void)
{
    return json_failures;
}

static void json_release(void *ptr)
{
    if (ptr)
        free_impl(ptr);
}

int sluice_replace_allocator(sluice_malloc_fn malloc_fn, sluice_realloc_fn realloc_fn,
                             sluice_calloc_fn calloc_fn, sluice_free_fn free_fn)
{
    if (!malloc_fn || !realloc_fn || !calloc_fn || !free_fn)
        return SLUICE_EINVAL;
    malloc_impl = malloc_fn;
    realloc_impl = realloc_fn;
    calloc_impl = calloc_fn;
    free_impl = free_fn;
    json_set_alloc_funcs(json_alloc, json_release);
    return SLUICE_OK;
}

void sluice_reset_allocator(void)
{
    malloc_impl = malloc;
    realloc_impl = realloc;
    calloc_impl = calloc;
    free_impl = free;
}

void *alloc_malloc(size_t size)
{
    return malloc_impl(size);
}

void *alloc_calloc(size_t count, size_t size)
{
    return calloc_impl(count, size);
}

void *alloc_realloc(void *ptr, size_t size)
{
    return realloc_impl(ptr, size);
}

void alloc_free(void *ptr)
{
    if (ptr)
        free_impl(ptr);
}

char *alloc_memdup0(const char *s, size_t len)
{
    char *copy = alloc_malloc(len + 1);

    if (!copy)
        return NULL;
    memcpy(copy, s, len);
    copy[len] = '\0';
    return copy;
}
