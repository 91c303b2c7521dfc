/* SPDX-License-Identifier: MIT */
/*
 * Policies: the named limits and task types an engine enforces, as the configuration file and
 * the server's LIMIT.SET describe them. Plain data with owned strings; no behaviour beyond
 * validation, so the config loader, the server and tests can build them the same way.
 *
 * Being data, policies are not part of the engine: src/policy implements this header (and
 * policy_spec.h and the dot paths), in the layer between the limiter core and the engine, so
 * that the engine and the config loader above it both build on it.
 */
#ifndef SLUICE_POLICY_H
#define SLUICE_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include "sluice/limit.h"

#include "sluice/export.h"

#ifdef __cplusplus
extern "C" {
#endif
SLUICE_API_BEGIN

/* Where a limit finds the key of a task. */
typedef enum sluice_key_source {
    SLUICE_KEY_NONE = 0, /* one global bucket for every task */
    SLUICE_KEY_EXPLICIT, /* the producer's key (TASK.ADD ... KEY k) */
    SLUICE_KEY_PATH,     /* a dot-path into the task's JSON input, e.g. input.tenant_id, or
                          * a template of several (text holding a brace: {input.u}:{input.w}) */
} sluice_key_source;

/* What happens to a task the limit denies. */
typedef enum sluice_overflow {
    SLUICE_OVERFLOW_WAIT = 0, /* park until the slot (refused past the horizon) */
    SLUICE_OVERFLOW_REJECT,   /* fail at once with the reason (a circuit breaker) */
} sluice_overflow;

/* Whether a limit's denials deny. */
typedef enum sluice_limit_mode {
    SLUICE_MODE_ENFORCE = 0, /* the default: a denial parks, rejects or refuses */
    SLUICE_MODE_SHADOW,      /* a dry run: evaluated, charged and counted exactly as if enforced,
                              * but a would-be denial lets the task (or caller) through uncharged
                              * and is counted as shadow_denied (sluice_limit_set_shadow) */
} sluice_limit_mode;

/* Returns "enforce" or "shadow" ("?" for anything else). */
const char *sluice_limit_mode_name(sluice_limit_mode mode);

/* Where a limit takes the units a task costs. */
typedef enum sluice_units_source {
    SLUICE_UNITS_TASK = 0, /* the task's own units (TASK.ADD ... UNITS n; default 1) */
    SLUICE_UNITS_FIXED,    /* always units_fixed */
    SLUICE_UNITS_PATH,     /* a number at units_path in the input */
} sluice_units_source;

/* One tier of a tiered limit: chosen when the tier field matches. A numeric field matches when
 * min <= value <= max; a string field matches when it equals `equals`. */
typedef struct sluice_tier {
    char *name;           /* e.g. "heavy"; owned */
    int64_t min, max;     /* numeric match, inclusive (INT64_MIN/INT64_MAX for open ends) */
    char *equals;         /* string match, owned; NULL for a numeric tier */
    sluice_limit_def def; /* the limit applied to tasks of this tier */
} sluice_tier;

/* Most per-key overrides one limit holds, and the longest key one may name: bounds that keep a
 * limit's one-line spec (policy_spec.h) within SLUICE_POLICY_SPEC_MAX_LEN. */
#define SLUICE_MAX_KEY_OVERRIDES    16
#define SLUICE_MAX_OVERRIDE_KEY_LEN 64

/* One key of a keyed limit with limits of its own (a paying tenant's higher rate): the key's
 * budget follows `def` instead of the limit's; every other key is unchanged. */
typedef struct sluice_key_override {
    char *key;            /* owned, NUL-terminated: 1 to SLUICE_MAX_OVERRIDE_KEY_LEN bytes, none
                           * of them a control byte, ',', ';' or '=' */
    sluice_limit_def def; /* of the same kind as the limit's own definition */
} sluice_key_override;

/* A named limit. */
typedef struct sluice_limit_policy {
    char *name;           /* owned; [A-Za-z0-9_.:-]+ */
    sluice_limit_def def; /* the limit (unused when tiers are given) */
    sluice_key_source key_source;
    char *key_path;         /* owned; KEY_PATH only: a dot path or a key template */
    int missing_key_global; /* a task without the key shares one global bucket (else error) */
    int missing_key_skip;   /* a task without the key (or with an empty one) skips this limit;
                             * exclusive with missing_key_global */
    sluice_overflow overflow;
    sluice_limit_mode mode; /* enforce (default) or shadow; switching it keeps the key state */
    sluice_units_source units_source;
    int64_t units_fixed; /* UNITS_FIXED */
    char *units_path;    /* owned; UNITS_PATH */
    char *tier_path;     /* owned; dot-path of the field choosing the tier; NULL = none */
    sluice_tier *tiers;  /* owned array of ntiers */
    size_t ntiers;
    sluice_key_override *overrides; /* owned array of noverrides, distinct keys; only on a keyed
                                     * limit without tiers */
    size_t noverrides;
    int line; /* where it was declared in the config file (0 = not from one) */
} sluice_limit_policy;

/* How a failed task is retried. */
typedef enum sluice_backoff {
    SLUICE_BACKOFF_FIXED = 0,  /* every retry waits base_ns */
    SLUICE_BACKOFF_EXPONENTIAL /* base_ns * 2^(attempt-1), capped at max_ns */
} sluice_backoff;

typedef struct sluice_retry_policy {
    int max_attempts; /* attempts in all, >= 1 (1 = no retry); default 3 */
    sluice_backoff backoff;
    int64_t base_ns;      /* default 1 s */
    int64_t max_ns;       /* cap of exponential backoff; default 5 min */
    int throttle_retries; /* retries pay the limits again (default 1) */
} sluice_retry_policy;

/* How the ready tasks of one type share the workers that poll it. */
typedef enum sluice_fairness {
    SLUICE_FAIR_FIFO = 0, /* priority, then submission order (one busy key delays the rest) */
    SLUICE_FAIR_KEYS,     /* priority, then a fair share of units between keys (the tenants of
                           * fair_key), then submission order within a key */
} sluice_fairness;

/* A task type. */
typedef struct sluice_type_policy {
    char *name;    /* owned */
    char **limits; /* owned names of its limits: the chain, in order */
    size_t nlimits;
    sluice_retry_policy retry;
    int64_t lease_ns; /* visibility timeout of a delivered task; default 30 s */
    int priority;     /* default priority of its tasks (higher runs first); default 0 */
    int line;
    sluice_fairness fairness; /* default SLUICE_FAIR_FIFO */
    char *fair_key;           /* owned; FAIR_KEYS: the limit of `limits` whose key names a task's
                               * tenant; NULL = the first keyed limit of `limits` */
    int charge_redelivery;    /* 1: a task delivered again after its lease was lost pays its
                               * limits again (seed 001, at-least-once accounting); 0 (default):
                               * it redeems the grant it holds (exactly-once, seed 003) */
} sluice_type_policy;

/* Engine-wide settings. */
typedef struct sluice_engine_policy {
    size_t max_tasks;          /* unfinished tasks held; past it submit is EBUSY. default 1e7 */
    size_t max_parked;         /* parked tasks; past it limited submits are EBUSY. default 1e6 */
    size_t max_finished;       /* finished tasks kept for TASK.INFO; default 10000 */
    int strict_types;          /* refuse task types the policy does not declare */
    int64_t event_interval_ns; /* aggregation window of events; default 10 s */
    int64_t default_lease_ns;  /* lease of tasks of undeclared types; default 30 s */
} sluice_engine_policy;

/* Fills every field with its default. */
void sluice_limit_policy_init(sluice_limit_policy *p);
void sluice_type_policy_init(sluice_type_policy *t);
void sluice_engine_policy_init(sluice_engine_policy *e);

/* Frees the owned members (not the struct itself). Accept NULL. */
void sluice_limit_policy_clear(sluice_limit_policy *p);
void sluice_type_policy_clear(sluice_type_policy *t);

/* Deep copies; dst is overwritten. Return 0 or SLUICE_ENOMEM (dst then cleared). */
int sluice_limit_policy_copy(sluice_limit_policy *dst, const sluice_limit_policy *src);
int sluice_type_policy_copy(sluice_type_policy *dst, const sluice_type_policy *src);

/* Validates a policy on its own (names, paths, the limit definition of every tier and every key
 * override, tiers that overlap, units_fixed above the burst). Returns 0 or an error with a one-line
 * message. */
int sluice_limit_policy_validate(const sluice_limit_policy *p, char *msg, size_t msglen);
int sluice_type_policy_validate(const sluice_type_policy *t, char *msg, size_t msglen);

SLUICE_API_END

#ifdef __cplusplus
}
#endif
#endif
