/* SPDX-License-Identifier: MIT */
/*
 * Walking a libyaml document tree with precise error messages.
 *
 * The configuration loader reads a whole YAML document into libyaml's node tree, then walks it
 * with these helpers. Each helper checks one node against what the schema expects there (a
 * mapping with known keys, a positive integer, a duration, one word of a list) and, when it does
 * not fit, writes the one error of the load:
 *
 *   FILE:LINE:COLUMN: PATH: expected WHAT, got "TEXT"
 *
 * LINE and COLUMN count from 1 and point at the offending node (or key); PATH is the dotted path
 * of the setting being read (`limits.stripe.burst`, `types.charge.limits[0]`), kept in the walker
 * as it descends. Quoted text has control bytes escaped and is cut short, so a message is always
 * one line of bounded length.
 *
 * Scalars are typed the YAML 1.2 way, strictly: integers and booleans must be plain (unquoted)
 * scalars; `true` and `false` are the only booleans; integers are decimal, with an optional sign
 * and `_` allowed between digits (100_000); `~`, `null` or nothing at all is null.
 *
 * Every helper returns 0 or the error code it reported (the message is then written); callers
 * stop at the first error. Nothing here allocates.
 */
#ifndef SLUICE_CONFIG_YAML_WALK_H
#define SLUICE_CONFIG_YAML_WALK_H

#include <stddef.h>
#include <stdint.h>

#include <yaml.h>
#include "base/attr.h"
#include "base/quote.h"

/* The state of one walk. */
typedef struct ywalk {
    yaml_document_t *doc; /* the document walked; borrowed */
    const char *file;     /* the name shown in messages */
    char *msg;            /* where the error goes (may be NULL when msglen is 0) */
    size_t msglen;
    char path[512]; /* the dotted path of the node being read, "" at the root */
    size_t pathlen;
} ywalk;

/* Starts a walk of doc. */
void yw_init(ywalk *w, yaml_document_t *doc, const char *file, char *msg, size_t msglen);

/* Appends ".key" (or "key" at the root) to the path; returns the length to restore with
 * yw_pop(). Control bytes are escaped; a path too long for the buffer is cut short. */
size_t yw_push(ywalk *w, const char *key, size_t keylen);
/* Appends "[index]" (index from 0). */
size_t yw_push_index(ywalk *w, size_t index);
void yw_pop(ywalk *w, size_t saved);

/* Writes "FILE:LINE:COL: PATH: <message>" for the node (or, with a NULL node, line 1 column 1)
 * and returns rc. */
PRINTF_ATTR(4, 5) int yw_fail(ywalk *w, const yaml_node_t *at, int rc, const char *fmt, ...);

/* The same at a mark of libyaml (0-based line and column). */
PRINTF_ATTR(4, 5) int yw_fail_mark(ywalk *w, yaml_mark_t mark, int rc, const char *fmt, ...);

/* The 1-based line of a node. */
int yw_line(const yaml_node_t *node);

/* A short description of a node for "got ..." in messages: the quoted text of a scalar (with
 * " (a quoted string)" when it is quoted and looks like a number or boolean), "nothing" for
 * null, "a mapping" or "a list" (or "an empty ..."). */
typedef struct yw_got {
    char s[200];
} yw_got;
const char *yw_describe(const yaml_node_t *node, yw_got *g);

/* Quotes n bytes of text for a message ("..."), escaping control bytes, at most 60 shown. */
typedef quote_buf yw_quoted;
const char *yw_quote(yw_quoted *q, const char *s, size_t n);

/* A section that maps names to settings, such as `limits:` or `types:`. */
typedef struct yw_named {
    const char *what;     /* an entry in messages: "limit", "type" */
    const char *expected; /* what the section must be: "a mapping of limit names to ..." */
    /* Makes room for n (> 0) entries. Returns 0, or an error it reported with yw_fail. */
    int (*reserve)(ywalk *w, const yaml_node_t *section, size_t n, void *arg);
    /* Parses entry i, whose name (len bytes, NUL-terminated) is valid and not declared before;
     * the name is already on the path. Returns 0 or an error it reported. */
    int (*entry)(ywalk *w, size_t i, const yaml_node_t *key, const char *name, size_t len,
                 const yaml_node_t *value, void *arg);
} yw_named;

/* Walks a named section (absent or null: nothing to do): checks it is a mapping, that every
 * name is a valid name and declared once, then hands each entry to spec->entry in order.
 * Returns 0 or the first error. */
int yw_each_named(ywalk *w, const yaml_node_t *section, const yw_named *spec, void *arg);

/* Node accessors: the node of an id (NULL when there is none); whether a node is null (absent,
 * or a plain "", "~" or "null"); whether it is a scalar that is not null; a scalar's bytes (NUL
 * terminated by libyaml, but they may hold NUL bytes of their own). */
yaml_node_t *yw_node(const ywalk *w, int id);
int yw_is_null(const yaml_node_t *node);
int yw_is_scalar(const yaml_node_t *node);
const char *yw_text(const yaml_node_t *node, size_t *len);

/* Fails unless node is a mapping; `what` completes "expected ..." ("a mapping of settings"). */
int yw_expect_map(ywalk *w, const yaml_node_t *node, const char *what);

/* Checks that every key of the mapping is a scalar, appears once and is one of the n names.
 * An unknown key is reported at the key with the closest name ("did you mean") or the list of
 * names; a repeated one with the line of the first. */
int yw_check_keys(ywalk *w, const yaml_node_t *map, const char *const *names, size_t n);

/* Returns the value of key `name` in the mapping (NULL when absent); *key (may be NULL) receives
 * the key node. */
yaml_node_t *yw_get(const ywalk *w, const yaml_node_t *map, const char *name, yaml_node_t **key);

/* Reads a plain integer in [min, max]. */
int yw_int(ywalk *w, const yaml_node_t *node, int64_t min, int64_t max, int64_t *out);
/* Reads a plain true or false. */
int yw_bool(ywalk *w, const yaml_node_t *node, int *out);
/* Reads a duration ("500ms", "30s", "5m") of at least min_ns. */
int yw_duration(ywalk *w, const yaml_node_t *node, int64_t min_ns, int64_t *out);
/* Reads one of the n words; *index receives its position. */
int yw_choice(ywalk *w, const yaml_node_t *node, const char *const *words, size_t n, int *index);
/* Reads a non-null scalar without NUL bytes; `what` completes "expected ..." ("a limit name"). */
int yw_string(ywalk *w, const yaml_node_t *node, const char *what, const char **s, size_t *len);

/* Returns 1 when node is a plain scalar that reads as a YAML integer (of any size). */
int yw_looks_int(const yaml_node_t *node);

/* The same readers for the value of key `name` in a mapping: when the key is absent they return
 * 0 and leave *out as it is (holding its default); when present the key is pushed onto the path
 * for the message. */
int yw_field_int(ywalk *w, const yaml_node_t *map, const char *name, int64_t min, int64_t max,
                 int64_t *out);
int yw_field_bool(ywalk *w, const yaml_node_t *map, const char *name, int *out);
int yw_field_duration(ywalk *w, const yaml_node_t *map, const char *name, int64_t min_ns,
                      int64_t *out);
int yw_field_choice(ywalk *w, const yaml_node_t *map, const char *name, const char *const *words,
                    size_t n, int *index);

/* Returns the one of the n names closest to the len bytes at s when it is close enough to be a
 * likely typo, else NULL. */
const char *yw_suggest(const char *s, size_t len, const char *const *names, size_t n);

/* Returns how many edits turn the len bytes at s into name (ignoring case), or SIZE_MAX when
 * they are too far apart to be a likely typo. yw_suggest() picks the smallest. */
size_t yw_typo_distance(const char *s, size_t len, const char *name);

/* Writes "a, b or c" (the n words) into buf. */
const char *yw_join(char *buf, size_t buflen, const char *const *words, size_t n,
                    const char *last_sep);

#endif
