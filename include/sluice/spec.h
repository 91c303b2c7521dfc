/* SPDX-License-Identifier: MIT */
/*
 * Limit specs: the one-line text form of a limit definition.
 *
 * The same text is read by `sluice simulate --limit`, by the server's LIMIT.SET and written back
 * by LIMIT.GET, so it has one grammar, parsed here, and one canonical form, written here:
 *
 *   spec     := kind *( "," option )
 *   kind     := "rate=" N "/" PERIOD          GCRA: N units per PERIOD
 *             | "window=" N "/" PERIOD        fixed window: N units per aligned PERIOD
 *             | "sliding=" N "/" PERIOD       sliding window: N units in any PERIOD
 *             | "concurrency=" N              N units held at once
 *             | "quota=" N "/" CAL            N units of cost per CAL
 *   CAL      := "day" | "month" | "total"
 *   option   := "burst=" N | "start_empty" | "horizon=" DURATION     (rate only)
 *             | "decrease=" FRACTION | "recover=" PCT "%/" PERIOD
 *             | "floor=" N "/" PERIOD             adaptive (AIMD) rate (rate only)
 *             | "ttl=" DURATION                                      (concurrency only)
 *             | "max_keys=" N | "keys_overflow=" ("refuse" | "allow")
 *             | "max_key_len=" N                                     (every kind)
 *   PERIOD   := DURATION | UNIT                 a bare unit means one of it: "10/s" = "10/1s"
 *   DURATION := DIGITS UNIT
 *   UNIT     := "ns" | "us" | "ms" | "s" | "m" | "h" | "d"
 *   N        := DIGITS                          decimal, no sign
 *   FRACTION := "0." 1*6DIGIT | PCT "%"          strictly between 0 and 1: "0.5", "50%"
 *
 * The grammar is strict: lower case, no spaces, each option at most once, and an option that does
 * not apply to the kind is an error rather than silently ignored. Every error message is one line
 * that quotes the part at fault, e.g.
 *   bad period "5x" in "rate=10/5x": expected a number with a unit ms, s, m, h or d
 * Control bytes in quoted text are written as \xNN, so a message never spans lines.
 *
 * Everything here is pure: no allocation, no I/O, no global state.
 */
#ifndef SLUICE_SPEC_H
#define SLUICE_SPEC_H

#include <stddef.h>
#include <stdint.h>

#include "sluice/limit.h"

#include "sluice/export.h"

#ifdef __cplusplus
extern "C" {
#endif
SLUICE_API_BEGIN

/* A buffer of this many bytes always holds the text written by sluice_spec_format_limit(). */
#define SLUICE_SPEC_MAX_LEN 256

/* A buffer of this many bytes always holds the text written by sluice_spec_format_duration(). */
#define SLUICE_SPEC_DURATION_MAX_LEN 24

/* Parses the len bytes at text as a DURATION: decimal digits followed by a unit, one of
 * ns, us, ms, s, m, h, d ("250ms", "5s", "1m", "7d"). No sign, no spaces, no fraction.
 * Sets *ns to 0 first; on success stores the duration in nanoseconds there and returns 0.
 * Returns SLUICE_EPARSE when the text does not follow the grammar (a missing or unknown unit, a
 * sign, no digits) and SLUICE_ERANGE when the duration does not fit in an int64 of nanoseconds
 * (about 292 years). Zero ("0s") is a valid duration; whether it makes sense is the caller's
 * business. */
int sluice_spec_parse_duration(const char *text, size_t len, int64_t *ns);

/* Writes the duration ns (>= 0) into buf in the largest unit that expresses it exactly
 * ("90s", "1m", "250ms", "0s"), NUL-terminated. Returns 0, SLUICE_EINVAL when ns < 0, or
 * SLUICE_ERANGE when len is too small (buf then holds "" when len > 0). */
int sluice_spec_format_duration(int64_t ns, char *buf, size_t len);

/* Parses one setting of an adaptive (AIMD) rate, named `name` ("decrease", "recover" or
 * "floor"), from the vlen bytes at value ("0.5" or "50%"; "10%/1m"; "5/1s"), into def's
 * decrease_num/decrease_den, recover_pct/recover_ns or floor_permits/floor_period_ns; settings
 * not set yet take their defaults (decrease 0.5, recover 10%/1m, floor 1 per def->period_ns,
 * which must be set first). Shared by the spec grammar and the YAML configuration. Bounds are
 * checked by sluice_limit_def_validate(). Returns 0, SLUICE_EPARSE with a one-line message
 * quoting the value, or SLUICE_EINVAL (unknown name, NULL arguments). */
int sluice_spec_parse_adaptive(const char *name, const char *value, size_t vlen,
                               sluice_limit_def *def, char *msg, size_t msglen);

/* Parses the NUL-terminated spec text into *def, which it fills from sluice_limit_def_init() of
 * the kind named and then the values given, and checks with sluice_limit_def_validate().
 * *def is zeroed first and only filled on success. msg (may be NULL when msglen is 0) receives a
 * one-line explanation on failure and "" on success; it is always NUL-terminated when msglen > 0.
 * Returns 0; SLUICE_EPARSE for text that does not follow the grammar; SLUICE_ERANGE for a
 * number or duration too large to represent; SLUICE_EINVAL for a NULL text or def; or the code
 * of sluice_limit_def_validate() (SLUICE_EINVAL, SLUICE_ERANGE) for a well-formed spec whose
 * values are out of bounds ("rate=0/1s"), its message prefixed with the spec. */
int sluice_spec_parse_limit(const char *text, sluice_limit_def *def, char *msg, size_t msglen);

/* Writes the canonical spec of def into buf, NUL-terminated: the kind with its value, then the
 * options whose value differs from the kind's default, in the order of the grammar above, each
 * duration in its largest exact unit. Fields that do not apply to the kind are not written (they
 * have no effect). For every def that validates, sluice_spec_parse_limit() of the text gives back
 * def (fields that apply to the kind are equal; the others hold their defaults), and formatting
 * that again gives the same text.
 * Returns 0; the code of sluice_limit_def_validate() when def does not validate; SLUICE_EINVAL
 * when def or buf is NULL; SLUICE_ERANGE when len is too small (SLUICE_SPEC_MAX_LEN always
 * suffices; buf then holds "" when len > 0). */
int sluice_spec_format_limit(const sluice_limit_def *def, char *buf, size_t len);

SLUICE_API_END

#ifdef __cplusplus
}
#endif
#endif
