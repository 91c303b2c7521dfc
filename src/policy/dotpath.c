/* SPDX-License-Identifier: MIT */
/*
 * Dot paths into a task's JSON input (see dotpath.h for the syntax, the canonical forms and the
 * error codes).
 *
 * A lookup walks the path segment by segment without copying it: object members are found by
 * (pointer, length), array indices are parsed in place. Nothing is allocated, so a lookup on the
 * gate's hot path costs one hash probe per segment and cannot fail for lack of memory. Reasons
 * quote the path as the caller wrote it (with `input.` if it had one), so they can be shown to
 * the producer unchanged.
 */
#include "policy/dotpath.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/attr.h"
#include "base/quote.h"
#include "sluice/error.h"

#define INPUT_PREFIX     DOTPATH_INPUT_PREFIX
#define INPUT_PREFIX_LEN (sizeof INPUT_PREFIX - 1)
#define QUOTE_MAX        128 /* bytes of a path or segment quoted in a message */
#define NUMBER_TEXT_MAX  40  /* the longest integer or %.17g real text, with room to spare */

static int quote_len(size_t n)
{
    return (int)(n > QUOTE_MAX ? QUOTE_MAX : n);
}

static void clear_msg(char *msg, size_t msglen)
{
    if (msg && msglen > 0)
        msg[0] = '\0';
}

/* Writes `key path "PATH": ` and the formatted reason into msg, when there is one. Returns rc, so
 * callers can `return fail(...)`. */
PRINTF_ATTR(5, 6)
static int fail(int rc, char *msg, size_t msglen, const char *path, const char *fmt, ...)
{
    va_list ap;

    msgf(msg, msglen, "key path \"%.*s\": ", quote_len(strlen(path)), path);
    va_start(ap, fmt);
    vmsgf_append(msg, msglen, fmt, ap);
    va_end(ap);
    return rc;
}

/* Returns path without its `input.` prefix. */
static const char *strip_prefix(const char *path)
{
    return strncmp(path, INPUT_PREFIX, INPUT_PREFIX_LEN) == 0 ? path + INPUT_PREFIX_LEN : path;
}

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
        return "an integer";
    case JSON_REAL:
        return "a real number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    case JSON_NULL:
        return "null";
    }
    return "an unknown value";
}

/* Writes the canonical text of d into buf (NUMBER_TEXT_MAX bytes): the shortest of %.15g, %.16g
 * and %.17g that reads back as d (%.17g always does), with '.' as the decimal point whatever the
 * locale. -0.0 is written "0". Returns the text's length. */
static size_t format_real(double d, char *buf)
{
    int n = 0;

    if (d == 0.0) {
        buf[0] = '0';
        buf[1] = '\0';
        return 1;
    }
    for (int prec = 15; prec <= 17; prec++) {
        /* snprintf and strtod use the same locale, so the round trip is checked before the
         * decimal point is normalised. */
        n = snprintf(buf, NUMBER_TEXT_MAX, "%.*g", prec, d);
        if (strtod(buf, NULL) == d)
            break;
    }
    for (int i = 0; i < n; i++) {
        char c = buf[i];

        if (!((c >= '0' && c <= '9') || c == '-' || c == '+' || c == 'e' || c == 'E'))
            buf[i] = '.';
    }
    return (size_t)(n > 0 ? n : 0);
}

int dotpath_validate(const char *path, char *msg, size_t msglen)
{
    const char *p, *seg;

    clear_msg(msg, msglen);
    if (!path) {
        msgf(msg, msglen, "key path: none given");
        return SLUICE_EINVAL;
    }
    if (!*path)
        return fail(SLUICE_EINVAL, msg, msglen, path, "is empty");
    p = strip_prefix(path);
    if (!*p)
        return fail(SLUICE_EINVAL, msg, msglen, path, "nothing after \"" INPUT_PREFIX "\"");
    /* Every limit has a spec text (LIMIT.GET, the admin API, what is stored), where a comma ends
     * the option and a control byte is refused: a path holding either could be loaded from YAML
     * but never written back as a spec that reads the same. */
    for (const char *q = path; *q; q++) {
        unsigned char c = (unsigned char)*q;

        if (c == ',')
            return fail(SLUICE_EINVAL, msg, msglen, path, "comma at offset %zu",
                        (size_t)(q - path));
        if (c < 0x20 || c == 0x7f)
            return fail(SLUICE_EINVAL, msg, msglen, path, "control byte at offset %zu",
                        (size_t)(q - path));
    }
    for (seg = p;; seg++) {
        const char *end = strchr(seg, '.');

        if (!end)
            end = seg + strlen(seg);
        if (end == seg) {
            if (seg == path)
                return fail(SLUICE_EINVAL, msg, msglen, path, "starts with a dot");
            if (!*seg)
                return fail(SLUICE_EINVAL, msg, msglen, path, "ends with a dot");
            return fail(SLUICE_EINVAL, msg, msglen, path,
                        "empty segment at offset %zu (two dots in a row)", (size_t)(seg - path));
        }
        if (!*end)
            return 0;
        seg = end;
    }
}

int dotpath_index(const char *seg, size_t n, size_t *index)
{
    size_t v = 0;

    if (n == 0 || (n > 1 && seg[0] == '0'))
        return 0;
    for (size_t i = 0; i < n; i++) {
        size_t digit;

        if (seg[i] < '0' || seg[i] > '9')
            return 0;
        digit = (size_t)(seg[i] - '0');
        v = v > (SIZE_MAX - digit) / 10 ? SIZE_MAX : v * 10 + digit;
    }
    *index = v;
    return 1;
}

/* Member key[0..n) of object obj, or NULL. */
static json_t *member(const json_t *obj, const char *key, size_t n)
{
#if JANSSON_VERSION_HEX >= 0x020e00 && !defined(DOTPATH_NO_GETN)
    return json_object_getn(obj, key, n);
#else
    /* Before jansson 2.14 members can only be looked up by NUL-terminated name. A member whose
     * name has an embedded NUL cannot be matched by a path anyway, so strlen() is exact. */
    json_t *o = (json_t *)obj;

    for (void *it = json_object_iter(o); it; it = json_object_iter_next(o, it)) {
        const char *k = json_object_iter_key(it);

        if (strlen(k) == n && memcmp(k, key, n) == 0)
            return json_object_iter_value(it);
    }
    return NULL;
#endif
}

/* Finds the value at path (validated here) in input and stores it in *out. */
static int lookup(const json_t *input, const char *path, const json_t **out, char *msg,
                  size_t msglen)
{
    const json_t *cur = input;
    const char *p, *seg;
    int rc;

    rc = dotpath_validate(path, msg, msglen);
    if (rc)
        return rc;
    if (!input)
        return fail(SLUICE_ENOTFOUND, msg, msglen, path, "the task has no input");
    p = strip_prefix(path);
    for (seg = p;;) {
        const char *end = strchr(seg, '.');
        size_t n, parent_len = seg == p ? 0 : (size_t)(seg - p) - 1;
        const json_t *child;

        if (!end)
            end = seg + strlen(seg);
        n = (size_t)(end - seg);
        if (json_is_object(cur)) {
            child = member(cur, seg, n);
            if (!child) {
                if (parent_len == 0)
                    return fail(SLUICE_ENOTFOUND, msg, msglen, path,
                                "no member \"%.*s\" in the input", quote_len(n), seg);
                return fail(SLUICE_ENOTFOUND, msg, msglen, path, "no member \"%.*s\" in \"%.*s\"",
                            quote_len(n), seg, quote_len(parent_len), p);
            }
        } else if (json_is_array(cur)) {
            size_t index, size = json_array_size(cur);

            if (!dotpath_index(seg, n, &index)) {
                if (parent_len == 0)
                    return fail(SLUICE_EINVAL, msg, msglen, path,
                                "the input is an array and \"%.*s\" is not an index", quote_len(n),
                                seg);
                return fail(SLUICE_EINVAL, msg, msglen, path,
                            "\"%.*s\" is an array and \"%.*s\" is not an index",
                            quote_len(parent_len), p, quote_len(n), seg);
            }
            if (index >= size) {
                if (parent_len == 0)
                    return fail(SLUICE_ENOTFOUND, msg, msglen, path,
                                "index %.*s is past the end of the input (%zu elements)",
                                quote_len(n), seg, size);
                return fail(SLUICE_ENOTFOUND, msg, msglen, path,
                            "index %.*s is past the end of \"%.*s\" (%zu elements)", quote_len(n),
                            seg, quote_len(parent_len), p, size);
            }
            child = json_array_get(cur, index);
        } else {
            if (parent_len == 0)
                return fail(SLUICE_EINVAL, msg, msglen, path,
                            "the input is %s, not an object or array", type_name(cur));
            return fail(SLUICE_EINVAL, msg, msglen, path, "\"%.*s\" is %s, not an object or array",
                        quote_len(parent_len), p, type_name(cur));
        }
        cur = child;
        if (!*end)
            break;
        seg = end + 1;
    }
    *out = cur;
    return 0;
}

int dotpath_extract_msg(const json_t *input, const char *path, char *buf, size_t buflen,
                        size_t *len, char *msg, size_t msglen)
{
    char text[NUMBER_TEXT_MAX];
    const json_t *v = NULL;
    const char *src;
    size_t n;
    int rc;

    clear_msg(msg, msglen);
    if (!len) {
        msgf(msg, msglen, "key path: no length out-parameter");
        return SLUICE_EINVAL;
    }
    *len = 0;
    rc = lookup(input, path, &v, msg, msglen);
    if (rc)
        return rc;

    switch (json_typeof(v)) {
    case JSON_STRING:
        src = json_string_value(v);
        n = json_string_length(v);
        break;
    case JSON_INTEGER:
        n = (size_t)snprintf(text, sizeof text, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        src = text;
        break;
    case JSON_REAL:
        n = format_real(json_real_value(v), text);
        src = text;
        break;
    case JSON_TRUE:
        src = "true";
        n = 4;
        break;
    case JSON_FALSE:
        src = "false";
        n = 5;
        break;
    case JSON_NULL:
        return fail(SLUICE_EINVAL, msg, msglen, path, "value is null");
    default:
        return fail(SLUICE_EINVAL, msg, msglen, path,
                    "value is %s, not a string, number or boolean", type_name(v));
    }

    if (n >= buflen || !buf) {
        *len = n;
        return fail(SLUICE_ERANGE, msg, msglen, path,
                    "key of %zu bytes does not fit in a buffer of %zu bytes", n, buflen);
    }
    memcpy(buf, src, n);
    buf[n] = '\0';
    *len = n;
    return 0;
}

int dotpath_extract(const json_t *input, const char *path, char *buf, size_t buflen, size_t *len)
{
    return dotpath_extract_msg(input, path, buf, buflen, len, NULL, 0);
}

int dotpath_number_msg(const json_t *input, const char *path, int64_t *out, char *msg,
                       size_t msglen)
{
    const json_t *v = NULL;
    int rc;

    clear_msg(msg, msglen);
    if (!out) {
        msgf(msg, msglen, "key path: no out-parameter");
        return SLUICE_EINVAL;
    }
    *out = 0;
    rc = lookup(input, path, &v, msg, msglen);
    if (rc)
        return rc;

    if (json_is_integer(v)) {
        *out = (int64_t)json_integer_value(v);
        return 0;
    }
    if (json_is_real(v)) {
        char text[NUMBER_TEXT_MAX];
        double d = json_real_value(v);
        int64_t i;

        /* -2^63 is exact as a double; 2^63 is the first double above INT64_MAX. */
        if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0)) {
            format_real(d, text);
            return fail(SLUICE_ERANGE, msg, msglen, path, "value %s is out of the int64 range",
                        text);
        }
        i = (int64_t)d;
        if ((double)i != d) {
            format_real(d, text);
            return fail(SLUICE_EINVAL, msg, msglen, path, "value %s is not a whole number", text);
        }
        *out = i;
        return 0;
    }
    return fail(SLUICE_EINVAL, msg, msglen, path, "value is %s, not a number", type_name(v));
}

int dotpath_number(const json_t *input, const char *path, int64_t *out)
{
    return dotpath_number_msg(input, path, out, NULL, 0);
}
