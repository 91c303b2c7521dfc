/* SPDX-License-Identifier: MIT */
/*
 * The dispatch engine: tasks, ready queues, the gate, the parking lot, retries, recurring tasks
 * and events. Pure: every call that can act (change a task, a limit, a series, or emit an event)
 * takes `now_ns` (ns since the Unix epoch) and nothing reads a clock, a socket or a file, so the
 * same engine runs under the server and on a simulated clock.
 *
 * Time: pass a `now_ns` that never goes backwards (the server passes its cached loop time, which
 * cannot). The engine keeps no clock of its own: it uses each `now_ns` as given, and events are
 * stamped with the `now_ns` of the call that caused them. If you do pass an older `now_ns`: the
 * limits read it as their newest time (limit.h, "Time": the one clamp in sluice), so no key is
 * locked out and no budget is released early; the engine's own times are computed from it as
 * given, so a lease granted or a retry scheduled then ends earlier than it would have, and a
 * delayed task or an expired lease is acted on only at a `now_ns` past its time. Reads
 * (task_info, explain, figures, top_parked, stats, next_wake) change nothing, the limits' clocks
 * included: a later `now_ns` given to a read does not hold back a decision at an earlier one.
 *
 * Life of a task: submit -> QUEUED (in its type's ready queue, or delayed until not_before) ->
 * a worker polls -> the gate evaluates the type's chain:
 *   granted                 -> RUNNING, delivered with a lease (visibility timeout);
 *   denied, overflow wait   -> PARKED on the wait queue of the limit and key that said no, until
 *                              the parking lot wakes that key at its slot (then QUEUED again);
 *   denied, overflow reject,
 *   or slot past horizon    -> FAILED with a typed reason.
 * RUNNING -> ack -> DONE; fail -> retry (delayed by backoff, QUEUED) or FAILED; lease expiry ->
 * QUEUED again (redelivery, which redeems the grant it already holds, or pays its limits again
 * when its type has charge_redelivery). CANCELLED from any unfinished state but RUNNING.
 *
 * Invariants:
 * - A worker never waits for budget: poll hands out granted tasks only and parks the others.
 * - No head-of-line blocking: a parked task sits in its key's wait queue, not in a ready queue.
 * - A task is never dropped silently: every submitted task ends DONE, FAILED (with a reason) or
 *   CANCELLED, or is still queued, parked or running.
 * - A parked task is not overtaken on its key by a less urgent one (strict priority, so a heavy
 *   task is not starved by light ones behind it).
 *
 * Not thread-safe: one thread (the server's loop) owns an engine.
 */
#ifndef SLUICE_ENGINE_H
#define SLUICE_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "sluice/limit.h"
#include "sluice/policy.h"

#include "sluice/export.h"

#ifdef __cplusplus
extern "C" {
#endif
SLUICE_API_BEGIN

typedef struct sluice_engine sluice_engine;

typedef enum sluice_task_state {
    SLUICE_TASK_QUEUED = 1, /* waiting for a worker (or for its not_before time) */
    SLUICE_TASK_PARKED,     /* waiting for budget */
    SLUICE_TASK_RUNNING,    /* delivered to a worker under a lease */
    SLUICE_TASK_DONE,
    SLUICE_TASK_FAILED,
    SLUICE_TASK_CANCELLED,
} sluice_task_state;

/* Why a task failed (or an occurrence was skipped). */
typedef enum sluice_fail_reason {
    SLUICE_FAIL_NONE = 0,
    SLUICE_FAIL_RATELIMITED, /* a limit with overflow reject said no */
    SLUICE_FAIL_HORIZON,     /* its slot lay beyond the limit's horizon */
    SLUICE_FAIL_NEVER,       /* it asks more units than the limit can ever grant */
    SLUICE_FAIL_ATTEMPTS,    /* it failed max_attempts times */
    SLUICE_FAIL_DEAD,        /* the worker failed it with DEAD (no retry) */
    SLUICE_FAIL_SKIPPED,     /* a recurring occurrence that could not run before the end */
} sluice_fail_reason;

/* What a producer submits. Strings are copied; NULL / 0 means "not given". */
typedef struct sluice_task_spec {
    const char *type;
    const char *payload; /* JSON text (the task's input); NULL = {} */
    size_t payload_len;
    const char *key; /* explicit rate-limit key, for limits with key: explicit */
    size_t key_len;
    const char *task_key; /* identity for dedup/replace; NULL = none */
    size_t task_key_len;
    int64_t units;    /* 0 = 1 */
    int has_priority; /* 0 = the type's default priority */
    int priority;
    int64_t not_before_ns; /* 0 = now */
    /* A workflow-level slot (docs/limits.md, "Group slots"): the task runs under a concurrency
     * lease its producer holds instead of taking its own unit of that limit. lease_limit names
     * the concurrency limit of the task's chain, lease_id the live lease on the task's key of it
     * (sluice_lease_acquire on the engine's live core); NULL and 0 = none. lease_tag is the
     * lease's tag (sluice_lease_tag: 0 for sluice_lease_acquire's, the holder's own for
     * sluice_lease_acquire_kept's): a lease of that id with another tag is someone else's, and
     * the submit is refused as for a lease that is gone. */
    const char *lease_limit;
    uint64_t lease_id;
    uint64_t lease_tag;
} sluice_task_spec;

/* Details of a refusal or a failure: which limit said no, and when it will say yes. Every
 * pointer is borrowed from the engine and valid until the next call that changes it. */
typedef struct sluice_denial {
    sluice_fail_reason reason;
    const char *limit;      /* the limit's name */
    const char *kind;       /* its kind: rate, window, sliding, concurrency, quota */
    const char *tier;       /* the tier chosen, or NULL */
    const char *key;        /* the key (possibly a SHA-256 hex of a long key) */
    int64_t limit_value;    /* its capacity: permits, window limit, concurrent units, budget */
    int64_t window_ns;      /* its period or window (0 for concurrency and quotas) */
    int64_t retry_after_ns; /* SLUICE_NEVER when waiting cannot help */
    int64_t current;        /* quota: the key's spending in its current period, as the limit
                             * sees it now (seed 004's current_agents); else 0 */
    int64_t attempted;      /* quota: the units the task asked of it (attempted_new_agents);
                             * else 0 */
} sluice_denial;

/* A submit's error details (for EINVAL, ENOTFOUND "unknown limit", EBUSY, EEXIST). */
typedef struct sluice_submit_error {
    char message[256];    /* one line */
    uint64_t existing_id; /* EEXIST: the running task holding the task key */
} sluice_submit_error;

/* A task handed to a worker. Borrowed pointers, valid until the task is acked, failed, or its
 * lease expires. */
typedef struct sluice_delivery {
    uint64_t id;
    const char *type;
    const char *payload;
    size_t payload_len;
    int attempt;            /* 1 for the first delivery */
    int64_t lease_until_ns; /* redelivered to another worker after this unless acked/touched */
    int charged;            /* 1: this grant charged every limit of the task's chain (a first
                             * delivery, a retry under throttle_retries, or a redelivery under
                             * charge_redelivery); 0: it redeemed a grant the task held
                             * (redelivery after a lost lease) or is a retry
                             * under throttle_retries 0, and took its concurrency units only.
                             * What was charged, per limit: sluice_engine_task_charges */
} sluice_delivery;

/* A snapshot of one task. Borrowed pointers as for sluice_delivery. */
typedef struct sluice_task_info {
    uint64_t id;
    sluice_task_state state;
    const char *type;
    const char *payload;
    size_t payload_len;
    const char *task_key; /* NULL when none */
    int64_t units;
    int priority;
    int attempt; /* deliveries so far */
    int64_t submitted_ns;
    int64_t not_before_ns;  /* not delivered before this: its delay, or a retry's backoff end */
    int64_t lease_until_ns; /* RUNNING only */
    sluice_denial failure;  /* FAILED only */
    char fail_message[128]; /* a worker's reason, or the engine's */
} sluice_task_info;

/* Why a task waits and when it should start. */
typedef struct sluice_explanation {
    sluice_task_state state;
    const char *limit; /* PARKED: the limit and key it waits on */
    const char *key;
    size_t position;            /* PARKED: tasks ahead of it on that key (0 = next) */
    size_t queue_length;        /* PARKED: tasks on that key */
    int64_t wake_ns;            /* PARKED: when the key is woken next */
    int64_t estimated_start_ns; /* best estimate of its start; 0 when unknown */
    char text[384];             /* one human sentence (two when the key's adaptive rate is
                                 * lowered: it says to what and why) */
} sluice_explanation;

/* ---- Events -------------------------------------------------------------------------------- */

typedef enum sluice_event_kind {
    SLUICE_EVENT_THROTTLED = 1,      /* a poll wanted more tasks of a key than it could grant */
    SLUICE_EVENT_DEFERRED,           /* tasks parked on a key */
    SLUICE_EVENT_REJECTED,           /* tasks failed by a limit (reject, horizon, never) */
    SLUICE_EVENT_UNKNOWN_LIMIT,      /* a type names a limit that does not exist */
    SLUICE_EVENT_BUDGET,             /* a quota key crossed 80% or 100% of its budget */
    SLUICE_EVENT_KEY_CAP,            /* a limit's key table is full */
    SLUICE_EVENT_SHADOW_DENIED,      /* a limit in shadow mode (or with limits off) would have
                                      * denied a task: it went on, uncharged by that limit */
    SLUICE_EVENT_RECURRING_TOO_FAST, /* a recurring series was added whose schedule is faster
                                      * than a limit of its type lets occurrences through: key
                                      * is the series' name, wanted its shortest gap between
                                      * points (ns), granted the limit's emission interval
                                      * (period / limit x units, ns); emitted once, at creation */
} sluice_event_kind;

/* One event, or the summary of several of one kind, limit and key within one interval.
 * Borrowed strings, valid during the callback only. */
typedef struct sluice_event {
    sluice_event_kind kind;
    int64_t at_ns; /* the first occurrence in the interval */
    const char *limit;
    const char *key;
    const char *type;     /* the task type, when one applies */
    uint64_t count;       /* occurrences summarised (1 for the first, immediate event) */
    int64_t wanted;       /* THROTTLED: tasks asked for; BUDGET: percent crossed (80, 100) */
    int64_t granted;      /* THROTTLED: tasks granted */
    int64_t next_slot_ns; /* DEFERRED: the key's next slot; SHADOW_DENIED: when the enforced
                           * limit would have let the task through (the latest, in a summary) */
    int summary;          /* 1 for an end-of-interval summary */
} sluice_event;

typedef void (*sluice_event_fn)(const sluice_event *ev, void *arg);

/* ---- The engine ---------------------------------------------------------------------------- */

/* Creates an engine with the given settings (NULL = defaults). Returns 0 and *out, or
 * SLUICE_ENOMEM / SLUICE_EINVAL. */
int sluice_engine_new(const sluice_engine_policy *policy, sluice_engine **out);

/* Frees the engine and every task. Accepts NULL. */
void sluice_engine_free(sluice_engine *e);

/* Receives every event (aggregated per kind, limit and key per event_interval). */
void sluice_engine_on_event(sluice_engine *e, sluice_event_fn fn, void *arg);

/* Adds a named limit, or replaces one of the same name (its key state restarts; tasks parked
 * on it are woken at now_ns to be gated again). A policy that differs from the live one in its
 * mode alone is better applied with sluice_engine_set_limit_mode, which keeps the key state. The
 * policy is copied and validated. Returns 0, or
 * SLUICE_EINVAL / SLUICE_ERANGE with msg, or SLUICE_ENOMEM. */
int sluice_engine_set_limit(sluice_engine *e, const sluice_limit_policy *p, int64_t now_ns,
                            char *msg, size_t msglen);

/* A limit built without an engine, for installing later in O(1) (a configuration reload builds
 * its changed limits on a worker thread, then installs them all in one turn of the loop). */
typedef struct sluice_limit_build sluice_limit_build;

/* Validates p and builds what sluice_engine_set_limit would install: a copy of the policy and
 * its core limits, with fresh state. Touches no engine and no shared state (only the
 * allocator), so it may run on any thread. Returns 0 and *out (free it with
 * sluice_limit_build_free, or install it), or SLUICE_EINVAL / SLUICE_ERANGE with msg, or
 * SLUICE_ENOMEM; *out is NULL on failure. */
int sluice_limit_build_new(const sluice_limit_policy *p, sluice_limit_build **out, char *msg,
                           size_t msglen);

/* Frees a build (on any thread, once no engine uses it). Accepts NULL. */
void sluice_limit_build_free(sluice_limit_build *b);

/* Makes room for `more` limits of new names, so that as many sluice_engine_install_limit calls
 * cannot fail. Returns 0 or SLUICE_ENOMEM (nothing changed). */
int sluice_engine_reserve_limits(sluice_engine *e, size_t more);

/* Installs *b under its policy's name, as sluice_engine_set_limit(e, policy, now_ns) would,
 * without allocating when room was reserved: a new name takes the build itself (*b becomes
 * NULL); an existing limit is replaced in place (its key state restarts, its leases become stale)
 * and *b receives its previous policy and cores, for the caller to free with
 * sluice_limit_build_free (on any thread). Returns 0, or SLUICE_ENOMEM for a new name without
 * reserved room (nothing changed). */
int sluice_engine_install_limit(sluice_engine *e, sluice_limit_build **b, int64_t now_ns);

/* Forgets idle keys (at most `budget` per core, sluice_limit_sweep) of at most max_limits limits,
 * every tier and override core of each, continuing round-robin where the previous call (or the
 * tick's own sweep, which goes 256 limits at a time) stopped, so a timer that calls it pauses for
 * a bounded time however many limits there are. Returns how many limits it swept. */
size_t sluice_engine_sweep_limits(sluice_engine *e, int64_t now_ns, size_t budget,
                                  size_t max_limits);

/* A counter bumped by every change of a limit's policy, mode or overrides, and by every limit
 * added or removed (sluice_engine_set_limit, _set_limit_mode, _set_key_override, _del_limit,
 * _install_limit). Equal readings mean no limit changed in between. */
uint64_t sluice_engine_limits_version(const sluice_engine *e);

/* Switches a limit between enforce and shadow mode (policy.h, sluice_limit_mode) without
 * replacing it: its key state, its leases and the charges of running tasks are kept, so a limit
 * rolled out in shadow and watched is enforced with the budget it has been counting. Switching
 * to shadow wakes the tasks parked on it at now_ns (it no longer holds them). The change feed
 * records a DROP of the limit's stored runtime definition (its key states stay): a caller that
 * persists the change records its SET over it, as after sluice_engine_set_limit. Returns 0,
 * SLUICE_ENOTFOUND, or SLUICE_EINVAL for an unknown mode. */
int sluice_engine_set_limit_mode(sluice_engine *e, const char *name, sluice_limit_mode mode,
                                 int64_t now_ns);

/* The global switch (seed 004's `enabled`): with on == 0 every limit behaves as in shadow mode,
 * whatever its own mode: evaluated, charged and counted (shadow_denied, SHADOW_DENIED events),
 * never denying, and the tasks parked on any limit are woken at now_ns. on != 0 (the default)
 * gives every limit its own mode back. Key state is kept either way. */
void sluice_engine_set_enabled(sluice_engine *e, int on, int64_t now_ns);

/* Returns 0 when limits are switched off engine-wide (sluice_engine_set_enabled), else 1. */
int sluice_engine_enabled(const sluice_engine *e);
/* Per-key overrides of a keyed, untiered limit (a paying tenant's own rate): gives `key` (keylen
 * bytes; see sluice_key_override for what a key may hold) its own definition def, of the limit's
 * kind, or removes its override when def is NULL. Unlike sluice_engine_set_limit, only that key's
 * state restarts; every other key, and the limit's other overrides, keep theirs. The limit's
 * policy (sluice_engine_get_limit) shows the change at once, and its one-line spec carries it
 * (policy_spec.h), which is what a store records. Returns 0; SLUICE_ENOTFOUND (no such limit, or
 * no override of key to remove); SLUICE_EINVAL / SLUICE_ERANGE with msg; SLUICE_ENOMEM. Nothing
 * changes on failure. */
int sluice_engine_set_key_override(sluice_engine *e, const char *name, const char *key,
                                   size_t keylen, const sluice_limit_def *def, int64_t now_ns,
                                   char *msg, size_t msglen);

/* Removes a limit (tasks parked on it are woken at now_ns). Returns SLUICE_ENOTFOUND, or
 * SLUICE_ESTATE when a type still names it. */
int sluice_engine_del_limit(sluice_engine *e, const char *name, int64_t now_ns);

/* Finds a limit by name; NULL when absent. The pointer is valid until the limit is replaced or
 * removed. `live` (may be NULL) receives the core limit object (the first tier's for tiered). */
const sluice_limit_policy *sluice_engine_get_limit(const sluice_engine *e, const char *name,
                                                   sluice_limit **live);

/* Visits the limits in name order. Returns how many there are. */
size_t sluice_engine_list_limits(const sluice_engine *e,
                                 void (*fn)(const sluice_limit_policy *p, void *arg), void *arg);

/* Adds or replaces a task type. Every limit it names must exist (SLUICE_ENOTFOUND, msg names
 * it, and an UNKNOWN_LIMIT event stamped now_ns is emitted). */
int sluice_engine_set_type(sluice_engine *e, const sluice_type_policy *t, int64_t now_ns, char *msg,
                           size_t msglen);

/* Finds a type by name; NULL when absent. */
const sluice_type_policy *sluice_engine_get_type(const sluice_engine *e, const char *name);

/* Submits a task. Its limits' keys and tiers are resolved now, so a missing key path, an
 * invalid payload or an unknown type (strict_types) fails here. With a task_key already held by
 * a queued or parked task, that task's payload is replaced and it keeps its place (*id is its
 * id). Returns 0 and *id, or: SLUICE_EINVAL (bad spec/payload/key path; a lease_limit the
 * type's chain has no concurrency link of, or a lease on another key), SLUICE_ESTALE (the lease
 * expired or was released), SLUICE_ENOTFOUND (unknown type under strict_types, or unknown
 * limit), SLUICE_EBUSY (a cap is reached), SLUICE_EEXIST (the task_key is running),
 * SLUICE_ENOMEM; *err (may be NULL) explains. A submit that replaces a queued task's payload by
 * task key leaves that task's group as it was. */
int sluice_engine_submit(sluice_engine *e, const sluice_task_spec *spec, int64_t now_ns,
                         uint64_t *id, sluice_submit_error *err);

/* Hands out up to `max` granted tasks of the given types (ntypes == 0: any type), most urgent
 * first (higher priority; then, within a type, submission order, or under fairness keys a fair
 * share of units between the keys of its fair limit), taking each through the gate; denied tasks
 * are parked or failed on the way. Returns the number delivered (0 when nothing is grantable now;
 * see sluice_engine_next_wake), or SLUICE_ENOMEM. */
int sluice_engine_poll(sluice_engine *e, const char *const *types, size_t ntypes, size_t max,
                       int64_t now_ns, sluice_delivery *out);

/* Completes a running task. cost >= 0 settles its unit limits and quotas with the actual cost
 * (instead of the units charged); cost < 0 keeps the charge. Releases its concurrency leases.
 * Returns 0, SLUICE_ENOTFOUND, or SLUICE_ESTATE when the task is not running. */
int sluice_engine_ack(sluice_engine *e, uint64_t id, int64_t cost, int64_t now_ns);

/* What a worker asks of sluice_engine_fail(). */
typedef enum sluice_fail_mode {
    SLUICE_FAIL_MODE_RETRY = 0, /* retry with backoff, until the type's max_attempts */
    SLUICE_FAIL_MODE_DEAD,      /* no retry: FAILED at once, reason SLUICE_FAIL_DEAD */
} sluice_fail_mode;

/* Fails a running task as `mode` says. message may be NULL. Returns 0, SLUICE_EINVAL (mode is
 * neither), SLUICE_ENOTFOUND or SLUICE_ESTATE. */
int sluice_engine_fail(sluice_engine *e, uint64_t id, sluice_fail_mode mode, const char *message,
                       int64_t now_ns);

/* Fails a running task because the service it called refused it for now (an HTTP 429 with
 * Retry-After): the task is retried no earlier than retry_after_ns from now_ns, or after the
 * type's backoff when that is later. Such a failure never ends the task for want of attempts
 * (the task did not fail; the upstream asked for time), though its delivery still counts in
 * `attempt`; the retry pays its limits again as any retry does under throttle_retries.
 * The upstream refuses more than this task: the key of each of the task's rate links is held
 * back as long too (sluice_limit_backoff), for every task and every direct caller of that key.
 * retry_after_ns must be >= 0. message may be NULL. Returns 0, SLUICE_EINVAL, SLUICE_ENOTFOUND,
 * SLUICE_ESTATE or SLUICE_ENOMEM (nothing failed; the call may be repeated). */
int sluice_engine_fail_retry_after(sluice_engine *e, uint64_t id, int64_t retry_after_ns,
                                   const char *message, int64_t now_ns);

/* Cancels a queued or parked task. Returns 0, SLUICE_ENOTFOUND, or SLUICE_ESTATE (running or
 * finished). */
int sluice_engine_cancel(sluice_engine *e, uint64_t id, int64_t now_ns);

/* Extends a running task's lease by its type's lease time from now. *until (may be NULL) gets
 * the new expiry. Returns 0, SLUICE_ENOTFOUND or SLUICE_ESTATE. */
int sluice_engine_touch(sluice_engine *e, uint64_t id, int64_t now_ns, int64_t *until);

/* Does the work that is due at now_ns: wakes parked keys whose slot came, releases delayed and
 * retried tasks, redelivers tasks whose lease expired, creates recurring occurrences, flushes
 * event summaries. Returns 0 or SLUICE_ENOMEM (the work left is retried by the next tick). */
int sluice_engine_tick(sluice_engine *e, int64_t now_ns);

/* The earliest time at which tick has work, or SLUICE_NEVER. */
int64_t sluice_engine_next_wake(const sluice_engine *e);

/* Tells the engine that units of its limit `name` were freed outside it (a lease taken with
 * sluice_lease_acquire on the engine's live limit was released): every task parked on that
 * limit is looked at again on the next tick or poll instead of at the released lease's
 * original expiry. Returns 0, or SLUICE_ENOTFOUND when no limit has that name. */
int sluice_engine_limit_released(sluice_engine *e, const char *name, int64_t now_ns);

/* Fills *out for a task. Returns 0 or SLUICE_ENOTFOUND (never existed, or finished long ago). */
int sluice_engine_task_info(const sluice_engine *e, uint64_t id, sluice_task_info *out);

/* Explains why a task waits, its position and its estimated start, as seen at now_ns. A read: it
 * changes nothing (see Time). */
int sluice_engine_explain(const sluice_engine *e, uint64_t id, int64_t now_ns,
                          sluice_explanation *out);

/* One limit of a task's chain: the key, tier and units the engine resolved at submit, and what
 * the task's grant holds on it. This is the engine's own account of a charge, for anything that
 * shows or mirrors one (the simulator's series, the admin API, a shared store): callers never
 * resolve keys, tiers or units themselves.
 * Borrowed pointers, valid until the next call that changes the engine (one that finishes a
 * task may forget another). */
typedef struct sluice_charge {
    const char *limit;      /* the limit's name */
    const char *tier;       /* the tier chosen for this task, or NULL when the limit has none */
    const char *key;        /* the key, keylen bytes, NUL-terminated; "" is the limit's global
                             * key (no key, or a missing one under missing_key: global) */
    size_t keylen;          /* bytes of key */
    sluice_limit_kind kind; /* of the tier's definition (the limit's when untiered) */
    int64_t units;          /* units asked of this limit: fixed by it, read from the input, or
                             * the task's own */
    int charged;            /* 1: the task's grant (its last one, once finished) charged these
                             * units to a rate, window, sliding or quota key. Kept across a lost
                             * lease (the redelivery redeems the grant; under charge_redelivery
                             * cleared, as the redelivery pays again); cleared by a fail, since
                             * a retry pays again (or not, under throttle_retries 0) */
    int settles;            /* 1: charged, and an ack's cost replaces these units with the cost
                             * (units from the task or its input, or a quota) */
    int held;               /* 1: a concurrency lease holds these units now (RUNNING only); an
                             * ack, a fail or the lease's expiry gives them back */
    int shadow_denied;      /* 1: the limit, in shadow mode (or with limits off), would have
                             * denied the task's last grant; it ran without this charge */
    const sluice_limit_def *def; /* the definition that holds key: the tier's, the key's
                                  * override's, or the limit's */
} sluice_charge;

/* Fills out[0..max) with the links of task id's chain, in its type's order (a limit removed
 * since is still listed: its name stays readable while the task is kept). Returns the number of
 * links the chain has (which may exceed max: call again with room for all), or SLUICE_ENOTFOUND
 * (never existed, or forgotten). Reads only: changes nothing. */
int sluice_engine_task_charges(const sluice_engine *e, uint64_t id, sluice_charge *out, size_t max);

/* What a submit would decide of a task without creating it, for a store that keeps the task
 * elsewhere (a shared Redis: server/rtasks.c): the type's settings that travel with the task.
 * The task's chain comes in sluice_charge entries (charged, held and shadow_denied 0; settles
 * 1 when an ack's cost would replace the units). */
typedef struct sluice_task_plan {
    int priority;              /* the spec's, else the type's default */
    int64_t units;             /* the task's units (spec.units, 1 by default) */
    int64_t lease_ns;          /* the type's lease (visibility timeout) */
    sluice_retry_policy retry; /* the type's retries: max_attempts, backoff */
    int charge_redelivery;     /* the type's (sluice_type_policy) */
    int fair;                  /* 1: the type shares its workers between keys (fairness: keys) */
    int fair_link;             /* under fair: the link (index into the chain) whose key is the
                                * task's tenant and whose units its turn costs; -1: none (the
                                * tenant "", the task's own units) */
} sluice_task_plan;

/* Resolves spec exactly as sluice_engine_submit would (type, strict_types, payload, keys and
 * key templates, tiers, units, per-key overrides) without creating anything: no task, no cap,
 * no task key. Fills *plan and out[0..min(n, max)) with the chain, in its type's order, without
 * the links a missing_key: skip drops. A group slot (lease_limit) is refused with
 * SLUICE_EINVAL. Returns the number of links n (which may exceed max: call again with room for
 * all), or the error sluice_engine_submit would return, *err (may be NULL) explaining.
 * Borrowed pointers (names, keys, definitions), valid until the next call on the engine. */
int sluice_engine_resolve_task(sluice_engine *e, const sluice_task_spec *spec, int64_t now_ns,
                               sluice_task_plan *plan, sluice_charge *out, size_t max,
                               sluice_submit_error *err);

/* ---- Recurring tasks ----------------------------------------------------------------------- */

typedef struct sluice_recurring_spec {
    const char *name; /* identity of the series; re-adding a name replaces it */
    const char *type;
    const char *payload;
    size_t payload_len;
    const char *key; /* explicit rate-limit key, as for a task */
    size_t key_len;
    int64_t interval_ns; /* every interval from start... */
    const char *cron;    /* ...or a 5-field cron expression (UTC); exactly one of the two */
    int64_t start_ns;    /* first occurrence at or after this (0 = now) */
    int64_t end_ns;      /* no occurrence runs after this (0 = never) */
    int64_t max_runs;    /* real executions before the series ends (0 = unlimited) */
} sluice_recurring_spec;

/* Adds a series. Returns 0, SLUICE_EINVAL (msg: a bad cron, both or neither schedules...),
 * SLUICE_ENOMEM. */
int sluice_engine_add_recurring(sluice_engine *e, const sluice_recurring_spec *spec, int64_t now_ns,
                                char *msg, size_t msglen);

/* Removes a series (its queued occurrences are cancelled at now_ns). Returns 0 or
 * SLUICE_ENOTFOUND. */
int sluice_engine_del_recurring(sluice_engine *e, const char *name, int64_t now_ns);

/* Counters of a series. */
typedef struct sluice_recurring_info {
    int64_t runs;    /* occurrences that started (count toward max_runs) */
    int64_t skipped; /* occurrences skipped because they could not run before the end */
    int64_t next_ns; /* the next occurrence, SLUICE_NEVER when the series is over */
} sluice_recurring_info;

int sluice_engine_recurring_info(const sluice_engine *e, const char *name,
                                 sluice_recurring_info *out);

/* The pace check sluice_engine_add_recurring makes on a new series, for a series kept elsewhere
 * (the shared store's nodes): emits one SLUICE_EVENT_RECURRING_TOO_FAST, stamped now_ns, when
 * spec's shortest gap is under the emission interval of a limit of its type. Adds nothing. */
void sluice_engine_check_recurring_pace(sluice_engine *e, const sluice_recurring_spec *spec,
                                        int64_t now_ns);

/* ---- Schedules without an engine (the shared store's nodes, src/server/rrecur.c) ---------- */

/* Checks spec as sluice_engine_add_recurring does before it looks at the engine (a name and a
 * type, exactly one of an interval and a cron expression that parses, nothing negative, an end
 * not before a given start), with the same messages. Returns 0 or SLUICE_EINVAL with msg. */
int sluice_recurring_check(const sluice_recurring_spec *spec, char *msg, size_t msglen);

/* The first schedule point of spec at or after from_ns (spec->start_ns is the effective start:
 * the interval grid starts there), or SLUICE_NEVER: none left before spec->end_ns, or a cron
 * expression that does not parse. The engine's own arithmetic (recurring.c). */
int64_t sluice_recurring_first(const sluice_recurring_spec *spec, int64_t from_ns);

/* Catching up from due point due_ns at now_ns >= due_ns, as the engine's tick does: due_ns is
 * the occurrence that runs, the points after it and at or before now_ns are skipped (*missed,
 * a lower bound after a very long pause), and the result is the first point after now_ns (or
 * SLUICE_NEVER). */
int64_t sluice_recurring_catch_up(const sluice_recurring_spec *spec, int64_t due_ns, int64_t now_ns,
                                  int64_t *missed);

/* ---- Persistence ------------------------------------------------------------------------- */

/* Everything a store needs to bring a task back after a restart. Borrowed pointers (from the
 * engine when exported, from the caller when restored), valid until the engine next changes. */
typedef struct sluice_task_record {
    uint64_t id;
    sluice_task_state state;
    const char *type;
    const char *payload;
    size_t payload_len;
    const char *key; /* explicit rate-limit key, NULL when none */
    size_t key_len;
    const char *task_key; /* NULL when none */
    size_t task_key_len;
    int64_t units;
    int priority;
    int attempt;
    int64_t submitted_ns;
    int64_t not_before_ns;          /* QUEUED: not delivered before this (delay, backoff) */
    int64_t lease_until_ns;         /* RUNNING: redelivered after this */
    int granted;                    /* holds a grant it will redeem on (re)delivery */
    const char *series;             /* the recurring series it is an occurrence of, or NULL */
    sluice_fail_reason fail_reason; /* FAILED */
    const char *fail_limit;         /* FAILED by a limit: its name, or NULL */
    const char *fail_message;       /* FAILED: the worker's or the engine's reason, or NULL */
    /* The group slot it runs under (sluice_task_spec.lease_*): the limit's name (NULL: none),
     * the lease id and its tag. Restored only while that lease lives (restore the limits' key
     * state, which holds kept leases, before the tasks); else the task takes its own unit. */
    const char *lease_limit;
    uint64_t lease_id;
    uint64_t lease_tag;
} sluice_task_record;

/* Fills *out with a task's durable record. Returns 0 or SLUICE_ENOTFOUND. Exported as: payload,
 * key and task_key NULL when none; not_before_ns as sluice_task_info's (its delay, or a retry's
 * backoff end); lease_until_ns for RUNNING only; granted 1 for RUNNING and for a task that
 * will not be charged again (it lost its lease, unless its type has charge_redelivery, or it
 * retries under throttle_retries 0); series,
 * fail_reason and fail_limit as their comments say; fail_message whenever a worker gave one. */
int sluice_engine_export_task(const sluice_engine *e, uint64_t id, sluice_task_record *out);

/* Brings a task back after a restart, with its id. Its limits' keys and tiers are resolved again
 * from its payload under the current policies. QUEUED and PARKED come back QUEUED (the gate
 * re-paces them against the restored limiter state: nothing is released at once); RUNNING
 * stays RUNNING until lease_until_ns (re-taking its concurrency leases), or comes back QUEUED
 * holding its grant when the lease has passed (paying again at its next delivery when its type
 * has charge_redelivery); finished states are kept for TASK.INFO. Ids
 * issued later are above every restored id. Returns 0, SLUICE_EEXIST (id taken), or a submit
 * error (EINVAL, ENOTFOUND: its type or limits are gone; the caller decides what to do).
 * Details: not_before_ns in the future delays a QUEUED task; granted (or RUNNING) makes the
 * next delivery redeem the grant without charging its rate limits (such a grant is not settled
 * by an ack's cost); a RUNNING task whose concurrency limit is full now still runs (it was
 * granted) without a lease on that limit, over-subscribing it until it ends; an occurrence is
 * linked to its series when a series of that name exists (restore the series first), else it
 * stands alone; an unfinished task with a group slot (lease_limit) rejoins its group when a
 * lease of that id and tag (lease_tag != 0: a kept lease) lives on its key at now_ns (restore the
 * limits' key state first): not started, it runs under the slot, RUNNING, it takes no lease of
 * that limit; else it takes its own unit like any task; the caps max_tasks and max_parked are
 * not applied; a restored unfinished task counts as submitted in the stats. Nothing is recorded in
 * the change feed for the task restored (finished tasks trimmed past max_finished are recorded as
 * forgotten). All or nothing: on an error the engine is unchanged. */
int sluice_engine_restore_task(sluice_engine *e, const sluice_task_record *r, int64_t now_ns,
                               sluice_submit_error *err);

/* Fills *spec_out with a series' definition and *runs, *skipped (each may be NULL) with its
 * counters, for a store. Strings are borrowed, valid until the series is replaced or removed;
 * start_ns is the start as resolved when the series was added (never 0), so that a restore keeps
 * an interval series' phase. Returns 0 or SLUICE_ENOTFOUND (everything zeroed). */
int sluice_engine_recurring_state(const sluice_engine *e, const char *name,
                                  sluice_recurring_spec *spec_out, int64_t *runs, int64_t *skipped);

/* Brings a series back after a restart with its counters (as read by
 * sluice_engine_recurring_state). Checked as sluice_engine_add_recurring (a template whose type
 * or limits are gone fails with that error and msg). The series resumes at its first schedule
 * point at or after now_ns (points that passed while the process was down are neither run nor
 * counted), or never when its runs reached max_runs; restore it before its occurrences, which
 * then re-link to it (and move its next point past theirs, so no point runs twice). Records
 * nothing in the change feed. Returns 0, SLUICE_EEXIST (a series of that name exists),
 * SLUICE_EINVAL (also for negative counters), SLUICE_ENOTFOUND, SLUICE_ENOMEM. */
int sluice_engine_restore_recurring(sluice_engine *e, const sluice_recurring_spec *spec,
                                    int64_t runs, int64_t skipped, int64_t now_ns, char *msg,
                                    size_t msglen);

/* Calls fn for every core limit (the object whose key state sluice_limit_track_changes,
 * sluice_limit_drain and sluice_limit_import work on) of every named limit, in name order, with
 * a stable id: the limit's name when it has no tiers, "name/tier" for each tier of a tiered
 * limit (names hold no '/'). The id is borrowed for the call. fn may turn change tracking on and
 * drain or import keys; it must not add, replace or remove limits. A non-zero return of fn stops
 * the walk and is returned; else returns 0. */
int sluice_engine_visit_limits(sluice_engine *e,
                               int (*fn)(const char *id, sluice_limit *lim, void *arg), void *arg);

/* The core limit of an id as sluice_engine_visit_limits gives it, or NULL when no limit (or tier)
 * of that id exists now. Valid until the limit is replaced or removed. */
sluice_limit *sluice_engine_limit_by_id(const sluice_engine *e, const char *id);

/* Core limits that live outside the engine (a server's CL.THROTTLE parameter sets) but whose key
 * state should travel through the change feed like the engine's own. Their ids must begin with
 * '!', which no limit or tier name holds, so they never collide with a named limit's id.
 * visit calls fn for each such limit as sluice_engine_visit_limits does (and stops on its
 * non-zero return, returning it); find returns the limit of an id, creating it when the id names
 * one that can exist (so a restore can import into it), or NULL. */
typedef struct sluice_foreign_limits {
    int (*visit)(void *arg, int (*fn)(const char *id, sluice_limit *lim, void *fnarg), void *fnarg);
    sluice_limit *(*find)(void *arg, const char *id);
    void *arg;
} sluice_foreign_limits;

/* Registers the foreign limits (NULL: none). sluice_engine_visit_limits visits them after the
 * engine's own and sluice_engine_limit_by_id resolves their '!' ids; the feed tracks and drains
 * their keys. A foreign limit created while the feed runs must turn on its own change tracking
 * (sluice_limit_track_changes) when created, or its first changes go unrecorded. */
void sluice_engine_set_foreign_limits(sluice_engine *e, const sluice_foreign_limits *fl);

/* Whether the change feed runs (sluice_engine_changes_start was called). */
int sluice_engine_changes_running(const sluice_engine *e);

/* The largest task id issued or restored so far (0 before any). */
uint64_t sluice_engine_last_id(const sluice_engine *e);

/* Makes every task id issued from now on larger than `id`, so ids a store still holds (tasks it
 * could not restore, or finished ones it forgot) are never issued again. Never lowers the
 * counter. */
void sluice_engine_reserve_ids(sluice_engine *e, uint64_t id);

/* ---- The change feed --------------------------------------------------------------------- */

/*
 * What changed since the consumer last wrote it, for a store that keeps the engine across
 * restarts: the server's own (durable.c, one SQLite transaction per loop turn) or a shared one.
 * The engine records; the consumer pulls a batch, writes it, and confirms. Off until
 * sluice_engine_changes_start (then the engine pays a set insert per change).
 *
 * A batch holds, each once, with the latest value:
 * - task ids whose durable record was created, changed or forgotten: export each with
 *   sluice_engine_export_task (SLUICE_ENOTFOUND: delete it). Recorded: a submit or a recurring
 *   occurrence, a payload replaced by task key, a delivery (RUNNING, attempt, lease, grant), a
 *   touch, a lost lease, a fail (retry or FAILED), an ack, a cancel, a failure by a limit or a
 *   skip, an occurrence detached from its removed series, a finished task forgotten by the
 *   finished FIFO. Not recorded: moves between QUEUED and PARKED (both come back QUEUED) and a
 *   delayed task coming due (its record is unchanged);
 * - recurring series added, replaced, removed or recounted: read each with
 *   sluice_engine_recurring_state (SLUICE_ENOTFOUND: delete it);
 * - runtime limit definitions (SLUICE_LIMIT_DEF_*): a limit replaced or removed records DROP
 *   itself; the caller that knows the definition's text records SET or GONE over it with
 *   sluice_engine_changes_limit_def;
 * - purges: limit ids ("name", "name/tier") whose stored key states are to be deleted, because
 *   the limit was replaced or removed; expanded to every id of the limit the feed has yielded;
 * - limiter key states charged, settled, reset or forgotten (by the sweep, a reset or a
 *   replacement) since the last pull, as blobs for sluice_limit_import (NULL: delete the key).
 *
 * Ensures:
 * - a change made at any time is in the next batch pulled after it (a change made while a batch
 *   is out is not in that batch, and sluice_engine_changes_done does not forget it);
 * - a batch not confirmed is yielded again, merged with what changed since (the union, latest
 *   value winning): a failed write loses nothing;
 * - within a batch, writing the limit definitions, then the purges, then the key states, then
 *   series and tasks reproduces the engine's order: a purge never deletes a key state recorded
 *   after it, and no key state of a replaced limit is yielded after its purge;
 * - running out of memory while recording loses that one change (counted in
 *   sluice_changes_counts.lost); while pulling, returns SLUICE_ENOMEM with nothing lost.
 *
 * One batch is out at a time. An asynchronous consumer (the server's commit thread) copies the
 * batch at the pull, writes the copy while the engine goes on, and pulls again only after
 * confirming (or giving up on) that write: then sluice_engine_changes_done forgets exactly the
 * batch written, and everything recorded meanwhile (a task or key changed again included) is in
 * the next pull. A second pull while a batch is out merges the two (the union above), and a
 * confirmation then covers the union: a consumer with a write in flight must not pull.
 */

/* What a store does with a runtime limit definition. */
typedef enum sluice_limit_def_op {
    SLUICE_LIMIT_DEF_SET = 1, /* store the spec text: re-applied at start over the file's version */
    SLUICE_LIMIT_DEF_GONE,    /* store a tombstone: the limit is removed again at start */
    SLUICE_LIMIT_DEF_DROP,    /* delete the stored row: the configuration file's version applies */
} sluice_limit_def_op;

/* A batch of changes, borrowed from the engine (see sluice_engine_changes). */
typedef struct sluice_changes sluice_changes;

/* Sizes of a batch's parts, and the changes lost to out-of-memory since the feed started. */
typedef struct sluice_changes_counts {
    size_t tasks, series, limits, purges, keys;
    uint64_t lost;
} sluice_changes_counts;

/* Starts recording changes (idempotent): from now on every change above is recorded, and every
 * limit's key changes are tracked, including limits added or replaced later. Returns 0 or
 * SLUICE_ENOMEM (nothing started). */
int sluice_engine_changes_start(sluice_engine *e);

/* Hands out the batch of every change recorded since the last confirmed pull (with the keys
 * drained from every limit now), in *out, borrowed: valid until the next call into the engine
 * (a consumer that writes asynchronously copies it first). Returns 0, SLUICE_ENOMEM (*out NULL;
 * nothing lost: call again later), or SLUICE_ESTATE when the feed is not started. A limit whose
 * keys cannot be drained for lack of memory keeps them recorded for the next pull. */
int sluice_engine_changes(sluice_engine *e, const sluice_changes **out);

/* The consumer wrote the batch of the last sluice_engine_changes durably: forget it. Changes
 * recorded since that pull stay for the next one. Without a pull out, does nothing. */
void sluice_engine_changes_done(sluice_engine *e);

/* Records a runtime definition of limit `name` for the store: its spec text (SET), or spec NULL
 * for a tombstone (GONE: a limit the configuration file declares was removed at runtime). Call
 * after the engine call that installed or removed it. Returns 0, SLUICE_ENOMEM (counted as lost)
 * or SLUICE_ESTATE when the feed is not started. */
int sluice_engine_changes_limit_def(sluice_engine *e, const char *name, const char *spec);

/* For recovery: key `key` of limit id `id` is in the store and is to be deleted unless its limit
 * tracks it again before the next pull (sluice_limit_import of a state still worth keeping
 * records it as changed, and its state then replaces the deletion). forget_keys: every stored
 * key state of limit id `id` is to be deleted (its limit or tier is gone). Returns 0,
 * SLUICE_ENOMEM or SLUICE_ESTATE (feed not started). */
int sluice_engine_changes_forget_key(sluice_engine *e, const char *id, const char *key,
                                     size_t keylen);
int sluice_engine_changes_forget_keys(sluice_engine *e, const char *id);

/* How many changes a client could be waiting for (tasks, series, limit definitions, purges;
 * not key states) were recorded since the feed started: a command that moved it changed
 * something durable. */
uint64_t sluice_engine_changes_seq(const sluice_engine *e);

/* Sizes of what the next pull would yield, key states not yet drained aside, plus the batch out
 * (NULL e or a feed not started: zeros). */
void sluice_engine_changes_count(const sluice_engine *e, sluice_changes_counts *out);

/* Walks one part of a batch; *pos starts at 0. Each returns 1 and fills the out-parameters
 * (borrowed like the batch) with the next entry, or 0 at the end. A key's state is NULL (len 0)
 * for a deletion; a limit's spec is NULL unless op is SET. */
int sluice_changes_next_task(const sluice_changes *c, size_t *pos, uint64_t *id);
int sluice_changes_next_series(const sluice_changes *c, size_t *pos, const char **name);
int sluice_changes_next_limit(const sluice_changes *c, size_t *pos, const char **name,
                              sluice_limit_def_op *op, const char **spec);
int sluice_changes_next_purge(const sluice_changes *c, size_t *pos, const char **id);
int sluice_changes_next_key(const sluice_changes *c, size_t *pos, const char **id, const char **key,
                            size_t *keylen, const void **state, size_t *len);

/* Returns 1 when the batch holds a change a client may wait for (anything but key states). */
int sluice_changes_has_changes(const sluice_changes *c);

/* ---- Figures ------------------------------------------------------------------------------- */

typedef struct sluice_engine_stats {
    size_t queued, parked, running, delayed; /* tasks by state now */
    uint64_t submitted, delivered, done, failed, cancelled, retried, redelivered;
    uint64_t rejected;  /* failed by a limit */
    size_t parked_peak; /* most tasks parked at once */
    size_t tasks_bytes; /* memory held by unfinished tasks and their payloads */
} sluice_engine_stats;

void sluice_engine_get_stats(const sluice_engine *e, sluice_engine_stats *out);

/* Returns "queued", "parked", "running", "done", "failed", "cancelled". */
const char *sluice_task_state_name(sluice_task_state s);

/* Returns "ratelimited", "horizon", "never", "attempts", "dead", "skipped" or "none". */
const char *sluice_fail_reason_name(sluice_fail_reason r);

/* ---- Introspection (monitoring) ------------------------------------------------------------ */

/* The wait-time histogram of a task type: a first delivery's wait (from when the task became
 * due: its submission, or the end of its DELAY) falls in the first bucket whose upper bound (ns)
 * it does not pass, or past the last one. The bounds increase, from 1 ms to 1 hour. */
#define SLUICE_WAIT_BUCKETS 16
extern const int64_t sluice_wait_bounds_ns[SLUICE_WAIT_BUCKETS];

/* One task type's figures. Counters count since the type was created (an undeclared type is
 * created by its first submit and forgotten with its last task). */
typedef struct sluice_type_stats {
    const char *name; /* borrowed, valid until the engine next changes */
    int declared;     /* 0: created by a submit of a type the policy does not declare */
    size_t queued;    /* QUEUED and due: waiting for a worker */
    size_t delayed;   /* QUEUED until a DELAY or a retry backoff ends */
    size_t parked;    /* PARKED: waiting for budget */
    size_t running;   /* RUNNING */
    uint64_t submitted, delivered, done, failed, cancelled;
    uint64_t retried;                       /* failures that were retried */
    uint64_t wait[SLUICE_WAIT_BUCKETS + 1]; /* first deliveries per wait bucket (not cumulative);
                                             * the last counts waits past every bound */
    uint64_t wait_count;                    /* first deliveries */
    uint64_t wait_sum_ns;                   /* their waits added up (saturating) */
} sluice_type_stats;

/* Calls fn (may be NULL) for every task type, in name order. Counting tasks by state walks every
 * task kept: O(tasks), for a monitoring scrape. Returns the number of types, or SLUICE_ENOMEM. */
int sluice_engine_type_stats(const sluice_engine *e,
                             void (*fn)(const sluice_type_stats *st, void *arg), void *arg);

/* Flags of sluice_engine_limit_figures(). */
#define SLUICE_FIGURES_QUOTA 1u /* also sum a quota's spending over its keys (O(keys)) */

/* One named limit's figures. */
typedef struct sluice_limit_figures {
    sluice_limit_stats core; /* its core limits' stats, summed over its tiers (shadow_denied:
                              * the would-be denials of a shadow limit) */
    int shadow;              /* 1: it lets everything through now (its mode is shadow, or
                              * limits are off engine-wide) */
    size_t parked;           /* tasks parked on it */
    size_t parked_keys;      /* keys (per tier) with tasks parked on them */
    int64_t next_wake_ns;    /* the earliest of those keys' next slots, or SLUICE_NEVER */
    uint64_t rejected[SLUICE_FAIL_SKIPPED + 1]; /* tasks it failed, by sluice_fail_reason
                                                 * (ratelimited, horizon, never, skipped) */
    int64_t quota_spent; /* SLUICE_FIGURES_QUOTA, quota tiers: units spent in their current
                          * period over every key; else 0 */
} sluice_limit_figures;

/* Fills *out for the limit `name` (walks its wait queues: O(parked keys)). Returns 0 or
 * SLUICE_ENOTFOUND (out zeroed). */
int sluice_engine_limit_figures(const sluice_engine *e, const char *name, int64_t now_ns,
                                unsigned flags, sluice_limit_figures *out);

/* A quota key's spending (seed 004's "a user's daily spend"): fills *out for `key` of the quota
 * limit `name` (of its tier `tier` when it is tiered, else tier NULL), from the key's own
 * definition when it has an override. A read: changes nothing, not even the limit's clock
 * (limit.h, Time). Returns 0; SLUICE_ENOTFOUND for no such limit or tier; SLUICE_EINVAL for a
 * limit that is not a quota, or a tiered one asked without a tier; out zeroed on failure. */
int sluice_engine_quota_usage(const sluice_engine *e, const char *name, const char *tier,
                              const char *key, size_t keylen, int64_t now_ns,
                              sluice_quota_usage *out);

/* One key of a limit with parked tasks. */
typedef struct sluice_parked_key {
    const char *key; /* borrowed, valid until the engine next changes; keylen bytes */
    size_t keylen;
    const char *tier; /* the tier of a tiered limit, else NULL */
    size_t parked;    /* tasks parked on it */
    int64_t wake_ns;  /* its next slot: when the parking lot looks at it again (or NEVER) */
} sluice_parked_key;

/* Fills out[0..max) with the keys of limit `name` that have the most tasks parked (ties: the
 * earlier next slot first), most first: a bounded top-k over its wait queues. Returns how many
 * were filled, or SLUICE_ENOTFOUND. */
int sluice_engine_top_parked(const sluice_engine *e, const char *name, sluice_parked_key *out,
                             size_t max);

SLUICE_API_END

#ifdef __cplusplus
}
#endif
#endif
