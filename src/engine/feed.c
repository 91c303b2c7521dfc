/* SPDX-License-Identifier: MIT */
/*
 * The change feed (see feed.h and "The change feed" in include/sluice/engine.h).
 *
 * Invariants:
 * - everything recorded lands in `pending` first; only a pull moves it into `batch`, so the batch
 *   a consumer holds never changes under it until its next call into the feed;
 * - `batch` is cleared only by sluice_engine_changes_done, that is, after the consumer said it
 *   wrote it: a failed write loses nothing;
 * - limiter key states are not recorded here as they change: each core limit records which of its
 *   keys changed (sluice_limit_track_changes, on for every limit while the feed runs), and a pull
 *   drains them into `batch`, after pending's purges, so no purge deletes a newer state;
 * - a registered limit with a core holding undrained changes is on `dirty` (its core told
 *   core_changed of its first change), or `dirty_all` is set: a pull visits only those, so a
 *   quiet limit costs nothing however many there are.
 */
#include "engine/feed.h"

#include <stdio.h>

#include "base/alloc.h"
#include "engine/engine_impl.h"
#include "engine/registry.h"
#include "policy/policy_check.h"
#include "sluice/error.h"

void feed_task(feed *f, uint64_t id)
{
    f->seq++;
    if (changeset_add_task(f->pending, id) != SLUICE_OK)
        f->lost++;
}

void feed_series(feed *f, const char *name)
{
    f->seq++;
    if (changeset_add_series(f->pending, name) != SLUICE_OK)
        f->lost++;
}

/* Puts registered limit l on the list of limits the next pull drains (once). Without memory for
 * the list, the next pull visits every limit instead: nothing goes undrained. */
static void mark_dirty(feed *f, elimit *l)
{
    if (l->dirty)
        return;
    if (f->ndirty == f->dirty_cap) {
        size_t cap = f->dirty_cap ? 2 * f->dirty_cap : 64;
        elimit **arr = alloc_realloc(f->dirty, cap * sizeof *arr);

        if (!arr) {
            f->dirty_all = 1;
            return;
        }
        f->dirty = arr;
        f->dirty_cap = cap;
    }
    l->dirty = 1;
    l->dirty_pos = f->ndirty;
    f->dirty[f->ndirty++] = l;
}

/* A core of the limit `arg` recorded its first key change since its last drain. */
static void core_changed(void *arg)
{
    elimit *l = arg;

    if (l->eng && l->eng->feed)
        mark_dirty(l->eng->feed, l);
}

/* Tracks the key changes of every core limit of `l`, each telling the feed of its first. */
static void track_cores(sluice_engine *e, elimit *l)
{
    int changes = 0;

    l->eng = e;
    for (size_t t = 0; t < l->nlims; t++) {
        sluice_limit_track_changes(l->lims[t], 1);
        /* Not tracking for lack of memory: the pull visits l, which tries again. */
        if (sluice_limit_on_changes(l->lims[t], core_changed, l) != SLUICE_OK)
            changes = 1;
        changes |= sluice_limit_has_changes(l->lims[t]);
    }
    if (changes)
        mark_dirty(e->feed, l);
}

void feed_forget_limit(elimit *l)
{
    feed *f;

    if (!l->dirty)
        return;
    f = l->eng->feed;
    f->dirty[l->dirty_pos] = f->dirty[--f->ndirty];
    f->dirty[l->dirty_pos]->dirty_pos = l->dirty_pos;
    l->dirty = 0;
}

uint64_t feed_visits(const sluice_engine *e)
{
    return e && e->feed ? e->feed->visits : 0;
}

void feed_limit_replaced(sluice_engine *e, const char *name, int gone)
{
    feed *f = e->feed;
    elimit *l;

    if (!f)
        return;
    f->seq++;
    if (changeset_purge_limit(f->pending, name) != SLUICE_OK ||
        changeset_set_limit(f->pending, name, SLUICE_LIMIT_DEF_DROP, NULL) != SLUICE_OK)
        f->lost++;
    l = gone ? NULL : registry_find_limit(e, name);
    if (l)
        track_cores(e, l);
}

void feed_limit_mode(sluice_engine *e, const char *name)
{
    feed *f = e->feed;

    if (!f)
        return;
    f->seq++;
    if (changeset_set_limit(f->pending, name, SLUICE_LIMIT_DEF_DROP, NULL) != SLUICE_OK)
        f->lost++;
}

void feed_override_changed(sluice_engine *e, const char *name, const char *key, size_t keylen)
{
    feed *f = e->feed;
    char id[2 * POLICY_NAME_MAX + 4];
    elimit *l;

    if (!f)
        return;
    f->seq++;
    snprintf(id, sizeof id, "%s/=%.*s", name, (int)keylen, key);
    if (changeset_purge_limit(f->pending, id) != SLUICE_OK ||
        changeset_set_limit(f->pending, name, SLUICE_LIMIT_DEF_DROP, NULL) != SLUICE_OK)
        f->lost++;
    l = registry_find_limit(e, name);
    if (l)
        track_cores(e, l);
}

void feed_free(feed *f)
{
    if (!f)
        return;
    changeset_free(f->pending);
    changeset_free(f->batch);
    alloc_free(f->dirty);
    alloc_free(f);
}

/* ---- The public feed ----------------------------------------------------------------------- */

int sluice_engine_changes_start(sluice_engine *e)
{
    feed *f;

    if (e->feed)
        return SLUICE_OK;
    f = alloc_calloc(1, sizeof *f);
    if (!f || changeset_new(&f->pending) != SLUICE_OK || changeset_new(&f->batch) != SLUICE_OK) {
        feed_free(f);
        return SLUICE_ENOMEM;
    }
    e->feed = f;
    for (size_t i = 0; i < e->nlimits; i++)
        track_cores(e, e->limits[i]);
    return SLUICE_OK;
}

/* Where a drain puts one limit's keys. */
typedef struct drain_to {
    changeset *batch;
    const char *id; /* the limit's id (sluice_engine_visit_limits) */
} drain_to;

static int drain_key(const char *key, size_t keylen, const void *state, size_t len, void *arg)
{
    const drain_to *to = arg;

    return changeset_put_key(to->batch, to->id, key, keylen, state, len);
}

static int drain_limit(const char *id, sluice_limit *lim, void *arg)
{
    drain_to to = {arg, id};

    /* On for every limit already; this retries a start of tracking that ran out of memory
     * (for the foreign limits, which drain_cores does not visit). */
    sluice_limit_track_changes(lim, 1);
    /* A limit that cannot drain for lack of memory keeps its keys recorded for the next pull:
     * nothing is lost, so go on with the others. */
    (void)sluice_limit_drain(lim, drain_key, &to);
    return 0;
}

/* Drains the key changes of every core of l into the batch; a core that cannot drain for lack
 * of memory keeps them, and l stays on the list for the next pull. */
static void drain_cores(feed *f, elimit *l)
{
    int left = 0;

    f->visits++;
    for (size_t t = 0; t < l->nlims; t++) {
        char id[2 * POLICY_NAME_MAX + 2];

        /* A core whose tracking could not start for lack of memory tries again (and l stays on
         * the list until it did). */
        sluice_limit_track_changes(l->lims[t], 1);
        if (sluice_limit_on_changes(l->lims[t], core_changed, l) != SLUICE_OK)
            left = 1;
        if (!sluice_limit_has_changes(l->lims[t]))
            continue;
        registry_core_id(l, t, id, sizeof id);
        (void)drain_limit(id, l->lims[t], f->batch);
        left |= sluice_limit_has_changes(l->lims[t]);
    }
    if (left)
        mark_dirty(f, l);
}

int sluice_engine_changes(sluice_engine *e, const sluice_changes **out)
{
    feed *f = e->feed;
    size_t n;

    *out = NULL;
    if (!f)
        return SLUICE_ESTATE;
    /* Merge first, then clear: a merge cut short is merged again (each part dedups). */
    if (changeset_merge(f->batch, f->pending) != SLUICE_OK)
        return SLUICE_ENOMEM;
    changeset_clear(f->pending);
    /* Every pull (each commit, and the keys timer every 100 ms) visits only the limits whose
     * cores told of a change since their last drain (core_changed): with 200,000 limits, testing
     * each one at every pull took most of the loop's time. Without memory for that list, every
     * limit is visited once. */
    if (f->dirty_all) {
        f->dirty_all = 0;
        for (size_t i = 0; i < e->nlimits; i++)
            mark_dirty(f, e->limits[i]);
        if (f->dirty_all) /* no room even now: visit them all from the registry */
            for (size_t i = 0; i < e->nlimits; i++)
                drain_cores(f, e->limits[i]);
    }
    /* Emptied as it is walked: a limit left with changes goes back at a slot already read. A
     * removed limit (dead) is not drained, as it was never visited before: its keys are purged. */
    n = f->ndirty;
    f->ndirty = 0;
    for (size_t i = 0; i < n; i++) {
        elimit *l = f->dirty[i];

        l->dirty = 0;
        if (!l->dead)
            drain_cores(f, l);
    }
    if (e->foreign.visit)
        (void)e->foreign.visit(e->foreign.arg, drain_limit, f->batch);
    f->out = 1;
    *out = f->batch;
    return SLUICE_OK;
}

void sluice_engine_changes_done(sluice_engine *e)
{
    feed *f = e->feed;

    if (!f || !f->out)
        return;
    changeset_clear(f->batch);
    f->out = 0;
}

int sluice_engine_changes_limit_def(sluice_engine *e, const char *name, const char *spec)
{
    feed *f = e->feed;

    if (!f)
        return SLUICE_ESTATE;
    f->seq++;
    if (changeset_set_limit(f->pending, name, spec ? SLUICE_LIMIT_DEF_SET : SLUICE_LIMIT_DEF_GONE,
                            spec) != SLUICE_OK) {
        f->lost++;
        return SLUICE_ENOMEM;
    }
    return SLUICE_OK;
}

int sluice_engine_changes_forget_key(sluice_engine *e, const char *id, const char *key,
                                     size_t keylen)
{
    if (!e->feed)
        return SLUICE_ESTATE;
    return changeset_put_key(e->feed->pending, id, key, keylen, NULL, 0);
}

int sluice_engine_changes_forget_keys(sluice_engine *e, const char *id)
{
    if (!e->feed)
        return SLUICE_ESTATE;
    return changeset_purge_limit(e->feed->pending, id);
}

uint64_t sluice_engine_changes_seq(const sluice_engine *e)
{
    return e && e->feed ? e->feed->seq : 0;
}

void sluice_engine_changes_count(const sluice_engine *e, sluice_changes_counts *out)
{
    sluice_changes_counts p = {0}, b = {0};

    if (e && e->feed) {
        changeset_get_counts(e->feed->pending, &p);
        changeset_get_counts(e->feed->batch, &b);
        p.lost = e->feed->lost;
    }
    p.tasks += b.tasks;
    p.series += b.series;
    p.limits += b.limits;
    p.purges += b.purges;
    p.keys += b.keys;
    *out = p;
}

int sluice_changes_next_task(const sluice_changes *c, size_t *pos, uint64_t *id)
{
    return changeset_next_task(c, pos, id);
}

int sluice_changes_next_series(const sluice_changes *c, size_t *pos, const char **name)
{
    return changeset_next_series(c, pos, name);
}

int sluice_changes_next_limit(const sluice_changes *c, size_t *pos, const char **name,
                              sluice_limit_def_op *op, const char **spec)
{
    return changeset_next_limit(c, pos, name, op, spec);
}

int sluice_changes_next_purge(const sluice_changes *c, size_t *pos, const char **id)
{
    return changeset_next_purge(c, pos, id);
}

int sluice_changes_next_key(const sluice_changes *c, size_t *pos, const char **id, const char **key,
                            size_t *keylen, const void **state, size_t *len)
{
    return changeset_next_key(c, pos, id, key, keylen, state, len);
}

int sluice_changes_has_changes(const sluice_changes *c)
{
    return changeset_has_changes(c);
}
