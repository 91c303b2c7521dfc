/* SPDX-License-Identifier: MIT */
/*
 * Policy checks that also say where the fault is.
 *
 * sluice_limit_policy_validate() and sluice_type_policy_validate() answer with one line for a
 * whole policy. The configuration loader wants more: it must point at the line and column of the
 * field at fault. The checks below are the same checks (the public functions are built on them),
 * and they also report which field failed, so the loader can map the fault back to the YAML node
 * that set that field. The message then holds the reason alone, without the policy's name.
 * With dotpath.h, this is what the policy layer publishes to the layers above it (the engine
 * and the config loader); the rest of src/policy is its own.
 *
 * Everything here is pure and allocates nothing.
 */
#ifndef SLUICE_POLICY_POLICY_CHECK_H
#define SLUICE_POLICY_POLICY_CHECK_H

#include <stddef.h>

#include "sluice/policy.h"

/* Longest name of a limit, a tier or a task type, in bytes. */
#define POLICY_NAME_MAX 128

/* The field of a policy that a check found at fault. */
typedef enum policy_field {
    POLICY_FIELD_NONE = 0,
    /* limits */
    POLICY_FIELD_NAME,        /* the limit's or type's name */
    POLICY_FIELD_DEF,         /* the limit definition (kind, value and options) */
    POLICY_FIELD_KEY,         /* key_source / key_path */
    POLICY_FIELD_MISSING_KEY, /* missing_key_global */
    POLICY_FIELD_OVERFLOW,    /* overflow */
    POLICY_FIELD_MODE,        /* mode */
    POLICY_FIELD_UNITS,       /* units_source / units_fixed / units_path */
    POLICY_FIELD_TIER_FIELD,  /* tier_path */
    POLICY_FIELD_TIERS,       /* the tier list as a whole */
    POLICY_FIELD_TIER_NAME,   /* tiers[index].name */
    POLICY_FIELD_TIER_MATCH,  /* tiers[index].min / max / equals */
    POLICY_FIELD_TIER_DEF,    /* tiers[index].def */
    POLICY_FIELD_OVERRIDE,    /* overrides[index] (its key or its def) */
    /* types */
    POLICY_FIELD_LIMITS, /* limits[index] */
    POLICY_FIELD_RETRY_MAX_ATTEMPTS,
    POLICY_FIELD_RETRY_BACKOFF,
    POLICY_FIELD_RETRY_BASE,
    POLICY_FIELD_RETRY_MAX,
    POLICY_FIELD_RETRY_THROTTLE,
    POLICY_FIELD_LEASE,
    POLICY_FIELD_FAIRNESS,          /* fairness */
    POLICY_FIELD_FAIR_KEY,          /* fair_key */
    POLICY_FIELD_CHARGE_REDELIVERY, /* charge_redelivery */
    /* engine */
    POLICY_FIELD_MAX_TASKS,
    POLICY_FIELD_MAX_PARKED,
    POLICY_FIELD_STRICT_TYPES,
    POLICY_FIELD_EVENT_INTERVAL,
    POLICY_FIELD_DEFAULT_LEASE,
} policy_field;

/* Where a check failed: the field, and for per-tier and per-limit fields the index. */
typedef struct policy_fault {
    policy_field field;
    size_t index;
} policy_fault;

/* Checks a name: 1 to POLICY_NAME_MAX bytes of [A-Za-z0-9_.:-]. Returns 0 or SLUICE_EINVAL with
 * the reason in msg (may be NULL when msglen is 0), e.g.
 * `"a b" has a character outside A-Z a-z 0-9 _ . : - (" " at offset 1)`. */
int policy_check_name(const char *name, char *msg, size_t msglen);

/* The most units one task may ask of def: the burst of a rate limit, the limit of every other
 * kind. A task asking more could never be granted. def must validate. */
int64_t policy_capacity(const sluice_limit_def *def);

/* Checks the key of a per-key override: 1 to SLUICE_MAX_OVERRIDE_KEY_LEN bytes, no control byte,
 * ',', ';' or '=' (a spec could not carry them). Returns 0 or SLUICE_EINVAL with the reason. */
int policy_check_override_key(const char *key, size_t len, char *msg, size_t msglen);

/* Returns the index of key in p's overrides, or -1 when it has none. */
long policy_find_override(const sluice_limit_policy *p, const char *key, size_t len);

/* Check a policy as the public validate functions do. Return 0 (where->field is then NONE) or
 * SLUICE_EINVAL / SLUICE_ERANGE with *where set and the reason alone in msg. where may be NULL. */
int policy_check_limit(const sluice_limit_policy *p, policy_fault *where, char *msg, size_t msglen);
int policy_check_type(const sluice_type_policy *t, policy_fault *where, char *msg, size_t msglen);
int policy_check_engine(const sluice_engine_policy *e, policy_fault *where, char *msg,
                        size_t msglen);

#endif
