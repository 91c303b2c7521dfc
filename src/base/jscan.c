/* SPDX-License-Identifier: MIT */
/*
 * The validating JSON scanner (see jscan.h for what it accepts and how it agrees with jansson).
 *
 * jscan_validate is one loop over the bytes with three states (a value is expected, a value has
 * ended, a member name is expected) and a bit per open container saying object or array, so it
 * needs no recursion and no allocation whatever the nesting. Strings are scanned in runs of plain
 * ASCII, the common case, and only escapes and non-ASCII bytes are looked at one by one.
 */
#include "base/jscan.h"

#include <stdint.h>
#include <string.h>

#include "base/hex.h"
#include "sluice/error.h"

#define INT64_DIGITS 19 /* digits of INT64_MAX and of -INT64_MIN */
/* A real whose decimal magnitude (the exponent of its leading digit) is this is between 1e308
 * and 1e309: it overflows a double or not depending on rounding near DBL_MAX (1.797...e308). */
#define REAL_EDGE_MAG 308
#define EXP_SATURATE  INT64_C(1000000000000000) /* far past any magnitude that matters */

static int is_ws(unsigned char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static int is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

size_t jscan_skip_ws(const char *doc, size_t len, size_t at)
{
    while (at < len && is_ws((unsigned char)doc[at]))
        at++;
    return at;
}

/* Reads four hex digits at s[0..n) into *v. Returns 1, or 0 when they are not there. */
static int hex4(const unsigned char *s, size_t n, unsigned *v)
{
    unsigned x = 0;

    if (n < 4)
        return 0;
    for (int k = 0; k < 4; k++) {
        int d = hex_digit_value(s[k]);

        if (d < 0)
            return 0;
        x = x << 4 | (unsigned)d;
    }
    *v = x;
    return 1;
}

/* The length of the UTF-8 sequence of a code point at s[0..n) (s[0] >= 0x80), or 0 when it is
 * not one: a stray continuation byte, an overlong form, an encoded surrogate, a code point past
 * U+10FFFF, or a sequence cut short. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    unsigned c = s[0], cp, min;
    size_t need;

    if (c >= 0xC2 && c <= 0xDF) {
        need = 2;
        cp = c & 0x1F;
        min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        cp = c & 0x0F;
        min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        cp = c & 0x07;
        min = 0x10000;
    } else {
        return 0;
    }
    if (n < need)
        return 0;
    for (size_t k = 1; k < need; k++) {
        if ((s[k] & 0xC0) != 0x80)
            return 0;
        cp = cp << 6 | (s[k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return need;
}

/* Returns 1 when the 8 bytes at s are all plain string bytes: printable ASCII other than the
 * quote and the backslash. Each test is the bytewise "is any byte zero / below n" of a 64-bit
 * word, exact as an answer for the whole word (its carries only disturb bytes above a byte that
 * already matched), so a long run of text costs one load and a few operations per 8 bytes. */
static int plain8(const unsigned char *s)
{
    const uint64_t ones = UINT64_C(0x0101010101010101), high = UINT64_C(0x8080808080808080);
    uint64_t w, q, b;

    memcpy(&w, s, sizeof w);
    q = w ^ (ones * '"');
    b = w ^ (ones * '\\');
    return (((w - ones * 0x20) & ~w) | ((q - ones) & ~q) | ((b - ones) & ~b) | w) & high ? 0 : 1;
}

/* Scans the string whose opening quote is at s[*pos]; on success *pos is just past its closing
 * quote, on failure at the fault. A member name (name set) may not hold \u0000: jansson cannot
 * keep such a name. Returns 0 or SLUICE_EINVAL. */
static int scan_string(const unsigned char *s, size_t len, size_t *pos, int name)
{
    size_t i = *pos + 1;

    for (;;) {
        unsigned char c;
        size_t n;

        while (i + 8 <= len && plain8(s + i))
            i += 8;
        while (i < len && s[i] >= 0x20 && s[i] < 0x80 && s[i] != '"' && s[i] != '\\')
            i++;
        if (i >= len)
            break;
        c = s[i];
        if (c == '"') {
            *pos = i + 1;
            return 0;
        }
        if (c == '\\') {
            unsigned v, w;

            if (i + 1 >= len)
                break;
            c = s[i + 1];
            if (c != 'u') {
                if (!memchr("\"\\/bfnrt", c, 8))
                    break;
                i += 2;
                continue;
            }
            if (!hex4(s + i + 2, len - i - 2, &v))
                break;
            if (v >= 0xDC00 && v <= 0xDFFF) /* a low surrogate with no high one before it */
                break;
            if (v >= 0xD800 && v <= 0xDBFF) {
                /* A high surrogate stands only as the first half of a pair. */
                if (i + 7 >= len || s[i + 6] != '\\' || s[i + 7] != 'u' ||
                    !hex4(s + i + 8, len - i - 8, &w) || w < 0xDC00 || w > 0xDFFF)
                    break;
                i += 12;
                continue;
            }
            if (v == 0 && name)
                break;
            i += 6;
            continue;
        }
        if (c < 0x20) /* a control byte, NUL included */
            break;
        n = utf8_seq(s + i, len - i);
        if (n == 0)
            break;
        i += n;
    }
    *pos = i;
    return SLUICE_EINVAL;
}

/* Scans the number at s[*pos] as jansson reads it: an integer must fit in int64 and a real must
 * not overflow a double. Returns 0 with *pos past it, SLUICE_EINVAL, or JSCAN_UNSURE for a real
 * too near DBL_MAX to judge without converting it. */
static int scan_number(const unsigned char *s, size_t len, size_t *pos)
{
    size_t i = *pos, int_at, nint, frac_at = 0, nfrac = 0;
    int neg = 0;
    int64_t exp = 0, mag;

    if (s[i] == '-') {
        neg = 1;
        i++;
    }
    int_at = i;
    if (i < len && s[i] == '0') {
        i++;
        if (i < len && is_digit(s[i])) /* a leading zero */
            goto fail;
    } else if (i < len && is_digit(s[i])) {
        while (i < len && is_digit(s[i]))
            i++;
    } else {
        goto fail;
    }
    nint = i - int_at;
    if (i >= len || (s[i] != '.' && s[i] != 'e' && s[i] != 'E')) {
        /* An integer: jansson reads it with strtoll and refuses it out of range. No leading
         * zeros, so longer means larger and equally long compares as text. */
        if (nint > INT64_DIGITS ||
            (nint == INT64_DIGITS &&
             memcmp(s + int_at, neg ? "9223372036854775808" : "9223372036854775807", INT64_DIGITS) >
                 0))
            goto fail;
        *pos = i;
        return 0;
    }
    if (s[i] == '.') {
        frac_at = ++i;
        while (i < len && is_digit(s[i]))
            i++;
        nfrac = i - frac_at;
        if (nfrac == 0)
            goto fail;
    }
    if (i < len && (s[i] == 'e' || s[i] == 'E')) {
        int eneg = 0;
        size_t exp_at;

        i++;
        if (i < len && (s[i] == '+' || s[i] == '-'))
            eneg = s[i++] == '-';
        exp_at = i;
        while (i < len && is_digit(s[i])) {
            if (exp < EXP_SATURATE)
                exp = exp * 10 + (s[i] - '0');
            i++;
        }
        if (i == exp_at)
            goto fail;
        if (eneg)
            exp = -exp;
    }
    *pos = i;
    /* The magnitude is the power of ten of the leading non-zero digit. Below 1e308 a real is
     * finite, from 1e309 on it overflows (jansson: "real number overflow"), and a zero, however
     * written, is zero. Underflow is accepted, as jansson does. */
    for (size_t k = 0; k < nint + nfrac; k++) {
        unsigned char d = k < nint ? s[int_at + k] : s[frac_at + k - nint];

        if (d == '0')
            continue;
        mag = (k < nint ? (int64_t)(nint - k) - 1 : -(int64_t)(k - nint) - 1) + exp;
        if (mag > REAL_EDGE_MAG)
            return SLUICE_EINVAL;
        return mag == REAL_EDGE_MAG ? JSCAN_UNSURE : 0;
    }
    return 0;

fail:
    *pos = i;
    return SLUICE_EINVAL;
}

/* Sets or clears the bit saying that the container at depth d is an object. */
static void set_kind(uint64_t *kinds, size_t d, int object)
{
    uint64_t bit = UINT64_C(1) << (d % 64);

    if (object)
        kinds[d / 64] |= bit;
    else
        kinds[d / 64] &= ~bit;
}

static int is_object(const uint64_t *kinds, size_t d)
{
    return (int)(kinds[d / 64] >> (d % 64) & 1);
}

int jscan_validate(const char *doc, size_t len, size_t *at)
{
    const unsigned char *s = (const unsigned char *)doc;
    uint64_t kinds[JSCAN_MAX_DEPTH / 64];
    size_t i, depth = 0; /* containers open around the current position */
    int rc = SLUICE_EINVAL;

    if (at)
        *at = 0;
    i = jscan_skip_ws(doc, len, 0);

value: /* a value starts at s[i]; it is nested depth + 1 deep */
    if (i >= len || depth >= JSCAN_MAX_DEPTH)
        goto fail;
    switch (s[i]) {
    case '{':
    case '[': {
        int object = s[i] == '{';

        i = jscan_skip_ws(doc, len, i + 1);
        if (i < len && s[i] == (object ? '}' : ']')) {
            i++;
            goto after;
        }
        set_kind(kinds, depth++, object);
        if (object)
            goto name;
        goto value;
    }
    case '"':
        if (scan_string(s, len, &i, 0) != 0)
            goto fail;
        goto after;
    case 't':
    case 'f':
    case 'n': {
        const char *lit = s[i] == 't' ? "true" : s[i] == 'f' ? "false" : "null";
        size_t n = strlen(lit);

        if (len - i < n || memcmp(s + i, lit, n) != 0)
            goto fail;
        i += n;
        break;
    }
    default:
        if (s[i] != '-' && !is_digit(s[i]))
            goto fail;
        rc = scan_number(s, len, &i);
        if (rc != 0)
            goto fail;
        break;
    }
    /* jansson reads one byte past a number or a literal and puts it back; a NUL byte put back
     * that way is lost, so jansson reads "1\0" as 1. Only it can say what follows. */
    if (i < len && s[i] == '\0') {
        rc = JSCAN_UNSURE;
        goto fail;
    }

after: /* a value ended just before s[i] */
    i = jscan_skip_ws(doc, len, i);
    if (depth == 0) {
        if (i == len)
            return 0;
        goto fail;
    }
    if (i >= len)
        goto fail;
    if (s[i] == ',') {
        i = jscan_skip_ws(doc, len, i + 1);
        if (is_object(kinds, depth - 1))
            goto name;
        goto value;
    }
    if (s[i] == (is_object(kinds, depth - 1) ? '}' : ']')) {
        i++;
        depth--;
        goto after;
    }
    goto fail;

name: /* a member name, its colon and its value start at s[i] */
    if (i >= len || s[i] != '"' || scan_string(s, len, &i, 1) != 0)
        goto fail;
    i = jscan_skip_ws(doc, len, i);
    if (i >= len || s[i] != ':')
        goto fail;
    i = jscan_skip_ws(doc, len, i + 1);
    goto value;

fail:
    if (at)
        *at = i;
    return rc == JSCAN_UNSURE ? JSCAN_UNSURE : SLUICE_EINVAL;
}

/* The offset past the closing quote of the (valid) string opening at doc[at]. */
static size_t string_end(const char *doc, size_t len, size_t at)
{
    size_t i = at + 1;

    /* The closing quote is the first quote after an even run of backslashes (an odd run
     * escapes it); memchr finds quotes far faster than a byte loop over long text. */
    for (;;) {
        const char *q = memchr(doc + i, '"', len - i);
        size_t end, run = 0;

        if (!q)
            return len;
        end = (size_t)(q - doc);
        while (end - run > at + 1 && doc[end - run - 1] == '\\')
            run++;
        if (run % 2 == 0)
            return end + 1;
        i = end + 1;
    }
}

size_t jscan_value_end(const char *doc, size_t len, size_t at)
{
    size_t i = at, open = 0;

    switch (doc[at]) {
    case '"':
        return string_end(doc, len, at);
    case '{':
    case '[':
        while (i < len) {
            char c = doc[i];

            if (c == '"') {
                i = string_end(doc, len, i);
                continue;
            }
            if (c == '{' || c == '[') {
                open++;
            } else if (c == '}' || c == ']') {
                if (--open == 0)
                    return i + 1;
            }
            i++;
        }
        return len;
    default:
        /* A number or a literal: it ends at whitespace or punctuation. */
        while (i < len && !is_ws((unsigned char)doc[i]) && doc[i] != ',' && doc[i] != ']' &&
               doc[i] != '}')
            i++;
        return i;
    }
}

void jscan_iter_open(jscan_iter *it, const char *doc, size_t len, size_t at)
{
    it->doc = doc;
    it->len = len;
    it->at = at + 1;
    it->object = doc[at] == '{';
}

int jscan_iter_next(jscan_iter *it, size_t *name, size_t *namelen, size_t *value)
{
    size_t i = jscan_skip_ws(it->doc, it->len, it->at);

    if (i < it->len && it->doc[i] == ',')
        i = jscan_skip_ws(it->doc, it->len, i + 1);
    if (i >= it->len || it->doc[i] == '}' || it->doc[i] == ']') {
        it->at = i;
        return 0;
    }
    if (it->object) {
        size_t end = string_end(it->doc, it->len, i);

        if (name)
            *name = i;
        if (namelen)
            *namelen = end - i;
        i = jscan_skip_ws(it->doc, it->len, end) + 1; /* past the colon */
        i = jscan_skip_ws(it->doc, it->len, i);
    }
    *value = i;
    it->at = jscan_value_end(it->doc, it->len, i);
    return 1;
}
