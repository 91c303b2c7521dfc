/* SPDX-License-Identifier: MIT */
/*
 * DEBUG: hooks for tests, refused unless the server was started with --enable-debug-commands
 * (which also opens the store through the fault-injection VFS, store/faultvfs.h).
 *
 *   DEBUG FAULT WRITE n    the nth write of the store from now fails (EIO), once
 *   DEBUG FAULT SYNC n     the nth fsync of the store from now fails (EIO), once
 *   DEBUG FAULT FULL on|off  every write fails with "disk full" while on
 *   DEBUG FAULT CLEAR      disarms every fault
 *   DEBUG SLEEP ms         blocks the loop for ms (at most 10 s): lets commands pile up into
 *                          one loop turn, to see one commit serve many clients
 *
 * Faults apply to the store's own files only; a store with durability none has no files, so
 * they do nothing there.
 */
#include <inttypes.h>
#include <string.h>
#include <time.h>

#include "server/commands.h"
#include "server/log.h"
#include "store/faultvfs.h"

#define SLEEP_MAX_MS 10000

static const char usage[] =
    "syntax error: DEBUG FAULT WRITE n | FAULT SYNC n | FAULT SLOWSYNC ms | FAULT FULL on|off | "
    "FAULT CLEAR | SLEEP ms";

static void debug_fault(conn *c, const resp_command *cmd)
{
    const char *what = cmd->argv[2];
    size_t wlen = cmd->argvlen[2];
    int64_t n = 0;

    if (cmd->argc == 3 && command_arg_is(what, wlen, "clear")) {
        faultvfs_fail_write(0);
        faultvfs_fail_sync(0);
        faultvfs_disk_full(0);
        faultvfs_slow_sync(0);
    } else if (cmd->argc == 4 && command_arg_is(what, wlen, "full")) {
        if (command_arg_is(cmd->argv[3], cmd->argvlen[3], "on"))
            faultvfs_disk_full(1);
        else if (command_arg_is(cmd->argv[3], cmd->argvlen[3], "off"))
            faultvfs_disk_full(0);
        else
            goto syntax;
    } else if (cmd->argc == 4 && command_arg_is(what, wlen, "slowsync")) {
        if (command_parse_int(cmd->argv[3], cmd->argvlen[3], &n) != 0 || n < 0 || n > 10000) {
            resp_error(conn_out(c), "WRONGARGS", "ms must be an integer from 0 to 10000");
            return;
        }
        faultvfs_slow_sync((long)n);
    } else if (cmd->argc == 4 &&
               (command_arg_is(what, wlen, "write") || command_arg_is(what, wlen, "sync"))) {
        if (command_int_arg(c, "n", cmd->argv[3], cmd->argvlen[3], 0, 1000000, &n) != 0)
            return;
        if (command_arg_is(what, wlen, "write"))
            faultvfs_fail_write((long)n);
        else
            faultvfs_fail_sync((long)n);
    } else {
        goto syntax;
    }
    log_warn("client %" PRIu64 " %s: DEBUG FAULT %.*s%s%.*s", c->id, c->addr, (int)wlen, what,
             cmd->argc == 4 ? " " : "", cmd->argc == 4 ? (int)cmd->argvlen[3] : 0,
             cmd->argc == 4 ? cmd->argv[3] : "");
    resp_simple(conn_out(c), "OK");
    return;
syntax:
    resp_error(conn_out(c), "WRONGARGS", "%s", usage);
}

void cmd_debug(conn *c, const resp_command *cmd)
{
    const char *sub = cmd->argv[1];
    size_t sublen = cmd->argvlen[1];
    int64_t ms;

    if (!c->srv->opt.debug_commands) {
        resp_error(conn_out(c), "ERR",
                   "DEBUG is disabled; start the server with --enable-debug-commands to use it");
        return;
    }
    if (command_arg_is(sub, sublen, "fault") && cmd->argc >= 3) {
        debug_fault(c, cmd);
    } else if (command_arg_is(sub, sublen, "sleep") && cmd->argc == 3) {
        if (command_int_arg(c, "ms", cmd->argv[2], cmd->argvlen[2], 0, SLEEP_MAX_MS, &ms) != 0)
            return;
        struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0)
            ;
        resp_simple(conn_out(c), "OK");
    } else {
        resp_error(conn_out(c), "WRONGARGS", "%s", usage);
    }
}
