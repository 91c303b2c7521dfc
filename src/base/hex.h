/* SPDX-License-Identifier: MIT */
/*
 * The value of one hexadecimal digit, for every parser that reads them (RESP's inline quoting,
 * JSON's \u escapes, lease handles, percent-escapes in store URLs).
 */
#ifndef SLUICE_BASE_HEX_H
#define SLUICE_BASE_HEX_H

/* 0..15 for '0'-'9', 'a'-'f' and 'A'-'F'; -1 for any other byte. */
static inline int hex_digit_value(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

#endif
