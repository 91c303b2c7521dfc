/* SPDX-License-Identifier: MIT */
/*
 * Shared test helpers: see testutil.h.
 */
#include "testutil.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <unistd.h>

#include "sluice/alloc.h"
#include "sluice/error.h"

static long fail_at_n;
static long allocations;
static long live_blocks;

static int should_fail(void)
{
    allocations++;
    return fail_at_n > 0 && allocations >= fail_at_n;
}

static void *counting_malloc(size_t size)
{
    void *p;

    if (should_fail())
        return NULL;
    p = malloc(size);
    if (p)
        live_blocks++;
    return p;
}

static void *counting_calloc(size_t count, size_t size)
{
    void *p;

    if (should_fail())
        return NULL;
    p = calloc(count, size);
    if (p)
        live_blocks++;
    return p;
}

static void *counting_realloc(void *ptr, size_t size)
{
    void *p;

    if (should_fail())
        return NULL;
    p = realloc(ptr, size);
    if (p && !ptr)
        live_blocks++;
    return p;
}

static void counting_free(void *ptr)
{
    if (ptr)
        live_blocks--;
    free(ptr);
}

void oom_install(long fail_at)
{
    fail_at_n = fail_at;
    allocations = 0;
    live_blocks = 0;
    sluice_replace_allocator(counting_malloc, counting_realloc, counting_calloc, counting_free);
}

void oom_uninstall(void)
{
    sluice_reset_allocator();
}

long oom_allocations(void)
{
    return allocations;
}

long oom_live_blocks(void)
{
    return live_blocks;
}

long oom_sweep(int (*body)(void *arg), void *arg, long max_n)
{
    for (long n = 1; n <= max_n; n++) {
        int rc;

        oom_install(n);
        rc = body(arg);
        oom_uninstall();
        assert_int_equal(live_blocks, 0);
        if (rc == SLUICE_OK)
            return n;
        assert_int_equal(rc, SLUICE_ENOMEM);
    }
    fail_msg("body still failing after %ld allocations", max_n);
    return -1;
}

void rng_seed(test_rng *r, uint64_t seed)
{
    r->s = seed ? seed : 0x9e3779b97f4a7c15u;
}

uint64_t rng_next(test_rng *r)
{
    r->s ^= r->s >> 12;
    r->s ^= r->s << 25;
    r->s ^= r->s >> 27;
    return r->s * 0x2545f4914f6cdd1du;
}

int64_t rng_range(test_rng *r, int64_t lo, int64_t hi)
{
    uint64_t span = (uint64_t)(hi - lo) + 1;

    return lo + (int64_t)(rng_next(r) % span);
}

/* testutil.c's own place in the source tree: __FILE__ ends with it when CMake compiles the file by
 * its absolute path, which it does. */
#define TESTUTIL_TAIL "/tests/unit/testutil.c"

const char *test_source_path(const char *rel)
{
    static char path[4096];
    const char *env = getenv("SLUICE_SOURCE_DIR");
    const char *file = __FILE__;
    size_t flen = strlen(file), tlen = strlen(TESTUTIL_TAIL);

    if (env && *env)
        snprintf(path, sizeof path, "%s/%s", env, rel);
    else if (file[0] == '/' && flen > tlen && strcmp(file + flen - tlen, TESTUTIL_TAIL) == 0)
        snprintf(path, sizeof path, "%.*s/%s", (int)(flen - tlen), file, rel);
    else
        snprintf(path, sizeof path, "./%s", rel);
    if (access(path, R_OK) != 0)
        fail_msg("%s is not there: set SLUICE_SOURCE_DIR to the sluice source tree (CTest does)",
                 path);
    return path;
}

const char *test_sluice_bin(void)
{
    static char path[4096];
    const char *env = getenv("SLUICE_BIN");
    ssize_t n;

    if (env && *env) {
        snprintf(path, sizeof path, "%s", env);
    } else {
        /* The directory of the running test binary, which is the build directory. */
        n = readlink("/proc/self/exe", path, sizeof path - sizeof "sluice");
        while (n > 0 && path[n - 1] != '/')
            n--;
        if (n <= 0)
            n = 0;
        snprintf(path + n, sizeof path - (size_t)n, "%s", n > 0 ? "sluice" : "./sluice");
    }
    if (access(path, X_OK) != 0) {
        fprintf(stderr,
                "the sluice binary %s is not there: build it, or set SLUICE_BIN to it (CTest "
                "does)\n",
                path);
        return NULL;
    }
    return path;
}
