/* SPDX-License-Identifier: MIT */
/*
 * The RESP reader harness: see resp_harness.h.
 *
 * Each run reads the input twice, once whole and once split as the control byte says, and
 * summarises each reading as a digest of the commands (FNV-1a over argc, lengths and bytes), their
 * number and the final state; the two summaries must be equal. The whole reading also writes every
 * command back as a multibulk with the writer, and a third reader must get the same commands from
 * that. Nothing here aborts: the first broken invariant is returned as text, so the fuzz target
 * can trap on it and the corpus test can print it.
 */
#include "resp_harness.h"

#include <stdio.h>
#include <string.h>

#include "server/resp.h"
#include "sluice/error.h"

/* What a reading produced. */
typedef struct summary {
    uint64_t digest;  /* FNV-1a over every command */
    size_t ncommands; /* commands read */
    int rc;           /* 0 (input ended cleanly or mid-command) or the sticky error */
    char err[128];    /* its message */
} summary;

static void digest_bytes(uint64_t *h, const void *p, size_t n)
{
    const unsigned char *b = p;

    for (size_t i = 0; i < n; i++) {
        *h ^= b[i];
        *h *= 0x100000001b3u;
    }
}

static void summary_init(summary *s)
{
    memset(s, 0, sizeof *s);
    s->digest = 0xcbf29ce484222325u;
}

/* Checks one command against the limits and adds it to s (and to w when given). */
static const char *take_command(const resp_command *cmd, const resp_limits *lim, summary *s,
                                resp_writer *w)
{
    size_t total = 0;

    if (cmd->argc == 0)
        return "a command with no argument";
    if (cmd->argc > lim->max_args)
        return "argc over max_args";
    for (size_t i = 0; i < cmd->argc; i++) {
        if (cmd->argvlen[i] > lim->max_bulk_len)
            return "argument over max_bulk_len";
        total += cmd->argvlen[i];
        if (cmd->argv[i][cmd->argvlen[i]] != '\0')
            return "argument not NUL-terminated";
    }
    if (total > lim->max_query_len)
        return "command over max_query_len";
    digest_bytes(&s->digest, &cmd->argc, sizeof cmd->argc);
    for (size_t i = 0; i < cmd->argc; i++) {
        digest_bytes(&s->digest, &cmd->argvlen[i], sizeof cmd->argvlen[i]);
        digest_bytes(&s->digest, cmd->argv[i], cmd->argvlen[i]);
    }
    s->ncommands++;
    if (w) {
        resp_array(w, cmd->argc);
        for (size_t i = 0; i < cmd->argc; i++)
            resp_bulk(w, cmd->argv[i], cmd->argvlen[i]);
    }
    return NULL;
}

/* Checks that a failed reader stays failed, and records its error in s. */
static const char *check_failed(resp_reader *r, int rc, summary *s)
{
    const char *msg = resp_reader_error(r);
    resp_command cmd;

    if (rc != SLUICE_EPARSE)
        return rc == SLUICE_ENOMEM ? "unexpected out of memory" : "unexpected return code";
    if (!msg)
        return "no error message after an error";
    if (strncmp(msg, "Protocol error: ", 16) != 0)
        return "error message not a protocol error";
    if (strchr(msg, '\r') || strchr(msg, '\n'))
        return "error message with CR or LF";
    for (int i = 0; i < 2; i++) {
        if (resp_reader_next(r, &cmd) != rc || cmd.argc != 0 || cmd.argv != NULL)
            return "error not sticky";
        if (resp_reader_feed(r, "*1\r\n$1\r\nx\r\n", 11) != SLUICE_OK)
            return "feed after a protocol error did not drop the bytes";
        if (resp_reader_buffered(r) != 0)
            return "failed reader still buffers bytes";
    }
    if (strcmp(resp_reader_error(r), msg) != 0)
        return "error message changed";
    s->rc = rc;
    snprintf(s->err, sizeof s->err, "%s", msg);
    return NULL;
}

/* Reads every complete command. Returns NULL and sets *stop when the reader failed. */
static const char *drain(resp_reader *r, const resp_limits *lim, summary *s, resp_writer *w,
                         int *stop)
{
    resp_command cmd;
    int rc;

    *stop = 0;
    while ((rc = resp_reader_next(r, &cmd)) == 1) {
        const char *why = take_command(&cmd, lim, s, w);

        if (why)
            return why;
    }
    if (rc == 0)
        return NULL;
    *stop = 1;
    return check_failed(r, rc, s);
}

static const char *feed(resp_reader *r, const uint8_t *p, size_t n)
{
    int rc = resp_reader_feed(r, (const char *)p, n);

    if (rc == SLUICE_ENOMEM)
        return "unexpected out of memory in feed";
    return rc == SLUICE_OK ? NULL : "unexpected return code from feed";
}

/* Reads in[0..n) in the pieces the control byte chooses. */
static const char *read_split(resp_reader *r, const resp_limits *lim, uint8_t ctl,
                              const uint8_t *in, size_t n, summary *s)
{
    uint32_t x = 0x9e3779b9u ^ ctl; /* xorshift32 state for the random splits */
    size_t at = 0, feeds = 0;
    int stop = 0;

    while (at < n && !stop) {
        size_t chunk;
        const char *why;

        switch (ctl & 3) {
        case 0:
            chunk = 1;
            break;
        case 1:
            chunk = (size_t)((ctl >> 2) & 31) + 1;
            break;
        default:
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            chunk = (size_t)(x % 17) + 1;
            break;
        }
        if (chunk > n - at)
            chunk = n - at;
        why = feed(r, in + at, chunk);
        if (why)
            return why;
        at += chunk;
        feeds++;
        /* Mode 3 lets bytes pile up across two reads before draining. */
        if ((ctl & 3) == 3 && feeds % 2 == 1 && at < n)
            continue;
        why = drain(r, lim, s, NULL, &stop);
        if (why)
            return why;
    }
    return NULL;
}

static void tight_limits(resp_limits *l)
{
    l->max_bulk_len = 16;
    l->max_args = 4;
    l->max_inline_len = 24;
    l->max_query_len = 40;
}

const char *resp_harness_run(const uint8_t *data, size_t size)
{
    resp_limits lim;
    resp_reader *whole = NULL, *split = NULL, *again = NULL;
    resp_writer w;
    summary s_whole, s_split, s_again;
    const char *why = NULL;
    uint8_t ctl;
    int stop;

    if (size == 0)
        return NULL;
    ctl = data[0];
    data++;
    size--;
    resp_limits_init(&lim);
    if (ctl & 0x80)
        tight_limits(&lim);
    if ((ctl & 0xc0) == 0xc0)
        lim.max_inline_len = 1; /* reaches the "too big ... count string" errors */
    summary_init(&s_whole);
    summary_init(&s_split);
    summary_init(&s_again);
    resp_writer_init(&w, 2);
    if (resp_reader_new(&lim, &whole) != SLUICE_OK || resp_reader_new(&lim, &split) != SLUICE_OK ||
        resp_reader_new(&lim, &again) != SLUICE_OK) {
        why = "unexpected out of memory in resp_reader_new";
        goto done;
    }

    if (size > 0) {
        why = feed(whole, data, size);
        if (why)
            goto done;
    }
    why = drain(whole, &lim, &s_whole, &w, &stop);
    if (why)
        goto done;
    if (w.failed) {
        why = "writer failed";
        goto done;
    }

    why = read_split(split, &lim, ctl, data, size, &s_split);
    if (why)
        goto done;
    if (s_split.ncommands != s_whole.ncommands || s_split.digest != s_whole.digest) {
        why = "split reading gave other commands than whole reading";
        goto done;
    }
    if (s_split.rc != s_whole.rc || strcmp(s_split.err, s_whole.err) != 0) {
        why = "split reading ended in another state than whole reading";
        goto done;
    }
    if (s_whole.rc == 0 && resp_reader_buffered(split) != resp_reader_buffered(whole)) {
        why = "split reading left another number of bytes buffered";
        goto done;
    }

    if (w.len > 0) {
        why = feed(again, (const uint8_t *)w.buf, w.len);
        if (why)
            goto done;
    }
    why = drain(again, &lim, &s_again, NULL, &stop);
    if (why)
        goto done;
    if (s_again.rc != 0 || resp_reader_buffered(again) != 0 ||
        s_again.ncommands != s_whole.ncommands || s_again.digest != s_whole.digest)
        why = "commands written back did not read the same";

done:
    resp_writer_clear(&w);
    resp_reader_free(again);
    resp_reader_free(split);
    resp_reader_free(whole);
    return why;
}
