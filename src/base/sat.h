/* SPDX-License-Identifier: MIT */
/*
 * Saturating 64-bit arithmetic: the result of an operation that would overflow is the nearest
 * representable value instead of undefined behaviour (signed) or a wrap-around (unsigned).
 *
 * What a saturated value means is the caller's convention, the same everywhere in sluice:
 * - a time or a deadline saturated at INT64_MAX means "never" (SLUICE_NEVER) or "very long",
 *   at INT64_MIN "since always";
 * - a count or a sum saturated at its maximum means "too many to count", and stays there.
 *
 * The helpers are inline and built on the compiler's overflow builtins, so the common case is
 * one instruction and a branch that is never taken.
 */
#ifndef SLUICE_BASE_SAT_H
#define SLUICE_BASE_SAT_H

#include <stdint.h>

/* Returns a + b, or INT64_MAX / INT64_MIN when the sum lies above / below the range. */
static inline int64_t sat_add_i64(int64_t a, int64_t b)
{
    int64_t r;

    if (__builtin_add_overflow(a, b, &r))
        return b > 0 ? INT64_MAX : INT64_MIN;
    return r;
}

/* Returns a - b, or INT64_MAX / INT64_MIN when the difference lies above / below the range. */
static inline int64_t sat_sub_i64(int64_t a, int64_t b)
{
    int64_t r;

    if (__builtin_sub_overflow(a, b, &r))
        return b < 0 ? INT64_MAX : INT64_MIN;
    return r;
}

/* Returns a * b, or INT64_MAX / INT64_MIN when the product lies above / below the range. */
static inline int64_t sat_mul_i64(int64_t a, int64_t b)
{
    int64_t r;

    if (__builtin_mul_overflow(a, b, &r))
        return (a < 0) != (b < 0) ? INT64_MIN : INT64_MAX;
    return r;
}

/* Returns a + b, or UINT64_MAX when the sum does not fit. */
static inline uint64_t sat_add_u64(uint64_t a, uint64_t b)
{
    uint64_t r;

    if (__builtin_add_overflow(a, b, &r))
        return UINT64_MAX;
    return r;
}

/* Returns a - b, or 0 when b > a. */
static inline uint64_t sat_sub_u64(uint64_t a, uint64_t b)
{
    uint64_t r;

    if (__builtin_sub_overflow(a, b, &r))
        return 0;
    return r;
}

/* Returns a * b, or UINT64_MAX when the product does not fit. */
static inline uint64_t sat_mul_u64(uint64_t a, uint64_t b)
{
    uint64_t r;

    if (__builtin_mul_overflow(a, b, &r))
        return UINT64_MAX;
    return r;
}

#endif
