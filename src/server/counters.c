/* SPDX-License-Identifier: MIT */
/*
 * Server-wide counters (see counters.h). An error reply is recognised by its first byte ('-')
 * and its code word, so the counting needs no help from the command modules: dispatch looks at
 * what a command appended to the client's reply buffer.
 */
#include "server/counters.h"

#include <string.h>

/* Known codes, then "other". Keep in step with commands.h and docs/commands.md. */
static const char *const error_names[COUNTERS_ERROR_CODES] = {
    "ERR",         "WRONGARGS", "NOAUTH",    "WRONGPASS", "NOPROTO", "NOLIMIT", "BUSY",
    "RATELIMITED", "NOLEASE",   "INUSE",     "DENIED",    "NOMEM",   "CONFIG",  "NOTASK",
    "EXISTS",      "IOERR",     "STOREDOWN", "OOM",       "other",
};

/* Commit latencies: an fsync on fast storage takes ~100 us, a slow disk tens of ms. */
static const double commit_bounds[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                       0.025,  0.05,    0.1,    0.25,  0.5,    1,     2.5};

void counters_init(server_counters *c)
{
    memset(c, 0, sizeof(*c));
    prom_hist_init(&c->store_commit, commit_bounds,
                   sizeof(commit_bounds) / sizeof(commit_bounds[0]));
}

void counters_reply(server_counters *c, const char *reply, size_t len)
{
    size_t n = 1;

    if (len < 2 || reply[0] != '-')
        return;
    while (n < len && reply[n] != ' ' && reply[n] != '\r')
        n++;
    for (size_t i = 0; i + 1 < COUNTERS_ERROR_CODES; i++) {
        size_t k = strlen(error_names[i]);

        if (k == n - 1 && memcmp(reply + 1, error_names[i], k) == 0) {
            c->errors[i]++;
            return;
        }
    }
    c->errors[COUNTERS_ERROR_CODES - 1]++;
}

const char *counters_error_name(size_t i)
{
    return i < COUNTERS_ERROR_CODES ? error_names[i] : NULL;
}
