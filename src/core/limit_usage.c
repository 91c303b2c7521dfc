/* SPDX-License-Identifier: MIT */
/*
 * Read-only figures of a limit that need a walk over its keys, for monitoring (the admin port's
 * /metrics and /api/limits). Kept apart from limit.c because nothing on the decision path uses
 * them.
 *
 * A walk visits every tracked key once, so it costs O(keys): it is meant for a scrape every few
 * seconds, not for every decision. It changes nothing (not even the clock clamp).
 */
#include <stddef.h>
#include <stdint.h>

#include "base/sat.h"
#include "core/limit_impl.h"
#include "core/quota.h"
#include "sluice/error.h"
#include "sluice/limit.h"

int sluice_limit_quota_spent(const sluice_limit *lim, int64_t now_ns, int64_t *spent, size_t *keys)
{
    const char *key;
    size_t keylen, pos = 0, n = 0;
    void *value;
    int64_t sum = 0;

    *spent = 0;
    if (keys)
        *keys = 0;
    if (!lim || lim->def.kind != SLUICE_QUOTA)
        return SLUICE_EINVAL;
    now_ns = limit_view_now(lim, now_ns); /* the limit's time, as a decision would see it */
    while (keytab_next(lim->keys, &pos, &key, &keylen, &value)) {
        const quota_state *q = value;

        /* A key whose period ended has spent nothing in the current one. */
        if (quota_idle(q, now_ns) || q->spent <= 0)
            continue;
        sum = sat_add_i64(sum, q->spent);
        n++;
    }
    *spent = sum;
    if (keys)
        *keys = n;
    return SLUICE_OK;
}
