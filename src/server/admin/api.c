/* SPDX-License-Identifier: MIT */
/*
 * The admin port's JSON documents: /api/stats, /api/limits, /api/limits/{name},
 * /api/limits/{name}/spend?key=K[&tier=T] and /api/tasks/{id}. The dashboard is built against these
 * shapes (docs/admin.md): fields are only ever added, never renamed or removed.
 *
 * A top key's "rate" is read as LIMIT.RATE reads it (cmd_limit_key_core, cmd_limit_key_rate), so
 * the two never disagree.
 *
 * Times are Unix milliseconds (null for "never" or "not applicable"), durations milliseconds,
 * counters integers that only grow (their names end in _total). Every document is built from
 * the engine on the loop thread, at the request, with jansson.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "server/admin/admin_impl.h"
#include "server/commands.h"
#include "server/rcounters.h"
#include "server/rstore.h"
#include "sluice/error.h"
#include "sluice/policy_spec.h"
#include "sluice/spec.h"

/* ---- Helpers ----------------------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0 when it is not one. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
    size_t len;
    uint32_t cp;

    if (s[0] < 0x80)
        return 1;
    if (s[0] >= 0xc2 && s[0] <= 0xdf)
        len = 2, cp = s[0] & 0x1fu;
    else if (s[0] >= 0xe0 && s[0] <= 0xef)
        len = 3, cp = s[0] & 0x0fu;
    else if (s[0] >= 0xf0 && s[0] <= 0xf4)
        len = 4, cp = s[0] & 0x07u;
    else
        return 0;
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3fu);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return len;
}

json_t *admin_json_bytes(const char *s, size_t len)
{
    json_t *j;
    char *copy;
    size_t i = 0;

    if (!s)
        return json_null();
    j = json_stringn(s, len);
    if (j)
        return j;
    /* Not UTF-8 (or a NUL inside): keep what is printable and mark the rest. */
    copy = alloc_malloc(len + 1);
    if (!copy)
        return NULL;
    while (i < len) {
        size_t k = utf8_seq((const unsigned char *)s + i, len - i);

        if (k == 0 || s[i] == '\0') {
            copy[i] = '?';
            i++;
        } else {
            memcpy(copy + i, s + i, k);
            i += k;
        }
    }
    j = json_stringn(copy, len);
    alloc_free(copy);
    return j;
}

json_t *admin_json_u64(uint64_t v)
{
    return json_integer(v > (uint64_t)INT64_MAX ? (json_int_t)INT64_MAX : (json_int_t)v);
}

json_t *admin_json_time(int64_t ns)
{
    if (ns == SLUICE_NEVER || ns <= 0)
        return json_null();
    return json_integer(ns / SLUICE_NS_PER_MS);
}

/* Sets a member, dropping a NULL value (an allocation failure surfaces when the document is
 * dumped: every document is checked for completeness by its builder). Returns -1 on failure. */
static int put(json_t *o, const char *key, json_t *v)
{
    if (!v)
        return -1;
    return json_object_set_new(o, key, v) == 0 ? 0 : -1;
}

static json_t *str_or_null(const char *s)
{
    return s ? json_string(s) : json_null();
}

/* ---- Limits ------------------------------------------------------------------------------ */

/* The definition a limit reports: its own, or its first tier's. */
static const sluice_limit_def *report_def(const sluice_limit_policy *p)
{
    return p->ntiers > 0 ? &p->tiers[0].def : &p->def;
}

static const char *key_text(const sluice_limit_policy *p)
{
    switch (p->key_source) {
    case SLUICE_KEY_EXPLICIT:
        return "explicit";
    case SLUICE_KEY_PATH:
        return p->key_path ? p->key_path : "?";
    default:
        return "none";
    }
}

static int put_period(json_t *o, const sluice_limit_def *d)
{
    int64_t ms = 0;
    const char *period = NULL;

    switch (d->kind) {
    case SLUICE_RATE:
    case SLUICE_WINDOW:
    case SLUICE_SLIDING:
        ms = d->period_ns / SLUICE_NS_PER_MS;
        break;
    case SLUICE_QUOTA:
        /* A calendar month has no fixed length: 30 days stands for it. */
        period = d->calendar == SLUICE_CAL_DAY     ? "day"
                 : d->calendar == SLUICE_CAL_MONTH ? "month"
                                                   : "none";
        ms = d->calendar == SLUICE_CAL_DAY     ? INT64_C(86400000)
             : d->calendar == SLUICE_CAL_MONTH ? INT64_C(30) * 86400000
                                               : 0;
        if (put(o, "period", json_string(period)) != 0)
            return -1;
        break;
    case SLUICE_CONCURRENCY:
        if (put(o, "ttl_ms", json_integer(d->ttl_ns / SLUICE_NS_PER_MS)) != 0)
            return -1;
        break;
    }
    return put(o, "period_ms", ms > 0 ? json_integer(ms) : json_null());
}

static json_t *rejections(const sluice_limit_figures *f)
{
    static const sluice_fail_reason reasons[] = {SLUICE_FAIL_RATELIMITED, SLUICE_FAIL_HORIZON,
                                                 SLUICE_FAIL_NEVER, SLUICE_FAIL_SKIPPED};
    json_t *o = json_object();

    for (size_t i = 0; o && i < sizeof(reasons) / sizeof(reasons[0]); i++) {
        if (put(o, sluice_fail_reason_name(reasons[i]), admin_json_u64(f->rejected[reasons[i]])) !=
            0) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

/* The decision counters of a limit: the engine's, or under a shared store (rcounters.h) the
 * figures of every node (the engine decides nothing there), with this node's own as node_*.
 * Returns non-zero when a member could not be set. */
static int put_decisions(admin *a, json_t *o, const char *name, const sluice_limit_figures *f)
{
    static const struct {
        const char *field, *node_field, *code;
    } rows[] = {{"allowed_total", "node_allowed_total", RCTR_LIMIT_ALLOWED},
                {"denied_total", "node_denied_total", RCTR_LIMIT_DENIED},
                {"units_total", "node_units_total", RCTR_LIMIT_UNITS}};
    const uint64_t local[] = {f->core.allowed, f->core.denied, f->core.units};
    int bad = 0;

    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        uint64_t cluster, node;

        if (rcounters_get(a->srv, rows[i].code, name, &cluster, &node)) {
            bad |= put(o, rows[i].field, admin_json_u64(cluster));
            bad |= put(o, rows[i].node_field, admin_json_u64(node));
        } else {
            bad |= put(o, rows[i].field, admin_json_u64(local[i]));
        }
    }
    return bad;
}

/* The object of one limit in /api/limits (and the start of /api/limits/{name}). */
static json_t *limit_json(admin *a, const sluice_limit_policy *p, sluice_limit_figures *f)
{
    const sluice_limit_def *d = report_def(p);
    const limit_tally *t = admin_tally(a, p->name);
    char spec[SLUICE_POLICY_SPEC_MAX_LEN];
    json_t *o = json_object();
    int bad = 0;

    if (!o)
        return NULL;
    if (p->ntiers > 0)
        snprintf(spec, sizeof(spec), "tiered by %s (%zu tiers)", p->tier_path ? p->tier_path : "?",
                 p->ntiers);
    else if (sluice_spec_format_policy(p, spec, sizeof(spec)) != 0)
        snprintf(spec, sizeof(spec), "?");
    sluice_engine_limit_figures(a->srv->engine, p->name, server_now(a->srv), SLUICE_FIGURES_QUOTA,
                                f);
    bad |= put(o, "name", json_string(p->name));
    bad |= put(o, "kind", json_string(sluice_limit_kind_name(d->kind)));
    bad |= put(o, "spec", json_string(spec));
    bad |= put(o, "limit", json_integer(d->limit));
    bad |= put_period(o, d);
    bad |= put(o, "burst",
               d->kind == SLUICE_RATE ? json_integer(d->burst ? d->burst : d->limit) : json_null());
    bad |= put(o, "key", json_string(key_text(p)));
    bad |=
        put(o, "overflow", json_string(p->overflow == SLUICE_OVERFLOW_REJECT ? "reject" : "wait"));
    bad |= put(o, "keys", admin_json_u64(f->core.keys));
    bad |= put(o, "bytes", admin_json_u64(f->core.bytes));
    bad |= put_decisions(a, o, p->name, f);
    bad |= put(o, "parked", admin_json_u64(f->parked));
    bad |= put(o, "untracked_total", admin_json_u64(f->core.untracked));
    bad |= put(o, "refused_total", admin_json_u64(f->core.refused));
    /* Beyond the dashboard's contract. */
    bad |= put(o, "mode", json_string(f->shadow ? "shadow" : "enforce"));
    bad |= put(o, "shadow_denied_total", admin_json_u64(f->core.shadow_denied));
    bad |= put(o, "backoffs_total", admin_json_u64(f->core.backoffs));
    bad |= put(o, "parked_keys", admin_json_u64(f->parked_keys));
    bad |= put(o, "next_slot_ms", admin_json_time(f->next_wake_ns));
    bad |= put(o, "rejected_total", rejections(f));
    bad |= put(o, "throttled_wanted_total", admin_json_u64(t ? t->wanted : 0));
    bad |= put(o, "throttled_granted_total", admin_json_u64(t ? t->granted : 0));
    if (d->kind == SLUICE_QUOTA)
        bad |= put(o, "quota_spent", json_integer(f->quota_spent));
    if (p->ntiers > 0) {
        json_t *tiers = json_array();

        for (size_t i = 0; tiers && i < p->ntiers; i++) {
            char ts[SLUICE_SPEC_MAX_LEN];
            json_t *tier = json_object();

            if (sluice_spec_format_limit(&p->tiers[i].def, ts, sizeof(ts)) != 0)
                snprintf(ts, sizeof(ts), "?");
            if (!tier || put(tier, "name", json_string(p->tiers[i].name)) != 0 ||
                put(tier, "spec", json_string(ts)) != 0) {
                json_decref(tier);
                bad = 1;
            } else {
                /* The array takes the reference, also when it fails. */
                bad |= json_array_append_new(tiers, tier);
            }
        }
        bad |= put(o, "tiers", tiers);
    }
    if (p->noverrides > 0) {
        json_t *ovs = json_array();

        for (size_t i = 0; ovs && i < p->noverrides; i++) {
            char os[SLUICE_SPEC_MAX_LEN];
            json_t *ov = json_object();

            if (sluice_spec_format_limit(&p->overrides[i].def, os, sizeof(os)) != 0)
                snprintf(os, sizeof(os), "?");
            if (!ov || put(ov, "key", json_string(p->overrides[i].key)) != 0 ||
                put(ov, "spec", json_string(os)) != 0) {
                json_decref(ov);
                bad = 1;
            } else {
                bad |= json_array_append_new(ovs, ov);
            }
        }
        bad |= put(o, "overrides", ovs);
    }
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

typedef struct list_walk {
    admin *a;
    json_t *arr;
    int stats_only; /* /api/stats: the short form */
    int failed;
} list_walk;

static json_t *limit_short_json(admin *a, const sluice_limit_policy *p)
{
    sluice_limit_figures f;
    json_t *o = json_object();
    int bad = 0;

    if (!o)
        return NULL;
    sluice_engine_limit_figures(a->srv->engine, p->name, server_now(a->srv), 0, &f);
    bad |= put(o, "name", json_string(p->name));
    bad |= put(o, "kind", json_string(sluice_limit_kind_name(report_def(p)->kind)));
    bad |= put_decisions(a, o, p->name, &f);
    bad |= put(o, "parked", admin_json_u64(f.parked));
    bad |= put(o, "keys", admin_json_u64(f.core.keys));
    /* The mode in force (shadow also while limits are off) and its would-be denials. */
    bad |= put(o, "mode", json_string(f.shadow ? "shadow" : "enforce"));
    bad |= put(o, "shadow_denied_total", admin_json_u64(f.core.shadow_denied));
    /* Keys held back for an upstream's 429 (LIMIT.BACKOFF, TASK.FAIL ... RETRY_AFTER). */
    bad |= put(o, "backoffs_total", admin_json_u64(f.core.backoffs));
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static void list_one(const sluice_limit_policy *p, void *arg)
{
    list_walk *w = arg;
    sluice_limit_figures f;
    json_t *o;

    if (w->failed)
        return;
    o = w->stats_only ? limit_short_json(w->a, p) : limit_json(w->a, p, &f);
    if (!o || json_array_append_new(w->arr, o) != 0)
        w->failed = 1;
}

static json_t *limits_array(admin *a, int stats_only)
{
    list_walk w = {a, json_array(), stats_only, 0};

    if (!w.arr)
        return NULL;
    sluice_engine_list_limits(a->srv->engine, list_one, &w);
    if (w.failed) {
        json_decref(w.arr);
        return NULL;
    }
    return w.arr;
}

enum MHD_Result admin_api_limits(admin *a, struct MHD_Connection *c)
{
    json_t *doc = json_object();

    if (doc && put(doc, "limits", limits_array(a, 0)) != 0) {
        json_decref(doc);
        doc = NULL;
    }
    return admin_reply_json(c, MHD_HTTP_OK, doc);
}

/* Returns 1 when a key (keylen bytes) is already in the list. */
static int listed(json_t *keys, const char *key, size_t keylen)
{
    size_t i;
    json_t *k;

    json_array_foreach(keys, i, k)
    {
        json_t *name = json_object_get(k, "key");

        if (json_string_length(name) == keylen && memcmp(json_string_value(name), key, keylen) == 0)
            return 1;
    }
    return 0;
}

json_t *admin_key_rate_json(sluice_limit *core, const char *key, size_t keylen, int64_t now_ns)
{
    char per[SLUICE_SPEC_DURATION_MAX_LEN], text[SLUICE_SPEC_DURATION_MAX_LEN + 24];
    int64_t slot = 0;
    cmd_key_rate kr;
    json_t *o;
    int bad = 0;

    if (!core || cmd_limit_key_rate(core, key, keylen, now_ns, &kr) != SLUICE_OK)
        return json_null();
    /* The key's own clock view (a limit never goes back): a slot after it is a hold. */
    if (sluice_limit_estimate(core, key, keylen, 1, now_ns, &slot) != SLUICE_OK || slot <= now_ns)
        slot = SLUICE_NEVER;
    o = json_object();
    if (!o)
        return NULL;
    sluice_spec_format_duration(kr.period_ns, per, sizeof(per));
    snprintf(text, sizeof(text), "%" PRId64 "/%s", kr.permits, per);
    bad |= put(o, "rate", json_string(text));
    snprintf(text, sizeof(text), "%" PRId64 "/%s", kr.configured, per);
    bad |= put(o, "configured", json_string(text));
    bad |= put(o, "permits", json_integer(kr.permits));
    bad |= put(o, "configured_permits", json_integer(kr.configured));
    bad |= put(o, "period_ms", json_integer(kr.period_ns / SLUICE_NS_PER_MS));
    bad |= put(o, "adaptive", json_boolean(kr.adaptive));
    bad |= put(o, "slowed", json_boolean(kr.permits < kr.configured));
    bad |= put(o, "since_ms", admin_json_time(kr.since_ns));
    bad |= put(o, "held_until_ms", admin_json_time(slot));
    bad |= put(o, "why", json_string(kr.why));
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* One entry of top_keys. rate (taken over, may be NULL without memory) is its "rate". */
static json_t *key_json(const char *key, size_t keylen, const char *tier, size_t parked,
                        int64_t wake_ns, uint64_t denied, json_t *rate)
{
    json_t *o = json_object();

    if (!o || put(o, "key", admin_json_bytes(key, keylen)) != 0 ||
        put(o, "parked", admin_json_u64(parked)) != 0 ||
        put(o, "next_slot_ms", admin_json_time(wake_ns)) != 0 ||
        put(o, "denied_total", admin_json_u64(denied)) != 0 ||
        (tier && put(o, "tier", json_string(tier)) != 0)) {
        json_decref(o);
        json_decref(rate);
        return NULL;
    }
    if (put(o, "rate", rate) != 0) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* A listed key's "rate": null for every key of a limit that is not a rate limit, for a tiered
 * limit's key whose tier is not known (one listed from the denial tally), and under a shared
 * store (the keys' state lives in the store, where LIMIT.RATE cannot read it either). */
static json_t *top_key_rate(admin *a, const sluice_limit_policy *p, const char *tier,
                            const char *key, size_t keylen)
{
    if (rstore_active(a->srv))
        return json_null();
    return admin_key_rate_json(cmd_limit_key_core(a->srv, p, tier, key, keylen), key, keylen,
                               server_now(a->srv));
}

/* The most throttled keys: the ones with the most parked tasks, then (when fewer than the top
 * are parked) the most denied ones from the event tallies. Each with its rate now. */
static json_t *top_keys(admin *a, const sluice_limit_policy *p)
{
    sluice_parked_key parked[ADMIN_TOP_KEYS];
    const sketch_slot *denied[ADMIN_TOP_KEYS];
    const limit_tally *t = admin_tally(a, p->name);
    json_t *arr = json_array();
    int n = sluice_engine_top_parked(a->srv->engine, p->name, parked, ADMIN_TOP_KEYS);
    size_t nd;

    if (!arr)
        return NULL;
    for (int i = 0; i < n; i++) {
        const sluice_parked_key *k = &parked[i];
        uint64_t d = t ? admin_tally_denied(t, k->key, k->keylen) : 0;

        if (json_array_append_new(arr,
                                  key_json(k->key, k->keylen, k->tier, k->parked, k->wake_ns, d,
                                           top_key_rate(a, p, k->tier, k->key, k->keylen))) != 0)
            goto fail;
    }
    nd = t ? admin_tally_top(t, denied, ADMIN_TOP_KEYS) : 0;
    for (size_t i = 0; i < nd && json_array_size(arr) < ADMIN_TOP_KEYS; i++) {
        const sketch_slot *k = denied[i];

        if (listed(arr, k->key, k->keylen))
            continue;
        if (json_array_append_new(arr, key_json(k->key, k->keylen, NULL, 0, SLUICE_NEVER,
                                                k->count - k->err,
                                                top_key_rate(a, p, NULL, k->key, k->keylen))) != 0)
            goto fail;
    }
    return arr;
fail:
    json_decref(arr);
    return NULL;
}

/* /api/limits/{name}/spend?key=K[&tier=T]: one quota key's spending in its current period (seed
 * 004's "a user's daily spend"), as LIMIT.SPEND. A read: nothing changes, not even the limit's
 * clock. 404 for no such limit or tier, 400 for a missing key, a limit that is not a quota, or a
 * tiered one asked without a tier. */
static enum MHD_Result api_spend(admin *a, struct MHD_Connection *c, const char *name,
                                 void **req_cls)
{
    const char *key = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "key");
    const char *tier = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "tier");
    const sluice_limit_policy *p = sluice_engine_get_limit(a->srv->engine, name, NULL);
    sluice_quota_usage u;
    json_t *doc;
    int rc, bad = 0;

    if (!p)
        return admin_reply_error(c, MHD_HTTP_NOT_FOUND, "not_found", "no limit named \"%.200s\"",
                                 name);
    if (!key)
        return admin_reply_error(c, MHD_HTTP_BAD_REQUEST, "bad_request", "%s",
                                 "give the key: ?key=K");
    if ((p->ntiers ? p->tiers[0].def.kind : p->def.kind) != SLUICE_QUOTA)
        return admin_reply_error(c, MHD_HTTP_BAD_REQUEST, "bad_request",
                                 "limit \"%.200s\" is not a quota", name);
    /* Under a shared store the spending lives in the store: LIMIT.SPEND asks it (v1.c), once
     * the tier is checked here as the engine checks it (the same statuses on every store). */
    if (rstore_active(a->srv)) {
        size_t t = 0;

        if (p->ntiers && !tier)
            return admin_reply_error(c, MHD_HTTP_BAD_REQUEST, "bad_request",
                                     "limit \"%.200s\" is tiered: give ?tier=T", name);
        while (tier && t < p->ntiers && strcmp(p->tiers[t].name, tier) != 0)
            t++;
        if (tier && t == p->ntiers)
            return admin_reply_error(c, MHD_HTTP_NOT_FOUND, "not_found",
                                     "limit \"%.200s\" has no tier \"%.200s\"", name, tier);
        return admin_v1_spend(a, c, name, key, tier, req_cls);
    }
    rc = sluice_engine_quota_usage(a->srv->engine, name, tier, key, strlen(key), server_now(a->srv),
                                   &u);
    if (rc == SLUICE_EINVAL)
        return admin_reply_error(c, MHD_HTTP_BAD_REQUEST, "bad_request",
                                 "limit \"%.200s\" is tiered: give ?tier=T", name);
    if (rc == SLUICE_ENOTFOUND)
        return admin_reply_error(c, MHD_HTTP_NOT_FOUND, "not_found",
                                 "limit \"%.200s\" has no tier \"%.200s\"", name, tier ? tier : "");
    if (rc != SLUICE_OK)
        return admin_reply_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "nomem", "%s",
                                 sluice_strerror(rc));
    doc = json_object();
    if (!doc)
        return admin_reply_json(c, MHD_HTTP_OK, NULL);
    bad |= put(doc, "limit", json_string(name));
    bad |= put(doc, "tier", str_or_null(tier));
    bad |= put(doc, "key", admin_json_bytes(key, strlen(key)));
    bad |= put(doc, "spent", json_integer(u.spent));
    bad |= put(doc, "budget", json_integer(u.budget));
    bad |= put(doc, "remaining", json_integer(u.remaining));
    bad |= put(doc, "period_start_ms", admin_json_time(u.period_start_ns));
    bad |= put(doc, "resets_at_ms", admin_json_time(u.resets_at_ns));
    if (bad) {
        json_decref(doc);
        doc = NULL;
    }
    return admin_reply_json(c, MHD_HTTP_OK, doc);
}

enum MHD_Result admin_api_limit(admin *a, struct MHD_Connection *c, const char *name,
                                void **req_cls)
{
    const sluice_limit_policy *p;
    sluice_limit_figures f;
    const char *slash = strchr(name, '/');
    json_t *doc;

    /* Limit names hold no '/': what follows one is a sub-document. */
    if (slash) {
        char base[256];
        size_t n = (size_t)(slash - name);

        if (strcmp(slash, "/spend") != 0 || n >= sizeof base)
            return admin_reply_error(c, MHD_HTTP_NOT_FOUND, "not_found", "no document \"%.200s\"",
                                     name);
        memcpy(base, name, n);
        base[n] = '\0';
        return api_spend(a, c, base, req_cls);
    }
    p = sluice_engine_get_limit(a->srv->engine, name, NULL);
    if (!p)
        return admin_reply_error(c, MHD_HTTP_NOT_FOUND, "not_found", "no limit named \"%.200s\"",
                                 name);
    doc = limit_json(a, p, &f);
    if (doc && put(doc, "top_keys", top_keys(a, p)) != 0) {
        json_decref(doc);
        doc = NULL;
    }
    return admin_reply_json(c, MHD_HTTP_OK, doc);
}

/* ---- Tasks ------------------------------------------------------------------------------- */

static json_t *payload_json(const char *payload, size_t len)
{
    json_t *v;

    if (!payload)
        return json_object();
    v = json_loadb(payload, len, JSON_DECODE_ANY, NULL);
    return v ? v : admin_json_bytes(payload, len);
}

static json_t *failure_json(const sluice_task_info *ti)
{
    const sluice_denial *d = &ti->failure;
    json_t *o;
    int bad = 0;

    if (ti->state != SLUICE_TASK_FAILED)
        return json_null();
    o = json_object();
    if (!o)
        return NULL;
    bad |= put(o, "reason", json_string(sluice_fail_reason_name(d->reason)));
    bad |= put(o, "message",
               ti->fail_message[0] ? admin_json_bytes(ti->fail_message, strlen(ti->fail_message))
                                   : json_null());
    bad |= put(o, "limit", str_or_null(d->limit));
    bad |= put(o, "kind", str_or_null(d->limit ? d->kind : NULL));
    bad |= put(o, "tier", str_or_null(d->limit ? d->tier : NULL));
    bad |=
        put(o, "key", d->limit && d->key ? admin_json_bytes(d->key, strlen(d->key)) : json_null());
    bad |= put(o, "limit_value", d->limit ? json_integer(d->limit_value) : json_null());
    bad |=
        put(o, "window_ms", d->limit ? json_integer(d->window_ns / SLUICE_NS_PER_MS) : json_null());
    /* A quota's figures, as seed 004's spawn error gives them (current + attempted > limit). */
    bad |= put(o, "current", d->limit && d->attempted ? json_integer(d->current) : json_null());
    bad |= put(o, "attempted", d->limit && d->attempted ? json_integer(d->attempted) : json_null());
    bad |= put(o, "retry_after_ms",
               !d->limit ? json_null()
               : d->retry_after_ns == SLUICE_NEVER
                   ? json_integer(-1)
                   : json_integer((d->retry_after_ns + SLUICE_NS_PER_MS - 1) / SLUICE_NS_PER_MS));
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *admin_explain_json(admin *a, uint64_t id)
{
    sluice_explanation ex;
    json_t *o;
    int parked, bad = 0;

    if (sluice_engine_explain(a->srv->engine, id, server_now(a->srv), &ex) != 0)
        return json_null();
    parked = ex.state == SLUICE_TASK_PARKED;
    o = json_object();
    if (!o)
        return NULL;
    bad |= put(o, "state", json_string(sluice_task_state_name(ex.state)));
    bad |= put(o, "limit", str_or_null(parked ? ex.limit : NULL));
    bad |= put(o, "key", parked && ex.key ? admin_json_bytes(ex.key, strlen(ex.key)) : json_null());
    bad |= put(o, "position", parked ? admin_json_u64(ex.position) : json_null());
    bad |= put(o, "queue_length", parked ? admin_json_u64(ex.queue_length) : json_null());
    bad |= put(o, "wake_ms", parked ? admin_json_time(ex.wake_ns) : json_null());
    bad |= put(o, "estimated_start_ms",
               ex.estimated_start_ns == SLUICE_NEVER ? json_integer(-1)
                                                     : admin_json_time(ex.estimated_start_ns));
    bad |= put(o, "text", admin_json_bytes(ex.text, strlen(ex.text)));
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

int admin_parse_id(const char *s, uint64_t *out)
{
    uint64_t v = 0;

    if (!*s || strlen(s) > 20)
        return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
            return -1;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *out = v;
    return 0;
}

enum MHD_Result admin_api_task(admin *a, struct MHD_Connection *c, const char *idtext)
{
    sluice_task_info ti;
    uint64_t id;
    json_t *o;
    int bad = 0;

    if (admin_parse_id(idtext, &id) != 0 || sluice_engine_task_info(a->srv->engine, id, &ti) != 0)
        return admin_reply_error(c, MHD_HTTP_NOT_FOUND, "not_found",
                                 "no task \"%.40s\" (it never existed, or finished long ago)",
                                 idtext);
    o = json_object();
    if (!o)
        return admin_reply_json(c, MHD_HTTP_OK, NULL);
    bad |= put(o, "id", admin_json_u64(ti.id));
    bad |= put(o, "state", json_string(sluice_task_state_name(ti.state)));
    bad |= put(o, "type", str_or_null(ti.type));
    bad |= put(o, "payload", payload_json(ti.payload, ti.payload_len));
    bad |= put(o, "task_key",
               ti.task_key ? admin_json_bytes(ti.task_key, strlen(ti.task_key)) : json_null());
    bad |= put(o, "attempt", json_integer(ti.attempt));
    bad |= put(o, "priority", json_integer(ti.priority));
    bad |= put(o, "units", json_integer(ti.units));
    bad |= put(o, "submitted_ms", admin_json_time(ti.submitted_ns));
    bad |= put(o, "not_before_ms", admin_json_time(ti.not_before_ns));
    bad |= put(o, "lease_until_ms",
               ti.state == SLUICE_TASK_RUNNING ? admin_json_time(ti.lease_until_ns) : json_null());
    bad |= put(o, "failure", failure_json(&ti));
    bad |= put(o, "explain", admin_explain_json(a, id));
    if (bad) {
        json_decref(o);
        o = NULL;
    }
    return admin_reply_json(c, MHD_HTTP_OK, o);
}

/* ---- Stats ------------------------------------------------------------------------------- */

/* Under a shared store: the task counters of every node replace the engine's in tasks, the
 * node's own go in node_tasks, and counters says how fresh the figures are. Returns non-zero
 * when a member could not be set. */
static int put_shared_tasks(admin *a, json_t *doc, json_t *tasks)
{
    static const struct {
        const char *field, *code;
    } rows[] = {{"submitted", RCTR_TASK_SUBMITTED}, {"delivered", RCTR_TASK_DELIVERED},
                {"done", RCTR_TASK_DONE},           {"failed", RCTR_TASK_FAILED},
                {"retried", RCTR_TASK_RETRIED},     {"cancelled", RCTR_TASK_CANCELLED}};
    json_t *node = json_object(), *ctr = json_object();
    rcounters_stats cs;
    int bad = !node || !ctr;

    rcounters_get_stats(a->srv, &cs);
    for (size_t i = 0; !bad && cs.active && i < sizeof rows / sizeof rows[0]; i++) {
        uint64_t cluster, own;

        rcounters_get(a->srv, rows[i].code, "", &cluster, &own);
        bad |= put(tasks, rows[i].field, admin_json_u64(cluster));
        bad |= put(node, rows[i].field, admin_json_u64(own));
    }
    if (!bad) {
        bad |= put(ctr, "scope", json_string(cs.active ? "cluster" : "node"));
        if (cs.active) {
            bad |= put(ctr, "flush_interval_ms", json_integer(cs.interval_ms));
            bad |= put(ctr, "age_ms", cs.age_ms < 0 ? json_null() : json_integer(cs.age_ms));
            bad |= put(ctr, "flushes_total", admin_json_u64(cs.flushes));
            bad |= put(ctr, "flush_failures_total", admin_json_u64(cs.failures));
            bad |= put(ctr, "unconfirmed", admin_json_u64(cs.unconfirmed));
            bad |= put(doc, "node_tasks", json_incref(node));
        }
        bad |= put(doc, "counters", json_incref(ctr));
    }
    json_decref(node);
    json_decref(ctr);
    return bad;
}

enum MHD_Result admin_api_stats(admin *a, struct MHD_Connection *c)
{
    server *s = a->srv;
    int64_t now = server_now(s);
    sluice_engine_stats es;
    json_t *doc = json_object(), *tasks = json_object();
    int bad = !doc || !tasks;

    sluice_engine_get_stats(s->engine, &es);
    if (!bad) {
        bad |= put(tasks, "queued", admin_json_u64(es.queued + es.delayed));
        bad |= put(tasks, "parked", admin_json_u64(es.parked));
        bad |= put(tasks, "running", admin_json_u64(es.running));
        bad |= put(tasks, "done", admin_json_u64(es.done));
        bad |= put(tasks, "failed", admin_json_u64(es.failed));
        bad |= put(tasks, "cancelled", admin_json_u64(es.cancelled));
        bad |= put(tasks, "delayed", admin_json_u64(es.delayed));
        bad |= put(tasks, "submitted", admin_json_u64(es.submitted));
        bad |= put_shared_tasks(a, doc, tasks);
        bad |= put(doc, "time_ms", json_integer(now / SLUICE_NS_PER_MS));
        bad |= put(doc, "uptime_s", json_integer((now - s->started_ns) / SLUICE_NS_PER_SEC));
        bad |= put(doc, "clients", admin_json_u64(s->nclients));
        bad |= put(doc, "commands_total", admin_json_u64(s->stats.commands));
        bad |= put(doc, "tasks", json_incref(tasks));
        bad |= put(doc, "limits", limits_array(a, 1));
    }
    json_decref(tasks);
    if (bad) {
        json_decref(doc);
        doc = NULL;
    }
    return admin_reply_json(c, MHD_HTTP_OK, doc);
}
