/* SPDX-License-Identifier: MIT */
/*
 * One-line error messages and the quoting of user input inside them (see quote.h).
 */
#include "quote.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *quote_bytes(quote_buf *q, const char *s, size_t n, size_t max)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;

    if (max > QUOTE_MAX_LEN)
        max = QUOTE_MAX_LEN;
    q->s[o++] = '"';
    for (size_t i = 0; i < n && i < max; i++) {
        unsigned char c = (unsigned char)s[i];

        if (c < 0x20 || c == 0x7f) {
            q->s[o++] = '\\';
            q->s[o++] = 'x';
            q->s[o++] = hex[c >> 4];
            q->s[o++] = hex[c & 15];
        } else if (c == '"' || c == '\\') {
            q->s[o++] = '\\';
            q->s[o++] = (char)c;
        } else {
            q->s[o++] = (char)c;
        }
    }
    if (n > max) {
        memcpy(q->s + o, "...", 3);
        o += 3;
    }
    q->s[o++] = '"';
    q->s[o] = '\0';
    return q->s;
}

void vmsgf(char *msg, size_t msglen, const char *fmt, va_list ap)
{
    if (!msg || msglen == 0)
        return;
    vsnprintf(msg, msglen, fmt, ap);
}

void msgf(char *msg, size_t msglen, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vmsgf(msg, msglen, fmt, ap);
    va_end(ap);
}

void vmsgf_append(char *msg, size_t msglen, const char *fmt, va_list ap)
{
    size_t len;

    if (!msg || msglen == 0)
        return;
    len = strnlen(msg, msglen);
    if (len + 1 >= msglen)
        return; /* full (or cut): nothing more fits */
    vsnprintf(msg + len, msglen - len, fmt, ap);
}

void msgf_append(char *msg, size_t msglen, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vmsgf_append(msg, msglen, fmt, ap);
    va_end(ap);
}
