/* SPDX-License-Identifier: MIT */
/*
 * Chains (sluice_chain_decide, include/sluice/limit.h): several limits decided as one step. A
 * task type's chain (a provider's global rate, a tenant's rate, a concurrency cap, a budget) is
 * granted only when every link has budget, and then every link is charged; otherwise none is.
 *
 * Links that name the same limit and key are grouped and asked once for their total units, so a
 * chain cannot pass by splitting one key's charge. The work is in three passes: prepare (group,
 * normalise keys, find or create every key's state, record every change) can fail without a
 * charge; peek asks every group without charging; commit charges every group, concurrency leases
 * first because only they can still fail, and takes back the leases already granted if one does.
 *
 * A link whose limit is in shadow mode is decided like any other, but a denial of it never
 * becomes the chain's: peek turns it into a pass (shadow_denied), commit leaves it uncharged,
 * and it is counted in the limit's shadow_denied. Enforced links keep all-or-nothing among
 * themselves; a shadow link with room is charged only when the chain is granted.
 */
#include "sluice/limit.h"

#include <string.h>

#include "base/alloc.h"
#include "keytab.h"
#include "lease.h"
#include "limit_impl.h"
#include "sluice/error.h"
#include "window.h"

/* Largest chain evaluated without allocating. */
#define CHAIN_STACK_LINKS 16

/* Working record of one link. Links naming the same limit and key form a group led by the
 * first of them, which is asked for the group's total units. */
typedef struct link_work {
    norm_key nk;
    size_t leader; /* index of the group's first link */
    int64_t units; /* leader: the group's total */
    void *state;   /* leader: the key's state, NULL when untracked */
    int fresh;     /* leader: the key was created by this chain */
    sluice_decision d;
} link_work;

static int same_key(const link_work *a, const link_work *b)
{
    return a->nk.len == b->nk.len && memcmp(a->nk.key, b->nk.key, a->nk.len) == 0;
}

/* Groups identical (limit, key) links and normalises keys. */
static int chain_group(const sluice_chain_link *links, size_t n, link_work *w)
{
    for (size_t i = 0; i < n; i++) {
        int rc;

        if (!links[i].limit || links[i].units < 1)
            return SLUICE_EINVAL;
        rc = limit_normalize_key(links[i].limit, links[i].key, links[i].keylen, &w[i].nk);
        if (rc != SLUICE_OK)
            return rc;
        w[i].leader = i;
        w[i].units = links[i].units;
        for (size_t j = 0; j < i; j++) {
            if (w[j].leader == j && links[j].limit == links[i].limit && same_key(&w[j], &w[i])) {
                w[i].leader = j;
                w[j].units += links[i].units;
                break;
            }
        }
    }
    return SLUICE_OK;
}

/* Makes sure every leader's key exists (or is untracked) without losing an earlier leader's
 * entry: idle entries are reclaimed for all of them first, then keys are inserted (inserting
 * never removes), then states are looked up again since insertions may move entries. */
static int chain_prepare(const sluice_chain_link *links, size_t n, link_work *w, int64_t now_ns,
                         unsigned flags)
{
    int budget = (flags & SLUICE_BUDGET) != 0;

    int missing = 0;

    for (size_t i = 0; i < n; i++) {
        int rc = w[i].leader == i ? limit_mark_changed(links[i].limit, &w[i].nk) : SLUICE_OK;

        if (rc != SLUICE_OK)
            return rc;
    }
    /* The common case: every key is tracked already. Nothing is inserted, so the states found
     * stay valid and one lookup per link is all it takes. */
    for (size_t i = 0; i < n; i++) {
        if (w[i].leader != i)
            continue;
        w[i].state = keytab_find(links[i].limit->keys, w[i].nk.key, w[i].nk.len);
        if (!w[i].state)
            missing = 1;
        else if (links[i].limit->def.kind == SLUICE_SLIDING) {
            int rc = sliding_prepare(w[i].state, links[i].limit->def.limit);

            if (rc != SLUICE_OK)
                return rc;
        }
    }
    if (!missing)
        return SLUICE_OK;
    for (size_t i = 0; i < n; i++) {
        sluice_limit *lim = links[i].limit;

        if (w[i].leader != i || keytab_find(lim->keys, w[i].nk.key, w[i].nk.len))
            continue;
        if (keytab_count(lim->keys) >= lim->def.max_keys ||
            (budget && alloc_over_budget_by(keytab_growth_bytes(lim->keys)))) {
            limit_reclaim_keys(lim, limit_clamp_now(lim, now_ns));
        }
    }
    for (size_t i = 0; i < n; i++) {
        sluice_limit *lim = links[i].limit;
        void *state;
        int rc, over;

        if (w[i].leader != i || keytab_find(lim->keys, w[i].nk.key, w[i].nk.len))
            continue;
        w[i].state = NULL;
        over = budget && alloc_over_budget_by(keytab_growth_bytes(lim->keys));
        if (keytab_count(lim->keys) >= lim->def.max_keys || over) {
            if (lim->def.key_overflow == SLUICE_KEYS_REFUSE && !lim->shadow) {
                lim->stats.refused++;
                /* Past the memory budget it is memory that is short, not the table's room. */
                return over ? SLUICE_ENOMEM : SLUICE_EBUSY;
            }
            /* A shadow limit refuses nothing: its refusal is a would-be denial, counted as one
             * with the decision (limit_untracked_decision). */
            if (lim->def.key_overflow != SLUICE_KEYS_REFUSE)
                lim->stats.untracked++;
            w[i].fresh = -1; /* untracked */
            continue;
        }
        rc = keytab_upsert(lim->keys, w[i].nk.key, w[i].nk.len, &state, &w[i].fresh);
        if (rc != SLUICE_OK)
            return rc;
    }
    for (size_t i = 0; i < n; i++) {
        sluice_limit *lim = links[i].limit;

        if (w[i].leader != i || w[i].fresh < 0)
            continue;
        w[i].state = keytab_find(lim->keys, w[i].nk.key, w[i].nk.len);
        if (lim->def.kind == SLUICE_SLIDING) {
            int rc = sliding_prepare(w[i].state, lim->def.limit);

            if (rc != SLUICE_OK)
                return rc;
        }
    }
    return SLUICE_OK;
}

/* Asks every leader without charging. Returns 1 when all allowed. */
static int chain_peek(const sluice_chain_link *links, size_t n, link_work *w, int64_t now_ns,
                      int peek)
{
    int all = 1;

    for (size_t i = 0; i < n; i++) {
        sluice_limit *lim = links[i].limit;
        int64_t now = peek ? limit_view_now(lim, now_ns) : limit_clamp_now(lim, now_ns);
        any_state blank;
        void *state;
        int fresh;

        if (w[i].leader != i)
            continue;
        if (!peek && w[i].fresh < 0) {
            limit_untracked_decision(lim, &w[i].d);
            continue;
        }
        state = peek ? keytab_find(lim->keys, w[i].nk.key, w[i].nk.len) : w[i].state;
        fresh = peek ? state == NULL : w[i].fresh;
        if (!state) {
            memset(&blank, 0, sizeof blank);
            state = &blank;
        }
        /* A peek cannot fail: nothing is allocated. */
        limit_state_decide(lim, state, fresh, w[i].units, lim->def.ttl_ns, now, 1, &w[i].d);
        if (!w[i].d.allowed && lim->shadow)
            limit_shadow_pass(&w[i].d); /* never the chain's no; commit skips it */
        all &= w[i].d.allowed;
    }
    return all;
}

/* Charges every leader; concurrency first, as taking a lease is the only step that can fail,
 * and the leases taken so far are given back when it does. */
static int chain_commit(const sluice_chain_link *links, size_t n, link_work *w, int64_t now_ns)
{
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < n; i++) {
            sluice_limit *lim = links[i].limit;
            int is_lease = lim->def.kind == SLUICE_CONCURRENCY;
            int rc;

            if (w[i].leader != i || w[i].fresh < 0 || w[i].d.shadow_denied ||
                is_lease != (pass == 0))
                continue;
            rc = limit_state_decide(lim, w[i].state, w[i].fresh, w[i].units, lim->def.ttl_ns,
                                    limit_clamp_now(lim, now_ns), 0, &w[i].d);
            if (rc == SLUICE_OK && w[i].d.allowed)
                continue;
            if (rc == SLUICE_OK && lim->shadow) { /* a denial charges nothing: pass it */
                limit_shadow_pass(&w[i].d);
                continue;
            }
            for (size_t j = 0; j < i; j++)
                if (w[j].leader == j && w[j].fresh >= 0 && w[j].d.lease_id &&
                    links[j].limit->def.kind == SLUICE_CONCURRENCY)
                    lease_release(links[j].limit->leases, w[j].d.lease_id, now_ns);
            return rc != SLUICE_OK ? rc : SLUICE_ESTATE;
        }
    }
    return SLUICE_OK;
}

int sluice_chain_decide(const sluice_chain_link *links, size_t n, int64_t now_ns, unsigned flags,
                        sluice_decision *decisions, sluice_chain_result *out)
{
    link_work stack[CHAIN_STACK_LINKS], *w = stack;
    int peek = (flags & SLUICE_PEEK) != 0;
    int rc = SLUICE_OK;

    memset(out, 0, sizeof *out);
    if (n > CHAIN_STACK_LINKS) {
        w = alloc_calloc(n, sizeof *w);
        if (!w)
            return SLUICE_ENOMEM;
    } else {
        memset(stack, 0, n * sizeof stack[0]);
    }
    rc = chain_group(links, n, w);
    if (rc == SLUICE_OK && !peek)
        rc = chain_prepare(links, n, w, now_ns, flags);
    if (rc != SLUICE_OK)
        goto done;
    out->allowed = chain_peek(links, n, w, now_ns, peek);
    if (out->allowed && !peek) {
        rc = chain_commit(links, n, w, now_ns);
        if (rc != SLUICE_OK) {
            out->allowed = 0;
            goto done;
        }
    }
    for (size_t i = 0; i < n && !peek; i++) {
        if (w[i].leader != i)
            continue;
        /* A shadow link's would-be denial counts whatever the chain did, as an enforced
         * link's denial does; links with room count only when the chain was granted. */
        if (w[i].d.shadow_denied)
            links[i].limit->stats.shadow_denied++;
        else if (out->allowed || !w[i].d.allowed)
            limit_count_decision(links[i].limit, &w[i].d, w[i].units);
    }
    for (size_t i = 0; i < n; i++) {
        const sluice_decision *d = &w[w[i].leader].d;

        if (decisions) {
            decisions[i] = *d;
            if (w[i].leader != i)
                decisions[i].lease_id = 0;
        }
        if (!out->allowed && !d->allowed && d->retry_after_ns > out->retry_after_ns) {
            out->retry_after_ns = d->retry_after_ns;
            out->denied_by = i;
        }
    }
done:
    if (w != stack)
        alloc_free(w);
    if (rc != SLUICE_OK && decisions)
        memset(decisions, 0, n * sizeof *decisions);
    return rc;
}
