/* SPDX-License-Identifier: MIT */
/*
 * Resolution: turning a submitted task into the links of its chain. For every limit its type
 * names, the key (none, the producer's explicit key, or a dot path into the JSON input), the
 * tier (chosen by the tier field: numbers by range, strings by equality) and the units (the
 * task's, a fixed number, or a number in the input) are decided once, at submit, so a bad input
 * fails the submit rather than a later poll.
 */
#ifndef SLUICE_ENGINE_RESOLVE_H
#define SLUICE_ENGINE_RESOLVE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "engine/engine_impl.h"
#include "engine/task.h"

/* Resolves the t->pol.nlimits links of a task of type t whose own units are `units`, with input
 * the parsed payload (NULL when none) and spec the producer's spec (its explicit key). Fills
 * out[0..*nout-1]: the links of the chain in order, without those of limits with
 * missing_key_skip whose key is missing or empty (the task skips them); their keys point into
 * the engine's scratch buffer (or the spec) and stay valid until the next resolution.
 * Returns 0; SLUICE_EINVAL with msg for a missing key (unless missing_key_global), a value of the
 * wrong kind, no matching tier or bad units; SLUICE_ENOTFOUND when a limit was removed (an
 * UNKNOWN_LIMIT event stamped now_ns is emitted); SLUICE_ENOMEM. */
int resolve_links(sluice_engine *e, const etype *t, const sluice_task_spec *spec, int64_t units,
                  const json_t *input, int64_t now_ns, link_spec *out, size_t *nout, char *msg,
                  size_t msglen);

/* Parses a spec's payload into *input (NULL when the spec has none; the caller decrefs it).
 * Returns 0, SLUICE_EINVAL with msg when it is not JSON, or SLUICE_ENOMEM (jansson allocates
 * through alloc_malloc). */
int resolve_parse_payload(const sluice_task_spec *spec, json_t **input, char *msg, size_t msglen);

/* The input of a task of type t (NULL: only check the payload) from a spec's payload, as much of
 * it as resolving the task reads: *input is NULL when the spec has no payload or t reads none of
 * it, else a tree holding at least every value t's paths reach (policy/jpick.h; the caller
 * decrefs it). The payload is checked whole either way, by base/jscan.h, and by jansson when the
 * scanner refuses it, so the verdict and the reply's words are those of resolve_parse_payload.
 * Returns 0, SLUICE_EINVAL with msg when the payload is not JSON, or SLUICE_ENOMEM with msg. */
int resolve_input(const etype *t, const sluice_task_spec *spec, json_t **input, char *msg,
                  size_t msglen);

/* Reads a spec's payload (resolve_input) and resolves the links of a task of type t from it, as
 * resolve_links (same results, keys in the same scratch). */
int resolve_spec(sluice_engine *e, const etype *t, const sluice_task_spec *spec, int64_t units,
                 int64_t now_ns, link_spec *out, size_t *nout, char *msg, size_t msglen);

/* Returns 1 when resolving links of type t reads the input (a key, tier or units path). */
int resolve_needs_input(const etype *t);

#endif
