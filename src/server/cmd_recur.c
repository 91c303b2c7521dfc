/* SPDX-License-Identifier: MIT */
/*
 * Recurring series over the wire: RECUR.ADD, RECUR.DEL, RECUR.INFO (the engine's
 * sluice_engine_add_recurring and friends, include/sluice/engine.h).
 *
 *   RECUR.ADD name type payload (EVERY ms | CRON "m h dom mon dow") [KEY k] [START unix_ms]
 *             [END unix_ms] [MAX n]
 *
 * Each occurrence is an ordinary task of `type` (TASK.GET hands it out), throttled by the type's
 * limits; adding a name again replaces the series. A series is durable like a task: RECUR.ADD
 * and RECUR.DEL are answered once the change is committed (durable.h), and a series comes back
 * after a restart with its run counters, resuming at its first schedule point after the restart.
 *
 * With a redis store the arguments are checked here all the same, then the series lives in Redis
 * and every node fires it (rrecur.h).
 */
#include <stdio.h>
#include <string.h>

#include "server/commands.h"
#include "server/rrecur.h"
#include "server/rstore.h"
#include "sluice/error.h"

/* Longest cron expression accepted. */
#define CRON_BUF 256

void cmd_recur_add(conn *c, const resp_command *cmd)
{
    server *s = c->srv;
    char name[COMMAND_NAME_BUF], type[COMMAND_NAME_BUF], cron[CRON_BUF], msg[256];
    sluice_recurring_spec spec;
    int64_t v;
    int rc;

    memset(&spec, 0, sizeof spec);
    if (command_arg_str(cmd->argv[1], cmd->argvlen[1], name, sizeof name) != 0 ||
        command_arg_str(cmd->argv[2], cmd->argvlen[2], type, sizeof type) != 0 || !name[0] ||
        !type[0]) {
        resp_error(conn_out(c), "WRONGARGS", "a series or type name is 1 to %d bytes",
                   COMMAND_NAME_BUF - 1);
        return;
    }
    if (cmd->argvlen[3] > s->opt.max_payload_len) {
        resp_error(conn_out(c), "WRONGARGS",
                   "payload of %zu bytes is longer than the maximum of %zu", cmd->argvlen[3],
                   s->opt.max_payload_len);
        return;
    }
    spec.name = name;
    spec.type = type;
    spec.payload = cmd->argv[3];
    spec.payload_len = cmd->argvlen[3];
    for (size_t i = 4; i < cmd->argc; i += 2) {
        const char *a = cmd->argv[i], *val = i + 1 < cmd->argc ? cmd->argv[i + 1] : NULL;
        size_t alen = cmd->argvlen[i], vlen = val ? cmd->argvlen[i + 1] : 0;

        if (!val)
            goto syntax;
        if (command_arg_is(a, alen, "every")) {
            if (command_int_arg(c, "EVERY", val, vlen, 1, SLUICE_MAX_PERIOD_NS / SLUICE_NS_PER_MS,
                                &v) != 0)
                return;
            spec.interval_ns = v * SLUICE_NS_PER_MS;
        } else if (command_arg_is(a, alen, "cron")) {
            if (command_arg_str(val, vlen, cron, sizeof cron) != 0) {
                resp_error(conn_out(c), "WRONGARGS", "CRON is at most %d bytes", CRON_BUF - 1);
                return;
            }
            spec.cron = cron;
        } else if (command_arg_is(a, alen, "key")) {
            if (vlen == 0 || vlen > s->opt.max_key_len) {
                resp_error(conn_out(c), "WRONGARGS", "KEY must be 1 to %zu bytes",
                           s->opt.max_key_len);
                return;
            }
            spec.key = val;
            spec.key_len = vlen;
        } else if (command_arg_is(a, alen, "start")) {
            if (command_int_arg(c, "START", val, vlen, 0, INT64_MAX / SLUICE_NS_PER_MS, &v) != 0)
                return;
            spec.start_ns = v * SLUICE_NS_PER_MS;
        } else if (command_arg_is(a, alen, "end")) {
            if (command_int_arg(c, "END", val, vlen, 0, INT64_MAX / SLUICE_NS_PER_MS, &v) != 0)
                return;
            spec.end_ns = v * SLUICE_NS_PER_MS;
        } else if (command_arg_is(a, alen, "max")) {
            if (command_int_arg(c, "MAX", val, vlen, 0, INT64_MAX, &spec.max_runs) != 0)
                return;
        } else {
            goto syntax;
        }
    }
    if (rstore_active(s)) {
        rrecur_add(c, &spec);
        return;
    }
    rc = sluice_engine_add_recurring(s->engine, &spec, server_now(s), msg, sizeof msg);
    if (rc != 0) {
        reply_engine_error(c, rc, msg);
        return;
    }
    server_engine_changed(s);
    resp_simple(conn_out(c), "OK");
    return;
syntax:
    resp_error(conn_out(c), "WRONGARGS",
               "syntax error: RECUR.ADD name type payload (EVERY ms | CRON expr) [KEY k] "
               "[START unix_ms] [END unix_ms] [MAX n]");
}

void cmd_recur_del(conn *c, const resp_command *cmd)
{
    char name[COMMAND_NAME_BUF];

    if (rstore_active(c->srv) &&
        command_arg_str(cmd->argv[1], cmd->argvlen[1], name, sizeof name) == 0) {
        rrecur_del(c, name);
        return;
    }
    if (command_arg_str(cmd->argv[1], cmd->argvlen[1], name, sizeof name) != 0 ||
        sluice_engine_del_recurring(c->srv->engine, name, server_now(c->srv)) != 0) {
        resp_int(conn_out(c), 0);
        return;
    }
    server_engine_changed(c->srv);
    resp_int(conn_out(c), 1);
}

void cmd_recur_info(conn *c, const resp_command *cmd)
{
    resp_writer *w = conn_out(c);
    char name[COMMAND_NAME_BUF];
    sluice_recurring_info ri;

    if (rstore_active(c->srv) &&
        command_arg_str(cmd->argv[1], cmd->argvlen[1], name, sizeof name) == 0) {
        rrecur_info(c, name);
        return;
    }
    if (command_arg_str(cmd->argv[1], cmd->argvlen[1], name, sizeof name) != 0 ||
        sluice_engine_recurring_info(c->srv->engine, name, &ri) != 0) {
        resp_error(w, "NOTASK", "no recurring series of that name");
        return;
    }
    resp_map(w, 3);
    resp_bulk_str(w, "runs");
    resp_int(w, ri.runs);
    resp_bulk_str(w, "skipped");
    resp_int(w, ri.skipped);
    resp_bulk_str(w, "next_ms");
    resp_int(w, command_time_ms(ri.next_ns));
}
