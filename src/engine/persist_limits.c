/* SPDX-License-Identifier: MIT */
/*
 * Persistence hooks for a server's store, beyond the tasks of persist.c: every core limit of the
 * engine under a stable id, so that key state drained from it can be imported again into the
 * same limit after a restart, and the task id counter, so that ids a store still holds are never
 * issued again.
 *
 * A named limit without tiers has one core limit whose id is its name, and one per key override
 * whose id is "name/=key" (no tier name holds '='); a tiered limit has one core limit per tier,
 * whose id is "name/tier". Names of limits and tiers are [A-Za-z0-9_.:-]+ (at
 * most POLICY_NAME_MAX bytes), so the first '/' of an id always ends the limit's name.
 * Replacing a limit (sluice_engine_set_limit) creates new core limits under the same ids: a store
 * that must not carry the old state over deletes what it holds for them.
 *
 * Limits kept outside the engine (sluice_engine_set_foreign_limits) are visited after the
 * engine's own, under ids that begin with '!', a character no name holds.
 */
#include <stdio.h>
#include <string.h>

#include "engine/engine_impl.h"
#include "policy/policy_check.h"
#include "engine/registry.h"
#include "sluice/engine.h"
#include "sluice/error.h"

/* Longest id: a name, '/', a tier name (or '=' and an override's key, shorter), NUL. */
#define ID_MAX (2 * POLICY_NAME_MAX + 2)

void registry_core_id(const elimit *l, size_t t, char *id, size_t len)
{
    if (l->pol.ntiers == 0 && t == 0)
        snprintf(id, len, "%s", l->pol.name);
    else if (l->pol.ntiers == 0)
        snprintf(id, len, "%s/=%s", l->pol.name, l->pol.overrides[t - 1].key);
    else
        snprintf(id, len, "%s/%s", l->pol.name, l->pol.tiers[t].name);
}

int sluice_engine_visit_limits(sluice_engine *e,
                               int (*fn)(const char *id, sluice_limit *lim, void *arg), void *arg)
{
    char id[ID_MAX];

    registry_order(e);
    for (size_t i = 0; i < e->nlimits; i++) {
        const elimit *l = e->limits[i];

        for (size_t t = 0; t < l->nlims; t++) {
            int rc;

            registry_core_id(l, t, id, sizeof id);
            rc = fn(id, l->lims[t], arg);
            if (rc != 0)
                return rc;
        }
    }
    if (e->foreign.visit)
        return e->foreign.visit(e->foreign.arg, fn, arg);
    return SLUICE_OK;
}

void sluice_engine_set_foreign_limits(sluice_engine *e, const sluice_foreign_limits *fl)
{
    if (fl)
        e->foreign = *fl;
    else
        memset(&e->foreign, 0, sizeof e->foreign);
}

int sluice_engine_changes_running(const sluice_engine *e)
{
    return e->feed != NULL;
}

sluice_limit *sluice_engine_limit_by_id(const sluice_engine *e, const char *id)
{
    const char *slash;
    char name[POLICY_NAME_MAX + 1];
    const elimit *l;
    size_t len;

    if (!id)
        return NULL;
    if (id[0] == '!')
        return e->foreign.find ? e->foreign.find(e->foreign.arg, id) : NULL;
    slash = strchr(id, '/');
    len = slash ? (size_t)(slash - id) : strlen(id);
    if (len == 0 || len > POLICY_NAME_MAX)
        return NULL;
    memcpy(name, id, len);
    name[len] = '\0';
    l = registry_find_limit(e, name);
    if (!l)
        return NULL;
    if (!slash)
        return l->pol.ntiers == 0 ? l->lims[0] : NULL;
    if (l->pol.ntiers == 0) {
        long i = slash[1] == '=' ? policy_find_override(&l->pol, slash + 2, strlen(slash + 2)) : -1;

        return i >= 0 && (size_t)i + 1 < l->nlims ? l->lims[i + 1] : NULL;
    }
    for (size_t t = 0; t < l->pol.ntiers && t < l->nlims; t++)
        if (strcmp(l->pol.tiers[t].name, slash + 1) == 0)
            return l->lims[t];
    return NULL;
}

uint64_t sluice_engine_last_id(const sluice_engine *e)
{
    return e->next_id;
}

void sluice_engine_reserve_ids(sluice_engine *e, uint64_t id)
{
    /* Ids and sequence numbers are issued together (see persist.c): keep them in step. */
    if (id > e->next_id)
        e->next_id = id;
    if (id > e->next_seq)
        e->next_seq = id;
}
