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
 *
 * The memory budget (--maxmemory): while the allocator is the C library's, every allocation and
 * free adds or subtracts the block's usable size (malloc_usable_size) to one atomic counter of
 * live bytes: one relaxed atomic add per call, so it stays cheap and is exact whichever thread
 * allocates (the store's commit thread does). The budget itself is a number the server sets;
 * alloc.c never refuses an allocation because of it: callers that create state ask
 * alloc_over_budget() first and refuse politely, while everything else (replies, reads, frees)
 * goes on. A replaced allocator is not counted (its blocks have no size we may ask for):
 * alloc_live_bytes() then stays where it was and a budget cannot be enforced;
 * sluice_reset_allocator counts again from zero. Without malloc_usable_size (not glibc or musl)
 * nothing is counted.
 */
#if defined(__linux__)
#define _GNU_SOURCE /* malloc_usable_size */
#endif
#include "alloc.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__linux__)
#include <malloc.h>
#define ALLOC_CAN_COUNT 1
#else
#define ALLOC_CAN_COUNT 0
#endif

#include <jansson.h>

#include "sluice/alloc.h"
#include "sluice/error.h"

static sluice_malloc_fn malloc_impl = malloc;
static sluice_realloc_fn realloc_impl = realloc;
static sluice_calloc_fn calloc_impl = calloc;
static sluice_free_fn free_impl = free;

/* 1 while the C library's allocator is in use: only then are blocks sized and counted. */
static int counting = ALLOC_CAN_COUNT;
/* Usable bytes of the live blocks allocated through alloc_* while counting. */
static atomic_llong live_bytes;
/* The budget alloc_over_budget() compares with; 0 = none. */
static atomic_size_t budget_bytes;

static size_t block_size(void *p)
{
#if ALLOC_CAN_COUNT
    return p ? malloc_usable_size(p) : 0;
#else
    (void)p;
    return 0;
#endif
}

static void count_add(void *p)
{
    if (counting && p)
        atomic_fetch_add_explicit(&live_bytes, (long long)block_size(p), memory_order_relaxed);
}

static void count_sub(void *p)
{
    if (counting && p)
        atomic_fetch_sub_explicit(&live_bytes, (long long)block_size(p), memory_order_relaxed);
}

/* Allocations jansson asked for and did not get, on this thread (alloc_json_failures). */
static _Thread_local unsigned long json_failures;

static void *json_alloc(size_t size)
{
    void *p = alloc_malloc(size);

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
    alloc_free(ptr);
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
    counting = 0;
    json_set_alloc_funcs(json_alloc, json_release);
    return SLUICE_OK;
}

void sluice_reset_allocator(void)
{
    malloc_impl = malloc;
    realloc_impl = realloc;
    calloc_impl = calloc;
    free_impl = free;
    /* Blocks of the replaced allocator were never counted: start again from zero. */
    counting = ALLOC_CAN_COUNT;
}

void *alloc_malloc(size_t size)
{
    void *p = malloc_impl(size);

    count_add(p);
    return p;
}

void *alloc_calloc(size_t count, size_t size)
{
    void *p = calloc_impl(count, size);

    count_add(p);
    return p;
}

void *alloc_realloc(void *ptr, size_t size)
{
    size_t old = counting ? block_size(ptr) : 0;
    void *p = realloc_impl(ptr, size);

    if (!counting)
        return p;
    if (p) {
        atomic_fetch_add_explicit(&live_bytes, (long long)block_size(p) - (long long)old,
                                  memory_order_relaxed);
    } else if (size == 0 && ptr) {
        /* realloc(ptr, 0) may free ptr and return NULL (glibc does). */
        atomic_fetch_sub_explicit(&live_bytes, (long long)old, memory_order_relaxed);
    }
    return p;
}

void alloc_free(void *ptr)
{
    if (!ptr)
        return;
    count_sub(ptr);
    free_impl(ptr);
}

size_t alloc_live_bytes(void)
{
    long long v = atomic_load_explicit(&live_bytes, memory_order_relaxed);

    return v > 0 ? (size_t)v : 0;
}

int alloc_counting(void)
{
    return counting;
}

void alloc_set_budget(size_t bytes)
{
    atomic_store_explicit(&budget_bytes, bytes, memory_order_relaxed);
}

size_t alloc_budget(void)
{
    return atomic_load_explicit(&budget_bytes, memory_order_relaxed);
}

int alloc_over_budget(void)
{
    size_t budget = atomic_load_explicit(&budget_bytes, memory_order_relaxed);

    return budget > 0 && alloc_live_bytes() > budget;
}

int alloc_over_budget_by(size_t extra)
{
    size_t budget = atomic_load_explicit(&budget_bytes, memory_order_relaxed);
    size_t live = alloc_live_bytes();

    return budget > 0 && (live > budget || extra > budget - live);
}

int alloc_parse_size(const char *s, size_t len, size_t *out)
{
    static const char units[] = "bkmgt";
    unsigned long long v = 0;
    size_t i = 0;
    unsigned shift = 0;

    *out = 0;
    if (len == 0 || s[0] < '0' || s[0] > '9')
        return -1;
    for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
        if (v > (~0ull - 9) / 10)
            return -1;
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    if (i < len) {
        char u = s[i] >= 'A' && s[i] <= 'Z' ? (char)(s[i] - 'A' + 'a') : s[i];
        const char *at = memchr(units, u, sizeof(units) - 1);

        if (!at)
            return -1;
        shift = (unsigned)(at - units) * 10;
        i++;
        /* "kb", "mb", ...: the b is optional after a multiple. */
        if (i < len && shift > 0 && (s[i] == 'b' || s[i] == 'B'))
            i++;
        if (i != len)
            return -1;
    }
    if (shift > 0 && v > (~0ull >> shift))
        return -1;
    v <<= shift;
    if ((unsigned long long)(size_t)v != v)
        return -1;
    *out = (size_t)v;
    return 0;
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
