/* SPDX-License-Identifier: MIT */
/*
 * The engine fuzz harness: see engine_harness.h.
 *
 * The harness keeps its own list of every id submit returned (duplicates from task-key
 * replacement included once), so the state check can ask the engine about each and compare the
 * counts by state with sluice_engine_get_stats(). Lines are cut at HARNESS_MAX_LINE and the
 * script at HARNESS_MAX_CMDS commands so one input stays cheap whatever the fuzzer writes.
 */
#include "engine_harness.h"

#include <stdlib.h>
#include <string.h>

#include "sluice/config.h"
#include "sluice/engine.h"
#include "sluice/error.h"
#include "sluice/policy.h"
#include "sluice/policy_spec.h"

#define HARNESS_MAX_LINE  512
#define HARNESS_MAX_WORDS 12
#define HARNESS_MAX_CMDS  400
#define HARNESS_MAX_IDS   512
#define HARNESS_MAX_POLL  16
#define HARNESS_T0        (INT64_C(1763078400) * SLUICE_NS_PER_SEC)

typedef struct harness {
    sluice_engine *e;
    int64_t now_ns;
    uint64_t ids[HARNESS_MAX_IDS];
    size_t nids;
} harness;

/* Parses a decimal integer, saturating at the int64 edges; junk after the digits is ignored. */
static int64_t harness_int(const char *s)
{
    int neg = 0;
    int64_t v = 0;

    if (*s == '-' || *s == '+')
        neg = *s++ == '-';
    for (; *s >= '0' && *s <= '9'; s++) {
        int d = *s - '0';

        if (v > (INT64_MAX - d) / 10) {
            v = INT64_MAX;
            break;
        }
        v = v * 10 + d;
    }
    return neg ? (v == INT64_MAX ? INT64_MIN : -v) : v;
}

/* now + delta, saturating. */
static int64_t harness_add(int64_t now, int64_t delta)
{
    if (delta > 0 && now > INT64_MAX - delta)
        return INT64_MAX;
    if (delta < 0 && now < INT64_MIN - delta)
        return INT64_MIN;
    return now + delta;
}

/* ms to ns, saturating. */
static int64_t harness_ms(int64_t ms)
{
    if (ms > INT64_MAX / SLUICE_NS_PER_MS)
        return INT64_MAX;
    if (ms < INT64_MIN / SLUICE_NS_PER_MS)
        return INT64_MIN;
    return ms * SLUICE_NS_PER_MS;
}

static uint64_t harness_task(const harness *h, const char *w)
{
    if (!w)
        return h->nids ? h->ids[h->nids - 1] : 1;
    if (w[0] == '#')
        return (uint64_t)harness_int(w + 1);
    if (h->nids == 0)
        return 1;
    return h->ids[(uint64_t)harness_int(w) % h->nids];
}

static void harness_remember(harness *h, uint64_t id)
{
    for (size_t i = 0; i < h->nids; i++)
        if (h->ids[i] == id)
            return;
    if (h->nids < HARNESS_MAX_IDS)
        h->ids[h->nids++] = id;
}

/* The stats against the states of the known tasks. */
static const char *harness_check(const harness *h)
{
    sluice_engine_stats st;
    size_t queued = 0, parked = 0, running = 0;

    sluice_engine_get_stats(h->e, &st);
    for (size_t i = 0; i < h->nids; i++) {
        sluice_task_info info;

        if (sluice_engine_task_info(h->e, h->ids[i], &info) != SLUICE_OK)
            continue;
        if (info.id != h->ids[i])
            return "task info of another id";
        queued += info.state == SLUICE_TASK_QUEUED;
        parked += info.state == SLUICE_TASK_PARKED;
        running += info.state == SLUICE_TASK_RUNNING;
    }
    if (queued != st.queued + st.delayed)
        return "stats queued + delayed differ from the tasks queued";
    if (parked != st.parked)
        return "stats parked differ from the tasks parked";
    if (running != st.running)
        return "stats running differ from the tasks running";
    if (st.parked_peak < st.parked)
        return "parked_peak below parked";
    if (st.done + st.failed + st.cancelled > st.submitted)
        return "more tasks finished than submitted";
    return NULL;
}

static const char *cmd_submit(harness *h, char **w, size_t n)
{
    sluice_task_spec spec;
    sluice_submit_error err;
    uint64_t id = 0;
    int rc;

    memset(&spec, 0, sizeof spec);
    spec.type = n > 1 ? w[1] : "t";
    for (size_t i = 2; i < n; i++) {
        if (strncmp(w[i], "units=", 6) == 0) {
            spec.units = harness_int(w[i] + 6);
        } else if (strncmp(w[i], "priority=", 9) == 0) {
            int64_t p = harness_int(w[i] + 9);

            spec.has_priority = 1;
            spec.priority = p > 1000000 ? 1000000 : p < -1000000 ? -1000000 : (int)p;
        } else if (strncmp(w[i], "key=", 4) == 0) {
            spec.key = w[i] + 4;
            spec.key_len = strlen(spec.key);
        } else if (strncmp(w[i], "taskkey=", 8) == 0) {
            spec.task_key = w[i] + 8;
            spec.task_key_len = strlen(spec.task_key);
        } else if (strncmp(w[i], "after=", 6) == 0) {
            spec.not_before_ns = harness_add(h->now_ns, harness_ms(harness_int(w[i] + 6)));
        } else {
            spec.payload = w[i];
            spec.payload_len = strlen(w[i]);
        }
    }
    rc = sluice_engine_submit(h->e, &spec, h->now_ns, &id, &err);
    if (rc == SLUICE_OK)
        harness_remember(h, id);
    else if (err.message[0] == '\0' && rc != SLUICE_ENOMEM)
        return "submit refused without a message";
    return NULL;
}

static const char *cmd_poll(harness *h, char **w, size_t n)
{
    sluice_delivery out[HARNESS_MAX_POLL];
    const char *types[1];
    int64_t max = n > 1 ? harness_int(w[1]) : 1;
    int got;

    if (max < 0 || max > HARNESS_MAX_POLL)
        max = HARNESS_MAX_POLL;
    types[0] = n > 2 ? w[2] : NULL;
    got = sluice_engine_poll(h->e, types, n > 2 ? 1 : 0, (size_t)max, h->now_ns, out);
    if (got < 0)
        return got == SLUICE_ENOMEM ? NULL : "poll failed";
    if (got > max)
        return "poll delivered more than asked";
    for (int i = 0; i < got; i++) {
        sluice_task_info info;

        if (out[i].attempt < 1)
            return "delivery with attempt < 1";
        if (sluice_engine_task_info(h->e, out[i].id, &info) != SLUICE_OK ||
            info.state != SLUICE_TASK_RUNNING)
            return "delivered task not running";
        harness_remember(h, out[i].id);
    }
    return NULL;
}

static const char *cmd_reads(harness *h, const char *verb, uint64_t id)
{
    if (strcmp(verb, "explain") == 0) {
        sluice_explanation ex;

        (void)sluice_engine_explain(h->e, id, h->now_ns, &ex);
    } else if (strcmp(verb, "charges") == 0) {
        sluice_charge ch[8];
        int nch = sluice_engine_task_charges(h->e, id, ch, 8);

        for (int i = 0; i < nch && i < 8; i++)
            if (!ch[i].limit || !ch[i].key || strlen(ch[i].key) != ch[i].keylen)
                return "charge with a broken name or key";
    } else {
        sluice_task_info info;

        (void)sluice_engine_task_info(h->e, id, &info);
    }
    return NULL;
}

static void cmd_limit(harness *h, char **w, size_t n)
{
    sluice_limit_policy p;
    char msg[256];

    if (n < 3)
        return;
    if (sluice_spec_parse_policy(w[2], &p, msg, sizeof msg) == SLUICE_OK) {
        free(p.name);
        p.name = strdup(w[1]);
        if (p.name)
            (void)sluice_engine_set_limit(h->e, &p, h->now_ns, msg, sizeof msg);
    }
    sluice_limit_policy_clear(&p);
}

/* A YAML configuration between the lines "config" and "end", applied as CONFIG RELOAD does:
 * parse, then install its limits and types over the running engine. */
static void cmd_config(harness *h, const char *text, size_t len)
{
    sluice_config c;
    char msg[256];

    if (sluice_config_parse(text, len, "fuzz.yaml", &c, msg, sizeof msg) == SLUICE_OK)
        (void)sluice_config_apply(&c, h->e, h->now_ns, msg, sizeof msg);
    sluice_config_clear(&c);
}

static const char *harness_command(harness *h, char **w, size_t n)
{
    const char *v = w[0];
    uint64_t id = harness_task(h, n > 1 ? w[1] : NULL);
    int64_t arg2 = n > 2 ? harness_int(w[2]) : -1;

    if (strcmp(v, "limit") == 0)
        cmd_limit(h, w, n);
    else if (strcmp(v, "dellimit") == 0 && n > 1)
        (void)sluice_engine_del_limit(h->e, w[1], h->now_ns);
    else if (strcmp(v, "submit") == 0)
        return cmd_submit(h, w, n);
    else if (strcmp(v, "poll") == 0)
        return cmd_poll(h, w, n);
    else if (strcmp(v, "ack") == 0)
        (void)sluice_engine_ack(h->e, id, arg2, h->now_ns);
    else if (strcmp(v, "fail") == 0)
        (void)sluice_engine_fail(h->e, id,
                                 n > 2 && strcmp(w[2], "dead") == 0 ? SLUICE_FAIL_MODE_DEAD
                                                                    : SLUICE_FAIL_MODE_RETRY,
                                 "fuzz", h->now_ns);
    else if (strcmp(v, "retry") == 0)
        (void)sluice_engine_fail_retry_after(h->e, id, harness_ms(arg2), NULL, h->now_ns);
    else if (strcmp(v, "cancel") == 0)
        (void)sluice_engine_cancel(h->e, id, h->now_ns);
    else if (strcmp(v, "touch") == 0)
        (void)sluice_engine_touch(h->e, id, h->now_ns, NULL);
    else if (strcmp(v, "explain") == 0 || strcmp(v, "charges") == 0 || strcmp(v, "info") == 0)
        return cmd_reads(h, v, id);
    else if (strcmp(v, "advance") == 0 && n > 1)
        h->now_ns = harness_add(h->now_ns, harness_ms(harness_int(w[1])));
    else if (strcmp(v, "tick") == 0)
        (void)sluice_engine_tick(h->e, h->now_ns);
    else if (strcmp(v, "wake") == 0) {
        int64_t at = sluice_engine_next_wake(h->e);

        if (at != SLUICE_NEVER && at > h->now_ns)
            h->now_ns = at;
        (void)sluice_engine_tick(h->e, h->now_ns);
    }
    return NULL;
}

/* Splits line (NUL-terminated, modified) into words. */
static size_t harness_split(char *line, char **w)
{
    size_t n = 0;
    char *p = line;

    while (*p && n < HARNESS_MAX_WORDS) {
        while (*p == ' ' || *p == '\t')
            p++;
        if (!*p)
            break;
        w[n++] = p;
        while (*p && *p != ' ' && *p != '\t')
            p++;
        if (*p)
            *p++ = '\0';
    }
    return n;
}

const char *engine_harness_run(const uint8_t *data, size_t size)
{
    static harness h;
    sluice_engine_policy pol;
    const char *in = (const char *)data;
    const char *why = NULL;
    size_t at = 0, ncmds = 0;

    memset(&h, 0, sizeof h);
    h.now_ns = HARNESS_T0;
    sluice_engine_policy_init(&pol);
    pol.max_tasks = 256; /* small caps: the fuzzer reaches EBUSY paths in a few lines */
    pol.max_parked = 64;
    pol.max_finished = 32;
    if (sluice_engine_new(&pol, &h.e) != SLUICE_OK)
        return "engine_new failed";
    while (at < size && ncmds < HARNESS_MAX_CMDS && !why) {
        char line[HARNESS_MAX_LINE + 1], *w[HARNESS_MAX_WORDS];
        const char *eol = memchr(in + at, '\n', size - at);
        size_t len = eol ? (size_t)(eol - (in + at)) : size - at;
        size_t n;

        memcpy(line, in + at, len < HARNESS_MAX_LINE ? len : HARNESS_MAX_LINE);
        line[len < HARNESS_MAX_LINE ? len : HARNESS_MAX_LINE] = '\0';
        at += len + (eol != NULL);
        ncmds++;
        if (strlen(line) != (len < HARNESS_MAX_LINE ? len : HARNESS_MAX_LINE))
            continue; /* a NUL inside the line: the commands take C strings */
        n = harness_split(line, w);
        if (n == 0)
            continue;
        if (strcmp(w[0], "config") == 0) {
            /* The YAML runs to a line "end" (or the end of the input). */
            const char *start = in + at, *stop = NULL;
            size_t rest = size - at;

            for (size_t i = 0; i + 3 <= rest; i++)
                if ((i == 0 || start[i - 1] == '\n') && memcmp(start + i, "end", 3) == 0 &&
                    (i + 3 == rest || start[i + 3] == '\n')) {
                    stop = start + i;
                    break;
                }
            len = stop ? (size_t)(stop - start) : rest;
            cmd_config(&h, start, len);
            at += len + (stop ? (size_t)(3 + (len + 3 < rest)) : 0);
        } else {
            why = harness_command(&h, w, n);
        }
        if (!why)
            why = harness_check(&h);
    }
    sluice_engine_free(h.e);
    h.e = NULL;
    return why;
}
