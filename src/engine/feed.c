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
 *   drains them into `batch`, after pending's purges, so no purge deletes a newer state.
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

/* Tracks the key changes of every core limit of `l`. */
static void track_cores(const elimit *l)
{
    for (size_t t = 0; t < l->nlims; t++)
        sluice_limit_track_changes(l->lims[t], 1);
}

void feed_limit_replaced(sluice_engine *e, const char *name, int gone)
{
    feed *f = e->feed;
    const elimit *l;

    if (!f)
        return;
    f->seq++;
    if (changeset_purge_limit(f->pending, name) != SLUICE_OK ||
        changeset_set_limit(f->pending, name, SLUICE_LIMIT_DEF_DROP, NULL) != SLUICE_OK)
        f->lost++;
    l = gone ? NULL : registry_find_limit(e, name);
    if (l)
        track_cores(l);
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
    const elimit *l;

    if (!f)
        return;
    f->seq++;
    snprintf(id, sizeof id, "%s/=%.*s", name, (int)keylen, key);
    if (changeset_purge_limit(f->pending, id) != SLUICE_OK ||
        changeset_set_limit(f->pending, name, SLUICE_LIMIT_DEF_DROP, NULL) != SLUICE_OK)
        f->lost++;
    l = registry_find_limit(e, name);
    if (l)
        track_cores(l);
}

void feed_free(feed *f)
{
    if (!f)
        return;
    changeset_free(f->pending);
    changeset_free(f->batch);
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
        track_cores(e->limits[i]);
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

    /* On for every limit already; this retries a start of tracking that ran out of memory. */
    sluice_limit_track_changes(lim, 1);
    /* A limit that cannot drain for lack of memory keeps its keys recorded for the next pull:
     * nothing is lost, so go on with the others. */
    (void)sluice_limit_drain(lim, drain_key, &to);
    return 0;
}

int sluice_engine_changes(sluice_engine *e, const sluice_changes **out)
{
    feed *f = e->feed;

    *out = NULL;
    if (!f)
        return SLUICE_ESTATE;
    /* Merge first, then clear: a merge cut short is merged again (each part dedups). */
    if (changeset_merge(f->batch, f->pending) != SLUICE_OK)
        return SLUICE_ENOMEM;
    changeset_clear(f->pending);
    /* Every pull (each commit, and the keys timer every 100 ms) looks at every core, so the quiet
     * ones cost a test and nothing more: no id is formatted and no order sorted for them (with
     * 200,000 limits, visiting them all in name order took most of the loop's time). */
    for (size_t i = 0; i < e->nlimits; i++) {
        const elimit *l = e->limits[i];

        for (size_t t = 0; t < l->nlims; t++) {
            char id[2 * POLICY_NAME_MAX + 2];

            /* On for every limit already; this retries a start that ran out of memory. */
            sluice_limit_track_changes(l->lims[t], 1);
            if (!sluice_limit_has_changes(l->lims[t]))
                continue;
            registry_core_id(l, t, id, sizeof id);
            (void)drain_limit(id, l->lims[t], f->batch);
        }
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
