/* SPDX-License-Identifier: MIT */
/*
 * Recurring series: see recurring.h.
 */
#include "engine/recurring.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/hash.h"
#include "base/sat.h"
#include "engine/registry.h"
#include "engine/resolve.h"
#include "engine/task.h"
#include "sluice/error.h"
#include "base/quote.h"

/* Schedule points walked one by one when catching up after a long pause, before jumping. */
#define CATCH_UP_STEPS 10000

/* Cron points looked at to find a cron series' shortest gap (the pace check at creation). */
#define PACE_POINTS 64

/* Links resolved on the stack by the pace check before it allocates. */
#define PACE_STACK_LINKS 8

struct series {
    char *name;    /* owned */
    uint64_t hash; /* of the name */
    char *type;    /* owned */
    char *payload; /* owned, or NULL */
    size_t payload_len;
    char *key; /* owned explicit key, or NULL */
    size_t key_len;
    int64_t interval_ns; /* > 0, or 0 for a cron series */
    cron_schedule cron;
    char *cron_text; /* owned source of cron, or NULL (interval) */
    int64_t start_ns;
    int64_t end_ns; /* 0 = never */
    int64_t max_runs;
    int64_t runs, skipped; /* counters (durable: reported to the series hook) */
    int64_t pending;       /* occurrences not started and not finished (rebuilt on restore) */
    int64_t next_ns;       /* the next schedule point, SLUICE_NEVER when over */
    size_t hidx;           /* position in series_due */
};

static int series_less(const void *a, const void *b)
{
    return ((const series *)a)->next_ns < ((const series *)b)->next_ns;
}

void recurring_init(sluice_engine *e)
{
    ptab_init(&e->series_names);
    heap_init(&e->series_due, series_less, offsetof(series, hidx));
}

static uint64_t name_hash(const char *name)
{
    return hash_bytes_secret(name, strlen(name), 0x5e71e5); /* a client's RECUR.ADD name */
}

static int name_eq(const void *p, const void *key)
{
    return strcmp(((const series *)p)->name, key) == 0;
}

static series *find(const sluice_engine *e, const char *name)
{
    return name ? ptab_find(&e->series_names, name_hash(name), name, name_eq) : NULL;
}

static void series_free(series *s)
{
    if (!s)
        return;
    alloc_free(s->name);
    alloc_free(s->type);
    alloc_free(s->payload);
    alloc_free(s->key);
    alloc_free(s->cron_text);
    alloc_free(s);
}

/* Records in the change feed that a series was added, removed or its counters changed. */
static void series_changed(const sluice_engine *e, const series *s)
{
    if (e->feed)
        feed_series(e->feed, s->name);
}

/* The schedule point after `after`, or SLUICE_NEVER (none, or past the end). */
static int64_t point_after(const series *s, int64_t after)
{
    int64_t next;

    if (s->interval_ns) {
        if (after > INT64_MAX - s->interval_ns)
            return SLUICE_NEVER;
        next = after + s->interval_ns;
    } else if (cron_next(&s->cron, after, &next) != SLUICE_OK) {
        return SLUICE_NEVER;
    }
    if (s->end_ns && next > s->end_ns)
        return SLUICE_NEVER;
    return next;
}

/* The first schedule point at or after `from`. */
static int64_t first_point(const series *s, int64_t from)
{
    int64_t first;

    if (s->interval_ns) {
        first = s->start_ns;
        if (from > first) {
            /* saturated near INT64_MAX: k is then too large, and the check below says never */
            int64_t k = sat_add_i64(sat_sub_i64(from, first), s->interval_ns - 1) / s->interval_ns;

            if (k > (INT64_MAX - first) / s->interval_ns)
                return SLUICE_NEVER;
            first += k * s->interval_ns;
        }
        if (s->end_ns && first > s->end_ns)
            return SLUICE_NEVER;
        return first;
    }
    return point_after(s, (from > INT64_MIN ? from - 1 : from));
}

static int copy_spec(series *s, const sluice_recurring_spec *spec)
{
    s->name = alloc_memdup0(spec->name, strlen(spec->name));
    s->type = alloc_memdup0(spec->type, strlen(spec->type));
    if (!s->name || !s->type)
        return SLUICE_ENOMEM;
    if (spec->payload) {
        s->payload = alloc_memdup0(spec->payload, spec->payload_len);
        if (!s->payload)
            return SLUICE_ENOMEM;
        s->payload_len = spec->payload_len;
    }
    if (spec->key) {
        s->key = alloc_memdup0(spec->key, spec->key_len);
        if (!s->key)
            return SLUICE_ENOMEM;
        s->key_len = spec->key_len;
    }
    if (spec->cron) {
        s->cron_text = alloc_memdup0(spec->cron, strlen(spec->cron));
        if (!s->cron_text)
            return SLUICE_ENOMEM;
    }
    return SLUICE_OK;
}

/* The spec of an occurrence of s. */
static void occurrence_spec(const series *s, sluice_task_spec *spec)
{
    memset(spec, 0, sizeof *spec);
    spec->type = s->type;
    spec->payload = s->payload;
    spec->payload_len = s->payload_len;
    spec->key = s->key;
    spec->key_len = s->key_len;
}

/* The shortest gap between two schedule points of s: its interval, or for a cron series the
 * shortest of the gaps between its first PACE_POINTS points; 0 when it has fewer than two. */
static int64_t shortest_gap(const series *s)
{
    int64_t p, q, gap = 0;

    if (s->interval_ns)
        return s->interval_ns;
    p = first_point(s, s->start_ns);
    for (int i = 0; i < PACE_POINTS && p != SLUICE_NEVER; i++, p = q) {
        q = point_after(s, p);
        if (q != SLUICE_NEVER && (gap == 0 || q - p < gap))
            gap = q - p;
    }
    return gap;
}

/* The emission interval a link imposes on one occurrence: period / limit times its units, for
 * the kinds that pace (rate, window, sliding); 0 for the others. */
static int64_t link_pace(const link_spec *l)
{
    const sluice_limit_def *def;

    if (l->lim->dead)
        return 0;
    def = sluice_limit_get_def(registry_core(l->lim, l->tier, l->key, l->keylen));
    if (def->kind != SLUICE_RATE && def->kind != SLUICE_WINDOW && def->kind != SLUICE_SLIDING)
        return 0;
    if (def->limit < 1)
        return 0;
    return sat_mul_i64(def->period_ns / def->limit, l->units);
}

/* Seed 003: a series scheduled faster than its limit lets occurrences through piles them up
 * behind the limiter. Emits one RECURRING_TOO_FAST event, stamped now, for the slowest pacing
 * link whose emission interval exceeds the series' shortest gap. The engine does no I/O: the
 * event is how the embedding program hears of it (the server logs it as a warning). A template
 * that cannot be resolved, or memory running out, only skips the check. */
static void check_pace(sluice_engine *e, const series *s, int64_t now)
{
    link_spec stack[PACE_STACK_LINKS], *links = stack;
    sluice_task_spec ts;
    char msg[64];
    etype *type;
    size_t nlinks;
    int64_t gap = shortest_gap(s), worst = 0;
    const char *worst_limit = NULL;
    sluice_event ev;

    if (gap <= 0 || registry_type_for_submit(e, s->type, &type, msg, sizeof msg) != SLUICE_OK)
        return;
    nlinks = type->pol.nlimits;
    if (nlinks > PACE_STACK_LINKS) {
        links = alloc_calloc(nlinks, sizeof *links);
        if (!links)
            goto done;
    }
    occurrence_spec(s, &ts);
    if (resolve_spec(e, type, &ts, 1, now, links, &nlinks, msg, sizeof msg) != SLUICE_OK)
        goto done;
    for (size_t i = 0; i < nlinks; i++) {
        int64_t pace = link_pace(&links[i]);

        if (pace > gap && pace > worst) {
            worst = pace;
            worst_limit = links[i].lim->pol.name;
        }
    }
    if (worst_limit) {
        memset(&ev, 0, sizeof ev);
        ev.kind = SLUICE_EVENT_RECURRING_TOO_FAST;
        ev.at_ns = now;
        ev.limit = worst_limit;
        ev.key = s->name; /* the series: the event is about it, not about a limiter key */
        ev.type = s->type;
        ev.count = 1;
        ev.wanted = gap;
        ev.granted = worst;
        engine_emit(e, &ev, now);
    }
done:
    if (links != stack)
        alloc_free(links);
    registry_type_release(e, type);
}

/* Detaches s from its tasks, cancelling those not started at now_ns. */
static void detach(sluice_engine *e, series *s, int64_t now_ns)
{
    size_t pos = 0;
    task *t;

    /* Cancelling leaves the id table alone (finished tasks stay in it until the trim below),
     * so the walk is not disturbed. */
    while ((t = ptab_next(&e->ids, &pos)) != NULL) {
        if (t->series != s)
            continue;
        if (t->state == SLUICE_TASK_QUEUED || t->state == SLUICE_TASK_PARKED)
            engine_cancel_task(e, t, now_ns);
        t->series = NULL; /* its record no longer names the series */
        engine_changed(e, t->id);
    }
    engine_trim_finished(e);
}

/* The checks of a spec that need no engine (sluice_recurring_check). */
static int spec_check(const sluice_recurring_spec *spec, int64_t runs, int64_t skipped, char *msg,
                      size_t msglen)
{
    if (!spec || !spec->name || !*spec->name || !spec->type) {
        msgf(msg, msglen, "%s", "a recurring series needs a name and a type");
        return SLUICE_EINVAL;
    }
    if ((spec->interval_ns > 0) == (spec->cron != NULL) || spec->interval_ns < 0) {
        msgf(msg, msglen, "%s", "give exactly one of an interval (> 0) and a cron expression");
        return SLUICE_EINVAL;
    }
    if (spec->max_runs < 0 || spec->start_ns < 0 || spec->end_ns < 0 || runs < 0 || skipped < 0) {
        msgf(msg, msglen, "%s", "start, end, max_runs and the counters must not be negative");
        return SLUICE_EINVAL;
    }
    return SLUICE_OK;
}

/* Adds a series with the given counters; with `restore`, refuses a name in use (SLUICE_EEXIST)
 * and reports nothing, else replaces it and reports the addition. */
static int add_series(sluice_engine *e, const sluice_recurring_spec *spec, int64_t runs,
                      int64_t skipped, int restore, int64_t now, char *msg, size_t msglen)
{
    sluice_task_spec ts;
    sluice_submit_error err;
    series *s, *old;
    uint64_t id;
    int rc;

    msgf(msg, msglen, "%s", "");
    rc = spec_check(spec, runs, skipped, msg, msglen);
    if (rc != SLUICE_OK)
        return rc;
    if (restore && find(e, spec->name)) {
        msgf(msg, msglen, "a series named \"%s\" exists", spec->name);
        return SLUICE_EEXIST;
    }
    s = alloc_calloc(1, sizeof *s);
    if (!s)
        return SLUICE_ENOMEM;
    s->hidx = HEAP_NONE;
    if (spec->cron) {
        rc = cron_parse(spec->cron, &s->cron, msg, msglen);
        if (rc != SLUICE_OK) {
            series_free(s);
            return SLUICE_EINVAL;
        }
    }
    s->interval_ns = spec->interval_ns;
    s->start_ns = spec->start_ns ? spec->start_ns : now;
    s->end_ns = spec->end_ns;
    s->max_runs = spec->max_runs;
    s->runs = runs;
    s->skipped = skipped;
    if (s->end_ns && s->end_ns < s->start_ns) {
        msgf(msg, msglen, "%s", "the series ends before it starts");
        series_free(s);
        return SLUICE_EINVAL;
    }
    rc = copy_spec(s, spec);
    if (rc == SLUICE_OK) {
        /* The template must make a valid task: same checks as a submit, nothing created. */
        occurrence_spec(s, &ts);
        rc = engine_submit_internal(e, &ts, NULL, 1, now, &id, &err);
        if (rc != SLUICE_OK && rc != SLUICE_ENOMEM)
            msgf(msg, msglen, "%s", err.message);
    }
    if (rc == SLUICE_OK)
        rc = ptab_reserve(&e->series_names, 1);
    if (rc == SLUICE_OK)
        rc = heap_reserve(&e->series_due, e->series_names.n + 1);
    if (rc != SLUICE_OK) {
        series_free(s);
        return rc;
    }
    s->hash = name_hash(s->name);
    if (s->max_runs && s->runs >= s->max_runs)
        s->next_ns = SLUICE_NEVER; /* restored complete */
    else
        s->next_ns = first_point(s, s->start_ns > now ? s->start_ns : now);
    old = find(e, s->name);
    if (old)
        recurring_del(e, old->name, now);
    ptab_insert(&e->series_names, s->hash, s); /* reserved */
    if (s->next_ns != SLUICE_NEVER)
        heap_push(&e->series_due, s); /* reserved */
    if (!restore) {
        series_changed(e, s);
        check_pace(e, s, now);
    }
    return SLUICE_OK;
}

int recurring_add(sluice_engine *e, const sluice_recurring_spec *spec, int64_t now, char *msg,
                  size_t msglen)
{
    return add_series(e, spec, 0, 0, 0, now, msg, msglen);
}

int recurring_restore(sluice_engine *e, const sluice_recurring_spec *spec, int64_t runs,
                      int64_t skipped, int64_t now, char *msg, size_t msglen)
{
    return add_series(e, spec, runs, skipped, 1, now, msg, msglen);
}

int recurring_state(const sluice_engine *e, const char *name, sluice_recurring_spec *spec,
                    int64_t *runs, int64_t *skipped)
{
    const series *s = find(e, name);

    memset(spec, 0, sizeof *spec);
    if (runs)
        *runs = 0;
    if (skipped)
        *skipped = 0;
    if (!s)
        return SLUICE_ENOTFOUND;
    spec->name = s->name;
    spec->type = s->type;
    spec->payload = s->payload;
    spec->payload_len = s->payload_len;
    spec->key = s->key;
    spec->key_len = s->key_len;
    spec->interval_ns = s->interval_ns;
    spec->cron = s->cron_text;
    spec->start_ns = s->start_ns;
    spec->end_ns = s->end_ns;
    spec->max_runs = s->max_runs;
    if (runs)
        *runs = s->runs;
    if (skipped)
        *skipped = s->skipped;
    return SLUICE_OK;
}

int recurring_del(sluice_engine *e, const char *name, int64_t now_ns)
{
    series *s = find(e, name);

    if (!s)
        return SLUICE_ENOTFOUND;
    detach(e, s, now_ns);
    if (s->hidx != HEAP_NONE)
        heap_remove(&e->series_due, s);
    ptab_remove(&e->series_names, s->hash, s);
    series_changed(e, s); /* gone from the table: a lookup now says ENOTFOUND */
    series_free(s);
    return SLUICE_OK;
}

int recurring_info(const sluice_engine *e, const char *name, sluice_recurring_info *out)
{
    const series *s = find(e, name);

    memset(out, 0, sizeof *out);
    if (!s)
        return SLUICE_ENOTFOUND;
    out->runs = s->runs;
    out->skipped = s->skipped;
    out->next_ns = s->next_ns;
    return SLUICE_OK;
}

static void set_next(sluice_engine *e, series *s, int64_t next)
{
    s->next_ns = next;
    if (next == SLUICE_NEVER) {
        if (s->hidx != HEAP_NONE)
            heap_remove(&e->series_due, s);
    } else if (s->hidx != HEAP_NONE) {
        heap_update(&e->series_due, s);
    }
}

/* The first point after now, from due point `due` <= now; *missed counts the points skipped on
 * the way (after due, at or before now): only the due one runs. */
static int64_t catch_up(const series *s, int64_t due, int64_t now, int64_t *missed)
{
    int64_t next = point_after(s, due);
    int steps = 0;

    *missed = 0;
    while (next != SLUICE_NEVER && next <= now) {
        (*missed)++;
        if (++steps == CATCH_UP_STEPS) /* jump: the count is a lower bound */
            return s->interval_ns ? first_point(s, now + 1) : point_after(s, now);
        next = point_after(s, next);
    }
    return next;
}

int recurring_tick(sluice_engine *e, int64_t now)
{
    series *s;

    while ((s = heap_top(&e->series_due)) != NULL && s->next_ns <= now) {
        int64_t missed = 0, skipped = s->skipped, next = catch_up(s, s->next_ns, now, &missed);
        if (s->max_runs == 0 || s->runs + s->pending < s->max_runs) {
            sluice_task_spec ts;
            sluice_submit_error err;
            uint64_t id;
            int rc;

            occurrence_spec(s, &ts);
            rc = engine_submit_internal(e, &ts, s, 0, now, &id, &err);
            if (rc == SLUICE_ENOMEM)
                return rc; /* nothing changed: the next tick tries again */
            if (rc == SLUICE_OK)
                s->pending++;
            else
                s->skipped++; /* backpressure or a template gone bad */
        }
        s->skipped += missed;
        set_next(e, s, next);
        if (s->skipped != skipped)
            series_changed(e, s);
    }
    return SLUICE_OK;
}

void recurring_skip_ahead(sluice_engine *e, const task *t, int64_t slot_ns)
{
    series *s = t->series;
    int64_t next, missed = 0;
    int steps = 0;

    if (!recurring_pending(t) || slot_ns == SLUICE_NEVER || s->next_ns == SLUICE_NEVER ||
        s->next_ns >= slot_ns)
        return;
    /* Each point before the slot would only queue behind the limiter: skipped, as a point
     * missed in downtime is (counted, no run). The grid stays the series' own. */
    for (next = s->next_ns; next != SLUICE_NEVER && next < slot_ns; next = point_after(s, next)) {
        missed++;
        if (++steps == CATCH_UP_STEPS) { /* jump: the count is a lower bound */
            next = first_point(s, slot_ns);
            break;
        }
    }
    s->skipped = sat_add_i64(s->skipped, missed);
    set_next(e, s, next);
    series_changed(e, s);
}

int64_t recurring_next_wake(const sluice_engine *e)
{
    const series *s = heap_top(&e->series_due);

    return s ? s->next_ns : SLUICE_NEVER;
}

int recurring_pending(const task *t)
{
    return t->series && t->attempt == 0;
}

int recurring_must_skip(const task *t, int64_t now)
{
    const series *s = t->series;

    if (!recurring_pending(t))
        return 0;
    return (s->max_runs && s->runs >= s->max_runs) || (s->end_ns && now > s->end_ns);
}

int recurring_past_end(const task *t, int64_t slot_ns)
{
    return recurring_pending(t) && t->series->end_ns && slot_ns > t->series->end_ns;
}

void recurring_started(sluice_engine *e, task *t)
{
    series *s = t->series;

    s->pending--;
    s->runs++;
    if (s->max_runs && s->runs >= s->max_runs)
        set_next(e, s, SLUICE_NEVER);
    series_changed(e, s);
}

void recurring_dropped(sluice_engine *e, task *t, int skipped)
{
    t->series->pending--;
    if (skipped) {
        t->series->skipped++;
        series_changed(e, t->series);
    }
}

const char *recurring_name(const task *t)
{
    return t->series ? t->series->name : NULL;
}

void recurring_relink(sluice_engine *e, task *t, const char *name)
{
    series *s = find(e, name);

    if (!s)
        return;
    t->series = s;
    if (t->state > SLUICE_TASK_RUNNING)
        return; /* finished: only named, for its record */
    if (recurring_pending(t))
        s->pending++;
    /* Its schedule point is used: the series resumes after it (the restored next point is the
     * first at or after the restore, which may be this very one). */
    if (s->next_ns != SLUICE_NEVER && s->next_ns <= t->submitted_ns)
        set_next(e, s,
                 t->submitted_ns < INT64_MAX ? first_point(s, t->submitted_ns + 1) : SLUICE_NEVER);
}

void recurring_free_all(sluice_engine *e)
{
    size_t pos = 0;
    series *s;

    while ((s = ptab_next(&e->series_names, &pos)) != NULL)
        series_free(s);
    ptab_free(&e->series_names);
    heap_free(&e->series_due);
}

/* ---- Schedules without an engine ------------------------------------------------------- */

int sluice_recurring_check(const sluice_recurring_spec *spec, char *msg, size_t msglen)
{
    cron_schedule cron;
    int rc;

    msgf(msg, msglen, "%s", "");
    rc = spec_check(spec, 0, 0, msg, msglen);
    if (rc != SLUICE_OK)
        return rc;
    if (spec->cron && cron_parse(spec->cron, &cron, msg, msglen) != SLUICE_OK)
        return SLUICE_EINVAL;
    if (spec->start_ns && spec->end_ns && spec->end_ns < spec->start_ns) {
        msgf(msg, msglen, "%s", "the series ends before it starts");
        return SLUICE_EINVAL;
    }
    return SLUICE_OK;
}

/* The schedule of spec as a series on the stack (only the fields the point functions read).
 * Returns 0, or -1 when its cron expression does not parse. */
static int schedule_of(const sluice_recurring_spec *spec, series *s)
{
    memset(s, 0, sizeof *s);
    s->interval_ns = spec->interval_ns;
    s->start_ns = spec->start_ns;
    s->end_ns = spec->end_ns;
    if (spec->interval_ns > 0)
        return 0;
    return spec->cron && cron_parse(spec->cron, &s->cron, NULL, 0) == SLUICE_OK ? 0 : -1;
}

int64_t sluice_recurring_first(const sluice_recurring_spec *spec, int64_t from_ns)
{
    series s;

    if (schedule_of(spec, &s) != 0)
        return SLUICE_NEVER;
    return first_point(&s, from_ns);
}

int64_t sluice_recurring_catch_up(const sluice_recurring_spec *spec, int64_t due_ns, int64_t now_ns,
                                  int64_t *missed)
{
    series s;

    *missed = 0;
    if (schedule_of(spec, &s) != 0)
        return SLUICE_NEVER;
    return catch_up(&s, due_ns, now_ns, missed);
}

void recurring_check_pace(sluice_engine *e, const sluice_recurring_spec *spec, int64_t now)
{
    series s;

    if (!spec->name || !spec->type || schedule_of(spec, &s) != 0)
        return;
    if (!s.start_ns)
        s.start_ns = now;
    /* Borrowed for the check only: check_pace reads them and keeps nothing. */
    s.name = (char *)(uintptr_t)spec->name;
    s.type = (char *)(uintptr_t)spec->type;
    s.payload = (char *)(uintptr_t)spec->payload;
    s.payload_len = spec->payload_len;
    s.key = (char *)(uintptr_t)spec->key;
    s.key_len = spec->key_len;
    check_pace(e, &s, now);
}
