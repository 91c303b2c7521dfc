/* SPDX-License-Identifier: MIT */
/*
 * Policies: defaults, deep copies and validation of the named limits, task types and engine
 * settings declared in include/sluice/policy.h.
 *
 * A policy is plain data with owned strings. The configuration loader, the server's LIMIT.SET and
 * tests all build policies the same way (init, set fields, validate), so every rule a policy
 * must follow lives here once. The checks report the field at fault (policy_check.h) so the
 * loader can point at the line that set it; the public validate functions add the policy's name.
 *
 * Validation refuses up front what could only fail later: a task that asks for more units than
 * its limit can ever hold would never start (and would freeze its key's queue behind it), and
 * two tiers that both match one value would make the choice depend on their order.
 *
 * Allocation goes through the replaceable allocator only; a copy that runs out of memory leaves
 * its destination cleared.
 */
#include "sluice/policy.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/attr.h"
#include "policy/dotpath.h"
#include "policy/keytpl.h"
#include "policy/policy_check.h"
#include "sluice/error.h"
#include "sluice/spec.h"
#include "base/quote.h"

/* Defaults documented in policy.h. */
#define DEFAULT_MAX_ATTEMPTS   3
#define DEFAULT_RETRY_BASE_NS  SLUICE_NS_PER_SEC
#define DEFAULT_RETRY_MAX_NS   (300 * SLUICE_NS_PER_SEC)
#define DEFAULT_LEASE_NS       (30 * SLUICE_NS_PER_SEC)
#define DEFAULT_MAX_TASKS      ((size_t)10000000)
#define DEFAULT_MAX_PARKED     ((size_t)1000000)
#define DEFAULT_MAX_FINISHED   ((size_t)10000)
#define DEFAULT_EVENT_INTERVAL (10 * SLUICE_NS_PER_SEC)

/* ---- Defaults and clearing --------------------------------------------------------------- */

const char *sluice_limit_mode_name(sluice_limit_mode mode)
{
    switch (mode) {
    case SLUICE_MODE_ENFORCE:
        return "enforce";
    case SLUICE_MODE_SHADOW:
        return "shadow";
    }
    return "?";
}

void sluice_limit_policy_init(sluice_limit_policy *p)
{
    memset(p, 0, sizeof(*p));
    sluice_limit_def_init(&p->def, SLUICE_RATE);
    p->key_source = SLUICE_KEY_NONE;
    p->missing_key_global = 0;
    p->missing_key_skip = 0;
    p->overflow = SLUICE_OVERFLOW_WAIT;
    p->mode = SLUICE_MODE_ENFORCE;
    p->units_source = SLUICE_UNITS_TASK;
    p->units_fixed = 1;
}

void sluice_type_policy_init(sluice_type_policy *t)
{
    memset(t, 0, sizeof(*t));
    t->retry.max_attempts = DEFAULT_MAX_ATTEMPTS;
    t->retry.backoff = SLUICE_BACKOFF_EXPONENTIAL;
    t->retry.base_ns = DEFAULT_RETRY_BASE_NS;
    t->retry.max_ns = DEFAULT_RETRY_MAX_NS;
    t->retry.throttle_retries = 1;
    t->lease_ns = DEFAULT_LEASE_NS;
    t->priority = 0;
}

void sluice_engine_policy_init(sluice_engine_policy *e)
{
    memset(e, 0, sizeof(*e));
    e->max_tasks = DEFAULT_MAX_TASKS;
    e->max_parked = DEFAULT_MAX_PARKED;
    e->max_finished = DEFAULT_MAX_FINISHED;
    e->strict_types = 0;
    e->event_interval_ns = DEFAULT_EVENT_INTERVAL;
    e->default_lease_ns = DEFAULT_LEASE_NS;
}

static void free_tiers(sluice_tier *tiers, size_t n)
{
    if (!tiers)
        return;
    for (size_t i = 0; i < n; i++) {
        alloc_free(tiers[i].name);
        alloc_free(tiers[i].equals);
    }
    alloc_free(tiers);
}

void sluice_limit_policy_clear(sluice_limit_policy *p)
{
    if (!p)
        return;
    alloc_free(p->name);
    alloc_free(p->key_path);
    alloc_free(p->units_path);
    alloc_free(p->tier_path);
    free_tiers(p->tiers, p->ntiers);
    for (size_t i = 0; p->overrides && i < p->noverrides; i++)
        alloc_free(p->overrides[i].key);
    alloc_free(p->overrides);
    sluice_limit_policy_init(p);
}

static void free_names(char **names, size_t n)
{
    if (!names)
        return;
    for (size_t i = 0; i < n; i++)
        alloc_free(names[i]);
    alloc_free(names);
}

void sluice_type_policy_clear(sluice_type_policy *t)
{
    if (!t)
        return;
    alloc_free(t->name);
    alloc_free(t->fair_key);
    free_names(t->limits, t->nlimits);
    sluice_type_policy_init(t);
}

/* ---- Copies ------------------------------------------------------------------------------ */

/* Copies a string that may be NULL. Returns 0, or SLUICE_ENOMEM with *dst NULL. */
static int dup_str(char **dst, const char *src)
{
    *dst = NULL;
    if (!src)
        return 0;
    *dst = alloc_memdup0(src, strlen(src));
    return *dst ? 0 : SLUICE_ENOMEM;
}

int sluice_limit_policy_copy(sluice_limit_policy *dst, const sluice_limit_policy *src)
{
    sluice_limit_policy c = *src;

    /* c shares src's pointers until each is replaced by its copy; on failure only the copies
     * made so far are freed, hence the NULLs first. */
    c.name = c.key_path = c.units_path = c.tier_path = NULL;
    c.tiers = NULL;
    c.ntiers = 0;
    c.overrides = NULL;
    c.noverrides = 0;
    if (dup_str(&c.name, src->name) || dup_str(&c.key_path, src->key_path) ||
        dup_str(&c.units_path, src->units_path) || dup_str(&c.tier_path, src->tier_path))
        goto fail;
    if (src->ntiers > 0) {
        c.tiers = alloc_calloc(src->ntiers, sizeof(*c.tiers));
        if (!c.tiers)
            goto fail;
        for (size_t i = 0; i < src->ntiers; i++) {
            c.tiers[i] = src->tiers[i];
            c.tiers[i].name = c.tiers[i].equals = NULL;
            c.ntiers = i + 1;
            if (dup_str(&c.tiers[i].name, src->tiers[i].name) ||
                dup_str(&c.tiers[i].equals, src->tiers[i].equals))
                goto fail;
        }
    }
    if (src->noverrides > 0) {
        c.overrides = alloc_calloc(src->noverrides, sizeof(*c.overrides));
        if (!c.overrides)
            goto fail;
        for (size_t i = 0; i < src->noverrides; i++) {
            c.overrides[i] = src->overrides[i];
            c.overrides[i].key = NULL;
            c.noverrides = i + 1;
            if (dup_str(&c.overrides[i].key, src->overrides[i].key))
                goto fail;
        }
    }
    *dst = c;
    return 0;

fail:
    sluice_limit_policy_clear(&c);
    sluice_limit_policy_init(dst);
    return SLUICE_ENOMEM;
}

int sluice_type_policy_copy(sluice_type_policy *dst, const sluice_type_policy *src)
{
    sluice_type_policy c = *src;

    c.name = c.fair_key = NULL;
    c.limits = NULL;
    c.nlimits = 0;
    if (dup_str(&c.name, src->name) || dup_str(&c.fair_key, src->fair_key))
        goto fail;
    if (src->nlimits > 0) {
        c.limits = alloc_calloc(src->nlimits, sizeof(*c.limits));
        if (!c.limits)
            goto fail;
        for (size_t i = 0; i < src->nlimits; i++) {
            c.nlimits = i + 1;
            if (dup_str(&c.limits[i], src->limits[i]))
                goto fail;
        }
    }
    *dst = c;
    return 0;

fail:
    sluice_type_policy_clear(&c);
    sluice_type_policy_init(dst);
    return SLUICE_ENOMEM;
}

/* ---- Checks ------------------------------------------------------------------------------ */

/* Writes the reason of a failed check, sets the fault and returns rc. */
PRINTF_ATTR(6, 7)
static int fault(policy_fault *where, policy_field field, size_t index, char *msg, size_t msglen,
                 const char *fmt, ...)
{
    va_list ap;

    if (where) {
        where->field = field;
        where->index = index;
    }
    va_start(ap, fmt);
    vmsgf(msg, msglen, fmt, ap);
    va_end(ap);
    return SLUICE_EINVAL;
}

static void no_fault(policy_fault *where, char *msg, size_t msglen)
{
    if (where) {
        where->field = POLICY_FIELD_NONE;
        where->index = 0;
    }
    if (msg && msglen > 0)
        msg[0] = '\0';
}

/* A name quoted for a message: at most 40 bytes quote_buf. */
static const char *show(quote_buf *q, const char *s)
{
    return quote_bytes(q, s, strlen(s), 40);
}

/* A duration for a message, in its largest exact unit ("5m"), or in ns when negative. */
typedef struct dur_text {
    char s[SLUICE_SPEC_DURATION_MAX_LEN + 8];
} dur_text;

static const char *dur(dur_text *d, int64_t ns)
{
    if (sluice_spec_format_duration(ns, d->s, sizeof(d->s)) != 0)
        snprintf(d->s, sizeof(d->s), "%" PRId64 "ns", ns);
    return d->s;
}

static int name_char(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == ':' || c == '-';
}

int policy_check_name(const char *name, char *msg, size_t msglen)
{
    size_t len;
    quote_buf q, qc;
    char bad[2];

    no_fault(NULL, msg, msglen);
    if (!name || !*name)
        return fault(NULL, POLICY_FIELD_NAME, 0, msg, msglen, "the name is empty");
    len = strlen(name);
    if (len > POLICY_NAME_MAX)
        return fault(NULL, POLICY_FIELD_NAME, 0, msg, msglen,
                     "the name %s is %zu bytes long, more than %d", show(&q, name), len,
                     POLICY_NAME_MAX);
    for (size_t i = 0; i < len; i++) {
        if (!name_char((unsigned char)name[i])) {
            bad[0] = name[i];
            bad[1] = '\0';
            return fault(NULL, POLICY_FIELD_NAME, 0, msg, msglen,
                         "the name %s has a character outside A-Z a-z 0-9 _ . : - (%s at "
                         "offset %zu)",
                         show(&q, name), show(&qc, bad), i);
        }
    }
    return 0;
}

int64_t policy_capacity(const sluice_limit_def *def)
{
    if (def->kind == SLUICE_RATE && def->burst > 0)
        return def->burst;
    return def->limit;
}

/* What the capacity of a kind is called in messages. */
static const char *capacity_name(sluice_limit_kind kind)
{
    switch (kind) {
    case SLUICE_RATE:
        return "burst";
    case SLUICE_WINDOW:
    case SLUICE_SLIDING:
        return "window's limit";
    case SLUICE_CONCURRENCY:
        return "concurrency";
    case SLUICE_QUOTA:
        return "budget";
    }
    return "capacity";
}

/* Checks that a fixed cost fits a definition that validates. `in_tier` names the tier, or NULL. */
static int check_units_fit(const sluice_limit_policy *p, const sluice_limit_def *def,
                           const char *in_tier, policy_fault *where, char *msg, size_t msglen)
{
    int64_t cap = policy_capacity(def);
    quote_buf q;

    if (p->units_source != SLUICE_UNITS_FIXED || p->units_fixed <= cap)
        return 0;
    return fault(where, POLICY_FIELD_UNITS, 0, msg, msglen,
                 "units %" PRId64 " exceed the %s of %" PRId64 "%s%s: such a task could never "
                 "start; split it into tasks of at most %" PRId64 " unit%s",
                 p->units_fixed, capacity_name(def->kind), cap, in_tier ? " in tier " : "",
                 in_tier ? show(&q, in_tier) : "", cap, cap == 1 ? "" : "s");
}

/* Describes a tier's match for messages: "1 to 2", "at most 0", "at least 3", "any number",
 * or the quoted string of an equals tier. */
static const char *tier_match(const sluice_tier *t, char *buf, size_t len)
{
    quote_buf q;

    if (t->equals)
        snprintf(buf, len, "equal to %s", show(&q, t->equals));
    else if (t->min == INT64_MIN && t->max == INT64_MAX)
        snprintf(buf, len, "any number");
    else if (t->min == INT64_MIN)
        snprintf(buf, len, "at most %" PRId64, t->max);
    else if (t->max == INT64_MAX)
        snprintf(buf, len, "at least %" PRId64, t->min);
    else
        snprintf(buf, len, "%" PRId64 " to %" PRId64, t->min, t->max);
    return buf;
}

static int tiers_overlap(const sluice_tier *a, const sluice_tier *b)
{
    if (a->equals || b->equals)
        return a->equals && b->equals && strcmp(a->equals, b->equals) == 0;
    return a->min <= b->max && b->min <= a->max;
}

static int check_tiers(const sluice_limit_policy *p, policy_fault *where, char *msg, size_t msglen)
{
    char vmsg[200], m1[120], m2[120];
    quote_buf q1, q2;
    int rc;

    if (!p->tier_path)
        return fault(where, POLICY_FIELD_TIER_FIELD, 0, msg, msglen,
                     "the limit has tiers but no field to choose them by");
    if (dotpath_validate(p->tier_path, vmsg, sizeof(vmsg)) != 0)
        return fault(where, POLICY_FIELD_TIER_FIELD, 0, msg, msglen, "%s", vmsg);
    if (p->ntiers == 0 || !p->tiers)
        return fault(where, POLICY_FIELD_TIERS, 0, msg, msglen,
                     "a tiered limit needs at least one tier");
    for (size_t i = 0; i < p->ntiers; i++) {
        const sluice_tier *t = &p->tiers[i];

        if (policy_check_name(t->name, vmsg, sizeof(vmsg)) != 0)
            return fault(where, POLICY_FIELD_TIER_NAME, i, msg, msglen, "tier %zu: %s", i + 1,
                         vmsg);
        if (!t->equals && t->min > t->max)
            return fault(where, POLICY_FIELD_TIER_MATCH, i, msg, msglen,
                         "tier %s has min %" PRId64 " above max %" PRId64, show(&q1, t->name),
                         t->min, t->max);
        for (size_t j = 0; j < i; j++) {
            const sluice_tier *u = &p->tiers[j];

            if (strcmp(u->name, t->name) == 0)
                return fault(where, POLICY_FIELD_TIER_NAME, i, msg, msglen,
                             "two tiers are named %s", show(&q1, t->name));
            if (!u->equals != !t->equals)
                return fault(where, POLICY_FIELD_TIER_MATCH, i, msg, msglen,
                             "tier %s matches %s but tier %s matches %s: the tiers of one limit "
                             "match either numbers (min, max) or strings (equals), not both",
                             show(&q1, t->name), t->equals ? "a string" : "numbers",
                             show(&q2, u->name), u->equals ? "a string" : "numbers");
            if (tiers_overlap(t, u))
                return fault(where, POLICY_FIELD_TIER_MATCH, i, msg, msglen,
                             "tier %s (%s) overlaps tier %s (%s): a value must choose one tier",
                             show(&q1, t->name), tier_match(t, m1, sizeof(m1)), show(&q2, u->name),
                             tier_match(u, m2, sizeof(m2)));
        }
        rc = sluice_limit_def_validate(&t->def, vmsg, sizeof(vmsg));
        if (rc != 0) {
            fault(where, POLICY_FIELD_TIER_DEF, i, msg, msglen, "tier %s: %s", show(&q1, t->name),
                  vmsg);
            return rc;
        }
        rc = check_units_fit(p, &t->def, t->name, where, msg, msglen);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int policy_check_override_key(const char *key, size_t len, char *msg, size_t msglen)
{
    if (!key || len == 0 || len > SLUICE_MAX_OVERRIDE_KEY_LEN) {
        msgf(msg, msglen, "an override's key is 1 to %d bytes", SLUICE_MAX_OVERRIDE_KEY_LEN);
        return SLUICE_EINVAL;
    }
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)key[i];

        if (c < 0x20 || c == 0x7f || c == ',' || c == ';' || c == '=') {
            msgf(msg, msglen,
                 "an override's key holds no control byte, ',', ';' or '=' (byte %zu of \"%.*s\")",
                 i, (int)len, key);
            return SLUICE_EINVAL;
        }
    }
    return SLUICE_OK;
}

long policy_find_override(const sluice_limit_policy *p, const char *key, size_t len)
{
    for (size_t i = 0; i < p->noverrides; i++)
        if (strlen(p->overrides[i].key) == len && memcmp(p->overrides[i].key, key, len) == 0)
            return (long)i;
    return -1;
}

/* The per-key overrides of an untiered keyed limit whose own definition validated. */
static int check_overrides(const sluice_limit_policy *p, policy_fault *where, char *msg,
                           size_t msglen)
{
    char vmsg[200];
    int rc;

    if (p->noverrides > SLUICE_MAX_KEY_OVERRIDES || !p->overrides)
        return fault(where, POLICY_FIELD_OVERRIDE, 0, msg, msglen,
                     "at most %d keys have overrides, got %zu", SLUICE_MAX_KEY_OVERRIDES,
                     p->noverrides);
    for (size_t i = 0; i < p->noverrides; i++) {
        const sluice_key_override *o = &p->overrides[i];
        size_t len = o->key ? strlen(o->key) : 0;

        if (policy_check_override_key(o->key, len, vmsg, sizeof(vmsg)) != 0)
            return fault(where, POLICY_FIELD_OVERRIDE, i, msg, msglen, "%s", vmsg);
        for (size_t j = 0; j < i; j++)
            if (strcmp(p->overrides[j].key, o->key) == 0)
                return fault(where, POLICY_FIELD_OVERRIDE, i, msg, msglen,
                             "key \"%s\" has two overrides", o->key);
        rc = sluice_limit_def_validate(&o->def, vmsg, sizeof(vmsg));
        if (rc != 0) {
            fault(where, POLICY_FIELD_OVERRIDE, i, msg, msglen, "override of key \"%s\": %s",
                  o->key, vmsg);
            return rc;
        }
        if (o->def.kind != p->def.kind)
            return fault(where, POLICY_FIELD_OVERRIDE, i, msg, msglen,
                         "override of key \"%s\": a %s limit's override is a %s limit too, not "
                         "a %s one",
                         o->key, sluice_limit_kind_name(p->def.kind),
                         sluice_limit_kind_name(p->def.kind), sluice_limit_kind_name(o->def.kind));
        rc = check_units_fit(p, &o->def, NULL, where, msg, msglen);
        if (rc != 0) {
            if (where)
                *where = (policy_fault){POLICY_FIELD_OVERRIDE, i};
            return rc;
        }
    }
    return 0;
}

int policy_check_limit(const sluice_limit_policy *p, policy_fault *where, char *msg, size_t msglen)
{
    char vmsg[200];
    int rc;

    no_fault(where, msg, msglen);
    if (policy_check_name(p->name, vmsg, sizeof(vmsg)) != 0)
        return fault(where, POLICY_FIELD_NAME, 0, msg, msglen, "%s", vmsg);

    switch (p->key_source) {
    case SLUICE_KEY_NONE:
    case SLUICE_KEY_EXPLICIT:
        if (p->key_path)
            return fault(where, POLICY_FIELD_KEY, 0, msg, msglen,
                         "a key path is set but the key is not taken from a path");
        break;
    case SLUICE_KEY_PATH:
        if (keytpl_validate(p->key_path, NULL, vmsg, sizeof(vmsg)) != 0)
            return fault(where, POLICY_FIELD_KEY, 0, msg, msglen, "%s", vmsg);
        break;
    default:
        return fault(where, POLICY_FIELD_KEY, 0, msg, msglen, "unknown key source %d",
                     (int)p->key_source);
    }
    if (p->missing_key_global != 0 && p->missing_key_global != 1)
        return fault(where, POLICY_FIELD_MISSING_KEY, 0, msg, msglen,
                     "missing_key_global must be 0 or 1, got %d", p->missing_key_global);
    if ((p->missing_key_skip != 0 && p->missing_key_skip != 1) ||
        (p->missing_key_skip && p->missing_key_global))
        return fault(where, POLICY_FIELD_MISSING_KEY, 0, msg, msglen,
                     "missing_key_skip must be 0 or 1, and not with missing_key_global");
    if (p->overflow != SLUICE_OVERFLOW_WAIT && p->overflow != SLUICE_OVERFLOW_REJECT)
        return fault(where, POLICY_FIELD_OVERFLOW, 0, msg, msglen, "unknown overflow action %d",
                     (int)p->overflow);
    if (p->mode != SLUICE_MODE_ENFORCE && p->mode != SLUICE_MODE_SHADOW)
        return fault(where, POLICY_FIELD_MODE, 0, msg, msglen, "unknown mode %d", (int)p->mode);

    switch (p->units_source) {
    case SLUICE_UNITS_TASK:
        break;
    case SLUICE_UNITS_FIXED:
        if (p->units_fixed < 1)
            return fault(where, POLICY_FIELD_UNITS, 0, msg, msglen,
                         "units must be at least 1, got %" PRId64, p->units_fixed);
        break;
    case SLUICE_UNITS_PATH:
        if (dotpath_validate(p->units_path, vmsg, sizeof(vmsg)) != 0)
            return fault(where, POLICY_FIELD_UNITS, 0, msg, msglen, "%s", vmsg);
        break;
    default:
        return fault(where, POLICY_FIELD_UNITS, 0, msg, msglen, "unknown units source %d",
                     (int)p->units_source);
    }
    if (p->units_source != SLUICE_UNITS_PATH && p->units_path)
        return fault(where, POLICY_FIELD_UNITS, 0, msg, msglen,
                     "a units path is set but the units are not taken from a path");

    if (p->noverrides > 0 && (p->tier_path || p->ntiers > 0 || p->key_source == SLUICE_KEY_NONE))
        return fault(where, POLICY_FIELD_OVERRIDE, 0, msg, msglen,
                     "per-key overrides apply to a keyed limit without tiers");
    if (p->tier_path || p->ntiers > 0)
        return check_tiers(p, where, msg, msglen);
    rc = sluice_limit_def_validate(&p->def, vmsg, sizeof(vmsg));
    if (rc != 0) {
        fault(where, POLICY_FIELD_DEF, 0, msg, msglen, "%s", vmsg);
        return rc;
    }
    rc = check_units_fit(p, &p->def, NULL, where, msg, msglen);
    if (rc != 0 || p->noverrides == 0)
        return rc;
    return check_overrides(p, where, msg, msglen);
}

int policy_check_type(const sluice_type_policy *t, policy_fault *where, char *msg, size_t msglen)
{
    const sluice_retry_policy *r = &t->retry;
    char vmsg[200];
    dur_text d1, d2;
    quote_buf q;

    no_fault(where, msg, msglen);
    if (policy_check_name(t->name, vmsg, sizeof(vmsg)) != 0)
        return fault(where, POLICY_FIELD_NAME, 0, msg, msglen, "%s", vmsg);
    if (t->nlimits > 0 && !t->limits)
        return fault(where, POLICY_FIELD_LIMITS, 0, msg, msglen, "the list of limits is missing");
    for (size_t i = 0; i < t->nlimits; i++) {
        if (policy_check_name(t->limits[i], vmsg, sizeof(vmsg)) != 0)
            return fault(where, POLICY_FIELD_LIMITS, i, msg, msglen, "limit %zu: %s", i + 1, vmsg);
        for (size_t j = 0; j < i; j++) {
            if (strcmp(t->limits[i], t->limits[j]) == 0)
                return fault(where, POLICY_FIELD_LIMITS, i, msg, msglen, "limit %s is listed twice",
                             show(&q, t->limits[i]));
        }
    }
    if (r->max_attempts < 1)
        return fault(where, POLICY_FIELD_RETRY_MAX_ATTEMPTS, 0, msg, msglen,
                     "max_attempts must be at least 1 (1 = no retry), got %d", r->max_attempts);
    if (r->backoff != SLUICE_BACKOFF_FIXED && r->backoff != SLUICE_BACKOFF_EXPONENTIAL)
        return fault(where, POLICY_FIELD_RETRY_BACKOFF, 0, msg, msglen, "unknown backoff %d",
                     (int)r->backoff);
    if (r->base_ns < 0)
        return fault(where, POLICY_FIELD_RETRY_BASE, 0, msg, msglen,
                     "the retry base must not be negative, got %s", dur(&d1, r->base_ns));
    if (r->max_ns < r->base_ns)
        return fault(where, POLICY_FIELD_RETRY_MAX, 0, msg, msglen,
                     "the retry max (%s) is below the base (%s)", dur(&d1, r->max_ns),
                     dur(&d2, r->base_ns));
    if (r->throttle_retries != 0 && r->throttle_retries != 1)
        return fault(where, POLICY_FIELD_RETRY_THROTTLE, 0, msg, msglen,
                     "throttle_retries must be 0 or 1, got %d", r->throttle_retries);
    if (t->lease_ns < 1)
        return fault(where, POLICY_FIELD_LEASE, 0, msg, msglen,
                     "the lease must be above zero, got %s", dur(&d1, t->lease_ns));
    if (t->fairness != SLUICE_FAIR_FIFO && t->fairness != SLUICE_FAIR_KEYS)
        return fault(where, POLICY_FIELD_FAIRNESS, 0, msg, msglen, "unknown fairness %d",
                     (int)t->fairness);
    if (t->fair_key) {
        size_t i = 0;

        if (t->fairness != SLUICE_FAIR_KEYS)
            return fault(where, POLICY_FIELD_FAIR_KEY, 0, msg, msglen,
                         "fair_key is set but fairness is not keys");
        while (i < t->nlimits && strcmp(t->limits[i], t->fair_key) != 0)
            i++;
        if (i == t->nlimits)
            return fault(where, POLICY_FIELD_FAIR_KEY, 0, msg, msglen,
                         "fair_key %s is not one of the type's limits", show(&q, t->fair_key));
    }
    if (t->charge_redelivery != 0 && t->charge_redelivery != 1)
        return fault(where, POLICY_FIELD_CHARGE_REDELIVERY, 0, msg, msglen,
                     "charge_redelivery must be 0 or 1, got %d", t->charge_redelivery);
    return 0;
}

int policy_check_engine(const sluice_engine_policy *e, policy_fault *where, char *msg,
                        size_t msglen)
{
    dur_text d;

    no_fault(where, msg, msglen);
    if (e->max_tasks < 1)
        return fault(where, POLICY_FIELD_MAX_TASKS, 0, msg, msglen, "max_tasks must be at least 1");
    if (e->max_parked < 1)
        return fault(where, POLICY_FIELD_MAX_PARKED, 0, msg, msglen,
                     "max_parked must be at least 1");
    if (e->strict_types != 0 && e->strict_types != 1)
        return fault(where, POLICY_FIELD_STRICT_TYPES, 0, msg, msglen,
                     "strict_types must be 0 or 1, got %d", e->strict_types);
    if (e->event_interval_ns < 1)
        return fault(where, POLICY_FIELD_EVENT_INTERVAL, 0, msg, msglen,
                     "event_interval must be above zero, got %s", dur(&d, e->event_interval_ns));
    if (e->default_lease_ns < 1)
        return fault(where, POLICY_FIELD_DEFAULT_LEASE, 0, msg, msglen,
                     "default_lease must be above zero, got %s", dur(&d, e->default_lease_ns));
    return 0;
}

/* ---- Public validation ------------------------------------------------------------------- */

/* Prefixes the reason with what it is about: `limit "stripe": ...`. */
static int with_subject(int rc, const char *what, const char *name, const char *reason, char *msg,
                        size_t msglen)
{
    quote_buf q;

    if (name && policy_check_name(name, NULL, 0) == 0)
        msgf(msg, msglen, "%s %s: %s", what, show(&q, name), reason);
    else
        msgf(msg, msglen, "%s: %s", what, reason);
    return rc;
}

int sluice_limit_policy_validate(const sluice_limit_policy *p, char *msg, size_t msglen)
{
    char reason[400];
    int rc;

    if (msg && msglen > 0)
        msg[0] = '\0';
    if (!p)
        return with_subject(SLUICE_EINVAL, "limit", NULL, "no policy given", msg, msglen);
    rc = policy_check_limit(p, NULL, reason, sizeof(reason));
    if (rc != 0)
        return with_subject(rc, "limit", p->name, reason, msg, msglen);
    return 0;
}

int sluice_type_policy_validate(const sluice_type_policy *t, char *msg, size_t msglen)
{
    char reason[400];
    int rc;

    if (msg && msglen > 0)
        msg[0] = '\0';
    if (!t)
        return with_subject(SLUICE_EINVAL, "type", NULL, "no policy given", msg, msglen);
    rc = policy_check_type(t, NULL, reason, sizeof(reason));
    if (rc != 0)
        return with_subject(rc, "type", t->name, reason, msg, msglen);
    return 0;
}
