/* SPDX-License-Identifier: MIT */
/*
 * Policy specs: the parser and formatter of the one-line text of a named limit's policy (see
 * include/sluice/policy_spec.h for the grammar).
 *
 * The parser splits the text on commas and sorts the items: the four policy options are read
 * here, everything else is handed, in its order, to the limit spec parser
 * (sluice_spec_parse_limit), so the limit grammar and its messages stay in one place. It fills a
 * local policy and moves it out only once everything, validation included, succeeded, so a
 * failed parse leaves *out holding nothing to free.
 *
 * Messages quote the item at fault with control bytes escaped and long text cut short, so one
 * stays one line of bounded length whatever the input.
 */
#include "sluice/policy_spec.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "base/attr.h"
#include "base/quote.h"
#include "policy/dotpath.h"
#include "policy/keytpl.h"
#include "policy/policy_check.h"
#include "sluice/error.h"
#include "sluice/spec.h"

/* Longest quoted text in a message, in input bytes. */
#define QUOTE_MAX 64

/* A quoted, escaped copy of some text for a message. */
typedef struct quoted {
    char s[QUOTE_MAX * 4 + 8];
} quoted;

static const char *quote(quoted *q, const char *s, size_t n)
{
    size_t o = 0;

    q->s[o++] = '"';
    for (size_t i = 0; i < n && i < QUOTE_MAX; i++) {
        unsigned char c = (unsigned char)s[i];

        if (c < 0x20 || c == 0x7f || c == '"' || c == '\\') {
            snprintf(q->s + o, sizeof(q->s) - o, "\\x%02x", c);
            o += 4;
        } else {
            q->s[o++] = (char)c;
        }
    }
    if (n > QUOTE_MAX) {
        memcpy(q->s + o, "...", 3);
        o += 3;
    }
    q->s[o++] = '"';
    q->s[o] = '\0';
    return q->s;
}

PRINTF_ATTR(4, 5)
static int fail(int rc, char *msg, size_t msglen, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vmsgf(msg, msglen, fmt, ap);
    va_end(ap);
    return rc;
}

/* The policy options, as bits of a `seen` set. */
enum {
    OPT_KEY = 1u << 0,
    OPT_MISSING_KEY = 1u << 1,
    OPT_OVERFLOW = 1u << 2,
    OPT_UNITS = 1u << 3,
    OPT_MODE = 1u << 4,
    OPT_OVERRIDE = 1u << 5, /* may repeat, once per key */
};

typedef struct popt {
    const char *name; /* with its '=' */
    unsigned bit;
} popt;

static const popt popts[] = {
    {"key=", OPT_KEY},           {"missing_key=", OPT_MISSING_KEY},
    {"overflow=", OPT_OVERFLOW}, {"units=", OPT_UNITS},
    {"mode=", OPT_MODE},         {"override.", OPT_OVERRIDE},
};

#define N_POPTS (sizeof(popts) / sizeof(popts[0]))

/* Returns the policy option the item starts with, or NULL. */
static const popt *find_popt(const char *item, size_t n)
{
    for (size_t i = 0; i < N_POPTS; i++) {
        size_t k = strlen(popts[i].name);

        if (n >= k && memcmp(item, popts[i].name, k) == 0)
            return &popts[i];
    }
    return NULL;
}

static int is_word(const char *v, size_t n, const char *word)
{
    return strlen(word) == n && memcmp(v, word, n) == 0;
}

/* Copies a dot path value into *dst after checking it. */
static int take_path(const char *what, const char *v, size_t n, char **dst, const char *text,
                     char *msg, size_t msglen)
{
    char vmsg[200];
    quoted q1, q2;
    char *p;

    /* A control byte would make the canonical text span lines or hide characters. */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)v[i];

        if (c < 0x20 || c == 0x7f)
            return fail(SLUICE_EINVAL, msg, msglen,
                        "bad %s path %s in %s: control byte at offset %zu", what, quote(&q1, v, n),
                        quote(&q2, text, strlen(text)), i);
    }
    p = alloc_memdup0(v, n);
    if (!p)
        return fail(SLUICE_ENOMEM, msg, msglen, "out of memory");
    /* A limit's key may also be a template (keytpl.h); units and tiers are plain paths. */
    if ((strcmp(what, "key") == 0 ? keytpl_validate(p, NULL, vmsg, sizeof(vmsg))
                                  : dotpath_validate(p, vmsg, sizeof(vmsg))) != 0) {
        alloc_free(p);
        return fail(SLUICE_EINVAL, msg, msglen, "bad %s path %s in %s: %s", what, quote(&q1, v, n),
                    quote(&q2, text, strlen(text)), vmsg);
    }
    *dst = p;
    return 0;
}

/* Reads `KEY=SPEC` (the limit spec with ';' for ','), the value of an override option, and
 * appends the override to p. */
static int parse_override(const char *v, size_t vn, sluice_limit_policy *p, const char *text,
                          char *msg, size_t msglen)
{
    const char *eq = memchr(v, '=', vn);
    char vmsg[200], spec[SLUICE_SPEC_MAX_LEN];
    sluice_key_override *arr, *o;
    size_t klen = eq ? (size_t)(eq - v) : 0, sn = eq ? vn - klen - 1 : 0;
    quoted q1, q2;
    int rc;

    if (!eq || policy_check_override_key(v, klen, vmsg, sizeof(vmsg)) != 0)
        return fail(SLUICE_EPARSE, msg, msglen,
                    "bad override %s in %s: expected override.KEY=SPEC, e.g. "
                    "override.tenant-42=rate=1000/1s;burst=100%s%s",
                    quote(&q1, v, vn), quote(&q2, text, strlen(text)), eq ? ": " : "",
                    eq ? vmsg : "");
    if (policy_find_override(p, v, klen) >= 0)
        return fail(SLUICE_EPARSE, msg, msglen, "key %s has two overrides in %s",
                    quote(&q1, v, klen), quote(&q2, text, strlen(text)));
    if (p->noverrides >= SLUICE_MAX_KEY_OVERRIDES)
        return fail(SLUICE_EINVAL, msg, msglen, "at most %d keys have overrides, in %s",
                    SLUICE_MAX_KEY_OVERRIDES, quote(&q2, text, strlen(text)));
    if (sn >= sizeof(spec))
        return fail(SLUICE_EPARSE, msg, msglen, "override of key %s too long in %s",
                    quote(&q1, v, klen), quote(&q2, text, strlen(text)));
    /* Inside an option a comma would end it: the override's own options are split by ';'. */
    for (size_t i = 0; i < sn; i++)
        spec[i] = eq[1 + i] == ';' ? ',' : eq[1 + i];
    spec[sn] = '\0';
    arr = alloc_realloc(p->overrides, (p->noverrides + 1) * sizeof(*arr));
    if (!arr)
        return fail(SLUICE_ENOMEM, msg, msglen, "out of memory");
    p->overrides = arr;
    o = &arr[p->noverrides];
    memset(o, 0, sizeof(*o));
    rc = sluice_spec_parse_limit(spec, &o->def, vmsg, sizeof(vmsg));
    if (rc != 0)
        return fail(rc, msg, msglen, "override of key %s in %s: %s", quote(&q1, v, klen),
                    quote(&q2, text, strlen(text)), vmsg);
    o->key = alloc_memdup0(v, klen);
    if (!o->key)
        return fail(SLUICE_ENOMEM, msg, msglen, "out of memory");
    p->noverrides++;
    return 0;
}

/* Reads one policy option (item = "name=value") into *p. */
static int parse_popt(const popt *o, const char *item, size_t n, sluice_limit_policy *p,
                      const char *text, char *msg, size_t msglen)
{
    const char *v = item + strlen(o->name);
    size_t vn = n - strlen(o->name);
    quoted q1, q2;

    if (vn == 0)
        return fail(SLUICE_EPARSE, msg, msglen, "missing value in %s in %s", quote(&q1, item, n),
                    quote(&q2, text, strlen(text)));
    switch (o->bit) {
    case OPT_OVERRIDE:
        return parse_override(v, vn, p, text, msg, msglen);
    case OPT_KEY:
        if (is_word(v, vn, "none"))
            p->key_source = SLUICE_KEY_NONE;
        else if (is_word(v, vn, "explicit"))
            p->key_source = SLUICE_KEY_EXPLICIT;
        else {
            p->key_source = SLUICE_KEY_PATH;
            return take_path("key", v, vn, &p->key_path, text, msg, msglen);
        }
        return 0;
    case OPT_MISSING_KEY:
        p->missing_key_global = is_word(v, vn, "global");
        p->missing_key_skip = is_word(v, vn, "skip");
        if (!p->missing_key_global && !p->missing_key_skip && !is_word(v, vn, "error"))
            return fail(SLUICE_EPARSE, msg, msglen,
                        "bad value %s in %s: expected missing_key=global, missing_key=skip or "
                        "missing_key=error",
                        quote(&q1, v, vn), quote(&q2, text, strlen(text)));
        return 0;
    case OPT_OVERFLOW:
        if (is_word(v, vn, "wait"))
            p->overflow = SLUICE_OVERFLOW_WAIT;
        else if (is_word(v, vn, "reject"))
            p->overflow = SLUICE_OVERFLOW_REJECT;
        else
            return fail(SLUICE_EPARSE, msg, msglen,
                        "bad value %s in %s: expected overflow=wait or overflow=reject",
                        quote(&q1, v, vn), quote(&q2, text, strlen(text)));
        return 0;
    case OPT_MODE:
        if (is_word(v, vn, "enforce"))
            p->mode = SLUICE_MODE_ENFORCE;
        else if (is_word(v, vn, "shadow"))
            p->mode = SLUICE_MODE_SHADOW;
        else
            return fail(SLUICE_EPARSE, msg, msglen,
                        "bad value %s in %s: expected mode=enforce or mode=shadow",
                        quote(&q1, v, vn), quote(&q2, text, strlen(text)));
        return 0;
    default: /* OPT_UNITS */
        if (is_word(v, vn, "task")) {
            p->units_source = SLUICE_UNITS_TASK;
            return 0;
        }
        if (v[0] >= '0' && v[0] <= '9') {
            int64_t u = 0;

            for (size_t i = 0; i < vn; i++) {
                if (v[i] < '0' || v[i] > '9')
                    return fail(SLUICE_EPARSE, msg, msglen,
                                "bad units %s in %s: expected task, a number of units or a dot "
                                "path",
                                quote(&q1, v, vn), quote(&q2, text, strlen(text)));
                if (u > (SLUICE_MAX_PERMITS - (v[i] - '0')) / 10)
                    return fail(SLUICE_ERANGE, msg, msglen,
                                "units %s in %s: at most %" PRId64 " units", quote(&q1, v, vn),
                                quote(&q2, text, strlen(text)), SLUICE_MAX_PERMITS);
                u = u * 10 + (v[i] - '0');
            }
            if (u < 1)
                return fail(SLUICE_EINVAL, msg, msglen, "units must be at least 1 in %s",
                            quote(&q2, text, strlen(text)));
            p->units_source = SLUICE_UNITS_FIXED;
            p->units_fixed = u;
            return 0;
        }
        p->units_source = SLUICE_UNITS_PATH;
        return take_path("units", v, vn, &p->units_path, text, msg, msglen);
    }
}

int sluice_spec_parse_policy(const char *text, sluice_limit_policy *out, char *msg, size_t msglen)
{
    sluice_limit_policy p;
    const char *item, *end, *comma;
    char *limit_text = NULL;
    size_t len, lpos = 0, itemlen;
    unsigned seen = 0;
    int first = 1, rc;
    char vmsg[256];
    char placeholder[] = "x";
    quoted q1, q2;

    if (msg && msglen > 0)
        msg[0] = '\0';
    if (out)
        sluice_limit_policy_init(out);
    if (!text || !out)
        return fail(SLUICE_EINVAL, msg, msglen, "no policy spec given");
    sluice_limit_policy_init(&p);
    len = strlen(text);
    limit_text = alloc_malloc(len + 1);
    if (!limit_text)
        return fail(SLUICE_ENOMEM, msg, msglen, "out of memory");

    end = text + len;
    item = text;
    for (;;) {
        const popt *o;

        comma = memchr(item, ',', (size_t)(end - item));
        itemlen = comma ? (size_t)(comma - item) : (size_t)(end - item);
        o = find_popt(item, itemlen);
        if (o && first) {
            rc = fail(SLUICE_EPARSE, msg, msglen,
                      "option %s comes before the limit kind in %s: a spec starts with the "
                      "kind, e.g. rate=10/1s,key=explicit",
                      quote(&q1, item, itemlen), quote(&q2, text, len));
            goto fail;
        }
        if (o) {
            if ((seen & o->bit) && o->bit != OPT_OVERRIDE) {
                rc = fail(SLUICE_EPARSE, msg, msglen, "option %.*s given twice in %s",
                          (int)(strlen(o->name) - 1), o->name, quote(&q2, text, len));
                goto fail;
            }
            seen |= o->bit;
            rc = parse_popt(o, item, itemlen, &p, text, msg, msglen);
            if (rc != 0)
                goto fail;
        } else {
            if (!first)
                limit_text[lpos++] = ',';
            memcpy(limit_text + lpos, item, itemlen);
            lpos += itemlen;
        }
        first = 0;
        if (!comma)
            break;
        item = comma + 1;
    }
    limit_text[lpos] = '\0';

    rc = sluice_spec_parse_limit(limit_text, &p.def, msg, msglen);
    if (rc != 0)
        goto fail;
    for (size_t i = 0; i < p.noverrides; i++) {
        /* Overrides share the limit's key table settings (spec.h options of the limit). */
        p.overrides[i].def.max_keys = p.def.max_keys;
        p.overrides[i].def.key_overflow = p.def.key_overflow;
        p.overrides[i].def.max_key_len = p.def.max_key_len;
    }
    if ((seen & OPT_MISSING_KEY) && p.key_source == SLUICE_KEY_NONE) {
        rc = fail(SLUICE_EPARSE, msg, msglen,
                  "missing_key applies to key=explicit or a key path, not to key=none, in %s",
                  quote(&q2, text, len));
        goto fail;
    }
    /* The remaining checks (units that fit the capacity) are the policy's own; they need a
     * name, which the caller gives later. */
    p.name = placeholder;
    rc = policy_check_limit(&p, NULL, vmsg, sizeof(vmsg));
    p.name = NULL;
    if (rc != 0) {
        fail(rc, msg, msglen, "%s in %s", vmsg, quote(&q2, text, len));
        goto fail;
    }
    alloc_free(limit_text);
    *out = p;
    return 0;

fail:
    alloc_free(limit_text);
    sluice_limit_policy_clear(&p);
    return rc;
}

/* ---- Formatting -------------------------------------------------------------------------- */

PRINTF_ATTR(4, 5)
static void append(char *buf, size_t len, size_t *pos, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (*pos >= len)
        return;
    va_start(ap, fmt);
    n = vsnprintf(buf + *pos, len - *pos, fmt, ap);
    va_end(ap);
    *pos = n < 0 ? len : *pos + (size_t)n;
}

/* Appends ",override.KEY=SPEC" for every override, in byte order of the keys so that the text is
 * canonical whatever order they were added in. */
static int format_overrides(const sluice_limit_policy *p, char *buf, size_t len, size_t *pos)
{
    const char *last = NULL;

    for (size_t n = 0; n < p->noverrides; n++) {
        const sluice_key_override *next = NULL;
        char spec[SLUICE_SPEC_MAX_LEN];
        int rc;

        for (size_t i = 0; i < p->noverrides; i++) {
            const sluice_key_override *o = &p->overrides[i];

            if ((!last || strcmp(o->key, last) > 0) && (!next || strcmp(o->key, next->key) < 0))
                next = o;
        }
        if (!next)
            break;
        rc = sluice_spec_format_limit(&next->def, spec, sizeof(spec));
        if (rc != 0)
            return rc;
        for (char *c = spec; *c; c++)
            if (*c == ',')
                *c = ';';
        append(buf, len, pos, ",override.%s=%s", next->key, spec);
        last = next->key;
    }
    return 0;
}

int sluice_spec_format_policy(const sluice_limit_policy *p, char *buf, size_t len)
{
    size_t pos;
    int rc;

    if (buf && len > 0)
        buf[0] = '\0';
    if (!p || !buf || p->ntiers > 0 || p->tier_path)
        return SLUICE_EINVAL;
    rc = sluice_spec_format_limit(&p->def, buf, len);
    if (rc != 0)
        return rc;
    pos = strlen(buf);
    switch (p->key_source) {
    case SLUICE_KEY_NONE:
        break;
    case SLUICE_KEY_EXPLICIT:
        append(buf, len, &pos, ",key=explicit");
        break;
    case SLUICE_KEY_PATH:
        append(buf, len, &pos, ",key=%s", p->key_path ? p->key_path : "");
        break;
    }
    if (p->key_source != SLUICE_KEY_NONE && p->missing_key_global)
        append(buf, len, &pos, ",missing_key=global");
    if (p->key_source != SLUICE_KEY_NONE && p->missing_key_skip)
        append(buf, len, &pos, ",missing_key=skip");
    if (p->overflow == SLUICE_OVERFLOW_REJECT)
        append(buf, len, &pos, ",overflow=reject");
    if (p->units_source == SLUICE_UNITS_FIXED)
        append(buf, len, &pos, ",units=%" PRId64, p->units_fixed);
    else if (p->units_source == SLUICE_UNITS_PATH)
        append(buf, len, &pos, ",units=%s", p->units_path ? p->units_path : "");
    if (p->mode == SLUICE_MODE_SHADOW)
        append(buf, len, &pos, ",mode=shadow");
    rc = format_overrides(p, buf, len, &pos);
    if (rc != 0) {
        buf[0] = '\0';
        return rc;
    }
    if (pos >= len) {
        buf[0] = '\0';
        return SLUICE_ERANGE;
    }
    return 0;
}

int sluice_spec_parse_mode(const char *text, sluice_limit_mode *mode)
{
    if (!text || !mode)
        return 0;
    if (strcmp(text, "mode=enforce") == 0)
        *mode = SLUICE_MODE_ENFORCE;
    else if (strcmp(text, "mode=shadow") == 0)
        *mode = SLUICE_MODE_SHADOW;
    else
        return 0;
    return 1;
}
