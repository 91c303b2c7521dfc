/* SPDX-License-Identifier: MIT */
/*
 * Key templates: a limit's key built from several fields of a task's JSON input, e.g.
 * `{input.user}:{input.workflow_tag}` (seed 004's per-user, per-workflow breaker; seed 002's
 * `${workflow.input.correlationId}` keys).
 *
 * A limit's key text (sluice_limit_policy.key_path) is a template when it holds a brace, and a
 * plain dot path (dotpath.h) otherwise, so every place that stores, copies, compares or prints
 * the key text carries templates unchanged. Syntax:
 *
 *   - `{PATH}` is a field: the canonical text of the dot path PATH in the input (dotpath.h;
 *     `input.` optional). Inside the braces only [A-Za-z0-9_.-] may appear, so that a typo or a
 *     filter (`{input.user|lower}`) is refused instead of silently naming a member.
 *   - `{{` and `}}` are a literal brace; any other byte except a comma or a control byte is
 *     literal text (a comma could not be written back as a LIMIT.SET spec).
 *   - At least one field; at most KEYTPL_FIELDS_MAX fields of at most KEYTPL_PATH_MAX bytes.
 *   - `${` is refused with a hint: it is another engine's syntax.
 *
 * The key is the template with every field replaced by its value. Missing-key rules apply when
 * any field is missing (the caller sees SLUICE_ENOTFOUND) and, for `missing_key: skip`, when any
 * field is empty (*empty is set). Everything here is pure and allocates nothing.
 */
#ifndef SLUICE_POLICY_KEYTPL_H
#define SLUICE_POLICY_KEYTPL_H

#include <stddef.h>

#include <jansson.h>

#define KEYTPL_FIELDS_MAX 16
#define KEYTPL_PATH_MAX   255

/* Returns 1 when key text s (NUL-terminated, may be NULL) is a template rather than a dot path. */
int keytpl_is_template(const char *s);

/* Checks key text s: a template when it holds a brace, a dot path otherwise. Returns 0 or
 * SLUICE_EINVAL with the reason in msg (may be NULL) and, when at is not NULL, the byte offset in
 * s where the fault is (0 when it concerns the whole text). */
int keytpl_validate(const char *s, size_t *at, char *msg, size_t msglen);

/* Steps through the fields of template s (keytpl_validate accepted it): returns 1 with *path and
 * *len the next field's dot path (pointing into s, not NUL-terminated), or 0 after the last.
 * Start with *pos = 0. */
int keytpl_next_field(const char *s, size_t *pos, const char **path, size_t *len);

/* Builds the key of key text s (template or dot path) from input into buf: *len bytes and a NUL.
 * *empty is set to 1 when a field (or the path's value) is empty, else 0.
 *
 * Returns 0; SLUICE_ENOTFOUND when a field is not in the input; SLUICE_EINVAL when a field holds
 * the wrong kind of value or s is malformed; SLUICE_ERANGE when the key does not fit, with *len
 * the key's length (retry with *len + 1 bytes; buf's content is then unspecified). The reason of
 * any failure goes to msg (may be NULL). len and empty must not be NULL; buf may be NULL when
 * buflen is 0. */
int keytpl_extract_msg(const json_t *input, const char *s, char *buf, size_t buflen, size_t *len,
                       int *empty, char *msg, size_t msglen);

#endif
