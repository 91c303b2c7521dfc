/* SPDX-License-Identifier: MIT */
/*
 * The grow helper: see grow.h.
 */
#include "base/grow.h"

#include <stdint.h>
#include <string.h>

#include "base/alloc.h"
#include "sluice/error.h"

int grow_array(void *itemsp, size_t *cap, size_t need, size_t size, size_t first_cap)
{
    size_t n = *cap ? *cap : first_cap;
    void *items;

    if (need <= *cap)
        return SLUICE_OK;
    if (need > SIZE_MAX / size)
        return SLUICE_ENOMEM;
    while (n < need)
        n = n > SIZE_MAX / 2 ? need : n * 2;
    if (n > SIZE_MAX / size)
        n = need;
    /* The caller's pointer is a T *, read and written through memcpy so that no cast to
     * void ** is needed at any call site. */
    memcpy(&items, itemsp, sizeof items);
    items = alloc_realloc(items, n * size);
    if (!items)
        return SLUICE_ENOMEM;
    memcpy(itemsp, &items, sizeof items);
    *cap = n;
    return SLUICE_OK;
}
