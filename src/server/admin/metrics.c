/* SPDX-License-Identifier: MIT */
/*
 * GET /metrics: every figure of the server, the engine, its task types and its limits in the
 * Prometheus text format (prom.h writes it; docs/admin.md lists the families).
 *
 * Cardinality is bounded by design: per-limit series are labelled by limit name and kind, per-
 * type series by type name (declared types; undeclared ones are summed under type="_other"),
 * never by key. So throttling a million distinct keys changes the values, never the number of
 * lines. The snapshot is taken first (limits and types into arrays), then written family by
 * family, as the format wants each family's samples together.
 */
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/grow.h"
#include "server/admin/admin_impl.h"
#include "server/commands.h"
#include "server/admin/prom.h"
#include "server/rcounters.h"
#include "server/rstore.h"
#include "sluice/error.h"

#ifndef SLUICE_VERSION_STRING
#define SLUICE_VERSION_STRING "0.1.0"
#endif

#define OTHER_TYPE "_other"

/* One limit's snapshot. */
typedef struct limit_snap {
    const sluice_limit_policy *p;
    const char *kind;
    sluice_limit_figures f; /* under a shared store: decisions over every node (rcounters.h) */
    uint64_t node_allowed, node_denied, node_units; /* shared store: this node's own */
    uint64_t node_shadow_denied;                    /* and its shadow limits' would-be denials */
    const limit_tally *t;
} limit_snap;

/* One type's snapshot (or the sum of the undeclared ones). */
typedef struct type_snap {
    const char *name;
    sluice_type_stats st;
} type_snap;

typedef struct snapshot {
    admin *a;
    limit_snap *limits;
    size_t nlimits, limits_cap;
    type_snap *types;
    size_t ntypes, types_cap;
    int has_other; /* types[ntypes - 1] is the sum of the undeclared types */
    int shared;    /* counters are summed across nodes (rcounters.h) */
    int failed;
} snapshot;

static void snap_limit(const sluice_limit_policy *p, void *arg)
{
    snapshot *sn = arg;
    limit_snap *l;

    if (sn->failed)
        return;
    if (grow_array(&sn->limits, &sn->limits_cap, sn->nlimits + 1, sizeof(*sn->limits), 16) !=
        SLUICE_OK) {
        sn->failed = 1;
        return;
    }
    l = &sn->limits[sn->nlimits++];
    l->p = p;
    l->kind = sluice_limit_kind_name(p->ntiers > 0 ? p->tiers[0].def.kind : p->def.kind);
    sluice_engine_limit_figures(sn->a->srv->engine, p->name, server_now(sn->a->srv),
                                SLUICE_FIGURES_QUOTA, &l->f);
    l->t = admin_tally(sn->a, p->name);
    /* A shared store decides in the store, not in this node's engine: the counters summed
     * across nodes take the place of the engine's. */
    if (sn->shared) {
        rcounters_get(sn->a->srv, RCTR_LIMIT_ALLOWED, p->name, &l->f.core.allowed,
                      &l->node_allowed);
        rcounters_get(sn->a->srv, RCTR_LIMIT_DENIED, p->name, &l->f.core.denied, &l->node_denied);
        rcounters_get(sn->a->srv, RCTR_LIMIT_UNITS, p->name, &l->f.core.units, &l->node_units);
        rcounters_get(sn->a->srv, RCTR_LIMIT_SHADOW, p->name, &l->f.core.shadow_denied,
                      &l->node_shadow_denied);
    }
}

static void add_type(sluice_type_stats *sum, const sluice_type_stats *st)
{
    sum->queued += st->queued;
    sum->delayed += st->delayed;
    sum->parked += st->parked;
    sum->running += st->running;
    sum->submitted += st->submitted;
    sum->delivered += st->delivered;
    sum->done += st->done;
    sum->failed += st->failed;
    sum->cancelled += st->cancelled;
    sum->retried += st->retried;
    for (size_t i = 0; i <= SLUICE_WAIT_BUCKETS; i++)
        sum->wait[i] += st->wait[i];
    sum->wait_count += st->wait_count;
    sum->wait_sum_ns += st->wait_sum_ns;
}

static void snap_type(const sluice_type_stats *st, void *arg)
{
    snapshot *sn = arg;

    /* Room for every type plus the "other" row was reserved by the caller. */
    if (sn->failed || sn->ntypes + 1 >= sn->types_cap)
        return;
    if (st->declared) {
        sn->types[sn->ntypes].name = st->name;
        sn->types[sn->ntypes].st = *st;
        if (sn->shared) {
            uint64_t own;

            /* The one per-type figure a shared store's nodes count (rcounters.h). */
            rcounters_get(sn->a->srv, RCTR_TASK_DELIVERED, st->name,
                          &sn->types[sn->ntypes].st.delivered, &own);
        }
        sn->ntypes++;
    } else {
        type_snap *o = &sn->types[sn->types_cap - 1];

        o->name = OTHER_TYPE;
        add_type(&o->st, st);
        sn->has_other = 1;
    }
}

static int take_snapshot(admin *a, snapshot *sn)
{
    int n;

    memset(sn, 0, sizeof(*sn));
    sn->a = a;
    sn->shared = rstore_active(a->srv);
    sluice_engine_list_limits(a->srv->engine, snap_limit, sn);
    if (sn->failed)
        return SLUICE_ENOMEM;
    n = sluice_engine_type_stats(a->srv->engine, NULL, NULL);
    if (n < 0)
        return n;
    sn->types_cap = (size_t)n + 2;
    sn->types = alloc_calloc(sn->types_cap, sizeof(*sn->types));
    if (!sn->types)
        return SLUICE_ENOMEM;
    n = sluice_engine_type_stats(a->srv->engine, snap_type, sn);
    if (n < 0)
        return n;
    if (sn->has_other)
        sn->types[sn->ntypes++] = sn->types[sn->types_cap - 1];
    return SLUICE_OK;
}

static void free_snapshot(snapshot *sn)
{
    alloc_free(sn->limits);
    alloc_free(sn->types);
}

/* ---- Families ---------------------------------------------------------------------------- */

/* A per-limit value. */
typedef uint64_t (*limit_value_fn)(const limit_snap *l);

static uint64_t l_allowed(const limit_snap *l)
{
    return l->f.core.allowed;
}
static uint64_t l_denied(const limit_snap *l)
{
    return l->f.core.denied;
}
static uint64_t l_shadow_denied(const limit_snap *l)
{
    return l->f.core.shadow_denied;
}
static uint64_t l_shadow(const limit_snap *l)
{
    return (uint64_t)l->f.shadow;
}
static uint64_t l_units(const limit_snap *l)
{
    return l->f.core.units;
}
static uint64_t l_wanted(const limit_snap *l)
{
    return l->t ? l->t->wanted : 0;
}
static uint64_t l_granted(const limit_snap *l)
{
    return l->t ? l->t->granted : 0;
}
static uint64_t l_parked(const limit_snap *l)
{
    return l->f.parked;
}
static uint64_t l_parked_keys(const limit_snap *l)
{
    return l->f.parked_keys;
}
static uint64_t l_keys(const limit_snap *l)
{
    return l->f.core.keys;
}
static uint64_t l_bytes(const limit_snap *l)
{
    return l->f.core.bytes;
}
static uint64_t l_untracked(const limit_snap *l)
{
    return l->f.core.untracked;
}
static uint64_t l_refused(const limit_snap *l)
{
    return l->f.core.refused;
}
static uint64_t l_forgotten(const limit_snap *l)
{
    return l->f.core.forgotten;
}

typedef struct limit_family {
    const char *name;
    prom_type type;
    const char *help;
    limit_value_fn value;
} limit_family;

static const limit_family limit_families[] = {
    {"sluice_limit_units_granted_total", METRICS_COUNTER,
     "Units the limit granted (a task or a THROTTLE may ask several).", l_units},
    {"sluice_limit_throttled_wanted_total", METRICS_COUNTER,
     "Tasks that polls asked of a key of the limit while it was throttling (THROTTLED events).",
     l_wanted},
    {"sluice_limit_throttled_granted_total", METRICS_COUNTER,
     "Of the tasks in sluice_limit_throttled_wanted_total, those the limit granted.", l_granted},
    {"sluice_limit_parked_tasks", METRICS_GAUGE, "Tasks parked on the limit, waiting for budget.",
     l_parked},
    {"sluice_limit_parked_keys", METRICS_GAUGE, "Keys of the limit with parked tasks.",
     l_parked_keys},
    {"sluice_limit_keys", METRICS_GAUGE, "Keys the limit tracks now.", l_keys},
    {"sluice_limit_memory_bytes", METRICS_GAUGE,
     "Bytes held by the limit's key table, keys and per-key state.", l_bytes},
    {"sluice_limit_keys_untracked_total", METRICS_COUNTER,
     "Requests allowed without tracking their key because the key table was full "
     "(key_overflow allow).",
     l_untracked},
    {"sluice_limit_keys_refused_total", METRICS_COUNTER,
     "Requests refused because the key table was full (key_overflow refuse).", l_refused},
    {"sluice_limit_keys_forgotten_total", METRICS_COUNTER,
     "Keys forgotten because their state carried no information any more.", l_forgotten},
    {"sluice_limit_shadow", METRICS_GAUGE,
     "1 while the limit is in shadow mode (or limits are off): it counts its would-be denials "
     "(decision=\"shadow_denied\") and denies nothing.",
     l_shadow},
};

static void limit_labels(const limit_snap *l, prom_label lb[2])
{
    lb[0].name = "limit";
    lb[0].value = l->p->name;
    lb[1].name = "kind";
    lb[1].value = l->kind;
}

static void write_limits(prom_buf *b, const snapshot *sn)
{
    static const sluice_fail_reason reasons[] = {SLUICE_FAIL_RATELIMITED, SLUICE_FAIL_HORIZON,
                                                 SLUICE_FAIL_NEVER, SLUICE_FAIL_SKIPPED};
    prom_label lb[3];

    prom_family(b, "sluice_limit_decisions_total", METRICS_COUNTER,
                "Charging decisions of the limit: allowed, denied, or shadow_denied (a shadow "
                "limit would have denied, and let it through uncharged). Peeks are not counted.");
    for (size_t i = 0; i < sn->nlimits; i++) {
        limit_labels(&sn->limits[i], lb);
        lb[2].name = "decision";
        lb[2].value = "allowed";
        prom_sample_u64(b, "sluice_limit_decisions_total", lb, 3, l_allowed(&sn->limits[i]));
        lb[2].value = "denied";
        prom_sample_u64(b, "sluice_limit_decisions_total", lb, 3, l_denied(&sn->limits[i]));
        lb[2].value = "shadow_denied";
        prom_sample_u64(b, "sluice_limit_decisions_total", lb, 3, l_shadow_denied(&sn->limits[i]));
    }
    for (size_t f = 0; f < sizeof(limit_families) / sizeof(limit_families[0]); f++) {
        const limit_family *fam = &limit_families[f];

        prom_family(b, fam->name, fam->type, fam->help);
        for (size_t i = 0; i < sn->nlimits; i++) {
            limit_labels(&sn->limits[i], lb);
            prom_sample_u64(b, fam->name, lb, 2, fam->value(&sn->limits[i]));
        }
    }
    if (sn->shared) {
        prom_family(b, "sluice_node_limit_decisions_total", METRICS_COUNTER,
                    "Shared store: the charging decisions of the limit this node made (the "
                    "sluice_limit_decisions_total of a shared store are every node's).");
        for (size_t i = 0; i < sn->nlimits; i++) {
            limit_labels(&sn->limits[i], lb);
            lb[2].name = "decision";
            lb[2].value = "allowed";
            prom_sample_u64(b, "sluice_node_limit_decisions_total", lb, 3,
                            sn->limits[i].node_allowed);
            lb[2].value = "denied";
            prom_sample_u64(b, "sluice_node_limit_decisions_total", lb, 3,
                            sn->limits[i].node_denied);
            lb[2].value = "shadow_denied";
            prom_sample_u64(b, "sluice_node_limit_decisions_total", lb, 3,
                            sn->limits[i].node_shadow_denied);
        }
        prom_family(b, "sluice_node_limit_units_granted_total", METRICS_COUNTER,
                    "Shared store: the units the limit granted through this node.");
        for (size_t i = 0; i < sn->nlimits; i++) {
            limit_labels(&sn->limits[i], lb);
            prom_sample_u64(b, "sluice_node_limit_units_granted_total", lb, 2,
                            sn->limits[i].node_units);
        }
    }
    prom_family(b, "sluice_limit_rejections_total", METRICS_COUNTER,
                "Tasks the limit failed, by reason: ratelimited (overflow reject), horizon "
                "(slot too far), never (more units than it can grant), skipped (a recurring "
                "occurrence).");
    for (size_t i = 0; i < sn->nlimits; i++) {
        limit_labels(&sn->limits[i], lb);
        lb[2].name = "reason";
        for (size_t r = 0; r < sizeof(reasons) / sizeof(reasons[0]); r++) {
            lb[2].value = sluice_fail_reason_name(reasons[r]);
            prom_sample_u64(b, "sluice_limit_rejections_total", lb, 3,
                            sn->limits[i].f.rejected[reasons[r]]);
        }
    }
    prom_family(b, "sluice_limit_quota_spent_units", METRICS_GAUGE,
                "Quota limits: units spent in the current calendar period, over every key.");
    for (size_t i = 0; i < sn->nlimits; i++) {
        const limit_snap *l = &sn->limits[i];
        const sluice_limit_def *d = l->p->ntiers > 0 ? &l->p->tiers[0].def : &l->p->def;

        if (d->kind != SLUICE_QUOTA)
            continue;
        limit_labels(l, lb);
        lb[2].name = "period";
        lb[2].value = d->calendar == SLUICE_CAL_DAY     ? "day"
                      : d->calendar == SLUICE_CAL_MONTH ? "month"
                                                        : "none";
        prom_sample_i64(b, "sluice_limit_quota_spent_units", lb, 3, l->f.quota_spent);
    }
}

/* ---- Types ------------------------------------------------------------------------------- */

typedef uint64_t (*type_value_fn)(const sluice_type_stats *st);

static uint64_t t_submitted(const sluice_type_stats *st)
{
    return st->submitted;
}
static uint64_t t_delivered(const sluice_type_stats *st)
{
    return st->delivered;
}
static uint64_t t_done(const sluice_type_stats *st)
{
    return st->done;
}
static uint64_t t_failed(const sluice_type_stats *st)
{
    return st->failed;
}
static uint64_t t_cancelled(const sluice_type_stats *st)
{
    return st->cancelled;
}
static uint64_t t_retried(const sluice_type_stats *st)
{
    return st->retried;
}

typedef struct type_family {
    const char *name;
    const char *help;
    type_value_fn value;
} type_family;

static const type_family type_families[] = {
    {"sluice_type_tasks_submitted_total", "Tasks submitted.", t_submitted},
    {"sluice_type_tasks_delivered_total", "Deliveries to workers (redeliveries included).",
     t_delivered},
    {"sluice_type_tasks_completed_total", "Tasks acked by a worker.", t_done},
    {"sluice_type_tasks_failed_total",
     "Tasks failed for good (attempts used up, dead, or refused by a limit).", t_failed},
    {"sluice_type_tasks_cancelled_total", "Tasks cancelled.", t_cancelled},
    {"sluice_type_tasks_retried_total", "Failures that were retried.", t_retried},
};

static void write_types(prom_buf *b, const snapshot *sn)
{
    static const char *const states[] = {"queued", "delayed", "parked", "running"};
    prom_label lb[2];
    double bounds[SLUICE_WAIT_BUCKETS];

    prom_family(b, "sluice_type_tasks", METRICS_GAUGE,
                "Unfinished tasks by state: queued (due, waiting for a worker), delayed (a "
                "DELAY or a retry backoff), parked (waiting for budget), running.");
    lb[0].name = "type";
    lb[1].name = "state";
    for (size_t i = 0; i < sn->ntypes; i++) {
        const sluice_type_stats *st = &sn->types[i].st;
        const size_t v[] = {st->queued, st->delayed, st->parked, st->running};

        lb[0].value = sn->types[i].name;
        for (size_t k = 0; k < 4; k++) {
            lb[1].value = states[k];
            prom_sample_u64(b, "sluice_type_tasks", lb, 2, v[k]);
        }
    }
    for (size_t f = 0; f < sizeof(type_families) / sizeof(type_families[0]); f++) {
        prom_family(b, type_families[f].name, METRICS_COUNTER, type_families[f].help);
        for (size_t i = 0; i < sn->ntypes; i++) {
            lb[0].value = sn->types[i].name;
            prom_sample_u64(b, type_families[f].name, lb, 1,
                            type_families[f].value(&sn->types[i].st));
        }
    }
    for (size_t i = 0; i < SLUICE_WAIT_BUCKETS; i++)
        bounds[i] = (double)sluice_wait_bounds_ns[i] / 1e9;
    prom_family(b, "sluice_type_wait_seconds", METRICS_HISTOGRAM,
                "Wait of a task from when it was due (its submission, or the end of its "
                "DELAY) to its first delivery.");
    for (size_t i = 0; i < sn->ntypes; i++) {
        const sluice_type_stats *st = &sn->types[i].st;
        prom_hist h;

        prom_hist_init(&h, bounds, SLUICE_WAIT_BUCKETS);
        memcpy(h.counts, st->wait, sizeof(st->wait));
        h.count = st->wait_count;
        h.sum = (double)st->wait_sum_ns / 1e9;
        lb[0].value = sn->types[i].name;
        prom_hist_write(b, "sluice_type_wait_seconds", lb, 1, &h);
    }
}

/* ---- Server and engine ------------------------------------------------------------------- */

static void gauge(prom_buf *b, const char *name, const char *help, double v)
{
    prom_family(b, name, METRICS_GAUGE, help);
    prom_sample_f64(b, name, NULL, 0, v);
}

static void counter(prom_buf *b, const char *name, const char *help, uint64_t v)
{
    prom_family(b, name, METRICS_COUNTER, help);
    prom_sample_u64(b, name, NULL, 0, v);
}

/* Counters summed across the nodes of a shared store (rcounters.h): every node's figures, this
 * node's own, and how fresh they are. */
static void write_shared_counters(prom_buf *b, server *s)
{
    static const struct {
        const char *event, *code;
    } tasks[] = {{"submitted", RCTR_TASK_SUBMITTED}, {"delivered", RCTR_TASK_DELIVERED},
                 {"completed", RCTR_TASK_DONE},      {"failed", RCTR_TASK_FAILED},
                 {"retried", RCTR_TASK_RETRIED},     {"cancelled", RCTR_TASK_CANCELLED}};
    static const struct {
        const char *decision, *code;
    } decisions[] = {{"allowed", RCTR_THROTTLE_ALLOWED}, {"denied", RCTR_THROTTLE_DENIED}};
    rcounters_stats cs;
    prom_label lb[1];
    uint64_t cl[6], nd[6];

    rcounters_get_stats(s, &cs);
    if (!cs.active)
        return;
    lb[0].name = "decision";
    for (size_t i = 0; i < 2; i++)
        rcounters_get(s, decisions[i].code, "", &cl[i], &nd[i]);
    prom_family(b, "sluice_cluster_decisions_total", METRICS_COUNTER,
                "Shared store: THROTTLE, CL.THROTTLE and LEASE.ACQUIRE decisions of every node "
                "(the same figure on every node; do not sum it across nodes).");
    for (size_t i = 0; i < 2; i++) {
        lb[0].value = decisions[i].decision;
        prom_sample_u64(b, "sluice_cluster_decisions_total", lb, 1, cl[i]);
    }
    prom_family(b, "sluice_node_decisions_total", METRICS_COUNTER,
                "Shared store: THROTTLE, CL.THROTTLE and LEASE.ACQUIRE decisions of this node.");
    for (size_t i = 0; i < 2; i++) {
        lb[0].value = decisions[i].decision;
        prom_sample_u64(b, "sluice_node_decisions_total", lb, 1, nd[i]);
    }
    lb[0].name = "event";
    for (size_t i = 0; i < 6; i++)
        rcounters_get(s, tasks[i].code, "", &cl[i], &nd[i]);
    prom_family(b, "sluice_cluster_tasks_total", METRICS_COUNTER,
                "Shared store: tasks of every node by event (the same figure on every node).");
    for (size_t i = 0; i < 6; i++) {
        lb[0].value = tasks[i].event;
        prom_sample_u64(b, "sluice_cluster_tasks_total", lb, 1, cl[i]);
    }
    prom_family(b, "sluice_node_tasks_total", METRICS_COUNTER,
                "Shared store: tasks by event, as this node served them.");
    for (size_t i = 0; i < 6; i++) {
        lb[0].value = tasks[i].event;
        prom_sample_u64(b, "sluice_node_tasks_total", lb, 1, nd[i]);
    }
    gauge(b, "sluice_counters_age_seconds",
          "Shared store: seconds since this node last read the totals of every node (-1: never).",
          cs.age_ms < 0 ? -1.0 : (double)cs.age_ms / 1e3);
    counter(b, "sluice_counters_flushes_total",
            "Shared store: flushes of this node's counts the store confirmed.", cs.flushes);
    counter(b, "sluice_counters_flush_failures_total",
            "Shared store: flushes without an answer (kept, and sent again).", cs.failures);
    gauge(b, "sluice_counters_unconfirmed",
          "Shared store: counts of this node the store has not confirmed yet.",
          (double)cs.unconfirmed);
}

/* The shared store (rstore.h): only with --store redis://..., so a node without one exports
 * nothing that could be mistaken for an outage. */
static void write_shared_store(prom_buf *b, server *s)
{
    rstore_stats st;

    if (!rstore_active(s))
        return;
    rstore_get_stats(s, &st);
    gauge(b, "sluice_store_up",
          "1 when the shared store (Redis) is connected and its script loaded.", st.up);
    counter(b, "sluice_store_calls_total", "Script calls sent to the shared store (batches).",
            st.batches);
    counter(b, "sluice_store_requests_total", "Decisions sent to the shared store.", st.requests);
    counter(b, "sluice_store_unavailable_total",
            "Decisions answered -STOREDOWN: the store was down or late (store_failure: closed).",
            st.unavailable);
    counter(b, "sluice_store_fail_open_grants_total",
            "Decisions granted without the store (store_failure: open).", st.fail_open_grants);
    counter(b, "sluice_store_connects_total", "Connections to the shared store that came up.",
            st.connects);
    counter(b, "sluice_store_disconnects_total", "Connections to the shared store lost.",
            st.disconnects);
    counter(b, "sluice_store_timeouts_total",
            "Connections dropped because the store did not answer in time.", st.timeouts);
    gauge(b, "sluice_store_in_flight", "Script calls waiting for the store's answer.",
          (double)st.in_flight);
}

static void write_server(prom_buf *b, admin *a)
{
    static const char *const event_kinds[] = {
        "throttled", "deferred", "rejected",      "unknown_limit",
        "budget",    "key_cap",  "shadow_denied", "recurring_too_fast"};
    server *s = a->srv;
    int64_t now = server_now(s);
    sluice_engine_stats es;
    prom_label lb[1];

    prom_family(b, "sluice_build_info", METRICS_GAUGE, "The running version (always 1).");
    lb[0].name = "version";
    lb[0].value = SLUICE_VERSION_STRING;
    prom_sample_u64(b, "sluice_build_info", lb, 1, 1);
    gauge(b, "sluice_start_time_seconds", "When the server started, Unix time.",
          (double)(s->started_ns / SLUICE_NS_PER_MS) / 1e3);
    gauge(b, "sluice_uptime_seconds", "Seconds since the server started.",
          (double)((now - s->started_ns) / SLUICE_NS_PER_MS) / 1e3);
    gauge(b, "sluice_clients", "RESP clients connected now.", (double)s->nclients);
    gauge(b, "sluice_blocked_clients", "RESP clients waiting in a blocking command (TASK.GET).",
          (double)s->nblocked);
    gauge(b, "sluice_limits_enabled",
          "0 while the configuration's `enabled: false` lets every limit through (still counting "
          "as shadow_denied), else 1.",
          (double)sluice_engine_enabled(s->engine));
    counter(b, "sluice_connections_total", "RESP connections accepted.", s->stats.connections);
    counter(b, "sluice_connections_rejected_total",
            "RESP connections refused (max clients, protected mode).", s->stats.rejected);
    counter(b, "sluice_protocol_errors_total", "RESP clients closed after a protocol error.",
            s->stats.protocol_errors);
    gauge(b, "sluice_memory_used_bytes",
          "Bytes held by live allocations, as the allocator counts them (--maxmemory's measure).",
          (double)alloc_live_bytes());
    gauge(b, "sluice_memory_budget_bytes", "The memory budget, --maxmemory (0: no limit).",
          (double)s->maxmemory);
    counter(b, "sluice_memory_refused_total",
            "Commands refused with -OOM because memory was over the budget.", s->stats.oom_refused);
    counter(b, "sluice_memory_client_closes_total",
            "Clients closed for their queued replies while memory was over the budget.",
            s->stats.oom_closes);

    prom_family(b, "sluice_commands_total", METRICS_COUNTER, "Commands run, by name.");
    lb[0].name = "command";
    for (size_t i = 0; i < command_count && i < COUNTERS_MAX_COMMANDS; i++) {
        lb[0].value = command_table[i].name;
        prom_sample_u64(b, "sluice_commands_total", lb, 1, s->counters.calls[i]);
    }
    prom_family(b, "sluice_command_errors_total", METRICS_COUNTER,
                "Error replies, by code (docs/commands.md); other: any code not listed.");
    lb[0].name = "code";
    for (size_t i = 0; i < COUNTERS_ERROR_CODES; i++) {
        lb[0].value = counters_error_name(i);
        prom_sample_u64(b, "sluice_command_errors_total", lb, 1, s->counters.errors[i]);
    }
    prom_family(b, "sluice_store_commit_seconds", METRICS_HISTOGRAM,
                "Duration of a store commit (empty while no store is attached).");
    prom_hist_write(b, "sluice_store_commit_seconds", NULL, 0, &s->counters.store_commit);
    write_shared_store(b, s);
    write_shared_counters(b, s);

    sluice_engine_get_stats(s->engine, &es);
    prom_family(b, "sluice_tasks", METRICS_GAUGE, "Unfinished tasks by state, all types.");
    lb[0].name = "state";
    lb[0].value = "queued";
    prom_sample_u64(b, "sluice_tasks", lb, 1, es.queued);
    lb[0].value = "delayed";
    prom_sample_u64(b, "sluice_tasks", lb, 1, es.delayed);
    lb[0].value = "parked";
    prom_sample_u64(b, "sluice_tasks", lb, 1, es.parked);
    lb[0].value = "running";
    prom_sample_u64(b, "sluice_tasks", lb, 1, es.running);
    gauge(b, "sluice_tasks_parked_peak", "Most tasks parked at once since the start.",
          (double)es.parked_peak);
    gauge(b, "sluice_tasks_memory_bytes", "Bytes held by unfinished tasks and their indexes.",
          (double)es.tasks_bytes);
    counter(b, "sluice_tasks_redelivered_total", "Tasks delivered again after a lost lease.",
            es.redelivered);

    prom_family(b, "sluice_events_total", METRICS_COUNTER,
                "Engine events by kind (a summary counts the events it summarises).");
    lb[0].name = "event";
    for (size_t k = 1; k < ADMIN_EVENT_KINDS; k++) {
        lb[0].value = event_kinds[k - 1];
        prom_sample_u64(b, "sluice_events_total", lb, 1, a->events[k]);
    }
    counter(b, "sluice_admin_requests_total", "HTTP requests to the admin port.", a->requests);
    gauge(b, "sluice_admin_event_streams", "Clients reading /api/events now.", (double)a->nclients);
    counter(b, "sluice_admin_events_dropped_total",
            "Events dropped because an /api/events client read too slowly.", a->sse_dropped);
}

enum MHD_Result admin_metrics(admin *a, struct MHD_Connection *c)
{
    snapshot sn;
    prom_buf b;
    char *text;
    size_t len;
    int rc;

    rc = take_snapshot(a, &sn);
    if (rc != SLUICE_OK) {
        free_snapshot(&sn);
        return admin_reply_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "nomem", "out of memory");
    }
    prom_buf_init(&b);
    write_server(&b, a);
    write_types(&b, &sn);
    write_limits(&b, &sn);
    free_snapshot(&sn);
    text = prom_buf_take(&b, &len);
    if (!text)
        return admin_reply_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "nomem", "out of memory");
    return admin_reply_owned(c, MHD_HTTP_OK, METRICS_CONTENT_TYPE, text, len);
}
