/* SPDX-License-Identifier: MIT */
/*
 * The gate: deciding, when a task leaves its ready queue, whether every limit of its chain has
 * budget now, and what to do when one has not.
 *
 * The chain is evaluated atomically by the core (sluice_chain_decide): granted means every link
 * was charged (concurrency links took a lease); denied means nothing was charged, and the
 * verdict is, in this order of precedence:
 *   a denying link has overflow reject        -> FAIL, reason RATELIMITED;
 *   a denying link can never grant (NEVER)    -> FAIL, reason NEVER;
 *   a denying rate/window/quota link's slot
 *   lies beyond that limit's horizon          -> FAIL, reason HORIZON;
 *   otherwise                                 -> PARK on the link whose slot is latest.
 * Concurrency links are exempt from the horizon: their wait ends with a release, not a slot.
 * A key table at its cap (the core's SLUICE_EBUSY) parks the task for a second on the full
 * limit and emits KEY_CAP: backpressure, never a drop.
 *
 * Exactly-once grant: a task holding a grant (its lease was lost) or retrying under
 * throttle_retries 0 asks its concurrency links only; everything else is charged once per
 * grant. A type with charge_redelivery never holds a grant across a lost lease (dispatch.c's
 * tick), so each execution is charged (seed 001). The gate also keeps a poll's THROTTLED accounting
 * (per limit and key: tasks wanted, tasks granted), releases and renews leases, and settles charges
 * with an ack's actual cost.
 *
 * Group slots: a task submitted with its producer's lease (sluice_task_spec.lease_limit/lease_id)
 * does not ask that link while the lease lives; the group holds the one slot. Once the lease has
 * ended the task asks its own unit like any other (never both, never neither).
 */
#ifndef SLUICE_ENGINE_GATE_H
#define SLUICE_ENGINE_GATE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine_impl.h"
#include "engine/task.h"

/* How long a task denied by a full key table waits before it is gated again. */
#define GATE_KEY_CAP_WAIT_NS SLUICE_NS_PER_SEC

typedef enum gate_verdict {
    GATE_GRANTED = 1,
    GATE_PARK,
    GATE_FAIL,
} gate_verdict;

typedef struct gate_result {
    gate_verdict verdict;
    uint16_t link;             /* PARK: the link to wait on; FAIL: the link that said no */
    sluice_fail_reason reason; /* FAIL */
    int64_t retry_after_ns;    /* PARK, FAIL: the wait the limit named */
    int key_cap;               /* PARK: because a key table was full */
} gate_result;

/* Makes the gate's scratch big enough for chains of nlinks links. 0 or SLUICE_ENOMEM. */
int gate_reserve(sluice_engine *e, size_t nlinks);

/* Returns 1 when link i of t is asked by the next gate (the limit is alive, it is not the link
 * t's group lease stands in for, and either the task pays in full or the link is a concurrency
 * limit). */
int gate_link_active(const task *t, uint16_t i);

/* Group slots: finds the link of limit `limit` (NULL: none asked, *link LINK_NONE) among the n
 * resolved links a task is about to get, and checks that lease_id, with tag `tag`
 * (sluice_lease_tag), is live at now on that link's key, so that the task runs under that lease
 * instead of taking its own unit. Returns 0 with *link; SLUICE_EINVAL (no such concurrency link,
 * or the lease is of another key) or SLUICE_ESTALE (the lease is gone, or that id is another
 * holder's: another tag), msg saying which. */
int gate_group_resolve(sluice_engine *e, const link_spec *links, size_t n, const char *limit,
                       uint64_t lease_id, uint64_t tag, int64_t now, uint16_t *link, char *msg,
                       size_t msglen);

/* Before t is gated at now: when the lease of its group ended, t leaves the group for good and
 * asks its own unit of that limit from then on. */
void gate_group_check(sluice_engine *e, task *t, int64_t now);

/* Strict priority: returns the wait queue of one of t's active links whose most urgent task is
 * more urgent than t (t must not overtake it), with *link that link; NULL when none. */
waitq *gate_blocked(const sluice_engine *e, const task *t, uint16_t *link);

/* Gates t at now (t is in no heap). On a grant, leases and charges are recorded in t's links
 * (the caller renews leases to the delivery's lease time with gate_renew). Returns 0 with *r
 * filled; SLUICE_ENOMEM (nothing charged); or another core error for a chain that cannot be
 * evaluated (nothing charged). */
int gate_eval(sluice_engine *e, task *t, int64_t now, gate_result *r);

/* Releases t's concurrency leases and wakes the wait queues of their keys. */
void gate_release(sluice_engine *e, task *t, int64_t now);

/* Renews t's concurrency leases to expire ttl_ns after now. */
void gate_renew(sluice_engine *e, task *t, int64_t ttl_ns, int64_t now);

/* Settles the links t's grant charged (task-unit links and quotas) with the actual cost, and
 * emits BUDGET events for quotas that crossed 80% or 100%. */
void gate_settle(sluice_engine *e, task *t, int64_t cost, int64_t now);

/* Forgets the charges of t's current grant (a retry pays again, or not at all). */
void gate_clear_charges(task *t);

/* Counts, for the poll in progress, that t asked link `link` and was granted or not. */
void gate_acct_add(sluice_engine *e, const task *t, uint16_t link, int granted);

/* Emits a THROTTLED event for every limit and key of the poll that granted fewer tasks than
 * were asked of it, and clears the accounting. */
void gate_acct_flush(sluice_engine *e, int64_t now);

/* Fills *out for a task failed by a limit (or with only the reason when fail_link is none).
 * Borrowed pointers, valid while t is. */
void gate_denial(const task *t, sluice_denial *out);

/* Frees the gate's scratch. */
void gate_free(sluice_engine *e);

#endif
