/* SPDX-License-Identifier: MIT */
/*
 * Policy specs: the one-line text form of a named limit's policy, as LIMIT.SET reads it and
 * LIMIT.GET writes it back.
 *
 * A policy spec is a limit spec (include/sluice/spec.h) whose option list may also hold the
 * options of the policy around the limit, each at most once, anywhere after the kind:
 *
 *   policy-option := "key=" ( "none" | "explicit" | DOTPATH        where the key comes from
 *                            | TEMPLATE )                           (e.g. {input.user}:{input.tag})
 *                  | "missing_key=" ( "global" | "skip" | "error" ) a task without the key
 *                  | "overflow=" ( "wait" | "reject" )              a denied task
 *                  | "units=" ( "task" | N | DOTPATH )              what one task costs
 *                  | "mode=" ( "enforce" | "shadow" )             shadow: a dry run
 *                  | "override." KEY "=" LIMITSPEC                 key KEY's own limit (repeats,
 *                                                                  once per key; LIMITSPEC
 *                                                                  with ';' for ',')
 *
 *   e.g.  rate=100/1s,burst=20,key=input.tenant_id,missing_key=global,overflow=reject
 *
 * key=none (the default) puts every request in one global bucket; key=explicit takes the key the
 * producer gives; a dot path (docs: src/policy/dotpath.h; `input.` is optional) reads it from the
 * task's JSON input, and a template (any text holding a brace: src/policy/keytpl.h) builds it from
 * several fields of it. missing_key applies to the last two only (default error). units=task (the
 * default) charges the task's own units, N a fixed cost, a dot path a number in the input.
 * mode=shadow evaluates, charges and counts the limit as if enforced but never denies (policy.h,
 * sluice_limit_mode); mode=enforce is the default. The
 * words none, explicit and task are keywords, never paths. Policies with tiers have no one-line
 * form (they come from the configuration file).
 *
 * Pure: no I/O and no global state; the only allocation is of the owned path strings of the
 * policy filled in, through the replaceable allocator.
 */
#ifndef SLUICE_POLICY_SPEC_H
#define SLUICE_POLICY_SPEC_H

#include <stddef.h>

#include "sluice/policy.h"

#include "sluice/export.h"

#ifdef __cplusplus
extern "C" {
#endif
SLUICE_API_BEGIN

/* A buffer of this many bytes always holds the text written by sluice_spec_format_policy()
 * for paths of up to 256 bytes and up to SLUICE_MAX_KEY_OVERRIDES overrides. */
#define SLUICE_POLICY_SPEC_MAX_LEN 8192

/* Parses the NUL-terminated policy spec text into *out, which it first sets with
 * sluice_limit_policy_init() and fills only on success; out->name stays NULL (the caller names
 * the limit). On success the key and units paths in *out are owned by it (free with
 * sluice_limit_policy_clear) and every field but the name passes sluice_limit_policy_validate().
 * msg (may be NULL when msglen is 0) receives a one-line reason on failure and "" on success.
 * Returns 0; SLUICE_EPARSE for text that does not follow the grammar (a policy option given
 * twice or with an unknown value, missing_key without a key); the codes of
 * sluice_spec_parse_limit() for the limit part; SLUICE_EINVAL for a NULL argument or an invalid
 * path or units that exceed the limit's capacity; SLUICE_ENOMEM. After a failure *out holds
 * nothing to free. */
int sluice_spec_parse_policy(const char *text, sluice_limit_policy *out, char *msg, size_t msglen);

/* Writes the canonical policy spec of p into buf, NUL-terminated: the canonical limit spec of
 * p->def (sluice_spec_format_limit) followed by the policy options whose value is not the
 * default, in the order key, missing_key, overflow, units, mode, then the overrides by key. Parsing
 * the text gives back p's fields (the name aside). Returns 0; SLUICE_EINVAL for NULL arguments or a
 * tiered policy (it has no one-line form); the code of sluice_spec_format_limit() for a def that
 * does not validate; SLUICE_ERANGE when len is too small (buf then holds "" when len > 0). */
int sluice_spec_format_policy(const sluice_limit_policy *p, char *buf, size_t len);

/* Recognises the text of a mode change alone, "mode=enforce" or "mode=shadow" (LIMIT.SET name
 * mode=shadow: the limit as it is, tiered ones included, in that mode). Returns 1 and sets
 * *mode when text is exactly one of the two, else 0 (*mode unchanged). */
int sluice_spec_parse_mode(const char *text, sluice_limit_mode *mode);

SLUICE_API_END

#ifdef __cplusplus
}
#endif
#endif
