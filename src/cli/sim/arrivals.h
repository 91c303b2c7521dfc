/* SPDX-License-Identifier: MIT */
/*
 * Arrival specs of `sluice simulate --arrivals`: when the simulated requests arrive.
 *
 *   arrivals := group *( "," group )
 *   group    := N              N requests at time 0
 *             | N "@" T        N requests at once at offset T
 *             | N "@" T ".." T N requests spread evenly over [T1, T2): request i of N arrives at
 *                              T1 + i * (T2 - T1) / N (rounded down to the nanosecond)
 *   T        := "0" | DURATION (see sluice/spec.h: "90s", "250ms", "2h"); in a range, a start
 *               without a unit takes the unit of the end ("10..60s" = "10s..60s")
 *
 * e.g. "20@0,5@90s,300@0..60s". Groups may overlap and come in any order: the result is every
 * request's arrival offset in nanoseconds from time 0, sorted.
 *
 * Pure: no I/O; the one allocation goes through alloc_malloc.
 */
#ifndef SLUICE_CLI_ARRIVALS_H
#define SLUICE_CLI_ARRIVALS_H

#include <stddef.h>
#include <stdint.h>

/* At most this many requests in one spec (they cost 16 bytes each in a simulation). */
#define ARRIVALS_MAX ((size_t)1000000)

/* No arrival later than this offset: ten years. */
#define ARRIVALS_MAX_OFFSET_NS (INT64_C(3650) * 86400 * INT64_C(1000000000))

/* The parsed arrivals of one spec. */
typedef struct arrivals {
    size_t n;        /* number of requests, >= 1 */
    int64_t at_ns[]; /* n arrival offsets from time 0, non-decreasing */
} arrivals;

/* Parses the NUL-terminated spec text. Sets *out to NULL first; on success stores there a new
 * arrivals (the caller frees it with arrivals_free) and returns 0. On failure returns
 * SLUICE_EPARSE (grammar), SLUICE_EINVAL (a count of 0, a range running backwards, NULL text),
 * SLUICE_ERANGE (a time past ARRIVALS_MAX_OFFSET_NS, more than ARRIVALS_MAX requests) with a
 * one-line message naming the bad part in msg (always NUL-terminated when msglen > 0), or
 * SLUICE_ENOMEM. */
int arrivals_parse(const char *text, arrivals **out, char *msg, size_t msglen);

/* Frees arrivals from arrivals_parse(). Accepts NULL. */
void arrivals_free(arrivals *a);

#endif
