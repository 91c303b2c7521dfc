/* SPDX-License-Identifier: MIT */
/*
 * Decimal integers written without printf, for the paths that write many of them per request
 * (RESP replies, the shared stores' call arguments): vfprintf's format parsing cost more than
 * the rest of a THROTTLE's encoding.
 */
#ifndef SLUICE_BASE_DEC_H
#define SLUICE_BASE_DEC_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The most bytes dec_u64 and dec_i64 write ("18446744073709551615", "-9223372036854775808"). */
#define DEC_MAX 20

/* Writes v's decimal digits at out (DEC_MAX bytes of room, no NUL); returns how many. */
static inline size_t dec_u64(char *out, uint64_t v)
{
    char tmp[DEC_MAX];
    char *p = tmp + sizeof tmp;
    size_t n;

    do {
        *--p = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0);
    n = (size_t)(tmp + sizeof tmp - p);
    memcpy(out, p, n);
    return n;
}

/* dec_u64 with a '-' for a negative v (INT64_MIN included). */
static inline size_t dec_i64(char *out, int64_t v)
{
    if (v >= 0)
        return dec_u64(out, (uint64_t)v);
    out[0] = '-';
    return 1 + dec_u64(out + 1, (uint64_t)0 - (uint64_t)v);
}

#endif
