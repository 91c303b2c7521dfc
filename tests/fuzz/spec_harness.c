/* SPDX-License-Identifier: MIT */
/*
 * The limit-spec and config harnesses: see spec_harness.h.
 *
 * Round trips are checked on the formatted text, not on the structs, since one definition has
 * many spellings ("10/s" and "10/1s") but exactly one canonical text.
 */
#include "spec_harness.h"

#include <stdlib.h>
#include <string.h>

#include "sluice/config.h"
#include "sluice/engine.h"
#include "sluice/error.h"
#include "sluice/policy.h"
#include "sluice/policy_spec.h"
#include "sluice/spec.h"

#define HARNESS_MAX_TEXT 4096 /* longer inputs are cut: the grammar has nothing longer to reach */

/* A message after an error: non-empty, one line. */
static const char *check_msg(const char *msg)
{
    if (msg[0] == '\0')
        return "error without a message";
    if (strchr(msg, '\n') || strchr(msg, '\r'))
        return "error message with CR or LF";
    return NULL;
}

static const char *run_duration(const char *text)
{
    char buf[SLUICE_SPEC_DURATION_MAX_LEN], again[SLUICE_SPEC_DURATION_MAX_LEN];
    int64_t ns = -1, ns2 = -1;

    if (sluice_spec_parse_duration(text, strlen(text), &ns) != SLUICE_OK)
        return ns == 0 ? NULL : "failed duration parse left *ns set";
    if (ns < 0)
        return "negative duration parsed";
    if (sluice_spec_format_duration(ns, buf, sizeof buf) != SLUICE_OK)
        return "parsed duration does not format";
    if (sluice_spec_parse_duration(buf, strlen(buf), &ns2) != SLUICE_OK || ns2 != ns)
        return "formatted duration does not parse back to itself";
    if (sluice_spec_format_duration(ns2, again, sizeof again) != SLUICE_OK ||
        strcmp(buf, again) != 0)
        return "duration format is not a fixed point";
    return NULL;
}

static const char *run_limit(const char *text)
{
    char msg[256] = "", buf[SLUICE_SPEC_MAX_LEN], again[SLUICE_SPEC_MAX_LEN];
    sluice_limit_def def, def2;

    if (sluice_spec_parse_limit(text, &def, msg, sizeof msg) != SLUICE_OK)
        return check_msg(msg);
    if (sluice_spec_format_limit(&def, buf, sizeof buf) != SLUICE_OK)
        return "parsed limit spec does not format";
    msg[0] = '\0';
    if (sluice_spec_parse_limit(buf, &def2, msg, sizeof msg) != SLUICE_OK)
        return "formatted limit spec does not parse";
    if (sluice_spec_format_limit(&def2, again, sizeof again) != SLUICE_OK || strcmp(buf, again))
        return "limit spec format is not a fixed point";
    return NULL;
}

/* Formats p and checks the text parses back to a policy formatting the same. */
static const char *policy_round_trip(const sluice_limit_policy *p)
{
    char msg[256] = "", buf[SLUICE_POLICY_SPEC_MAX_LEN], again[SLUICE_POLICY_SPEC_MAX_LEN];
    sluice_limit_policy p2;
    const char *why = NULL;

    if (p->ntiers > 0)
        return NULL; /* tiers have no spec form */
    if (sluice_spec_format_policy(p, buf, sizeof buf) != SLUICE_OK)
        return "policy does not format";
    if (sluice_spec_parse_policy(buf, &p2, msg, sizeof msg) != SLUICE_OK)
        return "formatted policy spec does not parse";
    if (sluice_spec_format_policy(&p2, again, sizeof again) != SLUICE_OK || strcmp(buf, again))
        why = "policy spec format is not a fixed point";
    sluice_limit_policy_clear(&p2);
    return why;
}

static const char *run_policy(const char *text)
{
    char msg[256] = "";
    sluice_limit_policy p;
    const char *why;

    if (sluice_spec_parse_policy(text, &p, msg, sizeof msg) != SLUICE_OK) {
        sluice_limit_policy_clear(&p);
        return check_msg(msg);
    }
    why = policy_round_trip(&p);
    sluice_limit_policy_clear(&p);
    return why;
}

const char *spec_harness_run(const uint8_t *data, size_t size)
{
    char *text;
    const char *why;

    if (size > HARNESS_MAX_TEXT)
        size = HARNESS_MAX_TEXT;
    text = malloc(size + 1);
    if (!text)
        return "out of memory in the harness";
    memcpy(text, data, size);
    text[size] = '\0';
    why = run_duration(text);
    if (!why)
        why = run_limit(text);
    if (!why)
        why = run_policy(text);
    free(text);
    return why;
}

static const char *check_config(const sluice_config *c)
{
    for (size_t i = 0; i < c->nlimits; i++) {
        const char *why;

        if (sluice_config_find_limit(c, c->limits[i].name) != &c->limits[i])
            return "config does not find its own limit";
        why = policy_round_trip(&c->limits[i]);
        if (why)
            return why;
    }
    for (size_t i = 0; i < c->ntypes; i++)
        if (sluice_config_find_type(c, c->types[i].name) != &c->types[i])
            return "config does not find its own type";
    return NULL;
}

const char *config_harness_run(const uint8_t *data, size_t size)
{
    static const sluice_config zero;
    sluice_config c;
    sluice_engine *e = NULL;
    char msg[512] = "";
    const char *why;
    int rc;

    rc = sluice_config_parse((const char *)data, size, "fuzz.yaml", &c, msg, sizeof msg);
    if (rc != SLUICE_OK) {
        why = check_msg(msg);
        if (!why && memcmp(&c, &zero, sizeof c) != 0)
            why = "failed parse left the config set";
        sluice_config_clear(&c);
        return why;
    }
    why = check_config(&c);
    if (!why && sluice_engine_new(&c.engine, &e) == SLUICE_OK) {
        msg[0] = '\0';
        /* 2025-11-14 00:00:00 UTC, as the engine tests use. */
        rc = sluice_config_apply(&c, e, INT64_C(1763078400) * SLUICE_NS_PER_SEC, msg, sizeof msg);
        if (rc != SLUICE_OK && rc != SLUICE_ENOMEM)
            why = check_msg(msg);
        sluice_engine_free(e);
    }
    sluice_config_clear(&c);
    return why;
}
