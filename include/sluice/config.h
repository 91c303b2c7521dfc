/* SPDX-License-Identifier: MIT */
/*
 * The configuration file: one YAML file that declares the engine's settings, the named limits
 * and the task types (docs/configuration.md is the reference of its format).
 *
 *   enabled: true                # optional; false: every limit passes (still counting)
 *   engine:                      # optional; every key has a default
 *     max_parked: 50000
 *   store: redis://10.0.0.5:6379 # optional; `sluice serve` only (sluice_store_config)
 *   limits:
 *     stripe:
 *       rate: 100/1s
 *       key: input.tenant_id
 *   types:
 *     charge:
 *       limits: [stripe]
 *
 * Loading is strict: an unknown key, a value of the wrong type, a type naming a limit that does
 * not exist or a name given twice is an error, never ignored. An error is reported as one line
 * naming the file, the line and column (both from 1), the dotted path of the setting and what was
 * expected, e.g.
 *   examples/sluice.yaml:12:9: limits.stripe.burst: expected a positive integer, got "ten"
 * and the first error ends the load.
 *
 * sluice_config_parse() is pure: it reads a buffer and allocates (through the replaceable
 * allocator; libyaml's own working memory excepted), nothing else. sluice_config_load() reads one
 * file and parses it; that read is the only I/O here.
 */
#ifndef SLUICE_CONFIG_H
#define SLUICE_CONFIG_H

#include <stddef.h>

#include "sluice/engine.h"
#include "sluice/policy.h"

#include "sluice/export.h"

#ifdef __cplusplus
extern "C" {
#endif
SLUICE_API_BEGIN

/* Largest configuration file sluice_config_load() reads, in bytes. */
#define SLUICE_CONFIG_MAX_BYTES ((size_t)16 << 20)

/* Deepest nesting of mappings and lists a configuration may have (a real one needs about 8).
 * libyaml's scanner costs O(depth) a token inside flow collections: a 200 KB file of 100k
 * nested brackets took 35 s to load; past this depth the file is refused before it is loaded. */
#define SLUICE_CONFIG_MAX_DEPTH 64

/* store.failure: what a decision does while the shared store cannot be reached. */
typedef enum sluice_store_failure {
    SLUICE_STORE_FAILURE_UNSET = 0, /* not given: the server's default (closed) */
    SLUICE_STORE_FAILURE_CLOSED,    /* nothing is granted: the command answers an error */
    SLUICE_STORE_FAILURE_OPEN       /* granted, and counted as granted without the store */
} sluice_store_failure;

/* The store: section, read by `sluice serve` only (the library keeps no state outside the
 * process). Every field keeps its "not given" value when the section or the key is absent, so
 * that command-line flags can take precedence over the file.
 *
 *   store: redis://127.0.0.1:6379/0      # shorthand for store: {url: ...}
 *   store:
 *     url: redis://10.0.0.5:6379
 *     failure: open                       # closed (default) or open
 *     timeout: 250ms                      # how long a decision waits for the store (1s)
 *     replicas: 1                         # task writes answered once WAIT saw 1 replica (0)
 *     replicas_timeout: 100ms             # WAIT's timeout (half of timeout)
 *     connections: 2                      # PostgreSQL: connections per node (1) */
typedef struct sluice_store_config {
    char *url;                    /* checked redis://HOST[:PORT][/DB]; NULL when not given */
    sluice_store_failure failure; /* SLUICE_STORE_FAILURE_UNSET when not given */
    int64_t timeout_ns;           /* 0 when not given */
    int64_t replicas;             /* 0 when not given (or 0): no WAIT */
    int64_t replicas_timeout_ns;  /* 0 when not given */
    int64_t connections;          /* PostgreSQL: 0 when not given, else 1..64 */
} sluice_store_config;

/* A loaded configuration. Everything in it is owned by it; free with sluice_config_clear(). */
typedef struct sluice_config {
    sluice_engine_policy engine; /* the engine: section (defaults for keys not given) */
    sluice_store_config store;   /* the store: section (zeroed when absent) */
    sluice_limit_policy *limits; /* the limits: section, in file order; nlimits entries */
    size_t nlimits;
    sluice_type_policy *types; /* the types: section, in file order; ntypes entries */
    size_t ntypes;
    int disabled;      /* `enabled: false` at the top: every limit lets everything through while
                        * still counting (sluice_engine_set_enabled); 0, the default, enforces */
    size_t maxmemory;  /* `maxmemory:` at the top: the server's memory budget in bytes (an
                        * integer, or a size such as 512mb or 2gb; 0 = no limit) */
    int has_maxmemory; /* 1 when the file sets maxmemory (the command line's --maxmemory wins) */
    char *path;        /* the file name used in messages; NULL when parsed without one */
    void *index;       /* private: the names' index of sluice_config_find_*; NULL when not built */
} sluice_config;

/* Reads and parses the file at path into *out (see sluice_config_parse).
 * *out is zeroed first and filled only on success. msg (may be NULL when msglen is 0) receives
 * the one-line error, or "" on success; it is always NUL-terminated when msglen > 0.
 * Returns 0; SLUICE_ENOTFOUND when the file does not exist; SLUICE_EINVAL when it cannot be
 * read, is larger than SLUICE_CONFIG_MAX_BYTES, or its content is invalid; SLUICE_EPARSE for a
 * YAML syntax error; SLUICE_ENOMEM. */
int sluice_config_load(const char *path, sluice_config *out, char *msg, size_t msglen);

/* Parses len bytes of YAML at text into *out. `name` (may be NULL) is the file name shown in
 * messages and copied to out->path; without one messages say "<config>".
 * *out is zeroed first and filled only on success; after a failure nothing is left allocated.
 * Returns 0, SLUICE_EPARSE (YAML syntax), SLUICE_EINVAL (anything else wrong: the message says
 * what), or SLUICE_ENOMEM. Every limit and type in a successful result passes
 * sluice_limit_policy_validate() / sluice_type_policy_validate(), and every limit a type names
 * is declared. */
int sluice_config_parse(const char *text, size_t len, const char *name, sluice_config *out,
                        char *msg, size_t msglen);

/* Most top-level keys sluice_config_parse_ignoring() can be told to ignore. */
#define SLUICE_CONFIG_MAX_IGNORED 8

/* sluice_config_parse() for a file that also holds sections of the caller's own (the `scenario:`
 * section of `sluice simulate`): the top-level keys named in `ignored` (a NULL-terminated list of
 * at most SLUICE_CONFIG_MAX_IGNORED names; NULL for none) are accepted and not read. */
int sluice_config_parse_ignoring(const char *text, size_t len, const char *name,
                                 const char *const *ignored, sluice_config *out, char *msg,
                                 size_t msglen);

/* Frees everything a configuration owns and zeroes it. Accepts NULL and a zeroed config. */
void sluice_config_clear(sluice_config *c);

/* Returns the limit or type of that name, or NULL. The pointer is valid until c is cleared.
 * O(1) on a parsed configuration (a CONFIG RELOAD looks every old limit up in the new one). */
const sluice_limit_policy *sluice_config_find_limit(const sluice_config *c, const char *name);
const sluice_type_policy *sluice_config_find_type(const sluice_config *c, const char *name);

/* Installs the limits, then the types, of c into the engine e (sluice_engine_set_limit,
 * sluice_engine_set_type, at now_ns), replacing any of the same name, and applies the global
 * switch (sluice_engine_set_enabled(e, !c->disabled, now_ns)). c->engine is not applied:
 * pass it to sluice_engine_new(). Not atomic: when a call fails, the limits and types installed
 * before it stay. Returns 0 or the engine's error, with msg naming the file, line and the limit or
 * type, e.g. `sluice.yaml:7: limit "stripe": out of memory`. */
int sluice_config_apply(const sluice_config *c, sluice_engine *e, int64_t now_ns, char *msg,
                        size_t msglen);

SLUICE_API_END

#ifdef __cplusplus
}
#endif
#endif
