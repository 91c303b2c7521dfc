/* SPDX-License-Identifier: MIT */
/*
 * A validating JSON scanner: answers whether a task payload is JSON, and walks a valid one by
 * byte offsets, without building a tree or allocating.
 *
 * Every TASK.ADD must refuse a payload that is not JSON, and most task types read nothing from
 * it; parsing it into a jansson tree only to throw the tree away dominated the submit of large
 * payloads. jscan_validate() makes the same decision in one pass over the bytes. The documents
 * it accepts are exactly RFC 8259 texts (any value at the top, as JSON_DECODE_ANY) within the
 * limits jansson applies with JSON_DECODE_ANY | JSON_ALLOW_NUL:
 *   - strings are valid UTF-8 (no overlong form, no encoded surrogate, nothing past U+10FFFF),
 *     hold no control byte, and their escapes are the RFC's; a \u escape of a surrogate is
 *     accepted only as a high-low pair; \u0000 is accepted in values, refused in member names;
 *   - integers (no fraction, no exponent) fit in int64; reals do not overflow a double;
 *   - at most JSCAN_MAX_DEPTH nested values (a scalar inside 2047 arrays is the deepest);
 *   - whitespace is space, tab, LF and CR; nothing but whitespace after the value.
 *
 * Invariant (tested against jansson on a corpus, tests/unit/test_jscan.c): what jscan_validate
 * accepts, jansson accepts; what it refuses as invalid, jansson refuses. Where matching jansson
 * would take more than a scan (a real within a factor of 10 of DBL_MAX, whose overflow depends
 * on rounding; a raw NUL byte, some of which jansson skips) it answers JSCAN_UNSURE, and the
 * caller asks jansson. Callers ask jansson for the error message too, so replies keep their
 * words: the scanner only says yes or no.
 *
 * The walking functions (jscan_value_end, jscan_iter_*) assume a document jscan_validate
 * accepted, and check nothing.
 */
#ifndef SLUICE_BASE_JSCAN_H
#define SLUICE_BASE_JSCAN_H

#include <stddef.h>

/* Deepest nesting accepted: jansson's JSON_PARSER_MAX_DEPTH (2048 since jansson 2.12). */
#define JSCAN_MAX_DEPTH 2048

/* jscan_validate: the document is not one the scanner can judge alone (see above). */
#define JSCAN_UNSURE 1

/* Checks that doc[0..len) is one JSON text. Returns 0 when it is; SLUICE_EINVAL when it is not
 * (*at, when at is not NULL, receives the offset of the fault); JSCAN_UNSURE when only a full
 * parse can tell (*at as for SLUICE_EINVAL). doc may hold NUL bytes and needs no terminator. */
int jscan_validate(const char *doc, size_t len, size_t *at);

/* The offset just past the value starting at doc[at] (its first byte, not whitespace). */
size_t jscan_value_end(const char *doc, size_t len, size_t at);

/* The offset of the first byte at or after doc[at] that is not whitespace (len when none). */
size_t jscan_skip_ws(const char *doc, size_t len, size_t at);

/* A walk over the members of an object or the elements of an array. */
typedef struct jscan_iter {
    const char *doc; /* the validated document */
    size_t len;      /* its length */
    size_t at;       /* where the next member or element is looked for */
    int object;      /* 1: an object (members have names), 0: an array */
} jscan_iter;

/* Starts a walk over the container whose '{' or '[' is at doc[at]. */
void jscan_iter_open(jscan_iter *it, const char *doc, size_t len, size_t at);

/* Steps to the next member or element. Returns 1 with *value the offset of its value (its first
 * byte) and, for an object, *name / *namelen the member name as written: the span from its
 * opening to its closing quote, quotes included, escapes undecoded. Returns 0 at the end. name
 * and namelen may be NULL for an array. */
int jscan_iter_next(jscan_iter *it, size_t *name, size_t *namelen, size_t *value);

#endif
