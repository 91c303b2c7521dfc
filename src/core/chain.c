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
 * The common case (every link a distinct tracked key of a rate, window or quota limit, none in
 * shadow mode) takes a one-pass path instead, chain_fast: each link decided once on a copy of its
 * state, the copies written back when all allowed; test_limit's twin test holds it to the above.
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

/* Links the fast path (chain_fast) decides at most. */
#define CHAIN_FAST_LINKS 8

/* The bytes of a key's state for the kinds chain_fast decides, 0 for the others: those whose
 * state is plain data, decided without allocating and the same whether peeking or not. */
static size_t fast_state_size(const sluice_limit *lim)
{
    switch (lim->def.kind) {
    case SLUICE_RATE:
        return lim->adaptive ? 0 : sizeof(gcra_state);
    case SLUICE_WINDOW:
        return sizeof(fixed_state);
    case SLUICE_QUOTA:
        return sizeof(quota_state);
    case SLUICE_SLIDING:
    case SLUICE_CONCURRENCY:
        break;
    }
    return 0;
}

_Static_assert(sizeof(fixed_state) == sizeof(gcra_state), "copy_state's two sizes");

/* Copies a state of fast_state_size() bytes with constant-size copies (a few moves, no call). */
static inline void copy_state(void *dst, const void *src, size_t len)
{
    if (len == sizeof(gcra_state))
        memcpy(dst, src, sizeof(gcra_state));
    else
        memcpy(dst, src, sizeof(quota_state));
}

/* The common case of a charging chain, in one pass with no grouping and no second decision:
 * every link a distinct (limit, key) whose key is tracked already, of a kind fast_state_size
 * takes, on an enforced limit, with a key short enough to be used as it is. Each link is decided
 * on a copy of its state, and the copies are written back only when every link allowed, which is
 * what peek-then-commit does: these kinds answer a peek exactly as the charge, so the decisions,
 * the charges, the figures counted and the changes recorded are those of the general path.
 * Returns 0, having changed nothing, when the chain is not such a chain; otherwise 1, with the
 * result in *out, decisions and *rc. */
static int chain_fast(const sluice_chain_link *links, size_t n, int64_t now_ns,
                      sluice_decision *decisions, sluice_chain_result *out, int *rc)
{
    void *state[CHAIN_FAST_LINKS];
    size_t size[CHAIN_FAST_LINKS];
    any_state copy[CHAIN_FAST_LINKS];
    sluice_decision d[CHAIN_FAST_LINKS];
    int all = 1;

    if (n > CHAIN_FAST_LINKS)
        return 0;
    /* Only looks: nothing changes until every link qualifies. */
    for (size_t i = 0; i < n; i++) {
        const sluice_limit *lim = links[i].limit;
        const char *key = links[i].key ? links[i].key : "";
        size_t len = links[i].keylen;

        if (!lim || links[i].units < 1 || lim->shadow || (size[i] = fast_state_size(lim)) == 0 ||
            len > lim->def.max_key_len || (!links[i].key && len > 0))
            return 0;
        for (size_t j = 0; j < i; j++)
            if (links[j].limit == lim && links[j].keylen == len &&
                (len == 0 || memcmp(links[j].key, key, len) == 0))
                return 0; /* one key asked twice: its units are grouped */
        state[i] = keytab_find(lim->keys, key, len);
        if (!state[i])
            return 0;
    }
    /* Record every change before making it, as chain_prepare does (no concurrency here). */
    for (size_t i = 0; i < n; i++) {
        sluice_limit *lim = links[i].limit;

        *rc = lim->changed
                  ? limit_note_changed(lim, links[i].key ? links[i].key : "", links[i].keylen)
                  : SLUICE_OK;
        if (*rc != SLUICE_OK) {
            if (decisions)
                memset(decisions, 0, n * sizeof *decisions);
            return 1;
        }
    }
    for (size_t i = 0; i < n; i++) {
        sluice_limit *lim = links[i].limit;

        int64_t now = limit_clamp_now(lim, now_ns);

        copy_state(&copy[i], state[i], size[i]);
        if (lim->whole_rate)
            gcra_decide_whole(&lim->rate, &copy[i].rate, 0, links[i].units, now, 0, &d[i]);
        else /* these kinds cannot fail */
            (void)limit_state_decide(lim, &copy[i], 0, links[i].units, lim->def.ttl_ns, now, 0,
                                     &d[i]);
        all &= d[i].allowed;
    }
    out->allowed = all;
    for (size_t i = 0; i < n; i++) {
        sluice_limit *lim = links[i].limit;

        if (all)
            copy_state(state[i], &copy[i], size[i]);
        /* Links with room count only when the chain was granted, as in the general path. */
        if (all || !d[i].allowed)
            limit_count_decision(lim, &d[i], links[i].units);
        if (decisions)
            decisions[i] = d[i];
        if (!all && !d[i].allowed && d[i].retry_after_ns > out->retry_after_ns) {
            out->retry_after_ns = d[i].retry_after_ns;
            out->denied_by = i;
        }
    }
    *rc = SLUICE_OK;
    return 1;
}

int sluice_chain_decide(const sluice_chain_link *links, size_t n, int64_t now_ns, unsigned flags,
                        sluice_decision *decisions, sluice_chain_result *out)
{
    link_work stack[CHAIN_STACK_LINKS], *w = stack;
    int peek = (flags & SLUICE_PEEK) != 0;
    int rc = SLUICE_OK;

    memset(out, 0, sizeof *out);
    if (!peek && chain_fast(links, n, now_ns, decisions, out, &rc))
        return rc;
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
