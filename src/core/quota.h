/* SPDX-License-Identifier: MIT */
/*
 * Quotas on one key: a budget of cost units per UTC calendar period (day, month) or in total.
 *
 * A charge is made up front with an estimate and settled later with the actual cost (refund or
 * extra charge), as an LLM token budget needs. Spending may exceed the budget after a settlement;
 * further charges are then denied until the next period. now_ns is read as Unix time (UTC).
 */
#ifndef SLUICE_CORE_QUOTA_H
#define SLUICE_CORE_QUOTA_H

#include <stdint.h>

#include "sluice/limit.h"

/* A quota key. Zeroed = fresh. */
typedef struct quota_state {
    int64_t period_start_ns; /* start of the period `spent` belongs to (0 for CAL_NONE) */
    int64_t period_end_ns;   /* its end (SLUICE_NEVER for CAL_NONE); 0 while fresh */
    int64_t spent;           /* units charged in the period */
} quota_state;

/* Returns the start of the calendar period holding t_ns, and its end through *end_ns.
 * CAL_NONE: 0 and SLUICE_NEVER. */
int64_t quota_period_start(sluice_calendar cal, int64_t t_ns, int64_t *end_ns);

/* Charges `units` when spent + units <= budget (rolling the period over first when now_ns is past
 * its end). A denial's retry_after is the time to the next period (SLUICE_NEVER for CAL_NONE or
 * units > budget); reset_after likewise. */
void quota_decide(int64_t budget, sluice_calendar cal, quota_state *s, int64_t units,
                  int64_t now_ns, int peek, sluice_decision *d);

/* Adjusts the charge of `estimate` made at charged_ns to `actual`. Returns 0, or SLUICE_ESTATE
 * when charged_ns lies outside the period s now counts (nothing changes). spent never drops
 * below 0. */
int quota_settle(sluice_calendar cal, quota_state *s, int64_t charged_ns, int64_t estimate,
                 int64_t actual, int64_t now_ns);

/* Returns 1 when s carries no information at now_ns (nothing spent, or its period ended). */
int quota_idle(const quota_state *s, int64_t now_ns);

#endif
