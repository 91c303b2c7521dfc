/* SPDX-License-Identifier: MIT */
/*
 * The engine's internal objects, shared by its modules (engine.c, task.c, registry.c, resolve.c,
 * ready.c, gate.c, park.c, recurring.c, persist.c). Nothing here is API: include/sluice/engine.h
 * is.
 *
 * Where a task lives, by state (each task is in exactly one place):
 *   QUEUED, due      -> its type's ready queue: the heap etype.ready by priority then sequence,
 *                       or under fair dispatch the heap of its flow (ready.h);
 *   QUEUED, delayed  -> the timer heap (not_before or retry backoff), TASK_DELAYED set;
 *   PARKED           -> the heap of one wait queue (waitq.tasks), by priority then sequence;
 *   RUNNING          -> the timer heap (its lease expiry);
 *   finished         -> the finished FIFO (kept for task_info until max_finished is passed).
 * Every task kept is in the id table; unfinished tasks with a task key are in the task-key table.
 * A task is in at most one heap at a time, so one index field (hidx) serves them all.
 *
 * Ownership: the engine owns every object. A task's links hold a reference on their named limit
 * (elimit.refs), so a limit removed while old tasks still name it stays readable (and is skipped
 * by the gate) until the last of them is freed. Types are never freed while tasks refer to them.
 */
#ifndef SLUICE_ENGINE_IMPL_H
#define SLUICE_ENGINE_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/cron.h"
#include "engine/events.h"
#include "engine/feed.h"
#include "base/heap.h"
#include "engine/introspect.h"
#include "base/ptab.h"
#include "sluice/engine.h"
#include "sluice/limit.h"
#include "sluice/policy.h"

typedef struct elimit elimit;
typedef struct etype etype;
typedef struct task task;
typedef struct waitq waitq;
typedef struct series series;
typedef struct fairq fairq;
typedef struct rflow rflow;

/* A named limit: the policy and one core limit per tier (one when untiered). */
struct elimit {
    sluice_limit_policy pol; /* owned copy */
    sluice_limit **lims;     /* nlims core limits: tier i's; untiered, the one of pol.def and
                              * then one per key override (lims[1 + i] is pol.overrides[i]'s) */
    size_t nlims;
    size_t refs;         /* task links naming it, plus one while it is registered */
    int dead;            /* removed by del_limit: the gate skips it */
    uint64_t hash;       /* of the name, its key in the engine's limit index */
    size_t pos;          /* its slot in the engine's limits array while registered */
    size_t typerefs;     /* entries of declared types' chains naming it (del_limit refuses) */
    waitq *wqs;          /* its wait queues (list through waitq.next) */
    limit_counts counts; /* introspect.h: tasks it failed, by reason */
    sluice_engine *eng;  /* the engine whose feed its cores tell of changes (feed_track) */
    int dirty;           /* 1 while on the feed's list of limits to drain */
    size_t dirty_pos;    /* its slot in that list while dirty */
};

/* A task type: its settings and its ready queue. */
struct etype {
    sluice_type_policy pol; /* owned; defaults for an undeclared type */
    elimit **chain;         /* pol.nlimits limits, resolved by name (declared types) */
    int declared;           /* 0: created for a submit of an undeclared type */
    uint64_t hash;          /* of the name, its key in the type table */
    heap ready;             /* FIFO: due QUEUED tasks, most urgent first (empty when fair) */
    fairq *fair;            /* fair dispatch between keys: its flows (ready.c); NULL = FIFO */
    size_t nready;          /* due QUEUED tasks, in either */
    size_t tidx;            /* position in the engine's heap of types with ready tasks */
    size_t refs;            /* tasks kept that are of this type */
    type_counts counts;     /* introspect.h: what its tasks did */
};

/* Link flags. */
#define LINK_SETTLE  1u /* units came from the task (or its input): settled by an ack's cost */
#define LINK_CHARGED 2u /* charged by the task's current grant */
#define LINK_SHADOW  4u /* a shadow limit would have denied the current grant (not charged) */

/* One limit of a task's chain, resolved at submit. */
typedef struct task_link {
    elimit *lim;       /* the named limit (a reference is held) */
    const char *key;   /* the key, NUL-terminated, in the task's block */
    int64_t units;     /* units asked of this limit */
    uint64_t lease_id; /* concurrency: the lease held while RUNNING, else 0 */
    uint32_t keylen;
    uint16_t tier; /* which of lim->lims */
    uint8_t flags; /* LINK_* */
} task_link;

/* Task flags. */
#define TASK_HOLDS_GRANT 1u /* its grant survives a lost lease: redeemed without a charge */
#define TASK_FREE_RETRY  2u /* a retry under throttle_retries 0: only concurrency is asked */
#define TASK_DELAYED     4u /* QUEUED in the timer heap until due_ns */

#define LINK_NONE UINT16_MAX

struct task {
    uint64_t id;
    uint64_t seq; /* submission order (kept when woken, so order is preserved) */
    size_t hidx;  /* position in its heap (HEAP_NONE when in none) */
    etype *type;
    union {
        waitq *wq;   /* PARKED: the wait queue (NULL otherwise while unfinished) */
        task *fnext; /* finished: the next newer finished task */
    };
    series *series; /* a recurring occurrence: its series, else NULL */
    char *payload;  /* owned JSON text, NUL-terminated; NULL = {} */
    size_t payload_len;
    char *fail_message;    /* owned; a worker's reason, or NULL */
    const char *task_key;  /* in the block; NULL when none */
    const char *key;       /* the producer's explicit rate-limit key, in the block; NULL = none */
    int64_t units;         /* the task's units (spec.units, 1 by default) */
    int64_t submitted_ns;  /* when it was submitted */
    int64_t not_before_ns; /* not delivered before this */
    union {
        int64_t due_ns;         /* unfinished: timer key (not_before, backoff end, lease end) */
        int64_t retry_after_ns; /* FAILED by a limit: its retry_after */
    };
    int64_t granted_ns;    /* when the current grant was charged */
    uint64_t group_lease;  /* the producer's lease it runs under (group_link's limit), or 0 */
    uint64_t group_tag;    /* that lease's tag (sluice_lease_tag), kept for the task's record */
    uint32_t bytes;        /* the block's size */
    uint32_t task_key_len; /* bytes of task_key */
    uint32_t key_len;      /* bytes of key */
    int priority;          /* higher runs first */
    int attempt;           /* deliveries so far */
    uint16_t nlinks;       /* entries of links */
    uint16_t park_link;    /* PARKED: the link whose wait queue holds it */
    uint16_t fail_link;    /* FAILED by a limit: the link that said no, else LINK_NONE */
    uint16_t group_link;   /* the link group_lease stands in for; LINK_NONE when none or the
                            * lease ended (the task then takes its own unit: gate_group_check) */
    uint8_t state;         /* sluice_task_state */
    uint8_t flags;         /* TASK_* */
    uint8_t fail_reason;   /* sluice_fail_reason */
    task_link links[];     /* its chain, in the type's order */
};

/* The parked tasks of one limit, tier and key. Exists while it holds a task. */
struct waitq {
    elimit *lim;     /* the limit waited on */
    uint16_t tier;   /* which of its core limits */
    char *key;       /* owned copy, NUL-terminated */
    size_t keylen;   /* bytes of key */
    uint64_t hash;   /* its key in the wait queue table */
    heap tasks;      /* most urgent first */
    task *last;      /* the least urgent task on it: the last in line */
    int64_t units;   /* units of its tasks on this queue's link, while units_exact */
    int units_exact; /* 0 once the sum overflowed: estimates then walk the queue */
    int64_t wake_ns; /* when the parking lot looks at it again; SLUICE_NEVER when not armed */
    size_t widx;     /* position in the wake heap */
    waitq *next;     /* the limit's list of wait queues */
    waitq *prev;
};

/* One entry of a poll's THROTTLED accounting: what one limit and key was asked and gave. */
typedef struct acct_entry {
    elimit *lim;
    const char *key;  /* borrowed from a task link, valid during the poll */
    size_t keylen;    /* bytes of key */
    uint64_t hash;    /* of limit, tier and key: its key in acct_index */
    const char *type; /* the first task type seen */
    uint16_t tier;    /* which core limit of lim */
    int64_t wanted;   /* tasks that asked it in this poll */
    int64_t granted;  /* of which granted */
} acct_entry;

struct sluice_engine {
    sluice_engine_policy pol;
    elimit **limits;         /* registered limits, in name order unless limits_dirty */
    size_t nlimits;          /* entries of limits */
    size_t limits_cap;       /* slots of limits */
    ptab limit_index;        /* elimit by name: the limits of the array */
    int limits_dirty;        /* adds / removals broke the order: registry_order() sorts it */
    size_t sweep_pos;        /* the slot of limits the next registry_sweep starts at */
    uint64_t limits_version; /* bumped by every change of a limit's policy, mode, overrides or
                              * existence (sluice_engine_limits_version) */
    ptab types;              /* etype by name */
    size_t ntypes;           /* types created (the types_ready heap reserves room for all) */
    heap types_ready;        /* types with ready tasks, by the task each hands out next */
    rflow *idle_flows;       /* fair flows left empty, freed by ready_trim (ready.c) */
    ptab ids;                /* every task kept, by id */
    ptab task_keys;          /* unfinished tasks with a task key, by task key */
    heap timers;             /* delayed and running tasks, by due_ns */
    ptab waitqs;             /* wait queues by limit, tier and key */
    heap wakes;              /* armed wait queues, by wake_ns */
    ptab series_names;       /* recurring series by name */
    heap series_due;         /* live series, by next occurrence */
    task *fin_head;          /* finished FIFO, oldest first */
    task *fin_tail;          /* its newest */
    size_t nfinished;        /* tasks in it */
    events *ev;              /* the event aggregator */
    /* Scratch, grown on demand and reused. */
    sluice_chain_link *chain;   /* gate: the links asked */
    sluice_decision *decisions; /* gate: each link's answer */
    uint16_t *chain_map;        /* gate: chain entry -> task link */
    size_t chain_cap;           /* entries of chain, decisions and chain_map */
    char *kbuf;                 /* resolve: extracted keys */
    size_t kbuf_cap;            /* bytes of kbuf */
    acct_entry *acct;           /* poll: THROTTLED accounting, entries in the order first seen */
    size_t acct_cap;            /* entries allocated in acct */
    size_t acct_n;              /* entries in use */
    ptab acct_index;            /* acct's entries by limit, tier and key */
    /* Counts. */
    uint64_t next_id;              /* the last id given */
    uint64_t next_seq;             /* the last submission sequence given */
    size_t nunfinished;            /* tasks not finished */
    size_t nqueued;                /* QUEUED in ready heaps */
    size_t nparked;                /* PARKED */
    size_t nrunning;               /* RUNNING */
    size_t ndelayed;               /* QUEUED in the timer heap */
    size_t task_bytes;             /* blocks and payloads of unfinished tasks */
    sluice_engine_stats st;        /* the counters (state counts are filled in by get_stats) */
    struct feed *feed;             /* the change feed (feed.h); NULL until started */
    int limits_off;                /* the global switch is off: every limit acts as shadow */
    sluice_foreign_limits foreign; /* limits kept outside the engine; visit NULL when none */
};

/* Records in the change feed that the durable record of task `id` changed (or that the task was
 * forgotten). Called after the change, so that an export at the next pull sees it. */
static inline void engine_changed(const sluice_engine *e, uint64_t id)
{
    if (e->feed)
        feed_task(e->feed, id);
}

/* Emits an event through the aggregator (best effort: running out of memory there delivers it
 * unaggregated and is otherwise ignored). */
void engine_emit(sluice_engine *e, const sluice_event *ev, int64_t now_ns);

/* Moves an unfinished task that is in no heap and no wait queue to a finished state: drops its
 * task key, counts it, files it in the finished FIFO, reports the change. Allocates nothing.
 * Ensures: t->state == state and t is reachable by id until max_finished newer tasks finished. */
void engine_finish(sluice_engine *e, task *t, sluice_task_state state, sluice_fail_reason reason,
                   uint16_t fail_link, int64_t retry_after_ns, int64_t now_ns);

/* Files a task that is already in a finished state at the newest end of the finished FIFO
 * (counts nothing, reports nothing). */
void engine_file_finished(sluice_engine *e, task *t);

/* Frees finished tasks beyond max_finished, oldest first, reporting each as forgotten. */
void engine_trim_finished(sluice_engine *e);

/* Submits a task; with series set, an occurrence of that series. With dry_run set, checks
 * everything a submit checks (type, payload, keys, tiers, units) but creates nothing and
 * applies no cap or task key. Returns and fills *id / *err as sluice_engine_submit(). */
int engine_submit_internal(sluice_engine *e, const sluice_task_spec *spec, series *s, int dry_run,
                           int64_t now_ns, uint64_t *id, sluice_submit_error *err);

/* Cancels a QUEUED or PARKED task (removed from its queue, finished CANCELLED, its series told).
 * Allocates nothing; the caller trims the finished tasks. */
void engine_cancel_task(sluice_engine *e, task *t, int64_t now_ns);

#endif
