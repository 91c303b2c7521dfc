/* SPDX-License-Identifier: MIT */
/*
 * Ready queues: see ready.h.
 */
#include "engine/ready.h"

#include <string.h>

#include "engine/registry.h"
#include "engine/task.h"
#include "sluice/error.h"

int ready_type_less(const void *a, const void *b)
{
    const etype *x = a, *y = b;

    return task_more_urgent(heap_top(&x->ready), heap_top(&y->ready));
}

int ready_reserve(etype *t, size_t more)
{
    return heap_reserve(&t->ready, t->ready.n + more);
}

/* Re-files the type after its head may have changed. */
static void refile_type(sluice_engine *e, etype *t)
{
    if (t->ready.n == 0) {
        if (t->tidx != HEAP_NONE)
            heap_remove(&e->types_ready, t);
    } else if (t->tidx == HEAP_NONE) {
        heap_push(&e->types_ready, t); /* room reserved for every type */
    } else {
        heap_update(&e->types_ready, t);
    }
}

int ready_push(sluice_engine *e, task *t)
{
    etype *type = t->type;
    int rc = heap_push(&type->ready, t);

    if (rc != SLUICE_OK)
        return rc;
    if (heap_top(&type->ready) == t)
        refile_type(e, type);
    return SLUICE_OK;
}

void ready_remove(sluice_engine *e, task *t)
{
    etype *type = t->type;
    int was_top = heap_top(&type->ready) == t;

    heap_remove(&type->ready, t);
    if (was_top)
        refile_type(e, type);
}

task *ready_pick(const sluice_engine *e, const char *const *types, size_t ntypes)
{
    task *best = NULL;

    if (ntypes == 0) {
        const etype *t = heap_top(&e->types_ready);

        return t ? heap_top(&t->ready) : NULL;
    }
    for (size_t i = 0; i < ntypes; i++) {
        const etype *t;
        task *head;

        if (!types[i])
            continue;
        t = registry_find_type(e, types[i], strlen(types[i]));
        head = t ? heap_top(&t->ready) : NULL;
        if (head && (!best || task_more_urgent(head, best)))
            best = head;
    }
    return best;
}
