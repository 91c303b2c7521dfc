/* SPDX-License-Identifier: MIT */
/*
 * Installing a loaded configuration into an engine: every limit, then every type (a type may
 * only name limits the engine already has).
 *
 * This is the only part of the configuration layer that calls the engine; it lives in its own
 * file so that programs which only read and check configurations do not pull the engine in.
 */
#include <stdio.h>

#include "sluice/config.h"
#include "sluice/engine.h"
#include "sluice/error.h"

int sluice_config_apply(const sluice_config *c, sluice_engine *e, int64_t now_ns, char *msg,
                        size_t msglen)
{
    const char *file;
    char why[300];
    int rc;

    if (msg && msglen > 0)
        msg[0] = '\0';
    if (!c || !e)
        return SLUICE_EINVAL;
    file = c->path ? c->path : "<config>";
    for (size_t i = 0; i < c->nlimits; i++) {
        why[0] = '\0';
        rc = sluice_engine_set_limit(e, &c->limits[i], now_ns, why, sizeof(why));
        if (rc != 0) {
            if (msg && msglen > 0)
                snprintf(msg, msglen, "%s:%d: limit \"%s\": %s", file, c->limits[i].line,
                         c->limits[i].name, why[0] ? why : sluice_strerror(rc));
            return rc;
        }
    }
    for (size_t i = 0; i < c->ntypes; i++) {
        why[0] = '\0';
        rc = sluice_engine_set_type(e, &c->types[i], now_ns, why, sizeof(why));
        if (rc != 0) {
            if (msg && msglen > 0)
                snprintf(msg, msglen, "%s:%d: type \"%s\": %s", file, c->types[i].line,
                         c->types[i].name, why[0] ? why : sluice_strerror(rc));
            return rc;
        }
    }
    sluice_engine_set_enabled(e, !c->disabled, now_ns);
    return 0;
}
