/* SPDX-License-Identifier: MIT */
/*
 * The simulation of a scenario: the real engine driven on a simulated clock.
 *
 * simrun_run() is a discrete-event simulation. Its events are the scenario's arrivals (submitted
 * with sluice_engine_submit at their offsets), the workers' completions (ack, or fail with the
 * scenario's failure rate, after a service time) and the engine's own wake-ups (sluice_engine_tick
 * at sluice_engine_next_wake). After every event a free worker polls for work, so grants come
 * exactly when the engine hands tasks out. Time 0 is SIMULATE_EPOCH_NS on the engine's clock.
 *
 * Everything random (service times, failures, random spreads) comes from one xorshift generator
 * seeded by the scenario, and events at the same instant are handled in a fixed order
 * (completions, arrivals, tick, polls by pool), so a scenario gives the same result every time.
 *
 * What it collects: per task its arrival, first start, end, attempts and outcome; per key of every
 * limit (and tier) the units granted over time; the depth of the parking lot, the ready queues and
 * the running set over time; the engine's final counters and the events it emitted.
 */
#ifndef SLUICE_CLI_SIMRUN_H
#define SLUICE_CLI_SIMRUN_H

#include <stddef.h>
#include <stdint.h>

#include "cli/sim/scenario.h"
#include "sluice/config.h"
#include "sluice/engine.h"

/* What became of a task. */
typedef enum simrun_outcome {
    SIMRUN_PENDING = 0, /* submitted, not started yet (queued or parked) */
    SIMRUN_RUNNING,     /* with a worker */
    SIMRUN_RETRYING,    /* failed by a worker, waiting for its retry */
    SIMRUN_DONE,        /* acked */
    SIMRUN_FAILED,      /* failed for good by its workers (dead, or out of attempts) */
    SIMRUN_REJECTED,    /* failed by a limit (reject, horizon, never) */
    SIMRUN_CANCELLED,
    SIMRUN_SKIPPED, /* a recurring occurrence that could not run */
    SIMRUN_REFUSED, /* the submit itself failed (EBUSY at a cap, a bad payload...) */
} simrun_outcome;

/* One task. */
typedef struct simrun_task {
    uint64_t id;        /* the engine's id; 0 when refused */
    uint32_t stream;    /* index of its arrival stream; SIMRUN_RECURRING for an occurrence */
    uint32_t index;     /* its index in the stream */
    const char *type;   /* borrowed from the scenario or the result */
    char *key;          /* the keys it was limited on, comma-separated ("" none); owned */
    int64_t arrival_ns; /* offsets from time 0 */
    int64_t start_ns;   /* first delivery, -1 when never */
    int64_t end_ns;     /* done, failed, rejected...; -1 while unfinished */
    int attempts;       /* deliveries */
    int64_t units;      /* the units it asked for */
    simrun_outcome outcome;
    sluice_fail_reason reason; /* FAILED / REJECTED / SKIPPED */
    char *why;       /* the limit that rejected it, or the submit's error; owned or NULL */
    uint32_t links;  /* its first entry in the result's link table */
    uint32_t nlinks; /* entries (one per limit of its type) */
    uint32_t gen;    /* delivery generation: a completion of an older one is stale */
    int lease_lost;  /* its lease expired while its worker was still at it */
    sluice_task_state final_state; /* unfinished at the end: its engine state */
} simrun_task;

#define SIMRUN_RECURRING UINT32_MAX

/* The units one task asks of one limit key: a grant adds them to the series. */
typedef struct simrun_link {
    uint32_t series; /* index into the result's series */
    int64_t units;
} simrun_link;

/* Units granted over time on one key of one limit (and tier). */
typedef struct simrun_series {
    char *limit;          /* the limit's name, owned */
    char *tier;           /* the tier's name, owned; NULL when untiered */
    char *key;            /* the key, owned; "" for a global limit */
    sluice_limit_def def; /* the definition enforced on this key */
    sluice_overflow overflow;
    int64_t *t_ns; /* grant times, non-decreasing; n entries */
    int64_t *cum;  /* cumulative units granted up to and including grant i */
    size_t n, cap;
    int weighted;            /* 1 when a grant was not of exactly one unit */
    int64_t held, held_peak; /* concurrency: units held now, and the most at once */
    int64_t *held_t;         /* concurrency: units held over time, a point per change */
    int64_t *held_v;
    size_t nheld, held_cap;
    int64_t max_period; /* most units granted in any interval of the period (rate, window,
                         * sliding), in one calendar period (quota), held at once
                         * (concurrency) */
    int64_t max_minute; /* most in any minute, for periods shorter than one; else -1 */
    /* adaptive rate: its rate for this key after each upstream 429 (rate_t, rate_v: time and
     * permits per period, nrate points), and at the end (rate_end; the limit when never lowered) */
    int64_t *rate_t, *rate_v;
    size_t nrate, rate_cap;
    int64_t rate_end;
    /* adaptive rate over time, for the picture: a point (eff_t, eff_v) each time the run saw it
     * change (at each 429 and at the events between them, as it recovers); the configured rate
     * before the first */
    int64_t *eff_t, *eff_v;
    size_t neff, eff_cap;
    size_t rejected; /* tasks this key's limit rejected */
    int64_t *rej_ns; /* when they were rejected, in order; nrej entries */
    size_t nrej, rej_cap;
} simrun_series;

/* The engine's depth at one instant. */
typedef struct simrun_sample {
    int64_t t_ns;
    uint32_t parked, queued, running, delayed;
} simrun_sample;

/* Everything a run collected. Free with simrun_result_free(). */
typedef struct simrun_result {
    const scenario *sc;       /* borrowed: must outlive the result */
    const sluice_config *cfg; /* borrowed */
    simrun_task *tasks;       /* in submit order, recurring occurrences as first delivered */
    size_t ntasks;
    simrun_link *links;
    size_t nlinks;
    simrun_series *series; /* in order of first use */
    size_t nseries;
    simrun_sample *samples; /* one per change, time-ordered */
    size_t nsamples;
    int64_t end_ns;            /* when the simulation stopped */
    int64_t span_ns;           /* the span shown: the duration when given, else end_ns */
    int stopped;               /* 1: stopped by the duration or the 30-day cap, work left */
    sluice_engine_stats stats; /* the engine's counters at the end */
    uint64_t events[8];        /* events emitted, by sluice_event_kind (summaries counted) */
    size_t refused;            /* submits that failed */
    char first_refusal[256];   /* the first submit error, for the report */
    int64_t *u429_ns;          /* scenario upstream: when it answered 429, in order */
    size_t n429, u429_cap;
    /* Internal bookkeeping (a map from engine ids to tasks, the series index). */
    void *priv;
} simrun_result;

/* Runs the scenario sc on a new engine configured by cfg (its engine settings, limits and types).
 * Sets *out to NULL first; on success stores the result there (free with simrun_result_free) and
 * returns 0. A task the engine refuses at submit is recorded (SIMRUN_REFUSED), not an error.
 * Returns SLUICE_EINVAL when the configuration does not install (a recurring series with a bad
 * cron...), SLUICE_ENOMEM, or another engine error, with a one-line message in msg (always
 * NUL-terminated when msglen > 0). */
int simrun_run(const scenario *sc, const sluice_config *cfg, simrun_result **out, char *msg,
               size_t msglen);

/* Frees a result. Accepts NULL. */
void simrun_result_free(simrun_result *r);

/* The most units granted in any half-open interval of length w_ns on series s. */
int64_t simrun_max_in(const simrun_series *s, int64_t w_ns);

/* Returns "done", "failed", "rejected", ... for an outcome. */
const char *simrun_outcome_name(simrun_outcome o);

#endif
