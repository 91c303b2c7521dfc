/* SPDX-License-Identifier: MIT */
/*
 * One-line error messages: writing them into a caller's buffer (the one message formatter), and
 * quoting user input inside them (the bytes between double quotes, control bytes as \xNN, quotes
 * and backslashes escaped, long input cut short with "..."), so that a message about any input
 * stays one printable line.
 */
#ifndef SLUICE_BASE_QUOTE_H
#define SLUICE_BASE_QUOTE_H

#include <stdarg.h>
#include <stddef.h>

#include "base/attr.h"

/* The most input bytes any caller shows. */
#define QUOTE_MAX_LEN 80

/* Room for '"', QUOTE_MAX_LEN bytes of 4 at worst (\xNN), "...", '"' and the NUL. */
typedef struct quote_buf {
    char s[QUOTE_MAX_LEN * 4 + 8];
} quote_buf;

/* Quotes the first min(n, max) bytes of s into q (max <= QUOTE_MAX_LEN) and returns q->s,
 * valid as long as q. */
const char *quote_bytes(quote_buf *q, const char *s, size_t n, size_t max);

/* The one message formatter. Every function that explains a failure takes a (char *msg,
 * size_t msglen) pair and writes through these, so that the rules hold everywhere: msg may be
 * NULL, or msglen 0, for a caller that wants no message; a message that does not fit is cut
 * (never overflows) and is always NUL-terminated when msglen > 0. */

/* Formats a message into msg. */
void msgf(char *msg, size_t msglen, const char *fmt, ...) PRINTF_ATTR(3, 4);

/* msgf with a va_list, for a module's own "fail(rc, fmt, ...)" helper. */
void vmsgf(char *msg, size_t msglen, const char *fmt, va_list ap) PRINTF_ATTR(3, 0);

/* Appends a formatted text to the message already in msg (a context prefix, then the reason).
 * Does nothing when the message already fills msg, so a cut prefix is never followed by a
 * reason. */
void msgf_append(char *msg, size_t msglen, const char *fmt, ...) PRINTF_ATTR(3, 4);
void vmsgf_append(char *msg, size_t msglen, const char *fmt, va_list ap) PRINTF_ATTR(3, 0);

#endif
