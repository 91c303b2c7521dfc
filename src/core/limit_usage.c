/* SPDX-License-Identifier: MIT */
/*
 * Read-only figures of a limit for monitoring: those that need a walk over its keys (the admin
 * port's /metrics and /api/limits), and one quota key's spending (LIMIT.SPEND, /api/limits/NAME/
 * spend). Kept apart from limit.c because nothing on the decision path uses them.
 *
 * A walk visits every tracked key once, so it costs O(keys): it is meant for a scrape every few
 * seconds, not for every decision. Nothing here changes anything (not even the clock clamp).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

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

int sluice_limit_quota_usage(const sluice_limit *lim, const char *key, size_t keylen,
                             int64_t now_ns, sluice_quota_usage *out)
{
    const quota_state *q;
    norm_key nk;
    int64_t now, end;
    int rc;

    memset(out, 0, sizeof *out);
    if (!lim || lim->def.kind != SLUICE_QUOTA)
        return SLUICE_EINVAL;
    rc = limit_read_key(lim, key, keylen, &nk);
    if (rc != SLUICE_OK)
        return rc;
    now = limit_view_now(lim, now_ns); /* the limit's time, as a decision would see it */
    out->budget = lim->def.limit;
    out->period_start_ns = quota_period_start(lim->def.calendar, now, &end);
    out->resets_at_ns = end;
    q = keytab_find(lim->keys, nk.key, nk.len);
    /* An absent key, or one whose period ended, has spent nothing in the current one. */
    if (q && !quota_idle(q, now))
        out->spent = q->spent;
    out->remaining = out->spent < out->budget ? out->budget - out->spent : 0;
    return SLUICE_OK;
}
