/* SPDX-License-Identifier: MIT */
/*
 * Picking: a jansson tree of a task's input holding only what a set of dot paths reach, built
 * from a payload jscan_validate (base/jscan.h) accepted, so that a task type's keys, tiers and
 * units are read without parsing the whole payload.
 *
 * The tree is the full parse pruned: every object on a path keeps only the members the paths
 * name (the last of duplicates, as jansson keeps), every array on a path keeps its length with
 * null standing for the elements no path indexes, and the value where a path ends is parsed in
 * full by jansson. Every dot path among those given therefore reads from it exactly what it reads
 * from the full parse: the same value, or the same failure with the same words (dotpath.h), since
 * those name only members, indices, array lengths and the kinds of values on the path. Other
 * paths may not.
 */
#ifndef SLUICE_POLICY_JPICK_H
#define SLUICE_POLICY_JPICK_H

#include <stddef.h>

#include <jansson.h>

/* One dot path (dotpath.h; `input.` optional), not necessarily NUL-terminated. */
typedef struct jpick_path {
    const char *text; /* the path's bytes */
    size_t len;       /* their number */
} jpick_path;

/* Builds in *out (the caller decrefs it; NULL on failure) the tree of doc[0..len), a document
 * jscan_validate accepted, pruned to paths[0..npaths). Returns 0; SLUICE_ENOMEM; or
 * SLUICE_EINVAL should jansson refuse a piece of the document (it never should: the caller may
 * then parse the whole payload). */
int jpick_parse(const char *doc, size_t len, const jpick_path *paths, size_t npaths, json_t **out);

#endif
