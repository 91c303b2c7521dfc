/* SPDX-License-Identifier: MIT */
/*
 * Dot paths: reading a rate-limit key (or a number that picks a tier) out of a task's JSON input.
 *
 * A dot path is a sequence of non-empty segments separated by dots, e.g. `tenant_id`,
 * `config.provider.name` or `items.0.id`. A leading `input.` is dropped, so `input.tenant_id` and
 * `tenant_id` are the same path (a top-level member really called "input" is reached as
 * `input.input...`). A segment names an object member (byte for byte; there is no escape, so a
 * member whose name contains a dot cannot be reached) or, on an array, a decimal index without
 * leading zeros.
 *
 * Results are canonical, so the same value always yields the same key: strings as they are (any
 * bytes, embedded NULs included), integers in decimal, booleans as `true` / `false`, reals as the
 * shortest `%.{15,16,17}g` text that reads back to the same double (a '.' decimal point whatever
 * the locale; -0.0 gives "0", and an integral real such as 5.0 gives "5", the key of the integer
 * 5: the same number is the same key).
 *
 * Errors: a path that is not there in this input (a missing member, an index past the end, a
 * NULL input) is SLUICE_ENOTFOUND; a path that is there but holds the wrong kind of value (null,
 * an object or array where a key is wanted, a path that goes through a scalar, a name used on an
 * array) is SLUICE_EINVAL; a malformed path is SLUICE_EINVAL. The `_msg` variants also write a
 * one-line reason naming the path, e.g. `key path "input.tenant_id": value is null`.
 *
 * Everything here is pure and allocates nothing; json values are only borrowed for the call.
 */
#ifndef SLUICE_POLICY_DOTPATH_H
#define SLUICE_POLICY_DOTPATH_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

/* The optional prefix of a dot path, dropped before the path is followed. */
#define DOTPATH_INPUT_PREFIX "input."

/* Checks that path is a valid dot path: not NULL, not empty (also after dropping `input.`), no
 * empty segment (so no leading, trailing or doubled dot), no comma and no control byte (a limit
 * spec could not carry them: see policy_spec.h). Returns 0 or SLUICE_EINVAL; msg (may be
 * NULL) receives the reason, truncated to msglen bytes and NUL-terminated, or "" on success. */
int dotpath_validate(const char *path, char *msg, size_t msglen);

/* Extracts the key at path from input into buf: *len bytes followed by a NUL, so the longest
 * key that fits is buflen - 1 bytes.
 *
 * Returns 0; SLUICE_ENOTFOUND or SLUICE_EINVAL (see the file comment); SLUICE_ERANGE when the key
 * does not fit, in which case *len is the key's length (retry with a buffer of *len + 1 bytes)
 * and buf is untouched. On every other failure *len is 0 and buf untouched. input may be NULL
 * (no input: SLUICE_ENOTFOUND); len must not be NULL; buf may be NULL when buflen is 0. */
int dotpath_extract(const json_t *input, const char *path, char *buf, size_t buflen, size_t *len);

/* dotpath_extract(), also writing a one-line reason for any failure into msg (may be NULL),
 * truncated to msglen bytes; "" on success. */
int dotpath_extract_msg(const json_t *input, const char *path, char *buf, size_t buflen,
                        size_t *len, char *msg, size_t msglen);

/* Reads segment seg[0..n) of a path as an array index: decimal digits, no leading zero (but
 * "0"). Returns 1 and *index, or 0 when seg is not an index. An index too large for size_t is
 * SIZE_MAX (it is past the end of any array anyway). */
int dotpath_index(const char *seg, size_t n, size_t *index);

/* Reads the number at path into *out (set to 0 first, filled only on success): a JSON integer,
 * or a real with no fractional part that fits in int64.
 *
 * Returns 0; SLUICE_ENOTFOUND when the path is not there; SLUICE_EINVAL when it holds anything
 * else (a string, even a numeric one, a boolean, null, an object, an array, a real with a
 * fraction) or the path is malformed; SLUICE_ERANGE for an integral real outside int64. */
int dotpath_number(const json_t *input, const char *path, int64_t *out);

/* dotpath_number(), also writing a one-line reason for any failure into msg (may be NULL). */
int dotpath_number_msg(const json_t *input, const char *path, int64_t *out, char *msg,
                       size_t msglen);

#endif
