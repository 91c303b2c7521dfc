/* SPDX-License-Identifier: MIT */
/*
 * Key templates (see keytpl.h for the syntax). One scanner walks a template piece by piece (a run
 * of literal text, an escaped brace, or a field), and both the check and the extraction are built
 * on it, so they cannot disagree about what a template means. Extraction copies each field's path
 * into a bounded stack buffer, since dot paths are read NUL-terminated, and allocates nothing.
 */
#include "policy/keytpl.h"

#include <string.h>

#include "base/quote.h"
#include "policy/dotpath.h"
#include "sluice/error.h"

#define QUOTE_MAX 128 /* bytes of a template quoted in a message */

/* One piece of a template. */
typedef struct piece {
    const char *text; /* literal text, or the field's path */
    size_t len;
    int field; /* 1: text is a field's path */
} piece;

static int quote_len(size_t n)
{
    return (int)(n > QUOTE_MAX ? QUOTE_MAX : n);
}

int keytpl_is_template(const char *s)
{
    return s && (strchr(s, '{') || strchr(s, '}'));
}

static int path_byte(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
}

/* Reads the piece at s[*pos]. Returns 1 with *pc filled, 0 at the end, or SLUICE_EINVAL with the
 * reason in msg and *at the offset of the fault. */
static int scan(const char *s, size_t *pos, piece *pc, size_t *at, char *msg, size_t msglen)
{
    size_t i = *pos, start;

    if (!s[i])
        return 0;
    if ((s[i] == '{' && s[i + 1] == '{') || (s[i] == '}' && s[i + 1] == '}')) {
        pc->text = s + i;
        pc->len = 1;
        pc->field = 0;
        *pos = i + 2;
        return 1;
    }
    if (s[i] == '}') {
        *at = i;
        msgf(msg, msglen,
             "key template \"%.*s\": '}' at offset %zu closes no field (write }} for "
             "a literal brace)",
             quote_len(strlen(s)), s, i);
        return SLUICE_EINVAL;
    }
    if (s[i] == '{') {
        start = ++i;
        while (s[i] && s[i] != '}') {
            if (s[i] == '{') {
                *at = i;
                msgf(msg, msglen,
                     "key template \"%.*s\": '{' at offset %zu inside a field "
                     "(fields do not nest)",
                     quote_len(strlen(s)), s, i);
                return SLUICE_EINVAL;
            }
            if (!path_byte((unsigned char)s[i])) {
                *at = i;
                msgf(msg, msglen,
                     "key template \"%.*s\": unknown syntax '%c' at offset %zu in a "
                     "field (a field is a dot path such as {input.user})",
                     quote_len(strlen(s)), s, s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?', i);
                return SLUICE_EINVAL;
            }
            i++;
        }
        if (!s[i]) {
            *at = start - 1;
            msgf(msg, msglen, "key template \"%.*s\": the '{' at offset %zu is never closed",
                 quote_len(strlen(s)), s, start - 1);
            return SLUICE_EINVAL;
        }
        if (i == start) {
            *at = start - 1;
            msgf(msg, msglen, "key template \"%.*s\": empty field {} at offset %zu",
                 quote_len(strlen(s)), s, start - 1);
            return SLUICE_EINVAL;
        }
        if (i - start > KEYTPL_PATH_MAX) {
            *at = start;
            msgf(msg, msglen,
                 "key template \"%.*s\": the field at offset %zu is longer than %d "
                 "bytes",
                 quote_len(strlen(s)), s, start, KEYTPL_PATH_MAX);
            return SLUICE_EINVAL;
        }
        pc->text = s + start;
        pc->len = i - start;
        pc->field = 1;
        *pos = i + 1;
        return 1;
    }
    for (start = i; s[i] && s[i] != '{' && s[i] != '}'; i++) {
        unsigned char c = (unsigned char)s[i];

        if (c == '$' && s[i + 1] == '{') {
            *at = i;
            msgf(msg, msglen,
                 "key template \"%.*s\": unknown syntax \"${\" at offset %zu: write "
                 "{input.field}, without the $",
                 quote_len(strlen(s)), s, i);
            return SLUICE_EINVAL;
        }
        /* Every limit has a spec text, where a comma ends the option and a control byte is
         * refused (as for dot paths, dotpath.c). */
        if (c == ',' || c < 0x20 || c == 0x7f) {
            *at = i;
            msgf(msg, msglen, "key template \"%.*s\": %s at offset %zu", quote_len(strlen(s)), s,
                 c == ',' ? "comma" : "control byte", i);
            return SLUICE_EINVAL;
        }
    }
    pc->text = s + start;
    pc->len = i - start;
    pc->field = 0;
    *pos = i;
    return 1;
}

/* Copies a field's path into buf (KEYTPL_PATH_MAX + 1 bytes); scan() bounded its length. */
static const char *field_path(const piece *pc, char *buf)
{
    memcpy(buf, pc->text, pc->len);
    buf[pc->len] = '\0';
    return buf;
}

int keytpl_next_field(const char *s, size_t *pos, const char **path, size_t *len)
{
    size_t where;
    piece pc;

    while (scan(s, pos, &pc, &where, NULL, 0) == 1) {
        if (pc.field) {
            *path = pc.text;
            *len = pc.len;
            return 1;
        }
    }
    return 0;
}

int keytpl_validate(const char *s, size_t *at, char *msg, size_t msglen)
{
    char path[KEYTPL_PATH_MAX + 1], why[200];
    size_t pos = 0, where = 0, nfields = 0, fpos;
    piece pc;
    int rc;

    if (at)
        *at = 0;
    if (!keytpl_is_template(s))
        return dotpath_validate(s, msg, msglen);
    if (msg && msglen)
        msg[0] = '\0';
    for (;;) {
        fpos = pos;
        rc = scan(s, &pos, &pc, &where, msg, msglen);
        if (rc == 0)
            break;
        if (rc < 0) {
            if (at)
                *at = where;
            return rc;
        }
        if (!pc.field)
            continue;
        if (++nfields > KEYTPL_FIELDS_MAX) {
            if (at)
                *at = fpos;
            msgf(msg, msglen, "key template \"%.*s\": more than %d fields", quote_len(strlen(s)), s,
                 KEYTPL_FIELDS_MAX);
            return SLUICE_EINVAL;
        }
        if (dotpath_validate(field_path(&pc, path), why, sizeof why) != 0) {
            if (at)
                *at = fpos + 1;
            msgf(msg, msglen, "key template \"%.*s\": %s", quote_len(strlen(s)), s, why);
            return SLUICE_EINVAL;
        }
    }
    if (nfields == 0) {
        msgf(msg, msglen, "key template \"%.*s\": has no field such as {input.user}",
             quote_len(strlen(s)), s);
        return SLUICE_EINVAL;
    }
    return SLUICE_OK;
}

int keytpl_extract_msg(const json_t *input, const char *s, char *buf, size_t buflen, size_t *len,
                       int *empty, char *msg, size_t msglen)
{
    char path[KEYTPL_PATH_MAX + 1];
    size_t pos = 0, out = 0, where, n;
    piece pc;
    int rc;

    *empty = 0;
    if (!keytpl_is_template(s)) {
        rc = dotpath_extract_msg(input, s, buf, buflen, len, msg, msglen);
        if (rc == SLUICE_OK)
            *empty = *len == 0;
        return rc;
    }
    *len = 0;
    rc = keytpl_validate(s, NULL, msg, msglen);
    if (rc != SLUICE_OK)
        return rc;
    /* `out` counts every byte of the key, including those that did not fit. */
    while (scan(s, &pos, &pc, &where, NULL, 0) == 1) {
        if (!pc.field) {
            if (out + pc.len < buflen)
                memcpy(buf + out, pc.text, pc.len);
            out += pc.len;
            continue;
        }
        if (out < buflen)
            rc = dotpath_extract_msg(input, field_path(&pc, path), buf + out, buflen - out, &n, msg,
                                     msglen);
        else
            rc = dotpath_extract_msg(input, field_path(&pc, path), NULL, 0, &n, msg, msglen);
        if (rc != SLUICE_OK && rc != SLUICE_ERANGE)
            return rc;
        if (n == 0)
            *empty = 1;
        out += n;
    }
    *len = out;
    if (out >= buflen)
        return SLUICE_ERANGE;
    buf[out] = '\0';
    if (msg && msglen)
        msg[0] = '\0';
    return SLUICE_OK;
}
