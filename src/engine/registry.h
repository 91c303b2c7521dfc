/* SPDX-License-Identifier: MIT */
/*
 * The registry: the engine's named limits and task types.
 *
 * Limits are indexed by name in a hash table (finding, adding, replacing and removing one are
 * O(1), so installing a configuration of n limits is O(n)) and kept in an array that listings
 * visit in name order: adding appends, removing moves the last limit into the hole, and the
 * first listing after either sorts the array (O(n log n), once per burst of changes). Each limit
 * owns a copy of its policy and one core limit per tier, and counts the entries of declared
 * types' chains that name it, so removing one need not look at the types. Types are kept in a
 * hash table by name and own their ready queue. A declared type caches pointers to the limits
 * of its chain; limits are never freed while a type names them (del_limit refuses) or a task's
 * link refers to them.
 *
 * Undeclared types (when strict_types is off) are created on their first submit with the default
 * settings and no limits, and freed again once no task refers to them.
 */
#ifndef SLUICE_ENGINE_REGISTRY_H
#define SLUICE_ENGINE_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include "engine/engine_impl.h"

/* Adds or replaces a limit (validated, copied). Replacing keeps the elimit object (tasks and
 * types point at it), restarts its key state, forgets the concurrency leases and charges running
 * tasks took from the old state, and wakes its wait queues so their tasks are gated again.
 * Returns 0, SLUICE_EINVAL / SLUICE_ERANGE with msg, or SLUICE_ENOMEM (nothing changed). */
int registry_set_limit(sluice_engine *e, const sluice_limit_policy *p, int64_t now_ns, char *msg,
                       size_t msglen);

/* Gives every core limit of l the mode it has now: shadow when its policy's mode is shadow or
 * limits are off engine-wide (e->limits_off), else enforced. Returns 1 when l is shadow. */
int registry_apply_mode(const sluice_engine *e, elimit *l);

/* Removes a limit: SLUICE_ENOTFOUND, SLUICE_ESTATE when a declared type names it, else 0. Tasks
 * that still refer to it keep it alive (dead: the gate skips it). */
int registry_del_limit(sluice_engine *e, const char *name, int64_t now_ns);

/* Finds a registered limit by name; NULL when absent. */
elimit *registry_find_limit(const sluice_engine *e, const char *name);

/* The core limit of one tier of l (the last tier when `tier` is past the end after a
 * replacement shortened the tier list), or for an untiered limit the core of key's override when
 * it has one. A limit without overrides pays one branch for them. */
sluice_limit *registry_core(const elimit *l, uint16_t tier, const char *key, size_t keylen);

/* Gives key `key` of limit `name` its own definition def (copied; the limit's key table settings
 * apply), or removes its override when def is NULL. Only that key's state restarts: the key's
 * running tasks forget what they took from it, and the limit's wait queues are gated again.
 * Returns 0; SLUICE_ENOTFOUND (no such limit, or no override to remove); SLUICE_EINVAL /
 * SLUICE_ERANGE with msg (the key or def is refused, or the limit cannot have overrides);
 * SLUICE_ENOMEM. Nothing changes on failure. */
int registry_set_override(sluice_engine *e, const char *name, const char *key, size_t keylen,
                          const sluice_limit_def *def, int64_t now_ns, char *msg, size_t msglen);

/* Takes / drops a reference on l; the last drop of a removed limit frees it. */
void registry_limit_ref(elimit *l);
void registry_limit_unref(elimit *l);

/* Adds or replaces a type. Every limit it names must exist: SLUICE_ENOTFOUND with msg (and an
 * UNKNOWN_LIMIT event). Also SLUICE_EINVAL (validation), SLUICE_ENOMEM. */
int registry_set_type(sluice_engine *e, const sluice_type_policy *t, int64_t now_ns, char *msg,
                      size_t msglen);

/* Finds a type (declared or not) by name; NULL when absent. */
etype *registry_find_type(const sluice_engine *e, const char *name, size_t len);

/* Finds the type of a submit, creating an undeclared one when allowed. Returns 0 and *out,
 * SLUICE_ENOTFOUND (undeclared under strict_types, msg set), SLUICE_EINVAL (bad name) or
 * SLUICE_ENOMEM. A created type has no task yet: call registry_type_release() if the submit
 * fails. */
int registry_type_for_submit(sluice_engine *e, const char *name, etype **out, char *msg,
                             size_t msglen);

/* Frees an undeclared type that no task refers to (no-op otherwise). */
void registry_type_release(sluice_engine *e, etype *t);

/* Puts the limits array back in name order after adds and removals (nothing to do otherwise).
 * Called by every listing; the set does not change, hence const. */
void registry_order(const sluice_engine *e);

/* Visits the registered limits in name order; returns how many there are. */
size_t registry_list_limits(const sluice_engine *e,
                            void (*fn)(const sluice_limit_policy *p, void *arg), void *arg);

/* Sweeps idle keys (at most `budget` each) of at most max_limits limits, every core of each,
 * continuing round-robin where the previous sweep stopped: the pause is bounded however many
 * limits there are (200,000 limits took 200 ms a tick when every tick swept them all). */
void registry_sweep(sluice_engine *e, int64_t now_ns, size_t budget, size_t max_limits);

/* Writes the id of core t of l (sluice_engine_visit_limits: "name", "name/tier", "name/=key")
 * into id (len bytes, 2 * POLICY_NAME_MAX + 2 hold any). */
void registry_core_id(const elimit *l, size_t t, char *id, size_t len);

/* Frees every limit and type (the tasks must be gone). */
void registry_free(sluice_engine *e);

#endif
